//! The byte format of a saved FUSE session: an envelope around a body of fields.
//!
//! Envelope: the magic `VHOSTFS\0`, the format version (u32), the body's length (u64), the body,
//! and the CRC-32 (IEEE) of the body (u32); all integers little-endian. A stream is accepted
//! only whole: exactly that many bytes, the right magic, a version this build reads and a
//! matching checksum. In the body every field is a fixed-width integer or a length-prefixed
//! byte string, and a [`Decoder`] fails with `InvalidData` on anything that does not fit (a
//! length past the end, a count larger than the bytes left could hold), so a corrupt stream is
//! an error, never a panic or a huge allocation.
//!
//! Hand-written rather than serde + a format crate: the state is a few flat lists of integers
//! and byte strings, serde is not in the daemon's dependencies, and a format that checks every
//! length itself is what the loader needs anyway.

use std::io::{self, Read, Write};

const MAGIC: &[u8; 8] = b"VHOSTFS\0";
/// The format version written, and the only one read.
pub const VERSION: u32 = 1;
/// Bytes of magic, version and length before the body.
const HEADER: usize = 8 + 4 + 8;
/// A stream larger than this is refused before it is read whole (a million inodes with long
/// paths fit in well under it).
const MAX_STREAM: u64 = 1 << 32;

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// CRC-32 (IEEE 802.3, reflected, as zlib's `crc32`).
fn crc32(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        t
    });
    !data.iter().fold(!0u32, |c, &b| {
        table[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8)
    })
}

/// Builds a body; [`Encoder::finish`] writes it in its envelope.
#[derive(Default)]
pub struct Encoder {
    body: Vec<u8>,
}

impl Encoder {
    pub fn u8(&mut self, v: u8) {
        self.body.push(v);
    }

    pub fn u32(&mut self, v: u32) {
        self.body.extend_from_slice(&v.to_le_bytes());
    }

    pub fn i32(&mut self, v: i32) {
        self.body.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.body.extend_from_slice(&v.to_le_bytes());
    }

    pub fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.body.extend_from_slice(v);
    }

    /// A section's tag: four bytes naming the layer whose fields follow.
    pub fn tag(&mut self, tag: &[u8; 4]) {
        self.body.extend_from_slice(tag);
    }

    /// Writes magic, version, length, body and checksum to `w`; returns the bytes written.
    pub fn finish(self, w: &mut dyn Write) -> io::Result<usize> {
        let mut head = Vec::with_capacity(HEADER);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&VERSION.to_le_bytes());
        head.extend_from_slice(&(self.body.len() as u64).to_le_bytes());
        w.write_all(&head)?;
        w.write_all(&self.body)?;
        w.write_all(&crc32(&self.body).to_le_bytes())?;
        w.flush()?;
        Ok(HEADER + self.body.len() + 4)
    }
}

