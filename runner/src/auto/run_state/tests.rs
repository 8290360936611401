use std::collections::BTreeSet;

use super::*;
use crate::exit;

fn worker(newly: usize, verified: usize, changed: bool, fp: Option<&str>) -> Event {
    Event::WorkerFinished(WorkerSession {
        newly_verified: newly,
        verified,
        changed_outside_notes: changed,
        failure_fingerprint: fp.map(String::from),
        cost_usd: Some(0.5),
    })
}

fn accepted(features: usize) -> Event {
    Event::ContractAccepted {
        features,
        cost_usd: Some(0.5),
    }
}

fn infra(persistent: bool) -> Event {
    Event::InfraFailed {
        reason: if persistent {
            "401 unauthorized".into()
        } else {
            "503 overloaded".into()
        },
        persistent,
        cost_usd: Some(0.0),
    }
}

#[test]
fn exit_codes_are_distinct_and_clash_with_nothing_anvil_p_uses() {
    let codes: BTreeSet<i32> = Terminal::ALL.iter().map(|t| t.exit_code()).collect();
    assert_eq!(codes.len(), Terminal::ALL.len());
    for t in Terminal::ALL {
        assert_eq!(t.exit_code() == 0, t == Terminal::Complete, "{t:?}");
        assert!(
            EXIT_TABLE.contains(&format!("\n  {:<4} ", t.exit_code())),
            "{t:?} is in the table"
        );
    }
    for used in [
        exit::FAILED,
        exit::MAX_STEPS,
        exit::MAX_TOKENS,
        exit::REFUSED,
        exit::PROTOCOL_STOPPED,
        exit::CONFIG,
        exit::USAGE,
        exit::CANCELLED,
    ] {
        assert!(!codes.contains(&used), "{used} is anvil -p's");
    }
}

/// One scenario: events in, the decision out.
struct Case {
    name: &'static str,
    limits: Limits,
    estimate: Estimate,
    events: Vec<Event>,
    want: Result<(SessionKind, u32, u32), Terminal>,
}

