//! toolcell as an MCP server, on [rmcp](https://docs.rs/rmcp), the official Rust SDK.
//!
//! [`McpServer`] serves one [`Session`]: `tools/list` returns only the tools the session's role
//! may call (name, title, description, input JSON Schema, `readOnlyHint` / `destructiveHint` /
//! `idempotentHint` annotations), and `tools/call` runs the call through the governed host and
//! returns the text as content plus the structured result as `structuredContent` (each tool
//! declares its shape as `outputSchema`). A tool error or a refusal is a result with
//! `isError: true` and the message, never a protocol error; its kind and call id are in `_meta`
//! (`toolcell/error`, `toolcell/call_id`). Calls run
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

mod body;
pub mod bounds;
mod call;
pub mod client;
pub mod config;
pub mod http;
mod logging;
pub mod metrics;
pub mod oauth;
pub mod operator;
pub mod resources;
pub mod roots;
mod sessions;
mod stdio;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CustomRequest, CustomResult, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;
use toolcell_host::{Session, schemas};

use crate::logging::LogLevel;

/// The JSON-RPC error code of a call refused because its principal reached a bound of the
/// service (`429` at the HTTP level); the message names the bound, its value and the setting
/// that raises it, and `data` has them as `bound`, `value` and `principal`.
pub const BOUND_REACHED: rmcp::model::ErrorCode = rmcp::model::ErrorCode(-32029);

/// The JSON-RPC error code of a request whose body is over the service's `max_request_bytes`
/// (`413` at the HTTP level, with this error as its body); `data` has `max_request_bytes`.
pub const REQUEST_TOO_LARGE: rmcp::model::ErrorCode = rmcp::model::ErrorCode(-32013);

/// An MCP server: for one session (stdio), or for whoever each request authenticated as
/// (the HTTP service).
pub struct McpServer {
    binding: Binding,
    /// The least severe log level the client wants (`logging/setLevel`).
    log_level: LogLevel,
    /// The resources this connection subscribed to.
    subscriptions: resources::Subscriptions,
}

enum Binding {
    /// One session for the whole connection.
    Session { session: Session, tools: Arc<Vec<Tool>> },
    /// The session comes from each request's principal and MCP session id.
    Service(Arc<http::Service>),
    /// The workspace is the client's first root (no `--workspace`).
    Roots(Arc<roots::FromRoots>),
}

/// The MCP description of `session`'s tools.
fn tools_of(session: &Session) -> Vec<Tool> {
    mcp_tools(session.tools())
}

/// The MCP description of `tools`.
fn mcp_tools<'a>(tools: impl IntoIterator<Item = &'a toolcell_host::ToolInfo>) -> Vec<Tool> {
    tools
        .into_iter()
        // The MCP shape comes from the same renderer as `toolcell schema --format mcp`.
        .filter_map(|tool| serde_json::from_value(schemas::mcp_tool(tool)).ok())
        .collect()
}

impl McpServer {
    /// Serve the tools `session`'s role may call.
    pub fn new(session: Session) -> Self {
        let tools = Arc::new(tools_of(&session));
        McpServer { binding: Binding::Session { session, tools }, log_level: LogLevel::default(), subscriptions: Default::default() }
    }

    /// Serve `tools` (a role's) on the workspace the client's first root names, once it has
    /// said; `factory` makes the session on that directory.
    pub fn from_roots(tools: Vec<&toolcell_host::ToolInfo>, factory: roots::SessionFactory) -> Self {
        let resources_served = resources::is_served_by(tools.iter().map(|tool| tool.name.as_str()));
        let from_roots = roots::FromRoots::new(mcp_tools(tools), resources_served, factory);
        McpServer { binding: Binding::Roots(Arc::new(from_roots)), log_level: LogLevel::default(), subscriptions: Default::default() }
    }

    fn for_service(service: Arc<http::Service>) -> Self {
        McpServer { binding: Binding::Service(service), log_level: LogLevel::default(), subscriptions: Default::default() }
    }

    /// The tools served to a one-session server, as MCP describes them (empty for the service,
    /// whose tools depend on the caller).
    pub fn tools(&self) -> &[Tool] {
        match &self.binding {
            Binding::Session { tools, .. } => tools,
            Binding::Roots(roots) => &roots.tools,
            Binding::Service(_) => &[],
        }
    }

