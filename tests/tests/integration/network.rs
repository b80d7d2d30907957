//! Outbound HTTP through the real host with the example component `examples/http-fetch`,
//! against servers the tests start on loopback addresses: "public" hosts on 127.0.0.2,
//! "private" ones on 127.0.0.3, names given by the resolver the host is built with. No test
//! sends anything beyond 127.0.0.0/8.

#[path = "../../../host/toolcell-net/tests/outbound/support.rs"]
#[expect(dead_code, reason = "toolcell-net's own tests use the rest of the support code")]
mod support;

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use toolcell_audit::{Kind, Record};
use toolcell_net::{Resolve, StaticResolver};
use toolcell_runtime::{CallOutcome, Runtime};
use toolcell_tests::{Fixture, audit_records, builtin_runtime_builder, network_examples, shared_cache_dir};
use toolcell_types::ToolErrorKind;

use support::{PRIVATE, PUBLIC, Rebinding, Server, TestCa, serve};

fn http_fetch() -> &'static [u8] {
    network_examples::COMPONENTS.iter().find(|(name, _)| *name == "http_fetch").map(|(_, wasm)| *wasm).expect("the example is built")
}

/// A tokio runtime of the test's own for its servers (the host runs requests on wasmtime's).
fn servers() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("a tokio runtime")
}

/// The host: `http_fetch` for role `fetcher` (writing under `out/`), the policy with the
/// `[network]` table `settings` and the network rules `rules`, written with `files` into
/// `directory`, names resolved as `names` say, audited into `state`.
fn host(directory: &Path, state: &Path, settings: &str, rules: &str, names: &[(&str, IpAddr)]) -> Runtime {
    let mut resolver = StaticResolver::new();
    for (name, address) in names {
        resolver.insert_flag(&format!("{name}={address}")).expect("a name");
    }
    host_with(directory, state, settings, rules, Arc::new(resolver))
}

/// [`host`], with names resolved by `resolver`.
fn host_with(directory: &Path, state: &Path, settings: &str, rules: &str, resolver: Arc<dyn Resolve>) -> Runtime {
    let policy = format!(
        "version = 1\n{settings}\n[roles.fetcher]\ntools = [\"http_fetch\"]\n[[roles.fetcher.rules]]\naccess = [\"read\", \"list\", \"write\"]\npaths = [\"out/**\"]\neffect = \"allow\"\n{rules}"
    );
    std::fs::write(directory.join("policy.toml"), &policy).expect("write the policy");
    builtin_runtime_builder()
        .component("example:http_fetch", http_fetch())
        .policy_file(directory.join("policy.toml"))
        .audit_dir(state)
        .resolver(resolver)
        .build()
        .unwrap_or_else(|error| panic!("the host does not build: {error}\n{policy}"))
}

/// Allow `hosts` on `scheme` at `port`, reaching `cidrs` among the special addresses.
fn rule(id: &str, hosts: &str, scheme: &str, port: u16, cidrs: &str) -> String {
    format!(
        "[[roles.fetcher.network]]\nid = \"{id}\"\neffect = \"allow\"\nhosts = [{hosts}]\nschemes = [\"{scheme}\"]\nports = [{port}]\ncidrs = [{cidrs}]\n"
    )
}

fn fetch(fixture: &Fixture, runtime: &Runtime, url: &str) -> CallOutcome {
    std::fs::create_dir_all(fixture.root().join("out")).expect("create out/");
    fixture.call_on(runtime, "fetcher", "http_fetch", &json!({"url": url, "path": "out/page.txt"}), None)
}

fn requests(runtime: &Runtime) -> Vec<Record> {
    audit_records(runtime)
        .into_iter()
        .filter(|record| record.kind == Kind::Fs && record.operation.as_deref() == Some("http-request"))
        .collect()
}

fn public_server(servers: &tokio::runtime::Runtime) -> Server {
    servers.block_on(serve(PUBLIC, 0, None))
}

