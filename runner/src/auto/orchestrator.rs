//! The orchestrator: runs one delivered `auto_session` job to a recorded end (the module doc
//! of [`crate::auto`], steps 1–8, the initializer and crash recovery), then enqueues exactly
//! what [`Ledger::next`] says, or ends the run.
//!
//! A delivery:
//! 1. reads the run and replays its ledger; a job of a session that already ended, of an
//!    ended run, or of a cancelled run runs nothing (deliveries are at least once);
//! 2. claims the session for its attempt (fenced: never over a newer one);
//! 3. recovers what earlier attempts left: one that recorded its verdict gets only its merge
//!    redone (idempotent by candidate); any other is `dead`, its worktree saved as a patch
//!    under `leftovers/`, and counted as an infrastructure failure;
//! 4. runs the session: worktree from the run branch's head, the agent, the candidate, the
//!    freeze check, the protected-path check, verify, verdict (recorded before the merge),
//!    merge;
//! 5. records the session's end and its ledger event in one fenced transaction; then the next
//!    job, or the terminal state. An infrastructure failure is recorded, then returned as an
//!    error so that apalis delivers the same session again as its next attempt, after a
//!    backoff waited on the queue.
//!
//! Git calls block; they run on the blocking pool.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anvil_grader::GradeOptions;
use anvil_llm::registry::PinnedModel;
use anvil_llm::retry::Backoff;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::auto::agent::{self, AgentError, AgentRun, AgentSpec};
use crate::auto::contract::{self, Contract, FEATURES_FILE};
use crate::auto::git::{self, GitError, MergeRequest, Merged, Oid, Repo, TreeEdit, Worktree};
use crate::auto::ids::{AttemptId, RunId};
use crate::auto::job::{self, AutoJobError, AutoSessionHandler, AutoSessionJob};
use crate::auto::prompts::{self, PROGRESS_FILE, Status};
use crate::auto::run_state::{Estimate, Event, Next, SessionKind, Terminal, WorkerSession};
use crate::auto::store::{EventRow, NewEvent, RunRow, SessionRow, SessionUpdate, StoreError};
use crate::auto::verdict::{self, CheckOutcome, SessionChecks, SessionVerdict};
use crate::auto::verify::{self, Verifier, VerifyError};
use crate::jobs::queue::{Db, QueueError, schedule_retry};

/// Where and how sessions run on this machine.
#[derive(Debug, Clone)]
pub struct AutoOptions {
    /// The `anvil` binary the agent runs as.
    pub anvil: PathBuf,
    /// The agent's environment (provider credentials, HOME, PATH…).
    pub env: Vec<(String, String)>,
    pub grade: GradeOptions,
    /// Paths every session's sandbox must hide besides the run's transcripts and leftovers
    /// (the queue's files).
    pub hidden: Vec<PathBuf>,
    /// How often a running session looks for a cancel.
    pub cancel_poll: Duration,
    /// The wait before an infrastructure failure's next attempt.
    pub backoff: Backoff,
}

/// A run's directories on this machine: `<data>/anvil/auto/<run>/`.
#[derive(Debug, Clone)]
pub struct RunDirs {
    pub root: PathBuf,
}

impl RunDirs {
    pub fn attempt(&self, id: AttemptId) -> PathBuf {
        self.root.join("attempts").join(id.to_string())
    }

    /// Where the worktree of the last attempt that ended waits for the next one
    /// ([`Repo::park_worktree`]).
    pub fn parked(&self) -> PathBuf {
        self.root.join("attempts").join("parked")
    }

    pub fn config(&self, id: AttemptId) -> PathBuf {
        self.root.join("attempts").join(format!("{id}.config.json"))
    }

    pub fn transcript(&self, id: AttemptId) -> PathBuf {
        self.root.join("sessions").join(format!("{id}.jsonl"))
    }

    pub fn leftovers(&self, id: AttemptId) -> PathBuf {
        self.root.join("leftovers").join(format!("{id}.patch"))
    }
}

/// Why a session did not reach a recorded end of its own.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error("check of {id} could not run: {reason}")]
    CheckInfra { id: String, reason: String },
    #[error("the run's {what} does not read: {reason}")]
    Corrupt { what: String, reason: String },
    #[error("a blocking task failed: {0}")]
    Join(String),
    /// Another attempt owns the session now.
    #[error("fenced off by a newer attempt")]
    Fenced,
}

impl SessionError {
    fn persistent(&self) -> bool {
        match self {
            SessionError::Agent(e) => e.persistent(),
            SessionError::Corrupt { .. } => true,
            _ => false,
        }
    }
}

/// What a session ended with, to record.
struct SessionEnd {
    update: SessionUpdate,
    events: Vec<NewEvent>,
    ledger: Event,
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, GitError> + Send + 'static,
) -> Result<T, SessionError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SessionError::Join(e.to_string()))?
        .map_err(SessionError::from)
}

/// The real handler of auto sessions.
pub struct Orchestrator {
    db: Db,
    options: AutoOptions,
}

/// One delivery's context.
struct Ctx {
    run: RunRow,
    id: RunId,
    model: PinnedModel,
    dirs: RunDirs,
    repo: Repo,
    session: u32,
    attempt: u32,
}

impl Ctx {
    fn attempt_id(&self) -> AttemptId {
        AttemptId::new(self.session, self.attempt)
    }
}

impl Orchestrator {
    pub fn new(db: Db, options: AutoOptions) -> Self {
        Self { db, options }
    }

    /// The next session's reserved estimate: unknown without pricing; else the dearest
    /// session so far (0 before any).
    fn estimate(model: &PinnedModel, sessions: &[SessionRow]) -> Estimate {
        if model.pricing.is_none() {
            return Estimate::UnknownPricing;
        }
        let dearest = sessions
            .iter()
            .filter_map(|s| s.cost_usd)
            .fold(0.0_f64, f64::max);
        Estimate::Usd(dearest)
    }

