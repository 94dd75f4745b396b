//! XS subs of Lugh::Grammar: a parsed GBNF grammar (the engine's
//! [`Grammar`]), shared by every generation it constrains.
use crate::engine::generate::grammar::{Grammar, GrammarState};
use crate::engine::Error;
use crate::glue::{new_object, object_arc, Args, Perl, Ret, Sv};
use crate::xs_subs;
use std::sync::Arc;

pub const CLASS: &str = "Lugh::Grammar";

fn this(args: &Args) -> Result<Arc<Grammar>, Error> {
    object_arc::<Grammar>(args.perl(), args.get(0), CLASS)
}

/// GBNF text or a Lugh::Grammar object (the grammar => option).
pub fn grammar_arg(perl: Perl, sv: Sv) -> Result<Arc<Grammar>, Error> {
    if perl.ref_kind(sv) != 0 {
        return object_arc::<Grammar>(perl, sv, CLASS);
    }
    let text = perl.utf8_text_arg(sv, "grammar")?;
    let text = std::str::from_utf8(&text).map_err(|_| Error::Argument("grammar must be UTF-8 text".into()))?;
    Ok(Arc::new(Grammar::new(text, "root")?))
}

/// A fresh state of the grammar after `text`: None when the grammar cannot
/// take the text.
fn state_after(args: &Args) -> Result<Option<GrammarState>, Error> {
    let g = this(args)?;
    let text = args.perl().utf8_text_arg(args.get(1), "text")?;
    let mut state = GrammarState::new(g)?;
    Ok(if state.accept_text(&text)? { Some(state) } else { None })
}

xs_subs! { "Lugh::Grammar";
    // class, GBNF text, root rule name (Lugh/Grammar.pm checks the options)
    fn _new(args) as "Lugh::Grammar->new" {
        args.expect(3, 3, "class, gbnf, root")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let text = perl.utf8_text_arg(args.get(1), "the grammar text")?;
        let text =
            std::str::from_utf8(&text).map_err(|_| Error::Argument("the grammar text must be UTF-8".into()))?;
        let root = perl.string_arg(args.get(2), "root")?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(Grammar::new(text, &root)?))))
    }

    fn text(args) as "Lugh::Grammar->text" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().str(this(args)?.text())))
    }

    fn root(args) as "Lugh::Grammar->root" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().str(this(args)?.root())))
    }

    fn n_rules(args) as "Lugh::Grammar->n_rules" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().int(this(args)?.n_rules() as i64)))
    }

    fn rules(args) as "Lugh::Grammar->rules" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().str(&this(args)?.rules_text())))
    }

    fn accepts(args) as "Lugh::Grammar->accepts" {
        args.expect(2, 2, "self, text")?;
        let whole = state_after(args)?.is_some_and(|s| s.is_complete());
        Ok(Ret::One(args.perl().bool(whole)))
    }

    fn accepts_prefix(args) as "Lugh::Grammar->accepts_prefix" {
        args.expect(2, 2, "self, text")?;
        let alive = state_after(args)?.is_some_and(|s| s.is_alive());
        Ok(Ret::One(args.perl().bool(alive)))
    }
}
