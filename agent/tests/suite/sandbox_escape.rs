//! The escape suite: the real bash tool under the real bubblewrap sandbox (WorkspaceWrite
//! without network), HOME pointed at a fake home seeded with secrets. Every attempt must fail,
//! and each is checked from the host side, not from what the sandboxed command says.
//!
//! bubblewrap is required (scripts/test.sh installs it); a missing one fails the suite with how
//! to install it, it is never skipped silently.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anvil_agent::sandbox::{Sandbox, SandboxPolicy, bwrap};
use anvil_agent::secrets::ChildEnv;
use anvil_agent::tools::bash::Bash;
use anvil_agent::{ToolContext, ToolRegistry};
use anvil_llm::ContentBlock;
use serde_json::json;

const SECRET: &str = "FAKE-PRIVATE-KEY-7f3a9c";

struct Box_ {
    _root: tempfile::TempDir,
    home: std::path::PathBuf,
    workspace: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn setup() -> Box_ {
    assert!(
        bwrap::find().is_some(),
        "bubblewrap is not installed: apt-get install bubblewrap (scripts/test.sh does this)"
    );
    // Outside /tmp (the sandbox's /tmp is private, which would hide a fake home there anyway):
    // the credentials must be hidden by the masks, not by accident.
    let root = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let base = root.path().canonicalize().unwrap();
    let home = base.join("home");
    let workspace = base.join("workspace");
    let outside = base.join("outside");
    for d in [
        &home,
        &workspace,
        &outside,
        &home.join(".ssh"),
        &home.join(".aws"),
        &workspace.join(".git/hooks"),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(home.join(".ssh/id_rsa"), SECRET).unwrap();
    std::fs::write(home.join(".aws/credentials"), SECRET).unwrap();
    std::fs::write(home.join(".netrc"), SECRET).unwrap();
    std::fs::write(workspace.join(".git/config"), "[core]\n").unwrap();
    std::fs::create_dir_all(workspace.join(".anvil")).unwrap();
    std::fs::write(workspace.join(".anvil/config.toml"), "").unwrap();
    Box_ {
        _root: root,
        home,
        workspace,
        outside,
    }
}

async fn run(b: &Box_, policy: SandboxPolicy, command: &str) -> String {
    let sandbox = Sandbox::new(policy, &b.workspace).with_home(&b.home);
    run_in(b, sandbox, command).await.0
}

/// Runs `command` through the real bash tool under `sandbox`; the result text and is_error.
async fn run_in(b: &Box_, sandbox: Sandbox, command: &str) -> (String, bool) {
    let env = ChildEnv::default().with_base(vec![
        ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".into(), b.home.display().to_string()),
        (
            "ANTHROPIC_API_KEY".into(),
            "sk-ant-should-not-leak-123".into(),
        ),
    ]);
    let mut r = ToolRegistry::new();
    r.register(Arc::new(Bash::new(env, Arc::new(sandbox))))
        .unwrap();
    let ctx = ToolContext::new(&b.workspace);
    match r
        .dispatch(
            "id",
            "bash",
            &json!({"command": command, "timeout_ms": 20000}),
            &ctx,
        )
        .await
        .result
    {
        ContentBlock::ToolResult {
            content, is_error, ..
        } => (content, is_error),
        other => panic!("{other:?}"),
    }
}

const OFF: SandboxPolicy = SandboxPolicy::WorkspaceWrite { network: false };

#[tokio::test]
async fn writes_land_in_the_workspace_and_nowhere_else() {
    let b = setup();
    let out = run(
        &b,
        OFF,
        &format!(
            "touch ok; touch {}/escape; touch ~/escape; touch /tmp/x",
            b.outside.display()
        ),
    )
    .await;
    assert!(b.workspace.join("ok").exists(), "{out}");
    assert!(!b.outside.join("escape").exists());
    assert!(!b.home.join("escape").exists());
}

#[tokio::test]
async fn credentials_under_home_cannot_be_read_or_copied() {
    let b = setup();
    let out = run(
        &b,
        OFF,
        "cat ~/.ssh/id_rsa ~/.aws/credentials ~/.netrc; cp ~/.ssh/id_rsa stolen 2>&1; ls -la ~/.ssh",
    )
    .await;
    assert!(!out.contains(SECRET), "{out}");
    let stolen = std::fs::read_to_string(b.workspace.join("stolen")).unwrap_or_default();
    assert!(!stolen.contains(SECRET));
}

/// Masks come from the directories credentials really live in: shell histories and tokens
/// under HOME, and configuration kept outside HOME through XDG_CONFIG_HOME / XDG_DATA_HOME.
#[tokio::test]
async fn credentials_outside_home_and_histories_are_hidden() {
    let b = setup();
    let xdg = b.outside.join("xdg-config");
    let data = b.outside.join("xdg-data");
    for (path, body) in [
        (xdg.join("anvil/config.toml"), SECRET),
        (xdg.join("gh/hosts.yml"), SECRET),
        (xdg.join("git/credentials"), SECRET),
        (data.join("anvil/anvil.db"), SECRET),
        (b.home.join(".bash_history"), SECRET),
        (b.home.join(".pgpass"), SECRET),
        (b.home.join(".vault-token"), SECRET),
        (b.home.join(".claude/credentials.json"), SECRET),
        (b.home.join(".codex/auth.json"), SECRET),
        (b.home.join(".kube/config"), SECRET),
        (b.home.join(".docker/config.json"), SECRET),
    ] {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    let dirs = anvil_agent::sandbox::credentials::CredentialDirs::for_home(
        Some(b.home.clone()),
        Some(xdg.clone().into()),
        Some(data.clone().into()),
    );
    let sandbox = Sandbox::new(OFF, &b.workspace).with_credential_dirs(dirs);
    let (out, _) = run_in(
        &b,
        sandbox,
        &format!(
            "cat {x}/anvil/config.toml {x}/gh/hosts.yml {x}/git/credentials {d}/anvil/anvil.db ~/.bash_history ~/.pgpass ~/.vault-token ~/.claude/credentials.json ~/.codex/auth.json ~/.kube/config ~/.docker/config.json; grep -r FAKE {x} {d} ~ 2>/dev/null; echo SCANNED",
            x = xdg.display(),
            d = data.display()
        ),
    )
    .await;
    assert!(out.contains("SCANNED"), "{out}");
    assert!(!out.contains(SECRET), "{out}");
}

#[tokio::test]
async fn symlinks_and_hard_links_do_not_get_around_the_policy() {
    let b = setup();
    std::fs::write(b.outside.join("target.txt"), "original").unwrap();
    run(
        &b,
        OFF,
        &format!(
            "ln -s {o} link && touch link/through-link; ln {o}/target.txt hard 2>&1; echo changed > hard; ln -s ~/.ssh sshlink && cat sshlink/id_rsa",
            o = b.outside.display()
        ),
    )
    .await;
    assert!(!b.outside.join("through-link").exists());
    assert_eq!(
        std::fs::read_to_string(b.outside.join("target.txt")).unwrap(),
        "original"
    );
}

#[tokio::test]
async fn git_metadata_and_anvil_config_are_read_only() {
    let b = setup();
    let out = run(
        &b,
        OFF,
        "echo '[core] fsmonitor = evil' >> .git/config; echo evil > .git/hooks/pre-commit; echo x > .anvil/config.toml; rm -rf .git",
    )
    .await;
    assert!(out.contains("Read-only file system"), "{out}");
    assert_eq!(
        std::fs::read_to_string(b.workspace.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!b.workspace.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(b.workspace.join(".anvil/config.toml")).unwrap(),
        ""
    );
}

#[tokio::test]
async fn the_network_is_off_unless_allowed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let b = setup();
    let probe = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\" && echo REACHED || echo BLOCKED; (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo TCP-REACHED || echo TCP-BLOCKED"
    );
    let out = run(&b, OFF, &probe).await;
    assert!(
        out.contains("BLOCKED") && out.contains("TCP-BLOCKED") && !out.contains("REACHED\n"),
        "{out}"
    );
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_err(),
        "a connection reached the host listener"
    );
    // With network allowed, the same probe gets through: the test can tell the difference.
    let out = run(&b, SandboxPolicy::WorkspaceWrite { network: true }, &probe).await;
    assert!(out.contains("REACHED"), "{out}");
}

#[tokio::test]
async fn credentials_are_not_in_the_environment() {
    let b = setup();
    let out = run(&b, OFF, "env").await;
    assert!(
        !out.contains("sk-ant-should-not-leak-123") && !out.contains("ANTHROPIC_API_KEY"),
        "{out}"
    );
}

fn marked_alive(marker: &str) -> bool {
    !anvil_test_support::procs::naming(marker).is_empty()
}

#[tokio::test]
async fn a_background_job_does_not_survive_the_call() {
    let b = setup();
    run(
        &b,
        OFF,
        "(exec -a anvil-escape-bg sleep 1000) > /dev/null 2>&1 & echo started",
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while marked_alive("anvil-escape-bg") && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !marked_alive("anvil-escape-bg"),
        "a background job outlived its sandboxed call"
    );
}

#[tokio::test]
async fn a_missing_sandbox_fails_closed_and_runs_nothing() {
    let b = setup();
    let (out, is_error) = run_in(
        &b,
        Sandbox::new(OFF, &b.workspace).with_bwrap(None),
        "touch ran",
    )
    .await;
    assert!(is_error);
    assert!(
        out.contains("apt-get install bubblewrap") && out.contains("--sandbox full-access"),
        "{out}"
    );
    assert!(!Path::new(&b.workspace.join("ran")).exists());
    // A bubblewrap that does not work is refused the same way.
    let broken = Sandbox::new(OFF, &b.workspace).with_bwrap(Some("/bin/false".into()));
    let (out, is_error) = run_in(&b, broken, "touch ran").await;
    assert!(
        is_error && out.contains("the sandbox is unavailable"),
        "{out}"
    );
    assert!(!b.workspace.join("ran").exists());
}

#[tokio::test]
async fn a_host_unix_socket_cannot_be_reached() {
    // A listener on the host, on a Unix socket the sandbox can see (outside /tmp).
    let b = setup();
    let path = b.outside.join("daemon.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let out = run(
        &b,
        OFF,
        &format!(
            "python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}'); print('UNIX-REACHED')\" 2>&1 || echo UNIX-BLOCKED",
            path.display()
        ),
    )
    .await;
    assert!(
        out.contains("UNIX-BLOCKED") && !out.contains("UNIX-REACHED"),
        "{out}"
    );
    assert!(
        listener.accept().is_err(),
        "a connection reached the host's Unix socket"
    );
    // Pipes between the command's own processes still work.
    let out = run(&b, OFF, "echo through-a-pipe | cat").await;
    assert!(out.contains("through-a-pipe"), "{out}");
}

#[tokio::test]
async fn a_host_unix_datagram_socket_cannot_be_reached() {
    // /dev/log-style: an unconnected datagram socket can send with an address, no connect().
    let b = setup();
    let path = b.outside.join("log.sock");
    let receiver = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    receiver.set_nonblocking(true).unwrap();
    // Every AF_UNIX socket type (all 16 values of the type field) with every flag
    // combination: the kernel turns SOCK_RAW into a datagram socket, and no allowlist may miss
    // a value. Each created socket tries to send to the host's datagram socket.
    let script = format!(
        r#"import socket
made = []
for kind in range(16):
    for flags in (0, socket.SOCK_NONBLOCK, socket.SOCK_CLOEXEC, socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC):
        try:
            s = socket.socket(socket.AF_UNIX, kind | flags)
        except OSError:
            continue
        made.append((kind, int(flags)))
        try:
            s.sendto(b"escaped", "{path}")
            print("DGRAM-SENT", kind, flags)
        except OSError:
            pass
print("MADE", made)
print("DGRAM-DONE")
"#,
        path = path.display()
    );
    std::fs::write(b.workspace.join("dgram.py"), script).unwrap();
    let out = run(&b, OFF, "python3 dgram.py 2>&1").await;
    assert!(
        out.contains("DGRAM-DONE") && !out.contains("DGRAM-SENT"),
        "{out}"
    );
    // Only stream and seqpacket sockets could be made at all.
    assert!(
        out.contains(
            "MADE [(1, 0), (1, 2048), (1, 524288), (1, 526336), (5, 0), (5, 2048), (5, 524288), (5, 526336)]"
        ),
        "{out}"
    );
    let mut buf = [0u8; 64];
    assert!(
        receiver.recv(&mut buf).is_err(),
        "a datagram reached the host's Unix socket"
    );
    // Pairs: a datagram pair could sendto the host's socket by path, so only stream pairs
    // are made; they still work between the command's own processes.
    let out = run(
        &b,
        OFF,
        &format!(
            "python3 -c \"import socket\ntry:\n    a,b=socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); a.sendto(b'escaped', '{p}'); print('PAIR-SENT')\nexcept OSError as e:\n    print('PAIR-REFUSED', e)\na,b=socket.socketpair(); a.send(b'pair-ok'); print(b.recv(16).decode())\"",
            p = path.display()
        ),
    )
    .await;
    assert!(
        out.contains("PAIR-REFUSED") && !out.contains("PAIR-SENT"),
        "{out}"
    );
    assert!(out.contains("pair-ok"), "{out}");
    assert!(
        receiver.recv(&mut buf).is_err(),
        "a datagram reached the host's Unix socket through a socketpair"
    );
}

#[tokio::test]
async fn git_init_in_a_workspace_without_git_is_refused_and_leaves_nothing_behind() {
    let b = setup();
    std::fs::remove_dir_all(b.workspace.join(".git")).unwrap();
    std::fs::remove_dir_all(b.workspace.join(".anvil")).unwrap();
    let out = run(
        &b,
        OFF,
        "git init -q . 2>&1; git config core.fsmonitor 'touch /tmp/pwned' 2>&1; mkdir -p .anvil/hooks 2>&1; echo done",
    )
    .await;
    assert!(out.contains("done"), "{out}");
    // Nothing was planted, and the reserved mount points are gone again.
    assert!(!b.workspace.join(".git").exists(), "{out}");
    assert!(!b.workspace.join(".anvil").exists(), "{out}");
    // Normal work in the workspace still happens.
    run(&b, OFF, "echo hi > note.txt").await;
    assert_eq!(
        std::fs::read_to_string(b.workspace.join("note.txt")).unwrap(),
        "hi\n"
    );
    assert!(!b.workspace.join(".git").exists());
}

#[tokio::test]
async fn a_wrapper_that_exits_0_without_running_the_command_is_caught() {
    let b = setup();
    let fake = b.outside.join("fake-bwrap");
    std::fs::write(&fake, "#!/bin/sh\nexit 0\n").unwrap();
    let mut perms = std::fs::metadata(&fake).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&fake, perms).unwrap();
    // Another test's fork may hold our write descriptor for an instant ("text file busy").
    for _ in 0..100 {
        match std::process::Command::new(&fake).status() {
            Err(e) if e.raw_os_error() == Some(26) => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            _ => break,
        }
    }
    let sandbox = Sandbox::new(OFF, &b.workspace).with_bwrap(Some(fake));
    let (out, is_error) = run_in(&b, sandbox, "touch ran").await;
    assert!(
        is_error && out.contains("without running the command"),
        "{out}"
    );
    assert!(!b.workspace.join("ran").exists());
}

