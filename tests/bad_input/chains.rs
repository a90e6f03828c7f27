//! Broken descriptor chains and random requests.

use super::common::rng::Rng;
use super::harness::*;

#[test]
fn broken_descriptor_chains() {
    let mut s = Setup::new();
    let mem = s.guest().memory().size();
    let req = s
        .client
        .request(FUSE_GETATTR, ROOT, GetattrIn::default().as_slice());
    let req_buf = s.buf(&req);
    let reply = s.guest().guest_alloc(4096).unwrap();
    let rd = |addr: u64, len: u32, next: bool| RawDesc {
        addr,
        len,
        flags: if next { VIRTQ_DESC_F_NEXT } else { 0 },
        next: Next::Auto,
    };
    let wr = |addr: u64, len: u32, next: bool| RawDesc {
        addr,
        len,
        flags: VIRTQ_DESC_F_WRITE | if next { VIRTQ_DESC_F_NEXT } else { 0 },
        next: Next::Auto,
    };
    let req_len = req.len() as u32;
    let read_reply = |used: u32| parse(unique_of(&req), &reply.read(0, used as usize), "reply");
    let clear = || reply.write(0, &[0; 4096]);

    // Sanity: the well-formed chain gets a GETATTR reply.
    clear();
    let used = s.chain(
        &[
            rd(req_buf.addr(), req_len, true),
            wr(reply.addr(), 4096, false),
        ],
        "good chain",
    );
    assert_eq!(used as usize, HDR + 104);
    assert!(matches!(read_reply(used), Reply::Ok(_)));

    // Buffers outside guest memory, crossing its end, or wrapping around: completed with used
    // length 0 (vhostfs does not even start the request).
    let outside: [(u64, u32); 4] = [
        (mem + 4096, 64),
        (mem - 16, 64),
        (u64::MAX - 8, 64),
        (mem, 1),
    ];
    for (addr, len) in outside {
        let used = s.chain(
            &[rd(addr, len, true), wr(reply.addr(), 4096, false)],
            "readable outside memory",
        );
        assert_eq!(used, 0, "readable {addr:#x}+{len}");
        let used = s.chain(
            &[rd(req_buf.addr(), req_len, true), wr(addr, len, false)],
            "writable outside memory",
        );
        assert_eq!(used, 0, "writable {addr:#x}+{len}");
    }
    // A descriptor spanning two memory regions cannot be built: the test guest has a single
    // memory region (guest_memory.rs), so that case is not covered here.
    s.assert_serving("buffers outside memory");

    // NEXT loops: 0 -> 1 -> 0 and 0 -> 0. virtio-queue stops after queue-size descriptors, so
    // the chain is served as the repeated buffers it describes: the request is read from the
    // first readable bytes and answered into the writable ones.
    let looped = [
        rd(req_buf.addr(), req_len, true),
        RawDesc {
            next: Next::Index(0),
            ..wr(reply.addr(), 4096, true)
        },
    ];
    clear();
    let used = s.chain(&looped, "loop 0 -> 1 -> 0");
    assert_eq!(used as usize, HDR + 104, "loop 0 -> 1 -> 0");
    assert!(matches!(read_reply(used), Reply::Ok(_)));
    let self_loop = [RawDesc {
        next: Next::Index(0),
        ..rd(req_buf.addr(), req_len, true)
    }];
    assert_eq!(s.chain(&self_loop, "loop 0 -> 0"), 0, "no writable buffer");
    // `next` out of the table: the chain ends there (no writable part).
    let out_of_table = [RawDesc {
        next: Next::Raw(QUEUE_SIZE + 5),
        ..rd(req_buf.addr(), req_len, true)
    }];
    assert_eq!(s.chain(&out_of_table, "next out of range"), 0);
    s.assert_serving("NEXT loops");

    // Indirect tables. First a good one, for reference.
    let table = |s: &Setup, entries: &[[u8; 16]]| s.buf(&entries.concat());
    let indirect = |t: &GuestBuf, len: u32| {
        [RawDesc {
            addr: t.addr(),
            len,
            flags: VIRTQ_DESC_F_INDIRECT,
            next: Next::Auto,
        }]
    };
    let good_table = table(
        &s,
        &[
            RawDesc::encode(req_buf.addr(), req_len, VIRTQ_DESC_F_NEXT, 1),
            RawDesc::encode(reply.addr(), 4096, VIRTQ_DESC_F_WRITE, 0),
        ],
    );
    clear();
    let used = s.chain(&indirect(&good_table, 32), "good indirect table");
    assert_eq!(used as usize, HDR + 104);

    // An indirect chain longer than the queue: 1-byte readable pieces of the request, then
    // 1-byte writable pieces. Served (the table's own length bounds it).
    let pieces = req.len() + 200;
    assert!(pieces > QUEUE_SIZE as usize);
    let mut entries = Vec::new();
    for i in 0..req.len() {
        entries.push(RawDesc::encode(
            req_buf.addr() + i as u64,
            1,
            VIRTQ_DESC_F_NEXT,
            (i + 1) as u16,
        ));
    }
    for i in 0..200 {
        let last = i == 199;
        entries.push(RawDesc::encode(
            reply.addr() + i as u64,
            1,
            VIRTQ_DESC_F_WRITE | if last { 0 } else { VIRTQ_DESC_F_NEXT },
            (req.len() + i + 1) as u16,
        ));
    }
    let long_table = table(&s, &entries);
    clear();
    let used = s.chain(
        &indirect(&long_table, (16 * pieces) as u32),
        "indirect chain longer than the queue",
    );
    assert_eq!(used as usize, HDR + 104);
    assert!(matches!(read_reply(used), Reply::Ok(_)));

    // Bogus indirect tables: all completed with used length 0.
    let bad_entry = table(
        &s,
        &[
            RawDesc::encode(req_buf.addr(), req_len, VIRTQ_DESC_F_NEXT, 1),
            RawDesc::encode(mem + 4096, 4096, VIRTQ_DESC_F_WRITE, 0),
        ],
    );
    let nested_target = table(
        &s,
        &[RawDesc::encode(reply.addr(), 4096, VIRTQ_DESC_F_WRITE, 0)],
    );
    let nested = table(
        &s,
        &[
            RawDesc::encode(req_buf.addr(), req_len, VIRTQ_DESC_F_NEXT, 1),
            RawDesc::encode(nested_target.addr(), 16, VIRTQ_DESC_F_INDIRECT, 0),
        ],
    );
    let next_out = table(
        &s,
        &[
            RawDesc::encode(req_buf.addr(), req_len, VIRTQ_DESC_F_NEXT, 7),
            RawDesc::encode(reply.addr(), 4096, VIRTQ_DESC_F_WRITE, 0),
        ],
    );
    let table_loop = table(
        &s,
        &[
            RawDesc::encode(req_buf.addr(), req_len, VIRTQ_DESC_F_NEXT, 1),
            RawDesc::encode(req_buf.addr(), req_len, VIRTQ_DESC_F_NEXT, 0),
        ],
    );
    let cases: Vec<(&str, [RawDesc; 1])> = vec![
        ("entry outside memory", indirect(&bad_entry, 32)),
        ("nested indirect", indirect(&nested, 32)),
        ("next outside the table", indirect(&next_out, 32)),
        ("loop inside the table", indirect(&table_loop, 32)),
        (
            "table length not a multiple of 16",
            indirect(&good_table, 20),
        ),
        ("empty table", indirect(&good_table, 0)),
        (
            "table outside memory",
            [RawDesc {
                addr: mem + 4096,
                len: 32,
                flags: VIRTQ_DESC_F_INDIRECT,
                next: Next::Auto,
            }],
        ),
        (
            "table crossing the end of memory",
            [RawDesc {
                addr: mem - 16,
                len: 32,
                flags: VIRTQ_DESC_F_INDIRECT,
                next: Next::Auto,
            }],
        ),
    ];
    for (what, descs) in cases {
        assert_eq!(s.chain(&descs, what), 0, "{what}");
    }
    s.assert_serving("indirect tables");

    // No writable descriptor: nothing can be answered.
    assert_eq!(
        s.chain(&[rd(req_buf.addr(), req_len, false)], "no writable"),
        0
    );
    // An 8-byte writable descriptor: too short for a reply header.
    assert_eq!(
        s.chain(
            &[
                rd(req_buf.addr(), req_len, true),
                wr(reply.addr(), 8, false)
            ],
            "8-byte reply buffer"
        ),
        0
    );
    // Readable after writable: served as if the readable parts came first.
    let split = 20u32;
    let tail = s.buf(&req[split as usize..]);
    clear();
    let used = s.chain(
        &[
            rd(req_buf.addr(), split, true),
            wr(reply.addr(), 4096, true),
            rd(tail.addr(), req_len - split, false),
        ],
        "readable after writable",
    );
    assert_eq!(used as usize, HDR + 104);
    assert!(matches!(read_reply(used), Reply::Ok(_)));
    s.assert_serving("odd chains");

    // State-creating requests whose reply cannot be written must not leave fds behind: OPEN
    // and OPENDIR with no or a too-short reply buffer, many times.
    let open = s.client.request(
        FUSE_OPEN,
        s.nodes.file,
        OpenIn {
            flags: libc::O_RDONLY as u32,
            fuse_flags: 0,
        }
        .as_slice(),
    );
    let opendir = s
        .client
        .request(FUSE_OPENDIR, s.nodes.dir, OpenIn::default().as_slice());
    let open_buf = s.buf(&open);
    let opendir_buf = s.buf(&opendir);
    for _ in 0..(FD_SLACK * 4) {
        for b in [&open_buf, &opendir_buf] {
            assert_eq!(
                s.chain(&[rd(b.addr(), b.len() as u32, false)], "open, no reply"),
                0
            );
            let used = s.chain(
                &[
                    rd(b.addr(), b.len() as u32, true),
                    wr(reply.addr(), HDR as u32, false),
                ],
                "open, header-sized reply",
            );
            assert!(used == 0 || used as usize == HDR, "used {used}");
        }
    }
    s.assert_serving("opens without reply space");
    s.finish("descriptor chains");
}

