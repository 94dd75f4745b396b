//! GBNF grammars that constrain generation, with the syntax and semantics of
//! llama.cpp b11434 (`src/llama-grammar.cpp`): a [`Grammar`] is parsed once
//! (rules, alternatives, groups, `* + ?`, `{m,n}`, character classes with
//! ranges and negation, `.`, escapes, UTF-8, comments, tokens `<[id]>`,
//! `<text>`, `!<…>`), checked (undefined rules, left recursion, a missing
//! root) and shared; a [`GrammarState`] follows one generation: its
//! pushdown stacks advance per code point, a token's UTF-8 may end inside a
//! character, and [`GrammarState::apply`] rejects candidates exactly as
//! llama.cpp's `llama_grammar_reject_candidates` does.
//!
//! [`sample`] is llama.cpp's `common_sampler_sample` with a grammar: the
//! token is drawn without the grammar; if the grammar rejects it, the
//! rejected candidates are set to -inf and the chain draws again.
//!
//! Limits (llama.cpp has the repetition one; the others stop inputs that
//! would make it hang or run out of memory): `{m,n}` counts up to
//! [`parser::MAX_REPETITIONS`], [`parser::MAX_NESTING`] nested groups,
//! [`parser::MAX_ELEMENTS`] elements, [`MAX_STACKS`] parse stacks at once.
mod lazy;
mod matcher;
pub mod parser;
#[cfg(test)]
mod tests;

pub use lazy::LazyGrammar;
pub use matcher::GrammarState;

use crate::engine::generate::generation::TokenText;
use crate::engine::generate::json_schema;
use crate::engine::generate::sampler::Sampler;
use crate::engine::{Error, Result};
use std::fmt;
use std::sync::Arc;

/// The most parse stacks a grammar may have at once: beyond it the grammar
/// is too ambiguous to follow in reasonable time, and is refused.
pub const MAX_STACKS: usize = 10_000;

/// What an element of a rule is (llama.cpp's `llama_gretype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// End of a rule's definition.
    End,
    /// Start of another alternative of the rule.
    Alt,
    /// A reference to rule `value`.
    RuleRef,
    /// The character `value` (or the first of a class).
    Char,
    /// A negated class's first character (`[^…]`).
    CharNot,
    /// Makes the preceding character the lower end of a range up to `value`.
    CharRngUpper,
    /// Another character of the class.
    CharAlt,
    /// Any character (`.`).
    CharAny,
    /// The token with id `value` (`<[id]>`).
    Token,
    /// Any token but `value` (`!<[id]>`).
    TokenNot,
    /// A token given by its text (`<text>`): `value` indexes the grammar's
    /// token names until [`Grammar::bind`] resolves it to a [`Kind::Token`].
    NamedToken,
    /// As [`Kind::NamedToken`], negated.
    NamedTokenNot,
}

/// One element of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Element {
    pub kind: Kind,
    pub value: u32,
}

impl Element {
    pub const fn new(kind: Kind, value: u32) -> Element {
        Element { kind, value }
    }

    /// The end of one of a rule's alternatives.
    fn ends_sequence(self) -> bool {
        matches!(self.kind, Kind::End | Kind::Alt)
    }
}

/// A parsed, checked grammar: all rules in one array (a position in a
/// stack is an index into it), and the stacks it starts with. Immutable;
/// shared between generations.
pub struct Grammar {
    text: String,
    root: String,
    elements: Vec<Element>,
    rule_start: Vec<u32>,
    names: Vec<String>,
    token_names: Vec<Vec<u8>>,
    initial: Vec<Vec<u32>>,
    /// What the grammar does not enforce of the JSON schema it was made
    /// from (none for GBNF given as such).
    schema_warnings: Vec<String>,
}

impl fmt::Debug for Grammar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Grammar({} rules, root {})", self.rule_start.len(), self.root)
    }
}

