//! Grading a workspace: nothing the agent can write decides the verdict.
//!
//! 1. Paths the task forbids beside the workspace (`check.forbid_outside`) must not exist.
//! 2. The workspace is copied into a fresh grading directory by the one tree copy
//!    ([`crate::tree`]): no `.git`, no links out, no special files, no oversized files.
//! 3. The copy is scanned for tampering ([`crate::tamper`]) against the task's `repo/`;
//!    workspace cargo config and toolchain files are removed.
//! 4. The task's protected files are laid over the copy (an edited or deleted test comes back
//!    as the task wrote it).
//! 5. anvil's protected runner for the task's `check.runner` runs exactly the expected tests,
//!    in the sandbox every bash command gets (bubblewrap + seccomp on Linux, Seatbelt on
//!    macOS; no network; a confined view that shows the toolchains and the grading directory,
//!    never the task directory, `solution/` or other workspaces). No sandbox, no grade:
//!    running unconfined takes [`GradeOptions::unsandboxed`], and the result says so.
//! 6. The verdict is evidence: **pass** only when every expected test reported passed and
//!    nothing was tampered with; **tampered** when anything was (never a pass); **check
//!    timeout** when the tests ran past the task's timeout on the agent's code (the model's
//!    fail, never retried); **fail** otherwise. A runner that could not start is a **grader
//!    error**: an infrastructure failure, retried, never counted against the model.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anvil_agent::process::{self, ProcessOutput, ProcessSpec, Termination};
use anvil_agent::sandbox::{Confined, Sandbox, SandboxError, SandboxPolicy, View};
use anvil_llm::text::{Keep, Limit};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::digest::{self, TaskDigests};
use crate::tamper::{self, TamperFinding};
use crate::task::{Task, TestRunner};
use crate::tree::{self, CopyPolicy, SkipReason, Skipped};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every expected test passed; nothing was tampered with.
    Pass,
    /// Some expected test failed, errored, was skipped or is missing.
    Fail,
    /// The tests ran past the task's check timeout on the agent's code: the model's fail.
    CheckTimeout,
    /// The workspace changed test infrastructure: reported apart, never a pass.
    Tampered,
    /// The grading infrastructure failed; says nothing about the model.
    GraderError,
}

/// One expected test and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestOutcome {
    pub id: String,
    /// `passed`, `failed`, `error`, `skipped`, `expected_failure`, `unexpected_success`,
    /// `missing` (never reported), `unconfirmed` (reported passed by a run that did not
    /// finish cleanly), or `not_run`.
    pub outcome: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GradeResult {
    pub verdict: Verdict,
    pub reason: String,
    pub duration_ms: u64,
    /// The end of the runner's output (stdout then stderr).
    pub output_tail: String,
    /// What confined the check: `bubblewrap+seccomp`, `seatbelt`, or
    /// `none (--unsandboxed-grading)`.
    pub sandbox: String,
    pub tests: Vec<TestOutcome>,
    pub tamper: Vec<TamperFinding>,
    /// Entries of the workspace not copied for grading (see [`crate::tree`]).
    pub skipped: Vec<Skipped>,
    pub digests: TaskDigests,
}

#[derive(Debug, Clone, Default)]
pub struct GradeOptions {
    /// Run the check without any sandbox (recorded in the result). Only for machines where no
    /// sandbox can work, by explicit choice (`--unsandboxed-grading`).
    pub unsandboxed: bool,
    /// Keep the grading directory (its path is in the reason) for debugging.
    pub keep_dir: bool,
    /// Where grading directories are made (default: the system temp dir). Best on a
    /// filesystem the trials' workspaces cannot fill.
    pub grading_root: Option<PathBuf>,
}

/// Bytes of output kept from each end of each stream.
const CAPTURE_BYTES: usize = 8 * 1024;
/// The most output shown in a result.
const TAIL_CHARS: usize = 4000;
/// The most a runner may send over its results channel.
const MAX_CHANNEL_BYTES: usize = 1024 * 1024;
/// The revision of the grading rules and the cargo runner (bump it when they change what a
/// verdict means): part of every task's grader digest.
pub const RUNNER_REVISION: &str = "grade-2";
/// The protected Python runner, shipped inside anvil.
pub const PYTHON_HARNESS: &str = include_str!("../harness/python_unittest.py");

