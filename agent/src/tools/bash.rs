//! `bash`: run a shell command under the process supervisor.

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use std::sync::Arc;

use crate::process::{self, ProcessSpec, Termination};
use crate::sandbox::Sandbox;
use crate::secrets::{ChildEnv, Redactor};
use crate::tool::{Cancellation, Effects, ToolContext, ToolError, TypedTool};

pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
pub const MAX_TIMEOUT_MS: u64 = 600_000;
/// Bytes kept from the start and the end of each stream: both streams together stay under the
/// registry's 30,000-character result cap, so the supervisor's own cut note (with the exact
/// byte count) is the one the model sees.
pub const CAPTURE_BYTES: usize = 7 * 1024;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    /// The command, run with `bash -c`.
    pub command: String,
    /// Kill the command (and everything it started) after this many milliseconds. Default
    /// 120000, at most 600000.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

pub struct Bash {
    env: ChildEnv,
    /// Every command runs inside it; the model has no argument that widens it.
    sandbox: Arc<Sandbox>,
    /// Applied to the output as it is read, before the capture cuts it to a head and a tail.
    redactor: Option<Arc<Redactor>>,
}

impl Bash {
    pub fn new(env: ChildEnv, sandbox: Arc<Sandbox>) -> Self {
        Self {
            env,
            sandbox,
            redactor: None,
        }
    }

    /// Redacts the command's output while it is read: the registry's redaction of the result
    /// comes after the capture has cut the middle out, too late for a secret straddling a cut.
    pub fn with_redactor(mut self, redactor: Arc<Redactor>) -> Self {
        self.redactor = Some(redactor);
        self
    }
}

#[async_trait::async_trait]
impl TypedTool for Bash {
    type Args = BashArgs;
    const NAME: &'static str = "bash";
    const EFFECTS: Effects = Effects::SUBPROCESS;
    const CANCELLATION: Cancellation = Cancellation::KillsProcesses;

    fn description(&self) -> &str {
        "Run a shell command in the working directory with `bash -c` and get its exit code, \
         stdout and stderr. Use it to build, run tests, use git and run project scripts. Each \
         call starts a fresh shell: `cd`, variables and background jobs do not carry over, so \
         chain dependent steps with && in one command. Anything the command leaves running in \
         the background is killed when it returns. There is no stdin: interactive programs will \
         not work. Do not use it to read, search or edit files — read_file, glob, grep and \
         edit_file are faster, safer and their output is shaped for you. Long output keeps its \
         beginning and end. The default timeout is 2 minutes (timeout_ms, at most 10 minutes); \
         a non-zero exit code is reported, not treated as a failure of the tool. It runs in a \
         sandbox: it can write only inside the workspace (not .git or .anvil), has no network \
         unless the user allowed it, and cannot see the credential stores outside the workspace \
         (~/.ssh, cloud and registry tokens) or anvil's API keys. Files inside the workspace, \
         .env included, are visible to commands."
    }

    fn permission_subject(&self, args: &serde_json::Value) -> Option<String> {
        args.get("command")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    }

    async fn run(&self, args: BashArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let timeout_ms = args.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
        if timeout_ms == 0 || timeout_ms > MAX_TIMEOUT_MS {
            return Err(ToolError::InvalidArgs(format!(
                "timeout_ms must be between 1 and {MAX_TIMEOUT_MS}, got {timeout_ms}"
            )));
        }
        let mut spec = ProcessSpec::new("bash", &ctx.cwd)
            .args(["-c", args.command.as_str()])
            .env(self.env.vars())
            .timeout(Duration::from_millis(timeout_ms))
            .capture(CAPTURE_BYTES, CAPTURE_BYTES);
        if let Some(redactor) = &self.redactor {
            spec = spec.redact(Arc::clone(redactor));
        }
        // Fail closed: a sandbox that cannot run means the command does not run.
        let (spec, guard) = self
            .sandbox
            .wrap(spec)
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        let out = process::run(&spec, &ctx.cancel)
            .await
            .map_err(|e| ToolError::Failed(e.to_string()))?;
        let notes = [guard.limit_note(), guard.after_command()];
        drop(guard);
        let mut streams = format_streams(&out.stdout.text(), &out.stderr.text());
        for note in notes.into_iter().flatten() {
            streams.push_str(&format!("\n{note}"));
        }
        match out.termination {
            Termination::Exited(code) => Ok(format!("Exit code: {code}\n{streams}")),
            Termination::Signaled(sig) => Ok(format!("Killed by signal {sig}\n{streams}")),
            Termination::TimedOut => Err(ToolError::Failed(format!(
                "The command timed out after {timeout_ms} ms and was killed with everything it started. Use a longer timeout_ms, or run less at once.\n{streams}"
            ))),
            Termination::Cancelled => Err(ToolError::Cancelled),
        }
    }
}

fn format_streams(stdout: &str, stderr: &str) -> String {
    let mut out = String::new();
    if !stdout.is_empty() {
        out.push_str("stdout:\n");
        out.push_str(stdout);
        if !stdout.ends_with('\n') {
            out.push('\n');
        }
    }
    if !stderr.is_empty() {
        out.push_str("stderr:\n");
        out.push_str(stderr);
        if !stderr.ends_with('\n') {
            out.push('\n');
        }
    }
    if out.is_empty() {
        out.push_str("(no output)\n");
    }
    out
}
