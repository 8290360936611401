//! The thin I/O wrapper every adapter shares: send a request, check the status, and feed the
//! body through the SSE decoder and the adapter's [`StreamState`] under an idle deadline, a
//! total deadline and a size cap.

use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use crate::cap::{DEFAULT_MAX_RESPONSE_BYTES, ResponseCap};
use crate::capability::{Capabilities, MaxTokensField};
use crate::error::{LlmError, check_status};
use crate::protocol::{Protocol, StreamState};
use crate::provider::EventStream;
use crate::sse::{SseDecoder, SseLimits};

/// A model request's total deadline when config says nothing: 10 minutes, room for a long
/// response with extended reasoning.
pub const DEFAULT_REQUEST_DEADLINE_SECS: u64 = 600;

/// The longest silence between two pieces of a response when config says nothing: 2 minutes.
/// A local server on a CPU may need more for the prefill of a long prompt, before its first
/// token (`idle_timeout_secs`).
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 120;

/// Deadlines and limits for one streaming request. Every wait is finite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpOptions {
    /// Establishing the connection.
    pub connect_timeout: Duration,
    /// The longest silence allowed between two body chunks (`idle_timeout_secs`). The wait
    /// for the response headers is bounded by the request deadline alone: a server may
    /// compute for a long while (the prefill of a long prompt) before it answers at all.
    pub idle_timeout: Duration,
    /// The longest the whole request may take, from sending it to the end of the body
    /// (`request_deadline_secs`). Nothing the server sends extends it: a keepalive comment or
    /// an empty delta every second keeps the idle deadline at bay, never this one.
    pub request_deadline: Duration,
    /// The most one response may hold (see [`ResponseCap`]).
    pub max_response_bytes: usize,
    pub sse_limits: SseLimits,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(DEFAULT_IDLE_TIMEOUT_SECS),
            request_deadline: Duration::from_secs(DEFAULT_REQUEST_DEADLINE_SECS),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            sse_limits: SseLimits::default(),
        }
    }
}

impl HttpOptions {
    /// A client with this connect timeout for requests to `base_url`. A plain `http://`
    /// endpoint (a local model server, a test double) gets no TLS trust roots: loading the
    /// platform's — every file under `/etc/ssl/certs` — costs a few milliseconds per process
    /// and would never be used (a redirect to `https://` then fails instead of being trusted).
    pub fn client(&self, base_url: &str) -> Result<reqwest::Client, LlmError> {
        let mut builder = reqwest::Client::builder().connect_timeout(self.connect_timeout);
        if is_plain_http(base_url) {
            builder = builder.tls_certs_only(std::iter::empty());
        }
        builder
            .build()
            .map_err(|e| LlmError::Config(format!("could not build the HTTP client: {e}")))
    }
}

/// `base_url` with what the adapter appends itself taken off its end, so that no path segment
/// is sent twice: Anthropic's `/v1` (the adapter posts to `/v1/messages`, so `…/v1` would make
/// `…/v1/v1/messages`) or a whole `/v1/messages`; OpenAI's `/chat/completions` and
/// `/responses` (the adapters append them to a base that ends in the version, `…/v1`);
/// Gemini's `/models` (the adapter appends `/models/MODEL:streamGenerateContent` to a base
/// that ends in the version, `…/v1beta`). A trailing slash is dropped too. Anything else is
/// kept as written.
pub fn normalize_base_url(protocol: Protocol, base_url: &str) -> String {
    let mut url = base_url.trim_end_matches('/');
    let appended: &[&str] = match protocol {
        Protocol::Anthropic => &["/v1/messages", "/messages", "/v1"],
        Protocol::OpenaiChat => &["/chat/completions"],
        Protocol::OpenaiResponses => &["/responses"],
        Protocol::Gemini => &["/models"],
    };
    for suffix in appended {
        // Never down to the bare scheme: `http://v1` is a host, not a path.
        if let Some(rest) = url.strip_suffix(suffix)
            && rest.split("://").nth(1).is_some_and(|r| !r.is_empty())
        {
            url = rest.trim_end_matches('/');
            break;
        }
    }
    url.to_string()
}

/// Whether `url` is `http://…` (any letter case), not `https://`.
fn is_plain_http(url: &str) -> bool {
    url.get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"))
}

