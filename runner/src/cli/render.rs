//! The interactive renderer: streams the answer, shows tool calls as one dim line and their
//! results as an indented preview, and usage after each turn on stderr. No ANSI codes when
//! stdout is not a terminal or NO_COLOR is set. On a terminal (only), an indicator shows while
//! a response's first token is awaited, and the answer wraps at word boundaries at the
//! terminal's width ([`wrap`]).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use unicode_width::UnicodeWidthStr;

use anvil_agent::{AgentEvent, TurnOutcome};
use anvil_llm::Usage;
use anvil_llm::text::ellipsize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

/// Word wrapping of the streamed answer.
pub mod wrap;

pub use wrap::Wrapper;

/// Whether to color output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub color: bool,
}

impl Style {
    /// Color only on a terminal, and never with NO_COLOR set (https://no-color.org).
    pub fn detect() -> Self {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self {
            color: std::io::stdout().is_terminal() && !no_color,
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }

    pub fn red(&self, text: &str) -> String {
        self.paint("31", text)
    }

    pub fn yellow(&self, text: &str) -> String {
        self.paint("33", text)
    }
}

/// What the renderer writes to: a terminal — the waiting indicator, and text wrapped at its
/// width — or not (a pipe, a file): the text exactly as it came, and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminal {
    /// Not a terminal.
    None,
    /// stdout's terminal; its width is read at each step (it may have been resized).
    Stdout,
    /// A terminal this many columns wide (tests).
    Fixed(usize),
}

impl Terminal {
    /// stdout's terminal when it is one (and not `TERM=dumb`), else [`Terminal::None`].
    pub fn detect() -> Self {
        let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
        if std::io::stdout().is_terminal() && !dumb {
            Terminal::Stdout
        } else {
            Terminal::None
        }
    }

    fn is_live(self) -> bool {
        self != Terminal::None
    }

    /// The width to wrap at; `None`: not a terminal, or one whose width cannot be read.
    fn width(self) -> Option<usize> {
        match self {
            Terminal::None => None,
            Terminal::Fixed(w) => Some(w),
            Terminal::Stdout => terminal_size::terminal_size_of(std::io::stdout())
                .map(|(w, _)| usize::from(w.0))
                .filter(|w| *w > 0),
        }
    }
}

/// What the waiting indicator says after its spinner.
pub const WAITING: &str = "waiting for the model";
/// The spinner's frames.
const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
/// How often the indicator is redrawn.
const SPIN_EVERY: Duration = Duration::from_millis(100);
/// A response that starts sooner than this shows no indicator at all (no flash).
const SHOW_AFTER: Duration = Duration::from_millis(200);
/// A word the stream has paused in this long is shown as far as it has come.
const RELEASE_AFTER: Duration = Duration::from_millis(250);

/// The wait for a response's first token (terminal only).
#[derive(Debug)]
struct Waiting {
    since: Instant,
    frame: usize,
    /// Columns of the indicator on screen now (0: none shown).
    shown: usize,
}

/// `⠋ waiting for the model · 3s`: the indicator after `elapsed`, at spinner frame `frame`.
pub fn waiting_line(frame: usize, elapsed: Duration) -> String {
    format!(
        "{} {WAITING} · {}s",
        FRAMES[frame % FRAMES.len()],
        elapsed.as_secs()
    )
}

/// The longest tool-call line, in characters.
pub const CALL_LINE_CHARS: usize = 80;
const PREVIEW_LINES: usize = 3;

/// `name(key=value, …)` on one line, at most [`CALL_LINE_CHARS`] characters.
pub fn call_line(name: &str, args: &Value) -> String {
    let inner = match args.as_object() {
        Some(obj) => obj
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect::<Vec<_>>()
            .join(", "),
        None => args.to_string(),
    };
    let one_line = format!("{name}({})", inner.replace(['\n', '\r'], " "));
    ellipsize(&visible(&one_line), CALL_LINE_CHARS).into_owned()
}

/// `s` safe to print to a terminal, its lines kept: model text, tool output and server
/// messages may carry escape sequences (OSC 52 clipboard writes, screen clears, cursor moves)
/// that would act on the terminal or redraw a prompt; each control character shows as an
/// escape instead ([`visible`] per line; tabs and newlines kept).
pub fn printable(s: &str) -> String {
    s.split('\n')
        .map(|line| line.split('\t').map(visible).collect::<Vec<_>>().join("\t"))
        .collect::<Vec<_>>()
        .join("\n")
}

