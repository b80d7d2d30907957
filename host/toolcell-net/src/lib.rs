//! Governed outbound HTTP for toolcell components: the network half of `wasi:http`, with no
//! wasmtime in it. The runtime calls [`CallNet::send`] from `wasmtime-wasi-http`'s
//! `send_request` hook (`toolcell-runtime`'s `capabilities/http.rs`); everything the policy
//! says happens here.
//!
//! A request goes out only when, in this order:
//! 1. its URI is absolute, `http` or `https`, without credentials;
//! 2. the call is within its request count and total time ([`NetLimits`]);
//! 3. a network rule of the role allows its scheme, host and port
//!    ([`NetworkRules::decide`](toolcell_policy::NetworkRules::decide)); a refusal names the
//!    rule, or gives the policy lines that would grant it;
//! 4. the host resolves (once, by the host's [`Resolve`]) and **every** address passes
//!    [`NetworkRules::check_address`](toolcell_policy::NetworkRules::check_address): loopback,
//!    private, link-local and other special ranges only where the rule's `cidrs` name them.
//!
//! It then connects to one of those checked addresses (no second lookup, so DNS rebinding gets
//! nothing), verifies TLS against the host's name (ring is the one rustls provider; Mozilla's
//! roots plus the operator's), sets `Host` from the URI, drops proxy and hop-by-hop headers,
//! and adds the rule's secret headers, read on the host at send time. Bytes are counted both
//! ways as bodies stream; a redirect is returned to the caller, who sends the next hop as a new
//! request, checked again. Every request, refused or not, leaves a [`RequestRecord`] without any
//! header value in it.
//!
//! What the runtime does: build one [`Outbound`] at start (limits from
//! [`NetLimits::from_settings`] of the policy's `[network]` table, its `roots`, the `--resolve`
//! entries in a [`StaticResolver`] over the [`SystemResolver`]), one [`CallNet`] per tool call
//! with the role's rules, and in `send_request` spawn `call.clone().send(request)`. Suggested
//! `wasi:http` error codes: `Refused`, `AddressRefused`, `UnsupportedScheme` →
//! `HTTP-request-denied` (the message, which says how to grant, goes to the agent through the
//! call's result and audit); `Resolve` → `DNS-error`; `Connect` → `connection-refused`;
//! `LimitReached` → `connection-timeout` (connect time), `connection-read-timeout` (total
//! time), `HTTP-request-body-size`, `HTTP-response-body-size`, `connection-limit-reached`
//! (connections, requests); `Tls` → `TLS-certificate-error`; `Http`, `RequestBody` →
//! `HTTP-protocol-error`; `InvalidRequest` → `HTTP-request-URI-invalid`. Drain
//! [`CallNet::records`] at the end of the call onto its audit chain.
//!
//! A component may declare the hosts it wants in a `toolcell:network` custom section
//! ([`Declaration::from_wasm`]); that grants nothing, but lets `toolcell tools add` show each
//! host beside what the policy says, and the [`grant_lines`] that would allow the others.
//!
//! ```
//! use std::sync::Arc;
//! use toolcell_net::{Decision, NetError, Outbound, StaticResolver};
//! use toolcell_policy::Policy;
//!
//! let policy = Policy::parse("p.toml", r#"
//!     version = 1
//!     [roles.fetcher]
//!     tools = ["http_fetch"]
//!     [[roles.fetcher.network]]
//!     id = "docs"
//!     effect = "allow"
//!     hosts = ["docs.example.com"]
//! "#, &["http_fetch"]).unwrap();
//! let outbound = Outbound::builder().resolver(Arc::new(StaticResolver::new())).build().unwrap();
//! let call = outbound.call("fetcher", "http_fetch", policy.role("fetcher").unwrap().network().clone());
//!
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let request = http::Request::get("https://api.example.com/").body(http_body_util::Empty::<bytes::Bytes>::new()).unwrap();
//! let refused = runtime.block_on(call.send(request)).unwrap_err();
//! assert!(matches!(refused, NetError::Refused { rule: None, .. }));
//! assert!(refused.to_string().contains("hosts = [\"api.example.com\"]"));
//! let records = call.records();
//! assert_eq!((records[0].decision, records[0].host.as_str()), (Decision::Refused, "api.example.com"));
//! ```

mod body;
mod declaration;
mod error;
mod limits;
mod outbound;
mod record;
mod resolve;
mod tls;

pub use body::ResponseBody;
pub use declaration::{Declaration, DeclarationError, DeclaredHost, MAX_DECLARATION_BYTES, MAX_DECLARED_HOSTS, SECTION, grant_lines};
pub use error::{Limit, NetError};
pub use limits::NetLimits;
pub use outbound::{CallNet, Outbound, OutboundBuilder};
pub use record::{Decision, RequestRecord};
pub use resolve::{Resolve, ResolveFuture, StaticResolver, SystemResolver};
pub use tls::install_crypto_provider;
