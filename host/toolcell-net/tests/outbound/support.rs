//! Test servers on loopback addresses, a test CA, and policies; no test reaches anything but
//! 127.0.0.0/8.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use toolcell_net::{NetLimits, Outbound, Resolve, ResolveFuture, StaticResolver};
use toolcell_policy::{NetworkRules, Policy};

/// "Public" hosts live on 127.0.0.2, "private" ones on 127.0.0.3: rules treat only the first
/// as reachable (`cidrs = ["127.0.0.2/32"]`).
pub const PUBLIC: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
pub const PRIVATE: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3));

/// Every test's bound.
pub async fn bounded<F: Future>(test: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), test).await.expect("the test finished within 20 s")
}

/// What a server received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body_bytes: usize,
}

#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<Vec<Received>>>);

impl Seen {
    pub fn all(&self) -> Vec<Received> {
        self.0.lock().expect("not poisoned").clone()
    }
}

/// A running test server.
pub struct Server {
    pub address: SocketAddr,
    pub seen: Seen,
}

impl Server {
    pub fn port(&self) -> u16 {
        self.address.port()
    }
}

/// An HTTP (or, with `tls`, HTTPS) server on `ip:port` (`0`: any port). Paths: `/` answers
/// `hello`; `/big` 64 KiB; `/slow` after 5 s; `/redirect?to=URL` a 302 to URL.
pub async fn serve(ip: IpAddr, port: u16, tls: Option<tokio_rustls::TlsAcceptor>) -> Server {
    let listener = TcpListener::bind((ip, port)).await.expect("binds a loopback address");
    let address = listener.local_addr().expect("has an address");
    let seen = Seen::default();
    let recorder = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            let recorder = recorder.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| answer(request, recorder.clone()));
                let builder = hyper::server::conn::http1::Builder::new();
                match tls {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                        }
                    }
                    None => {
                        let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                    }
                }
            });
        }
    });
    Server { address, seen }
}

async fn answer(request: Request<Incoming>, seen: Seen) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let headers = request.headers().clone();
    let body_bytes = request.into_body().collect().await.map(|body| body.to_bytes().len()).unwrap_or(0);
    seen.0.lock().expect("not poisoned").push(Received { path: path.clone(), headers, body_bytes });
    let response = match path.as_str() {
        "/big" => Response::new(Full::new(Bytes::from(vec![b'x'; 64 * 1024]))),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Response::new(Full::new(Bytes::from_static(b"late")))
        }
        "/redirect" => Response::builder()
            .status(302)
            .header("location", query.strip_prefix("to=").unwrap_or_default())
            .body(Full::new(Bytes::new()))
            .expect("a response"),
        _ => Response::new(Full::new(Bytes::from_static(b"hello"))),
    };
    Ok(response)
}

/// A raw server that sends a response head promising 100 000 bytes, 100 of them, then stalls.
pub async fn trickle(ip: IpAddr) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.expect("binds");
    let address = listener.local_addr().expect("has an address");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0; 4096];
                let _ = stream.read(&mut buffer).await;
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n").await;
                let _ = stream.write_all(&[b'y'; 100]).await;
                tokio::time::sleep(Duration::from_secs(10)).await;
            });
        }
    });
    address
}

/// A test CA and server certificates it signs.
pub struct TestCa {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    pub pem: String,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = rcgen::KeyPair::generate().expect("a key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, "toolcell test CA");
        let pem = params.self_signed(&key).expect("self-signed").pem();
        TestCa { params, key, pem }
    }

    /// A TLS acceptor presenting a certificate for `name`, signed by this CA.
    pub fn acceptor(&self, name: &str) -> tokio_rustls::TlsAcceptor {
        toolcell_net::install_crypto_provider();
        let key = rcgen::KeyPair::generate().expect("a key");
        let params = rcgen::CertificateParams::new(vec![name.to_owned()]).expect("params");
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let certificate = params.signed_by(&key, &issuer).expect("signed");
        let private = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("protocols")
            .with_no_client_auth()
            .with_single_cert(vec![certificate.der().clone()], private)
            .expect("a server config");
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}

/// The network rules of role `fetcher` (tool `http_fetch`) in a policy with `rules` (TOML
/// `[[roles.fetcher.network]]` tables).
pub fn rules(rules: &str) -> NetworkRules {
    let text = format!("version = 1\n[roles.fetcher]\ntools = [\"http_fetch\"]\n{rules}");
    let policy = Policy::parse("test.toml", &text, &["http_fetch"]).unwrap_or_else(|error| panic!("{error}\n{text}"));
    policy.role("fetcher").expect("the role").network().clone()
}

/// A resolver with `names`, and an outbound with `limits` trusting `roots`.
pub fn outbound(names: &[(&str, IpAddr)], limits: NetLimits, roots: Option<&str>) -> Outbound {
    let mut resolver = StaticResolver::new();
    for (name, address) in names {
        resolver.insert(name, *address).expect("a name");
    }
    outbound_with(Arc::new(resolver), limits, roots)
}

pub fn outbound_with(resolver: Arc<dyn Resolve>, limits: NetLimits, roots: Option<&str>) -> Outbound {
    let mut builder = Outbound::builder().resolver(resolver).limits(limits);
    if let Some(pem) = roots {
        builder = builder.extra_roots_pem("test-ca.pem", pem.as_bytes());
    }
    builder.build().expect("an outbound")
}

/// Answers its list of answers in turn (the last one again after that).
pub struct Rebinding {
    pub answers: Vec<Vec<IpAddr>>,
    pub calls: AtomicUsize,
}

impl Resolve for Rebinding {
    fn resolve<'a>(&'a self, _host: &'a str) -> ResolveFuture<'a> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let answer = self.answers.get(call).or(self.answers.last()).cloned();
        Box::pin(async move { answer.ok_or_else(|| io::Error::other("no answers")) })
    }
}

/// A GET request without a body.
pub fn get(uri: &str) -> Request<http_body_util::Empty<Bytes>> {
    Request::get(uri).body(http_body_util::Empty::new()).expect("a request")
}

/// The body of `response`, read to its end.
pub async fn text(response: Response<toolcell_net::ResponseBody>) -> Result<String, toolcell_net::NetError> {
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
