//! Permissions: rule parsing, bash lines judged through the shell grammar, the decision order
//! (README: Permissions), and the approval round trip in the agent loop (denied calls never
//! run). The `issue_13_*` tests pin the bypasses an adversarial review found.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anvil_agent::approval::{ApprovalDecision, HeadlessApprover, ScriptedApprover};
use anvil_agent::permissions::{Decision, PermissionMode, Policy, Rule};
use anvil_agent::{
    Agent, AgentConfig, Cancellation, Effects, EventSink, Tool, ToolContext, ToolError,
    ToolRegistry, TurnOutcome,
};
use anvil_llm::ContentBlock;
use anvil_llm::testing::{ScriptedProvider, script};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// A tool with a name, effects and subject key of our choosing, counting its runs.
struct Fake {
    name: &'static str,
    effects: Effects,
    subject_key: &'static str,
    runs: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Tool for Fake {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "fake"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn effects(&self, _: &Value) -> Effects {
        self.effects
    }
    fn cancellation(&self) -> Cancellation {
        Cancellation::Immediate
    }
    fn permission_subject(&self, args: &Value) -> Option<String> {
        args.get(self.subject_key)
            .and_then(Value::as_str)
            .map(str::to_owned)
    }
    async fn call(&self, _: Value, _: &ToolContext) -> Result<anvil_agent::ToolOutput, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok("ran".into())
    }
}

fn fake(name: &'static str, effects: Effects, key: &'static str) -> Fake {
    Fake {
        name,
        effects,
        subject_key: key,
        runs: Arc::new(AtomicUsize::new(0)),
    }
}

fn bash() -> Fake {
    fake("bash", Effects::SUBPROCESS, "command")
}
fn edit() -> Fake {
    fake("edit_file", Effects::WRITES, "file_path")
}
fn read() -> Fake {
    fake("read_file", Effects::READ_ONLY, "file_path")
}

fn policy(mode: PermissionMode, allow: &[&str], deny: &[&str]) -> Policy {
    let mut p = Policy::new(mode, "/ws");
    p.allow = allow.iter().map(|r| Rule::parse(r).unwrap()).collect();
    p.deny = deny.iter().map(|r| Rule::parse(r).unwrap()).collect();
    p
}

fn kind(d: &Decision) -> &'static str {
    match d {
        Decision::Allow => "allow",
        Decision::Ask { .. } => "ask",
        Decision::Deny { .. } => "deny",
    }
}

#[test]
fn shell_lines_are_judged_command_by_command() {
    let p = policy(
        PermissionMode::Default,
        &["bash(cargo test:*)", "bash(git status)"],
        &["bash(rm:*)"],
    );
    for (cmd, expected) in [
        ("cargo test --lib", "allow"),
        ("cargo test", "allow"),
        ("git status", "allow"),
        ("cargo test && rm -rf /", "deny"),
        ("cargo test; git push origin main", "ask"),
        ("echo $(cat ~/.ssh/id_rsa)", "ask"),
        ("echo `whoami`", "ask"),
        ("git push origin main", "ask"),
        ("cargo testing-something", "ask"),
        ("git status --porcelain", "ask"),
    ] {
        let d = p.decide(&bash(), &json!({"command": cmd}));
        assert_eq!(kind(&d), expected, "{cmd}: {d:?}");
    }
    for (cmd, expected) in [
        (
            "cargo test && git status || cargo test; git status | cargo test & git status",
            "allow",
        ),
        ("cargo test 'a && b' \"; git push\"", "allow"),
        ("diff <(ls a) <(ls b)", "ask"),
        ("(cd x && rm y)", "deny"),
    ] {
        let d = p.decide(&bash(), &json!({"command": cmd}));
        assert_eq!(kind(&d), expected, "{cmd}: {d:?}");
    }
}

