//! Per-call limits, enforced by the host on a misbehaving component: the host stops it, names
//! the limit, and goes on serving.

use std::time::{Duration, Instant};

use serde_json::json;
use toolcell_runtime::{Limits, Runtime};
use toolcell_tests::{Fixture, builtin_runtime_builder, guest_program};
use toolcell_types::ToolErrorKind;

const DEADLINE: Duration = Duration::from_millis(300);

fn limited() -> Runtime {
    builtin_runtime_builder()
        .component("test:misbehave", guest_program("misbehave"))
        .component("test:fs_probe", guest_program("fs_probe"))
        .limits(Limits {
            deadline: DEADLINE,
            memory_bytes: 64 << 20,
            output_bytes: 64 << 10,
            host_calls: 2_000,
            open_files: 64,
            audit_records: 50,
        })
        .build()
        .expect("the limited runtime builds")
}

fn still_serves(fixture: &Fixture, runtime: &Runtime) {
    let outcome = fixture.call_on(runtime, "impl", "misbehave", &json!({"action": "ok"}), None);
    assert_eq!(outcome.result.expect("the host keeps serving").text, "ok");
}

#[test]
fn an_infinite_loop_is_stopped_at_its_deadline() {
    let fixture = Fixture::new();
    let runtime = limited();
    let started = Instant::now();
    let outcome = fixture.call_on(&runtime, "impl", "misbehave", &json!({"action": "spin"}), None);
    let elapsed = started.elapsed();
    assert!(outcome.trapped);
    let error = outcome.result.expect_err("stopped");
    assert_eq!(error.kind, ToolErrorKind::Failed);
    assert!(error.message.contains("ran past its deadline of 0.3 s"), "{}", error.message);
    assert!(elapsed >= DEADLINE, "stopped before its deadline: {elapsed:?}");
    // Generous: the point is that it stops at all, not how fast this machine is (the guarantee
    // is within one tick of the deadline).
    assert!(elapsed < DEADLINE + Duration::from_secs(5), "took {elapsed:?}");
    still_serves(&fixture, &runtime);
}

#[test]
fn a_component_waiting_in_the_host_is_cut_off_at_its_deadline() {
    // `std::thread::sleep` blocks inside the host (a wait on a clock), where epoch
    // interruption cannot reach: the host ends every wait at the deadline.
    let fixture = Fixture::new();
    let runtime = limited();
    let started = Instant::now();
    let outcome = fixture.call_on(
        &runtime,
        "impl",
        "fs_probe",
        &json!({"ops": [
            {"op": "write", "path": "before-the-wait.txt", "content": "x"},
            {"op": "sleep", "content": "60000"},
        ]}),
        None,
    );
    let elapsed = started.elapsed();
    assert!(outcome.trapped);
    let error = outcome.result.expect_err("stopped");
    assert!(error.message.contains("ran past its deadline of 0.3 s"), "{}", error.message);
    assert!(error.message.contains("rolled back"), "{}", error.message);
    assert!(!fixture.root().join("before-the-wait.txt").exists());
    assert!(elapsed >= DEADLINE, "stopped before its deadline: {elapsed:?}");
    assert!(elapsed < DEADLINE + Duration::from_secs(5), "took {elapsed:?}");
    still_serves(&fixture, &runtime);
}

#[test]
fn fifos_are_refused_instead_of_blocking_the_host() {
    let fixture = Fixture::new();
    let status = std::process::Command::new("mkfifo").arg(fixture.root().join("pipe")).status().expect("run mkfifo");
    assert!(status.success());
    let runtime = limited();
    for op in ["read", "write", "append"] {
        let outcome = fixture.call_on(&runtime, "impl", "fs_probe", &json!({"ops": [{"op": op, "path": "pipe", "content": "x"}]}), None);
        let error = outcome.result.expect_err("refused");
        assert_eq!(error.kind, ToolErrorKind::Denied, "{op}");
        assert!(error.message.contains("`pipe` is a FIFO, which tools may not open"), "{op}: {}", error.message);
        assert_eq!(outcome.denials[0].event.rule, "special-file");
    }
    still_serves(&fixture, &runtime);
}

