//! The same pipeline over real HTTP: wiremock serves recorded streams to the real providers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use super::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anvil_llm::config::{Config, ConfigFile};
use anvil_llm::providers::anthropic::Anthropic;
use anvil_llm::providers::gemini::Gemini;
use anvil_llm::providers::openai_chat::OpenAiChat;
use anvil_llm::providers::openai_responses::OpenAiResponses;
use anvil_llm::registry::Registry;
use anvil_llm::retry::{Retry, RetryPolicy};
use anvil_llm::{ChatRequest, Completion, FinishReason, LlmError, Message, Provider, collect};
use serde_json::json;
use wiremock::matchers::{body_partial_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

fn sse(rel: &str) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/event-stream")
        .set_body_bytes(support::fixture(rel))
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "test-model".into(),
        system: Some("sys".into()),
        messages: vec![Message::user_text("hi")],
        max_tokens: 64,
        ..ChatRequest::default()
    }
}

/// Matches requests that carry no Authorization header.
struct NoAuthorization;
impl wiremock::Match for NoAuthorization {
    fn matches(&self, request: &Request) -> bool {
        !request.headers.contains_key("authorization")
    }
}

#[tokio::test]
async fn anthropic_over_http() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", "sk-ant-test"))
        .and(header("anthropic-version", "2023-06-01"))
        .and(body_partial_json(
            json!({"model": "test-model", "stream": true, "system": "sys"}),
        ))
        .respond_with(sse("anthropic/03-tool-parallel.sse"))
        .expect(1)
        .mount(&server)
        .await;
    let provider = Anthropic::new("sk-ant-test")
        .unwrap()
        .with_base_url(server.uri());
    let c = collect(provider.stream(&request()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(c.finish, FinishReason::ToolUse);
    assert_eq!(c.message.tool_calls().count(), 2);
    assert_eq!(c.usage.input, 542);
}

#[tokio::test]
async fn openai_chat_over_http_without_a_key_sends_no_authorization() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(NoAuthorization)
        .and(body_partial_json(
            json!({"stream": true, "stream_options": {"include_usage": true}, "max_tokens": 64}),
        ))
        .respond_with(sse("ollama/01-text-qwen-coder.sse"))
        .expect(1)
        .mount(&server)
        .await;
    let provider = OpenAiChat::new(None)
        .unwrap()
        .with_base_url(format!("{}/v1", server.uri()));
    let c = collect(provider.stream(&request()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(c.finish, FinishReason::EndTurn);
    assert!(c.message.text().starts_with("Higress"));
}

#[tokio::test]
async fn openai_chat_over_http_with_a_key() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", "Bearer sk-test"))
        .respond_with(sse("openai-chat/02-tool-single.sse"))
        .expect(1)
        .mount(&server)
        .await;
    let provider = OpenAiChat::new(Some("sk-test".into()))
        .unwrap()
        .with_base_url(format!("{}/v1", server.uri()));
    let c = collect(provider.stream(&request()).await.unwrap())
        .await
        .unwrap();
    let call = c.message.tool_calls().next().unwrap();
    assert_eq!(call.arguments, &json!({"country": "UK"}));
}

#[tokio::test]
async fn an_http_error_carries_status_and_the_providers_message() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({
            "type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}
        })))
        .mount(&server)
        .await;
    let provider = Anthropic::new("bad").unwrap().with_base_url(server.uri());
    let err = provider.stream(&request()).await.err().unwrap();
    assert!(matches!(err, LlmError::Http { status: 401, .. }));
    assert_eq!(
        err.to_string(),
        "HTTP 401 from the provider: invalid x-api-key"
    );
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 5,
        base: Duration::from_millis(5),
        cap: Duration::from_millis(50),
        total_deadline: Duration::from_secs(5),
    }
}

