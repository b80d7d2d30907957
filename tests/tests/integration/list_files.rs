use serde_json::json;
use toolcell_tests::Fixture;
use toolcell_types::ToolErrorKind;

fn tree() -> Fixture {
    let fixture = Fixture::new();
    for path in ["b.rs", "a.md", "src/main.rs", "src/lib/mod.rs", "src/lib/util.txt", ".git/HEAD", ".hidden"] {
        fixture.write(path, "x\n");
    }
    fixture
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[test]
fn lists_the_root_sorted_with_directories_marked() {
    let fixture = tree();
    let output = fixture.ok("list_files", json!({}));
    assert_eq!(lines(&output.text), [".git/", ".hidden", "a.md", "b.rs", "src/"]);
    let structured = output.structured.expect("structured");
    assert_eq!(structured["truncated"], false);
    assert_eq!(structured["entries"][4], json!({"path": "src", "type": "directory"}));
}

#[test]
fn recursive_order_is_depth_first_and_skips_git_contents() {
    let fixture = tree();
    let output = fixture.ok("list_files", json!({"path": "src", "recursive": true}));
    assert_eq!(lines(&output.text), ["src/lib/", "src/lib/mod.rs", "src/lib/util.txt", "src/main.rs"]);
    let all = fixture.ok("list_files", json!({"recursive": true}));
    assert!(all.text.contains(".git/\n"), "{}", all.text);
    assert!(!all.text.contains(".git/HEAD"), "{}", all.text);
}

#[test]
fn globs_do_not_cross_slashes_unless_double_star() {
    let fixture = tree();
    let output = fixture.ok("list_files", json!({"pattern": "*.rs"}));
    assert_eq!(lines(&output.text), ["b.rs"]);
    let output = fixture.ok("list_files", json!({"pattern": "*.rs", "recursive": true}));
    assert_eq!(lines(&output.text), ["b.rs"], "`*` must not match across `/`");
    let output = fixture.ok("list_files", json!({"pattern": "**/*.rs"}));
    assert_eq!(lines(&output.text), ["b.rs", "src/lib/mod.rs", "src/main.rs"]);
    let output = fixture.ok("list_files", json!({"path": "src", "pattern": "lib/*"}));
    assert_eq!(lines(&output.text), ["src/lib/mod.rs", "src/lib/util.txt"]);
    let output = fixture.ok("list_files", json!({"pattern": "*.none"}));
    assert!(output.text.starts_with("No entries"), "{}", output.text);
}

#[test]
fn results_are_capped() {
    let fixture = Fixture::new();
    for n in 0..30 {
        fixture.write(&format!("f{n:02}.txt"), "");
    }
    let output = fixture.ok("list_files", json!({"max_results": 10}));
    let listed: Vec<&str> = output.text.lines().filter(|line| !line.starts_with('[')).collect();
    assert_eq!(listed.len(), 10);
    assert_eq!(listed[0], "f00.txt");
    assert!(output.text.contains("[truncated at 10 entries"), "{}", output.text);
    assert_eq!(output.structured.expect("structured")["truncated"], true);
    let exact = fixture.ok("list_files", json!({"max_results": 30}));
    assert_eq!(exact.structured.expect("structured")["truncated"], false);
}

#[test]
fn symlinks_are_marked_and_not_followed() {
    let fixture = tree();
    fixture.symlink("src", "link");
    let output = fixture.ok("list_files", json!({"recursive": true, "pattern": "**"}));
    assert!(output.text.lines().any(|line| line == "link@"), "{}", output.text);
    assert!(!output.text.contains("link/"), "{}", output.text);
}

#[test]
fn errors() {
    let fixture = tree();
    let message = fixture.error("list_files", json!({"path": "a.md"}), ToolErrorKind::Unsupported);
    assert!(message.contains("read_file"), "{message}");
    // The listing itself finds out what the path is: a symlink to a file is a file, one to a
    // directory is listed, and a path under a file does not exist.
    fixture.symlink("a.md", "to-file");
    let message = fixture.error("list_files", json!({"path": "to-file"}), ToolErrorKind::Unsupported);
    assert!(message.contains("is a file"), "{message}");
    fixture.symlink("src/lib", "to-directory");
    assert_eq!(lines(&fixture.ok("list_files", json!({"path": "to-directory"})).text), ["to-directory/mod.rs", "to-directory/util.txt"]);
    let message = fixture.error("list_files", json!({"path": "a.md/inner"}), ToolErrorKind::NotFound);
    assert!(message.contains("one of its parents is a file"), "{message}");
    fixture.error("list_files", json!({"path": "nope"}), ToolErrorKind::NotFound);
    let message = fixture.error("list_files", json!({"pattern": "a[b"}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`pattern`"), "{message}");
    let message = fixture.error("list_files", json!({"max_results": 0}), ToolErrorKind::InvalidArgs);
    assert!(message.contains("`max_results`"), "{message}");
}

#[test]
fn sorted_by_modification_time_the_newest_come_first() {
    let fixture = Fixture::new();
    let at = |path: &str, seconds: u64| {
        fixture.write(path, "x\n");
        let file = std::fs::File::options().write(true).open(fixture.root().join(path)).expect("open");
        file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds)).expect("set mtime");
    };
    at("old.txt", 1_700_000_000);
    at("deep/middle.txt", 1_750_000_000);
    at("new.txt", 1_790_000_000);
    at("same-a.txt", 1_720_000_000);
    at("same-b.txt", 1_720_000_000);
    let output = fixture.ok("list_files", json!({"pattern": "**/*.txt", "sort": "modified"}));
    assert_eq!(output.text, "new.txt\ndeep/middle.txt\nsame-a.txt\nsame-b.txt\nold.txt");
    let structured = output.structured.expect("structured");
    assert_eq!(structured["entries"][0], json!({"path": "new.txt", "type": "file", "modified": "2026-09-21T14:13:20Z"}));
    assert_eq!(structured["truncated"], false);
    // The limit keeps the newest, whatever the walk's order.
    let newest = fixture.ok("list_files", json!({"pattern": "**/*.txt", "sort": "modified", "max_results": 2}));
    assert!(newest.text.starts_with("new.txt\ndeep/middle.txt\n[truncated at 2 entries"), "{}", newest.text);
    assert_eq!(newest.structured.expect("structured")["truncated"], true);
    // By name (the default) nothing changes, and no times are given.
    let by_name = fixture.ok("list_files", json!({"pattern": "**/*.txt"}));
    assert_eq!(by_name.text, "deep/middle.txt\nnew.txt\nold.txt\nsame-a.txt\nsame-b.txt");
    assert!(by_name.structured.expect("structured")["entries"][0].get("modified").is_none());
}

/// The host reads a directory a buffer at a time: one whose entries fill it many times over is
/// listed whole, each entry once, and names reserved for calls in flight stay hidden wherever
/// they fall in it.
#[test]
fn a_directory_larger_than_one_read_is_listed_whole() {
    let fixture = Fixture::new();
    let mut expected = Vec::new();
    for n in 0..1_500 {
        let name = format!("big/{n:04}-{}", "n".repeat(90));
        fixture.write(&name, "");
        expected.push(name);
        if n % 500 == 250 {
            fixture.write(&format!("big/.toolcell-{n}"), "");
        }
    }
    let output = fixture.ok("list_files", json!({"path": "big", "max_results": 5_000}));
    assert_eq!(lines(&output.text), expected);
    let structured = output.structured.expect("structured");
    assert_eq!(structured["entries"].as_array().map(Vec::len), Some(1_500));
    assert_eq!(structured["truncated"], false);
}

/// The host hands a directory's entries over in byte order of their names (a component that
/// sorts them, as every built-in does, then finds them in order), whatever order the
/// filesystem keeps them in.
#[test]
fn the_host_hands_over_a_listing_in_name_order() {
    let fixture = Fixture::new();
    // Made in descending order: a filesystem that lists in creation order (or its reverse,
    // or by a hash of the name) does not give byte order by chance.
    let mut expected: Vec<String> = (0..300).map(|n| format!("{}{n:03}", ["b", "A", "a-", "a.", "a"][n % 5])).collect();
    for name in expected.iter().rev() {
        fixture.write(&format!("order/{name}"), "");
    }
    expected.sort();
    let outcome = fixture.call("fs_probe", &json!({"ops": [{"op": "raw_list_order", "path": "order"}]}));
    let output = outcome.result.expect("the probe runs");
    let result = &output.structured.expect("structured")[0];
    assert_eq!(result["ok"], true, "{result}");
    let listed: Vec<&str> = result["value"].as_array().expect("names").iter().filter_map(|name| name.as_str()).collect();
    assert_eq!(listed, expected);
}

/// A name that is not UTF-8 cannot be shown or opened: it is left out, and every other entry of
/// the directory is listed, before it in the host's order or after.
#[test]
fn a_name_that_is_not_utf8_is_left_out_and_the_rest_listed() {
    use std::os::unix::ffi::OsStrExt as _;
    let fixture = Fixture::new();
    for name in ["a.txt", "c.txt", "z.txt"] {
        fixture.write(&format!("mixed/{name}"), "");
    }
    std::fs::write(fixture.root().join("mixed").join(std::ffi::OsStr::from_bytes(b"b\xff.txt")), "").expect("write");
    let output = fixture.ok("list_files", json!({"path": "mixed"}));
    assert_eq!(lines(&output.text), ["mixed/a.txt", "mixed/c.txt", "mixed/z.txt"]);
}

/// A component that lists raw is given an entry whose name is not UTF-8 as an error, but only
/// where the role may see it, judged by its name as text (each invalid byte a U+FFFD): in a
/// directory whose files the role may not read, one such name made the listing fail where
/// it had listed nothing, telling the role that a file it may not see was there.
#[test]
fn a_name_that_is_not_utf8_is_not_told_where_the_role_may_not_see_it() {
    use std::os::unix::ffi::OsStrExt as _;
    let fixture = Fixture::new();
    fixture.write("secrets/token.txt", "");
    fixture.write("open/a.txt", "");
    let list = |path: &str| {
        let outcome = fixture.call_on(
            toolcell_tests::governed_runtime(),
            "impl",
            "fs_probe",
            &json!({"ops": [{"op": "raw_list", "path": path}]}),
            None,
        );
        let result = outcome.result.expect("the probe runs").structured.expect("structured")[0].clone();
        (result["ok"].clone(), result["value"].clone(), result.to_string())
    };
    assert_eq!(list("secrets").0, true);
    assert_eq!(list("secrets").1, json!([]));
    std::fs::write(fixture.root().join("secrets").join(std::ffi::OsStr::from_bytes(b"\xffx.txt")), "").expect("write");
    let (ok, value, shown) = list("secrets");
    assert_eq!((ok, value), (json!(true), json!([])), "a name the role may not see was told to exist: {shown}");
    // Where the role may see it, it is the error it always was.
    std::fs::write(fixture.root().join("open").join(std::ffi::OsStr::from_bytes(b"\xffx.txt")), "").expect("write");
    let (ok, _, shown) = list("open");
    assert_eq!(ok, false, "{shown}");
    assert!(shown.contains("illegal"), "{shown}");
}

/// A component may list the workspace root through the very descriptor the host preopened for
/// it (an `O_PATH` descriptor on the host), not only through one it opened from it.
#[test]
fn the_preopened_root_itself_can_be_listed() {
    let fixture = Fixture::new();
    for name in ["b.txt", "a.txt", "dir/c.txt"] {
        fixture.write(name, "");
    }
    let outcome = fixture.call("fs_probe", &json!({"ops": [{"op": "raw_list_preopen", "path": "."}]}));
    let output = outcome.result.expect("the probe runs");
    let result = &output.structured.expect("structured")[0];
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(result["value"], json!(["a.txt", "b.txt", "dir"]));
}
