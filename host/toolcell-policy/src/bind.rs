//! Binding a role for one call: the rules that name the calling tool, and the rules whose paths
//! use the session's task (`{chain}`, `{task}`).

use std::borrow::Cow;

use super::*;

/// The task a session is bound to: a chain id (`CHAIN-039-file-operations`) and a task in it
/// (`001-parse-headers`), written `CHAIN/TASK`. Both parts are plain names (ASCII letters,
/// digits and `-`), so substituting them into a glob can add no metacharacter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskBinding {
    chain: String,
    task: String,
}

impl TaskBinding {
    /// Parse `CHAIN-NNN-slug/NNN-slug`.
    ///
    /// # Errors
    ///
    /// Why the text is not a task reference, naming it.
    pub fn parse(text: &str) -> Result<TaskBinding, String> {
        let shown = text.escape_default();
        let Some((chain, task)) = text.split_once('/') else {
            return Err(format!("`{shown}` is not a task: write `CHAIN-ID/NNN-slug`, for example `CHAIN-039-file-operations/001-parse`"));
        };
        if !is_chain_id(chain) {
            return Err(format!(
                "`{}` is not a chain id: a chain id is `CHAIN-` and a number, then an optional lowercase slug (`CHAIN-039-file-operations`)",
                chain.escape_default()
            ));
        }
        if !is_task_id(task) {
            return Err(format!(
                "`{}` is not a task id: a task id is a three-digit number and a lowercase slug (`001-parse-headers`)",
                task.escape_default()
            ));
        }
        Ok(TaskBinding { chain: chain.to_owned(), task: task.to_owned() })
    }

    /// The chain id.
    pub fn chain(&self) -> &str {
        &self.chain
    }

    /// The task id within the chain.
    pub fn task(&self) -> &str {
        &self.task
    }

    pub(crate) fn sample() -> TaskBinding {
        TaskBinding { chain: "CHAIN-000-sample".to_owned(), task: "000-sample".to_owned() }
    }
}

impl fmt::Display for TaskBinding {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}/{}", self.chain, self.task)
    }
}

fn is_slug(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with('-')
        && !text.ends_with('-')
        && !text.contains("--")
        && text.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
}

/// `CHAIN-` digits, then optionally `-slug`; at most 100 bytes.
fn is_chain_id(text: &str) -> bool {
    let Some(rest) = text.strip_prefix("CHAIN-") else {
        return false;
    };
    let (number, slug) = rest.split_once('-').map_or((rest, None), |(number, slug)| (number, Some(slug)));
    text.len() <= 100 && !number.is_empty() && number.bytes().all(|byte| byte.is_ascii_digit()) && slug.is_none_or(is_slug)
}

/// Three or more digits, `-`, a slug; at most 100 bytes.
fn is_task_id(text: &str) -> bool {
    let Some((number, slug)) = text.split_once('-') else {
        return false;
    };
    text.len() <= 100 && number.len() >= 3 && number.bytes().all(|byte| byte.is_ascii_digit()) && is_slug(slug)
}

/// A tool's canonical name: `chain:status` (the spelling of the task-chain workflow's role
/// matrix) is `chain_status`.
pub fn canonical_tool_name(name: &str) -> Cow<'_, str> {
    if name.contains(':') { Cow::Owned(name.replace(':', "_")) } else { Cow::Borrowed(name) }
}

const VARIABLES: [&str; 2] = ["{chain}", "{task}"];

pub(crate) fn is_templated(pattern: &str) -> bool {
    VARIABLES.iter().any(|variable| pattern.contains(variable))
}

/// A `{name}` in `pattern` that looks like a variable but is not one (an alternation such as
/// `{rs,toml}` has a comma and is left to the glob).
pub(crate) fn unknown_variable(pattern: &str) -> Option<&str> {
    let mut rest = pattern;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let end = after.find('}')?;
        let name = &after[..end];
        if !name.is_empty() && name.bytes().all(|byte| byte.is_ascii_lowercase() || byte == b'_') && name != "chain" && name != "task" {
            return Some(name);
        }
        rest = &after[end..];
    }
    None
}

pub(crate) fn substitute(pattern: &str, binding: &TaskBinding) -> String {
    pattern.replace("{chain}", &binding.chain).replace("{task}", &binding.task)
}

impl Policy {
    /// The role `role` as it stands for a call of `tool` by a session bound to `task`: its
    /// rules, plus those that name `tool`, plus those about the task's paths when there is
    /// one. The shared role itself when none applies; `None` for an unknown role (or, never
    /// expected, rules that no longer combine: callers then refuse everything).
    pub fn bind(&self, role: &str, tool: &str, task: Option<&TaskBinding>) -> Option<Arc<Role>> {
        let shared = self.roles.get(role)?;
        let applies = |rule: &Rule| {
            rule.tools.as_ref().is_none_or(|tools| tools.iter().any(|named| named == tool)) && (!rule.templated || task.is_some())
        };
        if !shared.scoped.iter().any(applies) {
            return Some(Arc::clone(shared));
        }
        let mut rules = shared.rules.clone();
        for rule in shared.scoped.iter().filter(|rule| applies(rule)) {
            let mut bound = rule.clone();
            bound.scoped = rule.tools.is_some();
            if let (true, Some(task)) = (rule.templated, task) {
                // The patterns compiled at parse time with sample values, and a binding adds
                // no metacharacter, so they compile again.
                bound.globs = rule.patterns.iter().filter_map(|pattern| compile_glob(&substitute(pattern, task)).ok()).collect();
            }
            rules.push(bound);
        }
        with_rules(shared, rules)
    }
}

/// `shared` with the rules `rules` in place of its own, indexed; `None` if they no longer
/// combine (callers then refuse everything).
pub(crate) fn with_rules(shared: &Role, rules: Vec<Rule>) -> Option<Arc<Role>> {
    let index = Access::ALL.map(|access| AccessIndex::new(&rules, access));
    // Closed on failure: a role missing its scoped denials must not stand in for it.
    let [Ok(read), Ok(list), Ok(write), Ok(delete)] = index else {
        return None;
    };
    Some(Arc::new(Role {
        name: shared.name.clone(),
        description: shared.description.clone(),
        tools: shared.tools.clone(),
        rules,
        scoped: Vec::new(),
        index: [read, list, write, delete],
        may_spawn: shared.may_spawn.clone(),
        may_lock_for_chains: shared.may_lock_for_chains,
        network: shared.network.clone(),
    }))
}
