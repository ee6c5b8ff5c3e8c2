//! The `ts` text of sealed events: RFC 3339 in UTC with `Z`, the fraction as chrono's
//! `SecondsFormat::AutoSi` writes it (none, 3, 6 or 9 digits), written without chrono's
//! formatting machinery (it is on every sealed event).

use chrono::{DateTime, Datelike, SecondsFormat, Timelike, Utc};

use super::text::TsText;

/// `ts` as `to_rfc3339_opts(SecondsFormat::AutoSi, true)` writes it (inline: no allocation).
pub(crate) fn rfc3339(ts: DateTime<Utc>) -> TsText {
    let d = ts.naive_utc();
    let year = d.year();
    let nanos = d.nanosecond();
    if !(0..=9999).contains(&year) || nanos >= 1_000_000_000 {
        // Years of other widths and leap seconds: chrono's own writer.
        return TsText::new(&ts.to_rfc3339_opts(SecondsFormat::AutoSi, true));
    }
    let mut b = [0u8; 30];
    let mut put = |at: usize, v: u32, width: usize| {
        let mut v = v;
        for i in (0..width).rev() {
            b[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, year as u32, 4);
    put(5, d.month(), 2);
    put(8, d.day(), 2);
    put(11, d.hour(), 2);
    put(14, d.minute(), 2);
    put(17, d.second(), 2);
    let (digits, value) = if nanos == 0 {
        (0, 0)
    } else if nanos.is_multiple_of(1_000_000) {
        (3, nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        (6, nanos / 1_000)
    } else {
        (9, nanos)
    };
    let mut len = 19;
    if digits > 0 {
        put(20, value, digits);
        b[19] = b'.';
        len = 20 + digits;
    }
    b[4] = b'-';
    b[7] = b'-';
    b[10] = b'T';
    b[13] = b':';
    b[16] = b':';
    b[len] = b'Z';
    match std::str::from_utf8(&b[..=len]) {
        Ok(s) => TsText::new(s),
        Err(_) => TsText::new(&ts.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use proptest::prelude::*;

    use super::*;

    fn chrono_text(ts: DateTime<Utc>) -> String {
        ts.to_rfc3339_opts(SecondsFormat::AutoSi, true)
    }

    #[test]
    fn each_fraction_width_and_the_edges() {
        let base = Utc
            .with_ymd_and_hms(2026, 1, 5, 9, 3, 7)
            .single()
            .expect("a time");
        for nanos in [
            0,
            1,
            1_000,
            1_000_000,
            120_000_000,
            999_999_999,
            123_456_000,
            5,
        ] {
            let ts = base + chrono::Duration::nanoseconds(nanos);
            assert_eq!(rfc3339(ts).as_str(), chrono_text(ts));
        }
        for ts in [
            DateTime::<Utc>::MIN_UTC,
            DateTime::<Utc>::MAX_UTC,
            DateTime::<Utc>::UNIX_EPOCH,
            Utc.with_ymd_and_hms(0, 1, 1, 0, 0, 0)
                .single()
                .expect("year 0"),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59)
                .single()
                .expect("year 9999"),
        ] {
            assert_eq!(rfc3339(ts).as_str(), chrono_text(ts));
        }
    }

    proptest! {
        #[test]
        fn any_time_is_written_as_chrono_writes_it(
            secs in -70_000_000_000i64..300_000_000_000i64,
            nanos in prop_oneof![Just(0u32), 0u32..1000, (0u32..1000).prop_map(|n| n * 1_000_000),
                                 (0u32..1_000_000).prop_map(|n| n * 1000), 0u32..1_000_000_000],
        ) {
            if let Some(ts) = DateTime::<Utc>::from_timestamp(secs, nanos) {
                let text = rfc3339(ts);
                prop_assert_eq!(text.as_str(), chrono_text(ts));
            }
        }
    }
}
