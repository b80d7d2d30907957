//! A tool call as MCP serves it: its session and bounds, the governed call on the blocking
//! pool, progress and cancellation while it runs, and its result shaped for MCP.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, JsonObject, JsonRpcResponse, JsonRpcVersion2_0, ProgressNotificationParam,
    RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolcell_host::Session;
use toolcell_types::Structured;

use crate::logging::{self, Severity};
use crate::{BOUND_REACHED, Binding, McpServer, bounds, http, writeln_stderr};

/// When a call first reports progress to a client that asked for it,
const FIRST_PROGRESS: Duration = Duration::from_millis(50);
/// and how often after that.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

impl McpServer {
    /// Call the tool `request` names, for the request whose HTTP parts (with the service) are
    /// `parts`. `ct` is cancelled when the client cancels the request; `context` is rmcp's for
    /// the request (progress and log messages go through it), `None` for a call the service
    /// answers without rmcp's session (a client that asked for neither).
    pub(crate) async fn call_with(
        &self,
        request: CallToolRequestParams,
        parts: Option<&::http::request::Parts>,
        ct: &CancellationToken,
        context: Option<&RequestContext<RoleServer>>,
    ) -> Result<CallToolResult, McpError> {
        let (session, tools) = self.session_of(parts).await?;
        // Counted by tool name only for the tools of the policy: any other name is a label
        // a caller could make up.
        let meter = self.metrics().map(|metrics| {
            let known = tools.iter().any(|tool| tool.name == request.name);
            metrics.call(if known { &request.name } else { "unknown" }, session.role())
        });
        let slot = match self.call_slot(parts) {
            Ok(slot) => slot,
            Err(error) => {
                if let Some(meter) = meter {
                    meter.finish("refused");
                }
                return Err(error);
            }
        };
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let locking = (request.name == "lock_files").then(|| session.clone());
        let result = self.run(session, (request.name.into_owned(), arguments), slot, (ct, context)).await;
        if let (Some(session), Binding::Service(service)) = (locking, &self.binding) {
            service.after_lock(parts, session).await;
        }
        if let Some(meter) = meter {
            meter.finish(&outcome_of(&result));
        }
        Ok(result)
    }

    /// A slot for a call of the service (none for a one-session server), held until the call's
    /// instance is released.
    pub(crate) fn call_slot(&self, parts: Option<&::http::request::Parts>) -> Result<Option<bounds::Slot>, McpError> {
        match &self.binding {
            Binding::Session { .. } | Binding::Roots(_) => Ok(None),
            Binding::Service(service) => match service.take_slot(parts, bounds::Kind::Call) {
                Ok(slot) => Ok(Some(slot)),
                Err(http::CallRefused::Bound(refusal)) => Err({
                    service.log_call_refused(parts, &refusal);
                    McpError::new(
                        BOUND_REACHED,
                        refusal.to_string(),
                        Some(json!({ "bound": refusal.setting, "value": refusal.value, "principal": refusal.principal })),
                    )
                }),
                Err(http::CallRefused::Unauthenticated(reason)) => Err(McpError::invalid_request(reason, None)),
            },
        }
    }

    /// The principal's slot of the resource watchers (`serve`), for a connection's watcher
    /// that may start: each principal is guaranteed a share of the process's watchers, so one
    /// principal's sessions cannot take them all.
    pub(crate) fn watcher_seat(&self, parts: Option<&::http::request::Parts>) -> crate::resources::Seat {
        match &self.binding {
            Binding::Session { .. } | Binding::Roots(_) => Ok(None),
            Binding::Service(service) => service.take_slot(parts, bounds::Kind::Watcher).map(Some).map_err(|refused| refused.to_string()),
        }
    }

