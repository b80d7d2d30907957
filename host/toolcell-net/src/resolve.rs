//! Turning a host name into addresses. The host resolves every name itself, once per request;
//! the addresses are checked, and the connection goes to one of them, never to a second answer.

use std::collections::BTreeMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use crate::NetError;

/// What a resolver's future gives.
pub type ResolveFuture<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

/// Resolves host names to addresses.
pub trait Resolve: Send + Sync {
    /// Every address `host` (a normalised name, never an address literal) has.
    fn resolve<'a>(&'a self, host: &'a str) -> ResolveFuture<'a>;
}

/// The system's resolver (`getaddrinfo`, through tokio), without proxies or environment
/// settings.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> ResolveFuture<'a> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, 0)).await?.map(|address| address.ip()).collect()) })
    }
}

/// Fixed answers (`name → addresses`), as an operator's `--resolve NAME=ADDRESS` gives them;
/// other names go to the fallback resolver, or fail without one.
#[derive(Clone, Default)]
pub struct StaticResolver {
    entries: BTreeMap<String, Vec<IpAddr>>,
    fallback: Option<Arc<dyn Resolve>>,
}

impl std::fmt::Debug for StaticResolver {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("StaticResolver").field("entries", &self.entries).field("has_fallback", &self.fallback.is_some()).finish()
    }
}

impl StaticResolver {
    /// No entries, no fallback.
    pub fn new() -> StaticResolver {
        StaticResolver::default()
    }

    /// Answer `name` with `address` too (entries add up).
    ///
    /// # Errors
    ///
    /// [`NetError::InvalidRequest`] for a name that is not a host name.
    pub fn insert(&mut self, name: &str, address: IpAddr) -> Result<(), NetError> {
        let name = toolcell_policy::normalize_host(name).map_err(|reason| NetError::InvalidRequest { uri: name.to_owned(), reason })?;
        self.entries.entry(name).or_default().push(address);
        Ok(())
    }

    /// Add an entry written `NAME=ADDRESS` (the `--resolve` flag).
    ///
    /// # Errors
    ///
    /// [`NetError::InvalidRequest`] naming the text, when it is not `NAME=ADDRESS`.
    pub fn insert_flag(&mut self, text: &str) -> Result<(), NetError> {
        let invalid = |reason: &str| NetError::InvalidRequest { uri: text.to_owned(), reason: reason.to_owned() };
        let (name, address) =
            text.split_once('=').ok_or_else(|| invalid("write `--resolve NAME=ADDRESS`, such as `api.example.com=203.0.113.7`"))?;
        let address = address
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .map_err(|_| invalid("the part after `=` is not an IP address"))?;
        self.insert(name, address).map_err(|_| invalid("the part before `=` is not a host name"))
    }

    /// Names without an entry go to `fallback`.
    pub fn with_fallback(mut self, fallback: Arc<dyn Resolve>) -> StaticResolver {
        self.fallback = Some(fallback);
        self
    }
}

impl Resolve for StaticResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> ResolveFuture<'a> {
        Box::pin(async move {
            match (self.entries.get(host), &self.fallback) {
                (Some(addresses), _) => Ok(addresses.clone()),
                (None, Some(fallback)) => fallback.resolve(host).await,
                (None, None) => Err(io::Error::new(io::ErrorKind::NotFound, "no `--resolve` entry names it")),
            }
        })
    }
}
