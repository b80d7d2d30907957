//! What a call produced: its result, what the guard allowed and refused (with the messages
//! the agent reads), its captured stdio, and how the refusals are put to the agent.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use toolcell_policy::{Access, Effect};
use toolcell_types::{ToolError, ToolErrorKind, ToolOutput};

/// What a component wrote to stdout or stderr: the first `capacity` bytes, and how many more
/// were dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// The kept bytes.
    pub bytes: Vec<u8>,
    /// Bytes written past the capacity and dropped.
    pub dropped: u64,
}

/// One decision the guard made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsEvent {
    /// The WASI operation (`open-at`, `unlink-file-at`, ...).
    pub operation: &'static str,
    /// The canonical workspace-relative path, or the path as the component wrote it if it
    /// leads outside the workspace.
    pub path: String,
    /// What the operation does to the path.
    pub access: Access,
    /// What was decided (an approved `ask` is `allow`).
    pub effect: Effect,
    /// The deciding rule, `default-deny`, `protected:...`, `workspace-boundary`, `hard-link`
    /// or `symlink-target`.
    pub rule: String,
    /// Whether the policy asked and the approver answered.
    pub asked: bool,
}

/// The rule of a refusal to act through a handle whose object was moved or replaced since it
/// was opened.
pub const DESCRIPTOR_MOVED: &str = "descriptor-moved";

/// A refusal, with the message the agent sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The decision.
    pub event: FsEvent,
    /// Why, and what to do: names the path and the rule, never a host path.
    pub message: String,
    /// `denied` (the policy or the sandbox) or `conflict` (a lock, or a file changed since the
    /// session read it).
    pub kind: ToolErrorKind,
}

/// What a call produced.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The call's unique id.
    pub call_id: String,
    /// The tool's result, or the error the agent sees (a bad argument, a tool error, or a
    /// crashed component reported as `failed`).
    pub result: Result<ToolOutput, ToolError>,
    /// Notes the tool attached for the audit trail.
    pub notes: Vec<String>,
    /// Images the tool showed the agent beside a successful result (none on an error).
    pub images: Vec<toolcell_types::Image>,
    /// What the component wrote to stdout.
    pub stdout: Captured,
    /// What the component wrote to stderr.
    pub stderr: Captured,
    /// Whether the component trapped (crashed); `result` is then a `failed` error.
    pub trapped: bool,
    /// Whether the role may not call the tool, so no component ran.
    pub gated: bool,
    /// The filesystem accesses the guard allowed, in order (at most 10,000 are kept).
    pub events: Vec<FsEvent>,
    /// Allowed accesses beyond those kept in `events`.
    pub unrecorded_events: u64,
    /// The filesystem calls the component made (reads of 64 KiB, opens, stats...), as its
    /// budget counts them: what a call cost the host.
    pub host_calls: u64,
    /// The linear memory the component's instance held at the end (all its memories): what
    /// one call of it costs in memory.
    pub memory_bytes: u64,
    /// Whether the component ran in an instance the runtime made ahead of the call, while
    /// the machine idled (still one no call ran in before; see `Runtime::call`).
    pub instance_made_ahead: bool,
    /// The filesystem accesses the guard refused, with their messages. If there are any,
    /// `result` is a `denied` (or `conflict`) error carrying them, whatever the component
    /// returned.
    pub denials: Vec<Denial>,
    /// Warnings for the agent (also appended to a successful result's text).
    pub warnings: Vec<String>,
    /// Changes undone because the call failed (0 if it succeeded or changed nothing).
    pub rolled_back: usize,
    /// Whether the call failed and its rollback ended: nothing it changed stands (but what
    /// another session changed since, left as that session made it), so its record is no
    /// modification's and may wait for a shared store that does not answer.
    pub rolled_back_whole: bool,
    /// Wall-clock time of the whole call.
    pub duration: Duration,
}

