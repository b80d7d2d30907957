//! `http_fetch`: fetch a URL and write its body into the workspace, within a size cap. An
//! example of a third-party tool that reaches the network: the host lets the request out only
//! where the policy's network rules allow this role and this tool to reach the host, and the
//! write goes through `std::fs`, which the host checks against the same policy.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolcell_sdk::http::{self, Options};
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo, WorkspacePath};

/// The cap when the caller gives none, and the most a caller may ask for.
const DEFAULT_MAX_BYTES: usize = 1 << 20;
const MAX_MAX_BYTES: usize = 8 << 20;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// The URL to fetch (`https://…`; `http://` where the policy allows it). Redirects are
    /// followed, up to 5, each one checked by the host again.
    url: String,
    /// Where to write the body, relative to the workspace root (for example `docs/page.html`).
    path: String,
    /// The most bytes to take (default 1 MiB, at most 8 MiB); a longer body is refused and
    /// nothing is written.
    max_bytes: Option<usize>,
}

#[derive(Serialize, JsonSchema)]
struct Fetched {
    url: String,
    path: String,
    status: u16,
    bytes: usize,
    content_type: Option<String>,
}

struct HttpFetch;

impl Tool for HttpFetch {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new(
            "http_fetch",
            "Fetch a URL into a file",
            "Fetch a URL over HTTP(S) and write the response body into a workspace file. Only hosts the policy \
             allows for your role can be reached; a refusal says which rule refused and how an operator grants it. \
             A status other than 2xx is an error and nothing is written.",
        )
        .args::<Args>()
        .output_of::<Fetched>()
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        let path = WorkspacePath::parse(&args.path)?;
        let max_bytes = args.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
        if max_bytes == 0 || max_bytes > MAX_MAX_BYTES {
            return Err(ToolError::InvalidArgs(format!("`max_bytes` is {max_bytes}: give 1 to {MAX_MAX_BYTES}")));
        }
        let response = http::fetch(&args.url, &Options { max_bytes, ..Options::default() })?;
        if !(200..300).contains(&response.status) {
            return Err(ToolError::Failed(format!("`{}` answered {}; nothing was written", response.url, response.status)));
        }
        std::fs::write(path.as_str(), &response.body).map_err(|error| path.io_error(error))?;
        let fetched = Fetched {
            url: response.url.clone(),
            path: args.path,
            status: response.status,
            bytes: response.body.len(),
            content_type: response.header("content-type").map(str::to_owned),
        };
        Ok(Output::text(format!("Fetched `{}` ({} bytes, status {}) into `{}`.", fetched.url, fetched.bytes, fetched.status, fetched.path))
            .with_structured(fetched))
    }
}

toolcell_sdk::export_tool!(HttpFetch);

// The hosts it is meant for, shown to the operator by `toolcell tools add` beside what the
// policy allows; declaring grants nothing, the policy's network rules decide every request.
toolcell_sdk::declare_hosts!("https://docs.rs", "https://*.wikipedia.org", "https://raw.githubusercontent.com");
