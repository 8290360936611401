//! CI gates on a report (`anvil-evals report --fail-on GATE`): `regression` fails when the
//! baseline comparison, or the comparison of a model's variants against its reference variant,
//! finds a significant regression of any model's metric; `METRIC<MIN`
//! (e.g. `pass@1<0.6`, `pass^3<40%`) is an absolute floor, failing when any model's value of
//! that metric is below `MIN`. Pure: parsing, and which models and metrics fail and by how much.

use std::fmt;
use std::str::FromStr;

use crate::compare::{Comparison, Verdict};
use crate::metric::Metric;
use crate::summary::Report;

/// A value this close below a floor is rounding (a mean over tasks), not a miss.
const FLOOR_TOLERANCE: f64 = 1e-9;

/// One `--fail-on` condition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Gate {
    /// Any significant regression (`compare::Verdict::Regression`) against the baseline or,
    /// between variants, against the reference variant.
    Regression,
    /// Any model's `metric` below `min` (a rate, 0 to 1).
    Floor { metric: Metric, min: f64 },
}

/// What is wrong with a gate's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a gate: {text:?}: {reason}")]
pub struct ParseGateError {
    pub text: String,
    pub reason: String,
}

/// A gate that cannot be evaluated on a report: bad input, not a failed gate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GateError {
    /// `regression` on a report with nothing to compare: no baseline, no variants.
    #[error(
        "the gate `regression` needs something to compare against: a baseline (give --baseline FILE) or trials of several variants of a model"
    )]
    NoBaseline,
    /// A floor on a metric the report does not compute.
    #[error(
        "the gate `{gate}` is on {metric}, which this report does not compute (it computes {computed}); add {k} to -k"
    )]
    MetricNotComputed {
        gate: Gate,
        metric: Metric,
        /// The report's metrics, comma-separated.
        computed: String,
        k: u32,
    },
}

impl fmt::Display for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gate::Regression => f.write_str("regression"),
            Gate::Floor { metric, min } => write!(f, "{metric}<{min}"),
        }
    }
}

/// `pass@K` or `pass^K` (K a positive integer), as [`Metric`] displays them. `pass^1` is
/// `pass@1` (one trial passing and all of one trial passing are the same), read as such.
impl FromStr for Metric {
    type Err = String;

    fn from_str(s: &str) -> Result<Metric, String> {
        let s = s.trim();
        let (make, k): (fn(u32) -> Metric, &str) = if let Some(k) = s.strip_prefix("pass@") {
            (Metric::PassAt, k)
        } else if let Some(k) = s.strip_prefix("pass^") {
            (Metric::PassHat, k)
        } else {
            return Err(format!(
                "{s:?} is not a metric (pass@K or pass^K, such as pass@1 or pass^3)"
            ));
        };
        match k.parse::<u32>() {
            Ok(0) | Err(_) => Err(format!(
                "{s:?} is not a metric: K in pass@K / pass^K must be a whole number, 1 or more"
            )),
            Ok(1) => Ok(Metric::PassAt(1)),
            Ok(k) => Ok(make(k)),
        }
    }
}

/// `regression`, or `METRIC<MIN` with MIN a rate from 0 to 1 (`0.6`) or a percentage (`60%`).
impl FromStr for Gate {
    type Err = ParseGateError;

