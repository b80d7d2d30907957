//! The model-based adversarial fuzzer: sequences of calls from two roles, `alice` and `bob`,
//! through the real host, the built-in tools and `fs_probe` (a component that calls `std::fs`
//! directly, so it can hard-link, symlink and rename as a hostile plugin would), one after
//! another and at the same time on one workspace. After every step it checks:
//!
//! 1. no canary reaches a role that may not read it, by any name or route (results, errors,
//!    refusals, warnings, listings, output streams), an `ask` file only with approval, and no
//!    call sees another call's in-flight file (`.toolcell-*`);
//! 2. nothing outside the workspace changed;
//! 3. no host-owned file (state, cache, policy in their default locations under `$HOME`)
//!    changed, and a file only one role may write only by that role;
//! 4. no symbolic link in the workspace resolves outside it;
//! 5. the audit trail verifies.
//!
//! The seeds (`seed_*`) are the escape classes of the fourth boundary pass, each a fixed
//! sequence; `random_sequences` explores with proptest, which shrinks a failing sequence to a
//! minimal one and keeps it in `main.regressions` beside this file, replayed first on every
//! later run; `two_processes` runs two OS processes, one per role, on one workspace and state
//! directory, and checks the same invariants while they run.
//!
//! Every test re-executes this binary with `HOME` set to a fresh directory, which is the
//! workspace: the default locations of toolcell's state, cache and configuration are inside
//! it, as for a user whose agent works in their home directory.
//!
//! Longer runs: `TOOLCELL_FUZZ_CASES` (sequences, default 12), `TOOLCELL_FUZZ_STEPS` (steps
//! per sequence, default 6), `TOOLCELL_FUZZ_SEED` (a fixed RNG seed, to replay a run) and
//! `TOOLCELL_STRESS_SECONDS` (the two-process run, default 20), e.g.
//!
//! ```text
//! TOOLCELL_FUZZ_CASES=500 TOOLCELL_FUZZ_STEPS=10 TOOLCELL_STRESS_SECONDS=600 \
//!     cargo test -p toolcell-tests --test adversary -- random_sequences two_processes
//! ```
//!
//! `TOOLCELL_FUZZ_VERBOSE=1` prints every call and what it returned; `TOOLCELL_FUZZ_AVOID=a,b`
//! generates no path and no kind of operation (`hard_link`, `seek`, `together`, `another
//! program`, a tool's name...) mentioning `a` or `b`, to look past a known escape.

mod plan;
mod world;

use std::process::Command;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence, RngSeed, TestCaseError, TestRunner};

use plan::{Act, Call, Plan, Probe, Seek, Step, run_plan};
use world::{Config, Role, World};

/// Set (to the workspace, `$HOME`) in the re-executed test process.
pub const HOME_VARIABLE: &str = "TOOLCELL_ADVERSARY_HOME";
/// Set (to `alice` or `bob`) in a two-process worker.
const WORKER_VARIABLE: &str = "TOOLCELL_ADVERSARY_WORKER";

fn number(variable: &str, default: u64) -> u64 {
    std::env::var(variable).ok().and_then(|value| value.parse().ok()).unwrap_or(default)
}

/// Run `body` in a copy of this test process (the test `name`) whose `HOME` is a fresh
/// directory, with no XDG directories set.
fn in_own_home(name: &str, body: impl FnOnce()) {
    if std::env::var_os(HOME_VARIABLE).is_some() {
        body();
        return;
    }
    let base = tempfile::tempdir().expect("a temporary directory");
    let home = base.path().join("home");
    std::fs::create_dir(&home).expect("create HOME");
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("HOME", &home)
        .env(HOME_VARIABLE, &home)
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .output()
        .expect("re-execute the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if std::env::var_os("TOOLCELL_FUZZ_VERBOSE").is_some() {
        eprintln!("{stderr}");
    }
    assert!(output.status.success(), "{name} failed with HOME at the workspace:\n{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{name} did not run in the re-executed binary:\n{stdout}\n{stderr}");
}

fn alice(act: Act) -> Call {
    Call { role: Role::Alice, approve: None, act }
}

fn bob(act: Act) -> Call {
    Call { role: Role::Bob, approve: None, act }
}

/// Run a seed sequence `attempts` times (a race may need several); fail with the first
/// violation.
fn seed(name: &str, attempts: usize, plan: Plan) {
    in_own_home(name, || {
        for _ in 0..attempts {
            if let Err(failure) = run_plan(&plan) {
                panic!("{name}: {failure}");
            }
        }
    });
}

/// Alice's long call that rotates `.env` (400 more files in one `apply_patch`).
fn rotation() -> Call {
    alice(Act::Patch(".env", 400))
}

