//! Compaction: the conversation so far replaced by a summary the model writes.
//!
//! The summary request is sans tools (the model cannot wander off into calls) and carries the
//! conversation rendered as text in one user message, so it reads the same on every provider
//! (some refuse tool blocks in a request that defines no tools). The todo list, when there is
//! one, is carried into the new context verbatim. The new context is one user message: the
//! summary, then the todos, then an instruction to go on — a valid transcript on its own.

use anvil_llm::{ChatRequest, ContentBlock, Message, Role};

use crate::session::{Todo, TodoStatus};

/// What the summarizer is asked.
pub const SUMMARY_INSTRUCTION: &str = "\
You are summarizing a coding session so that it can continue in a fresh context. Write a \
summary a colleague could pick the work up from: the user's goal and constraints in their \
words, what has been done (files changed and how), what was learned (commands that work, \
errors and their causes), decisions made and why, and exactly what remains. Name files, \
functions and commands precisely. Do not call tools; answer with the summary only.";

/// The longest a single block is rendered in the summary request: a huge file read does not
/// need to be summarized in full.
const BLOCK_CHARS: usize = 4_000;

/// The request that asks `model` for a summary of `messages`.
pub fn summary_request(
    base: &ChatRequest,
    messages: &[Message],
    focus: Option<&str>,
) -> ChatRequest {
    let mut ask = format!(
        "{SUMMARY_INSTRUCTION}\n\n<conversation>\n{}</conversation>",
        render(messages)
    );
    if let Some(focus) = focus.map(str::trim).filter(|f| !f.is_empty()) {
        ask.push_str(&format!("\n\nFocus the summary on: {focus}"));
    }
    ChatRequest {
        model: base.model.clone(),
        system: None,
        messages: vec![Message::user_text(ask)],
        tools: Vec::new(),
        max_tokens: base.max_tokens,
        temperature: base.temperature,
        cache: false,
        prompt_cache_key: None,
    }
}

/// The context after compaction.
pub fn compacted_context(summary: &str, todos: &[Todo]) -> Vec<Message> {
    let mut text = format!(
        "This session was compacted to fit the context window. Summary of the conversation \
         so far:\n\n{}\n",
        summary.trim()
    );
    if !todos.is_empty() {
        text.push_str("\nThe todo list:\n");
        for todo in todos {
            let mark = match todo.status {
                TodoStatus::Pending => "[ ]",
                TodoStatus::InProgress => "[~]",
                TodoStatus::Completed => "[x]",
            };
            text.push_str(&format!("{mark} {}\n", todo.content));
        }
    }
    text.push_str("\nContinue the work from here.");
    vec![Message::user_text(text)]
}

/// `messages` as plain text, one block per paragraph, long blocks shortened.
fn render(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        for block in &m.content {
            let line = match block {
                ContentBlock::Text { text } => format!("[{who}] {}", shorten(text)),
                ContentBlock::Image { media_type, .. } => {
                    format!("[{who}] (an image, {media_type})")
                }
                // Reasoning is the model's scratch work: the summary needs its conclusions, which
                // are in the text.
                ContentBlock::Reasoning { .. } => continue,
                ContentBlock::ToolCall {
                    name, arguments, ..
                } => format!("[{who} called {name}] {}", shorten(&arguments.to_string())),
                ContentBlock::ToolResult {
                    content, is_error, ..
                } => {
                    let kind = if *is_error { "error" } else { "result" };
                    format!("[tool {kind}] {}", shorten(content))
                }
            };
            out.push_str(&line);
            out.push_str("\n\n");
        }
    }
    out
}

fn shorten(text: &str) -> String {
    let count = text.chars().count();
    if count <= BLOCK_CHARS {
        return text.to_string();
    }
    let head: String = text.chars().take(BLOCK_CHARS / 2).collect();
    let tail: String = text.chars().skip(count - BLOCK_CHARS / 2).collect();
    format!(
        "{head}\n[… {} characters left out …]\n{tail}",
        count - BLOCK_CHARS
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use anvil_llm::{Tail, validate_transcript};
    use serde_json::json;

    #[test]
    fn the_summary_request_has_no_tools_and_the_whole_conversation_as_text() {
        let base = ChatRequest {
            model: "m".into(),
            system: Some("sys".into()),
            messages: Vec::new(),
            tools: vec![anvil_llm::ToolSpec {
                name: "bash".into(),
                description: "d".into(),
                input_schema: json!({}),
            }],
            max_tokens: 100,
            temperature: None,
            cache: true,
            prompt_cache_key: None,
        };
        let messages = vec![
            Message::user_text("fix the test"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolCall {
                    id: "c1".into(),
                    name: "bash".into(),
                    arguments: json!({"command": "cargo test"}),
                    meta: None,
                }],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::tool_result("c1", "x".repeat(10_000), true)],
            ),
        ];
        let req = summary_request(&base, &messages, Some("the failing test"));
        assert!(req.tools.is_empty());
        assert_eq!(req.messages.len(), 1);
        let ContentBlock::Text { text } = &req.messages[0].content[0] else {
            panic!()
        };
        assert!(text.contains("[user] fix the test"));
        assert!(text.contains("[assistant called bash] {\"command\":\"cargo test\"}"));
        assert!(text.contains("characters left out"));
        assert!(text.ends_with("Focus the summary on: the failing test"));
        validate_transcript(&req.messages, Tail::Complete).unwrap();
    }

    #[test]
    fn the_new_context_carries_the_summary_and_the_todos() {
        let todos = vec![Todo {
            content: "run the tests".into(),
            status: TodoStatus::Pending,
        }];
        let ctx = compacted_context("We fixed median.", &todos);
        validate_transcript(&ctx, Tail::Complete).unwrap();
        let ContentBlock::Text { text } = &ctx[0].content[0] else {
            panic!()
        };
        assert!(text.contains("We fixed median."));
        assert!(text.contains("[ ] run the tests"));
    }
}
