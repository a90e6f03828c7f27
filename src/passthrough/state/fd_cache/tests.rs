//! Unit tests of the fd cache.

use super::*;

fn fd() -> Arc<OwnedFd> {
    Arc::new(std::fs::File::open("/").unwrap().into())
}

#[test]
fn hit_evict_and_clear_give_the_budget_back() {
    let budget = FdBudget::new(1000);
    let c = FdCache::new(Arc::clone(&budget), usize::MAX);
    assert_eq!(c.capacity(), 496);
    assert!(c.get(16).is_none());
    c.insert(16, fd());
    c.insert(32, fd());
    assert!(c.get(16).is_some() && c.get(32).is_some());
    assert_eq!(budget.in_use(), 2);
    // Inserting again replaces the fd, not the token.
    c.insert(16, fd());
    assert_eq!((budget.in_use(), c.len()), (2, 2));
    c.evict(16);
    c.evict(48);
    assert!(c.get(16).is_none() && c.get(32).is_some());
    assert_eq!(c.hits_and_misses(), (3, 2), "every get is a hit or a miss");
    assert_eq!(budget.in_use(), 1);
    c.clear();
    assert!(c.is_empty());
    assert_eq!(budget.in_use(), 0);
}

#[test]
fn never_exceeds_capacity_and_keeps_most_of_a_slightly_larger_sweep() {
    let budget = FdBudget::new(64 * SHARDS * 2);
    let c = FdCache::new(Arc::clone(&budget), usize::MAX);
    let cap = c.capacity();
    assert_eq!(cap, 64 * SHARDS);
    let ids: Vec<u64> = (1..=(cap as u64 * 11 / 10)).map(|n| n << 4).collect();
    let mut hits = 0;
    for round in 0..5 {
        // As a request does: a miss opens the fd and caches it only if there is room.
        for &id in &ids {
            match c.get_or_room(id) {
                Ok(_) => hits += usize::from(round > 0),
                Err(true) => c.insert(id, fd()),
                Err(false) => {}
            }
        }
        assert!(c.len() <= cap);
        assert_eq!(budget.in_use(), c.len());
    }
    // LRU would hit nothing here, random replacement about two thirds; a full cache keeps its
    // entries, so every one of them hits (all but the last ~1/11 of the sweep, once the misses
    // beyond the first-use slots have come back and filled the rest).
    assert!(
        hits >= ids.len() * 4 * 8 / 10,
        "{hits} hits of {}",
        ids.len() * 4
    );
}

#[test]
fn a_spent_budget_is_not_taken_and_shed_gives_it_back() {
    let budget = FdBudget::new(64);
    let c = FdCache::new(Arc::clone(&budget), usize::MAX);
    let held: Vec<_> = (0..60).map(|_| budget.take().unwrap()).collect();
    for n in 1..=20u64 {
        c.insert(n << 4, fd());
    }
    assert_eq!(budget.in_use(), 64, "only what was left is taken");
    assert_eq!(c.len(), 4);
    assert_eq!(c.shed(3), 3);
    assert_eq!(budget.in_use(), 61);
    assert_eq!(c.shed(10), 1);
    assert!(c.is_empty());
    drop(held);
    // A budget too small for a cache: nothing is cached.
    let tiny = FdCache::new(FdBudget::new(20), usize::MAX);
    tiny.insert(16, fd());
    assert!(tiny.is_empty());
}

#[test]
fn an_fd_not_used_for_two_sweeps_is_closed_and_a_used_one_stays() {
    let budget = FdBudget::new(1000);
    let c = FdCache::new(Arc::clone(&budget), DEFAULT_SIZE);
    c.insert(16, fd());
    c.insert(32, fd());
    assert_eq!(c.sweep(), 2, "both were used since the last sweep");
    assert!(c.get(16).is_some());
    assert_eq!(c.sweep(), 1, "32 was not used for a whole sweep period");
    assert!(c.get(32).is_none());
    assert_eq!(c.sweep(), 0);
    assert_eq!(budget.in_use(), 0);
}

#[test]
fn two_sweep_periods_fit_in_the_idle_limit() {
    // What the time bound rests on: an fd is closed by the second sweep after its last use.
    assert!(2 * SWEEP_PERIOD < IDLE_LIMIT);
}

