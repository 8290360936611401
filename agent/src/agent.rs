//! [`Agent`]: the agent loop. Sample the model, run the tools it asks for, append the results,
//! until the turn ends (docs/ARCHITECTURE.md, "The life of a headless turn").
//!
//! Invariants:
//! - the transcript is validated before every request and after every committed tool batch;
//!   the pending-tail exception is granted only between "the model asked" and "the tools ran";
//! - every turn emits exactly one `TurnFinished`, error paths included, and `run_turn` returns
//!   the same outcome;
//! - a response that did not finish normally (max tokens, refusal, an unknown stop, a broken
//!   stream) never has its tool calls executed;
//! - on cancel, a partial response's text is kept (it was shown) and its usage counted, reported
//!   or estimated; its cut-off tool calls are dropped, and every tool call already in the
//!   transcript gets a result saying what happened to it, so the transcript stays valid;
//! - every change to the session goes through one function, [`Agent::commit`]: the record is
//!   written to the session file (when there is one) and applied through the session reducer,
//!   the same one that loads a file — so a loaded session is the live one. A tool call's
//!   `tool_started` is on disk before the call runs; a call whose record cannot be written
//!   does not run, and a session that cannot be written ends the turn as failed.

use std::path::PathBuf;
use std::sync::Arc;

use anvil_llm::config::Pricing;
use anvil_llm::text::Limit;
use anvil_llm::{
    ChatRequest, ContentBlock, FinishReason, LlmError, Message, MessageBuilder, Provider,
    ProviderMeta, Role, StreamEvent, TranscriptError, TranscriptValidator,
};
use futures::StreamExt;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::approval::{ApprovalDecision, ApprovalRequest, Approver};
use crate::context::{ContextBudget, ContextTracker};
use crate::event::{AgentEvent, EventSink, TurnOutcome};
use crate::permissions::{Decision, Policy};
use crate::registry::{Dispatched, ToolRegistry};
use crate::session::{
    LoadedSession, Record, ReplaceReason, SessionError, SessionState, SessionWriter, repair,
};
use crate::text_calls::{self, ToolCallMode};
use crate::tool::ToolContext;

/// Per-session settings of the loop.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// The provider's model id.
    pub model: String,
    pub system: Option<String>,
    /// Model requests per turn before the turn stops with `MaxSteps`.
    pub max_steps: u32,
    /// The output limit of each request.
    pub max_tokens: u32,
    pub temperature: Option<f32>,
    /// Ask for prompt-cache breakpoints (Anthropic). On by default: a coding session resends
    /// the same prefix every step.
    pub cache: bool,
    /// OpenAI's `prompt_cache_key`, where the provider accepts it.
    pub prompt_cache_key: Option<String>,
    /// The model's context window in tokens; `None` is unknown, and a conservative default
    /// ([`ContextBudget::DEFAULT_WINDOW`]) is used.
    pub context_window: Option<u32>,
    /// The model's prices: each response's cost is recorded with its usage. `None` is unknown
    /// pricing, and the cost stays unknown (never 0).
    pub pricing: Option<Pricing>,
    /// The wire protocol, for telemetry (`gen_ai.provider.name`); `None`: the provider's name.
    pub protocol: Option<anvil_llm::Protocol>,
    /// What to do with tool calls the model writes as text ([`crate::text_calls`]).
    pub tool_calls: ToolCallMode,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            model: String::new(),
            system: None,
            max_steps: 50,
            max_tokens: 8_192,
            temperature: None,
            cache: true,
            prompt_cache_key: None,
            context_window: None,
            pricing: None,
            protocol: None,
            tool_calls: ToolCallMode::Native,
        }
    }
}

/// The longest preview of a tool result carried in `ToolCallFinished`.
const PREVIEW_CHARS: usize = 400;

/// One session's agent: a provider, a toolset, and the transcript.
pub struct Agent {
    provider: Arc<dyn Provider>,
    tools: Arc<ToolRegistry>,
    /// The request sent each step. Its `messages` *is* the transcript, so a step costs no copy
    /// of it; its `tools` are recomputed only when the registry's generation changes (an MCP
    /// server connected, re-listed, a deferred tool was activated), which keeps the cache
    /// prefix stable otherwise.
    request: ChatRequest,
    tools_generation: u64,
    /// Kept in step with `request.messages`: every append is checked against it, so each step
    /// validates only what it adds.
    validator: TranscriptValidator,
    max_steps: u32,
    cwd: PathBuf,
    events: EventSink,
    /// Judges every call before it runs; `None` runs every call (tests and trusted callers).
    permissions: Option<(Policy, Arc<dyn Approver>)>,
    /// The session beside the messages (model, todos, open calls, usage), kept by the reducer.
    session: SessionState,
    /// Where records go; `None` keeps the session in memory only.
    writer: Option<SessionWriter>,
    /// The first record that could not be written this turn: the turn ends as failed.
    unwritten: Option<SessionError>,
    /// The context window and its thresholds.
    budget: ContextBudget,
    /// The context's revision and the last exact token count.
    tracker: ContextTracker,
    /// The current model's prices, for the cost recorded with each response's usage.
    pricing: Option<Pricing>,
    /// A hard budget: every model request must be admitted against it before it is sent.
    spend_limit: Option<SpendLimit>,
    /// The wire protocol, for telemetry.
    protocol: Option<anvil_llm::Protocol>,
    /// What to do with tool calls the model writes as text.
    tool_calls: ToolCallMode,
    /// The system prompt as configured, before [`text_calls::system_prompt`] adds what the
    /// tool-call mode needs.
    system: Option<String>,
    /// This turn's previous step's calls (name, arguments), to notice a model repeating
    /// itself under `tool_calls = "text"` ([`text_calls::note_repeated`]).
    previous_calls: Option<Vec<(String, Value)>>,
}

