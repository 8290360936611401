//! The queue and the worker against real databases: a SQLite file and a fresh database on the
//! Postgres server (`ANVIL_TEST_POSTGRES`, default the local one). Trial handlers here are
//! doubles; the real trial (agent + grader) is exercised by `anvil-evals`'s tests.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anvil_report::TrialRecord;
use anvil_report::record::{Accounting, CheckOutcome, Digests, SCHEMA_VERSION, Tokens};
use anvil_runner::jobs::queue::{
    self, Db, QueueLocation, SweepRow, SweepStart, TrialKey, TrialState,
};
use anvil_runner::jobs::worker::{self, TrialEnd, TrialHandler, WorkerOptions};
use anvil_test_support::databases::{self, Database};
use tokio_util::sync::CancellationToken;

/// A trial record: graded `pass`, or an infrastructure failure when `infra` is given.
fn record(key: &TrialKey, attempt: u32, pass: bool, infra: Option<&str>) -> TrialRecord {
    TrialRecord {
        schema_version: SCHEMA_VERSION,
        sweep: key.sweep.clone(),
        task: key.task.clone(),
        model: key.model.clone(),
        variant: key.variant.clone(),
        adaptive: None,
        attempts: Vec::new(),
        trial: key.trial,
        attempt,
        pass: infra.is_none().then_some(pass),
        outcome: infra.is_none().then(|| "done".into()),
        infra_error: infra.map(str::to_string),
        steps: 1,
        tokens: Tokens::default(),
        cost_usd: None,
        accounting: Accounting::Unknown,
        duration_ms: 1,
        agent_ms: None,
        check_ms: None,
        session_path: None,
        workspace_path: None,
        digests: Digests::default(),
        anvil_git_sha: "test".into(),
        check_outcome: None,
        tamper: Vec::new(),
        grader_sandbox: None,
        trace_id: None,
    }
}

#[derive(Default)]
struct Recorder {
    /// (task, trial) → attempts seen.
    attempts: Mutex<HashMap<(String, u32), Vec<u32>>>,
    runs: AtomicU32,
}

/// How the double behaves, by task name.
struct Double {
    seen: Arc<Recorder>,
}

#[async_trait::async_trait]
impl TrialHandler for Double {
    async fn run(
        &self,
        job: &queue::TrialJob,
        attempt: u32,
        cancel: CancellationToken,
    ) -> TrialEnd {
        self.seen.runs.fetch_add(1, Ordering::SeqCst);
        self.seen
            .attempts
            .lock()
            .unwrap()
            .entry((job.task.clone(), job.trial))
            .or_default()
            .push(attempt);
        let key = job.key();
        let record = record(&key, attempt, true, None);
        match job.task.as_str() {
            "flaky" if attempt < 2 => TrialEnd::Infra {
                reason: "provider unreachable".into(),
                record: self.infra_record(job, attempt, "provider unreachable"),
            },
            "broken" => TrialEnd::Infra {
                reason: "sandbox could not start".into(),
                record: self.infra_record(job, attempt, "sandbox could not start"),
            },
            "hangs" => {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(3600)) => TrialEnd::Graded(record),
                    _ = cancel.cancelled() => TrialEnd::Cancelled,
                }
            }
            _ => TrialEnd::Graded(record),
        }
    }

    fn time_budget(&self, _: &queue::TrialJob) -> Duration {
        Duration::from_secs(2)
    }

    fn infra_record(&self, job: &queue::TrialJob, attempt: u32, reason: &str) -> TrialRecord {
        record(&job.key(), attempt, false, Some(reason))
    }
}

fn fast_options() -> WorkerOptions {
    WorkerOptions {
        concurrency: 4,
        heartbeat: Duration::from_secs(1),
        missed_heartbeats: 2,
        poll_interval: Duration::from_millis(50),
        trial_timeout: None,
        backoff: Duration::from_millis(50),
        backoff_max: Duration::from_millis(200),
        cancel_poll: Duration::from_millis(100),
    }
}

