//! How runs end other than complete: a vacuous contract, the no-progress spin,
//! `--max-sessions`, the exact budget, a provider outage (which must not end one), a refused
//! credential (which must), `anvil auto cancel`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// F001's check passes before any work.
fn vacuous() -> Project {
    Project::two().verify("F001", "true")
}

/// `anvil auto init` of a spec whose contract is refused twice ends the run
/// `invalid_contract` with its exit code (14), and no worker session ever starts.
#[tokio::test(flavor = "multi_thread")]
async fn init_of_a_vacuous_contract_exits_invalid_contract() {
    let server = Script::new(vacuous()).serve().await;
    let m = Machine::new(&server, None);
    let out = m.anvil(&["init", "SPEC.md"]);
    assert_eq!(out.status.code(), Some(14), "{}", text(&out));
    let run = run_id(&out);
    let report = m.report(&run);
    assert_eq!(report["state"], "invalid_contract", "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[(0, 1, "rejected"), (1, 1, "rejected")]),
        "{report:#}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("contract accepted"),
        "{}",
        text(&out)
    );
    assert!(worker_prompts(&server).is_empty());
}

/// A contract whose check passes at the init commit is refused, the initializer re-run once
/// with the reason, and refused again: `invalid_contract`, nothing on the run branch.
#[tokio::test(flavor = "multi_thread")]
async fn a_vacuous_check_at_init_twice_is_an_invalid_contract() {
    let server = Script::new(vacuous()).serve().await;
    let m = Machine::new(&server, None);
    let out = m.anvil(&["run", "SPEC.md", "--max-sessions", "5"]);
    assert_eq!(out.status.code(), Some(14), "{}", text(&out));
    let run = run_id(&out);
    let report = m.report(&run);
    assert_eq!(report["state"], "invalid_contract", "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[(0, 1, "rejected"), (1, 1, "rejected")]),
        "{report:#}"
    );
    assert_eq!(report["features_verified"], 0, "{report:#}");
    assert_eq!(report["worker_sessions"], 0, "{report:#}");
    let rejected = db_events(&m.queue, &run, "contract.rejected").await;
    assert_eq!(rejected.iter().map(|(_, s)| *s).collect::<Vec<_>>(), [0, 1]);
    for (payload, _) in &rejected {
        let reason = payload["reason"].as_str().unwrap();
        assert!(
            reason.contains("F001") && reason.contains("vacuous"),
            "{reason}"
        );
    }
    // F001's check passed at the candidate, F002's failed: the evidence is logged.
    let checks = db_events(&m.queue, &run, "check").await;
    let outcome = |id: &str| {
        checks
            .iter()
            .find(|(c, s)| *s == 0 && c["id"] == id)
            .map(|(c, _)| c["outcome"].as_str().unwrap().to_string())
    };
    assert_eq!(outcome("F001").as_deref(), Some("passed"), "{checks:?}");
    assert_eq!(outcome("F002").as_deref(), Some("failed"), "{checks:?}");
    // The re-run initializer was told why.
    let second = server
        .requests()
        .iter()
        .map(first_user_text)
        .filter(|t| t.contains("You are the initializer"))
        .find(|t| t.contains("was refused"))
        .unwrap();
    assert!(second.contains("F001"), "{second}");
    assert_eq!(m.log(&run), ["init"]);
}