/// What every HTTP provider has: a name, a client, an endpoint, the target's capabilities and
/// the deadlines. Providers add their credentials and request shape.
pub struct Endpoint {
    pub name: String,
    /// Built on the first request, for the base URL and options then set (so configuring a
    /// provider — base URL, then options — builds no client it throws away).
    http: std::sync::OnceLock<reqwest::Client>,
    pub base_url: String,
    pub caps: Capabilities,
    pub options: HttpOptions,
    protocol: Protocol,
}

impl Endpoint {
    pub(crate) fn new(protocol: Protocol, name: &str, base_url: &str) -> Result<Self, LlmError> {
        let options = HttpOptions::default();
        let mut endpoint = Self {
            name: name.to_string(),
            http: std::sync::OnceLock::new(),
            base_url: String::new(),
            caps: Capabilities::of(protocol),
            options,
            protocol,
        };
        endpoint.set_base_url(base_url);
        Ok(endpoint)
    }

    /// Normalized with [`normalize_base_url`] (a trailing slash, or a path segment the adapter
    /// appends itself, is dropped). OpenAI Chat's max-token field follows the endpoint
    /// (`max_completion_tokens` for OpenAI itself, `max_tokens` elsewhere).
    pub fn set_base_url(&mut self, base_url: &str) {
        self.http = std::sync::OnceLock::new();
        self.base_url = normalize_base_url(self.protocol, base_url);
        if self.protocol == Protocol::OpenaiChat {
            self.caps.max_tokens_field = MaxTokensField::default_for(&self.base_url).key();
        }
    }

    /// New capabilities; the max-token field chosen for this endpoint is kept.
    pub fn set_capabilities(&mut self, caps: Capabilities) {
        let field = self.caps.max_tokens_field;
        self.caps = caps;
        self.caps.max_tokens_field = field;
    }

    pub fn set_options(&mut self, options: HttpOptions) -> Result<(), LlmError> {
        self.http = std::sync::OnceLock::new();
        self.options = options;
        Ok(())
    }

    /// A POST to `url` on this endpoint's client (built now if this is the first request).
    pub fn post(&self, url: String) -> Result<reqwest::RequestBuilder, LlmError> {
        let client = match self.http.get() {
            Some(client) => client,
            None => {
                let built = self.options.client(&self.base_url)?;
                self.http.get_or_init(|| built)
            }
        };
        Ok(client.post(url))
    }

    /// Sends `request` under this endpoint's options and returns its canonical event stream
    /// (see [`send_streaming`]).
    pub(crate) async fn send(
        &self,
        request: reqwest::RequestBuilder,
        state: Box<dyn StreamState>,
    ) -> Result<EventStream, LlmError> {
        send_streaming(request, state, &self.options, &self.name).await
    }
}

/// The builder methods every HTTP provider (a struct with an `endpoint: Endpoint`) offers.
macro_rules! endpoint_builders {
    () => {
        /// Points the provider at another server (a proxy, a compatible server, wiremock).
        pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
            self.endpoint.set_base_url(&base_url.into());
            self
        }

        /// The provider's name from config, for logs and errors.
        pub fn with_name(mut self, name: impl Into<String>) -> Self {
            self.endpoint.name = name.into();
            self
        }

        /// The target's capabilities (from the capability table, with config overrides).
        pub fn with_capabilities(mut self, caps: $crate::capability::Capabilities) -> Self {
            self.endpoint.set_capabilities(caps);
            self
        }

        pub fn with_options(
            mut self,
            options: $crate::http::HttpOptions,
        ) -> Result<Self, $crate::error::LlmError> {
            self.endpoint.set_options(options)?;
            Ok(self)
        }
    };
}
pub(crate) use endpoint_builders;

