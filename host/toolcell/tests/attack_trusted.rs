//! Attacks on what other toolcell runs trust, through the real binary and a hostile plugin
//! (`fs_probe`, which calls `std::fs` directly): the default state, cache and configuration
//! directories of a `$HOME` workspace whose run keeps its own elsewhere, reached through a
//! name on their way rather than through their own path.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

const ALLOW_ALL: &str = r#"
version = 1

[roles.admin]
tools = ["*"]

[[roles.admin.rules]]
id = "admin-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"
"#;

/// A `$HOME` workspace where the user has not made toolcell's default directories yet (the
/// parents `.local`, `.cache` and `.config` exist, as on any desktop), and a place elsewhere
/// for this run's own state, cache, plugins and policy.
struct Home {
    _temp: tempfile::TempDir,
    home: PathBuf,
    elsewhere: PathBuf,
}

fn home() -> Home {
    let temp = tempfile::tempdir().expect("temporary directory");
    let home = temp.path().join("home");
    let elsewhere = temp.path().join("elsewhere");
    for directory in [".local/share", ".cache/fontconfig", ".config/git", "project"] {
        std::fs::create_dir_all(home.join(directory)).expect("mkdir");
    }
    std::fs::create_dir_all(elsewhere.join("plugins")).expect("elsewhere");
    std::fs::write(elsewhere.join("plugins/fs_probe.wasm"), toolcell_tests::guest_program("fs_probe")).expect("plugin");
    std::fs::write(elsewhere.join("allow-all.toml"), ALLOW_ALL).expect("policy");
    Home { _temp: temp, home, elsewhere }
}

/// Run `toolcell call fs_probe` with `ops` as `admin` on the workspace `$HOME`, with this
/// run's cache, state and plugins elsewhere. Returns (exit status, stdout + stderr).
fn probe(home: &Home, ops: &Value) -> (i32, String) {
    builtin(home, "fs_probe", &json!({ "ops": ops }))
}

/// The next plain run opens `~/.local/state/toolcell/state.key` through whatever names lead
/// there; a tool of this run must not be able to put anything at that path.
#[test]
fn a_symlink_on_the_way_to_the_default_state_directory_cannot_be_planted() {
    for (parent, link, target) in [
        // `.local/state` made a symlink to a directory the plugin fills.
        (".local/state", ".local/state", "../planted"),
        // `.cache` moved away and replaced by a symlink.
        (".cache", ".cache", "planted"),
        // `.config/toolcell` does not exist: its parent is real, the link is the directory
        // itself (refused already), so go one up.
        (".config", ".config", "planted"),
    ] {
        let home = home();
        let trusted = match parent {
            ".local/state" => ".local/state/toolcell/state.key",
            ".cache" => ".cache/toolcell/cache.key",
            _ => ".config/toolcell/service.toml",
        };
        let inside = trusted.strip_prefix(&format!("{parent}/")).expect("inside");
        let ops = json!([
            {"op": "mkdir", "path": format!("planted/{}", Path::new(inside).parent().expect("parent").display())},
            {"op": "write", "path": format!("planted/{inside}"), "content": "planted by a tool"},
            {"op": "rename", "path": parent, "to": "moved-away"},
            {"op": "symlink", "path": link, "to": target},
            {"op": "write", "path": trusted, "content": "planted by a tool"},
        ]);
        let (_, text) = probe(&home, &ops);
        let path = home.home.join(trusted);
        assert!(
            std::fs::read_to_string(&path).is_err(),
            "{trusted}: a tool put a file where the next plain run trusts it (through `{link}` -> `{target}`): {text}"
        );
    }
}

