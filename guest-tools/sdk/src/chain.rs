//! Task chains as plain files: `docs/tasks/<status>/<CHAIN-ID>/<NNN-slug>.md`.
//!
//! A task's status is the directory it is in, and its `**Status**` line always agrees. A task
//! file is Markdown: a `# Title` line, a header of `**Field**: value` lines (Chain, Task, Status,
//! Type, Created, CR, optionally Owner, Session, Blocked-from), then free text with the
//! objective, the acceptance criteria as `- [ ]` / `- [x]` items, and notes. The helpers here
//! read, check, render and move them; the host's policy decides which tool may move a task from
//! which status to which, and for which task.

use std::collections::BTreeMap;

use crate::ToolError;
use crate::path::quote;

mod task_file;
pub use task_file::{REQUIRED_FIELDS, TaskFile};

/// Where every chain lives.
pub const TASKS_DIR: &str = "docs/tasks";

/// A task's status: the directory its file is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// Written down, not ready to start.
    Backlog,
    /// Ready to start.
    Todo,
    /// An implementation session works on it.
    InProgress,
    /// Completed, waiting for review.
    InReview,
    /// Approved.
    Done,
    /// Stopped until something outside it changes.
    Blocked,
}

impl Status {
    /// Every status, in workflow order.
    pub const ALL: [Status; 6] = [Status::Backlog, Status::Todo, Status::InProgress, Status::InReview, Status::Done, Status::Blocked];

    /// The directory name, which is also the `**Status**` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Backlog => "backlog",
            Status::Todo => "todo",
            Status::InProgress => "in-progress",
            Status::InReview => "in-review",
            Status::Done => "done",
            Status::Blocked => "blocked",
        }
    }

    /// Parse a directory name or `**Status**` value.
    pub fn from_name(name: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|status| status.as_str() == name)
    }

    /// The status directory.
    pub fn directory(self) -> String {
        format!("{TASKS_DIR}/{}", self.as_str())
    }
}

fn is_slug(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with('-')
        && !text.ends_with('-')
        && !text.contains("--")
        && text.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
}

/// Whether `text` is a chain id: `CHAIN-`, a number, an optional lowercase slug.
pub fn is_chain_id(text: &str) -> bool {
    let Some(rest) = text.strip_prefix("CHAIN-") else {
        return false;
    };
    let (number, slug) = rest.split_once('-').map_or((rest, None), |(number, slug)| (number, Some(slug)));
    text.len() <= 100 && !number.is_empty() && number.bytes().all(|byte| byte.is_ascii_digit()) && slug.is_none_or(is_slug)
}

/// Whether `text` is a task id: a number of three or more digits, `-`, a lowercase slug.
pub fn is_task_id(text: &str) -> bool {
    let Some((number, slug)) = text.split_once('-') else {
        return false;
    };
    text.len() <= 100 && number.len() >= 3 && number.bytes().all(|byte| byte.is_ascii_digit()) && is_slug(slug)
}

/// A chain id, checked.
///
/// # Errors
///
/// `invalid-args` naming the value and the expected form.
pub fn chain_id(text: &str) -> Result<String, ToolError> {
    if is_chain_id(text) {
        return Ok(text.to_owned());
    }
    Err(ToolError::InvalidArgs(format!(
        "{} is not a chain id: a chain id is `CHAIN-`, a number and an optional lowercase slug, such as `CHAIN-039-file-operations`; `chain_list` lists them",
        quote(text)
    )))
}

/// The lowercase slug of a title: letters and digits, words joined by `-`, at most 40 bytes.
pub fn slug_of(title: &str) -> String {
    let mut slug = String::new();
    for word in title.split(|character: char| !character.is_ascii_alphanumeric()).filter(|word| !word.is_empty()) {
        if slug.len() + word.len() + 1 > 40 {
            break;
        }
        if !slug.is_empty() {
            slug.push('-');
        }
        slug.push_str(&word.to_ascii_lowercase());
    }
    if slug.is_empty() { "task".to_owned() } else { slug }
}

/// A task of a chain: `CHAIN-ID/NNN-slug`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskRef {
    /// The chain id.
    pub chain: String,
    /// The task id.
    pub task: String,
}

impl TaskRef {
    /// Parse `CHAIN-ID/NNN-slug`.
    ///
    /// # Errors
    ///
    /// `invalid-args` naming the value and the expected form.
    pub fn parse(text: &str) -> Result<TaskRef, ToolError> {
        let invalid = || {
            ToolError::InvalidArgs(format!(
                "{} is not a task: write `CHAIN-ID/NNN-slug`, such as `CHAIN-039-file-operations/002-parse-headers`; `task_list` lists a chain's tasks",
                quote(text)
            ))
        };
        let (chain, task) = text.split_once('/').ok_or_else(invalid)?;
        if !is_chain_id(chain) || !is_task_id(task) {
            return Err(invalid());
        }
        Ok(TaskRef { chain: chain.to_owned(), task: task.to_owned() })
    }