impl Grammar {
    /// Parses and checks GBNF `text`, starting at rule `root`.
    /// The grammar of a JSON schema (llama.cpp's conversion), which keeps
    /// the conversion's warnings.
    pub fn from_json_schema(schema: &serde_json::Value) -> Result<Grammar> {
        let converted = json_schema::convert(schema)?;
        let mut grammar = Grammar::new(&converted.gbnf, "root")?;
        grammar.schema_warnings = converted.warnings;
        Ok(grammar)
    }

    /// The grammar of OpenAI's response_format, as llama-server reads it:
    /// {"type": "text"} (None: no grammar), {"type": "json_object",
    /// "schema": {...}} (no schema: any JSON value) or {"type":
    /// "json_schema", "json_schema": {"schema": {...}}}.
    pub fn from_response_format(format: &serde_json::Value) -> Result<Option<Grammar>> {
        let serde_json::Value::Object(fields) = format else {
            return Err(Error::Argument("response_format must be an object, like {\"type\": \"json_object\"}".into()));
        };
        let empty = serde_json::Value::Object(Default::default());
        let schema = match fields.get("type").and_then(|t| t.as_str()) {
            None | Some("text") => return Ok(None),
            Some("json_object") => fields.get("schema").unwrap_or(&empty),
            Some("json_schema") => fields.get("json_schema").and_then(|w| w.get("schema")).unwrap_or(&empty),
            Some(other) => {
                return Err(Error::Argument(format!(
                    "response_format type must be 'text', 'json_object' or 'json_schema', got '{other}'"
                )))
            }
        };
        Grammar::from_json_schema(schema).map(Some).map_err(|e| Error::Argument(format!("response_format: {e}")))
    }

    /// The parts of its JSON schema the grammar does not enforce, as
    /// "WHERE: WHAT" lines.
    pub fn schema_warnings(&self) -> &[String] {
        &self.schema_warnings
    }

    pub fn new(text: &str, root: &str) -> Result<Grammar> {
        if text.trim().is_empty() {
            return Err(Error::Argument("grammar error: the grammar is empty (give at least root ::= ...)".into()));
        }
        let parsed = parser::parse(text.as_bytes())?;
        let root_id = parsed
            .names
            .iter()
            .position(|n| n == root)
            .ok_or_else(|| Error::Argument(format!("grammar error: the grammar has no rule '{root}'")))?;
        let mut elements = Vec::with_capacity(parsed.rules.iter().map(Vec::len).sum());
        let mut rule_start = Vec::with_capacity(parsed.rules.len());
        for rule in &parsed.rules {
            rule_start.push(elements.len() as u32);
            elements.extend_from_slice(rule);
        }
        let mut g = Grammar {
            schema_warnings: Vec::new(),
            text: text.to_owned(),
            root: root.to_owned(),
            elements,
            rule_start,
            names: parsed.names,
            token_names: parsed.token_names,
            initial: Vec::new(),
        };
        if let Some(i) = g.left_recursive_rule() {
            return Err(Error::Argument(format!(
                "grammar error: left recursion in rule '{}' (a rule that can start with itself; rewrite it with \
                 repetition, e.g. list ::= item (\",\" item)*)",
                g.names[i]
            )));
        }
        g.initial = g.start_stacks(root_id)?;
        Ok(g)
    }

    /// The GBNF text as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The name of the start rule.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The number of rules, synthesized ones included.
    pub fn n_rules(&self) -> usize {
        self.rule_start.len()
    }

    /// Whether the grammar names tokens by text (`<text>`), which needs a
    /// vocabulary ([`Grammar::bind`]).
    pub fn needs_vocabulary(&self) -> bool {
        !self.token_names.is_empty()
    }

