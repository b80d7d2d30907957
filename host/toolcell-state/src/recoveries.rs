//! What recovery found, per workspace, for one runtime: each workspace is recovered once (its
//! first call does it), every recovery is audited, and a journal that did not verify or a call
//! that could not be rolled back stops the workspace's writes until the next start.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::journal::JournalKey;
use crate::{AuditLog, Recovery, RecoveryKind, recover};

/// The recoveries of one runtime, by workspace.
#[derive(Debug, Default)]
pub struct Recoveries {
    found: Mutex<HashMap<PathBuf, Vec<Recovery>>>,
}

impl Recoveries {
    /// Every recovery so far, in every workspace.
    pub fn all(&self) -> Vec<Recovery> {
        self.found.lock().unwrap_or_else(PoisonError::into_inner).values().flatten().cloned().collect()
    }

    /// Roll back the calls in `workspace` that a runtime which died (here or in another process
    /// on the same state directory) left open in `journals`, once per workspace: only journals
    /// whose lines verify under `key`, and only calls in this very workspace, are replayed; each
    /// recovery is recorded in `audit`, and what needs the operator is said on stderr. Returns
    /// what the first recovery of `workspace` found.
    pub fn recover_once(&self, journals: &Path, key: &JournalKey, workspace: &Path, audit: Option<&AuditLog>) -> Vec<Recovery> {
        let mut found = self.found.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(earlier) = found.get(workspace) {
            return earlier.clone();
        }
        let recoveries = recover(journals, key, workspace);
        record(audit, workspace, &recoveries);
        for recovery in recoveries.iter().filter(|recovery| recovery.error.is_some()) {
            operator_message(workspace, recovery);
        }
        found.insert(workspace.to_path_buf(), recoveries.clone());
        recoveries
    }

    /// Whether writes to `workspace` are stopped: a journal there did not verify, or a call
    /// could not be rolled back (at recovery or in the call itself).
    pub fn writes_stopped(&self, workspace: &Path) -> bool {
        let found = self.found.lock().unwrap_or_else(PoisonError::into_inner);
        found.get(workspace).is_some_and(|recoveries| recoveries.iter().any(|recovery| recovery.kind.stops_writes()))
    }

    /// Stop writes to `workspace`: the call `call_id` of `session` failed and could not be
    /// rolled back (`failure`). Its journal stays open, and the next start finishes the
    /// rollback. Said on stderr and recorded in `audit`.
    pub fn stop_writes(&self, workspace: &Path, session: &str, call_id: &str, failure: &str, audit: Option<&AuditLog>) {
        let recovery = Recovery {
            call_id: call_id.to_owned(),
            session: session.to_owned(),
            workspace: workspace.to_path_buf(),
            steps: 0,
            kind: RecoveryKind::Failed,
            error: Some(format!(
                "the call `{call_id}` failed and could not be rolled back ({failure}); writes to this workspace stop until the next start finishes the rollback"
            )),
            left: Vec::new(),
            unrestored: Vec::new(),
        };
        operator_message(workspace, &recovery);
        record(audit, workspace, std::slice::from_ref(&recovery));
        self.found.lock().unwrap_or_else(PoisonError::into_inner).entry(workspace.to_path_buf()).or_default().push(recovery);
    }
}

fn record(audit: Option<&AuditLog>, workspace: &Path, recoveries: &[Recovery]) {
    let Some(log) = audit else {
        return;
    };
    let records: Vec<_> = recoveries
        .iter()
        .map(|recovery| {
            toolcell_audit::Record::recovery(
                &toolcell_audit::now(),
                &recovery.session,
                &recovery.call_id,
                recovery.steps as u64,
                recovery.error.as_deref(),
            )
            .at(&workspace.display().to_string(), None)
        })
        .collect();
    if !records.is_empty() {
        let _ = log.append(&records);
    }
}

/// Tell the operator, on stderr, what a recovery in `workspace` found that needs them.
fn operator_message(workspace: &Path, recovery: &Recovery) {
    let what = match recovery.kind {
        RecoveryKind::RolledBack => return,
        RecoveryKind::Replayed => "an old journal was put back; it was not replayed",
        RecoveryKind::Failed | RecoveryKind::Unverified => "writes to this workspace are stopped",
    };
    eprintln!("toolcell: recovery in `{}`: {what}: {}", workspace.display(), recovery.error.as_deref().unwrap_or_default());
}
