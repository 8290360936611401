//! The process supervisor: the one place anvil runs the subprocesses it does not control —
//! the bash tool's commands, the grader's check, an eval trial's `anvil -p` and (as a long-lived
//! [`Service`]) MCP servers. Short fixed helpers whose output anvil needs whole (`git` making
//! a workspace template, a sandbox backend's probe) run with `std::process::Command` instead.
//!
//! - Each process leads a new process group; timeout, cancellation and the end of the command
//!   kill the whole group, so `sleep 100 &` does not outlive its command.
//! - Output is captured through [`drain_bounded`]: a fixed head and tail are kept and the middle
//!   is discarded *while reading continues*, so unlimited output neither fills memory nor
//!   blocks the child on a full pipe.
//! - A process outside the group that still holds a pipe (one that called `setsid`) cannot hang
//!   the caller: readers get a short grace period after the leader is reaped, then stop.
//! - A [`GroupGuard`] owns the group: if the future running the process is dropped (its turn was
//!   cancelled by dropping it), the guard kills the group on the way out.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

mod service;

pub use service::{STDERR_TAIL, Service, StderrTail, kill_all_services, live_services};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;

use crate::secrets::{RedactingReader, Redactor};

/// What to run and within which limits.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// The complete environment (the parent's is not inherited).
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Bytes kept from the start and from the end of each output stream.
    pub capture_head: usize,
    pub capture_tail: usize,
    /// How long readers may keep going after the process group is gone.
    pub reader_grace: Duration,
    /// Descriptors the child gets at 3, 4, … in this order (see [`ProcessSpec::pass_fd`]).
    pub pass_fds: Vec<std::sync::Arc<std::os::fd::OwnedFd>>,
    /// Redacts both streams as they are read, before the capture keeps a head and a tail: a
    /// secret straddling a cut is redacted whole, never left half visible.
    pub redactor: Option<std::sync::Arc<Redactor>>,
}

impl ProcessSpec {
    pub fn new(program: impl Into<String>, cwd: impl Into<PathBuf>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            cwd: cwd.into(),
            env: Vec::new(),
            timeout: Duration::from_secs(120),
            capture_head: 16 * 1024,
            capture_tail: 16 * 1024,
            reader_grace: Duration::from_millis(250),
            pass_fds: Vec::new(),
            redactor: None,
        }
    }

    /// Gives the child `fd` and returns the number it has there (3, then 4, …). Only this
    /// child gets it: the descriptor stays close-on-exec in anvil and is placed at its number
    /// between fork and exec, so a process spawned concurrently by another task never inherits
    /// it (an inheritable descriptor would leak into every child started meanwhile).
    pub fn pass_fd(&mut self, fd: std::sync::Arc<std::os::fd::OwnedFd>) -> i32 {
        self.pass_fds.push(fd);
        FIRST_PASSED_FD + self.pass_fds.len() as i32 - 1
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    pub fn env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn capture(mut self, head: usize, tail: usize) -> Self {
        self.capture_head = head;
        self.capture_tail = tail;
        self
    }

    pub fn redact(mut self, redactor: std::sync::Arc<Redactor>) -> Self {
        self.redactor = Some(redactor);
        self
    }
}

/// The number the first passed descriptor gets in the child.
const FIRST_PASSED_FD: i32 = 3;

/// How the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    Exited(i32),
    /// Killed by a signal it did not get from us.
    Signaled(i32),
    /// Ran past its timeout; its group was killed.
    TimedOut,
    /// The caller cancelled; its group was killed.
    Cancelled,
}

/// One output stream: its head and tail, and how much was read in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
    /// Bytes read in all, kept or not.
    pub total: u64,
}

