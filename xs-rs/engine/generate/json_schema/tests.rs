//! The corpus (t/data/json-schema/schemas.jsonl, one schema a line) against
//! llama.cpp b11434's grammars for it (grammars.jsonl, written by
//! bench/make-json-schema-reference; the text does not depend on the CPU,
//! so one set serves every kernel variant), and hostile schemas.
use super::*;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("t/data/json-schema")
}

/// llama.cpp's message in the one-line form used here: its
/// "JSON schema conversion failed:\n" prefix ends in a space, several
/// errors are joined with "; ".
fn one_line_error(message: &str) -> String {
    match message.split_once('\n') {
        Some((head, rest)) => format!("{head} {}", rest.split('\n').collect::<Vec<_>>().join("; ")),
        None => message.to_string(),
    }
}

fn lines(name: &str) -> Vec<String> {
    let path = data_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect()
}

#[test]
fn json_schema_corpus_equals_llama_cpp() {
    let schemas = lines("schemas.jsonl");
    let expected = lines("grammars.jsonl");
    assert_eq!(
        schemas.len(),
        expected.len(),
        "schemas.jsonl and grammars.jsonl differ in length: rerun bench/make-json-schema-reference"
    );
    assert!(schemas.len() >= 40, "the corpus has {} schemas", schemas.len());
    let mut failures = Vec::new();
    let mut errors = 0;
    for (i, (schema_line, expected_line)) in schemas.iter().zip(&expected).enumerate() {
        let reference: Value = serde_json::from_str(expected_line).expect("a grammars.jsonl line");
        let ours = parse_schema_text(schema_line).and_then(|s| convert(&s));
        // llama.cpp prints the patterns it gives up on; the same ones are among the warnings here
        let llama_warning = reference.get("warning").and_then(Value::as_str).unwrap_or("");
        let same = match (&ours, reference.get("grammar"), reference.get("error")) {
            (Ok(ours), Some(Value::String(grammar)), _) => {
                let patterns: Vec<&str> =
                    ours.warnings.iter().filter(|w| w.starts_with("pattern ")).map(String::as_str).collect();
                let warned = if patterns.is_empty() {
                    String::new()
                } else {
                    format!("WARNING: JSON schema conversion was incomplete: {}", patterns.join("; "))
                };
                ours.gbnf == *grammar && warned == llama_warning
            }
            (Err(e), None, Some(Value::String(error))) => {
                errors += 1;
                e.to_string() == one_line_error(error)
            }
            _ => false,
        };
        if !same {
            failures.push(format!(
                "line {}: {schema_line}\n  llama.cpp: {reference}\n  ours: {}",
                i + 1,
                match &ours {
                    Ok(ours) => json!({ "grammar": ours.gbnf, "warnings": ours.warnings }).to_string(),
                    Err(e) => json!({ "error": e.to_string() }).to_string(),
                }
            ));
        }
    }
    eprintln!(
        "json_schema corpus: {} of {} schemas give llama.cpp's text ({errors} of them its error)",
        schemas.len() - failures.len(),
        schemas.len()
    );
    assert!(failures.is_empty(), "{} differ:\n{}", failures.len(), failures.join("\n"));
}

fn error_of(schema: &Value) -> String {
    match convert(schema) {
        Ok(g) => panic!("expected an error, got:\n{}", g.gbnf),
        Err(e) => e.to_string(),
    }
}

/// Runs `f`, which must end within a second.
fn within_a_second<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    eprintln!("json_schema: {what}: {took:?}");
    assert!(took < Duration::from_secs(1), "{what} took {took:?}");
    out
}

/// Takes a deeply nested value apart from the inside out, so that dropping
/// it does not recurse as deep as it nests.
fn dismantle(mut value: Value) {
    let mut stack = Vec::new();
    loop {
        match &mut value {
            Value::Object(map) => stack.extend(std::mem::take(map).into_iter().map(|(_, v)| v)),
            Value::Array(items) => stack.append(items),
            _ => {}
        }
        match stack.pop() {
            Some(next) => value = next,
            None => break,
        }
    }
}

fn nested_objects(depth: usize) -> Value {
    let mut schema = json!({"type": "string"});
    for _ in 0..depth {
        // built by hand: json! would copy `schema` through serialization, recursively
        let mut properties = Map::new();
        properties.insert("a".into(), schema);
        let mut object = Map::new();
        object.insert("type".into(), json!("object"));
        object.insert("properties".into(), Value::Object(properties));
        object.insert("required".into(), json!(["a"]));
        schema = Value::Object(object);
    }
    schema
}

