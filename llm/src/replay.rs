//! In-memory replay of recorded response bodies: decoder → the adapter's stream state →
//! builder, with no I/O. The same path a live stream takes in [`crate::http`], for fixtures,
//! the `replay` example and benchmarks.

use crate::builder::{Completion, MessageBuilder};
use crate::error::LlmError;
use crate::protocol::Protocol;
use crate::providers::stream_state;
use crate::sse::{SseDecoder, SseLimits};

/// Runs a recorded response body through decoder → stream state → builder, in memory.
pub fn replay_body(protocol: Protocol, body: &[u8]) -> Result<Completion, LlmError> {
    replay_chunks(protocol, std::iter::once(body))
}

/// Like [`replay_body`], with the body arriving in the given chunks.
pub fn replay_chunks<'a>(
    protocol: Protocol,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Completion, LlmError> {
    let mut decoder = SseDecoder::new(SseLimits::default());
    let mut state = stream_state(protocol);
    let mut builder = MessageBuilder::new();
    let mut events = Vec::new();
    for chunk in chunks {
        decoder.feed(chunk, &mut |e| state.on_sse(e, &mut events))?;
        for e in events.drain(..) {
            builder.push(&e)?;
        }
    }
    state.on_end(&mut events)?;
    for e in events.drain(..) {
        builder.push(&e)?;
    }
    builder.finish()
}
