//! [`AgentEvent`]s, the [`TurnOutcome`], and the [`EventSink`] that delivers them.
//!
//! Delivery policy: the channel is bounded. Text and reasoning deltas never block the agent:
//! when the channel is full they coalesce into one pending delta, flushed before the next
//! event. Every other event waits for room (backpressure), so a slow front end slows the agent
//! rather than growing memory, and lifecycle events — above all the one `TurnFinished` — are
//! never dropped while someone listens. When the front end is gone (receiver dropped), events
//! are discarded and the agent carries on; nothing is ever granted because a UI disappeared.

use anvil_llm::Usage;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TurnOutcome {
    /// The model answered without asking for more tools.
    Done,
    /// The step limit was reached.
    MaxSteps,
    /// The model hit its output limit; no tools of that response ran.
    MaxTokens,
    /// The model refused; no tools of that response ran.
    Refused,
    Cancelled,
    /// The provider stopped for a reason the harness does not model; no tools ran.
    ProtocolStopped {
        reason: String,
    },
    /// The hard budget (`--max-cost-usd`) could not admit the next model request: nothing was
    /// sent. `reason` says what was spent, reserved and allowed, or which model lacks pricing.
    BudgetExceeded {
        reason: String,
    },
    /// A step failed (provider unreachable after retries, a broken stream, a broken transcript).
    Failed {
        error: String,
        retryable: bool,
        /// The provider's HTTP status, when a response's status ended the turn.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        http_status: Option<u16>,
        /// Why the provider refused, when its answer says ([`anvil_llm::LlmError::refusal`]):
        /// the account (its key, credit or quota) or what the model generated.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider_refusal: Option<anvil_llm::ProviderRefusal>,
    },
}

impl TurnOutcome {
    /// The outcome's name, as in JSON (`done`, `max_steps`, …, `budget_exceeded`).
    pub fn name(&self) -> &'static str {
        match self {
            TurnOutcome::Done => "done",
            TurnOutcome::MaxSteps => "max_steps",
            TurnOutcome::MaxTokens => "max_tokens",
            TurnOutcome::Refused => "refused",
            TurnOutcome::Cancelled => "cancelled",
            TurnOutcome::ProtocolStopped { .. } => "protocol_stopped",
            TurnOutcome::BudgetExceeded { .. } => "budget_exceeded",
            TurnOutcome::Failed { .. } => "failed",
        }
    }
}

/// A UI-agnostic notification from the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    StepStarted {
        step: u32,
    },
    TextDelta {
        text: String,
    },
    ReasoningDelta {
        text: String,
    },
    ToolCallStarted {
        id: String,
        name: String,
        args: Value,
    },
    ToolCallFinished {
        id: String,
        name: String,
        is_error: bool,
        /// The start of the result, for display.
        preview: String,
    },
    /// A running call reported progress (an MCP server's `notifications/progress`). Lossy: a
    /// report that finds the channel full is dropped.
    ToolProgress {
        id: String,
        progress: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// One response's usage, with its cost when the model's pricing is known.
    Usage {
        usage: Usage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// Part of `usage` is anvil's estimate, not the provider's report: the response was
        /// cancelled before the provider reported it all (input: the request's estimate;
        /// output: the text that arrived, chars / 4).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        estimated: bool,
    },
    StepFailed {
        step: u32,
        error: String,
        retryable: bool,
    },
    /// Old tool results were replaced by placeholders to make room.
    ContextCleared {
        bytes_freed: u64,
        before_tokens: u64,
        after_tokens: u64,
    },
    /// The conversation was replaced by a summary.
    Compacted {
        before_tokens: u64,
        after_tokens: u64,
    },
    /// Advice for the user about a setting (a final answer that reads as a tool call with
    /// `tool_calls = "native"`): one line, printed on stderr interactively and carried as
    /// `hint` in headless results.
    Hint {
        message: String,
    },
    TurnFinished {
        outcome: TurnOutcome,
    },
}

/// Reports one call's progress to the front end, never waiting.
#[derive(Debug, Clone)]
pub struct ProgressReporter {
    call_id: String,
    tx: mpsc::Sender<AgentEvent>,
}

impl ProgressReporter {
    pub fn report(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        let _ = self.tx.try_send(AgentEvent::ToolProgress {
            id: self.call_id.clone(),
            progress,
            total,
            message,
        });
    }
}

/// The agent's end of the event channel.
pub struct EventSink {
    tx: Option<mpsc::Sender<AgentEvent>>,
    /// A coalesced text or reasoning delta waiting for room in the channel.
    pending: Option<AgentEvent>,
}

impl EventSink {
    /// A sink and the receiver a front end reads. `capacity` bounds the events in flight.
    pub fn channel(capacity: usize) -> (EventSink, mpsc::Receiver<AgentEvent>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (
            EventSink {
                tx: Some(tx),
                pending: None,
            },
            rx,
        )
    }

