//! `anvil -p`: exactly one turn, output for scripts, and an exit code that says how it ended.
//!
//! stdout carries only the requested output; nothing is logged to stdout or stderr. At the end
//! of the turn the agent (and with it every event sender) is dropped, the renderer drains to
//! its end, stdout is flushed, and only then is the exit code chosen. A closed stdout (the
//! reader of a pipe went away) or Ctrl-C cancels the turn, which kills its tool processes.

use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;

use anvil_agent::{AgentEvent, EventSink, TurnOutcome};
use anvil_llm::{ContentBlock, Role, Usage};
use anvil_report::record::Accounting;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::cli::args::{Cli, OutputFormat};
use crate::cli::setup;
use crate::contract::{HeadlessFailure, HeadlessOutcome, HeadlessResult, SetupOutcome};
use crate::exit;

/// The most stdin that is appended to the prompt.
const MAX_STDIN_BYTES: usize = 16 * 1024 * 1024;

/// What the renderer saw of the turn.
#[derive(Debug, Default)]
struct Summary {
    steps: u32,
    usage: Usage,
    /// Part of `usage` is anvil's estimate (a response cancelled before it was reported).
    usage_estimated: bool,
    /// The text of the answer being streamed: since the step started, unless a tool call
    /// followed it. What `turn_finished` carries as `text`; a cancelled turn's is the partial
    /// answer.
    text: String,
    stdout_closed: bool,
    /// The last hint the agent gave (`AgentEvent::Hint`).
    hint: Option<String>,
}

