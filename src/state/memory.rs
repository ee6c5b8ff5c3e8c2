//! The in-memory [`StateStore`]: dashmap shards, one small mutex per key.

use std::sync::Arc;

use dashmap::DashMap;
use parking_lot::Mutex;

use super::{Permit, SlidingWindow, StateKey, StateStore, WindowStats};

/// Fast keyed hashing, seeded per store.
type Hasher = foldhash::fast::RandomState;

/// Counters and windows in memory. Lost when the process ends.
#[derive(Debug, Default)]
pub struct MemoryStateStore {
    counters: DashMap<StateKey, Mutex<Counter>, Hasher>,
    windows: DashMap<StateKey, Mutex<SlidingWindow>, Hasher>,
    /// The slots created in each scope, so a scope is forgotten without scanning every key.
    scopes: DashMap<Arc<str>, Vec<u64>, Hasher>,
}

#[derive(Debug)]
enum Counter {
    Total(u64),
    Windowed(SlidingWindow),
}

impl MemoryStateStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many counters and metric windows are kept.
    pub fn len(&self) -> usize {
        self.counters.len() + self.windows.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn with_counter<R>(
        &self,
        key: &StateKey,
        window_secs: Option<u64>,
        f: impl FnOnce(&mut Counter) -> R,
    ) -> R {
        if let Some(c) = self.counters.get(key) {
            return f(&mut c.lock());
        }
        let entry = self.counters.entry(key.clone()).or_insert_with(|| {
            self.note_scope(key);
            Mutex::new(match window_secs {
                Some(w) => Counter::Windowed(SlidingWindow::new(secs_to_ms(w))),
                None => Counter::Total(0),
            })
        });
        f(&mut entry.lock())
    }

    fn note_scope(&self, key: &StateKey) {
        let mut slots = self.scopes.entry(key.scope.clone()).or_default();
        if !slots.contains(&key.slot) {
            slots.push(key.slot);
        }
    }
}

fn secs_to_ms(s: u64) -> i64 {
    i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
}

impl StateStore for MemoryStateStore {
    fn try_acquire(
        &self,
        key: &StateKey,
        max: u64,
        window_secs: Option<u64>,
        now_ms: i64,
    ) -> Option<Permit> {
        self.with_counter(key, window_secs, |c| match c {
            Counter::Total(n) => (*n < max).then(|| {
                *n += 1;
                Permit { at_ms: now_ms }
            }),
            Counter::Windowed(w) => (w.stats(now_ms).count < max).then(|| {
                w.push(now_ms, 1.0);
                Permit { at_ms: now_ms }
            }),
        })
    }

    fn release(&self, key: &StateKey, permit: Permit) {
        if let Some(c) = self.counters.get(key) {
            match &mut *c.lock() {
                Counter::Total(n) => *n = n.saturating_sub(1),
                Counter::Windowed(w) => w.remove_at(permit.at_ms),
            }
        }
    }

    fn add(&self, key: &StateKey, window_secs: Option<u64>, now_ms: i64) {
        self.with_counter(key, window_secs, |c| match c {
            Counter::Total(n) => *n += 1,
            Counter::Windowed(w) => w.push(now_ms, 1.0),
        })
    }

    fn count(&self, key: &StateKey, _window_secs: Option<u64>, now_ms: i64) -> u64 {
        match self.counters.get(key) {
            None => 0,
            Some(c) => match &mut *c.lock() {
                Counter::Total(n) => *n,
                Counter::Windowed(w) => w.stats(now_ms).count,
            },
        }
    }

    fn record(&self, key: &StateKey, window_secs: u64, at_ms: i64, value: f64) {
        if let Some(w) = self.windows.get(key) {
            w.lock().push(at_ms, value);
            return;
        }
        let entry = self.windows.entry(key.clone()).or_insert_with(|| {
            self.note_scope(key);
            Mutex::new(SlidingWindow::new(secs_to_ms(window_secs)))
        });
        entry.lock().push(at_ms, value);
    }

    fn remove(&self, key: &StateKey) {
        self.counters.remove(key);
        self.windows.remove(key);
    }

    fn forget_scope(&self, scope: &str) {
        let Some((scope, slots)) = self.scopes.remove(scope) else {
            return;
        };
        for slot in slots {
            let key = StateKey {
                slot,
                scope: scope.clone(),
            };
            self.counters.remove(&key);
            self.windows.remove(&key);
        }
    }

    fn window(&self, key: &StateKey, _window_secs: u64, now_ms: i64) -> WindowStats {
        match self.windows.get(key) {
            Some(w) => w.lock().stats(now_ms),
            None => WindowStats::default(),
        }
    }
}