/// A hard budget in USD over what this agent spends from `base` (what the session had spent
/// when the budget was set, or when it was resumed).
#[derive(Debug, Clone, Copy, PartialEq)]
struct SpendLimit {
    usd: f64,
    base: f64,
}

enum Step {
    Continue,
    Finished(TurnOutcome),
}

/// A model request that was sent ([`Agent::metered`]).
struct Metered {
    sampled: Result<Sampled, LlmError>,
    /// Its span, for the usage still to record.
    chat: tracing::Span,
    reservation: Option<anvil_llm::cost::Reservation>,
}

/// What a model request brought back.
enum Sampled {
    /// The whole response.
    Complete(anvil_llm::Completion),
    /// Cancelled; what had arrived by then, `None` when the response had not begun.
    Cancelled(Option<Partial>),
}

/// What arrived of a response before it was cancelled: it was shown as it streamed, so its
/// text is kept in the transcript ([`Agent::keep_partial`]) and its usage counted
/// ([`Agent::commit_partial_usage`]).
struct Partial {
    /// The blocks so far (a tool call's arguments may be cut short).
    message: Message,
    /// What the provider had reported by then.
    usage: anvil_llm::Usage,
}

impl Agent {
    pub fn new(
        provider: Arc<dyn Provider>,
        tools: Arc<ToolRegistry>,
        cfg: AgentConfig,
        cwd: impl Into<PathBuf>,
        events: EventSink,
    ) -> Self {
        let budget = ContextBudget::new(
            cfg.context_window
                .map_or(ContextBudget::DEFAULT_WINDOW, u64::from),
            u64::from(cfg.max_tokens),
        );
        let tools_generation = tools.generation();
        let request = ChatRequest {
            model: cfg.model,
            system: text_calls::system_prompt(cfg.system.as_deref(), cfg.tool_calls),
            messages: Vec::new(),
            tools: tools.specs(),
            max_tokens: cfg.max_tokens,
            temperature: cfg.temperature,
            cache: cfg.cache,
            prompt_cache_key: cfg.prompt_cache_key,
        };
        Self {
            provider,
            tools,
            request,
            validator: TranscriptValidator::new(),
            max_steps: cfg.max_steps,
            cwd: cwd.into(),
            events,
            permissions: None,
            session: SessionState::default(),
            tools_generation,
            writer: None,
            unwritten: None,
            budget,
            tracker: ContextTracker::default(),
            pricing: cfg.pricing,
            spend_limit: None,
            protocol: cfg.protocol,
            tool_calls: cfg.tool_calls,
            system: cfg.system,
            previous_calls: None,
        }
    }

    /// Holds every model request of this agent to a hard budget of `usd` (admission control):
    /// before each request its conservative reservation
    /// ([`anvil_llm::cost::reservation`]) must fit what is left, else the turn ends
    /// [`TurnOutcome::BudgetExceeded`] with nothing sent; a model without pricing is never
    /// admitted. The budget counts from what the session has spent when it is set (or resumed).
    /// Spend never passes `usd` by more than one request's reservation's misestimate.
    pub fn set_budget(&mut self, usd: f64) {
        self.spend_limit = Some(SpendLimit {
            usd,
            base: self.session.cost.spent(),
        });
    }

    /// The hard budget, and what was spent against it so far.
    pub fn spend_limit(&self) -> Option<(f64, f64)> {
        self.spend_limit
            .map(|l| (l.usd, self.session.cost.spent() - l.base))
    }

    /// Keeps the session in `writer`'s file, starting from `loaded` (a new session just
    /// created, or one resumed). Calls a crash left without a result are answered first
    /// ([`repair`]): an unknown outcome for one that started, never a re-run.
    pub fn with_session(
        mut self,
        writer: SessionWriter,
        loaded: LoadedSession,
    ) -> Result<Self, SessionError> {
        self.attach_session(writer, loaded)?;
        Ok(self)
    }

    /// [`Agent::with_session`] on a running agent (`/resume`): the session it kept until now
    /// is closed (its lock released), and the loaded one continues.
    pub fn attach_session(
        &mut self,
        writer: SessionWriter,
        loaded: LoadedSession,
    ) -> Result<(), SessionError> {
        let repairs = repair(&loaded);
        self.session = loaded.state;
        if let Some(limit) = &mut self.spend_limit {
            limit.base = self.session.cost.spent();
        }
        self.request.messages = loaded.messages;
        self.writer = Some(writer);
        for record in repairs {
            self.commit(record)?;
        }
        let empty = self.request.messages.is_empty();
        let validator = TranscriptValidator::from_messages(&self.request.messages)
            .and_then(|v| {
                if empty {
                    Ok(v)
                } else {
                    v.check_complete().map(|()| v)
                }
            })
            .map_err(|e| SessionError::InvalidTranscript {
                path: self
                    .writer
                    .as_ref()
                    .map(|w| w.path().to_path_buf())
                    .unwrap_or_default(),
                reason: e.to_string(),
            })?;
        self.validator = validator;
        self.tracker.advance();
        if !self.session.model.is_empty() && self.session.model != self.request.model {
            let model = self.request.model.clone();
            self.commit(Record::ModelChanged { model })?;
        }
        Ok(())
    }

    /// The session beside the messages.
    pub fn session(&self) -> &SessionState {
        &self.session
    }

    /// The session file's id, when the session is kept in one.
    pub fn session_id(&self) -> Option<&str> {
        self.writer.as_ref().map(|w| w.id())
    }

    /// Whether the session file could not be written (a full disk): the turn that found it
    /// ended `failed`, and the file holds everything up to that point and nothing after.
    pub fn session_unwritten(&self) -> bool {
        self.writer.as_ref().is_some_and(|w| w.has_failed())
    }

    /// The session file, when the session is kept in one.
    pub fn session_path(&self) -> Option<&std::path::Path> {
        self.writer.as_ref().map(|w| w.path())
    }

