//! XS sub of Lugh::Server: runs `lugh serve` over a session until SIGTERM
//! or SIGINT (the serving itself is crate::serve, which knows no perl).
use super::inference::CLASS as INFERENCE_CLASS;
use super::lora::lora_arg;
use crate::engine::generate::embedding::Pooling;
use crate::engine::generate::inference::Inference;
use crate::engine::Error;
use crate::glue::{names, object_arc, set, Given, Opt, Ret};
use crate::serve::Config;
use crate::xs_subs;
use std::time::Duration;

/// Lugh::Server->new's options (Lugh/Server.pm checks and documents them;
/// the defaults are Config::new's).
const SERVER_OPTIONS: &[Opt<Config>] = &[
    Opt::new("host", |perl, sv, c| set(&mut c.host, perl.string_arg(sv, "host"))),
    Opt::new("port", |perl, sv, c| set(&mut c.port, perl.ranged_arg(sv, "port", 0, 65535).map(|p| p as u16))),
    Opt::new("n_parallel", |perl, sv, c| set(&mut c.n_parallel, perl.ranged_arg(sv, "n_parallel", 1, 256))),
    Opt::new("deterministic", |perl, sv, c| set(&mut c.deterministic, perl.bool_arg(sv, "deterministic"))),
    Opt::new("api_key", |perl, sv, c| {
        let key = perl.string_arg(sv, "api_key")?;
        if key.is_empty() {
            return Err(Error::Argument("api_key must not be empty".into()));
        }
        set(&mut c.api_key, Ok(Some(key)))
    }),
    Opt::new("embeddings", |perl, sv, c| set(&mut c.embeddings, perl.bool_arg(sv, "embeddings"))),
    Opt::new("pooling", |perl, sv, c| {
        set(&mut c.pooling, perl.string_arg(sv, "pooling").and_then(|n| Pooling::from_name(&n)).map(Some))
    }),
    Opt::new("model_name", |perl, sv, c| set(&mut c.model_id, perl.string_arg(sv, "model_name"))),
    Opt::new("chat_template", |perl, sv, c| set(&mut c.chat_template, perl.string_arg(sv, "chat_template").map(Some))),
    Opt::new("lora", |perl, sv, c| set(&mut c.overrides.adapters, lora_arg(perl, sv))),
    Opt::new("timeout", |perl, sv, c| {
        let seconds = perl.number_arg(sv, "timeout")?;
        if !(seconds > 0.0 && seconds <= 1e9) {
            return Err(Error::Argument(format!("timeout must be a number of seconds > 0, got {seconds}")));
        }
        set(&mut c.timeout, Ok(Duration::from_secs_f64(seconds)))
    }),
    Opt::new("max_queue", |perl, sv, c| set(&mut c.max_queue, perl.ranged_arg(sv, "max_queue", 0, 1 << 20))),
    Opt::new("max_body_bytes", |perl, sv, c| {
        set(&mut c.max_body_bytes, perl.ranged_arg(sv, "max_body_bytes", 1, 1 << 30))
    }),
];

xs_subs! { "Lugh::Server";
    fn _option_names(args) {
        crate::glue::option_names(args, SERVER_OPTIONS)
    }

    // _serve($inference, name => value, ...): blocks until SIGTERM/SIGINT.
    fn _serve(args) as "Lugh::Server->run" {
        let perl = args.perl();
        let session = object_arc::<Inference>(perl, args.get(0), INFERENCE_CLASS)?;
        let model = session.runner.model();
        let default_id = model.path().display().to_string();
        let mut config = Config::new(default_id, session.runner.n_ctx());
        config.chat_template = model.gguf.get_str("tokenizer.chat_template").map(String::from);
        let given = Given::read(perl, &args.rest(1), &names(SERVER_OPTIONS).collect::<Vec<_>>())?;
        given.apply(perl, SERVER_OPTIONS, &mut config)?;
        crate::serve::run(session, config, |url| eprintln!("lugh: serving on {url}"))?;
        Ok(Ret::Empty)
    }
}
