//! One eval trial, end to end: a fresh workspace, the agent run headless as a child process
//! (`anvil -p … --output-format json`) within the task's step and time caps, the protected
//! grader, and the trial record.
//!
//! What counts as whose failure:
//! - the model's (graded, never retried): a wrong result, a refusal, max steps, max tokens, a
//!   provider response it stopped on, or running past the task's wall-clock cap (`timeout`);
//! - the infrastructure's (retried, then `infra_error`): a workspace that cannot be made, a
//!   task that differs on this machine from the sweep's digests, a provider still failing
//!   after the agent's own retries, an agent that cannot start or crashes, a grader error.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anvil_agent::process::{self, ProcessSpec, Termination};
use anvil_grader::digest::{self, TaskDigests};
use anvil_grader::task::PermissionMode;
use anvil_grader::{GradeOptions, Task, Verdict, grade};
use anvil_report::record::{Accounting, Digests, SCHEMA_VERSION, Tokens, TrialRecord};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::exit;
use crate::queue::{Db, TrialJob};
use crate::sweep::{ANVIL_GIT_SHA, SweepSpec};
use crate::worker::{TrialEnd, TrialHandler};
use crate::workspace;

/// Where and how trials run on this machine.
#[derive(Debug, Clone)]
pub struct TrialOptions {
    /// The `anvil` binary the agent runs as.
    pub anvil: PathBuf,
    /// Where workspaces are made.
    pub workspaces: PathBuf,
    pub keep_workspaces: bool,
    pub grade: GradeOptions,
    /// The agent's environment (provider credentials, HOME, PATH…).
    pub env: Vec<(String, String)>,
    /// Time allowed beyond the task's agent and check caps before the trial is ended as an
    /// infrastructure failure.
    pub slack: Duration,
}

impl TrialOptions {
    /// `anvil` beside the running executable, else on PATH.
    pub fn find_anvil() -> PathBuf {
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join("anvil")))
            .filter(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from("anvil"))
    }
}

/// A task as this machine has it, checked against the sweep's digests.
struct LocalTask {
    task: Task,
    digests: TaskDigests,
}

struct SweepContext {
    tasks: HashMap<String, Result<Arc<LocalTask>, String>>,
}

/// The real trial handler.
pub struct AgentTrials {
    db: Db,
    workspaces: workspace::Workspaces,
    options: TrialOptions,
    sweeps: Mutex<HashMap<String, Arc<SweepContext>>>,
}

impl AgentTrials {
    pub fn new(db: Db, options: TrialOptions) -> Self {
        let workspaces = workspace::Workspaces::new(&options.workspaces);
        let removed = workspaces.remove_stale();
        if removed > 0 {
            tracing::info!("removed {removed} workspaces left by workers that are gone");
        }
        Self {
            db,
            workspaces,
            options,
            sweeps: Mutex::new(HashMap::new()),
        }
    }

