//! An exact sliding window with O(1) amortized insert and query: a queue of events plus
//! monotonic queues for min and max and a running sum.

use std::collections::VecDeque;

/// Aggregates of a window.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WindowStats {
    /// Number of events.
    pub count: u64,
    /// Sum of the values (0 when empty).
    pub sum: f64,
    /// Smallest value, `None` when empty.
    pub min: Option<f64>,
    /// Largest value, `None` when empty.
    pub max: Option<f64>,
}

impl WindowStats {
    /// The mean, `None` when empty.
    pub fn avg(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

/// Events `(t, value)` in time order; keeps only those with `t > now − window`.
///
/// Events must arrive in non-decreasing time; an event older than the newest one is recorded at
/// the newest one's time (so the window can stay O(1)).
///
/// ```
/// use toolgate::state::SlidingWindow;
/// let mut w = SlidingWindow::new(10_000);
/// w.push(0, 5.0);
/// w.push(4_000, 1.0);
/// assert_eq!(w.stats(9_999).sum, 6.0);
/// assert_eq!(w.stats(10_000).sum, 1.0); // the event exactly 10 s old is out
/// ```
#[derive(Debug, Clone)]
pub struct SlidingWindow {
    window_ms: i64,
    events: VecDeque<(i64, f64, u64)>,
    mins: VecDeque<(i64, f64, u64)>,
    maxs: VecDeque<(i64, f64, u64)>,
    sum: f64,
    next_seq: u64,
}

impl SlidingWindow {
    /// A window of `window_ms` milliseconds.
    pub fn new(window_ms: i64) -> Self {
        SlidingWindow {
            window_ms,
            events: VecDeque::new(),
            mins: VecDeque::new(),
            maxs: VecDeque::new(),
            sum: 0.0,
            next_seq: 0,
        }
    }

    /// Adds an event.
    pub fn push(&mut self, t: i64, value: f64) {
        if !value.is_finite() {
            return;
        }
        let t = self.events.back().map_or(t, |(last, _, _)| t.max(*last));
        let seq = self.next_seq;
        self.next_seq += 1;
        self.events.push_back((t, value, seq));
        self.sum += value;
        while self.mins.back().is_some_and(|(_, v, _)| *v >= value) {
            self.mins.pop_back();
        }
        self.mins.push_back((t, value, seq));
        while self.maxs.back().is_some_and(|(_, v, _)| *v <= value) {
            self.maxs.pop_back();
        }
        self.maxs.push_back((t, value, seq));
        self.evict(t);
    }

    fn evict(&mut self, now: i64) {
        let cutoff = now.saturating_sub(self.window_ms);
        while let Some(&(t, v, seq)) = self.events.front() {
            if t > cutoff {
                break;
            }
            self.events.pop_front();
            self.sum -= v;
            if self.mins.front().is_some_and(|m| m.2 == seq) {
                self.mins.pop_front();
            }
            if self.maxs.front().is_some_and(|m| m.2 == seq) {
                self.maxs.pop_front();
            }
        }
        if self.events.is_empty() {
            self.sum = 0.0;
        }
    }

    /// Aggregates at time `now` (evicting what fell out).
    pub fn stats(&mut self, now: i64) -> WindowStats {
        self.evict(now);
        WindowStats {
            count: self.events.len() as u64,
            sum: self.sum,
            min: self.mins.front().map(|m| m.1),
            max: self.maxs.front().map(|m| m.1),
        }
    }

    /// Removes the most recent event at time `t` (used to give back a counter slot).
    pub fn remove_at(&mut self, t: i64) {
        if let Some(pos) = self.events.iter().rposition(|e| e.0 == t)
            && let Some((_, v, seq)) = self.events.remove(pos)
        {
            self.sum -= v;
            self.mins.retain(|m| m.2 != seq);
            self.maxs.retain(|m| m.2 != seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edges_are_exact() {
        let mut w = SlidingWindow::new(60_000);
        w.push(1_000, 3.0);
        w.push(2_000, 7.0);
        w.push(3_000, 5.0);
        let s = w.stats(61_000);
        // the event at 1_000 is exactly 60 s old at 61_000: out
        assert_eq!(s.count, 2);
        assert_eq!(s.sum, 12.0);
        assert_eq!(s.max, Some(7.0));
        assert_eq!(s.min, Some(5.0));
        let s = w.stats(62_000);
        assert_eq!((s.count, s.max, s.min), (1, Some(5.0), Some(5.0)));
        let s = w.stats(63_000);
        assert_eq!((s.count, s.sum, s.max, s.avg()), (0, 0.0, None, None));
    }

    #[test]
    fn min_max_follow_eviction() {
        let mut w = SlidingWindow::new(10);
        for (t, v) in [(0, 9.0), (1, 1.0), (2, 5.0), (3, 2.0)] {
            w.push(t, v);
        }
        assert_eq!(w.stats(10).max, Some(5.0));
        assert_eq!(w.stats(11).min, Some(2.0));
        assert_eq!(w.stats(12).max, Some(2.0));
    }

    #[test]
    fn remove_at_gives_back() {
        let mut w = SlidingWindow::new(1000);
        w.push(5, 1.0);
        w.push(6, 1.0);
        w.remove_at(6);
        assert_eq!(w.stats(7).count, 1);
    }
}
