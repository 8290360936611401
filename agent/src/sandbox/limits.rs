//! Resource limits of a sandboxed command: processes, memory, file size and open files, so a
//! fork bomb, a runaway allocation or a file that fills the disk ends that command and leaves
//! the host and the agent responsive.
//!
//! - Memory (address space), file size and open files are rlimits, set by a tiny host-side
//!   launcher (bash) that then becomes bubblewrap, soft and hard alike (raising a hard limit
//!   needs a capability the sandbox does not have). They bind root too. The launcher also
//!   closes every descriptor anvil did not pass on purpose.
//! - The private /tmp is a tmpfs (memory): its size is bounded too. And where a memory cgroup
//!   can be made, the command's whole memory — every process, tmpfs files, shared memory — is
//!   bounded by it (an address-space rlimit is per process and counts no tmpfs).
//! - Processes: `RLIMIT_NPROC` counts every process of the host uid and does not bind uid 0
//!   at all (a process of host root is exempt), so processes are bounded by a **pids cgroup**
//!   when one can be made (cgroup v1's `pids` hierarchy, or a cgroup v2 directory whose
//!   `pids` controller is delegated to anvil's cgroup); failing that, an unprivileged anvil
//!   falls back to `RLIMIT_NPROC` (which then counts the user's other processes too), and a
//!   root anvil without a pids cgroup has no process bound — [`ProcessBound`] says which.

use std::path::{Path, PathBuf};

/// The limits of one command. `None`: no limit of that kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Processes (and threads) the command may have at once.
    pub processes: Option<u64>,
    /// Address space of each process, bytes.
    pub memory_bytes: Option<u64>,
    /// Largest file a process may write, bytes.
    pub file_size_bytes: Option<u64>,
    /// Open files per process.
    pub open_files: Option<u64>,
    /// Size of the sandbox's private /tmp (a tmpfs: memory), bytes.
    pub tmp_bytes: Option<u64>,
    /// Bound processes and memory with cgroups where they can be made.
    pub cgroups: bool,
}

impl Default for Limits {
    /// Large enough for `cargo build`, small enough to keep the machine: 4,096 processes,
    /// three quarters of physical memory (at least 4 GiB) of address space, 16 GiB files,
    /// 8,192 open files, a /tmp of a quarter of physical memory (at most 4 GiB).
    fn default() -> Self {
        let memory = physical_memory()
            .map(|m| (m / 4 * 3).max(4 << 30))
            .unwrap_or(16 << 30);
        Self {
            processes: Some(4096),
            memory_bytes: Some(memory),
            file_size_bytes: Some(16 << 30),
            open_files: Some(8192),
            tmp_bytes: Some(
                physical_memory()
                    .map(|m| (m / 4).min(4 << 30))
                    .unwrap_or(1 << 30),
            ),
            cgroups: true,
        }
    }
}

impl Limits {
    /// No limits at all.
    pub const NONE: Limits = Limits {
        processes: None,
        memory_bytes: None,
        file_size_bytes: None,
        open_files: None,
        tmp_bytes: None,
        cgroups: false,
    };

    /// The host-side launcher (a bash script): closes every descriptor but stdio and the
    /// `keep` ones it was given on purpose (anything anvil itself inherited would otherwise
    /// reach the sandbox), sets the rlimits (soft and hard), joins `cgroups`, then runs the
    /// sandbox (`"$@"`). `nproc`: bound processes by `RLIMIT_NPROC` too (when no cgroup does).
    pub fn launcher(&self, nproc: bool, cgroups: &[PathBuf], keep: &[i32]) -> String {
        let kept: Vec<String> = [0, 1, 2].iter().chain(keep).map(i32::to_string).collect();
        let mut parts = vec![format!(
            // No redirection around the loop: bash would park the real stderr on a spare
            // descriptor the loop then closes.
            "for f in /proc/self/fd/*; do n=${{f##*/}}; case \" {} \" in *\" $n \"*) ;; *) if [ -e \"/proc/self/fd/$n\" ]; then exec {{n}}>&-; fi ;; esac; done; true",
            kept.join(" ")
        )];
        if let Some(m) = self.memory_bytes {
            parts.push(format!("ulimit -v {}", m / 1024));
        }
        if let Some(f) = self.file_size_bytes {
            // bash counts `-f` in 1024-byte blocks.
            parts.push(format!("ulimit -f {}", f / 1024));
        }
        if let Some(n) = self.open_files {
            parts.push(format!("ulimit -n {n}"));
        }
        if nproc && let Some(p) = self.processes {
            parts.push(format!("ulimit -u {p}"));
        }
        for dir in cgroups {
            // anvil's own paths (…/anvil-PID-N): nothing to quote inside single quotes.
            parts.push(format!("echo $$ > '{}/cgroup.procs'", dir.display()));
        }
        parts.push("exec \"$@\"".into());
        parts.join(" && ")
    }
}

/// How processes are bounded for one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessBound {
    /// A pids cgroup made for the command (removed after it).
    Cgroup(PathBuf),
    /// `RLIMIT_NPROC` (anvil is not root).
    Rlimit,
    /// Nothing: anvil runs as root and no pids cgroup can be made here.
    Unbounded,
    /// No process limit was asked for.
    NotAsked,
}

fn physical_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = info
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Where pids cgroups for commands can be made on this machine, if anywhere.
pub fn pids_cgroup_parent() -> Option<PathBuf> {
    cgroup_parent("pids")
}