    /// Writes `record` to the session file (when there is one), then applies it through the
    /// session reducer: the one way the session changes. The change is applied even when the
    /// write fails (the turn goes on in memory to a consistent end), and the failure is kept:
    /// the turn ends as failed.
    fn commit(&mut self, record: Record) -> Result<(), SessionError> {
        let written = match &mut self.writer {
            Some(w) => w.append(&record),
            None => Ok(()),
        };
        // The prefix changed, or is counted differently: the last exact count is stale.
        if matches!(
            record,
            Record::ContextReplaced { .. } | Record::ModelChanged { .. }
        ) {
            self.tracker.advance();
        }
        // The reducer cannot fail on records the agent makes (it checks indices and call ids
        // the agent took from this very state); were it to, the state is unchanged.
        let _ = self.session.apply(&mut self.request.messages, record);
        written
    }

    /// Records one response's usage, with its cost when the model's pricing is known (settling
    /// the request's reservation), and tells the front end. A response whose provider reported
    /// no input usage (some servers send no usage, or only the output) is never a known cost:
    /// it is charged an estimate — the reservation's input part, plus the reported output or
    /// else the output `message` holds. The usage and cost go on the request's `chat` span and
    /// into the metrics too.
    async fn commit_usage(
        &mut self,
        usage: anvil_llm::Usage,
        reservation: Option<anvil_llm::cost::Reservation>,
        message: &Message,
        chat: &tracing::Span,
    ) {
        let estimated = usage.total_input() == 0;
        let cost_usd = self.pricing.map(|p| {
            if !estimated {
                return p.cost(&usage);
            }
            let output = match usage.output {
                0 => crate::context::budget::estimate_messages(std::slice::from_ref(message)),
                n => n,
            };
            reservation.map_or(0.0, |r| r.input_usd) + output as f64 * p.output / 1_000_000.0
        });
        let estimated = estimated && cost_usd.is_some();
        self.commit_or_note(Record::Usage {
            usage,
            cost_usd,
            estimated,
        });
        crate::telemetry::record_usage(chat, &self.request.model, &usage, cost_usd, estimated);
        self.events
            .send(AgentEvent::Usage {
                usage,
                cost_usd,
                estimated: false,
            })
            .await;
    }

    /// Counts a response cancelled after it began: the usage the provider reported so far,
    /// what it had not reported yet estimated — the input as `input_tokens` (the request's
    /// estimate), the output from what arrived (chars / 4) when that is more than was
    /// reported — and marked as an estimate, in the session and in the `Usage` event. Settles
    /// the request's reservation.
    async fn commit_partial_usage(
        &mut self,
        partial: &Partial,
        input_tokens: u64,
        chat: &tracing::Span,
    ) {
        let mut usage = partial.usage;
        let mut estimated = false;
        if usage.total_input() == 0 {
            usage.input = input_tokens;
            estimated = true;
        }
        let seen = if partial.message.content.is_empty() {
            0
        } else {
            crate::context::budget::estimate_messages(std::slice::from_ref(&partial.message))
        };
        if seen > usage.output {
            usage.output = seen;
            estimated = true;
        }
        let cost_usd = self.pricing.map(|p| p.cost(&usage));
        self.commit_or_note(Record::Usage {
            usage,
            cost_usd,
            estimated,
        });
        crate::telemetry::record_usage(chat, &self.request.model, &usage, cost_usd, estimated);
        self.events
            .send(AgentEvent::Usage {
                usage,
                cost_usd,
                estimated,
            })
            .await;
    }

    /// Keeps the text of a response cancelled mid-stream in the transcript: it was shown, so
    /// a resumed session shows it too, and the model sees what it had said. Its reasoning and
    /// tool calls are left out (a call cut off has no whole arguments, and never runs).
    fn keep_partial(&mut self, partial: Option<Partial>) {
        let Some(partial) = partial else { return };
        let text: Vec<ContentBlock> = partial
            .message
            .content
            .into_iter()
            .filter(|b| matches!(b, ContentBlock::Text { text } if !text.trim().is_empty()))
            .collect();
        if text.is_empty() {
            return;
        }
        // A transcript that cannot take it stays as it was: the turn is cancelled either way.
        let _ = self.append(Message::new(Role::Assistant, text));
    }

    /// Admits a request of about `input_tokens` with `max_output`: under a hard budget its
    /// reservation must fit what is left. A priced request's reservation is recorded before it
    /// is sent (so a killed process's is kept); returns it, to settle by [`Agent::settle`].
    /// `input_tokens`: `None` for the session's own context, estimated only when the model is
    /// priced (an estimate without a baseline walks the whole context).
    fn admit(
        &mut self,
        input_tokens: Option<u64>,
        max_output: u32,
    ) -> Result<Option<anvil_llm::cost::Reservation>, String> {
        let Some(pricing) = self.pricing else {
            return match self.spend_limit {
                None => Ok(None),
                Some(limit) => Err(format!(
                    "model {} has no pricing, so the ${} budget cannot be held; add \
                     [models.<alias>.pricing] to your config",
                    self.request.model, limit.usd
                )),
            };
        };
        let input_tokens = input_tokens.unwrap_or_else(|| self.context_tokens());
        let reservation = anvil_llm::cost::reservation(&pricing, input_tokens, max_output);
        if let Some(limit) = self.spend_limit {
            let spent = self.session.cost.spent() - limit.base;
            if spent + reservation.usd > limit.usd {
                return Err(format!(
                    "${spent:.6} spent and the next request reserves ${:.6} ({input_tokens} \
                     input tokens estimated, {max_output} output at most): over the ${} budget",
                    reservation.usd, limit.usd
                ));
            }
        }
        self.commit_or_note(Record::CostReserved {
            usd: reservation.usd,
        });
        Ok(Some(reservation))
    }

