//! Tool-result clearing: the cheapest way to make room. Old tool results (file contents,
//! command output) are the bulk of a coding session's context and are rarely needed again
//! verbatim; each is replaced by a short placeholder saying what was there. Every block stays
//! (a call keeps its result), so the transcript stays valid.

use std::collections::HashMap;

use anvil_llm::{ContentBlock, Message, Role};

/// The start of every placeholder (a result that starts so is not cleared twice).
pub const CLEARED_PREFIX: &str = "[cleared to save context:";

/// Replaces the content of every tool result older than the last `keep_last_steps` steps (user
/// messages carrying results) with a placeholder. Returns the bytes freed.
pub fn clear_old_tool_results(messages: &mut [Message], keep_last_steps: usize) -> usize {
    let steps: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            m.role == Role::User
                && m.content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
        })
        .map(|(i, _)| i)
        .collect();
    let Some(&first_kept) = steps.iter().rev().nth(keep_last_steps.saturating_sub(1)) else {
        return 0;
    };
    let first_kept = if keep_last_steps == 0 {
        messages.len()
    } else {
        first_kept
    };
    // Which tool each call was, for the placeholder.
    let names: HashMap<String, String> = messages
        .iter()
        .flat_map(|m| m.tool_calls())
        .map(|c| (c.id.to_string(), c.name.to_string()))
        .collect();
    let mut freed = 0;
    for message in &mut messages[..first_kept] {
        for block in &mut message.content {
            if let ContentBlock::ToolResult {
                call_id, content, ..
            } = block
            {
                if content.starts_with(CLEARED_PREFIX) {
                    continue;
                }
                let tool = names.get(call_id.as_str()).map_or("tool", String::as_str);
                let placeholder = format!(
                    "{CLEARED_PREFIX} {} bytes of {tool} output. Run it again if it is needed.]",
                    content.len()
                );
                if placeholder.len() < content.len() {
                    freed += content.len() - placeholder.len();
                    *content = placeholder;
                }
            }
        }
    }
    freed
}

#[cfg(test)]
mod tests {
    use super::*;
    use anvil_llm::{Tail, validate_transcript};
    use serde_json::json;

    fn step(id: &str, output: &str) -> [Message; 2] {
        [
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolCall {
                    id: id.into(),
                    name: "read_file".into(),
                    arguments: json!({}),
                    meta: None,
                }],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::tool_result(id, output, false)],
            ),
        ]
    }

    #[test]
    fn old_results_become_placeholders_and_the_last_steps_stay() {
        let mut messages = vec![Message::user_text("go")];
        for i in 0..4 {
            messages.extend(step(&format!("c{i}"), &"x".repeat(1000)));
        }
        let freed = clear_old_tool_results(&mut messages, 2);
        assert!(freed > 1800, "{freed}");
        let contents: Vec<&str> = messages
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|b| match b {
                ContentBlock::ToolResult { content, .. } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        assert!(contents[0].starts_with(CLEARED_PREFIX) && contents[0].contains("read_file"));
        assert!(contents[1].starts_with(CLEARED_PREFIX));
        assert_eq!(contents[2].len(), 1000);
        assert_eq!(contents[3].len(), 1000);
        validate_transcript(&messages, Tail::Complete).unwrap();
        assert_eq!(
            clear_old_tool_results(&mut messages, 2),
            0,
            "nothing cleared twice"
        );
    }

    #[test]
    fn too_few_steps_clear_nothing() {
        let mut messages = vec![Message::user_text("go")];
        messages.extend(step("c0", "short"));
        assert_eq!(clear_old_tool_results(&mut messages, 2), 0);
    }
}
