//! The attack tables, by category. Each table is a list of concrete inputs; `run_all` checks
//! every requirement of the suite on each.

use serde_json::{Value, json};
use toolcell_runtime::CallOutcome;
use toolcell_tests::Fixture;
use toolcell_types::ToolErrorKind;

use crate::{Case, Expect, Snapshot, run_all};

/// A table of cases.
pub type Table = fn() -> Vec<Case>;

/// Every table, with its name.
pub const TABLES: &[(&str, Table)] = &[
    ("escaping paths through every tool", escaping_paths),
    ("foreign and encoded names", foreign_and_encoded),
    ("NUL, control characters and forged audit lines", control_characters),
    ("trailing slashes, dots and spellings of denied paths", spellings),
    ("symlinks planted in the workspace", planted_symlinks),
    ("links made by a hostile component", hostile_links),
    ("hard links", hard_links),
    ("case and Unicode variants against deny globs", case_and_unicode),
    ("special files and /proc", special_files),
    ("huge, sparse and many files", huge_and_many),
    ("regular-expression blow-ups", regex_blowups),
    ("CRLF and byte-order-mark edits", line_endings),
];

fn nothing(_: &Fixture) {}

fn case(name: impl Into<String>, setup: fn(&Fixture), tool: &'static str, args: Value, expect: Expect) -> Case {
    Case { name: name.into(), setup, tool, args, expect }
}

fn probe(op: &str, path: &str, to: &str) -> Value {
    json!({"ops": [{"op": op, "path": path, "to": to, "content": "pwned"}]})
}

/// A tool call that names `path` in its main argument, for each built-in tool that takes one.
fn through_every_tool(path: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("read_file", json!({"path": path})),
        ("read_many", json!({"paths": [path]})),
        ("file_info", json!({"path": path})),
        ("list_files", json!({"path": path})),
        ("directory_tree", json!({"path": path})),
        ("search_files", json!({"query": "CANARY", "path": path})),
        ("write_file", json!({"path": path, "content": "pwned"})),
        ("edit_file", json!({"path": path, "old_string": "CANARY", "new_string": "pwned"})),
        ("insert_text", json!({"path": path, "line": 0, "text": "pwned"})),
        ("create_directory", json!({"path": path})),
        ("delete_file", json!({"path": path, "recursive": true})),
        ("move_file", json!({"source": path, "destination": "stolen.txt"})),
        ("move_file", json!({"source": "src/main.rs", "destination": path, "overwrite": true})),
        ("apply_patch", json!({"patch": format!("*** Begin Patch\n*** Add File: {path}\n+pwned\n*** End Patch")})),
    ]
}

/// What a built-in tool's own check answers for a path that climbs out or is absolute: its
/// SDK refuses it (`denied`; `invalid-args` in a patch) before the host sees it. A read-only
/// tool that takes many paths (read_many) states the refusal in a result instead.
fn refused_by_the_sdk(tool: &str) -> Expect {
    match tool {
        "read_many" => Expect::Check(|fixture, before, outcome| small_answer(fixture, before, outcome, "Error (denied): ")),
        // A patch naming such a path is malformed.
        "apply_patch" => Expect::Fails(ToolErrorKind::InvalidArgs),
        _ => Expect::Fails(ToolErrorKind::Denied),
    }
}

/// Every `wasi:filesystem` operation a built-in tool makes on a path it was given, as `fs_probe`
/// makes it raw (the path as given, no SDK check): the host alone must refuse each.
fn raw_operations(path: &str) -> Vec<(&'static str, Value)> {
    let raw = |op: &str, path: &str, to: &str| json!({"ops": [{"op": op, "path": path, "to": to, "content": "pwned"}]});
    vec![
        ("raw_read", raw("raw_read", path, "")),
        ("raw_write", raw("raw_write", path, "")),
        ("raw_stat", raw("raw_stat", path, "")),
        ("raw_list", raw("raw_list", path, "")),
        ("raw_mkdir", raw("raw_mkdir", path, "")),
        ("raw_remove", raw("raw_remove", path, "")),
        ("raw_rmdir", raw("raw_rmdir", path, "")),
        ("raw_rename from", raw("raw_rename", path, "stolen.txt")),
        ("raw_rename to", raw("raw_rename", "src/main.rs", path)),
        ("raw_link from", raw("raw_link", path, "stolen.txt")),
        ("raw_link to", raw("raw_link", "src/main.rs", path)),
        ("raw_symlink at", raw("raw_symlink", path, "src/main.rs")),
    ]
}

const ESCAPES: &[&str] = &[
    "..",
    "../",
    "../..",
    "../outside/secret.txt",
    "../outside",
    "../workspace-sibling/secret.txt",
    "../workspace-sibling",
    "./../workspace-sibling/secret.txt",
    "src/../../outside/secret.txt",
    "src/./../../outside/secret.txt",
    "a/b/c/../../../../outside/secret.txt",
    "..//outside//secret.txt",
    "src/../src/../../workspace-sibling/secret.txt",
    "/etc/passwd",
    "/",
    "{BASE}/outside/secret.txt",
    "{BASE}/workspace-sibling/secret.txt",
    // Absolute, through the workspace and out again: folded, it lies outside.
    "{BASE}/workspace/../outside/secret.txt",
    "{BASE}/workspace/src/../../workspace-sibling/secret.txt",
    // `..` after a name that may be a symlink: never taken as a path into the workspace.
    "{BASE}/workspace/src/../secrets/key.pem",
];