    async fn context(&self, sweep: &str) -> Result<Arc<SweepContext>, String> {
        if let Some(ctx) = self.sweeps.lock().ok().and_then(|m| m.get(sweep).cloned()) {
            return Ok(ctx);
        }
        let row = self
            .db
            .sweep(sweep)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("sweep {sweep} is not in the queue database"))?;
        let spec = SweepSpec::from_row(&row).map_err(|e| e.to_string())?;
        let tasks = spec
            .tasks
            .iter()
            .map(|t| {
                let local = Task::load(&t.dir)
                    .map_err(|e| format!("task {} on this machine: {e}", t.name))
                    .and_then(|task| {
                        let digests = digest::of_task(&task).map_err(|e| {
                            format!("task {}: cannot digest {}: {e}", t.name, t.dir.display())
                        })?;
                        if digests != t.digests {
                            return Err(format!(
                                "task {} at {} on this machine differs from the one the sweep was started with; \
                                 check out the same revision on every worker",
                                t.name,
                                t.dir.display()
                            ));
                        }
                        Ok(Arc::new(LocalTask { task, digests }))
                    });
                (t.name.clone(), local)
            })
            .collect();
        let ctx = Arc::new(SweepContext { tasks });
        if let Ok(mut map) = self.sweeps.lock() {
            map.insert(sweep.to_string(), ctx.clone());
        }
        Ok(ctx)
    }

    fn local_task(ctx: &SweepContext, name: &str) -> Result<Arc<LocalTask>, String> {
        match ctx.tasks.get(name) {
            Some(r) => r.clone(),
            None => Err(format!("task {name} is not part of this sweep")),
        }
    }

    fn base_record(job: &TrialJob, attempt: u32, digests: Option<&TaskDigests>) -> TrialRecord {
        TrialRecord {
            schema_version: SCHEMA_VERSION,
            sweep: job.sweep.clone(),
            task: job.task.clone(),
            model: job.model.clone(),
            trial: job.trial,
            attempt,
            pass: None,
            outcome: None,
            infra_error: None,
            steps: 0,
            tokens: Tokens::default(),
            cost_usd: None,
            accounting: Accounting::Unknown,
            duration_ms: 0,
            agent_ms: None,
            check_ms: None,
            session_path: None,
            digests: digests
                .map(|d| Digests {
                    task: d.task.clone(),
                    repo: d.repo.clone(),
                    grader: d.grader.clone(),
                    dependencies: d.dependencies.clone(),
                    model_config: String::new(),
                })
                .unwrap_or_default(),
            anvil_git_sha: ANVIL_GIT_SHA.to_string(),
            check_outcome: None,
            tamper: Vec::new(),
            grader_sandbox: None,
        }
    }

    /// The record of a trial that could not be completed for `reason`.
    fn infra_record_for(
        job: &TrialJob,
        attempt: u32,
        digests: Option<&TaskDigests>,
        reason: &str,
    ) -> TrialRecord {
        let mut record = Self::base_record(job, attempt, digests);
        record.infra_error = Some(reason.to_string());
        record
    }

    fn infra(
        job: &TrialJob,
        attempt: u32,
        digests: Option<&TaskDigests>,
        reason: String,
    ) -> TrialEnd {
        TrialEnd::Infra {
            record: Self::infra_record_for(job, attempt, digests, &reason),
            reason,
        }
    }

    /// The job's task, if its sweep has been loaded already.
    fn cached_task(&self, job: &TrialJob) -> Option<Arc<LocalTask>> {
        let ctx = self.sweeps.lock().ok()?.get(&job.sweep).cloned()?;
        Self::local_task(&ctx, &job.task).ok()
    }

    async fn run_trial(&self, job: &TrialJob, attempt: u32, cancel: CancellationToken) -> TrialEnd {
        let started = Instant::now();
        let ctx = match self.context(&job.sweep).await {
            Ok(ctx) => ctx,
            Err(e) => return Self::infra(job, attempt, None, e),
        };
        let local = match Self::local_task(&ctx, &job.task) {
            Ok(t) => t,
            Err(e) => return Self::infra(job, attempt, None, e),
        };
        let digests = Some(&local.digests);
        let task = &local.task;
        // A worker killed mid-trial leaves its workspace; whoever runs next clears it.
        self.workspaces.remove_stale();
        let label = format!("{}-{}-{}-a{attempt}", job.task, job.model, job.trial);
        let ws = match self
            .workspaces
            .prepare(&task.repo(), &local.digests.repo, &label)
        {
            Ok(ws) => ws,
            Err(e) => return Self::infra(job, attempt, digests, e.to_string()),
        };
        let agent_started = Instant::now();
        let agent = self
            .run_agent(task, &job.model, ws.path(), cancel.clone())
            .await;
        let agent_ms = agent_started.elapsed().as_millis() as u64;
        let mut record = Self::base_record(job, attempt, digests);
        let run = match agent {
            Ok(AgentRun::Cancelled) => return TrialEnd::Cancelled,
            Ok(AgentRun::Finished(run)) => run,
            Err(reason) => {
                let reason = keep_note(reason, &ws, self.options.keep_workspaces);
                return Self::infra(job, attempt, digests, reason);
            }
        };
        record.agent_ms = Some(agent_ms);
        record.outcome = Some(run.outcome.clone());
        record.steps = run.steps;
        record.tokens = run.tokens;
        record.digests.model_config = run.model_config;
        record.cost_usd = run.cost_usd;
        record.accounting = run.accounting;
        if cancel.is_cancelled() {
            return TrialEnd::Cancelled;
        }
        let graded = grade(task, ws.path(), &self.options.grade).await;
        record.duration_ms = started.elapsed().as_millis() as u64;
        record.check_ms = Some(graded.duration_ms);
        let kept = if self.options.keep_workspaces {
            Some(ws.keep())
        } else {
            drop(ws);
            None
        };
        record.session_path = kept.map(|p| p.display().to_string());
        match graded.verdict {
            Verdict::Pass => record.pass = Some(true),
            Verdict::Fail => record.pass = Some(false),
            Verdict::GraderError => {
                return Self::infra(
                    job,
                    attempt,
                    digests,
                    format!("grader error: {}", graded.reason),
                );
            }
        }
        TrialEnd::Graded(record)
    }

    async fn run_agent(
        &self,
        task: &Task,
        model: &str,
        workspace: &Path,
        cancel: CancellationToken,
    ) -> Result<AgentRun, String> {
        let mode = match task.spec.permission_mode {
            PermissionMode::Plan => "plan",
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "accept-edits",
            PermissionMode::Bypass => "bypass",
        };
        let workspace_arg = workspace.display().to_string();
        let spec = ProcessSpec::new(self.options.anvil.display().to_string(), workspace)
            .args([
                "-p",
                task.spec.prompt.as_str(),
                "-m",
                model,
                "--output-format",
                "json",
                "--permission-mode",
                mode,
                "--max-steps",
                &task.spec.max_steps.to_string(),
                "-C",
                &workspace_arg,
            ])
            .env(self.options.env.clone())
            .timeout(Duration::from_secs(task.spec.timeout_secs))
            .capture(1024 * 1024, 64 * 1024);
        let output = process::run(&spec, &cancel)
            .await
            .map_err(|e| format!("the agent could not run: {e}"))?;
        let stderr_tail = || {
            let text = output.stderr.text();
            let tail: String = text
                .chars()
                .rev()
                .take(1500)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            tail.trim().to_string()
        };
        let code = match output.termination {
            Termination::Cancelled => return Ok(AgentRun::Cancelled),
            Termination::TimedOut => {
                return Ok(AgentRun::Finished(Finished {
                    outcome: "timeout".into(),
                    steps: 0,
                    tokens: Tokens::default(),
                    model_config: String::new(),
                    cost_usd: None,
                    accounting: Accounting::Unknown,
                }));
            }
            Termination::Signaled(signal) => {
                return Err(format!(
                    "the agent died from signal {signal}: {}",
                    stderr_tail()
                ));
            }
            Termination::Exited(code) => code,
        };
        let stdout = output.stdout.text();
        let json: Option<Value> = stdout
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .and_then(|l| serde_json::from_str(l).ok());
        let Some(json) = json else {
            return Err(format!(
                "the agent exited {code} without a JSON result: {}",
                stderr_tail()
            ));
        };
        let field = |name: &str| {
            json.get(name)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        match code {
            exit::DONE
            | exit::MAX_STEPS
            | exit::MAX_TOKENS
            | exit::REFUSED
            | exit::PROTOCOL_STOPPED => {}
            exit::FAILED => {
                if json.get("retryable").and_then(Value::as_bool) == Some(true) {
                    return Err(format!(
                        "provider unreachable after retries: {}",
                        field("error")
                    ));
                }
            }
            _ => {
                return Err(format!(
                    "the agent could not start (exit {code}, {}): {}",
                    field("outcome"),
                    field("error")
                ));
            }
        }
        let usage = json.get("usage").cloned().unwrap_or(Value::Null);
        let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
        Ok(AgentRun::Finished(Finished {
            outcome: field("outcome"),
            steps: json.get("steps").and_then(Value::as_u64).unwrap_or(0) as u32,
            tokens: Tokens {
                input: n("input"),
                output: n("output"),
                cache_read: n("cache_read"),
                cache_write: n("cache_write"),
            },
            model_config: field("config_digest"),
            cost_usd: json.get("cost_usd").and_then(Value::as_f64),
            accounting: match json.get("accounting").and_then(Value::as_str) {
                Some("reported") => Accounting::Reported,
                Some("estimated") => Accounting::Estimated,
                _ => Accounting::Unknown,
            },
        }))
    }
}

