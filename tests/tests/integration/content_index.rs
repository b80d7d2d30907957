//! The content index (`toolcell index build`) through the real host: a search with it answers
//! exactly as a full scan does, whatever changed since it was built, inside or outside the
//! host; and a role learns nothing from it about files it may not read.

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use toolcell_runtime::{IndexFreshness, IndexStatus, Runtime};
use toolcell_tests::measure::Random;
use toolcell_tests::{Fixture, TEST_POLICY, builtin_runtime_builder, eventually, guest_program, runtime_with_policy};

const WORDS: [&str; 12] = ["alpha", "beta", "gamma", "Delta", "needle", "haystack", "fn", "main", "TODO", "x", "é", "42"];

fn text(random: &mut Random) -> String {
    let lines = random.below(6);
    (0..lines).map(|_| (0..random.below(6)).map(|_| random.pick(&WORDS)).collect::<Vec<_>>().join(" ") + "\n").collect()
}

fn path(random: &mut Random) -> String {
    let directory = random.pick(&["", "src/", "src/deep/", "docs/", "target/", "vendor/"]);
    format!("{directory}f{}.{}", random.below(8), random.pick(&["rs", "md", "txt"]))
}

/// What a search answered: its matches, without the counts of files searched or skipped
/// (the index spares reading files that cannot match).
fn answer(runtime: &Runtime, fixture: &Fixture, args: &Value) -> Value {
    let outcome = fixture.call_as(runtime, "s-index", None, &[], "search_files", args);
    match outcome.result {
        Ok(output) => {
            let structured = output.structured.expect("structured");
            json!([structured["files"], structured["matches"], structured["counts"], structured["truncated"]])
        }
        Err(error) => json!({"error": error.kind.as_str(), "message": error.message}),
    }
}

/// Wait until every file in the workspace last changed long enough ago for the index to trust
/// its stamp (a second): the stamp is the status-change time, which nobody can set back, so a
/// test cannot age a file by setting its modification time.
fn age(_root: &Path) {
    std::thread::sleep(Duration::from_millis(1_100));
}

/// Set the modification time of the file at `path`.
fn set_modified(path: &Path, time: SystemTime) {
    std::fs::File::options().write(true).open(path).and_then(|file| file.set_modified(time)).expect("set mtime");
}

const QUERIES: [&str; 12] =
    ["needle", "alpha beta", "(?i)delta", "gam+a", "TODO|FIXME", "fn\\s+main", "é", "x", "^4", "[0-9]{2}", "needle\\nhay", "zzz"];

/// One change to the workspace, outside the host (`outside`) or through it.
fn change(random: &mut Random, fixture: &Fixture, runtime: &Runtime, outside: bool) {
    let root = fixture.root();
    let (target, content) = (path(random), text(random));
    if !outside {
        let call = match random.below(4) {
            0 => json!(["delete_file", {"path": target}]),
            1 => json!(["move_file", {"source": target, "destination": path(random)}]),
            _ => json!(["write_file", {"path": target, "content": content}]),
        };
        // Refusals (a write without a read first, a missing source) change nothing: fine.
        let _ = fixture.call_as(runtime, "s-index", None, &[], call[0].as_str().expect("tool"), &call[1]);
        return;
    }
    match random.below(7) {
        0 => {
            let _ = std::fs::remove_file(root.join(&target));
        }
        1 => {
            let _ = std::fs::rename(root.join(&target), root.join(path(random)));
        }
        2 => {
            // A new directory with files in it, made elsewhere and moved in whole.
            let staging = fixture.base().join(format!("staging{}", random.below(1000)));
            std::fs::create_dir_all(staging.join("inner")).expect("staging");
            std::fs::write(staging.join("inner/new.rs"), text(random)).expect("write");
            std::fs::write(staging.join("top.md"), content).expect("write");
            let _ = std::fs::rename(&staging, root.join(format!("src/moved{}", random.below(3))));
            let _ = std::fs::remove_dir_all(&staging);
        }
        3 => {
            // A directory moved within the workspace, and one removed.
            let _ = std::fs::rename(root.join("src/deep"), root.join(format!("renamed{}", random.below(3))));
            if random.below(2) == 0 {
                let _ = std::fs::remove_dir_all(root.join("docs"));
            }
        }
        _ => {
            if let Some(parent) = root.join(&target).parent() {
                std::fs::create_dir_all(parent).expect("parent");
            }
            std::fs::write(root.join(&target), content).expect("write");
        }
    }
}