impl CallOutcome {
    /// The outcome of a call `call_id` that has not run yet (its result is a `failed` error
    /// until something sets it).
    pub fn new(call_id: String) -> Self {
        CallOutcome {
            call_id,
            result: Err(ToolError::new(ToolErrorKind::Failed, "the call did not run")),
            notes: Vec::new(),
            images: Vec::new(),
            stdout: Captured::default(),
            stderr: Captured::default(),
            trapped: false,
            gated: false,
            events: Vec::new(),
            unrecorded_events: 0,
            host_calls: 0,
            memory_bytes: 0,
            instance_made_ahead: false,
            denials: Vec::new(),
            warnings: Vec::new(),
            rolled_back: 0,
            rolled_back_whole: false,
            duration: Duration::ZERO,
        }
    }
}

/// Refusals listed in one result, at most.
const MAX_LISTED_DENIALS: usize = 5;

/// The refusals' messages, each once, in order.
pub fn distinct_messages(denials: &[Denial]) -> Vec<&str> {
    let mut messages: Vec<&str> = Vec::new();
    for denial in denials {
        if !messages.contains(&denial.message.as_str()) {
            messages.push(&denial.message);
        }
    }
    messages
}

/// The warnings a read-only tool's kept result carries for the reads the host refused: each
/// refusal once, the first [`MAX_LISTED_DENIALS`] of them, then how many more there were.
pub fn refusal_warnings(denials: &[Denial]) -> Vec<String> {
    let messages = distinct_messages(denials);
    let mut warnings: Vec<String> =
        messages.iter().take(MAX_LISTED_DENIALS).map(|message| format!("Refused by the host: {message}")).collect();
    if messages.len() > MAX_LISTED_DENIALS {
        warnings.push(format!("Refused by the host: {} more (each is on the audit trail)", messages.len() - MAX_LISTED_DENIALS));
    }
    warnings
}

/// Whether every refusal was of a read or a listing by the policy or the sandbox, or of one
/// through a handle whose file or directory was moved or removed since it was opened (a walk
/// that met a tree changing under it); not a budget, a lock or a stale read.
pub fn only_reads_refused(denials: &[Denial]) -> bool {
    denials.iter().all(|denial| {
        matches!(denial.event.access, Access::Read | Access::List)
            && (denial.kind == ToolErrorKind::Denied || denial.event.rule == DESCRIPTOR_MOVED)
    })
}

/// The result of a call in which the guard refused something: the refusals, whatever the
/// component made of them, and what the component said, for context.
pub fn denied_result(denials: &[Denial], returned: &Result<ToolOutput, ToolError>) -> ToolError {
    let messages = distinct_messages(denials);
    let mut text = messages.iter().take(MAX_LISTED_DENIALS).copied().collect::<Vec<_>>().join("\n");
    if messages.len() > MAX_LISTED_DENIALS {
        text.push_str(&format!("\n(and {} more refusals)", messages.len() - MAX_LISTED_DENIALS));
    }
    match returned {
        Err(error) if error.kind != ToolErrorKind::Denied => {
            text.push_str(&format!("\n(the tool then reported: {error})"));
        }
        Ok(_) => text.push_str("\n(the tool returned a result anyway; it is withheld because the host refused an operation)"),
        Err(_) => {}
    }
    // A lock or stale-read conflict is `conflict` (the agent can retry after re-reading or
    // waiting); anything mixed with a policy refusal is `denied`.
    let kind = match denials.first() {
        Some(first) if denials.iter().all(|denial| denial.kind == first.kind) => first.kind,
        _ => ToolErrorKind::Denied,
    };
    ToolError::new(kind, text)
}

/// A call id unique across calls and processes: time, process and a counter.
pub fn new_call_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_nanos()).unwrap_or(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("c-{nanos:x}-{:x}-{count:x}", std::process::id())
}

impl toolcell_args::adapters::Outcome for CallOutcome {
    fn result(&self) -> &Result<ToolOutput, ToolError> {
        &self.result
    }

    fn result_mut(&mut self) -> &mut Result<ToolOutput, ToolError> {
        &mut self.result
    }

    fn has_images(&self) -> bool {
        !self.images.is_empty()
    }
}
