//! The call's budgets of filesystem calls, open descriptors and audit records.

use toolcell_policy::Access;
use toolcell_types::{ToolErrorKind, escape_control};

use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::{FsError, FsResult};

use super::*;

pub(super) struct Budget {
    pub(super) tool: String,
    pub(super) calls_left: u64,
    pub(super) calls: u64,
    pub(super) open_files: usize,
    pub(super) exhausted: bool,
    /// Distinct refusals the call may record.
    pub(super) audit_records: u64,
    /// Bytes the call may still extend its files by without writing them (see [`MAX_HOLE_BYTES`]).
    pub(super) holes_left: u64,
}

/// The bytes one call may extend the files it writes by without writing them (`set-size` past
/// a file's end, or a write that starts past it), and the most holes a file it extends may end
/// up with. Such a hole costs a component one host call, while the host reads, hashes and
/// saves a file a call wrote at the cost of its whole length (an 8 GiB hole kept a host thread
/// hashing past the call's deadline, and its rollback wrote 8 GiB to the disk).
pub(crate) use toolcell_state::storage::MAX_HOLE_BYTES;

impl FsGuard {
    /// Bound the call's filesystem calls and open descriptors.
    pub(crate) fn set_budget(&mut self, tool: &str, calls: u64, open_files: usize, audit_records: u64) {
        self.budget = Some(Budget {
            tool: tool.to_owned(),
            calls_left: calls,
            calls,
            open_files,
            exhausted: false,
            audit_records,
            holes_left: MAX_HOLE_BYTES,
        });
    }

    /// Stop the host's own work for the call at `deadline` (see [`within_deadline`](Self::within_deadline)).
    pub(crate) fn set_deadline(&mut self, deadline: std::time::Instant) {
        self.deadline = Some(deadline);
    }

    /// The call's deadline, if it has one.
    pub(crate) fn deadline(&self) -> Option<std::time::Instant> {
        self.deadline
    }

