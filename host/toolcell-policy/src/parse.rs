//! Parsing a policy file: the TOML as written (with spans for error lines), validated and
//! compiled into a [`Policy`].

use toml::Spanned;

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPolicy {
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
    #[serde(default)]
    registry: Option<registry::RawRegistry>,
    #[serde(default)]
    network: Option<network_settings::RawNetworkSettings>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPlugin {
    pub(crate) sha256: Option<Spanned<String>>,
    /// Where the component came from (`oci://HOST/NAME:TAG@sha256:…`), for `tools update`;
    /// the `sha256` pin is what loads are checked against.
    pub(crate) source: Option<Spanned<String>>,
    #[serde(default)]
    stub_imports: Vec<Spanned<String>>,
}

/// Only the `[plugins]` tables of a policy, read before the tools are loaded.
#[derive(Deserialize)]
struct RawPluginsOnly {
    #[serde(default)]
    plugins: BTreeMap<Spanned<String>, RawPlugin>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
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
pub(crate) struct RawWrites {
    read_before_write: Option<Spanned<String>>,
    durability: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawValidator {
    id: Option<Spanned<String>>,
    paths: Vec<Spanned<String>>,
    check: Option<Spanned<String>>,
    tool: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRole {
    #[serde(default)]
    description: String,
    tools: Vec<Spanned<String>>,
    #[serde(default)]
    rules: Vec<Spanned<RawRule>>,
    #[serde(default)]
    may_spawn: Vec<Spanned<String>>,
    #[serde(default)]
    may_lock_for_chains: bool,
    #[serde(default)]
    network: Vec<Spanned<network::RawNetworkRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    id: Option<Spanned<String>>,
    access: Vec<Spanned<String>>,
    paths: Vec<Spanned<String>>,
    effect: Spanned<String>,
    tools: Option<Vec<Spanned<String>>>,
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
        let error = located(file, text);
        let raw: RawPolicy = toml::from_str(text).map_err(|parse_error| error(parse_error.span(), toml_message(text, &parse_error)))?;
        if *raw.version.get_ref() != 1 {
            return Err(error(
                Some(raw.version.span()),
                format!("unsupported policy version {}: this toolcell reads version 1", raw.version.get_ref()),
            ));
        }
        let mut protected = Vec::new();
        for pattern in BUILT_IN_PROTECTED {
            protected
                .push(Protected { pattern: (*pattern).to_owned(), glob: compile_glob(pattern).map_err(|reason| error(None, reason))? });
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
            if role_name.is_empty() || !role_name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-') {
                return Err(error(
                    Some(name.span()),
                    format!("role name `{}` must be lowercase letters, digits, `_` and `-`", role_name.escape_default()),
                ));
            }
            let tools = compile_tools(&role_name, &raw_role.tools, known_tools).map_err(|(span, reason)| error(span, reason))?;
            let mut rules = Vec::new();
            let mut scoped = Vec::new();
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
                        format!(
                            "rule id `{id}` is used twice (first on line {first}): ids name rules in audit records, so they must be unique"
                        ),
                    ));
                }
                let rule = compile_rule(id, line, raw_rule, known_tools).map_err(|(span, reason)| error(span, reason))?;
                // Rules that name tools or a task's paths are bound per call (`Policy::bind`).
                if rule.tools.is_some() || rule.templated { scoped.push(rule) } else { rules.push(rule) }
            }
            let index = Access::ALL.map(|access| AccessIndex::new(&rules, access));
            let index = match index {
                [Ok(read), Ok(list), Ok(write), Ok(delete)] => [read, list, write, delete],
                [read, list, write, delete] => {
                    let reason = [read, list, write, delete].into_iter().find_map(Result::err).unwrap_or_default();
                    return Err(error(Some(name.span()), format!("role `{role_name}`: {reason}")));
                }
            };
            let mut network_rules = Vec::new();
            for (index, raw_rule) in raw_role.network.iter().enumerate() {
                let line = line_of(text, raw_rule.span().start);
                let rule = network::compile_rule(&role_name, index, line, raw_rule.get_ref(), known_tools)
                    .map_err(|(span, reason)| error(span.or(Some(raw_rule.span())), reason))?;
                if let Some(first) = rule_ids.insert(rule.id.clone(), line) {
                    return Err(error(
                        Some(raw_rule.span()),
                        format!(
                            "rule id `{}` is used twice (first on line {first}): ids name rules in audit records, so they must be unique",
                            rule.id
                        ),
                    ));
                }
                network_rules.push(rule);
            }
            let may_spawn = raw_role.may_spawn.iter().map(|spawned| (spawned.get_ref().clone(), spawned.span())).collect();
            roles.insert(
                role_name.clone(),
                Arc::new(Role {
                    name: role_name,
                    description: raw_role.description,
                    tools,
                    rules,
                    scoped,
                    index,
                    may_spawn,
                    may_lock_for_chains: raw_role.may_lock_for_chains,
                    network: network::rules(network_rules),
                }),
            );
        }
        for role in roles.values() {
            for (spawned, span) in &role.may_spawn {
                if !roles.contains_key(spawned) {
                    return Err(error(
                        Some(span.clone()),
                        format!(
                            "role `{}` may spawn the unknown role `{}`; the roles are: {}",
                            role.name,
                            spawned.escape_default(),
                            roles.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
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
        let durability = match raw.writes.as_ref().and_then(|writes| writes.durability.as_ref()) {
            None => Durability::default(),
            Some(mode) => match mode.get_ref().as_str() {
                "full" => Durability::Full,
                "atomic" => Durability::Atomic,
                other => {
                    return Err(error(
                        Some(mode.span()),
                        format!("unknown `durability` mode `{}`; use `full` or `atomic`", other.escape_default()),
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
                            format!(
                                "validator `{id}`: unknown check `{}`; use `json` or `toml`, or `tool = \"NAME\"` for a validator component",
                                other.escape_default()
                            ),
                        ));
                    }
                },
                (None, Some(tool)) => {
                    if !known_tools.contains(&tool.get_ref().as_str()) {
                        return Err(error(
                            Some(tool.span()),
                            format!(
                                "validator `{id}` names the unknown tool `{}`; the tools are: {}; {NOT_INSTALLED_HINT}",
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
                    compile_glob(pattern.get_ref()).map_err(|reason| error(Some(pattern.span()), format!("validator `{id}`: {reason}")))?,
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
                    format!(
                        "`[limits.tools.{}]` names an unknown tool; the tools are: {}",
                        tool.get_ref().escape_default(),
                        known_tools.join(", ")
                    ),
                ));
            }
            if !raw_tool.tools.is_empty() {
                return Err(error(Some(tool.span()), "limits for a tool cannot nest further `tools` tables".to_owned()));
            }
            let table = format!("[limits.tools.{}]", tool.get_ref());
            tool_limits.insert(tool.get_ref().clone(), compile_limits(raw_tool, &table).map_err(|(span, reason)| error(span, reason))?);
        }
        // Read by the registry commands; a mistake in it still fails the start, with its line.
        if let Some(raw_registry) = &raw.registry {
            raw_registry.compile(file, text)?;
        }
        // Read by the runtime's network setup; checked here so a mistake fails the start.
        if let Some(raw_network) = &raw.network {
            raw_network.compile(file, text)?;
        }
        let mut pins = BTreeMap::new();
        let mut stubs = BTreeMap::new();
        for (tool, raw_plugin) in &raw.plugins {
            if !known_tools.contains(&tool.get_ref().as_str()) {
                return Err(error(
                    Some(tool.span()),
                    format!(
                        "`[plugins.{}]` pins a tool that is not loaded; the tools are: {}; {NOT_INSTALLED_HINT}",
                        tool.get_ref().escape_default(),
                        known_tools.join(", ")
                    ),
                ));
            }
            let patterns = stub_patterns(tool.get_ref(), raw_plugin).map_err(|(span, reason)| error(Some(span), reason))?;
            if !patterns.is_empty() {
                stubs.insert(tool.get_ref().clone(), patterns);
            }
            if let Some(source) = &raw_plugin.source {
                let digest = source.get_ref().rsplit_once("@sha256:").map(|(_, hex)| hex).unwrap_or_default();
                let pins_a_digest = digest.len() == 64 && digest.bytes().all(|byte| byte.is_ascii_hexdigit());
                if !source.get_ref().starts_with("oci://") || !pins_a_digest || raw_plugin.sha256.is_none() {
                    return Err(error(
                        Some(source.span()),
                        format!(
                            "`source` of `[plugins.{}]` must be a registry reference pinned to its manifest digest (`oci://HOST/NAME:TAG@sha256:…`) beside a `sha256`: write the two lines `toolcell tools add oci://…` printed",
                            tool.get_ref()
                        ),
                    ));
                }
            }
            let Some(raw_sha256) = &raw_plugin.sha256 else {
                continue;
            };
            let sha256 = raw_sha256.get_ref().to_ascii_lowercase();
            if sha256.len() != 64 || !sha256.bytes().all(|byte| byte.is_ascii_hexdigit()) {
                return Err(error(
                    Some(raw_sha256.span()),
                    format!("`sha256` of `[plugins.{}]` must be 64 hex digits (`toolcell tools add` prints it)", tool.get_ref()),
                ));
            }
            pins.insert(tool.get_ref().clone(), Pin { sha256, line: line_of(text, raw_sha256.span().start) });
        }
        let rule_ids = rule_ids.into_keys().collect();
        Ok(Policy {
            file: file.to_owned(),
            roles,
            protected,
            read_before_write,
            durability,
            validators,
            rule_ids,
            limits,
            tool_limits,
            pins,
            stubs,
            bound: change::BoundCache::default(),
        })
    }
}

/// What to do about a tool the policy names that is not loaded: it may be a plugin not installed.
const NOT_INSTALLED_HINT: &str = "if it is a plugin, install it with `toolcell tools add FILE`, or pass the `--plugin-dir` that holds it";

pub(crate) type SpannedError = (Option<std::ops::Range<usize>>, String);

pub(crate) fn compile_tools(role: &str, tools: &[Spanned<String>], known_tools: &[&str]) -> Result<ToolSet, SpannedError> {
    if tools.is_empty() {
        return Err((None, format!("role `{role}` lists no tools: give `tools = [\"read_file\", ...]`, or `[\"*\"]` for every tool")));
    }
    if tools.iter().any(|tool| tool.get_ref() == "*") {
        return Ok(ToolSet::All);
    }
    Ok(ToolSet::Only(tool_names(tools, known_tools, &format!("role `{role}` lists"))?))
}

/// The canonical names of `tools` (`task:start` is `task_start`), each a loaded tool; else the
/// first unknown one, its span, and `who` (`role \`r\` lists`) naming where it was written.
pub(crate) fn tool_names(tools: &[Spanned<String>], known_tools: &[&str], who: &str) -> Result<Vec<String>, SpannedError> {
    let mut names = Vec::new();
    for tool in tools {
        let name = canonical_tool_name(tool.get_ref());
        if !known_tools.contains(&name.as_ref()) {
            return Err((
                Some(tool.span()),
                format!(
                    "{who} the unknown tool `{}`; the tools are: {}; {NOT_INSTALLED_HINT}",
                    tool.get_ref().escape_default(),
                    known_tools.join(", ")
                ),
            ));
        }
        names.push(name.into_owned());
    }
    Ok(names)
}

pub(crate) fn compile_rule(id: String, line: usize, raw: &RawRule, known_tools: &[&str]) -> Result<Rule, SpannedError> {
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
                format!("rule `{id}`: unknown access `{}`; use `read`, `list`, `write` or `delete`", name.get_ref().escape_default()),
            )
        })?;
        access.push(parsed);
    }
    if raw.paths.is_empty() {
        return Err((None, format!("rule `{id}` on line {line} has an empty `paths` list")));
    }
    let tools = match &raw.tools {
        None => None,
        Some(tools) if tools.is_empty() => {
            return Err((
                None,
                format!("rule `{id}` on line {line} has an empty `tools` list: leave `tools` out for a rule on every tool"),
            ));
        }
        Some(tools) => Some(tool_names(tools, known_tools, &format!("rule `{id}` names"))?),
    };
    let mut globs = Vec::new();
    let mut templated = false;
    for pattern in &raw.paths {
        let text = pattern.get_ref();
        if let Some(unknown) = unknown_variable(text) {
            return Err((
                Some(pattern.span()),
                format!("rule `{id}`: `{{{unknown}}}` is not a variable; a path may use `{{chain}}` and `{{task}}` (the session's task)"),
            ));
        }
        templated |= is_templated(text);
        // A templated glob is compiled here with sample values to check it; `Policy::bind`
        // compiles it again with the session's task.
        let sample = substitute(text, &TaskBinding::sample());
        globs.push(compile_glob(&sample).map_err(|reason| (Some(pattern.span()), format!("rule `{id}`: {reason}")))?);
    }
    let patterns = raw.paths.iter().map(|pattern| pattern.get_ref().clone()).collect();
    Ok(Rule { id, line, access, globs, effect, tools, templated, patterns, scoped: false })
}

pub(crate) fn compile_limits(raw: &RawLimits, table: &str) -> Result<Limits, SpannedError> {
    let positive = |value: &Option<Spanned<i64>>, key: &str, max: i64| -> Result<Option<u64>, SpannedError> {
        match value {
            None => Ok(None),
            Some(value) if (1..=max).contains(value.get_ref()) => Ok(u64::try_from(*value.get_ref()).ok()),
            Some(value) => Err((Some(value.span()), format!("`{key}` in {table} must be between 1 and {max}, not {}", value.get_ref()))),
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

/// The `stub_imports` of every `[plugins.NAME]` table of the policy `text`, by tool name, read
/// before the tools are loaded (linking needs them; the rest of the policy needs the tools'
/// names). [`Policy::parse`] checks them again, with the rest.
///
/// # Errors
///
/// [`PolicyError`] with the line, for TOML that does not parse or a malformed pattern; the
/// rest of the policy is not checked here.
pub fn stub_imports(file: &str, text: &str) -> Result<BTreeMap<String, Vec<String>>, PolicyError> {
    let error = located(file, text);
    // Everything but `[plugins]` is ignored here.
    let raw: RawPluginsOnly = toml::from_str(text).map_err(|parse_error| error(parse_error.span(), toml_message(text, &parse_error)))?;
    let mut stubs = BTreeMap::new();
    for (tool, raw_plugin) in &raw.plugins {
        let patterns = stub_patterns(tool.get_ref(), raw_plugin).map_err(|(span, reason)| error(Some(span), reason))?;
        if !patterns.is_empty() {
            stubs.insert(tool.get_ref().clone(), patterns);
        }
    }
    Ok(stubs)
}

/// The checked `stub_imports` patterns of `[plugins.TOOL]`: `namespace:package/interface` or
/// `namespace:package/*`, without a version, never toolcell's own interfaces.
fn stub_patterns(tool: &str, raw_plugin: &RawPlugin) -> Result<Vec<String>, (std::ops::Range<usize>, String)> {
    let mut patterns = Vec::new();
    for pattern in &raw_plugin.stub_imports {
        let text = pattern.get_ref();
        let well_formed = text.split_once('/').is_some_and(|(package, interface)| {
            let name_ok = |part: &str| {
                !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
            };
            package.split_once(':').is_some_and(|(namespace, name)| name_ok(namespace) && name_ok(name))
                && (interface == "*" || name_ok(interface))
        });
        if !well_formed {
            return Err((
                pattern.span(),
                format!(
                    "`stub_imports` of `[plugins.{tool}]` lists `{}`, which is not an interface: write `namespace:package/interface` or `namespace:package/*`, without a version (for example `wasi:sockets/*`)",
                    text.escape_default()
                ),
            ));
        }
        if text.starts_with("toolcell:") {
            return Err((pattern.span(), format!("`stub_imports` of `[plugins.{tool}]` cannot stub toolcell's own interfaces (`{text}`)")));
        }
        patterns.push(text.clone());
    }
    Ok(patterns)
}

/// Errors of the policy `text` (named `file`), at the line of a span.
pub(crate) fn located<'a>(file: &'a str, text: &'a str) -> impl Fn(Option<std::ops::Range<usize>>, String) -> PolicyError + 'a {
    move |span, reason| PolicyError { file: file.to_owned(), line: span.map(|span| line_of(text, span.start)), reason }
}

pub(crate) fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// What a TOML error says, naming the key where the parser only says "duplicate key".
pub(crate) fn toml_message(text: &str, parse_error: &toml::de::Error) -> String {
    let message = parse_error.message().trim();
    match parse_error.span().and_then(|span| text.get(span)) {
        Some(key) if message == "duplicate key" => {
            format!("duplicate key `{}`: a key may appear once in a table; remove or merge the second", key.trim().escape_default())
        }
        _ => message.to_owned(),
    }
}