#[test]
fn invalid_rules_say_what_is_wrong() {
    for (rule, fragment) in [
        ("", "empty"),
        ("bash(", "closing ')'"),
        ("bash()", "pattern between the parentheses is empty"),
        ("bash(:*)", "prefix before ':*' is empty"),
        ("ba sh", "letters, digits"),
        ("edit_file([)", "bad glob"),
        ("mcp__*__x*", "only end with one '*'"),
    ] {
        let e = Rule::parse(rule).unwrap_err();
        assert!(e.to_string().contains(fragment), "{rule:?}: {e}");
        assert!(e.to_string().contains(&format!("'{}'", rule.trim())), "{e}");
    }
}

#[test]
fn the_decision_order_of_the_boundary_contract() {
    // Plan mode plus an allow(edit_file) rule still denies writes.
    let p = policy(PermissionMode::Plan, &["edit_file"], &[]);
    assert_eq!(
        kind(&p.decide(&edit(), &json!({"file_path": "src/a.rs"}))),
        "deny"
    );
    assert_eq!(
        kind(&p.decide(&read(), &json!({"file_path": "src/a.rs"}))),
        "allow"
    );
    // A broad allow rule does not bypass an outside-path grant, in any mode.
    for mode in [
        PermissionMode::Default,
        PermissionMode::AcceptEdits,
        PermissionMode::Bypass,
    ] {
        let p = policy(mode, &["edit_file", "read_file"], &[]);
        assert_eq!(
            kind(&p.decide(&edit(), &json!({"file_path": "../other/secret"}))),
            "ask",
            "{mode:?}"
        );
        assert_eq!(
            kind(&p.decide(&read(), &json!({"file_path": "/etc/passwd"}))),
            "ask",
            "{mode:?}"
        );
    }
    // Deny plus a requested escalation (bypass mode, an allow rule) remains deny.
    let p = policy(PermissionMode::Bypass, &["bash"], &["bash(git push:*)"]);
    assert_eq!(
        kind(&p.decide(&bash(), &json!({"command": "git push --force"}))),
        "deny"
    );
    assert_eq!(kind(&p.decide(&bash(), &json!({"command": "ls"}))), "allow");
    // Modes: default asks for edits and commands; accept-edits allows edits only.
    let p = policy(PermissionMode::Default, &[], &[]);
    assert_eq!(kind(&p.decide(&edit(), &json!({"file_path": "a"}))), "ask");
    let p = policy(PermissionMode::AcceptEdits, &[], &[]);
    assert_eq!(
        kind(&p.decide(&edit(), &json!({"file_path": "a"}))),
        "allow"
    );
    assert_eq!(kind(&p.decide(&bash(), &json!({"command": "ls"}))), "ask");
    // Bypass runs lines rules cannot judge (issue 13, item 9).
    let p = policy(PermissionMode::Bypass, &[], &[]);
    assert_eq!(
        kind(&p.decide(&bash(), &json!({"command": "echo $(id)"}))),
        "allow"
    );
}

#[test]
fn unknown_effects_are_never_allowed_by_a_mode_default() {
    let mcp = fake("mcp__srv__frobnicate", Effects::UNKNOWN, "x");
    let call = json!({"x": "anything"});
    for (mode, expected) in [
        (PermissionMode::Plan, "deny"),
        (PermissionMode::Default, "ask"),
        (PermissionMode::AcceptEdits, "ask"),
        (PermissionMode::Bypass, "allow"),
    ] {
        let d = policy(mode, &[], &[]).decide(&mcp, &call);
        assert_eq!(kind(&d), expected, "{mode:?}: {d:?}");
    }
    // A rule naming the tool allows it; plan mode still wins, a deny still wins.
    assert_eq!(
        kind(&policy(PermissionMode::Default, &["mcp__srv__*"], &[]).decide(&mcp, &call)),
        "allow"
    );
    assert_eq!(
        kind(&policy(PermissionMode::Plan, &["mcp__srv__*"], &[]).decide(&mcp, &call)),
        "deny"
    );
    assert_eq!(
        kind(&policy(PermissionMode::Bypass, &[], &["mcp__srv__frobnicate"]).decide(&mcp, &call)),
        "deny"
    );
    let Decision::Ask { reason, .. } =
        policy(PermissionMode::AcceptEdits, &[], &[]).decide(&mcp, &call)
    else {
        unreachable!()
    };
    assert!(
        reason.contains("unknown") && reason.contains("mcp__srv__frobnicate"),
        "{reason}"
    );
}

