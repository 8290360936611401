//! A finished run as a trial record (`anvil_report::TrialRecord`, the one type
//! `anvil-evals report` reads), so a change to the auto harness is measured like a model: several
//! runs of several specs, pass@k and pass^k with intervals, paired against a baseline.
//!
//! The mapping (sans-IO, [`records`]):
//! - `task`: the spec's file name without its extension and the first 8 hex digits of its
//!   digest (`SPEC@1a2b3c4d`): two specs of one name are two tasks, and an edited spec a new
//!   one; `digests.task` is the whole digest. `model`: the run's model (its alias).
//! - `trial`: the run's place among the exported runs of the same task and model, oldest
//!   first (from 0); `attempt` 1.
//! - `pass`: `true` exactly when the run ended `complete` (the harness verified every feature);
//!   every other terminal state is a fail, except `infra_failed` and `cancelled`, which are
//!   `infra_error`s (reported apart, never a fail). Runs still running are not records.
//! - `outcome`: the run's terminal state; `steps`: its sessions (initializer and workers, every
//!   attempt); `tokens`: not recorded by runs (zero); `cost_usd`: the sum of its sessions' costs,
//!   `null` with `accounting` `unknown` when any session's cost is unknown.
//! - `duration_ms`: from the run's creation to its last session's end; `session_path`: the last
//!   session's transcript.
//! - `digests`: `task` the spec, `repo` the commit the run started from, `grader` the accepted
//!   contract's digest, `model_config` the sha256 of the pinned model.
//! - `tamper`: what the verify step refused in any of the run's sessions — the eval grader's
//!   tamper findings (`validator.tamper`) and files planted in place of the protected tests
//!   or the runner (`validator.protected_shadow`, kind `protected_shadow`) — each `detail`
//!   naming its session, so the reporter counts the run as tampered like a trial.

use std::collections::BTreeMap;
use std::path::Path;

use anvil_report::record::{
    Accounting, Digests, SCHEMA_VERSION, TamperFinding, Tokens, TrialRecord,
};
use sha2::{Digest, Sha256};

use crate::auto::run_state::Terminal;
use crate::auto::store::{EventRow, RunRow, SessionRow};

/// One run as the queue database holds it.
#[derive(Debug, Clone)]
pub struct RunHistory {
    pub run: RunRow,
    pub sessions: Vec<SessionRow>,
    pub events: Vec<EventRow>,
}

/// The records of the finished runs among `runs`, oldest first, under the sweep name
/// `sweep`. Runs still running are left out.
pub fn records(runs: &[RunHistory], sweep: &str, anvil_git_sha: &str) -> Vec<TrialRecord> {
    let mut finished: Vec<&RunHistory> =
        runs.iter().filter(|h| h.run.terminal().is_some()).collect();
    finished
        .sort_by(|a, b| (a.run.created_at_ms, &a.run.id).cmp(&(b.run.created_at_ms, &b.run.id)));
    let mut trials: BTreeMap<(String, String), u32> = BTreeMap::new();
    finished
        .into_iter()
        .filter_map(|history| {
            let RunHistory {
                run,
                sessions,
                events,
            } = history;
            let terminal = run.terminal()?;
            let task = task_name(&run.spec_path, &run.spec_digest);
            let model = model_name(&run.model);
            let slot = trials.entry((task.clone(), model.clone())).or_insert(0);
            let trial = *slot;
            *slot += 1;
            let mut record = record(
                run,
                sessions,
                terminal,
                sweep,
                task,
                model,
                trial,
                anvil_git_sha,
            );
            record.tamper = tamper(events);
            Some(record)
        })
        .collect()
}

