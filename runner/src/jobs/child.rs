//! The one way a queued job runs the agent: `anvil -p` headless as a child process in the
//! job's workspace, reading nothing but its [`TrialConfig`] (the pinned model, the paths its
//! sandbox hides, where it keeps its transcript), killed with its process group on cancel or
//! timeout, its result read through [`HeadlessOutput`] and checked against the pinned model.
//! Eval trials ([`crate::jobs::trial`]) and `anvil auto` sessions ([`crate::auto`]) both run
//! through it, so what counts as the infrastructure's failure is decided once, here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anvil_agent::process::{self, ProcessSpec, Termination};
use anvil_llm::ProviderRefusal;
use anvil_llm::registry::PinnedModel;
use anvil_report::record::Accounting;
use tokio_util::sync::CancellationToken;

use crate::contract::{
    ContractError, HeadlessOutput, HeadlessResult, TrialConfig, TrialConfigError,
};
use crate::exit;

/// What the child runs with.
pub struct ChildSpec<'a> {
    /// The `anvil` binary.
    pub anvil: &'a Path,
    /// Its whole environment (provider credentials, HOME, PATH…).
    pub env: &'a [(String, String)],
    pub model: &'a PinnedModel,
    /// Where it works (`-C`).
    pub workspace: &'a Path,
    /// Where its [`TrialConfig`] is written: outside the workspace, in a directory its
    /// sandbox hides.
    pub config_path: &'a Path,
    /// What its sandbox hides.
    pub hidden: Vec<PathBuf>,
    /// What its sandbox shows read-only besides the usual ([`TrialConfig::readable`]).
    pub readable: Vec<PathBuf>,
    /// Where it keeps its session (its transcript).
    pub transcript: &'a Path,
    pub prompt: &'a str,
    /// `--permission-mode`.
    pub permission_mode: &'a str,
    /// The task's MCP servers (started by the child inside its sandbox).
    pub mcp_servers: std::collections::BTreeMap<String, anvil_llm::mcp_config::McpServerConfig>,
    pub max_steps: u32,
    /// Further flags (an eval variant's, checked by [`crate::jobs::variant::Variant::check`]).
    pub extra_args: Vec<String>,
    /// `--max-cost-usd`: the child's own hard budget (a trial's cost cap or its admitted share
    /// of the sweep's budget).
    pub max_cost_usd: Option<f64>,
    /// The wall-clock cap; past it the child is killed and the run ends [`ChildRun::TimedOut`].
    pub timeout: Duration,
    /// W3C trace context the child continues (its `TRACEPARENT`), when a trace is exported.
    pub traceparent: Option<String>,
}

/// What a child whose `anvil -p` never reported its cost (killed at its wall-clock cap, or its
/// worker lost) cost, read from its transcript's ledger: the responses it recorded, a request
/// it saw cut off at its estimate, and a request the kill cut off at its whole reservation
/// (kept, never forgotten). No transcript at all is no request (the child writes it before its
/// first). Unknown when the transcript does not read or a recorded response had no price.
pub fn transcript_cost(path: &Path) -> (Option<f64>, Accounting) {
    if !path.exists() {
        return match path.parent().is_some_and(Path::is_dir) {
            true => (Some(0.0), Accounting::Reported),
            false => (None, Accounting::Unknown),
        };
    }
    match anvil_agent::session::load(path) {
        Ok(loaded) => match loaded.state.cost.total() {
            Some(usd) if loaded.state.cost.is_estimated() => (Some(usd), Accounting::Estimated),
            Some(usd) => (Some(usd), Accounting::Reported),
            None => (None, Accounting::Unknown),
        },
        Err(_) => (None, Accounting::Unknown),
    }
}

/// How the child's turn ended, when it ended by itself or by the wall-clock cap: the model's
/// result, graded or counted, never the infrastructure's failure.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildRun {
    /// Killed at the wall-clock cap.
    TimedOut,
    /// Its turn ended (`done`, `max_steps`, `max_tokens`, `refused`, `protocol_stopped`, or a
    /// `failed` a retry would hit again).
    Finished(Box<HeadlessResult>),
}

