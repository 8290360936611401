//! What a report covers: the sweeps and anvil builds its trials came from, how many trials it
//! counted and graded, and — when it graded none — why ([`NoGraded`]), which every format says
//! instead of an empty table or a row of zeros.
//!
//! The records alone tell infrastructure failures and trials the budget did not admit apart;
//! a trial that was cancelled, or has not finished, leaves no record, so only the queue knows
//! about it: a caller reading a sweep from the queue passes its counts
//! ([`Report::account_unrecorded`]).

use serde::Serialize;

use crate::summary::Report;
use crate::trials::Trials;

/// The sweeps, builds and trial totals of a report (flattened into its JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Coverage {
    /// The sweeps the trials come from, in the order first read.
    pub sweeps: Vec<String>,
    /// The anvil builds that ran the trials (`anvil_git_sha` of the records), in the order
    /// first read.
    pub anvil_git_shas: Vec<String>,
    /// Trials counted, one per (sweep, task, model, variant, trial): graded, infrastructure
    /// failures and trials not admitted.
    pub trials_total: u64,
    /// Graded trials (tampered ones included, as fails).
    pub graded_total: u64,
    /// Graded trials that passed.
    pub passed_total: u64,
    /// Distinct tasks.
    pub tasks_total: usize,
    /// Why no trial was graded, when none was (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_graded: Option<NoGraded>,
}

/// Why a report has no graded trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoGradedReason {
    /// No record was read, and nothing is known of trials that left none.
    NoTrials,
    /// The queue still has trials queued, running or retrying: none has been graded yet.
    NotFinished,
    /// The sweep was cancelled before any trial was graded.
    Cancelled,
    /// Every trial was an infrastructure failure.
    InfraErrors,
    /// The sweep's budget admitted no trial.
    NotAdmitted,
    /// Every trial was an infrastructure failure or not admitted by the budget.
    InfraErrorsAndNotAdmitted,
}

/// Why no trial was graded, with the counts that say so and one sentence for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NoGraded {
    pub reason: NoGradedReason,
    pub infra_errors: u64,
    pub not_admitted: u64,
    /// Cancelled trials (known from the queue only; 0 otherwise).
    pub cancelled: u64,
    /// Trials queued, running or retrying (known from the queue only; 0 otherwise).
    pub unfinished: u64,
    /// The reason, as every format prints it.
    pub message: String,
}

/// What the queue knows about a sweep's trials that left no record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Unrecorded {
    /// Trials cancelled (`anvil-evals cancel`) before they finished.
    pub cancelled: u64,
    /// Trials queued, running or retrying.
    pub unfinished: u64,
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl NoGraded {
    /// Why none of the trials was graded, from what the records say (`infra_errors`,
    /// `not_admitted`) and what the queue says (`unrecorded`); `None` when some trial was.
    pub fn of(
        graded: u64,
        infra_errors: u64,
        not_admitted: u64,
        unrecorded: Unrecorded,
    ) -> Option<NoGraded> {
        if graded > 0 {
            return None;
        }
        let Unrecorded {
            cancelled,
            unfinished,
        } = unrecorded;
        let also = |parts: &mut Vec<String>| {
            if infra_errors > 0 {
                parts.push(plural(
                    infra_errors,
                    "infrastructure failure",
                    "infrastructure failures",
                ));
            }
            if not_admitted > 0 {
                parts.push(format!(
                    "{} not admitted by the budget",
                    plural(not_admitted, "trial", "trials")
                ));
            }
        };
        let (reason, message) = if cancelled > 0 {
            let mut parts = vec![plural(cancelled, "trial cancelled", "trials cancelled")];
            also(&mut parts);
            if unfinished > 0 {
                parts.push(format!("{unfinished} still unfinished"));
            }
            (
                NoGradedReason::Cancelled,
                format!(
                    "No trial was graded: the sweep was cancelled before any finished ({}).",
                    parts.join(", ")
                ),
            )
        } else if unfinished > 0 {
            let mut parts = Vec::new();
            also(&mut parts);
            (
                NoGradedReason::NotFinished,
                format!(
                    "No trial has been graded yet: {} still queued, running or retrying{}.",
                    plural(unfinished, "trial is", "trials are"),
                    if parts.is_empty() {
                        String::new()
                    } else {
                        format!(" ({} so far)", parts.join(", "))
                    }
                ),
            )
        } else {
            match (infra_errors, not_admitted) {
                (0, 0) => (
                    NoGradedReason::NoTrials,
                    "No trial was graded: there are no trial records (no trial has been run \
                     yet, or every one was cancelled before it finished)."
                        .to_string(),
                ),
                (n, 0) => (
                    NoGradedReason::InfraErrors,
                    format!(
                        "No trial was graded: {} (the provider, the sandbox, the workspace or \
                         the grader failed; the model was not judged).",
                        if n == 1 {
                            "the one trial was an infrastructure failure".to_string()
                        } else {
                            format!("all {n} trials were infrastructure failures")
                        }
                    ),
                ),
                (0, n) => (
                    NoGradedReason::NotAdmitted,
                    format!(
                        "No trial was graded: the sweep's budget admitted none of its {} \
                         (never run).",
                        plural(n, "trial", "trials")
                    ),
                ),
                (i, n) => (
                    NoGradedReason::InfraErrorsAndNotAdmitted,
                    format!(
                        "No trial was graded: {} and {} not admitted by the sweep's budget.",
                        plural(i, "infrastructure failure", "infrastructure failures"),
                        plural(n, "trial", "trials")
                    ),
                ),
            }
        };
        Some(NoGraded {
            reason,
            infra_errors,
            not_admitted,
            cancelled,
            unfinished,
            message,
        })
    }
}

