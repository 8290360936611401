//! Server-sent events: a sans-IO decoder ([`SseDecoder`]) and a thin async wrapper over a body
//! stream ([`sse_events`]) that adds the idle deadline.
//!
//! Follows the WHATWG event-stream rules: a leading UTF-8 BOM is dropped; lines end with LF,
//! CRLF or a lone CR (also when the CR and LF arrive in different chunks); `:` lines are
//! comments; `field: value` loses one leading space; an event is dispatched at a blank line
//! only if it had at least one `data` line; an event still open at end of input is discarded.

use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};

use crate::error::LlmError;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, if the event had one.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Bounds that keep a hostile or broken server from making the decoder allocate without limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseLimits {
    /// The longest line, in bytes, without its line ending.
    pub max_line: usize,
    /// The most data one event may accumulate, in bytes.
    pub max_event: usize,
}

impl Default for SseLimits {
    fn default() -> Self {
        // Tool-call arguments for a whole file arrive as many small deltas, so single lines stay
        // small in practice; 4 MiB lines and 16 MiB events leave room for inline images.
        Self {
            max_line: 4 * 1024 * 1024,
            max_event: 16 * 1024 * 1024,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an SSE line exceeds the limit of {limit} bytes")]
    LineTooLong { limit: usize },
    #[error("an SSE event's data exceeds the limit of {limit} bytes")]
    EventTooLarge { limit: usize },
}

impl From<SseError> for LlmError {
    fn from(e: SseError) -> Self {
        LlmError::Decode(e.to_string())
    }
}

/// The sans-IO event-stream decoder. Feed it chunks with [`push`](Self::push) as they arrive.
#[derive(Debug)]
pub struct SseDecoder {
    limits: SseLimits,
    /// Bytes of a line that started in an earlier chunk.
    partial: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF in this chunk belongs to it.
    after_cr: bool,
    /// Still at the very start of the stream, where a BOM may sit (possibly split).
    at_start: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new(SseLimits::default())
    }
}

impl SseDecoder {
    pub fn new(limits: SseLimits) -> Self {
        Self {
            limits,
            partial: Vec::new(),
            after_cr: false,
            at_start: true,
            event: None,
            data: String::new(),
            has_data: false,
        }
    }

    /// Decodes one chunk, returning the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut out = Vec::new();
        self.push_into(chunk, &mut out)?;
        Ok(out)
    }

    /// Like [`push`](Self::push), appending to `out` (lets a hot loop reuse one buffer).
    pub fn push_into(&mut self, mut chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if self.at_start {
            // The BOM may itself be split across chunks: hold bytes until we can tell.
            self.partial.extend_from_slice(chunk);
            if self.partial.len() < BOM.len() && BOM.starts_with(&self.partial) {
                return Ok(());
            }
            self.at_start = false;
            let held = std::mem::take(&mut self.partial);
            let rest = held.strip_prefix(BOM).unwrap_or(&held);
            return self.push_into(rest, out);
        }
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', chunk) {
            let line_end = pos;
            let mut next = pos + 1;
            if chunk[pos] == b'\r' {
                match chunk.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            if self.partial.is_empty() {
                self.check_line(line_end)?;
                self.line(&chunk[..line_end], out)?;
            } else {
                self.check_line(self.partial.len() + line_end)?;
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&chunk[..line_end]);
                self.line(&line, out)?;
                line.clear();
                self.partial = line; // keep the allocation
            }
            chunk = &chunk[next..];
        }
        if !chunk.is_empty() {
            self.check_line(self.partial.len() + chunk.len())?;
            self.partial.extend_from_slice(chunk);
        }
        Ok(())
    }

    /// Ends the input. An event without its closing blank line is discarded, never invented.
    pub fn finish(self) -> Vec<SseEvent> {
        Vec::new()
    }

    fn check_line(&self, len: usize) -> Result<(), SseError> {
        if len > self.limits.max_line {
            Err(SseError::LineTooLong {
                limit: self.limits.max_line,
            })
        } else {
            Ok(())
        }
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                out.push(SseEvent {
                    event: self.event.take(),
                    data: std::mem::take(&mut self.data),
                });
            } else {
                self.event = None;
            }
            self.has_data = false;
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                let added = value.len() + usize::from(self.has_data);
                if self.data.len() + added > self.limits.max_event {
                    return Err(SseError::EventTooLarge {
                        limit: self.limits.max_event,
                    });
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&utf8(value));
                self.has_data = true;
            }
            b"event" => self.event = Some(utf8(value).into_owned()),
            // `id` and `retry` steer reconnection, which anvil never does mid-response; other
            // field names are ignored by the spec.
            _ => {}
        }
        Ok(())
    }
}

