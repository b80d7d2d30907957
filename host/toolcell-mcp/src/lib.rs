//! toolcell as an MCP server, on [rmcp](https://docs.rs/rmcp), the official Rust SDK.
//!
//! [`McpServer`] serves one [`Session`]: `tools/list` returns only the tools the session's role
//! may call (name, title, description, input JSON Schema, `readOnlyHint` / `destructiveHint` /
//! `idempotentHint` annotations), and `tools/call` runs the call through the governed host and
//! returns the text as content plus the structured result as `structuredContent`. A tool error or
//! a refusal is a result with `isError: true` and the message, never a protocol error. Calls run
//! on tokio's blocking pool, so several can be in flight at once. Nothing is written to stdout
//! but protocol messages.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let host = toolcell_host::HostBuilder::new("/path/to/repo").build()?;
//! let server = toolcell_mcp::McpServer::new(host.session("impl", "s-1")?);
//! toolcell_mcp::serve_stdio(server).await?;
//! # Ok(())
//! # }
//! ```

pub mod client;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest, CustomResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use toolcell_host::{Session, schemas};

/// An MCP server for one session.
pub struct McpServer {
    session: Session,
    tools: Vec<Tool>,
}

impl McpServer {
    /// Serve the tools `session`'s role may call.
    pub fn new(session: Session) -> Self {
        let tools = session
            .tools()
            .into_iter()
            // The MCP shape comes from the same renderer as `toolcell schema --format mcp`.
            .filter_map(|tool| serde_json::from_value(schemas::mcp_tool(tool)).ok())
            .collect();
        McpServer { session, tools }
    }

    /// The tools served, as MCP describes them.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Run one call and shape its result for MCP.
    async fn run(&self, name: String, arguments: Value) -> CallToolResult {
        let session = self.session.clone();
        let args = arguments.to_string();
        let tool = name.clone();
        let joined = tokio::task::spawn_blocking(move || session.call(&tool, &args)).await;
        match joined {
            Ok(Ok(call)) => match call.output {
                Ok(output) => {
                    let mut result = CallToolResult::success(vec![ContentBlock::text(output.text)]);
                    result.structured_content = output.structured;
                    result
                }
                Err(error) => {
                    let mut result = CallToolResult::error(vec![ContentBlock::text(error.to_string())]);
                    result.structured_content = Some(json!({
                        "error": { "kind": error.kind.as_str(), "message": error.message },
                        "call_id": call.call_id,
                    }));
                    result
                }
            },
            Ok(Err(host_error)) => {
                let message = match host_error {
                    toolcell_host::Error::UnknownTool { .. } => host_error.to_string(),
                    other => {
                        // Details (which may name host paths) go to the operator only.
                        let _ = writeln_stderr(&format!("toolcell mcp: `{name}` failed in the host: {other}"));
                        format!("the host could not run `{name}`; the operator's log has the details")
                    }
                };
                CallToolResult::error(vec![ContentBlock::text(message)])
            }
            Err(_) => CallToolResult::error(vec![ContentBlock::text(format!(
                "the host failed while running `{name}`; the operator's log has the details"
            ))]),
        }
    }
}

/// What is wrong with the parameters of a `tools/call` that rmcp could not read.
fn invalid_call_params(params: Option<&Value>) -> String {
    let problem = match params {
        None => "there are no params: give `{\"name\": TOOL, \"arguments\": {...}}`".to_owned(),
        Some(Value::Object(params)) => match (params.get("name"), params.get("arguments")) {
            (None, _) => "`name` is missing: name the tool to call".to_owned(),
            (Some(name), _) if !name.is_string() => format!("`name` is {}, not a string: name the tool to call", kind(name)),
            (_, Some(arguments)) if !arguments.is_object() && !arguments.is_null() => {
                format!("`arguments` is {}: give the tool's arguments as an object, e.g. {{\"path\": \"src/main.rs\"}}", kind(arguments))
            }
            _ => "they do not match the `tools/call` request".to_owned(),
        },
        Some(other) => format!("params are {}: give an object `{{\"name\": TOOL, \"arguments\": {{...}}}}`", kind(other)),
    };
    format!("invalid params for `tools/call`: {problem}")
}

/// A JSON value's kind, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn writeln_stderr(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    writeln!(std::io::stderr(), "{text}")
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("toolcell", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!(
                "File tools over one workspace, for role `{}`. Paths are relative to the workspace root. \
                 Every filesystem access is checked against the policy; a refusal says which rule refused it.",
                self.session.role()
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    async fn call_tool(&self, request: CallToolRequestParams, _context: RequestContext<RoleServer>) -> Result<CallToolResponse, McpError> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        Ok(self.run(request.name.into_owned(), arguments).await.into())
    }

    /// rmcp hands over a request whose method it knows but whose parameters it could not
    /// read as an unknown one: for the methods this server serves that is invalid params
    /// (-32602), saying what is wrong, not "method not found".
    async fn on_custom_request(&self, request: CustomRequest, _context: RequestContext<RoleServer>) -> Result<CustomResult, McpError> {
        match request.method.as_str() {
            "tools/call" => Err(McpError::invalid_params(invalid_call_params(request.params.as_ref()), None)),
            "tools/list" => Err(McpError::invalid_params("invalid params for `tools/list`: give an object (`cursor` is optional)", None)),
            _ => Err(McpError::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, request.method, None)),
        }
    }
}

/// The MCP connection failed (initialization, or the transport).
#[derive(Debug, thiserror::Error)]
#[error("the MCP connection failed: {reason}")]
pub struct ServeError {
    /// What rmcp reported.
    pub reason: String,
}

/// Serve `server` over stdin and stdout until the client closes stdin.
///
/// # Errors
///
/// [`ServeError`] if the client does not complete initialization or the transport fails.
pub async fn serve_stdio(server: McpServer) -> Result<(), ServeError> {
    let running = server.serve(rmcp::transport::stdio_pipes()).await.map_err(|error| ServeError { reason: error.to_string() })?;
    running.waiting().await.map_err(|error| ServeError { reason: error.to_string() })?;
    Ok(())
}
