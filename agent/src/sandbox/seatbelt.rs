//! The macOS backend: a Seatbelt profile for `/usr/bin/sandbox-exec`, built from the same
//! policy as the bubblewrap one. Deny by default; reads allowed; writes only under the writable
//! roots (passed as `-D` parameters, so no path is ever spliced into the profile text);
//! `.git` and `.anvil` excluded from writes by literal and subpath; credential stores denied,
//! after the allows so the denies win; network only when the policy allows it.
//!
//! Only `/usr/bin/sandbox-exec` is ever invoked (never one found on PATH). The profile is
//! golden-tested on every platform; running it needs macOS.

use std::fmt::Write;
use std::path::Path;

use crate::process::ProcessSpec;
use crate::sandbox::{Mounts, SandboxPolicy};

pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// The profile and its `-D name=value` parameters.
pub fn profile(policy: SandboxPolicy, mounts: &Mounts) -> (String, Vec<(String, String)>) {
    let mut params = Vec::new();
    let mut p = String::from(
        "(version 1)\n(deny default)\n\
         (allow process-exec)\n(allow process-fork)\n\
         (allow signal (target same-sandbox))\n\
         (allow sysctl-read)\n(allow mach-lookup)\n(allow ipc-posix-shm)\n\
         (allow file-read*)\n\
         (allow file-write-data (literal \"/dev/null\") (literal \"/dev/tty\"))\n",
    );
    if matches!(policy, SandboxPolicy::WorkspaceWrite { .. }) {
        p.push_str("(allow file-write*\n  (subpath \"/private/tmp\")\n  (subpath \"/private/var/folders\")");
        for (i, root) in mounts.writable.iter().enumerate() {
            let name = format!("WRITABLE_ROOT_{i}");
            let _ = write!(p, "\n  (subpath (param \"{name}\"))");
            params.push((name, root.display().to_string()));
        }
        p.push_str(")\n");
        let protected: Vec<_> = mounts.protected.iter().chain(&mounts.reserved).collect();
        if !protected.is_empty() {
            p.push_str("(deny file-write*");
            for (i, path) in protected.iter().enumerate() {
                let name = format!("PROTECTED_{i}");
                let _ = write!(
                    p,
                    "\n  (literal (param \"{name}\"))\n  (subpath (param \"{name}\"))"
                );
                params.push((name, path.display().to_string()));
            }
            p.push_str(")\n");
        }
    }
    if !mounts.masked.is_empty() {
        p.push_str("(deny file-read* file-write*");
        for (i, path) in mounts.masked.iter().enumerate() {
            let name = format!("CREDENTIAL_{i}");
            let _ = write!(
                p,
                "\n  (literal (param \"{name}\"))\n  (subpath (param \"{name}\"))"
            );
            params.push((name, path.display().to_string()));
        }
        p.push_str(")\n");
    }
    if matches!(policy, SandboxPolicy::WorkspaceWrite { network: true }) {
        p.push_str("(allow network*)\n");
    }
    (p, params)
}

/// Whether `sandbox_exec` runs a command under the profile for `policy`: it must exist, exit 0
/// and actually run the command (a wrapper that exits 0 without running it is caught).
pub fn works_with(
    sandbox_exec: &Path,
    policy: SandboxPolicy,
    mounts: &Mounts,
) -> Result<(), String> {
    const MARKER: &str = "anvil-sandbox-probe-ok";
    if !sandbox_exec.is_file() {
        return Err(format!("{} was not found", sandbox_exec.display()));
    }
    let probe = ProcessSpec::new("/bin/sh", "/").args(["-c", &format!("echo {MARKER}")]);
    let wrapped = wrap(probe, policy, mounts);
    let out = std::process::Command::new(sandbox_exec)
        .args(&wrapped.args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", sandbox_exec.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            sandbox_exec.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    if !String::from_utf8_lossy(&out.stdout).contains(MARKER) {
        return Err(format!(
            "{} exited successfully without running the command",
            sandbox_exec.display()
        ));
    }
    Ok(())
}

