//! Argument sets generated from a tool's input schema: typical values, then edge values for
//! each property in turn.

use serde_json::{Value, json};

/// At most this many generated argument sets are tried.
const MAX_GENERATED: usize = 200;

/// Argument sets for a tool's schema: typical values for every required property, then each
/// property in turn set to each of its edge values.
pub fn generate(schema: &Value) -> Vec<Value> {
    let properties = schema["properties"].as_object().cloned().unwrap_or_default();
    let required: Vec<&str> =
        schema["required"].as_array().map(|names| names.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let mut base = serde_json::Map::new();
    for name in &required {
        if let Some(property) = properties.get(*name) {
            base.insert((*name).to_owned(), typical(property, name));
        }
    }
    let mut sets = vec![Value::Object(base.clone())];
    for (name, property) in &properties {
        for variant in variants(property, name) {
            let mut args = base.clone();
            args.insert(name.clone(), variant);
            sets.push(Value::Object(args));
        }
    }
    sets.truncate(MAX_GENERATED);
    sets
}

fn kind(schema: &Value) -> &str {
    match &schema["type"] {
        Value::String(kind) => kind,
        Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).find(|kind| *kind != "null").unwrap_or("null"),
        _ => "",
    }
}

fn typical(schema: &Value, name: &str) -> Value {
    if let Some(first) = schema["enum"].as_array().and_then(|values| values.first()) {
        return first.clone();
    }
    match kind(schema) {
        "string" if name.contains("path") || name == "source" || name == "destination" => json!("notes.txt"),
        "string" => json!("alpha"),
        "integer" => schema["minimum"].as_i64().map_or(json!(1), |minimum| json!(minimum.max(1))),
        "number" => json!(1.0),
        "boolean" => json!(false),
        "array" => json!([typical(&schema["items"], name)]),
        "object" => json!({}),
        _ => json!("alpha"),
    }
}

fn variants(schema: &Value, name: &str) -> Vec<Value> {
    if let Some(values) = schema["enum"].as_array() {
        return values.clone();
    }
    match kind(schema) {
        "string" => [
            "",
            "notes.txt",
            "missing.txt",
            "src",
            "docs/guide.md",
            "escape.txt",
            "../outside/secret.txt",
            "src/../../outside/secret.txt",
            "/etc/passwd",
            "C:\\Windows\\win.ini",
            "~/x",
            "%2e%2e/outside/secret.txt",
            "üñíçødé \u{7} name",
            "*",
            "(a+)+$",
        ]
        .iter()
        .map(|text| json!(text))
        .chain([json!("x".repeat(10_000))])
        .collect(),
        "integer" => {
            let mut values = vec![json!(0), json!(1), json!(-1), json!(i64::MAX)];
            values.extend(schema["minimum"].as_i64().map(|minimum| json!(minimum)));
            values.extend(schema["maximum"].as_i64().map(|maximum| json!(maximum)));
            values
        }
        "number" => vec![json!(0.0), json!(-1.5), json!(1e300)],
        "boolean" => vec![json!(true), json!(false)],
        "array" => {
            let item = typical(&schema["items"], name);
            vec![json!([]), json!([item.clone()]), Value::Array(vec![item; 100])]
        }
        "object" => vec![json!({})],
        _ => Vec::new(),
    }
}
