//! Tool argument schemas: checked once when a component loads, then used to validate every
//! call's arguments before the component runs.

use toolcell_types::{ToolError, ToolErrorKind};

/// Arguments larger than this are refused before parsing.
pub const MAX_ARGS_BYTES: usize = 16 * 1024 * 1024;
/// At most this many schema violations are listed in one error.
const MAX_LISTED_VIOLATIONS: usize = 5;
/// Each violation's text is cut to this many characters (it may quote a large argument).
const MAX_VIOLATION_CHARS: usize = 300;

/// A tool's compiled argument schema.
pub struct ArgsSchema {
    validator: jsonschema::Validator,
    /// The schema itself, for finding the optional properties a call sends as `null`.
    schema: serde_json::Value,
}

impl ArgsSchema {
    /// Compile a tool's `input-schema` text.
    ///
    /// # Errors
    ///
    /// A reason, if the text is not JSON, not an object schema, or not a valid JSON Schema.
    pub fn compile(text: &str) -> Result<(Self, serde_json::Value), String> {
        let schema: serde_json::Value = serde_json::from_str(text).map_err(|error| format!("its input schema is not JSON: {error}"))?;
        if schema.get("type").and_then(serde_json::Value::as_str) != Some("object") {
            return Err("its input schema must have `\"type\": \"object\"` (tool arguments are a JSON object)".to_owned());
        }
        jsonschema::meta::validate(&schema).map_err(|error| format!("its input schema is not a valid JSON Schema: {error}"))?;
        let validator = jsonschema::validator_for(&schema).map_err(|error| format!("its input schema cannot be compiled: {error}"))?;
        Ok((ArgsSchema { validator, schema: schema.clone() }, schema))
    }

    /// Check a tool's `output-schema` text: JSON, an object schema, a valid JSON Schema.
    ///
    /// # Errors
    ///
    /// A reason naming what is wrong.
    pub fn output(text: &str) -> Result<serde_json::Value, String> {
        let schema: serde_json::Value = serde_json::from_str(text).map_err(|error| format!("its output schema is not JSON: {error}"))?;
        if schema.get("type").and_then(serde_json::Value::as_str) != Some("object") {
            return Err("its output schema must have `\"type\": \"object\"` (MCP's structured content is a JSON object)".to_owned());
        }
        jsonschema::meta::validate(&schema).map_err(|error| format!("its output schema is not a valid JSON Schema: {error}"))?;
        Ok(schema)
    }

    /// Parse and validate a call's arguments, as the tool will receive them. An optional
    /// property sent as `null` counts as left out (clients of OpenAI's strict mode send every
    /// property, `null` for those they leave out): the arguments without it are returned, and
    /// they are what the tool receives.
    ///
    /// # Errors
    ///
    /// `too-large` over [`MAX_ARGS_BYTES`]; `invalid-args` naming each offending field.
    pub fn check(&self, tool: &str, args: &str) -> Result<Option<String>, ToolError> {
        if args.len() > MAX_ARGS_BYTES {
            return Err(ToolError::new(
                ToolErrorKind::TooLarge,
                format!(
                    "the arguments to `{tool}` are {} bytes, over the limit of {MAX_ARGS_BYTES} bytes: split the work into smaller calls",
                    args.len()
                ),
            ));
        }
        let mut value: serde_json::Value = serde_json::from_str(args).map_err(|error| {
            ToolError::new(
                ToolErrorKind::InvalidArgs,
                format!("the arguments to `{tool}` are not valid JSON ({error}): send a JSON object such as {{\"path\": \"src/main.rs\"}}"),
            )
        })?;
        let dropped = drop_optional_nulls(&mut value, &self.schema);
        if self.validator.is_valid(&value) {
            // A whole number written with a fraction or exponent (`5.0`, `1e3`) is an integer to
            // the schema but not to the tool reading it: written as one, or refused here, named,
            // if no integer type holds it (`1e300`).
            let mut path = String::new();
            let whole = whole_numbers(&mut value, &self.schema, &mut path).map_err(|field| {
                ToolError::new(
                    ToolErrorKind::InvalidArgs,
                    format!(
                        "invalid arguments to `{tool}`: `{field}` is {}, out of the range of whole numbers a tool reads: give a whole number between {} and {}",
                        field_value(&value, &field),
                        i64::MIN,
                        u64::MAX
                    ),
                )
                .with_hint(format!("check `{tool}`'s input schema (MCP `tools/list`, or `toolcell tools`) and send the arguments it describes"))
            })?;
            return Ok((dropped || whole).then(|| value.to_string()));
        }
        let rewritten = dropped.then(|| value.to_string());
        let violations: Vec<String> = self
            .validator
            .iter_errors(&value)
            .take(MAX_LISTED_VIOLATIONS + 1)
            .map(|error| {
                let field = field_name(error.instance_path().as_str());
                let text = clip(&error.to_string());
                match field {
                    Some(field) => format!("`{field}`: {text}"),
                    None => text,
                }
            })
            .collect();
        if violations.is_empty() {
            return Ok(rewritten);
        }
        let more = if violations.len() > MAX_LISTED_VIOLATIONS { "; and more" } else { "" };
        let listed = violations.iter().take(MAX_LISTED_VIOLATIONS).cloned().collect::<Vec<_>>().join("; ");
        Err(ToolError::new(ToolErrorKind::InvalidArgs, format!("invalid arguments to `{tool}`: {listed}{more}.")).with_hint(format!(
            "check `{tool}`'s input schema (MCP `tools/list`, or `toolcell tools`) and send the arguments it describes"
        )))
    }
}

