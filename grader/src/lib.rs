//! anvil-grader: eval tasks and the protected grading environment. Depends on `anvil-agent`
//! for the process supervisor and the sandbox, and on nothing above it.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// One shell command checked in a grading copy (`anvil auto`'s verify step).
pub mod command;
/// Stable digests of a task's parts.
pub mod digest;
/// Grading a workspace.
pub mod grade;
/// Protected paths named by patterns, and laying them over a grading copy.
pub mod protect;
/// pytest configuration in ini, cfg and toml files: which tests run.
pub mod runner_config;
/// What beside the protected paths would be imported in their place (or the runner's).
pub mod shadow;
/// Tamper findings: changes to test infrastructure.
pub mod tamper;
/// The task format (task.toml, repo/, grader/, solution/) and its validation.
pub mod task;
/// The one tree copy (workspaces, grading copies, solutions) and its policy.
pub mod tree;

pub use grade::{GradeOptions, GradeResult, TestOutcome, Verdict, grade};
pub use tamper::TamperFinding;
pub use task::{Task, TaskError, TestRunner, find_tasks};
