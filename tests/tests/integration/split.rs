//! Calls a component runs in parts side by side (`context.split`): a large scan by
//! `search_files` answers exactly as one instance does, and the parts are governed as the call
//! is — same role and policy, every refusal audited under the call's id, no writes, one
//! deadline for them all.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolcell_runtime::Runtime;
use toolcell_tests::{Fixture, TEST_POLICY, audit_records, builtin_runtime_builder, guest_program};

fn runtime(parts: u32, policy: &str, state: &std::path::Path) -> Runtime {
    builtin_runtime_builder()
        .component("test:fs_probe", guest_program("fs_probe"))
        .policy("policy.toml", policy)
        .audit_dir(state)
        .parallel_parts(parts)
        .build()
        .expect("the runtime builds")
}

/// A tree of 3,000 files in which some hold the words searched for, and a secret directory the
/// role may not read.
fn tree() -> Fixture {
    let fixture = Fixture::new();
    for number in 0..3_000 {
        let extra = match number % 97 {
            0 => "needle here\nand another needle\n",
            5 => "Needle, capitalised\n",
            _ => "",
        };
        fixture.write(&format!("src/m{:02}/f{number:04}.rs", number / 100), format!("fn f{number}() {{}}\n{extra}// end\n"));
    }
    for number in 0..20 {
        fixture.write(&format!("secrets/s{number}.txt"), "needle in a secret\n");
    }
    fixture.write("src/m00/blob.bin", b"needle\x00binary");
    fixture
}

fn answer(runtime: &Runtime, fixture: &Fixture, args: &Value) -> (Value, Vec<String>) {
    let outcome = fixture.call_as(runtime, "s-split", None, &[], "search_files", args);
    let result = match outcome.result {
        Ok(output) => json!({"text": output.text, "structured": output.structured}),
        Err(error) => json!({"error": error.kind.as_str(), "message": error.message}),
    };
    (result, outcome.warnings)
}

#[test]
fn a_split_scan_answers_exactly_as_one_instance() {
    let state = tempfile::tempdir().expect("state");
    let (alone, split) = (runtime(1, TEST_POLICY, &state.path().join("alone")), runtime(4, TEST_POLICY, &state.path().join("split")));
    let fixture = tree();
    let queries = [
        json!({"query": "needle"}),
        json!({"query": "needle", "case_insensitive": true, "output_mode": "content", "context": 1}),
        json!({"query": "needle", "output_mode": "count"}),
        json!({"query": "nee+dle", "max_results": 5}),
        json!({"query": "needle", "output_mode": "content", "max_results": 7, "offset": 3}),
        json!({"query": "needle", "offset": 10_000}),
        json!({"query": "(?s)needle.*another", "multiline": true, "output_mode": "content"}),
        json!({"query": "zzz_nowhere"}),
        json!({"query": "fn f2999", "path": "src"}),
        json!({"query": "needle", "include": "*.bin"}),
    ];
    for args in &queries {
        let (one, warnings_one) = answer(&alone, &fixture, args);
        let (parts, warnings_parts) = answer(&split, &fixture, args);
        // What was searched is counted in full by the parts even where one instance stopped
        // at the end of its page.
        let strip = |mut value: Value| {
            if let Some(structured) = value.get_mut("structured").and_then(Value::as_object_mut) {
                structured.remove("files_searched");
            }
            value
        };
        assert_eq!(strip(one), strip(parts), "{args}");
        assert_eq!(warnings_one, warnings_parts, "{args}");
    }
    // The split ran: the parts' reads are the call's, and the parts searched every file.
    let outcome = fixture.call_as(&split, "s-split", None, &[], "search_files", &json!({"query": "zzz_nowhere"}));
    let structured = outcome.result.expect("searched").structured.expect("structured");
    assert_eq!(structured["files_searched"], json!(3_000), "{structured}");
    let alone_calls = fixture.call_as(&alone, "s-split", None, &[], "search_files", &json!({"query": "zzz_nowhere"})).host_calls;
    assert!(outcome.host_calls > alone_calls, "the parts' host calls count: {} vs {alone_calls}", outcome.host_calls);
}