impl Coverage {
    /// What `trials` cover, and why none was graded when none was (from the records alone).
    pub fn of(trials: &Trials) -> Coverage {
        let (mut graded, mut passed, mut infra, mut not_admitted) = (0u64, 0u64, 0u64, 0u64);
        for r in &trials.rows {
            match r.pass {
                Some(p) => {
                    graded += 1;
                    passed += u64::from(p);
                }
                None if r.not_admitted => not_admitted += 1,
                None => infra += 1,
            }
        }
        Coverage {
            sweeps: trials.sweep_ids().map(str::to_string).collect(),
            anvil_git_shas: trials.anvil_shas.names.clone(),
            trials_total: trials.rows.len() as u64,
            graded_total: graded,
            passed_total: passed,
            tasks_total: trials.tasks.names.len(),
            no_graded: NoGraded::of(graded, infra, not_admitted, Unrecorded::default()),
        }
    }
}

impl Report {
    /// Says why no trial was graded with what the queue knows of the trials that left no
    /// record (cancelled, unfinished); a report with graded trials is unchanged.
    pub fn account_unrecorded(&mut self, unrecorded: Unrecorded) {
        self.coverage.no_graded = NoGraded::of(
            self.coverage.graded_total,
            self.infra_errors_total,
            self.not_admitted_total,
            unrecorded,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(graded: u64, infra: u64, na: u64, cancelled: u64, unfinished: u64) -> String {
        NoGraded::of(
            graded,
            infra,
            na,
            Unrecorded {
                cancelled,
                unfinished,
            },
        )
        .map_or_else(|| "graded".into(), |n| n.message)
    }

    #[test]
    fn each_reason_is_said() {
        assert_eq!(reason(3, 2, 1, 4, 5), "graded");
        assert_eq!(
            reason(0, 0, 0, 0, 0),
            "No trial was graded: there are no trial records (no trial has been run yet, or every one was cancelled before it finished)."
        );
        assert_eq!(
            reason(0, 4, 0, 0, 0),
            "No trial was graded: all 4 trials were infrastructure failures (the provider, the sandbox, the workspace or the grader failed; the model was not judged)."
        );
        assert!(reason(0, 1, 0, 0, 0).contains("the one trial was an infrastructure failure"));
        assert_eq!(
            reason(0, 0, 2, 0, 0),
            "No trial was graded: the sweep's budget admitted none of its 2 trials (never run)."
        );
        assert_eq!(
            reason(0, 1, 2, 0, 0),
            "No trial was graded: 1 infrastructure failure and 2 trials not admitted by the sweep's budget."
        );
        assert_eq!(
            reason(0, 1, 0, 6, 0),
            "No trial was graded: the sweep was cancelled before any finished (6 trials cancelled, 1 infrastructure failure)."
        );
        assert_eq!(
            reason(0, 0, 0, 0, 1),
            "No trial has been graded yet: 1 trial is still queued, running or retrying."
        );
        assert_eq!(
            reason(0, 2, 0, 0, 3),
            "No trial has been graded yet: 3 trials are still queued, running or retrying (2 infrastructure failures so far)."
        );
    }
}
