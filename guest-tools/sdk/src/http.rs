//! Outbound HTTP for tools, through `wasi:http/outgoing-handler`.
//!
//! The host grants a request only where the policy's network rules allow the role and the
//! tool to reach its scheme, host and port, resolves the name itself, refuses private and
//! special addresses unless a rule names them, adds the rule's secret headers (the component
//! never sees them), caps requests, bytes and time, and records every request on the audit
//! trail. A refused request is [`HttpError::Refused`]; the host's message (which rule, and the
//! policy lines that would grant it) is in the call's result for the agent.
//!
//! Redirects are not followed by the host: [`fetch`] follows them here, up to
//! [`Options::max_redirects`], so every hop passes the host's checks again.
//!
//! ```no_run
//! let response = toolcell_sdk::http::fetch("https://example.com/", &toolcell_sdk::http::Options::default())?;
//! assert_eq!(response.status, 200);
//! # Ok::<(), toolcell_sdk::http::HttpError>(())
//! ```

use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
use wasip2::io::streams::StreamError;

use crate::ToolError;

/// How a fetch may go.
#[derive(Debug, Clone)]
pub struct Options {
    /// The most bytes of body to take; a longer body is [`HttpError::TooLarge`].
    pub max_bytes: usize,
    /// Redirects followed (301, 302, 303, 307, 308), each a new request the host checks.
    pub max_redirects: usize,
    /// Headers to send (`Host`, and the headers a policy rule injects, are the host's).
    pub headers: Vec<(String, String)>,
}

impl Default for Options {
    fn default() -> Self {
        Self { max_bytes: 1 << 20, max_redirects: 5, headers: Vec::new() }
    }
}

/// A response, its body read whole (within [`Options::max_bytes`]).
#[derive(Debug, Clone)]
pub struct Response {
    /// The URL that answered (after redirects).
    pub url: String,
    /// The status code.
    pub status: u16,
    /// The headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(key, _)| key.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The URL is not `http://` or `https://` with a host.
    InvalidUrl(String),
    /// The host refused the request: the policy does not allow it (the host says which rule,
    /// and how to grant it, in the call's result).
    Refused(String),
    /// The body is longer than allowed.
    TooLarge(usize),
    /// More redirects than allowed.
    TooManyRedirects(usize),
    /// The request failed on the way (name, connection, TLS, a host limit, the server).
    Failed(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidUrl(url) => write!(formatter, "`{url}` is not an http:// or https:// URL with a host"),
            Self::Refused(url) => write!(formatter, "the host refused the request to `{url}`: the policy's network rules do not allow it"),
            Self::TooLarge(max) => write!(formatter, "the response body is over {max} bytes"),
            Self::TooManyRedirects(max) => write!(formatter, "more than {max} redirects"),
            Self::Failed(reason) => write!(formatter, "the request failed: {reason}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<HttpError> for ToolError {
    fn from(error: HttpError) -> Self {
        match error {
            HttpError::InvalidUrl(_) => ToolError::InvalidArgs(error.to_string()),
            HttpError::Refused(_) => ToolError::Denied(error.to_string()),
            HttpError::TooLarge(_) => ToolError::TooLarge(error.to_string()),
            HttpError::TooManyRedirects(_) | HttpError::Failed(_) => ToolError::Failed(error.to_string()),
        }
    }
}

/// The parts of a URL a request is made of.
struct Url<'a> {
    scheme: Scheme,
    authority: &'a str,
    path_with_query: &'a str,
}

fn parse(url: &str) -> Result<Url<'_>, HttpError> {
    let invalid = || HttpError::InvalidUrl(url.to_owned());
    let (scheme, rest) = url.split_once("://").ok_or_else(invalid)?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        _ => return Err(invalid()),
    };
    let rest = rest.split('#').next().unwrap_or_default();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() || authority.contains('@') || authority.chars().any(char::is_whitespace) {
        return Err(invalid());
    }
    let path_with_query = if path.is_empty() { "/" } else { path };
    Ok(Url { scheme, authority, path_with_query })
}

/// `location` (absolute, or relative to `base`) as an absolute URL.
fn resolve(base: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_owned();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("https", base));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if let Some(path) = location.strip_prefix("//") {
        return format!("{scheme}://{path}");
    }
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let path = &rest[authority.len()..];
    let directory = path.split(['?', '#']).next().unwrap_or_default();
    let directory = &directory[..directory.rfind('/').map_or(0, |at| at + 1)];
    let directory = if directory.is_empty() { "/" } else { directory };
    format!("{scheme}://{authority}{directory}{location}")
}

