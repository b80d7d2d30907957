//! The workspace as MCP resources: `resources/list`, `resources/templates/list`,
//! `resources/read`, `resources/subscribe` / `unsubscribe` and `completion/complete`.
//!
//! Nothing here reads the workspace itself: every listing and every read is a call of the
//! role's own `list_files`, `file_info` and `read_file` tools through the governed host, so the
//! policy, the hidden host-owned paths, the read caps and the audit trail are those of the
//! tools (each resource request is an audited call). A file the role may not read is never
//! listed, never completed, never told about, and reading it answers exactly as a missing file.
//!
//! A resource's URI is `toolcell://workspace/` followed by its workspace-relative path,
//! percent-encoded ([`uri_of`]): it never carries a host path, it is the same over stdio and
//! HTTP and on every machine, and clients show its last segment as the file's name.

mod complete;
mod watch;

pub(crate) use complete::complete;
pub(crate) use watch::{MAX_WATCHERS, Seat, Subscriptions};

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, PaginatedRequestParams, ReadResourceResult, Resource, ResourceContents,
    ResourceTemplate,
};
use serde_json::{Value, json};
use toolcell_host::{Access, Session, ToolErrorKind};

/// Every resource URI starts with this.
pub const URI_PREFIX: &str = "toolcell://workspace/";
/// The one resource template: any workspace path.
pub const URI_TEMPLATE: &str = "toolcell://workspace/{+path}";
/// Resources per `resources/list` page.
pub const PAGE_SIZE: usize = 50;
/// The most files a listing looks at (`list_files`' own maximum).
const MAX_LISTED: u64 = 10_000;
/// The most bytes one `resources/read` returns; a larger file is read in parts with
/// `read_file`.
pub const MAX_BYTES: usize = 8 * 1024 * 1024;
/// The tools resources are served through: a role without all of them has no resources.
const TOOLS: [&str; 3] = ["list_files", "file_info", "read_file"];

/// Whether `session`'s role may call the tools resources are served through.
pub(crate) fn is_served(session: &Session) -> bool {
    is_served_by(session.tools().iter().map(|tool| tool.name.as_str()))
}

/// Whether a role with the tools `names` is served resources.
pub(crate) fn is_served_by<'a>(names: impl Iterator<Item = &'a str>) -> bool {
    let names: Vec<&str> = names.collect();
    TOOLS.iter().all(|wanted| names.contains(wanted))
}

/// The server capabilities when resources are served (logging as without them).
#[expect(deprecated, reason = "MCP logging is deprecated by SEP-2577, but clients still ask for it")]
pub(crate) fn capabilities() -> rmcp::model::ServerCapabilities {
    rmcp::model::ServerCapabilities::builder()
        .enable_tools()
        .enable_logging()
        .enable_completions()
        .enable_resources()
        .enable_resources_subscribe()
        .enable_resources_list_changed()
        .build()
}

/// The URI of the workspace-relative `path`.
pub fn uri_of(path: &str) -> String {
    let mut uri = String::with_capacity(URI_PREFIX.len() + path.len());
    uri.push_str(URI_PREFIX);
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri
}

/// The workspace-relative path a URI names, if it is one of this server's.
pub fn path_of(uri: &str) -> Option<String> {
    let encoded = uri.strip_prefix(URI_PREFIX)?;
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut rest = encoded.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    let path = String::from_utf8(bytes).ok()?;
    // One spelling per file: the workspace-relative path as `list_files` gives it (no `.`,
    // `..` or empty part, no leading or trailing `/`), so that a subscription's key is the
    // path its changes are told under.
    let canonical = !path.is_empty() && path.split('/').all(|part| !part.is_empty() && part != "." && part != "..");
    canonical.then_some(path)
}

/// The answer to a URI that names no file the role may read: missing, denied, hidden and
/// foreign URIs alike (SEP-2164: invalid params, with the URI in `data`).
pub(crate) fn not_found(uri: &str) -> McpError {
    McpError::invalid_params(
        format!("resource `{uri}` not found: `resources/list` lists the files you may read"),
        Some(json!({ "uri": uri })),
    )
}

/// What a governed call of one of the role's tools gave.
pub(crate) enum Called {
    /// The tool's structured result.
    Done(Value),
    /// The tool's error.
    Refused(ToolErrorKind, String),
}

/// Call `tool` with `arguments` in `session`, as an agent's call (audited, under the policy).
pub(crate) fn call(session: &Session, tool: &str, arguments: &Value) -> Result<Called, McpError> {
    let call = session.call(tool, &arguments.to_string()).map_err(|error| {
        let _ = crate::writeln_stderr(&format!("toolcell mcp: `{tool}` for a resource request failed in the host: {error}"));
        McpError::internal_error(format!("the host could not run `{tool}`; the operator's log has the details"), None)
    })?;
    Ok(match call.output {
        Ok(output) => Called::Done(output.structured.map_or(Value::Null, toolcell_host::Structured::into_value)),
        Err(error) => Called::Refused(error.kind, error.message),
    })
}

