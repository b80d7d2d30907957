use std::os::unix::fs::MetadataExt as _;
use std::os::unix::fs::PermissionsExt as _;

use serde_json::json;
use toolcell_tests::Fixture;
use toolcell_types::ToolErrorKind;

fn twenty_lines() -> String {
    (1..=20).map(|n| format!("line {n}\n")).collect()
}

#[test]
fn replaces_one_match_and_shows_numbered_context() {
    let fixture = Fixture::new();
    fixture.write("f.txt", twenty_lines());
    let output = fixture.ok("edit_file", json!({"path": "f.txt", "old_string": "line 10\n", "new_string": "ten\nTEN\n"}));
    assert!(fixture.read_text("f.txt").contains("line 9\nten\nTEN\nline 11\n"));
    let expected_snippet =
        "     7\tline 7\n     8\tline 8\n     9\tline 9\n    10\tten\n    11\tTEN\n    12\tline 11\n    13\tline 12\n    14\tline 13";
    assert!(output.text.ends_with(expected_snippet), "{}", output.text);
    let structured = output.structured.expect("structured");
    assert_eq!(structured["replacements"], 1);
    assert_eq!(structured["edits"], 1);
}

#[test]
fn no_match_and_ambiguous_match_change_nothing() {
    let fixture = Fixture::new();
    let content = "alpha\nbeta\nalpha\ngamma\nalpha\n";
    fixture.write("f.txt", content);
    let message = fixture.error("edit_file", json!({"path": "f.txt", "old_string": "delta", "new_string": "x"}), ToolErrorKind::Conflict);
    assert!(message.contains("was not found in `f.txt`"), "{message}");
    let message = fixture.error("edit_file", json!({"path": "f.txt", "old_string": "alpha", "new_string": "x"}), ToolErrorKind::Conflict);
    assert!(message.contains("matches 3 places") && message.contains("lines 1, 3, 5"), "{message}");
    assert!(message.contains("replace_all"), "{message}");
    assert_eq!(fixture.read_text("f.txt"), content);
}

#[test]
fn replace_all_and_deletion() {
    let fixture = Fixture::new();
    fixture.write("f.txt", "a-b-a-c-a\n");
    let output = fixture.ok("edit_file", json!({"path": "f.txt", "old_string": "a", "new_string": "Z", "replace_all": true}));
    assert_eq!(fixture.read_text("f.txt"), "Z-b-Z-c-Z\n");
    assert_eq!(output.structured.expect("structured")["replacements"], 3);
    fixture.ok("edit_file", json!({"path": "f.txt", "old_string": "-b", "new_string": ""}));
    assert_eq!(fixture.read_text("f.txt"), "Z-Z-c-Z\n");
}

#[test]
fn several_edits_apply_in_order_all_or_nothing() {
    let fixture = Fixture::new();
    fixture.write("f.rs", "fn one() {}\nfn two() {}\n");
    let output = fixture.ok(
        "edit_file",
        json!({"path": "f.rs", "edits": [
            {"old_string": "one", "new_string": "uno"},
            {"old_string": "fn uno", "new_string": "pub fn uno"},
            {"old_string": "two", "new_string": "dos"}
        ]}),
    );
    assert_eq!(fixture.read_text("f.rs"), "pub fn uno() {}\nfn dos() {}\n");
    assert_eq!(output.structured.expect("structured")["edits"], 3);

    let before = fixture.read_text("f.rs");
    let message = fixture.error(
        "edit_file",
        json!({"path": "f.rs", "edits": [
            {"old_string": "uno", "new_string": "eins"},
            {"old_string": "missing", "new_string": "x"}
        ]}),
        ToolErrorKind::Conflict,
    );
    assert!(message.contains("`edits[1].old_string`"), "{message}");
    assert_eq!(fixture.read_text("f.rs"), before, "a failed edit list must write nothing");
}

#[test]
fn keeps_crlf_bom_and_mode() {
    let fixture = Fixture::new();
    fixture.write("win.txt", "\u{feff}first\r\nsecond\r\nthird\r\n");
    let path = fixture.root().join("win.txt");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    fixture.ok("edit_file", json!({"path": "win.txt", "old_string": "first\nsecond", "new_string": "1st\n2nd\n2.5th"}));
    assert_eq!(fixture.read_text("win.txt"), "\u{feff}1st\r\n2nd\r\n2.5th\r\nthird\r\n");
    let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
}

