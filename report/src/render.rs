//! Renderers: a terminal table (comfy-table), stable JSON, one self-contained HTML file
//! ([`html`]: a header naming what was read, per-model bars on a 0–100 % axis with interval
//! whiskers, a task × model heatmap with numbers and a colour legend; no scripts, no external
//! fonts), whose per-task cells link to their trials' transcripts, Markdown for a CI job
//! summary ([`markdown`]) and JUnit XML, one test case per task × model ([`junit`]). A report
//! with no graded trial says why in each of them ([`crate::coverage::NoGraded`]) instead of an
//! empty table.

use std::fmt::Write;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};

use crate::aggregate::{ModelReport, TaskCell, label};
use crate::compare::{Comparison, Verdict};
use crate::intervals::Interval;
use crate::summary::Report;

mod html;
mod junit;
mod markdown;

pub use html::{HTML_TASK_LIMIT, HtmlOptions, html, html_at, html_with};
pub use junit::{JUNIT_DEFAULT_THRESHOLD, JUNIT_LISTED_TRIALS, junit};
pub use markdown::{MARKDOWN_LIST_LIMIT, MARKDOWN_TASK_LIMIT, markdown};

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{:.1}%", v * 100.0))
}

fn ci(ci: Option<Interval>) -> String {
    ci.map_or_else(String::new, |c| {
        format!(" [{:.1}, {:.1}]", c.low * 100.0, c.high * 100.0)
    })
}

/// Per-task cells are listed in the table only up to this many tasks.
pub const TABLE_TASK_LIMIT: usize = 40;

pub fn table(r: &Report) -> String {
    let mut out = String::new();
    match &r.coverage.no_graded {
        Some(why) => {
            let _ = writeln!(out, "{}", why.message);
        }
        None => models_table(&mut out, r),
    }
    if r.infra_errors_total > 0 {
        let _ = writeln!(
            out,
            "\nInfrastructure failures (not counted as fails): {}",
            r.infra_errors_total
        );
        for e in r.infra_errors.iter().take(20) {
            let _ = writeln!(
                out,
                "  {} / {} / trial {}: {}",
                label(&e.model, e.variant.as_deref()),
                e.task,
                e.trial,
                e.reason
            );
        }
        if r.infra_errors_total as usize > r.infra_errors.len().min(20) {
            let _ = writeln!(out, "  … (all of them are in --format json)");
        }
    }
    if r.not_admitted_total > 0 {
        let _ = writeln!(
            out,
            "\nNot admitted by the sweep's budget (never run; neither fails nor infrastructure failures): {}",
            r.not_admitted_total
        );
        for m in r.models.iter().filter(|m| m.not_admitted > 0) {
            let _ = writeln!(out, "  {}: {}", m.label(), m.not_admitted);
        }
    }
    if r.tampered_total > 0 {
        let _ = writeln!(
            out,
            "\nTampered trials (the workspace changed test infrastructure; counted as fails): {}",
            r.tampered_total
        );
        for t in r.tampered.iter().take(20) {
            let findings: Vec<String> = t
                .findings
                .iter()
                .map(|f| format!("{} {} ({})", f.kind, f.path, f.detail))
                .collect();
            let _ = writeln!(
                out,
                "  {} / {} / trial {}: {}",
                label(&t.model, t.variant.as_deref()),
                t.task,
                t.trial,
                if findings.is_empty() {
                    "no findings recorded".to_string()
                } else {
                    findings.join("; ")
                }
            );
        }
        if r.tampered_total as usize > r.tampered.len().min(20) {
            let _ = writeln!(out, "  … (the findings are in --format json or html)");
        }
    }
    if !r.notes.is_empty() {
        let _ = writeln!(out, "\nNotes:");
        for n in &r.notes {
            let _ = writeln!(out, "  {n}");
        }
    }
    if let Some(base) = &r.baseline {
        let _ = writeln!(
            out,
            "\nAgainst the baseline (paired by task):\n{}",
            comparison_table(base, "baseline", "trials (base → now)")
        );
        if !r.baseline_excluded.is_empty() {
            let _ = writeln!(out, "Left out of the comparison:");
            for e in &r.baseline_excluded {
                let _ = writeln!(out, "  {}: {}", e.task, e.reason);
            }
        }
    }
    if !r.variants.is_empty() {
        let _ = writeln!(
            out,
            "\nVariants against their reference (paired by task):\n{}",
            comparison_table(&r.variants, "reference", "trials (ref → variant)")
        );
    }
    out
}

