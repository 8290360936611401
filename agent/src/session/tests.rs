//! The session store attacked as a crash, a cheat or a second process would: torn and
//! malformed lines, future formats, a second writer, calls cut off mid-run — and replay
//! checked against the live state after every mutation.

use std::path::Path;
use std::sync::Arc;

use anvil_llm::testing::{ScriptedProvider, script};
use anvil_llm::{ContentBlock, Message, Role, Tail, Usage, validate_transcript};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::secrets::Redactor;
use crate::tools::calculator::Calculator;
use crate::{Agent, AgentConfig, EventSink, ToolRegistry, TurnOutcome};

/// A scratch directory on a tmpfs where there is one: these tests check what is written and
/// read back, and a sync there costs nothing (on a busy disk the syncs would dominate).
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap()
}

fn store(dir: &Path) -> SessionStore {
    SessionStore::new(dir.join("sessions"))
}

fn cwd() -> &'static Path {
    Path::new("/work/project")
}

fn append_line(path: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn a_new_session_reloads_to_what_was_written() {
    let dir = scratch();
    let (mut w, _) = store(dir.path()).create(cwd(), "m1", None).unwrap();
    w.append(&Record::MessageAppended {
        message: Message::user_text("hello"),
    })
    .unwrap();
    w.append(&Record::Usage {
        usage: Usage {
            input: 3,
            output: 4,
            cache_read: 0,
            cache_write: 0,
        },
        cost_usd: Some(0.25),
        estimated: false,
    })
    .unwrap();
    let path = w.path().to_path_buf();
    assert_eq!(
        path.file_stem().unwrap().to_str().unwrap(),
        w.id(),
        "the id is the file name"
    );
    drop(w);
    let loaded = load(&path).unwrap();
    assert_eq!(loaded.messages, vec![Message::user_text("hello")]);
    assert_eq!(loaded.state.model, "m1");
    assert_eq!(loaded.state.cwd, "/work/project");
    assert_eq!(loaded.state.usage.output, 4);
    assert_eq!(loaded.state.cost.known(), Some(0.25));
    assert_eq!(loaded.last_seq, 3);
    assert_eq!(loaded.first_prompt.as_deref(), Some("hello"));
}

#[test]
fn a_torn_final_line_is_left_out_and_cut_off_on_resume() {
    let dir = scratch();
    let (mut w, _) = store(dir.path()).create(cwd(), "m", None).unwrap();
    w.append(&Record::MessageAppended {
        message: Message::user_text("one"),
    })
    .unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    let whole = std::fs::metadata(&path).unwrap().len();
    append_line(&path, r#"{"v":1,"seq":3,"ts_ms":1,"type":"message_appen"#);
    let loaded = load(&path).unwrap();
    assert_eq!(loaded.records, 2);
    assert!(loaded.torn_bytes > 0);
    let (mut w, loaded) = SessionWriter::resume(&path, Some(cwd()), None).unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        whole,
        "torn line cut off"
    );
    w.append(&Record::MessageExtended {
        index: 0,
        content: vec![ContentBlock::text("two")],
    })
    .unwrap();
    drop(w);
    let again = load(&path).unwrap();
    assert_eq!(again.last_seq, loaded.last_seq + 1);
    assert_eq!(again.messages[0].content.len(), 2);
}

#[test]
fn a_malformed_interior_line_is_refused_with_its_number() {
    let dir = scratch();
    let (w, _) = store(dir.path()).create(cwd(), "m", None).unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    append_line(&path, "{not json}\n");
    append_line(
        &path,
        r#"{"v":1,"seq":2,"ts_ms":1,"type":"model_changed","model":"x"}"#,
    );
    append_line(&path, "\n");
    let before = std::fs::read(&path).unwrap();
    let err = load(&path).unwrap_err();
    assert!(
        matches!(err, SessionError::Malformed { line: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("line 2"), "{err}");
    let err = SessionWriter::resume(&path, None, None).unwrap_err();
    assert!(matches!(err, SessionError::Malformed { line: 2, .. }));
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing rewritten");
}

#[test]
fn a_newer_format_is_refused_never_half_read() {
    let dir = scratch();
    let (w, _) = store(dir.path()).create(cwd(), "m", None).unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    append_line(
        &path,
        r#"{"v":3,"seq":2,"ts_ms":1,"type":"hologram","beam":true}"#,
    );
    append_line(&path, "\n");
    let err = load(&path).unwrap_err();
    assert!(
        matches!(
            err,
            SessionError::FutureVersion {
                line: 2,
                found: 3,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("newer anvil"), "{err}");
}

#[test]
fn a_gap_in_the_sequence_is_refused() {
    let dir = scratch();
    let (w, _) = store(dir.path()).create(cwd(), "m", None).unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    append_line(
        &path,
        "{\"v\":1,\"seq\":5,\"ts_ms\":1,\"type\":\"model_changed\",\"model\":\"x\"}\n",
    );
    let err = load(&path).unwrap_err();
    assert!(
        matches!(
            err,
            SessionError::Sequence {
                line: 2,
                expected: 2,
                found: 5,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_file_that_does_not_start_with_session_started_is_refused() {
    let dir = scratch();
    let path = dir.path().join("x.jsonl");
    std::fs::write(
        &path,
        "{\"v\":1,\"seq\":1,\"ts_ms\":1,\"type\":\"model_changed\",\"model\":\"x\"}\n",
    )
    .unwrap();
    let err = load(&path).unwrap_err();
    assert!(
        matches!(
            err,
            SessionError::NotStarted {
                line: 1,
                found: "model_changed",
                ..
            }
        ),
        "{err}"
    );
    std::fs::write(&path, "").unwrap();
    let err = load(&path).unwrap_err();
    assert!(matches!(err, SessionError::Empty { .. }), "{err}");
    // Cut off inside its first record: nothing whole to read, and said so.
    std::fs::write(&path, "{\"v\":1,\"seq\":1,\"ts_ms\":1,\"type\":\"sess").unwrap();
    let err = load(&path).unwrap_err();
    assert!(
        matches!(err, SessionError::Truncated { bytes: 37, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("line 1"), "{err}");
}

#[test]
fn a_second_writer_is_refused_naming_the_holder_until_the_first_is_gone() {
    let dir = scratch();
    let (w, _) = store(dir.path()).create(cwd(), "m", None).unwrap();
    let path = w.path().to_path_buf();
    let err = SessionWriter::resume(&path, None, None).unwrap_err();
    match &err {
        SessionError::Locked { pid, .. } => assert_eq!(*pid, Some(std::process::id())),
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("in use by another anvil"), "{err}");
    drop(w);
    SessionWriter::resume(&path, None, None).unwrap();
}

#[test]
fn a_session_at_an_exact_path_is_made_there_and_never_over_an_existing_file() {
    let dir = scratch();
    let path = dir.path().join("sweeps/s1/t1/good/0.jsonl");
    let (mut w, loaded) = SessionWriter::create_at(&path, cwd(), "m", None).unwrap();
    assert_eq!(w.path(), path);
    assert_eq!(loaded.state.id, w.id());
    w.append(&Record::MessageAppended {
        message: Message::user_text("hello"),
    })
    .unwrap();
    drop(w);
    let read = load(&path).unwrap();
    assert_eq!((read.records, read.prompts), (2, 1));
    assert_eq!(read.state.cwd, cwd().to_string_lossy());
    let before = std::fs::read(&path).unwrap();
    let err = SessionWriter::create_at(&path, cwd(), "m", None).unwrap_err();
    assert!(
        matches!(&err, SessionError::Exists { path: p } if *p == path),
        "{err}"
    );
    assert!(err.to_string().contains("0.jsonl already exists"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "left as it was");
}

#[test]
fn a_session_of_another_directory_is_refused() {
    let dir = scratch();
    let (w, _) = store(dir.path()).create(cwd(), "m", None).unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    let err = SessionWriter::resume(&path, Some(Path::new("/elsewhere")), None).unwrap_err();
    assert!(matches!(err, SessionError::OtherDirectory { .. }), "{err}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
    // By id from another directory: refused as that directory's, naming its file.
    let id = path.file_stem().unwrap().to_str().unwrap();
    let err = store(dir.path())
        .find(Path::new("/elsewhere"), id)
        .unwrap_err();
    match &err {
        SessionError::OtherDirectory {
            path: found,
            belongs,
            ..
        } => assert_eq!((found, belongs.as_str()), (&path, "/work/project")),
        other => panic!("{other}"),
    }
    let err = store(dir.path())
        .find(Path::new("/elsewhere"), "no-such-id")
        .unwrap_err();
    assert!(matches!(err, SessionError::NotFound { .. }), "{err}");
}

/// `/dev/full` opened for writing: every write fails with ENOSPC, as a full disk's does.
fn full_disk() -> std::fs::File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap()
}

#[test]
fn a_failed_write_stops_the_writer_so_the_file_stays_a_whole_prefix() {
    let dir = scratch();
    let (mut w, _) = store(dir.path()).create(cwd(), "m", None).unwrap();
    let path = w.path().to_path_buf();
    w.append(&Record::MessageAppended {
        message: Message::user_text("one"),
    })
    .unwrap();
    let before = std::fs::read(&path).unwrap();
    w.write_to(full_disk());
    let err = w
        .append(&Record::MessageAppended {
            message: Message::new(Role::Assistant, vec![ContentBlock::text("a long answer")]),
        })
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&path.display().to_string()) && text.contains("No space left on device"),
        "{text}"
    );
    // The disk has room again; a later, smaller record would fit, and must not land after
    // the missing one.
    w.write_to(
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap(),
    );
    let err = w
        .append(&Record::ModelChanged { model: "m2".into() })
        .unwrap_err();
    assert!(
        matches!(&err, SessionError::StoppedWriting { last_seq: 2, first, .. }
            if first.contains("No space left on device")),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "nothing after the failure"
    );
    let loaded = load(&path).unwrap();
    assert_eq!(loaded.last_seq, 2);
    assert_eq!(loaded.messages, vec![Message::user_text("one")]);
}

#[test]
fn known_secret_values_never_reach_the_file() {
    let dir = scratch();
    let secret = "sk-live-0123456789abcdef";
    let redactor = Arc::new(Redactor::default());
    redactor.register("OPENAI_API_KEY", secret);
    let (mut w, _) = store(dir.path())
        .create(cwd(), "m", Some(Arc::clone(&redactor)))
        .unwrap();
    w.append(&Record::MessageAppended {
        message: Message::user_text(format!("my key is {secret}, \"quoted\"")),
    })
    .unwrap();
    w.append(&Record::ToolStarted {
        call_id: "c1".into(),
        name: "bash".into(),
        arguments: json!({"command": format!("curl -H 'Authorization: {secret}'")}),
    })
    .unwrap();
    // A secret as an argument's name (a model echoing it) is a key, not a value.
    w.append(&Record::ToolStarted {
        call_id: "c2".into(),
        name: "bash".into(),
        arguments: json!({ secret: "1", "command": "true" }),
    })
    .unwrap();
    let text = std::fs::read_to_string(w.path()).unwrap();
    assert!(!text.contains(secret), "{text}");
    assert!(text.contains("[REDACTED:OPENAI_API_KEY]"), "{text}");
    load(w.path()).unwrap();
}

/// Regression: with a redactor (the binary has one whenever an API key is in its environment)
/// records went through a `serde_json::Value` and were written with their keys sorted, so the
/// file's bytes depended on the environment and no line re-encoded to itself.
#[test]
fn redacted_records_are_encoded_as_unredacted_ones_are() {
    let dir = scratch();
    let secret = "sk-live-0123456789abcdef";
    let redactor = Arc::new(Redactor::default());
    redactor.register("OPENAI_API_KEY", secret);
    let signed = Message::new(
        Role::Assistant,
        vec![
            ContentBlock::Reasoning {
                text: "thinking".into(),
                meta: Some(anvil_llm::ProviderMeta::new(
                    "anthropic",
                    json!({"signature": "EuYDCmMIDBgCKkC05Zda4P+Cdk/LQKE+"}),
                )),
            },
            ContentBlock::text(format!("the key was {secret}")),
        ],
    );
    let records = [
        Record::MessageAppended {
            message: Message::user_text("no secret here"),
        },
        Record::MessageAppended { message: signed },
    ];
    let mut files = Vec::new();
    for redactor in [None, Some(Arc::clone(&redactor))] {
        let (mut w, _) = store(dir.path()).create(cwd(), "m", redactor).unwrap();
        for r in &records {
            w.append(r).unwrap();
        }
        files.push(std::fs::read(w.path()).unwrap());
    }
    let lines = |bytes: &[u8]| -> Vec<Vec<u8>> {
        bytes
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    let (plain, redacted) = (lines(&files[0]), lines(&files[1]));
    // A record with no secret in it is written the same either way (but for its time).
    let no_ts = |l: &[u8]| {
        let mut e: Entry = serde_json::from_slice(l).unwrap();
        e.ts_ms = 0;
        e.record
    };
    assert_eq!(no_ts(&plain[1]), no_ts(&redacted[1]));
    assert_eq!(
        String::from_utf8_lossy(&plain[1]).find("\"type\""),
        String::from_utf8_lossy(&redacted[1]).find("\"type\""),
        "same field order"
    );
    // Every line, the redacted one included, re-encodes to its own bytes.
    for line in &redacted {
        let entry: Entry = serde_json::from_slice(line).unwrap();
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&entry).unwrap()).unwrap(),
            String::from_utf8(line.clone()).unwrap()
        );
    }
    let text = String::from_utf8(files[1].clone()).unwrap();
    assert!(!text.contains(secret), "{text}");
    assert!(text.contains("[REDACTED:OPENAI_API_KEY]"), "{text}");
}

#[test]
fn a_listing_reads_only_the_newest_sessions() {
    let dir = scratch();
    let s = store(dir.path());
    let mut paths = Vec::new();
    for i in 0..6 {
        let (mut w, _) = s.create(cwd(), "m", None).unwrap();
        w.append(&Record::MessageAppended {
            message: Message::user_text(format!("session {i}")),
        })
        .unwrap();
        let when = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000 + i);
        let path = w.path().to_path_buf();
        drop(w);
        std::fs::File::options()
            .append(true)
            .open(&path)
            .unwrap()
            .set_modified(when)
            .unwrap();
        paths.push(path);
    }
    // The oldest file is broken: a listing of the newest never reads it.
    std::fs::write(&paths[0], "{not json\n{\"also\": \"not\"}\n").unwrap();
    std::fs::File::options()
        .append(true)
        .open(&paths[0])
        .unwrap()
        .set_modified(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000))
        .unwrap();
    let recent = s.list_recent(cwd(), 3).unwrap();
    let prompts: Vec<&str> = recent
        .sessions
        .iter()
        .map(|x| x.first_prompt.as_str())
        .collect();
    assert_eq!(prompts, ["session 5", "session 4", "session 3"]);
    assert_eq!(recent.older, 3);
    assert!(recent.unreadable.is_empty(), "{:?}", recent.unreadable);
    // Every one, and the broken one named.
    let all = s.list_recent(cwd(), usize::MAX).unwrap();
    assert_eq!(
        (all.sessions.len(), all.older, all.unreadable.len()),
        (5, 0, 1)
    );
}

#[test]
fn sessions_are_listed_newest_first_with_their_first_prompt() {
    let dir = scratch();
    let s = store(dir.path());
    let (mut a, _) = s.create(cwd(), "m", None).unwrap();
    a.append(&Record::MessageAppended {
        message: Message::user_text("first session"),
    })
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (mut b, _) = s.create(cwd(), "m", None).unwrap();
    b.append(&Record::MessageAppended {
        message: Message::user_text("second session"),
    })
    .unwrap();
    let listed = s.list(cwd()).unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].first_prompt, "second session");
    assert_eq!(listed[0].id, b.id());
    assert_eq!(s.latest(cwd()).unwrap().unwrap(), b.path());
    assert!(s.list(Path::new("/other")).unwrap().is_empty());
    assert_ne!(
        s.dir_for(Path::new("/a-b")),
        s.dir_for(Path::new("/a/b")),
        "sanitized names never collide"
    );
}

/// A tiny deterministic generator (xorshift): the property test needs no extra crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random record that applies to `state`/`messages`.
fn random_record(rng: &mut Rng, state: &SessionState, messages: &[Message], n: u64) -> Record {
    loop {
        match rng.below(9) {
            0 | 1 => {
                let role = if rng.below(2) == 0 {
                    Role::User
                } else {
                    Role::Assistant
                };
                return Record::MessageAppended {
                    message: Message::new(role, vec![ContentBlock::text(format!("m{n} ✓"))]),
                };
            }
            2 if !messages.is_empty() => {
                return Record::MessageExtended {
                    index: rng.below(messages.len() as u64) as usize,
                    content: vec![ContentBlock::text(format!("x{n}"))],
                };
            }
            3 => {
                // Clearing and compaction replace the context.
                let keep = rng.below(messages.len() as u64 + 1) as usize;
                let mut kept: Vec<Message> = messages[messages.len() - keep..].to_vec();
                kept.insert(0, Message::user_text(format!("summary {n}")));
                return Record::ContextReplaced {
                    reason: if n.is_multiple_of(2) {
                        ReplaceReason::Compaction
                    } else {
                        ReplaceReason::Clearing
                    },
                    messages: kept,
                };
            }
            4 => {
                return Record::ModelChanged {
                    model: format!("model-{}", rng.below(3)),
                };
            }
            5 => {
                return Record::TodosChanged {
                    todos: (0..rng.below(3))
                        .map(|i| Todo {
                            content: format!("todo {i}"),
                            status: TodoStatus::Pending,
                        })
                        .collect(),
                };
            }
            6 => {
                return Record::ToolStarted {
                    call_id: format!("c{n}"),
                    name: "bash".into(),
                    arguments: json!({"n": n}),
                };
            }
            7 if !state.open_calls.is_empty() => {
                let at = rng.below(state.open_calls.len() as u64) as usize;
                return Record::ToolFinished {
                    call_id: state.open_calls[at].call_id.clone(),
                    is_error: rng.below(2) == 0,
                };
            }
            8 => {
                return Record::Usage {
                    usage: Usage {
                        input: rng.below(100),
                        output: rng.below(100),
                        cache_read: rng.below(10),
                        cache_write: 0,
                    },
                    cost_usd: (rng.below(2) == 0).then(|| rng.below(100) as f64 / 1000.0),
                    estimated: false,
                };
            }
            _ => {}
        }
    }
}

#[test]
fn replaying_the_file_equals_the_live_state_after_every_mutation() {
    for seed in 1..=20u64 {
        let dir = scratch();
        let (mut w, live) = store(dir.path()).create(cwd(), "m", None).unwrap();
        let (mut state, mut messages) = (live.state, live.messages);
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        for n in 0..60 {
            let record = random_record(&mut rng, &state, &messages, n);
            w.append(&record).unwrap();
            state.apply(&mut messages, record).unwrap();
            let loaded = load(w.path()).unwrap();
            assert_eq!(loaded.state, state, "seed {seed}, record {n}");
            assert_eq!(loaded.messages, messages, "seed {seed}, record {n}");
        }
    }
}

fn agent(provider: Arc<ScriptedProvider>) -> Agent {
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Calculator)).unwrap();
    let (sink, _rx) = EventSink::channel(4096);
    Agent::new(
        provider,
        Arc::new(tools),
        AgentConfig {
            model: "scripted".into(),
            ..AgentConfig::default()
        },
        std::env::temp_dir(),
        sink,
    )
}

#[tokio::test]
async fn the_live_agent_and_its_reloaded_file_agree_after_every_turn() {
    let dir = scratch();
    let provider = Arc::new(ScriptedProvider::new(vec![
        script::tool_call("c1", "calculator", json!({"expression": "2+3"})),
        script::text("5"),
        script::tool_calls(&[
            ("c2", "calculator", json!({"expression": "1+1"})),
            ("c3", "calculator", json!({"expression": "2*2"})),
        ]),
        script::text("2 and 4"),
    ]));
    let (w, loaded) = store(dir.path()).create(cwd(), "scripted", None).unwrap();
    let path = w.path().to_path_buf();
    let mut a = agent(provider).with_session(w, loaded).unwrap();
    for prompt in ["add", "more"] {
        let outcome = a
            .run_turn(vec![ContentBlock::text(prompt)], CancellationToken::new())
            .await;
        assert_eq!(outcome, TurnOutcome::Done);
        let loaded = load(&path).unwrap();
        assert_eq!(loaded.messages, a.messages());
        assert_eq!(&loaded.state, a.session());
        assert!(loaded.state.open_calls.is_empty());
    }
    let text = std::fs::read_to_string(&path).unwrap();
    for kind in ["tool_started", "tool_finished", "usage", "message_appended"] {
        assert!(text.contains(&format!("\"type\":\"{kind}\"")), "{kind}");
    }
    // tool_started is written before the result it precedes.
    let started = text.find("\"tool_started\"").unwrap();
    let result = text.find("\"tool_result\"").unwrap();
    assert!(started < result);
}

#[tokio::test]
async fn a_call_cut_off_mid_run_resumes_as_unknown_outcome_and_is_not_rerun() {
    let dir = scratch();
    let s = store(dir.path());
    // What a crash mid-tool leaves: the call asked for, started, never finished; a second call
    // of the same response never started.
    let (mut w, _) = s.create(cwd(), "scripted", None).unwrap();
    let path = w.path().to_path_buf();
    w.append(&Record::MessageAppended {
        message: Message::user_text("run it"),
    })
    .unwrap();
    w.append(&Record::MessageAppended {
        message: Message::new(
            Role::Assistant,
            vec![
                ContentBlock::ToolCall {
                    id: "c1".into(),
                    name: "calculator".into(),
                    arguments: json!({"expression": "1+1"}),
                    meta: None,
                },
                ContentBlock::ToolCall {
                    id: "c2".into(),
                    name: "calculator".into(),
                    arguments: json!({"expression": "2+2"}),
                    meta: None,
                },
            ],
        ),
    })
    .unwrap();
    w.append(&Record::ToolStarted {
        call_id: "c1".into(),
        name: "calculator".into(),
        arguments: json!({"expression": "1+1"}),
    })
    .unwrap();
    drop(w);

    let provider = Arc::new(ScriptedProvider::new(vec![script::text("ok")]));
    let (w, loaded) = SessionWriter::resume(&path, Some(cwd()), None).unwrap();
    let mut a = agent(Arc::clone(&provider))
        .with_session(w, loaded)
        .unwrap();
    validate_transcript(a.messages(), Tail::Complete).unwrap();
    let repaired = a.messages().last().unwrap();
    let texts: Vec<(String, bool)> = repaired
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert!(texts[0].0.starts_with("Unknown outcome"), "{texts:?}");
    assert!(texts[0].1);
    assert!(texts[1].0.starts_with("Not executed"), "{texts:?}");
    assert!(a.session().open_calls.is_empty());

    let outcome = a
        .run_turn(vec![ContentBlock::text("go on")], CancellationToken::new())
        .await;
    assert_eq!(outcome, TurnOutcome::Done);
    // One request, and no tool ran: the model was asked, nothing was repeated.
    assert_eq!(provider.requests().len(), 1);
    let loaded = load(&path).unwrap();
    assert_eq!(loaded.messages, a.messages());
    assert_eq!(loaded.state.open_calls, Vec::new());
    assert_eq!(
        std::fs::read_to_string(&path)
            .unwrap()
            .matches("\"tool_started\"")
            .count(),
        1,
        "the cut-off call was not started again"
    );
}

#[tokio::test]
async fn a_call_that_finished_without_its_result_resumes_as_result_lost_not_as_unrun() {
    let dir = scratch();
    let s = store(dir.path());
    // What a crash (or a full disk) between a call's finish and its result leaves: c1 ran to
    // its end, c2 started and never finished.
    let (mut w, _) = s.create(cwd(), "scripted", None).unwrap();
    let path = w.path().to_path_buf();
    let call = |id: &str| ContentBlock::ToolCall {
        id: id.into(),
        name: "calculator".into(),
        arguments: json!({"expression": "1+1"}),
        meta: None,
    };
    for record in [
        Record::MessageAppended {
            message: Message::user_text("run them"),
        },
        Record::MessageAppended {
            message: Message::new(Role::Assistant, vec![call("c1"), call("c2")]),
        },
        Record::ToolStarted {
            call_id: "c1".into(),
            name: "calculator".into(),
            arguments: json!({"expression": "1+1"}),
        },
        Record::ToolFinished {
            call_id: "c1".into(),
            is_error: false,
        },
        Record::ToolStarted {
            call_id: "c2".into(),
            name: "calculator".into(),
            arguments: json!({"expression": "1+1"}),
        },
    ] {
        w.append(&record).unwrap();
    }
    drop(w);
    let (w, loaded) = SessionWriter::resume(&path, Some(cwd()), None).unwrap();
    assert_eq!(
        loaded
            .state
            .finished_calls
            .iter()
            .map(|c| c.call_id.as_str())
            .collect::<Vec<_>>(),
        ["c1"]
    );
    let provider = Arc::new(ScriptedProvider::new(vec![]));
    let a = agent(provider).with_session(w, loaded).unwrap();
    validate_transcript(a.messages(), Tail::Complete).unwrap();
    let texts: Vec<&str> = a
        .messages()
        .last()
        .unwrap()
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        texts[0].starts_with("Result lost: this calculator call ran"),
        "{texts:?}"
    );
    assert!(texts[1].starts_with("Unknown outcome"), "{texts:?}");
    assert!(a.session().finished_calls.is_empty());
    assert!(a.session().open_calls.is_empty());
    let reloaded = load(&path).unwrap();
    assert_eq!(reloaded.messages, a.messages());
    assert_eq!(&reloaded.state, a.session());
}

#[tokio::test]
async fn a_full_disk_ends_the_turn_as_failed_and_sends_nothing_unrecorded() {
    let dir = scratch();
    let provider = Arc::new(ScriptedProvider::new(vec![script::text("never asked")]));
    let (mut w, loaded) = store(dir.path()).create(cwd(), "scripted", None).unwrap();
    let path = w.path().to_path_buf();
    let before = std::fs::read(&path).unwrap();
    w.write_to(full_disk());
    let mut a = agent(Arc::clone(&provider))
        .with_session(w, loaded)
        .unwrap();
    let outcome = a
        .run_turn(vec![ContentBlock::text("hello")], CancellationToken::new())
        .await;
    let TurnOutcome::Failed {
        error,
        retryable,
        http_status,
        provider_refusal,
    } = &outcome
    else {
        panic!("{outcome:?}")
    };
    assert!(!retryable);
    assert_eq!(*http_status, None, "a full disk is no provider's answer");
    assert_eq!(*provider_refusal, None);
    assert!(
        error.contains(&path.display().to_string()) && error.contains("No space left on device"),
        "{error}"
    );
    assert!(
        provider.requests().is_empty(),
        "no request for a prompt that is not in the session"
    );
    // The next turn fails at once, saying why, and still asks nothing.
    let outcome = a
        .run_turn(vec![ContentBlock::text("again")], CancellationToken::new())
        .await;
    let TurnOutcome::Failed { error, .. } = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(error.contains("not appended to since"), "{error}");
    assert!(provider.requests().is_empty());
    drop(a);
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let loaded = load(&path).unwrap();
    assert_eq!((loaded.last_seq, loaded.messages.len()), (1, 0));
}

#[tokio::test]
async fn merged_user_text_survives_a_restart_exactly_once() {
    let dir = scratch();
    // The first turn fails (no scripted response left), leaving a user message; the next
    // prompt merges into it.
    let provider = Arc::new(ScriptedProvider::new(vec![]));
    let (w, loaded) = store(dir.path()).create(cwd(), "scripted", None).unwrap();
    let path = w.path().to_path_buf();
    let mut a = agent(provider).with_session(w, loaded).unwrap();
    let first = a
        .run_turn(vec![ContentBlock::text("one")], CancellationToken::new())
        .await;
    assert!(matches!(first, TurnOutcome::Failed { .. }), "{first:?}");
    let _ = a
        .run_turn(vec![ContentBlock::text("two")], CancellationToken::new())
        .await;
    drop(a);
    let loaded = load(&path).unwrap();
    assert_eq!(loaded.messages.len(), 1);
    let texts: Vec<&str> = loaded.messages[0]
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["one", "two"]);
    assert_eq!(loaded.prompts, 2);
}

