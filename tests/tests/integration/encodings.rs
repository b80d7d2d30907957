//! Files that are not UTF-8: read in their encoding, edited and written back in it.

use serde_json::json;
use toolcell_tests::Fixture;
use toolcell_types::ToolErrorKind;

/// Latin-1 (windows-1252) text long enough for detection to be sure of it.
const LATIN1: &[u8] = b"Gr\xfc\xdfe aus K\xf6ln\ncaf\xe9 cr\xe8me br\xfbl\xe9e\nna\xefve fa\xe7ade\n";

fn utf16le(text: &str) -> Vec<u8> {
    let mut bytes = vec![0xFF, 0xFE];
    bytes.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
    bytes
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let word = chunk.iter().enumerate().fold(0u32, |word, (index, byte)| word | u32::from(*byte) << (16 - 8 * index));
        for index in 0..4 {
            if index <= chunk.len() {
                out.push(char::from(ALPHABET[(word >> (18 - 6 * index) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn a_latin1_file_reads_as_its_characters_and_says_its_encoding() {
    let fixture = Fixture::new();
    fixture.write("de.txt", LATIN1);
    let output = fixture.ok("read_file", json!({"path": "de.txt"}));
    assert!(output.text.contains("     1\tGrüße aus Köln\n     2\tcafé crème brûlée"), "{}", output.text);
    assert!(!output.text.contains('\u{fffd}'), "{}", output.text);
    assert!(output.text.contains("[encoding: windows-1252;"), "{}", output.text);
    let structured = output.structured.expect("structured");
    assert_eq!(structured["encoding"], "windows-1252");
    assert_eq!(structured["total_lines"], 3);
    assert!(structured.get("bom").is_none());
    // `tail` counts the same lines.
    let tail = fixture.ok("read_file", json!({"path": "de.txt", "tail": 1}));
    assert_eq!(tail.text.lines().next(), Some("     3\tnaïve façade"), "{}", tail.text);
    let many = fixture.ok("read_many", json!({"paths": ["de.txt"]}));
    assert!(many.text.contains("Grüße") && many.text.contains("windows-1252"), "{}", many.text);
    assert_eq!(many.structured.expect("structured")["files"][0]["encoding"], "windows-1252");
    // UTF-8 says nothing about it.
    fixture.write("plain.txt", "héllo\n");
    let plain = fixture.ok("read_file", json!({"path": "plain.txt"}));
    assert!(!plain.text.contains("encoding"), "{}", plain.text);
    assert!(plain.structured.expect("structured").get("encoding").is_none());
}

#[test]
fn editing_a_latin1_file_keeps_latin1_bytes() {
    let fixture = Fixture::new();
    fixture.write("de.txt", LATIN1);
    let output = fixture.ok("edit_file", json!({"path": "de.txt", "old_string": "café", "new_string": "thé"}));
    assert!(output.text.contains("kept in windows-1252"), "{}", output.text);
    assert_eq!(output.structured.expect("structured")["encoding"], "windows-1252");
    assert_eq!(fixture.read("de.txt"), b"Gr\xfc\xdfe aus K\xf6ln\nth\xe9 cr\xe8me br\xfbl\xe9e\nna\xefve fa\xe7ade\n");
    let inserted = fixture.ok("insert_text", json!({"path": "de.txt", "line": 0, "text": "Überschrift"}));
    assert_eq!(inserted.structured.expect("structured")["encoding"], "windows-1252");
    assert!(fixture.read("de.txt").starts_with(b"\xdcberschrift\nGr\xfc\xdfe"));
    let patch = "*** Begin Patch\n*** Update File: de.txt\n@@\n-na\u{ef}ve fa\u{e7}ade\n+na\u{ef}ve fa\u{e7}ade \u{e0} la cr\u{e8}me\n*** End Patch";
    fixture.ok("apply_patch", json!({"patch": patch}));
    assert!(fixture.read("de.txt").ends_with(b"na\xefve fa\xe7ade \xe0 la cr\xe8me\n"));
}

#[test]
fn a_character_the_encoding_cannot_hold_is_refused_and_nothing_is_written() {
    let fixture = Fixture::new();
    fixture.write("de.txt", LATIN1);
    let message =
        fixture.error("edit_file", json!({"path": "de.txt", "old_string": "café", "new_string": "☃ café"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`☃` (U+2603) on line 2 cannot be written in windows-1252"), "{message}");
    assert!(message.contains("`de.txt`") && message.contains("Nothing was written"), "{message}");
    fixture.error(
        "edit_file",
        json!({"path": "de.txt", "old_string": "café", "new_string": "☃", "dry_run": true}),
        ToolErrorKind::InvalidArgs,
    );
    fixture.error("insert_text", json!({"path": "de.txt", "line": 1, "text": "日本"}), ToolErrorKind::InvalidArgs);
    let patch = "*** Begin Patch\n*** Update File: de.txt\n@@\n-na\u{ef}ve fa\u{e7}ade\n+\u{2603}\n*** End Patch";
    fixture.error("apply_patch", json!({"patch": patch}), ToolErrorKind::InvalidArgs);
    let message = fixture.error("write_file", json!({"path": "de.txt", "content": "snow ☃\n"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`☃`") && message.contains("windows-1252"), "{message}");
    assert_eq!(fixture.read("de.txt"), LATIN1, "the file's bytes are unchanged");
    // Asked for, the file is converted.
    let output = fixture.ok("write_file", json!({"path": "de.txt", "content": "snow ☃\n", "encoding": "utf-8"}));
    assert_eq!(fixture.read_text("de.txt"), "snow ☃\n");
    assert!(output.structured.expect("structured").get("encoding").is_none());
}

#[test]
fn write_file_keeps_the_encoding_of_the_file_it_replaces() {
    let fixture = Fixture::new();
    fixture.write("de.txt", LATIN1);
    let output = fixture.ok("write_file", json!({"path": "de.txt", "content": "Straße\n"}));
    assert_eq!(fixture.read("de.txt"), b"Stra\xdfe\n");
    assert_eq!(output.structured.expect("structured")["encoding"], "windows-1252");
    // A new file is UTF-8 unless `encoding` says otherwise.
    fixture.ok("write_file", json!({"path": "new.txt", "content": "Straße\n"}));
    assert_eq!(fixture.read_text("new.txt"), "Straße\n");
    fixture.ok("write_file", json!({"path": "w16.txt", "content": "hé\n", "encoding": "utf-16le"}));
    assert_eq!(fixture.read("w16.txt"), utf16le("hé\n"));
    let message = fixture.error("write_file", json!({"path": "x.txt", "content": "x", "encoding": "klingon"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`klingon`"), "{message}");
    // A CRLF file with a byte-order mark stays one.
    fixture.write("win.txt", "\u{feff}one\r\ntwo\r\n");
    let output = fixture.ok("write_file", json!({"path": "win.txt", "content": "uno\ndos\n"}));
    assert_eq!(fixture.read_text("win.txt"), "\u{feff}uno\r\ndos\r\n");
    let structured = output.structured.expect("structured");
    assert_eq!((structured["bom"].clone(), structured["line_endings"].clone()), (json!(true), json!("crlf")));
}

#[test]
fn utf16_with_a_bom_reads_and_edits_round_trip() {
    let fixture = Fixture::new();
    fixture.write("w.txt", utf16le("first line\r\nzweite Zeile: ü\r\nthird 😀\r\n"));
    let output = fixture.ok("read_file", json!({"path": "w.txt"}));
    assert_eq!(output.text.lines().take(3).collect::<Vec<_>>(), ["     1\tfirst line", "     2\tzweite Zeile: ü", "     3\tthird 😀"]);
    assert!(output.text.contains("[encoding: utf-16le with a byte-order mark;"), "{}", output.text);
    let structured = output.structured.expect("structured");
    assert_eq!((structured["encoding"].clone(), structured["bom"].clone()), (json!("utf-16le"), json!(true)));
    assert_eq!(fixture.ok("read_file", json!({"path": "w.txt", "tail": 1})).text.lines().next(), Some("     3\tthird 😀"));
    let edit = fixture.ok("edit_file", json!({"path": "w.txt", "old_string": "zweite Zeile: ü", "new_string": "second line: ☃"}));
    let structured = edit.structured.expect("structured");
    assert_eq!((structured["line_endings"].clone(), structured["bom"].clone()), (json!("crlf"), json!(true)));
    assert_eq!(fixture.read("w.txt"), utf16le("first line\r\nsecond line: ☃\r\nthird 😀\r\n"));
    fixture.ok("insert_text", json!({"path": "w.txt", "line": 3, "text": "fourth"}));
    assert_eq!(fixture.read("w.txt"), utf16le("first line\r\nsecond line: ☃\r\nthird 😀\r\nfourth\r\n"));
    let info = fixture.ok("file_info", json!({"path": "w.txt"})).structured.expect("structured");
    assert_eq!((info["encoding"].clone(), info["bom"].clone(), info["lines"].clone()), (json!("utf-16le"), json!(true), json!(4)));
    // Searching it is not this change's: but a binary file is still refused.
    fixture.write("bin.dat", b"\x7fELF\x00\x01\x00\x00binary");
    fixture.error("read_file", json!({"path": "bin.dat"}), ToolErrorKind::Unsupported);
    fixture.error("edit_file", json!({"path": "bin.dat", "old_string": "ELF", "new_string": "x"}), ToolErrorKind::Unsupported);
}

#[test]
fn a_utf8_bom_and_crlf_are_kept() {
    let fixture = Fixture::new();
    fixture.write("bom.txt", "\u{feff}alpha\r\nbeta\r\n");
    let read = fixture.ok("read_file", json!({"path": "bom.txt"}));
    assert!(read.text.starts_with("     1\talpha\n"), "{}", read.text);
    assert_eq!(read.structured.expect("structured")["bom"], true);
    fixture.ok("edit_file", json!({"path": "bom.txt", "old_string": "beta", "new_string": "béta\ngamma"}));
    assert_eq!(fixture.read("bom.txt"), "\u{feff}alpha\r\nbéta\r\ngamma\r\n".as_bytes());
    let info = fixture.ok("file_info", json!({"path": "bom.txt"}));
    let structured = info.structured.expect("structured");
    assert_eq!((structured["encoding"].clone(), structured["bom"].clone()), (json!("utf-8"), json!(true)));
    assert_eq!(structured["line_endings"], "crlf");
    assert!(info.text.contains("encoding: utf-8") && info.text.contains("line_endings: crlf"), "{}", info.text);
}

#[test]
fn file_info_names_the_encoding() {
    let fixture = Fixture::new();
    fixture.write("de.txt", LATIN1);
    fixture.write("plain.txt", "a\nb\n");
    let info = fixture.ok("file_info", json!({"path": "de.txt"}));
    let structured = info.structured.expect("structured");
    assert_eq!((structured["encoding"].clone(), structured["lines"].clone()), (json!("windows-1252"), json!(3)));
    assert_eq!(structured["line_endings"], "lf");
    assert!(structured.get("bom").is_none());
    assert!(info.text.contains("encoding: windows-1252"), "{}", info.text);
    assert_eq!(fixture.ok("file_info", json!({"path": "plain.txt"})).structured.expect("structured")["encoding"], "utf-8");
}

#[test]
fn write_file_writes_base64_bytes_exactly() {
    let fixture = Fixture::new();
    let bytes: Vec<u8> = (0..=255u8).chain([0, 0, 0xFF]).collect();
    let output = fixture.ok("write_file", json!({"path": "assets/blob.bin", "content_base64": base64(&bytes)}));
    assert_eq!(fixture.read("assets/blob.bin"), bytes);
    let structured = output.structured.expect("structured");
    assert_eq!((structured["bytes"].clone(), structured["binary"].clone()), (json!(259), json!(true)));
    assert!(output.text.contains("from base64"), "{}", output.text);
    // Line breaks in the base64 are allowed; the replaced file's encoding does not apply.
    fixture.write("de.txt", LATIN1);
    let wrapped = format!("{}\n{}", &base64(b"caf\xc3\xa9")[..4], &base64(b"caf\xc3\xa9")[4..]);
    fixture.ok("write_file", json!({"path": "de.txt", "content_base64": wrapped}));
    assert_eq!(fixture.read("de.txt"), "café".as_bytes());
    for (args, needle) in [
        (json!({"path": "x.bin", "content_base64": "not base64!"}), "not valid base64"),
        (json!({"path": "x.bin", "content": "a", "content_base64": "YQ=="}), "not both"),
        (json!({"path": "x.bin"}), "nothing to write"),
        (json!({"path": "x.bin", "content_base64": "YQ==", "encoding": "utf-8"}), "`encoding`"),
    ] {
        let message = fixture.error("write_file", args, ToolErrorKind::InvalidArgs);
        assert!(message.contains(needle), "{needle}: {message}");
    }
    assert!(!fixture.root().join("x.bin").exists());
}

#[test]
fn base64_writes_obey_the_policy_and_the_size_cap() {
    let fixture = Fixture::new();
    fixture.write("docs/logo.png", b"old");
    let png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR";
    let (message, rules) = fixture.denied("impl", "write_file", json!({"path": "docs/logo.png", "content_base64": base64(png)}));
    assert!(message.contains("docs/logo.png"), "{message}");
    assert_eq!(rules, ["docs-read-only"]);
    assert_eq!(fixture.read("docs/logo.png"), b"old");
    fixture.allowed("impl", "write_file", json!({"path": "src/logo.png", "content_base64": base64(png)}));
    assert_eq!(fixture.read("src/logo.png"), png);
    // The host's cap on arguments holds for base64 as for text.
    let huge = "A".repeat(toolcell_runtime::MAX_ARGS_BYTES + 4);
    fixture.error("write_file", json!({"path": "big.bin", "content_base64": huge}), ToolErrorKind::TooLarge);
    assert!(!fixture.root().join("big.bin").exists());
}
