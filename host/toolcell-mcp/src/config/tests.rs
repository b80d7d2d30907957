use super::*;

const HASH: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn parse(text: &str) -> Result<ServiceConfig, ConfigError> {
    ServiceConfig::parse("service.toml", text, Path::new("/etc/toolcell"))
}

fn valid() -> String {
    format!(
        "listen = \"127.0.0.1:8750\"\nsession_idle = \"5m\"\n\n[workspaces]\napp = \"repos/app\"\n\n[[principals]]\nname = \"alice\"\ntoken_sha256 = \"{HASH}\"\nworkspace = \"app\"\nrole = \"impl\"\n"
    )
}

#[test]
fn a_store_section_names_the_shared_store() {
    assert_eq!(parse(&valid()).expect("valid").store, None);
    let config = parse(&format!("{}\n[store]\nurl = \"postgres://toolcell@db/toolcell\"\n", valid())).expect("valid");
    assert_eq!(config.store.as_deref(), Some("postgres://toolcell@db/toolcell"));
    let error = parse(&format!("{}\n[store]\nuri = \"postgres://db\"\n", valid())).expect_err("unknown key");
    assert!(error.to_string().contains("uri"), "{error}");
    // How long a use of the store waits for the database: the store's default unless set.
    assert_eq!(config.store_answer_timeout, None);
    let config = parse(&format!("{}\n[store]\nanswer_timeout = \"1500ms\"\n", valid())).expect("valid");
    assert_eq!((config.store.as_deref(), config.store_answer_timeout), (None, Some(Duration::from_millis(1500))));
    let error = parse(&format!("{}\n[store]\nanswer_timeout = \"0s\"\n", valid())).expect_err("too short");
    assert!(error.to_string().contains("`answer_timeout = \"0s\"` is not a duration between 100ms and 10m"), "{error}");
}

#[test]
fn a_valid_configuration_maps_token_hashes_to_principals() {
    let config = parse(&valid()).expect("valid");
    assert_eq!(config.listen, Some("127.0.0.1:8750".parse().expect("address")));
    assert_eq!(config.session_idle, Duration::from_secs(300));
    assert_eq!(config.workspaces["app"], Path::new("/etc/toolcell/repos/app"));
    let alice = config.principal_for(&token_hash("test")).expect("sha256(\"test\") is alice's");
    assert_eq!((alice.name.as_str(), alice.role.as_str(), alice.line), ("alice", "impl", 7));
    assert!(config.principal_for(&token_hash("other")).is_none());
    assert_eq!(config.max_request_bytes, DEFAULT_MAX_REQUEST_BYTES);
    assert_eq!((config.request_body_timeout, config.bounds), (DEFAULT_BODY_TIMEOUT, DEFAULT_BOUNDS));
}

#[test]
fn bounds_are_read_and_the_per_principal_ones_stay_below_the_shared_ones() {
    let text = format!(
        "max_connections = 100\nmax_connections_per_principal = 40\nmax_streams_per_principal = 3\nmax_requests_per_principal = 4\n\
         max_sessions_per_principal = 5\nmax_calls = 8\nmax_calls_per_principal = 8\n{}",
        valid()
    );
    // One principal: it may have every call slot.
    let bounds = parse(&text).expect("valid").bounds;
    assert_eq!(
        bounds,
        Bounds {
            max_connections: 100,
            max_connections_per_principal: 40,
            max_requests_per_principal: 4,
            max_streams_per_principal: 3,
            max_sessions_per_principal: 5,
            max_calls: 8,
            max_calls_per_principal: 8,
        }
    );
    // Left out, a per-principal bound stays below what it is part of.
    let derived = parse(&format!("max_requests_per_principal = 8\nmax_calls = 1\n{}", valid())).expect("valid").bounds;
    assert_eq!((derived.max_streams_per_principal, derived.max_calls_per_principal), (7, 1));
    // Two: then neither may.
    let two =
        format!("{text}\n[[principals]]\nname = \"bob\"\ntoken_sha256 = \"{}\"\nworkspace = \"app\"\nrole = \"impl\"\n", "0".repeat(64));
    let error = parse(&two).expect_err("as many calls per principal as in all");
    assert_eq!(error.line, Some(7), "{error}");
    assert!(error.reason.contains("`max_calls_per_principal = 8` must be below `max_calls = 8`"), "{error}");
    assert!(error.reason.contains("lower `max_calls_per_principal` or raise `max_calls`"), "{error}");
}

