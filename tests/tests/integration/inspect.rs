//! `directory_tree`, `file_info` and `read_many` through the real host: what they show, what
//! they leave out, and how refusals surface.

use serde_json::{Value, json};
use toolcell_tests::{Fixture, governed_runtime};
use toolcell_types::ToolErrorKind;

fn names(children: &Value) -> Vec<String> {
    children.as_array().expect("children").iter().map(|child| child["name"].as_str().expect("name").to_owned()).collect()
}

#[test]
fn directory_tree_shows_the_structure_to_a_depth() {
    let fixture = Fixture::new();
    fixture.write("src/main.rs", "fn main() {}\n");
    fixture.write("src/deep/er/still.rs", "");
    fixture.write("README.md", "# x\n");
    fixture.write("target/debug/big.bin", "x");
    fixture.write(".git/HEAD", "ref: main\n");
    fixture.symlink("../outside", "out");
    let tree = fixture.ok("directory_tree", json!({})).structured.expect("structured");
    assert_eq!(names(&tree["children"]), [".git", "README.md", "out", "src", "target"]);
    let git = &tree["children"][0];
    assert_eq!(git["truncated"], true, "`.git` is not opened: {git}");
    let link = &tree["children"][2];
    assert_eq!(link["type"], "symlink");
    assert!(link.get("children").is_none(), "a symlink is never followed");
    let src = &tree["children"][3];
    assert_eq!(names(&src["children"]), ["deep", "main.rs"]);
    // Depth 3 by default: src/deep/er is shown, its contents are not.
    let er = &src["children"][0]["children"][0];
    assert_eq!(er["name"], "er");
    assert_eq!(er["truncated"], true);

    let tree = fixture.ok("directory_tree", json!({"path": "src", "depth": 1, "exclude": ["*.rs"]})).structured.expect("structured");
    assert_eq!(tree["path"], "src");
    assert_eq!(names(&tree["children"]), ["deep"]);
    let tree = fixture.ok("directory_tree", json!({"exclude": ["target", ".git", "src/deep"]})).structured.expect("structured");
    assert_eq!(names(&tree["children"]), ["README.md", "out", "src"]);
    assert_eq!(names(&tree["children"][2]["children"]), ["main.rs"]);
    fixture.assert_outside_untouched();

    let message = fixture.error("directory_tree", json!({"path": "README.md"}), ToolErrorKind::Unsupported);
    assert!(message.contains("`README.md` is a file"), "{message}");
    let message = fixture.error("directory_tree", json!({"exclude": ["a{b"]}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`a{b` is not a valid glob"), "{message}");
    fixture.error("directory_tree", json!({"path": "out"}), ToolErrorKind::Denied);
}

#[test]
fn directory_tree_is_capped_and_leaves_out_hidden_entries() {
    let fixture = Fixture::new();
    for index in 0..2100 {
        fixture.write(&format!("many/f{index:04}.txt"), "");
    }
    let output = fixture.ok("directory_tree", json!({"path": "many"}));
    let tree = output.structured.expect("structured");
    assert_eq!(tree["entries"], 2000);
    assert_eq!(tree["truncated"], true);
    assert!(output.text.contains("[cut at 2000 entries"), "{}", &output.text[output.text.len() - 200..]);

    let governed = Fixture::new();
    governed.write("src/lib.rs", "");
    governed.write("secrets/key.pem", "PRIVATE");
    let output = governed.allowed("impl", "directory_tree", json!({}));
    let tree = output.structured.expect("structured");
    // `secrets/**` may not be read by impl: the directory may be listed, its file is left out.
    assert_eq!(names(&tree["children"]), ["secrets", "src"]);
    assert_eq!(tree["children"][0]["children"], json!([]));
    assert!(!output.text.contains("key.pem"), "{}", output.text);
}

#[test]
fn file_info_describes_without_reading_whole() {
    use std::os::unix::fs::PermissionsExt as _;
    let fixture = Fixture::new();
    fixture.write("src/main.rs", "fn main() {\n}\nlast");
    std::fs::set_permissions(fixture.root().join("src/main.rs"), std::fs::Permissions::from_mode(0o640)).expect("chmod");
    fixture.write("blob.bin", b"\x00\x01\x02");
    fixture.symlink("src/main.rs", "inside-link");
    fixture.symlink("../outside/secret.txt", "outside-link");

    let output = fixture.ok("file_info", json!({"path": "src/main.rs"}));
    let info = output.structured.expect("structured");
    assert_eq!(info["type"], "file");
    assert_eq!(info["size"], 18);
    assert_eq!(info["lines"], 3);
    assert_eq!(info["mode"], "0640");
    assert!(info["modified"].as_str().is_some_and(|time| time.ends_with('Z') && time.len() == 20), "{info}");
    // The ungoverned runtime allows everything.
    assert_eq!(info["access"], json!({"read": "allow", "write": "allow", "delete": "allow"}));
    assert!(output.text.contains("lines: 3") && output.text.contains("mode: 0640"), "{}", output.text);

    let info = fixture.ok("file_info", json!({"path": "src"})).structured.expect("structured");
    assert_eq!((info["type"].as_str(), info["entries"].as_u64()), (Some("directory"), Some(1)));
    let info = fixture.ok("file_info", json!({"path": "blob.bin"})).structured.expect("structured");
    assert_eq!(info["binary"], true);
    assert!(info.get("lines").is_none());

    let info = fixture.ok("file_info", json!({"path": "inside-link"})).structured.expect("structured");
    assert_eq!((info["type"].as_str(), info["target_type"].as_str()), (Some("symlink"), Some("file")));
    assert_eq!(info["target_path"], "src/main.rs");
    // A link that leads out is described, never followed, and its target (a name outside the
    // workspace) is not shown: the host refuses to read it, and records that.
    let outcome = fixture.call("file_info", &json!({"path": "outside-link"}));
    let output = outcome.result.expect("describes the link");
    let info = output.structured.expect("structured");
    assert_eq!(info["target_type"], "outside the workspace");
    assert!(info.get("target").is_none(), "{info}");
    assert!(!output.text.contains("outside/") && !info.to_string().contains("outside/"), "{}", output.text);
    let rules: Vec<&str> = outcome.denials.iter().map(|denial| denial.event.rule.as_str()).collect();
    assert_eq!(rules, ["workspace-boundary"], "{:?}", outcome.denials);
    assert_eq!(outcome.denials[0].event.operation, "readlink-at");
    fixture.assert_outside_untouched();

    let message = fixture.error("file_info", json!({"path": "nope.txt"}), ToolErrorKind::NotFound);
    assert!(message.contains("`nope.txt` does not exist"), "{message}");
    fixture.error("file_info", json!({"path": "../outside/secret.txt"}), ToolErrorKind::Denied);
}

#[test]
fn file_info_reports_what_the_role_may_do() {
    let fixture = Fixture::new();
    fixture.write("docs/guide.md", "# Guide\n");
    fixture.write("src/lib.rs", "");
    fixture.write("secrets/key.pem", "PRIVATE");
    let access = |path: &str| fixture.allowed("impl", "file_info", json!({"path": path})).structured.expect("structured")["access"].clone();
    assert_eq!(access("docs/guide.md"), json!({"read": "allow", "write": "deny", "delete": "deny"}));
    assert_eq!(access("src/lib.rs"), json!({"read": "allow", "write": "allow", "delete": "allow"}));
    let (message, rules) = fixture.denied("impl", "file_info", json!({"path": "secrets/key.pem"}));
    assert!(rules.contains(&"secrets-hidden".to_owned()), "{message}");
    let outcome = fixture.call_on(governed_runtime(), "control", "file_info", &json!({"path": "src/lib.rs"}), None);
    let info = outcome.result.expect("control may look").structured.expect("structured");
    assert_eq!(info["access"]["write"], "deny");
}

#[test]
fn read_many_reads_each_file_and_reports_each_failure() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "alpha\nbeta\n");
    fixture.write("b.txt", "one\n");
    fixture.write("bin.dat", b"\x00\x00");
    let output = fixture.ok("read_many", json!({"paths": ["a.txt", "missing.txt", "b.txt", "bin.dat", "../outside/secret.txt"]}));
    assert!(output.text.starts_with("==> a.txt <==\n     1\talpha\n     2\tbeta"), "{}", output.text);
    assert!(output.text.contains("==> b.txt <==\n     1\tone"), "{}", output.text);
    assert!(output.text.contains("==> missing.txt <==\nError (not-found)"), "{}", output.text);
    assert!(output.text.contains("[3 of 5 file(s) could not be read"), "{}", output.text);
    let structured = output.structured.expect("structured");
    let files = structured["files"].as_array().expect("files");
    let kinds: Vec<Value> = files.iter().map(|file| file["error"]["kind"].clone()).collect();
    assert_eq!(kinds, [Value::Null, json!("not-found"), Value::Null, json!("unsupported"), json!("denied")]);
    assert_eq!(files[0]["total_lines"], 2);
    assert_eq!(structured["failed"], 3);

    let output = fixture.ok("read_many", json!({"paths": ["a.txt"], "limit": 1}));
    assert!(output.text.contains("to read on, call read_file with offset 2"), "{}", output.text);
    fixture.error("read_many", json!({"paths": []}), ToolErrorKind::InvalidArgs);
}

