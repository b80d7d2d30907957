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

use serde::Deserialize;
use toml::Spanned;

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
    roles: BTreeMap<String, Role>,
    protected: Vec<Protected>,
    read_before_write: ReadBeforeWrite,
    validators: Vec<Validator>,
    limits: Limits,
    tool_limits: BTreeMap<String, Limits>,
    pins: BTreeMap<String, Pin>,
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
    /// For each access (in [`Access::ALL`] order), the globs of the rules about it, matched
    /// in one pass.
    index: [AccessIndex; 4],
}

/// The globs of one role's rules about one access, arranged so that a decision matches a path
/// once, not once per glob.
#[derive(Debug, Clone)]
struct AccessIndex {
    /// The matchers without a literal prefix (`**/*.pem`), in one [`globset::GlobSet`].
    set: globset::GlobSet,
    /// The `(rule, glob)` each pattern of `set` belongs to.
    owners: Vec<(usize, usize)>,
    /// The matchers with a literal prefix (`docs/**`, `.env.*`), each tried only on paths
    /// that start with it.
    prefixed: Vec<(PrefixedMatcher, (usize, usize))>,
    /// The `(rule, glob)` of every `**` glob: they match any path, so nothing is matched.
    everywhere: Vec<(usize, usize)>,
}

impl AccessIndex {
    fn new(rules: &[Rule], access: Access) -> Result<AccessIndex, String> {
        let mut builder = globset::GlobSetBuilder::new();
        let mut owners = Vec::new();
        let mut prefixed = Vec::new();
        let mut everywhere = Vec::new();
        for (rule_index, rule) in rules.iter().enumerate().filter(|(_, rule)| rule.access.contains(&access)) {
            for (glob_index, glob) in rule.globs.iter().enumerate() {
                if glob.matches_everything {
                    everywhere.push((rule_index, glob_index));
                    continue;
                }
                for matcher in std::iter::once(&glob.matcher).chain(glob.directory.as_ref()) {
                    if matcher.prefix.is_empty() {
                        builder.add(matcher.matcher.glob().clone());
                        owners.push((rule_index, glob_index));
                    } else {
                        prefixed.push((matcher.clone(), (rule_index, glob_index)));
                    }
                }
            }
        }
        let set = builder.build().map_err(|error| format!("the rules' globs cannot be combined: {}", error.kind()))?;
        Ok(AccessIndex {
            set,
            owners,
            prefixed,
            everywhere,
        })
    }

    /// Every `(rule, glob)` whose glob matches `path`, in no particular order.
    fn matching<'a>(&'a self, path: &'a str, matched: &'a mut Vec<usize>) -> impl Iterator<Item = &'a (usize, usize)> + 'a {
        matched.clear();
        if !self.set.is_empty() {
            self.set.matches_candidate_into(&globset::Candidate::new(path), matched);
        }
        let prefixed = self
            .prefixed
            .iter()
            .filter(move |(matcher, _)| matcher.is_match(path))
            .map(|(_, owner)| owner);
        matched.iter().map(|&pattern| &self.owners[pattern]).chain(prefixed).chain(&self.everywhere)
    }
}

/// A glob's matcher behind the part of the glob before its first metacharacter: every path
/// the glob matches starts with that prefix, so most paths are settled by a compare.
#[derive(Debug, Clone)]
struct PrefixedMatcher {
    prefix: String,
    matcher: globset::GlobMatcher,
}

impl PrefixedMatcher {
    fn new(matcher: globset::GlobMatcher) -> PrefixedMatcher {
        let pattern = matcher.glob().glob();
        let end = pattern.find(['*', '?', '[', '{', '\\']).unwrap_or(pattern.len());
        PrefixedMatcher {
            prefix: pattern[..end].to_owned(),
            matcher,
        }
    }

    fn is_match(&self, path: &str) -> bool {
        path.starts_with(self.prefix.as_str()) && self.matcher.is_match(path)
    }
}

#[derive(Debug, Clone)]
enum ToolSet {
    All,
    Only(Vec<String>),
}

#[derive(Debug, Clone)]
struct Rule {
    id: String,
    line: usize,
    access: Vec<Access>,
    globs: Vec<PathGlob>,
    effect: Effect,
}

