//! The tools the host implements itself (`undo_edit`, `lock_files`, `unlock_files`), as they
//! describe themselves: names, descriptions and schemas. The runtime runs them.

use toolcell_locks::Lock;
use toolcell_types::{Annotations, ToolInfo, ToolName};

use crate::schema::ArgsSchema;

/// The name of the undo tool.
pub const UNDO_EDIT: &str = "undo_edit";
/// Every tool the host implements, by name.
pub const NATIVE_TOOLS: &[&str] = &[UNDO_EDIT, "lock_files", "unlock_files"];

/// A tool the host implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Native {
    /// `undo_edit`.
    UndoEdit,
    /// `lock_files`.
    LockFiles,
    /// `unlock_files`.
    UnlockFiles,
}

impl Native {
    /// Every host tool.
    pub const ALL: [Native; 3] = [Native::UndoEdit, Native::LockFiles, Native::UnlockFiles];

    /// The tool's description and compiled schema.
    pub fn describe(self) -> (ToolInfo, ArgsSchema) {
        let (name, title, description, schema, output, annotations) = match self {
            Native::UndoEdit => (
                UNDO_EDIT,
                "Undo edit",
                "Undo this session's last successful change to a file (a write, edit or delete made by a tool call), restoring the content it had before. Call it again to go further back. Undoing a file's creation also removes the directories that call created for it, once they are empty; a directory created by create_directory is undone by its own path while empty. Refused if the file changed since your change: read it and edit it instead.",
                serde_json::json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "Workspace-relative path of the file to restore."}
                    },
                    "required": ["path"],
                    "additionalProperties": false
                }),
                serde_json::json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "restored_from_call": {"type": "string", "description": "The call whose change was undone."},
                        "removed": {"type": "boolean", "description": "The call had created the file, so undoing it removed the file."},
                        "removed_directories": {"type": "array", "items": {"type": "string"}, "description": "Directories the call had created for the file, removed with it (deepest first)."}
                    },
                    "required": ["path", "restored_from_call", "removed"]
                }),
                Annotations { read_only: false, destructive: true, idempotent: false },
            ),
            Native::LockFiles => (
                "lock_files",
                "Lock files",
                "Lock files or globs (e.g. `src/a.rs`, `src/**`) so that no other agent can change what your role may change there until you unlock them or the lease ends: a lock covers only the paths your role may write itself (a path you may not write cannot be locked; a glob skips what you may not write, and the result lists it under `not_covered`). Take an exclusive lock before a multi-step change other agents might race; shared locks let others read-lock too but keep everyone else from writing. All paths are locked or none.",
                serde_json::json!({
                    "type": "object",
                    "properties": {
                        "paths": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 64, "description": "Workspace-relative paths or globs."},
                        "mode": {"type": "string", "enum": ["exclusive", "shared"], "description": "Default exclusive."},
                        "ttl_seconds": {"type": "integer", "minimum": 1, "maximum": 86400, "description": "Lease length; default 300."}
                    },
                    "required": ["paths"],
                    "additionalProperties": false
                }),
                lock_files_schema(),
                // Not read-only: a lock keeps other agents from writing, so a client that
                // approves read-only tools on its own must still ask.
                Annotations { read_only: false, destructive: false, idempotent: true },
            ),
            Native::UnlockFiles => (
                "unlock_files",
                "Unlock files",
                "Release locks you took with lock_files: the given paths or globs, exactly as you locked them, or all of your locks if `paths` is omitted.",
                serde_json::json!({
                    "type": "object",
                    "properties": {
                        "paths": {"type": "array", "items": {"type": "string"}, "maxItems": 64}
                    },
                    "additionalProperties": false
                }),
                locks_schema("released"),
                Annotations { read_only: false, destructive: false, idempotent: true },
            ),
        };
        let (compiled, input_schema) = match ArgsSchema::compile(&schema.to_string()) {
            Ok(compiled) => compiled,
            Err(reason) => unreachable!("the host's own schema for `{name}` is valid: {reason}"),
        };
        let info = ToolInfo {
            name: ToolName::new(name).unwrap_or_else(|error| unreachable!("`{name}` is a valid tool name: {error}")),
            title: title.to_owned(),
            description: description.to_owned(),
            input_schema,
            output_schema: Some(output),
            annotations,
        };
        (info, compiled)
    }
}

/// The output schema of a result listing locks under `key` (the shape of [`lock_json`]).
fn locks_schema(key: &str) -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            key: {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "pattern": {"type": "string"},
                        "owner": {"type": "string"},
                        "session": {"type": "string"},
                        "mode": {"enum": ["exclusive", "shared"]},
                        "token": {"type": "integer", "description": "The lock's fencing token: present it (`--fence`) with the writes it covers."},
                        "expires_at": {"type": "string", "description": "RFC 3339 UTC."}
                    },
                    "required": ["pattern", "owner", "session", "mode", "token", "expires_at"]
                }
            }
        },
        "required": [key]
    })
}

/// The output schema of `lock_files`: the locks, a glob's with what it covers.
fn lock_files_schema() -> serde_json::Value {
    let mut schema = locks_schema("locks");
    let properties = &mut schema["properties"]["locks"]["items"]["properties"];
    properties["covers"] = serde_json::json!({
        "enum": ["writable"],
        "description": "For a glob, under a policy: it covers only the paths the role may write itself."
    });
    properties["not_covered"] = serde_json::json!({
        "type": "array",
        "items": {"type": "string"},
        "description": "For a glob: the rules, protected paths and default deny that may keep it from covering part of what it matches."
    });
    schema
}

/// A lock as JSON, as tools and the CLI show it.
pub fn lock_json(lock: &Lock) -> serde_json::Value {
    serde_json::json!({
        "pattern": lock.pattern,
        "owner": lock.owner,
        "session": lock.session,
        "mode": lock.mode.as_str(),
        "token": lock.fence,
        "expires_at": lock.expires_at(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_files_says_what_a_lock_covers_and_declares_it() {
        let (info, _) = Native::LockFiles.describe();
        assert!(info.description.contains("covers only the paths your role may write itself"), "{}", info.description);
        let schema = info.output_schema.expect("an output schema");
        let properties = &schema["properties"]["locks"]["items"]["properties"];
        assert!(properties.get("covers").is_some() && properties.get("not_covered").is_some(), "{schema}");
    }

    #[test]
    fn native_tools_describe_themselves_validly() {
        for native in Native::ALL {
            let (info, _) = native.describe();
            assert!(NATIVE_TOOLS.contains(&info.name.as_str()));
            assert!(!info.description.is_empty());
        }
    }
}
