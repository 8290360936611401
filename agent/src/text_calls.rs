//! Tool calls a model wrote as text: finding them in a response that carries no structured
//! call, for models (small and local ones above all) that describe a call instead of making it.
//!
//! Sans-IO: [`find`] reads the response's text and the names of the tools offered, and returns
//! the calls it recognises. The agent decides what to do with them ([`ToolCallMode`]): run
//! them (`text`, `auto`) or tell the user about the setting (`native`).
//!
//! Recognised shapes, each holding one call or a JSON array of calls:
//! - a fenced block (```` ```json ````, ```` ```tool_call ````, bare ```` ``` ````…) whose body is a
//!   JSON call object;
//! - `<tool_call>{…}</tool_call>` (Qwen, Hermes), the closing tag optional at the very end;
//! - `<function=NAME>{…}</function>` (Llama 3.x) or
//!   `<function=NAME><parameter=KEY>VALUE</parameter>…</function>` (Qwen3-Coder);
//! - the whole response (after a short preamble) being a JSON call object.
//!
//! A JSON call object names the tool in `name` (or `tool`, or `function` as a string or an
//! object with `name`), and its arguments in `arguments`, `parameters`, `args` or `input` (an
//! object, or a string holding one). Only tools actually offered are accepted; the arguments
//! are not checked here but by the tool's schema when the call is dispatched, like any call.

use serde_json::{Map, Value};

pub use anvil_llm::config::ToolCallMode;

/// The `provider` of the [`anvil_llm::ProviderMeta`] a recovered call carries (no provider
/// reads it, so it never reaches the wire): its `data` is `{"recovered_from": FORMAT}`.
pub const RECOVERED_META: &str = "anvil";

/// The most text before a call that `auto` still treats as a preamble ("I'll create the
/// file:"), in characters.
pub const AUTO_PREAMBLE_CHARS: usize = 200;

/// How a call was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextCallFormat {
    /// A fenced code block.
    Fenced,
    /// `<tool_call>` tags.
    ToolCallTag,
    /// `<function=NAME>` tags.
    FunctionTag,
    /// The response itself is the JSON call.
    Bare,
}

impl TextCallFormat {
    /// The name recorded with a recovered call.
    pub fn name(self) -> &'static str {
        match self {
            TextCallFormat::Fenced => "fenced_json",
            TextCallFormat::ToolCallTag => "tool_call_tag",
            TextCallFormat::FunctionTag => "function_tag",
            TextCallFormat::Bare => "bare_json",
        }
    }
}

/// One call found in text.
#[derive(Debug, Clone, PartialEq)]
pub struct TextCall {
    pub name: String,
    pub arguments: Value,
    pub format: TextCallFormat,
}

/// What [`find`] saw in a response.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Found {
    /// The calls to offered tools, in the order written.
    pub calls: Vec<TextCall>,
    /// Whether the response is nothing but those calls, after at most a short preamble
    /// ([`AUTO_PREAMBLE_CHARS`]) and before trailing whitespace: what `auto` requires.
    pub whole: bool,
}

/// The calls to offered tools written in `text`. `offered` says whether a tool name is one the
/// model was given.
pub fn find(text: &str, offered: &dyn Fn(&str) -> bool) -> Found {
    let mut spans: Vec<(usize, usize, Vec<TextCall>)> = Vec::new();
    let mut rest = 0;
    while let Some((start, end, calls)) = next_span(text, rest, offered) {
        if !calls.is_empty() {
            spans.push((start, end, calls));
        }
        rest = end.max(start + 1);
        if rest >= text.len() {
            break;
        }
    }
    if spans.is_empty() {
        let trimmed = text.trim();
        if let Some(open) = trimmed.find(['{', '['])
            && let Ok(value) = serde_json::from_str::<Value>(&trimmed[open..])
        {
            let calls = calls_in(&value, TextCallFormat::Bare, offered);
            if !calls.is_empty() {
                let preamble = trimmed[..open].trim();
                return Found {
                    whole: preamble.chars().count() <= AUTO_PREAMBLE_CHARS,
                    calls,
                };
            }
        }
        return Found::default();
    }
    let first = spans[0].0;
    let last = spans[spans.len() - 1].1;
    let preamble = text[..first].trim();
    let between_is_blank = spans
        .windows(2)
        .all(|w| text[w[0].1..w[1].0].trim().is_empty());
    let whole = preamble.chars().count() <= AUTO_PREAMBLE_CHARS
        && between_is_blank
        && text[last..].trim().is_empty();
    Found {
        calls: spans.into_iter().flat_map(|(_, _, c)| c).collect(),
        whole,
    }
}

