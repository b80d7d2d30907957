//! `toolcell serve` as an OAuth 2.1 resource server, through the real binary over HTTP, against
//! an identity provider the test runs on 127.0.0.1 (RFC 8414 metadata and a JWKS that rotates;
//! its keys are fixtures under `tests/fixtures/oauth`).
//!
//! Waits are generous (a loaded 2-core CI): a test waits for an outcome, never for a time,
//! except where the time is what is tested (the rate limit of refetches, the keys' expiry).

use std::io::{BufRead as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

use crate::served;
use served::{agent, alice_service, serve};

const RESOURCE: &str = "https://tools.test/mcp";

/// An identity provider on 127.0.0.1: RFC 8414 metadata naming `/jwks`, and that JWKS.
struct Idp {
    issuer: String,
    jwks: Arc<Mutex<String>>,
    /// How many times the JWKS was fetched.
    fetches: Arc<AtomicUsize>,
    up: Arc<AtomicBool>,
}

impl Idp {
    fn start(keys: &[&str]) -> Idp {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let issuer = format!("http://{}", listener.local_addr().expect("address"));
        let idp = Idp {
            issuer: issuer.clone(),
            jwks: Arc::new(Mutex::new(jwks(keys))),
            fetches: Arc::new(AtomicUsize::new(0)),
            up: Arc::new(AtomicBool::new(true)),
        };
        let (jwks, fetches, up) = (Arc::clone(&idp.jwks), Arc::clone(&idp.fetches), Arc::clone(&idp.up));
        std::thread::spawn(move || {
            // Once down, the listener is closed: connections are refused.
            while up.load(Ordering::SeqCst) {
                let Ok((stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let _ = stream.set_nonblocking(false);
                let mut reader = std::io::BufReader::new(stream);
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).map_or(true, |read| read == 0) || header.trim().is_empty() {
                        break;
                    }
                }
                let (status, body) = match path.as_str() {
                    "/.well-known/oauth-authorization-server" => {
                        ("200 OK", json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")}).to_string())
                    }
                    "/jwks" => {
                        fetches.fetch_add(1, Ordering::SeqCst);
                        ("200 OK", jwks.lock().unwrap_or_else(PoisonError::into_inner).clone())
                    }
                    _ => ("404 Not Found", String::new()),
                };
                let mut stream = reader.into_inner();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        idp
    }

    fn rotate(&self, keys: &[&str]) {
        *self.jwks.lock().unwrap_or_else(PoisonError::into_inner) = jwks(keys);
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

fn fixture_key(kid: &str) -> EncodingKey {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/oauth/{kid}.der"));
    EncodingKey::from_rsa_der(&std::fs::read(path).expect("fixture key"))
}

/// The JWKS of the fixture keys `kids`.
fn jwks(kids: &[&str]) -> String {
    let keys = kids
        .iter()
        .map(|kid| {
            let mut jwk = Jwk::from_encoding_key(&fixture_key(kid), Algorithm::RS256).expect("jwk");
            jwk.common.key_id = Some((*kid).to_owned());
            jwk.common.key_algorithm = None;
            jwk
        })
        .collect();
    serde_json::to_string(&JwkSet { keys }).expect("JWKS")
}

fn now() -> i64 {
    i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs()).expect("seconds")
}

/// The claims of a valid token of `idp` with `scope`, changed by `change`.
fn claims(idp: &Idp, scope: &str, change: impl FnOnce(&mut Value)) -> Value {
    let mut claims = json!({"iss": idp.issuer, "aud": RESOURCE, "sub": "carol", "exp": now() + 600, "nbf": now() - 10, "scope": scope});
    change(&mut claims);
    claims
}

/// `claims` signed RS256 with fixture key `kid`.
fn signed(kid: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &fixture_key(kid)).expect("sign")
}

fn base64url(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A workspace and a configuration trusting `idp` (keys refreshed after 2 s, expired after
/// `max_age`), with one static principal; alice's token.
fn configure(root: &Path, idp: &Idp, max_age: &str) -> (PathBuf, String) {
    alice_service(
        root,
        &format!(
            "[oauth]\nissuer = \"{}\"\nresource = \"{RESOURCE}\"\nworkspace = \"app\"\nleeway = \"5s\"\njwks_refresh = \"2s\"\njwks_max_age = \"{max_age}\"\n\n\
             [[oauth.roles]]\nscope = \"toolcell:write\"\nrole = \"impl\"\n\n[[oauth.roles]]\nscope = \"toolcell:read\"\nrole = \"reviewer\"\n",
            idp.issuer
        ),
    )
}

/// An HTTP answer: status, `WWW-Authenticate`, `Mcp-Session-Id`, body.
struct Answer {
    status: u16,
    challenge: String,
    session: Option<String>,
    text: String,
}

/// POST the JSON-RPC `body` with `token` (if any) in session `session` (if any).
fn post(url: &str, token: Option<&str>, session: Option<&str>, body: &Value) -> Answer {
    let mut request = agent()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("MCP-Protocol-Version", "2025-06-18");
    if let Some(token) = token {
        request = request.header("Authorization", &format!("Bearer {token}"));
    }
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    let mut response = request.send(body.to_string()).expect("POST");
    let header = |name: &str| response.headers().get(name).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let (challenge, session) = (header("www-authenticate").unwrap_or_default(), header("mcp-session-id"));
    let text = response.body_mut().read_to_string().unwrap_or_default();
    Answer { status: response.status().as_u16(), challenge, session, text }
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
           "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "oauth", "version": "1"}}})
}

/// The JSON-RPC message answering `id` in an answer's event stream (or JSON body).
fn message(answer: &Answer, id: u64) -> Value {
    let messages: Vec<Value> = if answer.text.trim_start().starts_with('{') {
        vec![serde_json::from_str(&answer.text).expect("JSON")]
    } else {
        answer.text.lines().filter_map(|line| line.strip_prefix("data: ")).filter_map(|data| serde_json::from_str(data).ok()).collect()
    };
    messages.into_iter().find(|message| message["id"] == id).unwrap_or_else(|| panic!("no answer to {id} in {:?}", answer.text))
}

/// Open a session with `token`, list its tools' names.
fn tool_names(url: &str, token: &str) -> Vec<String> {
    let opened = post(url, Some(token), None, &initialize());
    assert_eq!(opened.status, 200, "{}", opened.text);
    let session = opened.session.expect("a session");
    post(url, Some(token), Some(&session), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let listed = post(url, Some(token), Some(&session), &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}));
    let tools = message(&listed, 1)["result"]["tools"].as_array().cloned().expect("tools");
    tools.iter().filter_map(|tool| tool["name"].as_str().map(str::to_owned)).collect()
}

#[test]
fn access_tokens_are_checked_against_the_issuers_rotating_keys() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let idp = Idp::start(&["key-1", "key-2"]);
    let (config, alice) = configure(temp.path(), &idp, "1h");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    let url = &served.url;

    // RFC 9728 metadata, without a token.
    let metadata: Value =
        agent().get(&format!("{url}.well-known/oauth-protected-resource/mcp")).call().expect("GET").body_mut().read_json().expect("JSON");
    assert_eq!(metadata["resource"], RESOURCE);
    assert_eq!(metadata["authorization_servers"], json!([idp.issuer]));
    assert_eq!(metadata["scopes_supported"], json!(["toolcell:write", "toolcell:read"]));

    // No token: 401, and where to find out how to get one.
    let missing = post(url, None, None, &initialize());
    assert_eq!(missing.status, 401);
    assert_eq!(
        missing.challenge,
        "Bearer resource_metadata=\"https://tools.test/.well-known/oauth-protected-resource/mcp\", scope=\"toolcell:write toolcell:read\""
    );

    // Valid tokens act in the role their scope maps to.
    let writer = signed("key-1", &claims(&idp, "openid toolcell:write", |_| {}));
    let reader = signed("key-2", &claims(&idp, "toolcell:read", |_| {}));
    assert!(tool_names(url, &writer).contains(&"write_file".to_owned()));
    let reading = tool_names(url, &reader);
    assert!(reading.contains(&"read_file".to_owned()) && !reading.contains(&"write_file".to_owned()), "{reading:?}");
    // Static tokens stay.
    assert!(tool_names(url, &alice).contains(&"write_file".to_owned()));

    // Each refusal: 401 `invalid_token` (or 403 `insufficient_scope`) and why.
    let public_pem = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/oauth/key-1.pub.pem")).expect("pem");
    let confused = {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("key-1".to_owned());
        jsonwebtoken::encode(&header, &claims(&idp, "toolcell:write", |_| {}), &EncodingKey::from_secret(&public_pem)).expect("sign")
    };
    let unsigned = format!(
        "{}.{}.",
        base64url(br#"{"alg":"none","kid":"key-1","typ":"JWT"}"#),
        base64url(claims(&idp, "toolcell:write", |_| {}).to_string().as_bytes())
    );
    let cases = [
        (
            "wrong audience",
            signed("key-1", &claims(&idp, "toolcell:write", |claims| claims["aud"] = json!("https://other.test/mcp"))),
            401,
            "its `aud` must be `https://tools.test/mcp`",
        ),
        ("expired", signed("key-1", &claims(&idp, "toolcell:write", |claims| claims["exp"] = json!(now() - 120))), 401, "has expired"),
        (
            "not yet valid",
            signed("key-1", &claims(&idp, "toolcell:write", |claims| claims["nbf"] = json!(now() + 300))),
            401,
            "not valid yet",
        ),
        (
            "another issuer",
            signed("key-1", &claims(&idp, "toolcell:write", |claims| claims["iss"] = json!("https://evil.test"))),
            401,
            "is not from this server's issuer",
        ),
        ("alg none", unsigned, 401, "`alg` \"none\" is not a signature algorithm"),
        ("HS256 keyed with the public key", confused, 401, "does not fit key `key-1` (an RSA key)"),
        ("unknown kid", signed("key-3", &claims(&idp, "toolcell:write", |_| {})), 401, "key `key-3` is not one of the issuer's keys"),
        ("no scope of a role", signed("key-1", &claims(&idp, "openid", |_| {})), 403, "none of the scopes"),
    ];
    for (case, token, status, says) in &cases {
        let refused = post(url, Some(token), None, &initialize());
        assert_eq!(refused.status, *status, "{case}: {}", refused.text);
        assert!(refused.text.contains(says), "{case}: {}", refused.text);
        let error = if *status == 401 { "error=\"invalid_token\"" } else { "error=\"insufficient_scope\"" };
        assert!(refused.challenge.starts_with("Bearer ") && refused.challenge.contains(error), "{case}: {}", refused.challenge);
        assert!(refused.challenge.contains("resource_metadata=\"https://tools.test/.well-known/oauth-protected-resource/mcp\""), "{case}");
    }

    // The issuer rotates key-1 out and key-3 in: a token of key-3 makes the service fetch the
    // keys again (once its rate limit allows), and key-1 is no longer accepted.
    idp.rotate(&["key-2", "key-3"]);
    std::thread::sleep(Duration::from_millis(2100));
    let before = idp.fetches();
    let rotated = signed("key-3", &claims(&idp, "toolcell:write", |_| {}));
    assert!(tool_names(url, &rotated).contains(&"write_file".to_owned()));
    assert_eq!(idp.fetches(), before + 1, "one fetch for the new key");
    let retired = post(url, Some(&writer), None, &initialize());
    assert_eq!(retired.status, 401, "{}", retired.text);
    // Made-up `kid`s do not make the service hammer the issuer.
    for kid in ["key-7", "key-8", "key-9"] {
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(kid.to_owned());
        let madeup = jsonwebtoken::encode(&header, &claims(&idp, "toolcell:write", |_| {}), &fixture_key("key-2")).expect("sign");
        assert_eq!(post(url, Some(&madeup), None, &initialize()).status, 401);
    }
    assert!(idp.fetches() <= before + 2, "at most one more fetch within the rate limit: {}", idp.fetches() - before);

    // No token reaches the operator's log.
    let lines = served.wait_for(|line| line.contains("401 from"));
    for (_, token, _, _) in &cases {
        assert!(!lines.iter().any(|line| line.contains(token.as_str())), "{lines:#?}");
    }
    assert!(!lines.iter().any(|line| line.contains(&writer) || line.contains(&alice)), "{lines:#?}");
}

#[test]
fn cached_keys_serve_while_the_issuer_is_down_until_they_expire() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let idp = Idp::start(&["key-1"]);
    let (config, _) = configure(temp.path(), &idp, "8s");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    let token = signed("key-1", &claims(&idp, "toolcell:write", |_| {}));
    let second = post(&served.url, Some(&token), None, &initialize());
    assert_eq!(second.status, 200, "{}", second.text);
    idp.up.store(false, Ordering::SeqCst);
    let down = Instant::now();
    // The keys fetched last still serve.
    assert_eq!(post(&served.url, Some(&token), None, &initialize()).status, 200);
    // Until they are older than `jwks_max_age`: then 503, and the operator hears why.
    let refused = loop {
        let answer = post(&served.url, Some(&token), None, &initialize());
        if answer.status != 200 {
            break answer;
        }
        assert!(down.elapsed() < Duration::from_secs(60), "the keys never expired");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(down.elapsed() >= Duration::from_secs(2), "the cached keys served on after the issuer went down");
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert!(refused.text.contains("cannot be fetched"), "{}", refused.text);
    let lines = served.wait_for(|line| line.contains("cannot be fetched: `http://127.0.0.1:"));
    assert!(!lines.iter().any(|line| line.contains(&token)), "{lines:#?}");
}

/// Found by an outside attack: subjects seen once kept a share of the connection bound, so the
/// fifth user was refused for good; a `kid` with a newline forged lines in the operator's log;
/// a subject could spell a configured principal's name.
#[test]
fn many_subjects_come_and_go_and_what_they_send_stays_theirs() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let idp = Idp::start(&["key-1"]);
    let (config, _) = configure(temp.path(), &idp, "60s");
    let served = serve(&config, &temp.path().join("state"), &[] as &[&str]);
    for index in 0..12 {
        let token = signed("key-1", &claims(&idp, "toolcell:write", |claims| claims["sub"] = json!(format!("user-{index}"))));
        let answer = post(&served.url, Some(&token), None, &initialize());
        assert_eq!(answer.status, 200, "user-{index}: {}", answer.text);
    }
    // A subject named as the configured principal is a principal of its own (`oauth:alice`).
    let as_alice = signed("key-1", &claims(&idp, "toolcell:write", |claims| claims["sub"] = json!("alice")));
    assert_eq!(post(&served.url, Some(&as_alice), None, &initialize()).status, 200);
    // A `kid` made to look like a log line is shown escaped, one line.
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("zz\ntoolcell serve: reloaded service.toml: 99 principals\u{1b}[31m".to_owned());
    let forged = jsonwebtoken::encode(&header, &claims(&idp, "toolcell:write", |_| {}), &fixture_key("key-1")).expect("sign");
    let refused = post(&served.url, Some(&forged), None, &initialize());
    assert_eq!(refused.status, 401, "{}", refused.text);
    let lines = served.wait_for(|line| line.contains("401 from"));
    assert!(!lines.iter().any(|line| line.starts_with("toolcell serve: reloaded")), "{lines:#?}");
    assert!(!lines.iter().any(|line| line.contains('\u{1b}')), "{lines:#?}");
}
