//! The macOS backend: a Seatbelt profile for `/usr/bin/sandbox-exec`, built from the same
//! policy as the bubblewrap one. Deny by default; reads allowed; writes only under the writable
//! roots (passed as `-D` parameters, so no path is ever spliced into the profile text);
//! `.git` and `.anvil` excluded from writes by literal and subpath; credential stores denied,
//! after the allows so the denies win; network only when the policy allows it.
//!
//! Only `/usr/bin/sandbox-exec` is ever invoked (never one found on PATH). The profile is
//! golden-tested on every platform; running it needs macOS.

use std::fmt::Write;

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
}
