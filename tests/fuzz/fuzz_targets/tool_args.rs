//! Tool arguments: argument objects built from each built-in tool's own schema (its property
//! names, with hostile strings, numbers, booleans, arrays and nesting as values), called
//! through the real host on a scratch workspace beside a canary. The host must never panic,
//! never show a host path or the canary, and never change anything outside the workspace.

#![no_main]

use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use toolcell_runtime::{CallRequest, Runtime, RuntimeBuilder, Workspace};

const CANARY: &str = "CANARY-outside-the-workspace";

const STRINGS: &[&str] = &[
    "notes.txt",
    "src/lib.rs",
    "src",
    ".",
    "..",
    "../outside/secret.txt",
    "/etc/passwd",
    "escape.txt",
    "escape.txt/x",
    "",
    "a\u{0}b",
    "~",
    "C:\\x",
    "%2e%2e",
    "**",
    "*",
    "[",
    "(a+)+$",
    "alpha",
    "beta",
    "\r\n",
    "x\ny",
    "new/dir/f.txt",
    "*** Begin Patch\n*** Update File: notes.txt\n@@\n-alpha\n+x\n*** End Patch",
    "*** Begin Patch\n*** Add File: ../outside/p\n+x\n*** End Patch",
    "*** Begin Patch\n*** Delete File: escape.txt\n*** End Patch",
    "CHAIN-1-x",
    "CHAIN-1-x/001-a",
    "CHAIN-1-x/../001-a",
    "docs/tasks/todo/CHAIN-1-x/001-a.md",
    "CR-1",
    "x-y",
];

/// A task file the chain tools find in the scratch workspace.
const TASK: &str = "# A\n\n**Chain**: CHAIN-1-x\n**Task**: 001-a\n**Status**: todo\n**Type**: impl\n**Created**: 2026-01-01\n**CR**: CR-1\n\n## Acceptance criteria\n\n- [ ] b\n";

struct Setup {
    runtime: Runtime,
    /// `(name, property names)` of every tool.
    tools: Vec<(String, Vec<String>)>,
}

fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        // Compiled components are cached beside the fuzz build: the first run compiles them.
        let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/component-cache");
        let mut builder = RuntimeBuilder::new().cache_dir(cache);
        for (name, wasm) in toolcell_builtins::components() {
            builder = builder.component(format!("builtin:{name}"), wasm);
        }
        let runtime = builder.build().expect("the runtime builds");
        let tools = runtime
            .tools()
            .filter(|tool| {
                !toolcell_runtime::NATIVE_TOOLS.contains(&tool.name.as_str())
                    && !toolcell_runtime::ADAPTER_TOOLS.contains(&tool.name.as_str())
            })
            .map(|tool| {
                let properties = tool.input_schema["properties"].as_object().map(|map| map.keys().cloned().collect()).unwrap_or_default();
                (tool.name.to_string(), properties)
            })
            .collect();
        Setup { runtime, tools }
    })
}

fn value(input: &mut Unstructured<'_>, depth: u8) -> arbitrary::Result<Value> {
    Ok(match u8::arbitrary(input)? % 8 {
        0..=2 => Value::String((*input.choose(STRINGS)?).to_owned()),
        3 => Value::from(i64::arbitrary(input)?),
        4 => Value::from(u8::arbitrary(input)? % 8),
        5 => Value::Bool(bool::arbitrary(input)?),
        6 if depth < 3 => {
            let count = u8::arbitrary(input)? % 4;
            Value::Array((0..count).map(|_| value(input, depth + 1)).collect::<arbitrary::Result<_>>()?)
        }
        _ => Value::String(String::arbitrary(input)?),
    })
}

fuzz_target!(|bytes: &[u8]| {
    let setup = setup();
    let mut input = Unstructured::new(bytes);
    let Ok((tool, properties)) = input.choose(&setup.tools) else {
        return;
    };
    let mut args = Map::new();
    for property in properties {
        if bool::arbitrary(&mut input).unwrap_or(false)
            && let Ok(value) = value(&mut input, 0)
        {
            args.insert(property.clone(), value);
        }
    }
    if bool::arbitrary(&mut input).unwrap_or(false) {
        args.insert("unexpected".to_owned(), Value::Null);
    }
    let args = Value::Object(args).to_string();
    // Half the calls come from a session bound to the task in the workspace.
    let binding = toolcell_runtime::TaskBinding::parse("CHAIN-1-x/001-a").expect("a task");
    let task = bool::arbitrary(&mut input).unwrap_or(false).then_some(&binding);

    let temp = tempfile::tempdir().expect("scratch");
    let root = temp.path().join("workspace");
    std::fs::create_dir_all(root.join("src")).expect("workspace");
    std::fs::create_dir_all(temp.path().join("outside")).expect("outside");
    // Unique per run: the fuzzer learns constants from the comparisons below and may put them
    // in the arguments, which a tool may echo; a canary it cannot know only leaks if read.
    let canary = format!("{CANARY}-{}", temp.path().file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default());
    std::fs::write(temp.path().join("outside/secret.txt"), &canary).expect("canary");
    std::fs::write(root.join("notes.txt"), "alpha\nbeta\n").expect("notes");
    std::fs::write(root.join("src/lib.rs"), "pub fn f() {}\n").expect("lib");
    std::fs::create_dir_all(root.join("docs/tasks/todo/CHAIN-1-x")).expect("chain");
    std::fs::write(root.join("docs/tasks/todo/CHAIN-1-x/001-a.md"), TASK).expect("task");
    std::os::unix::fs::symlink("../outside/secret.txt", root.join("escape.txt")).expect("link");
    let workspace = Workspace::open(&root).expect("open the workspace");

    let outcome = setup.runtime.call(&CallRequest {
        owner: task.map(toolcell_runtime::TaskBinding::chain),
        task,
        ..CallRequest::new(&workspace, "fuzz", "fuzz", tool, &args)
    });
    let base = temp.path().to_string_lossy().into_owned();
    if let Ok(outcome) = outcome {
        let texts: Vec<String> = match &outcome.result {
            Ok(output) => {
                vec![output.text.clone(), output.structured.as_ref().map(|structured| structured.value().to_string()).unwrap_or_default()]
            }
            Err(error) => vec![error.message.clone()],
        };
        for text in texts.iter().chain(&outcome.warnings) {
            assert!(!text.contains(&base), "{tool} {args}: a host path leaked: {text}");
            assert!(!text.contains(&canary), "{tool} {args}: the canary leaked: {text}");
        }
    }
    let outside: Vec<_> = std::fs::read_dir(temp.path().join("outside")).expect("outside").collect();
    assert_eq!(outside.len(), 1, "{tool} {args}: something appeared outside");
    assert_eq!(
        std::fs::read_to_string(temp.path().join("outside/secret.txt")).expect("canary"),
        canary,
        "{tool} {args}: the canary changed"
    );
});
