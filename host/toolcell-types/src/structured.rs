//! A tool's structured result, kept as the JSON text the tool wrote.
//!
//! A component hands its structured result over as JSON text, and most results go straight on
//! to a client as JSON text again (MCP's `structuredContent`). Parsing it into a
//! [`serde_json::Value`] and writing the value out again was the larger part of what a listing
//! of a hundred entries cost beyond the listing itself, so the text is checked to be JSON and
//! kept; it is parsed once, the first time something reads it as a value.

use std::borrow::Cow;
use std::sync::OnceLock;

use serde_json::Value;

/// A structured result: JSON, read as a [`Value`] (through `Deref`, parsed the first time) or
/// written out as text ([`Structured::json`]).
pub struct Structured {
    json: Box<str>,
    value: OnceLock<Value>,
}

impl Structured {
    /// The deepest nesting of arrays and objects a structured result may have: serde_json's own
    /// limit when it parses a [`Value`].
    pub const MAX_DEPTH: usize = 127;

    /// The structured result `json` is.
    ///
    /// Kept as written when that means to every reader what the [`Value`] it parses into
    /// means, its line breaks (whitespace between tokens: JSON text has them nowhere else) made
    /// spaces, so that it never ends a line of a line-delimited transport (MCP over stdio) it
    /// is written into, and without whitespace around it. Text with a repeated key in an object
    /// (which readers take differently: a `Value` keeps the last) or a number with a fraction or
    /// an exponent or out of the integers' range (which readers may round differently) is kept
    /// as its `Value` writes it instead.
    ///
    /// # Errors
    ///
    /// If `json` is not one JSON value that a [`Value`] can hold, by serde_json's rules (a
    /// lone surrogate escape or a number out of range is refused, and nesting deeper than
    /// [`Structured::MAX_DEPTH`]).
    pub fn from_json(json: String) -> Result<Structured, serde_json::Error> {
        let Check { as_value } = serde_json::from_str::<Check>(&json)?;
        if as_value {
            let value: Value = serde_json::from_str(&json)?;
            return Ok(Structured::from(value));
        }
        let json = if json.contains(['\n', '\r']) { json.replace(['\n', '\r'], " ") } else { json };
        let trimmed = json.trim_matches(|c: char| c.is_ascii_whitespace());
        let json = if trimmed.len() == json.len() { json } else { trimmed.to_owned() };
        Ok(Structured { json: json.into_boxed_str(), value: OnceLock::new() })
    }

    /// The JSON text.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// Whether it is a JSON object (without parsing it).
    pub fn is_object(&self) -> bool {
        self.json.starts_with('{')
    }

    /// The value.
    pub fn value(&self) -> &Value {
        // Checked when it was made to parse into a value.
        self.value.get_or_init(|| serde_json::from_str(&self.json).unwrap_or(Value::Null))
    }

    /// The value, owned.
    pub fn into_value(self) -> Value {
        match self.value.into_inner() {
            Some(value) => value,
            None => serde_json::from_str(&self.json).unwrap_or(Value::Null),
        }
    }
}

/// A JSON value read as a [`Value`] reads it, and dropped as it is read (serde_json's own
/// check of JSON text, `IgnoredAny`, takes what a `Value` cannot hold: a lone surrogate escape,
/// a number out of range, nesting without limit). `as_value`: the text is to be written as its
/// `Value` writes it (see [`Structured::from_json`]).
struct Check {
    as_value: bool,
}

impl<'de> serde::Deserialize<'de> for Check {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Check, D::Error> {
        deserializer.deserialize_any(Checking)
    }
}

struct Checking;

impl Checking {
    #[expect(clippy::unnecessary_wraps, reason = "the visitor's methods return results")]
    fn plain<E>(self) -> Result<Check, E> {
        Ok(Check { as_value: false })
    }
}

impl<'de> serde::de::Visitor<'de> for Checking {
    type Value = Check;

    fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Check, E> {
        self.plain()
    }

    fn visit_i64<E>(self, _: i64) -> Result<Check, E> {
        self.plain()
    }

    fn visit_u64<E>(self, _: u64) -> Result<Check, E> {
        self.plain()
    }

    fn visit_f64<E>(self, _: f64) -> Result<Check, E> {
        Ok(Check { as_value: true })
    }

    fn visit_str<E>(self, _: &str) -> Result<Check, E> {
        self.plain()
    }

