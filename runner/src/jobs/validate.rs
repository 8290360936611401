//! Proving a task sound: its check fails on the untouched repository and passes with the
//! reference solution laid over it, both on workspaces prepared exactly as a trial's are
//! ([`Workspaces::prepare`], then the one tree copy for `solution/`). A task that passes
//! untouched tests nothing; one that fails with its solution can never be passed.
//!
//! The solved check's time is recorded, and a task whose check timeout leaves less than
//! [`HEADROOM`]× that time is refused: a check timeout must only ever come from the agent's
//! code, never from a machine that is a little slow.

use std::path::{Path, PathBuf};

use anvil_grader::tree::{self, CopyPolicy};
use anvil_grader::{GradeOptions, GradeResult, Task, Verdict, digest, grade};
use serde::Serialize;

use crate::jobs::workspace::{WorkspaceError, Workspaces};

/// Why a task could not be validated at all (an unsound task is a [`Validation`], not this).
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error("cannot digest {}: {source}", dir.display())]
    Digest {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error("cannot lay the solution over the workspace: {0}")]
    Solution(#[from] tree::CopyError),
}

/// The least ratio of a task's check timeout to its reference solution's check time.
pub const HEADROOM: f64 = 3.0;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Validation {
    pub task: String,
    pub ok: bool,
    pub problem: Option<String>,
    /// How long the reference solution's check took.
    pub solution_check_ms: u64,
    pub untouched: GradeResult,
    pub solved: GradeResult,
}

/// Validates `task`, making its workspaces under `root`.
pub async fn validate(
    task: &Task,
    opts: &GradeOptions,
    root: &Path,
) -> Result<Validation, ValidateError> {
    let key = digest::of_task(task)
        .map_err(|source| ValidateError::Digest {
            dir: task.dir.clone(),
            source,
        })?
        .repo;
    let workspaces = Workspaces::new(root);
    let untouched_ws =
        workspaces.prepare(&task.repo(), &key, &format!("{}-untouched", task.spec.name))?;
    let untouched = grade(task, untouched_ws.path(), opts).await;
    let solved_ws =
        workspaces.prepare(&task.repo(), &key, &format!("{}-solved", task.spec.name))?;
    tree::copy(&task.solution(), solved_ws.path(), &CopyPolicy::default())?;
    let solved = grade(task, solved_ws.path(), opts).await;
    let timeout_ms = task.spec.check.timeout_secs * 1000;
    let problem = match (untouched.verdict, solved.verdict) {
        (Verdict::GraderError, _) => Some(format!(
            "grader error on the untouched repo: {}",
            untouched.reason
        )),
        (_, Verdict::GraderError) => {
            Some(format!("grader error with the solution: {}", solved.reason))
        }
        (Verdict::Pass, _) => {
            Some("the check passes on the untouched repo: it tests nothing".into())
        }
        (Verdict::Tampered, _) => Some(format!(
            "the untouched repo is flagged as tampered: {}",
            untouched.reason
        )),
        (_, Verdict::Pass) if (timeout_ms as f64) < HEADROOM * solved.duration_ms as f64 => {
            Some(format!(
                "check.timeout_secs = {} leaves less than {HEADROOM}x headroom over the \
                 solution's check ({} ms): raise it to at least {} s",
                task.spec.check.timeout_secs,
                solved.duration_ms,
                ((HEADROOM * solved.duration_ms as f64) / 1000.0).ceil() as u64
            ))
        }
        (_, Verdict::Pass) => None,
        (_, Verdict::Fail | Verdict::CheckTimeout | Verdict::Tampered) => Some(format!(
            "the check does not pass with the reference solution: {}",
            solved.reason
        )),
    };
    Ok(Validation {
        task: task.spec.name.clone(),
        ok: problem.is_none(),
        problem,
        solution_check_ms: solved.duration_ms,
        untouched,
        solved,
    })
}