    /// The grammar with its `<text>` tokens resolved by `tokenize` (which
    /// must give exactly one token, as llama.cpp requires).
    pub fn bind(self: &Arc<Self>, tokenize: impl Fn(&[u8]) -> Vec<i32>) -> Result<Arc<Grammar>> {
        if self.token_names.is_empty() {
            return Ok(self.clone());
        }
        let ids = self
            .token_names
            .iter()
            .map(|name| match tokenize(name).as_slice() {
                [id] => Ok(*id as u32),
                other => Err(Error::Argument(format!(
                    "grammar error: the token {} is {} tokens in this vocabulary, not one",
                    String::from_utf8_lossy(name),
                    other.len()
                ))),
            })
            .collect::<Result<Vec<u32>>>()?;
        let elements = self
            .elements
            .iter()
            .map(|e| match e.kind {
                Kind::NamedToken => Element::new(Kind::Token, ids[e.value as usize]),
                Kind::NamedTokenNot => Element::new(Kind::TokenNot, ids[e.value as usize]),
                _ => *e,
            })
            .collect();
        Ok(Arc::new(Grammar {
            text: self.text.clone(),
            root: self.root.clone(),
            elements,
            rule_start: self.rule_start.clone(),
            names: self.names.clone(),
            token_names: Vec::new(),
            initial: self.initial.clone(),
            schema_warnings: self.schema_warnings.clone(),
        }))
    }

    /// The rules as llama.cpp's `llama_grammar_parser::print` writes them
    /// (synthesized rules included; characters outside printable ASCII as
    /// `<U+XXXX>`).
    pub fn rules_text(&self) -> String {
        let mut out = String::new();
        let char_text = |c: u32| match char::from_u32(c) {
            Some(ch) if (0x20..=0x7f).contains(&c) => ch.to_string(),
            _ => format!("<U+{c:04X}>"),
        };
        let is_char =
            |k: Kind| matches!(k, Kind::Char | Kind::CharNot | Kind::CharAlt | Kind::CharRngUpper | Kind::CharAny);
        for (id, &start) in self.rule_start.iter().enumerate() {
            out.push_str(&self.names[id]);
            out.push_str(" ::= ");
            let end = self.rule_end(start as usize);
            let rule = &self.elements[start as usize..=end];
            for i in 0..rule.len() - 1 {
                let e = rule[i];
                match e.kind {
                    Kind::End => {}
                    Kind::Alt => out.push_str("| "),
                    Kind::RuleRef => {
                        out.push_str(&self.names[e.value as usize]);
                        out.push(' ');
                    }
                    Kind::Char => out.push_str(&format!("[{}", char_text(e.value))),
                    Kind::CharNot => out.push_str(&format!("[^{}", char_text(e.value))),
                    Kind::CharRngUpper => out.push_str(&format!("-{}", char_text(e.value))),
                    Kind::CharAlt => out.push_str(&char_text(e.value)),
                    Kind::CharAny => out.push('.'),
                    Kind::Token => out.push_str(&format!("<[{}]> ", e.value)),
                    Kind::TokenNot => out.push_str(&format!("!<[{}]> ", e.value)),
                    Kind::NamedToken | Kind::NamedTokenNot => {
                        if e.kind == Kind::NamedTokenNot {
                            out.push('!');
                        }
                        out.push_str(&String::from_utf8_lossy(&self.token_names[e.value as usize]));
                        out.push(' ');
                    }
                }
                if is_char(e.kind) && !matches!(rule[i + 1].kind, Kind::CharAlt | Kind::CharRngUpper | Kind::CharAny) {
                    out.push_str("] ");
                }
            }
            out.push('\n');
        }
        out
    }

    /// The index of the End element of the rule starting at `start`.
    fn rule_end(&self, start: usize) -> usize {
        let mut i = start;
        while self.elements[i].kind != Kind::End {
            i += 1;
        }
        i
    }

