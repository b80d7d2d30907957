//! `search_files` stops where its page is full: `max_results` (after `offset`) ends the walk
//! and the reading of files, alone and in every part of a split call, over the content
//! index's candidates as over a walk, and the page holds exactly `max_results` results.

use std::time::Duration;

use serde_json::{Value, json};
use toolcell_runtime::{IndexFreshness, Runtime};
use toolcell_tests::{Fixture, TEST_POLICY, builtin_runtime_builder};

const DIRECTORIES: usize = 30;
const PER_DIRECTORY: usize = 100;
const FILES: usize = DIRECTORIES * PER_DIRECTORY;
const PAGE: usize = 300;

fn runtime(parts: u32, indexed: bool, state: &std::path::Path) -> Runtime {
    let mut builder = builtin_runtime_builder().policy("policy.toml", TEST_POLICY).audit_dir(state).parallel_parts(parts);
    if indexed {
        builder = builder.index_freshness(IndexFreshness::Walk);
    }
    builder.build().expect("the runtime builds")
}

/// Every file matches: the index cannot narrow the search, and a page fills long before the
/// tree ends.
fn tree() -> Fixture {
    let fixture = Fixture::new();
    for number in 0..FILES {
        fixture.write(&format!("src/d{:02}/f{number:04}.rs", number / PER_DIRECTORY), format!("// gamma {number} delta\nfn f() {{}}\n"));
    }
    fixture
}

/// The call's text, its structured result, and how many files it opened (each part's opens
/// are the call's, as the guard saw them).
fn structured(runtime: &Runtime, fixture: &Fixture, args: &Value) -> (String, Value, usize) {
    let outcome = fixture.call_as(runtime, "s-limits", None, &[], "search_files", args);
    assert_eq!(outcome.unrecorded_events, 0, "every access is kept");
    let opened = outcome.events.iter().filter(|event| event.operation == "open-at" && event.path.ends_with(".rs")).count();
    let output = outcome.result.unwrap_or_else(|error| panic!("{args}: {}", error.message));
    (output.text, output.structured.expect("structured"), opened)
}

#[test]
fn a_full_page_ends_the_search_in_every_part_and_holds_exactly_its_results() {
    let state = tempfile::tempdir().expect("state");
    let fixture = tree();
    // The index trusts a file's stamp once it is a second old.
    std::thread::sleep(Duration::from_millis(1_100));
    let runtimes = [(1, false), (2, false), (2, true)].map(|(parts, indexed)| {
        let runtime = runtime(parts, indexed, &state.path().join(format!("p{parts}-{indexed}")));
        if indexed {
            runtime.build_index(&fixture.workspace).expect("the index builds");
        }
        (parts, indexed, runtime)
    });
    let first_page: Vec<String> = (0..PAGE).map(|number| format!("src/d{:02}/f{number:04}.rs", number / PER_DIRECTORY)).collect();
    for (parts, indexed, runtime) in &runtimes {
        let label = format!("{parts} parts, indexed {indexed}");
        // Nothing matches: every file is read, once.
        let (_, everything, opened) = structured(runtime, &fixture, &json!({"query": "gamma [a-z]+ delta"}));
        assert_eq!(everything["files_searched"], json!(FILES), "{label}");
        assert!((FILES..FILES + 110).contains(&opened), "{label}: {opened} files opened to search {FILES}");
        for mode in ["files", "count", "content"] {
            let args = json!({"query": "gamma.*delta", "max_results": PAGE, "output_mode": mode});
            let (text, page, opened) = structured(runtime, &fixture, &args);
            let key = match mode {
                "files" => "files",
                "count" => "counts",
                _ => "matches",
            };
            let results = page[key].as_array().expect("the results");
            assert_eq!(results.len(), PAGE, "{label}, {mode}");
            let paths: Vec<&str> =
                results.iter().map(|result| result.as_str().or_else(|| result["path"].as_str()).expect("a path")).collect();
            assert_eq!(paths, first_page, "{label}, {mode}: the first page in walk order");
            // The text: one line per result, then the line saying where the next page starts.
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), PAGE + 1, "{label}, {mode}");
            assert!(lines[PAGE].contains("`offset` 300"), "{label}, {mode}: {}", lines[PAGE]);
            assert_eq!((&page["truncated"], &page["next_offset"]), (&json!(true), &json!(PAGE)), "{label}, {mode}");
            if mode == "content" {
                continue;
            }
            // The files read: one instance stops after the first file past the page; a split
            // call's first instance reads 100 files before it splits, and each part stops at
            // the first file past the page among its share, the assembly reading none again.
            let most = if *parts == 1 { PAGE + 1 } else { 100 + *parts as usize * (PAGE + 1) };
            assert!(opened <= most, "{label}, {mode}: {opened} files opened for a page of {PAGE} (at most {most})");
        }
        // The last page: what is left, not truncated.
        let (_, last, _) = structured(runtime, &fixture, &json!({"query": "gamma.*delta", "max_results": PAGE, "offset": FILES - 100}));
        assert_eq!(last["files"].as_array().map(Vec::len), Some(100), "{label}");
        assert_eq!(last["truncated"], json!(false), "{label}");
    }
}