#[test]
fn an_allowed_host_is_fetched_into_the_workspace_and_audited() {
    let servers = servers();
    let server = public_server(&servers);
    let (directory, state) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("state"));
    let rules = rule("api", "\"api.test\"", "http", server.port(), "\"127.0.0.2/32\"");
    let runtime = host(directory.path(), state.path(), "", &rules, &[("api.test", PUBLIC)]);
    let fixture = Fixture::new();
    let outcome = fetch(&fixture, &runtime, &format!("http://api.test:{}/", server.port()));
    let output = outcome.result.expect("fetched");
    assert!(output.text.contains("(5 bytes, status 200)"), "{}", output.text);
    assert_eq!(fixture.read("out/page.txt"), b"hello");
    assert_eq!(server.seen.all().len(), 1);
    let records = requests(&runtime);
    assert_eq!(records.len(), 1, "{records:?}");
    let path = records[0].path.as_deref().expect("a subject");
    assert!(path.starts_with(&format!("GET http://api.test:{} address=127.0.0.2 status=200", server.port())), "{path}");
    assert_eq!((records[0].decision.as_deref(), records[0].rule.as_deref()), (Some("allow"), Some("api")));
}

#[test]
fn a_denied_host_port_or_scheme_is_refused_with_the_lines_that_would_grant_it() {
    let servers = servers();
    let server = public_server(&servers);
    let (directory, state) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("state"));
    let rules = rule("api", "\"api.test\"", "http", server.port(), "\"127.0.0.2/32\"");
    let names = [("api.test", PUBLIC), ("other.test", PUBLIC)];
    let runtime = host(directory.path(), state.path(), "", &rules, &names);
    let fixture = Fixture::new();
    let other_port = if server.port() == 65535 { 65534 } else { server.port() + 1 };
    let refused = [
        (format!("http://other.test:{}/", server.port()), "hosts = [\"other.test\"]".to_owned()),
        (format!("http://api.test:{other_port}/"), format!("ports = [{other_port}]")),
        (format!("https://api.test:{}/", server.port()), format!("`https://api.test:{}`", server.port())),
    ];
    for (url, grant) in &refused {
        let error = fetch(&fixture, &runtime, url).result.expect_err("refused");
        assert_eq!(error.kind, ToolErrorKind::Denied, "{url}: {error}");
        assert!(error.message.contains("[[roles.fetcher.network]]") && error.message.contains(grant.as_str()), "{url}: {}", error.message);
        fixture.assert_no_host_path(&error.message);
    }
    assert!(server.seen.all().is_empty(), "nothing reached the server");
    assert!(!fixture.root().join("out/page.txt").exists());
    let records = requests(&runtime);
    assert_eq!(records.len(), 3, "{records:?}");
    assert!(records.iter().all(|record| record.decision.as_deref() == Some("deny")), "{records:?}");
}

#[test]
fn a_name_allowed_by_pattern_that_resolves_to_loopback_is_refused_until_a_cidr_rule_allows_it() {
    let servers = servers();
    let server = servers.block_on(serve(PRIVATE, 0, None));
    let url = format!("http://wiki.corp.test:{}/", server.port());
    let names = [("wiki.corp.test", PRIVATE)];
    let fixture = Fixture::new();
    let (directory, state) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("state"));
    let without = host(directory.path(), state.path(), "", &rule("corp", "\"*.corp.test\"", "http", server.port(), ""), &names);
    let error = fetch(&fixture, &without, &url).result.expect_err("refused");
    assert_eq!(error.kind, ToolErrorKind::Denied, "{error}");
    assert!(error.message.contains("127.0.0.3") && error.message.contains("cidrs"), "{}", error.message);
    assert!(server.seen.all().is_empty());
    let rules = rule("corp", "\"*.corp.test\"", "http", server.port(), "\"127.0.0.3/32\"");
    let with = host(directory.path(), state.path(), "", &rules, &names);
    fetch(&fixture, &with, &url).result.expect("allowed by the cidr rule");
    assert_eq!(fixture.read("out/page.txt"), b"hello");
}

