//! Sequences of calls from two roles, how they are generated and shrunk, and how they run.

use std::fmt;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::world::{Config, ENV_SECRET, Role, World};

/// Workspace paths the operations use: few, so that operations meet.
pub const PATHS: &[&str] = &[
    "pub/f",
    "pub/g",
    "pub/l",
    "pub/readme.txt",
    "pub/h",
    "pub/k",
    "x/f",
    "x/y",
    "x/y/l",
    "y",
    "y/l",
    "x",
    ".env",
    ".git/config",
    "alice/secret.txt",
    "bob/secret.txt",
    "ask/key.txt",
    ".local/state/toolcell/f",
    ".local/state/toolcell/state.key",
    ".local/state/toolcell/audit.jsonl",
    ".cache/toolcell/cache.key",
    ".cache/toolcell/artifacts/tool.cwasm",
    ".config/toolcell/policy.toml",
    "../outside/secret.txt",
    "../outside/f",
];

/// Directories the listings and seeks use.
pub const DIRECTORIES: &[&str] =
    &[".", "pub", "x", "x/y", "y", "alice", "bob", "ask", ".local/state/toolcell", ".cache/toolcell", ".config/toolcell"];

/// Symbolic link targets.
pub const TARGETS: &[&str] = &[
    "../..",
    "..",
    ".",
    "f",
    "../alice/secret.txt",
    "../bob/secret.txt",
    "../ask/key.txt",
    "../.env",
    "../../.env",
    "/",
    "../../outside/secret.txt",
    "../.local/state/toolcell",
    "../.cache/toolcell/cache.key",
];

/// Whether a name under a host-owned directory is one the fuzzer makes (so, not the host's).
pub fn is_fuzzer_name(relative: &str) -> bool {
    let name = relative.rsplit('/').next().unwrap_or(relative);
    ["f", "g", "l", "h", "k", "y", "SEEK"].contains(&name) || name.starts_with("seek-")
}

