//! Recording decisions: the audit trail (with repeated refusals coalesced), the call's refusals
//! and the allowed accesses it keeps.

use toolcell_audit::Record;
use toolcell_policy::{Access, Decision, Effect};
use toolcell_types::{ToolErrorKind, escape_control};

use wasmtime_wasi::p2::FsError;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;

use super::*;

impl FsGuard {
    /// Write one decision to the audit trail before the operation proceeds.
    pub(super) fn audit(&self, event: &FsEvent) -> std::io::Result<()> {
        let Some(sink) = &self.audit else {
            return Ok(());
        };
        let decision = match (event.asked, event.effect) {
            (true, Effect::Allow) => "approved",
            (true, _) => "refused",
            (false, effect) => effect.as_str(),
        };
        let record = Record::filesystem(
            &now(),
            &sink.session,
            &self.role,
            &sink.tool,
            &sink.call_id,
            event.operation,
            &event.path,
            event.access.as_str(),
            decision,
            &event.rule,
        )
        .at(&sink.workspace, sink.principal.as_deref());
        // An allowed modification is in the trail before it happens, or it does not happen;
        // anything else may wait for a shared store that cannot be reached now. Either may be
        // written under the workspace's namespace lock, which every host waits on: what waits
        // in the audit spool is sent with the call's own record, after the call.
        if event.effect == Effect::Allow && matches!(event.access, Access::Write | Access::Delete) {
            sink.log.append_in_lock(&[record])
        } else {
            sink.log.append_deferrable_in_lock(&[record])
        }
    }

    /// Record the refusal of a host capability other than the filesystem (a `workflow`
    /// function the role is not granted): audited, and it fails the call like a refused access.
    pub(crate) fn refuse_capability(&mut self, operation: &'static str, subject: &str, rule: &str, message: String) {
        let event = FsEvent {
            operation,
            path: subject.to_owned(),
            access: Access::Write,
            effect: Effect::Deny,
            rule: rule.to_owned(),
            asked: false,
        };
        let _ = self.refuse(event, message);
    }

    /// Record the use of a granted host capability (the capability's grant as its rule).
    pub(crate) fn record_capability(&mut self, operation: &'static str, subject: &str, rule: &str) {
        let event = FsEvent {
            operation,
            path: subject.to_owned(),
            access: Access::Write,
            effect: Effect::Allow,
            rule: rule.to_owned(),
            asked: false,
        };
        if self.audit(&event).is_err() {
            self.audit_failures += 1;
        }
        self.remember(event);
    }

    /// Record a refusal (in the audit trail and for the call's result) and return the WASI
    /// error the component sees.
    pub(super) fn refuse(&mut self, event: FsEvent, message: String) -> FsError {
        self.refuse_as(event, message, ToolErrorKind::Denied)
    }

    pub(super) fn refuse_as(&mut self, event: FsEvent, message: String, kind: ToolErrorKind) -> FsError {
        let key = (event.operation, event.access, event.rule.clone(), event.path.clone());
        if let Some(count) = self.repeats.get_mut(&key) {
            // The same refusal again: counted, and recorded once when the call ends.
            *count += 1;
            return FsError::from(ErrorCode::Access);
        }
        if let Some(budget) = self.budget.as_ref()
            && self.repeats.len() as u64 >= budget.audit_records
        {
            let message = format!(
                "`{}` was stopped: it made more than {} distinct refused filesystem accesses, its budget of audit records for one call; nothing it did is kept. Do less in one call (the operator can raise `audit_records` under `[limits]` or `[limits.tools.{}]` in the policy)",
                budget.tool, budget.audit_records, budget.tool
            );
            let stop = FsEvent { rule: "audit-record-budget".to_owned(), ..event };
            if self.audit(&stop).is_err() {
                self.audit_failures += 1;
            }
            self.denials.push(Denial { event: stop, message: message.clone(), kind: ToolErrorKind::TooLarge });
            self.flood = Some(message.clone());
            return FsError::trap(wasmtime::format_err!("{message}"));
        }
        if event.rule != "audit-unavailable" && self.audit(&event).is_err() {
            self.audit_failures += 1;
        }
        self.repeats.insert(key, 0);
        self.denials.push(Denial { event, message, kind });
        FsError::from(ErrorCode::Access)
    }

    /// Refuse `access` to `path` by the host's own `rule` (not the policy's), recorded like
    /// every refusal.
    pub(super) fn refuse_rule(
        &mut self,
        operation: &'static str,
        path: &str,
        access: Access,
        rule: &str,
        message: String,
        kind: ToolErrorKind,
    ) -> FsError {
        let event = FsEvent { operation, path: path.to_owned(), access, effect: Effect::Deny, rule: rule.to_owned(), asked: false };
        self.refuse_as(event, message, kind)
    }

    /// Refuse a path that leads outside the workspace (as the component wrote it).
    pub(super) fn refuse_outside(&mut self, operation: &'static str, path: &str, access: Access) -> FsError {
        // An absolute path is not repeated to the component: it may name something on the host.
        let message = if path.starts_with('/') {
            "an absolute path is outside the workspace: tools can only reach paths inside it, so give a path relative to its root"
                .to_owned()
        } else {
            format!("`{}` is outside the workspace: tools can only reach paths inside it", escape_control(path))
        };
        self.refuse_rule(operation, path, access, "workspace-boundary", message, ToolErrorKind::Denied)
    }

    /// Record an allowed access the caller judged already with [`judge`](Self::judge).
    pub(super) fn record_allowed(&mut self, operation: &'static str, path: &str, access: Access, decision: Option<Decision>) {
        match decision {
            Some(decision) => self.remember(FsEvent {
                operation,
                path: path.to_owned(),
                access,
                effect: decision.effect,
                rule: decision.rule,
                asked: false,
            }),
            None => self.unrecorded_events += 1,
        }
    }

    pub(super) fn remember(&mut self, event: FsEvent) {
        if self.events.len() < MAX_RECORDED_EVENTS {
            self.events.push(event);
        } else {
            self.unrecorded_events += 1;
        }
    }

    /// Write one record for each refusal the call repeated, with how often: the trail stays
    /// complete without a record per repetition.
    pub(crate) fn record_repeats(&mut self) {
        let Some(sink) = &self.audit else {
            return;
        };
        let now = now();
        let mut records: Vec<Record> = self
            .repeats
            .iter()
            .filter(|(_, count)| **count > 0)
            .map(|((operation, access, rule, path), count)| {
                let mut record = Record::filesystem(
                    &now,
                    &sink.session,
                    &self.role,
                    &sink.tool,
                    &sink.call_id,
                    operation,
                    path,
                    access.as_str(),
                    "deny",
                    rule,
                )
                .at(&sink.workspace, sink.principal.as_deref());
                record.repeated = Some(*count);
                record
            })
            .collect();
        if records.is_empty() {
            return;
        }
        records.sort_by(|a, b| (&a.path, &a.operation).cmp(&(&b.path, &b.operation)));
        if sink.log.append(&records).is_err() {
            self.audit_failures += 1;
        }
        self.repeats.clear();
    }

    /// The kind and message of the refusal just recorded.
    pub(super) fn last_refusal(&self, fallback: ToolErrorKind) -> (ToolErrorKind, String) {
        match self.denials.last() {
            Some(denial) => (denial.kind, denial.message.clone()),
            None => (fallback, "the host refused the lookup".to_owned()),
        }
    }
}

pub(crate) use toolcell_audit::now;
