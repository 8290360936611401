//! The command line.

use std::path::PathBuf;

use anvil_agent::permissions::PermissionMode;
use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Parser, ValueEnum};

const EXAMPLES: &str = "\
Examples:
  anvil                                   start an interactive session in this directory
  anvil -m local                          ... on the model aliased `local` in your config
  anvil -p \"fix the failing test\"         run one turn headless and print the answer
  git diff | anvil -p \"review this diff\"  stdin is appended to the prompt
  anvil -p \"list the TODOs\" --output-format json | jq .outcome
  anvil -p \"run the tests\" --output-format stream-json --max-steps 20
  anvil -m ollama:qwen3:8b -C ~/src/project
  anvil --continue                        continue this directory's latest session
  anvil -p \"and now the docs\" --resume ID continue session ID headless (multi-turn scripts)
  anvil sessions                          this directory's sessions, newest first
  anvil replay ID                         a session (or any session file) printed readably

Sessions are kept as JSONL under the data directory's sessions/ (one file per session, the
file name is the session id); `--output-format json` carries the id as session_id.

Models are aliases from ~/.config/anvil/config.toml (e.g. sonnet) or provider:model
(e.g. ollama:qwen3:8b). Logs go to the data directory's logs/anvil.log when ANVIL_LOG is set
(e.g. ANVIL_LOG=debug), never to the terminal.";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// The final answer as plain text.
    Text,
    /// One JSON object: outcome, final text, usage, steps.
    Json,
    /// One JSON event per line as the turn runs; the last line is always turn_finished.
    StreamJson,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxMode {
    /// Commands may write only inside the workspace (not .git or .anvil), without network.
    WorkspaceWrite,
    /// Like workspace-write, with network.
    WorkspaceWriteNetwork,
    /// Commands may write nothing.
    ReadOnly,
    /// No sandbox: commands run with your full rights. Only by this explicit choice.
    FullAccess,
}

/// `--permission-mode`: the agent's own modes, their names and help lines from the agent crate
/// (clap's `ValueEnum` cannot be derived on a type of another crate).
fn permission_modes() -> impl TypedValueParser<Value = PermissionMode> {
    PossibleValuesParser::new(
        PermissionMode::ALL.map(|mode| PossibleValue::new(mode.name()).help(mode.summary())),
    )
    .try_map(|name| name.parse::<PermissionMode>())
}

#[derive(Debug, Parser)]
#[command(
    name = "anvil",
    version,
    about = "A coding agent for your terminal.",
    long_about = "A coding agent for your terminal. Without -p it starts an interactive session; \
                  with -p it runs one turn headless, for scripts.",
    after_help = "Run `anvil --help` for examples and the exit codes.",
    after_long_help = long_help(),
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Continue this directory's most recent session.
    #[arg(short = 'c', long = "continue", conflicts_with = "resume")]
    pub continue_latest: bool,

    /// Continue session ID (or the session file at a path) of this directory.
    #[arg(short = 'r', long, value_name = "ID")]
    pub resume: Option<String>,

    /// Run one turn headless with this prompt and exit (stdin, if piped, is appended).
    #[arg(short = 'p', long = "print", value_name = "PROMPT")]
    pub print: Option<String>,

    /// The model: an alias from config (sonnet) or provider:model (ollama:qwen3:8b).
    #[arg(short, long, value_name = "MODEL")]
    pub model: Option<String>,

    /// What headless mode prints on stdout.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text, requires = "print")]
    pub output_format: OutputFormat,

    /// Stop a turn after this many model requests.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_steps: Option<u32>,

    /// A hard budget in USD for this process's model requests: each request is sent only if
    /// its reserved cost (estimated input + the whole output limit) fits what is left, else the
    /// turn stops `budget_exceeded` (exit 7) before spending. Needs the model's pricing.
    #[arg(long, value_name = "USD", value_parser = usd, allow_hyphen_values = true)]
    pub max_cost_usd: Option<f64>,

    /// Append TEXT to the system prompt, after the project's instructions.
    #[arg(long, value_name = "TEXT")]
    pub append_system_prompt: Option<String>,

    /// Offer the model only these built-in tools (comma-separated, e.g. read_file,grep,bash);
    /// MCP servers' tools are not affected. An unknown name is an error listing the tools.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub tools: Option<Vec<String>>,

    /// Work in this directory instead of the current one.
    #[arg(short = 'C', long = "cwd", value_name = "DIR")]
    pub cwd: Option<PathBuf>,

    /// What shell commands may do. Needs bubblewrap on Linux; without it commands fail
    /// (they never silently run unconfined) unless you choose full-access.
    #[arg(long, value_enum, default_value_t = SandboxMode::WorkspaceWrite)]
    pub sandbox: SandboxMode,

    /// Which tool calls run without approval. The interactive session asks about the rest;
    /// headless, the rest is denied.
    #[arg(long, value_parser = permission_modes(), default_value_t = PermissionMode::Default)]
    pub permission_mode: PermissionMode,

    /// For eval workers: run with exactly the model and sandbox settings in FILE (a
    /// `contract::TrialConfig` as JSON) and read no config file at all — neither the user's nor
    /// the workspace's `.anvil/config.toml`.
    #[arg(
        long,
        value_name = "FILE",
        hide = true,
        requires = "print",
        conflicts_with = "model"
    )]
    pub pinned_config: Option<PathBuf>,
}