/// One raw filesystem operation of `fs_probe`.
#[derive(Clone, PartialEq, Eq)]
pub enum Probe {
    /// Read a file.
    Read(&'static str),
    /// Write a file (the content names who wrote it).
    Write(&'static str),
    /// List a directory.
    List(&'static str),
    /// Hard-link `.0` at `.1`.
    HardLink(&'static str, &'static str),
    /// A symbolic link at `.0` to `.1`, tried `.2` times (a loop racing another call).
    Symlink(&'static str, &'static str, usize),
    /// Rename `.0` to `.1`.
    Rename(&'static str, &'static str),
    /// Remove a file.
    Remove(&'static str),
    /// Make a directory (and its parents).
    Mkdir(&'static str),
    /// Wait (up to about half a second) for a name starting with `.toolcell-` in directory
    /// `.0`, then act on it.
    Seek(&'static str, Seek),
}

/// What `Probe::Seek` does to the in-flight file it finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seek {
    /// Read it.
    Read,
    /// Write it.
    Write,
    /// Hard-link it at `pub/h`.
    HardLink,
    /// Rename it to `pub/h`.
    Rename,
    /// Remove it.
    Remove,
}

/// What one call does.
#[derive(Clone, PartialEq, Eq)]
pub enum Act {
    /// `read_file`.
    Read(&'static str),
    /// `write_file` (the content names who wrote it; alice's `.env` is a new secret).
    Write(&'static str),
    /// `list_files`, recursively or not.
    List(&'static str, bool),
    /// `delete_file`.
    Delete(&'static str),
    /// `move_file`.
    Move(&'static str, &'static str),
    /// `create_directory`.
    Mkdir(&'static str),
    /// `apply_patch` changing `.0` first (a new line; a new secret for `.env`) and adding
    /// `.1` more files: a long call whose rewrites are in flight.
    Patch(&'static str, u16),
    /// One `fs_probe` call running these operations in order.
    Probe(Vec<Probe>),
}

/// One call: who, with what approver for `ask` rules, doing what.
#[derive(Clone, PartialEq, Eq)]
pub struct Call {
    /// The role.
    pub role: Role,
    /// The approver's answer, if the call has one.
    pub approve: Option<bool>,
    /// What it does.
    pub act: Act,
}

/// One step of a sequence.
#[derive(Clone, PartialEq, Eq)]
pub enum Step {
    /// A call alone.
    One(Call),
    /// A call, and on another thread at the same time, these calls one after another.
    Together(Call, Vec<Call>),
    /// Another program on the machine hard-links `.0` (relative to the base directory,
    /// `home/...` or `outside/...`) at workspace path `.1`.
    Plant(&'static str, &'static str),
}

/// A whole sequence.
#[derive(Clone, PartialEq, Eq)]
pub struct Plan {
    /// Where the run keeps its state.
    pub config: Config,
    /// The steps.
    pub steps: Vec<Step>,
}

impl fmt::Debug for Probe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Probe::Read(path) => write!(f, "read {path}"),
            Probe::Write(path) => write!(f, "write {path}"),
            Probe::List(path) => write!(f, "list {path}"),
            Probe::HardLink(from, to) => write!(f, "hard_link {from} -> {to}"),
            Probe::Symlink(link, target, 1) => write!(f, "symlink {link} -> {target}"),
            Probe::Symlink(link, target, times) => write!(f, "symlink {link} -> {target} x{times}"),
            Probe::Rename(from, to) => write!(f, "rename {from} -> {to}"),
            Probe::Remove(path) => write!(f, "remove {path}"),
            Probe::Mkdir(path) => write!(f, "mkdir {path}"),
            Probe::Seek(directory, action) => write!(f, "seek {directory}/.toolcell-* then {action:?}"),
        }
    }
}

impl fmt::Debug for Act {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Act::Read(path) => write!(f, "read_file {path}"),
            Act::Write(path) => write!(f, "write_file {path}"),
            Act::List(path, recursive) => write!(f, "list_files {path}{}", if *recursive { " -r" } else { "" }),
            Act::Delete(path) => write!(f, "delete_file {path}"),
            Act::Move(from, to) => write!(f, "move_file {from} -> {to}"),
            Act::Mkdir(path) => write!(f, "create_directory {path}"),
            Act::Patch(path, more) => write!(f, "apply_patch {path} + {more} files"),
            Act::Probe(probes) => write!(f, "fs_probe {probes:?}"),
        }
    }
}

impl fmt::Debug for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let approve = match self.approve {
            None => "",
            Some(true) => " (approver: yes)",
            Some(false) => " (approver: no)",
        };
        write!(f, "{}{approve}: {:?}", self.role.name(), self.act)
    }
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::One(call) => write!(f, "{call:?}"),
            Step::Together(first, others) if others.is_empty() => write!(f, "{first:?}"),
            Step::Together(first, others) => write!(f, "together {{ {first:?} || {others:?} }}"),
            Step::Plant(target, link) => write!(f, "another program: ln {target} {link}"),
        }
    }
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "state and policy: {:?}", self.config)?;
        for (index, step) in self.steps.iter().enumerate() {
            writeln!(f, "  {index}: {step:?}")?;
        }
        Ok(())
    }
}

/// The entries of `list` that mention none of `TOOLCELL_FUZZ_AVOID`'s comma-separated
/// strings (or `fallback` if none is left).
fn unavoided(list: &[&'static str], fallback: &'static str) -> Vec<&'static str> {
    let avoid = std::env::var("TOOLCELL_FUZZ_AVOID").unwrap_or_default();
    let kept: Vec<&'static str> =
        list.iter().copied().filter(|entry| !avoid.split(',').any(|needle| !needle.is_empty() && entry.contains(needle))).collect();
    if kept.is_empty() { vec![fallback] } else { kept }
}

/// The files a role may not read (or only with approval), and host-owned ones.
const SECRETS: &[&str] =
    &["alice/secret.txt", "bob/secret.txt", "ask/key.txt", ".env", ".local/state/toolcell/state.key", ".cache/toolcell/cache.key"];

/// Names where a link to a secret may be made and read.
const LANDINGS: &[&str] = &["pub/h", "pub/k", "pub/l", "x/y/l", "y/l"];

/// The few names one sequence uses (swarm testing: with fewer names, operations meet more
/// often).
#[derive(Clone, Debug)]
pub struct Palette {
    paths: Vec<&'static str>,
    secrets: Vec<&'static str>,
    landings: Vec<&'static str>,
    directories: Vec<&'static str>,
    targets: Vec<&'static str>,
}

impl Palette {
    /// Every name.
    pub fn full() -> Palette {
        Palette {
            paths: unavoided(PATHS, "pub/f"),
            secrets: unavoided(SECRETS, "ask/key.txt"),
            landings: unavoided(LANDINGS, "pub/h"),
            directories: unavoided(DIRECTORIES, "pub"),
            targets: unavoided(TARGETS, "f"),
        }
    }

