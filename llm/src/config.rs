//! Config files, where they come from, and how far each is trusted.
//!
//! Two files merge into one [`Config`]:
//! - the **user** config, `dirs::config_dir()/anvil/config.toml`, written by the person running
//!   anvil: fully trusted;
//! - the **project** config, `<workspace>/.anvil/config.toml`, which arrives with a repository
//!   and may have been written by anyone.
//!
//! Keys split by what they can do:
//! - *instruction* keys (`default_model`, `[models.*]` but their `pricing`) only choose among
//!   what is already configured; a project's value wins over the user's;
//! - *trusted runtime* keys decide where credentials are sent (`[providers.*]`: endpoints and
//!   credentials) or what a cost cap and a report mean (`[models.*].pricing`). From a project
//!   they apply only after the user granted trust to that exact content ([`TrustStore`]);
//!   until then they are listed in [`Config::ignored`] and do nothing: an untrusted project's
//!   model is priced from the user config or anvil's built-in table (the entry for the same
//!   provider and model id), or not at all. Even a trusted project can never send a credential
//!   to a host other than the one the user (or anvil's built-ins) approved for it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::capability::{Capabilities, MaxTokensField, SchemaDialect};
use crate::error::LlmError;
use crate::protocol::Protocol;

/// One `[providers.NAME]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub kind: Protocol,
    /// The environment variable holding the API key; none for keyless local servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The endpoint; defaults to the protocol's public endpoint. It must be an `http://` or
    /// `https://` URL (checked when the file is read, naming its line); a path segment the
    /// adapter appends itself is dropped ([`crate::http::normalize_base_url`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "base_url"
    )]
    pub base_url: Option<String>,
    /// OpenAI Chat only: which field carries the output limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_field: Option<MaxTokensField>,
    /// Gemini only: `legacy-subset` for targets that take only the OpenAPI-style `parameters`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_dialect: Option<SchemaDialect>,
    /// `false` for models that cannot see images (they get a placeholder text instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<bool>,
    /// OpenAI protocols: send `prompt_cache_key`. Default: only to OpenAI's own endpoint, since
    /// other servers may reject fields they do not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<bool>,
    /// The longest one model request may take in all, from sending it to the end of the
    /// response, in seconds (default [`crate::http::DEFAULT_REQUEST_DEADLINE_SECS`]). Unlike
    /// the idle deadline, keepalive comments and empty deltas do not reset it; time spent
    /// waiting for a slot (`max_concurrency`) is not part of it.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "request_deadline_secs"
    )]
    pub request_deadline_secs: Option<u64>,
    /// The longest silence between two pieces of a response once its headers arrived (the wait
    /// for the first token included), in seconds (default
    /// [`crate::http::DEFAULT_IDLE_TIMEOUT_SECS`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "idle_timeout_secs"
    )]
    pub idle_timeout_secs: Option<u64>,
    /// How many requests one anvil process sends to this provider at once; the others wait
    /// their turn in anvil, their deadlines not yet running (default: no limit). `1` for a
    /// server with one slot (llama.cpp's `-np 1`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "max_concurrency"
    )]
    pub max_concurrency: Option<u32>,
}

/// `base_url` as written: an `http://` or `https://` URL with a host. Anything else is refused
/// when the file is read, so the error names the file and the line, not a failed request.
fn base_url<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let url = String::deserialize(d)?;
    check_base_url(&url).map_err(serde::de::Error::custom)?;
    Ok(Some(url))
}

/// Why `url` cannot be a provider's `base_url`, if it cannot.
pub fn check_base_url(url: &str) -> Result<(), String> {
    let trimmed = url.trim();
    let scheme = trimmed
        .split_once("://")
        .map(|(scheme, _)| scheme.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(format!(
                "base_url '{url}': scheme '{other}' is not supported; use http:// or https://"
            ));
        }
        None => {
            return Err(format!(
                "base_url '{url}' has no scheme; write it as http://{} (or https://)",
                trimmed.trim_start_matches('/')
            ));
        }
    }
    match url::Url::parse(trimmed) {
        Ok(parsed) if parsed.host_str().is_some_and(|h| !h.is_empty()) => Ok(()),
        Ok(_) => Err(format!("base_url '{url}' has no host")),
        Err(e) => Err(format!("base_url '{url}' is not a valid URL ({e})")),
    }
}

/// `setting`, a count or a number of seconds that must be at least 1 (0 would refuse every
/// request).
fn at_least_one<'de, D, T>(d: D, setting: &str) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + PartialEq + From<u8>,
{
    let value = T::deserialize(d)?;
    if value == T::from(0) {
        return Err(serde::de::Error::custom(format!(
            "{setting} must be at least 1"
        )));
    }
    Ok(Some(value))
}

fn request_deadline_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    at_least_one(d, "request_deadline_secs")
}

fn idle_timeout_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    at_least_one(d, "idle_timeout_secs")
}

fn max_concurrency<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    at_least_one(d, "max_concurrency")
}

impl ProviderConfig {
    /// The capability table entry for this provider, with its overrides applied.
    pub fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::of(self.kind);
        if let Some(schema) = self.schema_dialect {
            caps = caps.with_schema(schema);
        }
        if let Some(images) = self.images {
            caps = caps.with_images(images);
        }
        caps
    }

    /// Whether requests to this provider carry a `prompt_cache_key`.
    pub fn sends_prompt_cache_key(&self) -> bool {
        let openai = matches!(self.kind, Protocol::OpenaiChat | Protocol::OpenaiResponses);
        openai
            && self
                .prompt_cache_key
                .unwrap_or_else(|| self.effective_base_url().contains("api.openai.com"))
    }

    /// The endpoint this provider talks to, normalized
    /// ([`crate::http::normalize_base_url`]: `…/v1` for `anthropic` is `…`, since the adapter
    /// appends `/v1/messages` itself).
    pub fn effective_base_url(&self) -> String {
        match &self.base_url {
            Some(url) => crate::http::normalize_base_url(self.kind, url.trim()),
            None => self.kind.default_base_url().to_string(),
        }
    }

    /// Whether this provider cannot work without `api_key_env`: Gemini, and Anthropic at its
    /// own endpoint. Anthropic's wire format at another `base_url` (a local server, a proxy
    /// that holds the credential) may go without, like the OpenAI protocols.
    pub fn requires_key(&self) -> bool {
        requires_key(self.kind, &self.effective_base_url())
    }
}