/// Run the executable at `executable` (as a shell would, by that name) with `call TOOL ARGS` as
/// `admin` on the workspace `$HOME`. Returns (exit status, stdout + stderr).
fn call_as_started(executable: &Path, home: &Home, tool: &str, args: &Value) -> (i32, String) {
    let output = Command::new(executable)
        .args(locations(home, &home.elsewhere.join("state"), &home.elsewhere.join("allow-all.toml")))
        .args(["call", tool, &args.to_string(), "--role", "admin", "--workspace"])
        .arg(&home.home)
        .env("HOME", &home.home)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("TOOLCELL_CACHE_DIR")
        .env_remove("TOOLCELL_STATE_DIR")
        .output()
        .expect("run toolcell");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), text)
}

/// An install that puts a symlink on `$PATH` (`~/.local/bin/toolcell` -> the real binary, as
/// many installers do): the real binary is protected, but the name the next start runs is
/// the symlink. With the built-in tools only, an executable script of the project is moved over
/// that name and rewritten (a whole-file rewrite keeps its mode).
#[test]
fn the_name_the_executable_was_started_by_is_protected_too() {
    let home = home();
    let real = home.home.join("opt/toolcell/bin/toolcell");
    std::fs::create_dir_all(real.parent().expect("parent")).expect("mkdir");
    std::fs::copy(env!("CARGO_BIN_EXE_toolcell"), &real).expect("install");
    let on_path = home.home.join(".local/bin/toolcell");
    std::fs::create_dir_all(on_path.parent().expect("parent")).expect("mkdir");
    std::os::unix::fs::symlink("../../opt/toolcell/bin/toolcell", &on_path).expect("symlink");
    let script = home.home.join("project/run.sh");
    std::fs::write(&script, "#!/bin/sh\necho build\n").expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");

    for (tool, args) in [
        ("move_file", json!({"source": "project/run.sh", "destination": ".local/bin/toolcell"})),
        ("write_file", json!({"path": ".local/bin/toolcell", "content": "#!/bin/sh\necho owned\n"})),
        ("delete_file", json!({"path": ".local/bin/toolcell"})),
        ("move_file", json!({"source": ".local/bin", "destination": "moved-bin"})),
    ] {
        // Started by that name each time, as a shell would.
        let (status, text) = call_as_started(&on_path, &home, tool, &args);
        let link = std::fs::symlink_metadata(&on_path).map(|metadata| metadata.is_symlink()).unwrap_or(false);
        assert!(link, "{tool} {args}: the name the executable was started by was replaced (exit {status}): {text}");
        assert_eq!(status, 1, "{tool} {args}: {text}");
        assert!(!text.contains(&home.home.display().to_string()), "{tool}: a host path in {text}");
    }
    assert_eq!(std::fs::read(&real).expect("real"), std::fs::read(env!("CARGO_BIN_EXE_toolcell")).expect("built"));
}

/// Run a built-in tool as `admin` on the workspace `$HOME`, this run's directories elsewhere.
fn builtin(home: &Home, tool: &str, args: &Value) -> (i32, String) {
    call_as_started(Path::new(env!("CARGO_BIN_EXE_toolcell")), home, tool, args)
}

