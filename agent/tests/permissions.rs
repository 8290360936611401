//! Permissions: rule parsing, split_shell, the decision order of build guide 11.1 / 11.B, and
//! the approval round trip in the agent loop (denied calls never run).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anvil_agent::approval::{
    ApprovalDecision, HEADLESS_DENIAL, HeadlessApprover, ScriptedApprover,
};
use anvil_agent::permissions::{Decision, PermissionMode, Policy, Rule, split_shell};
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
    async fn call(&self, _: Value, _: &ToolContext) -> Result<String, ToolError> {
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
    assert_eq!(
        split_shell("a && b || c; d | e & f\ng").unwrap(),
        ["a", "b", "c", "d", "e", "f", "g"]
    );
    assert_eq!(
        split_shell("echo 'a && b' \"; c\"").unwrap(),
        ["echo 'a && b' \"; c\""]
    );
    assert!(split_shell("diff <(ls a) <(ls b)").is_err());
    assert!(split_shell("(cd x && rm y)").is_err());
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
    // Even bypass asks about a line rules cannot judge.
    let p = policy(PermissionMode::Bypass, &[], &[]);
    assert_eq!(
        kind(&p.decide(&bash(), &json!({"command": "echo $(id)"}))),
        "ask"
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
    let Decision::Ask { reason } =
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
    assert!(text.contains(HEADLESS_DENIAL), "{text}");
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
