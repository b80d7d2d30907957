//! toolcell's audit trail: one JSON record per line, each chained to the one before.
//!
//! Every record carries `seq` (its 1-based position), `prev` (the previous record's hash, 64
//! zeros for the first) and, last, `hash`: the SHA-256 of the line as written without its
//! `hash` field. [`verify`] recomputes the chain and reports the first line that was edited,
//! removed, inserted or moved. (Truncating the end of the log leaves a valid shorter chain;
//! keep the last hash elsewhere, for example `audit verify`'s output, to detect that.)
//!
//! The chain alone is unkeyed: whoever can write the log can re-seal a forged or shortened
//! one. A [`checkpoint`] is the chain's head tagged with an HMAC under a key kept apart from
//! the log (the host's state key, mode 0600): the host rewrites it with every append, and
//! [`verify_checkpoint`] refuses a log that no longer holds the checkpointed record with its
//! hash, or a checkpoint whose tag does not verify. Without the key, nobody can make a
//! checkpoint that matches a rewritten chain.
//!
//! This crate does no I/O: the runtime appends the lines it [`seal`]s to a file.
//!
//! ```
//! use toolcell_audit::{Record, Link, seal, verify};
//!
//! let mut link = Link::GENESIS;
//! let mut log = String::new();
//! for path in ["src/a.rs", "docs/x.md"] {
//!     let record = Record::filesystem("2026-11-22T12:00:00.000Z", "s-1", "impl", "write_file", "c-1",
//!         "open-at", path, "write", "deny", "docs-read-only");
//!     let (line, next) = seal(&record, &link);
//!     log.push_str(&line);
//!     log.push('\n');
//!     link = next;
//! }
//! assert_eq!(verify(log.lines()).unwrap().records, 2);
//! let tampered = log.replace("docs/x.md", "docs/y.md");
//! assert_eq!(verify(tampered.lines()).unwrap_err().line, 2);
//! ```

mod checkpoint;

pub use checkpoint::{CHECKPOINT_SEQ_WIDTH, checkpoint, read_checkpoint, verify_checkpoint};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// One filesystem decision of the host's guard.
    Fs,
    /// One tool call, with its outcome.
    Call,
    /// A lock acquired or released (`decision`), on `path` (the pattern), token in `rule`.
    Lock,
    /// A call interrupted by a crash, rolled back when the host started again.
    Recovery,
    /// A session started by another (`child`, of role `access`, bound to the task `path`).
    Spawn,
}

/// One audit record. Fields that do not apply to its kind are absent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Position in the log, from 1 (set by [`seal`]).
    #[serde(default)]
    pub seq: u64,
    /// When, as RFC 3339 UTC.
    pub ts: String,
    /// What the record is about.
    pub kind: Kind,
    /// The caller's session.
    pub session: String,
    /// The workspace the record is about: its canonical directory (one audit trail may serve
    /// many workspaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Who the caller authenticated as (a principal of the service configuration), when the
    /// call came through an authenticated transport.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The caller's role.
    pub role: String,
    /// The tool called.
    pub tool: String,
    /// The call's id.
    pub call_id: String,
    /// The WASI operation (`open-at`, ...), for filesystem records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// The canonical workspace-relative path, for filesystem records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `read`, `list`, `write` or `delete`, for filesystem records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<String>,
    /// `allow`, `deny`, `approved` or `refused` (the last two after an `ask`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// The deciding rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// For call records: `ok`, the error kind, `trapped` or `gated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// For call records: the message of a failed call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For call records: reads and listings the guard allowed (recorded as a count, not one
    /// record each, so that a search over a large tree does not flood the log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<u64>,
    /// For call records: bytes of the text returned to the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// For call records: wall-clock duration in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_us: Option<u64>,
    /// For call and recovery records: journal steps undone because the call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<u64>,
    /// For filesystem refusals: how many more times the call made exactly this refused access
    /// (recorded once, in a record at the end of the call, so that a loop cannot flood the
    /// log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeated: Option<u64>,
    /// For call records: the notes the tool attached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// For spawn records: the new session's id (the record's `session` is its parent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child: Option<String>,
    /// A record kept in a shared store: its own id, given once before its first append, so
    /// that the store keeps it once however often it is sent (an append whose answer was lost
    /// is sent again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The previous record's hash (set by [`seal`]).
    #[serde(default)]
    pub prev: String,
}

impl Record {
    /// The record, saying which workspace it is about and, if known, who the caller
    /// authenticated as.
    #[must_use]
    pub fn at(mut self, workspace: &str, principal: Option<&str>) -> Self {
        self.workspace = Some(workspace.to_owned());
        self.principal = principal.map(str::to_owned);
        self
    }

