//! From a command line to a ready [`Agent`]: workspace, config, model, tools, prompt.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anvil_agent::file_access::FileAccess;
use anvil_agent::mcp::{Elicitor, McpServers};
use anvil_agent::prompt::{PromptBuilder, discover_instructions};
use anvil_agent::sandbox::limits::Limits;
use anvil_agent::sandbox::{Confined, Sandbox, SandboxPolicy, View};
use anvil_agent::secrets::{ChildEnv, Redactor};
use anvil_agent::session::{SessionStore, SessionWriter};
use anvil_agent::tools::register_coding_tools;
use anvil_agent::{Agent, AgentConfig, EventSink, ToolRegistry};
use anvil_llm::config::{Config, IgnoredKey, TrustStore};
use anvil_llm::registry::{Registry, ResolvedModel};
use sha2::{Digest, Sha256};

use crate::cli::args::{Cli, SandboxMode};
use crate::contract::TrialConfig;

/// A session could not be set up; the message says what to change.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SetupError(pub String);

impl From<anvil_llm::LlmError> for SetupError {
    fn from(e: anvil_llm::LlmError) -> Self {
        SetupError(e.to_string())
    }
}

/// Everything a front end needs for a session.
pub struct Session {
    pub agent: Agent,
    pub model: ResolvedModel,
    pub registry: Registry,
    pub cwd: PathBuf,
    /// Project config keys that were not applied (untrusted endpoints and credentials).
    pub ignored: Vec<IgnoredKey>,
    /// An eval trial's settings (`--pinned-config`): the model was taken from it, no config
    /// file was read, and the sandbox was built from it.
    pub trial: Option<TrialConfig>,
    /// What tool results and session records are redacted of.
    pub redactor: Arc<Redactor>,
    /// The session's MCP servers (starting in the background), if any are configured.
    pub mcp: Option<Arc<McpServers>>,
}

