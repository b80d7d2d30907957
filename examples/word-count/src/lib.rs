//! `word_count`: count the lines, words and bytes of a workspace file, like `wc`. An example of
//! a third-party tool: the schemas come from the types, and everything it touches goes through
//! `std::fs`, which the host checks against the caller's policy.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The file, relative to the workspace root (for example `src/main.rs`).
    path: String,
}

#[derive(Serialize, JsonSchema)]
struct Counts {
    path: String,
    lines: usize,
    words: usize,
    bytes: usize,
}

struct WordCount;

impl Tool for WordCount {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new("word_count", "Word count", "Count the lines, words and bytes of one file, like `wc`, to size it before reading it.")
            .args::<Args>()
            .output_of::<Counts>()
            .read_only()
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let path = WorkspacePath::parse(&args.path)?;
        let bytes = std::fs::read(path.as_str()).map_err(|error| path.io_error(error))?;
        let lines = bytes.iter().filter(|byte| **byte == b'\n').count();
        let words = bytes.split(u8::is_ascii_whitespace).filter(|word| !word.is_empty()).count();
        let counts = Counts { path: args.path, lines, words, bytes: bytes.len() };
        Ok(Output::text(format!("{lines} lines, {words} words, {} bytes in `{}`", counts.bytes, counts.path)).with_structured(counts))
    }
}

toolcell_sdk::export_tool!(WordCount);