#[tokio::test]
async fn retry_529_twice_then_a_valid_stream() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(529).set_body_string("overloaded"))
        .up_to_n_times(2)
        .with_priority(1)
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(sse("anthropic/01-text.sse"))
        .with_priority(2)
        .expect(1)
        .mount(&server)
        .await;
    let inner = Arc::new(Anthropic::new("k").unwrap().with_base_url(server.uri()));
    let retry = Retry::new(inner, fast_retry());
    let started = Instant::now();
    let c = collect(retry.stream(&request()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(c.message.text(), "Hello");
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn retry_attempts_a_401_exactly_once() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(401))
        .expect(1)
        .mount(&server)
        .await;
    let inner = Arc::new(Anthropic::new("k").unwrap().with_base_url(server.uri()));
    let retry = Retry::new(inner, fast_retry());
    assert!(retry.stream(&request()).await.is_err());
    // `expect(1)` is verified when the server drops.
}

#[tokio::test]
async fn a_provider_from_config_streams_through_the_registry() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(header("authorization", "Bearer lab-secret"))
        .and(body_partial_json(json!({"model": "qwen-test"})))
        .respond_with(sse("openai-chat/01-text-usage.sse"))
        .expect(1)
        .mount(&server)
        .await;
    let text = format!(
        "[providers.lab]\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\napi_key_env = \"LAB_KEY\"\n\n[models.local]\nprovider = \"lab\"\nmodel = \"qwen-test\"\n",
        server.uri()
    );
    let file = ConfigFile::parse(&text, std::path::Path::new("user.toml")).unwrap();
    let config = Config::merge(Some(("user.toml".into(), file)), None, false).unwrap();
    let registry = Registry::with_env(config, |name| {
        (name == "LAB_KEY").then(|| "lab-secret".into())
    });
    let model = registry.resolve("local").unwrap();
    let req = ChatRequest {
        model: model.model.clone(),
        ..request()
    };
    let c = collect(model.provider.stream(&req).await.unwrap())
        .await
        .unwrap();
    assert_eq!(c.message.text(), "The capital of Mexico is Mexico City.");
}

#[tokio::test]
async fn gemini_over_http() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(
            "/v1beta/models/gemini-2.0-flash:streamGenerateContent",
        ))
        .and(query_param("alt", "sse"))
        .and(header("x-goog-api-key", "g-key"))
        .and(body_partial_json(json!({
            "systemInstruction": {"parts": [{"text": "sys"}]},
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generationConfig": {"maxOutputTokens": 64}
        })))
        .respond_with(sse("gemini/02-function-call.sse"))
        .expect(1)
        .mount(&server)
        .await;
    let provider = Gemini::new("g-key")
        .unwrap()
        .with_base_url(format!("{}/v1beta", server.uri()));
    let req = ChatRequest {
        model: "gemini-2.0-flash".into(),
        ..request()
    };
    let c = collect(provider.stream(&req).await.unwrap()).await.unwrap();
    assert_eq!(c.finish, FinishReason::ToolUse);
    assert_eq!(
        c.message.tool_calls().next().unwrap().arguments,
        &json!({"country": "France"})
    );
}

#[tokio::test]
async fn openai_responses_over_http() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .and(header("authorization", "Bearer sk-test"))
        .and(body_partial_json(json!({
            "instructions": "sys", "store": false, "stream": true, "max_output_tokens": 64,
            "include": ["reasoning.encrypted_content"]
        })))
        .respond_with(sse(
            "openai-responses/03-reasoning-encrypted-function-call.sse",
        ))
        .expect(1)
        .mount(&server)
        .await;
    let provider = OpenAiResponses::new(Some("sk-test".into()))
        .unwrap()
        .with_base_url(format!("{}/v1", server.uri()));
    let c = collect(provider.stream(&request()).await.unwrap())
        .await
        .unwrap();
    assert_eq!(c.finish, FinishReason::ToolUse);
    assert_eq!(c.usage.output, 469);
}

#[tokio::test]
async fn a_responses_failure_is_an_api_error_over_http() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(sse("openai-responses/09-error-failed-reframed.sse"))
        .mount(&server)
        .await;
    let provider = OpenAiResponses::new(None)
        .unwrap()
        .with_base_url(server.uri());
    let err = collect(provider.stream(&request()).await.unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LlmError::Api { ref kind, .. } if kind == "insufficient_quota"),
        "{err:?}"
    );
}

