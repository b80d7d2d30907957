//! The decision: what the policy, the call's own limits and the host-owned paths say about an
//! access to a canonical path. Pure: nothing here touches the filesystem.

use toolcell_policy::{Access, DecidedBy, Decision, Effect, Verdict};
use toolcell_types::escape_control;

use super::*;

/// How the rule refusing names reserved for what calls have in flight is written
/// (`protected:.toolcell-*`).
pub(crate) const IN_FLIGHT_PATTERN: &str = ".toolcell-*";

/// Whether a component of the workspace path `path` is a name the host reserves for what a
/// call has in flight ([`IN_FLIGHT_PREFIX`](toolcell_state::journal::IN_FLIGHT_PREFIX)).
pub(crate) fn is_in_flight(path: &str) -> bool {
    // Component by component: a substring search builds its searcher on every call, and this
    // runs for every access a guard judges.
    path.split('/').any(|component| component.starts_with(toolcell_state::journal::IN_FLIGHT_PREFIX))
}

/// What decides an access ([`FsGuard::judgment`]), borrowed from the guard and its policy.
pub(super) enum Judgment<'a> {
    /// A modification in a call that may not modify anything.
    ReadOnlyCall,
    /// Any access to a name the host reserves for what a call has in flight
    /// ([`IN_FLIGHT_PATTERN`]).
    InFlight,
    /// Any access to a host-owned location (state directory, cache, plugins, policy) under
    /// this workspace path.
    StatePath(&'a str),
    /// No policy: the workspace boundary is the only rule.
    NoPolicy,
    /// A role the policy does not know.
    UnknownRole,
    /// The policy's verdict for the role.
    Policy(Verdict<'a>),
}

impl Judgment<'_> {
    pub(super) fn effect(&self) -> Effect {
        match self {
            Judgment::ReadOnlyCall | Judgment::InFlight | Judgment::StatePath(_) | Judgment::UnknownRole => Effect::Deny,
            Judgment::NoPolicy => Effect::Allow,
            Judgment::Policy(verdict) => verdict.effect(),
        }
    }

    pub(super) fn to_decision(&self) -> Decision {
        let rule = match self {
            Judgment::ReadOnlyCall => "read-only-call".to_owned(),
            Judgment::InFlight => format!("protected:{IN_FLIGHT_PATTERN}"),
            Judgment::StatePath(state) => format!("protected:{state}"),
            Judgment::NoPolicy => "no-policy".to_owned(),
            Judgment::UnknownRole => "unknown-role".to_owned(),
            Judgment::Policy(verdict) => return verdict.to_decision(),
        };
        Decision { effect: self.effect(), rule, line: None }
    }
}

impl FsGuard {
    pub(super) fn decide(&self, access: Access, path: &str) -> Decision {
        self.judgment(access, path).to_decision()
    }

    /// The effect [`decide`](Self::decide) would give, without allocating: visibility checks
    /// run for every entry a scan lists.
    pub(crate) fn effect(&self, access: Access, path: &str) -> Effect {
        self.judgment(access, path).effect()
    }

