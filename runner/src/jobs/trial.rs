//! One eval trial, end to end: a fresh workspace, the agent run headless as a child process
//! (`anvil -p … --output-format json`) within the task's step and time caps, keeping its
//! session in the sweep's artifact directory ([`crate::jobs::transcripts`]), the protected
//! grader, and the trial record, whose `session_path` names that transcript whenever it was
//! written (also when the trial failed, timed out or was an infrastructure failure).
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

use anvil_grader::digest::{self, TaskDigests};
use anvil_grader::{GradeOptions, Task, Verdict, grade};
use anvil_llm::registry::PinnedModel;
use anvil_report::record::{
    Accounting, CheckOutcome, Digests, SCHEMA_VERSION, TamperFinding, Tokens, TrialRecord,
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::contract::TrialConfig;
use crate::jobs::child::{self, ChildError, ChildRun, ChildSpec};
use crate::jobs::queue::{Admission, Db, QueueError, TrialJob};
use crate::jobs::sweep::{ANVIL_GIT_SHA, PinnedError, SweepError, SweepSpec};
use crate::jobs::transcripts;
use crate::jobs::variant::Variant;
use crate::jobs::worker::{TrialEnd, TrialHandler};
use crate::jobs::workspace::{self, WorkspaceError};

/// Why a trial did not reach a graded result. Every variant but [`TrialError::Cancelled`] is
/// the infrastructure's failure (retried, then recorded as `infra_error` with this message);
/// the model's failures are graded results, never errors.
#[derive(Debug, thiserror::Error)]
pub enum TrialError {
    /// The queue could not be read.
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("sweep {sweep} is not in the queue database")]
    UnknownSweep { sweep: String },
    /// The sweep's stored spec cannot be read.
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// The task, as this machine has it, cannot be used.
    #[error(transparent)]
    Task(#[from] LocalTaskError),
    #[error("model {model} is not part of this sweep")]
    ModelNotInSweep { model: String },
    #[error("variant {variant} is not part of this sweep")]
    VariantNotInSweep { variant: String },
    #[error(transparent)]
    Pinned(#[from] PinnedError),
    #[error("model {model} needs {var}, which is not set on worker {host} (pid {pid})")]
    MissingCredential {
        model: String,
        var: String,
        host: String,
        pid: u32,
    },
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("the workspace {} has no parent directory", workspace.display())]
    NoTrialDir { workspace: PathBuf },
    #[error(
        "sweep {sweep} has no directory for its transcripts here (no data directory: is HOME \
         set?); start it with --workspaces DIR"
    )]
    NoArtifacts { sweep: String },
    #[error("cannot use the sweep's transcript directory on worker {host}: {source}")]
    Artifacts {
        host: String,
        #[source]
        source: crate::jobs::private_dir::PrivateDirError,
    },
    /// The agent did not end its turn the way the contract says (see [`ChildError`]).
    #[error(transparent)]
    Agent(#[from] ChildError),
    #[error("grader error: {reason}")]
    Grader { reason: String },
    /// The sweep was cancelled while the trial ran: not a failure of anyone's.
    #[error("the sweep was cancelled")]
    Cancelled,
}

