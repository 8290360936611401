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

/// What the system prompt says, under `tool_calls = "text"`, about making a call: one form
/// (the `<tool_call>` tags chat templates of Qwen and Hermes models train on), one call per
/// answer, and the result arriving in the next message — small models otherwise write the
/// tool's schema, name a file as the tool, or narrate the call in prose. A small model copies
/// the example verbatim (one read `src/main.py`, a file its task did not have, 20 times), so
/// the example is a call worth copying in any workspace: it lists the workspace's files.
pub const INSTRUCTIONS: &str = "\
# Making tool calls
Call a tool by writing the call, and nothing else, in this form (this one lists the files of
the workspace):

<tool_call>
{\"name\": \"glob\", \"arguments\": {\"pattern\": \"**/*\"}}
</tool_call>

- `name` is one of the tools you were given, exactly as spelled; `arguments` holds that tool's
  parameters with their values (not their descriptions).
- Write one call, then stop: its result comes back in the next message.
- When the task is done, answer in plain text, without a call.
";

/// `system` with [`INSTRUCTIONS`] appended when `mode` is `text` (only then: under `native`
/// the provider's own tool-calling is what the model is told to use, and `auto` is for models
/// that mostly use it).
pub fn system_prompt(system: Option<&str>, mode: ToolCallMode) -> Option<String> {
    match mode {
        ToolCallMode::Native | ToolCallMode::Auto => system.map(str::to_owned),
        ToolCallMode::Text => Some(match system {
            Some(s) if !s.trim().is_empty() => format!("{}\n\n{INSTRUCTIONS}", s.trim_end()),
            _ => INSTRUCTIONS.to_owned(),
        }),
    }
}

/// What a tool result says, under `tool_calls = "text"`, when the step's calls are exactly the
/// previous step's: small models often repeat a call that already did its work (or failed
/// the same way) until the step limit, instead of answering.
pub const REPEATED_NOTE: &str = "[anvil] You made exactly this call in your previous step. Do \
not repeat it: if the task is done, answer in plain text without a call; otherwise make a \
different call.";

/// Appends [`REPEATED_NOTE`] to each tool result of a step (the call still ran: the note
/// informs, it never stands in for a result).
pub fn note_repeated(results: &mut [anvil_llm::ContentBlock]) {
    for block in results {
        if let anvil_llm::ContentBlock::ToolResult { content, .. } = block {
            content.push_str("\n\n");
            content.push_str(REPEATED_NOTE);
        }
    }
}

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
    /// The arguments came from `<parameter=KEY>` tags: every value is the text as written, to
    /// be typed by the tool's schema ([`type_by_schema`]).
    pub untyped: bool,
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

/// A recognised span of the text: its byte range, the offered calls in it (empty when it held
/// none, e.g. a fenced block of ordinary code), and whether it held nothing but them (no prose
/// inside a tag around or between the calls).
struct Span {
    start: usize,
    end: usize,
    calls: Vec<TextCall>,
    clean: bool,
}

/// The calls to offered tools written in `text`. `offered` says whether a tool name is one the
/// model was given. Linear in the text's length.
pub fn find(text: &str, offered: &dyn Fn(&str) -> bool) -> Found {
    scan(text, offered).0
}

/// [`find`], and how many bytes its marker searches read (what keeps it linear).
fn scan(text: &str, offered: &dyn Fn(&str) -> bool) -> (Found, usize) {
    let mut spans: Vec<Span> = Vec::new();
    let mut markers = Markers::new(text);
    let mut rest = 0;
    while rest < text.len() {
        let Some((at, shape)) = markers.next(rest) else {
            break;
        };
        let span = match shape {
            Shape::Fence => fence(text, at, offered),
            Shape::ToolCallTag => tool_call_tag(text, at, offered),
            Shape::FunctionTag => function_tag(text, at, offered),
        };
        rest = span.end.max(at + 1);
        if !span.calls.is_empty() {
            spans.push(span);
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
                let found = Found {
                    whole: preamble.chars().count() <= AUTO_PREAMBLE_CHARS,
                    calls,
                };
                return (found, markers.scanned);
            }
        }
        return (Found::default(), markers.scanned);
    }
    let first = spans[0].start;
    let last = spans[spans.len() - 1].end;
    let preamble = text[..first].trim();
    let between_is_blank = spans
        .windows(2)
        .all(|w| text[w[0].end..w[1].start].trim().is_empty());
    let whole = preamble.chars().count() <= AUTO_PREAMBLE_CHARS
        && between_is_blank
        && spans.iter().all(|s| s.clean)
        && text[last..].trim().is_empty();
    let found = Found {
        calls: spans.into_iter().flat_map(|s| s.calls).collect(),
        whole,
    };
    (found, markers.scanned)
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    Fence,
    ToolCallTag,
    FunctionTag,
}

