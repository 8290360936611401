//! A metric across sweeps (`anvil-evals trend`): for each sweep, oldest first, and each arm
//! (model, or model and variant) the mean over tasks of the metric's per-task estimate, with the
//! clustered interval over tasks — the same numbers a report of that sweep shows. Input is the
//! verdict counts per (sweep, model, variant, task), as the queue database aggregates them;
//! output is a table, stable JSON (`anvil-trend/1`) or one self-contained HTML page with an
//! inline SVG line chart per model. Deterministic: the same input gives the same bytes.

use std::collections::BTreeMap;
use std::fmt::Write;

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use serde::Serialize;

use crate::aggregate::label;
use crate::intervals::{Interval, over_tasks};
use crate::metric::Metric;
use crate::render::esc;

/// The JSON layout's version.
pub const TREND_SCHEMA: &str = "anvil-trend/1";

/// A sweep as the queue database records it.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepMeta {
    pub id: String,
    pub created_at_ms: i64,
    /// When it was started, as shown (UTC): e.g. `2026-12-03 02:00`.
    pub date: String,
    pub cancelled: bool,
    /// Trials not finished yet (queued, running or retrying).
    pub unfinished: u64,
    /// The sweep's adaptive design, when it had one: its estimates are the ones that stay
    /// unbiased under its stopping rule ([`crate::adaptive`]).
    pub design: Option<crate::adaptive::Design>,
}

/// Graded trials of one (sweep, model, variant, task): `n` graded, `c` passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCounts {
    pub sweep: String,
    pub model: String,
    /// `""`: no variant.
    pub variant: String,
    pub task: String,
    pub n: u32,
    pub c: u32,
}

/// Where a sweep stood when the trend was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SweepState {
    /// Every trial finished.
    Finished,
    /// Some trials still queued, running or retrying: the numbers may move.
    Partial,
    /// Cancelled: its finished trials count, the rest never ran.
    Cancelled,
}

impl SweepState {
    fn of(meta: &SweepMeta) -> SweepState {
        if meta.cancelled {
            SweepState::Cancelled
        } else if meta.unfinished > 0 {
            SweepState::Partial
        } else {
            SweepState::Finished
        }
    }

    fn describe(self, unfinished: u64) -> String {
        match self {
            SweepState::Finished => "finished".into(),
            SweepState::Partial => format!("partial ({unfinished} unfinished)"),
            SweepState::Cancelled => "cancelled".into(),
        }
    }
}

/// A sweep of the trend.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrendSweep {
    pub id: String,
    pub date: String,
    pub created_at_ms: i64,
    pub state: SweepState,
    pub unfinished: u64,
    /// Graded trials over every arm.
    pub graded_trials: u64,
}

/// A metric's mean over tasks for one arm of one sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    /// `None` when no task has at least k graded trials.
    pub value: Option<f64>,
    /// 95% clustered interval over tasks (cut to [0, 1]), or the pooled trials' Wilson interval
    /// when every task has the same estimate ([`over_tasks`]); `None` with fewer than two tasks.
    pub ci: Option<Interval>,
    /// Tasks with at least k graded trials (the others cannot be estimated and are left out).
    pub tasks: usize,
    /// Graded trials over every task, those left out included.
    pub graded_trials: u64,
}

/// `metric`'s mean over tasks from each task's (graded, passed) counts, with the clustered
/// interval over tasks; a task with fewer than k graded trials is left out, as in a report.
pub fn estimate(
    metric: Metric,
    design: Option<crate::adaptive::Design>,
    tasks: impl IntoIterator<Item = (u32, u32)>,
) -> Estimate {
    let mut per_task = Vec::new();
    let mut graded = 0u64;
    // The pooled trials of the tasks estimated, for the interval's fallback.
    let (mut pooled_c, mut pooled_n) = (0u64, 0u64);
    for (n, c) in tasks {
        graded += u64::from(n);
        if n == 0 || n < metric.k() {
            continue;
        }
        if let Some(v) = design
            .and_then(|d| d.estimate(metric, n, c))
            .or_else(|| metric.estimate(n, c).ok())
        {
            per_task.push(v);
            pooled_c += u64::from(c);
            pooled_n += u64::from(n);
        }
    }
    Estimate {
        value: (!per_task.is_empty()).then(|| per_task.iter().sum::<f64>() / per_task.len() as f64),
        ci: over_tasks(metric, &per_task, pooled_c, pooled_n),
        tasks: per_task.len(),
        graded_trials: graded,
    }
}

