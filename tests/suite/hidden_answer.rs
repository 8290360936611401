//! The answer stays hidden, tried from inside a real trial: the scripted model's first step is
//! a bash command that hunts for the task's solution, its protected tests, other trials'
//! workspaces and the queue's files (`find /`, `cat`, `ls` of their real paths). The test
//! reads what the command printed from the tool result the agent sent back to the model.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::process::{Command, Stdio};

use anvil_test_support::bins;
use anvil_test_support::sweep as support;

#[tokio::test(flavor = "multi_thread")]
async fn a_trial_cannot_find_the_answer_from_inside() {
    // Not under /tmp: every sandbox has a private /tmp, which would hide it whatever the view.
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let h = home.path();
    // The tasks live in a git checkout under HOME, and PATH has a directory inside it (as a
    // worker running a freshly built anvil would): neither the checkout, its history nor the
    // tasks beside t1 may show.
    let checkout = h.join("anvil");
    let tasks = checkout.join("evals/tasks");
    support::task(&tasks, "t1");
    support::task(&tasks, "t2-sibling");
    let bin = checkout.join("target/debug");
    std::fs::create_dir_all(&bin).unwrap();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(&checkout)
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "tasks"]);
    let workspaces = h.join("trials");
    let data = h.join("data");
    // Another trial's workspace, as it would be mid-sweep, with the answer in it.
    let sibling = workspaces.join("p1.t1-good-0-a1-xyz/workspace");
    std::fs::create_dir_all(&sibling).unwrap();
    std::fs::write(sibling.join("answer.txt"), "42\n").unwrap();
    let probe = format!(
        "echo FIND-START; find / -name 'test_answer.py' -not -path '/proc/*' 2>/dev/null; \
         find / -name 'answer.txt' -not -path '/proc/*' 2>/dev/null; \
         find / -name 'queue.db*' -not -path '/proc/*' 2>/dev/null; echo FIND-END; \
         cat {solution} && echo READ-SOLUTION; cat {sibling} && echo READ-SIBLING; \
         ls {data} && echo LISTED-DATA; ls {tasks} && echo LISTED-TASKS; \
         git -c safe.directory='*' -C {checkout} show HEAD:evals/tasks/t1/solution/answer.txt && echo READ-GIT; \
         ls {checkout}/evals && echo LISTED-CHECKOUT; echo ARGV; tr '\\0' '\\n' < /proc/1/cmdline | head -3; echo PROBE-DONE",
        solution = tasks.join("t1/solution/answer.txt").display(),
        sibling = sibling.join("answer.txt").display(),
        data = data.display(),
        tasks = tasks.display(),
        checkout = checkout.display(),
    );
    let (server, seen) = support::prober(probe).await;
    let cfg = h.join("cfg/anvil");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("config.toml"), support::config(&server)).unwrap();
    let out = Command::new(bins::built("anvil-evals"))
        .args(["run", "--tasks"])
        .arg(tasks.join("*"))
        .args(["--models", "good", "--trials", "1", "--sweep", "hunt"])
        .arg("--queue")
        .arg(data.join("queue.db"))
        .arg("--workspaces")
        .arg(&workspaces)
        .env_clear()
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("HOME", h)
        .env("XDG_CONFIG_HOME", h.join("cfg"))
        .env("XDG_DATA_HOME", &data)
        .env("TMPDIR", h)
        .env("MOCK_API_KEY", "sk-mock-key-123")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "the probe ran once per task");
    for result in seen.iter() {
        assert!(
            result.contains("FIND-START") && result.contains("PROBE-DONE"),
            "the probe ran to its end: {result}"
        );
        // stderr names the paths it could not open; stdout is what the command found.
        let stdout = result.split("stderr:").next().unwrap();
        assert!(
            stdout.contains("FIND-START\\nFIND-END"),
            "find / found something: {result}"
        );
        for leak in [
            "test_answer.py",
            "answer.txt",
            "queue.db",
            "READ-SOLUTION",
            "READ-SIBLING",
            "LISTED-DATA",
            "LISTED-TASKS",
            "READ-GIT",
            "LISTED-CHECKOUT",
            "p1.t1-good",
        ] {
            assert!(!stdout.contains(leak), "the trial saw {leak}: {result}");
        }
    }
}

