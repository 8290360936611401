//! anvil-report: eval statistics, pure. The trial record schema, unbiased pass@k and pass^k,
//! intervals with tasks as the unit, paired baseline comparison, and renderers. No async
//! runtime, no HTTP, no database.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// Adaptive trials: the stopping rule and the estimators that stay unbiased under it.
pub mod adaptive;
/// Per-model counts and metrics over tasks.
pub mod aggregate;
/// Paired comparison against a baseline.
pub mod compare;
/// What a report covers (sweeps, anvil builds, totals) and why none was graded.
pub mod coverage;
/// pass@k and pass^k per task.
pub mod estimators;
/// CI gates on a report (`--fail-on regression`, `--fail-on 'pass@1<0.6'`).
pub mod gate;
/// Wilson, clustered and bootstrap intervals.
pub mod intervals;
/// Links to files beside a report: relative paths and hrefs.
pub mod links;
/// The metrics a report shows (pass@k, pass^k).
pub mod metric;
/// Reading results files (`Trials::read`, `Trials::read_file`).
mod read;
/// The versioned trial record (JSONL).
pub mod record;
/// Table, JSON, HTML, Markdown and JUnit XML output.
pub mod render;
/// The Report, from trials.
pub mod summary;
/// A metric across sweeps: computation and renderers (`anvil-evals trend`).
pub mod trend;
/// Trials, one per key, superseded attempts apart.
pub mod trials;

pub use metric::Metric;
pub use read::ReadOptions;
pub use record::{FailedAttempt, SCHEMA_VERSION, TrialRecord};
pub use summary::{Report, ReportOptions, report, report_with};
pub use trials::Trials;
