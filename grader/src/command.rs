//! One shell command checked in a grading copy: `anvil auto`'s verify step (a feature's
//! `verify.cmd` at a session's commit), on the same protected grading environment as a task's
//! check ([`crate::grade`]):
//!
//! 1. The tree under check is copied into a fresh grading directory by the one tree copy
//!    ([`crate::tree`]); workspace cargo config and toolchain files are removed.
//! 2. The protected paths are laid over from the trusted tree ([`crate::protect::lay_over`]):
//!    an edited, deleted or added test under a protected path cannot change the verdict.
//! 3. The command runs under `/bin/sh -c` in the grading copy, in the sandbox every check
//!    gets (no network; a confined view showing the toolchains and the grading directory,
//!    never the tree under check or the trusted tree; the laid-over entries read-only), with
//!    the same environment as the cargo runner (toolchains on PATH, a private HOME, cargo
//!    offline with its own target directory).
//! 3a. Anything beside the protected paths that Python would import in their place or in
//!    place of the test runner, or run first ([`crate::shadow::shadows`]: a `tests.py`
//!    beside a protected `tests/`, a `unittest/` package, a new root `conftest.py`), makes the
//!    verdict **fail** without running the command: such a tree cannot show that the
//!    protected tests pass. The paths are in the result's `shadowing`.
//! 4. The verdict: **pass** when the command exits 0; **timeout** when it runs past its time
//!    (the checked code's fail, like a check timeout); **fail** on any other end; **grader
//!    error** when the copy, the lay-over or the sandbox failed (infrastructure: retried,
//!    never counted against the code).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anvil_agent::process::{ProcessSpec, Termination};
use serde::{Deserialize, Serialize};

use crate::grade::{self, GradeOptions};
use crate::protect::{self, LaidOver, ProtectedPaths};
use crate::tree::{self, CopyPolicy, Skipped};

/// One command to check.
#[derive(Debug, Clone, Copy)]
pub struct CommandCheck<'a> {
    /// The tree under check (never written).
    pub tree: &'a Path,
    /// The tree the protected paths come from (never written).
    pub trusted: &'a Path,
    pub protected: &'a ProtectedPaths,
    /// Run by `/bin/sh -c` in the grading copy's root.
    pub command: &'a str,
    pub timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandVerdict {
    /// The command exited 0.
    Pass,
    /// The command ended any other way.
    Fail,
    /// The command ran past its timeout: the checked code's fail.
    Timeout,
    /// The grading infrastructure failed; says nothing about the code.
    GraderError,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    pub verdict: CommandVerdict,
    pub reason: String,
    pub duration_ms: u64,
    /// The end of the command's output (stdout then stderr).
    pub output_tail: String,
    /// What confined the command (see [`crate::GradeResult::sandbox`]).
    pub sandbox: String,
    /// What the lay-over removed and restored.
    pub laid_over: LaidOver,
    /// Entries of the tree under check not copied (see [`crate::tree`]).
    pub skipped: Vec<Skipped>,
    /// The command's exit status when it exited (126/127: the shell could not run it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Entries that would be imported in place of the protected paths or the runner (step
    /// 3a); when any, the verdict is `fail` and the command did not run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shadowing: Vec<String>,
}