/// Other trials' transcripts stay hidden too: the sweep's artifact directory holds every trial
/// of the task, a passing one's among them. Here the sweep is started (`--detach`) with
/// `--workspaces` inside a directory on PATH, which a trial's sandbox shows, and then run by
/// `run` with other `--workspaces`: the artifact directory recorded with the sweep is neither
/// the running worker's workspaces root nor under its data dir, so only hiding the artifact
/// directory itself keeps it out of sight. Each trial's probe lists it, reads the transcripts
/// in it and hunts for them with `find /`, through bash, and gets nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_trial_cannot_read_the_sweeps_transcripts() {
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let h = home.path();
    let tasks = h.join("tasks");
    support::task(&tasks, "t1");
    let bin = h.join("tools/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let started_with = bin.join("ws");
    let artifacts = started_with.join("sweeps/peek");
    let probe = format!(
        "echo LS-START; ls -R {a}; echo LS-END; cat {a}/t1/good/0.jsonl && echo READ-0; \
         cat {a}/t1/good/1.jsonl && echo READ-1; echo FIND-START; \
         find / \\( -name '0.jsonl' -o -name '1.jsonl' \\) -path '*/{unique}/*' -not -path '/proc/*' 2>/dev/null; \
         echo FIND-END; echo PROBE-DONE",
        a = artifacts.display(),
        unique = unique_name(h),
    );
    let (server, seen) = support::prober(probe).await;
    let cfg = h.join("cfg/anvil");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("config.toml"), support::config(&server)).unwrap();
    let evals = |args: &[&str], workspaces: &std::path::Path| {
        let out = Command::new(bins::built("anvil-evals"))
            .args(args)
            .arg("--queue")
            .arg(h.join("data/queue.db"))
            .arg("--workspaces")
            .arg(workspaces)
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env("HOME", h)
            .env("XDG_CONFIG_HOME", h.join("cfg"))
            .env("XDG_DATA_HOME", h.join("data"))
            .env("TMPDIR", h)
            .env("MOCK_API_KEY", "sk-mock-key-123")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let text = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let tasks_arg = tasks.join("*").display().to_string();
    let sweep = [
        "run", "--tasks", &tasks_arg, "--models", "good", "--trials", "2", "--sweep", "peek",
    ];
    let (code, text) = evals(&[&sweep[..], &["--detach"]].concat(), &started_with);
    assert_eq!(code, Some(0), "{text}");
    let (code, text) = evals(&sweep, &h.join("trials"));
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(&format!("transcripts: {}", artifacts.display())),
        "the sweep keeps the artifact directory it was started with: {text}"
    );
    // The transcripts are there, outside the sandbox.
    for trial in ["0", "1"] {
        let transcript = artifacts.join(format!("t1/good/{trial}.jsonl"));
        assert!(transcript.is_file(), "{}", transcript.display());
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "the probe ran once per trial");
    for result in seen.iter() {
        assert!(
            result.contains("LS-START") && result.contains("PROBE-DONE"),
            "the probe ran to its end: {result}"
        );
        let stdout = result.split("stderr:").next().unwrap();
        let listed = stdout
            .split("LS-START")
            .nth(1)
            .and_then(|s| s.split("LS-END").next())
            .unwrap();
        assert!(
            !listed.contains("jsonl") && !listed.contains("good"),
            "the trial listed the transcripts: {result}"
        );
        assert!(
            stdout.contains("FIND-START\\nFIND-END"),
            "find / found a transcript: {result}"
        );
        for leak in ["READ-0", "READ-1", "session_started"] {
            assert!(!stdout.contains(leak), "the trial saw {leak}: {result}");
        }
    }
}

/// An earlier sweep's transcripts stay hidden too, wherever they were put: sweep `before`
/// kept them under a directory on PATH (which a trial's confined view shows); sweep `after`,
/// started with another `--workspaces`, runs trials whose probe hunts for them. Only the queue
/// knows where `before` put them, so the worker must hide every artifact directory the queue
/// records, not only the running sweep's.
#[tokio::test(flavor = "multi_thread")]
async fn a_trial_cannot_read_an_earlier_sweeps_transcripts() {
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let h = home.path();
    let tasks = h.join("tasks");
    support::task(&tasks, "t1");
    let bin = h.join("tools/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let earlier_root = bin.join("ws");
    let earlier = earlier_root.join("sweeps/before");
    let probe = format!(
        "echo LS-START; ls -R {a}; echo LS-END; cat {a}/t1/good/0.jsonl && echo READ-0; \
         echo FIND-START; find / -name '0.jsonl' -path '*/{unique}/*' -not -path '/proc/*' 2>/dev/null; \
         echo FIND-END; echo PROBE-DONE",
        a = earlier.display(),
        unique = unique_name(h),
    );
    let (server, seen) = support::prober(probe).await;
    let cfg = h.join("cfg/anvil");
    std::fs::create_dir_all(&cfg).unwrap();
    std::fs::write(cfg.join("config.toml"), support::config(&server)).unwrap();
    let tasks_arg = tasks.join("*").display().to_string();
    let run = |sweep: &str, workspaces: &std::path::Path| {
        let out = Command::new(bins::built("anvil-evals"))
            .args([
                "run", "--tasks", &tasks_arg, "--models", "good", "--trials", "1",
            ])
            .args(["--sweep", sweep])
            .arg("--queue")
            .arg(h.join("data/queue.db"))
            .arg("--workspaces")
            .arg(workspaces)
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env("HOME", h)
            .env("XDG_CONFIG_HOME", h.join("cfg"))
            .env("XDG_DATA_HOME", h.join("data"))
            .env("TMPDIR", h)
            .env("MOCK_API_KEY", "sk-mock-key-123")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run("before", &earlier_root);
    assert!(
        earlier.join("t1/good/0.jsonl").is_file(),
        "the earlier sweep kept its transcript"
    );
    run("after", &h.join("trials"));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2, "the probe ran once per trial");
    assert!(
        !seen[0].contains("sandbox is unavailable"),
        "a trial whose workspaces root is in the confined view still gets its workspace: {}",
        seen[0]
    );
    let result = &seen[1];
    assert!(
        result.contains("PROBE-DONE"),
        "the probe ran to its end: {result}"
    );
    let stdout = result.split("stderr:").next().unwrap();
    let listed = stdout
        .split("LS-START")
        .nth(1)
        .and_then(|s| s.split("LS-END").next())
        .unwrap();
    assert!(
        !listed.contains("jsonl") && !listed.contains("good"),
        "the later sweep's trial listed the earlier sweep's transcripts: {result}"
    );
    assert!(
        stdout.contains("FIND-START\\nFIND-END"),
        "find / found a transcript: {result}"
    );
    for leak in ["READ-0", "session_started"] {
        assert!(!stdout.contains(leak), "the trial saw {leak}: {result}");
    }
}

/// The name of a test's own home directory, unique on the machine: `find /` looks only for
/// the transcripts under it, so a sweep some other program left on the machine (in /opt, say,
/// recorded in a queue this test never sees) is no failure of this test's promise.
fn unique_name(home: &std::path::Path) -> String {
    home.file_name().unwrap().to_string_lossy().into_owned()
}
