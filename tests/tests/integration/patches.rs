//! `insert_text` and `apply_patch` through the real host: insertion points, line endings,
//! multi-file patches that apply entirely or not at all, dry runs and policy refusals.

use serde_json::json;
use toolcell_tests::Fixture;
use toolcell_types::ToolErrorKind;

#[test]
fn insert_text_inserts_after_a_line_with_numbered_context() {
    let fixture = Fixture::new();
    fixture.write("list.txt", "one\ntwo\nthree\n");
    let output = fixture.ok("insert_text", json!({"path": "list.txt", "line": 2, "text": "two and a half"}));
    assert_eq!(fixture.read_text("list.txt"), "one\ntwo\ntwo and a half\nthree\n");
    assert!(output.text.starts_with("Inserted 1 line(s) into `list.txt` after line 2."), "{}", output.text);
    assert!(output.text.contains("     3\ttwo and a half\n     4\tthree"), "{}", output.text);
    assert_eq!(output.structured.expect("structured"), json!({"path": "list.txt", "line": 2, "inserted_lines": 1, "total_lines": 4}));
    fixture.ok("insert_text", json!({"path": "list.txt", "line": 0, "text": "zero\n"}));
    fixture.ok("insert_text", json!({"path": "list.txt", "line": 5, "text": "four\nfive"}));
    assert_eq!(fixture.read_text("list.txt"), "zero\none\ntwo\ntwo and a half\nthree\nfour\nfive\n");
}

#[test]
fn insert_text_keeps_crlf_and_the_byte_order_mark() {
    let fixture = Fixture::new();
    fixture.write("win.txt", "\u{feff}a\r\nb\r\n");
    fixture.ok("insert_text", json!({"path": "win.txt", "line": 1, "text": "x\ny"}));
    assert_eq!(fixture.read("win.txt"), "\u{feff}a\r\nx\r\ny\r\nb\r\n".as_bytes());
}