    /// After a session's end: the next job, or the run's end. Returns the ledger's decision.
    async fn advance(&self, run: &RunRow, model: &PinnedModel) -> Result<Next, AutoJobError> {
        let ledger = self
            .db
            .auto_ledger(&run.id)
            .await
            .map_err(|e| store_to_queue(&run.id, e))?;
        let sessions = self.db.auto_sessions(&run.id).await?;
        let next = ledger.next(&run.limits(), Self::estimate(model, &sessions));
        match &next {
            Next::Stop { terminal, reason } => {
                self.db.auto_finish_run(&run.id, *terminal, reason).await?;
                let parked = RunDirs {
                    root: PathBuf::from(&run.data_dir),
                }
                .parked();
                if let Err(e) = blocking(move || git::discard_parked(&parked)).await {
                    tracing::warn!("auto run {}: the parked worktree stays: {e}", run.id);
                }
            }
            Next::Start {
                kind: SessionKind::Worker,
                ..
            } if self.held(&run.id).await? => {
                // `anvil auto init`: the contract is accepted and the workers wait for
                // `anvil auto run` or `resume`, which enqueue the next session themselves.
                tracing::info!("auto run {}: workers held after the initializer", run.id);
            }
            Next::Start { kind, attempt, .. } => {
                job::enqueue(
                    &self.db,
                    &AutoSessionJob {
                        run: run.id.clone(),
                        session: attempt.session,
                        kind: *kind,
                    },
                )
                .await?;
            }
        }
        Ok(next)
    }

    /// Whether `anvil auto init` holds the run's workers now (read afresh: `run` may have
    /// released them while the initializer ran).
    async fn held(&self, run: &str) -> Result<bool, QueueError> {
        Ok(self
            .db
            .auto_run(run)
            .await?
            .is_some_and(|r| r.hold_workers != 0))
    }

    async fn deliver(
        &self,
        job: &AutoSessionJob,
        attempt: u32,
        task: &str,
        worker: &str,
    ) -> Result<(), AutoJobError> {
        let Some(run) = self.db.auto_run(&job.run).await? else {
            tracing::warn!("auto session of unknown run {}: acknowledged", job.run);
            return Ok(());
        };
        if run.terminal().is_some() {
            return Ok(());
        }
        let ledger = self
            .db
            .auto_ledger(&run.id)
            .await
            .map_err(|e| store_to_queue(&run.id, e))?;
        if ledger.next.session != job.session {
            tracing::info!(
                "auto run {} session {}: already ended (next is {})",
                run.id,
                job.session,
                ledger.next.session
            );
            return Ok(());
        }
        let model: PinnedModel = match serde_json::from_str(&run.model) {
            Ok(m) => m,
            Err(e) => {
                let reason = format!("the run's pinned model does not read: {e}");
                self.db
                    .auto_finish_run(&run.id, Terminal::InfraFailed, &reason)
                    .await?;
                return Ok(());
            }
        };
        if run.cancel_requested != 0 {
            self.cancel_run(&run, job.session, attempt).await?;
            return Ok(());
        }
        let sessions = self.db.auto_sessions(&run.id).await?;
        if let Next::Stop { terminal, reason } =
            ledger.next(&run.limits(), Self::estimate(&model, &sessions))
        {
            self.db.auto_finish_run(&run.id, terminal, &reason).await?;
            return Ok(());
        }
        let kind_name = match job.kind {
            SessionKind::Initializer => "initializer",
            SessionKind::Worker => "worker",
        };
        if !self
            .db
            .auto_claim(&run.id, job.session, attempt, kind_name, worker)
            .await?
        {
            tracing::info!(
                "auto run {} s{}a{attempt}: superseded or ended",
                run.id,
                job.session
            );
            return Ok(());
        }
        let (id, repo) = match (RunId::new(&run.id), Repo::open(Path::new(&run.repository))) {
            (Ok(id), Ok(repo)) => (id, repo),
            (Err(e), _) => {
                return self
                    .persistent_failure(&run, job, attempt, e.to_string())
                    .await;
            }
            (_, Err(e)) => {
                return self
                    .persistent_failure(&run, job, attempt, e.to_string())
                    .await;
            }
        };
        let ctx = Ctx {
            dirs: RunDirs {
                root: PathBuf::from(&run.data_dir),
            },
            run,
            id,
            model,
            repo,
            session: job.session,
            attempt,
        };
        let previous: Vec<SessionRow> = sessions
            .into_iter()
            .filter(|s| s.session == i64::from(job.session) && s.attempt < i64::from(attempt))
            .collect();
        let outcome = self.session(&ctx, job.kind, &previous).await;
        let end = match outcome {
            Ok(end) => end,
            Err(SessionError::Fenced) => return Ok(()),
            Err(SessionError::Agent(AgentError::Cancelled)) => {
                let update = SessionUpdate {
                    state: Some("cancelled".into()),
                    ended: true,
                    ..SessionUpdate::default()
                };
                self.db
                    .auto_update(
                        &ctx.run.id,
                        ctx.session,
                        ctx.attempt,
                        &update,
                        &[NewEvent::ledger(&Event::Cancelled)],
                    )
                    .await?;
                self.remove_attempt(&ctx).await;
                self.advance(&ctx.run, &ctx.model).await?;
                return Ok(());
            }
            Err(error) => {
                let reason = error.to_string();
                let persistent = error.persistent();
                tracing::warn!("auto run {} {}: {reason}", ctx.run.id, ctx.attempt_id());
                self.save_leftovers(&ctx, ctx.attempt_id(), None).await;
                let update = SessionUpdate {
                    state: Some("infra_failed".into()),
                    error: Some(reason.clone()),
                    ended: true,
                    ..SessionUpdate::default()
                };
                let event = Event::InfraFailed {
                    reason: reason.clone(),
                    persistent,
                    cost_usd: None,
                };
                let written = self
                    .db
                    .auto_update(
                        &ctx.run.id,
                        ctx.session,
                        ctx.attempt,
                        &update,
                        &[NewEvent::ledger(&event)],
                    )
                    .await?;
                if !written {
                    return Ok(());
                }
                return match self.advance(&ctx.run, &ctx.model).await? {
                    Next::Start { attempt: next, .. } if next.session == ctx.session => {
                        let wait = self.options.backoff.delay(ctx.attempt);
                        schedule_retry(&self.db, task, worker, wait).await?;
                        Err(AutoJobError::Retry {
                            run: ctx.run.id.clone(),
                            session: ctx.session,
                            attempt: ctx.attempt,
                            reason,
                        })
                    }
                    _ => Ok(()),
                };
            }
        };
        let written = self
            .db
            .auto_update(&ctx.run.id, ctx.session, ctx.attempt, &end.update, &{
                let mut events = end.events;
                events.push(NewEvent::ledger(&end.ledger));
                events
            })
            .await?;
        self.park_attempt(&ctx).await;
        if written {
            self.advance(&ctx.run, &ctx.model).await?;
        }
        Ok(())
    }