#[test]
fn read_many_keeps_the_readable_files_and_the_host_names_each_refusal() {
    let fixture = Fixture::new();
    fixture.write("src/lib.rs", "pub fn f() {}\n");
    fixture.write("secrets/key.pem", "PRIVATE KEY\n");
    let outcome = fixture.call_on(governed_runtime(), "impl", "read_many", &json!({"paths": ["src/lib.rs", "secrets/key.pem"]}), None);
    let output = outcome.result.expect("one refusal does not abort the rest");
    assert!(output.text.contains("pub fn f() {}"), "{}", output.text);
    assert!(!output.text.contains("PRIVATE KEY"), "{}", output.text);
    // The host states the refusal itself, with the rule, whatever the component reported.
    assert!(
        outcome.warnings.iter().any(|warning| warning.starts_with("Refused by the host:") && warning.contains("secrets-hidden")),
        "{:?}",
        outcome.warnings
    );
    assert!(output.text.contains("Refused by the host:"), "{}", output.text);
    assert!(outcome.denials.iter().any(|denial| denial.event.rule == "secrets-hidden"));
    fixture.assert_no_host_path(&output.text);

    // Many refusals: the first five are named, then how many more (all are audited).
    let mut paths = vec!["src/lib.rs".to_owned()];
    for number in 0..8 {
        fixture.write(&format!("secrets/k{number}.pem"), "PRIVATE KEY\n");
        paths.push(format!("secrets/k{number}.pem"));
    }
    let outcome = fixture.call_on(governed_runtime(), "impl", "read_many", &json!({"paths": paths}), None);
    let output = outcome.result.expect("kept");
    assert_eq!(outcome.denials.len(), 8, "{:?}", outcome.denials);
    assert_eq!(outcome.warnings.len(), 6, "{:?}", outcome.warnings);
    assert!(outcome.warnings[..5].iter().all(|warning| warning.contains("secrets-hidden")), "{:?}", outcome.warnings);
    assert_eq!(outcome.warnings[5], "Refused by the host: 3 more (each is on the audit trail)");
    assert!(output.text.contains("3 more (each is on the audit trail)"), "{}", output.text);
}
