//! Injected time: the engine never reads the system clock directly.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use parking_lot::Mutex;

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// Now, in UTC.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to: for tests and trace replay.
///
/// ```
/// use toolgate::engine::{Clock, ManualClock};
/// let clock = ManualClock::new("2026-01-05T09:00:00Z".parse().unwrap());
/// clock.advance(chrono::Duration::seconds(90));
/// assert_eq!(clock.now().to_rfc3339(), "2026-01-05T09:01:30+00:00");
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    /// A clock reading `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Sets the time.
    pub fn set(&self, t: DateTime<Utc>) {
        *self.now.lock() = t;
    }

    /// Moves the time forward (or back, for a negative duration).
    pub fn advance(&self, d: chrono::Duration) {
        let mut now = self.now.lock();
        *now += d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock()
    }
}