#[test]
fn mistakes_are_reported_with_their_line_and_what_to_do() {
    let cases = [
        (valid().replace("8750\"", "x\""), 1, "not an address"),
        (valid().replace("5m", "soon"), 2, "not a duration"),
        (valid().replace(HASH, "ABC"), 9, "64 lowercase hex digits"),
        (
            valid().replace("workspace = \"app\"", "workspace = \"web\""),
            10,
            "there is no workspace `web`; the [workspaces] table has `app`",
        ),
        (valid().replace("name = \"alice\"", "name = \"a b\""), 8, "principal name"),
        (valid().replace("role = \"impl\"", "role = \"impl\"\nrank = 1"), 12, "unknown field `rank`"),
        (valid().replace(&format!("token_sha256 = \"{HASH}\"\n"), ""), 7, "has no `token_sha256`"),
        (
            format!("{}\n[[principals]]\nname = \"bob\"\ntoken_sha256 = \"{HASH}\"\nworkspace = \"app\"\nrole = \"impl\"\n", valid()),
            15,
            "same token as `alice`",
        ),
        (format!("anonymous = \"nobody\"\n{}", valid()), 1, "names no principal"),
        (format!("allowed_origins = [\"localhost\"]\n{}", valid()), 1, "has no scheme"),
        (format!("request_body_timeout = \"0s\"\n{}", valid()), 1, "`request_body_timeout = \"0s\"` is not a duration between 1s and 1h"),
        (format!("max_requests_per_principal = 0\n{}", valid()), 1, "`max_requests_per_principal = 0` is out of range"),
        (format!("max_calls = 129\n{}", valid()), 1, "`max_calls = 129` is out of range: give between 1 and 128 (the instances"),
        (format!("max_sessions_per_principal = -1\n{}", valid()), 1, "`max_sessions_per_principal = -1` is out of range"),
        (format!("max_connections = 1\n{}", valid()), 1, "`max_connections = 1` is out of range: give between 2 and 65536"),
        (
            format!("max_streams_per_principal = 64\n{}", valid()),
            1,
            "`max_streams_per_principal = 64` must be below `max_requests_per_principal = 64` (a principal with every stream open",
        ),
        (
            format!("max_requests_per_principal = 8\nmax_streams_per_principal = 8\n{}", valid()),
            2,
            "`max_streams_per_principal = 8` must be below `max_requests_per_principal = 8`",
        ),
        (
            format!("max_connections_per_principal = 2000\n{}", valid()),
            1,
            "`max_connections_per_principal = 2000` must be at most `max_connections = 1024`",
        ),
    ];
    for (text, line, reason) in cases {
        let error = parse(&text).expect_err(reason);
        assert_eq!(error.line, Some(line), "{reason}: {error}");
        assert!(error.reason.contains(reason), "{reason}: {error}");
        assert!(error.to_string().starts_with(&format!("service.toml line {line}: ")), "{error}");
    }
}

#[test]
fn an_anonymous_principal_needs_no_token() {
    let text = valid().replace(&format!("token_sha256 = \"{HASH}\"\n"), "");
    let config = parse(&format!("anonymous = \"alice\"\n{text}")).expect("anonymous");
    assert_eq!(config.anonymous.as_deref(), Some("alice"));
    assert_eq!(config.principals[0].token_sha256, None);
}

#[test]
fn an_oauth_table_is_checked_and_names_what_to_fix() {
    let oauth = |rest: &str| {
        format!(
            "[workspaces]\napp = \"repos/app\"\n\n[oauth]\nissuer = \"https://id.example.com\"\nresource = \"https://tools.example.com/mcp\"\nworkspace = \"app\"\n{rest}"
        )
    };
    let roles = "\n[[oauth.roles]]\nscope = \"toolcell:write\"\nrole = \"impl\"\n";
    // `[oauth]` alone admits callers: no static principal is needed.
    let config = parse(&oauth(roles)).expect("valid");
    let parsed = config.oauth.expect("oauth");
    assert_eq!(
        (parsed.principal_claim.as_str(), parsed.leeway, parsed.scopes().as_str()),
        ("sub", Duration::from_secs(30), "toolcell:write")
    );
    for (text, says) in [
        (oauth(""), "[oauth] has no [[oauth.roles]]"),
        (
            oauth(&format!("jwks_uri = \"http://keys.example.com/jwks\"\n{roles}")),
            "`oauth.jwks_uri`: `http://keys.example.com/jwks` is plain http",
        ),
        (oauth(&format!("leeway = \"1h\"\n{roles}")), "`oauth.leeway = \"1h\"` is not a duration between 0s and 5m"),
        (oauth(&format!("jwks_refresh = \"2h\"\n{roles}")), "longer than `oauth.jwks_max_age`"),
        (oauth(&format!("{roles}{roles}")), "role `impl` is listed twice"),
        (oauth("\n[[oauth.roles]]\nscope = \"two words\"\nrole = \"impl\"\n"), "`scope = \"two words\"` is not a scope"),
        (oauth(roles).replace("workspace = \"app\"", "workspace = \"other\""), "`oauth.workspace = \"other\"` is not a workspace"),
        (oauth(roles).replace("https://id.example.com", "id.example.com"), "`id.example.com` is not a URL"),
    ] {
        let error = parse(&text).expect_err(says).to_string();
        assert!(error.starts_with("service.toml line ") && error.contains(says), "{error}");
    }
}