    /// A few names of each kind.
    fn few() -> impl Strategy<Value = Palette> {
        let full = Palette::full();
        let some = |list: Vec<&'static str>, most: usize| {
            let most = most.min(list.len());
            prop::sample::subsequence(list, 1..=most)
        };
        (some(full.paths, 6), some(full.secrets, 2), some(full.landings, 2), some(full.directories, 2), some(full.targets, 3)).prop_map(
            |(mut paths, secrets, landings, directories, targets)| {
                paths.extend(secrets.iter().chain(&landings));
                Palette { paths, secrets, landings, directories, targets }
            },
        )
    }

    fn path(&self) -> impl Strategy<Value = &'static str> + use<> {
        prop::sample::select(self.paths.clone())
    }

    /// Mostly any path; often one of `toward`.
    fn biased(&self, toward: &[&'static str]) -> impl Strategy<Value = &'static str> + use<> {
        prop_oneof![2 => self.path(), 1 => prop::sample::select(toward.to_vec())]
    }

    fn directory(&self) -> impl Strategy<Value = &'static str> + use<> {
        prop::sample::select(self.directories.clone())
    }

    fn probe(&self) -> impl Strategy<Value = Probe> + use<> {
        prop_oneof![
            weight(3, "read ") => self.biased(&self.landings).prop_map(Probe::Read),
            weight(2, "write ") => self.path().prop_map(Probe::Write),
            weight(1, "list ") => self.directory().prop_map(Probe::List),
            weight(3, "hard_link") => (self.biased(&self.secrets), self.biased(&self.landings)).prop_map(|(from, to)| Probe::HardLink(from, to)),
            weight(3, "symlink") => (self.path(), prop::sample::select(self.targets.clone()), prop::sample::select(&[1usize, 1, 300][..]))
                .prop_map(|(link, target, times)| Probe::Symlink(link, target, times)),
            weight(2, "rename") => (self.path(), self.path()).prop_map(|(from, to)| Probe::Rename(from, to)),
            weight(1, "remove") => self.path().prop_map(Probe::Remove),
            weight(1, "mkdir") => self.path().prop_map(Probe::Mkdir),
            weight(2, "seek") => (self.directory(), prop::sample::select(&[Seek::Read, Seek::Write, Seek::HardLink, Seek::Rename, Seek::Remove][..]))
                .prop_map(|(directory, action)| Probe::Seek(directory, action)),
        ]
    }

    fn act(&self) -> impl Strategy<Value = Act> + use<> {
        prop_oneof![
            weight(2, "read_file") => self.biased(&self.landings).prop_map(Act::Read),
            weight(2, "write_file") => self.path().prop_map(Act::Write),
            weight(1, "list_files") => (self.directory(), any::<bool>()).prop_map(|(directory, recursive)| Act::List(directory, recursive)),
            weight(1, "delete_file") => self.path().prop_map(Act::Delete),
            weight(1, "move_file") => (self.path(), self.path()).prop_map(|(from, to)| Act::Move(from, to)),
            weight(1, "create_directory") => self.path().prop_map(Act::Mkdir),
            weight(1, "apply_patch") => (self.biased(&self.secrets), prop::sample::select(&[0u16, 0, 0, 60, 300][..])).prop_map(|(path, more)| Act::Patch(path, more)),
            weight(4, "fs_probe") => prop::collection::vec(self.probe(), 1..5).prop_map(Act::Probe),
        ]
    }

    /// Any call of either role.
    pub fn call(&self) -> impl Strategy<Value = Call> + use<> {
        (prop::sample::select(&[Role::Alice, Role::Bob][..]), prop::sample::select(&[None, Some(true), Some(false)][..]), self.act())
            .prop_map(|(role, approve, act)| Call { role, approve, act })
    }

    fn step(&self) -> impl Strategy<Value = Step> + use<> {
        prop_oneof![
            6 => self.call().prop_map(Step::One),
            // Shrinks to a call alone (no others).
            weight(3, "together") => (self.call(), prop::collection::vec(self.call(), 0..3)).prop_map(|(first, others)| Step::Together(first, others)),
            weight(1, "another program") => (prop::sample::select(unavoided(&["outside/secret.txt", "home/alice/secret.txt", "home/ask/key.txt", "home/.env"], "home/pub/readme.txt")),
                  prop::sample::select(&["pub/p", "x/p"][..]))
                .prop_map(|(target, link)| Step::Plant(target, link)),
        ]
    }
}

