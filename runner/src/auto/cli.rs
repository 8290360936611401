//! `anvil auto init|run|status|report|export|cancel|resume` (the command line is in
//! [`crate::cli::args::AutoCommand`]). Exit codes: a run's terminal state's
//! ([`Terminal::exit_code`]); 6 when no run could start (configuration, queue, repository);
//! 64 for usage; 130 when this process was interrupted (the run resumes).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anvil_grader::GradeOptions;
use anvil_llm::retry::Backoff;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::auto::contract::spec_digest;
use crate::auto::git::Repo;
use crate::auto::ids::RunId;
use crate::auto::job::{self, AutoSessionJob};
use crate::auto::orchestrator::{AutoOptions, Orchestrator, describe_session};
use crate::auto::run_state::Terminal;
use crate::auto::store::{RUNNING, RunRow, SessionRow};
use crate::cli::args::{AutoCommand, AutoSettings};
use crate::jobs::queue::{Db, QueueLocation, now_ms};
use crate::jobs::worker::{self, Handlers, WorkerOptions};

/// Why an `anvil auto` command could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum AutoCliError {
    #[error("{0}")]
    Message(String),
    #[error(transparent)]
    Queue(#[from] crate::jobs::queue::QueueError),
    #[error(transparent)]
    Store(#[from] crate::auto::store::StoreError),
    #[error(transparent)]
    Git(#[from] crate::auto::git::GitError),
    #[error(transparent)]
    RunId(#[from] crate::auto::ids::RunIdError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
}

macro_rules! msg {
    ($($arg:tt)*) => {
        AutoCliError::Message(format!($($arg)*))
    };
}

/// No run started: configuration, queue or repository.
const SETUP_FAILED: i32 = 6;
const INTERRUPTED: i32 = 130;

/// Runs `anvil auto …`; returns the exit code.
pub fn main(command: &AutoCommand) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("anvil auto: cannot start the runtime: {e}");
            return SETUP_FAILED;
        }
    };
    match rt.block_on(dispatch(command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("anvil auto: {e}");
            SETUP_FAILED
        }
    }
}

async fn dispatch(command: &AutoCommand) -> Result<i32, AutoCliError> {
    match command {
        AutoCommand::Run {
            spec,
            queue,
            settings,
            detach,
        } => {
            let location = QueueLocation::from_option(queue.queue.as_deref())?;
            let db = Db::open(&location, 8).await?;
            let run = start_run(&db, spec, settings, Purpose::Run).await?;
            println!("{}", run.id);
            if *detach {
                return Ok(0);
            }
            drive(&db, &location, &run.id, Until::End).await
        }
        AutoCommand::Init {
            spec,
            queue,
            settings,
        } => {
            let location = QueueLocation::from_option(queue.queue.as_deref())?;
            let db = Db::open(&location, 8).await?;
            let run = start_run(&db, spec, settings, Purpose::Init).await?;
            println!("{}", run.id);
            let code = if run.accepted_commit.is_some() {
                0
            } else {
                drive(&db, &location, &run.id, Until::Accepted).await?
            };
            if code == 0 {
                init_summary(&db, &run.id, spec).await?;
            }
            Ok(code)
        }
        AutoCommand::Resume {
            run,
            queue,
            max_sessions,
            max_cost_usd,
            detach,
        } => {
            let location = QueueLocation::from_option(queue.queue.as_deref())?;
            let db = Db::open_existing(&location, 8).await?;
            let row = db
                .auto_run(run)
                .await?
                .ok_or_else(|| msg!("auto run {run}: no such run in this queue"))?;
            match row.terminal() {
                Some(Terminal::Complete | Terminal::Cancelled | Terminal::InvalidContract) => {
                    eprintln!(
                        "anvil auto: run {run} ended {} and cannot be resumed",
                        row.state
                    );
                    return Ok(row.terminal().map(Terminal::exit_code).unwrap_or(0));
                }
                Some(_) | None => {
                    db.auto_reopen_run(run, max_sessions.map(i64::from), *max_cost_usd)
                        .await?;
                }
            }
            db.auto_hold_workers(run, false).await?;
            enqueue_next(&db, run).await?;
            println!("{run}");
            if *detach {
                return Ok(0);
            }
            drive(&db, &location, run, Until::End).await
        }
        AutoCommand::Status { run, queue } => {
            let db =
                Db::open_existing(&QueueLocation::from_option(queue.queue.as_deref())?, 2).await?;
            status(&db, run.as_deref()).await
        }
        AutoCommand::Report { run, queue, json } => {
            let db =
                Db::open_existing(&QueueLocation::from_option(queue.queue.as_deref())?, 2).await?;
            report(&db, run, *json).await
        }
        AutoCommand::Export {
            runs,
            queue,
            sweep,
            output,
        } => {
            let db =
                Db::open_existing(&QueueLocation::from_option(queue.queue.as_deref())?, 2).await?;
            export(&db, runs, sweep, output.as_deref()).await
        }
        AutoCommand::Cancel { run, queue } => {
            let db =
                Db::open_existing(&QueueLocation::from_option(queue.queue.as_deref())?, 2).await?;
            cancel(&db, run).await
        }
    }
}