    /// The session a request acts in, with its tools.
    async fn session_for(&self, context: &RequestContext<RoleServer>) -> Result<(Session, Arc<Vec<Tool>>), McpError> {
        self.session_of(context.extensions.get::<::http::request::Parts>()).await
    }

    /// The session of the request whose HTTP parts (with the service) are `parts`, with its
    /// tools.
    async fn session_of(&self, parts: Option<&::http::request::Parts>) -> Result<(Session, Arc<Vec<Tool>>), McpError> {
        match &self.binding {
            Binding::Session { session, tools } => Ok((session.clone(), Arc::clone(tools))),
            Binding::Roots(roots) => Ok((roots.session().await?, Arc::clone(&roots.tools))),
            Binding::Service(service) => service.session_for(parts).map_err(|reason| McpError::invalid_request(reason, None)),
        }
    }

    /// The session of a resource request, if its role is served resources (else the method is
    /// not found, as on a server without them).
    async fn resource_session(&self, context: &RequestContext<RoleServer>) -> Result<Session, McpError> {
        let (session, _) = self.session_for(context).await?;
        if resources::is_served(&session) {
            Ok(session)
        } else {
            Err(McpError::new(rmcp::model::ErrorCode::METHOD_NOT_FOUND, "this role may not read files: it has no resources", None))
        }
    }

    /// The service's counters (none for a one-session server).
    fn metrics(&self) -> Option<&Arc<metrics::Metrics>> {
        match &self.binding {
            Binding::Session { .. } | Binding::Roots(_) => None,
            Binding::Service(service) => Some(service.metrics()),
        }
    }
}

/// Whether the protocol version of a request (its `_meta`, else its `params`' `_meta` when
/// rmcp could not read them, else the session's) is one without `logging/setLevel`.
fn removes_logging(context: &RequestContext<RoleServer>, params: Option<&Value>) -> bool {
    let from_params = || {
        params
            .and_then(|params| params.get("_meta"))
            .and_then(|meta| meta.get("io.modelcontextprotocol/protocolVersion"))
            .and_then(|version| serde_json::from_value::<rmcp::model::ProtocolVersion>(version.clone()).ok())
    };
    context
        .meta
        .protocol_version()
        .or_else(from_params)
        .or_else(|| context.protocol_version())
        .is_some_and(|version| version >= rmcp::model::ProtocolVersion::V_2026_07_28)
}

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

/// Run blocking work (governed calls) on tokio's blocking pool.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T, McpError> + Send + 'static) -> Result<T, McpError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|_| {
        Err(McpError::internal_error("the host failed while serving a resource request; the operator's log has the details", None))
    })
}