fn escaping_paths() -> Vec<Case> {
    let mut cases = Vec::new();
    for path in ESCAPES {
        for (tool, args) in through_every_tool(path) {
            cases.push(case(format!("{tool} on `{path}`"), nothing, tool, args, refused_by_the_sdk(tool)));
        }
        // The same path with the SDK out of the way: the host's refusal is what is tested.
        for (op, args) in raw_operations(path) {
            cases.push(case(format!("fs_probe {op} `{path}`"), nothing, "fs_probe", args, Expect::Refused));
        }
    }
    // A long chain of `..`.
    let long = format!("{}etc/passwd", "../".repeat(64));
    cases.push(case("read_file on 64 `..`", nothing, "read_file", json!({"path": long}), Expect::Fails(ToolErrorKind::Denied)));
    cases.push(case(
        "write_file on 64 `..`",
        nothing,
        "write_file",
        json!({"path": long, "content": "x"}),
        Expect::Fails(ToolErrorKind::Denied),
    ));
    for op in ["raw_read", "raw_write"] {
        cases.push(case(format!("fs_probe {op} on 64 `..`"), nothing, "fs_probe", probe(op, &long, ""), Expect::Refused));
    }
    // The same escapes through `std::fs` in a component (wasi-libc's path handling in between).
    for path in ["../outside/secret.txt", "../workspace-sibling/secret.txt", "src/../../outside/secret.txt", "../outside/new.txt"] {
        for op in ["read", "write", "append", "stat", "list", "remove", "mkdir"] {
            cases.push(case(format!("fs_probe {op} `{path}`"), nothing, "fs_probe", probe(op, path, ""), Expect::Refused));
        }
    }
    cases.push(case(
        "fs_probe rename a file out",
        nothing,
        "fs_probe",
        probe("rename", "src/main.rs", "../outside/main.rs"),
        Expect::Refused,
    ));
    cases.push(case(
        "fs_probe rename a file in",
        nothing,
        "fs_probe",
        probe("rename", "../outside/secret.txt", "stolen.txt"),
        Expect::Refused,
    ));
    // A client's absolute path into the workspace reaches the tool workspace-relative, and
    // the answer shows no host path; a `file://` URI outside it is refused as an absolute path.
    cases.push(case(
        "read_file on the workspace's absolute path",
        nothing,
        "read_file",
        json!({"path": "{BASE}/workspace/src/main.rs"}),
        Expect::Check(|fixture, before, outcome| answered(fixture, before, outcome, "     1\tfn main() {}")),
    ));
    cases.push(case(
        "fs_probe read on the workspace's absolute path",
        nothing,
        "fs_probe",
        probe("read", "{BASE}/workspace/src/main.rs", ""),
        Expect::Check(|fixture, before, outcome| probe_value(fixture, before, outcome, &json!("fn main() {}\n"))),
    ));
    let outside = "file://{BASE}/outside/secret.txt";
    for (tool, args) in [("read_file", json!({"path": outside})), ("write_file", json!({"path": outside, "content": "x"}))] {
        cases.push(case(format!("{tool} on a file:// URI outside"), nothing, tool, args, Expect::Fails(ToolErrorKind::Denied)));
    }
    // wasi-libc reads an absolute path as one inside the workspace: `etc/passwd`, missing.
    cases.push(case("fs_probe absolute read", nothing, "fs_probe", probe("read", "/etc/passwd", ""), Expect::Check(probe_not_found)));
    cases.push(case(
        "fs_probe canonicalize",
        nothing,
        "fs_probe",
        probe("canonicalize", "src/main.rs", ""),
        Expect::Check(|fixture, before, outcome| probe_value(fixture, before, outcome, &json!("/src/main.rs"))),
    ));
    cases.push(case(
        "fs_probe cwd",
        nothing,
        "fs_probe",
        probe("cwd", ".", ""),
        Expect::Check(|fixture, before, outcome| probe_value(fixture, before, outcome, &json!("/"))),
    ));
    cases.push(case(
        "fs_probe environment",
        nothing,
        "fs_probe",
        probe("env", ".", ""),
        Expect::Check(|fixture, before, outcome| probe_value(fixture, before, outcome, &json!([]))),
    ));
    cases
}

/// The results of an `fs_probe` call that succeeded.
fn probe_results(outcome: &CallOutcome) -> Result<Vec<Value>, String> {
    let output = outcome.result.as_ref().map_err(|error| format!("the call failed: {error}"))?;
    Ok(output.structured.as_ref().and_then(|structured| structured.as_array()).cloned().unwrap_or_default())
}

/// `fs_probe`'s one operation succeeded with `value`, and changed nothing.
fn probe_value(fixture: &Fixture, before: &Snapshot, outcome: &CallOutcome, value: &Value) -> Result<(), String> {
    let results = probe_results(outcome)?;
    if results.len() != 1 || results[0]["ok"] != true || &results[0]["value"] != value {
        return Err(format!("expected the value {value}, got {results:?}"));
    }
    unchanged(fixture, before)
}

/// The workspace is as it was before the call.
fn unchanged(fixture: &Fixture, before: &Snapshot) -> Result<(), String> {
    let after = fixture.snapshot();
    if &after == before {
        return Ok(());
    }
    let gained: Vec<&(String, String)> = after.iter().filter(|entry| !before.contains(entry)).collect();
    let lost: Vec<&(String, String)> = before.iter().filter(|entry| !after.contains(entry)).collect();
    Err(format!("the workspace changed: now {gained:?}, before {lost:?}"))
}

/// `fs_probe`'s one operation found nothing there (and the host refused nothing).
fn probe_not_found(fixture: &Fixture, before: &Snapshot, outcome: &CallOutcome) -> Result<(), String> {
    let results = probe_results(outcome)?;
    if results.len() != 1 || results[0]["ok"] != false || !results[0]["error"].as_str().is_some_and(|error| error.starts_with("NotFound")) {
        return Err(format!("expected not-found, got {results:?}"));
    }
    unchanged(fixture, before)
}

