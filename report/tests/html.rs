//! The HTML report read at a glance: a header naming what was read (results, sweep, baseline,
//! the anvil build, the date, the trial counts), bars on a 0–100 % axis, a heatmap whose cells
//! carry their numbers under a colour legend, model names in full, comparison tables with each
//! side's trials — and one self-contained, well-formed file. (`scripts/screenshot-report.sh`
//! renders one in a real browser; these tests pin its structure.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use anvil_report::render::{self, HtmlOptions};
use anvil_report::{ReadOptions, Report, SCHEMA_VERSION, Trials, report};
use serde_json::{Value, json};

const LONG: &str = "qwen2.5-coder-32b-instruct-q4_k_m-llama.cpp-workstation";
const TASKS: [&str; 6] = [
    "py-fix-median",
    "py-add-cli-flag",
    "rs-rename-struct-field",
    "py-parse-iso-dates",
    "rs-fix-off-by-one",
    "js-debounce-input",
];

/// One record of sweep `sweep` (built as JSON, as a results file holds it): `pass` `None` is
/// an infrastructure failure.
fn record(sweep: &str, task: &str, model: &str, trial: u32, pass: Option<bool>) -> Value {
    json!({
        "schema_version": SCHEMA_VERSION,
        "sweep": sweep,
        "task": task,
        "model": model,
        "trial": trial,
        "attempt": 1,
        "pass": pass,
        "outcome": pass.map(|_| "done"),
        "infra_error": pass.is_none().then_some("provider unreachable"),
        "steps": 5 + trial,
        "tokens": {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0},
        "cost_usd": 0.02,
        "accounting": "reported",
        "duration_ms": 20_000 + 1000 * u64::from(trial),
        "session_path": pass.map(|_| format!("{task}/{model}/{trial}.jsonl")),
        "digests": {"task": "", "repo": "", "grader": "", "dependencies": "", "model_config": ""},
        "anvil_git_sha": if sweep == "base" { "8978973f00d1" } else { "5d0c9e1a7b2c" },
    })
}

/// `passes[task]` of 5 trials pass for each model, in sweep `sweep`.
fn jsonl(sweep: &str, models: &[(&str, [u32; 6])]) -> String {
    let mut out = String::new();
    for (model, passes) in models {
        for (task, &c) in TASKS.iter().zip(passes) {
            for trial in 0..5 {
                let r = record(sweep, task, model, trial, Some(trial < c));
                out.push_str(&r.to_string());
                out.push('\n');
            }
        }
    }
    out
}

/// Three models (one with a long name), six tasks, mixed pass rates, an infrastructure
/// failure, a tampered trial, transcripts, and a baseline in which `gpt-4.1-mini` did better.
fn realistic() -> Report {
    let mut now = jsonl(
        "sweep-20261203-140512-k3x9",
        &[
            ("claude-sonnet-4-5", [5, 4, 5, 3, 5, 4]),
            ("gpt-4.1-mini", [3, 2, 4, 1, 3, 2]),
            (LONG, [2, 1, 3, 0, 2, 1]),
        ],
    );
    let mut infra = record(
        "sweep-20261203-140512-k3x9",
        "js-debounce-input",
        "gpt-4.1-mini",
        5,
        None,
    );
    infra["attempt"] = json!(3);
    let mut tampered = record(
        "sweep-20261203-140512-k3x9",
        "py-parse-iso-dates",
        LONG,
        5,
        Some(false),
    );
    tampered["check_outcome"] = json!("tampered");
    tampered["tamper"] =
        json!([{"path": "tests/conftest.py", "kind": "conftest", "detail": "new conftest.py"}]);
    for r in [infra, tampered] {
        now.push_str(&r.to_string());
        now.push('\n');
    }
    let base = jsonl(
        "base",
        &[
            ("claude-sonnet-4-5", [5, 4, 4, 3, 5, 3]),
            ("gpt-4.1-mini", [5, 4, 5, 3, 5, 4]),
            (LONG, [2, 1, 2, 1, 2, 1]),
        ],
    );
    let with = ReadOptions { transcripts: true };
    let now = Trials::read_with(now.as_bytes(), "results.jsonl", with).unwrap();
    let base = Trials::read(base.as_bytes(), "last-week.jsonl").unwrap();
    report(&now, &[1, 3], Some(&base))
}

