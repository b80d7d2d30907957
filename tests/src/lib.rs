//! Test support: one runtime per test binary (built-in tools plus the guest test programs),
//! and a fixture with a fresh workspace beside an `outside` directory the tools must never
//! reach.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;
use toolcell_runtime::{CallOutcome, CallRequest, Runtime, RuntimeBuilder, Workspace};
use toolcell_types::{ToolError, ToolErrorKind, ToolOutput};

pub mod languages;
pub mod measure;
pub mod postgres;

/// The guest test programs, `(name, component bytes)`.
pub mod guest_programs {
    include!(concat!(env!("OUT_DIR"), "/guest_programs.rs"));
}

/// The example third-party tools in `examples/`, `(name, component bytes)`.
pub mod examples {
    include!(concat!(env!("OUT_DIR"), "/examples.rs"));
}

/// The example tool that reaches the network (`examples/http-fetch`), `(name, component bytes)`.
pub mod network_examples {
    include!(concat!(env!("OUT_DIR"), "/network_examples.rs"));
}

/// Call a tool as `impl` on `workspace` in `session`, writing for lock owner `owner` with
/// `fences`.
pub fn call_in(
    runtime: &Runtime,
    workspace: &Workspace,
    session: &str,
    owner: Option<&str>,
    fences: &[u64],
    tool: &str,
    args: &Value,
) -> CallOutcome {
    let args = args.to_string();
    runtime
        .call(&CallRequest { owner, fences, ..CallRequest::new(workspace, "impl", session, tool, &args) })
        .unwrap_or_else(|error| panic!("host error calling {tool}: {error}"))
}

/// Run `command` and return its output; the test fails, showing the command and what it
/// printed, unless it succeeds.
pub(crate) fn run_ok(command: &mut std::process::Command) -> std::process::Output {
    let output = command.output().unwrap_or_else(|error| panic!("cannot run {command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The bytes of a guest test program.
///
/// # Panics
///
/// If there is no such program.
pub fn guest_program(name: &str) -> &'static [u8] {
    guest_programs::COMPONENTS
        .iter()
        .find(|(program, _)| *program == name)
        .map(|(_, bytes)| *bytes)
        .unwrap_or_else(|| panic!("no guest test program named {name}"))
}

/// The sha256 of `bytes` in hex, computed by the system's `sha256sum`: apart from toolcell's
/// own hashing, which the tests check.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let output = Command::new("sha256sum").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().and_then(|mut child| {
        child.stdin.take().expect("stdin").write_all(bytes)?;
        child.wait_with_output()
    });
    String::from_utf8(output.expect("run sha256sum").stdout).expect("UTF-8").split_whitespace().next().expect("a hash").to_owned()
}

/// `wasm` with a custom section appended: another build of the same component, still valid.
pub fn rebuilt_component(wasm: &[u8], tag: &[u8; 4]) -> Vec<u8> {
    let mut bytes = wasm.to_vec();
    bytes.extend_from_slice(&[0x00, 0x05, 0x04]);
    bytes.extend_from_slice(tag);
    bytes
}

/// A compiled-component cache shared by the tests, so that each test binary compiles once.
pub fn shared_cache_dir() -> PathBuf {
    Path::new(env!("OUT_DIR")).join("test-component-cache")
}

/// Wait up to `limit` until `done` holds, for what the host finishes on a thread of its own
/// after a call has answered.
pub fn eventually(what: &str, limit: std::time::Duration, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not after {limit:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A runtime builder with the built-in tools and the shared cache.
pub fn builtin_runtime_builder() -> RuntimeBuilder {
    let mut builder = RuntimeBuilder::new().cache_dir(shared_cache_dir());
    for (name, wasm) in toolcell_builtins::components() {
        builder = builder.component(format!("builtin:{name}"), wasm);
    }
    builder
}

/// The runtime the tests share: built-in tools plus `fs_probe` and `misbehave`.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        builtin_runtime_builder()
            .component("test:fs_probe", guest_program("fs_probe"))
            .component("test:misbehave", guest_program("misbehave"))
            .build()
            .unwrap_or_else(|error| panic!("the test runtime does not build: {error}"))
    })
}

/// The shipped default policy.
pub const DEFAULT_POLICY: &str = include_str!("../../policies/default.toml");

/// A policy for the governance tests: the default policy's path rules, with every tool
/// allowed (so hostile test components can run), a secret directory, and an `ask` area.
pub const TEST_POLICY: &str = r#"
version = 1

[roles.control]
tools = ["*"]

[[roles.control.rules]]
id = "control-read"
access = ["read", "list"]
paths = ["**"]
effect = "allow"

[roles.impl]
tools = ["*"]

