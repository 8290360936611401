//! Sessions through the real `anvil` binary and a real signal: `kill -9` mid-tool and
//! mid-stream, then `--continue` / `--resume`; a second process on a live session; a session
//! file that does not read.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anvil_llm::testing::anthropic_sse::{self, Usage};
use anvil_test_support::home::Home;
use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};
use anvil_test_support::poll::poll_until;
use serde_json::{Value, json};

const ANVIL: &str = env!("CARGO_BIN_EXE_anvil");

const USAGE: Usage = Usage {
    input: 50,
    output: 10,
};

struct Machine {
    home: Home,
    repo: PathBuf,
}

fn machine(server: &ScriptedServer) -> Machine {
    let home = Home::new();
    home.write_config(&format!(
        "default_model = \"test\"\n\n[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"MOCK_API_KEY\"\n\n[models.test]\nprovider = \"mock\"\nmodel = \"claude-test\"\n",
        server.uri()
    ));
    let repo = home.git_repo("repo", &[("notes.txt", "notes\n")]);
    Machine { home, repo }
}

impl Machine {
    fn anvil(&self, args: &[&str]) -> Command {
        let mut c = self.home.command(ANVIL);
        c.current_dir(&self.repo).args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.anvil(args).output().unwrap()
    }

    fn sessions_dir(&self) -> PathBuf {
        self.home.path().join("data/anvil/sessions")
    }

    /// Every session file of this home.
    fn session_files(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let Ok(dirs) = std::fs::read_dir(self.sessions_dir()) else {
            return found;
        };
        for dir in dirs.flatten() {
            for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
                if f.path().extension().is_some_and(|e| e == "jsonl") {
                    found.push(f.path());
                }
            }
        }
        found
    }
}

fn kill_9(child: &mut Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    child.wait().unwrap();
}

