//! anvil-agent: the agent core.
//!
//! The loop that samples a model, runs the tools it asks for and appends their results until
//! the turn ends, plus the native tools a coding agent needs and the guards around them
//! (file access roots, content-hash freshness, the process supervisor, secret handling).
//! Depends on `anvil-llm` only.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

/// The agent loop.
pub mod agent;
/// Approvers: who answers when a call needs approval.
pub mod approval;
/// Keeping a long session inside the context window: budget, clearing, compaction.
pub mod context;
/// AgentEvent, TurnOutcome and the bounded event sink.
pub mod event;
/// What the native tools may read and write, and content-hash freshness.
pub mod file_access;
/// MCP servers' tools beside the native ones: connections, names, results.
pub mod mcp;
/// Permission rules, modes and decisions.
pub mod permissions;
/// The process supervisor: process groups, bounded capture, timeouts, cleanup.
pub mod process;
/// The system prompt: base instructions, environment, AGENTS.md discovery.
pub mod prompt;
/// ToolRegistry: specs and dispatch that never fails.
pub mod registry;
/// The OS sandbox (bubblewrap on Linux).
pub mod sandbox;
/// Child-process environment and redaction of secrets.
pub mod secrets;
/// Sessions as append-only JSONL: records, the reducer, the store.
pub mod session;
/// The agent's spans, after the OpenTelemetry GenAI semantic conventions.
pub mod telemetry;
/// Tool calls a model wrote as text: finding them (`tool_calls = "text" | "auto"`).
pub mod text_calls;
/// Tool, TypedTool, effects and cancellation behaviour.
pub mod tool;
/// The native tools.
pub mod tools;

pub use agent::{Agent, AgentConfig};
pub use event::{AgentEvent, EventSink, TurnOutcome};
pub use registry::ToolRegistry;
pub use tool::{
    Cancellation, Effects, Tool, ToolContext, ToolError, ToolImage, ToolOutput, TypedTool,
};
