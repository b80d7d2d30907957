//! toolcell's governance policy: which tools a role may call, and which workspace paths it may
//! read, list, write or delete.
//!
//! A policy is TOML, parsed, validated and compiled once ([`Policy::parse`]); every filesystem
//! call then asks [`Policy::decide`] about one canonical workspace-relative path (no `.`, `..`,
//! duplicate slashes or symlinks left: the host resolves them first). Rules are ordered per role;
//! the default is deny; among the rules that match, deny overrides ask, which overrides allow.
//! Protected paths (`.git` always, plus the policy's `protected` list) may not be written or
//! deleted unless a rule names them explicitly: a rule `**` does not, a rule `.git/hooks/**`
//! does.
//!
//! A rule may name the tools it is about (`tools = ["task_complete"]`): for a call of one of
//! them it outranks every rule that names no tool (among the matching rules, those naming the
//! calling tool decide; then deny over ask over allow), and for other calls it does not apply.
//! A rule's paths may use `{chain}` and `{task}`, the task a session is bound to
//! ([`TaskBinding`]); such a rule applies only to bound sessions. [`Policy::bind`] gives the role
//! as it stands for one call.
//!
//! ```
//! use toolcell_policy::{Access, Effect, Policy};
//!
//! let policy = Policy::parse("example.toml", r#"
//!     version = 1
//!
//!     [roles.impl]
//!     tools = ["read_file", "write_file"]
//!
//!     [[roles.impl.rules]]
//!     access = ["read", "list", "write"]
//!     paths = ["**"]
//!     effect = "allow"
//!
//!     [[roles.impl.rules]]
//!     id = "docs-read-only"
//!     access = ["write", "delete"]
//!     paths = ["docs/**"]
//!     effect = "deny"
//! "#, &["read_file", "write_file"]).unwrap();
//!
//! let role = policy.role("impl").unwrap();
//! assert!(role.may_call("write_file"));
//! assert_eq!(policy.decide(role, Access::Write, "src/a.rs").effect, Effect::Allow);
//! let decision = policy.decide(role, Access::Write, "docs/guide.md");
//! assert_eq!(decision.effect, Effect::Deny);
//! assert_eq!(decision.rule, "docs-read-only");
//! assert_eq!(policy.decide(role, Access::Write, ".git/config").rule, "protected:.git/**");
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;

/// What a filesystem operation does to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    /// Read a file's content or metadata.
    Read,
    /// List a directory's entries.
    List,
    /// Create or modify a file or directory (including truncation, renaming onto, linking).
    Write,
    /// Remove a file or directory (including renaming away).
    Delete,
}

impl Access {
    /// Every access, in a fixed order.
    pub const ALL: [Access; 4] = [Access::Read, Access::List, Access::Write, Access::Delete];

    /// The name used in policies and audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::List => "list",
            Access::Write => "write",
            Access::Delete => "delete",
        }
    }

    /// Parse a policy's access name.
    pub fn from_name(name: &str) -> Option<Access> {
        Access::ALL.into_iter().find(|access| access.as_str() == name)
    }

    fn is_modification(self) -> bool {
        matches!(self, Access::Write | Access::Delete)
    }

    /// The position in [`Access::ALL`].
    fn slot(self) -> usize {
        match self {
            Access::Read => 0,
            Access::List => 1,
            Access::Write => 2,
            Access::Delete => 3,
        }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// What a rule or a decision says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Go ahead.
    Allow,
    /// Ask the embedding platform's approval callback (the CLI: `--approve`).
    Ask,
    /// Refuse.
    Deny,
}

impl Effect {
    /// The name used in policies and audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Ask => "ask",
            Effect::Deny => "deny",
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// The verdict on one access to one path, and what decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Allow, ask or deny.
    pub effect: Effect,
    /// The deciding rule's id, `default-deny`, or `protected:<pattern>`.
    pub rule: String,
    /// The deciding rule's line in the policy file, if a rule decided.
    pub line: Option<usize>,
}

/// A policy that cannot be loaded: the file, the line (when known) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {reason}", line.map(|line| format!(" line {line}")).unwrap_or_default())]
pub struct PolicyError {
    /// The policy file's name as given to [`Policy::parse`].
    pub file: String,
    /// The 1-based line of the offending text.
    pub line: Option<usize>,
    /// What is wrong and how to fix it.
    pub reason: String,
}

/// A compiled policy.
#[derive(Debug, Clone)]
pub struct Policy {
    file: String,
    roles: BTreeMap<String, Arc<Role>>,
    protected: Vec<Protected>,
    read_before_write: ReadBeforeWrite,
    durability: Durability,
    validators: Vec<Validator>,
    /// Every rule id, path and network rules alike (they are unique across the policy).
    rule_ids: std::collections::BTreeSet<String>,
    limits: Limits,
    tool_limits: BTreeMap<String, Limits>,
    pins: BTreeMap<String, Pin>,
    /// `[plugins.NAME] stub_imports`, by tool name.
    stubs: BTreeMap<String, Vec<String>>,
    /// Roles bound to judge what locks cover ([`Policy::may_change`]).
    bound: change::BoundCache,
}

