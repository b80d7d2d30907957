//! `toolcell demo`: a short scripted agent session over a fresh workspace, through every
//! built-in tool and the real host, including a refused escape.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use toolcell_runtime::{CallRequest, Runtime, Workspace};

const MAIN_RS: &str = "fn main() {\n    let name = \"world\";\n    println!(\"Hello, {name}!\");\n}\n";
const README: &str = "# demo\n\nA workspace created by `toolcell demo`.\n";
const GUIDE: &str = "# Guide\n\nRun it with `cargo run`; it prints a greeting.\n";

/// The session: what agents in two roles would do, in order, under the default policy.
fn script() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("impl", "write_file", json!({"path": "src/main.rs", "content": MAIN_RS})),
        ("impl", "write_file", json!({"path": "README.md", "content": README})),
        ("impl", "list_files", json!({"pattern": "**"})),
        ("impl", "read_file", json!({"path": "src/main.rs"})),
        ("impl", "edit_file", json!({"path": "src/main.rs", "old_string": "\"world\"", "new_string": "\"toolcell\""})),
        ("impl", "search_files", json!({"query": "print", "output_mode": "content", "context": 1})),
        ("impl", "edit_file", json!({"path": "src/main.rs", "old_string": "not in the file", "new_string": "x"})),
        // Refused: the workspace boundary, the policy's read-only docs, and tool gating.
        ("impl", "read_file", json!({"path": "../../etc/passwd"})),
        ("impl", "write_file", json!({"path": "docs/guide.md", "content": GUIDE})),
        ("control", "write_file", json!({"path": "src/main.rs", "content": ""})),
        ("control", "search_files", json!({"query": "toolcell"})),
    ]
}

pub fn run(runtime: &Runtime, workspace: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let directory = workspace.unwrap_or_else(|| {
        let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_millis()).unwrap_or(0);
        std::env::temp_dir().join(format!("toolcell-demo-{}-{stamp}", std::process::id()))
    });
    let workspace = Workspace::create(&directory)?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "toolcell demo: workspace {}\n", workspace.root().display())?;
    for (role, tool, args) in script() {
        let args = args.to_string();
        writeln!(stdout, "$ toolcell call {tool} '{args}' --role {role}")?;
        let outcome = runtime.call(&CallRequest {
            workspace: &workspace,
            role,
            session_id: "demo",
            tool,
            args: &args,
            approver: None,
        })?;
        match outcome.result {
            Ok(output) => writeln!(stdout, "{}", output.text)?,
            Err(error) => writeln!(stdout, "error {error}")?,
        }
        writeln!(stdout, "[{tool} took {} µs]\n", outcome.duration.as_micros())?;
    }
    writeln!(stdout, "The workspace is left at {} for you to inspect.", workspace.root().display())?;
    Ok(ExitCode::SUCCESS)
}
