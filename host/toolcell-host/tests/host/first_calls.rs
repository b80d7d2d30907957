//! The built-in tools are described at load, and each one's code is deserialized from the
//! binary on its first call: first calls that race, and a tool's later calls, all run it.

use std::sync::Barrier;

use toolcell_host::builtin_runtime;
use toolcell_runtime::{CallRequest, Runtime, Workspace};

fn call(runtime: &Runtime, workspace: &Workspace, session: &str, tool: &str, args: &str) -> String {
    let outcome = runtime
        .call(&CallRequest::new(workspace, "impl", session, tool, args))
        .unwrap_or_else(|error| panic!("`{tool}` did not run: {error}"));
    match outcome.result {
        Ok(result) => result.text,
        Err(error) => panic!("`{tool}` failed: {}", error.message),
    }
}

#[test]
fn first_calls_of_every_tool_racing_on_eight_threads_all_run() {
    let temp = tempfile::tempdir().expect("temporary directory");
    std::fs::write(temp.path().join("notes.txt"), "alpha\nbeta needle\ngamma\n").expect("write a file");
    let runtime = builtin_runtime().build().expect("the built-in runtime builds");
    let workspace = Workspace::open(temp.path()).expect("workspace");
    let calls: [(&str, &str, &str); 4] = [
        ("read_file", r#"{"path": "notes.txt"}"#, "beta needle"),
        ("search_files", r#"{"query": "needle"}"#, "notes.txt"),
        ("list_files", r#"{"path": "."}"#, "notes.txt"),
        ("file_info", r#"{"path": "notes.txt"}"#, "notes.txt"),
    ];
    let start = Barrier::new(8);
    std::thread::scope(|scope| {
        for thread in 0..8 {
            let (runtime, workspace, start, calls) = (&runtime, &workspace, &start, &calls);
            scope.spawn(move || {
                let session = format!("racer-{thread}");
                start.wait();
                // Each thread takes the tools in its own order, so first calls of each tool race.
                for index in 0..calls.len() {
                    let (tool, args, expected) = calls[(index + thread) % calls.len()];
                    let text = call(runtime, workspace, &session, tool, args);
                    assert!(text.contains(expected), "`{tool}` answered: {text}");
                }
            });
        }
    });
    // The code deserialized by the race is the one later calls run.
    for (tool, args, expected) in calls {
        assert!(call(&runtime, &workspace, "after", tool, args).contains(expected), "{tool}");
    }
}
