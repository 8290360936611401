//! The conformance suite (build guide 6.3): five live scenarios every adapter must pass, judged
//! on canonical output only. Opt-in, because it talks to real model servers:
//!
//! ```text
//! cargo test -p anvil-llm --test conformance -- --ignored --nocapture
//! ```
//!
//! Targets, each enabled by its environment:
//! - Anthropic: `ANTHROPIC_API_KEY` (model: `ANVIL_CONFORMANCE_ANTHROPIC_MODEL`, default
//!   `claude-haiku-4-5`).
//! - OpenAI Chat: `OPENAI_API_KEY` (model: `ANVIL_CONFORMANCE_OPENAI_MODEL`, default
//!   `gpt-4o-mini`).
//! - A local server by base URL, through both the OpenAI Chat and the Anthropic wire format:
//!   `ANVIL_CONFORMANCE_BASE_URL=http://127.0.0.1:18081` and `ANVIL_CONFORMANCE_MODEL=qwen`
//!   (llama.cpp's server speaks both; see shared/tools/local-llm).
//!
//! A target whose environment is not set is skipped with a message saying what to set.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::sync::Arc;

use anvil_llm::providers::anthropic::Anthropic;
use anvil_llm::providers::openai_chat::OpenAiChat;
use anvil_llm::retry::{Retry, RetryPolicy};
use anvil_llm::{
    ChatRequest, Completion, ContentBlock, FinishReason, Message, Provider, Role, Tail, ToolSpec,
    collect, validate_transcript,
};
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

fn local() -> Option<(String, String, Option<String>)> {
    Some((
        env("ANVIL_CONFORMANCE_BASE_URL")?
            .trim_end_matches('/')
            .to_string(),
        env("ANVIL_CONFORMANCE_MODEL").unwrap_or_else(|| "qwen".into()),
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
async fn local_anthropic() {
    let Some((base, model, key)) = local() else {
        return skip(
            "local anthropic",
            "ANVIL_CONFORMANCE_BASE_URL (and ANVIL_CONFORMANCE_MODEL)",
        );
    };
    // Local servers accept any key; Anthropic's wire format requires the header.
    let p = Anthropic::new(key.unwrap_or_else(|| "local".into()))
        .unwrap()
        .with_base_url(base)
        .with_name("local");
    run_target("local anthropic", Arc::new(p), &model).await;
}
