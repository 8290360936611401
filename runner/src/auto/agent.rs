//! The agent of one session: `anvil -p` headless as a child process in the attempt's worktree,
//! run through [`crate::jobs::child`] exactly as an eval trial's is (the pinned model, the
//! paths to hide, the transcript at a given path, the process group killed on cancel or
//! timeout), with `--permission-mode bypass` inside its sandbox.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anvil_llm::registry::PinnedModel;
use anvil_report::record::Accounting;
use tokio_util::sync::CancellationToken;

use crate::jobs::child::{self, ChildRun, ChildSpec};

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
    /// Why the turn failed (`failed` only). A provider refusing the session itself (a bad
    /// key) never gets here: [`child::run`] makes it a persistent
    /// [`AgentError::ProviderRefused`], as for eval trials.
    pub error: Option<String>,
}

/// Why the agent did not end a session: the infrastructure's failure (retried as the next
/// attempt), except `Cancelled` — decided by [`child`], as for eval trials.
pub use crate::jobs::child::ChildError as AgentError;

/// One session's agent: what it runs with.
pub struct AgentSpec<'a> {
    pub anvil: &'a Path,
    pub env: &'a [(String, String)],
    pub model: &'a PinnedModel,
    pub worktree: &'a Path,
    /// Where the config file is written (outside the worktree).
    pub config_path: &'a Path,
    pub hidden: Vec<PathBuf>,
    /// The user's git objects the worktree borrows, shown read-only.
    pub readable: Vec<PathBuf>,
    pub transcript: &'a Path,
    pub prompt: &'a str,
    pub max_steps: u32,
    pub timeout: Duration,
}

/// Runs the agent to the end of its turn ([`child::run`], exactly as an eval trial's).
pub async fn run(spec: &AgentSpec<'_>, cancel: &CancellationToken) -> Result<AgentRun, AgentError> {
    let child = ChildSpec {
        anvil: spec.anvil,
        env: spec.env,
        model: spec.model,
        workspace: spec.worktree,
        config_path: spec.config_path,
        hidden: spec.hidden.clone(),
        readable: spec.readable.clone(),
        transcript: spec.transcript,
        prompt: spec.prompt,
        permission_mode: "bypass",
        mcp_servers: Default::default(),
        max_steps: spec.max_steps,
        extra_args: Vec::new(),
        // The run's own ledger admits each session (see `run_state::Ledger`).
        max_cost_usd: None,
        timeout: spec.timeout,
        traceparent: crate::telemetry::traceparent(&tracing::Span::current()),
    };
    Ok(match child::run(&child, cancel).await? {
        // The wall-clock cap ends the session: counted, never success by itself.
        ChildRun::TimedOut => {
            let (cost_usd, accounting) = child::transcript_cost(spec.transcript);
            AgentRun {
                outcome: "session_timed_out".into(),
                text: String::new(),
                steps: 0,
                cost_usd,
                accounting,
                error: None,
            }
        }
        ChildRun::Finished(result) => AgentRun {
            outcome: result.outcome.as_str().to_string(),
            text: result.text,
            steps: result.steps,
            cost_usd: result.cost_usd,
            accounting: result.accounting,
            error: result.error,
        },
    })
}
