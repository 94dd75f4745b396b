//! Reading a request body: JSON, each field checked for its type, and the
//! generation settings OpenAI's and llama-server's fields ask for.
use super::error::ApiError;
use crate::engine::generate::generation::GenerateOptions;
use crate::engine::generate::grammar::Grammar;
use serde_json::{Map, Value};
use std::sync::Arc;

/// The most alternatives `top_logprobs` may ask for (OpenAI's limit).
const MAX_TOP_LOGPROBS: i64 = 20;

/// A request's JSON object, read field by field; `null` is as absent.
pub struct Fields(pub Map<String, Value>);

/// What a JSON value is, for "must be X, got Y".
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub fn wrong_type(name: &str, want: &str, got: &Value) -> ApiError {
    ApiError::bad_request(format!("'{name}' must be {want}, got {}", kind(got)))
}

impl Fields {
    /// The body as JSON: an object, or 400.
    pub fn parse(body: &[u8]) -> Result<Fields, ApiError> {
        match serde_json::from_slice(body) {
            Ok(Value::Object(map)) => Ok(Fields(map)),
            Ok(other) => Err(wrong_type("the request body", "a JSON object", &other)),
            Err(e) => Err(ApiError::bad_request(format!("the request body is not valid JSON: {e}"))),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|v| !v.is_null())
    }

    pub fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        self.get(name).map(|v| v.as_bool().ok_or_else(|| wrong_type(name, "a boolean", v))).transpose()
    }

    pub fn number(&self, name: &str) -> Result<Option<f32>, ApiError> {
        self.get(name).map(|v| v.as_f64().map(|x| x as f32).ok_or_else(|| wrong_type(name, "a number", v))).transpose()
    }

    /// An integer in [min, max].
    pub fn integer(&self, name: &str, min: i64, max: i64) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.get(name) else { return Ok(None) };
        let n = v.as_i64().ok_or_else(|| wrong_type(name, "an integer", v))?;
        if !(min..=max).contains(&n) {
            return Err(ApiError::bad_request(format!("'{name}' must be in [{min}, {max}], got {n}")));
        }
        Ok(Some(n))
    }

    pub fn string(&self, name: &str) -> Result<Option<&str>, ApiError> {
        self.get(name).map(|v| v.as_str().ok_or_else(|| wrong_type(name, "a string", v))).transpose()
    }

    /// `stop`: a string or an array of strings.
    fn stop(&self) -> Result<Vec<String>, ApiError> {
        let want = "a string or an array of strings";
        match self.get("stop") {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(items)) => {
                items.iter().map(|v| v.as_str().map(String::from).ok_or_else(|| wrong_type("stop", want, v))).collect()
            }
            Some(other) => Err(wrong_type("stop", want, other)),
        }
    }

    /// `logit_bias`: {"token id": bias}.
    fn logit_bias(&self) -> Result<Vec<(i32, f32)>, ApiError> {
        let Some(v) = self.get("logit_bias") else { return Ok(Vec::new()) };
        let Value::Object(map) = v else { return Err(wrong_type("logit_bias", "an object", v)) };
        map.iter()
            .map(|(key, bias)| {
                let id = key.trim().parse::<i32>().ok().filter(|&id| id >= 0).ok_or_else(|| {
                    ApiError::bad_request(format!("logit_bias: '{key}' is not a token id (an integer >= 0)"))
                })?;
                let bias = bias.as_f64().ok_or_else(|| wrong_type("logit_bias value", "a number", bias))?;
                Ok((id, bias as f32))
            })
            .collect()
    }

    /// `n`: only one choice is generated.
    fn check_one_choice(&self) -> Result<(), ApiError> {
        match self.integer("n", 1, i64::MAX)? {
            None | Some(1) => Ok(()),
            Some(n) => Err(ApiError::bad_request(format!("only one choice per request is supported ('n' is {n})"))),
        }
    }
}

/// The settings of one generation request, and what its answer includes.
pub struct Generation {
    pub options: GenerateOptions,
    /// `max_tokens` as asked (None: until the slot's context is full).
    pub max_tokens: Option<usize>,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the usage.
    pub include_usage: bool,
    /// llama-server's `cache_prompt` (default true): the prompt may start
    /// from what a slot's cache holds.
    pub cache_prompt: bool,
}

