//! Moving a conversation to another provider.
//!
//! Signed reasoning (Anthropic thinking signatures, OpenAI encrypted reasoning items, Gemini
//! thought signatures) is valid only for the provider that produced it. [`handoff`] prepares a
//! transcript for a new target deliberately: reasoning the target cannot replay is dropped —
//! never forwarded — and foreign provider meta is removed from tool calls. Every adapter's
//! `to_wire` enforces the same rule on its own; `handoff` makes the switch explicit and
//! reports what was left behind, so a front end can say so.

use crate::capability::Capabilities;
use crate::protocol::Protocol;
use crate::types::{ContentBlock, Message, Role};

/// A transcript prepared for a new target, and what it lost on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Handoff {
    pub messages: Vec<Message>,
    /// Reasoning blocks removed because the target cannot replay them.
    pub dropped_reasoning: usize,
    /// Tool calls whose foreign provider meta was removed.
    pub stripped_call_meta: usize,
}

/// Prepares `messages` for `to` (see the module docs). Tool calls and results are kept, so
/// transcript integrity is unchanged.
pub fn handoff(messages: &[Message], to: Protocol) -> Handoff {
    let keep = Capabilities::of(to).replays_reasoning_of;
    let mut dropped_reasoning = 0;
    let mut stripped_call_meta = 0;
    let messages = messages
        .iter()
        .map(|m| {
            let mut content: Vec<ContentBlock> = Vec::with_capacity(m.content.len());
            for block in &m.content {
                match block {
                    ContentBlock::Reasoning { meta, .. } => {
                        let replayable =
                            matches!((meta, keep), (Some(meta), Some(p)) if meta.provider == p);
                        if replayable {
                            content.push(block.clone());
                        } else {
                            dropped_reasoning += 1;
                        }
                    }
                    ContentBlock::ToolCall {
                        id,
                        name,
                        arguments,
                        meta: Some(meta),
                    } if Some(meta.provider.as_str()) != keep => {
                        stripped_call_meta += 1;
                        content.push(ContentBlock::ToolCall {
                            id: id.clone(),
                            name: name.clone(),
                            arguments: arguments.clone(),
                            meta: None,
                        });
                    }
                    other => content.push(other.clone()),
                }
            }
            if content.is_empty() && m.role == Role::Assistant {
                // An assistant turn that was only reasoning: keep the turn, say what it was.
                content.push(ContentBlock::text("(reasoning from another model omitted)"));
            }
            Message::new(m.role, content)
        })
        .collect();
    Handoff {
        messages,
        dropped_reasoning,
        stripped_call_meta,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::integrity::{Tail, validate_transcript};
    use crate::providers::{anthropic, gemini, openai_chat, openai_responses};
    use crate::types::{ChatRequest, ProviderMeta};
    use serde_json::json;

    /// A signed Anthropic tool chain: thinking + call, result, then the handoff question.
    fn anthropic_chain() -> Vec<Message> {
        vec![
            Message::user_text("Weather in Oslo?"),
            Message::new(
                Role::Assistant,
                vec![
                    ContentBlock::Reasoning {
                        text: "I should call the tool.".into(),
                        meta: Some(ProviderMeta::new(
                            "anthropic",
                            json!({"signature": "SIG-ANTHROPIC"}),
                        )),
                    },
                    ContentBlock::ToolCall {
                        id: "toolu_1".into(),
                        name: "get_weather".into(),
                        arguments: json!({"city": "Oslo"}),
                        meta: None,
                    },
                ],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::tool_result("toolu_1", "-3°C, snow", false)],
            ),
        ]
    }

    #[test]
    fn signed_reasoning_never_reaches_another_provider() {
        let h = handoff(&anthropic_chain(), Protocol::OpenaiResponses);
        assert_eq!(h.dropped_reasoning, 1);
        assert_eq!(validate_transcript(&h.messages, Tail::Complete), Ok(()));
        let req = ChatRequest {
            model: "m".into(),
            messages: h.messages,
            max_tokens: 10,
            ..ChatRequest::default()
        };
        let caps = |p| Capabilities::of(p);
        for wire in [
            openai_responses::to_wire(&req, &caps(Protocol::OpenaiResponses)),
            openai_chat::to_wire(&req, &caps(Protocol::OpenaiChat)),
            gemini::to_wire(&req, &caps(Protocol::Gemini)).unwrap(),
        ] {
            let text = wire.to_string();
            assert!(!text.contains("SIG-ANTHROPIC"), "{text}");
            assert!(!text.contains("I should call the tool."), "{text}");
        }
        // Even without the explicit handoff, each adapter drops foreign reasoning itself.
        let raw = ChatRequest {
            model: "m".into(),
            messages: anthropic_chain(),
            max_tokens: 10,
            ..ChatRequest::default()
        };
        assert!(
            !openai_responses::to_wire(&raw, &caps(Protocol::OpenaiResponses))
                .to_string()
                .contains("SIG-ANTHROPIC")
        );
        assert!(
            !gemini::to_wire(&raw, &caps(Protocol::Gemini))
                .unwrap()
                .to_string()
                .contains("SIG-ANTHROPIC")
        );
        // And back to Anthropic, its own signature is replayed.
        assert!(
            anthropic::to_wire(&raw, &caps(Protocol::Anthropic))
                .to_string()
                .contains("SIG-ANTHROPIC")
        );
    }

    #[test]
    fn moving_to_gemini_mid_chain_signs_foreign_calls_with_the_bypass() {
        let h = handoff(&anthropic_chain(), Protocol::Gemini);
        let req = ChatRequest {
            model: "m".into(),
            messages: h.messages,
            max_tokens: 10,
            ..ChatRequest::default()
        };
        let wire = gemini::to_wire(&req, &Capabilities::of(Protocol::Gemini)).unwrap();
        assert_eq!(
            wire["contents"][1]["parts"][0]["thoughtSignature"],
            gemini::SIGNATURE_BYPASS
        );
    }

    #[test]
    fn gemini_call_meta_is_stripped_for_anthropic_and_kept_for_gemini() {
        let messages = vec![
            Message::user_text("go"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::ToolCall {
                    id: "call_1".into(),
                    name: "f".into(),
                    arguments: json!({}),
                    meta: Some(ProviderMeta::new(
                        "gemini",
                        json!({"thoughtSignature": "SIG-G"}),
                    )),
                }],
            ),
            Message::new(
                Role::User,
                vec![ContentBlock::tool_result("call_1", "ok", false)],
            ),
        ];
        let to_anthropic = handoff(&messages, Protocol::Anthropic);
        assert_eq!(to_anthropic.stripped_call_meta, 1);
        let to_gemini = handoff(&messages, Protocol::Gemini);
        assert_eq!(to_gemini.stripped_call_meta, 0);
        assert_eq!(to_gemini.messages, messages);
    }

    #[test]
    fn an_assistant_turn_of_only_reasoning_keeps_its_place() {
        let messages = vec![
            Message::user_text("think"),
            Message::new(
                Role::Assistant,
                vec![ContentBlock::Reasoning {
                    text: "hmm".into(),
                    meta: Some(ProviderMeta::new(
                        "openai-responses",
                        json!({"type": "reasoning"}),
                    )),
                }],
            ),
            Message::user_text("and?"),
        ];
        let h = handoff(&messages, Protocol::Anthropic);
        assert_eq!(h.messages.len(), 3);
        assert_eq!(validate_transcript(&h.messages, Tail::Complete), Ok(()));
    }
}
