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

    /// Why the provider refused, when its answer says so ([`ProviderRefusal`]).
    ///
    /// - [`ProviderRefusal::Account`]: a key it does not accept (401, or 407 at a proxy),
    ///   payment required (402), or an account out of credit or quota — OpenAI's 429
    ///   `insufficient_quota` (also inside a Responses stream), Anthropic's 400 "Your credit
    ///   balance is too low". Nothing a model wrote can cause one: the quota signs are the
    ///   provider's own error type or code, or a message that *begins* with the provider's
    ///   fixed wording (a 400 may quote the request, so words anywhere else prove nothing).
    /// - [`ProviderRefusal::Generation`]: the provider rejected what the model generated —
    ///   Groq's 400 `tool_use_failed` with its `failed_generation` — so the failure is the
    ///   model's, even on the first request.
    pub fn refusal(&self) -> Option<ProviderRefusal> {
        match self {
            LlmError::Http {
                status: 401 | 402 | 407,
                ..
            } => Some(ProviderRefusal::Account),
            LlmError::Http { status, body, .. } if (400..500).contains(status) => {
                let v = serde_json::from_str::<serde_json::Value>(body).ok()?;
                let field = |pointer: &str| v.pointer(pointer).and_then(|f| f.as_str());
                if field("/error/code") == Some(TOOL_USE_FAILED)
                    || v.pointer("/error/failed_generation").is_some()
                {
                    Some(ProviderRefusal::Generation)
                } else if matches!(status, 400 | 403 | 429)
                    && (field("/error/type") == Some(INSUFFICIENT_QUOTA)
                        || field("/error/code") == Some(INSUFFICIENT_QUOTA)
                        || field("/error/message").is_some_and(out_of_credit))
                {
                    Some(ProviderRefusal::Account)
                } else {
                    None
                }
            }
            LlmError::Api { kind, message }
                if kind == INSUFFICIENT_QUOTA || out_of_credit(message) =>
            {
                Some(ProviderRefusal::Account)
            }
            _ => None,
        }
    }

    /// Whether trying the same request again may succeed.
    pub fn is_retryable(&self) -> bool {
        if self.refusal() == Some(ProviderRefusal::Account) {
            return false;
        }
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

/// Why a provider refused a request, as far as its answer says ([`LlmError::refusal`]): what
/// tells an eval trial the provider refused (an infrastructure error) from the model's fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderRefusal {
    /// The account: its key, its credit or its quota — never what the request said.
    Account,
    /// What the model generated (a malformed tool call the provider would not pass on).
    Generation,
}

/// OpenAI's error type and code for an account without quota or credit (HTTP 429).
const INSUFFICIENT_QUOTA: &str = "insufficient_quota";

/// Groq's error code for a tool call the model generated malformed (HTTP 400, with the
/// generation in `failed_generation`).
const TOOL_USE_FAILED: &str = "tool_use_failed";

/// Whether a provider's error message is its out-of-credit refusal: Anthropic answers an
/// empty balance with a 400 `invalid_request_error` whose message starts so.
fn out_of_credit(message: &str) -> bool {
    message.starts_with("Your credit balance is too low")
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

    /// The bodies providers send for an account without credit or quota, as they send them.
    #[test]
    fn an_account_without_credit_or_quota_is_an_account_refusal_and_never_retried() {
        let with_body = |status: u16, body: &str| LlmError::Http {
            status,
            body: body.into(),
            retry_after: None,
        };
        let openai_quota = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        let openai_quota_no_code = r#"{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":null}}"#;
        let anthropic_credit = r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."},"request_id":"req_011"}"#;
        for e in [
            with_body(429, openai_quota),
            with_body(429, openai_quota_no_code),
            with_body(400, anthropic_credit),
            http(401),
            http(402),
            http(407),
            LlmError::Api {
                kind: "insufficient_quota".into(),
                message: "You exceeded your current quota.".into(),
            },
        ] {
            assert_eq!(e.refusal(), Some(ProviderRefusal::Account), "{e:?}");
            assert!(!e.is_retryable(), "{e:?}");
        }
        // A rate limit, a request the conversation made invalid, and one whose message
        // quotes the conversation (which a model could fill with the provider's words) are
        // the request's, not the account's.
        let rate_limit = r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
        let invalid = r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.3: tool_use ids were found without tool_result blocks"}}"#;
        let quoting = r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.text: invalid value 'Your credit balance is too low'"}}"#;
        for e in [
            with_body(429, rate_limit),
            with_body(400, invalid),
            with_body(400, quoting),
            with_body(400, "Your credit balance is too low (not JSON)"),
            http(403),
            http(500),
            LlmError::Api {
                kind: "invalid_request_error".into(),
                message: "a 'Your credit balance is too low' quote".into(),
            },
        ] {
            assert_eq!(e.refusal(), None, "{e:?}");
        }
        assert!(with_body(429, rate_limit).is_retryable());
        // A tool call the model generated malformed, refused by the provider (Groq), is the
        // model's own failure, whatever its message says.
        let groq = r#"{"error":{"message":"Failed to call a function. Please adjust your prompt. See 'failed_generation' for more details.","type":"invalid_request_error","code":"tool_use_failed","failed_generation":"Your credit balance is too low"}}"#;
        assert_eq!(
            with_body(400, groq).refusal(),
            Some(ProviderRefusal::Generation)
        );
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
