//! The verdict on one session (sans-IO): from the accepted contract, the features verified
//! before it, the model's claims and the results of every feature's check at the session's
//! commit, what was newly verified, what the model claimed falsely, what it verified without
//! claiming, what it broke, whether the session may be merged, and the `passes` that follow.
//!
//! The rules:
//! - A feature is verified only when its check passed at the session's commit; a claim alone
//!   verifies nothing ("false claim": claimed true, check failed), and a check that passed
//!   verifies the feature whether or not it was claimed ("unclaimed but verified").
//! - Pass-to-pass: every feature verified before is checked again; one that fails now is a
//!   regression. A session with a regression is not merged, unless `allow_regressions` and
//!   it verifies more than it breaks (the verified count grows).
//! - Merged: the next verified set is the previous one less the regressions plus the newly
//!   verified. Not merged: the run branch does not move, so the previous set stands.
//! - Every feature of the contract needs a result, and no other feature may have one; a check
//!   that could not run (infrastructure) means no verdict: the checks are retried, nothing is
//!   counted.
//!
//! [`fail_before`] is the contract's acceptance rule: every check must fail at the init
//! commit, or it verifies nothing (a vacuous check).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::auto::contract::Contract;

/// How one feature's check ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum CheckOutcome {
    Passed,
    /// The command failed: the code's fail. `output` is the end of what it printed.
    Failed {
        output: String,
    },
    /// The command ran past its timeout: the code's fail.
    TimedOut {
        output: String,
    },
    /// The check could not run (no sandbox, no grading copy): says nothing about the code.
    Infra {
        reason: String,
    },
}

impl CheckOutcome {
    fn passed(&self) -> bool {
        matches!(self, CheckOutcome::Passed)
    }

    /// What a failing check printed (`None`: it passed, or did not run).
    fn failure(&self) -> Option<&str> {
        match self {
            CheckOutcome::Failed { output } | CheckOutcome::TimedOut { output } => Some(output),
            CheckOutcome::Passed | CheckOutcome::Infra { .. } => None,
        }
    }
}

/// Why no verdict could be given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerdictError {
    #[error("feature {id} has no check result")]
    MissingResult { id: String },
    #[error("a check result names {id}, which is no feature of the contract")]
    UnknownFeature { id: String },
    #[error("the check of {id} could not run: {reason}")]
    Infra { id: String, reason: String },
}

/// One session's inputs.
#[derive(Debug, Clone, Copy)]
pub struct SessionChecks<'a> {
    pub contract: &'a Contract,
    /// Verified before the session (by the harness).
    pub previously_verified: &'a BTreeSet<String>,
    /// The ids the session claimed pass ([`crate::auto::contract::FreezeCheck::claimed`]).
    pub claimed: &'a BTreeSet<String>,
    /// Every feature's check at the session's commit.
    pub results: &'a BTreeMap<String, CheckOutcome>,
    pub allow_regressions: bool,
}

/// Whether the session's commit may become the run branch's head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "decision")]
pub enum Merge {
    Merge,
    /// Merged although it breaks something: `allow_regressions`, and it verifies more.
    MergeWithRegressions,
    /// Not merged: it breaks a verified feature.
    Reject {
        reason: String,
    },
}

impl Merge {
    pub fn merges(&self) -> bool {
        matches!(self, Merge::Merge | Merge::MergeWithRegressions)
    }
}

/// The verdict on one session. Id lists are in the contract's order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionVerdict {
    /// Passing now, not verified before.
    pub newly_verified: Vec<String>,
    /// Newly verified without being claimed.
    pub unclaimed_verified: Vec<String>,
    /// Claimed, and the check did not pass.
    pub false_claims: Vec<String>,
    /// Verified before, failing now.
    pub regressions: Vec<String>,
    /// Every failing check's output, by id.
    pub failing: BTreeMap<String, String>,
    pub merge: Merge,
    /// The verified set after this session (what the harness writes as `passes`).
    pub next_verified: BTreeSet<String>,
    /// A digest of what failed and how (ids and outputs, digits blurred so timings do not
    /// count), for the stall breaker's "same failing output"; `None` when nothing failed.
    pub failure_fingerprint: Option<String>,
}

