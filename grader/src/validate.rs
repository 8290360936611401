//! Proving a task sound: its check fails on the untouched repository and passes with the
//! reference solution laid over it. A task that passes untouched tests nothing; one that fails
//! with its solution can never be passed.

use std::path::Path;

use serde::Serialize;

use crate::grade::{GradeOptions, GradeResult, Verdict, grade};
use crate::task::Task;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Validation {
    pub task: String,
    pub ok: bool,
    pub problem: Option<String>,
    pub untouched: GradeResult,
    pub solved: GradeResult,
}

fn copy_tree(src: &Path, dst: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    for entry in std::fs::read_dir(src)? {
        let entry = entry?;
        let to = dst.join(entry.file_name());
        let ty = entry.file_type()?;
        if ty.is_dir() {
            copy_tree(&entry.path(), &to)?;
        } else if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &to)?;
        } else {
            std::fs::copy(entry.path(), &to)?;
        }
    }
    Ok(())
}

/// A fresh workspace from `repo/`, with `solution/` laid over it when `solved`.
fn workspace(task: &Task, solved: bool) -> std::io::Result<tempfile::TempDir> {
    // Each workspace gets its own parent, as in a real trial.
    let parent = tempfile::Builder::new()
        .prefix("anvil-validate-")
        .tempdir()?;
    let ws = parent.path().join("workspace");
    copy_tree(&task.repo(), &ws)?;
    if solved {
        copy_tree(&task.solution(), &ws)?;
    }
    Ok(parent)
}

pub async fn validate(task: &Task, opts: &GradeOptions) -> std::io::Result<Validation> {
    let untouched_dir = workspace(task, false)?;
    let untouched = grade(task, &untouched_dir.path().join("workspace"), opts).await;
    let solved_dir = workspace(task, true)?;
    let solved = grade(task, &solved_dir.path().join("workspace"), opts).await;
    let problem = match (untouched.verdict, solved.verdict) {
        (Verdict::Fail, Verdict::Pass) => None,
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
        (_, Verdict::Fail) => Some(format!(
            "the check fails with the reference solution: {}",
            solved.reason
        )),
    };
    Ok(Validation {
        task: task.spec.name.clone(),
        ok: problem.is_none(),
        problem,
        untouched,
        solved,
    })
}