/// Reads a whole stream from `r` (to EOF) and returns its body, checked: see the module doc.
pub fn read_envelope(r: &mut dyn Read) -> io::Result<Vec<u8>> {
    let mut all = Vec::new();
    r.take(MAX_STREAM + 1).read_to_end(&mut all)?;
    if all.len() as u64 > MAX_STREAM {
        return Err(invalid("state stream larger than 4 GiB"));
    }
    if all.len() < HEADER + 4 || &all[..8] != MAGIC {
        return Err(invalid(
            "not a vhostfs state stream (bad magic or too short)",
        ));
    }
    let version = u32::from_le_bytes(all[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(invalid(format!(
            "state stream version {version}; this vhostfs reads version {VERSION}"
        )));
    }
    let len = u64::from_le_bytes(all[12..20].try_into().expect("8 bytes"));
    if len != (all.len() - HEADER - 4) as u64 {
        return Err(invalid(format!(
            "state stream truncated or padded: {} body bytes, header says {len}",
            all.len() - HEADER - 4
        )));
    }
    let crc_at = all.len() - 4;
    let crc = u32::from_le_bytes(all[crc_at..].try_into().expect("4 bytes"));
    if crc != crc32(&all[HEADER..crc_at]) {
        return Err(invalid("state stream checksum mismatch"));
    }
    all.truncate(crc_at);
    all.drain(..HEADER);
    Ok(all)
}

/// Reads a body's fields in order; every read is bounds-checked.
pub struct Decoder<'a> {
    buf: &'a [u8],
}

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8]) -> Decoder<'a> {
        Decoder { buf }
    }

    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if n > self.buf.len() {
            return Err(invalid("state stream ends inside a field"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    pub fn i32(&mut self) -> io::Result<i32> {
        Ok(i32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    pub fn u64(&mut self) -> io::Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }

    pub fn bytes(&mut self) -> io::Result<&'a [u8]> {
        let n = self.u64()?;
        let n = usize::try_from(n).map_err(|_| invalid("field length overflows"))?;
        self.take(n)
    }

    /// A count of records at least `min_size` bytes each: refused when the bytes left could not
    /// hold that many (so a corrupt count never sizes an allocation).
    pub fn count(&mut self, min_size: usize) -> io::Result<usize> {
        let n = self.u64()?;
        match usize::try_from(n) {
            Ok(n) if n.saturating_mul(min_size.max(1)) <= self.buf.len() => Ok(n),
            _ => Err(invalid(format!("record count {n} exceeds the stream"))),
        }
    }

    /// Expects the section tag `tag`.
    pub fn tag(&mut self, tag: &[u8; 4]) -> io::Result<()> {
        let got = self.take(4)?;
        if got != tag {
            return Err(invalid(format!(
                "expected section {:?}, found {:?}",
                String::from_utf8_lossy(tag),
                String::from_utf8_lossy(got)
            )));
        }
        Ok(())
    }

    /// Whether every byte was read.
    pub fn at_end(&self) -> bool {
        self.buf.is_empty()
    }

    /// Fails unless every byte was read.
    pub fn end(&self) -> io::Result<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(invalid(format!(
                "{} unexpected bytes at the end of the state",
                self.buf.len()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream() -> Vec<u8> {
        let mut e = Encoder::default();
        e.tag(b"TEST");
        e.u32(7);
        e.bytes(b"abc");
        e.u64(u64::MAX);
        let mut out = Vec::new();
        e.finish(&mut out).unwrap();
        out
    }

    #[test]
    fn roundtrip_and_crc() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        let body = read_envelope(&mut &stream()[..]).unwrap();
        let mut d = Decoder::new(&body);
        d.tag(b"TEST").unwrap();
        assert_eq!(d.u32().unwrap(), 7);
        assert_eq!(d.bytes().unwrap(), b"abc");
        assert_eq!(d.u64().unwrap(), u64::MAX);
        d.end().unwrap();
        assert!(d.u8().is_err());
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused() {
        let s = stream();
        for n in 0..s.len() {
            assert!(read_envelope(&mut &s[..n]).is_err(), "truncated at {n}");
        }
        for i in 0..s.len() {
            let mut bad = s.clone();
            bad[i] ^= 0x40;
            assert!(read_envelope(&mut &bad[..]).is_err(), "byte {i} flipped");
        }
        let mut padded = s.clone();
        padded.push(0);
        assert!(read_envelope(&mut &padded[..]).is_err());
    }

    #[test]
    fn lengths_and_counts_past_the_end_are_errors() {
        let mut d = Decoder::new(&[0xff; 8]);
        assert!(d.bytes().is_err());
        let mut d = Decoder::new(&[1, 0, 0, 0, 0, 0, 0, 0x10, 0]);
        assert!(d.count(1).is_err());
        let two = [2u8, 0, 0, 0, 0, 0, 0, 0, 1, 2];
        assert_eq!(Decoder::new(&two).count(1).unwrap(), 2);
        assert!(Decoder::new(&two).count(2).is_err());
    }
}
