//! Refusing a stdio server's oversized or unreadable message cleanly.
//!
//! rmcp's line codec drops a line longer than 16 MiB, or one that is not JSON (invalid UTF-8,
//! nesting deeper than serde_json's 128 levels), silently, so the call it answered would wait
//! for its timeout. [`LineLimit`] (sans IO) sits in front of it and passes each line on whole
//! once it is complete and parses: a line that grows past [`MAX_LINE`] is dropped as it
//! arrives (memory stays bounded), and in place of a dropped or unparsable line goes a
//! JSON-RPC error for the request it answered (its id is read from the line's start or end),
//! so the call ends at once with an error result saying what was wrong.

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
    /// The line so far (until it is over the limit).
    line: Vec<u8>,
}

impl LineLimit {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            len: 0,
            head: Vec::with_capacity(HEAD),
            tail: Vec::with_capacity(2 * HEAD),
            over: false,
            line: Vec::new(),
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
                if self.len + piece.len() <= self.limit {
                    self.line.extend_from_slice(piece);
                } else {
                    self.over = true;
                    self.line = Vec::new();
                }
            }
            self.len += piece.len();
            if newline {
                if self.over {
                    let why = format!(
                        "the server's message was {:.1} MiB, over the {} MiB anvil accepts; it was refused",
                        self.len as f64 / (1024.0 * 1024.0),
                        self.limit / (1024 * 1024)
                    );
                    out.extend_from_slice(self.refusal(&why).as_bytes());
                } else if let Err(e) = readable(&self.line) {
                    let why = format!("the server's message is not JSON ({e}); it was refused");
                    out.extend_from_slice(self.refusal(&why).as_bytes());
                } else {
                    out.extend_from_slice(&self.line);
                    out.push(b'\n');
                }
                self.len = 0;
                self.head.clear();
                self.tail.clear();
                self.over = false;
                self.line.clear();
            }
        }
    }

    /// The error line standing in for a refused message.
    fn refusal(&self, message: &str) -> String {
        let id = last_id(&self.tail)
            .or_else(|| first_id(&self.head))
            .unwrap_or_else(|| "null".into());
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

/// Whether rmcp can read `line`: UTF-8, nested at most [`MAX_DEPTH`] deep (serde_json's
/// limit), and JSON. Why not, otherwise.
fn readable(line: &[u8]) -> Result<(), String> {
    std::str::from_utf8(line).map_err(|e| e.to_string())?;
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in line {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if deepest > MAX_DEPTH {
        return Err(format!("nested {deepest} levels deep, over {MAX_DEPTH}"));
    }
    serde_json::from_slice::<serde::de::IgnoredAny>(line)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// serde_json's recursion limit: a deeper message is one rmcp cannot parse.
const MAX_DEPTH: usize = 127;

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
        assert_eq!(lines.len(), 2, "{out}");
        let err: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(err["id"], 7);
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains("over the")
        );
        assert_eq!(lines[1], "{\"id\":8}", "the next message is untouched");
    }

    #[test]
    fn the_id_is_found_at_the_end_as_the_typescript_sdk_writes_it() {
        let big = format!(
            "{{\"result\":{{\"content\":[{{\"id\":99,\"text\":\"{}\"}}]}},\"jsonrpc\":\"2.0\",\"id\":12}}\n",
            "w".repeat(400)
        );
        let out = run(64, &[big.as_bytes()]);
        let err: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
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
        let err: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
        assert_eq!(err["id"], "req-1");
    }

    #[test]
    fn a_line_that_is_not_json_is_an_error_for_its_request_not_a_silent_drop() {
        let deep = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}{}}}\n",
            "[".repeat(5000),
            "]".repeat(5000)
        );
        let mut bad_utf8 = b"{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"t\":\"".to_vec();
        bad_utf8.extend_from_slice(&[0xff, 0xfe]);
        bad_utf8.extend_from_slice(b"\"}}\n");
        let out = run(MAX_LINE, &[deep.as_bytes(), &bad_utf8]);
        let lines: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert_eq!(lines[0]["id"], 3);
        assert_eq!(lines[1]["id"], 4);
        assert!(
            lines[0]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not JSON")
        );
    }
}