    /// The task file's path in `status`.
    pub fn path(&self, status: Status) -> String {
        format!("{}/{}/{}.md", status.directory(), self.chain, self.task)
    }

    /// The task's number.
    pub fn number(&self) -> u32 {
        self.task.split('-').next().and_then(|number| number.parse().ok()).unwrap_or(0)
    }
}

impl std::fmt::Display for TaskRef {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{}/{}", self.chain, self.task)
    }
}

/// A task file found on disk: where it is, and what it says (or why it cannot be read).
#[derive(Debug, Clone)]
pub struct Found {
    /// The task.
    pub task: TaskRef,
    /// The status directory it is in.
    pub status: Status,
    /// Its parsed content, or what is wrong with it.
    pub file: Result<TaskFile, String>,
}

impl Found {
    /// The file's workspace-relative path.
    pub fn path(&self) -> String {
        self.task.path(self.status)
    }

    /// The parsed file, checked against where it lies: its `**Status**`, `**Chain**` and
    /// `**Task**` lines must agree with its directory and name.
    ///
    /// # Errors
    ///
    /// `conflict` naming the file and what disagrees, and saying how to fix it.
    pub fn checked(&self) -> Result<&TaskFile, ToolError> {
        let path = self.path();
        let file = self.file.as_ref().map_err(|reason| {
            ToolError::Conflict(format!(
                "the task file `{path}` is malformed: {reason}. Fix the file (or ask the control agent to), then try again"
            ))
        })?;
        let disagree = |field: &str, found: &str, expected: &str| {
            ToolError::Conflict(format!(
                "the task file `{path}` says `**{field}**: {found}` but lies where `{expected}` belongs; nothing was moved. Make the line and the file's place agree, then try again"
            ))
        };
        let status = file.field("Status").unwrap_or_default();
        if status != self.status.as_str() {
            return Err(disagree("Status", status, self.status.as_str()));
        }
        let chain = file.field("Chain").unwrap_or_default();
        if chain != self.task.chain {
            return Err(disagree("Chain", chain, &self.task.chain));
        }
        let task = file.field("Task").unwrap_or_default();
        if task != self.task.task {
            return Err(disagree("Task", task, &self.task.task));
        }
        Ok(file)
    }
}

fn read_task(task: &TaskRef, status: Status) -> Result<Option<Found>, ToolError> {
    let path = task.path(status);
    match std::fs::read(&path) {
        Ok(bytes) => {
            let file = String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_owned()).and_then(|text| TaskFile::parse(&text));
            Ok(Some(Found { task: task.clone(), status, file }))
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(crate::WorkspacePath::parse(&path)?.io_error(error)),
    }
}