    /// One model request, metered: admitted against the budget ([`Agent::admit`], about
    /// `input_tokens`, `None`: the session's context), streamed in its `chat` span, its reservation settled when no usage came
    /// back ([`Agent::settle`]). `request`: a request of its own (compaction's summary, whose
    /// deltas are not forwarded), else the session's. `Err`: why the budget refused it.
    async fn metered(
        &mut self,
        request: Option<&ChatRequest>,
        input_tokens: Option<u64>,
        cancel: &CancellationToken,
    ) -> Result<Metered, String> {
        let max_tokens = request.map_or(self.request.max_tokens, |r| r.max_tokens);
        let reservation = self.admit(input_tokens, max_tokens)?;
        let forward = request.is_none();
        let req = request.unwrap_or(&self.request);
        let chat = crate::telemetry::chat(self.provider_system(), &req.model, max_tokens);
        let sampled = stream_completion(
            &*self.provider,
            req,
            &mut self.events,
            cancel,
            forward,
            &chat,
        )
        .instrument(chat.clone())
        .await;
        self.settle(&chat, reservation, &sampled);
        if let Ok(Sampled::Cancelled(Some(partial))) = &sampled {
            let input = input_tokens.unwrap_or_else(|| self.context_tokens());
            self.commit_partial_usage(partial, input, &chat).await;
        }
        Ok(Metered {
            sampled,
            chat,
            reservation,
        })
    }

    /// After a request: a response that failed, or was cancelled before it began, settles its
    /// reservation with its input part as an estimate, never a known 0 — except a request the
    /// provider answered with an error status (a refused key, no credit, a rate limit, a 5xx):
    /// the provider did no work and bills none, so its estimate is 0 (still marked an
    /// estimate). A response's usage settles it in [`Agent::commit_usage`], a cancelled one's
    /// in [`Agent::commit_partial_usage`].
    fn settle(
        &mut self,
        chat: &tracing::Span,
        reservation: Option<anvil_llm::cost::Reservation>,
        sampled: &Result<Sampled, LlmError>,
    ) {
        if let Some(r) = reservation {
            chat.record("anvil.reserved_usd", r.usd);
        }
        match sampled {
            Ok(Sampled::Complete(_)) => return,
            Err(e) => chat.record("error.type", e.kind().as_str()),
            Ok(Sampled::Cancelled(_)) => chat.record("error.type", "cancelled"),
        };
        if matches!(sampled, Ok(Sampled::Cancelled(Some(_)))) {
            return;
        }
        if let Some(r) = reservation {
            let usd = match sampled {
                Err(LlmError::Http { .. }) => 0.0,
                _ => r.input_usd,
            };
            self.commit_or_note(Record::CostEstimated { usd });
            chat.record("anvil.cost_usd", usd);
            chat.record("anvil.cost.accounting", "estimated");
        }
    }

    /// [`Agent::commit`], keeping the first failure for the end of the turn.
    fn commit_or_note(&mut self, record: Record) -> bool {
        match self.commit(record) {
            Ok(()) => true,
            Err(e) => {
                if self.unwritten.is_none() {
                    self.unwritten = Some(e);
                }
                false
            }
        }
    }

    /// Judges every tool call by `policy` before it runs; `approver` answers the ones that
    /// need approval.
    pub fn with_permissions(mut self, policy: Policy, approver: Arc<dyn Approver>) -> Self {
        self.permissions = Some((policy, approver));
        self
    }

    /// The session's policy (with the rules "always" answers added).
    pub fn policy(&self) -> Option<&Policy> {
        self.permissions.as_ref().map(|(p, _)| p)
    }

    /// The transcript.
    pub fn messages(&self) -> &[Message] {
        &self.request.messages
    }

    /// Replaces the transcript; it must be a valid one.
    pub fn set_messages(&mut self, messages: Vec<Message>) -> Result<(), TranscriptError> {
        let validator = TranscriptValidator::from_messages(&messages)?;
        if !messages.is_empty() {
            validator.check_complete()?;
        }
        self.validator = validator;
        self.commit_or_note(Record::ContextReplaced {
            reason: ReplaceReason::Replaced,
            messages,
        });
        Ok(())
    }

    /// Continues the session on another model. The transcript is handed off deliberately:
    /// reasoning the new target cannot replay is dropped and foreign provider state removed
    /// (see `anvil_llm::handoff`). Returns what was left behind.
    pub fn switch_model(
        &mut self,
        provider: Arc<dyn Provider>,
        model: String,
        protocol: anvil_llm::Protocol,
        max_tokens: u32,
        pricing: Option<Pricing>,
    ) -> anvil_llm::handoff::Handoff {
        let handoff = anvil_llm::handoff::handoff(&self.request.messages, protocol);
        if handoff.messages != self.request.messages {
            self.commit_or_note(Record::ContextReplaced {
                reason: ReplaceReason::Handoff,
                messages: handoff.messages.clone(),
            });
        }
        // The handoff keeps every call and result, so the transcript stays valid; re-derive the
        // validator from it all the same.
        if let Ok(v) = TranscriptValidator::from_messages(&self.request.messages) {
            self.validator = v;
        }
        self.provider = provider;
        self.request.model = model.clone();
        self.request.max_tokens = max_tokens;
        self.pricing = pricing;
        self.protocol = Some(protocol);
        self.commit_or_note(Record::ModelChanged { model });
        handoff
    }

    /// What to do from now on with tool calls the model writes as text (the new model's
    /// setting, after [`Agent::switch_model`]).
    pub fn set_tool_calls(&mut self, mode: ToolCallMode) {
        self.tool_calls = mode;
        self.request.system = text_calls::system_prompt(self.system.as_deref(), mode);
    }

