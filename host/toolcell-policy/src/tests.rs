use super::*;

const TOOLS: &[&str] = &[
    "read_file",
    "read_many",
    "file_info",
    "list_files",
    "directory_tree",
    "search_files",
    "write_file",
    "edit_file",
    "insert_text",
    "apply_patch",
    "create_directory",
    "move_file",
    "delete_file",
    "undo_edit",
    "lock_files",
    "unlock_files",
];

fn default_policy() -> Policy {
    let text = include_str!("../../../policies/default.toml");
    Policy::parse("policies/default.toml", text, TOOLS).expect("the shipped policy loads")
}

fn decide(policy: &Policy, role: &str, access: &str, path: &str) -> (Effect, String) {
    let role = policy.role(role).expect("role exists");
    let decision = policy.decide(role, Access::from_name(access).expect("access"), path);
    (decision.effect, decision.rule)
}

#[test]
fn default_policy_decisions() {
    use Effect::{Allow, Deny};
    let policy = default_policy();
    let table: &[(&str, &str, &str, Effect, &str)] = &[
        ("control", "read", "src/main.rs", Allow, "control-read"),
        ("control", "list", ".", Allow, "control-read"),
        ("control", "list", "src", Allow, "control-read"),
        ("control", "write", "src/main.rs", Deny, "default-deny"),
        ("control", "delete", "src/main.rs", Deny, "default-deny"),
        ("control", "read", ".env", Deny, "secrets-unreadable"),
        ("control", "read", "config/.env.local", Deny, "secrets-unreadable"),
        ("control", "read", "a/b/.env", Deny, "secrets-unreadable"),
        ("control", "read", "config/env.rs", Allow, "control-read"),
        ("control", "read", "certs/server.pem", Deny, "secrets-unreadable"),
        ("impl", "read", "docs/guide.md", Allow, "impl-read"),
        ("impl", "write", "src/lib.rs", Allow, "impl-write"),
        ("impl", "write", "docs/guide.md", Deny, "docs-read-only"),
        ("impl", "write", "docs", Deny, "docs-read-only"),
        ("impl", "delete", "docs/a/b/c.md", Deny, "docs-read-only"),
        ("impl", "write", "docsx/a.md", Allow, "impl-write"),
        ("impl", "write", "src/docs/a.md", Allow, "impl-write"),
        ("impl", "write", "DOCS/a.md", Allow, "impl-write"),
        ("impl", "write", ".git/config", Deny, "protected:.git/**"),
        ("impl", "write", ".git", Deny, "protected:.git/**"),
        ("impl", "delete", ".git/HEAD", Deny, "protected:.git/**"),
        ("impl", "read", ".git/HEAD", Allow, "impl-read"),
        ("impl", "write", ".gitignore", Allow, "impl-write"),
        ("impl", "write", ".env", Deny, "protected:**/.env"),
        ("impl", "write", ".env.production", Deny, "protected:**/.env.*"),
        ("impl", "write", "config/.env", Deny, "protected:**/.env"),
        ("impl", "delete", "services/api/.env.local", Deny, "protected:**/.env.*"),
        ("impl", "read", "config/.env.local", Deny, "impl-secrets-unreadable"),
        ("reviewer", "read", "src/main.rs", Allow, "reviewer-read"),
        ("reviewer", "write", "src/main.rs", Deny, "default-deny"),
    ];
    for (role, access, path, effect, rule) in table {
        assert_eq!(decide(&policy, role, access, path), (*effect, (*rule).to_owned()), "{role} {access} {path}");
    }
}

#[test]
fn precedence_and_explicit_protection() {
    let text = r#"
        version = 1
        [roles.r]
        tools = ["*"]
        [[roles.r.rules]]
        id = "all"
        access = ["read", "write"]
        paths = ["**"]
        effect = "allow"
        [[roles.r.rules]]
        id = "ask-src"
        access = ["write"]
        paths = ["src/**"]
        effect = "ask"
        [[roles.r.rules]]
        id = "deny-gen"
        access = ["write"]
        paths = ["src/generated/**"]
        effect = "deny"
        [[roles.r.rules]]
        id = "allow-gen-again"
        access = ["write"]
        paths = ["src/generated/keep.rs"]
        effect = "allow"
        [[roles.r.rules]]
        id = "hooks"
        access = ["write"]
        paths = [".git/hooks/*"]
        effect = "allow"
    "#;
    let policy = Policy::parse("p.toml", text, &[]).expect("valid policy");
    use Effect::{Allow, Ask, Deny};
    let table: &[(&str, &str, Effect, &str)] = &[
        ("read", "src/a.rs", Allow, "all"),
        ("write", "README.md", Allow, "all"),
        ("write", "src/a.rs", Ask, "ask-src"),
        ("write", "src/generated/x.rs", Deny, "deny-gen"),
        ("write", "src/generated/keep.rs", Deny, "deny-gen"),
        ("write", ".git/hooks/pre-commit", Allow, "hooks"),
        ("write", ".git/config", Deny, "protected:.git/**"),
        ("delete", "src/a.rs", Deny, "default-deny"),
    ];
    for (access, path, effect, rule) in table {
        assert_eq!(decide(&policy, "r", access, path), (*effect, (*rule).to_owned()), "{access} {path}");
    }
    assert!(policy.role("r").expect("role").may_call("anything"));
    let decision = policy.decide(policy.role("r").expect("role"), Access::Write, "src/a.rs");
    // A rule is reported at its `[[roles.r.rules]]` header.
    assert_eq!(decision.line, Some(10));
}