#[test]
fn the_decision_table() {
    let limits = Limits::default();
    let cases = vec![
        Case {
            name: "a new run starts with the initializer",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![],
            want: Ok((SessionKind::Initializer, 0, 1)),
        },
        Case {
            name: "an accepted contract is followed by worker 1",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![accepted(3)],
            want: Ok((SessionKind::Worker, 1, 1)),
        },
        Case {
            name: "a refused contract re-runs the initializer once, as a new session",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![Event::ContractRejected {
                reason: "F1's check passes at the init commit".into(),
                cost_usd: Some(0.1),
            }],
            want: Ok((SessionKind::Initializer, 1, 1)),
        },
        Case {
            name: "refused twice: invalid contract",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![
                Event::ContractRejected {
                    reason: "vacuous".into(),
                    cost_usd: Some(0.1),
                },
                Event::ContractRejected {
                    reason: "vacuous".into(),
                    cost_usd: Some(0.1),
                },
            ],
            want: Err(Terminal::InvalidContract),
        },
        Case {
            name: "complete only when the harness verified every feature",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![
                accepted(2),
                worker(1, 1, true, Some("x")),
                worker(1, 2, true, None),
            ],
            want: Err(Terminal::Complete),
        },
        Case {
            name: "complete on the last allowed session is complete, not session limited",
            limits: Limits {
                max_sessions: Some(1),
                ..limits
            },
            estimate: Estimate::Usd(1.0),
            events: vec![accepted(1), worker(1, 1, true, None)],
            want: Err(Terminal::Complete),
        },
        Case {
            name: "max sessions counts worker sessions only",
            limits: Limits {
                max_sessions: Some(2),
                ..limits
            },
            estimate: Estimate::Usd(1.0),
            events: vec![
                Event::ContractRejected {
                    reason: "r".into(),
                    cost_usd: None,
                },
                accepted(3),
                infra(false),
                worker(1, 1, true, Some("a")),
                infra(false),
                infra(false),
            ],
            want: Ok((SessionKind::Worker, 3, 3)),
        },
        Case {
            name: "max sessions reached",
            limits: Limits {
                max_sessions: Some(2),
                ..limits
            },
            estimate: Estimate::Usd(1.0),
            events: vec![
                accepted(3),
                worker(1, 1, true, Some("a")),
                worker(1, 2, true, Some("b")),
            ],
            want: Err(Terminal::SessionLimited),
        },
        Case {
            name: "infra failures retry the same session as its next attempt",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![accepted(3), infra(false), infra(false)],
            want: Ok((SessionKind::Worker, 1, 3)),
        },
        Case {
            name: "past the infra retries",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![
                accepted(3),
                infra(false),
                infra(false),
                infra(false),
                infra(false),
            ],
            want: Err(Terminal::InfraFailed),
        },
        Case {
            name: "a persistent infra failure ends the run at once",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![accepted(3), infra(true)],
            want: Err(Terminal::InfraFailed),
        },
        Case {
            name: "three sessions in a row without progress stall",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![
                accepted(3),
                worker(0, 0, false, Some("a")),
                worker(0, 0, false, Some("b")),
                infra(false),
                worker(0, 0, false, Some("c")),
            ],
            want: Err(Terminal::Stalled),
        },
        Case {
            name: "progress in between resets the streak",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![
                accepted(3),
                worker(0, 0, false, Some("a")),
                worker(0, 0, true, Some("b")),
                worker(0, 0, false, Some("c")),
                worker(0, 0, false, Some("d")),
            ],
            want: Ok((SessionKind::Worker, 5, 1)),
        },
        Case {
            name: "the same failing output three times stalls, whatever changed",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![
                accepted(3),
                worker(0, 0, true, Some("same")),
                worker(0, 0, true, Some("same")),
                worker(0, 0, true, Some("same")),
            ],
            want: Err(Terminal::Stalled),
        },
        Case {
            name: "a newly verified feature resets the same-failure count",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![
                accepted(3),
                worker(0, 0, true, Some("same")),
                worker(0, 0, true, Some("same")),
                worker(1, 1, true, Some("same")),
                worker(0, 1, true, Some("same")),
            ],
            want: Ok((SessionKind::Worker, 5, 1)),
        },
        Case {
            name: "a session that does not fit the budget does not start",
            limits: Limits {
                max_cost_usd: Some(1.5),
                ..limits
            },
            estimate: Estimate::Usd(0.6),
            events: vec![accepted(3), worker(1, 1, true, Some("a"))],
            want: Err(Terminal::BudgetLimited),
        },
        Case {
            name: "an exact fit is admitted",
            limits: Limits {
                max_cost_usd: Some(1.5),
                ..limits
            },
            estimate: Estimate::Usd(0.5),
            events: vec![accepted(3), worker(1, 1, true, Some("a"))],
            want: Ok((SessionKind::Worker, 2, 1)),
        },
        Case {
            name: "an exact fit whose f64 sum is an ulp over is admitted",
            limits: Limits {
                max_cost_usd: Some(0.00153),
                ..limits
            },
            estimate: Estimate::Usd(0.00051),
            events: vec![
                Event::ContractAccepted {
                    features: 3,
                    cost_usd: Some(0.00051),
                },
                Event::WorkerFinished(WorkerSession {
                    newly_verified: 1,
                    verified: 1,
                    changed_outside_notes: true,
                    failure_fingerprint: None,
                    cost_usd: Some(0.00051),
                }),
            ],
            want: Ok((SessionKind::Worker, 2, 1)),
        },
        Case {
            name: "a billionth over the budget is over",
            limits: Limits {
                max_cost_usd: Some(0.00153),
                ..limits
            },
            estimate: Estimate::Usd(0.000510001),
            events: vec![
                Event::ContractAccepted {
                    features: 3,
                    cost_usd: Some(0.00051),
                },
                Event::WorkerFinished(WorkerSession {
                    newly_verified: 1,
                    verified: 1,
                    changed_outside_notes: true,
                    failure_fingerprint: None,
                    cost_usd: Some(0.00051),
                }),
            ],
            want: Err(Terminal::BudgetLimited),
        },
        Case {
            name: "unknown pricing with a hard budget refuses to start",
            limits: Limits {
                max_cost_usd: Some(100.0),
                ..limits
            },
            estimate: Estimate::UnknownPricing,
            events: vec![],
            want: Err(Terminal::BudgetLimited),
        },
        Case {
            name: "unknown pricing without a budget runs",
            limits,
            estimate: Estimate::UnknownPricing,
            events: vec![],
            want: Ok((SessionKind::Initializer, 0, 1)),
        },
        Case {
            name: "a session of unknown cost admits nothing under a budget",
            limits: Limits {
                max_cost_usd: Some(100.0),
                ..limits
            },
            estimate: Estimate::Usd(0.1),
            events: vec![Event::ContractAccepted {
                features: 2,
                cost_usd: None,
            }],
            want: Err(Terminal::BudgetLimited),
        },
        Case {
            name: "cancelled",
            limits,
            estimate: Estimate::Usd(1.0),
            events: vec![accepted(3), Event::Cancelled],
            want: Err(Terminal::Cancelled),
        },
    ];
    for case in cases {
        let ledger = Ledger::replay(&case.events).unwrap();
        let next = ledger.next(&case.limits, case.estimate);
        let got = match &next {
            Next::Start { kind, attempt, .. } => Ok((*kind, attempt.session, attempt.attempt)),
            Next::Stop { terminal, .. } => Err(*terminal),
        };
        assert_eq!(got, case.want, "{}: {next:?}", case.name);
    }
}