    /// Run one call and shape its result for MCP; if the client sent a progress token,
    /// reports progress (the seconds it has run) after [`FIRST_PROGRESS`] and every
    /// [`PROGRESS_EVERY`] while it runs. `slot` is held until the call returns, however long
    /// after its request was answered or dropped.
    async fn run(
        &self,
        session: Session,
        (name, arguments): (String, Value),
        slot: Option<bounds::Slot>,
        (ct, context): (&CancellationToken, Option<&RequestContext<RoleServer>>),
    ) -> CallToolResult {
        let args = arguments.to_string();
        let tool = name.clone();
        // `notifications/cancelled` for this request cancels `ct`: the call is then
        // stopped at its next epoch check and rolled back.
        let cancel = Arc::new(AtomicBool::new(false));
        let cancel_call = Arc::clone(&cancel);
        let started = Instant::now();
        let (answer, mut answered) = tokio::sync::oneshot::channel();
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            call_answering(&session, &tool, &args, &cancel_call, |finished| {
                let _ = answer.send(finished);
            });
        });
        let progress_token = context.and_then(|context| context.meta.get_progress_token());
        // Not at once: rmcp routes a notification to the request's own stream only once it has
        // registered the request, and a call this short needs no progress.
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + FIRST_PROGRESS, PROGRESS_EVERY);
        let joined = loop {
            tokio::select! {
                biased;
                _ = ticks.tick(), if progress_token.is_some() => {
                    if let (Some(token), Some(context)) = (&progress_token, context) {
                        let elapsed = started.elapsed().as_secs_f64();
                        let progress = ProgressNotificationParam::new(token.clone(), elapsed)
                            .with_message(format!("`{name}` running for {elapsed:.1} s"));
                        let _ = context.peer.notify_progress(progress).await;
                    }
                }
                joined = &mut answered => break joined,
                () = ct.cancelled(), if !cancel.load(Ordering::Relaxed) => cancel.store(true, Ordering::Relaxed),
            }
        };
        let finished = joined.ok().flatten();
        if let Some(Ok(call)) = &finished {
            if let Some(metrics) = self.metrics() {
                metrics.audit_append();
                metrics.policy_denials(call.denials.len());
            }
            for warning in &call.warnings {
                self.log_level.send(context, Severity::Warning, json!({ "tool": name, "call_id": call.call_id, "warning": warning })).await;
            }
            for denial in &call.denials {
                let refused = json!({
                    "tool": name,
                    "call_id": call.call_id,
                    "path": denial.event.path,
                    "rule": denial.event.rule,
                    "refused": denial.message,
                });
                self.log_level.send(context, Severity::Notice, refused).await;
            }
        }
        result_of(&name, finished)
    }
}

/// Run the call of `tool` with `args` in `session` on this thread (`cancel` stops it), hand
/// what it returned to `answer` (`None`: the host failed), and then write the call's log line:
/// the answer goes first, the line is written while it is sent.
pub(crate) fn call_answering(
    session: &Session,
    tool: &str,
    args: &str,
    cancel: &Arc<AtomicBool>,
    answer: impl FnOnce(Option<Result<toolcell_host::CallResult, toolcell_host::Error>>),
) {
    let line = logging::CallLine::of(session, tool);
    let started = Instant::now();
    let finished = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| session.call_cancellable(tool, args, Some(cancel)))).ok();
    let said = finished.as_ref().and_then(|result| result.as_ref().ok()).map(|call| line.said(call));
    answer(finished);
    if let Some(said) = said {
        line.write(&said, started.elapsed());
    }
}

/// The MCP result of a call of `name` that `finished` (`None`: its thread failed).
pub(crate) fn result_of(name: &str, finished: Option<Result<toolcell_host::CallResult, toolcell_host::Error>>) -> CallToolResult {
    answer_of(name, finished).into_result()
}

/// A call's MCP result, its structured content still the JSON text the tool wrote.
pub(crate) struct Answered {
    /// The result without its structured content.
    result: CallToolResult,
    structured: Option<Structured>,
}

impl Answered {
    /// The result as rmcp sends it (the structured content parsed).
    pub(crate) fn into_result(self) -> CallToolResult {
        let Answered { mut result, structured } = self;
        result.structured_content = structured.map(Structured::into_value);
        result
    }

    /// The whole JSON-RPC response to request `id`, as rmcp writes it for a client of a
    /// protocol version before 2026-07-28, with the structured content written as the tool
    /// wrote it, not parsed (`Structured` keeps it as its value would be written wherever
    /// readers could take the two differently).
    pub(crate) fn legacy_response(self, id: RequestId) -> serde_json::Result<Vec<u8>> {
        match self.structured {
            // Before 2026-07-28 structured content is an object; rmcp moves any other value
            // into the text content.
            Some(structured) if structured.is_object() => {
                let mut result = self.result;
                // As `ServerResult::strip_result_type_for_legacy_peer` (the unit test below
                // compares the answers).
                result.result_type.take_if(|result_type| result_type.is_complete());
                // The result is an object with other fields and never `structuredContent`
                // here: the field goes in before its closing brace.
                let mut written = serde_json::to_vec(&JsonRpcResponse { jsonrpc: JsonRpcVersion2_0, id: id.clone(), result: &result })?;
                if written.ends_with(b"}}") && !written.ends_with(b"{}}") {
                    written.truncate(written.len() - 2);
                    written.extend_from_slice(b",\"structuredContent\":");
                    written.extend_from_slice(structured.json().as_bytes());
                    written.extend_from_slice(b"}}");
                    return Ok(written);
                }
                // Not the shape it has been: rmcp writes it all.
                Answered { result, structured: Some(structured) }.legacy_response_through_rmcp(id)
            }
            structured => Answered { result: self.result, structured }.legacy_response_through_rmcp(id),
        }
    }

