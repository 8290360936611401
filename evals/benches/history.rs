//! The queue's history on SQLite, whole processes (median wall time of 5 runs):
//! - `anvil-evals trend 'nightly-*'` over 365 stored sweeps of 1,000 trials each (20 tasks ×
//!   2 models × 25 trials, records as a real sweep writes them): target ≤ 1 s;
//! - `anvil-evals report --sweep nightly-365 --baseline big-100k`, the baseline a
//!   100,000-trial sweep (100 tasks × 4 models × 250 trials) read from the database: target
//!   ≤ 1 s;
//! - and, for reference, `anvil-evals sweeps` over all 366 (which reads every record's cost).
//!
//! The database is built once, in one transaction. `ANVIL_BENCH_QUEUE=FILE` keeps it there
//! (and reuses it when it exists).
//!
//! Run: `cargo bench -p anvil-evals --bench history`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anvil_runner::jobs::queue::{Db, QueueLocation};

const BIN: &str = env!("CARGO_BIN_EXE_anvil-evals");
const RUNS: usize = 5;
/// 2026-01-01 02:00 UTC.
const START_MS: i64 = 1_767_232_800_000;
const DAY_MS: i64 = 86_400_000;
const DIGEST: &str = "5f0c3a1e9b7d2c4e6a8f0b1d3c5e7a9f1b3d5c7e9a0b2c4d6e8f0a1b3c5d7e9f";
const NIGHTLIES: usize = 365;

/// Rows bound into one INSERT (7 parameters each: well under SQLite's limit).
const ROWS_PER_INSERT: usize = 200;

struct Row {
    sweep: String,
    task: String,
    model: &'static str,
    trial: u32,
    state: &'static str,
    record: String,
    pass: Option<i64>,
}

fn spec(tasks: usize, models: &[&str], trials: u32) -> String {
    let tasks: Vec<serde_json::Value> = (0..tasks)
        .map(|t| {
            serde_json::json!({
                "name": format!("task-{t:03}"),
                "dir": format!("/srv/evals/tasks/task-{t:03}"),
                "digests": {"task": DIGEST, "repo": DIGEST, "grader": DIGEST, "dependencies": DIGEST},
            })
        })
        .collect();
    serde_json::json!({"tasks": tasks, "models": models, "trials": trials, "max_attempts": 3})
        .to_string()
}

/// The trials of one sweep, with records like a real sweep's (digests, transcript paths).
fn trials(sweep: &str, tasks: usize, models: &[&'static str], trials: u32, seed: u64) -> Vec<Row> {
    let mut state = seed;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 33
    };
    let mut rows = Vec::with_capacity(tasks * models.len() * trials as usize);
    for task in 0..tasks {
        for (m, &model) in models.iter().enumerate() {
            let skill = (task * 7 + m * 29 + 13) % 100;
            for trial in 0..trials {
                let r = next();
                let infra = r % 500 == 0;
                let pass = (r % 100) < skill as u64;
                let priced = m % 2 == 0;
                let record = format!(
                    r#"{{"schema_version":{},"sweep":"{sweep}","task":"task-{task:03}","model":"{model}","trial":{trial},"attempt":1,"pass":{},"outcome":{},"infra_error":{},"steps":{},"tokens":{{"input":{},"output":{},"cache_read":{},"cache_write":0}},"cost_usd":{},"accounting":"{}","duration_ms":{},"session_path":"/data/anvil/sweeps/{sweep}/task-{task:03}/{model}/{trial}.jsonl","workspace_path":null,"digests":{{"task":"{DIGEST}","repo":"{DIGEST}","grader":"{DIGEST}","dependencies":"{DIGEST}","model_config":"{DIGEST}"}},"anvil_git_sha":"0123456789abcdef0123456789abcdef01234567"}}"#,
                    anvil_report::SCHEMA_VERSION,
                    if infra {
                        "null".to_string()
                    } else {
                        pass.to_string()
                    },
                    if infra { "null" } else { "\"done\"" },
                    if infra {
                        "\"provider unreachable after 5 attempts\""
                    } else {
                        "null"
                    },
                    5 + r % 30,
                    1000 + r % 50_000,
                    100 + r % 3000,
                    r % 40_000,
                    if priced {
                        format!("{:.5}", (r % 1000) as f64 / 10_000.0)
                    } else {
                        "null".into()
                    },
                    if priced { "reported" } else { "unknown" },
                    10_000 + r % 600_000,
                );
                rows.push(Row {
                    sweep: sweep.to_string(),
                    task: format!("task-{task:03}"),
                    model,
                    trial,
                    state: if infra { "infra_error" } else { "done" },
                    record,
                    pass: (!infra).then_some(i64::from(pass)),
                });
            }
        }
    }
    rows
}