/// Dotfile setups make `~/.cache` a symlink to a disk elsewhere, or `~/.config` one into a
/// dotfiles checkout. The default directories are protected where the symlinks lead; the
/// symlinks themselves, which the next run follows, must be protected too: with the built-in
/// tools only, deleting the symlink and writing a real directory in its place hands the next
/// plain run a cache key (and machine code) or a configuration a tool wrote.
#[test]
fn a_symlink_on_the_way_to_a_default_directory_is_protected_as_the_directory() {
    let home = home();
    let outside_cache = home.elsewhere.join("disk/cache");
    std::fs::create_dir_all(outside_cache.join("toolcell")).expect("mkdir");
    std::fs::write(outside_cache.join("toolcell/cache.key"), "K".repeat(32)).expect("key");
    std::fs::remove_dir_all(home.home.join(".cache")).expect("rm");
    std::os::unix::fs::symlink(&outside_cache, home.home.join(".cache")).expect("symlink .cache");
    std::fs::create_dir_all(home.home.join("dotfiles/config/toolcell")).expect("mkdir");
    std::fs::write(home.home.join("dotfiles/config/toolcell/service.toml"), "listen = \"127.0.0.1:8750\"\n").expect("config");
    std::fs::remove_dir_all(home.home.join(".config")).expect("rm");
    std::os::unix::fs::symlink("dotfiles/config", home.home.join(".config")).expect("symlink .config");

    // One run (a long-lived `mcp` or `serve` would do it over several calls with the built-in
    // tools): the symlink goes, a real directory takes its name.
    let ops = json!([
        {"op": "remove", "path": ".cache"},
        {"op": "mkdir", "path": ".cache/toolcell"},
        {"op": "write", "path": ".cache/toolcell/cache.key", "content": "P".repeat(32)},
        {"op": "rename", "path": ".config", "to": "old-config"},
        {"op": "mkdir", "path": ".config/toolcell"},
        {"op": "write", "path": ".config/toolcell/service.toml", "content": "root = \"/\"\n"},
    ]);
    let mut texts = vec![probe(&home, &ops)];
    texts.push(builtin(&home, "delete_file", &json!({"path": ".config"})));
    for link in [".cache", ".config"] {
        let kept = std::fs::symlink_metadata(home.home.join(link)).is_ok_and(|metadata| metadata.is_symlink());
        assert!(kept, "`{link}` is no longer the symlink the next run follows: {texts:?}");
    }
    let cache_key = std::fs::read_to_string(home.home.join(".cache/toolcell/cache.key")).unwrap_or_default();
    assert_eq!(cache_key, "K".repeat(32), "the next plain run would trust a cache key a tool wrote: {texts:?}");
    let config = std::fs::read_to_string(home.home.join(".config/toolcell/service.toml")).unwrap_or_default();
    assert_eq!(config, "listen = \"127.0.0.1:8750\"\n", "the next serve would read a configuration a tool wrote: {texts:?}");
    for (status, text) in &texts {
        assert!(!text.contains(&home._temp.path().display().to_string()), "a host path in {status}: {text}");
    }
}

/// A run that keeps its state in a directory of its own (`--state-dir ~/work-state`, for a
/// project elsewhere) trusts what it finds there next time: the key its journals are signed
/// with, and the journals it replays. A plain run on the `$HOME` workspace does not know that
/// directory, and its tools write there. (Not fixed: it needs a record, in a protected default
/// location, of every state, cache and plugin directory any run of this user has used.)
#[test]
fn another_runs_own_state_directory_is_protected_too() {
    let home = home();
    let project = home.elsewhere.join("project");
    std::fs::create_dir_all(&project).expect("project");
    std::fs::write(project.join("a.txt"), "a\n").expect("file");
    let own_state = home.home.join("work-state");
    // The first run, with its own state directory under `$HOME`, on a project elsewhere.
    let output = Command::new(env!("CARGO_BIN_EXE_toolcell"))
        .arg("--cache-dir")
        .arg(home.elsewhere.join("cache"))
        .arg("--state-dir")
        .arg(&own_state)
        .arg("--policy")
        .arg(home.elsewhere.join("allow-all.toml"))
        .args(["call", "write_file", &json!({"path": "a.txt", "content": "b\n"}).to_string(), "--role", "admin", "--workspace"])
        .arg(&project)
        .env("HOME", &home.home)
        .output()
        .expect("run toolcell");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let key = std::fs::read(own_state.join("state.key")).ok();
    // A plain run on `$HOME` (its own state elsewhere): its tools reach the first run's key.
    let (_, read) = builtin(&home, "read_file", &json!({"path": "work-state/state.key"}));
    let (_, written) = builtin(&home, "write_file", &json!({"path": "work-state/state.key", "content": "planted"}));
    assert_eq!(std::fs::read(own_state.join("state.key")).ok(), key, "another run's state key was rewritten: {written}");
    assert!(read.contains("toolcell's own state"), "another run's state key was read: {read}");
}

