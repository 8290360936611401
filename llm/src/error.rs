//! [`LlmError`]: everything that can go wrong between anvil and a model.

use std::time::Duration;

use crate::text::Limit;

/// The most of an error body kept in [`LlmError::Http`]; error bodies are for people, and a
/// proxy that answers with a whole HTML page must not fill memory or logs.
const MAX_ERROR_BODY: usize = 8 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The provider answered with a non-2xx status.
    #[error("HTTP {status} from the provider: {}", summarize_body(body))]
    Http {
        status: u16,
        body: String,
        retry_after: Option<Duration>,
    },
    /// The request never got an answer (connect, TLS, timeout, reset).
    #[error("could not reach the provider: {}", error_chain(.0))]
    Transport(#[from] reqwest::Error),
    /// The provider reported an error inside a stream (`event: error`, `{"error": …}`).
    #[error("the provider reported {kind}: {message}")]
    Api { kind: String, message: String },
    /// The stream broke the protocol: bad JSON, an impossible event order, an oversized line.
    #[error("could not decode the provider's stream: {0}")]
    Decode(String),
    /// The body ended before the response was complete.
    #[error("the provider's stream ended before the response was complete")]
    UnexpectedEof,
    /// No bytes arrived for the idle deadline (`idle_timeout_secs` of `provider`). The
    /// connection was closed on our side; the provider may still have finished (and billed)
    /// the response.
    #[error(
        "idle_timeout_secs={} exceeded for provider '{provider}': it sent nothing for {}s; anvil closed the stream (the provider may still bill for the response)",
        idle.as_secs_f64(),
        idle.as_secs_f64()
    )]
    Stalled { idle: Duration, provider: String },
    /// The request ran past its total deadline (`request_deadline_secs` of `provider`),
    /// however lively the stream: keepalives and empty deltas do not extend it. Time spent
    /// waiting for a free slot (`max_concurrency`) is not part of it. Closed on our side, as
    /// for [`LlmError::Stalled`].
    #[error(
        "request_deadline_secs={} exceeded for provider '{provider}': the response was not complete {}s after the request was sent; anvil closed the stream (the provider may still bill for the response)",
        deadline.as_secs_f64(),
        deadline.as_secs_f64()
    )]
    DeadlineExceeded {
        deadline: Duration,
        provider: String,
    },
    /// The response grew past anvil's cap on one response; the stream was closed and the
    /// partial response dropped.
    #[error(
        "the provider's response exceeded {limit} bytes of {what}, anvil's cap on one response; anvil closed the stream (a runaway or misbehaving server; the provider may still bill for the response)"
    )]
    ResponseTooLarge { limit: u64, what: &'static str },
    /// Configuration is missing or wrong; the message says what to change.
    #[error("{0}")]
    Config(String),
}

impl LlmError {
    /// The HTTP status of the response that ended the request, when a status did (401/403: the
    /// credentials were refused, which no retry fixes).
    pub fn http_status(&self) -> Option<u16> {
        match self {
            LlmError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Whether trying the same request again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Http { status, .. } => {
                matches!(status, 408 | 429) || (500..=599).contains(status)
            }
            // Failing to send (a refused connection, a pooled keep-alive connection the server
            // already closed, a timeout) happens before any response: safe to try again.
            LlmError::Transport(e) => e.is_timeout() || e.is_connect() || e.is_request(),
            LlmError::Api { kind, .. } => matches!(
                kind.as_str(),
                "overloaded_error" | "rate_limit_error" | "server_error" | "api_error"
            ),
            // Retried only before the stream starts, and only within the retry policy's own
            // total budget (`Retry`), which a whole request deadline usually exhausts.
            LlmError::Stalled { .. } | LlmError::DeadlineExceeded { .. } => true,
            // The same request would flood again.
            LlmError::ResponseTooLarge { .. } => false,
            LlmError::Decode(_) | LlmError::UnexpectedEof | LlmError::Config(_) => false,
        }
    }

