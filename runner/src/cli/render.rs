//! The interactive renderer: streams the answer, shows tool calls as one dim line and their
//! results as an indented preview, and usage after each turn on stderr. No ANSI codes when
//! stdout is not a terminal or NO_COLOR is set.

use std::io::{IsTerminal, Write};

use anvil_agent::{AgentEvent, TurnOutcome};
use anvil_llm::Usage;
use anvil_llm::text::ellipsize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

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
/// was known (`None`: no response had a price, so nothing is said; never `$0`).
pub fn usage_line(usage: &Usage, steps: u32, cost: TurnCost) -> String {
    let total_in = usage.total_input();
    let cached = if usage.cache_read > 0 {
        format!(" ({} cached)", usage.cache_read)
    } else {
        String::new()
    };
    let cost = match cost {
        TurnCost::Known(usd) => format!(" · {}", crate::cli::sessions::usd_label(usd)),
        TurnCost::Unknown => " · cost n/a".to_string(),
        TurnCost::None => String::new(),
    };
    format!(
        "↳ {total_in} in{cached} · {} out · {steps} step{}{cost}",
        usage.output,
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
    at_line_start: bool,
    usage: Usage,
    cost: TurnCost,
    steps: u32,
}

impl<W: Write> Renderer<W> {
    fn line_break(&mut self) {
        if !self.at_line_start {
            let _ = writeln!(self.out);
            self.at_line_start = true;
        }
    }

    /// Prints one event; returns the outcome when it ends a turn.
    fn event(&mut self, event: AgentEvent) -> Option<TurnOutcome> {
        let style = self.style;
        let out = &mut self.out;
        match event {
            AgentEvent::StepStarted { .. } => self.steps += 1,
            AgentEvent::TextDelta { text } => {
                let _ = write!(out, "{}", printable(&text));
                self.at_line_start = text.ends_with('\n');
            }
            AgentEvent::ReasoningDelta { text } => {
                let _ = write!(out, "{}", style.dim(&printable(&text)));
                self.at_line_start = text.ends_with('\n');
            }
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
            AgentEvent::Usage { usage: u, cost_usd } => {
                self.usage += u;
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
                    style.dim(&usage_line(&self.usage, self.steps, self.cost))
                );
                self.usage = Usage::default();
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
    render(std::io::stdout(), events, loans, style, turn_done).await;
}

async fn render<W: Write>(
    out: W,
    mut events: mpsc::Receiver<AgentEvent>,
    mut loans: mpsc::Receiver<Loan>,
    style: Style,
    turn_done: std::sync::mpsc::Sender<TurnOutcome>,
) {
    let mut renderer = Renderer {
        out,
        style,
        at_line_start: true,
        usage: Usage::default(),
        cost: TurnCost::None,
        steps: 0,
    };
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
                renderer.line_break();
                let _ = renderer.out.flush();
                if loan.granted.send(()).is_ok() {
                    // Err only means the lease was dropped: the terminal is back either way.
                    let _ = loan.returned.await;
                }
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
            usage_line(&u, 2, TurnCost::None),
            "↳ 1000 in (900 cached) · 20 out · 2 steps"
        );
        let cost = TurnCost::None.add(Some(0.01)).add(Some(0.0025));
        assert_eq!(
            usage_line(&u, 2, cost),
            "↳ 1000 in (900 cached) · 20 out · 2 steps · $0.0125"
        );
        assert_eq!(
            usage_line(&u, 1, cost.add(None)),
            "↳ 1000 in (900 cached) · 20 out · 1 step · cost n/a"
        );
    }
}