/// A tool whose output is `n` bytes: the bulk of a real session's context.
struct Dump;

#[async_trait::async_trait]
impl crate::Tool for Dump {
    fn name(&self) -> &str {
        "dump"
    }
    fn description(&self) -> &str {
        "prints a lot"
    }
    fn input_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    fn effects(&self, _: &serde_json::Value) -> crate::Effects {
        crate::Effects::READ_ONLY
    }
    fn cancellation(&self) -> crate::Cancellation {
        crate::Cancellation::Immediate
    }
    async fn call(
        &self,
        _: serde_json::Value,
        _: &crate::ToolContext,
    ) -> Result<crate::ToolOutput, crate::ToolError> {
        Ok("line of output\n".repeat(150).into())
    }
}

/// A response calling `dump` whose usage says the request carried `input` tokens.
fn dump_call(id: &str, input: u64) -> Vec<anvil_llm::StreamEvent> {
    use anvil_llm::{FinishReason, StreamEvent};
    vec![
        StreamEvent::ToolCallStart {
            index: 0,
            id: id.into(),
            name: "dump".into(),
            meta: None,
        },
        StreamEvent::ToolCallDelta {
            index: 0,
            arguments_fragment: "{}".into(),
        },
        StreamEvent::Usage(Usage {
            input,
            output: 10,
            cache_read: 0,
            cache_write: 0,
        }),
        StreamEvent::Finish(FinishReason::ToolUse),
    ]
}

