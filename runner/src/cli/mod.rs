//! The `anvil` front end: parse the command line, build a session, then run one headless turn
//! (`anvil -p`) or the interactive REPL. Nothing here reads the job queue.

/// The interactive approval prompt.
pub mod approve;
/// The command line.
pub mod args;
/// `/cost`: what a session spent, by model.
pub mod cost;
/// The interactive answer to an MCP server's elicitation.
pub mod elicit;
/// `anvil -p`.
pub mod headless;
/// MCP servers in a session, `/mcp` and `anvil mcp`.
pub mod mcp;
/// The interactive renderer.
pub mod render;
/// The interactive session.
pub mod repl;
/// `anvil sessions` and `anvil replay`.
pub mod sessions;
/// Building a session: workspace, config, model, tools, prompt.
pub mod setup;

pub use args::Cli;
