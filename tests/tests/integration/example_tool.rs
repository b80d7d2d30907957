//! The example third-party tool (`examples/word-count`), built like a tool from another
//! repository: it passes the conformance suite, installs as a plugin, and runs governed.

use serde_json::json;
use toolcell_tests::{Fixture, builtin_runtime_builder, examples, shared_cache_dir};
use toolcell_types::ToolErrorKind;

fn word_count() -> &'static [u8] {
    examples::COMPONENTS.iter().find(|(name, _)| *name == "word_count").map(|(_, wasm)| *wasm).expect("the example is built")
}

#[test]
fn the_example_tool_passes_conformance() {
    let report = toolcell_conformance::check(
        "examples/word-count",
        word_count(),
        &toolcell_conformance::Options { cache_dir: Some(shared_cache_dir()), ..toolcell_conformance::Options::default() },
    );
    assert!(report.passed(), "{}", report.render());
    assert_eq!(report.tool.as_deref(), Some("word_count"));
}

#[test]
fn the_example_tool_loads_from_a_plugin_directory_and_runs_governed() {
    let plugins = tempfile::tempdir().expect("plugin directory");
    std::fs::write(plugins.path().join("word_count.wasm"), word_count()).expect("install");
    let policy = r#"
version = 1
[roles.impl]
tools = ["word_count"]
[[roles.impl.rules]]
access = ["read", "list"]
paths = ["src/**"]
effect = "allow"
"#;
    let runtime = builtin_runtime_builder().plugin_dir(plugins.path()).policy("policy.toml", policy).build().expect("builds");
    assert!(runtime.loaded().iter().any(|loaded| loaded.origin == "plugin:word_count.wasm" && loaded.tool.as_str() == "word_count"));
    let fixture = Fixture::new();
    fixture.write("src/a.txt", "one two\nthree\n");
    fixture.write("secret.txt", "not for the plugin\n");
    let counted = fixture.call_on(&runtime, "impl", "word_count", &json!({"path": "src/a.txt"}), None);
    let output = counted.result.expect("counted");
    assert_eq!(output.text, "2 lines, 3 words, 14 bytes in `src/a.txt`");
    assert_eq!(output.structured.expect("structured")["words"], 3);
    let refused = fixture.call_on(&runtime, "impl", "word_count", &json!({"path": "secret.txt"}), None);
    assert_eq!(refused.result.expect_err("denied").kind, ToolErrorKind::Denied);
    let outside = fixture.call_on(&runtime, "impl", "word_count", &json!({"path": "../outside/secret.txt"}), None);
    assert!(outside.result.is_err());
    fixture.assert_outside_untouched();
}
