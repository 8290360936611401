//! `kill -9` of `anvil auto run` mid-session, during the initializer, and between the
//! session's verdict and the run branch's move; then `anvil auto resume`.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

const HANG: Duration = Duration::from_secs(120);
/// How long a killed worker's job waits for its lease to lapse, and then some.
const RECOVERY: Duration = Duration::from_secs(120);

/// A server whose first session of the kind `initializer` says hangs on its second request
/// (set `hanging` when it does); everything else honest.
async fn hanging_server(initializer: bool, hanging: Arc<AtomicBool>) -> ScriptedServer {
    Script::new(Project::two())
        .serve_with(move |seen, answer| {
            if seen.initializer == initializer
                && seen.after_tool
                && seen.n == 1
                && !hanging.swap(true, Ordering::SeqCst)
            {
                return answer.after(HANG);
            }
            answer
        })
        .await
}

/// Runs `anvil auto run SPEC.md ARGS` until the scripted session hangs, kills it with -9, and
/// resumes the run to its end (exit 0). Returns the machine and the run.
async fn kill_9_while_hanging_then_resume(
    initializer: bool,
    args: &[&str],
) -> (ScriptedServer, Machine, String) {
    let hanging = Arc::new(AtomicBool::new(false));
    let server = hanging_server(initializer, hanging.clone()).await;
    let m = Machine::new(&server, None);
    let mut all = vec!["run", "SPEC.md"];
    all.extend_from_slice(args);
    let mut child = m.spawn(&all);
    let run = child_run_id(&mut child);
    wait_for(RECOVERY, "the session to wait on the model", || {
        hanging.load(Ordering::SeqCst)
    });
    let attempts = m.data(&run).join("attempts");
    assert!(
        !processes_naming(&attempts).is_empty(),
        "the session's agent runs"
    );
    kill_9(&mut child);
    // The killed worker's agent dies with it (its stdout's reader is gone: `anvil -p` cancels
    // its turn): it neither calls the model again nor writes into the attempt's worktree
    // while the next attempt runs.
    wait_for(
        Duration::from_secs(10),
        "the dead worker's agent to die",
        || processes_naming(&attempts).is_empty(),
    );
    let out = m.anvil(&["resume", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    (server, m, run)
}

/// `kill -9` while a worker session waits on the model, then `anvil auto resume`: the session
/// runs again as its next attempt from the last validated commit, the dead attempt's worktree
/// is saved as a patch, and the run completes with one commit per session. The dead attempt's
/// cost is read from its transcript's ledger (the one response it recorded, and the request
/// the kill cut off), so a run with a budget
/// goes on instead of stopping on an unknown cost.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_session_then_resume_runs_the_next_attempt() {
    let (_server, m, run) =
        kill_9_while_hanging_then_resume(false, &["--max-cost-usd", "0.01"]).await;
    let report = m.report(&run);
    assert_eq!(report["state"], "complete", "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[
            (0, 1, "accepted"),
            (1, 1, "dead"),
            (1, 2, "merged"),
            (2, 1, "merged")
        ]),
        "{report:#}"
    );
    // A retried attempt is not a worker session.
    assert_eq!(report["worker_sessions"], 2, "{report:#}");
    // One response of the two every session makes ($0.00051 a session), and the request the
    // kill cut off: charged (its estimate or its whole reservation), never forgotten.
    let dead = report["sessions"][1]["cost_usd"]
        .as_f64()
        .expect("the dead attempt's cost");
    assert!(dead > 0.000255 + 1e-9 && dead < 0.01, "{report:#}");
    assert_eq!(
        m.log(&run),
        [
            "auto(s2): verify F002",
            "auto(s1): verify F001",
            "auto(s0): accept the contract",
            "init"
        ]
    );
    let data = m.data(&run);
    let patch = std::fs::read_to_string(data.join("leftovers/s1a1.patch")).unwrap();
    assert!(patch.contains("a.txt"), "{patch}");
    assert!(!data.join("attempts/s1a1").exists());
    assert_eq!(m.git_out(&["status", "--porcelain"]), "");
}

/// `kill -9` while the initializer waits on the model: the initializer runs again as session
/// 0's next attempt (no session number is reused or skipped), its leftovers are saved, and
/// exactly one contract is accepted.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_during_the_initializer_then_resume_completes() {
    let (_server, m, run) = kill_9_while_hanging_then_resume(true, &[]).await;
    let report = m.report(&run);
    assert_eq!(report["state"], "complete", "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[
            (0, 1, "dead"),
            (0, 2, "accepted"),
            (1, 1, "merged"),
            (2, 1, "merged")
        ]),
        "{report:#}"
    );
    assert_eq!(
        m.log(&run),
        [
            "auto(s2): verify F002",
            "auto(s1): verify F001",
            "auto(s0): accept the contract",
            "init"
        ]
    );
    let accepted = db_events(&m.queue, &run, "contract.accepted").await;
    assert_eq!(accepted.len(), 1, "{accepted:?}");
    let data = m.data(&run);
    let patch = std::fs::read_to_string(data.join("leftovers/s0a1.patch")).unwrap();
    assert!(patch.contains("features.json"), "{patch}");
    assert!(!data.join("attempts/s0a1").exists());
}

