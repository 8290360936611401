//! [`ToolRegistry`]: the tools of a session, their specs, and dispatch.
//!
//! Dispatch never fails: an unknown tool, arguments that are not an object, invalid arguments,
//! a failing or cancelled tool all become an error *result* the model can read and act on.
//! Every result is redacted and kept under a size limit before it enters the transcript.

use std::collections::BTreeMap;
use std::sync::Arc;
use tracing::Instrument;

use anvil_llm::text::{Keep, Limit};
use anvil_llm::{ContentBlock, ToolSpec};
use serde_json::Value;

use crate::secrets::Redactor;
use crate::tool::{Cancellation, Tool, ToolContext, ToolError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("tool name '{0}' is invalid: names must match ^[a-zA-Z0-9_-]{{1,64}}$")]
    InvalidName(String),
    #[error("a tool named '{0}' is already registered")]
    Duplicate(String),
}

/// The default cap on one tool result, in characters.
pub const DEFAULT_MAX_OUTPUT_CHARS: usize = 30_000;

pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    max_output_chars: usize,
    redactor: Arc<Redactor>,
}

impl Default for ToolRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self {
            tools: BTreeMap::new(),
            max_output_chars: DEFAULT_MAX_OUTPUT_CHARS,
            redactor: Arc::new(Redactor::default()),
        }
    }

    pub fn with_redactor(mut self, redactor: Arc<Redactor>) -> Self {
        self.redactor = redactor;
        self
    }

    /// The redactor every result goes through; register further credentials on it (MCP and
    /// HTTP header values) and hand it to tools that must redact earlier (bash's capture).
    pub fn redactor(&self) -> Arc<Redactor> {
        Arc::clone(&self.redactor)
    }

    pub fn with_max_output_chars(mut self, max: usize) -> Self {
        self.max_output_chars = max;
        self
    }

    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let name = tool.name().to_string();
        let valid = (1..=64).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(RegistryError::InvalidName(name));
        }
        if self.tools.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        self.tools.insert(name, tool);
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Tool specs sorted by name: stable between runs, so the cache prefix stays stable.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .values()
            .map(|t| ToolSpec {
                name: t.name().to_string(),
                description: t.description().to_string(),
                input_schema: t.input_schema(),
            })
            .collect()
    }

    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// Runs one call and returns its result block. Never fails.
    pub async fn dispatch(
        &self,
        call_id: &str,
        name: &str,
        args: &Value,
        ctx: &ToolContext,
    ) -> ContentBlock {
        let span = crate::telemetry::execute_tool(name, call_id);
        let started = std::time::Instant::now();
        let (text, is_error) = self.run(name, args, ctx).instrument(span.clone()).await;
        span.record("anvil.is_error", is_error);
        crate::telemetry::record_tool_duration(name, started.elapsed().as_secs_f64(), is_error);
        let text = truncate_middle(&self.redactor.redact(&text), self.max_output_chars);
        ContentBlock::tool_result(call_id, text, is_error)
    }

    async fn run(&self, name: &str, args: &Value, ctx: &ToolContext) -> (String, bool) {
        let Some(tool) = self.tools.get(name) else {
            return (
                format!(
                    "Unknown tool '{name}'. Available tools: {}.",
                    self.names().join(", ")
                ),
                true,
            );
        };
        if !args.is_object() {
            return (
                format!(
                    "Arguments for {name} must be a JSON object; received: {}",
                    truncate_middle(&received(args), 500)
                ),
                true,
            );
        }
        match tool.call(args.clone(), ctx).await {
            Ok(text) => (text, false),
            Err(ToolError::InvalidArgs(m)) => (
                format!(
                    "Invalid arguments for {name}: {m}. Check the tool's schema and try again."
                ),
                true,
            ),
            Err(ToolError::Failed(m)) => (m, true),
            Err(ToolError::Cancelled) => (cancelled_message(name, tool.cancellation()), true),
        }
    }
}