    async fn persistent_failure(
        &self,
        run: &RunRow,
        job: &AutoSessionJob,
        attempt: u32,
        reason: String,
    ) -> Result<(), AutoJobError> {
        let update = SessionUpdate {
            state: Some("infra_failed".into()),
            error: Some(reason.clone()),
            ended: true,
            ..SessionUpdate::default()
        };
        let event = Event::InfraFailed {
            reason,
            persistent: true,
            cost_usd: None,
        };
        self.db
            .auto_update(
                &run.id,
                job.session,
                attempt,
                &update,
                &[NewEvent::ledger(&event)],
            )
            .await?;
        let ledger = self
            .db
            .auto_ledger(&run.id)
            .await
            .map_err(|e| store_to_queue(&run.id, e))?;
        if let Next::Stop { terminal, reason } = ledger.next(&run.limits(), Estimate::Usd(0.0)) {
            self.db.auto_finish_run(&run.id, terminal, &reason).await?;
        }
        Ok(())
    }

    async fn cancel_run(&self, run: &RunRow, session: u32, attempt: u32) -> Result<(), QueueError> {
        self.db
            .auto_record(
                &run.id,
                session,
                attempt,
                &NewEvent::ledger(&Event::Cancelled),
            )
            .await?;
        self.db
            .auto_finish_run(&run.id, Terminal::Cancelled, "the run was cancelled")
            .await
    }

    /// Saves a dead or failed attempt's worktree as a patch and removes it.
    async fn save_leftovers(&self, ctx: &Ctx, id: AttemptId, base: Option<&str>) {
        let dir = ctx.dirs.attempt(id);
        if dir.symlink_metadata().is_err() {
            return;
        }
        let repo = ctx.repo.clone();
        let run = ctx.id.clone();
        let to = ctx.dirs.leftovers(id);
        let base = base.and_then(Oid::parse);
        let result = blocking(move || {
            let base = match base {
                Some(b) => b,
                None => repo
                    .branch(&run.run_branch())?
                    .ok_or_else(|| GitError::NoRef {
                        refname: run.run_branch(),
                    })?,
            };
            let wt = Worktree {
                dir,
                branch: run.work_branch(id),
                run,
                attempt: id,
                base,
            };
            let saved = repo.save_patch(&wt, &to);
            repo.remove_worktree(&wt)?;
            saved
        })
        .await;
        if let Err(e) = result {
            tracing::warn!("leftovers of {id}: {e}");
        }
    }

    /// Removes the attempt's worktree (the run ends).
    async fn remove_attempt(&self, ctx: &Ctx) {
        self.end_attempt(ctx, false).await;
    }

    /// Parks the worktree of an attempt whose agent has ended, for the next attempt.
    async fn park_attempt(&self, ctx: &Ctx) {
        self.end_attempt(ctx, true).await;
    }

    async fn end_attempt(&self, ctx: &Ctx, park: bool) {
        let id = ctx.attempt_id();
        let dir = ctx.dirs.attempt(id);
        let parked = ctx.dirs.parked();
        let repo = ctx.repo.clone();
        let run = ctx.id.clone();
        let result = blocking(move || {
            let wt = Worktree {
                dir,
                branch: run.work_branch(id),
                run,
                attempt: id,
                base: Oid::parse(&"0".repeat(40)).ok_or_else(|| GitError::NoRef {
                    refname: "base".into(),
                })?,
            };
            if park {
                repo.park_worktree(&wt, &parked)
            } else {
                repo.remove_worktree(&wt)
            }
        })
        .await;
        if let Err(e) = result {
            tracing::warn!("removing the worktree of {id}: {e}");
        }
        let _ = std::fs::remove_file(ctx.dirs.config(id));
    }

