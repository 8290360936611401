//! `anvil sessions` and `anvil replay`: reading kept sessions.

use std::io::Write;
use std::time::SystemTime;

use anvil_agent::session::{Entry, Record, load};
use anvil_llm::{ContentBlock, Role};

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
            "{}  {:>8}  {:<24}  {:>3} prompts  {}",
            s.id,
            age(s.modified),
            s.model,
            s.turns,
            prompt
        );
        if writeln!(out, "{line}").is_err() {
            return exit::CANCELLED;
        }
    }
    exit::DONE
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
    let mut out = std::io::stdout().lock();
    let written = match format {
        ReplayFormat::Json => serde_json::to_string_pretty(&loaded.messages)
            .map_err(std::io::Error::other)
            .and_then(|json| writeln!(out, "{json}")),
        ReplayFormat::Text => match entries(&path) {
            Ok(entries) => render(&mut out, &entries),
            Err(e) => {
                eprintln!("anvil: {e}");
                return exit::CONFIG;
            }
        },
    };
    match written {
        Ok(()) => exit::DONE,
        Err(_) => exit::CANCELLED,
    }
}

/// Every whole record of a file that [`load`] accepted.
fn entries(path: &std::path::Path) -> Result<Vec<Entry>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Entry>(l).ok())
        .collect())
}

fn render(out: &mut impl Write, entries: &[Entry]) -> std::io::Result<()> {
    for entry in entries {
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
            Record::Usage { usage } => writeln!(
                out,
                "   · usage: {} in, {} cached, {} out\n",
                usage.input + usage.cache_write,
                usage.cache_read,
                usage.output
            )?,
        }
    }
    Ok(())
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