pub(crate) fn tail(s: &str) -> String {
    last_chars(s, TAIL_CHARS)
}

/// The last `n` characters of `s`.
fn last_chars(s: &str, n: usize) -> String {
    Limit::chars(n)
        .keep(Keep::Tail)
        .apply(s)
        .with_marker("")
        .into_owned()
}

/// The sandbox of one grading directory. The backend is probed once per process.
pub(crate) fn grading_sandbox(
    grading: &Path,
    hidden: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
) -> Sandbox {
    static PROBED: OnceLock<Result<(), SandboxError>> = OnceLock::new();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut confined = Confined::for_host(home.as_deref(), std::env::var_os("PATH").as_deref());
    for root in &toolchains().roots {
        if !confined.read_only.iter().any(|r| root.starts_with(r)) {
            confined.read_only.push(root.clone());
        }
    }
    let view = View::Confined(confined);
    let make = |dir: &Path| {
        Sandbox::new(SandboxPolicy::WorkspaceWrite { network: false }, dir)
            .with_view(view.clone())
            .with_hidden(hidden.clone())
    };
    let probed = PROBED
        .get_or_init(
            || match tempfile::Builder::new().prefix("anvil-probe-").tempdir() {
                Ok(dir) => make(dir.path()).probe(),
                Err(e) => Err(SandboxError::Broken(format!(
                    "cannot make a directory to probe the sandbox in: {e}"
                ))),
            },
        )
        .clone();
    make(grading).with_read_only(read_only).with_probe(probed)
}

/// How a grade confines its processes: the grading directory writable except what each phase
/// keeps read-only, and the task and the original workspace hidden. `None`: unsandboxed.
struct Confinement {
    grading: PathBuf,
    hidden: Vec<PathBuf>,
    /// The protected files and the runner: read-only in every phase, so neither the code under
    /// test nor a build script can rewrite a test before it runs.
    read_only: Vec<PathBuf>,
}

impl Confinement {
    /// The sandbox of one phase, with `extra_read_only` and `extra_hidden` on top.
    fn sandbox(&self, extra_read_only: &[PathBuf], extra_hidden: &[PathBuf]) -> Sandbox {
        let mut hidden = self.hidden.clone();
        hidden.extend(extra_hidden.iter().cloned());
        let mut read_only = self.read_only.clone();
        read_only.extend(extra_read_only.iter().cloned());
        grading_sandbox(&self.grading, hidden, read_only)
    }
}

/// Whether this machine can grade: the sandbox works here (unless `opts.unsandboxed`).
/// Returns what will confine checks; a worker calls it before taking a job, so a machine
/// without a sandbox fails once, saying what to install, instead of failing every trial.
pub fn preflight(opts: &GradeOptions) -> Result<String, String> {
    if opts.unsandboxed {
        return Ok("none (--unsandboxed-grading)".into());
    }
    let dir = tempfile::Builder::new()
        .prefix("anvil-grade-")
        .tempdir()
        .map_err(|e| format!("cannot create a grading directory: {e}"))?;
    let sandbox = grading_sandbox(dir.path(), Vec::new(), Vec::new());
    sandbox.probe().map_err(|e| {
        format!("cannot grade on this machine: {e} (or pass --unsandboxed-grading)")
    })?;
    Ok(sandbox.describe().to_string())
}

/// The host's Python and Rust toolchains, found once, from a neutral directory (so no
/// workspace file — `.python-version`, `rust-toolchain.toml` — can choose them).
#[derive(Debug, Clone)]
pub(crate) struct Toolchains {
    pub(crate) python: Result<PathBuf, String>,
    /// The sysroot's `bin/` (cargo and rustc there, not rustup's proxies).
    pub(crate) rust_bin: Result<PathBuf, String>,
    /// Where they live (Python's base prefix, Rust's sysroot): shown read-only to the check
    /// whatever HOME and PATH say.
    roots: Vec<PathBuf>,
}

