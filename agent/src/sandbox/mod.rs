//! The OS sandbox: one place that decides how a subprocess is confined. Every subprocess that
//! is confined gets its [`ProcessSpec`](crate::process::ProcessSpec) wrapped here: the bash
//! tool's commands (in an interactive session with the host's view; in an eval trial with a
//! [`View::Confined`] view that hides the task, other workspaces and the queue) and the grader's
//! check. Hooks and MCP servers are to be confined here too when they arrive.
//!
//! Backends, chosen at run time by the platform: on Linux bubblewrap (see [`bwrap`]) plus a
//! seccomp filter ([`seccomp`]); on macOS a Seatbelt profile run by `sandbox-exec`
//! ([`seatbelt`]), generated and golden-tested. Either is probed once before first use.

pub mod bwrap;
pub mod credentials;
pub mod limits;
pub mod nested_git;
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

/// What of the host filesystem a sandboxed process sees besides its writable roots.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum View {
    /// The whole host, read-only: an interactive session's commands find the user's tools
    /// wherever they live.
    #[default]
    Host,
    /// Only the system directories and the toolchains of [`Confined::for_host`] (or those
    /// given); everything else of the host does not exist inside. Eval trials and the grader
    /// use it: the task directory, other trials' workspaces and the queue's files are not
    /// there to be read.
    Confined(Confined),
}

/// The read-only paths of a confined view.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confined {
    pub read_only: Vec<PathBuf>,
}

/// System directories a confined view shows (those that exist). Not `/run`, `/var`, `/home`,
/// `/root`, `/srv`, `/mnt`, `/media`: daemons' sockets and people's files live there.
pub const SYSTEM_PATHS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix/store",
];

impl Confined {
    /// The system directories plus the toolchains commands need: every directory on `path`
    /// (one under a hidden directory of `home` exposes that directory, e.g. `~/.cargo`,
    /// `~/.pyenv`, so a toolchain's own files come with its `bin/`; any other shows only
    /// itself — `~/src/anvil/target/debug` must not bring the checkout), and rustup's home.
    pub fn for_host(home: Option<&Path>, path: Option<&std::ffi::OsStr>) -> Confined {
        let mut read_only: Vec<PathBuf> = SYSTEM_PATHS.iter().map(PathBuf::from).collect();
        let mut add = |p: PathBuf| {
            let covered = read_only.iter().any(|r| p.starts_with(r));
            if p.is_absolute() && !covered && p != Path::new("/") {
                read_only.retain(|r| !r.starts_with(&p));
                read_only.push(p);
            }
        };
        for dir in path
            .map(|p| std::env::split_paths(p).collect::<Vec<_>>())
            .unwrap_or_default()
        {
            match home.and_then(|h| dir.strip_prefix(h).ok().map(|rel| (h, rel))) {
                Some((h, rel)) => match rel.components().next() {
                    Some(first) if first.as_os_str().to_string_lossy().starts_with('.') => {
                        add(h.join(first))
                    }
                    Some(_) => add(dir.clone()),
                    None => {}
                },
                None => add(dir),
            }
        }
        match std::env::var_os("RUSTUP_HOME") {
            Some(r) => add(PathBuf::from(r)),
            None => {
                if let Some(h) = home {
                    add(h.join(".rustup"));
                }
            }
        }
        Confined { read_only }
    }
}

/// Paths the sandbox exposes beyond the read-only root, applied in this order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    /// Confined view: the only host paths shown (read-only); empty: the whole host.
    pub view: Vec<PathBuf>,
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
    /// The size of the private /tmp, bytes (unbounded when `None`).
    pub tmp_bytes: Option<u64>,
}

/// What is cleaned up after a sandboxed process: the empty mount points created for reserved
/// paths (so no artifact is left in the worktree).
#[derive(Debug, Default)]
pub struct SandboxGuard {
    created: Vec<PathBuf>,
    /// The pids cgroup made for the command, removed once it is empty.
    cgroup: Option<PathBuf>,
    /// The memory cgroup made for the command, likewise.
    memory_cgroup: Option<PathBuf>,
    processes: Option<u64>,
    /// The writable workspace and the nested repositories it held when the command started
    /// (mounted read-only for it), and when it started; `None` when nothing was writable.
    nested: Option<NestedRepos>,
    /// Whether [`SandboxGuard::after_command`] already ran (else dropping the guard runs it).
    after_done: std::cell::Cell<bool>,
}

/// What the guard needs to clean up repositories a command created.
#[derive(Debug)]
struct NestedRepos {
    workspace: PathBuf,
    /// The protected paths (read-only for the command), with the inode each named then.
    before: Vec<nested_git::Identity>,
    /// Build caches tagged before this are not walked.
    caches_before: std::time::SystemTime,
}

