//! The context of one decision: the call as the rules see it ([`CallView`]), what the decision
//! reads of the engine and the run, what it has gathered so far (permits, signals, subjects,
//! missing data, detections), and the three-valued truth of a condition ([`Tri`]). Conditions
//! read it; `evaluate` combines their answers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::{Map, Value};

use super::call::SubjectRef;
use super::decision::SignalRecord;
use super::env::{DecideEnv, RunFacts};
use super::profile::ToolProfile;
use crate::policy::EffectType;
use smallvec::SmallVec;

use crate::state::{Permit, StateKey};

/// What a decision knows of the call.
pub(crate) struct CallView<'a> {
    pub(crate) name: &'a str,
    pub(crate) name_lc: &'a str,
    pub(crate) tags: &'a [String],
    pub(crate) tags_lc: &'a [String],
    pub(crate) args: &'a Value,
    pub(crate) duration_ms: Option<f64>,
    /// The tool's result (after phase): its output, or its error as a string.
    pub(crate) output: Option<&'a Value>,
}

/// Everything one decision reads and accumulates.
pub(crate) struct DecisionCtx<'a> {
    pub(crate) engine: &'a DecideEnv,
    pub(crate) policies: &'a super::profile::PolicySet,
    pub(crate) run: &'a RunFacts,
    /// What the policies say about the tool (rules in play, counters it takes).
    pub(crate) profile: &'a ToolProfile,
    pub(crate) call: CallView<'a>,
    /// The decision's time: read from `clock` when first asked (see [`DecisionCtx::now`]).
    now: std::cell::Cell<Option<DateTime<Utc>>>,
    /// Where `now` is read from when not given (`None`: it always is).
    clock: Option<&'a dyn crate::engine::clock::Clock>,
    pub(crate) subjects: Vec<SubjectRef>,
    pub(crate) permits: SmallVec<[(u32, StateKey, Permit); 4]>,
    pub(crate) signals: Vec<SignalRecord>,
    /// Missing data noted while evaluating the current rule.
    pub(crate) missing: Vec<String>,
    /// Effect forced by a condition's `onMissing` in the current rule.
    pub(crate) effect_override: Option<EffectType>,
    /// What `sensitiveData` conditions detected in the current rule (`None` when nothing was:
    /// a policy without `sensitiveData` pays one null pointer, moved into each evaluated rule).
    pub(crate) detections: Option<Box<[super::decision::Detection]>>,
    /// Detections of the current rule past those kept, counted.
    pub(crate) detected_more: u32,
    /// On a shared state store: what the decision read from it (conditions read here).
    pub(crate) remote: Option<super::remote::RemoteView>,
}

impl<'a> DecisionCtx<'a> {
    /// A fresh context for one decision about `call` at `now`.
    pub(crate) fn new(
        engine: &'a DecideEnv,
        policies: &'a super::profile::PolicySet,
        run: &'a RunFacts,
        profile: &'a ToolProfile,
        call: CallView<'a>,
        now: DateTime<Utc>,
        subjects: Vec<SubjectRef>,
    ) -> Self {
        let ctx = Self::new_at(engine, policies, run, profile, call, None, subjects);
        ctx.now.set(Some(now));
        ctx
    }

    /// [`new`](Self::new), the time read from `clock` only if the decision needs it (see
    /// [`set_now`](Self::set_now) when the caller has it already): a decision whose rules read
    /// no time and that raises no review never reads the clock.
    pub(crate) fn new_at(
        engine: &'a DecideEnv,
        policies: &'a super::profile::PolicySet,
        run: &'a RunFacts,
        profile: &'a ToolProfile,
        call: CallView<'a>,
        clock: Option<&'a dyn crate::engine::clock::Clock>,
        subjects: Vec<SubjectRef>,
    ) -> Self {
        DecisionCtx {
            engine,
            policies,
            run,
            profile,
            call,
            now: std::cell::Cell::new(None),
            clock,
            subjects,
            permits: SmallVec::new(),
            signals: Vec::new(),
            missing: Vec::new(),
            effect_override: None,
            detections: None,
            detected_more: 0,
            remote: None,
        }
    }
}

