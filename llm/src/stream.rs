//! The stream vocabulary every adapter emits: [`StreamEvent`], [`Usage`], [`FinishReason`].

use serde::{Deserialize, Serialize};

use crate::types::ProviderMeta;

/// Token counts for one response.
///
/// `input` is **uncached** input: tokens that were neither read from nor written to a cache.
/// Adapters normalize every provider to this meaning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Usage {
    /// Takes every non-zero field of `other`. Providers report usage piecemeal (Anthropic's
    /// `message_start` has input, `message_delta` has output); a later event that reports only
    /// output must not erase the input seen earlier.
    pub fn absorb(&mut self, other: &Usage) {
        fn take(mine: &mut u64, theirs: u64) {
            if theirs != 0 {
                *mine = theirs;
            }
        }
        take(&mut self.input, other.input);
        take(&mut self.output, other.output);
        take(&mut self.cache_read, other.cache_read);
        take(&mut self.cache_write, other.cache_write);
    }

    /// All input tokens, cached or not.
    pub fn total_input(&self) -> u64 {
        self.input + self.cache_read + self.cache_write
    }
}

/// Field by field: the usage of several responses (a turn, a session) is their sum.
impl std::ops::Add for Usage {
    type Output = Usage;

    fn add(self, other: Usage) -> Usage {
        Usage {
            input: self.input + other.input,
            output: self.output + other.output,
            cache_read: self.cache_read + other.cache_read,
            cache_write: self.cache_write + other.cache_write,
        }
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        *self = *self + other;
    }
}

/// Why a response ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", content = "detail", rename_all = "snake_case")]
pub enum FinishReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    Refusal,
    /// A provider-specific stop the harness does not model (the provider's string).
    Other(String),
}

impl FinishReason {
    /// Only a committed response may have its tool calls executed: one cut off mid-stream
    /// may hold half-written arguments.
    pub fn is_committed(&self) -> bool {
        match self {
            FinishReason::EndTurn | FinishReason::ToolUse => true,
            FinishReason::MaxTokens | FinishReason::Refusal | FinishReason::Other(_) => false,
        }
    }
}

/// One normalized streaming event. `index` identifies a content block within one response, so
/// interleaved reasoning, text and tool blocks keep their order and identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    TextDelta {
        index: u32,
        text: String,
    },
    ReasoningDelta {
        index: u32,
        text: String,
    },
    /// The reasoning block ended; `meta` carries the signature or encrypted state to replay.
    ReasoningDone {
        index: u32,
        meta: Option<ProviderMeta>,
    },
    ToolCallStart {
        index: u32,
        id: String,
        name: String,
        meta: Option<ProviderMeta>,
    },
    ToolCallDelta {
        index: u32,
        arguments_fragment: String,
    },
    Usage(Usage),
    /// The response is complete; nothing may follow.
    Finish(FinishReason),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absorb_keeps_earlier_input_when_later_reports_only_output() {
        let mut u = Usage {
            input: 120,
            output: 1,
            cache_read: 50,
            cache_write: 0,
        };
        u.absorb(&Usage {
            output: 42,
            ..Usage::default()
        });
        assert_eq!(
            u,
            Usage {
                input: 120,
                output: 42,
                cache_read: 50,
                cache_write: 0
            }
        );
        assert_eq!(u.total_input(), 170);
    }

    #[test]
    fn usages_add_field_by_field() {
        let a = Usage {
            input: 1,
            output: 2,
            cache_read: 3,
            cache_write: 4,
        };
        let b = Usage {
            input: 10,
            output: 20,
            cache_read: 30,
            cache_write: 40,
        };
        let sum = Usage {
            input: 11,
            output: 22,
            cache_read: 33,
            cache_write: 44,
        };
        assert_eq!(a + b, sum);
        let mut total = Usage::default();
        total += a;
        total += b;
        assert_eq!(total, sum);
    }

    #[test]
    fn only_end_turn_and_tool_use_are_committed() {
        assert!(FinishReason::EndTurn.is_committed());
        assert!(FinishReason::ToolUse.is_committed());
        assert!(!FinishReason::MaxTokens.is_committed());
        assert!(!FinishReason::Refusal.is_committed());
        assert!(!FinishReason::Other("pause_turn".into()).is_committed());
    }
}
