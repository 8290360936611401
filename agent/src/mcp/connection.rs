//! One live connection to one server: connecting (stdio through the process supervisor, or
//! streamable HTTP), listing tools, calling one with a timeout and cancellation, and stopping.
//!
//! Stdio servers are [`Service`]s: their own process group, the scrubbed environment plus the
//! server's `env`, stderr kept (never on the terminal). A server that exits is known dead at
//! once through the supervisor's exit watch; calls in flight end with an error, never hang.
//! HTTP sessions are re-initialized once on a 404 by rmcp and deleted (`DELETE`) on close.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anvil_llm::mcp_config::{McpServerConfig, McpTransport};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotificationParam, ClientRequest, ServerResult,
};
use rmcp::service::Peer;
use rmcp::service::{PeerRequestOptions, RunningService, ServiceExt};
use rmcp::{RoleClient, ServiceError};
use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::client::{Elicitor, Handler, ProgressRoutes};
use crate::process::{ProcessSpec, Service, StderrTail, Termination};
use crate::sandbox::Sandbox;
use crate::secrets::Redactor;

/// Longest a call may go on while progress keeps resetting its idle timeout.
pub const HARD_CALL_CAP: Duration = Duration::from_secs(30 * 60);

/// Most pages of one `tools/list`.
pub const MAX_PAGES: usize = 100;
/// Most tools one server may list.
pub const MAX_TOOLS: usize = 2000;
/// Most bytes (as JSON) one server's tool list may take.
pub const MAX_LIST_BYTES: usize = 16 * 1024 * 1024;

/// How much of a failed server's stderr a status line quotes.
const STDERR_QUOTE: usize = 2000;

/// What starting a server needs besides its config.
#[derive(Clone)]
pub struct ConnectOptions {
    /// The workspace: the root anvil declares, and what a server's relative `cwd` is under.
    pub workspace: PathBuf,
    /// Where a stdio server runs when its config names no `cwd`. Not the workspace for the
    /// user's servers: `python3 -m server` or `npx server` would run the repository's own
    /// `server/` or `node_modules/.bin` — code the user never trusted.
    pub cwd: PathBuf,
    /// The scrubbed environment every stdio server starts from.
    pub env: Vec<(String, String)>,
    /// Redacts the servers' stderr as it is read.
    pub redactor: Arc<Redactor>,
    /// Confines stdio servers (an eval trial's policy); `None` runs them as the user
    /// configured them.
    pub sandbox: Option<Arc<Sandbox>>,
    pub elicitor: Arc<dyn Elicitor>,
}

/// Why a server could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectError(pub String);

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a call failed (besides the server's own `isError`, which is a result).
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The server answered with a JSON-RPC error.
    Rpc {
        code: i32,
        message: String,
    },
    TimedOut(Duration),
    Cancelled,
    /// The connection is gone (the server exited, the HTTP session failed).
    Closed(String),
    Other(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Rpc { code, message } => {
                write!(f, "the server answered error {code}: {message}")
            }
            CallError::TimedOut(t) => write!(
                f,
                "no answer within {}s; the call was cancelled (raise the server's tool_timeout_secs if it needs longer)",
                t.as_secs()
            ),
            CallError::Cancelled => f.write_str("cancelled; the server was told to stop"),
            CallError::Closed(why) => write!(f, "the server is gone: {why}"),
            CallError::Other(m) => f.write_str(m),
        }
    }
}

pub struct Connection {
    pub name: String,
    peer: Peer<RoleClient>,
    /// Taken by [`Connection::stop`].
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, Handler>>>,
    process: Mutex<Option<Service>>,
    /// Lives as long as the process (a sandbox's cgroup, its argument file).
    _sandbox: Mutex<Option<crate::sandbox::SandboxGuard>>,
    exit: Option<watch::Receiver<Option<Termination>>>,
    stderr: Option<StderrTail>,
    pub tool_timeout: Duration,
    /// Woken when the server says its tool list changed.
    pub tools_changed: Arc<Notify>,
    pub http: bool,
    /// How many times the tools were listed (a `list_changed` re-lists).
    listings: std::sync::atomic::AtomicU32,
    /// Running calls' progress reporters, by progress token.
    progress: ProgressRoutes,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("name", &self.name)
            .finish()
    }
}

