//! Reports over small results files: infrastructure failures apart, unknown cost shown as
//! unknown, malformed lines named by number, and a paired baseline comparison.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use anvil_report::compare::Verdict;
use anvil_report::record::{Accounting, CheckOutcome, Digests, TamperFinding, Tokens};
use anvil_report::{Metric, ReadOptions, SCHEMA_VERSION, TrialRecord, Trials, render, report};

fn record(
    task: &str,
    model: &str,
    trial: u32,
    pass: Option<bool>,
    cost: Option<f64>,
) -> TrialRecord {
    TrialRecord {
        schema_version: SCHEMA_VERSION,
        sweep: "s1".into(),
        task: task.into(),
        model: model.into(),
        variant: None,
        adaptive: None,
        attempts: Vec::new(),
        trial,
        attempt: 1,
        pass,
        outcome: pass.map(|_| "done".into()),
        infra_error: pass
            .is_none()
            .then(|| "provider unreachable after 5 attempts".into()),
        steps: 4 + trial,
        tokens: Tokens::default(),
        cost_usd: cost,
        accounting: if cost.is_some() {
            Accounting::Reported
        } else {
            Accounting::Unknown
        },
        duration_ms: 1000 * u64::from(trial + 1),
        agent_ms: None,
        check_ms: None,
        session_path: None,
        workspace_path: None,
        digests: Digests::default(),
        anvil_git_sha: "abc".into(),
        check_outcome: None,
        tamper: Vec::new(),
        grader_sandbox: None,
        trace_id: None,
    }
}

/// `passes[task]` trials pass out of 5, for each of `tasks` tasks.
fn jsonl(model: &str, passes: &[u32], cost: Option<f64>) -> String {
    let mut out = String::new();
    for (t, &c) in passes.iter().enumerate() {
        for trial in 0..5 {
            let r = record(&format!("task-{t:02}"), model, trial, Some(trial < c), cost);
            out.push_str(&serde_json::to_string(&r).unwrap());
            out.push('\n');
        }
    }
    out
}

fn trials(text: &str) -> Trials {
    Trials::read(text.as_bytes(), "results.jsonl").unwrap()
}

#[test]
fn per_model_metrics_infra_apart_and_unknown_cost() {
    let mut text = jsonl("alpha", &[5, 3, 0, 5], Some(0.01));
    text.push_str(&jsonl("beta", &[1, 1, 1, 1], None));
    // Two infrastructure failures for beta: never counted as fails.
    for trial in 5..7 {
        text.push_str(
            &serde_json::to_string(&record("task-00", "beta", trial, None, None)).unwrap(),
        );
        text.push('\n');
    }
    let r = report(&trials(&text), &[1, 3], None);
    let alpha = &r.models[0];
    assert_eq!(alpha.model, "alpha");
    assert_eq!(alpha.graded_trials, 20);
    let p1 = &alpha.metrics[0];
    assert_eq!(p1.metric, Metric::PassAt(1));
    assert!((p1.value.unwrap() - (1.0 + 0.6 + 0.0 + 1.0) / 4.0).abs() < 1e-12);
    assert!(p1.ci.is_some() && p1.bootstrap_ci.is_some());
    let names: Vec<Metric> = alpha.metrics.iter().map(|m| m.metric).collect();
    assert_eq!(
        names,
        [Metric::PassAt(1), Metric::PassAt(3), Metric::PassHat(3)]
    );
    // pass^3 for task-01 (n=5, c=3) is C(3,3)/C(5,3) = 0.1.
    let hat = alpha.metrics[2].value.unwrap();
    assert!((hat - (1.0 + 0.1 + 0.0 + 1.0) / 4.0).abs() < 1e-12, "{hat}");
    assert!((alpha.mean_cost_usd.unwrap() - 0.01).abs() < 1e-12);
    let beta = &r.models[1];
    assert_eq!(beta.infra_errors, 2);
    assert_eq!(beta.graded_trials, 20);
    assert_eq!(beta.cells[0].n, 5);
    assert_eq!(beta.cells[0].infra_errors, 2);
    assert_eq!(beta.mean_cost_usd, None);
    assert_eq!(beta.cost_unknown_trials, 20);
    assert_eq!(r.infra_errors_total, 2);
    let table = render::table(&r);
    assert!(table.contains("unknown"), "{table}");
    assert!(
        table.contains("Infrastructure failures (not counted as fails): 2"),
        "{table}"
    );
    insta::assert_snapshot!(table);
}

