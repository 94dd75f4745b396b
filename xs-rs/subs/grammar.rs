//! XS subs of Lugh::Grammar: a parsed GBNF grammar (the engine's
//! [`Grammar`]), shared by every generation it constrains.
use crate::engine::generate::grammar::{Grammar, GrammarState};
use crate::engine::generate::json_schema::parse_schema_text;
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

/// The grammar of a JSON schema given as JSON text (Lugh/Grammar.pm and
/// Lugh/Inference.pm write a Perl structure as JSON text, keys sorted).
fn schema_grammar(text: &str) -> Result<Grammar, Error> {
    Grammar::from_json_schema(&parse_schema_text(text)?)
}

fn in_option(e: Error, what: &str) -> Error {
    Error::Argument(format!("{what}: {e}"))
}

/// The json_schema option: a schema as JSON text, or a Lugh::Grammar made
/// by from_json_schema.
pub fn json_schema_arg(perl: Perl, sv: Sv) -> Result<Arc<Grammar>, Error> {
    if perl.ref_kind(sv) != 0 {
        return object_arc::<Grammar>(perl, sv, CLASS);
    }
    let text = perl.string_arg(sv, "json_schema")?;
    Ok(Arc::new(schema_grammar(&text).map_err(|e| in_option(e, "json_schema"))?))
}

/// The response_format option, as llama-server reads OpenAI's: {"type":
/// "text"} (no grammar), {"type": "json_object", "schema": {...}} (no
/// schema: any JSON value) or {"type": "json_schema", "json_schema":
/// {"schema": {...}}}, given as JSON text.
pub fn response_format_arg(perl: Perl, sv: Sv) -> Result<Option<Arc<Grammar>>, Error> {
    let text = perl.string_arg(sv, "response_format")?;
    let format: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::Argument(format!("response_format is not valid JSON: {e}")))?;
    if !format.is_object() {
        return Err(Error::Argument("response_format must be a hash, like { type => 'json_object' }".into()));
    }
    Ok(Grammar::from_response_format(&format)?.map(Arc::new))
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

    // class, the schema as JSON text (Lugh/Grammar.pm encodes a structure)
    fn _from_json_schema(args) as "Lugh::Grammar->from_json_schema" {
        args.expect(2, 2, "class, schema")?;
        let perl = args.perl();
        let class = perl.class_arg(args.get(0))?;
        let text = perl.string_arg(args.get(1), "the JSON schema")?;
        let grammar = schema_grammar(&text)?;
        Ok(Ret::One(new_object(perl, &class, Arc::new(grammar))))
    }

    fn text(args) as "Lugh::Grammar->text" {
        args.expect(1, 1, "self")?;
        Ok(Ret::One(args.perl().str(this(args)?.text())))
    }

    fn schema_warnings(args) as "Lugh::Grammar->schema_warnings" {
        args.expect(1, 1, "self")?;
        let perl = args.perl();
        Ok(Ret::List(this(args)?.schema_warnings().iter().map(|w| perl.str(w)).collect()))
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
