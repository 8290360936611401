//! The thin I/O wrapper every adapter shares: send a request, check the status, and run the
//! body through the SSE decoder and the adapter's [`StreamState`].

use std::time::Duration;

use futures::StreamExt;

use crate::error::{LlmError, check_status};
use crate::protocol::StreamState;
use crate::provider::EventStream;
use crate::sse::{SseLimits, sse_events};

/// Deadlines and limits for one streaming request. Every wait is finite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpOptions {
    /// Establishing the connection.
    pub connect_timeout: Duration,
    /// From sending the request to the response headers (a long prompt can take a while).
    pub response_timeout: Duration,
    /// The longest silence allowed between two body chunks.
    pub idle_timeout: Duration,
    pub sse_limits: SseLimits,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(120),
            sse_limits: SseLimits::default(),
        }
    }
}

impl HttpOptions {
    /// A client with this connect timeout (rustls, no proxy surprises beyond reqwest's own).
    pub fn client(&self) -> Result<reqwest::Client, LlmError> {
        reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .build()
            .map_err(|e| LlmError::Config(format!("could not build the HTTP client: {e}")))
    }
}

/// Sends `request` and returns its canonical event stream.
pub(crate) async fn send_streaming(
    request: reqwest::RequestBuilder,
    mut state: Box<dyn StreamState>,
    options: &HttpOptions,
) -> Result<EventStream, LlmError> {
    let response = match tokio::time::timeout(options.response_timeout, request.send()).await {
        Ok(sent) => sent?,
        Err(_) => {
            return Err(LlmError::Stalled {
                idle: options.response_timeout,
            });
        }
    };
    let response = check_status(response).await?;
    let sse = sse_events(response.bytes_stream(), options.sse_limits, options.idle_timeout);
    Ok(Box::pin(async_stream::try_stream! {
        let mut sse = std::pin::pin!(sse);
        let mut out = Vec::new();
        while let Some(event) = sse.next().await {
            state.on_sse(&event?, &mut out)?;
            for e in out.drain(..) {
                yield e;
            }
        }
        state.on_end(&mut out)?;
        for e in out.drain(..) {
            yield e;
        }
    }))
}
