//! anvil-grader: eval tasks and the protected grading environment. Depends on `anvil-agent`
//! for the process supervisor and the sandbox, and on nothing above it.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// Stable digests of a task's parts.
pub mod digest;
/// Grading a workspace.
pub mod grade;
/// The task format (task.toml, repo/, grader/, solution/) and its validation.
pub mod task;
/// Proving a task sound.
pub mod validate;

pub use grade::{GradeOptions, GradeResult, SandboxChoice, Verdict, grade};
pub use task::{Task, TaskError, find_tasks};
pub use validate::{Validation, validate};