/// A file and directory listing of the workspace as the role sees it (`list_files`, every
/// level), sorted by path.
pub(crate) fn listing(session: &Session) -> Result<(Vec<String>, Vec<String>), McpError> {
    let arguments = json!({ "recursive": true, "max_results": MAX_LISTED });
    let structured = match call(session, "list_files", &arguments)? {
        Called::Done(structured) => structured,
        Called::Refused(_, message) => return Err(McpError::internal_error(format!("listing the workspace failed: {message}"), None)),
    };
    // No entries at all means the listing did not fit the call's output cap: an error, not an
    // empty workspace.
    let entries = structured["entries"].as_array().ok_or_else(|| {
        McpError::internal_error(
            "listing the workspace gave no entries (over the output cap of a call?): the operator can raise `[limits] output_kib`",
            None,
        )
    })?;
    let (mut files, mut directories) = (Vec::new(), Vec::new());
    for entry in entries {
        let Some(path) = entry["path"].as_str() else { continue };
        match entry["type"].as_str() {
            Some("file") => files.push(path.to_owned()),
            Some("directory") => directories.push(path.trim_end_matches('/').to_owned()),
            _ => {}
        }
    }
    files.sort();
    directories.sort();
    Ok((files, directories))
}

/// The files of `files` (from the role's own listing) that the role may read as its tools are
/// judged: by the read rules of the policy in force, and never a file with several hard links
/// (the guard opens it under none of its names).
pub(crate) fn readable_files(session: &Session, files: impl IntoIterator<Item = String>) -> Vec<String> {
    let host = session.host();
    let policy = host.runtime().policy();
    let role = policy.as_deref().map(|policy| (policy, policy.role(session.role())));
    let workspace = host.workspace();
    files
        .into_iter()
        .filter(|path| match role {
            None => true,
            Some((_, None)) => false,
            Some((policy, Some(role))) => policy.verdict(role, Access::Read, path).effect() == toolcell_policy::Effect::Allow,
        })
        .filter(|path| !workspace.is_hard_linked(path))
        .collect()
}

/// `file_info` of `path` when the role may read it (its structured result), else `None`.
fn readable_info(session: &Session, path: &str) -> Result<Option<Value>, McpError> {
    Ok(match call(session, "file_info", &json!({ "path": path }))? {
        Called::Done(info) if info["type"] == "file" && info["access"]["read"] == "allow" => Some(info),
        _ => None,
    })
}

/// One page of `resources/list`: the readable files after the cursor (the last path of the
/// previous page).
pub(crate) fn list(session: &Session, request: Option<&PaginatedRequestParams>) -> Result<ListResourcesResult, McpError> {
    let after = request.and_then(|request| request.cursor.clone());
    let (files, _) = listing(session)?;
    let mut resources = Vec::new();
    let mut last = None;
    let mut candidates = files.iter().filter(|path| after.as_deref().is_none_or(|after| path.as_str() > after)).peekable();
    while resources.len() < PAGE_SIZE {
        let Some(path) = candidates.next() else { break };
        last = Some(path.clone());
        if let Some(info) = readable_info(session, path)? {
            resources.push(resource_of(path, &info));
        }
    }
    let mut result = ListResourcesResult::with_all_items(resources);
    result.next_cursor = if candidates.peek().is_some() { last } else { None };
    Ok(result)
}

fn resource_of(path: &str, info: &Value) -> Resource {
    let name = path.rsplit('/').next().unwrap_or(path);
    let mut resource = Resource::new(uri_of(path), name).with_title(path).with_mime_type(mime_type(path, info));
    if let Some(size) = info["size"].as_u64() {
        resource = resource.with_size(size);
    }
    resource
}

/// The MIME type of `path`: by its extension, else `text/plain` for a text file (`file_info`
/// found an encoding), else `application/octet-stream`.
pub(crate) fn mime_type(path: &str, info: &Value) -> String {
    let extension = path.rsplit_once('.').map(|(_, extension)| extension.to_ascii_lowercase()).unwrap_or_default();
    let known = match extension.as_str() {
        "txt" | "log" => "text/plain",
        "md" | "markdown" => "text/markdown",
        "rs" => "text/x-rust",
        "py" => "text/x-python",
        "js" | "mjs" | "cjs" => "text/javascript",
        "ts" => "text/x-typescript",
        "json" => "application/json",
        "toml" => "application/toml",
        "yaml" | "yml" => "application/yaml",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "csv" => "text/csv",
        "xml" => "application/xml",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "pdf" => "application/pdf",
        "wasm" => "application/wasm",
        _ if info.get("encoding").is_some() => "text/plain",
        _ => "application/octet-stream",
    };
    known.to_owned()
}

