//! Write toolcell tool components in a few lines.
//!
//! A tool is a type implementing [`Tool`]: a description (name, schema, annotations), a
//! serde-deserialisable argument type, and a `call` function. [`export_tool!`] wires it to the
//! WIT `toolcell:tool/tool` export. Build the crate as a `cdylib` for `wasm32-wasip2`.
//!
//! ```ignore
//! use toolcell_sdk::{Tool, ToolInfo, Output, ToolError, WorkspacePath};
//!
//! #[derive(serde::Deserialize)]
//! struct Args { path: String }
//!
//! struct FileSize;
//!
//! impl Tool for FileSize {
//!     type Args = Args;
//!     fn info() -> ToolInfo {
//!         ToolInfo::new("file_size", "File size", "Return the size of a file in bytes.")
//!             .schema(serde_json::json!({
//!                 "type": "object",
//!                 "properties": { "path": { "type": "string" } },
//!                 "required": ["path"],
//!                 "additionalProperties": false
//!             }))
//!             .read_only()
//!     }
//!     fn call(args: Args) -> Result<Output, ToolError> {
//!         let path = WorkspacePath::parse(&args.path)?;
//!         let size = std::fs::metadata(path.as_str()).map_err(|e| path.io_error(e))?.len();
//!         Ok(Output::text(format!("{size}")))
//!     }
//! }
//!
//! toolcell_sdk::export_tool!(FileSize);
//! ```
//!
//! Everything a tool does on the filesystem goes through `std::fs` on workspace-relative
//! paths; the host checks each call. The helpers here exist to give agents good messages, not
//! to enforce anything.

pub mod chain;
pub mod declare;
pub mod encoding;
mod entry;
pub mod http;
pub mod path;
pub mod read;
pub mod scan;
pub mod text;
pub mod time;
pub mod walk;

pub use path::WorkspacePath;

/// Bindings generated from `wit/tool.wit` (world `plugin-listing`: `plugin` and the host's
/// directory listing); the WASI types it names are `wasip2`'s.
#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        world: "plugin-listing",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "export_plugin",
        default_bindings_module: "toolcell_sdk::bindings",
        with: {
            "wasi:filesystem/types@0.2.12": wasip2::filesystem::types,
            "wasi:io/error@0.2.12": wasip2::io::error,
            "wasi:io/poll@0.2.12": wasip2::io::poll,
            "wasi:io/streams@0.2.12": wasip2::io::streams,
            "wasi:clocks/wall-clock@0.2.12": wasip2::clocks::wall_clock,
        },
    });
}

pub use bindings::toolcell::tool::types::ToolError;

/// The kind of a [`ToolError`] as the host names it (`not-found`, `denied`, ...), and its message.
pub fn error_parts(error: &ToolError) -> (&'static str, &str) {
    match error {
        ToolError::InvalidArgs(message) => ("invalid-args", message),
        ToolError::NotFound(message) => ("not-found", message),
        ToolError::Denied(message) => ("denied", message),
        ToolError::Conflict(message) => ("conflict", message),
        ToolError::TooLarge(message) => ("too-large", message),
        ToolError::Unsupported(message) => ("unsupported", message),
        ToolError::Failed(message) => ("failed", message),
    }
}

use bindings::toolcell::tool::context;
use bindings::toolcell::tool::types as wit;

/// A tool component's behaviour.
pub trait Tool {
    /// The arguments, decoded from the JSON object the agent sent. The host has already
    /// checked them against [`ToolInfo::input_schema`].
    type Args: serde::de::DeserializeOwned;

    /// The tool's description. Called once when the host loads the component.
    fn info() -> ToolInfo;

    /// Run the tool.
    ///
    /// # Errors
    ///
    /// A [`ToolError`] whose message names the offending value and says what to do next.
    fn call(args: Self::Args) -> Result<Output, ToolError>;
}

/// What [`Tool::info`] returns: a builder for the WIT `tool-info` record.
#[derive(Debug, Clone)]
pub struct ToolInfo {
    name: String,
    title: String,
    description: String,
    input_schema: serde_json::Value,
    output_schema: Option<serde_json::Value>,
    read_only: bool,
    destructive: bool,
    idempotent: bool,
}

impl ToolInfo {
    /// A tool that may write (not read-only), not destructive, not idempotent, with an empty
    /// object schema. Refine it with the other methods.
    pub fn new(name: &str, title: &str, description: &str) -> Self {
        ToolInfo {
            name: name.to_owned(),
            title: title.to_owned(),
            description: description.to_owned(),
            input_schema: serde_json::json!({ "type": "object" }),
            output_schema: None,
            read_only: false,
            destructive: false,
            idempotent: false,
        }
    }

