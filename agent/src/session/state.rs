//! The reducer: the one place a [`Record`] changes a session. The live agent applies each
//! record it writes through [`SessionState::apply`]; loading a file applies each record read
//! through the same function, so a loaded session is the live one.

use anvil_llm::{ContentBlock, Message, Role, Usage};
use serde_json::Value;

use super::record::{Record, Todo};

/// Everything of a session except its messages (which the agent keeps in its request, so a
/// step costs no copy of them; the reducer takes them beside this).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionState {
    pub id: String,
    pub cwd: String,
    pub model: String,
    pub anvil_version: String,
    pub todos: Vec<Todo>,
    /// Calls started with no finish recorded, in start order: after a crash, each one's outcome
    /// is unknown.
    pub open_calls: Vec<OpenCall>,
    /// Calls whose finish is recorded and whose result is not (yet) in the context: after a
    /// crash (or a full disk) between the two, each one ran and its result was lost.
    pub finished_calls: Vec<FinishedCall>,
    /// The sum of every response's usage.
    pub usage: Usage,
    /// What the responses cost, as far as it is known.
    pub cost: Cost,
    /// The same by model (the model requests went to when each was recorded).
    pub cost_by_model: std::collections::BTreeMap<String, ModelSpend>,
    /// Model responses so far (one `Usage` record each).
    pub responses: u64,
    /// Checkpoints taken, oldest first.
    pub checkpoints: Vec<String>,
}

/// A tool call that started and has no recorded finish.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenCall {
    pub call_id: String,
    pub name: String,
    pub arguments: Value,
}

/// A tool call that ran to its end (`tool_finished`) and whose result is not in the context.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedCall {
    pub call_id: String,
    pub name: String,
    pub is_error: bool,
}

/// What a session's requests cost: the session's ledger. A response of a model without
/// pricing has an unknown cost: it is counted as such, never as 0. A request that ended without
/// reported usage is charged an estimate; one whose end was never recorded (a killed process)
/// keeps its whole reservation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cost {
    /// USD of the responses whose usage was reported, at their model's price.
    pub usd: f64,
    /// Responses with a reported cost.
    pub priced: u64,
    /// Responses with an unknown cost.
    pub unpriced: u64,
    /// USD charged by estimate: requests cut off before their usage was reported, and
    /// reservations a killed process never settled.
    pub estimated_usd: f64,
    /// Requests charged by estimate.
    pub estimated: u64,
    /// The reservation of the request in flight (or of one a killed process left unsettled).
    pub outstanding_usd: Option<f64>,
}

impl Cost {
    /// Adds one response's cost (`None`: unknown), settling the reservation in flight.
    pub fn add(&mut self, cost_usd: Option<f64>) {
        self.outstanding_usd = None;
        match cost_usd {
            Some(usd) => {
                self.usd += usd;
                self.priced += 1;
            }
            None => self.unpriced += 1,
        }
    }

    /// A request admitted with `usd` reserved. A reservation still outstanding is one a killed
    /// process never settled: it is kept, charged as an estimate.
    pub fn reserve(&mut self, usd: f64) {
        if let Some(unsettled) = self.outstanding_usd.replace(usd) {
            self.charge_estimate(unsettled);
        }
    }

    /// The request in flight ended without reported usage: `usd` is its estimated cost.
    pub fn estimate(&mut self, usd: f64) {
        self.outstanding_usd = None;
        self.charge_estimate(usd);
    }

    fn charge_estimate(&mut self, usd: f64) {
        self.estimated_usd += usd;
        self.estimated += 1;
    }

    /// Everything charged so far: reported, estimated, and the reservation outstanding. What a
    /// hard budget is held against.
    pub fn spent(&self) -> f64 {
        self.usd + self.estimated_usd + self.outstanding_usd.unwrap_or(0.0)
    }

    /// The total when no response had an unknown cost: [`Cost::spent`]. An estimate in it
    /// makes it [`Cost::is_estimated`].
    pub fn total(&self) -> Option<f64> {
        (self.unpriced == 0).then(|| self.spent())
    }

    /// Whether the total holds an estimate (a cut-off request, an unsettled reservation).
    pub fn is_estimated(&self) -> bool {
        self.estimated > 0 || self.outstanding_usd.is_some()
    }

    /// What was charged after `earlier`, a snapshot of this same ledger (one turn's cost).
    pub fn since(&self, earlier: &Cost) -> Cost {
        Cost {
            usd: self.usd - earlier.usd,
            priced: self.priced.saturating_sub(earlier.priced),
            unpriced: self.unpriced.saturating_sub(earlier.unpriced),
            estimated_usd: self.estimated_usd - earlier.estimated_usd,
            estimated: self.estimated.saturating_sub(earlier.estimated),
            outstanding_usd: self.outstanding_usd,
        }
    }