    /// Step 3 of a delivery, then the session itself.
    async fn session(
        &self,
        ctx: &Ctx,
        kind: SessionKind,
        previous: &[SessionRow],
    ) -> Result<SessionEnd, SessionError> {
        let mut events = Vec::new();
        let mut redo: Option<&SessionRow> = None;
        let dead = self
            .db
            .auto_mark_dead(&ctx.run.id, ctx.session, ctx.attempt)
            .await?;
        for row in previous {
            let id = AttemptId::new(ctx.session, row.attempt.max(0) as u32);
            let was_dead = dead.contains(&row.attempt);
            if was_dead && row.state == "validated" && kind == SessionKind::Worker {
                redo = Some(row);
                self.remove_dead(ctx, id, row.base.as_deref()).await;
                continue;
            }
            if was_dead {
                self.save_leftovers(ctx, id, row.base.as_deref()).await;
                let transcript = ctx.dirs.transcript(id);
                let cost_usd =
                    blocking(move || Ok(crate::jobs::child::transcript_cost(&transcript).0))
                        .await
                        .ok()
                        .flatten();
                if let Some(usd) = cost_usd {
                    self.db
                        .auto_dead_cost(&ctx.run.id, ctx.session, id.attempt, usd)
                        .await?;
                }
                events.push(NewEvent::ledger(&Event::InfraFailed {
                    reason: format!("lost worker: attempt {id} did not finish"),
                    persistent: false,
                    cost_usd,
                }));
            }
        }
        if !events.is_empty()
            && !self
                .db
                .auto_update(
                    &ctx.run.id,
                    ctx.session,
                    ctx.attempt,
                    &SessionUpdate::default(),
                    &events,
                )
                .await?
        {
            return Err(SessionError::Fenced);
        }
        if let Some(row) = redo {
            return self.redo_merge(ctx, row).await;
        }
        let base = {
            let repo = ctx.repo.clone();
            let run = ctx.id.clone();
            blocking(move || {
                repo.branch(&run.run_branch())?
                    .ok_or_else(|| GitError::NoRef {
                        refname: run.run_branch(),
                    })
            })
            .await?
        };
        let id = ctx.attempt_id();
        self.save_leftovers(ctx, id, Some(base.as_str())).await;
        let wt = {
            let repo = ctx.repo.clone();
            let run = ctx.id.clone();
            let base = base.clone();
            let dir = ctx.dirs.attempt(id);
            let parked = ctx.dirs.parked();
            blocking(move || repo.reuse_worktree(&run, id, &base, &dir, &parked)).await?
        };
        let transcript = ctx.dirs.transcript(id);
        self.update(
            ctx,
            SessionUpdate {
                base: Some(base.to_string()),
                transcript: Some(transcript.display().to_string()),
                ..SessionUpdate::default()
            },
            &[],
        )
        .await?;
        let spec_bytes = std::fs::read(&ctx.run.spec_path).map_err(|e| SessionError::Corrupt {
            what: format!("spec {}", ctx.run.spec_path),
            reason: e.to_string(),
        })?;
        let prompt = match kind {
            SessionKind::Initializer => {
                let note = self.db.auto_ledger(&ctx.run.id).await?.last_rejection;
                prompts::initializer(
                    &ctx.run.spec_path,
                    &String::from_utf8_lossy(&spec_bytes),
                    note.as_deref(),
                )
            }
            SessionKind::Worker => {
                let (accepted, _, _) = self.contracts(ctx, &base).await?;
                let status = self.status(ctx, &base, &accepted).await?;
                prompts::worker(&accepted, &status)
            }
        };
        let run = self.agent(ctx, &wt.dir, &transcript, &prompt).await?;
        let mut flags = Vec::new();
        match run.outcome.as_str() {
            "max_steps" => flags.push("max_steps"),
            "session_timed_out" => flags.push("session_timed_out"),
            _ => {}
        }
        self.update(
            ctx,
            SessionUpdate {
                state: Some("validating".into()),
                outcome: Some(run.outcome.clone()),
                cost_usd: run.cost_usd,
                accounting: Some(accounting_name(&run)),
                flags: Some(flags.join(",")),
                ..SessionUpdate::default()
            },
            &[],
        )
        .await?;
        let candidate = {
            let repo = ctx.repo.clone();
            let wt = wt.clone();
            let message = format!("anvil auto: candidate of {id}");
            match blocking(move || repo.commit_worktree(&wt, &message)).await {
                Ok(candidate) => candidate,
                Err(SessionError::Git(e)) if e.is_worktree_content() => {
                    return self.uncommittable(ctx, kind, &run, flags, &e).await;
                }
                Err(e) => return Err(e),
            }
        };
        match kind {
            SessionKind::Initializer => {
                self.initializer_end(ctx, &base, &candidate, &spec_bytes, &run, flags)
                    .await
            }
            SessionKind::Worker => self.worker_end(ctx, &base, &candidate, &run, flags).await,
        }
    }

    /// The session left files git cannot commit (a nested repository without a commit, an
    /// unreadable file): its own result, nothing of it lands, logged as
    /// `validator.uncommittable` — never an infrastructure failure, which would retry the
    /// session and could end the run `infra_failed` on the model's account. A worker session
    /// counts as one without progress (the stall breaker sees it).
    async fn uncommittable(
        &self,
        ctx: &Ctx,
        kind: SessionKind,
        run: &AgentRun,
        mut flags: Vec<&str>,
        e: &GitError,
    ) -> Result<SessionEnd, SessionError> {
        flags.push("uncommittable");
        let reason = format!("the session's files cannot be committed: {e}");
        let verified = self.db.auto_ledger(&ctx.run.id).await?.verified;
        Ok(SessionEnd {
            update: SessionUpdate {
                state: Some("rejected".into()),
                error: Some(reason.clone()),
                flags: Some(flags.join(",")),
                ended: true,
                ..SessionUpdate::default()
            },
            events: vec![NewEvent::new(
                "validator.uncommittable",
                json!({"reason": reason}),
            )],
            ledger: match kind {
                SessionKind::Initializer => Event::ContractRejected {
                    reason,
                    cost_usd: run.cost_usd,
                },
                SessionKind::Worker => Event::WorkerFinished(WorkerSession {
                    newly_verified: 0,
                    verified,
                    changed_outside_notes: false,
                    failure_fingerprint: None,
                    cost_usd: run.cost_usd,
                }),
            },
        })
    }

    async fn remove_dead(&self, ctx: &Ctx, id: AttemptId, base: Option<&str>) {
        let dir = ctx.dirs.attempt(id);
        if dir.symlink_metadata().is_ok() {
            self.save_leftovers(ctx, id, base).await;
        }
    }

    async fn update(
        &self,
        ctx: &Ctx,
        update: SessionUpdate,
        events: &[NewEvent],
    ) -> Result<(), SessionError> {
        if self
            .db
            .auto_update(&ctx.run.id, ctx.session, ctx.attempt, &update, events)
            .await?
        {
            Ok(())
        } else {
            Err(SessionError::Fenced)
        }
    }