/// A compiled glob over canonical workspace-relative paths, with the policy's semantics: `*`
/// stays within one path component, `**` crosses them, and `X/**` also matches `X` itself.
/// Policies, lock patterns and validators all match paths with it.
#[derive(Debug, Clone)]
pub struct PathGlob {
    matcher: PrefixedMatcher,
    /// For `X/**`, a matcher of `X` itself (globset's `X/**` does not match the directory).
    directory: Option<PrefixedMatcher>,
    /// The pattern has no metacharacter: it names one path.
    literal: bool,
    /// The pattern is `**`: it matches every path.
    matches_everything: bool,
}

impl PathGlob {
    /// Compile `pattern`.
    ///
    /// # Errors
    ///
    /// Why the pattern is not a valid glob, or can never match a canonical path (a leading
    /// `/`, a `.` or `..` component).
    pub fn new(pattern: &str) -> Result<PathGlob, String> {
        compile_glob(pattern)
    }

    /// Whether the canonical workspace-relative `path` matches.
    pub fn is_match(&self, path: &str) -> bool {
        self.matches_everything
            || self.matcher.is_match(path)
            || self.directory.as_ref().is_some_and(|directory| directory.is_match(path))
    }
}

#[derive(Debug, Clone)]
struct Protected {
    pattern: String,
    glob: PathGlob,
}