/// Random trees, random changes inside and outside the host between searches, random queries:
/// the indexed answer is always the full scan's, with either way of keeping the index fresh.
fn indexed_answers_as_a_full_scan(freshness: IndexFreshness, seed: u64) {
    let state = tempfile::tempdir().expect("state");
    let indexed = builtin_runtime_builder()
        .component("test:fs_probe", guest_program("fs_probe"))
        .policy("policy.toml", TEST_POLICY)
        .audit_dir(state.path())
        .index_freshness(freshness)
        .build()
        .expect("the runtime builds");
    let scanning = runtime_with_policy(TEST_POLICY, None);
    let mut random = Random(seed);
    for round in 0..4 {
        let fixture = Fixture::new();
        fixture.write(".gitignore", "target/\n*.md\n!docs/keep.md\n");
        fixture.write("docs/keep.md", "needle kept\n");
        for _ in 0..40 {
            let (path, content) = (path(&mut random), text(&mut random));
            fixture.write(&path, content);
        }
        fixture.write("blob.bin", b"needle\x00binary");
        age(fixture.root());
        indexed.build_index(&fixture.workspace).expect("the index builds");
        // The index is used: a search for what no file holds reads no file.
        let searched = |runtime: &Runtime| {
            let outcome = fixture.call_as(runtime, "s-index", None, &[], "search_files", &json!({"query": "zzz_nowhere"}));
            outcome.result.expect("searched").structured.expect("structured")["files_searched"].as_u64().expect("a count")
        };
        assert_eq!(searched(&indexed), 0, "round {round}");
        assert!(searched(&scanning) > 0, "round {round}");
        for step in 0..6 {
            for _ in 0..random.below(8) {
                let outside = random.below(2) == 0;
                change(&mut random, &fixture, &indexed, outside);
            }
            for _ in 0..8 {
                let query = random.pick(&QUERIES);
                let mut args = json!({"query": query, "output_mode": random.pick(&["files", "content", "count"])});
                match random.below(6) {
                    0 => args["case_insensitive"] = json!(true),
                    1 => args["multiline"] = json!(true),
                    2 => args["path"] = json!(random.pick(&["src", "docs", "src/deep", "target"])),
                    3 => args["include"] = json!("*.rs"),
                    4 => args["respect_gitignore"] = json!(false),
                    _ => {}
                }
                assert_eq!(
                    answer(&indexed, &fixture, &args),
                    answer(&scanning, &fixture, &args),
                    "{freshness:?} round {round} step {step}: {args}"
                );
            }
        }
    }
}

#[test]
fn an_indexed_search_answers_as_a_full_scan_whatever_changed_since_watching() {
    indexed_answers_as_a_full_scan(IndexFreshness::Watch, 0x2545_F491_4F6C_DD1D);
}

#[test]
fn an_indexed_search_answers_as_a_full_scan_whatever_changed_since_walking() {
    indexed_answers_as_a_full_scan(IndexFreshness::Walk, 0x9E37_79B9_7F4A_7C15);
}

