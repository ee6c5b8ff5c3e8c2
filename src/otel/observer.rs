//! The engine observer. On the decision path it only copies what the telemetry needs into a
//! bounded queue (dropping when full); a worker thread builds the spans and records the metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};
use std::time::{Duration, SystemTime};

use opentelemetry::Context;
use opentelemetry::trace::TraceContextExt;

use super::spans::{CallView, DecisionView, ResultView, RunView, Telemetry};
use crate::engine::{Decision, DecisionObserver, RunContext, ToolCall, ToolOutcome};

/// Most events waiting for the worker.
pub(crate) const QUEUE: usize = 8192;

/// A decision, owned, without allocating for its phase, effect and code.
struct OwnedDecision {
    phase: &'static str,
    effect: &'static str,
    code: &'static str,
    rule_id: Option<Arc<str>>,
    reason: Option<Arc<str>>,
    shadow_effect: Option<&'static str>,
    latency: Duration,
}

impl OwnedDecision {
    fn of(d: &Decision) -> OwnedDecision {
        OwnedDecision {
            phase: d.phase.as_str(),
            effect: d.effect.as_str(),
            code: d.code.as_str(),
            rule_id: d.rule_id.clone(),
            reason: d.reason.clone(),
            shadow_effect: d.shadow_effect.map(|e| e.as_str()),
            latency: Duration::from_nanos(d.latency_ns),
        }
    }

    fn view(&self) -> DecisionView<'_> {
        DecisionView {
            phase: self.phase,
            effect: self.effect,
            code: self.code,
            rule_id: self.rule_id.as_deref(),
            reason: self.reason.as_deref(),
            shadow_effect: self.shadow_effect,
            latency: self.latency,
        }
    }
}

struct OwnedRun {
    run_id: String,
    agent_id: String,
    session_id: Option<String>,
}

impl OwnedRun {
    fn of(run: &RunContext) -> OwnedRun {
        OwnedRun {
            run_id: run.run_id.clone(),
            agent_id: run.agent_id.clone(),
            session_id: run.session_id.clone(),
        }
    }

    fn view(&self) -> RunView<'_> {
        RunView {
            run_id: &self.run_id,
            agent_id: &self.agent_id,
            session_id: self.session_id.as_deref(),
        }
    }
}

/// What the worker is told.
enum Event {
    RunStart {
        run: OwnedRun,
        parent: Option<Context>,
        at: SystemTime,
    },
    Decision {
        run: OwnedRun,
        call_id: String,
        tool: String,
        decision: OwnedDecision,
        parent: Option<Context>,
        end: SystemTime,
    },
    Result {
        run_id: String,
        call_id: String,
        duration: Duration,
        error: Option<String>,
        after: Option<OwnedDecision>,
        at: SystemTime,
    },
    RunEnd {
        run_id: String,
        status: String,
        at: SystemTime,
    },
    /// Answer once everything before has been handled.
    Flush(SyncSender<()>),
}

/// The caller's current context, when it has a span: an OpenTelemetry context attached to the
/// task, else the current `tracing` span (through `tracing-opentelemetry`).
fn ambient() -> Option<Context> {
    let cx = Context::current();
    if cx.has_active_span() {
        return Some(cx);
    }
    let cx = tracing_opentelemetry::OpenTelemetrySpanExt::context(&tracing::Span::current());
    cx.span().span_context().is_valid().then_some(cx)
}

/// Feeds the worker from the engine's hooks, timed by the system clock.
pub(crate) struct OtelObserver {
    tx: SyncSender<Event>,
    dropped: Arc<AtomicU64>,
}

impl OtelObserver {
    fn send(&self, e: Event) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(e) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl DecisionObserver for OtelObserver {
    fn on_run_start(&self, run: &RunContext) {
        self.send(Event::RunStart {
            run: OwnedRun::of(run),
            parent: ambient(),
            at: SystemTime::now(),
        });
    }

    fn on_decision(&self, run: &RunContext, call: &ToolCall, decision: &Decision) {
        self.send(Event::Decision {
            run: OwnedRun::of(run),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            decision: OwnedDecision::of(decision),
            parent: ambient(),
            end: SystemTime::now(),
        });
    }

    fn on_result(
        &self,
        run: &RunContext,
        call_id: &str,
        outcome: &ToolOutcome,
        decision: Option<&Decision>,
    ) {
        self.send(Event::Result {
            run_id: run.run_id.clone(),
            call_id: call_id.to_string(),
            duration: outcome.duration,
            error: outcome.error.clone(),
            after: decision.map(OwnedDecision::of),
            at: SystemTime::now(),
        });
    }

    fn on_run_end(&self, run: &RunContext, status: &str) {
        self.send(Event::RunEnd {
            run_id: run.run_id.clone(),
            status: status.to_string(),
            at: SystemTime::now(),
        });
    }
}

/// The worker's queue. The thread ends when every sender (the observers' too) is gone.
pub(crate) struct Worker {
    tx: SyncSender<Event>,
    dropped: Arc<AtomicU64>,
}

impl Worker {
    /// Starts the worker thread feeding `telemetry`.
    pub(crate) fn start(telemetry: Arc<Telemetry>) -> Result<Worker, String> {
        let (tx, rx) = sync_channel(QUEUE);
        // Polled every POLL: the queue must hold the events of that long.
        std::thread::Builder::new()
            .name("toolgate-otel".into())
            .spawn(move || work(&telemetry, rx))
            .map_err(|e| format!("cannot start the telemetry thread: {e}"))?;
        Ok(Worker {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        })
    }

    /// An observer feeding this worker.
    pub(crate) fn observer(&self) -> OtelObserver {
        OtelObserver {
            tx: self.tx.clone(),
            dropped: self.dropped.clone(),
        }
    }

    /// Events dropped because the queue was full.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits until the worker has handled every event sent before.
    pub(crate) fn drain(&self) {
        let (ack, done) = sync_channel(1);
        if self.tx.send(Event::Flush(ack)).is_ok() {
            let _ = done.recv();
        }
    }
}

/// How often the worker looks at its queue. It polls rather than blocking in `recv`, so that a
/// decision never pays for waking it (a futex wake-up costs more than the decision itself).
const POLL: Duration = Duration::from_millis(10);

fn work(t: &Telemetry, rx: Receiver<Event>) {
    loop {
        match rx.try_recv() {
            Ok(e) => handle(t, e),
            Err(TryRecvError::Empty) => std::thread::sleep(POLL),
            Err(TryRecvError::Disconnected) => return,
        }
    }
}

fn handle(t: &Telemetry, e: Event) {
    match e {
        Event::RunStart { run, parent, at } => t.start_run(run.view(), parent, at),
        Event::Decision {
            run,
            call_id,
            tool,
            decision,
            parent,
            end,
        } => {
            let start = end.checked_sub(decision.latency).unwrap_or(end);
            let call = CallView {
                id: &call_id,
                tool: &tool,
            };
            t.decision(run.view(), call, &decision.view(), parent, start, end);
        }
        Event::Result {
            run_id,
            call_id,
            duration,
            error,
            after,
            at,
        } => {
            let result = ResultView {
                duration_ms: Some(duration.as_secs_f64() * 1000.0),
                error: error.as_deref(),
            };
            let after = after.as_ref().map(OwnedDecision::view);
            t.result(&run_id, &call_id, result, after.as_ref(), at);
        }
        Event::RunEnd { run_id, status, at } => t.end_run(&run_id, Some(&status), at),
        Event::Flush(ack) => {
            let _ = ack.send(());
        }
    }
}
