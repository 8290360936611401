//! `anvil auto` end to end, the scripted scenario suite of issue 16: the real `anvil auto run`
//! (its in-process worker, the real orchestrator, `anvil -p` children, git and the sandboxed
//! verify step) driven by a scripted model — the only double — on tiny specs whose features
//! are shell-verifiable files (F001: a.txt holds A, F002: b.txt holds B, …). Each scenario
//! asserts the validator's events, the terminal state and exit code, the run branch's log and
//! the metrics of `anvil auto report RUN --json`.
//!
//! - [`happy`]: the happy path (SQLite, Postgres), two runs in one repository;
//! - [`integrity`]: what a session cannot get past the harness — false claims and "promise
//!   COMPLETE", a tampered contract, edited, deleted or skipped protected tests, a broken
//!   earlier feature, `reset --hard` and moved branches;
//! - [`crash`]: `kill -9` mid-session, during the initializer, and between the verdict and
//!   the merge;
//! - [`stopping`]: vacuous checks at init, the no-progress spin, `--max-sessions`, the exact
//!   budget, a provider outage (which must not end a run), a refused credential (which must),
//!   `anvil auto cancel`.
//!
//! The model's behaviour in a scenario is a [`Script`]: what the initializer writes (a
//! [`Project`]'s contract and files) and what each worker session does ([`Turn`] → tool
//! calls), with [`honest`] the default worker.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

mod crash;
mod happy;
mod integrity;
mod stopping;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

use anvil_test_support::bins;
use anvil_test_support::home::Home;
use anvil_test_support::model_server::{Answer, ScriptedServer, WireFormat, wire};
use anvil_test_support::sweep as support;

/// The spec of the two-feature project.
pub const SPEC: &str = "Two files: a.txt holding A, b.txt holding B.\n";

/// What implements each feature the projects use: the file and what it must hold.
const IMPLEMENTATIONS: &[(&str, &str, &str)] = &[
    ("F001", "a.txt", "A"),
    ("F002", "b.txt", "B"),
    ("F003", "c.txt", "C"),
    ("G001", "x.txt", "X"),
    ("G002", "y.txt", "Y"),
];

/// The file implementing feature `id` and its content.
pub fn implementation(id: &str) -> (&'static str, &'static str) {
    IMPLEMENTATIONS
        .iter()
        .find(|(i, _, _)| *i == id)
        .map(|(_, file, content)| (*file, *content))
        .unwrap_or_else(|| panic!("no implementation of {id}"))
}

/// A spec and what the scripted initializer writes for it: `features.json` and other files
/// (the protected tests).
#[derive(Debug, Clone)]
pub struct Project {
    pub spec: String,
    /// `features.json` as the initializer writes it (`spec_digest` empty).
    contract: Value,
    files: Vec<(String, String)>,
}

impl Project {
    /// Features `ids`, each verified by a shell test of its file; `tests/` protected.
    pub fn new(spec: &str, ids: &[&str]) -> Project {
        let features: Vec<Value> = ids
            .iter()
            .map(|id| {
                let (file, content) = implementation(id);
                json!({"id": id, "description": format!("{file} holds {content}"),
                       "steps": [format!("write {file}")],
                       "verify": {"cmd": format!("test \"$(cat {file})\" = {content}"), "timeout_s": 30},
                       "passes": false})
            })
            .collect();
        Project {
            spec: spec.to_string(),
            contract: json!({"version": 1, "spec_digest": "", "test_command": "true",
                             "protected": ["tests/"], "features": features}),
            files: Vec::new(),
        }
    }

    /// F001 and F002 of [`SPEC`].
    pub fn two() -> Project {
        Project::new(SPEC, &["F001", "F002"])
    }

    /// Feature `id` verified by `cmd` instead.
    pub fn verify(mut self, id: &str, cmd: &str) -> Project {
        for f in self.contract["features"].as_array_mut().unwrap() {
            if f["id"] == id {
                f["verify"]["cmd"] = json!(cmd);
            }
        }
        self
    }