/// Why the child did not end its turn: the infrastructure's failure (retried), except
/// [`ChildError::Cancelled`].
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    /// The job was cancelled while the child ran: not a failure of anyone's.
    #[error("cancelled")]
    Cancelled,
    #[error(transparent)]
    Config(#[from] TrialConfigError),
    #[error("the agent could not run: {0}")]
    Spawn(#[from] process::ProcessError),
    #[error("the agent died from signal {signal}: {stderr}")]
    Signaled { signal: i32, stderr: String },
    #[error("the agent exited {code} without a JSON result: {stderr}")]
    NoResult { code: i32, stderr: String },
    #[error("the agent exited {code}: {source}")]
    BadResult {
        code: i32,
        #[source]
        source: ContractError,
    },
    /// Configuration or usage: retrying cannot help.
    #[error("the agent could not start (exit {code}, {outcome}): {error}")]
    Setup {
        code: i32,
        outcome: String,
        error: String,
    },
    /// Its transcript could not be written (a full disk, perhaps filled by another job).
    #[error("the agent's transcript could not be written: {error}")]
    TranscriptUnwritten { error: String },
    #[error("provider unreachable after retries: {error}")]
    ProviderUnreachable { error: String },
    /// The provider refused the trial itself — a key it does not accept, an account without
    /// credit, a model id it does not know ([`refused_by_provider`]): the configuration's
    /// failure, never the model's.
    #[error("the provider refused the request{}: {error} — check {check}", http_status_note(*.status))]
    ProviderRefused {
        /// `None` when the refusal came inside a stream (OpenAI's `insufficient_quota`).
        status: Option<u16>,
        error: String,
        /// What to check: the model, its provider and URL, and the key's variable.
        check: String,
    },
    #[error("the agent exited {code} after a turn that ended {outcome}: {error}")]
    UnexpectedExit {
        code: i32,
        outcome: String,
        error: String,
    },
    #[error("the agent ran model {model} with config {ran} instead of the pinned {pinned}")]
    NotThePinnedModel {
        model: String,
        ran: String,
        pinned: String,
    },
}

fn http_status_note(status: Option<u16>) -> String {
    status.map_or(String::new(), |s| format!(" (HTTP {s})"))
}

/// Whether a failed turn is the provider refusing the trial rather than the model's run:
/// - a refusal of the account at any point (`provider_refusal: account`: 401 credentials, 402
///   payment, 407 proxy authentication, no credit or quota left — see
///   [`anvil_llm::LlmError::refusal`]): it answers who sent the request, never what it said;
/// - any other refusal (4xx) of the first request, before the model produced anything: that
///   request held only the task's prompt and anvil's own parts, so a bad key some providers
///   answer with 400 (Gemini's `API_KEY_INVALID`), an empty balance (Anthropic's 400), no
///   access (403) or an unknown model id (404) is the setup's.
///
/// A refusal after the model has worked stays the model's: a request its own conversation
/// made invalid or had moderated (a 400, OpenRouter's 403 for flagged input) is part of its
/// run — else a model could make its failing trial vanish from the pass rate.
fn refused_by_provider(result: &HeadlessResult) -> bool {
    match result.provider_refusal {
        Some(ProviderRefusal::Account) => return true,
        // The provider passed judgement on the model's own output: its fail.
        Some(ProviderRefusal::Generation) => return false,
        None => {}
    }
    let Some(status) = result.http_status else {
        return false;
    };
    let before_the_model = result.steps <= 1 && result.usage.output == 0;
    before_the_model && (400..500).contains(&status) && !matches!(status, 408 | 429)
}

impl ChildError {
    /// Whether retrying cannot help.
    pub fn persistent(&self) -> bool {
        matches!(
            self,
            ChildError::Setup { .. } | ChildError::ProviderRefused { .. }
        )
    }
}

/// Runs the child to the end of its turn.
pub async fn run(spec: &ChildSpec<'_>, cancel: &CancellationToken) -> Result<ChildRun, ChildError> {
    TrialConfig {
        model: spec.model.clone(),
        hidden: spec.hidden.clone(),
        readable: spec.readable.clone(),
        session_path: Some(spec.transcript.to_path_buf()),
        mcp_servers: spec.mcp_servers.clone(),
    }
    .write(spec.config_path)?;
    let workspace = spec.workspace.display().to_string();
    let config = spec.config_path.display().to_string();
    let max_steps = spec.max_steps.to_string();
    let mut args: Vec<String> = [
        "-p",
        spec.prompt,
        "--pinned-config",
        &config,
        "--output-format",
        "json",
        "--permission-mode",
        spec.permission_mode,
        "--max-steps",
        &max_steps,
        "-C",
        &workspace,
    ]
    .map(String::from)
    .to_vec();
    if let Some(usd) = spec.max_cost_usd {
        args.extend(["--max-cost-usd".to_string(), usd.to_string()]);
    }
    args.extend(spec.extra_args.iter().cloned());
    let process = ProcessSpec::new(spec.anvil.display().to_string(), spec.workspace)
        .args(args)
        .env({
            let mut env: Vec<(String, String)> = spec
                .env
                .iter()
                .filter(|(k, _)| k != crate::telemetry::TRACEPARENT)
                .cloned()
                .collect();
            if let Some(tp) = &spec.traceparent {
                env.push((crate::telemetry::TRACEPARENT.to_string(), tp.clone()));
            }
            env
        })
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
        Termination::Cancelled => return Err(ChildError::Cancelled),
        Termination::TimedOut => return Ok(ChildRun::TimedOut),
        Termination::Signaled(signal) => {
            return Err(ChildError::Signaled {
                signal,
                stderr: stderr_tail(),
            });
        }
        Termination::Exited(code) => code,
    };
    let result = match HeadlessOutput::parse(&output.stdout.text()) {
        None => {
            return Err(ChildError::NoResult {
                code,
                stderr: stderr_tail(),
            });
        }
        Some(Err(source)) => return Err(ChildError::BadResult { code, source }),
        Some(Ok(HeadlessOutput::Setup(failure))) => {
            return Err(ChildError::Setup {
                code,
                outcome: failure.outcome.as_str().to_string(),
                error: failure.error,
            });
        }
        Some(Ok(HeadlessOutput::Turn(result))) => result,
    };
    match code {
        exit::DONE
        | exit::MAX_STEPS
        | exit::MAX_TOKENS
        | exit::REFUSED
        | exit::PROTOCOL_STOPPED
        | exit::BUDGET_EXCEEDED => {}
        // A transcript that could not be written stopped the turn: the harness's failure,
        // never the model's.
        exit::FAILED if result.session_unwritten => {
            return Err(ChildError::TranscriptUnwritten {
                error: result.error.unwrap_or_default(),
            });
        }
        exit::FAILED if refused_by_provider(&result) => {
            let provider = &spec.model.provider;
            let key = provider
                .api_key_env
                .as_ref()
                .map_or(String::new(), |var| format!(", its key in ${var}"));
            return Err(ChildError::ProviderRefused {
                status: result.http_status,
                error: result.error.unwrap_or_default(),
                check: format!(
                    "model {}'s provider '{}' at {}{key}",
                    spec.model.name, provider.name, provider.base_url
                ),
            });
        }
        exit::FAILED if result.retryable == Some(true) => {
            return Err(ChildError::ProviderUnreachable {
                error: result.error.unwrap_or_default(),
            });
        }
        exit::FAILED => {}
        _ => {
            return Err(ChildError::UnexpectedExit {
                code,
                outcome: result.outcome.as_str().to_string(),
                error: result.error.unwrap_or_default(),
            });
        }
    }
    let pinned = spec.model.digest();
    if result.config_digest != pinned {
        return Err(ChildError::NotThePinnedModel {
            model: result.model,
            ran: result.config_digest,
            pinned,
        });
    }
    Ok(ChildRun::Finished(result))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(status: u16, steps: u32, output: u64) -> HeadlessResult {
        serde_json::from_value(serde_json::json!({
            "outcome": "failed",
            "text": "",
            "steps": steps,
            "usage": {"input": 0, "output": output, "cache_read": 0, "cache_write": 0},
            "model": "m",
            "provider": "p",
            "model_id": "m",
            "config_digest": "d",
            "cost_usd": null,
            "accounting": "estimated",
            "error": format!("HTTP {status} from the provider"),
            "retryable": false,
            "http_status": status,
            // As anvil judges these statuses (`LlmError::refusal`).
            "provider_refusal": matches!(status, 401 | 402 | 407).then_some("account"),
        }))
        .unwrap()
    }

    #[test]
    fn a_refusal_of_who_sent_it_or_of_the_first_request_is_the_providers() {
        // Credentials, payment, proxy: whenever they come.
        for status in [401, 402, 407] {
            assert!(refused_by_provider(&failed(status, 1, 0)), "{status}");
            assert!(refused_by_provider(&failed(status, 7, 900)), "{status}");
        }
        // Any refusal of the first request, before the model produced a thing.
        for status in [400, 403, 404, 413, 422] {
            assert!(refused_by_provider(&failed(status, 1, 0)), "{status}");
        }
        // After the model worked, what its conversation provoked is its own.
        for (status, steps, output) in [(400, 3, 200), (403, 2, 50), (404, 5, 10), (400, 1, 12)] {
            assert!(
                !refused_by_provider(&failed(status, steps, output)),
                "{status} at step {steps}"
            );
        }
        // Not refusals: retryable statuses, server errors, no status at all.
        for status in [408, 429, 500, 529] {
            assert!(!refused_by_provider(&failed(status, 1, 0)), "{status}");
        }
        // No credit or quota left, whenever it comes and whatever the status (none, for a
        // refusal inside a stream): the account's.
        for status in [Some(429), Some(400), None] {
            let mut out_of_quota = failed(429, 7, 900);
            out_of_quota.http_status = status;
            out_of_quota.provider_refusal = Some(ProviderRefusal::Account);
            assert!(refused_by_provider(&out_of_quota), "{status:?}");
        }
        // A first request refused for what the model generated (Groq's 400
        // `tool_use_failed`) is the model's: else a model could hide a failing first step.
        let mut generation = failed(400, 1, 0);
        generation.provider_refusal = Some(ProviderRefusal::Generation);
        assert!(!refused_by_provider(&generation));
        let mut no_status = failed(401, 1, 0);
        no_status.http_status = None;
        no_status.provider_refusal = None;
        assert!(
            !refused_by_provider(&no_status),
            "the wording alone never decides"
        );
    }
}
