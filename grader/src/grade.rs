//! Grading a workspace: nothing the agent can write decides the verdict.
//!
//! 1. The workspace is copied into a fresh grading directory. `.git/` is left out, and so is any
//!    symlink that resolves outside the workspace (listed in the result): the check can neither
//!    read nor write through one.
//! 2. The task's protected files are copied over it, replacing whatever the agent wrote at those
//!    paths (an edited or deleted visible test comes back as the task wrote it).
//! 3. The check script runs from the task's own `grader/` (never from the workspace) with a
//!    timeout and bounded output capture, through the process supervisor, and — when bubblewrap
//!    is installed — with the network off and writes confined to the grading directory.
//! 4. Exit 0 is a pass; any other exit a fail; a check that cannot run or runs past its timeout
//!    is a grader error: an infrastructure failure, never counted as the model's fail.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anvil_agent::process::{self, ProcessSpec, Termination};
use anvil_agent::sandbox::{Mounts, SandboxPolicy, bwrap};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::digest::{self, TaskDigests};
use crate::task::Task;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Fail,
    /// The grading infrastructure failed; says nothing about the model.
    GraderError,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GradeResult {
    pub verdict: Verdict,
    pub reason: String,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    /// The end of the check's output (stdout then stderr).
    pub output_tail: String,
    /// Whether the check ran inside bubblewrap.
    pub sandboxed: bool,
    /// Symlinks of the workspace that were not copied (they resolve outside it).
    pub skipped_symlinks: Vec<String>,
    pub digests: TaskDigests,
}

/// Whether to confine the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxChoice {
    /// Use bubblewrap when it is installed; if installed but broken, that is a grader error.
    Auto,
    /// Require bubblewrap: without it every grade is a grader error.
    Require,
    /// Never (tests of the grader itself only).
    Off,
}

#[derive(Debug, Clone)]
pub struct GradeOptions {
    pub sandbox: SandboxChoice,
    /// Keep the grading directory (its path is in the reason) for debugging.
    pub keep_dir: bool,
}

impl Default for GradeOptions {
    fn default() -> Self {
        Self {
            sandbox: SandboxChoice::Auto,
            keep_dir: false,
        }
    }
}

/// Bytes of output kept from each end of each stream.
const CAPTURE_BYTES: usize = 8 * 1024;
/// The most output shown in a result.
const TAIL_CHARS: usize = 4000;

fn copy_workspace(
    src: &Path,
    dst: &Path,
    root: &Path,
    skipped: &mut Vec<String>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dst)?;
    let mut entries: Vec<_> = std::fs::read_dir(src)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let from = entry.path();
        let to = dst.join(entry.file_name());
        let meta = std::fs::symlink_metadata(&from)?;
        let rel = from
            .strip_prefix(root)
            .unwrap_or(&from)
            .display()
            .to_string();
        if meta.file_type().is_symlink() {
            match from.canonicalize() {
                Ok(target) if target.starts_with(root) => {
                    std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
                }
                _ => skipped.push(rel),
            }
        } else if meta.is_dir() {
            if entry.file_name() == ".git" {
                continue;
            }
            copy_workspace(&from, &to, root, skipped)?;
        } else if meta.is_file() {
            std::fs::copy(&from, &to)?;
        }
        // Sockets, fifos and devices are not copied.
    }
    Ok(())
}

/// Copies `src_root/rel` over `dst_root/rel`, replacing a file or directory the agent put there.
fn overlay(src_root: &Path, dst_root: &Path, rel: &str) -> std::io::Result<()> {
    let to = dst_root.join(rel);
    match std::fs::symlink_metadata(&to) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(&to)?,
        Ok(_) => std::fs::remove_file(&to)?,
        Err(_) => {}
    }
    if let Some(parent) = to.parent() {
        // A symlinked parent directory was not copied, so parents here are real directories.
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(src_root.join(rel), &to)?;
    Ok(())
}

