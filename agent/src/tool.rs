//! [`Tool`] and [`TypedTool`]: what the model can invoke, and what invoking it can do.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// What running a tool can do to the world. Permissions (and parallel execution) are decided
/// from this, so a tool must never understate it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effects {
    /// Changes files.
    pub writes: bool,
    /// Starts processes (which may do anything their sandbox allows).
    pub subprocess: bool,
    /// Talks to the network.
    pub network: bool,
    /// What the call does cannot be known (a tool from an MCP server, a tool that declares
    /// nothing): judged as doing anything, and never allowed by a mode's default short of
    /// bypass — only by a rule naming it.
    pub unknown: bool,
}

impl Effects {
    pub const READ_ONLY: Effects = Effects {
        writes: false,
        subprocess: false,
        network: false,
        unknown: false,
    };
    pub const WRITES: Effects = Effects {
        writes: true,
        subprocess: false,
        network: false,
        unknown: false,
    };
    /// A subprocess can write and reach the network unless a sandbox says otherwise.
    pub const SUBPROCESS: Effects = Effects {
        writes: true,
        subprocess: true,
        network: true,
        unknown: false,
    };
    /// Anything at all (see [`Effects::unknown`]).
    pub const UNKNOWN: Effects = Effects {
        writes: true,
        subprocess: true,
        network: true,
        unknown: true,
    };

    pub fn is_read_only(self) -> bool {
        self == Effects::READ_ONLY
    }
}

/// What happens to a tool's effects when its turn is cancelled mid-call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cancellation {
    /// Stops at once and changed nothing: safe to drop at any point.
    Immediate,
    /// Either completes or changes nothing (an atomic rename); a cancel never leaves it half
    /// done, but whether it completed must be checked.
    Atomic,
    /// Its process group is killed; whatever it did before that stays done, so its effects are
    /// unknown.
    KillsProcesses,
    /// It runs elsewhere (an MCP server) and is asked to stop; whatever it did before that, or
    /// does before it stops, stays done.
    Requested,
}

/// What a tool gets besides its arguments.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The directory relative paths resolve against.
    pub cwd: PathBuf,
    /// Cancelled when the turn is; long-running tools must watch it.
    pub cancel: CancellationToken,
    /// Where the call reports progress, when a front end shows it.
    pub progress: Option<crate::event::ProgressReporter>,
}

impl ToolContext {
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        Self {
            cwd: cwd.into(),
            cancel: CancellationToken::new(),
            progress: None,
        }
    }
}

/// Why a tool call did not succeed. The message is for the model: say what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    InvalidArgs(String),
    #[error("{0}")]
    Failed(String),
    #[error("cancelled")]
    Cancelled,
}

/// What a successful call returns: text for the model, and images it should see beside it (an
/// MCP tool's screenshot). Images go to the model as image blocks after the turn's results —
/// never as base64 text — and as a placeholder naming type and size to a text-only model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOutput {
    pub text: String,
    pub images: Vec<ToolImage>,
}

/// One image of a [`ToolOutput`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolImage {
    pub media_type: String,
    /// Base64-encoded bytes.
    pub data: String,
}

impl From<String> for ToolOutput {
    fn from(text: String) -> Self {
        Self {
            text,
            images: Vec::new(),
        }
    }
}

impl From<&str> for ToolOutput {
    fn from(text: &str) -> Self {
        text.to_string().into()
    }
}

/// A capability the model can invoke. Object safe: the registry holds `Arc<dyn Tool>`.
#[async_trait::async_trait]
pub trait Tool: Send + Sync {
    /// `^[a-zA-Z0-9_-]{1,64}$`, unique in a registry.
    fn name(&self) -> &str;
    /// A prompt: what it does, when to prefer it, its limits.
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn input_schema(&self) -> Value;
    /// What this call can do, judged from its arguments.
    fn effects(&self, args: &Value) -> Effects;
    fn cancellation(&self) -> Cancellation;
    /// What permission rules judge this call by: the command for bash, the path for file
    /// tools; `None` when rules can only name the tool.
    fn permission_subject(&self, _args: &Value) -> Option<String> {
        None
    }
    /// Runs the call. `args` is a JSON object (dispatch checks that first).
    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError>;
}

/// The JSON Schema of a tool's arguments type, as the model gets it.
pub fn schema_of<A: JsonSchema>() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(A)).unwrap_or_default();
    if let Some(obj) = schema.as_object_mut() {
        // schemars adds these; they are noise to the model and some providers reject them.
        obj.remove("$schema");
        obj.remove("title");
    }
    schema
}

/// A tool whose arguments are a Rust type; [`Tool`] comes with it.
#[async_trait::async_trait]
pub trait TypedTool: Send + Sync {
    type Args: DeserializeOwned + JsonSchema + Send;
    const NAME: &'static str;
    const EFFECTS: Effects;
    const CANCELLATION: Cancellation;

    fn description(&self) -> &str;
    /// See [`Tool::permission_subject`].
    fn permission_subject(&self, _args: &Value) -> Option<String> {
        None
    }
    async fn run(&self, args: Self::Args, ctx: &ToolContext) -> Result<String, ToolError>;
}

#[async_trait::async_trait]
impl<T: TypedTool> Tool for T {
    fn name(&self) -> &str {
        T::NAME
    }

    fn description(&self) -> &str {
        TypedTool::description(self)
    }

    fn input_schema(&self) -> Value {
        schema_of::<T::Args>()
    }

    fn effects(&self, _args: &Value) -> Effects {
        T::EFFECTS
    }

    fn cancellation(&self) -> Cancellation {
        T::CANCELLATION
    }

    fn permission_subject(&self, args: &Value) -> Option<String> {
        TypedTool::permission_subject(self, args)
    }

    async fn call(&self, args: Value, ctx: &ToolContext) -> Result<ToolOutput, ToolError> {
        let args: T::Args =
            serde_json::from_value(args).map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        self.run(args, ctx).await.map(ToolOutput::from)
    }
}