pub(crate) fn toolchains() -> &'static Toolchains {
    static FOUND: OnceLock<Toolchains> = OnceLock::new();
    FOUND.get_or_init(|| {
        let ask = |program: &str, args: &[&str]| -> Result<String, String> {
            let out = std::process::Command::new(program)
                .args(args)
                .current_dir("/")
                .output()
                .map_err(|e| format!("cannot run {program}: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "{program} failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        };
        let python = ask(
            "python3",
            &[
                "-I",
                "-c",
                "import os, sys; print(os.path.realpath(sys.executable)); print(sys.base_prefix)",
            ],
        )
        .map_err(|e| format!("python-unittest tasks need python3 on PATH ({e})"));
        let sysroot = ask("rustc", &["--print", "sysroot"])
            .map(PathBuf::from)
            .map_err(|e| format!("cargo-test tasks need a Rust toolchain on PATH ({e})"));
        let mut roots = Vec::new();
        if let Ok(p) = &python {
            roots.extend(p.lines().skip(1).map(PathBuf::from));
            roots.extend(
                p.lines()
                    .next()
                    .and_then(|exe| Path::new(exe).parent())
                    .map(Path::to_path_buf),
            );
        }
        if let Ok(s) = &sysroot {
            roots.push(s.clone());
        }
        Toolchains {
            python: python.map(|p| PathBuf::from(p.lines().next().unwrap_or_default())),
            rust_bin: sysroot.map(|s| s.join("bin")),
            roots,
        }
    })
}

/// A fresh grading directory (under `opts.grading_root` when set), and its canonical path.
pub(crate) fn grading_dir(
    opts: &GradeOptions,
    prefix: &str,
) -> Result<(tempfile::TempDir, PathBuf), String> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(prefix);
    let made = match &opts.grading_root {
        Some(root) => builder.tempdir_in(root),
        None => builder.tempdir(),
    };
    let dir = made.map_err(|e| format!("cannot create a grading directory: {e}"))?;
    let path = dir
        .path()
        .canonicalize()
        .map_err(|e| format!("cannot create a grading directory: {e}"))?;
    Ok((dir, path))
}