/// Where each kind of span may start next. A position is searched for again only once the scan
/// has passed it, and a marker found nowhere further is never searched for again: the whole
/// scan reads the text a bounded number of times, however many spans it holds.
struct Markers<'a> {
    text: &'a str,
    /// Per shape: `Some(Some(i))` the next occurrence at or after the last search, `Some(None)`
    /// none left, `None` not searched yet.
    next: [Option<Option<usize>>; 3],
    /// Bytes the searches have read.
    scanned: usize,
}

impl<'a> Markers<'a> {
    const SHAPES: [(&'static str, Shape); 3] = [
        ("```", Shape::Fence),
        ("<tool_call>", Shape::ToolCallTag),
        ("<function=", Shape::FunctionTag),
    ];

    fn new(text: &'a str) -> Self {
        Self {
            text,
            next: [None; 3],
            scanned: 0,
        }
    }

    /// The first marker at or after `from`.
    fn next(&mut self, from: usize) -> Option<(usize, Shape)> {
        let mut best: Option<(usize, Shape)> = None;
        for (i, (marker, shape)) in Self::SHAPES.iter().enumerate() {
            let stale = match self.next[i] {
                None => true,
                Some(Some(at)) => at < from,
                Some(None) => false,
            };
            if stale {
                let found = self.text[from..].find(marker).map(|at| from + at);
                self.scanned += found.map_or(self.text.len(), |at| at + marker.len()) - from;
                self.next[i] = Some(found);
            }
            if let Some(Some(at)) = self.next[i]
                && best.is_none_or(|(b, _)| at < b)
            {
                best = Some((at, *shape));
            }
        }
        best
    }
}

/// A fenced block starting at `start`: ```` ```lang\nBODY\n``` ````. An unclosed fence runs to
/// the end of the text.
fn fence(text: &str, start: usize, offered: &dyn Fn(&str) -> bool) -> Span {
    let after_ticks = start + 3;
    let line_end = text[after_ticks..]
        .find('\n')
        .map_or(text.len(), |i| after_ticks + i);
    let lang = text[after_ticks..line_end].trim().to_ascii_lowercase();
    // ```{"name": …}``` on one line: the "language" is the JSON itself.
    if lang.starts_with('{')
        && let Some(e) = text[after_ticks..line_end].find("```")
    {
        let e = after_ticks + e;
        let calls = json_calls(&text[after_ticks..e], TextCallFormat::Fenced, offered);
        return Span {
            start,
            end: e + 3,
            calls,
            clean: true,
        };
    }
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
    let calls = if callish {
        json_calls(&text[body_start..body_end], TextCallFormat::Fenced, offered)
    } else {
        Vec::new()
    };
    Span {
        start,
        end,
        calls,
        clean: true,
    }
}

/// `<tool_call>BODY</tool_call>` starting at `start`; BODY is JSON or a `<function=…>` call.
fn tool_call_tag(text: &str, start: usize, offered: &dyn Fn(&str) -> bool) -> Span {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let body_start = start + OPEN.len();
    let (body_end, end) = match text[body_start..].find(CLOSE) {
        Some(i) => (body_start + i, body_start + i + CLOSE.len()),
        None => (text.len(), text.len()),
    };
    let body = &text[body_start..body_end];
    match body.find("<function=") {
        Some(i) if body[..i].trim().is_empty() => {
            let inner = function_tag(body, i, offered);
            let calls = inner
                .calls
                .into_iter()
                .map(|c| TextCall {
                    format: TextCallFormat::ToolCallTag,
                    ..c
                })
                .collect();
            Span {
                start,
                // Unclosed: the span ends where the function did; what follows is text.
                end: if body_end == text.len() {
                    body_start + inner.end
                } else {
                    end
                },
                calls,
                clean: inner.clean && body[inner.end..].trim().is_empty(),
            }
        }
        _ => Span {
            start,
            end,
            calls: json_calls(body, TextCallFormat::ToolCallTag, offered),
            clean: true,
        },
    }
}

/// `<function=NAME>BODY</function>` starting at `start`; BODY is a JSON object of arguments or
/// `<parameter=KEY>VALUE</parameter>` tags. Unclosed, it ends after its last parameter (or at
/// the end of the text): prose after it is text, not part of the call.
fn function_tag(text: &str, start: usize, offered: &dyn Fn(&str) -> bool) -> Span {
    const OPEN: &str = "<function=";
    const CLOSE: &str = "</function>";
    let name_start = start + OPEN.len();
    let nothing = |end| Span {
        start,
        end,
        calls: Vec::new(),
        clean: true,
    };
    let Some(gt) = text[name_start..].find('>') else {
        return nothing(text.len());
    };
    let name = text[name_start..name_start + gt].trim().to_string();
    let body_start = name_start + gt + 1;
    let closed = text[body_start..].find(CLOSE).map(|i| body_start + i);
    let body_end = closed.unwrap_or(text.len());
    let body = &text[body_start..body_end];
    let (arguments, untyped, used) = if body.contains("<parameter=") {
        let (map, used) = parameter_tags(body);
        (Value::Object(map), true, used)
    } else if body.trim().is_empty() {
        (Value::Object(Map::new()), false, 0)
    } else {
        match serde_json::from_str::<Value>(body) {
            Ok(v @ Value::Object(_)) => (v, false, body.len()),
            _ => return nothing(closed.map_or(text.len(), |c| c + CLOSE.len())),
        }
    };
    let (end, clean) = match closed {
        Some(c) => (c + CLOSE.len(), body[used..].trim().is_empty()),
        None => (body_start + used, true),
    };
    // Text between the parameters (not inside any) is prose in the call: not only a call.
    let clean = clean && (!untyped || only_parameters(&body[..used]));
    if !offered(&name) {
        return nothing(end);
    }
    Span {
        start,
        end,
        calls: vec![TextCall {
            name,
            arguments,
            format: TextCallFormat::FunctionTag,
            untyped,
        }],
        clean,
    }
}

/// `<parameter=KEY>VALUE</parameter>` pairs, each value the text as written (one leading and
/// one trailing newline removed), and how far into `body` the last one ended.
fn parameter_tags(body: &str) -> (Map<String, Value>, usize) {
    const OPEN: &str = "<parameter=";
    const CLOSE: &str = "</parameter>";
    let mut out = Map::new();
    let mut at = 0;
    let mut used = 0;
    // The next closing tag, searched for again only once passed, never again once none is
    // left: many unclosed parameters stay linear.
    let mut close: Option<Option<usize>> = None;
    while let Some(i) = body[at..].find(OPEN) {
        let after = at + i + OPEN.len();
        let Some(gt) = body[after..].find('>') else {
            break;
        };
        let key = body[after..after + gt].trim().to_string();
        let value_start = after + gt + 1;
        let stale = match close {
            None => true,
            Some(Some(c)) => c < value_start,
            Some(None) => false,
        };
        if stale {
            close = Some(body[value_start..].find(CLOSE).map(|j| value_start + j));
        }
        let (raw_end, next) = match close.flatten() {
            Some(c) => (c, c + CLOSE.len()),
            // Unclosed: the value runs to the next parameter, or to the end.
            None => match body[value_start..].find(OPEN) {
                Some(j) => (value_start + j, value_start + j),
                None => (body.len(), body.len()),
            },
        };
        let raw = &body[value_start..raw_end];
        let raw = raw.strip_prefix('\n').unwrap_or(raw);
        let raw = raw.strip_suffix('\n').unwrap_or(raw);
        out.insert(key, Value::String(raw.to_string()));
        at = next;
        used = next;
    }
    (out, used)
}

/// Whether `text` is parameter tags and whitespace only.
fn only_parameters(text: &str) -> bool {
    let mut rest = text;
    loop {
        let trimmed = rest.trim_start();
        if trimmed.is_empty() {
            return true;
        }
        if !trimmed.starts_with("<parameter=") {
            return false;
        }
        match trimmed.find("</parameter>") {
            Some(j) => rest = &trimmed[j + "</parameter>".len()..],
            None => return true,
        }
    }
}

/// Types the string values of arguments written as `<parameter=…>` tags by the tool's input
/// schema: a property the schema declares as a number, integer, boolean, array, object or
/// null takes the JSON value the text spells (when it spells one); every other value, and
/// every string property, stays the text as written — `{"a": 1}` written as a file's content
/// is that text, not an object.
pub fn type_by_schema(arguments: &mut Value, schema: &Value) {
    let (Some(args), Some(properties)) = (
        arguments.as_object_mut(),
        schema.get("properties").and_then(Value::as_object),
    ) else {
        return;
    };
    for (key, value) in args.iter_mut() {
        let Some(text) = value.as_str() else { continue };
        let types: Vec<&str> = match properties.get(key).and_then(|p| p.get("type")) {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => continue,
        };
        if types.contains(&"string") {
            continue;
        }
        if let Ok(typed) = serde_json::from_str::<Value>(text.trim()) {
            let fits = types.iter().any(|t| match *t {
                "integer" => typed.is_i64() || typed.is_u64(),
                "number" => typed.is_number(),
                "boolean" => typed.is_boolean(),
                "array" => typed.is_array(),
                "object" => typed.is_object(),
                "null" => typed.is_null(),
                _ => false,
            });
            if fits {
                *value = typed;
            }
        }
    }
}

/// JSON Schema's own words. A small model shown a tool's schema often copies some of them
/// into its arguments (`{"file_path": "a.txt", "content": "hi", "required": [...]}`).
const SCHEMA_KEYWORDS: &[&str] = &[
    "$schema",
    "additionalProperties",
    "description",
    "properties",
    "required",
    "title",
    "type",
];

/// Fits a recovered call's arguments to the tool's `schema`: typed by it when they came from
/// parameter tags ([`type_by_schema`]), and without the top-level keys that are JSON Schema
/// keywords the tool has no parameter for — copied from the schema, never meant as arguments.
/// Returns the keys dropped. Only a schema that lists its `properties` and refuses any other
/// (`additionalProperties: false`, as every native tool's does) has keys dropped: there a key
/// it does not list could only make the call fail, while a schema that takes other keys (an
/// MCP tool's, say) may mean them. Any other unknown key stays, for the schema check to refuse:
/// a misspelt parameter must not silently become a different call.
pub fn fit_to_schema(call: &mut TextCall, schema: &Value) -> Vec<String> {
    if call.untyped {
        type_by_schema(&mut call.arguments, schema);
    }
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
        return Vec::new();
    }
    let Some(args) = call.arguments.as_object_mut() else {
        return Vec::new();
    };
    let leaked: Vec<String> = args
        .keys()
        .filter(|k| SCHEMA_KEYWORDS.contains(&k.as_str()))
        .filter(|k| !properties.contains_key(k.as_str()))
        .cloned()
        .collect();
    for key in &leaked {
        args.remove(key);
    }
    leaked
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
        untyped: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_schema_keywords_the_tool_has_no_parameter_for_are_dropped() {
        let schema = json!({
            "type": "object",
            "properties": {"title": {"type": "string"}, "count": {"type": "integer"}},
            "required": ["title"],
            "additionalProperties": false,
        });
        let mut call = TextCall {
            name: "t".into(),
            arguments: json!({
                "title": "kept: a parameter of this tool",
                "count": "3",
                "required": ["title"],
                "type": "object",
                "titel": "kept: for the schema check to refuse",
            }),
            format: TextCallFormat::Fenced,
            untyped: true,
        };
        let mut dropped = fit_to_schema(&mut call, &schema);
        dropped.sort();
        assert_eq!(dropped, ["required", "type"]);
        assert_eq!(
            call.arguments,
            json!({
                "title": "kept: a parameter of this tool",
                "count": 3,
                "titel": "kept: for the schema check to refuse",
            })
        );
        // Arguments that are not an object are left to the schema check.
        call.arguments = json!("required");
        assert!(fit_to_schema(&mut call, &schema).is_empty());
        // A schema that takes other keys, or names none (`$ref`, `allOf`), may mean them.
        for open in [
            json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            json!({"allOf": [{"$ref": "#/$defs/args"}], "additionalProperties": false}),
        ] {
            call.arguments = json!({"q": "x", "type": "issue", "title": "t"});
            assert!(fit_to_schema(&mut call, &open).is_empty(), "{open}");
            assert_eq!(call.arguments.as_object().unwrap().len(), 3);
        }
    }