fn foreign_and_encoded() -> Vec<Case> {
    let mut cases = Vec::new();
    for path in [
        "C:\\Windows\\win.ini",
        "c:/x",
        "C:",
        "\\\\server\\share\\x",
        "//server/share",
        "\\etc\\passwd",
        "~",
        "~/.ssh/id_rsa",
        "~root/.bashrc",
    ] {
        for tool in ["read_file", "write_file", "list_files"] {
            let args = if tool == "write_file" { json!({"path": path, "content": "x"}) } else { json!({"path": path}) };
            cases.push(case(format!("{tool} on foreign `{path}`"), nothing, tool, args, Expect::Fails(ToolErrorKind::Denied)));
        }
        // To the host, only an absolute path leaves the workspace; the others are names in it.
        let raw = if path.starts_with('/') { Expect::Refused } else { Expect::Contained };
        cases.push(case(format!("fs_probe raw_read on foreign `{path}`"), nothing, "fs_probe", probe("raw_read", path, ""), raw));
    }
    // Encodings are names, not escapes: they stay literal inside the workspace.
    for path in [
        "%2e%2e/outside/secret.txt",
        "%2e%2e%2foutside%2fsecret.txt",
        "..%2f..%2foutside",
        "..\\outside\\secret.txt",
        "..%5c..%5coutside",
        "%252e%252e/x",
        "..%c0%af..%c0%afetc",
        "\u{2025}/outside",
        "\u{ff0e}\u{ff0e}/outside/secret.txt",
        "...",
        "..../x",
    ] {
        cases.push(case(
            format!("read_file on encoded `{path}`"),
            nothing,
            "read_file",
            json!({"path": path}),
            Expect::Fails(ToolErrorKind::NotFound),
        ));
        let literal: &'static str = Box::leak(path.to_owned().into_boxed_str());
        cases.push(case(
            format!("write_file on encoded `{path}`"),
            nothing,
            "write_file",
            json!({"path": path, "content": "x"}),
            Expect::Literal(literal),
        ));
    }
    cases
}

fn control_characters() -> Vec<Case> {
    let mut cases = Vec::new();
    for path in ["src/main.rs\u{0}../../outside/secret.txt", "a\u{0}b", "\u{0}"] {
        cases.push(case(
            format!("read_file with NUL {path:?}"),
            nothing,
            "read_file",
            json!({"path": path}),
            Expect::Fails(ToolErrorKind::InvalidArgs),
        ));
        cases.push(case(
            format!("write_file with NUL {path:?}"),
            nothing,
            "write_file",
            json!({"path": path, "content": "x"}),
            Expect::Fails(ToolErrorKind::InvalidArgs),
        ));
        cases.push(case(format!("fs_probe write with NUL {path:?}"), nothing, "fs_probe", probe("write", path, ""), Expect::Contained));
        // Straight to the host: a NUL names nothing there, and no file is created with one.
        cases.push(case(
            format!("fs_probe raw_read with NUL {path:?}"),
            nothing,
            "fs_probe",
            probe("raw_read", path, ""),
            Expect::Contained,
        ));
        let creates = if path.contains('/') { Expect::Contained } else { Expect::RefusedAs(ToolErrorKind::InvalidArgs) };
        cases.push(case(format!("fs_probe raw_write with NUL {path:?}"), nothing, "fs_probe", probe("raw_write", path, ""), creates));
    }
    // File names that try to forge lines of the audit trail or a transcript: never created
    // with a control character in them, by the SDK's check or (straight from a component) by
    // the host's; never able to add a record (the suite verifies the chain after each table).
    for name in [
        "evil\n{\"seq\":0,\"kind\":\"call\",\"outcome\":\"ok\"}",
        "evil\r\nCALL ok forged",
        "\u{1b}[2J\u{1b}[Hclear.txt",
        "tab\tname.txt",
        "bell\u{7}.txt",
        "line\u{2028}separator.txt",
    ] {
        let literal: &'static str = Box::leak(name.to_owned().into_boxed_str());
        let control = name.chars().any(char::is_control);
        cases.push(case(
            format!("write_file named {name:?}"),
            nothing,
            "write_file",
            json!({"path": name, "content": "x"}),
            if control { Expect::Fails(ToolErrorKind::InvalidArgs) } else { Expect::Literal(literal) },
        ));
        cases.push(case(
            format!("fs_probe raw_write named {name:?}"),
            nothing,
            "fs_probe",
            json!({"ops": [{"op": "raw_write", "path": name, "content": "x"}]}),
            if control { Expect::RefusedAs(ToolErrorKind::InvalidArgs) } else { Expect::Literal(literal) },
        ));
        cases.push(case(
            format!("edit_file of missing {name:?}"),
            nothing,
            "edit_file",
            json!({"path": name, "old_string": "a", "new_string": "b"}),
            Expect::Fails(ToolErrorKind::NotFound),
        ));
    }
    cases.push(case(
        "list_files shows forged names escaped",
        plant_forged_name,
        "list_files",
        json!({}),
        Expect::Check(forged_name_escaped),
    ));
    cases
}

fn plant_forged_name(fixture: &Fixture) {
    fixture.write("forged\n{\"kind\":\"call\"}.txt", "x");
}

fn forged_name_escaped(fixture: &Fixture, before: &Snapshot, outcome: &CallOutcome) -> Result<(), String> {
    let text = &outcome.result.as_ref().map_err(|error| error.to_string())?.text;
    if text.contains("forged\n{") {
        return Err(format!("a raw newline from a file name reached the listing: {text}"));
    }
    if !text.contains("forged\\n{\"kind\":\"call\"}.txt") {
        return Err(format!("the forged name is not listed, escaped: {text}"));
    }
    unchanged(fixture, before)
}

