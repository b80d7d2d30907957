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
/// role may not read. `src` has enough directories to be dealt out among the parts; the root,
/// `docs` and its chain of single directories are listed by every part, their files dealt in
/// turn; ignore files sit both in a dealt directory and in one every part lists.
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
    for (number, name) in ["README.md", "a.txt", "b.txt", "needle.log", "z.txt"].into_iter().enumerate() {
        fixture.write(name, format!("root file {number}: needle\n"));
    }
    fixture.write(".gitignore", "*.log\n");
    fixture.write("src/m07/.gitignore", "f07[0-4]*.rs\n");
    fixture.write("docs/guide/deep/deeper/x.md", "a needle, deep down\n");
    fixture.write("docs/guide/y.md", "needle\n");
    fixture.write("docs/z.md", "no match\n");
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
    let alone = runtime(1, TEST_POLICY, &state.path().join("alone"));
    let splits: Vec<Runtime> =
        [2, 3, 4].into_iter().map(|parts| runtime(parts, TEST_POLICY, &state.path().join(format!("split{parts}")))).collect();
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
    // What was read is counted in full by the parts even where one instance stopped at the
    // end of its page: the files read, and where the page is cut short, the binary and large
    // files among them (a part may read past the page's end before it learns where it is).
    let strip = |mut value: Value| {
        if let Some(structured) = value.get_mut("structured").and_then(Value::as_object_mut) {
            structured.remove("files_searched");
            if structured.get("truncated") == Some(&Value::Bool(true)) {
                structured.remove("skipped_binary");
                structured.remove("skipped_large");
            }
        }
        value
    };
    for args in &queries {
        let (one, warnings_one) = answer(&alone, &fixture, args);
        for split in &splits {
            let (parts, warnings_parts) = answer(split, &fixture, args);
            assert_eq!(strip(one.clone()), strip(parts), "{args}");
            assert_eq!(warnings_one, warnings_parts, "{args}");
        }
    }
    let split = &splits[2];
    // The split ran: the parts' reads are the call's, and the parts searched every file.
    let outcome = fixture.call_as(split, "s-split", None, &[], "search_files", &json!({"query": "zzz_nowhere"}));
    let structured = outcome.result.expect("searched").structured.expect("structured");
    // The 3,000 under `src` less the 50 ignored in `src/m07`; four text files at the root (the
    // `.log` ignored), the two ignore files and three under `docs`.
    assert_eq!(structured["files_searched"], json!(3_000 - 50 + 4 + 2 + 3), "{structured}");
    let alone_calls = fixture.call_as(&alone, "s-split", None, &[], "search_files", &json!({"query": "zzz_nowhere"})).host_calls;
    assert!(outcome.host_calls > alone_calls, "the parts' host calls count: {} vs {alone_calls}", outcome.host_calls);
    // Each part walks only its share: below the deal, no directory is listed twice, so four
    // parts make about the host calls of one instance, not four listings of the tree.
    assert!(
        outcome.host_calls < alone_calls + alone_calls / 4,
        "the parts made {} host calls, one instance {alone_calls}",
        outcome.host_calls
    );
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
    let policy = format!("{TEST_POLICY}\n[limits]\ndeadline_ms = 6000\n");
    let runtime = runtime(2, &policy, state.path());
    let fixture = Fixture::new();
    let ops = json!({"ops": [{"op": "sleep", "content": "5500"}, {"op": "split", "content": "2"}, {"op": "spin"}]});
    let started = Instant::now();
    let outcome = fixture.call_as(&runtime, "s-parts", None, &[], "fs_probe", &ops);
    let took = started.elapsed();
    let error = outcome.result.expect_err("the spinning parts are stopped");
    assert!(error.message.contains("deadline"), "{}", error.message);
    // The first instance slept 5.5 s before splitting; the parts had what was left of the 6 s
    // (the call ends near 6 s), not 6 s of their own: then it could not end before 11.5 s,
    // however fast the machine. The bound leaves a loaded machine more than 5 s to stop them.
    assert!(took < Duration::from_millis(11_400), "the call took {took:?}");
}