#[test]
fn a_malformed_line_is_reported_with_its_number() {
    let mut text = jsonl("alpha", &[1], None);
    text.push_str("{not json}\n");
    let err = Trials::read(text.as_bytes(), "results.jsonl").unwrap_err();
    assert_eq!(err.line, 6);
    assert!(
        err.to_string()
            .starts_with("results.jsonl:6: not a trial record"),
        "{err}"
    );
    let wrong_version =
        jsonl("alpha", &[1], None).replacen("\"schema_version\":4", "\"schema_version\":9", 1);
    let err = Trials::read(wrong_version.as_bytes(), "r.jsonl").unwrap_err();
    assert_eq!(err.line, 1);
    assert!(
        err.reason
            .contains("schema_version 9 is not supported (this reporter reads versions 1 to 4)"),
        "{err}"
    );
}

#[test]
fn a_rerun_trial_replaces_its_earlier_attempt() {
    let mut first = record("task-00", "alpha", 0, None, None);
    let mut second = record("task-00", "alpha", 0, Some(true), Some(0.02));
    first.attempt = 1;
    second.attempt = 2;
    let text = format!(
        "{}\n{}\n",
        serde_json::to_string(&second).unwrap(),
        serde_json::to_string(&first).unwrap()
    );
    let r = report(&trials(&text), &[1], None);
    assert_eq!(r.models[0].graded_trials, 1);
    assert_eq!(r.models[0].infra_errors, 0);
    assert!(
        r.infra_errors.is_empty(),
        "a superseded infrastructure failure is not listed: {:?}",
        r.infra_errors
    );
    assert_eq!(
        r.notes,
        [
            "results.jsonl: 1 trial(s) appear with several attempts; each counts once, with its highest attempt",
            "results.jsonl: s1/task-00/alpha#0: attempts 1 (line 2), 2 (line 1); kept attempt 2",
        ]
    );
    let table = render::table(&r);
    assert!(
        table.contains(
            "\n  results.jsonl: s1/task-00/alpha#0: attempts 1 (line 2), 2 (line 1); kept attempt 2"
        ),
        "{table}"
    );
    assert!(render::json(&r).contains("kept attempt 2"));
    assert!(render::html(&r).contains("kept attempt 2"));
}

fn line(r: &TrialRecord) -> String {
    serde_json::to_string(r).unwrap() + "\n"
}

#[test]
fn a_record_with_both_a_verdict_and_an_infra_error_is_refused() {
    let mut both = record("task-00", "alpha", 1, Some(true), None);
    both.infra_error = Some("grader error: check crashed".into());
    let text = line(&record("task-00", "alpha", 0, Some(true), None)) + &line(&both);
    let err = Trials::read(text.as_bytes(), "results.jsonl").unwrap_err();
    assert_eq!(err.line, 2);
    assert_eq!(
        err.to_string(),
        "results.jsonl:2: pass is true but infra_error is set (\"grader error: check crashed\"): \
         a trial is either graded or an infrastructure failure, not both"
    );
    // Read in parallel from a file, the line is still the file's.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("both.jsonl");
    let good = line(&record("task-00", "alpha", 0, Some(true), None));
    let mut text = String::new();
    for trial in 0..999 {
        text.push_str(&line(&record("task-00", "alpha", trial, Some(false), None)));
    }
    both.trial = 5000;
    text.push_str(&line(&both));
    text.push_str(&good.replace("\"trial\":0", "\"trial\":5001"));
    std::fs::write(&path, text).unwrap();
    let err = Trials::read_file(&path).unwrap_err();
    assert_eq!(err.line, 1000, "{err}");
    assert!(
        err.to_string()
            .contains("both.jsonl:1000: pass is true but infra_error is set")
    );
}

#[test]
fn the_same_attempt_twice_is_refused_naming_both_lines() {
    let one = line(&record("task-00", "alpha", 0, Some(true), None));
    let text = one.clone() + &line(&record("task-01", "alpha", 0, Some(true), None)) + &one;
    let err = Trials::read(text.as_bytes(), "twice.jsonl").unwrap_err();
    assert_eq!(err.line, 3);
    assert_eq!(
        err.to_string(),
        "twice.jsonl:3: trial s1/task-00/alpha#0 attempt 1 is also on line 1: a results file \
         holds one record per attempt (was it concatenated twice?)"
    );
}

#[test]
fn trials_of_different_sweeps_are_different_trials() {
    let first = record("task-00", "alpha", 0, Some(true), None);
    let mut second = record("task-00", "alpha", 0, Some(false), None);
    second.sweep = "s2".into();
    let r = report(&trials(&(line(&first) + &line(&second))), &[1], None);
    assert_eq!(r.models[0].graded_trials, 2);
    assert_eq!((r.models[0].cells[0].n, r.models[0].cells[0].c), (2, 1));
    assert!(r.notes.is_empty(), "{:?}", r.notes);
}

fn tampered(
    task: &str,
    model: &str,
    trial: u32,
    pass: bool,
    findings: &[(&str, &str)],
) -> TrialRecord {
    let mut r = record(task, model, trial, Some(pass), Some(0.01));
    r.check_outcome = Some(CheckOutcome::Tampered);
    r.grader_sandbox = Some("bubblewrap+seccomp".into());
    r.tamper = findings
        .iter()
        .map(|(path, kind)| TamperFinding {
            path: path.to_string(),
            kind: kind.to_string(),
            detail: format!("{path} <changed> & flagged"),
        })
        .collect();
    r
}