/// The next recognised span at or after `from`: its byte range and the offered calls in it
/// (empty when it held none, e.g. a fenced block of ordinary code).
fn next_span(
    text: &str,
    from: usize,
    offered: &dyn Fn(&str) -> bool,
) -> Option<(usize, usize, Vec<TextCall>)> {
    let hay = &text[from..];
    let candidates = [
        hay.find("```").map(|i| (i, Shape::Fence)),
        hay.find("<tool_call>").map(|i| (i, Shape::ToolCallTag)),
        hay.find("<function=").map(|i| (i, Shape::FunctionTag)),
    ];
    let (at, shape) = candidates.into_iter().flatten().min_by_key(|(i, _)| *i)?;
    let start = from + at;
    Some(match shape {
        Shape::Fence => fence(text, start, offered),
        Shape::ToolCallTag => tool_call_tag(text, start, offered),
        Shape::FunctionTag => function_tag(text, start, offered),
    })
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    Fence,
    ToolCallTag,
    FunctionTag,
}

/// A fenced block starting at `start`: ```` ```lang\nBODY\n``` ````. An unclosed fence runs to
/// the end of the text.
fn fence(
    text: &str,
    start: usize,
    offered: &dyn Fn(&str) -> bool,
) -> (usize, usize, Vec<TextCall>) {
    let after_ticks = start + 3;
    let line_end = text[after_ticks..]
        .find('\n')
        .map_or(text.len(), |i| after_ticks + i);
    let lang = text[after_ticks..line_end].trim().to_ascii_lowercase();
    let body_start = (line_end + 1).min(text.len());
    let (body_end, end) = match text[body_start..].find("```") {
        Some(i) => (body_start + i, body_start + i + 3),
        None => (text.len(), text.len()),
    };
    // A language tag that says "code in another language" is not a call, whatever it holds.
    let callish = matches!(
        lang.as_str(),
        "" | "json" | "jsonc" | "json5" | "tool_call" | "tool_code" | "tool" | "function"
    );
    let body = &text[body_start..body_end];
    let calls = if callish {
        json_calls(body, TextCallFormat::Fenced, offered)
    } else {
        Vec::new()
    };
    // ```{"name": …}``` on one line: the "language" is the JSON itself.
    let calls = if calls.is_empty() && lang.starts_with('{') {
        let inline_end = text[after_ticks..].find("```").map(|i| after_ticks + i);
        match inline_end {
            Some(e) => {
                let found = json_calls(&text[after_ticks..e], TextCallFormat::Fenced, offered);
                if !found.is_empty() {
                    return (start, e + 3, found);
                }
                Vec::new()
            }
            None => Vec::new(),
        }
    } else {
        calls
    };
    (start, end, calls)
}

/// `<tool_call>BODY</tool_call>` starting at `start`; BODY is JSON or a `<function=…>` call.
fn tool_call_tag(
    text: &str,
    start: usize,
    offered: &dyn Fn(&str) -> bool,
) -> (usize, usize, Vec<TextCall>) {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let body_start = start + OPEN.len();
    let (body_end, end) = match text[body_start..].find(CLOSE) {
        Some(i) => (body_start + i, body_start + i + CLOSE.len()),
        None => (text.len(), text.len()),
    };
    let body = &text[body_start..body_end];
    let calls = match body.find("<function=") {
        Some(i) if body[..i].trim().is_empty() => {
            let (_, _, calls) = function_tag(body, i, offered);
            calls
                .into_iter()
                .map(|c| TextCall {
                    format: TextCallFormat::ToolCallTag,
                    ..c
                })
                .collect()
        }
        _ => json_calls(body, TextCallFormat::ToolCallTag, offered),
    };
    (start, end, calls)
}

