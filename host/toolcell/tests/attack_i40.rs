//! Attacks on issue 40's changes, through the real binary: `toolcell tools update` replacing a
//! policy that lives in the workspace, the warning for a plugin left out, and paths as
//! clients send them (absolute paths and `file://` URIs through a symlinked workspace root).

use std::path::{Path, PathBuf};
use std::process::Command;
use toolcell_tests::{rebuilt_component, sha256_hex};

use serde_json::json;

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

/// A site: a workspace (`ws`, holding the policy, as a repository often does), a private
/// plugin directory holding the hostile plugin `fs_probe` (pinned), a state directory.
struct Site {
    base: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        use std::os::unix::fs::DirBuilderExt as _;
        let base = tempfile::tempdir().expect("temporary directory");
        std::fs::create_dir_all(base.path().join("ws")).expect("workspace");
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(base.path().join("plugins")).expect("plugins");
        Site { base }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.base.path().join(name)
    }

    fn run(&self, state: &Path, args: &[&str]) -> Run {
        let output = Command::new(env!("CARGO_BIN_EXE_toolcell"))
            .arg("--cache-dir")
            .arg(Path::new(env!("CARGO_TARGET_TMPDIR")).join("attack-i40-cache"))
            .arg("--state-dir")
            .arg(state)
            .arg("--plugin-dir")
            .arg(self.path("plugins"))
            .args(args)
            .env_remove("TOOLCELL_CACHE_DIR")
            .env_remove("TOOLCELL_STATE_DIR")
            .env_remove("TOOLCELL_PLUGIN_DIR")
            .env_remove("TOOLCELL_POLICY")
            .output()
            .expect("run toolcell");
        Run {
            status: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// FINDING: `tools update` writes the new policy to `.POLICY.tmp` beside the policy with
/// `std::fs::write`, which follows a symlink there, copies the policy's mode onto whatever it
/// points at, then renames the symlink over the policy. A tool (here the pinned plugin
/// `fs_probe`; any tool that can make a symlink inside the workspace) plants
/// `.policy.toml.tmp -> .state/audit.jsonl`; the operator's next `tools update` overwrites the
/// audit trail with the policy's text (and makes it world-readable), and the policy becomes a
/// symlink to the audit log: every later call fails, the trail no longer verifies.
#[test]
fn tools_update_does_not_write_through_a_symlink_planted_beside_the_policy() {
    let site = Site::new();
    let probe = toolcell_tests::guest_program("fs_probe");
    std::fs::write(site.path("plugins/fs_probe.wasm"), probe).expect("install");
    let policy = site.path("ws/policy.toml");
    let policy_text = format!(
        "version = 1\n[plugins.fs_probe]\nsha256 = \"{}\"\n[roles.admin]\ntools = [\"fs_probe\", \"read_file\"]\n[[roles.admin.rules]]\nid = \"all\"\naccess = [\"read\", \"list\", \"write\", \"delete\"]\npaths = [\"**\"]\neffect = \"allow\"\n",
        sha256_hex(probe)
    );
    std::fs::write(&policy, &policy_text).expect("policy");
    let policy = policy.to_str().expect("UTF-8");
    // This run keeps its state (audit trail included) inside the workspace, where toolcell
    // protects it from tools.
    let state = site.path("ws/.state");
    let workspace = site.path("ws");
    let workspace = workspace.to_str().expect("UTF-8");
    let call = |tool: &str, args: &serde_json::Value| {
        site.run(&state, &["--policy", policy, "call", tool, &args.to_string(), "--role", "admin", "--workspace", workspace])
    };
    let first = call("read_file", &json!({"path": "missing.txt"}));
    let audit = state.join("audit.jsonl");
    let audit_before = std::fs::read(&audit).unwrap_or_else(|error| panic!("an audit trail: {error}; {}", first.stderr));

    // The hostile tool plants the link (its target is inside the workspace, so the guard lets it).
    let planted = call("fs_probe", &json!({"ops": [{"op": "symlink", "path": ".policy.toml.tmp", "to": ".state/audit.jsonl"}]}));
    assert!(planted.stdout.contains("\"ok\":true"), "the tool could not plant the link: {}{}", planted.stdout, planted.stderr);

    // The operator updates the plugin, as the book says.
    let build = site.path("fs_probe.wasm");
    std::fs::write(&build, rebuilt_component(probe, b"two!")).expect("write");
    let updated = site.run(&state, &["--policy", policy, "tools", "update", "fs_probe", build.to_str().expect("UTF-8"), "--force"]);

    let policy_is_a_file = std::fs::symlink_metadata(policy).is_ok_and(|metadata| metadata.file_type().is_file());
    let audit_now = std::fs::read(&audit).unwrap_or_default();
    assert!(
        policy_is_a_file && audit_now.starts_with(&audit_before),
        "tools update (exit {}) wrote through the planted link: the policy is {}, the audit trail now begins {:?}\n{}{}",
        updated.status,
        if policy_is_a_file { "a file" } else { "a symlink" },
        String::from_utf8_lossy(&audit_now[..audit_now.len().min(60)]),
        updated.stdout,
        updated.stderr
    );
}

/// FINDING: the warning for a plugin left out prints its origin (the file name) raw on
/// stderr, and `tools` prints it raw on stdout: a file name's escape sequences and carriage
/// returns reach the operator's terminal (here: clear the screen, overwrite the line with a
/// forged `warning: all plugins verified`, set the window title).
#[test]
fn a_left_out_plugin_file_name_cannot_drive_the_terminal() {
    let site = Site::new();
    let name = "x\u{1b}[2J\rwarning: all plugins verified\u{1b}]0;pwned\u{7}.wasm";
    std::fs::write(site.path("plugins").join(name), b"not a component").expect("write");
    let run = site.run(&site.path("state"), &["tools"]);
    assert_eq!(run.status, 0, "{}", run.stderr);
    assert!(run.stderr.contains("left out the plugin"), "{}", run.stderr);
    for (channel, text) in [("stderr", &run.stderr), ("stdout", &run.stdout)] {
        assert!(
            !text.contains(['\u{1b}', '\r', '\u{7}']),
            "a file name's control characters reached {channel} raw: {:?}",
            text.lines().filter(|line| line.contains("verified")).collect::<Vec<_>>()
        );
    }
}

/// HELD: absolute paths and `file://` URIs through a symlinked workspace root, with
/// percent-encoded `..`, `/`, `\`, NUL and non-UTF-8 bytes, `localhost` and `////`: none
/// reaches the denied directory, none shows the canonical root the client never sent, none
/// panics.
#[test]
fn client_paths_through_a_symlinked_root_stay_governed_and_show_no_host_path() {
    let site = Site::new();
    let real = site.path("real/ws");
    std::fs::create_dir_all(real.join("secret")).expect("mkdir");
    std::fs::create_dir_all(real.join("pub")).expect("mkdir");
    std::fs::write(real.join("notes.txt"), "hi\n").expect("write");
    std::fs::write(real.join("secret/key"), "TOPSECRET\n").expect("write");
    std::os::unix::fs::symlink("real", site.path("link")).expect("symlink");
    let policy = site.path("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[roles.r]\ntools = [\"read_file\", \"read_many\", \"list_files\", \"file_info\"]\n[[roles.r.rules]]\nid = \"all\"\naccess = [\"read\", \"list\"]\npaths = [\"**\"]\neffect = \"allow\"\n[[roles.r.rules]]\nid = \"nosecret\"\naccess = [\"read\", \"list\"]\npaths = [\"secret\", \"secret/**\"]\neffect = \"deny\"\n",
    )
    .expect("policy");
    let given = site.path("link/ws");
    let given = given.to_str().expect("UTF-8");
    let canonical = std::fs::canonicalize(&real).expect("canonical");
    let canonical = canonical.to_str().expect("UTF-8");
    let state = site.path("state");
    let cases = [
        ("read_file", json!({"path": format!("file://{given}/pub/..%2Fsecret/key")})),
        ("read_file", json!({"path": format!("file://{given}/pub/%2e%2e/secret/key")})),
        ("read_file", json!({"path": format!("file://{given}/pub\\..\\secret\\key")})),
        ("read_file", json!({"path": format!("file://localhost{given}/secret/key")})),
        ("read_file", json!({"path": format!("file:///{given}/secret/key")})),
        ("read_file", json!({"path": format!("{given}/pub/../secret/key")})),
        ("read_file", json!({"path": format!("{given}/../../link/ws/secret/key")})),
        ("read_file", json!({"path": format!("file://{given}/secret%00/key")})),
        ("read_file", json!({"path": format!("file://{given}/%FF%FE")})),
        ("read_file", json!({"path": format!("file://{given}/nothere\\x")})),
        ("read_file", json!({"path": format!("file://{given}/pub%5Cnothere")})),
        ("read_many", json!({"paths": [format!("{given}/secret/key"), format!("file://{given}/secret/key")]})),
        ("list_files", json!({"path": format!("file://{given}/secret")})),
        ("file_info", json!({"path": format!("{given}/secret")})),
    ];
    for (tool, args) in cases {
        let run = site.run(
            &state,
            &["--policy", policy.to_str().expect("UTF-8"), "call", tool, &args.to_string(), "--role", "r", "--workspace", given],
        );
        let text = format!("{}{}", run.stdout, run.stderr);
        assert_ne!(run.status, 101, "{tool} {args}: the host panicked: {text}");
        assert!(!text.contains("TOPSECRET") && !text.contains("\"key\""), "{tool} {args}: the denied directory was reached: {text}");
        assert!(!text.contains(canonical), "{tool} {args}: the canonical root the client never sent was shown: {text}");
    }
}

/// FINDING: `tools update` reads the policy when it starts, checks the new build for seconds,
/// then writes back the whole text it read with its one pin changed. Two updates of two
/// different plugins run at once (a script updating every plugin) both say "now reads
/// sha256 = ..." and exit 0, but the second write puts the first plugin's old pin back: the
/// first plugin's new file stays, its pin is the old one, and every start fails.
#[test]
fn two_updates_at_once_leave_every_pin_matching_its_plugin() {
    let site = Site::new();
    let probe = toolcell_tests::guest_program("fs_probe");
    let misbehave = toolcell_tests::guest_program("misbehave");
    std::fs::write(site.path("plugins/fs_probe.wasm"), probe).expect("install");
    std::fs::write(site.path("plugins/misbehave.wasm"), misbehave).expect("install");
    let policy = site.path("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "version = 1\n[plugins.fs_probe]\nsha256 = \"{}\"\n[plugins.misbehave]\nsha256 = \"{}\"\n[roles.admin]\ntools = [\"fs_probe\", \"misbehave\"]\n",
            sha256_hex(probe),
            sha256_hex(misbehave)
        ),
    )
    .expect("policy");
    let policy = policy.to_str().expect("UTF-8").to_owned();
    std::fs::write(site.path("fs_probe.wasm"), rebuilt_component(probe, b"new1")).expect("write");
    std::fs::write(site.path("misbehave.wasm"), rebuilt_component(misbehave, b"new2")).expect("write");
    let state = site.path("state");
    let runs: Vec<Run> = std::thread::scope(|scope| {
        let handles: Vec<_> = ["fs_probe", "misbehave"]
            .into_iter()
            .map(|name| {
                let (site, state, policy) = (&site, &state, &policy);
                scope.spawn(move || {
                    let build = site.path(&format!("{name}.wasm"));
                    site.run(state, &["--policy", policy, "tools", "update", name, build.to_str().expect("UTF-8"), "--force"])
                })
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().expect("thread")).collect()
    });
    let statuses: Vec<i32> = runs.iter().map(|run| run.status).collect();
    let listed = site.run(&state, &["--policy", &policy, "tools"]);
    assert_eq!(
        listed.status,
        0,
        "both updates ended (exits {statuses:?}: {}), and now no command starts: {}",
        runs.iter().map(|run| run.stdout.lines().last().unwrap_or_default().to_owned()).collect::<Vec<_>>().join(" | "),
        listed.stderr
    );
}

/// FINDING: the workspace's "given" root is `std::path::absolute(--workspace)`, which keeps
/// `..`, and client paths are matched against it after folding `..` lexically, while the OS
/// resolved the `..` after the symlink. `--workspace /x/lnk/..` with `lnk -> deep/dir` is the
/// workspace `/x/deep`, but a client's `/x/config` (outside it, another file) is taken as the
/// workspace's `config`: an absolute path outside the workspace is not refused, the call reads
/// and writes another file than the one it names.
#[test]
fn an_absolute_path_outside_the_workspace_is_refused_even_after_a_dotdot_in_the_workspace_argument() {
    let site = Site::new();
    std::fs::create_dir_all(site.path("x/deep/dir")).expect("mkdir");
    std::os::unix::fs::symlink("deep/dir", site.path("x/lnk")).expect("symlink");
    std::fs::write(site.path("x/deep/config"), "inside\n").expect("write");
    std::fs::write(site.path("x/config"), "outside\n").expect("write");
    let policy = site.path("policy.toml");
    std::fs::write(
        &policy,
        "version = 1\n[roles.r]\ntools = [\"read_file\", \"write_file\"]\n[[roles.r.rules]]\nid = \"all\"\naccess = [\"read\", \"list\", \"write\"]\npaths = [\"**\"]\neffect = \"allow\"\n",
    )
    .expect("policy");
    let workspace = format!("{}/..", site.path("x/lnk").display());
    let outside = site.path("x/config");
    let written = site.run(
        &site.path("state"),
        &[
            "--policy",
            policy.to_str().expect("UTF-8"),
            "call",
            "write_file",
            &json!({"path": outside, "content": "written\n"}).to_string(),
            "--role",
            "r",
            "--workspace",
            &workspace,
        ],
    );
    let inside = std::fs::read_to_string(site.path("x/deep/config")).expect("read");
    assert!(
        written.status != 0 && inside == "inside\n",
        "a write to `{}` (outside the workspace) was accepted (exit {}: {}) and landed in the workspace's `config`, which now reads {inside:?}",
        outside.display(),
        written.status,
        written.stdout.trim()
    );
}