    /// A sink nobody reads.
    pub fn discard() -> EventSink {
        EventSink {
            tx: None,
            pending: None,
        }
    }

    /// Where call `call_id` reports its progress; `None` when nobody reads the events.
    pub fn progress(&self, call_id: &str) -> Option<ProgressReporter> {
        let tx = self.tx.as_ref()?.clone();
        Some(ProgressReporter {
            call_id: call_id.to_string(),
            tx,
        })
    }

    /// A text or reasoning delta: never waits unless a delta of the other kind is pending.
    pub async fn delta(&mut self, event: AgentEvent) {
        let Some(tx) = &self.tx else { return };
        if tx.is_closed() {
            self.tx = None;
            return;
        }
        self.pending = match (self.pending.take(), event) {
            (None, e) => Some(e),
            (Some(AgentEvent::TextDelta { text: mut a }), AgentEvent::TextDelta { text: b }) => {
                a.push_str(&b);
                Some(AgentEvent::TextDelta { text: a })
            }
            (
                Some(AgentEvent::ReasoningDelta { text: mut a }),
                AgentEvent::ReasoningDelta { text: b },
            ) => {
                a.push_str(&b);
                Some(AgentEvent::ReasoningDelta { text: a })
            }
            (Some(other), e) => {
                self.deliver(other).await;
                Some(e)
            }
        };
        self.try_flush();
    }

    fn try_flush(&mut self) {
        let (Some(tx), Some(event)) = (&self.tx, self.pending.take()) else {
            return;
        };
        match tx.try_send(event) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(event)) => self.pending = Some(event),
            Err(mpsc::error::TrySendError::Closed(_)) => self.tx = None,
        }
    }

    /// Any other event: flushes a pending delta, then waits for room.
    pub async fn send(&mut self, event: AgentEvent) {
        if let Some(pending) = self.pending.take() {
            self.deliver(pending).await;
        }
        self.deliver(event).await;
    }

    async fn deliver(&mut self, event: AgentEvent) {
        if let Some(tx) = &self.tx
            && tx.send(event).await.is_err()
        {
            self.tx = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_slow_consumer_bounds_memory_and_loses_no_text() {
        let capacity = 8;
        let (mut sink, mut rx) = EventSink::channel(capacity);
        let reader = tokio::spawn(async move {
            let mut text = String::new();
            let mut events = Vec::new();
            while let Some(e) = rx.recv().await {
                // The channel never holds more than its capacity.
                assert!(rx.len() <= capacity);
                tokio::time::sleep(Duration::from_micros(200)).await;
                if let AgentEvent::TextDelta { text: t } = &e {
                    text.push_str(t);
                }
                events.push(e);
            }
            (text, events)
        });
        let mut expected = String::new();
        // A slow reader may slow the sender down, never stall it: a deadline, not a hang.
        tokio::time::timeout(Duration::from_secs(60), async {
            sink.send(AgentEvent::StepStarted { step: 1 }).await;
            for i in 0..20_000 {
                let t = format!("{i} ");
                expected.push_str(&t);
                sink.delta(AgentEvent::TextDelta { text: t }).await;
            }
            sink.send(AgentEvent::TurnFinished {
                outcome: TurnOutcome::Done,
            })
            .await;
        })
        .await
        .expect("the sink stalled behind the slow reader");
        drop(sink);
        let (text, events) = tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .expect("the reader never saw the channel close")
            .unwrap();
        assert_eq!(text, expected);
        // Coalescing means far fewer events than deltas reached the slow reader.
        assert!(events.len() < 20_000, "{}", events.len());
        assert_eq!(
            events.last(),
            Some(&AgentEvent::TurnFinished {
                outcome: TurnOutcome::Done
            })
        );
        assert_eq!(events.first(), Some(&AgentEvent::StepStarted { step: 1 }));
    }

    #[tokio::test]
    async fn a_vanished_receiver_does_not_block_or_fail() {
        let (mut sink, rx) = EventSink::channel(1);
        drop(rx);
        // Blocking would show as the deadline passing, not as a test that never ends.
        tokio::time::timeout(Duration::from_secs(5), async {
            for _ in 0..10 {
                sink.send(AgentEvent::StepStarted { step: 1 }).await;
                sink.delta(AgentEvent::TextDelta { text: "x".into() }).await;
            }
        })
        .await
        .expect("sending to a vanished receiver blocked");
        // The sink noticed: it dropped its sender and holds nothing for a reader that is gone.
        assert!(sink.tx.is_none(), "the sink still holds the closed channel");
        assert!(sink.pending.is_none(), "a delta is buffered for nobody");
    }

    #[test]
    fn events_serialize_tagged() {
        let e = AgentEvent::TurnFinished {
            outcome: TurnOutcome::Failed {
                error: "HTTP 500".into(),
                retryable: true,
                http_status: None,
                provider_refusal: None,
            },
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"type":"turn_finished","outcome":{"kind":"failed","error":"HTTP 500","retryable":true}}"#
        );
    }
}