fn child_env(grading: &Path, workspace: &Path, task: &Task) -> Vec<(String, String)> {
    let home = std::env::var("HOME").unwrap_or_default();
    let rustup_home = std::env::var("RUSTUP_HOME").unwrap_or_else(|_| format!("{home}/.rustup"));
    vec![
        (
            "PATH".into(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        ),
        ("HOME".into(), grading.join("home").display().to_string()),
        ("LANG".into(), "C.UTF-8".into()),
        ("RUSTUP_HOME".into(), rustup_home),
        (
            "CARGO_HOME".into(),
            grading.join("cargo-home").display().to_string(),
        ),
        ("CARGO_NET_OFFLINE".into(), "true".into()),
        ("CARGO_TERM_COLOR".into(), "never".into()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        ("ANVIL_WORKSPACE".into(), workspace.display().to_string()),
        ("ANVIL_TASK_DIR".into(), task.dir.display().to_string()),
    ]
}

fn tail(s: &str) -> String {
    let count = s.chars().count();
    if count <= TAIL_CHARS {
        return s.to_string();
    }
    s.chars().skip(count - TAIL_CHARS).collect()
}

/// Grades `workspace` against `task` (see the module docs).
pub async fn grade(task: &Task, workspace: &Path, opts: &GradeOptions) -> GradeResult {
    let digests = digest::of_task(task).unwrap_or_else(|_| TaskDigests {
        task: String::new(),
        repo: String::new(),
        grader: String::new(),
        dependencies: String::new(),
    });
    let error = |reason: String| GradeResult {
        verdict: Verdict::GraderError,
        reason,
        exit_code: None,
        duration_ms: 0,
        output_tail: String::new(),
        sandboxed: false,
        skipped_symlinks: Vec::new(),
        digests: digests.clone(),
    };
    let workspace = match workspace.canonicalize() {
        Ok(w) if w.is_dir() => w,
        _ => {
            return error(format!(
                "workspace {} is not a directory",
                workspace.display()
            ));
        }
    };
    let bwrap_path = match opts.sandbox {
        SandboxChoice::Off => None,
        SandboxChoice::Auto => bwrap::find(),
        SandboxChoice::Require => match bwrap::find() {
            Some(p) => Some(p),
            None => return error("the sandbox is required but bubblewrap is not installed (apt-get install bubblewrap)".into()),
        },
    };
    if let Some(b) = &bwrap_path
        && let Err(e) = bwrap::works(b)
    {
        return error(e);
    }
    let dir = match tempfile::Builder::new().prefix("anvil-grade-").tempdir() {
        Ok(d) => d,
        Err(e) => return error(format!("cannot create a grading directory: {e}")),
    };
    let grading = match dir.path().canonicalize() {
        Ok(p) => p,
        Err(e) => return error(format!("cannot create a grading directory: {e}")),
    };
    let work = grading.join("work");
    let mut skipped = Vec::new();
    if let Err(e) = copy_workspace(&workspace, &work, &workspace, &mut skipped) {
        return error(format!("cannot copy the workspace: {e}"));
    }
    for rel in &task.spec.check.protected {
        if let Err(e) = overlay(&task.protected_files(), &work, rel) {
            return error(format!("cannot put protected file {rel} in place: {e}"));
        }
    }
    for d in ["home", "cargo-home"] {
        if let Err(e) = std::fs::create_dir_all(grading.join(d)) {
            return error(format!("cannot prepare the grading directory: {e}"));
        }
    }
    let mut spec = ProcessSpec::new("bash", &work)
        .args([task.check_script().display().to_string()])
        .env(child_env(&grading, &workspace, task))
        .timeout(Duration::from_secs(task.spec.check.timeout_secs))
        .capture(CAPTURE_BYTES, CAPTURE_BYTES);
    let sandboxed = bwrap_path.is_some();
    if let Some(b) = &bwrap_path {
        let mut read_only: Vec<PathBuf> = vec![task.dir.clone()];
        if let Some(parent) = workspace.parent() {
            read_only.push(parent.to_path_buf());
        }
        let mounts = Mounts {
            writable: vec![grading.clone()],
            read_only,
            ..Mounts::default()
        };
        spec = bwrap::wrap(
            b,
            spec,
            SandboxPolicy::WorkspaceWrite { network: false },
            &mounts,
        );
    }
    let out = match process::run(&spec, &CancellationToken::new()).await {
        Ok(o) => o,
        Err(e) => return error(format!("cannot run the check: {e}")),
    };
    let output_tail = tail(&format!("{}{}", out.stdout.text(), out.stderr.text()));
    let (verdict, reason, exit_code) = match out.termination {
        Termination::Exited(0) => (Verdict::Pass, "the check passed".to_string(), Some(0)),
        Termination::Exited(code) => (
            Verdict::Fail,
            format!("the check exited with {code}"),
            Some(code),
        ),
        Termination::Signaled(sig) => (
            Verdict::Fail,
            format!("the check was killed by signal {sig}"),
            None,
        ),
        Termination::TimedOut => (
            Verdict::GraderError,
            format!(
                "the check ran past its {} s timeout and was killed",
                task.spec.check.timeout_secs
            ),
            None,
        ),
        Termination::Cancelled => (Verdict::GraderError, "grading was cancelled".into(), None),
    };
    let reason = if opts.keep_dir {
        let kept = dir.keep();
        format!("{reason} (grading directory kept at {})", kept.display())
    } else {
        reason
    };
    GradeResult {
        verdict,
        reason,
        exit_code,
        duration_ms: out.duration.as_millis() as u64,
        output_tail,
        sandboxed,
        skipped_symlinks: skipped,
        digests,
    }
}
