//! The agent loop against a ScriptedProvider: tool round trips, unknown tools, max_steps,
//! cancellation, parallel read-only batches and the loop's boundary cases.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::sync::Arc;
use std::time::{Duration, Instant};

use anvil_agent::tools::calculator::Calculator;
use anvil_agent::{
    Agent, AgentConfig, AgentEvent, Cancellation, Effects, EventSink, Tool, ToolContext, ToolError,
    ToolRegistry, TurnOutcome,
};
use anvil_llm::testing::{Scripted, ScriptedProvider, script};
use anvil_llm::{
    ContentBlock, FinishReason, LlmError, Message, Role, StreamEvent, Tail, validate_transcript,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A tool that sleeps (watching cancellation) and records when it ran.
struct Sleeper {
    name: &'static str,
    millis: u64,
    effects: Effects,
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

#[async_trait::async_trait]
impl Tool for Sleeper {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "sleeps"
    }
    fn input_schema(&self) -> Value {
        json!({"type": "object"})
    }
    fn effects(&self, _: &Value) -> Effects {
        self.effects
    }
    fn cancellation(&self) -> Cancellation {
        Cancellation::Immediate
    }
    async fn call(
        &self,
        args: Value,
        ctx: &ToolContext,
    ) -> Result<anvil_agent::ToolOutput, ToolError> {
        let tag = args
            .get("tag")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        self.log.lock().unwrap().push(format!("start {tag}"));
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(self.millis)) => {}
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        }
        self.log.lock().unwrap().push(format!("end {tag}"));
        Ok(format!("slept {tag}").into())
    }
}

struct Harness {
    agent: Agent,
    provider: Arc<ScriptedProvider>,
    events: mpsc::Receiver<AgentEvent>,
    log: Arc<std::sync::Mutex<Vec<String>>>,
}

fn harness(provider: ScriptedProvider, max_steps: u32) -> Harness {
    let log = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Calculator)).unwrap();
    for (name, millis, effects) in [
        ("slow_read", 200, Effects::READ_ONLY),
        ("slow_write", 200, Effects::WRITES),
        ("very_slow", 5_000, Effects::READ_ONLY),
    ] {
        tools
            .register(Arc::new(Sleeper {
                name,
                millis,
                effects,
                log: Arc::clone(&log),
            }))
            .unwrap();
    }
    let provider = Arc::new(provider);
    let (sink, events) = EventSink::channel(1024);
    let agent = Agent::new(
        provider.clone(),
        Arc::new(tools),
        AgentConfig {
            model: "scripted".into(),
            system: Some("test".into()),
            max_steps,
            ..AgentConfig::default()
        },
        std::env::temp_dir(),
        sink,
    );
    Harness {
        agent,
        provider,
        events,
        log,
    }
}

fn drain(rx: &mut mpsc::Receiver<AgentEvent>) -> Vec<AgentEvent> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

fn turn_finished(events: &[AgentEvent]) -> Vec<&TurnOutcome> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TurnFinished { outcome } => Some(outcome),
            _ => None,
        })
        .collect()
}

fn user(text: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::text(text)]
}