    /// The provider as telemetry names it: the protocol's conventional name, else its own.
    fn provider_system(&self) -> &str {
        match self.protocol {
            Some(p) => p.semconv_name(),
            None => self.provider.name(),
        }
    }

    /// The model id requests are sent to.
    pub fn model(&self) -> &str {
        &self.request.model
    }

    /// Appends a message that must keep the transcript valid.
    fn append(&mut self, message: Message) -> Result<(), TranscriptError> {
        self.validator.push(&message)?;
        self.commit_or_note(Record::MessageAppended { message });
        Ok(())
    }

    /// Runs one turn for `input` and returns how it ended (also sent as `TurnFinished`).
    pub async fn run_turn(
        &mut self,
        input: Vec<ContentBlock>,
        cancel: CancellationToken,
    ) -> TurnOutcome {
        self.unwritten = None;
        self.previous_calls = None;
        let span = crate::telemetry::invoke_agent(
            self.provider_system(),
            &self.request.model,
            self.session_id(),
        );
        let mut outcome = self.turn(input, &cancel).instrument(span.clone()).await;
        if let Some(e) = self.unwritten.take() {
            outcome = TurnOutcome::Failed {
                error: format!("the session could not be written, so the turn stopped: {e}"),
                retryable: false,
                http_status: None,
                provider_refusal: None,
            };
        }
        span.record("anvil.outcome", outcome.name());
        self.events
            .send(AgentEvent::TurnFinished {
                outcome: outcome.clone(),
            })
            .await;
        outcome
    }

    async fn turn(&mut self, input: Vec<ContentBlock>, cancel: &CancellationToken) -> TurnOutcome {
        // A user message after a cancelled or failed step merges into it: roles keep alternating.
        let checked = match self.request.messages.last() {
            Some(last) if last.role == Role::User => {
                let index = self.request.messages.len() - 1;
                self.commit_or_note(Record::MessageExtended {
                    index,
                    content: input,
                });
                // A changed message: re-check the transcript once for this turn.
                TranscriptValidator::from_messages(&self.request.messages)
                    .map(|v| self.validator = v)
            }
            _ => self.append(Message::new(Role::User, input)),
        };
        if self.unwritten.is_some() {
            return TurnOutcome::Cancelled;
        }
        if let Err(e) = checked.and_then(|()| self.validator.check_complete()) {
            return broken_transcript(e);
        }
        for step in 1..=self.max_steps {
            self.events.send(AgentEvent::StepStarted { step }).await;
            if cancel.is_cancelled() {
                return TurnOutcome::Cancelled;
            }
            let span = crate::telemetry::step(step);
            match self.step(step, cancel).instrument(span).await {
                Step::Continue => {}
                Step::Finished(outcome) => return outcome,
            }
            // A session that cannot be written stops the turn (run_turn says why).
            if self.unwritten.is_some() {
                return TurnOutcome::Cancelled;
            }
        }
        TurnOutcome::MaxSteps
    }

    async fn step(&mut self, step: u32, cancel: &CancellationToken) -> Step {
        let generation = self.tools.generation();
        if generation != self.tools_generation {
            self.tools_generation = generation;
            self.request.tools = self.tools.specs();
        }
        self.make_room(cancel).await;
        if cancel.is_cancelled() {
            return Step::Finished(TurnOutcome::Cancelled);
        }
        let Metered {
            sampled,
            chat,
            reservation,
        } = match self.metered(None, None, cancel).await {
            Ok(m) => m,
            Err(reason) => return Step::Finished(TurnOutcome::BudgetExceeded { reason }),
        };
        let completion = match sampled {
            Ok(Sampled::Complete(c)) => c,
            Ok(Sampled::Cancelled(partial)) => {
                self.keep_partial(partial);
                return Step::Finished(TurnOutcome::Cancelled);
            }
            Err(e) => {
                let (error, retryable, http_status, provider_refusal) = (
                    e.to_string(),
                    e.is_retryable(),
                    e.http_status(),
                    e.refusal(),
                );
                self.events
                    .send(AgentEvent::StepFailed {
                        step,
                        error: error.clone(),
                        retryable,
                    })
                    .await;
                return Step::Finished(TurnOutcome::Failed {
                    error,
                    retryable,
                    http_status,
                    provider_refusal,
                });
            }
        };
        let mut message = completion.message;
        self.mint_unique_ids(&mut message);
        self.commit_usage(completion.usage, reservation, &message, &chat)
            .await;
        drop(chat);

        let abnormal = match &completion.finish {
            FinishReason::EndTurn | FinishReason::ToolUse => None,
            FinishReason::MaxTokens => Some(TurnOutcome::MaxTokens),
            FinishReason::Refusal => Some(TurnOutcome::Refused),
            FinishReason::Other(reason) => Some(TurnOutcome::ProtocolStopped {
                reason: reason.clone(),
            }),
        };
        if let Some(outcome) = abnormal {
            return Step::Finished(match self.append_uncommitted(message, &completion.finish) {
                Ok(()) => outcome,
                Err(e) => broken_transcript(e),
            });
        }

        if message.tool_calls().next().is_none() {
            self.recover_text_calls(&mut message).await;
        }
        let calls: Vec<(String, String, Value)> = message
            .tool_calls()
            .map(|c| (c.id.to_string(), c.name.to_string(), c.arguments.clone()))
            .collect();
        // The pending tail is legal only here, between "the model asked" and "the tools ran".
        if !message.content.is_empty()
            && let Err(e) = self.append(message)
        {
            return Step::Finished(broken_transcript(e));
        }
        // An exact count only when the provider reported the input.
        if completion.usage.total_input() > 0 {
            self.tracker
                .observe(&completion.usage, self.request.messages.len());
        }
        if calls.is_empty() {
            return Step::Finished(TurnOutcome::Done);
        }
        let mut results = self.run_tools(&calls, cancel).await;
        // Only under `text` (kept nowhere else: a native turn pays nothing for it).
        let these: Option<Vec<(String, Value)>> =
            (self.tool_calls == ToolCallMode::Text).then(|| {
                calls
                    .into_iter()
                    .map(|(_, name, arguments)| (name, arguments))
                    .collect()
            });
        if these.is_some() && self.previous_calls == these {
            text_calls::note_repeated(&mut results);
        }
        self.previous_calls = these;
        if let Err(e) = self
            .append(Message::new(Role::User, results))
            .and_then(|()| self.validator.check_complete())
        {
            return Step::Finished(broken_transcript(e));
        }
        if cancel.is_cancelled() {
            return Step::Finished(TurnOutcome::Cancelled);
        }
        Step::Continue
    }