pub use crate::cli::sessions::visible;

/// The line after each interactive turn: tokens, steps, and the cost when every response's
/// was known (`None`: no response had a price, so nothing is said; never `$0`). `estimated`:
/// part of the usage is anvil's estimate (a response cancelled before the provider reported
/// it), marked `~` and `(estimated)`.
pub fn usage_line(usage: &Usage, steps: u32, cost: TurnCost, estimated: bool) -> String {
    let total_in = usage.total_input();
    let cached = if usage.cache_read > 0 {
        format!(" ({} cached)", usage.cache_read)
    } else {
        String::new()
    };
    let about = if estimated { "~" } else { "" };
    let cost = match cost {
        TurnCost::Known(usd) => format!(" · {about}{}", crate::cli::sessions::usd_label(usd)),
        TurnCost::Unknown => " · cost n/a".to_string(),
        TurnCost::None => String::new(),
    };
    format!(
        "↳ {about}{total_in} in{cached} · {about}{} out{} · {steps} step{}{cost}",
        usage.output,
        if estimated { " (estimated)" } else { "" },
        if steps == 1 { "" } else { "s" }
    )
}

/// What a turn's responses cost, summed from their usage events.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TurnCost {
    /// No response yet.
    None,
    Known(f64),
    /// A response of a model without pricing.
    Unknown,
}

impl TurnCost {
    fn add(self, cost_usd: Option<f64>) -> Self {
        match (self, cost_usd) {
            (TurnCost::Unknown, _) | (_, None) => TurnCost::Unknown,
            (TurnCost::None, Some(c)) => TurnCost::Known(c),
            (TurnCost::Known(a), Some(c)) => TurnCost::Known(a + c),
        }
    }
}

/// The approver's turn at the terminal: see [`Screen`].
pub struct Loan {
    granted: oneshot::Sender<()>,
    returned: oneshot::Receiver<()>,
}

/// Lets the approver borrow the terminal from the renderer.
///
/// The agent sends a call's `ToolCallStarted` before it asks for approval, but the renderer
/// prints it from its own task: without a hand-over, the approval prompt (stderr) and the tool
/// line (stdout) raced, and under load the tool line landed on the prompt's row. So the
/// renderer owns the terminal, and grants a loan only once every event sent before it is on
/// screen and the cursor is at the start of a line; until the loan comes back it prints
/// nothing.
#[derive(Debug, Clone)]
pub struct Screen {
    loans: mpsc::Sender<Loan>,
}

/// The terminal, borrowed: dropping it gives it back to the renderer.
#[derive(Debug)]
pub struct Lease {
    _returned: oneshot::Sender<()>,
}

impl Screen {
    /// A handle for the approver and the receiver [`interactive`] takes loans from.
    pub fn channel() -> (Screen, mpsc::Receiver<Loan>) {
        let (loans, rx) = mpsc::channel(1);
        (Screen { loans }, rx)
    }

    /// Waits until the renderer has put everything before this call on screen. Without a
    /// renderer (it is gone) the terminal is free anyway.
    pub async fn borrow(&self) -> Lease {
        let (granted, grant) = oneshot::channel();
        let (lease, returned) = oneshot::channel();
        if self.loans.send(Loan { granted, returned }).await.is_ok() {
            let _ = grant.await;
        }
        Lease { _returned: lease }
    }
}

/// What the renderer keeps between events.
struct Renderer<W: Write> {
    out: W,
    style: Style,
    terminal: Terminal,
    /// The column, and the word held back, of the streamed text.
    wrap: Wrapper,
    /// Whether the text being streamed is reasoning (shown dim).
    reasoning: bool,
    /// While a response's first token is awaited (terminal only).
    waiting: Option<Waiting>,
    /// When text last arrived.
    last_text: Instant,
    usage: Usage,
    /// Part of `usage` is an estimate.
    usage_estimated: bool,
    cost: TurnCost,
    steps: u32,
}

impl<W: Write> Renderer<W> {
    fn new(out: W, style: Style, terminal: Terminal) -> Self {
        Self {
            out,
            style,
            terminal,
            wrap: Wrapper::new(terminal.width()),
            reasoning: false,
            waiting: None,
            last_text: Instant::now(),
            usage: Usage::default(),
            usage_estimated: false,
            cost: TurnCost::None,
            steps: 0,
        }
    }

