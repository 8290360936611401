//! Sweeps end to end with the real binaries: `anvil-evals` enqueues and runs workers, each trial
//! runs the real `anvil -p` against a wiremock model server speaking the Anthropic wire format,
//! and the real grader checks the result. Every scenario runs against a SQLite file and
//! against a fresh database on the Postgres server (`ANVIL_TEST_POSTGRES`, default
//! 127.0.0.1:5432).
//!
//! The model server plays two "models": `good` always writes the reference fix (answer.txt
//! holding 42), `bad` never does. A delay on the first answer keeps trials running long
//! enough to kill things mid-trial.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anvil_runner::jobs::queue::{Db, QueueLocation, TrialState};
use serde_json::{Value, json};
use wiremock::MockServer;

use anvil_test_support::databases;
use anvil_test_support::sweep as support;

use support::{model_server, task};

struct Setup {
    home: tempfile::TempDir,
    queue: QueueLocation,
    tasks: PathBuf,
}

async fn setup(server: &MockServer, postgres: bool, tasks: &[&str]) -> Setup {
    let home = tempfile::tempdir().unwrap();
    let cfg = home.path().join("cfg/anvil");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("config.toml"), support::config(server)).unwrap();
    let tasks_dir = home.path().join("tasks");
    for t in tasks {
        task(&tasks_dir, t);
    }
    let queue = if postgres {
        QueueLocation::Postgres(databases::fresh_postgres("sweep").await)
    } else {
        QueueLocation::Sqlite(home.path().join("data/queue.db"))
    };
    Setup {
        home,
        queue,
        tasks: tasks_dir,
    }
}