/// A run told to load plugins from a directory that does not exist yet (`--plugin-dir
/// ~/myplugins`, made later by the user) loads whatever is there at its next start. Another
/// run with locations of its own, whose tools work on `$HOME`, rewrote the record of every
/// run's locations and left out those that did not exist: its tools then wrote a plugin there.
#[test]
fn a_plugin_directory_that_does_not_exist_yet_stays_protected_after_another_run() {
    let home = home();
    let project = home.elsewhere.join("project");
    std::fs::create_dir_all(&project).expect("project");
    let plugins = home.home.join("myplugins");
    let output = Command::new(env!("CARGO_BIN_EXE_toolcell"))
        .arg("--cache-dir")
        .arg(home.elsewhere.join("cache"))
        .arg("--state-dir")
        .arg(home.elsewhere.join("first-state"))
        .arg("--plugin-dir")
        .arg(&plugins)
        .args(["call", "list_files", "{}", "--workspace"])
        .arg(&project)
        .env("HOME", &home.home)
        .env_remove("XDG_STATE_HOME")
        .env_remove("TOOLCELL_STATE_DIR")
        .output()
        .expect("run toolcell");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // The other run (its own state, cache and plugins elsewhere) records its locations.
    let (_, written) = builtin(&home, "write_file", &json!({"path": "myplugins/word_count.wasm", "content": "\u{0}asm"}));
    assert!(!plugins.exists(), "a tool of another run made the plugin directory: {written}");
    assert!(written.contains("toolcell's own"), "refused as a protected location: {written}");
    let (_, made) = builtin(&home, "create_directory", &json!({"path": "myplugins"}));
    assert!(!plugins.exists(), "a tool of another run made the plugin directory: {made}");
}

/// Run `toolcell ARGUMENTS` on the workspace `$HOME` as `admin`, with this environment (and
/// none of toolcell's location variables but those in `env`). Returns (exit status, stdout +
/// stderr).
fn run_with(executable: &Path, home: &Home, arguments: &[&std::ffi::OsStr], env: &[(&str, &std::ffi::OsStr)]) -> (i32, String) {
    let mut command = Command::new(executable);
    command.args(arguments).env("HOME", &home.home);
    for variable in ["XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_CONFIG_HOME", "TOOLCELL_CACHE_DIR", "TOOLCELL_STATE_DIR"] {
        command.env_remove(variable);
    }
    for (variable, value) in env {
        command.env(variable, value);
    }
    let output = command.output().expect("run toolcell");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code().unwrap_or(-1), text)
}

/// The options of a run whose cache and plugins are elsewhere, its state in `state` and its
/// policy `policy`.
fn locations(home: &Home, state: &Path, policy: &Path) -> Vec<std::ffi::OsString> {
    let mut options = Vec::new();
    for (option, value) in [
        ("--cache-dir", home.elsewhere.join("cache")),
        ("--state-dir", state.to_path_buf()),
        ("--plugin-dir", home.elsewhere.join("plugins")),
        ("--policy", policy.to_path_buf()),
    ] {
        options.extend([option.into(), value.into_os_string()]);
    }
    options
}

/// `call TOOL ARGS --role admin --workspace WORKSPACE`, after `options`.
fn call_arguments<'a>(
    options: &'a [impl AsRef<std::ffi::OsStr>],
    tool: &'a str,
    args: &'a str,
    workspace: &'a Path,
) -> Vec<&'a std::ffi::OsStr> {
    let mut arguments: Vec<&std::ffi::OsStr> = options.iter().map(AsRef::as_ref).collect();
    arguments.extend(["call", tool, args, "--role", "admin", "--workspace"].map(std::ffi::OsStr::new));
    arguments.push(workspace.as_os_str());
    arguments
}