fn results(m: &Message) -> Vec<(String, bool)> {
    m.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn calculator_then_answer() {
    let mut h = harness(
        ScriptedProvider::new(vec![
            script::tool_call("c1", "calculator", json!({"a": 2, "b": 2, "op": "add"})),
            script::text("4"),
        ]),
        10,
    );
    let outcome = h
        .agent
        .run_turn(user("2+2?"), CancellationToken::new())
        .await;
    assert_eq!(outcome, TurnOutcome::Done);
    let m = h.agent.messages();
    assert_eq!(m.len(), 4);
    assert_eq!(validate_transcript(m, Tail::Complete), Ok(()));
    let second = &h.provider.requests()[1];
    assert_eq!(
        results(second.messages.last().unwrap()),
        vec![("4".to_string(), false)]
    );
    let events = drain(&mut h.events);
    assert_eq!(turn_finished(&events), vec![&TurnOutcome::Done]);
    assert!(matches!(
        events.last(),
        Some(AgentEvent::TurnFinished { .. })
    ));
}

#[tokio::test]
async fn unknown_tool_then_text_continues_with_an_error_result() {
    let mut h = harness(
        ScriptedProvider::new(vec![
            script::tool_call("c1", "no_such_tool", json!({})),
            script::text("sorry"),
        ]),
        10,
    );
    assert_eq!(
        h.agent.run_turn(user("go"), CancellationToken::new()).await,
        TurnOutcome::Done
    );
    let (text, is_error) = results(&h.agent.messages()[2]).remove(0);
    assert!(is_error);
    assert!(text.contains("Available tools: calculator"), "{text}");
}

#[tokio::test]
async fn max_steps_stops_after_exactly_that_many_requests() {
    let script: Vec<Vec<StreamEvent>> = (0..30)
        .map(|i| {
            script::tool_call(
                &format!("c{i}"),
                "calculator",
                json!({"a": 1, "b": 1, "op": "add"}),
            )
        })
        .collect();
    let mut h = harness(ScriptedProvider::new(script), 5);
    let outcome = h
        .agent
        .run_turn(user("loop"), CancellationToken::new())
        .await;
    assert_eq!(outcome, TurnOutcome::MaxSteps);
    assert_eq!(h.provider.requests().len(), 5);
    assert_eq!(
        validate_transcript(h.agent.messages(), Tail::Complete),
        Ok(())
    );
    assert_eq!(
        turn_finished(&drain(&mut h.events)),
        vec![&TurnOutcome::MaxSteps]
    );
}

#[tokio::test]
async fn cancelling_a_slow_tool_is_quick_and_leaves_a_valid_transcript() {
    let mut h = harness(
        ScriptedProvider::new(vec![script::tool_call(
            "c1",
            "very_slow",
            json!({"tag": "x"}),
        )]),
        10,
    );
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.cancel();
    });
    let started = Instant::now();
    let outcome = h.agent.run_turn(user("go"), cancel).await;
    assert_eq!(outcome, TurnOutcome::Cancelled);
    // The tool would sleep 5 s; cancellation must cut that short.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let m = h.agent.messages();
    assert_eq!(validate_transcript(m, Tail::Complete), Ok(()));
    let (text, is_error) = results(m.last().unwrap()).remove(0);
    assert!(is_error && text.contains("cancelled"), "{text}");
    assert_eq!(
        turn_finished(&drain(&mut h.events)),
        vec![&TurnOutcome::Cancelled]
    );
}

#[tokio::test]
async fn cancel_mid_sample_then_a_new_turn_never_has_two_user_messages_in_a_row() {
    let slow = ScriptedProvider::new(vec![
        script::text("a long answer that will be cut"),
        script::text("second answer"),
    ])
    .with_event_delay(Duration::from_millis(300));
    let mut h = harness(slow, 10);
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.cancel();
    });
    assert_eq!(
        h.agent.run_turn(user("first"), cancel).await,
        TurnOutcome::Cancelled
    );
    // Cancelled before any text arrived: nothing to keep, the transcript ends with the user's
    // message (a cancel after some text keeps it: see the `cancel` suite).
    assert_eq!(h.agent.messages().len(), 1);
    assert_eq!(
        h.agent
            .run_turn(user("second"), CancellationToken::new())
            .await,
        TurnOutcome::Done
    );
    let m = h.agent.messages();
    assert_eq!(validate_transcript(m, Tail::Complete), Ok(()));
    for pair in m.windows(2) {
        assert_ne!(pair[0].role, pair[1].role);
    }
    assert_eq!(m[0].text(), "firstsecond");
}

