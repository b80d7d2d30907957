//! Types shared by the toolcell host crates. Pure data: no wasmtime, no filesystem.
//!
//! They mirror the WIT `toolcell:tool/types` interface (`wit/tool.wit`) on the host side, in a
//! form the policy, audit, MCP and CLI layers can use without knowing about components.
//!
//! ```
//! use toolcell_types::{ToolError, ToolErrorKind, ToolName};
//!
//! let name = ToolName::new("read_file").unwrap();
//! assert_eq!(name.as_str(), "read_file");
//! assert!(ToolName::new("Read File").is_err());
//!
//! let error = ToolError::new(ToolErrorKind::NotFound, "`a.txt` does not exist");
//! assert_eq!(error.to_string(), "not-found: `a.txt` does not exist");
//! ```

use serde::{Deserialize, Serialize};

mod structured;
pub use structured::Structured;

/// `text` with its control characters escaped (`\n` becomes `\\n`), and nothing else changed:
/// for showing paths and names in messages and logs, where a file name must not be able to
/// forge a line.
///
/// ```
/// assert_eq!(toolcell_types::escape_control("café\nFAKE"), "café\\nFAKE");
/// ```
pub fn escape_control(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        if character.is_control() {
            escaped.extend(character.escape_default());
        } else {
            escaped.push(character);
        }
    }
    escaped
}

/// `text` made safe to print on a terminal: control characters other than newline and tab
/// (escape sequences, carriage returns, bells) escaped as [`escape_control`] does, so that text
/// a component returned cannot drive the terminal that shows it.
pub fn escape_terminal(text: &str) -> std::borrow::Cow<'_, str> {
    let is_unsafe = |character: char| character.is_control() && character != '\n' && character != '\t';
    if !text.contains(is_unsafe) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for character in text.chars() {
        if is_unsafe(character) {
            escaped.extend(character.escape_default());
        } else {
            escaped.push(character);
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// A tool's name: 1 to 64 characters of `a-z`, `0-9` and `_`, starting with a letter.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct ToolName(String);

/// Why a string is not a valid [`ToolName`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{name}` is not a valid tool name: {reason}; use 1 to 64 characters of `a-z`, `0-9` and `_`, starting with a letter (for example `read_file`)"
)]
pub struct InvalidToolName {
    /// The rejected name (control characters escaped).
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl ToolName {
    /// The longest name accepted.
    pub const MAX_LEN: usize = 64;

    /// Validate a tool name.
    ///
    /// # Errors
    ///
    /// [`InvalidToolName`] naming the problem.
    pub fn new(name: &str) -> Result<Self, InvalidToolName> {
        let invalid = |reason| InvalidToolName { name: name.escape_default().to_string(), reason };
        if name.is_empty() {
            return Err(invalid("it is empty"));
        }
        if name.len() > Self::MAX_LEN {
            return Err(invalid("it is longer than 64 characters"));
        }
        if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
            return Err(invalid("it does not start with a lowercase letter"));
        }
        if !name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
            return Err(invalid("it has a character other than `a-z`, `0-9` and `_`"));
        }
        Ok(ToolName(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.0)
    }
}

/// Hints about a tool's effect (MCP's tool annotations). They grant nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Annotations {
    /// The tool never modifies the workspace.
    pub read_only: bool,
    /// The tool may overwrite or delete existing content.
    pub destructive: bool,
    /// Repeating a call has no further effect.
    pub idempotent: bool,
}

/// What a tool says about itself, validated by the host when it loads the component.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolInfo {
    /// The name agents call it by.
    pub name: ToolName,
    /// A short human-readable title.
    pub title: String,
    /// When and how to use it, for an agent.
    pub description: String,
    /// The JSON Schema of its arguments (an object schema).
    pub input_schema: serde_json::Value,
    /// The JSON Schema of its successful results' structured value (an object schema), if it
    /// returns one.
    pub output_schema: Option<serde_json::Value>,
    /// Hints about its effect.
    pub annotations: Annotations,
}

