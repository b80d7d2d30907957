//! `CallNet::send` against real servers on loopback addresses: policy, addresses, limits,
//! secrets, TLS and records.

mod support;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use toolcell_net::{Decision, Limit, NetError, NetLimits, Outbound, RequestRecord, Resolve, StaticResolver, SystemResolver};

use support::*;

/// Allow `hosts` on http at `port`, reaching the "public" address.
fn public_rule(hosts: &str, port: u16) -> String {
    format!(
        "[[roles.fetcher.network]]\nid = \"public\"\neffect = \"allow\"\nhosts = [{hosts}]\nschemes = [\"http\"]\nports = [{port}]\ncidrs = [\"127.0.0.2/32\"]\n"
    )
}

#[tokio::test]
async fn an_allowed_host_is_served_and_its_record_is_complete() {
    bounded(async {
        let server = serve(PUBLIC, 0, None).await;
        let outbound = outbound(&[("api.test", PUBLIC)], NetLimits::default(), None);
        let call = outbound.call("fetcher", "http_fetch", rules(&public_rule("\"api.test\"", server.port())));
        let response = call.send(get(&format!("http://api.test:{}/", server.port()))).await.expect("served");
        assert_eq!(response.status(), 200);
        assert_eq!(text(response).await.expect("a body"), "hello");
        let records = call.records();
        assert_eq!(records.len(), 1, "{records:?}");
        let record = &records[0];
        assert_eq!(
            (record.method.as_str(), record.scheme.as_str(), record.host.as_str(), record.port),
            ("GET", "http", "api.test", server.port())
        );
        assert_eq!((record.address, record.status, record.decision), (Some(PUBLIC), Some(200), Decision::Allowed));
        assert_eq!((record.rule.as_deref(), record.reason.as_deref()), (Some("public"), None));
        assert!(record.bytes_sent > 20 && record.bytes_received >= 5, "{record:?}");
        let json = serde_json::to_string(&records).expect("serializes");
        let back: Vec<RequestRecord> = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, records);
        assert!(call.records().is_empty(), "records are drained");
    })
    .await;
}

#[tokio::test]
async fn a_denied_host_port_or_scheme_is_refused_with_the_lines_that_grant_it() {
    bounded(async {
        let server = serve(PUBLIC, 0, None).await;
        let port = server.port();
        let outbound = outbound(&[("api.test", PUBLIC), ("other.test", PUBLIC), ("blocked.test", PUBLIC)], NetLimits::default(), None);
        let policy = format!(
            "{}[[roles.fetcher.network]]\nid = \"no-blocked\"\neffect = \"deny\"\nhosts = [\"blocked.test\"]\nschemes = [\"http\"]\nports = [{port}]\n[[roles.fetcher.network]]\nid = \"tls-only\"\neffect = \"allow\"\nhosts = [\"blocked.test\", \"api.test\"]\n",
            public_rule("\"api.test\"", port)
        );
        let call = outbound.call("fetcher", "http_fetch", rules(&policy));
        let cases = [
            (format!("http://other.test:{port}/"), None, format!("hosts = [\"other.test\"]\nschemes = [\"http\"]\nports = [{port}]")),
            (format!("http://api.test:{}/", port + 1), None, format!("ports = [{}]", port + 1)),
            ("http://api.test/".to_owned(), None, "schemes = [\"http\"]".to_owned()),
            (format!("http://blocked.test:{port}/"), Some("no-blocked"), "the network rule `no-blocked`".to_owned()),
        ];
        for (uri, rule, needle) in cases {
            let refused = call.send(get(&uri)).await.expect_err(&uri);
            let NetError::Refused { rule: refusing, message } = &refused else { panic!("{uri}: {refused:?}") };
            assert_eq!(refusing.as_deref(), rule, "{uri}");
            assert!(message.contains(&needle), "{uri}: {message}");
            assert!(message.contains("[[roles.fetcher.network]]") || rule.is_some(), "{message}");
        }
        let ftp = call.send(get("ftp://api.test/")).await.expect_err("ftp");
        assert!(matches!(ftp, NetError::UnsupportedScheme { ref scheme } if scheme == "ftp"), "{ftp:?}");
        assert!(server.seen.all().is_empty(), "nothing reached the server");
        let records = call.records();
        assert_eq!(records.len(), 5);
        assert!(records.iter().all(|record| record.decision == Decision::Refused && record.address.is_none()), "{records:?}");
        assert_eq!(records[3].rule.as_deref(), Some("no-blocked"));
    })
    .await;
}

