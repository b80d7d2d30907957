//! Tool definitions rendered in each provider's documented shape.

use serde_json::Value;
use toolcell_host::schemas::{Format, render};
use toolcell_host::{DEFAULT_POLICY, DEFAULT_POLICY_NAME, builtin_runtime, tools_for_role};

fn rendered(format: Format, role: &str) -> Value {
    let runtime = builtin_runtime().policy(DEFAULT_POLICY_NAME, DEFAULT_POLICY).build().expect("runtime builds");
    render(format, tools_for_role(&runtime, role))
}

/// Anthropic and OpenAI both require `^[a-zA-Z0-9_-]{1,64}$` tool names.
fn is_provider_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value.as_object().expect("an object").keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys
}

#[test]
fn mcp_is_a_tools_list_result() {
    let document = rendered(Format::Mcp, "impl");
    assert_eq!(keys(&document), ["tools"]);
    let tools = document["tools"].as_array().expect("tools array");
    assert_eq!(tools.len(), 16);
    for tool in tools {
        assert_eq!(keys(tool), ["annotations", "description", "inputSchema", "name", "outputSchema", "title"], "{tool}");
        assert!(is_provider_name(tool["name"].as_str().expect("name")));
        assert_eq!(tool["inputSchema"]["type"], "object");
        assert_eq!(tool["outputSchema"]["type"], "object", "{tool}");
        let annotations = &tool["annotations"];
        for hint in ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"] {
            assert!(annotations[hint].is_boolean(), "{hint} in {tool}");
        }
        assert_eq!(annotations["openWorldHint"], false);
        assert_eq!(annotations["title"], tool["title"]);
    }
}

#[test]
fn anthropic_is_a_messages_api_tools_array() {
    let tools = rendered(Format::Anthropic, "control");
    let tools = tools.as_array().expect("an array of tools");
    let names: Vec<&str> = tools.iter().map(|tool| tool["name"].as_str().expect("name")).collect();
    assert_eq!(names, ["directory_tree", "file_info", "list_files", "read_file", "read_many", "search_files"]);
    for tool in tools {
        assert_eq!(keys(tool), ["description", "input_schema", "name"], "{tool}");
        assert!(is_provider_name(tool["name"].as_str().expect("name")));
        assert!(!tool["description"].as_str().expect("description").is_empty());
        assert_eq!(tool["input_schema"]["type"], "object");
    }
}

#[test]
fn openai_is_a_chat_completions_tools_array() {
    let tools = rendered(Format::OpenAi, "impl");
    for tool in tools.as_array().expect("an array of tools") {
        assert_eq!(keys(tool), ["function", "type"], "{tool}");
        assert_eq!(tool["type"], "function");
        let function = &tool["function"];
        assert_eq!(keys(function), ["description", "name", "parameters"], "{tool}");
        assert!(is_provider_name(function["name"].as_str().expect("name")));
        assert_eq!(function["parameters"]["type"], "object");
    }
}

#[test]
fn an_unknown_role_has_no_tools() {
    assert_eq!(rendered(Format::Anthropic, "nobody"), Value::Array(Vec::new()));
}

#[test]
fn locking_tools_are_not_read_only() {
    // A lock keeps other agents from writing: a client that approves read-only tools on its
    // own must still ask before one is taken.
    let document = rendered(Format::Mcp, "impl");
    for name in ["lock_files", "unlock_files"] {
        let tool = document["tools"].as_array().expect("tools").iter().find(|tool| tool["name"] == name).expect("listed");
        assert_eq!(tool["annotations"]["readOnlyHint"], false, "{tool}");
        assert_eq!(tool["annotations"]["destructiveHint"], false, "{tool}");
    }
}

/// Keywords of drafts after 07: a draft-07 validator (Ajv in strict mode, say) rejects them.
const LATER_KEYWORDS: [&str; 12] = [
    "dependentRequired",
    "dependentSchemas",
    "prefixItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$defs",
    "minContains",
    "maxContains",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
];

/// The keywords used anywhere in `schema`, with where.
fn keywords(schema: &Value, at: &str, found: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                // Under `properties` the keys are argument names, not keywords.
                if at.ends_with("/properties") {
                    keywords(value, &format!("{at}/{key}"), found);
                    continue;
                }
                found.push(format!("{at}/{key}"));
                keywords(value, &format!("{at}/{key}"), found);
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                keywords(item, &format!("{at}/{index}"), found);
            }
        }
        _ => {}
    }
}

#[test]
fn every_schema_is_valid_for_draft_07_validators_too() {
    let runtime = builtin_runtime().policy(DEFAULT_POLICY_NAME, DEFAULT_POLICY).build().expect("runtime builds");
    for tool in runtime.tools() {
        let schemas = [("input", Some(&tool.input_schema)), ("output", tool.output_schema.as_ref())];
        for (which, schema) in schemas {
            let schema = schema.unwrap_or_else(|| panic!("`{}` declares no {which} schema", tool.name));
            assert!(jsonschema::draft7::meta::is_valid(schema), "`{}`'s {which} schema is not valid draft-07", tool.name);
            let mut found = Vec::new();
            keywords(schema, "", &mut found);
            for keyword in LATER_KEYWORDS {
                let used: Vec<_> = found.iter().filter(|path| path.ends_with(&format!("/{keyword}"))).collect();
                assert!(used.is_empty(), "`{}`'s {which} schema uses `{keyword}`, which draft-07 validators reject: {used:?}", tool.name);
            }
        }
    }
}