    /// Whether the host stopped the call at its deadline.
    pub(crate) fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// Past the call's deadline, the host does no more work for it: this filesystem call (or
    /// entry of a walk, or rewrite to land) fails, the component is stopped, and the call is
    /// rolled back. Epoch interruption stops only the component's own code; a walk of a big
    /// tree inside one filesystem call would otherwise run on as long as it takes.
    pub(crate) fn within_deadline(&mut self) -> FsResult<()> {
        if self.timed_out || self.deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline) {
            self.timed_out = true;
            return Err(FsError::trap(wasmtime::format_err!("the call ran past its deadline and was stopped by the host")));
        }
        Ok(())
    }

    /// The filesystem calls made so far (counted against the budget; 0 without one).
    /// Take in what a part of this call (`context.split`) did under its own guard: its
    /// decisions, refusals, warnings and host calls count as this call's.
    pub(crate) fn absorb(&mut self, mut part: FsGuard) {
        part.record_repeats();
        self.events.append(&mut part.events);
        self.unrecorded_events += part.unrecorded_events;
        self.denials.append(&mut part.denials);
        self.warnings.append(&mut part.warnings);
        self.audit_failures += part.audit_failures;
        if self.flood.is_none() {
            self.flood = part.flood.take();
        }
        let used = part.host_calls_made();
        if let Some(budget) = &mut self.budget {
            budget.calls = budget.calls.saturating_add(used);
        }
    }

    pub(crate) fn host_calls_made(&self) -> u64 {
        self.budget.as_ref().map_or(0, |budget| budget.calls - budget.calls_left)
    }

    /// Why the call was stopped for making more distinct refusals than its budget of audit
    /// records, if it was.
    pub(crate) fn flooded(&self) -> Option<&str> {
        self.flood.as_deref()
    }

    /// Count one filesystem call against the budget; past it, every call fails (and the first
    /// refusal is recorded, naming the limit).
    pub(super) fn spend(&mut self, operation: &'static str) -> FsResult<()> {
        self.within_deadline()?;
        if let Some(message) = &self.flood {
            // Stopped: the component gets no further answer from the host.
            return Err(FsError::trap(wasmtime::format_err!("{message}")));
        }
        let Some(budget) = self.budget.as_mut() else {
            return Ok(());
        };
        if budget.calls_left > 0 {
            budget.calls_left -= 1;
            return Ok(());
        }
        if !budget.exhausted {
            budget.exhausted = true;
            let message = format!(
                "`{}` made more than {} filesystem calls, its budget for one call, and was refused the rest; do less in one call (the operator can raise `host_calls` under `[limits]` or `[limits.tools.{}]` in the policy)",
                budget.tool, budget.calls, budget.tool
            );
            self.refuse_budget(operation, "host-call-budget", message);
        }
        Err(FsError::from(ErrorCode::Quota))
    }

    /// Count one call of a host capability other than the filesystem (the `workflow` import)
    /// against the same budget: `Err` with the reason once the call was stopped or its budget
    /// is spent.
    pub(crate) fn spend_capability(&mut self, operation: &'static str) -> Result<(), String> {
        match self.spend(operation) {
            Ok(()) => Ok(()),
            Err(_) => Err(self.flood.clone().unwrap_or_else(|| "the call's budget of host calls is spent; do less in one call".to_owned())),
        }
    }

    /// Count the hole left by extending `file` (which is `path`) to `end` without writing the
    /// bytes between its end and `end`; refused, with a record, past [`MAX_HOLE_BYTES`] for
    /// the call, or when the file would then hold more than that unwritten.
    pub(super) fn extend(&mut self, operation: &'static str, path: &str, file: &impl rustix::fd::AsFd, end: u64) -> FsResult<()> {
        let stat = rustix::fs::fstat(file).map_err(|errno| FsError::from(ErrorCode::from(std::io::Error::from(errno))))?;
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        let gap = end.saturating_sub(size);
        // An end no file can have is the file system's to refuse, as it would without the guard.
        let possible = i64::try_from(end).is_ok();
        let Some(budget) = self.budget.as_mut().filter(|_| gap > 0 && possible) else {
            return Ok(());
        };
        // The file's own holes count too: calls that each stay within the allowance must not
        // grow one file's holes without end.
        let holes = toolcell_state::storage::holes_of(&stat);
        if gap <= budget.holes_left && holes.saturating_add(gap) <= MAX_HOLE_BYTES {
            budget.holes_left -= gap;
            return Ok(());
        }
        let message = format!(
            "`{}` would be extended from {size} to {end} bytes without the bytes between being written; one call may leave at most {} MiB unwritten in the files it writes, and a file may hold no more than that unwritten (the host reads and saves what a call wrote, at its whole length). Write the bytes instead",
            escape_control(path),
            MAX_HOLE_BYTES >> 20
        );
        Err(self.refuse_rule(operation, path, Access::Write, "sparse-file", message, ToolErrorKind::TooLarge))
    }

    /// Refuse an open past the budget of open descriptors.
    pub(super) fn check_open_files(&mut self, operation: &'static str, path: &str) -> FsResult<()> {
        let Some(budget) = self.budget.as_ref() else {
            return Ok(());
        };
        self.orphans.retain(|file| file.strong_count() > 0);
        if self.descriptors.len() + self.orphans.len() < budget.open_files {
            return Ok(());
        }
        let message = format!(
            "`{}` tried to hold more than {} files open at once (opening `{}`); close files before opening more (the operator can raise `open_files` under `[limits]` or `[limits.tools.{}]` in the policy)",
            budget.tool,
            budget.open_files,
            escape_control(path),
            budget.tool
        );
        self.refuse_budget(operation, "open-files", message);
        Err(FsError::from(ErrorCode::Quota))
    }

    pub(super) fn refuse_budget(&mut self, operation: &'static str, rule: &str, message: String) {
        self.refuse_rule(operation, ".", Access::Read, rule, message, ToolErrorKind::TooLarge);
    }
}
