//! The conformance suite: five scenarios every adapter must pass, judged on
//! canonical output only.
//!
//! In every test run, the scenarios run over HTTP against the shared scripted server
//! (anvil-test-support) answering in each of the four wire protocols (`scripted_*` tests), so
//! request encoding, HTTP glue and stream decoding are exercised end to end for all of them.
//!
//! Against real model servers they are opt-in:
//!
//! ```text
//! cargo test -p anvil-llm --test all conformance -- --ignored --nocapture
//! ```
//!
//! Live targets, each enabled by its environment:
//! - Anthropic: `ANTHROPIC_API_KEY` (model: `ANVIL_CONFORMANCE_ANTHROPIC_MODEL`, default
//!   `claude-haiku-4-5`).
//! - OpenAI Chat and OpenAI Responses: `OPENAI_API_KEY` (model:
//!   `ANVIL_CONFORMANCE_OPENAI_MODEL`, default `gpt-4o-mini`).
//! - Gemini: `GEMINI_API_KEY` (model: `ANVIL_CONFORMANCE_GEMINI_MODEL`, default
//!   `gemini-2.5-flash`).
//! - A local server by base URL, through the OpenAI Chat, OpenAI Responses and Anthropic wire
//!   formats:
//!   `ANVIL_CONFORMANCE_BASE_URL=http://127.0.0.1:18081` and `ANVIL_CONFORMANCE_MODEL=local` (`scripts/local-model.sh` starts one)
//!   (llama.cpp's server speaks both).
//!
//! A target whose environment is not set is skipped with a message saying what to set.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::sync::Arc;

use anvil_llm::providers::anthropic::Anthropic;
use anvil_llm::providers::gemini::Gemini;
use anvil_llm::providers::openai_chat::OpenAiChat;
use anvil_llm::providers::openai_responses::OpenAiResponses;
use anvil_llm::retry::{Retry, RetryPolicy};
use anvil_llm::{
    ChatRequest, Completion, ContentBlock, FinishReason, Message, Protocol, Provider, Role, Tail,
    ToolSpec, collect, validate_transcript,
};
use anvil_test_support::model_server::wire::{self, Usage};
use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};
use serde_json::json;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Get the current weather for one city. Call it once per city.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. Oslo"}},
            "required": ["city"]
        }),
    }
}

fn request(model: &str, messages: Vec<Message>, tools: Vec<ToolSpec>) -> ChatRequest {
    ChatRequest {
        model: model.into(),
        system: Some("You are a helpful assistant. Use tools when they help.".into()),
        messages,
        tools,
        max_tokens: 256,
        temperature: Some(0.0),
        ..ChatRequest::default()
    }
}

async fn ask(p: &dyn Provider, req: &ChatRequest) -> Result<Completion, String> {
    let stream = p.stream(req).await.map_err(|e| e.to_string())?;
    collect(stream).await.map_err(|e| e.to_string())
}

type Outcome = Result<(), String>;