#[test]
fn tampered_trials_are_fails_reported_apart_with_their_findings() {
    let mut text = jsonl("alpha", &[5, 5], Some(0.01));
    text.push_str(&jsonl("beta", &[2, 0], Some(0.01)));
    // alpha: two of its passes on task-00 were earned by tampering. One says pass=false as the
    // grader writes it; the other claims a pass, which a tampered trial never is.
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut text = String::new();
    for l in &lines {
        let mut r: TrialRecord = serde_json::from_str(l).unwrap();
        if r.model == "alpha" && r.task == "task-00" && r.trial == 1 {
            r = tampered(
                "task-00",
                "alpha",
                1,
                false,
                &[("unittest/__init__.py", "shadows_module")],
            );
        } else if r.model == "alpha" && r.task == "task-00" && r.trial == 3 {
            r = tampered(
                "task-00",
                "alpha",
                3,
                true,
                &[
                    (".cargo/config.toml", "cargo_config"),
                    ("build.rs", "build_script"),
                ],
            );
        }
        text.push_str(&line(&r));
    }
    // A failed trial with findings but no check_outcome (written before outcomes existed).
    let mut fail_with_findings: TrialRecord = record("task-01", "beta", 7, Some(false), None);
    fail_with_findings.tamper = vec![TamperFinding {
        path: "conftest.py".into(),
        kind: "conftest".into(),
        detail: "new conftest.py".into(),
    }];
    text.push_str(&line(&fail_with_findings));
    let r = report(&trials(&text), &[1], None);
    let (alpha, beta) = (&r.models[0], &r.models[1]);
    assert_eq!((alpha.model.as_str(), alpha.tampered), ("alpha", 2));
    assert_eq!(alpha.graded_trials, 10, "tampered trials are graded");
    assert_eq!(
        (alpha.cells[0].c, alpha.cells[0].n, alpha.cells[0].tampered),
        (3, 5, 2)
    );
    assert!((alpha.metrics[0].value.unwrap() - (0.6 + 1.0) / 2.0).abs() < 1e-12);
    assert_eq!((beta.tampered, beta.cells[1].tampered), (1, 1));
    assert_eq!(r.tampered_total, 3);
    assert_eq!(r.tampered.len(), 3);
    assert_eq!(r.tampered[1].findings.len(), 2);
    let table = render::table(&r);
    assert!(table.contains("3/5 (2 tampered)"), "{table}");
    insta::assert_snapshot!("tampered_table", table);
    insta::assert_snapshot!("tampered_json", render::json(&r));
    let html = render::html(&r);
    assert!(
        html.contains("<li><code>.cargo/config.toml</code> cargo_config: .cargo/config.toml &lt;changed&gt; &amp; flagged</li>"),
        "{html}"
    );
    insta::assert_snapshot!(
        "tampered_html",
        html.replace(env!("CARGO_PKG_VERSION"), "<VERSION>")
    );
}

#[test]
fn baseline_regressions_are_flagged_only_when_the_interval_excludes_zero() {
    let tasks = 12;
    let base = jsonl("alpha", &vec![5; tasks], None) + &jsonl("beta", &vec![3; tasks], None);
    // alpha drops on every task; beta moves by noise only.
    let mut beta_now = vec![3u32; tasks];
    beta_now[0] = 4;
    beta_now[1] = 2;
    let now = jsonl("alpha", &vec![2; tasks], None) + &jsonl("beta", &beta_now, None);
    let r = report(&trials(&now), &[1], Some(&trials(&base)));
    let cmp = r.baseline.as_ref().unwrap();
    let alpha = cmp
        .iter()
        .find(|c| c.model == "alpha" && c.metric == Metric::PassAt(1))
        .unwrap();
    assert_eq!(alpha.verdict, Verdict::Regression);
    assert!((alpha.diff + 0.6).abs() < 1e-12);
    assert_eq!(alpha.tasks, tasks);
    assert_eq!((alpha.baseline_trials, alpha.current_trials), (60, 60));
    let beta = cmp
        .iter()
        .find(|c| c.model == "beta" && c.metric == Metric::PassAt(1))
        .unwrap();
    assert_eq!(beta.verdict, Verdict::NoSignificantChange);
    assert!(render::table(&r).contains("REGRESSION"));
}

