//! The typed contract between an eval worker and the `anvil -p` it runs for a trial, in both
//! directions: what the worker hands the child ([`TrialConfig`], a file passed as
//! `--pinned-config`) and what the child prints back with `--output-format json`
//! ([`HeadlessResult`], or [`HeadlessFailure`] when the turn could not even be set up). The
//! headless writer and the trial reader use these types and nothing else, so neither side can
//! drift from the other.

use std::path::{Path, PathBuf};

use anvil_agent::TurnOutcome;
use anvil_llm::registry::PinnedModel;
use anvil_llm::{ProviderRefusal, Usage};
use anvil_report::record::Accounting;
use serde::{Deserialize, Serialize};

/// Everything a trial's child `anvil -p` runs with that does not come from its command line.
///
/// With this, the child reads no config file at all: not the workspace's `.anvil/config.toml`
/// (a task repository is untrusted, and its `[models.*]` could re-point the alias), not the
/// worker's user config. The pinned model is the whole truth about the model; permission rules
/// are none beyond `--permission-mode`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrialConfig {
    /// The model exactly as the sweep pinned it.
    pub model: PinnedModel,
    /// Paths the trial's sandbox must hide from the agent's commands: the task directory
    /// (solution, grader files, hidden tests), the workspaces root (other trials), the sweep's
    /// artifact directory (other trials' transcripts), the queue's data directory.
    pub hidden: Vec<PathBuf>,
    /// Where the child keeps the trial's session, its transcript: a new file at exactly this
    /// path (an existing file is refused, never appended to). `None`: no session is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_path: Option<PathBuf>,
    /// Host paths the sandbox shows read-only besides the workspace, the system directories
    /// and the toolchains: an `anvil auto` session's worktree borrows the user's git objects
    /// (`objects/info/alternates`), so git inside it works. Empty for eval trials.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readable: Vec<PathBuf>,
    /// MCP servers the task names (`task.toml`): the child starts them inside the trial's
    /// sandbox, and no others (it reads no config file).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_servers: std::collections::BTreeMap<String, anvil_llm::mcp_config::McpServerConfig>,
}

/// A [`TrialConfig`] file that could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum TrialConfigError {
    #[error("cannot write the trial config {path}: {reason}")]
    Write { path: PathBuf, reason: String },
    #[error("cannot read the trial config {path}: {reason}")]
    Read { path: PathBuf, reason: String },
}

impl TrialConfig {
    /// The file name the worker writes it under, beside (never inside) the workspace.
    pub const FILE_NAME: &'static str = "trial-config.json";

    pub fn write(&self, path: &Path) -> Result<(), TrialConfigError> {
        let err = |reason: String| TrialConfigError::Write {
            path: path.to_path_buf(),
            reason,
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| err(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| err(e.to_string()))
    }

    pub fn read(path: &Path) -> Result<Self, TrialConfigError> {
        let err = |reason: String| TrialConfigError::Read {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| err(e.to_string()))
    }
}

/// How a headless turn ended (`jq .outcome`); each has its exit code (see [`crate::exit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadlessOutcome {
    Done,
    MaxSteps,
    MaxTokens,
    Refused,
    Cancelled,
    ProtocolStopped,
    Failed,
    /// The hard budget could not admit the next request.
    BudgetExceeded,
}

impl HeadlessOutcome {
    pub fn of(outcome: &TurnOutcome) -> Self {
        match outcome {
            TurnOutcome::Done => Self::Done,
            TurnOutcome::MaxSteps => Self::MaxSteps,
            TurnOutcome::MaxTokens => Self::MaxTokens,
            TurnOutcome::Refused => Self::Refused,
            TurnOutcome::Cancelled => Self::Cancelled,
            TurnOutcome::ProtocolStopped { .. } => Self::ProtocolStopped,
            TurnOutcome::Failed { .. } => Self::Failed,
            TurnOutcome::BudgetExceeded { .. } => Self::BudgetExceeded,
        }
    }

    /// The name in JSON and in trial records.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "done",
            Self::MaxSteps => "max_steps",
            Self::MaxTokens => "max_tokens",
            Self::Refused => "refused",
            Self::Cancelled => "cancelled",
            Self::ProtocolStopped => "protocol_stopped",
            Self::Failed => "failed",
            Self::BudgetExceeded => "budget_exceeded",
        }
    }
}