/// `<function=NAME>BODY</function>` starting at `start`; BODY is a JSON object of arguments or
/// `<parameter=KEY>VALUE</parameter>` tags.
fn function_tag(
    text: &str,
    start: usize,
    offered: &dyn Fn(&str) -> bool,
) -> (usize, usize, Vec<TextCall>) {
    const OPEN: &str = "<function=";
    const CLOSE: &str = "</function>";
    let name_start = start + OPEN.len();
    let Some(gt) = text[name_start..].find('>') else {
        return (start, text.len(), Vec::new());
    };
    let name = text[name_start..name_start + gt].trim().to_string();
    let body_start = name_start + gt + 1;
    let (body_end, end) = match text[body_start..].find(CLOSE) {
        Some(i) => (body_start + i, body_start + i + CLOSE.len()),
        None => (text.len(), text.len()),
    };
    if !offered(&name) {
        return (start, end, Vec::new());
    }
    let body = text[body_start..body_end].trim();
    let arguments = if body.contains("<parameter=") {
        Value::Object(parameter_tags(body))
    } else if body.is_empty() {
        Value::Object(Map::new())
    } else {
        match serde_json::from_str::<Value>(body) {
            Ok(v @ Value::Object(_)) => v,
            _ => return (start, end, Vec::new()),
        }
    };
    (
        start,
        end,
        vec![TextCall {
            name,
            arguments,
            format: TextCallFormat::FunctionTag,
        }],
    )
}

/// `<parameter=KEY>VALUE</parameter>` pairs. A value that parses as JSON other than a string
/// (a number, a list) keeps that type; anything else is the text itself, one leading and one
/// trailing newline removed.
fn parameter_tags(body: &str) -> Map<String, Value> {
    const OPEN: &str = "<parameter=";
    const CLOSE: &str = "</parameter>";
    let mut out = Map::new();
    let mut rest = body;
    while let Some(i) = rest.find(OPEN) {
        let after = &rest[i + OPEN.len()..];
        let Some(gt) = after.find('>') else { break };
        let key = after[..gt].trim().to_string();
        let value_text = &after[gt + 1..];
        let (raw, next) = match value_text.find(CLOSE) {
            Some(j) => (&value_text[..j], &value_text[j + CLOSE.len()..]),
            None => match value_text.find(OPEN) {
                Some(j) => (&value_text[..j], &value_text[j..]),
                None => (value_text, ""),
            },
        };
        let raw = raw.strip_prefix('\n').unwrap_or(raw);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        let value = match serde_json::from_str::<Value>(raw.trim()) {
            Ok(v) if !v.is_string() => v,
            _ => Value::String(raw.to_string()),
        };
        out.insert(key, value);
        rest = next;
    }
    out
}

/// The offered calls in a JSON text: one call object or an array of them.
fn json_calls(body: &str, format: TextCallFormat, offered: &dyn Fn(&str) -> bool) -> Vec<TextCall> {
    match serde_json::from_str::<Value>(body.trim()) {
        Ok(value) => calls_in(&value, format, offered),
        Err(_) => Vec::new(),
    }
}

fn calls_in(
    value: &Value,
    format: TextCallFormat,
    offered: &dyn Fn(&str) -> bool,
) -> Vec<TextCall> {
    match value {
        Value::Array(items) => {
            let calls: Vec<TextCall> = items
                .iter()
                .filter_map(|v| call(v, format, offered))
                .collect();
            // All or nothing: a list that is only partly calls is data, not calls.
            if calls.len() == items.len() {
                calls
            } else {
                Vec::new()
            }
        }
        v => call(v, format, offered).into_iter().collect(),
    }
}