fn options() -> HtmlOptions<'static> {
    HtmlOptions {
        out_dir: None,
        results: Some("results.jsonl"),
        baseline: Some("last-week.jsonl"),
        generated: Some("2026-12-03 14:05 UTC"),
    }
}

/// The HTML between the first `start` and the next `end` after it.
fn section<'a>(html: &'a str, start: &str, end: &str) -> &'a str {
    let from = html.find(start).unwrap_or_else(|| panic!("no {start}"));
    let to = html[from..].find(end).unwrap_or_else(|| panic!("no {end}"));
    &html[from..from + to]
}

/// Every element that must be closed is closed, in order: a report a browser does not have
/// to repair.
fn assert_well_formed(html: &str) {
    const VOID: [&str; 5] = ["meta", "wbr", "br", "stop", "line"];
    let mut open: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find('<') {
        rest = &rest[at + 1..];
        let end = rest.find('>').unwrap();
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('!') || tag.ends_with('/') {
            continue;
        }
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        if VOID.contains(&name.as_str()) {
            continue;
        }
        if tag.starts_with('/') {
            let top = open.pop();
            assert_eq!(top.as_deref(), Some(name.as_str()), "closing {name}");
        } else {
            open.push(name);
        }
    }
    assert!(open.is_empty(), "never closed: {open:?}");
}

#[test]
fn the_header_says_what_was_read_by_which_build_when_and_how_many_trials() {
    let html = render::html_with(&realistic(), &options());
    let meta = section(&html, "<dl class=\"meta\">", "</dl>");
    for expected in [
        "<dt>Results</dt><dd>results.jsonl</dd>",
        "<dt>Sweep</dt><dd><code>sweep-20261203-140512-k3x9</code></dd>",
        "<dt>Baseline</dt><dd>last-week.jsonl</dd>",
        "trials run by build <code>5d0c9e1a7b2c</code>",
        concat!("report by anvil-evals ", env!("CARGO_PKG_VERSION")),
        "<dt>Generated</dt><dd>2026-12-03 14:05 UTC</dd>",
        // 3 models × 6 tasks × 5 trials, the tampered one; the infrastructure failure apart.
        "<strong>91 graded trials</strong> (50 passed) · 1 infrastructure failure · 1 tampered (counted as fails)",
        "3 models × 6 tasks · k = 1, 3",
    ] {
        assert!(meta.contains(expected), "{expected}\n{meta}");
    }
    assert!(html.contains("<title>anvil eval report — sweep-20261203-140512-k3x9</title>"));
    // The regression is said before anything else.
    let alert = section(&html, "<p class=\"alert\">", "</p>");
    assert!(
        alert.contains("gpt-4.1-mini pass@1 against the baseline"),
        "{alert}"
    );
    assert!(html.find("class=\"alert\"") < html.find("<h2>Models</h2>"));
}

#[test]
fn the_bar_chart_has_an_axis_from_0_to_100_percent_and_every_model_named_in_full() {
    let html = render::html_with(&realistic(), &options());
    let chart = section(&html, "<table class=\"chart\"", "</table>");
    for tick in ["0%", "25%", "50%", "75%", "100%"] {
        assert!(
            chart.contains(&format!("text-anchor=\"middle\">{tick}</text>")),
            "{tick}"
        );
    }
    assert!(chart.contains(">pass@1 (mean over tasks)</text>"));
    // One bar row per model, its name in full (breakable at its parts), its value and interval.
    assert_eq!(chart.matches("<th scope=\"row\"").count(), 3);
    assert!(chart.contains(
        "<span class=\"nm\">qwen2.5-<wbr>coder-32b-<wbr>instruct-<wbr>q4_k_m-<wbr>llama.cpp-<wbr>workstation</span></th>"
    ));
    assert!(chart.contains(&format!("<title>{LONG}: ")));
    // Each bar starts at the axis' 0 and is as long as its value: claude's pass@1 is 86.7%.
    assert!(
        chart.contains("<rect x=\"18\" y=\"5\" width=\"416.0\" height=\"16\""),
        "{chart}"
    );
    assert!(chart.contains("<strong>86.7%</strong>"), "{chart}");
    // No name is cut anywhere: the long one appears whole wherever it is plain text.
    assert!(!html.contains("…</text>"));
    assert!(html.contains(&format!("{LONG} / py-parse-iso-dates / trial 5")));
}