    #[test]
    fn text_mode_instructions_stand_alone_without_a_system_prompt() {
        assert_eq!(system_prompt(None, ToolCallMode::Native), None);
        assert_eq!(system_prompt(None, ToolCallMode::Auto), None);
        assert_eq!(
            system_prompt(None, ToolCallMode::Text).as_deref(),
            Some(INSTRUCTIONS)
        );
        assert_eq!(
            system_prompt(Some(" \n"), ToolCallMode::Text).as_deref(),
            Some(INSTRUCTIONS)
        );
        // The example in the instructions is itself a call `find` recognises.
        let found = find(INSTRUCTIONS, &|name| name == "glob");
        assert_eq!(found.calls.len(), 1);
        assert_eq!(found.calls[0].arguments, json!({"pattern": "**/*"}));
    }

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
        assert!(found.calls[0].untyped);
        assert!(found.whole);
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

    #[test]
    fn prose_after_an_unclosed_function_or_inside_a_closed_one_is_not_only_a_call() {
        let unclosed = format!(
            "<function=bash><parameter=command>touch x</parameter>\n\n{}",
            "Here is my full answer. ".repeat(10)
        );
        let found = find(&unclosed, &offered);
        assert_eq!(found.calls.len(), 1);
        assert!(!found.whole, "prose after the call");
        let inside = format!(
            "<tool_call><function=bash><parameter=command>touch x</parameter> {} </function></tool_call>",
            "words ".repeat(50)
        );
        let found = find(&inside, &offered);
        assert_eq!(found.calls.len(), 1);
        assert!(!found.whole, "prose inside the function");
        let between = "<function=bash><parameter=command>ls</parameter> and also <parameter=timeout_ms>5</parameter></function>";
        assert!(!find(between, &offered).whole);
        let clean = "<function=bash>\n<parameter=command>\nls\n</parameter>\n</function>\n";
        assert!(find(clean, &offered).whole);
    }

