//! The hard budget (`--max-cost-usd`): every model request is admitted against it before
//! it is sent, a request cut off is charged an estimate (never a known 0), and a model without
//! pricing is never admitted under one.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::sync::Arc;

use anvil_agent::tools::calculator::Calculator;
use anvil_agent::{Agent, AgentConfig, EventSink, ToolRegistry, TurnOutcome};
use anvil_llm::config::Pricing;
use anvil_llm::testing::{Scripted, ScriptedProvider, script};
use anvil_llm::{ContentBlock, LlmError, ProviderRefusal, StreamEvent, Tail, validate_transcript};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// $1 per million input tokens, $1,000 per million output: a request's reservation is
/// dominated by its output limit (1,000 tokens → $1), what it reports costs $0.005.
const PRICEY: Pricing = Pricing {
    input: 1.0,
    output: 1_000.0,
    cache_read: 0.1,
    cache_write: 1.25,
};

fn new_agent(provider: &Arc<ScriptedProvider>, pricing: Option<Pricing>) -> Agent {
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(Calculator)).unwrap();
    let (sink, _events) = EventSink::channel(1024);
    Agent::new(
        provider.clone(),
        Arc::new(tools),
        AgentConfig {
            model: "pricey".into(),
            system: Some("test".into()),
            max_tokens: 1_000,
            pricing,
            ..AgentConfig::default()
        },
        std::env::temp_dir(),
        sink,
    )
}

fn looping(n: usize) -> Vec<Vec<StreamEvent>> {
    (0..n)
        .map(|i| {
            script::tool_call(
                &format!("c{i}"),
                "calculator",
                json!({"a": 1, "b": 1, "op": "add"}),
            )
        })
        .collect()
}

fn go() -> Vec<ContentBlock> {
    vec![ContentBlock::text("go")]
}

#[tokio::test]
async fn the_request_that_would_pass_the_budget_is_never_sent() {
    let provider = Arc::new(ScriptedProvider::new(looping(10)));
    let mut agent = new_agent(&provider, Some(PRICEY));
    // The first request reserves ~$1.0001 and costs $0.00501; the second would reserve as
    // much again: $1.002 admits exactly one.
    agent.set_budget(1.002);
    let outcome = agent.run_turn(go(), CancellationToken::new()).await;
    let TurnOutcome::BudgetExceeded { reason } = &outcome else {
        panic!("{outcome:?}");
    };
    assert!(reason.contains("over the $1.002 budget"), "{reason}");
    assert_eq!(provider.requests().len(), 1, "nothing sent past the budget");
    let cost = agent.session().cost;
    assert!((cost.spent() - 0.005_01).abs() < 1e-9, "{cost:?}");
    assert_eq!(cost.outstanding_usd, None, "the reservation was settled");
    assert!(cost.spent() <= 1.002);
    // The first step's tools ran and were answered: the transcript is complete.
    assert_eq!(
        validate_transcript(agent.messages(), Tail::Complete),
        Ok(())
    );
    assert_eq!(agent.spend_limit(), Some((1.002, cost.spent())));
}

#[tokio::test]
async fn spend_never_passes_the_budget_by_more_than_one_reservation() {
    // A cheap output limit: many requests fit, and the loop must stop at the budget.
    for budget in [0.0, 0.000_1, 0.02, 0.05, 0.1] {
        let provider = Arc::new(ScriptedProvider::new(looping(60)));
        let mut agent = new_agent(&provider, Some(PRICEY));
        agent.set_budget(budget);
        let outcome = agent.run_turn(go(), CancellationToken::new()).await;
        let spent = agent.session().cost.spent();
        assert!(spent <= budget, "{budget}: spent {spent}");
        let sent = provider.requests().len();
        assert!(
            matches!(outcome, TurnOutcome::BudgetExceeded { .. }) || sent == 50,
            "{budget}: {outcome:?} after {sent}"
        );
    }
}

#[tokio::test]
async fn an_unpriced_model_is_never_admitted_under_a_budget() {
    let provider = Arc::new(ScriptedProvider::new(looping(1)));
    let mut agent = new_agent(&provider, None);
    agent.set_budget(5.0);
    let outcome = agent.run_turn(go(), CancellationToken::new()).await;
    let TurnOutcome::BudgetExceeded { reason } = &outcome else {
        panic!("{outcome:?}");
    };
    assert!(reason.contains("model pricey has no pricing"), "{reason}");
    assert!(provider.requests().is_empty());
    // Without a budget it runs, its cost unknown (never 0).
    let provider = Arc::new(ScriptedProvider::new(vec![script::text("hi")]));
    let mut agent = new_agent(&provider, None);
    assert_eq!(
        agent.run_turn(go(), CancellationToken::new()).await,
        TurnOutcome::Done
    );
    assert_eq!(agent.session().cost.total(), None);
}