#[test]
fn tool_selectors_match_names_not_unrelated_servers() {
    let p = policy(
        PermissionMode::Default,
        &["mcp__github__*"],
        &["mcp__gitlab__delete*"],
    );
    let gh = fake("mcp__github__create_issue", Effects::WRITES, "x");
    let other = fake("mcp__githubx__create_issue", Effects::WRITES, "x");
    let gl = fake("mcp__gitlab__delete_repo", Effects::WRITES, "x");
    assert_eq!(kind(&p.decide(&gh, &json!({}))), "allow");
    assert_eq!(kind(&p.decide(&other, &json!({}))), "ask");
    assert_eq!(kind(&p.decide(&gl, &json!({}))), "deny");
}

fn agent_with(
    tool: Fake,
    policy: Policy,
    approver: Arc<dyn anvil_agent::approval::Approver>,
    script_steps: Vec<Vec<anvil_llm::StreamEvent>>,
) -> (Agent, Arc<AtomicUsize>) {
    let runs = Arc::clone(&tool.runs);
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(tool)).unwrap();
    let agent = Agent::new(
        Arc::new(ScriptedProvider::new(script_steps)),
        Arc::new(tools),
        AgentConfig::default(),
        "/ws",
        EventSink::discard(),
    )
    .with_permissions(policy, approver);
    (agent, runs)
}

fn last_result(agent: &Agent) -> (String, bool) {
    agent.messages()[2]
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn a_denied_call_never_runs_and_the_model_gets_the_feedback() {
    let approver = Arc::new(ScriptedApprover::new(vec![ApprovalDecision::Deny {
        feedback: Some("use the staging branch".into()),
    }]));
    let (mut agent, runs) = agent_with(
        bash(),
        policy(PermissionMode::Default, &[], &[]),
        approver.clone(),
        vec![
            script::tool_call("c1", "bash", json!({"command": "git push origin main"})),
            script::text("ok"),
        ],
    );
    assert_eq!(
        agent
            .run_turn(vec![ContentBlock::text("push")], CancellationToken::new())
            .await,
        TurnOutcome::Done
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a denied tool ran");
    let (text, is_error) = last_result(&agent);
    assert!(
        is_error && text.contains("use the staging branch"),
        "{text}"
    );
    let asked = approver.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].subject.as_deref(), Some("git push origin main"));
}

/// A call the model wrote as text (`tool_calls = "text"`) is judged like a structured one:
/// a deny rule stops it, and an ask goes to the approver.
#[tokio::test]
async fn a_call_recovered_from_text_is_judged_like_any_call() {
    let written =
        "```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"rm -rf build\"}}\n```";
    let approver = Arc::new(ScriptedApprover::new(vec![]));
    let tool = bash();
    let runs = Arc::clone(&tool.runs);
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(tool)).unwrap();
    let mut agent = Agent::new(
        Arc::new(ScriptedProvider::new(vec![
            script::text(written),
            script::text("ok"),
        ])),
        Arc::new(tools),
        AgentConfig {
            tool_calls: anvil_agent::text_calls::ToolCallMode::Text,
            ..AgentConfig::default()
        },
        "/ws",
        EventSink::discard(),
    )
    .with_permissions(
        policy(PermissionMode::Bypass, &[], &["bash(rm:*)"]),
        approver.clone(),
    );
    agent
        .run_turn(vec![ContentBlock::text("clean")], CancellationToken::new())
        .await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a denied recovered call ran"
    );
    let (text, is_error) = last_result(&agent);
    assert!(is_error, "{text}");
    assert!(approver.requests().is_empty());
}