/// A task of the sweep that this machine cannot run as the sweep was started with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LocalTaskError {
    #[error("task {task} is not part of this sweep")]
    NotInSweep { task: String },
    #[error("task {task} on this machine: {source}")]
    Load {
        task: String,
        #[source]
        source: anvil_grader::TaskError,
    },
    #[error("task {task}: cannot digest {}: {source}", dir.display())]
    Digest {
        task: String,
        dir: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error(
        "task {task} at {} on this machine differs from the one the sweep was started with; \
         check out the same revision on every worker",
        dir.display()
    )]
    Differs { task: String, dir: PathBuf },
}

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
    /// Paths every trial's sandbox must hide besides the task directory, the workspaces and
    /// the sweep's artifact directory (e.g. the queue's files).
    pub hidden: Vec<PathBuf>,
    /// Where sweeps' artifact directories go on this machine, for a sweep that recorded none
    /// (one started before trials kept transcripts): see [`transcripts::root`].
    pub artifacts_root: Option<PathBuf>,
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
    /// The sweep's artifact directory (its transcripts), as recorded with the sweep.
    artifacts: Option<PathBuf>,
    tasks: HashMap<String, Result<Arc<LocalTask>, LocalTaskError>>,
    /// Each model's pinned configuration, or why the sweep has none usable.
    models: HashMap<String, Result<Arc<PinnedModel>, PinnedError>>,
    /// The sweep's `max_trial_cost_usd`.
    trial_cap: Option<f64>,
    /// The sweep's adaptive design, which every record carries.
    design: Option<anvil_report::adaptive::Design>,
    /// The sweep's variants, by name.
    variants: HashMap<String, Arc<Variant>>,
    /// Trials in the sweep: a trial of a task without a cost cap reserves an even share of
    /// the sweep's budget.
    trials: usize,
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

    async fn context(&self, sweep: &str) -> Result<Arc<SweepContext>, TrialError> {
        if let Some(ctx) = self.sweeps.lock().ok().and_then(|m| m.get(sweep).cloned()) {
            return Ok(ctx);
        }
        let row = self
            .db
            .sweep(sweep)
            .await?
            .ok_or_else(|| TrialError::UnknownSweep {
                sweep: sweep.to_string(),
            })?;
        let spec = SweepSpec::from_row(&row)?;
        let tasks = spec
            .tasks
            .iter()
            .map(|t| {
                let local = Task::load(&t.dir)
                    .map_err(|source| LocalTaskError::Load {
                        task: t.name.clone(),
                        source,
                    })
                    .and_then(|task| {
                        let digests =
                            digest::of_task(&task).map_err(|source| LocalTaskError::Digest {
                                task: t.name.clone(),
                                dir: t.dir.clone(),
                                source: Arc::new(source),
                            })?;
                        if digests != t.digests {
                            return Err(LocalTaskError::Differs {
                                task: t.name.clone(),
                                dir: t.dir.clone(),
                            });
                        }
                        Ok(Arc::new(LocalTask { task, digests }))
                    });
                (t.name.clone(), local)
            })
            .collect();
        let models = spec
            .models
            .iter()
            .map(|m| (m.clone(), spec.pinned(m).cloned().map(Arc::new)))
            .collect();
        let artifacts = spec.artifacts.clone().or_else(|| {
            self.options
                .artifacts_root
                .as_deref()
                .map(|root| transcripts::artifacts(root, sweep))
        });
        let ctx = Arc::new(SweepContext {
            artifacts,
            tasks,
            models,
            variants: spec
                .variants
                .iter()
                .map(|v| (v.name.clone(), Arc::new(v.clone())))
                .collect(),
            trials: spec.trial_count(),
            trial_cap: spec.max_trial_cost_usd,
            design: spec.adaptive,
        });
        if let Ok(mut map) = self.sweeps.lock() {
            map.insert(sweep.to_string(), ctx.clone());
        }
        Ok(ctx)
    }

    fn local_task(ctx: &SweepContext, name: &str) -> Result<Arc<LocalTask>, LocalTaskError> {
        match ctx.tasks.get(name) {
            Some(r) => r.clone(),
            None => Err(LocalTaskError::NotInSweep {
                task: name.to_string(),
            }),
        }
    }

    fn base_record(job: &TrialJob, attempt: u32, digests: Option<&TaskDigests>) -> TrialRecord {
        TrialRecord {
            schema_version: SCHEMA_VERSION,
            sweep: job.sweep.clone(),
            task: job.task.clone(),
            model: job.model.clone(),
            variant: job.variant.clone(),
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
            workspace_path: None,
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
            adaptive: None,
            attempts: Vec::new(),
            trace_id: None,
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

    /// How a trial that failed with `error` ends.
    fn infra(
        job: &TrialJob,
        attempt: u32,
        digests: Option<&TaskDigests>,
        error: TrialError,
    ) -> TrialEnd {
        if let TrialError::Cancelled = error {
            return TrialEnd::Cancelled;
        }
        let reason = error.to_string();
        TrialEnd::Infra {
            record: Self::infra_record_for(job, attempt, digests, &reason),
            reason,
        }
    }

    fn pinned_model(ctx: &SweepContext, name: &str) -> Result<Arc<PinnedModel>, TrialError> {
        match ctx.models.get(name) {
            Some(r) => Ok(r.clone()?),
            None => Err(TrialError::ModelNotInSweep {
                model: name.to_string(),
            }),
        }
    }

    /// The job's variant (`None`: the sweep has none), or why it cannot be run.
    fn variant(ctx: &SweepContext, job: &TrialJob) -> Result<Option<Arc<Variant>>, TrialError> {
        match &job.variant {
            None => Ok(None),
            Some(name) => ctx.variants.get(name).cloned().map(Some).ok_or_else(|| {
                TrialError::VariantNotInSweep {
                    variant: name.clone(),
                }
            }),
        }
    }

    /// The adaptive design of the job's sweep, if it has one and has been loaded already.
    fn cached_design(&self, job: &TrialJob) -> Option<anvil_report::adaptive::Design> {
        self.sweeps.lock().ok()?.get(&job.sweep)?.design
    }

    /// The digest of the job's pinned model, if its sweep has been loaded already.
    fn cached_model_digest(&self, job: &TrialJob) -> Option<String> {
        let ctx = self.sweeps.lock().ok()?.get(&job.sweep).cloned()?;
        Some(Self::pinned_model(&ctx, &job.model).ok()?.digest())
    }

    /// Why this machine cannot run `model` as pinned, if it cannot: its credential variable
    /// must be set in the agent's environment.
    fn unsupported(&self, model: &PinnedModel) -> Option<TrialError> {
        let var = model.provider.api_key_env.as_deref()?;
        let set = self
            .options
            .env
            .iter()
            .any(|(k, v)| k == var && !v.trim().is_empty());
        (!set).then(|| TrialError::MissingCredential {
            model: model.name.clone(),
            var: var.to_string(),
            host: crate::jobs::worker::host_name(),
            pid: std::process::id(),
        })
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
            Err(e) => return Self::infra(job, attempt, None, e.into()),
        };
        let digests = Some(&local.digests);
        let task = &local.task;
        let model = match Self::pinned_model(&ctx, &job.model) {
            Ok(m) => m,
            Err(e) => return Self::infra(job, attempt, digests, e),
        };
        if let Some(reason) = self.unsupported(&model) {
            return Self::infra(job, attempt, digests, reason);
        }
        let variant = match Self::variant(&ctx, job) {
            Ok(v) => v,
            Err(e) => return Self::infra(job, attempt, digests, e),
        };
        // The trial's budget: its share of the sweep's, admitted in the queue database before
        // anything runs (a trial not admitted is recorded `budget_exceeded`, never graded), or
        // else the task's cost cap.
        let key = job.key();
        let cap = crate::jobs::sweep::lower_cap(task.spec.cost_cap_usd, ctx.trial_cap);
        let max_cost_usd = match self.db.sweep_spend(&job.sweep).await {
            Err(e) => return Self::infra(job, attempt, digests, e.into()),
            Ok(None) => cap,
            Ok(Some(spend)) => {
                let share = cap.unwrap_or(spend.max_usd / ctx.trials.max(1) as f64);
                match self.db.admit_trial(&key, share).await {
                    Err(e) => return Self::infra(job, attempt, digests, e.into()),
                    Ok(Admission::Refused(spend)) => {
                        let mut record = Self::base_record(job, attempt, digests);
                        record.outcome = Some(anvil_report::record::BUDGET_EXCEEDED.to_string());
                        record.cost_usd = Some(0.0);
                        record.accounting = Accounting::Reported;
                        record.duration_ms = started.elapsed().as_millis() as u64;
                        tracing::info!(
                            trial = %key,
                            share,
                            spent = spend.spent_usd,
                            reserved = spend.reserved_usd,
                            max = spend.max_usd,
                            "trial not admitted: its share does not fit the sweep's budget"
                        );
                        return TrialEnd::Graded(record);
                    }
                    Ok(Admission::Admitted | Admission::Unbudgeted) => Some(share),
                }
            }
        };
        let end = self
            .run_admitted(
                job,
                attempt,
                &ctx,
                &local,
                &model,
                variant.as_deref(),
                max_cost_usd,
                cancel,
                started,
            )
            .await;
        // The reservation is settled with what the trial cost: the child's report, or its
        // transcript's ledger when it reported none (unknown keeps the whole share as spent).
        let cost = match &end {
            TrialEnd::Graded(record) if record.accounting != Accounting::Unknown => record.cost_usd,
            _ => {
                let artifacts = Self::transcript_dir(&ctx, job).ok();
                artifacts.and_then(|a| {
                    child::transcript_cost(&transcripts::of(&a, &job.key(), attempt)).0
                })
            }
        };
        if let Err(e) = self.db.settle_trial(&key, cost).await {
            tracing::warn!(trial = %key, "cannot settle the trial's budget reservation: {e}");
        }
        end
    }

    /// [`AgentTrials::run_trial`] once the trial is admitted: workspace, agent, grade.
    #[allow(clippy::too_many_arguments)]
    async fn run_admitted(
        &self,
        job: &TrialJob,
        attempt: u32,
        ctx: &SweepContext,
        local: &LocalTask,
        model: &PinnedModel,
        variant: Option<&Variant>,
        max_cost_usd: Option<f64>,
        cancel: CancellationToken,
        started: Instant,
    ) -> TrialEnd {
        let digests = Some(&local.digests);
        let task = &local.task;
        // A worker killed mid-trial leaves its workspace; whoever runs next clears it.
        self.workspaces.remove_stale();
        let label = match &job.variant {
            Some(v) => format!("{}-{}-{v}-{}-a{attempt}", job.task, job.model, job.trial),
            None => format!("{}-{}-{}-a{attempt}", job.task, job.model, job.trial),
        };
        let ws = {
            let _span = tracing::info_span!("workspace").entered();
            match self
                .workspaces
                .prepare(&task.repo(), &local.digests.repo, &label)
            {
                Ok(ws) => ws,
                Err(e) => return Self::infra(job, attempt, digests, e.into()),
            }
        };
        let transcript = match Self::transcript_dir(ctx, job) {
            Ok(artifacts) => transcripts::of(&artifacts, &job.key(), attempt),
            Err(e) => return self.keep_after_failure(Self::infra(job, attempt, digests, e), ws),
        };
        let agent_started = Instant::now();
        let agent = self
            .run_agent(
                task,
                model,
                variant,
                ws.path(),
                ctx.artifacts.as_deref(),
                &transcript,
                max_cost_usd,
                &cancel,
            )
            .instrument(tracing::info_span!(
                "agent",
                anvil.max_cost_usd = max_cost_usd
            ))
            .await;
        let agent_ms = agent_started.elapsed().as_millis() as u64;
        let mut record = Self::base_record(job, attempt, digests);
        let run = match agent {
            Ok(run) => run,
            Err(TrialError::Cancelled) => return TrialEnd::Cancelled,
            Err(error) => {
                let mut end = Self::infra(job, attempt, digests, error);
                // What the agent spent before it failed (a provider refusing it mid-run, a
                // crash) is the sweep's cost too: its transcript's ledger says how much.
                if let TrialEnd::Infra { record, .. } = &mut end {
                    (record.cost_usd, record.accounting) = child::transcript_cost(&transcript);
                }
                return self.keep_after_failure(end, ws);
            }
        };
        // Its budget admitted not one request: the model never ran, so there is nothing to
        // grade — not admitted, like a trial the sweep's budget refused.
        if run.outcome == anvil_report::record::BUDGET_EXCEEDED && run.tokens == Tokens::default() {
            record.outcome = Some(run.outcome.clone());
            record.cost_usd = run.cost_usd;
            record.accounting = run.accounting;
            record.duration_ms = started.elapsed().as_millis() as u64;
            return self.keep_after_failure(TrialEnd::Graded(record), ws);
        }
        record.agent_ms = Some(agent_ms);
        record.outcome = Some(run.outcome.clone());
        record.steps = run.steps;
        record.tokens = run.tokens;
        record.cost_usd = run.cost_usd;
        record.accounting = run.accounting;
        if cancel.is_cancelled() {
            return TrialEnd::Cancelled;
        }
        let graded = grade(task, ws.path(), &self.options.grade)
            .instrument(tracing::info_span!("grade"))
            .await;
        record.duration_ms = started.elapsed().as_millis() as u64;
        record.check_ms = Some(graded.duration_ms);
        let kept = if self.options.keep_workspaces {
            Some(ws.keep())
        } else {
            drop(ws);
            None
        };
        record.workspace_path = kept.map(|p| p.display().to_string());
        record.grader_sandbox = Some(graded.sandbox.clone());
        record.tamper = graded
            .tamper
            .iter()
            .map(|f| TamperFinding {
                path: f.path.clone(),
                kind: f.kind.clone(),
                detail: f.detail.clone(),
            })
            .collect();
        let (pass, outcome) = match graded.verdict {
            Verdict::Pass => (true, CheckOutcome::Passed),
            Verdict::Fail => (false, CheckOutcome::Failed),
            // The model's code ran past the check's timeout: its fail, never a retry.
            Verdict::CheckTimeout => (false, CheckOutcome::CheckTimeout),
            Verdict::Tampered => (false, CheckOutcome::Tampered),
            Verdict::GraderError => {
                let error = TrialError::Grader {
                    reason: graded.reason,
                };
                return Self::infra(job, attempt, digests, error);
            }
        };
        record.pass = Some(pass);
        record.check_outcome = Some(outcome);
        TrialEnd::Graded(record)
    }

    /// With `--keep-workspaces`, keeps the workspace of a trial that failed and names it in
    /// its reason; otherwise removes it.
    fn keep_after_failure(&self, mut end: TrialEnd, ws: workspace::Workspace) -> TrialEnd {
        if self.options.keep_workspaces
            && let TrialEnd::Infra { reason, record } = &mut end
        {
            let kept = ws.keep();
            *reason = format!("{reason} (workspace: {})", kept.display());
            record.infra_error = Some(reason.clone());
            record.workspace_path = Some(kept.display().to_string());
        }
        end
    }

    /// The sweep's artifact directory, made if missing, for `job`'s transcript: the
    /// directory of its task and model inside it.
    fn transcript_dir(ctx: &SweepContext, job: &TrialJob) -> Result<PathBuf, TrialError> {
        let artifacts = ctx
            .artifacts
            .clone()
            .ok_or_else(|| TrialError::NoArtifacts {
                sweep: job.sweep.clone(),
            })?;
        let dir = transcripts::dir(&artifacts, &job.task, &job.model, job.variant.as_deref());
        // Only this user may write on the way: a directory someone else controls could be
        // swapped for a symlink that sends the transcripts elsewhere.
        crate::jobs::private_dir::ensure(&dir).map_err(|source| TrialError::Artifacts {
            host: crate::jobs::worker::host_name(),
            source,
        })?;
        Ok(artifacts)
    }

    /// The transcript the record of `attempt` names: that attempt's, if it was written; for
    /// an infrastructure failure (`latest`), the newest of any attempt up to it (a lost
    /// worker's trial is recorded under the next attempt).
    fn kept_transcript(&self, job: &TrialJob, attempt: u32, latest: bool) -> Option<String> {
        let ctx = self.sweeps.lock().ok()?.get(&job.sweep).cloned()?;
        let artifacts = ctx.artifacts.as_deref()?;
        let path = if latest {
            transcripts::latest_of(artifacts, &job.key(), attempt)?
        } else {
            let own = transcripts::of(artifacts, &job.key(), attempt);
            own.is_file().then_some(own)?
        };
        Some(path.display().to_string())
    }

    /// Where every sweep this queue knows keeps its transcripts — the directory above each
    /// recorded artifact directory, and this worker's own root — so a trial sees no earlier
    /// sweep's transcripts either, wherever they were put (even under a directory the
    /// sandbox's confined view shows, such as `/opt`). Read for every trial: a sweep started
    /// while this worker runs counts too.
    async fn artifact_roots(&self) -> Result<Vec<PathBuf>, TrialError> {
        let mut roots: Vec<PathBuf> = self.options.artifacts_root.iter().cloned().collect();
        for row in self.db.sweep_rows().await? {
            // A spec this version cannot read recorded no directory it knows of.
            let Ok(spec) = SweepSpec::from_row(&row) else {
                continue;
            };
            if let Some(root) = spec.artifacts.as_deref().and_then(Path::parent)
                && !roots.iter().any(|r| r == root)
            {
                roots.push(root.to_path_buf());
            }
        }
        Ok(roots)
    }

    /// Runs the trial's agent ([`child::run`]). Its [`TrialConfig`] goes beside the workspace
    /// (in the trial's private directory, which the agent's sandbox does not show); the child
    /// keeps its session in `transcript`; the sandbox hides the task's answers, every
    /// workspace and the sweep's `artifacts` (other trials' transcripts).
    #[allow(clippy::too_many_arguments)]
    async fn run_agent(
        &self,
        task: &Task,
        model: &PinnedModel,
        variant: Option<&Variant>,
        workspace: &Path,
        artifacts: Option<&Path>,
        transcript: &Path,
        max_cost_usd: Option<f64>,
        cancel: &CancellationToken,
    ) -> Result<Finished, TrialError> {
        let dir = workspace.parent().ok_or_else(|| TrialError::NoTrialDir {
            workspace: workspace.to_path_buf(),
        })?;
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let mut hidden: Vec<PathBuf> = task.answer_paths().iter().map(|p| canonical(p)).collect();
        hidden.push(canonical(self.workspaces.root()));
        hidden.extend(artifacts.map(canonical));
        hidden.extend(self.artifact_roots().await?.iter().map(|p| canonical(p)));
        hidden.extend(self.options.hidden.iter().cloned());
        let config_path = dir.join(TrialConfig::FILE_NAME);
        let spec = ChildSpec {
            anvil: &self.options.anvil,
            env: &self.options.env,
            model,
            workspace,
            config_path: &config_path,
            hidden,
            readable: Vec::new(),
            transcript,
            prompt: &task.spec.prompt,
            // A variant's settings replace the task's.
            permission_mode: variant
                .and_then(|v| v.permission_mode)
                .unwrap_or(task.spec.permission_mode)
                .name(),
            mcp_servers: task.spec.mcp_servers.clone(),
            max_steps: variant
                .and_then(|v| v.max_steps)
                .unwrap_or(task.spec.max_steps),
            extra_args: variant.map(Variant::extra_args).unwrap_or_default(),
            max_cost_usd,
            timeout: Duration::from_secs(task.spec.timeout_secs),
            // The child continues this trial's trace (the `agent` span it runs in).
            traceparent: crate::telemetry::traceparent(&tracing::Span::current()),
        };
        match child::run(&spec, cancel).await {
            Err(ChildError::Cancelled) => Err(TrialError::Cancelled),
            Err(e) => Err(e.into()),
            // Past the task's wall-clock cap: the model's fail, graded as `timeout`.
            // Its cost is what its transcript's ledger holds, the request cut off included.
            Ok(ChildRun::TimedOut) => {
                let (cost_usd, accounting) = child::transcript_cost(transcript);
                Ok(Finished {
                    outcome: "timeout".into(),
                    steps: 0,
                    tokens: Tokens::default(),
                    cost_usd,
                    accounting,
                })
            }
            Ok(ChildRun::Finished(result)) => Ok(Finished {
                outcome: result.outcome.as_str().to_string(),
                steps: result.steps,
                tokens: Tokens {
                    input: result.usage.input,
                    output: result.usage.output,
                    cache_read: result.usage.cache_read,
                    cache_write: result.usage.cache_write,
                },
                cost_usd: result.cost_usd,
                accounting: result.accounting,
            }),
        }
    }
}

