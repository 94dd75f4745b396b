//! A JSON schema as a GBNF grammar, with the text llama.cpp b11434's
//! `json_schema_to_grammar` (common/json-schema-to-grammar.cpp over
//! common/json-schema.cpp) writes for it, character for character: the
//! same rules, named the same, in the same byte-sorted order, and the same
//! refusals in the same words. t/data/json-schema/ holds a corpus of
//! schemas and llama.cpp's text for each (bench/make-json-schema-reference
//! writes it); the tests here require equality.
//!
//! # The mapping
//!
//! Every grammar has `space` (`| " " | "\n"{1,2} [ \t]{0,20}`) and `root`.
//! - null, boolean, number, integer, string: the built-in rules of those
//!   names (`root` itself when the schema is only that); a string's `char`
//!   is a JSON string character or escape.
//! - `type` as a list: the alternatives, one per type ("alternative-0", ...
//!   at the root, "NAME-0", ... below).
//! - `const`, `enum`: the values' compact JSON text as literals, in order.
//! - An object: its properties in the schema's order (a Perl hash's in
//!   sorted order, see below), each as a "NAME-PROP-kv" rule (`"key" space
//!   ":" space VALUE`); the required ones first, in order; then the
//!   optional ones, where any may come first and every later one is
//!   optional, through "NAME-PROP-rest" rules. `additionalProperties`:
//!   `false` (the default when there are properties) allows no other key,
//!   `true` any value under a key that is none of the properties
//!   ("NAME-additional-k"), a schema that schema's value. `{"type":
//!   "object"}` alone is the built-in `object`.
//! - An array: `items` repeated `minItems..maxItems` times with commas;
//!   `items`/`prefixItems` as a list: a tuple of exactly those items. A bare
//!   array is the built-in `array`.
//! - `$ref` "#/..." (into `$defs`, `definitions` or anywhere in the
//!   document): a "ref-..." rule named after the path, visited once, so a
//!   recursive schema is a recursive grammar. A remote reference is refused.
//! - `anyOf`/`oneOf` (the same here): the alternatives. `allOf`: its object
//!   parts merged (every property of a part required, unless the part is an
//!   alternative of an anyOf inside the allOf), or the values its enum parts
//!   all share.
//! - A string's `pattern`: the regex as GBNF (see [`pattern`]); `format`
//!   date, time, date-time, uuid (uuid1..uuid5): the built-in rules of
//!   those names; `minLength`/`maxLength`: `char` repeated.
//! - An integer's `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`:
//!   the decimal strings between the bounds, digit by digit.
//! - A rule name is the path to the value (property names, "item",
//!   "tuple-N", "additional"), every run of characters other than ASCII
//!   letters, digits and "-" made one "-", "-" appended to a built-in
//!   rule's name; a name taken by another rule gets a number (NAME0,
//!   NAME1, ...).
//!
//! # Not supported
//!
//! Refused, naming the keyword or construct: the validation keywords
//! llama.cpp's converter never reads (`not`, `if`, `patternProperties`,
//! `uniqueItems`, `multipleOf`, `minProperties`, ... see
//! [`schema::UNSUPPORTED_KEYWORDS`]): its grammar would let the model write
//! what the schema rejects; everything llama.cpp itself refuses (an
//! unknown type, a non-object schema, a remote `$ref`, a bad count, an
//! invalid regex, ...); a quantifier on a multi-byte character in a pattern
//! (llama.cpp splits its bytes); a cycle of `$ref`s through `allOf` (where
//! llama.cpp overflows its stack); and, to stay bounded, nesting deeper than
//! [`MAX_DEPTH`], more than [`MAX_NODES`] schema nodes, more than
//! [`MAX_VISITS`] expansions, a grammar over [`MAX_GRAMMAR_BYTES`].
//!
//! Ignored, as llama.cpp ignores them (each noted where it happens, in
//! [`schema`] and the converter, and listed in
//! [`SchemaGrammar::warnings`] where it loosens or narrows the schema):
//! annotations and unknown keywords, a number's bounds, a tuple's counts,
//! a string's lengths beside a pattern or known format, formats other than
//! the ones above, a pattern the translation does not cover (any string
//! instead), `allOf` beside a type other than object/string or beside
//! properties, allOf parts that are neither objects nor enums.
//!
//! # Perl hashes
//!
//! JSON text keeps its key order ([`schema_text_to_gbnf`]); a schema given
//! as a Perl hash has none, so the glue builds its `Value` with keys in
//! sorted order: the properties of such a schema come in sorted order.
mod converter;
mod integer_range;
mod json_dump;
pub mod pattern;
pub mod schema;

#[cfg(test)]
mod tests;

use crate::engine::error::{Error, Result};
use serde_json::Value;

/// Schema objects nested deeper than this (counting `$ref` targets and the
/// expansion of allOf parts) are refused, so that no input can exhaust the
/// stack.
pub const MAX_DEPTH: usize = 128;
/// At most this many schema objects are read (a `type` list reads the
/// schema once per type, so nested lists could otherwise grow
/// exponentially).
pub const MAX_NODES: usize = 100_000;
/// At most this many nodes are turned into rules (allOf copies the
/// properties of the objects it references).
pub const MAX_VISITS: usize = 50_000;
/// The longest grammar made.
pub const MAX_GRAMMAR_BYTES: usize = 16 << 20;

/// A grammar and what the conversion ignored on the way.
#[derive(Debug, Clone)]
pub struct SchemaGrammar {
    /// GBNF text, one rule a line, starting symbol `root`.
    pub gbnf: String,
    /// The schema's parts the grammar does not enforce (a pattern it cannot
    /// translate, a number's bounds, ...), as "WHERE: WHAT" lines.
    pub warnings: Vec<String>,
}

/// The GBNF grammar for a JSON schema: llama.cpp b11434's text (the tests'
/// shorthand; Lugh uses [`convert`] through `Grammar::from_json_schema`).
#[cfg(test)]
pub fn schema_to_gbnf(schema: &Value) -> Result<String> {
    Ok(convert(schema)?.gbnf)
}

/// As [`schema_to_gbnf`], with the warnings.
pub fn convert(schema: &Value) -> Result<SchemaGrammar> {
    let document = schema::Document::from_json(schema)?;
    let mut converter = converter::Converter::new(&document);
    converter.visit(&document.root, "")?;
    let (gbnf, warnings) = converter.finish()?;
    Ok(SchemaGrammar { gbnf, warnings })
}

/// A schema given as JSON text (objects keep the text's key order, so the
/// properties come in the order written).
pub fn parse_schema_text(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| Error::Argument(format!("the JSON schema is not valid JSON: {e}")))
}

/// The GBNF grammar for a schema given as JSON text.
#[cfg(test)]
pub fn schema_text_to_gbnf(text: &str) -> Result<String> {
    schema_to_gbnf(&parse_schema_text(text)?)
}