/// `kill -9` of the worker after the session's verdict is recorded and before the run branch
/// moved. The pause is a natural one: the branch's reflog is replaced with a FIFO, so git's
/// `update-ref` of the run branch — holding the ref's lock, not yet having moved it — blocks
/// until the test reads the FIFO. With `branch_moved`, the orphaned git is then let through
/// (the branch moved, its record lost); without, it is stopped (SIGTERM: git drops its lock)
/// and the branch stays. Either way, `anvil auto resume` redoes only the merge (nothing is
/// verified again) and the session lands exactly once.
async fn kill_9_between_the_verdict_and_the_merge(branch_moved: bool) {
    let server = Script::new(Project::two()).serve().await;
    let m = Machine::new(&server, None);
    let run = m.detached(&[]);
    let git_dir = m.repo.join(".git");
    let reflog = git_dir.join("logs/refs/heads/auto").join(&run);
    let lock = git_dir.join(format!("refs/heads/auto/{run}.lock"));
    let mut kept = std::fs::read_to_string(&reflog).unwrap();
    std::fs::remove_file(&reflog).unwrap();
    nix::unistd::mkfifo(&reflog, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let read_fifo = |kept: &mut String| {
        let mut fifo = std::fs::File::open(&reflog).unwrap();
        fifo.read_to_string(kept).unwrap();
    };
    let mut child = m.spawn(&["resume", &run]);
    // Session 0's merge goes through.
    wait_for(
        RECOVERY,
        "the contract's merge to wait on the reflog",
        || exists(&lock),
    );
    read_fifo(&mut kept);
    wait_for(RECOVERY, "the contract's merge to finish", || {
        !exists(&lock)
    });
    // Session 1's does not.
    wait_for(RECOVERY, "session 1's merge to wait on the reflog", || {
        exists(&lock)
    });
    let report = m.report(&run);
    assert_eq!(
        rows(&report),
        expect_rows(&[(0, 1, "accepted"), (1, 1, "validated")]),
        "{report:#}"
    );
    kill_9(&mut child);
    let refname = format!("refs/heads/auto/{run}");
    let git = pids_running(&["update-ref", &refname]);
    assert_eq!(git.len(), 1, "one git waiting to move {refname}: {git:?}");
    if branch_moved {
        read_fifo(&mut kept);
    } else {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(git[0]),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
    }
    wait_for(RECOVERY, "the orphaned git to end", || {
        !exists(&lock) && pids_running(&["update-ref", &refname]).is_empty()
    });
    std::fs::remove_file(&reflog).unwrap();
    std::fs::write(&reflog, &kept).unwrap();
    let expected_before: &[&str] = if branch_moved {
        &[
            "auto(s1): verify F001",
            "auto(s0): accept the contract",
            "init",
        ]
    } else {
        &["auto(s0): accept the contract", "init"]
    };
    assert_eq!(m.log(&run), expected_before);

    let out = m.anvil(&["resume", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report = m.report(&run);
    assert_eq!(report["state"], "complete", "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[
            (0, 1, "accepted"),
            (1, 1, "dead"),
            (1, 2, "merged"),
            (2, 1, "merged")
        ]),
        "{report:#}"
    );
    assert_eq!(report["sessions"][2]["verified"], json!(["F001"]));
    // Exactly one merge of session 1, redone from attempt 1's recorded verdict.
    assert_eq!(
        m.log(&run),
        [
            "auto(s2): verify F002",
            "auto(s1): verify F001",
            "auto(s0): accept the contract",
            "init"
        ]
    );
    let redone = db_events(&m.queue, &run, "merge.redone").await;
    assert_eq!(redone.len(), 1, "{redone:?}");
    assert_eq!(redone[0].0["from_attempt"], 1, "{redone:?}");
    assert_eq!(redone[0].1, 1, "{redone:?}");
    // Session 1's features were checked once, by its first attempt.
    let checks: Vec<_> = db_events(&m.queue, &run, "check")
        .await
        .into_iter()
        .filter(|(_, s)| *s == 1)
        .collect();
    assert_eq!(checks.len(), 2, "{checks:?}");
    // The model ran session 1 once.
    assert_eq!(worker_prompts(&server).len(), 2);
    assert_eq!(m.git_out(&["status", "--porcelain"]), "");
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_after_the_verdict_before_the_branch_moved_merges_once() {
    kill_9_between_the_verdict_and_the_merge(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_after_the_branch_moved_before_it_was_recorded_merges_once() {
    kill_9_between_the_verdict_and_the_merge(true).await;
}