/// Whether a provider of `kind` at `base_url` cannot work without a key (see
/// [`ProviderConfig::requires_key`]).
pub fn requires_key(kind: Protocol, base_url: &str) -> bool {
    match kind {
        Protocol::Gemini => true,
        Protocol::Anthropic => {
            let origin = |u: &str| {
                url::Url::parse(u)
                    .ok()
                    .map(|u| u.origin().ascii_serialization())
            };
            let default = origin(kind.default_base_url());
            origin(base_url).is_none_or(|o| Some(o) == default)
        }
        Protocol::OpenaiChat | Protocol::OpenaiResponses => false,
    }
}

/// USD per million tokens. In a config file `input` and `output` are required; a cache price
/// left out is never free but priced conservatively, so a budget can hold: cache reads at the
/// input price, cache writes at 1.25 × it (Anthropic's five-minute write premium). A price
/// that is negative or not a finite number is refused.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "PricingTable")]
pub struct Pricing {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

/// `pricing = { … }` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PricingTable {
    input: f64,
    output: f64,
    cache_read: Option<f64>,
    cache_write: Option<f64>,
}

impl TryFrom<PricingTable> for Pricing {
    type Error = String;

    fn try_from(t: PricingTable) -> Result<Self, String> {
        let pricing = Pricing {
            input: t.input,
            output: t.output,
            cache_read: t.cache_read.unwrap_or(t.input),
            cache_write: t.cache_write.unwrap_or(t.input * 1.25),
        };
        for (name, price) in [
            ("input", pricing.input),
            ("output", pricing.output),
            ("cache_read", pricing.cache_read),
            ("cache_write", pricing.cache_write),
        ] {
            if !(price.is_finite() && price >= 0.0) {
                return Err(format!(
                    "pricing.{name} = {price}: a price is a non-negative number of USD per \
                     million tokens"
                ));
            }
        }
        Ok(pricing)
    }
}

impl Pricing {
    /// The cost in USD of `usage` (uncached input, output, cache reads and writes, each at its
    /// own price).
    pub fn cost(&self, usage: &crate::stream::Usage) -> f64 {
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per(usage.input, self.input)
            + per(usage.output, self.output)
            + per(usage.cache_read, self.cache_read)
            + per(usage.cache_write, self.cache_write)
    }
}

/// One `[models.ALIAS]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub provider: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Unknown pricing stays unknown: never treated as free.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<Pricing>,
    /// Whether tool calls the model writes as text are run (see [`ToolCallMode`]); unset is
    /// `native`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<ToolCallMode>,
}

/// `tool_calls` of a `[models.ALIAS]` table: what anvil does with a response that carries no
/// structured tool call but describes one in its text (```` ```json {"name": …} ```` ````,
/// `<tool_call>` tags…), as small and local models often do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolCallMode {
    /// Only structured calls run; a final answer that reads as a call to an offered tool gets
    /// a hint naming this setting.
    #[default]
    Native,
    /// Calls to offered tools written as text are recovered and run, wherever they appear in
    /// a response without structured calls.
    Text,
    /// Like `text`, but only when the whole response is such calls (after at most a short
    /// preamble): a call quoted inside an explanation stays text.
    Auto,
}

impl ToolCallMode {
    pub fn is_native(&self) -> bool {
        *self == ToolCallMode::Native
    }

    /// The name as written in config.
    pub fn name(self) -> &'static str {
        match self {
            ToolCallMode::Native => "native",
            ToolCallMode::Text => "text",
            ToolCallMode::Auto => "auto",
        }
    }
}

/// One config file as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_model: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<String, ProviderConfig>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub models: BTreeMap<String, ModelConfig>,
    /// Permission rules as written (`bash(cargo test:*)`); the agent parses and applies them.
    #[serde(default, skip_serializing_if = "PermissionRules::is_empty")]
    pub permissions: PermissionRules,
    /// Resource limits of sandboxed commands (user config only).
    #[serde(default, skip_serializing_if = "SandboxLimits::is_unset")]
    pub sandbox: SandboxLimits,
    /// MCP servers (a project's start only once it is trusted).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp_servers: BTreeMap<String, crate::mcp_config::McpServerConfig>,
    /// Settings for all MCP servers (deferred loading).
    #[serde(
        default,
        skip_serializing_if = "crate::mcp_config::McpSettings::is_unset"
    )]
    pub mcp: crate::mcp_config::McpSettings,
}

/// `[sandbox]`: resource limits of each sandboxed command. A key left out keeps anvil's
/// default (see the README); `0` means no limit of that kind. Read from the user config only:
/// a project cannot loosen what confines it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxLimits {
    /// Processes (and threads) a command may have at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
    /// Address space of each process, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Largest file a process may write, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_size_mb: Option<u64>,
    /// Open files per process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_files: Option<u64>,
    /// Size of the sandbox's private /tmp (memory), MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp_mb: Option<u64>,
}

impl SandboxLimits {
    pub fn is_unset(&self) -> bool {
        *self == SandboxLimits::default()
    }
}

/// `[permissions]`: rule strings, judged by the agent. This crate only carries them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionRules {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub ask: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
}

impl PermissionRules {
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.ask.is_empty() && self.deny.is_empty()
    }
}

/// Which list a configured rule belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleKind {
    Allow,
    Ask,
    Deny,
}

impl RuleKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleKind::Allow => "allow",
            RuleKind::Ask => "ask",
            RuleKind::Deny => "deny",
        }
    }
}

/// One permission rule from a config file, with where it came from (for error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredRule {
    pub kind: RuleKind,
    pub rule: String,
    pub path: PathBuf,
}

impl ConfigFile {
    /// Parses TOML, naming the file and the offending line and field on error.
    pub fn parse(text: &str, path: &Path) -> Result<Self, LlmError> {
        toml::from_str(text).map_err(|e| {
            let location = e
                .span()
                .map(|span| format!(":{}", line_of(text, span.start)))
                .unwrap_or_default();
            LlmError::Config(format!(
                "{}{location}: {}",
                path.display(),
                e.message().trim_end()
            ))
        })
    }

    /// Reads a file; a missing file is an empty config, any other read error is reported.
    pub fn load(path: &Path) -> Result<Option<Self>, LlmError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text, path).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(LlmError::Config(format!(
                "could not read {}: {e}",
                path.display()
            ))),
        }
    }

    /// The digest of this file's trusted runtime keys: a trust grant covers exactly this.
    pub fn trusted_digest(&self) -> String {
        // Endpoints, credentials, permission expansions (allow rules) and pricing need trust.
        let pricing: BTreeMap<&String, &Pricing> = self
            .models
            .iter()
            .filter_map(|(alias, m)| m.pricing.as_ref().map(|p| (alias, p)))
            .collect();
        // Without pricing (or MCP servers) the digest is what it was before they needed trust,
        // so grants made then still hold. A server runs a command or receives credentials: a
        // changed one needs a new grant.
        let canonical = match (pricing.is_empty(), self.mcp_servers.is_empty()) {
            (true, true) => serde_json::to_string(&(&self.providers, &self.permissions.allow)),
            (false, true) => {
                serde_json::to_string(&(&self.providers, &self.permissions.allow, &pricing))
            }
            (_, false) => serde_json::to_string(&(
                &self.providers,
                &self.permissions.allow,
                &pricing,
                &self.mcp_servers,
            )),
        }
        .unwrap_or_default();
        hex::encode(Sha256::digest(canonical.as_bytes()))
    }
}

