//! Host bindings generated from `wit/tool.wit` (world `plugin`; the WASI part of
//! `tool-component` is linked from wasmtime-wasi), and the conversions between their types
//! and toolcell's.

use toolcell_types::{ToolError, ToolErrorKind, ToolOutput};

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../../wit",
    // The host stops a component that floods the audit trail through `inspect` or the
    // workflow capabilities.
    imports: {
        "toolcell:tool/context.inspect": trappable,
        "toolcell:tool/workflow.lock-for-task": trappable,
        "toolcell:tool/workflow.release-task": trappable,
        "toolcell:tool/workflow.spawn-session": trappable,
    },
});

/// The component's output for the agent: the text cut at `output_bytes`, and the structured
/// result checked to be JSON and kept as written (dropped if it is larger than `output_bytes`,
/// as the tool wrote it or as it is kept).
pub(crate) fn convert_output(tool: &str, output: toolcell::tool::types::ToolOutput, output_bytes: usize) -> Result<ToolOutput, ToolError> {
    let mut text = output.text;
    crate::limits::cap_output(&mut text, output_bytes);
    let structured = match output.structured {
        None => None,
        Some(json) if json.len() > output_bytes => None,
        Some(text) => Some(toolcell_types::Structured::from_json(text).map_err(|error| {
            ToolError::new(
                ToolErrorKind::Failed,
                format!("the tool `{tool}` returned structured output that is not JSON ({error}); this is a bug in the tool"),
            )
        })?)
        .filter(|structured| structured.json().len() <= output_bytes),
    };
    Ok(ToolOutput { text, structured })
}

/// A component's WIT `tool-error` as the agent sees it.
pub(crate) fn convert_error(error: toolcell::tool::types::ToolError) -> ToolError {
    use toolcell::tool::types::ToolError as Wit;
    let (kind, message) = match error {
        Wit::InvalidArgs(message) => (ToolErrorKind::InvalidArgs, message),
        Wit::NotFound(message) => (ToolErrorKind::NotFound, message),
        Wit::Denied(message) => (ToolErrorKind::Denied, message),
        Wit::Conflict(message) => (ToolErrorKind::Conflict, message),
        Wit::TooLarge(message) => (ToolErrorKind::TooLarge, message),
        Wit::Unsupported(message) => (ToolErrorKind::Unsupported, message),
        Wit::Failed(message) => (ToolErrorKind::Failed, message),
    };
    ToolError::new(kind, message)
}

/// A result as the contract carries it (for the assembly of a split call).
pub(crate) fn to_wit_output(output: &ToolOutput) -> toolcell::tool::types::ToolOutput {
    toolcell::tool::types::ToolOutput {
        text: output.text.clone(),
        structured: output.structured.as_ref().map(|structured| structured.json().to_owned()),
    }
}

/// A host error as the WIT `tool-error` a component receives.
pub(crate) fn to_wit_error(kind: ToolErrorKind, message: String) -> toolcell::tool::types::ToolError {
    use toolcell::tool::types::ToolError as Wit;
    match kind {
        ToolErrorKind::InvalidArgs => Wit::InvalidArgs(message),
        ToolErrorKind::NotFound => Wit::NotFound(message),
        ToolErrorKind::Denied => Wit::Denied(message),
        ToolErrorKind::Conflict => Wit::Conflict(message),
        ToolErrorKind::TooLarge => Wit::TooLarge(message),
        ToolErrorKind::Unsupported => Wit::Unsupported(message),
        // `Failed`, and any kind added later.
        _ => Wit::Failed(message),
    }
}