#[test]
fn a_redirect_to_a_private_address_is_refused() {
    let servers = servers();
    let public = public_server(&servers);
    let private = servers.block_on(serve(PRIVATE, 0, None));
    let (directory, state) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("state"));
    let rules = format!(
        "{}{}",
        rule("api", "\"api.test\"", "http", public.port(), "\"127.0.0.2/32\""),
        rule("internal", "\"internal.test\"", "http", private.port(), "")
    );
    let runtime = host(directory.path(), state.path(), "", &rules, &[("api.test", PUBLIC), ("internal.test", PRIVATE)]);
    let fixture = Fixture::new();
    let url = format!("http://api.test:{}/redirect?to=http://internal.test:{}/", public.port(), private.port());
    let error = fetch(&fixture, &runtime, &url).result.expect_err("refused");
    assert_eq!(error.kind, ToolErrorKind::Denied, "{error}");
    assert!(error.message.contains("127.0.0.3"), "{}", error.message);
    assert_eq!(public.seen.all().len(), 1, "the first hop was served");
    assert!(private.seen.all().is_empty(), "the private server was never reached");
    let records = requests(&runtime);
    let mut decisions: Vec<_> = records.iter().map(|record| (record.decision.as_deref(), record.rule.as_deref())).collect();
    decisions.sort();
    assert_eq!(decisions, [(Some("allow"), Some("api")), (Some("deny"), Some("internal"))], "{records:?}");
    assert!(records.iter().any(|record| record.path.as_deref().is_some_and(|path| path.contains("status=302"))), "{records:?}");
}

#[test]
fn a_resolver_that_answers_public_then_private_reaches_only_the_checked_address() {
    let servers = servers();
    let public = public_server(&servers);
    // On the same port: a connection to the second answer would be served.
    let private = servers.block_on(serve(PRIVATE, public.port(), None));
    let port = public.port();
    let url = format!("http://rebind.test:{port}/");
    let rules = rule("api", "\"rebind.test\"", "http", port, "\"127.0.0.2/32\"");
    let (directory, state) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("state"));
    let rebinding = Arc::new(Rebinding { answers: vec![vec![PUBLIC], vec![PRIVATE]], calls: AtomicUsize::new(0) });
    let runtime = host_with(directory.path(), state.path(), "", &rules, rebinding.clone());
    let fixture = Fixture::new();
    fetch(&fixture, &runtime, &url).result.expect("the first answer is public and allowed");
    assert_eq!(fixture.read("out/page.txt"), b"hello");
    assert_eq!(rebinding.calls.load(Ordering::SeqCst), 1, "one lookup for the request, none when connecting");
    assert_eq!((public.seen.all().len(), private.seen.all().len()), (1, 0));
    // The next request's lookup answers the private address: refused before anything connects.
    let error = fetch(&fixture, &runtime, &url).result.expect_err("the second answer is private");
    assert_eq!(error.kind, ToolErrorKind::Denied, "{error}");
    assert!(error.message.contains("127.0.0.3") && error.message.contains("cidrs"), "{}", error.message);
    assert_eq!(rebinding.calls.load(Ordering::SeqCst), 2);
    assert_eq!((public.seen.all().len(), private.seen.all().len()), (1, 0), "the private server was never reached");
    let records = requests(&runtime);
    let subjects: Vec<_> = records.iter().map(|record| (record.decision.as_deref(), record.path.clone().unwrap_or_default())).collect();
    assert_eq!(subjects.len(), 2, "{subjects:?}");
    assert!(
        subjects.iter().any(|(decision, path)| *decision == Some("allow") && path.contains("address=127.0.0.2 status=200")),
        "{subjects:?}"
    );
    assert!(subjects.iter().any(|(decision, path)| *decision == Some("deny") && !path.contains("status=")), "{subjects:?}");
    // One answer holding both: one private address refuses the name, and nothing connects.
    let mixed = Arc::new(Rebinding { answers: vec![vec![PUBLIC, PRIVATE]], calls: AtomicUsize::new(0) });
    let state = tempfile::tempdir().expect("state");
    let runtime = host_with(directory.path(), state.path(), "", &rules, mixed);
    let error = fetch(&fixture, &runtime, &url).result.expect_err("refused");
    assert_eq!(error.kind, ToolErrorKind::Denied, "{error}");
    assert!(error.message.contains("127.0.0.3"), "{}", error.message);
    assert_eq!((public.seen.all().len(), private.seen.all().len()), (1, 0));
    let audit = runtime.audit().expect("audited").read().expect("read the audit trail");
    toolcell_audit::verify(audit.lines()).expect("the audit chain verifies");
}