/// Grades `workspace` against `task` (see the module docs).
pub async fn grade(task: &Task, workspace: &Path, opts: &GradeOptions) -> GradeResult {
    let started = Instant::now();
    let digests = digest::of_task(task).unwrap_or_else(|_| TaskDigests {
        task: String::new(),
        repo: String::new(),
        grader: String::new(),
        dependencies: String::new(),
    });
    let mut result = GradeResult {
        verdict: Verdict::GraderError,
        reason: String::new(),
        duration_ms: 0,
        output_tail: String::new(),
        sandbox: String::new(),
        tests: Vec::new(),
        tamper: Vec::new(),
        skipped: Vec::new(),
        digests,
    };
    let error = |mut r: GradeResult, reason: String| {
        r.verdict = Verdict::GraderError;
        r.reason = reason;
        r.duration_ms = started.elapsed().as_millis() as u64;
        r
    };
    let workspace = match workspace.canonicalize() {
        Ok(w) if w.is_dir() => w,
        _ => {
            let reason = format!("workspace {} is not a directory", workspace.display());
            return error(result, reason);
        }
    };
    for rel in &task.spec.check.forbid_outside {
        let outside = workspace.join(rel);
        if outside.symlink_metadata().is_ok() {
            result.verdict = Verdict::Fail;
            result.reason = format!(
                "the agent wrote outside its workspace: {} exists",
                outside.display()
            );
            result.duration_ms = started.elapsed().as_millis() as u64;
            return result;
        }
    }
    let (dir, grading) = match grading_dir(opts, "anvil-grade-") {
        Ok(made) => made,
        Err(reason) => return error(result, reason),
    };
    let confinement = if opts.unsandboxed {
        result.sandbox = "none (--unsandboxed-grading)".into();
        None
    } else {
        let mut hidden = task.answer_paths();
        hidden.push(workspace.clone());
        let sandbox = grading_sandbox(&grading, hidden.clone(), Vec::new());
        if let Err(e) = sandbox.probe() {
            return error(result, format!("no sandbox to grade in: {e}"));
        }
        result.sandbox = sandbox.describe().to_string();
        let mut read_only: Vec<PathBuf> = task
            .spec
            .check
            .protected
            .iter()
            .map(|rel| grading.join("work").join(rel))
            .collect();
        read_only.push(grading.join("harness"));
        Some(Confinement {
            grading: grading.clone(),
            hidden,
            read_only,
        })
    };
    let work = grading.join("work");
    let policy = CopyPolicy {
        // The grader builds afresh in its own target directory.
        exclude_top: match task.spec.check.runner {
            TestRunner::CargoTest => &["target"],
            TestRunner::PythonUnittest => &[],
        },
        ..CopyPolicy::default()
    };
    match tree::copy(&workspace, &work, &policy) {
        Ok(copied) => result.skipped = copied.skipped,
        Err(e) if e.source.raw_os_error() == Some(libc::ENOSPC) => {
            // A disk filled by the agent's own workspace is the model's doing, not a grader
            // error to retry (a free re-roll).
            let used = allocated_bytes(&workspace);
            if used >= FILLED_DISK_BYTES {
                result.verdict = Verdict::Tampered;
                result.tamper.push(TamperFinding::new(
                    "",
                    "oversized_file",
                    format!("the workspace holds {used} bytes on disk and filled it"),
                ));
                result.reason = format!(
                    "the workspace filled the disk ({used} bytes): not graded, counted as tampered"
                );
                result.duration_ms = started.elapsed().as_millis() as u64;
                return result;
            }
            return error(result, format!("cannot copy the workspace: {e}"));
        }
        Err(e) => return error(result, format!("cannot copy the workspace: {e}")),
    }
    for s in &result.skipped {
        let (kind, detail) = match &s.reason {
            SkipReason::TooLarge { bytes } => (
                "oversized_file",
                format!("{bytes} bytes (apparent size): too large to grade"),
            ),
            SkipReason::Sparse { bytes } => (
                "oversized_file",
                format!("a sparse file of {bytes} bytes (apparent size): not graded"),
            ),
            SkipReason::TotalLimit => (
                "oversized_file",
                "the workspace exceeds the grading copy's total size or file count".into(),
            ),
            SkipReason::TooDeep { depth } => (
                "too_deep",
                format!(
                    "a directory {depth} levels deep (over {}): not graded",
                    crate::tree::MAX_DEPTH
                ),
            ),
            SkipReason::LinkOutside { .. }
            | SkipReason::Special
            | SkipReason::Unreadable { .. } => {
                continue;
            }
        };
        result
            .tamper
            .push(TamperFinding::new(&s.path, kind, detail));
    }
    result.tamper.extend(tamper::scan(
        &work,
        &task.repo(),
        &task.spec.check.protected,
        task.spec.check.runner == TestRunner::CargoTest,
    ));
    if let Err(e) = remove_infrastructure(&work, Path::new("")) {
        return error(result, format!("cannot prepare the grading directory: {e}"));
    }
    for rel in &task.spec.check.protected {
        if let Err(e) = overlay(&task.protected_files(), &work, rel) {
            return error(
                result,
                format!("cannot put protected file {rel} in place: {e}"),
            );
        }
    }
    for d in ["home", "cargo-home", "harness"] {
        if let Err(e) = std::fs::create_dir_all(grading.join(d)) {
            return error(result, format!("cannot prepare the grading directory: {e}"));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(task.spec.check.timeout_secs);
    let ran = match task.spec.check.runner {
        TestRunner::PythonUnittest => {
            run_python(task, &grading, confinement.as_ref(), deadline).await
        }
        TestRunner::CargoTest => run_cargo(task, &grading, confinement.as_ref(), deadline).await,
    };
    let ran = match ran {
        Ok(r) => r,
        Err(reason) => return error(result, reason),
    };
    result.output_tail = tail(&ran.output);
    result.tests = ran.tests;
    result.tamper.extend(ran.tamper);
    let failing = result.tests.iter().find(|t| t.outcome != "passed");
    let (verdict, reason) = if ran.timed_out {
        (
            Verdict::CheckTimeout,
            format!(
                "the tests ran past the check's {} s timeout on the agent's code",
                task.spec.check.timeout_secs
            ),
        )
    } else if !result.tamper.is_empty() {
        let kinds: Vec<&str> = result.tamper.iter().map(|t| t.kind.as_str()).collect();
        (
            Verdict::Tampered,
            format!(
                "the workspace tampered with test infrastructure: {}",
                kinds.join(", ")
            ),
        )
    } else if let Some(t) = failing {
        (Verdict::Fail, format!("{}: {}", t.id, t.outcome))
    } else {
        (
            Verdict::Pass,
            format!("all {} expected tests passed", result.tests.len()),
        )
    };
    result.verdict = verdict;
    result.reason = if opts.keep_dir {
        let kept = dir.keep();
        format!("{reason} (grading directory kept at {})", kept.display())
    } else {
        reason
    };
    result.duration_ms = started.elapsed().as_millis() as u64;
    result
}

/// A workspace holding this much on disk when the grading copy runs out of space is taken to
/// have filled the disk itself.
const FILLED_DISK_BYTES: u64 = 256 * 1024 * 1024;

/// The disk space `dir` takes (allocated blocks, links not followed, bounded walk).
fn allocated_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > 1_000_000 {
                return total;
            }
            let Ok(m) = entry.path().symlink_metadata() else {
                continue;
            };
            total += m.blocks() * 512;
            if m.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}

/// Removes workspace cargo config and toolchain files (see [`tamper`]).
pub(crate) fn remove_infrastructure(root: &Path, rel: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let r = rel.join(entry.file_name());
        let kind = entry.file_type()?;
        if tamper::is_removed_before_grading(&r) {
            if kind.is_dir() {
                std::fs::remove_dir_all(root.join(&r))?;
            } else {
                std::fs::remove_file(root.join(&r))?;
            }
        } else if kind.is_dir() {
            remove_infrastructure(root, &r)?;
        }
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
    // Every ancestor becomes a real directory: a symlink (even one that stays inside) or a
    // file the agent put where a protected directory goes is removed, so the protected file
    // lands exactly at its path and nothing is written through a link.
    tree::real_parent_dirs(dst_root, Path::new(rel))?;
    std::fs::copy(src_root.join(rel), &to)?;
    Ok(())
}

/// What a runner found.
struct Ran {
    tests: Vec<TestOutcome>,
    tamper: Vec<TamperFinding>,
    output: String,
    timed_out: bool,
}

pub(crate) fn base_env(grading: &Path) -> Vec<(String, String)> {
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), grading.join("home").display().to_string()),
        ("LANG".into(), "C.UTF-8".into()),
        ("TMPDIR".into(), "/tmp".into()),
    ]
}

