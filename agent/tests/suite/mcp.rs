//! MCP against real servers (installed by `scripts/install-deps.sh --tests`): npm's
//! server-everything (stdio and streamable HTTP) and server-filesystem, PyPI's mcp-server-git
//! and mcp-server-time. Each test tries to break a promise the README makes: a server that
//! dies, hangs, exits at once, floods, forks helpers that ignore SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anvil_agent::mcp::{
    AcceptDefaults, ConnectOptions, Decline, Deferral, Elicitor, McpServers, ServerStatus,
};
use anvil_agent::registry::ToolSource;
use anvil_agent::secrets::{ChildEnv, Redactor};
use anvil_agent::{ToolContext, ToolRegistry};
use anvil_llm::ContentBlock;
use anvil_llm::mcp_config::McpServerConfig;
use anvil_test_support::mcp;
use anvil_test_support::poll::poll_until_async;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// `kill_all_services` kills every server of this process: the test that calls it takes this
/// for writing, every other test here for reading.
static SERVICES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

fn options(workspace: &Path, elicitor: Arc<dyn Elicitor>) -> ConnectOptions {
    ConnectOptions {
        workspace: workspace.to_path_buf(),
        cwd: std::env::temp_dir(),
        env: ChildEnv::default().vars(),
        redactor: Arc::new(Redactor::default()),
        sandbox: None,
        elicitor,
    }
}

fn start(workspace: &Path, servers: &[(&str, McpServerConfig)]) -> Arc<McpServers> {
    start_with(workspace, servers, Arc::new(Decline), Deferral::default())
}

fn start_with(
    workspace: &Path,
    servers: &[(&str, McpServerConfig)],
    elicitor: Arc<dyn Elicitor>,
    deferral: Deferral,
) -> Arc<McpServers> {
    let configs: BTreeMap<String, McpServerConfig> = servers
        .iter()
        .map(|(n, c)| (n.to_string(), c.clone()))
        .collect();
    McpServers::start(&configs, options(workspace, elicitor), deferral)
}

fn registry(servers: &Arc<McpServers>) -> ToolRegistry {
    let mut r = ToolRegistry::new();
    r.add_source(Arc::clone(servers) as Arc<dyn ToolSource>);
    r
}

fn status(servers: &McpServers, name: &str) -> ServerStatus {
    servers
        .statuses()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, s)| s)
        .unwrap()
}

async fn call(r: &ToolRegistry, name: &str, args: Value) -> (String, bool, Vec<ContentBlock>) {
    let d = r
        .dispatch("c1", name, &args, &ToolContext::new(std::env::temp_dir()))
        .await;
    match d.result {
        ContentBlock::ToolResult {
            content, is_error, ..
        } => (content, is_error, d.images),
        other => panic!("{other:?}"),
    }
}