impl DecisionCtx<'_> {
    /// Frees what the context gathered, for a context kept in a `ManuallyDrop` (its drop
    /// code is not run). What it gathered is almost always nothing (no permit, signal,
    /// subject or missing data: empty containers that never allocated), and then there is
    /// nothing to free: this tests that instead of running the drop code of every field
    /// (about 40 instructions per decision, issue 38). Every field is named, so a field added
    /// later must be considered here. (If a decision panics, what its context gathered is
    /// leaked, not freed: the panic is caught and decided by the failure mode.)
    #[inline]
    pub(crate) fn release(&mut self) {
        let DecisionCtx {
            engine: _,
            policies: _,
            run: _,
            profile: _,
            call: _,
            now: _,
            clock: _,
            subjects,
            permits,
            signals,
            missing,
            effect_override: _,
            detections,
            detected_more: _,
            remote,
        } = self;
        release_vec(subjects);
        release_vec(signals);
        release_vec(missing);
        if !permits.is_empty() || permits.spilled() {
            drop(std::mem::take(permits));
        }
        drop(detections.take());
        drop(remote.take());
    }
}

/// Frees what `v` holds (it is left empty); one that never allocated holds nothing.
#[inline(always)]
pub(crate) fn release_vec<T>(v: &mut Vec<T>) {
    if v.capacity() != 0 {
        drop(std::mem::take(v));
    }
}

impl DecisionCtx<'_> {
    /// The decision's time (read from the clock once, when first asked).
    #[inline]
    pub(crate) fn now(&self) -> DateTime<Utc> {
        match self.now.get() {
            Some(t) => t,
            None => self.read_clock(),
        }
    }

    #[cold]
    #[inline(never)]
    fn read_clock(&self) -> DateTime<Utc> {
        let t = self.clock.map_or_else(Utc::now, |c| c.now());
        self.now.set(Some(t));
        t
    }

    /// Sets the decision's time (known to the caller).
    pub(crate) fn set_now(&mut self, now: DateTime<Utc>) {
        self.now.set(Some(now));
    }

    /// [`now`](Self::now) in milliseconds since the epoch.
    #[inline]
    pub(crate) fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }

    /// The decision's time, if something read it.
    pub(crate) fn now_if_read(&self) -> Option<DateTime<Utc>> {
        self.now.get()
    }

    pub(crate) fn note_missing(&mut self, what: String) {
        self.missing.push(what);
    }

    /// Adds detections of a `sensitiveData` condition to the current rule's.
    #[cold]
    pub(crate) fn add_detections(&mut self, found: Vec<super::decision::Detection>, more: u32) {
        self.detected_more = self.detected_more.saturating_add(more);
        if found.is_empty() {
            return;
        }
        self.detections = Some(match self.detections.take() {
            None => found.into_boxed_slice(),
            Some(had) => {
                let mut all = had.into_vec();
                all.extend(found);
                all.into_boxed_slice()
            }
        });
    }

    pub(crate) fn org_timezone(&self) -> Option<Tz> {
        self.engine.org_timezone.or(self.policies.org_timezone)
    }

    /// The value of a signal for these arguments: cached per decision, provider called with a
    /// timeout; panics, errors, timeouts and absent providers are missing data.
    pub(crate) async fn signal_value(
        &mut self,
        key: &Arc<str>,
        args: Map<String, Value>,
    ) -> Option<Value> {
        let args = Value::Object(args);
        if let Some(r) = self
            .signals
            .iter()
            .find(|r| &r.key == key && r.args == args)
        {
            let (value, error) = (r.value.clone(), r.error.clone());
            if let Some(e) = error {
                self.note_missing(format!("signal {key}: {e}"));
            }
            return value;
        }
        let provider = self.engine.signals.load().get(&**key).cloned();
        let started = Instant::now();
        let result: Result<Value, String> = match provider {
            None => Err("no provider registered".to_string()),
            Some(p) => {
                let Value::Object(map) = args.clone() else {
                    return None;
                };
                let timeout = self.engine.signal_timeout;
                call_user_code(timeout, || p.call(map))
                    .await
                    .map_err(|f| match f {
                        UserCodeFailure::Panicked => "the provider panicked".to_string(),
                        UserCodeFailure::Failed(e) => format!("the provider failed: {e}"),
                        UserCodeFailure::TimedOut => {
                            format!("timed out after {} ms", timeout.as_millis())
                        }
                    })
            }
        };
        let duration_us = started.elapsed().as_micros() as u64;
        let (value, error) = match result {
            Ok(v) => (Some(v), None),
            Err(e) => {
                self.note_missing(format!("signal {key}: {e}"));
                (None, Some(e))
            }
        };
        self.signals.push(SignalRecord {
            key: key.clone(),
            args,
            value: value.clone(),
            error,
            duration_us,
        });
        value
    }
}