    async fn agent(
        &self,
        ctx: &Ctx,
        worktree: &Path,
        transcript: &Path,
        prompt: &str,
    ) -> Result<AgentRun, SessionError> {
        if let Some(dir) = transcript.parent() {
            std::fs::create_dir_all(dir).map_err(|e| SessionError::Corrupt {
                what: format!("directory {}", dir.display()),
                reason: e.to_string(),
            })?;
        }
        let mut hidden = vec![
            ctx.dirs.root.join("sessions"),
            ctx.dirs.root.join("leftovers"),
        ];
        hidden.extend(self.options.hidden.iter().cloned());
        let config_path = ctx.dirs.config(ctx.attempt_id());
        let spec = AgentSpec {
            anvil: &self.options.anvil,
            env: &self.options.env,
            model: &ctx.model,
            worktree,
            config_path: &config_path,
            hidden,
            // Git inside the worktree reads the commits it borrows (never writes them).
            readable: vec![ctx.repo.git_dir().join("objects")],
            transcript,
            prompt,
            max_steps: ctx.run.max_steps.clamp(1, i64::from(u32::MAX)) as u32,
            timeout: Duration::from_secs(ctx.run.session_timeout_s.max(1) as u64),
        };
        let cancel = CancellationToken::new();
        let watcher = tokio::spawn(watch_cancel(
            self.db.clone(),
            ctx.run.id.clone(),
            cancel.clone(),
            self.options.cancel_poll,
        ));
        let result = agent::run(&spec, &cancel).await;
        watcher.abort();
        Ok(result?)
    }

    /// The contract as accepted (every `passes` false), as the base holds it (the harness's
    /// `passes`), and the accepted commit.
    async fn contracts(
        &self,
        ctx: &Ctx,
        base: &Oid,
    ) -> Result<(Contract, Contract, Oid), SessionError> {
        let accepted_commit = ctx
            .run
            .accepted_commit
            .as_deref()
            .and_then(Oid::parse)
            .ok_or_else(|| SessionError::Corrupt {
                what: "accepted commit".into(),
                reason: "none recorded".into(),
            })?;
        let read = |commit: Oid| {
            let repo = ctx.repo.clone();
            async move {
                let bytes = blocking(move || repo.read_file(&commit, FEATURES_FILE)).await?;
                let bytes = bytes.ok_or_else(|| SessionError::Corrupt {
                    what: FEATURES_FILE.into(),
                    reason: "missing from the run branch".into(),
                })?;
                Contract::parse(Path::new(FEATURES_FILE), &bytes).map_err(|e| {
                    SessionError::Corrupt {
                        what: FEATURES_FILE.into(),
                        reason: e.to_string(),
                    }
                })
            }
        };
        let accepted = read(accepted_commit.clone()).await?;
        let current = read(base.clone()).await?;
        Ok((accepted, current, accepted_commit))
    }

    /// The status block's facts, from the run branch and the recorded checks.
    async fn status(
        &self,
        ctx: &Ctx,
        base: &Oid,
        accepted: &Contract,
    ) -> Result<Status, SessionError> {
        let (_, current, _) = self.contracts(ctx, base).await?;
        let verified = current.passing();
        let events = self.db.auto_events(&ctx.run.id).await?;
        let last_output = last_outputs(&events);
        let sessions = self.db.auto_sessions(&ctx.run.id).await?;
        let last_session = sessions
            .iter()
            .rev()
            .find(|s| s.kind == "worker" && s.ended_at_ms.is_some() && s.state != "dead")
            .map(describe_session);
        let (progress, log) = {
            let repo = ctx.repo.clone();
            let base = base.clone();
            blocking(move || {
                let progress = repo.read_file(&base, PROGRESS_FILE)?;
                let log = repo.log_oneline(&base, 20)?;
                Ok((progress, log))
            })
            .await?
        };
        Ok(Status {
            verified: accepted
                .features
                .iter()
                .filter(|f| verified.contains(&f.id))
                .map(|f| (f.id.clone(), f.description.clone()))
                .collect(),
            failing: accepted
                .features
                .iter()
                .filter(|f| !verified.contains(&f.id))
                .map(|f| {
                    (
                        f.id.clone(),
                        f.description.clone(),
                        last_output.get(&f.id).cloned(),
                    )
                })
                .collect(),
            last_session,
            progress: progress.map(|b| String::from_utf8_lossy(&b).into_owned()),
            log,
        })
    }