#[tokio::test]
async fn a_failed_stream_is_charged_an_estimate_never_a_known_zero() {
    // The stream breaks after a delta: no usage is ever reported.
    let provider = Arc::new(ScriptedProvider::new(vec![vec![StreamEvent::TextDelta {
        index: 0,
        text: "par".into(),
    }]]));
    let mut agent = new_agent(&provider, Some(PRICEY));
    let outcome = agent.run_turn(go(), CancellationToken::new()).await;
    assert!(matches!(outcome, TurnOutcome::Failed { .. }), "{outcome:?}");
    let cost = agent.session().cost;
    assert!(cost.is_estimated());
    assert_eq!(cost.estimated, 1);
    assert!(cost.spent() > 0.0, "{cost:?}");
    assert_eq!(cost.known(), None);
}

#[tokio::test]
async fn a_request_refused_with_an_error_status_costs_nothing() {
    // The provider answered 402 before doing any work: it bills nothing, so the estimate is
    // 0, not the request's input (still an estimate: no usage was ever reported).
    let provider = Arc::new(ScriptedProvider::from_script(vec![Scripted::Error(
        LlmError::Http {
            status: 402,
            body: r#"{"error":{"message":"payment required"}}"#.into(),
            retry_after: None,
        },
    )]));
    let mut agent = new_agent(&provider, Some(PRICEY));
    let outcome = agent.run_turn(go(), CancellationToken::new()).await;
    let TurnOutcome::Failed {
        http_status,
        provider_refusal,
        ..
    } = &outcome
    else {
        panic!("{outcome:?}");
    };
    assert_eq!(*http_status, Some(402));
    assert_eq!(*provider_refusal, Some(ProviderRefusal::Account));
    let cost = agent.session().cost;
    assert_eq!(cost.estimated, 1, "{cost:?}");
    assert_eq!(cost.spent(), 0.0, "{cost:?}");
}

#[tokio::test]
async fn the_session_file_keeps_each_reservation_before_its_request() {
    let dir = tempfile::tempdir().unwrap();
    let store = anvil_agent::session::SessionStore::new(dir.path().join("sessions"));
    let (writer, loaded) = store.create(dir.path(), "pricey", None).unwrap();
    let provider = Arc::new(ScriptedProvider::new(vec![script::text("hi")]));
    let mut agent = new_agent(&provider, Some(PRICEY))
        .with_session(writer, loaded)
        .unwrap();
    agent.run_turn(go(), CancellationToken::new()).await;
    let path = agent.session_path().unwrap().to_path_buf();
    drop(agent);
    let text = std::fs::read_to_string(&path).unwrap();
    let kinds: Vec<(u64, String)> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "cost_reserved" || v["type"] == "usage")
        .map(|v| (v["v"].as_u64().unwrap(), v["type"].as_str().unwrap().into()))
        .collect();
    assert_eq!(
        kinds,
        vec![(2, "cost_reserved".into()), (1, "usage".into())],
        "a reservation line is format 2; the rest stay readable by format-1 readers"
    );
    let loaded = anvil_agent::session::load(&path).unwrap();
    assert_eq!(loaded.state.cost, loaded.state.cost_by_model["pricey"].cost);
}

#[tokio::test]
async fn a_response_without_usage_is_charged_an_estimate_and_the_budget_still_binds() {
    // A server that never reports usage (or only the output): each response is charged the
    // reservation's input part and its output, as an estimate, never a known $0.
    for keep_output in [false, true] {
        let script: Vec<Vec<StreamEvent>> = looping(40)
            .into_iter()
            .map(|events| {
                events
                    .into_iter()
                    .filter_map(|e| match e {
                        StreamEvent::Usage(u) if keep_output => {
                            Some(StreamEvent::Usage(anvil_llm::Usage {
                                output: u.output,
                                ..anvil_llm::Usage::default()
                            }))
                        }
                        StreamEvent::Usage(_) => None,
                        e => Some(e),
                    })
                    .collect()
            })
            .collect();
        let provider = Arc::new(ScriptedProvider::new(script));
        let mut agent = new_agent(&provider, Some(PRICEY));
        agent.set_budget(1.2);
        let outcome = agent.run_turn(go(), CancellationToken::new()).await;
        assert!(
            matches!(outcome, TurnOutcome::BudgetExceeded { .. }),
            "{keep_output}: {outcome:?}"
        );
        let cost = agent.session().cost;
        assert!(cost.is_estimated() && cost.estimated > 0, "{cost:?}");
        assert!(cost.spent() > 0.0 && cost.spent() <= 1.2, "{cost:?}");
        assert!(
            provider.requests().len() < 40,
            "{keep_output}: the budget stopped the loop"
        );
    }
}

#[tokio::test]
async fn the_summary_request_reserves_for_its_focus_too() {
    let provider = Arc::new(ScriptedProvider::new(vec![script::text("hi")]));
    let mut agent = new_agent(&provider, Some(PRICEY));
    agent.run_turn(go(), CancellationToken::new()).await;
    // Room for the summary's output limit and a small context, not for a 400 KB focus
    // ($1 per million input tokens × 1.25 × 100k tokens = $0.125 more).
    agent.set_budget(1.05);
    let focus = "x".repeat(400_000);
    let err = agent
        .compact(Some(&focus), &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.contains("was not sent"), "{err}");
    assert_eq!(
        provider.requests().len(),
        1,
        "the summary request was never sent"
    );
}