impl Connection {
    /// Connects and initializes within the server's startup timeout. A command that exits at
    /// once fails as soon as it does, with its stderr's last lines.
    pub async fn connect(
        name: &str,
        config: &McpServerConfig,
        options: &ConnectOptions,
    ) -> Result<Connection, ConnectError> {
        let startup = Duration::from_secs(config.startup_timeout());
        let tools_changed = Arc::new(Notify::new());
        let progress = ProgressRoutes::default();
        let handler = Handler {
            server: name.to_string(),
            root: options.workspace.clone(),
            elicitor: Arc::clone(&options.elicitor),
            tools_changed: Arc::clone(&tools_changed),
            progress: Arc::clone(&progress),
        };
        let tool_timeout = Duration::from_secs(config.tool_timeout());
        let transport = config.transport().map_err(ConnectError)?;
        match transport {
            McpTransport::Stdio { command, args } => {
                let mut spec = ProcessSpec::new(
                    command,
                    config
                        .cwd
                        .as_ref()
                        .map(|c| options.workspace.join(c))
                        .unwrap_or_else(|| options.cwd.clone()),
                )
                .args(args.iter().cloned())
                .redact(Arc::clone(&options.redactor));
                let mut env = options.env.clone();
                env.retain(|(k, _)| !config.env.contains_key(k));
                env.extend(config.env.iter().map(|(k, v)| (k.clone(), v.clone())));
                spec = spec.env(env);
                let (spec, sandbox_guard) = match &options.sandbox {
                    Some(sandbox) => sandbox
                        .wrap(spec)
                        .map(|(s, g)| (s, Some(g)))
                        .map_err(|e| ConnectError(format!("cannot sandbox it: {e}")))?,
                    None => (spec, None),
                };
                let mut process = Service::spawn(&spec).map_err(|e| ConnectError(e.to_string()))?;
                let stderr = process.stderr();
                let mut exit = process.exit();
                let Some((stdout, stdin)) = process.take_io() else {
                    return Err(ConnectError("its pipes could not be opened".into()));
                };
                let io = (
                    super::oversize::Limited::new(stdout, super::oversize::MAX_LINE),
                    stdin,
                );
                let serve = handler.serve(io);
                let exited = async {
                    let _ = exit.wait_for(Option::is_some).await;
                };
                let service = tokio::select! {
                    served = tokio::time::timeout(startup, serve) => match served {
                        Ok(Ok(service)) => service,
                        Ok(Err(e)) => {
                            return Err(died(&process, &stderr, &e.to_string()).await);
                        }
                        Err(_) => {
                            let _ = process.stop(Duration::from_millis(500)).await;
                            return Err(ConnectError(format!(
                                "no answer to initialize within {}s (startup_timeout_secs){}",
                                startup.as_secs(),
                                tail_note(&stderr)
                            )));
                        }
                    },
                    () = exited => return Err(died(&process, &stderr, "").await),
                };
                Ok(Connection {
                    name: name.to_string(),
                    peer: service.peer().clone(),
                    service: tokio::sync::Mutex::new(Some(service)),
                    exit: Some(process.exit()),
                    process: Mutex::new(Some(process)),
                    _sandbox: Mutex::new(sandbox_guard),
                    stderr: Some(stderr),
                    tool_timeout,
                    tools_changed,
                    http: false,
                    listings: Default::default(),
                    progress,
                })
            }
            McpTransport::Http { url } => {
                use reqwest::header::{HeaderName, HeaderValue};
                use rmcp::transport::StreamableHttpClientTransport;
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let mut headers = HashMap::new();
                for (header, var) in &config.headers {
                    let value = std::env::var(var).map_err(|_| {
                        ConnectError(format!(
                            "header {header} takes its value from ${var}, which is not set"
                        ))
                    })?;
                    options.redactor.register(var, &value);
                    let name = HeaderName::from_bytes(header.as_bytes())
                        .map_err(|e| ConnectError(format!("header name {header}: {e}")))?;
                    let value = HeaderValue::from_str(&value).map_err(|_| {
                        ConnectError(format!("${var} is not a valid value for header {header}"))
                    })?;
                    headers.insert(name, value);
                }
                let transport = StreamableHttpClientTransport::from_config(
                    StreamableHttpClientTransportConfig::with_uri(url.to_string())
                        .custom_headers(headers)
                        .reinit_on_expired_session(true),
                );
                let service = tokio::time::timeout(startup, handler.serve(transport))
                    .await
                    .map_err(|_| {
                        ConnectError(format!(
                            "no answer to initialize from {url} within {}s (startup_timeout_secs)",
                            startup.as_secs()
                        ))
                    })?
                    .map_err(|e| ConnectError(format!("{url}: {e}")))?;
                Ok(Connection {
                    name: name.to_string(),
                    peer: service.peer().clone(),
                    service: tokio::sync::Mutex::new(Some(service)),
                    process: Mutex::new(None),
                    _sandbox: Mutex::new(None),
                    exit: None,
                    stderr: None,
                    tool_timeout,
                    tools_changed,
                    http: true,
                    listings: Default::default(),
                    progress,
                })
            }
        }
    }