    async fn initializer_end(
        &self,
        ctx: &Ctx,
        base: &Oid,
        candidate: &Oid,
        spec: &[u8],
        run: &AgentRun,
        flags: Vec<&str>,
    ) -> Result<SessionEnd, SessionError> {
        let bytes = {
            let repo = ctx.repo.clone();
            let candidate = candidate.clone();
            blocking(move || repo.read_file(&candidate, FEATURES_FILE)).await?
        };
        let refused = |reason: String| SessionEnd {
            update: SessionUpdate {
                state: Some("rejected".into()),
                candidate: Some(candidate.to_string()),
                error: Some(reason.clone()),
                flags: Some(flags.join(",")),
                ended: true,
                ..SessionUpdate::default()
            },
            events: vec![NewEvent::new(
                "contract.rejected",
                json!({"reason": reason}),
            )],
            ledger: Event::ContractRejected {
                reason: reason.clone(),
                cost_usd: run.cost_usd,
            },
        };
        let Some(bytes) = bytes else {
            return Ok(refused(format!(
                "the initializer wrote no {FEATURES_FILE} at the repository's top level"
            )));
        };
        let contract = match Contract::parse(Path::new(FEATURES_FILE), &bytes) {
            Ok(c) => c,
            Err(e) => return Ok(refused(e.to_string())),
        };
        // The accepted contract as it will be written: the fail-before checks see it, as
        // every later check does (see `verify`).
        let accepted = contract.clone().accept(spec);
        let text =
            contract::restore(&accepted, &BTreeSet::new()).map_err(|e| SessionError::Corrupt {
                what: FEATURES_FILE.into(),
                reason: e.to_string(),
            })?;
        let verifier = Verifier::new(&ctx.repo, candidate, &contract, self.options.grade.clone())?
            .with_contract_file(&text)?;
        let checked = verifier.check(candidate, &contract.features).await?;
        let outcomes = verify::outcomes(&checked);
        let mut events: Vec<NewEvent> = check_events(&outcomes);
        let vacuous = match verdict::fail_before(&contract, &outcomes) {
            Ok(v) => v,
            Err(verdict::VerdictError::Infra { id, reason }) => {
                return Err(SessionError::CheckInfra { id, reason });
            }
            Err(e) => return Ok(refused(e.to_string())),
        };
        // A check must fail by running and finding the work missing: one the shell cannot
        // run (126/127: the command or script does not exist or cannot execute) or one that
        // hangs can never tell work from none.
        let unrunnable: Vec<String> = checked
            .iter()
            .filter_map(|(id, c)| match (c.evidence.verdict, c.evidence.exit_code) {
                (anvil_grader::command::CommandVerdict::Fail, Some(code @ (126 | 127))) => {
                    Some(format!("{id} (exit {code}: the shell could not run it)"))
                }
                (anvil_grader::command::CommandVerdict::Timeout, _) => {
                    Some(format!("{id} (it ran past its timeout)"))
                }
                _ => None,
            })
            .collect();
        let mut reasons = Vec::new();
        let protected = contract
            .protected_paths()
            .map_err(|e| SessionError::Corrupt {
                what: "protected paths".into(),
                reason: e.to_string(),
            })?;
        let missing = {
            let repo = ctx.repo.clone();
            let candidate = candidate.clone();
            let contract = contract.clone();
            blocking(move || {
                let mut paths = Vec::new();
                for (id, why) in contract.script_problems(&protected, |p| {
                    repo.read_file(&candidate, p).ok().flatten().is_some()
                }) {
                    paths.push(format!("{id}: {why}"));
                }
                Ok(paths)
            })
            .await?
        };
        if !missing.is_empty() {
            reasons.push(missing.join("; "));
        }
        if !vacuous.is_empty() {
            reasons.push(format!(
                "the checks of {} pass before any work (a vacuous check verifies nothing)",
                vacuous.join(", ")
            ));
        }
        if !unrunnable.is_empty() {
            reasons.push(format!(
                "the checks of {} do not run to a failure before any work, so they cannot tell \
                 work from none (name commands and scripts that exist in the grading sandbox, \
                 and end within the timeout)",
                unrunnable.join(", ")
            ));
        }
        if !reasons.is_empty() {
            let mut end = refused(reasons.join("; "));
            events.append(&mut end.events);
            end.events = events;
            return Ok(end);
        }
        let head = {
            let repo = ctx.repo.clone();
            let run_id = ctx.id.clone();
            let session = ctx.session;
            let base = base.clone();
            let candidate = candidate.clone();
            let cost = run.cost_usd;
            blocking(move || {
                let edits = [TreeEdit::Write {
                    path: FEATURES_FILE.into(),
                    contents: text.into_bytes(),
                }];
                let merged = repo.merge(&MergeRequest {
                    run: &run_id,
                    session,
                    kind: SessionKind::Initializer,
                    expected: &base,
                    candidate: &candidate,
                    verified: &[],
                    cost_usd: cost,
                    edits: &edits,
                })?;
                Ok(merged.head(&base).clone())
            })
            .await?
        };
        self.db
            .auto_accept_contract(&ctx.run.id, &accepted.digest(), head.as_str())
            .await?;
        events.push(NewEvent::new(
            "contract.accepted",
            json!({"digest": accepted.digest(), "commit": head.as_str(), "features": accepted.features.len()}),
        ));
        Ok(SessionEnd {
            update: SessionUpdate {
                state: Some("accepted".into()),
                candidate: Some(candidate.to_string()),
                merged: Some(head.to_string()),
                flags: Some(flags.join(",")),
                ended: true,
                ..SessionUpdate::default()
            },
            events,
            ledger: Event::ContractAccepted {
                features: accepted.features.len(),
                cost_usd: run.cost_usd,
            },
        })
    }