    /// The initializer writes `path` holding `content` too.
    pub fn file(mut self, path: &str, content: &str) -> Project {
        self.files.push((path.into(), content.into()));
        self
    }

    pub fn ids(&self) -> Vec<String> {
        self.contract["features"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_str().unwrap().to_string())
            .collect()
    }

    /// `features.json` as the initializer writes it.
    pub fn contract_text(&self) -> String {
        serde_json::to_string_pretty(&self.contract).unwrap()
    }

    /// The contract as the harness accepted it: with the spec's digest, which a model editing
    /// the file keeps.
    pub fn accepted(&self) -> Value {
        let mut c = self.contract.clone();
        c["spec_digest"] = json!(anvil_runner::auto::contract::spec_digest(
            self.spec.as_bytes()
        ));
        c
    }

    /// `features.json` as a worker writes it: the accepted contract with `passes` true for
    /// what the status block in `prompt` lists as verified, and for `claim`.
    pub fn claiming(&self, prompt: &str, claim: &[&str]) -> String {
        let verified = verified(prompt);
        let mut c = self.accepted();
        for f in c["features"].as_array_mut().unwrap() {
            let id = f["id"].as_str().unwrap().to_string();
            if verified.contains(&id) || claim.contains(&id.as_str()) {
                f["passes"] = json!(true);
            }
        }
        c.to_string()
    }

    /// Whether a session's first request is about this project.
    fn owns(&self, prompt: &str) -> bool {
        prompt.contains(self.spec.trim()) || prompt.contains(&format!("- {}:", self.ids()[0]))
    }
}

/// The features the status block of `prompt` lists as verified.
pub fn verified(prompt: &str) -> Vec<String> {
    let section = prompt
        .split("Verified (")
        .nth(1)
        .and_then(|s| s.split("Failing (").next())
        .unwrap_or("");
    ids_listed(section)
}

/// The features the status block of `prompt` lists as failing, in order.
pub fn failing(prompt: &str) -> Vec<String> {
    let section = prompt
        .split("Failing (")
        .nth(1)
        .and_then(|s| s.split("Last session:").next())
        .unwrap_or("");
    ids_listed(section)
}

fn ids_listed(section: &str) -> Vec<String> {
    section
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .filter_map(|l| l.split(':').next())
        .filter(|id| id.len() == 4)
        .map(str::to_string)
        .collect()
}

/// A tool call: (id, tool, input).
pub type Call = (String, String, Value);

/// A new file.
pub fn write(path: &str, content: &str) -> Call {
    (
        format!("toolu_write_{}", path.replace(['/', '.'], "_")),
        "write_file".into(),
        json!({"file_path": path, "content": content}),
    )
}

/// A shell command.
pub fn bash(id: &str, command: &str) -> Call {
    (
        format!("toolu_bash_{id}"),
        "bash".into(),
        json!({"command": command}),
    )
}

/// Overwrites `path` through the shell (write_file refuses a file the model has not read).
pub fn overwrite(path: &str, content: &str) -> Call {
    assert!(!content.contains("ANVIL_EOF"));
    bash(
        &path.replace(['/', '.'], "_"),
        &format!("cat > {path} <<'ANVIL_EOF'\n{content}\nANVIL_EOF"),
    )
}

/// Implements feature `id`.
pub fn implement(id: &str) -> Call {
    let (file, content) = implementation(id);
    overwrite(file, content)
}

/// One worker session's first request, as the scripted model sees it.
pub struct Turn<'a> {
    pub project: &'a Project,
    pub prompt: &'a str,
    /// This project's worker first requests so far, this one included (1 for the first; every
    /// attempt counts).
    pub n: usize,
}

impl Turn<'_> {
    /// `features.json` claiming `ids` (and keeping what is verified).
    pub fn claim(&self, ids: &[&str]) -> Call {
        overwrite("features.json", &self.project.claiming(self.prompt, ids))
    }

    pub fn first_failing(&self) -> Option<String> {
        failing(self.prompt).into_iter().next()
    }
}

