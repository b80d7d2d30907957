//! `file_info`: what a path is, without reading it whole: type, size, times, mode, lines.

use std::io::Read;

use serde::Deserialize;
use serde_json::{Value, json};
use toolcell_sdk::encoding::{self, TextEncoding};
use toolcell_sdk::path::quote;
use toolcell_sdk::time::rfc3339;
use toolcell_sdk::{Effect, Output, Tool, ToolError, ToolInfo, WorkspacePath};
use toolcell_sdk::{text, walk};

/// Text files up to this size get a line count.
const MAX_COUNTED_BYTES: u64 = 16 * 1024 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
}

struct FileInfo;

impl Tool for FileInfo {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "file_info",
            "File info",
            "Describe a path without reading it: `type` (file, directory, symlink, other), `size` \
             in bytes, `modified` (UTC, RFC 3339), `mode` (octal permission bits), and for a text \
             file its `lines`, `encoding` (`utf-8`, `utf-16le`, `windows-1252`, ...), `bom` \
             and `line_endings` (`lf`, `crlf`, `mixed`); for a directory, how many `entries` you can see; for a symlink, \
             its `target` and what that is (a link that leads out of the workspace is never \
             followed). `access` says whether your role may read, write and delete the path \
             (`allow`, `ask` or `deny`): check it before planning a change. Use it to check a \
             file's size before reading it, or whether a path exists. Paths are relative to the \
             workspace root.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The path to describe, relative to the workspace root."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }))
        .read_only()
        .output(json!({"type": "object", "properties": {"path": {"type": "string"}, "type": {"type": "string", "description": "file, directory, symlink or other."}, "size": {"type": "integer", "minimum": 0}, "modified": {"type": "string", "description": "RFC 3339 UTC."}, "entries": {"type": "integer", "minimum": 0, "description": "For a directory."}, "lines": {"type": "integer", "minimum": 0, "description": "For a text file."}, "encoding": {"type": "string", "description": "For a text file: its encoding (`utf-8`, `utf-16le`, `windows-1252`, ...)."}, "bom": {"type": "boolean", "description": "For a text file: it starts with a byte-order mark."}, "line_endings": {"type": "string", "description": "For a text file with newlines: `lf`, `crlf` or `mixed`."}, "binary": {"type": "boolean"}, "mode": {"type": "string", "description": "Permission bits, octal."}, "access": {"type": "object"}, "target": {"type": "string", "description": "A symlink's target as written."}, "target_path": {"type": "string"}, "target_type": {"type": "string"}}, "required": ["path", "type", "size"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let path = WorkspacePath::parse(&args.path)?;
        let metadata = std::fs::symlink_metadata(path.as_str()).map_err(|error| path.io_error(error))?;
        let facts = toolcell_sdk::inspect(&path)?;
        let mut info = describe(&path, &metadata);
        info["mode"] = json!(format!("{:04o}", facts.mode & 0o7777));
        info["access"] = json!({
            "read": effect_name(facts.read),
            "write": effect_name(facts.write),
            "delete": effect_name(facts.delete),
        });
        if metadata.file_type().is_symlink() {
            let target = match std::fs::read_link(path.as_str()) {
                Ok(target) => Some(target.to_string_lossy().into_owned()),
                // The host shows no target that leads outside the workspace.
                Err(error) if error.kind() == std::io::ErrorKind::PermissionDenied => None,
                Err(error) => return Err(path.io_error(error)),
            };
            let directory = path.parent().unwrap_or_else(WorkspacePath::root);
            let joined = target
                .as_deref()
                .and_then(|target| resolve_link(directory.as_str(), target))
                .and_then(|resolved| WorkspacePath::parse(&resolved).ok());
            if let Some(target) = &target {
                info["target"] = json!(target);
            }
            match joined {
                // Only a target that stays inside is looked at (the host judges it again).
                Some(resolved) => {
                    info["target_path"] = json!(resolved.as_str());
                    info["target_type"] = match std::fs::metadata(resolved.as_str()) {
                        Ok(target_metadata) => json!(walk::EntryKind::of(&target_metadata.file_type()).as_str()),
                        Err(error) if error.kind() == std::io::ErrorKind::NotFound => json!("missing"),
                        Err(_) => json!("unavailable"),
                    };
                }
                None => info["target_type"] = json!("outside the workspace"),
            }
        }
        let text = render(&info);
        Ok(Output::text(text).with_structured(info))
    }
}

/// Symlinks followed while resolving a link's target before it counts as a loop.
const MAX_SYMLINK_HOPS: usize = 40;

/// Where `target`, the target of a symlink in the workspace directory `directory`, leads, as
/// the kernel resolves it: component by component from the link's directory, through every
/// symlink on the way (so `..` after a link to a directory goes up from where the link leads,
/// not from the link). `None` if it leaves the workspace or loops.
fn resolve_link(directory: &str, target: &str) -> Option<String> {
    if target.starts_with('/') {
        return None;
    }
    let mut resolved: Vec<String> = directory.split('/').filter(|part| !part.is_empty() && *part != ".").map(str::to_owned).collect();
    let mut pending: std::collections::VecDeque<String> = target.split('/').map(str::to_owned).collect();
    let mut hops = 0;
    while let Some(component) = pending.pop_front() {
        match component.as_str() {
            "" | "." => continue,
            ".." => {
                resolved.pop()?;
                continue;
            }
            _ => resolved.push(component),
        }
        let joined = resolved.join("/");
        let is_link = std::fs::symlink_metadata(&joined).is_ok_and(|metadata| metadata.file_type().is_symlink());
        if !is_link {
            continue;
        }
        hops += 1;
        if hops > MAX_SYMLINK_HOPS {
            return None;
        }
        let next = std::fs::read_link(&joined).ok()?.to_string_lossy().into_owned();
        if next.starts_with('/') {
            return None;
        }
        resolved.pop();
        for (index, part) in next.split('/').enumerate() {
            pending.insert(index, part.to_owned());
        }
    }
    Some(if resolved.is_empty() { ".".to_owned() } else { resolved.join("/") })
}

/// The JSON description of `path` from its (not followed) metadata.
fn describe(path: &WorkspacePath, metadata: &std::fs::Metadata) -> Value {
    let kind = walk::EntryKind::of(&metadata.file_type()).as_str();
    let mut info = json!({
        "path": path.as_str(),
        "type": kind,
        "size": metadata.len(),
    });
    if let Some(modified) = metadata.modified().ok().and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok()) {
        info["modified"] = json!(rfc3339(modified.as_secs()));
    }
    if metadata.is_dir() {
        info["entries"] = json!(std::fs::read_dir(path.as_str()).map(Iterator::count).unwrap_or(0));
    }
    if metadata.is_file() {
        match count_lines(path, metadata.len()) {
            Some(Counted::Text { lines, encoding, line_endings }) => {
                info["lines"] = json!(lines);
                info["encoding"] = json!(encoding.name());
                if encoding.bom {
                    info["bom"] = json!(true);
                }
                if line_endings != "none" {
                    info["line_endings"] = json!(line_endings);
                }
            }
            Some(Counted::Binary) => info["binary"] = json!(true),
            None => {}
        }
    }
    info
}

enum Counted {
    Text { lines: u64, encoding: TextEncoding, line_endings: &'static str },
    Binary,
}

/// Lines, encoding and line endings of a text file (a last line without a newline counts),
/// if it is small enough.
fn count_lines(path: &WorkspacePath, size: u64) -> Option<Counted> {
    if size > MAX_COUNTED_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path.as_str()).ok()?.take(MAX_COUNTED_BYTES).read_to_end(&mut bytes).ok()?;
    let Some(found) = encoding::detect(&bytes, true) else {
        return Some(Counted::Binary);
    };
    let (text, _) = encoding::decode_lossy(&bytes, found);
    let lines = text::lines(&text).count() as u64;
    Some(Counted::Text { lines, encoding: found, line_endings: encoding::line_endings(&text) })
}

fn effect_name(effect: Effect) -> &'static str {
    match effect {
        Effect::Allow => "allow",
        Effect::Ask => "ask",
        Effect::Deny => "deny",
    }
}

/// The text form: one `key: value` line per fact.
fn render(info: &Value) -> String {
    let field = |key: &str| info.get(key).map(|value| value.as_str().map_or_else(|| value.to_string(), str::to_owned));
    let mut lines = vec![format!("{} is a {}", quote(&field("path").unwrap_or_default()), field("type").unwrap_or_default())];
    for key in [
        "size",
        "lines",
        "encoding",
        "bom",
        "line_endings",
        "binary",
        "entries",
        "modified",
        "mode",
        "target",
        "target_path",
        "target_type",
    ] {
        if let Some(value) = field(key) {
            let unit = if key == "size" { " bytes" } else { "" };
            lines.push(format!("{key}: {value}{unit}"));
        }
    }
    if let Some(access) = info.get("access") {
        let effect = |key: &str| access.get(key).and_then(Value::as_str).unwrap_or("deny").to_owned();
        lines.push(format!("access for your role: read {}, write {}, delete {}", effect("read"), effect("write"), effect("delete")));
    }
    lines.join("\n")
}

toolcell_sdk::export_tool!(FileInfo);