/// `-C DIR` names a directory that is there: else a usage error (exit 64) naming it, before
/// anything else is read.
pub fn check_cwd_arg(cli: &Cli) -> Result<(), SetupError> {
    let Some(dir) = &cli.cwd else { return Ok(()) };
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(SetupError(format!("-C {}: not a directory", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SetupError(format!(
            "-C {}: no such directory",
            dir.display()
        ))),
        Err(e) => Err(SetupError(format!("-C {}: {e}", dir.display()))),
    }
}

/// The workspace: `-C DIR` or the current directory, canonical.
pub fn workspace(cli: &Cli) -> Result<PathBuf, SetupError> {
    let dir = match &cli.cwd {
        Some(d) => d.clone(),
        None => std::env::current_dir()
            .map_err(|e| SetupError(format!("cannot read the current directory: {e}")))?,
    };
    let canonical = dir.canonicalize().map_err(|e| {
        SetupError(format!(
            "cannot use {} as the workspace: {e}",
            dir.display()
        ))
    })?;
    if !canonical.is_dir() {
        return Err(SetupError(format!("{} is not a directory", dir.display())));
    }
    Ok(canonical)
}

/// A stable key per workspace, so OpenAI routes a project's requests to the same cache.
fn prompt_cache_key(cwd: &Path) -> String {
    let digest = Sha256::digest(cwd.as_os_str().as_encoded_bytes());
    format!("anvil-{}", hex::encode(&digest[..8]))
}

/// The permission policy: `--permission-mode` plus the rules of the config files. A rule that
/// does not parse is a configuration error naming its file and list.
pub fn policy_for(
    cli: &Cli,
    session: &Session,
) -> Result<anvil_agent::permissions::Policy, SetupError> {
    use anvil_agent::permissions::{Policy, Rule};
    use anvil_llm::config::RuleKind;
    let mut policy = Policy::new(cli.permission_mode, &session.cwd);
    for configured in &session.registry.config().permissions {
        let rule = Rule::parse(&configured.rule).map_err(|e| {
            SetupError(format!(
                "{}: permissions.{}: {e}",
                configured.path.display(),
                configured.kind.as_str()
            ))
        })?;
        match configured.kind {
            RuleKind::Allow => policy.allow.push(rule),
            RuleKind::Ask => policy.ask.push(rule),
            RuleKind::Deny => policy.deny.push(rule),
        }
    }
    Ok(policy)
}

/// Loads config, resolves the model and builds the agent. With `--pinned-config`, no config
/// file is read: see [`build_trial`].
///
/// Configured MCP servers start in the background (a tokio runtime must be entered); their
/// elicitation requests go to `elicitor`.
pub fn build(
    cli: &Cli,
    events: EventSink,
    elicitor: Arc<dyn Elicitor>,
) -> Result<Session, SetupError> {
    let cwd = workspace(cli)?;
    if let Some(path) = &cli.pinned_config {
        return build_trial(cli, path, cwd, events);
    }
    let trust = TrustStore::load_default()?;
    let config = Config::load(&cwd, &trust)?;
    let ignored = config.ignored.clone();
    let registry = Registry::new(config);
    let name = match (&cli.model, registry.default_model()) {
        (Some(m), _) => m.clone(),
        (None, Some(d)) => d.to_string(),
        (None, None) => {
            return Err(SetupError(
                "no model given: pass -m MODEL or set default_model in ~/.config/anvil/config.toml"
                    .into(),
            ));
        }
    };
    let model = registry.resolve(&name)?;
    let mut prompt = PromptBuilder::for_workspace(&cwd);
    prompt.append = cli.append_system_prompt.clone();
    let limits = sandbox_limits(&registry.config().sandbox);
    let redactor = redactor(&registry);
    let mut tools = tools(&cwd, cli.sandbox, None, Arc::clone(&redactor), limits)?;
    only_tools(cli, &mut tools)?;
    let mcp = crate::cli::mcp::start(
        &registry.config().mcp_servers,
        registry.config().mcp,
        &cwd,
        &redactor,
        elicitor,
        &mut tools,
    );
    let agent = agent_for(&model, &cwd, cli, prompt, tools, events);
    let agent = with_session(agent, cli, &cwd, &model.model, Arc::clone(&redactor))?;
    Ok(Session {
        agent,
        model,
        registry,
        cwd,
        ignored,
        trial: None,
        redactor,
        mcp,
    })
}

/// An eval trial's session: the model exactly as pinned in the trial config at `path`, kept in
/// the transcript file it names (if any), and nothing from any config file — the workspace is a task repository, which must not re-point
/// the model, add permission rules or change pricing, and the worker's own config must not
/// make one machine's trials differ from another's (the same goes for the user's global
/// `AGENTS.md`; the repository's own instructions are part of the task and stay).
fn build_trial(
    cli: &Cli,
    path: &Path,
    cwd: PathBuf,
    events: EventSink,
) -> Result<Session, SetupError> {
    let trial = TrialConfig::read(path).map_err(|e| SetupError(e.to_string()))?;
    let registry = Registry::new(trial.model.config());
    let model = registry.resolve(&trial.model.name)?;
    let pinned = trial.model.digest();
    if model.config_digest != pinned {
        return Err(SetupError(format!(
            "model {} resolved to config {} instead of the pinned {pinned}",
            trial.model.name, model.config_digest
        )));
    }
    let mut prompt = PromptBuilder::for_workspace(&cwd);
    prompt.instructions = discover_instructions(&cwd, None);
    prompt.append = cli.append_system_prompt.clone();
    let redactor = redactor(&registry);
    // A trial reads no config file: its commands get anvil's default limits.
    let mut tools = tools(
        &cwd,
        cli.sandbox,
        Some(&trial),
        Arc::clone(&redactor),
        Limits::default(),
    )?;
    only_tools(cli, &mut tools)?;
    // The task's MCP servers, inside the same sandbox as its commands; nobody to elicit.
    let mcp = crate::cli::mcp::start_sandboxed(
        &trial.mcp_servers,
        &cwd,
        &redactor,
        session_sandbox(&cwd, cli.sandbox, Some(&trial), Limits::default()),
        &mut tools,
    );
    let mut agent = agent_for(&model, &cwd, cli, prompt, tools, events);
    // The trial's transcript, where the worker said: a new file, never an existing one.
    if let Some(path) = &trial.session_path {
        let (writer, loaded) =
            SessionWriter::create_at(path, &cwd, &model.model, Some(Arc::clone(&redactor)))
                .map_err(|e| SetupError(e.to_string()))?;
        agent = agent
            .with_session(writer, loaded)
            .map_err(|e| SetupError(e.to_string()))?;
    }
    Ok(Session {
        agent,
        model,
        registry,
        cwd,
        ignored: Vec::new(),
        trial: Some(trial),
        redactor,
        mcp,
    })
}

/// `--tools`: keeps only the built-in tools named.
fn only_tools(cli: &Cli, tools: &mut ToolRegistry) -> Result<(), SetupError> {
    match &cli.tools {
        Some(names) => tools
            .retain(names)
            .map_err(|e| SetupError(format!("--tools: {e}"))),
        None => Ok(()),
    }
}

/// `--max-cost-usd`: holds every model request of the session to a hard budget. A model
/// without pricing cannot be held to one, so the session is refused before anything starts,
/// naming the model.
pub fn apply_budget(cli: &Cli, session: &mut Session) -> Result<(), String> {
    let Some(usd) = cli.max_cost_usd else {
        return Ok(());
    };
    if session.model.pricing.is_none() {
        return Err(unpriced(&session.model.name, usd));
    }
    session.agent.set_budget(usd);
    Ok(())
}

/// Why a hard budget cannot be held on model `name`.
pub fn unpriced(name: &str, usd: f64) -> String {
    format!(
        "model {name} has no pricing, so the ${usd} budget (--max-cost-usd) cannot be held; \
         add pricing = {{ input = …, output = … }} (USD per million tokens) to [models.{name}] \
         in your config"
    )
}

/// Where `anvil` keeps sessions: `<data dir>/sessions/<sanitized cwd>/<id>.jsonl`.
pub fn session_store() -> Result<SessionStore, SetupError> {
    anvil_llm::config::data_dir()
        .map(|d| SessionStore::new(d.join("sessions")))
        .ok_or_else(|| {
            SetupError("no data directory to keep sessions in (is HOME set?)".to_string())
        })
}

/// The file `--resume ID` names: a session id of `cwd`, or a path to a session file.
pub fn session_path(store: &SessionStore, cwd: &Path, id: &str) -> Result<PathBuf, SetupError> {
    if id.ends_with(".jsonl") || id.contains('/') {
        let path = PathBuf::from(id);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(SetupError(format!("no session file at {id}")))
        };
    }
    store.find(cwd, id).map_err(|e| SetupError(e.to_string()))
}