/// Subcommands: reading sessions.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// List this directory's sessions, newest first: id, age, model, prompts, cost, first
    /// prompt. Only the newest 20 are read unless --all.
    Sessions {
        /// List every session, however many (each file is read to show it).
        #[arg(long)]
        all: bool,
    },
    /// Print a session readably: messages, tool calls with their arguments, results (long
    /// ones collapsed), usage per response.
    Replay {
        /// A session id of this directory, or the path of any session file (a trial's
        /// transcript, say).
        session: String,
        /// `text` to read, `json` for the canonical messages.
        #[arg(long, value_enum, default_value_t = ReplayFormat::Text)]
        format: ReplayFormat,
    },
    /// MCP servers: list them, call one tool, or run the conformance suite's client side.
    Mcp {
        #[command(subcommand)]
        command: McpCommand,
    },
    /// Turn a spec into working software across many agent sessions, each a job on the queue;
    /// the harness, never the model, decides what passes and what lands on the run branch.
    #[command(after_long_help = crate::auto::run_state::EXIT_TABLE)]
    Auto {
        #[command(subcommand)]
        command: AutoCommand,
    },
}

/// `anvil mcp …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum McpCommand {
    /// Start every configured server and print one line per server: name, state (connected,
    /// failed, disabled) and its tool count or why it failed. Exit 1 if any failed.
    List,
    /// Call one tool of one server and print its result (for debugging a server).
    Call {
        /// The server's name (`[mcp_servers.NAME]`).
        server: String,
        /// The tool's name as the server lists it (not the mcp__ name).
        tool: String,
        /// The arguments, a JSON object.
        #[arg(long, default_value = "{}", value_name = "JSON")]
        args: String,
    },
    /// The entry point of the MCP conformance suite (`conformance client --command "anvil mcp
    /// conformance"`): connect to URL over streamable HTTP, list the tools, call each, accept
    /// elicitations with their defaults, close the session.
    Conformance {
        /// The scenario server's URL.
        url: String,
    },
}

/// `anvil auto …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum AutoCommand {
    /// Start a run of SPEC in this git checkout, or resume this spec's unfinished run.
    ///
    /// Prints the run id. Without --detach, runs its sessions here until the run ends.
    #[command(after_long_help = crate::auto::run_state::EXIT_TABLE)]
    Run {
        /// The spec: what to build, in prose.
        spec: PathBuf,
        #[command(flatten)]
        queue: AutoQueue,
        #[command(flatten)]
        settings: AutoSettings,
        /// Enqueue and exit: `anvil-evals worker` (any machine on the queue) runs the sessions.
        #[arg(long)]
        detach: bool,
    },
    /// Run only the initializer: write and check the contract, then stop before any worker.
    ///
    /// Prints the run id, runs the initializer session (`features.json`, each check failing
    /// before any work) and stops once the contract is accepted on the run branch. Read it
    /// there (`git show auto/RUN:features.json`); `anvil auto run SPEC` then starts the worker
    /// sessions of the same run. Exit 0 when the contract is accepted (or was already), else
    /// the run's terminal state's code.
    #[command(after_long_help = crate::auto::run_state::EXIT_TABLE)]
    Init {
        /// The spec: what to build, in prose.
        spec: PathBuf,
        #[command(flatten)]
        queue: AutoQueue,
        #[command(flatten)]
        settings: AutoSettings,
    },
    /// Runs, or one run's sessions: kind, attempt, state, cost, verified delta, commit.
    Status {
        run: Option<String>,
        #[command(flatten)]
        queue: AutoQueue,
    },
    /// A run's report: terminal state, features verified, false claims, rejected edits,
    /// regressions, sessions with their transcripts.
    Report {
        run: String,
        #[command(flatten)]
        queue: AutoQueue,
        #[arg(long)]
        json: bool,
    },
    /// Write finished runs as trial records, for `anvil-evals report`.
    ///
    /// JSONL, one record per run: task = the spec's name, trial = its place among that spec's
    /// runs with the model, pass = the run ended complete; infra_failed and cancelled runs
    /// are infrastructure errors, never fails. Runs still running are left out.
    Export {
        /// Only these runs (default: every finished run in the queue).
        runs: Vec<String>,
        #[command(flatten)]
        queue: AutoQueue,
        /// The records' sweep name (what `report --baseline` pairs by).
        #[arg(long, default_value = "auto", value_name = "NAME")]
        sweep: String,
        /// Write to FILE instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Cancel a run: its running session's process group is killed.
    Cancel {
        run: String,
        #[command(flatten)]
        queue: AutoQueue,
    },
    /// Resume a run (with larger limits, a limited one continues).
    #[command(after_long_help = crate::auto::run_state::EXIT_TABLE)]
    Resume {
        run: String,
        #[command(flatten)]
        queue: AutoQueue,
        #[arg(long, value_name = "N")]
        max_sessions: Option<u32>,
        #[arg(long, value_name = "USD", value_parser = usd, allow_hyphen_values = true)]
        max_cost_usd: Option<f64>,
        #[arg(long)]
        detach: bool,
    },
}