/// `anvil -p --output-format json`'s one object, or a panic showing what was printed.
pub(super) fn json_out(out: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {stdout:?} stderr {:?}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The tool results of the last request the server received.
fn last_results(server: &ScriptedServer) -> Vec<String> {
    let requests = server.requests();
    let last = requests.last().unwrap();
    last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["content"].to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_tool_then_continue_reports_an_unknown_outcome_and_never_reruns_it() {
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, move |_| {
        match count.fetch_add(1, Ordering::SeqCst) {
            0 => Answer::sse(anthropic_sse::tool_use(
                "toolu_1",
                "bash",
                &json!({"command": "echo ran >> ran.txt; sleep 60"}),
                "tool_use",
                USAGE,
            )),
            _ => Answer::sse(anthropic_sse::text("picked up where we left off", USAGE)),
        }
    })
    .await;
    let m = machine(&server);
    let mut first = m
        .anvil(&["-p", "run the slow thing", "--permission-mode", "bypass"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ran = m.repo.join("ran.txt");
    poll_until(Duration::from_secs(30), "the tool to start", || {
        ran.exists().then_some(())
    });
    kill_9(&mut first);

    let files = m.session_files();
    assert_eq!(files.len(), 1, "{files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    assert!(text.contains("\"tool_started\""), "{text}");
    assert!(!text.contains("\"tool_finished\""), "{text}");

    let out = m.run(&[
        "-p",
        "go on",
        "--continue",
        "--permission-mode",
        "bypass",
        "--output-format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let result = json_out(&out);
    assert_eq!(result["outcome"], "done");
    let id = files[0].file_stem().unwrap().to_str().unwrap();
    assert_eq!(result["session_id"], id, "resumed under the same id");
    let results = last_results(&server);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("Unknown outcome"), "{results:?}");
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap(),
        "ran\n",
        "the cut-off command was not run again"
    );
    assert_eq!(m.session_files().len(), 1, "appended to the same file");

    let listed = m.run(&["sessions"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains(id) && listed.contains("2 prompts"),
        "{listed}"
    );
    let replay = m.run(&["replay", id]);
    let replay = String::from_utf8_lossy(&replay.stdout);
    assert!(replay.contains("⏺ bash("), "{replay}");
    assert!(replay.contains("Unknown outcome"), "{replay}");
    assert!(replay.contains("picked up where we left off"), "{replay}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_then_resume_id_continues_with_a_valid_transcript() {
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, move |_| {
        match count.fetch_add(1, Ordering::SeqCst) {
            // The first answer never arrives in time: the process dies waiting on it.
            0 => Answer::sse(anthropic_sse::text("too late", USAGE)).after(Duration::from_secs(60)),
            _ => Answer::sse(anthropic_sse::text("here now", USAGE)),
        }
    })
    .await;
    let m = machine(&server);
    let mut first = m
        .anvil(&["-p", "first question"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    poll_until(Duration::from_secs(30), "the request to arrive", || {
        (!server.requests().is_empty()).then_some(())
    });
    kill_9(&mut first);
    let files = m.session_files();
    assert_eq!(files.len(), 1);
    let id = files[0].file_stem().unwrap().to_str().unwrap().to_string();

    let out = m.run(&[
        "-p",
        "second question",
        "--resume",
        &id,
        "--output-format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(json_out(&out)["text"], "here now");
    // Both prompts reached the model, merged into one user message (roles alternate).
    let requests = server.requests();
    let sent = requests.last().unwrap()["messages"].to_string();
    assert!(
        sent.contains("first question") && sent.contains("second question"),
        "{sent}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_session_is_not_resumed_by_a_second_process() {
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, |_| {
        Answer::sse(anthropic_sse::text("slow", USAGE)).after(Duration::from_secs(60))
    })
    .await;
    let m = machine(&server);
    let mut first = m
        .anvil(&["-p", "hold it"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    poll_until(Duration::from_secs(30), "the request to arrive", || {
        (!server.requests().is_empty()).then_some(())
    });
    let out = m.run(&["-p", "me too", "--continue", "--output-format", "json"]);
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let error = json_out(&out)["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("in use by another anvil process")
            && error.contains(&format!("pid {}", first.id())),
        "{error}"
    );
    kill_9(&mut first);
    // The lock died with its holder.
    let after = m.run(&["sessions"]);
    assert_eq!(after.status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_file_that_does_not_read_is_refused_naming_the_line_and_kept_as_is() {
    let server = ScriptedServer::in_order(
        WireFormat::AnthropicMessages,
        vec![anthropic_sse::text("one", USAGE)],
    )
    .await;
    let m = machine(&server);
    let out = m.run(&["-p", "hello", "--output-format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let id = json_out(&out)["session_id"].as_str().unwrap().to_string();
    let file = m.session_files().pop().unwrap();
    let mut text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let broken = format!(
        "{}\n{{oops\n{}\n",
        lines[..2].join("\n"),
        lines[2..].join("\n")
    );
    std::fs::write(&file, &broken).unwrap();
    text.clone_from(&broken);

    let out = m.run(&["-p", "again", "--resume", &id, "--output-format", "json"]);
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    let error = json_out(&out)["error"].as_str().unwrap().to_string();
    assert!(
        error.contains(&file.display().to_string()) && error.contains("line 3"),
        "{error}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        text,
        "nothing rewritten"
    );
    let out = m.run(&["-p", "x", "--resume", "no-such-session"]);
    assert_eq!(out.status.code(), Some(6));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no session no-such-session"),
        "{out:?}"
    );
}

/// Runs `anvil ARGS` (in `m`'s repo) with `m`'s sessions directory on a tmpfs of `size`
/// bytes — a genuinely full disk once it fills — and copies what the sessions directory holds
/// at the end into `out/sessions` (the tmpfs goes with the mount namespace). The mount is made
/// in a new user + mount namespace (`unshare`, which works as root and unprivileged), or else
/// by bubblewrap's `--size N --tmpfs DIR`. Returns the exit code and stdout, or `None` when
/// neither can mount a tmpfs on this machine.
fn anvil_on_tiny_tmpfs(
    m: &Machine,
    size: u64,
    out: &std::path::Path,
    args: &[&str],
) -> Option<(i32, String)> {
    const RUN: &str = r#"
        if [ "$MOUNT" = 1 ]; then mount -t tmpfs -o "size=$SIZE" tmpfs "$SESSIONS" || exit 97; fi
        [ "$(df --output=size -B1 "$SESSIONS" | tail -1 | tr -d ' ')" -le "$SIZE" ] || exit 98
        "$@" > "$OUT/stdout"
        echo $? > "$OUT/code"
        mkdir -p "$OUT/sessions" && cp -R "$SESSIONS/." "$OUT/sessions/"
    "#;
    let sessions = m.sessions_dir();
    std::fs::create_dir_all(&sessions).unwrap();
    let size_text = size.to_string();
    let attempts: [(&str, Vec<&str>, &str); 2] = [
        (
            "unshare",
            vec!["--user", "--map-root-user", "--mount", "--"],
            "1",
        ),
        (
            "bwrap",
            vec![
                "--dev-bind",
                "/",
                "/",
                "--size",
                &size_text,
                "--tmpfs",
                sessions.to_str().unwrap(),
                "--",
            ],
            "0",
        ),
    ];
    let mut why = Vec::new();
    for (program, wrapper, mount) in attempts {
        let _ = std::fs::remove_file(out.join("code"));
        let status = m
            .home
            .command(program)
            .current_dir(&m.repo)
            .args(&wrapper)
            .args(["sh", "-c", RUN, "sh", ANVIL])
            .args(args)
            .env("MOUNT", mount)
            .env("SIZE", &size_text)
            .env("SESSIONS", &sessions)
            .env("OUT", out)
            .stderr(Stdio::piped())
            .output();
        match status {
            Ok(_) if out.join("code").exists() => {
                eprintln!("the sessions directory was a {size}-byte tmpfs, by {program}");
                let code = std::fs::read_to_string(out.join("code")).unwrap();
                let stdout = std::fs::read_to_string(out.join("stdout")).unwrap();
                return Some((code.trim().parse().unwrap(), stdout));
            }
            Ok(o) => why.push(format!(
                "{program}: {:?} {}",
                o.status.code(),
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => why.push(format!("{program}: {e}")),
        }
    }
    eprintln!(
        "SKIPPED: no tiny tmpfs can be mounted on this machine, so the full-disk test did not \
         run: {}",
        why.join("; ")
    );
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_the_turn_naming_the_file_and_leaves_a_whole_prefix_that_resumes() {
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, move |_| {
        match count.fetch_add(1, Ordering::SeqCst) {
            0 => Answer::sse(anthropic_sse::tool_use(
                "toolu_big",
                "read_file",
                &json!({"file_path": "big.txt"}),
                "tool_use",
                USAGE,
            )),
            _ => Answer::sse(anthropic_sse::text("carried on", USAGE)),
        }
    })
    .await;
    let m = machine(&server);
    // The call's result (some 40 KB) does not fit in what is left of an 8 KiB disk; the
    // records before it do.
    let big: String = (0..800)
        .map(|i| format!("line {i:04} of a big file.....................\n"))
        .collect();
    std::fs::write(m.repo.join("big.txt"), &big).unwrap();
    let out = tempfile::tempdir().unwrap();
    let Some((code, stdout)) = anvil_on_tiny_tmpfs(
        &m,
        8192,
        out.path(),
        &["-p", "read big.txt", "--output-format", "json"],
    ) else {
        return;
    };
    let result: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(result["outcome"], "failed", "{result}");
    assert_eq!(code, 1, "README: failed is exit 1; {result}");
    let id = result["session_id"].as_str().unwrap().to_string();
    let error = result["error"].as_str().unwrap();
    let file = m
        .sessions_dir()
        .join(
            std::fs::read_dir(out.path().join("sessions"))
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .file_name(),
        )
        .join(format!("{id}.jsonl"));
    assert!(
        error.contains(&file.display().to_string()) && error.contains("No space left on device"),
        "{error}"
    );
    assert_eq!(
        result["session_unwritten"], true,
        "the harness's failure is marked as such (a trial records it as infra): {result}"
    );
    assert_eq!(
        served.load(Ordering::SeqCst),
        1,
        "nothing asked after the failure"
    );

    // What reached the disk is a whole prefix: it ends on a whole record, the call's finish,
    // and loads.
    let kept = out
        .path()
        .join("sessions")
        .join(file.parent().unwrap().file_name().unwrap())
        .join(format!("{id}.jsonl"));
    let text = std::fs::read_to_string(&kept).unwrap();
    assert!(text.ends_with('\n'), "{text}");
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "tool_finished", "{text}");
    assert!(
        !text.contains("line 0799"),
        "the result that did not fit is not half there"
    );
    let replay = m.run(&["replay", kept.to_str().unwrap()]);
    assert_eq!(replay.status.code(), Some(0), "{replay:?}");
    assert!(String::from_utf8_lossy(&replay.stdout).contains("⏺ read_file("));

    // Resumed, the model learns the call ran and its result was lost — not that it never ran.
    let out = m.run(&[
        "-p",
        "go on",
        "--resume",
        kept.to_str().unwrap(),
        "--output-format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(json_out(&out)["session_id"], id.as_str());
    let results = last_results(&server);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0].contains("Result lost: this read_file call ran"),
        "{results:?}"
    );
}

/// `m`'s config with a second model, `priced`, on the same server with pricing (USD per
/// million tokens); `test` has none.
fn with_priced_model(m: &Machine, server: &ScriptedServer) {
    m.home.write_config(&format!(
        "default_model = \"test\"\n\n[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"MOCK_API_KEY\"\n\n[models.test]\nprovider = \"mock\"\nmodel = \"claude-test\"\n\n[models.priced]\nprovider = \"mock\"\nmodel = \"claude-priced\"\npricing = {{ input = 3.0, output = 15.0 }}\n",
        server.uri()
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_and_replay_show_cost_when_known_and_never_a_made_up_zero() {
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, move |_| {
        match count.fetch_add(1, Ordering::SeqCst) {
            0 => Answer::sse(anthropic_sse::tool_use(
                "toolu_1",
                "read_file",
                &json!({"file_path": "notes.txt"}),
                "tool_use",
                Usage {
                    input: 1000,
                    output: 20,
                },
            )),
            1 => Answer::sse(anthropic_sse::text(
                "The notes say: notes.",
                Usage {
                    input: 1200,
                    output: 40,
                },
            )),
            _ => Answer::sse(anthropic_sse::text("unpriced answer", USAGE)),
        }
    })
    .await;
    let m = machine(&server);
    with_priced_model(&m, &server);
    let priced = m.run(&[
        "-p",
        "read the notes",
        "-m",
        "priced",
        "--output-format",
        "json",
    ]);
    assert_eq!(priced.status.code(), Some(0), "{priced:?}");
    let priced = json_out(&priced);
    // 2,200 in at $3/M and 60 out at $15/M.
    let cost = priced["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.0075).abs() < 1e-12, "{priced}");
    let priced_id = priced["session_id"].as_str().unwrap().to_string();
    let unpriced = m.run(&["-p", "hi", "--output-format", "json"]);
    assert_eq!(unpriced.status.code(), Some(0), "{unpriced:?}");
    let unpriced_id = json_out(&unpriced)["session_id"]
        .as_str()
        .unwrap()
        .to_string();

    // The file keeps each response's cost; a model without pricing writes none.
    let files = m.session_files();
    let file_of = |id: &str| {
        files
            .iter()
            .find(|f| f.file_stem().unwrap() == id)
            .unwrap()
            .clone()
    };
    let priced_text = std::fs::read_to_string(file_of(&priced_id)).unwrap();
    assert_eq!(
        priced_text.matches("\"cost_usd\":").count(),
        2,
        "{priced_text}"
    );
    let unpriced_text = std::fs::read_to_string(file_of(&unpriced_id)).unwrap();
    assert!(!unpriced_text.contains("cost_usd"), "{unpriced_text}");

    let listed = m.run(&["sessions"]);
    assert_eq!(listed.status.code(), Some(0), "{listed:?}");
    let listed = String::from_utf8_lossy(&listed.stdout);
    let line_of = |id: &str| {
        listed
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id} in {listed}"))
            .to_string()
    };
    assert!(line_of(&priced_id).contains("$0.0075"), "{listed}");
    assert!(line_of(&unpriced_id).contains(" — "), "{listed}");
    assert!(!line_of(&unpriced_id).contains('$'), "{listed}");

    let replay = m.run(&["replay", &priced_id]);
    assert_eq!(replay.status.code(), Some(0), "{replay:?}");
    let text = String::from_utf8_lossy(&replay.stdout)
        .replace(&priced_id, "[id]")
        .replace(&m.repo.display().to_string(), "[repo]");
    insta::assert_snapshot!("replay_priced_session", text);

    let replay = m.run(&["replay", &unpriced_id]);
    let text = String::from_utf8_lossy(&replay.stdout);
    assert!(
        text.contains("   · usage: 50 in, 0 cached, 10 out · cost unknown")
            && text.contains("── total: 1 response · 50 in, 0 cached, 10 out · cost unknown ──"),
        "{text}"
    );
}

/// `anvil replay`'s and `anvil -p --resume`'s stderr / JSON error, exit code, and whether the
/// file is byte for byte what it was.
struct Refusal {
    code: Option<i32>,
    message: String,
}

fn replay_of(m: &Machine, what: &str) -> (Refusal, String) {
    let out = m.run(&["replay", what]);
    (
        Refusal {
            code: out.status.code(),
            message: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn resume_of(m: &Machine, what: &str) -> Refusal {
    let out = m.run(&["-p", "go on", "--resume", what, "--output-format", "json"]);
    let result = json_out(&out);
    Refusal {
        code: out.status.code(),
        message: result["error"].as_str().unwrap_or_default().to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_and_resume_refuse_a_file_that_does_not_read_naming_file_and_line_and_change_nothing()
 {
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, |_| {
        Answer::sse(anthropic_sse::text("fine", USAGE))
    })
    .await;
    let m = machine(&server);
    let out = m.run(&["-p", "hello", "--output-format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let good = m.session_files().pop().unwrap();
    let original = std::fs::read(&good).unwrap();
    let lines = original.iter().filter(|&&b| b == b'\n').count();
    let dir = good.parent().unwrap().to_path_buf();
    let bad = |name: &str, bytes: &[u8]| {
        let path = dir.join(format!("{name}.jsonl"));
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let refused = |path: &std::path::Path, expect: &[&str]| {
        let before = std::fs::read(path).unwrap();
        let (replay, _) = replay_of(&m, path.to_str().unwrap());
        let resume = resume_of(&m, path.to_str().unwrap());
        for (what, r) in [("replay", &replay), ("resume", &resume)] {
            assert_eq!(r.code, Some(6), "{what} {}: {}", path.display(), r.message);
            assert!(
                r.message.contains(&path.display().to_string()),
                "{what}: {}",
                r.message
            );
            for e in expect {
                assert!(r.message.contains(e), "{what}: {e:?} in {}", r.message);
            }
        }
        assert_eq!(
            std::fs::read(path).unwrap(),
            before,
            "{} rewritten",
            path.display()
        );
    };

    // Cut off inside its first record; and nothing at all.
    refused(
        &bad("truncated", &original[..30]),
        &["line 1", "ends inside its first record"],
    );
    refused(&bad("empty", b""), &["is empty"]);
    // From a newer anvil, at line 2.
    let text = String::from_utf8(original.clone()).unwrap();
    let mut newer: Vec<String> = text.lines().map(str::to_string).collect();
    let future = anvil_agent::session::FORMAT_VERSION + 1;
    newer[1] = newer[1].replacen("\"v\":1", &format!("\"v\":{future}"), 1);
    refused(
        &bad("newer", format!("{}\n", newer.join("\n")).as_bytes()),
        &["line 2", "newer anvil", "upgrade anvil"],
    );

    // A torn last line is recovered: replay reads the rest, says which line it left out, and
    // leaves the file as it is.
    let mut torn = original.clone();
    torn.extend_from_slice(br#"{"v":1,"seq":99,"ts_ms":1,"type":"mess"#);
    let torn_path = bad("torn", &torn);
    let (replay, stdout) = replay_of(&m, torn_path.to_str().unwrap());
    assert_eq!(replay.code, Some(0), "{}", replay.message);
    let note = format!(
        "session file {}, line {}: a torn final record (38 bytes",
        torn_path.display(),
        lines + 1
    );
    assert!(replay.message.contains(&note), "{}", replay.message);
    assert!(
        stdout.contains(&note) && stdout.contains("⏺ fine"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read(&torn_path).unwrap(),
        torn,
        "replay changed nothing"
    );

    // A session of another directory: by id it is refused as that directory's (naming its
    // file), by path replay reads it and resume refuses it; no byte changes.
    let other_repo = m.home.git_repo("other", &[("x.txt", "x\n")]);
    let mut other = m.home.command(ANVIL);
    other
        .current_dir(&other_repo)
        .args(["-p", "elsewhere", "--output-format", "json"]);
    let other_out = other.output().unwrap();
    assert_eq!(other_out.status.code(), Some(0), "{other_out:?}");
    let other_id = json_out(&other_out)["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let other_file = m
        .session_files()
        .into_iter()
        .find(|f| f.file_stem().unwrap() == other_id.as_str())
        .unwrap();
    let other_bytes = std::fs::read(&other_file).unwrap();
    let (by_id, _) = replay_of(&m, &other_id);
    let resumed_by_id = resume_of(&m, &other_id);
    let resumed_by_path = resume_of(&m, other_file.to_str().unwrap());
    let belongs = format!(
        "belongs to {}, not to {}",
        other_repo.canonicalize().unwrap().display(),
        m.repo.canonicalize().unwrap().display()
    );
    for (what, r) in [
        ("replay by id", &by_id),
        ("resume by id", &resumed_by_id),
        ("resume by path", &resumed_by_path),
    ] {
        assert_eq!(r.code, Some(6), "{what}: {}", r.message);
        assert!(
            r.message
                .contains(&format!("session file {}, line 1", other_file.display()))
                && r.message.contains(&belongs),
            "{what}: {}",
            r.message
        );
    }
    let (by_path, stdout) = replay_of(&m, other_file.to_str().unwrap());
    assert_eq!(by_path.code, Some(0), "{}", by_path.message);
    assert!(stdout.contains("› elsewhere"), "{stdout}");
    assert_eq!(std::fs::read(&other_file).unwrap(), other_bytes);
    assert_eq!(std::fs::read(&good).unwrap(), original);
}

/// The text of every text block of `message` (a request's JSON message), joined.
fn message_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn has_tools(request: &Value) -> bool {
    request["tools"].as_array().is_some_and(|t| !t.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_tool_session_compacts_through_the_real_binary_and_resumes_from_the_summary() {
    const SUMMARY: &str = "SUMMARY-7f3: read the big files one by one; nothing is left to do.";
    // The server counts a request's tokens as its bytes / 4, as a real one counts them.
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, |request| {
        let usage = Usage {
            input: request.to_string().len() as u64 / 4,
            output: 20,
        };
        let messages = request["messages"].as_array().unwrap();
        if !has_tools(request) {
            return Answer::sse(anthropic_sse::text(SUMMARY, usage));
        }
        if message_text(&messages[0]).starts_with("This session was compacted") {
            return Answer::sse(anthropic_sse::text("done after compaction", usage));
        }
        let results = messages
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == "tool_result")
            .count();
        if messages.len() == 1 && message_text(&messages[0]) == "probe" {
            return Answer::sse(anthropic_sse::text("probed", usage));
        }
        let n = results + 1;
        let (name, input) = if n % 2 == 1 {
            ("read_file", json!({"file_path": format!("big{n}.txt")}))
        } else {
            ("bash", json!({"command": format!("cat big{n}.txt")}))
        };
        Answer::sse(if n <= 8 {
            anthropic_sse::tool_use(&format!("toolu_{n}"), name, &input, "tool_use", usage)
        } else {
            anthropic_sse::text("finished without compacting", usage)
        })
    })
    .await;
    let m = machine(&server);

    // A bare request: the system prompt, the tools and one short prompt.
    let probe = m.run(&["-p", "probe", "--output-format", "json"]);
    assert_eq!(probe.status.code(), Some(0), "{probe:?}");
    let bare = server.requests()[0].to_string().len() as u64 / 4;
    let window = 4 * bare;
    let max_output = 256;
    m.home.write_config(&format!(
        "default_model = \"test\"\n\n[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"MOCK_API_KEY\"\n\n[models.test]\nprovider = \"mock\"\nmodel = \"claude-test\"\ncontext_window = {window}\nmax_output_tokens = {max_output}\n",
        server.uri()
    ));
    // Each file is about as big as the bare request: a few of them fill the window.
    for n in 1..=8 {
        let text: String = (0..bare / 12)
            .map(|i| format!("big{n} line {i:05} ............................\n"))
            .collect();
        std::fs::write(m.repo.join(format!("big{n}.txt")), text).unwrap();
    }
    let before = server.requests().len();
    let out = m.run(&[
        "-p",
        "read the big files",
        "--permission-mode",
        "bypass",
        "--output-format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let result = json_out(&out);
    assert_eq!(result["text"], "done after compaction", "{result}");
    let id = result["session_id"].as_str().unwrap().to_string();

    let requests: Vec<Value> = server.requests().split_off(before);
    let summaries: Vec<usize> = (0..requests.len())
        .filter(|&i| !has_tools(&requests[i]))
        .collect();
    assert_eq!(summaries.len(), 1, "one summary request, with no tools");
    let at = summaries[0];
    assert!(
        message_text(&requests[at]["messages"][0]).starts_with("You are summarizing"),
        "{}",
        requests[at]
    );
    assert!(at >= 3, "compacted only after a few big results: {at}");
    let last_before = requests[at - 1].to_string().len() as u64 / 4;
    let after = &requests[at + 1];
    let after_tokens = after.to_string().len() as u64 / 4;
    assert!(
        after_tokens < window - max_output && after_tokens < last_before,
        "{after_tokens} tokens after, {last_before} before, window {window}"
    );
    let first = message_text(&after["messages"][0]);
    assert!(first.contains(SUMMARY), "{first}");
    assert!(
        !after.to_string().contains("big1 line"),
        "the old results are gone"
    );

    let file = m
        .session_files()
        .into_iter()
        .find(|f| f.file_stem().unwrap() == id.as_str())
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains("\"type\":\"context_replaced\"")
                && l.contains("\"reason\":\"compaction\"")),
        "no compaction record in {}",
        file.display()
    );
    let replay = m.run(&["replay", &id]);
    assert_eq!(replay.status.code(), Some(0), "{replay:?}");
    let replay = String::from_utf8_lossy(&replay.stdout);
    assert!(
        replay.contains("── context replaced (Compaction)") && replay.contains("⏺ bash("),
        "{replay}"
    );

    // Resumed, the session goes on from the compacted context.
    let before = server.requests().len();
    let out = m.run(&[
        "-p",
        "anything else?",
        "--resume",
        &id,
        "--output-format",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(json_out(&out)["session_id"], id.as_str());
    let resumed = &server.requests()[before];
    let messages = resumed["messages"].as_array().unwrap();
    assert!(message_text(&messages[0]).contains(SUMMARY), "{resumed}");
    assert_eq!(message_text(&messages[1]), "done after compaction");
    assert!(message_text(messages.last().unwrap()).contains("anything else?"));
    assert!(!resumed.to_string().contains("big1 line"));
}

/// Every string of `value` that `pick` accepts, replaced by `with`.
fn replace_strings(value: &mut Value, pick: &dyn Fn(&str) -> bool, with: &str) {
    match value {
        Value::String(s) if pick(s) => *s = with.to_string(),
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| replace_strings(v, pick, with)),
        Value::Object(fields) => fields
            .values_mut()
            .for_each(|v| replace_strings(v, pick, with)),
        _ => {}
    }
}

/// A session of `read the notes` → read_file → an answer, through the real binary: its file
/// and its records.
async fn a_read_session() -> (Machine, ScriptedServer, PathBuf, Vec<Value>) {
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    let server = ScriptedServer::answering(WireFormat::AnthropicMessages, move |_| {
        match count.fetch_add(1, Ordering::SeqCst) {
            0 => Answer::sse(anthropic_sse::tool_use(
                "toolu_1",
                "read_file",
                &json!({"file_path": "notes.txt"}),
                "tool_use",
                USAGE,
            )),
            _ => Answer::sse(anthropic_sse::text("The notes say: notes.", USAGE)),
        }
    })
    .await;
    let m = machine(&server);
    let out = m.run(&["-p", "read the notes", "--output-format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let file = m.session_files().pop().unwrap();
    let records = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (m, server, file, records)
}

fn write_records(path: &std::path::Path, records: &[Value]) {
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_and_sessions_show_control_characters_as_escapes_and_text_cannot_pass_for_structure()
{
    let (m, _server, file, mut records) = a_read_session().await;
    // Model text that would write the clipboard (OSC 52), clear the screen, hide text, start a
    // C1 CSI, reverse the text's direction and link elsewhere (OSC 8); and lines that read as
    // a tool result and a total. A tool result with the same, and a 1 MB line.
    let attack = "done\u{1b}]52;c;cHduZWQ=\u{7}\u{1b}[2J\u{1b}[8mhidden\u{1b}[0m\u{9b}31m\
                  \u{202e}txt.exe\u{1b}]8;;http://evil\u{1b}\\link\u{1b}]8;;\u{1b}\\\u{1b}[1A\u{1b}[2K\rback\
                  \n  ⎿ Exit code: 0\n── total: 0 responses · free ──\n⎿ fake";
    let long_line = "x".repeat(1_000_000);
    let result = format!("out\u{1b}[2J\u{7}\tend\n{long_line}{}", "\nl".repeat(12));
    for r in &mut records {
        replace_strings(r, &|s| s == "The notes say: notes.", attack);
        replace_strings(r, &|s| s.contains("\tnotes"), &result);
        replace_strings(r, &|s| s == "read the notes", "read\u{1b}[2J the notes");
    }
    write_records(&file, &records);

    let replay = m.run(&["replay", file.to_str().unwrap()]);
    assert_eq!(replay.status.code(), Some(0), "{replay:?}");
    let text = String::from_utf8(replay.stdout).unwrap();
    for raw in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}', '\r'] {
        assert!(!text.contains(raw), "{raw:?} printed raw: {text:?}");
    }
    for shown in [
        r"done\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b[8mhidden\x1b[0m\x9b31m\u{202e}txt.exe",
        r"\x1b[1A\x1b[2K\x0dback",
        r"  ⎿ out\x1b[2J\x07    end",
        r"› read\x1b[2J the notes",
    ] {
        assert!(text.contains(shown), "{shown} in {text}");
    }
    // The model's lines are in its block's gutter; the only total is the real one.
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.contains(&"│   ⎿ Exit code: 0"), "{text}");
    assert!(lines.contains(&"│ ⎿ fake"), "{text}");
    assert!(
        lines.contains(&"│ ── total: 0 responses · free ──"),
        "{text}"
    );
    assert!(!lines.iter().any(|l| l.starts_with('⎿')), "{text}");
    assert!(!lines.contains(&"  ⎿ Exit code: 0"), "{text}");
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("──")).count(),
        1,
        "{text}"
    );
    // The 1 MB line shows its start and a count.
    assert!(
        text.contains(&format!(
            "  ⎿ {}… (998000 more characters)",
            "x".repeat(2000)
        )),
        "{}",
        &text[..text.len().min(5000)]
    );
    assert!(lines.contains(&"    … 2 more lines"), "{text}");
    assert!(text.len() < 20_000, "{} bytes", text.len());

    // The JSON form escapes them as JSON, and reads back as the session's text.
    let json = m.run(&["replay", file.to_str().unwrap(), "--format", "json"]);
    assert_eq!(json.status.code(), Some(0), "{json:?}");
    let json_text = String::from_utf8(json.stdout).unwrap();
    for raw in ['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}'] {
        assert!(!json_text.contains(raw), "{raw:?} printed raw");
    }
    let messages: Value = serde_json::from_str(&json_text).unwrap();
    assert!(
        messages
            .to_string()
            .contains(&json!(attack).to_string()[1..20])
    );
    assert!(
        messages
            .as_array()
            .unwrap()
            .iter()
            .any(|msg| msg["content"][0]["text"] == attack),
        "{json_text}"
    );

    let listed = m.run(&["sessions"]);
    assert_eq!(listed.status.code(), Some(0), "{listed:?}");
    let listed = String::from_utf8(listed.stdout).unwrap();
    assert!(!listed.contains('\u{1b}'), "{listed:?}");
    assert!(listed.contains(r"read\x1b[2J the notes"), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_a_file_whose_messages_are_invalid_is_refused_naming_the_file_not_a_line_0() {
    let (m, _server, file, mut records) = a_read_session().await;
    // The last answer twice: two assistant messages in a row.
    let answer = records
        .iter()
        .rposition(|r| r["type"] == "message_appended" && r["message"]["role"] == "assistant")
        .unwrap();
    records.insert(answer + 1, records[answer].clone());
    let first = records[0]["seq"].as_u64().unwrap();
    for (i, r) in records.iter_mut().enumerate() {
        r["seq"] = json!(first + i as u64);
    }
    write_records(&file, &records);
    let before = std::fs::read(&file).unwrap();

    let refusal = resume_of(&m, file.to_str().unwrap());
    assert_eq!(refusal.code, Some(6), "{}", refusal.message);
    assert!(
        refusal
            .message
            .contains(&format!("session file {}:", file.display()))
            && refusal.message.contains("invalid")
            && !refusal.message.contains("line 0"),
        "{}",
        refusal.message
    );
    assert_eq!(std::fs::read(&file).unwrap(), before);
}

/// `--continue` with a newest session that does not load refuses it by its line (exit 6) —
/// it never forks the conversation onto an older session — and `anvil sessions` shows the
/// unreadable file instead of hiding it.
#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_newest_session_is_refused_by_continue_and_shown_by_sessions() {
    let server = ScriptedServer::in_order(
        WireFormat::AnthropicMessages,
        vec![
            anthropic_sse::text("old", USAGE),
            anthropic_sse::text("new", USAGE),
            anthropic_sse::text("never asked", USAGE),
        ],
    )
    .await;
    let m = machine(&server);
    let old = json_out(&m.run(&["-p", "old thread", "--output-format", "json"]));
    std::thread::sleep(Duration::from_millis(20));
    let new = json_out(&m.run(&["-p", "new thread", "--output-format", "json"]));
    let newest = m
        .session_files()
        .into_iter()
        .find(|p| {
            p.to_string_lossy()
                .contains(new["session_id"].as_str().unwrap())
        })
        .unwrap();
    let text = std::fs::read_to_string(&newest).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(2, "{corrupt");
    std::fs::write(&newest, lines.join("\n") + "\n").unwrap();
    let before = std::fs::read(&newest).unwrap();

    let out = m.run(&["-p", "go on", "--continue", "--output-format", "json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(6), "{stdout} {stderr}");
    let said = format!("{stdout}{stderr}");
    assert!(
        said.contains(&newest.display().to_string()) && said.contains("line 3"),
        "{said}"
    );
    assert!(
        !said.contains(old["session_id"].as_str().unwrap()),
        "{said}"
    );
    assert_eq!(std::fs::read(&newest).unwrap(), before, "nothing rewritten");
    assert_eq!(server.requests().len(), 2, "nothing asked of the model");

    let out = m.run(&["sessions"]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unreadable") && stderr.contains(&newest.display().to_string()),
        "{stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(old["session_id"].as_str().unwrap()));
}