impl SandboxGuard {
    /// Once the command has ended: neutralizes git repositories it created inside the
    /// workspace (their config cut to keys that run nothing, their hooks removed, see
    /// [`nested_git`]) and says what was removed.
    pub fn after_command(&self) -> Option<String> {
        self.after_done.set(true);
        let n = self.nested.as_ref()?;
        let (now, capped) = nested_git::find_capped(&n.workspace, Some(n.caches_before));
        let notes = nested_git::neutralize(&now, &n.before, &n.workspace);
        let mut text = Vec::new();
        if !notes.is_empty() {
            text.push(format!(
                "anvil removed settings and hooks that would run programs from git repositories \
                 this command created (git would run them on the host): {}",
                notes.join("; ")
            ));
        }
        if capped {
            text.push(format!(
                "The workspace has more than {} entries: git repositories beyond them were not \
                 checked for settings that run programs.",
                nested_git::MAX_ENTRIES
            ));
        }
        (!text.is_empty()).then(|| text.join("\n"))
    }

    /// What to tell the caller about the command's limits, once it has ended: whether it ran
    /// into the process limit.
    pub fn limit_note(&self) -> Option<String> {
        let mut notes = Vec::new();
        if self
            .cgroup
            .as_ref()
            .is_some_and(|c| limits::hit_process_limit(c))
        {
            notes.push(format!(
                "The command reached the sandbox's limit of {} processes; new processes were \
                 refused (a fork bomb, or a build with too much parallelism).",
                self.processes.unwrap_or_default()
            ));
        }
        if self
            .memory_cgroup
            .as_ref()
            .is_some_and(|c| limits::hit_memory_limit(c))
        {
            notes.push(
                "The command reached the sandbox's memory limit (its processes, /tmp and shared \
                 memory together); allocations failed or a process was killed."
                    .to_string(),
            );
        }
        (!notes.is_empty()).then(|| notes.join("\n"))
    }
}