/// Why a run is started: `anvil auto run` (every session) or `anvil auto init` (the
/// initializer, its workers held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    Run,
    Init,
}

/// Until what `drive` runs sessions here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// The run's end.
    End,
    /// The contract's acceptance (`init`), or the run's end before it.
    Accepted,
}

fn pin(model: Option<&str>) -> Result<anvil_llm::registry::PinnedModel, AutoCliError> {
    use anvil_llm::config::{Config, ConfigFile, user_config_path};
    let user = match user_config_path() {
        Some(path) => ConfigFile::load(&path)
            .map_err(|e| msg!("{e}"))?
            .map(|f| (path, f)),
        None => None,
    };
    let config = Config::merge(user, None, false).map_err(|e| msg!("{e}"))?;
    let name = model
        .map(str::to_string)
        .or_else(|| config.default_model.clone())
        .ok_or_else(|| msg!("no --model and no default_model in your config"))?;
    let registry = anvil_llm::registry::Registry::new(config);
    registry
        .resolve(&name)
        .and_then(|_| registry.pin(&name))
        .map_err(|e| msg!("--model '{name}': {e}"))
}

/// Creates the run (or finds this spec's unfinished one in this repository) and enqueues
/// what comes next. For `init` the run's workers are held; for `run` they are released (a
/// run made by `init` goes on). An `init` of a run whose contract is accepted enqueues
/// nothing.
async fn start_run(
    db: &Db,
    spec: &Path,
    settings: &AutoSettings,
    purpose: Purpose,
) -> Result<RunRow, AutoCliError> {
    let spec = std::path::absolute(spec)?;
    let bytes =
        std::fs::read(&spec).map_err(|e| msg!("cannot read the spec {}: {e}", spec.display()))?;
    let digest = spec_digest(&bytes);
    let cwd = std::env::current_dir()?;
    let repo = Repo::open(&cwd)?;
    let repository = repo.checkout().display().to_string();
    if let Some(run) = db.auto_unfinished_run(&repository, &digest).await? {
        match purpose {
            Purpose::Run => {
                eprintln!("anvil auto: resuming run {} of this spec", run.id);
                db.auto_hold_workers(&run.id, false).await?;
            }
            Purpose::Init if run.accepted_commit.is_some() => {
                eprintln!(
                    "anvil auto: run {} of this spec has its contract already",
                    run.id
                );
                return Ok(run);
            }
            // A run `anvil auto run` started (its workers not held) is left as it is: holding
            // them now would leave that process waiting for sessions nobody enqueues.
            Purpose::Init if run.hold_workers == 0 => {
                eprintln!(
                    "anvil auto: run {} of this spec was started by `anvil auto run`; waiting for its contract",
                    run.id
                );
            }
            Purpose::Init => {
                eprintln!("anvil auto: resuming the initializer of run {}", run.id);
            }
        }
        enqueue_next(db, &run.id).await?;
        return Ok(run);
    }
    if let Some(max) = settings.max_cost_usd
        && !(max.is_finite() && max >= 0.0)
    {
        return Err(msg!("--max-cost-usd {max}: not an amount of money"));
    }
    let model = pin(settings.model.as_deref())?;
    let head = repo.resolve("HEAD")?;
    let stamp = jiff::Timestamp::now().strftime("%Y%m%d-%H%M%S").to_string();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let id = RunId::new(&format!("run-{stamp}-{}", &suffix[..6]))?;
    let data = anvil_llm::config::data_dir()
        .ok_or_else(|| msg!("this system has no data directory (is HOME set?)"))?
        .join("auto")
        .join(id.as_str());
    std::fs::create_dir_all(&data).map_err(|e| msg!("cannot create {}: {e}", data.display()))?;
    repo.create_run_branch(&id, &head)?;
    let row = RunRow {
        id: id.to_string(),
        created_at_ms: now_ms(),
        repository,
        spec_path: spec.display().to_string(),
        spec_digest: digest,
        contract_digest: None,
        accepted_commit: None,
        start_commit: head.to_string(),
        max_sessions: settings.max_sessions.map(i64::from),
        max_cost_usd: settings.max_cost_usd,
        allow_regressions: i64::from(settings.allow_regressions),
        max_steps: i64::from(settings.max_steps),
        session_timeout_s: i64::try_from(settings.session_timeout_secs).unwrap_or(i64::MAX),
        model: serde_json::to_string(&model)?,
        data_dir: data.display().to_string(),
        state: RUNNING.into(),
        terminal_reason: None,
        cancel_requested: 0,
        hold_workers: i64::from(purpose == Purpose::Init),
    };
    db.auto_create_run(&row).await?;
    enqueue_next(db, &row.id).await?;
    Ok(row)
}

