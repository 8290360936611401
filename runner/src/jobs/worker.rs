//! The worker: pulls trial jobs from the queue and runs each to a recorded result.
//!
//! apalis delivers jobs (locking, attempts, orphan recovery when a worker's heartbeat lapses);
//! this module decides what a delivery means:
//!
//! - a job whose sweep was cancelled, or whose trial already finished, is acknowledged without
//!   running (deliveries are at least once);
//! - the trial row is claimed for this attempt (fenced: never from a newer attempt);
//! - the trial runs under a per-trial timeout, so a hung handler ends, and a watcher ends it
//!   early when its sweep is cancelled;
//! - a graded result is final; an infrastructure failure returns an error that apalis retries
//!   until the job's attempt limit, after which it is recorded as `infra_error`. That is the
//!   only retry layer.
//!
//! The backoff between attempts ([`anvil_llm::retry::Backoff`], the one exponential rule) is
//! waited out **on the queue**, never in a handler: before returning the error, the handler
//! moves the job's `run_at` into the future, and apalis only fetches a failed job again once
//! its `run_at` has passed. The worker slot is free for other trials meanwhile. A lost
//! worker's trial (re-queued by apalis when its heartbeat lapsed) is run again without a
//! backoff: the heartbeat timeout has already been waited, and a dead worker says nothing
//! about whether the infrastructure has recovered.

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use anvil_llm::retry::Backoff;
use anvil_report::TrialRecord;
use apalis::prelude::{
    Attempt, BackendExt, BoxDynError, Data, Monitor, TaskId, WorkerBuilder, WorkerBuilderExt,
};
use tokio_util::sync::CancellationToken;

use crate::auto::job::{AutoSessionHandler, AutoSessionJob, on_auto_storage};
use crate::jobs::queue::{
    Db, QueueError, TrialJob, TrialState, WorkerRow, now_ms, on_storage, schedule_retry,
};

/// How one run of a trial ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TrialEnd {
    /// Graded (pass or fail), or a model failure: final. Its trial record.
    Graded(TrialRecord),
    /// The infrastructure failed; retried while attempts remain. `record` is the trial record
    /// (with `infra_error` set) written if this was the last attempt.
    Infra { reason: String, record: TrialRecord },
    /// The sweep was cancelled while the trial ran.
    Cancelled,
}

/// What runs a trial. The real one runs the agent and the grader; benchmarks and tests use
/// others.
#[async_trait::async_trait]
pub trait TrialHandler: Send + Sync + 'static {
    /// Runs the trial. `cancel` fires when its sweep is cancelled.
    async fn run(&self, job: &TrialJob, attempt: u32, cancel: CancellationToken) -> TrialEnd;
    /// The longest a trial may take, everything included, before it is ended as an
    /// infrastructure failure.
    fn time_budget(&self, job: &TrialJob) -> Duration;
    /// The record of a trial that could not be completed for `reason`, written without running
    /// it (its attempts are used up).
    fn infra_record(&self, job: &TrialJob, attempt: u32, reason: &str) -> TrialRecord;
    /// The slots the trial's model provider shares (its `max_concurrency`), if it has a limit:
    /// the worker holds one for the whole trial, taken before the trial is claimed and its time
    /// budget starts, so trials of a one-slot server wait their turn in the queue instead of
    /// timing out behind each other.
    async fn provider_slots(&self, _job: &TrialJob) -> Option<Arc<tokio::sync::Semaphore>> {
        None
    }
}

#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Trials run at once by this process.
    pub concurrency: usize,
    /// How often the worker tells the queue it is alive. A worker silent for
    /// `heartbeat × missed_heartbeats` is presumed dead and its trials go to others.
    pub heartbeat: Duration,
    pub missed_heartbeats: usize,
    /// How often an idle worker looks for new jobs.
    pub poll_interval: Duration,
    /// Overrides the handler's per-trial time budget.
    pub trial_timeout: Option<Duration>,
    /// The wait before the second attempt; doubled for each later one, at most `backoff_max`.
    pub backoff: Duration,
    pub backoff_max: Duration,
    /// How often a running trial checks whether its sweep was cancelled.
    pub cancel_poll: Duration,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self {
            concurrency: 1,
            heartbeat: Duration::from_secs(5),
            missed_heartbeats: 3,
            poll_interval: Duration::from_millis(200),
            trial_timeout: None,
            backoff: Duration::from_secs(5),
            backoff_max: Duration::from_secs(300),
            cancel_poll: Duration::from_secs(1),
        }
    }
}

