//! Chat templates: the Jinja source stored in a GGUF file
//! (`tokenizer.chat_template`), rendered as Hugging Face transformers'
//! `apply_chat_template` renders it: trim_blocks and lstrip_blocks, loop
//! controls, Python's string and dict methods, transformers' `tojson`,
//! `raise_exception` and `strftime_now`, and Python's way of printing None,
//! True and False. A template comes from a downloaded file, so rendering runs
//! with limits: instructions (fuel), recursion depth, output size.
use crate::engine::{Error, Result};
use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, ErrorKind, Output, State, UndefinedBehavior, Value};
use std::fmt::Write as _;

/// The largest template source accepted.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;
/// The largest rendering produced.
pub const MAX_OUTPUT_BYTES: usize = 16 << 20;
/// Instructions one rendering may execute (real templates use thousands).
const FUEL: u64 = 20_000_000;
const RECURSION_LIMIT: usize = 100;
/// The context variable holding the fixed time for strftime_now.
const NOW_VARIABLE: &str = "__lugh_now__";

pub struct ChatTemplate {
    env: Environment<'static>,
}

impl ChatTemplate {
    /// Compiles `source`; a syntax error names its line.
    pub fn new(source: &str) -> Result<ChatTemplate> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(Error::Argument(format!(
                "the chat template is {} bytes, more than the {MAX_SOURCE_BYTES} accepted",
                source.len()
            )));
        }
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_fuel(Some(FUEL));
        env.set_recursion_limit(RECURSION_LIMIT);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_filter("string", |v: &Value| python_string(v));
        env.add_filter("length", length);
        env.add_filter("count", length);
        env.add_filter("indent", indent);
        env.add_template_owned("chat_template", without_generation_tags(source)).map_err(template_error)?;
        Ok(ChatTemplate { env })
    }

    /// Renders with `messages` and the other variables (add_generation_prompt,
    /// bos_token, tools ...). `now` (seconds since the epoch, UTC) fixes the
    /// time strftime_now sees.
    pub fn render(
        &self,
        messages: &serde_json::Value,
        vars: &serde_json::Map<String, serde_json::Value>,
        now: Option<i64>,
    ) -> Result<String> {
        let mut context: serde_json::Map<String, serde_json::Value> = vars.clone();
        context.insert("messages".into(), messages.clone());
        if let Some(now) = now {
            context.insert(NOW_VARIABLE.into(), now.into());
        }
        let template = self.env.get_template("chat_template").map_err(template_error)?;
        let mut out = CappedString::default();
        template.render_captured_to(&context, &mut out).map(drop).map_err(|e| {
            if out.overflowed {
                Error::Argument(format!("the chat template's output passed {MAX_OUTPUT_BYTES} bytes"))
            } else {
                template_error(e)
            }
        })?;
        Ok(out.text)
    }
}

/// transformers marks the assistant's text with `{% generation %}` ...
/// `{% endgeneration %}` (its AssistantTracker extension), which renders
/// its body unchanged; the tags become an always-true `if` block, so that
/// trim_blocks and lstrip_blocks treat them as the block tags they are.
fn without_generation_tags(source: &str) -> String {
    let re = regex::Regex::new(r"\{%(-?)\s*(end)?generation\s*(-?)%\}").expect("a valid pattern");
    re.replace_all(source, |c: &regex::Captures| {
        let body = if c.get(2).is_some() { "endif" } else { "if true" };
        format!("{{%{} {body} {}%}}", &c[1], &c[3])
    })
    .into_owned()
}

/// Python's str() as the `string` filter.
fn python_string(value: &Value) -> Value {
    let mut s = String::new();
    python_str(value, &mut s);
    Value::from(s)
}

/// jinja2's length: an undefined value has length 0.
fn length(value: &Value) -> std::result::Result<Value, minijinja::Error> {
    if value.is_undefined() {
        return Ok(Value::from(0));
    }
    match value.len() {
        Some(n) => Ok(Value::from(n)),
        None => Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("cannot calculate the length of a value of type {}", value.kind()),
        )),
    }
}

