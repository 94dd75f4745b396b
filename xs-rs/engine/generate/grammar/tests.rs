use super::matcher::{decode_utf8, Partial};
use super::*;
use crate::engine::generate::generation::TokenText;
use crate::engine::generate::sampler::SamplerOptions;
use std::time::Instant;

fn grammar(text: &str) -> Arc<Grammar> {
    Arc::new(Grammar::new(text, "root").unwrap_or_else(|e| panic!("{text}: {e}")))
}

fn error(text: &str) -> String {
    match Grammar::new(text, "root") {
        Ok(_) => panic!("{text:?} parsed"),
        Err(e) => e.to_string(),
    }
}

/// Whether the whole of `text` is a sentence of the grammar.
fn accepts(g: &Arc<Grammar>, text: &str) -> bool {
    let mut s = GrammarState::new(g.clone()).unwrap();
    s.accept_text(text.as_bytes()).unwrap() && s.is_complete()
}

fn check(text: &str, good: &[&str], bad: &[&str]) {
    let g = grammar(text);
    for t in good {
        assert!(accepts(&g, t), "{text:?} should accept {t:?}");
    }
    for t in bad {
        assert!(!accepts(&g, t), "{text:?} should refuse {t:?}");
    }
}

/// A vocabulary of pieces; the last token ends generation.
struct Pieces(Vec<&'static [u8]>);

impl TokenText for Pieces {
    fn is_eog(&self, id: i32) -> bool {
        id as usize == self.0.len() - 1
    }
    fn piece(&self, id: i32) -> crate::engine::Result<&[u8]> {
        Ok(self.0[id as usize])
    }
}

#[test]
fn rules_are_numbered_and_expanded_as_llama_cpp() {
    let g = grammar("root ::= a+\na ::= \"a\"");
    assert_eq!(g.rules_text(), "root ::= a root_2 \na ::= [a] \nroot_2 ::= a root_2 | \n");
    let g = grammar("root ::= \"a\"{3,5000}");
    assert_eq!(g.rules_text(), "root ::= [a] [a] [a] root_1 \nroot_1 ::= [a] root_1 | \n");
    let g = grammar("root ::= \"a\" | [bdx-z] | [^1-3]");
    assert_eq!(g.rules_text(), "root ::= [a] | [bdx-z] | [^1-3] \n");
    let g = grammar("root ::= [a-z]{1,3}");
    assert_eq!(g.rules_text(), "root ::= [a-z] root_2 \nroot_1 ::= [a-z] | \nroot_2 ::= [a-z] root_1 | \n");
    let g = grammar("root ::= (\"x\" | \"y\")? \"\\u00e9\"");
    assert_eq!(g.rules_text(), "root ::= root_2 [<U+00E9>] \nroot_1 ::= [x] | [y] \nroot_2 ::= root_1 | \n");
}

#[test]
fn quantifiers_and_classes() {
    check("root ::= \"a\"*", &["", "a", "aaaa"], &["b", "ab", "ba"]);
    check("root ::= \"a\"+", &["a", "aaa"], &["", "ab"]);
    check("root ::= \"a\"?", &["", "a"], &["aa", "b"]);
    check("root ::= [ab]{4}", &["abab", "bbbb"], &["aba", "ababa"]);
    check("root ::= [ab]{2,}", &["ab", "abababa"], &["a", "abc"]);
    check("root ::= [ab]{0,2}", &["", "a", "ab"], &["aba"]);
    check("root ::= [ab]{1,3} \"!\"", &["a!", "aba!"], &["!", "abab!"]);
    check("root ::= [^abc]+", &["xyz", "é"], &["xa", ""]);
    check("root ::= [a-cx-z0-9]+", &["abz09"], &["d"]);
    check("root ::= . \".\"", &["é.", "x.", ".."], &["x", "..."]);
    check("root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\\\\\\"\"", &["Aé😀\t\n\\\""], &["A"]);
    check("root ::= [\\]\\-\\[]+", &["]-["], &["a"]);
    check("root ::= [à-ÿ]+ # a comment\n", &["éü"], &["a"]);
    check("root ::= (\"ab\" | \"a\") \"c\"", &["abc", "ac"], &["bc"]);
    check("root ::= x x\nx ::= \"1\" | \"22\"", &["11", "122", "221", "2222"], &["1", "12"]);
}

#[test]
fn syntax_errors_name_line_and_column() {
    let e = error("root ::= \"a\"\nfoo ::= [abc");
    assert!(e.contains("line 2, column 13"), "{e}");
    assert!(e.contains("unterminated character class"), "{e}");
    let e = error("root ::= \"a\"\n  bar = \"b\"");
    assert!(e.contains("line 2, column 7") && e.contains("expecting ::="), "{e}");
    let e = error("root ::= \"\\q\"");
    assert!(e.contains("line 1, column 11") && e.contains("unknown escape"), "{e}");
    let e = error("root ::= \"é\" )");
    assert!(e.contains("line 1, column 14") && e.contains("expecting newline"), "{e}");
    assert!(error("root ::= \"a\"{,}").contains("expecting an integer"));
    assert!(error("root ::= \"a\"{5000}").contains("more than 2000 repetitions"));
    assert!(error("root ::= (((([^x]*){0,99}){0,99}){0,99}){0,99}").contains("exceed 2000"));
    assert!(error("root ::= *").contains("expecting an item"));
    assert!(error("root ::= foo").contains("undefined rule 'foo'"));
    assert!(error("").contains("empty"));
    assert!(error("  # nothing\n").contains("empty"));
    assert!(error("start ::= \"a\"").contains("no rule 'root'"));
}

#[test]
fn left_recursion_is_refused() {
    assert!(error("root ::= root \"a\" | \"a\"").contains("left recursion"));
    assert!(error("root ::= a\na ::= b \"x\"\nb ::= \"\" | root").contains("left recursion"));
    assert!(error("root ::= a \"x\"\na ::= \"y\"? root").contains("left recursion"));
    // not left recursion: something comes first
    check("root ::= \"(\" root \")\" | \"x\"", &["x", "((x))"], &["(x"]);
    // a chain of 100000 rules is walked without recursion
    let mut text = String::from("root ::= r0\n");
    for i in 0..100_000 {
        text.push_str(&format!("r{i} ::= r{}\n", i + 1));
    }
    text.push_str("r100000 ::= \"z\"\n");
    check(&text, &["z"], &["y"]);
    // many paths to the same rule are walked once (the rules need not be
    // reachable from the root to be checked)
    let mut text = String::from("root ::= \"a\"\n");
    for i in 0..60 {
        text.push_str(&format!("d{i} ::= d{j} \"x\" | d{j} \"y\"\n", j = i + 1));
    }
    text.push_str("d60 ::= \"y\"\n");
    let t = Instant::now();
    grammar(&text);
    assert!(t.elapsed().as_secs_f64() < 1.0);
}

#[test]
fn hostile_grammars_end_quickly() {
    let t = Instant::now();
    // 1 MB of literal
    let big = format!("root ::= \"{}\"", "a".repeat(1 << 20));
    assert_eq!(grammar(&big).n_rules(), 1);
    // 1 MB of alternatives: too many stacks at the start
    let alts = format!("root ::= {}\"a\"", "\"a\" | ".repeat(1 << 17));
    assert!(error(&alts).contains("too ambiguous"));
    // a long literal repeated: too many elements
    let rep = format!("root ::= \"{}\"{{2000}}", "a".repeat(100_000));
    assert!(error(&rep).contains("more than"));
    // deep nesting
    let deep = format!("root ::= {}\"a\"{}", "(".repeat(100_000), ")".repeat(100_000));
    assert!(error(&deep).contains("nested"));
    let unclosed = format!("root ::= {}", "(".repeat(1 << 20));
    assert!(error(&unclosed).contains("nested"));
    // a chain of rules each starting with the next: ever deeper stacks
    let mut chain = String::from("root ::= c0\n");
    for i in 0..50_000 {
        chain.push_str(&format!("c{i} ::= c{} \"x\"\n", i + 1));
    }
    chain.push_str("c50000 ::= \"y\"\n");
    assert!(error(&chain).contains("too ambiguous"));
    // exponentially many parses at the start
    let mut paths = String::from("root ::= p0\n");
    for i in 0..60 {
        paths.push_str(&format!("p{i} ::= p{j} \"x\" | p{j} \"y\"\n", j = i + 1));
    }
    paths.push_str("p60 ::= \"z\"\n");
    assert!(error(&paths).contains("too ambiguous"));
    assert!(t.elapsed().as_secs_f64() < 2.0, "{:?}", t.elapsed());
}

#[test]
fn utf8_is_decoded_across_pieces() {
    let mut codes = Vec::new();
    let p = decode_utf8("é".as_bytes(), Partial::default(), &mut codes);
    assert_eq!((codes.as_slice(), p.n_remain), (&[0xE9, 0][..], 0));
    codes.clear();
    let p = decode_utf8(&[0xF0, 0x9F], Partial::default(), &mut codes);
    assert_eq!(codes, [0]);
    codes.clear();
    let p = decode_utf8(&[0x98, 0x80, b'a'], p, &mut codes);
    assert_eq!(codes, [0x1F600, u32::from(b'a'), 0]);
    assert_eq!(p.n_remain, 0);
    codes.clear();
    decode_utf8(&[0x80], Partial::default(), &mut codes);
    assert_eq!(codes, [0]);
}

#[test]
fn candidates_are_rejected_as_llama_cpp() {
    // tokens: "a", "b", "ab", "é" in two pieces, "é", "", "<eog>"
    let vocab = Pieces(vec![b"a", b"b", b"ab", &[0xC3], &[0xA9], "é".as_bytes(), b"", b"<eog>"]);
    let g = grammar("root ::= \"a\" [bé] ");
    let mut s = GrammarState::new(g).unwrap();
    let allowed = |s: &GrammarState| (0..8).filter(|&id| s.allows(id, &vocab).unwrap()).collect::<Vec<_>>();
    assert_eq!(allowed(&s), [0, 2]);
    s.accept(0, &vocab).unwrap();
    // the first byte of é may start it; the second alone may not
    assert_eq!(allowed(&s), [1, 3, 5]);
    s.accept(3, &vocab).unwrap();
    assert!(!s.is_complete());
    assert_eq!(allowed(&s), [4]);
    s.accept(4, &vocab).unwrap();
    assert!(s.is_complete());
    assert_eq!(allowed(&s), [7]);
    let mut logits = vec![1.0; 8];
    s.apply(&mut logits, &vocab).unwrap();
    assert_eq!(logits.iter().filter(|l| l.is_finite()).count(), 1);
    assert!(s.accept(1, &vocab).is_err());
}

#[test]
fn tokens_by_id_and_by_text() {
    let vocab = Pieces(vec![b"a", b"b", b"<x>", b"<eog>"]);
    let g = grammar("root ::= <[2]> !<[0]> \"a\"");
    let mut s = GrammarState::new(g).unwrap();
    assert!(s.allows(2, &vocab).unwrap() && !s.allows(0, &vocab).unwrap());
    s.accept(2, &vocab).unwrap();
    assert!(!s.allows(0, &vocab).unwrap() && s.allows(1, &vocab).unwrap());
    s.accept(1, &vocab).unwrap();
    s.accept(0, &vocab).unwrap();
    assert!(s.is_complete());

    let named = grammar("root ::= <x> \"a\"");
    assert!(named.needs_vocabulary());
    assert!(GrammarState::new(named.clone()).is_err());
    let bound = named.bind(|t| if t == b"<x>" { vec![2] } else { vec![0, 1] }).unwrap();
    assert_eq!(bound.rules_text(), "root ::= <[2]> [a] \n");
    let two = grammar("root ::= <yy>");
    assert!(two.bind(|_| vec![0, 1]).unwrap_err().to_string().contains("2 tokens"));
}

#[test]
fn sampling_draws_again_under_the_grammar() {
    let vocab = Pieces(vec![b"a", b"b", b"c", b"<eog>"]);
    let g = grammar("root ::= [bc]+");
    let mut s = GrammarState::new(g).unwrap();
    let mut sampler = Sampler::with_vocab(SamplerOptions { greedy: true, ..Default::default() }, None).unwrap();
    let mut scratch = Vec::new();
    // "a" is the best, "c" the best the grammar allows
    let logits = [5.0, 1.0, 2.0, 4.0];
    let id = sample(&mut sampler, &s, &logits, &[], &vocab, &mut scratch).unwrap();
    assert_eq!(id, 2);
    s.accept(id, &vocab).unwrap();
    // now complete: end of generation is allowed
    let id = sample(&mut sampler, &s, &logits, &[], &vocab, &mut scratch).unwrap();
    assert_eq!(id, 3);
    // nothing allowed at all
    let none = grammar("root ::= \"z\"");
    let s = GrammarState::new(none).unwrap();
    assert!(sample(&mut sampler, &s, &logits, &[], &vocab, &mut scratch).is_err());
}