#[test]
fn a_memory_bomb_is_refused_at_the_cap() {
    let fixture = Fixture::new();
    let runtime = limited();
    let outcome = fixture.call_on(&runtime, "impl", "misbehave", &json!({"action": "allocate", "bytes": 200 << 20}), None);
    let error = outcome.result.expect_err("refused");
    assert_eq!(error.kind, ToolErrorKind::TooLarge);
    assert!(error.message.contains("memory limit of 64 MiB"), "{}", error.message);
    let fits = fixture.call_on(&runtime, "impl", "misbehave", &json!({"action": "allocate", "bytes": 8 << 20}), None);
    assert_eq!(fits.result.expect("8 MiB fits").text, format!("allocated {} bytes", 8 << 20));
    still_serves(&fixture, &runtime);
}

#[test]
fn long_output_is_cut_at_the_cap_with_a_marker() {
    let fixture = Fixture::new();
    let runtime = limited();
    let outcome = fixture.call_on(&runtime, "impl", "misbehave", &json!({"action": "big_output", "bytes": 8 << 20}), None);
    let text = outcome.result.expect("output is cut, not refused").text;
    assert!(text.starts_with(&"y".repeat(1000)));
    assert!(text.contains("[output truncated at 64 KiB of 8192 KiB"), "{}", &text[text.len() - 200..]);
    assert!(text.len() < (64 << 10) + 300);
    still_serves(&fixture, &runtime);
}

#[test]
fn a_gigabyte_of_output_hits_the_memory_cap_first() {
    // The output cap applies to what a component returns, and what it returns lives in its
    // memory: asking for 1 GiB of output is refused at the memory cap, cleanly.
    let fixture = Fixture::new();
    let runtime = limited();
    let outcome = fixture.call_on(&runtime, "impl", "misbehave", &json!({"action": "big_output", "bytes": 1u64 << 30}), None);
    let error = outcome.result.expect_err("refused");
    assert_eq!(error.kind, ToolErrorKind::TooLarge, "{}", error.message);
    assert!(error.message.contains("memory limit of 64 MiB"), "{}", error.message);
    still_serves(&fixture, &runtime);
}

/// Every finished call gives its instance's slot back to the pool: calls one after another,
/// many more than the pool has slots for, from several threads at once, all start.
#[test]
fn finished_calls_give_back_every_instance_slot() {
    let fixture = Fixture::new();
    let runtime = limited();
    let rounds = 2 * toolcell_runtime::MAX_LIVE_INSTANCES + 10;
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..rounds / 2 {
                    still_serves(&fixture, &runtime);
                }
            });
        }
    });
    still_serves(&fixture, &runtime);
}

#[test]
fn limits_beyond_the_pool_are_refused_at_build() {
    let result = builtin_runtime_builder().limits(Limits { memory_bytes: 8 << 30, ..Limits::default() }).build();
    match result {
        Err(error) => assert!(error.to_string().contains("memory limit of 8192 MiB"), "{error}"),
        Ok(_) => panic!("an impossible memory limit was accepted"),
    }
}

#[test]
fn limits_come_from_the_policy_per_tool() {
    let policy = toolcell_tests::TEST_POLICY
        .replace("version = 1", "version = 1\n[limits]\ndeadline_ms = 300\n\n[limits.tools.misbehave]\nmemory_mib = 32\noutput_kib = 16\n");
    let runtime = toolcell_tests::runtime_with_policy(&policy, None);
    let fixture = Fixture::new();
    let call = |args: serde_json::Value| fixture.call_on(&runtime, "impl", "misbehave", &args, None);

    let error = call(json!({"action": "spin"})).result.expect_err("stopped");
    assert!(error.message.contains("deadline of 0.3 s"), "{}", error.message);
    // What to do is the hint, for the CLI's `hint:` line and MCP's `_meta`.
    let hint = error.hint.as_deref().unwrap_or_default();
    assert!(hint.contains("`deadline_ms` under `[limits]` or `[limits.tools.misbehave]`"), "{error:?}");

    let error = call(json!({"action": "allocate", "bytes": 48 << 20})).result.expect_err("refused");
    assert_eq!(error.kind, ToolErrorKind::TooLarge);
    assert!(error.message.contains("memory limit of 32 MiB"), "{}", error.message);
    assert!(error.hint.as_deref().is_some_and(|hint| hint.contains("`memory_mib`")), "{error:?}");

    let text = call(json!({"action": "big_output", "bytes": 64 << 10})).result.expect("cut").text;
    assert!(text.contains("[output truncated at 16 KiB"), "{}", &text[text.len() - 200..]);

    // Other tools keep the host's memory and output limits.
    let outcome = fixture.call_on(
        &runtime,
        "impl",
        "fs_probe",
        &json!({"ops": [{"op": "write", "path": "a.txt", "content": "y".repeat(40 << 10)}, {"op": "read", "path": "a.txt"}]}),
        None,
    );
    assert!(outcome.result.expect("ok").text.len() > 40 << 10);
}

