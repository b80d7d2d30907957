//! A tool's structured result, kept as the JSON text the tool wrote.
//!
//! A component hands its structured result over as JSON text, and most results go straight on
//! to a client as JSON text again (MCP's `structuredContent`). Parsing it into a
//! [`serde_json::Value`] and writing the value out again was the larger part of what a listing
//! of a hundred entries cost beyond the listing itself, so the text is checked to be JSON and
//! kept; it is parsed once, the first time something reads it as a value.

use std::sync::OnceLock;

use serde_json::Value;
use serde_json::value::RawValue;

/// A structured result: JSON, read as a [`Value`] (through `Deref`, parsed the first time) or
/// written out as the text it came as ([`Structured::json`], and its `Serialize`).
pub struct Structured {
    json: Box<RawValue>,
    value: OnceLock<Value>,
}

impl Structured {
    /// The structured result `json` is.
    ///
    /// # Errors
    ///
    /// If `json` is not one JSON value that a [`Value`] can hold: serde_json's rules (a lone
    /// surrogate escape or a number out of range is refused, and nesting deeper than
    /// [`MAX_DEPTH`]).
    pub fn from_json(json: String) -> Result<Structured, serde_json::Error> {
        serde_json::from_str::<Check>(&json)?;
        let mut json = RawValue::from_string(json)?;
        // A line break in JSON text can only be whitespace between tokens (in a string it is
        // escaped): made a space, so that the text never ends a line of a line-delimited
        // transport (MCP over stdio) it is written into. Whitespace around the value is
        // dropped, as a value parsed and written out again has none.
        let text = json.get();
        if text.contains(['\n', '\r'])
            || text.starts_with(|c: char| c.is_ascii_whitespace())
            || text.ends_with(|c: char| c.is_ascii_whitespace())
        {
            json = RawValue::from_string(text.replace(['\n', '\r'], " ").trim_matches(|c: char| c.is_ascii_whitespace()).to_owned())?;
        }
        Ok(Structured { json, value: OnceLock::new() })
    }

    /// The JSON text.
    pub fn json(&self) -> &str {
        self.json.get()
    }

    /// The JSON text, as serde_json's raw value (to write it into a larger message as it is).
    pub fn raw(&self) -> &RawValue {
        &self.json
    }

    /// Whether it is a JSON object (without parsing it).
    pub fn is_object(&self) -> bool {
        self.json().starts_with('{')
    }

    /// The value.
    pub fn value(&self) -> &Value {
        // Checked to be JSON, and within serde_json's recursion limit, when it was made.
        self.value.get_or_init(|| serde_json::from_str(self.json()).unwrap_or(Value::Null))
    }

    /// The value, owned.
    pub fn into_value(self) -> Value {
        match self.value.into_inner() {
            Some(value) => value,
            None => serde_json::from_str(self.json.get()).unwrap_or(Value::Null),
        }
    }
}

/// A JSON value read as a [`Value`] would be, and dropped as it is read: serde_json's own check
/// of JSON text (`RawValue`, `IgnoredAny`) takes what a `Value` cannot hold (a lone surrogate
/// escape, a number out of range) and nests without limit.
struct Check;

impl<'de> serde::Deserialize<'de> for Check {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Check, D::Error> {
        deserializer.deserialize_any(Check)
    }
}

impl<'de> serde::de::Visitor<'de> for Check {
    type Value = Check;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Check, E> {
        Ok(Check)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Check, E> {
        Ok(Check)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Check, E> {
        Ok(Check)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Check, E> {
        Ok(Check)
    }

    fn visit_str<E>(self, _: &str) -> Result<Check, E> {
        Ok(Check)
    }

    fn visit_unit<E>(self) -> Result<Check, E> {
        Ok(Check)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<Check, A::Error> {
        while items.next_element::<Check>()?.is_some() {}
        Ok(Check)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut entries: A) -> Result<Check, A::Error> {
        while entries.next_entry::<Check, Check>()?.is_some() {}
        Ok(Check)
    }
}

/// The deepest nesting of arrays and objects a structured result may have: serde_json's own
/// limit when it parses a [`Value`].
pub const MAX_DEPTH: usize = 127;

impl From<Value> for Structured {
    fn from(value: Value) -> Structured {
        let json = serde_json::value::to_raw_value(&value).unwrap_or_else(|_| RawValue::NULL.to_owned());
        Structured { json, value: OnceLock::from(value) }
    }
}

/// JSON `null`.
impl Default for Structured {
    fn default() -> Structured {
        Structured::from(Value::Null)
    }
}

impl std::ops::Deref for Structured {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl Clone for Structured {
    fn clone(&self) -> Structured {
        Structured { json: self.json.clone(), value: self.value.clone() }
    }
}

impl PartialEq for Structured {
    fn eq(&self, other: &Structured) -> bool {
        self.json() == other.json() || self.value() == other.value()
    }
}

impl PartialEq<Value> for Structured {
    fn eq(&self, other: &Value) -> bool {
        self.value() == other
    }
}

impl std::fmt::Debug for Structured {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.json())
    }
}

impl std::fmt::Display for Structured {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.json())
    }
}

impl serde::Serialize for Structured {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_is_kept_checked_and_read_as_a_value_when_asked() {
        let structured = Structured::from_json(" {\"entries\": [1, 2], \"truncated\": false}\n".to_owned()).expect("JSON");
        assert_eq!(structured.json(), "{\"entries\": [1, 2], \"truncated\": false}", "kept as written, trimmed");
        assert!(structured.is_object());
        assert_eq!(structured["entries"][1], 2);
        assert_eq!(structured, serde_json::json!({"entries": [1, 2], "truncated": false}));
        // Written into a larger message as it is.
        let message = serde_json::to_string(&serde_json::json!({"result": structured})).expect("serialize");
        assert_eq!(message, r#"{"result":{"entries":[1,2],"truncated":false}}"#);
        let raw = serde_json::to_string(&std::collections::BTreeMap::from([("result", &structured)])).expect("serialize");
        assert_eq!(raw, r#"{"result":{"entries": [1, 2], "truncated": false}}"#);
        assert_eq!(structured.clone().into_value(), serde_json::json!({"entries": [1, 2], "truncated": false}));
        for bad in ["", "{", "{} {}", "[1,]", "nul", "\"a\nb\"", r#""\ud800""#, r#"{"a": "\udc00x"}"#, "[1e999]"] {
            assert!(Structured::from_json(bad.to_owned()).is_err(), "{bad:?} is not JSON");
        }
        // As deep as serde_json parses, and one level deeper; brackets in strings do not count.
        let nested = |depth: usize| format!("{}\"[{{\\\"\"{}", "[".repeat(depth), "]".repeat(depth));
        let deepest = Structured::from_json(nested(MAX_DEPTH)).expect("as deep as serde_json goes");
        assert!(deepest.value().is_array());
        assert!(Structured::from_json(nested(MAX_DEPTH + 1)).is_err(), "deeper than a value can be parsed");
        // Pretty-printed: no line break is left, the value is the same.
        let pretty = Structured::from_json("{\r\n  \"a\": [\n    1\n  ],\n  \"b\": \"x\\ny\"\n}\n".to_owned()).expect("JSON");
        assert!(!pretty.json().contains(['\n', '\r']), "{pretty}");
        assert_eq!(pretty, serde_json::json!({"a": [1], "b": "x\ny"}));
        let from_value = Structured::from(serde_json::json!([1, "two"]));
        assert_eq!(from_value.json(), r#"[1,"two"]"#);
        assert!(!from_value.is_object());
    }
}