    /// A filesystem decision.
    #[expect(clippy::too_many_arguments, reason = "one argument per field of a flat record")]
    pub fn filesystem(
        ts: &str,
        session: &str,
        role: &str,
        tool: &str,
        call_id: &str,
        operation: &str,
        path: &str,
        access: &str,
        decision: &str,
        rule: &str,
    ) -> Self {
        Record {
            operation: Some(operation.to_owned()),
            path: Some(path.to_owned()),
            access: Some(access.to_owned()),
            decision: Some(decision.to_owned()),
            rule: Some(rule.to_owned()),
            ..Record::empty(Kind::Fs, ts, session, role, tool, call_id)
        }
    }

    /// A tool call; fill in the outcome fields.
    pub fn call(ts: &str, session: &str, role: &str, tool: &str, call_id: &str, outcome: &str) -> Self {
        Record { outcome: Some(outcome.to_owned()), ..Record::empty(Kind::Call, ts, session, role, tool, call_id) }
    }

    /// A lock `event` (`acquired`, `renewed`, `released`) on `pattern`, with its token.
    pub fn lock(ts: &str, session: &str, owner: &str, event: &str, pattern: &str, mode: &str, fence: u64) -> Self {
        Record {
            path: Some(pattern.to_owned()),
            access: Some(mode.to_owned()),
            decision: Some(event.to_owned()),
            rule: Some(format!("fence:{fence}")),
            ..Record::empty(Kind::Lock, ts, session, owner, "", "")
        }
    }

    /// The rollback, at start-up, of the call `call_id` that a crash interrupted.
    pub fn recovery(ts: &str, session: &str, call_id: &str, steps: u64, error: Option<&str>) -> Self {
        Record {
            outcome: Some(if error.is_some() { "failed" } else { "rolled_back" }.to_owned()),
            rolled_back: Some(steps),
            message: error.map(str::to_owned),
            ..Record::empty(Kind::Recovery, ts, session, "", "", call_id)
        }
    }

    /// The session `parent` (of role `role`, in the call `call_id` of `tool`) started the
    /// session `child` of role `child_role`, bound to `task`.
    #[expect(clippy::too_many_arguments, reason = "one argument per field of a flat record")]
    pub fn spawn(ts: &str, parent: &str, role: &str, tool: &str, call_id: &str, child: &str, child_role: &str, task: &str) -> Self {
        Record {
            path: Some(task.to_owned()),
            access: Some(child_role.to_owned()),
            decision: Some("spawned".to_owned()),
            child: Some(child.to_owned()),
            ..Record::empty(Kind::Spawn, ts, parent, role, tool, call_id)
        }
    }

    fn empty(kind: Kind, ts: &str, session: &str, role: &str, tool: &str, call_id: &str) -> Self {
        Record {
            seq: 0,
            ts: ts.to_owned(),
            kind,
            session: session.to_owned(),
            workspace: None,
            principal: None,
            role: role.to_owned(),
            tool: tool.to_owned(),
            call_id: call_id.to_owned(),
            operation: None,
            path: None,
            access: None,
            decision: None,
            rule: None,
            outcome: None,
            message: None,
            reads: None,
            bytes: None,
            duration_us: None,
            rolled_back: None,
            repeated: None,
            notes: Vec::new(),
            child: None,
            id: None,
            prev: String::new(),
        }
    }
}

/// Where the chain stands: the last record's position and hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The last record's `seq` (0 before the first).
    pub seq: u64,
    /// The last record's hash (64 zeros before the first).
    pub hash: String,
}

const ZERO_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

impl Link {
    /// The link before the first record.
    pub const GENESIS: Link = Link { seq: 0, hash: String::new() };

    fn prev_hash(&self) -> &str {
        if self.hash.is_empty() { ZERO_HASH } else { &self.hash }
    }

    /// The link after the record on `line`, if the line is a sealed record.
    ///
    /// # Errors
    ///
    /// A reason, if the line is not a sealed record.
    pub fn of_line(line: &str) -> Result<Link, String> {
        let (_, hash) = split_hash(line).ok_or("the line has no `hash` field at its end")?;
        let record: Record = serde_json::from_str(line).map_err(|error| format!("the line is not a record: {error}"))?;
        Ok(Link { seq: record.seq, hash: hash.to_owned() })
    }
}

