//! `misbehave`: a tool that crashes, floods stdout, or returns broken output (or any text it
//! is given, escape sequences included) on request, for the host's robustness tests.

use serde::Deserialize;
use serde_json::json;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
struct Args {
    /// Without an action, `misbehave` is a validator of `path`: it fails on `TODO`, and tries
    /// to write the file on `WRITE`.
    #[serde(default)]
    action: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    bytes: usize,
    /// What `echo` returns, and `echo_error` fails with, verbatim.
    #[serde(default)]
    text: String,
}

struct Misbehave;

static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Tool for Misbehave {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new("misbehave", "Misbehave", "Test program: crashes or floods on request.").schema(json!({
            "type": "object",
            "properties": {
                "action": { "enum": ["panic", "print", "note", "context", "count", "spin", "allocate", "big_output", "echo", "echo_error", "structured", "ok", "task", "spawn", "lock_for_task", "release_task", "spawn_loop", "write_then_spin"] },
                "text": { "type": "string" },
                "bytes": { "type": "integer", "minimum": 0 },
                "path": { "type": "string" }
            },
            "additionalProperties": false
        }))
    }

    fn call(args: Args) -> Result<Output, ToolError> {
        match args.action.as_str() {
            "panic" => panic!("misbehave was asked to panic"),
            "print" => {
                let line = "x".repeat(1023);
                let mut written = 0;
                while written < args.bytes {
                    println!("{line}");
                    eprintln!("{line}");
                    written += 1024;
                }
                Ok(Output::text(format!("printed {written} bytes")))
            }
            "note" => {
                toolcell_sdk::note("first note");
                toolcell_sdk::note(&"n".repeat(args.bytes));
                Ok(Output::text("noted"))
            }
            "context" => Ok(Output::text(format!("{} {} {}", toolcell_sdk::role(), toolcell_sdk::session_id(), toolcell_sdk::call_id()))),
            "count" => {
                // A fresh instance per call must always answer 1.
                let calls = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                Ok(Output::text(calls.to_string()))
            }
            "write_then_spin" => {
                // Changes the workspace, then never returns: a cancelled or timed-out call
                // must leave no trace of the write.
                std::fs::write(&args.path, args.text.as_bytes()).map_err(|error| ToolError::Failed(format!("cannot write: {error}")))?;
                let mut counter: u64 = 0;
                loop {
                    counter = std::hint::black_box(counter.wrapping_add(1));
                }
            }
            "spin" => {
                // Never returns: only the host's deadline stops it.
                let mut counter: u64 = 0;
                loop {
                    counter = std::hint::black_box(counter.wrapping_add(1));
                }
            }
            "allocate" => {
                // Grow the heap by `bytes`, touching every page.
                let mut block: Vec<u8> = Vec::new();
                if block.try_reserve_exact(args.bytes).is_err() {
                    return Err(ToolError::TooLarge(format!("could not allocate {} bytes", args.bytes)));
                }
                block.resize(args.bytes, 1);
                Ok(Output::text(format!("allocated {} bytes", std::hint::black_box(block).len())))
            }
            "big_output" => Ok(Output::text("y".repeat(args.bytes))),
            "echo" => Ok(Output::text(args.text)),
            // `text` as the structured result, verbatim (JSON or not).
            "structured" => Ok(Output::text("structured").with_structured_json(args.text)),
            // Never an empty message: the conformance tests expect misbehave to fail other checks.
            "echo_error" if args.text.is_empty() => Err(ToolError::Failed("asked to fail with no text".to_owned())),
            "echo_error" => Err(ToolError::Failed(args.text)),
            // The task-chain capabilities, asked for by a component the policy never meant to
            // have them: `path` is the task, `text` the role to spawn or the pattern to lock.
            "task" => Ok(Output::text(toolcell_sdk::bound_task().unwrap_or_else(|| "none".to_owned()))),
            "spawn" => toolcell_sdk::workflow::spawn_session(&args.text, &args.path).map(|handoff| Output::text(handoff.session_id)),
            "lock_for_task" => toolcell_sdk::workflow::lock_for_task(&args.path, &[args.text], 60)
                .map(|locks| Output::text(format!("{} locked", locks.len()))),
            // `bytes` refused spawns, each for another task: the host must stop it, not record them all.
            // `bytes` spawns of sessions of role `text`, for the task `path` (or, without one, for
            // as many tasks that do not exist); the result counts those spawned.
            "spawn_loop" => {
                let spawned = (0..args.bytes)
                    .filter(|index| {
                        let task = if args.path.is_empty() { format!("CHAIN-1-x/{index:03}-a") } else { args.path.clone() };
                        toolcell_sdk::workflow::spawn_session(&args.text, &task).is_ok()
                    })
                    .count();
                Ok(Output::text(format!("spawned {spawned}")))
            }
            "release_task" => toolcell_sdk::workflow::release_task(&args.path).map(|released| Output::text(format!("{released} released"))),
            "" => {
                let content = std::fs::read_to_string(&args.path).map_err(|error| ToolError::Failed(error.to_string()))?;
                if content.contains("WRITE") {
                    std::fs::write(&args.path, "validator was here")
                        .map_err(|error| ToolError::Failed(format!("cannot write: {error}")))?;
                }
                if let Some(line) = content.lines().position(|line| line.contains("TODO")) {
                    return Err(ToolError::InvalidArgs(format!("line {} has a TODO", line + 1)));
                }
                Ok(Output::text("valid"))
            }
            _ => Ok(Output::text("ok")),
        }
    }
}

toolcell_sdk::export_tool!(Misbehave);