/// A registry whose one provider, `lab`, is an OpenAI Chat server at `uri` with
/// `request_deadline_secs = 1`.
fn one_second_deadline(uri: &str, retry: RetryPolicy) -> Registry {
    let text = format!(
        "[providers.lab]\nkind = \"openai-chat\"\nbase_url = \"{uri}/v1\"\nrequest_deadline_secs = 1\n"
    );
    let file = ConfigFile::parse(&text, std::path::Path::new("user.toml")).unwrap();
    let config = Config::merge(Some(("user.toml".into(), file)), None, false).unwrap();
    Registry::with_env(config, |_| None).with_retry_policy(retry)
}

#[tokio::test]
async fn a_server_sending_keepalives_forever_ends_at_the_request_deadline() {
    let server = support::RawServer::start(support::Behaviour::Ping {
        every: Duration::from_millis(100),
    })
    .await;
    let model = one_second_deadline(&server.uri, fast_retry())
        .resolve("lab:m")
        .unwrap();
    let started = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(10), async {
        collect(model.provider.stream(&request()).await?).await
    })
    .await
    .expect("the stream outlived its deadline by far");
    let elapsed = started.elapsed();
    let err = outcome.unwrap_err();
    assert!(
        matches!(err, LlmError::DeadlineExceeded { deadline, .. } if deadline == Duration::from_secs(1)),
        "{err}"
    );
    assert!(err.to_string().contains("request_deadline_secs"), "{err}");
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    // The stream had started, so nothing retried it behind the caller's back.
    assert_eq!(server.connections(), 1);
}

/// An error response whose body never finishes is under the deadline too.
#[tokio::test]
async fn a_stalled_error_body_ends_at_the_request_deadline() {
    let server = support::RawServer::start(support::Behaviour::StalledError).await;
    let model = one_second_deadline(&server.uri, fast_retry())
        .resolve("lab:m")
        .unwrap();
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(20), model.provider.stream(&request()))
        .await
        .expect("the request outlived its deadline by far")
        .err()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert!(err.to_string().contains("500"), "{err}");
}

#[tokio::test]
async fn a_deadline_hit_before_the_headers_is_retried_only_within_the_retry_budget() {
    let server = support::RawServer::start(support::Behaviour::Silent).await;
    let budget = RetryPolicy {
        total_deadline: Duration::from_millis(2500),
        max_attempts: 10,
        ..fast_retry()
    };
    let model = one_second_deadline(&server.uri, budget)
        .resolve("lab:m")
        .unwrap();
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(20), model.provider.stream(&request()))
        .await
        .expect("the request outlived its deadline by far")
        .err()
        .unwrap();
    let elapsed = started.elapsed();
    assert!(matches!(err, LlmError::DeadlineExceeded { .. }), "{err}");
    // 1 s per attempt in a 2.5 s budget: a second attempt fits, a third would not.
    assert_eq!(server.connections(), 2);
    assert!(elapsed < Duration::from_millis(2500), "{elapsed:?}");
}

/// A registry of the providers in `providers` (TOML tables) and no credentials but
/// `LAB_KEY=lab-secret`.
fn registry_of(providers: &str) -> Registry {
    let file = ConfigFile::parse(providers, std::path::Path::new("user.toml")).unwrap();
    let config = Config::merge(Some(("user.toml".into(), file)), None, false).unwrap();
    Registry::with_env(config, |name| {
        (name == "LAB_KEY").then(|| "lab-secret".into())
    })
    .with_retry_policy(fast_retry())
}

/// Matches requests that carry no `x-api-key` header.
struct NoApiKey;
impl wiremock::Match for NoApiKey {
    fn matches(&self, request: &Request) -> bool {
        !request.headers.contains_key("x-api-key")
    }
}