impl Drop for SandboxGuard {
    fn drop(&mut self) {
        // A command that ended without its caller asking (cancelled, or its run failed) is
        // cleaned up all the same; only the note is lost.
        if !self.after_done.get() {
            let _ = self.after_command();
        }
        for dir in &self.created {
            // Only an empty directory is removed: anything else was not ours.
            let _ = std::fs::remove_dir(dir);
        }
        for cgroup in self.cgroup.iter().chain(&self.memory_cgroup) {
            // The command's process group is gone; its last members may take a moment.
            for _ in 0..50 {
                if std::fs::remove_dir(cgroup).is_ok() || !cgroup.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
    }
}

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
    credentials: credentials::CredentialDirs,
    view: View,
    hidden: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    limits: limits::Limits,
    /// When the session's sandbox was made: build caches tagged before it are trusted to be
    /// caches (a command cannot make one to hide a repository in it, even across commands).
    created: std::time::SystemTime,
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
            credentials: credentials::CredentialDirs::from_env(),
            view: View::Host,
            hidden: Vec::new(),
            read_only: Vec::new(),
            limits: limits::Limits::default(),
            created: std::time::SystemTime::now(),
            backend: Backend::detect(),
            probe: std::sync::OnceLock::new(),
        }
    }

    /// Masks credentials under this directory instead of HOME (its `.config`,
    /// `.local/share` and `Library/Application Support` included; XDG directories set
    /// elsewhere stay masked).
    pub fn with_home(mut self, home: impl Into<PathBuf>) -> Self {
        let env = credentials::CredentialDirs::from_env();
        let outside_home = |dirs: &[PathBuf]| -> Vec<PathBuf> {
            dirs.iter()
                .filter(|d| env.home.as_ref().is_none_or(|h| !d.starts_with(h)))
                .cloned()
                .collect()
        };
        let mut dirs = credentials::CredentialDirs::for_home(Some(home.into()), None, None);
        dirs.config.extend(outside_home(&env.config));
        dirs.data.extend(outside_home(&env.data));
        self.credentials = dirs;
        self
    }

    /// Masks the credentials found in these directories.
    pub fn with_credential_dirs(mut self, dirs: credentials::CredentialDirs) -> Self {
        self.credentials = dirs;
        self
    }

    /// Shows the host as `view` (default: the whole host, read-only).
    pub fn with_view(mut self, view: View) -> Self {
        self.view = view;
        self
    }

    /// Hides these paths (masked wherever they are visible), on top of the credential stores.
    pub fn with_hidden(mut self, hidden: Vec<PathBuf>) -> Self {
        self.hidden = hidden;
        self
    }

    /// Keeps these paths read-only even inside the writable roots (the grader's protected
    /// tests, its runner, a build's output while tests run).
    pub fn with_read_only(mut self, paths: Vec<PathBuf>) -> Self {
        self.read_only = paths;
        self
    }

    /// Bounds each command by `limits` (default: [`limits::Limits::default`]).
    pub fn with_limits(mut self, limits: limits::Limits) -> Self {
        self.limits = limits;
        self
    }

    pub fn limits(&self) -> limits::Limits {
        self.limits
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
        let mut m = Mounts {
            tmp_bytes: self.limits.tmp_bytes,
            ..Mounts::default()
        };
        if let View::Confined(c) = &self.view {
            // Paths under /tmp are bound after the private /tmp, with the read-only ones.
            let (under_tmp, view): (Vec<PathBuf>, Vec<PathBuf>) = c
                .read_only
                .iter()
                .filter(|p| p.symlink_metadata().is_ok())
                .cloned()
                .partition(|p| p.starts_with("/tmp"));
            m.view = view;
            m.read_only = under_tmp;
            if !matches!(self.policy, SandboxPolicy::WorkspaceWrite { .. })
                && !self.workspace.starts_with("/tmp")
            {
                m.read_only.push(self.workspace.clone());
            }
        }
        if matches!(self.policy, SandboxPolicy::WorkspaceWrite { .. }) {
            m.writable.push(self.workspace.clone());
            // Repositories nested in the workspace are read-only like its own.
            m.protected.extend(nested_git::find(&self.workspace));
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
        m.protected.extend(
            self.read_only
                .iter()
                .filter(|p| p.symlink_metadata().is_ok())
                .cloned(),
        );
        m.masked.extend(self.credentials.existing());
        m.masked.extend(
            self.hidden
                .iter()
                .filter(|p| p.symlink_metadata().is_ok())
                .cloned(),
        );
        // A mask over a path the view does not show would only create it.
        if !m.view.is_empty() {
            let shown = |p: &PathBuf| {
                m.view
                    .iter()
                    .chain(&m.writable)
                    .chain(&m.read_only)
                    .any(|r| p.starts_with(r))
            };
            let masked: Vec<PathBuf> = m.masked.iter().filter(|p| shown(p)).cloned().collect();
            m.masked = masked;
        }
        m
    }

    /// Whether the backend works with this sandbox's arguments: probed once (the first call, or
    /// the first [`Sandbox::wrap`]), then remembered.
    pub fn probe(&self) -> Result<(), SandboxError> {
        if self.policy == SandboxPolicy::FullAccess {
            return Ok(());
        }
        self.probe
            .get_or_init(|| match &self.backend {
                Backend::Bubblewrap(None) => Err(SandboxError::Missing),
                Backend::Bubblewrap(Some(bwrap)) => {
                    let mounts = self.mounts();
                    let args = bwrap::args(self.policy, &mounts, &self.workspace);
                    // The probe must not leave reserved mount points behind either.
                    let _cleanup = SandboxGuard {
                        created: mounts.reserved,
                        cgroup: None,
                        memory_cgroup: None,
                        processes: None,
                        nested: None,
                        after_done: std::cell::Cell::new(true),
                    };
                    bwrap::works_with(bwrap, &args).map_err(SandboxError::Broken)
                }
                Backend::Seatbelt => seatbelt::works_with(
                    Path::new(seatbelt::SANDBOX_EXEC),
                    self.policy,
                    &self.mounts(),
                )
                .map_err(SandboxError::Seatbelt),
            })
            .clone()
    }

    /// Takes the result of an earlier probe of a sandbox with the same backend, policy and view
    /// (the grader probes once per process, not once per grading directory).
    pub fn with_probe(self, probed: Result<(), SandboxError>) -> Self {
        let _ = self.probe.set(probed);
        self
    }

    /// What confines commands, for records: `bubblewrap+seccomp`, `bubblewrap` (network
    /// allowed), `seatbelt`, or `none`.
    pub fn describe(&self) -> &'static str {
        match (&self.backend, self.policy) {
            (_, SandboxPolicy::FullAccess) => "none",
            (Backend::Seatbelt, _) => "seatbelt",
            (Backend::Bubblewrap(_), SandboxPolicy::WorkspaceWrite { network: true }) => {
                "bubblewrap"
            }
            (Backend::Bubblewrap(_), _) => "bubblewrap+seccomp",
        }
    }

    /// `spec` confined by the policy, or why it cannot be. The guard must live until the
    /// process has ended.
    pub fn wrap(
        &self,
        mut spec: crate::process::ProcessSpec,
    ) -> Result<(crate::process::ProcessSpec, SandboxGuard), SandboxError> {
        if self.policy == SandboxPolicy::FullAccess {
            return Ok((spec, SandboxGuard::default()));
        }
        let bwrap = match &self.backend {
            Backend::Seatbelt => return self.wrap_seatbelt(spec),
            Backend::Bubblewrap(None) => return Err(SandboxError::Missing),
            Backend::Bubblewrap(Some(bwrap)) => bwrap,
        };
        self.probe()?;
        let network = matches!(self.policy, SandboxPolicy::WorkspaceWrite { network: true });
        let mut mounts = self.mounts();
        if !network {
            let filter = seccomp::filter_file().map_err(SandboxError::Broken)?;
            mounts.seccomp_fd = Some(spec.pass_fd(std::sync::Arc::new(filter.into())));
        }
        // Processes: a pids cgroup where one can be made, else RLIMIT_NPROC unless root.
        let root = nix::unistd::geteuid().is_root();
        let bound = match self.limits.processes {
            None => limits::ProcessBound::NotAsked,
            Some(max) => match limits::pids_cgroup_parent()
                .filter(|_| self.limits.cgroups)
                .and_then(|parent| limits::make_pids_cgroup(&parent, max).ok())
            {
                Some(dir) => limits::ProcessBound::Cgroup(dir),
                None if root => limits::ProcessBound::Unbounded,
                None => limits::ProcessBound::Rlimit,
            },
        };
        // bubblewrap's options go through a descriptor (`--args FD`), not the command line:
        // inside the sandbox /proc shows bubblewrap's argv, which would name every hidden path.
        let options = bwrap::args(self.policy, &mounts, &spec.cwd);
        let file = bwrap::args_file(&options[..options.len() - 1]).map_err(SandboxError::Broken)?;
        let args_fd = spec.pass_fd(std::sync::Arc::new(file.into()));
        let mut argv = vec![
            "--args".to_string(),
            args_fd.to_string(),
            "--".to_string(),
            spec.program.clone(),
        ];
        argv.append(&mut spec.args);
        let mut wrapped = crate::process::ProcessSpec {
            program: bwrap.display().to_string(),
            args: argv,
            ..spec
        };
        // On the host, one launcher sets the rlimits (inherited by bubblewrap and everything
        // inside), joins the pids cgroup, then becomes bubblewrap: every process of the
        // command is born limited and inside the cgroup.
        let cgroup = match &bound {
            limits::ProcessBound::Cgroup(dir) => Some(dir.clone()),
            _ => None,
        };
        // All of the command's memory (tmpfs and shared memory included) where a memory
        // cgroup can be made.
        let memory_cgroup = self
            .limits
            .memory_bytes
            .filter(|_| self.limits.cgroups)
            .and_then(|bytes| {
                limits::memory_cgroup_parent()
                    .and_then(|parent| limits::make_memory_cgroup(&parent, bytes).ok())
            });
        let nproc = bound == limits::ProcessBound::Rlimit;
        let keep: Vec<i32> = (0..wrapped.pass_fds.len() as i32).map(|i| 3 + i).collect();
        let joined: Vec<PathBuf> = cgroup.iter().chain(&memory_cgroup).cloned().collect();
        let script = self.limits.launcher(nproc, &joined, &keep);
        let mut outer = vec![
            "-c".to_string(),
            script,
            "anvil-sandbox".to_string(),
            wrapped.program.clone(),
        ];
        outer.append(&mut wrapped.args);
        wrapped.program = "bash".into();
        wrapped.args = outer;
        let nested =
            matches!(self.policy, SandboxPolicy::WorkspaceWrite { .. }).then(|| NestedRepos {
                workspace: self.workspace.clone(),
                before: nested_git::identities(&mounts.protected),
                caches_before: self.created,
            });
        let guard = SandboxGuard {
            // bubblewrap creates these mount points in the (writable) workspace.
            created: mounts.reserved.clone(),
            cgroup,
            memory_cgroup,
            processes: self.limits.processes,
            nested,
            after_done: std::cell::Cell::new(false),
        };
        Ok((wrapped, guard))
    }

    /// Seatbelt: `.git`/`.anvil` are denied by the profile whether or not they exist, so no
    /// mount point is made and nothing needs cleaning up.
    fn wrap_seatbelt(
        &self,
        spec: crate::process::ProcessSpec,
    ) -> Result<(crate::process::ProcessSpec, SandboxGuard), SandboxError> {
        self.probe()?;
        let mounts = self.mounts();
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