    /// Every tool the server lists, following `nextCursor` to the end — within `timeout` in
    /// all, [`MAX_PAGES`] pages, [`MAX_TOOLS`] tools and [`MAX_LIST_BYTES`], so a server that
    /// never stops paging, or pages huge tools, cannot grow anvil's memory without bound.
    pub async fn list_tools(&self, timeout: Duration) -> Result<Vec<rmcp::model::Tool>, String> {
        self.listings
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let all = async {
            let mut tools = Vec::new();
            let mut cursor: Option<String> = None;
            let mut seen = std::collections::HashSet::new();
            let mut bytes = 0usize;
            for _ in 0..MAX_PAGES {
                let params = cursor
                    .clone()
                    .map(|c| rmcp::model::PaginatedRequestParams::default().with_cursor(Some(c)));
                let page = self
                    .peer
                    .list_tools(params)
                    .await
                    .map_err(|e| format!("tools/list failed: {e}"))?;
                bytes += serde_json::to_string(&page.tools).map_or(0, |t| t.len());
                if bytes > MAX_LIST_BYTES {
                    return Err(format!(
                        "the server's tool list is over {} MiB; refused",
                        MAX_LIST_BYTES / (1024 * 1024)
                    ));
                }
                tools.extend(page.tools);
                if tools.len() > MAX_TOOLS {
                    return Err(format!(
                        "the server lists more than {MAX_TOOLS} tools; refused"
                    ));
                }
                match page.next_cursor {
                    None => return Ok(tools),
                    Some(next) if !seen.insert(next.clone()) => {
                        return Err(format!(
                            "tools/list pages loop (cursor '{}' came back)",
                            next.chars().take(40).collect::<String>()
                        ));
                    }
                    Some(next) => cursor = Some(next),
                }
            }
            Err(format!("tools/list did not end after {MAX_PAGES} pages"))
        };
        tokio::time::timeout(timeout, all)
            .await
            .map_err(|_| format!("tools/list not answered within {}s", timeout.as_secs()))?
    }

    /// How many times the tools were listed.
    pub fn listings(&self) -> u32 {
        self.listings.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Why the connection is dead, or `None` while it lives.
    pub fn dead(&self) -> Option<String> {
        if let Some(exit) = &self.exit
            && let Some(t) = *exit.borrow()
        {
            let mut why = match t {
                Termination::Exited(code) => format!("the server exited with code {code}"),
                Termination::Signaled(sig) => format!("the server was killed by signal {sig}"),
                Termination::TimedOut | Termination::Cancelled => "the server was stopped".into(),
            };
            if let Some(tail) = &self.stderr {
                why.push_str(&tail_note(tail));
            }
            return Some(why);
        }
        self.peer
            .is_transport_closed()
            .then(|| "the connection to the server closed".into())
    }

    /// Calls `tool`; `Ok` is the `CallToolResult` as JSON (which may say `isError`).
    pub async fn call(
        &self,
        tool: &str,
        arguments: Value,
        cancel: &CancellationToken,
        progress: Option<&crate::event::ProgressReporter>,
    ) -> Result<Value, CallError> {
        if let Some(why) = self.dead() {
            return Err(CallError::Closed(why));
        }
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Value::Object(args) = arguments {
            params = params.with_arguments(args);
        }
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let options = PeerRequestOptions::with_timeout(self.tool_timeout)
            .reset_timeout_on_progress()
            .with_max_total_timeout(HARD_CALL_CAP.max(self.tool_timeout));
        let peer = &self.peer;
        let handle = peer
            .send_request_with_option(request, options)
            .await
            .map_err(|e| self.closed_or(e))?;
        let id = handle.id.clone();
        let route = serde_json::to_string(&handle.progress_token).ok();
        if let (Some(token), Some(reporter), Ok(mut routes)) =
            (&route, progress, self.progress.lock())
        {
            routes.insert(token.clone(), reporter.clone());
        }
        let _unroute = Unroute(&self.progress, route);
        let mut exit = self.exit.clone();
        let gone = async {
            match exit.as_mut() {
                Some(exit) => {
                    let _ = exit.wait_for(Option::is_some).await;
                }
                None => std::future::pending().await,
            }
        };
        let response = tokio::select! {
            r = handle.await_response() => r,
            () = cancel.cancelled() => {
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(
                        Some(id),
                        Some("cancelled by the user".into()),
                    ))
                    .await;
                return Err(CallError::Cancelled);
            }
            () = gone => {
                return Err(CallError::Closed(self.dead().unwrap_or_else(|| "the server exited".into())));
            }
        };
        match response {
            Ok(ServerResult::CallToolResult(result)) => {
                serde_json::to_value(result).map_err(|e| CallError::Other(e.to_string()))
            }
            Ok(other) => Err(CallError::Other(format!(
                "the server answered tools/call with something else: {}",
                serde_json::to_string(&other)
                    .unwrap_or_default()
                    .chars()
                    .take(200)
                    .collect::<String>()
            ))),
            Err(e) => Err(self.closed_or(e)),
        }
    }

