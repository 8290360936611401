//! The report as one self-contained HTML file: no script, no external font, image or style
//! sheet, so it can be mailed, attached to a CI run or opened from a bundle as it is.
//!
//! Read top to bottom: a header saying what was read (results, sweeps, baseline, the anvil
//! build that ran the trials, when the report was made, the trial counts), the significant
//! regressions, or why no trial was graded; a table of models; pass@1 per model as bars on a
//! 0–100 % axis with their 95 % interval; a task × model heatmap whose cells carry
//! `passed/graded` and whose colour scale has a legend; then the transcripts, what went wrong
//! apart (infrastructure failures, trials not admitted, tampered trials), the notes and the
//! comparisons (baseline, variants) with their trial counts.
//!
//! Names from the records are escaped everywhere, and may break after `/ - :` so a long model
//! name wraps in its column instead of being cut.

use std::fmt::Write;
use std::path::Path;

use super::{ComparisonCells, ci, esc, pct};
use crate::aggregate::{ModelReport, TrialResult, label};
use crate::compare::{Comparison, Verdict};
use crate::links::href;
use crate::summary::Report;

/// Heatmap rows shown in HTML at most (the JSON has every task).
pub const HTML_TASK_LIMIT: usize = 300;

/// What the HTML header says beyond the report itself, and where the file goes.
#[derive(Debug, Clone, Copy, Default)]
pub struct HtmlOptions<'a> {
    /// The directory the report is written into (absolute): transcript links are relative to
    /// it. `None`: the paths as the records name them.
    pub out_dir: Option<&'a Path>,
    /// What was read: a results file, `sweep ID`.
    pub results: Option<&'a str>,
    /// What the trials were compared against, as the user named it.
    pub baseline: Option<&'a str>,
    /// When the report was made, shown as given (e.g. [`super::utc`]'s `2026-12-03 14:05 UTC`).
    pub generated: Option<&'a str>,
}

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.2em 1.5em;color:#222;line-height:1.35}\
h1{margin:0 0 .3em}h2{margin:1.6em 0 .4em;font-size:1.25em}\
p.help{color:#555;margin:.2em 0 .6em;font-size:.92em;max-width:60em}\
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:.15em 1em;margin:.4em 0 1em}\
dl.meta dt{font-weight:600;color:#555}dl.meta dd{margin:0}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 7px;text-align:right;vertical-align:top}\
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}\
.name{text-align:left}.nm{display:inline-block;max-width:18em;overflow-wrap:break-word}th.model .nm{max-width:12em}td.metric .ci{display:block}.num,.nw{white-space:nowrap}.ci{color:#555}\
.reg{color:#b00;font-weight:bold}.imp{color:#070}.verdict{text-align:left;min-width:7em}table.heat small{display:block;font-size:.72em}td.trials{text-align:left}\
.notice{border:1px solid #c80;background:#fff6e0;padding:.6em 1em;max-width:60em}\
.alert{border:1px solid #b00;background:#fdecec;padding:.6em 1em;max-width:60em}\
table.chart td,table.chart th{border:none;padding:0 8px;vertical-align:middle;background:none}\
table.chart th{font-weight:normal;text-align:right}table.chart svg{display:block}\
table.heat td{text-align:center;min-width:3.2em;font-variant-numeric:tabular-nums}\
table.heat td a{color:inherit;text-decoration:none;display:block}\
table.heat tr:first-child th{vertical-align:bottom}table.heat th.model{min-width:4em;font-weight:600;vertical-align:bottom;text-align:center}\
td.none{background:#e4e4e4;color:#666}\
.legend{display:flex;align-items:center;gap:1.5em;flex-wrap:wrap;margin:.4em 0 .8em;font-size:.9em}\
.swatch{display:inline-block;width:1.4em;height:1em;background:#e4e4e4;border:1px solid #bbb;vertical-align:middle;margin-right:.3em}";

/// The HTML report, its transcript links as the records name them (see [`html_with`]).
pub fn html(r: &Report) -> String {
    html_with(r, &HtmlOptions::default())
}

/// The HTML report to be written into the directory `out_dir` (see [`html_with`]).
pub fn html_at(r: &Report, out_dir: Option<&Path>) -> String {
    html_with(
        r,
        &HtmlOptions {
            out_dir,
            ..HtmlOptions::default()
        },
    )
}

/// The HTML report. Written into `options.out_dir` (absolute), its transcript links are
/// relative to it, so the report and the transcripts can move together; with `None`, or for a
/// transcript path that is not absolute, the link is the path as recorded.
pub fn html_with(r: &Report, options: &HtmlOptions<'_>) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>anvil eval report{}</title><style>{STYLE}</style></head><body>\
         <h1>anvil eval report</h1>",
        r.coverage
            .sweeps
            .first()
            .map_or(String::new(), |s| format!(" — {}", esc(s)))
    );
    header(&mut h, r, options);
    regressions(&mut h, r);
    if let Some(why) = &r.coverage.no_graded {
        let _ = write!(
            h,
            "<p class=\"notice\" id=\"no-graded\">{}</p>",
            esc(&why.message)
        );
    } else {
        models(&mut h, r);
        bars(&mut h, r);
    }
    let tasks = task_names(r);
    let shown = tasks.len().min(HTML_TASK_LIMIT);
    if r.coverage.no_graded.is_none() {
        heatmap(&mut h, r, &tasks[..shown]);
        if tasks.len() > shown {
            let _ = write!(
                h,
                "<p>{} more tasks are in the JSON report.</p>",
                tasks.len() - shown
            );
        }
    }
    transcripts(&mut h, r, &tasks[..shown], options.out_dir);
    problems(&mut h, r);
    if !r.notes.is_empty() {
        h.push_str("<h2>Notes</h2><ul>");
        for n in &r.notes {
            let _ = write!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>");
    }
    if let Some(base) = &r.baseline {
        h.push_str("<h2>Against the baseline (paired by task)</h2>");
        if base.is_empty() {
            h.push_str("<p>No model and metric shared with the baseline.</p>");
        } else {
            comparisons(&mut h, base, "baseline", "current");
        }
        if !r.baseline_excluded.is_empty() {
            h.push_str("<p>Left out of the comparison:</p><ul>");
            for e in &r.baseline_excluded {
                let _ = write!(h, "<li>{}: {}</li>", esc(&e.task), esc(&e.reason));
            }
            h.push_str("</ul>");
        }
    }
    if !r.variants.is_empty() {
        h.push_str("<h2>Variants against their reference (paired by task)</h2>");
        comparisons(&mut h, &r.variants, "reference", "variant");
    }
    h.push_str("</body></html>\n");
    h
}

/// `s` escaped, with a break opportunity after each `/ - :` not followed by a digit (a long
/// model or task name wraps at its parts rather than anywhere, and `4-5` or `q4_k_m` stay
/// whole; a name without such parts breaks anywhere once it is wider than its column).
fn name(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 32);
    out.push_str("<span class=\"nm\">");
    let mut chars = s.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
        if matches!(ch, '/' | '-' | ':') && chars.peek().is_some_and(|next| !next.is_ascii_digit())
        {
            out.push_str("<wbr>");
        }
    }
    out.push_str("</span>");
    out
}

/// The width of a column of `names` when one is long (` style="width:18em"`), else nothing:
/// a browser sizing a table counts a long name at its full length even where it wraps, and
/// would squeeze the numbers beside it instead.
fn name_column(names: impl Iterator<Item = String>) -> &'static str {
    // About 0.55em a character in a sans-serif font: 33 characters fill 18em.
    if names.map(|n| n.chars().count()).max().unwrap_or(0) > 33 {
        " style=\"width:18em\""
    } else {
        ""
    }
}

/// A value and its interval (` [low, high]`, or nothing), which may go on two lines in a
/// narrow column but never break inside either.
fn value_ci(value: &str, ci: &str) -> String {
    match ci.trim() {
        "" => format!("<span class=\"nw\">{value}</span>"),
        ci => format!("<span class=\"nw\">{value}</span> <span class=\"nw ci\">{ci}</span>"),
    }
}

/// `n` and the noun, plural unless `n` is 1.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// What was read and how the trials counted, as a definition list.
fn header(h: &mut String, r: &Report, options: &HtmlOptions<'_>) {
    let c = &r.coverage;
    h.push_str("<dl class=\"meta\">");
    let mut item = |term: &str, value: String| {
        let _ = write!(h, "<dt>{term}</dt><dd>{value}</dd>");
    };
    if let Some(results) = options.results {
        item("Results", esc(results));
    }
    if !c.sweeps.is_empty() {
        const LISTED: usize = 5;
        let mut sweeps: Vec<String> = c
            .sweeps
            .iter()
            .take(LISTED)
            .map(|s| format!("<code>{}</code>", esc(s)))
            .collect();
        if c.sweeps.len() > LISTED {
            sweeps.push(format!("and {} more", c.sweeps.len() - LISTED));
        }
        item(
            if c.sweeps.len() == 1 {
                "Sweep"
            } else {
                "Sweeps"
            },
            sweeps.join(", "),
        );
    }
    if let Some(b) = options.baseline {
        item("Baseline", esc(b));
    }
    let builds: Vec<String> = c
        .anvil_git_shas
        .iter()
        .take(3)
        .map(|s| format!("<code>{}</code>", esc(s)))
        .collect();
    let mut anvil = String::new();
    if !builds.is_empty() {
        let _ = write!(
            anvil,
            "trials run by build {}{} · ",
            builds.join(", "),
            if c.anvil_git_shas.len() > 3 {
                format!(" and {} more", c.anvil_git_shas.len() - 3)
            } else {
                String::new()
            }
        );
    }
    let _ = write!(
        anvil,
        "report by anvil-evals {}",
        esc(env!("CARGO_PKG_VERSION"))
    );
    item("anvil", anvil);
    if let Some(when) = options.generated {
        item("Generated", esc(when));
    }
    let mut trials = vec![format!(
        "<strong>{}</strong> ({} passed)",
        count(c.graded_total, "graded trial", "graded trials"),
        c.passed_total
    )];
    if r.infra_errors_total > 0 {
        trials.push(count(
            r.infra_errors_total,
            "infrastructure failure",
            "infrastructure failures",
        ));
    }
    if r.tampered_total > 0 {
        trials.push(format!("{} tampered (counted as fails)", r.tampered_total));
    }
    if r.not_admitted_total > 0 {
        trials.push(format!(
            "{} not admitted by the budget",
            r.not_admitted_total
        ));
    }
    item("Trials", trials.join(" · "));
    let ks: Vec<String> = r.k.iter().map(u32::to_string).collect();
    item(
        "Covers",
        format!(
            "{} × {} · k = {}",
            count(r.models.len() as u64, "model", "models"),
            count(c.tasks_total as u64, "task", "tasks"),
            ks.join(", ")
        ),
    );
    h.push_str("</dl>");
}

/// The significant regressions, first: what a reader looks for.
fn regressions(h: &mut String, r: &Report) {
    let found = super::regression_lines(r, esc);
    if !found.is_empty() {
        let _ = write!(
            h,
            "<p class=\"alert\"><strong>{} significant regression{}:</strong> {}</p>",
            found.len(),
            if found.len() == 1 { "" } else { "s" },
            found.join("; ")
        );
    }
}

/// The table of models: counts, each metric with its interval, steps, cost, duration.
fn models(h: &mut String, r: &Report) {
    let not_admitted = r.not_admitted_total > 0;
    let _ = write!(
        h,
        "<h2>Models</h2><table class=\"models\"><tr><th{}>model</th>",
        name_column(r.models.iter().map(ModelReport::label))
    );
    h.push_str(
        "\
         <th title=\"tasks with at least one trial\">tasks</th>\
         <th title=\"graded trials: passed or failed (tampered ones count as fails)\">graded<br>trials</th>\
         <th title=\"infrastructure failures: not the model's fails, not counted\">infra</th>\
         <th title=\"the workspace changed test infrastructure: counted as fails\">tampered</th>",
    );
    if not_admitted {
        h.push_str(
            "<th title=\"never run: the sweep's budget did not admit them\">not admitted</th>",
        );
    }
    if let Some(m) = r.models.first() {
        for x in &m.metrics {
            let _ = write!(
                h,
                "<th title=\"mean over tasks; 95% interval with tasks as the unit\">{}<br>(95% CI)</th>",
                esc(&x.metric.to_string())
            );
        }
    }
    h.push_str("<th>mean<br>steps</th><th>mean<br>cost</th><th>p50<br>duration</th></tr>");
    for m in &r.models {
        let _ = write!(
            h,
            "<tr><td class=\"name\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>",
            name(&m.label()),
            m.tasks,
            m.graded_trials,
            m.infra_errors,
            m.tampered
        );
        if not_admitted {
            let _ = write!(h, "<td class=\"num\">{}</td>", m.not_admitted);
        }
        for x in &m.metrics {
            let _ = write!(
                h,
                "<td class=\"metric\">{}</td>",
                value_ci(&pct(x.value), &ci(x.ci))
            );
        }
        let cost = match (m.mean_cost_usd, m.cost_unknown_trials) {
            (None, _) => "unknown".to_string(),
            (Some(c), 0) => format!("${c:.4}"),
            (Some(c), u) => format!("${c:.4} ({u} unknown)"),
        };
        let _ = write!(
            h,
            "<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            m.mean_steps.map_or("—".into(), |s| format!("{s:.1}")),
            cost,
            m.p50_duration_ms
                .map_or("—".into(), |d| format!("{:.1}s", d as f64 / 1000.0))
        );
    }
    h.push_str("</table>");
}

/// Plot width (px) of the bar chart's 0–100 % axis, and its margin on each side.
const PLOT: f64 = 480.0;
const PAD: f64 = 18.0;

/// The x of a rate on the bar chart.
fn x_of(rate: f64) -> f64 {
    PAD + rate.clamp(0.0, 1.0) * PLOT
}

/// The vertical grid lines at 0, 25, 50, 75 and 100 %, `height` tall.
fn grid(h: &mut String, height: f64) {
    for tick in 0..=4 {
        let x = x_of(f64::from(tick) / 4.0);
        let _ = write!(
            h,
            "<line x1=\"{x}\" x2=\"{x}\" y1=\"0\" y2=\"{height}\" stroke=\"{}\"/>",
            if tick == 0 { "#999" } else { "#e2e2e2" }
        );
    }
}

/// pass@1 per model: one row per model (its full name, which wraps), a bar on a 0–100 % axis
/// with the 95 % interval as whiskers, and the value; the axis with its ticks below.
fn bars(h: &mut String, r: &Report) {
    let Some(metric) = r.models.first().and_then(|m| m.metrics.first()) else {
        return;
    };
    let metric = esc(&metric.metric.to_string());
    let _ = write!(
        h,
        "<h2>{metric} by model</h2><p class=\"help\">The bar is the model's {metric}: the mean \
         over tasks of each task's pass rate. The whiskers are its 95% interval (tasks as the \
         unit): the wider they are, the less the difference between two bars means.</p>\
         <table class=\"chart\" role=\"img\" aria-label=\"{metric} by model\">"
    );
    let width = PLOT + 2.0 * PAD;
    let row_h = 26.0;
    let column = name_column(r.models.iter().map(ModelReport::label));
    for m in &r.models {
        let x = m.metrics.first();
        let value = x.and_then(|x| x.value);
        let _ = write!(
            h,
            "<tr><th scope=\"row\" class=\"name\"{column}>{}</th><td><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{row_h}\"><title>{}: {}{}</title>",
            name(&m.label()),
            esc(&m.label()),
            pct(value),
            ci(x.and_then(|x| x.ci))
        );
        grid(h, row_h);
        if let Some(v) = value {
            let _ = write!(
                h,
                "<rect x=\"{PAD}\" y=\"5\" width=\"{:.1}\" height=\"16\" fill=\"#4c78a8\"/>",
                x_of(v) - PAD
            );
        }
        if let Some(c) = x.and_then(|x| x.ci) {
            let (lo, hi) = (x_of(c.low), x_of(c.high));
            let _ = write!(
                h,
                "<g stroke=\"#222\" stroke-width=\"1.5\"><line x1=\"{lo:.1}\" x2=\"{hi:.1}\" y1=\"13\" y2=\"13\"/>\
                 <line x1=\"{lo:.1}\" x2=\"{lo:.1}\" y1=\"7\" y2=\"19\"/><line x1=\"{hi:.1}\" x2=\"{hi:.1}\" y1=\"7\" y2=\"19\"/></g>"
            );
        }
        let _ = write!(
            h,
            "</svg></td><td class=\"num\">{}{}</td></tr>",
            match value {
                Some(v) => format!("<strong>{}</strong>", pct(Some(v))),
                None => "— (no task graded)".to_string(),
            },
            ci(x.and_then(|x| x.ci))
        );
    }
    // The axis: a line, ticks and their labels.
    let _ = write!(
        h,
        "<tr><th></th><td><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"34\" font-size=\"11\" fill=\"#444\">\
         <line x1=\"{PAD}\" x2=\"{}\" y1=\"1\" y2=\"1\" stroke=\"#999\"/>",
        PAD + PLOT
    );
    for tick in 0..=4 {
        let x = x_of(f64::from(tick) / 4.0);
        let _ = write!(
            h,
            "<line x1=\"{x}\" x2=\"{x}\" y1=\"1\" y2=\"6\" stroke=\"#999\"/><text x=\"{x}\" y=\"18\" text-anchor=\"middle\">{}%</text>",
            tick * 25
        );
    }
    let _ = write!(
        h,
        "<text x=\"{}\" y=\"31\" text-anchor=\"middle\">{metric} (mean over tasks)</text></svg></td><td></td></tr></table>",
        PAD + PLOT / 2.0
    );
}

/// The colour of a pass rate: red (0) through yellow (0.5) to green (1), and a text colour
/// that reads on it.
fn heat(rate: f64) -> (String, &'static str) {
    const STOPS: [(f64, f64, f64); 3] = [
        (215.0, 48.0, 39.0),
        (254.0, 224.0, 139.0),
        (26.0, 152.0, 80.0),
    ];
    let t = rate.clamp(0.0, 1.0) * 2.0;
    let (a, b, f) = if t <= 1.0 {
        (STOPS[0], STOPS[1], t)
    } else {
        (STOPS[1], STOPS[2], t - 1.0)
    };
    let mix = |p: f64, q: f64| (p + (q - p) * f).round();
    let (red, green, blue) = (mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2));
    let light = (0.299 * red + 0.587 * green + 0.114 * blue) / 255.0 > 0.55;
    (
        format!("rgb({red},{green},{blue})"),
        if light { "#111" } else { "#fff" },
    )
}

/// Every task of the report, sorted.
fn task_names(r: &Report) -> Vec<&str> {
    let mut tasks: Vec<&str> = r
        .models
        .iter()
        .flat_map(|m| m.cells.iter().map(|c| c.task.as_str()))
        .collect();
    tasks.sort_unstable();
    tasks.dedup();
    tasks
}

/// Tasks × models as a table: each cell `passed/graded` on the colour of its pass rate, linked
/// to its row of the transcripts table when it has transcripts; a legend for the colours.
fn heatmap(h: &mut String, r: &Report, tasks: &[&str]) {
    if tasks.is_empty() {
        return;
    }
    let linked = r
        .models
        .iter()
        .any(|m| m.cells.iter().any(|c| !c.transcripts.is_empty()));
    let _ = write!(
        h,
        "<h2>Pass rate by task</h2><p class=\"help\">Each cell is one model on one task: \
         <strong>passed/graded</strong> trials, coloured by the pass rate. <em>+N infra</em>: \
         infrastructure failures, not counted; <em>N tampered</em>: counted as fails.{}</p>",
        if linked {
            " A cell links to its trials' transcripts."
        } else {
            ""
        }
    );
    h.push_str(
        "<div class=\"legend\"><span>pass rate</span>\
         <svg xmlns=\"http://www.w3.org/2000/svg\" width=\"260\" height=\"34\" font-size=\"11\" fill=\"#444\" role=\"img\" aria-label=\"colour scale: red 0%, yellow 50%, green 100%\">\
         <defs><linearGradient id=\"anvil-heat\">",
    );
    for stop in 0..=4 {
        let rate = f64::from(stop) / 4.0;
        let _ = write!(
            h,
            "<stop offset=\"{}%\" stop-color=\"{}\"/>",
            stop * 25,
            heat(rate).0
        );
    }
    h.push_str("</linearGradient></defs><rect x=\"20\" y=\"2\" width=\"220\" height=\"14\" fill=\"url(#anvil-heat)\" stroke=\"#999\"/>");
    for tick in 0..=4 {
        let x = 20.0 + 55.0 * f64::from(tick);
        let _ = write!(
            h,
            "<line x1=\"{x}\" x2=\"{x}\" y1=\"16\" y2=\"20\" stroke=\"#999\"/><text x=\"{x}\" y=\"31\" text-anchor=\"middle\">{}%</text>",
            tick * 25
        );
    }
    h.push_str(
        "</svg><span><span class=\"swatch\"></span>no graded trial</span><span>— not run</span></div>\
         <table class=\"heat\"><tr><th>task</th>",
    );
    for m in &r.models {
        let _ = write!(h, "<th class=\"model\">{}</th>", name(&m.label()));
    }
    h.push_str("</tr>");
    for (i, task) in tasks.iter().enumerate() {
        let _ = write!(h, "<tr><th class=\"name\">{}</th>", name(task));
        for m in &r.models {
            heat_cell(h, m, task, i);
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
}

/// One heatmap cell: model `m` on task `task` (row `row`).
fn heat_cell(h: &mut String, m: &ModelReport, task: &str, row: usize) {
    let Some(c) = m.cells.iter().find(|c| c.task == task) else {
        let _ = write!(
            h,
            "<td class=\"none\" title=\"{} / {}: not run\">—</td>",
            esc(&m.label()),
            esc(task)
        );
        return;
    };
    let mut title = format!(
        "{} / {}: {} of {} graded trials passed",
        m.label(),
        task,
        c.c,
        c.n
    );
    if let Some(rate) = c.rate {
        let _ = write!(title, " ({})", pct(Some(rate)));
    }
    if c.tampered > 0 {
        let _ = write!(title, ", {} tampered", c.tampered);
    }
    if c.infra_errors > 0 {
        let _ = write!(
            title,
            ", {}",
            count(
                u64::from(c.infra_errors),
                "infrastructure failure",
                "infrastructure failures"
            )
        );
    }
    let mut text = format!("{}/{}", c.c, c.n);
    if c.tampered > 0 {
        let _ = write!(text, "<small>{} tampered</small>", c.tampered);
    }
    if c.infra_errors > 0 {
        let _ = write!(text, "<small>+{} infra</small>", c.infra_errors);
    }
    let text = if c.transcripts.is_empty() {
        text
    } else {
        format!("<a href=\"#transcripts-{row}\">{text}</a>")
    };
    match c.rate {
        Some(rate) => {
            let (bg, fg) = heat(rate);
            let _ = write!(
                h,
                "<td style=\"background:{bg};color:{fg}\" title=\"{}\">{text}</td>",
                esc(&title)
            );
        }
        None => {
            let _ = write!(
                h,
                "<td class=\"none\" title=\"{}\">{text}</td>",
                esc(&title)
            );
        }
    }
}

/// The transcripts table: one row per task (of `tasks`, ids `transcripts-<index>`, which the
/// heatmap cells link to), one column per model, each cell `passed/graded` and a link to each
/// of its trials' transcripts. Nothing when no trial has one.
fn transcripts(h: &mut String, r: &Report, tasks: &[&str], out_dir: Option<&Path>) {
    let any = r
        .models
        .iter()
        .any(|m| m.cells.iter().any(|c| !c.transcripts.is_empty()));
    if !any {
        return;
    }
    h.push_str("<h2>Transcripts</h2><p class=\"help\">Each trial's agent session (read it with <code>anvil replay FILE</code>).</p><table><tr><th>task</th>");
    for m in &r.models {
        let _ = write!(h, "<th class=\"name\">{}</th>", name(&m.label()));
    }
    h.push_str("</tr>");
    for (i, task) in tasks.iter().enumerate() {
        let _ = write!(
            h,
            "<tr id=\"transcripts-{i}\"><td class=\"name\">{}</td>",
            name(task)
        );
        for m in &r.models {
            let Some(c) = m.cells.iter().find(|c| c.task == *task) else {
                h.push_str("<td>—</td>");
                continue;
            };
            let _ = write!(h, "<td class=\"trials\">{}/{}", c.c, c.n);
            for t in &c.transcripts {
                let mark = match t.result {
                    TrialResult::Passed => "✓",
                    TrialResult::Failed => "✗",
                    TrialResult::Tampered => "tampered",
                    TrialResult::InfraError => "infra",
                };
                let _ = write!(
                    h,
                    " <a href=\"{}\" title=\"trial {} attempt {}\">#{}</a>&nbsp;{mark}",
                    esc(&href(&t.path, out_dir)),
                    t.trial,
                    t.attempt,
                    t.trial
                );
            }
            h.push_str("</td>");
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
}

/// What went wrong apart from the model: infrastructure failures, trials not admitted,
/// tampered trials with their findings.
fn problems(h: &mut String, r: &Report) {
    if r.infra_errors_total > 0 {
        let _ = write!(
            h,
            "<h2>Infrastructure failures ({}), not counted as fails</h2><ul>",
            r.infra_errors_total
        );
        for e in &r.infra_errors {
            let _ = write!(
                h,
                "<li>{} / {} / trial {}: {}</li>",
                esc(&label(&e.model, e.variant.as_deref())),
                esc(&e.task),
                e.trial,
                esc(&e.reason)
            );
        }
        if r.infra_errors_total as usize > r.infra_errors.len() {
            let _ = write!(
                h,
                "<li>… {} more (not listed)</li>",
                r.infra_errors_total as usize - r.infra_errors.len()
            );
        }
        h.push_str("</ul>");
    }
    if r.not_admitted_total > 0 {
        let _ = write!(
            h,
            "<h2>Not admitted by the sweep's budget ({}): never run, neither fails nor infrastructure failures</h2><ul>",
            r.not_admitted_total
        );
        for m in r.models.iter().filter(|m| m.not_admitted > 0) {
            let _ = write!(h, "<li>{}: {}</li>", esc(&m.label()), m.not_admitted);
        }
        h.push_str("</ul>");
    }
    if r.tampered_total > 0 {
        let _ = write!(
            h,
            "<h2>Tampered trials ({}): the workspace changed test infrastructure; counted as fails</h2><ul>",
            r.tampered_total
        );
        for t in &r.tampered {
            let _ = write!(
                h,
                "<li>{} / {} / trial {}<ul>",
                esc(&label(&t.model, t.variant.as_deref())),
                esc(&t.task),
                t.trial
            );
            if t.findings.is_empty() {
                h.push_str("<li>no findings recorded</li>");
            }
            for f in &t.findings {
                let _ = write!(
                    h,
                    "<li><code>{}</code> {}: {}</li>",
                    esc(&f.path),
                    esc(&f.kind),
                    esc(&f.detail)
                );
            }
            h.push_str("</ul></li>");
        }
        if r.tampered_total as usize > r.tampered.len() {
            let _ = write!(
                h,
                "<li>… {} more (not listed)</li>",
                r.tampered_total as usize - r.tampered.len()
            );
        }
        h.push_str("</ul>");
    }
}

/// The table of comparisons `rows`: `side` names what was compared against (`baseline`,
/// `reference`), `now` the other side (`current`, `variant`). Each side's graded trials are
/// shown beside its value.
fn comparisons(h: &mut String, rows: &[Comparison], side: &str, now: &str) {
    let variants = rows.iter().any(|c| c.reference.is_some());
    let _ = write!(
        h,
        "<table class=\"compare\"><tr><th{}>model</th><th>metric</th>{}<th>{side}</th><th>{side}<br>trials</th><th>{now}</th><th>{now}<br>trials</th>\
         <th title=\"mean over the shared tasks of the per-task difference, with its 95% interval\">Δ (95% CI)</th>\
         <th title=\"minimum detectable effect: the smallest difference these tasks would show as significant with 80% power\">MDE</th>\
         <th title=\"tasks both sides graded\">tasks</th><th class=\"verdict\">verdict</th></tr>",
        name_column(rows.iter().map(Comparison::label)),
        if variants { "<th>against</th>" } else { "" }
    );
    for c in rows {
        let cells = ComparisonCells::of(c);
        let class = match c.verdict {
            Verdict::Regression => "reg",
            Verdict::Improvement => "imp",
            _ => "",
        };
        let against = if variants {
            format!(
                "<td class=\"name\">{}</td>",
                name(c.reference.as_deref().unwrap_or(""))
            )
        } else {
            String::new()
        };
        let _ = write!(
            h,
            "<tr><td class=\"name\">{}</td><td>{}</td>{against}<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"verdict {class}\">{}</td></tr>",
            name(&c.label()),
            esc(&c.metric.to_string()),
            pct(Some(c.baseline)),
            c.baseline_trials,
            pct(Some(c.current)),
            c.current_trials,
            value_ci(&format!("{:+.1} pts", c.diff * 100.0), &ci(c.ci)),
            esc(&cells.mde),
            c.tasks,
            cells.verdict
        );
    }
    h.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_break_at_their_parts_and_stay_escaped() {
        assert_eq!(
            name("org/model-v2 <x>"),
            "<span class=\"nm\">org/<wbr>model-<wbr>v2 &lt;x&gt;</span>"
        );
        assert_eq!(
            name("gpt-4.1-mini_q4.gguf"),
            "<span class=\"nm\">gpt-4.1-<wbr>mini_q4.gguf</span>"
        );
    }

    #[test]
    fn the_colour_scale_runs_red_yellow_green_with_readable_text() {
        assert_eq!(heat(0.0), ("rgb(215,48,39)".to_string(), "#fff"));
        assert_eq!(heat(0.5), ("rgb(254,224,139)".to_string(), "#111"));
        assert_eq!(heat(1.0), ("rgb(26,152,80)".to_string(), "#fff"));
        assert_eq!(heat(2.0), heat(1.0));
    }
}
