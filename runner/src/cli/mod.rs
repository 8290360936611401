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

/// Cancels `cancel` on Ctrl-C (SIGINT) until the returned task is aborted: the one way the
/// front end turns Ctrl-C into stopping a turn, a compaction or an MCP call.
pub fn cancel_on_ctrl_c(
    cancel: &tokio_util::sync::CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let cancel = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            cancel.cancel();
        }
    })
}