#[tokio::test]
async fn three_read_only_calls_run_concurrently_and_keep_call_order() {
    let mut h = harness(
        ScriptedProvider::new(vec![
            script::tool_calls(&[
                ("c1", "slow_read", json!({"tag": "1"})),
                ("c2", "slow_read", json!({"tag": "2"})),
                ("c3", "slow_read", json!({"tag": "3"})),
            ]),
            script::text("done"),
        ]),
        10,
    );
    assert_eq!(
        h.agent.run_turn(user("go"), CancellationToken::new()).await,
        TurnOutcome::Done
    );
    // Concurrent: all three started before any finished (each sleeps 200 ms).
    let log = h.log.lock().unwrap().clone();
    assert!(log[..3].iter().all(|l| l.starts_with("start")), "{log:?}");
    let got: Vec<String> = results(&h.agent.messages()[2])
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(got, ["slept 1", "slept 2", "slept 3"]);
}

#[tokio::test]
async fn a_mixed_batch_stays_sequential() {
    let mut h = harness(
        ScriptedProvider::new(vec![
            script::tool_calls(&[
                ("c1", "slow_write", json!({"tag": "w"})),
                ("c2", "slow_read", json!({"tag": "r"})),
            ]),
            script::text("done"),
        ]),
        10,
    );
    h.agent.run_turn(user("go"), CancellationToken::new()).await;
    assert_eq!(
        *h.log.lock().unwrap(),
        ["start w", "end w", "start r", "end r"]
    );
}

#[tokio::test]
async fn an_abnormal_finish_executes_no_tools_and_keeps_the_transcript_valid() {
    for (reason, outcome) in [
        (FinishReason::MaxTokens, TurnOutcome::MaxTokens),
        (FinishReason::Refusal, TurnOutcome::Refused),
        (
            FinishReason::Other("pause_turn".into()),
            TurnOutcome::ProtocolStopped {
                reason: "pause_turn".into(),
            },
        ),
    ] {
        let mut events = script::tool_call("c1", "slow_write", json!({"tag": "never"}));
        let n = events.len();
        events[n - 1] = StreamEvent::Finish(reason);
        let mut h = harness(ScriptedProvider::new(vec![events]), 10);
        assert_eq!(
            h.agent.run_turn(user("go"), CancellationToken::new()).await,
            outcome
        );
        assert!(h.log.lock().unwrap().is_empty(), "a tool ran");
        let m = h.agent.messages();
        assert_eq!(validate_transcript(m, Tail::Complete), Ok(()));
        let (text, is_error) = results(m.last().unwrap()).remove(0);
        assert!(is_error && text.starts_with("Not executed"), "{text}");
    }
}

