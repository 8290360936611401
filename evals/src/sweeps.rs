//! The sweep commands: run, worker, status, export, cancel, and reading a sweep's results for
//! `report --sweep`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anvil_grader::GradeOptions;
use anvil_report::coverage::Unrecorded;
use anvil_runner::jobs::queue::{
    CHECK_TIMEOUT, Counts, Db, DbWatch, QueueLocation, TrialState, now_ms,
};
use anvil_runner::jobs::sweep::{self, SweepSpec, TaskSelection};
use anvil_runner::jobs::sweep_file::SweepFile;
use anvil_runner::jobs::trial::{AgentTrials, TrialOptions};
use anvil_runner::jobs::worker::{self, WorkerOptions};
use anvil_runner::jobs::{private_dir, transcripts};
use anyhow::{Context, Result, anyhow, bail};
use tokio_util::sync::CancellationToken;

/// How workers run on this machine (shared by `run` and `worker`).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// Trials run at once by this process [default: 1, or the sweep file's].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub concurrency: Option<u32>,
    /// Keep each trial's workspace (its path is recorded as the record's workspace_path) until
    /// you remove it: see `anvil-evals workspaces`.
    #[arg(long)]
    pub keep_workspaces: bool,
    /// Where workspaces are made (default: the system temp dir). A sweep started with it keeps
    /// its transcripts in DIR/sweeps/<sweep>/ instead of the data dir's anvil/sweeps/<sweep>/.
    #[arg(long, value_name = "DIR")]
    pub workspaces: Option<PathBuf>,
    /// The anvil binary to run trials with (default: beside anvil-evals, else on PATH).
    #[arg(long)]
    pub anvil: Option<PathBuf>,
    /// Seconds between this worker's heartbeats; a worker silent for 3 of them is presumed
    /// dead and its trials are run again by others.
    #[arg(long, default_value_t = 5.0)]
    pub heartbeat_secs: f64,
    /// End a trial as an infrastructure failure after this many seconds (default: the task's
    /// agent and check caps plus 120 s).
    #[arg(long)]
    pub trial_timeout_secs: Option<f64>,
    /// Seconds before the first retry of an infrastructure failure (doubling after, at most
    /// 300). The wait is on the queue: the worker runs other trials meanwhile.
    #[arg(long, default_value_t = 5.0)]
    pub backoff_secs: f64,
    /// Grade without any sandbox, on a machine where none can work (each record says so).
    #[arg(long)]
    pub unsandboxed_grading: bool,
}

/// Where workers make workspaces when `--workspaces` is not given.
pub fn default_workspaces() -> PathBuf {
    anvil_runner::jobs::workspace::default_root()
}

/// `value` seconds, more than zero; `flag` names the option in the error.
fn positive_secs(value: f64, flag: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow!("{flag} must be a positive number of seconds (got {value})"))
}

/// `value` seconds, zero allowed; `flag` names the option in the error.
fn non_negative_secs(value: f64, flag: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| anyhow!("{flag} must be a number of seconds, 0 or more (got {value})"))
}

impl WorkerArgs {
    fn worker_options(&self) -> Result<WorkerOptions> {
        Ok(WorkerOptions {
            concurrency: self.concurrency.unwrap_or(1) as usize,
            heartbeat: positive_secs(self.heartbeat_secs, "--heartbeat-secs")?,
            missed_heartbeats: 3,
            trial_timeout: self
                .trial_timeout_secs
                .map(|s| positive_secs(s, "--trial-timeout-secs"))
                .transpose()?,
            backoff: non_negative_secs(self.backoff_secs, "--backoff-secs")?,
            ..WorkerOptions::default()
        })
    }

    /// How trials run here, for a queue at `queue`.
    fn trial_options(&self, queue: &QueueLocation) -> TrialOptions {
        // The queue's files (other trials' records) and anvil's data dir are never a trial's
        // business. Only the database files themselves: a queue given as ~/queue.db must not
        // hide the whole home directory.
        let absolute =
            |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let mut hidden: Vec<PathBuf> = anvil_llm::config::data_dir().into_iter().collect();
        if let QueueLocation::Sqlite(file) = queue {
            let file = absolute(file);
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut name = file.clone().into_os_string();
                name.push(suffix);
                hidden.push(PathBuf::from(name));
            }
        }
        TrialOptions {
            hidden,
            anvil: self.anvil.clone().unwrap_or_else(TrialOptions::find_anvil),
            workspaces: self.workspaces.clone().unwrap_or_else(default_workspaces),
            keep_workspaces: self.keep_workspaces,
            grade: GradeOptions {
                unsandboxed: self.unsandboxed_grading,
                keep_dir: false,
                grading_root: None,
            },
            env: anvil_agent::secrets::utf8_vars().collect(),
            slack: Duration::from_secs(120),
            artifacts_root: transcripts::root(self.workspaces.as_deref()),
        }
    }
}