/// Runs `spec` in the sandbox (or not), until `deadline`.
pub(crate) async fn run_confined(
    spec: ProcessSpec,
    sandbox: Option<Sandbox>,
    deadline: Instant,
) -> Result<ProcessOutput, String> {
    let (head, tail) = if spec.capture_head > CAPTURE_BYTES {
        (spec.capture_head, CAPTURE_BYTES)
    } else {
        (CAPTURE_BYTES, CAPTURE_BYTES)
    };
    let spec = spec
        .timeout(deadline.saturating_duration_since(Instant::now()))
        .capture(head, tail);
    let (spec, _guard) = match sandbox {
        Some(s) => s
            .wrap(spec)
            .map_err(|e| format!("no sandbox to grade in: {e}"))?,
        None => (spec, Default::default()),
    };
    process::run(&spec, &CancellationToken::new())
        .await
        .map_err(|e| format!("cannot run the check: {e}"))
}

pub(crate) fn output_of(out: &ProcessOutput) -> String {
    format!("{}{}", out.stdout.text(), out.stderr.text())
}

/// A random nonce for one run's channel.
fn nonce() -> String {
    use sha2::{Digest, Sha256};
    let mut seed = Vec::new();
    seed.extend_from_slice(&std::process::id().to_ne_bytes());
    seed.extend_from_slice(
        &std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            .to_ne_bytes(),
    );
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let mut buf = [0u8; 32];
        if f.read_exact(&mut buf).is_ok() {
            seed.extend_from_slice(&buf);
        }
    }
    hex::encode(&Sha256::digest(&seed)[..16])
}

#[derive(Deserialize)]
struct HarnessEvent {
    nonce: Option<String>,
    event: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    detail: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    path: String,
}