    #[test]
    fn parameter_values_are_typed_only_where_the_schema_says_so() {
        let schema = json!({"type": "object", "properties": {
            "file_path": {"type": "string"},
            "content": {"type": "string"},
            "timeout_ms": {"type": ["integer", "null"]},
            "replace_all": {"type": "boolean"},
            "lines": {"type": "array"}
        }});
        let mut args = json!({
            "file_path": "package.json",
            "content": "{\"name\": \"demo\"}",
            "timeout_ms": "5000",
            "replace_all": "true",
            "lines": "not a list",
            "unknown": "7"
        });
        type_by_schema(&mut args, &schema);
        assert_eq!(
            args,
            json!({
                "file_path": "package.json",
                "content": "{\"name\": \"demo\"}",
                "timeout_ms": 5000,
                "replace_all": true,
                "lines": "not a list",
                "unknown": "7"
            })
        );
    }

    #[test]
    fn a_flood_of_markers_is_scanned_in_linear_time() {
        // Each span used to search the rest of the text for every marker, including ones that
        // appear nowhere: quadratic (a 4 MB answer took minutes). Counted, not timed: the
        // marker searches read each byte a bounded number of times.
        for text in [
            "```\n```\n".repeat(50_000),
            "<tool_call></tool_call>".repeat(20_000),
            "<function=x></function>".repeat(20_000),
            "```\n{}\n```\n<tool_call>{}</tool_call>".repeat(10_000),
        ] {
            let (found, scanned) = scan(&text, &offered);
            assert!(found.calls.is_empty());
            assert!(
                scanned <= 4 * text.len(),
                "{scanned} bytes read for {}",
                text.len()
            );
        }
    }
}
