//! The queue database is never silently lost, tested through the real `anvil-evals`: a
//! database deleted, made unwritable or dropped while `run` works on it stops the run within
//! 15 s with an error naming it (no endless progress line, no report as if complete, a
//! non-zero exit), and the commands that only read a queue (`status`, `export`, `cancel`,
//! `report --sweep`) say that a missing database is missing instead of creating an empty one.
//!
//! The model server never answers the first request (600 s delay), so the sweep's trials are
//! still running when the database goes away.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use wiremock::MockServer;

use anvil_test_support::databases;
use anvil_test_support::sweep as support;

/// What the issue allows between losing the database and the run ending.
const LIMIT: Duration = Duration::from_secs(15);

struct Home {
    dir: tempfile::TempDir,
    tasks: PathBuf,
}

impl Home {
    fn new(server: &MockServer) -> Home {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("cfg/anvil");
        std::fs::create_dir_all(&cfg).unwrap();
        std::fs::write(cfg.join("config.toml"), support::config(server)).unwrap();
        let tasks = dir.path().join("tasks");
        support::task(&tasks, "t1");
        Home { dir, tasks }
    }

    fn sqlite(&self) -> PathBuf {
        self.dir.path().join("data/queue.db")
    }

    fn command(&self, queue: &str, args: &[&str]) -> Command {
        let mut c = support::evals_command(self.dir.path(), args);
        c.args(["--queue", queue]);
        c
    }