/// Sends `request` and returns its canonical event stream. The request deadline starts now:
/// whoever calls this has already waited for any slot it needed (`max_concurrency`), and that
/// wait is not counted. `provider` names the provider in errors.
pub(crate) async fn send_streaming(
    request: reqwest::RequestBuilder,
    state: Box<dyn StreamState>,
    options: &HttpOptions,
    provider: &str,
) -> Result<EventStream, LlmError> {
    let started = Instant::now();
    // Waiting for the headers counts against the request deadline, and only against it.
    let past_deadline = || LlmError::DeadlineExceeded {
        deadline: options.request_deadline,
        provider: provider.to_string(),
    };
    let response = match tokio::time::timeout(options.request_deadline, request.send()).await {
        Ok(sent) => sent?,
        Err(_) => return Err(past_deadline()),
    };
    // An error body is read under the same deadlines: a server that announces one and stalls
    // must not hold the turn.
    let status = response.status();
    let remaining = options
        .request_deadline
        .saturating_sub(started.elapsed())
        .min(options.idle_timeout);
    let response = match tokio::time::timeout(remaining, check_status(response)).await {
        Ok(checked) => checked?,
        Err(_) => {
            return Err(LlmError::Http {
                status: status.as_u16(),
                body: "(the error body did not arrive within the request's deadline)".into(),
                retry_after: None,
            });
        }
    };
    Ok(decode_stream(
        response.bytes_stream(),
        state,
        options,
        started,
        provider,
    ))
}

