//! What anvil's integration tests and benchmarks share, instead of a copy per test file (like
//! codex's `core_test_support`). Dev-only: no shipped crate may depend on it outside
//! `[dev-dependencies]` (`scripts/check-deps.sh`), and it depends on no workspace crate but
//! anvil-llm (for the Anthropic SSE builders), so any crate's tests may use it.
//!
//! Helpers panic with a message saying what went wrong: a panic is a test's failure report.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

pub mod bins;
pub mod databases;
pub mod fixtures;
pub mod home;
pub mod mcp;
pub mod model_server;
pub mod otlp;
pub mod poll;
pub mod procs;
pub mod raw_server;
pub mod sweep;