/// A run told `--state-dir ~/state-link`, a symlink to `~/real-state`, finds its key and
/// journals through that name every time. The directory was protected where it resolved, the
/// symlink was not: a tool of the run replaced it with one to a directory it filled with a key
/// of its own, and the next run used that directory (a key the tool knows, an audit trail
/// restarted).
#[test]
fn a_state_directory_named_through_a_symlink_cannot_be_sent_elsewhere() {
    let home = home();
    std::fs::create_dir_all(home.home.join("real-state")).expect("mkdir");
    std::os::unix::fs::symlink("real-state", home.home.join("state-link")).expect("symlink");
    let state = home.home.join("state-link");
    let options = locations(&home, &state, &home.elsewhere.join("allow-all.toml"));
    let ops = json!({"ops": [
        {"op": "mkdir", "path": "planted"},
        {"op": "write", "path": "planted/state.key", "content": "P".repeat(32)},
        {"op": "remove", "path": "state-link"},
        {"op": "symlink", "path": "state-link", "to": "planted"},
    ]})
    .to_string();
    let executable = Path::new(env!("CARGO_BIN_EXE_toolcell"));
    let (status, text) = run_with(executable, &home, &call_arguments(&options, "fs_probe", &ops, &home.home), &[]);
    let target = std::fs::read_link(&state).ok();
    assert_eq!(target.as_deref(), Some(Path::new("real-state")), "the state directory's name was sent elsewhere (exit {status}): {text}");
    assert!(!text.contains(&home.home.display().to_string()), "a host path in {text}");
    // A later run with other directories of its own protects it too (it was remembered).
    let (_, removed) = builtin(&home, "delete_file", &json!({"path": "state-link"}));
    assert!(std::fs::symlink_metadata(&state).is_ok_and(|metadata| metadata.is_symlink()), "another run removed it: {removed}");
}

/// A run may be told its state and cache directories through the environment
/// (`TOOLCELL_STATE_DIR`, `TOOLCELL_CACHE_DIR`) instead of options. The next run of the same
/// `$HOME` without those variables did not know them: its tools read the state key and the
/// cache key (with which a compiled component could be forged) and rewrote the audit trail.
#[test]
fn directories_chosen_through_the_environment_are_protected_in_runs_without_it() {
    let home = home();
    let project = home.elsewhere.join("project");
    std::fs::create_dir_all(&project).expect("project");
    std::fs::write(project.join("a.txt"), "a\n").expect("file");
    let (state, cache) = (home.home.join("env-state"), home.home.join("env-cache"));
    let policy = home.elsewhere.join("allow-all.toml");
    let options = [std::ffi::OsStr::new("--policy"), policy.as_os_str()];
    let write = json!({"path": "a.txt", "content": "b\n"}).to_string();
    let env = [("TOOLCELL_STATE_DIR", state.as_os_str()), ("TOOLCELL_CACHE_DIR", cache.as_os_str())];
    let (status, text) =
        run_with(Path::new(env!("CARGO_BIN_EXE_toolcell")), &home, &call_arguments(&options, "write_file", &write, &project), &env);
    assert_eq!(status, 0, "{text}");
    let key = std::fs::read(state.join("state.key")).expect("the first run's state key");
    let trail = std::fs::read(state.join("audit.jsonl")).expect("the first run's audit trail");
    assert!(cache.join("cache.key").exists(), "the first run's cache");
    // A plain run on `$HOME` (its own directories elsewhere, no such variables).
    for path in ["env-state/state.key", "env-cache/cache.key"] {
        let (_, read) = builtin(&home, "read_file", &json!({"path": path}));
        assert!(read.contains("toolcell's own"), "another run's {path} was read: {read}");
    }
    let (_, written) = builtin(&home, "write_file", &json!({"path": "env-state/audit.jsonl", "content": "forged\n"}));
    assert!(written.contains("toolcell's own"), "{written}");
    assert_eq!(std::fs::read(state.join("audit.jsonl")).expect("trail"), trail, "another run's audit trail was rewritten: {written}");
    assert_eq!(std::fs::read(state.join("state.key")).expect("key"), key);
}

