//! The trial record: one JSON object per trial, one line per object (JSONL). Written by the
//! eval runner, read by the reporter. Defined once, here, and versioned: a reader refuses a
//! `schema_version` it does not know instead of guessing.
//!
//! Version 2 fields (documented in the README):
//! - `schema_version`: 2
//! - `sweep`, `task`, `model` (the alias), `trial` (0-based), `attempt` (1-based: infra retries)
//! - `pass`: the verdict, `null` exactly when the trial could not be completed (`infra_error`
//!   set); a reader refuses a record with both a verdict and an infra error
//! - `outcome`: how the agent's turn ended (`done`, `max_steps`, `max_tokens`, `refused`,
//!   `cancelled`, `protocol_stopped`, `failed`, `timeout`), `null` if it never ran
//! - `infra_error`: why the trial could not be completed (provider unreachable after retries,
//!   sandbox or workspace setup, grader error, lost worker), else `null`
//! - `steps`, `tokens` (`input`, `output`, `cache_read`, `cache_write`)
//! - `cost_usd` with `accounting`: `reported` / `estimated` / `unknown` (unknown cost is `null`,
//!   never 0)
//! - `duration_ms`
//! - `session_path`: the trial's transcript (the agent's session file, which `anvil replay`
//!   reads), `null` when none was written; a relative path is relative to the directory of
//!   the results file holding the record (`anvil-evals export --with-sessions`)
//! - `workspace_path`: the workspace `--keep-workspaces` kept, else `null`
//! - `agent_ms`, `check_ms` (optional): the agent's run and the grader's check, within
//!   `duration_ms`; the rest is the harness (workspace, grading copy, bookkeeping)
//! - `digests`: `task`, `repo`, `grader`, `dependencies` (sha256, hex), `model_config`
//! - `anvil_git_sha`
//! - `check_outcome` (optional): how grading ended — `passed`, `failed`, `check_timeout` (the
//!   check ran past its timeout on the agent's code: the model's fail), `tampered` (the
//!   workspace changed test infrastructure; never counted as a pass)
//! - `tamper` (optional, default empty): the tamper findings, each `{path, kind, detail}`
//! - `grader_sandbox` (optional): what confined the check (`bubblewrap+seccomp`, `seatbelt`,
//!   or `none (--unsandboxed-grading)`)
//!
//! Version 3 adds one case: a trial the sweep's budget (`anvil-evals run --max-cost-usd`) did
//! not admit is recorded with `outcome` `budget_exceeded`, `pass` null and no `infra_error`:
//! never run, neither a fail nor an infrastructure failure; reports list such trials apart.
//! (An agent stopped by its own budget also ends `budget_exceeded`, and is graded as usual.)
//!
//! Version 4 adds `variant` (optional): the harness variant the trial ran with (a sweep file's
//! `[variants.NAME]`), absent when the sweep had none. Its key is (sweep, task, model, variant,
//! trial); records of versions 1 to 3 have no variant. And `adaptive` (optional): the design of
//! an adaptive sweep (`round`, `target_ci_width`, `max_trials`), which reports estimate with.
//!
//! Version 1 is still read: it had no `workspace_path`, and its `session_path` was the kept
//! workspace (trials kept no transcript then), so it is read as `workspace_path` with no
//! transcript ([`TrialRecord::parse`] upgrades a version 1 line to version 2).

use serde::{Deserialize, Serialize};

/// The `outcome` of a trial the sweep's budget did not admit (with `pass` and `infra_error`
/// null), and of an agent its own budget stopped (graded as usual).
pub const BUDGET_EXCEEDED: &str = "budget_exceeded";

/// Whether a record with these fields is a trial the sweep's budget did not admit.
pub fn not_admitted(pass: Option<bool>, infra_error: bool, outcome: Option<&str>) -> bool {
    pass.is_none() && !infra_error && outcome == Some(BUDGET_EXCEEDED)
}

/// The version written. Version 3: a trial the sweep's budget did not admit has `pass` null
/// without an `infra_error` ([`not_admitted`]). Version 4: `variant`.
pub const SCHEMA_VERSION: u32 = 4;
/// The oldest version still read.
pub const OLDEST_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

/// How a cost was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Accounting {
    /// The provider reported usage and the model's pricing is known.
    Reported,
    /// Usage or pricing was estimated.
    Estimated,
    /// Cost is not known; `cost_usd` is null.
    Unknown,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digests {
    pub task: String,
    pub repo: String,
    pub grader: String,
    pub dependencies: String,
    #[serde(default)]
    pub model_config: String,
}

/// How grading a trial's workspace ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckOutcome {
    /// Every expected test reported passed.
    Passed,
    /// Some expected test failed, errored, was skipped or is missing.
    Failed,
    /// The check ran past its timeout on the agent's code: the model's fail, never retried.
    CheckTimeout,
    /// The workspace changed test infrastructure; reported apart, never counted as a pass.
    Tampered,
}