/// Where memory cgroups for commands can be made on this machine, if anywhere.
pub fn memory_cgroup_parent() -> Option<PathBuf> {
    cgroup_parent("memory")
}

/// Where cgroups of `controller` can be made: cgroup v1's hierarchy for it (anvil's own place
/// in it, or its root), or anvil's own cgroup v2 when the controller is delegated there.
fn cgroup_parent(controller: &str) -> Option<PathBuf> {
    let v1 = Path::new("/sys/fs/cgroup").join(controller);
    if v1.join("cgroup.procs").is_file() {
        let own = own_cgroup(controller).map(|p| v1.join(p.trim_start_matches('/')));
        for dir in own.into_iter().chain([v1.clone()]) {
            if writable_dir(&dir) {
                return Some(dir);
            }
        }
    }
    for mount in [
        Path::new("/sys/fs/cgroup"),
        Path::new("/sys/fs/cgroup/unified"),
    ] {
        if !mount.join("cgroup.controllers").is_file() {
            continue;
        }
        let own = own_cgroup("").map(|p| mount.join(p.trim_start_matches('/')))?;
        let delegated = std::fs::read_to_string(own.join("cgroup.subtree_control"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == controller));
        if delegated && writable_dir(&own) {
            return Some(own);
        }
    }
    None
}

/// This process's cgroup path for `controller` (`""`: the v2 unified line).
fn own_cgroup(controller: &str) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = if controller.is_empty() {
            controllers.is_empty()
        } else {
            controllers.split(',').any(|c| c == controller)
        };
        matches.then(|| path.to_string())
    })
}

fn writable_dir(dir: &Path) -> bool {
    dir.is_dir() && nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

static NEXT_CGROUP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A new cgroup directory for one command under `parent`, with `settings` written into it
/// (the first that can be written of each group of alternatives: v1 and v2 name them
/// differently).
fn make_cgroup(parent: &Path, settings: &[(&[&str], String)]) -> std::io::Result<PathBuf> {
    let n = NEXT_CGROUP.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = parent.join(format!("anvil-{}-{n}", std::process::id()));
    std::fs::create_dir(&dir)?;
    for (names, value) in settings {
        let written = names
            .iter()
            .any(|name| std::fs::write(dir.join(name), value).is_ok());
        if !written {
            let _ = std::fs::remove_dir(&dir);
            return Err(std::io::Error::other(format!(
                "cannot set {} in {}",
                names.join(" or "),
                dir.display()
            )));
        }
    }
    Ok(dir)
}

/// A pids cgroup for one command under `parent`, holding at most `max` processes.
pub fn make_pids_cgroup(parent: &Path, max: u64) -> std::io::Result<PathBuf> {
    make_cgroup(parent, &[(&["pids.max"], max.to_string())])
}

/// A memory cgroup for one command under `parent`: all its memory — processes, tmpfs files,
/// shared memory — at most `bytes`.
pub fn make_memory_cgroup(parent: &Path, bytes: u64) -> std::io::Result<PathBuf> {
    make_cgroup(
        parent,
        &[(&["memory.limit_in_bytes", "memory.max"], bytes.to_string())],
    )
}

/// Whether the command in the memory cgroup `cgroup` ran out of memory.
pub fn hit_memory_limit(cgroup: &Path) -> bool {
    let v1 = std::fs::read_to_string(cgroup.join("memory.failcnt"))
        .ok()
        .and_then(|n| n.trim().parse::<u64>().ok())
        .is_some_and(|n| n > 0);
    let v2 = std::fs::read_to_string(cgroup.join("memory.events")).is_ok_and(|e| {
        e.lines()
            .filter_map(|l| l.strip_prefix("max ").or_else(|| l.strip_prefix("oom ")))
            .any(|n| n.trim().parse::<u64>().is_ok_and(|n| n > 0))
    });
    v1 || v2
}

/// Whether the command in `cgroup` was refused a process because of the limit.
pub fn hit_process_limit(cgroup: &Path) -> bool {
    std::fs::read_to_string(cgroup.join("pids.events")).is_ok_and(|e| {
        e.lines()
            .find_map(|l| l.strip_prefix("max "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launcher_closes_stray_descriptors_sets_each_limit_and_joins_the_cgroup() {
        let limits = Limits {
            processes: Some(100),
            memory_bytes: Some(2 << 30),
            file_size_bytes: Some(1 << 20),
            open_files: Some(64),
            tmp_bytes: None,
            cgroups: true,
        };
        let script = limits.launcher(true, &[PathBuf::from("/cg/pids/anvil-1-0")], &[3, 4]);
        assert!(script.starts_with("for f in /proc/self/fd/*"), "{script}");
        assert!(script.contains("\" 0 1 2 3 4 \""), "{script}");
        assert!(
            script.ends_with(
                "ulimit -v 2097152 && ulimit -f 1024 && ulimit -n 64 && ulimit -u 100 && echo $$ > '/cg/pids/anvil-1-0/cgroup.procs' && exec \"$@\""
            ),
            "{script}"
        );
        let bare = Limits::NONE.launcher(false, &[], &[]);
        assert!(bare.ends_with("; true && exec \"$@\""), "{bare}");
        let d = Limits::default();
        assert!(d.memory_bytes.unwrap() >= 4 << 30);
    }
}