#[test]
fn a_re_run_initializer_is_told_why() {
    let ledger = Ledger::replay(&[Event::ContractRejected {
        reason: "F2's check passes at the init commit".into(),
        cost_usd: Some(0.1),
    }])
    .unwrap();
    let Next::Start { note, .. } = ledger.next(&Limits::default(), Estimate::Usd(0.1)) else {
        panic!()
    };
    assert_eq!(
        note.as_deref(),
        Some("F2's check passes at the init commit")
    );
}

#[test]
fn events_out_of_order_are_refused() {
    for events in [
        vec![worker(1, 1, true, None)],
        vec![accepted(2), accepted(2)],
        vec![accepted(2), worker(3, 3, true, None)],
        vec![accepted(0)],
    ] {
        assert!(Ledger::replay(&events).is_err(), "{events:?}");
    }
}

/// The events a session of `kind` may end with, in the exhaustive walk below.
fn endings(kind: SessionKind, verified: usize, features: usize) -> Vec<Event> {
    match kind {
        SessionKind::Initializer => vec![
            accepted(features),
            Event::ContractRejected {
                reason: "vacuous".into(),
                cost_usd: Some(0.5),
            },
            infra(false),
            Event::Cancelled,
        ],
        SessionKind::Worker => vec![
            worker(1, (verified + 1).min(features), true, Some("a")),
            worker(0, verified, false, Some("a")),
            worker(0, verified, true, Some("a")),
            worker(0, verified, true, Some("b")),
            infra(false),
            infra(true),
            Event::Cancelled,
        ],
    }
}

struct Walk {
    limits: Limits,
    estimate: f64,
    features: usize,
    runs: usize,
}

impl Walk {
    /// Every path of up to `depth` sessions from `ledger`, checking the invariants at each
    /// decision. `seen` holds the attempts started on this path; `verified_by_a_worker`
    /// whether a worker session verified something.
    fn walk(
        &mut self,
        ledger: &Ledger,
        seen: &mut Vec<AttemptId>,
        verified_by_a_worker: bool,
        depth: usize,
    ) {
        let next = ledger.next(&self.limits, Estimate::Usd(self.estimate));
        match &next {
            Next::Stop { terminal, .. } => {
                self.runs += 1;
                assert_eq!(terminal.exit_code() == 0, *terminal == Terminal::Complete);
                if *terminal == Terminal::Complete {
                    assert!(verified_by_a_worker, "complete without work: {ledger:?}");
                    assert_eq!(ledger.verified, self.features);
                }
            }
            Next::Start { kind, attempt, .. } => {
                assert!(!seen.contains(attempt), "{attempt} started twice: {seen:?}");
                if let Some(last) = seen.last() {
                    assert!(attempt.session >= last.session, "{attempt} after {last}");
                    assert!(
                        attempt.attempt == 1 || attempt.session == last.session,
                        "a retry is of the same session: {attempt} after {last}"
                    );
                }
                let accepted = matches!(ledger.contract, ContractState::Accepted { .. });
                assert_eq!(*kind == SessionKind::Worker, accepted);
                if let (SessionKind::Worker, Some(max)) = (kind, self.limits.max_sessions) {
                    assert!(ledger.worker_sessions < max, "{ledger:?}");
                }
                if let Some(max) = self.limits.max_cost_usd {
                    assert!(ledger.spent_usd + self.estimate <= max, "{ledger:?}");
                }
                if depth == 0 {
                    self.runs += 1;
                    return;
                }
                seen.push(*attempt);
                for event in endings(*kind, ledger.verified, self.features) {
                    let mut after = ledger.clone();
                    after.apply(&event).unwrap();
                    if let Event::InfraFailed { .. } = event {
                        assert_eq!(after.worker_sessions, ledger.worker_sessions);
                        assert_eq!(after.no_progress, ledger.no_progress);
                        assert_eq!(after.same_failure, ledger.same_failure);
                        assert_eq!(after.next.session, ledger.next.session);
                        assert_eq!(after.verified, ledger.verified);
                    }
                    let worked = matches!(
                        &event,
                        Event::WorkerFinished(w) if w.newly_verified > 0
                    );
                    self.walk(&after, seen, verified_by_a_worker || worked, depth - 1);
                }
                seen.pop();
            }
        }
    }
}

#[test]
fn invariants_hold_on_every_path() {
    for (limits, estimate) in [
        (
            Limits {
                max_sessions: Some(4),
                max_cost_usd: Some(3.0),
                stall_after: 3,
                infra_retries: 2,
            },
            0.5,
        ),
        (
            Limits {
                max_sessions: None,
                max_cost_usd: None,
                stall_after: 2,
                infra_retries: 1,
            },
            0.0,
        ),
    ] {
        let mut walk = Walk {
            limits,
            estimate,
            features: 2,
            runs: 0,
        };
        walk.walk(&Ledger::default(), &mut Vec::new(), false, 9);
        assert!(walk.runs > 1000, "the walk covered {} paths", walk.runs);
    }
}
