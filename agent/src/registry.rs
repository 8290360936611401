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
use crate::tool::{Cancellation, Tool, ToolContext, ToolError, ToolOutput};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("tool name '{0}' is invalid: names must match ^[a-zA-Z0-9_-]{{1,64}}$")]
    InvalidName(String),
    #[error("a tool named '{0}' is already registered")]
    Duplicate(String),
    #[error("there is no built-in tool named '{name}' (there are: {known})")]
    Unknown { name: String, known: String },
}

/// One call's outcome for the transcript: its result block, and the images the tool returned
/// (image blocks, which go after all of a step's results: providers want results first).
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatched {
    pub result: ContentBlock,
    pub images: Vec<ContentBlock>,
}

impl Dispatched {
    /// A result with no images (a refused or skipped call).
    pub fn result(result: ContentBlock) -> Self {
        Self {
            result,
            images: Vec::new(),
        }
    }
}

/// The default cap on one tool result, in characters.
pub const DEFAULT_MAX_OUTPUT_CHARS: usize = 30_000;

/// Tools that come and go while a session runs: MCP servers connecting after the prompt is up,
/// re-listing on `list_changed`, deferred tools activated by a search.
pub trait ToolSource: Send + Sync {
    /// The tools offered to the model now; their specs go in each request.
    fn offered(&self) -> Vec<Arc<dyn Tool>>;
    /// A tool by name, offered or not.
    fn find(&self, name: &str) -> Option<Arc<dyn Tool>>;
    /// Changes whenever [`ToolSource::offered`] would.
    fn generation(&self) -> u64;
}

pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    sources: Vec<Arc<dyn ToolSource>>,
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
            sources: Vec::new(),
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

    /// Adds tools that change while the session runs. A source's tool whose name a native
    /// tool has is never offered or dispatched (the native one wins).
    pub fn add_source(&mut self, source: Arc<dyn ToolSource>) {
        self.sources.push(source);
    }

    /// Keeps only the registered tools named in `names` (tools from sources are not
    /// affected). A name that is not registered is an error naming the tools there are.
    pub fn retain(&mut self, names: &[String]) -> Result<(), RegistryError> {
        if let Some(unknown) = names.iter().find(|n| !self.tools.contains_key(n.as_str())) {
            return Err(RegistryError::Unknown {
                name: unknown.clone(),
                known: self.tools.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        }
        self.tools.retain(|name, _| names.contains(name));
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(tool) = self.tools.get(name) {
            return Some(Arc::clone(tool));
        }
        self.sources.iter().find_map(|s| s.find(name))
    }

    /// Changes whenever [`ToolRegistry::specs`] would.
    pub fn generation(&self) -> u64 {
        self.sources
            .iter()
            .fold(0u64, |g, s| g.wrapping_mul(31).wrapping_add(s.generation()))
    }

    /// Tool specs sorted by name: stable between runs, so the cache prefix stays stable.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut all: BTreeMap<String, Arc<dyn Tool>> = BTreeMap::new();
        for source in &self.sources {
            for tool in source.offered() {
                all.entry(tool.name().to_string()).or_insert(tool);
            }
        }
        for (name, tool) in &self.tools {
            all.insert(name.clone(), Arc::clone(tool));
        }
        all.values()
            .map(|t| ToolSpec {
                name: t.name().to_string(),
                description: t.description().to_string(),
                input_schema: t.input_schema(),
            })
            .collect()
    }

    /// The names of the tools offered now, sorted.
    pub fn names(&self) -> Vec<String> {
        self.specs().into_iter().map(|s| s.name).collect()
    }

    /// Runs one call and returns its result block and the images it returned. Never fails.
    pub async fn dispatch(
        &self,
        call_id: &str,
        name: &str,
        args: &Value,
        ctx: &ToolContext,
    ) -> Dispatched {
        let span = crate::telemetry::execute_tool(name, call_id);
        let started = std::time::Instant::now();
        let (output, is_error) = self.run(name, args, ctx).instrument(span.clone()).await;
        span.record("anvil.is_error", is_error);
        crate::telemetry::record_tool_duration(name, started.elapsed().as_secs_f64(), is_error);
        let text = truncate_middle(&self.redactor.redact(&output.text), self.max_output_chars);
        Dispatched {
            result: ContentBlock::tool_result(call_id, text, is_error),
            images: output
                .images
                .into_iter()
                .map(|i| ContentBlock::Image {
                    media_type: i.media_type,
                    data: i.data,
                })
                .collect(),
        }
    }

    async fn run(&self, name: &str, args: &Value, ctx: &ToolContext) -> (ToolOutput, bool) {
        let Some(tool) = self.get(name) else {
            let text = format!(
                "Unknown tool '{name}'. Available tools: {}.",
                self.names().join(", ")
            );
            return (text.into(), true);
        };
        if !args.is_object() {
            let text = format!(
                "Arguments for {name} must be a JSON object; received: {}",
                truncate_middle(&received(args), 500)
            );
            return (text.into(), true);
        }
        match tool.call(args.clone(), ctx).await {
            Ok(output) => (output, false),
            Err(ToolError::InvalidArgs(m)) => (
                format!(
                    "Invalid arguments for {name}: {m}. Check the tool's schema and try again."
                )
                .into(),
                true,
            ),
            Err(ToolError::Failed(m)) => (m.into(), true),
            Err(ToolError::Cancelled) => {
                (cancelled_message(name, tool.cancellation()).into(), true)
            }
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
        Cancellation::Requested => format!(
            "{name} was cancelled and the server was asked to stop it; anything it did before that may have happened. Its effects are unknown."
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
            async fn call(
                &self,
                _: Value,
                _: &ToolContext,
            ) -> Result<crate::ToolOutput, ToolError> {
                Ok(String::new().into())
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
                .await
                .result,
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
                .await
                .result,
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
            .await
            .result,
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