/// One arm of one sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrendPoint {
    pub sweep: String,
    pub date: String,
    pub state: SweepState,
    pub model: String,
    /// Absent when the sweep ran no variants.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    #[serde(flatten)]
    pub estimate: Estimate,
}

impl TrendPoint {
    fn label(&self) -> String {
        label(&self.model, self.variant.as_deref())
    }
}

/// The trend: its sweeps, oldest first, and one point per sweep and arm.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trend {
    pub schema: &'static str,
    pub metric: Metric,
    pub k: u32,
    pub sweeps: Vec<TrendSweep>,
    /// By sweep (oldest first), then model, then variant.
    pub points: Vec<TrendPoint>,
}

/// The trend of `metric` over `sweeps` from their `counts`. Sweeps without a graded trial are
/// left out; counts of sweeps not in `sweeps` are ignored.
pub fn trend(sweeps: &[SweepMeta], counts: &[TaskCounts], metric: Metric) -> Trend {
    // sweep → (model, variant) → task → (n, c)
    type Arms<'a> = BTreeMap<(&'a str, &'a str), BTreeMap<&'a str, (u32, u32)>>;
    let mut by_sweep: BTreeMap<&str, Arms> = BTreeMap::new();
    for c in counts {
        let cell = by_sweep
            .entry(c.sweep.as_str())
            .or_default()
            .entry((c.model.as_str(), c.variant.as_str()))
            .or_default()
            .entry(c.task.as_str())
            .or_default();
        cell.0 += c.n;
        cell.1 += c.c;
    }
    let mut ordered: Vec<&SweepMeta> = sweeps.iter().collect();
    ordered.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
    ordered.dedup_by(|a, b| a.id == b.id);
    let mut out_sweeps = Vec::new();
    let mut points = Vec::new();
    for meta in ordered {
        let Some(arms) = by_sweep.get(meta.id.as_str()) else {
            continue;
        };
        let state = SweepState::of(meta);
        let mut graded = 0;
        for (&(model, variant), tasks) in arms {
            let estimate = estimate(metric, meta.design, tasks.values().copied());
            graded += estimate.graded_trials;
            points.push(TrendPoint {
                sweep: meta.id.clone(),
                date: meta.date.clone(),
                state,
                model: model.to_string(),
                variant: (!variant.is_empty()).then(|| variant.to_string()),
                estimate,
            });
        }
        if graded == 0 {
            points.retain(|p| p.sweep != meta.id);
            continue;
        }
        out_sweeps.push(TrendSweep {
            id: meta.id.clone(),
            date: meta.date.clone(),
            created_at_ms: meta.created_at_ms,
            state,
            unfinished: meta.unfinished,
            graded_trials: graded,
        });
    }
    Trend {
        schema: TREND_SCHEMA,
        metric,
        k: metric.k(),
        sweeps: out_sweeps,
        points,
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "—".into(), |v| format!("{:.1}%", v * 100.0))
}

fn ci_text(ci: Option<Interval>) -> String {
    ci.map_or_else(String::new, |c| {
        format!(" [{:.1}, {:.1}]", c.low * 100.0, c.high * 100.0)
    })
}

impl Trend {
    fn has_variants(&self) -> bool {
        self.points.iter().any(|p| p.variant.is_some())
    }

