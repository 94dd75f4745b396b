//! Following a grammar through generated text: llama.cpp's pushdown stacks
//! (each a list of positions in the rules, the top one at a terminal),
//! advanced per code point; the UTF-8 of a token's piece may stop inside a
//! character and continue in the next token.
use super::{Grammar, Kind, MAX_STACKS};
use crate::engine::generate::generation::TokenText;
use crate::engine::{Error, Result};
use std::collections::HashSet;
use std::sync::Arc;

/// The most stack positions one advance may look at (a long chain of rules
/// that each start with the next makes ever deeper stacks).
const MAX_ADVANCE_WORK: usize = 1 << 22;

/// A pushdown stack: positions in [`Grammar`]'s elements, the top last.
pub type Stack = Vec<u32>;

/// The stacks already in a list, so that adding one is checked at once
/// (llama.cpp searches the list).
#[derive(Default)]
pub struct StackSet(HashSet<Stack>);

/// A UTF-8 sequence cut by the end of a token: its bits so far and how many
/// continuation bytes remain (-1: an invalid sequence).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Partial {
    pub(super) value: u32,
    pub(super) n_remain: i32,
}

/// Decodes `piece` (up to its first NUL, as llama.cpp reads a C string)
/// after the partial sequence `start`, appending its code points and a
/// terminating 0 to `out`; returns the sequence left incomplete at the end.
/// An invalid sequence gives the code points [0] and n_remain -1.
pub fn decode_utf8(piece: &[u8], start: Partial, out: &mut Vec<u32>) -> Partial {
    const LENGTHS: [i32; 16] = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4];
    let piece = &piece[..piece.iter().position(|&b| b == 0).unwrap_or(piece.len())];
    let begin = out.len();
    let mut i = 0;
    let (mut value, mut n_remain) = (start.value, start.n_remain);
    while i < piece.len() && n_remain > 0 {
        let b = piece[i];
        if b >> 6 != 2 {
            out.push(0);
            return Partial { value: 0, n_remain: -1 };
        }
        value = (value << 6) + u32::from(b & 0x3F);
        i += 1;
        n_remain -= 1;
    }
    if start.n_remain > 0 && n_remain == 0 {
        out.push(value);
    }
    while i < piece.len() {
        let first = piece[i];
        n_remain = LENGTHS[usize::from(first >> 4)] - 1;
        if n_remain < 0 {
            out.truncate(begin);
            out.push(0);
            return Partial { value: 0, n_remain };
        }
        value = u32::from(first & ((1u16 << (7 - n_remain)) - 1) as u8);
        i += 1;
        while i < piece.len() && n_remain > 0 {
            value = (value << 6) + u32::from(piece[i] & 0x3F);
            i += 1;
            n_remain -= 1;
        }
        if n_remain == 0 {
            out.push(value);
        }
    }
    out.push(0);
    Partial { value, n_remain }
}

/// Whether `chr` matches the character class at `pos`, and the position
/// after the class.
fn match_char(g: &Grammar, mut pos: usize, chr: u32) -> (bool, usize) {
    let e = &g.elements;
    let positive = matches!(e[pos].kind, Kind::Char | Kind::CharAny);
    let mut found = false;
    loop {
        if e[pos + 1].kind == Kind::CharRngUpper {
            found |= e[pos].value <= chr && chr <= e[pos + 1].value;
            pos += 2;
        } else if e[pos].kind == Kind::CharAny {
            found = true;
            pos += 1;
        } else {
            found |= e[pos].value == chr;
            pos += 1;
        }
        if e[pos].kind != Kind::CharAlt {
            break;
        }
    }
    (found == positive, pos)
}

/// Whether some completion of the partial sequence can match the class at
/// `pos`.
fn match_partial_char(g: &Grammar, mut pos: usize, partial: Partial) -> bool {
    let e = &g.elements;
    let positive = matches!(e[pos].kind, Kind::Char | Kind::CharAny);
    let Partial { value, n_remain } = partial;
    // an invalid sequence, or a 7-bit character spread over 2 bytes
    if n_remain < 0 || (n_remain == 1 && value < 2) {
        return false;
    }
    let shift = (n_remain * 6) as u32;
    let mut low = value << shift;
    let high = low | ((1u32 << shift) - 1);
    if low == 0 {
        if n_remain == 2 {
            low = 1 << 11;
        } else if n_remain == 3 {
            low = 1 << 16;
        }
    }
    loop {
        if e[pos + 1].kind == Kind::CharRngUpper {
            if e[pos].value <= high && low <= e[pos + 1].value {
                return positive;
            }
            pos += 2;
        } else if e[pos].kind == Kind::CharAny {
            return true;
        } else {
            if low <= e[pos].value && e[pos].value <= high {
                return positive;
            }
            pos += 1;
        }
        if e[pos].kind != Kind::CharAlt {
            break;
        }
    }
    !positive
}