#[test]
fn globs_do_not_cross_slashes() {
    let text = r#"
        version = 1
        [roles.r]
        tools = ["*"]
        [[roles.r.rules]]
        access = ["read"]
        paths = ["*.md"]
        effect = "allow"
    "#;
    let policy = Policy::parse("p.toml", text, &[]).expect("valid policy");
    assert_eq!(decide(&policy, "r", "read", "a.md"), (Effect::Allow, "r#1".to_owned()));
    assert_eq!(decide(&policy, "r", "read", "docs/a.md"), (Effect::Deny, "default-deny".to_owned()));
}

#[test]
fn extra_protected_paths() {
    let mut policy = default_policy();
    policy.protect(".toolcell/**").expect("valid glob");
    assert_eq!(decide(&policy, "impl", "write", ".toolcell/audit.jsonl"), (Effect::Deny, "protected:.toolcell/**".to_owned()));
    assert_eq!(decide(&policy, "impl", "read", ".toolcell/audit.jsonl"), (Effect::Allow, "impl-read".to_owned()));
}

fn load_error(text: &str) -> PolicyError {
    Policy::parse("bad.toml", text, TOOLS).expect_err("the policy must be refused")
}

#[test]
fn bad_policies_fail_with_file_line_and_reason() {
    let header = "version = 1\n[roles.r]\ntools = [\"read_file\"]\n";
    let rule = |body: &str| format!("{header}[[roles.r.rules]]\n{body}");
    let table: Vec<(String, Option<usize>, &str)> = vec![
        ("version = 1\n[roles.r\n".to_owned(), Some(2), ""),
        ("version = 2\n[roles.r]\ntools = [\"*\"]\n".to_owned(), Some(1), "unsupported policy version 2"),
        (format!("{header}colour = \"red\"\n"), Some(4), "colour"),
        ("version = 1\n[roles.r]\ntools = [\"read_file\", \"red_file\"]\n".to_owned(), Some(3), "unknown tool `red_file`"),
        ("version = 1\n[roles.r]\ntools = []\n".to_owned(), None, "lists no tools"),
        ("version = 1\n[roles.R]\ntools = [\"*\"]\n".to_owned(), Some(2), "role name `R`"),
        ("version = 1\n".to_owned(), Some(1), "missing field `roles`"),
        ("version = 1\nversion = 1\n[roles.r]\ntools = [\"*\"]\n".to_owned(), Some(2), "duplicate key `version`"),
        (rule("access = [\"read\"]\npaths = [\"src/[\"]\neffect = \"allow\"\n"), Some(6), "is not valid"),
        (rule("access = [\"read\"]\npaths = [\"/etc/**\"]\neffect = \"allow\"\n"), Some(6), "can never match"),
        (rule("access = [\"read\"]\npaths = [\"../x\"]\neffect = \"allow\"\n"), Some(6), "can never match"),
        (rule("access = [\"raed\"]\npaths = [\"**\"]\neffect = \"allow\"\n"), Some(5), "unknown access `raed`"),
        (rule("access = [\"read\"]\npaths = [\"**\"]\neffect = \"permit\"\n"), Some(7), "unknown effect `permit`"),
        (rule("access = [\"read\"]\npaths = [\"**\"]\neffect = \"allow\"\nextra = 1\n"), Some(8), "extra"),
        (
            rule(
                "id = \"x\"\naccess = [\"read\"]\npaths = [\"**\"]\neffect = \"allow\"\n[[roles.r.rules]]\nid = \"x\"\naccess = [\"read\"]\npaths = [\"**\"]\neffect = \"deny\"\n",
            ),
            Some(10),
            "used twice",
        ),
    ];
    for (text, line, reason) in table {
        let error = load_error(&text);
        assert_eq!(error.file, "bad.toml");
        assert_eq!(error.line, line, "{text}\n=> {error}");
        assert!(error.reason.contains(reason), "{text}\n=> {error}");
        if let Some(line) = line {
            assert!(error.to_string().starts_with(&format!("bad.toml line {line}: ")), "{error}");
        }
    }
}

#[test]
fn lexical_join_table() {
    let table = [
        (".", "a", Some("a")),
        ("src", "../docs/x", Some("docs/x")),
        ("src", "../../x", None),
        (".", "..", None),
        (".", "/etc/passwd", None),
        ("a/b", "./c//d", Some("a/b/c/d")),
        ("a", "..", Some(".")),
        (".", "", Some(".")),
    ];
    for (base, path, expected) in table {
        assert_eq!(join_lexically(base, path).as_deref(), expected, "{base} + {path}");
    }
}

const MINIMAL_ROLE: &str = r#"
[roles.impl]
tools = ["write_file"]
"#;