/// Changes that leave a file's size and modification time as they were, which comparing
/// stamps cannot see: while watching, the notification names the file, and the host's own
/// commits are taken in as they commit, so every search after them finds the new content.
#[test]
fn a_change_that_keeps_size_and_time_is_found_while_watching() {
    let state = tempfile::tempdir().expect("state");
    let runtime = builtin_runtime_builder()
        .policy("policy.toml", TEST_POLICY)
        .audit_dir(state.path())
        .index_freshness(IndexFreshness::Watch)
        .build()
        .expect("the runtime builds");
    let fixture = Fixture::new();
    for number in 0..30 {
        fixture.write(&format!("src/f{number:02}.rs"), format!("fn f{number}() {{}} // plain\n"));
    }
    age(fixture.root());
    runtime.build_index(&fixture.workspace).expect("the index builds");
    let files = |query: &str| answer(&runtime, &fixture, &json!({"query": query}))[0].clone();
    assert_eq!(files("zebra"), json!([]));
    // Outside the host: new content of the same length, the file's earlier modification time
    // put back.
    let rewrite_keeping_stamp = |path: &str, content: &str| {
        let path = fixture.root().join(path);
        let before = std::fs::metadata(&path).and_then(|metadata| metadata.modified()).expect("mtime");
        std::fs::write(&path, content).expect("write");
        set_modified(&path, before);
    };
    rewrite_keeping_stamp("src/f03.rs", "fn f3() {} // zebra\n");
    assert_eq!(files("zebra"), json!(["src/f03.rs"]));
    // Through the host, then again outside with the host's stamp put back.
    let _ = fixture.call_as(&runtime, "s-index", None, &[], "read_file", &json!({"path": "src/f04.rs"}));
    let outcome =
        fixture.call_as(&runtime, "s-index", None, &[], "write_file", &json!({"path": "src/f04.rs", "content": "fn f4() {} // zebra\n"}));
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    assert_eq!(files("zebra"), json!(["src/f03.rs", "src/f04.rs"]));
    rewrite_keeping_stamp("src/f04.rs", "fn f4() {} // plain\n");
    assert_eq!(files("zebra"), json!(["src/f03.rs"]));
    assert_eq!(files("plain").as_array().map(Vec::len), Some(29));
    // Answered from the index: of the 30 files, only the one holding the word was read (what
    // changed was read once by the host, and kept).
    let outcome = fixture.call_as(&runtime, "s-index", None, &[], "search_files", &json!({"query": "zebra"}));
    assert_eq!(outcome.result.expect("searched").structured.expect("structured")["files_searched"], json!(1));
}

#[test]
fn a_role_learns_nothing_from_the_index_about_files_it_may_not_read() {
    let state = tempfile::tempdir().expect("state");
    let policy = format!(
        "{TEST_POLICY}\n[[roles.impl.rules]]\nid = \"no-secrets\"\naccess = [\"read\", \"list\"]\npaths = [\"secrets\", \"secrets/**\", \"**/*.key\"]\neffect = \"deny\"\n"
    );
    let runtime = runtime_with_policy(&policy, Some(state.path()));
    let fixture = Fixture::new();
    fixture.write("secrets/key.txt", "hunter2 needle\n");
    fixture.write("src/id.key", "hunter2\n");
    fixture.write("src/main.rs", "fn main() {} // needle\n");
    age(fixture.root());
    runtime.build_index(&fixture.workspace).expect("the index builds");
    // The component asks the index directly: the denied files are not among the candidates.
    let probe = |pattern: &str| {
        let outcome =
            fixture.call_as(&runtime, "s-probe", None, &[], "fs_probe", &json!({"ops": [{"op": "candidates", "content": pattern}]}));
        outcome.result.expect("the probe runs").structured.expect("structured")[0]["value"].clone()
    };
    assert_eq!(probe("hunter2"), json!([]));
    assert_eq!(probe("needle"), json!(["src/main.rs"]));
    // A search with the index answers as without it, and reads nothing it may not.
    let outcome = fixture.call_as(&runtime, "s-probe", None, &[], "search_files", &json!({"query": "hunter2|needle"}));
    assert_eq!(outcome.result.expect("searched").text, "src/main.rs");
    assert!(outcome.denials.is_empty(), "{:?}", outcome.denials);
    // Without an index there is nothing to ask.
    runtime.drop_index(&fixture.workspace).expect("dropped");
    assert_eq!(probe("needle"), Value::Null);
}

