//! The world a sequence runs in, and the invariants checked after every step.
//!
//! `base/home` is the workspace, laid out like a `$HOME` (the test process runs with `HOME`
//! set to it): `pub/` anyone may change; `alice/secret.txt` only alice may read or write,
//! `bob/secret.txt` only bob; `ask/key.txt` either may write but read only when the call's
//! approver says yes; `.env` protected (alice alone may write it, bob may not read it); nobody
//! may delete (so move away) any of them; and the default locations of toolcell's state, cache
//! and configuration. `base/outside` holds a canary no call may reach or change.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use toolcell_runtime::{Approver, CallOutcome, CallRequest, Runtime, Workspace};

/// The policy both roles are governed by.
pub const POLICY: &str = r#"
version = 1
protected = [".env"]

[roles.alice]
tools = ["*"]

[[roles.alice.rules]]
id = "alice-everything"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.alice.rules]]
id = "alice-rotates-env"
access = ["write"]
paths = [".env"]
effect = "allow"

[[roles.alice.rules]]
id = "alice-not-bob"
access = ["read", "list"]
paths = ["bob/**"]
effect = "deny"

[[roles.alice.rules]]
id = "alice-asks"
access = ["read"]
paths = ["ask/**"]
effect = "ask"

[[roles.alice.rules]]
id = "alice-not-bobs"
access = ["write", "delete"]
paths = ["bob/**"]
effect = "deny"

[[roles.alice.rules]]
id = "alice-keeps"
access = ["delete"]
paths = ["alice/**", "ask/**"]
effect = "deny"

[roles.bob]
tools = ["*"]

[[roles.bob.rules]]
id = "bob-everything"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.bob.rules]]
id = "bob-not-alice"
access = ["read", "list"]
paths = ["alice/**"]
effect = "deny"

[[roles.bob.rules]]
id = "bob-not-env"
access = ["read"]
paths = [".env"]
effect = "deny"

[[roles.bob.rules]]
id = "bob-asks"
access = ["read"]
paths = ["ask/**"]
effect = "ask"

[[roles.bob.rules]]
id = "bob-not-alices"
access = ["write", "delete"]
paths = ["alice/**"]
effect = "deny"

[[roles.bob.rules]]
id = "bob-keeps"
access = ["delete"]
paths = ["bob/**", "ask/**"]
effect = "deny"
"#;

/// Only alice may read it.
pub const ALICE_SECRET: &str = "CANARY-ALICE-7f3a";
/// Only bob may read it.
pub const BOB_SECRET: &str = "CANARY-BOB-91c2";
/// Readable only by a call whose approver said yes.
pub const ASK_SECRET: &str = "CANARY-ASK-5d0e";
/// Every content of `.env` starts with it: bob may never see it.
pub const ENV_SECRET: &str = "CANARY-ENV-";
/// Outside the workspace: nobody may see it.
pub const OUTSIDE_SECRET: &str = "CANARY-OUTSIDE-22b8";
/// In the host's own locations: nobody may see it.
pub const TRUSTED_SECRET: &str = "CANARY-TRUSTED-c41d";

/// The files only one role may write, and nobody may delete, with that role.
pub const OWNED: &[(&str, Role)] = &[(".env", Role::Alice), ("alice/secret.txt", Role::Alice), ("bob/secret.txt", Role::Bob)];

/// The toolcell default locations under `$HOME` (and `.git/config`, protected and named by no
/// rule) are host-owned: no call may change them.
pub const STATE_DIR: &str = ".local/state/toolcell";
/// The default compiled-component cache under `$HOME`.
pub const CACHE_DIR: &str = ".cache/toolcell";
/// The default configuration directory under `$HOME`.
pub const CONFIG_DIR: &str = ".config/toolcell";
/// Where the host's in-flight files start their names.
pub const SHADOW_PREFIX: &str = ".toolcell-";

/// A role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// May read `alice/` and `.env`, and write `.env`.
    Alice,
    /// May read `bob/`.
    Bob,
}

