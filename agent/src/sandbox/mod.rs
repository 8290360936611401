//! The OS sandbox: one place that decides how a subprocess is confined. Every subprocess that
//! should be confined (the grader's check now; the bash tool, hooks, MCP servers and eval trials
//! as they arrive) gets its [`ProcessSpec`](crate::process::ProcessSpec) wrapped here.
//!
//! Linux backend: bubblewrap (see [`bwrap`]) plus a seccomp filter ([`seccomp`]). macOS:
//! a Seatbelt profile ([`seatbelt`]), generated and golden-tested; not yet selected at run time.

pub mod bwrap;
pub mod seatbelt;
pub mod seccomp;

use std::path::{Path, PathBuf};

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

/// Paths the sandbox exposes beyond the read-only root, applied in this order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    /// Bound read-only after the private /tmp is mounted, so paths under /tmp stay visible.
    pub read_only: Vec<PathBuf>,
    /// Bound read-write.
    pub writable: Vec<PathBuf>,
    /// Bound read-only again inside a writable root (`.git`, `.anvil`).
    pub protected: Vec<PathBuf>,
    /// Hidden: directories get an empty tmpfs, files an empty read-only file.
    pub masked: Vec<PathBuf>,
    /// Missing `.git`/`.anvil` inside a writable root, reserved as empty read-only mounts so
    /// sandboxed code cannot create them (a planted `core.fsmonitor` would run on the host).
    pub reserved: Vec<PathBuf>,
    /// An inherited fd holding a seccomp program for bubblewrap to load.
    pub seccomp_fd: Option<i32>,
}

/// What must live while a sandboxed process runs, and what is cleaned up after it: the seccomp
/// filter's file, and the empty mount points created for reserved paths (so no artifact is
/// left in the worktree).
#[derive(Debug, Default)]
pub struct SandboxGuard {
    _filter: Option<std::fs::File>,
    created: Vec<PathBuf>,
}

impl Drop for SandboxGuard {
    fn drop(&mut self) {
        for dir in &self.created {
            // Only an empty directory is removed: anything else was not ours.
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Credential stores under HOME that sandboxed code must not read.
pub const CREDENTIAL_PATHS: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gh",
    ".config/gcloud",
    ".azure",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".config/anvil",
    ".local/share/anvil",
];

/// Why a sandboxed command could not run. Nothing ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "the sandbox is unavailable: bubblewrap is not installed. Install it (Debian/Ubuntu: \
         apt-get install bubblewrap) — or, if you accept commands running with your full rights, \
         start anvil with --sandbox full-access"
    )]
    Missing,
    #[error(
        "the sandbox is unavailable: {0}. Fix it (for example allow unprivileged user \
         namespaces: sysctl kernel.unprivileged_userns_clone=1) — or, if you accept commands \
         running with your full rights, start anvil with --sandbox full-access"
    )]
    Broken(String),
    #[error(
        "the sandbox is unavailable: {0}. anvil confines commands on macOS with \
         /usr/bin/sandbox-exec (part of the system) — or, if you accept commands running with \
         your full rights, start anvil with --sandbox full-access"
    )]
    Seatbelt(String),
}

/// The OS mechanism that confines commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// bubblewrap + seccomp (Linux): the bwrap found on PATH, or none (every call then fails
    /// closed).
    Bubblewrap(Option<PathBuf>),
    /// Seatbelt (macOS): `/usr/bin/sandbox-exec` with a generated profile.
    Seatbelt,
}

impl Backend {
    /// The backend of the platform anvil runs on.
    pub fn detect() -> Backend {
        if cfg!(target_os = "macos") {
            Backend::Seatbelt
        } else {
            Backend::Bubblewrap(bwrap::find())
        }
    }
}

/// A session's sandbox: the policy, the workspace it opens, and the backend. The first use
/// probes the backend once; a sandbox that does not work fails every call, closed — it never
/// falls back to running unconfined.
#[derive(Debug)]
pub struct Sandbox {
    policy: SandboxPolicy,
    workspace: PathBuf,
    home: Option<PathBuf>,
    backend: Backend,
    probe: std::sync::OnceLock<Result<(), SandboxError>>,
}

impl Sandbox {
    /// `policy` over `workspace`, with the platform's backend (bubblewrap from PATH on Linux,
    /// sandbox-exec on macOS) and the user's HOME.
    pub fn new(policy: SandboxPolicy, workspace: impl Into<PathBuf>) -> Self {
        Self {
            policy,
            workspace: workspace.into(),
            home: std::env::var_os("HOME").map(PathBuf::from),
            backend: Backend::detect(),
            probe: std::sync::OnceLock::new(),
        }
    }

    /// Masks credentials under this directory instead of HOME.
    pub fn with_home(mut self, home: impl Into<PathBuf>) -> Self {
        self.home = Some(home.into());
        self
    }

