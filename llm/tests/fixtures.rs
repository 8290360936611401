//! Every recorded stream in shared/fixtures/{anthropic,openai-chat,ollama} replays through
//! SseDecoder → StreamState → MessageBuilder to the canonical result the recording shows.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod support;

use anvil_llm::protocol::{replay_body, replay_chunks};
use anvil_llm::{Completion, ContentBlock, FinishReason, LlmError, Protocol, Usage};
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
        _ => return None,
    };
    let protocol = match dir {
        "anthropic" => Protocol::Anthropic,
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
            let want_calls: Vec<(String, String, Value)> = calls
                .iter()
                .map(|(id, name, args)| {
                    (
                        id.to_string(),
                        name.to_string(),
                        serde_json::from_str(args).unwrap(),
                    )
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

#[test]
fn every_recorded_stream_replays_to_its_canonical_result() {
    let mut checked = 0;
    for dir in ["anthropic", "openai-chat", "ollama"] {
        for file in support::fixture_files(dir) {
            let (protocol, expect) = expectation(dir, &file).unwrap_or_else(|| {
                panic!("{dir}/{file} has no expectation: add one to tests/fixtures.rs")
            });
            let body = support::fixture(&format!("{dir}/{file}"));
            check(dir, &file, replay_body(protocol, &body), &expect);
            checked += 1;
        }
    }
    assert_eq!(
        checked, 14,
        "the fixture set changed; review the expectations"
    );
}

#[test]
fn chunk_boundaries_never_change_the_result() {
    for dir in ["anthropic", "openai-chat", "ollama"] {
        for file in support::fixture_files(dir) {
            let (protocol, _) = expectation(dir, &file).unwrap();
            let body = support::fixture(&format!("{dir}/{file}"));
            let whole = format!("{:?}", replay_body(protocol, &body).map(|c| json!(c)));
            for size in [1, 2, 3, 7, 64, 1000] {
                let chunked = format!(
                    "{:?}",
                    replay_chunks(protocol, body.chunks(size)).map(|c| json!(c))
                );
                // Synthesized ids would differ between runs; none of these fixtures needs one.
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