pub async fn run(cli: Cli, prompt: String) -> i32 {
    let prompt = match with_stdin(prompt) {
        Ok(p) => p,
        Err(e) => return fail_setup(cli.output_format, &e, exit::USAGE),
    };
    // A turn with nothing to do would still be sent (and paid for).
    if prompt.trim().is_empty() {
        return fail_setup(
            cli.output_format,
            "the prompt is empty: say what to do (-p \"fix the failing test\"), or pipe it on \
             stdin",
            exit::USAGE,
        );
    }
    let (sink, events) = EventSink::channel(256);
    let mut session = match setup::build(&cli, sink, Arc::new(anvil_agent::mcp::Decline)) {
        Ok(s) => s,
        Err(e) => return fail_setup(cli.output_format, &e.0, exit::CONFIG),
    };
    if let Err(e) = setup::apply_budget(&cli, &mut session) {
        return fail_setup(cli.output_format, &e, exit::BUDGET_EXCEEDED);
    }
    // Nobody can answer an approval here: what --permission-mode does not allow is denied,
    // and the model is told how to get it allowed.
    let policy = match setup::policy_for(&cli, &session) {
        Ok(p) => p,
        Err(e) => return fail_setup(cli.output_format, &e.0, exit::CONFIG),
    };
    session.agent = session.agent.with_permissions(
        policy,
        std::sync::Arc::new(anvil_agent::approval::HeadlessApprover),
    );
    let cancel = CancellationToken::new();
    let ctrl_c = crate::cli::cancel_on_ctrl_c(&cancel);
    watch_stdout_closed(cancel.clone());
    let renderer = tokio::spawn(render(
        cli.output_format,
        events,
        cancel.clone(),
        session.agent.session_id().map(str::to_string),
    ));

    // MCP servers' tools are offered from the first request: wait for them to connect or
    // fail, each within its own startup timeout.
    if let Some(mcp) = &session.mcp {
        mcp.wait_started().await;
    }
    let cost_before = session.agent.session().cost;
    // The process's span: the turn's invoke_agent nests in it, and it continues the trace of
    // whoever started this process (an eval worker's trial), when there is one.
    let root = tracing::info_span!(
        "session",
        otel.name = "anvil -p",
        gen_ai.conversation.id = session.agent.session_id().unwrap_or(""),
        anvil.sandbox = ?cli.sandbox,
        anvil.permission_mode = %cli.permission_mode,
        anvil.max_cost_usd = cli.max_cost_usd,
    );
    crate::telemetry::adopt_parent(&root);
    let outcome = session
        .agent
        .run_turn(vec![ContentBlock::text(prompt)], cancel.clone())
        .instrument(root)
        .await;
    let cost = session.agent.session().cost.since(&cost_before);
    let final_text = session
        .agent
        .messages()
        .last()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.text())
        .unwrap_or_default();
    let session_id = session.agent.session_id().map(str::to_string);
    let session_unwritten = session.agent.session_unwritten();
    drop(session.agent); // closes the event channel (the renderer drains and ends) and the session file
    ctrl_c.abort();
    if let Some(mcp) = &session.mcp {
        mcp.shutdown(crate::cli::mcp::SHUTDOWN_GRACE).await;
    }
    let summary = renderer.await.unwrap_or_default();

    let mut stdout = std::io::stdout().lock();
    let written = match cli.output_format {
        OutputFormat::Text => {
            let mut r = Ok(());
            if !final_text.is_empty() {
                r = writeln!(stdout, "{}", final_text.trim_end());
            }
            if outcome != TurnOutcome::Done {
                eprintln!("anvil: {}", describe(&outcome));
            }
            r
        }
        OutputFormat::Json => {
            // Cost, from the session's ledger: known only with pricing; a request cut off
            // before its usage was reported is charged an estimate, never a known 0, and a
            // failed turn may have used more than was reported (a lower bound).
            let failed = matches!(outcome, TurnOutcome::Failed { .. });
            let (cost_usd, accounting) = match cost.total() {
                None => (None, Accounting::Unknown),
                Some(_) if session.model.pricing.is_none() && cost.priced + cost.estimated == 0 => {
                    (None, Accounting::Unknown)
                }
                Some(total) if failed || cost.is_estimated() => {
                    (Some(total), Accounting::Estimated)
                }
                Some(total) => (Some(total), Accounting::Reported),
            };
            let (error, retryable, http_status, provider_refusal, reason) = match &outcome {
                TurnOutcome::Failed {
                    error,
                    retryable,
                    http_status,
                    provider_refusal,
                } => (
                    Some(error.clone()),
                    Some(*retryable),
                    *http_status,
                    *provider_refusal,
                    None,
                ),
                TurnOutcome::ProtocolStopped { reason }
                | TurnOutcome::BudgetExceeded { reason } => {
                    (None, None, None, None, Some(reason.clone()))
                }
                _ => (None, None, None, None, None),
            };
            let result = HeadlessResult {
                outcome: HeadlessOutcome::of(&outcome),
                text: final_text,
                steps: summary.steps,
                usage: summary.usage,
                usage_estimated: summary.usage_estimated,
                model: session.model.name.clone(),
                provider: session.model.provider_name.clone(),
                model_id: session.model.model.clone(),
                config_digest: session.model.config_digest.clone(),
                cost_usd,
                accounting,
                error,
                retryable,
                http_status,
                provider_refusal,
                reason,
                session_unwritten,
                session_id,
                hint: summary.hint.clone(),
            };
            match serde_json::to_string(&result) {
                Ok(line) => writeln!(stdout, "{line}"),
                Err(e) => Err(std::io::Error::other(e)),
            }
        }
        OutputFormat::StreamJson => Ok(()),
    };
    if written.and_then(|()| stdout.flush()).is_err() || summary.stdout_closed {
        return exit::CANCELLED;
    }
    exit::code(&outcome)
}

/// `prompt`, with piped stdin appended.
fn with_stdin(prompt: String) -> Result<String, String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Ok(prompt);
    }
    let mut piped = Vec::new();
    stdin
        .lock()
        .take(MAX_STDIN_BYTES as u64 + 1)
        .read_to_end(&mut piped)
        .map_err(|e| format!("could not read stdin: {e}"))?;
    if piped.len() > MAX_STDIN_BYTES {
        return Err(format!(
            "stdin is larger than {} MiB; pass a smaller input or a file path in the prompt",
            MAX_STDIN_BYTES / (1024 * 1024)
        ));
    }
    let piped = String::from_utf8_lossy(&piped);
    if piped.trim().is_empty() {
        return Ok(prompt);
    }
    if prompt.trim().is_empty() {
        // `-p ""` with the task on stdin: stdin is the prompt.
        return Ok(piped.trim().to_string());
    }
    Ok(format!("{prompt}\n\n{}", piped.trim_end()))
}

/// Says why no turn could start — on stderr, or as a [`HeadlessFailure`] line in `json` and
/// `stream-json` — and returns `code`.
pub fn fail_setup(format: OutputFormat, error: &str, code: i32) -> i32 {
    match format {
        OutputFormat::Text => eprintln!("anvil: {error}"),
        OutputFormat::Json | OutputFormat::StreamJson => {
            let failure = HeadlessFailure {
                // A hard budget on a model without pricing (exit 7) is a configuration error.
                outcome: if code == exit::USAGE {
                    SetupOutcome::UsageError
                } else {
                    SetupOutcome::ConfigError
                },
                error: error.to_string(),
            };
            if let Ok(line) = serde_json::to_string(&failure) {
                println!("{line}");
            }
        }
    }
    code
}