    /// Uses this bubblewrap (or none: every sandboxed call then fails closed).
    pub fn with_bwrap(mut self, bwrap: Option<PathBuf>) -> Self {
        self.backend = Backend::Bubblewrap(bwrap);
        self
    }

    /// Uses this backend.
    pub fn with_backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    pub fn policy(&self) -> SandboxPolicy {
        self.policy
    }

    /// The mounts for a command in the workspace.
    pub fn mounts(&self) -> Mounts {
        let mut m = Mounts::default();
        if matches!(self.policy, SandboxPolicy::WorkspaceWrite { .. }) {
            m.writable.push(self.workspace.clone());
            for p in [".git", ".anvil"] {
                let path = self.workspace.join(p);
                if path.symlink_metadata().is_ok() {
                    m.protected.push(path);
                } else {
                    m.reserved.push(path);
                }
            }
        } else if self.workspace.starts_with("/tmp") {
            m.read_only.push(self.workspace.clone());
        }
        if let Some(home) = &self.home {
            for p in CREDENTIAL_PATHS {
                let path = home.join(p);
                if path.symlink_metadata().is_ok() {
                    m.masked.push(path);
                }
            }
        }
        m
    }

    /// `spec` confined by the policy, or why it cannot be. The guard must live until the
    /// process has ended.
    pub fn wrap(
        &self,
        spec: crate::process::ProcessSpec,
    ) -> Result<(crate::process::ProcessSpec, SandboxGuard), SandboxError> {
        if self.policy == SandboxPolicy::FullAccess {
            return Ok((spec, SandboxGuard::default()));
        }
        let bwrap = match &self.backend {
            Backend::Seatbelt => return self.wrap_seatbelt(spec),
            Backend::Bubblewrap(None) => return Err(SandboxError::Missing),
            Backend::Bubblewrap(Some(bwrap)) => bwrap,
        };
        // The first call probes the session's own arguments (without the per-call seccomp fd).
        self.probe
            .get_or_init(|| {
                let mounts = self.mounts();
                let args = bwrap::args(self.policy, &mounts, &self.workspace);
                // The probe must not leave reserved mount points behind either.
                let _cleanup = SandboxGuard {
                    _filter: None,
                    created: mounts.reserved,
                };
                bwrap::works_with(bwrap, &args).map_err(SandboxError::Broken)
            })
            .clone()?;
        let network = matches!(self.policy, SandboxPolicy::WorkspaceWrite { network: true });
        let filter = if network {
            None
        } else {
            Some(seccomp::inheritable_file().map_err(SandboxError::Broken)?)
        };
        let mut mounts = self.mounts();
        mounts.seccomp_fd = filter.as_ref().map(std::os::fd::AsRawFd::as_raw_fd);
        let guard = SandboxGuard {
            _filter: filter,
            // bubblewrap creates these mount points in the (writable) workspace.
            created: mounts.reserved.clone(),
        };
        Ok((bwrap::wrap(bwrap, spec, self.policy, &mounts), guard))
    }

    /// Seatbelt: `.git`/`.anvil` are denied by the profile whether or not they exist, so no
    /// mount point is made and nothing needs cleaning up.
    fn wrap_seatbelt(
        &self,
        spec: crate::process::ProcessSpec,
    ) -> Result<(crate::process::ProcessSpec, SandboxGuard), SandboxError> {
        let mounts = self.mounts();
        self.probe
            .get_or_init(|| {
                seatbelt::works_with(Path::new(seatbelt::SANDBOX_EXEC), self.policy, &mounts)
                    .map_err(SandboxError::Seatbelt)
            })
            .clone()?;
        Ok((
            seatbelt::wrap(spec, self.policy, &mounts),
            SandboxGuard::default(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_platform_picks_its_backend() {
        let backend = Backend::detect();
        if cfg!(target_os = "macos") {
            assert_eq!(backend, Backend::Seatbelt);
        } else {
            assert!(matches!(backend, Backend::Bubblewrap(_)), "{backend:?}");
        }
    }

    #[cfg(not(target_os = "macos"))]
    #[test]
    fn seatbelt_without_sandbox_exec_fails_closed() {
        let ws = tempfile::tempdir().unwrap();
        let sandbox = Sandbox::new(SandboxPolicy::WorkspaceWrite { network: false }, ws.path())
            .with_backend(Backend::Seatbelt);
        let spec = crate::process::ProcessSpec::new("/bin/sh", ws.path()).args(["-c", "touch ran"]);
        let err = sandbox.wrap(spec).unwrap_err();
        assert!(matches!(err, SandboxError::Seatbelt(_)), "{err}");
        assert!(err.to_string().contains("--sandbox full-access"), "{err}");
        assert!(!ws.path().join("ran").exists());
        assert!(
            !ws.path().join(".git").exists(),
            "no mount point made for Seatbelt"
        );
    }
}