    /// The JSON Schema of the arguments.
    #[must_use]
    pub fn schema(mut self, schema: serde_json::Value) -> Self {
        self.input_schema = schema;
        self
    }

    /// The arguments' schema, derived from their type (`#[derive(Deserialize, JsonSchema)]`,
    /// with `#[serde(deny_unknown_fields)]` for `additionalProperties: false`): the schema
    /// agents see and the type the tool decodes cannot disagree. Doc comments become
    /// descriptions; `Option` fields are optional.
    #[must_use]
    pub fn args<T: schemars::JsonSchema>(self) -> Self {
        self.schema(schema_of::<T>())
    }

    /// The structured results' schema, derived from their type, as [`args`](Self::args).
    #[must_use]
    pub fn output_of<T: schemars::JsonSchema>(self) -> Self {
        self.output(schema_of::<T>())
    }

    /// The JSON Schema of the structured value of the tool's successful results (an object
    /// schema): MCP clients get it as the tool's `outputSchema`, and `toolcell conformance`
    /// checks every structured result against it.
    #[must_use]
    pub fn output(mut self, schema: serde_json::Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// The tool never modifies the workspace (implies idempotent).
    #[must_use]
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self.idempotent = true;
        self
    }

    /// The tool may overwrite or delete existing content.
    #[must_use]
    pub fn destructive(mut self) -> Self {
        self.destructive = true;
        self
    }

    /// Repeating a call with the same arguments has no further effect.
    #[must_use]
    pub fn idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// The argument schema.
    pub fn input_schema(&self) -> &serde_json::Value {
        &self.input_schema
    }
}

/// The JSON Schema (draft 2020-12) of `T`, without the `$schema` and `title` keys the host
/// has no use for.
fn schema_of<T: schemars::JsonSchema>() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("$schema");
        object.remove("title");
    }
    schema
}

/// A successful result: the text the agent reads and, optionally, a structured JSON value.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    text: String,
    /// The structured value as JSON text, serialized once from the tool's own type: building a
    /// `serde_json::Value` first and printing it through `Display` made a `list_files` call of
    /// 100 entries a quarter slower (`cargo bench -p toolcell-runtime --bench call`).
    structured: Option<String>,
}

impl Output {
    /// A plain-text result.
    pub fn text(text: impl Into<String>) -> Self {
        Output { text: text.into(), structured: None }
    }

    /// The text and the structured value.
    pub fn into_parts(self) -> (String, Option<serde_json::Value>) {
        (self.text, self.structured.and_then(|json| serde_json::from_str(&json).ok()))
    }

    /// Attach the structured form of the result: a JSON value, or any serialisable value (of
    /// the type whose schema [`ToolInfo::output_of`] declared).
    #[must_use]
    pub fn with_structured(mut self, value: impl serde::Serialize) -> Self {
        self.structured = Some(serde_json::to_string(&value).unwrap_or_else(|_| "null".to_owned()));
        self
    }

    /// Attach the structured form of the result as JSON text the tool already has (relayed
    /// from a service, say): the host checks that it is one JSON value (the call fails if not)
    /// and hands it to clients as written, line breaks made spaces (text with a key repeated
    /// in an object, or a number with a fraction or an exponent, as its parsed value is
    /// written).
    #[must_use]
    pub fn with_structured_json(mut self, json: impl Into<String>) -> Self {
        self.structured = Some(json.into());
        self
    }
}

/// The caller's role, as the host names it.
pub fn role() -> String {
    context::role()
}

/// The caller's session id.
pub fn session_id() -> String {
    context::session_id()
}

/// This call's id.
pub fn call_id() -> String {
    context::call_id()
}

pub use bindings::toolcell::tool::context::{Effect, PathFacts};

/// The permission bits of `path` (a final symlink not followed) and what the caller's policy
/// says about reading, writing and deleting it, from the host. Judged like a `stat`.
///
/// # Errors
///
/// `denied` if the path leaves the workspace or the caller may not read it, `not-found` if
/// nothing is there.
pub fn inspect(path: &WorkspacePath) -> Result<PathFacts, ToolError> {
    context::inspect(path.as_str())
}

/// The task the session is bound to (`CHAIN-ID/NNN-slug`), as the host set it.
pub fn bound_task() -> Option<String> {
    context::task()
}

/// The host's task-chain capabilities (`toolcell:tool/workflow`): the workspace's locks,
/// locking paths for a chain, and spawning sessions, each granted by the caller's policy.
pub use bindings::toolcell::tool::workflow;

/// Attach a note to this call's audit record.
pub fn note(text: &str) {
    context::note(text);
}