#[test]
fn read_before_write_mode_and_validators_parse() {
    let policy = default_policy();
    assert_eq!(policy.read_before_write(), ReadBeforeWrite::Warn);
    assert_eq!(policy.durability(), Durability::Full);
    let ids: Vec<&str> = policy.validators().iter().map(Validator::id).collect();
    assert_eq!(ids, ["json-syntax", "toml-syntax"]);
    let text = format!(
        "version = 1\n[writes]\nread_before_write = \"refuse\"\ndurability = \"atomic\"\n[[validators]]\nid = \"json-syntax\"\npaths = [\"**/*.json\"]\ncheck = \"json\"\n\n[[validators]]\npaths = [\"Cargo.toml\"]\ncheck = \"toml\"\n\n[[validators]]\npaths = [\"src/**\"]\ntool = \"edit_file\"\n{MINIMAL_ROLE}"
    );
    let policy = Policy::parse("p.toml", &text, TOOLS).expect("parses");
    assert_eq!(policy.read_before_write(), ReadBeforeWrite::Refuse);
    assert_eq!(policy.durability(), Durability::Atomic);
    assert!(!Durability::Atomic.syncs() && Durability::Full.syncs());
    let validators = policy.validators();
    assert_eq!(validators.len(), 3);
    assert_eq!((validators[0].id(), validators[0].line(), validators[0].check()), ("json-syntax", 5, &ValidatorCheck::Json));
    assert!(validators[0].applies_to("a/b/c.json") && validators[0].applies_to("c.json"));
    assert!(!validators[0].applies_to("c.jsonl"));
    assert_eq!((validators[1].id(), validators[1].check()), ("validators#2", &ValidatorCheck::Toml));
    assert_eq!(validators[2].check(), &ValidatorCheck::Tool("edit_file".to_owned()));
}

#[test]
fn bad_writes_and_validator_sections_name_the_line() {
    let cases: &[(&str, usize, &str)] = &[
        ("[writes]\nread_before_write = \"sometimes\"\n", 3, "use `warn`, `refuse` or `off`"),
        ("[writes]\ndurability = \"fsync\"\n", 3, "unknown `durability` mode `fsync`; use `full` or `atomic`"),
        ("[[validators]]\npaths = [\"*.json\"]\ncheck = \"yaml\"\n", 4, "unknown check `yaml`"),
        ("[[validators]]\npaths = [\"*.json\"]\ntool = \"lint\"\n", 4, "unknown tool `lint`"),
        ("[[validators]]\npaths = [\"*.json\"]\n", 0, "needs exactly one of"),
        ("[[validators]]\npaths = [\"../*.json\"]\ncheck = \"json\"\n", 3, "can never match"),
        ("[[validators]]\npaths = []\ncheck = \"json\"\n", 0, "empty `paths`"),
    ];
    for (section, line, reason) in cases {
        let text = format!("version = 1\n{section}{MINIMAL_ROLE}");
        let error = Policy::parse("p.toml", &text, TOOLS).expect_err(section);
        assert!(error.reason.contains(reason), "{section}: {error}");
        if *line > 0 {
            assert_eq!(error.line, Some(*line), "{section}: {error}");
        }
    }
}

#[test]
fn path_globs_are_public_with_the_policy_semantics() {
    let glob = PathGlob::new("docs/**").expect("glob");
    assert!(glob.is_match("docs") && glob.is_match("docs/a/b.md"));
    assert!(!glob.is_match("docsx/a.md"));
    assert!(PathGlob::new("src/*.rs").expect("glob").is_match("src/a.rs"));
    assert!(!PathGlob::new("src/*.rs").expect("glob").is_match("src/x/a.rs"));
    assert!(PathGlob::new("/abs").is_err());
}

#[test]
fn limits_come_from_the_policy_and_tools_override_them() {
    let text = format!(
        "version = 1\n[limits]\ndeadline_ms = 5000\nmemory_mib = 128\nopen_files = 32\n\n[limits.tools.search_files]\ndeadline_ms = 60000\noutput_kib = 256\nhost_calls = 5000000\n{MINIMAL_ROLE}"
    );
    let policy = Policy::parse("p.toml", &text, TOOLS).expect("parses");
    let search = policy.limits_for("search_files");
    assert_eq!(search.deadline, Some(std::time::Duration::from_secs(60)));
    assert_eq!(search.memory_bytes, Some(128 << 20));
    assert_eq!(search.output_bytes, Some(256 << 10));
    assert_eq!((search.host_calls, search.open_files), (Some(5_000_000), Some(32)));
    let read = policy.limits_for("read_file");
    assert_eq!((read.deadline, read.output_bytes), (Some(std::time::Duration::from_secs(5)), None));
    assert_eq!(default_policy().limits_for("read_file"), Limits::default());

    for (section, line, reason) in [
        ("[limits]\ndeadline_ms = 0\n", 3, "`deadline_ms` in [limits] must be between 1 and"),
        ("[limits]\nmemory_mib = -5\n", 3, "`memory_mib` in [limits] must be between 1 and"),
        ("[limits.tools.grep]\ndeadline_ms = 10\n", 2, "`[limits.tools.grep]` names an unknown tool"),
        ("[limits.tools.read_file]\noutput_kib = 99999999\n", 3, "`output_kib` in [limits.tools.read_file]"),
        ("[limits]\nfuel = 3\n", 3, "unknown field `fuel`"),
    ] {
        let text = format!("version = 1\n{section}{MINIMAL_ROLE}");
        let error = Policy::parse("p.toml", &text, TOOLS).expect_err(section);
        assert!(error.reason.contains(reason), "{section}: {error}");
        assert_eq!(error.line, Some(line), "{section}: {error}");
    }
}

