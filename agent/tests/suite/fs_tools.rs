//! read_file, write_file, edit_file, glob and grep in temp directories, through dispatch (the
//! way the model reaches them).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::Path;
use std::sync::Arc;

use anvil_agent::file_access::FileAccess;
use anvil_agent::sandbox::{Sandbox, SandboxPolicy};
use anvil_agent::secrets::ChildEnv;
use anvil_agent::tools::register_coding_tools;
use anvil_agent::{ToolContext, ToolRegistry};
use anvil_llm::ContentBlock;
use serde_json::{Value, json};

struct Ws {
    dir: tempfile::TempDir,
    tools: ToolRegistry,
    ctx: ToolContext,
}

fn ws() -> Ws {
    let dir = tempfile::tempdir().unwrap();
    let access = Arc::new(FileAccess::workspace(dir.path()).unwrap());
    let mut tools = ToolRegistry::new();
    register_coding_tools(
        &mut tools,
        access,
        ChildEnv::default(),
        Arc::new(Sandbox::new(SandboxPolicy::FullAccess, "/")),
    )
    .unwrap();
    let ctx = ToolContext::new(dir.path().canonicalize().unwrap());
    Ws { dir, tools, ctx }
}

impl Ws {
    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.dir.path().join(rel)
    }
    fn write(&self, rel: &str, content: &str) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }
    async fn call(&self, name: &str, args: Value) -> (String, bool) {
        match self
            .tools
            .dispatch("id", name, &args, &self.ctx)
            .await
            .result
        {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => (content, is_error),
            other => panic!("{other:?}"),
        }
    }
    async fn ok(&self, name: &str, args: Value) -> String {
        let (text, is_error) = self.call(name, args).await;
        assert!(!is_error, "{name} failed: {text}");
        text
    }
    async fn err(&self, name: &str, args: Value) -> String {
        let (text, is_error) = self.call(name, args).await;
        assert!(is_error, "{name} should have failed: {text}");
        text
    }
}

#[tokio::test]
async fn read_file_numbers_lines_pages_and_refuses_binary() {
    let w = ws();
    let body: String = (1..=10).map(|i| format!("line {i}\n")).collect();
    w.write("a.txt", &body);
    let out = w
        .ok(
            "read_file",
            json!({"file_path": "a.txt", "offset": 3, "limit": 2}),
        )
        .await;
    assert_eq!(
        out,
        "     3\tline 3\n     4\tline 4\n[showing lines 3-4 of 10; read more with offset=5]\n"
    );
    let long = format!("{}\n", "x".repeat(3000));
    w.write("long.txt", &long);
    let out = w.ok("read_file", json!({"file_path": "long.txt"})).await;
    assert!(out.ends_with(" [… line cut]\n"));
    std::fs::write(w.path("bin"), [0u8, 1, 2, 3]).unwrap();
    assert!(
        w.err("read_file", json!({"file_path": "bin"}))
            .await
            .contains("binary")
    );
    assert!(
        w.err("read_file", json!({"file_path": "missing.txt"}))
            .await
            .contains("does not exist")
    );
}

#[tokio::test]
async fn edit_requires_a_fresh_read() {
    let w = ws();
    w.write("f.rs", "fn a() {}\n");
    assert_eq!(
        w.err(
            "edit_file",
            json!({"file_path": "f.rs", "old_string": "a", "new_string": "b"})
        )
        .await,
        "You must read_file before editing it."
    );
    w.ok("read_file", json!({"file_path": "f.rs"})).await;
    // Two consecutive agent edits work…
    w.ok(
        "edit_file",
        json!({"file_path": "f.rs", "old_string": "fn a", "new_string": "fn b"}),
    )
    .await;
    w.ok(
        "edit_file",
        json!({"file_path": "f.rs", "old_string": "fn b", "new_string": "fn c"}),
    )
    .await;
    assert_eq!(w.read("f.rs"), "fn c() {}\n");
    // …an edit by someone else in between does not.
    w.write("f.rs", "fn user() {}\n");
    assert_eq!(
        w.err(
            "edit_file",
            json!({"file_path": "f.rs", "old_string": "fn user", "new_string": "fn x"})
        )
        .await,
        "File changed on disk since you last read it. Read it again."
    );
    assert_eq!(w.read("f.rs"), "fn user() {}\n");
}

