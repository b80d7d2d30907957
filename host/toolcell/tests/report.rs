//! `toolcell report`: a task-chain scenario through the CLI, its report written, and the page
//! rendered in headless Chromium (Debian's `chromium`), checked for what a person sees: the
//! diffs, a refusal with its rule, and the spawned child session linked.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

struct Setup {
    _temp: tempfile::TempDir,
    workspace: PathBuf,
    state: PathBuf,
    cache: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let temp = tempfile::tempdir().expect("temp");
        let workspace = temp.path().join("workspace");
        std::fs::create_dir_all(workspace.join("src")).expect("mkdir");
        std::fs::write(workspace.join("src/main.rs"), "fn main() {}\n").expect("write");
        let state = temp.path().join("state");
        let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-test-cache");
        Setup { _temp: temp, workspace, state, cache }
    }

    fn toolcell(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_toolcell"))
            .arg("--cache-dir")
            .arg(&self.cache)
            .arg("--state-dir")
            .arg(&self.state)
            .args(["--policy", "builtin:workflow"])
            .args(args)
            .output()
            .expect("run toolcell")
    }

    /// `toolcell call --json`, as `role` in `session`; the parsed result.
    fn call(&self, role: &str, session: &str, task: Option<&str>, tool: &str, args: &str) -> Value {
        let workspace = self.workspace.to_str().expect("UTF-8 path");
        let mut arguments = vec!["call", tool, args, "--workspace", workspace, "--role", role, "--session", session, "--json"];
        if let Some(task) = task {
            arguments.extend(["--task", task]);
        }
        let output = self.toolcell(&arguments);
        serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|error| panic!("{tool}: not JSON ({error}): {}", String::from_utf8_lossy(&output.stderr)))
    }
}

fn chromium() -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].into_iter().map(PathBuf::from).find(|path| path.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("TOOLCELL_REQUIRE_BROWSER").is_none(),
            "TOOLCELL_REQUIRE_BROWSER is set but Chromium is not installed (`apt-get install chromium`)"
        );
        eprintln!("SKIPPED: the report is not rendered: Chromium is not installed (`apt-get install chromium`; CI installs it)");
    }
    found
}

/// Headless Chromium as the machine allows it: no sandbox when root, nothing reaching out.
fn headless(profile: &Path) -> Command {
    let mut command = Command::new(chromium().expect("chromium"));
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
    ]);
    command.arg(format!("--user-data-dir={}", profile.display()));
    command
}

