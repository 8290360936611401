//! Golden transcripts: whole scenarios run through the full agent — the real
//! coding toolset (read_file, write_file, edit_file, glob, grep, bash under the real sandbox),
//! permissions, a session file — in a temp workspace, with a ScriptedProvider in place of the
//! model. Each snapshot is **what the model saw**: every request the provider received, rendered
//! as text, so a change to any tool's output, error text, the loop's bookkeeping or compaction
//! shows up as a reviewable diff.
//!
//! How a request is rendered (and why):
//! - **messages** in full, every block; a request whose messages extend the previous request's
//!   shows only the new ones (the prefix is checked to be byte-equal, so nothing is hidden),
//!   and one that does not (compaction) is shown whole.
//! - **tools** by name, plus a digest of their full specs. The specs themselves (descriptions
//!   and schemas, a few thousand tokens) are pinned once, in `tool_specs`, so a changed
//!   description shows there in full and as a changed digest here.
//! - **system prompt**: the base instructions as a digest (their text is pinned by
//!   `prompt::tests::nested_instructions_snapshot`), and what follows them — the environment
//!   and the project instructions — in full.
//! - Stable across runs and machines: the workspace's path is replaced by `[WS]` everywhere,
//!   the platform is fixed to `linux`, files get fixed modification times (glob lists newest
//!   first), bash gets a fixed environment, and tool-call ids are the script's own. Nothing is
//!   iterated out of a hash map, and no duration or time reaches a request.
//!
//! Each scenario also checks that its session file loads back to the context the agent ended
//! with, and that the files in the workspace are what the transcript says.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anvil_agent::approval::{ApprovalDecision, Approver, ScriptedApprover};
use anvil_agent::file_access::FileAccess;
use anvil_agent::permissions::{PermissionMode, Policy, Rule};
use anvil_agent::prompt::{BASE_INSTRUCTIONS, PromptBuilder, discover_instructions};
use anvil_agent::sandbox::{Sandbox, SandboxPolicy};
use anvil_agent::secrets::ChildEnv;
use anvil_agent::session::{Record, SessionStore, SessionWriter, Todo, TodoStatus, load};
use anvil_agent::tools::register_coding_tools;
use anvil_agent::{Agent, AgentConfig, EventSink, ToolRegistry, TurnOutcome};
use anvil_llm::testing::{ScriptedProvider, script};
use anvil_llm::{
    ChatRequest, ContentBlock, FinishReason, Message, Role, StreamEvent, Tail, ToolSpec, Usage,
    validate_transcript,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

/// A workspace, the agent over it, and the session file it writes.
struct Scenario {
    /// Holds the workspace and the session store.
    _dir: tempfile::TempDir,
    ws: PathBuf,
    provider: Arc<ScriptedProvider>,
    approver: Arc<ScriptedApprover>,
    agent: Agent,
    session: PathBuf,
}

/// What a scenario varies.
struct Setup<'a> {
    files: &'a [(&'a str, &'a str)],
    script: Vec<Vec<StreamEvent>>,
    /// The permission mode, allow rules and deny rules; `None` runs every call (an agent
    /// without a policy).
    policy: Option<(PermissionMode, &'a [&'a str], &'a [&'a str])>,
    /// The user's answers, in order, to the calls that need approval.
    approvals: Vec<ApprovalDecision>,
    context_window: Option<u32>,
    max_tokens: u32,
    /// Written to the session before the agent takes it over (a resumed session's todos).
    todos: Vec<Todo>,
}

impl Default for Setup<'_> {
    fn default() -> Self {
        Setup {
            files: &[],
            script: Vec::new(),
            policy: None,
            approvals: Vec::new(),
            context_window: None,
            max_tokens: AgentConfig::default().max_tokens,
            todos: Vec::new(),
        }
    }
}

/// The environment bash commands get: fixed, so output does not depend on the machine's.
fn child_env() -> ChildEnv {
    ChildEnv::default().with_base(vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("LC_ALL".into(), "C".into()),
    ])
}

/// The standard coding toolset over `ws`, bash confined by the real sandbox (the binary's
/// default policy: write the workspace, no network).
fn coding_tools(ws: &Path) -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    register_coding_tools(
        &mut tools,
        Arc::new(FileAccess::workspace(ws).unwrap()),
        child_env(),
        Arc::new(Sandbox::new(
            SandboxPolicy::WorkspaceWrite { network: false },
            ws,
        )),
    )
    .unwrap();
    tools
}