impl Role {
    /// The role's name in the policy.
    pub fn name(self) -> &'static str {
        match self {
            Role::Alice => "alice",
            Role::Bob => "bob",
        }
    }
}

/// Where this run keeps its state and finds its policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Config {
    /// In the default locations inside the workspace (`$HOME/.local/state/toolcell`, the
    /// policy in `$HOME/.config/toolcell`).
    Home,
    /// Elsewhere (`--state-dir`, `--policy` outside), while a plain earlier run left its state,
    /// cache and policy in the default locations inside the workspace.
    Elsewhere,
}

/// An approver that always gives the same answer.
struct Answer(bool);

/// An approver that answers `answer` to every question.
pub fn approver(answer: bool) -> Arc<dyn Approver> {
    Arc::new(Answer(answer))
}

impl Approver for Answer {
    fn approve(&self, _role: &str, _access: toolcell_runtime::Access, _path: &str, _rule: &str) -> bool {
        self.0
    }
}

/// A file's identity and content, as a snapshot keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    kind: &'static str,
    content: String,
    inode: u64,
    links: u64,
}

/// Everything under `root` (not following links), by relative path.
pub fn snapshot(root: &Path, skip: &[&Path]) -> BTreeMap<String, Entry> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(directory) = pending.pop() {
        let Ok(listing) = std::fs::read_dir(&directory) else { continue };
        for entry in listing.filter_map(Result::ok) {
            let path = entry.path();
            if skip.iter().any(|skipped| path == *skipped) {
                continue;
            }
            let Ok(metadata) = std::fs::symlink_metadata(&path) else { continue };
            let relative = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned();
            let (kind, content) = if metadata.is_symlink() {
                ("link", std::fs::read_link(&path).map(|target| target.to_string_lossy().into_owned()).unwrap_or_default())
            } else if metadata.is_dir() {
                pending.push(path);
                ("dir", String::new())
            } else if metadata.is_file() {
                ("file", String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned())
            } else {
                ("special", String::new())
            };
            let inode = if metadata.is_dir() { 0 } else { metadata.ino() };
            let links = if metadata.is_dir() { 0 } else { metadata.nlink() };
            entries.insert(relative, Entry { kind, content, inode, links });
        }
    }
    entries
}

/// What differs between two snapshots, for a failure message.
fn differences(before: &BTreeMap<String, Entry>, after: &BTreeMap<String, Entry>) -> Vec<String> {
    let mut changes = Vec::new();
    for (path, entry) in before {
        match after.get(path) {
            None => changes.push(format!("`{path}` removed")),
            Some(now) if now != entry => changes.push(format!("`{path}` changed: {entry:?} -> {now:?}")),
            Some(_) => {}
        }
    }
    for (path, entry) in after {
        if !before.contains_key(path) {
            changes.push(format!("`{path}` appeared: {entry:?}"));
        }
    }
    changes
}

/// A fresh world: the tree, the runtime for `config`, and the baselines of what must not
/// change.
pub struct World {
    /// Holds `home/` (the workspace) and `outside/`.
    pub base: PathBuf,
    /// Removes `base` when the world goes (unless it is the parent of `$HOME`).
    _keep: Option<tempfile::TempDir>,
    /// Where a [`Config::Elsewhere`] run keeps its state and policy.
    pub elsewhere: tempfile::TempDir,
    /// The workspace.
    pub workspace: Workspace,
    /// The runtime every call of this world goes through.
    pub runtime: Runtime,
    /// The configuration the runtime was built with.
    pub config: Config,
    /// Everything outside the workspace under `base`.
    outside: BTreeMap<String, Entry>,
    /// The host's locations inside the workspace that no tool may change.
    trusted: BTreeMap<String, Entry>,
    /// Files only one role may write, and nobody delete, as they were before this step.
    owned: BTreeMap<String, Entry>,
    /// Secrets of the host's own (keys) that no call may see.
    host_secrets: Vec<String>,
}

