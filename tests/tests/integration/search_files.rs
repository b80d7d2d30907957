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
    assert!(output.text.contains("[truncated at 3 files"), "{}", output.text);
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
    // lines are decoded with U+FFFD in their place.
    assert_eq!(files("needle"), "latin1.txt");
    assert!(count("caf. au").starts_with("No matches"));
    let output = fixture.ok("search_files", json!({"query": "au lait", "output_mode": "content"}));
    assert_eq!(output.text, "latin1.txt:1:caf\u{fffd} au lait");
}