fn spellings() -> Vec<Case> {
    let mut cases = Vec::new();
    for path in [
        "secrets/key.pem",
        "secrets/key.pem/",
        "secrets/key.pem/.",
        "secrets//key.pem",
        "secrets/./key.pem",
        "./secrets/key.pem",
        "src/../secrets/key.pem",
        "secrets/../secrets/key.pem",
        "secrets",
        // A client's absolute path or URI into the workspace is the workspace-relative path:
        // the policy judges it as it judges that one.
        "{BASE}/workspace/secrets/key.pem",
        "file://{BASE}/workspace/secrets/key.pem",
    ] {
        // The directory itself: read_file answers that it is one (the role may list it).
        let expect = if path == "secrets" { Expect::Fails(ToolErrorKind::Unsupported) } else { Expect::Refused };
        cases.push(case(format!("read_file on hidden `{path}`"), nothing, "read_file", json!({"path": path}), expect));
        cases.push(case(format!("fs_probe read on hidden `{path}`"), nothing, "fs_probe", probe("read", path, ""), Expect::Refused));
    }
    cases.push(case(
        "search_files for the secret",
        nothing,
        "search_files",
        json!({"query": "PRIVATE"}),
        Expect::Check(|fixture, before, outcome| answered(fixture, before, outcome, "No matches for `PRIVATE` in `.`.")),
    ));
    cases.push(case(
        "search_files inside the hidden directory",
        nothing,
        "search_files",
        json!({"query": "PRIVATE", "path": "secrets"}),
        Expect::Check(|fixture, before, outcome| answered(fixture, before, outcome, "No matches for `PRIVATE` in `secrets`.")),
    ));
    for path in [
        "docs/guide.md",
        "docs/guide.md/",
        "docs//guide.md",
        "docs/./guide.md",
        "src/../docs/guide.md",
        "./docs/guide.md",
        "docs/new.md",
        "docs",
        "{BASE}/workspace/docs/guide.md",
        "file://{BASE}/workspace/docs/new.md",
    ] {
        // The directory itself: write_file answers that it is one.
        let expect = if path == "docs" { Expect::Fails(ToolErrorKind::Unsupported) } else { Expect::Refused };
        cases.push(case(format!("write_file on protected `{path}`"), nothing, "write_file", json!({"path": path, "content": "x"}), expect));
        cases.push(case(format!("fs_probe write on protected `{path}`"), nothing, "fs_probe", probe("write", path, ""), Expect::Refused));
    }
    cases.push(case("delete_file on protected docs", nothing, "delete_file", json!({"path": "docs", "recursive": true}), Expect::Refused));
    cases.push(case("move_file of protected docs", nothing, "move_file", json!({"source": "docs", "destination": "d2"}), Expect::Refused));
    cases.push(case(
        "move a directory holding protected docs",
        nest_docs,
        "move_file",
        json!({"source": "docs", "destination": "elsewhere-docs"}),
        Expect::Refused,
    ));
    cases
}

fn nest_docs(fixture: &Fixture) {
    fixture.write("docs/deep/er/notes.md", "notes");
}

/// The call succeeded with exactly `text`, and changed nothing.
fn answered(fixture: &Fixture, before: &Snapshot, outcome: &CallOutcome, text: &str) -> Result<(), String> {
    let output = outcome.result.as_ref().map_err(|error| format!("expected `{text}`, failed: {error}"))?;
    if output.text != text {
        return Err(format!("expected `{text}`, got `{}`", output.text));
    }
    unchanged(fixture, before)
}

fn plant_links(fixture: &Fixture) {
    let link = |target: &str, name: &str| {
        let path = fixture.root().join(name);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("parent");
        std::os::unix::fs::symlink(target, path).expect("symlink");
    };
    let base = fixture.base();
    link("../outside/secret.txt", "out-file");
    link("../outside", "out-dir");
    link("../workspace-sibling", "sibling");
    link(&base.join("outside/secret.txt").to_string_lossy(), "absolute");
    link("c2", "c1");
    link("c3", "c2");
    link("../outside/secret.txt", "c3");
    link("../outside/new.txt", "dangling");
    link("loop-b", "loop-a");
    link("loop-a", "loop-b");
    link("self", "self");
    link("../..", "src/up");
    link("../../../outside", "src/nested/out");
    link("secrets/key.pem", "alias");
    link("secrets", "secrets-alias");
    link("docs", "docs-alias");
    link("docs/guide.md", "guide-alias");
}