#[test]
fn argument_errors() {
    let fixture = Fixture::new();
    fixture.write("f.txt", "text\n");
    let message =
        fixture.error("edit_file", json!({"path": "f.txt", "old_string": "text", "new_string": "text"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("identical"), "{message}");
    let message = fixture.error(
        "edit_file",
        json!({"path": "f.txt", "old_string": "text", "new_string": "x", "edits": [{"old_string": "a", "new_string": "b"}]}),
        ToolErrorKind::InvalidArgs,
    );
    assert!(message.contains("not both"), "{message}");
    let message = fixture.error("edit_file", json!({"path": "f.txt", "old_string": "text"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("new_string"), "{message}");
    let message = fixture.error("edit_file", json!({"path": "f.txt", "old_string": "", "new_string": "x"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`old_string`"), "{message}");
    fixture.error("edit_file", json!({"path": "f.txt"}), ToolErrorKind::InvalidArgs);
    assert_eq!(fixture.read_text("f.txt"), "text\n");
}

#[test]
fn file_errors() {
    let fixture = Fixture::new();
    fixture.write("bin.dat", b"ab\x00cd");
    // Mostly UTF-8, with a byte that is not: an edit would lose it.
    fixture.write("broken.txt", b"caf\xc3\xa9 cr\xc3\xa8me \xff\n");
    fixture.error("edit_file", json!({"path": "missing.txt", "old_string": "a", "new_string": "b"}), ToolErrorKind::NotFound);
    fixture.error("edit_file", json!({"path": "bin.dat", "old_string": "ab", "new_string": "x"}), ToolErrorKind::Unsupported);
    let message =
        fixture.error("edit_file", json!({"path": "broken.txt", "old_string": "caf", "new_string": "x"}), ToolErrorKind::Unsupported);
    assert!(message.contains("mostly utf-8 text") && message.contains("Nothing was changed"), "{message}");
    assert_eq!(fixture.read("broken.txt"), b"caf\xc3\xa9 cr\xc3\xa8me \xff\n");
}

#[test]
fn a_dry_run_returns_the_unified_diff_and_writes_nothing() {
    let fixture = Fixture::new();
    fixture.write("f.txt", twenty_lines());
    let before = std::fs::metadata(fixture.root().join("f.txt")).expect("metadata");
    let output = fixture.ok("edit_file", json!({"path": "f.txt", "old_string": "line 10\n", "new_string": "ten\n", "dry_run": true}));
    let diff = "--- a/f.txt\n+++ b/f.txt\n@@ -7,7 +7,7 @@\n line 7\n line 8\n line 9\n-line 10\n+ten\n line 11\n line 12\n line 13\n";
    assert_eq!(output.text, diff);
    let structured = output.structured.expect("structured");
    assert_eq!(structured["dry_run"], true);
    assert_eq!(structured["diff"], diff);
    assert_eq!(structured["replacements"], 1);
    // Nothing was written: same content, same inode, same modification time.
    assert_eq!(fixture.read_text("f.txt"), twenty_lines());
    let after = std::fs::metadata(fixture.root().join("f.txt")).expect("metadata");
    assert_eq!((before.ino(), before.modified().expect("mtime")), (after.ino(), after.modified().expect("mtime")));
    // A dry run that cannot apply fails as the edit would, and the real edit still works.
    let message = fixture.error(
        "edit_file",
        json!({"path": "f.txt", "old_string": "nine", "new_string": "x", "dry_run": true}),
        ToolErrorKind::Conflict,
    );
    assert!(message.contains("was not found"), "{message}");
    let written = fixture.ok("edit_file", json!({"path": "f.txt", "old_string": "line 10\n", "new_string": "ten\n"}));
    assert_eq!(written.structured.expect("structured")["dry_run"], false);
    assert!(fixture.read_text("f.txt").contains("line 9\nten\nline 11\n"));
}

#[test]
fn nulls_from_openai_strict_mode_count_as_left_out() {
    // A model in OpenAI's strict mode sends every property, `null` for those it leaves out.
    let fixture = Fixture::new();
    fixture.write("a.txt", "one\ntwo\n");
    let output = fixture.ok("read_file", json!({"path": "a.txt", "offset": null, "limit": null, "tail": null}));
    assert!(output.text.contains("     2\ttwo"), "{}", output.text);
    fixture.ok(
        "edit_file",
        json!({
            "path": "a.txt", "old_string": null, "new_string": null, "replace_all": null, "dry_run": null,
            "edits": [{"old_string": "two", "new_string": "2", "replace_all": null}]
        }),
    );
    assert_eq!(fixture.read_text("a.txt"), "one\n2\n");
    // A required argument sent as null is still an error naming it.
    let message = fixture.error("read_file", json!({"path": null}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`path`"), "{message}");
}

#[test]
fn new_text_ending_in_a_multi_byte_character_is_shown() {
    // The region's last byte is inside `é`: showing it once crashed the tool.
    let fixture = Fixture::new();
    fixture.write("menu.txt", "un café\ndeux\n");
    let output = fixture.ok("edit_file", json!({"path": "menu.txt", "old_string": "café", "new_string": "thé"}));
    assert!(output.text.contains("     1\tun thé"), "{}", output.text);
    assert_eq!(fixture.read_text("menu.txt"), "un thé\ndeux\n");
}