fn received(args: &Value) -> String {
    match args {
        // MessageBuilder keeps unparseable arguments as the raw string.
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// What the model is told about a call cut off by cancellation.
pub fn cancelled_message(name: &str, cancellation: Cancellation) -> String {
    match cancellation {
        Cancellation::Immediate => {
            format!("{name} was cancelled before it finished; it changed nothing.")
        }
        Cancellation::Atomic => format!(
            "{name} was cancelled; it either completed fully or changed nothing. Check before relying on it."
        ),
        Cancellation::KillsProcesses => format!(
            "{name} was cancelled and its processes were killed; anything it did before that may have happened. Its effects are unknown."
        ),
    }
}

/// Keeps the head and the tail of `s` (where errors and summaries usually are) within `max`
/// characters, with a note in the middle saying how much was cut. Never splits a character.
pub fn truncate_middle(s: &str, max: usize) -> String {
    let note_budget = 120.min(max / 2);
    let t = Limit::chars(max)
        .keep(Keep::HeadAndTail)
        .room(note_budget)
        .apply(s);
    if !t.is_cut() {
        return s.to_string();
    }
    format!(
        "{}\n\n[… {} characters cut from the middle; narrow the command or read a smaller range to see them …]\n\n{}",
        t.head, t.omitted, t.tail
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::calculator::Calculator;
    use serde_json::json;

    fn registry() -> ToolRegistry {
        let mut r = ToolRegistry::new();
        r.register(Arc::new(Calculator)).unwrap();
        r
    }

    fn result_of(block: ContentBlock) -> (String, bool) {
        match block {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => (content, is_error),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn names_are_checked() {
        struct Named(&'static str);
        #[async_trait::async_trait]
        impl Tool for Named {
            fn name(&self) -> &str {
                self.0
            }
            fn description(&self) -> &str {
                ""
            }
            fn input_schema(&self) -> Value {
                json!({})
            }
            fn effects(&self, _: &Value) -> crate::tool::Effects {
                crate::tool::Effects::READ_ONLY
            }
            fn cancellation(&self) -> Cancellation {
                Cancellation::Immediate
            }
            async fn call(&self, _: Value, _: &ToolContext) -> Result<String, ToolError> {
                Ok(String::new())
            }
        }
        let mut r = registry();
        assert_eq!(
            r.register(Arc::new(Calculator)),
            Err(RegistryError::Duplicate("calculator".into()))
        );
        for bad in ["", "has space", "dot.name", "ünïcode"] {
            assert!(
                matches!(
                    r.register(Arc::new(Named(bad))),
                    Err(RegistryError::InvalidName(_))
                ),
                "{bad:?}"
            );
        }
        let long: &'static str = Box::leak("x".repeat(65).into_boxed_str());
        assert!(r.register(Arc::new(Named(long))).is_err());
        r.register(Arc::new(Named("a_b-C9"))).unwrap();
        let names: Vec<String> = r.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["a_b-C9", "calculator"]);
    }

    #[tokio::test]
    async fn unknown_tool_lists_the_available_names() {
        let (text, is_error) = result_of(
            registry()
                .dispatch("c1", "calc", &json!({}), &ToolContext::new("."))
                .await,
        );
        assert!(is_error);
        assert_eq!(text, "Unknown tool 'calc'. Available tools: calculator.");
    }

    #[tokio::test]
    async fn non_object_arguments_echo_what_was_received() {
        let (text, is_error) = result_of(
            registry()
                .dispatch(
                    "c1",
                    "calculator",
                    &json!("not json"),
                    &ToolContext::new("."),
                )
                .await,
        );
        assert!(is_error);
        assert_eq!(
            text,
            "Arguments for calculator must be a JSON object; received: not json"
        );
    }

    #[tokio::test]
    async fn results_are_redacted() {
        let redactor = Redactor::from_vars([("MY_API_KEY".to_string(), "123456789".to_string())]);
        let r = registry().with_redactor(Arc::new(redactor));
        let (text, _) = result_of(
            r.dispatch(
                "c1",
                "calculator",
                &json!({"a": 123456788, "b": 1, "op": "add"}),
                &ToolContext::new("."),
            )
            .await,
        );
        assert_eq!(text, "[REDACTED:MY_API_KEY]");
    }

    #[test]
    fn truncate_middle_keeps_head_and_tail_and_never_splits_characters() {
        let s = "🦀".repeat(10_000);
        let t = truncate_middle(&s, 1_000);
        assert!(t.chars().count() <= 1_000, "{}", t.chars().count());
        assert!(t.starts_with("🦀🦀"));
        assert!(t.ends_with("🦀🦀"));
        assert!(t.contains("characters cut from the middle"));
        assert_eq!(truncate_middle("short", 10), "short");
        let mixed = format!("HEAD{}TAIL", "é".repeat(5000));
        let t = truncate_middle(&mixed, 300);
        assert!(t.starts_with("HEAD") && t.ends_with("TAIL"));
        // 120 of 250 characters are left for the note; the other 130 split evenly.
        let digits: String = ('0'..='9').cycle().take(300).collect();
        assert_eq!(
            truncate_middle(&digits, 250),
            format!(
                "{}\n\n[… 170 characters cut from the middle; narrow the command or read a smaller range to see them …]\n\n{}",
                &digits[..65],
                &digits[235..]
            )
        );
    }
}