impl WorkerOptions {
    /// The backoff between attempts of a trial whose infrastructure failed.
    pub fn retry_backoff(&self) -> Backoff {
        Backoff {
            base: self.backoff,
            cap: self.backoff_max,
        }
    }
}

/// A unique worker name: host, pid and a random suffix (two workers never share one, so the
/// queue can tell a dead one from a live one).
pub fn worker_name() -> String {
    let host = host_name();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}-{}", std::process::id(), &suffix[..8])
}

/// This machine's name, for worker names and infrastructure errors.
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("worker {name}: {reason}")]
    Run { name: String, reason: String },
}

struct Shared {
    db: Db,
    handler: Arc<dyn TrialHandler>,
    options: WorkerOptions,
    name: String,
}

impl Shared {
    /// Runs one delivery of `job`; `task` is its id in apalis's table.
    async fn process(&self, job: TrialJob, attempt: u32, task: &str) -> Result<(), QueueError> {
        let key = job.key();
        // A provider slot first: waiting for one is not the trial's time (see provider_slots).
        let _slot = match self.handler.provider_slots(&job).await {
            Some(slots) => slots.acquire_owned().await.ok(),
            None => None,
        };
        if self.db.is_cancelled(&job.sweep).await? {
            self.db
                .finish(&key, attempt, TrialState::Cancelled, None, None)
                .await?;
            return Ok(());
        }
        match self.db.trial_state(&key).await? {
            Some((state, _)) if state.is_terminal() => return Ok(()),
            None => {
                tracing::warn!("job for unknown trial {key}: acknowledged without running");
                return Ok(());
            }
            Some(_) => {}
        }
        if attempt > job.max_attempts {
            // Only a lost worker gets a job past its limit (apalis re-queues orphans with one
            // more attempt without looking at the limit).
            let reason = format!(
                "lost worker: attempt {attempt} of {} did not finish",
                job.max_attempts
            );
            let mut record = self.handler.infra_record(&job, attempt, &reason);
            record.attempts = self.db.earlier_attempts(&key, attempt).await?;
            self.db
                .finish(
                    &key,
                    attempt,
                    TrialState::InfraError,
                    Some(&record),
                    Some(&reason),
                )
                .await?;
            return Ok(());
        }
        if !self.db.claim(&key, attempt, &self.name).await? {
            tracing::info!("{key}: attempt {attempt} superseded by a newer one");
            return Ok(());
        }
        let budget = self
            .options
            .trial_timeout
            .unwrap_or_else(|| self.handler.time_budget(&job));
        let cancel = CancellationToken::new();
        let watcher = tokio::spawn(watch_cancel(
            self.db.clone(),
            job.sweep.clone(),
            cancel.clone(),
            self.options.cancel_poll,
        ));
        // One span per trial attempt: the workspace, agent and grade spans nest in it.
        let span = tracing::info_span!(
            "trial",
            otel.name = %format_args!("trial {key}"),
            anvil.sweep = %job.sweep,
            anvil.task = %job.task,
            gen_ai.request.model = %job.model,
            anvil.trial = i64::from(job.trial),
            anvil.attempt = i64::from(attempt),
            anvil.outcome = tracing::field::Empty,
            anvil.pass = tracing::field::Empty,
            anvil.cost_usd = tracing::field::Empty,
        );
        tracing::info!(parent: &span, "trial started");
        let end = tokio::time::timeout(budget, self.handler.run(&job, attempt, cancel))
            .instrument(span.clone())
            .await;
        watcher.abort();
        let end = end.unwrap_or_else(|_| {
            let reason = format!(
                "the trial ran past its time budget of {}s and was ended",
                budget.as_secs_f64()
            );
            TrialEnd::Infra {
                record: self.handler.infra_record(&job, attempt, &reason),
                reason,
            }
        });
        match &end {
            TrialEnd::Graded(record) => {
                span.record("anvil.outcome", record.outcome.as_deref().unwrap_or(""));
                if let Some(pass) = record.counted_pass() {
                    span.record("anvil.pass", pass);
                }
                if let Some(cost) = record.cost_usd {
                    span.record("anvil.cost_usd", cost);
                }
                tracing::info!(parent: &span, outcome = ?record.outcome, pass = ?record.pass, cost_usd = ?record.cost_usd, duration_ms = record.duration_ms, "trial finished");
                let result = match record.counted_pass() {
                    Some(true) => "passed",
                    Some(false) => "failed",
                    None if record.not_admitted() => "not_admitted",
                    None => "infra_error",
                };
                tracing::event!(
                    target: anvil_agent::telemetry::METRICS,
                    tracing::Level::INFO,
                    monotonic_counter.anvil.trials = 1u64,
                    gen_ai.request.model = %job.model,
                    anvil.result = result,
                );
            }
            TrialEnd::Infra { reason, .. } => {
                span.record("anvil.outcome", "infra_error");
                tracing::event!(
                    target: anvil_agent::telemetry::METRICS,
                    tracing::Level::INFO,
                    monotonic_counter.anvil.trials = 1u64,
                    gen_ai.request.model = %job.model,
                    anvil.result = "infra_error",
                );
                tracing::warn!(parent: &span, "trial failed (infrastructure): {reason}");
            }
            TrialEnd::Cancelled => {
                span.record("anvil.outcome", "cancelled");
                tracing::info!(parent: &span, "trial cancelled");
            }
        }
        // A final record lists the attempts before it that failed and were retried.
        let mut end = end;
        if attempt > 1
            && let TrialEnd::Graded(record) | TrialEnd::Infra { record, .. } = &mut end
        {
            record.attempts = self.db.earlier_attempts(&key, attempt).await?;
        }
        let written = match &end {
            TrialEnd::Graded(record) => {
                self.db
                    .finish(&key, attempt, TrialState::Done, Some(record), None)
                    .await?
            }
            TrialEnd::Cancelled => {
                self.db
                    .finish(&key, attempt, TrialState::Cancelled, None, None)
                    .await?
            }
            TrialEnd::Infra { reason, record } if attempt >= job.max_attempts => {
                self.db
                    .finish(
                        &key,
                        attempt,
                        TrialState::InfraError,
                        Some(record),
                        Some(reason),
                    )
                    .await?
            }
            TrialEnd::Infra { reason, .. } => {
                let written = self
                    .db
                    .finish(&key, attempt, TrialState::Retrying, None, Some(reason))
                    .await?;
                if written {
                    self.db.record_attempt_error(&key, attempt, reason).await?;
                    // The next attempt waits on the queue, not in this slot.
                    let wait = self.options.retry_backoff().delay(attempt);
                    schedule_retry(&self.db, task, &self.name, wait).await?;
                    return Err(QueueError::Retry {
                        key: key.to_string(),
                        attempt,
                        reason: reason.clone(),
                    });
                }
                false
            }
        };
        if !written {
            tracing::info!("{key}: result of attempt {attempt} discarded: a newer attempt owns it");
        }
        Ok(())
    }
}