/// Keeps the session in a file: a new one, or the one `--continue`/`--resume` names
/// (appended to under the same id; a call a crash cut off is answered as an unknown outcome).
fn with_session(
    agent: Agent,
    cli: &Cli,
    cwd: &Path,
    model: &str,
    redactor: Arc<Redactor>,
) -> Result<Agent, SetupError> {
    let store = session_store()?;
    let resume = match (&cli.resume, cli.continue_latest) {
        (Some(id), _) => Some(session_path(&store, cwd, id)?),
        (None, true) => Some(
            store
                .latest(cwd)
                .map_err(|e| SetupError(e.to_string()))?
                .ok_or_else(|| {
                    SetupError(format!(
                        "no session to continue in {} (anvil sessions lists them)",
                        cwd.display()
                    ))
                })?,
        ),
        (None, false) => None,
    };
    let (writer, loaded) = match resume {
        Some(path) => SessionWriter::resume(&path, Some(cwd), Some(redactor)),
        None => store.create(cwd, model, Some(redactor)),
    }
    .map_err(|e| SetupError(e.to_string()))?;
    agent
        .with_session(writer, loaded)
        .map_err(|e| SetupError(e.to_string()))
}

fn policy(mode: SandboxMode) -> SandboxPolicy {
    match mode {
        SandboxMode::WorkspaceWrite => SandboxPolicy::WorkspaceWrite { network: false },
        SandboxMode::WorkspaceWriteNetwork => SandboxPolicy::WorkspaceWrite { network: true },
        SandboxMode::ReadOnly => SandboxPolicy::ReadOnly,
        SandboxMode::FullAccess => SandboxPolicy::FullAccess,
    }
}

/// What every tool result is redacted of: the credential-looking variables of anvil's
/// environment, and every credential `registry` can resolve, whatever its variable is called.
pub fn redactor(registry: &Registry) -> Arc<Redactor> {
    Arc::new(Redactor::from_env().with_credentials(registry.credentials()))
}