fn planted_symlinks() -> Vec<Case> {
    let mut cases = Vec::new();
    for path in [
        "out-file",
        "out-dir/secret.txt",
        "sibling/secret.txt",
        "absolute",
        "c1",
        "src/up/outside/secret.txt",
        "src/nested/out/secret.txt",
        "src/up/workspace/../outside/secret.txt",
        "alias",
        "secrets-alias/key.pem",
    ] {
        // `impl` may write `secrets/**` (it only may not read it), so writes through the aliases
        // are allowed; reads are not.
        let hidden_alias = path.starts_with("alias") || path.starts_with("secrets-alias");
        for tool in ["read_file", "edit_file", "write_file", "insert_text"] {
            if hidden_alias && tool == "write_file" {
                continue;
            }
            let args = match tool {
                "read_file" => json!({"path": path}),
                "edit_file" => json!({"path": path, "old_string": "CANARY", "new_string": "x"}),
                "insert_text" => json!({"path": path, "line": 0, "text": "x"}),
                _ => json!({"path": path, "content": "x"}),
            };
            cases.push(case(format!("{tool} through link `{path}`"), plant_links, tool, args, Expect::Refused));
        }
        cases.push(case(format!("fs_probe read through link `{path}`"), plant_links, "fs_probe", probe("read", path, ""), Expect::Refused));
        if !hidden_alias {
            cases.push(case(
                format!("fs_probe write through link `{path}`"),
                plant_links,
                "fs_probe",
                probe("write", path, ""),
                Expect::Refused,
            ));
        }
    }
    cases.push(case(
        "list_files through an alias of the hidden directory",
        plant_links,
        "list_files",
        json!({"path": "secrets-alias"}),
        Expect::Check(|fixture, before, outcome| answered(fixture, before, outcome, "`secrets-alias` is empty.")),
    ));
    // A loop leads nowhere: the host's answer is a failure, not a refusal.
    let leads =
        |path: &str| if path.starts_with("loop") || path == "self" { Expect::Fails(ToolErrorKind::Failed) } else { Expect::Refused };
    for path in ["out-dir", "sibling", "src/up", "loop-a", "self"] {
        cases.push(case(format!("list_files through link `{path}`"), plant_links, "list_files", json!({"path": path}), leads(path)));
    }
    for path in ["loop-a", "self", "c1"] {
        cases.push(case(format!("read_file on looping or chained `{path}`"), plant_links, "read_file", json!({"path": path}), leads(path)));
    }
    // Creating through a dangling link or a linked parent directory must not create outside.
    cases.push(case(
        "write through a dangling link",
        plant_links,
        "write_file",
        json!({"path": "dangling", "content": "x"}),
        Expect::Refused,
    ));
    cases.push(case("fs_probe create through a dangling link", plant_links, "fs_probe", probe("write", "dangling", ""), Expect::Refused));
    cases.push(case(
        "write under a linked parent",
        plant_links,
        "write_file",
        json!({"path": "out-dir/new.txt", "content": "x"}),
        Expect::Refused,
    ));
    cases.push(case("mkdir under a linked parent", plant_links, "create_directory", json!({"path": "out-dir/newdir"}), Expect::Refused));
    cases.push(case(
        "patch adding under a linked parent",
        plant_links,
        "apply_patch",
        json!({"patch": "*** Begin Patch\n*** Add File: out-dir/p.txt\n+x\n*** End Patch"}),
        Expect::Refused,
    ));
    // Protected paths are judged on the canonical path, not the name used.
    cases.push(case(
        "write docs through a directory alias",
        plant_links,
        "write_file",
        json!({"path": "docs-alias/guide.md", "content": "x"}),
        Expect::Refused,
    ));
    cases.push(case(
        "edit docs through a file alias",
        plant_links,
        "edit_file",
        json!({"path": "guide-alias", "old_string": "Guide", "new_string": "x"}),
        Expect::Refused,
    ));
    // Safe: a search or a tree walks past links without following them.
    cases.push(case(
        "search_files past every planted link",
        plant_links,
        "search_files",
        json!({"query": "CANARY"}),
        Expect::Check(|fixture, before, outcome| answered(fixture, before, outcome, "No matches for `CANARY` in `.`.")),
    ));
    cases.push(case("directory_tree past every planted link", plant_links, "directory_tree", json!({"depth": 5}), Expect::Contained));
    cases.push(case(
        "delete_file removes a link, not its target",
        plant_links,
        "delete_file",
        json!({"path": "out-file"}),
        Expect::Check(link_removed),
    ));
    cases
}

fn link_removed(fixture: &Fixture, before: &Snapshot, outcome: &CallOutcome) -> Result<(), String> {
    outcome.result.as_ref().map_err(|error| error.to_string())?;
    let expected: Snapshot = before.iter().filter(|(path, _)| path != "out-file").cloned().collect();
    if fixture.snapshot() != expected {
        return Err(format!("only the link `out-file` goes: {:?}", fixture.snapshot()));
    }
    Ok(())
}

fn hostile_links() -> Vec<Case> {
    let mut cases = Vec::new();
    for target in [
        "../outside/secret.txt",
        "../outside",
        "{BASE}/outside/secret.txt",
        "/etc/passwd",
        "/proc/self/root",
        "src/../../outside",
        "../workspace-sibling",
    ] {
        cases.push(case(
            format!("fs_probe plants a link to `{target}`"),
            nothing,
            "fs_probe",
            probe("symlink", "planted", target),
            Expect::Refused,
        ));
    }
    cases.push(case(
        "fs_probe plants a link in a subdirectory",
        nothing,
        "fs_probe",
        probe("symlink", "src/planted", "../../outside"),
        Expect::Refused,
    ));
    for (path, to) in [
        ("../outside/secret.txt", "stolen.txt"),
        ("secrets/key.pem", "visible.pem"),
        ("docs/guide.md", "src/guide-link.md"),
        ("src/main.rs", "../outside/main.rs"),
    ] {
        cases.push(case(
            format!("fs_probe hard-links `{path}` to `{to}`"),
            nothing,
            "fs_probe",
            probe("hard_link", path, to),
            Expect::Refused,
        ));
    }
    cases.push(case(
        "fs_probe renames a hidden file into view",
        nothing,
        "fs_probe",
        probe("rename", "secrets/key.pem", "public.pem"),
        Expect::Refused,
    ));
    cases.push(case(
        "fs_probe renames the hidden directory into view",
        nothing,
        "fs_probe",
        probe("rename", "secrets", "public"),
        Expect::Refused,
    ));
    cases.push(case(
        "move_file of a hidden file into view",
        nothing,
        "move_file",
        json!({"source": "secrets/key.pem", "destination": "public.pem"}),
        Expect::Refused,
    ));
    cases
}