    /// llama.cpp's left-recursion check: a depth-first walk from each rule
    /// into the rules that can come first in one of its alternatives (a
    /// reference at the start, or after references to rules with an empty
    /// alternative); reaching a rule still being walked is left recursion.
    /// Iterative, so a long chain of rules cannot overflow the stack; rules
    /// already walked are not walked again (llama.cpp walks them again, with
    /// the same answer, in time exponential in some grammars). Returns the
    /// rule the walk started from, as llama.cpp reports it.
    fn left_recursive_rule(&self) -> Option<usize> {
        let n = self.rule_start.len();
        let (mut visited, mut in_progress, mut may_be_empty) = (vec![false; n], vec![false; n], vec![false; n]);
        let mut frames: Vec<WalkFrame> = Vec::new();
        for top in 0..n {
            if visited[top] {
                continue;
            }
            let mut enter = Some(top);
            loop {
                if let Some(r) = enter.take() {
                    if in_progress[r] {
                        return Some(top);
                    }
                    in_progress[r] = true;
                    // an alternative with no element: the rule may be empty
                    let start = self.rule_start[r] as usize;
                    let mut at_start = true;
                    for e in &self.elements[start..=self.rule_end(start)] {
                        if e.ends_sequence() {
                            if at_start {
                                may_be_empty[r] = true;
                                break;
                            }
                            at_start = true;
                        } else {
                            at_start = false;
                        }
                    }
                    frames.push(WalkFrame { rule: r, next: 0, can_be_first: true, walked: None });
                }
                let Some(f) = frames.last_mut() else { break };
                if let Some(child) = f.walked.take() {
                    if !may_be_empty[child] {
                        f.can_be_first = false;
                    }
                }
                let e = self.elements[self.rule_start[f.rule] as usize + f.next];
                f.next += 1;
                match e.kind {
                    Kind::RuleRef if f.can_be_first => {
                        let child = e.value as usize;
                        f.walked = Some(child);
                        if !visited[child] {
                            enter = Some(child);
                        }
                    }
                    Kind::End => {
                        in_progress[f.rule] = false;
                        visited[f.rule] = true;
                        frames.pop();
                    }
                    Kind::Alt => f.can_be_first = true,
                    _ => f.can_be_first = false,
                }
            }
        }
        None
    }

    /// The stacks of the start rule's alternatives, advanced to their first
    /// terminals (llama.cpp's grammar init).
    fn start_stacks(&self, root: usize) -> Result<Vec<Vec<u32>>> {
        let mut stacks = Vec::new();
        let mut seen = matcher::StackSet::default();
        let mut pos = self.rule_start[root] as usize;
        loop {
            let stack = if self.elements[pos].ends_sequence() { Vec::new() } else { vec![pos as u32] };
            matcher::advance_stack(self, stack, &mut stacks, &mut seen)?;
            while !self.elements[pos].ends_sequence() {
                pos += 1;
            }
            if self.elements[pos].kind == Kind::Alt {
                pos += 1;
            } else {
                break;
            }
        }
        Ok(stacks)
    }
}

/// A rule being walked by the left-recursion check.
struct WalkFrame {
    rule: usize,
    /// The index in the rule of the element to look at next.
    next: usize,
    /// Whether a reference there can be the first thing the rule matches.
    can_be_first: bool,
    /// The rule referenced by the element just walked into.
    walked: Option<usize>,
}

/// Draws the next token under a grammar, as llama.cpp's common sampler:
/// first without the grammar; if the grammar rejects that token, again
/// from `logits` with every rejected candidate at -inf (a second draw of the
/// sampler's generator). `masked` is scratch space kept between calls.
pub fn sample(
    sampler: &mut Sampler,
    state: &GrammarState,
    logits: &[f32],
    history: &[i32],
    tokens: &dyn TokenText,
    masked: &mut Vec<f32>,
) -> Result<i32> {
    let id = sampler.sample(logits, history)?;
    if state.allows(id, tokens)? {
        return Ok(id);
    }
    masked.clear();
    masked.extend_from_slice(logits);
    state.apply(masked, tokens)?;
    if masked.iter().all(|&l| l == f32::NEG_INFINITY) {
        return Err(Error::Argument(
            "the grammar allows no token of this vocabulary here (no token's text can continue it)".into(),
        ));
    }
    sampler.sample(masked, history)
}
