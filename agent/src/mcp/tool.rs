//! [`McpTool`]: one server tool as a [`Tool`], under its exposed name.
//!
//! Permissions judge it by that name (`mcp__github__*`, `deny = ["mcp__fs__write_file"]`).
//! Its effects come from its annotations only when the server is trusted (`trusted = true` in
//! its config): then `readOnlyHint: true` makes it read-only; anything else — a missing
//! annotation, an untrusted server — is unknown effects, asked about outside bypass. A deny
//! rule is checked before effects, so no annotation can widen it.

use std::sync::Arc;

use serde_json::{Value, json};

use super::connection::{CallError, Connection};
use super::content;
use crate::tool::{Cancellation, Effects, Tool, ToolContext, ToolError, ToolOutput};

pub struct McpTool {
    pub(crate) exposed: String,
    pub(crate) server: String,
    pub(crate) remote: String,
    description: String,
    schema: Value,
    output: Option<Arc<jsonschema::Validator>>,
    effects: Effects,
    conn: Arc<Connection>,
    /// Bytes of its spec as sent (name, description, schema): what deferral weighs.
    pub(crate) spec_bytes: usize,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("exposed", &self.exposed)
            .finish()
    }
}

impl McpTool {
    /// `remote` as the server listed it. `trusted`: whether its annotations are believed.
    /// Its description and schema go to the model, so they are redacted like results.
    pub fn new(
        exposed: String,
        remote: &rmcp::model::Tool,
        trusted: bool,
        conn: Arc<Connection>,
        redactor: &crate::secrets::Redactor,
    ) -> Self {
        let server = conn.name.clone();
        let mut schema = Value::Object((*remote.input_schema).clone());
        if let Some(obj) = schema.as_object_mut()
            && !obj.contains_key("type")
        {
            obj.insert("type".into(), json!("object"));
        }
        let text = remote
            .description
            .as_deref()
            .or(remote.title.as_deref())
            .unwrap_or("");
        let description = redactor.redact(format!("[{server}] {text}").trim_end());
        if !redactor.is_empty() {
            let text = schema.to_string();
            let redacted = redactor.redact(&text);
            if redacted != text {
                schema = serde_json::from_str(&redacted).unwrap_or_else(
                    |_| json!({"type": "object", "description": "(schema withheld: it held a secret)"}),
                );
            }
        }
        let output = remote.output_schema.as_ref().and_then(|s| {
            match content::compile(&Value::Object((**s).clone())) {
                Ok(v) => Some(Arc::new(v)),
                Err(e) => {
                    tracing::warn!(target: "anvil::mcp", server = %server, tool = %remote.name,
                        "outputSchema does not compile, results are not checked: {e}");
                    None
                }
            }
        });
        let read_only =
            trusted && remote.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true);
        let effects = if read_only {
            Effects::READ_ONLY
        } else {
            Effects::UNKNOWN
        };
        let spec_bytes = exposed.len() + description.len() + schema.to_string().len();
        Self {
            exposed,
            server,
            remote: remote.name.to_string(),
            description,
            schema,
            output,
            effects,
            conn,
            spec_bytes,
        }
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// The tool's name on its server.
    pub fn remote_name(&self) -> &str {
        &self.remote
    }
}

#[async_trait::async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.exposed
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    fn effects(&self, _: &Value) -> Effects {
        self.effects
    }

    fn cancellation(&self) -> Cancellation {
        Cancellation::Requested
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        match self
            .conn
            .call(&self.remote, args, &ctx.cancel, ctx.progress.as_ref())
            .await
        {
            Ok(result) => content::convert(&result, self.output.as_deref()),
            Err(CallError::Cancelled) => Err(ToolError::Cancelled),
            Err(e) => Err(ToolError::Failed(format!(
                "MCP server '{}' ({}): {e}",
                self.server, self.remote
            ))),
        }
    }
}