fn plant_hard_links(fixture: &Fixture) {
    std::fs::hard_link(fixture.base().join("elsewhere/linked.txt"), fixture.root().join("hard.txt")).expect("hard link");
    std::fs::hard_link(fixture.root().join("docs/guide.md"), fixture.root().join("src/guide-copy.md")).expect("hard link");
    std::fs::hard_link(fixture.root().join("secrets/key.pem"), fixture.root().join("src/key-copy.pem")).expect("hard link");
}

fn hard_links() -> Vec<Case> {
    let mut cases = Vec::new();
    for path in ["hard.txt", "src/guide-copy.md"] {
        cases.push(case(
            format!("write_file through hard link `{path}`"),
            plant_hard_links,
            "write_file",
            json!({"path": path, "content": "x"}),
            Expect::Refused,
        ));
        cases.push(case(
            format!("edit_file through hard link `{path}`"),
            plant_hard_links,
            "edit_file",
            // Text each file holds once, so that the edit gets as far as its write.
            json!({"path": path, "old_string": if path == "hard.txt" { "ELSEWHERE" } else { "Guide" }, "new_string": "x"}),
            Expect::Refused,
        ));
        cases.push(case(
            format!("fs_probe append through hard link `{path}`"),
            plant_hard_links,
            "fs_probe",
            probe("append", path, ""),
            Expect::Refused,
        ));
        cases.push(case(
            format!("fs_probe truncate through hard link `{path}`"),
            plant_hard_links,
            "fs_probe",
            probe("truncate", path, ""),
            Expect::Refused,
        ));
        cases.push(case(
            format!("move_file over hard link `{path}`"),
            plant_hard_links,
            "move_file",
            json!({"source": "src/main.rs", "destination": path, "overwrite": true}),
            Expect::Refused,
        ));
    }
    // Reads through a link another program planted: to a file outside, and to the hidden
    // secret under a name the role may read.
    for path in ["hard.txt", "src/key-copy.pem"] {
        cases.push(case(
            format!("read_file through hard link `{path}`"),
            plant_hard_links,
            "read_file",
            json!({"path": path}),
            Expect::Refused,
        ));
        cases.push(case(
            format!("fs_probe read through hard link `{path}`"),
            plant_hard_links,
            "fs_probe",
            probe("read", path, ""),
            Expect::Refused,
        ));
    }
    cases
}

fn case_and_unicode() -> Vec<Case> {
    let mut cases = Vec::new();
    // A filesystem that tells these names apart gives none of them the hidden file's content.
    for path in [
        "SECRETS/key.pem",
        "Secrets/Key.pem",
        "secrets/KEY.PEM",
        "\u{ff53}ecrets/key.pem",
        "secrets\u{200b}/key.pem",
        "secret\u{73}\u{301}/key.pem",
    ] {
        // Only the spelling the deny glob matches is refused; the others are missing files.
        let expect = if path.starts_with("secrets/") { Expect::Refused } else { Expect::Fails(ToolErrorKind::NotFound) };
        cases.push(case(format!("read_file on variant `{path}`"), nothing, "read_file", json!({"path": path}), expect));
    }
    // Writing a variant of a protected name creates a different file and leaves the
    // protected one alone.
    for path in ["DOCS/guide.md", "Docs/guide.md", "cafe\u{301}/menu.txt", "CAFÉ/menu.txt"] {
        let literal: &'static str = Box::leak(path.to_owned().into_boxed_str());
        cases.push(case(
            format!("write_file on variant `{path}`"),
            nothing,
            "write_file",
            json!({"path": path, "content": "x"}),
            Expect::Literal(literal),
        ));
    }
    cases.push(case(
        "write_file on the protected NFC name",
        nothing,
        "write_file",
        json!({"path": "café/menu.txt", "content": "x"}),
        Expect::Refused,
    ));
    cases.push(case("fs_probe write on the protected NFC name", nothing, "fs_probe", probe("write", "café/menu.txt", ""), Expect::Refused));
    cases
}

fn plant_specials(fixture: &Fixture) {
    let status = std::process::Command::new("mkfifo").arg(fixture.root().join("pipe")).status().expect("mkfifo");
    assert!(status.success(), "mkfifo failed");
    for (target, name) in [
        ("/dev/zero", "zero"),
        ("/dev/null", "null"),
        ("/proc/self/root", "proc-root"),
        ("/proc/self/cwd", "proc-cwd"),
        ("/proc/self/fd/0", "fd0"),
        ("/proc/self/environ", "environ"),
    ] {
        std::os::unix::fs::symlink(target, fixture.root().join(name)).expect("symlink");
    }
}

fn special_files() -> Vec<Case> {
    let mut cases = Vec::new();
    for path in ["pipe", "zero", "null", "proc-root/etc/passwd", "proc-cwd", "fd0", "environ"] {
        // read_file looks before it opens, and declines a FIFO itself; the host refuses the
        // rest (links that lead outside), and opening a FIFO at all.
        let expect = if path == "pipe" { Expect::Fails(ToolErrorKind::Unsupported) } else { Expect::Refused };
        cases.push(case(format!("read_file on special `{path}`"), plant_specials, "read_file", json!({"path": path}), expect));
        cases.push(case(
            format!("fs_probe read on special `{path}`"),
            plant_specials,
            "fs_probe",
            probe("read", path, ""),
            Expect::Refused,
        ));
    }
    cases.push(case(
        "write_file on a FIFO",
        plant_specials,
        "write_file",
        json!({"path": "pipe", "content": "x"}),
        Expect::Fails(ToolErrorKind::Unsupported),
    ));
    cases.push(case("fs_probe write on a FIFO", plant_specials, "fs_probe", probe("write", "pipe", ""), Expect::Refused));
    cases.push(case(
        "search_files past a FIFO",
        plant_specials,
        "search_files",
        json!({"query": "zzz"}),
        Expect::Check(|fixture, before, outcome| answered(fixture, before, outcome, "No matches for `zzz` in `.`.")),
    ));
    cases.push(case(
        "read_many with a FIFO",
        plant_specials,
        "read_many",
        json!({"paths": ["pipe", "src/main.rs"]}),
        Expect::Check(|fixture, before, outcome| {
            let text = output_text(outcome)?;
            if !text.contains("Error (unsupported): `pipe` is not a regular file") || !text.contains("fn main() {}") {
                return Err(format!("expected the FIFO declined and the file read: {text}"));
            }
            unchanged(fixture, before)
        }),
    ));
    for path in ["/proc/self/environ", "/proc/self/mem", "/dev/zero"] {
        cases.push(case(
            format!("read_file on absolute `{path}`"),
            nothing,
            "read_file",
            json!({"path": path}),
            Expect::Fails(ToolErrorKind::Denied),
        ));
        cases.push(case(
            format!("fs_probe raw_read on absolute `{path}`"),
            nothing,
            "fs_probe",
            probe("raw_read", path, ""),
            Expect::Refused,
        ));
    }
    cases
}