#[test]
fn plugin_pins_are_checked_for_shape_and_tool() {
    let sha = "ab".repeat(32);
    let text = format!("version = 1\n[plugins.read_file]\nsha256 = \"{}\"\n{MINIMAL_ROLE}", sha.to_uppercase());
    let policy = Policy::parse("p.toml", &text, TOOLS).expect("parses");
    assert_eq!(policy.pin("read_file"), Some(&Pin { sha256: sha.clone(), line: 3 }));
    assert_eq!(policy.pin("write_file"), None);
    let sourced =
        format!("version = 1\n[plugins.read_file]\nsha256 = \"{sha}\"\nsource = \"oci://localhost:5000/a:1@sha256:{sha}\"\n{MINIMAL_ROLE}");
    Policy::parse("p.toml", &sourced, TOOLS).expect("a pinned source parses");
    for (section, reason) in [
        ("[plugins.read_file]\nsha256 = \"abc\"\n", "must be 64 hex digits"),
        ("[plugins.grep]\nsha256 = \"abc\"\n", "pins a tool that is not loaded"),
        ("[plugins.read_file]\nsha = \"abc\"\n", "unknown field `sha`"),
        ("[plugins.read_file]\nsource = \"oci://localhost/a:1\"\n", "pinned to its manifest digest"),
        (&format!("[plugins.read_file]\nsha256 = \"{sha}\"\nsource = \"oci://localhost/a:1\"\n"), "pinned to its manifest digest"),
        (&format!("[plugins.read_file]\nsha256 = \"{sha}\"\nsource = \"localhost/a@sha256:{sha}\"\n"), "pinned to its manifest digest"),
    ] {
        let text = format!("version = 1\n{section}{MINIMAL_ROLE}");
        let error = Policy::parse("p.toml", &text, TOOLS).expect_err(section);
        assert!(error.reason.contains(reason), "{section}: {error}");
        assert!(error.line.is_some(), "{section}: {error}");
    }
}

#[test]
fn stub_imports_are_read_before_the_tools_load_and_checked_with_the_policy() {
    let text =
        format!("version = 1\n[plugins.read_file]\nstub_imports = [\"wasi:sockets/*\", \"wasi:http/outgoing-handler\"]\n{MINIMAL_ROLE}");
    let early = stub_imports("p.toml", &text).expect("read early");
    assert_eq!(
        early.get("read_file").map(Vec::as_slice),
        Some(&["wasi:sockets/*".to_owned(), "wasi:http/outgoing-handler".to_owned()][..])
    );
    let policy = Policy::parse("p.toml", &text, TOOLS).expect("parses");
    assert_eq!(policy.stub_imports("read_file"), ["wasi:sockets/*", "wasi:http/outgoing-handler"]);
    assert!(policy.stub_imports("write_file").is_empty());
    assert_eq!(policy.pin("read_file"), None, "a plugin table without sha256 pins nothing");
    for (pattern, reason) in [
        ("wasi:sockets/tcp@0.2.9", "not an interface"),
        ("sockets", "not an interface"),
        ("wasi:sockets/", "not an interface"),
        ("toolcell:tool/context", "cannot stub toolcell's own interfaces"),
    ] {
        let text = format!("version = 1\n[plugins.read_file]\nstub_imports = [\"{pattern}\"]\n{MINIMAL_ROLE}");
        let early = stub_imports("p.toml", &text).expect_err(pattern);
        assert!(early.reason.contains(reason) && early.line == Some(3), "{pattern}: {early}");
        let error = Policy::parse("p.toml", &text, TOOLS).expect_err(pattern);
        assert!(error.reason.contains(reason) && error.line == Some(3), "{pattern}: {error}");
    }
}

#[test]
fn a_trailing_double_star_covers_the_directory_itself_however_repeated() {
    // Found by the `path_policy` fuzz target: `a*/**/**/**` did not cover `a`.
    for pattern in ["docs/**", "docs/**/**", "d*/**/**/**"] {
        let glob = PathGlob::new(pattern).expect("valid glob");
        assert!(glob.is_match("docs"), "{pattern} should cover `docs`");
        assert!(glob.is_match("docs/a/b"), "{pattern} should cover `docs/a/b`");
        assert!(!glob.is_match("other"), "{pattern} should not cover `other`");
    }
}

