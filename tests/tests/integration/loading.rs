//! Loading components (imports, cache, descriptions) and running them robustly.

use serde_json::json;
use toolcell_runtime::{CacheOutcome, CallRequest, Error, RuntimeBuilder, STDIO_CAPACITY};
use toolcell_tests::{Fixture, builtin_runtime_builder, guest_program, runtime};
use toolcell_types::ToolErrorKind;

#[test]
fn a_component_importing_sockets_is_refused_naming_the_import() {
    let result = RuntimeBuilder::new().component("test:net_probe", guest_program("net_probe")).build();
    match result {
        Err(Error::ForbiddenImport { origin, import }) => {
            assert_eq!(origin, "test:net_probe");
            assert!(import.starts_with("wasi:sockets/"), "{import}");
            let message = Error::ForbiddenImport { origin, import: import.clone() }.to_string();
            assert!(message.contains(&format!("`{import}`")), "{message}");
        }
        Err(other) => panic!("expected a forbidden import, got: {other}"),
        Ok(_) => panic!("a component importing wasi:sockets was loaded"),
    }
}

#[test]
fn a_component_built_against_the_previous_contract_is_refused_saying_to_rebuild() {
    // A component as the 0.1 contract named its imports: the same bytes with every
    // `toolcell:tool/...@0.2.2` renamed to `@0.1.0` (same length, so the binary stays valid).
    let wasm = with_contract_version(guest_program("misbehave"), "0.1.0");
    match RuntimeBuilder::new().component("test:old_contract", wasm).build() {
        Err(error @ Error::Contract { .. }) => {
            let message = error.to_string();
            assert!(message.contains("`test:old_contract`") && message.contains("@0.1.0"), "{message}");
            assert!(message.contains("toolcell:tool@0.2.x") && message.contains("rebuild"), "{message}");
        }
        Err(other) => panic!("expected a contract mismatch, got: {other}"),
        Ok(_) => panic!("a component of the previous contract was loaded"),
    }
}

/// `wasm` with every `toolcell:tool/...@0.2.2` it names renamed to `@VERSION` (five
/// characters, so the binary stays valid).
fn with_contract_version(wasm: &[u8], version: &str) -> Vec<u8> {
    let mut wasm = wasm.to_vec();
    let mut renamed = 0;
    for interface in ["types", "context", "workflow", "tool"] {
        let (from, to) = (format!("toolcell:tool/{interface}@0.2.2"), format!("toolcell:tool/{interface}@{version}"));
        assert_eq!(from.len(), to.len());
        let mut index = 0;
        while let Some(found) = wasm[index..].windows(from.len()).position(|window| window == from.as_bytes()) {
            wasm[index + found..index + found + from.len()].copy_from_slice(to.as_bytes());
            index += found + from.len();
            renamed += 1;
        }
    }
    assert!(renamed > 0, "the component names its toolcell imports");
    wasm
}

#[test]
fn components_built_against_contracts_0_2_0_and_0_2_1_still_load_and_run() {
    // 0.2.1 and 0.2.2 only added functions to `context`: earlier components link against them.
    for version in ["0.2.0", "0.2.1"] {
        let wasm = with_contract_version(toolcell_tests::examples::COMPONENTS[0].1, version);
        let runtime = RuntimeBuilder::new().component(format!("test:contract_{version}"), wasm).build().expect("an older component loads");
        let fixture = Fixture::new();
        fixture.write("a.txt", "one two two\n");
        let outcome = fixture.call_as(&runtime, "s-old", None, &[], "word_count", &json!({"path": "a.txt"}));
        assert!(outcome.result.is_ok(), "{version}: {:?}", outcome.result);
    }
}