#[test]
fn random_requests() {
    const REQUESTS: usize = 3000;
    let seed = 0x5eed_0fba_d149_u64;
    let mut rng = Rng(seed);
    let mut s = Setup::new();
    let real = [ROOT, s.nodes.file, s.nodes.dir, s.nodes.escape];
    let name_chars = b"ab./\0";
    // Replies by kind, to check that the requests reach the handlers, not only the parser.
    let (mut oks, mut errnos) = (0, std::collections::BTreeSet::new());
    for i in 0..REQUESTS {
        let opcode = match rng.below(10) {
            0 => rng.next() as u32,
            1 => rng.pick(&[0, 7, 19, 53, 9999, u32::MAX]),
            _ => 1 + rng.below(u64::from(FUSE_STATX)) as u32,
        };
        let nodeid = match rng.below(10) {
            0..=4 => rng.pick(&real),
            5 | 6 => rng.below(64),
            _ => rng.next(),
        };
        // A body: the opcode's struct (random bytes), then maybe names, or just random bytes.
        let mut body = match body_struct(opcode) {
            Some(n) if rng.chance(70) => rng.bytes(n),
            _ => {
                let n = rng.below(128) as usize;
                rng.bytes(n)
            }
        };
        for _ in 0..rng.below(3) {
            let n = rng.below(6) as usize;
            body.extend((0..n).map(|_| rng.pick(name_chars)));
            body.push(0);
        }
        let extlen = if rng.chance(90) { 0 } else { rng.next() as u16 };
        let mut req = s.client.request_with_ext(opcode, nodeid, &body, extlen);
        match rng.below(10) {
            0 => req[0..4].copy_from_slice(&(rng.next() as u32).to_le_bytes()),
            1 => {
                let len = (req.len() as u32)
                    .wrapping_add(rng.below(16) as u32)
                    .wrapping_sub(8);
                req[0..4].copy_from_slice(&len.to_le_bytes());
            }
            _ => {}
        }
        if rng.chance(20) {
            // Random credentials.
            req[24..32].copy_from_slice(&rng.bytes(8));
        }
        let reply_len = rng.pick(&[0, 8, 16, 64, 200, 4096, 70_000]);
        let what = format!("random request {i} (seed {seed:#x}): opcode {opcode} node {nodeid:#x}");
        let reply = s.send(&req, reply_len, &what);
        match &reply {
            Reply::Ok(_) => oks += 1,
            Reply::Err(e) => {
                errnos.insert(*e);
            }
            Reply::Empty => {}
        }
        if matches!(reply, Reply::Ok(_))
            && matches!(
                opcode,
                FUSE_OPEN | FUSE_OPENDIR | FUSE_CREATE | FUSE_TMPFILE
            )
        {
            s.held_fds += 1;
        }
        if matches!(opcode, FUSE_DESTROY | FUSE_INIT)
            && s.client.getattr(ROOT, None).err() == Some(libc::EIO)
        {
            // The request ended the session (its reply may not have fit): start a new one.
            // Ending a session releases every handle.
            s.held_fds = 0;
            s.client.init().expect("INIT after a random DESTROY");
        }
        if i % 500 == 499 {
            s.assert_serving(&format!("after {} random requests", i + 1));
        }
    }
    assert!(oks >= REQUESTS / 100, "only {oks} successful replies");
    for errno in [libc::EINVAL, libc::ENOSYS, libc::EBADF, libc::ENOENT] {
        assert!(errnos.contains(&errno), "no errno {errno} among {errnos:?}");
    }
    s.finish("random requests");
}