#[test]
fn the_parts_of_a_split_call_may_only_read_and_their_refusals_are_the_calls() {
    let state = tempfile::tempdir().expect("state");
    let runtime = runtime(2, TEST_POLICY, state.path());
    let fixture = Fixture::new();
    fixture.write("secrets/key.txt", "hunter2\n");
    let ops = json!({"ops": [
        {"op": "split", "content": "4"},
        {"op": "shard"},
        {"op": "write", "path": "pwned.txt", "content": "written by a part"},
        {"op": "read", "path": "secrets/key.txt"},
        {"op": "shard_results"},
    ]});
    let outcome = fixture.call_as(&runtime, "s-parts", None, &[], "fs_probe", &ops);
    // Every write was refused, in the parts and in the assembly; nothing was written.
    assert!(!fixture.root().join("pwned.txt").exists());
    let error = outcome.result.expect_err("the refusals fail the call");
    assert_eq!(error.kind.as_str(), "denied", "{}", error.message);
    let writes = outcome.denials.iter().filter(|denial| denial.event.path == "pwned.txt").count();
    let reads = outcome.denials.iter().filter(|denial| denial.event.path == "secrets/key.txt").count();
    // Two parts (the host has two) and the assembly each tried.
    assert_eq!((writes, reads), (3, 3), "{:?}", outcome.denials);
    // Audited under the call's id, like any refusal of the call.
    let records = audit_records(&runtime);
    let refused: Vec<_> =
        records.iter().filter(|record| record.call_id == outcome.call_id && record.path.as_deref() == Some("pwned.txt")).collect();
    assert!(!refused.is_empty(), "no audit record of the refused writes");
}

#[test]
fn the_parts_see_their_shard_and_the_assembly_their_results() {
    let state = tempfile::tempdir().expect("state");
    let runtime = runtime(3, TEST_POLICY, state.path());
    let fixture = Fixture::new();
    let ops = json!({"ops": [{"op": "split", "content": "8"}, {"op": "shard"}, {"op": "shard_results"}]});
    let outcome = fixture.call_as(&runtime, "s-parts", None, &[], "fs_probe", &ops);
    let structured = outcome.result.expect("assembled").structured.expect("structured");
    // The assembly: no shard of its own, three parts' results in order.
    assert_eq!(structured[0], json!({"op": "split", "value": 0}));
    assert_eq!(structured[1], json!({"op": "shard", "value": null}));
    let parts = structured[2]["value"].as_array().expect("the parts' results").clone();
    assert_eq!(parts.len(), 3);
    for (index, part) in parts.iter().enumerate() {
        assert_eq!(part["ok"][1], json!({"op": "shard", "value": [index, 3]}), "{part}");
        assert_eq!(part["ok"][0], json!({"op": "split", "value": 0}), "a part cannot split again: {part}");
    }
    // A host with one part to give runs none: the call carries on alone.
    let alone = toolcell_tests::runtime_with_policy(TEST_POLICY, None);
    let outcome = fixture.call_as(&alone, "s-parts", None, &[], "fs_probe", &ops);
    let structured = outcome.result.expect("ran").structured.expect("structured");
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if cores < 2 {
        assert_eq!(structured[0], json!({"op": "split", "value": 0}));
    }
}

#[test]
fn the_parts_share_the_calls_deadline() {
    let state = tempfile::tempdir().expect("state");
    let policy = format!("{TEST_POLICY}\n[limits]\ndeadline_ms = 1000\n");
    let runtime = runtime(2, &policy, state.path());
    let fixture = Fixture::new();
    let ops = json!({"ops": [{"op": "sleep", "content": "600"}, {"op": "split", "content": "2"}, {"op": "spin"}]});
    let started = Instant::now();
    let outcome = fixture.call_as(&runtime, "s-parts", None, &[], "fs_probe", &ops);
    let took = started.elapsed();
    let error = outcome.result.expect_err("the spinning parts are stopped");
    assert!(error.message.contains("deadline"), "{}", error.message);
    // The first instance slept 0.6 s before splitting; the parts had what was left of the
    // second, not a second each.
    assert!(took < Duration::from_millis(1_900), "the call took {took:?}");
}