async fn sweep_with(
    db: &Db,
    id: &str,
    tasks: &[&str],
    trials: u32,
    max_attempts: u32,
) -> Vec<TrialKey> {
    let row = SweepRow {
        id: id.into(),
        created_at_ms: queue::now_ms(),
        spec: "{}".into(),
        fingerprint: "f1".into(),
        anvil_git_sha: "test".into(),
        cancelled: false,
    };
    assert_eq!(db.record_sweep(&row).await.unwrap(), SweepStart::Created);
    let keys: Vec<TrialKey> = tasks
        .iter()
        .flat_map(|t| {
            (0..trials).map(move |trial| TrialKey {
                sweep: id.into(),
                task: t.to_string(),
                model: "m".into(),
                variant: None,
                trial,
            })
        })
        .collect();
    db.add_trials(&keys).await.unwrap();
    queue::enqueue(db, &keys, max_attempts).await.unwrap();
    keys
}

/// Runs a worker until every trial of `sweep` has finished (or `limit` passes).
async fn drain(db: &Db, sweep: &str, seen: Arc<Recorder>, limit: Duration) {
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(worker::run(
        db.clone(),
        Arc::new(Double { seen }),
        fast_options(),
        shutdown.clone(),
    ));
    wait_until_finished(db, sweep, limit).await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), handle)
        .await
        .expect("worker stops when asked")
        .unwrap()
        .unwrap();
}