#[tokio::test]
async fn anthropic_at_a_local_server_needs_no_key_and_its_v1_is_not_sent_twice() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(NoApiKey)
        .and(NoAuthorization)
        .and(header("anthropic-version", "2023-06-01"))
        .respond_with(sse("anthropic/01-text.sse"))
        .expect(2)
        .mount(&server)
        .await;
    // The way llama.cpp's docs write it (`…/v1`), and without the version.
    let model = |base: String| {
        registry_of(&format!(
            "[providers.llama]\nkind = \"anthropic\"\nbase_url = \"{base}\"\n"
        ))
        .resolve("llama:qwen")
        .unwrap()
    };
    for base in [format!("{}/v1", server.uri()), server.uri()] {
        let c = collect(model(base).provider.stream(&request()).await.unwrap())
            .await
            .unwrap();
        assert_eq!(c.message.text(), "Hello");
    }
}

#[tokio::test]
async fn a_base_url_that_ends_in_the_adapters_own_path_is_not_sent_twice() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse("openai-chat/01-text-usage.sse"))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/responses"))
        .respond_with(sse("openai-responses/01-text.sse"))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1beta/models/g:streamGenerateContent"))
        .and(header("x-goog-api-key", "lab-secret"))
        .respond_with(sse("gemini/01-text.sse"))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .and(header("x-api-key", "lab-secret"))
        .respond_with(sse("anthropic/01-text.sse"))
        .expect(1)
        .mount(&server)
        .await;
    let uri = server.uri();
    let registry = registry_of(&format!(
        "[providers.chat]\nkind = \"openai-chat\"\nbase_url = \"{uri}/v1/chat/completions\"\n\n\
         [providers.responses]\nkind = \"openai-responses\"\nbase_url = \"{uri}/v1/responses/\"\n\n\
         [providers.gem]\nkind = \"gemini\"\nbase_url = \"{uri}/v1beta/models\"\napi_key_env = \"LAB_KEY\"\n\n\
         [providers.proxy]\nkind = \"anthropic\"\nbase_url = \"{uri}/v1/messages\"\napi_key_env = \"LAB_KEY\"\n"
    ));
    for name in ["chat:m", "responses:m", "gem:g", "proxy:c"] {
        let model = registry.resolve(name).unwrap();
        let req = ChatRequest {
            model: model.model.clone(),
            ..request()
        };
        let stream = model.provider.stream(&req).await;
        let c = collect(stream.unwrap_or_else(|e| panic!("{name}: {e}")))
            .await
            .unwrap();
        assert!(!c.message.text().is_empty(), "{name}");
    }
    // `expect(1)` on each path is verified when the server drops.
}

#[tokio::test]
async fn a_silent_stream_ends_at_the_configured_idle_timeout_naming_it() {
    // The headers and one keepalive, then nothing for longer than the idle timeout.
    let server = support::RawServer::start(support::Behaviour::Ping {
        every: Duration::from_secs(30),
    })
    .await;
    let model = registry_of(&format!(
        "[providers.slowpoke]\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\nidle_timeout_secs = 1\n",
        server.uri
    ))
    .resolve("slowpoke:m")
    .unwrap();
    let started = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(10), async {
        collect(model.provider.stream(&request()).await?).await
    })
    .await
    .expect("the stream outlived its idle timeout by far")
    .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        matches!(err, LlmError::Stalled { idle, .. } if idle == Duration::from_secs(1)),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("idle_timeout_secs=1 exceeded for provider 'slowpoke'"),
        "{err}"
    );
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
}

#[tokio::test]
async fn the_request_deadline_error_names_the_setting_and_the_provider() {
    let server = support::RawServer::start(support::Behaviour::Ping {
        every: Duration::from_millis(100),
    })
    .await;
    let model = one_second_deadline(&server.uri, fast_retry())
        .resolve("lab:m")
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), async {
        collect(model.provider.stream(&request()).await?).await
    })
    .await
    .unwrap()
    .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("request_deadline_secs=1 exceeded for provider 'lab'"),
        "{err}"
    );
}

