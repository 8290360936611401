//! [`Service`]: a long-lived supervised process anvil talks to over its stdin and stdout (an
//! MCP server), beside [`super::run`]'s run-to-completion commands. Same rules: its own process
//! group, exactly the environment given, output redacted as it is read. In addition:
//!
//! - a session of its own: no controlling terminal to write to or type into;
//! - stderr never reaches the terminal: the last [`STDERR_TAIL`] bytes are kept in memory (for
//!   the reason a server failed) and written to the log when the service ends;
//! - its exit is watched by a task of its own, so a server killed from outside is known dead as
//!   soon as the kernel says so ([`Service::exit`]);
//! - every live service group is registered in one process-wide set, so the places anvil can
//!   end from (normal exit, a signal, a panic) kill them all with [`kill_all_services`]; dropping
//!   a [`Service`] kills its group too.

use std::collections::{BTreeSet, VecDeque};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::watch;

use super::{ProcessError, ProcessSpec, Termination};
use crate::secrets::{RedactingReader, Redactor};

/// Bytes of a service's stderr kept (the end of it).
pub const STDERR_TAIL: usize = 64 * 1024;

/// Process groups of the services still running.
static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// SIGKILLs the group of every service still running. For the ways anvil ends without running
/// its shutdown: a signal handler and the panic hook call this. Never blocks on a lock held by
/// a panicking thread (the set's critical sections cannot panic).
pub fn kill_all_services() {
    let groups = match LIVE_GROUPS.try_lock() {
        Ok(g) => g.clone(),
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().clone(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    for pgid in groups {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// How many service groups are live (tests).
pub fn live_services() -> usize {
    LIVE_GROUPS.lock().map(|g| g.len()).unwrap_or(0)
}

/// A registered process group: SIGKILLed and unregistered when dropped.
struct LiveGroup(i32);

impl LiveGroup {
    fn new(pgid: i32) -> Self {
        if let Ok(mut g) = LIVE_GROUPS.lock() {
            g.insert(pgid);
        }
        Self(pgid)
    }

    fn signal(&self, signal: Signal) {
        // ESRCH: nobody left in the group.
        let _ = killpg(Pid::from_raw(self.0), signal);
    }
}

impl Drop for LiveGroup {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
        if let Ok(mut g) = LIVE_GROUPS.lock() {
            g.remove(&self.0);
        }
    }
}

/// The end of a service's stderr, shared with the task reading it.
#[derive(Debug, Clone)]
pub struct StderrTail(Arc<Mutex<TailBuf>>, watch::Receiver<bool>);

#[derive(Debug, Default)]
struct TailBuf {
    bytes: VecDeque<u8>,
    total: u64,
}

impl StderrTail {
    fn push(&self, chunk: &[u8]) {
        if let Ok(mut t) = self.0.lock() {
            t.total += chunk.len() as u64;
            let chunk = &chunk[chunk.len().saturating_sub(STDERR_TAIL)..];
            let over = (t.bytes.len() + chunk.len()).saturating_sub(STDERR_TAIL);
            t.bytes.drain(..over);
            t.bytes.extend(chunk);
        }
    }

    /// The kept bytes as text (lossy), at most `max` bytes from the end.
    pub fn text(&self, max: usize) -> String {
        let Ok(t) = self.0.lock() else {
            return String::new();
        };
        let skip = t.bytes.len().saturating_sub(max);
        let bytes: Vec<u8> = t.bytes.iter().skip(skip).copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The last non-empty line, for one-line status reports.
    pub fn last_line(&self) -> Option<String> {
        let text = self.text(4096);
        text.lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(str::to_string)
    }

    /// Waits until stderr is closed (everything written to it is in the tail).
    pub async fn closed(&self) {
        let mut rx = self.1.clone();
        let _ = rx.wait_for(|closed| *closed).await;
    }

    /// Bytes written to stderr in all.
    pub fn total(&self) -> u64 {
        self.0.lock().map(|t| t.total).unwrap_or(0)
    }
}

/// A running service: its pipes (until taken), its group, its stderr tail, its exit.
pub struct Service {
    program: String,
    stdin: Option<ChildStdin>,
    stdout: Option<ChildStdout>,
    group: LiveGroup,
    stderr: StderrTail,
    exit: watch::Receiver<Option<Termination>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("program", &self.program)
            .field("pgid", &self.group.0)
            .finish()
    }
}

impl Service {
    /// Starts `spec` (its timeout is not used: a service runs until stopped). Call from within
    /// a tokio runtime.
    pub fn spawn(spec: &ProcessSpec) -> Result<Service, ProcessError> {
        let mut command = super::command_in(spec, Stdio::piped(), true)?;
        let mut child = command.spawn().map_err(|source| ProcessError::Spawn {
            program: spec.program.clone(),
            source,
        })?;
        let Some(pid) = child.id() else {
            return Err(ProcessError::Spawn {
                program: spec.program.clone(),
                source: std::io::Error::other("the process ended before it could be tracked"),
            });
        };
        let group = LiveGroup::new(pid as i32);
        let (closed, closed_rx) = watch::channel(false);
        let stderr = StderrTail(Arc::default(), closed_rx);
        if let Some(pipe) = child.stderr.take() {
            let tail = stderr.clone();
            let stream = spec.redactor.as_deref().map(Redactor::stream);
            let mut reader = RedactingReader::new(pipe, stream.unwrap_or_default());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n) = reader.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    tail.push(&buf[..n]);
                }
                let _ = closed.send(true);
            });
        } else {
            let _ = closed.send(true);
        }
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let (tx, exit) = watch::channel(None);
        tokio::spawn(async move {
            let termination = match child.wait().await {
                Ok(status) => match (status.code(), status.signal()) {
                    (Some(code), _) => Termination::Exited(code),
                    (None, Some(sig)) => Termination::Signaled(sig),
                    (None, None) => Termination::Exited(-1),
                },
                Err(_) => Termination::Exited(-1),
            };
            let _ = tx.send(Some(termination));
        });
        Ok(Service {
            program: spec.program.clone(),
            stdin,
            stdout,
            group,
            stderr,
            exit,
        })
    }

    /// The pipes to talk over (once).
    pub fn take_io(&mut self) -> Option<(ChildStdout, ChildStdin)> {
        Some((self.stdout.take()?, self.stdin.take()?))
    }

    pub fn stderr(&self) -> StderrTail {
        self.stderr.clone()
    }

    /// The group leader's pid (= the group id).
    pub fn pid(&self) -> i32 {
        self.group.0
    }

    /// A watch on how the leader ended (`None` while it runs).
    pub fn exit(&self) -> watch::Receiver<Option<Termination>> {
        self.exit.clone()
    }

    /// How the leader ended, if it has.
    pub fn exited(&self) -> Option<Termination> {
        *self.exit.borrow()
    }

    /// Ends the service within `grace`: SIGTERM to the group, then SIGKILL to whatever of the
    /// group is left when the leader has exited or `grace` is up (descendants that ignored the
    /// TERM included). Logs the stderr tail.
    pub async fn stop(self, grace: Duration) -> Option<Termination> {
        drop(self.stdin);
        self.group.signal(Signal::SIGTERM);
        let mut exit = self.exit.clone();
        let ended = tokio::time::timeout(grace, exit.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|t| *t));
        self.group.signal(Signal::SIGKILL);
        drop(self.group);
        ended
    }
}