/// What the verify step refused in the run's sessions, as tamper findings.
fn tamper(events: &[EventRow]) -> Vec<TamperFinding> {
    let field = |payload: &serde_json::Value, name: &str| {
        payload
            .get(name)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    events
        .iter()
        .filter_map(|e| {
            let payload: serde_json::Value = serde_json::from_str(&e.payload).ok()?;
            let at = format!("session {} attempt {}", e.session, e.attempt);
            match e.kind.as_str() {
                "validator.tamper" => Some(TamperFinding {
                    path: field(&payload, "path"),
                    kind: field(&payload, "kind"),
                    detail: format!("{at}: {}", field(&payload, "detail")),
                }),
                "validator.protected_shadow" => Some(TamperFinding {
                    path: field(&payload, "path"),
                    kind: "protected_shadow".into(),
                    detail: format!(
                        "{at}: planted where it is imported in place of the protected tests or the runner"
                    ),
                }),
                _ => None,
            }
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn record(
    run: &RunRow,
    sessions: &[SessionRow],
    terminal: Terminal,
    sweep: &str,
    task: String,
    model: String,
    trial: u32,
    anvil_git_sha: &str,
) -> TrialRecord {
    let infra_error = match terminal {
        Terminal::InfraFailed => Some(format!(
            "the run ended infra_failed: {}",
            run.terminal_reason
                .as_deref()
                .unwrap_or("no reason recorded")
        )),
        Terminal::Cancelled => Some("the run was cancelled".to_string()),
        Terminal::Complete
        | Terminal::SessionLimited
        | Terminal::BudgetLimited
        | Terminal::Stalled
        | Terminal::InvalidContract => None,
    };
    let pass = infra_error
        .is_none()
        .then_some(terminal == Terminal::Complete);
    let costs: Option<Vec<f64>> = sessions.iter().map(|s| s.cost_usd).collect();
    let (cost_usd, accounting) = match costs {
        Some(c) => (Some(c.iter().sum()), Accounting::Reported),
        None => (None, Accounting::Unknown),
    };
    let ended = sessions
        .iter()
        .filter_map(|s| s.ended_at_ms)
        .max()
        .unwrap_or(run.created_at_ms);
    let last = sessions.iter().max_by_key(|s| (s.session, s.attempt));
    TrialRecord {
        schema_version: SCHEMA_VERSION,
        sweep: sweep.to_string(),
        task,
        model,
        variant: None,
        adaptive: None,
        attempts: Vec::new(),
        trial,
        attempt: 1,
        pass,
        outcome: Some(terminal.name().to_string()),
        infra_error,
        steps: u32::try_from(sessions.len()).unwrap_or(u32::MAX),
        tokens: Tokens::default(),
        cost_usd,
        accounting,
        duration_ms: u64::try_from(ended.saturating_sub(run.created_at_ms)).unwrap_or(0),
        agent_ms: None,
        check_ms: None,
        session_path: last.and_then(|s| s.transcript.clone()),
        workspace_path: None,
        digests: Digests {
            task: run
                .spec_digest
                .strip_prefix("sha256:")
                .unwrap_or(&run.spec_digest)
                .to_string(),
            repo: run.start_commit.clone(),
            grader: run
                .contract_digest
                .as_deref()
                .map(|d| d.strip_prefix("sha256:").unwrap_or(d).to_string())
                .unwrap_or_default(),
            dependencies: String::new(),
            model_config: hex::encode(Sha256::digest(run.model.as_bytes())),
        },
        anvil_git_sha: anvil_git_sha.to_string(),
        check_outcome: None,
        tamper: Vec::new(),
        grader_sandbox: None,
        trace_id: None,
    }
}

/// The spec's file name without its extension, and its digest's first 8 hex digits
/// (`SPEC.md` → `SPEC@1a2b3c4d`).
fn task_name(spec_path: &str, spec_digest: &str) -> String {
    let stem = Path::new(spec_path)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| spec_path.to_string());
    let hex = spec_digest.strip_prefix("sha256:").unwrap_or(spec_digest);
    format!("{stem}@{}", &hex[..hex.len().min(8)])
}

/// The pinned model's `name` (its alias, or `provider:model`); `unknown` when the stored
/// pinned model has none.
fn model_name(pinned: &str) -> String {
    serde_json::from_str::<serde_json::Value>(pinned)
        .ok()
        .and_then(|v| v.get("name").and_then(|n| n.as_str()).map(str::to_string))
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(id: &str, created: i64, spec: &str, state: &str) -> RunRow {
        RunRow {
            id: id.into(),
            created_at_ms: created,
            repository: "/repo".into(),
            spec_path: spec.into(),
            spec_digest: format!("sha256:{}", "a".repeat(64)),
            contract_digest: Some(format!("sha256:{}", "c".repeat(64))),
            accepted_commit: Some("1".repeat(40)),
            start_commit: "0".repeat(40),
            max_sessions: None,
            max_cost_usd: None,
            allow_regressions: 0,
            max_steps: 50,
            session_timeout_s: 1800,
            model: r#"{"name": "sonnet"}"#.into(),
            data_dir: "/data".into(),
            state: state.into(),
            terminal_reason: Some("why".into()),
            cancel_requested: 0,
            hold_workers: 0,
        }
    }

    fn session(n: i64, cost: Option<f64>, ended: i64) -> SessionRow {
        SessionRow {
            run: "r".into(),
            session: n,
            attempt: 1,
            kind: if n == 0 { "initializer" } else { "worker" }.into(),
            state: "merged".into(),
            flags: String::new(),
            base: None,
            candidate: None,
            merged: None,
            verdict: None,
            verified_delta: None,
            outcome: Some("done".into()),
            cost_usd: cost,
            accounting: None,
            transcript: Some(format!("/data/sessions/s{n}a1.jsonl")),
            worker: None,
            error: None,
            started_at_ms: ended - 10,
            ended_at_ms: Some(ended),
        }
    }

    fn event(session: i64, kind: &str, payload: &str) -> EventRow {
        EventRow {
            id: 0,
            run: "b".into(),
            session,
            attempt: 1,
            kind: kind.into(),
            payload: payload.into(),
            at_ms: 0,
        }
    }

    #[test]
    fn finished_runs_become_trials_numbered_per_spec_and_model() {
        let history = |run, sessions| RunHistory {
            run,
            sessions,
            events: Vec::new(),
        };
        let mut stalled = history(
            run("b", 2_000, "/repo/SPEC.md", "stalled"),
            vec![session(0, Some(0.5), 2_100), session(1, Some(0.25), 2_600)],
        );
        stalled.events = vec![
            event(
                1,
                "validator.tamper",
                r#"{"path": "Cargo.toml", "kind": "test_settings", "detail": "autotests = false"}"#,
            ),
            event(1, "check", r#"{"id": "F001", "outcome": "failed"}"#),
            event(
                2,
                "validator.protected_shadow",
                r#"{"path": "argparse.py"}"#,
            ),
        ];
        let runs = vec![
            stalled,
            history(
                run("a", 1_000, "/repo/SPEC.md", "complete"),
                vec![session(0, Some(1.0), 1_500)],
            ),
            history(run("c", 3_000, "/repo/SPEC.md", "running"), vec![]),
            history(
                run("d", 4_000, "/repo/OTHER.md", "infra_failed"),
                vec![session(0, None, 4_100)],
            ),
            history(run("e", 5_000, "/repo/SPEC.md", "cancelled"), vec![]),
        ];
        let recs = records(&runs, "auto-nightly", "abc123");
        let keys: Vec<(&str, u32, Option<bool>, Option<&str>)> = recs
            .iter()
            .map(|r| (r.task.as_str(), r.trial, r.pass, r.outcome.as_deref()))
            .collect();
        assert_eq!(
            keys,
            [
                ("SPEC@aaaaaaaa", 0, Some(true), Some("complete")),
                ("SPEC@aaaaaaaa", 1, Some(false), Some("stalled")),
                ("OTHER@aaaaaaaa", 0, None, Some("infra_failed")),
                ("SPEC@aaaaaaaa", 2, None, Some("cancelled")),
            ],
            "oldest first, the running one left out"
        );
        let stalled = &recs[1];
        assert_eq!(stalled.sweep, "auto-nightly");
        assert_eq!(stalled.model, "sonnet");
        assert_eq!(stalled.steps, 2);
        assert_eq!(stalled.cost_usd, Some(0.75));
        assert_eq!(stalled.accounting, Accounting::Reported);
        assert_eq!(stalled.duration_ms, 600);
        assert_eq!(
            stalled.session_path.as_deref(),
            Some("/data/sessions/s1a1.jsonl")
        );
        assert_eq!(stalled.digests.task, "a".repeat(64));
        assert_eq!(stalled.digests.grader, "c".repeat(64));
        assert_eq!(stalled.anvil_git_sha, "abc123");
        assert_eq!(stalled.counted_pass(), Some(false));
        let tamper: Vec<(&str, &str)> = stalled
            .tamper
            .iter()
            .map(|t| (t.path.as_str(), t.kind.as_str()))
            .collect();
        assert_eq!(
            tamper,
            [
                ("Cargo.toml", "test_settings"),
                ("argparse.py", "protected_shadow")
            ]
        );
        assert_eq!(
            stalled.tamper[0].detail,
            "session 1 attempt 1: autotests = false"
        );
        assert!(recs[0].tamper.is_empty(), "a run without findings has none");
        let infra = &recs[2];
        assert_eq!(infra.cost_usd, None, "an unknown cost is never 0");
        assert_eq!(infra.accounting, Accounting::Unknown);
        assert!(infra.infra_error.as_deref().unwrap().contains("why"));
        assert_eq!(infra.counted_pass(), None);
        // Every record is one the reporter reads back.
        for r in &recs {
            let line = serde_json::to_string(r).unwrap();
            assert_eq!(&TrialRecord::parse(&line, "export", 1).unwrap(), r);
        }
    }
}
