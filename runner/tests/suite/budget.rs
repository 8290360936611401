//! `--max-cost-usd` through the real `anvil` binary and a scripted Anthropic server: the request
//! that would pass the budget is never sent (exit 7, `budget_exceeded`), a hard budget on a
//! model without pricing refuses to start, and a budget that is not an amount is a usage error.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::PathBuf;
use std::process::Output;

use anvil_llm::testing::anthropic_sse::{self, Usage};
use anvil_test_support::home::Home;
use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};
use serde_json::{Value, json};

use super::sessions::json_out;

const ANVIL: &str = env!("CARGO_BIN_EXE_anvil");

/// A server that asks for one `read_file` after another, forever, reporting more input than
/// the harness estimates (so each next request reserves more than the one before).
async fn looping_server() -> ScriptedServer {
    ScriptedServer::answering(WireFormat::AnthropicMessages, |_| {
        Answer::sse(anthropic_sse::tool_use(
            "toolu_1",
            "read_file",
            &json!({"file_path": "notes.txt"}),
            "tool_use",
            Usage {
                input: 10_000,
                output: 20,
            },
        ))
    })
    .await
}

fn home(server: &ScriptedServer) -> (Home, PathBuf) {
    let home = Home::new();
    home.write_config(&format!(
        "default_model = \"priced\"\n\n[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"MOCK_API_KEY\"\n\n[models.priced]\nprovider = \"mock\"\nmodel = \"claude-priced\"\nmax_output_tokens = 1000\npricing = {{ input = 3.0, output = 15.0 }}\n\n[models.free]\nprovider = \"mock\"\nmodel = \"claude-free\"\n",
        server.uri()
    ));
    let repo = home.git_repo("repo", &[("notes.txt", "notes\n")]);
    (home, repo)
}

fn run(home: &Home, repo: &PathBuf, args: &[&str]) -> Output {
    home.command(ANVIL)
        .current_dir(repo)
        .args(args)
        .output()
        .unwrap()
}

/// The `cost_reserved` amounts of the newest session file of `home`.
fn reservations(home: &Home) -> Vec<f64> {
    let root = home.path().join("data/anvil/sessions");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .map(|f| f.path())
        .collect();
    files.sort_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap());
    std::fs::read_to_string(files.last().unwrap())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "cost_reserved")
        .map(|v| v["usd"].as_f64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_that_would_pass_the_budget_is_never_sent() {
    let server = looping_server().await;
    let (home, repo) = home(&server);
    // Unlimited but for steps: what one request reserves and costs.
    let out = run(
        &home,
        &repo,
        &["-p", "read", "--output-format", "json", "--max-steps", "1"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let first = reservations(&home)[0];
    let spent_one = json_out(&out)["cost_usd"].as_f64().unwrap();
    assert!((spent_one - (10_000.0 * 3.0 + 20.0 * 15.0) / 1e6).abs() < 1e-12);

    // A budget that admits the first request and not the second (which reserves at least as
    // much: its context only grew).
    let budget = first + spent_one / 2.0;
    let sent_before = server.requests().len();
    let out = run(
        &home,
        &repo,
        &[
            "-p",
            "read",
            "--output-format",
            "json",
            "--max-cost-usd",
            &budget.to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let result = json_out(&out);
    assert_eq!(result["outcome"], "budget_exceeded", "{result}");
    assert!(
        result["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("over the ${budget} budget")),
        "{result}"
    );
    assert_eq!(server.requests().len() - sent_before, 1, "one request sent");
    assert_eq!(result["cost_usd"].as_f64().unwrap(), spent_one);
    assert_eq!(result["accounting"], "reported");
    assert!(result["cost_usd"].as_f64().unwrap() <= budget);

    // Text mode says so on stderr, with the same exit code.
    let out = run(&home, &repo, &["-p", "read", "--max-cost-usd", "0"]);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("stopped by the budget"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_budget_on_an_unpriced_model_refuses_to_start() {
    let server = looping_server().await;
    let (home, repo) = home(&server);
    for format in ["text", "json"] {
        let out = run(
            &home,
            &repo,
            &[
                "-p",
                "read",
                "-m",
                "free",
                "--max-cost-usd",
                "1",
                "--output-format",
                format,
            ],
        );
        assert_eq!(out.status.code(), Some(7), "{out:?}");
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(all.contains("model free has no pricing"), "{all}");
    }
    assert!(server.requests().is_empty(), "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_that_is_not_an_amount_is_a_usage_error() {
    let server = looping_server().await;
    let (home, repo) = home(&server);
    for bad in ["-1", "abc", "NaN", "inf", ""] {
        let out = run(
            &home,
            &repo,
            &["-p", "read", &format!("--max-cost-usd={bad}")],
        );
        assert_eq!(out.status.code(), Some(64), "{bad}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--max-cost-usd"), "{bad}: {stderr}");
    }
    assert!(server.requests().is_empty());
}
