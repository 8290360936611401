//! Keeping credentials out of child processes and out of everything the model sees.
//!
//! - [`ChildEnv`]: subprocesses get an allowlisted environment plus an explicit passthrough
//!   list, never the whole parent environment (which holds provider API keys).
//! - [`Redactor`]: every value of a secret-looking variable in anvil's own environment, and
//!   every credential anvil registers (provider keys whatever their variable's name, MCP and
//!   HTTP header values), is replaced by `[REDACTED:NAME]` in every tool result, whatever
//!   printed it — in a subprocess's output before its capture is cut to a head and a tail
//!   ([`RedactingReader`]).

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// Variables a child process gets by default: enough for compilers, shells and test runners.
pub const DEFAULT_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TMPDIR",
    "TZ",
    "PWD",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "JAVA_HOME",
    "VIRTUAL_ENV",
    "PYENV_ROOT",
    "NVM_DIR",
    "CC",
    "CXX",
    "COLORTERM",
    "NO_COLOR",
];

/// Prefixes allowed as a family (`LC_ALL`, `LC_CTYPE`, …).
const ALLOWED_PREFIXES: &[&str] = &["LC_"];

/// Names that mark a variable as a credential.
const SECRET_MARKERS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
];

/// The environment for child processes.
#[derive(Debug, Clone, Default)]
pub struct ChildEnv {
    /// Extra variable names the user chose to pass through (trusted config only).
    pub passthrough: BTreeSet<String>,
    /// The environment to filter; `None` is this process's environment.
    base: Option<Vec<(String, String)>>,
}

impl ChildEnv {
    pub fn with_passthrough(names: impl IntoIterator<Item = String>) -> Self {
        Self {
            passthrough: names.into_iter().collect(),
            base: None,
        }
    }

    /// Filters `base` instead of this process's environment.
    pub fn with_base(mut self, base: Vec<(String, String)>) -> Self {
        self.base = Some(base);
        self
    }

    fn allowed(&self, name: &str) -> bool {
        DEFAULT_ALLOWLIST.contains(&name)
            || ALLOWED_PREFIXES.iter().any(|p| name.starts_with(p))
            || self.passthrough.contains(name)
    }

    /// The variables of `from` a child may see. Use with `Command::env_clear().envs(..)`.
    pub fn filter(
        &self,
        from: impl IntoIterator<Item = (String, String)>,
    ) -> Vec<(String, String)> {
        from.into_iter().filter(|(k, _)| self.allowed(k)).collect()
    }

    /// [`filter`](Self::filter) over the base environment.
    pub fn vars(&self) -> Vec<(String, String)> {
        match &self.base {
            Some(base) => self.filter(base.iter().cloned()),
            None => self.filter(utf8_vars()),
        }
    }
}

/// The process environment's variables that are valid UTF-8. `std::env::vars` panics on any
/// other (printing its value, which may be a credential); such a variable is passed over:
/// it cannot be a provider's key, and no text anvil writes can contain it.
pub fn utf8_vars() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
}

/// Whether a variable name marks a credential (`GITHUB_TOKEN`, `DB_PASSWORD`).
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKERS.iter().any(|m| upper.contains(m))
}

/// Replaces known secret values with a placeholder naming where they came from
/// (`[REDACTED:ANTHROPIC_API_KEY]`) in everything the model sees.
///
/// Secrets come in two ways:
/// - by name, from anvil's own environment: every variable that looks like a credential
///   ([`Redactor::from_env`]);
/// - by registration ([`Redactor::register`]): every credential anvil itself resolves, whatever
///   it is called — each provider's `api_key_env` value (`LAB_ACCESS` as much as
///   `ANTHROPIC_API_KEY`), and MCP server and HTTP header values as they are configured.
///   Registering works on a shared redactor at any time; what is redacted afterwards sees it.
///
/// Matching is over bytes, leftmost first and the longest secret at a position;
/// [`Redactor::stream`] gives exactly the result of [`Redactor::redact`] for output arriving in
/// pieces, so a cut made afterwards (a bounded capture's head and tail) cannot split a secret
/// that was not yet redacted.
#[derive(Default)]
pub struct Redactor {
    set: RwLock<Arc<SecretSet>>,
}

impl Clone for Redactor {
    fn clone(&self) -> Self {
        Self {
            set: RwLock::new(self.snapshot()),
        }
    }
}

