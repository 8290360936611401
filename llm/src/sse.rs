//! Server-sent events: the sans-IO decoder ([`SseDecoder`]). The async body loop with its idle
//! deadline lives in `http.rs`.
//!
//! Follows the WHATWG event-stream rules: a leading UTF-8 BOM is dropped; lines end with LF,
//! CRLF or a lone CR (also when the CR and LF arrive in different chunks); `:` lines are
//! comments; `field: value` loses one leading space; an event is dispatched at a blank line
//! only if it had at least one `data` line; an event still open at end of input is discarded.

use std::borrow::Cow;

use crate::error::LlmError;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, if the event had one.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

impl SseEvent {
    pub fn as_ref(&self) -> SseEventRef<'_> {
        SseEventRef {
            event: self.event.as_deref(),
            data: &self.data,
        }
    }
}

/// A dispatched event borrowed from the decoder's buffers (the allocation-free path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEventRef<'a> {
    pub event: Option<&'a str>,
    pub data: &'a str,
}

impl SseEventRef<'_> {
    pub fn to_owned(&self) -> SseEvent {
        SseEvent {
            event: self.event.map(str::to_owned),
            data: self.data.to_owned(),
        }
    }
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
    /// The current event's `event:` field (valid when `has_event`); reused between events.
    event: String,
    has_event: bool,
    /// The current event's data; reused between events.
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
            event: String::new(),
            has_event: false,
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

    /// Like [`push`](Self::push), appending to `out`.
    pub fn push_into(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        self.feed(chunk, &mut |event: SseEventRef<'_>| {
            out.push(event.to_owned());
            Ok::<(), SseError>(())
        })
    }

    /// Decodes one chunk, handing each completed event to `on_event` as a borrow of the
    /// decoder's buffers. This path allocates nothing per event; the first error (the
    /// decoder's or the callback's) stops decoding.
    pub fn feed<E: From<SseError>>(
        &mut self,
        mut chunk: &[u8],
        on_event: &mut impl FnMut(SseEventRef<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.at_start {
            // The BOM may itself be split across chunks: hold bytes until we can tell.
            self.partial.extend_from_slice(chunk);
            if self.partial.len() < BOM.len() && BOM.starts_with(&self.partial) {
                return Ok(());
            }
            self.at_start = false;
            let held = std::mem::take(&mut self.partial);
            let rest = held.strip_prefix(BOM).unwrap_or(&held);
            return self.feed(rest, on_event);
        }
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', chunk) {
            let mut next = pos + 1;
            if chunk[pos] == b'\r' {
                match chunk.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            if self.partial.is_empty() {
                self.check_line(pos)?;
                self.line(&chunk[..pos], on_event)?;
            } else {
                self.check_line(self.partial.len() + pos)?;
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&chunk[..pos]);
                let result = self.line(&line, on_event);
                line.clear();
                self.partial = line; // keep the allocation
                result?;
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

    fn line<E: From<SseError>>(
        &mut self,
        line: &[u8],
        on_event: &mut impl FnMut(SseEventRef<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if line.is_empty() {
            let result = if self.has_data {
                on_event(SseEventRef {
                    event: self.has_event.then_some(self.event.as_str()),
                    data: &self.data,
                })
            } else {
                Ok(())
            };
            self.data.clear();
            self.has_data = false;
            self.event.clear();
            self.has_event = false;
            return result;
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
                    }
                    .into());
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&utf8(value));
                self.has_data = true;
            }
            b"event" => {
                self.event.clear();
                self.event.push_str(&utf8(value));
                self.has_event = true;
            }
            // `id` and `retry` steer reconnection, which anvil never does mid-response; other
            // field names are ignored by the spec.
            _ => {}
        }
        Ok(())
    }
}

/// UTF-8 with replacement characters for invalid bytes. `str::from_utf8` first: it is many
/// times faster than the lossy decoder on the (normal) valid input.
fn utf8(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
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
        assert_eq!(
            assert_chunking_invariant(b"data: a\n\ndata: b\n"),
            vec![ev(None, "a")]
        );
        assert_eq!(
            assert_chunking_invariant(b"data: a\n\ndata: b"),
            vec![ev(None, "a")]
        );
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
        assert_eq!(d.push(b"abcdef"), Err(SseError::LineTooLong { limit: 16 }));
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
}