#[test]
fn filesystem_calls_and_open_files_have_budgets() {
    let fixture = Fixture::new();
    fixture.write("notes.txt", "x\n");
    let runtime = limited();
    let stats: Vec<serde_json::Value> = (0..2_500).map(|_| json!({"op": "stat", "path": "notes.txt"})).collect();
    let outcome = fixture.call_on(&runtime, "impl", "fs_probe", &json!({"ops": stats}), None);
    let error = outcome.result.expect_err("over budget");
    assert_eq!(error.kind, ToolErrorKind::TooLarge, "{}", error.message);
    assert!(error.message.contains("made more than 2000 filesystem calls") && error.message.contains("`host_calls`"), "{}", error.message);
    assert_eq!(outcome.denials.len(), 1, "one record for the budget, not one per refused call");

    // Calls that judge no path (a `sync` among them) count too. Seven calls a round, two of them
    // an fsync: a small budget and the default deadline keep this inside any disk's time.
    let small = builtin_runtime_builder()
        .component("test:fs_probe", guest_program("fs_probe"))
        .limits(Limits { host_calls: 100, ..Limits::default() })
        .build()
        .expect("the runtime with a small budget builds");
    let outcome = fixture.call_on(
        &small,
        "impl",
        "fs_probe",
        &json!({"ops": [{"op": "repeat", "path": ".", "to": "descriptor", "content": "1000"}]}),
        None,
    );
    let error = outcome.result.expect_err("over budget");
    assert_eq!(error.kind, ToolErrorKind::TooLarge, "{}", error.message);
    assert!(error.message.contains("made more than 100 filesystem calls"), "{}", error.message);
    assert_eq!(outcome.denials.len(), 1, "{:?}", outcome.denials);

    let outcome =
        fixture.call_on(&runtime, "impl", "fs_probe", &json!({"ops": [{"op": "hold_open", "path": "notes.txt", "content": "100"}]}), None);
    let error = outcome.result.expect_err("too many open files");
    assert_eq!(error.kind, ToolErrorKind::TooLarge, "{}", error.message);
    assert!(error.message.contains("more than 64 files open at once") && error.message.contains("`open_files`"), "{}", error.message);
    // Within the budget, the same work succeeds.
    let outcome =
        fixture.call_on(&runtime, "impl", "fs_probe", &json!({"ops": [{"op": "hold_open", "path": "notes.txt", "content": "50"}]}), None);
    assert_eq!(outcome.result.expect("within budget").structured.expect("structured")[0]["value"], 50);
    still_serves(&fixture, &runtime);
}

/// A call whose host work is big: a directory of `FILES` files (in 100 directories) moved in
/// one rename, each entry judged and audited by the host inside that one filesystem call.
const FILES: usize = 30_000;