/// The workspace is `$HOME`, and it holds toolcell installs other than the one this run was
/// started from: one on `$PATH` (`~/.cargo/bin/toolcell`, which a shell's next `toolcell`
/// runs) and one an earlier run was started from. A tool rewrote either, and the next start
/// of it ran the tool's code as the user.
#[test]
fn other_toolcell_executables_are_protected_too() {
    let home = home();
    let on_path = home.home.join(".cargo/bin/toolcell");
    let used_before = home.home.join("tools/toolcell");
    for copy in [&on_path, &used_before] {
        std::fs::create_dir_all(copy.parent().expect("parent")).expect("mkdir");
        std::fs::copy(env!("CARGO_BIN_EXE_toolcell"), copy).expect("install");
    }
    // An earlier run, started from `~/tools/toolcell`, on a project elsewhere.
    let project = home.elsewhere.join("project");
    std::fs::create_dir_all(&project).expect("project");
    let allow_all = home.elsewhere.join("allow-all.toml");
    let earlier = [std::ffi::OsStr::new("--policy"), allow_all.as_os_str()];
    let (status, text) = run_with(&used_before, &home, &call_arguments(&earlier, "list_files", "{}", &project), &[]);
    assert_eq!(status, 0, "{text}");
    // This run is started from the build, `~/.cargo/bin` on its `$PATH`.
    let path = std::env::join_paths([on_path.parent().expect("bin").to_path_buf(), PathBuf::from("/usr/bin"), PathBuf::from("/bin")])
        .expect("PATH");
    let options = locations(&home, &home.elsewhere.join("state"), &allow_all);
    for target in [".cargo/bin/toolcell", "tools/toolcell"] {
        let write = json!({"path": target, "content": "#!/bin/sh\necho owned\n"}).to_string();
        let (status, text) = run_with(
            Path::new(env!("CARGO_BIN_EXE_toolcell")),
            &home,
            &call_arguments(&options, "write_file", &write, &home.home),
            &[("PATH", path.as_os_str())],
        );
        assert_eq!(status, 1, "{target}: {text}");
        assert!(text.contains("toolcell's own"), "{target}: {text}");
    }
    for copy in [&on_path, &used_before] {
        assert_eq!(std::fs::read(copy).expect("copy"), std::fs::read(env!("CARGO_BIN_EXE_toolcell")).expect("build"), "{}", copy.display());
    }
}

/// A policy in the workspace that names registry signature keys beside it (`[registry]
/// signature_keys = ["keys/cosign.pub"]`): the policy file was protected, the keys were not,
/// and a tool that replaced one would have its own signatures trusted by `tools add` and the
/// check of the installed plugins.
#[test]
fn the_registry_keys_a_policy_names_are_protected_with_it() {
    let home = home();
    let policy = home.home.join("config/policy.toml");
    std::fs::create_dir_all(home.home.join("config/keys")).expect("mkdir");
    let text = ALLOW_ALL.replacen("version = 1\n", "version = 1\n\n[registry]\nsignature_keys = [\"keys/cosign.pub\"]\n", 1);
    std::fs::write(&policy, text).expect("policy");
    let key = "-----BEGIN PUBLIC KEY-----\nthe operator's\n-----END PUBLIC KEY-----\n";
    std::fs::write(home.home.join("config/keys/cosign.pub"), key).expect("key");
    let options = locations(&home, &home.elsewhere.join("state"), &policy);
    let write = json!({"path": "config/keys/cosign.pub", "content": "the attacker's"}).to_string();
    let (status, text) =
        run_with(Path::new(env!("CARGO_BIN_EXE_toolcell")), &home, &call_arguments(&options, "write_file", &write, &home.home), &[]);
    assert_eq!(status, 1, "{text}");
    assert!(text.contains("toolcell's own"), "{text}");
    // A later run with a policy of its own protects it too (it was remembered).
    let (_, moved) = builtin(&home, "move_file", &json!({"source": "config/keys", "destination": "old-keys"}));
    assert_eq!(std::fs::read_to_string(home.home.join("config/keys/cosign.pub")).expect("key"), key, "{moved}");
}