/// The honest worker: implements the first failing feature, claims it and stops; with
/// nothing failing it writes a progress note.
pub fn honest(turn: &Turn) -> Vec<Call> {
    match turn.first_failing() {
        Some(id) => vec![implement(&id), turn.claim(&[id.as_str()])],
        None => vec![overwrite("progress.md", "nothing left")],
    }
}

/// The initializer: writes the project's contract and files.
pub fn initialize(turn: &Turn) -> Vec<Call> {
    let mut calls = vec![write("features.json", &turn.project.contract_text())];
    for (path, content) in &turn.project.files {
        calls.push(write(path, content));
    }
    calls
}

/// What the scripted server saw in a request, for [`Script::serve_with`].
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    pub initializer: bool,
    /// A session's later request (it carries a tool result).
    pub after_tool: bool,
    /// This project's first requests of this kind so far, this one included (for a later
    /// request: its session's).
    pub n: usize,
}

type Worker = dyn Fn(&Turn) -> Vec<Call> + Send + Sync;

/// The scripted model of a scenario.
pub struct Script {
    projects: Vec<Project>,
    worker: Box<Worker>,
    initializer: Box<Worker>,
    counts: Mutex<HashMap<(usize, bool), usize>>,
}

/// What every session says at its end, whatever it did: never evidence of anything.
pub const FINAL_TEXT: &str = "All done: every feature passes. <promise>COMPLETE</promise>";

impl Script {
    /// `project`'s initializer, honest workers.
    pub fn new(project: Project) -> Script {
        Script::projects(vec![project])
    }

    pub fn projects(projects: Vec<Project>) -> Script {
        Script {
            projects,
            worker: Box::new(honest),
            initializer: Box::new(initialize),
            counts: Mutex::new(HashMap::new()),
        }
    }

    pub fn worker(mut self, f: impl Fn(&Turn) -> Vec<Call> + Send + Sync + 'static) -> Script {
        self.worker = Box::new(f);
        self
    }

    pub fn initializer(mut self, f: impl Fn(&Turn) -> Vec<Call> + Send + Sync + 'static) -> Script {
        self.initializer = Box::new(f);
        self
    }

    fn answer(&self, body: &Value) -> (Seen, Answer) {
        let format = WireFormat::AnthropicMessages;
        let prompt = first_user_text(body);
        let after_tool = body.to_string().contains("\"tool_result\"");
        let initializer = prompt.contains("You are the initializer");
        let project = self
            .projects
            .iter()
            .position(|p| p.owns(&prompt))
            .unwrap_or_else(|| panic!("no project owns the request: {prompt}"));
        let n = {
            let mut counts = self.counts.lock().unwrap();
            let n = counts.entry((project, initializer)).or_insert(0);
            if !after_tool {
                *n += 1;
            }
            *n
        };
        let seen = Seen {
            initializer,
            after_tool,
            n,
        };
        if after_tool {
            return (seen, Answer::sse(wire::text(format, FINAL_TEXT, usage())));
        }
        let turn = Turn {
            project: &self.projects[project],
            prompt: &prompt,
            n,
        };
        let calls = if initializer {
            (self.initializer)(&turn)
        } else {
            (self.worker)(&turn)
        };
        let calls: Vec<(&str, &str, Value)> = calls
            .iter()
            .map(|(id, name, input)| (id.as_str(), name.as_str(), input.clone()))
            .collect();
        (seen, Answer::sse(wire::tool_calls(format, &calls, usage())))
    }

    pub async fn serve(self) -> ScriptedServer {
        self.serve_with(|_, answer| answer).await
    }

    /// Serves the script, every answer passed through `wrap` (to delay it, or to answer an
    /// error instead).
    pub async fn serve_with(
        self,
        wrap: impl Fn(Seen, Answer) -> Answer + Send + Sync + 'static,
    ) -> ScriptedServer {
        ScriptedServer::answering(WireFormat::AnthropicMessages, move |body| {
            let (seen, answer) = self.answer(body);
            wrap(seen, answer)
        })
        .await
    }
}

