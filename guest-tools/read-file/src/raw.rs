//! `raw: true`: a file's exact bytes, base64-encoded in the structured result, a window of at
//! most [`MAX_RAW_BYTES`] at a time from `byte_offset`: for binary files and byte-exact copies
//! (MCP resources read files this way).

use base64::Engine as _;
use serde_json::json;
use std::io::{Read as _, Seek as _};

use toolcell_sdk::path::quote;
use toolcell_sdk::{Output, ToolError, WorkspacePath};

/// The most bytes one raw read returns (their base64 is a third larger, within the host's
/// default output cap of 1 MiB).
pub(crate) const MAX_RAW_BYTES: u64 = 512 * 1024;

/// The bytes of the regular file at `path` from `byte_offset`, at most [`MAX_RAW_BYTES`].
pub(crate) fn read_raw(path: &WorkspacePath, byte_offset: u64) -> Result<Output, ToolError> {
    let metadata = std::fs::metadata(path.as_str()).map_err(|error| path.io_error(error))?;
    if metadata.is_dir() {
        return Err(ToolError::InvalidArgs(format!("{} is a directory: list it with list_files", quote(path.as_str()))));
    }
    if !metadata.is_file() {
        return Err(ToolError::InvalidArgs(format!("{} is not a regular file: only files are read", quote(path.as_str()))));
    }
    let mut file = std::fs::File::open(path.as_str()).map_err(|error| path.io_error(error))?;
    let total = file.metadata().map_err(|error| path.io_error(error))?.len();
    if byte_offset > total {
        return Err(ToolError::InvalidArgs(format!(
            "`byte_offset` {byte_offset} is past the end of {} ({total} bytes)",
            quote(path.as_str())
        )));
    }
    file.seek(std::io::SeekFrom::Start(byte_offset)).map_err(|error| path.io_error(error))?;
    let mut bytes = Vec::new();
    file.take(MAX_RAW_BYTES).read_to_end(&mut bytes).map_err(|error| path.io_error(error))?;
    let end = byte_offset + bytes.len() as u64;
    let mut structured = json!({
        "path": path.as_str(),
        "byte_offset": byte_offset,
        "bytes": bytes.len(),
        "total_bytes": total,
        "base64": base64::engine::general_purpose::STANDARD.encode(&bytes),
    });
    let mut text = format!("Bytes {byte_offset}..{end} of {} ({total} bytes), base64 in the structured result.", quote(path.as_str()));
    if end < total {
        structured["next_byte_offset"] = json!(end);
        text.push_str(&format!(" More follow: read on with `byte_offset: {end}`."));
    }
    Ok(Output::text(text).with_structured(structured))
}
