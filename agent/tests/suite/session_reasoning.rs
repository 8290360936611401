//! Reasoning state through the session store (issue 15, "the session store"): real recorded
//! streams (llm/tests/fixtures, never edited) decoded into assistant messages, appended to a
//! session file, and read back. The signatures Anthropic puts on thinking (and its redacted
//! thinking blobs) and the thought signatures Gemini puts on parts must come back byte for
//! byte and in order, since the provider refuses — or silently loses the reasoning of — a
//! conversation whose signatures changed; and the next request built from the reloaded
//! transcript must carry them exactly as recorded.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::sync::Arc;

use anvil_agent::secrets::Redactor;
use anvil_agent::session::{Entry, Record, SessionStore, load};
use anvil_llm::capability::Capabilities;
use anvil_llm::providers::{anthropic, gemini};
use anvil_llm::replay::replay_body;
use anvil_llm::{ChatRequest, ContentBlock, Message, Protocol, Role, Tail, validate_transcript};
use anvil_test_support::fixtures::fixture;
use serde_json::Value;

/// One step of a kept session.
enum Step {
    /// A user prompt.
    User(&'static str),
    /// A recorded response (`llm/tests/fixtures/<rel>`), decoded the way a live stream is.
    Reply(&'static str),
    /// A user message answering every call of the message before it with this text.
    Results(&'static str),
}

/// A session file written from `steps`, and the messages that went into it.
struct Kept {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    id: String,
    cwd: std::path::PathBuf,
    messages: Vec<Message>,
}

/// Writes `steps` to a new session through `SessionWriter`: each message as
/// `message_appended`, each response's usage as `usage`, as the agent does.
fn keep(protocol: Protocol, steps: Vec<Step>) -> Kept {
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("project");
    std::fs::create_dir(&cwd).unwrap();
    let store = SessionStore::new(dir.path().join("sessions"));
    // Known secrets, as the binary has whenever an API key is in its environment: the records
    // go through redaction (none of these values occurs in them).
    let redactor = Redactor::from_vars([(
        "ANTHROPIC_API_KEY".to_string(),
        "sk-ant-not-in-any-record-0123456789".to_string(),
    )]);
    let (mut writer, _) = store
        .create(&cwd, "recorded", Some(Arc::new(redactor)))
        .unwrap();
    let mut messages = Vec::new();
    for step in steps {
        let message = match step {
            Step::User(text) => Message::user_text(text),
            Step::Results(text) => {
                let last: &Message = messages.last().unwrap();
                let results = last
                    .tool_calls()
                    .map(|c| ContentBlock::tool_result(c.id, text, false))
                    .collect();
                Message::new(Role::User, results)
            }
            Step::Reply(rel) => {
                let completion = replay_body(protocol, &fixture(rel)).unwrap();
                writer
                    .append(&Record::Usage {
                        usage: completion.usage,
                        cost_usd: None,
                        estimated: false,
                    })
                    .unwrap();
                completion.message
            }
        };
        writer
            .append(&Record::MessageAppended {
                message: message.clone(),
            })
            .unwrap();
        messages.push(message);
    }
    Kept {
        path: writer.path().to_path_buf(),
        id: writer.id().to_string(),
        _dir: dir,
        cwd,
        messages,
    }
}

impl Kept {
    /// The file, with what differs between runs replaced: the session id, the directory, the
    /// times, anvil's version, and the call ids a decoder mints (`extra`).
    fn redacted_jsonl(&self, extra: &[(&str, &str)]) -> String {
        let text = std::fs::read_to_string(&self.path).unwrap();
        let ts = regex::Regex::new(r#""ts_ms":\d+"#).unwrap();
        let mut text = ts.replace_all(&text, r#""ts_ms":"[ts]""#).into_owned();
        for (from, to) in [
            (self.id.as_str(), "[session-id]"),
            (&self.cwd.display().to_string(), "[cwd]"),
            (env!("CARGO_PKG_VERSION"), "[version]"),
        ]
        .into_iter()
        .chain(extra.iter().copied())
        {
            text = text.replace(&format!("\"{from}\""), &format!("\"{to}\""));
        }
        text
    }

    /// Loads the file back and checks what every reasoning round trip must hold: the reloaded
    /// context is exactly the one written (reasoning and its meta included), and every line
    /// re-serializes to the very bytes on disk.
    fn reload(&self) -> Vec<Message> {
        let loaded = load(&self.path).unwrap();
        assert_eq!(loaded.torn_bytes, 0);
        assert_eq!(loaded.messages, self.messages);
        validate_transcript(&loaded.messages, Tail::Complete).unwrap();
        let bytes = std::fs::read(&self.path).unwrap();
        let mut lines = 0;
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let entry: Entry = serde_json::from_slice(line).unwrap();
            let again = serde_json::to_vec(&entry).unwrap();
            assert!(
                again == line,
                "a record did not re-serialize to its bytes:\n  on disk: {}\n  again:   {}",
                String::from_utf8_lossy(line),
                String::from_utf8_lossy(&again)
            );
            lines += 1;
        }
        assert_eq!(lines, loaded.records);
        loaded.messages
    }
}

/// Every JSON payload of a recorded SSE body, in order (parsed from the bytes, not through
/// the decoder under test).
fn payloads(rel: &str) -> Vec<Value> {
    let body = String::from_utf8(fixture(rel)).unwrap();
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

/// The opaque reasoning state Anthropic sent, in order: each `signature_delta`'s signature and
/// each `redacted_thinking` block's data.
fn anthropic_recorded(rel: &str) -> Vec<(&'static str, String)> {
    payloads(rel)
        .iter()
        .filter_map(|p| {
            if p["delta"]["type"] == "signature_delta" {
                return Some(("signature", p["delta"]["signature"].as_str()?.to_string()));
            }
            if p["content_block"]["type"] == "redacted_thinking" {
                return Some(("data", p["content_block"]["data"].as_str()?.to_string()));
            }
            None
        })
        .collect()
}

/// Every `thoughtSignature` Gemini sent on a part, in order.
fn gemini_recorded(rel: &str) -> Vec<String> {
    payloads(rel)
        .iter()
        .flat_map(|p| p["candidates"][0]["content"]["parts"].as_array().cloned())
        .flatten()
        .filter_map(|part| part["thoughtSignature"].as_str().map(str::to_string))
        .collect()
}

/// The next request after `messages`: one more user prompt.
fn next_request(messages: Vec<Message>) -> ChatRequest {
    let mut messages = messages;
    messages.push(Message::user_text("Go on."));
    ChatRequest {
        model: "recorded".into(),
        messages,
        max_tokens: 1_024,
        cache: false,
        ..ChatRequest::default()
    }
}

/// Every string in `wire` under `key`, depth first in document order.
fn strings_under(wire: &Value, key: &str, out: &mut Vec<String>) {
    match wire {
        Value::Object(map) => {
            for (k, v) in map {
                match v {
                    Value::String(s) if k == key => out.push(s.clone()),
                    _ => strings_under(v, key, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| strings_under(v, key, out)),
        _ => {}
    }
}

#[test]
fn an_anthropic_session_keeps_thinking_signatures_and_redacted_thinking_byte_for_byte() {
    const THINKING: &str = "anthropic/04-thinking-signature.sse";
    const REDACTED: &str = "anthropic/08-redacted-thinking.sse";
    let kept = keep(
        Protocol::Anthropic,
        vec![
            Step::User("Two names for a pet pelican, briefly."),
            Step::Reply(THINKING),
            Step::User("Thanks. Now this one."),
            Step::Reply(REDACTED),
        ],
    );
    // The decoded replies carry the reasoning this test is about (else it would prove nothing).
    let reasoning: Vec<(&str, usize)> = kept
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::Reasoning { meta: Some(m), .. } => Some((
                m.provider.as_str(),
                m.data.as_object().map_or(0, |o| o.len()),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasoning,
        [("anthropic", 1), ("anthropic", 1), ("anthropic", 1)]
    );

    let jsonl = kept.redacted_jsonl(&[]);
    let recorded: Vec<(&str, String)> = anthropic_recorded(THINKING)
        .into_iter()
        .chain(anthropic_recorded(REDACTED))
        .collect();
    assert_eq!(recorded.len(), 3);
    for (_, value) in &recorded {
        assert!(
            jsonl.contains(&format!("\"{value}\"")),
            "{value} not on disk"
        );
    }
    insta::assert_snapshot!(jsonl);

    let reloaded = kept.reload();
    let wire = anthropic::to_wire(
        &next_request(reloaded.clone()),
        &Capabilities::of(Protocol::Anthropic),
    );
    // Exactly the recorded blobs, in the recorded order, on the blocks Anthropic expects.
    let mut sent = Vec::new();
    for message in wire["messages"].as_array().unwrap() {
        for block in message["content"].as_array().unwrap() {
            match block["type"].as_str().unwrap() {
                "thinking" => sent.push(("signature", block["signature"].clone())),
                "redacted_thinking" => sent.push(("data", block["data"].clone())),
                _ => {}
            }
        }
    }
    let recorded: Vec<(&str, Value)> = recorded
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    assert_eq!(sent, recorded);
    // The thinking text goes back with its signature, as it was streamed.
    let first_reply = &wire["messages"][1]["content"][0];
    assert_eq!(first_reply["type"], "thinking");
    assert!(
        first_reply["thinking"]
            .as_str()
            .unwrap()
            .starts_with("The user wants two names for a pet pelican")
    );
    // And the request is the one the messages as first decoded would have made.
    assert_eq!(
        wire,
        anthropic::to_wire(
            &next_request(kept.messages.clone()),
            &Capabilities::of(Protocol::Anthropic)
        )
    );
}

#[test]
fn a_gemini_session_keeps_thought_signatures_on_calls_and_text_byte_for_byte() {
    // Two recordings from different conversations, stitched into one transcript: a function
    // call signed by gemini-3-pro, its result, then a signed text answer from gemini-2.5-pro.
    // The store neither knows nor cares; the signatures must survive either way.
    const CALL: &str = "gemini/03-function-call-thought-signature.sse";
    const TEXT: &str = "gemini/04-thinking-thought-true.sse";
    let kept = keep(
        Protocol::Gemini,
        vec![
            Step::User("Which country am I in?"),
            Step::Reply(CALL),
            Step::Results("France"),
            Step::Reply(TEXT),
        ],
    );
    // The decoded replies carry the signatures this test is about: one on the call, one on the
    // answer's text (an empty reasoning block right after it).
    let call = &kept.messages[1];
    let ContentBlock::ToolCall {
        id: call_id,
        meta: Some(call_meta),
        ..
    } = &call.content[0]
    else {
        panic!("{call:?}")
    };
    assert_eq!(call_meta.provider, "gemini");
    assert!(
        kept.messages[3].content.iter().any(
            |b| matches!(b, ContentBlock::Reasoning { text, meta: Some(_) } if text.is_empty())
        )
    );

    // Gemini sends no call id: the decoder mints one per replay, so it is redacted.
    let jsonl = kept.redacted_jsonl(&[(call_id.as_str(), "[call-id]")]);
    let recorded: Vec<String> = gemini_recorded(CALL)
        .into_iter()
        .chain(gemini_recorded(TEXT))
        .collect();
    assert_eq!(recorded.len(), 2);
    for value in &recorded {
        assert!(
            jsonl.contains(&format!("\"{value}\"")),
            "{value} not on disk"
        );
    }
    insta::assert_snapshot!(jsonl);

    let reloaded = kept.reload();
    let wire = gemini::to_wire(
        &next_request(reloaded.clone()),
        &Capabilities::of(Protocol::Gemini),
    )
    .unwrap();
    // Exactly the recorded signatures, in the recorded order...
    let mut sent = Vec::new();
    strings_under(&wire, "thoughtSignature", &mut sent);
    assert_eq!(sent, recorded);
    // ...each on the part it came with: the function call, and the answer's first text part.
    assert_eq!(
        wire["contents"][1]["parts"][0]["thoughtSignature"],
        Value::String(recorded[0].clone())
    );
    assert_eq!(
        wire["contents"][1]["parts"][0]["functionCall"]["name"],
        "get_country"
    );
    let answer = &wire["contents"][3]["parts"][0];
    assert_eq!(
        answer["thoughtSignature"],
        Value::String(recorded[1].clone())
    );
    assert!(
        answer["text"]
            .as_str()
            .unwrap()
            .starts_with("This is a great question!")
    );
    assert_eq!(
        wire,
        gemini::to_wire(
            &next_request(kept.messages.clone()),
            &Capabilities::of(Protocol::Gemini)
        )
        .unwrap()
    );
}
