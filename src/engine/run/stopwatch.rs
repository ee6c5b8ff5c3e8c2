//! A decision's `latency_ns`: the monotonic clock read twice.
//!
//! On Unix the clock is read with `clock_gettime(CLOCK_MONOTONIC)` (the clock of std's
//! `Instant` there) and the difference taken in whole nanoseconds: `Instant::now` plus
//! `Instant::elapsed` and `Duration::as_nanos` cost about 70 more instructions per decision
//! (issue 38). Elsewhere it is `Instant`.

/// When a decision started.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stopwatch(#[cfg(unix)] u64, #[cfg(not(unix))] std::time::Instant);

impl Stopwatch {
    /// Now.
    #[inline]
    pub(crate) fn start() -> Stopwatch {
        #[cfg(unix)]
        {
            Stopwatch(mono_ns())
        }
        #[cfg(not(unix))]
        {
            Stopwatch(std::time::Instant::now())
        }
    }

    /// Nanoseconds since [`start`](Stopwatch::start).
    #[inline]
    pub(crate) fn elapsed_ns(self) -> u64 {
        #[cfg(unix)]
        {
            mono_ns().saturating_sub(self.0)
        }
        #[cfg(not(unix))]
        {
            self.0.elapsed().as_nanos() as u64
        }
    }
}

/// The monotonic clock in nanoseconds (from an unspecified start: boot, on Linux).
#[cfg(unix)]
#[inline]
fn mono_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stopwatch_measures_time_passing() {
        let s = Stopwatch::start();
        let i = std::time::Instant::now();
        // Busy, not asleep: the work of a decision is measured the same way.
        while i.elapsed() < std::time::Duration::from_millis(2) {}
        let ns = s.elapsed_ns();
        assert!(ns >= 2_000_000, "{ns} ns");
        assert!(ns < 60_000_000_000, "{ns} ns");
    }
}