/// Time in anvil's own queue (`max_concurrency`) is not time against a request's deadline:
/// with one slot and `request_deadline_secs = 2`, a request that waits behind a first one
/// held for longer than its whole deadline, and then behind another that takes 1.2 s, still
/// succeeds.
#[tokio::test]
async fn waiting_for_a_slot_does_not_count_against_the_deadline() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(sse("openai-chat/01-text-usage.sse").set_delay(Duration::from_millis(1200)))
        .mount(&server)
        .await;
    let config = format!(
        "[providers.oneslot]\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\nrequest_deadline_secs = 2\nmax_concurrency = 1\n",
        server.uri()
    );
    // Two registries, as two sessions (or a sweep's workers) of one process would have.
    let first = registry_of(&config).resolve("oneslot:m").unwrap();
    let others = registry_of(&config).resolve("oneslot:m").unwrap();
    let started = Instant::now();
    // The first request holds the slot for 2.5 s, longer than the deadline of the others.
    let held = first.provider.stream(&request()).await.unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        drop(held);
    });
    let ask = |provider: Arc<dyn Provider>| {
        tokio::spawn(async move {
            let c = collect(provider.stream(&request()).await?).await?;
            Ok::<_, LlmError>((c, started.elapsed()))
        })
    };
    let second = ask(Arc::clone(&others.provider));
    let third = ask(Arc::clone(&first.provider));
    let mut done = Vec::new();
    for task in [second, third] {
        let (c, at) = task.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.message.text(), "The capital of Mexico is Mexico City.");
        done.push(at);
    }
    release.await.unwrap();
    done.sort();
    // One after the other, after the held slot: ≥ 2.5 + 1.2 and ≥ 2.5 + 1.2 + 1.2 s, the
    // last more than twice its deadline after it was asked for.
    assert!(done[0] >= Duration::from_millis(3700), "{done:?}");
    assert!(done[1] >= Duration::from_millis(4900), "{done:?}");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 3);
}

/// A server with one slot, like llama.cpp's `-np 1`: it answers one connection at a time,
/// each `per_request` after reading it, with a complete OpenAI Chat stream; later connections
/// wait in the listen backlog meanwhile.
async fn one_slot_server(per_request: Duration) -> (String, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}", listener.local_addr().unwrap());
    let body = support::fixture("openai-chat/01-text-usage.sse");
    let task = tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            tokio::time::sleep(per_request).await;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(&body).await;
            let _ = socket.shutdown().await;
        }
    });
    (uri, task)
}

/// Three requests at once to a one-slot server taking 1.2 s each, under a 2 s deadline: sent
/// all at once, the last waits on the server past its deadline; with `max_concurrency = 1`
/// they wait in anvil instead, and all three succeed.
#[tokio::test]
async fn a_one_slot_server_needs_max_concurrency_1() {
    /// Three requests at once to a fresh one-slot server, through provider `name` configured
    /// with `setting`; no retries, so a request that ran out of time fails as it did.
    async fn three_at_once(name: &str, setting: &str) -> Vec<Result<Completion, LlmError>> {
        let (uri, server) = one_slot_server(Duration::from_millis(1200)).await;
        let model = registry_of(&format!(
            "[providers.{name}]\nkind = \"openai-chat\"\nbase_url = \"{uri}/v1\"\nrequest_deadline_secs = 2\n{setting}\n"
        ))
        .with_retry_policy(RetryPolicy {
            max_attempts: 1,
            ..fast_retry()
        })
        .resolve(&format!("{name}:m"))
        .unwrap();
        let ask = || {
            let provider = Arc::clone(&model.provider);
            async move { collect(provider.stream(&request()).await?).await }
        };
        let (a, b, c) = tokio::join!(ask(), ask(), ask());
        server.abort();
        vec![a, b, c]
    }
    let failed: Vec<String> = three_at_once("llama", "")
        .await
        .iter()
        .filter_map(|r| r.as_ref().err().map(ToString::to_string))
        .collect();
    assert!(!failed.is_empty(), "all succeeded without a limit");
    for err in &failed {
        assert!(
            err.starts_with("request_deadline_secs=2 exceeded for provider 'llama'"),
            "{err}"
        );
    }
    for outcome in three_at_once("llama1", "max_concurrency = 1").await {
        let c = outcome.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.message.text(), "The capital of Mexico is Mexico City.");
    }
}