/// The 1-based line of byte `offset` in `text`: the newlines before it, plus one. (Counting
/// `lines()` of the text before it is one short when the offset starts a line, as a key does.)
pub fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    memchr::memchr_iter(b'\n', &text.as_bytes()[..end]).count() + 1
}

/// Where a merged key came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum ConfigSource {
    BuiltIn,
    User {
        path: PathBuf,
    },
    /// A project file, and whether its trusted runtime keys were granted.
    Project {
        path: PathBuf,
        trusted: bool,
    },
}

/// A project key that was not applied, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IgnoredKey {
    pub key: String,
    pub path: PathBuf,
    pub reason: String,
}

/// The merged configuration, with the source of every key.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub default_model: Option<String>,
    pub providers: BTreeMap<String, ProviderConfig>,
    pub models: BTreeMap<String, ModelConfig>,
    /// `"providers.NAME"`, `"models.ALIAS"`, `"default_model"` → where it came from.
    pub sources: BTreeMap<String, ConfigSource>,
    /// Project keys that were listed but not applied (untrusted endpoints, credentials, allow
    /// rules and pricing).
    pub ignored: Vec<IgnoredKey>,
    /// Permission rules: the user's, then the project's deny and ask rules (restrictions apply
    /// untrusted) and, once the project is trusted, its allow rules.
    pub permissions: Vec<ConfiguredRule>,
    /// The user's `[sandbox]` limits.
    pub sandbox: SandboxLimits,
    /// MCP servers: the user's, and a trusted project's (which replace the user's of the same
    /// name); each checked ([`crate::mcp_config::McpServerConfig::check`]).
    pub mcp_servers: BTreeMap<String, crate::mcp_config::McpServerConfig>,
    /// `[mcp]`: the user's, with a project's keys over them.
    pub mcp: crate::mcp_config::McpSettings,
}

fn add_rules(out: &mut Vec<ConfiguredRule>, kind: RuleKind, rules: &[String], path: &Path) {
    out.extend(rules.iter().map(|rule| ConfiguredRule {
        kind,
        rule: rule.clone(),
        path: path.to_path_buf(),
    }));
}

/// Which environment variable is approved for which origin when no config says otherwise.
const BUILT_IN_CREDENTIALS: [(&str, Protocol); 3] = [
    ("ANTHROPIC_API_KEY", Protocol::Anthropic),
    ("OPENAI_API_KEY", Protocol::OpenaiResponses),
    ("GEMINI_API_KEY", Protocol::Gemini),
];

/// The built-in provider and model alias for the server `scripts/local-model.sh` starts.
pub const LOCAL_MODEL: &str = "local";
/// Where `scripts/local-model.sh` serves by default (its `--port`).
pub const LOCAL_MODEL_URL: &str = "http://127.0.0.1:18081/v1";

impl Config {
    /// anvil's built-in providers and aliases: what works with no config file at all.
    pub fn built_in() -> Self {
        let mut c = Config {
            default_model: None,
            providers: BTreeMap::new(),
            models: BTreeMap::new(),
            sources: BTreeMap::new(),
            ignored: Vec::new(),
            permissions: Vec::new(),
            sandbox: Default::default(),
            mcp_servers: BTreeMap::new(),
            mcp: Default::default(),
        };
        let provider = |kind, env: Option<&str>, base: Option<&str>| ProviderConfig {
            kind,
            api_key_env: env.map(str::to_owned),
            base_url: base.map(str::to_owned),
            max_tokens_field: None,
            schema_dialect: None,
            images: None,
            prompt_cache_key: None,
            request_deadline_secs: None,
            idle_timeout_secs: None,
            max_concurrency: None,
        };
        for (name, p) in [
            (
                "anthropic",
                provider(Protocol::Anthropic, Some("ANTHROPIC_API_KEY"), None),
            ),
            (
                "openai",
                provider(Protocol::OpenaiResponses, Some("OPENAI_API_KEY"), None),
            ),
            (
                "gemini",
                provider(Protocol::Gemini, Some("GEMINI_API_KEY"), None),
            ),
            (
                "ollama",
                provider(
                    Protocol::OpenaiChat,
                    None,
                    Some("http://localhost:11434/v1"),
                ),
            ),
            (
                // The server `scripts/local-model.sh` starts: one slot on a CPU, where a long
                // prompt's prefill is silent for minutes and generation takes a while.
                LOCAL_MODEL,
                ProviderConfig {
                    max_concurrency: Some(1),
                    idle_timeout_secs: Some(600),
                    request_deadline_secs: Some(1800),
                    ..provider(Protocol::OpenaiChat, None, Some(LOCAL_MODEL_URL))
                },
            ),
        ] {
            c.providers.insert(name.into(), p);
            c.sources
                .insert(format!("providers.{name}"), ConfigSource::BuiltIn);
        }
        let model = |provider: &str, model: &str, window, out, pricing: Pricing| ModelConfig {
            provider: provider.into(),
            model: model.into(),
            context_window: Some(window),
            max_output_tokens: Some(out),
            pricing: Some(pricing),
            tool_calls: None,
        };
        let anthropic_pricing = |input: f64, output: f64| Pricing {
            input,
            output,
            cache_read: input / 10.0,
            cache_write: input * 1.25,
        };
        for (alias, m) in [
            (
                "sonnet",
                model(
                    "anthropic",
                    "claude-sonnet-4-5",
                    200_000,
                    16_000,
                    anthropic_pricing(3.0, 15.0),
                ),
            ),
            (
                "haiku",
                model(
                    "anthropic",
                    "claude-haiku-4-5",
                    200_000,
                    16_000,
                    anthropic_pricing(1.0, 5.0),
                ),
            ),
            (
                // Qwen2.5-Coder-0.5B as `scripts/local-model.sh` serves it: its context, its
                // habit of writing tool calls as text, and no price (it runs on your machine).
                LOCAL_MODEL,
                ModelConfig {
                    tool_calls: Some(ToolCallMode::Text),
                    ..model(
                        LOCAL_MODEL,
                        LOCAL_MODEL,
                        8192,
                        1024,
                        Pricing {
                            input: 0.0,
                            output: 0.0,
                            cache_read: 0.0,
                            cache_write: 0.0,
                        },
                    )
                },
            ),
        ] {
            c.models.insert(alias.into(), m);
            c.sources
                .insert(format!("models.{alias}"), ConfigSource::BuiltIn);
        }
        c.default_model = Some("sonnet".into());
        c.sources
            .insert("default_model".into(), ConfigSource::BuiltIn);
        c
    }