    fn visit_unit<E>(self) -> Result<Check, E> {
        self.plain()
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut items: A) -> Result<Check, A::Error> {
        let mut as_value = false;
        while let Some(item) = items.next_element::<Check>()? {
            as_value |= item.as_value;
        }
        Ok(Check { as_value })
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut entries: A) -> Result<Check, A::Error> {
        let mut as_value = false;
        // Borrowed from the text unless they hold escapes. Compared one by one while few (kept
        // on the stack: an object of a few keys costs no allocation and no hashing); a set
        // beyond that.
        const FEW: usize = 16;
        let mut few: [Option<Cow<'de, str>>; FEW] = [const { None }; FEW];
        let mut count = 0;
        let mut many: Option<std::collections::HashSet<Cow<'de, str>>> = None;
        while let Some(Key(key)) = entries.next_key::<Key<'de>>()? {
            let repeated = match &mut many {
                Some(set) => !set.insert(key),
                None if count < FEW => {
                    let repeated = few[..count].iter().flatten().any(|seen| *seen == key);
                    few[count] = Some(key);
                    count += 1;
                    repeated
                }
                None => {
                    let mut set: std::collections::HashSet<Cow<'de, str>> = few.iter_mut().filter_map(Option::take).collect();
                    let repeated = !set.insert(key);
                    many = Some(set);
                    repeated
                }
            };
            as_value |= repeated | entries.next_value::<Check>()?.as_value;
        }
        Ok(Check { as_value })
    }
}

/// An object's key.
struct Key<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Key<'de>, D::Error> {
        struct Reading;
        impl<'de> serde::de::Visitor<'de> for Reading {
            type Value = Key<'de>;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a key")
            }

            fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }

            fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_owned())))
            }
        }
        deserializer.deserialize_str(Reading)
    }
}

impl From<Value> for Structured {
    fn from(value: Value) -> Structured {
        Structured { json: value.to_string().into_boxed_str(), value: OnceLock::from(value) }
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

/// As its value (a serializer cannot be handed JSON text to write as it is).
impl serde::Serialize for Structured {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
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
        // Serialized as its value.
        let message = serde_json::to_string(&serde_json::json!({"result": structured})).expect("serialize");
        assert_eq!(message, r#"{"result":{"entries":[1,2],"truncated":false}}"#);
        assert_eq!(structured.clone().into_value(), serde_json::json!({"entries": [1, 2], "truncated": false}));
        for bad in ["", "{", "{} {}", "[1,]", "nul", "\"a\nb\"", r#""\ud800""#, r#"{"a": "\udc00x"}"#, "[1e999]"] {
            assert!(Structured::from_json(bad.to_owned()).is_err(), "{bad:?} is not JSON");
        }
        // As deep as serde_json parses, and one level deeper; brackets in strings do not count.
        let nested = |depth: usize| format!("{}\"[{{\\\"\"{}", "[".repeat(depth), "]".repeat(depth));
        let deepest = Structured::from_json(nested(Structured::MAX_DEPTH)).expect("as deep as serde_json goes");
        assert!(deepest.value().is_array());
        assert!(Structured::from_json(nested(Structured::MAX_DEPTH + 1)).is_err(), "deeper than a value can be parsed");
        // Pretty-printed: no line break is left, the value is the same.
        let pretty = Structured::from_json("{\r\n  \"a\": [\n    1\n  ],\n  \"b\": \"x\\ny\"\n}\n".to_owned()).expect("JSON");
        assert!(!pretty.json().contains(['\n', '\r']), "{pretty}");
        assert_eq!(pretty, serde_json::json!({"a": [1], "b": "x\ny"}));
        // What readers could take differently is written as the value writes it: a repeated
        // key (the last kept, as a `Value` keeps it; in a large object too), a number with a
        // fraction or an exponent, or beyond the integers.
        let repeated = Structured::from_json(r#"{"p": "A", "q": [1.50], "p": "B"}"#.to_owned()).expect("JSON");
        assert_eq!(repeated.json(), r#"{"p":"B","q":[1.5]}"#);
        let mut large: Vec<String> = (0..40).map(|key| format!("\"k{key}\": {key}")).collect();
        large.push(r#""k\u0033": "again""#.to_owned());
        let large = Structured::from_json(format!("{{{}}}", large.join(", "))).expect("JSON");
        assert_eq!(large["k3"], "again");
        assert!(!large.json().contains("\"k3\":3,"), "{large}");
        for (text, written) in [("-0", "-0.0"), ("[1e2]", "[100.0]"), ("18446744073709551616", "1.8446744073709552e+19")] {
            assert_eq!(Structured::from_json(text.to_owned()).expect("JSON").json(), written, "{text}");
        }
        assert_eq!(Structured::from_json(r#"[-1, 18446744073709551615]"#.to_owned()).expect("JSON").json(), "[-1, 18446744073709551615]");
        // No key is read as anything but a key.
        let token = Structured::from_json(r#"{"$serde_json::private::RawValue": "[1,2]"}"#.to_owned()).expect("JSON");
        assert!(token.is_object() && token.value().is_object(), "{:?}", token.value());
        let from_value = Structured::from(serde_json::json!([1, "two"]));
        assert_eq!(from_value.json(), r#"[1,"two"]"#);
        assert!(!from_value.is_object());
    }
}