/// Find `task` in whichever status directory holds it.
///
/// # Errors
///
/// `not-found` if no status holds it; `conflict` if several do; the host's refusal if the
/// caller may not read them.
pub fn find(task: &TaskRef) -> Result<Found, ToolError> {
    let mut found = Vec::new();
    for status in Status::ALL {
        if let Some(hit) = read_task(task, status)? {
            found.push(hit);
        }
    }
    match found.len() {
        0 => Err(ToolError::NotFound(format!(
            "there is no task `{task}` in any status of `{TASKS_DIR}`; `task_list` with chain `{}` lists the chain's tasks",
            task.chain
        ))),
        1 => Ok(found.remove(0)),
        _ => Err(ToolError::Conflict(format!(
            "the task `{task}` is in several statuses at once ({}); a task lies in exactly one. Remove the stale copies, then try again",
            found.iter().map(|hit| format!("`{}`", hit.path())).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Every task of `chain`, by task id; several entries for one id when it lies in several
/// statuses. Empty if the chain has no directory anywhere.
///
/// # Errors
///
/// The host's refusal, or a read error, naming the directory.
pub fn tasks_of(chain: &str) -> Result<Vec<Found>, ToolError> {
    let mut found = Vec::new();
    for status in Status::ALL {
        let directory = format!("{}/{chain}", status.directory());
        let entries = match std::fs::read_dir(&directory) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(crate::WorkspacePath::parse(&directory)?.io_error(error)),
        };
        let mut names: Vec<String> = entries.filter_map(Result::ok).map(|entry| entry.file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        for name in names {
            let Some(task) = name.strip_suffix(".md").filter(|task| is_task_id(task)) else {
                continue;
            };
            let task = TaskRef { chain: chain.to_owned(), task: task.to_owned() };
            if let Some(hit) = read_task(&task, status)? {
                found.push(hit);
            }
        }
    }
    found.sort_by(|a, b| a.task.cmp(&b.task).then(a.status.cmp(&b.status)));
    Ok(found)
}

/// Every chain with a directory in some status, sorted.
///
/// # Errors
///
/// The host's refusal, or a read error, naming the directory.
pub fn chains() -> Result<Vec<String>, ToolError> {
    let mut chains = std::collections::BTreeSet::new();
    for status in Status::ALL {
        let directory = status.directory();
        let entries = match std::fs::read_dir(&directory) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => return Err(crate::WorkspacePath::parse(&directory)?.io_error(error)),
        };
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_chain_id(&name) && entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                chains.insert(name);
            }
        }
    }
    Ok(chains.into_iter().collect())
}

/// A chain's progress: implementation tasks done, and in all.
pub fn progress(tasks: &[Found]) -> (usize, usize) {
    let counted: Vec<&Found> = tasks.iter().filter(|found| found.file.as_ref().map_or(true, TaskFile::is_impl)).collect();
    (counted.iter().filter(|found| found.status == Status::Done).count(), counted.len())
}

/// Tasks by status, in workflow order.
pub fn by_status(tasks: &[Found]) -> BTreeMap<Status, Vec<&Found>> {
    let mut grouped: BTreeMap<Status, Vec<&Found>> = BTreeMap::new();
    for found in tasks {
        grouped.entry(found.status).or_default().push(found);
    }
    grouped
}

/// Move a task file from its status to `to`, with `file` as its new content (its
/// `**Status**` set to `to`): the new file is created, then the old one removed, in one call
/// (the host keeps both changes or neither).
///
/// # Errors
///
/// `conflict` if a file is already there; the host's refusal if the policy does not let this
/// tool move the task this way.
pub fn move_task(found: &Found, to: Status, mut file: TaskFile) -> Result<String, ToolError> {
    file.set_field("Status", to.as_str());
    let target = found.task.path(to);
    let directory = format!("{}/{}", to.directory(), found.task.chain);
    let shown = crate::WorkspacePath::parse(&directory)?;
    std::fs::create_dir_all(&directory).map_err(|error| shown.io_error(error))?;
    write_new(&target, &file.render())?;
    let source = found.path();
    std::fs::remove_file(&source).map_err(|error| match crate::WorkspacePath::parse(&source) {
        Ok(path) => path.io_error(error),
        Err(parse) => parse,
    })?;
    Ok(target)
}

/// Move `task` to `to` if it is in one of `from`, after `edit` changed its file: the
/// transition every task tool makes. Returns the status it left and its new path.
///
/// # Errors
///
/// `not-found`, `conflict` for a task in another status (naming it) or a malformed file,
/// `edit`'s error, or the host's refusal of the move.
pub fn transition(
    task: &TaskRef,
    from: &[Status],
    to: Status,
    edit: impl FnOnce(&mut TaskFile, Status) -> Result<(), ToolError>,
) -> Result<(Status, String), ToolError> {
    let found = find(task)?;
    if !from.contains(&found.status) {
        return Err(ToolError::Conflict(format!(
            "the task `{task}` is in `{}`; this moves a task from {} to `{}` only. `task_list` shows where each task is",
            found.status.as_str(),
            from.iter().map(|status| format!("`{}`", status.as_str())).collect::<Vec<_>>().join(" or "),
            to.as_str()
        )));
    }
    let mut file = found.checked()?.clone();
    edit(&mut file, found.status)?;
    let path = move_task(&found, to, file)?;
    Ok((found.status, path))
}

/// One line of free text for a header field or a heading (no line breaks or control
/// characters), or `invalid-args` naming the argument.
///
/// # Errors
///
/// `invalid-args` if `text` is empty or spans lines.
pub fn one_line<'a>(argument: &str, text: &'a str) -> Result<&'a str, ToolError> {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed.chars().any(char::is_control) {
        return Err(ToolError::InvalidArgs(format!("`{argument}` must be one non-empty line of text")));
    }
    Ok(trimmed)
}

/// Write `text` to a new file at `path`.
///
/// # Errors
///
/// `conflict` if something is already there; the host's refusal; a write error.
pub fn write_new(path: &str, text: &str) -> Result<(), ToolError> {
    use std::io::Write as _;
    let shown = crate::WorkspacePath::parse(path)?;
    let mut handle = std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(|error| {
        if error.kind() == std::io::ErrorKind::AlreadyExists {
            ToolError::Conflict(format!("`{path}` already exists; nothing was changed"))
        } else {
            shown.io_error(error)
        }
    })?;
    handle.write_all(text.as_bytes()).map_err(|error| shown.io_error(error))
}