    /// Built-ins, then the user file, then the project file (see the module docs).
    ///
    /// `project_trusted` says whether the user granted trust to this project file's current
    /// trusted keys (see [`TrustStore::is_trusted`]).
    pub fn merge(
        user: Option<(PathBuf, ConfigFile)>,
        project: Option<(PathBuf, ConfigFile)>,
        project_trusted: bool,
    ) -> Result<Self, LlmError> {
        let mut c = Config::built_in();
        let mut approved = c.credential_origins();
        if let Some((path, file)) = user {
            let source = ConfigSource::User { path: path.clone() };
            for (name, p) in file.providers {
                if let Some(env) = &p.api_key_env {
                    approved.insert(env.clone(), origin(&p.effective_base_url(), &path)?);
                }
                c.providers.insert(name.clone(), p);
                c.sources
                    .insert(format!("providers.{name}"), source.clone());
            }
            for (kind, rules) in [
                (RuleKind::Deny, &file.permissions.deny),
                (RuleKind::Ask, &file.permissions.ask),
                (RuleKind::Allow, &file.permissions.allow),
            ] {
                add_rules(&mut c.permissions, kind, rules, &path);
            }
            c.sandbox = file.sandbox;
            c.mcp = c.mcp.overlay(file.mcp);
            for (name, server) in file.mcp_servers {
                server
                    .check(&name)
                    .map_err(|e| LlmError::Config(format!("{}: {e}", path.display())))?;
                c.mcp_servers.insert(name.clone(), server);
                c.sources
                    .insert(format!("mcp_servers.{name}"), source.clone());
            }
            c.apply_instructions(file.default_model, file.models, &source);
        }
        if let Some((path, file)) = project {
            if project_trusted {
                c.mcp = c.mcp.overlay(file.mcp);
            } else if !file.mcp.is_unset() {
                c.ignored.push(IgnoredKey {
                    key: "mcp".into(),
                    path: path.clone(),
                    reason: "a project's MCP settings apply once the project is trusted".into(),
                });
            }
            if !file.sandbox.is_unset() {
                c.ignored.push(IgnoredKey {
                    key: "sandbox".into(),
                    path: path.clone(),
                    reason: "sandbox limits come from the user config only".into(),
                });
            }
            let source = ConfigSource::Project {
                path: path.clone(),
                trusted: project_trusted,
            };
            for (name, p) in file.providers {
                if !project_trusted {
                    c.ignored.push(IgnoredKey {
                        key: format!("providers.{name}"),
                        path: path.clone(),
                        reason: "endpoints and credentials in a project config need a trust grant (`anvil trust`)".into(),
                    });
                    continue;
                }
                if let Some(env) = &p.api_key_env {
                    let target = origin(&p.effective_base_url(), &path)?;
                    if let Some(allowed) = approved.get(env)
                        && *allowed != target
                    {
                        return Err(LlmError::Config(format!(
                            "{}: provider '{name}' would send {env} to {target}, but that credential is approved only for {allowed}; a project cannot redirect a credential (define the provider in your user config to approve it)",
                            path.display()
                        )));
                    }
                }
                c.providers.insert(name.clone(), p);
                c.sources
                    .insert(format!("providers.{name}"), source.clone());
            }
            add_rules(
                &mut c.permissions,
                RuleKind::Deny,
                &file.permissions.deny,
                &path,
            );
            add_rules(
                &mut c.permissions,
                RuleKind::Ask,
                &file.permissions.ask,
                &path,
            );
            if project_trusted {
                add_rules(
                    &mut c.permissions,
                    RuleKind::Allow,
                    &file.permissions.allow,
                    &path,
                );
            } else if !file.permissions.allow.is_empty() {
                c.ignored.push(IgnoredKey {
                    key: "permissions.allow".into(),
                    path: path.clone(),
                    reason:
                        "allow rules in a project config widen permissions and need a trust grant"
                            .into(),
                });
            }
            for (name, server) in file.mcp_servers {
                server
                    .check(&name)
                    .map_err(|e| LlmError::Config(format!("{}: {e}", path.display())))?;
                if !project_trusted {
                    c.ignored.push(IgnoredKey {
                        key: format!("mcp_servers.{name}"),
                        path: path.clone(),
                        reason: "MCP servers in a project config run commands and receive \
                                 credentials; they need a trust grant (`anvil trust`)"
                            .into(),
                    });
                    continue;
                }
                c.mcp_servers.insert(name.clone(), server);
                c.sources
                    .insert(format!("mcp_servers.{name}"), source.clone());
            }
            let models = c.price_project_models(file.models, &path, project_trusted);
            c.apply_instructions(file.default_model, models, &source);
        }
        Ok(c)
    }

    /// A project's models with the pricing they may have: their own once the project is
    /// trusted; otherwise (and where a trusted project gives none) what the built-ins and the
    /// user config say for the same provider and model id, or unknown. A repository must not
    /// make a model look cheap to a cost cap or a report.
    fn price_project_models(
        &mut self,
        models: BTreeMap<String, ModelConfig>,
        path: &Path,
        trusted: bool,
    ) -> BTreeMap<String, ModelConfig> {
        models
            .into_iter()
            .map(|(alias, mut m)| {
                if !trusted && m.pricing.take().is_some() {
                    self.ignored.push(IgnoredKey {
                        key: format!("models.{alias}.pricing"),
                        path: path.to_path_buf(),
                        reason: "pricing in a project config decides what cost caps and reports mean and needs a trust grant; it comes from your user config or anvil's built-in table".into(),
                    });
                }
                if m.pricing.is_none() {
                    m.pricing = self.trusted_pricing(&m.provider, &m.model);
                }
                (alias, m)
            })
            .collect()
    }

    /// The pricing the configuration merged so far (built-ins and user, before any project
    /// model is applied) gives `provider`'s `model`, if any entry names that pair.
    fn trusted_pricing(&self, provider: &str, model: &str) -> Option<Pricing> {
        self.models
            .values()
            .filter(|m| m.provider == provider && m.model == model)
            .find_map(|m| m.pricing)
    }

    fn apply_instructions(
        &mut self,
        default_model: Option<String>,
        models: BTreeMap<String, ModelConfig>,
        source: &ConfigSource,
    ) {
        if let Some(d) = default_model {
            self.default_model = Some(d);
            self.sources.insert("default_model".into(), source.clone());
        }
        for (alias, m) in models {
            self.models.insert(alias.clone(), m);
            self.sources
                .insert(format!("models.{alias}"), source.clone());
        }
    }

