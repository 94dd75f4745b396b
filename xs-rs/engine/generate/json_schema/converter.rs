//! The walk from a [`Document`] to GBNF rules: llama.cpp b11434's
//! `common_chat_schema_converter` (common/json-schema-to-grammar.cpp),
//! rebuilt so that the same schema gives the same rules under the same
//! names, listed in the same (byte-sorted) order.
use super::json_dump::{dump, dump_string};
use super::schema::{Document, Node, StringFormat};
use super::{integer_range, MAX_DEPTH, MAX_GRAMMAR_BYTES, MAX_VISITS};
use crate::engine::error::{Error, Result};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};

/// The whitespace allowed between tokens.
const SPACE_RULE: &str = r#"| " " | "\n"{1,2} [ \t]{0,20}"#;

/// A built-in rule and the built-in rules it refers to.
struct BuiltinRule {
    name: &'static str,
    text: &'static str,
    deps: &'static [&'static str],
}

const PRIMITIVE_RULES: &[BuiltinRule] = &[
    BuiltinRule { name: "boolean", text: r#"("true" | "false")"#, deps: &[] },
    BuiltinRule { name: "decimal-part", text: "[0-9]{1,16}", deps: &[] },
    BuiltinRule { name: "integral-part", text: "[0] | [1-9] [0-9]{0,15}", deps: &[] },
    BuiltinRule {
        name: "number",
        text: r#"("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?"#,
        deps: &["integral-part", "decimal-part"],
    },
    BuiltinRule { name: "integer", text: r#"("-"? integral-part)"#, deps: &["integral-part"] },
    BuiltinRule {
        name: "value",
        text: "object | array | string | number | boolean | null",
        deps: &["object", "array", "string", "number", "boolean", "null"],
    },
    BuiltinRule {
        name: "object",
        text: r#""{" space ( string ":" space value ("," space string ":" space value)* )? space "}""#,
        deps: &["string", "value"],
    },
    BuiltinRule { name: "array", text: r#""[" space ( value ("," space value)* )? space "]""#, deps: &["value"] },
    BuiltinRule {
        name: "uuid",
        text: r#""\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"""#,
        deps: &[],
    },
    BuiltinRule { name: "char", text: r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4})"#, deps: &[] },
    BuiltinRule { name: "string", text: r#""\"" char* "\"""#, deps: &["char"] },
    BuiltinRule { name: "null", text: r#""null""#, deps: &[] },
];

const STRING_FORMAT_RULES: &[BuiltinRule] = &[
    BuiltinRule {
        name: "date",
        text: r#"[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )"#,
        deps: &[],
    },
    BuiltinRule {
        name: "time",
        text: r#"([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )"#,
        deps: &[],
    },
    BuiltinRule { name: "date-time", text: r#"date "T" time"#, deps: &["date", "time"] },
    BuiltinRule { name: "date-string", text: r#""\"" date "\"""#, deps: &["date"] },
    BuiltinRule { name: "time-string", text: r#""\"" time "\"""#, deps: &["time"] },
    BuiltinRule { name: "date-time-string", text: r#""\"" date-time "\"""#, deps: &["date-time"] },
];

fn builtin(name: &str) -> Option<&'static BuiltinRule> {
    PRIMITIVE_RULES.iter().chain(STRING_FORMAT_RULES).find(|r| r.name == name)
}

fn primitive(name: &str) -> &'static BuiltinRule {
    PRIMITIVE_RULES.iter().find(|r| r.name == name).expect("a primitive rule's name")
}

/// Names a schema's own rule may not take (it gets a "-" appended).
fn is_reserved_name(name: &str) -> bool {
    name == "root" || builtin(name).is_some()
}

/// Every run of characters other than ASCII letters, digits and "-" becomes
/// one "-" (byte-wise, as std::regex sees a UTF-8 string).
pub(super) fn sanitize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut in_run = false;
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' {
            out.push(b as char);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    out
}

/// A GBNF string literal: `"`, `\`, CR and LF escaped.
pub(super) fn format_literal(literal: &str) -> String {
    let mut out = String::with_capacity(literal.len() + 2);
    out.push('"');
    for c in literal.chars() {
        match c {
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `item` repeated `min..=max` times (`i32::MAX`: no upper count), with
/// `separator` between repetitions when given: llama.cpp's
/// `build_repetition`, whose text (odd spaces included) is kept as is.
pub(super) fn build_repetition(item: &str, min: i32, max: i32, separator: &str) -> String {
    let has_max = max != i32::MAX;
    if max == 0 {
        return String::new();
    }
    if min == 0 && max == 1 {
        return format!("{item}?");
    }
    if separator.is_empty() {
        if min == 1 && !has_max {
            return format!("{item}+");
        }
        if min == 0 && !has_max {
            return format!("{item}*");
        }
        let upper = if has_max { max.to_string() } else { String::new() };
        return format!("{item}{{{min},{upper}}}");
    }
    let rest = build_repetition(
        &format!("({separator} {item})"),
        if min == 0 { 0 } else { min - 1 },
        if has_max { max - 1 } else { max },
        "",
    );
    let result = format!("{item} {rest}");
    if min == 0 {
        format!("({result})?")
    } else {
        result
    }
}

/// The rules by name, sorted as std::map sorts them (bytes), with what the
/// numbering of a taken name needs, and a journal to take back the rules a
/// pattern added when it turns out unsupported.
#[derive(Default)]
pub(super) struct Rules {
    map: BTreeMap<String, String>,
    /// The names holding each rule text: an equal rule under a numbered
    /// name is found without trying every number.
    names_by_text: HashMap<String, Vec<String>>,
    /// For a taken base name, a number below which every numbered name is
    /// taken too (valid while no rule is taken back).
    numbered_from: HashMap<String, usize>,
    journal: Option<Vec<String>>,
    bytes: usize,
}

/// `i` when `name` is `base` followed by `i` as std::to_string writes it.
fn numbered_index(name: &str, base: &str) -> Option<usize> {
    let digits = name.strip_prefix(base)?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits.len() == 1 || !digits.starts_with('0'));
    if canonical {
        digits.parse().ok()
    } else {
        None
    }
}

impl Rules {
    fn insert(&mut self, name: String, text: String) {
        self.bytes += name.len() + text.len() + 6;
        self.names_by_text.entry(text.clone()).or_default().push(name.clone());
        if let Some(journal) = &mut self.journal {
            journal.push(name.clone());
        }
        self.map.insert(name, text);
    }

    pub(super) fn contains(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// llama.cpp's `_add_rule`: the sanitized name if it is free or holds
    /// the same text, else the first `name0`, `name1`, ... that is free or
    /// holds the same text. Returns the name the rule is under.
    pub(super) fn add(&mut self, name: &str, text: String) -> String {
        let base = sanitize_name(name);
        match self.map.get(&base) {
            None => {
                self.insert(base.clone(), text);
                return base;
            }
            Some(existing) if *existing == text => return base,
            Some(_) => {}
        }
        let equal =
            self.names_by_text.get(&text).and_then(|names| names.iter().filter_map(|n| numbered_index(n, &base)).min());
        let mut free = self.numbered_from.get(&base).copied().unwrap_or(0);
        while self.map.contains_key(&format!("{base}{free}")) {
            free += 1;
        }
        self.numbered_from.insert(base.clone(), free);
        let index = equal.filter(|&e| e < free).unwrap_or(free);
        let key = format!("{base}{index}");
        if index == free {
            self.insert(key.clone(), text);
        }
        key
    }

    pub(super) fn start_journal(&mut self) {
        self.journal = Some(Vec::new());
    }

    pub(super) fn keep_journal(&mut self) {
        self.journal = None;
    }

    /// Takes back every rule added since `start_journal`.
    pub(super) fn undo_journal(&mut self) {
        for name in self.journal.take().unwrap_or_default() {
            if let Some(text) = self.map.remove(&name) {
                self.bytes -= name.len() + text.len() + 6;
                if let Some(names) = self.names_by_text.get_mut(&text) {
                    names.retain(|n| *n != name);
                }
            }
        }
        self.numbered_from.clear();
    }

    fn format(&self) -> String {
        let mut out = String::with_capacity(self.bytes);
        for (name, text) in &self.map {
            out.push_str(name);
            out.push_str(" ::= ");
            out.push_str(text);
            out.push('\n');
        }
        out
    }
}

pub(super) struct Converter<'d, 'a> {
    doc: &'d Document<'a>,
    pub(super) rules: Rules,
    refs_being_resolved: HashSet<&'a str>,
    /// llama.cpp's `_errors`: reported together at the end.
    pub(super) errors: Vec<String>,
    pub(super) warnings: Vec<String>,
    depth: usize,
    visits: usize,
}

pub(super) fn too_large(what: &str) -> Error {
    Error::Argument(format!("JSON schema conversion failed: {what}"))
}

impl<'d, 'a> Converter<'d, 'a> {
    pub(super) fn new(doc: &'d Document<'a>) -> Self {
        let mut rules = Rules::default();
        rules.insert("space".to_string(), SPACE_RULE.to_string());
        Converter {
            doc,
            rules,
            refs_being_resolved: HashSet::new(),
            errors: Vec::new(),
            warnings: doc.warnings.clone(),
            depth: 0,
            visits: 0,
        }
    }

    /// The grammar text, or the errors llama.cpp would report.
    pub(super) fn finish(self) -> Result<(String, Vec<String>)> {
        if !self.errors.is_empty() {
            return Err(Error::Argument(format!("JSON schema conversion failed: {}", self.errors.join("; "))));
        }
        Ok((self.rules.format(), self.warnings))
    }

    fn add_primitive(&mut self, name: &str, rule: &'static BuiltinRule) -> String {
        let added = self.rules.add(name, rule.text.to_string());
        for dep in rule.deps {
            match builtin(dep) {
                Some(dep_rule) if !self.rules.contains(dep) => {
                    self.add_primitive(dep, dep_rule);
                }
                Some(_) => {}
                None => self.errors.push(format!("Rule {dep} not known")),
            }
        }
        added
    }

    pub(super) fn add_named_primitive(&mut self, name: &str, primitive_name: &str) -> String {
        self.add_primitive(name, primitive(primitive_name))
    }

    fn visit_primitive(&mut self, rule_name: &str, type_name: &str) -> String {
        let name = if rule_name == "root" { "root" } else { type_name };
        self.add_named_primitive(name, type_name)
    }

    fn constant_rule(value: &Value) -> String {
        let mut text = String::new();
        dump(value, &mut text);
        format_literal(&text)
    }

    fn check_budget(&self) -> Result<()> {
        if self.visits > MAX_VISITS {
            return Err(too_large(&format!(
                "the schema expands to more than {MAX_VISITS} nodes (through allOf and $ref)"
            )));
        }
        if self.rules.bytes > MAX_GRAMMAR_BYTES {
            return Err(too_large(&format!("the grammar would be longer than {MAX_GRAMMAR_BYTES} bytes")));
        }
        Ok(())
    }

    /// The rule for `node`, named after `name` ("" for the root); returns the
    /// name to refer to it by (or, for some forms, the text to use in its
    /// place, as llama.cpp's `visit` does).
    pub(super) fn visit(&mut self, node: &'d Node<'a>, name: &str) -> Result<String> {
        self.visits += 1;
        self.check_budget()?;
        if self.depth >= MAX_DEPTH {
            return Err(too_large(&format!(
                "the schema is nested more than {MAX_DEPTH} levels deep (counting $ref and allOf)"
            )));
        }
        self.depth += 1;
        let result = self.visit_inner(node, name);
        self.depth -= 1;
        result
    }

    fn visit_inner(&mut self, node: &'d Node<'a>, name: &str) -> Result<String> {
        let rule_name = if is_reserved_name(name) {
            format!("{name}-")
        } else if name.is_empty() {
            "root".to_string()
        } else {
            name.to_string()
        };
        let sub_name = if name.is_empty() { String::new() } else { format!("{name}-") };
        Ok(match node {
            Node::Ref(reference) => {
                let target = self.resolve_ref(reference)?;
                self.rules.add(&rule_name, target)
            }
            Node::AnyOf(alternatives) => {
                let mut names = Vec::with_capacity(alternatives.len());
                for (i, alt) in alternatives.iter().enumerate() {
                    let prefix = if name.is_empty() { "alternative-" } else { "-" };
                    names.push(self.visit(alt, &format!("{name}{prefix}{i}"))?);
                }
                self.rules.add(&rule_name, names.join(" | "))
            }
            Node::AllOf(parts) => self.visit_all_of(parts, name, &rule_name)?,
            Node::Const(value) => self.rules.add(&rule_name, Self::constant_rule(value)),
            Node::Enum(values) => {
                let literals: Vec<String> = values.iter().map(Self::constant_rule).collect();
                self.rules.add(&rule_name, format!("({})", literals.join(" | ")))
            }
            Node::Object { properties, additional } => {
                if properties.is_empty() && matches!(additional.as_deref(), Some(Node::Any)) {
                    let object = self.add_named_primitive("object", "object");
                    return Ok(self.rules.add(&rule_name, object));
                }
                let props: Vec<(&str, &'d Node<'a>)> = properties.iter().map(|p| (p.name, &p.schema)).collect();
                let required: HashSet<&str> = properties.iter().filter(|p| p.required).map(|p| p.name).collect();
                let text = self.object_rule(&props, &required, name, additional.as_deref())?;
                self.rules.add(&rule_name, text)
            }
            Node::Tuple(items) => {
                let mut text = String::from(r#""[" space "#);
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        text.push_str(r#" "," space "#);
                    }
                    text.push_str(&self.visit(item, &format!("{sub_name}tuple-{i}"))?);
                }
                text.push_str(r#" space "]""#);
                self.rules.add(&rule_name, text)
            }
            Node::Array { items, min_items, max_items } => {
                if matches!(**items, Node::Any) && *min_items == 0 && *max_items < 0 {
                    return Ok(self.visit_primitive(&rule_name, "array"));
                }
                let item = self.visit(items, &format!("{sub_name}item"))?;
                let max = if *max_items < 0 { i32::MAX } else { *max_items };
                let repeated = build_repetition(&item, *min_items, max, r#""," space"#);
                self.rules.add(&rule_name, format!(r#""[" space {repeated} space "]""#))
            }
            Node::String { pattern, format, min_length, max_length } => {
                if !pattern.is_empty() {
                    return self.visit_pattern(pattern, &rule_name);
                }
                match format {
                    StringFormat::Uuid => return Ok(self.visit_primitive(&rule_name, "uuid")),
                    StringFormat::None => {}
                    StringFormat::Date | StringFormat::Time | StringFormat::DateTime => {
                        let format_name = match format {
                            StringFormat::Date => "date-string",
                            StringFormat::Time => "time-string",
                            _ => "date-time-string",
                        };
                        let rule = builtin(format_name).expect("a string format rule");
                        let added = self.add_primitive(format_name, rule);
                        return Ok(self.rules.add(&rule_name, added));
                    }
                }
                if *min_length > 0 || *max_length >= 0 {
                    let char_rule = self.add_named_primitive("char", "char");
                    let max = if *max_length < 0 { i32::MAX } else { *max_length };
                    let repeated = build_repetition(&char_rule, *min_length, max, "");
                    return Ok(self.rules.add(&rule_name, format!(r#""\"" {repeated} "\"""#)));
                }
                self.visit_primitive(&rule_name, "string")
            }
            Node::Integer { minimum, maximum } => {
                if *minimum == i64::MIN && *maximum == i64::MAX {
                    return Ok(self.visit_primitive(&rule_name, "integer"));
                }
                let mut text = String::from("(");
                integer_range::min_max_int(*minimum, *maximum, &mut text);
                text.push(')');
                self.rules.add(&rule_name, text)
            }
            Node::Number => self.visit_primitive(&rule_name, "number"),
            Node::Boolean => self.visit_primitive(&rule_name, "boolean"),
            Node::Null => self.visit_primitive(&rule_name, "null"),
            Node::Any => {
                let value = self.add_named_primitive("value", "value");
                self.rules.add(&rule_name, value)
            }
        })
    }

    /// A reference's rule: "ref" and the fragment's sanitized text, the
    /// target visited once under that name (a reference met again while its
    /// target is being visited refers to the name before it exists).
    fn resolve_ref(&mut self, reference: &'a str) -> Result<String> {
        let fragment = reference.find('#').map_or(reference, |at| &reference[at + 1..]);
        let ref_name = format!("ref{}", sanitize_name(fragment));
        if self.rules.contains(&ref_name) || self.refs_being_resolved.contains(reference) {
            return Ok(ref_name);
        }
        let Some(target) = self.doc.refs.get(reference) else {
            self.errors.push(format!("Unresolved $ref {reference}"));
            return Ok(String::new());
        };
        self.refs_being_resolved.insert(reference);
        let named = self.visit(target, &ref_name);
        self.refs_being_resolved.remove(reference);
        named
    }

    /// The node a chain of references ends at (llama.cpp follows it without
    /// a bound and overflows its stack on a cycle; here a cycle is an error).
    fn follow_refs(&self, mut node: &'d Node<'a>) -> Result<&'d Node<'a>> {
        let mut steps = 0;
        while let Node::Ref(reference) = node {
            steps += 1;
            if steps > self.doc.refs.len() {
                return Err(too_large(&format!("$ref {reference} refers to itself through allOf")));
            }
            match self.doc.refs.get(reference) {
                Some(target) => node = target,
                None => break,
            }
        }
        Ok(node)
    }

    /// allOf: the properties of its object parts merged into one object
    /// (every property of a part required unless the part sits in an anyOf
    /// inside the allOf, whatever the part's own `required` says), or, when
    /// enum parts share values held by every part, those values in sorted
    /// order. Other parts (const, strings, numbers, ...) are dropped, as
    /// llama.cpp drops them.
    fn visit_all_of(&mut self, parts: &'d [Node<'a>], name: &str, rule_name: &str) -> Result<String> {
        let mut required: HashSet<&str> = HashSet::new();
        let mut properties: Vec<(&str, &'d Node<'a>)> = Vec::new();
        let mut enum_counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut dropped = false;
        let mut components: Vec<(&'d Node<'a>, bool)> = Vec::new();
        for part in parts {
            match part {
                Node::AnyOf(alternatives) => components.extend(alternatives.iter().map(|a| (a, false))),
                other => components.push((other, true)),
            }
        }
        for (component, is_required) in components {
            match self.follow_refs(component)? {
                Node::Object { properties: props, .. } => {
                    for prop in props {
                        properties.push((prop.name, &prop.schema));
                        if is_required {
                            required.insert(prop.name);
                        }
                    }
                }
                Node::Enum(values) => {
                    for value in values.iter() {
                        *enum_counts.entry(Self::constant_rule(value)).or_default() += 1;
                    }
                }
                Node::Ref(_) => {}
                _ => dropped = true,
            }
        }
        if dropped {
            self.warnings.push(format!(
                "{}: allOf parts other than objects, enums and references to them are ignored",
                if name.is_empty() { "root" } else { name }
            ));
        }
        let common: Vec<&str> =
            enum_counts.iter().filter(|(_, count)| **count == parts.len()).map(|(v, _)| v.as_str()).collect();
        if !common.is_empty() {
            let text = format!("({})", common.join(" | "));
            return Ok(self.rules.add(rule_name, text));
        }
        let text = self.object_rule(&properties, &required, name, None)?;
        Ok(self.rules.add(rule_name, text))
    }

    /// An object's rule text: the required properties in order, then the
    /// optional ones (and additional properties, as "*") where any of them
    /// may come first and each later one is optional, through "-rest" rules.
    fn object_rule(
        &mut self,
        properties: &[(&str, &'d Node<'a>)],
        required: &HashSet<&str>,
        name: &str,
        additional: Option<&'d Node<'a>>,
    ) -> Result<String> {
        let prefix = if name.is_empty() { String::new() } else { format!("{name}-") };
        let mut required_props: Vec<&str> = Vec::new();
        let mut optional_props: Vec<&str> = Vec::new();
        let mut kv_rules: HashMap<&str, String> = HashMap::new();
        let mut prop_names: Vec<&str> = Vec::new();
        for &(prop_name, prop_schema) in properties {
            let value_rule = self.visit(prop_schema, &format!("{prefix}{prop_name}"))?;
            let mut key = String::new();
            dump_string(prop_name, &mut key);
            let kv = self.rules.add(
                &format!("{prefix}{prop_name}-kv"),
                format!(r#"{} space ":" space {value_rule}"#, format_literal(&key)),
            );
            kv_rules.insert(prop_name, kv);
            if required.contains(prop_name) {
                required_props.push(prop_name);
            } else {
                optional_props.push(prop_name);
            }
            prop_names.push(prop_name);
        }
        if let Some(additional) = additional {
            let sub_name = format!("{prefix}additional");
            let value_rule = match additional {
                Node::Any => self.add_named_primitive("value", "value"),
                other => self.visit(other, &format!("{sub_name}-value"))?,
            };
            let key_rule = if prop_names.is_empty() {
                self.add_named_primitive("string", "string")
            } else {
                let text = self.not_strings(&prop_names);
                self.rules.add(&format!("{sub_name}-k"), text)
            };
            let kv = self.rules.add(&format!("{sub_name}-kv"), format!(r#"{key_rule} ":" space {value_rule}"#));
            kv_rules.insert("*", kv);
            optional_props.push("*");
        }

        if required_props.is_empty() && optional_props.is_empty() {
            return Ok(r#""{" space "}""#.to_string());
        }
        let mut rule = String::from(r#""{" space "#);
        for (i, prop) in required_props.iter().enumerate() {
            if i > 0 {
                rule.push_str(r#" "," space "#);
            }
            rule.push_str(&kv_rules[prop]);
        }
        if !optional_props.is_empty() {
            rule.push_str(" (");
            if !required_props.is_empty() {
                rule.push_str(r#" "," space ( "#);
            }
            // rest[j]: the rule for "whatever may follow optional_props[j]",
            // built from the last one backwards: the order llama.cpp's
            // recursion adds them in (deepest first), each added once.
            let n = optional_props.len();
            let mut rest: Vec<String> = vec![String::new(); n];
            for j in (0..n.saturating_sub(1)).rev() {
                let next = optional_props[j + 1];
                let comma_ref = format!(r#"( "," space {} )"#, kv_rules[next]);
                let mut text = format!("{comma_ref}{}", if next == "*" { "*" } else { "?" });
                if j + 2 < n {
                    text.push(' ');
                    text.push_str(&rest[j + 1]);
                }
                rest[j] = self.rules.add(&format!("{prefix}{}-rest", optional_props[j]), text);
            }
            for (i, prop) in optional_props.iter().enumerate() {
                if i > 0 {
                    rule.push_str(" | ");
                }
                let kv = &kv_rules[prop];
                rule.push_str(kv);
                if *prop == "*" {
                    rule.push_str(&format!(r#" ( "," space {kv} )*"#));
                }
                if i + 1 < n {
                    rule.push(' ');
                    rule.push_str(&rest[i]);
                }
            }
            if !required_props.is_empty() {
                rule.push_str(" )");
            }
            rule.push_str(" )?");
        }
        rule.push_str(r#" space "}""#);
        Ok(rule)
    }

    /// A JSON string that is none of `strings`, through a trie of their
    /// characters (the trie walked without recursion: a property name may
    /// be long).
    fn not_strings(&mut self, strings: &[&str]) -> String {
        struct TrieNode {
            children: BTreeMap<char, usize>,
            is_end: bool,
        }
        let mut trie = vec![TrieNode { children: BTreeMap::new(), is_end: false }];
        for word in strings {
            let mut current = 0;
            for c in word.chars() {
                current = match trie[current].children.get(&c) {
                    Some(&child) => child,
                    None => {
                        trie.push(TrieNode { children: BTreeMap::new(), is_end: false });
                        let child = trie.len() - 1;
                        trie[current].children.insert(c, child);
                        child
                    }
                };
            }
            trie[current].is_end = true;
        }
        let char_rule = self.add_named_primitive("char", "char");
        let children: Vec<Vec<(char, usize)>> =
            trie.iter().map(|n| n.children.iter().map(|(c, i)| (*c, *i)).collect()).collect();

        let mut out = String::from(r#"["] ( "#);
        // (node, index of its next child, the characters seen so far)
        let mut stack: Vec<(usize, usize, String)> = vec![(0, 0, String::new())];
        while let Some(top) = stack.last_mut() {
            let kids = &children[top.0];
            if top.1 < kids.len() {
                let (c, child) = kids[top.1];
                if top.1 > 0 {
                    out.push_str(" | ");
                }
                top.1 += 1;
                top.2.push(c);
                out.push('[');
                out.push(c);
                out.push(']');
                if children[child].is_empty() {
                    out.push(' ');
                    out.push_str(&char_rule);
                    out.push('+');
                } else {
                    out.push_str(" (");
                    stack.push((child, 0, String::new()));
                }
                continue;
            }
            if !kids.is_empty() {
                out.push_str(r#" | [^""#);
                out.push_str(&top.2);
                out.push_str("] ");
                out.push_str(&char_rule);
                out.push('*');
            }
            stack.pop();
            if !stack.is_empty() {
                out.push(')');
            }
        }
        out.push_str(" )");
        if !trie[0].is_end {
            out.push('?');
        }
        out.push_str(r#" ["]"#);
        out
    }
}