async fn run_python(
    task: &Task,
    grading: &Path,
    confinement: Option<&Confinement>,
    deadline: Instant,
) -> Result<Ran, String> {
    let python = toolchains().python.clone()?;
    let harness = grading.join("harness/python_unittest.py");
    std::fs::write(&harness, PYTHON_HARNESS)
        .map_err(|e| format!("cannot write the test runner: {e}"))?;
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| format!("cannot make the results channel: {e}"))?;
    let nonce = nonce();
    let work = grading.join("work");
    let request = serde_json::json!({
        "nonce": nonce,
        "tests": task.spec.check.tests,
        "sources": [work.display().to_string()],
    });
    let mut spec = ProcessSpec::new(python.display().to_string(), &work).env(
        base_env(grading)
            .into_iter()
            .chain([("PYTHONDONTWRITEBYTECODE".to_string(), "1".to_string())])
            .collect(),
    );
    let fd = spec.pass_fd(Arc::new(std::os::fd::OwnedFd::from(theirs)));
    spec.args = vec![
        "-I".into(),
        "-S".into(),
        harness.display().to_string(),
        fd.to_string(),
    ];
    ours.set_nonblocking(true)
        .map_err(|e| format!("cannot use the results channel: {e}"))?;
    let mut channel = tokio::net::UnixStream::from_std(ours)
        .map_err(|e| format!("cannot use the results channel: {e}"))?;
    channel
        .write_all(format!("{request}\n").as_bytes())
        .await
        .map_err(|e| format!("cannot write to the results channel: {e}"))?;
    let stop = CancellationToken::new();
    let reader = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut data = Vec::new();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                tokio::select! {
                    biased;
                    read = channel.read(&mut buf) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if data.len() < MAX_CHANNEL_BYTES {
                                data.extend_from_slice(&buf[..n]);
                            }
                        }
                    },
                    _ = stop.cancelled() => break,
                }
            }
            data
        })
    };
    let out = run_confined(spec, confinement.map(|c| c.sandbox(&[], &[])), deadline).await;
    // The runner is gone (and with it the spec holding the other end): what it sent is in the
    // socket. A grandchild that kept the descriptor gets a moment, no more.
    let stopper = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            stop.cancel();
        })
    };
    let data = reader.await.unwrap_or_default();
    stopper.abort();
    let out = out?;
    let output = output_of(&out);
    let timed_out = out.termination == Termination::TimedOut;
    let mut reported: std::collections::HashMap<String, TestOutcome> = Default::default();
    let mut tamper = Vec::new();
    let mut spoke = false;
    let mut done = false;
    let mut forged = 0usize;
    for line in String::from_utf8_lossy(&data).lines() {
        let Ok(event) = serde_json::from_str::<HarnessEvent>(line) else {
            forged += 1;
            continue;
        };
        if event.nonce.as_deref() != Some(nonce.as_str()) {
            forged += 1;
            continue;
        }
        spoke = true;
        match event.event.as_str() {
            "test" => {
                // A second report of a test is a forgery attempt: the first one stands.
                if reported.contains_key(&event.id) {
                    forged += 1;
                    continue;
                }
                reported.insert(
                    event.id.clone(),
                    TestOutcome {
                        id: event.id,
                        outcome: event.outcome,
                        detail: event.detail,
                    },
                );
            }
            "tamper" => tamper.push(TamperFinding::new(event.path, &event.kind, event.detail)),
            "done" => done = true,
            "started" => {}
            _ => forged += 1,
        }
    }
    if forged > 0 {
        tamper.push(TamperFinding::new(
            "",
            "forged_result",
            format!("{forged} lines on the results channel did not come from the runner"),
        ));
    }
    if !spoke && !timed_out {
        return Err(format!(
            "the test runner did not start ({}): {}",
            describe(out.termination),
            tail(&output)
        ));
    }
    // A run counts only when the runner finished it itself: it said `done` and exited 0. A
    // runner killed or ended by anything else (a child that forged lines and killed it) leaves
    // every test unproven.
    let finished = done && out.termination == Termination::Exited(0);
    if !finished {
        for t in reported.values_mut() {
            if t.outcome == "passed" {
                t.outcome = "unconfirmed".into();
                t.detail = format!(
                    "reported passed, but the runner did not finish the run ({})",
                    describe(out.termination)
                );
            }
        }
    }
    let tests = task
        .spec
        .check
        .tests
        .iter()
        .map(|id| {
            reported.remove(id).unwrap_or_else(|| TestOutcome {
                id: id.clone(),
                outcome: "missing".into(),
                detail: if done {
                    "the runner did not report it".into()
                } else {
                    format!(
                        "the run ended before this test reported ({})",
                        describe(out.termination)
                    )
                },
            })
        })
        .collect();
    Ok(Ran {
        tests,
        tamper,
        output,
        timed_out,
    })
}

