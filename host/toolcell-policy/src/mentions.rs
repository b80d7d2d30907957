//! What a policy says about tools by name, read before the tools are loaded: whether a plugin
//! that cannot be loaded is one the policy needs (then starting fails, naming it) or one it
//! never uses (then it is skipped with a warning), and where a plugin's pin is written.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use crate::PolicyError;
use crate::bind::canonical_tool_name;
use crate::parse::{RawPlugin, located, toml_message};

/// Only what names tools; every other key is ignored here ([`Policy::parse`](crate::Policy::parse)
/// checks the whole policy once the tools are loaded).
#[derive(Deserialize)]
struct RawMentions {
    #[serde(default)]
    roles: BTreeMap<String, RawRoleTools>,
    #[serde(default)]
    plugins: BTreeMap<String, toml::Value>,
    #[serde(default)]
    limits: Option<RawLimitTools>,
    #[serde(default)]
    validators: Vec<RawValidatorTool>,
}

#[derive(Deserialize)]
struct RawRoleTools {
    #[serde(default)]
    tools: Vec<String>,
}

#[derive(Deserialize)]
struct RawLimitTools {
    #[serde(default)]
    tools: BTreeMap<String, toml::Value>,
}

#[derive(Deserialize)]
struct RawValidatorTool {
    tool: Option<String>,
}

/// Only the `[plugins]` tables, with spans.
#[derive(Deserialize)]
struct RawPinsOnly {
    #[serde(default)]
    plugins: BTreeMap<String, RawPlugin>,
}

/// The tools a policy names (roles' `tools`, validators, `[plugins.NAME]`,
/// `[limits.tools.NAME]`), and the roles that list every tool (`"*"`).
#[derive(Debug, Default, Clone)]
pub struct ToolMentions {
    /// The first place naming each tool, by canonical name.
    named: BTreeMap<String, String>,
    /// A role whose `tools` is `["*"]`.
    every_tool: Option<String>,
}

impl ToolMentions {
    /// Read the tool names of the policy `text` (named `file` in errors).
    ///
    /// # Errors
    ///
    /// [`PolicyError`] with the line, for TOML that does not parse.
    pub fn read(file: &str, text: &str) -> Result<ToolMentions, PolicyError> {
        let error = located(file, text);
        let raw: RawMentions = toml::from_str(text).map_err(|parse_error| error(parse_error.span(), toml_message(text, &parse_error)))?;
        let mut mentions = ToolMentions::default();
        let mut name = |tool: &str, place: String| {
            mentions.named.entry(canonical_tool_name(tool).into_owned()).or_insert(place);
        };
        for (role, raw_role) in &raw.roles {
            for tool in &raw_role.tools {
                if tool == "*" {
                    mentions.every_tool.get_or_insert_with(|| role.clone());
                } else {
                    name(tool, format!("role `{role}` lists it"));
                }
            }
        }
        for tool in raw.validators.iter().filter_map(|validator| validator.tool.as_ref()) {
            name(tool, "a validator runs it".to_owned());
        }
        for tool in raw.plugins.keys() {
            name(tool, format!("the policy has a `[plugins.{tool}]` table"));
        }
        for tool in raw.limits.iter().flat_map(|limits| limits.tools.keys()) {
            name(tool, format!("the policy has a `[limits.tools.{tool}]` table"));
        }
        Ok(mentions)
    }

    /// Why the policy needs `tool` (`role \`impl\` lists it`), or `None` if no role can call
    /// it and nothing configures it.
    pub fn why_needed(&self, tool: &str) -> Option<String> {
        if let Some(place) = self.named.get(canonical_tool_name(tool).as_ref()) {
            return Some(place.clone());
        }
        self.every_tool.as_ref().map(|role| format!("role `{role}` lists every tool (`*`)"))
    }
}

/// Where the policy `text` writes the pin of `tool` (`[plugins.TOOL] sha256 = "..."`): the
/// byte range of the quoted value, to replace with another pin.
///
/// # Errors
///
/// [`PolicyError`] with the line, for TOML that does not parse.
pub fn pin_span(file: &str, text: &str, tool: &str) -> Result<Option<std::ops::Range<usize>>, PolicyError> {
    let error = located(file, text);
    let raw: RawPinsOnly = toml::from_str(text).map_err(|parse_error| error(parse_error.span(), toml_message(text, &parse_error)))?;
    Ok(raw.plugins.get(tool).and_then(|plugin| plugin.sha256.as_ref()).map(Spanned::span))
}

