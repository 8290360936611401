//! The bubblewrap backend: a read-only view of the host, a private /tmp, new user, pid, ipc and
//! uts namespaces (and network, unless allowed), its own session (no terminal injection), no
//! capabilities, a non-root uid when anvil runs as root, and it dies with its parent.

use std::path::{Path, PathBuf};

use crate::process::ProcessSpec;
use crate::sandbox::{Mounts, SandboxPolicy};

/// The uid and gid sandboxed commands run as when anvil runs as root (`nobody`).
pub const SANDBOX_UID: &str = "65534";

/// Where `bwrap` is, if it is installed.
pub fn find() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("bwrap"))
        .find(|p| p.is_file())
}

/// What a failed probe's stderr means, and what to do about it.
pub fn classify(stderr: &str) -> String {
    let s = stderr.trim();
    let hint = if s.contains("No permission to create new namespace")
        || s.contains("Operation not permitted") && s.contains("namespace")
        || s.contains("setting up uid map")
    {
        "unprivileged user namespaces are disabled (enable them: sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu 24.04+ allow bwrap in AppArmor)"
    } else if s.contains("Failed to make / slave") {
        "the mount namespace could not be set up (running inside a container without CAP_SYS_ADMIN? run anvil on the host or give the container a user-namespace-capable runtime)"
    } else if s.contains("RTM_NEWADDR") || s.contains("loopback") {
        "the network namespace could not be set up (the loopback interface could not be configured)"
    } else if s.contains("/proc") {
        "/proc could not be mounted in the sandbox (a container that masks /proc? run with --privileged-free proc access or on the host)"
    } else {
        "bubblewrap failed"
    };
    if s.is_empty() {
        hint.to_string()
    } else {
        format!("{hint}: {s}")
    }
}

/// Whether bubblewrap works here with the arguments the session will use: a one-off probe that
/// runs them on a command printing a marker, so a wrapper that exits 0 without running the
/// command is caught too.
pub fn works_with(bwrap: &Path, args: &[String]) -> Result<(), String> {
    const MARKER: &str = "anvil-sandbox-probe-ok";
    let out = std::process::Command::new(bwrap)
        .args(args)
        .args(["/bin/sh", "-c", &format!("echo {MARKER}")])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bwrap.display()))?;
    if !out.status.success() {
        return Err(classify(&String::from_utf8_lossy(&out.stderr)));
    }
    if !String::from_utf8_lossy(&out.stdout).contains(MARKER) {
        return Err(format!(
            "{} exited successfully without running the command: it is not a working bubblewrap",
            bwrap.display()
        ));
    }
    Ok(())
}

