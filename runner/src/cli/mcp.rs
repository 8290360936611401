//! MCP in the `anvil` front end: starting a session's servers, `/mcp`, and the `anvil mcp`
//! commands (`list`, `call`, `conformance`).
//!
//! Servers are started in the background when a session is built ([`start`]); the REPL's
//! prompt never waits for them, `anvil -p` waits up to each server's startup timeout before
//! its first request so their tools are offered. Whatever way anvil ends — its shutdown, a
//! SIGTERM or SIGHUP, a panic — every server's process group is killed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Once};
use std::time::Duration;

use anvil_agent::mcp::{
    AcceptDefaults, ConnectOptions, Decline, Deferral, Elicitor, McpServers, ServerStatus,
};
use anvil_agent::process::kill_all_services;
use anvil_agent::secrets::{ChildEnv, Redactor, looks_secret};
use anvil_agent::{Tool, ToolContext, ToolError, ToolRegistry};
use anvil_llm::mcp_config::{McpServerConfig, McpSettings};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::cli::render::{printable, visible};
use crate::exit;

/// How long stopping all servers may take, in total.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Starts `configs`' servers for a session in `workspace` and offers their tools through
/// `tools`. `None` when no server is configured. Needs a tokio runtime (entered).
pub fn start(
    configs: &BTreeMap<String, McpServerConfig>,
    settings: McpSettings,
    workspace: &Path,
    redactor: &Arc<Redactor>,
    elicitor: Arc<dyn Elicitor>,
    tools: &mut ToolRegistry,
) -> Option<Arc<McpServers>> {
    start_in(
        configs, settings, workspace, redactor, elicitor, None, tools,
    )
}

/// An eval trial's servers (its task's): confined by `sandbox` like its commands, declining
/// every elicitation.
pub fn start_sandboxed(
    configs: &BTreeMap<String, McpServerConfig>,
    workspace: &Path,
    redactor: &Arc<Redactor>,
    sandbox: Arc<anvil_agent::sandbox::Sandbox>,
    tools: &mut ToolRegistry,
) -> Option<Arc<McpServers>> {
    start_in(
        configs,
        McpSettings::default(),
        workspace,
        redactor,
        Arc::new(Decline),
        Some(sandbox),
        tools,
    )
}

fn start_in(
    configs: &BTreeMap<String, McpServerConfig>,
    settings: McpSettings,
    workspace: &Path,
    redactor: &Arc<Redactor>,
    elicitor: Arc<dyn Elicitor>,
    sandbox: Option<Arc<anvil_agent::sandbox::Sandbox>>,
    tools: &mut ToolRegistry,
) -> Option<Arc<McpServers>> {
    if configs.is_empty() {
        return None;
    }
    // Credentials written in a server's env are redacted like the provider keys.
    for config in configs.values() {
        for (name, value) in &config.env {
            if looks_secret(name) {
                redactor.register(name, value);
            }
        }
    }
    kill_servers_on_exit();
    let sandboxed = sandbox.is_some();
    let servers = McpServers::start(
        configs,
        ConnectOptions {
            workspace: workspace.to_path_buf(),
            // A trial's servers are the task's (its repository holds them, inside the
            // sandbox); the user's run from their home, never from an untrusted repository.
            cwd: if sandboxed {
                workspace.to_path_buf()
            } else {
                std::env::var_os("HOME")
                    .map(std::path::PathBuf::from)
                    .filter(|h| h.is_absolute() && h.is_dir())
                    .unwrap_or_else(|| std::path::PathBuf::from("/"))
            },
            env: ChildEnv::default().vars(),
            redactor: Arc::clone(redactor),
            sandbox,
            elicitor,
        },
        deferral(settings),
    );
    tools.add_source(Arc::clone(&servers) as Arc<dyn anvil_agent::registry::ToolSource>);
    Some(servers)
}

/// `[mcp]`'s deferral over anvil's default.
pub fn deferral(settings: McpSettings) -> Deferral {
    let default = Deferral::default();
    Deferral {
        max_tools: settings.defer_over_tools.unwrap_or(default.max_tools),
        max_spec_bytes: settings.defer_over_bytes.unwrap_or(default.max_spec_bytes),
    }
}

/// Installs, once, the ways out that skip the shutdown: SIGTERM and SIGHUP end anvil after
/// killing the servers' groups; a panic kills them before the default hook runs.
fn kill_servers_on_exit() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            kill_all_services();
            previous(info);
        }));
        if tokio::runtime::Handle::try_current().is_ok() {
            tokio::spawn(async {
                use tokio::signal::unix::{SignalKind, signal};
                // Every signal whose default action ends the process (SIGINT is the turn's:
                // it cancels, and anvil then exits through its shutdown).
                let kinds = [
                    (SignalKind::terminate(), 15),
                    (SignalKind::hangup(), 1),
                    (SignalKind::quit(), 3),
                    (SignalKind::user_defined1(), 10),
                    (SignalKind::user_defined2(), 12),
                    (SignalKind::alarm(), 14),
                ];
                let mut streams = Vec::new();
                for (kind, number) in kinds {
                    if let Ok(s) = signal(kind) {
                        streams.push((s, number));
                    }
                }
                if streams.is_empty() {
                    return;
                }
                let waits = streams.iter_mut().map(|(s, number)| {
                    let number = *number;
                    Box::pin(async move {
                        s.recv().await;
                        number
                    })
                });
                let (number, _, _) = futures::future::select_all(waits).await;
                kill_all_services();
                std::process::exit(128 + number);
            });
        }
    });
}

