//! The happy path, and two runs in one repository.

use std::path::Path;

use serde_json::json;

use super::*;

/// The happy path on `queue` (None: a SQLite file in the home).
async fn happy_path(queue: Option<String>) {
    let server = Script::new(Project::two()).serve().await;
    let m = Machine::new(&server, queue);
    let head_before = m.git_out(&["rev-parse", "HEAD"]);
    let out = m.anvil(&["run", "SPEC.md", "--max-sessions", "5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let run = run_id(&out);
    let report = m.report(&run);
    assert_eq!(report["state"], "complete", "{report:#}");
    assert_eq!(report["features_verified"], 2, "{report:#}");
    assert_eq!(report["worker_sessions"], 2, "{report:#}");
    assert_eq!(report["sessions_to_completion"], 2, "{report:#}");
    assert_eq!(report["false_claims"], json!([]), "{report:#}");
    assert_eq!(report["rejected_edits"], json!([]), "{report:#}");
    assert_eq!(report["protected_edits"], json!([]), "{report:#}");
    assert_eq!(report["regressions"], json!([]), "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[(0, 1, "accepted"), (1, 1, "merged"), (2, 1, "merged")]),
        "{report:#}"
    );
    // One commit per session on the run branch, with the trailers; the user's checkout as it was.
    assert_eq!(
        m.log(&run),
        [
            "auto(s2): verify F002",
            "auto(s1): verify F001",
            "auto(s0): accept the contract",
            "init"
        ]
    );
    let last = m.git_out(&["log", "-1", "--format=%B", &format!("auto/{run}")]);
    for trailer in [
        format!("Anvil-Run: {run}"),
        "Anvil-Session: 2".to_string(),
        "Anvil-Verified: F002".to_string(),
        "Anvil-Cost: ".to_string(),
    ] {
        assert!(last.contains(&trailer), "{trailer} in {last}");
    }
    assert_eq!(m.passing(&run), ["F001", "F002"]);
    let features: Value = serde_json::from_str(&m.show(&run, "features.json")).unwrap();
    assert!(
        features["spec_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    m.assert_checkout_untouched(&head_before);
    // Every session kept its transcript, and `anvil replay` reads it.
    for s in report["sessions"].as_array().unwrap() {
        let path = Path::new(s["transcript"].as_str().unwrap());
        assert!(path.is_file(), "{}", path.display());
        let out = m
            .home
            .command(bins::built("anvil"))
            .arg("replay")
            .arg(path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    }
    // The second worker's first request carried the status block.
    let second_worker = &worker_prompts(&server)[1];
    assert!(
        second_worker.contains("Verified (1):\n- F001"),
        "{second_worker}"
    );
    assert!(
        second_worker.contains("auto(s1): verify F001"),
        "{second_worker}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn happy_path_completes_with_a_commit_per_session_on_sqlite() {
    happy_path(None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn happy_path_completes_on_postgres() {
    let url = anvil_test_support::databases::fresh_postgres("auto_happy").await;
    happy_path(Some(url.clone())).await;
    anvil_test_support::databases::drop_postgres(&url).await;
}

/// Two specs in one checkout, run at once by two `anvil auto run` processes on one queue:
/// two runs with their own branch, rows, data and worktrees, both complete (whichever
/// process's worker ran which session), and neither's commits are on the other's branch.
#[tokio::test(flavor = "multi_thread")]
async fn two_runs_in_one_repository_keep_apart_and_both_complete() {
    const OTHER: &str = "Two more files: x.txt holding X, y.txt holding Y.\n";
    let server = Script::projects(vec![Project::two(), Project::new(OTHER, &["G001", "G002"])])
        .serve()
        .await;
    let m = Machine::with_specs(&server, None, &[("SPEC.md", SPEC), ("OTHER.md", OTHER)]);
    let head = m.git_out(&["rev-parse", "HEAD"]);
    let mut first = m.spawn(&["run", "SPEC.md", "--max-sessions", "4"]);
    let mut second = m.spawn(&["run", "OTHER.md", "--max-sessions", "4"]);
    let (a, b) = (child_run_id(&mut first), child_run_id(&mut second));
    assert_ne!(a, b);
    for (child, run) in [(&mut first, &a), (&mut second, &b)] {
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(0), "run {run}: {:#}", m.report(run));
    }
    for (run, ids, other) in [(&a, ["F001", "F002"], "G00"), (&b, ["G001", "G002"], "F00")] {
        let report = m.report(run);
        assert_eq!(report["state"], "complete", "{report:#}");
        assert_eq!(report["features_verified"], 2, "{report:#}");
        let log = m.log(run);
        assert_eq!(log.len(), 4, "{log:?}");
        assert_eq!(log[0], format!("auto(s2): verify {}", ids[1]), "{log:?}");
        assert_eq!(log[1], format!("auto(s1): verify {}", ids[0]), "{log:?}");
        assert!(!log.iter().any(|l| l.contains(other)), "{log:?}");
        assert_eq!(m.passing(run), ids);
        // Each session of this run ran in this run's own directories.
        for s in report["sessions"].as_array().unwrap() {
            let transcript = s["transcript"].as_str().unwrap();
            assert!(
                transcript.starts_with(m.data(run).to_str().unwrap()),
                "{transcript}"
            );
        }
        assert!(!m.data(run).join("attempts").join("s1a1").exists());
        // The tree parked between sessions goes with the run's end.
        assert!(!m.data(run).join("attempts").join("parked").exists());
        assert!(!m.data(run).join("attempts").join("parked.index").exists());
    }
    // Each run's contract is its own spec's.
    assert!(!m.show(&a, "features.json").contains("G001"));
    assert!(!m.show(&b, "features.json").contains("F001"));
    let branches = m.git_out(&["branch", "--list", "--format=%(refname:short)"]);
    let mut branches: Vec<&str> = branches.lines().collect();
    branches.sort();
    // No attempt branch is left behind; the user's branch is whatever `git init` named it.
    assert_eq!(branches.len(), 3, "{branches:?}");
    assert!(
        branches.contains(&format!("auto/{a}").as_str()),
        "{branches:?}"
    );
    assert!(
        branches.contains(&format!("auto/{b}").as_str()),
        "{branches:?}"
    );
    m.assert_checkout_untouched(&head);
}

/// `anvil auto init` runs the initializer only: the contract is accepted on the run branch and
/// the run waits, its workers held (a worker on the queue finds nothing to do); `init` again
/// says so and runs nothing; `anvil auto run` of the same spec goes on from that contract.
#[tokio::test(flavor = "multi_thread")]
async fn init_accepts_the_contract_then_run_goes_on_from_it() {
    let server = Script::new(Project::two()).serve().await;
    let m = Machine::new(&server, None);
    let head = m.git_out(&["rev-parse", "HEAD"]);
    let initializers = || {
        server
            .requests()
            .iter()
            .map(first_user_text)
            .filter(|t| t.contains("You are the initializer"))
            .count()
    };
    let out = m.anvil(&["init", "SPEC.md", "--max-sessions", "5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let run = run_id(&out);
    let said = String::from_utf8_lossy(&out.stderr);
    for part in [
        "contract accepted",
        "2 features",
        "F001",
        "F002",
        "anvil auto run SPEC.md",
    ] {
        assert!(said.contains(part), "{part} in {said}");
    }
    assert_eq!(m.log(&run), ["auto(s0): accept the contract", "init"]);
    let report = m.report(&run);
    assert_eq!(report["state"], "running", "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[(0, 1, "accepted")]),
        "{report:#}"
    );
    let status = m.anvil(&["status"]);
    assert!(
        String::from_utf8_lossy(&status.stdout).contains("(initialized"),
        "{}",
        text(&status)
    );
    // A worker serving the queue for a while starts no session of the held run.
    let mut worker = m
        .home
        .command(bins::built("anvil-evals"))
        .args(["worker", "--queue", &m.queue])
        .env("TMPDIR", m.home.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(3));
    kill_9(&mut worker);
    assert!(worker_prompts(&server).is_empty(), "a worker session ran");
    // (Requests, not sessions: the initializer's session made `before` of them.)
    let before = initializers();
    assert!(before > 0);
    // `init` again: the contract is there; nothing runs.
    let again = m.anvil(&["init", "SPEC.md"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert_eq!(run_id(&again), run);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("has its contract already"),
        "{}",
        text(&again)
    );
    assert_eq!(initializers(), before);
    // `run` goes on with the same run, from the accepted contract.
    let out = m.anvil(&["run", "SPEC.md"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(run_id(&out), run);
    let report = m.report(&run);
    assert_eq!(report["state"], "complete", "{report:#}");
    assert_eq!(report["worker_sessions"], 2, "{report:#}");
    assert_eq!(initializers(), before, "the initializer ran once");
    assert_eq!(
        m.log(&run),
        [
            "auto(s2): verify F002",
            "auto(s1): verify F001",
            "auto(s0): accept the contract",
            "init"
        ]
    );
    m.assert_checkout_untouched(&head);
}

/// Finished runs become trial records that `anvil-evals report` reads: a run of the spec that
/// completes and one stopped by `--max-sessions 1` are two trials of task `SPEC`, one passing
/// (pass@1 0.5 over 2 graded trials); a run still running is left out.
#[tokio::test(flavor = "multi_thread")]
async fn finished_runs_export_as_trials_the_reporter_reads() {
    let server = Script::new(Project::two()).serve().await;
    let m = Machine::new(&server, None);
    let out = m.anvil(&["run", "SPEC.md", "--max-sessions", "5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let complete = run_id(&out);
    let out = m.anvil(&["run", "SPEC.md", "--max-sessions", "1"]);
    assert_eq!(out.status.code(), Some(10), "{}", text(&out));
    let limited = run_id(&out);
    assert_ne!(complete, limited);
    let detached = m.detached(&[]);
    let file = m.home.path().join("auto.jsonl");
    let out = m.anvil(&[
        "export",
        "--sweep",
        "auto-nightly",
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("2 finished runs written (1 still running"),
        "{}",
        text(&out)
    );
    let records: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let keys: Vec<(String, u64, Value, String)> = records
        .iter()
        .map(|r| {
            (
                // `SPEC@` and the spec digest's first 8 hex digits.
                r["task"]
                    .as_str()
                    .unwrap()
                    .split('@')
                    .next()
                    .unwrap()
                    .to_string(),
                r["trial"].as_u64().unwrap(),
                r["pass"].clone(),
                r["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            ("SPEC".to_string(), 0, json!(true), "complete".to_string()),
            (
                "SPEC".to_string(),
                1,
                json!(false),
                "session_limited".to_string()
            ),
        ]
    );
    let digest = anvil_runner::auto::contract::spec_digest(SPEC.as_bytes());
    assert_eq!(
        records[0]["task"],
        format!("SPEC@{}", &digest.trim_start_matches("sha256:")[..8]),
    );
    assert_eq!(records[0]["model"], "good");
    // A run named twice is one trial.
    let out = m.anvil(&["export", &complete, &complete]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    assert_eq!(records[0]["sweep"], "auto-nightly");
    // Naming a run that is still running is refused.
    let out = m.anvil(&["export", &detached]);
    assert_eq!(out.status.code(), Some(6), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("still running"),
        "{}",
        text(&out)
    );
    let report = m
        .home
        .command(bins::built("anvil-evals"))
        .arg("report")
        .arg(&file)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(report.status.code(), Some(0), "{}", text(&report));
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let model = &report["models"][0];
    assert_eq!(model["model"], "good", "{report:#}");
    assert_eq!(model["graded_trials"], 2, "{report:#}");
    let pass1 = model["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "pass@1")
        .unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(pass1["value"], 0.5, "{report:#}");
}