/// Whether bubblewrap works here at all (user namespaces may be disabled).
pub fn works(bwrap: &Path) -> Result<(), String> {
    let args: Vec<String> = [
        "--ro-bind",
        "/",
        "/",
        "--unshare-all",
        "--new-session",
        "--die-with-parent",
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    works_with(bwrap, &args)
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
        // No capabilities inside, whoever runs anvil: as root, bubblewrap would otherwise keep
        // them all, and a command could remount the read-only binds writable, unmount a mask
        // or mount over the workspace's protected paths.
        "--cap-drop",
        "ALL",
        // No user namespaces inside: a nested one would let a command mount tmpfs after tmpfs
        // (memory outside every limit) and reach kernel code meant for real root.
        "--disable-userns",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if nix::unistd::geteuid().is_root() {
        // Not root inside either: root maps to an unprivileged uid in the user namespace, so
        // nothing in the sandbox runs with uid 0's exemptions (files stay owned by the caller
        // on the host).
        a.extend(
            ["--uid", SANDBOX_UID, "--gid", SANDBOX_UID]
                .iter()
                .map(|s| s.to_string()),
        );
    }
    if mounts.view.is_empty() {
        a.extend(["--ro-bind".into(), "/".into(), "/".into()]);
    } else {
        // A confined view: only these paths exist. A symlink (merged /usr: /bin -> usr/bin)
        // is recreated as the same symlink.
        for p in &mounts.view {
            let shown = p.display().to_string();
            match std::fs::read_link(p) {
                Ok(target) => a.extend(["--symlink".into(), target.display().to_string(), shown]),
                Err(_) => a.extend(["--ro-bind".into(), shown.clone(), shown]),
            }
        }
    }
    a.extend(
        ["--dev", "/dev", "--proc", "/proc"]
            .iter()
            .map(|s| s.to_string()),
    );
    if let Some(bytes) = mounts.tmp_bytes {
        // /tmp is memory: a command filling it would fill the host's RAM.
        a.extend(["--size".into(), bytes.to_string()]);
    }
    a.extend(["--tmpfs".to_string(), "/tmp".to_string()]);
    let network = matches!(policy, SandboxPolicy::WorkspaceWrite { network: true });
    if !network {
        a.push("--unshare-net".into());
    }
    // A hidden directory that holds a path shown below (the workspaces root around this
    // trial's own workspace) is hidden first, so the path is bound inside the empty tmpfs;
    // hidden after, it would hide that path too.
    let holds_a_shown_path = |mask: &Path| {
        mask.is_dir()
            && mounts
                .read_only
                .iter()
                .chain(&mounts.writable)
                .chain(&mounts.protected)
                .chain(&mounts.reserved)
                .any(|p| p != mask && p.starts_with(mask))
    };
    let (enclosing, masked): (Vec<&PathBuf>, Vec<&PathBuf>) =
        mounts.masked.iter().partition(|p| holds_a_shown_path(p));
    for p in enclosing {
        a.extend(["--tmpfs".into(), p.display().to_string()]);
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
    for p in masked {
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

/// A file holding `options` NUL-separated, at offset 0, for bubblewrap's `--args FD`.
pub fn args_file(options: &[String]) -> Result<std::fs::File, String> {
    use std::io::{Seek, Write};
    let io = |e: std::io::Error| format!("cannot write the sandbox's arguments: {e}");
    let mut file = tempfile::tempfile().map_err(io)?;
    for o in options {
        file.write_all(o.as_bytes()).map_err(io)?;
        file.write_all(&[0]).map_err(io)?;
    }
    file.rewind().map_err(io)?;
    Ok(file)
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
        // A hidden directory around the workspace (the workspaces root) is hidden before the
        // workspace is bound into it; one that holds nothing shown is hidden last.
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().join("p1/workspace");
        let other = tempfile::tempdir().unwrap();
        let mounts = Mounts {
            writable: vec![ws.clone()],
            masked: vec![root.path().to_path_buf(), other.path().to_path_buf()],
            ..Mounts::default()
        };
        let a = args(
            SandboxPolicy::WorkspaceWrite { network: false },
            &mounts,
            &ws,
        );
        let at = |flag: &str, p: &Path| {
            let p = p.display().to_string();
            a.windows(2)
                .position(|w| w[0] == flag && w[1] == p)
                .unwrap_or_else(|| panic!("{flag} {p} in {a:?}"))
        };
        let enclosing = at("--tmpfs", root.path());
        let bound = at("--bind", &ws);
        let unrelated = at("--tmpfs", other.path());
        assert!(enclosing < bound && bound < unrelated, "{a:?}");
        // Probe failures are classified into something a person can act on.
        assert!(
            classify("bwrap: No permission to create new namespace")
                .contains("user namespaces are disabled")
        );
        assert!(
            classify("bwrap: Failed to make / slave: Permission denied")
                .contains("mount namespace")
        );
        assert!(classify("bwrap: loopback: Failed RTM_NEWADDR").contains("network namespace"));
        assert!(classify("bwrap: Can't mount proc on /newroot/proc").contains("/proc"));
        // Read-only binds no writable roots.
        let a = args(SandboxPolicy::ReadOnly, &mounts, Path::new("/"));
        assert!(!a.contains(&"--bind".to_string()));
    }
}