    fn unfinished(&self, sweep: &str) -> u64 {
        self.sweeps
            .iter()
            .find(|s| s.id == sweep)
            .map_or(0, |s| s.unfinished)
    }
}

/// A terminal table: one row per sweep and arm, oldest sweep first.
pub fn table(t: &Trend) -> String {
    let variants = t.has_variants();
    let mut table = Table::new();
    table.load_style(UTF8_FULL_CONDENSED);
    let mut header = vec![
        "sweep".to_string(),
        "date (UTC)".into(),
        "state".into(),
        "model".into(),
    ];
    if variants {
        header.push("variant".into());
    }
    header.extend([
        format!("{} (95% CI)", t.metric),
        "tasks".into(),
        "graded trials".into(),
    ]);
    table.set_header(header);
    for p in &t.points {
        let mut row = vec![
            p.sweep.clone(),
            p.date.clone(),
            p.state.describe(t.unfinished(&p.sweep)),
            p.model.clone(),
        ];
        if variants {
            row.push(p.variant.clone().unwrap_or_else(|| "—".into()));
        }
        row.extend([
            format!("{}{}", pct(p.estimate.value), ci_text(p.estimate.ci)),
            p.estimate.tasks.to_string(),
            p.estimate.graded_trials.to_string(),
        ]);
        table.add_row(row);
    }
    let mut out = format!("{table}\n");
    if t.metric.k() > 1 {
        let _ = writeln!(
            out,
            "A task with fewer than {} graded trials in a sweep is left out of that sweep's {}.",
            t.metric.k(),
            t.metric
        );
    }
    out
}

/// Stable JSON (`"schema": "anvil-trend/1"`).
pub fn json(t: &Trend) -> String {
    serde_json::to_string_pretty(t).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// Line colours, one per arm of a model's chart (colour-blind safe, Okabe–Ito).
const COLOURS: [&str; 8] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000", "#f0e442",
];

// The chart's geometry, in SVG user units.
const PLOT_W: f64 = 760.0;
const PLOT_H: f64 = 240.0;
const LEFT: f64 = 64.0;
const TOP: f64 = 16.0;
/// Below the plot: date labels, then the axis title.
const BOTTOM: f64 = 56.0;
/// Between the plot and the legend (room for half of the newest date label).
const LEGEND_GAP: f64 = 48.0;
const LEGEND_W: f64 = 220.0;
/// Date labels on the x axis at most (every sweep has a point and a hover title).
const X_LABELS: usize = 8;

/// The x of the `i`th of `n` sweeps.
fn x_at(i: usize, n: usize) -> f64 {
    if n <= 1 {
        LEFT + PLOT_W / 2.0
    } else {
        LEFT + PLOT_W * i as f64 / (n - 1) as f64
    }
}

/// The y of a rate in [0, 1].
fn y_at(v: f64) -> f64 {
    TOP + PLOT_H * (1.0 - v.clamp(0.0, 1.0))
}