fn scenario(setup: Setup<'_>) -> Scenario {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    // Glob lists newest first: every file gets its own fixed time, in the order given.
    let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for (n, (rel, content)) in setup.files.iter().enumerate() {
        let path = ws.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(epoch + Duration::from_secs(n as u64))
            .unwrap();
    }

    let tools = coding_tools(&ws);
    let prompt = PromptBuilder {
        base: BASE_INSTRUCTIONS.to_string(),
        cwd: ws.clone(),
        platform: "linux".into(),
        instructions: discover_instructions(&ws, None),
        append: None,
    };
    let provider = Arc::new(ScriptedProvider::new(setup.script));
    let agent = Agent::new(
        provider.clone(),
        Arc::new(tools),
        AgentConfig {
            model: "scripted".into(),
            system: Some(prompt.build()),
            max_steps: 20,
            max_tokens: setup.max_tokens,
            context_window: setup.context_window,
            ..AgentConfig::default()
        },
        &ws,
        EventSink::discard(),
    );

    // A session file, as the binary keeps one; todos go in first and the session is resumed,
    // the way a session with a todo list comes back.
    let store = SessionStore::new(dir.path().join("sessions"));
    let (mut writer, loaded) = store.create(&ws, "scripted", None).unwrap();
    let session = writer.path().to_path_buf();
    let (writer, loaded) = if setup.todos.is_empty() {
        (writer, loaded)
    } else {
        writer
            .append(&Record::TodosChanged { todos: setup.todos })
            .unwrap();
        drop(writer);
        SessionWriter::resume(&session, Some(&ws), None).unwrap()
    };
    let mut agent = agent.with_session(writer, loaded).unwrap();
    let approver = Arc::new(ScriptedApprover::new(setup.approvals));
    if let Some((mode, allow, deny)) = setup.policy {
        let mut policy = Policy::new(mode, &ws);
        policy.allow = allow.iter().map(|r| Rule::parse(r).unwrap()).collect();
        policy.deny = deny.iter().map(|r| Rule::parse(r).unwrap()).collect();
        agent = agent.with_permissions(policy, approver.clone() as Arc<dyn Approver>);
    }
    Scenario {
        _dir: dir,
        ws,
        provider,
        approver,
        agent,
        session,
    }
}

impl Scenario {
    async fn turn(&mut self, prompt: &str) -> TurnOutcome {
        self.agent
            .run_turn(vec![ContentBlock::text(prompt)], CancellationToken::new())
            .await
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.ws.join(rel)).unwrap()
    }

    /// The requests the model received, rendered; and the checks every scenario shares: the
    /// script was used up, the context is valid, and the session file reloads to it.
    fn golden(&self) -> String {
        assert_eq!(self.provider.remaining(), 0, "the whole script was used");
        validate_transcript(self.agent.messages(), Tail::Complete).unwrap();
        assert_eq!(load(&self.session).unwrap().messages, self.agent.messages());
        render(&self.provider.requests(), &self.ws)
    }
}

fn digest(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..8])
}

fn tools_digest(tools: &[ToolSpec]) -> String {
    digest(serde_json::to_string(tools).unwrap().as_bytes())
}

/// `requests` as the model saw them, with the workspace path replaced by `[WS]`.
fn render(requests: &[ChatRequest], ws: &Path) -> String {
    let ws = ws.display().to_string();
    let redact = |s: &str| s.replace(&ws, "[WS]");
    let mut out = String::new();
    let mut previous: Option<&ChatRequest> = None;
    for (n, req) in requests.iter().enumerate() {
        writeln!(
            out,
            "## request {} · model {} · max_tokens {} · cache {}",
            n + 1,
            req.model,
            req.max_tokens,
            req.cache
        )
        .unwrap();
        let same_head = previous.is_some_and(|p| p.system == req.system && p.tools == req.tools);
        if same_head {
            writeln!(out, "system, tools: as in request {n}").unwrap();
        } else {
            render_system(&mut out, req.system.as_deref(), &redact);
            let names: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
            if names.is_empty() {
                writeln!(out, "tools: none").unwrap();
            } else {
                writeln!(
                    out,
                    "tools: {} (specs sha256 {})",
                    names.join(", "),
                    tools_digest(&req.tools)
                )
                .unwrap();
            }
        }
        let kept = match previous {
            Some(p)
                if p.messages.len() <= req.messages.len()
                    && req.messages[..p.messages.len()] == p.messages[..] =>
            {
                p.messages.len()
            }
            _ => 0,
        };
        if kept > 0 {
            writeln!(out, "messages [0]..[{}]: as in request {n}", kept - 1).unwrap();
        } else if previous.is_some() {
            writeln!(out, "messages: all new").unwrap();
        }
        for (i, m) in req.messages.iter().enumerate().skip(kept) {
            render_message(&mut out, i, m, &redact);
        }
        out.push('\n');
        previous = Some(req);
    }
    out
}