#[test]
fn a_call_cannot_make_sparse_files_the_host_would_hash_and_save_at_their_length() {
    let fixture = Fixture::new();
    fixture.write("kept.txt", "kept\n");
    let runtime = limited();
    let sparse = |ops: serde_json::Value| fixture.call_on(&runtime, "impl", "fs_probe", &json!({ "ops": ops }), None);
    for ops in [
        // 8 GiB of one hole, made by `set-size`: a file of its own, or one the workspace has.
        json!([{"op": "set_len", "path": "big.bin", "content": (8u64 << 30).to_string()}]),
        json!([{"op": "set_len", "path": "kept.txt", "content": (8u64 << 30).to_string()}]),
        // A stream that starts 8 GiB in.
        json!([{"op": "write_at", "path": "big.bin", "to": (8u64 << 30).to_string()}]),
        // Within the allowance one at a time, not together.
        json!([
            {"op": "set_len", "path": "a.bin", "content": (40u64 << 20).to_string()},
            {"op": "set_len", "path": "b.bin", "content": (40u64 << 20).to_string()},
        ]),
    ] {
        let started = Instant::now();
        let outcome = sparse(ops.clone());
        let error = outcome.result.expect_err("refused");
        assert_eq!(error.kind, ToolErrorKind::TooLarge, "{ops}: {}", error.message);
        assert!(error.message.contains("without the bytes between being written") && error.message.contains("64 MiB"), "{}", error.message);
        assert!(outcome.denials.iter().any(|denial| denial.event.rule == "sparse-file"), "{ops}: {:?}", outcome.denials);
        assert!(started.elapsed() < Duration::from_secs(5), "{ops}: refused before the host read the file ({:?})", started.elapsed());
        for name in ["big.bin", "a.bin", "b.bin"] {
            assert!(!fixture.root().join(name).exists(), "{ops}: rolled back");
        }
        assert_eq!(std::fs::read_to_string(fixture.root().join("kept.txt")).expect("kept"), "kept\n");
    }
    // Calls that each stay within the allowance do not grow one file's holes past it either.
    sparse(json!([{"op": "set_len", "path": "grown.bin", "content": (40u64 << 20).to_string()}])).result.expect("within");
    let outcome = sparse(json!([{"op": "set_len", "path": "grown.bin", "content": (80u64 << 20).to_string()}]));
    let error = outcome.result.expect_err("the file would hold 80 MiB of holes");
    assert!(error.message.contains("a file may hold no more than that unwritten"), "{}", error.message);
    assert_eq!(std::fs::metadata(fixture.root().join("grown.bin")).expect("kept").len(), 40 << 20);
    std::fs::remove_file(fixture.root().join("grown.bin")).expect("rm");
    // A file extended by less, or written where it ends, is fine.
    let outcome = sparse(json!([
        {"op": "set_len", "path": "small.bin", "content": (1u64 << 20).to_string()},
        {"op": "write_at", "path": "small.bin", "to": (1u64 << 20).to_string()},
    ]));
    outcome.result.expect("within the allowance");
    assert_eq!(std::fs::metadata(fixture.root().join("small.bin")).expect("made").len(), (1 << 20) + 1);
}

#[test]
fn the_deadline_bounds_the_hosts_own_work_for_the_call() {
    let deadline = Duration::from_millis(100);
    let fixture = Fixture::new();
    for directory in 0..100 {
        let path = fixture.root().join(format!("big/d{directory:03}"));
        std::fs::create_dir_all(&path).expect("mkdir");
        for file in 0..FILES / 100 {
            std::fs::write(path.join(format!("f{file:03}.txt")), "x").expect("write");
        }
    }
    let before = fixture.snapshot();
    let state = tempfile::tempdir().expect("state");
    let policy = format!("{}\n[limits]\ndeadline_ms = {}\nhost_calls = 1000000\n", toolcell_tests::TEST_POLICY, deadline.as_millis());
    let runtime = toolcell_tests::runtime_with_policy(&policy, Some(state.path()));
    let started = Instant::now();
    let outcome = fixture.call_on(&runtime, "impl", "fs_probe", &json!({"ops": [{"op": "rename", "path": "big", "to": "moved"}]}), None);
    let elapsed = started.elapsed();
    eprintln!("moving {FILES} files against a deadline of {deadline:?} took {elapsed:?}");
    assert!(outcome.trapped);
    let error = outcome.result.expect_err("stopped");
    assert!(error.message.contains("ran past its deadline of 0.1 s"), "{}", error.message);
    // Stopped part-way through the walk: not every entry was judged (twice: deleted where it
    // is, written where it lands).
    let judged = toolcell_tests::audit_records(&runtime)
        .iter()
        .filter(|record| record.call_id == outcome.call_id && record.kind == toolcell_audit::Kind::Fs)
        .count();
    assert!(judged < 2 * FILES, "the host judged {judged} entries after the deadline");
    // Generous: the point is that the host stops, not how fast this machine is.
    assert!(elapsed < deadline * 10 + Duration::from_secs(2), "took {elapsed:?}");
    assert_eq!(fixture.snapshot(), before, "the workspace changed");
    still_serves(&fixture, &runtime);
}