/// Pushes the job the ledger says comes next (a no-op when it is queued already), or ends
/// the run.
async fn enqueue_next(db: &Db, run: &str) -> Result<(), AutoCliError> {
    let row = db
        .auto_run(run)
        .await?
        .ok_or_else(|| msg!("auto run {run} vanished"))?;
    let ledger = db.auto_ledger(run).await?;
    let model: anvil_llm::registry::PinnedModel = serde_json::from_str(&row.model)?;
    let estimate = if model.pricing.is_none() {
        crate::auto::run_state::Estimate::UnknownPricing
    } else {
        crate::auto::run_state::Estimate::Usd(0.0)
    };
    match ledger.next(&row.limits(), estimate) {
        crate::auto::run_state::Next::Start { kind, attempt, .. } => {
            job::enqueue(
                db,
                &AutoSessionJob {
                    run: run.to_string(),
                    session: attempt.session,
                    kind,
                },
            )
            .await?;
        }
        crate::auto::run_state::Next::Stop { terminal, reason } => {
            db.auto_finish_run(run, terminal, &reason).await?;
        }
    }
    Ok(())
}

/// The options of this machine's sessions.
pub fn auto_options(location: &QueueLocation) -> AutoOptions {
    let mut hidden = Vec::new();
    if let QueueLocation::Sqlite(file) = location {
        let file = std::path::absolute(file).unwrap_or_else(|_| file.clone());
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = file.clone().into_os_string();
            name.push(suffix);
            hidden.push(PathBuf::from(name));
        }
    }
    AutoOptions {
        anvil: crate::jobs::trial::TrialOptions::find_anvil(),
        env: anvil_agent::secrets::utf8_vars().collect(),
        grade: GradeOptions {
            unsandboxed: false,
            keep_dir: false,
            grading_root: None,
        },
        hidden,
        cancel_poll: Duration::from_millis(500),
        backoff: Backoff {
            base: Duration::from_secs(2),
            cap: Duration::from_secs(120),
        },
    }
}