/// The SHA-256 a tool's component must have (`[plugins.NAME] sha256 = "..."`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// Lowercase hex.
    pub sha256: String,
    /// The line of the pin in the policy file.
    pub line: usize,
}

/// Per-call limits a policy sets (`[limits]`, and `[limits.tools.NAME]` for one tool); a limit
/// it leaves out is the host's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock deadline (`deadline_ms`).
    pub deadline: Option<std::time::Duration>,
    /// Linear memory cap in bytes (`memory_mib`).
    pub memory_bytes: Option<usize>,
    /// Output cap in bytes (`output_kib`).
    pub output_bytes: Option<usize>,
    /// Filesystem calls a call may make (`host_calls`).
    pub host_calls: Option<u64>,
    /// Files and directories a call may hold open at once (`open_files`).
    pub open_files: Option<usize>,
    /// Distinct refusals a call may add to the audit trail (`audit_records`).
    pub audit_records: Option<u64>,
}

impl Limits {
    /// These limits, with `other`'s wherever it sets one.
    pub fn overridden_by(self, other: Limits) -> Limits {
        Limits {
            deadline: other.deadline.or(self.deadline),
            memory_bytes: other.memory_bytes.or(self.memory_bytes),
            output_bytes: other.output_bytes.or(self.output_bytes),
            host_calls: other.host_calls.or(self.host_calls),
            open_files: other.open_files.or(self.open_files),
            audit_records: other.audit_records.or(self.audit_records),
        }
    }
}

/// What happens when a session modifies an existing file it has not read (`[writes]
/// read_before_write`). A file changed on disk since the session read it is always a conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadBeforeWrite {
    /// Modify it, with a warning in the result (the default).
    #[default]
    Warn,
    /// Refuse the modification until the session reads the file.
    Refuse,
    /// Modify it silently.
    Off,
}

/// How durable a committed call's changes are (`[writes] durability`). Both modes make every
/// call all or nothing against a crash of the process: a file is rewritten beside itself and
/// renamed over, and the journal of a call's prior states is written before the call's first
/// change in place, so a call interrupted at any point is rolled back by the next start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A call's changes survive a power loss once the call has answered: new content is synced
    /// before it is renamed into place, and a journal that a rollback needs is synced before
    /// the change it guards (the default).
    #[default]
    Full,
    /// Nothing is synced: a process crash still leaves every call whole, but a power loss may
    /// lose calls that answered shortly before it, or leave a file empty or old.
    Atomic,
}

impl Durability {
    /// Whether data is synced to the disk before it counts.
    pub fn syncs(self) -> bool {
        self == Durability::Full
    }
}

/// A check run on every file a call writes whose path matches, before the call's changes are
/// kept; a failure rolls the whole call back.
#[derive(Debug, Clone)]
pub struct Validator {
    id: String,
    line: usize,
    globs: Vec<PathGlob>,
    check: ValidatorCheck,
}

/// What a validator runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValidatorCheck {
    /// The content must parse as JSON.
    Json,
    /// The content must parse as TOML.
    Toml,
    /// A loaded tool component, called with `{"path": "<the written file>"}` and read-only
    /// access; an error result fails the validation with its message.
    Tool(String),
}

impl Validator {
    /// The validator's id (`validators#N` if the policy gives none).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its line in the policy file.
    pub fn line(&self) -> usize {
        self.line
    }

    /// What it runs.
    pub fn check(&self) -> &ValidatorCheck {
        &self.check
    }

    /// Whether it applies to the canonical workspace-relative `path`.
    pub fn applies_to(&self, path: &str) -> bool {
        self.globs.iter().any(|glob| glob.is_match(path))
    }
}

/// One role: its tools and its ordered path rules.
#[derive(Debug, Clone)]
pub struct Role {
    name: String,
    description: String,
    tools: ToolSet,
    rules: Vec<Rule>,
    /// Rules that name tools or use `{chain}` / `{task}`: not in `index` until
    /// [`Policy::bind`] adds those that apply to a call.
    scoped: Vec<Rule>,
    /// For each access (in [`Access::ALL`] order), the globs of the rules about it, matched
    /// in one pass.
    index: [AccessIndex; 4],
    /// The roles whose sessions this role may start (`may_spawn`), with their spans.
    may_spawn: Vec<(String, std::ops::Range<usize>)>,
    /// Whether it may lock paths for a chain (`may_lock_for_chains`).
    may_lock_for_chains: bool,
    /// Which hosts its tools may reach over HTTP.
    network: NetworkRules,
}

