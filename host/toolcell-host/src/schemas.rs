//! Tool definitions in the shape each consumer expects, from one source: the tools' own
//! `describe()`.
//!
//! - [`Format::Mcp`]: the result of MCP `tools/list`: `{"tools": [{name, title, description,
//!   inputSchema, annotations: {title, readOnlyHint, destructiveHint, idempotentHint,
//!   openWorldHint}}]}`. The MCP server serves exactly this.
//! - [`Format::Anthropic`]: the Messages API `tools` array: `[{name, description,
//!   input_schema}]`, and Anthropic's own text editor tool, when the role may call it, as
//!   `{type: "text_editor_20250728", name: "str_replace_based_edit_tool"}`.
//! - [`Format::OpenAi`]: the Chat Completions `tools` array: `[{type: "function", function:
//!   {name, description, parameters}}]`. Not `strict`: optional arguments stay optional.
//! - [`Format::OpenAiStrict`]: the same with `strict: true` and each schema rewritten by
//!   [`openai_strict`] for OpenAI's strict mode. The host accepts the `null`s such a model sends
//!   for the arguments it leaves out, and still checks every call against the tool's own schema.

use serde_json::{Value, json};
use toolcell_types::ToolInfo;

/// A provider's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// MCP `tools/list` result.
    Mcp,
    /// Anthropic Messages API `tools`.
    Anthropic,
    /// OpenAI Chat Completions `tools`.
    OpenAi,
    /// OpenAI Chat Completions `tools` in strict mode.
    OpenAiStrict,
}

impl Format {
    /// Parse `mcp`, `anthropic` or `openai`.
    pub fn from_name(name: &str) -> Option<Format> {
        match name {
            "mcp" => Some(Format::Mcp),
            "anthropic" => Some(Format::Anthropic),
            "openai" => Some(Format::OpenAi),
            _ => None,
        }
    }
}

/// Render `tools` in `format`.
pub fn render<'a>(format: Format, tools: impl IntoIterator<Item = &'a ToolInfo>) -> Value {
    let tools = tools.into_iter();
    match format {
        Format::Mcp => json!({ "tools": tools.map(mcp_tool).collect::<Vec<_>>() }),
        Format::Anthropic => Value::Array(
            tools
                .map(|tool| {
                    // The text editor is Anthropic's own tool: declared by its type, the model
                    // knows its schema.
                    if tool.name.as_str() == toolcell_runtime::TEXT_EDITOR {
                        return json!({ "type": ANTHROPIC_TEXT_EDITOR_TYPE, "name": toolcell_runtime::TEXT_EDITOR });
                    }
                    json!({
                        "name": tool.name.as_str(),
                        "description": tool.description,
                        "input_schema": tool.input_schema,
                    })
                })
                .collect(),
        ),
        Format::OpenAi | Format::OpenAiStrict => Value::Array(
            tools
                .map(|tool| {
                    let mut function = json!({
                        "name": tool.name.as_str(),
                        "description": tool.description,
                        "parameters": tool.input_schema,
                    });
                    if format == Format::OpenAiStrict {
                        function["parameters"] = openai_strict(&tool.input_schema);
                        function["strict"] = json!(true);
                    }
                    json!({ "type": "function", "function": function })
                })
                .collect(),
        ),
    }
}

/// The version of Anthropic's text editor tool type that `str_replace_based_edit_tool` answers
/// (Claude 4 models; its commands are `view`, `create`, `str_replace` and `insert`, and the
/// adapter also answers the older versions' `undo_edit`).
pub const ANTHROPIC_TEXT_EDITOR_TYPE: &str = "text_editor_20250728";

/// The keywords OpenAI's strict mode accepts (its Structured Outputs guide); every other one is
/// left out of [`openai_strict`]'s result, its constraint said in the description instead.
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "description",
    "title",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "$ref",
    "$defs",
    "pattern",
    "format",
    "multipleOf",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
];