/// Checks what a worker needs before it takes a job, so a broken machine fails here once
/// instead of turning every trial into an infrastructure error.
fn preflight(options: &TrialOptions) -> Result<()> {
    let anvil = &options.anvil;
    let found = if anvil.components().count() > 1 {
        anvil.is_file()
    } else {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(anvil).is_file()))
            .unwrap_or(false)
    };
    if !found {
        bail!(
            "cannot find the anvil binary ({}); build it with `cargo build --release --bin anvil` or pass --anvil PATH",
            anvil.display()
        );
    }
    // Workspaces (their templates) and transcripts decide what a trial starts from and what
    // is believed about it afterwards: only this user may be able to change them.
    private_dir::ensure(&options.workspaces).map_err(|e| anyhow!("--workspaces: {e}"))?;
    if let Some(root) = &options.artifacts_root {
        private_dir::ensure(root).map_err(|e| anyhow!("transcripts: {e}"))?;
    }
    anvil_grader::grade::preflight(&options.grade).map_err(|e| anyhow!("{e}"))?;
    Ok(())
}

/// Opens the queue, creating it when missing: only for `run` and `worker`, which make queues.
pub async fn open(queue: Option<&str>, connections: u32) -> Result<(Db, QueueLocation)> {
    let location = QueueLocation::from_option(queue)?;
    let db = Db::open(&location, connections).await?;
    Ok((db, location))
}

/// Opens a queue that must exist (`status`, `export`, `cancel`, `report --sweep`): a missing
/// database is an error naming it, never a new empty one.
pub async fn open_existing(queue: Option<&str>, connections: u32) -> Result<(Db, QueueLocation)> {
    let location = QueueLocation::from_option(queue)?;
    let db = Db::open_existing(&location, connections).await?;
    Ok((db, location))
}

/// How often a running sweep or worker makes sure its queue database is still there.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Waits until the queue database is lost (deleted, replaced, no longer writable, not
/// answering) and says how.
async fn lost(db: Db, watch: DbWatch) -> anyhow::Error {
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        if let Err(e) = watch.check(&db).await {
            return e.into();
        }
    }
}

/// Pins every model as this machine's anvil built-ins and user config resolve it — never a
/// project config: the sweep's trials run in task repositories, whose `.anvil/config.toml` must
/// not decide what a model is. With `needs_credentials` (trials will run here), each model's
/// credential variable must be set too.
fn pin_models(
    models: &[String],
    needs_credentials: bool,
) -> Result<Vec<anvil_llm::registry::PinnedModel>> {
    use anvil_llm::config::{Config, ConfigFile, user_config_path};
    let user = match user_config_path() {
        Some(path) => ConfigFile::load(&path)?.map(|f| (path, f)),
        None => None,
    };
    let config = Config::merge(user, None, false)?;
    let registry = anvil_llm::registry::Registry::new(config);
    models
        .iter()
        .map(|model| {
            let pinned = if needs_credentials {
                registry.resolve(model).and_then(|_| registry.pin(model))
            } else {
                registry.pin(model)
            };
            // Name the model once: most resolution errors name it themselves.
            pinned.map_err(|e| {
                let e = e.to_string();
                if e.contains(&format!("'{model}'")) {
                    anyhow!("--models: {e}")
                } else {
                    anyhow!("--models: '{model}': {e}")
                }
            })
        })
        .collect()
}