/// Runs git on the host the way a person would, hooks and config included (but not their
/// global config): what a planted fsmonitor or hook would do to them.
fn host_git(dir: &Path, args: &[&str]) {
    let _ = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
}

fn git_init(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    host_git(dir, &["init", "-q"]);
    assert!(dir.join(".git/config").is_file(), "git init failed");
}

/// Nested repositories: one that exists is read-only to commands, like the workspace's own;
/// one a command creates keeps nothing that would run a program when the host runs git there.
#[tokio::test]
async fn nested_repositories_cannot_plant_code_for_the_host() {
    let b = setup();
    let marker = b.outside.join("PWNED");
    // An existing nested repository: its config and hooks cannot be written.
    git_init(&b.workspace.join("vendor/lib"));
    let before = std::fs::read_to_string(b.workspace.join("vendor/lib/.git/config")).unwrap();
    let out = run(
        &b,
        OFF,
        &format!(
            "git -C vendor/lib config core.fsmonitor 'touch {m}'; printf '#!/bin/sh\\ntouch {m}\\n' > vendor/lib/.git/hooks/post-checkout; chmod +x vendor/lib/.git/hooks/post-checkout; echo DONE",
            m = marker.display()
        ),
    )
    .await;
    assert!(out.contains("DONE"), "{out}");
    assert_eq!(
        std::fs::read_to_string(b.workspace.join("vendor/lib/.git/config")).unwrap(),
        before,
        "{out}"
    );
    assert!(
        !b.workspace
            .join("vendor/lib/.git/hooks/post-checkout")
            .exists()
    );
    // A repository the command creates (plainly, and with its git directory elsewhere in the
    // workspace), planted with an fsmonitor, a hook and an alias.
    let out = run(
        &b,
        OFF,
        &format!(
            "git init -q fresh && git -C fresh config core.fsmonitor 'touch {m}' && git -C fresh config alias.st '!touch {m}' && git -C fresh config user.name kept && printf '#!/bin/sh\\ntouch {m}\\n' > fresh/.git/hooks/post-checkout && chmod +x fresh/.git/hooks/post-checkout; \
             mkdir -p gitdirs && git init -q --separate-git-dir=gitdirs/other other && git -C other config core.hooksPath /tmp && git -C other config core.pager 'touch {m}'; echo CREATED",
            m = marker.display()
        ),
    )
    .await;
    assert!(out.contains("CREATED"), "{out}");
    assert!(
        out.contains("anvil removed") && out.contains("core.fsmonitor"),
        "the model is told: {out}"
    );
    // The host now runs git there: status (fsmonitor), checkout (post-checkout), the alias,
    // a paged log.
    for dir in [b.workspace.join("fresh"), b.workspace.join("other")] {
        host_git(&dir, &["status"]);
        host_git(&dir, &["checkout", "-q", "-b", "x"]);
        host_git(&dir, &["st"]);
        host_git(&dir, &["-p", "log"]);
    }
    assert!(!marker.exists(), "a planted program ran on the host: {out}");
    let kept = std::fs::read_to_string(b.workspace.join("fresh/.git/config")).unwrap();
    assert!(
        kept.contains("kept") && !kept.contains("fsmonitor"),
        "{kept}"
    );
}

