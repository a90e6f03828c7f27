//! `vhostfs-gen OUTDIR`: writes the man page (`OUTDIR/man1/vhostfs.1`) and the shell completions
//! (`OUTDIR/completions/vhostfs.bash`, `_vhostfs`, `vhostfs.fish`), generated from vhostfs's
//! command line. Built with `--features gen`; run by `contrib/install.sh`.

use std::fs;
use std::io;
use std::path::PathBuf;

use clap_complete::Shell;

fn main() -> io::Result<()> {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "usage: vhostfs-gen OUTDIR"))?;
    let cmd = vhostfs::cli::command();

    let man_dir = out.join("man1");
    fs::create_dir_all(&man_dir)?;
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    fs::write(man_dir.join("vhostfs.1"), page)?;
    println!("{}", man_dir.join("vhostfs.1").display());

    let completions = out.join("completions");
    fs::create_dir_all(&completions)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(shell, &mut cmd.clone(), "vhostfs", &completions)?;
        println!("{}", path.display());
    }
    Ok(())
}