#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// A sweep file (TOML: tasks, tags, models, trials, variants, caps, sweep id template,
    /// baseline; see the README). Flags given with it override the file's settings.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Tasks: a directory or a pattern such as 'evals/tasks/*' or 'evals/tasks/{py,rust}-*';
    /// repeat it for more.
    #[arg(long, required_unless_present = "file")]
    pub tasks: Vec<String>,
    /// Only tasks with at least one of these tags (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub tags: Vec<String>,
    /// Model aliases from your config, comma-separated.
    #[arg(long, value_delimiter = ',', required_unless_present = "file")]
    pub models: Vec<String>,
    /// Trials per (task, model, variant) [default: 3].
    #[arg(long)]
    pub trials: Option<u32>,
    /// The queue: a SQLite file (default: anvil.db in the data dir) or a postgres:// URL.
    #[arg(long)]
    pub queue: Option<String>,
    /// The sweep id; give an existing one to resume it (default: the sweep file's template,
    /// else a new id).
    #[arg(long)]
    pub sweep: Option<String>,
    /// Enqueue only; workers started with `anvil-evals worker` run the trials.
    #[arg(long)]
    pub detach: bool,
    /// Attempts per trial before an infrastructure failure is final [default: 3].
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// The k of pass@k / pass^k in the final report [default: 1,3,5 up to --trials, as
    /// `report`'s].
    #[arg(short = 'k', long = "k", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    pub k: Vec<u32>,
    /// Compare the final report against this baseline: a results file, a sweep id in the
    /// queue, or last:PATTERN (the newest finished sweep whose id matches).
    #[arg(long)]
    pub baseline: Option<String>,
    /// A hard budget in USD for each trial (a task's lower cost_cap_usd wins). Every model
    /// needs pricing.
    #[arg(
        long,
        value_name = "USD",
        value_parser = anvil_runner::cli::args::usd,
        allow_hyphen_values = true
    )]
    pub max_trial_cost_usd: Option<f64>,
    /// A hard budget in USD for the whole sweep, held in the queue across every worker: each
    /// trial reserves its task's cost_cap_usd (or an even share of the budget) before its
    /// agent runs, and runs with it as its own budget; a trial that does not fit is recorded
    /// budget_exceeded (pass null, never a fail). Every model needs pricing.
    #[arg(
        long,
        value_name = "USD",
        value_parser = anvil_runner::cli::args::usd,
        allow_hyphen_values = true
    )]
    pub max_cost_usd: Option<f64>,
    /// Adaptive trials: after the first round of --trials, run more rounds (of --trials each)
    /// only for the tasks whose 95% interval per (task, model, variant) is still wider (high −
    /// low) than W, until it is narrower or --max-trials is reached. The report's estimates
    /// stay unbiased under this stopping rule (see the README).
    #[arg(long, value_name = "W")]
    pub target_ci_width: Option<f64>,
    /// With --target-ci-width: the most trials per (task, model, variant).
    #[arg(long, value_name = "N")]
    pub max_trials: Option<u32>,
    #[command(flatten)]
    pub worker: WorkerArgs,
}

/// A sweep's settings: the command line over the sweep file over the defaults.
struct Settings {
    selection: TaskSelection,
    models: Vec<String>,
    trials: u32,
    max_attempts: u32,
    k: Vec<u32>,
    max_cost_usd: Option<f64>,
    max_trial_cost_usd: Option<f64>,
    baseline: Option<String>,
    sweep: Option<String>,
    variants: Vec<anvil_runner::jobs::variant::Variant>,
    target_ci_width: Option<f64>,
    max_trials: Option<u32>,
}

impl Settings {
    /// Merges `args` (and the concurrency and trial timeout into `args.worker`) over the
    /// sweep file it names.
    fn of(args: &mut RunArgs) -> Result<Settings> {
        let file = match &args.file {
            Some(path) => SweepFile::load(path)?,
            None => SweepFile::default(),
        };
        let from_file = |what: &str| {
            args.file
                .as_ref()
                .map(|p| format!("{what} (from {})", p.display()))
                .unwrap_or_else(|| what.to_string())
        };
        let patterns = if args.tasks.is_empty() {
            file.tasks.clone()
        } else {
            args.tasks.clone()
        };
        if patterns.is_empty() {
            bail!(
                "{}: no tasks: give --tasks or tasks = [...]",
                from_file("the sweep")
            );
        }
        let models: Vec<String> = if args.models.is_empty() {
            file.models.clone()
        } else {
            args.models.iter().map(|m| m.trim().to_string()).collect()
        };
        if models.is_empty() {
            bail!(
                "{}: no models: give --models or models = [...]",
                from_file("the sweep")
            );
        }
        args.worker.concurrency = args.worker.concurrency.or(file.concurrency);
        args.worker.trial_timeout_secs = args.worker.trial_timeout_secs.or(file.trial_timeout_secs);
        let sweep = match (&args.sweep, &file.sweep) {
            (Some(id), _) => Some(id.clone()),
            (None, Some(template)) => Some(anvil_runner::jobs::sweep_file::sweep_id_now(template)),
            (None, None) => None,
        };
        let trials = args.trials.or(file.trials).unwrap_or(3);
        Ok(Settings {
            selection: TaskSelection {
                patterns,
                tags: if args.tags.is_empty() {
                    file.tags.clone()
                } else {
                    args.tags.clone()
                },
            },
            models,
            trials,
            max_attempts: args.max_attempts.or(file.max_attempts).unwrap_or(3),
            k: if !args.k.is_empty() {
                args.k.clone()
            } else {
                // `report`'s defaults: none above the trials per task (an adaptive sweep's first
                // round, which k may not exceed).
                file.k
                    .clone()
                    .unwrap_or_else(|| anvil_report::metric::default_ks(trials))
            },
            max_cost_usd: args.max_cost_usd.or(file.max_cost_usd),
            max_trial_cost_usd: args.max_trial_cost_usd.or(file.max_trial_cost_usd),
            baseline: args.baseline.clone().or(file.baseline.clone()),
            sweep,
            variants: file.variants,
            target_ci_width: args.target_ci_width.or(file.target_ci_width),
            max_trials: args.max_trials.or(file.max_trials),
        })
    }
}

