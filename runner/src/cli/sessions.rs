//! `anvil sessions` and `anvil replay`: reading kept sessions.

use std::io::Write;
use std::time::SystemTime;

use anvil_agent::session::{Cost, Entry, LoadedSession, Record, load};
use anvil_llm::{ContentBlock, Role, Usage};

use crate::cli::args::{Cli, ReplayFormat};
use crate::cli::setup;
use crate::exit;

/// The longest tool result shown whole; longer ones show their start and a count.
const RESULT_LINES: usize = 12;

/// `anvil sessions`: this directory's sessions, newest first.
pub fn list(cli: &Cli) -> i32 {
    let listed = setup::workspace(cli).and_then(|cwd| {
        let store = setup::session_store()?;
        store
            .list(&cwd)
            .map(|l| (cwd, l))
            .map_err(|e| setup::SetupError(e.to_string()))
    });
    let (cwd, sessions) = match listed {
        Ok(l) => l,
        Err(e) => {
            eprintln!("anvil: {e}");
            return exit::CONFIG;
        }
    };
    let mut out = std::io::stdout().lock();
    if sessions.is_empty() {
        let _ = writeln!(out, "no sessions in {}", cwd.display());
        return exit::DONE;
    }
    for s in sessions {
        let prompt: String = s
            .first_prompt
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(60)
            .collect();
        let line = format!(
            "{}  {:>8}  {:<24}  {:>3} prompts  {:>9}  {}",
            s.id,
            age(s.modified),
            s.model,
            s.turns,
            cost_label(&s.cost),
            prompt
        );
        if writeln!(out, "{line}").is_err() {
            return exit::CANCELLED;
        }
    }
    exit::DONE
}

/// A session's cost: the total when every response's is known, a lower bound (`≥`) when
/// some model had no pricing, `—` when none had.
pub(crate) fn cost_label(cost: &Cost) -> String {
    match (cost.known(), cost.priced) {
        (Some(usd), _) => usd_label(usd),
        (None, 0) => "—".into(),
        (None, _) => format!("≥{}", usd_label(cost.usd)),
    }
}

fn usd_label(usd: f64) -> String {
    format!("${usd:.4}")
}

fn age(modified: SystemTime) -> String {
    let secs = SystemTime::now()
        .duration_since(modified)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86_400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86_400),
    }
}

/// `anvil replay ID|PATH`: the session readably, or its canonical messages as JSON.
pub fn replay(cli: &Cli, session: &str, format: ReplayFormat) -> i32 {
    let path = setup::workspace(cli).and_then(|cwd| {
        let store = setup::session_store()?;
        setup::session_path(&store, &cwd, session)
    });
    let path = match path {
        Ok(p) => p,
        Err(e) => {
            eprintln!("anvil: {e}");
            return exit::CONFIG;
        }
    };
    let loaded = match load(&path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("anvil: {e}");
            return exit::CONFIG;
        }
    };
    // The whole records, as loading read them (a torn last line left out).
    let whole = match std::fs::read(&path) {
        Ok(mut bytes) => {
            bytes.truncate(loaded.valid_len as usize);
            bytes
        }
        Err(e) => {
            eprintln!("anvil: session file {}: {e}", path.display());
            return exit::CONFIG;
        }
    };
    // A torn last line is what a crash mid-write leaves: the session reads without it, and
    // the reader is told (the file itself is left as it is).
    let torn = (loaded.torn_bytes > 0).then(|| {
        format!(
            "session file {}, line {}: a torn final record ({} bytes, no newline: its write was \
             cut off) was left out; resuming the session cuts it off",
            path.display(),
            whole.iter().filter(|&&b| b == b'\n').count() + 1,
            loaded.torn_bytes
        )
    });
    if let Some(note) = &torn {
        eprintln!("anvil: note: {note}");
    }
    let mut out = std::io::stdout().lock();
    let written = match format {
        ReplayFormat::Json => serde_json::to_string_pretty(&loaded.messages)
            .map_err(std::io::Error::other)
            .and_then(|json| writeln!(out, "{json}")),
        ReplayFormat::Text => {
            let entries: Vec<Entry> = whole
                .split(|&b| b == b'\n')
                .filter_map(|l| serde_json::from_slice(l).ok())
                .collect();
            render(&mut out, &entries, &loaded).and_then(|()| match &torn {
                Some(note) => writeln!(out, "── {note} ──"),
                None => Ok(()),
            })
        }
    };
    match written {
        Ok(()) => exit::DONE,
        Err(_) => exit::CANCELLED,
    }
}