/// The table of models, then the per-task cells (up to [`TABLE_TASK_LIMIT`] tasks).
fn models_table(out: &mut String, r: &Report) {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED);
    let metric_names: Vec<String> = r
        .models
        .first()
        .map(|m| m.metrics.iter().map(|x| x.metric.to_string()).collect())
        .unwrap_or_default();
    let mut header = vec![
        "model".to_string(),
        "tasks".into(),
        "trials".into(),
        "infra".into(),
        "tampered".into(),
    ];
    header.extend(metric_names.iter().map(|n| format!("{n} (95% CI)")));
    header.extend([
        "mean steps".into(),
        "mean cost".into(),
        "p50 duration".into(),
    ]);
    t.set_header(header);
    for m in &r.models {
        t.add_row(model_cells(m, &m.label(), "$"));
    }
    let _ = writeln!(out, "{t}");
    let tasks: usize = r.models.iter().map(|m| m.cells.len()).max().unwrap_or(0);
    if tasks > 0 && tasks <= TABLE_TASK_LIMIT {
        let mut cells = Table::new();
        cells.load_style(UTF8_FULL_CONDENSED);
        let mut header = vec!["task".to_string()];
        header.extend(r.models.iter().map(|m| m.label()));
        cells.set_header(header);
        let mut names: Vec<&str> = r
            .models
            .iter()
            .flat_map(|m| m.cells.iter().map(|c| c.task.as_str()))
            .collect();
        names.sort_unstable();
        names.dedup();
        for task in names {
            let mut row = vec![task.to_string()];
            for m in &r.models {
                row.push(
                    m.cells
                        .iter()
                        .find(|c| c.task == task)
                        .map_or("—".into(), cell_text),
                );
            }
            cells.add_row(row);
        }
        let _ = writeln!(out, "\nPer task (passed/graded):\n{cells}");
    } else if tasks > TABLE_TASK_LIMIT {
        let _ = writeln!(
            out,
            "\n({tasks} tasks: per-task cells are in --format json or html)"
        );
    }
}

/// A (model, task) cell as the table and Markdown show it: `passed/graded`, then tampered and
/// infrastructure failures when there are any.
pub(crate) fn cell_text(c: &TaskCell) -> String {
    let mut cell = format!("{}/{}", c.c, c.n);
    if c.tampered > 0 {
        let _ = write!(cell, " ({} tampered)", c.tampered);
    }
    if c.infra_errors > 0 {
        let _ = write!(cell, " (+{} infra)", c.infra_errors);
    }
    cell
}

/// A model's line of the summary table as the table and Markdown show it: `label` as given
/// (escaped for Markdown there), costs after `dollar` (`\$` in Markdown, which reads `$` as
/// maths).
pub(crate) fn model_cells(m: &ModelReport, label: &str, dollar: &str) -> Vec<String> {
    let mut row = vec![
        label.to_string(),
        m.tasks.to_string(),
        m.graded_trials.to_string(),
        m.infra_errors.to_string(),
        m.tampered.to_string(),
    ];
    row.extend(
        m.metrics
            .iter()
            .map(|x| format!("{}{}", pct(x.value), ci(x.ci))),
    );
    row.push(m.mean_steps.map_or("—".into(), |s| format!("{s:.1}")));
    row.push(match (m.mean_cost_usd, m.cost_unknown_trials) {
        (None, _) => "unknown".into(),
        (Some(c), 0) => format!("{dollar}{c:.4}"),
        (Some(c), u) => format!("{dollar}{c:.4} ({u} unknown)"),
    });
    row.push(
        m.p50_duration_ms
            .map_or("—".into(), |d| format!("{:.1}s", d as f64 / 1000.0)),
    );
    row
}

/// A comparison's cells as every format shows them: Δ with its interval, the MDE, the verdict.
pub(crate) struct ComparisonCells {
    pub(crate) diff: String,
    pub(crate) mde: String,
    pub(crate) verdict: &'static str,
}

impl ComparisonCells {
    pub(crate) fn of(c: &Comparison) -> Self {
        ComparisonCells {
            diff: format!("{:+.1} pts{}", c.diff * 100.0, ci(c.ci)),
            mde: c
                .mde
                .map_or("n/a".to_string(), |m| format!("{:.1} pts", m * 100.0)),
            verdict: match c.verdict {
                Verdict::Regression => "REGRESSION",
                Verdict::Improvement => "improvement",
                Verdict::NoSignificantChange => "no significant change",
                Verdict::Insufficient => "too few shared tasks",
            },
        }
    }
}

