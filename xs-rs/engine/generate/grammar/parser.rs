//! The GBNF parser: text to rules of [`Element`]s, as llama.cpp b11434's
//! `llama_grammar_parser` reads it (same syntax, same rules synthesized for
//! groups and repetitions, same symbol numbering), with errors that name the
//! line and column, and limits so that no input can take long or much
//! memory.
use super::{Element, Kind};
use crate::engine::{Error, Result};
use std::collections::HashMap;

/// llama.cpp's MAX_REPETITION_THRESHOLD: the largest `{m,n}` count, and the
/// largest product of a repeated item's synthesized rules and its count.
pub const MAX_REPETITIONS: u64 = 2000;

/// Groups nested deeper than this are refused (the parser recurses once per
/// level; llama.cpp has no limit and overflows its stack instead).
pub const MAX_NESTING: usize = 500;

/// The most elements all rules may hold together after `{m,n}` expansion
/// (each is 8 bytes; llama.cpp has no limit and can be made to allocate
/// gigabytes by a repeated long literal).
pub const MAX_ELEMENTS: usize = 1 << 23;

/// What the parser makes: the rules indexed by symbol id, the symbols'
/// names, and the texts of `<token>` references (their elements hold the
/// index into `token_names`, resolved with a vocabulary later).
pub struct Parsed {
    pub rules: Vec<Vec<Element>>,
    pub names: Vec<String>,
    pub token_names: Vec<Vec<u8>>,
}

/// An error at a byte offset of the text; made into "line L, column C".
struct At {
    offset: usize,
    message: String,
}

type Step<T> = std::result::Result<T, At>;

fn fail<T>(offset: usize, message: impl Into<String>) -> Step<T> {
    Err(At { offset, message: message.into() })
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// Parses GBNF text. Errors name the line and column (1-based, columns in
/// characters) and what was expected there.
pub fn parse(text: &[u8]) -> Result<Parsed> {
    if let Some(i) = text.iter().position(|&b| b == 0) {
        return Err(Error::Argument(format!("grammar error at {}: a NUL byte in the grammar text", place(text, i))));
    }
    let mut p =
        Parser { src: text, symbols: HashMap::new(), rules: Vec::new(), token_names: Vec::new(), n_elements: 0 };
    let result = p.parse_all();
    match result {
        Ok(()) => {}
        Err(at) => {
            return Err(Error::Argument(format!(
                "grammar syntax error at {}: {}{}",
                place(text, at.offset),
                at.message,
                near(text, at.offset)
            )))
        }
    }
    let mut names = vec![String::new(); p.symbols.len().max(p.rules.len())];
    for (name, &id) in &p.symbols {
        if let Some(slot) = names.get_mut(id as usize) {
            *slot = name.clone();
        }
    }
    // every referenced rule must be defined (llama.cpp's check after parsing)
    for (id, rule) in p.rules.iter().enumerate() {
        if rule.is_empty() {
            return Err(Error::Argument(format!("grammar error: undefined rule '{}'", names[id])));
        }
        for e in rule {
            if e.kind == Kind::RuleRef && p.rules.get(e.value as usize).is_none_or(|r| r.is_empty()) {
                return Err(Error::Argument(format!("grammar error: undefined rule '{}'", names[e.value as usize])));
            }
        }
    }
    if p.rules.is_empty() {
        return Err(Error::Argument(
            "grammar error: the grammar is empty: it has no rules (give at least root ::= ...)".into(),
        ));
    }
    names.truncate(p.rules.len());
    Ok(Parsed { rules: p.rules, names, token_names: p.token_names })
}

/// "line L, column C" of a byte offset.
fn place(text: &[u8], offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
    format!("line {line}, column {column}")
}

/// The text at an error, a few characters of it, or "end of input".
fn near(text: &[u8], offset: usize) -> String {
    if offset >= text.len() {
        return " (at the end of the text)".into();
    }
    let rest = String::from_utf8_lossy(&text[offset..text.len().min(offset + 40)]).into_owned();
    let first_line = rest.split(['\n', '\r']).next().unwrap_or("");
    if first_line.is_empty() {
        " (at the end of the line)".into()
    } else {
        format!(" (near '{first_line}')")
    }
}

struct Parser<'a> {
    src: &'a [u8],
    /// Symbol name → id, numbered in order of first appearance as
    /// llama.cpp numbers them.
    symbols: HashMap<String, u32>,
    rules: Vec<Vec<Element>>,
    token_names: Vec<Vec<u8>>,
    n_elements: usize,
}

