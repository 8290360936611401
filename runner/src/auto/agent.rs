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
    /// Why the turn failed (`failed` only).
    pub error: Option<String>,
}

impl AgentRun {
    /// The provider's refusal of the credentials (HTTP 401 or 403) that ended the turn, if it
    /// did: no later attempt does better, so it is a persistent infrastructure failure, never
    /// a session the model had.
    pub fn auth_refused(&self) -> Option<&str> {
        if self.outcome != "failed" {
            return None;
        }
        let error = self.error.as_deref()?;
        [401, 403]
            .into_iter()
            .any(|status| error.starts_with(&http_error_prefix(status)))
            .then_some(error)
    }
}

/// How `anvil -p` says a request ended with HTTP `status`: the provider error's own text
/// ("HTTP 401 from the provider"), up to its body.
fn http_error_prefix(status: u16) -> String {
    let shown = anvil_llm::LlmError::Http {
        status,
        body: String::new(),
        retry_after: None,
    }
    .to_string();
    shown.split(':').next().unwrap_or_default().to_string()
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
        transcript: spec.transcript,
        prompt: spec.prompt,
        permission_mode: "bypass",
        max_steps: spec.max_steps,
        timeout: spec.timeout,
    };
    Ok(match child::run(&child, cancel).await? {
        // The wall-clock cap ends the session: counted, never success by itself.
        ChildRun::TimedOut => AgentRun {
            outcome: "session_timed_out".into(),
            text: String::new(),
            steps: 0,
            cost_usd: None,
            accounting: Accounting::Unknown,
            error: None,
        },
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

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(error: &str) -> AgentRun {
        AgentRun {
            outcome: "failed".into(),
            text: String::new(),
            steps: 1,
            cost_usd: None,
            accounting: Accounting::Unknown,
            error: Some(error.into()),
        }
    }

    #[test]
    fn only_a_refusal_of_the_credentials_is_an_auth_failure() {
        let refused = anvil_llm::LlmError::Http {
            status: 401,
            body: r#"{"error": {"message": "invalid x-api-key"}}"#.into(),
            retry_after: None,
        }
        .to_string();
        assert_eq!(failed(&refused).auth_refused(), Some(refused.as_str()));
        for other in [
            "HTTP 400 from the provider: bad request",
            "HTTP 4010 from the provider: no such status",
            "could not reach the provider: connection refused",
        ] {
            assert_eq!(failed(other).auth_refused(), None, "{other}");
        }
        let done = AgentRun {
            outcome: "done".into(),
            ..failed(&refused)
        };
        assert_eq!(done.auth_refused(), None);
    }
}