#[test]
fn size_and_time_caps_stop_the_request() {
    let servers = servers();
    let server = public_server(&servers);
    let (directory, state) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("state"));
    let rules = rule("api", "\"api.test\"", "http", server.port(), "\"127.0.0.2/32\"");
    let runtime = host(directory.path(), state.path(), "[network]\nreceived_kib = 8\ntotal_ms = 500\n", &rules, &[("api.test", PUBLIC)]);
    let fixture = Fixture::new();
    let big = fetch(&fixture, &runtime, &format!("http://api.test:{}/big", server.port()));
    assert!(big.result.is_err(), "64 KiB over an 8 KiB cap");
    let started = Instant::now();
    let slow = fetch(&fixture, &runtime, &format!("http://api.test:{}/slow", server.port()));
    assert!(slow.result.is_err(), "5 s over a 500 ms cap");
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    assert!(!fixture.root().join("out/page.txt").exists());
    let records = requests(&runtime);
    assert_eq!(records.len(), 2, "{records:?}");
    let subjects: Vec<_> = records.iter().filter_map(|record| record.path.as_deref()).collect();
    assert!(subjects.iter().any(|subject| subject.contains("received_kib")), "{subjects:?}");
    let slow = format!("{:?}", slow.result);
    assert!(subjects.iter().any(|subject| subject.contains("total_ms")) || slow.contains("total_ms"), "{subjects:?} {slow}");
}

#[test]
fn https_is_verified_with_the_operators_roots_and_the_secret_reaches_only_the_server() {
    let servers = servers();
    let ca = TestCa::new();
    let server = servers.block_on(serve(PUBLIC, 0, Some(ca.acceptor("secure.test"))));
    let (directory, state) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("state"));
    std::fs::write(directory.path().join("ca.pem"), &ca.pem).expect("write the CA");
    std::fs::write(directory.path().join("token.txt"), "s3cret-value-7781").expect("write the token");
    let rules = format!(
        "{}headers = {{ Authorization = {{ file = \"token.txt\", prefix = \"Bearer \" }} }}\n",
        rule("secure", "\"secure.test\"", "https", server.port(), "\"127.0.0.2/32\"")
    );
    let runtime = host(directory.path(), state.path(), "[network]\nroots = [\"ca.pem\"]\n", &rules, &[("secure.test", PUBLIC)]);
    let fixture = Fixture::new();
    let outcome = fetch(&fixture, &runtime, &format!("https://secure.test:{}/", server.port()));
    let output = outcome.result.expect("fetched over TLS");
    assert_eq!(fixture.read("out/page.txt"), b"hello");
    let seen = server.seen.all();
    assert_eq!(seen[0].headers.get("authorization").and_then(|value| value.to_str().ok()), Some("Bearer s3cret-value-7781"));
    let secret = "s3cret-value-7781";
    assert!(!output.text.contains(secret) && !outcome.stdout.bytes.windows(secret.len()).any(|window| window == secret.as_bytes()));
    assert!(fixture.snapshot().iter().all(|(_, content)| !content.contains(secret)));
    let audit = runtime.audit().expect("audited").read().expect("read the audit trail");
    assert!(!audit.contains(secret));
    assert_eq!(requests(&runtime).len(), 1);
    // A name the certificate does not cover fails TLS, and is audited as allowed-but-failed.
    let rules = rule("other", "\"other.test\"", "https", server.port(), "\"127.0.0.2/32\"");
    let state = tempfile::tempdir().expect("state");
    let runtime = host(directory.path(), state.path(), "[network]\nroots = [\"ca.pem\"]\n", &rules, &[("other.test", PUBLIC)]);
    assert!(fetch(&fixture, &runtime, &format!("https://other.test:{}/", server.port())).result.is_err());
}