#[test]
fn a_rule_names_a_protected_path_only_inside_it() {
    let text = r#"
version = 1
[roles.r]
tools = ["*"]
[[roles.r.rules]]
id = "ci-config"
access = ["write"]
paths = [".git*/**"]
effect = "allow"
[[roles.r.rules]]
id = "hooks"
access = ["write"]
paths = [".git/hooks/**"]
effect = "allow"
"#;
    let policy = Policy::parse("p.toml", text, TOOLS).expect("parses");
    let role = policy.role("r").expect("role");
    let effect = |path: &str| policy.decide(role, Access::Write, path).effect;
    // `.git*/**` is meant for `.github` and `.gitlab`: it does not open `.git`.
    assert_eq!(effect(".github/workflows/ci.yml"), Effect::Allow);
    assert_eq!(effect(".git/config"), Effect::Deny);
    assert_eq!(effect(".git/hooks/pre-commit"), Effect::Allow);
}

#[test]
fn a_protected_pattern_without_a_literal_root_is_opened_by_a_rule_that_names_it() {
    // The docs' `protected = ["**/.env", "**/.env.*"]`: each rule below is one way of naming a
    // protected path explicitly, or one that does not.
    let text = r#"
version = 1
protected = ["**/.env", "**/.env.*", "**/*"]
[roles.r]
tools = ["*"]
[[roles.r.rules]]
id = "everything"
access = ["write"]
paths = ["**"]
effect = "allow"
[[roles.r.rules]]
id = "any-env"
access = ["delete"]
paths = ["**/.env"]
effect = "allow"
[[roles.r.rules]]
id = "one-env"
access = ["write"]
paths = ["config/.env"]
effect = "allow"
[[roles.r.rules]]
id = "service-envs"
access = ["write"]
paths = ["services/**/.env.*", "services/**/.env"]
effect = "allow"
[[roles.r.rules]]
id = "all-files"
access = ["write"]
paths = ["src/**/*"]
effect = "allow"
"#;
    let policy = Policy::parse("p.toml", text, TOOLS).expect("parses");
    let role = policy.role("r").expect("role");
    let table: &[(Access, &str, Effect, &str)] = &[
        // `**` names nothing protected.
        (Access::Write, ".env", Effect::Deny, "protected:**/.env"),
        (Access::Write, "app/.env", Effect::Deny, "protected:**/.env"),
        // The protected pattern itself.
        (Access::Delete, "app/.env", Effect::Allow, "any-env"),
        (Access::Delete, ".env.local", Effect::Deny, "protected:**/.env.*"),
        // A literal path it matches.
        (Access::Write, "config/.env", Effect::Allow, "one-env"),
        (Access::Write, "config/.env.local", Effect::Deny, "protected:**/.env.*"),
        // A pattern ending in the same last component, in one place.
        (Access::Write, "services/api/.env.local", Effect::Allow, "service-envs"),
        (Access::Write, "services/api/.env", Effect::Allow, "service-envs"),
        (Access::Write, "other/api/.env", Effect::Deny, "protected:**/.env"),
        // A last component of wildcards alone names nothing: `src/**/*` does not open `**/*`.
        (Access::Write, "src/main.rs", Effect::Deny, "protected:**/*"),
    ];
    for (access, path, effect, rule) in table {
        let decision = policy.decide(role, *access, path);
        assert_eq!((decision.effect, decision.rule.as_str()), (*effect, *rule), "{access} {path}");
        assert_eq!(decide_rule_by_rule(&policy, role, *access, path), (*effect, (*rule).to_owned()), "{access} {path}");
    }
}

/// The decision as the policy defines it: every rule about the access in turn, every glob
/// matched one by one. [`Policy::decide`] matches through the per-access index instead.
fn decide_rule_by_rule(policy: &Policy, role: &Role, access: Access, path: &str) -> (Effect, String) {
    let protected = if access.is_modification() { policy.protected.iter().find(|protected| protected.glob.is_match(path)) } else { None };
    let mut best: Option<&Rule> = None;
    for rule in role.rules.iter().filter(|rule| rule.access.contains(&access)) {
        let matches =
            rule.globs.iter().any(|glob| glob.is_match(path) && protected.is_none_or(|protected| names_explicitly(glob, protected)));
        if matches && best.is_none_or(|best| rank(rule.effect) > rank(best.effect)) {
            best = Some(rule);
        }
    }
    match (best, protected) {
        (Some(rule), _) => (rule.effect, rule.id.clone()),
        (None, Some(protected)) => (Effect::Deny, format!("protected:{}", protected.pattern)),
        (None, None) => (Effect::Deny, "default-deny".to_owned()),
    }
}

