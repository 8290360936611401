//! Keeping a long session inside the model's context window.
//!
//! Before each request the agent estimates the context ([`budget`]). Past the soft threshold
//! (about 60 % of the usable window) old tool results are replaced by placeholders
//! ([`clear`]); past the hard one (about 85 %), or on `/compact`, the conversation is replaced
//! by a summary the model writes ([`compact`]). Both are session records
//! (`context_replaced`), so a reloaded session has the same active context.

/// The window, the revision, and the estimate.
pub mod budget;
/// Tool-result clearing.
pub mod clear;
/// Summarization compaction.
pub mod compact;

pub use budget::{ContextBudget, ContextTracker};
pub use clear::clear_old_tool_results;
