//! The clock that times requests: two reads per request, so it must be cheap.
//!
//! On x86_64, where the kernel itself keeps time with the TSC (clocksource `tsc`: invariant and
//! checked to be in step across CPUs at boot), requests are timed with `rdtsc` (~17 ns on these
//! machines, against ~30 ns for the vDSO's `clock_gettime`), converted to nanoseconds with a rate
//! measured once at start-up against `CLOCK_MONOTONIC` ([`calibrate`], before the sandbox hides
//! `/sys`). Elsewhere, or before [`calibrate`], it is [`Instant`].

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Nanoseconds per TSC tick, times 2^32; set once by [`calibrate`] when the TSC is trusted.
static NS_PER_TICK: OnceLock<u64> = OnceLock::new();

/// A request's start.
#[derive(Clone, Copy, Debug)]
pub enum Stamp {
    Tsc(u64),
    Instant(Instant),
}

#[cfg(target_arch = "x86_64")]
fn ticks() -> u64 {
    // SAFETY: rdtsc reads a counter; it has no memory effects (x86_64 always has it).
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Starts using the TSC if the kernel's clocksource is `tsc`; measures its rate over `window`.
/// Returns whether it is used. Call before the sandbox (it reads `/sys`) and before serving.
pub fn calibrate(window: Duration) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let source = "/sys/devices/system/clocksource/clocksource0/current_clocksource";
        if std::fs::read_to_string(source).is_ok_and(|s| s.trim() == "tsc") {
            let (t0, c0) = (Instant::now(), ticks());
            std::thread::sleep(window);
            let (c1, t1) = (ticks(), Instant::now());
            let ns = u64::try_from((t1 - t0).as_nanos()).unwrap_or(u64::MAX);
            if let Some(rate) = (u128::from(ns) << 32).checked_div(u128::from(c1.wrapping_sub(c0)))
            {
                let _ = NS_PER_TICK.set(u64::try_from(rate).unwrap_or(u64::MAX));
            }
        }
    }
    let _ = window;
    NS_PER_TICK.get().is_some()
}

/// Now.
pub fn now() -> Stamp {
    #[cfg(target_arch = "x86_64")]
    if NS_PER_TICK.get().is_some() {
        return Stamp::Tsc(ticks());
    }
    Stamp::Instant(Instant::now())
}

/// Nanoseconds from `start` to now (0 if the clock seems to have gone back).
pub fn ns_since(start: Stamp) -> u64 {
    match start {
        #[cfg(target_arch = "x86_64")]
        Stamp::Tsc(c0) => {
            let rate = NS_PER_TICK.get().copied().unwrap_or(0);
            let ticks = ticks().saturating_sub(c0);
            u64::try_from((u128::from(ticks) * u128::from(rate)) >> 32).unwrap_or(u64::MAX)
        }
        #[cfg(not(target_arch = "x86_64"))]
        Stamp::Tsc(_) => 0,
        Stamp::Instant(t) => u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_what_instant_measures() {
        let tsc = calibrate(Duration::from_millis(20));
        // A try preempted between its two reads of one side is off; one of five is not.
        let ratios: Vec<f64> = (0..5)
            .map(|_| {
                let (s, t) = (now(), Instant::now());
                assert_eq!(matches!(s, Stamp::Tsc(_)), tsc);
                std::thread::sleep(Duration::from_millis(50));
                let (ns, reference) = (ns_since(s), t.elapsed().as_nanos() as f64);
                ns as f64 / reference
            })
            .collect();
        assert!(
            ratios.iter().any(|r| (0.99..1.01).contains(r)),
            "{ratios:?}"
        );
        assert!(ns_since(Stamp::Instant(Instant::now() + Duration::from_secs(1))) == 0);
    }
}