#[test]
fn json_is_stable_and_html_is_self_contained() {
    let base = jsonl("alpha", &[5, 0, 3], Some(0.5));
    let now = jsonl("alpha", &[4, 1, 3], Some(0.4)) + &jsonl("beta", &[2, 2, 2], None);
    let r = report(&trials(&now), &[1, 2], Some(&trials(&base)));
    insta::assert_snapshot!(render::json(&r));
    let html = render::html(&r);
    assert!(html.starts_with("<!doctype html>"));
    assert!(html.contains("<svg") && html.contains("<rect"));
    for external in ["<script", "src=\"http", "href=\"http", "@import"] {
        assert!(!html.contains(external), "{external}");
    }
    // A url() only ever names something in the file itself (the heatmap legend's gradient).
    assert!(html.matches("url(").count() == html.matches("url(#").count());
}

#[test]
fn a_malformed_line_deep_in_a_file_read_in_parallel_keeps_its_number() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.jsonl");
    let good = |trial| {
        serde_json::to_string(&record("task-00", "alpha", trial, Some(true), None)).unwrap()
    };
    let mut text = String::new();
    for i in 1..=3000 {
        if i == 2345 {
            text.push_str("{\"schema_version\": 1, \"oops\": true}\n");
        } else {
            text.push_str(&good(i));
            text.push('\n');
        }
    }
    std::fs::write(&path, &text).unwrap();
    let err = Trials::read_file(&path).unwrap_err();
    assert_eq!(err.line, 2345, "{err}");
    // And a clean file reads the same in parallel as sequentially.
    std::fs::write(
        &path,
        text.replace("{\"schema_version\": 1, \"oops\": true}", &good(2345)),
    )
    .unwrap();
    let parallel = report(&Trials::read_file(&path).unwrap(), &[1], None);
    let sequential = report(
        &Trials::read(std::fs::read_to_string(&path).unwrap().as_bytes(), "x").unwrap(),
        &[1],
        None,
    );
    assert_eq!(parallel, sequential);
}

