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

/// The most characters shown of one line of a tool result, and of a call's arguments; the
/// rest is counted (a 5 MB single-line result is not printed whole).
const LINE_CHARS: usize = 2_000;

/// Where a text block's second and later lines start: under the role marker, behind a gutter
/// no structural line starts with, so a line of model text or of a prompt can never pass for
/// a tool result (`  ⎿`), a usage line or a total (`──`).
const GUTTER: &str = "│ ";

/// How many sessions `anvil sessions` reads and shows without `--all`.
pub const RECENT: usize = 20;

/// `anvil sessions [--all]`: this directory's sessions, newest first.
pub fn list(cli: &Cli, all: bool) -> i32 {
    let limit = if all { usize::MAX } else { RECENT };
    let listed = setup::workspace(cli).and_then(|cwd| {
        let store = setup::session_store()?;
        store
            .list_recent(&cwd, limit)
            .map(|l| (cwd, l))
            .map_err(|e| setup::SetupError(e.to_string()))
    });
    let (cwd, listing) = match listed {
        Ok(l) => l,
        Err(e) => {
            eprintln!("anvil: {e}");
            return exit::CONFIG;
        }
    };
    // A file that does not load is shown, never hidden: it may be the newest session.
    for e in &listing.unreadable {
        eprintln!("anvil: unreadable: {}", visible(&e.to_string()));
    }
    let mut out = std::io::stdout().lock();
    if listing.sessions.is_empty() && listing.older == 0 {
        let _ = writeln!(out, "no sessions in {}", cwd.display());
        return exit::DONE;
    }
    for s in listing.sessions {
        let line = format!(
            "{}  {:>8}  {:<24}  {:>3} prompts  {:>9}  {}",
            visible(&s.id),
            age(s.modified),
            visible(&s.model),
            s.turns,
            cost_label(&s.cost),
            prompt_label(&s.first_prompt)
        );
        if writeln!(out, "{line}").is_err() {
            return exit::CANCELLED;
        }
    }
    if listing.older > 0 {
        let _ = writeln!(
            out,
            "… and {} older (anvil sessions --all lists every one)",
            listing.older
        );
    }
    exit::DONE
}

/// A session's cost from its ledger: the total when every response's is known, `~` when it
/// holds estimates (a cut-off request, a kept reservation), a lower bound (`≥`) when some model
/// had no pricing, `—` when nothing was priced.
pub(crate) fn cost_label(cost: &Cost) -> String {
    let priced = cost.priced + cost.estimated + u64::from(cost.outstanding_usd.is_some());
    match cost.total() {
        _ if priced == 0 => "—".into(),
        Some(usd) if cost.is_estimated() => format!("~{}", usd_label(usd)),
        Some(usd) => usd_label(usd),
        None => format!("≥{}", usd_label(cost.spent())),
    }
}

/// A session's first prompt in a listing: its first line, at most 60 characters, printable.
pub(crate) fn prompt_label(prompt: &str) -> String {
    let first: String = prompt
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(60)
        .collect();
    visible(&first)
}

/// `s` on one line and safe to print to a terminal, piped or not: control characters (C0
/// but tab, which becomes spaces; DEL; C1), line and paragraph separators and bidirectional
/// overrides show as escapes (`\x1b`, `\u{202e}`) instead of acting on the terminal — a
/// session holds untrusted model text and tool output, which may carry OSC 52 clipboard
/// writes, screen clears or text that reads differently than it is.
pub fn visible(s: &str) -> String {
    let mut shown = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\t' => shown.push_str("    "),
            '\0'..='\x1f' | '\x7f'..='\u{9f}' => shown.push_str(&format!("\\x{:02x}", c as u32)),
            c if acts_on_the_terminal(c) => shown.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => shown.push(c),
        }
    }
    shown
}

