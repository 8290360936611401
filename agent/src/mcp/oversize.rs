//! Refusing an oversized message from a stdio server cleanly.
//!
//! rmcp's line codec drops a line longer than 16 MiB silently, so the call it answered would
//! wait for its timeout. [`LineLimit`] (sans IO) sits in front of it: a line that grows past
//! [`MAX_LINE`] is cut there (what was passed becomes an unparsable line, which rmcp ignores),
//! the rest of it is skipped as it arrives — memory stays bounded — and in its place goes a
//! JSON-RPC error for the request it answered (its id is read from the line's start), so the
//! call ends at once with an error result saying how big the response was.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// The longest line passed to the codec.
pub const MAX_LINE: usize = 12 * 1024 * 1024;

/// Bytes kept from a line's start to find its `"id"`.
const HEAD: usize = 512;

#[derive(Debug)]
pub struct LineLimit {
    limit: usize,
    len: usize,
    head: Vec<u8>,
    /// The line's last bytes (the TypeScript SDK writes `"id"` last).
    tail: Vec<u8>,
    over: bool,
}

impl LineLimit {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            len: 0,
            head: Vec::with_capacity(HEAD),
            tail: Vec::with_capacity(2 * HEAD),
            over: false,
        }
    }

    /// Passes `input` through to `out`, cutting lines over the limit.
    pub fn push(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        while !input.is_empty() {
            let (piece, newline) = match memchr::memchr(b'\n', input) {
                Some(i) => (&input[..i], true),
                None => (input, false),
            };
            input = &input[piece.len() + usize::from(newline)..];
            if self.head.len() < HEAD {
                let take = (HEAD - self.head.len()).min(piece.len());
                self.head.extend_from_slice(&piece[..take]);
            }
            self.tail
                .extend_from_slice(&piece[piece.len().saturating_sub(HEAD)..]);
            if self.tail.len() > HEAD {
                let cut = self.tail.len() - HEAD;
                self.tail.drain(..cut);
            }
            if !self.over {
                let room = self.limit - self.len;
                if piece.len() <= room {
                    out.extend_from_slice(piece);
                } else {
                    out.extend_from_slice(&piece[..room]);
                    out.push(b'\n');
                    self.over = true;
                }
            }
            self.len += piece.len();
            if newline {
                if self.over {
                    out.extend_from_slice(self.refusal().as_bytes());
                } else {
                    out.push(b'\n');
                }
                self.len = 0;
                self.head.clear();
                self.tail.clear();
                self.over = false;
            }
        }
    }

    /// The error line standing in for the refused message.
    fn refusal(&self) -> String {
        let id = last_id(&self.tail)
            .or_else(|| first_id(&self.head))
            .unwrap_or_else(|| "null".into());
        let message = format!(
            "the server's message was {:.1} MiB, over the {} MiB anvil accepts; it was refused",
            self.len as f64 / (1024.0 * 1024.0),
            self.limit / (1024 * 1024)
        );
        format!(
            "{}\n",
            serde_json::json!({
                "jsonrpc": "2.0",
                "id": serde_json::from_str::<serde_json::Value>(&id).unwrap_or_default(),
                "error": {"code": -32000, "message": message}
            })
        )
    }
}

/// The `"id"` key that opens a message (`{"jsonrpc":"2.0","id":7,"result":…`): the first one,
/// when it comes before `"result"` and `"error"`.
fn first_id(head: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    let at = text.find("\"id\"")?;
    let before_payload = ["\"result\"", "\"error\""]
        .iter()
        .filter_map(|k| text.find(k))
        .all(|k| k > at);
    before_payload
        .then(|| value_after(&text[at + 4..]))
        .flatten()
}

/// The `"id"` key that closes a message (`…,"jsonrpc":"2.0","id":7}`): the last one, when only
/// its value and the closing brace follow it.
fn last_id(tail: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(tail);
    let at = text.rfind("\"id\"")?;
    let value = value_after(&text[at + 4..])?;
    let rest = text[at + 4..].trim_start().strip_prefix(':')?.trim_start();
    (rest[value.len()..].trim() == "}").then_some(value)
}

/// The number or string after `: ` in `rest`, as JSON text.
fn value_after(rest: &str) -> Option<String> {
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        let end = s.find('"')?;
        return Some(format!("\"{}\"", &s[..end]));
    }
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    (!digits.is_empty()).then_some(digits)
}

/// [`LineLimit`] over a reader.
pub struct Limited<R> {
    inner: R,
    limit: LineLimit,
    pending: Vec<u8>,
    at: usize,
    buf: Vec<u8>,
}

impl<R> Limited<R> {
    pub fn new(inner: R, limit: usize) -> Self {
        Self {
            inner,
            limit: LineLimit::new(limit),
            pending: Vec::new(),
            at: 0,
            buf: vec![0; 64 * 1024],
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Limited<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.at < this.pending.len() {
                let n = (this.pending.len() - this.at).min(out.remaining());
                out.put_slice(&this.pending[this.at..this.at + n]);
                this.at += n;
                return Poll::Ready(Ok(()));
            }
            this.pending.clear();
            this.at = 0;
            let mut read = ReadBuf::new(&mut this.buf);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let filled = read.filled();
                    if filled.is_empty() {
                        return Poll::Ready(Ok(())); // EOF
                    }
                    this.limit.push(filled, &mut this.pending);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(limit: usize, chunks: &[&[u8]]) -> String {
        let mut l = LineLimit::new(limit);
        let mut out = Vec::new();
        for c in chunks {
            l.push(c, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lines_within_the_limit_pass_untouched_in_any_chunking() {
        let text = b"{\"id\":1}\n{\"id\":2,\"result\":{}}\n";
        assert_eq!(run(100, &[text]), String::from_utf8_lossy(text));
        let pieces: Vec<&[u8]> = text.chunks(3).collect();
        assert_eq!(run(100, &pieces), String::from_utf8_lossy(text));
    }

    #[test]
    fn an_oversized_line_becomes_an_error_for_its_request() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"{}\"}}\n",
            "x".repeat(300)
        );
        let out = run(64, &[big.as_bytes(), b"{\"id\":8}\n"]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(lines[0].len(), 64, "the cut part, unparsable");
        let err: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(err["id"], 7);
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains("refused")
        );
        assert_eq!(lines[2], "{\"id\":8}", "the next message is untouched");
    }

    #[test]
    fn the_id_is_found_at_the_end_as_the_typescript_sdk_writes_it() {
        let big = format!(
            "{{\"result\":{{\"content\":[{{\"id\":99,\"text\":\"{}\"}}]}},\"jsonrpc\":\"2.0\",\"id\":12}}\n",
            "w".repeat(400)
        );
        let out = run(64, &[big.as_bytes()]);
        let err: serde_json::Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
        assert_eq!(err["id"], 12, "the top-level id, not the nested one");
    }

    #[test]
    fn string_ids_and_byte_by_byte_arrival() {
        let big = format!(
            "{{\"id\": \"req-1\", \"result\": \"{}\"}}\n",
            "y".repeat(200)
        );
        let pieces: Vec<&[u8]> = big.as_bytes().chunks(1).collect();
        let out = run(50, &pieces);
        let err: serde_json::Value = serde_json::from_str(out.lines().nth(1).unwrap()).unwrap();
        assert_eq!(err["id"], "req-1");
    }
}