fn small_window_agent(
    provider: Arc<ScriptedProvider>,
) -> (Agent, tokio::sync::mpsc::Receiver<crate::AgentEvent>) {
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Dump)).unwrap();
    let (sink, rx) = EventSink::channel(4096);
    let agent = Agent::new(
        provider,
        Arc::new(tools),
        AgentConfig {
            model: "scripted".into(),
            max_tokens: 100,
            context_window: Some(2_000),
            ..AgentConfig::default()
        },
        std::env::temp_dir(),
        sink,
    );
    (agent, rx)
}

#[tokio::test]
async fn a_long_tool_session_compacts_with_a_toolless_summary_and_reloads_the_same() {
    let dir = scratch();
    let provider = Arc::new(ScriptedProvider::new(vec![
        dump_call("c1", 500),
        // The request after this one would carry ~1,700 + the new result: over 85 %.
        dump_call("c2", 1_700),
        script::text("SUMMARY: dumped twice; nothing else to do."),
        script::text("done"),
    ]));
    let (w, loaded) = store(dir.path()).create(cwd(), "scripted", None).unwrap();
    let path = w.path().to_path_buf();
    let (a, mut rx) = small_window_agent(Arc::clone(&provider));
    let mut a = a.with_session(w, loaded).unwrap();
    let outcome = a
        .run_turn(
            vec![ContentBlock::text("dump it")],
            CancellationToken::new(),
        )
        .await;
    assert_eq!(outcome, TurnOutcome::Done);
    let requests = provider.requests();
    assert_eq!(requests.len(), 4);
    let summary = &requests[2];
    assert!(summary.tools.is_empty(), "the summary request has no tools");
    assert!(!requests[1].tools.is_empty());
    let ContentBlock::Text { text } = &requests[3].messages[0].content[0] else {
        panic!("{:?}", requests[3].messages)
    };
    assert!(text.contains("SUMMARY: dumped twice"), "{text}");
    validate_transcript(&requests[3].messages, Tail::Complete).unwrap();
    let mut compacted = false;
    while let Ok(e) = rx.try_recv() {
        if let crate::AgentEvent::Compacted {
            before_tokens,
            after_tokens,
        } = e
        {
            assert!(after_tokens < before_tokens);
            compacted = true;
        }
    }
    assert!(compacted);
    let reloaded = load(&path).unwrap();
    assert_eq!(reloaded.messages, a.messages());
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .contains("\"reason\":\"compaction\"")
    );
}