/// Escape 1: another call's temporary rewrite file, listed and read with the built-in tools
/// and `fs_probe`, while alice rotates `.env`.
#[test]
fn seed_in_flight_file_listed_and_read() {
    seed(
        "seed_in_flight_file_listed_and_read",
        2,
        Plan {
            config: Config::Home,
            steps: vec![Step::Together(rotation(), vec![bob(Act::Probe(vec![Probe::Seek(".", Seek::Read)])), bob(Act::List(".", false))])],
        },
    );
}

/// Escape 1: another call's temporary rewrite file written, so that it becomes `.env` when
/// alice's call commits.
#[test]
fn seed_in_flight_file_written() {
    seed(
        "seed_in_flight_file_written",
        2,
        Plan { config: Config::Home, steps: vec![Step::Together(rotation(), vec![bob(Act::Probe(vec![Probe::Seek(".", Seek::Write)]))])] },
    );
}

/// Escape 1: another call's temporary rewrite file hard-linked (the new `.env` inode kept
/// under a name bob may read), or renamed away.
#[test]
fn seed_in_flight_file_hard_linked() {
    seed(
        "seed_in_flight_file_hard_linked",
        2,
        Plan {
            config: Config::Home,
            steps: vec![
                Step::Together(rotation(), vec![bob(Act::Probe(vec![Probe::Seek(".", Seek::HardLink)]))]),
                Step::One(bob(Act::Read("pub/h"))),
                Step::One(bob(Act::Delete("pub/h"))),
                Step::Together(rotation(), vec![bob(Act::Probe(vec![Probe::Seek(".", Seek::Rename)]))]),
                Step::One(bob(Act::Read("pub/h"))),
            ],
        },
    );
}

/// Escapes 2 and 3: a run with its state and policy elsewhere; the default state, cache and
/// configuration under `$HOME` written and read with the built-in tools and `fs_probe`.
#[test]
fn seed_default_locations_of_another_run() {
    seed(
        "seed_default_locations_of_another_run",
        1,
        Plan {
            config: Config::Elsewhere,
            steps: vec![
                Step::One(bob(Act::Read(".cache/toolcell/cache.key"))),
                Step::One(bob(Act::Probe(vec![Probe::Read(".local/state/toolcell/state.key")]))),
                Step::One(bob(Act::Write(".local/state/toolcell/state.key"))),
                Step::One(bob(Act::Probe(vec![Probe::Write(".local/state/toolcell/f")]))),
                Step::One(bob(Act::Write(".cache/toolcell/artifacts/tool.cwasm"))),
                Step::One(bob(Act::Write(".config/toolcell/policy.toml"))),
                Step::One(bob(Act::Probe(vec![
                    Probe::Mkdir(".local/state/toolcell/y"),
                    Probe::Rename("pub/readme.txt", ".cache/toolcell/f"),
                ]))),
            ],
        },
    );
}

/// The same locations when they are this run's own: already protected, kept so.
#[test]
fn seed_own_state_cache_and_policy() {
    seed(
        "seed_own_state_cache_and_policy",
        1,
        Plan {
            config: Config::Home,
            steps: vec![
                Step::One(bob(Act::Probe(vec![Probe::Read(".local/state/toolcell/state.key")]))),
                Step::One(bob(Act::Write(".local/state/toolcell/state.key"))),
                Step::One(alice(Act::Probe(vec![Probe::Write(".local/state/toolcell/f"), Probe::Write(".config/toolcell/policy.toml")]))),
                Step::One(alice(Act::Probe(vec![Probe::HardLink(".local/state/toolcell/state.key", "pub/k")]))),
                Step::One(alice(Act::Probe(vec![Probe::Symlink("pub/l", "../.local/state/toolcell", 1), Probe::Write("pub/l/f")]))),
                Step::One(bob(Act::Read("pub/k"))),
            ],
        },
    );
}

/// Escape 6: an `ask` file hard-linked to a name that needs no approval, then read there
/// without approval (and with a refusing approver).
#[test]
fn seed_ask_file_hard_linked() {
    let link = Call { role: Role::Alice, approve: Some(false), act: Act::Probe(vec![Probe::HardLink("ask/key.txt", "pub/k")]) };
    seed(
        "seed_ask_file_hard_linked",
        1,
        Plan {
            config: Config::Home,
            steps: vec![
                Step::One(link),
                Step::One(alice(Act::Read("pub/k"))),
                Step::One(Call { role: Role::Bob, approve: Some(false), act: Act::Probe(vec![Probe::Read("pub/k")]) }),
            ],
        },
    );
}