#[test]
fn the_second_start_loads_every_component_from_the_cache() {
    let cache = tempfile::tempdir().expect("temporary cache");
    let build = || {
        let mut builder = RuntimeBuilder::new().cache_dir(cache.path());
        for (name, wasm) in toolcell_builtins::components() {
            builder = builder.component(format!("builtin:{name}"), wasm);
        }
        builder.build().expect("runtime builds")
    };
    let first = build();
    assert!(first.loaded().iter().all(|loaded| loaded.cache == CacheOutcome::Compiled));
    let artifacts = std::fs::read_dir(cache.path())
        .expect("cache dir")
        .filter(|entry| entry.as_ref().is_ok_and(|entry| entry.path().extension().is_some_and(|extension| extension == "cwasm")))
        .count();
    assert_eq!(artifacts, first.loaded().len(), "one artifact per component");
    let second = build();
    assert_eq!(second.loaded().len(), toolcell_builtins::components().count());
    assert!(second.loaded().iter().all(|loaded| loaded.cache == CacheOutcome::Cached), "{:?}", second.loaded());
    // The cached components work.
    let fixture = Fixture::new();
    fixture.write("a.txt", "cached\n");
    let outcome = second.call(&CallRequest::new(&fixture.workspace, "impl", "s", "read_file", r#"{"path": "a.txt"}"#)).expect("call runs");
    assert_eq!(outcome.result.expect("read succeeds").text, "     1\tcached");
}

#[test]
fn a_corrupt_cache_entry_is_recompiled() {
    let cache = tempfile::tempdir().expect("temporary cache");
    let wasm = guest_program("misbehave");
    let build = || RuntimeBuilder::new().cache_dir(cache.path()).component("test:misbehave", wasm).build();
    build().expect("first build");
    for entry in std::fs::read_dir(cache.path()).expect("cache dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|extension| extension == "cwasm") {
            std::fs::write(path, b"garbage").expect("corrupt the artifact");
        }
    }
    let runtime = build().expect("a corrupt artifact is replaced, not fatal");
    assert_eq!(runtime.loaded()[0].cache, CacheOutcome::Rejected);
    assert_eq!(build().expect("third build").loaded()[0].cache, CacheOutcome::Cached);
}

#[test]
fn bad_components_are_refused_at_load() {
    // Not WebAssembly, and a core module rather than a component: one line each, with the fix.
    let cases: [(&[u8], &str); 2] =
        [(b"not wasm", "it is not WebAssembly"), (b"\0asm\x01\0\0\0", "it is a core WebAssembly module, not a component")];
    for (bytes, said) in cases {
        match RuntimeBuilder::new().component("test:garbage", bytes).build() {
            Err(error @ Error::Load { .. }) => {
                let message = error.to_string();
                assert!(message.contains("`test:garbage`") && message.contains(said), "{message}");
                assert!(message.contains("wasm32-wasip2") && !message.contains('\n'), "{message}");
            }
            Err(other) => panic!("expected a load error, got {other}"),
            Ok(_) => panic!("garbage loaded"),
        }
    }
    let duplicate =
        builtin_runtime_builder().component("test:read_file_again", toolcell_builtins::components().next().expect("a builtin").1).build();
    match duplicate {
        Err(Error::DuplicateTool { name, second, .. }) => {
            assert_eq!(name, "read_file");
            assert_eq!(second, "test:read_file_again");
        }
        Err(other) => panic!("expected a duplicate tool error, got {other}"),
        Ok(_) => panic!("two tools named read_file loaded"),
    }
}

#[test]
fn every_builtin_describes_itself() {
    let names: Vec<&str> = runtime().tools().map(|tool| tool.name.as_str()).collect();
    for expected in ["edit_file", "list_files", "read_file", "search_files", "write_file"] {
        assert!(names.contains(&expected), "{names:?}");
    }
    for tool in runtime().tools().filter(|tool| !["fs_probe", "misbehave"].contains(&tool.name.as_str())) {
        assert!(tool.description.len() > 80, "{} needs a real description", tool.name);
        assert_eq!(tool.input_schema["type"], "object");
        assert_eq!(tool.input_schema["additionalProperties"], false, "{}", tool.name);
    }
    let read = runtime().tool("read_file").expect("read_file");
    assert!(read.annotations.read_only && read.annotations.idempotent);
    let write = runtime().tool("write_file").expect("write_file");
    assert!(!write.annotations.read_only && write.annotations.destructive);
}

#[test]
fn unknown_tools_are_a_host_error() {
    let fixture = Fixture::new();
    let result = runtime().call(&CallRequest::new(&fixture.workspace, "impl", "s", "rm_rf", "{}"));
    match result {
        Err(Error::UnknownTool { name, available }) => {
            assert_eq!(name, "rm_rf");
            assert!(available.contains("read_file"));
        }
        other => panic!("expected an unknown tool error, got {:?}", other.map(|outcome| outcome.result)),
    }
}

#[test]
fn a_crashing_component_fails_the_call_and_the_host_keeps_serving() {
    let fixture = Fixture::new();
    let outcome = fixture.call("misbehave", &json!({"action": "panic"}));
    assert!(outcome.trapped);
    let error = outcome.result.expect_err("a panic is a failed call");
    assert_eq!(error.kind, ToolErrorKind::Failed);
    assert!(error.message.contains("`misbehave` crashed"), "{}", error.message);
    fixture.assert_no_host_path(&error.message);
    let stderr = String::from_utf8_lossy(&outcome.stderr.bytes);
    assert!(stderr.contains("misbehave was asked to panic"), "{stderr}");
    let next = fixture.call("misbehave", &json!({"action": "ok"}));
    assert_eq!(next.result.expect("the host still serves").text, "ok");
}

#[test]
fn every_call_gets_a_fresh_instance() {
    let fixture = Fixture::new();
    for _ in 0..3 {
        let outcome = fixture.call("misbehave", &json!({"action": "count"}));
        assert_eq!(outcome.result.expect("count").text, "1", "state leaked between calls");
    }
}

#[test]
fn stdout_and_stderr_are_captured_and_capped() {
    let fixture = Fixture::new();
    let outcome = fixture.call("misbehave", &json!({"action": "print", "bytes": 1024 * 1024}));
    assert_eq!(outcome.result.expect("printing is fine").text, format!("printed {} bytes", 1024 * 1024));
    assert_eq!(outcome.stdout.bytes.len(), STDIO_CAPACITY);
    assert_eq!(outcome.stdout.dropped, (1024 * 1024 - STDIO_CAPACITY) as u64);
    assert_eq!(outcome.stderr.bytes.len(), STDIO_CAPACITY);
}

#[test]
fn context_and_notes_reach_the_outcome() {
    let fixture = Fixture::new();
    let outcome = fixture.call("misbehave", &json!({"action": "context"}));
    let call_id = outcome.call_id.clone();
    assert_eq!(outcome.result.expect("context").text, format!("impl s-test {call_id}"));
    let outcome = fixture.call("misbehave", &json!({"action": "note", "bytes": 10_000}));
    assert_eq!(outcome.notes.len(), 2);
    assert_eq!(outcome.notes[0], "first note");
    assert!(outcome.notes[1].ends_with("[notes cut at 4096 bytes]"));
    assert_ne!(fixture.call("misbehave", &json!({"action": "ok"})).call_id, call_id);
}

#[test]
fn arguments_are_validated_before_the_component_runs() {
    let fixture = Fixture::new();
    let outcome = fixture.call("misbehave", &json!({"action": "panic", "extra": 1}));
    assert!(!outcome.trapped, "the component must not have run");
    assert_eq!(outcome.result.expect_err("invalid").kind, ToolErrorKind::InvalidArgs);
    let outcome = fixture.call("misbehave", &json!({"action": "explode"}));
    let error = outcome.result.expect_err("invalid");
    assert!(error.message.contains("`action`"), "{}", error.message);
    let raw = runtime().call(&CallRequest::new(&fixture.workspace, "impl", "s", "misbehave", "{not json")).expect("call");
    assert!(raw.result.expect_err("invalid").message.contains("not valid JSON"));
}