fn utf8(bytes: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

/// Decodes a byte stream into SSE events, ending with [`LlmError::Stalled`] when no chunk arrives
/// for `idle`.
pub fn sse_events<S, E>(
    body: S,
    limits: SseLimits,
    idle: Duration,
) -> impl Stream<Item = Result<SseEvent, LlmError>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<LlmError> + Send + 'static,
{
    async_stream::try_stream! {
        let mut decoder = SseDecoder::new(limits);
        let mut body = std::pin::pin!(body);
        let mut events = Vec::new();
        loop {
            let chunk = match tokio::time::timeout(idle, body.next()).await {
                Ok(Some(chunk)) => chunk.map_err(Into::into)?,
                Ok(None) => break,
                Err(_) => Err(LlmError::Stalled { idle })?,
            };
            decoder.push_into(&chunk, &mut events)?;
            for event in events.drain(..) {
                yield event;
            }
        }
        for event in decoder.finish() {
            yield event;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.into(),
        }
    }

    fn decode(input: &[u8]) -> Vec<SseEvent> {
        let mut d = SseDecoder::default();
        let mut out = d.push(input).unwrap();
        out.extend(d.finish());
        out
    }

    /// Every way of cutting `input` in two, and byte by byte, gives the same events as one push.
    fn assert_chunking_invariant(input: &[u8]) -> Vec<SseEvent> {
        let whole = decode(input);
        for cut in 0..=input.len() {
            let mut d = SseDecoder::default();
            let mut out = d.push(&input[..cut]).unwrap();
            out.extend(d.push(&input[cut..]).unwrap());
            out.extend(d.finish());
            assert_eq!(out, whole, "split at byte {cut}");
        }
        let mut d = SseDecoder::default();
        let mut out = Vec::new();
        for b in input {
            out.extend(d.push(std::slice::from_ref(b)).unwrap());
        }
        out.extend(d.finish());
        assert_eq!(out, whole, "byte by byte");
        whole
    }

    #[test]
    fn the_chunking_fixture() {
        let input = "event: a\ndata: line one\ndata: line two\n\n\
                     : a comment\n\n\
                     event: b\r\ndata: crlf\r\n\r\n\
                     data: emoji \u{1F980} ok\n\n";
        let events = assert_chunking_invariant(input.as_bytes());
        assert_eq!(
            events,
            vec![
                ev(Some("a"), "line one\nline two"),
                ev(Some("b"), "crlf"),
                ev(None, "emoji \u{1F980} ok"),
            ]
        );
    }

    #[test]
    fn bom_is_dropped_and_the_data_field_kept() {
        let events = assert_chunking_invariant(b"\xEF\xBB\xBFdata: x\n\n");
        assert_eq!(events, vec![ev(None, "x")]);
        // A BOM later in the stream is content, not a marker.
        let events = decode(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n");
        assert_eq!(events, vec![ev(None, "a")]);
    }

    #[test]
    fn lf_crlf_and_lone_cr_line_endings() {
        for input in [
            &b"event: e\ndata: x\n\n"[..],
            b"event: e\r\ndata: x\r\n\r\n",
            b"event: e\rdata: x\r\r",
        ] {
            assert_eq!(assert_chunking_invariant(input), vec![ev(Some("e"), "x")]);
        }
        // A lone CR followed by a blank CRLF line: two line ends, not one.
        assert_eq!(
            assert_chunking_invariant(b"data: x\r\r\ndata: y\n\n"),
            vec![ev(None, "x"), ev(None, "y")]
        );
    }

    #[test]
    fn comments_are_ignored() {
        assert_eq!(
            assert_chunking_invariant(b": OPENROUTER PROCESSING\n\n:\ndata: x\n: mid\n\n"),
            vec![ev(None, "x")]
        );
    }

    #[test]
    fn an_event_with_no_data_lines_is_not_dispatched() {
        assert_eq!(
            assert_chunking_invariant(b"event: ping\n\ndata: x\n\n"),
            vec![ev(None, "x")]
        );
    }

    #[test]
    fn empty_data_is_dispatched_as_empty() {
        assert_eq!(
            assert_chunking_invariant(b"data:\n\ndata\n\n"),
            vec![ev(None, ""), ev(None, "")]
        );
    }

    #[test]
    fn multi_line_data_and_space_rules() {
        assert_eq!(
            assert_chunking_invariant(b"data:x\ndata: x\ndata:  two\ndata\n\n"),
            vec![ev(None, "x\nx\n two\n")]
        );
    }

    #[test]
    fn incomplete_event_at_eof_is_discarded() {
        assert_eq!(assert_chunking_invariant(b"data: a\n\ndata: b\n"), vec![ev(None, "a")]);
        assert_eq!(assert_chunking_invariant(b"data: a\n\ndata: b"), vec![ev(None, "a")]);
    }

    #[test]
    fn unknown_fields_and_id_are_ignored() {
        assert_eq!(
            assert_chunking_invariant(b"id: 7\nretry: 10\nfoo: bar\ndata: x\n\n"),
            vec![ev(None, "x")]
        );
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        assert_eq!(decode(b"data: \xFF\n\n"), vec![ev(None, "\u{FFFD}")]);
    }

    #[test]
    fn an_oversized_line_fails_without_buffering_it() {
        let limits = SseLimits {
            max_line: 16,
            max_event: 1024,
        };
        let mut d = SseDecoder::new(limits);
        assert!(d.push(b"data: 0123456789").is_ok());
        // Never terminated: the decoder refuses as soon as the line passes the limit.
        assert_eq!(
            d.push(b"abcdef"),
            Err(SseError::LineTooLong { limit: 16 })
        );
        assert!(d.partial.capacity() < 1024);
        // A complete oversized line in one chunk is refused too.
        let mut d = SseDecoder::new(limits);
        assert_eq!(
            d.push(b"data: 0123456789abcdef\n\n"),
            Err(SseError::LineTooLong { limit: 16 })
        );
    }

    #[test]
    fn an_oversized_event_fails() {
        let mut d = SseDecoder::new(SseLimits {
            max_line: 64,
            max_event: 10,
        });
        assert!(d.push(b"data: 12345\n").is_ok());
        assert_eq!(
            d.push(b"data: 67890\n"),
            Err(SseError::EventTooLarge { limit: 10 })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_body_ends_at_the_idle_deadline() {
        let first: Result<Bytes, LlmError> = Ok(Bytes::from_static(b"data: hello\n\n"));
        let body = futures::stream::iter([first]).chain(futures::stream::pending());
        let started = tokio::time::Instant::now();
        let mut events = Box::pin(sse_events(body, SseLimits::default(), Duration::from_secs(30)));
        assert_eq!(events.next().await.unwrap().unwrap(), ev(None, "hello"));
        let err = events.next().await.unwrap().unwrap_err();
        assert!(matches!(err, LlmError::Stalled { idle } if idle == Duration::from_secs(30)));
        assert_eq!(started.elapsed(), Duration::from_secs(30));
        assert!(events.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_but_live_body_is_not_stalled() {
        let body = async_stream::stream! {
            for i in 0..5 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                yield Ok::<_, LlmError>(Bytes::from(format!("data: {i}\n\n")));
            }
        };
        let events: Vec<_> = sse_events(body, SseLimits::default(), Duration::from_secs(30))
            .collect()
            .await;
        assert_eq!(events.len(), 5);
        assert!(events.iter().all(Result::is_ok));
    }
}