/// A change to test infrastructure found in the agent's workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TamperFinding {
    /// The path, relative to the workspace.
    pub path: String,
    /// What kind of change (e.g. `shadows_module`, `cargo_config`, `build_script`).
    pub kind: String,
    /// What was found, for a person.
    pub detail: String,
}

/// One trial (version 2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialRecord {
    pub schema_version: u32,
    pub sweep: String,
    pub task: String,
    pub model: String,
    /// The harness variant (version 4), `None` when the sweep ran none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    pub trial: u32,
    pub attempt: u32,
    pub pass: Option<bool>,
    pub outcome: Option<String>,
    pub infra_error: Option<String>,
    pub steps: u32,
    pub tokens: Tokens,
    pub cost_usd: Option<f64>,
    pub accounting: Accounting,
    pub duration_ms: u64,
    /// The agent's run (process start to exit), when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_ms: Option<u64>,
    /// The grader's check process, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_ms: Option<u64>,
    /// The trial's transcript (the agent's session file), when one was written.
    pub session_path: Option<String>,
    /// The workspace `--keep-workspaces` kept (version 2; in version 1 this was
    /// `session_path`).
    #[serde(default)]
    pub workspace_path: Option<String>,
    pub digests: Digests,
    pub anvil_git_sha: String,
    /// How grading ended, when the workspace was graded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_outcome: Option<CheckOutcome>,
    /// Tamper findings (empty when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tamper: Vec<TamperFinding>,
    /// The trace (32 hex digits) that shows the trial end to end, when traces were exported
    /// (version 3, optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// What confined the grader's check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grader_sandbox: Option<String>,
    /// The sweep's adaptive design (version 4, optional): its trials were run in rounds under
    /// this stopping rule, and reports estimate with it ([`crate::adaptive`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<crate::adaptive::Design>,
    /// The attempts before this one, each ended by an infrastructure failure and retried
    /// (version 4, optional; empty when the first attempt counted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<FailedAttempt>,
}

/// An attempt of a trial that ended in an infrastructure failure and was retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedAttempt {
    /// 1-based.
    pub attempt: u32,
    /// Why it failed.
    pub error: String,
}

impl TrialRecord {
    /// Whether the workspace changed test infrastructure: grading ended `tampered`, or the
    /// grader recorded tamper findings.
    pub fn tampered(&self) -> bool {
        self.check_outcome == Some(CheckOutcome::Tampered) || !self.tamper.is_empty()
    }

    /// The verdict as reports count it: `None` for an infrastructure failure or a trial the
    /// sweep's budget did not admit, and never a pass for a tampered trial.
    pub fn counted_pass(&self) -> Option<bool> {
        if self.infra_error.is_some() || self.not_admitted() {
            return None;
        }
        self.pass.map(|p| p && !self.tampered())
    }

    /// A trial the sweep's budget did not admit (version 3): never run, never graded, neither
    /// a fail nor an infrastructure error.
    pub fn not_admitted(&self) -> bool {
        not_admitted(
            self.pass,
            self.infra_error.is_some(),
            self.outcome.as_deref(),
        )
    }
}

impl TrialRecord {
    /// Reads one whole record of any version this reader knows, as the current version: a
    /// version 1 record's `session_path` (its kept workspace) becomes `workspace_path`. Errors
    /// name `source_name` and the line `number`.
    pub fn parse(line: &str, source_name: &str, number: usize) -> Result<TrialRecord, RecordError> {
        let err = |reason: String| RecordError {
            source_name: source_name.to_string(),
            line: number,
            reason,
        };
        let mut value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| err(format!("not a trial record: {e}")))?;
        let version = value
            .get("schema_version")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| err("not a trial record: no schema_version".into()))?;
        let version = check_version(version).map_err(err)?;
        if version == 1
            && let Some(fields) = value.as_object_mut()
        {
            let workspace = fields
                .insert("session_path".into(), serde_json::Value::Null)
                .unwrap_or(serde_json::Value::Null);
            fields.insert("workspace_path".into(), workspace);
            fields.insert("schema_version".into(), SCHEMA_VERSION.into());
        }
        serde_json::from_value(value).map_err(|e| err(format!("not a trial record: {e}")))
    }
}

/// `version` if this reader reads it, else why not.
fn check_version<V: TryInto<u32> + std::fmt::Display + Copy>(version: V) -> Result<u32, String> {
    match version.try_into() {
        Ok(v) if (OLDEST_SCHEMA_VERSION..=SCHEMA_VERSION).contains(&v) => Ok(v),
        _ => Err(format!(
            "schema_version {version} is not supported (this reporter reads versions \
             {OLDEST_SCHEMA_VERSION} to {SCHEMA_VERSION})"
        )),
    }
}

