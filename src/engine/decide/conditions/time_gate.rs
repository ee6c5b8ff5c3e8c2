//! `timeGate`: true when the end user's local time is inside any window.
use chrono_tz::Tz;

use super::Tri;
use crate::engine::decide::ctx::DecisionCtx;
use crate::policy::{CTzSource, TimeWindow};

pub(crate) fn eval(src: &CTzSource, windows: &[TimeWindow], ctx: &mut DecisionCtx<'_>) -> Tri {
    let tz: Option<Tz> = match src {
        CTzSource::Static(tz) => Some(*tz),
        CTzSource::Tag { tag, fallback_org } => {
            let from_tag = ctx.run.enduser_tz(&ctx.engine.tz_names, tag);
            from_tag.or(if *fallback_org {
                ctx.org_timezone()
            } else {
                None
            })
        }
    };
    let Some(tz) = tz else {
        ctx.note_missing("timeGate: no valid timezone for the end user".to_string());
        return Tri::Unknown;
    };
    let now = ctx.now();
    let (day, minute) = ctx.run.local_day_minute(tz, &now, now.timestamp_millis());
    windows.iter().any(|w| in_window(w, day, minute)).into()
}

/// `days` names the day a window starts; a window with `start > end` spans midnight.
pub(crate) fn in_window(w: &TimeWindow, day: chrono::Weekday, minute: u16) -> bool {
    let (s, e) = (w.start.0, w.end.0);
    if s < e {
        w.days.contains(&day) && minute >= s && minute < e
    } else {
        (w.days.contains(&day) && minute >= s) || (w.days.contains(&day.pred()) && minute < e)
    }
}