/// Runs an in-process worker until `run` ends (or, `Until::Accepted`, until its contract is
/// accepted: 0); its terminal state's exit code.
async fn drive(
    db: &Db,
    location: &QueueLocation,
    run: &str,
    until: Until,
) -> Result<i32, AutoCliError> {
    let shutdown = CancellationToken::new();
    let handler = Arc::new(Orchestrator::new(db.clone(), auto_options(location)));
    let workers = tokio::spawn(worker::run_with(
        db.clone(),
        Handlers {
            trials: None,
            auto: Some(handler),
        },
        WorkerOptions::default(),
        shutdown.clone(),
    ));
    let code = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {
                eprintln!("anvil auto: interrupted; `anvil auto resume {run}` continues");
                break INTERRUPTED;
            }
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        let Some(row) = db.auto_run(run).await? else {
            return Err(msg!("auto run {run} vanished"));
        };
        if until == Until::Accepted && row.accepted_commit.is_some() {
            break 0;
        }
        if let Some(terminal) = row.terminal() {
            eprintln!(
                "anvil auto: run {run} ended {}: {}",
                terminal.name(),
                row.terminal_reason.as_deref().unwrap_or("")
            );
            break terminal.exit_code();
        }
    };
    shutdown.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(10), workers).await;
    Ok(code)
}

/// What `init` accepted, on stderr: the features and how to go on.
async fn init_summary(db: &Db, run: &str, spec: &Path) -> Result<(), AutoCliError> {
    let row = db
        .auto_run(run)
        .await?
        .ok_or_else(|| msg!("auto run {run} vanished"))?;
    let repo = Repo::open(Path::new(&row.repository))?;
    let commit = row
        .accepted_commit
        .as_deref()
        .ok_or_else(|| msg!("auto run {run}: no accepted contract"))?;
    let oid = repo.resolve(commit)?;
    let bytes = repo
        .read_file(&oid, crate::auto::contract::FEATURES_FILE)?
        .ok_or_else(|| msg!("auto run {run}: the accepted commit {commit} has no features.json"))?;
    let contract = crate::auto::contract::Contract::parse(
        Path::new(crate::auto::contract::FEATURES_FILE),
        &bytes,
    )
    .map_err(|e| msg!("{e}"))?;
    eprintln!(
        "anvil auto: run {run}: contract accepted at {} with {} features:",
        &commit[..commit.len().min(10)],
        contract.features.len()
    );
    for f in &contract.features {
        eprintln!("  {}  {}", f.id, f.description);
    }
    eprintln!(
        "read it with `git show auto/{run}:features.json`; `anvil auto run {}` starts the worker sessions",
        spec.display()
    );
    Ok(())
}

fn session_line(s: &SessionRow) -> String {
    let commit = s
        .merged
        .as_deref()
        .or(s.candidate.as_deref())
        .map(|c| c.chars().take(10).collect::<String>())
        .unwrap_or_else(|| "-".into());
    let cost = s
        .cost_usd
        .map(|c| format!("${c:.4}"))
        .unwrap_or_else(|| "—".into());
    let delta = s.verified_delta.as_deref().unwrap_or("[]");
    format!(
        "  s{}a{}  {:<11} {:<11} {:>9}  {:<14} {}",
        s.session, s.attempt, s.kind, s.state, cost, delta, commit
    )
}

