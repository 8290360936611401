//! The interactive approver: shows the call and why it needs approval, and reads
//! `y` (allow once), `a` (always, for the rest of the session) or `n` (deny, with optional
//! feedback for the model). Ctrl-C at the prompt cancels the whole turn; anything but an
//! explicit yes denies.
//!
//! The prompt borrows the terminal from the renderer ([`Screen`]): it appears only once the
//! call's own line is on screen, and nothing else is printed until its line has ended.

use std::sync::{Arc, Mutex};

use anvil_agent::approval::{ApprovalDecision, ApprovalRequest, Approver};
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use tokio_util::sync::CancellationToken;

use crate::cli::render::{Screen, Style, call_line};

/// The running turn's token, so Ctrl-C at the prompt can cancel the turn.
pub type TurnToken = Arc<Mutex<Option<CancellationToken>>>;

pub struct InteractiveApprover {
    style: Style,
    turn: TurnToken,
    screen: Screen,
}

impl InteractiveApprover {
    /// `screen` is the renderer's: the prompt waits for the call's line to be on screen.
    pub fn new(style: Style, turn: TurnToken, screen: Screen) -> Self {
        Self {
            style,
            turn,
            screen,
        }
    }
}

enum Answer {
    Yes,
    Always,
    No(Option<String>),
    Interrupted,
}

fn ask(request: &ApprovalRequest, style: Style) -> Answer {
    eprintln!();
    eprintln!(
        "{}",
        style.yellow(&format!(
            "⏵ approve {}?",
            call_line(&request.tool, &request.args)
        ))
    );
    eprintln!(
        "{}",
        style.dim(&format!(
            "  {}",
            crate::cli::render::printable(&request.reason)
        ))
    );
    // Whatever keeps an answer from being read declines the call, and says so on screen.
    let declined = |e: ReadlineError| {
        eprintln!(
            "{}",
            style.red(&format!("  cannot read an answer ({e}): not run"))
        );
        Answer::No(None)
    };
    let mut editor = match DefaultEditor::new() {
        Ok(editor) => editor,
        Err(e) => return declined(e),
    };
    loop {
        match editor.readline("  [y]es  [a]lways  [n]o › ") {
            Ok(line) => match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => return Answer::Yes,
                "a" | "always" => return Answer::Always,
                "n" | "no" => {
                    let feedback = editor
                        .readline("  feedback for the model (Enter to skip) › ")
                        .ok()
                        .map(|f| f.trim().to_string())
                        .filter(|f| !f.is_empty());
                    return Answer::No(feedback);
                }
                _ => eprintln!("  answer y, a or n"),
            },
            Err(ReadlineError::Interrupted) => return Answer::Interrupted,
            // Ctrl-D: a no without feedback.
            Err(ReadlineError::Eof) => return Answer::No(None),
            Err(e) => return declined(e),
        }
    }
}

#[async_trait::async_trait]
impl Approver for InteractiveApprover {
    async fn approve(&self, request: ApprovalRequest) -> ApprovalDecision {
        let style = self.style;
        let lease = self.screen.borrow().await;
        // The lease goes with the prompt: rustyline ends the prompt's line before it returns,
        // so the renderer's next line starts on a row of its own.
        let answer = tokio::task::spawn_blocking(move || {
            let answer = ask(&request, style);
            drop(lease);
            answer
        })
        .await
        .unwrap_or(Answer::Interrupted);
        match answer {
            Answer::Yes => ApprovalDecision::Allow,
            Answer::Always => ApprovalDecision::AllowAlways,
            Answer::No(feedback) => ApprovalDecision::Deny { feedback },
            Answer::Interrupted => {
                if let Some(token) = self.turn.lock().ok().and_then(|t| t.clone()) {
                    token.cancel();
                }
                ApprovalDecision::Deny {
                    feedback: Some("the user cancelled the turn".into()),
                }
            }
        }
    }
}
