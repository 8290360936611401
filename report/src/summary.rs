//! The [`Report`]: per-model aggregates, infrastructure failures and tampered trials listed
//! apart, the reader's notes, and an optional paired baseline comparison.

use serde::Serialize;

use crate::aggregate::{ModelReport, model_stats};
use crate::compare::{Comparison, compare};
use crate::metric::Metric;
use crate::record::TamperFinding;
use crate::trials::{Detail, Row, Trials};

/// Infrastructure failures listed one by one in a report (the count is always complete).
pub const MAX_LISTED_INFRA: usize = 200;
/// Tampered trials listed one by one, with their findings (the count is always complete).
pub const MAX_LISTED_TAMPERED: usize = 200;

pub const REPORT_SCHEMA: &str = "anvil-report/1";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InfraError {
    pub model: String,
    pub task: String,
    pub trial: u32,
    pub reason: String,
}

/// A trial whose workspace changed test infrastructure, with what the grader found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TamperedTrial {
    pub model: String,
    pub task: String,
    pub trial: u32,
    pub findings: Vec<TamperFinding>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// `anvil-report/1`: the JSON layout's version.
    pub schema: &'static str,
    pub k: Vec<u32>,
    pub models: Vec<ModelReport>,
    pub infra_errors_total: u64,
    pub infra_errors: Vec<InfraError>,
    /// Tampered trials over all models (each counted as a fail).
    pub tampered_total: u64,
    /// Trials the sweep's budget did not admit, over all models (absent when none).
    #[serde(skip_serializing_if = "crate::aggregate::is_zero")]
    pub not_admitted_total: u64,
    /// The first [`MAX_LISTED_TAMPERED`] tampered trials with their findings.
    pub tampered: Vec<TamperedTrial>,
    /// What the reader decided about its input (e.g. superseded attempts), for a person.
    pub notes: Vec<String>,
    pub baseline: Option<Vec<Comparison>>,
}

/// Builds the report. `ks` are the k of pass@k / pass^k (pass@1 is always included).
pub fn report(trials: &Trials, ks: &[u32], baseline: Option<&Trials>) -> Report {
    let metrics = Metric::for_ks(ks);
    let stats = model_stats(trials);
    let models = stats
        .iter()
        .map(|(model, s)| s.report(model, &metrics, trials))
        .collect();
    let detail = |r: &Row| r.detail.and_then(|d| trials.details.get(d as usize));
    let infra_errors = trials
        .rows
        .iter()
        .filter_map(|r| match detail(r) {
            Some(Detail::Infra(reason)) if r.pass.is_none() => Some(InfraError {
                model: trials.models.name(r.key.model).to_string(),
                task: trials.tasks.name(r.key.task).to_string(),
                trial: r.key.trial,
                reason: reason.clone(),
            }),
            _ => None,
        })
        .take(MAX_LISTED_INFRA)
        .collect();
    let tampered = trials
        .rows
        .iter()
        .filter_map(|r| match detail(r) {
            Some(Detail::Tampered(findings)) if r.tampered => Some(TamperedTrial {
                model: trials.models.name(r.key.model).to_string(),
                task: trials.tasks.name(r.key.task).to_string(),
                trial: r.key.trial,
                findings: findings.clone(),
            }),
            _ => None,
        })
        .take(MAX_LISTED_TAMPERED)
        .collect();
    let mut notes = trials.notes().to_vec();
    if let Some(b) = baseline {
        notes.extend(b.notes().iter().map(|n| format!("baseline: {n}")));
    }
    Report {
        schema: REPORT_SCHEMA,
        k: {
            let mut k: Vec<u32> = metrics.iter().map(|m| m.k()).collect();
            k.sort_unstable();
            k.dedup();
            k
        },
        infra_errors_total: stats.values().map(|s| s.infra).sum(),
        tampered_total: stats.values().map(|s| s.tampered).sum(),
        not_admitted_total: stats.values().map(|s| s.not_admitted).sum(),
        models,
        infra_errors,
        tampered,
        notes,
        baseline: baseline.map(|b| compare(trials, &stats, b, &metrics)),
    }
}
