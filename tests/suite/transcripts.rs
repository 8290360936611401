//! Trials keep their transcripts, end to end with the real binaries: every trial's agent
//! session is written to the sweep's artifact directory, named by its record's `session_path`,
//! kept when the trial runs out of time, readable by the agent's own loader and by
//! `anvil replay PATH`; `export --with-sessions` gathers the records and transcripts in one
//! directory that `report` links from. (Every record of the full sweep, retries of hung
//! trials and the hiding of the directory from trials are in `sweep.rs` and
//! `hidden_answer.rs`.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use anvil_agent::session::LoadedSession;
use serde_json::Value;

use anvil_test_support::bins;
use anvil_test_support::model_server::ScriptedServer;
use anvil_test_support::sweep as support;

/// The transcript at `path` loads with the agent's own loader, and `anvil replay PATH` on the
/// machine whose home is `home` prints it (exit 0) with the task's prompt in it.
pub(crate) fn assert_readable(home: &Path, path: &Path) -> LoadedSession {
    let loaded = anvil_agent::session::load(path)
        .unwrap_or_else(|e| panic!("the transcript does not load: {e}"));
    let out = Command::new(bins::built("anvil"))
        .arg("replay")
        .arg(path)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("cfg"))
        .env("XDG_DATA_HOME", home.join("data"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "anvil replay {}: {stdout}\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("› Write the answer to answer.txt."),
        "the prompt is in the replay: {stdout}"
    );
    loaded
}

/// A machine with the sweep's config, tasks `names` and its queue in `home/data`.
struct Machine {
    home: tempfile::TempDir,
    tasks: PathBuf,
}

impl Machine {
    fn new(server: &ScriptedServer, names: &[&str]) -> Machine {
        let home = tempfile::tempdir().unwrap();
        let cfg = home.path().join("cfg/anvil");
        std::fs::create_dir_all(&cfg).unwrap();
        std::fs::write(cfg.join("config.toml"), support::config(server)).unwrap();
        let tasks = home.path().join("tasks");
        for name in names {
            support::task(&tasks, name);
        }
        Machine { home, tasks }
    }

    fn evals(&self, args: &[&str]) -> Output {
        let mut c = support::evals_command(self.home.path(), args);
        c.arg("--queue").arg(self.home.path().join("data/queue.db"));
        c.output().unwrap()
    }

