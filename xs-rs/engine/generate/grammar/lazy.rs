//! A lazy grammar (llama.cpp's `grammar_lazy` with a word trigger): the
//! text is free until the trigger is generated; from there on the grammar
//! constrains it, starting at the trigger itself. Chat templates use it so
//! that a reply may talk freely but a tool call it opens is well-formed.
use super::{Grammar, GrammarState};
use crate::engine::{Error, Result};
use std::sync::Arc;

/// A grammar waiting for its trigger.
pub struct LazyGrammar {
    grammar: Arc<Grammar>,
    trigger: Vec<u8>,
    /// The end of the text so far that may still begin the trigger.
    tail: Vec<u8>,
}

impl LazyGrammar {
    pub fn new(grammar: Arc<Grammar>, trigger: &str) -> Result<LazyGrammar> {
        if trigger.is_empty() {
            return Err(Error::Argument("grammar_trigger must not be empty".into()));
        }
        Ok(LazyGrammar { grammar, trigger: trigger.as_bytes().to_vec(), tail: Vec::new() })
    }

    /// Takes the next generated piece. Once the trigger has appeared,
    /// returns the grammar's state after the text from the trigger on, or
    /// an error when the grammar does not begin with that text.
    pub fn observe(&mut self, piece: &[u8]) -> Result<Option<GrammarState>> {
        self.tail.extend_from_slice(piece);
        let n = self.trigger.len();
        if let Some(at) = self.tail.windows(n).position(|w| w == self.trigger.as_slice()) {
            let mut state = GrammarState::new(self.grammar.clone())?;
            if !state.accept_text(&self.tail[at..])? {
                return Err(Error::Argument(format!(
                    "the grammar does not begin with its trigger text '{}'",
                    String::from_utf8_lossy(&self.tail[at..])
                )));
            }
            return Ok(Some(state));
        }
        // Only the last n - 1 bytes can still begin the trigger.
        let keep = self.tail.len().min(n - 1);
        self.tail.drain(..self.tail.len() - keep);
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lazy(grammar: &str, trigger: &str) -> LazyGrammar {
        LazyGrammar::new(Arc::new(Grammar::new(grammar, "root").unwrap()), trigger).unwrap()
    }

    #[test]
    fn free_until_the_trigger_then_constrained_from_it() {
        let mut g = lazy(r#"root ::= "<call>" [a-z]+ "</call>""#, "<call>");
        assert!(g.observe(b"Let me ").unwrap().is_none());
        assert!(g.observe(b"check <ca").unwrap().is_none());
        let state = g.observe(b"ll>ab").unwrap().expect("triggered across pieces");
        assert!(state.is_alive() && !state.is_complete());
        let mut state = state;
        assert!(state.accept_text(b"c</call>").unwrap());
        assert!(state.is_complete());
    }

    #[test]
    fn text_after_the_trigger_that_the_grammar_refuses_is_an_error() {
        let mut g = lazy(r#"root ::= "<call>" [a-z]+"#, "<call>");
        let e = g.observe(b"<call>42").err().expect("refused");
        assert!(e.to_string().contains("does not begin with its trigger text"), "{e}");
    }

    #[test]
    fn an_empty_trigger_is_refused() {
        let grammar = Arc::new(Grammar::new(r#"root ::= "x""#, "root").unwrap());
        assert!(LazyGrammar::new(grammar, "").is_err());
    }

    #[test]
    fn the_kept_text_stays_short() {
        let mut g = lazy(r#"root ::= "<call>""#, "<call>");
        for _ in 0..1000 {
            assert!(g.observe(b"plain text ").unwrap().is_none());
        }
        assert!(g.tail.len() < 6);
    }
}