    async fn worker_end(
        &self,
        ctx: &Ctx,
        base: &Oid,
        candidate: &Oid,
        run: &AgentRun,
        mut flags: Vec<&str>,
    ) -> Result<SessionEnd, SessionError> {
        let (accepted, current, accepted_commit) = self.contracts(ctx, base).await?;
        let previously = current.passing();
        let (edited, changed) = {
            let repo = ctx.repo.clone();
            let candidate = candidate.clone();
            let base = base.clone();
            blocking(move || {
                Ok((
                    repo.read_file(&candidate, FEATURES_FILE)?,
                    repo.changed_paths(&base, &candidate)?,
                ))
            })
            .await?
        };
        let freeze = contract::freeze_check(&current, edited.as_deref().unwrap_or_default());
        let mut events = Vec::new();
        for rejected in &freeze.rejected {
            events.push(NewEvent::new(
                "validator.rejected",
                serde_json::to_value(rejected).unwrap_or_default(),
            ));
        }
        if !freeze.rejected.is_empty() {
            flags.push("rejected_edit");
        }
        for claim in &freeze.claims {
            events.push(NewEvent::new(
                "claim",
                serde_json::to_value(claim).unwrap_or_default(),
            ));
        }
        let protected = accepted
            .protected_paths()
            .map_err(|e| SessionError::Corrupt {
                what: "protected paths".into(),
                reason: e.to_string(),
            })?;
        let protected_edits: Vec<&String> =
            changed.iter().filter(|p| protected.covers(p)).collect();
        for path in &protected_edits {
            events.push(NewEvent::new(
                "validator.protected_edit",
                json!({"path": path}),
            ));
        }
        if !protected_edits.is_empty() {
            flags.push("protected_edit");
        }
        let verifier = Verifier::new(
            &ctx.repo,
            &accepted_commit,
            &accepted,
            self.options.grade.clone(),
        )?;
        let checked = verifier.check(candidate, &accepted.features).await?;
        let outcomes = verify::outcomes(&checked);
        if let Some((id, CheckOutcome::Infra { reason })) = outcomes
            .iter()
            .find(|(_, o)| matches!(o, CheckOutcome::Infra { .. }))
        {
            return Err(SessionError::CheckInfra {
                id: id.clone(),
                reason: reason.clone(),
            });
        }
        events.extend(check_events(&outcomes));
        // Files planted beside the protected tests (or in place of the runner) failed every
        // check they touched without running it; logged like a protected edit.
        let shadowing: BTreeSet<&String> = checked
            .values()
            .flat_map(|c| c.evidence.shadowing.iter())
            .collect();
        for path in &shadowing {
            events.push(NewEvent::new(
                "validator.protected_shadow",
                json!({"path": path}),
            ));
        }
        if !shadowing.is_empty() {
            flags.push("protected_shadow");
        }
        // Test infrastructure the commit changed: every check failed without running.
        let tampered = checked.values().find(|c| !c.tamper.is_empty());
        if let Some(c) = tampered {
            for finding in &c.tamper {
                events.push(NewEvent::new(
                    "validator.tamper",
                    serde_json::to_value(finding).unwrap_or_default(),
                ));
            }
            flags.push("tampered");
        }
        // Such a commit never lands either: on the run branch it would fail every later
        // session's checks too.
        let refused = match (tampered, shadowing.is_empty()) {
            (Some(c), _) => Some(format!(
                "it changes test infrastructure: {}",
                c.tamper
                    .iter()
                    .map(|f| format!("{} ({})", f.path, f.kind))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            (None, false) => Some(format!(
                "it plants files imported in place of the protected tests or the runner: {}",
                shadowing
                    .iter()
                    .map(|p| p.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            (None, true) => None,
        };
        let claimed = freeze.claimed();
        let mut verdict = verdict::decide(SessionChecks {
            contract: &accepted,
            previously_verified: &previously,
            claimed: &claimed,
            results: &outcomes,
            allow_regressions: ctx.run.allow_regressions != 0,
        })
        .map_err(|e| SessionError::Corrupt {
            what: "verdict".into(),
            reason: e.to_string(),
        })?;
        if let Some(reason) = refused {
            verdict.merge = verdict::Merge::Reject { reason };
            // A check refused without running (the commit's tamper findings, a planted file
            // it touches) says nothing about what the session broke: no regression of it.
            verdict.regressions.retain(|id| {
                checked
                    .get(id)
                    .is_some_and(|c| c.tamper.is_empty() && c.evidence.shadowing.is_empty())
            });
        }
        for (kind, ids) in [
            ("false_claim", &verdict.false_claims),
            ("unclaimed_verified", &verdict.unclaimed_verified),
            ("regression", &verdict.regressions),
        ] {
            for id in ids {
                events.push(NewEvent::new(kind, json!({"id": id})));
            }
        }
        // The verdict is recorded before any merge, keyed by the candidate: a merge redone
        // after a crash never verifies again.
        self.update(
            ctx,
            SessionUpdate {
                state: Some("validated".into()),
                candidate: Some(candidate.to_string()),
                verdict: Some(serde_json::to_string(&verdict).unwrap_or_default()),
                flags: Some(flags.join(",")),
                ..SessionUpdate::default()
            },
            &events,
        )
        .await?;
        self.land(
            ctx,
            previously.len(),
            base,
            candidate,
            &verdict,
            run.cost_usd,
            &accepted,
            &accepted_commit,
        )
        .await
    }

    /// Step 7 and the session's end: the merge when the verdict allows it.
    #[allow(clippy::too_many_arguments)]
    async fn land(
        &self,
        ctx: &Ctx,
        previously: usize,
        base: &Oid,
        candidate: &Oid,
        verdict: &SessionVerdict,
        cost_usd: Option<f64>,
        accepted: &Contract,
        accepted_commit: &Oid,
    ) -> Result<SessionEnd, SessionError> {
        if !verdict.merge.merges() {
            return Ok(SessionEnd {
                update: SessionUpdate {
                    state: Some("not_merged".into()),
                    verified_delta: Some("[]".into()),
                    ended: true,
                    ..SessionUpdate::default()
                },
                events: Vec::new(),
                ledger: Event::WorkerFinished(WorkerSession {
                    newly_verified: 0,
                    verified: previously,
                    changed_outside_notes: false,
                    failure_fingerprint: verdict.failure_fingerprint.clone(),
                    cost_usd,
                }),
            });
        }
        let text = contract::restore(accepted, &verdict.next_verified).map_err(|e| {
            SessionError::Corrupt {
                what: FEATURES_FILE.into(),
                reason: e.to_string(),
            }
        })?;
        let protected = accepted
            .protected_paths()
            .map_err(|e| SessionError::Corrupt {
                what: "protected paths".into(),
                reason: e.to_string(),
            })?;
        let (merged, changed) = {
            let repo = ctx.repo.clone();
            let run_id = ctx.id.clone();
            let session = ctx.session;
            let base = base.clone();
            let candidate = candidate.clone();
            let accepted_commit = accepted_commit.clone();
            let newly = verdict.newly_verified.clone();
            blocking(move || {
                let edits = [
                    TreeEdit::Restore {
                        from: accepted_commit,
                        protected,
                    },
                    TreeEdit::Write {
                        path: FEATURES_FILE.into(),
                        contents: text.into_bytes(),
                    },
                ];
                let merged = repo.merge(&MergeRequest {
                    run: &run_id,
                    session,
                    kind: SessionKind::Worker,
                    expected: &base,
                    candidate: &candidate,
                    verified: &newly,
                    cost_usd,
                    edits: &edits,
                })?;
                let head = merged.head(&base).clone();
                let changed = repo.changed_paths(&base, &head)?;
                Ok((merged, changed))
            })
            .await?
        };
        let changed_outside_notes = changed
            .iter()
            .any(|p| p != PROGRESS_FILE && p != FEATURES_FILE);
        let (state, head) = match &merged {
            Merged::Unchanged => ("unchanged", base.clone()),
            Merged::Moved(oid) | Merged::AlreadyThere(oid) => ("merged", oid.clone()),
        };
        Ok(SessionEnd {
            update: SessionUpdate {
                state: Some(state.into()),
                merged: Some(head.to_string()),
                verified_delta: Some(
                    serde_json::to_string(&verdict.newly_verified).unwrap_or_default(),
                ),
                ended: true,
                ..SessionUpdate::default()
            },
            events: Vec::new(),
            ledger: Event::WorkerFinished(WorkerSession {
                newly_verified: verdict.newly_verified.len(),
                verified: verdict.next_verified.len(),
                changed_outside_notes,
                failure_fingerprint: verdict.failure_fingerprint.clone(),
                cost_usd,
            }),
        })
    }

    /// A dead attempt recorded its verdict: only its merge is redone (idempotent by
    /// candidate), with nothing verified again.
    async fn redo_merge(&self, ctx: &Ctx, row: &SessionRow) -> Result<SessionEnd, SessionError> {
        let corrupt = |what: &str| SessionError::Corrupt {
            what: format!(
                "{what} of {}",
                AttemptId::new(ctx.session, row.attempt as u32)
            ),
            reason: "not recorded".into(),
        };
        let base = row
            .base
            .as_deref()
            .and_then(Oid::parse)
            .ok_or_else(|| corrupt("base"))?;
        let candidate = row
            .candidate
            .as_deref()
            .and_then(Oid::parse)
            .ok_or_else(|| corrupt("candidate"))?;
        let verdict: SessionVerdict = row
            .verdict
            .as_deref()
            .and_then(|v| serde_json::from_str(v).ok())
            .ok_or_else(|| corrupt("verdict"))?;
        let (accepted, current, accepted_commit) = self.contracts(ctx, &base).await?;
        self.update(
            ctx,
            SessionUpdate {
                state: Some("validated".into()),
                base: Some(base.to_string()),
                candidate: Some(candidate.to_string()),
                verdict: row.verdict.clone(),
                cost_usd: row.cost_usd,
                transcript: row.transcript.clone(),
                ..SessionUpdate::default()
            },
            &[NewEvent::new(
                "merge.redone",
                json!({"from_attempt": row.attempt, "candidate": candidate.as_str()}),
            )],
        )
        .await?;
        self.land(
            ctx,
            current.passing().len(),
            &base,
            &candidate,
            &verdict,
            row.cost_usd,
            &accepted,
            &accepted_commit,
        )
        .await
    }
}

#[async_trait::async_trait]
impl AutoSessionHandler for Orchestrator {
    async fn run(
        &self,
        job: &AutoSessionJob,
        attempt: u32,
        task: &str,
        worker: &str,
    ) -> Result<(), AutoJobError> {
        self.deliver(job, attempt, task, worker).await
    }
}

fn store_to_queue(run: &str, e: StoreError) -> AutoJobError {
    match e {
        StoreError::Queue(q) => AutoJobError::Queue(q),
        other => AutoJobError::Retry {
            run: run.to_string(),
            session: 0,
            attempt: 0,
            reason: other.to_string(),
        },
    }
}

fn accounting_name(run: &AgentRun) -> String {
    serde_json::to_value(run.accounting)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// One `check` event per feature: its outcome and output tail.
fn check_events(outcomes: &BTreeMap<String, CheckOutcome>) -> Vec<NewEvent> {
    outcomes
        .iter()
        .map(|(id, outcome)| {
            let (name, output) = match outcome {
                CheckOutcome::Passed => ("passed", None),
                CheckOutcome::Failed { output } => ("failed", Some(output.clone())),
                CheckOutcome::TimedOut { output } => ("timed_out", Some(output.clone())),
                CheckOutcome::Infra { reason } => ("infra", Some(reason.clone())),
            };
            NewEvent::new(
                "check",
                json!({"id": id, "outcome": name, "output": output}),
            )
        })
        .collect()
}

/// The last recorded check output of each feature.
fn last_outputs(events: &[EventRow]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in events.iter().filter(|e| e.kind == "check") {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&e.payload) else {
            continue;
        };
        if let (Some(id), Some(output)) = (v["id"].as_str(), v["output"].as_str()) {
            out.insert(id.to_string(), output.to_string());
        }
    }
    out
}

/// A session in a line, for the next one's status block.
pub fn describe_session(s: &SessionRow) -> String {
    let delta = s
        .verified_delta
        .as_deref()
        .and_then(|d| serde_json::from_str::<Vec<String>>(d).ok())
        .unwrap_or_default();
    let verdict: Option<SessionVerdict> = s
        .verdict
        .as_deref()
        .and_then(|v| serde_json::from_str(v).ok());
    let mut line = format!("s{}a{}: {}", s.session, s.attempt, s.state);
    if !delta.is_empty() {
        line.push_str(&format!("; newly verified {}", delta.join(", ")));
    }
    if let Some(v) = verdict {
        if !v.false_claims.is_empty() {
            line.push_str(&format!(
                "; claimed but failing {}",
                v.false_claims.join(", ")
            ));
        }
        if !v.regressions.is_empty() {
            line.push_str(&format!("; broke {}", v.regressions.join(", ")));
        }
    }
    if !s.flags.is_empty() {
        line.push_str(&format!(" [{}]", s.flags));
    }
    line
}

async fn watch_cancel(db: Db, run: String, cancel: CancellationToken, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if let Ok(Some(row)) = db.auto_run(&run).await
            && row.cancel_requested != 0
        {
            cancel.cancel();
            return;
        }
    }
}