    /// [`Answered::legacy_response`] as rmcp writes it, the structured content parsed.
    fn legacy_response_through_rmcp(self, id: RequestId) -> serde_json::Result<Vec<u8>> {
        let mut result = ServerResult::CallToolResult(self.into_result());
        result.strip_result_type_for_legacy_peer();
        result.strip_non_object_output_for_legacy_peer();
        serde_json::to_vec(&ServerJsonRpcMessage::response(result, id))
    }
}

/// The MCP result of a call of `name` that `finished` (`None`: its thread failed).
pub(crate) fn answer_of(name: &str, finished: Option<Result<toolcell_host::CallResult, toolcell_host::Error>>) -> Answered {
    let result = match finished {
        Some(Ok(call)) => match call.output {
            Ok(output) => {
                let mut content = vec![ContentBlock::text(output.text)];
                for image in &call.images {
                    use base64::Engine as _;
                    let data = base64::engine::general_purpose::STANDARD.encode(&image.data);
                    content.push(ContentBlock::image(data, image.mime_type.clone()));
                }
                return Answered { result: CallToolResult::success(content), structured: output.structured };
            }
            Err(error) => {
                let mut result = CallToolResult::error(vec![ContentBlock::text(error.full_text())]);
                // Not as structured content: that must match the tool's output schema,
                // which describes successful results (clients check it on errors too).
                let mut meta = serde_json::Map::new();
                meta.insert("toolcell/error".to_owned(), json!(error));
                meta.insert("toolcell/call_id".to_owned(), json!(call.call_id));
                result.meta = Some(rmcp::model::MetaObject(meta));
                result
            }
        },
        Some(Err(host_error)) => {
            let (kind, message) = match host_error {
                toolcell_host::Error::UnknownTool { .. } => ("not-found", host_error.to_string()),
                other => {
                    // Details (which may name host paths) go to the operator only.
                    let _ = writeln_stderr(&format!("toolcell mcp: `{name}` failed in the host: {other}"));
                    ("failed", format!("the host could not run `{name}`; the operator's log has the details"))
                }
            };
            // The same `_meta` as a tool's own error, so a client reads every error alike
            // (no call ran, so there is no call id).
            let mut result = CallToolResult::error(vec![ContentBlock::text(message.clone())]);
            let mut meta = serde_json::Map::new();
            meta.insert("toolcell/error".to_owned(), json!({ "kind": kind, "message": message }));
            result.meta = Some(rmcp::model::MetaObject(meta));
            result
        }
        None => CallToolResult::error(vec![ContentBlock::text(format!(
            "the host failed while running `{name}`; the operator's log has the details"
        ))]),
    };
    Answered { result, structured: None }
}

