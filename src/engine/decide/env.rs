//! What a decision reads besides the policies and the call: of the engine ([`DecideEnv`]: the
//! registered signal providers, `custom` functions and subject extractors, the state store,
//! time zones, how `sensitiveData` scans) and of the run ([`RunFacts`]: its context, start,
//! history and state keys). Both are plain structs owned here; the engine and the run hold one
//! each and hand decisions a reference to it.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc, Weekday};
use chrono_tz::Tz;
use parking_lot::Mutex;

use super::call::RunContext;
use super::custom::CustomRegistry;
use super::history::History;
use super::profile::ToolProfile;
use super::signals::SignalRegistry;
use super::subjects::RegisteredExtractor;
use super::tz::{LocalMemo, TzNames, remembered_day_minute};
use crate::policy::{Phase, Scope};
use crate::state::{StateKey, StateStore};

/// The engine's side of a decision: what it is configured with and what is registered on it.
pub(crate) struct DecideEnv {
    pub(crate) org_timezone: Option<Tz>,
    pub(crate) signal_timeout: Duration,
    pub(crate) state: Arc<dyn StateStore>,
    /// End-user time zone names parsed (see `tz.rs`).
    pub(crate) tz_names: TzNames,
    pub(crate) signals: ArcSwap<SignalRegistry>,
    pub(crate) customs: ArcSwap<CustomRegistry>,
    pub(crate) extractors: ArcSwap<Vec<RegisteredExtractor>>,
    /// How `sensitiveData` reads strings: the scan limit; stand-ins honoured (what-if only).
    pub(crate) scan_mode: ScanMode,
}

impl DecideEnv {
    /// How `sensitiveData` conditions read strings.
    pub(crate) fn scan_mode(&self) -> ScanMode {
        self.scan_mode
    }
}

/// The run's side of a decision: who runs, since when, the calls made so far, the keys of the
/// run's state and what was worked out for it once.
pub(crate) struct RunFacts {
    pub(crate) context: Arc<RunContext>,
    pub(crate) started_ms: i64,
    pub(crate) history: Mutex<History>,
    /// The end user's time zone from a tag, parsed once: (tag, zone).
    pub(crate) tz_cache: std::sync::OnceLock<(Box<str>, Option<Tz>)>,
    /// The local time of the last second a `timeGate` asked (see `tz.rs`).
    pub(crate) local_memo: Mutex<Option<LocalMemo>>,
    /// The end user's tags laid out for a scan (`None`: no end user, or too many tags).
    pub(crate) enduser_tags: Option<EnduserTags>,
    pub(crate) run_key: Arc<str>,
    pub(crate) agent_key: Arc<str>,
    pub(crate) agent_user_key: Arc<str>,
}

impl RunFacts {
    /// The facts of a run of `context` started at `started_ms`: nothing called yet.
    pub(crate) fn new(context: RunContext, started_ms: i64) -> RunFacts {
        let enduser = context.enduser.as_ref().map_or("", |u| u.id.as_str());
        RunFacts {
            run_key: Arc::from(crate::state::run_scope(&context.agent_id, &context.run_id)),
            agent_key: Arc::from(crate::state::agent_scope(&context.agent_id)),
            agent_user_key: Arc::from(crate::state::user_scope(&context.agent_id, enduser)),
            enduser_tags: context
                .enduser
                .as_ref()
                .and_then(|u| EnduserTags::new(&u.tags)),
            context: Arc::new(context),
            started_ms,
            history: Mutex::new(History::default()),
            tz_cache: std::sync::OnceLock::new(),
            local_memo: Mutex::new(None),
        }
    }

    pub(crate) fn state_key(&self, slot: u64, scope: Scope) -> StateKey {
        StateKey {
            slot,
            scope: match scope {
                Scope::Run => self.run_key.clone(),
                Scope::Agent => self.agent_key.clone(),
                Scope::AgentUser => self.agent_user_key.clone(),
            },
        }
    }

    /// The time zone named by the end user's tag `tag` (looked up once per run for the first
    /// tag asked; other tags are looked up each time), names parsed through `names`.
    pub(crate) fn enduser_tz(&self, names: &TzNames, tag: &str) -> Option<Tz> {
        let parse = || {
            self.context
                .enduser
                .as_ref()
                .and_then(|u| u.tags.get(tag))
                .and_then(|v| names.parse(v))
        };
        let (cached_tag, tz) = self.tz_cache.get_or_init(|| (tag.into(), parse()));
        if &**cached_tag == tag { *tz } else { parse() }
    }

