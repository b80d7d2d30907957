//! `write_file`: create a file or replace its whole content.

use std::io::{Read as _, Write};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::encoding::{self, TextEncoding};
use toolcell_sdk::path::quote;
use toolcell_sdk::text;
use toolcell_sdk::walk::EntryKind;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    content: Option<String>,
    content_base64: Option<String>,
    encoding: Option<String>,
    #[serde(default)]
    create_only: bool,
}

/// Existing files up to this size are read whole to tell their encoding; a larger one by its
/// head.
const MAX_SNIFFED_BYTES: u64 = 1024 * 1024;
/// The head of a larger file looked at.
const HEAD_BYTES: u64 = 64 * 1024;

/// What is written: the bytes, and how the text was encoded (`None` for bytes given as
/// base64).
struct Payload {
    bytes: Vec<u8>,
    text: Option<(TextEncoding, &'static str)>,
}

struct WriteFile;

impl Tool for WriteFile {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "write_file",
            "Write file",
            "Create a file, or replace the whole content of an existing one, with `content` \
             (text). A new file is written in UTF-8; a replaced file keeps its encoding (such as \
             windows-1252 or UTF-16, as read_file names it), its byte-order mark and CRLF line \
             endings, unless you give `encoding` (`utf-8`, `utf-16le`, `windows-1252`, ...). A \
             character the encoding cannot hold is refused and nothing is written. For a binary \
             file give its bytes as `content_base64` instead of `content`. Missing parent \
             directories are created. To change part of an existing file, prefer edit_file: it \
             is safer and shows what changed. Read a file before replacing it. With \
             `create_only: true` the call fails instead of replacing an existing file. The \
             structured result is `{path, action: created|modified, bytes}`, with `encoding` \
             when it is not UTF-8. A replaced file keeps its permissions. Paths are relative to \
             the workspace root.",
        )
        .schema(json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The file to write, relative to the workspace root."
                },
                "content": {
                    "type": "string",
                    "description": "The complete new content of the file, as text. Give this or `content_base64`."
                },
                "content_base64": {
                    "type": "string",
                    "description": "The complete new content as bytes in base64 (standard alphabet), for a binary file; instead of `content`."
                },
                "encoding": {
                    "type": "string",
                    "description": "The encoding to write `content` in (`utf-8`, `utf-16le`, `utf-16be`, `windows-1252`, `shift_jis`, ...). Default: the replaced file's own, else UTF-8."
                },
                "create_only": {
                    "type": "boolean",
                    "description": "Fail if the file already exists, instead of replacing it. Default: false."
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }))
        .destructive()
        .idempotent()
        .output(json!({"type": "object", "properties": {"path": {"type": "string"}, "action": {"type": "string", "description": "created or overwritten."}, "bytes": {"type": "integer", "minimum": 0}, "encoding": {"type": "string", "description": "The encoding the text was written in, when it is not UTF-8."}, "bom": {"type": "boolean", "description": "The file starts with a byte-order mark."}, "line_endings": {"type": "string", "description": "`crlf` when LF line endings of `content` were written as CRLF to keep the file's."}, "binary": {"type": "boolean", "description": "The bytes came from `content_base64`."}}, "required": ["path", "action", "bytes"]}))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let path = WorkspacePath::parse(&args.path)?;
        if path.is_root() {
            return Err(ToolError::InvalidArgs("`.` is the workspace root, a directory: give the path of a file to write".to_owned()));
        }
        let existed = match toolcell_sdk::scan::stat(path.as_str()) {
            Ok(metadata) if metadata.kind == EntryKind::Directory => {
                return Err(ToolError::Unsupported(format!("{} is a directory: give the path of a file inside it", quote(path.as_str()))));
            }
            Ok(metadata) if metadata.kind != EntryKind::File => {
                return Err(ToolError::Unsupported(format!(
                    "{} is not a regular file (it is a FIFO, socket or device): write_file only writes regular files",
                    quote(path.as_str())
                )));
            }
            Ok(_) => true,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                path.check_new_name()?;
                false
            }
            Err(error) => return Err(path.io_error(error)),
        };
        if existed && args.create_only {
            return Err(ToolError::Conflict(format!(
                "{} already exists and `create_only` is set: read it and use edit_file to change it, or call write_file without `create_only` to replace it",
                quote(path.as_str())
            )));
        }
        // Everything is checked before anything is written.
        let payload = payload(&path, existed, args.content, args.content_base64, args.encoding.as_deref())?;
        if let Some(parent) = path.parent().filter(|parent| !parent.is_root()) {
            std::fs::create_dir_all(parent.as_str()).map_err(|error| parent.io_error(error))?;
        }
        if args.create_only {
            // `create_new` makes the existence check and the creation one step, so a file that
            // appeared since the check above is not replaced.
            let mut file =
                std::fs::OpenOptions::new().write(true).create_new(true).open(path.as_str()).map_err(|error| path.io_error(error))?;
            file.write_all(&payload.bytes).map_err(|error| path.io_error(error))?;
        } else {
            // Writing in place (truncate, then write) keeps the file's mode and owner.
            std::fs::write(path.as_str(), &payload.bytes).map_err(|error| path.io_error(error))?;
        }
        let bytes = payload.bytes.len();
        let how = match payload.text {
            None => ", from base64".to_owned(),
            Some((encoding, _)) if encoding.is_notable() => format!(", in {}", encoding.describe()),
            Some(_) => String::new(),
        };
        let (action, text) = if existed {
            ("modified", format!("Replaced the content of {} ({bytes} bytes{how}).", quote(path.as_str())))
        } else {
            ("created", format!("Created {} ({bytes} bytes{how}).", quote(path.as_str())))
        };
        let mut structured = json!({
            "path": path.as_str(),
            "action": action,
            "bytes": bytes,
        });
        match payload.text {
            None => structured["binary"] = json!(true),
            Some((encoding, line_endings)) => {
                encoding.annotate(&mut structured);
                if line_endings == "crlf" {
                    structured["line_endings"] = json!("crlf");
                }
            }
        }
        Ok(Output::text(text).with_structured(structured))
    }
}