impl Captured {
    pub fn cut(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// The kept bytes as text, with a note where the middle was cut.
    pub fn text(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if self.cut() > 0 {
            s.push_str(&format!("\n[… {} bytes of output cut …]\n", self.cut()));
        }
        s.push_str(&String::from_utf8_lossy(&self.tail));
        s
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessOutput {
    pub termination: Termination,
    pub stdout: Captured,
    pub stderr: Captured,
    pub duration: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("could not start {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("lost track of the process: {0}")]
    Wait(std::io::Error),
}

/// Kills a process group when dropped, unless disarmed after the group is known to be gone.
pub struct GroupGuard {
    pgid: Option<Pid>,
}

impl GroupGuard {
    pub fn new(pgid: i32) -> Self {
        Self {
            pgid: Some(Pid::from_raw(pgid)),
        }
    }

    /// Sends SIGKILL to every member still in the group.
    pub fn kill(&self) {
        if let Some(pgid) = self.pgid {
            // ESRCH: nobody left in the group, which is the goal.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }

    pub fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads `reader` to its end (or until `stop`), keeping the first `head` and last `tail`
/// bytes. Memory stays within `head + 2 * tail + 64 KiB` whatever the output size.
pub async fn drain_bounded<R: AsyncRead + Unpin>(
    mut reader: R,
    head: usize,
    tail: usize,
    stop: CancellationToken,
) -> Captured {
    let mut out = Captured::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            biased;
            read = reader.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = stop.cancelled() => break,
        };
        out.total += n as u64;
        let mut chunk = &buf[..n];
        if out.head.len() < head {
            let take = (head - out.head.len()).min(chunk.len());
            out.head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        if tail > 0 && !chunk.is_empty() {
            out.tail.extend_from_slice(chunk);
            if out.tail.len() > 2 * tail {
                let excess = out.tail.len() - tail;
                out.tail.drain(..excess);
            }
        }
    }
    if out.tail.len() > tail {
        let excess = out.tail.len() - tail;
        out.tail.drain(..excess);
    }
    out
}

async fn joined(handle: Option<tokio::task::JoinHandle<Captured>>) -> Captured {
    match handle {
        // A reader task cannot panic short of a bug; an empty capture is the honest fallback.
        Some(h) => h.await.unwrap_or_default(),
        None => Captured::default(),
    }
}

/// The command for `spec`: its own process group, exactly the given environment, stdout and
/// stderr piped, the passed descriptors placed. The one way anvil builds a supervised child.
fn command(spec: &ProcessSpec, stdin: Stdio) -> Result<tokio::process::Command, ProcessError> {
    command_in(spec, stdin, false)
}

/// [`command`], optionally in a session of its own (`new_session`): no controlling terminal,
/// so nothing it starts can open `/dev/tty`, type into anvil's terminal (`TIOCSTI`) or draw a
/// fake prompt on it. Without `unsafe` there is no `setsid()` between fork and exec, so the
/// util-linux `setsid` program does it (the child is not a group leader, so it does not fork:
/// the pid stays the group and session id); where it is missing, a process group only.
fn command_in(
    spec: &ProcessSpec,
    stdin: Stdio,
    new_session: bool,
) -> Result<tokio::process::Command, ProcessError> {
    let spawn_err = |source| ProcessError::Spawn {
        program: spec.program.clone(),
        source,
    };
    let setsid = new_session
        .then(|| {
            ["/usr/bin/setsid", "/bin/setsid"]
                .into_iter()
                .find(|p| Path::new(p).is_file())
        })
        .flatten();
    let mut command = match setsid {
        Some(setsid) => {
            // `setsid` would report a missing program as its own exit 1: say it here.
            if !findable(&spec.program, &spec.env, &spec.cwd) {
                return Err(spawn_err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no such program (searched the PATH it is given)",
                )));
            }
            let mut c = tokio::process::Command::new(setsid);
            c.arg(&spec.program);
            c
        }
        None => {
            let mut c = tokio::process::Command::new(&spec.program);
            c.process_group(0);
            c
        }
    };
    command
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // command-fds places each descriptor at its number between fork and exec; anvil's own
    // copies stay close-on-exec.
    let mappings = spec
        .pass_fds
        .iter()
        .enumerate()
        .map(|(i, fd)| {
            Ok(command_fds::FdMapping {
                parent_fd: fd.try_clone()?,
                child_fd: FIRST_PASSED_FD + i as i32,
            })
        })
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(spawn_err)?;
    if !mappings.is_empty() {
        use command_fds::CommandFdExt;
        command.fd_mappings(mappings).map_err(|e| {
            spawn_err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                e.to_string(),
            ))
        })?;
    }
    Ok(command)
}

/// Whether `program` names an executable file: a path (relative to `cwd`), or a name found on
/// the `PATH` of `env`.
fn findable(program: &str, env: &[(String, String)], cwd: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return executable(&cwd.join(program));
    }
    let path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/bin:/bin");
    path.split(':')
        .filter(|d| !d.is_empty())
        .any(|d| executable(&cwd.join(d).join(program)))
}

/// Runs `spec` to completion, timeout or cancellation (see the module docs).
pub async fn run(
    spec: &ProcessSpec,
    cancel: &CancellationToken,
) -> Result<ProcessOutput, ProcessError> {
    let started = Instant::now();
    let spawn_err = |source| ProcessError::Spawn {
        program: spec.program.clone(),
        source,
    };
    let mut command = command(spec, Stdio::null())?;
    let mut child = command.spawn().map_err(spawn_err)?;
    let mut guard = match child.id() {
        Some(pid) => GroupGuard::new(pid as i32),
        None => GroupGuard { pgid: None },
    };
    let stop_readers = CancellationToken::new();
    let redactor = || {
        let stream = spec.redactor.as_deref().map(Redactor::stream);
        stream.unwrap_or_default()
    };
    let stdout = child.stdout.take().map(|r| {
        tokio::spawn(drain_bounded(
            RedactingReader::new(r, redactor()),
            spec.capture_head,
            spec.capture_tail,
            stop_readers.clone(),
        ))
    });
    let stderr = child.stderr.take().map(|r| {
        tokio::spawn(drain_bounded(
            RedactingReader::new(r, redactor()),
            spec.capture_head,
            spec.capture_tail,
            stop_readers.clone(),
        ))
    });

    let termination = tokio::select! {
        status = child.wait() => {
            let status = status.map_err(ProcessError::Wait)?;
            match (status.code(), status.signal()) {
                (Some(code), _) => Termination::Exited(code),
                (None, Some(sig)) => Termination::Signaled(sig),
                (None, None) => Termination::Exited(-1),
            }
        }
        _ = tokio::time::sleep(spec.timeout) => Termination::TimedOut,
        _ = cancel.cancelled() => Termination::Cancelled,
    };
    // Whatever ended it, nothing of the group outlives the command: background jobs included.
    guard.kill();
    if matches!(termination, Termination::TimedOut | Termination::Cancelled) {
        child.wait().await.map_err(ProcessError::Wait)?;
    }
    guard.disarm();

    // Pipes may still be held by a process that left the group; give readers a moment.
    let grace = tokio::time::sleep(spec.reader_grace);
    tokio::pin!(grace);
    let both = async { (joined(stdout).await, joined(stderr).await) };
    tokio::pin!(both);
    let (stdout, stderr) = tokio::select! {
        out = &mut both => out,
        _ = &mut grace => {
            stop_readers.cancel();
            both.await
        }
    };
    Ok(ProcessOutput {
        termination,
        stdout,
        stderr,
        duration: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bash(cmd: &str) -> ProcessSpec {
        ProcessSpec::new("bash", std::env::temp_dir())
            .args(["-c", cmd])
            .env(vec![(
                "PATH".into(),
                std::env::var("PATH").unwrap_or_default(),
            )])
    }

    #[tokio::test]
    async fn exit_codes_and_both_streams() {
        let out = run(
            &bash("echo out; echo err >&2; exit 3"),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        assert_eq!(out.termination, Termination::Exited(3));
        assert_eq!(out.stdout.text(), "out\n");
        assert_eq!(out.stderr.text(), "err\n");
    }

    #[tokio::test]
    async fn unlimited_output_stays_within_the_capture_bound() {
        let spec = bash("yes | head -c 10000000").capture(1000, 1000);
        let out = run(&spec, &CancellationToken::new()).await.unwrap();
        assert_eq!(out.termination, Termination::Exited(0));
        assert_eq!(out.stdout.total, 10_000_000);
        assert_eq!(out.stdout.head.len(), 1000);
        assert_eq!(out.stdout.tail.len(), 1000);
        assert!(out.stdout.text().contains("9998000 bytes of output cut"));
    }

    #[tokio::test]
    async fn the_environment_is_exactly_what_was_given() {
        let spec = ProcessSpec::new("/usr/bin/env", std::env::temp_dir())
            .env(vec![("ONLY".into(), "this".into())]);
        let out = run(&spec, &CancellationToken::new()).await.unwrap();
        assert_eq!(out.stdout.text(), "ONLY=this\n");
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_error() {
        let spec = ProcessSpec::new("/nonexistent/anvil-test", std::env::temp_dir());
        assert!(matches!(
            run(&spec, &CancellationToken::new()).await,
            Err(ProcessError::Spawn { .. })
        ));
    }
}