/// Decodes a response body into canonical events, under `options`' limits:
/// - a body silent for the idle timeout ends with [`LlmError::Stalled`];
/// - a response not complete by `started + request_deadline` ends with
///   [`LlmError::DeadlineExceeded`], however much it is still sending;
/// - a response past `max_response_bytes` ends with [`LlmError::ResponseTooLarge`].
///
/// In each case the connection is dropped on our side, and nothing is claimed about whether the
/// provider finished (or billed) the response. The errors name `provider` and the setting.
pub fn decode_stream<S, E>(
    body: S,
    mut state: Box<dyn StreamState>,
    options: &HttpOptions,
    started: Instant,
    provider: &str,
) -> EventStream
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<LlmError> + Send + 'static,
{
    let idle = options.idle_timeout;
    let request_deadline = options.request_deadline;
    let deadline = started + request_deadline;
    let limits = options.sse_limits;
    let mut cap = ResponseCap::new(options.max_response_bytes);
    let provider = provider.to_string();
    Box::pin(async_stream::try_stream! {
        let mut body = std::pin::pin!(body);
        let mut decoder = SseDecoder::new(limits);
        let mut out = Vec::new();
        let past_deadline = || LlmError::DeadlineExceeded {
            deadline: request_deadline,
            provider: provider.clone(),
        };
        loop {
            // A body that is always ready never meets a timer: check the clock as well.
            let now = Instant::now();
            if now >= deadline {
                Err(past_deadline())?;
            }
            let idle_until = now + idle;
            let chunk = match tokio::time::timeout_at(idle_until.min(deadline), body.next()).await {
                Ok(Some(chunk)) => chunk.map_err(Into::into)?,
                Ok(None) => break,
                Err(_) if deadline <= idle_until => Err(past_deadline())?,
                Err(_) => Err(LlmError::Stalled { idle, provider: provider.clone() })?,
            };
            cap.wire(chunk.len())?;
            decoder.feed(&chunk, &mut |event| state.on_sse(event, &mut out))?;
            for event in out.drain(..) {
                cap.admit(&event)?;
                yield event;
            }
        }
        state.on_end(&mut out)?;
        for event in out.drain(..) {
            cap.admit(&event)?;
            yield event;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Protocol;
    use crate::providers::stream_state;
    use crate::stream::StreamEvent;

    #[test]
    fn only_plain_http_endpoints_go_without_trust_roots() {
        for url in [
            "http://localhost:11434/v1",
            "HTTP://127.0.0.1:9",
            "http://x",
        ] {
            assert!(is_plain_http(url), "{url}");
        }
        for url in [
            "https://api.anthropic.com",
            "HTTPS://x",
            "http:/x",
            "",
            "ftp://x",
        ] {
            assert!(!is_plain_http(url), "{url}");
        }
        // Both kinds build.
        let options = HttpOptions::default();
        options.client("http://127.0.0.1:9").unwrap();
        options.client("https://api.anthropic.com").unwrap();
    }

    fn chunk(s: &'static str) -> Result<Bytes, LlmError> {
        Ok(Bytes::from_static(s.as_bytes()))
    }

    fn idle(secs: u64) -> HttpOptions {
        HttpOptions {
            idle_timeout: Duration::from_secs(secs),
            ..HttpOptions::default()
        }
    }

    const PING: &str = ": ping\n\n";
    const EMPTY_DELTA: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{}}]}\n\n";

    #[tokio::test(start_paused = true)]
    async fn keepalives_and_empty_deltas_do_not_extend_the_request_deadline() {
        let body = async_stream::stream! {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                yield chunk(PING);
                tokio::time::sleep(Duration::from_secs(1)).await;
                yield chunk(EMPTY_DELTA);
            }
        };
        let options = HttpOptions {
            request_deadline: Duration::from_secs(60),
            ..idle(30)
        };
        let started = Instant::now();
        let stream = decode_stream(
            body,
            stream_state(Protocol::OpenaiChat),
            &options,
            started,
            "lab",
        );
        let err = crate::builder::collect(stream).await.unwrap_err();
        assert!(
            matches!(err, LlmError::DeadlineExceeded { deadline, .. } if deadline == Duration::from_secs(60)),
            "{err}"
        );
        assert!(
            err.to_string()
                .starts_with("request_deadline_secs=60 exceeded for provider 'lab'"),
            "{err}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_is_always_ready_still_meets_the_deadline() {
        let body = async_stream::stream! {
            loop {
                // No timer ever waits: only the clock can end this.
                tokio::time::advance(Duration::from_millis(10)).await;
                yield chunk(PING);
            }
        };
        let options = HttpOptions {
            request_deadline: Duration::from_secs(5),
            ..idle(30)
        };
        let stream = decode_stream(
            body,
            stream_state(Protocol::OpenaiChat),
            &options,
            Instant::now(),
            "lab",
        );
        let err = crate::builder::collect(stream).await.unwrap_err();
        assert!(matches!(err, LlmError::DeadlineExceeded { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_response_past_the_cap_ends_with_a_clear_error() {
        let body = futures::stream::iter(std::iter::repeat_with(|| {
            chunk(
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"0123456789abcdef\"}}]}\n\n",
            )
        }));
        let options = HttpOptions {
            max_response_bytes: 1000,
            ..idle(30)
        };
        let stream = decode_stream(
            body,
            stream_state(Protocol::OpenaiChat),
            &options,
            Instant::now(),
            "lab",
        );
        let err = crate::builder::collect(stream).await.unwrap_err();
        assert!(
            matches!(err, LlmError::ResponseTooLarge { limit: 1000, .. }),
            "{err}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_ends_at_the_idle_deadline() {
        let body = futures::stream::iter([chunk(
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n",
        )])
        .chain(futures::stream::pending());
        let state = stream_state(Protocol::Anthropic);
        let started = tokio::time::Instant::now();
        let mut events = decode_stream(body, state, &idle(30), Instant::now(), "lab");
        assert_eq!(
            events.next().await.unwrap().unwrap(),
            StreamEvent::TextDelta {
                index: 0,
                text: "hi".into()
            }
        );
        let err = events.next().await.unwrap().unwrap_err();
        assert!(matches!(err, LlmError::Stalled { idle, .. } if idle == Duration::from_secs(30)));
        assert!(
            err.to_string()
                .starts_with("idle_timeout_secs=30 exceeded for provider 'lab'"),
            "{err}"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert!(events.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_but_live_body_is_not_stalled() {
        let body = async_stream::stream! {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                yield chunk("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n");
            }
            yield chunk("data: [DONE]\n\n");
        };
        let state = stream_state(Protocol::OpenaiChat);
        let stream = decode_stream(body, state, &idle(30), Instant::now(), "lab");
        let c = crate::builder::collect(stream).await.unwrap();
        assert_eq!(c.message.text(), "xxxxx");
    }

    #[tokio::test]
    async fn an_oversized_line_ends_the_stream_with_a_decode_error() {
        let body = futures::stream::iter([chunk("data: 0123456789abcdef0123456789")]);
        let options = HttpOptions {
            sse_limits: SseLimits {
                max_line: 16,
                max_event: 64,
            },
            ..idle(1)
        };
        let state = stream_state(Protocol::OpenaiChat);
        let mut events = decode_stream(body, state, &options, Instant::now(), "lab");
        assert!(matches!(
            events.next().await.unwrap(),
            Err(LlmError::Decode(m)) if m.contains("16 bytes")
        ));
    }
}