async fn status(db: &Db, run: Option<&str>) -> Result<i32, AutoCliError> {
    let runs = match run {
        Some(id) => vec![
            db.auto_run(id)
                .await?
                .ok_or_else(|| msg!("auto run {id}: no such run in this queue"))?,
        ],
        None => db.auto_runs().await?,
    };
    if runs.is_empty() {
        println!("no auto runs in this queue");
    }
    for r in runs {
        let held = if r.hold_workers != 0 && r.terminal().is_none() {
            " (initialized: `anvil auto run` starts the workers)"
        } else {
            ""
        };
        println!(
            "{}  {}{held}  {}  spec {}",
            r.id, r.state, r.repository, r.spec_path
        );
        if run.is_some() {
            println!("  session kind        state            cost  verified       commit");
            for s in db.auto_sessions(&r.id).await? {
                println!("{}", session_line(&s));
            }
        }
    }
    Ok(0)
}

/// The report of a run, as JSON.
pub async fn report_json(db: &Db, run: &str) -> Result<serde_json::Value, AutoCliError> {
    let row = db
        .auto_run(run)
        .await?
        .ok_or_else(|| msg!("auto run {run}: no such run in this queue"))?;
    let sessions = db.auto_sessions(run).await?;
    let events = db.auto_events(run).await?;
    let ledger = db.auto_ledger(run).await?;
    let payloads = |kind: &str| -> Vec<serde_json::Value> {
        events
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| {
                let mut v: serde_json::Value = serde_json::from_str(&e.payload).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("session".into(), json!(e.session));
                    o.insert("attempt".into(), json!(e.attempt));
                }
                v
            })
            .collect()
    };
    let features = match &ledger.contract {
        crate::auto::run_state::ContractState::Accepted { features } => Some(*features),
        _ => None,
    };
    let spent: f64 = sessions.iter().filter_map(|s| s.cost_usd).sum();
    let worker_sessions = sessions
        .iter()
        .filter(|s| s.kind == "worker" && !matches!(s.state.as_str(), "dead" | "infra_failed"))
        .count();
    let per_usd = (spent > 0.0).then(|| ledger.verified as f64 / spent);
    // Worker sessions that ended without a newly verified feature (not merged, unchanged, or
    // merged with nothing verified), whichever rule of the stall breaker they fed.
    let stalled_sessions = sessions
        .iter()
        .filter(|s| {
            s.kind == "worker" && matches!(s.state.as_str(), "merged" | "not_merged" | "unchanged")
        })
        .filter(|s| {
            s.verified_delta
                .as_deref()
                .and_then(|d| serde_json::from_str::<Vec<String>>(d).ok())
                .is_none_or(|d| d.is_empty())
        })
        .count();
    Ok(json!({
        "run": row.id,
        "state": row.state,
        "terminal_reason": row.terminal_reason,
        "repository": row.repository,
        "spec": row.spec_path,
        "features": features,
        "features_verified": ledger.verified,
        "worker_sessions": worker_sessions,
        "sessions_to_completion": (row.state == "complete").then_some(worker_sessions),
        "cost_usd": spent,
        "cost_unknown": ledger.cost_unknown,
        "verified_per_usd": per_usd,
        "stalled_sessions": stalled_sessions,
        "false_claims": payloads("false_claim"),
        "rejected_edits": payloads("validator.rejected"),
        "protected_edits": payloads("validator.protected_edit"),
        "protected_shadows": payloads("validator.protected_shadow"),
        "tamper": payloads("validator.tamper"),
        "regressions": payloads("regression"),
        "sessions": sessions.iter().map(|s| json!({
            "session": s.session,
            "attempt": s.attempt,
            "kind": s.kind,
            "state": s.state,
            "flags": s.flags.split(',').filter(|f| !f.is_empty()).collect::<Vec<_>>(),
            "outcome": s.outcome,
            "cost_usd": s.cost_usd,
            "verified": s.verified_delta.as_deref()
                .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok()),
            "base": s.base,
            "candidate": s.candidate,
            "merged": s.merged,
            "transcript": s.transcript,
            "error": s.error,
            "summary": describe_session(s),
        })).collect::<Vec<_>>(),
    }))
}