#[test]
fn the_reaper_closes_idle_fds_and_sleeps_when_empty() {
    let budget = FdBudget::new(1000);
    let c = FdCache::new(Arc::clone(&budget), DEFAULT_SIZE);
    for round in 0..2 {
        let start = std::time::Instant::now();
        c.insert(16, fd());
        while !c.is_empty() {
            // Two sweep periods fit in IDLE_LIMIT (the test above); the slack is for the
            // reaper thread's wake-up under a loaded `cargo test` (the integration tests
            // check the 1 s / 2 s bounds on a real daemon: tests/fd_time_bound.rs).
            assert!(start.elapsed() < 2 * IDLE_LIMIT, "round {round}");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(budget.in_use(), 0);
        // Asleep now: the next insert wakes it (the second round checks it does).
        std::thread::sleep(SWEEP_PERIOD * 2);
    }
}

#[test]
fn the_size_caps_the_cache_and_zero_disables_it() {
    let budget = FdBudget::new(100_000);
    assert_eq!(
        FdCache::new(Arc::clone(&budget), DEFAULT_SIZE).capacity(),
        DEFAULT_SIZE
    );
    let off = FdCache::new(Arc::clone(&budget), 0);
    off.insert(16, fd());
    assert!(off.is_empty());
    assert_eq!(budget.in_use(), 0);
}

#[test]
fn a_miss_says_whether_its_shard_has_room() {
    let budget = FdBudget::new(64 * SHARDS * 2);
    let c = FdCache::new(Arc::clone(&budget), SHARDS);
    assert_eq!(c.capacity(), SHARDS, "one slot a shard");
    let (a, b) = (1u64 << 4, (1u64 << 4) + ((SHARDS as u64) << 9));
    assert_eq!(shard_of(a), shard_of(b), "two node IDs of one shard");
    assert_eq!(c.get_or_room(a).err(), Some(true));
    assert!(c.has_room(a));
    c.insert(a, fd());
    assert!(c.get_or_room(a).is_ok(), "a hit");
    assert!(!c.has_room(a), "cached already");
    assert_eq!(c.get_or_room(b).err(), Some(false), "its shard is full");
    assert!(!c.has_room(b));
    c.insert(b, fd());
    assert!(c.get(b).is_none(), "a full shard keeps no new fd");
    assert_eq!(c.hits_and_misses(), (1, 3));
    let off = FdCache::new(budget, 0);
    assert_eq!(
        off.get_or_room(a).err(),
        Some(false),
        "a disabled cache has no room"
    );
    assert!(!off.has_room(a));
}

/// Node IDs of one shard, `n` of them.
fn one_shard(n: usize) -> Vec<u64> {
    let ids: Vec<u64> = (1..)
        .map(|k: u64| k << 4)
        .filter(|&id| shard_of(id) == 0)
        .take(n)
        .collect();
    assert_eq!(ids.len(), n);
    ids
}

#[test]
fn beyond_the_first_use_slots_only_an_inode_that_missed_before_is_kept() {
    let budget = FdBudget::new(100_000);
    let c = FdCache::new(Arc::clone(&budget), DEFAULT_SIZE);
    assert_eq!(c.capacity(), DEFAULT_SIZE);
    let first = FIRST_USE / SHARDS;
    let ids = one_shard(first + 2);
    for &id in &ids[..first] {
        assert_eq!(c.get_or_room(id).err(), Some(true));
        c.insert(id, fd());
    }
    let (a, b) = (ids[first], ids[first + 1]);
    // A lookup's `get` and `has_room` do not count as coming back.
    assert!(c.get(a).is_none() && !c.has_room(a));
    c.insert(a, fd());
    assert!(
        c.get(a).is_none(),
        "a first use beyond the first-use slots is not kept"
    );
    // A miss that opens the fd by handle is remembered: the next one finds room.
    assert_eq!(c.get_or_room(a).err(), Some(false));
    assert!(c.has_room(a) && !c.has_room(b));
    assert_eq!(c.get_or_room(a).err(), Some(true));
    c.insert(a, fd());
    assert!(c.get(a).is_some());
    c.insert(b, fd());
    assert!(c.get(b).is_none(), "b never missed");
    assert_eq!(budget.in_use(), first + 1);
    // A new session forgets what came back.
    c.clear();
    assert_eq!(c.get_or_room(ids[0]).err(), Some(true));
}

#[test]
fn a_walk_that_uses_each_inode_once_keeps_to_the_first_use_slots() {
    let budget = FdBudget::new(100_000);
    let c = FdCache::new(Arc::clone(&budget), DEFAULT_SIZE);
    // The Windows walk's pattern: each inode missed once, by handle, then never again.
    for id in (1..=20_000u64).map(|n| n << 4) {
        if c.get_or_room(id).err() == Some(true) {
            c.insert(id, fd());
        }
    }
    assert!(c.len() <= FIRST_USE, "{} fds for a walk", c.len());
    assert_eq!(budget.in_use(), c.len());
}

#[test]
fn a_sweep_larger_than_the_first_use_slots_hits_from_its_third_pass() {
    let budget = FdBudget::new(100_000);
    let c = FdCache::new(Arc::clone(&budget), DEFAULT_SIZE);
    let ids: Vec<u64> = (1..=10_000u64).map(|n| n << 4).collect();
    let mut hits = [0usize; 4];
    for pass in &mut hits {
        for &id in &ids {
            match c.get_or_room(id) {
                Ok(_) => *pass += 1,
                Err(true) => c.insert(id, fd()),
                Err(false) => {}
            }
        }
        assert!(c.len() <= c.capacity());
    }
    // Pass 1 keeps the first-use slots' worth, pass 2 admits what missed in pass 1 (all but
    // the ghosts another inode of the sweep overwrote), passes 3 and 4 hit nearly everything.
    assert!(hits[1] >= FIRST_USE * 9 / 10, "{hits:?}");
    assert!(hits[2] >= ids.len() * 8 / 10, "{hits:?}");
    assert!(hits[3] >= ids.len() * 9 / 10, "{hits:?}");
    assert_eq!(budget.in_use(), c.len());
}