    /// The local weekday and minute of the day of `now` (`now_ms` its milliseconds since the
    /// epoch) in `tz`, remembered for the last second and zone asked (see `tz.rs`).
    pub(crate) fn local_day_minute(
        &self,
        tz: Tz,
        now: &DateTime<Utc>,
        now_ms: i64,
    ) -> (Weekday, u16) {
        remembered_day_minute(&mut self.local_memo.lock(), tz, now, now_ms)
    }
}

/// The end user's tags laid out for a scan: keys and values in one string, their bounds in a
/// list. A lookup compares lengths first and walks no B-tree: most runs' users have a handful
/// of tags, and `enduserTag` conditions read them on every decision.
#[derive(Debug)]
pub(crate) struct EnduserTags {
    text: Box<str>,
    /// Per tag: where its key starts, where the key ends and the value starts, where the value
    /// ends (byte offsets in `text`).
    bounds: Box<[(u32, u32, u32)]>,
}

impl EnduserTags {
    /// Tags past which the map's own ordered search is used instead.
    const MAX: usize = 8;

    /// The layout of `tags`; `None` when there are more than [`MAX`](Self::MAX) (or their text
    /// does not fit 32-bit offsets).
    pub(crate) fn new(tags: &std::collections::BTreeMap<String, String>) -> Option<EnduserTags> {
        if tags.len() > Self::MAX {
            return None;
        }
        let len: usize = tags.iter().map(|(k, v)| k.len() + v.len()).sum();
        let fits = |n: usize| u32::try_from(n).ok();
        fits(len)?;
        let mut text = String::with_capacity(len);
        let mut bounds = Vec::with_capacity(tags.len());
        for (k, v) in tags {
            let start = fits(text.len())?;
            text.push_str(k);
            let mid = fits(text.len())?;
            text.push_str(v);
            bounds.push((start, mid, fits(text.len())?));
        }
        Some(EnduserTags {
            text: text.into_boxed_str(),
            bounds: bounds.into_boxed_slice(),
        })
    }

    /// The value of tag `key`.
    #[inline]
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        let k = key.as_bytes();
        let text = self.text.as_bytes();
        for &(start, mid, end) in &*self.bounds {
            let (start, mid) = (start as usize, mid as usize);
            if mid - start == k.len()
                && text
                    .get(start..mid)
                    .is_some_and(|t| crate::policy::eq_bytes(t, k))
            {
                return self.text.get(mid..end as usize);
            }
        }
        None
    }
}

impl ToolProfile {
    /// Whether deciding on this tool in `phase` awaits anything: a signal provider, or a
    /// subject extractor registered for the tool when a rule in play needs subjects (from the
    /// flags worked out once with the profile).
    #[inline(always)]
    pub(crate) fn needs_async(&self, engine: &DecideEnv, phase: Phase) -> bool {
        let p = crate::policy::phase_slot(phase);
        self.has_signal[p] || (self.needs_subjects[p] && self.has_extractor(engine))
    }

    /// Whether a subject extractor is registered for the tool (out of line: only tools whose
    /// rules need subjects ask).
    #[inline(never)]
    fn has_extractor(&self, engine: &DecideEnv) -> bool {
        engine
            .extractors
            .load()
            .iter()
            .any(|e| e.glob.is_match(&*self.name_lc))
    }
}

/// How strings are read: the scan limit, and whether stand-ins are honoured (what-if).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScanMode {
    /// Bytes scanned of each string; past them the detectors' answer is missing data.
    pub(crate) limit: usize,
    /// The trail's stand-ins (`[redacted:<detector>]`) stand for what their detector found:
    /// only a what-if replay of a recorded trail honours them. Live calls are scanned whatever
    /// they contain.
    pub(crate) stand_ins: bool,
}

#[cfg(test)]
mod tests {
    use super::EnduserTags;
    use std::collections::BTreeMap;

    #[test]
    fn enduser_tags_find_what_the_map_finds() {
        let keys = [
            "",
            "a",
            "b",
            "ab",
            "tz",
            "role",
            "rolf",
            "plan",
            "tier",
            "région",
            "a_long_key_past_16_bytes",
        ];
        for n in 0..=8 {
            let tags: BTreeMap<String, String> = keys[..n]
                .iter()
                .enumerate()
                .map(|(i, k)| (k.to_string(), format!("v{i}é")))
                .collect();
            let laid_out = EnduserTags::new(&tags).expect("up to 8 tags are laid out");
            for k in keys
                .iter()
                .chain(&["c", "rol", "roles", "a_long_key_past_16_bytez"])
            {
                assert_eq!(
                    laid_out.get(k),
                    tags.get(*k).map(String::as_str),
                    "{k} in {n}"
                );
            }
        }
        let many: BTreeMap<String, String> = keys
            .iter()
            .map(|k| (k.to_string(), String::new()))
            .collect();
        assert!(
            EnduserTags::new(&many).is_none(),
            "more than 8: the map's own search"
        );
    }
}
