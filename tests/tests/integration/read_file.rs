use serde_json::json;
use toolcell_tests::Fixture;
use toolcell_types::ToolErrorKind;

fn numbered_file(lines: usize) -> String {
    (1..=lines).map(|n| format!("line {n}\n")).collect()
}

#[test]
fn returns_numbered_lines_and_counts() {
    let fixture = Fixture::new();
    fixture.write("src/a.rs", "fn a() {}\n\nfn b() {}\n");
    let output = fixture.ok("read_file", json!({"path": "src/a.rs"}));
    assert_eq!(output.text, "     1\tfn a() {}\n     2\t\n     3\tfn b() {}");
    let structured = output.structured.expect("structured output");
    assert_eq!(structured["total_lines"], 3);
    assert_eq!(structured["truncated"], false);
    assert_eq!(structured["start_line"], 1);
    assert_eq!(structured["end_line"], 3);
}

#[test]
fn offset_and_limit_select_a_window() {
    let fixture = Fixture::new();
    fixture.write("a.txt", numbered_file(10));
    let output = fixture.ok("read_file", json!({"path": "a.txt", "offset": 4, "limit": 3}));
    assert!(output.text.starts_with("     4\tline 4\n     5\tline 5\n     6\tline 6\n"), "{}", output.text);
    assert!(output.text.contains("offset 7"), "the footer says how to read on: {}", output.text);
    let structured = output.structured.expect("structured output");
    assert_eq!(structured["total_lines"], 10);
    assert_eq!(structured["truncated"], true);
    assert_eq!(structured["next_offset"], 7);
    let tail = fixture.ok("read_file", json!({"path": "a.txt", "offset": 9}));
    assert_eq!(tail.structured.expect("structured")["truncated"], false);
}

#[test]
fn default_limit_is_2000_lines() {
    let fixture = Fixture::new();
    fixture.write("big.txt", numbered_file(2500));
    let output = fixture.ok("read_file", json!({"path": "big.txt"}));
    let structured = output.structured.expect("structured output");
    assert_eq!(structured["end_line"], 2000);
    assert_eq!(structured["total_lines"], 2500);
    assert_eq!(structured["truncated"], true);
    assert!(output.text.contains("  2000\tline 2000"));
    assert!(!output.text.contains("line 2001"));
}

#[test]
fn long_lines_are_cut_with_a_marker() {
    let fixture = Fixture::new();
    fixture.write("long.txt", format!("short\n{}\n", "é".repeat(2500)));
    let output = fixture.ok("read_file", json!({"path": "long.txt"}));
    assert!(output.text.contains("[line truncated: 500 more characters]"), "{}", output.text);
    let structured = output.structured.expect("structured output");
    assert_eq!(structured["clipped_lines"], 1);
    assert_eq!(structured["truncated"], true);
}

#[test]
fn crlf_and_bom_are_not_shown() {
    let fixture = Fixture::new();
    fixture.write("win.txt", "\u{feff}one\r\ntwo\r\n");
    let output = fixture.ok("read_file", json!({"path": "win.txt"}));
    assert_eq!(output.text, "     1\tone\n     2\ttwo");
}

#[test]
fn empty_file() {
    let fixture = Fixture::new();
    fixture.write("empty.txt", "");
    let output = fixture.ok("read_file", json!({"path": "empty.txt"}));
    assert!(output.text.contains("is empty"), "{}", output.text);
    assert_eq!(output.structured.expect("structured")["total_lines"], 0);
}

#[test]
fn errors() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "one\ntwo\n");
    fixture.write("bin.dat", b"\x7fELF\x00\x01binary");
    std::fs::create_dir(fixture.root().join("dir")).expect("mkdir");

    let message = fixture.error("read_file", json!({"path": "a.txt", "offset": 5}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("offset 5") && message.contains("2 lines"), "{message}");
    let message = fixture.error("read_file", json!({"path": "missing.txt"}), ToolErrorKind::NotFound);
    assert!(message.contains("`missing.txt` does not exist"), "{message}");
    let message = fixture.error("read_file", json!({"path": "dir"}), ToolErrorKind::Unsupported);
    assert!(message.contains("directory") && message.contains("list_files"), "{message}");
    let message = fixture.error("read_file", json!({"path": "bin.dat"}), ToolErrorKind::Unsupported);
    assert!(message.contains("binary"), "{message}");
}

#[test]
fn bad_arguments_name_the_field() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "x\n");
    let message = fixture.error("read_file", json!({"path": "a.txt", "offset": 0}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`offset`"), "{message}");
    let message = fixture.error("read_file", json!({"path": "a.txt", "limit": "ten"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`limit`"), "{message}");
    let message = fixture.error("read_file", json!({}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("\"path\""), "{message}");
    let message = fixture.error("read_file", json!({"path": "a.txt", "lines": 3}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("lines"), "{message}");
}

#[test]
fn special_files_are_refused_without_blocking() {
    let fixture = Fixture::new();
    let fifo = fixture.root().join("pipe");
    let status = std::process::Command::new("mkfifo").arg(&fifo).status().expect("run mkfifo");
    assert!(status.success());
    // A blocking open would hang this call forever: run it on a detached thread and fail the
    // test, rather than hang it, if no answer comes.
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let message = fixture.error("read_file", json!({"path": "pipe"}), ToolErrorKind::Unsupported);
        let _ = sender.send(message);
    });
    let message = receiver.recv_timeout(std::time::Duration::from_secs(60)).expect("read_file on a FIFO blocked");
    assert!(message.contains("not a regular file"), "{message}");
}

#[test]
fn tail_reads_the_last_lines_with_their_numbers() {
    let fixture = Fixture::new();
    let content: String = (1..=5000).map(|n| format!("entry {n}\n")).collect();
    fixture.write("app.log", &content);
    let output = fixture.ok("read_file", json!({"path": "app.log", "tail": 3}));
    assert_eq!(output.text, "  4998\tentry 4998\n  4999\tentry 4999\n  5000\tentry 5000\n\n[lines 4998-5000 of 5000]");
    let structured = output.structured.expect("structured");
    assert_eq!(
        (structured["start_line"].clone(), structured["end_line"].clone(), structured["total_lines"].clone()),
        (json!(4998), json!(5000), json!(5000))
    );
    assert_eq!(structured["truncated"], false);
    // A last line without a newline counts; more than the file has reads it all.
    fixture.write("short.txt", "one\ntwo");
    assert!(fixture.ok("read_file", json!({"path": "short.txt", "tail": 1})).text.starts_with("     2\ttwo\n\n[lines 2-2 of 2]"));
    assert_eq!(fixture.ok("read_file", json!({"path": "short.txt", "tail": 10})).text, "     1\tone\n     2\ttwo");
    fixture.write("empty.txt", "");
    assert!(fixture.ok("read_file", json!({"path": "empty.txt", "tail": 5})).text.contains("is empty"));
    let message = fixture.error("read_file", json!({"path": "app.log", "tail": 3, "offset": 2}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("either `tail`, or `offset` and `limit`"), "{message}");
}
