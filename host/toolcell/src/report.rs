//! `toolcell report`: one self-contained HTML page for the reviewer of a session (or of a
//! chain's sessions): the timeline of its calls, the diff of every change it made (from the
//! prior states its undo records kept), refusals with the rule that made them, the locks held
//! for it, and the sessions it spawned, linked. No script, no network, no external asset.
//!
//! The report is a copy of guarded data, and is guarded like it: a change's content is shown
//! only where the reader's role (`--role`, else the role of the session that made it) may read
//! the file, and every bidirectional-text control is shown escaped, so that a file cannot make
//! its diff read differently from what it holds (Trojan source).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use toolcell_audit::{Kind, Record};
use toolcell_runtime::{Lock, Runtime, SessionChange, SessionRecord, Workspace};

/// Whom a report is about.
pub enum Subject<'a> {
    /// One session and the sessions it spawned.
    Session(&'a str),
    /// Every session bound to a task of the chain, and the sessions that spawned them.
    Chain(&'a str),
}

/// A change as the report shows it.
enum Shown {
    /// Its diff.
    Change(SessionChange),
    /// Its path only: the reader's `role` may not read the file.
    Hidden { path: String, call_id: String, role: String },
}

impl Shown {
    fn path_and_call(&self) -> (&str, &str) {
        match self {
            Shown::Change(change) => (&change.path, &change.call_id),
            Shown::Hidden { path, call_id, .. } => (path, call_id),
        }
    }
}

/// Whether the policy lets `role` read `path`; without a policy, every path.
fn may_read(runtime: &Runtime, role: &str, path: &str) -> bool {
    let Some(policy) = runtime.policy() else {
        return true;
    };
    policy.role(role).is_some_and(|role| policy.decide(role, toolcell_policy::Access::Read, path).effect == toolcell_policy::Effect::Allow)
}

/// What the report shows, gathered from the host's state.
pub struct Gathered {
    /// The sessions, in the order shown.
    pub sessions: Vec<String>,
    records: Vec<Record>,
    known: BTreeMap<String, SessionRecord>,
    changes: BTreeMap<String, Vec<Shown>>,
    locks: Vec<Lock>,
    title: String,
}

/// Collect what the report shows.
///
/// # Errors
///
/// A message if the audit trail cannot be read, or the subject has left no trace in it.
pub fn gather(runtime: &Runtime, workspace: &Workspace, subject: &Subject<'_>, reader: Option<&str>) -> Result<Gathered, String> {
    if let (Some(policy), Some(reader)) = (runtime.policy(), reader)
        && policy.role(reader).is_none()
    {
        let roles: Vec<&str> = policy.roles().map(|role| role.name()).collect();
        return Err(format!("the policy `{}` has no role `{reader}`; its roles are: {}", policy.file(), roles.join(", ")));
    }
    let audit = runtime.audit().ok_or("the report needs the audit trail: give --state-dir (or keep the default)")?;
    let text = audit.read().map_err(|error| format!("cannot read the audit trail: {error}"))?;
    let records: Vec<Record> = text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let known: BTreeMap<String, SessionRecord> = runtime
        .sessions()
        .list()
        .into_iter()
        .filter(|record| record.workspace == workspace.root())
        .map(|record| (record.id.clone(), record))
        .collect();
    let mut sessions: Vec<String> = Vec::new();
    let title;
    match subject {
        Subject::Session(session) => {
            title = format!("Session {session}");
            // The session, then its descendants, breadth first.
            let mut queue = vec![(*session).to_owned()];
            while let Some(next) = queue.pop() {
                if sessions.contains(&next) {
                    continue;
                }
                queue.extend(
                    known.values().filter(|record| record.parent.as_deref() == Some(next.as_str())).map(|record| record.id.clone()),
                );
                sessions.push(next);
            }
        }
        Subject::Chain(chain) => {
            title = format!("Chain {chain}");
            let bound: Vec<&SessionRecord> = known
                .values()
                .filter(|record| {
                    record.owner.as_deref() == Some(*chain)
                        || record.task.as_deref().is_some_and(|task| task.starts_with(&format!("{chain}/")))
                })
                .collect();
            let parents: BTreeSet<String> = bound.iter().filter_map(|record| record.parent.clone()).collect();
            sessions.extend(parents);
            sessions.extend(bound.iter().map(|record| record.id.clone()));
        }
    }
    let included: BTreeSet<&str> = sessions.iter().map(String::as_str).collect();
    let records: Vec<Record> = records.into_iter().filter(|record| included.contains(record.session.as_str())).collect();
    if records.is_empty() {
        return Err(match subject {
            Subject::Session(session) => {
                format!("the audit trail has no record of session `{session}`; `toolcell audit tail` shows the sessions it has")
            }
            Subject::Chain(chain) => format!("no session worked on chain `{chain}`; `toolcell sessions list` lists the sessions"),
        });
    }
    let changes = sessions
        .iter()
        .map(|session| {
            let role = reader.map(str::to_owned).or_else(|| known.get(session).map(|record| record.role.clone())).or_else(|| {
                records.iter().find(|record| record.session == *session && record.kind == Kind::Call).map(|record| record.role.clone())
            });
            let changes = runtime
                .session_changes(workspace, session)
                .into_iter()
                .map(|change| {
                    let readable = role.as_deref().is_some_and(|role| may_read(runtime, role, &change.path));
                    // What the reader may not read is dropped here, not only left unrendered.
                    if readable {
                        Shown::Change(change)
                    } else {
                        Shown::Hidden { path: change.path, call_id: change.call_id, role: role.clone().unwrap_or_default() }
                    }
                })
                .collect();
            (session.clone(), changes)
        })
        .collect();
    let owners: BTreeSet<String> = sessions
        .iter()
        .cloned()
        .chain(sessions.iter().filter_map(|session| known.get(session).and_then(|record| record.owner.clone())))
        .collect();
    let locks = runtime.live_locks(workspace).unwrap_or_default().into_iter().filter(|lock| owners.contains(&lock.owner)).collect();
    Ok(Gathered { sessions, records, known, changes, locks, title })
}

fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            character if (character.is_control() && character != '\n' && character != '\t') || is_bidi_control(character) => {
                let _ = write!(escaped, "\\u{{{:x}}}", u32::from(character));
            }
            character => escaped.push(character),
        }
    }
    escaped
}