#[tokio::test]
async fn old_tool_results_are_cleared_past_the_soft_threshold_and_reload_the_same() {
    let dir = scratch();
    let mut script = Vec::new();
    for i in 0..4 {
        script.push(dump_call(&format!("c{i}"), 300));
    }
    // Over 60 % of the usable window, under 85 %.
    script.push(dump_call("c4", 700));
    script.push(script::text("done"));
    let provider = Arc::new(ScriptedProvider::new(script));
    let (w, loaded) = store(dir.path()).create(cwd(), "scripted", None).unwrap();
    let path = w.path().to_path_buf();
    let (a, mut rx) = small_window_agent(Arc::clone(&provider));
    let mut a = a.with_session(w, loaded).unwrap();
    let outcome = a
        .run_turn(vec![ContentBlock::text("dump")], CancellationToken::new())
        .await;
    assert_eq!(outcome, TurnOutcome::Done);
    let last = provider.requests().last().unwrap().clone();
    let results: Vec<&str> = last
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolResult { content, .. } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 5);
    assert!(results[0].starts_with(crate::context::clear::CLEARED_PREFIX));
    assert!(results[1].starts_with(crate::context::clear::CLEARED_PREFIX));
    assert!(!results[4].starts_with(crate::context::clear::CLEARED_PREFIX));
    validate_transcript(&last.messages, Tail::Complete).unwrap();
    let mut cleared = 0;
    while let Ok(e) = rx.try_recv() {
        if let crate::AgentEvent::ContextCleared { bytes_freed, .. } = e {
            cleared += bytes_freed;
        }
    }
    assert!(cleared > 3_000, "{cleared}");
    assert_eq!(load(&path).unwrap().messages, a.messages());
}