    /// Makes room before a request: past the budget's hard threshold the conversation is
    /// compacted, past the soft one old tool results are cleared. At most one of each per
    /// step; a compaction that fails leaves the context as it was (the request may still fit).
    async fn make_room(&mut self, cancel: &CancellationToken) {
        let tokens = self.context_tokens();
        if self.budget.should_compact(tokens) {
            if let Err(e) = self.compact(None, cancel).await {
                tracing::warn!("automatic compaction failed: {e}");
            }
            return;
        }
        if self.budget.should_clear(tokens) {
            let mut messages = self.request.messages.clone();
            let freed = crate::context::clear_old_tool_results(&mut messages, KEEP_STEPS);
            if freed > 0 {
                self.commit_or_note(Record::ContextReplaced {
                    reason: ReplaceReason::Clearing,
                    messages,
                });
                let after = self.context_tokens();
                self.events
                    .send(AgentEvent::ContextCleared {
                        bytes_freed: freed as u64,
                        before_tokens: tokens,
                        after_tokens: after,
                    })
                    .await;
            }
        }
    }

    /// The estimated tokens of the next request.
    pub fn context_tokens(&self) -> u64 {
        self.tracker.estimate(
            self.request.system.as_deref(),
            &self.request.tools,
            &self.request.messages,
        )
    }

    /// The context budget (the window and its thresholds).
    pub fn budget(&self) -> ContextBudget {
        self.budget
    }

    /// Replaces the conversation by a summary the model writes (`/compact [focus]`, and
    /// automatically before a request over the budget). The summary request has no tools; the
    /// todo list is carried into the new context. Returns the estimated tokens before and
    /// after.
    pub async fn compact(
        &mut self,
        focus: Option<&str>,
        cancel: &CancellationToken,
    ) -> Result<(u64, u64), String> {
        if self.request.messages.is_empty() {
            return Err("nothing to compact yet".into());
        }
        let before = self.context_tokens();
        let request =
            crate::context::compact::summary_request(&self.request, &self.request.messages, focus);
        // The focus is part of the summary request: it is reserved for too.
        let tokens = before + focus.map_or(0, crate::context::budget::estimate_text);
        let Metered {
            sampled,
            chat,
            reservation,
        } = match self.metered(Some(&request), Some(tokens), cancel).await {
            Ok(m) => m,
            Err(reason) => return Err(format!("the summary request was not sent: {reason}")),
        };
        let completion = match sampled {
            Ok(Sampled::Complete(c)) => c,
            Ok(Sampled::Cancelled(_)) => return Err("cancelled".into()),
            Err(e) => return Err(format!("the summary request failed: {e}")),
        };
        self.commit_usage(completion.usage, reservation, &completion.message, &chat)
            .await;
        if !completion.is_committed() {
            return Err(format!(
                "the summary did not finish ({})",
                finish_label(&completion.finish)
            ));
        }
        let summary: String = completion
            .message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        if summary.trim().is_empty() {
            return Err("the model returned an empty summary".into());
        }
        let messages = crate::context::compact::compacted_context(&summary, &self.session.todos);
        self.validator = TranscriptValidator::from_messages(&messages)
            .map_err(|e| format!("the compacted context is invalid: {e}"))?;
        self.commit_or_note(Record::ContextReplaced {
            reason: ReplaceReason::Compaction,
            messages,
        });
        let after = self.context_tokens();
        self.events
            .send(AgentEvent::Compacted {
                before_tokens: before,
                after_tokens: after,
            })
            .await;
        Ok((before, after))
    }

    /// Canonical tool-call ids are ours: a provider id that repeats one already in the
    /// transcript (some servers reuse "call_0" every response) is replaced by a fresh one.
    fn mint_unique_ids(&self, message: &mut Message) {
        let position = self.request.messages.len();
        let mut in_message: Vec<String> = Vec::new();
        let mut n = 0;
        for block in &mut message.content {
            if let ContentBlock::ToolCall { id, .. } = block {
                if self.validator.has_call_id(id) || in_message.contains(id) {
                    n += 1;
                    *id = format!("{id}_anvil{position}_{n}");
                }
                in_message.push(id.clone());
            }
        }
    }