/// Runs the five scenarios; returns (scenario, required?, outcome).
async fn conformance(p: Arc<dyn Provider>, model: &str) -> Vec<(&'static str, bool, Outcome)> {
    let mut results = Vec::new();

    // 1. Text.
    let text = ask(
        &*p,
        &request(
            model,
            vec![Message::user_text("Reply with exactly: pong")],
            vec![],
        ),
    )
    .await;
    results.push((
        "1 text",
        true,
        match &text {
            Ok(c)
                if c.message.text().to_lowercase().contains("pong")
                    && c.finish == FinishReason::EndTurn =>
            {
                Ok(())
            }
            Ok(c) => Err(format!(
                "text {:?}, finish {:?}",
                c.message.text(),
                c.finish
            )),
            Err(e) => Err(e.clone()),
        },
    ));

    // 2. Single tool.
    let question = Message::user_text("What is the weather in Oslo? Use the get_weather tool.");
    let single = ask(
        &*p,
        &request(model, vec![question.clone()], vec![weather_tool()]),
    )
    .await;
    let call = match &single {
        Ok(c) => {
            let calls = c.executable_tool_calls();
            match calls.as_slice() {
                [call]
                    if call.name == "get_weather"
                        && call.arguments.get("city").is_some_and(|c| c.is_string())
                        && c.finish == FinishReason::ToolUse =>
                {
                    Ok((call.id.to_string(), call.arguments.clone()))
                }
                _ => Err(format!(
                    "calls {:?}, finish {:?}, text {:?}",
                    c.message.tool_calls().collect::<Vec<_>>(),
                    c.finish,
                    c.message.text()
                )),
            }
        }
        Err(e) => Err(e.clone()),
    };
    results.push((
        "2 single tool",
        true,
        call.as_ref().map(|_| ()).map_err(Clone::clone),
    ));

    // 3. Round trip: the call (or a stand-in when 2 failed) and its result, then an answer.
    let (id, args) =
        call.unwrap_or_else(|_| ("call_conformance_oslo".into(), json!({"city": "Oslo"})));
    let transcript = vec![
        question,
        Message::new(
            Role::Assistant,
            vec![ContentBlock::ToolCall {
                id: id.clone(),
                name: "get_weather".into(),
                arguments: args,
                meta: None,
            }],
        ),
        Message::new(
            Role::User,
            vec![ContentBlock::tool_result(id, "-3°C, snow", false)],
        ),
    ];
    let round_trip = match validate_transcript(&transcript, Tail::Complete) {
        Err(e) => Err(format!("invalid transcript: {e}")),
        Ok(()) => match ask(
            &*p,
            &request(model, transcript.clone(), vec![weather_tool()]),
        )
        .await
        {
            Ok(c) => {
                let t = c.message.text().to_lowercase();
                let mut after = transcript.clone();
                after.push(c.message.clone());
                if !(t.contains("-3") || t.contains("snow")) {
                    Err(format!("answer does not use the result: {t:?}"))
                } else if let Err(e) = validate_transcript(&after, Tail::PendingToolCalls) {
                    Err(format!("transcript after the answer is invalid: {e}"))
                } else {
                    Ok(())
                }
            }
            Err(e) => Err(e),
        },
    };
    results.push(("3 round trip", true, round_trip));

    // 4. Parallel (soft: some models serialize calls).
    let parallel = ask(
        &*p,
        &request(
            model,
            vec![Message::user_text("What is the weather in Oslo and in Lima? Call get_weather for both cities at once.")],
            vec![weather_tool()],
        ),
    )
    .await;
    results.push((
        "4 parallel (soft)",
        false,
        match &parallel {
            Ok(c) => {
                let ids: Vec<&str> = c.message.tool_calls().map(|c| c.id).collect();
                if ids.len() >= 2 && ids[0] != ids[1] {
                    Ok(())
                } else {
                    Err(format!("{} call(s)", ids.len()))
                }
            }
            Err(e) => Err(e.clone()),
        },
    ));

    // 5. Usage.
    results.push((
        "5 usage",
        true,
        match &text {
            Ok(c) if c.usage.total_input() > 0 && c.usage.output > 0 => Ok(()),
            Ok(c) => Err(format!("usage {:?}", c.usage)),
            Err(e) => Err(e.clone()),
        },
    ));
    results
}

async fn run_target(target: &str, p: Arc<dyn Provider>, model: &str) {
    let p: Arc<dyn Provider> = Arc::new(Retry::new(p, RetryPolicy::default()));
    let results = conformance(p, model).await;
    println!("conformance: {target} ({model})");
    for (name, _, outcome) in &results {
        match outcome {
            Ok(()) => println!("  pass  {name}"),
            Err(why) => println!("  FAIL  {name}: {why}"),
        }
    }
    let failed: Vec<&str> = results
        .iter()
        .filter(|(_, required, outcome)| *required && outcome.is_err())
        .map(|(name, _, _)| *name)
        .collect();
    assert!(
        failed.is_empty(),
        "{target}: required scenarios failed: {failed:?}"
    );
}

fn skip(target: &str, what: &str) {
    println!("conformance: {target} skipped; set {what} to run it");
}