async fn watch_cancel(db: Db, sweep: String, cancel: CancellationToken, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if db.is_cancelled(&sweep).await.unwrap_or(false) {
            cancel.cancel();
            return;
        }
    }
}

async fn handle(
    job: TrialJob,
    attempt: Attempt,
    id: TaskId,
    shared: Data<Arc<Shared>>,
) -> Result<(), BoxDynError> {
    // apalis counts attempts from 0 in storage and 1 once a delivery is running.
    let attempt = attempt.current().max(1) as u32;
    shared
        .process(job, attempt, &id.to_string())
        .await
        .map_err(|e| Box::new(e) as BoxDynError)
}

/// Runs a worker process's trial workers until `shutdown` fires (see [`run_with`]).
pub async fn run(
    db: Db,
    handler: Arc<dyn TrialHandler>,
    options: WorkerOptions,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    run_with(
        db,
        Handlers {
            trials: Some(handler),
            auto: None,
        },
        options,
        shutdown,
    )
    .await
}

/// What one worker process runs: eval trials, `anvil auto` sessions, or both.
#[derive(Clone)]
pub struct Handlers {
    pub trials: Option<Arc<dyn TrialHandler>>,
    pub auto: Option<Arc<dyn AutoSessionHandler>>,
}

struct AutoShared {
    handler: Arc<dyn AutoSessionHandler>,
    name: String,
}

