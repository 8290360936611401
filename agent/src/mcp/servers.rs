//! [`McpServers`]: the configured servers of a session, their state, and their tools as one
//! [`ToolSource`] of the registry.
//!
//! - Servers start concurrently in tasks of their own and never delay anything: the REPL's
//!   prompt is up while they start; headless runs wait ([`McpServers::wait_started`]), each
//!   server bounded by its own startup timeout.
//! - A server's state is `starting`, `connected` (with its tools), `failed` (why) or `dead`
//!   (a connected server that went away, noticed within a quarter second); its tools stay
//!   offered when it dies, and calling them is an error result.
//! - `notifications/tools/list_changed` re-lists the server; over HTTP anvil re-lists once
//!   after connecting anyway (a notification may have gone before the stream was open).
//! - Tools are offered sorted by exposed name. Past [`Deferral`]'s size, only activated tools
//!   and `tool_search` are offered ([`super::search`]).
//! - [`McpServers::shutdown`] stops every server at once: one grace period in total.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use anvil_llm::mcp_config::McpServerConfig;
use serde::Serialize;

use super::connection::{ConnectOptions, Connection};
use super::names::exposed_name;
use super::search::ToolSearch;
use super::tool::McpTool;
use crate::registry::ToolSource;
use crate::tool::Tool;

/// When MCP tools are deferred behind `tool_search` (15.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferral {
    /// More MCP tools than this are deferred.
    pub max_tools: usize,
    /// Specs (name, description, schema) bigger than this in all are deferred.
    pub max_spec_bytes: usize,
}

impl Default for Deferral {
    fn default() -> Self {
        Self {
            max_tools: 30,
            max_spec_bytes: 20_000,
        }
    }
}

/// Where one server is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerStatus {
    /// `enabled = false` in its config.
    Disabled,
    Starting,
    Connected {
        tools: usize,
    },
    Failed {
        reason: String,
    },
    /// It was connected and went away.
    Dead {
        reason: String,
    },
}

impl std::fmt::Display for ServerStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerStatus::Disabled => f.write_str("disabled"),
            ServerStatus::Starting => f.write_str("starting"),
            ServerStatus::Connected { tools: 1 } => f.write_str("connected, 1 tool"),
            ServerStatus::Connected { tools } => write!(f, "connected, {tools} tools"),
            ServerStatus::Failed { reason } => write!(f, "failed: {reason}"),
            ServerStatus::Dead { reason } => write!(f, "dead: {reason}"),
        }
    }
}

struct Slot {
    config: McpServerConfig,
    status: ServerStatus,
    conn: Option<Arc<Connection>>,
    tools: Vec<Arc<McpTool>>,
}

#[derive(Default)]
struct State {
    servers: BTreeMap<String, Slot>,
    /// Deferred tools a search activated (exposed names).
    active: BTreeSet<String>,
    /// Every MCP tool by exposed name.
    by_name: BTreeMap<String, Arc<McpTool>>,
    deferring: bool,
    search: Option<Arc<ToolSearch>>,
}

pub struct McpServers {
    me: Weak<McpServers>,
    state: Mutex<State>,
    generation: AtomicU64,
    /// Bumped on every status change (for waiters).
    changed: tokio::sync::watch::Sender<u64>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    options: ConnectOptions,
    deferral: Deferral,
}

impl McpServers {
    /// Starts every enabled server of `configs` in the background (call within a runtime).
    pub fn start(
        configs: &BTreeMap<String, McpServerConfig>,
        options: ConnectOptions,
        deferral: Deferral,
    ) -> Arc<Self> {
        let (changed, _) = tokio::sync::watch::channel(0);
        let servers = Arc::new_cyclic(|me| Self {
            me: me.clone(),
            state: Mutex::new(State::default()),
            generation: AtomicU64::new(0),
            changed,
            tasks: Mutex::new(Vec::new()),
            options,
            deferral,
        });
        let mut tasks = Vec::new();
        if let Ok(mut state) = servers.state.lock() {
            for (name, config) in configs {
                let status = if config.enabled {
                    ServerStatus::Starting
                } else {
                    ServerStatus::Disabled
                };
                state.servers.insert(
                    name.clone(),
                    Slot {
                        config: config.clone(),
                        status: status.clone(),
                        conn: None,
                        tools: Vec::new(),
                    },
                );
                if status == ServerStatus::Starting {
                    let weak = Arc::downgrade(&servers);
                    let (name, config) = (name.clone(), config.clone());
                    let options = servers.options.clone();
                    tasks.push(tokio::spawn(run_server(weak, name, config, options)));
                }
            }
        }
        if let Ok(mut t) = servers.tasks.lock() {
            *t = tasks;
        }
        servers
    }