/// jinja2's indent filter, quirks included: a trailing newline is kept, and
/// blank lines are not indented unless `blank` is true.
fn indent(value: String, width: Option<Value>, kwargs: Kwargs) -> std::result::Result<String, minijinja::Error> {
    let first: Option<bool> = kwargs.get("first")?;
    let blank: Option<bool> = kwargs.get("blank")?;
    let width: Option<Value> = match width {
        Some(w) => Some(w),
        None => kwargs.get("width")?,
    };
    kwargs.assert_all_used()?;
    let indention = match &width {
        Some(w) => match w.as_str() {
            Some(s) => s.to_string(),
            None => " ".repeat(w.as_i64().unwrap_or(4).clamp(0, 1024) as usize),
        },
        None => "    ".to_string(),
    };
    let text = format!("{value}\n");
    // str.splitlines on the text with the newline added: no empty last line
    let lines: Vec<&str> = text.strip_suffix('\n').unwrap_or(&text).split('\n').collect();
    let mut out = if blank.unwrap_or(false) {
        lines.join(&format!("\n{indention}"))
    } else {
        let mut rv = lines[0].to_string();
        for line in &lines[1..] {
            rv.push('\n');
            if !line.is_empty() {
                rv.push_str(&indention);
            }
            rv.push_str(line);
        }
        rv
    };
    if first.unwrap_or(false) {
        out.insert_str(0, &indention);
    }
    Ok(out)
}

/// A render target that refuses to grow past MAX_OUTPUT_BYTES.
#[derive(Default)]
struct CappedString {
    text: String,
    overflowed: bool,
}

impl std::io::Write for CappedString {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.text.len() + buf.len() > MAX_OUTPUT_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other("output too large"));
        }
        // minijinja writes whole UTF-8 strings
        self.text.push_str(&String::from_utf8_lossy(buf));
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The template's own message for `raise_exception`, its line for the rest.
fn template_error(e: minijinja::Error) -> Error {
    if e.kind() == ErrorKind::InvalidOperation && e.name().is_some() && e.detail().is_some() {
        if let Some(message) = e.detail().and_then(|d| d.strip_prefix("raise_exception: ")) {
            return Error::Argument(format!("the chat template raised an exception: {message}"));
        }
    }
    let place = match (e.name(), e.line()) {
        (Some(_), Some(line)) => format!(" (line {line})"),
        _ => String::new(),
    };
    let what = match e.kind() {
        ErrorKind::OutOfFuel => "it ran too long (an endless or enormous loop?)".to_string(),
        _ => match e.detail() {
            Some(detail) => format!("{}: {detail}", e.kind()),
            None => e.kind().to_string(),
        },
    };
    Error::Argument(format!("chat template error{place}: {what}"))
}

fn raise_exception(message: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {message}")))
}

/// Python's str() of a value, as jinja2 prints it.
fn python_formatter(out: &mut Output, _state: &State, value: &Value) -> std::result::Result<(), minijinja::Error> {
    let mut text = String::new();
    python_str(value, &mut text);
    out.write_str(&text).map_err(|_| minijinja::Error::new(ErrorKind::WriteFailure, "write failed"))
}

fn python_str(value: &Value, out: &mut String) {
    match value.kind() {
        ValueKind::String => out.push_str(value.as_str().unwrap_or_default()),
        _ => python_repr(value, out),
    }
}

/// Python's repr() of a value (lists and dicts print their items this way).
fn python_repr(value: &Value, out: &mut String) {
    match value.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
            out.push(quote);
            for c in s.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c == quote => {
                        out.push('\\');
                        out.push(c);
                    }
                    c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                        let _ = write!(out, "\\x{:02x}", c as u32);
                    }
                    c => out.push(c),
                }
            }
            out.push(quote);
        }
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in value.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_repr(&item, out);
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter().into_iter().flatten().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                python_repr(&key, out);
                out.push_str(": ");
                python_repr(&value.get_item(&key).unwrap_or_default(), out);
            }
            out.push('}');
        }
        ValueKind::Number => match f64::try_from(value.clone()) {
            Ok(f) if value.as_i64().is_none() => out.push_str(&python_float(f)),
            _ => {
                let _ = write!(out, "{value}");
            }
        },
        _ => {
            let _ = write!(out, "{value}");
        }
    }
}

