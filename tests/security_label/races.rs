//! Creations racing for one name, and a host that watches for the moment a new name exists
//! without its label.

use super::*;

/// Two queues creating the same names at once: for each name one creation wins, the other gets
/// EEXIST (a CREATE without O_EXCL would open the winner's file), the winner's label is there,
/// and no staging directory is left behind.
#[test]
fn racing_creations_of_one_name() {
    let s = Session::start_with_queues(&["--security-label"], 2);
    let other = s.client.on_queue(1);
    for op in OPS {
        for round in 0..20 {
            let name = format!("{op:?}-race-{round}");
            let (a, b) = std::thread::scope(|sc| {
                let a = sc.spawn(|| create_labelled(&s.client, op, &name));
                let b = sc.spawn(|| {
                    create(
                        &other,
                        op,
                        &name,
                        &secctx(SELINUX.as_bytes(), b"other_t\0"),
                        Carry::Extlen,
                    )
                });
                (a.join().unwrap(), b.join().unwrap())
            });
            let won = [&a, &b].iter().filter(|r| r.is_ok()).count();
            assert_eq!(won, 1, "{name}: {a:?} {b:?}");
            assert!(a.err().or(b.err()) == Some(libc::EEXIST), "{name}");
            let label = lget(&s.shared.join(&name), SELINUX).unwrap();
            assert!(label == CTX || label == b"other_t\0", "{name}: {label:?}");
        }
    }
    let names = listing(s.shared.path());
    assert_eq!(names.len(), 80, "{names:?}");
    assert!(
        names.iter().all(|n| !n.starts_with(".vhostfs")),
        "{names:?}"
    );
}

/// The invariant itself: while labelled nodes are created over and over, a host thread that
/// keeps looking at the name, and a second request queue that keeps sending LOOKUP and
/// GETXATTR for it, never find it without its label.
#[test]
fn no_window_without_the_label() {
    let s = Session::start_with_queues(&["--security-label"], 2);
    let c = &s.client;
    let prober = c.on_queue(1);
    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(AtomicUsize::new(0));
    let path: PathBuf = s.shared.join("node");
    let host = {
        let (stop, seen, path) = (Arc::clone(&stop), Arc::clone(&seen), path.clone());
        std::thread::spawn(move || {
            let mut unlabelled = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                if fs::symlink_metadata(&path).is_err() {
                    continue;
                }
                match lget(&path, SELINUX) {
                    Ok(v) => {
                        assert_eq!(v, CTX);
                        seen.fetch_add(1, Ordering::Relaxed);
                    }
                    // Removed between the two calls.
                    Err(libc::ENOENT) => {}
                    Err(e) => unlabelled.push(e),
                }
            }
            unlabelled
        })
    };
    let guest = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let (mut labelled, mut unlabelled) = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                let Ok(e) = prober.lookup(FUSE_ROOT_ID, "node") else {
                    continue;
                };
                match prober.getxattr(e.nodeid, SELINUX, 4096) {
                    Ok(XattrReply::Data(v)) if v == CTX => labelled += 1,
                    // The node went away (EBADF/ENOENT/ESTALE) or is a FIFO/symlink (EOPNOTSUPP).
                    Err(libc::ENOENT | libc::ESTALE | libc::EOPNOTSUPP | libc::EBADF) => {}
                    other => {
                        eprintln!("unlabelled: {other:?}");
                        unlabelled += 1
                    }
                }
                prober.forget(e.nodeid, 1);
            }
            (labelled, unlabelled)
        })
    };
    // At least 150 rounds, more (up to 5000) until the host thread has seen the node once: on a
    // loaded machine it may not be scheduled during the first ones.
    let mut round = 0;
    while round < 150 || (seen.load(Ordering::Relaxed) == 0 && round < 5000) {
        let op = OPS[round % OPS.len()];
        round += 1;
        let e = create_labelled(c, op, "node").unwrap();
        c.forget(e.nodeid, 1);
        if op == Op::Mkdir {
            c.rmdir(FUSE_ROOT_ID, "node").unwrap();
        } else {
            c.unlink(FUSE_ROOT_ID, "node").unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let unlabelled_host = host.join().unwrap();
    let (labelled_guest, unlabelled_guest) = guest.join().unwrap();
    assert!(
        unlabelled_host.is_empty(),
        "the host saw the name without its label {} times (errnos {:?})",
        unlabelled_host.len(),
        unlabelled_host
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
    );
    assert_eq!(
        unlabelled_guest, 0,
        "a LOOKUP found the node without its label"
    );
    // The observers did observe (else the test proves nothing).
    assert!(
        seen.load(Ordering::Relaxed) > 0,
        "the host thread never saw the node"
    );
    eprintln!(
        "host saw the labelled node {} times, the guest {labelled_guest}",
        seen.load(Ordering::Relaxed)
    );
    assert!(listing(s.shared.path()).is_empty());
}