/// Remove from `value` the properties that are `null` where `schema` neither requires them nor
/// lets them be `null`, through nested objects and arrays; whether anything was removed.
fn drop_optional_nulls(value: &mut serde_json::Value, schema: &serde_json::Value) -> bool {
    use serde_json::Value;
    let mut changed = false;
    match value {
        Value::Object(fields) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let required = |name: &str| {
                schema.get("required").and_then(Value::as_array).is_some_and(|required| required.iter().any(|entry| entry == name))
            };
            let accepts_null = |name: &str| {
                properties
                    .and_then(|properties| properties.get(name))
                    .and_then(|property| property.get("type"))
                    .is_some_and(|kind| kind == "null" || kind.as_array().is_some_and(|kinds| kinds.iter().any(|kind| kind == "null")))
            };
            fields.retain(|name, field| {
                let keep = !field.is_null() || required(name) || accepts_null(name);
                changed |= !keep;
                keep
            });
            if let Some(properties) = properties {
                for (name, field) in fields.iter_mut() {
                    if let Some(property) = properties.get(name) {
                        changed |= drop_optional_nulls(field, property);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for element in items {
                    changed |= drop_optional_nulls(element, item);
                }
            }
        }
        _ => {}
    }
    changed
}

/// Write as integers the numbers of `value` that `schema` types `integer` but that were written
/// with a fraction or an exponent (`5.0`, `1e3`), through nested objects and arrays; whether
/// any was. `path` is the field being looked at (`edits[0].line`).
///
/// # Errors
///
/// The field whose number no 64-bit integer holds (`1e300`).
fn whole_numbers(value: &mut serde_json::Value, schema: &serde_json::Value, path: &mut String) -> Result<bool, String> {
    use serde_json::Value;
    let mut changed = false;
    let at = path.len();
    match value {
        Value::Number(number) if number.is_f64() && types_integer(schema) => {
            let float = number.as_f64().unwrap_or(f64::NAN);
            // Exactly: `2^63` and `2^64` are the first floats out of each range.
            let whole = if (-9_223_372_036_854_775_808.0..0.0).contains(&float) {
                Some(Value::from(float as i64))
            } else if (0.0..18_446_744_073_709_551_616.0).contains(&float) {
                Some(Value::from(float as u64))
            } else {
                None
            };
            match whole {
                Some(whole) if float.fract() == 0.0 => {
                    *value = whole;
                    changed = true;
                }
                _ => return Err(path.clone()),
            }
        }
        Value::Object(fields) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, field) in fields.iter_mut() {
                    if let Some(property) = properties.get(name) {
                        if !path.is_empty() {
                            path.push('.');
                        }
                        path.push_str(name);
                        changed |= whole_numbers(field, property, path)?;
                        path.truncate(at);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (index, element) in items.iter_mut().enumerate() {
                    path.push_str(&format!("[{index}]"));
                    changed |= whole_numbers(element, item, path)?;
                    path.truncate(at);
                }
            }
        }
        _ => {}
    }
    Ok(changed)
}

/// Whether `schema`'s `type` is `integer`, or a list holding it.
fn types_integer(schema: &serde_json::Value) -> bool {
    schema
        .get("type")
        .is_some_and(|kind| kind == "integer" || kind.as_array().is_some_and(|kinds| kinds.iter().any(|kind| kind == "integer")))
}

/// The value of the field `field` (as [`whole_numbers`] names it) in `value`, as JSON text.
fn field_value(value: &serde_json::Value, field: &str) -> String {
    let mut current = value;
    for part in field.split('.') {
        let (name, indexes) = part.split_once('[').map_or((part, ""), |(name, rest)| (name, rest));
        if let Some(next) = current.get(name) {
            current = next;
        }
        for index in indexes.split('[').filter_map(|index| index.trim_end_matches(']').parse::<usize>().ok()) {
            if let Some(next) = current.get(index) {
                current = next;
            }
        }
    }
    current.to_string()
}