#[tokio::test]
#[ignore = "live: talks to Anthropic; needs ANTHROPIC_API_KEY"]
async fn anthropic() {
    let Some(key) = env("ANTHROPIC_API_KEY") else {
        return skip("anthropic", "ANTHROPIC_API_KEY");
    };
    let model =
        env("ANVIL_CONFORMANCE_ANTHROPIC_MODEL").unwrap_or_else(|| "claude-haiku-4-5".into());
    run_target("anthropic", Arc::new(Anthropic::new(key).unwrap()), &model).await;
}

#[tokio::test]
#[ignore = "live: talks to OpenAI; needs OPENAI_API_KEY"]
async fn openai_chat() {
    let Some(key) = env("OPENAI_API_KEY") else {
        return skip("openai-chat", "OPENAI_API_KEY");
    };
    let model = env("ANVIL_CONFORMANCE_OPENAI_MODEL").unwrap_or_else(|| "gpt-4o-mini".into());
    run_target(
        "openai-chat",
        Arc::new(OpenAiChat::new(Some(key)).unwrap()),
        &model,
    )
    .await;
}

#[tokio::test]
#[ignore = "live: talks to OpenAI; needs OPENAI_API_KEY"]
async fn openai_responses() {
    let Some(key) = env("OPENAI_API_KEY") else {
        return skip("openai-responses", "OPENAI_API_KEY");
    };
    let model = env("ANVIL_CONFORMANCE_OPENAI_MODEL").unwrap_or_else(|| "gpt-4o-mini".into());
    run_target(
        "openai-responses",
        Arc::new(OpenAiResponses::new(Some(key)).unwrap()),
        &model,
    )
    .await;
}

#[tokio::test]
#[ignore = "live: talks to Gemini; needs GEMINI_API_KEY"]
async fn gemini() {
    let Some(key) = env("GEMINI_API_KEY") else {
        return skip("gemini", "GEMINI_API_KEY");
    };
    let model = env("ANVIL_CONFORMANCE_GEMINI_MODEL").unwrap_or_else(|| "gemini-2.5-flash".into());
    run_target("gemini", Arc::new(Gemini::new(key).unwrap()), &model).await;
}

fn local() -> Option<(String, String, Option<String>)> {
    Some((
        env("ANVIL_CONFORMANCE_BASE_URL")?
            .trim_end_matches('/')
            .to_string(),
        env("ANVIL_CONFORMANCE_MODEL").unwrap_or_else(|| "local".into()),
        env("ANVIL_CONFORMANCE_API_KEY"),
    ))
}

#[tokio::test]
#[ignore = "live: needs a local server at ANVIL_CONFORMANCE_BASE_URL"]
async fn local_openai_chat() {
    let Some((base, model, key)) = local() else {
        return skip(
            "local openai-chat",
            "ANVIL_CONFORMANCE_BASE_URL (and ANVIL_CONFORMANCE_MODEL)",
        );
    };
    let p = OpenAiChat::new(key)
        .unwrap()
        .with_base_url(format!("{base}/v1"))
        .with_name("local");
    run_target("local openai-chat", Arc::new(p), &model).await;
}

#[tokio::test]
#[ignore = "live: needs a local server at ANVIL_CONFORMANCE_BASE_URL"]
async fn local_openai_responses() {
    let Some((base, model, key)) = local() else {
        return skip(
            "local openai-responses",
            "ANVIL_CONFORMANCE_BASE_URL (and ANVIL_CONFORMANCE_MODEL)",
        );
    };
    let p = OpenAiResponses::new(key)
        .unwrap()
        .with_base_url(format!("{base}/v1"))
        .with_name("local");
    run_target("local openai-responses", Arc::new(p), &model).await;
}

