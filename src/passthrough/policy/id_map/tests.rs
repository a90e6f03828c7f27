//! Parsing and translating with each rule form; overlap and syntax errors; ACL values.

use super::*;

fn map(specs: &[&str]) -> IdMap {
    IdMap::parse(specs.iter().copied()).unwrap_or_else(|e| panic!("{specs:?}: {e}"))
}

fn fail(specs: &[&str]) -> String {
    IdMap::parse(specs.iter().copied()).unwrap_err()
}

#[test]
fn empty_is_the_identity() {
    let m = map(&[]);
    assert!(m.is_identity());
    for id in [0, 1, 1000, u32::MAX] {
        assert_eq!(m.to_host(id), Ok(id));
        assert_eq!(m.to_guest(id), id);
    }
}

#[test]
fn each_form() {
    // map: both directions, ids outside the range unchanged.
    let m = map(&["map:0:1000000:65536"]);
    assert_eq!(m.to_host(0), Ok(1000000));
    assert_eq!(m.to_host(65535), Ok(1065535));
    assert_eq!(m.to_host(65536), Ok(65536));
    assert_eq!(m.to_guest(1000000), 0);
    assert_eq!(m.to_guest(1001000), 1000);
    assert_eq!(m.to_guest(999999), 999999);
    // A host id without a guest mapping shows as its own number.
    assert_eq!(m.to_guest(0), 0);

    // guest: one direction only.
    let m = map(&["guest:1000:2000:10"]);
    assert_eq!(m.to_host(1005), Ok(2005));
    assert_eq!(m.to_guest(2005), 2005);

    // host: KubeVirt's line.
    let m = map(&["host:107:0:1"]);
    assert_eq!(m.to_guest(107), 0);
    assert_eq!(m.to_guest(108), 108);
    assert_eq!(m.to_host(0), Ok(0));

    // squash-guest: Docker Desktop's line, everything but u32::MAX.
    let m = map(&["squash-guest:0:1000:4294967295"]);
    for id in [0, 1, 1000, 65534, u32::MAX - 1] {
        assert_eq!(m.to_host(id), Ok(1000));
    }
    assert_eq!(m.to_host(u32::MAX), Ok(u32::MAX));
    assert_eq!(m.to_guest(1000), 1000);
    assert_eq!(m.to_guest(0), 0);

    // squash-host.
    let m = map(&["squash-host:100000:0:65536"]);
    assert_eq!(m.to_guest(100000), 0);
    assert_eq!(m.to_guest(165535), 0);
    assert_eq!(m.to_guest(165536), 165536);
    assert_eq!(m.to_host(0), Ok(0));

    // forbid-guest.
    let m = map(&["forbid-guest:65536:4294901759"]);
    assert_eq!(m.to_host(65536), Err(Forbidden(65536)));
    assert_eq!(m.to_host(u32::MAX - 1), Err(Forbidden(u32::MAX - 1)));
    assert_eq!(m.to_host(65535), Ok(65535));
    assert_eq!(m.to_guest(70000), 70000);
}

#[test]
fn several_rules_per_option() {
    // virtiofsd's README example plus Incus's forbid-guest for the rest.
    let m = map(&["squash-guest:0:1001:4294967295", "host:1001:1000:1"]);
    assert_eq!(m.to_host(1000), Ok(1001));
    assert_eq!(m.to_guest(1001), 1000);
    let m = map(&[
        "map:0:1000000:1000",
        "map:1000:1001000:64536",
        "forbid-guest:65536:4294901759",
        "squash-host:0:65534:1",
    ]);
    assert_eq!(m.to_host(999), Ok(1000999));
    assert_eq!(m.to_host(1000), Ok(1001000));
    assert_eq!(m.to_host(70000), Err(Forbidden(70000)));
    assert_eq!(m.to_guest(1001000), 1000);
    assert_eq!(m.to_guest(0), 65534);
    // Rules given in any order are found.
    let m = map(&["map:50:150:10", "map:0:100:10", "map:20:120:10"]);
    for (g, h) in [(0, 100), (9, 109), (10, 10), (25, 125), (55, 155), (60, 60)] {
        assert_eq!(m.to_host(g), Ok(h), "{g}");
    }
}

#[test]
fn syntax_as_virtiofsd() {
    // Any separator (not alphanumeric, '-' or '_'), the same for all fields; type in any case.
    assert_eq!(map(&["MAP/0/1000/1"]), map(&["map:0:1000:1"]));
    assert_eq!(map(&["Squash-Guest,0,5,2"]), map(&["squash-guest:0:5:2"]));
    // An empty range maps nothing.
    assert!(map(&["map:0:1000:0"]).is_identity());
}

