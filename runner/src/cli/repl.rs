//! The interactive session: a rustyline prompt, slash commands, and Ctrl-C that cancels the
//! running turn (and only the turn).

use std::path::PathBuf;

use anvil_agent::{EventSink, TurnOutcome};
use anvil_llm::ContentBlock;
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use tokio_util::sync::CancellationToken;

use anvil_agent::session::SessionWriter;

use crate::cli::Cli;
use crate::cli::approve;
use crate::cli::render::{self, Style};
use crate::cli::setup::{self, Session};
use crate::exit;

const HELP: &str = "\
Commands:
  /help           this list
  /model NAME     continue on another model (alias or provider:model)
  /compact [FOCUS]  replace the conversation by a summary (focused on FOCUS)
  /cost           tokens, cache hit rate and USD by model; the budget left
  /mcp            MCP servers: starting, connected with N tools, or why they failed
  /sessions       this directory's sessions
  /resume ID      continue session ID here (this one stays in its file)
  /clear          start over with an empty conversation
  /exit           leave (or Ctrl-D)
Ctrl-C stops the running turn; at the prompt it clears the line.";

fn history_path() -> Option<PathBuf> {
    let dir = anvil_llm::config::data_dir()?;
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join("history.txt"))
}

pub fn run(cli: Cli) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("anvil: cannot start the runtime: {e}");
            return exit::FAILED;
        }
    };
    let (sink, events) = EventSink::channel(256);
    let style = Style::detect();
    let (screen, loans) = render::Screen::channel();
    // MCP servers start in the background on this runtime; the prompt never waits for them.
    let _entered = rt.enter();
    let elicitor = std::sync::Arc::new(crate::cli::elicit::InteractiveElicitor::new(
        style,
        screen.clone(),
    ));
    let mut session = match setup::build(&cli, sink, elicitor) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("anvil: {e}");
            return exit::CONFIG;
        }
    };
    if let Err(e) = setup::apply_budget(&cli, &mut session) {
        eprintln!("anvil: {e}");
        return exit::BUDGET_EXCEEDED;
    }
    let turn_token: approve::TurnToken = Default::default();
    let policy = match setup::policy_for(&cli, &session) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("anvil: {e}");
            return exit::CONFIG;
        }
    };
    session.agent = session.agent.with_permissions(
        policy,
        std::sync::Arc::new(approve::InteractiveApprover::new(
            style,
            turn_token.clone(),
            screen,
        )),
    );
    let (done_tx, done_rx) = std::sync::mpsc::channel::<TurnOutcome>();
    rt.spawn(render::interactive(events, loans, style, done_tx));

    println!(
        "{}",
        style.dim(&format!(
            "anvil · {} ({}) · {} · session {} · /help for commands",
            session.model.name,
            session.model.model,
            session.cwd.display(),
            session.agent.session_id().unwrap_or("(not kept)")
        ))
    );
    for key in &session.ignored {
        eprintln!(
            "{}",
            style.yellow(&format!(
                "note: {} in {} was not applied: {}",
                key.key,
                key.path.display(),
                key.reason
            ))
        );
    }

    let mut editor = match DefaultEditor::new() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("anvil: cannot start the line editor: {e}");
            return exit::FAILED;
        }
    };
    let history = history_path();
    if let Some(h) = &history {
        let _ = editor.load_history(h);
    }
    loop {
        match editor.readline("› ") {
            Ok(line) => {
                let line = line.trim();
                if line.is_empty() {
                    continue;
                }
                // The history file is kept like a session: known secret values redacted.
                let _ = editor.add_history_entry(session.redactor.redact(line));
                if let Some(command) = line.strip_prefix('/') {
                    if !slash_command(command, &mut session, style, &rt) {
                        break;
                    }
                    continue;
                }
                let cancel = CancellationToken::new();
                if let Ok(mut t) = turn_token.lock() {
                    *t = Some(cancel.clone());
                }
                rt.block_on(async {
                    let listener = crate::cli::cancel_on_ctrl_c(&cancel);
                    session
                        .agent
                        .run_turn(vec![ContentBlock::text(line)], cancel)
                        .await;
                    listener.abort();
                });
                // Wait until the renderer has put the whole turn on screen.
                let _ = done_rx.recv();
                println!("{}", style.dim(&context_line(&session)));
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("anvil: {e}");
                break;
            }
        }
    }
    if let Some(h) = &history {
        let _ = editor.save_history(h);
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(h, std::fs::Permissions::from_mode(0o600));
    }
    if let Some(mcp) = &session.mcp {
        rt.block_on(mcp.shutdown(crate::cli::mcp::SHUTDOWN_GRACE));
    }
    exit::DONE
}

/// How full the context is, after each turn.
fn context_line(session: &Session) -> String {
    let tokens = session.agent.context_tokens();
    let budget = session.agent.budget();
    format!(
        "context: ~{}k of {}k tokens ({:.0} %)",
        tokens / 1000,
        budget.window / 1000,
        budget.fullness(tokens) * 100.0
    )
}