    /// A short machine-readable kind, for JSON output and logs.
    pub fn kind(&self) -> String {
        match self {
            LlmError::Http { status, .. } => format!("http_{status}"),
            LlmError::Transport(_) => "transport".into(),
            LlmError::Api { kind, .. } => kind.clone(),
            LlmError::Decode(_) => "decode".into(),
            LlmError::UnexpectedEof => "unexpected_eof".into(),
            LlmError::Stalled { .. } => "stalled".into(),
            LlmError::DeadlineExceeded { .. } => "deadline_exceeded".into(),
            LlmError::ResponseTooLarge { .. } => "response_too_large".into(),
            LlmError::Config(_) => "config".into(),
        }
    }

    pub(crate) fn decode(what: impl std::fmt::Display) -> Self {
        LlmError::Decode(what.to_string())
    }
}

/// An error and its causes, outermost first ("error sending request: connection closed").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The provider's own error message when the body is a JSON error object, else the body,
/// shortened.
fn summarize_body(body: &str) -> String {
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let m = v
                .pointer("/error/message")
                .or_else(|| v.pointer("/message"))?;
            m.as_str().map(str::to_owned)
        });
    let text = message.unwrap_or_else(|| body.trim().to_string());
    if text.is_empty() {
        return "(empty body)".into();
    }
    Limit::chars(MAX_SHOWN_BODY_CHARS)
        .apply(&text)
        .with_marker("…")
        .into_owned()
}

/// How much of an error body an error message shows.
const MAX_SHOWN_BODY_CHARS: usize = 500;

/// Turns a non-2xx response into [`LlmError::Http`], reading a bounded amount of the body and
/// the `retry-after` (seconds) or `retry-after-ms` header.
pub async fn check_status(resp: reqwest::Response) -> Result<reqwest::Response, LlmError> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let retry_after = retry_after(resp.headers());
    let body = read_bounded(resp, MAX_ERROR_BODY).await;
    Err(LlmError::Http {
        status: status.as_u16(),
        body,
        retry_after,
    })
}

fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let secs = header("retry-after")?.trim().parse::<f64>().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

async fn read_bounded(mut resp: reqwest::Response, max: usize) -> String {
    let mut buf = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        let room = max - buf.len();
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if buf.len() >= max {
            break;
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16) -> LlmError {
        LlmError::Http {
            status,
            body: String::new(),
            retry_after: None,
        }
    }

    #[test]
    fn retryable_statuses() {
        assert!(!http(401).is_retryable());
        assert!(!http(400).is_retryable());
        assert!(http(408).is_retryable());
        assert!(http(429).is_retryable());
        assert!(http(500).is_retryable());
        assert!(http(529).is_retryable());
        let api = |kind: &str| LlmError::Api {
            kind: kind.into(),
            message: String::new(),
        };
        assert!(api("overloaded_error").is_retryable());
        assert!(api("rate_limit_error").is_retryable());
        assert!(!api("invalid_request_error").is_retryable());
        assert!(!LlmError::UnexpectedEof.is_retryable());
    }

    #[test]
    fn http_error_shows_the_providers_message() {
        let e = LlmError::Http {
            status: 401,
            body: r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#.into(),
            retry_after: None,
        };
        assert_eq!(
            e.to_string(),
            "HTTP 401 from the provider: invalid x-api-key"
        );
    }

    #[test]
    fn a_long_error_body_is_shown_cut_at_500_characters() {
        let body = |text: String| LlmError::Http {
            status: 502,
            body: text,
            retry_after: None,
        };
        let shown = body("é".repeat(600)).to_string();
        assert_eq!(
            shown,
            format!("HTTP 502 from the provider: {}…", "é".repeat(500))
        );
        let exact = body("x".repeat(500)).to_string();
        assert_eq!(
            exact,
            format!("HTTP 502 from the provider: {}", "x".repeat(500))
        );
    }

    #[tokio::test]
    async fn transport_errors_name_their_cause_and_a_refused_connection_is_retryable() {
        // Nothing listens on port 9 of the loopback address.
        let e = reqwest::Client::new()
            .get("http://127.0.0.1:9/")
            .send()
            .await
            .unwrap_err();
        let e = LlmError::from(e);
        assert!(e.is_retryable());
        let text = e.to_string();
        assert!(
            text.starts_with("could not reach the provider: error sending request"),
            "{text}"
        );
        assert!(
            text.matches(": ").count() >= 2,
            "the cause is missing: {text}"
        );
    }

    #[test]
    fn retry_after_headers() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(250)));
        let mut bad = reqwest::header::HeaderMap::new();
        bad.insert(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&bad), None);
    }
}