/// Seal `record` after `link`: set its `seq` and `prev`, append its `hash`. Returns the line
/// (without a newline) and the new link.
pub fn seal(record: &Record, link: &Link) -> (String, Link) {
    Prepared::new(record).seal(link)
}

/// A record serialized ahead of sealing: all of its line but the `seq` and `prev` that only the
/// chain's end decides, so that a log can do the costly part before it takes its lock and only
/// [`seal`](Prepared::seal) (a hash) under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The record's JSON between its `seq` value and its `prev` field: `,"ts":…,`.
    middle: String,
}

impl Prepared {
    /// Serialize `record` (its own `seq` and `prev` are left out).
    pub fn new(record: &Record) -> Self {
        let body = serde_json::to_string(record).unwrap_or_else(|_| String::from("{}"));
        // `seq` is the first field and `prev` the last: keep what lies between.
        let start = body.find(',').unwrap_or(body.len());
        let end = body.rfind(",\"prev\":").map_or(start, |comma| comma + 1);
        Prepared { middle: body.get(start..end.max(start)).unwrap_or_default().to_owned() }
    }

    /// The sealed line (without a newline) after `link`, and the new link.
    pub fn seal(&self, link: &Link) -> (String, Link) {
        use std::fmt::Write as _;
        let seq = link.seq + 1;
        let mut line = String::with_capacity(self.middle.len() + 180);
        let _ = write!(line, "{{\"seq\":{seq}");
        line.push_str(&self.middle);
        line.push_str("\"prev\":\"");
        line.push_str(link.prev_hash());
        line.push_str("\"}");
        let hash = hex(&Sha256::digest(line.as_bytes()));
        // The body's closing brace gives way to the hash field.
        line.pop();
        line.push_str(",\"hash\":\"");
        line.push_str(&hash);
        line.push_str("\"}");
        (line, Link { seq, hash })
    }
}

/// `(line without its hash field, hash)`, if the line ends with `,"hash":"<64 hex>"}`.
fn split_hash(line: &str) -> Option<(String, &str)> {
    let suffix_len = ",\"hash\":\"\"}".len() + 64;
    if line.len() < suffix_len + 1 || !line.is_char_boundary(line.len() - suffix_len) {
        return None;
    }
    let (head, tail) = line.split_at(line.len() - suffix_len);
    let hash = tail.strip_prefix(",\"hash\":\"")?.strip_suffix("\"}")?;
    if hash.len() != 64 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some((format!("{head}}}"), hash))
}

/// The current time as RFC 3339 UTC with milliseconds, as records are stamped.
pub fn now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// Lowercase hex of `bytes`: how the log writes its hashes (and the runtime names its state
/// files).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    // Written as bytes into place, two per byte (a journal step's prior content is hex: some
    // KiB per write), then taken as text: pushing each digit as a `char` cost a write of 4 KiB
    // about a hundredth of its call.
    let mut digits = vec![0u8; bytes.len() * 2];
    for (pair, byte) in digits.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
    // Only ASCII digits were written.
    String::from_utf8(digits).unwrap_or_default()
}

/// A verified log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// How many records it holds.
    pub records: u64,
    /// The last record's hash (64 zeros for an empty log): keep it to detect a truncation later.
    pub last_hash: String,
}

/// The first place where the chain breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct Tamper {
    /// The 1-based line.
    pub line: u64,
    /// What is wrong there.
    pub reason: String,
}

/// Check every line of a log.
///
/// # Errors
///
/// The first [`Tamper`]: a line that is not a sealed record, whose content does not match its
/// hash (edited), whose `seq` is out of order (a record removed, inserted or moved before it),
/// or whose `prev` is not the previous record's hash.
pub fn verify<'a>(lines: impl IntoIterator<Item = &'a str>) -> Result<Verified, Tamper> {
    let mut link = Link::GENESIS;
    for (index, line) in lines.into_iter().enumerate() {
        let number = index as u64 + 1;
        let tamper = |reason: String| Tamper { line: number, reason };
        let (body, hash) = split_hash(line).ok_or_else(|| tamper("not a sealed audit record (no `hash` at its end)".to_owned()))?;
        if hex(&Sha256::digest(body.as_bytes())) != hash {
            return Err(tamper("its content does not match its hash: the record was edited".to_owned()));
        }
        let record: Record = serde_json::from_str(&body).map_err(|error| tamper(format!("not an audit record: {error}")))?;
        if record.seq != link.seq + 1 {
            return Err(tamper(format!(
                "its seq is {} where {} was expected: a record was removed, inserted or moved here",
                record.seq,
                link.seq + 1
            )));
        }
        if record.prev != link.prev_hash() {
            return Err(tamper(
                "its `prev` is not the hash of the record before it: the log was edited, reordered or spliced here".to_owned(),
            ));
        }
        link = Link { seq: record.seq, hash: hash.to_owned() };
    }
    Ok(Verified { records: link.seq, last_hash: link.prev_hash().to_owned() })
}