#[test]
fn json_schema_deep_nesting_is_refused_quickly() {
    let deep = nested_objects(10_000);
    let message = within_a_second("a 10,000-deep schema", || error_of(&deep));
    assert!(message.contains("nested more than 128 levels"), "{message}");
    dismantle(deep);

    // as JSON text, serde_json's own depth limit refuses it first
    let text = "{\"type\":\"object\",\"properties\":{\"a\":".repeat(10_000) + "{}" + &"}}".repeat(10_000);
    let message = within_a_second("a 10,000-deep schema text", || schema_text_to_gbnf(&text).unwrap_err().to_string());
    assert!(message.contains("not valid JSON"), "{message}");

    // a nesting within the limit converts
    let ok = nested_objects(60);
    assert!(schema_to_gbnf(&ok).unwrap().contains("root ::= \"{\" space a-kv space \"}\""));
}

#[test]
fn json_schema_recursion_through_ref() {
    // a cycle of $ref is a recursive grammar (as in llama.cpp)
    let list = json!({
        "$ref": "#/$defs/node",
        "$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}, "v": {"type": "integer"}}}}
    });
    let grammar = schema_to_gbnf(&list).unwrap();
    assert!(grammar.contains("ref-defs-node-next ::= ref-defs-node\n"), "{grammar}");
    // a reference to itself: the rule refers to itself, as llama.cpp writes it
    let selfref = json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}});
    assert_eq!(
        schema_to_gbnf(&selfref).unwrap(),
        "ref-defs-a ::= ref-defs-a\nroot ::= ref-defs-a\nspace ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n"
    );
    // the same cycle inside allOf overflows llama.cpp's stack; here it is an error
    let all_of = json!({"allOf": [{"$ref": "#/$defs/a"}], "$defs": {"a": {"$ref": "#/$defs/a"}}});
    assert!(error_of(&all_of).contains("refers to itself through allOf"));
    // allOf merging an object into itself without end: the depth limit
    let merge = json!({
        "$ref": "#/$defs/a",
        "$defs": {"a": {"type": "object", "properties": {"x": {"allOf": [{"$ref": "#/$defs/a"}]}}}}
    });
    let message = within_a_second("a self-merging allOf", || error_of(&merge));
    assert!(message.contains("nested more than"), "{message}");
}

#[test]
fn json_schema_exponential_expansions_are_bounded() {
    // nested type lists read the schema once per type at every level
    let mut schema = json!({"type": "string"});
    for _ in 0..40 {
        schema = json!({"type": ["object", "object"], "properties": {"a": schema}});
    }
    let message = within_a_second("nested type lists", || error_of(&schema));
    assert!(message.contains("more than 100000 nodes"), "{message}");

    // allOf copying the properties of a referenced object, two ways a level
    let mut defs = Map::new();
    for i in 0..40 {
        let next = json!({"$ref": format!("#/$defs/d{}", i + 1)});
        defs.insert(
            format!("d{i}"),
            json!({"type": "object", "properties": {"x": {"allOf": [next, next]}, "y": {"allOf": [next]}}}),
        );
    }
    defs.insert("d40".into(), json!({"type": "object", "properties": {"z": {"type": "integer"}}}));
    let schema = json!({"$ref": "#/$defs/d0", "$defs": defs});
    let message = within_a_second("allOf through references", || error_of(&schema));
    assert!(message.contains("expands to more than"), "{message}");
}

