//! The end of a call's transaction: its writes validated by the policy's validators, then kept
//! (with what `undo_edit` needs) or rolled back whole, and what the session read and wrote
//! recorded.

use super::*;
use crate::native;
use crate::outcome::{CallOutcome, CallRequest};
use crate::runtime::{LoadedTool, Runtime, ToolKind};

mod leftovers;

impl Runtime {
    /// End the call's transaction: validate what it wrote, then keep its changes (and what
    /// `undo_edit` needs) if it succeeded, or roll them all back if it did not; record what the
    /// session read and wrote.
    pub(super) fn settle(&self, request: &CallRequest<'_>, outcome: &mut CallOutcome, mut guard: FsGuard) {
        let Some(mut transaction) = guard.transaction.take() else {
            return;
        };
        if outcome.result.is_ok() {
            // Whole-file rewrites go in place before validators read them.
            guard.transaction = Some(transaction);
            if let Err((kind, failure)) = guard.land_all() {
                outcome.result = Err(if guard.timed_out() {
                    self.deadline_error(request.tool, &self.limits_for(request.tool, guard.policy()))
                } else {
                    ToolError::new(kind, format!("the call's writes could not be put in place: {failure}"))
                });
            }
            let Some(taken) = guard.transaction.take() else {
                return;
            };
            transaction = taken;
        }
        let Some(root) = guard.root() else {
            return;
        };
        // New content the call never put in place changed nothing: its names stay as they are,
        // whatever another host wrote there meanwhile, and nothing of them is undoable.
        transaction.discard_shadows(root);
        let journal = transaction.journal.take().map(|mut journal| {
            journal.drop_unlanded();
            journal
        });
        if outcome.result.is_ok()
            && journal.is_some()
            && let Err(error) = self.validate(request, guard.policy(), root, &transaction.modified)
        {
            outcome.result = Err(error);
        }
        let mut modified: &[String] = &[];
        let mut replaced: Vec<String> = Vec::new();
        // Files this call moved that a rollback leaves where they are (their source is taken).
        let mut kept: Vec<(String, String)> = Vec::new();
        // With a shared store, the call's undo record and read versions are kept while its
        // journal is still open, in one statement: if the store cannot keep them, the call is
        // rolled back (the caller told why), never left standing without its record.
        let mut recorded = false;
        // What the files this call placed landed as, their content hashed then: the records
        // below take it instead of reading them again.
        let written = if outcome.result.is_ok() { transaction.written_versions() } else { Vec::new() };
        let journal = match journal {
            Some(journal) if outcome.result.is_ok() && self.undo.is_shared() => {
                replaced = transaction.replaced_or_changed_between(root);
                let absent = Transaction::absent_at_end(root, journal.steps());
                let made = Transaction::made_directories(root, journal.steps());
                match self.record_shared(request, outcome, &transaction, root, &journal, (&replaced, &written)) {
                    Ok(()) => {
                        recorded = true;
                        Some(journal)
                    }
                    Err(reason) => {
                        // Another host may have replaced, removed or moved a file (having read this
                        // call's content), or made again one this call removed, while the store did
                        // not answer: what it made stays, the rest is rolled back.
                        let mut journal = journal;
                        replaced = transaction.changed_since(root);
                        for path in Transaction::recreated_since(root, &absent)
                            .into_iter()
                            .chain(Transaction::directories_replaced_since(root, &made))
                        {
                            if !replaced.contains(&path) {
                                replaced.push(path);
                            }
                        }
                        kept = leftovers::kept_moves(&transaction.moves, &replaced);
                        let mut left = replaced.clone();
                        left.extend(kept.iter().map(|(_, to)| to.clone()));
                        journal.leave_as_they_are(&left);
                        outcome.result = Err(ToolError::new(ToolErrorKind::Failed, reason).with_hint(
                            "try the call again once the shared store answers (reads still work meanwhile), or tell the operator",
                        ));
                        Some(journal)
                    }
                }
            }
            journal => journal,
        };
        match (outcome.result.is_ok(), journal) {
            (true, Some(journal)) if recorded => {
                let (_, blob_dir) = journal.commit();
                if let Some(blob_dir) = blob_dir {
                    let _ = std::fs::remove_dir_all(blob_dir);
                }
                modified = &transaction.modified;
                if let Ok(skip) = self.never_indexed(request.workspace) {
                    self.indexes.note_written(request.workspace.root(), root, &skip, modified);
                }
            }
            (true, Some(journal)) => {
                let (mut steps, blob_dir) = journal.commit();
                // Another host may have replaced a file since this call put it in place: that
                // content is neither this session's to have read nor its to undo.
                replaced = transaction.replaced_or_changed_between(root);
                steps.retain(|step| !replaced.contains(&step.path));
                if request.tool != native::UNDO_EDIT {
                    // Without the undo record the change still stands; `undo_edit` will say
                    // there is nothing to undo.
                    let _ = self.undo.record(
                        request.session_id,
                        request.workspace.root(),
                        root,
                        &outcome.call_id,
                        steps,
                        blob_dir.as_deref(),
                        &written,
                    );
                }
                if let Some(blob_dir) = blob_dir {
                    let _ = std::fs::remove_dir_all(blob_dir);
                }
                modified = &transaction.modified;
                if let Ok(skip) = self.never_indexed(request.workspace) {
                    self.indexes.note_written(request.workspace.root(), root, &skip, modified);
                }
            }
            (false, Some(mut journal)) => {
                // A file this call put in place that another program or host changed since (in
                // place, replaced or removed it: they saw this call's content) is theirs now,
                // left as they made it; so is any path this call changed in place that holds
                // something else now than what the call left there (a file another process
                // wrote where this call removed one).
                let mut changed = transaction.changed_since(root);
                changed.extend(transaction.left.changed_since(root, journal.steps().iter().map(|step| &step.path)));
                let between = transaction.left.between();
                if changed.iter().chain(between).any(|path| !replaced.contains(path)) {
                    for path in changed {
                        if !replaced.contains(&path) {
                            replaced.push(path);
                        }
                    }
                    // A move whose source another made again (or changed between two changes
                    // of this call) stays where the call moved it.
                    let sources: Vec<String> = replaced.iter().chain(between).cloned().collect();
                    kept = leftovers::kept_moves(&transaction.moves, &sources);
                    let mut left = replaced.clone();
                    left.extend(kept.iter().map(|(_, to)| to.clone()));
                    journal.leave_as_they_are(&left);
                    for path in between {
                        if !replaced.contains(path) {
                            replaced.push(path.clone());
                        }
                    }
                }
                // Putting names back is a namespace change like any other: no other call
                // judges against the tree while it is half restored.
                // What the landed files are known by was used above: their descriptors go
                // back before the rollback (and its lock), which needs some of its own.
                transaction.release_landed();
                let namespace = guard.lock_namespace().ok().flatten();
                let rolled_back = journal.rollback_leaving(root);
                drop(namespace);
                match rolled_back {
                    Ok((steps, replayed)) => {
                        outcome.rolled_back = steps;
                        outcome.rolled_back_whole = true;
                        if let Err(error) = &mut outcome.result {
                            error.message.push_str(&leftovers::note(&replaced, &kept, &replayed));
                        }
                    }
                    Err(failure) => {
                        self.stop_writes(request.workspace, request.session_id, &outcome.call_id, &failure);
                        outcome.result = Err(ToolError::new(
                            ToolErrorKind::Failed,
                            format!(
                                "the call failed and its changes could not all be rolled back ({failure}); writes to this workspace are stopped until the host finishes the rollback at its next start. Tell the operator."
                            ),
                        ));
                    }
                }
            }
            (_, None) => {}
        }
        if transaction.read_before_write != ReadBeforeWrite::Off && !recorded {
            // What the agent saw: the files a call that succeeded read (a refused or failed
            // call showed it nothing of them, so retrying it cannot pass as having read), and
            // what it wrote, unless another host replaced it since.
            let reads: Vec<_> = if outcome.result.is_ok() { transaction.tracked_reads() } else { &[] }
                .iter()
                .filter(|(path, _)| !replaced.contains(path))
                .cloned()
                .collect();
            let modified = transaction.seen_changed(modified, &replaced);
            // Best effort: without the record, the next write only warns or asks to read again.
            let _ = self.reads.update(request.session_id, request.workspace.root(), root, &transaction.seen, &reads, &modified, &written);
        }
        outcome.warnings = std::mem::take(&mut guard.warnings);
        if let Ok(output) = &mut outcome.result
            && !outcome.warnings.is_empty()
        {
            output.text.push_str("\n\n");
            output.text.push_str(&outcome.warnings.join("\n"));
        }
    }