/// Printable characters that change how text around them shows: bidirectional overrides,
/// isolates and marks, and the Unicode line and paragraph separators.
fn acts_on_the_terminal(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// Serialized JSON as safe to print as [`visible`] text: JSON escapes C0 already; DEL, C1
/// and the characters of [`acts_on_the_terminal`] are escaped too (`\u007f`), which reads
/// back the same, since outside strings JSON is ASCII.
fn json_visible(json: &str) -> String {
    let mut shown = String::with_capacity(json.len());
    for c in json.chars() {
        if matches!(c, '\x7f'..='\u{9f}') || acts_on_the_terminal(c) {
            shown.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            shown.push(c);
        }
    }
    shown
}

/// At most `max` characters of `s`, and how many were left out.
fn capped(s: &str, max: usize) -> (&str, usize) {
    match s.char_indices().nth(max) {
        Some((end, _)) => (&s[..end], s[end..].chars().count()),
        None => (s, 0),
    }
}

/// `s` capped at [`LINE_CHARS`], printable, with a count of what was left out.
fn capped_line(s: &str) -> String {
    match capped(s, LINE_CHARS) {
        (all, 0) => visible(all),
        (start, more) => format!("{}… ({more} more characters)", visible(start)),
    }
}

/// A block of text: its first line after `marker`, the others after `gutter`; every line
/// printable.
fn text_block(out: &mut impl Write, marker: &str, gutter: &str, text: &str) -> std::io::Result<()> {
    let mut lines = text.trim_end().lines();
    writeln!(out, "{marker}{}", visible(lines.next().unwrap_or_default()))?;
    for line in lines {
        writeln!(out, "{gutter}{}", visible(line))?;
    }
    writeln!(out)
}

pub(crate) fn usd_label(usd: f64) -> String {
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
            .and_then(|json| writeln!(out, "{}", json_visible(&json))),
        ReplayFormat::Text => {
            let entries: Vec<Entry> = whole
                .split(|&b| b == b'\n')
                .filter_map(|l| serde_json::from_slice(l).ok())
                .collect();
            render(&mut out, &entries, &loaded).and_then(|()| match &torn {
                Some(note) => writeln!(out, "── {} ──", visible(note)),
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
        if let Record::Usage {
            usage, cost_usd, ..
        } = &entry.record
        {
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
            Record::SessionStarted { id, cwd, model, .. } => writeln!(
                out,
                "session {}\n  in {}\n  on {}\n",
                visible(id),
                visible(cwd),
                visible(model)
            )?,
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
            Record::ModelChanged { model } => writeln!(out, "── model: {} ──\n", visible(model))?,
            Record::TodosChanged { todos } => {
                writeln!(out, "todos:")?;
                for t in todos {
                    writeln!(out, "  [{:?}] {}", t.status, visible(&t.content))?;
                }
            }
            // A call shows as its message's tool_call block and its result; the bookkeeping
            // records add nothing to read.
            Record::ToolStarted { .. }
            | Record::ToolFinished { .. }
            | Record::CostReserved { .. }
            | Record::CheckpointRecorded { .. } => {}
            Record::CostEstimated { usd } => writeln!(
                out,
                "   · a request ended without reported usage · ~{} (estimated)\n",
                usd_label(*usd)
            )?,
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
            c if c.unpriced == 0 && c.total() == Some(0.0) && c.priced == 0 => {
                "cost unknown".to_string()
            }
            c if c.unpriced == 0 && c.is_estimated() => {
                format!("~{} (estimated)", usd_label(c.spent()))
            }
            c if c.unpriced == 0 => usd_label(c.spent()),
            c if c.priced + c.estimated == 0 => "cost unknown".to_string(),
            c => format!(
                "{} and {} responses of unknown cost",
                usd_label(c.spent()),
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
            let who = if role == Role::User { "› " } else { "⏺ " };
            text_block(out, who, GUTTER, text)
        }
        ContentBlock::Reasoning { text, .. } => text_block(
            out,
            "  (thinking) ",
            &format!("  {GUTTER}"),
            text.trim_start(),
        ),
        ContentBlock::Image { media_type, .. } => {
            writeln!(out, "  [image {}]\n", visible(media_type))
        }
        ContentBlock::ToolCall {
            name,
            arguments,
            meta,
            ..
        } => {
            // A call anvil recovered from the model's text says so (`tool_calls = "text"`).
            let recovered = anvil_llm::ProviderMeta::for_provider(
                meta.as_ref(),
                anvil_agent::text_calls::RECOVERED_META,
            )
            .and_then(|d| {
                let from = d["recovered_from"].as_str()?;
                let dropped: Vec<&str> = d["dropped_schema_keys"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(serde_json::Value::as_str)
                    .collect();
                Some(if dropped.is_empty() {
                    format!("  (recovered from text: {})", visible(from))
                } else {
                    format!(
                        "  (recovered from text: {}; dropped {})",
                        visible(from),
                        visible(&dropped.join(", "))
                    )
                })
            })
            .unwrap_or_default();
            writeln!(
                out,
                "⏺ {}({}){recovered}",
                visible(name),
                capped_line(&json_visible(&arguments.to_string()))
            )
        }
        ContentBlock::ToolResult {
            content, is_error, ..
        } => {
            // Every line of a result after its mark, so none reads as anything else; the
            // count of lines left out without one, so no result line can pass for it.
            let mark = if *is_error { "  ⎿ error:" } else { "  ⎿" };
            let lines: Vec<&str> = content.lines().collect();
            for line in lines.iter().take(RESULT_LINES) {
                writeln!(out, "{mark} {}", capped_line(line))?;
            }
            if lines.len() > RESULT_LINES {
                writeln!(out, "    … {} more lines", lines.len() - RESULT_LINES)?;
            }
            writeln!(out)
        }
    }
}