    fn from_str(text: &str) -> Result<Gate, ParseGateError> {
        let fail = |reason: String| ParseGateError {
            text: text.to_string(),
            reason,
        };
        let s = text.trim();
        if s == "regression" {
            return Ok(Gate::Regression);
        }
        let Some((metric, min)) = s.split_once('<') else {
            return Err(fail(
                "expected `regression` or a floor METRIC<MIN, such as pass@1<0.6 or pass^3<40%"
                    .into(),
            ));
        };
        if min.starts_with('=') {
            return Err(fail(
                "a floor is METRIC<MIN (it fails when the metric is below MIN), not <=".into(),
            ));
        }
        let metric: Metric = metric.parse().map_err(fail)?;
        let min = min.trim();
        let (number, scale) = match min.strip_suffix('%') {
            Some(p) => (p.trim(), 100.0),
            None => (min, 1.0),
        };
        let min = match number.parse::<f64>() {
            Ok(v) if v.is_finite() => v / scale,
            _ => {
                return Err(fail(format!(
                    "the floor {min:?} is not a number (a rate such as 0.6, or a percentage such as 60%)"
                )));
            }
        };
        if !(0.0..=1.0).contains(&min) {
            return Err(fail(format!(
                "the floor {min} is not a rate from 0 to 1 (write 0.6 or 60% for sixty percent)"
            )));
        }
        Ok(Gate::Floor { metric, min })
    }
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// A significant regression in `c`, or `None`.
fn regression(c: &Comparison) -> Option<String> {
    if c.verdict != Verdict::Regression {
        return None;
    }
    let against = match &c.reference {
        Some(reference) => format!("its variant {reference}"),
        None => "the baseline".to_string(),
    };
    let interval = c.ci.map_or_else(String::new, |ci| {
        format!(
            ", 95% CI [{:+.1}, {:+.1}] pts",
            ci.low * 100.0,
            ci.high * 100.0
        )
    });
    Some(format!(
        "{}: {} regressed against {against} by {:.1} pts ({} → {} on {} shared tasks{interval})",
        c.label(),
        c.metric,
        -c.diff * 100.0,
        pct(c.baseline),
        pct(c.current),
        c.tasks,
    ))
}

/// Why each (model, metric) fails `gates`, one line each, in the order of the gates and then
/// of the report's models: empty when every gate holds. A gate that cannot be evaluated on
/// this report (`regression` without a baseline, a floor on a metric it does not compute) is
/// an error, whatever the others say.
///
/// A model whose metric has no value (no task with k graded trials) fails a floor on it: it
/// did not show that it meets it. A report without models fails every floor likewise.
/// The arms a baseline was given for but that were never compared with it (no arm of the
/// same model and variant there, or every shared task left out because its digests differ):
/// the gate cannot tell they did not regress, so it fails closed.
fn uncompared(report: &Report) -> Vec<String> {
    let Some(base) = &report.baseline else {
        return Vec::new();
    };
    let left_out = match report.baseline_excluded.len() {
        0 => String::new(),
        n => {
            format!("; {n} task(s) were left out because their digests differ from the baseline's")
        }
    };
    report
        .models
        .iter()
        .filter(|m| {
            !base.iter().any(|c| {
                c.model == m.model && c.variant == m.variant && c.metric == Metric::PassAt(1)
            })
        })
        .map(|m| {
            format!(
                "{}: not compared with the baseline (no shared task with the same model and \
                 variant there{left_out}), so a regression cannot be ruled out",
                m.label()
            )
        })
        .collect()
}

pub fn failures(report: &Report, gates: &[Gate]) -> Result<Vec<String>, GateError> {
    let computed = Metric::for_ks(&report.k);
    for gate in gates {
        match *gate {
            Gate::Regression if report.baseline.is_none() && report.variants.is_empty() => {
                return Err(GateError::NoBaseline);
            }
            Gate::Floor { metric, .. } if !computed.contains(&metric) => {
                return Err(GateError::MetricNotComputed {
                    gate: *gate,
                    metric,
                    computed: computed
                        .iter()
                        .map(Metric::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    k: metric.k(),
                });
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    let mut seen: Vec<&Gate> = Vec::new();
    for gate in gates {
        if seen.contains(&gate) {
            continue;
        }
        seen.push(gate);
        match *gate {
            Gate::Regression => {
                let comparisons = report.baseline.iter().flatten().chain(&report.variants);
                out.extend(comparisons.filter_map(regression));
                out.extend(uncompared(report));
            }
            Gate::Floor { metric, min } => {
                if report.models.is_empty() {
                    out.push(format!(
                        "no model in the report: {metric} cannot meet the floor {}",
                        pct(min)
                    ));
                }
                for m in &report.models {
                    let Some(value) = m.metrics.iter().find(|x| x.metric == metric) else {
                        continue;
                    };
                    match value.value {
                        None => out.push(format!(
                            "{}: {metric} has no value (no task has {} graded trials), so it does not meet the floor {}",
                            m.label(),
                            metric.k(),
                            pct(min)
                        )),
                        Some(v) if v < min - FLOOR_TOLERANCE => {
                            let interval = value.ci.map_or_else(String::new, |ci| {
                                format!(", 95% CI [{:.1}, {:.1}]", ci.low * 100.0, ci.high * 100.0)
                            });
                            out.push(format!(
                                "{}: {metric} is {}, below the floor {} by {:.1} pts ({} tasks{interval})",
                                m.label(),
                                pct(v),
                                pct(min),
                                (min - v) * 100.0,
                                value.tasks
                            ));
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::{Trials, report};

    fn gate(s: &str) -> Gate {
        s.parse().unwrap()
    }

    #[test]
    fn gates_parse_regression_and_floors_as_rates_or_percentages() {
        assert_eq!(gate("regression"), Gate::Regression);
        assert_eq!(
            gate("pass@1<0.6"),
            Gate::Floor {
                metric: Metric::PassAt(1),
                min: 0.6
            }
        );
        assert_eq!(
            gate(" pass^3 < 40% "),
            Gate::Floor {
                metric: Metric::PassHat(3),
                min: 0.4
            }
        );
        // pass^1 is pass@1.
        assert_eq!(
            gate("pass^1<1"),
            Gate::Floor {
                metric: Metric::PassAt(1),
                min: 1.0
            }
        );
        assert_eq!(gate("pass@5<0.25").to_string(), "pass@5<0.25");
        assert_eq!("pass^12".parse::<Metric>(), Ok(Metric::PassHat(12)));
    }

    #[test]
    fn a_malformed_gate_says_what_is_wrong() {
        let err = |s: &str| s.parse::<Gate>().unwrap_err().to_string();
        assert!(err("regresion").contains("expected `regression` or a floor"));
        assert!(err("pass@1<=0.6").contains("not <="));
        assert!(err("pass@0<0.6").contains("1 or more"));
        assert!(err("pass@x<0.6").contains("1 or more"));
        assert!(err("accuracy<0.6").contains("\"accuracy\" is not a metric"));
        assert!(err("pass@1<60").contains("not a rate from 0 to 1"));
        assert!(err("pass@1<-0.1").contains("not a rate from 0 to 1"));
        assert!(err("pass@1<NaN").contains("is not a number"));
        assert!(err("pass@1<").contains("is not a number"));
        assert_eq!(
            err("pass@1<abc"),
            "not a gate: \"pass@1<abc\": the floor \"abc\" is not a number (a rate such as 0.6, or a percentage such as 60%)"
        );
    }

    /// One line per trial of `model` on `task`, passing the first `passes` of `trials`.
    fn lines(model: &str, task: &str, trials: u32, passes: u32) -> String {
        (0..trials)
            .map(|t| {
                format!(
                    r#"{{"schema_version":1,"sweep":"s","task":"{task}","model":"{model}","trial":{t},"attempt":1,"pass":{},"outcome":"done","infra_error":null,"steps":1,"tokens":{{"input":1,"output":1,"cache_read":0,"cache_write":0}},"cost_usd":null,"accounting":"unknown","duration_ms":5,"session_path":null,"digests":{{"task":"","repo":"","grader":"","dependencies":"","model_config":""}},"anvil_git_sha":"x"}}"#,
                    t < passes
                ) + "\n"
            })
            .collect()
    }

    fn trials(text: &str) -> Trials {
        Trials::read(text.as_bytes(), "r.jsonl").unwrap()
    }

    /// Per model, `passes[i]` of 5 trials pass on task i.
    fn results(models: &[(&str, &[u32])]) -> Trials {
        let mut text = String::new();
        for (model, passes) in models {
            for (i, &p) in passes.iter().enumerate() {
                text.push_str(&lines(model, &format!("t{i:02}"), 5, p));
            }
        }
        trials(&text)
    }

    #[test]
    fn a_floor_fails_each_model_below_it_by_how_much() {
        let r = report(
            &results(&[("alpha", &[5, 5, 2, 0]), ("beta", &[5, 5, 5, 4])]),
            &[1, 3],
            None,
        );
        // alpha pass@1 = (1 + 1 + 0.4 + 0) / 4 = 0.6; beta = 0.95.
        assert_eq!(
            failures(&r, &[gate("pass@1<0.6")]).unwrap(),
            Vec::<String>::new()
        );
        let f = failures(&r, &[gate("pass@1<0.7"), gate("pass^3<0.99")]).unwrap();
        assert_eq!(f.len(), 3, "{f:#?}");
        assert!(
            f[0].starts_with(
                "alpha: pass@1 is 60.0%, below the floor 70.0% by 10.0 pts (4 tasks, 95% CI ["
            ),
            "{f:#?}"
        );
        assert!(f[1].starts_with("alpha: pass^3 is "), "{f:#?}");
        assert!(f[2].starts_with("beta: pass^3 is "), "{f:#?}");
        // The same gate twice fails once.
        let twice = failures(&r, &[gate("pass@1<0.7"), gate("pass@1<0.7")]).unwrap();
        assert_eq!(twice.len(), 1);
        // A floor of 0 holds for every value.
        assert!(failures(&r, &[gate("pass@3<0")]).unwrap().is_empty());
    }

    #[test]
    fn a_metric_without_a_value_does_not_meet_its_floor() {
        // Two trials per task: pass@3 cannot be estimated.
        let r = report(&trials(&lines("alpha", "t00", 2, 2)), &[3], None);
        let f = failures(&r, &[gate("pass@3<0.1")]).unwrap();
        assert_eq!(
            f,
            [
                "alpha: pass@3 has no value (no task has 3 graded trials), so it does not meet the floor 10.0%"
            ]
        );
        let empty = report(&trials(""), &[1], None);
        assert_eq!(
            failures(&empty, &[gate("pass@1<0.5")]).unwrap(),
            ["no model in the report: pass@1 cannot meet the floor 50.0%"]
        );
    }

    #[test]
    fn a_floor_on_a_metric_the_report_does_not_compute_is_an_error() {
        let r = report(&results(&[("alpha", &[5])]), &[1, 3], None);
        let err = failures(&r, &[gate("pass@5<0.5")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the gate `pass@5<0.5` is on pass@5, which this report does not compute (it computes pass@1, pass@3, pass^3); add 5 to -k"
        );
        // Even when another gate already fails.
        assert!(failures(&r, &[gate("pass@1<1"), gate("pass^9<0.1")]).is_err());
    }

    #[test]
    fn regression_fails_significant_regressions_and_needs_a_baseline() {
        let tasks = 12;
        let base = results(&[("alpha", &vec![5; tasks]), ("beta", &vec![3; tasks])]);
        let mut beta_now = vec![3u32; tasks];
        beta_now[0] = 4;
        beta_now[1] = 2;
        let now = results(&[("alpha", &vec![2; tasks]), ("beta", &beta_now)]);
        let r = report(&now, &[1], Some(&base));
        let f = failures(&r, &[Gate::Regression]).unwrap();
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(
            f[0].starts_with(
                "alpha: pass@1 regressed against the baseline by 60.0 pts (100.0% → 40.0% on 12 shared tasks"
            ),
            "{f:#?}"
        );
        // No regression: nothing fails.
        let same = report(&base, &[1], Some(&base));
        assert!(failures(&same, &[Gate::Regression]).unwrap().is_empty());
        // Without a baseline the gate cannot be evaluated.
        let alone = report(&now, &[1], None);
        assert_eq!(
            failures(&alone, &[Gate::Regression]),
            Err(GateError::NoBaseline)
        );
        // A model the baseline never ran is not compared: the gate cannot rule out a
        // regression, so it fails closed.
        let gamma = results(&[("alpha", &vec![5; tasks]), ("gamma", &vec![0; tasks])]);
        let r = report(&gamma, &[1], Some(&base));
        let f = failures(&r, &[Gate::Regression]).unwrap();
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(
            f[0].starts_with("gamma: not compared with the baseline"),
            "{f:#?}"
        );
    }
}
