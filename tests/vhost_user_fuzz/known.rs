//! Attempts that once killed or hung the daemon, played before the random ones.

use super::gen::{
    le, msg, prefix, region, u64_body, vring_addr, Attempt, Fd, Rng, Step, DESC, MEM_SIZE,
    SET_FEATURES, SET_MEM_TABLE, SET_VRING_ADDR, USED, USER_ADDR, VERSION,
};

impl Attempt {
    /// Started rings, then a memory table whose one region (1 MiB) maps a 4 KiB file, and
    /// kicks: the rings now lie past the end of the file (SIGBUS on the first read).
    pub fn region_past_the_end_of_its_file() -> Attempt {
        let mut rng = Rng::new(1);
        let mut steps = prefix(&mut rng, true);
        let table = [le(&[1, 0], &[4, 4]), region(0, MEM_SIZE, USER_ADDR, 0)].concat();
        steps.push(msg(SET_MEM_TABLE, VERSION, table, vec![Fd::ShortMemory]));
        steps.extend([Step::Kick(0), Step::Kick(1)]);
        Attempt {
            memory: (1, true),
            steps,
        }
    }

    /// Started rings of random bytes (avail indexes far ahead of the device's), kicked.
    pub fn avail_index_out_of_range() -> Attempt {
        let mut rng = Rng::new(2);
        Attempt {
            steps: prefix(&mut rng, true),
            memory: (2, false),
        }
    }

    /// Started rings with EVENT_IDX, then queue 0's avail ring moved to guest address 0 (which
    /// virtio-queue takes for "not set up": it pops nothing, while the index there says chains
    /// wait) and a kick.
    pub fn avail_ring_at_address_0() -> Attempt {
        let mut rng = Rng::new(3);
        let mut steps = prefix(&mut rng, true);
        let features: u64 = 1 << 32 | 1 << 30 | 1 << 29;
        steps[2] = msg(SET_FEATURES, VERSION, u64_body(features), vec![]);
        let (d, u) = (USER_ADDR + DESC, USER_ADDR + USED);
        steps.extend([
            msg(
                SET_VRING_ADDR,
                VERSION,
                vring_addr(0, 0, d, u, USER_ADDR),
                vec![],
            ),
            Step::Pause(100),
            Step::Kick(0),
        ]);
        Attempt {
            memory: (3, false),
            steps,
        }
    }
}