/// The standard coding toolset for `cwd`, its commands confined by `sandbox`; for an eval
/// trial, by the trial's sandbox view as well. Results (and commands' output as it is read)
/// are redacted with `redactor`.
pub fn tools(
    cwd: &Path,
    sandbox: SandboxMode,
    trial: Option<&TrialConfig>,
    redactor: Arc<Redactor>,
    limits: Limits,
) -> Result<ToolRegistry, SetupError> {
    let access = FileAccess::workspace(cwd)
        .map_err(|e| SetupError(format!("cannot open the workspace {}: {e}", cwd.display())))?;
    let mut tools = ToolRegistry::new().with_redactor(redactor);
    let sandbox = session_sandbox(cwd, sandbox, trial, limits);
    register_coding_tools(&mut tools, Arc::new(access), ChildEnv::default(), sandbox)
        .map_err(|e| SetupError(e.to_string()))?;
    Ok(tools)
}

/// The sandbox of the session's commands (and of an eval trial's MCP servers).
fn session_sandbox(
    cwd: &Path,
    mode: SandboxMode,
    trial: Option<&TrialConfig>,
    limits: Limits,
) -> Arc<Sandbox> {
    Arc::new(trial_sandbox(
        Sandbox::new(policy(mode), cwd).with_limits(limits),
        trial,
    ))
}

/// The sandbox of an eval trial's commands: a confined view that shows only the workspace,
/// the system directories and the toolchains (never the task directory, other trials'
/// workspaces or the queue's files), with the trial's `hidden` paths masked as well in case a
/// toolchain directory holds one of them.
fn trial_sandbox(sandbox: Sandbox, trial: Option<&TrialConfig>) -> Sandbox {
    match trial {
        Some(trial) => {
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let mut view = Confined::for_host(home.as_deref(), std::env::var_os("PATH").as_deref());
            view.read_only.extend(trial.readable.iter().cloned());
            sandbox
                .with_view(View::Confined(view))
                .with_hidden(trial.hidden.clone())
        }
        None => sandbox,
    }
}

/// The user's `[sandbox]` limits over anvil's defaults (`0`: no limit of that kind).
pub fn sandbox_limits(config: &anvil_llm::config::SandboxLimits) -> Limits {
    let defaults = Limits::default();
    let pick = |set: Option<u64>, scale: u64, default: Option<u64>| match set {
        Some(0) => None,
        Some(n) => Some(n.saturating_mul(scale)),
        None => default,
    };
    Limits {
        processes: pick(config.processes, 1, defaults.processes),
        memory_bytes: pick(config.memory_mb, 1 << 20, defaults.memory_bytes),
        file_size_bytes: pick(config.file_size_mb, 1 << 20, defaults.file_size_bytes),
        open_files: pick(config.open_files, 1, defaults.open_files),
        tmp_bytes: pick(config.tmp_mb, 1 << 20, defaults.tmp_bytes),
        cgroups: defaults.cgroups,
    }
}

fn agent_for(
    model: &ResolvedModel,
    cwd: &Path,
    cli: &Cli,
    prompt: PromptBuilder,
    tools: ToolRegistry,
    events: EventSink,
) -> Agent {
    let cfg = AgentConfig {
        model: model.model.clone(),
        system: Some(prompt.build()),
        max_steps: cli.max_steps.unwrap_or(AgentConfig::default().max_steps),
        max_tokens: model.limits.max_output_tokens,
        prompt_cache_key: model.prompt_cache_key.then(|| prompt_cache_key(cwd)),
        context_window: Some(model.limits.context_window),
        pricing: model.pricing,
        protocol: Some(model.protocol),
        tool_calls: model.tool_calls,
        ..AgentConfig::default()
    };
    Agent::new(
        Arc::clone(&model.provider),
        Arc::new(tools),
        cfg,
        cwd,
        events,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_limits_override_the_defaults_and_zero_lifts_one() {
        let defaults = Limits::default();
        let set = anvil_llm::config::SandboxLimits {
            processes: Some(100),
            memory_mb: Some(0),
            file_size_mb: Some(2),
            open_files: None,
            tmp_mb: Some(0),
        };
        assert_eq!(
            sandbox_limits(&set),
            Limits {
                processes: Some(100),
                memory_bytes: None,
                file_size_bytes: Some(2 << 20),
                open_files: defaults.open_files,
                tmp_bytes: None,
                cgroups: true,
            }
        );
        assert_eq!(sandbox_limits(&Default::default()), defaults);
    }
}