#[test]
fn sessions_are_private_to_their_user() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch();
    let (w, _) = store(dir.path()).create(cwd(), "m", None).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(w.path()), 0o600);
    assert_eq!(mode(w.path().parent().unwrap()), 0o700);
}

#[test]
fn the_latest_session_is_the_newest_file_even_when_it_does_not_load() {
    let dir = scratch();
    let s = store(dir.path());
    let (old, _) = s.create(cwd(), "m", None).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (new, _) = s.create(cwd(), "m", None).unwrap();
    let newest = new.path().to_path_buf();
    drop((old, new));
    append_line(&newest, "{corrupt\n");
    append_line(&newest, "{\"v\":1}\n");
    // Not passed over for the older one: the caller loads it and refuses it by its line.
    assert_eq!(s.latest(cwd()).unwrap(), Some(newest.clone()));
    assert!(matches!(
        load(&newest),
        Err(SessionError::Malformed { line: 2, .. })
    ));
}

#[test]
fn a_fifo_or_a_device_is_refused_without_reading_it() {
    let dir = scratch();
    let s = store(dir.path());
    let sessions = s.dir_for(cwd());
    std::fs::create_dir_all(&sessions).unwrap();
    let fifo = sessions.join("fifo.jsonl");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::os::unix::fs::symlink("/dev/zero", sessions.join("zero.jsonl")).unwrap();
    // Neither hangs nor reads forever.
    assert!(load(&fifo).is_err());
    assert!(load(&sessions.join("zero.jsonl")).is_err());
    assert!(s.list(cwd()).unwrap().is_empty());
    assert_eq!(s.latest(cwd()).unwrap(), None);
}

