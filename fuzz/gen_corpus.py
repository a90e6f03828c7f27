#!/usr/bin/env python3
"""Writes the seed corpus of the dispatcher fuzz target (fuzz/corpus/dispatcher/seed-*).

Input format: see fuzz/harness.rs. Node IDs and fhs handed out earlier in the same input are
referred to by patches (src = k-th most recent node ID, 0x80 | k for fhs)."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "dispatcher")
(LOOKUP, FORGET, GETATTR, SETATTR, READLINK, SYMLINK, MKNOD, MKDIR, UNLINK, RMDIR, RENAME,
 LINK, OPEN, READ, WRITE, STATFS, RELEASE) = (1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15,
                                              16, 17, 18)
FSYNC, SETXATTR, GETXATTR, LISTXATTR, REMOVEXATTR, FLUSH, INIT = 20, 21, 22, 23, 24, 25, 26
OPENDIR, READDIR, RELEASEDIR, FSYNCDIR, ACCESS, CREATE, INTERRUPT = 27, 28, 29, 30, 34, 35, 36
DESTROY, BATCH_FORGET, FALLOCATE, READDIRPLUS, RENAME2, LSEEK = 38, 42, 43, 44, 45, 46
COPY_FILE_RANGE, SYNCFS, TMPFILE, STATX, GETLK, IOCTL = 47, 50, 51, 52, 31, 39

NODE = lambda k=0: k          # patch source: the k-th most recent node ID
FH = lambda k=0: 0x80 | k     # ... or fh
HDR_NODE, BODY = 16, 40


def req(op, unique, nodeid=1, body=b"", uid=0, gid=0):
    return struct.pack("<IIQQIIIHH", 40 + len(body), op, unique, nodeid, uid, gid, 7, 0, 0) + body


def chain(request, patches=(), records=()):
    out = bytes([(len(patches) << 4) | len(records)])
    for off, src in patches:
        out += bytes([off, src])
    for kind, a, b in records:
        out += struct.pack("<BBH", kind, a, b)
    return out + struct.pack("<H", len(request)) + request


def name(*names):
    return b"".join(n.encode() + b"\0" for n in names)


def read_in(off=0, size=4096, op_flags=0):
    return struct.pack("<QQIIQII", 0, off, size, op_flags, 0, 0, 0)


def setattr_in(valid, size=0, mode=0, uid=0, gid=0, atime=0, mtime=0):
    return struct.pack("<IIQQQQQQIIIIIIII", valid, 0, 0, size, 0, atime, mtime, 0, 0, 0, 0,
                       mode, 0, uid, gid, 0)


def lookup(n, u, parent=None):
    if parent is None:
        return chain(req(LOOKUP, u, 1, name(n)))
    return chain(req(LOOKUP, u, 0, name(n)), [(HDR_NODE, parent)])


def on_node(op, u, body=b"", k=0, extra=()):
    return chain(req(op, u, 0, body), [(HDR_NODE, NODE(k))] + list(extra))


def on_fh(op, u, body, k=0, node=True, fh_off=BODY):
    p = [(fh_off, FH(k))] + ([(HDR_NODE, NODE(0))] if node else [])
    return chain(req(op, u, 0 if node else 1, body), p)


def open_file(u, n="file", flags=os.O_RDWR):
    return [lookup(n, u), on_node(OPEN, u + 1, struct.pack("<II", flags, 0))]


seeds = {}
init_in = lambda minor, flags, flags2: struct.pack("<IIIII44x", 7, minor, 0x20000, flags, flags2)
seeds["init-31"] = [chain(req(INIT, 5, 0, init_in(31, 0xffffffff, 0)))]
seeds["init-old"] = [chain(req(INIT, 5, 0, struct.pack("<IIII", 7, 27, 0, 0)))]
seeds["init-bad-major"] = [chain(req(INIT, 5, 0, init_in(0, 0, 0)[:8]))]
seeds["destroy-then-op"] = [chain(req(DESTROY, 5)), chain(req(STATFS, 6))]
seeds["lookup"] = [lookup("file", 10), lookup("dir", 11), lookup("inner", 12, NODE(0)),
                   lookup("missing", 13), lookup("..", 14), lookup("up", 15)]
seeds["getattr"] = [lookup("file", 10), on_node(GETATTR, 11, struct.pack("<IIQ", 0, 0, 0)),
                    chain(req(GETATTR, 12, 1, struct.pack("<IIQ", 0, 0, 0))),
                    chain(req(GETATTR, 13, 0xdeadbeef, struct.pack("<IIQ", 0, 0, 0)))]
seeds["statx"] = [lookup("file", 10), on_node(STATX, 11, struct.pack("<IIQII", 0, 0, 0, 0, 0xfff))]
seeds["readlink"] = [lookup("link", 10), on_node(READLINK, 11), lookup("abs", 12),
                     on_node(READLINK, 13)]
seeds["open-read"] = open_file(10, flags=os.O_RDONLY) + [
    on_fh(READ, 12, read_in(0, 4096)), on_fh(READ, 13, read_in(4000, 65536)),
    on_fh(FLUSH, 14, struct.pack("<QIIQ", 0, 0, 0, 0)),
    on_fh(RELEASE, 15, struct.pack("<QIIQ", 0, 0, 0, 0))]
seeds["open-write"] = open_file(10) + [
    on_fh(WRITE, 12, struct.pack("<QQIIQII", 0, 10, 5, 0, 0, 0, 0) + b"HELLO"),
    on_fh(FSYNC, 13, struct.pack("<QII", 0, 0, 0)),
    on_fh(FALLOCATE, 14, struct.pack("<QQQII", 0, 0, 8192, 0, 0)),
    on_fh(LSEEK, 15, struct.pack("<QQII", 0, 0, 3, 0)),
    on_fh(RELEASE, 16, struct.pack("<QIIQ", 0, 0, 0, 0))]
seeds["open-symlink"] = open_file(10, "up") + open_file(12, "abs")
seeds["create"] = [chain(req(CREATE, 10, 1, struct.pack("<IIII", os.O_RDWR | os.O_CREAT, 0o100644, 0, 0) + name("new"))),
                   on_fh(WRITE, 11, struct.pack("<QQIIQII", 0, 0, 3, 0, 0, 0, 0) + b"abc"),
                   on_fh(READ, 12, read_in(0, 100)),
                   on_fh(RELEASE, 13, struct.pack("<QIIQ", 0, 0, 0, 0)),
                   chain(req(UNLINK, 14, 1, name("new")))]
seeds["tmpfile"] = [chain(req(TMPFILE, 10, 1, struct.pack("<IIII", os.O_RDWR, 0o100600, 0, 0) + name("tmp"))),
                    on_fh(RELEASE, 11, struct.pack("<QIIQ", 0, 0, 0, 0))]
seeds["mkdir-rmdir"] = [chain(req(MKDIR, 10, 1, struct.pack("<II", 0o755, 0) + name("d"))),
                        chain(req(MKDIR, 11, 0, struct.pack("<II", 0o700, 0) + name("e")), [(HDR_NODE, NODE(0))]),
                        chain(req(RMDIR, 12, 1, name("d"))),
                        chain(req(RMDIR, 13, 1, name("dir")))]
seeds["mknod"] = [chain(req(MKNOD, 10, 1, struct.pack("<IIII", 0o100644, 0, 0, 0) + name("reg"))),
                  chain(req(MKNOD, 11, 1, struct.pack("<IIII", 0o010644, 0, 0, 0) + name("fifo"))),
                  chain(req(MKNOD, 12, 1, struct.pack("<IIII", 0o020644, 0x0103, 0, 0) + name("null"), uid=1000))]
seeds["symlink"] = [chain(req(SYMLINK, 10, 1, name("s", "/etc/passwd"))),
                    on_node(READLINK, 11), on_node(GETATTR, 12, bytes(16))]
seeds["link"] = [lookup("file", 10), chain(req(LINK, 11, 1, struct.pack("<Q", 0) + name("hard")), [(BODY, NODE(0))]),
                 lookup("up", 12), chain(req(LINK, 13, 1, struct.pack("<Q", 0) + name("hard2")), [(BODY, NODE(0))])]
seeds["unlink"] = [chain(req(UNLINK, 10, 1, name("file"))), chain(req(UNLINK, 11, 1, name("up"))),
                   chain(req(UNLINK, 12, 1, name("../canary")))]
seeds["rename"] = [lookup("dir", 10),
                   chain(req(RENAME, 11, 1, struct.pack("<Q", 0) + name("file", "moved")), [(BODY, NODE(0))]),
                   chain(req(RENAME, 12, 1, struct.pack("<Q", 1) + name("empty", "e2"))),
                   chain(req(RENAME2, 13, 1, struct.pack("<QII", 1, 2, 0) + name("link", "abs"))),
                   chain(req(RENAME2, 14, 1, struct.pack("<QII", 1, 1, 0) + name("e2", "dir")))]
seeds["setattr"] = [lookup("file", 10),
                    on_node(SETATTR, 11, setattr_in(1, mode=0o4777)),
                    on_node(SETATTR, 12, setattr_in(8, size=100)),
                    on_node(SETATTR, 13, setattr_in(2 | 4, uid=1000, gid=1000)),
                    on_node(SETATTR, 14, setattr_in(16 | 32, atime=1, mtime=2)),
                    on_node(SETATTR, 15, setattr_in(128 | 256)),
                    chain(req(SETATTR, 16, 1, setattr_in(1, mode=0o700), uid=1000))]
seeds["setattr-fh"] = open_file(10) + [on_fh(SETATTR, 12, setattr_in(8 | 64, size=3), fh_off=48)]
seeds["setattr-symlink"] = [lookup("up", 10), on_node(SETATTR, 11, setattr_in(1, mode=0o777)),
                            on_node(SETATTR, 12, setattr_in(8, size=0))]
seeds["xattr"] = [lookup("file", 10),
                  on_node(SETXATTR, 11, struct.pack("<II", 3, 0) + name("user.a") + b"xyz"),
                  on_node(SETXATTR, 12, struct.pack("<IIII", 3, 0, 0, 0) + name("user.b") + b"xyz"),
                  on_node(GETXATTR, 13, struct.pack("<II", 0, 0) + name("user.a")),
                  on_node(GETXATTR, 14, struct.pack("<II", 100, 0) + name("user.a")),
                  on_node(LISTXATTR, 15, struct.pack("<II", 0, 0)),
                  on_node(LISTXATTR, 16, struct.pack("<II", 4096, 0)),
                  on_node(REMOVEXATTR, 17, name("user.a")),
                  chain(req(SETXATTR, 18, 1, struct.pack("<II", 1, 0) + name("trusted.x") + b"1"))]
seeds["xattr-symlink"] = [lookup("up", 10), on_node(SETXATTR, 11, struct.pack("<II", 1, 0) + name("user.a") + b"1"),
                          on_node(LISTXATTR, 12, struct.pack("<II", 4096, 0))]
seeds["readdir"] = [chain(req(OPENDIR, 10, 1, struct.pack("<II", 0, 0))),
                    on_fh(READDIR, 11, read_in(0, 4096), node=False),
                    on_fh(READDIR, 12, read_in(3, 80), node=False),
                    on_fh(FSYNCDIR, 13, struct.pack("<QII", 0, 0, 0), node=False),
                    on_fh(RELEASEDIR, 14, struct.pack("<QIIQ", 0, 0, 0, 0), node=False)]
seeds["readdirplus"] = [chain(req(OPENDIR, 10, 1, struct.pack("<II", 0, 0))),
                        on_fh(READDIRPLUS, 11, read_in(0, 4096), node=False),
                        on_fh(READDIRPLUS, 12, read_in(0, 200), node=False),
                        on_fh(RELEASEDIR, 13, struct.pack("<QIIQ", 0, 0, 0, 0), node=False)]
seeds["forget"] = [lookup("file", 10), lookup("file", 11),
                   chain(req(FORGET, 12, 0, struct.pack("<Q", 1)), [(HDR_NODE, NODE(0))]),
                   chain(req(BATCH_FORGET, 13, 0, struct.pack("<IIQQQQ", 2, 0, 0, 5, 1, 1)), [(48, NODE(0))]),
                   chain(req(BATCH_FORGET, 14, 0, struct.pack("<II", 1000, 0))),
                   chain(req(INTERRUPT, 15, 0, struct.pack("<Q", 10)))]
seeds["misc"] = [chain(req(STATFS, 10)), chain(req(ACCESS, 11, 1, struct.pack("<II", 7, 0))),
                 chain(req(SYNCFS, 12, 1, bytes(8))), chain(req(GETLK, 13, 1, bytes(48))),
                 chain(req(IOCTL, 14, 1, bytes(32))), chain(req(999, 15)),
                 chain(req(STATFS, 16)[:30]), chain(b"")]
seeds["copy-file-range"] = open_file(10) + open_file(12, "empty") + [
    chain(req(COPY_FILE_RANGE, 14, 0, struct.pack("<QQQQQQQ", 0, 0, 0, 0, 0, 100, 0)),
          [(HDR_NODE, NODE(1)), (BODY, FH(1)), (BODY + 16, NODE(0)), (BODY + 24, FH(0))])]
seeds["extlen"] = [chain(struct.pack("<IIQQIIIHH", 56, GETATTR, 10, 1, 0, 0, 0, 1, 0) + bytes(16))]
seeds["bad-len"] = [chain(struct.pack("<IIQQIIIHH", 4000, GETATTR, 10, 1, 0, 0, 0, 0, 0) + bytes(16)),
                    chain(struct.pack("<IIQQIIIHH", 20, GETATTR, 11, 1, 0, 0, 0, 0, 0))]
# Descriptor layouts: split request, several writable buffers, tiny reply room, indirect
# tables, descriptors outside memory, aliasing, loops.
getattr_req = req(GETATTR, 20, 1, bytes(16))
read_req = req(READ, 21, 0, read_in(0, 8192))
seeds["split-readable"] = [chain(getattr_req, records=[(0, 0, 7), (0, 3, 20), (0, 0, 100), (1, 0, 10), (1, 5, 200)])]
seeds["tiny-reply"] = [chain(req(LOOKUP, 22, 1, name("file")), records=[(0, 0, 100), (1, 0, 20)]),
                       chain(getattr_req, records=[(0, 0, 100), (1, 0, 8)]),
                       chain(getattr_req, records=[(0, 0, 100)])]
seeds["read-scattered"] = open_file(10, flags=os.O_RDONLY) + [
    chain(read_req, [(HDR_NODE, NODE(0)), (BODY, FH(0))],
          records=[(0, 0, 100), (1, 0, 16), (1, 1, 100), (1, 0, 4000), (1, 7, 9000)])]
seeds["write-scattered"] = open_file(10) + [
    chain(req(WRITE, 12, 0, struct.pack("<QQIIQII", 0, 0, 300, 0, 0, 0, 0) + bytes(range(256)) + bytes(44)),
          [(HDR_NODE, NODE(0)), (BODY, FH(0))],
          records=[(0, 0, 50), (0, 9, 150), (0, 0, 200), (1, 0, 4096)])]
seeds["indirect"] = [chain(getattr_req, records=[(3, 0, 0), (0, 0, 100), (1, 0, 4096)]),
                     chain(getattr_req, records=[(0, 0, 30), (3, 3, 0), (0, 0, 100), (1, 0, 4096)]),
                     chain(getattr_req, records=[(3, 0, 0), (3, 0, 0), (0, 0, 100), (1, 0, 4096)])]
seeds["outside-memory"] = [chain(getattr_req, records=[(0, 0, 100), (2 | 4, 1, 16)]),
                           chain(getattr_req, records=[(0, 0, 100), (2 | 4, 0, 8)]),
                           chain(getattr_req, records=[(0, 0, 100), (2 | 4, 2, 0), (1, 0, 100)]),
                           chain(getattr_req, records=[(2, 0x10 | 2, 5), (1, 0, 100)])]
seeds["aliasing"] = [chain(getattr_req, records=[(0, 0, 100), (2 | 4, 4, 0)]),
                     chain(getattr_req, records=[(0, 0, 100), (1, 0, 100), (2 | 4, 5, 8)]),
                     chain(getattr_req, records=[(0, 0, 100), (2 | 4, 3, 0)])]
seeds["loops"] = [chain(getattr_req, records=[(0, 0, 100), (1 | 8, 0, 4096)]),
                  chain(getattr_req, records=[(0 | 16, 0, 100), (1, 0, 4096)]),
                  chain(getattr_req, records=[(0 | 8, 31, 100), (1, 0, 4096)])]

os.makedirs(OUT, exist_ok=True)
for f in os.listdir(OUT):
    if f.startswith("seed-"):
        os.remove(os.path.join(OUT, f))
for n, chains in seeds.items():
    with open(os.path.join(OUT, "seed-" + n), "wb") as f:
        f.write(b"".join(chains))
# Every opcode number alone on the root, with a zeroed 64-byte body.
for op in range(1, 53):
    with open(os.path.join(OUT, "seed-op-%d" % op), "wb") as f:
        f.write(chain(req(op, 100 + op, 1, bytes(64))))