/// `anvil -p --output-format json`: one object on stdout at the end of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadlessResult {
    pub outcome: HeadlessOutcome,
    /// The final answer's text.
    pub text: String,
    /// Model requests in the turn.
    pub steps: u32,
    /// What the turn's responses used, as the provider reported it — or, for a response
    /// cancelled before it was reported, partly estimated (`usage_estimated`).
    pub usage: Usage,
    /// Part of `usage` is anvil's estimate, not the provider's report: a response was cut off
    /// (`cancelled`) before the provider reported its usage (input: the request's estimate;
    /// output: the text that arrived, chars / 4).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub usage_estimated: bool,
    /// The name the model was resolved from (alias or `provider:model`).
    pub model: String,
    /// The provider's config name.
    pub provider: String,
    /// The provider's model id.
    pub model_id: String,
    /// [`PinnedModel::digest`] of the configuration the turn ran with.
    pub config_digest: String,
    /// `None` unless the model has pricing; never a made-up 0.
    pub cost_usd: Option<f64>,
    /// How `cost_usd` was obtained; a failed turn's cost is `estimated` (a lower bound).
    pub accounting: Accounting,
    /// Why the turn failed (`failed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether a failure was one a later retry may not hit (`failed` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// The provider's HTTP status when a response's status ended the turn (`failed` only):
    /// with `steps` and `usage`, what tells a trial refused by the provider (an infrastructure
    /// error) from a run the model had (`jobs::child`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// Why the provider refused, when its answer says (`failed` only): `account` (a key it
    /// does not accept, no credit, no quota — at any step an infrastructure error of an eval
    /// trial, never the model's fail) or `generation` (it rejected what the model generated —
    /// the model's fail, even on the first request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_refusal: Option<ProviderRefusal>,
    /// The provider's stop reason (`protocol_stopped`), or why the budget stopped the turn
    /// (`budget_exceeded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The session file could not be written (a full disk), which ended the turn `failed`:
    /// the harness's failure, not the model's (an eval trial records it as an infrastructure
    /// error).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub session_unwritten: bool,
    /// The session the turn was kept in (`anvil -p --resume ID` continues it); `None` when
    /// the turn kept no session file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Advice about a setting, one line: e.g. the model wrote a tool call as text and
    /// `tool_calls = "text"` would have run it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

/// Why a headless turn could not be set up (exit 6 or 64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SetupOutcome {
    ConfigError,
    UsageError,
}

impl SetupOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ConfigError => "config_error",
            Self::UsageError => "usage_error",
        }
    }
}

/// `anvil -p --output-format json` when no turn ran: bad arguments, config or model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeadlessFailure {
    pub outcome: SetupOutcome,
    pub error: String,
}

/// A result line that does not keep the contract; `line` is the line as printed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    #[error("the result line is not JSON ({reason}): {line}")]
    NotJson { line: String, reason: String },
    #[error("the result does not match anvil's contract ({reason}): {line}")]
    Mismatch { line: String, reason: String },
}

/// What the child printed, read back.
#[derive(Debug, Clone, PartialEq)]
pub enum HeadlessOutput {
    Turn(Box<HeadlessResult>),
    Setup(HeadlessFailure),
}

