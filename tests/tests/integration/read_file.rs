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
    // A whole number written as a float is read as the integer it is; one no integer holds is
    // named (it passed the schema, and the tool's own parse failed naming a line and column of
    // text the caller never saw).
    let output = fixture.ok("read_file", json!({"path": "a.txt", "offset": 1.0, "limit": 1e1}));
    assert!(output.text.contains('x'), "{}", output.text);
    let message = fixture.error("read_file", json!({"path": "a.txt", "offset": 1e300}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`offset` is 1e+300") && message.contains("whole number between"), "{message}");
    assert!(!message.contains("line 1 column"), "{message}");
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

/// A 1×1 PNG and a 1×1 GIF.
const PNG: &[u8] = b"\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\x0d\x49\x44\x41\x54\x78\xda\x63\x64\x60\xf8\x5f\x0f\x00\x02\x87\x01\x80\xeb\x47\xba\x92\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82";
const GIF: &[u8] = b"\x47\x49\x46\x38\x39\x61\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00\x21\xf9\x04\x01\x00\x00\x00\x00\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02\x44\x01\x00\x3b";

#[test]
fn images_are_returned_as_images() {
    let fixture = Fixture::new();
    fixture.write("logo.png", PNG);
    fixture.write("anim.gif", GIF);
    let outcome = fixture.call("read_file", &json!({"path": "logo.png"}));
    let output = outcome.result.expect("an image result");
    assert_eq!(output.text, "Image `logo.png`: PNG, 1×1 pixels, 70 bytes (shown as an image).");
    assert_eq!(
        output.structured.expect("structured"),
        json!({"path": "logo.png", "image": {"mime_type": "image/png", "bytes": 70, "width": 1, "height": 1}})
    );
    assert_eq!(outcome.images.len(), 1);
    assert_eq!((outcome.images[0].mime_type.as_str(), outcome.images[0].data.as_slice()), ("image/png", PNG));
    let gif = fixture.call("read_file", &json!({"path": "anim.gif"}));
    assert_eq!(gif.images[0].mime_type, "image/gif");
    // An image is read whole.
    let message = fixture.error("read_file", json!({"path": "logo.png", "offset": 2}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("is an image (image/png), read whole"), "{message}");
    // Over the cap: refused, saying what to do; nothing attached.
    let mut big = PNG.to_vec();
    big.resize(6 * 1024 * 1024, 0);
    fixture.write("huge.png", &big);
    let outcome = fixture.call("read_file", &json!({"path": "huge.png"}));
    let error = outcome.result.expect_err("too large");
    assert_eq!(error.kind, ToolErrorKind::TooLarge);
    assert!(error.message.contains("`huge.png` is a PNG image of 6.0 MiB, over the 5 MiB"), "{}", error.message);
    assert!(outcome.images.is_empty());
    // Other binary files are still refused as such.
    fixture.write("blob.bin", b"\x00\x01\x02");
    let message = fixture.error("read_file", json!({"path": "blob.bin"}), ToolErrorKind::Unsupported);
    assert!(message.contains("binary"), "{message}");
}

#[test]
fn a_component_cannot_attach_bytes_that_are_not_the_image_it_names() {
    // The host checks attachments itself: the guest test program attaches a text file's
    // bytes as a PNG, and a GIF as a JPEG.
    let fixture = Fixture::new();
    fixture.write("notes.txt", "not an image\n");
    fixture.write("anim.gif", GIF);
    let attach =
        |path: &str, mime_type: &str| fixture.call("fs_probe", &json!({"ops": [{"op": "attach_image", "path": path, "to": mime_type}]}));
    let outcome = attach("notes.txt", "image/png");
    let error = outcome.result.expect_err("refused");
    assert!(error.message.contains("the attached bytes are not image/png (they are no image the host knows)"), "{}", error.message);
    assert!(attach("anim.gif", "image/jpeg").result.expect_err("refused").message.contains("they are image/gif"));
    let outcome = attach("anim.gif", "text/html");
    assert!(outcome.result.expect_err("refused").message.contains("is not an image type the host attaches"));
    assert!(outcome.images.is_empty());
    // Attached, then the call fails: the agent sees no image.
    let outcome =
        fixture.call("fs_probe", &json!({"ops": [{"op": "attach_image", "path": "anim.gif", "to": "image/gif"}, {"op": "fail"}]}));
    assert!(outcome.result.is_err());
    assert!(outcome.images.is_empty());
    let outcome = attach("anim.gif", "image/gif");
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    assert_eq!(outcome.images.len(), 1);
}

#[test]
fn what_a_tool_remembers_is_its_own_for_its_session() {
    let runtime = toolcell_tests::runtime();
    let fixture = Fixture::new();
    let probe = |session: &str, ops: serde_json::Value| {
        let outcome = fixture.call_as(runtime, session, None, &[], "fs_probe", &json!({ "ops": ops }));
        outcome.result.expect("probe ran").structured.expect("structured")
    };
    probe("s-memo", json!([{"op": "remember", "path": "k", "content": "kept"}]));
    assert_eq!(probe("s-memo", json!([{"op": "recall", "path": "k"}]))[0]["value"], "kept");
    assert_eq!(probe("s-else", json!([{"op": "recall", "path": "k"}]))[0]["value"], serde_json::Value::Null);
    // read_file's line index is read_file's alone.
    let content: String = (1..=60_000).map(|n| format!("line {n:06} of a file large enough to be indexed\n")).collect();
    fixture.write("big.log", &content);
    fixture.call_as(runtime, "s-memo", None, &[], "read_file", &json!({"path": "big.log", "tail": 1})).result.expect("read");
    assert_eq!(probe("s-memo", json!([{"op": "recall", "path": "read.line-index:big.log"}]))[0]["value"], serde_json::Value::Null);
}

#[test]
fn windowed_reads_of_a_large_file_recall_its_line_index() {
    let runtime = toolcell_tests::runtime();
    let fixture = Fixture::new();
    // 120,000 lines, about 7 MiB: a read from the top costs over a hundred 64 KiB reads.
    let content: String = (1..=120_000).map(|n| format!("line {n:06} {}\n", "x".repeat(n % 97))).collect();
    fixture.write("big.log", &content);
    let read = |session: &str, args: serde_json::Value| {
        let outcome = fixture.call_as(runtime, session, None, &[], "read_file", &args);
        let output = outcome.result.unwrap_or_else(|error| panic!("read_file failed: {error:?}"));
        (output, outcome.host_calls)
    };
    let expected = |from: usize, count: usize| -> String {
        content
            .lines()
            .enumerate()
            .skip(from - 1)
            .take(count)
            .map(|(index, line)| format!("{:>6}\t{line}", index + 1))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let (first, first_calls) = read("s-index", json!({"path": "big.log", "offset": 100_000, "limit": 5}));
    assert!(first.text.starts_with(&expected(100_000, 5)), "{}", first.text);
    assert!(first_calls > 100, "the first read scans the file: {first_calls} host calls");
    // Later windows start at a recorded line start: a handful of host calls, the same answer.
    for (offset, limit) in [(50_000, 5), (1, 3), (119_998, 10), (65_537, 2)] {
        let (output, calls) = read("s-index", json!({"path": "big.log", "offset": offset, "limit": limit}));
        assert!(output.text.starts_with(&expected(offset, limit)), "window {offset}: {}", output.text);
        assert_eq!(output.structured.expect("structured")["total_lines"], 120_000);
        assert!(calls < 20, "window at {offset} took {calls} host calls");
    }
    let (tail, calls) = read("s-index", json!({"path": "big.log", "tail": 2}));
    assert!(tail.text.starts_with(&expected(119_999, 2)), "{}", tail.text);
    assert!(calls < 20, "tail took {calls} host calls");
    // Past the end is still an error naming the line count.
    let outcome = fixture.call_as(runtime, "s-index", None, &[], "read_file", &json!({"path": "big.log", "offset": 130_000}));
    assert!(outcome.result.expect_err("past the end").message.contains("which has 120000 lines"));
    // Another session has no index of its own yet.
    let (_, other_calls) = read("s-other", json!({"path": "big.log", "offset": 50_000, "limit": 5}));
    assert!(other_calls > 100, "{other_calls}");
    // Changed outside the host: the index no longer fits, and the answer is still exact.
    let changed: String = content.replacen("line 000001", "line 000001\nan inserted line", 1);
    fixture.write("big.log", &changed);
    let (output, calls) = read("s-index", json!({"path": "big.log", "offset": 50_001, "limit": 1}));
    assert!(output.text.starts_with(&format!("{:>6}\t{}", 50_001, content.lines().nth(49_999).expect("line"))), "{}", output.text);
    assert_eq!(output.structured.expect("structured")["total_lines"], 120_001);
    assert!(calls > 100, "a changed file is counted again: {calls}");
}

/// A read opens the file once: the same open tells an image by its first bytes and reads the
/// text (each open is judged and recorded by the guard: what a read costs the host).
#[test]
fn a_read_opens_the_file_once() {
    let fixture = Fixture::new();
    fixture.write("a.txt", numbered_file(10));
    let outcome = fixture.call("read_file", &json!({"path": "a.txt", "offset": 2, "limit": 2}));
    assert!(outcome.result.as_ref().is_ok_and(|output| output.text.starts_with("     2\tline 2\n")), "{:?}", outcome.result);
    let opens: Vec<&str> =
        outcome.events.iter().filter(|event| event.path == "a.txt" && event.operation == "open-at").map(|event| event.operation).collect();
    assert_eq!(opens.len(), 1, "{:?}", outcome.events);
}
