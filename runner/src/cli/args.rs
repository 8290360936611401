//! The command line.

use std::path::PathBuf;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PermissionMode {
    /// Read-only exploration: no edits, no commands.
    Plan,
    /// Ask before edits and commands.
    Default,
    /// Edits inside the workspace are allowed; commands still ask.
    AcceptEdits,
    /// No prompts (the OS sandbox still applies).
    Bypass,
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

    /// Work in this directory instead of the current one.
    #[arg(short = 'C', long = "cwd", value_name = "DIR")]
    pub cwd: Option<PathBuf>,

    /// What shell commands may do. Needs bubblewrap on Linux; without it commands fail
    /// (they never silently run unconfined) unless you choose full-access.
    #[arg(long, value_enum, default_value_t = SandboxMode::WorkspaceWrite)]
    pub sandbox: SandboxMode,

    /// Which tool calls run without approval. The interactive session asks about the rest;
    /// headless, the rest is denied.
    #[arg(long, value_enum, default_value_t = PermissionMode::Default)]
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

/// What `--help` shows after the options: examples, then the exit codes.
fn long_help() -> String {
    format!("{EXAMPLES}\n\n{}", crate::exit::TABLE)
}
