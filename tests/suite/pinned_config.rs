//! Pinned model configuration, end to end with the real binaries: a sweep stores each model's
//! resolved configuration where it is started, and every trial's `anvil -p` runs with exactly
//! that — not with what the task repository's `.anvil/config.toml` or the worker's own user
//! config say the alias means. A resumed sweep whose model config changed is refused naming
//! what changed; a worker without the credential the pinned config names records an
//! infrastructure error naming it.
//!
//! Two wiremock servers speak the Anthropic wire format: `pinned` is the one the sweep was
//! started against, `elsewhere` the one a project config (or a later user config) points the
//! alias at. Trials must only ever reach `pinned`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anvil_runner::jobs::queue::{Db, QueueLocation, TrialState};
use serde_json::Value;
use wiremock::MockServer;

use anvil_test_support::sweep as support;

/// A user config with two providers: `mock` (alias `good`'s provider) at `mock_url`, and
/// `other` at `other_url`, each with its own credential variable.
fn user_config(mock_url: &str, other_url: &str) -> String {
    format!(
        "[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{mock_url}\"\napi_key_env = \"MOCK_API_KEY\"\n\n\
         [providers.other]\nkind = \"anthropic\"\nbase_url = \"{other_url}\"\napi_key_env = \"OTHER_API_KEY\"\n\n\
         [models.good]\nprovider = \"mock\"\nmodel = \"claude-good\"\npricing = {{ input = 3.0, output = 15.0 }}\n"
    )
}

struct Home {
    dir: tempfile::TempDir,
    tasks: PathBuf,
}