#[test]
fn the_heatmap_cells_carry_their_numbers_under_a_colour_legend() {
    let html = render::html_with(&realistic(), &options());
    let legend = section(&html, "<div class=\"legend\">", "</div>");
    assert!(legend.contains("<linearGradient id=\"anvil-heat\">"));
    assert!(legend.contains("<stop offset=\"0%\" stop-color=\"rgb(215,48,39)\"/>"));
    assert!(legend.contains("<stop offset=\"100%\" stop-color=\"rgb(26,152,80)\"/>"));
    assert!(legend.contains("text-anchor=\"middle\">50%</text>"));
    assert!(legend.contains("no graded trial"));
    let heat = section(&html, "<table class=\"heat\">", "</table>");
    // A header per model, a row per task, a cell per (task, model) with passed/graded.
    assert_eq!(heat.matches("<th class=\"model\">").count(), 3);
    assert_eq!(heat.matches("<tr>").count(), 7);
    assert_eq!(heat.matches("<td ").count(), 18);
    // claude, py-fix-median: 5/5, green; linked to its transcripts' row.
    assert!(heat.contains(
        "<td style=\"background:rgb(26,152,80);color:#fff\" title=\"claude-sonnet-4-5 / py-fix-median: 5 of 5 graded trials passed (100.0%)\"><a href=\"#transcripts-2\">5/5</a></td>"
    ), "{heat}");
    // The infrastructure failure and the tampered trial are said in their cells.
    assert!(heat.contains("2/5<small>+1 infra</small>"), "{heat}");
    assert!(heat.contains("0/6<small>1 tampered</small>"), "{heat}");
}

#[test]
fn comparison_tables_show_each_sides_trials() {
    let html = render::html_with(&realistic(), &options());
    let table = section(&html, "<table class=\"compare\">", "</table>");
    assert!(table.contains(
        "<th>baseline</th><th>baseline<br>trials</th><th>current</th><th>current<br>trials</th>"
    ));
    // gpt-4.1-mini: 30 trials in the baseline, 30 graded now (its infrastructure failure is
    // not counted).
    assert!(
        table.contains("<tr><td class=\"name\"><span class=\"nm\">gpt-4.1-<wbr>mini</span></td><td>pass@1</td><td class=\"num\">86.7%</td><td class=\"num\">30</td><td class=\"num\">50.0%</td><td class=\"num\">30</td>"),
        "{table}"
    );
    assert!(table.contains("<td class=\"verdict reg\">REGRESSION</td>"));
}

#[test]
fn the_report_is_one_well_formed_self_contained_file() {
    let r = realistic();
    let html = render::html_with(&r, &options());
    assert!(html.starts_with("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"));
    assert!(html.ends_with("</body></html>\n"));
    for external in [
        "<script",
        "src=",
        "href=\"http",
        "@import",
        "url(http",
        "<link",
    ] {
        assert!(!html.contains(external), "{external}");
    }
    assert_well_formed(&html);
    // Without a header's extras (results, baseline, date), what the records say stays.
    let bare = render::html(&r);
    assert!(!bare.contains("<dt>Generated</dt>") && !bare.contains("<dt>Results</dt>"));
    assert!(bare.contains("<dt>Sweep</dt>"));
    assert_well_formed(&bare);
    insta::assert_snapshot!(
        "realistic_html",
        html.replace(env!("CARGO_PKG_VERSION"), "<VERSION>")
            .replace("><", ">\n<")
    );
}

#[test]
fn names_and_reasons_from_the_records_are_escaped() {
    let text = jsonl("s<1>", &[("m\"<b>", [1, 0, 0, 0, 0, 0])]);
    let mut r = report(
        &Trials::read(text.as_bytes(), "r.jsonl").unwrap(),
        &[1],
        None,
    );
    let html = render::html_with(
        &r,
        &HtmlOptions {
            results: Some("a&b.jsonl"),
            ..HtmlOptions::default()
        },
    );
    assert!(!html.contains("<b>") && !html.contains("s<1>"));
    assert!(html.contains("<code>s&lt;1&gt;</code>") && html.contains("a&amp;b.jsonl"));
    assert_well_formed(&html);
    r.models.clear();
    assert_well_formed(&render::html(&r));
}
