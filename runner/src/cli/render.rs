//! The interactive renderer: streams the answer, shows tool calls as one dim line and their
//! results as an indented preview, and usage after each turn on stderr. No ANSI codes when
//! stdout is not a terminal or NO_COLOR is set.

use std::io::{IsTerminal, Write};

use anvil_agent::{AgentEvent, TurnOutcome};
use anvil_llm::Usage;
use serde_json::Value;
use tokio::sync::mpsc;

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
    shorten(&one_line, CALL_LINE_CHARS)
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

pub fn usage_line(usage: &Usage, steps: u32) -> String {
    let total_in = usage.total_input();
    let cached = if usage.cache_read > 0 {
        format!(" ({} cached)", usage.cache_read)
    } else {
        String::new()
    };
    format!(
        "↳ {total_in} in{cached} · {} out · {steps} step{}",
        usage.output,
        if steps == 1 { "" } else { "s" }
    )
}

fn line_break(out: &mut std::io::Stdout, at_line_start: &mut bool) {
    if !*at_line_start {
        let _ = writeln!(out);
        *at_line_start = true;
    }
}

/// Renders events until the channel closes; signals `turn_done` after each `TurnFinished`
/// once everything of that turn is on screen.
pub async fn interactive(
    mut events: mpsc::Receiver<AgentEvent>,
    style: Style,
    turn_done: std::sync::mpsc::Sender<TurnOutcome>,
) {
    let mut out = std::io::stdout();
    let mut at_line_start = true;
    let mut usage = Usage::default();
    let mut steps = 0;
    while let Some(event) = events.recv().await {
        match event {
            AgentEvent::StepStarted { .. } => steps += 1,
            AgentEvent::TextDelta { text } => {
                let _ = write!(out, "{text}");
                at_line_start = text.ends_with('\n');
            }
            AgentEvent::ReasoningDelta { text } => {
                let _ = write!(out, "{}", style.dim(&text));
                at_line_start = text.ends_with('\n');
            }
            AgentEvent::ToolCallStarted { name, args, .. } => {
                line_break(&mut out, &mut at_line_start);
                let _ = writeln!(
                    out,
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
                    let text = format!("{prefix}{}", shorten(line, 120));
                    let _ = writeln!(out, "{}", if is_error { style.red(&text) } else { text });
                }
                if preview.lines().count() > PREVIEW_LINES {
                    let _ = writeln!(out, "{}", style.dim("    …"));
                }
            }
            AgentEvent::Usage { usage: u } => usage += u,
            AgentEvent::StepFailed { error, .. } => {
                line_break(&mut out, &mut at_line_start);
                let _ = writeln!(out, "{}", style.red(&format!("error: {error}")));
            }
            AgentEvent::TurnFinished { outcome } => {
                line_break(&mut out, &mut at_line_start);
                let note = match &outcome {
                    TurnOutcome::Done | TurnOutcome::Failed { .. } => None,
                    TurnOutcome::Cancelled => Some("(cancelled)".to_string()),
                    TurnOutcome::MaxSteps => Some("(stopped: step limit reached)".into()),
                    TurnOutcome::MaxTokens => Some("(stopped: output-token limit reached)".into()),
                    TurnOutcome::Refused => Some("(the model refused)".into()),
                    TurnOutcome::ProtocolStopped { reason } => Some(format!("(stopped: {reason})")),
                };
                if let Some(note) = note {
                    let _ = writeln!(out, "{}", style.yellow(&note));
                }
                let _ = out.flush();
                eprintln!("{}", style.dim(&usage_line(&usage, steps)));
                usage = Usage::default();
                steps = 0;
                let _ = turn_done.send(outcome);
            }
        }
        let _ = out.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn usage_line_reads_well() {
        let u = Usage {
            input: 100,
            output: 20,
            cache_read: 900,
            cache_write: 0,
        };
        assert_eq!(
            usage_line(&u, 2),
            "↳ 1000 in (900 cached) · 20 out · 2 steps"
        );
    }
}
