//! Throughput of the streaming hot path.
//!
//! - `sse_decode`: SseDecoder over a 16 MiB body of recorded Anthropic events, fed in 1 KiB and
//!   64 KiB chunks (target: ≥ 1 GB/s at 64 KiB).
//! - `anthropic_pipeline`: decode → AnthropicStreamState → MessageBuilder over one response of
//!   100,000 text deltas (target: ≥ 1M events/s).
//!
//! Run: `cargo bench -p anvil-llm`.

use anvil_llm::MessageBuilder;
use anvil_llm::protocol::Protocol;
use anvil_llm::providers::stream_state;
use anvil_llm::sse::{SseDecoder, SseError, SseLimits};
use divan::counter::{BytesCount, ItemsCount};
use divan::{Bencher, black_box};

fn main() {
    divan::main();
}

const BODY_BYTES: usize = 16 * 1024 * 1024;
const DELTAS: usize = 100_000;

/// A recorded Anthropic stream (real whitespace padding and all), repeated to 16 MiB.
fn recorded_body() -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/anthropic/04-thinking-signature.sse");
    let one = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut body = Vec::with_capacity(BODY_BYTES + one.len());
    while body.len() < BODY_BYTES {
        body.extend_from_slice(&one);
    }
    body
}

/// One Anthropic response with `DELTAS` text deltas, padded the way the API pads them.
fn synthetic_response() -> (Vec<u8>, usize) {
    let mut body = String::new();
    body.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":120,\"output_tokens\":1}}}\n\n");
    body.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    for i in 0..DELTAS {
        body.push_str(&format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"token {i} \"}}     }}\n\n"
        ));
    }
    body.push_str(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    );
    body.push_str("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":100000}}\n\n");
    body.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    (body.into_bytes(), DELTAS + 5)
}

#[divan::bench(args = [1024, 65536])]
fn sse_decode(bencher: Bencher, chunk: usize) {
    let body = recorded_body();
    bencher.counter(BytesCount::new(body.len())).bench(|| {
        let mut decoder = SseDecoder::new(SseLimits::default());
        let mut events = 0usize;
        let mut data_bytes = 0usize;
        for piece in body.chunks(chunk) {
            decoder
                .feed(black_box(piece), &mut |e| {
                    events += 1;
                    data_bytes += e.data.len();
                    Ok::<(), SseError>(())
                })
                .unwrap_or_else(|e| panic!("{e}"));
        }
        (events, data_bytes)
    });
}

#[divan::bench(args = [65536])]
fn anthropic_pipeline(bencher: Bencher, chunk: usize) {
    let (body, events) = synthetic_response();
    bencher.counter(ItemsCount::new(events)).bench(|| {
        let mut decoder = SseDecoder::new(SseLimits::default());
        let mut state = stream_state(Protocol::Anthropic);
        let mut builder = MessageBuilder::new();
        let mut canonical = Vec::with_capacity(1024);
        for piece in body.chunks(chunk) {
            decoder
                .feed(piece, &mut |e| state.on_sse(e, &mut canonical))
                .unwrap_or_else(|e| panic!("{e}"));
            for e in canonical.drain(..) {
                builder.push(&e).unwrap_or_else(|e| panic!("{e}"));
            }
        }
        state
            .on_end(&mut canonical)
            .unwrap_or_else(|e| panic!("{e}"));
        for e in canonical.drain(..) {
            builder.push(&e).unwrap_or_else(|e| panic!("{e}"));
        }
        builder.finish().unwrap_or_else(|e| panic!("{e}"))
    });
}