#[tokio::test]
async fn every_error_path_ends_with_exactly_one_turn_finished() {
    // The provider fails before streaming.
    let mut h = harness(
        ScriptedProvider::from_script(vec![Scripted::Error(LlmError::Http {
            status: 503,
            body: "down".into(),
            retry_after: None,
        })]),
        10,
    );
    let outcome = h.agent.run_turn(user("go"), CancellationToken::new()).await;
    assert!(
        matches!(
            outcome,
            TurnOutcome::Failed {
                retryable: true,
                http_status: Some(503),
                ..
            }
        ),
        "{outcome:?}"
    );
    let events = drain(&mut h.events);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::StepFailed { step: 1, .. }))
    );
    assert_eq!(turn_finished(&events).len(), 1);

    // The stream is cut short (no Finish).
    let mut h = harness(
        ScriptedProvider::new(vec![vec![StreamEvent::TextDelta {
            index: 0,
            text: "par".into(),
        }]]),
        10,
    );
    let outcome = h.agent.run_turn(user("go"), CancellationToken::new()).await;
    assert!(matches!(outcome, TurnOutcome::Failed { .. }), "{outcome:?}");
    assert_eq!(turn_finished(&drain(&mut h.events)).len(), 1);
    // The user can go on: the next turn merges into the dangling user message.
    assert_eq!(h.agent.messages().len(), 1);

    // The script is exhausted mid-turn (a config error).
    let mut h = harness(
        ScriptedProvider::new(vec![script::tool_call(
            "c1",
            "calculator",
            json!({"a": 1, "b": 2, "op": "add"}),
        )]),
        10,
    );
    let outcome = h.agent.run_turn(user("go"), CancellationToken::new()).await;
    assert!(
        matches!(
            outcome,
            TurnOutcome::Failed {
                retryable: false,
                http_status: None,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(turn_finished(&drain(&mut h.events)).len(), 1);
    assert_eq!(
        validate_transcript(h.agent.messages(), Tail::Complete),
        Ok(())
    );
}

#[tokio::test]
async fn a_reused_provider_id_is_minted_anew() {
    let mut h = harness(
        ScriptedProvider::new(vec![
            script::tool_call("call_0", "calculator", json!({"a": 1, "b": 1, "op": "add"})),
            script::tool_call("call_0", "calculator", json!({"a": 2, "b": 2, "op": "add"})),
            script::text("4"),
        ]),
        10,
    );
    assert_eq!(
        h.agent.run_turn(user("go"), CancellationToken::new()).await,
        TurnOutcome::Done
    );
    assert_eq!(
        validate_transcript(h.agent.messages(), Tail::Complete),
        Ok(())
    );
    let ids: Vec<String> = h
        .agent
        .messages()
        .iter()
        .flat_map(|m| m.tool_calls().map(|c| c.id.to_string()).collect::<Vec<_>>())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
}

#[tokio::test]
async fn a_slow_event_consumer_does_not_grow_memory() {
    // A long answer made of many small deltas, read by a consumer slower than the producer.
    let mut deltas: Vec<StreamEvent> = (0..5_000)
        .map(|i| StreamEvent::TextDelta {
            index: 0,
            text: format!("{i},"),
        })
        .collect();
    deltas.push(StreamEvent::Finish(FinishReason::EndTurn));
    let provider = Arc::new(ScriptedProvider::new(vec![deltas]));
    let (sink, mut rx) = EventSink::channel(4);
    let mut agent = Agent::new(
        provider,
        Arc::new(ToolRegistry::new()),
        AgentConfig::default(),
        std::env::temp_dir(),
        sink,
    );
    let reader = tokio::spawn(async move {
        let (mut text, mut n, mut max_queued) = (String::new(), 0, 0);
        while let Some(e) = rx.recv().await {
            max_queued = max_queued.max(rx.len());
            tokio::time::sleep(Duration::from_millis(1)).await;
            n += 1;
            if let AgentEvent::TextDelta { text: t } = e {
                text.push_str(&t);
            }
        }
        (text, n, max_queued)
    });
    // A consumer this slow may delay the turn, never stall it: a deadline, not a hang.
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        agent.run_turn(user("go"), CancellationToken::new()),
    )
    .await
    .expect("the turn stalled behind the slow consumer");
    assert_eq!(outcome, TurnOutcome::Done);
    drop(agent);
    let (text, n, max_queued) = tokio::time::timeout(Duration::from_secs(60), reader)
        .await
        .expect("the consumer never saw the channel close")
        .unwrap();
    let expected: String = (0..5_000).map(|i| format!("{i},")).collect();
    assert_eq!(text, expected);
    assert!(max_queued <= 4, "{max_queued}");
    assert!(n < 5_000, "deltas were not coalesced: {n} events");
}

#[tokio::test]
async fn dropping_the_ui_mid_turn_neither_blocks_nor_changes_the_outcome() {
    let provider = Arc::new(ScriptedProvider::new(vec![
        script::tool_call("c1", "calculator", json!({"a": 1, "b": 1, "op": "add"})),
        script::text("2"),
    ]));
    let (sink, rx) = EventSink::channel(1);
    drop(rx);
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Calculator)).unwrap();
    let mut agent = Agent::new(
        provider,
        Arc::new(tools),
        AgentConfig::default(),
        std::env::temp_dir(),
        sink,
    );
    // "Neither blocks": a deadline, so blocking fails the test instead of hanging it.
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        agent.run_turn(user("go"), CancellationToken::new()),
    )
    .await
    .expect("the turn blocked on the dropped UI");
    assert_eq!(outcome, TurnOutcome::Done);
    assert_eq!(
        agent.messages().last().map(|m| m.role),
        Some(Role::Assistant)
    );
}