    /// The total, when every response's cost is reported (and there was one).
    pub fn known(&self) -> Option<f64> {
        (self.priced > 0 && self.unpriced == 0 && !self.is_estimated()).then_some(self.usd)
    }
}

/// One model's share of a session: its usage and its cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ModelSpend {
    pub usage: Usage,
    pub cost: Cost,
    /// Responses recorded.
    pub responses: u64,
}

/// A record that cannot apply to the session as it stands.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReduceError {
    #[error("message_extended names message {index}, but the session has {len} messages")]
    NoSuchMessage { index: usize, len: usize },
    #[error("tool_finished for call {call_id}, which never started")]
    FinishedUnstarted { call_id: String },
    #[error("a second session_started (session {id})")]
    StartedTwice { id: String },
}

impl SessionState {
    /// Applies one record to this state and `messages`. On error nothing changed.
    pub fn apply(
        &mut self,
        messages: &mut Vec<Message>,
        record: Record,
    ) -> Result<(), ReduceError> {
        match record {
            Record::SessionStarted {
                id,
                cwd,
                model,
                anvil_version,
            } => {
                if !self.id.is_empty() {
                    return Err(ReduceError::StartedTwice { id });
                }
                self.id = id;
                self.cwd = cwd;
                self.model = model;
                self.anvil_version = anvil_version;
            }
            Record::MessageAppended { message } => {
                // A result answers its call; a new response comes only after every result of
                // the batch before it is in, so none is awaited from then on.
                if !self.finished_calls.is_empty() {
                    match message.role {
                        Role::User => self.finished_calls.retain(|c| {
                            !message.content.iter().any(|b| {
                                matches!(b, ContentBlock::ToolResult { call_id, .. }
                                    if *call_id == c.call_id)
                            })
                        }),
                        Role::Assistant => self.finished_calls.clear(),
                    }
                }
                messages.push(message);
            }
            Record::MessageExtended { index, content } => {
                let len = messages.len();
                let message = messages
                    .get_mut(index)
                    .ok_or(ReduceError::NoSuchMessage { index, len })?;
                message.content.extend(content);
            }
            Record::ContextReplaced { messages: new, .. } => {
                // A new context: whatever result it lacks is no longer awaited.
                self.finished_calls.clear();
                *messages = new;
            }
            Record::ModelChanged { model } => self.model = model,
            Record::TodosChanged { todos } => self.todos = todos,
            Record::ToolStarted {
                call_id,
                name,
                arguments,
            } => self.open_calls.push(OpenCall {
                call_id,
                name,
                arguments,
            }),
            Record::ToolFinished { call_id, is_error } => {
                let at = self
                    .open_calls
                    .iter()
                    .position(|c| c.call_id == call_id)
                    .ok_or(ReduceError::FinishedUnstarted { call_id })?;
                let call = self.open_calls.remove(at);
                self.finished_calls.push(FinishedCall {
                    call_id: call.call_id,
                    name: call.name,
                    is_error,
                });
            }
            Record::Usage {
                usage,
                cost_usd,
                estimated,
            } => {
                self.usage += usage;
                self.responses += 1;
                let m = self.cost_by_model.entry(self.model.clone()).or_default();
                m.usage += usage;
                m.responses += 1;
                match (estimated, cost_usd) {
                    (true, Some(usd)) => {
                        self.cost.estimate(usd);
                        m.cost.estimate(usd);
                    }
                    _ => {
                        self.cost.add(cost_usd);
                        m.cost.add(cost_usd);
                    }
                }
            }
            Record::CostReserved { usd } => {
                self.cost.reserve(usd);
                // A reservation is the current model's; one left unsettled by another model
                // (a crash, then a resume on another) is settled where it was made.
                for spend in self.cost_by_model.values_mut() {
                    if let Some(unsettled) = spend.cost.outstanding_usd.take() {
                        spend.cost.charge_estimate(unsettled);
                    }
                }
                let m = self.cost_by_model.entry(self.model.clone()).or_default();
                m.cost.reserve(usd);
            }
            Record::CostEstimated { usd } => {
                self.cost.estimate(usd);
                self.cost_by_model
                    .entry(self.model.clone())
                    .or_default()
                    .cost
                    .estimate(usd);
            }
            Record::CheckpointRecorded { id, .. } => self.checkpoints.push(id),
        }
        Ok(())
    }
}
