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
    (output.text, output.structured.expect("structured").into_value(), opened)
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
    let first_page =
        |size: usize| -> Vec<String> { (0..size).map(|number| format!("src/d{:02}/f{number:04}.rs", number / PER_DIRECTORY)).collect() };
    for (parts, indexed, runtime) in &runtimes {
        let label = format!("{parts} parts, indexed {indexed}");
        // Nothing matches: every file is read, once.
        let (_, everything, opened) = structured(runtime, &fixture, &json!({"query": "gamma [a-z]+ delta"}));
        assert_eq!(everything["files_searched"], json!(FILES), "{label}");
        assert!((FILES..FILES + 110).contains(&opened), "{label}: {opened} files opened to search {FILES}");
        for (page_size, mode) in [(PAGE, "files"), (PAGE, "count"), (PAGE, "content")] {
            let args = json!({"query": "gamma.*delta", "max_results": page_size, "output_mode": mode});
            let (text, page, opened) = structured(runtime, &fixture, &args);
            let key = match mode {
                "files" => "files",
                "count" => "counts",
                _ => "matches",
            };
            let label = format!("{label}, {mode}, a page of {page_size}");
            let results = page[key].as_array().expect("the results");
            assert_eq!(results.len(), page_size, "{label}");
            let paths: Vec<&str> =
                results.iter().map(|result| result.as_str().or_else(|| result["path"].as_str()).expect("a path")).collect();
            assert_eq!(paths, first_page(page_size), "{label}: the first page in walk order");
            if mode == "count" {
                assert!(results.iter().all(|result| result["count"] == json!(1)), "{label}: one matching line a file");
            }
            // The text: one line per result, then the line saying where the next page starts.
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), page_size + 1, "{label}");
            assert!(lines[..page_size].iter().all(|line| line.starts_with("src/")), "{label}: a result on each line");
            assert!(lines[page_size].contains(&format!("`offset` {page_size} ")), "{label}: {}", lines[page_size]);
            assert_eq!((&page["truncated"], &page["next_offset"]), (&json!(true), &json!(page_size)), "{label}");
            if mode == "content" {
                continue;
            }
            // The files read: one instance stops after the first file past the page; a split
            // call's first instance reads 100 files before it splits, and each part stops at
            // the latest at the first file past the page among its share, the assembly reading
            // none again.
            let most = if *parts == 1 { page_size + 1 } else { 100 + *parts as usize * (page_size + 1) };
            assert!(opened <= most, "{label}: {opened} files opened (at most {most})");
        }
        // The last page: what is left, not truncated.
        let (_, last, _) = structured(runtime, &fixture, &json!({"query": "gamma.*delta", "max_results": PAGE, "offset": FILES - 100}));
        assert_eq!(last["files"].as_array().map(Vec::len), Some(100), "{label}");
        assert_eq!(last["truncated"], json!(false), "{label}");
    }
}

/// Matches in the first tenth of the tree only; the rest holds both words the other way round,
/// so that the content index cannot leave those files out.
const MATCHING_DIRECTORIES: usize = 10;

/// The parts of a split call stop one another (`context.shard-progress`): neither part alone
/// holds more than the page, so each would read its whole share; together they fill it within
/// the matching tenth. Whatever order the parts run in, one of them at most reads its whole
/// share: the other learns from the board that the page is full once it has searched up to the
/// last match posted.
#[test]
fn the_parts_of_a_split_call_stop_one_another_once_together_they_fill_the_page() {
    let state = tempfile::tempdir().expect("state");
    let fixture = Fixture::new();
    for number in 0..FILES {
        let directory = number / PER_DIRECTORY;
        let line = if directory < MATCHING_DIRECTORIES { format!("// gamma {number} delta") } else { format!("// delta {number} gamma") };
        fixture.write(&format!("src/d{directory:02}/f{number:04}.rs"), format!("{line}\nfn f() {{}}\n"));
    }
    std::thread::sleep(Duration::from_millis(1_100));
    let matching = MATCHING_DIRECTORIES * PER_DIRECTORY;
    // More than either part's matches (half of them), fewer than both parts'.
    let enough = matching * 6 / 10;
    for indexed in [false, true] {
        let runtime = runtime(2, indexed, &state.path().join(format!("stop-{indexed}")));
        if indexed {
            runtime.build_index(&fixture.workspace).expect("the index builds");
        }
        for (offset, max_results, mode) in [(0, enough, "files"), (0, enough, "count"), (enough / 2, enough - enough / 2, "files")] {
            let label = format!("indexed {indexed}, {mode}, offset {offset}, max_results {max_results}");
            let args = json!({"query": "gamma.*delta", "max_results": max_results, "offset": offset, "output_mode": mode});
            let (text, page, opened) = structured(&runtime, &fixture, &args);
            let key = if mode == "count" { "counts" } else { "files" };
            let paths: Vec<&str> = page[key]
                .as_array()
                .expect("the results")
                .iter()
                .map(|result| result.as_str().or_else(|| result["path"].as_str()).expect("a path"))
                .collect();
            let expected: Vec<String> =
                (offset..enough).map(|number| format!("src/d{:02}/f{number:04}.rs", number / PER_DIRECTORY)).collect();
            assert_eq!(paths, expected, "{label}: exactly the page, in walk order");
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), max_results + 1, "{label}: a line per result, then where the next page starts");
            assert!(lines[max_results].contains(&format!("`offset` {enough} ")), "{label}: {}", lines[max_results]);
            assert_eq!((&page["truncated"], &page["next_offset"]), (&json!(true), &json!(enough)), "{label}");
            // Before: both parts read their whole share (100 + FILES files). Now one part at
            // most does; the other stops past the matching tenth, at most one read of the board
            // (64 files) late.
            let most = 100 + FILES / 2 + matching / 2 + 64 + 1;
            assert!(
                opened <= most,
                "{label}: {opened} files opened (at most {most}; {} without the parts stopping one another)",
                100 + FILES
            );
        }
    }
}