pub async fn run(mut args: RunArgs) -> Result<ExitCode> {
    // Everything is validated before anything is enqueued.
    let settings = Settings::of(&mut args)?;
    let models = pin_models(&settings.models, !args.detach)?;
    // What the sweep file asked for that cannot be: the file is named.
    let in_file = |e: anvil_runner::jobs::sweep::SweepError| match &args.file {
        Some(path) => anyhow!("{}: {e}", path.display()),
        None => e.into(),
    };
    let mut spec = SweepSpec::plan(
        &settings.selection,
        models,
        settings.variants.clone(),
        settings.trials,
        settings.max_attempts,
    )
    .and_then(|s| s.with_budget(settings.max_cost_usd))
    .and_then(|s| s.with_trial_cap(settings.max_trial_cost_usd))
    .and_then(|s| s.with_adaptive(settings.target_ci_width, settings.max_trials))
    .map_err(in_file)?;
    if let Some(design) = spec.adaptive
        && let Some(k) = settings.k.iter().find(|&&k| k > design.round)
    {
        bail!(
            "-k {k}: an adaptive sweep estimates pass@k and pass^k without bias only for k up to \
             its first round ({} trials): raise --trials or lower k",
            design.round
        );
    }
    if spec.adaptive.is_some() && args.detach {
        bail!(
            "adaptive trials (--target-ci-width) are decided round by round by `run`: run it \
             without --detach (workers on other machines still take its trials)"
        );
    }
    let trial_options = args
        .worker
        .trial_options(&QueueLocation::from_option(args.queue.as_deref())?);
    let worker_options = args.worker.worker_options()?;
    if !args.detach {
        preflight(&trial_options)?;
    }
    let id = settings.sweep.clone().unwrap_or_else(sweep::new_sweep_id);
    // The baseline is resolved before anything is enqueued: one that does not exist is bad
    // input. `last:PATTERN` with nothing finished to match yet (the first nightly) is not.
    let baseline = match &settings.baseline {
        None => None,
        Some(given) => {
            match crate::baseline::read(given, args.queue.as_deref(), std::slice::from_ref(&id))
                .await
            {
                Ok(base) => Some(base),
                Err(e) => match given.strip_prefix("last:") {
                    Some(pattern) => {
                        crate::history::sweep_glob(pattern, &format!("baseline {given}"))?;
                        eprintln!(
                            "anvil-evals: no baseline yet, the report compares against nothing: {e:#}"
                        );
                        None
                    }
                    None => return Err(e),
                },
            }
        }
    };
    let (db, location) = open(
        args.queue.as_deref(),
        args.worker.concurrency.unwrap_or(1) + 4,
    )
    .await?;
    // The transcripts' directory is decided here, once, and recorded with the sweep: every
    // worker writes there (a resumed sweep keeps the one it was started with).
    let root = transcripts::root(args.worker.workspaces.as_deref()).ok_or_else(|| {
        anyhow!("no data directory to keep the sweep's transcripts in (is HOME set?); pass --workspaces DIR")
    })?;
    private_dir::ensure(&root).map_err(|e| anyhow!("transcripts: {e}"))?;
    spec.artifacts = Some(transcripts::artifacts(&root, &id));
    let started = sweep::start(&db, &id, &spec).await?;
    if let Some(usd) = settings.max_cost_usd {
        db.set_sweep_budget(&id, usd).await?;
    }
    let artifacts = match db.sweep(&id).await? {
        Some(row) => SweepSpec::from_row(&row)?.artifacts,
        None => None,
    };
    let variants = if spec.variants.is_empty() {
        String::new()
    } else {
        format!(" × {} variants", spec.variants.len())
    };
    eprintln!(
        "{} sweep {id}: {} tasks × {} models{variants} × {} trials = {} trials, {} to run (queue: {location})",
        if started.resumed {
            "resuming"
        } else {
            "started"
        },
        spec.tasks.len(),
        spec.models.len(),
        spec.trials,
        started.trials,
        started.unfinished,
    );
    if let Some(dir) = &artifacts {
        eprintln!("transcripts: {}", dir.display());
    }
    if args.detach {
        let queue_flag = args
            .queue
            .as_deref()
            .map(|q| format!(" --queue '{q}'"))
            .unwrap_or_default();
        eprintln!("run workers with:  anvil-evals worker{queue_flag}");
        eprintln!("watch it with:     anvil-evals status{queue_flag} --sweep {id}");
        out!("{id}");
        return Ok(ExitCode::SUCCESS);
    }
    let shutdown = CancellationToken::new();
    let handler = Arc::new(AgentTrials::new(db.clone(), trial_options));
    let workers = tokio::spawn(worker::run(
        db.clone(),
        handler,
        worker_options,
        shutdown.clone(),
    ));
    // A database deleted or made read-only under a running sweep must stop it: SQLite would
    // go on writing to the unlinked file, and the progress line would never end.
    let watch = DbWatch::new(&location)?;
    let mut lost_db = std::pin::pin!(lost(db.clone(), watch.clone()));
    let mut progress = Progress::new();
    let mut rounds = 0u32;
    let stop = loop {
        let counts = match tokio::time::timeout(CHECK_TIMEOUT, db.counts(&id)).await {
            Ok(Ok(counts)) => counts,
            // Say why the database failed when the watch can tell.
            Ok(Err(e)) => {
                break Stop::Lost(watch.check(&db).await.err().map_or(e.into(), Into::into));
            }
            Err(_) => {
                break Stop::Lost(anyhow!(
                    "the queue database at {location} did not answer within {} s",
                    CHECK_TIMEOUT.as_secs()
                ));
            }
        };
        progress.show(&counts);
        if counts.total() > 0 && counts.finished() == counts.total() {
            // An adaptive sweep goes on while some cell's interval is still too wide.
            let round = sweep::next_round(&db, &id, &spec).await?;
            if round.keys.is_empty() {
                break Stop::Finished;
            }
            rounds += 1;
            progress.note(&format!(
                "round {}: {} more trials for {} of {} cells still wider than {}",
                rounds + 1,
                round.keys.len(),
                round.cells,
                spec.tasks.len() * spec.models.len() * spec.variants.len().max(1),
                spec.adaptive.map_or(0.0, |d| d.target_ci_width)
            ));
            continue;
        }
        if workers.is_finished() {
            break Stop::Finished;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = tokio::signal::ctrl_c() => break Stop::Interrupted,
            e = &mut lost_db => break Stop::Lost(e),
        }
    };
    progress.finish();
    shutdown.cancel();
    match stop {
        Stop::Finished => {}
        Stop::Interrupted => {
            eprintln!(
                "interrupted. Finished trials are kept; resume with the same command plus --sweep {id}"
            );
            return Ok(ExitCode::from(130));
        }
        Stop::Lost(e) => {
            return Err(e.context(format!(
                "sweep {id} stopped: its results cannot be recorded (no report)"
            )));
        }
    }
    match tokio::time::timeout(Duration::from_secs(10), workers).await {
        Ok(Ok(Err(e))) => eprintln!("anvil-evals: worker: {e}"),
        Ok(Err(e)) => eprintln!("anvil-evals: worker: {e}"),
        _ => {}
    }
    // Never a report from a database that went away while the workers stopped.
    watch.check(&db).await.map_err(|e| {
        anyhow::Error::from(e).context(format!(
            "sweep {id} stopped: its results cannot be recorded (no report)"
        ))
    })?;
    let counts = db.counts(&id).await?;
    let records = db.records(&id).await?;
    let trials = anvil_report::Trials::read(records.join("\n").as_bytes(), &id)
        .map_err(|e| anyhow!("reading the results of {id}: {e}"))?;
    let mut report =
        anvil_report::report(&trials, &settings.k, baseline.as_ref().map(|b| &b.trials));
    report.account_unrecorded(unrecorded(&counts));
    if let Some(b) = &baseline {
        eprintln!("compared against {}", b.label);
    }
    out_raw!("{}", anvil_report::render::table(&report));
    let incomplete = counts.get(TrialState::InfraError)
        + counts.get(TrialState::Cancelled)
        + (counts.total() - counts.finished());
    if incomplete > 0 {
        eprintln!(
            "{incomplete} of {} trials could not be completed (see `anvil-evals status --sweep {id}`)",
            counts.total()
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Clone, clap::Args)]
pub struct WorkerCmdArgs {
    /// The queue: a SQLite file (default: anvil.db in the data dir) or a postgres:// URL.
    #[arg(long)]
    pub queue: Option<String>,
    #[command(flatten)]
    pub worker: WorkerArgs,
}

pub async fn worker(args: WorkerCmdArgs) -> Result<ExitCode> {
    let trial_options = args
        .worker
        .trial_options(&QueueLocation::from_option(args.queue.as_deref())?);
    let worker_options = args.worker.worker_options()?;
    preflight(&trial_options)?;
    let (db, location) = open(
        args.queue.as_deref(),
        args.worker.concurrency.unwrap_or(1) + 4,
    )
    .await?;
    eprintln!(
        "worker: {} trial(s) at once from {location}; Ctrl-C to stop",
        worker_options.concurrency
    );
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
        }
        stop.cancel();
    });
    let handler = Arc::new(AgentTrials::new(db.clone(), trial_options));
    // One worker serves both kinds of job: eval trials and `anvil auto` sessions.
    let auto = Arc::new(anvil_runner::auto::orchestrator::Orchestrator::new(
        db.clone(),
        anvil_runner::auto::cli::auto_options(&location),
    ));
    let handlers = worker::Handlers {
        trials: Some(handler),
        auto: Some(auto),
    };
    let watch = DbWatch::new(&location)?;
    tokio::select! {
        result = worker::run_with(db.clone(), handlers, worker_options, shutdown.clone()) => {
            result?;
            Ok(ExitCode::SUCCESS)
        }
        e = lost(db, watch) => {
            shutdown.cancel();
            Err(e.context("worker stopped: its results cannot be recorded"))
        }
    }
}

