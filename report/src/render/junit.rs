//! The report as JUnit XML, for CI systems that show test results (GitLab, Jenkins, Azure, the
//! GitHub test-reporter actions): one `<testsuite>` per model (its label), one `<testcase>` per
//! task the model ran (name = task, classname = the model's label). A case fails when its pass
//! rate (passed / graded) is below a threshold, and says how each trial went; a case with no
//! graded trial (all infrastructure failures, or never admitted) is skipped, saying why.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use crate::aggregate::label;
use crate::summary::Report;
use crate::trials::Trials;

/// The pass rate below which a task × model case fails, unless told otherwise.
pub const JUNIT_DEFAULT_THRESHOLD: f64 = 0.5;
/// Trials named one by one in a case's message at most (the counts are always complete).
pub const JUNIT_LISTED_TRIALS: usize = 50;

/// A rate this close below the threshold is rounding, not a miss.
const TOLERANCE: f64 = 1e-9;

/// How one trial went, as a case's message names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pass,
    Fail,
    Tampered,
    InfraError,
    NotAdmitted,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::Tampered => "tampered",
            Outcome::InfraError => "infra_error",
            Outcome::NotAdmitted => "not_admitted",
        }
    }
}

/// One trial of a case: its sweep (by name, for ordering), number, outcome and duration.
struct Trial<'a> {
    sweep: &'a str,
    trial: u32,
    outcome: Outcome,
    duration_ms: u64,
}

/// `s` escaped for XML text and attribute values alike; characters XML 1.0 cannot carry
/// become U+FFFD.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// One `<testcase>`, and whether it failed or was skipped.
struct Case {
    xml: String,
    failed: bool,
    skipped: bool,
    duration_ms: u64,
}