#[tokio::test]
async fn edit_uniqueness_rules_and_error_texts() {
    let w = ws();
    w.write("f.txt", "x = 1\nx = 1\nx = 1\n");
    w.ok("read_file", json!({"file_path": "f.txt"})).await;
    let none = w
        .err(
            "edit_file",
            json!({"file_path": "f.txt", "old_string": "y = 1", "new_string": "y = 2"}),
        )
        .await;
    assert!(
        none.contains("not found")
            && none.contains("whitespace and indentation")
            && none.contains("re-read"),
        "{none}"
    );
    let many = w
        .err(
            "edit_file",
            json!({"file_path": "f.txt", "old_string": "x = 1", "new_string": "x = 2"}),
        )
        .await;
    assert!(
        many.contains("Found 3 matches") && many.contains("replace_all"),
        "{many}"
    );
    let same = w
        .err(
            "edit_file",
            json!({"file_path": "f.txt", "old_string": "x = 1", "new_string": "x = 1"}),
        )
        .await;
    assert!(same.contains("identical"), "{same}");
    let empty = w
        .err(
            "edit_file",
            json!({"file_path": "f.txt", "old_string": "", "new_string": "z"}),
        )
        .await;
    assert!(empty.contains("old_string is empty"), "{empty}");
    let out = w.ok("edit_file", json!({"file_path": "f.txt", "old_string": "x = 1", "new_string": "x = 2", "replace_all": true})).await;
    assert!(
        out.starts_with("Edited") && out.contains("3 replacements"),
        "{out}"
    );
    assert_eq!(w.read("f.txt"), "x = 2\nx = 2\nx = 2\n");
}

#[tokio::test]
async fn edit_keeps_crlf_line_endings_and_shows_numbered_context() {
    let w = ws();
    w.write("win.txt", "one\r\ntwo\r\nthree\r\nfour\r\n");
    w.ok("read_file", json!({"file_path": "win.txt"})).await;
    let out = w
        .ok(
            "edit_file",
            json!({"file_path": "win.txt", "old_string": "two\nthree", "new_string": "2\n3\n3.5"}),
        )
        .await;
    assert_eq!(w.read("win.txt"), "one\r\n2\r\n3\r\n3.5\r\nfour\r\n");
    assert!(
        out.contains("     2\t2\n") && out.contains("     4\t3.5\n"),
        "{out}"
    );
    assert!(!out.contains('\r'));
}

#[tokio::test]
async fn write_file_is_atomic_creates_parents_and_guards_overwrites() {
    let w = ws();
    w.ok(
        "write_file",
        json!({"file_path": "new/dir/f.txt", "content": "hello\n"}),
    )
    .await;
    assert_eq!(w.read("new/dir/f.txt"), "hello\n");
    // The agent wrote it, so it may overwrite it again.
    w.ok(
        "write_file",
        json!({"file_path": "new/dir/f.txt", "content": "again\n"}),
    )
    .await;
    w.write("user.txt", "mine");
    let e = w
        .err(
            "write_file",
            json!({"file_path": "user.txt", "content": "clobber"}),
        )
        .await;
    assert_eq!(e, "You must read_file before editing it.");
    // No temp files are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(w.path("new/dir")).unwrap().collect();
    assert_eq!(leftovers.len(), 1);
}

