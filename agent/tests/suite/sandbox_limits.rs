//! Resource limits hold through the real bash tool under the real sandbox: a fork bomb, a
//! 20 GB allocation, a file bigger than allowed and a descriptor flood each end that command
//! with a clear error, and the host is left as it was — as root (CI) and, for the rlimits, as
//! an unprivileged user (`setpriv --reuid=65534`).
//!
//! bubblewrap is required (scripts/test.sh installs it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anvil_agent::process::{self, ProcessSpec};
use anvil_agent::sandbox::limits::{self, Limits};
use anvil_agent::sandbox::{Sandbox, SandboxPolicy, bwrap};
use anvil_agent::secrets::ChildEnv;
use anvil_agent::tools::bash::Bash;
use anvil_agent::{ToolContext, ToolRegistry};
use anvil_llm::ContentBlock;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const OFF: SandboxPolicy = SandboxPolicy::WorkspaceWrite { network: false };

fn workspace() -> tempfile::TempDir {
    assert!(
        bwrap::find().is_some(),
        "bubblewrap is not installed: apt-get install bubblewrap (scripts/test.sh does this)"
    );
    let ws = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::set_permissions(ws.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    ws
}

/// Runs `command` through the bash tool under `limits`; the result text.
async fn bash(ws: &std::path::Path, limits: Limits, command: &str, timeout_ms: u64) -> String {
    let env =
        ChildEnv::default().with_base(vec![("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())]);
    let sandbox = Sandbox::new(OFF, ws).with_limits(limits);
    let mut r = ToolRegistry::new();
    r.register(Arc::new(Bash::new(env, Arc::new(sandbox))))
        .unwrap();
    let ctx = ToolContext::new(ws);
    match r
        .dispatch(
            "id",
            "bash",
            &json!({"command": command, "timeout_ms": timeout_ms}),
            &ctx,
        )
        .await
        .result
    {
        ContentBlock::ToolResult { content, .. } => content,
        other => panic!("{other:?}"),
    }
}

/// Small limits, with no process bound: as an ordinary user without a pids cgroup that bound
/// is `RLIMIT_NPROC`, which counts every process of the uid — the fork bomb running in
/// parallel included — so a test about files or memory would fail to start its sandbox.
fn small() -> Limits {
    Limits {
        processes: None,
        memory_bytes: Some(1 << 30),
        file_size_bytes: Some(1 << 20),
        open_files: Some(64),
        tmp_bytes: Some(64 << 20),
        cgroups: true,
    }
}

#[tokio::test]
async fn a_fork_bomb_ends_at_the_process_limit_and_the_host_stays_responsive() {
    let bounded = Limits {
        processes: Some(64),
        ..small()
    };
    let ws = workspace();
    let root = nix::unistd::geteuid().is_root();
    if root && limits::pids_cgroup_parent().is_none() {
        panic!(
            "running as root without a pids cgroup: processes cannot be bounded here (see the \
             README's sandbox section); give anvil a cgroup v1 pids hierarchy or a delegated v2 \
             pids controller"
        );
    }
    let started = Instant::now();
    let out = bash(
        ws.path(),
        bounded,
        "bomb() { bomb | bomb & }; bomb; sleep 3; echo BOMB-DONE",
        8_000,
    )
    .await;
    // The host could still start processes the whole time; the bomb's are gone.
    let probe = std::process::Command::new("true").status().unwrap();
    assert!(probe.success());
    assert!(started.elapsed() < Duration::from_secs(30), "{out}");
    if root {
        assert!(out.contains("limit of 64 processes"), "{out}");
    } else {
        assert!(
            out.contains("fork") || out.contains("Resource temporarily unavailable"),
            "{out}"
        );
    }
    // The command's cgroup is removed once it has ended.
    if root {
        let (spec, guard) = Sandbox::new(OFF, ws.path())
            .with_limits(bounded)
            .wrap(
                ProcessSpec::new("/bin/sh", ws.path())
                    .args(["-c", "bomb() { bomb | bomb & }; bomb; sleep 2"])
                    .env(vec![("PATH".into(), "/usr/bin:/bin".into())])
                    .timeout(Duration::from_secs(5)),
            )
            .unwrap();
        assert_eq!(spec.program, "bash", "the launcher joins the cgroup");
        let script = &spec.args[1];
        let start = script.find("echo $$ > '").unwrap() + "echo $$ > '".len();
        let end = script[start..].find("/cgroup.procs'").unwrap() + start;
        let cgroup = std::path::PathBuf::from(&script[start..end]);
        assert!(cgroup.join("pids.max").is_file());
        process::run(&spec, &CancellationToken::new())
            .await
            .unwrap();
        assert!(guard.limit_note().is_some());
        drop(guard);
        assert!(!cgroup.exists(), "{} left behind", cgroup.display());
    }
}

#[tokio::test]
async fn a_20_gb_allocation_fails_inside_the_command() {
    let ws = workspace();
    let out = bash(
        ws.path(),
        small(),
        "python3 -c 'x = bytearray(20 * 2**30); print(\"ALLOCATED\")' 2>&1; echo AFTER",
        30_000,
    )
    .await;
    assert!(
        out.contains("MemoryError") && !out.contains("ALLOCATED"),
        "{out}"
    );
    assert!(out.contains("AFTER"), "{out}");
}

#[tokio::test]
async fn a_file_past_the_size_limit_is_cut_off() {
    let ws = workspace();
    let out = bash(
        ws.path(),
        small(),
        "head -c 5000000 /dev/zero > big.bin; echo \"exit $?\"",
        30_000,
    )
    .await;
    let size = std::fs::metadata(ws.path().join("big.bin")).unwrap().len();
    // Exactly the limit: not less (a shell counting in other units), not more.
    assert_eq!(size, 1 << 20, "{size} bytes written: {out}");
    assert!(!out.contains("exit 0"), "{out}");
}

/// The private /tmp is memory: filling it stops at its size, not at the host's RAM.
#[tokio::test]
async fn the_private_tmp_cannot_fill_the_host_s_memory() {
    let ws = workspace();
    let out = bash(
        ws.path(),
        small(),
        "for i in $(seq 200); do head -c 1000000 /dev/zero > /tmp/f$i || break; done; du -sm /tmp | cut -f1",
        30_000,
    )
    .await;
    assert!(out.contains("No space left on device"), "{out}");
    let used: u64 = out
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .next()
        .unwrap_or(u64::MAX);
    assert!(used <= 64, "{used} MB in /tmp: {out}");
}

/// Memory that no address-space limit sees — a memfd, /dev/shm, a masked directory's tmpfs,
/// several processes together — is bounded by the command's memory cgroup. Needs a memory
/// cgroup: root has one (here and in CI, where a missing one fails this test); an ordinary
/// user has one only where systemd delegates it, and without it the README promises only the
/// address-space limit, which the tests above hold.
#[tokio::test]
async fn memory_outside_the_address_space_limit_is_bounded_too() {
    if limits::memory_cgroup_parent().is_none() {
        assert!(
            !nix::unistd::geteuid().is_root(),
            "no memory cgroup can be made here, as root: the memory limit covers only address space"
        );
        eprintln!(
            "memory_outside_the_address_space_limit_is_bounded_too: not run — this user has no \
             delegated memory cgroup, so only the address-space limit applies (README: The sandbox)"
        );
        return;
    }
    let ws = workspace();
    // Only memory binds here: files and /tmp may be as large as they like.
    let limits = Limits {
        memory_bytes: Some(256 << 20),
        file_size_bytes: None,
        tmp_bytes: None,
        ..small()
    };
    for (name, command) in [
        (
            "memfd",
            "python3 -c \"import os; fd = os.memfd_create('x'); [os.write(fd, b'x' * (1 << 20)) for _ in range(600)]; print('FILLED')\"",
        ),
        (
            "/dev/shm",
            "for i in $(seq 600); do head -c 1048576 /dev/zero >> /dev/shm/fill || break; done; [ $(stat -c %s /dev/shm/fill) -ge 600000000 ] && echo FILLED",
        ),
        (
            "three processes",
            "for i in 1 2 3; do python3 -c \"x = bytearray(200 * 2**20); import time; time.sleep(1); print('HELD')\" & done; wait; echo DONE",
        ),
    ] {
        let out = bash(ws.path(), limits, command, 60_000).await;
        assert!(!out.contains("FILLED"), "{name}: {out}");
        if name == "three processes" {
            assert!(
                out.lines().filter(|l| l.trim() == "HELD").count() < 3,
                "{name}: {out}"
            );
        }
        assert!(
            out.contains("memory limit"),
            "{name}: the model is told: {out}"
        );
    }
}

#[tokio::test]
async fn too_many_open_files_are_refused() {
    let ws = workspace();
    let out = bash(
        ws.path(),
        small(),
        "python3 -c 'fs = [open(\"/dev/null\") for _ in range(200)]; print(\"OPENED\")' 2>&1",
        30_000,
    )
    .await;
    assert!(
        out.contains("Too many open files") && !out.contains("OPENED"),
        "{out}"
    );
}

/// The rlimits bind an unprivileged user the same way (no cgroup: the process bound is not
/// what this checks).
#[tokio::test]
async fn as_an_unprivileged_user_the_rlimits_hold() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("NOTE: already unprivileged; the other tests cover this user");
        return;
    }
    let ws = workspace();
    // No cgroups: a cgroup anvil made as root is not this user's to join (a real
    // unprivileged anvil makes its own, where it may).
    let limits = Limits {
        processes: None,
        cgroups: false,
        ..small()
    };
    // No credential masks: root's home is not this user's to mount over (the privilege suite
    // covers masks); this is about the limits.
    let (mut spec, _guard) = Sandbox::new(OFF, ws.path())
        .with_limits(limits)
        .with_credential_dirs(Default::default())
        .wrap(
            ProcessSpec::new("/bin/sh", ws.path())
                .args([
                    "-c",
                    "python3 -c 'x = bytearray(20 * 2**30)' 2>&1 | tail -1; head -c 5000000 /dev/zero > big.bin; ulimit -n; id -u",
                ])
                .env(vec![("PATH".into(), "/usr/bin:/bin".into())])
                .timeout(Duration::from_secs(30)),
        )
        .unwrap();
    let mut args = vec![
        "--reuid=65534".to_string(),
        "--regid=65534".into(),
        "--clear-groups".into(),
        "--".into(),
        spec.program.clone(),
    ];
    args.append(&mut spec.args);
    spec.program = "setpriv".into();
    spec.args = args;
    let out = process::run(&spec, &CancellationToken::new())
        .await
        .unwrap();
    let text = format!("{}{}", out.stdout.text(), out.stderr.text());
    assert!(text.contains("MemoryError"), "{text}");
    assert!(text.contains("\n64\n"), "{text}");
    let size = std::fs::metadata(ws.path().join("big.bin")).unwrap().len();
    assert!(size <= 1 << 20, "{size}");
}

/// The defaults leave room for real work: several hundred processes and a few GB.
#[tokio::test]
async fn the_defaults_allow_ordinary_parallel_work() {
    let ws = workspace();
    let out = bash(
        ws.path(),
        Limits::default(),
        "for i in $(seq 300); do sleep 1 & done; wait; python3 -c 'x = bytearray(512 * 2**20); print(\"BIG-OK\")'",
        60_000,
    )
    .await;
    assert!(
        out.contains("BIG-OK") && out.contains("Exit code: 0"),
        "{out}"
    );
}