/// Waits until every trial of `sweep` has finished; fails past `limit`.
async fn wait_until_finished(db: &Db, sweep: &str, limit: Duration) {
    let started = Instant::now();
    loop {
        let counts = db.counts(sweep).await.unwrap();
        if counts.finished() == counts.total() {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "sweep did not finish: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn with_each_db<F, Fut>(name: &str, f: F)
where
    F: Fn(Db) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let f = &f;
    databases::on_both_databases(name, move |database| async move {
        let location = match database {
            Database::Sqlite(path) => QueueLocation::Sqlite(path),
            Database::Postgres(url) => QueueLocation::Postgres(url),
        };
        let db = Db::open(&location, 8).await.unwrap();
        f(db.clone()).await;
        db.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_trial_runs_once_and_is_recorded_once() {
    with_each_db("once", |db| async move {
        let keys = sweep_with(&db, "s1", &["a", "b", "c"], 5, 3).await;
        // A duplicate push (a resumed `run`) is dropped by the idempotency key.
        queue::enqueue(&db, &keys, 3).await.unwrap();
        let seen = Arc::new(Recorder::default());
        drain(&db, "s1", seen.clone(), Duration::from_secs(60)).await;
        let counts = db.counts("s1").await.unwrap();
        assert_eq!(counts.get(TrialState::Done), 15, "{counts:?}");
        assert_eq!(seen.runs.load(Ordering::SeqCst), 15);
        for attempts in seen.attempts.lock().unwrap().values() {
            assert_eq!(attempts, &vec![1], "first delivery is attempt 1");
        }
        assert_eq!(db.records("s1").await.unwrap().len(), 15);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infrastructure_failures_are_retried_then_recorded() {
    with_each_db("retry", |db| async move {
        sweep_with(&db, "s2", &["flaky", "broken"], 2, 3).await;
        let seen = Arc::new(Recorder::default());
        drain(&db, "s2", seen.clone(), Duration::from_secs(60)).await;
        let counts = db.counts("s2").await.unwrap();
        assert_eq!(counts.get(TrialState::Done), 2, "{counts:?}");
        assert_eq!(counts.get(TrialState::InfraError), 2, "{counts:?}");
        let attempts = seen.attempts.lock().unwrap().clone();
        assert_eq!(attempts[&("flaky".to_string(), 0)], vec![1, 2]);
        assert_eq!(
            attempts[&("broken".to_string(), 1)],
            vec![1, 2, 3],
            "stops at the limit"
        );
        let records = db.records("s2").await.unwrap();
        assert!(
            records.iter().any(|r| r.contains(
                r#""attempt":3,"pass":null,"outcome":null,"infra_error":"sandbox could not start""#
            )),
            "{records:?}"
        );
        // Each final record keeps the errors of the attempts retried before it.
        let parsed: Vec<TrialRecord> = records
            .iter()
            .map(|r| serde_json::from_str(r).unwrap())
            .collect();
        let of = |task: &str, trial: u32| {
            parsed
                .iter()
                .find(|r| r.task == task && r.trial == trial)
                .unwrap()
                .attempts
                .iter()
                .map(|a| (a.attempt, a.error.as_str()))
                .collect::<Vec<_>>()
        };
        assert_eq!(of("flaky", 0), [(1, "provider unreachable")]);
        assert_eq!(
            of("broken", 1),
            [
                (1, "sandbox could not start"),
                (2, "sandbox could not start")
            ]
        );
        let first_try = |r: &&TrialRecord| r.attempt == 1;
        assert!(
            parsed
                .iter()
                .filter(first_try)
                .all(|r| r.attempts.is_empty())
        );
    })
    .await;
}

/// One run of a trial: task, attempt, when it started and ended.
type Run = (String, u32, Instant, Instant);

/// Fails task "flaky" on its first attempt; every other trial passes at once. Records each run.
struct Timed {
    runs: Arc<Mutex<Vec<Run>>>,
}

#[async_trait::async_trait]
impl TrialHandler for Timed {
    async fn run(&self, job: &queue::TrialJob, attempt: u32, _: CancellationToken) -> TrialEnd {
        let started = Instant::now();
        let end = if job.task == "flaky" && attempt == 1 {
            TrialEnd::Infra {
                reason: "provider unreachable".into(),
                record: self.infra_record(job, attempt, "provider unreachable"),
            }
        } else {
            TrialEnd::Graded(record(&job.key(), attempt, true, None))
        };
        let run = (job.task.clone(), attempt, started, Instant::now());
        self.runs.lock().unwrap().push(run);
        end
    }

    fn time_budget(&self, _: &queue::TrialJob) -> Duration {
        Duration::from_secs(5)
    }

    fn infra_record(&self, job: &queue::TrialJob, attempt: u32, reason: &str) -> TrialRecord {
        record(&job.key(), attempt, false, Some(reason))
    }
}

/// Regression: the backoff before a retry was slept inside the job handler, holding the worker
/// slot (up to 300 s) while other trials waited. It is now the job's `run_at` on the queue: with
/// one slot, a trial queued during the backoff runs at once, and the retry runs after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backoff_waits_on_the_queue_and_frees_the_worker_slot() {
    with_each_db("backoff", |db| async move {
        let backoff = Duration::from_secs(2);
        sweep_with(&db, "s8", &["flaky"], 1, 3).await;
        let runs = Arc::new(Mutex::new(Vec::<Run>::new()));
        let shutdown = CancellationToken::new();
        let options = WorkerOptions {
            concurrency: 1,
            backoff,
            backoff_max: backoff,
            ..fast_options()
        };
        let handle = tokio::spawn(worker::run(
            db.clone(),
            Arc::new(Timed { runs: runs.clone() }),
            options,
            shutdown.clone(),
        ));
        let deadline = Instant::now() + Duration::from_secs(30);
        while runs.lock().unwrap().is_empty() {
            assert!(Instant::now() < deadline, "the first attempt never ran");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The first attempt has failed: queue another trial while its retry waits.
        let other = TrialKey {
            sweep: "s8".into(),
            task: "other".into(),
            model: "m".into(),
            variant: None,
            trial: 0,
        };
        db.add_trials(std::slice::from_ref(&other)).await.unwrap();
        queue::enqueue(&db, std::slice::from_ref(&other), 3)
            .await
            .unwrap();
        loop {
            let counts = db.counts("s8").await.unwrap();
            if counts.get(TrialState::Done) == 2 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "sweep did not finish: {counts:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), handle)
            .await
            .expect("worker stops when asked")
            .unwrap()
            .unwrap();
        let runs = runs.lock().unwrap().clone();
        let order: Vec<(&str, u32)> = runs.iter().map(|r| (r.0.as_str(), r.1)).collect();
        assert_eq!(
            order,
            [("flaky", 1), ("other", 1), ("flaky", 2)],
            "the other trial ran during the backoff"
        );
        let (failed_at, retried_at) = (runs[0].3, runs[2].2);
        assert!(
            retried_at.duration_since(failed_at) >= backoff,
            "the retry waited its backoff: {:?}",
            retried_at.duration_since(failed_at)
        );
        assert!(
            runs[1].2.duration_since(failed_at) < backoff,
            "the other trial did not wait for the backoff: {:?}",
            runs[1].2.duration_since(failed_at)
        );
    })
    .await;
}

/// Trials whose model sits behind a one-slot provider (`max_concurrency = 1`): each takes
/// 400 ms, the time budget is 600 ms, the worker runs 4 at once.
struct OneSlot {
    slots: Arc<tokio::sync::Semaphore>,
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl TrialHandler for OneSlot {
    async fn run(&self, job: &queue::TrialJob, attempt: u32, _: CancellationToken) -> TrialEnd {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(400)).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        TrialEnd::Graded(record(&job.key(), attempt, true, None))
    }

    fn time_budget(&self, _: &queue::TrialJob) -> Duration {
        Duration::from_millis(600)
    }

    fn infra_record(&self, job: &queue::TrialJob, attempt: u32, reason: &str) -> TrialRecord {
        record(&job.key(), attempt, false, Some(reason))
    }

    async fn provider_slots(&self, _: &queue::TrialJob) -> Option<Arc<tokio::sync::Semaphore>> {
        Some(Arc::clone(&self.slots))
    }
}

/// A provider's `max_concurrency` holds across a worker's trials: they run one at a time, and
/// the time spent waiting for the slot is not counted against a trial's budget (4 × 400 ms of
/// trials, a 600 ms budget each, none timed out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trials_wait_for_their_providers_slot_outside_their_time_budget() {
    with_each_db("slots", |db| async move {
        sweep_with(&db, "s11", &["a", "b"], 2, 1).await;
        let handler = Arc::new(OneSlot {
            slots: Arc::new(tokio::sync::Semaphore::new(1)),
            running: Arc::new(AtomicUsize::new(0)),
            most: Arc::new(AtomicUsize::new(0)),
        });
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(worker::run(
            db.clone(),
            handler.clone(),
            fast_options(),
            shutdown.clone(),
        ));
        wait_until_finished(&db, "s11", Duration::from_secs(30)).await;
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), handle)
            .await
            .expect("worker stops when asked")
            .unwrap()
            .unwrap();
        let counts = db.counts("s11").await.unwrap();
        assert_eq!(counts.get(TrialState::Done), 4, "{counts:?}");
        assert_eq!(
            handler.most.load(Ordering::SeqCst),
            1,
            "one trial at a time"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_trial_is_ended_by_its_time_budget() {
    with_each_db("hang", |db| async move {
        sweep_with(&db, "s3", &["hangs"], 1, 1).await;
        let seen = Arc::new(Recorder::default());
        drain(&db, "s3", seen, Duration::from_secs(30)).await;
        let records = db.records("s3").await.unwrap();
        assert_eq!(
            db.counts("s3").await.unwrap().get(TrialState::InfraError),
            1
        );
        assert!(records[0].contains("time budget"), "{records:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_write_from_an_older_attempt_is_fenced_off() {
    with_each_db("fence", |db| async move {
        let keys = sweep_with(&db, "s4", &["t"], 1, 3).await;
        let key = &keys[0];
        assert!(db.claim(key, 1, "w1").await.unwrap());
        // w1 is presumed dead; attempt 2 takes over and finishes.
        assert!(db.claim(key, 2, "w2").await.unwrap());
        assert!(!db.claim(key, 1, "w1").await.unwrap(), "never backwards");
        let new = record(key, 2, true, None);
        assert!(
            db.finish(key, 2, TrialState::Done, Some(&new), None)
                .await
                .unwrap()
        );
        // w1 wakes up and tries to write its result.
        assert!(
            !db.finish(
                key,
                1,
                TrialState::Done,
                Some(&record(key, 1, false, None)),
                None
            )
            .await
            .unwrap()
        );
        assert!(
            !db.finish(
                key,
                3,
                TrialState::Done,
                Some(&record(key, 3, false, None)),
                None
            )
            .await
            .unwrap(),
            "a finished trial stays finished"
        );
        assert_eq!(
            db.records("s4").await.unwrap(),
            vec![serde_json::to_string(&new).unwrap()]
        );
        assert_eq!(
            db.counts("s4").await.unwrap().passed,
            1,
            "the fenced-off fails are not counted"
        );
        assert_eq!(
            db.trial_state(key).await.unwrap(),
            Some((TrialState::Done, 2))
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_sweep_stops_queued_and_running_trials() {
    with_each_db("cancel", |db| async move {
        sweep_with(&db, "s5", &["hangs"], 6, 1).await;
        let seen = Arc::new(Recorder::default());
        let shutdown = CancellationToken::new();
        let mut options = fast_options();
        options.concurrency = 2;
        options.trial_timeout = Some(Duration::from_secs(600));
        let handle = tokio::spawn(worker::run(
            db.clone(),
            Arc::new(Double { seen: seen.clone() }),
            options,
            shutdown.clone(),
        ));
        let started = Instant::now();
        while db.running(Some("s5")).await.unwrap().len() < 2 {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "trials never started"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let stopped = db.cancel_sweep("s5").await.unwrap();
        assert_eq!(stopped, 6);
        // Queued jobs are skipped and running ones end.
        while seen.runs.load(Ordering::SeqCst) == 2 && db.queue_depth().await.unwrap() > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "queued jobs were never drained"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        while !db.running(Some("s5")).await.unwrap().is_empty() {
            assert!(started.elapsed() < Duration::from_secs(20));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            seen.runs.load(Ordering::SeqCst),
            2,
            "no cancelled trial started"
        );
        assert_eq!(db.counts("s5").await.unwrap().get(TrialState::Cancelled), 6);
        assert!(
            db.cancel_sweep("nope")
                .await
                .unwrap_err()
                .to_string()
                .contains("no such sweep")
        );
        shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), handle).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_are_counted_from_the_verdict_column_not_the_record_text() {
    with_each_db("passcol", |db| async move {
        let keys = sweep_with(&db, "s6", &["t"], 4, 3).await;
        let passed = record(&keys[0], 1, true, None);
        // A fail, whatever its strings say: the column is the verdict, not a search of the text.
        let mut failed = record(&keys[1], 1, false, None);
        failed.session_path = Some(r#"/tmp/ws-"pass":true"#.into());
        // A tampered trial never counts as a pass, whatever its `pass` says.
        let mut tampered = record(&keys[2], 1, true, None);
        tampered.check_outcome = Some(CheckOutcome::Tampered);
        let infra = record(
            &keys[3],
            1,
            false,
            Some(r#"grader said "pass":true then crashed"#),
        );
        for (key, r, state) in [
            (&keys[0], &passed, TrialState::Done),
            (&keys[1], &failed, TrialState::Done),
            (&keys[2], &tampered, TrialState::Done),
            (&keys[3], &infra, TrialState::InfraError),
        ] {
            assert!(db.claim(key, 1, "w").await.unwrap());
            assert!(db.finish(key, 1, state, Some(r), None).await.unwrap());
        }
        let counts = db.counts("s6").await.unwrap();
        assert_eq!(counts.get(TrialState::Done), 3, "{counts:?}");
        assert_eq!(counts.passed, 1, "{counts:?}");
        // The records are stored as written, one JSON line each.
        let records = db.records("s6").await.unwrap();
        assert_eq!(records.len(), 4);
        for r in &records {
            let back: TrialRecord = serde_json::from_str(r).unwrap();
            assert!(
                [&passed, &failed, &tampered, &infra].contains(&&back),
                "{r}"
            );
        }
    })
    .await;
}

/// `cancel` takes a sweep's waiting jobs off the queue: with no worker to acknowledge them,
/// "jobs waiting" agrees with the trial states right away (the other sweep's jobs still wait),
/// and a job of the cancelled sweep put back by a dead worker's orphan recovery is not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_sweep_leaves_no_job_waiting() {
    with_each_db("cancelwait", |db| async move {
        sweep_with(&db, "doomed", &["a", "b"], 3, 3).await;
        sweep_with(&db, "kept", &["a"], 2, 3).await;
        assert_eq!(db.queue_depth().await.unwrap(), 8);
        assert_eq!(db.cancel_sweep("doomed").await.unwrap(), 6);
        let counts = db.counts("doomed").await.unwrap();
        assert_eq!(counts.get(TrialState::Cancelled), 6, "{counts:?}");
        assert_eq!(counts.get(TrialState::Queued), 0, "{counts:?}");
        assert_eq!(db.queue_depth().await.unwrap(), 2, "only kept's jobs wait");
        // Orphan recovery puts a job back to Pending: still not waiting, its sweep is cancelled.
        let table = match &db {
            Db::Sqlite(_) => "Jobs",
            Db::Postgres(_) => "apalis.jobs",
        };
        let sql = format!("UPDATE {table} SET status = 'Pending' WHERE status = 'Killed'");
        let revived = match &db {
            Db::Sqlite(pool) => sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(pool)
                .await
                .unwrap()
                .rows_affected(),
            Db::Postgres(pool) => sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(pool)
                .await
                .unwrap()
                .rows_affected(),
        };
        assert_eq!(revived, 6);
        assert_eq!(db.queue_depth().await.unwrap(), 2);
    })
    .await;
}

/// Workers record their heartbeat and allowance, so a reader can tell a dead one from a live
/// one; finished trials record when they ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_record_their_heartbeat_and_trials_when_they_ran() {
    with_each_db("heartbeat", |db| async move {
        let keys = sweep_with(&db, "paced", &["t"], 3, 3).await;
        let seen = Arc::new(Recorder::default());
        drain(&db, "paced", seen, Duration::from_secs(30)).await;
        let workers = db.workers(0).await.unwrap();
        assert_eq!(workers.len(), 1, "{workers:?}");
        let w = &workers[0];
        // fast_options: a 1 s heartbeat, 2 missed.
        assert_eq!((w.heartbeat_ms, w.missed_heartbeats), (Some(1000), Some(2)));
        assert_eq!(w.dead_after_ms(), 2000);
        assert!(w.stopped);
        let spans = db.finished_spans("paced").await.unwrap();
        assert_eq!(spans.len(), keys.len());
        assert!(spans.iter().all(|(start, end)| start <= end && *start > 0));
    })
    .await;
}

/// A Postgres database that no `run` or `worker` used holds no queue: a reader says so and
/// leaves it empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_never_makes_a_queue_in_an_empty_postgres_database() {
    let url = databases::fresh_postgres("noqueue").await;
    let location = QueueLocation::Postgres(url.clone());
    let err = Db::open_existing(&location, 2)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("is not a queue database: it has no queue tables"),
        "{err}"
    );
    let db = Db::open(&location, 2).await.unwrap();
    Db::open_existing(&location, 2).await.unwrap().close().await;
    db.close().await;
    databases::drop_postgres(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_queue_is_never_created_by_a_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nothing-here/q.db");
    let location = QueueLocation::Sqlite(path.clone());
    let err = Db::open_existing(&location, 2)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("no queue database at {}", path.display())),
        "{err}"
    );
    assert!(!path.parent().unwrap().exists(), "nothing was created");
    // Once made (by `run` or `worker`), readers open it.
    Db::open(&location, 2).await.unwrap().close().await;
    Db::open_existing(&location, 2).await.unwrap().close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trials_finished_before_the_pass_column_get_their_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = QueueLocation::Sqlite(dir.path().join("q.db"));
    let pg_url = databases::fresh_postgres("backfill").await;
    let pg = QueueLocation::Postgres(pg_url.clone());
    for location in [&sqlite, &pg] {
        let db = Db::open(location, 2).await.unwrap();
        let keys = sweep_with(&db, "s7", &["t"], 4, 3).await;
        let mut tampered = record(&keys[2], 1, true, None);
        tampered.tamper = vec![anvil_report::record::TamperFinding {
            path: "conftest.py".into(),
            kind: "conftest".into(),
            detail: "new".into(),
        }];
        let rows = [
            record(&keys[0], 1, true, None),
            record(&keys[1], 1, false, None),
            tampered,
            record(&keys[3], 1, false, Some("lost worker")),
        ];
        for (key, r) in keys.iter().zip(&rows) {
            let state = if r.infra_error.is_some() {
                TrialState::InfraError
            } else {
                TrialState::Done
            };
            assert!(db.finish(key, 1, state, Some(r), None).await.unwrap());
        }
        // Back to the schema before the column: drop it and forget its migration.
        for sql in [
            // (Made later, by the variants migration, which is not undone here.)
            "DROP INDEX IF EXISTS anvil_trials_verdicts",
            "ALTER TABLE anvil_trials DROP COLUMN pass",
            "DELETE FROM _anvil_migrations WHERE version = 20261201000001",
        ] {
            match &db {
                Db::Sqlite(pool) => sqlx::query(sql).execute(pool).await.map(|_| ()),
                Db::Postgres(pool) => sqlx::query(sql).execute(pool).await.map(|_| ()),
            }
            .unwrap();
        }
        db.close().await;
        // Opening it migrates it again, filling the column from the stored records.
        let db = Db::open(location, 2).await.unwrap();
        const SQL: &str = "SELECT trial, pass FROM anvil_trials WHERE sweep = 's7' ORDER BY trial";
        let pass: Vec<(i64, Option<i64>)> = match &db {
            Db::Sqlite(pool) => sqlx::query_as(SQL).fetch_all(pool).await,
            Db::Postgres(pool) => sqlx::query_as(SQL).fetch_all(pool).await,
        }
        .unwrap();
        assert_eq!(
            pass,
            [(0, Some(1)), (1, Some(0)), (2, Some(0)), (3, None)],
            "{location}"
        );
        assert_eq!(db.counts("s7").await.unwrap().passed, 1, "{location}");
        db.close().await;
    }
    databases::drop_postgres(&pg_url).await;
}

/// A sweep's budget held in the queue database: concurrent admissions (as from workers on many
/// machines) never reserve past it, a settled trial frees what it did not spend, an unknown
/// cost keeps the whole share, and a dead attempt's reservation is kept when the trial runs
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_budget_holds_across_concurrent_workers() {
    use anvil_runner::jobs::queue::Admission;
    with_each_db("budget", |db| async move {
        let keys = sweep_with(&db, "s1", &["a", "b", "c", "d"], 5, 3).await;
        assert_eq!(
            db.admit_trial(&keys[0], 0.3).await.unwrap(),
            Admission::Unbudgeted
        );
        db.set_sweep_budget("s1", 1.0).await.unwrap();
        // 20 trials race for 0.3 each out of $1: exactly 3 fit.
        let admissions = futures::future::join_all(
            keys.iter()
                .map(|k| {
                    let db = db.clone();
                    let k = k.clone();
                    tokio::spawn(async move { db.admit_trial(&k, 0.3).await.unwrap() })
                })
                .collect::<Vec<_>>(),
        )
        .await;
        let admitted: Vec<usize> = admissions
            .iter()
            .enumerate()
            .filter(|(_, a)| *a.as_ref().unwrap() == Admission::Admitted)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(admitted.len(), 3, "{admissions:?}");
        let spend = db.sweep_spend("s1").await.unwrap().unwrap();
        assert!((spend.reserved_usd - 0.9).abs() < 1e-9, "{spend:?}");
        // One spent 0.05: the rest of its share is free again, and one more fits.
        let (a, b, c) = (&keys[admitted[0]], &keys[admitted[1]], &keys[admitted[2]]);
        db.settle_trial(a, Some(0.05)).await.unwrap();
        let spend = db.sweep_spend("s1").await.unwrap().unwrap();
        assert!((spend.spent_usd - 0.05).abs() < 1e-9, "{spend:?}");
        assert!((spend.reserved_usd - 0.6).abs() < 1e-9, "{spend:?}");
        // Settling twice changes nothing.
        db.settle_trial(a, Some(0.05)).await.unwrap();
        assert_eq!(db.sweep_spend("s1").await.unwrap().unwrap(), spend);
        let others: Vec<&TrialKey> = keys
            .iter()
            .enumerate()
            .filter(|(i, _)| !admitted.contains(i))
            .map(|(_, k)| k)
            .collect();
        assert_eq!(
            db.admit_trial(others[0], 0.3).await.unwrap(),
            Admission::Admitted
        );
        assert!(matches!(
            db.admit_trial(others[1], 0.3).await.unwrap(),
            Admission::Refused(s) if (s.spent_usd + s.reserved_usd - 0.95).abs() < 1e-9
        ));
        // An unknown cost keeps the whole share as spent.
        db.settle_trial(b, None).await.unwrap();
        let spend = db.sweep_spend("s1").await.unwrap().unwrap();
        assert!((spend.spent_usd - 0.35).abs() < 1e-9, "{spend:?}");
        // c's worker died: its next attempt keeps the old reservation as spent, and reserves
        // anew only if that fits (0.35 + 0.3 kept + 0.3 other + 0.3 > 1).
        assert!(matches!(
            db.admit_trial(c, 0.3).await.unwrap(),
            Admission::Refused(_)
        ));
        let spend = db.sweep_spend("s1").await.unwrap().unwrap();
        assert!((spend.spent_usd - 0.65).abs() < 1e-9, "{spend:?}");
        assert!((spend.reserved_usd - 0.3).abs() < 1e-9, "{spend:?}");
        assert!(spend.spent_usd + spend.reserved_usd <= spend.max_usd + 1e-9);
    })
    .await;
}
