//! The bubblewrap backend: a read-only view of the host, a private /tmp, new user, pid, ipc and
//! uts namespaces (and network, unless allowed), its own session (no terminal injection), and it
//! dies with its parent.

use std::path::{Path, PathBuf};

use crate::process::ProcessSpec;
use crate::sandbox::{Mounts, SandboxPolicy};

/// Where `bwrap` is, if it is installed.
pub fn find() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("bwrap"))
        .find(|p| p.is_file())
}

/// Whether bubblewrap actually works here (user namespaces may be disabled). A one-off probe.
pub fn works(bwrap: &Path) -> Result<(), String> {
    let out = std::process::Command::new(bwrap)
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-all",
            "--new-session",
            "--die-with-parent",
            "true",
        ])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bwrap.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "bubblewrap does not work here: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The bwrap arguments for `policy`, ending with `--` (the command follows).
pub fn args(policy: SandboxPolicy, mounts: &Mounts, cwd: &Path) -> Vec<String> {
    let mut a: Vec<String> = [
        "--new-session",
        "--die-with-parent",
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let network = matches!(policy, SandboxPolicy::WorkspaceWrite { network: true });
    if !network {
        a.push("--unshare-net".into());
    }
    for p in &mounts.read_only {
        a.extend([
            "--ro-bind".into(),
            p.display().to_string(),
            p.display().to_string(),
        ]);
    }
    if matches!(policy, SandboxPolicy::WorkspaceWrite { .. }) {
        for p in &mounts.writable {
            a.extend([
                "--bind".into(),
                p.display().to_string(),
                p.display().to_string(),
            ]);
        }
    }
    // Later mounts shadow earlier ones: protected paths come back read-only inside the
    // writable roots, and credential stores disappear.
    for p in &mounts.protected {
        let p = p.display().to_string();
        a.extend(["--ro-bind".into(), p.clone(), p]);
    }
    for p in &mounts.reserved {
        let p = p.display().to_string();
        a.extend(["--tmpfs".into(), p.clone(), "--remount-ro".into(), p]);
    }
    for p in &mounts.masked {
        let shown = p.display().to_string();
        if p.is_dir() {
            a.extend(["--tmpfs".into(), shown]);
        } else {
            a.extend(["--ro-bind".into(), "/dev/null".into(), shown]);
        }
    }
    if let Some(fd) = mounts.seccomp_fd {
        a.extend(["--seccomp".into(), fd.to_string()]);
    }
    a.extend(["--chdir".into(), cwd.display().to_string(), "--".into()]);
    a
}

/// `spec` run inside bubblewrap under `policy`. `FullAccess` returns it unchanged.
pub fn wrap(
    bwrap: &Path,
    spec: ProcessSpec,
    policy: SandboxPolicy,
    mounts: &Mounts,
) -> ProcessSpec {
    if policy == SandboxPolicy::FullAccess {
        return spec;
    }
    let mut args = args(policy, mounts, &spec.cwd);
    args.push(spec.program.clone());
    args.extend(spec.args.iter().cloned());
    ProcessSpec {
        program: bwrap.display().to_string(),
        args,
        ..spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_is_unshared_unless_allowed_and_tmp_binds_come_after_the_private_tmp() {
        let mounts = Mounts {
            writable: vec!["/tmp/grade/work".into()],
            read_only: vec!["/tmp/ws-parent".into()],
            ..Mounts::default()
        };
        let a = args(
            SandboxPolicy::WorkspaceWrite { network: false },
            &mounts,
            Path::new("/tmp/grade/work"),
        );
        let joined = a.join(" ");
        assert!(joined.contains("--unshare-net"));
        let tmpfs = joined.find("--tmpfs /tmp").unwrap();
        assert!(joined.find("--bind /tmp/grade/work").unwrap() > tmpfs);
        assert!(joined.find("--ro-bind /tmp/ws-parent").unwrap() > tmpfs);
        assert!(joined.ends_with("--chdir /tmp/grade/work --"));
        let a = args(
            SandboxPolicy::WorkspaceWrite { network: true },
            &mounts,
            Path::new("/"),
        );
        assert!(!a.contains(&"--unshare-net".to_string()));
        // Protected paths are re-bound read-only after the writable root; masks come last.
        let mounts = Mounts {
            writable: vec!["/ws".into()],
            protected: vec!["/ws/.git".into()],
            masked: vec!["/nonexistent-home/.netrc".into()],
            ..Mounts::default()
        };
        let joined = args(
            SandboxPolicy::WorkspaceWrite { network: false },
            &mounts,
            Path::new("/ws"),
        )
        .join(" ");
        let rw = joined.find("--bind /ws /ws").unwrap();
        let ro = joined.find("--ro-bind /ws/.git /ws/.git").unwrap();
        let mask = joined
            .find("--ro-bind /dev/null /nonexistent-home/.netrc")
            .unwrap();
        assert!(rw < ro && ro < mask, "{joined}");
        // Read-only binds no writable roots.
        let a = args(SandboxPolicy::ReadOnly, &mounts, Path::new("/"));
        assert!(!a.contains(&"--bind".to_string()));
    }
}