#[test]
fn the_session_report_renders_in_chromium_with_diffs_refusals_and_children() {
    let setup = Setup::new();
    let task = "CHAIN-039-file-ops/001-parse-headers";
    for (tool, args) in [
        ("chain_new", r#"{"cr": "CR-039", "slug": "file-ops", "title": "File operations"}"#),
        ("task_add", r#"{"chain": "CHAIN-039-file-ops", "title": "Parse headers", "objective": "In src/.", "criteria": ["parses"]}"#),
        ("task_start", r#"{"task": "CHAIN-039-file-ops/001-parse-headers", "locks": ["src/**"]}"#),
    ] {
        let result = setup.call("control", "control-1", None, tool, args);
        assert_eq!(result["ok"], true, "{tool}: {result}");
    }
    let spawned = setup.call("control", "control-1", None, "spawn_impl_session", r#"{"task": "CHAIN-039-file-ops/001-parse-headers"}"#);
    let child = spawned["structured"]["session_id"].as_str().expect("a session id").to_owned();
    for (tool, args, ok) in [
        ("read_file", r#"{"path": "src/main.rs"}"#, true),
        ("write_file", r#"{"path": "src/main.rs", "content": "fn main() {\n    parse_headers();\n}\n"}"#, true),
        ("write_file", r#"{"path": "docs/tasks/done/CHAIN-039-file-ops/001-parse-headers.md", "content": "done"}"#, false),
        ("task_complete", r#"{"note": "Parses."}"#, true),
    ] {
        let result = setup.call("impl", &child, Some(task), tool, args);
        assert_eq!(result["ok"], ok, "{tool}: {result}");
    }

    let report = setup.state.join("report.html");
    let workspace = setup.workspace.to_str().expect("UTF-8");
    let written = setup.toolcell(&["report", "--workspace", workspace, "--session", "control-1", "-o", report.to_str().expect("UTF-8")]);
    assert!(written.status.success(), "{}", String::from_utf8_lossy(&written.stderr));
    let html = std::fs::read_to_string(&report).expect("the report");
    assert!(!html.contains("<script") && !html.contains("http://") && !html.contains("https://"), "self-contained, no script");
    assert!(!html.contains(setup.workspace.to_str().expect("UTF-8")), "no host path in the report");

    // By chain: the sessions bound to its tasks and the session that spawned them.
    let by_chain = setup.state.join("chain.html");
    let written =
        setup.toolcell(&["report", "--workspace", workspace, "--chain", "CHAIN-039-file-ops", "-o", by_chain.to_str().expect("UTF-8")]);
    assert!(written.status.success(), "{}", String::from_utf8_lossy(&written.stderr));
    let chain_html = std::fs::read_to_string(&by_chain).expect("the chain report");
    assert!(
        chain_html.contains(r#"<h2 id="session-control-1">"#) && chain_html.contains(&format!(r#"<h2 id="session-{child}">"#)),
        "{chain_html}"
    );
    let unknown = setup.toolcell(&["report", "--workspace", workspace, "--session", "nobody", "-o", by_chain.to_str().expect("UTF-8")]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no record of session `nobody`"));

    let Some(_) = chromium() else {
        return;
    };
    let profile = tempfile::tempdir().expect("profile");
    let url = format!("file://{}", report.display());
    let dumped = headless(profile.path()).args(["--dump-dom", &url]).output().expect("run chromium");
    let dom = String::from_utf8_lossy(&dumped.stdout);
    let log = String::from_utf8_lossy(&dumped.stderr);
    assert!(dumped.status.success(), "chromium failed:\n{log}");
    assert!(!log.contains("Uncaught") && !log.contains("Failed to load resource"), "the page loads without errors:\n{log}");
    assert!(dom.contains("<h1>toolcell report: Session control-1</h1>"), "the page rendered:\n{dom}");
    // The child's change, as a diff a person reads.
    assert!(dom.contains(r#"<span class="add">+    parse_headers();</span>"#), "the diff is on the page:\n{dom}");
    assert!(dom.contains(r#"<span class="del">-fn main() {}</span>"#), "the diff is on the page:\n{dom}");
    // The refusal, highlighted with its rule.
    assert!(dom.contains(r#"<tr class="refused">"#) && dom.contains("refused by rule <code>docs-read-only</code>"), "{dom}");
    // The child session, linked from the spawn to its own section.
    assert!(dom.contains(&format!(r##"<a href="#session-{child}">{child}</a>"##)), "the spawn links the child:\n{dom}");
    assert!(dom.contains(&format!(r#"<h2 id="session-{child}">Session {child}</h2>"#)), "the child has its section");
    assert!(dom.contains("<code>src/**</code>"), "the chain's lock is listed");

    let screenshot = setup.state.join("report.png");
    let shot = headless(profile.path())
        .args(["--window-size=1100,2000", "--hide-scrollbars"])
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(shot.status.success(), "{}", String::from_utf8_lossy(&shot.stderr));
    let png = std::fs::read(&screenshot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "a real picture, {} bytes", png.len());
    if std::env::var_os("TOOLCELL_UPDATE_SCREENSHOT").is_some() {
        std::fs::create_dir_all(Path::new(env!("CARGO_MANIFEST_DIR")).join("doc")).expect("mkdir");
        std::fs::copy(&screenshot, Path::new(env!("CARGO_MANIFEST_DIR")).join("doc/report.png")).expect("update the README's screenshot");
    }
}

/// `impl` may change `secrets/**` but not read it; `ops` reads everything.
const DROPBOX: &str = r#"
version = 1

[roles.impl]
tools = ["*"]

[[roles.impl.rules]]
id = "impl-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "secrets-hidden"
access = ["read"]
paths = ["secrets/**"]
effect = "deny"

[roles.ops]
tools = ["read_file"]

[[roles.ops.rules]]
id = "ops-read"
access = ["read", "list"]
paths = ["**"]
effect = "allow"
"#;

#[test]
fn a_report_shows_only_what_its_reader_may_read_and_escapes_bidi_controls() {
    let temp = tempfile::tempdir().expect("temp");
    let workspace = temp.path().join("workspace");
    std::fs::create_dir_all(workspace.join("secrets")).expect("mkdir");
    std::fs::write(workspace.join("secrets/server.pem"), "PEM-LINE-SECRET\n").expect("write");
    let plugins = temp.path().join("plugins");
    std::fs::create_dir(&plugins).expect("mkdir");
    std::fs::write(plugins.join("fs_probe.wasm"), toolcell_tests::guest_program("fs_probe")).expect("plugin");
    let policy = temp.path().join("policy.toml");
    std::fs::write(&policy, DROPBOX).expect("policy");
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-test-cache");
    let toolcell = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_toolcell"))
            .arg("--cache-dir")
            .arg(&cache)
            .arg("--state-dir")
            .arg(temp.path().join("state"))
            .arg("--policy")
            .arg(&policy)
            .arg("--plugin-dir")
            .arg(&plugins)
            .args(args)
            .output()
            .expect("run toolcell")
    };
    let root = workspace.to_str().expect("UTF-8");
    // A component removes the key it may not read (its undo record keeps the lines), and
    // writes a line whose right-to-left override would make the diff read otherwise.
    let ops = r#"{"ops": [{"op": "remove", "path": "secrets/server.pem"}, {"op": "write", "path": "src.rs", "content": "let admin = false; /*\u202e } \u2066if (admin)\u2069 \u2066 begin admins only */\n"}]}"#;
    let ran = toolcell(&["call", "fs_probe", ops, "--workspace", root, "--role", "impl", "--session", "s-drop"]);
    assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
    let report = |extra: &[&str]| {
        let output = temp.path().join("report.html");
        let mut args = vec!["report", "--workspace", root, "--session", "s-drop", "-o", output.to_str().expect("UTF-8")];
        args.extend_from_slice(extra);
        let written = toolcell(&args);
        (written.status.code(), std::fs::read_to_string(&output).unwrap_or_default(), String::from_utf8_lossy(&written.stderr).into_owned())
    };
    // Read as the session's own role: the key's lines are not there, its path is.
    let (status, html, stderr) = report(&[]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(!html.contains("PEM-LINE-SECRET"), "the report shows what its reader may not read");
    assert!(html.contains("secrets/server.pem") && html.contains("content not shown: role `impl` may not read"), "{html}");
    for control in ['\u{202e}', '\u{2066}', '\u{2069}'] {
        assert!(!html.contains(control), "a bidi control reached the page raw: {control:?}");
    }
    assert!(html.contains("\\u{202e}") && html.contains("\\u{2066}"), "shown escaped");
    // A reader who may read the key sees its lines; an unknown reader is refused.
    let (status, html, stderr) = report(&["--role", "ops"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert!(html.contains("PEM-LINE-SECRET"), "{html}");
    let (status, _, stderr) = report(&["--role", "nobody"]);
    assert_eq!(status, Some(1), "{stderr}");
    assert!(stderr.contains("has no role `nobody`"), "{stderr}");
}
