//! Plugins in the life a user gives them, through the real `toolcell` binary: a plugin that
//! cannot be loaded in the default plugin directory, a policy that needs one, and replacing an
//! installed plugin with another build of it.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use toolcell_tests::{rebuilt_component, sha256_hex};

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn from(output: Output) -> Run {
        Run {
            status: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8(output.stdout).expect("UTF-8 stdout"),
            stderr: String::from_utf8(output.stderr).expect("UTF-8 stderr"),
        }
    }
}

/// A user's set-up: a state directory whose `plugins` directory is the default plugin
/// directory (no `--plugin-dir`), a workspace with one file, and policies beside them.
struct Site {
    base: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        let base = tempfile::tempdir().expect("temporary directory");
        std::fs::create_dir_all(base.path().join("workspace")).expect("workspace");
        std::fs::write(base.path().join("workspace/notes.txt"), "first\nsecond\n").expect("write");
        Site { base }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.base.path().join(name)
    }

    /// The default plugin directory of this site's state directory, created private.
    fn plugins(&self) -> PathBuf {
        use std::os::unix::fs::DirBuilderExt as _;
        let plugins = self.path("state/plugins");
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&plugins).expect("plugin directory");
        plugins
    }

    fn install(&self, file: &str, wasm: &[u8]) {
        std::fs::write(self.plugins().join(file), wasm).expect("install the plugin");
    }

    fn policy(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, text).expect("write policy");
        path.to_str().expect("UTF-8").to_owned()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
        command
            .arg("--cache-dir")
            .arg(Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugins-component-cache"))
            .arg("--state-dir")
            .arg(self.path("state"))
            .args(args)
            .env_remove("TOOLCELL_CACHE_DIR")
            .env_remove("TOOLCELL_STATE_DIR")
            .env_remove("TOOLCELL_PLUGIN_DIR")
            .env_remove("TOOLCELL_POLICY");
        command
    }

    fn run(&self, args: &[&str]) -> Run {
        Run::from(self.command(args).output().expect("run toolcell"))
    }

    fn workspace(&self) -> String {
        self.path("workspace").to_str().expect("UTF-8").to_owned()
    }

    /// `toolcell mcp` as a client starts it: initialize, then list the tools; every line it
    /// wrote on stdout (each must be JSON-RPC), and its stderr.
    fn mcp_tools(&self, args: &[&str]) -> (Vec<serde_json::Value>, String) {
        let workspace = self.workspace();
        let mut full = args.to_vec();
        full.extend_from_slice(&["mcp", "--workspace", &workspace, "--role", "impl"]);
        let mut child =
            self.command(&full).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start toolcell mcp");
        let requests = [
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}),
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        ];
        let mut stdin = child.stdin.take().expect("stdin");
        for request in requests {
            writeln!(stdin, "{request}").expect("write a request");
        }
        drop(stdin);
        let run = Run::from(child.wait_with_output().expect("toolcell mcp ends at the end of its input"));
        let messages = run
            .stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("stdout is the MCP channel, and it got {line:?}")))
            .collect();
        (messages, run.stderr)
    }
}

/// Lines of `stderr` that are warnings.
fn warnings(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|line| line.starts_with("warning:")).collect()
}

