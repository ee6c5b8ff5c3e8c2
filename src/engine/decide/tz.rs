//! Time zones for `timeGate`: end-user zone names parsed once per engine (not once per run),
//! and, per run, the local time of the last second asked (decisions made in the same second
//! skip the zone's offset lookup).

use std::collections::HashMap;

use chrono::{DateTime, Datelike, TimeZone, Timelike, Utc, Weekday};
use chrono_tz::Tz;
use parking_lot::Mutex;

/// Zone names kept before the engine's cache starts over.
pub(crate) const NAMES_CAPACITY: usize = 1024;

/// Zone names already parsed (an invalid name parses to `None`).
#[derive(Debug, Default)]
pub(crate) struct TzNames {
    map: Mutex<HashMap<Box<str>, Option<Tz>, foldhash::fast::RandomState>>,
}

impl TzNames {
    /// `name` parsed as an IANA zone, `None` when it is not one.
    pub(crate) fn parse(&self, name: &str) -> Option<Tz> {
        if let Some(tz) = self.map.lock().get(name) {
            return *tz;
        }
        let tz = name.parse::<Tz>().ok();
        let mut map = self.map.lock();
        if map.len() >= NAMES_CAPACITY {
            map.clear();
        }
        map.insert(name.into(), tz);
        tz
    }
}

/// The local weekday and minute of the day of one UTC second in one zone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LocalMemo {
    tz: Tz,
    second: i64,
    day: Weekday,
    minute: u16,
}

/// The weekday and minute of the day of `now` in `tz`.
pub(crate) fn local_day_minute(tz: Tz, now: &DateTime<Utc>) -> (Weekday, u16) {
    let local = tz.from_utc_datetime(&now.naive_utc());
    (local.weekday(), (local.hour() * 60 + local.minute()) as u16)
}

/// [`local_day_minute`] of `now` (`now_ms` its milliseconds since the epoch), remembered in
/// `memo` for the last second and zone asked: local weekday and minute depend on the second
/// only (zone offsets are whole seconds).
pub(crate) fn remembered_day_minute(
    memo: &mut Option<LocalMemo>,
    tz: Tz,
    now: &DateTime<Utc>,
    now_ms: i64,
) -> (Weekday, u16) {
    let second = now_ms.div_euclid(1000);
    if let Some(m) = *memo
        && m.tz == tz
        && m.second == second
    {
        return (m.day, m.minute);
    }
    let (day, minute) = local_day_minute(tz, now);
    *memo = Some(LocalMemo {
        tz,
        second,
        day,
        minute,
    });
    (day, minute)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zone_names_parse_as_chrono_tz_does() {
        let names = TzNames::default();
        for _ in 0..2 {
            for n in ["Europe/Paris", "America/New_York", "UTC", "Not/AZone", ""] {
                assert_eq!(names.parse(n), n.parse::<Tz>().ok());
            }
        }
    }
}
