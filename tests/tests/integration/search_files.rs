use serde_json::json;
use toolcell_tests::Fixture;
use toolcell_types::ToolErrorKind;

fn project() -> Fixture {
    let fixture = Fixture::new();
    fixture.write("src/main.rs", "fn main() {\n    let todo = 1;\n    // TODO: more\n    run();\n}\n");
    fixture.write("src/lib.rs", "pub fn run() {}\n// todo later\n");
    fixture.write("docs/notes.md", "TODO write docs\n");
    fixture.write("image.png", b"\x89PNG\x00\x00TODO");
    fixture.write(".git/config", "TODO in git\n");
    fixture
}

#[test]
fn files_mode_lists_matching_paths_in_order() {
    let fixture = project();
    let output = fixture.ok("search_files", json!({"query": "TODO"}));
    assert_eq!(output.text, "docs/notes.md\nsrc/main.rs");
    let structured = output.structured.expect("structured");
    assert_eq!(structured["files"], json!(["docs/notes.md", "src/main.rs"]));
    assert_eq!(structured["skipped_binary"], 1);
    assert_eq!(structured["truncated"], false);
}

#[test]
fn content_mode_with_context() {
    let fixture = project();
    let output = fixture.ok("search_files", json!({"query": "TODO", "output_mode": "content", "path": "src"}));
    assert_eq!(output.text, "src/main.rs:3:    // TODO: more");
    let output = fixture.ok("search_files", json!({"query": "TODO", "output_mode": "content", "path": "src/main.rs", "context": 1}));
    assert_eq!(output.text, "src/main.rs-2-    let todo = 1;\nsrc/main.rs:3:    // TODO: more\nsrc/main.rs-4-    run();");
    let structured = output.structured.expect("structured");
    assert_eq!(structured["matches"], json!([{"path": "src/main.rs", "line": 3, "text": "    // TODO: more"}]));
}

#[test]
fn separated_groups_and_count_mode() {
    let fixture = Fixture::new();
    let content: String = (1..=12).map(|n| if n == 2 || n == 10 { "hit\n".to_owned() } else { format!("{n}\n") }).collect();
    fixture.write("f.txt", content);
    let output = fixture.ok("search_files", json!({"query": "hit", "output_mode": "content", "context": 1}));
    assert_eq!(output.text, "f.txt-1-1\nf.txt:2:hit\nf.txt-3-3\n--\nf.txt-9-9\nf.txt:10:hit\nf.txt-11-11");
    let output = fixture.ok("search_files", json!({"query": "hit", "output_mode": "count"}));
    assert_eq!(output.text, "f.txt:2");
}

#[test]
fn case_insensitive_and_globs() {
    let fixture = project();
    let output = fixture.ok("search_files", json!({"query": "todo", "case_insensitive": true}));
    assert_eq!(output.text, "docs/notes.md\nsrc/lib.rs\nsrc/main.rs");
    let output = fixture.ok("search_files", json!({"query": "todo", "case_insensitive": true, "include": "*.rs"}));
    assert_eq!(output.text, "src/lib.rs\nsrc/main.rs");
    let output = fixture
        .ok("search_files", json!({"query": "todo", "case_insensitive": true, "include": ["*.rs", "*.md"], "exclude": "src/lib.rs"}));
    assert_eq!(output.text, "docs/notes.md\nsrc/main.rs");
}

#[test]
fn long_lines_are_clipped_and_results_capped() {
    let fixture = Fixture::new();
    fixture.write("long.txt", format!("needle {}\n", "x".repeat(5000)));
    for n in 0..5 {
        fixture.write(&format!("many/{n}.txt"), "needle\n");
    }
    let output = fixture.ok("search_files", json!({"query": "needle", "output_mode": "content", "path": "long.txt"}));
    assert!(output.text.contains("[line truncated: 4507 more characters]"), "{}", output.text);
    let output = fixture.ok("search_files", json!({"query": "needle", "max_results": 3}));
    assert!(output.text.contains("[files 1-3 shown; more follow"), "{}", output.text);
    assert_eq!(output.structured.expect("structured")["truncated"], true);
}