impl Home {
    fn new(config: &str) -> Home {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            tasks: dir.path().join("tasks"),
            dir,
        };
        home.write_config(config);
        support::task(&home.tasks, "t1");
        home
    }

    fn write_config(&self, config: &str) {
        let cfg = self.dir.path().join("cfg/anvil");
        std::fs::create_dir_all(&cfg).unwrap();
        std::fs::write(cfg.join("config.toml"), config).unwrap();
    }

    fn queue(&self) -> PathBuf {
        self.dir.path().join("data/queue.db")
    }

    /// `anvil-evals ARGS --queue …` in this home, with both credentials set.
    fn command(&self, args: &[&str]) -> Command {
        let mut c = support::evals_command(self.dir.path(), args);
        c.args(["--queue", &self.queue().display().to_string()])
            .env("OTHER_API_KEY", "sk-other-key-456");
        c
    }

    fn run_args(&self, sweep: &str, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "run",
            "--tasks",
            &self.tasks.join("*").display().to_string(),
            "--models",
            "good",
            "--trials",
            "1",
            "--sweep",
            sweep,
            "--backoff-secs",
            "0.1",
            "--heartbeat-secs",
            "1",
        ]
        .map(String::from)
        .to_vec();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    fn run(&self, sweep: &str, extra: &[&str]) -> Output {
        let args = self.run_args(sweep, extra);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        self.command(&argv).output().unwrap()
    }

    fn records(&self, sweep: &str) -> Vec<Value> {
        let out = self
            .command(&["export", "--sweep", sweep])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    async fn db(&self) -> Db {
        Db::open(&QueueLocation::Sqlite(self.queue()), 2)
            .await
            .unwrap()
    }
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A worker process, killed when dropped.
struct Worker(Child);

impl Worker {
    fn spawn(mut c: Command) -> Worker {
        Worker(
            c.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_until_finished(db: &Db, sweep: &str) {
    let started = Instant::now();
    loop {
        let counts = db.counts(sweep).await.unwrap();
        if counts.total() > 0 && counts.finished() == counts.total() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "timed out waiting for sweep {sweep}: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn requests(server: &MockServer) -> usize {
    server.received_requests().await.unwrap().len()
}

/// The task repository re-points `good` at another configured provider (an untrusted project
/// may choose among configured providers) and denies the tool the model needs; then, between
/// enqueueing and running, the user config re-points the `mock` provider itself. The trial
/// still talks only to the server pinned when the sweep started, with the workspace's rules
/// ignored, and passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trials_run_the_pinned_model_whatever_the_project_or_the_worker_config_say() {
    let pinned = support::model_server(Duration::ZERO).await;
    let elsewhere = support::model_server(Duration::ZERO).await;
    let home = Home::new(&user_config(&pinned.uri(), &elsewhere.uri()));
    let project = home.tasks.join("t1/repo/.anvil");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("config.toml"),
        "default_model = \"good\"\n\n[models.good]\nprovider = \"other\"\nmodel = \"claude-good\"\n\n\
         [permissions]\ndeny = [\"write_file\"]\n",
    )
    .unwrap();

    let out = home.run("pin", &["--detach", "--keep-workspaces"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // The worker's machine says something else about the provider: it must not matter.
    home.write_config(&user_config(&elsewhere.uri(), &elsewhere.uri()));
    let _worker =
        Worker::spawn(home.command(&["worker", "--heartbeat-secs", "1", "--keep-workspaces"]));
    let db = home.db().await;
    wait_until_finished(&db, "pin").await;

    let recs = home.records("pin");
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert!(r["infra_error"].is_null(), "{r}");
    assert_eq!(r["outcome"], "done", "{r}");
    assert_eq!(r["pass"], true, "{r}");
    assert_eq!(
        requests(&elsewhere).await,
        0,
        "the trial left the pinned server"
    );
    assert_eq!(requests(&pinned).await, 2, "write, then answer");
    let workspace = PathBuf::from(r["workspace_path"].as_str().unwrap());
    assert!(
        workspace.join(".anvil/config.toml").is_file(),
        "the project config was in the workspace (and ignored)"
    );
    // The record's model_config is the digest the sweep pinned.
    let row = db.sweep("pin").await.unwrap().unwrap();
    let spec: Value = serde_json::from_str(&row.spec).unwrap();
    let stored = &spec["model_configs"]["good"];
    assert_eq!(stored["config"]["provider"]["base_url"], pinned.uri());
    assert_eq!(stored["config"]["provider"]["api_key_env"], "MOCK_API_KEY");
    assert_eq!(r["digests"]["model_config"], stored["digest"], "{r}");
    // The pinned config the child got lies beside the workspace, not in it.
    let trial_config = workspace.parent().unwrap().join("trial-config.json");
    let trial_config: Value =
        serde_json::from_str(&std::fs::read_to_string(trial_config).unwrap()).unwrap();
    assert_eq!(trial_config["model"], stored["config"]);
    let hidden: Vec<&str> = trial_config["hidden"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    let task_dir = std::fs::canonicalize(home.tasks.join("t1")).unwrap();
    assert!(
        hidden.contains(&task_dir.to_str().unwrap()),
        "the task directory is to be hidden: {hidden:?}"
    );
    assert!(
        hidden
            .iter()
            .any(|p| Path::new(p).ends_with("data/queue.db")),
        "the queue is to be hidden: {hidden:?}"
    );
    // The child kept its session as the trial's transcript, in the sweep's artifact
    // directory, which its commands do not see.
    assert_eq!(trial_config["session_path"], r["session_path"], "{r}");
    let transcript = PathBuf::from(r["session_path"].as_str().unwrap());
    assert!(
        transcript.ends_with("anvil/sweeps/pin/t1/good/0.jsonl"),
        "{r}"
    );
    assert!(transcript.is_file(), "{}", transcript.display());
    let artifacts = std::fs::canonicalize(transcript.ancestors().nth(3).unwrap()).unwrap();
    assert!(
        hidden.contains(&artifacts.to_str().unwrap()),
        "the sweep's transcripts are to be hidden: {hidden:?}"
    );
    db.close().await;
}

/// Resuming a sweep after the model's configuration changed is refused, naming the model and
/// the field; nothing more runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_sweep_with_a_changed_model_config_is_refused() {
    let pinned = support::model_server(Duration::ZERO).await;
    let elsewhere = support::model_server(Duration::ZERO).await;
    let home = Home::new(&user_config(&pinned.uri(), &elsewhere.uri()));
    let out = home.run("again", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Resuming unchanged is fine.
    let out = home.run("again", &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    home.write_config(&user_config(&elsewhere.uri(), &elsewhere.uri()));
    let out = home.run("again", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "model good's config changed: provider.base_url \"{}\" → \"{}\"",
        pinned.uri(),
        elsewhere.uri()
    );
    assert!(stderr.contains(&expected), "{}", text(&out));
    assert_eq!(requests(&elsewhere).await, 0);
    assert_eq!(home.records("again").len(), 1);
}

/// A worker whose environment lacks the credential variable the pinned config names records
/// an infrastructure error saying so, without starting the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_without_the_credential_records_an_infra_error_naming_it() {
    let pinned = support::model_server(Duration::ZERO).await;
    let home = Home::new(&user_config(&pinned.uri(), &pinned.uri()));
    let out = home.run("nokey", &["--detach", "--max-attempts", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let mut worker = home.command(&["worker", "--heartbeat-secs", "1"]);
    worker.env_remove("MOCK_API_KEY");
    let _worker = Worker::spawn(worker);
    let db = home.db().await;
    wait_until_finished(&db, "nokey").await;
    assert_eq!(
        db.counts("nokey")
            .await
            .unwrap()
            .get(TrialState::InfraError),
        1
    );
    let recs = home.records("nokey");
    assert_eq!(recs.len(), 1);
    let error = recs[0]["infra_error"].as_str().unwrap();
    assert!(
        error.starts_with("model good needs MOCK_API_KEY, which is not set on worker "),
        "{error}"
    );
    assert!(recs[0]["pass"].is_null());
    assert_eq!(requests(&pinned).await, 0, "no agent ran");
    db.close().await;
}