#[tokio::test]
#[ignore = "live: needs a local server at ANVIL_CONFORMANCE_BASE_URL"]
async fn local_anthropic() {
    let Some((base, model, key)) = local() else {
        return skip(
            "local anthropic",
            "ANVIL_CONFORMANCE_BASE_URL (and ANVIL_CONFORMANCE_MODEL)",
        );
    };
    // A local server needs no key: none is sent unless one is given.
    let p = match key {
        Some(key) => Anthropic::new(key),
        None => Anthropic::without_key(),
    }
    .unwrap()
    .with_base_url(base)
    .with_name("local");
    run_target("local anthropic", Arc::new(p), &model).await;
}

// ---- the same scenarios in CI, against the shared scripted server -----------------------------

/// The wire format of `protocol` in the shared scripted server.
fn wire_format(protocol: Protocol) -> WireFormat {
    match protocol {
        Protocol::Anthropic => WireFormat::AnthropicMessages,
        Protocol::OpenaiChat => WireFormat::OpenAiChat,
        Protocol::OpenaiResponses => WireFormat::OpenAiResponses,
        Protocol::Gemini => WireFormat::Gemini,
    }
}

/// Answers each scenario's request the way a capable model would, in `protocol`'s wire format.
fn scenario_answer(protocol: Protocol, request: &serde_json::Value) -> Answer {
    let format = wire_format(protocol);
    let usage = Usage {
        input: 42,
        output: 12,
    };
    let body = request.to_string();
    if body.contains("-3°C, snow") {
        // The result must be bound to its call the way this protocol binds them.
        let bound = match protocol {
            Protocol::Gemini => body.contains(r#""functionResponse":{"name":"get_weather""#),
            _ => body.contains("call_conformance_oslo_3"),
        };
        if !bound {
            return Answer::error(400, "tool result not bound to its call");
        }
        Answer::sse(wire::text(format, "It is -3°C with snow in Oslo.", usage))
    } else if body.contains("Oslo and in Lima") {
        Answer::sse(wire::tool_calls(
            format,
            &[
                (
                    "call_conformance_oslo_1",
                    "get_weather",
                    json!({"city": "Oslo"}),
                ),
                (
                    "call_conformance_lima_2",
                    "get_weather",
                    json!({"city": "Lima"}),
                ),
            ],
            usage,
        ))
    } else if body.contains("weather in Oslo") {
        Answer::sse(wire::tool_call(
            format,
            "call_conformance_oslo_3",
            "get_weather",
            &json!({"city": "Oslo"}),
            usage,
        ))
    } else if body.contains("pong") {
        Answer::sse(wire::text(format, "pong", usage))
    } else {
        Answer::error(400, "unexpected request")
    }
}

async fn scripted_target(protocol: Protocol) {
    let server = ScriptedServer::answering(wire_format(protocol), move |request| {
        scenario_answer(protocol, request)
    })
    .await;
    let provider: Arc<dyn Provider> = match protocol {
        Protocol::Anthropic => Arc::new(Anthropic::new("k").unwrap().with_base_url(server.uri())),
        Protocol::OpenaiChat => Arc::new(
            OpenAiChat::new(None)
                .unwrap()
                .with_base_url(format!("{}/v1", server.uri())),
        ),
        Protocol::OpenaiResponses => Arc::new(
            OpenAiResponses::new(Some("k".into()))
                .unwrap()
                .with_base_url(format!("{}/v1", server.uri())),
        ),
        Protocol::Gemini => Arc::new(
            Gemini::new("k")
                .unwrap()
                .with_base_url(format!("{}/v1beta", server.uri())),
        ),
    };
    let results = conformance(provider, "scripted-model").await;
    for (name, _, outcome) in &results {
        assert_eq!(outcome, &Ok(()), "{protocol}: scenario {name}");
    }
    assert_eq!(results.len(), 5);
}

#[tokio::test]
async fn scripted_anthropic() {
    scripted_target(Protocol::Anthropic).await;
}

#[tokio::test]
async fn scripted_openai_chat() {
    scripted_target(Protocol::OpenaiChat).await;
}

#[tokio::test]
async fn scripted_openai_responses() {
    scripted_target(Protocol::OpenaiResponses).await;
}

#[tokio::test]
async fn scripted_gemini() {
    scripted_target(Protocol::Gemini).await;
}