/// One line per server: `name  state`, for `/mcp` and `anvil mcp list`.
pub fn status_lines(servers: &McpServers) -> Vec<String> {
    let statuses = servers.statuses();
    let width = statuses.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let mut lines: Vec<String> = statuses
        .iter()
        .map(|(name, status)| visible(&format!("{name:<width$}  {status}")))
        .collect();
    if servers.deferring() {
        lines.push(format!(
            "{} MCP tools are deferred: the model finds them with tool_search",
            servers.tools().len()
        ));
    }
    lines
}

/// The configured servers, as the session would see them (trusted project config only).
fn configured(cwd: &Path) -> Result<(BTreeMap<String, McpServerConfig>, McpSettings), String> {
    let trust = anvil_llm::config::TrustStore::load_default().map_err(|e| e.to_string())?;
    let config = anvil_llm::config::Config::load(cwd, &trust).map_err(|e| e.to_string())?;
    for key in &config.ignored {
        if key.key.starts_with("mcp_servers.") {
            eprintln!(
                "note: {} in {} was not started: {}",
                key.key,
                key.path.display(),
                key.reason
            );
        }
    }
    Ok((config.mcp_servers, config.mcp))
}

fn runtime() -> Result<tokio::runtime::Runtime, i32> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("anvil: cannot start the runtime: {e}");
            exit::FAILED
        })
}

/// `anvil mcp …`'s servers: `configs` started (outside any session, so their tools go into no
/// registry) and waited for; with the redactor their output goes through.
async fn started(
    configs: &BTreeMap<String, McpServerConfig>,
    settings: McpSettings,
    cwd: &Path,
    elicitor: Arc<dyn Elicitor>,
) -> Option<(Arc<McpServers>, Arc<Redactor>)> {
    let redactor = Arc::new(Redactor::from_env());
    let servers = start(
        configs,
        settings,
        cwd,
        &redactor,
        elicitor,
        &mut ToolRegistry::new(),
    )?;
    servers.wait_started().await;
    Some((servers, redactor))
}

/// `anvil mcp list`: starts every configured server, prints one line per server when all have
/// connected or failed, and exits (1 if any failed).
pub fn list(cwd: &Path) -> i32 {
    let (configs, settings) = match configured(cwd) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("anvil: {e}");
            return exit::CONFIG;
        }
    };
    if configs.is_empty() {
        println!(
            "no MCP servers configured (add [mcp_servers.NAME] to ~/.config/anvil/config.toml)"
        );
        return exit::DONE;
    }
    let Ok(rt) = runtime() else {
        return exit::FAILED;
    };
    rt.block_on(async {
        let Some((servers, _)) = started(&configs, settings, cwd, Arc::new(Decline)).await else {
            return exit::DONE;
        };
        let statuses = servers.statuses();
        let width = statuses.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
        for (name, status) in &statuses {
            let (state, detail) = match status {
                ServerStatus::Connected { tools } => ("connected", format!("{tools} tools")),
                ServerStatus::Failed { reason } => ("failed", reason.clone()),
                ServerStatus::Dead { reason } => ("dead", reason.clone()),
                ServerStatus::Disabled => ("disabled", String::new()),
                ServerStatus::Starting => ("starting", String::new()),
            };
            println!(
                "{}",
                visible(&format!("{name:<width$}  {state:<9}  {detail}"))
            );
        }
        servers.shutdown(SHUTDOWN_GRACE).await;
        if statuses
            .iter()
            .any(|(_, s)| matches!(s, ServerStatus::Failed { .. } | ServerStatus::Dead { .. }))
        {
            exit::FAILED
        } else {
            exit::DONE
        }
    })
}