/// `spec` run under `sandbox-exec` with the profile for `policy`.
pub fn wrap(spec: ProcessSpec, policy: SandboxPolicy, mounts: &Mounts) -> ProcessSpec {
    if policy == SandboxPolicy::FullAccess {
        return spec;
    }
    let (profile, params) = profile(policy, mounts);
    let mut args = Vec::new();
    for (name, value) in params {
        args.push("-D".to_string());
        args.push(format!("{name}={value}"));
    }
    args.extend([
        "-p".to_string(),
        profile,
        "--".to_string(),
        spec.program.clone(),
    ]);
    args.extend(spec.args.iter().cloned());
    ProcessSpec {
        program: SANDBOX_EXEC.into(),
        args,
        ..spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mounts() -> Mounts {
        Mounts {
            writable: vec!["/Users/ada/src/app".into()],
            protected: vec!["/Users/ada/src/app/.git".into()],
            reserved: vec!["/Users/ada/src/app/.anvil".into()],
            masked: vec!["/Users/ada/.ssh".into(), "/Users/ada/.netrc".into()],
            ..Mounts::default()
        }
    }

    #[test]
    fn workspace_write_profile_golden() {
        let (profile, params) =
            profile(SandboxPolicy::WorkspaceWrite { network: false }, &mounts());
        insta::assert_snapshot!(profile);
        assert_eq!(
            params[0],
            ("WRITABLE_ROOT_0".into(), "/Users/ada/src/app".into())
        );
        assert!(!profile.contains("network"));
        // Paths are parameters, never spliced into the profile.
        assert!(!profile.contains("/Users/ada"));
        // The credential denies come after the allows, so they win.
        assert!(
            profile.find("(deny file-read* file-write*").unwrap()
                > profile.find("(allow file-read*)").unwrap()
        );
    }

    #[test]
    fn network_and_read_only_variants() {
        let (p, _) = profile(SandboxPolicy::WorkspaceWrite { network: true }, &mounts());
        assert!(p.contains("(allow network*)"));
        let (p, params) = profile(SandboxPolicy::ReadOnly, &mounts());
        assert!(!p.contains("WRITABLE_ROOT"));
        assert!(params.iter().all(|(n, _)| n.starts_with("CREDENTIAL_")));
        let spec = ProcessSpec::new("bash", "/Users/ada/src/app").args(["-c", "true"]);
        let wrapped = wrap(
            spec,
            SandboxPolicy::WorkspaceWrite { network: false },
            &mounts(),
        );
        assert_eq!(wrapped.program, SANDBOX_EXEC);
        assert_eq!(
            &wrapped.args[wrapped.args.len() - 3..],
            ["bash", "-c", "true"]
        );
    }

    fn script(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// `works_with`, retried while the fresh script is "text file busy": another test's fork
    /// can hold our write descriptor for an instant before its exec closes it.
    fn probe(exe: &Path, policy: SandboxPolicy) -> Result<(), String> {
        for _ in 0..100 {
            match works_with(exe, policy, &mounts()) {
                Err(e) if e.contains("Text file busy") => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                other => return other,
            }
        }
        works_with(exe, policy, &mounts())
    }

    #[test]
    fn the_probe_fails_closed_on_a_missing_or_fake_sandbox_exec() {
        let dir = tempfile::tempdir().unwrap();
        let policy = SandboxPolicy::WorkspaceWrite { network: false };
        let missing = works_with(&dir.path().join("nope"), policy, &mounts()).unwrap_err();
        assert!(missing.contains("was not found"), "{missing}");
        let liar = script(dir.path(), "liar", "exit 0");
        let err = probe(&liar, policy).unwrap_err();
        assert!(err.contains("without running the command"), "{err}");
        let failing = script(
            dir.path(),
            "failing",
            "echo 'sandbox_apply: Operation not permitted' >&2; exit 71",
        );
        let err = probe(&failing, policy).unwrap_err();
        assert!(err.contains("Operation not permitted"), "{err}");
    }

    #[test]
    fn the_probe_accepts_a_sandbox_exec_that_runs_the_command() {
        // Stands in for sandbox-exec: skips its options up to `--`, then runs the command.
        let dir = tempfile::tempdir().unwrap();
        let runs = script(
            dir.path(),
            "runs",
            "while [ \"$1\" != -- ]; do shift; done; shift; exec \"$@\"",
        );
        probe(&runs, SandboxPolicy::ReadOnly).unwrap();
    }

    #[test]
    fn wrapping_invokes_only_the_system_sandbox_exec() {
        let spec = ProcessSpec::new("bash", "/w").args(["-c", "true"]);
        let wrapped = wrap(
            spec,
            SandboxPolicy::WorkspaceWrite { network: false },
            &mounts(),
        );
        assert_eq!(wrapped.program, "/usr/bin/sandbox-exec");
        let dashdash = wrapped.args.iter().position(|a| a == "--").unwrap();
        assert_eq!(&wrapped.args[dashdash + 1..], ["bash", "-c", "true"]);
        assert_eq!(wrapped.args[dashdash - 2], "-p");
    }
}
