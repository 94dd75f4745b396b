//! Tool calls in a reply, in the Hermes format Qwen2.5 (Coder) writes and
//! llama-server parses for it: `<tool_call>\n{"name": ..., "arguments":
//! {...}}\n</tool_call>`, one block per call, after any plain text.
use serde_json::{json, Value};

pub struct Parsed {
    /// The text before the first call (None when there is none: the
    /// message's content is then "", as llama-server writes it).
    pub content: Option<String>,
    /// OpenAI's `tool_calls`: arguments as JSON text.
    pub calls: Vec<Value>,
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// The calls in `text`, or None when it has none (or one that is not a JSON
/// object with a string `name`: the reply is then plain text).
pub fn parse(text: &str) -> Option<Parsed> {
    let start = text.find(OPEN)?;
    let mut calls = Vec::new();
    let mut rest = &text[start..];
    while let Some(body) = rest.trim_start().strip_prefix(OPEN) {
        // the last block may lack its closing tag (generation stopped at EOS)
        let (inside, after) = body.split_once(CLOSE).unwrap_or((body, ""));
        let call: Value = serde_json::from_str(inside.trim()).ok()?;
        let name = call.get("name")?.as_str()?;
        let arguments = call.get("arguments").cloned().unwrap_or_else(|| json!({}));
        let arguments = match arguments {
            Value::String(s) => s,
            other => other.to_string(),
        };
        calls.push(json!({
            "type": "function",
            "function": {"name": name, "arguments": arguments},
            "id": super::response::new_id("call"),
        }));
        rest = after;
    }
    let before = text[..start].trim();
    Some(Parsed { content: (!before.is_empty()).then(|| before.to_string()), calls })
}

/// How much of `text`, a reply still being generated, is content for
/// sure: the text before a tool call (or before what may begin one), with
/// its trailing whitespace held too, since a call's content is trimmed.
pub fn content_end(text: &str) -> usize {
    let before = match text.find(OPEN) {
        Some(start) => &text[..start],
        // a tail that may grow into the opening tag waits
        None => {
            let partial = (1..OPEN.len()).rev().find(|&n| text.ends_with(&OPEN[..n])).unwrap_or(0);
            &text[..text.len() - partial]
        }
    };
    before.trim_end().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hermes_blocks_become_tool_calls() {
        let text =
            "Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
        let parsed = parse(text).expect("a call");
        assert_eq!(parsed.content.as_deref(), Some("Let me look."));
        assert_eq!(parsed.calls.len(), 1);
        assert_eq!(parsed.calls[0]["function"]["name"], "weather");
        assert_eq!(parsed.calls[0]["function"]["arguments"], "{\"city\":\"Paris\"}");
    }

    #[test]
    fn content_ends_before_what_may_be_a_call() {
        assert_eq!(content_end("Hello there"), 11);
        assert_eq!(content_end("Hello \n"), 5);
        assert_eq!(content_end("Hello <tool"), 5);
        assert_eq!(content_end("Hello <toolbox"), 14);
        assert_eq!(content_end("Hi.\n<tool_call>\n{\"name\""), 3);
        assert_eq!(content_end("<tool_call>{}"), 0);
    }

    #[test]
    fn plain_text_and_broken_calls_are_no_calls() {
        assert!(parse("just text").is_none());
        assert!(parse("<tool_call>\n{not json}\n</tool_call>").is_none());
    }

    #[test]
    fn two_calls_and_a_missing_closing_tag() {
        let text = "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"b\"}";
        let parsed = parse(text).expect("calls");
        assert!(parsed.content.is_none());
        assert_eq!(parsed.calls.len(), 2);
        assert_eq!(parsed.calls[1]["function"]["arguments"], "{}");
    }
}
