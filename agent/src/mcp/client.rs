#![allow(deprecated)] // roots: deprecated by SEP-2577 in the newest spec, still asked for by servers
//! The client side anvil shows a server: what it declares (roots, form elicitation; never
//! sampling) and how it answers the server's requests and notifications.
//!
//! - `ping` is answered (rmcp's default);
//! - `roots/list` answers the workspace root;
//! - `sampling/createMessage` is not declared and answered `-32601` (rmcp's default);
//! - `elicitation/create` goes to an [`Elicitor`]: the REPL asks the user, headless declines,
//!   and neither can hang a call past its timeout;
//! - `notifications/tools/list_changed` marks the server's tool list stale; its owner re-lists.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::ClientHandler;
use rmcp::model::{
    ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData, ListRootsResult,
    ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

/// The protocol version anvil asks for in `initialize` (the newest with that handshake; every
/// server in the wild speaks it or negotiates down).
pub const PROTOCOL_VERSION: &str = "2025-11-25";

/// A server asking the user for input mid-call.
#[derive(Debug, Clone, PartialEq)]
pub struct Elicitation {
    pub server: String,
    pub message: String,
    /// The requested schema (a flat object of primitive properties).
    pub schema: Value,
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum ElicitAnswer {
    /// The content, an object conforming to the schema.
    Accept(Map<String, Value>),
    Decline,
    Cancel,
}

/// Who answers [`Elicitation`]s.
#[async_trait::async_trait]
pub trait Elicitor: Send + Sync {
    async fn elicit(&self, request: Elicitation) -> ElicitAnswer;
}

/// Declines every request: headless runs have nobody to ask.
pub struct Decline;

#[async_trait::async_trait]
impl Elicitor for Decline {
    async fn elicit(&self, _: Elicitation) -> ElicitAnswer {
        ElicitAnswer::Decline
    }
}

/// Accepts with the schema's defaults (what `anvil mcp conformance` does: the suite checks
/// that a client applies defaults).
pub struct AcceptDefaults;

#[async_trait::async_trait]
impl Elicitor for AcceptDefaults {
    async fn elicit(&self, request: Elicitation) -> ElicitAnswer {
        ElicitAnswer::Accept(defaults(&request.schema))
    }
}

/// The `default` of each property of an elicitation schema that has one.
pub fn defaults(schema: &Value) -> Map<String, Value> {
    schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|props| {
            props
                .iter()
                .filter_map(|(k, p)| Some((k.clone(), p.get("default")?.clone())))
                .collect()
        })
        .unwrap_or_default()
}

/// Where each running call's progress goes, by its progress token (as JSON text).
pub type ProgressRoutes =
    Arc<std::sync::Mutex<std::collections::HashMap<String, crate::event::ProgressReporter>>>;

/// One server's client handler.
pub struct Handler {
    pub(crate) server: String,
    pub(crate) root: PathBuf,
    pub(crate) elicitor: Arc<dyn Elicitor>,
    /// Woken when the server says its tool list changed.
    pub(crate) tools_changed: Arc<Notify>,
    pub(crate) progress: ProgressRoutes,
}

impl Handler {
    fn config() -> ClientConfig {
        // The capabilities types are non-exhaustive: built from their wire form.
        serde_json::from_value(json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {
                "roots": {"listChanged": false},
                "elicitation": {"form": {}}
            },
            "clientInfo": {"name": "anvil", "version": env!("CARGO_PKG_VERSION")}
        }))
        .unwrap_or_default()
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        Self::config()
    }

    async fn list_roots(
        &self,
        _: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let uri = url::Url::from_directory_path(&self.root)
            .map(|u| u.to_string().trim_end_matches('/').to_string())
            .unwrap_or_else(|()| format!("file://{}", self.root.display()));
        let name = self
            .root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "workspace".into());
        serde_json::from_value(json!({"roots": [{"uri": uri, "name": name}]}))
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let (message, schema) = match request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => (
                message,
                serde_json::to_value(requested_schema).unwrap_or(Value::Null),
            ),
            // URL mode is not declared; a server that asks anyway is declined.
            _ => return Ok(ElicitResult::new(ElicitationAction::Decline)),
        };
        let answer = self
            .elicitor
            .elicit(Elicitation {
                server: self.server.clone(),
                message,
                schema,
            })
            .await;
        Ok(match answer {
            ElicitAnswer::Accept(content) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content))
            }
            ElicitAnswer::Decline => ElicitResult::new(ElicitationAction::Decline),
            ElicitAnswer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        })
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        let Ok(token) = serde_json::to_string(&params.progress_token) else {
            return;
        };
        let reporter = self
            .progress
            .lock()
            .ok()
            .and_then(|routes| routes.get(&token).cloned());
        if let Some(reporter) = reporter {
            reporter.report(params.progress, params.total, params.message);
        }
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_declares_roots_and_form_elicitation_but_not_sampling() {
        let config = serde_json::to_value(Handler::config()).unwrap();
        assert_eq!(config["protocolVersion"], PROTOCOL_VERSION);
        assert_eq!(config["clientInfo"]["name"], "anvil");
        let caps = &config["capabilities"];
        assert!(caps.get("roots").is_some(), "{caps}");
        assert!(caps["elicitation"].get("form").is_some(), "{caps}");
        assert!(caps.get("sampling").is_none(), "{caps}");
    }

    #[test]
    fn defaults_come_from_the_schema() {
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "default": "anvil"},
            "n": {"type": "integer", "default": 3},
            "free": {"type": "string"}
        }});
        let d = defaults(&schema);
        assert_eq!(Value::Object(d), json!({"name": "anvil", "n": 3}));
    }
}