/// The session as text: messages, tool calls and results, and after each response what it
/// used and cost; the totals last.
fn render(out: &mut impl Write, entries: &[Entry], loaded: &LoadedSession) -> std::io::Result<()> {
    // A response's usage is recorded just before its message: it is shown after it.
    let mut pending: Option<(Usage, Option<f64>)> = None;
    for entry in entries {
        if let Record::Usage { usage, cost_usd } = &entry.record {
            if let Some((u, c)) = pending.take() {
                usage_line(out, &u, c)?;
            }
            pending = Some((*usage, *cost_usd));
            continue;
        }
        let response = matches!(
            &entry.record,
            Record::MessageAppended { message } if message.role == Role::Assistant
        );
        if !response && let Some((u, c)) = pending.take() {
            usage_line(out, &u, c)?;
        }
        match &entry.record {
            Record::SessionStarted { id, cwd, model, .. } => {
                writeln!(out, "session {id}\n  in {cwd}\n  on {model}\n")?
            }
            Record::MessageAppended { message } => {
                for block in &message.content {
                    block_line(out, message.role, block)?;
                }
            }
            Record::MessageExtended { content, .. } => {
                for block in content {
                    block_line(out, Role::User, block)?;
                }
            }
            Record::ContextReplaced { reason, messages } => writeln!(
                out,
                "── context replaced ({reason:?}): {} messages from here ──\n",
                messages.len()
            )?,
            Record::ModelChanged { model } => writeln!(out, "── model: {model} ──\n")?,
            Record::TodosChanged { todos } => {
                writeln!(out, "todos:")?;
                for t in todos {
                    writeln!(out, "  [{:?}] {}", t.status, t.content)?;
                }
            }
            // A call shows as its message's tool_call block and its result; the bookkeeping
            // records add nothing to read.
            Record::ToolStarted { .. }
            | Record::ToolFinished { .. }
            | Record::CheckpointRecorded { .. } => {}
            // Held above, until its message is shown.
            Record::Usage { .. } => {}
        }
        if response && let Some((u, c)) = pending.take() {
            usage_line(out, &u, c)?;
        }
    }
    if let Some((u, c)) = pending.take() {
        usage_line(out, &u, c)?;
    }
    let total = &loaded.state.usage;
    writeln!(
        out,
        "── total: {} response{} · {} · {} ──",
        loaded.state.responses,
        if loaded.state.responses == 1 { "" } else { "s" },
        tokens(total),
        match loaded.state.cost {
            c if c.priced == 0 => "cost unknown".to_string(),
            c if c.unpriced == 0 => usd_label(c.usd),
            c => format!(
                "{} and {} responses of unknown cost",
                usd_label(c.usd),
                c.unpriced
            ),
        }
    )
}

fn tokens(usage: &Usage) -> String {
    format!(
        "{} in, {} cached, {} out",
        usage.input + usage.cache_write,
        usage.cache_read,
        usage.output
    )
}

/// One response's usage, and its cost when the model's pricing was known.
fn usage_line(out: &mut impl Write, usage: &Usage, cost_usd: Option<f64>) -> std::io::Result<()> {
    let cost = match cost_usd {
        Some(usd) => usd_label(usd),
        None => "cost unknown".into(),
    };
    writeln!(out, "   · usage: {} · {cost}\n", tokens(usage))
}

fn block_line(out: &mut impl Write, role: Role, block: &ContentBlock) -> std::io::Result<()> {
    match block {
        ContentBlock::Text { text } => {
            let who = if role == Role::User { "›" } else { "⏺" };
            writeln!(out, "{who} {}\n", text.trim_end())
        }
        ContentBlock::Reasoning { text, .. } => writeln!(out, "  (thinking) {}\n", text.trim()),
        ContentBlock::Image { media_type, .. } => writeln!(out, "  [image {media_type}]\n"),
        ContentBlock::ToolCall {
            name, arguments, ..
        } => writeln!(out, "⏺ {name}({arguments})"),
        ContentBlock::ToolResult {
            content, is_error, ..
        } => {
            let mark = if *is_error { "  ⎿ error:" } else { "  ⎿" };
            let lines: Vec<&str> = content.lines().collect();
            for line in lines.iter().take(RESULT_LINES) {
                writeln!(out, "{mark} {line}")?;
            }
            if lines.len() > RESULT_LINES {
                writeln!(out, "  ⎿ … {} more lines", lines.len() - RESULT_LINES)?;
            }
            writeln!(out)
        }
    }
}