#[test]
fn json_schema_large_inputs_finish_quickly() {
    let values: Vec<Value> = (0..200_000).map(|i| json!(format!("v{i}"))).collect();
    let schema = json!({"enum": values});
    let grammar = within_a_second("a 200,000-value enum", || schema_to_gbnf(&schema).unwrap());
    assert!(grammar.starts_with("root ::= (\"\\\"v0\\\"\" | "));

    // properties whose names all sanitize to the same rule name
    let mut properties = Map::new();
    for i in 0..5_000 {
        properties.insert(format!("a{}", "!".repeat(i % 50 + 1)) + &"?".repeat(i / 50), json!({"const": i}));
    }
    let schema = json!({"type": "object", "properties": properties});
    let grammar = within_a_second("5,000 colliding names", || schema_to_gbnf(&schema).unwrap());
    assert!(grammar.contains("\na-4998 ::= \"4999\"\n"), "numbered names");

    // a long property name beside additionalProperties: a deep trie
    let long = "k".repeat(100_000);
    let schema = json!({"type": "object", "properties": {long: {"type": "null"}}, "additionalProperties": true});
    let grammar = within_a_second("a 100,000-character property name", || schema_to_gbnf(&schema).unwrap());
    assert!(grammar.contains("additional-k ::= [\"] ( [k] ([k] ("));

    // deeply nested groups in a pattern: unsupported past 100, any string
    let pattern = format!("^{}a{}$", "(".repeat(5_000), ")".repeat(5_000));
    let schema = json!({"type": "string", "pattern": pattern});
    let converted = within_a_second("a pattern nested 5,000 deep", || convert(&schema).unwrap());
    assert!(converted.gbnf.contains("root ::= string\n"));
    assert!(converted.warnings[0].contains("pattern nesting too deep"));
}

#[test]
fn json_schema_unsupported_and_invalid() {
    let cases = [
        (json!({"type": "array", "uniqueItems": true}), "at #: unsupported keyword uniqueItems"),
        (json!({"properties": {"a": {"not": {"type": "null"}}}}), "at #/properties/a: unsupported keyword not"),
        (json!({"type": "number", "multipleOf": 3}), "unsupported keyword multipleOf"),
        (json!({"type": "object", "patternProperties": {"^x": {}}}), "unsupported keyword patternProperties"),
        (json!([1, 2]), "JSON schema error at #: schema must be an object"),
        (json!("string"), "JSON schema error at #: schema must be an object"),
        (json!(true), "JSON schema error at #: schema must be an object"),
        (json!({"$ref": "https://example.com/s.json"}), "unsupported $ref https://example.com/s.json"),
        (json!({"type": "decimal"}), "unrecognized type decimal"),
        (json!({"type": "string", "pattern": "^(ab$"}), "Invalid pattern ^(ab$: unbalanced parentheses"),
        (json!({"type": "string", "pattern": "^é+$"}), "puts a quantifier on a multi-byte character"),
    ];
    for (schema, expected) in cases {
        let message = error_of(&schema);
        assert!(message.contains(expected), "{schema}: {message}");
        assert!(message.starts_with("JSON schema conversion failed: "), "{message}");
    }
    // uniqueItems false constrains nothing
    assert!(schema_to_gbnf(&json!({"type": "array", "uniqueItems": false})).is_ok());
}

#[test]
fn json_schema_extreme_integer_bounds_do_not_panic() {
    for (min, max) in [
        (json!(-9223372036854775807i64), json!(9223372036854775807i64)),
        (json!(18446744073709551615u64), json!(-1)),
        (json!(-1e300), json!(1e300)),
        (json!(10), json!(5)),
        (json!(-5), json!(-10)),
    ] {
        let schema = json!({"type": "integer", "minimum": min, "maximum": max});
        schema_to_gbnf(&schema).unwrap();
        let schema = json!({"type": "integer", "exclusiveMinimum": min, "exclusiveMaximum": max});
        schema_to_gbnf(&schema).unwrap();
    }
}

#[test]
fn json_schema_warnings_name_what_is_not_enforced() {
    let schema = json!({
        "type": "object",
        "properties": {
            "n": {"type": "number", "minimum": 0},
            "e": {"type": "string", "format": "email"},
            "p": {"type": "string", "pattern": "^\\d+$"}
        }
    });
    let converted = convert(&schema).unwrap();
    let all = converted.warnings.join("\n");
    assert!(all.contains("#/properties/n: the bounds of a number are not enforced"), "{all}");
    assert!(all.contains("#/properties/e: format \"email\" is not enforced"), "{all}");
    assert!(all.contains("pattern ^\\d+$ is not supported (unsupported escape: \\d), accepting any string"), "{all}");
}

#[test]
fn json_schema_deepest_schema_fits_a_small_stack() {
    // the deepest schema accepted, converted on a thread with a 1 MiB stack
    // (perl's main thread has 8 MiB; the depth limit keeps well inside it)
    let deep = nested_objects(MAX_DEPTH - 1);
    let converted = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(move || schema_to_gbnf(&deep).map(|g| g.len()))
        .unwrap()
        .join()
        .expect("no stack overflow");
    assert!(converted.unwrap() > 0);
}