impl std::fmt::Debug for Redactor {
    /// The labels only: a redactor never prints what it hides.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = self.snapshot();
        f.debug_struct("Redactor")
            .field(
                "labels",
                &set.secrets
                    .iter()
                    .map(|(_, l)| l.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Redactor {
    /// Values shorter than this are ignored: redacting "1" or "true" would garble output.
    pub const MIN_LEN: usize = 8;

    /// From variables whose names look like credentials (KEY, TOKEN, SECRET, …).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        Self::default().with_credentials(vars.into_iter().filter(|(name, _)| looks_secret(name)))
    }

    /// From the current process environment. A value that is not UTF-8 is registered in its
    /// lossy form (what it becomes in any text anvil writes), never passed over.
    pub fn from_env() -> Self {
        Self::from_vars(std::env::vars_os().map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        }))
    }

    /// Registers credentials as (label, value) pairs; see [`Redactor::register`].
    pub fn with_credentials(self, credentials: impl IntoIterator<Item = (String, String)>) -> Self {
        self.register_all(credentials);
        self
    }

    /// Registers one credential anvil holds, whatever its name: `value` is redacted as
    /// `[REDACTED:label]` from everything redacted from now on. `label` says where it came from
    /// (the variable, `mcp:github header Authorization`); it is shown, the value never. Values
    /// shorter than [`Redactor::MIN_LEN`] are ignored.
    pub fn register(&self, label: &str, value: &str) {
        self.register_all([(label.to_string(), value.to_string())]);
    }

    /// [`Redactor::register`] for each (label, value).
    pub fn register_all(&self, credentials: impl IntoIterator<Item = (String, String)>) {
        let mut guard = self.set.write().unwrap_or_else(|e| e.into_inner());
        let mut secrets = guard.secrets.clone();
        let before = secrets.len();
        secrets.extend(
            credentials
                .into_iter()
                .filter(|(_, value)| value.len() >= Self::MIN_LEN)
                .map(|(label, value)| (value, label)),
        );
        if secrets.len() != before {
            *guard = Arc::new(SecretSet::new(secrets));
        }
    }

    fn snapshot(&self) -> Arc<SecretSet> {
        Arc::clone(&self.set.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub fn is_empty(&self) -> bool {
        self.snapshot().secrets.is_empty()
    }

    pub fn redact(&self, text: &str) -> String {
        let set = self.snapshot();
        if set.secrets.is_empty() {
            return text.to_string();
        }
        let mut out = Vec::with_capacity(text.len());
        set.redact_prefix(text.as_bytes(), text.len(), &mut out);
        // Whole UTF-8 values replaced by ASCII in UTF-8 text: still UTF-8.
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// A redactor for one stream of output arriving in pieces, with the secrets known now.
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor {
            set: self.snapshot(),
            pending: Vec::new(),
        }
    }
}

/// The secrets of a [`Redactor`] at one moment, ready to match.
#[derive(Default)]
struct SecretSet {
    /// (value, label), longest value first, each value once.
    secrets: Vec<(String, String)>,
    /// The values as one alternation in that order: leftmost-first matching then prefers the
    /// longest value at a position. `None` when there are none, or if the regex could not be
    /// built (then [`SecretSet::find_at`] searches plainly).
    matcher: Option<regex::bytes::Regex>,
    longest: usize,
}

impl SecretSet {
    fn new(mut secrets: Vec<(String, String)>) -> Self {
        secrets.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.cmp(b)));
        secrets.dedup_by(|a, b| a.0 == b.0);
        let pattern = secrets
            .iter()
            .map(|(value, _)| regex::escape(value))
            .collect::<Vec<_>>()
            .join("|");
        let matcher = (!secrets.is_empty())
            .then(|| {
                regex::bytes::RegexBuilder::new(&pattern)
                    .size_limit(64 * 1024 * 1024)
                    .build()
                    .ok()
            })
            .flatten();
        let longest = secrets.first().map_or(0, |(v, _)| v.len());
        Self {
            secrets,
            matcher,
            longest,
        }
    }

