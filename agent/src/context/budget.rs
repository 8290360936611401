//! [`ContextBudget`]: how full the model's context window is, estimated before each request.
//!
//! The last response's usage (input, cached or not, plus output) is an exact count of the
//! context as it was then. It is reused as a baseline only while the context has not changed
//! under it — appends since then are estimated (bytes / 4) and added. Anything that rewrites
//! the prefix (clearing, compaction, a handoff, a replaced transcript) or changes how tokens
//! are counted (a model switch, a changed tool set) advances the *revision*, and the baseline
//! of an older revision is never reused: the whole context is estimated afresh instead.
//!
//! A response that reported no usage at all (every count zero) leaves the count *unknown*
//! (`None`), never "zero tokens": an unknown baseline is not reused.

use anvil_llm::{ContentBlock, Message, ToolSpec, Usage};

/// What a context window holds before anvil makes room.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContextBudget {
    /// The model's context window, in tokens.
    pub window: u64,
    /// Tokens kept free for the response.
    pub reserve_output: u64,
    /// Above this share of the usable window, old tool results are cleared.
    pub clear_at: f32,
    /// Above this share, the conversation is compacted into a summary.
    pub compact_at: f32,
}

impl ContextBudget {
    /// The window used when the model's is unknown: small enough for any model anvil drives.
    pub const DEFAULT_WINDOW: u64 = 32_768;

    pub fn new(window: u64, reserve_output: u64) -> Self {
        Self {
            window: window.max(1),
            reserve_output,
            clear_at: 0.6,
            compact_at: 0.85,
        }
    }

    /// Tokens a request may use: the window less the response's reserve.
    pub fn usable(&self) -> u64 {
        self.window.saturating_sub(self.reserve_output).max(1)
    }

    /// How full `tokens` make the usable window (0.0 – 1.0 and beyond).
    pub fn fullness(&self, tokens: u64) -> f32 {
        tokens as f32 / self.usable() as f32
    }

    pub fn should_clear(&self, tokens: u64) -> bool {
        self.fullness(tokens) >= self.clear_at
    }

    pub fn should_compact(&self, tokens: u64) -> bool {
        self.fullness(tokens) >= self.compact_at
    }
}

impl Default for ContextBudget {
    fn default() -> Self {
        Self::new(Self::DEFAULT_WINDOW, 4_096)
    }
}

/// An exact count of the context at one revision and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Baseline {
    revision: u64,
    /// Messages the counted request carried, plus the response appended to them.
    messages: usize,
    tokens: u64,
}

/// The context's revision and the last exact count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextTracker {
    revision: u64,
    baseline: Option<Baseline>,
}

/// Added to every estimate: bytes / 4 undercounts code and non-English text.
const SAFETY_MARGIN: f32 = 1.1;

impl ContextTracker {
    /// The current revision.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The context changed under the baseline (or is counted differently from now on).
    pub fn advance(&mut self) {
        self.revision += 1;
        self.baseline = None;
    }

    /// A response's usage: `messages` is the context's length with the response appended.
    /// A usage of all zeros is unknown and sets no baseline.
    pub fn observe(&mut self, usage: &Usage, messages: usize) {
        let tokens = usage.total_input() + usage.output;
        self.baseline = (tokens > 0).then_some(Baseline {
            revision: self.revision,
            messages,
            tokens,
        });
    }

    /// The last exact count, if it is of the current revision.
    pub fn known(&self) -> Option<u64> {
        self.baseline
            .filter(|b| b.revision == self.revision)
            .map(|b| b.tokens)
    }

    /// Tokens the next request will carry: the baseline plus what was added since, or an
    /// estimate of everything when there is no baseline of this revision.
    pub fn estimate(&self, system: Option<&str>, tools: &[ToolSpec], messages: &[Message]) -> u64 {
        match self.baseline {
            Some(b) if b.revision == self.revision && b.messages <= messages.len() => {
                b.tokens + margin(estimate_messages(&messages[b.messages..]))
            }
            _ => margin(
                estimate_text(system.unwrap_or_default())
                    + tools
                        .iter()
                        .map(|t| {
                            estimate_text(&t.name)
                                + estimate_text(&t.description)
                                + estimate_text(&t.input_schema.to_string())
                        })
                        .sum::<u64>()
                    + estimate_messages(messages),
            ),
        }
    }
}

fn margin(tokens: u64) -> u64 {
    (tokens as f32 * SAFETY_MARGIN).ceil() as u64
}

/// Bytes / 4, rounded up.
pub fn estimate_text(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// An estimate of `messages`' tokens.
pub fn estimate_messages(messages: &[Message]) -> u64 {
    messages
        .iter()
        .map(|m| 4 + m.content.iter().map(estimate_block).sum::<u64>())
        .sum()
}

fn estimate_block(block: &ContentBlock) -> u64 {
    match block {
        ContentBlock::Text { text } | ContentBlock::Reasoning { text, .. } => estimate_text(text),
        // Providers bill images by size; a fixed guess of a mid-size image.
        ContentBlock::Image { .. } => 1_600,
        ContentBlock::ToolCall {
            name, arguments, ..
        } => estimate_text(name) + estimate_text(&arguments.to_string()) + 8,
        ContentBlock::ToolResult { content, .. } => estimate_text(content) + 8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input,
            output,
            cache_read: 0,
            cache_write: 0,
        }
    }

    #[test]
    fn the_baseline_is_reused_only_while_the_prefix_is_unchanged() {
        let mut t = ContextTracker::default();
        let msgs = vec![Message::user_text("x".repeat(400))];
        let fresh = t.estimate(None, &[], &msgs);
        assert_eq!(fresh, margin(4 + 100));
        t.observe(&usage(1000, 50), 1);
        assert_eq!(t.known(), Some(1050));
        let mut more = msgs.clone();
        more.push(Message::user_text("y".repeat(40)));
        assert_eq!(t.estimate(None, &[], &more), 1050 + margin(4 + 10));
        // A compaction (or a model switch) advances the revision: the old count is not reused.
        t.advance();
        assert_eq!(t.known(), None);
        assert_eq!(t.estimate(None, &[], &more), margin(4 + 100 + 4 + 10));
    }

    #[test]
    fn unknown_usage_is_not_zero() {
        let mut t = ContextTracker::default();
        t.observe(&usage(0, 0), 3);
        assert_eq!(
            t.known(),
            None,
            "no usage reported: unknown, not zero tokens"
        );
        let msgs = vec![Message::user_text("abcd")];
        assert!(t.estimate(None, &[], &msgs) > 0);
    }

    #[test]
    fn thresholds_are_shares_of_the_usable_window() {
        let b = ContextBudget::new(2_000, 0);
        assert!(!b.should_clear(1_100));
        assert!(b.should_clear(1_200));
        assert!(!b.should_compact(1_600));
        assert!(b.should_compact(1_700));
        let reserved = ContextBudget::new(2_000, 1_000);
        assert!(reserved.should_clear(600));
    }
}