/// A successful tool result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolOutput {
    /// What the agent reads.
    pub text: String,
    /// The same result as JSON, if the tool gives one (kept as the tool wrote it; read as a
    /// `serde_json::Value` through `Deref`).
    pub structured: Option<Structured>,
}

/// An image a tool showed the agent beside its result's text (`context.attach-image`).
#[derive(Clone, PartialEq, Eq)]
pub struct Image {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub mime_type: String,
    /// The whole image file.
    pub data: Vec<u8>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Image").field("mime_type", &self.mime_type).field("bytes", &self.data.len()).finish()
    }
}

/// The image type `bytes` start like, by their signature: `image/png`, `image/jpeg`,
/// `image/gif` or `image/webp`; `None` for anything else.
pub fn image_mime_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// The kinds of [`ToolError`], one per case of the WIT `tool-error` variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// The arguments are malformed or inconsistent.
    InvalidArgs,
    /// A named path does not exist.
    NotFound,
    /// The host refused an operation (outside the workspace, or the policy).
    Denied,
    /// The workspace is not in the state the call expects.
    Conflict,
    /// An input or result exceeds a limit.
    TooLarge,
    /// The tool does not handle this kind of input.
    Unsupported,
    /// Anything else, including a tool that crashed.
    Failed,
}

impl ToolErrorKind {
    /// The WIT case name, such as `invalid-args`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolErrorKind::InvalidArgs => "invalid-args",
            ToolErrorKind::NotFound => "not-found",
            ToolErrorKind::Denied => "denied",
            ToolErrorKind::Conflict => "conflict",
            ToolErrorKind::TooLarge => "too-large",
            ToolErrorKind::Unsupported => "unsupported",
            ToolErrorKind::Failed => "failed",
        }
    }
}

impl std::fmt::Display for ToolErrorKind {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// A failed tool call as the agent sees it: a kind, a message that names the offending value,
/// and, where the host knows one, a hint that says what to do next (the CLI prints it as a
/// `hint:` line; MCP adds it to the text and to the result's `_meta`). Never holds a host
/// path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ToolError {
    /// What went wrong.
    pub kind: ToolErrorKind,
    /// The explanation for the agent.
    pub message: String,
    /// What to do next, when the host knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl ToolError {
    /// A tool error of `kind`.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        ToolError { kind, message: message.into(), hint: None }
    }

    /// The same error, with a hint of what to do next.
    #[must_use]
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The message and, on a line of its own, the hint: everything an agent reading text
    /// should see.
    pub fn full_text(&self) -> String {
        match &self.hint {
            Some(hint) => format!("{self}\nhint: {hint}"),
            None => self.to_string(),
        }
    }
}

/// `count` and the noun that goes with it: `1 line`, `2 lines`.
///
/// ```
/// assert_eq!(toolcell_types::counted(1, "line", "lines"), "1 line");
/// assert_eq!(toolcell_types::counted(2, "directory", "directories"), "2 directories");
/// ```
pub fn counted(count: u64, one: &str, many: &str) -> String {
    format!("{count} {}", if count == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names() {
        let valid = ["read_file", "a", "x9", "a_b_c"];
        for name in valid {
            assert!(ToolName::new(name).is_ok(), "{name} should be valid");
        }
        let long = "a".repeat(65);
        let invalid = ["", "Read", "9lives", "_x", "read-file", "read file", "é", long.as_str(), "a\n"];
        for name in invalid {
            assert!(ToolName::new(name).is_err(), "{name:?} should be invalid");
        }
        assert!(ToolName::new(&"a".repeat(64)).is_ok());
    }

    #[test]
    fn invalid_name_message_escapes_control_characters() {
        let error = ToolName::new("a\nb").expect_err("newline is invalid");
        assert!(error.to_string().starts_with("`a\\nb` is not a valid tool name"));
    }
}
