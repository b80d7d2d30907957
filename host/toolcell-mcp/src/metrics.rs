//! What `serve` counts, for `GET /metrics` in the Prometheus text format (rendered by
//! `metrics-exporter-prometheus`, with a recorder of the service's own, not a global one).
//!
//! Labels hold only bounded, non-identifying values: tool names the policy knows (any other
//! name is `unknown`), role names, outcome and denial kinds, index states. No path, principal,
//! session or token is ever a label.

use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics::{Key, KeyName, Label, Level, Metadata, Recorder as _, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};

use crate::operator::Event;

const METADATA: Metadata<'static> = Metadata::new("toolcell_mcp", Level::INFO, None);

/// The latency buckets of a tool call, in seconds.
const BUCKETS: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

const CALLS: &str = "toolcell_tool_calls_total";
const DURATION: &str = "toolcell_tool_call_duration_seconds";
const IN_FLIGHT: &str = "toolcell_tool_calls_in_flight";
const DENIALS: &str = "toolcell_denials_total";
const SESSIONS: &str = "toolcell_sessions_open";
const AUDIT: &str = "toolcell_audit_appends_total";
const STORE: &str = "toolcell_store_outages_total";
const INDEX: &str = "toolcell_index_workspaces";

/// The service's counters.
pub struct Metrics {
    recorder: PrometheusRecorder,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Counters at zero, each described.
    #[must_use]
    pub fn new() -> Metrics {
        // `set_buckets` fails only for an empty list.
        let builder = PrometheusBuilder::new().set_buckets(&BUCKETS).unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let describe = |name: &'static str, unit: Option<Unit>, help: &'static str, kind: u8| {
            let (name, help) = (KeyName::from_const_str(name), SharedString::const_str(help));
            match kind {
                0 => recorder.describe_counter(name, unit, help),
                1 => recorder.describe_gauge(name, unit, help),
                _ => recorder.describe_histogram(name, unit, help),
            }
        };
        describe(CALLS, None, "Tool calls that ended, by tool, role and outcome (ok, an error kind, refused, cancelled).", 0);
        describe(DURATION, Some(Unit::Seconds), "How long tool calls took, by tool.", 2);
        describe(IN_FLIGHT, None, "Tool calls running now.", 1);
        describe(
            DENIALS,
            None,
            "Refusals, by kind: policy (an access the policy refused), unauthorized, forbidden, too_large, too_many, unavailable.",
            0,
        );
        describe(SESSIONS, None, "MCP sessions open now.", 1);
        describe(AUDIT, None, "Audit records appended for tool calls.", 0);
        describe(STORE, None, "Times a use found the shared store unreachable.", 0);
        describe(INDEX, None, "Served workspaces by the state of their content index: absent, damaged, current, stale.", 1);
        let metrics = Metrics { recorder };
        // Present from the start, so that a scrape sees every series a dashboard queries.
        metrics.gauge(IN_FLIGHT, Vec::new()).set(0.0);
        for kind in ["policy", "unauthorized", "forbidden", "too_large", "too_many", "unavailable"] {
            metrics.counter(DENIALS, vec![Label::new("kind", kind)]).absolute(0);
        }
        metrics.counter(AUDIT, Vec::new()).absolute(0);
        metrics.counter(STORE, Vec::new()).absolute(0);
        metrics
    }

    fn counter(&self, name: &'static str, labels: Vec<Label>) -> metrics::Counter {
        self.recorder.register_counter(&Key::from_parts(name, labels), &METADATA)
    }

    fn gauge(&self, name: &'static str, labels: Vec<Label>) -> metrics::Gauge {
        self.recorder.register_gauge(&Key::from_parts(name, labels), &METADATA)
    }

    /// A tool call begins: counted in flight until the returned meter is finished or dropped.
    pub(crate) fn call(self: &Arc<Self>, tool: &str, role: &str) -> CallMeter {
        self.gauge(IN_FLIGHT, Vec::new()).increment(1.0);
        CallMeter { metrics: Arc::clone(self), tool: tool.to_owned(), role: role.to_owned(), started: Instant::now(), outcome: None }
    }

    /// `count` accesses of a call the policy refused.
    pub(crate) fn policy_denials(&self, count: usize) {
        if count > 0 {
            self.counter(DENIALS, vec![Label::new("kind", "policy")]).increment(u64::try_from(count).unwrap_or(u64::MAX));
        }
    }

    /// An audit record was appended.
    pub(crate) fn audit_append(&self) {
        self.counter(AUDIT, Vec::new()).increment(1);
    }

    /// What the operator's log is told, counted before its rate limit.
    pub fn event(&self, event: Event) {
        let kind = match event {
            Event::Unauthorized => "unauthorized",
            Event::Forbidden => "forbidden",
            Event::TooLarge => "too_large",
            Event::TooMany => "too_many",
            Event::Unavailable => "unavailable",
            Event::StoreDown => {
                self.counter(STORE, Vec::new()).increment(1);
                return;
            }
            _ => return,
        };
        self.counter(DENIALS, vec![Label::new("kind", kind)]).increment(1);
    }

    /// The exposition: the counters, with the sessions open and the index states as of now.
    pub(crate) fn render(&self, sessions: usize, index: &[(&'static str, usize)]) -> String {
        #[expect(clippy::cast_precision_loss, reason = "a count of sessions or workspaces")]
        self.gauge(SESSIONS, Vec::new()).set(sessions as f64);
        for (state, count) in index {
            #[expect(clippy::cast_precision_loss, reason = "a count of workspaces")]
            self.gauge(INDEX, vec![Label::new("state", *state)]).set(*count as f64);
        }
        self.recorder.handle().render()
    }
}

/// One tool call, in flight until finished or dropped (a dropped call counts as `cancelled`).
pub(crate) struct CallMeter {
    metrics: Arc<Metrics>,
    tool: String,
    role: String,
    started: Instant,
    outcome: Option<String>,
}

impl CallMeter {
    /// The call ended with `outcome` (`ok`, an error kind, `refused`).
    pub(crate) fn finish(mut self, outcome: &str) {
        self.outcome = Some(outcome.to_owned());
    }
}

impl Drop for CallMeter {
    fn drop(&mut self) {
        let outcome = self.outcome.take().unwrap_or_else(|| "cancelled".to_owned());
        let labels = vec![Label::new("tool", self.tool.clone()), Label::new("role", self.role.clone()), Label::new("outcome", outcome)];
        self.metrics.counter(CALLS, labels).increment(1);
        let elapsed: Duration = self.started.elapsed();
        self.metrics
            .recorder
            .register_histogram(&Key::from_parts(DURATION, vec![Label::new("tool", self.tool.clone())]), &METADATA)
            .record(elapsed.as_secs_f64());
        self.metrics.gauge(IN_FLIGHT, Vec::new()).decrement(1.0);
    }
}