/// Show the agent an image beside the result's text: the whole file's bytes and its type
/// (`image/png`, `image/jpeg`, `image/gif` or `image/webp`); MCP clients get it as image
/// content. See [`image_type`] for a file's type.
///
/// # Errors
///
/// `invalid-args` if the bytes are not of that type, `too-large` past 5 MiB of images in one
/// call.
pub fn attach_image(mime_type: &str, data: &[u8]) -> Result<(), ToolError> {
    context::attach_image(mime_type, data)
}

/// The image type (`image/png`, `image/jpeg`, `image/gif`, `image/webp`) `bytes` start like,
/// by their signature, or `None`.
pub fn image_type(bytes: &[u8]) -> Option<&'static str> {
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

/// The files under `under` that may hold a match of `pattern`, from the workspace's content
/// index, in walk order, among the files the caller may read; every file that matches is
/// among them. `None` when there is no usable index: search every file then.
pub fn search_candidates(pattern: &str, case_insensitive: bool, under: &WorkspacePath) -> Option<Vec<String>> {
    context::search_candidates(pattern, case_insensitive, under.as_str())
}

/// Ask the host to run this call in up to `parts` parts side by side (see `context.split` in
/// `wit/tool.wit`): how many will run, `0` for none. After a non-zero answer, return at once
/// (what is returned is discarded); the parts then run with [`shard`] set, and the assembly
/// with [`shard_results`].
pub fn split(parts: u32) -> u32 {
    context::split(parts)
}

/// In a part of a split call: `(index, count)`.
pub fn shard() -> Option<(u32, u32)> {
    context::shard().map(|shard| (shard.index, shard.count))
}

/// In the assembly of a split call: each part's result, in part order.
pub fn shard_results() -> Option<Vec<Result<Output, ToolError>>> {
    context::shard_results().map(|results| {
        results.into_iter().map(|result| result.map(|output| Output { text: output.text, structured: output.structured })).collect()
    })
}

/// In a part of a split call: post this part's `progress` (at most 4 KiB) and read every
/// part's latest, in part order (empty for a part that posted none yet); see
/// `context.shard-progress` in `wit/tool.wit`. Outside a part: an empty list.
pub fn shard_progress(progress: &[u8]) -> Vec<Vec<u8>> {
    context::shard_progress(progress)
}

/// What this tool kept under `key` with [`remember`] earlier in the session, if the host still
/// holds it: a hint to check before relying on it, never a fact about the workspace.
pub fn recall(key: &str) -> Option<Vec<u8>> {
    context::recall(key)
}

/// Keep `value` (at most 64 KiB) under `key` for this tool's later calls in the session. The
/// host keeps it in memory, for this tool and session alone, and may drop it at any time.
pub fn remember(key: &str, value: &[u8]) {
    context::remember(key, value);
}

/// Glue between [`Tool`] and the generated `describe` export. Used by [`export_tool!`].
#[doc(hidden)]
pub fn describe<T: Tool>() -> wit::ToolInfo {
    let info = T::info();
    wit::ToolInfo {
        name: info.name,
        title: info.title,
        description: info.description,
        input_schema: info.input_schema.to_string(),
        output_schema: info.output_schema.as_ref().map(serde_json::Value::to_string),
        annotations: wit::Annotations { read_only: info.read_only, destructive: info.destructive, idempotent: info.idempotent },
    }
}

/// Glue between [`Tool`] and the generated `call` export. Used by [`export_tool!`].
#[doc(hidden)]
pub fn call<T: Tool>(args: &str) -> Result<wit::ToolOutput, ToolError> {
    let args: T::Args = serde_json::from_str(args)
        .map_err(|error| ToolError::InvalidArgs(format!("the arguments do not fit the tool's schema: {error}")))?;
    let output = T::call(args)?;
    Ok(wit::ToolOutput { text: output.text, structured: output.structured })
}

/// Export a [`Tool`] implementation as the component's `toolcell:tool/tool` interface.
#[macro_export]
macro_rules! export_tool {
    ($tool:ty) => {
        struct __ToolcellExport;

        impl $crate::bindings::exports::toolcell::tool::tool::Guest for __ToolcellExport {
            fn describe() -> $crate::bindings::toolcell::tool::types::ToolInfo {
                $crate::describe::<$tool>()
            }

            fn call(
                args: ::std::string::String,
            ) -> ::std::result::Result<
                $crate::bindings::toolcell::tool::types::ToolOutput,
                $crate::bindings::toolcell::tool::types::ToolError,
            > {
                $crate::call::<$tool>(&args)
            }
        }

        $crate::bindings::export_plugin!(__ToolcellExport with_types_in $crate::bindings);
    };
}