/// The verdict on one session (see the module docs).
pub fn decide(input: SessionChecks<'_>) -> Result<SessionVerdict, VerdictError> {
    let known: BTreeSet<&str> = input
        .contract
        .features
        .iter()
        .map(|f| f.id.as_str())
        .collect();
    if let Some(id) = input.results.keys().find(|id| !known.contains(id.as_str())) {
        return Err(VerdictError::UnknownFeature { id: id.clone() });
    }
    let mut newly_verified = Vec::new();
    let mut unclaimed_verified = Vec::new();
    let mut false_claims = Vec::new();
    let mut regressions = Vec::new();
    let mut failing = BTreeMap::new();
    for feature in &input.contract.features {
        let id = &feature.id;
        let result = input
            .results
            .get(id)
            .ok_or_else(|| VerdictError::MissingResult { id: id.clone() })?;
        if let CheckOutcome::Infra { reason } = result {
            return Err(VerdictError::Infra {
                id: id.clone(),
                reason: reason.clone(),
            });
        }
        let before = input.previously_verified.contains(id);
        let claimed = input.claimed.contains(id);
        let passed = result.passed();
        if passed && !before {
            newly_verified.push(id.clone());
            if !claimed {
                unclaimed_verified.push(id.clone());
            }
        }
        if claimed && !passed {
            false_claims.push(id.clone());
        }
        if before && !passed {
            regressions.push(id.clone());
        }
        if let Some(output) = result.failure() {
            failing.insert(id.clone(), output.to_string());
        }
    }
    let merge = if regressions.is_empty() {
        Merge::Merge
    } else if input.allow_regressions && newly_verified.len() > regressions.len() {
        Merge::MergeWithRegressions
    } else {
        Merge::Reject {
            reason: format!(
                "it breaks verified feature{} {}{}",
                if regressions.len() == 1 { "" } else { "s" },
                regressions.join(", "),
                if input.allow_regressions {
                    format!(
                        " and verifies only {} new (--allow-regressions needs more)",
                        newly_verified.len()
                    )
                } else {
                    String::new()
                }
            ),
        }
    };
    let next_verified = if merge.merges() {
        input
            .previously_verified
            .iter()
            .filter(|id| !regressions.contains(id))
            .chain(&newly_verified)
            .cloned()
            .collect()
    } else {
        input.previously_verified.clone()
    };
    let failure_fingerprint = fingerprint(&failing);
    Ok(SessionVerdict {
        newly_verified,
        unclaimed_verified,
        false_claims,
        regressions,
        failing,
        merge,
        next_verified,
        failure_fingerprint,
    })
}

/// `sha256:` of the failing ids and their outputs with every run of digits replaced by `#`.
fn fingerprint(failing: &BTreeMap<String, String>) -> Option<String> {
    if failing.is_empty() {
        return None;
    }
    let mut hasher = Sha256::new();
    for (id, output) in failing {
        hasher.update(id.as_bytes());
        hasher.update([0]);
        let mut in_digits = false;
        for c in output.chars() {
            if c.is_ascii_digit() {
                if !in_digits {
                    hasher.update(b"#");
                }
                in_digits = true;
            } else {
                in_digits = false;
                let mut buf = [0u8; 4];
                hasher.update(c.encode_utf8(&mut buf).as_bytes());
            }
        }
        hasher.update([0]);
    }
    Some(format!("sha256:{}", hex::encode(hasher.finalize())))
}

/// The contract's fail-before rule: the ids whose check passed at the init commit (vacuous:
/// they would verify the feature before any work). Every feature needs a result.
pub fn fail_before(
    contract: &Contract,
    results: &BTreeMap<String, CheckOutcome>,
) -> Result<Vec<String>, VerdictError> {
    let mut vacuous = Vec::new();
    for feature in &contract.features {
        match results.get(&feature.id) {
            None => {
                return Err(VerdictError::MissingResult {
                    id: feature.id.clone(),
                });
            }
            Some(CheckOutcome::Infra { reason }) => {
                return Err(VerdictError::Infra {
                    id: feature.id.clone(),
                    reason: reason.clone(),
                });
            }
            Some(CheckOutcome::Passed) => vacuous.push(feature.id.clone()),
            Some(CheckOutcome::Failed { .. } | CheckOutcome::TimedOut { .. }) => {}
        }
    }
    if let Some(id) = results
        .keys()
        .find(|id| !contract.features.iter().any(|f| &f.id == *id))
    {
        return Err(VerdictError::UnknownFeature { id: id.clone() });
    }
    Ok(vacuous)
}

#[cfg(test)]
mod tests;
