//! The [`Report`]: per-model aggregates, infrastructure failures and tampered trials listed
//! apart, the reader's notes, and an optional paired baseline comparison.

use serde::Serialize;

use crate::aggregate::{ModelReport, model_stats};
use crate::compare::{Comparison, ExcludedTask, against_baseline, between_variants};
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    pub task: String,
    pub trial: u32,
    pub reason: String,
}

/// A trial whose workspace changed test infrastructure, with what the grader found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TamperedTrial {
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
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
    /// Tasks left out of the baseline comparison because their digests differ (absent when
    /// none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub baseline_excluded: Vec<ExcludedTask>,
    /// Each model's variants against its reference variant, paired by task (absent when the
    /// trials ran no more than one variant per model).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<Comparison>,
    /// The sweep's adaptive design, when its trials were run in rounds (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<crate::adaptive::Design>,
    /// The sweeps, anvil builds and trial totals covered, and why no trial was graded when
    /// none was ([`crate::coverage`]; flattened into the JSON).
    #[serde(flatten)]
    pub coverage: crate::coverage::Coverage,
}

/// What a report is built with beyond the trials and the k values.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReportOptions<'a> {
    /// Compare against these earlier trials, paired by task.
    pub baseline: Option<&'a Trials>,
    /// The variant the others are compared against (default: no variant, else `control`,
    /// else the first by name).
    pub reference_variant: Option<&'a str>,
}

/// Builds the report. `ks` are the k of pass@k / pass^k (pass@1 is always included).
pub fn report(trials: &Trials, ks: &[u32], baseline: Option<&Trials>) -> Report {
    report_with(
        trials,
        ks,
        ReportOptions {
            baseline,
            ..ReportOptions::default()
        },
    )
}

/// [`report`] with every option.
pub fn report_with(trials: &Trials, ks: &[u32], options: ReportOptions<'_>) -> Report {
    let baseline = options.baseline;
    let metrics = Metric::for_ks(ks);
    let stats = model_stats(trials);
    let models = stats
        .iter()
        .map(|(arm, s)| s.report(arm, &metrics, trials))
        .collect();
    let detail = |r: &Row| r.detail.and_then(|d| trials.details.get(d as usize));
    let infra_errors = trials
        .rows
        .iter()
        .filter_map(|r| match detail(r) {
            Some(Detail::Infra(reason)) if r.pass.is_none() => Some(InfraError {
                model: trials.models.name(r.key.model).to_string(),
                variant: trials.variant(r.key.variant).map(str::to_string),
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
                variant: trials.variant(r.key.variant).map(str::to_string),
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
    let (comparisons, excluded) = match baseline {
        Some(b) => {
            let (c, e) = against_baseline(trials, &stats, b, &metrics);
            notes.extend(crate::compare::changed_configs(trials, b));
            (Some(c), e)
        }
        None => (None, Vec::new()),
    };
    for e in &excluded {
        notes.push(format!(
            "baseline: task {} left out of the comparison: {}",
            e.task, e.reason
        ));
    }
    let variants = between_variants(trials, &stats, &metrics, options.reference_variant);
    if let Some(d) = trials.design() {
        let beyond: Vec<String> = metrics
            .iter()
            .filter(|m| m.k() > d.round)
            .map(Metric::to_string)
            .collect();
        if !beyond.is_empty() {
            notes.push(format!(
                "{} cannot be estimated without bias for an adaptive sweep whose first round is \
                 {} trials (k may not exceed it): not shown",
                beyond.join(", "),
                d.round
            ));
        }
        let off_plan = stats
            .values()
            .flat_map(|s| s.per_task.values())
            .filter(|c| c.n > 0 && d.estimate(Metric::PassAt(1), c.n, c.c).is_none())
            .count();
        if off_plan > 0 {
            notes.push(format!(
                "{off_plan} task cell(s) did not end where the adaptive design stops (its rounds \
                 were not finished — resume the sweep with `anvil-evals run --sweep ID` — or an \
                 infrastructure failure left a count between round ends): their estimates are \
                 the usual ones, which the stopping rule biases"
            ));
        }
        notes.push(format!(
            "adaptive design: rounds of {} trials while a task's 95% interval was wider than {}, \
             at most {} per task; the estimates are the ones that stay unbiased under this \
             stopping rule",
            d.round, d.target_ci_width, d.max_trials
        ));
    }
    if let Some(name) = options.reference_variant
        && !stats.keys().any(|arm| arm.variant.as_deref() == Some(name))
    {
        notes.push(format!(
            "no trial ran variant {name}: the variants were not compared"
        ));
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
        baseline: comparisons,
        baseline_excluded: excluded,
        variants,
        adaptive: trials.design(),
        coverage: crate::coverage::Coverage::of(trials),
    }
}