    /// Runs sweep `id` of every task on `models`, one trial each; it must complete.
    fn sweep(&self, id: &str, models: &str) {
        let tasks = self.tasks.join("*").display().to_string();
        let out = self.evals(&[
            "run", "--tasks", &tasks, "--models", models, "--trials", "1", "--sweep", id,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }

    fn records(&self, id: &str) -> Vec<Value> {
        let out = self.evals(&["export", "--sweep", id]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        lines(&String::from_utf8_lossy(&out.stdout))
    }

    /// Where the sweep `id`'s transcripts are (no `--workspaces`: under the data dir).
    fn artifacts(&self, id: &str) -> PathBuf {
        self.home.path().join("data/anvil/sweeps").join(id)
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

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A trial whose agent runs past the task's time limit (the model never answers) is the
/// model's fail, `timeout`; its transcript is kept as far as it got, and a torn last line (a
/// kill mid-write) still reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_trial_keeps_its_transcript() {
    let server = support::model_server(Duration::from_secs(600)).await;
    let m = Machine::new(&server, &["t1"]);
    let toml = m.tasks.join("t1/task.toml");
    let spec = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(
        &toml,
        spec.replace("timeout_secs = 120", "timeout_secs = 2"),
    )
    .unwrap();
    m.sweep("slow", "good");
    let recs = m.records("slow");
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(
        (r["outcome"].as_str(), &r["pass"]),
        (Some("timeout"), &Value::Bool(false)),
        "{r}"
    );
    assert_eq!(r["schema_version"], anvil_report::SCHEMA_VERSION, "{r}");
    // Killed at its wall-clock cap mid-request: its cost is its transcript's ledger, the
    // request cut off kept at its reservation, so an estimate, never unknown or 0.
    assert_eq!(r["accounting"], "estimated", "{r}");
    assert!(r["cost_usd"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["workspace_path"].is_null(), "{r}");
    let path = PathBuf::from(r["session_path"].as_str().unwrap());
    assert_eq!(path, m.artifacts("slow").join("t1/good/0.jsonl"));
    let loaded = assert_readable(m.home.path(), &path);
    assert_eq!(
        loaded.first_prompt.as_deref(),
        Some("Write the answer to answer.txt.")
    );
    assert!(loaded.messages.len() == 1, "no answer came: {loaded:?}");
    // A kill in the middle of a write leaves a torn last line: still readable.
    let mut torn = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(
        &mut torn,
        br#"{"v":1,"seq":3,"ts_ms":1,"record":{"kind":"mess"#,
    )
    .unwrap();
    let reread = assert_readable(m.home.path(), &path);
    assert!(reread.torn_bytes > 0);
    assert_eq!(reread.messages, loaded.messages);
}

/// `export --with-sessions DIR` copies every transcript into DIR/<sweep> and writes the records with
/// paths relative to the records file; `report -o` links them relative to the report. A
/// transcript not on this machine is named and its record keeps its path (exit 0); one already
/// in DIR is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_with_sessions_gathers_records_and_transcripts() {
    let server = support::model_server(Duration::ZERO).await;
    let m = Machine::new(&server, &["t1"]);
    m.sweep("gather", "good,bad");
    let h = m.home.path();
    let bundle = h.join("bundle");
    let arg = |p: &Path| p.display().to_string();
    let out = m.evals(&[
        "export",
        "--sweep",
        "gather",
        "--with-sessions",
        &arg(&bundle),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "wrote 2 trial records to {}; 2 transcripts copied into {}",
            bundle.join("gather/records.jsonl").display(),
            bundle.display()
        )),
        "{}",
        text(&out)
    );
    let bundled = lines(&std::fs::read_to_string(bundle.join("gather/records.jsonl")).unwrap());
    let originals = m.records("gather");
    assert_eq!(bundled.len(), 2);
    for (r, original) in bundled.iter().zip(&originals) {
        let model = r["model"].as_str().unwrap();
        assert_eq!(r["session_path"], format!("t1/{model}/0.jsonl"), "{r}");
        let copy = bundle
            .join("gather")
            .join(r["session_path"].as_str().unwrap());
        let source = PathBuf::from(original["session_path"].as_str().unwrap());
        assert_eq!(
            std::fs::read(&copy).unwrap(),
            std::fs::read(&source).unwrap()
        );
        assert_readable(h, &copy);
        // Nothing else of the record changed.
        let mut same = r.clone();
        same["session_path"] = original["session_path"].clone();
        assert_eq!(&same, original);
    }

    // The report written into the bundle links the copies, relative to itself.
    let html = bundle.join("gather/report.html");
    let out = m.evals(&[
        "report",
        &arg(&bundle.join("gather/records.jsonl")),
        "--format",
        "html",
        "-o",
        &arg(&html),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let page = std::fs::read_to_string(&html).unwrap();
    for model in ["good", "bad"] {
        assert!(
            page.contains(&format!(r#"<a href="t1/{model}/0.jsonl""#)),
            "{page}"
        );
    }
    // `report --sweep` without -o links the transcripts where the records say.
    let out = m.evals(&["report", "--sweep", "gather", "--format", "html"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let page = String::from_utf8_lossy(&out.stdout);
    let good = m.artifacts("gather").join("t1/good/0.jsonl");
    assert!(
        page.contains(&format!(r#"<a href="{}""#, good.display())),
        "{page}"
    );

    // A transcript this machine does not have (another worker ran the trial).
    let bad = PathBuf::from(originals[0]["session_path"].as_str().unwrap());
    assert!(bad.ends_with("t1/bad/0.jsonl"), "{}", bad.display());
    std::fs::remove_file(&bad).unwrap();
    let elsewhere = h.join("elsewhere");
    let out = m.evals(&[
        "export",
        "--sweep",
        "gather",
        "--with-sessions",
        &arg(&elsewhere),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "transcript not on this machine: gather/t1/bad#0 (attempt 1): {}",
            bad.display()
        )) && err.contains("1 transcripts copied")
            && err.contains("1 not on this machine (their records keep the original path)"),
        "{err}"
    );
    let recs = lines(&std::fs::read_to_string(elsewhere.join("gather/records.jsonl")).unwrap());
    assert_eq!(recs[0]["session_path"], arg(&bad), "kept as it was");
    assert_eq!(recs[1]["session_path"], "t1/good/0.jsonl");
    // Exported again into the first bundle, which has a copy: that one is used.
    let out = m.evals(&[
        "export",
        "--sweep",
        "gather",
        "--with-sessions",
        &arg(&bundle),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 transcripts copied into")
            && String::from_utf8_lossy(&out.stderr).contains(", 1 already there"),
        "{}",
        text(&out)
    );
    let recs = lines(&std::fs::read_to_string(bundle.join("gather/records.jsonl")).unwrap());
    assert_eq!(recs[0]["session_path"], "t1/bad/0.jsonl");

    // With -o elsewhere, the paths are relative to the records file.
    let apart = h.join("apart/records.jsonl");
    std::fs::create_dir_all(apart.parent().unwrap()).unwrap();
    let out = m.evals(&[
        "export",
        "--sweep",
        "gather",
        "--with-sessions",
        &arg(&bundle),
        "-o",
        &arg(&apart),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let recs = lines(&std::fs::read_to_string(&apart).unwrap());
    assert_eq!(recs[1]["session_path"], "../bundle/gather/t1/good/0.jsonl");
    assert!(
        apart
            .parent()
            .unwrap()
            .join(recs[1]["session_path"].as_str().unwrap())
            .is_file()
    );
}

/// `export --with-sessions` into a DIR others can write: a symlink planted at a transcript's
/// target, at the records file or as a directory is refused and what it points at is left as
/// it was (bytes and mode); a record naming a file outside the sweep's artifact directory
/// gets nothing copied; a file already there with other content is not replaced; two sweeps
/// keep separate files; `-o` through `..` gives paths that resolve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_into_a_shared_dir_writes_through_nothing_planted_there() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let server = support::model_server(Duration::ZERO).await;
    let m = Machine::new(&server, &["t1"]);
    m.sweep("one", "good,bad");
    m.sweep("two", "good,bad");
    let h = m.home.path();
    let arg = |p: &Path| p.display().to_string();
    let shared = h.join("exported");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;

    // Planted: a symlink at a transcript's target, at the records file, as a directory.
    let victim = h.join("victim");
    std::fs::write(&victim, "precious").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let victim_dir = h.join("victim-dir");
    std::fs::create_dir(&victim_dir).unwrap();
    std::fs::create_dir_all(shared.join("one/t1/good")).unwrap();
    symlink(&victim, shared.join("one/t1/good/0.jsonl")).unwrap();
    symlink(&victim, shared.join("one/records.jsonl")).unwrap();
    symlink(&victim_dir, shared.join("one/t1/bad")).unwrap();
    let out = m.evals(&["export", "--sweep", "one", "--with-sessions", &arg(&shared)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("transcript not copied: one/t1/good#0 (attempt 1)")
            && err.contains("transcript not copied: one/t1/bad#0 (attempt 1)")
            && err.contains("0 transcripts copied")
            && err.contains("2 refused"),
        "{err}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert_eq!(mode(&victim), 0o600);
    assert_eq!(std::fs::read_dir(&victim_dir).unwrap().count(), 0);
    let records = shared.join("one/records.jsonl");
    assert!(std::fs::symlink_metadata(&records).unwrap().is_file());
    let originals = m.records("one");
    let recs = lines(&std::fs::read_to_string(&records).unwrap());
    assert_eq!(recs, originals, "refused: every record keeps its path");

    // A record naming a file outside the sweep's artifact directory (even a transcript).
    let outside = h.join("outside.jsonl");
    let two = m.records("two");
    std::fs::copy(two[0]["session_path"].as_str().unwrap(), &outside).unwrap();
    let db = h.join("data/queue.db");
    // Forged in the queue's own database, as a compromised worker could (no sqlite3 CLI
    // needed: a fresh machine has none).
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let forged = sqlx::query(
        "UPDATE anvil_trials SET record = json_set(record, '$.session_path', ?) \
         WHERE sweep = 'two' AND model = 'bad'",
    )
    .bind(outside.display().to_string())
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(forged.rows_affected(), 1);
    pool.close().await;
    let out = m.evals(&["export", "--sweep", "two", "--with-sessions", &arg(&shared)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "transcript not copied: two/t1/bad#0 (attempt 1): {} is not where the sweep keeps",
            outside.display()
        )) && err.contains("1 transcripts copied"),
        "{err}"
    );
    assert!(!shared.join("two/t1/bad").exists());
    let recs = lines(&std::fs::read_to_string(shared.join("two/records.jsonl")).unwrap());
    assert_eq!(recs[0]["session_path"], arg(&outside));
    // The two sweeps keep separate files.
    assert_eq!(recs[1]["session_path"], "t1/good/0.jsonl");
    let copy = shared.join("two/t1/good/0.jsonl");
    assert_eq!(
        std::fs::read(&copy).unwrap(),
        std::fs::read(two[1]["session_path"].as_str().unwrap()).unwrap()
    );
    assert_eq!(mode(&copy), 0o644);
    assert_readable(h, &copy);
    assert!(
        std::fs::symlink_metadata(shared.join("one/t1/good/0.jsonl"))
            .unwrap()
            .is_symlink()
    );

    // `-o ../x/records.jsonl`, from a directory beside x: paths relative to x that resolve.
    let (sub, x) = (h.join("sub"), h.join("x"));
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::create_dir_all(&x).unwrap();
    let mut c = support::evals_command(
        h,
        &[
            "export",
            "--sweep",
            "two",
            "--with-sessions",
            "../exported",
            "-o",
            "../x/records.jsonl",
        ],
    );
    let out = c
        .arg("--queue")
        .arg(&db)
        .current_dir(&sub)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let recs = lines(&std::fs::read_to_string(x.join("records.jsonl")).unwrap());
    assert_eq!(recs[1]["session_path"], "../exported/two/t1/good/0.jsonl");
    assert_readable(h, &x.join(recs[1]["session_path"].as_str().unwrap()));

    // A file already there with other content is not replaced.
    std::fs::write(&copy, "forged\n").unwrap();
    let out = m.evals(&["export", "--sweep", "two", "--with-sessions", &arg(&shared)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("transcript not copied: two/t1/good#0 (attempt 1)")
            && err.contains("already there with other content"),
        "{err}"
    );
    assert_eq!(std::fs::read(&copy).unwrap(), b"forged\n");
}

/// A `--workspaces` directory someone else can change is refused before anything is written:
/// its templates decide what every trial starts from and its `sweeps/` what is believed about
/// them afterwards. Planted as another user would on a shared machine: a world-writable
/// directory whose `sweeps` is a symlink to where the attacker wants root's transcripts, and
/// (as root) a directory owned by `nobody`. A directory of one's own still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspaces_directory_others_can_change_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let server = support::model_server(Duration::ZERO).await;
    let m = Machine::new(&server, &["t1"]);
    let tasks = m.tasks.join("*").display().to_string();
    let victim = m.home.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    let shared = m.home.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::symlink(&victim, shared.join("sweeps")).unwrap();
    let run = |workspaces: &Path, sweep: &str| {
        let ws = workspaces.display().to_string();
        m.evals(&[
            "run",
            "--tasks",
            &tasks,
            "--models",
            "good",
            "--trials",
            "1",
            "--sweep",
            sweep,
            "--workspaces",
            &ws,
        ])
    };
    let out = run(&shared, "planted");
    assert_ne!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&shared.display().to_string())
            && stderr.contains("writable by other users"),
        "the refusal names the directory and why: {stderr}"
    );
    assert_eq!(
        std::fs::read_dir(&victim).unwrap().count(),
        0,
        "nothing written through the link"
    );
    let listed = m.evals(&["status"]);
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains("planted"),
        "no sweep was recorded: {}",
        text(&listed)
    );

    if nix::unistd::geteuid().is_root() {
        let theirs = m.home.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let out = run(&theirs, "owned");
        assert_ne!(out.status.code(), Some(0), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("owned by uid 65534"),
            "{}",
            text(&out)
        );
        assert_eq!(
            std::fs::read_dir(&theirs).unwrap().count(),
            0,
            "{}",
            text(&out)
        );
    } else {
        eprintln!("SKIPPED (not root): a --workspaces directory owned by another user");
    }

    let own = m.home.path().join("own");
    let out = run(&own, "mine");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        own.join("sweeps/mine/t1/good/0.jsonl").is_file(),
        "{}",
        text(&out)
    );
}