fn match_token(g: &Grammar, pos: usize, token: i32) -> bool {
    let e = g.elements[pos];
    match e.kind {
        Kind::Token => e.value == token as u32,
        Kind::TokenNot => e.value != token as u32,
        _ => false,
    }
}

fn is_token(kind: Kind) -> bool {
    matches!(kind, Kind::Token | Kind::TokenNot | Kind::NamedToken | Kind::NamedTokenNot)
}

fn too_ambiguous() -> Error {
    Error::Argument(format!(
        "grammar error: the grammar is too ambiguous (more than {MAX_STACKS} ways to parse the text at once)"
    ))
}

/// Adds `stack` to `list` unless it is there.
fn push_unique(list: &mut Vec<Stack>, set: &mut StackSet, stack: Stack) -> Result<()> {
    if !set.0.contains(&stack) {
        if list.len() >= MAX_STACKS {
            return Err(too_ambiguous());
        }
        set.0.insert(stack.clone());
        list.push(stack);
    }
    Ok(())
}

/// Expands `stack` into the stacks that end at a terminal (a character
/// class or a token) or are empty (the grammar is complete), adding them to
/// `new_stacks` (llama.cpp's `llama_grammar_advance_stack`).
pub fn advance_stack(g: &Grammar, stack: Stack, new_stacks: &mut Vec<Stack>, in_new: &mut StackSet) -> Result<()> {
    let e = &g.elements;
    let mut todo = vec![stack];
    let mut seen: HashSet<Stack> = HashSet::new();
    // the positions of all stacks looked at, which bounds time and memory
    let mut work = 0usize;
    while let Some(current) = todo.pop() {
        if seen.contains(&current) {
            continue;
        }
        work += current.len() + 1;
        if work > MAX_ADVANCE_WORK {
            return Err(too_ambiguous());
        }
        seen.insert(current.clone());
        let Some(&top) = current.last() else {
            push_unique(new_stacks, in_new, current)?;
            continue;
        };
        let pos = top as usize;
        match e[pos].kind {
            Kind::RuleRef => {
                let mut sub = g.rule_start[e[pos].value as usize] as usize;
                loop {
                    let mut next = current[..current.len() - 1].to_vec();
                    if !e[pos + 1].ends_sequence() {
                        next.push(pos as u32 + 1);
                    }
                    if !e[sub].ends_sequence() {
                        next.push(sub as u32);
                    }
                    todo.push(next);
                    while !e[sub].ends_sequence() {
                        sub += 1;
                    }
                    if e[sub].kind == Kind::Alt {
                        sub += 1;
                    } else {
                        break;
                    }
                }
            }
            Kind::Char | Kind::CharNot | Kind::CharAny => push_unique(new_stacks, in_new, current)?,
            k if is_token(k) => push_unique(new_stacks, in_new, current)?,
            // a stack never rests at the end of an alternative or inside a class
            _ => return Err(Error::Argument("grammar error: a parse stack rests on a non-terminal".into())),
        }
    }
    Ok(())
}

/// The stacks after `stack` accepts the character `chr` (none if it cannot).
fn accept_chr(g: &Grammar, stack: &Stack, chr: u32, new_stacks: &mut Vec<Stack>, in_new: &mut StackSet) -> Result<()> {
    let Some(&top) = stack.last() else { return Ok(()) };
    if is_token(g.elements[top as usize].kind) {
        return Ok(());
    }
    let (matched, after) = match_char(g, top as usize, chr);
    if matched {
        let mut next = stack[..stack.len() - 1].to_vec();
        if !g.elements[after].ends_sequence() {
            next.push(after as u32);
        }
        advance_stack(g, next, new_stacks, in_new)?;
    }
    Ok(())
}