fn plant_sparse(fixture: &Fixture) {
    let file = std::fs::File::create(fixture.root().join("sparse.bin")).expect("create");
    file.set_len(8 << 30).expect("an 8 GiB sparse file");
}

fn plant_big_text(fixture: &Fixture) {
    let line = "a line of text that is not very interesting\n";
    fixture.write("big.txt", line.repeat((24 << 20) / line.len()));
}

fn plant_bomb(fixture: &Fixture) {
    for index in 0..5000 {
        std::fs::write(fixture.root().join(format!("src/f{index:05}.txt")), "").expect("file");
    }
    let mut deep = fixture.root().join("deep");
    for _ in 0..150 {
        deep.push("d");
    }
    std::fs::create_dir_all(&deep).expect("deep directories");
    std::fs::write(deep.join("bottom.txt"), "bottom").expect("bottom");
}

/// The text of a call that succeeded.
fn output_text(outcome: &CallOutcome) -> Result<&str, String> {
    outcome.result.as_ref().map(|output| output.text.as_str()).map_err(|error| format!("the call failed: {error}"))
}

/// The call succeeded with at most 600 KiB of text holding `part`, and changed nothing.
fn small_answer(fixture: &Fixture, before: &Snapshot, outcome: &CallOutcome, part: &str) -> Result<(), String> {
    let text = output_text(outcome)?;
    if text.len() > 600 * 1024 {
        return Err(format!("{} bytes of output", text.len()));
    }
    if !text.contains(part) {
        return Err(format!("expected `{part}` in the answer: {}", text.chars().take(2000).collect::<String>()));
    }
    unchanged(fixture, before)
}

fn huge_and_many() -> Vec<Case> {
    vec![
        // A NUL in its first 8 KiB: binary, declined before it is read.
        case(
            "read_file on an 8 GiB sparse file",
            plant_sparse,
            "read_file",
            json!({"path": "sparse.bin"}),
            Expect::Fails(ToolErrorKind::Unsupported),
        ),
        // The component runs out of its memory limit, and the call fails with nothing changed.
        case(
            "edit_file on an 8 GiB sparse file",
            plant_sparse,
            "edit_file",
            json!({"path": "sparse.bin", "old_string": "a", "new_string": "b"}),
            Expect::Fails(ToolErrorKind::Failed),
        ),
        case(
            "search_files over an 8 GiB sparse file",
            plant_sparse,
            "search_files",
            json!({"query": "a"}),
            Expect::Check(|fixture, before, outcome| answered(fixture, before, outcome, "src/main.rs")),
        ),
        case(
            "file_info on an 8 GiB sparse file",
            plant_sparse,
            "file_info",
            json!({"path": "sparse.bin"}),
            Expect::Check(|fixture, before, outcome| small_answer(fixture, before, outcome, "size: 8589934592 bytes")),
        ),
        case(
            "read_file on 24 MiB of text",
            plant_big_text,
            "read_file",
            json!({"path": "big.txt"}),
            Expect::Check(|fixture, before, outcome| small_answer(fixture, before, outcome, "     1\ta line of text")),
        ),
        case(
            "read_file far into 24 MiB of text",
            plant_big_text,
            "read_file",
            json!({"path": "big.txt", "offset": 500_000, "limit": 100_000}),
            Expect::Check(|fixture, before, outcome| small_answer(fixture, before, outcome, "500000\ta line of text")),
        ),
        case(
            "read_many of 24 MiB twice",
            plant_big_text,
            "read_many",
            json!({"paths": ["big.txt", "big.txt"]}),
            Expect::Check(|fixture, before, outcome| small_answer(fixture, before, outcome, "==> big.txt <==")),
        ),
        case(
            "search_files over 24 MiB of matches",
            plant_big_text,
            "search_files",
            json!({"query": "line"}),
            Expect::Check(|fixture, before, outcome| small_answer(fixture, before, outcome, "[skipped: 1 over 16 MiB]")),
        ),
        case(
            "list_files over 5,000 files and 150 levels",
            plant_bomb,
            "list_files",
            json!({"recursive": true}),
            Expect::Check(|fixture, before, outcome| small_answer(fixture, before, outcome, "deep/d/d/")),
        ),
        case(
            "directory_tree over 5,000 files",
            plant_bomb,
            "directory_tree",
            json!({"depth": 20}),
            Expect::Check(|fixture, before, outcome| small_answer(fixture, before, outcome, "\"name\": \"deep\"")),
        ),
        case(
            "search_files over 5,000 files and 150 levels",
            plant_bomb,
            "search_files",
            json!({"query": "bottom"}),
            Expect::Check(|fixture, before, outcome| small_answer(fixture, before, outcome, "/d/bottom.txt")),
        ),
        case(
            "file_info on a 5,000-entry directory",
            plant_bomb,
            "file_info",
            json!({"path": "src"}),
            Expect::Check(|fixture, before, outcome| small_answer(fixture, before, outcome, "entries: 5001")),
        ),
    ]
}

