//! A server that floods a response without end: the stream ends at anvil's response cap with a
//! clear error, and memory stays bounded.
//!
//! Its own test binary, with one test, because it measures the peak memory of the whole
//! process (`VmHWM`), which other tests running beside it would inflate.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use anvil_test_support::raw_server as support;

use std::time::Duration;

use anvil_llm::cap::DEFAULT_MAX_RESPONSE_BYTES;
use anvil_llm::config::{Config, ConfigFile};
use anvil_llm::registry::Registry;
use anvil_llm::{ChatRequest, LlmError, Message, collect};

/// The process's peak resident set size, in bytes.
#[cfg(target_os = "linux")]
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib * 1024
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_flooding_server_ends_at_the_response_cap_with_bounded_memory() {
    const MIB: u64 = 1024 * 1024;
    // Far more than the cap, and more than the memory bound: a client that kept it all would
    // fail the bound.
    let server = support::RawServer::start(support::Behaviour::Flood {
        bytes: 400 * MIB as usize,
    })
    .await;
    let text = format!(
        "[providers.lab]\nkind = \"openai-chat\"\nbase_url = \"{}/v1\"\n",
        server.uri
    );
    let file = ConfigFile::parse(&text, std::path::Path::new("user.toml")).unwrap();
    let config = Config::merge(Some(("user.toml".into(), file)), None, false).unwrap();
    let model = Registry::with_env(config, |_| None)
        .resolve("lab:m")
        .unwrap();
    let request = ChatRequest {
        model: model.model.clone(),
        messages: vec![Message::user_text("hi")],
        max_tokens: 64,
        ..ChatRequest::default()
    };
    let outcome = tokio::time::timeout(Duration::from_secs(120), async {
        collect(model.provider.stream(&request).await?).await
    })
    .await
    .expect("the flood was still being read after two minutes");
    let err = outcome.unwrap_err();
    assert!(
        matches!(err, LlmError::ResponseTooLarge { limit, .. } if limit == DEFAULT_MAX_RESPONSE_BYTES as u64),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert!(
        err.to_string()
            .contains("bytes of text, reasoning and tool-call arguments"),
        "{err}"
    );
    let peak = peak_rss();
    assert!(peak < 200 * MIB, "peak RSS {} MiB", peak / MIB);
}
