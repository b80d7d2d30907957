//! The content index (`toolcell index build`) through the real host: a search with it answers
//! exactly as a full scan does, whatever changed since it was built, inside or outside the
//! host; and a role learns nothing from it about files it may not read.

use serde_json::{Value, json};
use toolcell_runtime::Runtime;
use toolcell_tests::{Fixture, TEST_POLICY, runtime_with_policy};

/// A small deterministic random source (xorshift).
struct Random(u64);

impl Random {
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % bound as u64) as usize
    }

    fn pick<'a>(&mut self, choices: &[&'a str]) -> &'a str {
        choices[self.below(choices.len())]
    }
}

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

#[test]
fn an_indexed_search_answers_as_a_full_scan_whatever_changed_since() {
    let state = tempfile::tempdir().expect("state");
    let indexed = runtime_with_policy(TEST_POLICY, Some(state.path()));
    let scanning = runtime_with_policy(TEST_POLICY, None);
    let mut random = Random(0x2545_F491_4F6C_DD1D);
    for round in 0..6 {
        let fixture = Fixture::new();
        fixture.write(".gitignore", "target/\n*.md\n!docs/keep.md\n");
        fixture.write("docs/keep.md", "needle kept\n");
        for _ in 0..40 {
            let (path, content) = (path(&mut random), text(&mut random));
            fixture.write(&path, content);
        }
        fixture.write("blob.bin", b"needle\x00binary");
        indexed.build_index(&fixture.workspace).expect("the index builds");
        // Changes after the index: half outside the host, half through it.
        for change in 0..10 {
            let (path, content) = (path(&mut random), text(&mut random));
            if change % 2 == 0 {
                fixture.write(&path, content);
            } else {
                let written = fixture.call_as(&indexed, "s-index", None, &[], "write_file", &json!({"path": path, "content": content}));
                assert!(
                    written.result.is_ok() || written.result.as_ref().is_err_and(|error| error.message.contains("read")),
                    "{:?}",
                    written.result
                );
            }
        }
        if let Some(victim) = std::fs::read_dir(fixture.root().join("src")).ok().and_then(|mut entries| entries.next()).and_then(Result::ok)
        {
            let _ = std::fs::remove_file(victim.path());
        }
        for _ in 0..25 {
            let query = random.pick(&[
                "needle",
                "alpha beta",
                "(?i)delta",
                "gam+a",
                "TODO|FIXME",
                "fn\\s+main",
                "é",
                "x",
                "^4",
                "[0-9]{2}",
                "needle\\nhay",
                "zzz",
            ]);
            let mut args = json!({"query": query, "output_mode": random.pick(&["files", "content", "count"])});
            match random.below(6) {
                0 => args["case_insensitive"] = json!(true),
                1 => args["multiline"] = json!(true),
                2 => args["path"] = json!(random.pick(&["src", "docs", "src/deep", "target"])),
                3 => args["include"] = json!("*.rs"),
                4 => args["respect_gitignore"] = json!(false),
                _ => {}
            }
            assert_eq!(answer(&indexed, &fixture, &args), answer(&scanning, &fixture, &args), "round {round}: {args}");
        }
        // The index was used: a search for what no file holds reads only the files changed
        // since it was built (their content is unknown to it).
        let searched = |runtime: &Runtime| {
            let outcome = fixture.call_as(runtime, "s-index", None, &[], "search_files", &json!({"query": "zzz_nowhere"}));
            outcome.result.expect("searched").structured.expect("structured")["files_searched"].as_u64().expect("a count")
        };
        assert!(searched(&indexed) <= 10, "round {round}: {}", searched(&indexed));
        assert!(searched(&scanning) > searched(&indexed), "round {round}");
    }
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