#[test]
fn a_plugin_no_role_uses_that_cannot_load_is_left_out_with_one_warning() {
    let site = Site::new();
    // Needs `wasi:sockets`, which only a policy's `stub_imports` can link; and a file that is
    // no component at all: neither stops the start under the built-in policy, which names
    // neither.
    site.install("net_probe.wasm", toolcell_tests::guest_program("net_probe"));
    let workspace = site.workspace();

    let called = site.run(&["call", "read_file", r#"{"path": "notes.txt"}"#, "--workspace", &workspace]);
    assert_eq!(called.status, 0, "{}", called.stderr);
    assert!(called.stdout.contains("first"), "{}", called.stdout);
    let warned = warnings(&called.stderr);
    assert_eq!(warned.len(), 1, "{}", called.stderr);
    assert!(warned[0].starts_with("warning: left out the plugin `net_probe` (`plugin:net_probe.wasm`), which no role of the policy uses: it imports `wasi:sockets/"), "{}", warned[0]);
    assert!(warned[0].contains("`toolcell tools remove net_probe`"), "{}", warned[0]);

    let schema = site.run(&["schema", "--role", "impl"]);
    assert_eq!(schema.status, 0, "{}", schema.stderr);
    let tools: serde_json::Value = serde_json::from_str(&schema.stdout).expect("the schema is JSON");
    assert!(!tools.to_string().contains("net_probe"), "{}", schema.stdout);
    assert_eq!(warnings(&schema.stderr).len(), 1, "{}", schema.stderr);

    // The README's client configuration: `mcp` serves, its stdout JSON-RPC only.
    let (messages, stderr) = site.mcp_tools(&[]);
    assert_eq!(warnings(&stderr).len(), 1, "{stderr}");
    let listed = messages.iter().find(|message| message["id"] == 2).expect("the tools/list answer");
    let names: Vec<&str> = listed["result"]["tools"].as_array().expect("tools").iter().filter_map(|tool| tool["name"].as_str()).collect();
    assert!(names.contains(&"read_file") && !names.contains(&"net_probe"), "{names:?}");

    // A broken file is left out the same way, each with its own line; `tools` lists them apart.
    site.install("garbage.wasm", b"\0asm not really");
    let listed = site.run(&["tools"]);
    assert_eq!(listed.status, 0, "{}", listed.stderr);
    assert_eq!(warnings(&listed.stderr).len(), 2, "{}", listed.stderr);
    let (tools, left_out) = listed
        .stdout
        .split_once("left out (cannot be loaded, and no role of the policy uses them; not callable):")
        .expect("a section of plugins left out");
    assert!(!tools.contains("net_probe") && !tools.contains("garbage"), "{tools}");
    assert!(
        left_out.contains("\n  garbage (plugin:garbage.wasm): ") && left_out.contains("\n  net_probe (plugin:net_probe.wasm): it imports"),
        "{left_out}"
    );

    // Left out is never callable.
    let refused = site.run(&["call", "net_probe", "{}", "--workspace", &workspace]);
    assert_eq!(refused.status, 2, "{}", refused.stdout);
    assert!(refused.stderr.contains("there is no tool named `net_probe`"), "{}", refused.stderr);
}

#[test]
fn a_plugin_the_policy_needs_that_cannot_load_names_itself_and_the_fix() {
    let site = Site::new();
    site.install("net_probe.wasm", toolcell_tests::guest_program("net_probe"));
    let needs = site.policy("needs.toml", "version = 1\n[roles.impl]\ntools = [\"read_file\", \"net_probe\"]\n");
    let refused = site.run(&["--policy", &needs, "schema", "--role", "impl"]);
    assert_eq!(refused.status, 2, "{}", refused.stdout);
    for expected in [
        "error: the plugin `net_probe` (`plugin:net_probe.wasm`) cannot be loaded, and the policy needs it (role `impl` lists it): it imports `wasi:sockets/",
        "`stub_imports = [\"wasi:sockets/*\"]` in its `[plugins.net_probe]` table",
        "`toolcell tools update net_probe FILE`",
        "`toolcell tools remove net_probe`",
    ] {
        assert!(refused.stderr.contains(expected), "{expected}\n{}", refused.stderr);
    }
    // A role given every tool needs it too.
    let every = site.policy("every.toml", "version = 1\n[roles.impl]\ntools = [\"*\"]\n");
    let refused = site.run(&["--policy", &every, "schema", "--role", "impl"]);
    assert_eq!(refused.status, 2, "{}", refused.stdout);
    assert!(refused.stderr.contains("the policy needs it (role `impl` lists every tool (`*`))"), "{}", refused.stderr);
    // The fix the error names works.
    let stubbed = site.policy(
        "stubbed.toml",
        "version = 1\n[plugins.net_probe]\nstub_imports = [\"wasi:sockets/*\"]\n[roles.impl]\ntools = [\"read_file\", \"net_probe\"]\n",
    );
    let schema = site.run(&["--policy", &stubbed, "schema", "--role", "impl"]);
    assert_eq!(schema.status, 0, "{}", schema.stderr);
    assert!(schema.stdout.contains("\"net_probe\""), "{}", schema.stdout);
    assert!(warnings(&schema.stderr).is_empty(), "{}", schema.stderr);
}

#[test]
fn a_policy_naming_a_plugin_not_installed_says_how_to_install_it() {
    let site = Site::new();
    let policy = site.policy("policy.toml", "version = 1\n[roles.impl]\ntools = [\"read_file\", \"line_count\"]\n");
    let refused = site.run(&["--policy", &policy, "schema", "--role", "impl"]);
    assert_eq!(refused.status, 2, "{}", refused.stdout);
    assert!(refused.stderr.contains("policy.toml line 3: role `impl` lists the unknown tool `line_count`"), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("if it is a plugin, install it with `toolcell tools add FILE`, or pass the `--plugin-dir` that holds it"),
        "{}",
        refused.stderr
    );
}

#[test]
fn a_rebuilt_plugin_is_updated_with_its_pin_in_one_step() {
    let site = Site::new();
    let workspace = site.workspace();
    let original = toolcell_tests::guest_program("misbehave");
    let first = site.path("misbehave.wasm");
    std::fs::write(&first, original).expect("write");
    let first = first.to_str().expect("UTF-8");
    // `misbehave` fails the conformance suite on purpose: `--force` throughout.
    let added = site.run(&["tools", "add", "--force", first]);
    assert_eq!(added.status, 0, "{}", added.stderr);
    let old_sha = sha256_hex(original);
    let policy_text = format!(
        "version = 1\n[plugins.misbehave]\nsha256 = \"{old_sha}\"\n[roles.impl]\ntools = [\"read_file\", \"misbehave\"]\n[[roles.impl.rules]]\naccess = [\"read\", \"list\"]\npaths = [\"**\"]\neffect = \"allow\"\n"
    );
    let policy = site.policy("policy.toml", &policy_text);
    let call = || site.run(&["--policy", &policy, "call", "misbehave", r#"{"action": "ok"}"#, "--workspace", &workspace]);
    assert_eq!(call().stdout.trim(), "ok");

    let rebuilt_bytes = rebuilt_component(original, b"two!");
    let second = site.path("build/misbehave.wasm");
    std::fs::create_dir_all(site.path("build")).expect("mkdir");
    std::fs::write(&second, &rebuilt_bytes).expect("write");
    let second = second.to_str().expect("UTF-8");
    let new_sha = sha256_hex(&rebuilt_bytes);
    let installed = site.path("state/plugins/misbehave.wasm");
    let unchanged = |why: &str| {
        assert_eq!(std::fs::read(&installed).expect("read"), original, "{why}: the plugin changed");
        assert_eq!(std::fs::read_to_string(&policy).expect("read"), policy_text, "{why}: the policy changed");
        assert_eq!(call().stdout.trim(), "ok", "{why}: the old plugin stopped working");
        let leftovers: Vec<_> =
            std::fs::read_dir(site.path("state/plugins")).expect("read").filter_map(Result::ok).map(|entry| entry.file_name()).collect();
        assert_eq!(leftovers, ["misbehave.wasm"], "{why}");
    };

    // Adding it again is a collision of two distinct origins, pointing to update and remove;
    // so it is when the policy does not need the tool.
    for args in [vec!["--policy", &policy, "tools", "add", "--force", second], vec!["tools", "add", "--force", second]] {
        let collision = site.run(&args);
        assert_eq!(collision.status, 2, "{}", collision.stdout);
        let error = collision.stderr.lines().find(|line| line.starts_with("error:")).expect("an error line");
        assert!(error.contains("two tool components are named `misbehave`"), "{error}");
        assert!(error.contains(second) && error.contains("misbehave.wasm`"), "{error}");
        assert!(!error.contains("`plugin:misbehave.wasm` and `plugin:misbehave.wasm`"), "{error}");
        assert!(error.contains("`toolcell tools update misbehave ") && error.contains("`toolcell tools remove misbehave`"), "{error}");
    }
    unchanged("a refused add");

    // A new build that does not load (it needs stubs the policy does not grant) is refused.
    let unloadable = site.path("net.wasm");
    std::fs::write(&unloadable, toolcell_tests::guest_program("net_probe")).expect("write");
    let refused = site.run(&["--policy", &policy, "tools", "update", "misbehave", unloadable.to_str().expect("UTF-8"), "--force"]);
    assert_eq!(refused.status, 2, "{}", refused.stdout);
    assert!(refused.stderr.contains("refused: the new build of `misbehave` does not load; nothing changed"), "{}", refused.stderr);
    unchanged("an unloadable build");
    // So is another tool.
    let other = site.path("read_file.wasm");
    let read_file = toolcell_builtins::components().find(|(name, _)| *name == "read_file").expect("read_file").1;
    std::fs::write(&other, read_file).expect("write");
    let refused = site.run(&["--policy", &policy, "tools", "update", "misbehave", other.to_str().expect("UTF-8")]);
    assert_eq!(refused.status, 2, "{}", refused.stdout);
    unchanged("another tool");
    // And a policy whose directory takes no new file (the new text is written beside it):
    // the plugin stays as it was too.
    {
        let _sealed = Sealed::new(&site.path("."));
        let refused = site.run(&["--policy", &policy, "tools", "update", "misbehave", second, "--force"]);
        assert_eq!(refused.status, 2, "{}", refused.stdout);
        assert!(refused.stderr.contains("nothing changed"), "{}", refused.stderr);
    }
    unchanged("an unwritable policy");

    // The update: what changes, then the plugin and its pin replaced together.
    let updated = site.run(&["--policy", &policy, "tools", "update", "misbehave", second, "--force"]);
    assert_eq!(updated.status, 0, "{}", updated.stderr);
    for expected in [
        "changes to `misbehave`:\n".to_owned(),
        format!("  sha256: {old_sha} -> {new_sha}\n"),
        "  annotations: unchanged (".to_owned(),
        "  imports: unchanged\n".to_owned(),
        "  input schema: unchanged\n".to_owned(),
        "updated `misbehave` (".to_owned(),
        format!("policy.toml line 3 now reads sha256 = \"{new_sha}\""),
    ] {
        assert!(updated.stdout.contains(&expected), "{expected}\n{}", updated.stdout);
    }
    assert_eq!(std::fs::read(&installed).expect("read"), rebuilt_bytes);
    assert_eq!(std::fs::read_to_string(&policy).expect("read"), policy_text.replace(&old_sha, &new_sha));
    let called = call();
    assert_eq!((called.status, called.stdout.trim()), (0, "ok"), "{}", called.stderr);
    // Again: the same bytes, nothing to do.
    let again = site.run(&["--policy", &policy, "tools", "update", "misbehave", second]);
    assert_eq!(again.status, 0, "{}", again.stderr);
    assert!(again.stdout.contains("with the same bytes; nothing changed"), "{}", again.stdout);
    // A plugin that is not installed is pointed to `tools add`.
    let missing = site.run(&["tools", "update", "line_count", second]);
    assert_eq!(missing.status, 2);
    assert!(
        missing.stderr.contains("no plugin `line_count` is installed") && missing.stderr.contains("`toolcell tools add "),
        "{}",
        missing.stderr
    );
}

/// A directory in which no entry can be made until this is dropped: read-only for an
/// ordinary user; immutable (`chattr +i`) for root, whom permissions do not stop.
struct Sealed(PathBuf);

impl Sealed {
    fn new(directory: &Path) -> Self {
        use std::os::unix::fs::PermissionsExt;
        if is_root() {
            let status = Command::new("chattr").arg("+i").arg(directory).status().expect("run chattr");
            assert!(status.success(), "chattr +i {} (root needs the immutable flag to be refused a write)", directory.display());
        } else {
            std::fs::set_permissions(directory, std::fs::Permissions::from_mode(0o555)).expect("chmod");
        }
        Sealed(directory.to_path_buf())
    }
}

impl Drop for Sealed {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if is_root() {
            let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
        } else {
            let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o755));
        }
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|output| output.stdout.trim_ascii() == b"0")
}