/// `anvil mcp call SERVER TOOL --args JSON`: one call, its result on stdout (an error result
/// on stderr, exit 1). Ctrl-C cancels it (the server is told).
pub fn call(cwd: &Path, server: &str, tool: &str, args: &str) -> i32 {
    let args: Value = match serde_json::from_str(args) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => {
            eprintln!("anvil: --args must be a JSON object, like '{{\"path\": \".\"}}'");
            return exit::USAGE;
        }
        Err(e) => {
            eprintln!("anvil: --args is not JSON: {e}");
            return exit::USAGE;
        }
    };
    let (mut configs, _) = match configured(cwd) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("anvil: {e}");
            return exit::CONFIG;
        }
    };
    let Some(mut config) = configs.remove(server) else {
        let names: Vec<&String> = configs.keys().collect();
        eprintln!(
            "anvil: no MCP server named '{server}' is configured{}",
            if names.is_empty() {
                String::new()
            } else {
                format!(
                    " (configured: {})",
                    names
                        .iter()
                        .map(|n| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
        return exit::CONFIG;
    };
    config.enabled = true;
    let Ok(rt) = runtime() else {
        return exit::FAILED;
    };
    rt.block_on(async {
        let one = BTreeMap::from([(server.to_string(), config)]);
        let Some((servers, redactor)) =
            started(&one, McpSettings::default(), cwd, Arc::new(Decline)).await
        else {
            return exit::FAILED;
        };
        let code = match servers.statuses().first() {
            Some((_, ServerStatus::Connected { .. })) => match servers.tool(server, tool) {
                Some(t) => call_one(t.as_ref(), args, cwd, &redactor).await,
                None => {
                    let names: Vec<String> = servers
                        .tools()
                        .iter()
                        .map(|t| t.remote_name().to_string())
                        .collect();
                    eprintln!(
                        "anvil: server '{server}' has no tool '{tool}' (its tools: {})",
                        names.join(", ")
                    );
                    exit::USAGE
                }
            },
            Some((_, status)) => {
                eprintln!("anvil: server '{server}' {status}");
                exit::FAILED
            }
            None => exit::FAILED,
        };
        servers.shutdown(SHUTDOWN_GRACE).await;
        code
    })
}

async fn call_one(tool: &dyn Tool, args: Value, cwd: &Path, redactor: &Redactor) -> i32 {
    let cancel = CancellationToken::new();
    let ctrl_c = crate::cli::cancel_on_ctrl_c(&cancel);
    let ctx = ToolContext {
        cwd: cwd.to_path_buf(),
        cancel,
        progress: None,
    };
    let result = tool.call(args, &ctx).await;
    ctrl_c.abort();
    match result {
        Ok(out) => {
            println!("{}", printable(&redactor.redact(&out.text)));
            exit::DONE
        }
        Err(ToolError::Cancelled) => {
            eprintln!("anvil: cancelled");
            exit::CANCELLED
        }
        Err(e) => {
            eprintln!("anvil: {}", printable(&redactor.redact(&e.to_string())));
            exit::FAILED
        }
    }
}

/// `anvil mcp conformance URL`: the client behaviour the MCP conformance suite checks, with
/// anvil's real client — connect to URL (streamable HTTP), list the tools, call each with
/// arguments made from its schema, accept elicitations with their defaults, and close the
/// session. Exit 0 when every step worked.
pub fn conformance(url: &str) -> i32 {
    let Ok(rt) = runtime() else {
        return exit::FAILED;
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| std::env::temp_dir());
    rt.block_on(async {
        let config = McpServerConfig {
            url: Some(url.to_string()),
            enabled: true,
            startup_timeout_secs: Some(20),
            tool_timeout_secs: Some(20),
            ..Default::default()
        };
        let one = BTreeMap::from([("conformance".to_string(), config)]);
        let Some((servers, _)) =
            started(&one, McpSettings::default(), &cwd, Arc::new(AcceptDefaults)).await
        else {
            return exit::FAILED;
        };
        let mut code = exit::DONE;
        match servers.statuses().first() {
            Some((_, ServerStatus::Connected { .. })) => {
                for tool in servers.tools() {
                    let args = example_args(&tool.input_schema());
                    let ctx = ToolContext::new(&cwd);
                    match tool.call(args, &ctx).await {
                        Ok(out) => println!("{}: {}", tool.remote_name(), out.text),
                        Err(e) => {
                            println!("{}: error: {e}", tool.remote_name());
                            code = exit::FAILED;
                        }
                    }
                }
            }
            Some((_, status)) => {
                eprintln!("anvil: {url}: {status}");
                code = exit::FAILED;
            }
            None => code = exit::FAILED,
        }
        servers.shutdown(SHUTDOWN_GRACE).await;
        code
    })
}

/// Arguments satisfying a tool's input schema: each required property gets its default, its
/// first enum value, or a plain value of its type.
pub fn example_args(schema: &Value) -> Value {
    let mut args = Map::new();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Value::Object(args);
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, prop) in props {
        if !required.contains(&name.as_str()) {
            continue;
        }
        let value = prop
            .get("default")
            .cloned()
            .or_else(|| prop.get("enum").and_then(|e| e.get(0)).cloned())
            .unwrap_or_else(|| match prop.get("type").and_then(Value::as_str) {
                Some("number") | Some("integer") => json!(1),
                Some("boolean") => json!(true),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => json!("test"),
            });
        args.insert(name.clone(), value);
    }
    Value::Object(args)
}
