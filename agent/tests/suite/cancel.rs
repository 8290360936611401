//! Cancelling a response part-way (Ctrl-C while the answer streams): the text already shown is
//! kept in the transcript and the session file, and the usage is counted — what the provider
//! reported so far, the rest estimated and marked as such. Against a ScriptedProvider whose
//! stream stalls after some deltas, cancelled once the front end has seen them.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::sync::Arc;
use std::time::Duration;

use anvil_agent::{Agent, AgentConfig, AgentEvent, EventSink, ToolRegistry, TurnOutcome};
use anvil_llm::config::Pricing;
use anvil_llm::testing::{Scripted, ScriptedProvider, script};
use anvil_llm::{ContentBlock, Role, StreamEvent, Tail, Usage, validate_transcript};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const PRICING: Pricing = Pricing {
    input: 3.0,
    output: 15.0,
    cache_read: 0.3,
    cache_write: 3.75,
};

fn text(t: &str) -> StreamEvent {
    StreamEvent::TextDelta {
        index: 0,
        text: t.into(),
    }
}

fn agent(
    provider: &Arc<ScriptedProvider>,
    pricing: Option<Pricing>,
) -> (Agent, mpsc::Receiver<AgentEvent>) {
    let (sink, events) = EventSink::channel(1024);
    let agent = Agent::new(
        provider.clone(),
        Arc::new(ToolRegistry::new()),
        AgentConfig {
            model: "scripted".into(),
            system: Some("test".into()),
            pricing,
            ..AgentConfig::default()
        },
        std::env::temp_dir(),
        sink,
    );
    (agent, events)
}

/// Runs a turn and cancels it once the front end has received `shown` as text; returns the
/// outcome and every event of the turn.
async fn cancel_once_shown(
    agent: &mut Agent,
    events: &mut mpsc::Receiver<AgentEvent>,
    shown: &str,
) -> (TurnOutcome, Vec<AgentEvent>) {
    let cancel = CancellationToken::new();
    let watcher = {
        let cancel = cancel.clone();
        let shown = shown.to_string();
        async move {
            let mut seen = Vec::new();
            let mut text = String::new();
            while let Some(e) = events.recv().await {
                if let AgentEvent::TextDelta { text: t } = &e {
                    text.push_str(t);
                    if text == shown {
                        cancel.cancel();
                    }
                }
                let last = matches!(e, AgentEvent::TurnFinished { .. });
                seen.push(e);
                if last {
                    break;
                }
            }
            seen
        }
    };
    let (outcome, seen) = tokio::time::timeout(
        Duration::from_secs(20),
        futures::future::join(
            agent.run_turn(vec![ContentBlock::text("explain")], cancel),
            watcher,
        ),
    )
    .await
    .expect("the stalled response was never cancelled");
    (outcome, seen)
}

