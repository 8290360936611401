//! The queue and the worker against real databases: a SQLite file and a fresh database on the
//! Postgres server (`ANVIL_TEST_POSTGRES`, default the local one). Trial handlers here are
//! doubles; the real trial (agent + grader) is exercised by `anvil-evals`'s tests.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anvil_runner::queue::{self, Db, QueueLocation, SweepRow, SweepStart, TrialKey, TrialState};
use anvil_runner::worker::{self, TrialEnd, TrialHandler, WorkerOptions};
use tokio_util::sync::CancellationToken;

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
        let record = format!(
            r#"{{"task":"{}","trial":{},"attempt":{attempt},"pass":true}}"#,
            job.task, job.trial
        );
        match job.task.as_str() {
            "flaky" if attempt < 2 => TrialEnd::Infra {
                reason: "provider unreachable".into(),
                record: String::new(),
            },
            "broken" => TrialEnd::Infra {
                reason: "sandbox could not start".into(),
                record: format!(
                    r#"{{"infra_error":"sandbox could not start","attempt":{attempt}}}"#
                ),
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

    fn infra_record(&self, _: &queue::TrialJob, attempt: u32, reason: &str) -> String {
        format!(r#"{{"infra_error":"{reason}","attempt":{attempt}}}"#)
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
    let started = Instant::now();
    loop {
        let counts = db.counts(sweep).await.unwrap();
        if counts.finished() == counts.total() {
            break;
        }
        assert!(
            started.elapsed() < limit,
            "sweep did not finish: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), handle)
        .await
        .expect("worker stops when asked")
        .unwrap()
        .unwrap();
}

async fn with_each_db<F, Fut>(name: &str, f: F)
where
    F: Fn(Db) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    let sqlite = QueueLocation::Sqlite(dir.path().join("q.db"));
    f(Db::open(&sqlite, 8).await.unwrap()).await;
    let pg = queue::testing::fresh_postgres(name)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let db = Db::open(&pg, 8).await.unwrap();
    f(db.clone()).await;
    db.close().await;
    queue::testing::drop_postgres(&pg).await;
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
            records
                .iter()
                .any(|r| r.contains(r#""infra_error":"sandbox could not start","attempt":3"#)),
            "{records:?}"
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
        assert!(
            db.finish(key, 2, TrialState::Done, Some("new"), None)
                .await
                .unwrap()
        );
        // w1 wakes up and tries to write its result.
        assert!(
            !db.finish(key, 1, TrialState::Done, Some("old"), None)
                .await
                .unwrap()
        );
        assert!(
            !db.finish(key, 3, TrialState::Done, Some("dup"), None)
                .await
                .unwrap(),
            "a finished trial stays finished"
        );
        assert_eq!(db.records("s4").await.unwrap(), vec!["new".to_string()]);
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