#[test]
fn errors_and_empty_results() {
    let fixture = project();
    let message = fixture.error("search_files", json!({"query": "fn("}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("not a valid regular expression"), "{message}");
    let message = fixture.error("search_files", json!({"query": "x", "output_mode": "lines"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`output_mode`"), "{message}");
    let message = fixture.error("search_files", json!({"query": "x", "include": "a[b"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`include`"), "{message}");
    fixture.error("search_files", json!({"query": "x", "path": "nope"}), ToolErrorKind::NotFound);
    let output = fixture.ok("search_files", json!({"query": "zebra"}));
    assert!(output.text.starts_with("No matches for `zebra`"), "{}", output.text);
}

#[test]
fn every_mode_matches_lines_one_at_a_time_over_bytes() {
    let fixture = Fixture::new();
    fixture.write("anchored.rs", "// header\nfn main() {}\n");
    fixture.write("crlf.txt", "first line\r\nends here\r\n");
    fixture.write("latin1.txt", b"caf\xe9 au lait\nplain needle\n");
    fixture.write("split.txt", "alpha\nbeta\n");
    fixture.write("start.txt", "start of file\nstart again\n");
    let files = |query: &str| fixture.ok("search_files", json!({"query": query})).text;
    let count = |query: &str| fixture.ok("search_files", json!({"query": query, "output_mode": "count"})).text;
    // `^` and `$` are a line's ends, in every mode, on LF and CRLF lines alike.
    assert_eq!(files("^fn main"), "anchored.rs");
    assert_eq!(count("^fn main"), "anchored.rs:1");
    assert_eq!(files("here$"), "crlf.txt");
    assert_eq!(count("(line|here)$"), "crlf.txt:2");
    // A match never spans lines, so no mode lists a file its lines do not match.
    assert!(files("alpha\\s+beta").starts_with("No matches"));
    assert!(count("alpha\\nbeta").starts_with("No matches"));
    // `\A` is each line's start too (the whole-file pass is not used for it).
    assert_eq!(count("\\Astart"), "start.txt:2");
    assert_eq!(files("\\Aends"), "crlf.txt");
    // Bytes that are not UTF-8 match nothing, the rest of the file is searched, and printed
    // lines are decoded in the file's encoding (here windows-1252), as read_file shows them.
    assert_eq!(files("needle"), "latin1.txt");
    assert!(count("caf. au").starts_with("No matches"));
    let output = fixture.ok("search_files", json!({"query": "au lait", "output_mode": "content"}));
    assert_eq!(output.text, "latin1.txt:1:café au lait");
}

#[test]
fn multiline_matches_span_lines_when_asked() {
    let fixture = Fixture::new();
    fixture.write("src/main.rs", "use std::io;\n\nfn main() {\n    println!(\"hello\");\n}\n");
    fixture.write("src/other.rs", "fn main() {}\n// hello\n");
    fixture.write("crlf.txt", "begin\r\nmiddle\r\nend\r\n");
    // Line by line the pattern cannot match; in multiline mode it can.
    let query = "(?s)fn main\\(\\) \\{\\s+println.*hello";
    assert!(fixture.ok("search_files", json!({"query": query})).text.starts_with("No matches"));
    let output = fixture.ok("search_files", json!({"query": query, "multiline": true}));
    assert_eq!(output.text, "src/main.rs");
    let output = fixture.ok("search_files", json!({"query": query, "multiline": true, "output_mode": "content", "context": 1}));
    assert_eq!(output.text, "src/main.rs-2-\nsrc/main.rs:3:fn main() {\nsrc/main.rs:4:    println!(\"hello\");\nsrc/main.rs-5-}");
    let structured = output.structured.expect("structured");
    assert_eq!(
        structured["matches"],
        json!([{"path": "src/main.rs", "line": 3, "end_line": 4, "text": "fn main() {\n    println!(\"hello\");"}])
    );
    // `.` does not cross a newline without `(?s)`; `\n` does.
    assert!(fixture.ok("search_files", json!({"query": "main.*hello", "multiline": true})).text.starts_with("No matches"));
    assert_eq!(fixture.ok("search_files", json!({"query": "begin\\r?\\nmiddle", "multiline": true})).text, "crlf.txt");
    // Count counts matches.
    assert_eq!(
        fixture.ok("search_files", json!({"query": "fn main\\(\\)", "multiline": true, "output_mode": "count"})).text,
        "src/main.rs:1\nsrc/other.rs:1"
    );
}

#[test]
fn before_and_after_context_are_separate() {
    let fixture = Fixture::new();
    let content: String = (1..=12).map(|n| if n == 5 { "hit\n".to_owned() } else { format!("{n}\n") }).collect();
    fixture.write("f.txt", content);
    let content_with = |extra: serde_json::Value| {
        let mut args = json!({"query": "hit", "output_mode": "content"});
        for (key, value) in extra.as_object().expect("object") {
            args[key] = value.clone();
        }
        fixture.ok("search_files", args).text
    };
    assert_eq!(content_with(json!({"before": 2})), "f.txt-3-3\nf.txt-4-4\nf.txt:5:hit");
    assert_eq!(content_with(json!({"after": 1})), "f.txt:5:hit\nf.txt-6-6");
    // `before` and `after` override `context`.
    assert_eq!(content_with(json!({"context": 3, "before": 0, "after": 1})), "f.txt:5:hit\nf.txt-6-6");
    assert_eq!(content_with(json!({"context": 1})), "f.txt-4-4\nf.txt:5:hit\nf.txt-6-6");
}

#[test]
fn results_page_with_offset() {
    let fixture = Fixture::new();
    for n in 0..7 {
        fixture.write(&format!("many/{n}.txt"), "needle\nneedle\n");
    }
    let page = |offset: u64| fixture.ok("search_files", json!({"query": "needle", "max_results": 3, "offset": offset}));
    let first = page(0);
    assert!(first.text.starts_with("many/0.txt\nmany/1.txt\nmany/2.txt\n["), "{}", first.text);
    assert!(first.text.contains("call search_files again with `offset` 3"), "{}", first.text);
    let structured = first.structured.expect("structured");
    assert_eq!((structured["truncated"].clone(), structured["next_offset"].clone()), (json!(true), json!(3)));
    let second = page(3);
    assert!(second.text.starts_with("many/3.txt\nmany/4.txt\nmany/5.txt\n["), "{}", second.text);
    let last = page(6);
    assert_eq!(last.text, "many/6.txt");
    let structured = last.structured.expect("structured");
    assert_eq!(structured["truncated"], false);
    assert!(structured.get("next_offset").is_none());
    let past = page(9);
    assert!(past.text.contains("there are 7 files in all, fewer than `offset` 9 skips"), "{}", past.text);
    // Content pages count matching lines, across files.
    let output = fixture.ok("search_files", json!({"query": "needle", "output_mode": "content", "max_results": 2, "offset": 3}));
    assert!(output.text.starts_with("many/1.txt:2:needle\nmany/2.txt:1:needle\n[matches 4-5 shown"), "{}", output.text);
}

#[test]
fn file_types_come_from_the_maintained_table() {
    let fixture = project();
    fixture.write("web/app.ts", "// TODO ts\n");
    fixture.write("web/app.tsx", "// TODO tsx\n");
    fixture.write("build.py", "# TODO\n");
    assert_eq!(fixture.ok("search_files", json!({"query": "TODO", "type": "rust"})).text, "src/main.rs");
    assert_eq!(fixture.ok("search_files", json!({"query": "TODO", "type": "ts"})).text, "web/app.ts\nweb/app.tsx");
    assert_eq!(fixture.ok("search_files", json!({"query": "TODO", "type": ["py", "md"]})).text, "build.py\ndocs/notes.md");
    let message = fixture.error("search_files", json!({"query": "TODO", "type": "rustlang"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`type` `rustlang` is not a known file type"), "{message}");
}

#[test]
fn gitignored_files_are_skipped_unless_asked() {
    let fixture = Fixture::new();
    fixture.write(".gitignore", "target/\n*.log\n!keep.log\n");
    fixture.write("src/lib.rs", "needle\n");
    fixture.write("target/debug/out.rs", "needle\n");
    fixture.write("run.log", "needle\n");
    fixture.write("keep.log", "needle\n");
    fixture.write("src/gen/.gitignore", "*.rs\n");
    fixture.write("src/gen/made.rs", "needle\n");
    fixture.write("src/gen/.ignore", "!kept.rs\n");
    fixture.write("src/gen/kept.rs", "needle\n");
    fixture.write("vendor/dep.rs", "needle\n");
    fixture.write(".git/info/exclude", "vendor\n");
    fixture.write("logs/today.log", "needle\n");
    fixture.write("logs/today.txt", "needle\n");
    let search = |args: serde_json::Value| fixture.ok("search_files", args).text;
    assert_eq!(search(json!({"query": "needle"})), "keep.log\nlogs/today.txt\nsrc/gen/kept.rs\nsrc/lib.rs");
    // A search below the root still obeys the root's rules; a directory named outright is
    // searched, as ripgrep searches it.
    assert_eq!(search(json!({"query": "needle", "path": "logs"})), "logs/today.txt");
    assert_eq!(search(json!({"query": "needle", "path": "target"})), "target/debug/out.rs");
    // A file named outright is searched.
    assert_eq!(search(json!({"query": "needle", "path": "run.log"})), "run.log");
    assert_eq!(
        search(json!({"query": "needle", "respect_gitignore": false})),
        "keep.log\nlogs/today.log\nlogs/today.txt\nrun.log\nsrc/gen/kept.rs\nsrc/gen/made.rs\nsrc/lib.rs\ntarget/debug/out.rs\nvendor/dep.rs"
    );
}

#[test]
fn a_role_that_may_not_see_git_searches_without_refusals() {
    // `.git/info/exclude` is read only where the role sees `.git`: a policy hiding it must not
    // turn every search into a refused, audited read.
    let policy = format!(
        "{}\n[[roles.impl.rules]]\nid = \"no-git\"\naccess = [\"read\", \"list\"]\npaths = [\".git\", \".git/**\"]\neffect = \"deny\"\n",
        toolcell_tests::TEST_POLICY
    );
    let runtime = toolcell_tests::runtime_with_policy(&policy, None);
    let fixture = Fixture::new();
    fixture.write(".git/info/exclude", "vendor\n");
    fixture.write("src/a.txt", "needle\n");
    let outcome = fixture.call_as(&runtime, "s-no-git", None, &[], "search_files", &json!({"query": "needle"}));
    assert_eq!(outcome.result.expect("searched").text, "src/a.txt");
    assert!(outcome.denials.is_empty(), "{:?}", outcome.denials);
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
}
