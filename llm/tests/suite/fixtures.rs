//! Every recorded stream in llm/tests/fixtures/ replays through SseDecoder → StreamState →
//! MessageBuilder to the canonical result the recording shows, and the follow-up request puts
//! provider state (signatures, encrypted reasoning) back where it came from.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use anvil_test_support::fixtures as support;

use anvil_llm::capability::Capabilities;
use anvil_llm::providers::{gemini, openai_responses};
use anvil_llm::replay::{replay_body, replay_chunks};
use anvil_llm::{
    ChatRequest, Completion, ContentBlock, FinishReason, LlmError, Message, Protocol, Role, Tail,
    Usage, validate_transcript,
};
use serde_json::{Value, json};

/// What a fixture must produce.
enum Expect {
    Done {
        /// The text, or its start and end when it is long.
        text: Text,
        reasoning: &'static [Reasoning],
        calls: &'static [(&'static str, &'static str, &'static str)],
        finish: FinishReason,
        usage: Usage,
    },
    ApiError {
        kind: &'static str,
        message: &'static str,
    },
}

enum Text {
    Exact(&'static str),
    Bounds {
        starts: &'static str,
        ends: &'static str,
        chars: usize,
    },
}

/// (text starts with, meta key that must be present)
struct Reasoning(&'static str, Option<&'static str>);

/// An id the adapter synthesized (the wire had none): checked for shape and uniqueness.
const SYNTH: &str = "<synthesized>";

fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Usage {
    Usage {
        input,
        output,
        cache_read,
        cache_write,
    }
}

fn expectation(dir: &str, file: &str) -> Option<(Protocol, Expect)> {
    use Expect::*;
    use FinishReason::*;
    let e = match (dir, file) {
        ("anthropic", "01-text.sse") => Done {
            text: Text::Exact("Hello"),
            reasoning: &[],
            calls: &[],
            finish: EndTurn,
            usage: usage(10, 4, 0, 0),
        },
        ("anthropic", "02-tool-single.sse") => Done {
            text: Text::Exact(""),
            reasoning: &[],
            calls: &[(
                "toolu_01CzN6riCPqw4pVSuTd9Dwn7",
                "pelican_name_generator",
                "{}",
            )],
            finish: ToolUse,
            usage: usage(543, 40, 0, 0),
        },
        ("anthropic", "03-tool-parallel.sse") => Done {
            text: Text::Exact(""),
            reasoning: &[],
            calls: &[
                (
                    "toolu_01LtHJmixrs9NcWQkK8hu8hj",
                    "pelican_name_generator",
                    "{}",
                ),
                (
                    "toolu_01N8a4jWyf116qKTMqKKmjyt",
                    "pelican_name_generator",
                    "{}",
                ),
            ],
            finish: ToolUse,
            usage: usage(542, 62, 0, 0),
        },
        ("anthropic", "04-thinking-signature.sse") => Done {
            text: Text::Exact(
                "1. **Pouch** - references their iconic bill pouch\n2. **Pelé** - playful take on \"pelican\"",
            ),
            reasoning: &[Reasoning(
                "The user wants two names for a pet pelican",
                Some("signature"),
            )],
            calls: &[],
            finish: EndTurn,
            usage: usage(46, 133, 0, 0),
        },
        ("anthropic", "07-cache-tokens.sse") => Done {
            text: Text::Exact("Hello! 👋"),
            reasoning: &[],
            calls: &[],
            finish: EndTurn,
            usage: usage(181, 8, 55096, 0),
        },
        ("anthropic", "08-redacted-thinking.sse") => Done {
            text: Text::Bounds {
                starts: "I notice that you've sent what appears to be some kind of test string",
                ends: "How can I assist you today with a legitimate task or question?",
                chars: 359,
            },
            reasoning: &[
                Reasoning("", Some("redacted_data")),
                Reasoning("", Some("redacted_data")),
            ],
            calls: &[],
            finish: EndTurn,
            usage: usage(92, 189, 0, 0),
        },
        ("anthropic", "10-thinking-cleared-reframed.sse") => Done {
            text: Text::Exact("925 ÷ 5 = 185"),
            reasoning: &[Reasoning("The previous result was 925.", Some("signature"))],
            calls: &[],
            finish: EndTurn,
            usage: usage(69, 53, 0, 0),
        },
        ("openai-chat", "01-text-usage.sse") => Done {
            text: Text::Exact("The capital of Mexico is Mexico City."),
            reasoning: &[],
            calls: &[],
            finish: EndTurn,
            usage: usage(14, 8, 0, 0),
        },
        ("openai-chat", "02-tool-single.sse") => Done {
            text: Text::Exact(""),
            reasoning: &[],
            calls: &[(
                "call_ZR5UUuTt3pf61kjwAJIYdVMj",
                "get_capital",
                r#"{"country":"UK"}"#,
            )],
            finish: ToolUse,
            usage: usage(53, 15, 0, 0),
        },
        ("openai-chat", "03-tool-parallel.sse") => Done {
            text: Text::Exact(""),
            reasoning: &[],
            calls: &[
                ("call_3rqTYrA6H21AYUaRGP4F66oq", "get_country", "{}"),
                ("call_Xw9XMKBJU48kAAd78WgIswDx", "get_product_name", "{}"),
            ],
            finish: ToolUse,
            usage: usage(364, 40, 0, 0),
        },
        ("openai-chat", "05-tool-then-text.sse") => Done {
            text: Text::Exact(""),
            reasoning: &[],
            calls: &[(
                "call_1EYWDzueHEp8OsB8jJSEp7WB",
                "multiply",
                r#"{"a":1231,"b":2331}"#,
            )],
            finish: ToolUse,
            usage: usage(54, 20, 0, 0),
        },
        ("openai-chat", "07-compat-openrouter-length-error.sse") => ApiError {
            kind: "400",
            message: "Token limit reached",
        },
        ("openai-chat", "09-text-long-reframed.sse") => Done {
            text: Text::Bounds {
                starts: "**Holiday Name:** Harmony Day",
                ends: "shared human experiences and mutual respect.",
                chars: 1724,
            },
            reasoning: &[],
            calls: &[],
            finish: EndTurn,
            usage: usage(16, 300, 0, 0),
        },
        ("ollama", "01-text-qwen-coder.sse") => Done {
            text: Text::Bounds {
                starts: "Higress 是一个基于 Istio 的高性能服务网格数据平面项目",
                ends: "满足高并发场景下的需求。",
                chars: 176,
            },
            reasoning: &[],
            calls: &[],
            finish: EndTurn,
            usage: usage(372, 9, 0, 0),
        },
        ("gemini", "01-text.sse") => Done {
            text: Text::Exact("The capital of France is Paris.\n"),
            reasoning: &[],
            calls: &[],
            finish: EndTurn,
            usage: usage(13, 8, 0, 0),
        },
        ("gemini", "02-function-call.sse") => Done {
            text: Text::Exact(""),
            reasoning: &[],
            calls: &[(SYNTH, "get_capital", r#"{"country":"France"}"#)],
            finish: ToolUse,
            usage: usage(52, 5, 0, 0),
        },
        ("gemini", "03-function-call-thought-signature.sse") => Done {
            text: Text::Exact(""),
            reasoning: &[],
            calls: &[(SYNTH, "get_country", "{}")],
            finish: ToolUse,
            // 10 candidate tokens + 202 thought tokens.
            usage: usage(29, 212, 0, 0),
        },
        ("gemini", "04-thinking-thought-true.sse") => Done {
            text: Text::Bounds {
                starts: "This is a great question! Safely crossing the street",
                ends: "",
                chars: 1938,
            },
            reasoning: &[
                Reasoning("**Clarifying User Goals**", None),
                Reasoning("", Some("thoughtSignature")),
            ],
            calls: &[],
            finish: EndTurn,
            usage: usage(34, 1256, 0, 0),
        },
        ("gemini", "08-vertex-streaming-function-args-reframed.sse") => Done {
            text: Text::Exact(""),
            reasoning: &[],
            calls: &[
                (SYNTH, "getWeather", r#"{"location":"Boston"}"#),
                (SYNTH, "getWeather", r#"{"location":"San Francisco"}"#),
            ],
            finish: ToolUse,
            usage: usage(26, 155, 0, 0),
        },
        ("gemini", "10-safety-block-SANITIZED.sse") => Done {
            text: Text::Exact("lorem ipsumlorem ipsum lorem ipsum"),
            reasoning: &[],
            calls: &[],
            finish: Refusal,
            usage: usage(0, 0, 0, 0),
        },
        ("openai-responses", "01-text.sse") => Done {
            text: Text::Exact("The capital of France is Paris."),
            reasoning: &[],
            calls: &[],
            finish: EndTurn,
            usage: usage(278, 9, 0, 0),
        },
        ("openai-responses", "02-function-call.sse") => Done {
            text: Text::Exact(""),
            reasoning: &[],
            calls: &[(
                "call_kL0PCQV7M2WMoVX8V8OtYSAL",
                "get_capital",
                r#"{"country":"France"}"#,
            )],
            finish: ToolUse,
            usage: usage(255, 16, 0, 0),
        },
        ("openai-responses", "03-reasoning-encrypted-function-call.sse") => Done {
            text: Text::Exact(""),
            reasoning: &[Reasoning("", Some("encrypted_content"))],
            calls: &[(
                "call_CWXgs68YprAjp6t0371hiPOI",
                "final_result",
                r#"{"result":6666}"#,
            )],
            finish: ToolUse,
            usage: usage(53, 469, 0, 0),
        },
        ("openai-responses", "05-cached-tokens-web-search.sse") => Done {
            text: Text::Bounds {
                starts: "San Francisco weather today (Tuesday, September 16, 2025)",
                ends: "",
                chars: 0,
            },
            reasoning: &[
                Reasoning("", Some("encrypted_content")),
                Reasoning("", Some("encrypted_content")),
            ],
            calls: &[],
            finish: EndTurn,
            // 9463 input tokens of which 8320 were read from cache.
            usage: usage(1143, 582, 8320, 0),
        },
        ("openai-responses", "09-error-failed-reframed.sse") => ApiError {
            kind: "insufficient_quota",
            message: "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
        },
        _ => return None,
    };
    let protocol = match dir {
        "anthropic" => Protocol::Anthropic,
        "gemini" => Protocol::Gemini,
        "openai-responses" => Protocol::OpenaiResponses,
        _ => Protocol::OpenaiChat,
    };
    Some((protocol, e))
}

fn check(dir: &str, file: &str, result: Result<Completion, LlmError>, expect: &Expect) {
    let at = format!("{dir}/{file}");
    match expect {
        Expect::ApiError { kind, message } => match result {
            Err(LlmError::Api {
                kind: k,
                message: m,
            }) => {
                assert_eq!((k.as_str(), m.as_str()), (*kind, *message), "{at}");
            }
            other => panic!("{at}: expected an Api error, got {other:?}"),
        },
        Expect::Done {
            text,
            reasoning,
            calls,
            finish,
            usage,
        } => {
            let c = result.unwrap_or_else(|e| panic!("{at}: {e}"));
            let got = c.message.text();
            match text {
                Text::Exact(t) => assert_eq!(got, *t, "{at}: text"),
                Text::Bounds {
                    starts,
                    ends,
                    chars,
                } => {
                    assert!(got.starts_with(starts), "{at}: text starts {got:?}");
                    assert!(got.ends_with(ends), "{at}: text ends {got:?}");
                    if *chars > 0 {
                        assert_eq!(got.chars().count(), *chars, "{at}");
                    }
                }
            }
            let got_reasoning: Vec<(&str, Option<&Value>)> = c
                .message
                .content
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Reasoning { text, meta } => {
                        Some((text.as_str(), meta.as_ref().map(|m| &m.data)))
                    }
                    _ => None,
                })
                .collect();
            assert_eq!(
                got_reasoning.len(),
                reasoning.len(),
                "{at}: reasoning blocks"
            );
            for ((got_text, got_meta), Reasoning(starts, key)) in
                got_reasoning.iter().zip(*reasoning)
            {
                assert!(got_text.starts_with(starts), "{at}: reasoning {got_text:?}");
                if let Some(key) = key {
                    let value = got_meta.and_then(|m| m.get(*key)).and_then(Value::as_str);
                    assert!(
                        value.is_some_and(|v| v.len() > 20),
                        "{at}: reasoning meta {key}"
                    );
                }
            }
            let got_calls: Vec<(String, String, Value)> = c
                .message
                .tool_calls()
                .map(|t| (t.id.to_string(), t.name.to_string(), t.arguments.clone()))
                .collect();
            assert_eq!(got_calls.len(), calls.len(), "{at}: number of tool calls");
            let mut synthesized = std::collections::HashSet::new();
            let want_calls: Vec<(String, String, Value)> = calls
                .iter()
                .zip(&got_calls)
                .map(|((id, name, args), (got_id, _, _))| {
                    let id = if *id == SYNTH {
                        assert!(
                            got_id.starts_with("call_") && got_id.len() > 20,
                            "{at}: {got_id}"
                        );
                        assert!(
                            synthesized.insert(got_id.clone()),
                            "{at}: duplicate id {got_id}"
                        );
                        got_id.clone()
                    } else {
                        id.to_string()
                    };
                    (id, name.to_string(), serde_json::from_str(args).unwrap())
                })
                .collect();
            assert_eq!(got_calls, want_calls, "{at}: tool calls");
            assert_eq!(&c.finish, finish, "{at}: finish");
            assert_eq!(&c.usage, usage, "{at}: usage");
            assert_eq!(
                c.executable_tool_calls().len(),
                calls.len(),
                "{at}: committed calls are executable"
            );
        }
    }
}

const DIRS: [&str; 5] = [
    "anthropic",
    "openai-chat",
    "ollama",
    "openai-responses",
    "gemini",
];

/// The result as text, with synthesized ids (random per run) replaced by their position.
fn comparable(result: Result<Completion, LlmError>) -> String {
    match result {
        Ok(mut c) => {
            let mut n = 0;
            for block in &mut c.message.content {
                if let ContentBlock::ToolCall { id, .. } = block
                    && id.len() == 37
                    && id.starts_with("call_")
                {
                    *id = format!("synthesized-{n}");
                    n += 1;
                }
            }
            json!(c).to_string()
        }
        Err(e) => format!("{e:?}"),
    }
}

#[test]
fn every_recorded_stream_replays_to_its_canonical_result() {
    let mut checked = 0;
    for dir in DIRS {
        for file in support::fixture_files(dir) {
            let (protocol, expect) = expectation(dir, &file).unwrap_or_else(|| {
                panic!("{dir}/{file} has no expectation: add one to tests/suite/fixtures.rs")
            });
            let body = support::fixture(&format!("{dir}/{file}"));
            check(dir, &file, replay_body(protocol, &body), &expect);
            checked += 1;
        }
    }
    assert_eq!(
        checked, 25,
        "the fixture set changed; review the expectations"
    );
}

#[test]
fn chunk_boundaries_never_change_the_result() {
    for dir in DIRS {
        for file in support::fixture_files(dir) {
            let (protocol, _) = expectation(dir, &file).unwrap();
            let body = support::fixture(&format!("{dir}/{file}"));
            let whole = comparable(replay_body(protocol, &body));
            for size in [1, 2, 3, 7, 64, 1000] {
                let chunked = comparable(replay_chunks(protocol, body.chunks(size)));
                assert_eq!(chunked, whole, "{dir}/{file} in {size}-byte chunks");
            }
        }
    }
}

#[test]
fn a_stream_cut_short_is_unexpected_eof_and_never_executable() {
    for (protocol, rel) in [
        (Protocol::Anthropic, "anthropic/03-tool-parallel.sse"),
        (Protocol::OpenaiChat, "openai-chat/03-tool-parallel.sse"),
        (
            Protocol::Gemini,
            "gemini/03-function-call-thought-signature.sse",
        ),
        (
            Protocol::OpenaiResponses,
            "openai-responses/03-reasoning-encrypted-function-call.sse",
        ),
    ] {
        let body = support::fixture(rel);
        // Cut before the finish: half of the body.
        let cut = &body[..body.len() / 2];
        assert!(
            matches!(replay_body(protocol, cut), Err(LlmError::UnexpectedEof)),
            "{rel}"
        );
    }
}

/// The payload of the first SSE event in a recording whose JSON contains `needle`.
fn recorded_event(rel: &str, needle: &str) -> Value {
    let body = String::from_utf8(support::fixture(rel)).unwrap();
    body.split("data: ")
        .filter_map(|chunk| {
            let json = chunk.lines().next()?;
            json.contains(needle)
                .then(|| serde_json::from_str(json).ok())
                .flatten()
        })
        .next()
        .unwrap_or_else(|| panic!("{rel}: no event contains {needle}"))
}

fn follow_up(first: &str, reply: Completion, result: Option<&str>) -> ChatRequest {
    let mut messages = vec![Message::user_text(first), reply.message.clone()];
    if let Some(result) = result {
        let call = reply.message.tool_calls().next().unwrap();
        messages.push(Message::new(
            Role::User,
            vec![ContentBlock::tool_result(call.id, result, false)],
        ));
    }
    ChatRequest {
        model: "m".into(),
        messages,
        max_tokens: 256,
        ..ChatRequest::default()
    }
}

#[test]
fn gemini_two_step_puts_the_signature_back_on_the_function_call_part() {
    let rel = "gemini/03-function-call-thought-signature.sse";
    let reply = replay_body(Protocol::Gemini, &support::fixture(rel)).unwrap();
    let recorded = recorded_event(rel, "functionCall")["candidates"][0]["content"]["parts"][0]
        ["thoughtSignature"]
        .clone();
    let req = follow_up("Which country am I in?", reply, Some("France"));
    validate_transcript(&req.messages, Tail::Complete).unwrap();
    let wire = gemini::to_wire(&req, &Capabilities::of(Protocol::Gemini)).unwrap();
    assert_eq!(
        wire["contents"][1]["parts"],
        json!([{"functionCall": {"name": "get_country", "args": {}}, "thoughtSignature": recorded}])
    );
    assert_eq!(
        wire["contents"][2]["parts"],
        json!([{"functionResponse": {"name": "get_country", "response": {"result": "France"}}}])
    );
    insta::assert_json_snapshot!(wire);
}

#[test]
fn gemini_text_signature_goes_back_on_its_text_part() {
    let rel = "gemini/04-thinking-thought-true.sse";
    let reply = replay_body(Protocol::Gemini, &support::fixture(rel)).unwrap();
    let recorded =
        recorded_event(rel, "thoughtSignature")["candidates"][0]["content"]["parts"][0].clone();
    let req = follow_up("How do I cross the street?", reply, None);
    let wire = gemini::to_wire(&req, &Capabilities::of(Protocol::Gemini)).unwrap();
    let parts = wire["contents"][1]["parts"].as_array().unwrap();
    // Thought summaries are not replayed; the signature sits on the first answer part.
    assert_eq!(parts.len(), 2);
    assert_eq!(parts[0]["thoughtSignature"], recorded["thoughtSignature"]);
    assert_eq!(parts[0]["text"], recorded["text"]);
    assert!(parts[1].get("thoughtSignature").is_none());
}

#[test]
fn responses_follow_up_replays_reasoning_call_and_output_in_order() {
    let rel = "openai-responses/03-reasoning-encrypted-function-call.sse";
    let reply = replay_body(Protocol::OpenaiResponses, &support::fixture(rel)).unwrap();
    let recorded_item = recorded_event(
        rel,
        r#""type":"response.output_item.done","sequence_number":3"#,
    )["item"]
        .clone();
    assert_eq!(recorded_item["type"], "reasoning");
    let req = follow_up("What is 1234 + 5432?", reply, Some("6666"));
    validate_transcript(&req.messages, Tail::Complete).unwrap();
    let wire = openai_responses::to_wire(&req, &Capabilities::of(Protocol::OpenaiResponses));
    let input = wire["input"].as_array().unwrap();
    let kinds: Vec<&str> = input
        .iter()
        .map(|i| i.get("type").and_then(Value::as_str).unwrap_or("message"))
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "reasoning",
            "function_call",
            "function_call_output"
        ]
    );
    // The reasoning item goes back verbatim.
    assert_eq!(input[1], recorded_item);
    assert_eq!(input[2]["call_id"], "call_CWXgs68YprAjp6t0371hiPOI");
    assert_eq!(input[3]["call_id"], "call_CWXgs68YprAjp6t0371hiPOI");
    insta::assert_json_snapshot!(wire);
}