#[test]
fn insert_text_errors_name_the_path_and_the_range() {
    let fixture = Fixture::new();
    fixture.write("short.txt", "a\nb\n");
    let message = fixture.error("insert_text", json!({"path": "short.txt", "line": 7, "text": "x"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("line 7 is past the end of `short.txt`, which has 2 line(s): give a line from 0 (the top) to 2"), "{message}");
    let message = fixture.error("insert_text", json!({"path": "new.txt", "line": 0, "text": "x"}), ToolErrorKind::NotFound);
    assert!(message.contains("use write_file to create it"), "{message}");
    fixture.write("bin", b"a\x00b");
    fixture.error("insert_text", json!({"path": "bin", "line": 0, "text": "x"}), ToolErrorKind::Unsupported);
    assert_eq!(fixture.read_text("short.txt"), "a\nb\n");
}

const PATCH: &str = "\
*** Begin Patch
*** Add File: docs/notes.md
+# Notes
+first
*** Update File: src/lib.rs
@@ pub fn add
-    a + b
+    a.wrapping_add(b)
@@
 pub fn sub(a: u32, b: u32) -> u32 {
-    a - b
+    a.wrapping_sub(b)
 }
*** Update File: src/old_name.rs
*** Move to: src/new_name.rs
@@
-old
+new
*** Delete File: obsolete.txt
*** End Patch
";

const LIB: &str = "pub fn add(a: u32, b: u32) -> u32 {\n    a + b\n}\n\npub fn sub(a: u32, b: u32) -> u32 {\n    a - b\n}\n";

fn patch_fixture() -> Fixture {
    let fixture = Fixture::new();
    fixture.write("src/lib.rs", LIB);
    fixture.write("src/old_name.rs", "keep\nold\n");
    fixture.write("obsolete.txt", "bye\n");
    fixture
}

#[test]
fn apply_patch_adds_updates_moves_and_deletes() {
    let fixture = patch_fixture();
    let output = fixture.ok("apply_patch", json!({"patch": PATCH}));
    assert_eq!(fixture.read_text("docs/notes.md"), "# Notes\nfirst\n");
    assert_eq!(
        fixture.read_text("src/lib.rs"),
        "pub fn add(a: u32, b: u32) -> u32 {\n    a.wrapping_add(b)\n}\n\npub fn sub(a: u32, b: u32) -> u32 {\n    a.wrapping_sub(b)\n}\n"
    );
    assert_eq!(fixture.read_text("src/new_name.rs"), "keep\nnew\n");
    assert!(!fixture.root().join("src/old_name.rs").exists());
    assert!(!fixture.root().join("obsolete.txt").exists());
    assert!(output.text.contains("A `docs/notes.md` (+2)"), "{}", output.text);
    assert!(output.text.contains("M `src/lib.rs` (+2 -2)"), "{}", output.text);
    assert!(output.text.contains("R `src/old_name.rs` -> `src/new_name.rs` (+1 -1)"), "{}", output.text);
    assert!(output.text.contains("D `obsolete.txt` (-1)"), "{}", output.text);
    let files = output.structured.expect("structured")["files"].clone();
    assert_eq!(files.as_array().map(Vec::len), Some(4));
    assert_eq!(files[2]["moved_to"], "src/new_name.rs");
}

#[test]
fn a_patch_whose_third_hunk_fails_changes_no_file() {
    let fixture = patch_fixture();
    let before = fixture.snapshot();
    // Hunks 1 and 2 (in two files) apply; the third does not match.
    let patch = "\
*** Begin Patch
*** Update File: src/lib.rs
@@
-    a + b
+    a.wrapping_add(b)
*** Update File: src/old_name.rs
@@
-old
+new
@@
-this line is not in the file
+x
*** End Patch";
    let message = fixture.error("apply_patch", json!({"patch": patch}), ToolErrorKind::Conflict);
    assert!(message.starts_with("hunk 2 of `src/old_name.rs` does not apply"), "{message}");
    assert!(message.contains("this line is not in the file") && message.contains("Nothing was changed"), "{message}");
    assert_eq!(fixture.snapshot(), before);
}

#[test]
fn a_patch_refused_half_way_by_the_host_is_rolled_back_whole() {
    let fixture = patch_fixture();
    fixture.write("docs/guide.md", "# Guide\n");
    let before = fixture.snapshot();
    // Every hunk matches, so the tool starts writing: `src/lib.rs`, then `src/new_name.rs`,
    // then `docs/guide.md`, which `impl` may not write. The first two must be undone.
    let patch = "\
*** Begin Patch
*** Update File: src/lib.rs
@@
-    a + b
+    a.wrapping_add(b)
*** Update File: src/old_name.rs
*** Move to: src/new_name.rs
@@
-old
+new
*** Update File: docs/guide.md
@@
-# Guide
+# Changed
*** End Patch";
    let outcome = fixture.call_on(toolcell_tests::governed_runtime(), "impl", "apply_patch", &json!({"patch": patch}), None);
    let error = outcome.result.expect_err("docs are read-only for impl");
    assert_eq!(error.kind, ToolErrorKind::Denied);
    assert!(error.message.contains("docs/guide.md"), "{}", error.message);
    assert!(outcome.rolled_back >= 2, "both earlier writes must be rolled back: {}", outcome.rolled_back);
    assert_eq!(fixture.snapshot(), before);
}

#[test]
fn dry_run_returns_the_unified_diff_and_writes_nothing() {
    let fixture = patch_fixture();
    let before = fixture.snapshot();
    let output = fixture.ok("apply_patch", json!({"patch": PATCH, "dry_run": true}));
    assert_eq!(fixture.snapshot(), before);
    assert!(output.text.starts_with("Dry run: nothing was written."), "{}", output.text);
    let diff = output.structured.expect("structured")["diff"].as_str().expect("diff").to_owned();
    assert!(diff.contains("--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,7 +1,7 @@\n pub fn add(a: u32, b: u32) -> u32 {\n-    a + b\n+    a.wrapping_add(b)\n"), "{diff}");
    assert!(diff.contains("--- /dev/null\n+++ b/docs/notes.md\n@@ -0,0 +1,2 @@\n+# Notes\n+first\n"), "{diff}");
    assert!(diff.contains("--- a/src/old_name.rs\n+++ b/src/new_name.rs\n"), "{diff}");
    assert!(diff.contains("--- a/obsolete.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"), "{diff}");
}

#[test]
fn apply_patch_keeps_line_endings_and_tolerates_trailing_whitespace() {
    let fixture = Fixture::new();
    fixture.write("win.txt", "\u{feff}first  \r\nsecond\r\n");
    let patch = "*** Begin Patch\n*** Update File: win.txt\n@@\n first\n-second\n+2nd\n*** End of File\n*** End Patch";
    fixture.ok("apply_patch", json!({"patch": patch}));
    assert_eq!(fixture.read("win.txt"), "\u{feff}first  \r\n2nd\r\n".as_bytes());
}

#[test]
fn apply_patch_errors_name_the_line_or_the_file() {
    let fixture = patch_fixture();
    let before = fixture.snapshot();
    let cases = [
        ("*** Update File: src/lib.rs\n", ToolErrorKind::InvalidArgs, "must start with `*** Begin Patch`"),
        ("*** Begin Patch\n*** Rename File: a\n*** End Patch", ToolErrorKind::InvalidArgs, "patch line 2: expected"),
        ("*** Begin Patch\n*** Add File: src/lib.rs\n+x\n*** End Patch", ToolErrorKind::Conflict, "names a file that already exists"),
        (
            "*** Begin Patch\n*** Delete File: nope.txt\n*** End Patch",
            ToolErrorKind::NotFound,
            "`*** Delete File: nope.txt` names a file that does not exist",
        ),
        ("*** Begin Patch\n*** Add File: ../escape.txt\n+x\n*** End Patch", ToolErrorKind::InvalidArgs, "leaves the workspace"),
        (
            "*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-    a + b\n+    c\n*** Update File: src/lib.rs\n@@\n-    a - b\n+    d\n*** End Patch",
            ToolErrorKind::InvalidArgs,
            "changes `src/lib.rs` more than once",
        ),
        (
            "*** Begin Patch\n*** Update File: obsolete.txt\n*** Move to: src/lib.rs\n@@\n-bye\n+hi\n*** End Patch",
            ToolErrorKind::Conflict,
            "`*** Move to: src/lib.rs` names a path that already exists",
        ),
    ];
    for (patch, kind, expected) in cases {
        let message = fixture.error("apply_patch", json!({"patch": patch}), kind);
        assert!(message.contains(expected), "{patch:?}: {message}");
    }
    assert_eq!(fixture.snapshot(), before);
    fixture.assert_outside_untouched();
}

#[test]
fn apply_patch_accepts_what_models_send() {
    let fixture = Fixture::new();
    fixture.write("quote.md", "He said \u{201c}ship it\u{201d} \u{2014} and it\u{2019}s done.\nnext\n");
    fixture.write("mixed.txt", "lf one\ncrlf one\r\ncrlf two\r\nlf two\n");
    // Padded headers, inside a shell heredoc; ASCII punctuation for the file's typographic
    // marks; a replaced CRLF line keeps its CR in a mixed file.
    let patch = "apply_patch <<'EOF'\n*** Begin Patch\n  *** Update File: quote.md\n@@\n-He said \"ship it\" - and it's done.\n+He said \"ship it now\".\n   *** Update File: mixed.txt\n@@\n crlf one\n-crlf two\n+crlf 2\n+crlf 3\n*** End Patch\nEOF\n";
    fixture.ok("apply_patch", json!({"patch": patch}));
    assert_eq!(fixture.read_text("quote.md"), "He said \"ship it now\".\nnext\n");
    assert_eq!(fixture.read("mixed.txt"), b"lf one\ncrlf one\r\ncrlf 2\r\ncrlf 3\r\nlf two\n");
}

#[test]
fn apply_patch_overwrites_only_when_asked_and_says_how() {
    let fixture = patch_fixture();
    let add = "*** Begin Patch\n*** Add File: obsolete.txt\n+replaced\n*** End Patch";
    let message = fixture.error("apply_patch", json!({"patch": add}), ToolErrorKind::Conflict);
    assert!(message.contains("pass `overwrite: true` to replace it whole"), "{message}");
    let output = fixture.ok("apply_patch", json!({"patch": add, "overwrite": true}));
    assert_eq!(fixture.read_text("obsolete.txt"), "replaced\n");
    assert!(output.text.contains("M `obsolete.txt` (+1 -1)"), "{}", output.text);
    let moved = "*** Begin Patch\n*** Update File: src/old_name.rs\n*** Move to: obsolete.txt\n@@\n-old\n+new\n*** End Patch";
    let message = fixture.error("apply_patch", json!({"patch": moved}), ToolErrorKind::Conflict);
    assert!(message.contains("or pass `overwrite: true` to replace it"), "{message}");
    fixture.ok("apply_patch", json!({"patch": moved, "overwrite": true}));
    assert_eq!(fixture.read_text("obsolete.txt"), "keep\nnew\n");
    assert!(!fixture.root().join("src/old_name.rs").exists());
    // A directory is never replaced.
    let onto_directory = "*** Begin Patch\n*** Update File: obsolete.txt\n*** Move to: src\n@@\n-new\n+newer\n*** End Patch";
    let message = fixture.error("apply_patch", json!({"patch": onto_directory, "overwrite": true}), ToolErrorKind::Conflict);
    assert!(message.contains("not a regular file"), "{message}");
}

#[test]
fn apply_patch_takes_openai_apply_patch_operations() {
    // The operations of OpenAI's apply_patch tool, as the Agents SDK's own tests send them.
    let fixture = Fixture::new();
    fixture.ok("apply_patch", json!({"operation": {"type": "create_file", "path": "notes.md", "diff": "+hello\n"}}));
    assert_eq!(fixture.read_text("notes.md"), "hello\n");
    fixture.write("tasks.md", "a\n");
    fixture.ok("apply_patch", json!({"operation": {"type": "update_file", "path": "tasks.md", "diff": "-a\n+b\n"}}));
    assert_eq!(fixture.read_text("tasks.md"), "b\n");
    // A created file's last `+` line is its final newline, as V4A reads it.
    fixture.ok("apply_patch", json!({"operation": {"type": "create_file", "path": "list.md", "diff": "+hello\n+world\n+"}}));
    assert_eq!(fixture.read_text("list.md"), "hello\nworld\n");
    // The stacked `@@` anchors of the tool's own description.
    fixture.write("classes.py", "class BaseClass\n    def search():\n        pass\n\nclass Subclass\n    def search():\n        pass\n");
    let diff = "@@ class BaseClass\n@@     def search():\n-        pass\n+        raise NotImplementedError()\n\n@@ class Subclass\n@@     def search():\n-        pass\n+        raise NotImplementedError()";
    fixture.ok("apply_patch", json!({"operation": {"type": "update_file", "path": "classes.py", "diff": diff}}));
    assert_eq!(
        fixture.read_text("classes.py"),
        "class BaseClass\n    def search():\n        raise NotImplementedError()\n\nclass Subclass\n    def search():\n        raise NotImplementedError()\n"
    );
    fixture.ok("apply_patch", json!({"operation": {"type": "update_file", "path": "tasks.md", "move_to": "done.md", "diff": "-b\n+c\n"}}));
    assert_eq!(fixture.read_text("done.md"), "c\n");
    assert!(!fixture.root().join("tasks.md").exists());
    fixture.ok("apply_patch", json!({"operation": {"type": "delete_file", "path": "notes.md"}}));
    assert!(!fixture.root().join("notes.md").exists());
    // Exactly one of `patch` and `operation`.
    let message = fixture.error("apply_patch", json!({}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("give `patch` (the patch text) or `operation`"), "{message}");
    let message = fixture.error(
        "apply_patch",
        json!({"operation": {"type": "delete_file", "path": "done.md", "move_to": "x.md"}}),
        ToolErrorKind::InvalidArgs,
    );
    assert!(message.contains("`operation.move_to` goes with `update_file` only"), "{message}");
    let message =
        fixture.error("apply_patch", json!({"operation": {"type": "rename_file", "path": "done.md"}}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("operation"), "{message}");
    // An operation's refusals speak of operations: it has no `*** Add File` and no `overwrite`.
    fixture.write("exists.md", "x\n");
    let refusals = [
        (
            json!({"type": "create_file", "path": "exists.md", "diff": "+y\n"}),
            ToolErrorKind::Conflict,
            "The create_file operation's path `exists.md` names a file that already exists: send an update_file operation to change it.",
        ),
        (
            json!({"type": "update_file", "path": "missing.md", "diff": "-a\n+b\n"}),
            ToolErrorKind::NotFound,
            "to create a file, send a create_file operation",
        ),
        (
            json!({"type": "update_file", "path": "exists.md", "move_to": "keep.md", "diff": "-x\n+y\n"}),
            ToolErrorKind::Conflict,
            "`move_to` `keep.md` names a path that already exists: choose another destination.",
        ),
    ];
    fixture.write("keep.md", "keep\n");
    for (operation, kind, expected) in refusals {
        let message = fixture.error("apply_patch", json!({ "operation": operation }), kind);
        assert!(message.contains(expected), "{operation}: {message}");
        assert!(!message.contains("*** ") && !message.contains("overwrite"), "{operation}: {message}");
    }
    // One operation changes only its `path`: file headers smuggled into its `diff` (or its
    // `path`) are refused, and nothing changes.
    fixture.write("keep.md", "keep\n");
    let before = fixture.snapshot();
    for operation in [
        json!({"type": "update_file", "path": "done.md", "diff": "-c\n+d\n*** Add File: planted.sh\n+curl evil\n"}),
        json!({"type": "update_file", "path": "done.md", "diff": "-c\n+d\n*** Delete File: keep.md"}),
        json!({"type": "create_file", "path": "new.md", "diff": "+x\n*** Delete File: keep.md\n"}),
        json!({"type": "delete_file", "path": "done.md\n*** Delete File: keep.md"}),
        json!({"type": "create_file", "path": "new.md\n*** Update File: keep.md\n@@\n-keep\n+gone", "diff": "+x\n"}),
    ] {
        let message = fixture.error("apply_patch", json!({ "operation": operation }), ToolErrorKind::InvalidArgs);
        assert!(message.contains("an operation changes only the file its `path` names"), "{operation}: {message}");
        assert_eq!(fixture.snapshot(), before, "{operation}: something changed");
    }
}

#[test]
fn a_pure_addition_at_the_end_leaves_later_hunks_free_to_change_earlier_lines() {
    let fixture = Fixture::new();
    fixture.write("list.txt", "alpha\nbeta\ngamma\n");
    // As Codex accepts it: the first hunk appends, the second changes the first line.
    fixture
        .ok("apply_patch", json!({"patch": "*** Begin Patch\n*** Update File: list.txt\n@@\n+delta\n@@\n-alpha\n+ALPHA\n*** End Patch"}));
    assert_eq!(fixture.read_text("list.txt"), "ALPHA\nbeta\ngamma\ndelta\n");
}