impl DecisionCtx<'_> {
    /// The rules whose policy applies to the run's agent (its `agentSelector`).
    #[cold]
    pub(crate) fn selected_rules(&self, rules: &[u32]) -> SmallVec<[u32; 16]> {
        let ctx = &self.run.context;
        rules
            .iter()
            .copied()
            .filter(|&i| {
                let p = self.policies.rules[i as usize].policy as usize;
                match self
                    .policies
                    .policies
                    .get(p)
                    .and_then(|p| p.agents.as_ref())
                {
                    None => true,
                    Some(a) => a.selects(&ctx.agent_id, &ctx.agent_tags),
                }
            })
            .collect()
    }

    /// A custom condition's value: its registered function called with `args` and the call's
    /// context, with the signal timeout; panics, errors, timeouts and unregistered names are
    /// missing data.
    pub(crate) async fn custom_value(&mut self, name: &Arc<str>, args: &Value) -> Tri {
        let f = self.engine.customs.load().get(&**name).cloned();
        let Some(f) = f else {
            self.note_missing(format!("custom {name}: no function registered"));
            return Tri::Unknown;
        };
        let cc = super::custom::CustomContext {
            tool_name: self.call.name.to_string(),
            tool_tags: self.call.tags.to_vec(),
            args: self.call.args.clone(),
            run: self.run.context.clone(),
        };
        let args = args.clone();
        let timeout = self.engine.signal_timeout;
        match call_user_code(timeout, || f.call(args, cc)).await {
            Ok(b) => b.into(),
            Err(e) => {
                let why = match e {
                    UserCodeFailure::Panicked => "the function panicked".to_string(),
                    UserCodeFailure::Failed(e) => format!("the function failed: {e}"),
                    UserCodeFailure::TimedOut => {
                        format!("timed out after {} ms", timeout.as_millis())
                    }
                };
                self.note_missing(format!("custom {name}: {why}"));
                Tri::Unknown
            }
        }
    }
}

/// Why registered user code (a signal provider, a subject extractor) gave no result.
pub(crate) enum UserCodeFailure {
    Panicked,
    Failed(String),
    TimedOut,
}

/// Runs registered user code with a timeout, containing a panic while it makes its future as
/// well as while the future runs.
pub(crate) async fn call_user_code<T>(
    timeout: std::time::Duration,
    make: impl FnOnce() -> Pin<Box<dyn Future<Output = Result<T, String>> + Send>>,
) -> Result<T, UserCodeFailure> {
    let Ok(fut) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(make)) else {
        return Err(UserCodeFailure::Panicked);
    };
    let fut = futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(fut));
    match tokio::time::timeout(timeout, fut).await {
        Err(_) => Err(UserCodeFailure::TimedOut),
        Ok(Err(_)) => Err(UserCodeFailure::Panicked),
        Ok(Ok(Err(e))) => Err(UserCodeFailure::Failed(e)),
        Ok(Ok(Ok(v))) => Ok(v),
    }
}

/// A three-valued truth: a condition may be unknown for lack of data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tri {
    True,
    False,
    Unknown,
}

impl From<bool> for Tri {
    fn from(b: bool) -> Tri {
        if b { Tri::True } else { Tri::False }
    }
}