/// Replace the content of the existing file at `path`.
///
/// # Errors
///
/// The host's refusal; a write error.
pub fn rewrite(path: &str, text: &str) -> Result<(), ToolError> {
    let shown = crate::WorkspacePath::parse(path)?;
    std::fs::write(path, text).map_err(|error| shown.io_error(error))
}

/// Today's date in UTC, `YYYY-MM-DD`, from the wall clock.
pub fn today() -> String {
    let seconds = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|elapsed| elapsed.as_secs()).unwrap_or(0);
    let mut date = crate::time::rfc3339(seconds);
    date.truncate(date.find('T').unwrap_or(date.len()));
    date
}

/// The session's bound task, for tools an implementation session calls on its own task.
///
/// # Errors
///
/// `denied` if the session is bound to no task.
pub fn bound_task() -> Result<TaskRef, ToolError> {
    match crate::bound_task() {
        Some(task) => TaskRef::parse(&task),
        None => Err(ToolError::Denied(
            "this session is bound to no task: an implementation session acts on the task it was started for (`spawn_impl_session`, or `--task CHAIN/TASK`)".to_owned(),
        )),
    }
}

/// The task a call acts on: the session's bound task when there is one (a `task` argument
/// must then name it), else the `task` argument.
///
/// # Errors
///
/// `invalid-args` if neither is given or the argument is malformed; `denied` if it names
/// another task than the session's.
pub fn task_for_call(argument: Option<&str>) -> Result<TaskRef, ToolError> {
    match (crate::bound_task(), argument) {
        (Some(bound), None) => TaskRef::parse(&bound),
        (Some(bound), Some(named)) => {
            let named = TaskRef::parse(named)?;
            if named.to_string() != bound {
                return Err(ToolError::Denied(format!(
                    "this session works on `{bound}` only, not `{named}`; leave `task` out to act on your own task"
                )));
            }
            Ok(named)
        }
        (None, Some(named)) => TaskRef::parse(named),
        (None, None) => Err(ToolError::InvalidArgs("give `task` as `CHAIN-ID/NNN-slug`; `task_list` lists a chain's tasks".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TASK: &str = "# Parse the headers\n\n**Chain**: CHAIN-039-files\n**Task**: 002-parse\n**Status**: todo\n**Type**: impl\n**Created**: 2026-11-23\n**CR**: CR-039\n\n## Objective\n\nParse them.\n\n## Acceptance criteria\n\n- [ ] one\n- [x] two\n  - [ ] three\n";

    #[test]
    fn a_task_file_round_trips_and_its_criteria_are_found() {
        let file = TaskFile::parse(TASK).expect("parses");
        assert_eq!(file.title, "Parse the headers");
        assert_eq!(file.field("status"), Some("todo"));
        assert_eq!(file.render(), TASK);
        assert_eq!(file.criteria(), vec![(false, "one".to_owned()), (true, "two".to_owned()), (false, "three".to_owned())]);
        let mut checked = file.clone();
        checked.check_criteria(&[1, 3]).expect("criteria exist");
        assert!(checked.criteria().iter().all(|(done, _)| *done));
        assert!(checked.check_criteria(&[4]).is_err());
        let mut noted = file;
        noted.append_section("Completion note", "Done.");
        assert!(noted.render().ends_with("- [ ] three\n\n## Completion note\n\nDone.\n"));
    }

    #[test]
    fn malformed_task_files_say_what_is_wrong() {
        let table = [
            ("", "empty"),
            ("Parse\n**Chain**: x\n", "not a `# Title` line"),
            ("# T\n\n**Chain**: CHAIN-1\n**Task**: 001-a\n", "lacks `**Status**`, `**Type**`, `**Created**`, `**CR**`"),
        ];
        for (text, reason) in table {
            let error = TaskFile::parse(text).expect_err(text);
            assert!(error.contains(reason), "{text:?}: {error}");
        }
    }

    #[test]
    fn ids_and_slugs() {
        assert!(is_chain_id("CHAIN-039-file-operations") && is_chain_id("CHAIN-7"));
        assert!(!is_chain_id("CHAIN-") && !is_chain_id("chain-1") && !is_chain_id("CHAIN-1-A") && !is_chain_id("CHAIN-1/x"));
        assert!(is_task_id("001-a") && !is_task_id("01-a") && !is_task_id("001") && !is_task_id("001-a/b"));
        assert_eq!(slug_of("Parse the *headers*, fast!"), "parse-the-headers-fast");
        assert_eq!(slug_of("!!!"), "task");
        assert_eq!(TaskRef::parse("CHAIN-1-x/002-y").expect("parses").path(Status::InReview), "docs/tasks/in-review/CHAIN-1-x/002-y.md");
        assert!(TaskRef::parse("CHAIN-1-x/../002-y").is_err());
        assert_eq!(today().len(), 10);
    }
}