/// Checks `check.command` (see the module docs).
pub async fn check_command(check: &CommandCheck<'_>, opts: &GradeOptions) -> CommandResult {
    let started = Instant::now();
    let mut result = CommandResult {
        verdict: CommandVerdict::GraderError,
        reason: String::new(),
        duration_ms: 0,
        output_tail: String::new(),
        sandbox: String::new(),
        laid_over: LaidOver::default(),
        skipped: Vec::new(),
        exit_code: None,
        shadowing: Vec::new(),
    };
    let error = |mut r: CommandResult, reason: String| {
        r.verdict = CommandVerdict::GraderError;
        r.reason = reason;
        r.duration_ms = started.elapsed().as_millis() as u64;
        r
    };
    let (tree_dir, trusted) = match (check.tree.canonicalize(), check.trusted.canonicalize()) {
        (Ok(t), Ok(p)) if t.is_dir() && p.is_dir() => (t, p),
        _ => {
            let reason = format!(
                "{} or {} is not a directory",
                check.tree.display(),
                check.trusted.display()
            );
            return error(result, reason);
        }
    };
    // `_dir` lives to the end: dropping it removes the grading directory.
    let (_dir, grading) = match grade::grading_dir(opts, "anvil-verify-") {
        Ok(made) => made,
        Err(reason) => return error(result, reason),
    };
    let hidden = vec![tree_dir.clone(), trusted.clone()];
    if opts.unsandboxed {
        result.sandbox = "none (--unsandboxed-grading)".into();
    } else {
        let sandbox = grade::grading_sandbox(&grading, hidden.clone(), Vec::new());
        if let Err(e) = sandbox.probe() {
            return error(result, format!("no sandbox to grade in: {e}"));
        }
        result.sandbox = sandbox.describe().to_string();
    }
    let work = grading.join("work");
    match tree::copy(&tree_dir, &work, &CopyPolicy::default()) {
        Ok(copied) => result.skipped = copied.skipped,
        Err(e) => return error(result, format!("cannot copy the tree under check: {e}")),
    }
    if let Err(e) = grade::remove_infrastructure(&work, Path::new("")) {
        return error(result, format!("cannot prepare the grading directory: {e}"));
    }
    match protect::lay_over(&work, &trusted, check.protected) {
        Ok(done) => result.laid_over = done,
        Err(e) => return error(result, format!("cannot lay the protected paths over: {e}")),
    }
    result.shadowing = crate::shadow::shadows(&work, &trusted, check.protected);
    if !result.shadowing.is_empty() {
        result.verdict = CommandVerdict::Fail;
        result.reason = format!(
            "not run: {} would be imported in place of the protected tests or the test runner, \
             or run before them",
            result.shadowing.join(", ")
        );
        result.output_tail = result.reason.clone();
        result.duration_ms = started.elapsed().as_millis() as u64;
        return result;
    }
    for d in ["home", "cargo-home"] {
        if let Err(e) = std::fs::create_dir_all(grading.join(d)) {
            return error(result, format!("cannot prepare the grading directory: {e}"));
        }
    }
    let spec = ProcessSpec::new("/bin/sh", &work)
        .args(["-c", check.command])
        .env(command_env(&grading));
    let sandbox = (!opts.unsandboxed).then(|| {
        let read_only: Vec<PathBuf> = result
            .laid_over
            .restored
            .iter()
            .map(|rel| work.join(rel))
            .collect();
        grade::grading_sandbox(&grading, hidden.clone(), read_only)
    });
    let deadline = Instant::now() + check.timeout;
    let out = match grade::run_confined(spec, sandbox, deadline).await {
        Ok(out) => out,
        Err(reason) => return error(result, reason),
    };
    result.output_tail = grade::tail(&grade::output_of(&out));
    if let Termination::Exited(code) = out.termination {
        result.exit_code = Some(code);
    }
    (result.verdict, result.reason) = match out.termination {
        Termination::Exited(0) => (CommandVerdict::Pass, "the command exited 0".into()),
        Termination::TimedOut => (
            CommandVerdict::Timeout,
            format!(
                "the command ran past its {} s timeout",
                check.timeout.as_secs()
            ),
        ),
        Termination::Cancelled => (
            CommandVerdict::GraderError,
            "the command was cancelled".into(),
        ),
        other @ (Termination::Exited(_) | Termination::Signaled(_)) => (
            CommandVerdict::Fail,
            format!("the command failed ({})", grade::describe(other)),
        ),
    };
    result.duration_ms = started.elapsed().as_millis() as u64;
    result
}

/// The cargo runner's environment, with the host's Python beside the Rust toolchain on PATH.
fn command_env(grading: &Path) -> Vec<(String, String)> {
    let tools = grade::toolchains();
    let mut env = grade::base_env(grading);
    let mut path: Vec<String> = Vec::new();
    if let Ok(bin) = &tools.rust_bin {
        path.push(bin.display().to_string());
    }
    if let Some(dir) = tools.python.as_ref().ok().and_then(|p| p.parent()) {
        path.push(dir.display().to_string());
    }
    path.push(env[0].1.clone());
    env[0].1 = path.join(":");
    env.extend([
        (
            "CARGO_HOME".into(),
            grading.join("cargo-home").display().to_string(),
        ),
        (
            "CARGO_TARGET_DIR".into(),
            grading.join("target").display().to_string(),
        ),
        ("CARGO_NET_OFFLINE".into(), "true".into()),
        ("CARGO_TERM_COLOR".into(), "never".into()),
        ("CARGO_INCREMENTAL".into(), "0".into()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
    ]);
    if let Ok(bin) = &tools.rust_bin {
        env.push(("RUSTC".into(), bin.join("rustc").display().to_string()));
    }
    env
}