/// The table of `rows`; `side` names the column compared against (`baseline`, `reference`).
fn comparison_table(rows: &[Comparison], side: &str, trials: &str) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED);
    let against = if rows.iter().any(|c| c.reference.is_some()) {
        "against"
    } else {
        ""
    };
    let mut header = vec!["model", "metric"];
    if !against.is_empty() {
        header.push(against);
    }
    header.extend([
        side,
        "current",
        "Δ (95% CI)",
        "MDE",
        "tasks",
        trials,
        "verdict",
    ]);
    t.set_header(header);
    for c in rows {
        let cells = ComparisonCells::of(c);
        let mut row = vec![c.label(), c.metric.to_string()];
        if !against.is_empty() {
            row.push(c.reference.clone().unwrap_or_default());
        }
        row.extend([
            pct(Some(c.baseline)),
            pct(Some(c.current)),
            cells.diff,
            cells.mde,
            c.tasks.to_string(),
            format!("{} → {}", c.baseline_trials, c.current_trials),
            cells.verdict.to_string(),
        ]);
        t.add_row(row);
    }
    t
}

pub fn json(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// One line per significant regression, against the baseline or a variant's reference, its
/// names written through `escape`: what the Markdown and HTML reports put first.
pub(crate) fn regression_lines(r: &Report, escape: impl Fn(&str) -> String) -> Vec<String> {
    r.baseline
        .iter()
        .flatten()
        .chain(&r.variants)
        .filter(|c| c.verdict == Verdict::Regression)
        .map(|c| {
            let against = match &c.reference {
                Some(v) => format!("against variant {}", escape(v)),
                None => "against the baseline".into(),
            };
            format!(
                "{} {} {against} ({:+.1} pts)",
                escape(&c.label()),
                escape(&c.metric.to_string()),
                c.diff * 100.0
            )
        })
        .collect()
}

/// HTML-escaped text (every HTML output of the crate).
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `secs` since the Unix epoch as `YYYY-MM-DD HH:MM UTC` (the HTML header's date).
pub fn utc(secs: i64) -> String {
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

/// Now, as [`utc`] writes it.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    utc(secs)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::{Value, json};

    use super::*;
    use crate::{Trials, report};

    /// One record line: `pass` `None` is an infrastructure failure; `extra` fields override.
    fn rec(task: &str, model: &str, trial: u32, pass: Option<bool>, extra: Value) -> String {
        let mut r = json!({
            "schema_version": 3,
            "sweep": "s1",
            "task": task,
            "model": model,
            "trial": trial,
            "attempt": 1,
            "pass": pass,
            "outcome": pass.map(|_| "done"),
            "infra_error": if pass.is_none() { Some("provider unreachable after 5 attempts") } else { None },
            "steps": 3,
            "tokens": {"input": 1, "output": 1, "cache_read": 0, "cache_write": 0},
            "cost_usd": 0.01,
            "accounting": "reported",
            "duration_ms": 1000 + 250 * u64::from(trial),
            "session_path": null,
            "digests": {"task": "", "repo": "", "grader": "", "dependencies": "", "model_config": ""},
            "anvil_git_sha": "abc",
        });
        if let (Some(r), Value::Object(extra)) = (r.as_object_mut(), extra) {
            r.extend(extra);
        }
        r.to_string() + "\n"
    }

    /// `outcomes` of one (task, model): `p` pass, `f` fail, `t` tampered, `i` infra, `n` not
    /// admitted, one trial each, numbered from 0.
    fn cell(task: &str, model: &str, outcomes: &str) -> String {
        outcomes
            .chars()
            .zip(0..)
            .map(|(o, trial)| match o {
                'p' => rec(task, model, trial, Some(true), json!({})),
                'f' => rec(task, model, trial, Some(false), json!({})),
                't' => rec(
                    task,
                    model,
                    trial,
                    Some(false),
                    json!({"check_outcome": "tampered", "tamper": [{"path": "conftest.py", "kind": "conftest", "detail": "new conftest.py <& \"quoted\">"}]}),
                ),
                'i' => rec(task, model, trial, None, json!({})),
                'n' => rec(
                    task,
                    model,
                    trial,
                    None,
                    json!({"outcome": "budget_exceeded", "infra_error": null, "cost_usd": null, "accounting": "unknown"}),
                ),
                _ => panic!("outcome {o}"),
            })
            .collect()
    }

    fn trials(text: &str, name: &str) -> Trials {
        Trials::read(text.as_bytes(), name).unwrap()
    }

    /// Two models, a task name that needs escaping, a tampered trial, infrastructure failures
    /// (one cell has nothing else), a trial the budget did not admit, and a baseline.
    fn fixture() -> (Trials, Trials) {
        let current = [
            cell("fix-median", "alpha", "ppppf"),
            cell("rename <a|b> & \"c\"", "alpha", "pfftp"),
            cell("flaky-net", "alpha", "ii"),
            cell("add-flag", "alpha", "ppfif"),
            cell("fix-median", "beta", "pffff"),
            cell("rename <a|b> & \"c\"", "beta", "ppppp"),
            cell("add-flag", "beta", "pppff"),
            cell("budget-task", "beta", "nn"),
        ]
        .concat();
        let baseline = [
            cell("fix-median", "alpha", "ppppp"),
            cell("rename <a|b> & \"c\"", "alpha", "ppppp"),
            cell("add-flag", "alpha", "ppppp"),
            cell("fix-median", "beta", "pffff"),
            cell("rename <a|b> & \"c\"", "beta", "pppff"),
            cell("add-flag", "beta", "pppff"),
        ]
        .concat();
        (
            trials(&current, "results.jsonl"),
            trials(&baseline, "baseline.jsonl"),
        )
    }

    #[test]
    fn markdown_for_a_ci_job_summary() {
        let (current, baseline) = fixture();
        let r = report(&current, &[1, 3], Some(&baseline));
        let md = markdown(&r, "results.jsonl", Some("last_week.jsonl"));
        assert_eq!(md, markdown(&r, "results.jsonl", Some("last_week.jsonl")));
        assert!(md.starts_with("# anvil eval report\n\nResults: results.jsonl · baseline: last\\_week.jsonl · k = 1, 3\n"));
        assert!(md.contains("| model | tasks | trials | infra | tampered | pass@1 (95% CI) | pass@3 (95% CI) | pass^3 (95% CI) |"), "{md}");
        assert!(
            md.contains("## Against the baseline (paired by task)"),
            "{md}"
        );
        assert!(md.contains("rename \\<a\\|b\\> \\& \"c\""), "{md}");
        insta::assert_snapshot!("markdown", md);
    }

    #[test]
    fn markdown_without_a_baseline_or_trials() {
        let r = report(&trials("", "empty.jsonl"), &[1], None);
        insta::assert_snapshot!("markdown_empty", markdown(&r, "sweep nightly", None));
    }

    #[test]
    fn junit_one_case_per_task_and_model() {
        let (current, baseline) = fixture();
        let r = report(&current, &[1, 3], Some(&baseline));
        let xml = junit(&r, &current, JUNIT_DEFAULT_THRESHOLD);
        assert_eq!(xml, junit(&r, &current, JUNIT_DEFAULT_THRESHOLD));
        assert!(xml.contains("<testsuites name=\"anvil eval report\" tests=\"8\" failures=\"2\" errors=\"0\" skipped=\"2\""), "{xml}");
        assert!(
            xml.contains("<testcase name=\"rename &lt;a|b&gt; &amp; &quot;c&quot;\" classname=\"alpha\" time=\"7.500\">\n      <failure message=\"2/5 passed (trial 0 pass, 1 fail, 2 fail, 3 tampered, 4 pass)\""),
            "{xml}"
        );
        assert!(xml.contains("<skipped message=\"no graded trials: 2 infrastructure failure(s) (trial 0 infra_error, 1 infra_error)\"/>"), "{xml}");
        insta::assert_snapshot!("junit", xml);
        // At threshold 0 nothing fails; at 1 every case short of all passes does.
        assert!(junit(&r, &current, 0.0).contains("failures=\"0\" errors=\"0\" skipped=\"2\""));
        assert!(junit(&r, &current, 1.0).contains("tests=\"8\" failures=\"5\""));
    }

    #[test]
    fn junit_names_each_sweep_when_a_cell_spans_several() {
        let text = cell("t", "m", "pf") + &cell("t", "m", "f").replace("\"s1\"", "\"s2\"");
        let t = trials(&text, "r.jsonl");
        let xml = junit(&report(&t, &[1], None), &t, 0.5);
        assert!(
            xml.contains("message=\"1/3 passed (trial s1#0 pass, s1#1 fail, s2#0 fail)\""),
            "{xml}"
        );
    }
}