/// Reads the fields shared by /v1/chat/completions and /v1/completions.
/// `logprobs` is read by each endpoint (a boolean in chat, a count in
/// completions).
pub fn generation(f: &Fields) -> Result<Generation, ApiError> {
    f.check_one_choice()?;
    let mut options = GenerateOptions { need_text: true, ..GenerateOptions::default() };
    let s = &mut options.sampler;
    if let Some(t) = f.number("temperature")? {
        s.temperature = t;
        // llama-server samples greedily at temperature <= 0
        s.greedy = t <= 0.0;
        s.temperature = t.max(0.0);
    }
    macro_rules! number_fields {
        ($($field:ident),*) => { $( if let Some(v) = f.number(stringify!($field))? { s.$field = v; } )* };
    }
    number_fields!(top_p, min_p, typical_p, repeat_penalty, presence_penalty, frequency_penalty, top_n_sigma);
    number_fields!(xtc_probability, xtc_threshold, dry_multiplier, dry_base, mirostat_tau, mirostat_eta);
    if let Some(k) = f.integer("top_k", 0, i64::MAX)? {
        s.top_k = k as usize;
    }
    if let Some(n) = f.integer("repeat_last_n", 0, i64::MAX)? {
        s.penalty_last_n = n as usize;
    }
    if let Some(m) = f.integer("mirostat", 0, 2)? {
        s.mirostat_mode = m as u8;
    }
    // llama-server: a negative seed (its default, -1) is a random one
    s.seed = f.integer("seed", i64::MIN, i64::MAX)?.filter(|&v| v >= 0).map(|v| v as u64);
    s.logit_bias = f.logit_bias()?;
    options.sampler.validate()?;
    options.stop = f.stop()?;
    if options.stop.iter().any(String::is_empty) {
        return Err(ApiError::bad_request("'stop' strings must not be empty"));
    }
    // OpenAI's max_tokens, its newer max_completion_tokens, llama-server's
    // n_predict; -1 is "no limit"
    let mut max_tokens = None;
    for name in ["max_tokens", "max_completion_tokens", "n_predict"] {
        if let Some(n) = f.integer(name, -1, i64::from(u32::MAX))? {
            max_tokens = usize::try_from(n).ok();
        }
    }
    options.grammar = constraint(f)?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = match f.get("stream_options") {
        None => false,
        Some(Value::Object(o)) => o.get("include_usage").and_then(Value::as_bool).unwrap_or(false),
        Some(other) => return Err(wrong_type("stream_options", "an object", other)),
    };
    let cache_prompt = f.bool("cache_prompt")?.unwrap_or(true);
    Ok(Generation { options, max_tokens, stream, include_usage, cache_prompt })
}

/// `top_logprobs` (0 when absent) for a request with `logprobs` on.
pub fn top_logprobs(f: &Fields) -> Result<usize, ApiError> {
    Ok(f.integer("top_logprobs", 0, MAX_TOP_LOGPROBS)?.unwrap_or(0) as usize)
}

/// The grammar of `response_format`, or of llama-server's own `json_schema`
/// and `grammar` fields.
fn constraint(f: &Fields) -> Result<Option<Arc<Grammar>>, ApiError> {
    let given: Vec<&str> =
        ["response_format", "json_schema", "grammar"].into_iter().filter(|n| f.get(n).is_some()).collect();
    if given.len() > 1 {
        return Err(ApiError::bad_request(format!("give one of {}, not several", given.join(", "))));
    }
    let grammar = if let Some(format) = f.get("response_format") {
        if !format.is_object() {
            return Err(wrong_type("response_format", "an object", format));
        }
        Grammar::from_response_format(format)?
    } else if let Some(schema) = f.get("json_schema") {
        Some(Grammar::from_json_schema(schema).map_err(|e| ApiError::bad_request(format!("json_schema: {e}")))?)
    } else if let Some(text) = f.string("grammar")? {
        Some(Grammar::new(text, "root").map_err(|e| ApiError::bad_request(format!("grammar: {e}")))?)
    } else {
        None
    };
    Ok(grammar.map(Arc::new))
}