    /// Waits until no server is starting. Each is bounded by its own startup timeout, so this
    /// is bounded by the longest.
    pub async fn wait_started(&self) {
        let mut rx = self.changed.subscribe();
        loop {
            if !self
                .statuses()
                .iter()
                .any(|(_, s)| *s == ServerStatus::Starting)
            {
                return;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// Every configured server and where it is, by name.
    pub fn statuses(&self) -> Vec<(String, ServerStatus)> {
        self.state
            .lock()
            .map(|s| {
                s.servers
                    .iter()
                    .map(|(n, slot)| (n.clone(), slot.status.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every MCP tool, deferred or not, sorted by exposed name.
    pub fn tools(&self) -> Vec<Arc<McpTool>> {
        self.state
            .lock()
            .map(|s| s.by_name.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Tool `tool` (its name on the server) of server `server`.
    pub fn tool(&self, server: &str, tool: &str) -> Option<Arc<McpTool>> {
        let state = self.state.lock().ok()?;
        let slot = state.servers.get(server)?;
        slot.tools.iter().find(|t| t.remote == tool).cloned()
    }

    /// How many times server `server`'s tools were listed (once at start, again on each
    /// `list_changed`, and once more after connecting over HTTP).
    pub fn listings(&self, server: &str) -> u32 {
        let Ok(state) = self.state.lock() else {
            return 0;
        };
        state
            .servers
            .get(server)
            .and_then(|s| s.conn.as_ref())
            .map_or(0, |c| c.listings())
    }

    /// The stderr tail of a stdio server.
    pub fn stderr(&self, server: &str) -> Option<String> {
        let state = self.state.lock().ok()?;
        let conn = state.servers.get(server)?.conn.as_ref()?;
        Some(conn.stderr()?.text(crate::process::STDERR_TAIL))
    }

    /// Whether MCP tools are deferred behind `tool_search` now.
    pub fn deferring(&self) -> bool {
        self.state.lock().map(|s| s.deferring).unwrap_or(false)
    }

    /// Activates deferred tools by exposed name (a search's hits).
    pub(crate) fn activate(&self, names: &[String]) {
        if let Ok(mut state) = self.state.lock() {
            let before = state.active.len();
            state.active.extend(names.iter().cloned());
            if state.active.len() != before {
                self.generation.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    /// The deferred tools (not yet activated), for the search.
    pub(crate) fn deferred(&self) -> Vec<Arc<McpTool>> {
        self.state
            .lock()
            .map(|s| {
                s.by_name
                    .values()
                    .filter(|t| !s.active.contains(&t.exposed))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Stops every server at once within `grace` (one grace in total, not one per server):
    /// sessions are closed (HTTP `DELETE`), process groups TERMed then KILLed. Calls in
    /// flight end with an error.
    pub async fn shutdown(&self, grace: Duration) {
        let tasks = self
            .tasks
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        for task in &tasks {
            task.abort();
        }
        let conns: Vec<Arc<Connection>> = self
            .state
            .lock()
            .map(|s| {
                s.servers
                    .values()
                    .filter_map(|slot| slot.conn.clone())
                    .collect()
            })
            .unwrap_or_default();
        let all = futures::future::join_all(conns.iter().map(|c| c.stop(grace)));
        let _ = tokio::time::timeout(grace + Duration::from_millis(500), all).await;
    }

    fn set_status(&self, name: &str, status: ServerStatus) {
        if let Ok(mut state) = self.state.lock()
            && let Some(slot) = state.servers.get_mut(name)
        {
            slot.status = status;
        }
        self.changed.send_modify(|g| *g += 1);
    }

    /// Installs `conn`'s listing as server `name`'s tools.
    fn install(&self, name: &str, conn: &Arc<Connection>, listed: &[rmcp::model::Tool]) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let Some(slot) = state.servers.get(name) else {
            return;
        };
        let trusted = slot.config.trusted;
        let mut tools: Vec<Arc<McpTool>> = Vec::new();
        let mut seen = BTreeSet::new();
        let mut sorted: Vec<&rmcp::model::Tool> = listed
            .iter()
            .filter(|t| slot.config.offers(&t.name))
            .collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        for remote in sorted {
            if !seen.insert(remote.name.to_string()) {
                tracing::warn!(target: "anvil::mcp", server = %name, tool = %remote.name,
                    "the server listed this tool twice; the first is used");
                continue;
            }
            if self.options.redactor.redact(&remote.name) != remote.name {
                tracing::warn!(target: "anvil::mcp", server = %name,
                    "a tool's name holds a known secret; the tool is not offered");
                continue;
            }
            let exposed = exposed_name(name, &remote.name);
            if let Some(other) = state.by_name.get(&exposed)
                && other.server != name
            {
                tracing::warn!(target: "anvil::mcp", server = %name, tool = %remote.name,
                    "exposed name {exposed} is taken by server {}; this tool is not offered", other.server);
                continue;
            }
            tools.push(Arc::new(McpTool::new(
                exposed,
                remote,
                trusted,
                Arc::clone(conn),
                &self.options.redactor,
            )));
        }
        state.by_name.retain(|_, t| t.server != name);
        for t in &tools {
            state.by_name.insert(t.exposed.clone(), Arc::clone(t));
        }
        let count = tools.len();
        if let Some(slot) = state.servers.get_mut(name) {
            slot.tools = tools;
            slot.conn = Some(Arc::clone(conn));
            slot.status = ServerStatus::Connected { tools: count };
        }
        let bytes: usize = state.by_name.values().map(|t| t.spec_bytes).sum();
        state.deferring =
            state.by_name.len() > self.deferral.max_tools || bytes > self.deferral.max_spec_bytes;
        let names: Vec<String> = state
            .by_name
            .keys()
            .filter(|n| !state.active.contains(*n))
            .cloned()
            .collect();
        state.search = state
            .deferring
            .then(|| Arc::new(ToolSearch::new(&names, self.me.clone())));
        drop(state);
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.changed.send_modify(|g| *g += 1);
    }
}

impl ToolSource for McpServers {
    fn offered(&self) -> Vec<Arc<dyn Tool>> {
        let Ok(state) = self.state.lock() else {
            return Vec::new();
        };
        let mut offered: Vec<Arc<dyn Tool>> = state
            .by_name
            .values()
            .filter(|t| !state.deferring || state.active.contains(&t.exposed))
            .map(|t| Arc::clone(t) as Arc<dyn Tool>)
            .collect();
        if let Some(search) = &state.search {
            offered.push(Arc::clone(search) as Arc<dyn Tool>);
        }
        offered
    }

    fn find(&self, name: &str) -> Option<Arc<dyn Tool>> {
        let state = self.state.lock().ok()?;
        if let Some(t) = state.by_name.get(name) {
            return Some(Arc::clone(t) as Arc<dyn Tool>);
        }
        match &state.search {
            Some(s) if name == super::search::NAME => Some(Arc::clone(s) as Arc<dyn Tool>),
            _ => None,
        }
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
}

/// One server's life: connect, list, then follow `list_changed` until it dies.
async fn run_server(
    servers: Weak<McpServers>,
    name: String,
    config: McpServerConfig,
    options: ConnectOptions,
) {
    let startup = Duration::from_secs(config.startup_timeout());
    let conn = match Connection::connect(&name, &config, &options).await {
        Ok(conn) => Arc::new(conn),
        Err(e) => {
            tracing::warn!(target: "anvil::mcp", server = %name, "could not start: {e}");
            if let Some(s) = servers.upgrade() {
                s.set_status(&name, ServerStatus::Failed { reason: e.0 });
            }
            return;
        }
    };
    let listed = match conn.list_tools(startup).await {
        Ok(listed) => listed,
        Err(e) => {
            if let Some(s) = servers.upgrade() {
                s.set_status(&name, ServerStatus::Failed { reason: e });
            }
            conn.stop(Duration::from_millis(500)).await;
            return;
        }
    };
    {
        let Some(s) = servers.upgrade() else {
            conn.stop(Duration::from_millis(500)).await;
            return;
        };
        s.install(&name, &conn, &listed);
    }
    let mut relist_once = conn.http;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        let relist = relist_once
            || tokio::select! {
                () = conn.tools_changed.notified() => true,
                _ = tick.tick() => false,
            };
        relist_once = false;
        if let Some(reason) = conn.dead() {
            tracing::warn!(target: "anvil::mcp", server = %name, "server died: {reason}");
            if let Some(s) = servers.upgrade() {
                s.set_status(&name, ServerStatus::Dead { reason });
            }
            return;
        }
        if relist {
            match conn.list_tools(startup).await {
                Ok(listed) => match servers.upgrade() {
                    Some(s) => s.install(&name, &conn, &listed),
                    None => return,
                },
                Err(e) => {
                    tracing::warn!(target: "anvil::mcp", server = %name, "re-listing failed: {e}")
                }
            }
        }
    }
}