#[tokio::test]
async fn writes_outside_protected_or_through_symlinks_are_refused() {
    let w = ws();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), w.path("out")).unwrap();
    let e = w
        .err(
            "write_file",
            json!({"file_path": "out/x.txt", "content": "x"}),
        )
        .await;
    assert!(e.contains("outside the workspace"), "{e}");
    assert!(!outside.path().join("x.txt").exists());
    let e = w
        .err(
            "write_file",
            json!({"file_path": "../escape.txt", "content": "x"}),
        )
        .await;
    assert!(e.contains("outside the workspace"), "{e}");
    std::fs::create_dir_all(w.path(".git")).unwrap();
    let e = w
        .err(
            "write_file",
            json!({"file_path": ".git/hooks/pre-commit", "content": "evil"}),
        )
        .await;
    assert!(e.contains("protected"), "{e}");
    let e = w
        .err(
            "write_file",
            json!({"file_path": ".anvil/config.toml", "content": "x"}),
        )
        .await;
    assert!(e.contains("protected"), "{e}");
}

fn touch_later(p: &Path, secs_ahead: u64) {
    let t = std::time::SystemTime::now() + std::time::Duration::from_secs(secs_ahead);
    std::fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

#[tokio::test]
async fn glob_respects_gitignore_skips_target_and_sorts_newest_first() {
    let w = ws();
    w.write(".gitignore", "ignored/\n*.log\n");
    w.write("src/old.rs", "");
    w.write("src/new.rs", "");
    w.write("ignored/x.rs", "");
    w.write("target/debug/build.rs", "");
    w.write("run.log", "");
    w.write(".env", "KEY=secret");
    touch_later(&w.path("src/new.rs"), 60);
    let out = w.ok("glob", json!({"pattern": "**/*.rs"})).await;
    assert_eq!(out, "src/new.rs\nsrc/old.rs\n");
    let all = w.ok("glob", json!({"pattern": "*"})).await;
    assert!(
        !all.contains("target") && !all.contains("run.log") && !all.contains(".env"),
        "{all}"
    );
    assert!(
        w.err("glob", json!({"pattern": "a[b"}))
            .await
            .contains("invalid glob")
    );
}

#[tokio::test]
async fn grep_finds_files_and_lines_and_never_shows_credentials() {
    let w = ws();
    w.write("src/main.rs", "fn main() {\n    println!(\"hi\");\n}\n");
    w.write("src/lib.rs", "pub fn helper() {}\n");
    w.write("target/debug/main.rs", "fn main() {}\n");
    w.write(".env", "API_TOKEN=fn main secret\n");
    std::fs::write(w.path("blob.bin"), b"fn main\0binary").unwrap();
    assert_eq!(
        w.ok("grep", json!({"pattern": "fn main"})).await,
        "src/main.rs\n"
    );
    assert_eq!(
        w.ok(
            "grep",
            json!({"pattern": "PRINTLN", "case_insensitive": true, "mode": "content"})
        )
        .await,
        "src/main.rs:2:    println!(\"hi\");\n"
    );
    assert_eq!(
        w.ok(
            "grep",
            json!({"pattern": "fn ", "glob": "lib.rs", "mode": "content"})
        )
        .await,
        "src/lib.rs:1:pub fn helper() {}\n"
    );
    let e = w.err("grep", json!({"pattern": "fn ("})).await;
    assert!(e.contains("invalid regex"), "{e}");
    // The credential file cannot be searched even by naming it.
    assert!(
        w.err("grep", json!({"pattern": "secret", "path": ".env"}))
            .await
            .contains("credential")
    );
}

#[tokio::test]
async fn searching_for_fn_main_across_this_repository() {
    // From the agent crate's own source tree: this is where a coding agent would look.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let access = Arc::new(FileAccess::workspace(repo).unwrap());
    let mut tools = ToolRegistry::new();
    register_coding_tools(
        &mut tools,
        access,
        ChildEnv::default(),
        Arc::new(Sandbox::new(SandboxPolicy::FullAccess, "/")),
    )
    .unwrap();
    let ctx = ToolContext::new(repo.canonicalize().unwrap());
    let out = match tools
        .dispatch(
            "id",
            "grep",
            &json!({"pattern": "fn main\\(", "glob": "*.rs"}),
            &ctx,
        )
        .await
        .result
    {
        ContentBlock::ToolResult { content, .. } => content,
        other => panic!("{other:?}"),
    };
    assert!(out.contains("llm/examples/replay.rs"), "{out}");
    assert!(!out.contains("target/"), "{out}");
}