fn render_system(out: &mut String, system: Option<&str>, redact: &dyn Fn(&str) -> String) {
    let Some(system) = system else {
        writeln!(out, "system: none").unwrap();
        return;
    };
    let base = BASE_INSTRUCTIONS.trim_end();
    match system.strip_prefix(base) {
        Some(rest) => {
            writeln!(
                out,
                "system: anvil's base instructions (sha256 {}), then:",
                digest(base.as_bytes())
            )
            .unwrap();
            indented(out, "  | ", &redact(rest.trim_start_matches('\n')));
        }
        None => {
            writeln!(out, "system:").unwrap();
            indented(out, "  | ", &redact(system));
        }
    }
}

fn render_message(out: &mut String, i: usize, m: &Message, redact: &dyn Fn(&str) -> String) {
    let role = match m.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    writeln!(out, "[{i}] {role}").unwrap();
    for block in &m.content {
        match block {
            ContentBlock::Text { text } => {
                writeln!(out, "  text:").unwrap();
                indented(out, "    | ", &redact(text));
            }
            ContentBlock::Image { media_type, data } => {
                writeln!(out, "  image {media_type}, {} base64 bytes", data.len()).unwrap();
            }
            ContentBlock::Reasoning { text, meta } => {
                writeln!(
                    out,
                    "  reasoning{}:",
                    meta.as_ref()
                        .map(|m| format!(" (meta of {})", m.provider))
                        .unwrap_or_default()
                )
                .unwrap();
                indented(out, "    | ", &redact(text));
            }
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
                meta,
            } => {
                assert!(meta.is_none(), "scripted calls carry no provider meta");
                writeln!(
                    out,
                    "  tool_call {id} {name} {}",
                    redact(&arguments.to_string())
                )
                .unwrap();
            }
            ContentBlock::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                let kind = if *is_error {
                    "tool_error"
                } else {
                    "tool_result"
                };
                writeln!(out, "  {kind} {call_id}:").unwrap();
                indented(out, "    | ", &redact(content));
            }
        }
    }
}

/// Every line of `text` under `prefix`. A final newline shows as a last, empty line.
fn indented(out: &mut String, prefix: &str, text: &str) {
    for line in text.split('\n') {
        if line.is_empty() {
            writeln!(out, "{}", prefix.trim_end()).unwrap();
        } else {
            writeln!(out, "{prefix}{line}").unwrap();
        }
    }
}

/// A response with one tool call whose usage says the request carried `input` tokens.
fn call_with_usage(id: &str, name: &str, args: Value, input: u64) -> Vec<StreamEvent> {
    vec![
        StreamEvent::ToolCallStart {
            index: 0,
            id: id.into(),
            name: name.into(),
            meta: None,
        },
        StreamEvent::ToolCallDelta {
            index: 0,
            arguments_fragment: args.to_string(),
        },
        StreamEvent::Usage(Usage {
            input,
            output: 20,
            cache_read: 0,
            cache_write: 0,
        }),
        StreamEvent::Finish(FinishReason::ToolUse),
    ]
}

const GREET: &str = "\
#!/bin/sh
# greet NAME: the greeting the tests expect.
greet() {
    echo \"Hello, $1\"
}
";