/// The characters that reorder how text is shown (embeddings, overrides, isolates, marks):
/// shown escaped, so that a line reads as it is stored.
fn is_bidi_control(character: char) -> bool {
    matches!(character, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn anchor(session: &str) -> String {
    let safe: String =
        session.chars().map(|character| if character.is_ascii_alphanumeric() || character == '-' { character } else { '_' }).collect();
    format!("session-{safe}")
}

const STYLE: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1b1f24;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}.meta{color:#57606a}
table{border-collapse:collapse;width:100%;margin:6px 0}th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa}tr.refused td{background:#ffebe9}tr.failed td{background:#fff8c5}
.badge{display:inline-block;padding:0 6px;border-radius:10px;font-size:12px;background:#ddf4ff}
.badge.deny{background:#ff8182;color:#fff}.badge.ok{background:#aceebb}
pre.diff{background:#f6f8fa;border:1px solid #d0d7de;padding:8px;overflow-x:auto;font:12px/1.4 ui-monospace,monospace}
.add{background:#e6ffec;display:block}.del{background:#ffebe9;display:block}.hunk{color:#8250df;display:block}
";

/// Render the gathered report as one HTML document.
pub fn render(gathered: &Gathered) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>toolcell report: {}</title><style>{STYLE}</style></head><body>\n",
        escape(&gathered.title)
    );
    let calls = gathered.records.iter().filter(|record| record.kind == Kind::Call).count();
    let refusals = gathered.records.iter().filter(|record| is_refusal(record)).count();
    let changes: usize = gathered.changes.values().map(Vec::len).sum();
    let _ = writeln!(
        html,
        "<h1>toolcell report: {}</h1><p class=\"meta\">{} session(s), {calls} call(s), {changes} change(s), {refusals} refusal(s)</p>",
        escape(&gathered.title),
        gathered.sessions.len()
    );
    html.push_str("<h2>Sessions</h2><table><tr><th>session</th><th>role</th><th>task</th><th>parent</th><th>calls</th><th>refusals</th><th>changes</th></tr>");
    for session in &gathered.sessions {
        let known = gathered.known.get(session);
        let count = |wanted: &dyn Fn(&Record) -> bool| {
            gathered.records.iter().filter(|record| record.session == *session && wanted(record)).count()
        };
        let role = known.map(|record| record.role.clone()).or_else(|| {
            gathered.records.iter().find(|record| record.session == *session && record.kind == Kind::Call).map(|record| record.role.clone())
        });
        let _ = write!(
            html,
            "<tr><td><a href=\"#{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            anchor(session),
            escape(session),
            escape(role.as_deref().unwrap_or("?")),
            escape(known.and_then(|record| record.task.as_deref()).unwrap_or("–")),
            escape(known.and_then(|record| record.parent.as_deref()).unwrap_or("–")),
            count(&|record| record.kind == Kind::Call),
            count(&is_refusal),
            gathered.changes.get(session).map_or(0, Vec::len)
        );
    }
    html.push_str("</table>");
    html.push_str("<h2>Locks held</h2>");
    if gathered.locks.is_empty() {
        html.push_str("<p>None.</p>");
    } else {
        html.push_str("<table><tr><th>pattern</th><th>owner</th><th>taken by</th><th>mode</th><th>until</th></tr>");
        for lock in &gathered.locks {
            let _ = write!(
                html,
                "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&lock.pattern),
                escape(&lock.owner),
                escape(&lock.session),
                lock.mode.as_str(),
                escape(&lock.expires_at())
            );
        }
        html.push_str("</table>");
    }
    for session in &gathered.sessions {
        render_session(&mut html, gathered, session);
    }
    html.push_str("</body></html>\n");
    html
}

fn is_refusal(record: &Record) -> bool {
    record.kind == Kind::Fs && matches!(record.decision.as_deref(), Some("deny" | "refused"))
}

fn render_session(html: &mut String, gathered: &Gathered, session: &str) {
    let _ = write!(html, "<h2 id=\"{}\">Session {}</h2>", anchor(session), escape(session));
    if let Some(record) = gathered.known.get(session) {
        let parent = record
            .parent
            .as_deref()
            .map_or_else(|| "none".to_owned(), |parent| format!("<a href=\"#{}\">{}</a>", anchor(parent), escape(parent)));
        let _ = write!(
            html,
            "<p class=\"meta\">role <b>{}</b> · task <b>{}</b> · owner {} · parent {parent} · {} · created {}</p>",
            escape(&record.role),
            escape(record.task.as_deref().unwrap_or("none")),
            escape(record.owner.as_deref().unwrap_or("itself")),
            record.state.as_str(),
            escape(&record.created)
        );
    }
    let records: Vec<&Record> = gathered.records.iter().filter(|record| record.session == session).collect();
    // What each call was allowed to change, folded into the call's row.
    let mut changed: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for record in records.iter().filter(|record| record.kind == Kind::Fs && !is_refusal(record)) {
        if matches!(record.access.as_deref(), Some("write" | "delete")) {
            // A granted workflow capability is named by its operation (`lock-for-task`), a file
            // change by its access.
            let what = if record.rule.as_deref().is_some_and(|rule| rule.starts_with("may_")) {
                record.operation.as_deref()
            } else {
                record.access.as_deref()
            };
            changed.entry(record.call_id.as_str()).or_default().push(format!(
                "{} <code>{}</code>",
                escape(what.unwrap_or("?")),
                escape(record.path.as_deref().unwrap_or("?"))
            ));
        }
    }
    html.push_str("<h3>Timeline</h3><table><tr><th>#</th><th>time</th><th>tool</th><th>outcome</th><th>detail</th></tr>");
    for record in &records {
        let (class, outcome, detail) = match record.kind {
            Kind::Call => {
                let outcome = record.outcome.clone().unwrap_or_default();
                let (class, badge) = if outcome == "ok" { ("", "ok") } else { ("failed", "deny") };
                let mut detail = format!("{} µs", record.duration_us.unwrap_or(0));
                if let Some(message) = &record.message {
                    let _ = write!(detail, " — {}", escape(message));
                }
                if let Some(paths) = changed.get(record.call_id.as_str()) {
                    let _ = write!(detail, "<br>{}", paths.join(", "));
                }
                (class, format!("<span class=\"badge {badge}\">{}</span>", escape(&outcome)), detail)
            }
            Kind::Fs if is_refusal(record) => (
                "refused",
                format!("<span class=\"badge deny\">refused by rule <code>{}</code></span>", escape(record.rule.as_deref().unwrap_or("?"))),
                format!(
                    "{} of <code>{}</code> ({})",
                    escape(record.access.as_deref().unwrap_or("?")),
                    escape(record.path.as_deref().unwrap_or("?")),
                    escape(record.operation.as_deref().unwrap_or("?"))
                ),
            ),
            Kind::Spawn => {
                let child = record.child.as_deref().unwrap_or("?");
                (
                    "",
                    format!("<span class=\"badge\">spawned {} session</span>", escape(record.access.as_deref().unwrap_or("?"))),
                    format!(
                        "child session <a href=\"#{}\">{}</a> for task <code>{}</code>",
                        anchor(child),
                        escape(child),
                        escape(record.path.as_deref().unwrap_or("?"))
                    ),
                )
            }
            Kind::Fs | Kind::Lock | Kind::Recovery => continue,
        };
        let _ = write!(
            html,
            "<tr class=\"{class}\"><td>{}</td><td>{}</td><td>{}</td><td>{outcome}</td><td>{detail}</td></tr>",
            record.seq,
            escape(record.ts.get(11..23).unwrap_or(&record.ts)),
            escape(&record.tool)
        );
    }
    html.push_str("</table>");
    let changes = gathered.changes.get(session).map(Vec::as_slice).unwrap_or_default();
    let _ = write!(html, "<h3>Changes ({})</h3>", changes.len());
    for shown in changes {
        let (path, call_id) = shown.path_and_call();
        let _ = write!(html, "<p><code>{}</code> <span class=\"meta\">call {}</span></p>", escape(path), escape(call_id));
        html.push_str("<pre class=\"diff\">");
        match shown {
            Shown::Change(change) => html.push_str(&diff(change)),
            Shown::Hidden { role, .. } => {
                let _ =
                    write!(html, "(content not shown: role `{}` may not read this file; give `--role` for a reader who may)", escape(role));
            }
        }
        html.push_str("</pre>");
    }
}

fn diff(change: &SessionChange) -> String {
    let text = |bytes: &Option<Vec<u8>>| bytes.as_ref().map(|bytes| String::from_utf8_lossy(bytes).into_owned()).unwrap_or_default();
    let before = text(&change.before);
    let Some(after) = &change.after else {
        return "(the file changed again since; its content after this change is no longer known)".to_owned();
    };
    let after = text(after);
    if change.before.as_ref().is_some_and(|bytes| bytes.contains(&0)) {
        return "(binary content)".to_owned();
    }
    let diff = similar::TextDiff::from_lines(&before, &after);
    let mut out = String::new();
    let from = if change.before.is_some() { format!("a/{}", change.path) } else { "/dev/null".to_owned() };
    let to = if change.after.as_ref().is_some_and(Option::is_some) { format!("b/{}", change.path) } else { "/dev/null".to_owned() };
    let unified = diff.unified_diff().context_radius(3).header(&from, &to).to_string();
    for line in unified.lines() {
        let class = match line.chars().next() {
            Some('+') if !line.starts_with("+++") => "add",
            Some('-') if !line.starts_with("---") => "del",
            Some('@') => "hunk",
            _ => "",
        };
        if class.is_empty() {
            let _ = writeln!(out, "{}", escape(line));
        } else {
            let _ = write!(out, "<span class=\"{class}\">{}</span>", escape(line));
        }
    }
    out
}
