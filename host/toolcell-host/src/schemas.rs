//! Tool definitions in the shape each consumer expects, from one source: the tools' own
//! `describe()`.
//!
//! - [`Format::Mcp`]: the result of MCP `tools/list`: `{"tools": [{name, title, description,
//!   inputSchema, annotations: {title, readOnlyHint, destructiveHint, idempotentHint,
//!   openWorldHint}}]}`. The MCP server serves exactly this.
//! - [`Format::Anthropic`]: the Messages API `tools` array: `[{name, description,
//!   input_schema}]`.
//! - [`Format::OpenAi`]: the Chat Completions `tools` array: `[{type: "function", function:
//!   {name, description, parameters}}]`. Not `strict`: optional arguments stay optional.

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
                    json!({
                        "name": tool.name.as_str(),
                        "description": tool.description,
                        "input_schema": tool.input_schema,
                    })
                })
                .collect(),
        ),
        Format::OpenAi => Value::Array(
            tools
                .map(|tool| {
                    json!({
                        "type": "function",
                        "function": {
                            "name": tool.name.as_str(),
                            "description": tool.description,
                            "parameters": tool.input_schema,
                        }
                    })
                })
                .collect(),
        ),
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