fn usage_events(events: &[AgentEvent]) -> Vec<(Usage, Option<f64>, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Usage {
                usage,
                cost_usd,
                estimated,
            } => Some((*usage, *cost_usd, *estimated)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn the_text_shown_before_ctrl_c_stays_in_the_transcript_and_the_session_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = anvil_agent::session::SessionStore::new(dir.path().join("sessions"));
    let (writer, loaded) = store.create(dir.path(), "scripted", None).unwrap();
    let provider = Arc::new(ScriptedProvider::from_script(vec![
        // Anthropic reports the input at message_start (and output 1), the rest at the end.
        Scripted::Stalls(vec![
            StreamEvent::Usage(Usage {
                input: 120,
                output: 1,
                ..Usage::default()
            }),
            text("The bug is in the parser: "),
            text("it drops the last token when"),
        ]),
        Scripted::Events(script::text("Go on? Sure.")),
    ]));
    let (agent, mut events) = agent(&provider, None);
    let mut agent = agent.with_session(writer, loaded).unwrap();
    let partial = "The bug is in the parser: it drops the last token when";
    let (outcome, seen) = cancel_once_shown(&mut agent, &mut events, partial).await;
    assert_eq!(outcome, TurnOutcome::Cancelled);

    // In the transcript, as the model's own (cut-off) answer; the transcript stays valid.
    let m = agent.messages();
    assert_eq!(m.len(), 2, "{m:?}");
    assert_eq!(
        (m[1].role, m[1].text()),
        (Role::Assistant, partial.to_string())
    );
    assert_eq!(validate_transcript(m, Tail::Complete), Ok(()));

    // The usage: the input the provider reported, the output estimated from the text (the
    // reported 1 was stale), marked as an estimate, before the turn's end.
    let usage = usage_events(&seen);
    assert_eq!(usage.len(), 1, "{seen:?}");
    let (u, cost, estimated) = usage[0];
    assert_eq!(u.input, 120);
    assert!(u.output > 10, "{u:?}");
    assert!(estimated);
    assert_eq!(cost, None, "no pricing, no cost");
    assert_eq!(agent.session().usage, u);
    let turn_end = seen
        .iter()
        .position(|e| matches!(e, AgentEvent::TurnFinished { .. }));
    let usage_at = seen
        .iter()
        .position(|e| matches!(e, AgentEvent::Usage { .. }));
    assert!(usage_at < turn_end, "{seen:?}");

    // Resumed from its file, the session shows the partial answer and its usage.
    let path = agent.session_path().unwrap().to_path_buf();
    let loaded = anvil_agent::session::load(&path).unwrap();
    assert_eq!(loaded.messages, agent.messages());
    assert_eq!(loaded.state.usage, u);
    let file = std::fs::read_to_string(&path).unwrap();
    let record = file
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["type"] == "usage")
        .unwrap();
    assert_eq!(record["estimated"], true, "{record}");

    // The conversation goes on from it: the next request carries the partial answer, and
    // roles alternate.
    let next = agent
        .run_turn(vec![ContentBlock::text("go on")], CancellationToken::new())
        .await;
    assert_eq!(next, TurnOutcome::Done);
    let sent = provider.requests().pop().unwrap().messages;
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[1].text(), partial);
    assert_eq!(sent[2].text(), "go on");
}

#[tokio::test]
async fn a_response_cancelled_before_any_usage_was_reported_is_charged_an_estimate() {
    // OpenAI-style servers report usage only at the end: nothing was reported.
    let provider = Arc::new(ScriptedProvider::from_script(vec![Scripted::Stalls(vec![
        text(&"word ".repeat(40)),
    ])]));
    let (mut agent, mut events) = agent(&provider, Some(PRICING));
    let (outcome, seen) = cancel_once_shown(&mut agent, &mut events, &"word ".repeat(40)).await;
    assert_eq!(outcome, TurnOutcome::Cancelled);
    let usage = usage_events(&seen);
    assert_eq!(usage.len(), 1, "{seen:?}");
    let (u, cost, estimated) = usage[0];
    assert!(estimated);
    // The input: the request's estimate (system prompt, message); the output: chars / 4.
    assert!(u.input > 0, "{u:?}");
    assert!((50..=60).contains(&u.output), "{u:?}");
    let cost = cost.expect("a priced model's cancelled response has a cost");
    assert!((cost - PRICING.cost(&u)).abs() < 1e-12);
    // The session counts it as estimated spend, never a known cost.
    let spent = agent.session().cost;
    assert!(spent.is_estimated(), "{spent:?}");
    assert!(spent.spent() > 0.0);
    assert_eq!(spent.outstanding_usd, None, "the reservation was settled");
    assert_eq!(agent.messages()[1].text(), "word ".repeat(40));
}

#[tokio::test]
async fn a_cut_off_tool_call_is_never_kept_or_run_but_the_text_before_it_is() {
    let provider = Arc::new(ScriptedProvider::from_script(vec![Scripted::Stalls(vec![
        text("Let me look."),
        StreamEvent::ToolCallStart {
            index: 1,
            id: "call_1".into(),
            name: "read_file".into(),
            meta: None,
        },
        StreamEvent::ToolCallDelta {
            index: 1,
            arguments_fragment: "{\"file_pa".into(),
        },
    ])]));
    let (mut agent, mut events) = agent(&provider, None);
    let (outcome, seen) = cancel_once_shown(&mut agent, &mut events, "Let me look.").await;
    assert_eq!(outcome, TurnOutcome::Cancelled);
    let m = agent.messages();
    assert_eq!(m.len(), 2);
    assert_eq!(
        m[1].content,
        vec![ContentBlock::Text {
            text: "Let me look.".into()
        }]
    );
    assert!(
        !seen
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolCallStarted { .. })),
        "{seen:?}"
    );
    assert_eq!(validate_transcript(m, Tail::Complete), Ok(()));
}