async fn report(db: &Db, run: &str, as_json: bool) -> Result<i32, AutoCliError> {
    let r = report_json(db, run).await?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(0);
    }
    println!(
        "run {}: {} ({})",
        run,
        r["state"].as_str().unwrap_or(""),
        r["terminal_reason"].as_str().unwrap_or("")
    );
    println!(
        "features verified: {} of {}",
        r["features_verified"], r["features"]
    );
    println!("worker sessions: {}", r["worker_sessions"]);
    println!("cost: ${:.4}", r["cost_usd"].as_f64().unwrap_or(0.0));
    for key in [
        "false_claims",
        "rejected_edits",
        "protected_edits",
        "protected_shadows",
        "tamper",
        "regressions",
    ] {
        println!("{key}: {}", r[key].as_array().map(Vec::len).unwrap_or(0));
    }
    println!("sessions:");
    for s in r["sessions"].as_array().into_iter().flatten() {
        println!(
            "  {}  transcript: {}",
            s["summary"].as_str().unwrap_or(""),
            s["transcript"].as_str().unwrap_or("—")
        );
    }
    Ok(0)
}

/// `anvil auto export`: the finished runs (all, or `wanted`) as trial records.
async fn export(
    db: &Db,
    wanted: &[String],
    sweep: &str,
    output: Option<&Path>,
) -> Result<i32, AutoCliError> {
    let rows = if wanted.is_empty() {
        db.auto_runs().await?
    } else {
        let mut rows = Vec::new();
        for id in wanted {
            let row = db
                .auto_run(id)
                .await?
                .ok_or_else(|| msg!("auto run {id}: no such run in this queue"))?;
            if row.terminal().is_none() {
                return Err(msg!(
                    "auto run {id} is still running: it has no result yet (`anvil auto cancel {id}` ends it)"
                ));
            }
            rows.push(row);
        }
        rows
    };
    let mut seen = std::collections::BTreeSet::new();
    let rows: Vec<RunRow> = rows
        .into_iter()
        .filter(|r| seen.insert(r.id.clone()))
        .collect();
    let running = rows.iter().filter(|r| r.terminal().is_none()).count();
    let mut runs = Vec::new();
    for run in rows {
        let sessions = db.auto_sessions(&run.id).await?;
        let events = db.auto_events(&run.id).await?;
        runs.push(crate::auto::record::RunHistory {
            run,
            sessions,
            events,
        });
    }
    let records = crate::auto::record::records(&runs, sweep, crate::jobs::sweep::ANVIL_GIT_SHA);
    let mut text = String::new();
    for r in &records {
        text.push_str(&serde_json::to_string(r)?);
        text.push('\n');
    }
    match output {
        Some(path) => {
            std::fs::write(path, &text).map_err(|e| msg!("cannot write {}: {e}", path.display()))?
        }
        None => print!("{text}"),
    }
    eprintln!(
        "anvil auto: {} finished runs written{}",
        records.len(),
        if running > 0 {
            format!(" ({running} still running left out)")
        } else {
            String::new()
        }
    );
    Ok(0)
}

async fn cancel(db: &Db, run: &str) -> Result<i32, AutoCliError> {
    if !db.auto_request_cancel(run).await? {
        return Err(msg!("auto run {run}: no such run in this queue"));
    }
    let running = db
        .auto_sessions(run)
        .await?
        .iter()
        .any(|s| s.ended_at_ms.is_none());
    if !running {
        // No session to stop: the run ends here.
        let ledger = db.auto_ledger(run).await?;
        db.auto_record(
            run,
            ledger.next.session,
            ledger.next.attempt,
            &crate::auto::store::NewEvent::ledger(&crate::auto::run_state::Event::Cancelled),
        )
        .await?;
        db.auto_finish_run(run, Terminal::Cancelled, "the run was cancelled")
            .await?;
    }
    println!("cancelled {run}");
    Ok(0)
}