/// While directories and files appear and disappear beside them, a split scan still finds
/// every file that is there throughout: parts that dealt the tree from different listings are
/// not trusted (the assembly then scans alone), so no file falls between them; and a directory
/// removed between its opening and its listing is skipped with a warning (the host refuses to
/// list it through the old handle), not a failed search.
#[test]
fn a_split_scan_misses_no_file_while_the_tree_changes_under_it() {
    let state = tempfile::tempdir().expect("state");
    let split = runtime(3, TEST_POLICY, state.path());
    let fixture = Fixture::new();
    let mut stable = Vec::new();
    for directory in 0..24 {
        for file in 0..40 {
            let path = format!("src/d{directory:02}/f{file:02}.rs");
            if file % 5 == 0 {
                fixture.write(&path, "fn f() {} // needle\n");
                stable.push(path);
            } else {
                fixture.write(&path, "fn f() {}\n");
            }
        }
    }
    stable.sort_by(|left, right| left.split('/').cmp(right.split('/')));
    let root = fixture.root().to_path_buf();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut round = 0_u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // A directory among the dealt ones, and a file at the root: both shift the deal.
                std::fs::create_dir(root.join(format!("src/c{round:05}"))).expect("create a directory");
                std::fs::write(root.join(format!("a{round:05}.txt")), "churn\n").expect("create a file");
                // Directories removed and made again: the walks meet directories removed
                // between their opening and their listing.
                for churned in 0..20 {
                    let directory = root.join(format!("src/r{churned:02}"));
                    let _ = std::fs::remove_dir_all(&directory);
                    std::fs::create_dir_all(directory.join("sub")).expect("make a directory again");
                }
                round += 1;
            }
        })
    };
    let mut met_removals = 0;
    // At least 25 searches, and more (up to 300) until one meets a directory removed under it:
    // the window between opening a directory and listing it is short.
    let mut attempt = 0;
    while attempt < 25 || (met_removals == 0 && attempt < 300) {
        attempt += 1;
        let outcome = fixture.call_as(&split, "s-churn", None, &[], "search_files", &json!({"query": "needle", "max_results": 1000}));
        met_removals += outcome
            .warnings
            .iter()
            .filter(|warning| warning.contains("was moved, replaced or removed since it was opened, so it was not listed"))
            .count();
        let structured = outcome.result.expect("searched").structured.expect("structured");
        let found: Vec<String> =
            structured["files"].as_array().expect("files").iter().map(|file| file.as_str().expect("a path").to_owned()).collect();
        assert_eq!(found, stable, "attempt {attempt}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    churn.join().expect("the churn thread");
    eprintln!("{attempt} searches met {met_removals} directories removed under them");
}

#[test]
fn the_parts_share_the_calls_memory_limit() {
    let state = tempfile::tempdir().expect("state");
    let policy = format!("{TEST_POLICY}\n[limits.tools.fs_probe]\nmemory_mib = 64\n");
    let runtime = runtime(4, &policy, state.path());
    let fixture = Fixture::new();
    // Each part alone stays under 64 MiB; four at once would hold 4 x 40 MiB.
    let ops = |mebibytes: u32| json!({"ops": [{"op": "split", "content": "4"}, {"op": "allocate", "content": mebibytes.to_string()}, {"op": "sleep", "content": "300"}]});
    let outcome = fixture.call_as(&runtime, "s-memory", None, &[], "fs_probe", &ops(40));
    let error = outcome.result.expect_err("the parts together exceed the call's limit");
    assert!(error.message.contains("memory limit of 64 MiB"), "{}", error.message);
    // Within the limit together, the split call runs.
    let outcome = fixture.call_as(&runtime, "s-memory", None, &[], "fs_probe", &ops(8));
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
}

/// The content index names most of the tree for a pattern whose trigrams most files hold: the
/// search then deals its candidates out among parts, as it deals out a scan, and answers as
/// one instance scanning alone does.
#[test]
fn a_long_list_of_index_candidates_is_searched_in_parts_and_answers_as_one_scan() {
    let state = tempfile::tempdir().expect("state");
    let scanning = runtime(1, TEST_POLICY, &state.path().join("scanning"));
    let indexed = |parts: u32| {
        builtin_runtime_builder()
            .policy("policy.toml", TEST_POLICY)
            .audit_dir(state.path().join(format!("indexed{parts}")))
            .index_freshness(toolcell_runtime::IndexFreshness::Walk)
            .parallel_parts(parts)
            .build()
            .expect("the runtime builds")
    };
    let (alone, split) = (indexed(1), indexed(3));
    let fixture = tree();
    // The index trusts a file's stamp once it is a second old.
    std::thread::sleep(Duration::from_millis(1_100));
    alone.build_index(&fixture.workspace).expect("the index builds");
    split.build_index(&fixture.workspace).expect("the index builds");
    let searched = |outcome: &toolcell_runtime::CallOutcome| {
        outcome.result.as_ref().expect("searched").structured.as_ref().expect("structured")["files_searched"].as_u64().expect("a count")
    };
    // Every file holds `() {}`: the index cannot narrow it, and nothing matches.
    let nowhere = json!({"query": r"(fn|end) [q-z]{2}\d"});
    let one = fixture.call_as(&alone, "s-split", None, &[], "search_files", &nowhere);
    let parts = fixture.call_as(&split, "s-split", None, &[], "search_files", &nowhere);
    assert!(searched(&one) > 2_000, "the index names most files: {}", searched(&one));
    // Each candidate was searched once, by one part; the parts' calls are the call's.
    assert_eq!(searched(&parts), searched(&one));
    assert!(parts.host_calls > one.host_calls, "the parts ran: {} vs {} host calls", parts.host_calls, one.host_calls);
    let strip = |mut value: Value| {
        if let Some(structured) = value.get_mut("structured").and_then(Value::as_object_mut) {
            structured.remove("files_searched");
        }
        value
    };
    // One match in ten files, across the tree; `src/m07` has an ignore file.
    let sparse = r"f\d\d7\d\(\) \{\}";
    for args in [
        nowhere.clone(),
        json!({"query": sparse}),
        json!({"query": sparse, "max_results": 5, "offset": 3}),
        json!({"query": sparse, "output_mode": "content", "max_results": 40}),
        json!({"query": sparse, "output_mode": "count"}),
        json!({"query": sparse, "path": "src/m07"}),
        json!({"query": sparse, "offset": 10_000}),
    ] {
        let (expected, expected_warnings) = answer(&scanning, &fixture, &args);
        for runtime in [&alone, &split] {
            let (got, warnings) = answer(runtime, &fixture, &args);
            assert_eq!(strip(got), strip(expected.clone()), "{args}");
            assert_eq!(warnings, expected_warnings, "{args}");
        }
    }
}
