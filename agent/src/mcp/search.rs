//! `tool_search`: deferred loading of MCP tools (15.3).
//!
//! When the MCP tools' specs are too many or too big to send with every request, only this
//! tool is offered in their place. Its description lists the deferred tools' names (cheap);
//! a search returns the matching tools' schemas and activates them, so they are offered in
//! every later request of the session.

use std::sync::{Arc, Weak};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::servers::McpServers;
use super::tool::McpTool;
use crate::tool::{Cancellation, Effects, Tool, ToolContext, ToolError, ToolOutput};

/// The tool's name.
pub const NAME: &str = "tool_search";

/// Hits returned by default.
const DEFAULT_RESULTS: usize = 5;

pub struct ToolSearch {
    description: String,
    servers: Weak<McpServers>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// Words to look for in tool names and descriptions (e.g. "github issues").
    query: String,
    /// At most this many tools (default 5).
    #[serde(default)]
    max_results: Option<usize>,
}

impl ToolSearch {
    pub(crate) fn new(deferred: &[String], servers: Weak<McpServers>) -> Self {
        Self {
            description: format!(
                "Finds tools from MCP servers that are not loaded yet and loads them: their \
                 schemas are returned and they can be called from the next step on. Search by \
                 what you need (\"github issues\", \"screenshot\"). Tools available through \
                 this search: {}.",
                deferred.join(", ")
            ),
            servers,
        }
    }
}

/// The deferred tools matching `query`, best first: a tool scores one point per query word
/// found in its name, description or server, two when in its name.
pub(crate) fn rank(query: &str, tools: &[Arc<McpTool>], max: usize) -> Vec<Arc<McpTool>> {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, &Arc<McpTool>)> = tools
        .iter()
        .filter_map(|t| {
            let name = t.exposed.to_lowercase();
            let text = format!("{} {}", t.description(), t.server).to_lowercase();
            let score: usize = words
                .iter()
                .map(|w| {
                    if name.contains(w.as_str()) {
                        2
                    } else {
                        usize::from(text.contains(w.as_str()))
                    }
                })
                .sum();
            (score > 0).then_some((score, t))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.exposed.cmp(&b.1.exposed)));
    scored
        .into_iter()
        .take(max)
        .map(|(_, t)| Arc::clone(t))
        .collect()
}

#[async_trait::async_trait]
impl Tool for ToolSearch {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        crate::tool::schema_of::<Args>()
    }

    fn effects(&self, _: &Value) -> Effects {
        Effects::READ_ONLY
    }

    fn cancellation(&self) -> Cancellation {
        Cancellation::Immediate
    }

    async fn call(&self, args: Value, _: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: Args =
            serde_json::from_value(args).map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        let Some(servers) = self.servers.upgrade() else {
            return Err(ToolError::Failed("the MCP servers have shut down".into()));
        };
        let hits = rank(
            &args.query,
            &servers.deferred(),
            args.max_results.unwrap_or(DEFAULT_RESULTS).clamp(1, 20),
        );
        if hits.is_empty() {
            return Ok(format!(
                "No deferred tool matches '{}'. The names are listed in this tool's description.",
                args.query
            )
            .into());
        }
        let names: Vec<String> = hits.iter().map(|t| t.exposed.clone()).collect();
        servers.activate(&names);
        let specs: Vec<Value> = hits
            .iter()
            .map(|t| {
                json!({
                    "name": t.exposed,
                    "description": t.description(),
                    "input_schema": t.input_schema(),
                })
            })
            .collect();
        Ok(format!(
            "Loaded {} tool(s); call them from your next step:\n{}",
            hits.len(),
            serde_json::to_string_pretty(&specs).unwrap_or_default()
        )
        .into())
    }
}