/// The file tools refuse nested repositories' metadata too.
#[tokio::test]
async fn file_tools_refuse_nested_git_metadata() {
    let b = setup();
    git_init(&b.workspace.join("sub"));
    let access = anvil_agent::file_access::FileAccess::workspace(&b.workspace).unwrap();
    for rel in ["sub/.git/config", "sub/.git/hooks/pre-commit"] {
        let err = access.check_write(&b.workspace.join(rel)).unwrap_err();
        assert!(err.to_string().contains("git metadata"), "{rel}: {err}");
    }
    // A git directory a .git file points to.
    std::fs::create_dir_all(b.workspace.join("gd")).unwrap();
    host_git(&b.workspace.join("gd"), &["init", "-q", "--bare"]);
    let err = access
        .check_write(&b.workspace.join("gd/config"))
        .unwrap_err();
    assert!(err.to_string().contains("git metadata"), "{err}");
    assert!(access.check_write(&b.workspace.join("sub/src.rs")).is_ok());
}

/// The cleanup of new repositories runs on the host with anvil's rights: it never follows a
/// symlink (a `hooks` link to a host directory was emptied), and it cannot be dodged by an
/// ignore file, a `.git` symlink, a git directory not named `.git`, or a cache tag made by the
/// same command.
#[tokio::test]
async fn new_repositories_are_neutralized_without_following_links_or_being_dodged() {
    let b = setup();
    let victim = b.outside.join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("authorized_keys"), "keep me").unwrap();
    let marker = b.outside.join("PWNED2");
    let m = marker.display();
    let out = run(
        &b,
        OFF,
        &format!(
            "git init -q linked && rm -rf linked/.git/hooks && ln -s {v} linked/.git/hooks; \
             git init -q hid && git -C hid config core.fsmonitor 'touch {m}' && echo hid/ >> .gitignore && echo hid/ >> .ignore; \
             git init -q --bare stash && git -C stash config core.bare false && git -C stash config core.fsmonitor 'touch {m}' && mkdir app && ln -s ../stash app/.git; \
             git init -q --bare vendor-lib && git -C vendor-lib config alias.st '!touch {m}'; \
             mkdir cache && printf 'Signature: 8a477f597d28d172789f06886806bc55\\n' > cache/CACHEDIR.TAG && git init -q cache/r && git -C cache/r config core.fsmonitor 'touch {m}'; \
             echo PLANTED",
            v = victim.display()
        ),
    )
    .await;
    assert!(out.contains("PLANTED"), "{out}");
    assert_eq!(
        std::fs::read_to_string(victim.join("authorized_keys")).unwrap(),
        "keep me",
        "the cleanup followed a symlink out of the workspace: {out}"
    );
    for dir in ["hid", "app", "cache/r"] {
        host_git(&b.workspace.join(dir), &["status"]);
    }
    host_git(&b.workspace.join("vendor-lib"), &["st"]);
    assert!(!marker.exists(), "a planted program ran on the host: {out}");
}