/// The initializer's vacuous contract is refused; its re-run (the next session number) writes
/// a sound one, which is accepted, and the run completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_vacuous_check_at_init_reruns_the_initializer_once_with_the_reason() {
    let server = Script::new(Project::two())
        .initializer(|turn| {
            if turn.n == 1 {
                vec![write("features.json", &vacuous().contract_text())]
            } else {
                initialize(turn)
            }
        })
        .serve()
        .await;
    let m = Machine::new(&server, None);
    let out = m.anvil(&["run", "SPEC.md", "--max-sessions", "5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let run = run_id(&out);
    let report = m.report(&run);
    assert_eq!(report["state"], "complete", "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[
            (0, 1, "rejected"),
            (1, 1, "accepted"),
            (2, 1, "merged"),
            (3, 1, "merged")
        ]),
        "{report:#}"
    );
    assert_eq!(report["worker_sessions"], 2, "{report:#}");
    assert_eq!(report["sessions_to_completion"], 2, "{report:#}");
    assert_eq!(
        m.log(&run),
        [
            "auto(s3): verify F002",
            "auto(s2): verify F001",
            "auto(s1): accept the contract",
            "init"
        ]
    );
    assert_eq!(
        db_events(&m.queue, &run, "contract.rejected").await.len(),
        1
    );
}

/// Sessions that change files but verify nothing new, failing the same way each time: the
/// stall breaker ends the run after 3 (the default), long before `--max-sessions`.
#[tokio::test(flavor = "multi_thread")]
async fn a_no_progress_spin_stalls_after_three_sessions() {
    let server = Script::new(Project::two())
        .worker(|turn| {
            vec![
                overwrite("scratch.txt", &format!("attempt {}", turn.n)),
                overwrite("progress.md", &format!("tried again ({})", turn.n)),
            ]
        })
        .serve()
        .await;
    let m = Machine::new(&server, None);
    let out = m.anvil(&["run", "SPEC.md", "--max-sessions", "10"]);
    assert_eq!(out.status.code(), Some(12), "{}", text(&out));
    let run = run_id(&out);
    let report = m.report(&run);
    assert_eq!(report["state"], "stalled", "{report:#}");
    let reason = report["terminal_reason"].as_str().unwrap();
    assert!(reason.contains("same failing output"), "{reason}");
    assert_eq!(
        rows(&report),
        expect_rows(&[
            (0, 1, "accepted"),
            (1, 1, "merged"),
            (2, 1, "merged"),
            (3, 1, "merged")
        ]),
        "{report:#}"
    );
    assert_eq!(report["worker_sessions"], 3, "{report:#}");
    assert_eq!(report["stalled_sessions"], 3, "{report:#}");
    assert_eq!(report["features_verified"], 0, "{report:#}");
    assert_eq!(report["false_claims"], json!([]), "{report:#}");
    // The diffs landed (they are work, just not progress), each verifying nothing.
    assert_eq!(
        m.log(&run),
        [
            "auto(s3): no feature verified",
            "auto(s2): no feature verified",
            "auto(s1): no feature verified",
            "auto(s0): accept the contract",
            "init"
        ]
    );
    assert_eq!(m.show(&run, "scratch.txt").trim(), "attempt 3");
}

const THREE: &str = "Three files: a.txt holding A, b.txt holding B, c.txt holding C.\n";