#[test]
fn a_file_replaced_under_a_live_session_stops_it_before_the_side_effect() {
    let dir = scratch();
    let (mut w, _) = store(dir.path()).create(cwd(), "m", None).unwrap();
    let path = w.path().to_path_buf();
    // What `sed -i` does: a new file renamed over the old one.
    let copy = path.with_extension("tmp");
    std::fs::copy(&path, &copy).unwrap();
    std::fs::rename(&copy, &path).unwrap();
    let started = w.append(&Record::ToolStarted {
        call_id: "c1".into(),
        name: "bash".into(),
        arguments: json!({"command": "true"}),
    });
    assert!(
        matches!(started, Err(SessionError::Replaced { .. })),
        "{started:?}"
    );
    assert!(w.has_failed());
    assert!(
        w.append(&Record::MessageAppended {
            message: Message::user_text("more")
        })
        .is_err()
    );
}

#[test]
fn a_whole_last_record_without_its_newline_is_kept_and_resuming_adds_the_newline() {
    let dir = scratch();
    let (mut w, _) = store(dir.path()).create(cwd(), "m", None).unwrap();
    w.append(&Record::MessageAppended {
        message: Message::user_text("one"),
    })
    .unwrap();
    let path = w.path().to_path_buf();
    drop(w);
    // An editor or a copy dropped the final newline: the record is whole, not torn.
    let mut bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.pop(), Some(b'\n'));
    std::fs::write(&path, &bytes).unwrap();
    let loaded = load(&path).unwrap();
    assert_eq!((loaded.records, loaded.torn_bytes), (2, 0));
    assert!(loaded.unterminated);
    let (mut w, _) = SessionWriter::resume(&path, Some(cwd()), None).unwrap();
    w.append(&Record::MessageExtended {
        index: 0,
        content: vec![ContentBlock::text("two")],
    })
    .unwrap();
    drop(w);
    let again = load(&path).unwrap();
    assert_eq!(again.records, 3, "nothing was cut off");
    assert_eq!(again.messages[0].content.len(), 2);
    assert!(!again.unterminated);
}