    /// Ends the line being written, if one is: the word held back first.
    fn line_break(&mut self) {
        self.flush_word();
        if !self.wrap.at_line_start() {
            let _ = writeln!(self.out);
            self.wrap.newline();
        }
    }

    /// Streamed text or reasoning, wrapped (on a terminal) and made printable.
    fn text(&mut self, text: &str, reasoning: bool) {
        if reasoning != self.reasoning {
            self.flush_word();
            self.reasoning = reasoning;
        }
        let shown = self.wrap.push(&printable(text));
        self.write_text(&shown);
        self.last_text = Instant::now();
    }

    /// Whether [`Renderer::tick`] has something to do: an indicator to draw, or a word held
    /// back to release.
    fn ticking(&self) -> bool {
        self.waiting.is_some() || self.wrap.holding()
    }

    /// Writes the word the wrapper held back.
    fn flush_word(&mut self) {
        let rest = self.wrap.finish();
        self.write_text(&rest);
    }

    fn write_text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let _ = if self.reasoning {
            write!(self.out, "{}", self.style.dim(text))
        } else {
            write!(self.out, "{text}")
        };
    }

    /// Starts the wait for a response's first token: on a terminal, [`Renderer::tick`] shows
    /// it from [`SHOW_AFTER`] on.
    fn start_waiting(&mut self) {
        self.stop_waiting();
        if self.terminal.is_live() {
            self.waiting = Some(Waiting {
                since: Instant::now(),
                frame: 0,
                shown: 0,
            });
        }
    }

    /// Ends the wait, erasing the indicator (spaces over it: no escape sequences), and the
    /// `^C` a terminal may have echoed after it, as far as the line goes.
    fn stop_waiting(&mut self) {
        if let Some(w) = self.waiting.take()
            && w.shown > 0
        {
            let cols = self
                .terminal
                .width()
                .map_or(w.shown, |width| (w.shown + 2).min(width));
            let _ = write!(self.out, "\r{}\r", " ".repeat(cols));
        }
    }

    /// Releases a word the stream paused in ([`RELEASE_AFTER`]), and redraws the indicator: a
    /// spinner and the seconds waited, on a line of its own, and only when it fits the
    /// terminal's width (a wrapped one could not be erased).
    fn tick(&mut self) {
        if self.wrap.holding() && self.last_text.elapsed() >= RELEASE_AFTER {
            let released = self.wrap.release();
            self.write_text(&released);
        }
        let width = self.terminal.width();
        let at_line_start = self.wrap.at_line_start();
        let Some(w) = &mut self.waiting else { return };
        let elapsed = w.since.elapsed();
        if elapsed < SHOW_AFTER || !at_line_start {
            return;
        }
        let line = waiting_line(w.frame, elapsed);
        w.frame += 1;
        let cols = line.width();
        if width.is_some_and(|width| cols >= width) {
            return;
        }
        let pad = " ".repeat(w.shown.saturating_sub(cols));
        let _ = write!(self.out, "\r{}{pad}", self.style.dim(&line));
        w.shown = cols.max(w.shown);
    }

    /// Prints one event; returns the outcome when it ends a turn.
    fn event(&mut self, event: AgentEvent) -> Option<TurnOutcome> {
        let style = self.style;
        // Whatever comes after a step starts ends the wait for its first token.
        self.stop_waiting();
        if !matches!(
            event,
            AgentEvent::TextDelta { .. } | AgentEvent::ReasoningDelta { .. }
        ) {
            self.flush_word();
        }
        let out = &mut self.out;
        match event {
            AgentEvent::StepStarted { .. } => {
                self.steps += 1;
                self.wrap.set_width(self.terminal.width());
                self.start_waiting();
            }
            AgentEvent::TextDelta { text } => self.text(&text, false),
            AgentEvent::ReasoningDelta { text } => self.text(&text, true),
            AgentEvent::ToolCallStarted { name, args, .. } => {
                self.line_break();
                let _ = writeln!(
                    self.out,
                    "{}",
                    style.dim(&format!("⏺ {}", call_line(&name, &args)))
                );
            }
            AgentEvent::ToolCallFinished {
                is_error, preview, ..
            } => {
                let lines: Vec<&str> = preview.lines().take(PREVIEW_LINES).collect();
                for (i, line) in lines.iter().enumerate() {
                    let prefix = if i == 0 { "  ⎿ " } else { "    " };
                    let text = format!("{prefix}{}", ellipsize(&printable(line), 120));
                    let _ = writeln!(out, "{}", if is_error { style.red(&text) } else { text });
                }
                if preview.lines().count() > PREVIEW_LINES {
                    let _ = writeln!(out, "{}", style.dim("    …"));
                }
            }
            AgentEvent::ToolProgress {
                progress,
                total,
                message,
                ..
            } => {
                let mut note = match total {
                    Some(total) if total > 0.0 => format!("  … {progress}/{total}"),
                    _ => format!("  … {progress}"),
                };
                if let Some(m) = message {
                    note.push_str(&format!(" {}", ellipsize(&visible(&m), 100)));
                }
                let _ = writeln!(out, "{}", style.dim(&note));
            }
            AgentEvent::Usage {
                usage: u,
                cost_usd,
                estimated,
            } => {
                self.usage += u;
                self.usage_estimated |= estimated;
                self.cost = self.cost.add(cost_usd);
            }
            AgentEvent::ContextCleared {
                bytes_freed,
                before_tokens,
                after_tokens,
            } => {
                self.line_break();
                let note = format!(
                    "(context: cleared {bytes_freed} bytes of old tool results, ~{before_tokens} → ~{after_tokens} tokens)"
                );
                let _ = writeln!(self.out, "{}", style.dim(&note));
                // The step's request follows.
                self.start_waiting();
            }
            AgentEvent::Compacted {
                before_tokens,
                after_tokens,
            } => {
                self.line_break();
                let note = format!(
                    "(context: compacted into a summary, ~{before_tokens} → ~{after_tokens} tokens)"
                );
                let _ = writeln!(self.out, "{}", style.dim(&note));
                // The step's request follows.
                self.start_waiting();
            }
            AgentEvent::Hint { message } => {
                self.line_break();
                let _ = self.out.flush();
                eprintln!(
                    "{}",
                    style.yellow(&format!("hint: {}", printable(&message)))
                );
            }
            AgentEvent::StepFailed { error, .. } => {
                self.line_break();
                let _ = writeln!(
                    self.out,
                    "{}",
                    style.red(&format!("error: {}", printable(&error)))
                );
            }
            AgentEvent::TurnFinished { outcome } => {
                self.line_break();
                let note = match &outcome {
                    TurnOutcome::Done | TurnOutcome::Failed { .. } => None,
                    TurnOutcome::Cancelled => Some("(cancelled)".to_string()),
                    TurnOutcome::MaxSteps => Some("(stopped: step limit reached)".into()),
                    TurnOutcome::MaxTokens => Some("(stopped: output-token limit reached)".into()),
                    TurnOutcome::Refused => Some("(the model refused)".into()),
                    TurnOutcome::ProtocolStopped { reason } => Some(format!("(stopped: {reason})")),
                    TurnOutcome::BudgetExceeded { reason } => {
                        Some(format!("(stopped by the budget: {reason})"))
                    }
                };
                if let Some(note) = note {
                    let _ = writeln!(self.out, "{}", style.yellow(&note));
                }
                let _ = self.out.flush();
                eprintln!(
                    "{}",
                    style.dim(&usage_line(
                        &self.usage,
                        self.steps,
                        self.cost,
                        self.usage_estimated
                    ))
                );
                self.usage = Usage::default();
                self.usage_estimated = false;
                self.cost = TurnCost::None;
                self.steps = 0;
                return Some(outcome);
            }
        }
        None
    }
}