/// The span of the `source` of `[plugins.TOOL]` in the policy `text` (its quoted value), to
/// rewrite it in place beside its pin, and its value.
///
/// # Errors
///
/// [`PolicyError`] with the line, for TOML that does not parse.
pub fn source_span(file: &str, text: &str, tool: &str) -> Result<Option<(std::ops::Range<usize>, String)>, PolicyError> {
    let error = located(file, text);
    let raw: RawPinsOnly = toml::from_str(text).map_err(|parse_error| error(parse_error.span(), toml_message(text, &parse_error)))?;
    Ok(raw.plugins.get(tool).and_then(|plugin| plugin.source.as_ref()).map(|source| (source.span(), source.get_ref().clone())))
}

/// The `source` of every `[plugins.NAME]` table that has one, by tool name.
///
/// # Errors
///
/// [`PolicyError`] with the line, for TOML that does not parse.
pub fn plugin_sources(file: &str, text: &str) -> Result<BTreeMap<String, String>, PolicyError> {
    let error = located(file, text);
    let raw: RawPinsOnly = toml::from_str(text).map_err(|parse_error| error(parse_error.span(), toml_message(text, &parse_error)))?;
    Ok(raw.plugins.into_iter().filter_map(|(tool, plugin)| plugin.source.map(|source| (tool, source.into_inner()))).collect())
}

/// What a `[plugins.NAME]` table pins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginPin {
    /// `sha256`: the component's SHA-256 (hex).
    pub sha256: Option<String>,
    /// `source`: the registry reference it came from.
    pub source: Option<String>,
}

/// The pins of every `[plugins.NAME]` table, by tool name.
///
/// # Errors
///
/// [`PolicyError`] with the line, for TOML that does not parse.
pub fn plugin_pins(file: &str, text: &str) -> Result<BTreeMap<String, PluginPin>, PolicyError> {
    let error = located(file, text);
    let raw: RawPinsOnly = toml::from_str(text).map_err(|parse_error| error(parse_error.span(), toml_message(text, &parse_error)))?;
    Ok(raw
        .plugins
        .into_iter()
        .map(|(tool, plugin)| {
            (tool, PluginPin { sha256: plugin.sha256.map(Spanned::into_inner), source: plugin.source.map(Spanned::into_inner) })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_is_needed_where_the_policy_names_it() {
        let text = "version = 1\n[plugins.pinned]\nsha256 = \"ab\"\n[limits.tools.limited]\ndeadline_ms = 5\n[[validators]]\npaths = [\"*\"]\ntool = \"lint\"\n[roles.r]\ntools = [\"read_file\", \"task:start\"]\n";
        let mentions = ToolMentions::read("p.toml", text).expect("reads");
        for (tool, why) in [
            ("read_file", Some("role `r` lists it")),
            ("task_start", Some("role `r` lists it")),
            ("lint", Some("a validator runs it")),
            ("pinned", Some("the policy has a `[plugins.pinned]` table")),
            ("limited", Some("the policy has a `[limits.tools.limited]` table")),
            ("line_count", None),
        ] {
            assert_eq!(mentions.why_needed(tool).as_deref(), why, "{tool}");
        }
        let every = ToolMentions::read("p.toml", "[roles.all]\ntools = [\"*\"]\n").expect("reads");
        assert_eq!(every.why_needed("line_count").as_deref(), Some("role `all` lists every tool (`*`)"));
        let span = pin_span("p.toml", text, "pinned").expect("reads").expect("a pin");
        assert_eq!(&text[span], "\"ab\"");
        assert_eq!(pin_span("p.toml", text, "limited").expect("reads"), None);
        let sourced = "[plugins.echo]\nsha256 = \"ab\"\nsource = \"oci://localhost:5000/echo:1\"\n";
        let (span, source) = source_span("p.toml", sourced, "echo").expect("reads").expect("a source");
        assert_eq!((&sourced[span], source.as_str()), ("\"oci://localhost:5000/echo:1\"", "oci://localhost:5000/echo:1"));
        assert_eq!(source_span("p.toml", text, "pinned").expect("reads"), None);
        let sources = plugin_sources("p.toml", sourced).expect("reads");
        assert_eq!(sources.get("echo").map(String::as_str), Some("oci://localhost:5000/echo:1"));
    }
}