/// Builds the queue: 365 nightly sweeps of 1,000 trials and one of 100,000, in one
/// transaction.
async fn build(path: &Path) {
    let db = Db::open(&QueueLocation::Sqlite(path.to_path_buf()), 2)
        .await
        .unwrap();
    let Db::Sqlite(pool) = &db else {
        unreachable!("a SQLite location opens a SQLite pool")
    };
    let mut tx = pool.begin().await.unwrap();
    let mut sweeps = Vec::new();
    for i in 1..=NIGHTLIES {
        let id = format!("nightly-{i:03}");
        let created = START_MS + (i as i64 - 1) * DAY_MS;
        sweeps.push((id.clone(), created, spec(20, &["sonnet", "haiku"], 25)));
    }
    sweeps.push((
        "big-100k".to_string(),
        START_MS - DAY_MS,
        spec(100, &["sonnet", "haiku", "gpt", "local"], 250),
    ));
    for (id, created, spec) in &sweeps {
        sqlx::query(
            "INSERT INTO anvil_sweeps (id, created_at_ms, spec, fingerprint, anvil_git_sha, cancelled) \
             VALUES ($1, $2, $3, 'bench', 'bench', 0)",
        )
        .bind(id)
        .bind(created)
        .bind(spec)
        .execute(&mut *tx)
        .await
        .unwrap();
        let rows = if id == "big-100k" {
            trials(id, 100, &["sonnet", "haiku", "gpt", "local"], 250, 7)
        } else {
            trials(id, 20, &["sonnet", "haiku"], 25, *created as u64)
        };
        for chunk in rows.chunks(ROWS_PER_INSERT) {
            let values: Vec<String> = (0..chunk.len())
                .map(|i| {
                    let p = i * 7;
                    format!(
                        "(${}, ${}, ${}, '', ${}, ${}, 1, 'bench', ${}, ${})",
                        p + 1,
                        p + 2,
                        p + 3,
                        p + 4,
                        p + 5,
                        p + 6,
                        p + 7
                    )
                })
                .collect();
            let sql = format!(
                "INSERT INTO anvil_trials (sweep, task, model, variant, trial, state, attempt, worker, \
                 record, pass) VALUES {}",
                values.join(", ")
            );
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
            for r in chunk {
                q = q
                    .bind(&r.sweep)
                    .bind(&r.task)
                    .bind(r.model)
                    .bind(i64::from(r.trial))
                    .bind(r.state)
                    .bind(&r.record)
                    .bind(r.pass);
            }
            q.execute(&mut *tx).await.unwrap();
        }
    }
    tx.commit().await.unwrap();
    db.close().await;
}

/// The median, min and max wall time of `RUNS` runs of `anvil-evals ARGS`.
fn time(args: &[&str], queue: &Path) -> (Duration, Duration, Duration) {
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let out = Command::new(BIN)
            .args(args)
            .arg("--queue")
            .arg(queue)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        times.push(t.elapsed());
        assert!(
            out.status.success(),
            "anvil-evals {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    times.sort();
    (times[RUNS / 2], times[0], times[RUNS - 1])
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    let path = std::env::var_os("ANVIL_BENCH_QUEUE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("history.db"));
    if !path.exists() {
        let started = Instant::now();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(build(&path));
        println!(
            "built {} ({} sweeps, {} trials) in {:.1?}",
            path.display(),
            NIGHTLIES + 1,
            NIGHTLIES * 1000 + 100_000,
            started.elapsed()
        );
    }
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    println!(
        "queue: {:.0} MiB of SQLite",
        size as f64 / (1024.0 * 1024.0)
    );
    for (what, args, target) in [
        (
            "trend over 365 sweeps × 1,000 trials (table)",
            &["trend", "nightly-*"][..],
            Some(1.0),
        ),
        (
            "trend over 365 sweeps × 1,000 trials (html)",
            &["trend", "nightly-*", "--format", "html"][..],
            Some(1.0),
        ),
        (
            "report --sweep nightly-365 --baseline big-100k (100,000 baseline records)",
            &[
                "report",
                "--sweep",
                "nightly-365",
                "--baseline",
                "big-100k",
                "--format",
                "json",
            ][..],
            Some(1.0),
        ),
        (
            "report --sweep nightly-365 --baseline last:big-*",
            &[
                "report",
                "--sweep",
                "nightly-365",
                "--baseline",
                "last:big-*",
                "--format",
                "json",
            ][..],
            Some(1.0),
        ),
        (
            "sweeps over 366 sweeps (465,000 records' costs)",
            &["sweeps"][..],
            None,
        ),
    ] {
        let (median, min, max) = time(args, &path);
        let verdict = match target {
            Some(t) if median.as_secs_f64() <= t => format!(" (target ≤ {t} s: met)"),
            Some(t) => format!(" (target ≤ {t} s: MISSED)"),
            None => String::new(),
        };
        println!("{what}: median {median:.2?} (min {min:.2?}, max {max:.2?}){verdict}");
    }
}