/// How a non-done outcome reads on stderr in text mode.
fn describe(outcome: &TurnOutcome) -> String {
    match outcome {
        TurnOutcome::Done => "done".into(),
        TurnOutcome::MaxSteps => "stopped: the step limit was reached (raise --max-steps)".into(),
        TurnOutcome::MaxTokens => "stopped: the model hit its output-token limit".into(),
        TurnOutcome::Refused => "the model refused".into(),
        TurnOutcome::Cancelled => "cancelled".into(),
        TurnOutcome::ProtocolStopped { reason } => {
            format!("stopped: the provider ended the response with '{reason}'")
        }
        TurnOutcome::Failed { error, .. } => format!("failed: {error}"),
        TurnOutcome::BudgetExceeded { reason } => format!("stopped by the budget: {reason}"),
    }
}

/// Consumes the events: counts steps and usage, and in stream-json mode writes each one as a
/// line. A write that fails (stdout closed) cancels the turn; the channel is still drained so
/// the agent never waits on a reader that is gone.
async fn render(
    format: OutputFormat,
    mut events: mpsc::Receiver<AgentEvent>,
    cancel: CancellationToken,
    session_id: Option<String>,
) -> Summary {
    let mut summary = Summary::default();
    let mut out = std::io::stdout();
    while let Some(event) = events.recv().await {
        match &event {
            AgentEvent::StepStarted { .. } => {
                summary.steps += 1;
                summary.text.clear();
            }
            AgentEvent::TextDelta { text } => summary.text.push_str(text),
            AgentEvent::ToolCallStarted { .. } => summary.text.clear(),
            AgentEvent::Usage {
                usage, estimated, ..
            } => {
                summary.usage += *usage;
                summary.usage_estimated |= *estimated;
            }
            AgentEvent::Hint { message } => {
                if format == OutputFormat::Text {
                    eprintln!("anvil: hint: {message}");
                }
                summary.hint = Some(message.clone());
            }
            _ => {}
        }
        if format == OutputFormat::StreamJson && !summary.stdout_closed {
            // The last line, turn_finished, also carries the answer's text (a cancelled turn's:
            // what had arrived), the turn's usage, and which session the turn was kept in.
            let line = match (&event, &session_id) {
                (AgentEvent::TurnFinished { .. }, id) => serde_json::to_value(&event)
                    .map(|mut v| {
                        v["text"] = serde_json::Value::String(summary.text.clone());
                        v["usage"] = serde_json::to_value(summary.usage).unwrap_or_default();
                        if summary.usage_estimated {
                            v["usage_estimated"] = serde_json::Value::Bool(true);
                        }
                        if let Some(id) = id {
                            v["session_id"] = serde_json::Value::String(id.clone());
                        }
                        if let Some(hint) = &summary.hint {
                            v["hint"] = serde_json::Value::String(hint.clone());
                        }
                        v.to_string()
                    })
                    .unwrap_or_default(),
                _ => serde_json::to_string(&event).unwrap_or_default(),
            };
            let mut lock = out.lock();
            if writeln!(lock, "{line}")
                .and_then(|()| lock.flush())
                .is_err()
            {
                summary.stdout_closed = true;
                cancel.cancel();
            }
        }
    }
    let _ = out.flush();
    summary
}

/// When stdout is a pipe, cancels the turn as soon as its reader goes away, even if nothing is
/// being written at that moment.
fn watch_stdout_closed(cancel: CancellationToken) {
    use std::os::unix::fs::FileTypeExt;
    let is_pipe = std::fs::metadata("/proc/self/fd/1")
        .map(|m| m.file_type().is_fifo())
        .unwrap_or(false);
    if !is_pipe {
        return;
    }
    std::thread::spawn(move || {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        let stdout = std::io::stdout();
        // No events requested: poll wakes only for POLLERR/POLLHUP, i.e. the reader is gone.
        let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::empty())];
        loop {
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(n) if n > 0 => {
                    cancel.cancel();
                    return;
                }
                Ok(_) => continue,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return,
            }
        }
    });
}