/// Every request's usage: a session of two requests costs $0.00051 at the config's pricing
/// ($3 in, $15 out per million tokens).
pub fn usage() -> wire::Usage {
    wire::Usage {
        input: 40,
        output: 9,
    }
}

/// What one session (two requests) costs, in USD.
pub const SESSION_USD: f64 = 2.0 * (40.0 * 3.0 + 9.0 * 15.0) / 1_000_000.0;

/// The text of the first user message of a request.
pub fn first_user_text(body: &Value) -> String {
    let content = &body["messages"][0]["content"];
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The first requests of the worker sessions `server` answered, in order (one per attempt).
pub fn worker_prompts(server: &ScriptedServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .filter(|r| !r.to_string().contains("\"tool_result\""))
        .map(first_user_text)
        .filter(|t| t.contains("You are a worker session"))
        .collect()
}

/// A user's machine: a home with the scripted model's config and a checkout with specs.
pub struct Machine {
    pub home: Home,
    pub repo: PathBuf,
    pub queue: String,
}

impl Machine {
    /// A checkout holding SPEC.md ([`SPEC`]); the queue a SQLite file in the home unless given.
    pub fn new(server: &ScriptedServer, queue: Option<String>) -> Machine {
        Machine::with_specs(server, queue, &[("SPEC.md", SPEC)])
    }

    pub fn with_specs(
        server: &ScriptedServer,
        queue: Option<String>,
        specs: &[(&str, &str)],
    ) -> Machine {
        let home = Home::new();
        home.write_config(&support::config(server));
        let mut files = vec![("README.md", "# project\n")];
        files.extend_from_slice(specs);
        let repo = home.git_repo("project", &files);
        let queue =
            queue.unwrap_or_else(|| home.path().join("data/queue.db").display().to_string());
        Machine { home, repo, queue }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c: Command = self.home.command(bins::built("anvil"));
        c.arg("auto")
            .args(args)
            .arg("--queue")
            .arg(&self.queue)
            .env("TMPDIR", self.home.path())
            .current_dir(&self.repo);
        c
    }

    /// `anvil auto ARGS --queue QUEUE` in the checkout, to its end.
    pub fn anvil(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// `anvil auto ARGS` in the background, its stdout piped (the run id is its first line).
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `anvil auto run SPEC.md --detach ARGS`: the run's id (the run is created, its first
    /// job queued, nothing run).
    pub fn detached(&self, args: &[&str]) -> String {
        let mut all = vec!["run", "SPEC.md", "--detach"];
        all.extend_from_slice(args);
        let out = self.anvil(&all);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        run_id(&out)
    }

    pub fn report(&self, run: &str) -> Value {
        let out = self.anvil(&["report", run, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    pub fn git_out(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(&self.repo)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The subjects of the run branch's commits, newest first.
    pub fn log(&self, run: &str) -> Vec<String> {
        self.git_out(&["log", "--format=%s", &format!("auto/{run}")])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// `path` at the run branch's head.
    pub fn show(&self, run: &str, path: &str) -> String {
        self.git_out(&["show", &format!("auto/{run}:{path}")])
    }

    /// The features `passes` on the run branch says the harness verified.
    pub fn passing(&self, run: &str) -> Vec<String> {
        let features: Value = serde_json::from_str(&self.show(run, "features.json")).unwrap();
        features["features"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["passes"] == json!(true))
            .map(|f| f["id"].as_str().unwrap().to_string())
            .collect()
    }

    /// The run's data directory.
    pub fn data(&self, run: &str) -> PathBuf {
        self.home.path().join(format!("data/anvil/auto/{run}"))
    }

    /// The user's checkout is as it was: HEAD, a clean status, no stash.
    pub fn assert_checkout_untouched(&self, head: &str) {
        assert_eq!(self.git_out(&["status", "--porcelain"]), "");
        assert_eq!(self.git_out(&["rev-parse", "HEAD"]), head);
        assert_eq!(self.git_out(&["stash", "list"]), "");
    }
}

pub fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn run_id(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The run id a spawned `anvil auto run|resume` printed first.
pub fn child_run_id(child: &mut Child) -> String {
    use std::io::BufRead;
    let stdout = child.stdout.as_mut().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap();
    if line.trim().is_empty() {
        // It ended before printing a run id: say why, not "no such run" later.
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            std::io::Read::read_to_string(&mut e, &mut stderr).unwrap();
        }
        let status = child.wait().unwrap();
        panic!("anvil auto printed no run id ({status}): {stderr}");
    }
    line.trim().to_string()
}

/// A worker whose first session makes the `cheat` calls before its honest work; the later
/// sessions are honest.
pub fn cheating_first(project: Project, cheat: Vec<Call>) -> Script {
    Script::new(project).worker(move |turn| {
        let mut calls = if turn.n == 1 {
            cheat.clone()
        } else {
            Vec::new()
        };
        calls.extend(honest(turn));
        calls
    })
}

/// `anvil auto run SPEC.md ARGS` to its end: its output, the run id and the run's report.
pub fn run_and_report(m: &Machine, args: &[&str]) -> (Output, String, Value) {
    let mut all = vec!["run", "SPEC.md"];
    all.extend_from_slice(args);
    let out = m.anvil(&all);
    let run = run_id(&out);
    let report = m.report(&run);
    (out, run, report)
}

/// `kill -9` of a spawned process, reaped.
pub fn kill_9(child: &mut Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.wait();
}

/// The pids of live processes whose command line names a path under `dir`.
pub fn processes_naming(dir: &Path) -> Vec<i32> {
    anvil_test_support::procs::naming(&dir.to_string_lossy())
}

/// The report's sessions as (session, attempt, state).
pub fn rows(report: &Value) -> Vec<(i64, i64, String)> {
    report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["session"].as_i64().unwrap(),
                s["attempt"].as_i64().unwrap(),
                s["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `rows` from literals.
pub fn expect_rows(rows: &[(i64, i64, &str)]) -> Vec<(i64, i64, String)> {
    rows.iter()
        .map(|(s, a, st)| (*s, *a, st.to_string()))
        .collect()
}

/// A validator event list of the report (`false_claims`, `regressions`, …) as (the event's
/// `field` value, session).
pub fn events(report: &Value, key: &str, field: &str) -> Vec<(String, i64)> {
    report[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {report:#}"))
        .iter()
        .map(|e| {
            (
                e[field].as_str().unwrap_or_default().to_string(),
                e["session"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The flags of the report's row of (session, attempt).
pub fn flags(report: &Value, session: i64, attempt: i64) -> Vec<String> {
    report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session"] == session && s["attempt"] == attempt)
        .unwrap_or_else(|| panic!("no s{session}a{attempt} in {report:#}"))["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect()
}

/// The run's events of `kind` straight from the queue database (SQLite), payloads parsed,
/// with their session.
pub async fn db_events(queue: &str, run: &str, kind: &str) -> Vec<(Value, i64)> {
    use sqlx::Row;
    let url = format!("sqlite://{queue}");
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let rows = sqlx::query(
        "SELECT payload, session FROM auto_events WHERE run = ?1 AND kind = ?2 ORDER BY id",
    )
    .bind(run)
    .bind(kind)
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    rows.iter()
        .map(|r| {
            let payload: String = r.get(0);
            (serde_json::from_str(&payload).unwrap(), r.get(1))
        })
        .collect()
}

/// Waits (at most `limit`) for `what` to hold.
pub fn wait_for(limit: Duration, what: &str, check: impl FnMut() -> bool) {
    let mut check = check;
    anvil_test_support::poll::poll_until(limit, what, || check().then_some(()));
}

/// Whether `path` exists (not following a last symlink).
pub fn exists(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}

/// The pids of the processes whose command line holds every one of `parts`.
fn pids_running(parts: &[&str]) -> Vec<i32> {
    anvil_test_support::procs::running(parts)
}
