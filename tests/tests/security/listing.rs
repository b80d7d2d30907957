//! `toolcell:tool/listing`, a directory's entries in one host call: a component that lists
//! through it sees exactly what `read-directory` shows it, entry by entry, for every role, and
//! a refused listing is refused and audited the same way.

use std::os::unix::ffi::OsStrExt;

use serde_json::{Value, json};
use toolcell_types::ToolErrorKind;

use super::boundary::results;
use super::fourth_pass::{TWO_ROLES, call_as};
use super::hardening::{Governed, assert_audited, governed};

/// The names in a `list` result (std's `read_dir`, one host call per entry).
fn names(result: &Value) -> Vec<String> {
    result["value"].as_array().expect("a listing").iter().map(|name| name.as_str().expect("a name").to_owned()).collect()
}

/// The `[name, kind]` pairs in a `list_all` result (one host call).
fn entries(result: &Value) -> Vec<(String, String)> {
    let listed = result["value"].as_array().unwrap_or_else(|| panic!("a listing: {result}"));
    listed.iter().map(|entry| (entry[0].as_str().expect("name").to_owned(), entry[1].as_str().expect("kind").to_owned())).collect()
}

#[test]
fn a_listing_in_one_host_call_shows_what_read_directory_shows() {
    let Governed { runtime, workspace, root, .. } =
        &governed(TWO_ROLES, &[(".env", "API_KEY=hidden\n"), ("src/a.txt", "a\n"), ("src/b/c.txt", "c\n"), ("docs/d.md", "d\n")]);
    std::os::unix::fs::symlink("a.txt", root.join("src/link")).expect("symlink");
    // A name that is not UTF-8: `read-directory-entry` gives an error in its place, and std
    // skips it; the one-call listing leaves it out.
    std::fs::write(root.join("src").join(std::ffi::OsStr::from_bytes(b"bad-\xff")), "x").expect("non-UTF-8 name");
    for (role, root_names) in [("impl", vec!["docs", "src"]), ("admin", vec![".env", "docs", "src"])] {
        let ops = json!([
            {"op": "list", "path": "."},
            {"op": "list_all", "path": "."},
            {"op": "list", "path": "src"},
            {"op": "list_all", "path": "src"},
        ]);
        let outcome = call_as(runtime, workspace, role, "fs_probe", &json!({ "ops": ops }));
        let results = results(&outcome);
        assert_eq!(results.len(), 4, "{role}: {:?}", outcome.result);
        assert!(results.iter().all(|result| result["ok"] == true), "{role}: {results:?}");
        for pair in results.chunks(2) {
            let one_call: Vec<String> = entries(&pair[1]).into_iter().map(|(name, _)| name).collect();
            assert_eq!(names(&pair[0]), one_call, "{role}: the one-call listing differs from read-directory's");
        }
        assert_eq!(names(&results[0]), root_names, "{role}: what the role may see of the root");
        let kinds = entries(&results[3]);
        let expected = [("a.txt", "file"), ("b", "directory"), ("link", "symlink")];
        assert_eq!(kinds, expected.map(|(name, kind)| (name.to_owned(), kind.to_owned())), "{role}");
    }
}

#[test]
fn a_listing_in_one_host_call_outside_the_workspace_is_refused_and_audited() {
    let Governed { runtime, workspace, root, state, _temp } = &governed(TWO_ROLES, &[("src/a.txt", "a\n")]);
    let outside = _temp.path().join("outside");
    std::fs::create_dir(&outside).expect("outside directory");
    std::fs::write(outside.join("host-only.txt"), "host\n").expect("outside file");
    std::os::unix::fs::symlink(&outside, root.join("src/out")).expect("symlink out");
    for path in ["..", "src/out", "/"] {
        let outcome = call_as(runtime, workspace, "impl", "fs_probe", &json!({ "ops": [{"op": "list_all", "path": path}] }));
        // Refused by the host: the call fails, and what the component made of it is withheld.
        let error = outcome.result.as_ref().expect_err(path);
        assert_eq!(error.kind, ToolErrorKind::Denied, "{path}: {error:?}");
        assert!(!format!("{error:?}").contains("host-only"), "{path}: {error:?}");
        assert_audited(state, &outcome, path);
    }
    // A file is not a directory: the listing fails with that error, as std's does.
    let outcome = call_as(runtime, workspace, "impl", "fs_probe", &json!({ "ops": [{"op": "list_all", "path": "src/a.txt"}] }));
    let results = results(&outcome);
    assert_eq!(results[0]["ok"], false, "{results:?}");
    assert!(results[0]["error"].as_str().is_some_and(|error| error.starts_with("NotADirectory")), "{results:?}");
}

/// `impl` may open `private` (reading) but not list it.
const LIST_DENIED: &str = r#"
version = 1

[roles.impl]
tools = ["*"]

[[roles.impl.rules]]
id = "impl-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "private-unlisted"
access = ["list"]
paths = ["private", "private/**"]
effect = "deny"
"#;

#[test]
fn the_listing_import_called_directly_is_judged_as_read_directory() {
    let Governed { runtime, workspace, state, .. } =
        &governed(LIST_DENIED, &[("private/key.txt", "k\n"), ("src/a.txt", "a\n"), (".env", "x\n")]);
    // A directory the role may open but not list: the import itself is refused, and audited.
    let outcome = call_as(runtime, workspace, "impl", "fs_probe", &json!({ "ops": [{"op": "raw_list_all", "path": "private"}] }));
    let error = outcome.result.as_ref().expect_err("listed a directory the role may not list");
    assert_eq!(error.kind, ToolErrorKind::Denied, "{error:?}");
    assert!(!format!("{error:?}").contains("key.txt"), "{error:?}");
    assert_audited(state, &outcome, "the listing of private");
    assert!(outcome.denials.iter().all(|denial| denial.event.operation == "read-directory"), "{:?}", outcome.denials);
    // Allowed: a directory, and the preopen root (a directory the role may not list is not
    // shown in it, as `read-directory` does not show it); a file is not a directory.
    let ops = json!([
        {"op": "raw_list_all", "path": "src"},
        {"op": "raw_list_all_preopen", "path": "."},
        {"op": "raw_list_all_file", "path": "src/a.txt"},
    ]);
    let outcome = call_as(runtime, workspace, "impl", "fs_probe", &json!({ "ops": ops }));
    let results = results(&outcome);
    assert_eq!(results.len(), 3, "{:?}", outcome.result);
    assert_eq!(results[0]["value"], json!(["a.txt"]), "{results:?}");
    assert_eq!(results[1]["value"], json!([".env", "src"]), "{results:?}");
    assert_eq!(results[2]["ok"], false, "{results:?}");
    assert!(results[2]["error"].as_str().is_some_and(|error| error.contains("not-directory")), "{results:?}");
}
