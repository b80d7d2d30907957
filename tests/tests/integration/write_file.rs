use std::os::unix::fs::PermissionsExt as _;

use serde_json::json;
use toolcell_tests::Fixture;
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