    /// Keep, in the shared store, what a call that succeeded leaves its session (its undo record
    /// and what it read and wrote) while its `journal` is still open; the reason to give the
    /// caller when the store cannot keep it (the call must then be rolled back).
    fn record_shared(
        &self,
        request: &CallRequest<'_>,
        outcome: &CallOutcome,
        transaction: &Transaction,
        root: &cap_std::fs::Dir,
        journal: &toolcell_state::journal::Journal,
        (replaced, written): (&[String], &[(String, toolcell_state::reads::Version)]),
    ) -> Result<(), String> {
        // Another host may have replaced a file since this call put it in place: that content
        // is neither this session's to have read nor its to undo.
        let steps: Vec<_> = if request.tool == native::UNDO_EDIT {
            Vec::new()
        } else {
            journal.steps().iter().filter(|step| !replaced.contains(&step.path)).cloned().collect()
        };
        let reads = if transaction.read_before_write == ReadBeforeWrite::Off {
            Vec::new()
        } else {
            let reads: Vec<_> = transaction.tracked_reads().iter().filter(|(path, _)| !replaced.contains(path)).cloned().collect();
            let modified = transaction.seen_changed(&transaction.modified, replaced);
            toolcell_state::reads::ReadTracker::changes(root, &transaction.seen, &reads, &modified, written)
        };
        self.undo
            .record_shared_call(request.session_id, request.workspace.root(), root, &outcome.call_id, steps, journal.blob_dir(), &reads, written)
            .map_err(|error| match error {
                toolcell_state::undo::SharedRecordError::Store(error) => {
                    format!(
                        "the call's changes could not be recorded for undo and read-before-write in the shared store, so they were rolled back: {}",
                        error.writes_refused()
                    )
                }
                other => format!("the call's changes could not be recorded for undo ({other})"),
            })
    }