/// GET `url`, following redirects, the body read within `options.max_bytes`.
///
/// # Errors
///
/// [`HttpError`]: an invalid URL, a refusal by the host, a body over the cap, too many
/// redirects, or a failure on the way.
pub fn fetch(url: &str, options: &Options) -> Result<Response, HttpError> {
    let mut url = url.to_owned();
    for _ in 0..=options.max_redirects {
        let response = send(Method::Get, &url, &options.headers, &[], options.max_bytes)?;
        let redirect = matches!(response.status, 301 | 302 | 303 | 307 | 308);
        match response.header("location") {
            Some(location) if redirect => url = resolve(&url, location),
            _ => return Ok(response),
        }
    }
    Err(HttpError::TooManyRedirects(options.max_redirects))
}

/// Send one request (no redirects followed), the body read within `max_bytes`.
///
/// # Errors
///
/// As [`fetch`].
pub fn send(method: Method, url: &str, headers: &[(String, String)], body: &[u8], max_bytes: usize) -> Result<Response, HttpError> {
    let parts = parse(url)?;
    let fields: Vec<(String, Vec<u8>)> = headers.iter().map(|(name, value)| (name.clone(), value.clone().into_bytes())).collect();
    let fields = Fields::from_list(&fields).map_err(|error| HttpError::Failed(format!("a header is not allowed: {error:?}")))?;
    let request = OutgoingRequest::new(fields);
    let invalid = |_| HttpError::InvalidUrl(url.to_owned());
    request.set_method(&method).map_err(|()| HttpError::Failed("the method is not allowed".to_owned()))?;
    request.set_scheme(Some(&parts.scheme)).map_err(invalid)?;
    request.set_authority(Some(parts.authority)).map_err(invalid)?;
    request.set_path_with_query(Some(parts.path_with_query)).map_err(invalid)?;
    let outgoing = request.body().map_err(|()| HttpError::Failed("the request body cannot be written".to_owned()))?;
    let pending = outgoing_handler::handle(request, None).map_err(|code| error_of(url, &code))?;
    {
        let stream = outgoing.write().map_err(|()| HttpError::Failed("the request body cannot be written".to_owned()))?;
        for chunk in body.chunks(4096) {
            stream.blocking_write_and_flush(chunk).map_err(|error| HttpError::Failed(format!("sending the body: {error:?}")))?;
        }
    }
    OutgoingBody::finish(outgoing, None).map_err(|code| error_of(url, &code))?;
    let response = loop {
        match pending.get() {
            Some(Ok(Ok(response))) => break response,
            Some(Ok(Err(code))) => return Err(error_of(url, &code)),
            Some(Err(())) => return Err(HttpError::Failed("the response was taken twice".to_owned())),
            None => pending.subscribe().block(),
        }
    };
    let status = response.status();
    let headers = response
        .headers()
        .entries()
        .into_iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), String::from_utf8_lossy(&value).into_owned()))
        .collect();
    let incoming = response.consume().map_err(|()| HttpError::Failed("the response body cannot be read".to_owned()))?;
    let mut bytes = Vec::new();
    {
        let stream = incoming.stream().map_err(|()| HttpError::Failed("the response body cannot be read".to_owned()))?;
        loop {
            match stream.blocking_read(64 * 1024) {
                Ok(chunk) => {
                    if bytes.len() + chunk.len() > max_bytes {
                        return Err(HttpError::TooLarge(max_bytes));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Err(StreamError::Closed) => break,
                Err(StreamError::LastOperationFailed(error)) => {
                    return Err(HttpError::Failed(format!("reading the body: {}", error.to_debug_string())));
                }
            }
        }
    }
    drop(wasip2::http::types::IncomingBody::finish(incoming));
    Ok(Response { url: url.to_owned(), status, headers, body: bytes })
}

fn error_of(url: &str, code: &ErrorCode) -> HttpError {
    match code {
        ErrorCode::HttpRequestDenied => HttpError::Refused(url.to_owned()),
        ErrorCode::InternalError(Some(message)) => HttpError::Failed(message.clone()),
        code => HttpError::Failed(format!("{code:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_the_parts_of_a_request_and_redirects_resolve_against_them() {
        let url = parse("https://Example.com:8443/a/b?q=1#frag").expect("a URL");
        assert_eq!((url.authority, url.path_with_query), ("Example.com:8443", "/a/b?q=1"));
        assert_eq!(parse("http://h").expect("a URL").path_with_query, "/");
        for bad in ["ftp://h/", "https:///x", "https://user@h/", "h/x", "https://a b/"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(resolve("https://h/a/b?x", "/c"), "https://h/c");
        assert_eq!(resolve("https://h/a/b?x", "c"), "https://h/a/c");
        assert_eq!(resolve("https://h", "c"), "https://h/c");
        assert_eq!(resolve("https://h/a", "//g/x"), "https://g/x");
        assert_eq!(resolve("https://h/a", "http://g/x"), "http://g/x");
    }
}
