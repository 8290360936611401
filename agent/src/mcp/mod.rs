//! MCP servers' tools beside the native ones, on `rmcp` (the official SDK).
//!
//! A configured server (`[mcp_servers.NAME]`, see [`anvil_llm::mcp_config`]) becomes a
//! [`Connection`]; its tools become [`McpTool`]s named `mcp__<server>__<tool>` ([`names`]);
//! [`McpServers`] holds them all and is the registry's [`crate::registry::ToolSource`], so
//! they go through the same permission rules, dispatch, output limit and redaction as the
//! native tools. Stdio servers run under the process supervisor ([`crate::process::Service`]).

/// What anvil declares to a server and how it answers the server's requests.
pub mod client;
/// One live connection: connect, list, call, stop.
pub mod connection;
/// A `tools/call` result as the model sees it.
pub mod content;
/// Exposed tool names.
pub mod names;
/// Refusing a stdio server's oversized message with an error for its request.
pub mod oversize;
/// `tool_search`: deferred loading of many tools.
pub mod search;
/// The session's servers and their tools.
pub mod servers;
/// One server tool as a [`crate::Tool`].
pub mod tool;

pub use client::{AcceptDefaults, Decline, ElicitAnswer, Elicitation, Elicitor};
pub use connection::{CallError, ConnectError, ConnectOptions, Connection};
pub use servers::{Deferral, McpServers, ServerStatus};
pub use tool::McpTool;
