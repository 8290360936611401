//! A report that graded no trial says why — all infrastructure failures, none admitted by the
//! budget, cancelled, not finished yet, no records at all — in every format, instead of an
//! empty table or a row of zeros.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use anvil_report::coverage::{NoGradedReason, Unrecorded};
use anvil_report::{Report, SCHEMA_VERSION, Trials, render, report};
use serde_json::{Value, json};

/// One record: `kind` `i` an infrastructure failure, `n` not admitted by the budget, `p` a
/// pass.
fn record(task: &str, trial: u32, kind: char) -> String {
    let (pass, outcome, infra) = match kind {
        'i' => (
            None,
            None,
            Some("sandbox setup failed: bwrap: no user namespaces"),
        ),
        'n' => (None, Some("budget_exceeded"), None),
        'p' => (Some(true), Some("done"), None),
        _ => panic!("kind {kind}"),
    };
    json!({
        "schema_version": SCHEMA_VERSION,
        "sweep": "nightly",
        "task": task,
        "model": "alpha",
        "trial": trial,
        "attempt": 1,
        "pass": pass,
        "outcome": outcome,
        "infra_error": infra,
        "steps": 0,
        "tokens": {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0},
        "cost_usd": null,
        "accounting": "unknown",
        "duration_ms": 10,
        "session_path": null,
        "digests": {"task": "", "repo": "", "grader": "", "dependencies": "", "model_config": ""},
        "anvil_git_sha": "abc",
    })
    .to_string()
        + "\n"
}

fn report_of(kinds: &str) -> Report {
    let text: String = kinds
        .chars()
        .enumerate()
        .map(|(i, k)| record(&format!("task-{}", i % 2), i as u32, k))
        .collect();
    report(
        &Trials::read(text.as_bytes(), "r.jsonl").unwrap(),
        &[1],
        None,
    )
}

/// Every format says `message`; none shows the table of models or a per-task table.
fn said_everywhere(r: &Report, message: &str) {
    let table = render::table(r);
    assert!(table.starts_with(message), "{table}");
    assert!(
        !table.contains("pass@1 (95% CI)") && !table.contains("Per task"),
        "{table}"
    );
    let md = render::markdown(r, "r.jsonl", None);
    assert!(md.contains(&format!("**{message}**")), "{md}");
    assert!(
        !md.contains("| model |") && !md.contains("<details>"),
        "{md}"
    );
    let html = render::html(r);
    assert!(
        html.contains(&format!(
            "<p class=\"notice\" id=\"no-graded\">{message}</p>"
        )),
        "{html}"
    );
    assert!(
        !html.contains("<h2>Models</h2>") && !html.contains("class=\"heat\""),
        "{html}"
    );
    let json: Value = serde_json::from_str(&render::json(r)).unwrap();
    assert_eq!(json["no_graded"]["message"], message);
    assert_eq!(json["graded_total"], 0);
}

#[test]
fn all_infrastructure_failures() {
    let r = report_of("iii");
    let why = r.coverage.no_graded.clone().unwrap();
    assert_eq!(why.reason, NoGradedReason::InfraErrors);
    assert_eq!(why.infra_errors, 3);
    let message = "No trial was graded: all 3 trials were infrastructure failures (the \
                   provider, the sandbox, the workspace or the grader failed; the model was \
                   not judged).";
    said_everywhere(&r, message);
    // The failures themselves are still listed, in every format that lists them.
    assert!(render::table(&r).contains("sandbox setup failed"));
    assert!(
        render::html(&r).contains("<h2>Infrastructure failures (3), not counted as fails</h2>")
    );
    let json: Value = serde_json::from_str(&render::json(&r)).unwrap();
    assert_eq!(json["no_graded"]["reason"], "infra_errors");
    assert_eq!(json["infra_errors"].as_array().unwrap().len(), 3);
}

#[test]
fn none_admitted_by_the_budget_and_a_mix() {
    let r = report_of("nn");
    assert_eq!(
        r.coverage.no_graded.as_ref().unwrap().reason,
        NoGradedReason::NotAdmitted
    );
    said_everywhere(
        &r,
        "No trial was graded: the sweep's budget admitted none of its 2 trials (never run).",
    );
    let r = report_of("inn");
    said_everywhere(
        &r,
        "No trial was graded: 1 infrastructure failure and 2 trials not admitted by the sweep's budget.",
    );
}

#[test]
fn no_records_cancelled_or_not_finished() {
    let mut r = report(&Trials::read(&b""[..], "r.jsonl").unwrap(), &[1], None);
    said_everywhere(
        &r,
        "No trial was graded: there are no trial records (no trial has been run yet, or every \
         one was cancelled before it finished).",
    );
    // What the queue knows tells them apart.
    r.account_unrecorded(Unrecorded {
        cancelled: 0,
        unfinished: 6,
    });
    said_everywhere(
        &r,
        "No trial has been graded yet: 6 trials are still queued, running or retrying.",
    );
    r.account_unrecorded(Unrecorded {
        cancelled: 6,
        unfinished: 0,
    });
    assert_eq!(
        r.coverage.no_graded.as_ref().unwrap().reason,
        NoGradedReason::Cancelled
    );
    said_everywhere(
        &r,
        "No trial was graded: the sweep was cancelled before any finished (6 trials cancelled).",
    );
    // With infrastructure failures recorded before the cancel, both are said.
    let mut r = report_of("ii");
    r.account_unrecorded(Unrecorded {
        cancelled: 4,
        unfinished: 0,
    });
    said_everywhere(
        &r,
        "No trial was graded: the sweep was cancelled before any finished (4 trials \
         cancelled, 2 infrastructure failures).",
    );
}

#[test]
fn one_graded_trial_is_a_report_like_any_other() {
    let mut r = report_of("ip");
    assert_eq!(r.coverage.no_graded, None);
    r.account_unrecorded(Unrecorded {
        cancelled: 5,
        unfinished: 1,
    });
    assert_eq!(r.coverage.no_graded, None);
    assert!(render::table(&r).contains("pass@1 (95% CI)"));
    assert!(render::html(&r).contains("<h2>Models</h2>"));
    assert!(!render::json(&r).contains("no_graded"));
    assert_eq!((r.coverage.graded_total, r.coverage.passed_total), (1, 1));
}
