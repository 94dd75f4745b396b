//! XS subs of Lugh::Prompt: compiling a Jinja chat template and rendering it.
//! Messages and variables arrive as JSON text made by Lugh/Prompt.pm.
use crate::engine::generate::chat_template::ChatTemplate;
use crate::engine::Error;
use crate::glue::{new_object, object_arc, Args, Ret};
use crate::xs_subs;
use std::sync::Arc;

const TEMPLATE_CLASS: &str = "Lugh::Prompt::Template";

fn json_arg(args: &Args, i: usize, what: &str) -> Result<serde_json::Value, Error> {
    let text = args.perl().string_arg(args.get(i), what)?;
    serde_json::from_str(&text).map_err(|e| Error::Argument(format!("{what} is not valid JSON: {e}")))
}

xs_subs! { "Lugh::Prompt";
    fn _compile_template(args) as "Lugh::Prompt->new" {
        args.expect(1, 1, "source")?;
        let perl = args.perl();
        let source = perl.string_arg(args.get(0), "template")?;
        let template = ChatTemplate::new(&source)?;
        Ok(Ret::One(new_object(perl, TEMPLATE_CLASS, Arc::new(template))))
    }

    fn _render_template(args) as "Lugh::Prompt->apply" {
        args.expect(4, 4, "template, messages_json, vars_json, now")?;
        let perl = args.perl();
        let template = object_arc::<ChatTemplate>(perl, args.get(0), TEMPLATE_CLASS)?;
        let messages = json_arg(args, 1, "the messages")?;
        let vars = match json_arg(args, 2, "the template variables")? {
            serde_json::Value::Object(map) => map,
            _ => return Err(Error::Argument("the template variables must be a JSON object".into()).into()),
        };
        let now = if perl.is_defined(args.get(3)) { Some(perl.int_arg(args.get(3), "now")?) } else { None };
        let text = template.render(&messages, &vars, now)?;
        Ok(Ret::One(perl.str(&text)))
    }
}
