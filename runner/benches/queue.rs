//! Queue throughput with a no-op trial handler: jobs per second through apalis and anvil's
//! trial bookkeeping (claim, fenced finish), on a SQLite file and on Postgres, with 1 and 4
//! workers. Postgres needs the server of `ANVIL_TEST_POSTGRES` (default 127.0.0.1:5432).
//!
//! `cargo bench -p anvil-runner --bench queue` (set ANVIL_BENCH_JOBS to change the job count).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use anvil_report::TrialRecord;
use anvil_report::record::{Accounting, Digests, SCHEMA_VERSION, Tokens};
use anvil_runner::jobs::queue::{self, Db, QueueLocation, SweepRow, TrialJob, TrialKey};
use anvil_runner::jobs::worker::{self, TrialEnd, TrialHandler, WorkerOptions};
use anvil_test_support::databases;
use tokio_util::sync::CancellationToken;

struct NoOp;

fn record(job: &TrialJob, attempt: u32) -> TrialRecord {
    TrialRecord {
        schema_version: SCHEMA_VERSION,
        sweep: job.sweep.clone(),
        task: job.task.clone(),
        model: job.model.clone(),
        variant: job.variant.clone(),
        adaptive: None,
        attempts: Vec::new(),
        trial: job.trial,
        attempt,
        pass: Some(true),
        outcome: Some("done".into()),
        infra_error: None,
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
        anvil_git_sha: "bench".into(),
        check_outcome: None,
        tamper: Vec::new(),
        grader_sandbox: None,
        trace_id: None,
    }
}

#[async_trait::async_trait]
impl TrialHandler for NoOp {
    async fn run(&self, job: &TrialJob, attempt: u32, _: CancellationToken) -> TrialEnd {
        TrialEnd::Graded(record(job, attempt))
    }
    fn time_budget(&self, _: &TrialJob) -> Duration {
        Duration::from_secs(60)
    }
    fn infra_record(&self, job: &TrialJob, attempt: u32, reason: &str) -> TrialRecord {
        let mut r = record(job, attempt);
        r.pass = None;
        r.infra_error = Some(reason.into());
        r
    }
}

async fn measure(db: &Db, sweep: &str, jobs: u32, workers: usize) -> f64 {
    db.record_sweep(&SweepRow {
        id: sweep.into(),
        created_at_ms: queue::now_ms(),
        spec: "{}".into(),
        fingerprint: "x".into(),
        anvil_git_sha: "bench".into(),
        cancelled: false,
    })
    .await
    .unwrap();
    let keys: Vec<TrialKey> = (0..jobs)
        .map(|trial| TrialKey {
            sweep: sweep.into(),
            task: "t".into(),
            model: "m".into(),
            variant: None,
            trial,
        })
        .collect();
    db.add_trials(&keys).await.unwrap();
    queue::enqueue(db, &keys, 1).await.unwrap();
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            tokio::spawn(worker::run(
                db.clone(),
                Arc::new(NoOp),
                WorkerOptions {
                    concurrency: 8,
                    poll_interval: Duration::from_millis(10),
                    ..WorkerOptions::default()
                },
                shutdown.clone(),
            ))
        })
        .collect();
    loop {
        let c = db.counts(sweep).await.unwrap();
        if c.finished() == u64::from(jobs) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    shutdown.cancel();
    for h in handles {
        let _ = tokio::time::timeout(Duration::from_secs(10), h).await;
    }
    f64::from(jobs) / elapsed.as_secs_f64()
}

fn main() {
    let jobs: u32 = std::env::var("ANVIL_BENCH_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for workers in [1, 4] {
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(&QueueLocation::Sqlite(dir.path().join("q.db")), 16)
                .await
                .unwrap();
            let rate = measure(&db, "bench", jobs, workers).await;
            println!("queue/sqlite   workers={workers}: {rate:>7.0} jobs/s ({jobs} no-op jobs)");
            db.close().await;
        }
        for workers in [1, 4] {
            let url = databases::fresh_postgres("bench").await;
            let location = QueueLocation::Postgres(url.clone());
            let db = Db::open(&location, 16).await.unwrap();
            let rate = measure(&db, "bench", jobs, workers).await;
            println!("queue/postgres workers={workers}: {rate:>7.0} jobs/s ({jobs} no-op jobs)");
            db.close().await;
            databases::drop_postgres(&url).await;
        }
    });
}