/// `weight`, or 0 for a kind of operation `TOOLCELL_FUZZ_AVOID` names.
fn weight(weight: u32, kind: &str) -> u32 {
    if avoided(kind) { 0 } else { weight }
}

/// Any sequence of up to `length` steps, over a few names.
pub fn plan(length: usize) -> impl Strategy<Value = Plan> {
    (prop::sample::select(&[Config::Home, Config::Elsewhere][..]), Palette::few()).prop_flat_map(move |(config, palette)| {
        prop::collection::vec(palette.step(), 1..=length).prop_map(move |steps| Plan { config, steps })
    })
}

/// Who writes what: content that names its writer, the step and the call, so that a file
/// holding it tells where it came from. Alice's writes of `.env` are new secrets.
fn content(role: Role, target: &str, tag: &str) -> String {
    if role == Role::Alice && target == ".env" { format!("{ENV_SECRET}alice-{tag}\n") } else { format!("{}-wrote-{tag}\n", role.name()) }
}

/// The tool and arguments of `act`, as `role` in call `tag`.
pub fn arguments(home: &std::path::Path, role: Role, approved: bool, act: &Act, tag: &str) -> (&'static str, Value) {
    match act {
        Act::Read(path) => ("read_file", json!({ "path": path })),
        Act::Write(path) => ("write_file", json!({ "path": path, "content": content(role, path, tag) })),
        Act::List(path, recursive) => ("list_files", json!({ "path": path, "recursive": recursive })),
        Act::Delete(path) => ("delete_file", json!({ "path": path })),
        Act::Move(from, to) => ("move_file", json!({ "source": from, "destination": to, "overwrite": true })),
        Act::Mkdir(path) => ("create_directory", json!({ "path": path })),
        Act::Patch(path, more) => {
            let mut patch = String::from("*** Begin Patch\n");
            let new = content(role, path, tag);
            // The old lines, as the role could read them (never a canary it may not see, which
            // the tool might echo back in an error).
            let host_owned = [".local/", ".cache/", ".config/", ".git/", "../"].iter().any(|prefix| path.starts_with(prefix));
            let readable = |old: &str| !host_owned && crate::world::forbidden(role, approved).iter().all(|canary| !old.contains(canary));
            match std::fs::read_to_string(home.join(path)) {
                Ok(old) if !old.is_empty() && !old.contains('\r') && readable(&old) => {
                    patch.push_str(&format!("*** Update File: {path}\n@@\n"));
                    for line in old.lines() {
                        patch.push_str(&format!("-{line}\n"));
                    }
                    patch.push_str(&format!("+{}\n", new.trim_end()));
                }
                _ => patch.push_str(&format!("*** Add File: {path}\n+{}\n", new.trim_end())),
            }
            for index in 0..*more {
                patch.push_str(&format!("*** Add File: pad/{tag}/{index}.txt\n+{}\n", role.name()));
            }
            patch.push_str("*** End Patch\n");
            ("apply_patch", json!({ "patch": patch }))
        }
        Act::Probe(probes) => {
            let ops: Vec<Value> = probes
                .iter()
                .enumerate()
                .map(|(index, probe)| {
                    let tag = format!("{tag}.{index}");
                    match probe {
                        Probe::Read(path) => json!({ "op": "read", "path": path }),
                        Probe::Write(path) => json!({ "op": "write", "path": path, "content": content(role, path, &tag) }),
                        Probe::List(path) => json!({ "op": "list", "path": path }),
                        Probe::HardLink(from, to) => json!({ "op": "hard_link", "path": from, "to": to }),
                        Probe::Symlink(link, target, times) => json!({ "op": "symlink", "path": link, "to": target, "times": times }),
                        Probe::Rename(from, to) => json!({ "op": "rename", "path": from, "to": to }),
                        Probe::Remove(path) => json!({ "op": "remove", "path": path }),
                        Probe::Mkdir(path) => json!({ "op": "mkdir", "path": path }),
                        Probe::Seek(directory, action) => {
                            let to = match action {
                                Seek::Read => "read",
                                Seek::Write => "write",
                                Seek::HardLink => "hard_link:pub/h",
                                Seek::Rename => "rename:pub/h",
                                Seek::Remove => "remove",
                            };
                            json!({ "op": "seek", "path": directory, "content": format!("{}|{}", crate::world::SHADOW_PREFIX, content(role, "", &tag)), "to": to, "times": 500 })
                        }
                    }
                })
                .collect();
            ("fs_probe", json!({ "ops": ops }))
        }
    }
}

