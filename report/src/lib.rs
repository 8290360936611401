//! anvil-report: eval statistics, pure. The trial record schema, unbiased pass@k and pass^k,
//! intervals with tasks as the unit, paired baseline comparison, and renderers. No async
//! runtime, no HTTP, no database.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// pass@k and pass^k per task.
pub mod estimators;
/// Wilson, clustered and bootstrap intervals.
pub mod intervals;
/// The versioned trial record (JSONL).
pub mod record;
/// Table, JSON and HTML output.
pub mod render;
/// Aggregation and the Report.
pub mod summary;

pub use record::{SCHEMA_VERSION, TrialRecord};
pub use summary::{Report, Trials, report};