#[test]
fn a_serving_host_builds_the_index_on_first_search_and_replaces_a_damaged_one() {
    let state = tempfile::tempdir().expect("state");
    let runtime = builtin_runtime_builder()
        .policy("policy.toml", TEST_POLICY)
        .audit_dir(state.path())
        .build_index_on_first_search(true)
        .build()
        .expect("the runtime builds");
    let fixture = Fixture::new();
    for number in 0..50 {
        fixture.write(&format!("src/f{number}.rs"), format!("fn f{number}() {{}}\n"));
    }
    fixture.write("src/f7.rs", "fn f7() { needle() }\n");
    age(fixture.root());
    let search = || {
        let outcome = fixture.call_as(&runtime, "s-first", None, &[], "search_files", &json!({"query": "needle"}));
        let structured = outcome.result.expect("searched").structured.expect("structured");
        assert_eq!(structured["files"], json!(["src/f7.rs"]));
        structured["files_searched"].as_u64().expect("a count")
    };
    // The first search scans (there is no index) and starts building one.
    assert_eq!(runtime.index_status(&fixture.workspace).expect("status"), IndexStatus::Absent);
    let niceness = rustix::process::getpriority_process(None).expect("this thread's nice value");
    assert_eq!(search(), 50);
    eventually("the index is built", Duration::from_secs(60), || {
        matches!(runtime.index_status(&fixture.workspace), Ok(IndexStatus::Present { .. }))
    });
    // The build yielded to the calls in its own thread only.
    assert_eq!(rustix::process::getpriority_process(None).expect("nice value"), niceness);
    assert_eq!(search(), 1, "the search after reads only the candidate");
    // A damaged index is never trusted: the search scans, and a new index replaces it.
    let index_dir = state.path().join("index");
    let file = std::fs::read_dir(&index_dir).expect("index dir").next().expect("an index file").expect("entry").path();
    let mut bytes = std::fs::read(&file).expect("read index");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&file, &bytes).expect("damage the index");
    assert!(matches!(runtime.index_status(&fixture.workspace), Ok(IndexStatus::Damaged(_))));
    assert_eq!(search(), 50);
    eventually("the damaged index is replaced", Duration::from_secs(60), || {
        matches!(runtime.index_status(&fixture.workspace), Ok(IndexStatus::Present { .. }))
    });
    assert_eq!(search(), 1);
    // Cut short, likewise.
    std::fs::write(&file, &bytes[..middle]).expect("truncate the index");
    assert_eq!(search(), 50);
    eventually("the truncated index is replaced", Duration::from_secs(60), || {
        matches!(runtime.index_status(&fixture.workspace), Ok(IndexStatus::Present { .. }))
    });
    assert_eq!(search(), 1);
}

#[test]
fn what_a_search_costs_does_not_depend_on_denied_files_content() {
    // Two workspaces alike but for what the denied files hold: in one, the word searched for.
    let policy = format!(
        "{TEST_POLICY}\n[[roles.impl.rules]]\nid = \"no-secrets\"\naccess = [\"read\", \"list\"]\npaths = [\"secrets\", \"secrets/**\", \"**/*.key\"]\neffect = \"deny\"\n"
    );
    let state = tempfile::tempdir().expect("state");
    let runtime = runtime_with_policy(&policy, Some(state.path()));
    let workspaces: Vec<Fixture> = ["needle", "nothing"]
        .into_iter()
        .map(|secret| {
            let fixture = Fixture::new();
            for number in 0..30 {
                fixture.write(&format!("src/f{number}.rs"), format!("fn f{number}() {{}}\n"));
                fixture.write(&format!("secrets/s{number}.txt"), format!("{secret} {number}\n"));
                fixture.write(&format!("src/k{number}.key"), format!("{secret}\n"));
            }
            fixture.write("src/f3.rs", "fn f3() { needle() }\n");
            age(fixture.root());
            runtime.build_index(&fixture.workspace).expect("the index builds");
            fixture
        })
        .collect();
    let cost = |fixture: &Fixture, args: &Value| {
        let outcome = fixture.call_as(&runtime, "s-cost", None, &[], "search_files", args);
        assert!(outcome.denials.is_empty(), "{:?}", outcome.denials);
        let structured = outcome.result.expect("searched").structured.expect("structured");
        (structured, outcome.host_calls)
    };
    for args in [json!({"query": "needle"}), json!({"query": "(?i)NEEDLE", "output_mode": "content"}), json!({"query": "need+le"})] {
        let [with_secret, without] = [&workspaces[0], &workspaces[1]].map(|fixture| cost(fixture, &args));
        assert_eq!(with_secret, without, "{args}: the answer and the host calls differ");
        assert_eq!(with_secret.0["files_searched"], json!(1), "{args}");
    }
}