[[roles.impl.rules]]
id = "impl-read"
access = ["read", "list"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "impl-write"
access = ["write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "docs-read-only"
access = ["write", "delete"]
paths = ["docs/**"]
effect = "deny"

[[roles.impl.rules]]
id = "secrets-hidden"
access = ["read"]
paths = ["secrets/**"]
effect = "deny"

[[roles.impl.rules]]
id = "ask-before-release"
access = ["write"]
paths = ["release/**"]
effect = "ask"
"#;

/// The built-in tools and the test programs, governed by [`TEST_POLICY`].
pub fn governed_runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        builtin_runtime_builder()
            .component("test:fs_probe", guest_program("fs_probe"))
            .component("test:misbehave", guest_program("misbehave"))
            .policy("test-policy.toml", TEST_POLICY)
            .build()
            .unwrap_or_else(|error| panic!("the governed test runtime does not build: {error}"))
    })
}

/// A fresh runtime like [`governed_runtime`] that keeps its audit trail in `state_dir`.
pub fn audited_runtime(state_dir: &Path) -> Runtime {
    builtin_runtime_builder()
        .component("test:fs_probe", guest_program("fs_probe"))
        .policy("test-policy.toml", TEST_POLICY)
        .audit_dir(state_dir)
        .build()
        .unwrap_or_else(|error| panic!("the audited test runtime does not build: {error}"))
}

/// The built-in tools and the test programs governed by `policy`, keeping their state (audit
/// trail, journals, locks, reads) in `state_dir` if given.
pub fn runtime_with_policy(policy: &str, state_dir: Option<&Path>) -> Runtime {
    let mut builder = builtin_runtime_builder()
        .component("test:fs_probe", guest_program("fs_probe"))
        .component("test:misbehave", guest_program("misbehave"))
        .policy("policy.toml", policy);
    if let Some(state_dir) = state_dir {
        builder = builder.audit_dir(state_dir);
    }
    builder.build().unwrap_or_else(|error| panic!("the test runtime does not build: {error}"))
}

/// The records of an audit log, parsed.
pub fn audit_records(runtime: &Runtime) -> Vec<toolcell_audit::Record> {
    let text = runtime.audit().expect("an audited runtime").read().expect("read the audit log");
    toolcell_audit::verify(text.lines()).expect("the audit chain is intact");
    text.lines().map(|line| serde_json::from_str(line).expect("a record")).collect()
}

/// The built-in tools governed by the shipped default policy.
pub fn default_policy_runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        builtin_runtime_builder()
            .policy("policies/default.toml", DEFAULT_POLICY)
            .build()
            .unwrap_or_else(|error| panic!("the default-policy runtime does not build: {error}"))
    })
}

/// A temporary directory holding `workspace/` (what tools see) and, beside it, `outside/`
/// and `workspace-sibling/` (a sibling whose name extends the workspace's), each with a
/// canary file.
pub struct Fixture {
    /// Keeps the directory alive.
    pub temp: tempfile::TempDir,
    /// The workspace as the runtime sees it.
    pub workspace: Workspace,
    /// Everything beside the workspace as [`Fixture::mark_outside`] last saw it.
    outside: std::sync::Mutex<Vec<(String, String)>>,
}

/// Files larger than this are compared by size and modification time in [`Fixture::snapshot`].
const SNAPSHOT_CONTENT_LIMIT: u64 = 16 * 1024 * 1024;

/// The content of every canary file outside the workspace.
pub const CANARY: &str = "CANARY-outside-the-workspace";

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

impl Fixture {
    /// A fresh fixture with an empty workspace.
    pub fn new() -> Self {
        let temp = tempfile::tempdir().expect("a temporary directory");
        for directory in ["workspace", "outside", "workspace-sibling"] {
            std::fs::create_dir(temp.path().join(directory)).expect("create fixture directory");
        }
        std::fs::write(temp.path().join("outside/secret.txt"), CANARY).expect("write canary");
        std::fs::write(temp.path().join("workspace-sibling/secret.txt"), CANARY).expect("write canary");
        let workspace = Workspace::open(&temp.path().join("workspace")).expect("open workspace");
        let fixture = Fixture { temp, workspace, outside: std::sync::Mutex::default() };
        fixture.mark_outside();
        fixture
    }

    /// Take what now lies beside the workspace (a test's own host-only files included) as what
    /// [`Fixture::assert_outside_untouched`] requires to stay as it is.
    pub fn mark_outside(&self) {
        let snapshot = self.snapshot_outside();
        *self.outside.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = snapshot;
    }