/// One call object: a name of an offered tool and an object of arguments.
fn call(value: &Value, format: TextCallFormat, offered: &dyn Fn(&str) -> bool) -> Option<TextCall> {
    let object = value.as_object()?;
    // {"type": "function", "function": {"name": …, "arguments": …}}
    if let Some(inner @ Value::Object(f)) = object.get("function")
        && f.contains_key("name")
    {
        return call(inner, format, offered);
    }
    let name = ["name", "tool", "tool_name", "function"]
        .iter()
        .find_map(|k| object.get(*k).and_then(Value::as_str))?;
    if !offered(name) {
        return None;
    }
    let arguments = match ["arguments", "parameters", "args", "input"]
        .iter()
        .find_map(|k| object.get(*k))
    {
        None => Value::Object(Map::new()),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => return None,
        },
        Some(_) => return None,
    };
    Some(TextCall {
        name: name.to_string(),
        arguments,
        format,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn offered(name: &str) -> bool {
        matches!(name, "write_file" | "read_file" | "bash")
    }

    fn names(found: &Found) -> Vec<(&str, &'static str)> {
        found
            .calls
            .iter()
            .map(|c| (c.name.as_str(), c.format.name()))
            .collect()
    }

    #[test]
    fn a_fenced_json_call_with_arguments_or_parameters_is_found() {
        let text = "```json\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"hello.txt\", \"content\": \"hi\"}}\n```";
        let found = find(text, &offered);
        assert_eq!(names(&found), [("write_file", "fenced_json")]);
        assert_eq!(
            found.calls[0].arguments,
            json!({"path": "hello.txt", "content": "hi"})
        );
        assert!(found.whole);

        let text = "Sure.\n```\n{\"name\": \"bash\", \"parameters\": {\"command\": \"ls\"}}\n```\n";
        let found = find(text, &offered);
        assert_eq!(found.calls[0].arguments, json!({"command": "ls"}));
        assert!(
            found.whole,
            "a short preamble and trailing whitespace are allowed"
        );
    }

    #[test]
    fn arguments_written_as_a_json_string_are_read() {
        let text = r#"{"name": "bash", "arguments": "{\"command\": \"ls\"}"}"#;
        let found = find(text, &offered);
        assert_eq!(names(&found), [("bash", "bare_json")]);
        assert_eq!(found.calls[0].arguments, json!({"command": "ls"}));
    }

    #[test]
    fn the_openai_function_shape_and_arrays_of_calls_are_read() {
        let text = r#"```json
[{"type": "function", "function": {"name": "read_file", "arguments": {"path": "a"}}},
 {"name": "read_file", "arguments": {"path": "b"}}]
```"#;
        let found = find(text, &offered);
        assert_eq!(
            names(&found),
            [("read_file", "fenced_json"), ("read_file", "fenced_json")]
        );
        assert_eq!(found.calls[1].arguments, json!({"path": "b"}));
    }

    #[test]
    fn tool_call_tags_are_found_even_unclosed_at_the_end() {
        let text = "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"pwd\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"x\"}}";
        let found = find(text, &offered);
        assert_eq!(
            names(&found),
            [("bash", "tool_call_tag"), ("read_file", "tool_call_tag")]
        );
        assert!(found.whole);
    }

    #[test]
    fn function_tags_with_json_or_parameter_bodies_are_found() {
        let text = r#"<function=bash>{"command": "ls -la"}</function>"#;
        let found = find(text, &offered);
        assert_eq!(names(&found), [("bash", "function_tag")]);
        assert_eq!(found.calls[0].arguments, json!({"command": "ls -la"}));

        let text = "<tool_call>\n<function=write_file>\n<parameter=path>\nhello.txt\n</parameter>\n<parameter=content>\nhi\nthere\n</parameter>\n</function>\n</tool_call>";
        let found = find(text, &offered);
        assert_eq!(names(&found), [("write_file", "tool_call_tag")]);
        assert_eq!(
            found.calls[0].arguments,
            json!({"path": "hello.txt", "content": "hi\nthere"})
        );
    }

    #[test]
    fn only_offered_tools_are_accepted() {
        let text = "```json\n{\"name\": \"delete_everything\", \"arguments\": {}}\n```";
        assert_eq!(find(text, &offered), Found::default());
        let text = "<function=rm>{}</function>";
        assert!(find(text, &offered).calls.is_empty());
    }

    #[test]
    fn ordinary_code_and_data_are_not_calls() {
        for text in [
            "Here is the fix:\n```python\nprint({'name': 'bash', 'arguments': {}})\n```",
            "```json\n{\"name\": \"anvil\", \"version\": \"1.0\"}\n```",
            "```json\n[{\"name\": \"bash\", \"arguments\": {}}, {\"id\": 3}]\n```",
            "The answer is 42.",
            "```json\n{\"name\": \"bash\", \"arguments\": [1, 2]}\n```",
            "",
            "```",
            "<function=",
            "<tool_call>",
        ] {
            assert!(find(text, &offered).calls.is_empty(), "{text:?}");
        }
    }

    #[test]
    fn whole_is_false_when_prose_follows_or_the_preamble_is_long() {
        let call = "```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n```";
        let found = find(&format!("{call}\nThis lists the files."), &offered);
        assert_eq!(found.calls.len(), 1);
        assert!(!found.whole);
        let found = find(&format!("{}\n{call}", "word ".repeat(60)), &offered);
        assert!(!found.whole);
        let found = find(&format!("{call}\nand then\n{call}"), &offered);
        assert_eq!(found.calls.len(), 2);
        assert!(!found.whole);
    }

    #[test]
    fn a_one_line_fence_holding_the_call_is_read() {
        let text = "```{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}```";
        let found = find(text, &offered);
        assert_eq!(names(&found), [("bash", "fenced_json")]);
        assert!(found.whole);
    }

    #[test]
    fn multibyte_text_around_calls_never_splits_a_character() {
        let text =
            "é…日本語```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"ls\"}}\n```ü";
        let found = find(text, &offered);
        assert_eq!(found.calls.len(), 1);
        assert!(!found.whole);
    }
}
