//! Deciding one access: the strongest matching rule, protected paths, default deny.

use super::*;

impl Policy {
    /// Decide one access by `role` to the canonical workspace-relative `path` (`.` for the root).
    pub fn decide(&self, role: &Role, access: Access, path: &str) -> Decision {
        self.verdict(role, access, path).to_decision()
    }

    /// [`decide`](Self::decide) without allocating: the verdict borrows the deciding rule from
    /// the policy. Hosts call this for every path a scan lists or opens.
    pub fn verdict<'a>(&'a self, role: &'a Role, access: Access, path: &str) -> Verdict<'a> {
        let protected = if access.is_modification() { self.protected.iter().find(|protected| protected.glob.is_match(path)) } else { None };
        // Every (rule, glob) about this access whose glob matches the path, found in one pass.
        let index = &role.index[access.slot()];
        let decided = MATCHED.with_borrow_mut(|matched| {
            // A rule naming the calling tool outranks one naming none; then the strongest
            // effect wins; among rules of equal rank, the first.
            let mut verdict: Option<usize> = None;
            for &(rule_index, glob_index) in index.matching(path, matched) {
                let rule = &role.rules[rule_index];
                if protected.is_some_and(|protected| !names_explicitly(&rule.globs[glob_index], protected)) {
                    continue;
                }
                let stronger = match verdict {
                    None => true,
                    Some(best_index) => {
                        let best = &role.rules[best_index];
                        let best_rank = (best.scoped, rank(best.effect));
                        let this_rank = (rule.scoped, rank(rule.effect));
                        this_rank > best_rank || (this_rank == best_rank && rule_index < best_index)
                    }
                };
                if stronger {
                    verdict = Some(rule_index);
                }
            }
            verdict
        });
        match (decided.map(|rule_index| &role.rules[rule_index]), protected) {
            (Some(rule), _) => Verdict { effect: rule.effect, source: Source::Rule(rule) },
            (None, Some(protected)) => Verdict { effect: Effect::Deny, source: Source::Protected(protected) },
            (None, None) => Verdict { effect: Effect::Deny, source: Source::DefaultDeny },
        }
    }
}

thread_local! {
    /// The patterns that matched, reused from one decision to the next.
    static MATCHED: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A decision that borrows its rule from the policy ([`Policy::verdict`]).
#[derive(Debug, Clone, Copy)]
pub struct Verdict<'a> {
    effect: Effect,
    source: Source<'a>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Source<'a> {
    Rule(&'a Rule),
    Protected(&'a Protected),
    DefaultDeny,
}

/// What decided a [`Verdict`], typed: a host words its refusal from this, never from the
/// decision's rule string (a rule's id is the policy author's, and may be any word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy<'a> {
    /// The role's rule `id`, at `line` of the policy file.
    Rule {
        /// The rule's id.
        id: &'a str,
        /// Its line in the policy file.
        line: usize,
    },
    /// A protected path no rule names explicitly (only modifications are protected).
    Protected {
        /// The protected pattern.
        pattern: &'a str,
    },
    /// No rule matched: default deny.
    DefaultDeny,
}

impl<'a> Verdict<'a> {
    /// Allow, ask or deny.
    pub fn effect(&self) -> Effect {
        self.effect
    }

    /// What decided it.
    pub fn decided_by(&self) -> DecidedBy<'a> {
        match self.source {
            Source::Rule(rule) => DecidedBy::Rule { id: &rule.id, line: rule.line },
            Source::Protected(protected) => DecidedBy::Protected { pattern: &protected.pattern },
            Source::DefaultDeny => DecidedBy::DefaultDeny,
        }
    }

    /// The decision, owning its rule's id.
    pub fn to_decision(&self) -> Decision {
        match self.source {
            Source::Rule(rule) => Decision { effect: self.effect, rule: rule.id.clone(), line: Some(rule.line) },
            Source::Protected(protected) => Decision { effect: self.effect, rule: format!("protected:{}", protected.pattern), line: None },
            Source::DefaultDeny => Decision { effect: self.effect, rule: "default-deny".to_owned(), line: None },
        }
    }
}

pub(crate) fn rank(effect: Effect) -> u8 {
    match effect {
        Effect::Allow => 0,
        Effect::Ask => 1,
        Effect::Deny => 2,
    }
}

/// A rule's glob names a protected path explicitly when its literal prefix starts inside the
/// protected pattern's literal root: `.git/hooks/**` names `.git/**`; `**` and `*.toml` do not.
/// A protected pattern with no literal root (`**/.env`) is named by the same pattern, by a
/// literal path it matches (`config/.env`), or by a pattern ending in the same last component
/// (`services/**/.env`), provided that component is not wildcards alone; `**` and `**/*` do not
/// name it.
pub(crate) fn names_explicitly(glob: &PathGlob, protected: &Protected) -> bool {
    // `.git/hooks/**` and `.git/**` name `.git/**` (their literal part starts with `.git/`), as
    // does the literal `.git`; `.git*/**` (meant for `.github`) and `**` do not.
    let prefix = protected.glob.matcher.prefix.as_str();
    let root = prefix.trim_end_matches('/');
    let literal_prefix = glob.matcher.prefix.as_str();
    if !root.is_empty() {
        return literal_prefix.starts_with(prefix) || (glob.literal && literal_prefix == root);
    }
    let pattern = glob.matcher.matcher.glob().glob();
    if pattern == protected.pattern {
        return true;
    }
    if glob.literal {
        return protected.glob.is_match(pattern);
    }
    let last = |pattern: &str| pattern.rsplit('/').next().unwrap_or(pattern).to_owned();
    let named = last(&protected.pattern);
    named.chars().any(|character| !matches!(character, '*' | '?')) && last(pattern) == named
}