impl Parser<'_> {
    /// The byte at `i`, or 0 past the end (llama.cpp reads a C string).
    fn at(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    fn parse_all(&mut self) -> Step<()> {
        let mut pos = self.space(0, true);
        while self.at(pos) != 0 {
            pos = self.rule(pos)?;
        }
        Ok(())
    }

    fn symbol_id(&mut self, name: &[u8]) -> u32 {
        let next = self.symbols.len() as u32;
        *self.symbols.entry(String::from_utf8_lossy(name).into_owned()).or_insert(next)
    }

    /// A new symbol for a synthesized rule, named after the rule it serves;
    /// as llama.cpp, an existing name is overwritten.
    fn generate_symbol_id(&mut self, base: &str) -> u32 {
        let next = self.symbols.len() as u32;
        self.symbols.insert(format!("{base}_{next}"), next);
        next
    }

    fn add_rule(&mut self, id: u32, rule: Vec<Element>) -> Step<()> {
        let id = id as usize;
        if self.rules.len() <= id {
            self.rules.resize(id + 1, Vec::new());
        }
        self.n_elements += rule.len();
        self.rules[id] = rule;
        Ok(())
    }

    /// Counts elements about to be made; refuses past [`MAX_ELEMENTS`].
    fn budget(&mut self, pos: usize, more: u64) -> Step<()> {
        if (self.n_elements as u64).saturating_add(more) > MAX_ELEMENTS as u64 {
            return fail(pos, format!("the grammar expands to more than {MAX_ELEMENTS} elements (reduce repetitions)"));
        }
        Ok(())
    }

    /// Skips spaces, tabs and comments (and line ends when `newline_ok`).
    fn space(&self, mut pos: usize, newline_ok: bool) -> usize {
        loop {
            match self.at(pos) {
                b' ' | b'\t' => pos += 1,
                b'\r' | b'\n' if newline_ok => pos += 1,
                b'#' => {
                    while !matches!(self.at(pos), 0 | b'\r' | b'\n') {
                        pos += 1;
                    }
                }
                _ => return pos,
            }
        }
    }

    fn name(&self, pos: usize) -> Step<usize> {
        let mut end = pos;
        while is_word_char(self.at(end)) {
            end += 1;
        }
        if end == pos {
            return fail(pos, "expecting a rule name");
        }
        Ok(end)
    }

    fn int(&self, pos: usize) -> Step<(u64, usize)> {
        let mut end = pos;
        while self.at(end).is_ascii_digit() {
            end += 1;
        }
        if end == pos {
            return fail(pos, "expecting an integer");
        }
        // llama.cpp's stoull throws past u64; saturating keeps "too many"
        let digits = &self.src[pos..end];
        let value = digits.iter().fold(0u64, |v, &d| v.saturating_mul(10).saturating_add(u64::from(d - b'0')));
        Ok((value, end))
    }

    fn hex(&self, pos: usize, size: usize) -> Step<(u32, usize)> {
        let mut value = 0u32;
        let mut i = pos;
        while i < pos + size {
            let Some(d) = (self.at(i) as char).to_digit(16) else { break };
            value = (value << 4) + d;
            i += 1;
        }
        if i != pos + size {
            return fail(pos, format!("expecting {size} hex digits"));
        }
        Ok((value, i))
    }

    /// One character of a literal or class: an escape or a UTF-8 sequence
    /// (decoded as llama.cpp does: the length from the first byte, stopping
    /// at the end of the text).
    fn char(&self, pos: usize) -> Step<(u32, usize)> {
        let c = self.at(pos);
        if c == b'\\' {
            return match self.at(pos + 1) {
                b'x' => self.hex(pos + 2, 2),
                b'u' => self.hex(pos + 2, 4),
                b'U' => self.hex(pos + 2, 8),
                b't' => Ok((u32::from(b'\t'), pos + 2)),
                b'r' => Ok((u32::from(b'\r'), pos + 2)),
                b'n' => Ok((u32::from(b'\n'), pos + 2)),
                e @ (b'\\' | b'"' | b'[' | b']' | b'-') => Ok((u32::from(e), pos + 2)),
                _ => fail(pos, "unknown escape"),
            };
        }
        if c == 0 {
            return fail(pos, "unexpected end of input");
        }
        let len = match c >> 4 {
            0xC | 0xD => 2,
            0xE => 3,
            0xF => 4,
            _ => 1,
        };
        let mut value = u32::from(c & ((1u16 << (8 - len)) - 1) as u8);
        let mut i = pos + 1;
        while i < pos + len && self.at(i) != 0 {
            value = (value << 6) + u32::from(self.at(i) & 0x3F);
            i += 1;
        }
        Ok((value, i))
    }

    /// `<[id]>` (a token id) or `<text>` (a token by its text, resolved with
    /// the vocabulary later: kind [`Kind::NamedToken`]).
    fn token(&mut self, pos: usize) -> Step<(u32, bool, usize)> {
        if self.at(pos) != b'<' {
            return fail(pos, "expecting '<'");
        }
        let mut i = pos + 1;
        if self.at(i) == b'[' {
            i += 1;
            let (id, end) = self.int(i)?;
            if id > u64::from(u32::MAX) {
                return fail(i, "the token id is too big");
            }
            if self.at(end) != b']' {
                return fail(end, "expecting ']'");
            }
            if self.at(end + 1) != b'>' {
                return fail(end + 1, "expecting '>'");
            }
            return Ok((id as u32, false, end + 2));
        }
        while !matches!(self.at(i), 0 | b'>') {
            i += 1;
        }
        if self.at(i) != b'>' {
            return fail(i, "expecting '>'");
        }
        i += 1;
        self.token_names.push(self.src[pos..i].to_vec());
        Ok(((self.token_names.len() - 1) as u32, true, i))
    }

    fn rule(&mut self, pos: usize) -> Step<usize> {
        let name_end = self.name(pos)?;
        let after = self.space(name_end, false);
        let id = self.symbol_id(&self.src[pos..name_end]);
        let name = String::from_utf8_lossy(&self.src[pos..name_end]).into_owned();
        if !(self.at(after) == b':' && self.at(after + 1) == b':' && self.at(after + 2) == b'=') {
            return fail(after, "expecting ::=");
        }
        let start = self.space(after + 3, true);
        let mut pos = self.alternates(start, &name, id, false, 0)?;
        match self.at(pos) {
            b'\r' => pos += if self.at(pos + 1) == b'\n' { 2 } else { 1 },
            b'\n' => pos += 1,
            0 => {}
            _ => return fail(pos, "expecting newline or end"),
        }
        Ok(self.space(pos, true))
    }

    fn alternates(&mut self, pos: usize, rule_name: &str, rule_id: u32, nested: bool, depth: usize) -> Step<usize> {
        if depth > MAX_NESTING {
            return fail(pos, format!("groups nested more than {MAX_NESTING} deep"));
        }
        let mut rule = Vec::new();
        let mut pos = self.sequence(pos, rule_name, &mut rule, nested, depth)?;
        while self.at(pos) == b'|' {
            rule.push(Element::new(Kind::Alt, 0));
            pos = self.space(pos + 1, true);
            pos = self.sequence(pos, rule_name, &mut rule, nested, depth)?;
        }
        rule.push(Element::new(Kind::End, 0));
        self.add_rule(rule_id, rule)?;
        Ok(pos)
    }

    fn sequence(
        &mut self,
        src: usize,
        rule_name: &str,
        rule: &mut Vec<Element>,
        nested: bool,
        depth: usize,
    ) -> Step<usize> {
        let mut last_sym_start = rule.len();
        let mut pos = src;
        // how many rules the last item made (a group's nested ones count)
        let mut n_prev_rules: u64 = 1;
        loop {
            let c = self.at(pos);
            match c {
                b'"' => {
                    pos += 1;
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    while self.at(pos) != b'"' {
                        if self.at(pos) == 0 {
                            return fail(pos, "unexpected end of input (an unterminated string)");
                        }
                        let (ch, next) = self.char(pos)?;
                        pos = next;
                        rule.push(Element::new(Kind::Char, ch));
                    }
                    pos = self.space(pos + 1, nested);
                }
                b'[' => {
                    pos += 1;
                    let mut start_kind = Kind::Char;
                    if self.at(pos) == b'^' {
                        pos += 1;
                        start_kind = Kind::CharNot;
                    }
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    while self.at(pos) != b']' {
                        if self.at(pos) == 0 {
                            return fail(pos, "unexpected end of input (an unterminated character class)");
                        }
                        let (ch, next) = self.char(pos)?;
                        pos = next;
                        let kind = if last_sym_start < rule.len() { Kind::CharAlt } else { start_kind };
                        rule.push(Element::new(kind, ch));
                        if self.at(pos) == b'-' && self.at(pos + 1) != b']' {
                            if self.at(pos + 1) == 0 {
                                return fail(pos + 1, "unexpected end of input (an unterminated range)");
                            }
                            let (end, next) = self.char(pos + 1)?;
                            pos = next;
                            rule.push(Element::new(Kind::CharRngUpper, end));
                        }
                    }
                    pos = self.space(pos + 1, nested);
                }
                b'<' | b'!' => {
                    let negated = c == b'!';
                    if negated {
                        pos += 1;
                    }
                    let (value, named, end) = self.token(pos)?;
                    let kind = match (named, negated) {
                        (false, false) => Kind::Token,
                        (false, true) => Kind::TokenNot,
                        (true, false) => Kind::NamedToken,
                        (true, true) => Kind::NamedTokenNot,
                    };
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    rule.push(Element::new(kind, value));
                    pos = self.space(end, nested);
                }
                c if is_word_char(c) => {
                    let end = self.name(pos)?;
                    let id = self.symbol_id(&self.src[pos..end]);
                    pos = self.space(end, nested);
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    rule.push(Element::new(Kind::RuleRef, id));
                }
                b'(' => {
                    pos = self.space(pos + 1, true);
                    let n_before = self.symbols.len();
                    let sub_id = self.generate_symbol_id(rule_name);
                    pos = self.alternates(pos, rule_name, sub_id, true, depth + 1)?;
                    n_prev_rules = (self.symbols.len().saturating_sub(n_before) as u64).max(1);
                    last_sym_start = rule.len();
                    rule.push(Element::new(Kind::RuleRef, sub_id));
                    if self.at(pos) != b')' {
                        return fail(pos, "expecting ')'");
                    }
                    pos = self.space(pos + 1, nested);
                }
                b'.' => {
                    last_sym_start = rule.len();
                    n_prev_rules = 1;
                    rule.push(Element::new(Kind::CharAny, 0));
                    pos = self.space(pos + 1, nested);
                }
                b'*' | b'+' | b'?' => {
                    let at = pos;
                    pos = self.space(pos + 1, nested);
                    let (min, max) = match c {
                        b'*' => (0, None),
                        b'+' => (1, None),
                        _ => (0, Some(1)),
                    };
                    let r = Repeat { at, min, max, last_sym_start, n_prev_rules };
                    n_prev_rules = self.repeat(rule_name, rule, r)?;
                }
                b'{' => {
                    let at = pos;
                    pos = self.space(pos + 1, nested);
                    if !self.at(pos).is_ascii_digit() {
                        return fail(pos, "expecting an integer");
                    }
                    let (min, end) = self.int(pos)?;
                    pos = self.space(end, nested);
                    let mut max = None;
                    if self.at(pos) == b'}' {
                        max = Some(min);
                        pos = self.space(pos + 1, nested);
                    } else if self.at(pos) == b',' {
                        pos = self.space(pos + 1, nested);
                        if self.at(pos).is_ascii_digit() {
                            let (m, end) = self.int(pos)?;
                            max = Some(m);
                            pos = self.space(end, nested);
                        }
                        if self.at(pos) != b'}' {
                            return fail(pos, "expecting '}'");
                        }
                        pos = self.space(pos + 1, nested);
                    } else {
                        return fail(pos, "expecting ','");
                    }
                    if min > MAX_REPETITIONS {
                        return fail(at, format!("more than {MAX_REPETITIONS} repetitions"));
                    }
                    // as llama.cpp: a maximum past the threshold means none
                    if max.is_some_and(|m| m > MAX_REPETITIONS) {
                        max = None;
                    }
                    let r = Repeat { at, min, max, last_sym_start, n_prev_rules };
                    n_prev_rules = self.repeat(rule_name, rule, r)?;
                }
                _ => break,
            }
        }
        Ok(pos)
    }

    /// Rewrites the last item S of `rule` for a repetition, as llama.cpp:
    /// S{m,n} → S…S (m times) then S'(n-m), where S'(x) ::= S S'(x-1) | and
    /// S'(1) ::= S | ; S{m,} → S…S (m times) then S' ::= S S' | . Returns
    /// the new count of rules the item stands for.
    fn repeat(&mut self, rule_name: &str, rule: &mut Vec<Element>, r: Repeat) -> Step<u64> {
        if r.last_sym_start == rule.len() {
            return fail(r.at, "expecting an item before */+/?/{");
        }
        let prev: Vec<Element> = rule[r.last_sym_start..].to_vec();
        let total = match r.max {
            Some(m) if m > 0 => m,
            _ if r.min > 0 => r.min,
            _ => 1,
        };
        if r.n_prev_rules.saturating_mul(total) > MAX_REPETITIONS {
            return fail(
                r.at,
                format!(
                    "the repeated item's rules times the repetitions exceed {MAX_REPETITIONS} (reduce the \
                     repetitions or the item's complexity)"
                ),
            );
        }
        let n_opt = match r.max {
            None => 1,
            Some(m) => m.saturating_sub(r.min),
        };
        let copies = r.min.saturating_sub(1).saturating_add(n_opt);
        self.budget(r.at, copies.saturating_mul(prev.len() as u64 + 3))?;
        if r.min == 0 {
            rule.truncate(r.last_sym_start);
        } else {
            for _ in 1..r.min {
                rule.extend_from_slice(&prev);
            }
        }
        self.n_elements += prev.len() * r.min.saturating_sub(1) as usize;
        let mut last_rec_id = 0;
        for i in 0..n_opt {
            let mut rec = prev.clone();
            let rec_id = self.generate_symbol_id(rule_name);
            if i > 0 || r.max.is_none() {
                rec.push(Element::new(Kind::RuleRef, if r.max.is_none() { rec_id } else { last_rec_id }));
            }
            rec.push(Element::new(Kind::Alt, 0));
            rec.push(Element::new(Kind::End, 0));
            self.add_rule(rec_id, rec)?;
            last_rec_id = rec_id;
        }
        if n_opt > 0 {
            rule.push(Element::new(Kind::RuleRef, last_rec_id));
        }
        Ok(r.n_prev_rules * total)
    }
}

/// A repetition to apply: where its operator is, its bounds (`max` None:
/// unbounded), and the item it applies to.
struct Repeat {
    at: usize,
    min: u64,
    max: Option<u64>,
    last_sym_start: usize,
    n_prev_rules: u64,
}