fn plant_regex_bait(fixture: &Fixture) {
    fixture.write("bait.txt", format!("{}!\n", "a".repeat(100_000)));
}

fn regex_blowups() -> Vec<Case> {
    let mut cases = Vec::new();
    // Patterns that backtrack forever elsewhere: a linear-time engine answers at once.
    for query in ["(a+)+$", "(a*)*b", "(a|aa)+$", "((((((((a*)*)*)*)*)*)*)*)*c"] {
        cases.push(case(
            format!("search_files with `{query}`"),
            plant_regex_bait,
            "search_files",
            json!({"query": query}),
            Expect::Check(|fixture, before, outcome| {
                let text = output_text(outcome)?;
                if !text.starts_with("No matches for `") {
                    return Err(format!("expected no match: {text}"));
                }
                unchanged(fixture, before)
            }),
        ));
    }
    // Patterns too big to compile, or malformed: refused as arguments.
    for query in ["a{1000}{1000}", "(?:a{100}){100}{100}", "[", "(?P<x>", "\\p{NoSuchClass}", "x{99999999}"] {
        cases.push(case(
            format!("search_files with `{query}`"),
            plant_regex_bait,
            "search_files",
            json!({"query": query}),
            Expect::Fails(ToolErrorKind::InvalidArgs),
        ));
    }
    cases
}

fn plant_crlf(fixture: &Fixture) {
    fixture.write("win.txt", "\u{feff}first\r\nsecond\r\nthird\r\n");
}

fn crlf_kept(fixture: &Fixture, before: &Snapshot, outcome: &CallOutcome) -> Result<(), String> {
    outcome.result.as_ref().map_err(|error| error.to_string())?;
    let others = |snapshot: &Snapshot| snapshot.iter().filter(|(path, _)| path != "win.txt").cloned().collect::<Snapshot>();
    if others(&fixture.snapshot()) != others(before) {
        return Err(format!("more than `win.txt` changed: {:?}", fixture.snapshot()));
    }
    let bytes = fixture.read("win.txt");
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 any more".to_owned())?;
    if !text.starts_with('\u{feff}') {
        return Err(format!("the byte-order mark was lost: {text:?}"));
    }
    if text.matches('\n').count() != text.matches("\r\n").count() {
        return Err(format!("line endings were mixed: {text:?}"));
    }
    Ok(())
}

fn line_endings() -> Vec<Case> {
    vec![
        case(
            "edit_file across a CRLF line break",
            plant_crlf,
            "edit_file",
            json!({"path": "win.txt", "old_string": "first\r\nsecond", "new_string": "1\n2"}),
            Expect::Check(crlf_kept),
        ),
        case(
            "edit_file with LF on a CRLF file",
            plant_crlf,
            "edit_file",
            json!({"path": "win.txt", "old_string": "second\nthird", "new_string": "x"}),
            Expect::Check(crlf_kept),
        ),
        case(
            "edit_file that names the BOM",
            plant_crlf,
            "edit_file",
            json!({"path": "win.txt", "old_string": "\u{feff}first", "new_string": "x"}),
            Expect::Fails(ToolErrorKind::Conflict),
        ),
        case(
            "insert_text into a CRLF file",
            plant_crlf,
            "insert_text",
            json!({"path": "win.txt", "line": 3, "text": "fourth\nfifth"}),
            Expect::Check(crlf_kept),
        ),
        case(
            "apply_patch on a CRLF file",
            plant_crlf,
            "apply_patch",
            json!({"patch": "*** Begin Patch\n*** Update File: win.txt\n@@\n-second\n+2nd\n*** End Patch"}),
            Expect::Check(crlf_kept),
        ),
        case(
            "edit_file with a lone CR",
            plant_crlf,
            "edit_file",
            json!({"path": "win.txt", "old_string": "first\r", "new_string": "x"}),
            Expect::Fails(ToolErrorKind::Conflict),
        ),
    ]
}

#[test]
fn escaping_paths_through_every_tool() {
    run_all(&escaping_paths());
}

#[test]
fn foreign_and_encoded_names() {
    run_all(&foreign_and_encoded());
}

#[test]
fn nul_control_characters_and_forged_audit_lines() {
    run_all(&control_characters());
}

#[test]
fn spellings_of_denied_paths() {
    run_all(&spellings());
}

#[test]
fn symlinks_planted_in_the_workspace() {
    run_all(&planted_symlinks());
}

#[test]
fn links_made_by_a_hostile_component() {
    run_all(&hostile_links());
}

#[test]
fn planted_hard_links() {
    run_all(&hard_links());
}

#[test]
fn case_and_unicode_variants() {
    run_all(&case_and_unicode());
}

#[test]
fn special_files_and_proc() {
    run_all(&special_files());
}

#[test]
fn huge_sparse_and_many_files() {
    run_all(&huge_and_many());
}

#[test]
fn regular_expression_blowups() {
    run_all(&regex_blowups());
}

#[test]
fn crlf_and_bom_edits() {
    run_all(&line_endings());
}

#[test]
fn error_kinds_stay_typed() {
    // A spot check that refusals of escapes are `denied` (not a generic failure).
    let fixture = crate::scene();
    let outcome = crate::call(&fixture, "kinds", "read_file", &json!({"path": "../outside/secret.txt"}));
    assert_eq!(outcome.result.err().map(|error| error.kind), Some(ToolErrorKind::Denied));
}
