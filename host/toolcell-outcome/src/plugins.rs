//! A plugin that cannot be loaded: the start fails, naming it and the fix, when the policy
//! needs it; otherwise it is left out (never callable) with one warning, so that one broken
//! or unlinkable file in the plugin directory does not stop every command.

use toolcell_policy::ToolMentions;
use toolcell_types::escape_control;

use crate::Error;

/// A plugin left out at start: it could not be loaded and no role uses it, so it is not
/// callable, and named in a warning.
#[derive(Debug, Clone)]
pub struct SkippedPlugin {
    /// Where it came from (`plugin:line_count.wasm`).
    pub origin: String,
    /// Its tool's name, or its file's name when it did not get as far as describing itself.
    pub tool: String,
    /// Why it could not be loaded, on one line.
    pub reason: String,
}

/// The plugins left out so far, and what decides it.
pub struct PluginFailures<'a> {
    /// What the policy names; `None` without a policy (nothing needs a plugin then).
    pub mentions: Option<&'a ToolMentions>,
    /// The plugins left out, in the order they failed.
    pub skipped: Vec<SkippedPlugin>,
}

impl PluginFailures<'_> {
    /// `error` kept the plugin from `origin` (providing `tool`, or named `tool.wasm`) from
    /// loading: an error if the policy needs it, else it is recorded as left out.
    ///
    /// # Errors
    ///
    /// [`Error::NeededPlugin`] (or `error` itself for a name collision) when the policy needs
    /// the plugin.
    pub fn fail_or_skip(&mut self, origin: &str, tool: &str, error: Error) -> Result<(), Error> {
        if let Some(why) = self.mentions.and_then(|mentions| mentions.why_needed(tool)) {
            // A collision says what to do itself.
            if matches!(error, Error::DuplicateTool { .. }) {
                return Err(error);
            }
            return Err(Error::NeededPlugin {
                tool: tool.to_owned(),
                origin: origin.to_owned(),
                why,
                reason: one_line(&reason_of(&error)),
                fix: fix_for(&error, tool),
            });
        }
        self.skipped.push(SkippedPlugin { origin: origin.to_owned(), tool: tool.to_owned(), reason: one_line(&reason_of(&error)) });
        Ok(())
    }

    /// One warning line per plugin left out.
    pub fn warnings(&self) -> impl Iterator<Item = String> + '_ {
        self.skipped.iter().map(|skipped| {
            // A file name is anyone's choice: shown escaped, and named for removal only when
            // it is a tool name `tools remove` takes.
            let (tool, origin) = (escape_control(&skipped.tool), escape_control(&skipped.origin));
            let is_tool_name = !skipped.tool.is_empty()
                && skipped.tool.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_');
            let remove = if is_tool_name {
                format!("`toolcell tools remove {tool}` removes it")
            } else {
                "delete its file from the plugin directory to remove it".to_owned()
            };
            format!(
                "left out the plugin `{tool}` (`{origin}`), which no role of the policy uses: {}; the other tools start without it ({remove})",
                escape_control(&skipped.reason)
            )
        })
    }
}

/// The tool a plugin file provides, as far as its name says (`plugin:line_count.wasm`).
pub fn tool_of_file(origin: &str) -> &str {
    let file = origin.strip_prefix("plugin:").unwrap_or(origin);
    file.strip_suffix(".wasm").unwrap_or(file)
}

/// What failed, without the fix the error's own message gives for a tool not yet in the
/// policy (the needed-plugin error gives the fix for this one, a warning needs none).
fn reason_of(error: &Error) -> String {
    match error {
        Error::ForbiddenImport { import, .. } => {
            format!("it imports `{import}`, which toolcell does not provide and the policy does not let it link as a stub")
        }
        other => other.to_string(),
    }
}