    fn closed_or(&self, e: ServiceError) -> CallError {
        match e {
            ServiceError::McpError(e) => CallError::Rpc {
                code: e.code.0,
                message: e.message.to_string(),
            },
            ServiceError::Timeout { timeout } => CallError::TimedOut(timeout),
            ServiceError::Cancelled { .. } => CallError::Cancelled,
            ServiceError::TransportClosed => CallError::Closed(
                self.dead()
                    .unwrap_or_else(|| "the connection to the server closed".into()),
            ),
            other => CallError::Other(other.to_string()),
        }
    }

    /// The server's stderr tail (stdio servers).
    pub fn stderr(&self) -> Option<&StderrTail> {
        self.stderr.as_ref()
    }

    /// Ends the connection within `grace`: closes the session (an HTTP `DELETE`), then stops
    /// the process group. Logs the stderr tail.
    pub async fn stop(&self, grace: Duration) {
        let service = self.service.lock().await.take();
        if let Some(mut service) = service {
            let _ = service.close_with_timeout(grace).await;
        }
        let process = self.process.lock().ok().and_then(|mut p| p.take());
        if let Some(process) = process {
            process.stop(grace).await;
        }
        if let Some(tail) = &self.stderr
            && tail.total() > 0
        {
            tracing::info!(
                target: "anvil::mcp",
                server = %self.name,
                stderr = %tail.text(crate::process::STDERR_TAIL),
                "server stopped"
            );
        }
    }
}

/// Removes a call's progress route when the call ends, however it ends.
struct Unroute<'a>(&'a ProgressRoutes, Option<String>);

impl Drop for Unroute<'_> {
    fn drop(&mut self) {
        if let (Some(token), Ok(mut routes)) = (&self.1, self.0.lock()) {
            routes.remove(token);
        }
    }
}

/// The error for a server that died while starting: its exit and stderr's last lines.
async fn died(process: &Service, stderr: &StderrTail, error: &str) -> ConnectError {
    let mut exit = process.exit();
    let _ = tokio::time::timeout(Duration::from_millis(300), exit.wait_for(Option::is_some)).await;
    // Its last words: stderr closes when the process (and whatever it forked) is gone.
    let _ = tokio::time::timeout(Duration::from_millis(300), stderr.closed()).await;
    let how = match process.exited() {
        Some(Termination::Exited(code)) => format!("exited with code {code}"),
        Some(Termination::Signaled(sig)) => format!("was killed by signal {sig}"),
        _ if error.is_empty() => "stopped answering".to_string(),
        _ => format!("failed: {error}"),
    };
    tracing::warn!(
        target: "anvil::mcp",
        stderr = %stderr.text(crate::process::STDERR_TAIL),
        "server {how} while starting"
    );
    ConnectError(format!("{how} while starting{}", tail_note(stderr)))
}

fn tail_note(stderr: &StderrTail) -> String {
    let text = stderr.text(STDERR_QUOTE);
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        let lines: Vec<&str> = text.lines().rev().take(5).collect();
        let lines: Vec<&str> = lines.into_iter().rev().collect();
        format!("; its stderr ends: {}", lines.join(" | "))
    }
}
