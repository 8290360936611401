//! Session store costs: loading and replaying a 10,000-record session, appending one record
//! unsynced, appending a synced `tool_started`, and beside it the disk's plain
//! `write` + `fdatasync` (the floor a synced record cannot go under).
//!
//! Targets (issue 15): load ≤ 50 ms; unsynced append median ≤ 20 µs; synced tool_started
//! ≤ 2 ms median on this disk. The synced benches write under the target directory, which is
//! on the disk sessions live on by default (the data dir), not on a tmpfs.
//!
//! Run: `cargo bench -p anvil-agent --bench session`.

use std::io::Write;
use std::path::{Path, PathBuf};

use anvil_agent::session::{Record, SessionStore, SessionWriter, load};
use anvil_llm::{ContentBlock, Message, Role, Usage};
use divan::Bencher;
use serde_json::json;

fn main() {
    divan::main();
}

/// A directory on the real disk (beside the build), not /tmp, which may be a tmpfs.
fn disk_dir() -> tempfile::TempDir {
    let base = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-sessions");
    std::fs::create_dir_all(&base).unwrap_or_else(|e| panic!("{e}"));
    tempfile::tempdir_in(base).unwrap_or_else(|e| panic!("{e}"))
}

fn cwd() -> &'static Path {
    Path::new("/work/bench")
}

/// A session of `records` records shaped like a coding session: a prompt, then steps of an
/// assistant tool call, its start and finish, a result of a few hundred bytes, and usage.
fn session_of(dir: &Path, records: usize) -> PathBuf {
    let (mut w, _) = SessionStore::new(dir)
        .create(cwd(), "bench", None)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut written = 1;
    let push = |w: &mut SessionWriter, r: Record| {
        w.append(&r).unwrap_or_else(|e| panic!("{e}"));
    };
    push(
        &mut w,
        Record::MessageAppended {
            message: Message::user_text("fix the failing test in src/lib.rs"),
        },
    );
    written += 1;
    let mut step = 0;
    while written + 5 <= records {
        let id = format!("call_{step}");
        let args = json!({"file_path": format!("src/module_{step}.rs")});
        push(
            &mut w,
            Record::MessageAppended {
                message: Message::new(
                    Role::Assistant,
                    vec![ContentBlock::ToolCall {
                        id: id.clone(),
                        name: "read_file".into(),
                        arguments: args.clone(),
                        meta: None,
                    }],
                ),
            },
        );
        push(
            &mut w,
            Record::ToolStarted {
                call_id: id.clone(),
                name: "read_file".into(),
                arguments: args,
            },
        );
        push(
            &mut w,
            Record::ToolFinished {
                call_id: id.clone(),
                is_error: false,
            },
        );
        push(
            &mut w,
            Record::MessageAppended {
                message: Message::new(
                    Role::User,
                    vec![ContentBlock::tool_result(
                        id,
                        "fn main() {\n    println!(\"hello\");\n}\n".repeat(8),
                        false,
                    )],
                ),
            },
        );
        push(
            &mut w,
            Record::Usage {
                usage: Usage {
                    input: 1200,
                    output: 80,
                    cache_read: 9000,
                    cache_write: 0,
                },
                cost_usd: Some(0.0078),
                estimated: false,
            },
        );
        written += 5;
        step += 1;
    }
    w.path().to_path_buf()
}

#[divan::bench(sample_count = 20)]
fn load_10000_records(bencher: Bencher) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let path = session_of(dir.path(), 10_000);
    bencher.bench(|| {
        let loaded = load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(loaded.records > 9_990);
        loaded
    });
}

#[divan::bench(sample_count = 1000)]
fn append_message_unsynced(bencher: Bencher) {
    let dir = disk_dir();
    let (mut w, _) = SessionStore::new(dir.path())
        .create(cwd(), "bench", None)
        .unwrap_or_else(|e| panic!("{e}"));
    let record = Record::MessageAppended {
        message: Message::user_text("a prompt of a few words, as typed"),
    };
    bencher.bench_local(|| w.append(&record).unwrap_or_else(|e| panic!("{e}")));
}

#[divan::bench(sample_count = 100)]
fn append_tool_started_synced(bencher: Bencher) {
    let dir = disk_dir();
    let (mut w, _) = SessionStore::new(dir.path())
        .create(cwd(), "bench", None)
        .unwrap_or_else(|e| panic!("{e}"));
    let record = Record::ToolStarted {
        call_id: "call_1".into(),
        name: "bash".into(),
        arguments: json!({"command": "cargo test"}),
    };
    bencher.bench_local(|| w.append(&record).unwrap_or_else(|e| panic!("{e}")));
}

#[divan::bench(sample_count = 100)]
fn plain_write_and_fdatasync(bencher: Bencher) {
    let dir = disk_dir();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("plain"))
        .unwrap_or_else(|e| panic!("{e}"));
    let line = [b'x'; 120];
    bencher.bench_local(|| {
        file.write_all(&line).unwrap_or_else(|e| panic!("{e}"));
        file.sync_data().unwrap_or_else(|e| panic!("{e}"));
    });
}