#[test]
fn bad_values_are_one_line_errors() {
    for (spec, want) in [
        (&["user:0:1:1"][..], "'user:0:1:1': unknown type 'user' (expected map, guest, host, squash-guest, squash-host or forbid-guest)"),
        (&["map:0:1"], "'map:0:1': 'map' takes 3 numbers, got 2"),
        (&["forbid-guest:0:1:1"], "'forbid-guest:0:1:1': 'forbid-guest' takes 2 numbers, got 3"),
        (&["map:0:x:1"], "'map:0:x:1': invalid number 'x' (invalid digit found in string)"),
        (&["map:0/1/1"], "'map:0/1/1': invalid number '0/1/1' (invalid digit found in string)"),
        (&["map"], "'map': expected TYPE:BASE:...:COUNT"),
        (&["map:0:1:-1"], "'map:0:1:-1': invalid number '-1' (invalid digit found in string)"),
        (&["map:1:0:4294967295"], "'map:1:0:4294967295': range overflow (1 + 4294967295 > 4294967295)"),
        // map checks its host range too.
        (&["map:0:1:4294967295"], "'map:0:1:4294967295': range overflow (1 + 4294967295 > 4294967295)"),
    ] {
        assert_eq!(fail(spec), want, "{spec:?}");
    }
}

#[test]
fn overlaps_are_refused() {
    assert_eq!(
        fail(&["map:0:1000:10", "guest:5:2000:10"]),
        "'guest:5:2000:10' overlaps 'map:0:1000:10': both map guest ids [5, 10)"
    );
    assert_eq!(
        fail(&["map:0:1000:10", "host:1009:0:1"]),
        "'host:1009:0:1' overlaps 'map:0:1000:10': both map host ids [1009, 1010)"
    );
    assert_eq!(
        fail(&["forbid-guest:100:10", "squash-guest:0:1:101"]),
        "'squash-guest:0:1:101' overlaps 'forbid-guest:100:10': both map guest ids [100, 101)"
    );
    assert_eq!(
        fail(&["squash-host:0:1:10", "squash-host:3:1:2"]),
        "'squash-host:3:1:2' overlaps 'squash-host:0:1:10': both map host ids [3, 5)"
    );
    // Adjacent ranges and the two directions do not overlap.
    map(&["map:0:10:10", "map:10:0:10"]);
    map(&["guest:0:100:10", "host:0:100:10"]);
}

fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = ACL_VERSION.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[test]
fn acl_values_translate_named_entries_only() {
    let maps = IdMaps {
        uid: map(&["map:0:1000000:65536", "forbid-guest:65536:10"]),
        gid: map(&["map:0:2000000:65536"]),
    };
    const OBJ: (u16, u16, u32) = (0x01, 6, u32::MAX);
    let guest = acl(&[
        OBJ,
        (ACL_USER, 7, 1000),
        (0x04, 4, u32::MAX),
        (ACL_GROUP, 5, 100),
        (0x10, 7, u32::MAX),
        (0x20, 4, u32::MAX),
    ]);
    let host = acl(&[
        OBJ,
        (ACL_USER, 7, 1001000),
        (0x04, 4, u32::MAX),
        (ACL_GROUP, 5, 2000100),
        (0x10, 7, u32::MAX),
        (0x20, 4, u32::MAX),
    ]);
    let mut v = guest.clone();
    maps.acl_to_host(&mut v).unwrap();
    assert_eq!(v, host);
    maps.acl_to_guest(&mut v);
    assert_eq!(v, guest);

    let mut forbidden = acl(&[(ACL_USER, 7, 65540)]);
    let e = maps.acl_to_host(&mut forbidden).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM));

    for bad in [vec![], vec![2, 0, 0], acl(&[OBJ])[..9].to_vec(), {
        let mut v = acl(&[OBJ]);
        v[0] = 1;
        v
    }] {
        let mut v = bad.clone();
        let e = maps.acl_to_host(&mut v).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{bad:?}");
        maps.acl_to_guest(&mut v);
        assert_eq!(v, bad);
    }
    assert!(is_acl_name(b"system.posix_acl_access"));
    assert!(is_acl_name(b"system.posix_acl_default"));
    assert!(!is_acl_name(b"user.posix_acl_access"));
}

#[test]
fn stat_owner_to_guest() {
    let maps = IdMaps {
        uid: map(&["host:107:0:1"]),
        gid: map(&["squash-host:100:7:10"]),
    };
    // SAFETY: statx is plain data; all zeroes is a valid value.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    st.stx_uid = 107;
    st.stx_gid = 105;
    maps.stat_to_guest(&mut st);
    assert_eq!((st.stx_uid, st.stx_gid), (0, 7));
}