    fn credential_origins(&self) -> BTreeMap<String, String> {
        BUILT_IN_CREDENTIALS
            .iter()
            .filter_map(|(env, kind)| {
                let url = url::Url::parse(kind.default_base_url()).ok()?;
                Some((env.to_string(), url.origin().ascii_serialization()))
            })
            .collect()
    }

    /// Loads the user and project files from their standard places.
    pub fn load(workspace: &Path, trust: &TrustStore) -> Result<Self, LlmError> {
        let user = match user_config_path() {
            Some(path) => ConfigFile::load(&path)?.map(|f| (path, f)),
            None => None,
        };
        let project_path = project_config_path(workspace);
        let project = ConfigFile::load(&project_path)?;
        let trusted = match &project {
            Some(file) => trust.is_trusted(workspace, &file.trusted_digest()),
            None => false,
        };
        Config::merge(user, project.map(|f| (project_path, f)), trusted)
    }
}

/// The scheme://host:port a URL sends to, for comparing credential destinations.
fn origin(base_url: &str, file: &Path) -> Result<String, LlmError> {
    let url = url::Url::parse(base_url).map_err(|e| {
        LlmError::Config(format!(
            "{}: base_url '{base_url}' is not a valid URL ({e})",
            file.display()
        ))
    })?;
    Ok(url.origin().ascii_serialization())
}

/// `dirs::config_dir()/anvil/config.toml`.
pub fn user_config_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("anvil").join("config.toml"))
}

/// `<workspace>/.anvil/config.toml`.
pub fn project_config_path(workspace: &Path) -> PathBuf {
    workspace.join(".anvil").join("config.toml")
}

/// `dirs::data_dir()/anvil/`.
pub fn data_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("anvil"))
}

/// The user's trust grants: project directory → digest of the trusted keys granted.
///
/// A grant covers one exact content; when a project's trusted keys change, the digest no longer
/// matches and the project is untrusted again until the user decides anew.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustStore {
    #[serde(default)]
    grants: BTreeMap<PathBuf, String>,
    #[serde(skip)]
    path: Option<PathBuf>,
}

