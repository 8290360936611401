//! The OS sandbox: one place that decides how a subprocess is confined. Every subprocess that
//! should be confined (the grader's check now; the bash tool, hooks, MCP servers and eval trials
//! as they arrive) gets its [`ProcessSpec`](crate::process::ProcessSpec) wrapped here.
//!
//! Linux backend: bubblewrap (see [`bwrap`]).

pub mod bwrap;

use std::path::PathBuf;

/// What a sandboxed process may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxPolicy {
    /// Read the filesystem; write nothing; no network.
    ReadOnly,
    /// Read the filesystem; write only the writable roots (and a private /tmp).
    WorkspaceWrite { network: bool },
    /// No confinement. Only ever chosen by an explicit user setting.
    FullAccess,
}

/// Paths the sandbox exposes beyond the read-only root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    /// Bound read-write.
    pub writable: Vec<PathBuf>,
    /// Bound read-only after the private /tmp is mounted, so paths under /tmp stay visible.
    pub read_only: Vec<PathBuf>,
}