impl Setup {
    fn queue_arg(&self) -> String {
        match &self.queue {
            QueueLocation::Sqlite(p) => p.display().to_string(),
            QueueLocation::Postgres(url) => url.clone(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = support::evals_command(self.home.path(), args);
        c.args(["--queue", &self.queue_arg()]);
        c
    }

    fn run_args(&self, sweep: &str) -> Vec<String> {
        vec![
            "run".into(),
            "--tasks".into(),
            self.tasks.join("*").display().to_string(),
            "--models".into(),
            "good,bad".into(),
            "--sweep".into(),
            sweep.into(),
            "--backoff-secs".into(),
            "0.1".into(),
            "--heartbeat-secs".into(),
            "1".into(),
        ]
    }

    async fn db(&self) -> Db {
        Db::open(&self.queue, 2).await.unwrap()
    }

    async fn cleanup(self) {
        if let QueueLocation::Postgres(url) = &self.queue {
            databases::drop_postgres(url).await;
        }
    }
}

fn output(mut c: Command) -> Output {
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

async fn wait_for<F, Fut>(what: &str, limit: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn records(s: &Setup, sweep: &str) -> Vec<Value> {
    let out = output(s.command(&["export", "--sweep", sweep]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A model's step that writes a wrong answer (41) to answer.txt, as the Anthropic server
/// streams it.
fn writes_a_wrong_answer() -> anvil_test_support::model_server::Answer {
    use anvil_llm::testing::anthropic_sse::{self, Usage};
    anvil_test_support::model_server::Answer::sse(anthropic_sse::tool_use(
        "toolu_write_1",
        "write_file",
        &json!({"file_path": "answer.txt", "content": "41\n"}),
        "tool_use",
        Usage {
            input: 40,
            output: 9,
        },
    ))
}

/// Runs sweep `sweep` of task t1 for both models, one trial each, with `max_attempts`: the
/// run's output and the sweep's records (one per model, else the test fails).
async fn one_trial_each(
    server: &MockServer,
    sweep: &str,
    max_attempts: u32,
) -> (Setup, Output, Vec<Value>) {
    let s = setup(server, false, &["t1"]).await;
    let mut args = s.run_args(sweep);
    args.extend([
        "--trials".to_string(),
        "1".into(),
        "--max-attempts".into(),
        max_attempts.to_string(),
    ]);
    let out = output(s.command(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    let recs = records(&s, sweep);
    assert_eq!(recs.len(), 2, "{}", text(&out));
    (s, out, recs)
}

/// Two tests of one scenario: on a SQLite file and on a fresh Postgres database.
macro_rules! on_both_databases {
    ($sqlite:ident, $postgres:ident, $scenario:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $sqlite() {
            $scenario(false).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            $scenario(true).await;
        }
    };
}

/// Runs `argv` again to finish a sweep and checks every record of `before` is still there,
/// unchanged, among `total`.
fn resume_keeps_finished(
    s: &Setup,
    argv: &[&str],
    sweep: &str,
    before: &[Value],
    total: usize,
) -> Output {
    let out = output(s.command(argv));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let after = records(s, sweep);
    assert_eq!(after.len(), total);
    for old in before {
        assert!(after.contains(old), "a finished trial was run again: {old}");
    }
    out
}

// ---- the scenarios ---------------------------------------------------------------------------

async fn full_sweep_reports_exact_pass_rates(postgres: bool) {
    let server = model_server(Duration::ZERO).await;
    let s = setup(&server, postgres, &["t1", "t2", "t3"]).await;
    let mut args = s.run_args("e2e");
    args.extend(["--trials", "3", "--concurrency", "2", "-k", "1,3"].map(String::from));
    let out = output(s.command(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("good") && stdout.contains("bad"),
        "the report is printed: {stdout}"
    );

    let recs = records(&s, "e2e");
    assert_eq!(recs.len(), 18, "3 tasks × 2 models × 3 trials");
    // Every trial kept its transcript in the sweep's artifact directory: the agent's loader
    // reads it and `anvil replay` prints it.
    let artifacts = s.home.path().join("data/anvil/sweeps/e2e");
    for r in &recs {
        let path = PathBuf::from(r["session_path"].as_str().unwrap_or_else(|| panic!("{r}")));
        assert_eq!(
            path,
            artifacts.join(format!(
                "{}/{}/{}.jsonl",
                r["task"].as_str().unwrap(),
                r["model"].as_str().unwrap(),
                r["trial"]
            )),
            "{r}"
        );
        assert!(r["workspace_path"].is_null(), "{r}");
        let loaded = super::transcripts::assert_readable(s.home.path(), &path);
        let answer = if r["model"] == "good" {
            "I wrote answer.txt."
        } else {
            "I cannot work out the answer."
        };
        assert_eq!(
            loaded.messages.last().map(|m| m.text()).as_deref(),
            Some(answer),
            "{r}"
        );
    }
    for r in &recs {
        let expected = r["model"] == "good";
        assert_eq!(r["pass"], json!(expected), "{r}");
        assert_eq!(r["attempt"], 1, "{r}");
        assert!(r["infra_error"].is_null(), "{r}");
        assert_eq!(r["outcome"], "done", "{r}");
        assert_eq!(r["digests"]["grader"].as_str().unwrap().len(), 64, "{r}");
        assert_eq!(
            r["digests"]["model_config"].as_str().unwrap().len(),
            64,
            "{r}"
        );
        if expected {
            // Two answers of 40 input tokens, 9 + 5 output, at $3 / $15 per million.
            let cost = r["cost_usd"].as_f64().unwrap();
            assert!((cost - 0.00045).abs() < 1e-12, "{r}");
            assert_eq!(r["accounting"], "reported", "{r}");
        } else {
            assert!(r["cost_usd"].is_null(), "no pricing, no cost: {r}");
            assert_eq!(r["accounting"], "unknown", "{r}");
        }
    }
    assert_eq!(
        recs.iter()
            .filter(|r| r["model"] == "good")
            .map(|r| r["steps"].as_u64().unwrap())
            .min(),
        Some(2)
    );

    let out = output(s.command(&["report", "--sweep", "e2e", "--format", "json", "-k", "1,3"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let models = report["models"].as_array().expect("models in the report");
    let by = |name: &str| models.iter().find(|m| m["model"] == name).unwrap().clone();
    let (good, bad) = (by("good"), by("bad"));
    let metric = |m: &Value, name: &str| -> f64 {
        m["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {m}"))["value"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(metric(&good, "pass@1"), 1.0);
    assert_eq!(metric(&good, "pass@3"), 1.0);
    assert_eq!(metric(&good, "pass^3"), 1.0);
    assert_eq!(metric(&bad, "pass@1"), 0.0);
    assert_eq!(metric(&bad, "pass@3"), 0.0);
    assert_eq!(metric(&bad, "pass^3"), 0.0);
    s.cleanup().await;
}

on_both_databases!(
    full_sweep_sqlite,
    full_sweep_postgres,
    full_sweep_reports_exact_pass_rates
);

/// A child process that is killed when dropped, so a failing test leaves no worker running.
struct Spawned(Child);

impl Spawned {
    fn id(&self) -> u32 {
        self.0.id()
    }

    /// SIGKILL, then reap.
    fn kill9(&mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let _ = self.0.wait();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn spawn(mut c: Command) -> Spawned {
    Spawned(
        c.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Two worker processes; one is killed with SIGKILL while it runs a trial, and `status` calls
/// it dead and its trial waiting for re-run. The other, started then, finishes the sweep:
/// nothing lost, nothing duplicated, the lost trial recorded as attempt 2.
async fn killed_worker_is_replaced(postgres: bool) {
    let server = model_server(Duration::from_secs(3)).await;
    let s = setup(&server, postgres, &["t1", "t2"]).await;
    let mut args = s.run_args("crash");
    args.extend(["--trials", "2", "--detach"].map(String::from));
    let out = output(s.command(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "crash");

    let worker_args = [
        "worker",
        "--concurrency",
        "1",
        "--heartbeat-secs",
        "1",
        "--backoff-secs",
        "0.1",
    ];
    let mut a = spawn(s.command(&worker_args));
    let db = s.db().await;
    let a_pid = a.id().to_string();
    wait_for(
        "worker A to run a trial",
        Duration::from_secs(60),
        || async {
            db.running(Some("crash")).await.unwrap().iter().any(|r| {
                r.worker
                    .as_deref()
                    .is_some_and(|w| w.contains(&format!("-{a_pid}-")))
            })
        },
    )
    .await;
    let victim = db
        .running(Some("crash"))
        .await
        .unwrap()
        .into_iter()
        .find(|r| {
            r.worker
                .as_deref()
                .is_some_and(|w| w.contains(&format!("-{a_pid}-")))
        })
        .unwrap();
    let out = output(s.command(&["status", "--sweep", "crash"]));
    let status = String::from_utf8_lossy(&out.stdout);
    let a_name = victim.worker.clone().unwrap();
    assert!(status.contains("jobs waiting: "), "{status}");
    assert!(status.contains("1 running"), "{status}");
    assert!(
        status.contains(&format!("attempt 1 on {a_name}")),
        "{status}"
    );
    assert!(
        status.contains(&format!("{a_name} (host ")) && status.contains("last heartbeat"),
        "{status}"
    );
    a.kill9();
    // Past three missed heartbeats (1 s each) `status` says A is dead, and its trial waits for
    // re-run rather than running (no other worker is there yet to take it back).
    let victim_key = victim.key.to_string();
    let mut status = String::new();
    wait_for(
        "status to call worker A dead",
        Duration::from_secs(20),
        || {
            let out = output(s.command(&["status", "--sweep", "crash"]));
            status = String::from_utf8_lossy(&out.stdout).into_owned();
            let dead = status.contains(&format!(
                "{a_name} (host {}, pid {a_pid}): dead: silent past 3 missed heartbeats of 1s",
                anvil_runner::jobs::worker::host_name()
            ));
            async move { dead }
        },
    )
    .await;
    assert!(
        status.contains("0 running, 1 waiting for re-run (their worker is gone)")
            && status.contains(&format!(
                "{victim_key} attempt 1: its worker {a_name} is presumed dead"
            )),
        "{status}"
    );
    let mut b = spawn(s.command(&worker_args));

    wait_for("the sweep to finish", Duration::from_secs(120), || async {
        let c = db.counts("crash").await.unwrap();
        c.total() == 8 && c.finished() == 8
    })
    .await;
    b.kill9();
    let counts = db.counts("crash").await.unwrap();
    assert_eq!(counts.get(TrialState::Done), 8, "{counts:?}");
    let recs = records(&s, "crash");
    assert_eq!(recs.len(), 8, "one result per trial");
    let mut keys: Vec<String> = recs
        .iter()
        .map(|r| format!("{}/{}/{}", r["task"], r["model"], r["trial"]))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 8, "no duplicates");
    let lost = recs
        .iter()
        .find(|r| {
            r["task"] == victim.key.task.as_str()
                && r["model"] == victim.key.model.as_str()
                && r["trial"] == victim.key.trial
        })
        .unwrap();
    assert_eq!(lost["attempt"], 2, "the lost trial ran again: {lost}");
    assert_eq!(lost["pass"], json!(victim.key.model == "good"), "{lost}");
    // Workspaces went to the default root in TMPDIR (the home here): `anvil-trials-<uid>`.
    let root = std::fs::read_dir(s.home.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("anvil-trials-"))
        })
        .unwrap_or_else(|| panic!("no anvil-trials-<uid> in {}", s.home.path().display()));
    let left: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        left,
        vec!["templates".to_string()],
        "the killed worker's workspace was cleared"
    );
    db.close().await;
    s.cleanup().await;
}

on_both_databases!(
    killed_worker_sqlite,
    killed_worker_postgres,
    killed_worker_is_replaced
);

/// `anvil-evals run` killed mid-sweep and run again with the same --sweep finishes without
/// re-running finished trials; the same id with a changed grader is refused.
async fn killed_run_resumes(postgres: bool) {
    let server = model_server(Duration::from_millis(1500)).await;
    let s = setup(&server, postgres, &["t1", "t2"]).await;
    let mut args = s.run_args("resume");
    args.extend(["--trials", "2"].map(String::from));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut run = spawn(s.command(&argv));
    let db = s.db().await;
    wait_for("two finished trials", Duration::from_secs(60), || async {
        db.counts("resume")
            .await
            .map(|c| c.get(TrialState::Done) >= 2)
            .unwrap_or(false)
    })
    .await;
    run.kill9();
    let before = records(&s, "resume");
    assert!(
        before.len() >= 2 && before.len() < 8,
        "killed mid-sweep: {} done",
        before.len()
    );

    // A changed grader under the same id is refused, and nothing is enqueued.
    let check = s.tasks.join("t1").join(support::ANSWER_TEST);
    std::fs::write(&check, support::answer_test("43")).unwrap();
    let out = output(s.command(&argv));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sweep resume already exists") && err.contains("task t1 changed (grader/)"),
        "{err}"
    );
    std::fs::write(&check, support::answer_test("42")).unwrap();

    let out = resume_keeps_finished(&s, &argv, "resume", &before, 8);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("resuming sweep resume"),
        "{}",
        text(&out)
    );
    db.close().await;
    s.cleanup().await;
}

on_both_databases!(
    killed_run_resumes_sqlite,
    killed_run_resumes_postgres,
    killed_run_resumes
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_enqueues_nothing() {
    let server = model_server(Duration::ZERO).await;
    let s = setup(&server, false, &["t1"]).await;
    let cases: [(&[&str], &str); 7] = [
        (&["--models", "good,nosuch"], "'nosuch'"),
        (
            &["--models", "good", "--trials", "0"],
            "--trials must be at least 1",
        ),
        (&["--models", "good,good"], "names 'good' twice"),
        // A hard budget needs every model's pricing, and is an amount of USD.
        (
            &["--models", "good,bad", "--max-cost-usd", "1"],
            "model bad has no pricing",
        ),
        (
            &["--models", "good", "--max-cost-usd", "-1"],
            "--max-cost-usd",
        ),
        (
            &["--models", "good", "--max-cost-usd", "lots"],
            "--max-cost-usd",
        ),
        // A share that cannot admit one request would never run a trial.
        (
            &["--models", "good", "--max-cost-usd", "0.0001"],
            "no trial could ever run",
        ),
    ];
    for (extra, expected) in cases {
        let mut c = s.command(&[
            "run",
            "--tasks",
            &s.tasks.join("*").display().to_string(),
            "--sweep",
            "bad",
        ]);
        c.args(extra);
        let out = output(c);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(expected),
            "{extra:?}: {}",
            text(&out)
        );
    }
    let out = output(s.command(&["run", "--tasks", "/nonexistent/*", "--models", "good"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // Nothing was enqueued: the queue was never even made, and `status` says so.
    let QueueLocation::Sqlite(path) = &s.queue else {
        unreachable!("a SQLite queue")
    };
    assert!(!path.exists(), "{}", path.display());
    let out = output(s.command(&["status"]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("there is no queue database at"),
        "{}",
        text(&out)
    );
}

/// `anvil-evals cancel` while a worker runs a trial: the running trial is killed, queued ones
/// are skipped, and the sweep reads as cancelled.
async fn cancel_stops_a_sweep(postgres: bool) {
    let server = model_server(Duration::from_secs(600)).await;
    let s = setup(&server, postgres, &["t1"]).await;
    let mut args = s.run_args("stop");
    args.extend(["--trials", "3", "--detach"].map(String::from));
    let out = output(s.command(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let mut w = spawn(s.command(&["worker", "--concurrency", "1", "--heartbeat-secs", "1"]));
    let db = s.db().await;
    wait_for("a running trial", Duration::from_secs(60), || async {
        !db.running(Some("stop")).await.unwrap().is_empty()
    })
    .await;
    // Its agent is waiting on the model's answer.
    wait_for(
        "the first trial's request",
        Duration::from_secs(60),
        || async { !server.received_requests().await.unwrap().is_empty() },
    )
    .await;
    assert!(
        String::from_utf8_lossy(&output(s.command(&["status"])).stdout).contains("jobs waiting: 5"),
        "five trials queued behind the running one"
    );
    let out = output(s.command(&["cancel", "--sweep", "stop"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("6 unfinished trials stopped"),
        "{}",
        text(&out)
    );
    // The queued jobs are off the queue at once (`cancel` takes them off), and the running
    // trial's agent (waiting on a 600 s answer) is killed within seconds.
    assert_eq!(db.queue_depth().await.unwrap(), 0);
    wait_for(
        "the running trial's agent to end",
        Duration::from_secs(30),
        || async {
            db.running(Some("stop")).await.unwrap().is_empty()
                && agents_running_under(s.home.path()) == 0
        },
    )
    .await;
    // A worker would have taken a queued trial by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests = server.received_requests().await.unwrap().len();
    assert_eq!(requests, 1, "only the first trial ever reached the model");
    let counts = db.counts("stop").await.unwrap();
    assert_eq!(
        counts.get(TrialState::Cancelled),
        6,
        "1 task × 2 models × 3 trials: {counts:?}"
    );
    let out = output(s.command(&["status", "--sweep", "stop"]));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(cancelled)"),
        "{}",
        text(&out)
    );
    // Running it again is refused.
    let mut again = s.run_args("stop");
    again.extend(["--trials", "3"].map(String::from));
    let out = output(s.command(&again.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("was cancelled"),
        "{}",
        text(&out)
    );
    w.kill9();
    db.close().await;
    s.cleanup().await;
}

on_both_databases!(cancel_sqlite, cancel_postgres, cancel_stops_a_sweep);

fn agents_running_under(dir: &std::path::Path) -> usize {
    let out = Command::new("pgrep")
        .arg("-f")
        .arg(dir.join("anvil-trials"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Ctrl-C on `anvil-evals run`: it stops, kills its running agents, says how to resume, and
/// resuming finishes the sweep with nothing lost.
async fn interrupted_run_resumes(postgres: bool) {
    let server = model_server(Duration::from_millis(1500)).await;
    let s = setup(&server, postgres, &["t1"]).await;
    let mut args = s.run_args("intr");
    args.extend(["--trials", "2"].map(String::from));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut run = spawn(s.command(&argv));
    let db = s.db().await;
    wait_for(
        "a finished trial and a running one",
        Duration::from_secs(60),
        || async {
            let c = db.counts("intr").await.unwrap();
            // "Running" also covers preparing and grading: wait for the agent itself.
            c.get(TrialState::Done) >= 1
                && c.get(TrialState::Running) == 1
                && agents_running_under(s.home.path()) >= 1
        },
    )
    .await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(run.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut run.0.stderr.take().unwrap(), &mut err).unwrap();
    let status = run.0.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("--sweep intr"), "says how to resume: {err}");
    wait_for("the agents to be gone", Duration::from_secs(10), || async {
        agents_running_under(s.home.path()) == 0
    })
    .await;
    let before = records(&s, "intr");
    assert!(!before.is_empty());

    resume_keeps_finished(&s, &argv, "intr", &before, 4);
    db.close().await;
    s.cleanup().await;
}

on_both_databases!(
    interrupted_run_resumes_sqlite,
    interrupted_run_resumes_postgres,
    interrupted_run_resumes
);

/// A trial that hangs (the model never answers, far inside the task's own caps) is ended by
/// the worker's per-trial timeout, retried, then recorded as an infrastructure error; two
/// worker processes share the work and no agent is left running.
async fn hung_trials_are_ended(postgres: bool) {
    let server = model_server(Duration::from_secs(600)).await;
    let s = setup(&server, postgres, &["t1"]).await;
    let mut args = s.run_args("hang");
    args.extend(["--trials", "1", "--max-attempts", "2", "--detach"].map(String::from));
    let out = output(s.command(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let worker_args = [
        "worker",
        "--heartbeat-secs",
        "1",
        "--backoff-secs",
        "0.1",
        "--trial-timeout-secs",
        "2",
    ];
    let _a = spawn(s.command(&worker_args));
    let _b = spawn(s.command(&worker_args));
    let db = s.db().await;
    wait_for("both trials to end", Duration::from_secs(60), || async {
        db.counts("hang").await.unwrap().finished() == 2
    })
    .await;
    let recs = records(&s, "hang");
    assert_eq!(recs.len(), 2);
    for r in &recs {
        assert!(r["pass"].is_null(), "{r}");
        assert_eq!(r["attempt"], 2, "retried once, then recorded: {r}");
        assert!(
            r["infra_error"].as_str().unwrap().contains("time budget"),
            "{r}"
        );
        // The retried attempt's error is kept in the record, not cleared by the retry.
        let earlier = r["attempts"].as_array().unwrap();
        assert_eq!(earlier.len(), 1, "{r}");
        assert_eq!(earlier[0]["attempt"], 1, "{r}");
        assert!(
            earlier[0]["error"]
                .as_str()
                .unwrap()
                .contains("time budget"),
            "{r}"
        );
        // Each attempt whose agent got going kept its own transcript (a retry never writes
        // over the one before), cut off where the trial was ended; the record names the
        // newest. (An agent that did not even start within the 2 s budget wrote none.)
        let dir = s
            .home
            .path()
            .join("data/anvil/sweeps/hang/t1")
            .join(r["model"].as_str().unwrap());
        let attempts = [dir.join("0.attempt-2.jsonl"), dir.join("0.jsonl")];
        let newest = attempts.iter().find(|p| p.is_file());
        assert_eq!(
            r["session_path"].as_str(),
            newest.map(|p| p.to_str().unwrap()),
            "{r}"
        );
        for attempt in attempts.iter().filter(|p| p.is_file()) {
            let loaded = super::transcripts::assert_readable(s.home.path(), attempt);
            assert_eq!(loaded.messages.len(), 1, "only the prompt: {loaded:?}");
        }
    }
    wait_for("the agents to be gone", Duration::from_secs(10), || async {
        agents_running_under(s.home.path()) == 0
    })
    .await;
    db.close().await;
    s.cleanup().await;
}

on_both_databases!(
    hung_trial_sqlite,
    hung_trial_postgres,
    hung_trials_are_ended
);

/// Regression: a workspace kept by `--keep-workspaces` kept its worker's `p<pid>.` prefix, so
/// the next `run` on the same `--workspaces` directory deleted it as stale once that process
/// had exited. Kept ones stay until `anvil-evals workspaces clean`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_workspaces_survive_later_runs_until_cleaned() {
    let server = model_server(Duration::ZERO).await;
    let s = setup(&server, false, &["t1"]).await;
    let workspaces = s.home.path().join("ws");
    let ws_arg = workspaces.display().to_string();
    let tasks = s.tasks.join("*").display().to_string();
    let sweep = |id: &str, keep: bool| {
        let mut args = vec![
            "run",
            "--tasks",
            &tasks,
            "--models",
            "good",
            "--trials",
            "1",
            "--sweep",
            id,
            "--workspaces",
            &ws_arg,
        ];
        if keep {
            args.push("--keep-workspaces");
        }
        let out = output(s.command(&args));
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    };
    let workspaces_cmd = |action: &str| {
        let mut c = support::evals_command(s.home.path(), &["workspaces", action]);
        c.args(["--workspaces", &ws_arg]);
        let out = output(c);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    sweep("kept", true);
    let recs = records(&s, "kept");
    let kept = PathBuf::from(recs[0]["workspace_path"].as_str().unwrap());
    // The transcript is apart from the workspace: in the --workspaces directory's sweeps/.
    assert_eq!(
        recs[0]["session_path"],
        workspaces
            .join("sweeps/kept/t1/good/0.jsonl")
            .display()
            .to_string()
    );
    assert!(kept.join("answer.txt").is_file(), "{}", kept.display());
    assert!(
        kept.parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("kept."),
        "{}",
        kept.display()
    );

    // Another run on the same directory, by another process: its stale sweep spares it.
    sweep("later", false);
    assert!(kept.join("answer.txt").is_file(), "{}", kept.display());
    assert_eq!(workspaces_cmd("list"), format!("{}\n", kept.display()));

    assert_eq!(workspaces_cmd("clean"), "");
    assert!(!kept.exists(), "{}", kept.display());
    assert_eq!(workspaces_cmd("list"), "");
    assert!(workspaces.join("templates").is_dir(), "templates stay");
    s.cleanup().await;
}

/// `anvil-evals run --max-cost-usd`: the budget is held in the queue. Each trial reserves its
/// task's cost cap before its agent runs; with room for one cap (and the first trial's
/// spend), the second trial is not admitted: recorded `budget_exceeded` with `pass` null and
/// no infrastructure error, listed apart in the report, never counted as a fail.
async fn a_sweep_budget_admits_what_fits(postgres: bool) {
    let server = model_server(Duration::ZERO).await;
    let s = setup(&server, postgres, &["t1", "t2"]).await;
    for t in ["t1", "t2"] {
        let path = s.tasks.join(t).join("task.toml");
        let toml = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            toml.replace("max_steps = 5\n", "max_steps = 5\ncost_cap_usd = 0.3\n"),
        )
        .unwrap();
    }
    let mut args = s.run_args("budget");
    args.retain(|a| a != "good,bad");
    let at = args.iter().position(|a| a == "--models").unwrap();
    args.insert(at + 1, "good".into());
    // Room for one trial's cap, not for a second one's after the first spent $0.00045.
    args.extend(
        [
            "--trials",
            "1",
            "--concurrency",
            "1",
            "--max-cost-usd",
            "0.3002",
        ]
        .map(String::from),
    );
    let out = output(s.command(&args.iter().map(String::as_str).collect::<Vec<_>>()));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Not admitted by the sweep's budget"),
        "{}",
        text(&out)
    );

    // The run logged each trial as JSON lines in its data directory, nothing of it on the
    // terminal.
    let log = std::fs::read_to_string(s.home.path().join("data/anvil/logs/anvil-evals.log"))
        .unwrap_or_else(|e| panic!("no anvil-evals log: {e}"));
    assert_eq!(log.matches("trial started").count(), 2, "{log}");
    assert!(log.contains("trial finished"), "{log}");
    for line in log.lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    assert!(!text(&out).contains("trial finished"), "{}", text(&out));

    let recs = records(&s, "budget");
    assert_eq!(recs.len(), 2, "{recs:?}");
    let (ran, refused): (Vec<&Value>, Vec<&Value>) =
        recs.iter().partition(|r| r["outcome"] == "done");
    assert_eq!((ran.len(), refused.len()), (1, 1), "{recs:#?}");
    assert_eq!(ran[0]["pass"], true, "{recs:#?}");
    let refused = refused[0];
    assert_eq!(refused["outcome"], "budget_exceeded", "{refused}");
    assert!(refused["pass"].is_null(), "{refused}");
    assert!(refused["infra_error"].is_null(), "{refused}");
    assert_eq!(
        refused["schema_version"],
        anvil_report::SCHEMA_VERSION,
        "{refused}"
    );

    let out = output(s.command(&["report", "--sweep", "budget", "--format", "json"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["not_admitted_total"], 1, "{report:#}");
    assert_eq!(report["infra_errors_total"], 0, "{report:#}");
    assert_eq!(report["models"][0]["graded_trials"], 1, "{report:#}");

    // The ledger settled the trial that ran at its reported cost; nothing stays reserved.
    let db = s.db().await;
    let spend = db.sweep_spend("budget").await.unwrap().unwrap();
    assert!((spend.spent_usd - 0.00045).abs() < 1e-9, "{spend:?}");
    assert!(spend.reserved_usd.abs() < 1e-9, "{spend:?}");
    db.close().await;
    let out = output(s.command(&["status", "--sweep", "budget"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.contains("spend: $0.0004 over 1 trials")
            && status.contains("projected $0.0004 for all 1 trials")
            && status.contains("budget $0.3002"),
        "{status}"
    );
    s.cleanup().await;
}

on_both_databases!(
    sweep_budget_sqlite,
    sweep_budget_postgres,
    a_sweep_budget_admits_what_fits
);

/// An account that runs out of credit or quota in the middle of a trial — OpenAI's 429
/// `insufficient_quota`, Anthropic's 400 "Your credit balance is too low" — ends the trial as
/// the infrastructure's failure at whatever step it comes (the model did not fail; the sweep
/// could not pay), and its record keeps what the steps before it cost. (It is retried while
/// attempts remain, like every infrastructure error: another worker may hold another key.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_out_of_credit_mid_trial_is_an_infrastructure_error_with_its_cost() {
    use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, |body| {
        let turns = body["messages"].as_array().map_or(0, Vec::len);
        if turns == 1 {
            // Both models work a step first: a wrong answer, written.
            return writes_a_wrong_answer();
        }
        match body["model"].as_str() {
            Some("claude-good") => Answer::error(
                429,
                json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}}).to_string(),
            ),
            _ => Answer::error(
                400,
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}).to_string(),
            ),
        }
    })
    .await;
    let (s, out, recs) = one_trial_each(&server, "broke", 1).await;
    for r in &recs {
        assert!(r["pass"].is_null(), "not graded: {r}");
        let error = r["infra_error"].as_str().unwrap_or_else(|| panic!("{r}"));
        let (status, words) = match r["model"].as_str() {
            Some("good") => ("HTTP 429", "exceeded your current quota"),
            _ => ("HTTP 400", "credit balance is too low"),
        };
        assert!(
            error.contains(status) && error.contains(words) && error.contains("check model"),
            "{error}"
        );
        if r["model"] == "good" {
            let cost = r["cost_usd"].as_f64().unwrap_or_else(|| panic!("{r}"));
            assert!(cost > 0.0, "the first step's cost is kept: {r}");
            assert_eq!(r["accounting"], "estimated", "{r}");
        } else {
            assert!(r["cost_usd"].is_null(), "bad has no pricing: {r}");
        }
    }
    // One request each went unanswered by a model: two steps were asked, no third.
    assert_eq!(server.requests().len(), 4, "{}", text(&out));
    s.cleanup().await;
}

/// A first request the provider refuses for what the model generated — Groq's 400
/// `tool_use_failed` with the malformed call in `failed_generation` — is the model's graded
/// fail, not the provider refusing the trial: else a model could hide a failing first step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_request_refused_for_the_models_own_generation_is_its_fail() {
    use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, |_| {
        Answer::error(
            400,
            json!({"error": {"message": "Failed to call a function. Please adjust your prompt. See 'failed_generation' for more details.", "type": "invalid_request_error", "code": "tool_use_failed", "failed_generation": "<tool_call>{\"name\": \"write_file\""}}).to_string(),
        )
    })
    .await;
    let (s, _, recs) = one_trial_each(&server, "malformed", 2).await;
    for r in &recs {
        assert_eq!(r["pass"], false, "graded, the model's own fail: {r}");
        assert!(r["infra_error"].is_null(), "{r}");
        assert_eq!(r["outcome"], "failed", "{r}");
        assert_eq!(r["attempt"], 1, "never retried: {r}");
    }
    s.cleanup().await;
}

/// A provider that refuses the trial itself — a key it does not accept (401), or a first
/// request answered 400 as Gemini answers a bad key — ends the trial as the infrastructure's
/// failure, never as a graded fail of the model: a sweep run with a bad key must not report a
/// 0 % pass rate as if the model had tried. But a refusal the model's own conversation provoked
/// after it worked (a moderation 403) stays its graded fail: else a model could make its
/// failing trial vanish from the pass rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_is_an_infrastructure_error_but_a_refusal_the_model_provoked_is_its_fail() {
    use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, |body| {
        let error = |status: u16, kind: &str, message: &str| {
            Answer::error(
                status,
                json!({"type": "error", "error": {"type": kind, "message": message}}).to_string(),
            )
        };
        let turns = body["messages"].as_array().map_or(0, Vec::len);
        match body["model"].as_str() {
            // `good` is refused its key.
            Some("claude-good") => error(401, "authentication_error", "invalid x-api-key"),
            // `bad` writes a wrong answer, then its conversation is "flagged".
            _ if turns == 1 => writes_a_wrong_answer(),
            _ => error(403, "permission_error", "your input was flagged"),
        }
    })
    .await;
    let (s, out, recs) = one_trial_each(&server, "refused", 2).await;
    for r in &recs {
        if r["model"] == "good" {
            assert!(r["pass"].is_null(), "not graded: {r}");
            let error = r["infra_error"].as_str().unwrap_or_else(|| panic!("{r}"));
            for part in [
                "HTTP 401",
                "invalid x-api-key",
                "check model good's provider 'mock'",
                "its key in $MOCK_API_KEY",
            ] {
                assert!(error.contains(part), "{part}: {error}");
            }
        } else {
            assert_eq!(r["pass"], false, "graded, the model's own fail: {r}");
            assert!(r["infra_error"].is_null(), "{r}");
            assert_eq!(r["outcome"], "failed", "{r}");
        }
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let good = stdout
        .lines()
        .find(|l| l.contains("good"))
        .unwrap_or_else(|| panic!("{}", text(&out)));
    assert!(
        !good.contains("0.0") && !good.contains(" 0%"),
        "no pass rate for trials that never ran: {}",
        text(&out)
    );
    s.cleanup().await;
}