    /// The first secret in `hay` starting at or after `from`: (start, end, label).
    fn find_at(&self, hay: &[u8], from: usize) -> Option<(usize, usize, &str)> {
        let label_of = |found: &[u8]| {
            self.secrets
                .iter()
                .find(|(v, _)| v.as_bytes() == found)
                .map(|(_, l)| l.as_str())
        };
        match &self.matcher {
            Some(re) => {
                let m = re.find_at(hay, from)?;
                Some((m.start(), m.end(), label_of(m.as_bytes())?))
            }
            None => (from..hay.len()).find_map(|at| {
                self.secrets
                    .iter()
                    .find(|(v, _)| hay[at..].starts_with(v.as_bytes()))
                    .map(|(v, l)| (at, at + v.len(), l.as_str()))
            }),
        }
    }

    /// Appends `buf` to `out` with every secret that starts before `limit` replaced, and
    /// returns how much of `buf` was used: everything before `limit`, and a secret that began
    /// before it and ends after.
    fn redact_prefix(&self, buf: &[u8], limit: usize, out: &mut Vec<u8>) -> usize {
        let mut at = 0;
        while let Some((start, end, label)) = self.find_at(buf, at) {
            if start >= limit {
                break;
            }
            out.extend_from_slice(&buf[at..start]);
            out.extend_from_slice(b"[REDACTED:");
            out.extend_from_slice(label.as_bytes());
            out.push(b']');
            at = end;
        }
        let used = at.max(limit);
        out.extend_from_slice(&buf[at..used]);
        used
    }
}

/// Redacts one stream of output that arrives in pieces (see [`Redactor::stream`]).
///
/// It holds back the last `longest secret - 1` bytes it was given, the only ones that may begin
/// a secret not yet complete, so a secret split across pieces is redacted as a whole; its
/// output is exactly what [`Redactor::redact`] gives for the whole stream.
#[derive(Default)]
pub struct StreamRedactor {
    set: Arc<SecretSet>,
    pending: Vec<u8>,
}

impl StreamRedactor {
    /// Takes the next piece; returns what can be released redacted.
    pub fn push(&mut self, piece: &[u8]) -> Vec<u8> {
        self.pending.extend_from_slice(piece);
        // A secret starting before `limit` lies wholly in `pending`: it can be judged now.
        let limit = self
            .pending
            .len()
            .saturating_sub(self.set.longest.saturating_sub(1));
        self.release(limit)
    }

    /// The end of the stream: releases what was held back, redacted.
    pub fn finish(&mut self) -> Vec<u8> {
        self.release(self.pending.len())
    }

    fn release(&mut self, limit: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.pending.len());
        let used = self.set.redact_prefix(&self.pending, limit, &mut out);
        self.pending.drain(..used);
        out
    }
}

/// An [`AsyncRead`] that yields `inner`'s bytes through a [`StreamRedactor`]: wrap a child's
/// pipe in it before anything bounds or cuts the output.
pub struct RedactingReader<R> {
    inner: R,
    redactor: StreamRedactor,
    /// Redacted bytes not yet handed out, from `ready_at`.
    ready: Vec<u8>,
    ready_at: usize,
    scratch: Vec<u8>,
    done: bool,
}