/// Escape 6's sibling: a file only alice may read, hard-linked by alice where bob may read.
#[test]
fn seed_denied_file_hard_linked() {
    seed(
        "seed_denied_file_hard_linked",
        1,
        Plan {
            config: Config::Home,
            steps: vec![
                Step::One(alice(Act::Probe(vec![Probe::HardLink("alice/secret.txt", "pub/k"), Probe::HardLink(".env", "pub/e")]))),
                Step::One(bob(Act::Read("pub/k"))),
                Step::One(bob(Act::Probe(vec![Probe::Read("pub/e")]))),
            ],
        },
    );
}

/// Escape 7: a link `x/y/l -> ../..` made in a loop while another call renames `x/y` to `y`.
#[test]
fn seed_symlink_while_its_directory_is_renamed() {
    let race = Step::Together(
        bob(Act::Probe(vec![Probe::Symlink("x/y/l", "../..", 3000)])),
        vec![alice(Act::Probe(vec![Probe::Rename("x/y", "y")]))],
    );
    let reset = Step::One(alice(Act::Probe(vec![Probe::Remove("y/l"), Probe::Remove("x/y/l"), Probe::Rename("y", "x/y")])));
    let mut steps = Vec::new();
    for _ in 0..6 {
        steps.push(race.clone());
        steps.push(reset.clone());
    }
    seed("seed_symlink_while_its_directory_is_renamed", 1, Plan { config: Config::Home, steps });
}

/// Escape 7 without the race: the link made first, its directory renamed after.
#[test]
fn seed_symlink_then_its_directory_renamed() {
    seed(
        "seed_symlink_then_its_directory_renamed",
        1,
        Plan {
            config: Config::Home,
            steps: vec![
                Step::One(bob(Act::Probe(vec![Probe::Symlink("x/y/l", "../..", 1)]))),
                Step::One(alice(Act::Probe(vec![Probe::Rename("x/y", "y")]))),
                Step::One(alice(Act::Move("x", "pub/x"))),
            ],
        },
    );
}

/// Planted hard links (made by another program) to a file outside the workspace and to files
/// a role may not read: read and written through the workspace name.
#[test]
fn seed_planted_hard_links() {
    seed(
        "seed_planted_hard_links",
        1,
        Plan {
            config: Config::Home,
            steps: vec![
                Step::Plant("outside/secret.txt", "pub/p"),
                Step::One(bob(Act::Read("pub/p"))),
                Step::One(bob(Act::Write("pub/p"))),
                Step::Plant("home/alice/secret.txt", "x/p"),
                Step::One(bob(Act::Probe(vec![Probe::Read("x/p")]))),
                Step::Plant("home/ask/key.txt", "x/p"),
                Step::One(alice(Act::Read("x/p"))),
            ],
        },
    );
}

/// Random sequences of both roles' calls, shrunk to a minimal failing one.
#[test]
fn random_sequences() {
    in_own_home("random_sequences", || {
        let mut config = ProptestConfig {
            cases: u32::try_from(number("TOOLCELL_FUZZ_CASES", 12)).unwrap_or(12),
            max_shrink_iters: 256,
            max_shrink_time: 180_000,
            source_file: Some(file!()),
            failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("regressions"))),
            ..ProptestConfig::default()
        };
        if let Ok(seed) = std::env::var("TOOLCELL_FUZZ_SEED") {
            config.rng_seed = RngSeed::Fixed(seed.parse().expect("TOOLCELL_FUZZ_SEED is a number"));
        }
        let steps = usize::try_from(number("TOOLCELL_FUZZ_STEPS", 6)).unwrap_or(6);
        let mut runner = TestRunner::new(config);
        let result = runner.run(&plan::plan(steps), |plan| run_plan(&plan).map_err(TestCaseError::fail));
        if let Err(failure) = result {
            panic!(
                "a sequence violates an invariant (minimal sequence below; kept in tests/tests/adversary/main.regressions and replayed \
                 first by the next run; TOOLCELL_FUZZ_VERBOSE=1 shows every call):\n{failure}"
            );
        }
    });
}