/// Wait until `runtime` has `count` instances made ahead of its tools' next calls (its idle
/// thread makes one after each call of a tool; on a busy machine that may take a while).
fn wait_for_instances_made_ahead(runtime: &Runtime, count: usize) {
    let waited = Instant::now();
    while runtime.instances_made_ahead() < count {
        assert!(waited.elapsed() < Duration::from_secs(60), "no instance was made ahead in 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn an_instance_made_ahead_is_fresh_and_runs_under_the_calls_own_context_guard_limits_and_deadline() {
    let fixture = Fixture::new();
    fixture.write("notes.txt", "the call's own workspace\n");
    // Only the tools the host ships are made ahead: `misbehave` is shipped here as the embedder
    // of this runtime would ship a tool of its own.
    let runtime = builtin_runtime_builder()
        .component("builtin:misbehave", guest_program("misbehave"))
        .limits(Limits { deadline: DEADLINE, memory_bytes: 64 << 20, ..Limits::default() })
        .build()
        .expect("runtime builds");
    // One instance made ahead per tool called so far, and this call's tool among them.
    let call = |tool: &str, args: serde_json::Value| {
        wait_for_instances_made_ahead(&runtime, if tool == "misbehave" { 1 } else { 2 });
        let outcome = fixture.call_on(&runtime, "impl", tool, &args, None);
        assert!(outcome.instance_made_ahead, "{tool} {args} ran in an instance made for it");
        outcome
    };
    let first = fixture.call_on(&runtime, "impl", "misbehave", &json!({"action": "count"}), None);
    assert!(!first.instance_made_ahead, "nothing was made before the tool's first call");
    // No state of an earlier call: the component's statics start over.
    for _ in 0..3 {
        assert_eq!(call("misbehave", json!({"action": "count"})).result.expect("count").text, "1", "state leaked between calls");
    }
    // The call's own role, session and id.
    let outcome = call("misbehave", json!({"action": "context"}));
    assert_eq!(outcome.result.expect("context").text, format!("impl s-test {}", outcome.call_id));
    // Its own memory limit (64 MiB here, the instance was made under the largest)...
    let outcome = call("misbehave", json!({"action": "allocate", "bytes": 96 << 20}));
    assert_eq!(outcome.result.expect_err("over the limit").kind, ToolErrorKind::TooLarge);
    // ...and deadline.
    let started = Instant::now();
    let outcome = call("misbehave", json!({"action": "spin"}));
    assert!(outcome.trapped && started.elapsed() < DEADLINE + Duration::from_secs(5), "{:?}", outcome.result);
    assert!(outcome.result.expect_err("stopped").message.contains("deadline"));
    // Its own guard: the workspace and nothing beyond it, each access judged and recorded.
    let first = fixture.call_on(&runtime, "impl", "read_file", &json!({"path": "notes.txt"}), None);
    assert!(!first.instance_made_ahead && first.result.is_ok(), "{:?}", first.result);
    let outcome = call("read_file", json!({"path": "notes.txt"}));
    assert!(outcome.result.expect("read").text.contains("the call's own workspace"));
    assert!(outcome.events.iter().any(|event| event.path == "notes.txt"), "{:?}", outcome.events);
    let outcome = call("read_file", json!({"path": "../outside.txt"}));
    assert_eq!(outcome.result.expect_err("outside").kind, ToolErrorKind::Denied);
    // A few are kept (the tools called last), whatever number of tools is called: the pool's
    // slots are the calls'.
    for tool in ["list_files", "directory_tree", "file_info", "read_many", "search_files"] {
        let args = match tool {
            "read_many" => json!({"paths": ["notes.txt"]}),
            "search_files" => json!({"query": "own"}),
            "file_info" => json!({"path": "notes.txt"}),
            _ => json!({}),
        };
        assert!(fixture.call_on(&runtime, "impl", tool, &args, None).result.is_ok(), "{tool}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(runtime.instances_made_ahead() <= 4, "{} made ahead", runtime.instances_made_ahead());
    still_serves(&fixture, &runtime);
}

#[test]
fn a_plugins_instance_is_never_made_ahead() {
    let fixture = Fixture::new();
    let runtime = limited();
    for _ in 0..5 {
        let outcome = fixture.call_on(&runtime, "impl", "misbehave", &json!({"action": "count"}), None);
        assert!(!outcome.instance_made_ahead);
        assert_eq!(outcome.result.expect("count").text, "1");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(runtime.instances_made_ahead(), 0, "a plugin's start code would run under no call's state");
}