/// The keywords OpenAI's strict mode accepts, from its Structured Outputs guide.
const OPENAI_STRICT_KEYWORDS: [&str; 21] = [
    "type",
    "description",
    "title",
    "enum",
    "const",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "anyOf",
    "$ref",
    "$defs",
    "pattern",
    "format",
    "multipleOf",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
];

/// Where `schema` breaks OpenAI's strict-mode rules: only the accepted keywords; every object
/// has `additionalProperties: false` and lists every property as required.
fn strict_mode_violations(schema: &Value, at: &str, found: &mut Vec<String>) {
    let Some(map) = schema.as_object() else {
        found.push(format!("{at}: not a schema object"));
        return;
    };
    for key in map.keys() {
        if !OPENAI_STRICT_KEYWORDS.contains(&key.as_str()) {
            found.push(format!("{at}: `{key}` is not accepted in strict mode"));
        }
    }
    let is_object =
        map.get("type").is_some_and(|kind| kind == "object" || kind.as_array().is_some_and(|kinds| kinds.contains(&Value::from("object"))));
    if is_object {
        if map.get("additionalProperties") != Some(&Value::Bool(false)) {
            found.push(format!("{at}: an object without `additionalProperties: false`"));
        }
        let mut properties: Vec<&str> =
            map.get("properties").and_then(Value::as_object).map(|map| map.keys().map(String::as_str).collect()).unwrap_or_default();
        let mut required: Vec<&str> =
            map.get("required").and_then(Value::as_array).map(|list| list.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        properties.sort_unstable();
        required.sort_unstable();
        if properties != required {
            found.push(format!("{at}: required {required:?} is not every property {properties:?}"));
        }
    }
    for (name, property) in map.get("properties").and_then(Value::as_object).into_iter().flatten() {
        strict_mode_violations(property, &format!("{at}/properties/{name}"), found);
    }
    for (name, definition) in map.get("$defs").and_then(Value::as_object).into_iter().flatten() {
        strict_mode_violations(definition, &format!("{at}/$defs/{name}"), found);
    }
    if let Some(items) = map.get("items") {
        strict_mode_violations(items, &format!("{at}/items"), found);
    }
    for (index, variant) in map.get("anyOf").and_then(Value::as_array).into_iter().flatten().enumerate() {
        strict_mode_violations(variant, &format!("{at}/anyOf/{index}"), found);
    }
}

#[test]
fn openai_strict_schemas_keep_strict_modes_rules() {
    // The plain schemas break them (the reason for the strict format).
    let plain = rendered(Format::OpenAi, "impl");
    let broken = plain
        .as_array()
        .expect("tools")
        .iter()
        .filter(|tool| {
            let mut found = Vec::new();
            strict_mode_violations(&tool["function"]["parameters"], "", &mut found);
            !found.is_empty()
        })
        .count();
    assert!(broken >= 10, "only {broken} plain schemas break strict mode: is the checker checking?");
    let strict = rendered(Format::OpenAiStrict, "impl");
    let tools = strict.as_array().expect("tools");
    assert_eq!(tools.len(), 16);
    for tool in tools {
        let function = &tool["function"];
        assert_eq!(keys(function), ["description", "name", "parameters", "strict"], "{tool}");
        assert_eq!(function["strict"], true);
        let parameters = &function["parameters"];
        // The root is an object schema, never a union.
        assert_eq!(parameters["type"], "object", "{tool}");
        assert!(parameters.get("anyOf").is_none(), "{tool}");
        let mut found = Vec::new();
        strict_mode_violations(parameters, "", &mut found);
        assert!(found.is_empty(), "`{}`: {found:#?}", function["name"]);
        assert!(jsonschema::meta::is_valid(parameters), "`{}`'s strict schema is not a valid JSON Schema", function["name"]);
    }
    // An optional argument may be null; a required one may not; dropped keywords are said.
    let read_file = tools.iter().find(|tool| tool["function"]["name"] == "read_file").expect("read_file");
    let parameters = &read_file["function"]["parameters"];
    assert_eq!(parameters["properties"]["offset"]["type"], serde_json::json!(["integer", "null"]));
    assert_eq!(parameters["properties"]["path"]["type"], "string");
    let search = tools.iter().find(|tool| tool["function"]["name"] == "search_files").expect("search_files");
    let properties = &search["function"]["parameters"]["properties"];
    assert_eq!(properties["output_mode"]["enum"], serde_json::json!(["files", "content", "count", null]));
    assert_eq!(properties["include"]["anyOf"].as_array().map(Vec::len), Some(3));
    assert!(properties["query"]["description"].as_str().expect("description").contains("minLength: 1"), "{}", properties["query"]);
}

#[test]
fn anthropic_declares_its_own_text_editor_by_type() {
    let policy = "version = 1\n[roles.editor]\ntools = [\"str_replace_based_edit_tool\", \"read_file\"]\n";
    let runtime = builtin_runtime().policy("editor.toml", policy).build().expect("runtime builds");
    let tools = render(Format::Anthropic, tools_for_role(&runtime, "editor"));
    let tools = tools.as_array().expect("tools");
    assert_eq!(tools.len(), 2);
    let editor = tools.iter().find(|tool| tool["name"] == "str_replace_based_edit_tool").expect("the text editor");
    assert_eq!(editor, &serde_json::json!({"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}));
    assert!(tools.iter().any(|tool| tool["name"] == "read_file" && tool["input_schema"].is_object()));
}