/// A token being checked: its index among the candidates, where its code
/// points continue in the shared buffer, how its UTF-8 ends, its id.
#[derive(Clone, Copy)]
struct Candidate {
    index: usize,
    at: usize,
    partial: Partial,
    id: i32,
}

/// The candidates no stack accepts (llama.cpp's
/// `llama_grammar_reject_candidates`).
fn reject(g: &Grammar, codes: &[u32], stacks: &[Stack], candidates: &[Candidate]) -> Result<Vec<Candidate>> {
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let Some((first, rest)) = stacks.split_first() else {
        return Ok(candidates.to_vec());
    };
    let mut rejects = reject_for_stack(g, codes, first, candidates)?;
    for stack in rest {
        if rejects.is_empty() {
            break;
        }
        rejects = reject_for_stack(g, codes, stack, &rejects)?;
    }
    Ok(rejects)
}

/// The candidates `stack` cannot accept.
fn reject_for_stack(g: &Grammar, codes: &[u32], stack: &Stack, candidates: &[Candidate]) -> Result<Vec<Candidate>> {
    let mut rejects = Vec::with_capacity(candidates.len());
    let Some(&top) = stack.last() else {
        // a complete parse accepts only what adds nothing
        rejects.extend(candidates.iter().filter(|c| codes[c.at] != 0 || c.partial.n_remain != 0));
        return Ok(rejects);
    };
    let pos = top as usize;
    if is_token(g.elements[pos].kind) {
        for c in candidates {
            if codes[c.at] == 0 {
                if c.partial.n_remain != 0 {
                    rejects.push(*c);
                }
            } else if !match_token(g, pos, c.id) {
                rejects.push(*c);
            }
        }
        return Ok(rejects);
    }
    let mut next_candidates = Vec::with_capacity(candidates.len());
    for c in candidates {
        if codes[c.at] == 0 {
            // the token ends here: rejected if its unfinished character
            // cannot match
            if c.partial.n_remain != 0 && !match_partial_char(g, pos, c.partial) {
                rejects.push(*c);
            }
        } else if match_char(g, pos, codes[c.at]).0 {
            next_candidates.push(Candidate { at: c.at + 1, ..*c });
        } else {
            rejects.push(*c);
        }
    }
    if next_candidates.is_empty() {
        return Ok(rejects);
    }
    let after = match_char(g, pos, 0).1;
    let mut stack_after = stack[..stack.len() - 1].to_vec();
    if !g.elements[after].ends_sequence() {
        stack_after.push(after as u32);
    }
    let mut next_stacks = Vec::new();
    advance_stack(g, stack_after, &mut next_stacks, &mut StackSet::default())?;
    for c in reject(g, codes, &next_stacks, &next_candidates)? {
        rejects.push(Candidate { at: c.at - 1, ..c });
    }
    Ok(rejects)
}

/// A grammar followed through one generation.
#[derive(Clone)]
pub struct GrammarState {
    grammar: Arc<Grammar>,
    stacks: Vec<Stack>,
    partial: Partial,
}

impl GrammarState {
    /// At the start of `grammar` (which must have its `<text>` tokens
    /// resolved, [`Grammar::bind`]).
    pub fn new(grammar: Arc<Grammar>) -> Result<GrammarState> {
        if grammar.needs_vocabulary() {
            return Err(Error::Argument(
                "the grammar names tokens by text (<...>): use it with a model, which resolves them".into(),
            ));
        }
        let stacks = grammar.initial.clone();
        Ok(GrammarState { grammar, stacks, partial: Partial::default() })
    }

    /// Whether the text so far is a whole sentence of the grammar (a stack
    /// is empty): then the end of generation is allowed.
    pub fn is_complete(&self) -> bool {
        self.stacks.iter().any(Vec::is_empty)
    }

    /// Whether the text so far can still continue (or end) in the grammar.
    pub fn is_alive(&self) -> bool {
        !self.stacks.is_empty()
    }