/// `/edits/0/old_string` as `edits[0].old_string`; `None` for the whole arguments object.
fn field_name(pointer: &str) -> Option<String> {
    if pointer.is_empty() {
        return None;
    }
    let mut name = String::new();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
            name.push_str(&format!("[{segment}]"));
        } else {
            if !name.is_empty() {
                name.push('.');
            }
            name.push_str(&segment);
        }
    }
    Some(name)
}

fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_VIOLATION_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> ArgsSchema {
        let text = r#"{
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "offset": {"type": "integer", "minimum": 1},
                "edits": {"type": "array", "items": {"type": "object", "properties": {"old_string": {"type": "string"}}}}
            },
            "required": ["path"],
            "additionalProperties": false
        }"#;
        ArgsSchema::compile(text).expect("valid schema").0
    }

    fn message(args: &str) -> String {
        match schema().check("t", args) {
            Ok(_) => "ok".to_owned(),
            Err(error) => format!("{}: {}", error.kind, error.message),
        }
    }

    #[test]
    fn a_whole_number_with_a_fraction_or_exponent_is_written_as_an_integer_and_one_out_of_range_is_named() {
        let text = r#"{"type": "object", "properties": {"offset": {"type": "integer", "minimum": 1}, "lines": {"type": "array", "items": {"type": "integer"}}}}"#;
        let schema = ArgsSchema::compile(text).expect("valid schema").0;
        let rewritten = schema.check("read_file", r#"{"offset": 5.0, "lines": [1e3, -2.0, 7]}"#).expect("valid").expect("rewritten");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&rewritten).expect("JSON"),
            serde_json::json!({"offset": 5, "lines": [1000, -2, 7]})
        );
        assert_eq!(schema.check("read_file", r#"{"offset": 5}"#).expect("valid"), None, "nothing to rewrite");
        for (args, field, shown) in [(r#"{"offset": 1e300}"#, "`offset`", "1e300"), (r#"{"lines": [1, 2e19]}"#, "`lines[1]`", "2e19")] {
            let error = schema.check("read_file", args).expect_err(args);
            assert_eq!(error.kind, ToolErrorKind::InvalidArgs, "{args}");
            assert!(error.message.contains(field) && error.message.contains("out of the range of whole numbers"), "{}", error.message);
            assert!(error.message.contains(&shown.replace("e", "e+")) || error.message.contains(shown), "{}", error.message);
        }
    }

    #[test]
    fn argument_errors_name_the_field() {
        assert_eq!(message(r#"{"path": "a"}"#), "ok");
        let table = [
            (r#"{"path": "a", "offset": 0}"#, "`offset`"),
            (r#"{"path": 3}"#, "`path`"),
            (r#"{"path": "a", "edits": [{"old_string": 1}]}"#, "`edits[0].old_string`"),
            (r#"{}"#, "\"path\" is a required property"),
            (r#"{"path": "a", "bogus": 1}"#, "bogus"),
            (r#"{"path": "#, "not valid JSON"),
            (r#"[1]"#, "invalid-args"),
        ];
        for (args, expected) in table {
            let got = message(args);
            assert!(got.starts_with("invalid-args"), "{args}: {got}");
            assert!(got.contains(expected), "{args}: expected {expected:?} in {got}");
        }
    }

    #[test]
    fn optional_nulls_count_as_left_out() {
        let schema = schema();
        let checked = |args: &str| {
            schema
                .check("t", args)
                .map(|rewritten| rewritten.map(|text| serde_json::from_str::<serde_json::Value>(&text).expect("JSON")))
                .map_err(|error| error.message)
        };
        assert_eq!(checked(r#"{"path": "a"}"#), Ok(None));
        assert_eq!(checked(r#"{"path": "a", "offset": null}"#), Ok(Some(serde_json::json!({"path": "a"}))));
        assert_eq!(
            checked(r#"{"path": "a", "edits": [{"old_string": null}], "offset": 2}"#),
            Ok(Some(serde_json::json!({"path": "a", "edits": [{}], "offset": 2})))
        );
        // A required property is never dropped: `null` is its error.
        assert!(checked(r#"{"path": null}"#).is_err_and(|message| message.contains("`path`")));
    }

    #[test]
    fn schemas_are_checked_at_load() {
        assert!(ArgsSchema::compile("not json").is_err());
        assert!(ArgsSchema::compile(r#"{"type": "string"}"#).is_err());
        assert!(ArgsSchema::compile(r#"{"type": "object", "properties": {"a": {"type": 12}}}"#).is_err());
        assert!(ArgsSchema::compile(r#"{"type": "object", "minProperties": -1}"#).is_err());
    }

    #[test]
    fn field_names() {
        assert_eq!(field_name(""), None);
        assert_eq!(field_name("/path"), Some("path".to_owned()));
        assert_eq!(field_name("/edits/2/new_string"), Some("edits[2].new_string".to_owned()));
        assert_eq!(field_name("/a~1b"), Some("a/b".to_owned()));
    }
}
