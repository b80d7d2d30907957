use std::os::unix::fs::PermissionsExt as _;

use serde_json::json;
use toolcell_tests::{Fixture, eventually};
use toolcell_types::ToolErrorKind;

#[test]
fn creates_files_and_parent_directories() {
    let fixture = Fixture::new();
    let output = fixture.ok("write_file", json!({"path": "a/b/c.txt", "content": "héllo\n"}));
    assert_eq!(fixture.read_text("a/b/c.txt"), "héllo\n");
    assert_eq!(output.structured.expect("structured"), json!({"path": "a/b/c.txt", "action": "created", "bytes": 7}));
    assert!(output.text.contains("Created `a/b/c.txt`"), "{}", output.text);
}

#[test]
fn replaces_existing_content_and_keeps_the_mode() {
    let fixture = Fixture::new();
    fixture.write("run.sh", "#!/bin/sh\necho old\n");
    let path = fixture.root().join("run.sh");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o751)).expect("chmod");
    let output = fixture.ok("write_file", json!({"path": "./run.sh", "content": "#!/bin/sh\necho new\n"}));
    assert_eq!(fixture.read_text("run.sh"), "#!/bin/sh\necho new\n");
    let structured = output.structured.expect("structured");
    assert_eq!(structured["action"], "modified");
    assert_eq!(structured["path"], "run.sh");
    let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o751);
}

#[test]
fn create_only_refuses_an_existing_file() {
    let fixture = Fixture::new();
    fixture.write("keep.txt", "original");
    let message = fixture.error("write_file", json!({"path": "keep.txt", "content": "new", "create_only": true}), ToolErrorKind::Conflict);
    assert!(message.contains("`keep.txt` already exists"), "{message}");
    assert_eq!(fixture.read_text("keep.txt"), "original");
    let output = fixture.ok("write_file", json!({"path": "fresh.txt", "content": "new", "create_only": true}));
    assert_eq!(output.structured.expect("structured")["action"], "created");
    assert_eq!(fixture.read_text("fresh.txt"), "new");
}

#[test]
fn errors() {
    let fixture = Fixture::new();
    std::fs::create_dir(fixture.root().join("dir")).expect("mkdir");
    fixture.write("file", "x");
    let message = fixture.error("write_file", json!({"path": "dir", "content": "x"}), ToolErrorKind::Unsupported);
    assert!(message.contains("`dir` is a directory"), "{message}");
    fixture.error("write_file", json!({"path": ".", "content": "x"}), ToolErrorKind::InvalidArgs);
    let message = fixture.error("write_file", json!({"path": "file/child", "content": "x"}), ToolErrorKind::NotFound);
    assert!(message.contains("file/child"), "{message}");
    let message = fixture.error("write_file", json!({"path": "a.txt"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`content`") && message.contains("`content_base64`"), "{message}");
    let message = fixture.error("write_file", json!({"path": "a.txt", "content": 5}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`content`"), "{message}");
    assert!(!fixture.root().join("a.txt").exists());
}

/// The descriptors of this process that name something inside `root` (the host holds a replaced
/// or removed file for a moment after its call, so that freeing its blocks does not hold up
/// the answer).
fn descriptors_under(root: &std::path::Path) -> Vec<String> {
    let inside = format!("{}/", root.to_string_lossy());
    std::fs::read_dir("/proc/self/fd")
        .expect("list the open descriptors")
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .map(|target| target.to_string_lossy().into_owned())
        .filter(|target| target.starts_with(&inside))
        .collect()
}

#[test]
fn files_replaced_or_removed_are_let_go_of_after_their_call() {
    let fixture = Fixture::new();
    fixture.write("rewritten.txt", "0\n");
    fixture.write("edited.txt", "one two\n");
    fixture.write("gone.txt", "x\n");
    fixture.write("moved.txt", "new\n");
    fixture.write("replaced.txt", "old\n");
    for round in 1..=20 {
        fixture.ok("write_file", json!({"path": "rewritten.txt", "content": format!("{round}\n")}));
    }
    fixture.ok("edit_file", json!({"path": "edited.txt", "old_string": "one", "new_string": "1"}));
    fixture.ok("delete_file", json!({"path": "gone.txt"}));
    fixture.ok("move_file", json!({"source": "moved.txt", "destination": "replaced.txt", "overwrite": true}));
    assert_eq!(fixture.read_text("rewritten.txt"), "20\n");
    assert_eq!(fixture.read_text("edited.txt"), "1 two\n");
    assert_eq!(fixture.read_text("replaced.txt"), "new\n");
    assert!(!fixture.root().join("gone.txt").exists());
    // Closed by the host's closing thread soon after; a descriptor leaked stays.
    eventually("the replaced and removed files are closed", std::time::Duration::from_secs(20), || {
        let open = descriptors_under(fixture.root());
        if !open.is_empty() {
            eprintln!("still open: {open:?}");
        }
        open.is_empty()
    });
}