    /// The indices of `ids` the grammar rejects now (llama.cpp's grammar
    /// apply): end-of-generation tokens unless the grammar is complete,
    /// tokens with an empty piece or one starting with NUL, and tokens whose
    /// text no stack can take.
    fn rejected(&self, ids: impl Iterator<Item = (usize, i32)>, tokens: &dyn TokenText) -> Result<Vec<usize>> {
        let allow_eog = self.is_complete();
        let mut out = Vec::new();
        let mut codes = Vec::new();
        let mut candidates = Vec::new();
        for (index, id) in ids {
            if tokens.is_eog(id) {
                if !allow_eog {
                    out.push(index);
                }
                continue;
            }
            let piece = tokens.special_piece(id)?;
            if piece.first().is_none_or(|&b| b == 0) {
                out.push(index);
                continue;
            }
            let at = codes.len();
            let partial = decode_utf8(piece, self.partial, &mut codes);
            candidates.push(Candidate { index, at, partial, id });
        }
        out.extend(reject(&self.grammar, &codes, &self.stacks, &candidates)?.iter().map(|c| c.index));
        Ok(out)
    }

    /// Sets the logits of the tokens the grammar rejects to -inf (`logits`
    /// is indexed by token id; tokens already at -inf are not looked at).
    pub fn apply(&self, logits: &mut [f32], tokens: &dyn TokenText) -> Result<()> {
        let live = logits.iter().enumerate().filter(|(_, &l)| l != f32::NEG_INFINITY).map(|(i, _)| (i, i as i32));
        let live: Vec<(usize, i32)> = live.collect();
        for i in self.rejected(live.into_iter(), tokens)? {
            logits[i] = f32::NEG_INFINITY;
        }
        Ok(())
    }

    /// Whether the grammar allows token `id` next.
    pub fn allows(&self, id: i32, tokens: &dyn TokenText) -> Result<bool> {
        Ok(self.rejected(std::iter::once((0, id)), tokens)?.is_empty())
    }

    /// Advances past token `id` (llama.cpp's grammar accept). An
    /// end-of-generation token is accepted only when the grammar is
    /// complete, and changes nothing.
    pub fn accept(&mut self, id: i32, tokens: &dyn TokenText) -> Result<()> {
        if tokens.is_eog(id) {
            if self.is_complete() {
                return Ok(());
            }
            return Err(Error::Argument(format!("the grammar is not complete, so it does not accept token {id}")));
        }
        let piece = tokens.special_piece(id)?;
        let g = &*self.grammar;
        let mut codes = Vec::new();
        let partial = decode_utf8(piece, self.partial, &mut codes);
        let (mut stacks, mut in_stacks) = (Vec::new(), StackSet::default());
        for stack in &self.stacks {
            let Some(&top) = stack.last() else { continue };
            let top = top as usize;
            if is_token(g.elements[top].kind) {
                if match_token(g, top, id) {
                    let mut next = stack[..stack.len() - 1].to_vec();
                    if !g.elements[top + 1].ends_sequence() {
                        next.push(top as u32 + 1);
                    }
                    advance_stack(g, next, &mut stacks, &mut in_stacks)?;
                }
                continue;
            }
            let mut current = vec![stack.clone()];
            for &chr in &codes[..codes.len() - 1] {
                let (mut next, mut in_next) = (Vec::new(), StackSet::default());
                for s in &current {
                    accept_chr(g, s, chr, &mut next, &mut in_next)?;
                }
                current = next;
                if current.is_empty() {
                    break;
                }
            }
            for s in current {
                push_unique(&mut stacks, &mut in_stacks, s)?;
            }
        }
        if stacks.is_empty() {
            return Err(Error::Argument(format!(
                "token {id} ('{}') does not fit the grammar here",
                String::from_utf8_lossy(piece)
            )));
        }
        self.stacks = stacks;
        self.partial = partial;
        Ok(())
    }

    /// Advances past text, a code point at a time (llama.cpp's
    /// `llama_grammar_accept_str`). Returns false, leaving the state with no
    /// stack, when the grammar cannot take the text.
    pub fn accept_text(&mut self, text: &[u8]) -> Result<bool> {
        let mut codes = Vec::new();
        let partial = decode_utf8(text, self.partial, &mut codes);
        let g = &*self.grammar;
        for &chr in &codes[..codes.len() - 1] {
            let (mut next, mut in_next) = (Vec::new(), StackSet::default());
            for s in &self.stacks {
                accept_chr(g, s, chr, &mut next, &mut in_next)?;
            }
            self.stacks = next;
            if self.stacks.is_empty() {
                return Ok(false);
            }
        }
        self.partial = partial;
        Ok(true)
    }
}