/// Runs a slash command; `false` means leave.
fn slash_command(
    command: &str,
    session: &mut Session,
    style: Style,
    rt: &tokio::runtime::Runtime,
) -> bool {
    let (name, arg) = command
        .split_once(char::is_whitespace)
        .map(|(n, a)| (n, a.trim()))
        .unwrap_or((command, ""));
    match name {
        "exit" | "quit" => return false,
        "compact" => {
            let focus = (!arg.is_empty()).then_some(arg);
            let cancel = CancellationToken::new();
            let compacted = rt.block_on(async {
                let listener = crate::cli::cancel_on_ctrl_c(&cancel);
                let r = session.agent.compact(focus, &cancel).await;
                listener.abort();
                r
            });
            match compacted {
                Ok((before, after)) => println!(
                    "{}",
                    style.dim(&format!("(compacted: ~{before} → ~{after} tokens)"))
                ),
                Err(e) => println!("{}", style.red(&format!("cannot compact: {e}"))),
            }
        }
        "sessions" => match setup::session_store().and_then(|store| {
            store
                .list_recent(&session.cwd, crate::cli::sessions::RECENT)
                .map_err(|e| setup::SetupError(e.to_string()))
        }) {
            Ok(listing) => {
                for e in &listing.unreadable {
                    let text = format!(
                        "unreadable: {}",
                        crate::cli::sessions::visible(&e.to_string())
                    );
                    println!("{}", style.red(&text));
                }
                for s in listing.sessions {
                    let here = session.agent.session_id() == Some(s.id.as_str());
                    println!(
                        "{} {}  {:>3} prompts  {:>9}  {}",
                        if here { "*" } else { " " },
                        crate::cli::sessions::visible(&s.id),
                        s.turns,
                        crate::cli::sessions::cost_label(&s.cost),
                        crate::cli::sessions::prompt_label(&s.first_prompt)
                    );
                }
                if listing.older > 0 {
                    let text = format!("(and {} older: anvil sessions --all)", listing.older);
                    println!("{}", style.dim(&text));
                }
            }
            Err(e) => println!("{}", style.red(&e.to_string())),
        },
        "resume" if arg.is_empty() => println!("{}", style.red("usage: /resume ID")),
        "resume" if session.agent.session_id() == Some(arg) => {
            println!("{}", style.dim(&format!("(already in session {arg})")))
        }
        "resume" => {
            let resumed = setup::session_store()
                .and_then(|store| setup::session_path(&store, &session.cwd, arg))
                .and_then(|path| {
                    SessionWriter::resume(&path, Some(&session.cwd), Some(session.redactor.clone()))
                        .map_err(|e| setup::SetupError(e.to_string()))
                })
                .and_then(|(writer, loaded)| {
                    let count = loaded.messages.len();
                    session
                        .agent
                        .attach_session(writer, loaded)
                        .map(|()| count)
                        .map_err(|e| setup::SetupError(e.to_string()))
                });
            match resumed {
                Ok(count) => println!(
                    "{}",
                    style.dim(&format!("(resumed {arg}: {count} messages)"))
                ),
                Err(e) => println!("{}", style.red(&format!("cannot resume: {e}"))),
            }
        }
        "help" => println!("{HELP}"),
        "mcp" => match &session.mcp {
            None => println!(
                "{}",
                style.dim("no MCP servers configured (add [mcp_servers.NAME] to the config)")
            ),
            Some(mcp) => {
                for line in crate::cli::mcp::status_lines(mcp) {
                    println!("{line}");
                }
            }
        },
        "cost" => print!(
            "{}",
            crate::cli::cost::report(session.agent.session(), session.agent.spend_limit())
        ),
        "clear" => {
            let _ = session.agent.set_messages(Vec::new());
            println!("{}", style.dim("(conversation cleared)"));
        }
        "model" if arg.is_empty() => println!(
            "{}",
            style.dim(&format!(
                "model: {} ({})",
                session.model.name, session.model.model
            ))
        ),
        "model" => match session.registry.resolve(arg) {
            Ok(model)
                if model.pricing.is_none()
                    && let Some((usd, _)) = session.agent.spend_limit() =>
            {
                println!(
                    "{}",
                    style.red(&format!(
                        "cannot switch: {}",
                        setup::unpriced(&model.name, usd)
                    ))
                )
            }
            Ok(model) => {
                let handoff = session.agent.switch_model(
                    std::sync::Arc::clone(&model.provider),
                    model.model.clone(),
                    model.protocol,
                    model.limits.max_output_tokens,
                    model.pricing,
                );
                session.agent.set_tool_calls(model.tool_calls);
                let mut note = format!("now on {} ({})", model.name, model.model);
                if handoff.dropped_reasoning > 0 {
                    note.push_str(&format!(
                        "; {} reasoning block(s) of the previous model were left behind",
                        handoff.dropped_reasoning
                    ));
                }
                session.model = model;
                println!("{}", style.dim(&note));
            }
            Err(e) => println!("{}", style.red(&format!("cannot switch: {e}"))),
        },
        other => println!(
            "{}",
            style.red(&format!(
                "unknown command /{other}; /help lists the commands"
            ))
        ),
    }
    true
}