impl Policy {
    /// What happens when a session modifies an existing file it has not read.
    pub fn read_before_write(&self) -> ReadBeforeWrite {
        self.read_before_write
    }

    /// How durable a committed call's changes are.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The limits of a call of `tool`: `[limits.tools.TOOL]` over `[limits]`.
    pub fn limits_for(&self, tool: &str) -> Limits {
        match self.tool_limits.get(tool) {
            Some(specific) => self.limits.overridden_by(*specific),
            None => self.limits,
        }
    }

    /// Whether a rule (a path or a network rule, of any role) has the id `id`.
    pub fn has_rule_id(&self, id: &str) -> bool {
        self.rule_ids.contains(id)
    }

    /// The SHA-256 pin of the component providing `tool`, if the policy pins it.
    pub fn pin(&self, tool: &str) -> Option<&Pin> {
        self.pins.get(tool)
    }

    /// The imports `tool` may link as stubs (`[plugins.NAME] stub_imports`): patterns
    /// `namespace:package/interface` or `namespace:package/*`.
    pub fn stub_imports(&self, tool: &str) -> &[String] {
        self.stubs.get(tool).map_or(&[], Vec::as_slice)
    }

    /// The validators, in policy order.
    pub fn validators(&self) -> &[Validator] {
        &self.validators
    }

    /// The policy file's name.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The role named `name`, without the rules that name tools or a task (see
    /// [`bind`](Self::bind)).
    pub fn role(&self, name: &str) -> Option<&Role> {
        self.roles.get(name).map(|role| &**role)
    }

    /// Every role, sorted by name.
    pub fn roles(&self) -> impl Iterator<Item = &Role> {
        self.roles.values().map(|role| &**role)
    }

    /// Protect another workspace-relative path or glob (the host adds the policy file and its
    /// state directory when they sit inside the workspace).
    ///
    /// # Errors
    ///
    /// A reason, if `pattern` is not a valid glob.
    pub fn protect(&mut self, pattern: &str) -> Result<(), String> {
        let glob = compile_glob(pattern)?;
        self.protected.push(Protected { pattern: pattern.to_owned(), glob });
        Ok(())
    }
}

impl Role {
    /// The role's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The role's description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Whether the role may call `tool`.
    pub fn may_call(&self, tool: &str) -> bool {
        match &self.tools {
            ToolSet::All => true,
            ToolSet::Only(tools) => tools.iter().any(|allowed| allowed == tool),
        }
    }

    /// The tools the role may call, or `None` for all tools.
    pub fn tools(&self) -> Option<&[String]> {
        match &self.tools {
            ToolSet::All => None,
            ToolSet::Only(tools) => Some(tools),
        }
    }

    /// Whether sessions of this role may start sessions of `role` (`may_spawn`).
    pub fn may_spawn(&self, role: &str) -> bool {
        self.may_spawn.iter().any(|(spawned, _)| spawned == role)
    }

    /// The roles whose sessions this role may start.
    pub fn spawnable(&self) -> impl Iterator<Item = &str> {
        self.may_spawn.iter().map(|(spawned, _)| spawned.as_str())
    }

    /// Whether this role may lock paths on behalf of a chain (`may_lock_for_chains`).
    pub fn may_lock_for_chains(&self) -> bool {
        self.may_lock_for_chains
    }

    /// Which hosts the role's tools may reach over HTTP (none, without a `network` rule).
    pub fn network(&self) -> &NetworkRules {
        &self.network
    }

    /// Whether some rule of the role names tools or uses a task's paths, so that a call's
    /// decisions need [`Policy::bind`].
    pub fn has_scoped_rules(&self) -> bool {
        !self.scoped.is_empty()
    }
}

mod bind;
mod change;
mod decide;
mod index;
mod mentions;
mod network;
mod network_settings;
mod parse;
mod registry;
mod stubs;

pub use mentions::{PluginPin, ToolMentions, pin_span, plugin_pins, plugin_sources, source_span};
pub use network::{
    Cidr, Destination, NetworkDecision, NetworkEffect, NetworkRule, NetworkRules, Scheme, SecretHeader, SecretSource, check_domain,
    normalize_host, special_range,
};
pub use network_settings::{NetworkSettings, network_settings};
pub use parse::stub_imports;
pub use registry::{RegistrySettings, registry_settings};
pub use stubs::{any_covers, covers};

pub use bind::{TaskBinding, canonical_tool_name};
pub use change::{is_glob, may_overlap};
pub use decide::{DecidedBy, Verdict};
pub use index::{PathGlob, join_lexically};

use bind::{is_templated, substitute, unknown_variable};
use index::{AccessIndex, BUILT_IN_PROTECTED, Protected, Rule, ToolSet, compile_glob};

#[cfg(test)]
use decide::{names_explicitly, rank};

#[cfg(test)]
mod tests;
