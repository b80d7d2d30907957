//! `completion/complete` for the resource template's `path` argument: the workspace paths the
//! role may read that start with what was typed, from the role's own `list_files` (so hidden
//! and unlistable paths never appear), the policy's read rules, and never a file with several
//! hard links.

use rmcp::ErrorData as McpError;
use rmcp::model::{CompleteRequestParams, CompleteResult, CompletionInfo};
use toolcell_host::Session;

use super::{URI_TEMPLATE, listing, readable_files};

/// Complete `request`.
pub(crate) fn complete(session: &Session, request: &CompleteRequestParams) -> Result<CompleteResult, McpError> {
    let Some(uri) = request.r#ref.as_resource_uri() else {
        return Err(McpError::invalid_params(
            format!(
                "this server completes only `ref/resource` (`{URI_TEMPLATE}`), not `{}`: it has no prompts",
                request.r#ref.reference_type()
            ),
            None,
        ));
    };
    if uri != URI_TEMPLATE {
        return Err(McpError::invalid_params(format!("there is no resource template `{uri}`: the one template is `{URI_TEMPLATE}`"), None));
    }
    if request.argument.name != "path" {
        return Err(McpError::invalid_params(
            format!("`{URI_TEMPLATE}` has no argument `{}`: its one argument is `path`", request.argument.name),
            None,
        ));
    }
    let typed = request.argument.value.as_str();
    let (files, _) = listing(session)?;
    let matching = readable_files(session, files.into_iter().filter(|path| path.starts_with(typed)));
    let total = u32::try_from(matching.len()).unwrap_or(u32::MAX);
    let has_more = matching.len() > CompletionInfo::MAX_VALUES;
    let values = matching.into_iter().take(CompletionInfo::MAX_VALUES).collect();
    let completion = CompletionInfo::with_pagination(values, Some(total), has_more)
        .map_err(|reason| McpError::internal_error(format!("completion failed: {reason}"), None))?;
    Ok(CompleteResult::new(completion))
}
