//! Compact text held by an [`super::AuditEvent`]: short texts (a hash, a timestamp) inline
//! rather than in an allocation of their own, and the ids every event of a run shares in one
//! reference-counted [`RunIds`]. An event is sealed on one thread and dropped on another, so
//! each allocation and shared count it does not need is work saved on both.

use std::fmt;
use std::sync::{Arc, OnceLock};

use arrayvec::ArrayString;

use super::canonical::write_string;

/// Text kept inline when it fits in `N` bytes, else shared on the heap.
#[derive(Clone)]
pub(crate) enum SmallText<const N: usize> {
    /// A text of at most `N` bytes.
    Inline(ArrayString<N>),
    /// A longer text.
    Heap(Arc<str>),
}

impl<const N: usize> SmallText<N> {
    /// `s`, inline when it fits.
    pub(crate) fn new(s: &str) -> Self {
        match ArrayString::from(s) {
            Ok(a) => SmallText::Inline(a),
            Err(_) => SmallText::Heap(Arc::from(s)),
        }
    }

    /// The text.
    #[inline]
    pub(crate) fn as_str(&self) -> &str {
        match self {
            SmallText::Inline(a) => a,
            SmallText::Heap(s) => s,
        }
    }
}

impl<const N: usize> PartialEq for SmallText<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl<const N: usize> Eq for SmallText<N> {}

impl<const N: usize> fmt::Debug for SmallText<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// A hash in hex (64 digits for SHA-256; other texts are kept too, for events read from
/// elsewhere).
pub(crate) type HashText = SmallText<64>;

/// An RFC 3339 timestamp (up to 35 bytes as toolgate writes them; any length read).
pub(crate) type TsText = SmallText<40>;

/// The ids of a run, shared by all its events.
pub(crate) struct RunIds {
    run_id: Box<str>,
    agent_id: Box<str>,
    enduser_id: Option<Box<str>>,
    /// The ids as JSON string literals, written the first time an event of the run is sealed.
    quoted: OnceLock<Quoted>,
}

/// A run's ids written as JSON string literals: `text` holds the agent id's, then the run
/// id's, then the end user's (if any).
struct Quoted {
    text: String,
    agent_end: usize,
    run_end: usize,
}

impl RunIds {
    /// The ids of a run.
    pub(crate) fn new(run_id: String, agent_id: String, enduser_id: Option<String>) -> Arc<Self> {
        Arc::new(RunIds {
            run_id: run_id.into_boxed_str(),
            agent_id: agent_id.into_boxed_str(),
            enduser_id: enduser_id.map(String::into_boxed_str),
            quoted: OnceLock::new(),
        })
    }

    /// The run id.
    pub(crate) fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The agent id.
    pub(crate) fn agent_id(&self) -> &str {
        &self.agent_id
    }

    /// The end-user id, if any.
    pub(crate) fn enduser_id(&self) -> Option<&str> {
        self.enduser_id.as_deref()
    }

    /// The agent, run and end-user ids as JSON string literals (each written once per run).
    pub(crate) fn quoted(&self) -> (&str, &str, Option<&str>) {
        let q = self.quoted.get_or_init(|| {
            let mut text = String::new();
            write_string(&self.agent_id, &mut text);
            let agent_end = text.len();
            write_string(&self.run_id, &mut text);
            let run_end = text.len();
            if let Some(u) = &self.enduser_id {
                write_string(u, &mut text);
            }
            Quoted {
                text,
                agent_end,
                run_end,
            }
        });
        let t = q.text.as_str();
        (
            t.get(..q.agent_end).unwrap_or_default(),
            t.get(q.agent_end..q.run_end).unwrap_or_default(),
            self.enduser_id
                .is_some()
                .then(|| t.get(q.run_end..).unwrap_or_default()),
        )
    }
}

impl PartialEq for RunIds {
    fn eq(&self, other: &Self) -> bool {
        self.run_id == other.run_id
            && self.agent_id == other.agent_id
            && self.enduser_id == other.enduser_id
    }
}

impl fmt::Debug for RunIds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunIds")
            .field("run_id", &self.run_id)
            .field("agent_id", &self.agent_id)
            .field("enduser_id", &self.enduser_id)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_texts_are_inline_and_long_ones_shared() {
        let h = "a".repeat(64);
        assert!(matches!(HashText::new(&h), SmallText::Inline(_)));
        assert_eq!(HashText::new(&h).as_str(), h);
        let long = "é".repeat(40);
        assert!(matches!(HashText::new(&long), SmallText::Heap(_)));
        assert_eq!(HashText::new(&long).as_str(), long);
        assert_eq!(TsText::new(""), TsText::new(""));
        assert_eq!(HashText::new(&h), HashText::Heap(Arc::from(h.as_str())));
    }

    #[test]
    fn ids_are_quoted_once() {
        let ids = RunIds::new("r\"1".into(), "a".into(), None);
        assert_eq!(ids.quoted(), ("\"a\"", "\"r\\\"1\"", None));
        let ids = RunIds::new("r".into(), "a".into(), Some("u\n".into()));
        assert_eq!(ids.quoted(), ("\"a\"", "\"r\"", Some("\"u\\n\"")));
    }
}