    /// A response without structured calls that describes calls in its text: with `text` or
    /// `auto` the calls are added to `message` as call blocks (the text is kept), with
    /// canonical ids and an `anvil` meta naming how each was written, so the transcript says
    /// they were recovered and every provider can be sent them back as ordinary calls. With
    /// `native` nothing changes, and a hint names the setting.
    async fn recover_text_calls(&mut self, message: &mut Message) {
        let text = message.text();
        if text.is_empty() {
            return;
        }
        let tools = &self.request.tools;
        let mut found = text_calls::find(&text, &|name| tools.iter().any(|t| t.name == name));
        let dropped: Vec<Vec<String>> = found
            .calls
            .iter_mut()
            .map(|call| match tools.iter().find(|t| t.name == call.name) {
                Some(spec) => text_calls::fit_to_schema(call, &spec.input_schema),
                None => Vec::new(),
            })
            .collect();
        if found.calls.is_empty() {
            return;
        }
        let recover = match self.tool_calls {
            ToolCallMode::Native => {
                let name = &found.calls[0].name;
                self.events
                    .send(AgentEvent::Hint {
                        message: format!(
                            "the model wrote a call to {name} as text instead of making it; set \
                             tool_calls = \"text\" (or \"auto\") under [models.<alias>] in the \
                             config to run such calls"
                        ),
                    })
                    .await;
                false
            }
            ToolCallMode::Text => true,
            ToolCallMode::Auto => found.whole,
        };
        if !recover {
            return;
        }
        let position = self.request.messages.len();
        for (n, (call, dropped)) in found.calls.into_iter().zip(dropped).enumerate() {
            tracing::info!(
                tool = %call.name,
                format = call.format.name(),
                "a tool call written as text was recovered"
            );
            let mut data = serde_json::json!({ "recovered_from": call.format.name() });
            if !dropped.is_empty() {
                // Said in the transcript: the call that ran is not exactly the one written.
                data["dropped_schema_keys"] = serde_json::json!(dropped);
            }
            message.content.push(ContentBlock::ToolCall {
                id: format!("anvil_text_{position}_{}", n + 1),
                name: call.name,
                arguments: call.arguments,
                meta: Some(ProviderMeta::new(text_calls::RECOVERED_META, data)),
            });
        }
    }

    /// Records a response that did not finish normally. Its tool calls stay in the transcript
    /// (the model said them) but are answered as not executed, so the transcript stays valid.
    fn append_uncommitted(
        &mut self,
        message: Message,
        finish: &FinishReason,
    ) -> Result<(), TranscriptError> {
        if message.content.is_empty() {
            return Ok(());
        }
        let results: Vec<ContentBlock> = message
            .tool_calls()
            .map(|c| {
                ContentBlock::tool_result(
                    c.id,
                    format!(
                        "Not executed: the response ended ({}) before this call was complete.",
                        finish_label(finish)
                    ),
                    true,
                )
            })
            .collect();
        self.append(message)?;
        if !results.is_empty() {
            self.append(Message::new(Role::User, results))?;
        }
        Ok(())
    }

    /// Whether a call may run: `None` if so, else the error result it gets instead. A call
    /// that is not allowed never runs.
    async fn gate(
        &mut self,
        id: &str,
        name: &str,
        args: &Value,
        cancel: &CancellationToken,
    ) -> Option<ContentBlock> {
        let (policy, approver) = self.permissions.as_ref()?;
        let tool = self.tools.get(name)?;
        let refused = |text: String| Some(ContentBlock::tool_result(id, text, true));
        match policy.decide(tool.as_ref(), args) {
            Decision::Allow => None,
            Decision::Deny { reason } => refused(format!(
                "Permission denied: {reason}. The call was not run."
            )),
            Decision::Ask { reason, remedy } => {
                let request = ApprovalRequest {
                    tool: name.to_string(),
                    args: args.clone(),
                    subject: tool.permission_subject(args),
                    reason,
                    remedy,
                };
                let approver = Arc::clone(approver);
                let answer = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => ApprovalDecision::Deny {
                        feedback: Some("the turn was cancelled while waiting for approval".into()),
                    },
                    a = approver.approve(request) => a,
                };
                match answer {
                    ApprovalDecision::Allow => None,
                    ApprovalDecision::AllowAlways => {
                        if let (Some((policy, _)), Some(rule)) = (
                            self.permissions.as_mut(),
                            Policy::always_rule(tool.as_ref(), args),
                        ) {
                            policy.session_allow.push(rule);
                        }
                        None
                    }
                    ApprovalDecision::Deny { feedback } => refused(match feedback {
                        Some(f) => format!("Not run: the user declined this call. Feedback: {f}"),
                        None => "Not run: the user declined this call.".into(),
                    }),
                    ApprovalDecision::Unanswerable { message } => {
                        refused(format!("Not run: {message}"))
                    }
                }
            }
        }
    }

    /// Runs a batch: concurrently when every call is read-only, else one by one in order (a
    /// write followed by a read must observe the write). Results keep call order, and the
    /// images tools returned follow all of them (providers want a step's results first).
    /// Every call is judged first; one that is not allowed gets an error result and never runs.
    async fn run_tools(
        &mut self,
        calls: &[(String, String, Value)],
        cancel: &CancellationToken,
    ) -> Vec<ContentBlock> {
        let ran = self.run_calls(calls, cancel).await;
        let mut blocks = Vec::with_capacity(ran.len());
        let mut images = Vec::new();
        for d in ran {
            blocks.push(d.result);
            images.extend(d.images);
        }
        blocks.extend(images);
        blocks
    }

    async fn run_calls(
        &mut self,
        calls: &[(String, String, Value)],
        cancel: &CancellationToken,
    ) -> Vec<Dispatched> {
        let ctx = ToolContext {
            cwd: self.cwd.clone(),
            cancel: cancel.child_token(),
            progress: None,
        };
        // An unknown tool counts as not read-only: unknown effects are treated conservatively.
        let read_only = calls.iter().all(|(_, name, args)| {
            self.tools
                .get(name)
                .is_some_and(|t| t.effects(args).is_read_only())
        });
        if read_only {
            let mut refused = Vec::with_capacity(calls.len());
            for (id, name, args) in calls {
                self.started(id, name, args).await;
                let gate = match self.gate(id, name, args, cancel).await {
                    Some(block) => Some(block),
                    None => self.record_start(id, name, args),
                };
                refused.push(gate);
            }
            let tools = Arc::clone(&self.tools);
            let contexts: Vec<ToolContext> = calls
                .iter()
                .map(|(id, _, _)| ToolContext {
                    progress: self.events.progress(id),
                    ..ctx.clone()
                })
                .collect();
            let ran = futures::future::join_all(calls.iter().zip(&refused).zip(&contexts).map(
                |(((id, name, args), refused), ctx)| {
                    let tools = &tools;
                    async move {
                        match refused {
                            Some(block) => Dispatched::result(block.clone()),
                            None => tools.dispatch(id, name, args, ctx).await,
                        }
                    }
                },
            ))
            .await;
            for (((_, name, _), ran), refused) in calls.iter().zip(&ran).zip(&refused) {
                if refused.is_none() {
                    self.record_finish(&ran.result);
                }
                self.finished(name, &ran.result).await;
            }
            return ran;
        }
        let mut results = Vec::with_capacity(calls.len());
        for (id, name, args) in calls {
            if cancel.is_cancelled() {
                results.push(Dispatched::result(ContentBlock::tool_result(
                    id.as_str(),
                    "Not executed: the turn was cancelled before this call ran.",
                    true,
                )));
                continue;
            }
            self.started(id, name, args).await;
            let refused = match self.gate(id, name, args, cancel).await {
                Some(block) => Some(block),
                None => self.record_start(id, name, args),
            };
            let ran = match refused {
                Some(refused) => Dispatched::result(refused),
                None => {
                    let ctx = ToolContext {
                        progress: self.events.progress(id),
                        ..ctx.clone()
                    };
                    let ran = self.tools.dispatch(id, name, args, &ctx).await;
                    self.record_finish(&ran.result);
                    ran
                }
            };
            self.finished(name, &ran.result).await;
            results.push(ran);
        }
        results
    }

    /// Records (synced) that a call is about to run. `None` when it may run; the error result
    /// it gets instead when the record could not be written (it never runs unrecorded).
    fn record_start(&mut self, id: &str, name: &str, args: &Value) -> Option<ContentBlock> {
        let record = Record::ToolStarted {
            call_id: id.to_string(),
            name: name.to_string(),
            arguments: args.clone(),
        };
        if self.commit_or_note(record) {
            None
        } else {
            Some(ContentBlock::tool_result(
                id,
                "Not run: the session file could not be written, so the call was not started.",
                true,
            ))
        }
    }

    /// Records (synced) that a call has its result.
    fn record_finish(&mut self, result: &ContentBlock) {
        if let ContentBlock::ToolResult {
            call_id, is_error, ..
        } = result
        {
            let record = Record::ToolFinished {
                call_id: call_id.clone(),
                is_error: *is_error,
            };
            self.commit_or_note(record);
        }
    }

    async fn started(&mut self, id: &str, name: &str, args: &Value) {
        self.events
            .send(AgentEvent::ToolCallStarted {
                id: id.to_string(),
                name: name.to_string(),
                args: args.clone(),
            })
            .await;
    }

    async fn finished(&mut self, name: &str, result: &ContentBlock) {
        if let ContentBlock::ToolResult {
            call_id,
            content,
            is_error,
        } = result
        {
            self.events
                .send(AgentEvent::ToolCallFinished {
                    id: call_id.clone(),
                    name: name.to_string(),
                    is_error: *is_error,
                    preview: Limit::chars(PREVIEW_CHARS)
                        .apply(content)
                        .with_marker("")
                        .into_owned(),
                })
                .await;
        }
    }
}

