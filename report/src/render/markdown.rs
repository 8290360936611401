//! The report as GitHub-flavoured Markdown, for a CI job summary (`$GITHUB_STEP_SUMMARY`) or a
//! pull request comment: what was read, the regressions first, one table of models, the
//! comparisons with their verdicts, what went wrong apart, per-task cells folded away, notes.
//! Every name from the records is escaped: a model or task name cannot break a table or
//! inject markup.

use std::fmt::Write;

use super::pct;
use crate::compare::{Comparison, Verdict};
use crate::summary::Report;

/// Per-task rows shown at most (the JSON report has every task).
pub const MARKDOWN_TASK_LIMIT: usize = 200;
/// Infrastructure failures and tampered trials listed one by one at most (the counts are
/// always complete).
pub const MARKDOWN_LIST_LIMIT: usize = 20;

/// `s` as literal Markdown text, one line, safe in a table cell: every character GitHub's
/// Markdown or HTML could read as markup (`$` is math there) is backslash-escaped, line breaks
/// become spaces. (Parentheses need no escape: no `]` is left to open a link.)
fn md(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '#' | '~' | '&' | '$' => {
                out.push('\\');
                out.push(ch);
            }
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A table row of already-escaped cells.
fn row(out: &mut String, cells: &[String]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
}

/// A table's header row and its alignment row: `align` has one letter per column, `l` for
/// left-aligned, anything else for right-aligned.
fn head(out: &mut String, header: &[String], align: &str) {
    row(out, header);
    let marks: Vec<String> = align
        .chars()
        .map(|c| if c == 'l' { ":---" } else { "---:" }.to_string())
        .collect();
    row(out, &marks);
}

/// Δ, MDE and verdict as every format shows them, a regression in bold.
fn cells(c: &Comparison) -> [String; 3] {
    let cells = super::ComparisonCells::of(c);
    let verdict = match c.verdict {
        Verdict::Regression => "**regression**".to_string(),
        _ => cells.verdict.to_string(),
    };
    [cells.diff, cells.mde, verdict]
}

/// The report as Markdown. `results` names what was read (a file, a sweep) and `baseline` what
/// it was compared against; both are shown as given.
pub fn markdown(r: &Report, results: &str, baseline: Option<&str>) -> String {
    let mut out = String::from("# anvil eval report\n\n");
    let _ = write!(out, "Results: {}", md(results));
    if let Some(b) = baseline {
        let _ = write!(out, " · baseline: {}", md(b));
    }
    let ks: Vec<String> = r.k.iter().map(u32::to_string).collect();
    let _ = writeln!(out, " · k = {}\n", ks.join(", "));

    // Regressions first: what a reviewer of a CI run looks for.
    let regressions = super::regression_lines(r, md);
    if !regressions.is_empty() {
        let _ = writeln!(
            out,
            "**{} significant regression{}:** {}\n",
            regressions.len(),
            if regressions.len() == 1 { "" } else { "s" },
            regressions.join("; ")
        );
    }

    if let Some(why) = &r.coverage.no_graded {
        let _ = writeln!(out, "**{}**", md(&why.message));
    } else {
        models(&mut out, r);
    }

    if let Some(base) = &r.baseline {
        out.push_str("\n## Against the baseline (paired by task)\n\n");
        if base.is_empty() {
            out.push_str("No model and metric shared with the baseline.\n");
        } else {
            head(
                &mut out,
                &[
                    "model",
                    "metric",
                    "baseline",
                    "current",
                    "Δ (95% CI)",
                    "MDE",
                    "tasks",
                    "trials (base → now)",
                    "verdict",
                ]
                .map(String::from),
                "llrrrrrrl",
            );
            for c in base {
                let [d, m, v] = cells(c);
                row(
                    &mut out,
                    &[
                        md(&c.label()),
                        md(&c.metric.to_string()),
                        pct(Some(c.baseline)),
                        pct(Some(c.current)),
                        d,
                        m,
                        c.tasks.to_string(),
                        format!("{} → {}", c.baseline_trials, c.current_trials),
                        v,
                    ],
                );
            }
        }
    }

    if !r.variants.is_empty() {
        out.push_str("\n## Between variants (paired by task)\n\n");
        head(
            &mut out,
            &[
                "model",
                "against",
                "metric",
                "reference",
                "variant",
                "Δ (95% CI)",
                "MDE",
                "tasks",
                "verdict",
            ]
            .map(String::from),
            "lllrrrrrl",
        );
        for c in &r.variants {
            let [d, m, v] = cells(c);
            row(
                &mut out,
                &[
                    md(&c.label()),
                    md(c.reference.as_deref().unwrap_or("—")),
                    md(&c.metric.to_string()),
                    pct(Some(c.baseline)),
                    pct(Some(c.current)),
                    d,
                    m,
                    c.tasks.to_string(),
                    v,
                ],
            );
        }
    }

    if r.infra_errors_total > 0 {
        let _ = writeln!(
            out,
            "\n## Infrastructure failures: {} (not counted as fails)\n",
            r.infra_errors_total
        );
        for e in r.infra_errors.iter().take(MARKDOWN_LIST_LIMIT) {
            let model = crate::aggregate::label(&e.model, e.variant.as_deref());
            let _ = writeln!(
                out,
                "- {} / {} / trial {}: {}",
                md(&model),
                md(&e.task),
                e.trial,
                md(&e.reason)
            );
        }
        let listed = r.infra_errors.len().min(MARKDOWN_LIST_LIMIT);
        if r.infra_errors_total as usize > listed {
            let _ = writeln!(
                out,
                "- … {} more (listed in --format json)",
                r.infra_errors_total as usize - listed
            );
        }
    }
    if r.not_admitted_total > 0 {
        let _ = writeln!(
            out,
            "\n## Not admitted by the sweep's budget: {} (never run; neither fails nor infrastructure failures)\n",
            r.not_admitted_total
        );
        for m in r.models.iter().filter(|m| m.not_admitted > 0) {
            let _ = writeln!(out, "- {}: {}", md(&m.label()), m.not_admitted);
        }
    }
    if r.tampered_total > 0 {
        let _ = writeln!(
            out,
            "\n## Tampered trials: {} (the workspace changed test infrastructure; counted as fails)\n",
            r.tampered_total
        );
        for t in r.tampered.iter().take(MARKDOWN_LIST_LIMIT) {
            let model = crate::aggregate::label(&t.model, t.variant.as_deref());
            let findings: Vec<String> = t
                .findings
                .iter()
                .map(|f| format!("{} {} ({})", md(&f.kind), md(&f.path), md(&f.detail)))
                .collect();
            let _ = writeln!(
                out,
                "- {} / {} / trial {}: {}",
                md(&model),
                md(&t.task),
                t.trial,
                if findings.is_empty() {
                    "no findings recorded".to_string()
                } else {
                    findings.join("; ")
                }
            );
        }
        let listed = r.tampered.len().min(MARKDOWN_LIST_LIMIT);
        if r.tampered_total as usize > listed {
            let _ = writeln!(
                out,
                "- … {} more (their findings are in --format json or html)",
                r.tampered_total as usize - listed
            );
        }
    }

    if r.coverage.no_graded.is_none() {
        per_task(&mut out, r);
    }

    if !r.notes.is_empty() {
        out.push_str("\n## Notes\n\n");
        for n in &r.notes {
            let _ = writeln!(out, "- {}", md(n));
        }
    }
    out
}

/// One line per model: its counts, each metric with its interval, steps, cost, duration.
fn models(out: &mut String, r: &Report) {
    let metrics: Vec<String> = r
        .models
        .first()
        .map(|m| {
            m.metrics
                .iter()
                .map(|x| format!("{} (95% CI)", x.metric))
                .collect()
        })
        .unwrap_or_default();
    let mut header: Vec<String> = ["model", "tasks", "trials", "infra", "tampered"]
        .map(String::from)
        .to_vec();
    header.extend(metrics.iter().map(|m| md(m)));
    header.extend(["mean steps", "mean cost", "p50 duration"].map(String::from));
    head(out, &header, &format!("l{}", "r".repeat(header.len() - 1)));
    for m in &r.models {
        row(out, &super::model_cells(m, &md(&m.label()), "\\$"));
    }
    out.push_str(
        "\nIntervals are 95% over tasks; infrastructure failures are not counted as fails, \
         tampered trials are.\n",
    );
}

/// Per-task cells (passed/graded) in a folded section, up to [`MARKDOWN_TASK_LIMIT`] tasks.
fn per_task(out: &mut String, r: &Report) {
    let mut tasks: Vec<&str> = r
        .models
        .iter()
        .flat_map(|m| m.cells.iter().map(|c| c.task.as_str()))
        .collect();
    tasks.sort_unstable();
    tasks.dedup();
    if tasks.is_empty() {
        return;
    }
    let shown = tasks.len().min(MARKDOWN_TASK_LIMIT);
    let _ = writeln!(
        out,
        "\n<details><summary>Per task (passed/graded): {} tasks</summary>\n",
        tasks.len()
    );
    let mut header = vec!["task".to_string()];
    header.extend(r.models.iter().map(|m| md(&m.label())));
    head(out, &header, &format!("l{}", "r".repeat(r.models.len())));
    for task in &tasks[..shown] {
        let mut cells = vec![md(task)];
        for m in &r.models {
            cells.push(
                m.cells
                    .iter()
                    .find(|c| c.task == *task)
                    .map_or("—".into(), super::cell_text),
            );
        }
        row(out, &cells);
    }
    if tasks.len() > shown {
        let _ = writeln!(
            out,
            "\n{} more tasks are in --format json or html.",
            tasks.len() - shown
        );
    }
    out.push_str("\n</details>\n");
}

#[cfg(test)]
mod tests {
    use super::md;

    #[test]
    fn names_cannot_break_a_table_or_inject_markup() {
        assert_eq!(md("task-00"), "task-00");
        assert_eq!(
            md("a|b <img src=x> *c*_d_\n`e`"),
            "a\\|b \\<img src=x\\> \\*c\\*\\_d\\_ \\`e\\`"
        );
        assert_eq!(md("x\u{7}y"), "x\u{fffd}y");
    }
}