    /// Everything in the fixture's base directory but the workspace's content, as
    /// [`Fixture::snapshot`] describes it (paths relative to the base directory).
    pub fn snapshot_outside(&self) -> Vec<(String, String)> {
        snapshot_tree(&self.base(), Some(Path::new("workspace")))
    }

    /// The host path of the workspace.
    pub fn root(&self) -> &Path {
        self.workspace.root()
    }

    /// The host path of the temporary directory holding everything.
    pub fn base(&self) -> PathBuf {
        self.root().parent().expect("workspace has a parent").to_path_buf()
    }

    /// Write a file in the workspace (parents created).
    pub fn write(&self, relative: &str, content: impl AsRef<[u8]>) {
        let path = self.root().join(relative);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("create parents");
        std::fs::write(path, content).expect("write fixture file");
    }

    /// Read a workspace file's bytes.
    pub fn read(&self, relative: &str) -> Vec<u8> {
        std::fs::read(self.root().join(relative)).expect("read fixture file")
    }

    /// Read a workspace file as text.
    pub fn read_text(&self, relative: &str) -> String {
        String::from_utf8(self.read(relative)).expect("UTF-8 fixture file")
    }

    /// Everything in the workspace, sorted: each path with its type, permission bits and
    /// content (or link target). Two equal snapshots mean byte-identical trees.
    pub fn snapshot(&self) -> Vec<(String, String)> {
        snapshot_tree(self.root(), None)
    }

    /// Call `fs_probe` in `session` to write `content` to `path`, read it as a symlink (which
    /// puts the file in place before the call ends) and then hold the call open for `hold_ms`;
    /// once the file is in place, run `meanwhile` (what another program does while the call
    /// runs) and then wait for the call's outcome.
    pub fn while_a_call_holds(
        &self,
        runtime: &Runtime,
        session: &str,
        (path, content): (&str, &str),
        hold_ms: u64,
        meanwhile: impl FnOnce(),
    ) -> CallOutcome {
        let ops = serde_json::json!({"ops": [
            {"op": "write", "path": path, "content": content},
            {"op": "read_link", "path": path},
            {"op": "sleep", "path": "", "content": hold_ms.to_string()},
        ]});
        std::thread::scope(|scope| {
            let call = scope.spawn(|| self.call_as(runtime, session, None, &[], "fs_probe", &ops));
            eventually(&format!("the call puts `{path}` in place"), std::time::Duration::from_secs(10), || self.read_text(path) == content);
            meanwhile();
            call.join().expect("the call")
        })
    }

    /// Call a tool as `role` in `session`, writing for lock owner `owner` with `fences`.
    pub fn call_as(&self, runtime: &Runtime, session: &str, owner: Option<&str>, fences: &[u64], tool: &str, args: &Value) -> CallOutcome {
        call_in(runtime, &self.workspace, session, owner, fences, tool, args)
    }

    /// Create a symlink in the workspace.
    pub fn symlink(&self, target: impl AsRef<Path>, relative: &str) {
        std::os::unix::fs::symlink(target, self.root().join(relative)).expect("create symlink");
    }

    /// Call a tool as role `impl` in session `s-test`, on the ungoverned runtime.
    pub fn call(&self, tool: &str, args: &Value) -> CallOutcome {
        self.call_on(runtime(), "impl", tool, args, None)
    }

    /// Call a tool on `runtime` as `role`, with an optional approver for `ask` rules.
    pub fn call_on(
        &self,
        runtime: &Runtime,
        role: &str,
        tool: &str,
        args: &Value,
        approver: Option<&std::sync::Arc<dyn toolcell_runtime::Approver>>,
    ) -> CallOutcome {
        let args = args.to_string();
        runtime
            .call(&CallRequest { approver, ..CallRequest::new(&self.workspace, role, "s-test", tool, &args) })
            .unwrap_or_else(|error| panic!("host error calling {tool}: {error}"))
    }

    /// Call a tool on the governed runtime as `role`; it must be refused by the guard. Returns
    /// the message and the rules of the refusals; checks that no host path leaks.
    pub fn denied(&self, role: &str, tool: &str, args: Value) -> (String, Vec<String>) {
        let outcome = self.call_on(governed_runtime(), role, tool, &args, None);
        match outcome.result {
            Ok(output) => panic!("{role} {tool} {args} should be denied but returned:\n{}", output.text),
            Err(error) => {
                assert_eq!(error.kind, ToolErrorKind::Denied, "{role} {tool} {args}: {error}");
                self.assert_no_host_path(&error.message);
                let rules = outcome.denials.iter().map(|denial| denial.event.rule.clone()).collect();
                (error.message, rules)
            }
        }
    }