    /// What decides `access` to `path`: the call's own limits first, then the policy.
    pub(super) fn judgment(&self, access: Access, path: &str) -> Judgment<'_> {
        if self.is_read_only_refusal(access) {
            return Judgment::ReadOnlyCall;
        }
        if is_in_flight(path) {
            return Judgment::InFlight;
        }
        if let Some(state) = self.owned_location_of(path) {
            return Judgment::StatePath(state);
        }
        let Some(policy) = &self.policy else {
            return Judgment::NoPolicy;
        };
        match self.bound.as_deref().or_else(|| policy.role(&self.role)) {
            Some(role) => Judgment::Policy(policy.verdict(role, access, path)),
            // The runtime refuses unknown roles before a call starts; stay closed regardless.
            None => Judgment::UnknownRole,
        }
    }

    /// Whether `access` is a modification in a call that may not modify anything.
    pub(super) fn is_read_only_refusal(&self, access: Access) -> bool {
        matches!(access, Access::Write | Access::Delete) && self.transaction.is_none() && self.root.is_some()
    }

    /// The host-owned path that `path` is or lies under: every access to it is refused. Names
    /// the host reserves for what calls have in flight ([`IN_FLIGHT_PATTERN`]) are host-owned
    /// wherever they stand: no call of any role sees or touches another call's (or its own)
    /// objects in flight.
    pub(super) fn state_path_of(&self, path: &str) -> Option<&str> {
        if is_in_flight(path) {
            return Some(IN_FLIGHT_PATTERN);
        }
        self.owned_location_of(path)
    }

    /// The host-owned location (state directory, cache, plugins, policy) that `path` is or
    /// lies under; [`state_path_of`](Self::state_path_of) without the names in flight.
    fn owned_location_of(&self, path: &str) -> Option<&str> {
        self.state_paths
            .iter()
            .find(|state| path == state.as_str() || path.strip_prefix(state.as_str()).is_some_and(|rest| rest.starts_with('/')))
            .map(String::as_str)
    }

    /// Judge `access` to `path`: its effect, and the whole decision while the call still
    /// records what it was allowed (the first [`MAX_RECORDED_EVENTS`] accesses; past them
    /// nothing is allocated).
    pub(super) fn judge(&self, access: Access, path: &str) -> (Effect, Option<Decision>) {
        if self.events.len() < MAX_RECORDED_EVENTS {
            let decision = self.decide(access, path);
            (decision.effect, Some(decision))
        } else {
            (self.effect(access, path), None)
        }
    }

    /// Whether the role may see `path`: read it (a file) or list it (a directory). An access
    /// the policy puts to the approver counts only once this call was approved it: "may see"
    /// decides moves, links and listings, where nobody is asked.
    pub(super) fn is_visible(&self, path: &str, is_directory: bool) -> bool {
        let access = if is_directory { Access::List } else { Access::Read };
        match self.effect(access, path) {
            Effect::Allow => true,
            Effect::Ask => self.approved.contains(&(access, path.to_owned())),
            Effect::Deny => false,
        }
    }

    pub(super) fn rule_location(&self, decision: &Decision) -> String {
        match (&self.policy, decision.line) {
            (Some(policy), Some(line)) => format!(", {} line {line}", policy.file()),
            _ => String::new(),
        }
    }

    /// The refusal the agent reads for `access` to `path` that `judgment` denies, worded from
    /// what decided it.
    pub(super) fn denial_message(&self, access: Access, path: &str, judgment: &Judgment<'_>) -> String {
        let path = escape_control(path);
        let role = &self.role;
        match judgment {
            Judgment::ReadOnlyCall => {
                format!("{access} of `{path}` is refused: this call may only read (validators and descriptions cannot change files).")
            }
            Judgment::InFlight => format!(
                "{access} of `{path}` is refused: names starting with `{}` are reserved for what toolcell has in flight (a file a call is rewriting), which no tool may see or touch. Use another name.",
                toolcell_state::journal::IN_FLIGHT_PREFIX
            ),
            Judgment::StatePath(state) => format!(
                "{access} of `{path}` is refused: it is toolcell's own state (`{state}`: its audit trail, undo records, indexes, cache, plugins or policy), which no tool may read or change. Leave it alone."
            ),
            Judgment::UnknownRole => format!(
                "{access} of `{path}` is denied for role `{role}` by rule `unknown-role`. Work on another path, or ask the operator to change the policy."
            ),
            // Without a policy nothing is denied by a rule; stay worded all the same.
            Judgment::NoPolicy => format!("{access} of `{path}` is refused."),
            Judgment::Policy(verdict) => match verdict.decided_by() {
                DecidedBy::DefaultDeny => format!(
                    "{access} of `{path}` is denied for role `{role}`: no rule of the policy allows it (default deny). Work on another path, or ask the operator for a role or policy that allows it."
                ),
                DecidedBy::Protected { pattern } => format!(
                    "{access} of `{path}` is denied for role `{role}`: the path is protected (`{pattern}`), and no rule names it explicitly. Leave it unchanged."
                ),
                DecidedBy::Rule { id, line } => format!(
                    "{access} of `{path}` is denied for role `{role}` by rule `{id}`{}. Work on another path, or ask the operator to change the policy.",
                    self.policy.as_ref().map_or_else(String::new, |policy| format!(", {} line {line}", policy.file()))
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_in_flight;

    #[test]
    fn in_flight_names_are_found_in_any_component_and_only_at_its_start() {
        for path in [".toolcell-1", ".toolcell-", "a/.toolcell-x", "a/b/.toolcell-x/c", ".toolcell-x/a", "a//.toolcell-"] {
            assert!(is_in_flight(path), "{path}");
        }
        for path in ["", ".", "a", "x.toolcell-1", "a/x.toolcell-1", "a/.toolcel", ".toolcell", "a/b.toolcell-/c", "toolcell-1"] {
            assert!(!is_in_flight(path), "{path}");
        }
    }
}
