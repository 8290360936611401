//! The session file's records: one JSON object per line, each an [`Entry`] — the format
//! version, a sequence number and one [`Record`].
//!
//! A record says what changed, never the whole state (except [`Record::ContextReplaced`], whose
//! change *is* a new context): replaying every record of a file through
//! [`super::SessionState::apply`] rebuilds the session exactly as it was live.

use anvil_llm::{ContentBlock, Message, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The newest format version this anvil writes and reads. A reader refuses a line with a newer
/// one (it would half-read it); older versions are read as long as this one knows them. Each
/// line carries the version its record needs ([`Record::since`]), so a file of records an older
/// anvil knows stays readable by it.
pub const FORMAT_VERSION: u32 = 2;

/// One line of a session file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The format version of this line.
    pub v: u32,
    /// Monotonic: the first record is 1, each next one is the previous plus one.
    pub seq: u64,
    /// When it was written, milliseconds since the Unix epoch.
    pub ts_ms: u64,
    #[serde(flatten)]
    pub record: Record,
}

/// One change to a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// The first record of every file.
    SessionStarted {
        /// The session id: the file name without `.jsonl`.
        id: String,
        /// The working directory the session belongs to.
        cwd: String,
        /// The model id requests go to.
        model: String,
        /// The anvil version that started it.
        anvil_version: String,
    },
    /// A message added at the end of the context.
    MessageAppended { message: Message },
    /// Content added to the end of the message at `index` (a user message typed after a
    /// cancelled or failed step merges into the one before it, keeping roles alternating).
    MessageExtended {
        index: usize,
        content: Vec<ContentBlock>,
    },
    /// The whole context replaced: by compaction, tool-result clearing, or a handoff to another
    /// model.
    ContextReplaced {
        reason: ReplaceReason,
        messages: Vec<Message>,
    },
    /// Requests go to another model from now on.
    ModelChanged { model: String },
    /// The todo list as it is now.
    TodosChanged { todos: Vec<Todo> },
    /// A tool call is about to run (written and synced before it has any effect).
    ToolStarted {
        call_id: String,
        name: String,
        arguments: Value,
    },
    /// A tool call has its result (written and synced after it ran).
    ToolFinished { call_id: String, is_error: bool },
    /// What one model response used, and what it cost in USD when the model's pricing was
    /// known (absent, never 0, when it was not).
    Usage {
        usage: Usage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// The provider did not report the response's input (or any) usage, so `cost_usd` is
        /// an estimate: the reservation's input part plus the output seen. Format 2.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        estimated: bool,
    },
    /// A model request is about to be sent, admitted with this reserved cost (USD; written for
    /// priced models only). The next `usage` or `cost_estimated` settles it; one never settled
    /// (the process was killed mid-request) is kept as spent, never forgotten. Format 2.
    CostReserved { usd: f64 },
    /// The request reserved last ended without reported usage (a failed or cancelled stream):
    /// its cost is this estimate, never a known 0. Format 2.
    CostEstimated { usd: f64 },
    /// A checkpoint of the workspace was taken (its store comes with checkpoints).
    CheckpointRecorded {
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
    },
}

impl Record {
    /// The record's name as written in the file (`type`).
    pub fn kind(&self) -> &'static str {
        match self {
            Record::SessionStarted { .. } => "session_started",
            Record::MessageAppended { .. } => "message_appended",
            Record::MessageExtended { .. } => "message_extended",
            Record::ContextReplaced { .. } => "context_replaced",
            Record::ModelChanged { .. } => "model_changed",
            Record::TodosChanged { .. } => "todos_changed",
            Record::ToolStarted { .. } => "tool_started",
            Record::ToolFinished { .. } => "tool_finished",
            Record::Usage { .. } => "usage",
            Record::CostReserved { .. } => "cost_reserved",
            Record::CostEstimated { .. } => "cost_estimated",
            Record::CheckpointRecorded { .. } => "checkpoint_recorded",
        }
    }

    /// The format version a line holding this record is written with: the first that has it.
    pub fn since(&self) -> u32 {
        match self {
            Record::CostReserved { .. }
            | Record::CostEstimated { .. }
            | Record::Usage {
                estimated: true, ..
            } => 2,
            _ => 1,
        }
    }

    /// Whether the record is synced to disk before the writer returns (see the durability
    /// policy in [`super`]).
    pub fn is_synced(&self) -> bool {
        matches!(
            self,
            Record::ToolStarted { .. } | Record::ToolFinished { .. }
        )
    }
}

/// Why the context was replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplaceReason {
    /// Older messages summarized.
    Compaction,
    /// Old tool results replaced by placeholders.
    Clearing,
    /// Handed to another model: reasoning it cannot replay dropped.
    Handoff,
    /// Replaced by the caller (an explicit transcript, e.g. a resumed one repaired).
    Replaced,
}

/// One item of the todo list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    pub content: String,
    pub status: TodoStatus,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_one_flat_object_with_version_sequence_and_type() {
        let entry = Entry {
            v: 1,
            seq: 7,
            ts_ms: 1,
            record: Record::ToolFinished {
                call_id: "c1".into(),
                is_error: false,
            },
        };
        let line = serde_json::to_string(&entry).unwrap();
        assert_eq!(
            line,
            r#"{"v":1,"seq":7,"ts_ms":1,"type":"tool_finished","call_id":"c1","is_error":false}"#
        );
        assert_eq!(serde_json::from_str::<Entry>(&line).unwrap(), entry);
        assert_eq!(entry.record.kind(), "tool_finished");
    }

    #[test]
    fn a_usage_without_cost_reads_and_writes_as_format_1_always_did() {
        let old = r#"{"v":1,"seq":2,"ts_ms":1,"type":"usage","usage":{"input":3,"output":4,"cache_read":0,"cache_write":0}}"#;
        let entry: Entry = serde_json::from_str(old).unwrap();
        let Record::Usage {
            usage, cost_usd, ..
        } = &entry.record
        else {
            panic!("{entry:?}")
        };
        assert_eq!((usage.output, *cost_usd), (4, None));
        assert_eq!(
            serde_json::to_string(&entry).unwrap(),
            old,
            "no cost key, not a 0"
        );
        let priced = Entry {
            record: Record::Usage {
                usage: *usage,
                cost_usd: Some(0.5),
                estimated: false,
            },
            ..entry
        };
        let line = serde_json::to_string(&priced).unwrap();
        assert!(line.ends_with(r#","cost_usd":0.5}"#), "{line}");
        assert_eq!(serde_json::from_str::<Entry>(&line).unwrap(), priced);
    }
}