#[test]
fn the_access_index_decides_as_rule_by_rule_matching_does() {
    // Globs of every shape the index sorts: with and without a literal prefix, `**`, a
    // trailing `/**` that also covers its directory, alternations, classes, escapes, literals,
    // and equal effects whose first rule must win.
    let text = r#"
version = 1
[roles.r]
tools = ["*"]
[[roles.r.rules]]
id = "everything"
access = ["read", "list"]
paths = ["**"]
effect = "allow"
[[roles.r.rules]]
id = "secrets"
access = ["read", "write"]
paths = ["**/*.pem", ".env", ".env.*", "keys/**"]
effect = "deny"
[[roles.r.rules]]
id = "src"
access = ["write", "delete"]
paths = ["src/**", "{lib,bin}/*.rs", "t[ae]st/?.rs"]
effect = "allow"
[[roles.r.rules]]
id = "src-again"
access = ["write"]
paths = ["src/**/*.rs"]
effect = "allow"
[[roles.r.rules]]
id = "review"
access = ["write"]
paths = ["src/gen*/**", "docs/\\*.md", "README.md"]
effect = "ask"
[[roles.r.rules]]
id = "hooks"
access = ["write"]
paths = [".git/hooks/**", ".git*/**"]
effect = "allow"
"#;
    let policy = Policy::parse("p.toml", text, TOOLS).expect("parses");
    let role = policy.role("r").expect("role");
    let paths = [
        ".",
        "a.pem",
        "x/y/z.pem",
        "x/y/z.pem.txt",
        ".env",
        ".env.local",
        ".envrc",
        "keys",
        "keys/a",
        "keysx/a",
        "src",
        "src/a.rs",
        "src/a/b.rs",
        "src/generated",
        "src/generated/a.rs",
        "srcx/a.rs",
        "lib/a.rs",
        "lib/a/b.rs",
        "bin/x.rs",
        "test/a.rs",
        "tast/b.rs",
        "tost/b.rs",
        "test/ab.rs",
        "docs/*.md",
        "docs/a.md",
        "README.md",
        "readme.md",
        ".git",
        ".git/config",
        ".git/hooks/pre-commit",
        ".github/workflows/ci.yml",
        "src/key.pem",
    ];
    let mut compared = 0;
    for access in Access::ALL {
        for path in paths {
            let decision = policy.decide(role, access, path);
            let expected = decide_rule_by_rule(&policy, role, access, path);
            assert_eq!((decision.effect, decision.rule), expected, "{access} {path}");
            assert_eq!(policy.verdict(role, access, path).effect(), expected.0, "{access} {path}");
            compared += 1;
        }
    }
    assert_eq!(compared, 4 * paths.len());
    // Spot checks that the table above exercises what it claims to.
    assert_eq!(decide(&policy, "r", "write", "src/generated/a.rs").0, Effect::Ask);
    assert_eq!(decide(&policy, "r", "write", "src/a.rs").1, "src");
    assert_eq!(decide(&policy, "r", "write", "docs/*.md").0, Effect::Ask);
    assert_eq!(decide(&policy, "r", "write", "docs/a.md").0, Effect::Deny);
    assert_eq!(decide(&policy, "r", "read", "keys").0, Effect::Deny);
    assert_eq!(decide(&policy, "r", "write", ".git/config").1, "protected:.git/**");
}

const SCOPED: &str = r#"
version = 1

[roles.impl]
tools = ["read_file", "write_file", "move_file"]
may_spawn = []

[[roles.impl.rules]]
id = "write-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "docs-read-only"
access = ["write", "delete"]
paths = ["docs/**"]
effect = "deny"

[[roles.impl.rules]]
id = "move-own-task"
tools = ["move:file"]
access = ["write", "delete"]
paths = ["docs/tasks/*/{chain}/{task}.md"]
effect = "allow"

[[roles.impl.rules]]
id = "never-done"
tools = ["move_file"]
access = ["write"]
paths = ["docs/tasks/done/**"]
effect = "deny"

[roles.control]
tools = ["read_file"]
may_spawn = ["impl"]
may_lock_for_chains = true
"#;

#[test]
fn rules_naming_a_tool_outrank_the_others_only_for_that_tool_and_the_bound_task() {
    let policy = Policy::parse("scoped.toml", SCOPED, TOOLS).expect("loads");
    let task = TaskBinding::parse("CHAIN-039-file-ops/002-parse").expect("a task");
    let other = TaskBinding::parse("CHAIN-039-file-ops/003-print").expect("a task");
    let decide_for = |tool: &str, task: Option<&TaskBinding>, access: Access, path: &str| {
        let role = policy.bind("impl", tool, task).expect("role");
        let decision = policy.decide(&role, access, path);
        (decision.effect, decision.rule)
    };
    let own = "docs/tasks/in-review/CHAIN-039-file-ops/002-parse.md";
    type Row<'a> = (&'a str, Option<&'a TaskBinding>, Access, &'a str, Effect, &'a str);
    let table: &[Row<'_>] = &[
        // The tool-scoped allow outranks the general deny, for its tool and task only.
        ("move_file", Some(&task), Access::Write, own, Effect::Allow, "move-own-task"),
        (
            "move_file",
            Some(&task),
            Access::Delete,
            "docs/tasks/in-progress/CHAIN-039-file-ops/002-parse.md",
            Effect::Allow,
            "move-own-task",
        ),
        ("write_file", Some(&task), Access::Write, own, Effect::Deny, "docs-read-only"),
        ("move_file", Some(&other), Access::Write, own, Effect::Deny, "docs-read-only"),
        ("move_file", None, Access::Write, own, Effect::Deny, "docs-read-only"),
        // Among scoped rules, deny still beats allow.
        ("move_file", Some(&task), Access::Write, "docs/tasks/done/CHAIN-039-file-ops/002-parse.md", Effect::Deny, "never-done"),
        // Paths no scoped rule matches are decided by the general rules.
        ("move_file", Some(&task), Access::Write, "src/a.rs", Effect::Allow, "write-all"),
    ];
    for (tool, task, access, path, effect, rule) in table {
        assert_eq!(decide_for(tool, *task, *access, path), (*effect, (*rule).to_owned()), "{tool} {task:?} {access} {path}");
    }
    // The unbound role has none of the scoped rules.
    assert_eq!(decide(&policy, "impl", "write", own).1, "docs-read-only");
    assert!(policy.role("impl").expect("role").has_scoped_rules());
    let control = policy.role("control").expect("role");
    assert!(control.may_spawn("impl") && !control.may_spawn("control") && control.may_lock_for_chains());
    assert!(!policy.role("impl").expect("role").may_lock_for_chains());
    // A role with nothing to bind is shared, not rebuilt.
    let first = policy.bind("control", "read_file", Some(&task)).expect("role");
    assert!(Arc::ptr_eq(&first, &policy.bind("control", "read_file", None).expect("role")));
    assert!(policy.bind("nobody", "read_file", None).is_none());
}

