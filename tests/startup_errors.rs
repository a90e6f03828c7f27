//! Start-up failures of the `vhostfs` binary: each bad command line or environment makes it exit
//! non-zero within seconds, with exactly one line on stderr that starts with `vhostfs: error:`
//! and names the problem. Also `--print-capabilities` (valid JSON, "type": "fs") and `--version`.

mod common;

use std::fs::File;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::daemon::{run_with_timeout, Outcome};
use common::{spawn_vhostfs, TempDir};

/// How long a failing start may take.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `vhostfs args...` with `stdin` (null if `None`), kills it if it has not exited within
/// [`EXIT_TIMEOUT`] (a test failure), and collects its output.
fn run_with_stdin(args: &[String], stdin: Option<File>) -> Outcome {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vhostfs"));
    cmd.args(args)
        .stdin(stdin.map_or_else(Stdio::null, Stdio::from))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    run_with_timeout(&mut cmd, EXIT_TIMEOUT)
        .unwrap_or_else(|| panic!("vhostfs {args:?} still running after {EXIT_TIMEOUT:?}"))
}

fn run(args: &[String]) -> Outcome {
    run_with_stdin(args, None)
}

/// Asserts a failed start: non-zero exit, nothing on stdout, one stderr line starting with
/// `vhostfs: error:` that contains every string of `needles`. Returns that line.
fn assert_one_line_error(args: &[String], needles: &[&str]) -> String {
    let out = run(args);
    check_one_line_error(args, &out, needles)
}

fn check_one_line_error(args: &[String], out: &Outcome, needles: &[&str]) -> String {
    assert!(
        !out.status.success() && out.status.code().is_some(),
        "vhostfs {args:?} exited with {} (stderr {:?})",
        out.status,
        out.stderr
    );
    assert_eq!(out.stdout, "", "vhostfs {args:?} wrote to stdout");
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "vhostfs {args:?}: expected one stderr line, got {:?}",
        out.stderr
    );
    let line = lines[0];
    assert!(
        line.starts_with("vhostfs: error: "),
        "vhostfs {args:?}: stderr line {line:?} lacks the `vhostfs: error: ` prefix"
    );
    for needle in needles {
        assert!(
            line.contains(needle),
            "vhostfs {args:?}: stderr line {line:?} does not mention {needle:?}"
        );
    }
    line.to_string()
}

/// A socket directory and a valid shared directory for one test.
struct Dirs {
    sock: TempDir,
    shared: TempDir,
}

impl Dirs {
    fn new() -> Dirs {
        Dirs {
            sock: TempDir::new("startup-sock").unwrap(),
            shared: TempDir::new("startup-shared").unwrap(),
        }
    }

    fn socket_arg(&self) -> String {
        format!("--socket-path={}", self.sock.join("vhostfs.sock").display())
    }

    fn shared_arg(&self) -> String {
        format!("--shared-dir={}", self.shared.path().display())
    }

    /// The two required options plus `extra`.
    fn args(&self, extra: &[&str]) -> Vec<String> {
        let mut v = vec![self.socket_arg(), self.shared_arg()];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    }

    /// A failed start leaves no socket behind.
    fn assert_no_socket(&self) {
        let sock = self.sock.join("vhostfs.sock");
        assert!(!sock.exists(), "{} left behind", sock.display());
    }
}

#[test]
fn missing_shared_dir() {
    let d = Dirs::new();
    let missing = d.shared.join("does-not-exist");
    let args = vec![
        d.socket_arg(),
        format!("--shared-dir={}", missing.display()),
    ];
    assert_one_line_error(
        &args,
        &[
            "shared directory",
            &missing.display().to_string(),
            "No such file",
        ],
    );
    d.assert_no_socket();
}