/// Python's repr of a float: shortest round-trip digits, always a point or
/// an exponent.
fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-4..1e16).contains(&abs) {
        // 1e+20, 1.5e-05
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').expect("{:e} has an exponent");
        let exp: i32 = exp.parse().expect("an integer exponent");
        return format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    let s = format!("{f}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

/// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent,
/// separators=separators, sort_keys=sort_keys).
fn tojson(value: &Value, kwargs: Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_i64() {
            Some(n) => Some(" ".repeat(n.clamp(0, 64) as usize)),
            None => Some(v.as_str().unwrap_or_default().to_string()),
        },
    };
    let (item_sep, key_sep) = match separators {
        Some(s) if !s.is_none() => {
            let parts: Vec<Value> = s.try_iter()?.collect();
            let text = |i: usize| parts.get(i).and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
            (text(0), text(1))
        }
        _ => (if indent.is_some() { "," } else { ", " }.to_string(), ": ".to_string()),
    };
    let style = JsonStyle {
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    let mut out = String::new();
    style.write(value, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

struct JsonStyle {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
}

impl JsonStyle {
    fn write(&self, value: &Value, depth: usize, out: &mut String) -> std::result::Result<(), minijinja::Error> {
        if depth > RECURSION_LIMIT {
            return Err(minijinja::Error::new(ErrorKind::InvalidOperation, "tojson: nested too deeply"));
        }
        match value.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => match value.as_i64() {
                Some(i) => {
                    let _ = write!(out, "{i}");
                }
                None => {
                    let f = f64::try_from(value.clone()).unwrap_or(f64::NAN);
                    out.push_str(&match python_float(f).as_str() {
                        "nan" => "NaN".to_string(),
                        "inf" => "Infinity".to_string(),
                        "-inf" => "-Infinity".to_string(),
                        other => other.to_string(),
                    });
                }
            },
            ValueKind::String => self.string(value.as_str().unwrap_or_default(), out),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.open_close(out, '[', ']', depth, items.len(), |i, out| self.write(&items[i], depth + 1, out))?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = value.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort();
                }
                self.open_close(out, '{', '}', depth, keys.len(), |i, out| {
                    let key = &keys[i];
                    match key.as_str() {
                        Some(k) => self.string(k, out),
                        None => self.string(&key.to_string(), out),
                    }
                    out.push_str(&self.key_sep);
                    self.write(&value.get_item(key)?, depth + 1, out)
                })?;
            }
            _ => self.string(&value.to_string(), out),
        }
        Ok(())
    }

    fn open_close(
        &self,
        out: &mut String,
        open: char,
        close: char,
        depth: usize,
        n: usize,
        mut item: impl FnMut(usize, &mut String) -> std::result::Result<(), minijinja::Error>,
    ) -> std::result::Result<(), minijinja::Error> {
        out.push(open);
        if n == 0 {
            out.push(close);
            return Ok(());
        }
        for i in 0..n {
            if i > 0 {
                out.push_str(&self.item_sep);
            }
            if let Some(indent) = &self.indent {
                out.push('\n');
                out.push_str(&indent.repeat(depth + 1));
            }
            item(i, out)?;
        }
        if let Some(indent) = &self.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth));
        }
        out.push(close);
        Ok(())
    }

    fn string(&self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && (c as u32) > 0x7e) => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{u:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// strftime_now(format): the current time (or the fixed one) in UTC,
/// formatted like Python's strftime for the common directives.
fn strftime_now(state: &State, format: String) -> std::result::Result<Value, minijinja::Error> {
    let now = match state.lookup(NOW_VARIABLE).and_then(|v| v.as_i64()) {
        Some(fixed) => fixed,
        None => {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
        }
    };
    Ok(Value::from(strftime(now, &format)))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// Formats `epoch` (seconds, UTC) with Python's strftime directives %Y %y
/// %m %d %e %B %b %A %a %H %I %M %S %p %j %Z %z %%; others are kept as written.
pub fn strftime(epoch: i64, format: &str) -> String {
    let days = epoch.div_euclid(86_400);
    let secs = epoch.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let day_of_year = days - days_from_civil(year, 1, 1) + 1;
    let (hour, minute, second) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let _ = match chars.next() {
            Some('Y') => write!(out, "{year}"),
            Some('y') => write!(out, "{:02}", year.rem_euclid(100)),
            Some('m') => write!(out, "{month:02}"),
            Some('d') => write!(out, "{day:02}"),
            Some('e') => write!(out, "{day:2}"),
            Some('B') => write!(out, "{}", MONTHS[month as usize - 1]),
            Some('b') | Some('h') => write!(out, "{}", &MONTHS[month as usize - 1][..3]),
            Some('A') => write!(out, "{}", DAYS[weekday]),
            Some('a') => write!(out, "{}", &DAYS[weekday][..3]),
            Some('H') => write!(out, "{hour:02}"),
            Some('I') => write!(out, "{:02}", if hour % 12 == 0 { 12 } else { hour % 12 }),
            Some('M') => write!(out, "{minute:02}"),
            Some('S') => write!(out, "{second:02}"),
            Some('p') => write!(out, "{}", if hour < 12 { "AM" } else { "PM" }),
            Some('j') => write!(out, "{day_of_year:03}"),
            Some('Z') => write!(out, "UTC"),
            Some('z') => write!(out, "+0000"),
            Some('%') => write!(out, "%"),
            Some(other) => write!(out, "%{other}"),
            None => write!(out, "%"),
        };
    }
    out
}

/// (year, month, day) of a day count since 1970-01-01 (proleptic Gregorian).
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + if month <= 2 { 1 } else { 0 };
    (year, month, day)
}

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(source: &str, messages: serde_json::Value, vars: serde_json::Value) -> Result<String> {
        let vars = vars.as_object().cloned().unwrap_or_default();
        ChatTemplate::new(source)?.render(&messages, &vars, Some(1_700_000_000))
    }

    #[test]
    fn chatml_with_trim_and_lstrip_blocks() {
        let t = "{% for m in messages %}\n  {{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' }}\n{% endfor %}\n{% if add_generation_prompt %}\n{{ '<|im_start|>assistant\\n' }}\n{% endif %}";
        let out = render(t, json!([{"role": "user", "content": "Hi"}]), json!({"add_generation_prompt": true}));
        // as jinja2 renders it: lstrip_blocks strips before {% only
        assert_eq!(out.unwrap(), "  <|im_start|>user\nHi<|im_end|>\n\n<|im_start|>assistant\n\n");
    }

    #[test]
    fn python_printing_and_methods() {
        let out = render(
            "{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'k': 1.5} }} {{ ' x '.strip() }} {{ 'a,b'.split(',') }}",
            json!([]),
            json!({}),
        );
        assert_eq!(out.unwrap(), "None True [1, 'a', None] {'k': 1.5} x ['a', 'b']");
    }

    #[test]
    fn tojson_as_python_json_dumps() {
        let out = render(
            "{{ x | tojson }}|{{ x | tojson(indent=2) }}",
            json!([]),
            json!({"x": {"b": [1, 2.5], "a": "é\"\n"}}),
        );
        assert_eq!(
            out.unwrap(),
            "{\"b\": [1, 2.5], \"a\": \"é\\\"\\n\"}|{\n  \"b\": [\n    1,\n    2.5\n  ],\n  \"a\": \"é\\\"\\n\"\n}"
        );
        let out = render(
            "{{ x | tojson(sort_keys=true, separators=(',', ':')) }}",
            json!([]),
            json!({"x": {"b": 1, "a": null}}),
        );
        assert_eq!(out.unwrap(), "{\"a\":null,\"b\":1}");
    }

    #[test]
    fn raise_exception_and_limits() {
        let e = render("{{ raise_exception('Only user and assistant roles!') }}", json!([]), json!({})).unwrap_err();
        assert_eq!(e.to_string(), "the chat template raised an exception: Only user and assistant roles!");
        let e = render("{% for i in range(100000000) %}x{% endfor %}", json!([]), json!({})).unwrap_err();
        assert!(e.to_string().contains("chat template error"), "{e}");
        let e = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", json!([]), json!({})).unwrap_err();
        assert!(e.to_string().contains("chat template error"), "{e}");
        let e = render("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}", json!([]), json!({}));
        assert!(e.unwrap_err().to_string().contains("output passed"));
        let e = ChatTemplate::new("{% for %}").err().unwrap();
        assert!(e.to_string().contains("line 1"), "{e}");
    }

    #[test]
    fn strftime_like_python() {
        // 2023-11-14 22:13:20 UTC, a Tuesday
        assert_eq!(
            strftime(1_700_000_000, "%d %B %Y, %A %H:%M:%S %j %b %a %y %I%p %%"),
            "14 November 2023, Tuesday 22:13:20 318 Nov Tue 23 10PM %"
        );
        assert_eq!(strftime(0, "%Y-%m-%d"), "1970-01-01");
        assert_eq!(strftime(951_782_400, "%Y-%m-%d"), "2000-02-29");
        let out = render("{{ strftime_now('%d %b %Y') }}", json!([]), json!({}));
        assert_eq!(out.unwrap(), "14 Nov 2023");
    }
}