const TEST: &str = "\
#!/bin/sh
. ./greet.sh
out=$(greet world)
if [ \"$out\" = \"Hello, world!\" ]; then
    echo \"ok - greet world\"
else
    echo \"not ok - greet world: got '$out'\"
    exit 1
fi
";

const AGENTS: &str = "Run `sh test.sh` after every change.\n";

/// The full specs of the coding toolset, as every request carries them: the digest the
/// scenarios show stands for exactly this.
#[test]
fn tool_specs() {
    let dir = tempfile::tempdir().unwrap();
    let specs = coding_tools(dir.path()).specs();
    insta::assert_json_snapshot!(json!({"sha256": tools_digest(&specs), "specs": specs}));
}

/// A failing test, a read, an edit that misses (whitespace), the edit that lands, the test
/// passing. Pins the bash result format, read_file's numbering, and edit_file's error and
/// success texts.
#[tokio::test]
async fn edit_and_test() {
    let mut s = scenario(Setup {
        files: &[
            ("AGENTS.md", AGENTS),
            ("greet.sh", GREET),
            ("test.sh", TEST),
        ],
        script: vec![
            script::tool_call("call_1", "bash", json!({"command": "sh test.sh"})),
            script::tool_call("call_2", "read_file", json!({"file_path": "greet.sh"})),
            script::tool_call(
                "call_3",
                "edit_file",
                json!({"file_path": "greet.sh", "old_string": "\techo \"Hello, $1\"", "new_string": "\techo \"Hello, $1!\""}),
            ),
            script::tool_call(
                "call_4",
                "edit_file",
                json!({"file_path": "greet.sh", "old_string": "    echo \"Hello, $1\"", "new_string": "    echo \"Hello, $1!\""}),
            ),
            script::tool_call("call_5", "bash", json!({"command": "sh test.sh"})),
            script::text("greet now ends with \"!\" (greet.sh:4); `sh test.sh` passes."),
        ],
        policy: Some((PermissionMode::AcceptEdits, &["bash(sh test.sh)"], &[])),
        ..Setup::default()
    });
    let outcome = s.turn("The greeting test fails. Fix it.").await;
    assert_eq!(outcome, TurnOutcome::Done);
    assert!(s.approver.requests().is_empty(), "nothing needed approval");
    assert_eq!(s.read("greet.sh"), GREET.replace("$1\"", "$1!\""));
    insta::assert_snapshot!(s.golden());
}

/// The model calls a tool that does not exist, then a real one with the wrong arguments, and
/// recovers from both errors; then a parallel batch of two reads (results in call order) and
/// the test. Pins the registry's unknown-tool and invalid-arguments texts, glob and grep output.
#[tokio::test]
async fn unknown_tool_recovery() {
    let fixed = GREET.replace("$1\"", "$1!\"");
    let mut s = scenario(Setup {
        files: &[("greet.sh", &fixed), ("test.sh", TEST)],
        script: vec![
            script::tool_call("call_1", "run_tests", json!({})),
            script::tool_call("call_2", "read_file", json!({"path": "test.sh"})),
            script::tool_calls(&[
                ("call_3", "glob", json!({"pattern": "*.sh"})),
                (
                    "call_4",
                    "grep",
                    json!({"pattern": "greet", "mode": "content", "glob": "*.sh"}),
                ),
            ]),
            script::tool_call("call_5", "bash", json!({"command": "sh test.sh"})),
            script::text("The tests pass: `sh test.sh` prints `ok - greet world`."),
        ],
        policy: Some((PermissionMode::Bypass, &[], &[])),
        ..Setup::default()
    });
    let outcome = s.turn("Run the tests.").await;
    assert_eq!(outcome, TurnOutcome::Done);
    insta::assert_snapshot!(s.golden());
}

/// A command a deny rule refuses, a new file the user declines with feedback, and the edit the
/// model makes instead (approved). Pins the texts the model gets for a rule's denial and for a
/// user's, feedback included; neither refused call runs.
#[tokio::test]
async fn permission_denial_with_feedback() {
    let mut s = scenario(Setup {
        files: &[
            ("README.md", "# greet\n\nSay hello from the shell.\n"),
            ("build/greet.out", "Hello, world\n"),
        ],
        script: vec![
            script::tool_call("call_1", "bash", json!({"command": "rm -rf build"})),
            script::tool_call(
                "call_2",
                "write_file",
                json!({"file_path": "CHANGES.md", "content": "- build/ is no longer kept\n"}),
            ),
            script::tool_call("call_3", "read_file", json!({"file_path": "README.md"})),
            script::tool_call(
                "call_4",
                "edit_file",
                json!({"file_path": "README.md", "old_string": "Say hello from the shell.\n", "new_string": "Say hello from the shell.\n\nbuild/ holds generated output; do not commit it.\n"}),
            ),
            script::text(
                "I could not remove build/ (a deny rule forbids rm) and, as you asked, noted it \
                 in README.md instead of a new file.",
            ),
        ],
        policy: Some((PermissionMode::Default, &[], &["bash(rm:*)"])),
        approvals: vec![
            ApprovalDecision::Deny {
                feedback: Some("No new files; put the note in README.md.".into()),
            },
            ApprovalDecision::Allow,
        ],
        ..Setup::default()
    });
    let outcome = s
        .turn("Remove the build output and note that it is not kept.")
        .await;
    assert_eq!(outcome, TurnOutcome::Done);
    // The rule's denial asks nobody; the write and the edit were asked about, in order.
    let asked: Vec<(String, Option<String>)> = s
        .approver
        .requests()
        .into_iter()
        .map(|r| (r.tool, r.subject))
        .collect();
    assert_eq!(
        asked,
        [
            ("write_file".to_string(), Some("CHANGES.md".to_string())),
            ("edit_file".to_string(), Some("README.md".to_string())),
        ]
    );
    assert_eq!(
        s.read("build/greet.out"),
        "Hello, world\n",
        "rm did not run"
    );
    assert!(
        !s.ws.join("CHANGES.md").exists(),
        "the declined write did not run"
    );
    assert!(
        s.read("README.md")
            .contains("build/ holds generated output")
    );
    insta::assert_snapshot!(s.golden());
}

/// Room for the conversation in the compaction scenario: the window is the bare request's
/// estimate (system prompt and the six tool specs, a few thousand tokens on their own) plus
/// this, so the conversation itself gets a ~2,000-token window however long the tool
/// descriptions grow.
const ROOM: u64 = 2_000;

/// A session resumed with a todo list reads a large log; the next request would not fit, so the
/// conversation is compacted first: the summary request carries no tools and the conversation
/// as text, the new context carries the summary and the todos, and the model goes on from it.
#[tokio::test]
async fn compaction() {
    // The bare request's estimate, measured on a twin (same prompt, same tools, same path
    // length), so the scripted usage below can say what a real model would.
    let bare = scenario(Setup::default()).agent.context_tokens();
    let log: String = (1..=120)
        .map(|i| {
            if i == 97 {
                format!("{i:04} ERROR greet: expected 'Hello, world!', got 'Hello, world'\n")
            } else {
                format!("{i:04} INFO  step {i} of the build finished\n")
            }
        })
        .collect();
    let usage = |extra: u64| bare + extra;
    let mut s = scenario(Setup {
        files: &[("build.log", &log)],
        script: vec![
            call_with_usage("call_1", "glob", json!({"pattern": "*.log"}), usage(30)),
            call_with_usage(
                "call_2",
                "read_file",
                json!({"file_path": "build.log"}),
                usage(80),
            ),
            // The summary (the request after the big read is over the budget).
            script::text(
                "The user wants the build failure found. glob found build.log; read_file showed \
                 120 lines, one of them an ERROR from greet. Next: find the exact ERROR line.",
            ),
            call_with_usage(
                "call_3",
                "grep",
                json!({"pattern": "ERROR", "mode": "content"}),
                usage(200),
            ),
            script::text(
                "build.log:97 — greet printed 'Hello, world' where 'Hello, world!' was expected.",
            ),
        ],
        context_window: Some(u32::try_from(bare + ROOM).unwrap()),
        max_tokens: 200,
        todos: vec![
            Todo {
                content: "find why the build failed".into(),
                status: TodoStatus::InProgress,
            },
            Todo {
                content: "fix greet".into(),
                status: TodoStatus::Pending,
            },
        ],
        ..Setup::default()
    });
    let outcome = s.turn("Why did the build fail?").await;
    assert_eq!(outcome, TurnOutcome::Done);
    let requests = s.provider.requests();
    assert_eq!(requests.len(), 5);
    assert!(
        requests[2].tools.is_empty(),
        "the summary request has no tools"
    );
    assert_eq!(
        requests[3].messages.len(),
        1,
        "the compacted context is one message"
    );
    assert!(
        std::fs::read_to_string(&s.session)
            .unwrap()
            .contains(r#""reason":"compaction""#)
    );
    insta::assert_snapshot!(s.golden());
}