impl HeadlessOutput {
    /// Reads the last JSON object line of `stdout`: a turn's result, or why none ran. `None`
    /// when there is no JSON line; `Some(Err)` names what does not match the contract.
    pub fn parse(stdout: &str) -> Option<Result<Self, ContractError>> {
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))?;
        let value: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                return Some(Err(ContractError::NotJson {
                    line: line.to_string(),
                    reason: e.to_string(),
                }));
            }
        };
        let setup = matches!(
            value.get("outcome").and_then(serde_json::Value::as_str),
            Some("config_error" | "usage_error")
        );
        let parsed = if setup {
            serde_json::from_value(value).map(Self::Setup)
        } else {
            serde_json::from_value(value).map(Self::Turn)
        };
        Some(parsed.map_err(|e| ContractError::Mismatch {
            line: line.to_string(),
            reason: e.to_string(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anvil_llm::config::Config;
    use anvil_llm::registry::Registry;

    fn result() -> HeadlessResult {
        HeadlessResult {
            outcome: HeadlessOutcome::Done,
            text: "I wrote answer.txt.".into(),
            steps: 2,
            usage: Usage {
                input: 80,
                output: 14,
                cache_read: 0,
                cache_write: 0,
            },
            usage_estimated: false,
            model: "good".into(),
            provider: "mock".into(),
            model_id: "claude-good".into(),
            config_digest: "0".repeat(64),
            cost_usd: Some(0.00045),
            accounting: Accounting::Reported,
            error: None,
            retryable: None,
            http_status: None,
            provider_refusal: None,
            reason: None,
            session_unwritten: false,
            session_id: None,
            hint: None,
        }
    }

    #[test]
    fn the_headless_result_json_is_stable() {
        insta::assert_json_snapshot!("headless_done", result());
        let failed = HeadlessResult {
            outcome: HeadlessOutcome::Failed,
            cost_usd: None,
            accounting: Accounting::Unknown,
            error: Some("provider unreachable".into()),
            retryable: Some(true),
            ..result()
        };
        insta::assert_json_snapshot!("headless_failed", failed);
        let out_of_credit = HeadlessResult {
            outcome: HeadlessOutcome::Failed,
            error: Some("HTTP 429 from the provider: You exceeded your current quota".into()),
            retryable: Some(false),
            http_status: Some(429),
            provider_refusal: Some(ProviderRefusal::Account),
            accounting: Accounting::Estimated,
            ..result()
        };
        insta::assert_json_snapshot!("headless_account_refused", out_of_credit);
        insta::assert_json_snapshot!(
            "headless_setup_failure",
            HeadlessFailure {
                outcome: SetupOutcome::ConfigError,
                error: "MOCK_API_KEY is not set (needed by provider 'mock')".into(),
            }
        );
    }

    #[test]
    fn what_the_writer_prints_the_reader_reads() {
        for written in [
            result(),
            HeadlessResult {
                hint: Some("the model wrote a call to write_file as text".into()),
                ..result()
            },
            HeadlessResult {
                outcome: HeadlessOutcome::ProtocolStopped,
                reason: Some("pause_turn".into()),
                ..result()
            },
            // Ctrl-C mid-answer: the partial text, and usage partly estimated.
            HeadlessResult {
                outcome: HeadlessOutcome::Cancelled,
                text: "The bug is in the pars".into(),
                usage_estimated: true,
                accounting: Accounting::Estimated,
                ..result()
            },
            HeadlessResult {
                outcome: HeadlessOutcome::Failed,
                error: Some("the session could not be written: No space left on device".into()),
                retryable: Some(false),
                session_unwritten: true,
                ..result()
            },
            HeadlessResult {
                outcome: HeadlessOutcome::Failed,
                error: Some("HTTP 401 from the provider: invalid x-api-key".into()),
                retryable: Some(false),
                http_status: Some(401),
                provider_refusal: Some(ProviderRefusal::Account),
                ..result()
            },
        ] {
            let stdout = format!("noise\n{}\n", serde_json::to_string(&written).unwrap());
            assert_eq!(
                HeadlessOutput::parse(&stdout),
                Some(Ok(HeadlessOutput::Turn(Box::new(written))))
            );
        }
        let setup = HeadlessFailure {
            outcome: SetupOutcome::UsageError,
            error: "stdin is too large".into(),
        };
        let stdout = serde_json::to_string(&setup).unwrap();
        assert_eq!(
            HeadlessOutput::parse(&stdout),
            Some(Ok(HeadlessOutput::Setup(setup)))
        );
        assert_eq!(HeadlessOutput::parse("no json here\n"), None);
        let drifted = HeadlessOutput::parse(r#"{"outcome":"done","text":"x"}"#);
        assert!(
            matches!(&drifted, Some(Err(ContractError::Mismatch { reason, .. })) if reason.contains("missing field")),
            "{drifted:?}"
        );
    }

    #[test]
    fn outcome_names_are_their_json_names() {
        use HeadlessOutcome::*;
        for o in [
            Done,
            MaxSteps,
            MaxTokens,
            Refused,
            Cancelled,
            ProtocolStopped,
            Failed,
        ] {
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
        for o in [SetupOutcome::ConfigError, SetupOutcome::UsageError] {
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
    }

    #[test]
    fn a_trial_config_round_trips_through_its_file() {
        let model = Registry::with_env(Config::built_in(), |_| None)
            .pin("sonnet")
            .unwrap();
        let config = TrialConfig {
            model,
            hidden: vec!["/tasks/t1".into(), "/tmp/anvil-trials".into()],
            session_path: Some("/data/anvil/sweeps/s/t1/sonnet/0.jsonl".into()),
            readable: vec!["/home/u/project/.git/objects".into()],
            mcp_servers: [(
                "tickets".to_string(),
                anvil_llm::mcp_config::McpServerConfig {
                    command: Some("python3".into()),
                    args: vec!["tools/tickets.py".into()],
                    enabled: true,
                    ..Default::default()
                },
            )]
            .into(),
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TrialConfig::FILE_NAME);
        config.write(&path).unwrap();
        assert_eq!(TrialConfig::read(&path).unwrap(), config);
        let err = TrialConfig::read(&dir.path().join("missing.json")).unwrap_err();
        assert!(err.to_string().contains("missing.json"), "{err}");
    }
}