/// `--max-cost-usd` exactly what three sessions cost: the initializer and two workers run
/// (the second fits to the cent — to the last digit), the third worker is not admitted, and
/// nothing was spent past the budget. Resuming with a larger budget continues.
#[tokio::test(flavor = "multi_thread")]
async fn an_exact_budget_stops_before_the_session_that_would_pass_it() {
    let server = Script::new(Project::new(THREE, &["F001", "F002", "F003"]))
        .serve()
        .await;
    let m = Machine::with_specs(&server, None, &[("SPEC.md", THREE)]);
    // 3 × SESSION_USD, as a user types it.
    let out = m.anvil(&["run", "SPEC.md", "--max-cost-usd", "0.00153"]);
    assert_eq!(out.status.code(), Some(11), "{}", text(&out));
    let run = run_id(&out);
    let report = m.report(&run);
    assert_eq!(report["state"], "budget_limited", "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[(0, 1, "accepted"), (1, 1, "merged"), (2, 1, "merged")]),
        "{report:#}"
    );
    for s in report["sessions"].as_array().unwrap() {
        let cost = s["cost_usd"].as_f64().unwrap();
        assert!((cost - SESSION_USD).abs() < 1e-12, "{report:#}");
    }
    let spent = report["cost_usd"].as_f64().unwrap();
    assert!(spent <= 0.00153 + 1e-12, "{report:#}");
    assert_eq!(report["features_verified"], 2, "{report:#}");
    assert_eq!(
        m.log(&run),
        [
            "auto(s2): verify F002",
            "auto(s1): verify F001",
            "auto(s0): accept the contract",
            "init"
        ]
    );
    let out = m.anvil(&["resume", &run, "--max-cost-usd", "0.00204"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report = m.report(&run);
    assert_eq!(report["state"], "complete", "{report:#}");
    assert_eq!(m.log(&run)[0], "auto(s3): verify F003");
}

/// `--max-sessions 2` on three features: two worker sessions run (the initializer is not
/// one), the run ends `session_limited`; resuming with `--max-sessions 3` continues it to
/// complete.
#[tokio::test(flavor = "multi_thread")]
async fn max_sessions_ends_the_run_session_limited_and_a_larger_limit_continues_it() {
    let server = Script::new(Project::new(THREE, &["F001", "F002", "F003"]))
        .serve()
        .await;
    let m = Machine::with_specs(&server, None, &[("SPEC.md", THREE)]);
    let out = m.anvil(&["run", "SPEC.md", "--max-sessions", "2"]);
    assert_eq!(out.status.code(), Some(10), "{}", text(&out));
    let run = run_id(&out);
    let report = m.report(&run);
    assert_eq!(report["state"], "session_limited", "{report:#}");
    assert_eq!(report["worker_sessions"], 2, "{report:#}");
    assert_eq!(report["features_verified"], 2, "{report:#}");
    assert_eq!(report["sessions_to_completion"], json!(null), "{report:#}");
    assert_eq!(m.log(&run).len(), 4);
    let out = m.anvil(&["resume", &run, "--max-sessions", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report = m.report(&run);
    assert_eq!(report["state"], "complete", "{report:#}");
    assert_eq!(report["sessions_to_completion"], 3, "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[
            (0, 1, "accepted"),
            (1, 1, "merged"),
            (2, 1, "merged"),
            (3, 1, "merged")
        ]),
        "{report:#}"
    );
    assert_eq!(m.log(&run)[0], "auto(s3): verify F003");
}

/// The provider answers `status` to the first worker session's requests, more times than
/// `anvil -p` retries: that attempt fails as infrastructure and the session runs again as its
/// next attempt, which counts neither towards `--max-sessions 2` nor the stall breaker: the
/// run completes.
async fn a_provider_outage_is_retried_as_infrastructure_and_not_counted(status: u16, body: &str) {
    /// `anvil -p` tries a request 5 times; the outage outlasts one attempt's tries.
    const OUTAGE: usize = 7;
    let errors = Arc::new(AtomicUsize::new(0));
    let served = errors.clone();
    let body = body.to_string();
    let server = Script::new(Project::two())
        .serve_with(move |seen, answer| {
            if !seen.initializer
                && !seen.after_tool
                && served
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                        (n < OUTAGE).then_some(n + 1)
                    })
                    .is_ok()
            {
                return Answer::error(status, body.clone()).header("retry-after", "0");
            }
            answer
        })
        .await;
    let m = Machine::new(&server, None);
    let out = m.anvil(&["run", "SPEC.md", "--max-sessions", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(errors.load(Ordering::SeqCst), OUTAGE);
    let run = run_id(&out);
    let report = m.report(&run);
    assert_eq!(report["state"], "complete", "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[
            (0, 1, "accepted"),
            (1, 1, "infra_failed"),
            (1, 2, "merged"),
            (2, 1, "merged")
        ]),
        "{report:#}"
    );
    let error = report["sessions"][1]["error"].as_str().unwrap();
    assert!(error.contains("provider"), "{error}");
    assert_eq!(report["worker_sessions"], 2, "{report:#}");
    assert_eq!(report["stalled_sessions"], 0, "{report:#}");
    assert_eq!(
        m.log(&run),
        [
            "auto(s2): verify F002",
            "auto(s1): verify F001",
            "auto(s0): accept the contract",
            "init"
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_outage_of_529s_is_retried_as_infrastructure_and_not_counted() {
    a_provider_outage_is_retried_as_infrastructure_and_not_counted(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_outage_of_500s_is_retried_as_infrastructure_and_not_counted() {
    a_provider_outage_is_retried_as_infrastructure_and_not_counted(
        500,
        r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
    )
    .await;
}

/// `anvil auto cancel RUN` while a worker session's command runs: the session's process
/// group is killed (its command with it), the run ends `cancelled`, and `anvil auto run`
/// exits 13.
#[tokio::test(flavor = "multi_thread")]
async fn cancel_of_a_running_run_kills_the_session_and_ends_it_cancelled() {
    // A number no other test sleeps for: the test finds the command by it.
    const SLEEP: &[&str] = &["sleep", "3131"];
    let server = Script::new(Project::two())
        .worker(|_| vec![bash("sleep", &SLEEP.join(" "))])
        .serve()
        .await;
    let m = Machine::new(&server, None);
    let mut child = m.spawn(&["run", "SPEC.md"]);
    let run = child_run_id(&mut child);
    wait_for(
        Duration::from_secs(120),
        "the worker session's command to run",
        || !pids_running(SLEEP).is_empty(),
    );
    // The session's agent, `anvil -p` with the attempt's config.
    let config = m.data(&run).join("attempts/s1a1.config.json");
    let config = config.to_str().unwrap();
    assert_eq!(pids_running(&["--pinned-config", config]).len(), 1);
    let out = m.anvil(&["cancel", &run]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(13));
    wait_for(
        Duration::from_secs(60),
        "the session's agent and its command to be killed",
        || pids_running(SLEEP).is_empty() && pids_running(&["--pinned-config", config]).is_empty(),
    );
    let report = m.report(&run);
    assert_eq!(report["state"], "cancelled", "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[(0, 1, "accepted"), (1, 1, "cancelled")]),
        "{report:#}"
    );
    assert_eq!(m.log(&run), ["auto(s0): accept the contract", "init"]);
    assert!(!m.data(&run).join("attempts/s1a1").exists());
    // A cancelled run does not resume.
    let out = m.anvil(&["resume", &run]);
    assert_eq!(out.status.code(), Some(13), "{}", text(&out));
}

/// The provider refuses the credentials from the first worker session on: a persistent
/// infrastructure failure ends the run `infra_failed` at once — not a session the model had,
/// not three of them stalled.
#[tokio::test(flavor = "multi_thread")]
async fn a_persistent_auth_error_ends_the_run_infra_failed() {
    let server = Script::new(Project::two())
        .serve_with(|seen, answer| {
            if seen.initializer {
                return answer;
            }
            Answer::error(
                401,
                r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
            )
        })
        .await;
    let m = Machine::new(&server, None);
    let out = m.anvil(&["run", "SPEC.md", "--max-sessions", "5"]);
    assert_eq!(out.status.code(), Some(15), "{}", text(&out));
    let run = run_id(&out);
    let report = m.report(&run);
    assert_eq!(report["state"], "infra_failed", "{report:#}");
    assert_eq!(
        rows(&report),
        expect_rows(&[(0, 1, "accepted"), (1, 1, "infra_failed")]),
        "{report:#}"
    );
    let error = report["sessions"][1]["error"].as_str().unwrap();
    assert!(
        error.contains("the provider refused the request (HTTP 401)")
            && error.contains("invalid x-api-key")
            && error.contains("check model"),
        "{error}"
    );
    assert_eq!(report["worker_sessions"], 0, "{report:#}");
    assert_eq!(m.log(&run), ["auto(s0): accept the contract", "init"]);
}