    /// Run the validators of the call's `policy` (the one in force when it started) on every
    /// file the call wrote.
    pub(super) fn validate(
        &self,
        request: &CallRequest<'_>,
        policy: Option<&Policy>,
        root: &cap_std::fs::Dir,
        modified: &[String],
    ) -> Result<(), ToolError> {
        let Some(policy) = policy else {
            return Ok(());
        };
        for path in modified {
            let applicable: Vec<_> = policy.validators().iter().filter(|validator| validator.applies_to(path)).collect();
            if applicable.is_empty() || !root.symlink_metadata(path).is_ok_and(|metadata| metadata.is_file()) {
                continue;
            }
            for validator in applicable {
                let failure = match validator.check() {
                    ValidatorCheck::Json => root.read(path).map_err(|error| error.to_string()).and_then(|bytes| {
                        serde_json::from_slice::<serde::de::IgnoredAny>(&bytes)
                            .map(drop)
                            .map_err(|error| format!("it is not valid JSON: {error}"))
                    }),
                    ValidatorCheck::Toml => root.read_to_string(path).map_err(|error| error.to_string()).and_then(|text| {
                        toml::from_str::<serde::de::IgnoredAny>(&text)
                            .map(drop)
                            .map_err(|error| format!("it is not valid TOML: {}", error.message().trim()))
                    }),
                    ValidatorCheck::Tool(tool) => self.run_validator(tool, path, request, policy),
                };
                if let Err(reason) = failure {
                    return Err(ToolError::new(
                        ToolErrorKind::InvalidArgs,
                        format!(
                            "`{}` failed the validator `{}` ({} line {}): {reason}. Fix the content and write it again.",
                            escape_control(path),
                            validator.id(),
                            policy.file(),
                            validator.line()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Call the validator component `tool` on `path`, read-only and within the workspace.
    pub(super) fn run_validator(&self, tool: &str, path: &str, request: &CallRequest<'_>, policy: &Policy) -> Result<(), String> {
        let Some(LoadedTool { kind: ToolKind::Component(code), origin, .. }) = self.tools.get(tool) else {
            return Err(format!("the validator tool `{tool}` is not a loaded component"));
        };
        let pre = code.get(&self.engine, origin).map_err(|error| error.to_string())?;
        let guard = FsGuard::new(None, request.role, None, Some(request.workspace.held()));
        let context = CallContext {
            role: request.role.to_owned(),
            session_id: request.session_id.to_owned(),
            call_id: new_call_id(),
            ..CallContext::default()
        };
        let args = serde_json::json!({ "path": path }).to_string();
        let mut outcome = CallOutcome::new(context.call_id.clone());
        let validation = CallRequest { tool, args: &args, ..*request };
        let deadline = Instant::now() + self.limits_for(validation.tool, Some(policy)).deadline;
        let (guard, _) =
            self.run_component(pre, &validation, context, guard, &mut outcome, deadline, false).map_err(|error| error.to_string())?;
        if let Some(denial) = guard.denials.first() {
            return Err(format!("the validator `{tool}` was refused: {}", denial.message));
        }
        outcome.result.map(drop).map_err(|error| error.message)
    }
}