/// Paths protected in every policy.
const BUILT_IN_PROTECTED: &[&str] = &[".git/**"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    version: Spanned<i64>,
    #[serde(default)]
    protected: Vec<Spanned<String>>,
    roles: BTreeMap<Spanned<String>, RawRole>,
    #[serde(default)]
    writes: Option<RawWrites>,
    #[serde(default)]
    limits: Option<RawLimits>,
    #[serde(default)]
    plugins: BTreeMap<Spanned<String>, RawPlugin>,
    #[serde(default)]
    validators: Vec<Spanned<RawValidator>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlugin {
    sha256: Spanned<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    deadline_ms: Option<Spanned<i64>>,
    memory_mib: Option<Spanned<i64>>,
    output_kib: Option<Spanned<i64>>,
    host_calls: Option<Spanned<i64>>,
    open_files: Option<Spanned<i64>>,
    audit_records: Option<Spanned<i64>>,
    #[serde(default)]
    tools: BTreeMap<Spanned<String>, RawLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWrites {
    read_before_write: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawValidator {
    id: Option<Spanned<String>>,
    paths: Vec<Spanned<String>>,
    check: Option<Spanned<String>>,
    tool: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRole {
    #[serde(default)]
    description: String,
    tools: Vec<Spanned<String>>,
    #[serde(default)]
    rules: Vec<Spanned<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    id: Option<Spanned<String>>,
    access: Vec<Spanned<String>>,
    paths: Vec<Spanned<String>>,
    effect: Spanned<String>,
}

impl Policy {
    /// Parse, validate and compile a policy. `file` names it in errors; `known_tools` are the
    /// tools a role may list (`"*"` in a role's `tools` means all of them).
    ///
    /// # Errors
    ///
    /// [`PolicyError`] with the line for a TOML syntax error, an unknown key, an unsupported
    /// version, an unknown tool, access or effect, a bad or unmatchable glob, a duplicate rule id,
    /// or a role without tools.
    pub fn parse(file: &str, text: &str, known_tools: &[&str]) -> Result<Policy, PolicyError> {
        let error = |span: Option<std::ops::Range<usize>>, reason: String| PolicyError {
            file: file.to_owned(),
            line: span.map(|span| line_of(text, span.start)),
            reason,
        };
        let raw: RawPolicy = toml::from_str(text).map_err(|parse_error| {
            error(parse_error.span(), parse_error.message().trim().to_owned())
        })?;
        if *raw.version.get_ref() != 1 {
            return Err(error(
                Some(raw.version.span()),
                format!("unsupported policy version {}: this toolcell reads version 1", raw.version.get_ref()),
            ));
        }
        let mut protected = Vec::new();
        for pattern in BUILT_IN_PROTECTED {
            protected.push(Protected {
                pattern: (*pattern).to_owned(),
                glob: compile_glob(pattern).map_err(|reason| error(None, reason))?,
            });
        }
        for pattern in &raw.protected {
            protected.push(Protected {
                pattern: pattern.get_ref().clone(),
                glob: compile_glob(pattern.get_ref()).map_err(|reason| error(Some(pattern.span()), reason))?,
            });
        }
        if raw.roles.is_empty() {
            return Err(error(None, "the policy defines no roles: add at least one `[roles.NAME]` table".to_owned()));
        }
        let mut roles = BTreeMap::new();
        let mut rule_ids: BTreeMap<String, usize> = BTreeMap::new();
        for (name, raw_role) in raw.roles {
            let role_name = name.get_ref().clone();
            if role_name.is_empty()
                || !role_name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
            {
                return Err(error(
                    Some(name.span()),
                    format!("role name `{}` must be lowercase letters, digits, `_` and `-`", role_name.escape_default()),
                ));
            }
            let tools = compile_tools(&role_name, &raw_role.tools, known_tools).map_err(|(span, reason)| error(span, reason))?;
            let mut rules = Vec::new();
            for (index, raw_rule) in raw_role.rules.iter().enumerate() {
                let line = line_of(text, raw_rule.span().start);
                let raw_rule = raw_rule.get_ref();
                let id = match &raw_rule.id {
                    Some(id) => id.get_ref().clone(),
                    None => format!("{role_name}#{}", index + 1),
                };
                if let Some(first) = rule_ids.insert(id.clone(), line) {
                    return Err(error(
                        raw_rule.id.as_ref().map(Spanned::span),
                        format!("rule id `{id}` is used twice (first on line {first}): ids name rules in audit records, so they must be unique"),
                    ));
                }
                rules.push(compile_rule(id, line, raw_rule).map_err(|(span, reason)| error(span, reason))?);
            }
            let index = Access::ALL.map(|access| AccessIndex::new(&rules, access));
            let index = match index {
                [Ok(read), Ok(list), Ok(write), Ok(delete)] => [read, list, write, delete],
                [read, list, write, delete] => {
                    let reason = [read, list, write, delete].into_iter().find_map(Result::err).unwrap_or_default();
                    return Err(error(Some(name.span()), format!("role `{role_name}`: {reason}")));
                }
            };
            roles.insert(
                role_name.clone(),
                Role {
                    name: role_name,
                    description: raw_role.description,
                    tools,
                    rules,
                    index,
                },
            );
        }
        let read_before_write = match raw.writes.as_ref().and_then(|writes| writes.read_before_write.as_ref()) {
            None => ReadBeforeWrite::default(),
            Some(mode) => match mode.get_ref().as_str() {
                "warn" => ReadBeforeWrite::Warn,
                "refuse" => ReadBeforeWrite::Refuse,
                "off" => ReadBeforeWrite::Off,
                other => {
                    return Err(error(
                        Some(mode.span()),
                        format!("unknown `read_before_write` mode `{}`; use `warn`, `refuse` or `off`", other.escape_default()),
                    ));
                }
            },
        };
        let mut validators = Vec::new();
        for (index, raw_validator) in raw.validators.iter().enumerate() {
            let line = line_of(text, raw_validator.span().start);
            let raw_validator = raw_validator.get_ref();
            let id = match &raw_validator.id {
                Some(id) => id.get_ref().clone(),
                None => format!("validators#{}", index + 1),
            };
            let check = match (&raw_validator.check, &raw_validator.tool) {
                (Some(check), None) => match check.get_ref().as_str() {
                    "json" => ValidatorCheck::Json,
                    "toml" => ValidatorCheck::Toml,
                    other => {
                        return Err(error(
                            Some(check.span()),
                            format!("validator `{id}`: unknown check `{}`; use `json` or `toml`, or `tool = \"NAME\"` for a validator component", other.escape_default()),
                        ));
                    }
                },
                (None, Some(tool)) => {
                    if !known_tools.contains(&tool.get_ref().as_str()) {
                        return Err(error(
                            Some(tool.span()),
                            format!(
                                "validator `{id}` names the unknown tool `{}`; the tools are: {}",
                                tool.get_ref().escape_default(),
                                known_tools.join(", ")
                            ),
                        ));
                    }
                    ValidatorCheck::Tool(tool.get_ref().clone())
                }
                _ => {
                    return Err(error(
                        None,
                        format!("validator `{id}` on line {line} needs exactly one of `check = \"json\"|\"toml\"` or `tool = \"NAME\"`"),
                    ));
                }
            };
            if raw_validator.paths.is_empty() {
                return Err(error(None, format!("validator `{id}` on line {line} has an empty `paths` list")));
            }
            let mut globs = Vec::new();
            for pattern in &raw_validator.paths {
                globs.push(
                    compile_glob(pattern.get_ref())
                        .map_err(|reason| error(Some(pattern.span()), format!("validator `{id}`: {reason}")))?,
                );
            }
            validators.push(Validator { id, line, globs, check });
        }
        let raw_limits = raw.limits.unwrap_or_default();
        let limits = compile_limits(&raw_limits, "[limits]").map_err(|(span, reason)| error(span, reason))?;
        let mut tool_limits = BTreeMap::new();
        for (tool, raw_tool) in &raw_limits.tools {
            if !known_tools.contains(&tool.get_ref().as_str()) {
                return Err(error(
                    Some(tool.span()),
                    format!("`[limits.tools.{}]` names an unknown tool; the tools are: {}", tool.get_ref().escape_default(), known_tools.join(", ")),
                ));
            }
            if !raw_tool.tools.is_empty() {
                return Err(error(Some(tool.span()), "limits for a tool cannot nest further `tools` tables".to_owned()));
            }
            let table = format!("[limits.tools.{}]", tool.get_ref());
            tool_limits.insert(tool.get_ref().clone(), compile_limits(raw_tool, &table).map_err(|(span, reason)| error(span, reason))?);
        }
        let mut pins = BTreeMap::new();
        for (tool, raw_plugin) in &raw.plugins {
            if !known_tools.contains(&tool.get_ref().as_str()) {
                return Err(error(
                    Some(tool.span()),
                    format!(
                        "`[plugins.{}]` pins a tool that is not loaded; the tools are: {}",
                        tool.get_ref().escape_default(),
                        known_tools.join(", ")
                    ),
                ));
            }
            let sha256 = raw_plugin.sha256.get_ref().to_ascii_lowercase();
            if sha256.len() != 64 || !sha256.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                return Err(error(
                    Some(raw_plugin.sha256.span()),
                    format!("`sha256` of `[plugins.{}]` must be 64 hex digits (`toolcell tools add` prints it)", tool.get_ref()),
                ));
            }
            pins.insert(
                tool.get_ref().clone(),
                Pin {
                    sha256,
                    line: line_of(text, raw_plugin.sha256.span().start),
                },
            );
        }
        Ok(Policy {
            file: file.to_owned(),
            roles,
            protected,
            read_before_write,
            validators,
            limits,
            tool_limits,
            pins,
        })
    }

    /// What happens when a session modifies an existing file it has not read.
    pub fn read_before_write(&self) -> ReadBeforeWrite {
        self.read_before_write
    }

    /// The limits of a call of `tool`: `[limits.tools.TOOL]` over `[limits]`.
    pub fn limits_for(&self, tool: &str) -> Limits {
        match self.tool_limits.get(tool) {
            Some(specific) => self.limits.overridden_by(*specific),
            None => self.limits,
        }
    }

    /// The SHA-256 pin of the component providing `tool`, if the policy pins it.
    pub fn pin(&self, tool: &str) -> Option<&Pin> {
        self.pins.get(tool)
    }

    /// The validators, in policy order.
    pub fn validators(&self) -> &[Validator] {
        &self.validators
    }

    /// The policy file's name.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The role named `name`.
    pub fn role(&self, name: &str) -> Option<&Role> {
        self.roles.get(name)
    }

    /// Every role, sorted by name.
    pub fn roles(&self) -> impl Iterator<Item = &Role> {
        self.roles.values()
    }

    /// Protect another workspace-relative path or glob (the host adds the policy file and its
    /// state directory when they sit inside the workspace).
    ///
    /// # Errors
    ///
    /// A reason, if `pattern` is not a valid glob.
    pub fn protect(&mut self, pattern: &str) -> Result<(), String> {
        let glob = compile_glob(pattern)?;
        self.protected.push(Protected {
            pattern: pattern.to_owned(),
            glob,
        });
        Ok(())
    }

    /// Decide one access by `role` to the canonical workspace-relative `path` (`.` for the root).
    pub fn decide(&self, role: &Role, access: Access, path: &str) -> Decision {
        self.verdict(role, access, path).to_decision()
    }

    /// [`decide`](Self::decide) without allocating: the verdict borrows the deciding rule from
    /// the policy. Hosts call this for every path a scan lists or opens.
    pub fn verdict<'a>(&'a self, role: &'a Role, access: Access, path: &str) -> Verdict<'a> {
        let protected = if access.is_modification() {
            self.protected.iter().find(|protected| protected.glob.is_match(path))
        } else {
            None
        };
        // Every (rule, glob) about this access whose glob matches the path, found in one pass.
        let index = &role.index[access.slot()];
        let decided = MATCHED.with_borrow_mut(|matched| {
            // The strongest effect wins; among rules of equal effect, the first.
            let mut verdict: Option<usize> = None;
            for &(rule_index, glob_index) in index.matching(path, matched) {
                let rule = &role.rules[rule_index];
                if protected.is_some_and(|protected| !names_explicitly(&rule.globs[glob_index], protected)) {
                    continue;
                }
                let stronger = match verdict {
                    None => true,
                    Some(best) => {
                        let best_rank = rank(role.rules[best].effect);
                        rank(rule.effect) > best_rank || (rank(rule.effect) == best_rank && rule_index < best)
                    }
                };
                if stronger {
                    verdict = Some(rule_index);
                }
            }
            verdict
        });
        match (decided.map(|rule_index| &role.rules[rule_index]), protected) {
            (Some(rule), _) => Verdict {
                effect: rule.effect,
                source: Source::Rule(rule),
            },
            (None, Some(protected)) => Verdict {
                effect: Effect::Deny,
                source: Source::Protected(protected),
            },
            (None, None) => Verdict {
                effect: Effect::Deny,
                source: Source::DefaultDeny,
            },
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
enum Source<'a> {
    Rule(&'a Rule),
    Protected(&'a Protected),
    DefaultDeny,
}

impl Verdict<'_> {
    /// Allow, ask or deny.
    pub fn effect(&self) -> Effect {
        self.effect
    }

    /// The decision, owning its rule's id.
    pub fn to_decision(&self) -> Decision {
        match self.source {
            Source::Rule(rule) => Decision {
                effect: self.effect,
                rule: rule.id.clone(),
                line: Some(rule.line),
            },
            Source::Protected(protected) => Decision {
                effect: self.effect,
                rule: format!("protected:{}", protected.pattern),
                line: None,
            },
            Source::DefaultDeny => Decision {
                effect: self.effect,
                rule: "default-deny".to_owned(),
                line: None,
            },
        }
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
}

fn rank(effect: Effect) -> u8 {
    match effect {
        Effect::Allow => 0,
        Effect::Ask => 1,
        Effect::Deny => 2,
    }
}

/// A rule's glob names a protected path explicitly when its literal prefix starts inside the
/// protected pattern's literal root: `.git/hooks/**` names `.git/**`; `**` and `*.toml` do not.
fn names_explicitly(glob: &PathGlob, protected: &Protected) -> bool {
    // `.git/hooks/**` and `.git/**` name `.git/**` (their literal part starts with `.git/`), as
    // does the literal `.git`; `.git*/**` (meant for `.github`) and `**` do not.
    let prefix = protected.glob.matcher.prefix.as_str();
    let root = prefix.trim_end_matches('/');
    let literal_prefix = glob.matcher.prefix.as_str();
    !root.is_empty() && (literal_prefix.starts_with(prefix) || (glob.literal && literal_prefix == root))
}

type SpannedError = (Option<std::ops::Range<usize>>, String);

fn compile_tools(role: &str, tools: &[Spanned<String>], known_tools: &[&str]) -> Result<ToolSet, SpannedError> {
    if tools.is_empty() {
        return Err((
            None,
            format!("role `{role}` lists no tools: give `tools = [\"read_file\", ...]`, or `[\"*\"]` for every tool"),
        ));
    }
    if tools.iter().any(|tool| tool.get_ref() == "*") {
        return Ok(ToolSet::All);
    }
    let mut names = Vec::new();
    for tool in tools {
        if !known_tools.contains(&tool.get_ref().as_str()) {
            return Err((
                Some(tool.span()),
                format!(
                    "role `{role}` lists the unknown tool `{}`; the tools are: {}",
                    tool.get_ref().escape_default(),
                    known_tools.join(", ")
                ),
            ));
        }
        names.push(tool.get_ref().clone());
    }
    Ok(ToolSet::Only(names))
}

fn compile_rule(id: String, line: usize, raw: &RawRule) -> Result<Rule, SpannedError> {
    let effect = match raw.effect.get_ref().as_str() {
        "allow" => Effect::Allow,
        "ask" => Effect::Ask,
        "deny" => Effect::Deny,
        other => {
            return Err((
                Some(raw.effect.span()),
                format!("rule `{id}`: unknown effect `{}`; use `allow`, `ask` or `deny`", other.escape_default()),
            ));
        }
    };
    if raw.access.is_empty() {
        return Err((None, format!("rule `{id}` on line {line} has an empty `access` list")));
    }
    let mut access = Vec::new();
    for name in &raw.access {
        let parsed = Access::from_name(name.get_ref()).ok_or_else(|| {
            (
                Some(name.span()),
                format!(
                    "rule `{id}`: unknown access `{}`; use `read`, `list`, `write` or `delete`",
                    name.get_ref().escape_default()
                ),
            )
        })?;
        access.push(parsed);
    }
    if raw.paths.is_empty() {
        return Err((None, format!("rule `{id}` on line {line} has an empty `paths` list")));
    }
    let mut globs = Vec::new();
    for pattern in &raw.paths {
        globs.push(
            compile_glob(pattern.get_ref()).map_err(|reason| (Some(pattern.span()), format!("rule `{id}`: {reason}")))?,
        );
    }
    Ok(Rule {
        id,
        line,
        access,
        globs,
        effect,
    })
}

fn compile_glob(pattern: &str) -> Result<PathGlob, String> {
    let quoted = format!("`{}`", pattern.escape_default());
    if pattern.is_empty() {
        return Err("an empty glob matches nothing: use `**` for every path".to_owned());
    }
    if pattern.starts_with('/') || pattern.split('/').any(|part| part == ".." || part == ".") {
        return Err(format!(
            "glob {quoted} can never match: rules match canonical workspace-relative paths such as `src/main.rs`, without a leading `/`, `.` or `..`"
        ));
    }
    let build = |pattern: &str| {
        globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map(|glob| PrefixedMatcher::new(glob.compile_matcher()))
            .map_err(|glob_error| format!("glob {quoted} is not valid: {}", glob_error.kind()))
    };
    let matcher = build(pattern)?;
    // `X/**` (and `X/**/**`, ...) also covers `X` itself.
    let mut prefix = pattern;
    while let Some(shorter) = prefix.strip_suffix("/**") {
        prefix = shorter;
    }
    let directory = if prefix != pattern && !prefix.is_empty() && prefix != "**" { Some(build(prefix)?) } else { None };
    let literal = matcher.prefix.len() == pattern.len();
    Ok(PathGlob {
        matcher,
        directory,
        literal,
        matches_everything: pattern == "**",
    })
}

/// `base/path` normalised lexically (`.` and empty components dropped, `..` applied) as a
/// workspace-relative path, `.` for the root; `None` if it is absolute or climbs above the root.
/// `base` is itself such a path. Symlinks are not resolved: the host does that against the real
/// workspace before asking [`Policy::decide`].
pub fn join_lexically(base: &str, path: &str) -> Option<String> {
    if path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = if base == "." { Vec::new() } else { base.split('/').collect() };
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => parts.push(name),
        }
    }
    Some(if parts.is_empty() { ".".to_owned() } else { parts.join("/") })
}

fn compile_limits(raw: &RawLimits, table: &str) -> Result<Limits, SpannedError> {
    let positive = |value: &Option<Spanned<i64>>, key: &str, max: i64| -> Result<Option<u64>, SpannedError> {
        match value {
            None => Ok(None),
            Some(value) if (1..=max).contains(value.get_ref()) => Ok(u64::try_from(*value.get_ref()).ok()),
            Some(value) => Err((
                Some(value.span()),
                format!("`{key}` in {table} must be between 1 and {max}, not {}", value.get_ref()),
            )),
        }
    };
    Ok(Limits {
        deadline: positive(&raw.deadline_ms, "deadline_ms", 24 * 3600 * 1000)?.map(std::time::Duration::from_millis),
        memory_bytes: positive(&raw.memory_mib, "memory_mib", 64 * 1024)?.and_then(|mib| usize::try_from(mib << 20).ok()),
        output_bytes: positive(&raw.output_kib, "output_kib", 1024 * 1024)?.and_then(|kib| usize::try_from(kib << 10).ok()),
        host_calls: positive(&raw.host_calls, "host_calls", 1_000_000_000)?,
        open_files: positive(&raw.open_files, "open_files", 65_536)?.and_then(|files| usize::try_from(files).ok()),
        audit_records: positive(&raw.audit_records, "audit_records", 1_000_000)?,
    })
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

#[cfg(test)]
mod tests;
