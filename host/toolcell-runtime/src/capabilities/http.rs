//! `wasi:http/outgoing-handler`, governed: wasmtime-wasi-http's own host traits, with its
//! `send_request` hook handing every request to the call's [`CallNet`] (the role's network
//! rules, the call's limits, SSRF-safe resolution, secret headers). The guest sees a
//! `wasi:http` error code; the host keeps the reason (which rule refused, the policy lines
//! that would grant it) and puts it in the call's result and its audit chain, since
//! `HTTP-request-denied` carries no text.

use std::sync::Arc;

use http::HeaderName;
use http_body_util::BodyExt;
use toolcell_net::{CallNet, Decision, Limit, NetError, Outbound, RequestRecord};
use toolcell_policy::Role;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime_wasi_http::{
    DEFAULT_FORBIDDEN_HEADERS, ForbiddenHeaderFilter, RequestOptions, WasiBody, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView,
};

use super::CallState;
use super::filesystem::FsGuard;
use crate::error::Error;

/// The operation name of a request's audit record.
pub(crate) const OPERATION: &str = "http-request";

/// One call's `wasi:http`: wasmtime-wasi-http's context and the hooks that send through the
/// call's [`CallNet`] (`None`: no policy, or no rule: every request is refused).
pub(crate) struct CallHttp {
    ctx: WasiHttpCtx,
    hooks: Hooks,
}

impl CallHttp {
    /// The `wasi:http` of a call of `tool` by `role` (bound for the call; `None` without a
    /// policy: every request is refused).
    pub(crate) fn for_call(outbound: &Outbound, role: &str, tool: &str, bound: Option<&Role>) -> CallHttp {
        let net = bound.map(|bound| outbound.call(role, tool, bound.network().clone()));
        CallHttp { ctx: WasiHttpCtx::new(), hooks: Hooks { net } }
    }

    /// No network at all (a component describing itself).
    pub(crate) fn refusing() -> CallHttp {
        CallHttp { ctx: WasiHttpCtx::new(), hooks: Hooks { net: None } }
    }

    /// Once the call's store is gone: drop `table` (so response bodies still open finish
    /// their records), then put every request of the call on its audit chain.
    pub(crate) fn account(&self, guard: &mut FsGuard, table: ResourceTable) {
        drop(table);
        if let Some(net) = &self.hooks.net {
            account(guard, net.records());
        }
    }
}

struct Hooks {
    net: Option<CallNet>,
}

/// Headers a guest may not set beyond wasmtime-wasi-http's own (`Host`, `Connection`, the
/// proxy headers, …): the host frames the request and says who it is for.
const ALSO_FORBIDDEN: [&str; 6] = ["forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "te", "trailer"];

fn is_forbidden(name: &HeaderName) -> bool {
    DEFAULT_FORBIDDEN_HEADERS.contains(name) || ALSO_FORBIDDEN.contains(&name.as_str())
}

type ResponseFuture = Box<
    dyn Future<
            Output = wasmtime_wasi_http::Result<(
                http::Response<WasiBody>,
                Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
            )>,
        > + Send,
>;

impl WasiHttpHooks for Hooks {
    fn forbidden_header_filter(&mut self) -> ForbiddenHeaderFilter {
        Arc::new(is_forbidden)
    }

    fn is_forbidden_header(&mut self, name: &HeaderName) -> bool {
        is_forbidden(name)
    }

    /// `Host` comes from the URI, set by [`CallNet::send`] itself.
    fn set_host_header(&mut self) -> bool {
        false
    }

    /// A guest names its scheme: no request goes out over a scheme it did not write.
    fn default_scheme(&mut self) -> Option<http::uri::Scheme> {
        None
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _response_error: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> ResponseFuture {
        let net = self.net.clone();
        // wasmtime-wasi-http spawns this on the tokio runtime wasmtime-wasi runs its sync
        // bindings on.
        Box::new(async move {
            let Some(net) = net else {
                return Err(wasmtime_wasi_http::Error::HttpRequestDenied);
            };
            let response = net.send(request).await.map_err(|error| error_code(&error))?;
            let response = response.map(|body| body.map_err(|error| error_code(&error)).boxed_unsync());
            let done: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send> = Box::new(async { Ok(()) });
            Ok((response, done))
        })
    }
}

/// The `wasi:http` error code the guest sees for `error`.
pub(crate) fn error_code(error: &NetError) -> wasmtime_wasi_http::Error {
    use wasmtime_wasi_http::Error as Code;
    match error {
        NetError::Refused { .. } | NetError::AddressRefused { .. } | NetError::UnsupportedScheme { .. } => Code::HttpRequestDenied,
        NetError::Resolve { .. } => Code::DnsError { rcode: None, info_code: None },
        NetError::Connect { .. } => Code::ConnectionRefused,
        NetError::LimitReached { limit, .. } => match limit {
            Limit::ConnectTime => Code::ConnectionTimeout,
            Limit::TotalTime => Code::ConnectionReadTimeout,
            Limit::SentBytes => Code::HttpRequestBodySize(None),
            Limit::ReceivedBytes => Code::HttpResponseBodySize(None),
            _ => Code::ConnectionLimitReached,
        },
        NetError::Tls { .. } => Code::TlsCertificateError,
        NetError::InvalidRequest { .. } => Code::HttpRequestUriInvalid,
        NetError::Secret { .. } | NetError::Roots { .. } => Code::ConfigurationError,
        _ => Code::HttpProtocolError,
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http.ctx, table: &mut self.table, hooks: &mut self.http.hooks }
    }
}

/// Link `wasi:http/outgoing-handler` and `wasi:http/types`.
pub(crate) fn add_to_linker(linker: &mut Linker<CallState>) -> Result<(), Error> {
    wasmtime_wasi_http::p2::add_only_http_to_linker_sync(linker).map_err(super::context::link_error)
}

/// Put the call's requests on its audit chain: an allowed one as a use of the network rule
/// that allowed it, a refused one as a refusal whose message (which rule, and how to grant)
/// fails the call and reaches the agent. No record holds a header's value.
fn account(guard: &mut FsGuard, records: Vec<RequestRecord>) {
    for record in records {
        let subject = record.to_string();
        match record.decision {
            Decision::Allowed => guard.record_capability(OPERATION, &subject, record.rule.as_deref().unwrap_or("network")),
            Decision::Refused => {
                let message = record.reason.clone().unwrap_or_else(|| format!("the request `{subject}` was refused"));
                guard.refuse_capability(OPERATION, &subject, record.rule.as_deref().unwrap_or("network-default-deny"), message);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_denied_and_limits_name_their_bound() {
        let refused = NetError::Refused { rule: None, message: "no rule".to_owned() };
        assert!(matches!(error_code(&refused), wasmtime_wasi_http::Error::HttpRequestDenied));
        let received = NetError::LimitReached { limit: Limit::ReceivedBytes, host: "a".to_owned(), detail: String::new() };
        assert!(matches!(error_code(&received), wasmtime_wasi_http::Error::HttpResponseBodySize(None)));
        let total = NetError::LimitReached { limit: Limit::TotalTime, host: "a".to_owned(), detail: String::new() };
        assert!(matches!(error_code(&total), wasmtime_wasi_http::Error::ConnectionReadTimeout));
    }

    #[test]
    fn the_guest_may_not_set_host_or_proxy_headers() {
        for name in ["host", "proxy-authorization", "x-forwarded-for", "forwarded", "connection"] {
            assert!(is_forbidden(&HeaderName::from_static(name)), "{name}");
        }
        assert!(!is_forbidden(&HeaderName::from_static("accept")));
    }
}