/// Steps whose tool results clearing keeps: the model is usually still working from them.
const KEEP_STEPS: usize = 3;

/// Streams one response to `request`, forwarding text and reasoning deltas when `forward`.
/// Cancelled, it returns what had arrived ([`Sampled::Cancelled`]). Records on `chat`, the
/// request's span (the caller runs it in that span), the time to the first token (text,
/// reasoning or a tool call).
async fn stream_completion(
    provider: &dyn Provider,
    request: &ChatRequest,
    events: &mut EventSink,
    cancel: &CancellationToken,
    forward: bool,
    chat: &tracing::Span,
) -> Result<Sampled, LlmError> {
    let started = std::time::Instant::now();
    let mut first_token = true;
    let mut stream = tokio::select! {
        biased;
        _ = cancel.cancelled() => return Ok(Sampled::Cancelled(None)),
        s = provider.stream(request) => s?,
    };
    let mut builder = MessageBuilder::new();
    loop {
        let event = tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                let (message, usage) = builder.into_partial();
                return Ok(Sampled::Cancelled(Some(Partial { message, usage })));
            }
            e = stream.next() => e,
        };
        let Some(event) = event else { break };
        let event = event?;
        if first_token
            && matches!(
                event,
                StreamEvent::TextDelta { .. }
                    | StreamEvent::ReasoningDelta { .. }
                    | StreamEvent::ToolCallStart { .. }
            )
        {
            first_token = false;
            chat.record("anvil.ttft_ms", started.elapsed().as_secs_f64() * 1000.0);
        }
        if forward {
            match &event {
                StreamEvent::TextDelta { text, .. } => {
                    events
                        .delta(AgentEvent::TextDelta { text: text.clone() })
                        .await;
                }
                StreamEvent::ReasoningDelta { text, .. } => {
                    events
                        .delta(AgentEvent::ReasoningDelta { text: text.clone() })
                        .await;
                }
                _ => {}
            }
        }
        builder.push(&event)?;
    }
    builder.finish().map(Sampled::Complete)
}

fn finish_label(finish: &FinishReason) -> String {
    match finish {
        FinishReason::EndTurn => "end of turn".into(),
        FinishReason::ToolUse => "tool use".into(),
        FinishReason::MaxTokens => "output token limit".into(),
        FinishReason::Refusal => "refusal".into(),
        FinishReason::Other(reason) => reason.clone(),
    }
}

fn broken_transcript(e: TranscriptError) -> TurnOutcome {
    TurnOutcome::Failed {
        error: format!("the transcript is invalid, so no request was sent: {e}"),
        retryable: false,
        http_status: None,
        provider_refusal: None,
    }
}
