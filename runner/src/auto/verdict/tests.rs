use std::path::Path;

use super::*;

/// Four features, F1..F4.
fn contract() -> Contract {
    let features: Vec<String> = (1..=4)
        .map(|i| {
            format!(r#"{{"id":"F{i}","description":"feature {i}","verify":{{"cmd":"check {i}"}}}}"#)
        })
        .collect();
    let text = format!(
        r#"{{"version":1,"test_command":"make test","features":[{}]}}"#,
        features.join(",")
    );
    Contract::parse(Path::new("features.json"), text.as_bytes()).unwrap()
}

fn set(ids: &str) -> BTreeSet<String> {
    ids.split_whitespace().map(String::from).collect()
}

fn list(ids: &str) -> Vec<String> {
    ids.split_whitespace().map(String::from).collect()
}

/// One letter per feature F1..F4: P passed, F failed, T timed out.
fn results(letters: &str) -> BTreeMap<String, CheckOutcome> {
    letters
        .chars()
        .enumerate()
        .map(|(i, c)| {
            let outcome = match c {
                'P' => CheckOutcome::Passed,
                'F' => CheckOutcome::Failed {
                    output: format!("F{} failed in 0.{i}s", i + 1),
                },
                'T' => CheckOutcome::TimedOut {
                    output: String::new(),
                },
                other => panic!("{other}"),
            };
            (format!("F{}", i + 1), outcome)
        })
        .collect()
}

struct Row {
    name: &'static str,
    before: &'static str,
    claimed: &'static str,
    checks: &'static str,
    allow_regressions: bool,
    newly: &'static str,
    unclaimed: &'static str,
    false_claims: &'static str,
    regressions: &'static str,
    merges: bool,
    next: &'static str,
}

#[test]
fn the_verdict_table() {
    let rows = [
        Row {
            name: "claimed and passing",
            before: "",
            claimed: "F1",
            checks: "PFFF",
            allow_regressions: false,
            newly: "F1",
            unclaimed: "",
            false_claims: "",
            regressions: "",
            merges: true,
            next: "F1",
        },
        Row {
            name: "a claim whose check fails verifies nothing",
            before: "",
            claimed: "F1 F2",
            checks: "PFFF",
            allow_regressions: false,
            newly: "F1",
            unclaimed: "",
            false_claims: "F2",
            regressions: "",
            merges: true,
            next: "F1",
        },
        Row {
            name: "implemented but not claimed is verified anyway",
            before: "",
            claimed: "",
            checks: "FPFP",
            allow_regressions: false,
            newly: "F2 F4",
            unclaimed: "F2 F4",
            false_claims: "",
            regressions: "",
            merges: true,
            next: "F2 F4",
        },
        Row {
            name: "a timeout is a fail",
            before: "",
            claimed: "F3",
            checks: "FFTF",
            allow_regressions: false,
            newly: "",
            unclaimed: "",
            false_claims: "F3",
            regressions: "",
            merges: true,
            next: "",
        },
        Row {
            name: "nothing new, nothing broken: merged (progress may be partial)",
            before: "F1",
            claimed: "",
            checks: "PFFF",
            allow_regressions: false,
            newly: "",
            unclaimed: "",
            false_claims: "",
            regressions: "",
            merges: true,
            next: "F1",
        },
        Row {
            name: "breaking a verified feature is not merged",
            before: "F1",
            claimed: "F2",
            checks: "FPFF",
            allow_regressions: false,
            newly: "F2",
            unclaimed: "",
            false_claims: "",
            regressions: "F1",
            merges: false,
            next: "F1",
        },
        Row {
            name: "allowed regressions still need a net gain",
            before: "F1",
            claimed: "F2",
            checks: "FPFF",
            allow_regressions: true,
            newly: "F2",
            unclaimed: "",
            false_claims: "",
            regressions: "F1",
            merges: false,
            next: "F1",
        },
        Row {
            name: "allowed regressions with a net gain are merged",
            before: "F1",
            claimed: "F2 F3",
            checks: "FPPF",
            allow_regressions: true,
            newly: "F2 F3",
            unclaimed: "",
            false_claims: "",
            regressions: "F1",
            merges: true,
            next: "F2 F3",
        },
        Row {
            name: "a re-claimed verified feature that now fails: regression and false claim",
            before: "F1 F2",
            claimed: "F1",
            checks: "FPFF",
            allow_regressions: false,
            newly: "",
            unclaimed: "",
            false_claims: "F1",
            regressions: "F1",
            merges: false,
            next: "F1 F2",
        },
        Row {
            name: "everything verified",
            before: "F1 F2 F3",
            claimed: "F4",
            checks: "PPPP",
            allow_regressions: false,
            newly: "F4",
            unclaimed: "",
            false_claims: "",
            regressions: "",
            merges: true,
            next: "F1 F2 F3 F4",
        },
    ];
    let contract = contract();
    for row in rows {
        let results = results(row.checks);
        let verdict = decide(SessionChecks {
            contract: &contract,
            previously_verified: &set(row.before),
            claimed: &set(row.claimed),
            results: &results,
            allow_regressions: row.allow_regressions,
        })
        .unwrap();
        let name = row.name;
        assert_eq!(verdict.newly_verified, list(row.newly), "{name}: newly");
        assert_eq!(
            verdict.unclaimed_verified,
            list(row.unclaimed),
            "{name}: unclaimed"
        );
        assert_eq!(
            verdict.false_claims,
            list(row.false_claims),
            "{name}: false claims"
        );
        assert_eq!(
            verdict.regressions,
            list(row.regressions),
            "{name}: regressions"
        );
        assert_eq!(
            verdict.merge.merges(),
            row.merges,
            "{name}: {:?}",
            verdict.merge
        );
        assert_eq!(verdict.next_verified, set(row.next), "{name}: next");
        assert_eq!(
            verdict.failing.keys().cloned().collect::<Vec<_>>(),
            results
                .iter()
                .filter(|(_, r)| !r.passed())
                .map(|(id, _)| id.clone())
                .collect::<Vec<_>>(),
            "{name}: failing"
        );
        assert_eq!(
            verdict.failure_fingerprint.is_none(),
            verdict.failing.is_empty(),
            "{name}"
        );
    }
}

#[test]
fn the_reject_reason_names_the_regressions() {
    let contract = contract();
    let verdict = decide(SessionChecks {
        contract: &contract,
        previously_verified: &set("F1 F2"),
        claimed: &set(""),
        results: &results("FFFF"),
        allow_regressions: false,
    })
    .unwrap();
    assert_eq!(
        verdict.merge,
        Merge::Reject {
            reason: "it breaks verified features F1, F2".into()
        }
    );
}

#[test]
fn incomplete_or_foreign_or_infra_results_give_no_verdict() {
    let contract = contract();
    let decide_with = |results: &BTreeMap<String, CheckOutcome>| {
        decide(SessionChecks {
            contract: &contract,
            previously_verified: &set(""),
            claimed: &set(""),
            results,
            allow_regressions: false,
        })
    };
    let mut missing = results("PPPP");
    missing.remove("F3");
    assert_eq!(
        decide_with(&missing),
        Err(VerdictError::MissingResult { id: "F3".into() })
    );
    let mut foreign = results("PPPP");
    foreign.insert("F9".into(), CheckOutcome::Passed);
    assert_eq!(
        decide_with(&foreign),
        Err(VerdictError::UnknownFeature { id: "F9".into() })
    );
    let mut infra = results("PPPP");
    infra.insert(
        "F2".into(),
        CheckOutcome::Infra {
            reason: "no sandbox".into(),
        },
    );
    assert_eq!(
        decide_with(&infra),
        Err(VerdictError::Infra {
            id: "F2".into(),
            reason: "no sandbox".into()
        })
    );
}

#[test]
fn the_failure_fingerprint_ignores_timings_but_not_what_failed() {
    let contract = contract();
    let fingerprint_of = |results: &BTreeMap<String, CheckOutcome>| {
        decide(SessionChecks {
            contract: &contract,
            previously_verified: &set(""),
            claimed: &set(""),
            results,
            allow_regressions: false,
        })
        .unwrap()
        .failure_fingerprint
    };
    let with = |output: &str| {
        let mut r = results("PPPP");
        r.insert(
            "F1".into(),
            CheckOutcome::Failed {
                output: output.into(),
            },
        );
        r
    };
    let a = fingerprint_of(&with("assertion failed in 0.12s"));
    assert!(a.is_some());
    assert_eq!(a, fingerprint_of(&with("assertion failed in 3.4s")));
    assert_ne!(a, fingerprint_of(&with("expected 2, got 3 in 0.12s")));
    let mut other_feature = results("PPPP");
    other_feature.insert(
        "F2".into(),
        CheckOutcome::Failed {
            output: "assertion failed in 0.12s".into(),
        },
    );
    assert_ne!(a, fingerprint_of(&other_feature));
    assert_eq!(fingerprint_of(&results("PPPP")), None);
}

#[test]
fn fail_before_finds_vacuous_checks() {
    let contract = contract();
    assert_eq!(fail_before(&contract, &results("FFTF")), Ok(vec![]));
    assert_eq!(
        fail_before(&contract, &results("PFFP")),
        Ok(vec!["F1".to_string(), "F4".to_string()])
    );
    let mut missing = results("FFFF");
    missing.remove("F4");
    assert_eq!(
        fail_before(&contract, &missing),
        Err(VerdictError::MissingResult { id: "F4".into() })
    );
}