/// `resources/templates/list`: one template, any workspace path.
pub(crate) fn templates() -> ListResourceTemplatesResult {
    let template = ResourceTemplate::new(URI_TEMPLATE, "workspace-file")
        .with_title("A workspace file")
        .with_description("Any file of the workspace your role may read, by its workspace-relative path (for example `src/main.rs`).");
    ListResourceTemplatesResult::with_all_items(vec![template])
}

/// `resources/read`: the file's exact bytes, read with `read_file`'s `raw` mode window after
/// window (each an audited call under the policy): text when they are UTF-8, else a base64
/// blob.
pub(crate) fn read(session: &Session, uri: &str) -> Result<ReadResourceResult, McpError> {
    use base64::Engine as _;
    let path = path_of(uri).ok_or_else(|| not_found(uri))?;
    let mut bytes = Vec::new();
    loop {
        let arguments = json!({ "path": path, "raw": true, "byte_offset": bytes.len() });
        let structured = match call(session, "read_file", &arguments)? {
            Called::Done(structured) => structured,
            Called::Refused(ToolErrorKind::NotFound | ToolErrorKind::Denied, _) => return Err(not_found(uri)),
            Called::Refused(kind, message) => {
                // Only a file the role may read gets here: the tool's message names nothing else.
                let kind = serde_json::to_value(kind).unwrap_or(Value::Null);
                return Err(McpError::invalid_params(
                    format!("`{uri}` cannot be read as a resource: {message}"),
                    Some(json!({ "uri": uri, "kind": kind })),
                ));
            }
        };
        let window = structured["base64"]
            .as_str()
            .and_then(|text| base64::engine::general_purpose::STANDARD.decode(text).ok())
            .ok_or_else(|| McpError::internal_error(format!("`read_file` gave no bytes for `{uri}`"), None))?;
        bytes.extend_from_slice(&window);
        if bytes.len() > MAX_BYTES {
            return Err(McpError::invalid_params(
                format!(
                    "`{uri}` is over {MAX_BYTES} bytes: read it in parts with `read_file` (`offset` and `limit`, or `raw` and `byte_offset`)"
                ),
                Some(json!({ "uri": uri, "max_bytes": MAX_BYTES })),
            ));
        }
        match structured["next_byte_offset"].as_u64() {
            Some(next) if next == bytes.len() as u64 && !window.is_empty() => {}
            _ => break,
        }
    }
    Ok(ReadResourceResult::new(vec![match String::from_utf8(bytes) {
        Ok(text) => {
            let mime = mime_type(&path, &json!({ "encoding": "utf-8" }));
            ResourceContents::text(text, uri).with_mime_type(mime)
        }
        Err(binary) => {
            let mime = mime_type(&path, &Value::Null);
            ResourceContents::blob(base64::engine::general_purpose::STANDARD.encode(binary.as_bytes()), uri).with_mime_type(mime)
        }
    }]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_and_never_carry_more_than_the_relative_path() {
        for (path, uri) in [
            ("a.txt", "toolcell://workspace/a.txt"),
            ("src/main.rs", "toolcell://workspace/src/main.rs"),
            ("docs/a b#?.md", "toolcell://workspace/docs/a%20b%23%3F.md"),
            ("é.txt", "toolcell://workspace/%C3%A9.txt"),
        ] {
            assert_eq!(uri_of(path), uri);
            assert_eq!(path_of(uri).as_deref(), Some(path));
        }
        for foreign in [
            "file:///etc/passwd",
            "toolcell://workspace/",
            "toolcell://other/a",
            "toolcell://workspace/%zz",
            "toolcell://workspace/%C3",
            "toolcell://workspace/./a.txt",
            "toolcell://workspace/sub/../a.txt",
            "toolcell://workspace/a.txt/",
            "toolcell://workspace//a.txt",
            "toolcell://workspace/%2e%2e/a.txt",
        ] {
            assert_eq!(path_of(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn mime_types_by_extension_then_by_content() {
        let text = json!({ "encoding": "utf-8" });
        let binary = json!({});
        for (path, info, mime) in [
            ("README.md", &binary, "text/markdown"),
            ("src/main.rs", &binary, "text/x-rust"),
            ("logo.PNG", &binary, "image/png"),
            ("Makefile", &text, "text/plain"),
            ("blob.dat", &binary, "application/octet-stream"),
        ] {
            assert_eq!(mime_type(path, info), mime, "{path}");
        }
    }
}