/// The built-in tools and `fs_probe`, governed by the policy file `policy`, keeping state in
/// `state`.
pub fn build_runtime(policy: &Path, state: &Path) -> Runtime {
    toolcell_tests::builtin_runtime_builder()
        .component("test:fs_probe", toolcell_tests::guest_program("fs_probe"))
        .policy_file(policy)
        .audit_dir(state)
        .build()
        .unwrap_or_else(|error| panic!("the adversary's runtime does not build: {error}"))
}

impl World {
    /// A fresh world for `config`.
    pub fn new(config: Config) -> World {
        let (base_path, keep) = match std::env::var_os(crate::HOME_VARIABLE) {
            // The re-executed test: `$HOME` is `base/home`, which must be the same path every
            // time, so the base directory is its parent, emptied for each world (the parent
            // test removes it at the end).
            Some(home) => {
                let parent = PathBuf::from(home).parent().expect("HOME has a parent").to_path_buf();
                for entry in std::fs::read_dir(&parent).expect("read the base directory").filter_map(Result::ok) {
                    let path = entry.path();
                    if path.is_dir() && !path.is_symlink() {
                        std::fs::remove_dir_all(&path).ok();
                    } else {
                        std::fs::remove_file(&path).ok();
                    }
                }
                (parent, None)
            }
            None => {
                let temp = tempfile::tempdir().expect("a temporary directory");
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        let home = base_path.join("home");
        std::fs::create_dir_all(&home).expect("create the workspace");
        std::fs::create_dir_all(base_path.join("outside")).expect("create outside");
        std::fs::write(base_path.join("outside/secret.txt"), OUTSIDE_SECRET).expect("write the outside canary");
        let write = |relative: &str, content: &str| {
            let path = home.join(relative);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("create parents");
            std::fs::write(path, content).expect("write a world file");
        };
        write("pub/readme.txt", "public\n");
        write("alice/secret.txt", ALICE_SECRET);
        write("bob/secret.txt", BOB_SECRET);
        write("ask/key.txt", ASK_SECRET);
        write(".env", &format!("{ENV_SECRET}original\n"));
        write("x/y/keep.txt", "keep\n");
        // Always protected (`.git/**`), and no rule names it: nobody may change it.
        write(".git/config", "[core]\n\tbare = false\n");
        // What a user's plain runs keep in the default locations: a cache with its key and an
        // artifact, and the policy.
        write(&format!("{CACHE_DIR}/cache.key"), &format!("{TRUSTED_SECRET}-cache-key"));
        write(&format!("{CACHE_DIR}/artifacts/tool.cwasm"), &format!("{TRUSTED_SECRET}-artifact"));
        write(&format!("{CONFIG_DIR}/policy.toml"), POLICY);
        let elsewhere = tempfile::tempdir().expect("a directory elsewhere");
        let policy_home = home.join(CONFIG_DIR).join("policy.toml");
        let state_home = home.join(STATE_DIR);
        let runtime = match config {
            Config::Home => build_runtime(&policy_home, &state_home),
            Config::Elsewhere => {
                // A plain run first, which leaves its state (key, audit trail) in the default
                // location; then this run, with its state and policy elsewhere.
                {
                    let earlier = build_runtime(&policy_home, &state_home);
                    let workspace = Workspace::open(&home).expect("open the workspace");
                    let outcome = earlier
                        .call(&CallRequest::new(&workspace, "alice", "s-earlier", "read_file", r#"{"path":"pub/readme.txt"}"#))
                        .expect("the earlier run's call");
                    assert!(outcome.result.is_ok(), "the earlier run's call failed: {:?}", outcome.result);
                }
                std::fs::write(elsewhere.path().join("policy.toml"), POLICY).expect("write the policy elsewhere");
                build_runtime(&elsewhere.path().join("policy.toml"), &elsewhere.path().join("state"))
            }
        };
        let workspace = Workspace::open(&home).expect("open the workspace");
        if config == Config::Home {
            // One call first, so that the host has made its state (its key) before the
            // baselines are taken.
            let outcome = runtime
                .call(&CallRequest::new(&workspace, "alice", "s-earlier", "read_file", r#"{"path":"pub/readme.txt"}"#))
                .expect("the first call");
            assert!(outcome.result.is_ok(), "the first call failed: {:?}", outcome.result);
        }
        let mut world = World {
            base: base_path,
            _keep: keep,
            elsewhere,
            workspace,
            runtime,
            config,
            outside: BTreeMap::new(),
            trusted: BTreeMap::new(),
            owned: BTreeMap::new(),
            host_secrets: Vec::new(),
        };
        world.take_baselines();
        world
    }

    /// The workspace root.
    pub fn home(&self) -> &Path {
        self.workspace.root()
    }

    /// Record what must not change from now on.
    pub fn take_baselines(&mut self) {
        let home = self.home().to_path_buf();
        self.outside = snapshot(&self.base, &[&home]);
        self.owned = OWNED.iter().map(|(path, _)| ((*path).to_owned(), snapshot_file(&home.join(path)))).collect();
        self.trusted = BTreeMap::new();
        self.trusted.insert(".git/config".to_owned(), snapshot_file(&home.join(".git/config")));
        for directory in [CACHE_DIR, CONFIG_DIR, STATE_DIR] {
            // This run's own state directory changes with every call: only what the host
            // does not rewrite (its keys) is fixed there.
            let own_state = self.config == Config::Home && directory == STATE_DIR;
            for (path, entry) in snapshot(&home.join(directory), &[]) {
                if !own_state || path.ends_with(".key") {
                    self.trusted.insert(format!("{directory}/{path}"), entry);
                }
            }
        }
        self.host_secrets = host_secrets(&home, Some(self.elsewhere.path()));
    }

    /// Add the keys the host made since the last look to those no call may see.
    pub fn refresh_secrets(&mut self) {
        for secret in host_secrets(self.home(), Some(self.elsewhere.path())) {
            if !secret.contains("-wrote-") && !self.host_secrets.contains(&secret) {
                self.host_secrets.push(secret);
            }
        }
    }

    /// Make a hard link at workspace path `link` to `target` (relative to `base`), as another
    /// program on the machine would, and take the baselines again.
    pub fn plant(&mut self, target: &str, link: &str) {
        let link = self.home().join(link);
        std::fs::create_dir_all(link.parent().expect("parent")).ok();
        std::fs::remove_file(&link).ok();
        std::fs::hard_link(self.base.join(target), &link).expect("plant a hard link");
        self.take_baselines();
    }

    /// Run one call.
    pub fn call(&self, role: Role, approve: Option<bool>, tool: &str, args: &Value) -> CallOutcome {
        let approver = approve.map(approver);
        let args = args.to_string();
        let session = format!("s-{}", role.name());
        self.runtime
            .call(&CallRequest { approver: approver.as_ref(), ..CallRequest::new(&self.workspace, role.name(), &session, tool, &args) })
            .unwrap_or_else(|error| panic!("host error calling {tool} {args}: {error}"))
    }

    /// Invariant 1 for one outcome of a call of `role`.
    pub fn check_outcome(&self, role: Role, approved: bool, outcome: &CallOutcome) -> Vec<String> {
        check_outcome(&self.host_secrets, role, approved, outcome)
    }

    /// Invariant 3 for the files only one role may write: unless `acted` (the roles that made
    /// calls in the step) holds their owner, they did not change; and they never hold a write
    /// of the other role's marked `tag` (its calls of this step). Then the step's state
    /// becomes the baseline.
    pub fn check_owned(&mut self, acted: &[Role], tag: &str) -> Vec<String> {
        let mut violations = Vec::new();
        for (path, owner) in OWNED {
            let now = snapshot_file(&self.home().join(path));
            if !acted.contains(owner) && self.owned.get(*path) != Some(&now) {
                violations.push(format!(
                    "`{path}`, which only {} may write and nobody delete, changed in a step where {} did not act: {:?} -> {now:?}",
                    owner.name(),
                    owner.name(),
                    self.owned.get(*path)
                ));
            }
            let other = if *owner == Role::Alice { Role::Bob } else { Role::Alice };
            if !tag.is_empty() && now.content.contains(&format!("{}-wrote-{tag}", other.name())) {
                violations.push(format!(
                    "`{path}`, which only {} may write, holds {}'s write: {:?}",
                    owner.name(),
                    other.name(),
                    now.content
                ));
            }
            self.owned.insert((*path).to_owned(), now);
        }
        violations
    }

    /// Invariants 2-4 on the tree, and 5, the audit trail.
    pub fn check_world(&self) -> Vec<String> {
        let mut violations = self.check_world_without_audit();
        violations.extend(self.check_audit());
        violations
    }

    /// Invariants 2-4 on the tree.
    pub fn check_world_without_audit(&self) -> Vec<String> {
        let home = self.home();
        let mut violations = Vec::new();
        let outside = snapshot(&self.base, &[home]);
        for change in differences(&self.outside, &outside) {
            violations.push(format!("outside the workspace: {change}"));
        }
        let mut trusted_now = BTreeMap::new();
        trusted_now.insert(".git/config".to_owned(), snapshot_file(&home.join(".git/config")));
        for directory in [CACHE_DIR, CONFIG_DIR, STATE_DIR] {
            let own_state = self.config == Config::Home && directory == STATE_DIR;
            for (path, entry) in snapshot(&home.join(directory), &[]) {
                let full = format!("{directory}/{path}");
                if !own_state || self.trusted.contains_key(&full) || crate::plan::is_fuzzer_name(&path) {
                    trusted_now.insert(full, entry);
                }
            }
        }
        for change in differences(&self.trusted, &trusted_now) {
            violations.push(format!("a host-owned location changed: {change}"));
        }
        violations.extend(links_leading_outside(home));
        violations
    }

    /// Invariant 5: the audit trail verifies.
    pub fn check_audit(&self) -> Vec<String> {
        let Some(audit) = self.runtime.audit() else { return vec!["the runtime keeps no audit trail".to_owned()] };
        match audit.read() {
            Err(error) => vec![format!("the audit trail cannot be read: {error}")],
            // Nothing recorded yet: nothing to verify.
            Ok(text) if text.is_empty() => Vec::new(),
            Ok(text) => match audit.verify(&text) {
                Ok(_) => Vec::new(),
                Err(tamper) => vec![format!("the audit trail does not verify: {tamper:?}")],
            },
        }
    }
}

/// The canaries a call of `role`, approved or not, must never see, besides the host's keys.
pub fn forbidden(role: Role, approved: bool) -> Vec<&'static str> {
    let mut forbidden = vec![OUTSIDE_SECRET, TRUSTED_SECRET];
    match role {
        Role::Alice => forbidden.push(BOB_SECRET),
        Role::Bob => forbidden.extend([ALICE_SECRET, ENV_SECRET]),
    }
    if !approved {
        forbidden.push(ASK_SECRET);
    }
    forbidden
}

/// Invariant 1: nothing a call of `role` shows (result, error, refusals, warnings, notes,
/// output streams) holds a canary it may not see, one of the host's keys
/// (`host_secrets`), or the name of another call's in-flight file.
pub fn check_outcome(host_secrets: &[String], role: Role, approved: bool, outcome: &CallOutcome) -> Vec<String> {
    let texts = visible_texts(outcome);
    let mut violations = Vec::new();
    for canary in forbidden(role, approved) {
        if let Some(text) = texts.iter().find(|text| text.contains(canary)) {
            violations.push(format!("{} saw {canary}: {}", role.name(), excerpt(text, canary)));
        }
    }
    for key in host_secrets {
        if texts.iter().any(|text| text.contains(key.as_str())) {
            violations.push(format!("{} saw one of the host's keys", role.name()));
        }
    }
    if let Some(text) = texts.iter().find(|text| text.contains(SHADOW_PREFIX)) {
        violations.push(format!("{} saw a host in-flight file: {}", role.name(), excerpt(text, SHADOW_PREFIX)));
    }
    violations
}

/// The host's keys (`*.key` in its state and cache directories under `home`, and in
/// `elsewhere`), which no call may see.
pub fn host_secrets(home: &Path, elsewhere: Option<&Path>) -> Vec<String> {
    let mut places: Vec<PathBuf> = [CACHE_DIR, STATE_DIR].iter().map(|directory| home.join(directory)).collect();
    places.extend(elsewhere.map(Path::to_path_buf));
    let mut secrets: Vec<String> = places
        .iter()
        .flat_map(|place| snapshot(place, &[]))
        .filter(|(path, entry)| entry.kind == "file" && path.ends_with(".key"))
        .map(|(_, entry)| entry.content)
        .collect();
    secrets.retain(|secret| secret.len() >= 16 && !secret.starts_with(TRUSTED_SECRET));
    secrets
}

/// One file's identity and content (or its absence).
fn snapshot_file(path: &Path) -> Entry {
    match std::fs::symlink_metadata(path) {
        Err(_) => Entry { kind: "missing", content: String::new(), inode: 0, links: 0 },
        Ok(metadata) => Entry {
            kind: if metadata.is_symlink() {
                "link"
            } else if metadata.is_dir() {
                "dir"
            } else {
                "file"
            },
            content: String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned(),
            inode: metadata.ino(),
            links: metadata.nlink(),
        },
    }
}

/// Every text of an outcome that reaches the agent or the component's own output.
pub fn visible_texts(outcome: &CallOutcome) -> Vec<String> {
    let mut texts = Vec::new();
    match &outcome.result {
        Ok(output) => {
            texts.push(output.text.clone());
            if let Some(structured) = &output.structured {
                strings_in(structured, &mut texts);
            }
        }
        Err(error) => texts.push(error.message.clone()),
    }
    texts.extend(outcome.warnings.iter().cloned());
    texts.extend(outcome.denials.iter().map(|denial| denial.message.clone()));
    texts.extend(outcome.notes.iter().cloned());
    texts.push(String::from_utf8_lossy(&outcome.stdout.bytes).into_owned());
    texts.push(String::from_utf8_lossy(&outcome.stderr.bytes).into_owned());
    texts
}

/// Every string inside a JSON value (unescaped).
fn strings_in(value: &Value, into: &mut Vec<String>) {
    match value {
        Value::String(text) => into.push(text.clone()),
        Value::Array(items) => items.iter().for_each(|item| strings_in(item, into)),
        Value::Object(fields) => fields.values().for_each(|item| strings_in(item, into)),
        _ => {}
    }
}

/// Up to 60 characters around `needle` in `text`.
fn excerpt(text: &str, needle: &str) -> String {
    let at = text.find(needle).unwrap_or(0);
    let start = text.floor_char_boundary(at.saturating_sub(60));
    let end = text.ceil_char_boundary((at + needle.len() + 60).min(text.len()));
    text[start..end].replace('\n', "⏎")
}

/// Invariant 4: every symbolic link in the workspace, resolved (by the kernel, and lexically
/// from its directory for a dangling one), stays inside it.
pub fn links_leading_outside(home: &Path) -> Vec<String> {
    let root = std::fs::canonicalize(home).expect("the workspace resolves");
    let mut violations = Vec::new();
    for (relative, entry) in snapshot(home, &[]) {
        if entry.kind != "link" {
            continue;
        }
        let link = home.join(&relative);
        if let Ok(resolved) = std::fs::canonicalize(&link)
            && !resolved.starts_with(&root)
        {
            violations.push(format!("the link `{relative}` -> `{}` resolves outside the workspace", entry.content));
            continue;
        }
        let parent = Path::new(&relative).parent().unwrap_or(Path::new(""));
        let mut lexical = root.join(parent);
        let target = Path::new(&entry.content);
        if target.is_absolute() {
            lexical = PathBuf::from("/");
        }
        for component in target.components() {
            match component {
                Component::ParentDir => {
                    lexical.pop();
                }
                Component::Normal(name) => lexical.push(name),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            }
        }
        if !lexical.starts_with(&root) {
            violations.push(format!("the link `{relative}` -> `{}` leads outside the workspace", entry.content));
        }
    }
    violations
}
