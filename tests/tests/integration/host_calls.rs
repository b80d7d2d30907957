//! What the built-in file tools cost the host, counted in filesystem calls: each call is
//! judged by the guard, so one a tool need not make is time every call pays. A tool that
//! looks at a path through `std::fs::metadata` makes two (wasi-libc also asks for the inode's
//! hash); the built-ins ask `stat-at` once, and `list_files` lists without looking first.

use serde_json::{Value, json};
use toolcell_tests::Fixture;

fn host_calls(fixture: &Fixture, tool: &str, args: Value) -> u64 {
    let outcome = fixture.call(tool, &args);
    assert!(outcome.result.is_ok(), "{tool}: {:?}", outcome.result);
    outcome.host_calls
}

#[test]
fn the_file_tools_make_only_the_host_calls_they_need() {
    let fixture = Fixture::new();
    let text: String = (0..64).map(|line| format!("line {line:02} of a small file\n")).collect();
    fixture.write("read.txt", &text);
    fixture.write("edit.txt", &text);
    for number in 0..100 {
        fixture.write(&format!("list/file-{number:03}.txt"), "x\n");
    }
    let read = host_calls(&fixture, "read_file", json!({"path": "read.txt"}));
    let list = host_calls(&fixture, "list_files", json!({"path": "list"}));
    fixture.call("read_file", &json!({"path": "edit.txt"}));
    let edit = host_calls(&fixture, "edit_file", json!({"path": "edit.txt", "old_string": "line 10", "new_string": "LINE 10"}));
    // As counted when the built-ins stopped looking through `std::fs::metadata` (which made
    // `read_file` 7 and `list_files` 107); `edit_file` one more since the calls that judge no
    // path count too (wasi-libc asks for the type of the file `std::fs::write` opens).
    let calls = [("read_file", read, 5), ("list_files", list, 104), ("edit_file", edit, 9)];
    for (tool, made, most) in calls {
        assert!(made <= most, "{tool} made {made} host calls, at most {most} expected: {calls:?}");
    }
}