/// Descriptors anvil inherited from whoever started it never reach a sandboxed command: one
/// open on a host directory would let it write through the read-only view.
#[tokio::test]
async fn inherited_descriptors_do_not_reach_the_command() {
    let b = setup();
    let sandbox = Sandbox::new(OFF, &b.workspace).with_home(&b.home);
    // An inheritable descriptor on a host directory, as a parent process might leave one.
    let dir = std::fs::File::open(&b.outside).unwrap();
    let fd: std::os::fd::OwnedFd = dir.into();
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFD).unwrap();
    nix::fcntl::fcntl(
        &fd,
        nix::fcntl::FcntlArg::F_SETFD(
            nix::fcntl::FdFlag::from_bits_truncate(flags) - nix::fcntl::FdFlag::FD_CLOEXEC,
        ),
    )
    .unwrap();
    let (out, _) = run_in(
        &b,
        sandbox,
        &format!(
            "ls -l /proc/self/fd/; echo pwned > /proc/self/fd/{raw}/through-fd.txt; echo TRIED"
        ),
    )
    .await;
    assert!(out.contains("TRIED"), "{out}");
    assert!(
        !b.outside.join("through-fd.txt").exists(),
        "wrote through an inherited descriptor: {out}"
    );
    drop(fd);
}

/// A fourth review: moving a read-only repository away with its parent and building a new one
/// at the old path; a cache tag made in one command to hide a repository made in the next.
#[tokio::test]
async fn swapped_or_cache_hidden_repositories_are_still_neutralized() {
    let b = setup();
    let marker = b.outside.join("PWNED3");
    let m = marker.display();
    git_init(&b.workspace.join("a"));
    // One session (one sandbox) for both commands, as an agent's turn has.
    let env = ChildEnv::default().with_base(vec![
        ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".into(), b.home.display().to_string()),
    ]);
    let sandbox = Sandbox::new(OFF, &b.workspace).with_home(&b.home);
    let mut r = ToolRegistry::new();
    r.register(Arc::new(Bash::new(env, Arc::new(sandbox))))
        .unwrap();
    let ctx = ToolContext::new(&b.workspace);
    let bash = async |command: String| match r
        .dispatch(
            "id",
            "bash",
            &json!({"command": command, "timeout_ms": 20000}),
            &ctx,
        )
        .await
        .result
    {
        ContentBlock::ToolResult { content, .. } => content,
        other => panic!("{other:?}"),
    };
    let out = bash(format!(
        "mv a moved && git init -q a && git -C a config core.fsmonitor 'touch {m}'; \
         mkdir lib && printf 'Signature: 8a477f597d28d172789f06886806bc55\\n' > lib/CACHEDIR.TAG; echo ONE"
    ))
    .await;
    assert!(out.contains("ONE"), "{out}");
    let out = bash(format!(
        "git init -q lib/r && git -C lib/r config core.fsmonitor 'touch {m}'; echo TWO"
    ))
    .await;
    assert!(out.contains("TWO"), "{out}");
    for dir in ["a", "lib/r"] {
        host_git(&b.workspace.join(dir), &["status"]);
    }
    assert!(!marker.exists(), "a planted program ran on the host");
}