#[test]
fn the_conformance_suite_accepts_the_network_example_and_still_refuses_sockets() {
    let options = toolcell_conformance::Options { cache_dir: Some(shared_cache_dir()), ..toolcell_conformance::Options::default() };
    let report = toolcell_conformance::check("examples/http-fetch", http_fetch(), &options);
    assert!(report.passed(), "{}", report.render());
    assert_eq!(report.tool.as_deref(), Some("http_fetch"));
    assert!(report.warnings.is_empty(), "{}", report.render());
    let declared = report.checks.iter().find(|check| check.name.contains("toolcell:network")).expect("the declaration is checked");
    assert_eq!(declared.detail, "declares https://docs.rs, https://*.wikipedia.org, https://raw.githubusercontent.com");
    let sockets = toolcell_conformance::check("net_probe.wasm", toolcell_tests::guest_program("net_probe"), &options);
    assert!(!sockets.passed());
    assert!(sockets.checks[0].detail.contains("wasi:sockets"), "{}", sockets.render());
}

/// `http_fetch` with its `toolcell:network` section renamed (so it declares nothing), or with
/// the scheme of its first declared host broken (`htxps://docs.rs`).
fn patched_declaration(rename: bool) -> Vec<u8> {
    let mut wasm = http_fetch().to_vec();
    let name = b"toolcell:network";
    let found: Vec<usize> = wasm.windows(name.len()).enumerate().filter(|(_, window)| window == name).map(|(at, _)| at).collect();
    assert_eq!(found.len(), 1, "the example has one declaration");
    let after = found[0] + name.len();
    assert_eq!(&wasm[after..after + 16], b"https://docs.rs\n", "the section's text follows its name");
    if rename {
        wasm[found[0] + 9] = b'N';
    } else {
        wasm[after + 2] = b'x';
    }
    wasm
}

#[test]
fn the_conformance_suite_warns_about_undeclared_hosts_and_fails_a_malformed_declaration() {
    let options = toolcell_conformance::Options { cache_dir: Some(shared_cache_dir()), ..toolcell_conformance::Options::default() };
    let undeclared = toolcell_conformance::check("undeclared.wasm", &patched_declaration(true), &options);
    assert!(undeclared.passed(), "a warning, not a failure: {}", undeclared.render());
    assert_eq!(undeclared.warnings.len(), 1, "{}", undeclared.render());
    assert!(undeclared.warnings[0].contains("imports `wasi:http/outgoing-handler` but declares no hosts"), "{}", undeclared.render());
    assert!(undeclared.render().contains("  WARN `http_fetch` imports"), "{}", undeclared.render());
    let malformed = toolcell_conformance::check("malformed.wasm", &patched_declaration(false), &options);
    assert!(!malformed.passed(), "{}", malformed.render());
    let failed: Vec<_> = malformed.checks.iter().filter(|check| !check.passed).collect();
    assert_eq!(failed.len(), 1, "{}", malformed.render());
    assert!(failed[0].detail.contains("line 1 of the `toolcell:network` section, `htxps://docs.rs`"), "{}", failed[0].detail);
    assert!(failed[0].detail.contains("the scheme `htxps` is neither `http` nor `https`"), "{}", failed[0].detail);
}