#[tokio::test]
async fn a_name_allowed_by_pattern_that_resolves_to_loopback_is_refused_until_a_cidr_rule_allows_it() {
    bounded(async {
        let server = serve(PUBLIC, 0, None).await;
        let port = server.port();
        let outbound = outbound(&[("svc.internal.test", PUBLIC)], NetLimits::default(), None);
        let uri = format!("http://svc.internal.test:{port}/");
        let without = format!("[[roles.fetcher.network]]\nid = \"internal\"\neffect = \"allow\"\nhosts = [\"*.internal.test\"]\nschemes = [\"http\"]\nports = [{port}]\n");
        let call = outbound.call("fetcher", "http_fetch", rules(&without));
        let refused = call.send(get(&uri)).await.expect_err("loopback");
        let NetError::AddressRefused { rule, address, message } = &refused else { panic!("{refused:?}") };
        assert_eq!((rule.as_str(), *address), ("internal", PUBLIC));
        assert!(message.contains("a loopback address") && message.contains("cidrs = [\"127.0.0.2/32\"]"), "{message}");
        assert!(server.seen.all().is_empty());
        assert_eq!(call.records()[0].decision, Decision::Refused);
        let with = format!("{without}cidrs = [\"127.0.0.2/32\"]\n");
        let call = outbound.call("fetcher", "http_fetch", rules(&with));
        assert_eq!(text(call.send(get(&uri)).await.expect("allowed now")).await.expect("a body"), "hello");
        assert_eq!(server.seen.all().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn a_resolver_that_answers_public_then_private_never_reaches_the_private_server() {
    bounded(async {
        let public = serve(PUBLIC, 0, None).await;
        let private = serve(PRIVATE, public.port(), None).await;
        let port = public.port();
        let rebinding = Arc::new(Rebinding { answers: vec![vec![PUBLIC], vec![PRIVATE]], calls: AtomicUsize::new(0) });
        let outbound = outbound_with(rebinding.clone(), NetLimits::default(), None);
        let call = outbound.call("fetcher", "http_fetch", rules(&public_rule("\"rebind.test\"", port)));
        let uri = format!("http://rebind.test:{port}/");
        assert_eq!(text(call.send(get(&uri)).await.expect("the first answer is public")).await.expect("a body"), "hello");
        assert_eq!(rebinding.calls.load(std::sync::atomic::Ordering::SeqCst), 1, "resolved once for the request");
        let refused = call.send(get(&uri)).await.expect_err("the second answer is private");
        assert!(matches!(refused, NetError::AddressRefused { address, .. } if address == PRIVATE), "{refused:?}");
        let mixed = Arc::new(Rebinding { answers: vec![vec![PUBLIC, PRIVATE]], calls: AtomicUsize::new(0) });
        let call =
            outbound_with(mixed, NetLimits::default(), None).call("fetcher", "http_fetch", rules(&public_rule("\"rebind.test\"", port)));
        let refused = call.send(get(&uri)).await.expect_err("one private address refuses the name");
        assert!(matches!(refused, NetError::AddressRefused { address, .. } if address == PRIVATE), "{refused:?}");
        assert!(private.seen.all().is_empty(), "the private server got nothing");
        assert_eq!(public.seen.all().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn a_redirect_is_returned_to_the_caller_and_its_next_hop_is_checked_again() {
    bounded(async {
        let public = serve(PUBLIC, 0, None).await;
        let private = serve(PRIVATE, 0, None).await;
        let outbound = outbound(&[("api.test", PUBLIC), ("private.test", PRIVATE)], NetLimits::default(), None);
        let call = outbound.call("fetcher", "http_fetch", rules(&public_rule("\"api.test\", \"private.test\"", public.port())));
        let next = format!("http://private.test:{}/", public.port());
        let response = call.send(get(&format!("http://api.test:{}/redirect?to={next}", public.port()))).await.expect("served");
        assert_eq!(response.status(), 302);
        let location = response.headers().get("location").expect("a location").to_str().expect("text").to_owned();
        assert_eq!(location, next);
        drop(response);
        let refused = call.send(get(&location)).await.expect_err("the next hop is private");
        assert!(matches!(refused, NetError::AddressRefused { address, .. } if address == PRIVATE), "{refused:?}");
        assert!(private.seen.all().is_empty());
        let received = public.seen.all();
        assert_eq!(received.len(), 1, "redirects are not followed");
        assert_eq!(received[0].path, "/redirect");
    })
    .await;
}

#[tokio::test]
async fn size_caps_stop_the_request_both_ways() {
    bounded(async {
        let server = serve(PUBLIC, 0, None).await;
        let limits = NetLimits { received_bytes: 4096, sent_bytes: 2048, ..NetLimits::default() };
        let outbound = outbound(&[("api.test", PUBLIC)], limits, None);
        let policy = rules(&public_rule("\"api.test\"", server.port()));
        let call = outbound.call("fetcher", "http_fetch", policy.clone());
        let response = call.send(get(&format!("http://api.test:{}/big", server.port()))).await.expect("the head fits");
        let stopped = text(response).await.expect_err("the body does not");
        assert!(matches!(stopped, NetError::LimitReached { limit: Limit::ReceivedBytes, .. }), "{stopped:?}");
        assert!(stopped.to_string().contains("`[network] received_kib`"), "{stopped}");
        let record = &call.records()[0];
        assert!(record.bytes_received > 4096 && record.bytes_received < 64 * 1024, "{record:?}");
        assert!(record.reason.as_deref().is_some_and(|reason| reason.contains("4096 byte bound")), "{record:?}");

        let call = outbound.call("fetcher", "http_fetch", policy);
        let body = http_body_util::Full::new(Bytes::from(vec![b'z'; 8192]));
        let request = http::Request::post(format!("http://api.test:{}/upload", server.port())).body(body).expect("a request");
        let stopped = call.send(request).await.expect_err("the body is over the bound");
        assert!(matches!(stopped, NetError::LimitReached { limit: Limit::SentBytes, .. }), "{stopped:?}");
        assert!(server.seen.all().iter().all(|received| received.body_bytes < 8192), "the whole body never arrived");
        assert_eq!(call.records()[0].reason.as_deref(), Some(stopped.to_string().as_str()));
    })
    .await;
}

#[tokio::test]
async fn time_caps_stop_a_slow_server_and_a_stalled_body() {
    bounded(async {
        let server = serve(PUBLIC, 0, None).await;
        let stall = trickle(PUBLIC).await;
        let limits = NetLimits { total_time: Duration::from_millis(400), ..NetLimits::default() };
        let outbound = outbound(&[("api.test", PUBLIC)], limits, None);
        let started = Instant::now();
        let call = outbound.call("fetcher", "http_fetch", rules(&public_rule("\"api.test\"", server.port())));
        let stopped = call.send(get(&format!("http://api.test:{}/slow", server.port()))).await.expect_err("too slow");
        assert!(matches!(stopped, NetError::LimitReached { limit: Limit::TotalTime, .. }), "{stopped:?}");
        assert!(started.elapsed() < Duration::from_secs(3), "stopped at the bound, not by the server");
        let later = call.send(get(&format!("http://api.test:{}/", server.port()))).await.expect_err("the call's time is spent");
        assert!(matches!(later, NetError::LimitReached { limit: Limit::TotalTime, .. }), "{later:?}");

        let started = Instant::now();
        let call = outbound.call("fetcher", "http_fetch", rules(&public_rule("\"api.test\"", stall.port())));
        let response = call.send(get(&format!("http://api.test:{}/", stall.port()))).await.expect("the head arrives");
        let stopped = text(response).await.expect_err("the body stalls");
        assert!(matches!(stopped, NetError::LimitReached { limit: Limit::TotalTime, .. }), "{stopped:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(call.records()[0].status, Some(200));
    })
    .await;
}

#[tokio::test]
async fn connections_at_once_and_requests_per_call_are_bounded() {
    bounded(async {
        let server = serve(PUBLIC, 0, None).await;
        let limits = NetLimits { connections: 1, requests: 3, ..NetLimits::default() };
        let outbound = outbound(&[("api.test", PUBLIC)], limits, None);
        let call = outbound.call("fetcher", "http_fetch", rules(&public_rule("\"api.test\"", server.port())));
        let uri = format!("http://api.test:{}/", server.port());
        let open = call.send(get(&uri)).await.expect("the first connection");
        let refused = call.send(get(&uri)).await.expect_err("a second at once");
        assert!(matches!(refused, NetError::LimitReached { limit: Limit::Connections, .. }), "{refused:?}");
        drop(open);
        let third = call.send(get(&uri)).await.expect("the first was released");
        assert_eq!(text(third).await.expect("a body"), "hello");
        let refused = call.send(get(&uri)).await.expect_err("a fourth request");
        assert!(matches!(refused, NetError::LimitReached { limit: Limit::Requests, .. }), "{refused:?}");
        let records = call.records();
        assert_eq!(records.len(), 4, "{records:?}");
        assert_eq!(records.iter().filter(|record| record.status == Some(200)).count(), 2);
        assert!(records.iter().any(|record| record.reason.as_deref().is_some_and(|reason| reason.contains("dropped"))), "{records:?}");
    })
    .await;
}

#[tokio::test]
async fn the_injected_secret_reaches_the_server_and_nothing_else() {
    bounded(async {
        let server = serve(PUBLIC, 0, None).await;
        let directory = tempfile::tempdir().expect("a directory");
        std::fs::write(directory.path().join("token"), "s3cret-value\n").expect("writes");
        let secret_rule = format!(
            "{}headers = {{ Authorization = {{ file = \"token\", prefix = \"Bearer \" }} }}\n",
            public_rule("\"api.test\"", server.port())
        );
        let outbound = Outbound::builder()
            .resolver(Arc::new({
                let mut resolver = StaticResolver::new();
                resolver.insert_flag("api.test=127.0.0.2").expect("an entry");
                resolver
            }))
            .secret_directory(directory.path())
            .build()
            .expect("an outbound");
        let call = outbound.call("fetcher", "http_fetch", rules(&secret_rule));
        let request = http::Request::get(format!("http://api.test:{}/", server.port()))
            .header("authorization", "guest-value")
            .body(http_body_util::Empty::<Bytes>::new())
            .expect("a request");
        let response = call.send(request).await.expect("served");
        let shown = format!("{:?}", response.headers());
        assert_eq!(text(response).await.expect("a body"), "hello");
        let received = server.seen.all();
        let values: Vec<_> = received[0].headers.get_all("authorization").iter().collect();
        assert_eq!(values, ["Bearer s3cret-value"], "the rule's value replaces the guest's");
        let records = serde_json::to_string(&call.records()).expect("serializes");
        assert!(!shown.contains("s3cret") && !records.contains("s3cret"), "{shown} {records}");

        let missing = format!(
            "{}headers = {{ X-Api-Key = {{ env = \"TOOLCELL_NET_TEST_UNSET_VARIABLE\" }} }}\n",
            public_rule("\"api.test\"", server.port())
        );
        let call = outbound.call("fetcher", "http_fetch", rules(&missing));
        let failed = call.send(get(&format!("http://api.test:{}/", server.port()))).await.expect_err("no secret");
        assert!(failed.to_string().contains("`TOOLCELL_NET_TEST_UNSET_VARIABLE`"), "{failed}");
        let unreadable = format!("{}headers = {{ X-Api-Key = {{ file = \"absent\" }} }}\n", public_rule("\"api.test\"", server.port()));
        let call = outbound.call("fetcher", "http_fetch", rules(&unreadable));
        let failed = call.send(get(&format!("http://api.test:{}/", server.port()))).await.expect_err("no file");
        let shown = failed.to_string();
        assert!(!shown.contains(&directory.path().display().to_string()) && shown.contains("X-Api-Key"), "{shown}");
        assert_eq!(server.seen.all().len(), 1, "nothing is sent without its secret");
    })
    .await;
}

#[tokio::test]
async fn tls_verifies_the_certificate_against_the_host_name() {
    bounded(async {
        let ca = TestCa::new();
        let good = serve(PUBLIC, 0, Some(ca.acceptor("api.test"))).await;
        let wrong = serve(PUBLIC, 0, Some(ca.acceptor("other.test"))).await;
        let https_rule = |port: u16| {
            format!("[[roles.fetcher.network]]\nid = \"tls\"\neffect = \"allow\"\nhosts = [\"api.test\"]\nports = [{port}]\ncidrs = [\"127.0.0.2/32\"]\n")
        };
        let trusting = outbound(&[("api.test", PUBLIC)], NetLimits::default(), Some(&ca.pem));
        let call = trusting.call("fetcher", "http_fetch", rules(&https_rule(good.port())));
        let response = call.send(get(&format!("https://api.test:{}/", good.port()))).await.expect("verified");
        assert_eq!(text(response).await.expect("a body"), "hello");
        assert_eq!(call.records()[0].scheme, "https");

        let call = trusting.call("fetcher", "http_fetch", rules(&https_rule(wrong.port())));
        let refused = call.send(get(&format!("https://api.test:{}/", wrong.port()))).await.expect_err("another name");
        assert!(matches!(refused, NetError::Tls { ref host, .. } if host == "api.test"), "{refused:?}");
        assert!(wrong.seen.all().is_empty());

        let untrusting = outbound(&[("api.test", PUBLIC)], NetLimits::default(), None);
        let call = untrusting.call("fetcher", "http_fetch", rules(&https_rule(good.port())));
        let refused = call.send(get(&format!("https://api.test:{}/", good.port()))).await.expect_err("unknown CA");
        assert!(matches!(refused, NetError::Tls { .. }), "{refused:?}");
        assert_eq!(good.seen.all().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn a_guest_host_header_and_hop_by_hop_headers_change_nothing() {
    bounded(async {
        let public = serve(PUBLIC, 0, None).await;
        let private = serve(PRIVATE, 0, None).await;
        let outbound = outbound(&[("api.test", PUBLIC), ("private.test", PRIVATE)], NetLimits::default(), None);
        let call = outbound.call("fetcher", "http_fetch", rules(&public_rule("\"api.test\"", public.port())));
        let request = http::Request::get(format!("http://api.test:{}/", public.port()))
            .header("host", format!("private.test:{}", private.port()))
            .header("proxy-authorization", "Basic eDp5")
            .header("connection", "x-drop-me")
            .header("x-drop-me", "1")
            .header("x-kept", "1")
            .body(http_body_util::Empty::<Bytes>::new())
            .expect("a request");
        assert_eq!(text(call.send(request).await.expect("served")).await.expect("a body"), "hello");
        assert!(private.seen.all().is_empty());
        let headers = &public.seen.all()[0].headers;
        assert_eq!(headers.get("host").expect("a host"), &format!("api.test:{}", public.port()));
        assert_eq!(headers.get_all("host").iter().count(), 1);
        assert!(headers.get("proxy-authorization").is_none() && headers.get("x-drop-me").is_none(), "{headers:?}");
        assert!(headers.get("x-kept").is_some());
    })
    .await;
}

#[tokio::test]
async fn a_record_is_finished_when_the_body_is_dropped_early() {
    bounded(async {
        let server = serve(PUBLIC, 0, None).await;
        let outbound = outbound(&[("api.test", PUBLIC)], NetLimits::default(), None);
        let call = outbound.call("fetcher", "http_fetch", rules(&public_rule("\"api.test\"", server.port())));
        let mut body = call.send(get(&format!("http://api.test:{}/big", server.port()))).await.expect("served").into_body();
        let first = body.frame().await.expect("a frame").expect("data");
        assert!(first.is_data());
        drop(body);
        let records = call.records();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].status, Some(200));
        assert!(records[0].reason.as_deref().is_some_and(|reason| reason.contains("dropped")), "{records:?}");
        assert!(records[0].bytes_received < 64 * 1024 + 200);
    })
    .await;
}

#[tokio::test]
async fn resolvers_answer_from_flags_a_fallback_and_the_system() {
    bounded(async {
        let mut flags = StaticResolver::new();
        flags.insert_flag("API.test.=127.0.0.2").expect("NAME=ADDRESS");
        flags.insert_flag("v6.test=[::1]").expect("a bracketed IPv6 address");
        for bad in ["api.test", "api.test=not-an-address", "bad name=127.0.0.1"] {
            let refused = flags.insert_flag(bad).expect_err(bad);
            assert!(refused.to_string().contains(&format!("`{bad}`")), "{refused}");
        }
        assert_eq!(flags.resolve("api.test").await.expect("an entry"), [PUBLIC]);
        assert!(flags.resolve("unknown.test").await.is_err(), "no entry and no fallback");
        let fallback = StaticResolver::new().with_fallback(Arc::new(flags));
        assert_eq!(fallback.resolve("v6.test").await.expect("from the fallback"), ["::1".parse::<std::net::IpAddr>().expect("::1")]);
        let system = SystemResolver.resolve("localhost").await.expect("localhost resolves");
        assert!(!system.is_empty() && system.iter().all(|address| address.is_loopback()), "{system:?}");
    })
    .await;
}

#[tokio::test]
async fn bad_roots_and_connect_requests_are_refused() {
    bounded(async {
        let refused = Outbound::builder().extra_roots_pem("ca.pem", b"not a certificate").build().expect_err("no PEM");
        assert!(matches!(refused, NetError::Roots { ref bundle, .. } if bundle == "ca.pem"), "{refused:?}");
        let outbound = outbound(&[("api.test", PUBLIC)], NetLimits::default(), None);
        let call = outbound.call("fetcher", "http_fetch", rules(&public_rule("\"api.test\"", 8080)));
        let connect = http::Request::connect("http://api.test:8080/").body(http_body_util::Empty::<Bytes>::new()).expect("a request");
        let refused = call.send(connect).await.expect_err("no tunnels");
        assert!(matches!(refused, NetError::InvalidRequest { .. }), "{refused:?}");
        let credentials = call.send(get("http://user:pass@api.test:8080/")).await.expect_err("no userinfo");
        assert!(credentials.to_string().contains("credentials"), "{credentials}");
    })
    .await;
}

#[tokio::test]
async fn the_connect_time_cap_stops_a_server_that_does_not_accept() {
    bounded(async {
        // A listener with a backlog of one that never accepts: once its queue is full, the
        // kernel drops further SYNs and a connection attempt hangs.
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket.bind(std::net::SocketAddr::new(PUBLIC, 0)).expect("binds");
        let listener = socket.listen(1).expect("listens");
        let address = listener.local_addr().expect("an address");
        let mut held = Vec::new();
        for _ in 0..8 {
            match tokio::time::timeout(Duration::from_millis(200), tokio::net::TcpStream::connect(address)).await {
                Ok(Ok(stream)) => held.push(stream),
                _ => break,
            }
        }
        let limits = NetLimits { connect_timeout: Duration::from_millis(300), ..NetLimits::default() };
        let outbound = outbound(&[("api.test", PUBLIC)], limits, None);
        let call = outbound.call("fetcher", "http_fetch", rules(&public_rule("\"api.test\"", address.port())));
        let started = Instant::now();
        let stopped = call.send(get(&format!("http://api.test:{}/", address.port()))).await.expect_err("never accepted");
        assert!(matches!(stopped, NetError::LimitReached { limit: Limit::ConnectTime, .. }), "{stopped:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(stopped.to_string().contains("`[network] connect_timeout_ms`"), "{stopped}");
        drop(held);
    })
    .await;
}

#[tokio::test]
async fn address_literals_are_checked_as_resolved_names_are() {
    bounded(async {
        let private = serve(PRIVATE, 0, None).await;
        let port = private.port();
        let outbound = outbound(&[], NetLimits::default(), None);
        let policy = format!(
            "[[roles.fetcher.network]]\nid = \"literal\"\neffect = \"allow\"\nhosts = [\"127.0.0.3\", \"::ffff:127.0.0.3\"]\nschemes = [\"http\"]\nports = [{port}]\n"
        );
        let call = outbound.call("fetcher", "http_fetch", rules(&policy));
        for uri in [format!("http://127.0.0.3:{port}/"), format!("http://[::ffff:127.0.0.3]:{port}/")] {
            let refused = call.send(get(&uri)).await.expect_err(&uri);
            assert!(matches!(refused, NetError::AddressRefused { ref rule, .. } if rule == "literal"), "{uri}: {refused:?}");
            assert!(refused.to_string().contains("a loopback address"), "{refused}");
        }
        assert!(private.seen.all().is_empty());
        let call = outbound.call("fetcher", "http_fetch", rules(&format!("{policy}cidrs = [\"127.0.0.3/32\"]\n")));
        let response = call.send(get(&format!("http://127.0.0.3:{port}/"))).await.expect("a CIDR rule allows it");
        assert_eq!(text(response).await.expect("a body"), "hello");
        assert_eq!(private.seen.all()[0].headers.get("host").expect("a host"), &format!("127.0.0.3:{port}"));
    })
    .await;
}

#[tokio::test]
async fn a_clone_of_the_call_sends_from_another_task_into_the_same_budget_and_records() {
    bounded(async {
        let server = serve(PUBLIC, 0, None).await;
        let outbound = outbound(&[("api.test", PUBLIC)], NetLimits { requests: 1, ..NetLimits::default() }, None);
        let call = outbound.call("fetcher", "http_fetch", rules(&public_rule("\"api.test\"", server.port())));
        let uri = format!("http://api.test:{}/", server.port());
        let sending = call.clone();
        let spawned_uri = uri.clone();
        let body = tokio::spawn(async move { text(sending.send(get(&spawned_uri)).await?).await }).await.expect("the task ran");
        assert_eq!(body.expect("served"), "hello");
        let refused = call.send(get(&uri)).await.expect_err("the clone used the call's one request");
        assert!(matches!(refused, NetError::LimitReached { limit: Limit::Requests, .. }), "{refused:?}");
        assert_eq!(call.records().len(), 2);
    })
    .await;
}