/// Whether a process is alive (not a zombie we could still signal).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.split_whitespace().nth(2).is_none_or(|st| st != "Z"))
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_real_servers_connect_concurrently_and_their_tools_are_called_by_exposed_name() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::write(ws.join("hello.txt"), "hi there\n").unwrap();
    std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&ws)
        .status()
        .unwrap();
    // 43 tools: past the default deferral (30); this test offers them all.
    let servers = start_with(
        &ws,
        &[
            ("everything", mcp::everything()),
            ("fs", mcp::filesystem(&ws)),
            ("git", mcp::python("mcp_server_git", &[])),
            ("time", mcp::python("mcp_server_time", &[])),
        ],
        Arc::new(Decline),
        Deferral {
            max_tools: 100,
            max_spec_bytes: 1 << 20,
        },
    );
    servers.wait_started().await;
    let counts: BTreeMap<String, ServerStatus> = servers.statuses().into_iter().collect();
    for (name, n) in [("everything", 15), ("fs", 14), ("git", 12), ("time", 2)] {
        assert_eq!(
            counts[name],
            ServerStatus::Connected { tools: n },
            "{name}: {:?}",
            servers.stderr(name)
        );
    }
    let r = registry(&servers);
    let names = r.names();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "offered sorted by name");
    assert!(names.contains(&"mcp__fs__list_directory".to_string()));

    let (text, is_error, _) = call(&r, "mcp__everything__echo", json!({"message": "hi"})).await;
    assert_eq!((text.as_str(), is_error), ("Echo: hi", false));
    let (text, is_error, _) = call(
        &r,
        "mcp__fs__read_text_file",
        json!({"path": ws.join("hello.txt")}),
    )
    .await;
    assert!(!is_error && text.contains("hi there"), "{text}");
    let (text, is_error, _) = call(
        &r,
        "mcp__time__get_current_time",
        json!({"timezone": "UTC"}),
    )
    .await;
    assert!(
        !is_error && text.contains("\"timezone\": \"UTC\""),
        "{text}"
    );
    let (text, is_error, _) = call(&r, "mcp__git__git_status", json!({"repo_path": ws})).await;
    assert!(!is_error && text.contains("hello.txt"), "{text}");
    servers.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_images_structured_content_errors_and_roots() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let servers = start(
        &ws,
        &[
            ("everything", mcp::everything()),
            ("fs", mcp::filesystem(&ws)),
        ],
    );
    servers.wait_started().await;
    let r = registry(&servers);

    // An image reaches the model as an image block, never as base64 text.
    let (text, is_error, images) = call(&r, "mcp__everything__get-tiny-image", json!({})).await;
    assert!(!is_error, "{text}");
    assert_eq!(images.len(), 1);
    let ContentBlock::Image { media_type, data } = &images[0] else {
        panic!("{images:?}")
    };
    assert_eq!(media_type, "image/png");
    assert!(
        !text.contains(data.as_str()) && text.contains("[image: image/png"),
        "{text}"
    );

    // structuredContent is checked against the tool's outputSchema, and shown.
    let (text, is_error, _) = call(
        &r,
        "mcp__everything__get-structured-content",
        json!({"location": "New York"}),
    )
    .await;
    assert!(!is_error, "{text}");
    assert!(text.contains("temperature"), "{text}");

    // An isError result is an error result, and the next call works.
    let (text, is_error, _) = call(
        &r,
        "mcp__fs__read_text_file",
        json!({"path": "/etc/passwd"}),
    )
    .await;
    assert!(
        is_error && text.contains("outside allowed directories"),
        "{text}"
    );
    // A JSON-RPC error (an unknown argument shape the server rejects) is an error result too.
    let (text, is_error, _) = call(&r, "mcp__everything__get-sum", json!({"a": "x"})).await;
    assert!(is_error, "{text}");

    // Resource links are shown with uri and name.
    let (text, _, _) = call(
        &r,
        "mcp__everything__get-resource-links",
        json!({"count": 2}),
    )
    .await;
    assert!(text.contains("[resource link: "), "{text}");

    // roots/list answers the workspace.
    let (text, _, _) = call(&r, "mcp__everything__get-roots-list", json!({})).await;
    let root = url::Url::from_directory_path(&ws).unwrap().to_string();
    assert!(text.contains(root.trim_end_matches('/')), "{text}");
    servers.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_relists_and_http_relists_once_after_connecting() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let http = mcp::HttpEverything::start();
    let mut over_http = McpServerConfig {
        url: Some(http.url()),
        enabled: true,
        ..Default::default()
    };
    over_http.startup_timeout_secs = Some(20);
    let servers = start(
        dir.path(),
        &[("stdio", mcp::everything()), ("http", over_http)],
    );
    servers.wait_started().await;
    // server-everything registers its conditional tools after `initialized` and says so with
    // notifications/tools/list_changed: anvil lists again.
    poll_until_async(
        Duration::from_secs(10),
        "a re-list after list_changed",
        || async { (servers.listings("stdio") >= 2).then_some(()) },
    )
    .await;
    poll_until_async(Duration::from_secs(10), "the HTTP re-list", || async {
        (servers.listings("http") >= 2).then_some(())
    })
    .await;
    assert_eq!(
        status(&servers, "http"),
        ServerStatus::Connected { tools: 15 }
    );
    let r = registry(&servers);
    let (text, is_error, _) = call(&r, "mcp__http__echo", json!({"message": "over http"})).await;
    assert_eq!((text.as_str(), is_error), ("Echo: over http", false));

    // Shutdown ends the HTTP session with a DELETE.
    servers.shutdown(Duration::from_secs(2)).await;
    poll_until_async(Duration::from_secs(5), "the session's DELETE", || async {
        http.output()
            .iter()
            .any(|l| l.contains("session termination request"))
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_is_cancelled_but_progress_keeps_it_alive() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = mcp::everything();
    config.tool_timeout_secs = Some(1);
    let servers = start(dir.path(), &[("ev", config)]);
    servers.wait_started().await;
    let r = registry(&servers);
    let started = Instant::now();
    let (text, is_error, _) = call(
        &r,
        "mcp__ev__trigger-long-running-operation",
        json!({"duration": 6, "steps": 1}),
    )
    .await;
    assert!(is_error && text.contains("no answer within 1s"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // Progress every half second resets the 1 s idle timer: a 3 s call completes.
    let (text, is_error, _) = call(
        &r,
        "mcp__ev__trigger-long-running-operation",
        json!({"duration": 3, "steps": 6}),
    )
    .await;
    assert!(!is_error && text.contains("completed"), "{text}");
    // The server still answers after the cancelled call.
    let (text, _, _) = call(&r, "mcp__ev__echo", json!({"message": "still here"})).await;
    assert_eq!(text, "Echo: still here");
    servers.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_turn_cancels_the_call_at_once() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let servers = start(dir.path(), &[("ev", mcp::everything())]);
    servers.wait_started().await;
    let r = registry(&servers);
    let cancel = CancellationToken::new();
    let ctx = ToolContext {
        cwd: dir.path().to_path_buf(),
        cancel: cancel.clone(),
        progress: None,
    };
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
        })
    };
    let started = Instant::now();
    let d = r
        .dispatch(
            "c1",
            "mcp__ev__trigger-long-running-operation",
            &json!({"duration": 20, "steps": 20}),
            &ctx,
        )
        .await;
    canceller.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let ContentBlock::ToolResult {
        content, is_error, ..
    } = d.result
    else {
        panic!()
    };
    assert!(is_error && content.contains("cancelled"), "{content}");
    servers.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_mid_session_is_dead_within_a_second_and_its_tools_return_errors() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let mut config = mcp::everything();
    let program = config.command.take().unwrap();
    config.command = Some("sh".into());
    config.args = vec![
        "-c".into(),
        format!("echo $$ > {}; exec {program}", pidfile.display()),
    ];
    let servers = start(dir.path(), &[("ev", config), ("other", mcp::everything())]);
    servers.wait_started().await;
    let r = registry(&servers);
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    // A call in flight when the server dies ends, it does not hang.
    let busy = {
        let servers = Arc::clone(&servers);
        tokio::spawn(async move {
            let r = registry(&servers);
            call(
                &r,
                "mcp__ev__trigger-long-running-operation",
                json!({"duration": 30, "steps": 30}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    poll_until_async(Duration::from_secs(1), "the server marked dead", || async {
        matches!(status(&servers, "ev"), ServerStatus::Dead { .. }).then_some(())
    })
    .await;
    let (text, is_error, _) = tokio::time::timeout(Duration::from_secs(2), busy)
        .await
        .expect("the call in flight hung")
        .unwrap();
    assert!(is_error && text.contains("gone"), "{text}");
    assert!(killed.elapsed() < Duration::from_secs(2));
    let (text, is_error, _) = call(&r, "mcp__ev__echo", json!({"message": "x"})).await;
    assert!(is_error && text.contains("killed by signal 9"), "{text}");
    // The other server is untouched.
    let (text, _, _) = call(&r, "mcp__other__echo", json!({"message": "x"})).await;
    assert_eq!(text, "Echo: x");
    servers.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_servers_fail_clearly_and_the_good_one_still_works() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let exits = McpServerConfig {
        command: Some("sh".into()),
        args: vec![
            "-c".into(),
            "echo 'fatal: no API token configured' >&2; exit 3".into(),
        ],
        enabled: true,
        ..Default::default()
    };
    let hangs = McpServerConfig {
        command: Some("sleep".into()),
        args: vec!["60".into()],
        startup_timeout_secs: Some(2),
        enabled: true,
        ..Default::default()
    };
    let missing = McpServerConfig {
        command: Some("/nonexistent/mcp-server".into()),
        enabled: true,
        ..Default::default()
    };
    let disabled = McpServerConfig {
        enabled: false,
        ..mcp::everything()
    };
    let started = Instant::now();
    let servers = start(
        dir.path(),
        &[
            ("exits", exits),
            ("hangs", hangs),
            ("missing", missing),
            ("off", disabled),
            ("good", mcp::everything()),
        ],
    );
    // The one that exits at once is reported within a second, with its stderr.
    poll_until_async(
        Duration::from_secs(1),
        "the exited server reported",
        || async {
            match status(&servers, "exits") {
                ServerStatus::Failed { reason } => Some(reason),
                _ => None,
            }
        },
    )
    .await;
    let ServerStatus::Failed { reason } = status(&servers, "exits") else {
        unreachable!()
    };
    assert!(
        reason.contains("exited with code 3") && reason.contains("no API token configured"),
        "{reason}"
    );
    servers.wait_started().await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(status(&servers, "hangs"), ServerStatus::Failed { reason } if reason.contains("within 2s")),
    );
    assert!(
        matches!(status(&servers, "missing"), ServerStatus::Failed { reason } if reason.contains("could not start")),
        "{:?}",
        status(&servers, "missing")
    );
    assert_eq!(status(&servers, "off"), ServerStatus::Disabled);
    assert_eq!(
        status(&servers, "good"),
        ServerStatus::Connected { tools: 15 }
    );
    servers.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_takes_one_grace_and_leaves_no_descendant_even_one_ignoring_sigterm() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let program = mcp::everything().command.unwrap();
    // An npx-style wrapper: a shell that ignores SIGTERM and forks the real server.
    let wrapped = |n: usize| McpServerConfig {
        command: Some("sh".into()),
        args: vec![
            "-c".into(),
            format!(
                "trap '' TERM; echo $$ > {}/pid{n}; {program}; echo ended",
                dir.path().display()
            ),
        ],
        enabled: true,
        ..Default::default()
    };
    let servers = start(
        dir.path(),
        &[("a", wrapped(1)), ("b", wrapped(2)), ("c", wrapped(3))],
    );
    servers.wait_started().await;
    let mut pids = Vec::new();
    for n in 1..=3 {
        let shell: i32 = std::fs::read_to_string(dir.path().join(format!("pid{n}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        pids.push(shell);
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .unwrap_or_default();
        pids.extend(
            children
                .split_whitespace()
                .map(|c| c.parse::<i32>().unwrap()),
        );
    }
    assert!(pids.len() >= 6, "wrappers and their servers: {pids:?}");
    // One server is busy with a long call.
    let busy = {
        let servers = Arc::clone(&servers);
        tokio::spawn(async move {
            let r = registry(&servers);
            call(
                &r,
                "mcp__a__trigger-long-running-operation",
                json!({"duration": 30, "steps": 30}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    servers.shutdown(Duration::from_secs(1)).await;
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(2000),
        "3 servers, one busy: {took:?}"
    );
    poll_until_async(Duration::from_secs(1), "every descendant gone", || async {
        pids.iter().all(|&p| !alive(p)).then_some(())
    })
    .await;
    let (text, is_error, _) = tokio::time::timeout(Duration::from_secs(2), busy)
        .await
        .expect("the busy call hung after shutdown")
        .unwrap();
    assert!(is_error, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_is_answered_by_the_elicitor_headless_declines() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let declines = start(dir.path(), &[("ev", mcp::everything())]);
    let accepts = start_with(
        dir.path(),
        &[("ev", mcp::everything())],
        Arc::new(AcceptDefaults),
        Deferral::default(),
    );
    declines.wait_started().await;
    accepts.wait_started().await;
    let (text, is_error, _) = call(
        &registry(&declines),
        "mcp__ev__trigger-elicitation-request",
        json!({}),
    )
    .await;
    assert!(
        !is_error && text.to_lowercase().contains("decline"),
        "{text}"
    );
    let (text, is_error, _) = call(
        &registry(&accepts),
        "mcp__ev__trigger-elicitation-request",
        json!({}),
    )
    .await;
    assert!(
        !is_error && text.to_lowercase().contains("accept"),
        "{text}"
    );
    declines.shutdown(Duration::from_secs(1)).await;
    accepts.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_deferral_size_only_tool_search_is_offered_and_a_search_activates_tools() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    // The four test servers: 43 tools, past the default deferral of 30.
    let servers = start(
        &ws,
        &[
            ("ev", mcp::everything()),
            ("fs", mcp::filesystem(&ws)),
            ("git", mcp::python("mcp_server_git", &[])),
            ("time", mcp::python("mcp_server_time", &[])),
        ],
    );
    servers.wait_started().await;
    assert!(servers.deferring());
    let r = registry(&servers);
    let all: Vec<anvil_llm::ToolSpec> = servers
        .tools()
        .iter()
        .map(|t| anvil_llm::ToolSpec {
            name: anvil_agent::Tool::name(t.as_ref()).to_string(),
            description: anvil_agent::Tool::description(t.as_ref()).to_string(),
            input_schema: anvil_agent::Tool::input_schema(t.as_ref()),
        })
        .collect();
    let full = serde_json::to_string(&all).unwrap().len();
    let specs = r.specs();
    assert_eq!(
        specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        ["tool_search"]
    );
    let deferred = serde_json::to_string(&specs).unwrap().len();
    eprintln!(
        "deferral: {} tools, {full} bytes of specs offered as {deferred} (~{} tokens saved a request)",
        all.len(),
        (full - deferred) / 4
    );
    assert!(deferred * 5 < full, "deferred {deferred} bytes vs {full}");
    assert!(specs[0].description.contains("mcp__time__convert_time"));
    let before = r.generation();
    let (text, is_error, _) = call(&r, "tool_search", json!({"query": "convert time zone"})).await;
    assert!(!is_error, "{text}");
    assert!(text.contains("mcp__time__convert_time"), "{text}");
    assert_ne!(r.generation(), before, "the active set changed");
    let names: Vec<String> = r.specs().into_iter().map(|s| s.name).collect();
    assert!(
        names.contains(&"mcp__time__convert_time".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&"tool_search".to_string()));
    servers.shutdown(Duration::from_secs(1)).await;
}

fn trusted(mut c: McpServerConfig) -> McpServerConfig {
    c.trusted = true;
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_judge_mcp_tools_by_exposed_name_and_annotations_never_widen_a_rule() {
    let _services = SERVICES.read().await;
    use anvil_agent::permissions::{Decision, PermissionMode, Policy, Rule};
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let servers = start(
        &ws,
        &[
            ("fs", mcp::filesystem(&ws)),
            ("trustedfs", trusted(mcp::filesystem(&ws))),
        ],
    );
    servers.wait_started().await;
    let tool = |server: &str, name: &str| servers.tool(server, name).unwrap();
    let read = json!({"path": ws.join("x")});
    let policy = Policy::new(PermissionMode::Default, &ws);
    // readOnlyHint from an untrusted server is only a claim: asked about.
    assert!(matches!(
        policy.decide(tool("fs", "read_text_file").as_ref(), &read),
        Decision::Ask { .. }
    ));
    // From a trusted server it is believed…
    assert_eq!(
        policy.decide(tool("trustedfs", "read_text_file").as_ref(), &read),
        Decision::Allow
    );
    // …but a write without the hint is unknown effects, asked about even when trusted.
    assert!(matches!(
        policy.decide(tool("trustedfs", "write_file").as_ref(), &read),
        Decision::Ask { .. }
    ));
    // Plan mode denies unknown effects.
    let plan = Policy::new(PermissionMode::Plan, &ws);
    assert!(matches!(
        plan.decide(tool("fs", "write_file").as_ref(), &read),
        Decision::Deny { .. }
    ));
    // A deny rule wins over a trusted readOnlyHint; a wildcard names one server only.
    let mut denying = Policy::new(PermissionMode::Bypass, &ws);
    denying
        .deny
        .push(Rule::parse("mcp__trustedfs__read_text_file").unwrap());
    assert!(matches!(
        denying.decide(tool("trustedfs", "read_text_file").as_ref(), &read),
        Decision::Deny { .. }
    ));
    // A deny rule with a pattern cannot be checked against a tool that has no subject: it
    // applies, it is not skipped.
    let mut patterned = Policy::new(PermissionMode::Bypass, &ws);
    patterned
        .deny
        .push(Rule::parse("mcp__fs__write_file(*)").unwrap());
    assert!(matches!(
        patterned.decide(tool("fs", "write_file").as_ref(), &read),
        Decision::Deny { .. }
    ));
    let mut allowing = Policy::new(PermissionMode::Default, &ws);
    allowing.allow.push(Rule::parse("mcp__fs__*").unwrap());
    assert_eq!(
        allowing.decide(tool("fs", "write_file").as_ref(), &read),
        Decision::Allow
    );
    assert!(matches!(
        allowing.decide(tool("trustedfs", "write_file").as_ref(), &read),
        Decision::Ask { .. }
    ));
    servers.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_calls_a_server_tool_and_its_image_reaches_the_model_as_an_image_block() {
    let _services = SERVICES.read().await;
    use anvil_agent::approval::HeadlessApprover;
    use anvil_agent::permissions::{PermissionMode, Policy};
    use anvil_agent::{Agent, AgentConfig, EventSink, TurnOutcome};
    use anvil_llm::Role;
    use anvil_llm::testing::{ScriptedProvider, script};

    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let servers = start(
        &ws,
        &[("ev", mcp::everything()), ("fs", mcp::filesystem(&ws))],
    );
    servers.wait_started().await;
    let provider = Arc::new(ScriptedProvider::new(vec![
        script::tool_calls(&[
            ("c1", "mcp__ev__get-tiny-image", json!({})),
            (
                "c2",
                "mcp__fs__write_file",
                json!({"path": ws.join("f"), "content": "x"}),
            ),
        ]),
        script::text("done"),
    ]));
    let (sink, _events) = EventSink::channel(1024);
    let mut policy = Policy::new(PermissionMode::Default, &ws);
    policy
        .allow
        .push(anvil_agent::permissions::Rule::parse("mcp__ev__*").unwrap());
    let mut agent = Agent::new(
        provider.clone(),
        Arc::new(registry(&servers)),
        AgentConfig {
            model: "scripted".into(),
            ..AgentConfig::default()
        },
        &ws,
        sink,
    )
    .with_permissions(policy, Arc::new(HeadlessApprover));
    let outcome = agent
        .run_turn(
            vec![ContentBlock::text("show me")],
            CancellationToken::new(),
        )
        .await;
    assert_eq!(outcome, TurnOutcome::Done);
    // The first request offered the servers' tools by exposed name, sorted.
    let offered: Vec<String> = provider.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(
        offered.contains(&"mcp__ev__get-tiny-image".to_string()),
        "{offered:?}"
    );
    let results = agent
        .messages()
        .iter()
        .rev()
        .find(|m| {
            m.role == Role::User
                && m.content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        })
        .unwrap()
        .clone();
    let kinds: Vec<String> = results
        .content
        .iter()
        .map(|b| b.kind().to_string())
        .collect();
    assert_eq!(
        kinds,
        ["tool_result", "tool_result", "image"],
        "results first, then the image"
    );
    let ContentBlock::ToolResult {
        content, is_error, ..
    } = &results.content[1]
    else {
        panic!()
    };
    assert!(
        *is_error && content.contains("Not run: what mcp__fs__write_file does is unknown"),
        "untrusted write denied headless: {content}"
    );
    assert!(!ws.join("f").exists());
    servers.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_20_mib_response_is_refused_cleanly_and_the_server_keeps_working() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::write(ws.join("big.txt"), "z".repeat(20 * 1024 * 1024)).unwrap();
    let servers = start(&ws, &[("fs", mcp::filesystem(&ws))]);
    servers.wait_started().await;
    let r = registry(&servers);
    let started = Instant::now();
    let (text, is_error, _) = call(
        &r,
        "mcp__fs__read_text_file",
        json!({"path": ws.join("big.txt")}),
    )
    .await;
    assert!(
        is_error && text.contains("it was refused"),
        "{}",
        &text[..text.len().min(300)]
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    std::fs::write(ws.join("small.txt"), "small").unwrap();
    let (text, is_error, _) = call(
        &r,
        "mcp__fs__read_text_file",
        json!({"path": ws.join("small.txt")}),
    )
    .await;
    assert_eq!((text.as_str(), is_error), ("small", false));
    servers.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_progress_reaches_the_front_end_as_tool_progress_events() {
    let _services = SERVICES.read().await;
    use anvil_agent::approval::HeadlessApprover;
    use anvil_agent::permissions::{PermissionMode, Policy};
    use anvil_agent::{Agent, AgentConfig, AgentEvent, EventSink, TurnOutcome};
    use anvil_llm::testing::{ScriptedProvider, script};

    let dir = tempfile::tempdir().unwrap();
    let servers = start(dir.path(), &[("ev", mcp::everything())]);
    servers.wait_started().await;
    let provider = Arc::new(ScriptedProvider::new(vec![
        script::tool_call(
            "call_7",
            "mcp__ev__trigger-long-running-operation",
            json!({"duration": 1, "steps": 4}),
        ),
        script::text("done"),
    ]));
    let (sink, mut events) = EventSink::channel(1024);
    let mut agent = Agent::new(
        provider,
        Arc::new(registry(&servers)),
        AgentConfig {
            model: "scripted".into(),
            ..AgentConfig::default()
        },
        dir.path(),
        sink,
    )
    .with_permissions(
        Policy::new(PermissionMode::Bypass, dir.path()),
        Arc::new(HeadlessApprover),
    );
    let outcome = agent
        .run_turn(vec![ContentBlock::text("go")], CancellationToken::new())
        .await;
    assert_eq!(outcome, TurnOutcome::Done);
    drop(agent);
    let mut progress = Vec::new();
    while let Some(e) = events.recv().await {
        if let AgentEvent::ToolProgress {
            id,
            progress: p,
            total,
            ..
        } = e
        {
            progress.push((id, p, total));
        }
    }
    assert!(progress.len() >= 3, "{progress:?}");
    assert!(
        progress
            .iter()
            .all(|(id, _, total)| id == "call_7" && *total == Some(4.0))
    );
    servers.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_http_session_is_reinitialized_once_and_never_in_a_loop() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let http = mcp::HttpEverything::start();
    let upstream = http
        .url()
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let proxy = mcp::ExpiringProxy::start(upstream).await;
    let config = McpServerConfig {
        url: Some(proxy.url()),
        enabled: true,
        startup_timeout_secs: Some(20),
        tool_timeout_secs: Some(10),
        ..Default::default()
    };
    let servers = start(dir.path(), &[("web", config)]);
    servers.wait_started().await;
    assert_eq!(
        status(&servers, "web"),
        ServerStatus::Connected { tools: 15 }
    );
    let r = registry(&servers);
    assert_eq!(proxy.initializes(), 1);

    // The session expires: the call goes through on a new one, transparently.
    proxy.expire_next(1);
    let (text, is_error, _) = call(&r, "mcp__web__echo", json!({"message": "again"})).await;
    assert_eq!((text.as_str(), is_error), ("Echo: again", false));
    assert_eq!(proxy.not_found(), 1);
    assert_eq!(proxy.initializes(), 2, "one re-initialization");

    // A server that forgets every session: an error result, not a loop.
    proxy.expire_next(1000);
    let started = Instant::now();
    let (text, is_error, _) = call(&r, "mcp__web__echo", json!({"message": "x"})).await;
    assert!(is_error, "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "{:?}",
        started.elapsed()
    );
    assert!(
        proxy.initializes() <= 4,
        "re-initialized {} times",
        proxy.initializes()
    );
    servers.shutdown(Duration::from_secs(1)).await;
}

fn hostile(mode: &str) -> McpServerConfig {
    McpServerConfig {
        command: Some("/usr/bin/python3".into()),
        args: vec![
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/hostile_mcp_server.py"
            )
            .into(),
            mode.into(),
        ],
        enabled: true,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_runs_in_a_session_of_its_own_without_a_controlling_terminal() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let servers = start(dir.path(), &[("h", hostile("session-leader"))]);
    servers.wait_started().await;
    let (text, is_error, _) = call(&registry(&servers), "mcp__h__whoami", json!({})).await;
    assert!(!is_error, "{text}");
    assert_eq!(text, "session leader; no controlling terminal");
    servers.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_pages_forever_fails_with_bounded_memory() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let servers = start(dir.path(), &[("h", hostile("page-forever"))]);
    let started = Instant::now();
    servers.wait_started().await;
    let ServerStatus::Failed { reason } = status(&servers, "h") else {
        panic!("{:?}", status(&servers, "h"))
    };
    assert!(reason.contains("did not end after 100 pages"), "{reason}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_in_a_tools_description_and_schema_are_redacted_before_the_model_sees_them() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = hostile("secret-description");
    config
        .env
        .insert("SERVICE_TOKEN".into(), "svc-0123456789abcdef".into());
    let redactor = Arc::new(Redactor::default());
    // What the runner does with a server's secret-looking env values.
    redactor.register("SERVICE_TOKEN", "svc-0123456789abcdef");
    let configs = BTreeMap::from([("h".to_string(), config)]);
    let servers = McpServers::start(
        &configs,
        ConnectOptions {
            redactor,
            ..options(dir.path(), Arc::new(Decline))
        },
        Deferral::default(),
    );
    servers.wait_started().await;
    let specs = serde_json::to_string(&registry(&servers).specs()).unwrap();
    assert!(specs.contains("mcp__h__leak"), "{specs}");
    assert!(!specs.contains("svc-0123456789abcdef"), "{specs}");
    assert!(specs.contains("[REDACTED:SERVICE_TOKEN]"), "{specs}");
    assert_eq!(
        status(&servers, "h"),
        ServerStatus::Connected { tools: 1 },
        "the tool named after the secret is not offered"
    );
    servers.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_is_not_declared_and_a_server_that_asks_gets_method_not_found() {
    let _services = SERVICES.read().await;
    let dir = tempfile::tempdir().unwrap();
    let servers = start(dir.path(), &[("h", hostile("ask-sampling"))]);
    servers.wait_started().await;
    let started = Instant::now();
    let (text, is_error, _) = call(&registry(&servers), "mcp__h__whoami", json!({})).await;
    assert!(!is_error, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["code"], -32601, "{text}");
    assert!(started.elapsed() < Duration::from_secs(2));
    servers.shutdown(Duration::from_secs(1)).await;
}

/// What the panic hook and the signal handlers call: every live server group is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_all_services_leaves_no_server_process() {
    let _services = SERVICES.write().await;
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let program = mcp::everything().command.unwrap();
    let config = McpServerConfig {
        command: Some("sh".into()),
        args: vec![
            "-c".into(),
            format!(
                "trap '' TERM; echo $$ > {}; {program}; true",
                pidfile.display()
            ),
        ],
        enabled: true,
        ..Default::default()
    };
    let servers = start(dir.path(), &[("ev", config)]);
    servers.wait_started().await;
    let shell: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
    let mut pids = vec![shell];
    pids.extend(
        children
            .split_whitespace()
            .map(|c| c.parse::<i32>().unwrap()),
    );
    assert!(pids.len() >= 2, "{pids:?}");
    anvil_agent::process::kill_all_services();
    poll_until_async(
        Duration::from_secs(1),
        "every server process gone",
        || async { pids.iter().all(|&p| !alive(p)).then_some(()) },
    )
    .await;
    drop(servers);
}