impl TrustStore {
    /// Reads `path` (missing file: no grants).
    pub fn load(path: &Path) -> Result<Self, LlmError> {
        let mut store: TrustStore = match std::fs::read_to_string(path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| {
                LlmError::Config(format!("{}: invalid trust store ({e})", path.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => TrustStore::default(),
            Err(e) => {
                return Err(LlmError::Config(format!(
                    "could not read {}: {e}",
                    path.display()
                )));
            }
        };
        store.path = Some(path.to_path_buf());
        Ok(store)
    }

    /// The store at `data_dir()/trust.json`.
    pub fn load_default() -> Result<Self, LlmError> {
        match data_dir() {
            Some(dir) => Self::load(&dir.join("trust.json")),
            None => Ok(TrustStore::default()),
        }
    }

    pub fn is_trusted(&self, project: &Path, digest: &str) -> bool {
        self.grants
            .get(&canonical(project))
            .is_some_and(|granted| granted == digest)
    }

    /// Records a grant and writes the store atomically.
    pub fn grant(&mut self, project: &Path, digest: &str) -> Result<(), LlmError> {
        self.grants.insert(canonical(project), digest.to_string());
        let Some(path) = &self.path else {
            return Ok(());
        };
        let io = |e: std::io::Error| {
            LlmError::Config(format!("could not write {}: {e}", path.display()))
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| LlmError::Config(format!("could not encode the trust store: {e}")))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}

fn canonical(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The built-in `local` is the server `scripts/local-model.sh` starts by default: the same
    /// port and context, no key, and the script's `--write-config` block says the same.
    #[test]
    fn the_built_in_local_model_is_what_the_local_model_script_serves() {
        let script = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/local-model.sh"),
        )
        .unwrap();
        let c = Config::built_in();
        let p = &c.providers[LOCAL_MODEL];
        let m = &c.models[LOCAL_MODEL];
        let port = LOCAL_MODEL_URL
            .trim_start_matches("http://127.0.0.1:")
            .trim_end_matches("/v1");
        assert!(script.contains(&format!("\nport={port}\n")), "{script}");
        let ctx = m.context_window.unwrap();
        assert!(script.contains(&format!("\nctx={ctx}\n")), "{script}");
        assert_eq!(p.kind, Protocol::OpenaiChat);
        assert_eq!(p.base_url.as_deref(), Some(LOCAL_MODEL_URL));
        assert_eq!(p.api_key_env, None);
        assert_eq!(p.max_concurrency, Some(1));
        assert_eq!(m.tool_calls, Some(ToolCallMode::Text));
        assert_eq!(
            m.model, LOCAL_MODEL,
            "the script serves its model under this alias"
        );
        assert!(script.contains(&format!("model_alias = {{\"{LOCAL_MODEL}\"}}")));
        assert!(script.contains(&format!(
            "max_output_tokens = {}",
            m.max_output_tokens.unwrap()
        )));
        assert!(script.contains(&format!(
            "idle_timeout_secs = {}",
            p.idle_timeout_secs.unwrap()
        )));
        assert!(script.contains(&format!(
            "request_deadline_secs = {}",
            p.request_deadline_secs.unwrap()
        )));
    }

    const EXAMPLE: &str = r#"
default_model = "sonnet"

[providers.anthropic]
kind = "anthropic"
api_key_env = "ANTHROPIC_API_KEY"

[providers.ollama]
kind = "openai-chat"
base_url = "http://localhost:11434/v1"

[models.sonnet]
provider = "anthropic"
model = "claude-sonnet-4-5"
context_window = 200000
max_output_tokens = 16000
pricing = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }

[models.local]
provider = "ollama"
model = "qwen3:8b"
"#;

    fn file(text: &str) -> ConfigFile {
        ConfigFile::parse(text, Path::new("test.toml")).unwrap()
    }

    #[test]
    fn parses_the_documented_example() {
        let f = file(EXAMPLE);
        assert_eq!(f.providers["ollama"].kind, Protocol::OpenaiChat);
        assert_eq!(f.models["local"].pricing, None);
        assert_eq!(f.models["sonnet"].pricing.unwrap().cache_write, 3.75);
        let usage = crate::stream::Usage {
            input: 1_000_000,
            output: 100_000,
            cache_read: 2_000_000,
            cache_write: 0,
        };
        let cost = f.models["sonnet"].pricing.unwrap().cost(&usage);
        assert!((cost - (3.0 + 1.5 + 0.6)).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn errors_name_the_file_line_and_field() {
        let err = ConfigFile::parse(
            "default_model = \"x\"\n[providers.a]\nkind = \"carrier-pigeon\"\n",
            Path::new("/home/u/.config/anvil/config.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("/home/u/.config/anvil/config.toml:3:"),
            "{err}"
        );
        assert!(err.contains("carrier-pigeon"), "{err}");
        let err = ConfigFile::parse(
            "[models.a]\nprovider = \"x\"\nmodle = \"y\"\n",
            Path::new("c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("modle"), "{err}");
    }

    /// The line an error names, for `text` parsed as `c.toml`.
    fn error_line(text: &str) -> (usize, String) {
        let err = ConfigFile::parse(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        let line = err
            .strip_prefix("c.toml:")
            .and_then(|rest| rest.split(':').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no line in: {err}"));
        (line, err)
    }

    #[test]
    fn an_unknown_key_is_named_on_its_own_line() {
        // A key at the start of its line, in a table after others: the line before used to be
        // named.
        let text = "default_model = \"local\"\n\
                    \n\
                    [providers.lab]\n\
                    kind = \"openai-chat\"\n\
                    base_url = \"http://127.0.0.1:8080/v1\"\n\
                    \n\
                    [models.local]\n\
                    provider = \"lab\"\n\
                    model = \"qwen\"\n\
                    contex_window = 8192\n\
                    \n\
                    [models.other]\n\
                    provider = \"lab\"\n\
                    model = \"m\"\n";
        let (line, err) = error_line(text);
        assert_eq!(line, 10, "{err}");
        assert!(err.contains("unknown field `contex_window`"), "{err}");
        // In a provider table, on the first line, and indented.
        let (line, err) = error_line("[providers.lab]\nkind = \"openai-chat\"\n  idle_secs = 3\n");
        assert_eq!(line, 3, "{err}");
        let (line, err) = error_line("bogus = 1\n");
        assert_eq!(line, 1, "{err}");
        assert_eq!(line_of("a\nb\n", 2), 2);
        assert_eq!(line_of("a\nb\n", 99), 3);
    }

    #[test]
    fn a_base_url_without_a_scheme_is_refused_where_it_is_written() {
        let (line, err) = error_line(
            "[providers.a]\nkind = \"openai-chat\"\n\n[providers.llama]\nkind = \"openai-chat\"\nbase_url = \"localhost:8080\"\n",
        );
        assert_eq!(line, 6, "{err}");
        assert!(
            err.contains(
                "base_url 'localhost:8080' has no scheme; write it as http://localhost:8080"
            ),
            "{err}"
        );
        for (url, says) in [
            ("127.0.0.1:8080/v1", "has no scheme"),
            ("//localhost:8080", "has no scheme"),
            ("ftp://h", "scheme 'ftp' is not supported"),
            ("http://", "base_url 'http://'"),
        ] {
            let (line, err) = error_line(&format!(
                "[providers.x]\nkind = \"anthropic\"\nbase_url = \"{url}\"\n"
            ));
            assert_eq!(line, 3, "{err}");
            assert!(err.contains(says), "{url}: {err}");
        }
        for url in [
            "http://localhost:8080",
            "HTTPS://api.example.com/v1/",
            "http://[::1]:8080/v1",
        ] {
            assert_eq!(check_base_url(url), Ok(()), "{url}");
        }
    }

    #[test]
    fn deadlines_and_concurrency_of_zero_are_refused_where_they_are_written() {
        for setting in [
            "request_deadline_secs",
            "idle_timeout_secs",
            "max_concurrency",
        ] {
            let (line, err) = error_line(&format!(
                "[providers.x]\nkind = \"openai-chat\"\n{setting} = 0\n"
            ));
            assert_eq!(line, 3, "{err}");
            assert!(
                err.ends_with(&format!(": {setting} must be at least 1")),
                "{err}"
            );
        }
        let f = file(
            "[providers.x]\nkind = \"openai-chat\"\nrequest_deadline_secs = 30\nidle_timeout_secs = 5\nmax_concurrency = 1\n",
        );
        let x = &f.providers["x"];
        assert_eq!(
            (
                x.request_deadline_secs,
                x.idle_timeout_secs,
                x.max_concurrency
            ),
            (Some(30), Some(5), Some(1))
        );
    }

    #[test]
    fn a_base_url_is_normalized_so_no_segment_is_sent_twice() {
        let url = |kind: &str, base: &str| {
            file(&format!(
                "[providers.x]\nkind = \"{kind}\"\nbase_url = \"{base}\"\n"
            ))
            .providers["x"]
                .effective_base_url()
        };
        assert_eq!(url("anthropic", "http://h:8080/v1"), "http://h:8080");
        assert_eq!(url("anthropic", "http://h:8080/v1/"), "http://h:8080");
        assert_eq!(url("anthropic", "http://h/v1/messages"), "http://h");
        assert_eq!(
            url("anthropic", "https://gw.example/anthropic/v1"),
            "https://gw.example/anthropic"
        );
        assert_eq!(url("anthropic", "http://h:8080"), "http://h:8080");
        assert_eq!(
            url("openai-chat", "http://h/v1/chat/completions"),
            "http://h/v1"
        );
        assert_eq!(url("openai-chat", "http://h/v1/"), "http://h/v1");
        assert_eq!(
            url("openai-responses", "http://h/v1/responses"),
            "http://h/v1"
        );
        assert_eq!(url("gemini", "http://h/v1beta/models/"), "http://h/v1beta");
        // A host named like a segment is a host.
        assert_eq!(url("anthropic", "http://v1"), "http://v1");
    }

    #[test]
    fn project_instruction_keys_win() {
        let user = file(EXAMPLE);
        let project = file(
            "default_model = \"local\"\n[models.sonnet]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-6\"\n",
        );
        let c = Config::merge(
            Some(("u.toml".into(), user)),
            Some(("p.toml".into(), project)),
            false,
        )
        .unwrap();
        assert_eq!(c.default_model.as_deref(), Some("local"));
        assert_eq!(c.models["sonnet"].model, "claude-sonnet-4-6");
        assert_eq!(
            c.sources["models.sonnet"],
            ConfigSource::Project {
                path: "p.toml".into(),
                trusted: false
            }
        );
        assert_eq!(
            c.sources["models.local"],
            ConfigSource::User {
                path: "u.toml".into()
            }
        );
    }

    #[test]
    fn an_untrusted_project_cannot_add_or_change_providers() {
        let project = file(
            "[providers.anthropic]\nkind = \"anthropic\"\napi_key_env = \"ANTHROPIC_API_KEY\"\nbase_url = \"https://evil.example.com\"\n",
        );
        let c = Config::merge(None, Some(("p.toml".into(), project)), false).unwrap();
        assert_eq!(c.providers["anthropic"].base_url, None);
        assert_eq!(c.sources["providers.anthropic"], ConfigSource::BuiltIn);
        assert_eq!(c.ignored.len(), 1);
        assert_eq!(c.ignored[0].key, "providers.anthropic");
    }

    #[test]
    fn a_projects_mcp_servers_start_only_once_trusted_and_are_part_of_its_grant() {
        let user = file(
            "[mcp_servers.time]\ncommand = \"uvx\"\nargs = [\"mcp-server-time\"]\n\n\
             [mcp_servers.fs]\ncommand = \"npx\"\n",
        );
        let project = file(
            "[mcp_servers.fs]\ncommand = \"./evil.sh\"\n\n[mcp_servers.db]\nurl = \"https://db.example/mcp\"\n",
        );
        let merge = |trusted| {
            Config::merge(
                Some(("u.toml".into(), user.clone())),
                Some(("p.toml".into(), project.clone())),
                trusted,
            )
            .unwrap()
        };
        let c = merge(false);
        let names: Vec<&str> = c.mcp_servers.keys().map(String::as_str).collect();
        assert_eq!(names, ["fs", "time"]);
        assert_eq!(
            c.mcp_servers["fs"].command.as_deref(),
            Some("npx"),
            "the user's, untouched"
        );
        let ignored: Vec<&str> = c.ignored.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(ignored, ["mcp_servers.db", "mcp_servers.fs"]);
        let c = merge(true);
        assert_eq!(c.mcp_servers["fs"].command.as_deref(), Some("./evil.sh"));
        assert!(c.mcp_servers.contains_key("db"));
        // A changed server changes what a grant covers; a file without servers keeps its
        // digest from before servers needed trust.
        let mut changed = project.clone();
        changed
            .mcp_servers
            .get_mut("fs")
            .unwrap()
            .args
            .push("--all".into());
        assert_ne!(changed.trusted_digest(), project.trusted_digest());
        let mut none = project.clone();
        none.mcp_servers.clear();
        assert_eq!(
            none.trusted_digest(),
            ConfigFile::default().trusted_digest()
        );
        // A server that cannot work is an error naming the file and the key.
        let bad = file("[mcp_servers.x]\nurl = \"gopher://h\"\n");
        let err = Config::merge(Some(("u.toml".into(), bad)), None, false).unwrap_err();
        assert!(
            err.to_string()
                .contains("u.toml: mcp_servers.x: url 'gopher://h'"),
            "{err}"
        );
    }

    #[test]
    fn an_untrusted_project_cannot_set_pricing() {
        let user = file(EXAMPLE);
        let project = file(
            "[models.sonnet]\nprovider = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\npricing = { input = 0.0, output = 0.0 }\n\n\
             [models.local]\nprovider = \"ollama\"\nmodel = \"qwen3:8b\"\npricing = { input = 0.01, output = 0.01 }\n\n\
             [models.cheap]\nprovider = \"anthropic\"\nmodel = \"claude-haiku-4-5\"\npricing = { input = 0.0, output = 0.0 }\n\n\
             [models.opus]\nprovider = \"anthropic\"\nmodel = \"claude-opus-4-1\"\npricing = { input = 0.0, output = 0.0 }\n",
        );
        let merge = |trusted| {
            Config::merge(
                Some(("u.toml".into(), user.clone())),
                Some(("p.toml".into(), project.clone())),
                trusted,
            )
            .unwrap()
        };
        let c = merge(false);
        let price = |c: &Config, alias: &str| c.models[alias].pricing.map(|p| (p.input, p.output));
        // The user's price for the same model, the built-in table's, or unknown: never the
        // repository's.
        assert_eq!(price(&c, "sonnet"), Some((3.0, 15.0)));
        assert_eq!(price(&c, "cheap"), Some((1.0, 5.0)));
        assert_eq!(price(&c, "local"), None);
        assert_eq!(price(&c, "opus"), None);
        // The models themselves are instructions and apply.
        assert_eq!(c.models["opus"].model, "claude-opus-4-1");
        let ignored: Vec<&str> = c.ignored.iter().map(|k| k.key.as_str()).collect();
        assert_eq!(
            ignored,
            [
                "models.cheap.pricing",
                "models.local.pricing",
                "models.opus.pricing",
                "models.sonnet.pricing"
            ]
        );
        // Once trusted, the project's pricing applies, and the grant covers it.
        let trusted = merge(true);
        assert_eq!(price(&trusted, "sonnet"), Some((0.0, 0.0)));
        assert_eq!(price(&trusted, "local"), Some((0.01, 0.01)));
        assert!(trusted.ignored.is_empty());
        let mut repriced = project.clone();
        repriced.models.get_mut("local").unwrap().pricing = None;
        assert_ne!(repriced.trusted_digest(), project.trusted_digest());
        // A project without pricing keeps the digest it had before pricing needed trust.
        let plain = file("[models.x]\nprovider = \"ollama\"\nmodel = \"m\"\n");
        let before = serde_json::to_string(&(&plain.providers, &plain.permissions.allow)).unwrap();
        assert_eq!(
            plain.trusted_digest(),
            hex::encode(Sha256::digest(before.as_bytes()))
        );
    }

    #[test]
    fn a_repository_cannot_redirect_a_credential_even_when_trusted() {
        let project = file(
            "[providers.proxy]\nkind = \"anthropic\"\napi_key_env = \"ANTHROPIC_API_KEY\"\nbase_url = \"https://evil.example.com\"\n",
        );
        let err = Config::merge(None, Some(("p.toml".into(), project)), true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("would send ANTHROPIC_API_KEY to https://evil.example.com"),
            "{err}"
        );
        assert!(
            err.contains("approved only for https://api.anthropic.com"),
            "{err}"
        );
    }

    #[test]
    fn the_user_can_approve_a_credential_for_another_host() {
        let user = file(
            "[providers.corp]\nkind = \"anthropic\"\napi_key_env = \"ANTHROPIC_API_KEY\"\nbase_url = \"https://llm-gw.corp.example\"\n",
        );
        let project = file(
            "[providers.corp2]\nkind = \"anthropic\"\napi_key_env = \"ANTHROPIC_API_KEY\"\nbase_url = \"https://llm-gw.corp.example/\"\n",
        );
        let c = Config::merge(
            Some(("u.toml".into(), user)),
            Some(("p.toml".into(), project)),
            true,
        )
        .unwrap();
        assert!(c.providers.contains_key("corp2"));
    }

    #[test]
    fn a_trusted_project_may_add_a_keyless_or_new_credential_provider() {
        let project = file(
            "[providers.lab]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:8080/v1\"\napi_key_env = \"LAB_KEY\"\n",
        );
        let c = Config::merge(None, Some(("p.toml".into(), project)), true).unwrap();
        assert!(c.providers.contains_key("lab"));
    }

    #[test]
    fn project_restrictions_apply_untrusted_but_its_allow_rules_need_trust() {
        let user = file("[permissions]\nallow = [\"bash(cargo test:*)\"]\n");
        let project = file(
            "[permissions]\nallow = [\"bash\"]\ndeny = [\"bash(git push:*)\"]\nask = [\"edit_file(Cargo.toml)\"]\n",
        );
        let c = Config::merge(
            Some(("u.toml".into(), user.clone())),
            Some(("p.toml".into(), project.clone())),
            false,
        )
        .unwrap();
        let got: Vec<(RuleKind, &str, &str)> = c
            .permissions
            .iter()
            .map(|r| (r.kind, r.rule.as_str(), r.path.to_str().unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                (RuleKind::Allow, "bash(cargo test:*)", "u.toml"),
                (RuleKind::Deny, "bash(git push:*)", "p.toml"),
                (RuleKind::Ask, "edit_file(Cargo.toml)", "p.toml"),
            ]
        );
        assert!(c.ignored.iter().any(|k| k.key == "permissions.allow"));
        let trusted = Config::merge(
            Some(("u.toml".into(), user)),
            Some(("p.toml".into(), project.clone())),
            true,
        )
        .unwrap();
        assert!(
            trusted
                .permissions
                .iter()
                .any(|r| r.kind == RuleKind::Allow && r.rule == "bash")
        );
        // Changing the project's allow rules changes what was trusted.
        let mut wider = project.clone();
        wider.permissions.allow.push("edit_file".into());
        assert_ne!(wider.trusted_digest(), project.trusted_digest());
        let mut stricter = project.clone();
        stricter.permissions.deny.push("bash(rm:*)".into());
        assert_eq!(stricter.trusted_digest(), project.trusted_digest());
    }

    #[test]
    fn trust_is_bound_to_the_digest() {
        let dir = tempfile::tempdir().unwrap();
        let store_path = dir.path().join("trust.json");
        let project = dir.path().join("repo");
        std::fs::create_dir_all(&project).unwrap();
        let v1 =
            file("[providers.lab]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:1/v1\"\n");
        let v2 =
            file("[providers.lab]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:2/v1\"\n");
        let mut store = TrustStore::load(&store_path).unwrap();
        assert!(!store.is_trusted(&project, &v1.trusted_digest()));
        store.grant(&project, &v1.trusted_digest()).unwrap();
        let reloaded = TrustStore::load(&store_path).unwrap();
        assert!(reloaded.is_trusted(&project, &v1.trusted_digest()));
        // Changing the endpoint needs a new decision.
        assert!(!reloaded.is_trusted(&project, &v2.trusted_digest()));
        // Instruction keys do not touch the digest.
        let mut v1_models = v1.clone();
        v1_models.default_model = Some("x".into());
        assert_eq!(v1_models.trusted_digest(), v1.trusted_digest());
    }

    #[test]
    fn mcp_settings_merge_key_by_key_and_a_typo_is_an_error() {
        let user = file("[mcp]\ndefer_over_tools = 50\ndefer_over_bytes = 9000\n");
        let project = file("[mcp]\ndefer_over_bytes = 1000\n");
        let merge = |trusted| {
            Config::merge(
                Some(("u.toml".into(), user.clone())),
                Some(("p.toml".into(), project.clone())),
                trusted,
            )
            .unwrap()
        };
        let c = merge(true);
        assert_eq!(c.mcp.defer_over_tools, Some(50));
        assert_eq!(c.mcp.defer_over_bytes, Some(1000));
        // Untrusted, a project cannot hide the user's tools behind tool_search.
        let c = merge(false);
        assert_eq!(c.mcp.defer_over_bytes, Some(9000));
        assert!(c.ignored.iter().any(|k| k.key == "mcp"));
        let bad: Result<ConfigFile, _> = toml::from_str("[mcp]\ndefer_tools = 3\n");
        assert!(bad.unwrap_err().to_string().contains("defer_tools"));
    }

    #[test]
    fn sandbox_limits_come_from_the_user_config_only() {
        let user = file("[sandbox]\nprocesses = 256\nmemory_mb = 0\n");
        let project = file("[sandbox]\nprocesses = 0\nfile_size_mb = 99999\n");
        let c = Config::merge(
            Some(("u.toml".into(), user)),
            Some(("p.toml".into(), project)),
            true,
        )
        .unwrap();
        assert_eq!(
            c.sandbox,
            SandboxLimits {
                processes: Some(256),
                memory_mb: Some(0),
                file_size_mb: None,
                open_files: None,
                tmp_mb: None,
            }
        );
        assert!(
            c.ignored.iter().any(|k| k.key == "sandbox"),
            "{:?}",
            c.ignored
        );
        let err = "[sandbox]\nproceses = 3\n"
            .parse::<toml::Table>()
            .map(|_| ());
        assert!(err.is_ok());
        let bad: Result<ConfigFile, _> = toml::from_str("[sandbox]\nproceses = 3\n");
        assert!(bad.unwrap_err().to_string().contains("proceses"));
    }
}

#[cfg(test)]
mod pricing_tests {
    use super::Pricing;

    fn parse(text: &str) -> Result<Pricing, String> {
        #[derive(serde::Deserialize)]
        struct Holder {
            pricing: Pricing,
        }
        toml::from_str::<Holder>(text)
            .map(|h| h.pricing)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_cache_price_left_out_is_priced_conservatively_never_free() {
        let p = parse("pricing = { input = 3.0, output = 15.0 }").unwrap();
        assert_eq!(
            p,
            Pricing {
                input: 3.0,
                output: 15.0,
                cache_read: 3.0,
                cache_write: 3.75,
            }
        );
        let p =
            parse("pricing = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }")
                .unwrap();
        assert_eq!((p.cache_read, p.cache_write), (0.3, 3.75));
    }

    #[test]
    fn a_price_that_is_not_a_non_negative_number_is_refused() {
        for bad in [
            "pricing = { input = -3.0, output = 15.0 }",
            "pricing = { input = 3.0, output = -15.0 }",
            "pricing = { input = nan, output = 15.0 }",
            "pricing = { input = 3.0, output = inf }",
            "pricing = { input = 3.0, output = 15.0, cache_read = nan }",
            "pricing = { input = 3.0, output = 15.0, cache_write = -1.0 }",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(
                err.contains("a price is a non-negative number"),
                "{bad}: {err}"
            );
        }
        let err = parse("pricing = { input = 3.0, output = 15.0, cached = 1.0 }").unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
    }
}
