//! The schema as a tree of the forms the converter knows, read from the JSON
//! in the order and with the precedence llama.cpp b11434's
//! `common_chat_schema_from_json` (common/json-schema.cpp) uses, and with its
//! error messages ("JSON schema error at PATH: ..."), so that the same
//! schemas are refused with the same words.
//!
//! What is read where:
//! - `$ref` first (only "#/..." into the same document; the target is read
//!   once, under the reference as its path, a cycle ends at the reference);
//! - then `oneOf` (or else `anyOf`): alternatives, the rest of the schema
//!   ignored;
//! - then `type` as a list: one alternative per type, each the whole schema
//!   with that one type;
//! - then `const`, then `enum` (whatever the type says);
//! - then by `type`: "object" (`properties`, `required`,
//!   `additionalProperties`; `allOf` when there are neither properties nor
//!   additionalProperties), "string" (`allOf` if present, else `pattern`,
//!   `format`, `minLength`, `maxLength`), "array" (`items` or `prefixItems`
//!   as a list: a tuple; `items` as a schema with `minItems`/`maxItems`),
//!   "integer" (`minimum`/`maximum`, else `exclusiveMinimum`/
//!   `exclusiveMaximum`, fractions rounded inwards), "number", "boolean",
//!   "null";
//! - without a type, the keywords present decide: properties (or an
//!   additionalProperties other than `true`) make an object, then `allOf`,
//!   then `items`/`prefixItems` an array, then a string keyword a string;
//!   otherwise any JSON value.
//!
//! Silently ignored, as llama.cpp ignores them (the converter adds a
//! warning for the ones marked *): annotations (`title`, `description`,
//! `default`, `examples`, `$schema`, `$id`, `$comment`, ...), keywords it
//! does not know, `$defs`/`definitions` except through `$ref`, everything
//! beside a `$ref` or `oneOf`/`anyOf`, *`minimum`/`maximum`/`exclusive*` of a
//! "number", *`minItems`/`maxItems` of a tuple, *`minLength`/`maxLength`
//! beside a `pattern` or a known `format`, *a `format` it does not know
//! (anything but date, time, date-time, uuid, uuid1..uuid5), *`allOf`
//! beside another type or beside properties, `required` when it is not a
//! list, names in it that are not strings.
//!
//! Refused here (where llama.cpp would silently produce a grammar looser
//! than the schema): the validation keywords it never reads, listed in
//! [`UNSUPPORTED_KEYWORDS`]. Refused for safety: nesting deeper than
//! [`super::MAX_DEPTH`], more than [`super::MAX_NODES`] schema nodes.
use super::{MAX_DEPTH, MAX_NODES};
use crate::engine::error::{Error, Result};
use serde_json::{Map, Value};
use std::collections::HashMap;

/// Validation keywords of JSON Schema that llama.cpp's converter never reads:
/// a grammar made without them would let the model write values the schema
/// rejects, so the conversion croaks naming the keyword. (`uniqueItems` only
/// when true; `then`/`else` do nothing without `if`.)
pub(super) const UNSUPPORTED_KEYWORDS: &[&str] = &[
    "not",
    "if",
    "dependentSchemas",
    "dependentRequired",
    "dependencies",
    "patternProperties",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "multipleOf",
    "$dynamicRef",
    "$recursiveRef",
];

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum StringFormat {
    None,
    Uuid,
    Date,
    Time,
    DateTime,
}

pub(super) struct Property<'a> {
    pub name: &'a str,
    pub schema: Node<'a>,
    pub required: bool,
}