/// Check every line of a log, as [`verify`] does, and that the log still reaches `head`, the
/// chain's head as the writer last recorded it beside the log: a log whose last records were
/// removed (or that was emptied) ends before it. A head behind the log's end is accepted if
/// the record at its `seq` has its hash (a crash between writing the log and the head).
///
/// # Errors
///
/// The first [`Tamper`] of [`verify`], or one naming the head the log no longer reaches.
pub fn verify_with_head<'a>(lines: impl IntoIterator<Item = &'a str>, head: &Link) -> Result<Verified, Tamper> {
    let mut at_head = None;
    let lines = lines.into_iter().inspect(|line| {
        if at_head.is_none()
            && let Ok(link) = Link::of_line(line)
            && link.seq == head.seq
        {
            at_head = Some(link.hash);
        }
    });
    let verified = verify(lines)?;
    if head.seq == 0 {
        return Ok(verified);
    }
    match at_head {
        None => Err(Tamper {
            line: verified.records + 1,
            reason: format!(
                "the log ends after record {}, but its head file says record {} was written: the last records were removed",
                verified.records, head.seq
            ),
        }),
        Some(hash) if hash != head.hash => Err(Tamper {
            line: head.seq,
            reason: "the record's hash is not the one the head file holds: the log was rewritten from here".to_owned(),
        }),
        Some(_) => Ok(verified),
    }
}

/// The bytes of hex `text` (either case); `None` if it is not hex.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    let digit = |byte: u8| char::from(byte).to_digit(16).and_then(|value| u8::try_from(value).ok());
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(2) {
        return None;
    }
    bytes.chunks_exact(2).map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?)).collect()
}

/// One record, readably, on one line (control characters escaped, so that a file name cannot
/// forge a line).
pub fn display(record: &Record) -> String {
    let clean = toolcell_types::escape_control;
    let head = format!(
        "{} #{} {} role={} tool={} call={}",
        record.ts,
        record.seq,
        clean(&record.session),
        clean(&record.role),
        clean(&record.tool),
        clean(&record.call_id)
    );
    match record.kind {
        Kind::Fs => format!(
            "{head} {} {} `{}` {} ({})",
            record.decision.as_deref().unwrap_or("?").to_uppercase(),
            record.access.as_deref().unwrap_or("?"),
            clean(record.path.as_deref().unwrap_or("?")),
            record.operation.as_deref().unwrap_or("?"),
            clean(record.rule.as_deref().unwrap_or("?")),
        ),
        Kind::Call => {
            let mut text = format!(
                "{head} CALL {} in {}µs, {} reads",
                record.outcome.as_deref().unwrap_or("?"),
                record.duration_us.unwrap_or(0),
                record.reads.unwrap_or(0)
            );
            if let Some(steps) = record.rolled_back {
                text.push_str(&format!(", rolled back {steps} changes"));
            }
            if let Some(message) = &record.message {
                text.push_str(&format!(": {}", clean(message)));
            }
            for note in &record.notes {
                text.push_str(&format!(" [note: {}]", clean(note)));
            }
            text
        }
        Kind::Lock => format!(
            "{} #{} {} owner={} LOCK {} {} `{}` ({})",
            record.ts,
            record.seq,
            clean(&record.session),
            clean(&record.role),
            record.decision.as_deref().unwrap_or("?"),
            record.access.as_deref().unwrap_or("?"),
            clean(record.path.as_deref().unwrap_or("?")),
            record.rule.as_deref().unwrap_or("?"),
        ),
        Kind::Recovery => format!(
            "{} #{} {} call={} RECOVERY {}, {} changes undone{}",
            record.ts,
            record.seq,
            clean(&record.session),
            clean(&record.call_id),
            record.outcome.as_deref().unwrap_or("?"),
            record.rolled_back.unwrap_or(0),
            record.message.as_deref().map(|message| format!(": {}", clean(message))).unwrap_or_default(),
        ),
        Kind::Spawn => format!(
            "{head} SPAWN {} session {} for task `{}`",
            clean(record.access.as_deref().unwrap_or("?")),
            clean(record.child.as_deref().unwrap_or("?")),
            clean(record.path.as_deref().unwrap_or("?")),
        ),
    }
}

#[cfg(test)]
mod tests;