#[test]
fn task_references_and_variables_are_checked() {
    for good in ["CHAIN-039-file-operations/001-parse", "CHAIN-1/123-a", "CHAIN-039/1000-x-2"] {
        assert!(TaskBinding::parse(good).is_ok(), "{good}");
    }
    for bad in [
        "CHAIN-039",
        "chain-039/001-a",
        "CHAIN-039/01-a",
        "CHAIN-039/001-",
        "CHAIN-039/001-A",
        "CHAIN-039/001-a/..",
        "CHAIN-039-*/001-a",
        "CHAIN-039/001-{a,b}",
        "CHAIN-/001-a",
        "../CHAIN-1/001-a",
    ] {
        assert!(TaskBinding::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(canonical_tool_name("task:start"), "task_start");
    let header = "version = 1\n[roles.r]\ntools = [\"read_file\"]\n";
    let table: &[(&str, Option<usize>, &str)] = &[
        (
            "[[roles.r.rules]]\naccess = [\"read\"]\npaths = [\"docs/{chian}/**\"]\neffect = \"allow\"\n",
            Some(6),
            "`{chian}` is not a variable",
        ),
        (
            "[[roles.r.rules]]\naccess = [\"read\"]\npaths = [\"**\"]\ntools = [\"no_such\"]\neffect = \"allow\"\n",
            Some(7),
            "unknown tool `no_such`",
        ),
        (
            "[[roles.r.rules]]\naccess = [\"read\"]\npaths = [\"**\"]\ntools = []\neffect = \"allow\"\n",
            None,
            "on line 4 has an empty `tools` list",
        ),
    ];
    for (rules, line, reason) in table {
        let error = load_error(&format!("{header}{rules}"));
        assert!(error.reason.contains(reason), "{error}");
        assert_eq!(error.line, *line, "{error}");
    }
    let error = load_error(&format!("{header}may_spawn = [\"ghost\"]\n"));
    assert!(error.reason.contains("unknown role `ghost`"), "{error}");
    // Alternations are globs, not variables; the task-chain spellings of tool names are accepted.
    Policy::parse(
        "ok.toml",
        &format!(
            "{header}[[roles.r.rules]]\naccess = [\"read\"]\npaths = [\"*.{{rs,toml}}\"]\ntools = [\"read:file\"]\neffect = \"allow\"\n"
        ),
        TOOLS,
    )
    .expect("loads");
}

#[test]
fn what_a_role_may_change_counts_every_tool_it_may_call_and_nothing_it_must_ask_for() {
    let policy = Policy::parse("scoped.toml", SCOPED, TOOLS).expect("loads");
    let task = TaskBinding::parse("CHAIN-039-file-ops/002-parse").expect("a task");
    let own = "docs/tasks/in-review/CHAIN-039-file-ops/002-parse.md";
    let table: &[(&str, Access, &str, Option<&TaskBinding>, bool)] = &[
        ("impl", Access::Write, "src/a.rs", None, true),
        ("impl", Access::Delete, "src/a.rs", None, true),
        ("impl", Access::Write, "docs/guide.md", None, false),
        ("impl", Access::Write, ".git/config", None, false),
        // A rule naming `move_file` (which `impl` may call), bound to the task, counts...
        ("impl", Access::Write, own, Some(&task), true),
        // ... only bound, and never where a scoped deny wins.
        ("impl", Access::Write, own, None, false),
        ("impl", Access::Write, "docs/tasks/done/CHAIN-039-file-ops/002-parse.md", Some(&task), false),
        // `control` may write nothing; a role the policy does not know, nothing either.
        ("control", Access::Write, "src/a.rs", None, false),
        ("nobody", Access::Write, "src/a.rs", None, false),
    ];
    for (role, access, path, task, expected) in table {
        assert_eq!(policy.may_change(role, *access, path, *task), *expected, "{role} {access} {path} {task:?}");
    }
    let asking = Policy::parse(
        "ask.toml",
        "version = 1\n[roles.r]\ntools = [\"write_file\"]\n[[roles.r.rules]]\naccess = [\"write\"]\npaths = [\"**\"]\neffect = \"allow\"\n\
         [[roles.r.rules]]\nid = \"approve-src\"\naccess = [\"write\"]\npaths = [\"src/**\"]\neffect = \"ask\"\n",
        TOOLS,
    )
    .expect("loads");
    assert!(!asking.may_change("r", Access::Write, "src/a.rs", None), "an ask rule takes the write away");
    assert!(asking.may_change("r", Access::Write, "lib/a.rs", None));
    // What may keep a glob from covering part of what it matches, for the agent.
    let limits = policy.limits_within("impl", Access::Write, "d?cs/**", None);
    assert!(limits.contains(&"rule `docs-read-only` (`docs/**`)".to_owned()), "{limits:?}");
    assert!(limits.contains(&"protected `.git/**`".to_owned()), "{limits:?}");
    assert!(policy.limits_within("impl", Access::Write, "src/a.rs", None).is_empty());
}

#[test]
fn a_tools_own_right_is_not_the_roles_unless_it_is_about_the_roles_task() {
    let policy = Policy::parse(
        "tools.toml",
        "version = 1\n[roles.c]\ntools = [\"write_file\", \"move_file\"]\n\
         [[roles.c.rules]]\nid = \"src\"\naccess = [\"write\"]\npaths = [\"src/**\"]\neffect = \"allow\"\n\
         [[roles.c.rules]]\nid = \"moves-any-task\"\ntools = [\"move_file\"]\naccess = [\"write\"]\npaths = [\"docs/tasks/**\"]\neffect = \"allow\"\n\
         [[roles.c.rules]]\nid = \"moves-own-task\"\ntools = [\"move_file\"]\naccess = [\"write\"]\npaths = [\"notes\", \"notes/{chain}/{task}.md\"]\neffect = \"allow\"\n",
        TOOLS,
    )
    .expect("loads");
    let task = TaskBinding::parse("CHAIN-1-a/001-b").expect("a task");
    let table: &[(&str, Option<&TaskBinding>, bool)] = &[
        ("src/a.rs", None, true),
        // `move_file` may write any task file: that is the tool's right, not the role's.
        ("docs/tasks/todo/CHAIN-2-x/001-y.md", None, false),
        ("docs/tasks/todo/CHAIN-2-x/001-y.md", Some(&task), false),
        // Its rule about the holder's own task counts, bound to that task only.
        ("notes/CHAIN-1-a/001-b.md", Some(&task), true),
        ("notes/CHAIN-1-a/001-b.md", None, false),
        ("notes/CHAIN-2-x/001-y.md", Some(&task), false),
        // Of that rule, only its paths about the task: `notes` is every task's directory.
        ("notes", Some(&task), false),
    ];
    for (path, task, expected) in table {
        assert_eq!(policy.may_change("c", Access::Write, path, *task), *expected, "{path} {task:?}");
        // Cached: the same answer again.
        assert_eq!(policy.may_change("c", Access::Write, path, *task), *expected, "{path} {task:?}");
    }
    // The note is honest about the default deny: a role allowed only `src/**` locking `lib/**`
    // covers nothing; locking `**` covers part; locking `src/**` all.
    let nothing = policy.limits_within("c", Access::Write, "lib/**", None);
    assert!(nothing.iter().any(|limit| limit.contains("the lock covers nothing")), "{nothing:?}");
    let part = policy.limits_within("c", Access::Write, "**", None);
    assert!(part.iter().any(|limit| limit.starts_with("the default deny (where")), "{part:?}");
    assert!(!part.iter().any(|limit| limit.contains("moves-any-task")), "{part:?}");
    let all = policy.limits_within("c", Access::Write, "src/**", None);
    assert!(!all.iter().any(|limit| limit.contains("default deny")), "{all:?}");
}

#[test]
fn one_judgment_of_what_is_a_glob() {
    for (pattern, glob) in
        [("src/a.rs", false), (".", false), ("src/*.rs", true), ("d?cs", true), ("[d]ocs", true), ("{a,b}", true), ("d\\ocs/a.md", true)]
    {
        assert_eq!(is_glob(pattern), glob, "{pattern}");
    }
    assert!(may_overlap(".", "src/a.rs"), "the workspace itself meets everything");
    assert!(may_overlap("d\\ocs/a.md", "docs/a.md"), "an escape is a glob, judged as one");
}

#[test]
fn globs_may_overlap_exactly_with_a_literal_and_conservatively_with_another_glob() {
    let table = [
        ("docs/**", "docs/a.md", true),
        ("d?cs/**", "docs/a.md", true),
        ("*.env", ".env", true),
        ("*.env", "config/.env", false),
        ("src/a.rs", "src/b.rs", false),
        ("src/**", "docs/**", false),
        ("**", "docs/**", true),
        ("d?cs/**", "docs/**", true),
        ("src/*.rs", "src/a/**", true),
    ];
    for (a, b, expected) in table {
        assert_eq!(may_overlap(a, b), expected, "{a} {b}");
        assert_eq!(may_overlap(b, a), expected, "{b} {a}");
    }
}