pub(super) enum Node<'a> {
    /// Any JSON value.
    Any,
    /// `$ref`: the target is `Document::refs[reference]`.
    Ref(&'a str),
    /// oneOf / anyOf, or a list of types.
    AnyOf(Vec<Node<'a>>),
    AllOf(Vec<Node<'a>>),
    Const(&'a Value),
    Enum(&'a [Value]),
    Null,
    Boolean,
    Number,
    /// Inclusive bounds, `i64::MIN`/`i64::MAX` for none.
    Integer {
        minimum: i64,
        maximum: i64,
    },
    /// `pattern` empty when absent (as in llama.cpp: an empty pattern is no
    /// pattern); `max_length` -1 for none.
    String {
        pattern: &'a str,
        format: StringFormat,
        min_length: i32,
        max_length: i32,
    },
    /// `max_items` -1 for none.
    Array {
        items: Box<Node<'a>>,
        min_items: i32,
        max_items: i32,
    },
    Tuple(Vec<Node<'a>>),
    /// `additional` is None when no other keys are allowed.
    Object {
        properties: Vec<Property<'a>>,
        additional: Option<Box<Node<'a>>>,
    },
}

pub(super) struct Document<'a> {
    pub root: Node<'a>,
    pub refs: HashMap<&'a str, Node<'a>>,
    pub warnings: Vec<String>,
}

impl<'a> Document<'a> {
    pub fn from_json(schema: &'a Value) -> Result<Self> {
        let mut builder = Builder { root: schema, refs: HashMap::new(), depth: 0, nodes: 0, warnings: Vec::new() };
        let root = builder.node(schema, "#", None)?;
        // every reserved reference was built, or the build failed above
        let refs = builder.refs.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect();
        Ok(Document { root, refs, warnings: builder.warnings })
    }
}

struct Builder<'a> {
    root: &'a Value,
    /// None while the target is being built (a cycle stops there).
    refs: HashMap<&'a str, Option<Node<'a>>>,
    depth: usize,
    nodes: usize,
    warnings: Vec<String>,
}

fn fail<T>(path: &str, message: &str) -> Result<T> {
    Err(Error::Argument(format!("JSON schema conversion failed: JSON schema error at {path}: {message}")))
}

/// nlohmann's `is_number_integer`: a number read without fraction or exponent
/// that fits 64 bits.
fn as_integer(value: &Value) -> Option<i64> {
    match value {
        // nlohmann's get<int64_t> of an unsigned above i64::MAX wraps
        Value::Number(n) => n.as_i64().or_else(|| n.as_u64().map(|u| u as i64)),
        _ => None,
    }
}

/// A double cast to int64 as x86's cvttsd2si does: out of range gives i64::MIN.
fn double_to_i64(d: f64) -> i64 {
    // -2^63 ..< 2^63, both exact as doubles
    let limit = -(i64::MIN as f64);
    if (-limit..limit).contains(&d) {
        d as i64
    } else {
        i64::MIN
    }
}

impl<'a> Builder<'a> {
    fn count(schema: &Map<String, Value>, key: &str, path: &str, default: i32) -> Result<i32> {
        let Some(value) = schema.get(key) else { return Ok(default) };
        // nlohmann's get<int> truncates to 32 bits, as a C++ cast does
        match as_integer(value).map(|v| v as i32) {
            Some(v) if v >= 0 => Ok(v),
            _ => fail(path, &format!("{key} must be a non-negative integer")),
        }
    }

    /// A bound of an integer; a fraction is rounded inwards.
    fn bound(schema: &Map<String, Value>, key: &str, path: &str, round_up: bool) -> Result<i64> {
        let value = &schema[key];
        if let Some(v) = as_integer(value) {
            return Ok(v);
        }
        match value.as_f64() {
            Some(d) => Ok(double_to_i64(if round_up { d.ceil() } else { d.floor() })),
            None => fail(path, &format!("{key} must be a number")),
        }
    }

    fn format(schema: &Map<String, Value>, path: &str) -> Result<StringFormat> {
        let Some(value) = schema.get("format") else { return Ok(StringFormat::None) };
        let Some(format) = value.as_str() else { return fail(path, "format must be a string") };
        Ok(match format {
            "date" => StringFormat::Date,
            "time" => StringFormat::Time,
            "date-time" => StringFormat::DateTime,
            "uuid" | "uuid1" | "uuid2" | "uuid3" | "uuid4" | "uuid5" => StringFormat::Uuid,
            _ => StringFormat::None,
        })
    }

    fn warn(&mut self, path: &str, message: &str) {
        self.warnings.push(format!("{path}: {message}"));
    }

    /// The JSON value a "#/a/b/0" reference points to: split at "/" with no
    /// unescaping of "~0"/"~1", an array index read as `std::stoull` reads it.
    fn resolve(&self, reference: &str, path: &str) -> Result<&'a Value> {
        let mut target = self.root;
        for step in reference[1..].split('/').skip(1) {
            if let Some(next) = target.as_object().and_then(|o| o.get(step)) {
                target = next;
            } else if let Some(items) = target.as_array() {
                match parse_stoull(step).filter(|&i| i < items.len() as u64) {
                    Some(i) => target = &items[i as usize],
                    None => {
                        return fail(path, &format!("cannot resolve $ref {reference}, {step} is out of range"));
                    }
                }
            } else {
                return fail(path, &format!("cannot resolve $ref {reference}, {step} not found"));
            }
        }
        Ok(target)
    }

    fn reference(&mut self, value: &'a Value, path: &str) -> Result<Node<'a>> {
        let Some(reference) = value.as_str() else { return fail(path, "$ref must be a string") };
        if !reference.starts_with("#/") {
            return fail(
                path,
                &format!("unsupported $ref {reference}, only references into the same document are supported"),
            );
        }
        if !self.refs.contains_key(reference) {
            // reserved first, so that a cycle back to this reference stops here
            self.refs.insert(reference, None);
            let target = self.resolve(reference, path)?;
            let node = self.node(target, reference, None)?;
            self.refs.insert(reference, Some(node));
        }
        Ok(Node::Ref(reference))
    }

    fn alternatives(&mut self, alternatives: &'a Value, path: &str) -> Result<Vec<Node<'a>>> {
        let Some(items) = alternatives.as_array() else { return fail(path, "must be an array of schemas") };
        if items.is_empty() {
            return fail(path, "must not be empty");
        }
        items.iter().enumerate().map(|(i, alt)| self.node(alt, &format!("{path}/{i}"), None)).collect()
    }

    fn object(&mut self, schema: &'a Map<String, Value>, path: &str) -> Result<Node<'a>> {
        // a "required" that is not a list, and names in it that are not strings, are ignored
        let required: Vec<&str> = match schema.get("required") {
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let mut properties = Vec::new();
        if let Some(props) = schema.get("properties") {
            let Some(props) = props.as_object() else { return fail(path, "properties must be an object") };
            for (name, prop) in props {
                let node = self.node(prop, &format!("{path}/properties/{name}"), None)?;
                properties.push(Property { name, schema: node, required: required.contains(&name.as_str()) });
            }
        }
        let additional = match schema.get("additionalProperties") {
            Some(Value::Bool(true)) => Some(Box::new(Node::Any)),
            Some(Value::Bool(false)) => None,
            Some(extra @ Value::Object(_)) => {
                Some(Box::new(self.node(extra, &format!("{path}/additionalProperties"), None)?))
            }
            Some(_) => return fail(path, "additionalProperties must be a boolean or a schema"),
            // {"type": "object"} alone accepts any object
            None if !schema.contains_key("properties") => Some(Box::new(Node::Any)),
            None => None,
        };
        Ok(Node::Object { properties, additional })
    }

    fn array(&mut self, schema: &'a Map<String, Value>, path: &str) -> Result<Node<'a>> {
        // "items" wins over "prefixItems"; either as a list is a tuple
        let key = if schema.contains_key("items") { "items" } else { "prefixItems" };
        let items = match schema.get(key) {
            Some(Value::Array(list)) => {
                if ["minItems", "maxItems"].iter().any(|k| schema.contains_key(*k)) {
                    self.warn(path, "minItems/maxItems of a tuple are ignored (llama.cpp writes exactly its items)");
                }
                let tuple = list
                    .iter()
                    .enumerate()
                    .map(|(i, item)| self.node(item, &format!("{path}/{key}/{i}"), None))
                    .collect::<Result<_>>()?;
                return Ok(Node::Tuple(tuple));
            }
            Some(item) => self.node(item, &format!("{path}/{key}"), None)?,
            None => Node::Any,
        };
        let min_items = Self::count(schema, "minItems", path, 0)?;
        let max_items = Self::count(schema, "maxItems", path, -1)?;
        Ok(Node::Array { items: Box::new(items), min_items, max_items })
    }

    fn string(&mut self, schema: &'a Map<String, Value>, path: &str) -> Result<Node<'a>> {
        let pattern = match schema.get("pattern") {
            Some(Value::String(p)) => p.as_str(),
            Some(_) => return fail(path, "pattern must be a string"),
            None => "",
        };
        let format = Self::format(schema, path)?;
        let min_length = Self::count(schema, "minLength", path, 0)?;
        let max_length = Self::count(schema, "maxLength", path, -1)?;
        if let Some(Value::String(name)) = schema.get("format") {
            if format == StringFormat::None {
                self.warn(
                    path,
                    &format!("format \"{name}\" is not enforced (llama.cpp knows date, time, date-time and uuid)"),
                );
            }
        }
        let has_length = schema.contains_key("minLength") || schema.contains_key("maxLength");
        if has_length && (!pattern.is_empty() || format != StringFormat::None) {
            self.warn(path, "minLength/maxLength beside a pattern or format are ignored");
        }
        Ok(Node::String { pattern, format, min_length, max_length })
    }

    fn integer(schema: &Map<String, Value>, path: &str) -> Result<Node<'a>> {
        let mut minimum = i64::MIN;
        let mut maximum = i64::MAX;
        if schema.contains_key("minimum") {
            minimum = Self::bound(schema, "minimum", path, true)?;
        } else if schema.contains_key("exclusiveMinimum") {
            minimum = Self::bound(schema, "exclusiveMinimum", path, false)?.wrapping_add(1);
        }
        if schema.contains_key("maximum") {
            maximum = Self::bound(schema, "maximum", path, false)?;
        } else if schema.contains_key("exclusiveMaximum") {
            maximum = Self::bound(schema, "exclusiveMaximum", path, true)?.wrapping_sub(1);
        }
        Ok(Node::Integer { minimum, maximum })
    }

    fn check_keywords(&mut self, schema: &Map<String, Value>, path: &str) -> Result<()> {
        for (key, value) in schema {
            let unsupported =
                UNSUPPORTED_KEYWORDS.contains(&key.as_str()) && !(key == "uniqueItems" && value == &Value::Bool(false));
            if unsupported {
                return fail(
                    path,
                    &format!(
                        "unsupported keyword {key} (llama.cpp's converter ignores it, so its grammar would not enforce it)"
                    ),
                );
            }
        }
        Ok(())
    }

    /// One schema object. `type_override` is one entry of a `type` list,
    /// standing for the whole schema with that type (llama.cpp copies the
    /// schema and sets "type"; no copy is needed here).
    fn node(&mut self, schema: &'a Value, path: &str, type_override: Option<&'a Value>) -> Result<Node<'a>> {
        let Some(object) = schema.as_object() else { return fail(path, "schema must be an object") };
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return fail(
                path,
                &format!("the schema has more than {MAX_NODES} nodes (counting each use of a type list)"),
            );
        }
        if self.depth >= MAX_DEPTH {
            return fail(path, &format!("the schema is nested more than {MAX_DEPTH} levels deep"));
        }
        self.depth += 1;
        let node = self.node_inner(schema, object, path, type_override);
        self.depth -= 1;
        node
    }

    fn node_inner(
        &mut self,
        whole: &'a Value,
        schema: &'a Map<String, Value>,
        path: &str,
        type_override: Option<&'a Value>,
    ) -> Result<Node<'a>> {
        if type_override.is_none() {
            self.check_keywords(schema, path)?;
        }
        if let Some(reference) = schema.get("$ref") {
            return self.reference(reference, path);
        }
        if let Some((key, alts)) = schema.get_key_value("oneOf").or_else(|| schema.get_key_value("anyOf")) {
            return Ok(Node::AnyOf(self.alternatives(alts, &format!("{path}/{key}"))?));
        }
        let type_value = type_override.or_else(|| schema.get("type")).filter(|t| !t.is_null());
        if let Some(Value::Array(types)) = type_value {
            if types.is_empty() {
                return fail(path, "type must not be empty");
            }
            let mut alternatives = Vec::with_capacity(types.len());
            for (i, one) in types.iter().enumerate() {
                alternatives.push(self.node(whole, &format!("{path}/type/{i}"), Some(one))?);
            }
            return Ok(Node::AnyOf(alternatives));
        }
        if let Some(value) = schema.get("const") {
            return Ok(Node::Const(value));
        }
        if let Some(values) = schema.get("enum") {
            return match values.as_array() {
                Some(list) if !list.is_empty() => Ok(Node::Enum(list)),
                _ => fail(path, "enum must be a non-empty array"),
            };
        }
        let type_name = match type_value {
            None => "",
            Some(Value::String(name)) => name.as_str(),
            Some(_) => return fail(path, "type must be a string or an array of strings"),
        };
        let has_properties = schema.contains_key("properties")
            || schema.get("additionalProperties").is_some_and(|a| a != &Value::Bool(true));
        let all_of = schema.get("allOf");

        if all_of.is_some() && !matches!(type_name, "" | "object" | "string") {
            self.warn(path, &format!("allOf beside type {type_name} is ignored"));
        }
        if type_name.is_empty() {
            // without a type the keywords present decide, in llama.cpp's order
            if has_properties {
                if all_of.is_some() {
                    self.warn(path, "allOf beside properties is ignored");
                }
                return self.object(schema, path);
            }
            if let Some(parts) = all_of {
                return Ok(Node::AllOf(self.alternatives(parts, &format!("{path}/allOf"))?));
            }
            if schema.contains_key("items") || schema.contains_key("prefixItems") {
                return self.array(schema, path);
            }
            let stringish = ["pattern", "minLength", "maxLength"].iter().any(|k| schema.contains_key(*k))
                || Self::format(schema, path)? != StringFormat::None;
            if stringish {
                return self.string(schema, path);
            }
            return Ok(Node::Any);
        }
        match type_name {
            "object" => {
                if let Some(parts) = all_of {
                    if !has_properties {
                        return Ok(Node::AllOf(self.alternatives(parts, &format!("{path}/allOf"))?));
                    }
                    self.warn(path, "allOf beside properties is ignored");
                }
                self.object(schema, path)
            }
            "string" => match all_of {
                Some(parts) => Ok(Node::AllOf(self.alternatives(parts, &format!("{path}/allOf"))?)),
                None => self.string(schema, path),
            },
            "array" => self.array(schema, path),
            "integer" => Self::integer(schema, path),
            "number" => {
                let bounds = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];
                if bounds.iter().any(|k| schema.contains_key(*k)) {
                    self.warn(path, "the bounds of a number are not enforced (llama.cpp bounds only integers)");
                }
                Ok(Node::Number)
            }
            "boolean" => Ok(Node::Boolean),
            "null" => Ok(Node::Null),
            other => fail(path, &format!("unrecognized type {other}")),
        }
    }
}

/// `std::stoull` as llama.cpp's reference resolver uses it: leading white
/// space, an optional sign (a minus negates modulo 2^64), then at least one
/// digit, the rest of the text ignored; None where it would throw.
fn parse_stoull(text: &str) -> Option<u64> {
    let s = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let end = digits.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(digits.len());
    if end == 0 {
        return None;
    }
    let value: u64 = digits[..end].parse().ok()?;
    Some(if negative { value.wrapping_neg() } else { value })
}