/// A `tools/call` in its plainest form, which the direct paths of stdio and HTTP answer
/// themselves: a JSON-RPC request whose params are `name` and `arguments` and nothing else
/// (no `_meta`: no progress token, no per-request protocol version).
pub(crate) struct PlainCall {
    pub(crate) id: RequestId,
    pub(crate) params: CallToolRequestParams,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainRequest {
    jsonrpc: String,
    id: RequestId,
    method: String,
    params: PlainParams,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainParams {
    name: String,
    #[serde(default)]
    arguments: Option<JsonObject>,
}

impl PlainCall {
    /// The plain call `message` is, if it is one.
    pub(crate) fn parse(message: &[u8]) -> Option<PlainCall> {
        let request = serde_json::from_slice::<PlainRequest>(message).ok()?;
        (request.jsonrpc == "2.0" && request.method == "tools/call").then(|| {
            let mut params = CallToolRequestParams::new(request.params.name);
            params.arguments = request.params.arguments;
            PlainCall { id: request.id, params }
        })
    }
}

/// Why `body` is not JSON, worded for the client that sent it (a JSON-RPC parse error's
/// message); `None` if it is JSON.
pub(crate) fn not_json(body: &[u8]) -> Option<String> {
    let error = serde_json::from_slice::<Value>(body).err()?;
    Some(format!(
        "the request is not valid JSON ({error}): send UTF-8 JSON text with every string escaped as JSON allows (no unpaired \
         surrogate escape such as `\\ud800`), nested at most 128 levels deep"
    ))
}

/// The `id` of the JSON-RPC request whose text starts with `prefix` (the rest may be cut off),
/// if its top-level object names one before the cut: a number or a string, as JSON-RPC allows.
pub(crate) fn leading_id(prefix: &[u8]) -> Option<RequestId> {
    let prefix = prefix.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(prefix);
    let mut depth = 0usize;
    let mut at = 0;
    // The start and end of the last string read at depth 1, and whether a `:` followed it.
    let mut key: Option<(usize, usize)> = None;
    while at < prefix.len() {
        match prefix[at] {
            b'"' => {
                let start = at;
                at = closing_quote(prefix, at);
                let end = (at + 1).min(prefix.len());
                key = (depth == 1).then_some((start, end));
            }
            b':' if depth == 1 => {
                if let Some((start, end)) = key.take()
                    && &prefix[start..end] == b"\"id\""
                {
                    let value = &prefix[at + 1..];
                    let value = &value[value.iter().position(|byte| !byte.is_ascii_whitespace())?..];
                    // Only a value that ends before the cut: a number cut short is another id.
                    let end = if value.first() == Some(&b'"') {
                        let index = closing_quote(value, 0);
                        (index < value.len()).then_some(index + 1)?
                    } else {
                        value.iter().position(|byte| matches!(byte, b',' | b'}' | b' ' | b'\t' | b'\r' | b'\n'))?
                    };
                    return serde_json::from_slice(&value[..end]).ok();
                }
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1)?,
            _ => {}
        }
        at += 1;
    }
    None
}

/// Where the JSON string opened by the quote at `open` in `bytes` closes (its escapes
/// skipped); `bytes.len()` or past it if it is cut off first.
fn closing_quote(bytes: &[u8], open: usize) -> usize {
    let mut at = open + 1;
    while at < bytes.len() && bytes[at] != b'"' {
        at += if bytes[at] == b'\\' { 2 } else { 1 };
    }
    at
}

/// A request id as the direct paths' registries of calls key it (the number 7 and the string
/// "7" are two ids).
pub(crate) fn id_key(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// A call's outcome for the metrics: `ok`, or its error's kind (a word of the runtime's own).
fn outcome_of(result: &CallToolResult) -> String {
    if result.is_error != Some(true) {
        return "ok".to_owned();
    }
    result
        .meta
        .as_ref()
        .and_then(|meta| meta.0.get("toolcell/error"))
        .and_then(|error| error.get("kind"))
        .and_then(Value::as_str)
        .filter(|kind| kind.len() <= 32 && kind.bytes().all(|byte| byte.is_ascii_lowercase() || byte == b'-' || byte == b'_'))
        .unwrap_or("failed")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_of_a_request_cut_short_is_found_only_at_its_top_level_and_whole() {
        let id = |text: &str| leading_id(text.as_bytes()).map(|id| id_key(&id));
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"w"#).as_deref(), Some("7"));
        assert_eq!(id(r#"{ "id" : "a\"b}" , "params":"#).as_deref(), Some(r#""a\"b}""#));
        assert_eq!(id(r#"{"method":"x","params":{"id":3,"content":"xx"#), None, "an `id` inside the params is not the request's");
        assert_eq!(id(r#"{"params":{"text":"\"id\":4"},"id":5}"#).as_deref(), Some("5"));
        assert_eq!(id("\u{feff}{\"id\":8,"), Some("8".to_owned()));
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":12"#), None, "a number cut short may be another");
        assert_eq!(id(r#"{"id":"unterminat"#), None);
        assert_eq!(id(r#"{"id":null,"x":1}"#), None);
        assert_eq!(id(r#"]]{"id":1}"#), None);
    }

    #[test]
    fn a_response_with_the_tools_own_json_is_the_one_rmcp_writes_and_holds_that_json_as_written() {
        let id = RequestId::Number(7);
        let shapes = [
            Some(r#"{"path": "list", "entries": [{"path": "list/a\u00e9", "type": "file"}], "truncated": false}"#),
            Some(r#"[1, 2]"#),
            Some("null"),
            Some(r#""text""#),
            None,
        ];
        for json in shapes {
            let answered = || Answered {
                result: CallToolResult::success(vec![ContentBlock::text("listed")]),
                structured: json.map(|json| Structured::from_json(json.to_owned()).expect("JSON")),
            };
            let written = answered().legacy_response(id.clone()).expect("serialized");
            let mut result = ServerResult::CallToolResult(answered().into_result());
            result.strip_result_type_for_legacy_peer();
            result.strip_non_object_output_for_legacy_peer();
            let rmcp = serde_json::to_value(ServerJsonRpcMessage::response(result, id.clone())).expect("rmcp's");
            assert_eq!(serde_json::from_slice::<Value>(&written).expect("JSON"), rmcp, "{json:?}");
            if let Some(object) = json.filter(|json| json.starts_with('{')) {
                let text = String::from_utf8(written).expect("UTF-8");
                assert!(text.contains(&format!(r#""structuredContent":{object}"#)), "written as the tool wrote it: {text}");
            }
        }
    }
}