/// Run `call` as call `tag`; the violations its outcome shows.
fn run_call(world: &World, call: &Call, tag: &str) -> Vec<String> {
    let (tool, args) = arguments(world.home(), call.role, call.approve == Some(true), &call.act, tag);
    let outcome = world.call(call.role, call.approve, tool, &args);
    if std::env::var_os("TOOLCELL_FUZZ_VERBOSE").is_some() {
        let shown = match &outcome.result {
            Ok(output) => format!("ok: {}", output.text),
            Err(error) => format!("{}: {}", error.kind, error.message),
        };
        let shown: String = shown.chars().take(400).collect();
        eprintln!("[{tag}] {call:?} ({} ms) -> {shown}", outcome.duration.as_millis());
    }
    world
        .check_outcome(call.role, call.approve == Some(true), &outcome)
        .into_iter()
        .map(|violation| format!("[{tag}] {call:?}: {violation}"))
        .collect()
}

/// Whether the call may legitimately put another file (perhaps the other role's) in place of
/// a file its role owns.
pub fn moves_into_owned(call: &Call) -> bool {
    let owned = |path: &str| crate::world::OWNED.iter().any(|(owned, owner)| *owned == path && *owner == call.role);
    match &call.act {
        Act::Move(_, to) => owned(to),
        Act::Probe(probes) => probes.iter().any(|probe| matches!(probe, Probe::Rename(_, to) if owned(to))),
        _ => false,
    }
}

/// Run `step` number `index`; every violation of an invariant it shows, in the outcomes and
/// in the world after it.
pub fn run_step(world: &mut World, index: usize, step: &Step) -> Vec<String> {
    let mut violations = Vec::new();
    let mut acted = Vec::new();
    let mut tag = format!("s{index}");
    match step {
        Step::One(call) => {
            acted.push(call.role);
            violations.extend(run_call(world, call, &format!("s{index}")));
            if moves_into_owned(call) {
                tag.clear();
            }
        }
        Step::Together(first, others) => {
            acted.push(first.role);
            acted.extend(others.iter().map(|call| call.role));
            let world_ref = &*world;
            std::thread::scope(|scope| {
                let first_run = scope.spawn(move || run_call(world_ref, first, &format!("s{index}a")));
                let mut seen = Vec::new();
                for (position, other) in others.iter().enumerate() {
                    seen.extend(run_call(world_ref, other, &format!("s{index}b{position}")));
                }
                violations.extend(first_run.join().expect("the first call's thread"));
                violations.extend(seen);
            });
            if moves_into_owned(first) || others.iter().any(moves_into_owned) {
                tag.clear();
            }
        }
        Step::Plant(target, link) => world.plant(target, link),
    }
    violations.extend(world.check_owned(&acted, &tag).into_iter().map(|violation| format!("after step {index}: {violation}")));
    violations.extend(world.check_world().into_iter().map(|violation| format!("after step {index}: {violation}")));
    world.refresh_secrets();
    violations
}

/// Whether `text` mentions one of `TOOLCELL_FUZZ_AVOID`'s comma-separated strings.
pub fn avoided(text: &str) -> bool {
    std::env::var("TOOLCELL_FUZZ_AVOID").is_ok_and(|avoid| avoid.split(',').any(|needle| !needle.is_empty() && text.contains(needle)))
}

/// Run a whole plan in a fresh world; the violations of the first step that shows any.
pub fn run_plan(plan: &Plan) -> Result<(), String> {
    // `TOOLCELL_FUZZ_AVOID=a,b`: paths mentioning `a` or `b` are not generated, and sequences
    // (a regression, say) that mention them pass unrun, to look past a known escape.
    if avoided(&format!("{plan:?}")) {
        return Ok(());
    }
    let mut world = World::new(plan.config);
    let before = world.check_world();
    if !before.is_empty() {
        return Err(format!("the fresh world already violates: {before:#?}"));
    }
    for (index, step) in plan.steps.iter().enumerate() {
        let violations = run_step(&mut world, index, step);
        if !violations.is_empty() {
            // The steps after the failing one play no part.
            let shown = Plan { config: plan.config, steps: plan.steps[..=index].to_vec() };
            return Err(format!("{shown:?}failed at step {index} ({step:?}):\n  - {}", violations.join("\n  - ")));
        }
    }
    Ok(())
}