/// One self-contained page: a line chart per model (one line per variant, the 95% interval as
/// a band, each sweep's id, date, value and interval on hover), then the table.
pub fn html(t: &Trend) -> String {
    let mut h = String::new();
    let title = format!("anvil trend: {}", t.metric);
    let _ = write!(
        h,
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}\
         th{{background:#f4f4f4}}td.l,th.l{{text-align:left}}svg text{{font-family:system-ui,sans-serif}}\
         .cancelled{{color:#999}}</style></head><body><h1>{}</h1>",
        esc(&title),
        esc(&title)
    );
    if t.sweeps.is_empty() {
        h.push_str("<p>No sweep has a graded trial.</p></body></html>\n");
        return h;
    }
    let first = &t.sweeps[0];
    let last = &t.sweeps[t.sweeps.len() - 1];
    let _ = write!(
        h,
        "<p>{} sweeps, {} to {} (UTC). Each point is a sweep's mean over tasks of the per-task \
         {}; the band is its 95% interval (clustered over tasks; the pooled trials' Wilson \
         interval when every task scored the same). Hover over a point for its sweep. ● finished, \
         ○ partial (trials unfinished), × cancelled.</p>",
        t.sweeps.len(),
        esc(&first.date),
        esc(&last.date),
        esc(&t.metric.to_string())
    );
    let index: BTreeMap<&str, usize> = t
        .sweeps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    // model → variant → points, in sweep order.
    let mut models: BTreeMap<&str, BTreeMap<Option<&str>, Vec<&TrendPoint>>> = BTreeMap::new();
    for p in &t.points {
        models
            .entry(p.model.as_str())
            .or_default()
            .entry(p.variant.as_deref())
            .or_default()
            .push(p);
    }
    for (model, arms) in &models {
        chart(&mut h, t, model, arms, &index);
    }
    rows(&mut h, t);
    h.push_str("</body></html>\n");
    h
}

/// One model's chart.
fn chart(
    h: &mut String,
    t: &Trend,
    model: &str,
    arms: &BTreeMap<Option<&str>, Vec<&TrendPoint>>,
    index: &BTreeMap<&str, usize>,
) {
    let n = t.sweeps.len();
    let width = LEFT + PLOT_W + LEGEND_GAP + LEGEND_W;
    let legend_rows = arms.len() + 2;
    let height = (TOP + PLOT_H + BOTTOM).max(TOP + 20.0 * legend_rows as f64 + 20.0);
    let _ = write!(
        h,
        "<h2>{}</h2><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\" aria-label=\"{} of {} per sweep\">",
        esc(model),
        esc(&t.metric.to_string()),
        esc(model)
    );
    // Axes: y from 0 to 100% with grid lines, x one tick per sweep, dates on some.
    for pct in [0, 25, 50, 75, 100] {
        let y = y_at(f64::from(pct) / 100.0);
        let _ = write!(
            h,
            "<line x1=\"{LEFT:.1}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{pct}%</text>",
            LEFT + PLOT_W,
            LEFT - 6.0,
            y + 4.0
        );
    }
    let _ = write!(
        h,
        "<line x1=\"{LEFT:.1}\" x2=\"{LEFT:.1}\" y1=\"{TOP:.1}\" y2=\"{:.1}\" stroke=\"#444\"/>\
         <line x1=\"{LEFT:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444\"/>",
        TOP + PLOT_H,
        LEFT + PLOT_W,
        TOP + PLOT_H,
        TOP + PLOT_H
    );
    let step = n.div_ceil(X_LABELS).max(1);
    for (i, s) in t.sweeps.iter().enumerate() {
        let x = x_at(i, n);
        let _ = write!(
            h,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#444\"/>",
            TOP + PLOT_H,
            TOP + PLOT_H + 4.0
        );
        // Every step-th date, and the newest unless it would crowd the last one shown.
        if i % step == 0 || (i == n - 1 && (n - 1) % step >= step / 2) {
            // The day only (the time and the sweep are in the points' titles).
            let _ = write!(
                h,
                "<text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\">\
                 <title>{} ({} UTC)</title>{}</text>",
                TOP + PLOT_H + 18.0,
                esc(&s.id),
                esc(&s.date),
                esc(s.date.get(..10).unwrap_or(&s.date))
            );
        }
    }
    let _ = write!(
        h,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\">sweep, by start date \
         (UTC), oldest to newest</text>\
         <text x=\"14\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"middle\" \
         transform=\"rotate(-90 14 {:.1})\">{}</text>",
        LEFT + PLOT_W / 2.0,
        TOP + PLOT_H + BOTTOM - 8.0,
        TOP + PLOT_H / 2.0,
        TOP + PLOT_H / 2.0,
        esc(&t.metric.to_string())
    );
    // Bands first, then lines, then points on top.
    let pos = |p: &TrendPoint| x_at(index.get(p.sweep.as_str()).copied().unwrap_or(0), n);
    for (a, points) in arms.values().enumerate() {
        let colour = COLOURS[a % COLOURS.len()];
        // One band per run of consecutive points with an interval; a lone one is a whisker.
        let mut runs: Vec<Vec<(f64, Interval)>> = vec![Vec::new()];
        for p in points {
            match (p.estimate.value, p.estimate.ci) {
                (Some(_), Some(ci)) => {
                    if let Some(run) = runs.last_mut() {
                        run.push((pos(p), ci));
                    }
                }
                _ => runs.push(Vec::new()),
            }
        }
        for run in runs.iter().filter(|r| !r.is_empty()) {
            if let [(x, ci)] = run.as_slice() {
                let _ = write!(
                    h,
                    "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{colour}\" \
                     stroke-opacity=\"0.35\" stroke-width=\"6\"/>",
                    y_at(ci.high),
                    y_at(ci.low)
                );
                continue;
            }
            let mut d = String::new();
            for (x, ci) in run {
                let _ = write!(d, "{x:.1},{:.1} ", y_at(ci.high));
            }
            for (x, ci) in run.iter().rev() {
                let _ = write!(d, "{x:.1},{:.1} ", y_at(ci.low));
            }
            let _ = write!(
                h,
                "<polygon points=\"{}\" fill=\"{colour}\" fill-opacity=\"0.18\" stroke=\"none\"/>",
                d.trim_end()
            );
        }
        let line: Vec<String> = points
            .iter()
            .filter_map(|p| {
                p.estimate
                    .value
                    .map(|v| format!("{:.1},{:.1}", pos(p), y_at(v)))
            })
            .collect();
        if line.len() > 1 {
            let _ = write!(
                h,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>",
                line.join(" ")
            );
        }
    }
    for (a, points) in arms.values().enumerate() {
        let colour = COLOURS[a % COLOURS.len()];
        for p in points {
            let Some(v) = p.estimate.value else { continue };
            let (x, y) = (pos(p), y_at(v));
            let title = format!(
                "{} — {} ({} UTC, {}): {} {}{}; {} tasks, {} graded trials",
                p.sweep,
                p.label(),
                p.date,
                p.state.describe(t.unfinished(&p.sweep)),
                t.metric,
                pct(Some(v)),
                ci_text(p.estimate.ci),
                p.estimate.tasks,
                p.estimate.graded_trials
            );
            let _ = write!(h, "<g><title>{}</title>", esc(&title));
            match p.state {
                SweepState::Finished => {
                    let _ = write!(
                        h,
                        "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"{colour}\"/>"
                    );
                }
                SweepState::Partial => {
                    let _ = write!(
                        h,
                        "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3.5\" fill=\"#fff\" stroke=\"{colour}\" stroke-width=\"1.5\"/>"
                    );
                }
                SweepState::Cancelled => {
                    let _ = write!(
                        h,
                        "<path d=\"M{:.1},{:.1}L{:.1},{:.1}M{:.1},{:.1}L{:.1},{:.1}\" stroke=\"{colour}\" stroke-width=\"2\"/>",
                        x - 4.0,
                        y - 4.0,
                        x + 4.0,
                        y + 4.0,
                        x - 4.0,
                        y + 4.0,
                        x + 4.0,
                        y - 4.0
                    );
                }
            }
            // A wider, invisible target so the title shows without aiming at a 7-pixel dot.
            let _ = write!(
                h,
                "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"8\" fill=\"transparent\"/></g>"
            );
        }
    }
    // Legend: the arms, then what the band and the marks mean.
    let lx = LEFT + PLOT_W + LEGEND_GAP;
    let mut ly = TOP + 8.0;
    for (a, (variant, points)) in arms.iter().enumerate() {
        let colour = COLOURS[a % COLOURS.len()];
        let name = points
            .first()
            .map_or_else(|| label(model, *variant), |p| p.label());
        let _ = write!(
            h,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"18\" height=\"10\" fill=\"{colour}\" fill-opacity=\"0.18\"/>\
             <line x1=\"{lx:.1}\" x2=\"{:.1}\" y1=\"{ly:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" stroke-width=\"2\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\">{}</text>",
            ly - 5.0,
            lx + 18.0,
            lx + 24.0,
            ly + 4.0,
            esc(&name)
        );
        ly += 20.0;
    }
    let _ = write!(
        h,
        "<text x=\"{lx:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#555\">band: 95% interval</text>\
         <text x=\"{lx:.1}\" y=\"{:.1}\" font-size=\"11\" fill=\"#555\">● finished ○ partial × cancelled</text></svg>",
        ly + 4.0,
        ly + 22.0
    );
}

/// The table under the charts.
fn rows(h: &mut String, t: &Trend) {
    let variants = t.has_variants();
    let _ = write!(
        h,
        "<h2>By sweep</h2><table><tr><th class=\"l\">sweep</th><th class=\"l\">date (UTC)</th>\
         <th class=\"l\">state</th><th class=\"l\">model</th>{}<th>{} (95% CI)</th><th>tasks</th>\
         <th>graded trials</th></tr>",
        if variants {
            "<th class=\"l\">variant</th>"
        } else {
            ""
        },
        esc(&t.metric.to_string())
    );
    for p in &t.points {
        let class = if p.state == SweepState::Cancelled {
            " class=\"cancelled\""
        } else {
            ""
        };
        let _ = write!(
            h,
            "<tr{class}><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>",
            esc(&p.sweep),
            esc(&p.date),
            esc(&p.state.describe(t.unfinished(&p.sweep))),
            esc(&p.model)
        );
        if variants {
            let _ = write!(
                h,
                "<td class=\"l\">{}</td>",
                esc(p.variant.as_deref().unwrap_or("—"))
            );
        }
        let _ = write!(
            h,
            "<td>{}{}</td><td>{}</td><td>{}</td></tr>",
            pct(p.estimate.value),
            ci_text(p.estimate.ci),
            p.estimate.tasks,
            p.estimate.graded_trials
        );
    }
    h.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(id: &str, day: i64, cancelled: bool, unfinished: u64) -> SweepMeta {
        SweepMeta {
            id: id.into(),
            created_at_ms: day * 86_400_000,
            date: format!("2026-12-{day:02} 02:00"),
            cancelled,
            unfinished,
            design: None,
        }
    }

    fn counts(
        sweep: &str,
        model: &str,
        variant: &str,
        cells: &[(&str, u32, u32)],
    ) -> Vec<TaskCounts> {
        cells
            .iter()
            .map(|&(task, n, c)| TaskCounts {
                sweep: sweep.into(),
                model: model.into(),
                variant: variant.into(),
                task: task.into(),
                n,
                c,
            })
            .collect()
    }

    /// Three nightly sweeps of two models (one with two variants in the last), one cancelled,
    /// one still running, and one with nothing graded (left out).
    fn sample(metric: Metric) -> Trend {
        let sweeps = vec![
            meta("nightly-03", 3, false, 4),
            meta("nightly-01", 1, false, 0),
            meta("nightly-02", 2, true, 0),
            meta("nightly-00", 0, false, 0),
        ];
        let mut c = Vec::new();
        c.extend(counts(
            "nightly-01",
            "good",
            "",
            &[("a", 3, 3), ("b", 3, 1), ("c", 3, 2)],
        ));
        c.extend(counts(
            "nightly-01",
            "bad",
            "",
            &[("a", 3, 0), ("b", 3, 1), ("c", 2, 0)],
        ));
        c.extend(counts("nightly-02", "good", "", &[("a", 1, 1)]));
        c.extend(counts(
            "nightly-03",
            "good",
            "",
            &[("a", 3, 3), ("b", 3, 3), ("c", 3, 2)],
        ));
        c.extend(counts(
            "nightly-03",
            "bad",
            "terse",
            &[("a", 3, 1), ("b", 3, 1)],
        ));
        c.extend(counts(
            "nightly-03",
            "bad",
            "verbose",
            &[("a", 3, 2), ("b", 3, 3)],
        ));
        c.extend(counts("elsewhere", "good", "", &[("a", 3, 3)]));
        trend(&sweeps, &c, metric)
    }

    #[test]
    fn each_arm_is_the_mean_over_tasks_with_its_clustered_interval() {
        let t = sample(Metric::PassAt(1));
        let ids: Vec<&str> = t.sweeps.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            ids,
            ["nightly-01", "nightly-02", "nightly-03"],
            "oldest first"
        );
        let bad = &t.points[0];
        assert_eq!(
            (bad.sweep.as_str(), bad.model.as_str()),
            ("nightly-01", "bad")
        );
        // Per task 0, 1/3, 0: mean 1/9; sd 0.19245, se 0.11111, t(2) = 4.302653, so
        // 1/9 ± 0.478073, cut to [0, 1].
        assert!((bad.estimate.value.unwrap() - 1.0 / 9.0).abs() < 1e-12);
        let ci = bad.estimate.ci.unwrap();
        assert_eq!(ci.low, 0.0, "cut to [0, 1]");
        assert!((ci.high - 0.589_184).abs() < 1e-5, "{ci:?}");
        assert_eq!((bad.estimate.tasks, bad.estimate.graded_trials), (3, 8));
        let good = &t.points[1];
        assert_eq!(
            (good.sweep.as_str(), good.model.as_str()),
            ("nightly-01", "good")
        );
        assert!((good.estimate.value.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!((good.estimate.tasks, good.estimate.graded_trials), (3, 9));
        let cancelled = &t.points[2];
        assert_eq!(cancelled.state, SweepState::Cancelled);
        assert_eq!(
            (cancelled.estimate.value, cancelled.estimate.ci),
            (Some(1.0), None)
        );
        assert_eq!(t.sweeps[2].state, SweepState::Partial);
        assert_eq!(t.points.len(), 6);
    }

    #[test]
    fn tasks_with_fewer_than_k_graded_trials_are_left_out() {
        let t = sample(Metric::PassAt(3));
        let bad = &t.points[0];
        assert_eq!(
            (bad.sweep.as_str(), bad.model.as_str()),
            ("nightly-01", "bad")
        );
        // a: 0/3 → 0; b: 1/3 → 1; c has 2 trials: left out.
        assert_eq!((bad.estimate.value, bad.estimate.tasks), (Some(0.5), 2));
        assert_eq!(bad.estimate.graded_trials, 8);
        assert_eq!(t.points[2].estimate.value, None, "one trial, k = 3");
    }

    #[test]
    fn the_table_is_stable() {
        insta::assert_snapshot!("trend_table", table(&sample(Metric::PassAt(1))));
    }

    #[test]
    fn the_json_is_stable() {
        insta::assert_snapshot!("trend_json", json(&sample(Metric::PassHat(3))));
    }

    #[test]
    fn the_html_is_stable_and_self_contained() {
        let page = html(&sample(Metric::PassAt(1)));
        assert!(!page.contains("<script"), "no scripts");
        assert!(!page.contains("https://"), "nothing fetched");
        assert_eq!(page.matches("<svg").count(), 2, "one chart per model");
        assert!(
            page.contains("<title>nightly-03 — bad [terse]"),
            "hover titles name the sweep"
        );
        assert_eq!(page, html(&sample(Metric::PassAt(1))), "deterministic");
        insta::assert_snapshot!("trend_html", page);
    }

    #[test]
    fn nothing_graded_is_an_empty_trend() {
        let t = trend(&[meta("s", 1, false, 3)], &[], Metric::PassAt(1));
        assert!(t.sweeps.is_empty() && t.points.is_empty());
        assert!(html(&t).contains("No sweep has a graded trial"));
    }
}
