//! `toolcell demo`: a short scripted agent session over a fresh workspace, through every
//! built-in tool, as MCP clients of `toolcell mcp` servers: refusals, a rolled-back write,
//! locks and undo included.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use serde_json::{Value, json};
use toolcell_mcp::client::{StdioClient, text_of};
use toolcell_runtime::Workspace;

use crate::cli::RuntimeArgs;

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
        // Locks keep other agents out; a write that fails validation is rolled back; undo.
        ("impl", "lock_files", json!({"paths": ["src/**"], "ttl_seconds": 60})),
        ("impl", "write_file", json!({"path": "config.json", "content": "{\"name\": \"demo\""})),
        ("impl", "undo_edit", json!({"path": "src/main.rs"})),
        ("impl", "unlock_files", json!({})),
        // Refused: the workspace boundary, the policy's read-only docs, and tool gating.
        ("impl", "read_file", json!({"path": "../../etc/passwd"})),
        ("impl", "write_file", json!({"path": "docs/guide.md", "content": GUIDE})),
        ("control", "write_file", json!({"path": "src/main.rs", "content": ""})),
        ("control", "search_files", json!({"query": "toolcell"})),
    ]
}

/// Run the session against `toolcell mcp` servers (this binary), one per role, as a real MCP
/// client would over stdio.
pub fn run(args: &RuntimeArgs, workspace: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let directory = workspace.unwrap_or_else(|| {
        let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map(|elapsed| elapsed.as_millis()).unwrap_or(0);
        std::env::temp_dir().join(format!("toolcell-demo-{}-{stamp}", std::process::id()))
    });
    let workspace = Workspace::create(&directory)?;
    let executable = std::env::current_exe().context("cannot find the toolcell executable")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(
        stdout,
        "toolcell demo: MCP clients talking to `toolcell mcp` over stdio, one server per role\nworkspace {}\n",
        workspace.root().display()
    )?;
    let mut clients: BTreeMap<&str, StdioClient> = BTreeMap::new();
    for (role, tool, arguments) in script() {
        if !clients.contains_key(role) {
            let mut command = Command::new(&executable);
            command.args(forwarded(args)).arg("mcp").arg("--workspace").arg(workspace.root()).args([
                "--role",
                role,
                "--session",
                &format!("demo-{role}"),
            ]);
            let (mut client, initialized) = StdioClient::spawn(&mut command).context("cannot start `toolcell mcp`")?;
            let tools = client.list_tools()?;
            let names: Vec<&str> =
                tools["tools"].as_array().map(|tools| tools.iter().filter_map(|tool| tool["name"].as_str()).collect()).unwrap_or_default();
            writeln!(
                stdout,
                "→ initialize, tools/list as role `{role}`\n← {} (protocol {}): {}\n",
                initialized["serverInfo"]["name"].as_str().unwrap_or("?"),
                initialized["protocolVersion"].as_str().unwrap_or("?"),
                names.join(", ")
            )?;
            clients.insert(role, client);
        }
        let client = clients.get_mut(role).context("the client was just started")?;
        writeln!(stdout, "→ tools/call {tool} {arguments} (role {role})")?;
        let started = Instant::now();
        let result = client.call_tool(tool, &arguments)?;
        let elapsed = started.elapsed();
        let text = text_of(&result);
        if result["isError"] == true {
            writeln!(stdout, "error {text}")?;
        } else {
            writeln!(stdout, "{text}")?;
        }
        writeln!(stdout, "[round trip {} µs]\n", elapsed.as_micros())?;
    }
    for (_, client) in clients {
        client.close()?;
    }
    writeln!(stdout, "The workspace is left at {} for you to inspect.", workspace.root().display())?;
    Ok(ExitCode::SUCCESS)
}

/// The runtime flags the demo's servers inherit.
fn forwarded(args: &RuntimeArgs) -> Vec<std::ffi::OsString> {
    let mut forwarded = Vec::new();
    let mut flag = |name: &str, value: Option<&std::path::Path>| {
        if let Some(value) = value {
            forwarded.push(name.into());
            forwarded.push(value.as_os_str().to_owned());
        }
    };
    flag("--cache-dir", args.cache_dir.as_deref());
    flag("--policy", args.policy.as_deref());
    flag("--state-dir", args.state_dir.as_deref());
    flag("--plugin-dir", args.plugin_dir.as_deref());
    if args.no_cache {
        forwarded.push("--no-cache".into());
    }
    forwarded
}
