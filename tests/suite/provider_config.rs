//! Provider configuration, end to end with the real `anvil`: a `base_url` without a scheme and
//! an unknown key are configuration errors (exit 6) naming the file and the line, before any
//! request; an `anthropic` provider at a local server needs no key, and its `…/v1` base URL is
//! not sent twice.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::process::Output;

use serde_json::Value;

use anvil_test_support::bins;
use anvil_test_support::home::Home;
use anvil_test_support::model_server::wire::{self, Usage};
use anvil_test_support::model_server::{ScriptedServer, WireFormat};

/// `anvil -p PROMPT --output-format json ARGS` in `home`, in a fresh git repository.
fn headless(home: &Home, args: &[&str]) -> (Output, Value) {
    let repo = home.git_repo("repo", &[("README.md", "hi\n")]);
    let out = home
        .command(bins::built("anvil"))
        .arg("-C")
        .arg(&repo)
        .args(["-p", "Say hi", "--output-format", "json"])
        .args(args)
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, json)
}

fn config_path(home: &Home) -> String {
    home.path()
        .join("cfg/anvil/config.toml")
        .display()
        .to_string()
}

#[test]
fn a_base_url_without_a_scheme_is_a_config_error_naming_the_file_and_line() {
    let home = Home::new();
    home.write_config(
        "default_model = \"local\"\n\
         \n\
         [providers.llama]\n\
         kind = \"openai-chat\"\n\
         base_url = \"localhost:8080/v1\"\n\
         \n\
         [models.local]\n\
         provider = \"llama\"\n\
         model = \"qwen\"\n",
    );
    let (out, json) = headless(&home, &[]);
    assert_eq!(out.status.code(), Some(6), "{json}");
    assert_eq!(json["outcome"], "config_error", "{json}");
    let error = json["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("{}:5: ", config_path(&home))),
        "{error}"
    );
    assert!(
        error.contains(
            "base_url 'localhost:8080/v1' has no scheme; write it as http://localhost:8080/v1"
        ),
        "{error}"
    );
}

#[test]
fn an_unknown_key_names_its_own_line() {
    let home = Home::new();
    home.write_config(
        "default_model = \"local\"\n\
         \n\
         [providers.llama]\n\
         kind = \"openai-chat\"\n\
         base_url = \"http://127.0.0.1:9/v1\"\n\
         \n\
         [models.local]\n\
         provider = \"llama\"\n\
         model = \"qwen\"\n\
         max_output = 512\n",
    );
    let (out, json) = headless(&home, &[]);
    assert_eq!(out.status.code(), Some(6), "{json}");
    let error = json["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!("{}:10: ", config_path(&home))),
        "{error}"
    );
    assert!(error.contains("unknown field `max_output`"), "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_anthropic_provider_at_a_local_server_needs_no_key() {
    let server = ScriptedServer::in_order(
        WireFormat::AnthropicMessages,
        vec![wire::text(
            WireFormat::AnthropicMessages,
            "hi there",
            Usage {
                input: 10,
                output: 3,
            },
        )],
    )
    .await;
    let home = Home::new();
    // llama.cpp's docs write the base URL with `/v1`; the adapter appends `/v1/messages`.
    home.write_config(&format!(
        "default_model = \"local\"\n\n[providers.llama]\nkind = \"anthropic\"\nbase_url = \"{}/v1\"\n\n[models.local]\nprovider = \"llama\"\nmodel = \"qwen\"\ncontext_window = 8192\n",
        server.uri()
    ));
    let (out, json) = tokio::task::spawn_blocking(move || {
        let result = headless(&home, &[]);
        drop(home);
        result
    })
    .await
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{json}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json["text"], "hi there", "{json}");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].url.path(), "/v1/messages");
    assert!(!requests[0].headers.contains_key("x-api-key"));
    // No output limit configured: a quarter of the context window.
    assert_eq!(server.requests()[0]["max_tokens"], 2048);
}