fn keep_note(reason: String, ws: &workspace::Workspace, keep: bool) -> String {
    if keep {
        format!("{reason} (workspace: {})", ws.path().display())
    } else {
        reason
    }
}

enum AgentRun {
    Finished(Finished),
    Cancelled,
}

struct Finished {
    outcome: String,
    steps: u32,
    tokens: Tokens,
    model_config: String,
    cost_usd: Option<f64>,
    accounting: Accounting,
}

#[async_trait::async_trait]
impl TrialHandler for AgentTrials {
    async fn run(&self, job: &TrialJob, attempt: u32, cancel: CancellationToken) -> TrialEnd {
        self.run_trial(job, attempt, cancel).await
    }

    fn time_budget(&self, job: &TrialJob) -> Duration {
        let caps = self
            .cached_task(job)
            .map(|t| t.task.spec.timeout_secs + t.task.spec.check.timeout_secs);
        // Before the sweep is loaded its caps are unknown: allow the longest a task may ask for.
        Duration::from_secs(caps.unwrap_or(24 * 3600)) + self.options.slack
    }

    fn infra_record(&self, job: &TrialJob, attempt: u32, reason: &str) -> TrialRecord {
        let local = self.cached_task(job);
        Self::infra_record_for(job, attempt, local.as_ref().map(|t| &t.digests), reason)
    }
}