/// `schema` rewritten for OpenAI's strict mode: every object lists all its properties as
/// required and has `additionalProperties: false`; a property that was optional may be `null`
/// (the host takes `null` as left out); `oneOf` becomes `anyOf`; keywords strict mode does not
/// accept (`minLength`, `maxLength`, `dependentRequired`, ...) are dropped, and what they asked
/// is added to the description, since the host still enforces the original schema.
pub fn openai_strict(schema: &Value) -> Value {
    let Value::Object(fields) = schema else {
        return schema.clone();
    };
    let mut strict = serde_json::Map::new();
    let mut dropped = Vec::new();
    for (keyword, value) in fields {
        let keyword = if keyword == "oneOf" { "anyOf" } else { keyword.as_str() };
        match keyword {
            "properties" | "$defs" => {
                let rewritten =
                    value.as_object().map(|map| map.iter().map(|(name, property)| (name.clone(), openai_strict(property))).collect());
                strict.insert(keyword.to_owned(), rewritten.map_or_else(|| value.clone(), Value::Object));
            }
            "items" => {
                strict.insert(keyword.to_owned(), openai_strict(value));
            }
            "anyOf" => {
                let variants = value.as_array().map(|variants| variants.iter().map(openai_strict).collect());
                strict.insert(keyword.to_owned(), variants.map_or_else(|| value.clone(), Value::Array));
            }
            keyword if STRICT_KEYWORDS.contains(&keyword) => {
                strict.insert(keyword.to_owned(), value.clone());
            }
            keyword => dropped.push(format!("{keyword}: {value}")),
        }
    }
    if let Some(Value::Object(properties)) = strict.get_mut("properties") {
        let required: Vec<&str> = fields
            .get("required")
            .and_then(Value::as_array)
            .map(|required| required.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, property) in properties.iter_mut() {
            if !required.contains(&name.as_str()) {
                make_nullable(property);
            }
        }
        let all: Vec<Value> = properties.keys().map(|name| Value::String(name.clone())).collect();
        strict.insert("required".to_owned(), Value::Array(all));
    }
    if strict.get("type") == Some(&json!("object")) {
        strict.insert("additionalProperties".to_owned(), Value::Bool(false));
        strict.entry("properties").or_insert_with(|| json!({}));
        strict.entry("required").or_insert_with(|| json!([]));
    }
    if !dropped.is_empty() {
        let note = format!("(The host also checks: {}.)", dropped.join("; "));
        let description = match strict.get("description").and_then(Value::as_str) {
            Some(description) => format!("{description} {note}"),
            None => note,
        };
        strict.insert("description".to_owned(), Value::String(description));
    }
    Value::Object(strict)
}

/// Let `schema` also be `null`: with `"type"`, by adding `"null"` to it (and to an `enum`);
/// without, as a variant of its `anyOf`.
fn make_nullable(schema: &mut Value) {
    let Value::Object(fields) = schema else {
        return;
    };
    match fields.get_mut("type") {
        Some(Value::String(kind)) => {
            let kind = std::mem::take(kind);
            fields.insert("type".to_owned(), json!([kind, "null"]));
        }
        Some(Value::Array(kinds)) if !kinds.contains(&json!("null")) => kinds.push(json!("null")),
        Some(_) => {}
        None => match fields.get_mut("anyOf") {
            Some(Value::Array(variants)) => variants.push(json!({"type": "null"})),
            _ => {
                let original = Value::Object(std::mem::take(fields));
                fields.insert("anyOf".to_owned(), json!([original, {"type": "null"}]));
                return;
            }
        },
    }
    if let Some(Value::Array(values)) = fields.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
}

/// One tool as MCP describes it.
pub fn mcp_tool(tool: &ToolInfo) -> Value {
    let mut described = json!({
        "name": tool.name.as_str(),
        "title": tool.title,
        "description": tool.description,
        "inputSchema": tool.input_schema,
        "annotations": {
            "title": tool.title,
            "readOnlyHint": tool.annotations.read_only,
            "destructiveHint": tool.annotations.destructive,
            "idempotentHint": tool.annotations.idempotent,
            // Tools touch only the workspace, never the outside world.
            "openWorldHint": false,
        }
    });
    if let Some(output_schema) = &tool.output_schema {
        described["outputSchema"] = output_schema.clone();
    }
    described
}