    /// `anvil-evals run` on `queue`, its output captured.
    fn start_run(&self, queue: &str, sweep: &str) -> Run {
        let tasks = self.tasks.join("*").display().to_string();
        let child = self
            .command(
                queue,
                &[
                    "run",
                    "--tasks",
                    &tasks,
                    "--models",
                    "good,bad",
                    "--trials",
                    "1",
                    "--concurrency",
                    "2",
                    "--sweep",
                    sweep,
                    "--heartbeat-secs",
                    "1",
                ],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Run(child)
    }
}

/// `anvil-evals run`, killed if the test fails before it ends.
struct Run(Child);

impl Run {
    /// Waits up to `limit` for the run to end; its exit status, stdout and stderr.
    fn wait(mut self, limit: Duration) -> (ExitStatus, String, String) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                let mut out = String::new();
                let mut err = String::new();
                std::io::Read::read_to_string(&mut self.0.stdout.take().unwrap(), &mut out)
                    .unwrap();
                std::io::Read::read_to_string(&mut self.0.stderr.take().unwrap(), &mut err)
                    .unwrap();
                return (status, out, err);
            }
            if started.elapsed() >= limit {
                let _ = self.0.kill();
                let _ = self.0.wait();
                let mut err = String::new();
                let _ = std::io::Read::read_to_string(&mut self.0.stderr.take().unwrap(), &mut err);
                panic!("the run did not stop within {limit:?}; its stderr:\n{err}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Waits until an agent of the run has sent its first request (a trial is mid-run).
async fn a_trial_is_running(server: &MockServer, run: Run) -> Run {
    let started = Instant::now();
    while server
        .received_requests()
        .await
        .unwrap_or_default()
        .is_empty()
    {
        if started.elapsed() > Duration::from_secs(60) {
            let (status, _, stderr) = run.wait(Duration::ZERO);
            panic!("no trial ever reached the model; the run ended {status:?}:\n{stderr}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    run
}

fn agents_running_under(dir: &Path) -> usize {
    let out = Command::new("pgrep")
        .arg("-f")
        .arg(dir.join("anvil-trials"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// The run ended the way a lost database must end it.
fn assert_stopped(
    home: &Home,
    (status, stdout, stderr): &(ExitStatus, String, String),
    says: &[&str],
) {
    let all = format!("exit {status:?}\n--- stdout\n{stdout}\n--- stderr\n{stderr}");
    eprintln!("{all}");
    assert!(!status.success(), "{all}");
    assert_eq!(status.code(), Some(2), "{all}");
    for s in says {
        assert!(stderr.contains(s), "stderr should say {s:?}: {all}");
    }
    assert!(
        stderr.contains("stopped: its results cannot be recorded (no report)"),
        "{all}"
    );
    assert!(
        !stdout.contains("pass@1"),
        "no report is printed as if complete: {all}"
    );
    let started = Instant::now();
    while agents_running_under(home.dir.path()) > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the run's agents are still running"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_sqlite_database_stops_the_run() {
    let server = support::model_server(Duration::from_secs(600)).await;
    let home = Home::new(&server);
    let db = home.sqlite();
    let run = home.start_run(&db.display().to_string(), "del");
    let run = a_trial_is_running(&server, run).await;
    // SQLite would go on writing to the unlinked file: only the path says it is gone.
    for suffix in ["", "-wal", "-shm"] {
        let mut name = db.clone().into_os_string();
        name.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(name));
    }
    let deleted = Instant::now();
    let ended = run.wait(LIMIT);
    assert!(deleted.elapsed() < LIMIT);
    let path = db.display().to_string();
    assert_stopped(&home, &ended, &[&path, "is missing: it was deleted"]);
    assert!(!db.exists(), "the database was not made again");
}

/// Restores what `unwritable` changed, even when the test fails (a tempdir holding an
/// immutable file cannot be removed).
struct Writable(Vec<PathBuf>, bool);

impl Drop for Writable {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        for path in &self.0 {
            if self.1 {
                let _ = Command::new("chattr").arg("-i").arg(path).status();
            }
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755));
        }
    }
}

/// Makes `file` and its directory unwritable: chmod for anyone but root; root ignores modes,
/// so as root the file is also made immutable (`chattr +i`, which binds root too). None when
/// this machine cannot do that (e.g. a file system without the immutable flag).
fn unwritable(file: &Path) -> Option<Writable> {
    use std::os::unix::fs::PermissionsExt;
    let dir = file.parent().unwrap().to_path_buf();
    // The file was made by this process's user (through its child).
    let root = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(file).unwrap()) == 0;
    let guard = Writable(vec![file.to_path_buf(), dir.clone()], root);
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    if root {
        // After the chmod: an immutable file's mode cannot change.
        let status = Command::new("chattr")
            .arg("+i")
            .arg(file)
            .stderr(Stdio::null())
            .status();
        if !status.is_ok_and(|s| s.success()) {
            return None;
        }
    }
    Some(guard)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_sqlite_database_stops_the_run() {
    let server = support::model_server(Duration::from_secs(600)).await;
    let home = Home::new(&server);
    let db = home.sqlite();
    let run = home.start_run(&db.display().to_string(), "ro");
    let run = a_trial_is_running(&server, run).await;
    let Some(_restore) = unwritable(&db) else {
        eprintln!(
            "SKIPPED: running as root on a file system without `chattr +i`: cannot make {} unwritable",
            db.display()
        );
        return;
    };
    let changed = Instant::now();
    let ended = run.wait(LIMIT);
    assert!(changed.elapsed() < LIMIT);
    assert_stopped(
        &home,
        &ended,
        &[&db.display().to_string(), "is not writable"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_postgres_database_stops_the_run() {
    let server = support::model_server(Duration::from_secs(600)).await;
    let home = Home::new(&server);
    let url = &databases::fresh_postgres("lost").await;
    let run = home.start_run(url, "drop");
    let run = a_trial_is_running(&server, run).await;
    databases::drop_postgres(url).await;
    let dropped = Instant::now();
    let ended = run.wait(LIMIT);
    assert!(dropped.elapsed() < LIMIT);
    assert_stopped(&home, &ended, &[url, "was lost"]);
}

/// `anvil-evals worker` (trials enqueued by `run --detach`) stops the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_sqlite_database_stops_a_worker() {
    let server = support::model_server(Duration::from_secs(600)).await;
    let home = Home::new(&server);
    let db = home.sqlite();
    let queue = db.display().to_string();
    let tasks = home.tasks.join("*").display().to_string();
    let out = home
        .command(
            &queue,
            &[
                "run", "--tasks", &tasks, "--models", "good", "--trials", "1", "--detach",
            ],
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let worker = home
        .command(&queue, &["worker", "--heartbeat-secs", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let worker = a_trial_is_running(&server, Run(worker)).await;
    std::fs::remove_file(&db).unwrap();
    let deleted = Instant::now();
    let (status, _, stderr) = worker.wait(LIMIT);
    assert!(deleted.elapsed() < LIMIT);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("worker stopped: its results cannot be recorded")
            && stderr.contains(&format!("{queue} is missing: it was deleted")),
        "{stderr}"
    );
    let started = Instant::now();
    while agents_running_under(home.dir.path()) > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the worker's agents are still running"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_create_a_missing_queue() {
    let server = MockServer::start().await;
    let home = Home::new(&server);
    let db = home.sqlite();
    let queue = db.display().to_string();
    let commands: [&[&str]; 5] = [
        &["status"],
        &["status", "--sweep", "s1"],
        &["export", "--sweep", "s1"],
        &["cancel", "--sweep", "s1"],
        &["report", "--sweep", "s1"],
    ];
    for args in commands {
        let out = home.command(&queue, args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("there is no queue database at {queue}")),
            "{args:?}: {stderr}"
        );
        assert!(
            !db.exists() && !db.parent().unwrap().exists(),
            "{args:?} created the queue"
        );
    }
}