fn case(task: &str, classname: &str, trials: &mut [Trial<'_>], threshold: f64) -> Case {
    trials.sort_by(|a, b| (a.sweep, a.trial).cmp(&(b.sweep, b.trial)));
    let several_sweeps = trials.windows(2).any(|w| w[0].sweep != w[1].sweep);
    let count = |o: Outcome| trials.iter().filter(|t| t.outcome == o).count();
    let passed = count(Outcome::Pass);
    let graded = passed + count(Outcome::Fail) + count(Outcome::Tampered);
    let duration_ms = trials.iter().map(|t| t.duration_ms).sum();
    let mut listed: Vec<String> = trials
        .iter()
        .take(JUNIT_LISTED_TRIALS)
        .map(|t| {
            if several_sweeps {
                format!("{}#{} {}", t.sweep, t.trial, t.outcome.name())
            } else {
                format!("{} {}", t.trial, t.outcome.name())
            }
        })
        .collect();
    if trials.len() > JUNIT_LISTED_TRIALS {
        listed.push(format!("… {} more", trials.len() - JUNIT_LISTED_TRIALS));
    }
    let outcomes = format!("trial {}", listed.join(", "));
    let mut x = format!(
        "    <testcase name=\"{}\" classname=\"{}\" time=\"{}\"",
        xml(task),
        xml(classname),
        seconds(duration_ms)
    );
    let (failed, skipped) = if graded == 0 {
        let why = match (count(Outcome::InfraError), count(Outcome::NotAdmitted)) {
            (0, n) => format!("{n} not admitted by the sweep's budget, never run"),
            (i, 0) => format!("{i} infrastructure failure(s)"),
            (i, n) => {
                format!("{i} infrastructure failure(s), {n} not admitted by the sweep's budget")
            }
        };
        let _ = write!(
            x,
            ">\n      <skipped message=\"no graded trials: {} ({})\"/>\n    </testcase>\n",
            xml(&why),
            xml(&outcomes)
        );
        (false, true)
    } else {
        let rate = passed as f64 / graded as f64;
        if rate < threshold - TOLERANCE {
            let mut detail = format!(
                "pass rate {:.1}% is below the threshold {:.1}%",
                rate * 100.0,
                threshold * 100.0
            );
            for (o, what) in [
                (Outcome::Tampered, "tampered (counted as fails)"),
                (Outcome::InfraError, "infrastructure failures (not counted)"),
                (Outcome::NotAdmitted, "not admitted by the sweep's budget"),
            ] {
                if count(o) > 0 {
                    let _ = write!(detail, "; {} {what}", count(o));
                }
            }
            let _ = write!(
                x,
                ">\n      <failure message=\"{passed}/{graded} passed ({})\" type=\"below_threshold\">{}</failure>\n    </testcase>\n",
                xml(&outcomes),
                xml(&detail)
            );
            (true, false)
        } else {
            x.push_str("/>\n");
            (false, false)
        }
    };
    Case {
        xml: x,
        failed,
        skipped,
        duration_ms,
    }
}

/// The report as JUnit XML: for each of `r`'s models, one case per task, failed when its pass
/// rate is below `threshold` (a rate, 0 to 1), each trial's outcome from `trials` (the trials
/// the report was built from) in the message. Deterministic: models in the report's order,
/// tasks by name, trials by sweep and number.
pub fn junit(r: &Report, trials: &Trials, threshold: f64) -> String {
    // Each arm's trials by task name, by the arm's label (as the report names its models).
    let mut by_ids: HashMap<(u32, u32, u32), Vec<Trial<'_>>> = HashMap::new();
    for row in &trials.rows {
        let outcome = match row.pass {
            None if row.not_admitted => Outcome::NotAdmitted,
            None => Outcome::InfraError,
            Some(_) if row.tampered => Outcome::Tampered,
            Some(true) => Outcome::Pass,
            Some(false) => Outcome::Fail,
        };
        by_ids
            .entry((row.key.model, row.key.variant, row.key.task))
            .or_default()
            .push(Trial {
                sweep: trials.sweeps.name(row.key.sweep),
                trial: row.key.trial,
                outcome,
                duration_ms: row.duration_ms,
            });
    }
    let mut by_arm: HashMap<String, BTreeMap<&str, Vec<Trial<'_>>>> = HashMap::new();
    for ((model, variant, task), rows) in by_ids {
        let arm = label(trials.models.name(model), trials.variant(variant));
        by_arm
            .entry(arm)
            .or_default()
            .insert(trials.tasks.name(task), rows);
    }

    let mut suites = String::new();
    let (mut tests, mut failures, mut skipped, mut total_ms) = (0usize, 0usize, 0usize, 0u64);
    for m in &r.models {
        let arm = m.label();
        let mut cases = Vec::new();
        if let Some(tasks) = by_arm.get_mut(&arm) {
            for (task, rows) in tasks.iter_mut() {
                cases.push(case(task, &arm, rows, threshold));
            }
        }
        let failed = cases.iter().filter(|c| c.failed).count();
        let skip = cases.iter().filter(|c| c.skipped).count();
        let ms: u64 = cases.iter().map(|c| c.duration_ms).sum();
        let _ = writeln!(
            suites,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failed}\" errors=\"0\" skipped=\"{skip}\" time=\"{}\">",
            xml(&arm),
            cases.len(),
            seconds(ms)
        );
        suites.push_str("    <properties>\n");
        let _ = writeln!(
            suites,
            "      <property name=\"threshold\" value=\"{threshold}\"/>"
        );
        for x in &m.metrics {
            if let Some(v) = x.value {
                let _ = writeln!(
                    suites,
                    "      <property name=\"{}\" value=\"{v:.4}\"/>",
                    xml(&x.metric.to_string())
                );
            }
        }
        suites.push_str("    </properties>\n");
        for c in &cases {
            suites.push_str(&c.xml);
        }
        suites.push_str("  </testsuite>\n");
        tests += cases.len();
        failures += failed;
        skipped += skip;
        total_ms += ms;
    }
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"anvil eval report\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\" time=\"{}\">\n{suites}</testsuites>\n",
        seconds(total_ms)
    )
}

#[cfg(test)]
mod tests {
    use super::xml;

    #[test]
    fn everything_is_escaped_and_what_xml_cannot_carry_is_replaced() {
        assert_eq!(
            xml("a<b & \"c\" 'd'>\n\te\u{1}"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;&#10;&#9;e\u{fffd}"
        );
    }
}