/// A record that could not be read, with the line it came from (1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name}:{line}: {reason}")]
pub struct RecordError {
    pub source_name: String,
    pub line: usize,
    pub reason: String,
}

/// The fields the reporter needs, borrowed from the line (fast to parse; the rest is skipped).
#[derive(Debug, Deserialize)]
pub struct RecordView<'a> {
    pub schema_version: u32,
    #[serde(borrow)]
    pub sweep: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    pub task: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    pub model: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    pub variant: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    pub adaptive: Option<crate::adaptive::Design>,
    pub trial: u32,
    pub attempt: u32,
    pub pass: Option<bool>,
    #[serde(borrow, default)]
    pub outcome: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    pub infra_error: Option<std::borrow::Cow<'a, str>>,
    pub steps: u32,
    pub cost_usd: Option<f64>,
    pub duration_ms: u64,
    #[serde(default)]
    pub check_outcome: Option<CheckOutcome>,
    #[serde(default)]
    pub tamper: Vec<TamperFinding>,
    /// The transcript in version 2; in version 1 this field held the kept workspace, which
    /// the reporter does not need ([`RecordView::transcript`] tells them apart).
    #[serde(borrow, default)]
    session_path: Option<std::borrow::Cow<'a, str>>,
    // Present in every record (their values are not needed here): a line without them is
    // not a trial record.
    #[serde(rename = "accounting")]
    _accounting: serde::de::IgnoredAny,
    /// What the trial ran on: a baseline is compared only on tasks whose digests match.
    #[serde(borrow)]
    pub digests: DigestsView<'a>,
    /// The anvil build that ran the trial (reports name the builds they cover).
    #[serde(borrow)]
    pub anvil_git_sha: std::borrow::Cow<'a, str>,
}

/// The task digests of a record, borrowed ([`Digests`] without the model's).
#[derive(Debug, Default, Deserialize)]
pub struct DigestsView<'a> {
    #[serde(borrow, default)]
    pub task: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    pub repo: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    pub grader: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    pub dependencies: std::borrow::Cow<'a, str>,
    /// The pinned model configuration's digest (compared, not part of the task's identity).
    #[serde(borrow, default)]
    pub model_config: std::borrow::Cow<'a, str>,
}

impl RecordView<'_> {
    /// A trial the sweep's budget did not admit ([`not_admitted`]).
    pub fn not_admitted(&self) -> bool {
        not_admitted(
            self.pass,
            self.infra_error.is_some(),
            self.outcome.as_deref(),
        )
    }

    /// The trial's transcript, when the record names one (never a version 1 record's
    /// `session_path`, which was its kept workspace).
    pub fn transcript(&self) -> Option<&str> {
        (self.schema_version >= 2)
            .then_some(self.session_path.as_deref())
            .flatten()
    }

    /// The workspace changed test infrastructure: a graded trial whose grading ended
    /// `tampered` or that carries tamper findings. Never counted as a pass.
    pub fn tampered(&self) -> bool {
        self.pass.is_some()
            && (self.check_outcome == Some(CheckOutcome::Tampered) || !self.tamper.is_empty())
    }
}

/// Parses one line of a results file.
pub fn parse_line<'a>(
    line: &'a str,
    source_name: &str,
    number: usize,
) -> Result<RecordView<'a>, RecordError> {
    let err = |reason: String| RecordError {
        source_name: source_name.to_string(),
        line: number,
        reason,
    };
    let view: RecordView<'a> =
        serde_json::from_str(line).map_err(|e| err(format!("not a trial record: {e}")))?;
    check_version(view.schema_version).map_err(err)?;
    match (view.pass, &view.infra_error) {
        (None, None) if view.schema_version >= 3 && view.not_admitted() => {}
        (None, None) => {
            return Err(err("pass is null but infra_error is not set: a trial is either graded or an infrastructure failure".into()));
        }
        (Some(pass), Some(reason)) => {
            return Err(err(format!(
                "pass is {pass} but infra_error is set ({reason:?}): a trial is either graded or an infrastructure failure, not both"
            )));
        }
        _ => {}
    }
    // (pass true with `tampered` is read as tampered — never a pass — see `tampered`.)
    if view.pass == Some(true)
        && matches!(
            view.check_outcome,
            Some(CheckOutcome::Failed | CheckOutcome::CheckTimeout)
        )
    {
        return Err(err(format!(
            "pass is true but check_outcome is {:?}: a record contradicts itself",
            view.check_outcome
        )));
    }
    if let Some(cost) = view.cost_usd
        && !(cost.is_finite() && (0.0..1e9).contains(&cost))
    {
        return Err(err(format!(
            "cost_usd {cost} is not a cost (negative, not finite or absurdly large)"
        )));
    }
    Ok(view)
}