    /// Call a tool on the governed runtime as `role`; it must succeed.
    pub fn allowed(&self, role: &str, tool: &str, args: Value) -> ToolOutput {
        let outcome = self.call_on(governed_runtime(), role, tool, &args, None);
        match outcome.result {
            Ok(output) => output,
            Err(error) => panic!("{role} {tool} {args} should succeed but failed: {error}"),
        }
    }

    /// Call a tool that must succeed; return its output. Checks that no host path leaks.
    pub fn ok(&self, tool: &str, args: Value) -> ToolOutput {
        let outcome = self.call(tool, &args);
        match outcome.result {
            Ok(output) => {
                self.assert_no_host_path(&output.text);
                if let Some(structured) = &output.structured {
                    self.assert_no_host_path(&structured.to_string());
                }
                output
            }
            Err(error) => panic!("{tool} {args} failed: {error}"),
        }
    }

    /// Call a tool that must fail with `kind`; return the message, and its hint on a line of
    /// its own (`\nhint: …`) when it has one. Checks that no host path leaks.
    pub fn error(&self, tool: &str, args: Value, kind: ToolErrorKind) -> String {
        let outcome = self.call(tool, &args);
        match outcome.result {
            Ok(output) => panic!("{tool} {args} should fail with {kind} but returned:\n{}", output.text),
            Err(ToolError { kind: got, message, hint }) => {
                assert_eq!(got, kind, "{tool} {args}: wrong error kind, message: {message}");
                let text = match hint {
                    Some(hint) => format!("{message}\nhint: {hint}"),
                    None => message,
                };
                self.assert_no_host_path(&text);
                text
            }
        }
    }

    /// Panic if `text` contains a host path of this fixture or the canary.
    pub fn assert_no_host_path(&self, text: &str) {
        let base = self.base();
        let base = base.to_string_lossy();
        assert!(!text.contains(base.as_ref()), "a host path leaked: {text}");
        let temp_root = std::env::temp_dir();
        assert!(!text.contains(temp_root.to_string_lossy().as_ref()), "a host path leaked: {text}");
        assert!(!text.contains(CANARY), "content from outside the workspace leaked: {text}");
    }

    /// Panic unless the canary files outside the workspace are intact and alone, and
    /// everything beside the workspace (the base directory's entries and what they hold, a
    /// test's host-only files included) is as [`Fixture::mark_outside`] last saw it.
    pub fn assert_outside_untouched(&self) {
        let expected = self.outside.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let now = self.snapshot_outside();
        if now != expected {
            let gained: Vec<&(String, String)> = now.iter().filter(|entry| !expected.contains(entry)).collect();
            let lost: Vec<&(String, String)> = expected.iter().filter(|entry| !now.contains(entry)).collect();
            panic!("beside the workspace, something changed: now {gained:?}, before {lost:?}");
        }
        for directory in ["outside", "workspace-sibling"] {
            let names: Vec<String> = std::fs::read_dir(self.base().join(directory))
                .expect("read outside directory")
                .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(names, ["secret.txt"], "{directory} gained or lost entries");
            let content = std::fs::read_to_string(self.base().join(directory).join("secret.txt")).expect("read canary");
            assert_eq!(content, CANARY, "{directory}/secret.txt was modified");
        }
    }
}

/// Everything under `root`, sorted: each path with its type, permission bits and content (or
/// link target); `skip` (relative to `root`) is listed but not entered.
fn snapshot_tree(root: &Path, skip: Option<&Path>) -> Vec<(String, String)> {
    use std::os::unix::fs::PermissionsExt;
    let mut entries = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).expect("read directory") {
            let path = entry.expect("entry").path();
            let relative = path.strip_prefix(root).expect("inside");
            let metadata = std::fs::symlink_metadata(&path).expect("lstat");
            let mode = metadata.permissions().mode() & 0o7777;
            let description = if metadata.is_symlink() {
                format!("link -> {}", std::fs::read_link(&path).expect("readlink").display())
            } else if metadata.is_dir() {
                if skip != Some(relative) {
                    pending.push(path.clone());
                }
                format!("dir {mode:o}")
            } else if !metadata.is_file() {
                // A FIFO or device: reading it could block.
                format!("special {mode:o}")
            } else if metadata.len() > SNAPSHOT_CONTENT_LIMIT {
                // Huge (or sparse) files: their size and modification time stand for the content.
                format!("file {mode:o} {} bytes, modified {:?}", metadata.len(), metadata.modified().ok())
            } else {
                format!("file {mode:o} {}", String::from_utf8_lossy(&std::fs::read(&path).expect("read")))
            };
            entries.push((relative.to_string_lossy().into_owned(), description));
        }
    }
    entries.sort();
    entries
}