pub(crate) fn describe(t: Termination) -> String {
    match t {
        Termination::Exited(c) => format!("exit {c}"),
        Termination::Signaled(s) => format!("signal {s}"),
        Termination::TimedOut => "timed out".into(),
        Termination::Cancelled => "cancelled".into(),
    }
}

/// A test executable cargo built: its target's name and path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TestBinary {
    target: String,
    kind: String,
    executable: PathBuf,
    /// The source the target was built from.
    src_path: PathBuf,
}

/// The test executables in `cargo test --no-run --message-format=json` output.
fn test_binaries(json_lines: &str) -> Vec<TestBinary> {
    let mut out = Vec::new();
    for line in json_lines.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v.get("reason").and_then(|r| r.as_str()) != Some("compiler-artifact") {
            continue;
        }
        let test = v.pointer("/profile/test").and_then(|t| t.as_bool()) == Some(true);
        let exe = v.get("executable").and_then(|e| e.as_str());
        let name = v.pointer("/target/name").and_then(|n| n.as_str());
        let kind = v
            .pointer("/target/kind/0")
            .and_then(|k| k.as_str())
            .unwrap_or_default();
        let src = v
            .pointer("/target/src_path")
            .and_then(|s| s.as_str())
            .unwrap_or_default();
        if let (true, Some(exe), Some(name)) = (test, exe, name) {
            out.push(TestBinary {
                target: name.to_string(),
                kind: kind.to_string(),
                executable: PathBuf::from(exe),
                src_path: PathBuf::from(src),
            });
        }
    }
    out
}

