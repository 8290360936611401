//! Sweep files and variants end to end with the real binaries: `anvil-evals run --file` reads
//! a sweep file, every (task, model, variant, trial) runs the real `anvil -p` with the variant's
//! flags against a scripted model server, and the report compares the variants paired by task.
//!
//! The scripted model writes the answer only when its system prompt carries the hint a variant
//! appends and the write_file tool is offered: so `control` fails, `hinted` passes and
//! `hinted-readonly` (the hint, but only read tools) fails — which shows both the prompt text
//! and the tool subset reached the agent.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::Path;
use std::process::{Command, Output};

use anvil_llm::testing::anthropic_sse::{self, Usage};
use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat};
use anvil_test_support::sweep as support;
use serde_json::{Value, json};

const HINT: &str = "HINT-42: the answer is 42.";

/// Writes answer.txt when the system prompt has the hint and write_file is offered.
async fn hint_server() -> ScriptedServer {
    ScriptedServer::answering(WireFormat::AnthropicMessages, |body| {
        let usage = Usage {
            input: 40,
            output: 9,
        };
        let system = body["system"].to_string();
        let offered: Vec<&str> = body["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str())
            .collect();
        let after_tool = body.to_string().contains("\"tool_result\"");
        let sse = if after_tool {
            anthropic_sse::text("Done.", usage)
        } else if system.contains("HINT-42") && offered.contains(&"write_file") {
            support::write_answer()
        } else {
            anthropic_sse::text("I cannot work out the answer.", usage)
        };
        Answer::sse(sse)
    })
    .await
}

struct Machine {
    home: tempfile::TempDir,
}

impl Machine {
    async fn new(server: &ScriptedServer) -> Machine {
        let home = tempfile::tempdir().unwrap();
        let cfg = home.path().join("cfg/anvil");
        std::fs::create_dir_all(&cfg).unwrap();
        std::fs::write(cfg.join("config.toml"), support::config(server)).unwrap();
        for t in ["t1", "t2"] {
            support::task(&home.path().join("evals/tasks"), t);
        }
        std::fs::create_dir_all(home.path().join("evals/sweeps")).unwrap();
        Machine { home }
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        self.home.path().join(rel)
    }

    fn queue(&self) -> String {
        self.path("data/queue.db").display().to_string()
    }

    fn evals(&self, args: &[&str]) -> Command {
        let mut c = support::evals_command(self.home.path(), args);
        c.current_dir(self.home.path());
        c
    }
}

fn output(mut c: Command) -> Output {
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn sweep_file(m: &Machine, name: &str, text: &str) -> String {
    let path = m.path(&format!("evals/sweeps/{name}"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

const SWEEP: &str = r#"
sweep = "exp-{date}"
tasks = ["../tasks/*"]
models = ["bad"]
trials = 2
concurrency = 2
k = [1]

[variants.control]

[variants.hinted]
system_prompt_file = "hint.md"

[variants.hinted-readonly]
system_prompt_append = "HINT-42: the answer is 42."
tools = ["read_file", "grep", "glob"]
max_steps = 3
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_file_runs_every_variant_and_the_report_compares_them() {
    let server = hint_server().await;
    let m = Machine::new(&server).await;
    std::fs::write(m.path("evals/sweeps/hint.md"), format!("{HINT}\n")).unwrap();
    let file = sweep_file(&m, "exp.toml", SWEEP);
    let queue = m.queue();
    let out = output(m.evals(&[
        "run",
        "--file",
        &file,
        "--queue",
        &queue,
        "--backoff-secs",
        "0.1",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("2 tasks × 1 models × 3 variants × 2 trials = 12 trials"),
        "{stderr}"
    );
    let date = jiff::Timestamp::now().strftime("%Y%m%d").to_string();
    let sweep = format!("exp-{date}");
    assert!(stderr.contains(&format!("sweep {sweep}")), "{stderr}");

    let out = output(m.evals(&["export", "--queue", &queue, "--sweep", &sweep]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let records: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 12, "2 tasks × 3 variants × 2 trials");
    let artifacts = m.path(&format!("data/anvil/sweeps/{sweep}"));
    for r in &records {
        assert_eq!(r["schema_version"], 4, "{r}");
        let variant = r["variant"].as_str().unwrap_or_else(|| panic!("{r}"));
        assert_eq!(r["pass"], json!(variant == "hinted"), "{r}");
        // Each variant keeps its transcripts apart.
        assert_eq!(
            Path::new(r["session_path"].as_str().unwrap()),
            artifacts.join(format!(
                "{}/bad/{variant}/{}.jsonl",
                r["task"].as_str().unwrap(),
                r["trial"]
            )),
            "{r}"
        );
    }
    // The variant's settings reached the agent: the prompt text and the tool subset.
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .any(|b| b["system"].to_string().contains("HINT-42")
                && b["tools"].as_array().unwrap().len() == 3),
        "the read-only variant offered only its three tools"
    );
    assert!(
        requests
            .iter()
            .all(|b| b["tools"].as_array().unwrap().len() == 3
                || b["tools"].as_array().unwrap().len() == 6),
        "every other request offered every built-in tool"
    );

    let out = output(m.evals(&[
        "report", "--queue", &queue, "--sweep", &sweep, "--format", "json", "-k", "1",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let arms: Vec<(String, f64)> = report["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["variant"].as_str().unwrap().to_string(),
                m["metrics"][0]["value"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        arms,
        [
            ("control".to_string(), 0.0),
            ("hinted".to_string(), 1.0),
            ("hinted-readonly".to_string(), 0.0)
        ]
    );
    let variants = report["variants"].as_array().expect("variant comparisons");
    let hinted = variants
        .iter()
        .find(|c| c["variant"] == "hinted")
        .unwrap_or_else(|| panic!("{variants:?}"));
    assert_eq!(hinted["reference"], "control");
    assert_eq!(hinted["diff"], 1.0);
    assert_eq!(hinted["verdict"], "improvement");
    assert_eq!(hinted["tasks"], 2);
    let readonly = variants
        .iter()
        .find(|c| c["variant"] == "hinted-readonly")
        .unwrap();
    assert_eq!(readonly["diff"], 0.0);
    assert_eq!(readonly["verdict"], "no_significant_change");
    // Every task's difference is 0: no spread to size a detectable effect from.
    assert!(readonly["mde"].is_null(), "{readonly}");

    // The same command again the same day resumes the same sweep: nothing more to run.
    let out = output(m.evals(&["run", "--file", &file, "--queue", &queue]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("12 trials, 0 to run"),
        "{}",
        text(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_sweep_file_enqueues_nothing() {
    let server = hint_server().await;
    let m = Machine::new(&server).await;
    let queue = m.queue();
    let cases: [(&str, &str); 6] = [
        (
            "tasks = [\"../tasks/*\"]\nmodels = [\"bad\"]\ntrails = 2\n",
            "typo.toml:3: unknown field `trails`",
        ),
        (
            "tasks = [\"../tasks/*\"]\nmodels = [\"bad\"]\n\n[variants.fast]\nargs = [\"--turbo\"]\n",
            "fast.toml:4: variant fast: args:",
        ),
        (
            "tasks = [\"../tasks/*\"]\nmodels = [\"bad\"]\n\n[variants.open]\nargs = [\"--sandbox\", \"danger-full-access\"]\n",
            "variant open: args: --sandbox is set by the trial itself",
        ),
        (
            "tasks = [\"../tasks/*\"]\nmodels = [\"nosuch\"]\n",
            "'nosuch'",
        ),
        (
            "tasks = [\"../tasks/*\"]\ntags = [\"rust\"]\nmodels = [\"bad\"]\n",
            "has any of the tags rust",
        ),
        (
            "tasks = [\"../tasks/*\"]\nmodels = [\"bad\"]\nbaseline = \"nightly-19990101\"\n",
            "--baseline 'nightly-19990101' is not a file",
        ),
    ];
    let names = [
        "typo.toml",
        "fast.toml",
        "open.toml",
        "model.toml",
        "tags.toml",
        "baseline.toml",
    ];
    for ((body, wanted), name) in cases.iter().zip(names) {
        let file = sweep_file(&m, name, body);
        let out = output(m.evals(&["run", "--file", &file, "--queue", &queue]));
        assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(wanted),
            "{name}: wanted {wanted:?} in {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{name}: one line: {stderr}");
    }
    assert!(
        !Path::new(&queue).exists(),
        "nothing was enqueued: no queue was even made"
    );
    assert!(server.requests().is_empty());
}

/// Answers as two models: `claude-good` writes the answer every time, `claude-flaky` on every
/// other trial (its first requests alternate), so a run with one worker is deterministic.
async fn flaky_server() -> ScriptedServer {
    let first_requests = std::sync::atomic::AtomicUsize::new(0);
    ScriptedServer::answering(WireFormat::AnthropicMessages, move |body| {
        let usage = Usage {
            input: 40,
            output: 9,
        };
        let after_tool = body.to_string().contains("\"tool_result\"");
        let writes = match body["model"].as_str() {
            _ if after_tool => false,
            Some("claude-good") => true,
            _ => first_requests
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                .is_multiple_of(2),
        };
        let sse = if writes {
            support::write_answer()
        } else {
            anthropic_sse::text("Done.", usage)
        };
        Answer::sse(sse)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_trials_go_only_where_the_interval_is_wide() {
    let server = flaky_server().await;
    let m = Machine::new(&server).await;
    std::fs::write(
        m.path("cfg/anvil/config.toml"),
        format!(
            "[providers.mock]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"MOCK_API_KEY\"\n\n\
             [models.good]\nprovider = \"mock\"\nmodel = \"claude-good\"\n\n\
             [models.flaky]\nprovider = \"mock\"\nmodel = \"claude-flaky\"\n",
            server.uri()
        ),
    )
    .unwrap();
    let queue = m.queue();
    let tasks = m.path("evals/tasks/t1").display().to_string();
    // pass@3 cannot be estimated without bias past a first round of 2: refused up front.
    let out = output(m.evals(&[
        "run",
        "--tasks",
        &tasks,
        "--models",
        "good",
        "--trials",
        "2",
        "--target-ci-width",
        "0.6",
        "--max-trials",
        "6",
        "--queue",
        &queue,
        "-k",
        "1,3",
    ]));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("-k 3: an adaptive sweep"),
        "{}",
        text(&out)
    );
    assert!(!Path::new(&queue).exists(), "nothing enqueued");
    let out = output(m.evals(&[
        "run",
        "--tasks",
        &tasks,
        "--models",
        "good, flaky",
        "--trials",
        "2",
        "--target-ci-width",
        "0.6",
        "--max-trials",
        "6",
        "--sweep",
        "adaptive",
        "--queue",
        &queue,
        "-k",
        "1",
        "--baseline",
        "last:nightly-*",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no baseline yet, the report compares against nothing"),
        "the first nightly has nothing to compare against, and runs: {stderr}"
    );
    // Round 1: 2 trials each. good 2/2 (Wilson width 0.66) and flaky 1/2 go on; then good 4/4
    // (0.49) stops, flaky 2/4 (0.70) goes on to the cap of 6.
    assert!(
        stderr.contains("round 2: 4 more trials for 2 of 2 cells still wider than 0.6"),
        "{stderr}"
    );
    assert!(
        stderr.contains("round 3: 2 more trials for 1 of 2 cells still wider than 0.6"),
        "{stderr}"
    );
    let out = output(m.evals(&["export", "--queue", &queue, "--sweep", "adaptive"]));
    let records: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let count = |model: &str| records.iter().filter(|r| r["model"] == model).count();
    assert_eq!((count("good"), count("flaky")), (4, 6), "{records:?}");
    for r in &records {
        assert_eq!(
            r["adaptive"],
            json!({"round": 2, "target_ci_width": 0.6, "max_trials": 6}),
            "{r}"
        );
    }
    let out = output(m.evals(&[
        "report", "--queue", &queue, "--sweep", "adaptive", "--format", "json", "-k", "1",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["adaptive"]["max_trials"], 6, "the report says so");
    let flaky = report["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["model"] == "flaky")
        .unwrap()
        .clone();
    // 3 of 6 under this plan: the unbiased sequential estimate, not simply 0.5.
    let plan = anvil_report::adaptive::Design::new(2, 0.6, 6).unwrap();
    let expected = plan
        .estimate(anvil_report::Metric::PassAt(1), 6, 3)
        .unwrap();
    assert_eq!(flaky["metrics"][0]["value"].as_f64(), Some(expected));

    // A `run` stopped between rounds (here: its last round taken back out of the queue) leaves
    // a sweep that is not finished, whatever its trial states say.
    let db = anvil_runner::jobs::queue::Db::open(
        &anvil_runner::jobs::queue::QueueLocation::Sqlite(queue.clone().into()),
        2,
    )
    .await
    .unwrap();
    let anvil_runner::jobs::queue::Db::Sqlite(pool) = &db else {
        unreachable!()
    };
    sqlx::query("DELETE FROM anvil_trials WHERE model = 'flaky' AND trial >= 4")
        .execute(pool)
        .await
        .unwrap();
    for trial in [4, 5] {
        sqlx::query("DELETE FROM Jobs WHERE idempotency_key = $1")
            .bind(format!("adaptive\u{1f}t1\u{1f}flaky\u{1f}{trial}"))
            .execute(pool)
            .await
            .unwrap();
    }
    db.close().await;
    let out = output(m.evals(&["sweeps", "--queue", &queue]));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("rounds pending"),
        "{}",
        text(&out)
    );
    let out = output(m.evals(&[
        "report", "--queue", &queue, "--sweep", "adaptive", "-k", "1",
    ]));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("1 task cell(s) did not end where the adaptive design stops"),
        "{}",
        text(&out)
    );
    // Resuming runs the missing round.
    let out = output(m.evals(&[
        "run",
        "--tasks",
        &tasks,
        "--models",
        "good,flaky",
        "--trials",
        "2",
        "--target-ci-width",
        "0.6",
        "--max-trials",
        "6",
        "--sweep",
        "adaptive",
        "--queue",
        &queue,
        "-k",
        "1",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("2 more trials for 1 of 2 cells"),
        "{}",
        text(&out)
    );
    let out = output(m.evals(&["sweeps", "--queue", &queue]));
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("rounds pending"),
        "{}",
        text(&out)
    );
}
