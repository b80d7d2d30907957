//! A model provider's tool call, answered in the provider's own shape, so that a platform can
//! hand toolcell what the model sent and hand the model what toolcell returns.
//!
//! - [`Session::answer_anthropic_tool_use`]: a Messages API `tool_use` content block (the text
//!   editor tool `str_replace_based_edit_tool`, or any tool the role may call) becomes its
//!   `tool_result` block.
//! - [`Session::answer_openai_apply_patch_call`]: a Responses API `apply_patch_call` item (the
//!   built-in `apply_patch` tool) becomes its `apply_patch_call_output` item.
//!
//! Every call is an ordinary governed call of the session: the same policy, locks, audit trail
//! and transaction as [`Session::call`].

use serde_json::{Value, json};

use crate::{Error, Session};

/// Why a provider's item could not be answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The item is not of the shape the provider documents.
    #[error("not an {expected}: {reason}; pass the item exactly as the model's response holds it")]
    Malformed {
        /// What was expected (`Anthropic tool_use block`, ...).
        expected: &'static str,
        /// What is missing or wrong.
        reason: String,
    },
    /// The host could not run the call.
    #[error(transparent)]
    Host(#[from] Error),
}

impl Session {
    /// Carry out an Anthropic `tool_use` content block (`{"type": "tool_use", "id", "name",
    /// "input"}`) and return its `tool_result` block (`{"type": "tool_result", "tool_use_id",
    /// "content", "is_error"}`), the content being the text the model reads.
    ///
    /// # Errors
    ///
    /// [`ProviderError::Malformed`] for a block without a string `id` and `name` and an object
    /// `input`; [`ProviderError::Host`] when the host cannot run the call.
    pub fn answer_anthropic_tool_use(&self, block: &Value) -> Result<Value, ProviderError> {
        const EXPECTED: &str = "Anthropic tool_use block";
        let malformed = |reason: &str| ProviderError::Malformed { expected: EXPECTED, reason: reason.to_owned() };
        if block.get("type").is_some_and(|kind| kind != "tool_use") {
            return Err(malformed("its `type` is not `tool_use`"));
        }
        let id = block.get("id").and_then(Value::as_str).ok_or_else(|| malformed("it has no string `id`"))?;
        let name = block.get("name").and_then(Value::as_str).ok_or_else(|| malformed("it has no string `name`"))?;
        let input = block.get("input").filter(|input| input.is_object()).ok_or_else(|| malformed("its `input` is not an object"))?;
        let result = self.call(name, &input.to_string())?;
        Ok(match result.output {
            Ok(output) if result.images.is_empty() => json!({ "type": "tool_result", "tool_use_id": id, "content": output.text }),
            Ok(output) => {
                // Images go beside the text as image blocks of the same result.
                let mut content = vec![json!({ "type": "text", "text": output.text })];
                for image in &result.images {
                    use base64::Engine as _;
                    let data = base64::engine::general_purpose::STANDARD.encode(&image.data);
                    content.push(json!({ "type": "image", "source": { "type": "base64", "media_type": image.mime_type, "data": data } }));
                }
                json!({ "type": "tool_result", "tool_use_id": id, "content": content })
            }
            Err(error) => json!({ "type": "tool_result", "tool_use_id": id, "content": error.message, "is_error": true }),
        })
    }

    /// Carry out an OpenAI `apply_patch_call` item (`{"type": "apply_patch_call", "call_id",
    /// "operation": {"type": "create_file" | "update_file" | "delete_file", "path", "diff"}}`)
    /// with the `apply_patch` tool, and return its `apply_patch_call_output` item (`{"type",
    /// "call_id", "status": "completed" | "failed", "output"}`).
    ///
    /// # Errors
    ///
    /// [`ProviderError::Malformed`] for an item without a string `call_id` and an object
    /// `operation`; [`ProviderError::Host`] when the host cannot run the call.
    pub fn answer_openai_apply_patch_call(&self, item: &Value) -> Result<Value, ProviderError> {
        const EXPECTED: &str = "OpenAI apply_patch_call item";
        let malformed = |reason: &str| ProviderError::Malformed { expected: EXPECTED, reason: reason.to_owned() };
        if item.get("type").is_some_and(|kind| kind != "apply_patch_call") {
            return Err(malformed("its `type` is not `apply_patch_call`"));
        }
        let call_id = item.get("call_id").and_then(Value::as_str).ok_or_else(|| malformed("it has no string `call_id`"))?;
        let operation =
            item.get("operation").filter(|operation| operation.is_object()).ok_or_else(|| malformed("its `operation` is not an object"))?;
        let result = self.call("apply_patch", &json!({ "operation": operation }).to_string())?;
        let (status, output) = match result.output {
            Ok(output) => ("completed", output.text),
            Err(error) => ("failed", error.message),
        };
        Ok(json!({ "type": "apply_patch_call_output", "call_id": call_id, "status": status, "output": output }))
    }
}