async fn run_cargo(
    task: &Task,
    grading: &Path,
    confinement: Option<&Confinement>,
    deadline: Instant,
) -> Result<Ran, String> {
    let bin = toolchains().rust_bin.clone()?;
    let work = grading.join("work");
    let mut env = base_env(grading);
    env[0].1 = format!("{}:{}", bin.display(), env[0].1);
    env.extend([
        (
            "CARGO_HOME".into(),
            grading.join("cargo-home").display().to_string(),
        ),
        (
            "CARGO_TARGET_DIR".into(),
            grading.join("target").display().to_string(),
        ),
        ("RUSTC".into(), bin.join("rustc").display().to_string()),
        ("CARGO_NET_OFFLINE".into(), "true".into()),
        ("CARGO_TERM_COLOR".into(), "never".into()),
        ("CARGO_INCREMENTAL".into(), "0".into()),
    ]);
    let build = ProcessSpec::new(bin.join("cargo").display().to_string(), &work)
        .args([
            "test",
            "--no-run",
            "--offline",
            "--message-format=json-render-diagnostics",
        ])
        .env(env.clone())
        // Every artifact message is needed to find the test binaries.
        .capture(4 * 1024 * 1024, 0);
    let built = run_confined(build, confinement.map(|c| c.sandbox(&[], &[])), deadline).await?;
    let mut output = built.stderr.text();
    let not_run = |detail: String| -> Vec<TestOutcome> {
        task.spec
            .check
            .tests
            .iter()
            .map(|id| TestOutcome {
                id: id.clone(),
                outcome: "not_run".into(),
                detail: detail.clone(),
            })
            .collect()
    };
    match built.termination {
        Termination::Exited(0) => {}
        Termination::TimedOut => {
            return Ok(Ran {
                tests: not_run("the build ran past the timeout".into()),
                tamper: Vec::new(),
                output,
                timed_out: true,
            });
        }
        other => {
            return Ok(Ran {
                tests: not_run(format!("the tests did not build ({})", describe(other))),
                tamper: Vec::new(),
                output,
                timed_out: false,
            });
        }
    }
    let binaries = test_binaries(&built.stdout.text());
    // Whatever the manifest says, an expected target must be built from its protected file.
    let mut tamper = Vec::new();
    for b in &binaries {
        let expected = work.join("tests").join(format!("{}.rs", b.target));
        let wanted = task
            .spec
            .check
            .tests
            .iter()
            .any(|id| id.split_once("::").is_some_and(|(t, _)| t == b.target));
        if b.kind == "test" && wanted && b.src_path != expected {
            tamper.push(TamperFinding::new(
                format!("tests/{}.rs", b.target),
                "manifest_test_settings",
                format!(
                    "test target {} is built from {}, not from its protected file",
                    b.target,
                    b.src_path.display()
                ),
            ));
        }
    }
    // While tests run, the build's output is read-only (a binary under test cannot replace the
    // test binary, or another one, before it runs), and the protected test sources are hidden
    // (compiled in already; code under test cannot read the expected values from them).
    let protected_sources: Vec<PathBuf> = task
        .spec
        .check
        .protected
        .iter()
        .map(|rel| work.join(rel))
        .collect();
    let test_phase = confinement.map(|c| (c, vec![grading.join("target")], protected_sources));
    let mut tests = Vec::new();
    let mut timed_out = false;
    for id in &task.spec.check.tests {
        let Some((target, name)) = id.split_once("::") else {
            continue;
        };
        if timed_out {
            tests.push(TestOutcome {
                id: id.clone(),
                outcome: "not_run".into(),
                detail: "the check's time ran out".into(),
            });
            continue;
        }
        let Some(binary) = binaries
            .iter()
            .find(|b| b.target == target && b.kind == "test")
        else {
            tests.push(TestOutcome {
                id: id.clone(),
                outcome: "missing".into(),
                detail: format!("cargo built no test target '{target}'"),
            });
            continue;
        };
        let spec = ProcessSpec::new(binary.executable.display().to_string(), &work)
            .args(["--exact", name, "--test-threads=1"])
            .env(env.clone());
        let sandbox = test_phase
            .as_ref()
            .map(|(c, read_only, hidden)| c.sandbox(read_only, hidden));
        let out = run_confined(spec, sandbox, deadline).await?;
        let stdout = out.stdout.text();
        output.push_str(&output_of(&out));
        let outcome = match out.termination {
            Termination::TimedOut => {
                timed_out = true;
                "not_run"
            }
            Termination::Exited(0)
                if stdout
                    .lines()
                    .any(|l| l.trim() == format!("test {name} ... ok"))
                    && stdout.contains("test result: ok. 1 passed;") =>
            {
                "passed"
            }
            Termination::Exited(0) if stdout.contains(&format!("test {name} ... ignored")) => {
                "skipped"
            }
            Termination::Exited(0) => "missing",
            _ => "failed",
        };
        tests.push(TestOutcome {
            id: id.clone(),
            outcome: outcome.into(),
            detail: if outcome == "passed" {
                String::new()
            } else {
                last_chars(&output_of(&out), 1500)
            },
        });
    }
    Ok(Ran {
        tests,
        tamper,
        output,
        timed_out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_binaries_are_read_from_cargo_messages() {
        let lines = r#"{"reason":"compiler-artifact","target":{"name":"sums","kind":["lib"]},"profile":{"test":false},"executable":null}
{"reason":"compiler-artifact","target":{"name":"sums","kind":["lib"],"src_path":"/w/src/lib.rs"},"profile":{"test":true},"executable":"/t/deps/sums-1"}
{"reason":"compiler-artifact","target":{"name":"sum","kind":["test"],"src_path":"/w/tests/sum.rs"},"profile":{"test":true},"executable":"/t/deps/sum-2"}
{"reason":"build-finished","success":true}"#;
        assert_eq!(
            test_binaries(lines),
            vec![
                TestBinary {
                    target: "sums".into(),
                    kind: "lib".into(),
                    executable: "/t/deps/sums-1".into(),
                    src_path: "/w/src/lib.rs".into(),
                },
                TestBinary {
                    target: "sum".into(),
                    kind: "test".into(),
                    executable: "/t/deps/sum-2".into(),
                    src_path: "/w/tests/sum.rs".into(),
                },
            ]
        );
    }
}