/// Two OS processes, one per role, calling at the same time on one workspace and one state
/// directory; this process checks the world while they run, and each checks what its calls
/// show.
#[test]
fn two_processes() {
    if std::env::var_os(WORKER_VARIABLE).is_some() {
        return;
    }
    in_own_home("two_processes", || {
        let world = World::new(Config::Home);
        let seconds = number("TOOLCELL_STRESS_SECONDS", 20);
        let seed = number("TOOLCELL_FUZZ_SEED", u64::from(std::process::id()));
        let mut workers: Vec<_> = [Role::Alice, Role::Bob]
            .into_iter()
            .enumerate()
            .map(|(index, role)| {
                Command::new(std::env::current_exe().expect("the test binary"))
                    .args(["worker", "--exact", "--nocapture", "--test-threads=1"])
                    .env(WORKER_VARIABLE, role.name())
                    .env("TOOLCELL_STRESS_SECONDS", seconds.to_string())
                    .env("TOOLCELL_FUZZ_SEED", (seed + index as u64).to_string())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("start a worker")
            })
            .collect();
        let mut violations = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds + 120);
        while std::time::Instant::now() < deadline {
            let running = workers.iter_mut().any(|worker| matches!(worker.try_wait(), Ok(None)));
            for violation in world.check_world_without_audit() {
                if !violations.contains(&violation) {
                    violations.push(violation);
                }
            }
            if !running || violations.len() > 20 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        for worker in workers {
            let output = worker.wait_with_output().expect("a worker's output");
            // The worker reports on stderr.
            let report = String::from_utf8_lossy(&output.stderr);
            violations.extend(report.lines().filter_map(|line| line.strip_prefix("VIOLATION ")).map(str::to_owned));
            assert!(
                output.status.success() || report.contains("VIOLATION "),
                "a worker failed:\n{report}\n{}",
                String::from_utf8_lossy(&output.stdout)
            );
            assert!(report.contains("calls made"), "a worker made no calls:\n{report}\n{}", String::from_utf8_lossy(&output.stdout));
            for line in report.lines().filter(|line| line.ends_with("calls made")) {
                eprintln!("two processes: {line}");
            }
        }
        violations.extend(world.check_world());
        // Each process marks its writes `ROLE-wrote-pROLE-N`.
        for (path, owner) in world::OWNED {
            let other = if *owner == Role::Alice { Role::Bob } else { Role::Alice };
            let content = std::fs::read_to_string(world.home().join(path)).unwrap_or_default();
            if content.contains(&format!("{}-wrote-", other.name())) {
                violations.push(format!("`{path}`, which only {} may write, holds {}'s write: {content:?}", owner.name(), other.name()));
            }
        }
        assert!(violations.is_empty(), "two processes on one workspace violate invariants:\n  - {}", violations.join("\n  - "));
    });
}

/// One role's process of `two_processes`: random calls until the time is up, each outcome
/// checked; prints `VIOLATION ...` lines on stderr.
#[test]
fn worker() {
    let Some(role) = std::env::var_os(WORKER_VARIABLE) else { return };
    let role = if role == "alice" { Role::Alice } else { Role::Bob };
    let home = std::path::PathBuf::from(std::env::var_os(HOME_VARIABLE).expect("a worker runs in its HOME"));
    let runtime = world::build_runtime(&home.join(world::CONFIG_DIR).join("policy.toml"), &home.join(world::STATE_DIR));
    let workspace = toolcell_runtime::Workspace::open(&home).expect("open the workspace");
    let secrets = world::host_secrets(&home, None);
    let seconds = number("TOOLCELL_STRESS_SECONDS", 20);
    let mut runner = TestRunner::new(ProptestConfig {
        rng_seed: RngSeed::Fixed(number("TOOLCELL_FUZZ_SEED", 1)),
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let strategy = plan::Palette::full().call();
    let start = std::time::Instant::now();
    let mut calls = 0u64;
    let mut violations = 0;
    while start.elapsed().as_secs() < seconds {
        let mut call = strategy.new_tree(&mut runner).expect("a call").current();
        call.role = role;
        if plan::moves_into_owned(&call) || plan::avoided(&format!("{call:?}")) {
            continue;
        }
        let tag = format!("p{}-{calls}", role.name());
        let (tool, args) = plan::arguments(&home, role, call.approve == Some(true), &call.act, &tag);
        let args = args.to_string();
        let approver: Option<std::sync::Arc<dyn toolcell_runtime::Approver>> = call.approve.map(world::approver);
        let session = format!("s-{}", role.name());
        let outcome = runtime
            .call(&toolcell_runtime::CallRequest {
                approver: approver.as_ref(),
                ..toolcell_runtime::CallRequest::new(&workspace, role.name(), &session, tool, &args)
            })
            .unwrap_or_else(|error| panic!("host error calling {tool} {args}: {error}"));
        for violation in world::check_outcome(&secrets, role, call.approve == Some(true), &outcome) {
            // A few are enough, and the parent reads the pipe only at the end.
            if violations < 30 {
                eprintln!("VIOLATION [{tag}] {call:?}: {violation}");
            }
            violations += 1;
        }
        calls += 1;
    }
    eprintln!("{}: {calls} calls made", role.name());
    assert_eq!(violations, 0, "this worker saw violations");
}