/// Why a running sweep's progress loop ended.
enum Stop {
    /// Every trial finished, or the workers stopped.
    Finished,
    Interrupted,
    /// The queue database was lost.
    Lost(anyhow::Error),
}

/// `anvil-evals status`: read everything, then print it (see [`crate::status`]).
pub async fn status(queue: Option<&str>, sweep: Option<&str>) -> Result<ExitCode> {
    let (db, location) = open_existing(queue, 2).await?;
    let now = now_ms();
    let snapshot = crate::status::read(&db, &location, sweep, now).await?;
    out_raw!("{}", crate::status::render(&snapshot, now));
    Ok(ExitCode::SUCCESS)
}

pub async fn export(
    queue: Option<&str>,
    sweep: &str,
    output: Option<&Path>,
    with_sessions: Option<&Path>,
) -> Result<ExitCode> {
    let (records, _) = sweep_records(queue, sweep).await?;
    if let Some(dir) = with_sessions {
        // The transcripts are copied only from where the sweep keeps them: its recorded
        // artifact directory (a sweep from before those were recorded: this machine's rule).
        let (db, _) = open_existing(queue, 2).await?;
        let recorded = match db.sweep(sweep).await? {
            Some(row) => SweepSpec::from_row(&row)?.artifacts,
            None => None,
        };
        let artifacts = match recorded {
            Some(dir) => dir,
            None => transcripts::artifacts(
                &transcripts::root(None)
                    .ok_or_else(|| anyhow!("no data directory to find the transcripts in"))?,
                sweep,
            ),
        };
        let done = crate::bundle::bundle(sweep, &artifacts, &records, dir, output)?;
        for missing in &done.missing {
            eprintln!("anvil-evals: transcript not on this machine: {missing}");
        }
        for refused in &done.refused {
            eprintln!("anvil-evals: transcript not copied: {refused}");
        }
        let mut line = format!(
            "wrote {} trial records to {}; {} transcripts copied into {}",
            done.records,
            done.records_path.display(),
            done.copied,
            dir.display()
        );
        if done.already_there > 0 {
            line.push_str(&format!(", {} already there", done.already_there));
        }
        if !done.missing.is_empty() {
            line.push_str(&format!(
                "; {} not on this machine (their records keep the original path)",
                done.missing.len()
            ));
        }
        if !done.refused.is_empty() {
            line.push_str(&format!(
                "; {} refused (their records keep the original path)",
                done.refused.len()
            ));
        }
        eprintln!("{line}");
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = records.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    match output {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "wrote {} trial records to {}",
                records.len(),
                path.display()
            );
        }
        None => std::io::stdout().write_all(text.as_bytes())?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The JSONL trial records of a finished (or partly finished) sweep, and what the queue knows
/// of its trials that left none.
pub async fn sweep_records(queue: Option<&str>, sweep: &str) -> Result<(Vec<String>, Unrecorded)> {
    let (db, location) = open_existing(queue, 2).await?;
    if db.sweep(sweep).await?.is_none() {
        bail!("no sweep '{sweep}' in {location} (run `anvil-evals status` to list them)");
    }
    let counts = db.counts(sweep).await?;
    Ok((db.records(sweep).await?, unrecorded(&counts)))
}

/// The trials that left no record, for a report that graded none to say why.
fn unrecorded(counts: &Counts) -> Unrecorded {
    Unrecorded {
        cancelled: counts.get(TrialState::Cancelled),
        unfinished: counts.total() - counts.finished(),
    }
}

pub async fn cancel(queue: Option<&str>, sweep: &str) -> Result<ExitCode> {
    let (db, location) = open_existing(queue, 2).await?;
    if db.sweep(sweep).await?.is_none() {
        bail!("no sweep '{sweep}' in {location} (run `anvil-evals status` to list them)");
    }
    let stopped = db.cancel_sweep(sweep).await?;
    eprintln!(
        "sweep {sweep} cancelled: {stopped} unfinished trials stopped (running ones end within a few seconds)"
    );
    Ok(ExitCode::SUCCESS)
}

/// One progress line of a running sweep, with its ETA when there is one ([`Progress::eta`]).
fn progress_line(counts: &Counts, eta: Option<Duration>) -> String {
    let finished = counts.finished();
    let total = counts.total();
    let running = counts.get(TrialState::Running);
    let retrying = counts.get(TrialState::Retrying);
    let eta = match eta {
        Some(eta) if finished < total => format!(", ETA {}s", eta.as_millis().div_ceil(1000)),
        _ => String::new(),
    };
    // Infrastructure retries show: waiting for their next attempt, and retried so far.
    let retries = match (retrying, counts.retried) {
        (0, 0) => String::new(),
        (0, r) => format!(" ({r} retried)"),
        (w, r) => format!(", retrying {w} ({r} retried)"),
    };
    format!(
        "[{finished}/{total}] done {} (passed {}), running {running}, failed {}, infra {}{retries}{eta}",
        counts.get(TrialState::Done),
        counts.passed,
        counts.get(TrialState::Done) - counts.passed.min(counts.get(TrialState::Done)),
        counts.get(TrialState::InfraError),
    )
}

/// Progress of a running sweep: one updating line on a terminal, plain lines otherwise.
struct Progress {
    tty: bool,
    /// When this process first saw the sweep, and how many of its trials had finished then (a
    /// resumed sweep's earlier trials say nothing about this run's pace).
    first: Option<(Instant, u64)>,
    /// When the count of finished trials last went up, and to what.
    last_finish: Option<(Instant, u64)>,
    /// What the last line showed: (finished, running, infra errors, retrying, retried).
    last: Option<(u64, u64, u64, u64, u64)>,
    last_print: Instant,
}

impl Progress {
    fn new() -> Self {
        Self {
            tty: std::io::stderr().is_terminal(),
            first: None,
            last_finish: None,
            last: None,
            last_print: Instant::now(),
        }
    }

    /// The ETA from the trials finished while this process watched: the time from its start to
    /// the last finish, per trial finished, times the trials left. Made of finished trials
    /// only, so it does not drift while none finishes (as `status`'s ETA).
    fn eta(&mut self, finished: u64, total: u64) -> Option<u64> {
        let now = Instant::now();
        let (start, at_start) = *self.first.get_or_insert((now, finished));
        if self.last_finish.is_none_or(|(_, n)| finished > n) && finished > at_start {
            self.last_finish = Some((now, finished));
        }
        let (at, n) = self.last_finish?;
        let busy = i64::try_from(at.duration_since(start).as_millis()).unwrap_or(i64::MAX);
        crate::status::pace_eta_ms(n - at_start, busy, total.saturating_sub(finished))
    }

    fn show(&mut self, counts: &Counts) {
        let key = (
            counts.finished(),
            counts.get(TrialState::Running),
            counts.get(TrialState::InfraError),
            counts.get(TrialState::Retrying),
            counts.retried,
        );
        let eta = self
            .eta(counts.finished(), counts.total())
            .map(Duration::from_millis);
        let line = progress_line(counts, eta);
        if self.tty {
            eprint!("\r\x1b[K{line}");
            let _ = std::io::stderr().flush();
        } else if self.last != Some(key) || self.last_print.elapsed() > Duration::from_secs(30) {
            eprintln!("{line}");
            self.last_print = Instant::now();
        }
        self.last = Some(key);
    }

    fn finish(&self) {
        if self.tty {
            eprintln!();
        }
    }

    /// A line between progress updates (a new round of an adaptive sweep).
    fn note(&mut self, line: &str) {
        if self.tty {
            eprint!("\r\x1b[K");
        }
        eprintln!("{line}");
        self.last = None;
    }
}

/// A sweep's spend so far (from its finished trials' records), the total projected at the
/// current rate per trial, and its budget when it has one. Unknown costs are said, never 0.
pub(crate) async fn spend_line(db: &Db, id: &str, counts: &Counts) -> Result<String> {
    let mut spent = 0.0;
    let (mut known, mut unknown, mut not_admitted) = (0u64, 0u64, 0u64);
    for line in db.records(id).await? {
        match serde_json::from_str::<anvil_report::TrialRecord>(&line) {
            Ok(r) if r.not_admitted() => not_admitted += 1,
            Ok(r) => match r.cost_usd {
                Some(c) => {
                    spent += c;
                    known += 1;
                }
                None => unknown += 1,
            },
            Err(_) => unknown += 1,
        }
    }
    // Trials the budget did not admit will cost nothing.
    let total: u64 = counts.by_state.values().sum::<u64>() - not_admitted;
    let mut text = format!("spend: ${spent:.4} over {known} trials");
    if unknown > 0 {
        text.push_str(&format!(" (+{unknown} of unknown cost)"));
    }
    if known > 0 {
        let projected = spent / known as f64 * total as f64;
        text.push_str(&format!(
            "; projected ${projected:.4} for all {total} trials at the current rate"
        ));
    }
    if let Some(budget) = db.sweep_spend(id).await? {
        text.push_str(&format!(
            "; budget ${}: ${:.4} settled, ${:.4} reserved by running trials",
            budget.max_usd, budget.spent_usd, budget.reserved_usd
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Run {
        #[command(flatten)]
        args: RunArgs,
    }

    fn settings(args: &[&str]) -> Settings {
        let mut run = Run::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{e}"));
        Settings::of(&mut run.args).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// `run`'s report shows the k values `report` would: 1, 3 and 5 up to the trials per task.
    #[test]
    fn run_and_report_default_to_the_same_k() {
        let base = ["--tasks", "t/*", "--models", "m"];
        for (trials, expected) in [
            (None, vec![1, 3]),
            (Some("1"), vec![1]),
            (Some("2"), vec![1]),
            (Some("5"), vec![1, 3, 5]),
            (Some("8"), vec![1, 3, 5]),
        ] {
            let mut args = base.to_vec();
            if let Some(t) = trials {
                args.extend(["--trials", t]);
            }
            let s = settings(&args);
            assert_eq!(s.k, expected, "--trials {trials:?}");
            assert_eq!(s.k, anvil_report::metric::default_ks(s.trials));
        }
        // Asked for, k is kept.
        let mut args = base.to_vec();
        args.extend(["--trials", "2", "-k", "1,4"]);
        assert_eq!(settings(&args).k, [1, 4]);
    }

    fn counts(states: &[(TrialState, u64)], passed: u64, retried: u64) -> Counts {
        Counts {
            by_state: states.iter().copied().collect(),
            passed,
            retried,
        }
    }

    #[test]
    fn the_progress_line_shows_trials_waiting_for_a_retry_and_those_retried() {
        let none = counts(&[(TrialState::Done, 2), (TrialState::Queued, 2)], 1, 0);
        let line = progress_line(&none, Some(Duration::from_secs(10)));
        assert_eq!(
            line,
            "[2/4] done 2 (passed 1), running 0, failed 1, infra 0, ETA 10s"
        );
        let waiting = counts(
            &[
                (TrialState::Done, 2),
                (TrialState::Retrying, 1),
                (TrialState::Queued, 1),
            ],
            2,
            1,
        );
        assert!(
            progress_line(&waiting, Some(Duration::from_secs(10)))
                .contains("infra 0, retrying 1 (1 retried), ETA"),
            "{}",
            progress_line(&waiting, Some(Duration::from_secs(10)))
        );
        let after = counts(&[(TrialState::Done, 4)], 3, 2);
        assert_eq!(
            progress_line(&after, None),
            "[4/4] done 4 (passed 3), running 0, failed 1, infra 0 (2 retried)"
        );
    }
}
