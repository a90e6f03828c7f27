//! What one fuzz attempt sends: an optional well-formed prefix (owner, features, memory, two
//! started rings of garbage), then random, mutated and bogus messages, described abstractly
//! (fds by kind, guest memory by seed) so that a failing attempt prints short.

pub use super::common::rng::Rng;

/// Header flags: version 1, and the frontend asking for an ack.
pub const VERSION: u32 = 0x1;
pub const NEED_REPLY: u32 = 0x8;
/// Request codes used by name.
pub const GET_FEATURES: u32 = 1;
pub const SET_FEATURES: u32 = 2;
const SET_OWNER: u32 = 3;
pub const SET_MEM_TABLE: u32 = 5;
const SET_VRING_NUM: u32 = 8;
pub const SET_VRING_ADDR: u32 = 9;
const SET_VRING_BASE: u32 = 10;
const GET_VRING_BASE: u32 = 11;
const SET_VRING_KICK: u32 = 12;
const SET_VRING_CALL: u32 = 13;
const SET_VRING_ERR: u32 = 14;
const GET_PROTOCOL_FEATURES: u32 = 15;
const SET_PROTOCOL_FEATURES: u32 = 16;
const SET_VRING_ENABLE: u32 = 18;
const GET_CONFIG: u32 = 24;
const SET_CONFIG: u32 = 25;
const ADD_MEM_REG: u32 = 37;
const REM_MEM_REG: u32 = 38;
const SET_DEVICE_STATE_FD: u32 = 42;
/// Requests the backend answers whatever the flags (plus any with NEED_REPLY under REPLY_ACK).
pub const ANSWERED: &[u32] = &[1, 11, 15, 17, 24, 31, 36, 40, 41, 42, 43, 44];

/// Guest memory: one memfd of [`MEM_SIZE`] at guest address 0, known to the daemon by
/// [`USER_ADDR`] (the frontend's virtual address of it), rings of queue q at `q * 0x10000`.
pub const MEM_SIZE: u64 = 1 << 20;
pub const USER_ADDR: u64 = 0x7f00_0000_0000;
pub const DESC: u64 = 0x1000;
pub const AVAIL: u64 = 0x3000;
pub const USED: u64 = 0x4000;

/// An fd attached to a message.
#[derive(Clone, Copy, Debug)]
pub enum Fd {
    /// A fresh eventfd.
    Event,
    /// The eventfd kept to kick queue q.
    Kick(u8),
    /// The attempt's guest memory.
    Memory,
    /// A 4 KiB memfd.
    ShortMemory,
    /// The read end of a pipe.
    Pipe,
}

#[derive(Clone, Debug)]
pub enum Step {
    /// A message; `truncated`: the bytes sent are not the bytes the header declares (the
    /// attempt then ends: the framing is lost).
    Msg {
        code: u32,
        flags: u32,
        size: u32,
        payload: Vec<u8>,
        fds: Vec<Fd>,
        truncated: bool,
    },
    /// A write to queue q's kick eventfd.
    Kick(u8),
    /// A pause, for the daemon to take what was sent.
    Pause(u64),
}

#[derive(Debug)]
pub struct Attempt {
    /// Seed of the guest memory's contents; structured rings (else random bytes).
    pub memory: (u64, bool),
    pub steps: Vec<Step>,
}

/// Version 1, with NEED_REPLY half of the time.
fn maybe_ack(rng: &mut Rng) -> u32 {
    VERSION | if rng.one_in(2) { NEED_REPLY } else { 0 }
}

pub fn msg(code: u32, flags: u32, payload: Vec<u8>, fds: Vec<Fd>) -> Step {
    Step::Msg {
        code,
        flags,
        size: payload.len() as u32,
        payload,
        fds,
        truncated: false,
    }
}

pub fn le(values: &[u64], widths: &[usize]) -> Vec<u8> {
    values
        .iter()
        .zip(widths)
        .flat_map(|(v, w)| v.to_le_bytes()[..*w].to_vec())
        .collect()
}

