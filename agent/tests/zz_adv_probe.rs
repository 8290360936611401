#![allow(clippy::unwrap_used, clippy::expect_used)]
use std::sync::Arc;
use std::time::Duration;
use anvil_agent::process::{self, ProcessSpec};
use anvil_agent::sandbox::limits::Limits;
use anvil_agent::sandbox::{Sandbox, SandboxPolicy};
use anvil_agent::secrets::{ChildEnv, Redactor};
use anvil_agent::tools::bash::Bash;
use anvil_agent::{ToolContext, ToolRegistry};
use anvil_llm::ContentBlock;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn policy() -> SandboxPolicy {
    match std::env::var("PROBE_POLICY").as_deref() {
        Ok("net") => SandboxPolicy::WorkspaceWrite { network: true },
        Ok("ro") => SandboxPolicy::ReadOnly,
        _ => SandboxPolicy::WorkspaceWrite { network: false },
    }
}
fn limits() -> Limits {
    let mut l = Limits::default();
    if let Ok(m) = std::env::var("PROBE_MEM_MB") { l.memory_bytes = Some(m.parse::<u64>().unwrap() << 20); }
    if std::env::var("PROBE_NOLIMITS").is_ok() { l = Limits::NONE; }
    l
}

#[tokio::test]
async fn tool() {
    let Ok(cmd) = std::env::var("PROBE_CMD") else { return };
    let ws = std::env::var("PROBE_WS").unwrap();
    let mut sandbox = Sandbox::new(policy(), &ws).with_limits(limits());
    if let Ok(h) = std::env::var("PROBE_HOME") { sandbox = sandbox.with_home(h); }
    let secret = std::env::var("PROBE_SECRET").unwrap_or("sk-ant-api03-SECRETVALUE1234567890abcdef".into());
    let env = ChildEnv::default().with_base(vec![
        ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".into(), std::env::var("HOME").unwrap_or_default()),
    ]);
    let red = Arc::new(Redactor::from_vars(vec![("ANTHROPIC_API_KEY".to_string(), secret.clone())]));
    let mut r = ToolRegistry::new();
    r.register(Arc::new(Bash::new(env, Arc::new(sandbox)).with_redactor(red))).unwrap();
    let ctx = ToolContext::new(&ws);
    let res = r.dispatch("id", "bash", &json!({"command": cmd, "timeout_ms": 60000}), &ctx).await;
    match res {
        ContentBlock::ToolResult { content, is_error, .. } => println!("=====RESULT (is_error={is_error})=====\n{content}\n=====END====="),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn raw() {
    let Ok(cmd) = std::env::var("PROBE_RAW") else { return };
    let ws = std::env::var("PROBE_WS").unwrap();
    let mut sandbox = Sandbox::new(policy(), &ws).with_limits(limits());
    if let Ok(h) = std::env::var("PROBE_HOME") { sandbox = sandbox.with_home(h); }
    let spec = ProcessSpec::new("/bin/bash", &ws)
        .args(["-c".to_string(), cmd])
        .env(vec![("PATH".into(), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into())])
        .timeout(Duration::from_secs(60));
    let (mut spec, guard) = sandbox.wrap(spec).unwrap();
    if std::env::var("PROBE_SETPRIV").is_ok() {
        let mut args: Vec<String> = ["--reuid=65534", "--regid=65534", "--clear-groups", "--"].iter().map(|s| s.to_string()).collect();
        args.push(spec.program.clone());
        args.append(&mut spec.args);
        spec.program = "setpriv".into();
        spec.args = args;
    }
    let out = process::run(&spec, &CancellationToken::new()).await.unwrap();
    println!("=====RAW {:?}=====\n{}{}", out.termination, out.stdout.text(), out.stderr.text());
    println!("after_command: {:?}", guard.after_command());
    drop(guard);
}