#[test]
fn shared_dir_is_a_file() {
    let d = Dirs::new();
    let file = d.shared.join("plain-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let args = vec![d.socket_arg(), format!("--shared-dir={}", file.display())];
    assert_one_line_error(&args, &[&file.display().to_string(), "not a directory"]);
    d.assert_no_socket();
}

#[test]
fn bad_inode_file_handles_value() {
    let d = Dirs::new();
    assert_one_line_error(
        &d.args(&["--inode-file-handles=bogus"]),
        &["'bogus'", "--inode-file-handles", "expected one of"],
    );
    d.assert_no_socket();
}

#[test]
fn bad_cache_value() {
    let d = Dirs::new();
    assert_one_line_error(&d.args(&["--cache=x"]), &["'x'", "--cache"]);
    d.assert_no_socket();
}

#[test]
fn unknown_option() {
    let d = Dirs::new();
    assert_one_line_error(
        &d.args(&["--no-such-option"]),
        &["unexpected argument", "--no-such-option"],
    );
    d.assert_no_socket();
}

#[test]
fn bad_xattrmap() {
    let d = Dirs::new();
    for (map, needles) in [
        (
            ":prefix:all::user.x.",
            &["--xattrmap", "rule 1", "incomplete"][..],
        ),
        (
            ":ok:all::: :nope:all:::",
            &["--xattrmap", "rule 2", "'nope'"],
        ),
        ("/ok/anywhere///", &["--xattrmap", "'anywhere'"]),
        (":map::a.::ok:all:::", &["--xattrmap", "'map'", "last"]),
    ] {
        assert_one_line_error(&d.args(&[&format!("--xattrmap={map}")]), needles);
    }
    d.assert_no_socket();
}

#[test]
fn bad_thread_pool_size() {
    let d = Dirs::new();
    assert_one_line_error(
        &d.args(&["--thread-pool-size=many"]),
        &["--thread-pool-size"],
    );
    d.assert_no_socket();
}

#[test]
fn tag_too_long() {
    let d = Dirs::new();
    let tag = format!("--tag={}", "t".repeat(37));
    assert_one_line_error(&d.args(&[&tag]), &["--tag", "36 bytes"]);
    d.assert_no_socket();
}

#[test]
fn fd_not_a_socket() {
    let d = Dirs::new();
    // fd 0 of the child is a regular file.
    let file = d.shared.join("stdin-file");
    std::fs::write(&file, b"x").unwrap();
    let args = vec!["--fd=0".to_string(), d.shared_arg()];
    let out = run_with_stdin(&args, Some(File::open(&file).unwrap()));
    check_one_line_error(&args, &out, &["'0'", "--fd", "not a socket"]);
}

#[test]
fn fd_not_open() {
    let d = Dirs::new();
    let args = vec!["--fd=987".to_string(), d.shared_arg()];
    assert_one_line_error(&args, &["'987'", "--fd", "not an open file descriptor"]);
}

#[test]
fn second_instance_on_the_same_socket() {
    let d = Dirs::new();
    let socket = d.sock.join("vhostfs.sock");
    let mut first = spawn_vhostfs(&socket, d.shared.path(), &[]).expect("first instance");
    let line = assert_one_line_error(&d.args(&[]), &["another instance", "vhostfs.sock.pid"]);
    assert!(
        line.contains(&format!("pid {}", first.pid())),
        "{line:?} does not name the first instance's pid {}",
        first.pid()
    );
    assert!(first.is_alive(), "the first instance died");
    assert!(socket.exists(), "the first instance's socket is gone");
}

#[test]
fn version() {
    let out = run(&["--version".to_string()]);
    assert!(out.status.success(), "--version exited with {}", out.status);
    assert_eq!(out.stderr, "");
    assert_eq!(
        out.stdout.trim_end(),
        format!("vhostfs {}", env!("CARGO_PKG_VERSION")),
    );
}

#[test]
fn print_capabilities() {
    let out = run(&["--print-capabilities".to_string()]);
    assert!(
        out.status.success(),
        "--print-capabilities exited with {}",
        out.status
    );
    assert_eq!(out.stderr, "");
    let value = json::parse(&out.stdout)
        .unwrap_or_else(|e| panic!("--print-capabilities: invalid JSON ({e}): {}", out.stdout));
    let json::Value::Object(fields) = &value else {
        panic!("--print-capabilities: not a JSON object: {}", out.stdout);
    };
    let ty = fields.iter().find(|(k, _)| k == "type").map(|(_, v)| v);
    assert_eq!(
        ty,
        Some(&json::Value::String("fs".into())),
        "{}",
        out.stdout
    );
}

/// A small JSON parser (RFC 8259 syntax; numbers as Rust parses `f64`), enough to validate
/// `--print-capabilities`.
mod json {
    #[derive(Debug, PartialEq)]
    pub enum Value {
        Null,
        Bool(bool),
        Number(f64),
        String(String),
        Array(Vec<Value>),
        Object(Vec<(String, Value)>),
    }

    /// Parses one JSON value with optional surrounding whitespace.
    pub fn parse(text: &str) -> Result<Value, String> {
        let mut p = Parser {
            s: text.as_bytes(),
            i: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.i != p.s.len() {
            return Err(format!("trailing data at byte {}", p.i));
        }
        Ok(v)
    }

    struct Parser<'a> {
        s: &'a [u8],
        i: usize,
    }

    impl Parser<'_> {
        fn ws(&mut self) {
            while matches!(self.s.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                self.i += 1;
            }
        }

        fn err<T>(&self, what: &str) -> Result<T, String> {
            Err(format!("{what} at byte {}", self.i))
        }

        fn eat(&mut self, b: u8) -> Result<(), String> {
            if self.s.get(self.i) == Some(&b) {
                self.i += 1;
                Ok(())
            } else {
                self.err(&format!("expected {:?}", b as char))
            }
        }

        fn literal(&mut self, word: &str, v: Value) -> Result<Value, String> {
            if self.s[self.i..].starts_with(word.as_bytes()) {
                self.i += word.len();
                Ok(v)
            } else {
                self.err("unknown literal")
            }
        }

        fn value(&mut self) -> Result<Value, String> {
            self.ws();
            match self.s.get(self.i) {
                Some(b'{') => self.object(),
                Some(b'[') => self.array(),
                Some(b'"') => self.string().map(Value::String),
                Some(b't') => self.literal("true", Value::Bool(true)),
                Some(b'f') => self.literal("false", Value::Bool(false)),
                Some(b'n') => self.literal("null", Value::Null),
                Some(b'-' | b'0'..=b'9') => self.number(),
                _ => self.err("expected a value"),
            }
        }

        fn object(&mut self) -> Result<Value, String> {
            self.eat(b'{')?;
            let mut fields = Vec::new();
            self.ws();
            if self.eat(b'}').is_ok() {
                return Ok(Value::Object(fields));
            }
            loop {
                self.ws();
                let k = self.string()?;
                self.ws();
                self.eat(b':')?;
                fields.push((k, self.value()?));
                self.ws();
                if self.eat(b',').is_err() {
                    self.eat(b'}')?;
                    return Ok(Value::Object(fields));
                }
            }
        }

        fn array(&mut self) -> Result<Value, String> {
            self.eat(b'[')?;
            let mut items = Vec::new();
            self.ws();
            if self.eat(b']').is_ok() {
                return Ok(Value::Array(items));
            }
            loop {
                items.push(self.value()?);
                self.ws();
                if self.eat(b',').is_err() {
                    self.eat(b']')?;
                    return Ok(Value::Array(items));
                }
            }
        }

        fn string(&mut self) -> Result<String, String> {
            self.eat(b'"')?;
            let mut out = Vec::new();
            loop {
                match self.s.get(self.i).copied() {
                    None => return self.err("unterminated string"),
                    Some(b'"') => {
                        self.i += 1;
                        return String::from_utf8(out).map_err(|e| e.to_string());
                    }
                    Some(b'\\') => {
                        let c = match self.s.get(self.i + 1) {
                            Some(b'"') => '"',
                            Some(b'\\') => '\\',
                            Some(b'/') => '/',
                            Some(b'b') => '\u{8}',
                            Some(b'f') => '\u{c}',
                            Some(b'n') => '\n',
                            Some(b'r') => '\r',
                            Some(b't') => '\t',
                            Some(b'u') => {
                                let hex = self
                                    .s
                                    .get(self.i + 2..self.i + 6)
                                    .and_then(|h| std::str::from_utf8(h).ok())
                                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                                    .and_then(char::from_u32);
                                match hex {
                                    Some(c) => {
                                        self.i += 4;
                                        c
                                    }
                                    None => return self.err("bad \\u escape"),
                                }
                            }
                            _ => return self.err("bad escape"),
                        };
                        self.i += 2;
                        let mut buf = [0; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                    }
                    Some(c) if c < 0x20 => return self.err("control character in string"),
                    Some(c) => {
                        out.push(c);
                        self.i += 1;
                    }
                }
            }
        }

        fn number(&mut self) -> Result<Value, String> {
            let start = self.i;
            while matches!(
                self.s.get(self.i),
                Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
            ) {
                self.i += 1;
            }
            let text = std::str::from_utf8(&self.s[start..self.i]).unwrap();
            text.parse()
                .map(Value::Number)
                .or_else(|_| self.err("bad number"))
        }
    }

    #[test]
    fn rejects_invalid_json() {
        for bad in [
            "",
            "{",
            "{\"type\" \"fs\"}",
            "{\"a\":1,}",
            "[1 2]",
            "\"x",
            "{} x",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(
            parse(" {\"a\": [true, null, -1.5e2, \"\\u0041\"]} ").unwrap(),
            Value::Object(vec![(
                "a".into(),
                Value::Array(vec![
                    Value::Bool(true),
                    Value::Null,
                    Value::Number(-150.0),
                    Value::String("A".into())
                ])
            )])
        );
    }
}