pub fn u64_body(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

pub fn vring_state(index: u64, num: u64) -> Vec<u8> {
    le(&[index, num], &[4, 4])
}

pub fn vring_addr(index: u64, flags: u64, desc: u64, used: u64, avail: u64) -> Vec<u8> {
    le(&[index, flags, desc, used, avail, 0], &[4, 4, 8, 8, 8, 8])
}

pub fn region(gpa: u64, size: u64, user: u64, offset: u64) -> Vec<u8> {
    le(&[gpa, size, user, offset], &[8, 8, 8, 8])
}

/// A value of the kind that breaks bounds: 0, 1, limits and their neighbours, or random.
fn edgy(rng: &mut Rng) -> u64 {
    let v = rng.pick(&[
        0,
        1,
        2,
        255,
        256,
        1023,
        1024,
        1025,
        4096,
        65535,
        65536,
        u32::MAX as u64,
    ]);
    match rng.below(4) {
        0 => rng.next(),
        1 => rng.below(16),
        _ => v,
    }
}

fn vring_index(rng: &mut Rng) -> u64 {
    if rng.one_in(3) {
        edgy(rng)
    } else {
        rng.below(10)
    }
}

/// An address in the frontend's view: inside the memory (most of the time) or anywhere.
fn user_addr(rng: &mut Rng) -> u64 {
    match rng.below(4) {
        0 => rng.next(),
        1 => USER_ADDR + MEM_SIZE - rng.below(64),
        _ => USER_ADDR + rng.below(MEM_SIZE),
    }
}

fn random_fds(rng: &mut Rng) -> Vec<Fd> {
    let n = match rng.below(8) {
        0..=4 => 0,
        5 | 6 => 1 + rng.below(2),
        _ => 33 + rng.below(8),
    };
    (0..n)
        .map(|_| rng.pick(&[Fd::Event, Fd::Memory, Fd::ShortMemory, Fd::Pipe]))
        .collect()
}

/// A memory table (SET_MEM_TABLE) or one region (ADD/REM_MEM_REG) with bogus regions.
fn bogus_memory(rng: &mut Rng) -> Step {
    let count = rng.below(10);
    let mut regions = Vec::new();
    for _ in 0..count {
        let r = rng.next();
        let size = rng.pick(&[0, 4096, MEM_SIZE, 2 * MEM_SIZE, MEM_SIZE + 1, u64::MAX, r]);
        let offset = rng.pick(&[0, 0, 4096, MEM_SIZE, MEM_SIZE - 4096, u64::MAX - 4095]);
        let r = rng.next() & !0xfff;
        let gpa = rng.pick(&[0, 0, MEM_SIZE / 2, u64::MAX - 4095, r]);
        regions.push(region(gpa, size, user_addr(rng), offset));
    }
    let mut fds: Vec<Fd> = (0..count)
        .map(|_| rng.pick(&[Fd::Memory, Fd::ShortMemory]))
        .collect();
    if rng.one_in(3) {
        fds = random_fds(rng);
    }
    let (code, payload) = if rng.one_in(3) {
        let code = rng.pick(&[ADD_MEM_REG, REM_MEM_REG]);
        let one = regions
            .first()
            .cloned()
            .unwrap_or_else(|| region(0, MEM_SIZE, USER_ADDR, 0));
        fds.truncate(1);
        (code, [vec![0; 8], one].concat())
    } else {
        let declared = if rng.one_in(4) { edgy(rng) } else { count };
        (
            SET_MEM_TABLE,
            [le(&[declared, 0], &[4, 4]), regions.concat()].concat(),
        )
    };
    msg(code, maybe_ack(rng), payload, fds)
}

/// A well-formed message of a known request with random field values.
fn known(rng: &mut Rng) -> Step {
    let q = vring_index(rng);
    let flags = maybe_ack(rng);
    match rng.below(14) {
        0 => msg(SET_FEATURES, flags, u64_body(rng.next()), vec![]),
        1 => msg(SET_PROTOCOL_FEATURES, flags, u64_body(rng.next()), vec![]),
        2 => msg(SET_VRING_NUM, flags, vring_state(q, edgy(rng)), vec![]),
        3 => msg(SET_VRING_BASE, flags, vring_state(q, edgy(rng)), vec![]),
        4 => msg(GET_VRING_BASE, flags, vring_state(q, 0), vec![]),
        5 => msg(
            SET_VRING_ENABLE,
            flags,
            vring_state(q, rng.below(3)),
            vec![],
        ),
        6 => {
            let (d, u, a) = (user_addr(rng), user_addr(rng), user_addr(rng));
            msg(
                SET_VRING_ADDR,
                flags,
                vring_addr(q, edgy(rng) & 1, d, u, a),
                vec![],
            )
        }
        7..=9 => {
            let code = rng.pick(&[SET_VRING_KICK, SET_VRING_CALL, SET_VRING_ERR]);
            // Bit 8: no fd comes with it ("invalid fd").
            let nofd = rng.one_in(4);
            let fds = match rng.below(5) {
                0 => vec![],
                1 => vec![Fd::Pipe],
                2 => vec![Fd::Event, Fd::Event],
                _ if code == SET_VRING_KICK => vec![Fd::Kick((q % 3) as u8)],
                _ => vec![Fd::Event],
            };
            msg(code, flags, u64_body(q | (nofd as u64) << 8), fds)
        }
        10 => {
            let (offset, size) = (edgy(rng), edgy(rng));
            msg(
                GET_CONFIG,
                flags,
                [le(&[offset, size, 0], &[4, 4, 4]), {
                    let n = rng.below(64) as usize;
                    rng.bytes(n)
                }]
                .concat(),
                vec![],
            )
        }
        11 => {
            let (offset, size) = (edgy(rng), rng.below(64));
            let body = [le(&[offset, size, 0], &[4, 4, 4]), rng.bytes(size as usize)].concat();
            msg(SET_CONFIG, flags, body, vec![])
        }
        12 => {
            let body = le(&[rng.below(3), rng.below(3)], &[4, 4]);
            msg(
                SET_DEVICE_STATE_FD,
                flags,
                body,
                vec![rng.pick(&[Fd::Pipe, Fd::Event])],
            )
        }
        _ => msg(rng.pick(ANSWERED), flags, vec![], vec![]),
    }
}

/// One fuzz step.
fn fuzz_step(rng: &mut Rng) -> Step {
    match rng.below(12) {
        0 | 1 => {
            let code = if rng.one_in(4) {
                rng.next() as u32
            } else {
                rng.below(48) as u32
            };
            let mut flags = maybe_ack(rng);
            if rng.one_in(6) {
                flags = rng.next() as u32;
            }
            let len = if rng.one_in(8) {
                rng.below(300)
            } else {
                rng.below(48)
            } as usize;
            let payload = rng.bytes(len);
            let size = match rng.below(8) {
                0 => rng.pick(&[4097, 0x10000, u32::MAX as u64]) as u32,
                1 => rng.below(len as u64 + 64) as u32,
                _ => len as u32,
            };
            Step::Msg {
                code,
                flags,
                size,
                truncated: size as usize != len,
                payload,
                fds: random_fds(rng),
            }
        }
        2..=5 => known(rng),
        6 => bogus_memory(rng),
        7 | 8 => {
            // A mutated well-formed message: bytes of its payload, its code or its flags.
            let Step::Msg {
                mut code,
                mut flags,
                mut payload,
                fds,
                ..
            } = known(rng)
            else {
                unreachable!()
            };
            for _ in 0..1 + rng.below(4) {
                match rng.below(4) {
                    0 => code ^= 1 << rng.below(8),
                    1 => flags ^= 1 << rng.below(32),
                    _ if !payload.is_empty() => {
                        let i = rng.below(payload.len() as u64) as usize;
                        payload[i] ^= 1 << rng.below(8);
                    }
                    _ => {}
                }
            }
            msg(code, flags, payload, fds)
        }
        9 | 10 => Step::Kick(rng.below(3) as u8),
        _ => {
            let n = 1 + rng.below(40) as usize;
            msg(
                rng.pick(&[GET_FEATURES, SET_OWNER, SET_VRING_CALL]),
                VERSION,
                u64_body(0),
                vec![Fd::Event; n],
            )
        }
    }
}

/// SET_OWNER, the features and protocol features; then, with `running`, the memory table and
/// queues 0 and 1 set up, started and kicked.
pub fn prefix(rng: &mut Rng, running: bool) -> Vec<Step> {
    let features = 1 << 32 | 1 << 30 | (rng.below(2) << 29) | (rng.below(2) << 28);
    let protocol = 1 | (rng.below(2) << 3) | (rng.below(2) << 15);
    let mut steps = vec![
        msg(SET_OWNER, VERSION, vec![], vec![]),
        msg(GET_FEATURES, VERSION, vec![], vec![]),
        msg(SET_FEATURES, VERSION, u64_body(features), vec![]),
        msg(GET_PROTOCOL_FEATURES, VERSION, vec![], vec![]),
        msg(SET_PROTOCOL_FEATURES, VERSION, u64_body(protocol), vec![]),
    ];
    if running {
        let table = [le(&[1, 0], &[4, 4]), region(0, MEM_SIZE, USER_ADDR, 0)].concat();
        steps.push(msg(SET_MEM_TABLE, maybe_ack(rng), table, vec![Fd::Memory]));
        for q in 0..2u64 {
            let base = q * 0x10000;
            let (d, u, a) = (
                USER_ADDR + base + DESC,
                USER_ADDR + base + USED,
                USER_ADDR + base + AVAIL,
            );
            steps.push(msg(
                SET_VRING_NUM,
                maybe_ack(rng),
                vring_state(q, 256),
                vec![],
            ));
            steps.push(msg(
                SET_VRING_BASE,
                maybe_ack(rng),
                vring_state(q, 0),
                vec![],
            ));
            steps.push(msg(
                SET_VRING_ADDR,
                maybe_ack(rng),
                vring_addr(q, 0, d, u, a),
                vec![],
            ));
            steps.push(msg(
                SET_VRING_CALL,
                maybe_ack(rng),
                u64_body(q),
                vec![Fd::Event],
            ));
            steps.push(msg(
                SET_VRING_KICK,
                maybe_ack(rng),
                u64_body(q),
                vec![Fd::Kick(q as u8)],
            ));
            steps.push(msg(
                SET_VRING_ENABLE,
                maybe_ack(rng),
                vring_state(q, 1),
                vec![],
            ));
        }
        steps.push(Step::Kick(0));
        steps.push(Step::Kick(1));
    }
    steps
}

impl Attempt {
    pub fn generate(rng: &mut Rng) -> Attempt {
        let mut steps = match rng.below(8) {
            0 => vec![],
            1 => vec![msg(SET_OWNER, VERSION, vec![], vec![])],
            2 | 3 => prefix(rng, false),
            _ => prefix(rng, true),
        };
        for _ in 0..1 + rng.below(4) {
            steps.push(fuzz_step(rng));
        }
        Attempt {
            memory: (rng.next(), rng.below(4) != 0),
            steps,
        }
    }
}