fn writeln_stderr(text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    writeln!(std::io::stderr(), "{text}")
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        let instructions = match &self.binding {
            Binding::Session { session, .. } => format!(
                "File tools over one workspace, for role `{}`. Paths are relative to the workspace root. \
                 Every filesystem access is checked against the policy; a refusal says which rule refused it.",
                session.role()
            ),
            Binding::Roots(_) => "File tools over the workspace your first root names. Paths are relative to the workspace root. \
                 Every filesystem access is checked against the policy; a refusal says which rule refused it."
                .to_owned(),
            Binding::Service(_) => "File tools over the workspace your token is for, with the tools of its role. Paths are relative \
                 to the workspace root. Every filesystem access is checked against the policy; a refusal says which rule refused it."
                .to_owned(),
        };
        // The service's roles are known per request: it declares resources, and answers a role
        // without the reading tools as a server without them.
        let resources_served = match &self.binding {
            Binding::Session { session, .. } => resources::is_served(session),
            Binding::Roots(roots) => roots.resources_served,
            Binding::Service(_) => true,
        };
        ServerConfig::new(if resources_served { resources::capabilities() } else { logging::capabilities() })
            .with_server_info(Implementation::new("toolcell", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = match &self.binding {
            // Known before the workspace is: they are the role's.
            Binding::Roots(roots) => Arc::clone(&roots.tools),
            _ => self.session_for(&context).await?.1,
        };
        Ok(ListToolsResult::with_all_items(tools.as_ref().clone()))
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, McpError> {
        let parts = context.extensions.get::<::http::request::Parts>();
        Ok(self.call_with(request, parts, &context.ct, Some(&context)).await?.into())
    }

    #[expect(deprecated, reason = "MCP logging is deprecated by SEP-2577, but clients still ask for it")]
    async fn set_level(&self, request: rmcp::model::SetLevelRequestParams, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        // Removed from the protocol in 2026-07-28: a client speaking it finds no such method.
        if removes_logging(&context, None) {
            return Err(McpError::method_not_found::<rmcp::model::SetLevelRequestMethod>());
        }
        self.log_level.set(&request);
        if let Binding::Service(service) = &self.binding {
            // Its calls are then answered through rmcp, which sends the messages.
            service.asked_for_logs(context.extensions.get::<::http::request::Parts>());
        }
        Ok(())
    }

    // What this server does not declare (prompts) it does not answer
    // with empty results either: -32601, as for any method it does not serve.

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListPromptsResult, McpError> {
        Err(McpError::method_not_found::<rmcp::model::ListPromptsRequestMethod>())
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, McpError> {
        let session = self.resource_session(&context).await?;
        // A resource request costs what a tool call does, and counts against the same bounds.
        let slot = self.call_slot(context.extensions.get::<::http::request::Parts>())?;
        // Without a watcher to spare, the listing still answers; `list_changed` waits for one.
        let seat = self.watcher_seat(context.extensions.get::<::http::request::Parts>());
        let _ = self.subscriptions.watch(&session, context.peer.clone(), seat);
        let listed = blocking(move || resources::list(&session, request.as_ref())).await;
        drop(slot);
        listed
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ListResourceTemplatesResult, McpError> {
        self.resource_session(&context).await?;
        Ok(resources::templates())
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
        let session = self.resource_session(&context).await?;
        let slot = self.call_slot(context.extensions.get::<::http::request::Parts>())?;
        let read = blocking(move || resources::read(&session, &request.uri)).await;
        drop(slot);
        Ok(read?.into())
    }

    async fn subscribe(&self, request: rmcp::model::SubscribeRequestParams, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        let session = self.resource_session(&context).await?;
        let slot = self.call_slot(context.extensions.get::<::http::request::Parts>())?;
        let (peer, subscriptions) = (context.peer.clone(), self.subscriptions.clone());
        let seat = self.watcher_seat(context.extensions.get::<::http::request::Parts>());
        let subscribed = blocking(move || subscriptions.subscribe(&session, &request.uri, peer, seat)).await;
        drop(slot);
        subscribed
    }

    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.resource_session(&context).await?;
        self.subscriptions.unsubscribe(&request.uri);
        Ok(())
    }

    async fn complete(
        &self,
        request: rmcp::model::CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CompleteResult, McpError> {
        let session = self.resource_session(&context).await?;
        let slot = self.call_slot(context.extensions.get::<::http::request::Parts>())?;
        let completed = blocking(move || resources::complete(&session, &request)).await;
        drop(slot);
        completed
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        if let Binding::Roots(roots) = &self.binding {
            let (roots, peer) = (Arc::clone(roots), context.peer.clone());
            // Not awaited here: the client answers `roots/list` while this handler would wait.
            tokio::spawn(async move { roots.follow(&peer).await });
        }
    }

    async fn on_roots_list_changed(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        if let Binding::Roots(roots) = &self.binding {
            let (roots, peer, subscriptions) = (Arc::clone(roots), context.peer.clone(), self.subscriptions.clone());
            tokio::spawn(async move {
                if roots.follow(&peer).await {
                    // Another workspace: its files are other resources.
                    subscriptions.reset();
                    let _ = peer.notify_resource_list_changed().await;
                }
            });
        }
    }

    /// rmcp hands over a request whose method it knows but whose parameters it could not
    /// read as an unknown one: for the methods this server serves that is invalid params
    /// (-32602), saying what is wrong, not "method not found".
    async fn on_custom_request(&self, request: CustomRequest, context: RequestContext<RoleServer>) -> Result<CustomResult, McpError> {
        match request.method.as_str() {
            // Removed in 2026-07-28: under it, there is no such method, whatever its params.
            "logging/setLevel" if removes_logging(&context, request.params.as_ref()) => {
                Err(McpError::method_not_found::<rmcp::model::SetLevelRequestMethod>())
            }
            "tools/call" => Err(McpError::invalid_params(invalid_call_params(request.params.as_ref()), None)),
            "tools/list" => Err(McpError::invalid_params("invalid params for `tools/list`: give an object (`cursor` is optional)", None)),
            "logging/setLevel" => Err(McpError::invalid_params(
                "invalid params for `logging/setLevel`: give `{\"level\": L}` with L one of debug, info, notice, warning, error, critical, alert, emergency",
                None,
            )),
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
    stdio::serve(server).await
}