struct Finished {
    outcome: String,
    steps: u32,
    tokens: Tokens,
    cost_usd: Option<f64>,
    accounting: Accounting,
}

#[async_trait::async_trait]
impl TrialHandler for AgentTrials {
    async fn provider_slots(&self, job: &TrialJob) -> Option<Arc<tokio::sync::Semaphore>> {
        let ctx = self.context(&job.sweep).await.ok()?;
        Self::pinned_model(&ctx, &job.model).ok()?.provider.slots()
    }

    async fn run(&self, job: &TrialJob, attempt: u32, cancel: CancellationToken) -> TrialEnd {
        let mut end = self.run_trial(job, attempt, cancel).await;
        // The worker runs this in the trial's span: its trace is the trial's.
        let trace_id = crate::telemetry::trace_id(&tracing::Span::current());
        // Every record names the model config the sweep pinned (the agent's own report of it
        // was checked against this), and the transcript when there is one.
        let digest = self.cached_model_digest(job);
        match &mut end {
            TrialEnd::Graded(record) | TrialEnd::Infra { record, .. } => {
                if let Some(digest) = digest {
                    record.digests.model_config = digest;
                }
                record.trace_id = trace_id;
                record.adaptive = self.cached_design(job);
                let infra = record.infra_error.is_some();
                record.session_path = self.kept_transcript(job, attempt, infra);
            }
            TrialEnd::Cancelled => {}
        }
        end
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
        let mut record =
            Self::infra_record_for(job, attempt, local.as_ref().map(|t| &t.digests), reason);
        if let Some(digest) = self.cached_model_digest(job) {
            record.digests.model_config = digest;
        }
        record.adaptive = self.cached_design(job);
        record.session_path = self.kept_transcript(job, attempt, true);
        record
    }
}