/// Records that contradict themselves or carry impossible costs are refused with file:line,
/// never counted.
#[test]
fn contradictory_records_and_impossible_costs_are_refused() {
    let base = r#"{"schema_version":1,"sweep":"s","task":"t","model":"m","trial":0,"attempt":1,"pass":PASS,"outcome":"done","infra_error":null,"steps":1,"tokens":{"input":1,"output":1,"cache_read":0,"cache_write":0},"cost_usd":COST,"accounting":"reported","duration_ms":5,"session_path":null,"digests":{"task":"","repo":"","grader":"","dependencies":"","model_config":""},"anvil_git_sha":"x"EXTRA}"#;
    let line = |pass: &str, cost: &str, extra: &str| {
        base.replace("PASS", pass)
            .replace("COST", cost)
            .replace("EXTRA", extra)
    };
    let read = |text: String| anvil_report::Trials::read(text.as_bytes(), "r.jsonl");
    assert!(read(line("true", "0.5", "")).is_ok());
    for (pass, cost, extra, want) in [
        (
            "true",
            "0.5",
            r#","check_outcome":"failed""#,
            "contradicts itself",
        ),
        (
            "true",
            "0.5",
            r#","check_outcome":"check_timeout""#,
            "contradicts itself",
        ),
        ("true", "-1.0", "", "not a cost"),
        ("true", "1e308", "", "not a cost"),
    ] {
        let err = read(line(pass, cost, extra)).unwrap_err().to_string();
        assert!(err.contains("r.jsonl:1") && err.contains(want), "{err}");
    }
    let without = line("true", "0.5", "").replace(r#","anvil_git_sha":"x""#, "");
    let err = read(without).unwrap_err().to_string();
    assert!(err.contains("anvil_git_sha"), "{err}");
}

/// A version 1 record (written before trials kept transcripts) still reads: its
/// `session_path` was the kept workspace, so it becomes `workspace_path` and names no
/// transcript; a version above 4 is refused.
#[test]
fn version_1_records_read_with_their_workspace_apart_and_newer_ones_are_refused() {
    let v1 = r#"{"schema_version":1,"sweep":"s","task":"t","model":"m","trial":0,"attempt":1,"pass":true,"outcome":"done","infra_error":null,"steps":1,"tokens":{"input":1,"output":1,"cache_read":0,"cache_write":0},"cost_usd":0.5,"accounting":"reported","duration_ms":5,"session_path":"/tmp/anvil-trials/kept.t-m-0-a1-x/workspace","digests":{"task":"","repo":"","grader":"","dependencies":"","model_config":""},"anvil_git_sha":"x"}"#;
    let upgraded = TrialRecord::parse(v1, "old.jsonl", 7).unwrap();
    assert_eq!(upgraded.schema_version, SCHEMA_VERSION);
    assert_eq!(upgraded.session_path, None);
    assert_eq!(
        upgraded.workspace_path.as_deref(),
        Some("/tmp/anvil-trials/kept.t-m-0-a1-x/workspace")
    );
    assert_eq!((upgraded.pass, upgraded.steps), (Some(true), 1));
    // Upgraded, it is a current record as any other.
    let line = serde_json::to_string(&upgraded).unwrap();
    assert!(line.contains(r#""schema_version":4"#), "{line}");
    assert_eq!(TrialRecord::parse(&line, "new.jsonl", 1).unwrap(), upgraded);
    // A v1 null session_path reads too.
    let plain = v1.replace(r#""/tmp/anvil-trials/kept.t-m-0-a1-x/workspace""#, "null");
    let r = TrialRecord::parse(&plain, "old.jsonl", 1).unwrap();
    assert_eq!((r.session_path, r.workspace_path), (None, None));
    // The reporter counts it and shows no transcript for it.
    let with = ReadOptions { transcripts: true };
    let r = report(
        &Trials::read_with(format!("{v1}\n").as_bytes(), "old.jsonl", with).unwrap(),
        &[1],
        None,
    );
    assert_eq!(r.models[0].graded_trials, 1);
    assert!(r.models[0].cells[0].transcripts.is_empty());
    for version in ["5", "0"] {
        let line = v1.replace(
            r#""schema_version":1"#,
            &format!(r#""schema_version":{version}"#),
        );
        let err = TrialRecord::parse(&line, "new.jsonl", 4).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "new.jsonl:4: schema_version {version} is not supported (this reporter reads versions 1 to 4)"
            )
        );
        let err = Trials::read(line.as_bytes(), "new.jsonl").unwrap_err();
        assert!(err.to_string().contains("is not supported"), "{err}");
    }
}

/// Each per-task cell of the HTML report links to its trials' transcripts: relative to the
/// report's directory when it knows where it is written, else as the records name them; a
/// relative path in a results file is relative to that file's directory.
#[test]
fn cells_link_to_their_trials_transcripts() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle");
    std::fs::create_dir_all(&bundle).unwrap();
    let mut lines = String::new();
    for (task, trial, pass, session) in [
        ("task-00", 0, Some(true), Some("task-00/alpha/0.jsonl")),
        ("task-00", 1, Some(false), Some("task-00/alpha/1.jsonl")),
        // An infrastructure failure that left a transcript (its second attempt's).
        ("task-00", 2, None, Some("task-00/alpha/2.attempt-2.jsonl")),
        (
            "task-01",
            0,
            Some(true),
            Some("/elsewhere/s 1/task-01/alpha/0.jsonl"),
        ),
        // No transcript (not on the machine that exported).
        ("task-01", 1, Some(false), None),
    ] {
        let mut r = record(task, "alpha", trial, pass, Some(0.01));
        r.session_path = session.map(str::to_string);
        if pass.is_none() {
            r.attempt = 2;
        }
        lines.push_str(&line(&r));
    }
    let results = bundle.join("records.jsonl");
    std::fs::write(&results, &lines).unwrap();
    let with = ReadOptions { transcripts: true };
    let r = report(&Trials::read_file_with(&results, with).unwrap(), &[1], None);
    let cells = &r.models[0].cells;
    let paths: Vec<(u32, &str)> = cells[0]
        .transcripts
        .iter()
        .map(|t| (t.trial, t.path.as_str()))
        .collect();
    let b = bundle.display().to_string();
    assert_eq!(
        paths,
        [
            (0, format!("{b}/task-00/alpha/0.jsonl").as_str()),
            (1, format!("{b}/task-00/alpha/1.jsonl").as_str()),
            (2, format!("{b}/task-00/alpha/2.attempt-2.jsonl").as_str()),
        ]
    );
    assert_eq!(cells[0].transcripts[2].attempt, 2);
    assert_eq!(cells[1].transcripts.len(), 1);
    assert_eq!(
        cells[0].transcripts[2].result,
        anvil_report::aggregate::TrialResult::InfraError
    );
    // The JSON report stays a summary: the records name the transcripts.
    assert!(!render::json(&r).contains("jsonl"));

    // Written into the bundle: links relative to it (and encoded).
    let html = render::html_at(&r, Some(&bundle));
    assert!(
        html.contains(r#"<a href="task-00/alpha/0.jsonl" title="trial 0 attempt 1">#0</a>&nbsp;✓"#),
        "{html}"
    );
    assert!(
        html.contains(r##"<a href="#transcripts-0">1/2<small>+1 infra</small></a>"##),
        "{html}"
    );
    let up = "../".repeat(bundle.components().count() - 1);
    assert!(
        html.contains(&format!(
            r#"href="{up}elsewhere/s%201/task-01/alpha/0.jsonl""#
        )),
        "{html}"
    );
    insta::assert_snapshot!(
        "transcript_links_html",
        html.replace(&up, "<UP>/")
            .replace(env!("CARGO_PKG_VERSION"), "<VERSION>")
    );
    // Not knowing where it goes: the paths themselves.
    let html = render::html(&r);
    assert!(
        html.contains(&format!(r#"href="{b}/task-00/alpha/1.jsonl""#)),
        "{html}"
    );
    // Read from a stream, a relative path stays as it is.
    let r = report(
        &Trials::read_with(lines.as_bytes(), "r.jsonl", with).unwrap(),
        &[1],
        None,
    );
    assert_eq!(
        r.models[0].cells[0].transcripts[0].path,
        "task-00/alpha/0.jsonl"
    );
    // Not asked for, no transcript is kept (nor linked).
    let r = report(&Trials::read_file(&results).unwrap(), &[1], None);
    assert!(r.models[0].cells.iter().all(|c| c.transcripts.is_empty()));
    assert!(!render::html(&r).contains("Transcripts"));
}

/// Version 3: a trial the sweep's budget did not admit (`budget_exceeded`, `pass` null, no
/// infra error) is listed apart, neither a fail nor an infrastructure failure; the same
/// record as version 2, or with another outcome, is refused as contradicting itself.
#[test]
fn a_trial_not_admitted_is_counted_apart_never_as_a_fail() {
    let mut text = jsonl("alpha", &[1, 0], None);
    let not_admitted = text
        .lines()
        .next()
        .unwrap()
        .replace(r#""pass":true"#, r#""pass":null"#)
        .replace(r#""outcome":"done""#, r#""outcome":"budget_exceeded""#)
        .replace(r#""trial":0"#, r#""trial":7"#);
    assert!(not_admitted.contains(r#""pass":null"#), "{not_admitted}");
    let parsed = TrialRecord::parse(&not_admitted, "r.jsonl", 1).unwrap();
    assert!(parsed.not_admitted() && parsed.counted_pass().is_none());
    text.push_str(&not_admitted);
    text.push('\n');
    let r = report(
        &Trials::read(text.as_bytes(), "r.jsonl").unwrap(),
        &[1],
        None,
    );
    assert_eq!(r.not_admitted_total, 1);
    assert_eq!(r.infra_errors_total, 0);
    let graded_before = report(
        &Trials::read(jsonl("alpha", &[1, 0], None).as_bytes(), "r.jsonl").unwrap(),
        &[1],
        None,
    );
    assert_eq!(
        r.models[0].graded_trials,
        graded_before.models[0].graded_trials
    );
    assert_eq!(r.models[0].metrics, graded_before.models[0].metrics);
    let table = render::table(&r);
    assert!(
        table.contains("Not admitted by the sweep's budget"),
        "{table}"
    );
    for bad in [
        not_admitted.replace(r#""schema_version":4"#, r#""schema_version":2"#),
        not_admitted.replace("budget_exceeded", "done"),
    ] {
        let err = Trials::read(format!("{bad}\n").as_bytes(), "r.jsonl").unwrap_err();
        assert!(err.reason.contains("pass is null"), "{err}");
    }
}

/// `passes[task]` of 5 trials pass; each record carries `grader` as its grader digest.
fn jsonl_digests(model: &str, passes: &[u32], grader: &str) -> String {
    let mut out = String::new();
    for (t, &c) in passes.iter().enumerate() {
        for trial in 0..5 {
            let mut r = record(&format!("task-{t:02}"), model, trial, Some(trial < c), None);
            r.digests = Digests {
                task: format!("task-{t}"),
                repo: "repo".into(),
                grader: if t == 0 { grader.into() } else { "g".into() },
                dependencies: "deps".into(),
                model_config: String::new(),
            };
            out.push_str(&serde_json::to_string(&r).unwrap());
            out.push('\n');
        }
    }
    out
}

/// A task whose grader changed since the baseline measures something else: it is left out of
/// the comparison (and the report says so), the other tasks are still compared.
#[test]
fn a_baseline_is_compared_only_on_tasks_whose_digests_match() {
    // task-00 went from 0/5 to 5/5, but its grader changed: not a real improvement.
    let base = jsonl_digests("alpha", &[0, 3, 3, 3], "old-grader");
    let now = jsonl_digests("alpha", &[5, 3, 3, 3], "new-grader");
    let r = report(&trials(&now), &[1], Some(&trials(&base)));
    let c = &r.baseline.as_ref().unwrap()[0];
    assert_eq!(c.tasks, 3, "task-00 left out");
    assert_eq!(c.diff, 0.0);
    assert_eq!(r.baseline_excluded.len(), 1);
    assert_eq!(r.baseline_excluded[0].task, "task-00");
    assert_eq!(
        r.baseline_excluded[0].reason,
        "its grader/ changed since the baseline (digests differ)"
    );
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("task task-00 left out of the comparison: its grader/ changed")),
        "{:?}",
        r.notes
    );
    let table = render::table(&r);
    assert!(table.contains("Left out of the comparison:"), "{table}");
    // The same digests on both sides: every task compared.
    let same = jsonl_digests("alpha", &[0, 3, 3, 3], "old-grader");
    let r = report(&trials(&same), &[1], Some(&trials(&base)));
    assert_eq!(r.baseline.as_ref().unwrap()[0].tasks, 4);
    assert!(r.baseline_excluded.is_empty());
}

/// Records of one model with two variants are two arms; the report compares the variant with
/// the reference paired by task, with the MDE of the design.
#[test]
fn variants_are_arms_compared_paired_by_task() {
    let mut text = String::new();
    for (variant, passes) in [("control", [1u32, 2, 3, 1]), ("hint", [3, 4, 5, 4])] {
        for (t, &c) in passes.iter().enumerate() {
            for trial in 0..5 {
                let mut r = record(
                    &format!("task-{t:02}"),
                    "alpha",
                    trial,
                    Some(trial < c),
                    None,
                );
                r.variant = Some(variant.into());
                text.push_str(&serde_json::to_string(&r).unwrap());
                text.push('\n');
            }
        }
    }
    let r = report(&trials(&text), &[1], None);
    let labels: Vec<String> = r.models.iter().map(|m| m.label()).collect();
    assert_eq!(labels, ["alpha [control]", "alpha [hint]"]);
    let c = &r.variants[0];
    assert_eq!(
        (c.variant.as_deref(), c.reference.as_deref()),
        (Some("hint"), Some("control"))
    );
    // Per-task differences 0.4, 0.4, 0.4, 0.6: mean 0.45.
    assert!((c.diff - 0.45).abs() < 1e-12, "{}", c.diff);
    assert_eq!(c.verdict, Verdict::Improvement);
    assert!(c.mde.is_some_and(|m| m > 0.0 && m < 0.45), "{:?}", c.mde);
    // Another reference, named.
    let r = anvil_report::report_with(
        &trials(&text),
        &[1],
        anvil_report::ReportOptions {
            reference_variant: Some("hint"),
            ..Default::default()
        },
    );
    assert_eq!(r.variants[0].variant.as_deref(), Some("control"));
    assert_eq!(r.variants[0].verdict, Verdict::Regression);
    assert!(render::table(&r).contains("Variants against their reference"));
}

/// A model alias re-pointed between two sweeps is compared as before, and the report says the
/// comparison is of two configurations.
#[test]
fn a_changed_model_configuration_is_named() {
    let with_config = |text: String, config: &str| -> String {
        text.lines()
            .map(|l| {
                let mut r: TrialRecord = serde_json::from_str(l).unwrap();
                r.digests.model_config = config.into();
                serde_json::to_string(&r).unwrap() + "\n"
            })
            .collect()
    };
    let base = with_config(jsonl("alpha", &[3, 3, 3], None), "config-a");
    let now = with_config(jsonl("alpha", &[3, 3, 3], None), "config-b");
    let r = report(&trials(&now), &[1], Some(&trials(&base)));
    assert_eq!(r.baseline.as_ref().unwrap()[0].tasks, 3, "still compared");
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("alpha ran with another model configuration")),
        "{:?}",
        r.notes
    );
    let same = report(&trials(&base), &[1], Some(&trials(&base)));
    assert!(
        !same.notes.iter().any(|n| n.contains("model configuration")),
        "{:?}",
        same.notes
    );
}

/// `model`'s trials: for each task of `passes`, `n` trials of which the first `passes[task]`
/// pass.
fn cells(model: &str, n: u32, passes: &[u32]) -> String {
    let mut out = String::new();
    for (t, &c) in passes.iter().enumerate() {
        for trial in 0..n {
            let r = record(&format!("task-{t:02}"), model, trial, Some(trial < c), None);
            out.push_str(&line(&r));
        }
    }
    out
}

fn close(i: anvil_report::intervals::Interval, low: f64, high: f64) -> bool {
    (i.low - low).abs() < 1e-12 && (i.high - high).abs() < 1e-12
}

/// When every task has the same rate, the spread over tasks is zero and so would be the
/// clustered interval: the model's interval is then the Wilson interval of its pooled trials
/// (both `ci` and `bootstrap_ci`), never a point. Expected bounds from the Wilson formula
/// (see `intervals::tests::intervals_over_tasks_never_collapse_at_0_or_100_percent`):
/// 0/8 → [0, 0.324407564883880], 8/8 → [0.675592435116120, 1], 4/8 → [0.215216062213878,
/// 0.784783937786122].
#[test]
fn intervals_never_collapse_when_every_task_has_the_same_rate() {
    let mut text = cells("none", 2, &[0, 0, 0, 0]);
    text.push_str(&cells("all", 2, &[2, 2, 2, 2]));
    text.push_str(&cells("half", 4, &[2, 2]));
    // Tasks that differ: 3/8, 4/8, 5/8, 4/8, 4/8 keep the clustered interval.
    text.push_str(&cells("mixed", 8, &[3, 4, 5, 4, 4]));
    let r = report(&trials(&text), &[1], None);
    let pass1 = |model: &str| {
        let m = r.models.iter().find(|m| m.model == model).unwrap();
        let v = &m.metrics[0];
        (v.value.unwrap(), v.ci.unwrap(), v.bootstrap_ci.unwrap())
    };
    let (value, ci, boot) = pass1("none");
    assert_eq!(value, 0.0);
    assert!(close(ci, 0.0, 0.324_407_564_883_880), "{ci:?}");
    assert_eq!(ci, boot);
    let (value, ci, boot) = pass1("all");
    assert_eq!(value, 1.0);
    assert!(close(ci, 0.675_592_435_116_120, 1.0), "{ci:?}");
    assert_eq!(ci, boot);
    let (value, ci, _) = pass1("half");
    assert_eq!(value, 0.5);
    assert!(
        close(ci, 0.215_216_062_213_878, 0.784_783_937_786_122),
        "{ci:?}"
    );
    let (value, ci, boot) = pass1("mixed");
    assert!((value - 0.5).abs() < 1e-15);
    assert!(
        close(ci, 0.390_251_370_864_359, 0.609_748_629_135_641),
        "{ci:?}"
    );
    assert_ne!(ci, boot, "a bootstrap over tasks that differ");
    // The table shows the interval, not a point.
    let table = render::table(&r);
    assert!(table.contains("0.0% [0.0, 32.4]"), "{table}");
    assert!(table.contains("100.0% [67.6, 100.0]"), "{table}");
}

/// A comparison whose every task moved by the same amount has no spread of differences: its
/// interval comes from both sides' pooled trials (Newcombe's method), so 3 tasks going from
/// 8/8 to 7/8 is no significant regression (Fisher's exact test: p ≈ 0.23), and the minimum
/// detectable effect stays unknown rather than 0. Expected bounds (Python, `wilson` as above):
/// d = 21/24 − 1; low = d − √((21/24 − 0.689961187294999)² + (1 − 1)²) = −0.310038812705001;
/// high = d + √((0.956556659198766 − 21/24)² + (1 − 0.862023795325020)²) = 0.035277639476552.
#[test]
fn a_comparison_with_the_same_difference_on_every_task_keeps_a_width() {
    let current = trials(&cells("alpha", 8, &[7, 7, 7]));
    let baseline = trials(&cells("alpha", 8, &[8, 8, 8]));
    let r = report(&current, &[1], Some(&baseline));
    let c = &r.baseline.as_ref().unwrap()[0];
    assert_eq!(c.metric, Metric::PassAt(1));
    assert!((c.diff + 0.125).abs() < 1e-15);
    let ci = c.ci.unwrap();
    assert!(
        close(ci, -0.310_038_812_705_001, 0.035_277_639_476_552),
        "{ci:?}"
    );
    assert_eq!(c.verdict, Verdict::NoSignificantChange);
    assert_eq!(c.mde, None);
    // Both at 0%: a symmetric interval around 0 from 0 of 24 on each side.
    let current = trials(&cells("alpha", 8, &[0, 0, 0]));
    let baseline = trials(&cells("alpha", 8, &[0, 0, 0]));
    let r = report(&current, &[1], Some(&baseline));
    let c = &r.baseline.as_ref().unwrap()[0];
    let ci = c.ci.unwrap();
    assert!(
        (ci.low + 0.137_976_204_674_980).abs() < 1e-12
            && (ci.high - 0.137_976_204_674_980).abs() < 1e-12,
        "{ci:?}"
    );
    assert_eq!(c.verdict, Verdict::NoSignificantChange);
    assert_eq!(c.mde, None);
    // Differences that vary keep the clustered interval and the MDE.
    let current = trials(&cells("alpha", 8, &[2, 5, 8]));
    let baseline = trials(&cells("alpha", 8, &[8, 8, 8]));
    let r = report(&current, &[1], Some(&baseline));
    let c = &r.baseline.as_ref().unwrap()[0];
    assert!(c.mde.is_some() && c.ci.unwrap().low < -0.5, "{c:?}");
}

/// With no k asked for, `report` and `run` show 1, 3 and 5 up to the trials run per task.
#[test]
fn default_ks_follow_the_trials_per_task() {
    use anvil_report::aggregate::trials_per_task;
    use anvil_report::metric::default_ks;
    let two = trials(&cells("alpha", 2, &[1, 2, 0]));
    assert_eq!(trials_per_task(&two), 2);
    assert_eq!(default_ks(trials_per_task(&two)), [1]);
    let five = trials(&jsonl("alpha", &[5, 3], None));
    assert_eq!(default_ks(trials_per_task(&five)), [1, 3, 5]);
    let mut mixed = cells("alpha", 3, &[1, 2]);
    mixed.push_str(&cells("beta", 4, &[1]));
    assert_eq!(default_ks(trials_per_task(&trials(&mixed))), [1, 3]);
    assert_eq!(trials_per_task(&trials("")), 0);
    assert_eq!(default_ks(0), [1]);
}
