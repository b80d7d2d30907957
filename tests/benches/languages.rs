//! What a tool costs in each language, in one run: the Rust example (`examples/word-count`),
//! the Python example (`examples/todo-finder-py`) and the JavaScript example
//! (`examples/word-freq-js`), each built from source (see `toolcell_tests::languages`).
//!
//! `cargo bench -p toolcell-tests --bench languages` prints, per language: the component's
//! size, its compile time (cold: no cache), its load time from the compiled-component cache,
//! the p50 and p99 latency of a call through the host, and the linear memory one instance
//! holds; the ratios are against the Rust example. It also lists the interfaces each
//! component imports. Under `cargo test` (no `--bench` flag) it makes a few calls only.

use std::io::Write as _;
use std::time::{Duration, Instant};

use serde_json::json;
use toolcell_runtime::{CallRequest, Runtime, RuntimeBuilder, Workspace};
use toolcell_tests::measure::percentile;

struct Language {
    name: &'static str,
    tool: &'static str,
    wasm: Vec<u8>,
    args: serde_json::Value,
}

fn build(language: &Language, cache: &std::path::Path) -> Runtime {
    RuntimeBuilder::new()
        .cache_dir(cache)
        .component(format!("plugin:{}.wasm", language.tool), language.wasm.clone())
        .stub_imports(language.tool, ["wasi:sockets/*".to_owned()])
        .build()
        .unwrap_or_else(|error| panic!("{} does not load: {error}", language.name))
}

fn main() {
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let calls = if benchmarking { 300 } else { 5 };
    let languages = [
        Language {
            name: "Rust",
            tool: "word_count",
            wasm: toolcell_tests::examples::COMPONENTS.iter().find(|(name, _)| *name == "word_count").expect("the Rust example").1.to_vec(),
            args: json!({"path": "src/notes.txt"}),
        },
        Language {
            name: "Python",
            tool: "todo_finder",
            wasm: toolcell_tests::languages::python_example().to_vec(),
            args: json!({"path": "src"}),
        },
        Language {
            name: "JavaScript",
            tool: "word_freq",
            wasm: toolcell_tests::languages::javascript_example().to_vec(),
            args: json!({"path": "src"}),
        },
    ];
    let temp = tempfile::tempdir().expect("temporary directory");
    let root = temp.path().join("workspace");
    std::fs::create_dir_all(root.join("src")).expect("create workspace");
    let text: String = (0..100).map(|line| format!("line {line}: some words to count # TODO item {line}\n")).collect();
    std::fs::write(root.join("src/notes.txt"), &text).expect("write a file");
    let workspace = Workspace::open(&root).expect("workspace");
    let engine = wasmtime::Engine::default();

    let mut out = std::io::stderr().lock();
    let _ = writeln!(out, "| language | component | compile (cold) | load (cached) | call p50 | call p99 | memory per instance |");
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    let mut rust_p50 = None;
    let mut imports = Vec::new();
    for language in &languages {
        let cache = temp.path().join(format!("cache-{}", language.tool));
        let started = Instant::now();
        let runtime = build(language, &cache);
        let compile = started.elapsed();
        drop(runtime);
        let started = Instant::now();
        let runtime = build(language, &cache);
        let load = started.elapsed();
        let args = language.args.to_string();
        let request = CallRequest::new(&workspace, "impl", "bench", language.tool, &args);
        let mut memory = 0;
        let mut samples: Vec<Duration> = (0..calls)
            .map(|_| {
                let started = Instant::now();
                let outcome = runtime.call(&request).expect("the call runs");
                let elapsed = started.elapsed();
                assert!(outcome.result.is_ok(), "{}: {:?}", language.name, outcome.result);
                memory = outcome.memory_bytes;
                elapsed
            })
            .collect();
        let p50 = percentile(&mut samples, 50);
        let p99 = percentile(&mut samples, 99);
        let versus_rust =
            rust_p50.map_or_else(String::new, |rust: Duration| format!(" ({:.0}x Rust)", p50.as_secs_f64() / rust.as_secs_f64()));
        rust_p50.get_or_insert(p50);
        let _ = writeln!(
            out,
            "| {} | {:.1} MiB | {:.2} s | {:.0} ms | {:.2} ms{versus_rust} | {:.2} ms | {:.1} MiB |",
            language.name,
            language.wasm.len() as f64 / 1048576.0,
            compile.as_secs_f64(),
            load.as_secs_f64() * 1e3,
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            memory as f64 / 1048576.0,
        );
        // What the component imports, as the component model names it.
        let component = wasmtime::component::Component::new(&engine, &language.wasm).expect("a component");
        let mut names: Vec<String> = component.component_type().imports(&engine).map(|(name, _)| name.to_owned()).collect();
        names.sort();
        imports.push((language.name, names));
    }
    for (language, names) in imports {
        let _ = writeln!(out, "{language} imports: {}", names.join(", "));
    }
}