/// The bytes to write: `content_base64` decoded, or `content` in the encoding asked for, else
/// the replaced file's (with its byte-order mark, and CRLF for LF if all its lines end so),
/// else UTF-8.
fn payload(
    path: &WorkspacePath,
    existed: bool,
    content: Option<String>,
    content_base64: Option<String>,
    encoding: Option<&str>,
) -> Result<Payload, ToolError> {
    let content = match (content, content_base64) {
        (Some(content), None) => content,
        (None, Some(base64)) => {
            if encoding.is_some() {
                return Err(ToolError::InvalidArgs(
                    "`encoding` is for `content` (text); `content_base64` is written as the exact bytes it holds: leave out `encoding`"
                        .to_owned(),
                ));
            }
            let compact: String = base64.chars().filter(|character| !character.is_ascii_whitespace()).collect();
            let bytes = BASE64.decode(compact.as_bytes()).map_err(|error| {
                ToolError::InvalidArgs(format!(
                    "`content_base64` is not valid base64 ({error}): encode the bytes with the standard alphabet"
                ))
            })?;
            return Ok(Payload { bytes, text: None });
        }
        (Some(_), Some(_)) => {
            return Err(ToolError::InvalidArgs("give either `content` (text) or `content_base64` (bytes), not both".to_owned()));
        }
        (None, None) => {
            return Err(ToolError::InvalidArgs("nothing to write: give `content` (text) or `content_base64` (bytes in base64)".to_owned()));
        }
    };
    let existing = if existed { existing_text(path)? } else { None };
    let asked = encoding.map(TextEncoding::from_label).transpose()?;
    let target = match (asked, existing) {
        // Asked for the file's own encoding: its byte-order mark stays as it is.
        (Some(asked), Some((own, _))) if asked.encoding == own.encoding => own,
        (Some(asked), _) => asked,
        (None, Some((own, _))) => own,
        (None, None) => TextEncoding::UTF_8,
    };
    let crlf = existing.is_some_and(|(_, line_endings)| line_endings == "crlf") && content.contains('\n') && !content.contains("\r\n");
    let mut text = if crlf { content.replace('\n', "\r\n") } else { content };
    if target.bom && text.starts_with(text::BOM) {
        // The byte-order mark is written once.
        text.drain(..text::BOM.len());
    }
    let bytes = encoding::encode(&text, target).map_err(|unencodable| unencodable.to_error(path))?;
    Ok(Payload { bytes, text: Some((target, if crlf { "crlf" } else { "lf" })) })
}

/// The encoding and line endings of the text file at `path`, or `None` if it is binary or
/// cannot be read.
fn existing_text(path: &WorkspacePath) -> Result<Option<(TextEncoding, &'static str)>, ToolError> {
    // Only a file the role may read without asking is looked at: a write-only path is not
    // read (nor an approval asked for) just to tell its encoding.
    let may_read = toolcell_sdk::inspect(path).is_ok_and(|facts| matches!(facts.read, toolcell_sdk::Effect::Allow));
    // Nor is a file with other hard links, which the host opens under no name (the write
    // then says why).
    let single_link = toolcell_sdk::scan::link_count(path.as_str()).is_ok_and(|links| links <= 1);
    if !may_read || !single_link {
        return Ok(None);
    }
    let Ok(file) = toolcell_sdk::scan::open_reader(path.as_str()) else {
        return Ok(None);
    };
    let size = file.size().map_err(|error| path.io_error(error))?;
    // One byte more than the file has: all of it is read, and known to be all.
    let limit = if size <= MAX_SNIFFED_BYTES { size + 1 } else { HEAD_BYTES };
    // Room for all of it: read in one go, not in doubling pieces.
    let mut bytes = Vec::with_capacity(usize::try_from(limit).unwrap_or(usize::MAX));
    file.take(limit).read_to_end(&mut bytes).map_err(|error| path.io_error(error))?;
    let Some(found) = encoding::detect(&bytes, (bytes.len() as u64) < limit) else {
        return Ok(None);
    };
    let (text, _) = encoding::decode_lossy(&bytes, found);
    Ok(Some((found, encoding::line_endings(&text))))
}

toolcell_sdk::export_tool!(WriteFile);