impl<R> RedactingReader<R> {
    pub fn new(inner: R, redactor: StreamRedactor) -> Self {
        Self {
            inner,
            redactor,
            ready: Vec::new(),
            ready_at: 0,
            scratch: vec![0; 64 * 1024],
            done: false,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for RedactingReader<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.ready_at < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.ready_at);
                buf.put_slice(&this.ready[this.ready_at..this.ready_at + n]);
                this.ready_at += n;
                return Poll::Ready(Ok(()));
            }
            if this.done {
                // End of stream: nothing put in `buf`.
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut this.scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {}
            }
            let filled = read.filled();
            this.ready = if filled.is_empty() {
                this.done = true;
                this.redactor.finish()
            } else {
                // May release nothing yet (all held back): read again rather than report EOF.
                this.redactor.push(filled)
            };
            this.ready_at = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn children_get_the_allowlist_and_passthrough_only() {
        let env = ChildEnv::with_passthrough(["MY_TOOL_HOME".to_string()]);
        let got = env.filter(vars(&[
            ("PATH", "/bin"),
            ("LC_ALL", "C"),
            ("ANTHROPIC_API_KEY", "sk-ant-123456789"),
            ("AWS_SECRET_ACCESS_KEY", "abcdefghijkl"),
            ("MY_TOOL_HOME", "/opt/t"),
            ("RANDOM_THING", "x"),
        ]));
        let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "LC_ALL", "MY_TOOL_HOME"]);
    }

    #[test]
    fn secret_values_are_redacted_everywhere() {
        let r = Redactor::from_vars(vars(&[
            ("ANTHROPIC_API_KEY", "sk-ant-123456789"),
            ("GITHUB_TOKEN", "ghp_abcdefghij"),
            ("SHORT_KEY", "abc"),
            ("PATH", "/usr/local/bin:/usr/bin"),
        ]));
        let text = "key=sk-ant-123456789 tok ghp_abcdefghij abc /usr/bin";
        assert_eq!(
            r.redact(text),
            "key=[REDACTED:ANTHROPIC_API_KEY] tok [REDACTED:GITHUB_TOKEN] abc /usr/bin"
        );
    }

    #[test]
    fn a_registered_credential_is_redacted_whatever_its_name() {
        // LAB_ACCESS has no secret marker: from the environment alone it would show.
        let env = vars(&[("LAB_ACCESS", "lab-access-0123")]);
        let shared = std::sync::Arc::new(Redactor::from_vars(env.clone()));
        assert_eq!(shared.redact("k=lab-access-0123"), "k=lab-access-0123");
        // Registered by what anvil knows it to be, also after the redactor is shared.
        shared.register("LAB_ACCESS", "lab-access-0123");
        shared.register("mcp:github header Authorization", "Bearer gho_0123456789");
        shared.register("TINY", "abc");
        assert_eq!(
            shared.redact("k=lab-access-0123 h=Bearer gho_0123456789 abc"),
            "k=[REDACTED:LAB_ACCESS] h=[REDACTED:mcp:github header Authorization] abc"
        );
        let built =
            Redactor::from_vars(env).with_credentials(vars(&[("LAB_ACCESS", "lab-access-0123")]));
        assert_eq!(built.redact("lab-access-0123"), "[REDACTED:LAB_ACCESS]");
        // Nothing prints what it hides.
        let debug = format!("{:?}", *shared);
        assert!(
            debug.contains("LAB_ACCESS") && !debug.contains("lab-access-0123"),
            "{debug}"
        );
    }

    #[test]
    fn streamed_redaction_is_the_same_wherever_the_pieces_are_cut() {
        let r = Redactor::from_vars(vars(&[
            ("A_TOKEN", "tok-0123456789"),
            // Overlaps the first: the longer one wins where both start.
            ("B_TOKEN", "tok-0123456789-long"),
            ("C_KEY", "ééé-secret-ééé"),
        ]));
        let text =
            "x tok-0123456789 y tok-0123456789-long z ééé-secret-ééé tok-01234 end tok-0123456789";
        let whole = r.redact(text);
        assert_eq!(
            whole,
            "x [REDACTED:A_TOKEN] y [REDACTED:B_TOKEN] z [REDACTED:C_KEY] tok-01234 end [REDACTED:A_TOKEN]"
        );
        let bytes = text.as_bytes();
        for size in 1..=bytes.len() {
            let mut stream = r.stream();
            let mut out = Vec::new();
            for piece in bytes.chunks(size) {
                out.extend(stream.push(piece));
            }
            out.extend(stream.finish());
            assert_eq!(String::from_utf8(out).unwrap(), whole, "pieces of {size}");
        }
        for cut in 0..=bytes.len() {
            let mut stream = r.stream();
            let mut out = stream.push(&bytes[..cut]);
            out.extend(stream.push(&bytes[cut..]));
            out.extend(stream.finish());
            assert_eq!(String::from_utf8(out).unwrap(), whole, "cut at {cut}");
        }
    }

    #[tokio::test]
    async fn a_redacting_reader_yields_the_redacted_stream() {
        use tokio::io::AsyncReadExt;
        let r = Redactor::from_vars(vars(&[("A_TOKEN", "tok-0123456789")]));
        let (mut tx, rx) = tokio::io::duplex(4);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for piece in ["a tok-01", "23456", "789 b tok", "-0123456789"] {
                tx.write_all(piece.as_bytes()).await.unwrap();
            }
        });
        let mut out = String::new();
        RedactingReader::new(rx, r.stream())
            .read_to_string(&mut out)
            .await
            .unwrap();
        writer.await.unwrap();
        assert_eq!(out, "a [REDACTED:A_TOKEN] b [REDACTED:A_TOKEN]");
    }
}