#[tokio::test]
async fn always_adds_a_session_rule_and_the_next_call_does_not_ask() {
    let approver = Arc::new(ScriptedApprover::new(vec![ApprovalDecision::AllowAlways]));
    let (mut agent, runs) = agent_with(
        bash(),
        policy(PermissionMode::Default, &[], &[]),
        approver.clone(),
        vec![
            script::tool_call("c1", "bash", json!({"command": "cargo test --lib"})),
            script::tool_call("c2", "bash", json!({"command": "cargo test --doc"})),
            script::text("done"),
        ],
    );
    agent
        .run_turn(vec![ContentBlock::text("test")], CancellationToken::new())
        .await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        approver.requests().len(),
        1,
        "the second cargo test asked again"
    );
    let rules: Vec<&str> = agent
        .policy()
        .unwrap()
        .session_allow
        .iter()
        .map(|r| r.text.as_str())
        .collect();
    assert_eq!(rules, ["bash(cargo test:*)"]);
}

#[tokio::test]
async fn headless_denies_what_needs_approval_with_what_to_do() {
    let (mut agent, runs) = agent_with(
        edit(),
        policy(PermissionMode::Default, &[], &[]),
        Arc::new(HeadlessApprover),
        vec![
            script::tool_call("c1", "edit_file", json!({"file_path": "a.rs"})),
            script::text("ok"),
        ],
    );
    agent
        .run_turn(vec![ContentBlock::text("edit")], CancellationToken::new())
        .await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let (text, _) = last_result(&agent);
    assert!(text.contains("--permission-mode accept-edits"), "{text}");
    // With accept-edits the same call runs without asking.
    let (mut agent, runs) = agent_with(
        edit(),
        policy(PermissionMode::AcceptEdits, &[], &[]),
        Arc::new(HeadlessApprover),
        vec![
            script::tool_call("c1", "edit_file", json!({"file_path": "a.rs"})),
            script::text("ok"),
        ],
    );
    agent
        .run_turn(vec![ContentBlock::text("edit")], CancellationToken::new())
        .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_approver_that_never_answers_grants_nothing_when_the_turn_is_cancelled() {
    struct Never;
    #[async_trait::async_trait]
    impl anvil_agent::approval::Approver for Never {
        async fn approve(&self, _: anvil_agent::approval::ApprovalRequest) -> ApprovalDecision {
            futures::future::pending().await
        }
    }
    let (mut agent, runs) = agent_with(
        bash(),
        policy(PermissionMode::Default, &[], &[]),
        Arc::new(Never),
        vec![script::tool_call(
            "c1",
            "bash",
            json!({"command": "make deploy"}),
        )],
    );
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        c.cancel();
    });
    assert_eq!(
        agent.run_turn(vec![ContentBlock::text("go")], cancel).await,
        TurnOutcome::Cancelled
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

fn decide(p: &Policy, command: &str) -> Decision {
    p.decide(&bash(), &json!({ "command": command }))
}

/// Issue 13, item 7: an allow rule covers a line only when the shell grammar reads it as plain
/// commands with literal words, and a redirection that writes is an edit of its target.
#[test]
fn issue_13_allow_rules_cover_only_plain_literal_commands_and_allowed_writes() {
    let p = policy(PermissionMode::Default, &["bash(cargo test:*)"], &[]);
    for cmd in [
        // A newline inside what the old splitter took for a quote in a comment.
        "cargo test #'\ntouch X\n#'",
        // ANSI-C quoting the old splitter read as a plain single-quoted string.
        "cargo test $'\\'' ; touch X # '",
        // Writes through redirections are edits, and default mode asks for edits.
        "cargo test > X",
        "cargo test >> src/lib.rs",
        "cargo test &> X",
        "cargo test 2> X",
        // Words bash expands are not literal.
        "cargo test $HOME",
        "cargo test *",
        "cargo test ~/x",
        "cargo test $\"x\"",
        "cargo test \"$(id)\"",
        // A line continuation the grammar would split differently from bash.
        "cargo test && r\\\nm -rf x",
    ] {
        let d = decide(&p, cmd);
        assert_eq!(kind(&d), "ask", "{cmd:?}: {d:?}");
    }
    for cmd in [
        "cargo test",
        "cargo test --lib 2>&1",
        "cargo test > /dev/null 2>&1",
        "cargo 'test' \"--lib\"",
        "cargo test \\\n  --lib",
        "cargo test # a comment",
    ] {
        let d = decide(&p, cmd);
        assert_eq!(kind(&d), "allow", "{cmd:?}: {d:?}");
    }
    // Where an edit of the target would be allowed, so is the write.
    let p = policy(PermissionMode::AcceptEdits, &["bash(cargo test:*)"], &[]);
    assert_eq!(kind(&decide(&p, "cargo test > out.txt")), "allow");
    assert_eq!(kind(&decide(&p, "cargo test > /etc/out.txt")), "ask");
    assert_eq!(kind(&decide(&p, "cargo test > .git/config")), "ask");
    assert_eq!(kind(&decide(&p, "cargo test > sub/.git/config")), "ask");
    assert_eq!(kind(&decide(&p, "cargo test > .anvil/config.toml")), "ask");
    // A credential file is not written through a redirection either (as the file tools refuse
    // it) where the policy judges writes; bypass leaves bash writes to the sandbox.
    for target in [
        ".env",
        "config/.env.production",
        "deploy/server.pem",
        "ci/credentials.json",
    ] {
        let d = decide(&p, &format!("cargo test > {target}"));
        assert_eq!(kind(&d), "ask", "{target}: {d:?}");
        assert!(format!("{d:?}").contains("credential"), "{target}: {d:?}");
    }
    let p = policy(
        PermissionMode::Default,
        &["bash(cargo test:*)", "bash(cd:*)", "edit_file(logs/**)"],
        &[],
    );
    assert_eq!(kind(&decide(&p, "cargo test > logs/out.txt")), "allow");
    assert_eq!(kind(&decide(&p, "cargo test > src/out.txt")), "ask");
    // `cd` is followed: the write lands in logs/, and a command outside the workspace is not
    // covered by rules.
    assert_eq!(
        kind(&decide(&p, "cd logs && cargo test > out.txt")),
        "allow"
    );
    assert_eq!(kind(&decide(&p, "cd src && cargo test > out.txt")), "ask");
    assert_eq!(kind(&decide(&p, "cd /tmp/other && cargo test")), "ask");
    // A deny rule on edits covers writes through redirections, in every mode.
    let p = policy(PermissionMode::Bypass, &[], &["edit_file(Cargo.toml)"]);
    assert_eq!(kind(&decide(&p, "echo x > Cargo.toml")), "deny");
    assert_eq!(kind(&decide(&p, "echo x > README.md")), "allow");
}

/// Issue 13, item 8: deny rules match what would run, not the first word's spelling; what
/// cannot be known before it runs is denied while any deny rule could match it.
#[test]
fn issue_13_deny_rules_match_what_would_run() {
    let p = policy(
        PermissionMode::Bypass,
        &["bash"],
        &["bash(rm:*)", "bash(git push:*)"],
    );
    for cmd in [
        "command rm -rf x",
        "/bin/rm x",
        "\\rm x",
        "'rm' x",
        "env rm x",
        "env -i PATH=/bin rm x",
        "nice rm x",
        "nice -n 5 rm x",
        "timeout 5 rm x",
        "sudo rm x",
        "xargs rm",
        "ls | xargs -0 rm -f",
        "bash -c 'rm x'",
        "sh -c 'rm x'",
        "bash -ec \"cd . && rm x\"",
        "eval 'rm x'",
        "eval rm x",
        "x=rm; $x y",
        "$CMD x",
        "eval \"$cmd\"",
        "bash -c \"$cmd\"",
        "echo rm x | sh",
        "find . -delete",
        // A second review's detours: an alias in another case, aliases from the environment,
        // a combined -S.
        "git -c alias.p=push P",
        "X=push git --config-env=alias.p=X p",
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=alias.p GIT_CONFIG_VALUE_0=push git p",
        "env -iS 'rm x'",
        "find . -name '*.o' -exec rm {} +",
        "echo $(rm x)",
        "(cd x && rm y)",
        "f() { rm x; }; f",
        "git -C . push",
        "git --git-dir=.git push origin main",
        "git --git-dir .git --work-tree . push",
        "git -c alias.p=push p",
        "sudo env git -C . push",
        "cargo test && r\\\nm -rf x",
    ] {
        let d = decide(&p, cmd);
        assert_eq!(kind(&d), "deny", "{cmd:?}: {d:?}");
    }
    for cmd in [
        "cargo test",
        "echo rm x",
        "git status",
        "git log --oneline",
        "ls $HOME",
        "find . -name x -print",
    ] {
        let d = decide(&p, cmd);
        assert_eq!(kind(&d), "allow", "{cmd:?}: {d:?}");
    }
    // The message says what ran.
    let Decision::Deny { reason } = decide(&p, "env rm x") else {
        unreachable!()
    };
    assert!(
        reason.contains("bash(rm:*)") && reason.contains("`rm x`"),
        "{reason}"
    );
    // With no deny rule that could match, a variable command runs in bypass.
    let p = policy(PermissionMode::Bypass, &[], &[]);
    assert_eq!(kind(&decide(&p, "x=ls; $x")), "allow");
}

/// Issue 13, item 9: bypass runs command substitution, backticks, subshells and the rest of
/// ordinary shell; only hard denies and outside paths stop a call.
#[test]
fn issue_13_bypass_runs_ordinary_shell() {
    let p = policy(PermissionMode::Bypass, &[], &[]);
    for cmd in [
        "echo $(id)",
        "echo `whoami`",
        "(cd src && ls)",
        "{ ls; pwd; }",
        "diff <(ls a) <(ls b)",
        "for f in *.rs; do wc -l \"$f\"; done",
        "cat <<'EOF' > notes.txt\nhello\nEOF",
        "x=$(git rev-parse HEAD) && echo $x",
    ] {
        let d = decide(&p, cmd);
        assert_eq!(kind(&d), "allow", "{cmd:?}: {d:?}");
    }
    let p = policy(
        PermissionMode::Bypass,
        &["read_file"],
        &["bash(git push:*)"],
    );
    assert_eq!(kind(&decide(&p, "echo $(git push)")), "deny");
    assert_eq!(
        kind(&p.decide(&read(), &json!({"file_path": "/etc/passwd"}))),
        "ask"
    );
}

/// Issue 13, item 10: a prefix rule does not cover flags that make the tool run code named
/// on the command line or taken from outside the workspace.
#[test]
fn issue_13_prefix_rules_do_not_cover_flags_that_run_code() {
    let p = policy(
        PermissionMode::Default,
        &[
            "bash(cargo test:*)",
            "bash(npm test:*)",
            "bash(git:*)",
            "bash(make:*)",
            "bash(python:*)",
            "bash(python -m pytest:*)",
        ],
        &[],
    );
    for (cmd, flag) in [
        (
            "cargo test --config 'build.rustc-wrapper=\"/tmp/x\"'",
            "--config",
        ),
        ("cargo test -Zunstable-options", "-Zunstable-options"),
        (
            "cargo test --manifest-path /tmp/other/Cargo.toml",
            "--manifest-path",
        ),
        (
            "cargo test --manifest-path=../other/Cargo.toml",
            "--manifest-path",
        ),
        ("npm test --script-shell=/tmp/x", "--script-shell"),
        ("git -c core.pager=/tmp/x log", "-c"),
        ("git -C /tmp/other status", "-C"),
        ("make -f /tmp/x.mk", "-f"),
        ("make test SHELL=/tmp/x", "SHELL=/tmp/x"),
        ("python -c 'import os'", "-c"),
        ("python -m pytest -p evil", "-p"),
    ] {
        let d = decide(&p, cmd);
        let Decision::Ask { reason, .. } = &d else {
            panic!("{cmd:?}: {d:?}")
        };
        assert!(reason.contains(flag), "{cmd:?}: {reason}");
    }
    // An environment assignment in front is not the rule's command.
    assert_eq!(kind(&decide(&p, "RUSTC_WRAPPER=/tmp/x cargo test")), "ask");
    for cmd in [
        "cargo test --lib -- --nocapture",
        "cargo test --manifest-path sub/Cargo.toml",
        "npm test -- --watch",
        "git log --oneline",
        "git -C sub status",
        "make test -j4",
        "python script.py",
        "python -m pytest tests -k name",
    ] {
        let d = decide(&p, cmd);
        assert_eq!(kind(&d), "allow", "{cmd:?}: {d:?}");
    }
    // A rule that names the flag itself is the user's explicit choice.
    let p = policy(
        PermissionMode::Default,
        &["bash(cargo test --config:*)"],
        &[],
    );
    assert_eq!(kind(&decide(&p, "cargo test --config x")), "allow");
}

/// The text the model gets for one call under the headless approver, and whether it ran.
async fn headless(tool: Fake, policy: Policy, args: Value) -> (String, usize) {
    let name = tool.name;
    let (mut agent, runs) = agent_with(
        tool,
        policy,
        Arc::new(HeadlessApprover),
        vec![script::tool_call("c1", name, args), script::text("ok")],
    );
    agent
        .run_turn(vec![ContentBlock::text("go")], CancellationToken::new())
        .await;
    (last_result(&agent).0, runs.load(Ordering::SeqCst))
}

/// Issue 13, item 11: what headless tells the model says what happened and the remedy that
/// fits: accept-edits only helps edits; commands need an allow rule or bypass.
#[tokio::test]
async fn issue_13_headless_says_what_happened_and_what_would_help() {
    // A command in default mode: the mode, and an allow rule or bypass (not accept-edits).
    let (text, runs) = headless(
        bash(),
        policy(PermissionMode::Default, &[], &[]),
        json!({"command": "cargo test"}),
    )
    .await;
    assert_eq!(runs, 0);
    for part in [
        "not allowed by the permission mode (default)",
        "bash(cargo test:*)",
        "--permission-mode bypass",
        "headless",
    ] {
        assert!(text.contains(part), "{part:?} missing: {text}");
    }
    assert!(
        !text.contains("Re-run with --permission-mode accept-edits"),
        "{text}"
    );
    assert!(!text.contains("user declined"), "{text}");
    // The same command in accept-edits: that mode does not cover commands.
    let (text, _) = headless(
        bash(),
        policy(PermissionMode::AcceptEdits, &[], &[]),
        json!({"command": "cargo test"}),
    )
    .await;
    assert!(
        text.contains("not allowed by the permission mode (accept-edits)")
            && text.contains("accept-edits covers file edits, not commands"),
        "{text}"
    );
    // An edit in default mode: accept-edits is the remedy.
    let (text, _) = headless(
        edit(),
        policy(PermissionMode::Default, &[], &[]),
        json!({"file_path": "src/a.rs"}),
    )
    .await;
    assert!(
        text.contains("not allowed by the permission mode (default)")
            && text.contains("Re-run with --permission-mode accept-edits"),
        "{text}"
    );
    // Outside the workspace: no mode helps.
    let (text, _) = headless(
        read(),
        policy(PermissionMode::Bypass, &[], &[]),
        json!({"file_path": "/etc/passwd"}),
    )
    .await;
    assert!(text.contains("outside the workspace"), "{text}");
    assert!(!text.contains("accept-edits"), "{text}");
    // A deny rule: which rule.
    let (text, runs) = headless(
        bash(),
        policy(PermissionMode::Bypass, &[], &["bash(rm:*)"]),
        json!({"command": "env rm -rf x"}),
    )
    .await;
    assert_eq!(runs, 0);
    assert!(text.contains("denied by the rule bash(rm:*)"), "{text}");
    // A flag a prefix rule does not cover: which flag and which rule.
    let (text, _) = headless(
        bash(),
        policy(PermissionMode::Default, &["bash(cargo test:*)"], &[]),
        json!({"command": "cargo test --config x"}),
    )
    .await;
    assert!(
        text.contains("--config") && text.contains("bash(cargo test:*)"),
        "{text}"
    );
}
