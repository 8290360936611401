//! The agent of one session: `anvil -p` headless as a child process in the attempt's worktree,
//! run exactly as an eval trial's is ([`crate::jobs::trial`]): the pinned model and the paths
//! to hide in a [`TrialConfig`] file, the session kept as a transcript at a given path, its
//! result read through [`HeadlessOutput`], the process group killed on cancel or timeout.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anvil_agent::process::{self, ProcessSpec, Termination};
use anvil_llm::registry::PinnedModel;
use anvil_report::record::Accounting;
use tokio_util::sync::CancellationToken;

use crate::contract::{HeadlessOutput, TrialConfig};
use crate::exit;

/// How the agent's session ended, when it ran to an end of its own or to a cap.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentRun {
    /// `done`, `max_steps`, `max_tokens`, `refused`, `protocol_stopped`, `failed`, or
    /// `session_timed_out` (the wall-clock cap).
    pub outcome: String,
    /// The final answer's text (what the model says; never evidence of anything).
    pub text: String,
    pub steps: u32,
    pub cost_usd: Option<f64>,
    pub accounting: Accounting,
}

/// Why the agent did not end a session: the infrastructure's failure (retried as the next
/// attempt), except `Cancelled`.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("the run was cancelled")]
    Cancelled,
    #[error("cannot write the session's config {}: {reason}", path.display())]
    Config { path: PathBuf, reason: String },
    #[error("the agent could not run: {0}")]
    Spawn(#[from] process::ProcessError),
    #[error("the agent died from signal {signal}: {stderr}")]
    Signaled { signal: i32, stderr: String },
    #[error("the agent exited {code} without a JSON result: {stderr}")]
    NoResult { code: i32, stderr: String },
    #[error("the agent exited {code} with a result that does not keep the contract: {reason}")]
    BadResult { code: i32, reason: String },
    /// Configuration or usage: retrying cannot help.
    #[error("the agent could not start (exit {code}, {outcome}): {error}")]
    Setup {
        code: i32,
        outcome: String,
        error: String,
    },
    #[error("provider unreachable after retries: {error}")]
    ProviderUnreachable { error: String },
    #[error("the agent exited {code} after a turn that ended {outcome}: {error}")]
    UnexpectedExit {
        code: i32,
        outcome: String,
        error: String,
    },
    #[error("the agent ran model config {ran} instead of the pinned {pinned}")]
    NotThePinnedModel { ran: String, pinned: String },
}

impl AgentError {
    /// Whether retrying cannot help (ends the run `infra_failed` at once).
    pub fn persistent(&self) -> bool {
        matches!(self, AgentError::Setup { .. })
    }
}

/// One session's agent: what it runs with.
pub struct AgentSpec<'a> {
    pub anvil: &'a Path,
    pub env: &'a [(String, String)],
    pub model: &'a PinnedModel,
    pub worktree: &'a Path,
    /// Where the config file is written (outside the worktree).
    pub config_path: &'a Path,
    pub hidden: Vec<PathBuf>,
    pub transcript: &'a Path,
    pub prompt: &'a str,
    pub max_steps: u32,
    pub timeout: Duration,
}

/// Runs the agent to the end of its turn.
pub async fn run(spec: &AgentSpec<'_>, cancel: &CancellationToken) -> Result<AgentRun, AgentError> {
    let config = TrialConfig {
        model: spec.model.clone(),
        hidden: spec.hidden.clone(),
        session_path: Some(spec.transcript.to_path_buf()),
    };
    config
        .write(spec.config_path)
        .map_err(|e| AgentError::Config {
            path: spec.config_path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let worktree = spec.worktree.display().to_string();
    let config_arg = spec.config_path.display().to_string();
    let process = ProcessSpec::new(spec.anvil.display().to_string(), spec.worktree)
        .args([
            "-p",
            spec.prompt,
            "--pinned-config",
            &config_arg,
            "--output-format",
            "json",
            "--permission-mode",
            "bypass",
            "--max-steps",
            &spec.max_steps.to_string(),
            "-C",
            &worktree,
        ])
        .env(spec.env.to_vec())
        .timeout(spec.timeout)
        .capture(1024 * 1024, 64 * 1024);
    let output = process::run(&process, cancel).await?;
    let stderr_tail = || {
        let text = output.stderr.text();
        let chars: Vec<char> = text.chars().collect();
        let start = chars.len().saturating_sub(1500);
        chars[start..].iter().collect::<String>().trim().to_string()
    };
    let code = match output.termination {
        Termination::Cancelled => return Err(AgentError::Cancelled),
        Termination::TimedOut => {
            return Ok(AgentRun {
                outcome: "session_timed_out".into(),
                text: String::new(),
                steps: 0,
                cost_usd: None,
                accounting: Accounting::Unknown,
            });
        }
        Termination::Signaled(signal) => {
            return Err(AgentError::Signaled {
                signal,
                stderr: stderr_tail(),
            });
        }
        Termination::Exited(code) => code,
    };
    let result = match HeadlessOutput::parse(&output.stdout.text()) {
        None => {
            return Err(AgentError::NoResult {
                code,
                stderr: stderr_tail(),
            });
        }
        Some(Err(e)) => {
            return Err(AgentError::BadResult {
                code,
                reason: e.to_string(),
            });
        }
        Some(Ok(HeadlessOutput::Setup(failure))) => {
            return Err(AgentError::Setup {
                code,
                outcome: failure.outcome.as_str().to_string(),
                error: failure.error,
            });
        }
        Some(Ok(HeadlessOutput::Turn(result))) => *result,
    };
    match code {
        exit::DONE
        | exit::MAX_STEPS
        | exit::MAX_TOKENS
        | exit::REFUSED
        | exit::PROTOCOL_STOPPED => {}
        exit::FAILED if result.retryable != Some(true) => {}
        exit::FAILED => {
            return Err(AgentError::ProviderUnreachable {
                error: result.error.unwrap_or_default(),
            });
        }
        _ => {
            return Err(AgentError::UnexpectedExit {
                code,
                outcome: result.outcome.as_str().to_string(),
                error: result.error.unwrap_or_default(),
            });
        }
    }
    let pinned = spec.model.digest();
    if result.config_digest != pinned {
        return Err(AgentError::NotThePinnedModel {
            ran: result.config_digest,
            pinned,
        });
    }
    Ok(AgentRun {
        outcome: result.outcome.as_str().to_string(),
        text: result.text,
        steps: result.steps,
        cost_usd: result.cost_usd,
        accounting: result.accounting,
    })
}
