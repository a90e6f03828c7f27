//! The zero-copy paths on real descriptor chains and real files: READ data from a file into
//! guest buffers, WRITE data from guest buffers into a file, READDIR records into guest buffers.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};

use fuse_backend_rs::abi::fuse_abi as fa;
use virtio_queue::QueueT;
use vm_memory::{ByteValued, GuestAddress, GuestMemoryMmap};

use super::chain;
use super::dir::{dirent_size, DirentSink};
use super::file::{read_file_into, write_file_from};
use super::tests::{lay_out, publish, read_back, VhostMem, MEM_SIZE};
use crate::passthrough::{DirEntry, Entry};
use crate::temp_dir::TempDir;

/// A scratch file in a temp dir of its own (held for its drop: both are removed with it).
struct Scratch(#[allow(dead_code)] TempDir, File);

impl Scratch {
    fn new(tag: &str, content: &[u8]) -> Self {
        let dir = TempDir::new(&format!("vhostfs-fuse-test-{tag}")).unwrap();
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("file"))
            .unwrap();
        f.write_all(content).unwrap();
        Scratch(dir, f)
    }
}

fn memory() -> VhostMem {
    VhostMem::from_ranges(&[(GuestAddress(0), MEM_SIZE)]).unwrap()
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn read_goes_from_file_into_guest_buffers() {
    let content = pattern(20000);
    let mut file = Scratch::new("read", &content);
    let mem = memory();
    // Reply buffers split unevenly over three descriptors.
    let writable = [16 + 100, 5000, 20000];
    let mut q = publish(&mem, &lay_out(&mem, &[&[0; 40]], &writable));
    let chain = q.pop_descriptor_chain(&mem).unwrap();
    let (_, mut w) = chain::split(&mem, chain).unwrap();
    let mut data = w.split_at(16).unwrap();
    assert_eq!(
        read_file_into(&mut data, &mut file.1, 12000, 1000).unwrap(),
        12000
    );
    let out = read_back(&mem, &writable);
    assert!(
        out[..16].iter().all(|&b| b == 0xa5),
        "header area untouched"
    );
    assert_eq!(&out[16..16 + 12000], &content[1000..13000]);
    assert_eq!(out[16 + 12000], 0xa5, "nothing past the data");
    // Short read at end of file.
    let mut q = publish(&mem, &lay_out(&mem, &[&[0; 40]], &writable));
    let chain = q.pop_descriptor_chain(&mem).unwrap();
    let (_, mut w) = chain::split(&mem, chain).unwrap();
    let mut data = w.split_at(16).unwrap();
    assert_eq!(
        read_file_into(&mut data, &mut file.1, 5000, 18000).unwrap(),
        2000
    );
    assert_eq!(&read_back(&mem, &writable)[16..2016], &content[18000..]);
    // An offset that overflows is EINVAL, not a panic.
    let err = read_file_into(&mut data, &mut file.1, 10, u64::MAX).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
}

#[test]
fn write_goes_from_guest_buffers_into_file() {
    let mut file = Scratch::new("write", &[]);
    let data = pattern(70000);
    let mem = memory();
    // A fuse_write_in-sized prefix, then the data over two descriptors.
    let readable: [&[u8]; 3] = [&[0; 80], &data[..30001], &data[30001..]];
    let mut q = publish(&mem, &lay_out(&mem, &readable, &[16]));
    let chain = q.pop_descriptor_chain(&mem).unwrap();
    let (mut r, _) = chain::split(&mem, chain).unwrap();
    let mut prefix = [0u8; 80];
    r.read_exact(&mut prefix).unwrap();
    assert_eq!(
        write_file_from(&mut r, &mut file.1, data.len(), 4096).unwrap(),
        70000
    );
    let mut back = Vec::new();
    file.1.seek(SeekFrom::Start(0)).unwrap();
    file.1.read_to_end(&mut back).unwrap();
    assert_eq!(back.len(), 4096 + 70000);
    assert!(back[..4096].iter().all(|&b| b == 0));
    assert_eq!(&back[4096..], &data[..]);
}

#[test]
fn readdir_records_fill_guest_buffers() {
    let mem: GuestMemoryMmap<()> =
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM_SIZE)]).unwrap();
    let writable = [16 + 10, 30, 4096];
    for plus in [false, true] {
        let mut q = publish(&mem, &lay_out(&mem, &[&[0; 40]], &writable));
        let chain = q.pop_descriptor_chain(&mem).unwrap();
        let (_, mut w) = chain::split(&mem, chain).unwrap();
        let mut data = w.split_at(16).unwrap();
        // Room for exactly three records of 5-byte names.
        let size = 3 * dirent_size(5, plus) + 7;
        let mut sink = DirentSink::new(&mut data, size, plus);
        // SAFETY: libc::statx is plain integers; all-zero is a valid value.
        let mut entry = Entry {
            nodeid: 77,
            generation: 3,
            attr: unsafe { std::mem::zeroed() },
            attr_flags: 0,
            entry_timeout: std::time::Duration::from_millis(1500),
            attr_timeout: std::time::Duration::from_secs(2),
        };
        entry.attr.stx_ino = 1234;
        let names: [&[u8]; 4] = [b"..", b"file1", b"file2", b"file3"];
        let mut added = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let d = DirEntry {
                ino: 1234 + i as u64,
                off: i as u64 + 1,
                kind: u32::from(libc::DT_REG),
                name,
            };
            let e = (i > 0).then_some(&entry);
            added.push(sink.add(&d, e));
        }
        assert_eq!(added, [true, true, true, false], "plus {plus}");
        let used = sink.used;
        assert_eq!(used, dirent_size(2, plus) + 2 * dirent_size(5, plus));
        let out = read_back(&mem, &writable);
        let recs = &out[16..16 + used];
        assert_eq!(out[16 + used], 0xa5, "the refused record wrote nothing");
        // Walk the records back.
        let mut at = 0;
        let mut seen = Vec::new();
        while at < recs.len() {
            let (eo, rest) = if plus {
                let eo = *fa::EntryOut::from_slice(&recs[at..at + 128]).unwrap();
                (Some(eo), at + 128)
            } else {
                (None, at)
            };
            let d = *fa::Dirent::from_slice(&recs[rest..rest + 24]).unwrap();
            let name = &recs[rest + 24..rest + 24 + d.namelen as usize];
            if let Some(eo) = eo {
                if name == b".." {
                    assert_eq!(eo.nodeid, 0);
                } else {
                    assert_eq!((eo.nodeid, eo.generation, eo.attr.ino), (77, 3, 1234));
                    assert_eq!((eo.entry_valid, eo.entry_valid_nsec), (1, 500_000_000));
                    assert_eq!(eo.attr_valid, 2);
                }
            }
            seen.push((name.to_vec(), d.off));
            at += dirent_size(d.namelen as usize, plus);
        }
        assert_eq!(at, used);
        let expect: Vec<(Vec<u8>, u64)> = names[..3]
            .iter()
            .enumerate()
            .map(|(i, n)| (n.to_vec(), i as u64 + 1))
            .collect();
        assert_eq!(seen, expect);
    }
}