async fn handle_auto(
    job: AutoSessionJob,
    attempt: Attempt,
    id: TaskId,
    shared: Data<Arc<AutoShared>>,
) -> Result<(), BoxDynError> {
    let attempt = attempt.current().max(1) as u32;
    shared
        .handler
        .run(&job, attempt, &id.to_string(), &shared.name)
        .await
        .map_err(|e| Box::new(e) as BoxDynError)
}

/// Runs a worker process's workers until `shutdown` fires: one apalis worker per job kind it
/// has a handler for, on the one database. Registers the process in `anvil_workers` and keeps
/// its heartbeat there for `anvil-evals status`.
pub async fn run_with(
    db: Db,
    handlers: Handlers,
    options: WorkerOptions,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    let name = worker_name();
    let started = now_ms();
    db.register_worker(&WorkerRow {
        name: name.clone(),
        host: host_name(),
        pid: i64::from(std::process::id()),
        started_at_ms: started,
        last_heartbeat_ms: started,
        stopped: false,
        heartbeat_ms: Some(i64::try_from(options.heartbeat.as_millis()).unwrap_or(i64::MAX)),
        missed_heartbeats: Some(i64::try_from(options.missed_heartbeats).unwrap_or(i64::MAX)),
    })
    .await?;
    let beat = {
        let db = db.clone();
        let name = name.clone();
        let every = options.heartbeat;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = db.worker_heartbeat(&name, false).await {
                    tracing::warn!("worker heartbeat: {e}");
                }
            }
        })
    };
    let concurrency = options.concurrency.max(1);
    let mut monitor = Monitor::new();
    if let Some(handler) = handlers.trials {
        let shared = Arc::new(Shared {
            db: db.clone(),
            handler,
            options: options.clone(),
            name: name.clone(),
        });
        let options = options.clone();
        monitor = on_storage!(&db, pool, Storage, config => {
            let pool = pool.clone();
            let name = name.clone();
            monitor.register(move |_restarts| {
                let config = config
                    .clone()
                    .batch_size(concurrency)
                    .heartbeat_interval(options.heartbeat)
                    .missed_heartbeats(options.missed_heartbeats);
                let backend = Storage::new(&pool)
                    .with_config(config)
                    .poll_with_interval(options.poll_interval);
                WorkerBuilder::new(name.as_str())
                    .backend(backend)
                    .concurrency(concurrency)
                    .data(shared.clone())
                    .build(handle)
            })
        });
    }
    if let Some(handler) = handlers.auto {
        // apalis keys its workers by name: the auto worker's is the process's, suffixed.
        let auto_name = format!("{name}-auto");
        let shared = Arc::new(AutoShared {
            handler,
            name: auto_name.clone(),
        });
        let options = options.clone();
        monitor = on_auto_storage!(&db, pool, Storage, config => {
            let pool = pool.clone();
            monitor.register(move |_restarts| {
                let config = config
                    .clone()
                    .batch_size(concurrency)
                    .heartbeat_interval(options.heartbeat)
                    .missed_heartbeats(options.missed_heartbeats);
                let backend = Storage::new(&pool)
                    .with_config(config)
                    .poll_with_interval(options.poll_interval);
                WorkerBuilder::new(auto_name.as_str())
                    .backend(backend)
                    .concurrency(concurrency)
                    .data(shared.clone())
                    .build(handle_auto)
            })
        });
    }
    // A database error ends a worker's stream; restart it rather than stop taking jobs.
    let monitor = monitor.should_restart(|_ctx, error| {
        tracing::warn!("worker stopped: {error}; restarting");
        true
    });
    let result = monitor
        .run_with_signal(async move {
            shutdown.cancelled().await;
            Ok(())
        })
        .await;
    beat.abort();
    let _ = db.worker_heartbeat(&name, true).await;
    result.map_err(|e| WorkerError::Run {
        name,
        reason: e.to_string(),
    })
}