/// Renders events until the channel closes; signals `turn_done` after each `TurnFinished`
/// once everything of that turn is on screen. Lends the terminal to the approver between
/// events (see [`Screen`]).
pub async fn interactive(
    events: mpsc::Receiver<AgentEvent>,
    loans: mpsc::Receiver<Loan>,
    style: Style,
    turn_done: std::sync::mpsc::Sender<TurnOutcome>,
) {
    render(
        std::io::stdout(),
        events,
        loans,
        style,
        Terminal::detect(),
        turn_done,
    )
    .await;
}

async fn render<W: Write>(
    out: W,
    mut events: mpsc::Receiver<AgentEvent>,
    mut loans: mpsc::Receiver<Loan>,
    style: Style,
    terminal: Terminal,
    turn_done: std::sync::mpsc::Sender<TurnOutcome>,
) {
    let mut renderer = Renderer::new(out, style, terminal);
    let mut ticker = tokio::time::interval(SPIN_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            // Events first: a loan is granted only when no event sent before it is waiting.
            biased;
            event = events.recv() => {
                let Some(event) = event else { break };
                if let Some(outcome) = renderer.event(event) {
                    let _ = turn_done.send(outcome);
                }
                let _ = renderer.out.flush();
            }
            Some(loan) = loans.recv() => {
                renderer.stop_waiting();
                renderer.line_break();
                let _ = renderer.out.flush();
                if loan.granted.send(()).is_ok() {
                    // Err only means the lease was dropped: the terminal is back either way.
                    let _ = loan.returned.await;
                }
            }
            _ = ticker.tick(), if renderer.ticking() => {
                renderer.tick();
                let _ = renderer.out.flush();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_tools_servers_and_models_wrote_cannot_act_on_the_terminal() {
        let hostile = "ok\x1b]52;c;Y3VybCBldmls\x07\x1b[2J\x1b[1A\rline\u{202e}two\nnext\x08";
        let shown = printable(hostile);
        assert!(
            !shown.chars().any(|c| c.is_control() && c != '\n'),
            "{shown:?}"
        );
        assert!(shown.contains("\\x1b]52;c;"), "{shown}");
        assert_eq!(shown.lines().count(), 2, "newlines kept");
        let line = call_line("mcp__ev__danger", &json!({"q": "\x1b]0;PWN\x07\x1b[2J"}));
        assert!(!line.chars().any(char::is_control), "{line:?}");
    }

    #[test]
    fn call_lines_are_one_short_line() {
        assert_eq!(
            call_line("calculator", &json!({"a": 2, "b": 2, "op": "add"})),
            "calculator(a=2, b=2, op=add)"
        );
        let long = call_line(
            "write_file",
            &json!({"file_path": "src/x.rs", "content": "fn main() {\n".repeat(50)}),
        );
        assert_eq!(long.chars().count(), CALL_LINE_CHARS);
        assert!(long.ends_with('…') && !long.contains('\n'));
    }

    #[test]
    fn no_ansi_without_color() {
        let plain = Style { color: false };
        assert_eq!(plain.dim("x"), "x");
        assert_eq!(Style { color: true }.dim("x"), "\x1b[2mx\x1b[0m");
    }

    /// An output both the renderer and the test can see.
    #[derive(Clone, Default)]
    struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// The regression behind `⏵ approve bash(…)?⏺ bash(…)` on one row: the approval prompt
    /// was printed while the tool line was still waiting in the renderer's channel.
    #[tokio::test]
    async fn the_approver_gets_the_terminal_after_the_tool_line_and_until_it_gives_it_back() {
        let (tx, events) = mpsc::channel(8);
        let (screen, loans) = Screen::channel();
        let (turn_done, _turns) = std::sync::mpsc::channel();
        let out = Shared::default();
        let renderer = tokio::spawn(render(
            out.clone(),
            events,
            loans,
            Style { color: false },
            Terminal::None,
            turn_done,
        ));
        // What the agent sends before it asks: text without a newline, then the call.
        for event in [
            AgentEvent::TextDelta {
                text: "Let me list it".into(),
            },
            AgentEvent::ToolCallStarted {
                id: "toolu_1".into(),
                name: "bash".into(),
                args: json!({"command": "ls"}),
            },
        ] {
            tx.send(event).await.unwrap();
        }
        let lease = screen.borrow().await;
        assert_eq!(out.text(), "Let me list it\n⏺ bash(command=ls)\n");
        // While the approver holds the terminal, nothing is printed over its prompt.
        tx.send(AgentEvent::ToolCallFinished {
            id: "toolu_1".into(),
            name: "bash".into(),
            is_error: false,
            preview: "Cargo.toml".into(),
        })
        .await
        .unwrap();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(out.text(), "Let me list it\n⏺ bash(command=ls)\n");
        drop(lease);
        drop(tx);
        renderer.await.unwrap();
        assert_eq!(
            out.text(),
            "Let me list it\n⏺ bash(command=ls)\n  ⎿ Cargo.toml\n"
        );
    }

    #[tokio::test]
    async fn without_a_renderer_the_terminal_is_free() {
        let (screen, loans) = Screen::channel();
        drop(loans);
        tokio::time::timeout(std::time::Duration::from_secs(5), screen.borrow())
            .await
            .unwrap();
    }

    #[test]
    fn usage_line_reads_well() {
        let u = Usage {
            input: 100,
            output: 20,
            cache_read: 900,
            cache_write: 0,
        };
        assert_eq!(
            usage_line(&u, 2, TurnCost::None, false),
            "↳ 1000 in (900 cached) · 20 out · 2 steps"
        );
        let cost = TurnCost::None.add(Some(0.01)).add(Some(0.0025));
        assert_eq!(
            usage_line(&u, 2, cost, false),
            "↳ 1000 in (900 cached) · 20 out · 2 steps · $0.0125"
        );
        assert_eq!(
            usage_line(&u, 1, cost.add(None), false),
            "↳ 1000 in (900 cached) · 20 out · 1 step · cost n/a"
        );
        // A response cut off by Ctrl-C before the provider reported it all.
        assert_eq!(
            usage_line(&u, 1, cost, true),
            "↳ ~1000 in (900 cached) · ~20 out (estimated) · 1 step · ~$0.0125"
        );
    }

    /// What a terminal shows of `bytes`: each `\r` returns to the line's start and what
    /// follows overwrites it.
    fn screen(bytes: &str) -> Vec<String> {
        let mut lines = vec![Vec::<char>::new()];
        let mut col = 0;
        for c in bytes.chars() {
            match c {
                '\n' => {
                    lines.push(Vec::new());
                    col = 0;
                }
                '\r' => col = 0,
                c => {
                    let line = lines.last_mut().unwrap();
                    if col < line.len() {
                        line[col] = c;
                    } else {
                        line.push(c);
                    }
                    col += 1;
                }
            }
        }
        lines
            .into_iter()
            .map(|l| l.into_iter().collect::<String>().trim_end().to_string())
            .collect()
    }

    fn renderer(terminal: Terminal) -> (Renderer<Shared>, Shared) {
        let out = Shared::default();
        (
            Renderer::new(out.clone(), Style { color: false }, terminal),
            out,
        )
    }

    /// Makes the renderer's wait look `secs` old.
    fn waited(r: &mut Renderer<Shared>, secs: u64) {
        r.waiting.as_mut().unwrap().since = Instant::now() - Duration::from_secs(secs);
    }

    #[test]
    fn on_a_terminal_the_wait_for_the_first_token_shows_and_is_erased_by_it() {
        let (mut r, out) = renderer(Terminal::Fixed(80));
        r.event(AgentEvent::StepStarted { step: 1 });
        // Not before SHOW_AFTER: a quick answer flashes nothing.
        r.tick();
        assert_eq!(out.text(), "");
        waited(&mut r, 3);
        r.tick();
        assert_eq!(screen(&out.text()), vec!["⠋ waiting for the model · 3s"]);
        waited(&mut r, 12);
        r.tick();
        assert_eq!(screen(&out.text()), vec!["⠙ waiting for the model · 12s"]);
        r.event(AgentEvent::TextDelta {
            text: "Hi there.".into(),
        });
        r.event(AgentEvent::TurnFinished {
            outcome: TurnOutcome::Done,
        });
        assert_eq!(screen(&out.text()), vec!["Hi there.", ""]);
        // The wait is over: no more frames.
        let before = out.text();
        r.tick();
        assert_eq!(out.text(), before);
    }

    #[test]
    fn each_step_waits_anew_and_any_event_ends_the_wait() {
        let (mut r, out) = renderer(Terminal::Fixed(80));
        for event in [
            AgentEvent::ToolCallStarted {
                id: "c1".into(),
                name: "bash".into(),
                args: json!({"command": "ls"}),
            },
            AgentEvent::StepFailed {
                step: 1,
                error: "HTTP 500".into(),
                retryable: true,
            },
            AgentEvent::TurnFinished {
                outcome: TurnOutcome::Cancelled,
            },
        ] {
            r.event(AgentEvent::StepStarted { step: 1 });
            waited(&mut r, 1);
            r.tick();
            assert!(out.text().ends_with("waiting for the model · 1s"));
            r.event(event);
            assert!(r.waiting.is_none());
        }
        let shown = screen(&out.text());
        assert!(
            shown.iter().all(|l| !l.contains(WAITING)),
            "the indicator was left on screen: {shown:?}"
        );
        assert_eq!(shown[0], "⏺ bash(command=ls)");
    }

    #[test]
    fn a_word_the_stream_paused_in_is_shown_after_a_moment() {
        let (mut r, out) = renderer(Terminal::Fixed(40));
        r.event(AgentEvent::StepStarted { step: 1 });
        r.event(AgentEvent::TextDelta {
            text: "The parser re".into(),
        });
        assert_eq!(out.text(), "The parser");
        r.tick();
        assert_eq!(out.text(), "The parser", "released too soon");
        r.last_text = Instant::now() - RELEASE_AFTER;
        r.tick();
        assert_eq!(out.text(), "The parser re");
        r.event(AgentEvent::TextDelta {
            text: "ads it.".into(),
        });
        r.event(AgentEvent::TurnFinished {
            outcome: TurnOutcome::Cancelled,
        });
        assert_eq!(
            screen(&out.text()),
            vec!["The parser reads it.", "(cancelled)", ""]
        );
    }

    #[test]
    fn an_indicator_wider_than_the_terminal_is_not_drawn() {
        let (mut r, out) = renderer(Terminal::Fixed(20));
        r.event(AgentEvent::StepStarted { step: 1 });
        waited(&mut r, 1);
        r.tick();
        assert_eq!(out.text(), "");
    }

    #[tokio::test]
    async fn not_on_a_terminal_there_is_no_indicator_and_no_wrapping() {
        let (tx, events) = mpsc::channel(8);
        let (_screen, loans) = Screen::channel();
        let (turn_done, turns) = std::sync::mpsc::channel();
        let out = Shared::default();
        let renderer = tokio::spawn(render(
            out.clone(),
            events,
            loans,
            Style { color: false },
            Terminal::None,
            turn_done,
        ));
        tx.send(AgentEvent::StepStarted { step: 1 }).await.unwrap();
        // Long enough for several frames, had it been a terminal.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let long = "word ".repeat(60);
        tx.send(AgentEvent::TextDelta { text: long.clone() })
            .await
            .unwrap();
        tx.send(AgentEvent::TurnFinished {
            outcome: TurnOutcome::Done,
        })
        .await
        .unwrap();
        drop(tx);
        renderer.await.unwrap();
        assert_eq!(turns.recv().unwrap(), TurnOutcome::Done);
        assert_eq!(out.text(), format!("{long}\n"));
    }

    #[tokio::test]
    async fn on_a_terminal_the_live_loop_draws_the_indicator_until_the_first_token() {
        let (tx, events) = mpsc::channel(8);
        let (_screen, loans) = Screen::channel();
        let (turn_done, _turns) = std::sync::mpsc::channel();
        let out = Shared::default();
        let renderer = tokio::spawn(render(
            out.clone(),
            events,
            loans,
            Style { color: false },
            Terminal::Fixed(80),
            turn_done,
        ));
        tx.send(AgentEvent::StepStarted { step: 1 }).await.unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(
            out.text().contains("waiting for the model · 0s"),
            "{:?}",
            out.text()
        );
        tx.send(AgentEvent::TextDelta {
            text: "Done.".into(),
        })
        .await
        .unwrap();
        tx.send(AgentEvent::TurnFinished {
            outcome: TurnOutcome::Done,
        })
        .await
        .unwrap();
        drop(tx);
        renderer.await.unwrap();
        assert_eq!(screen(&out.text()), vec!["Done.", ""]);
    }

    #[test]
    fn streamed_text_wraps_at_the_terminals_width_across_deltas() {
        let (mut r, out) = renderer(Terminal::Fixed(24));
        r.event(AgentEvent::StepStarted { step: 1 });
        let text = "The parser drops the last token when the input ends without a newline; \
                    the fix is in lexer.rs.";
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(7) {
            r.event(AgentEvent::TextDelta {
                text: piece.iter().collect(),
            });
        }
        r.event(AgentEvent::ToolCallStarted {
            id: "c1".into(),
            name: "read_file".into(),
            args: json!({"file_path": "lexer.rs"}),
        });
        assert_eq!(
            screen(&out.text()),
            vec![
                "The parser drops the",
                "last token when the",
                "input ends without a",
                "newline; the fix is in",
                "lexer.rs.",
                "⏺ read_file(file_path=lexer.rs)",
                "",
            ]
        );
    }
}