/// What to do about a plugin the policy needs that failed with `error`.
fn fix_for(error: &Error, tool: &str) -> String {
    let replace_or_remove = format!(
        "install a build that loads with `toolcell tools update {tool} FILE`, or remove it with `toolcell tools remove {tool}` and take `{tool}` out of the policy"
    );
    match error {
        Error::ForbiddenImport { import, .. } => {
            let package = import.split_once('/').map_or(import.as_str(), |(package, _)| package);
            format!(
                "if the tool never calls it, let the policy link it as a stub that refuses every call: `stub_imports = [\"{package}/*\"]` in its `[plugins.{tool}]` table; or {replace_or_remove}"
            )
        }
        Error::PinMismatch(_) => format!(
            "install the reviewed build with `toolcell tools update {tool} FILE` (it updates the pin too), or review this one and update the pin"
        ),
        _ => replace_or_remove,
    }
}

/// `text` on one line (a component's stderr may span several).
fn one_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|line| !line.is_empty()).collect::<Vec<_>>().join(" | ")
}

/// The deepest a component may nest components inside it. Real tools nest two deep (a
/// component wrapping the adapter's); compiling costs wasmtime memory and time quadratic in
/// the depth (20,000 levels: 8 GiB), so a deeper one is refused before it is compiled.
pub const MAX_COMPONENT_NESTING: usize = 16;

/// The most components and core modules one component may hold, at any depth (a Python tool
/// holds 16).
pub const MAX_NESTED_UNITS: usize = 1_000;

/// What `bytes` are instead, in one line with the fix, if they are not a WebAssembly component
/// that can be compiled: not a component at all, or nested deeper or wider than any tool is.
pub fn not_a_component(bytes: &[u8]) -> Option<String> {
    not_a_component_preamble(bytes).map(str::to_owned).or_else(|| nesting_problem(bytes))
}

/// Whether the nesting of `bytes` is beyond [`MAX_COMPONENT_NESTING`] or
/// [`MAX_NESTED_UNITS`]; a binary that does not parse is left to the compiler to report.
fn nesting_problem(bytes: &[u8]) -> Option<String> {
    let (mut depth, mut units) = (0_usize, 0_usize);
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        match payload.ok()? {
            wasmparser::Payload::Version { .. } => {
                depth += 1;
                units += 1;
                if depth > MAX_COMPONENT_NESTING + 1 {
                    return Some(format!(
                        "it nests components more than {MAX_COMPONENT_NESTING} deep (no toolchain builds that): rebuild it with a current toolchain"
                    ));
                }
                if units > MAX_NESTED_UNITS {
                    return Some(format!(
                        "it holds more than {MAX_NESTED_UNITS} components and modules (no toolchain builds that): rebuild it with a current toolchain"
                    ));
                }
            }
            wasmparser::Payload::End(_) => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// What `bytes` are instead, in one line with the fix, if their preamble is not a component's.
fn not_a_component_preamble(bytes: &[u8]) -> Option<&'static str> {
    // A component's preamble: the magic, version 0x0d, layer 1; a core module's: version 1, layer 0.
    const COMPONENT: [u8; 8] = *b"\0asm\x0d\0\x01\0";
    const MODULE: [u8; 8] = *b"\0asm\x01\0\0\0";
    match bytes.get(..8) {
        Some(preamble) if preamble == COMPONENT => None,
        Some(preamble) if preamble == MODULE => Some(
            "it is a core WebAssembly module, not a component: build the tool for the wasm32-wasip2 target \
             (wasm32-wasip1 and wasm32-unknown-unknown give modules)",
        ),
        _ if bytes.starts_with(b"\0asm") => {
            Some("it is WebAssembly of an unknown version: build the tool for wasm32-wasip2 with a current toolchain")
        }
        _ => Some(
            "it is not WebAssembly (a `.wasm` file starts with `\\0asm`): build the tool for wasm32-wasip2 \
             (`cargo build --release --target wasm32-wasip2`) and give the `.wasm` from target/wasm32-wasip2/release",
        ),
    }
}