/// What a new run is given: its model and limits (recorded with the run; a resumed run keeps
/// its own).
#[derive(Debug, Clone, clap::Args)]
pub struct AutoSettings {
    /// Worker sessions at most (not counting the initializer or retried attempts).
    #[arg(long, value_name = "N")]
    pub max_sessions: Option<u32>,
    /// A hard budget in USD: a session whose reserved estimate does not fit never starts.
    #[arg(long, value_name = "USD", value_parser = usd, allow_hyphen_values = true)]
    pub max_cost_usd: Option<f64>,
    /// The model: an alias from your config or provider:model (default: your default).
    #[arg(short, long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Merge a session that breaks a verified feature when it verifies more.
    #[arg(long)]
    pub allow_regressions: bool,
    /// Model requests per session at most.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub max_steps: u32,
    /// Wall-clock seconds per session at most.
    #[arg(long, value_name = "SECS", default_value_t = 1800)]
    pub session_timeout_secs: u64,
}

/// The queue a run lives on.
#[derive(Debug, Clone, clap::Args)]
pub struct AutoQueue {
    /// The queue database: a SQLite file or postgres://… (default: anvil.db in the data dir).
    #[arg(long, value_name = "URL")]
    pub queue: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReplayFormat {
    Text,
    Json,
}

/// What `--help` shows after the options: examples, then the exit codes.
fn long_help() -> String {
    format!("{EXAMPLES}\n\n{}", crate::exit::TABLE)
}

/// A budget in USD from the command line: a finite, non-negative number (`0.50`, `2`).
pub fn usd(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(_) => Err(format!("{text}: a budget is a non-negative amount of USD")),
        Err(_) => Err(format!("{text}: not an amount of USD (write it as 0.50)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("anvil").chain(args.iter().copied()))
    }

    #[test]
    fn permission_mode_takes_every_mode_by_its_name() {
        assert_eq!(parse(&[]).unwrap().permission_mode, PermissionMode::Default);
        for mode in PermissionMode::ALL {
            let cli = parse(&["--permission-mode", mode.name()]).unwrap();
            assert_eq!(cli.permission_mode, mode);
        }
    }

    #[test]
    fn an_unknown_permission_mode_lists_the_modes() {
        let err = parse(&["--permission-mode", "yolo"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("invalid value 'yolo' for '--permission-mode <PERMISSION_MODE>'")
                && err.contains("[possible values: plan, default, accept-edits, bypass]"),
            "{err}"
        );
    }

    #[test]
    fn help_explains_every_permission_mode() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        for mode in PermissionMode::ALL {
            let prefix = format!("- {}:", mode.name());
            let line = help.lines().find(|l| l.trim_start().starts_with(&prefix));
            assert_eq!(
                line.and_then(|l| l.trim_start().strip_prefix(&prefix))
                    .map(str::trim_start),
                Some(mode.summary()),
                "{help}"
            );
        }
        assert!(help.contains("[default: default]"), "{help}");
    }
}
