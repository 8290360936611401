//! [`Registry`]: resolves a model name into a ready provider, a model id and its limits.
//!
//! A name is a model alias from config (`sonnet`, `local`) or `provider:model`
//! (`ollama:qwen3:8b`), which needs no `[models]` entry and gets conservative default limits:
//! a context window of [`DEFAULT_CONTEXT_WINDOW`] and an output limit of
//! [`default_max_output_tokens`] (a quarter of the window, capped per provider kind).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::capability::{Capabilities, MaxTokensField, SchemaDialect};
use crate::concurrency::Limited;
use crate::config::{Config, ModelConfig, Pricing, ProviderConfig, ToolCallMode};
use crate::error::LlmError;
use crate::http::{DEFAULT_IDLE_TIMEOUT_SECS, DEFAULT_REQUEST_DEADLINE_SECS, HttpOptions};
use crate::protocol::Protocol;
use crate::provider::Provider;
use crate::providers::anthropic::Anthropic;
use crate::providers::gemini::Gemini;
use crate::providers::openai_chat::OpenAiChat;
use crate::providers::openai_responses::OpenAiResponses;
use crate::retry::{Retry, RetryPolicy};

/// The context window of a model whose config sets none: small enough for any current model.
pub const DEFAULT_CONTEXT_WINDOW: u32 = 32_768;

/// The output limit of a model whose config sets none: a quarter of its context window, so
/// three quarters stay for the conversation, but never more than [`default_output_cap`] of its
/// provider kind. With the default window, 8,192 on every kind.
pub fn default_max_output_tokens(kind: Protocol, context_window: u32) -> u32 {
    (context_window / 4).clamp(1, default_output_cap(kind))
}

/// The most [`default_max_output_tokens`] gives a model of `kind`: an output limit every
/// current model of that kind accepts (Claude 4 Opus's 32,000; GPT-4o's 16,384, which local
/// OpenAI-compatible servers get too; Gemini 2.0 Flash's 8,192). A model that can write more
/// says so with `max_output_tokens`.
pub const fn default_output_cap(kind: Protocol) -> u32 {
    match kind {
        Protocol::Anthropic => 32_000,
        Protocol::OpenaiChat | Protocol::OpenaiResponses => 16_384,
        Protocol::Gemini => 8_192,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelLimits {
    pub context_window: u32,
    pub max_output_tokens: u32,
}

/// A model ready to use.
#[derive(Clone)]
pub struct ResolvedModel {
    /// The name it was resolved from.
    pub name: String,
    /// The provider's config name (`anthropic`, `ollama`).
    pub provider_name: String,
    pub protocol: Protocol,
    /// Already wrapped in [`Retry`].
    pub provider: Arc<dyn Provider>,
    /// The provider's model id (`claude-sonnet-4-5`).
    pub model: String,
    pub limits: ModelLimits,
    /// `None` is unknown pricing, never free.
    pub pricing: Option<Pricing>,
    /// Whether to send OpenAI's `prompt_cache_key` to this provider.
    pub prompt_cache_key: bool,
    /// What to do with tool calls the model writes as text.
    pub tool_calls: ToolCallMode,
    /// [`PinnedModel::digest`] of the configuration it was resolved from: everything that
    /// decides this model's behaviour and cost, recorded with eval results. The credential is
    /// not part of it.
    pub config_digest: String,
}

/// A model's configuration as resolved on one machine, complete enough that another process or
/// machine uses exactly this model without reading any config file.
///
/// Every default is made explicit (the endpoint, the output-limit field, the schema dialect…),
/// so the same pinned model means the same requests wherever it is used. The credential is
/// named (`api_key_env`), never carried: whoever uses a pinned model supplies the key from its
/// own environment. An eval sweep stores one per model, and each of its trials runs with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedModel {
    /// The alias or `provider:model` it was resolved from.
    pub name: String,
    pub provider: PinnedProvider,
    /// The provider's model id (`claude-sonnet-4-5`).
    pub model: String,
    pub context_window: u32,
    pub max_output_tokens: u32,
    /// USD per million tokens; `None` is unknown pricing, never free.
    pub pricing: Option<Pricing>,
    /// What to do with tool calls the model writes as text. `native` is left out when written
    /// (and of the digest), so pins made before the setting existed keep their digests.
    #[serde(default, skip_serializing_if = "ToolCallMode::is_native")]
    pub tool_calls: ToolCallMode,
}

/// The provider part of a [`PinnedModel`]: a `[providers.NAME]` table with every default
/// resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedProvider {
    /// The provider's config name (`anthropic`, `ollama`).
    pub name: String,
    pub kind: Protocol,
    pub base_url: String,
    /// The name of the environment variable holding the API key (never the key itself);
    /// `None` for keyless servers.
    pub api_key_env: Option<String>,
    /// OpenAI Chat only: which field carries the output limit.
    pub max_tokens_field: Option<MaxTokensField>,
    pub schema_dialect: SchemaDialect,
    pub images: bool,
    pub prompt_cache_key: bool,
    /// The total deadline of one model request, in seconds. Pins made before it existed read
    /// as the default (their digest then no longer matches, so a sweep started with one is not
    /// resumed as if nothing had changed).
    #[serde(default = "default_request_deadline_secs")]
    pub request_deadline_secs: u64,
    /// The longest silence between two pieces of a response, in seconds. The default is left
    /// out when written (and so of the digest): pins made before it existed keep theirs.
    #[serde(
        default = "default_idle_timeout_secs",
        skip_serializing_if = "is_default_idle_timeout"
    )]
    pub idle_timeout_secs: u64,
    /// How many requests one process sends to this provider at once; `None` is no limit (and
    /// is left out when written, like the default idle timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
}

fn default_request_deadline_secs() -> u64 {
    DEFAULT_REQUEST_DEADLINE_SECS
}

fn default_idle_timeout_secs() -> u64 {
    DEFAULT_IDLE_TIMEOUT_SECS
}

fn is_default_idle_timeout(secs: &u64) -> bool {
    *secs == DEFAULT_IDLE_TIMEOUT_SECS
}

impl PinnedProvider {
    /// The process-wide semaphore of this provider's `max_concurrency` slots, if it has a
    /// limit: whoever runs requests to it outside a [`ResolvedModel`]'s provider (a worker
    /// running trials) can hold one of the same slots.
    pub fn slots(&self) -> Option<Arc<tokio::sync::Semaphore>> {
        self.max_concurrency
            .map(|max| crate::concurrency::slots(&self.name, &self.base_url, max))
    }
}

impl PinnedModel {
    /// sha256 of everything but the name it was resolved from: protocol, endpoint, credential
    /// variable, wire options, model id, limits and pricing.
    pub fn digest(&self) -> String {
        let mut identity = serde_json::json!({
            "provider": self.provider,
            "model": self.model,
            "context_window": self.context_window,
            "max_output_tokens": self.max_output_tokens,
            "pricing": self.pricing,
        });
        if !self.tool_calls.is_native() {
            identity["tool_calls"] = serde_json::json!(self.tool_calls);
        }
        hex::encode(Sha256::digest(identity.to_string().as_bytes()))
    }

    /// What differs from `old`, one entry per field: `provider.base_url "a" → "b"`.
    pub fn changes_from(&self, old: &PinnedModel) -> Vec<String> {
        let mut out = Vec::new();
        let json = |m: &PinnedModel| serde_json::to_value(m).unwrap_or_default();
        diff("", &json(old), &json(self), &mut out);
        out
    }

    /// A config holding only this model (under its name, also the default) and its provider,
    /// with no permission rules: what a process told to use exactly this model resolves from.
    pub fn config(&self) -> Config {
        let p = &self.provider;
        let provider = ProviderConfig {
            kind: p.kind,
            api_key_env: p.api_key_env.clone(),
            base_url: Some(p.base_url.clone()),
            max_tokens_field: p.max_tokens_field,
            schema_dialect: Some(p.schema_dialect),
            images: Some(p.images),
            prompt_cache_key: Some(p.prompt_cache_key),
            request_deadline_secs: Some(p.request_deadline_secs),
            idle_timeout_secs: Some(p.idle_timeout_secs),
            max_concurrency: p.max_concurrency,
        };
        let model = ModelConfig {
            provider: p.name.clone(),
            model: self.model.clone(),
            context_window: Some(self.context_window),
            max_output_tokens: Some(self.max_output_tokens),
            pricing: self.pricing,
            tool_calls: Some(self.tool_calls).filter(|t| !t.is_native()),
        };
        Config {
            default_model: Some(self.name.clone()),
            providers: [(p.name.clone(), provider)].into(),
            models: [(self.name.clone(), model)].into(),
            sources: BTreeMap::new(),
            ignored: Vec::new(),
            permissions: Vec::new(),
            sandbox: Default::default(),
            mcp_servers: BTreeMap::new(),
            mcp: Default::default(),
        }
    }
}

impl std::fmt::Debug for ResolvedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedModel")
            .field("name", &self.name)
            .field("provider_name", &self.provider_name)
            .field("protocol", &self.protocol)
            .field("model", &self.model)
            .field("limits", &self.limits)
            .field("pricing", &self.pricing)
            .finish_non_exhaustive()
    }
}

type EnvLookup = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Resolves model names against a [`Config`].
pub struct Registry {
    config: Config,
    env: EnvLookup,
    retry: RetryPolicy,
}

impl Registry {
    /// Reads credentials from the process environment.
    pub fn new(config: Config) -> Self {
        Self::with_env(config, |name| std::env::var(name).ok())
    }

    /// Reads credentials through `env` (tests, or a scrubbed environment).
    pub fn with_env(
        config: Config,
        env: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            config,
            env: Box::new(env),
            retry: RetryPolicy::default(),
        }
    }

    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The configured default model, if any.
    pub fn default_model(&self) -> Option<&str> {
        self.config.default_model.as_deref()
    }

    /// Every credential this registry can resolve, as (variable, value): the value of each
    /// configured provider's `api_key_env` that is set, whatever the variable is called
    /// (`LAB_ACCESS` as much as `ANTHROPIC_API_KEY`). These are secrets anvil itself holds:
    /// whoever shows text to the model registers them for redaction.
    pub fn credentials(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .config
            .providers
            .values()
            .filter_map(|p| p.api_key_env.as_ref())
            .filter_map(|var| {
                (self.env)(var)
                    .filter(|v| !v.trim().is_empty())
                    .map(|value| (var.clone(), value))
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Resolves an alias or `provider:model` into a ready model (its credential must be set).
    pub fn resolve(&self, name: &str) -> Result<ResolvedModel, LlmError> {
        let pinned = self.pin(name)?;
        let provider = self.build_provider(&pinned.provider)?;
        Ok(ResolvedModel {
            name: pinned.name.clone(),
            provider_name: pinned.provider.name.clone(),
            protocol: pinned.provider.kind,
            provider,
            model: pinned.model.clone(),
            limits: ModelLimits {
                context_window: pinned.context_window,
                max_output_tokens: pinned.max_output_tokens,
            },
            pricing: pinned.pricing,
            prompt_cache_key: pinned.provider.prompt_cache_key,
            tool_calls: pinned.tool_calls,
            config_digest: pinned.digest(),
        })
    }

    /// Resolves an alias or `provider:model` into its configuration with every default made
    /// explicit, without touching the credential (which need not be set here).
    pub fn pin(&self, name: &str) -> Result<PinnedModel, LlmError> {
        let model_config = match self.config.models.get(name) {
            Some(m) => m.clone(),
            None => match name.split_once(':') {
                Some((provider, model)) if !provider.is_empty() && !model.is_empty() => {
                    if !self.config.providers.contains_key(provider) {
                        return Err(LlmError::Config(format!(
                            "unknown provider '{provider}' in '{name}'; configured providers: {}",
                            self.list(self.config.providers.keys())
                        )));
                    }
                    ModelConfig {
                        provider: provider.into(),
                        model: model.into(),
                        context_window: None,
                        max_output_tokens: None,
                        pricing: None,
                        tool_calls: None,
                    }
                }
                _ => {
                    return Err(LlmError::Config(format!(
                        "unknown model '{name}'; available aliases: {} (or name one as provider:model, e.g. ollama:qwen3:8b)",
                        self.list(self.config.models.keys())
                    )));
                }
            },
        };
        let provider_config = self.config.providers.get(&model_config.provider).ok_or_else(|| {
            LlmError::Config(format!(
                "model '{name}' uses provider '{}', which is not configured; configured providers: {}",
                model_config.provider,
                self.list(self.config.providers.keys())
            ))
        })?;
        let provider_name = model_config.provider.as_str();
        if provider_config.api_key_env.is_none() && provider_config.requires_key() {
            return Err(LlmError::Config(missing_key_env(
                provider_name,
                provider_config.kind,
            )));
        }
        let request_deadline_secs = provider_config
            .request_deadline_secs
            .unwrap_or(DEFAULT_REQUEST_DEADLINE_SECS);
        let idle_timeout_secs = provider_config
            .idle_timeout_secs
            .unwrap_or(DEFAULT_IDLE_TIMEOUT_SECS);
        // A file's zeros are refused where it is read; these come from elsewhere (a pin).
        for (setting, value) in [
            ("request_deadline_secs", Some(request_deadline_secs)),
            ("idle_timeout_secs", Some(idle_timeout_secs)),
            (
                "max_concurrency",
                provider_config.max_concurrency.map(u64::from),
            ),
        ] {
            if value == Some(0) {
                return Err(LlmError::Config(format!(
                    "provider '{provider_name}': {setting} must be at least 1"
                )));
            }
        }
        let base_url = provider_config.effective_base_url();
        let capabilities = provider_config.capabilities();
        let max_tokens_field = match provider_config.kind {
            Protocol::OpenaiChat => Some(
                provider_config
                    .max_tokens_field
                    .unwrap_or_else(|| MaxTokensField::default_for(&base_url)),
            ),
            _ => provider_config.max_tokens_field,
        };
        let context_window = model_config
            .context_window
            .unwrap_or(DEFAULT_CONTEXT_WINDOW);
        Ok(PinnedModel {
            name: name.to_string(),
            provider: PinnedProvider {
                name: provider_name.to_string(),
                kind: provider_config.kind,
                base_url,
                api_key_env: provider_config.api_key_env.clone(),
                max_tokens_field,
                schema_dialect: capabilities.schema,
                images: capabilities.images,
                prompt_cache_key: provider_config.sends_prompt_cache_key(),
                request_deadline_secs,
                idle_timeout_secs,
                max_concurrency: provider_config.max_concurrency,
            },
            model: model_config.model,
            context_window,
            max_output_tokens: model_config
                .max_output_tokens
                .unwrap_or_else(|| default_max_output_tokens(provider_config.kind, context_window)),
            pricing: model_config.pricing,
            tool_calls: model_config.tool_calls.unwrap_or_default(),
        })
    }

    fn build_provider(&self, config: &PinnedProvider) -> Result<Arc<dyn Provider>, LlmError> {
        let name = config.name.as_str();
        let api_key = match &config.api_key_env {
            Some(var) => match (self.env)(var).filter(|v| !v.trim().is_empty()) {
                Some(key) => Some(key),
                None => {
                    return Err(LlmError::Config(format!(
                        "{var} is not set (needed by provider '{name}')"
                    )));
                }
            },
            None => None,
        };
        let base_url = config.base_url.clone();
        let options = HttpOptions {
            request_deadline: Duration::from_secs(config.request_deadline_secs),
            idle_timeout: Duration::from_secs(config.idle_timeout_secs),
            ..HttpOptions::default()
        };
        let caps = Capabilities::of(config.kind)
            .with_schema(config.schema_dialect)
            .with_images(config.images);
        let inner: Arc<dyn Provider> = match config.kind {
            Protocol::Anthropic => {
                let provider = match api_key {
                    Some(key) => Anthropic::new(key)?,
                    None if crate::config::requires_key(config.kind, &base_url) => {
                        return Err(LlmError::Config(missing_key_env(name, config.kind)));
                    }
                    None => Anthropic::without_key()?,
                };
                Arc::new(
                    provider
                        .with_base_url(base_url)
                        .with_name(name)
                        .with_capabilities(caps)
                        .with_options(options)?,
                )
            }
            Protocol::OpenaiChat => Arc::new(
                OpenAiChat::new(api_key)?
                    .with_base_url(&base_url)
                    .with_name(name)
                    .with_capabilities(caps)
                    .with_max_tokens_field(
                        config
                            .max_tokens_field
                            .unwrap_or_else(|| MaxTokensField::default_for(&base_url)),
                    )
                    .with_options(options)?,
            ),
            Protocol::OpenaiResponses => Arc::new(
                OpenAiResponses::new(api_key)?
                    .with_base_url(&base_url)
                    .with_name(name)
                    .with_capabilities(caps)
                    .with_options(options)?,
            ),
            Protocol::Gemini => {
                let key =
                    api_key.ok_or_else(|| LlmError::Config(missing_key_env(name, config.kind)))?;
                Arc::new(
                    Gemini::new(key)?
                        .with_base_url(&base_url)
                        .with_name(name)
                        .with_capabilities(caps)
                        .with_options(options)?,
                )
            }
        };
        let retrying: Arc<dyn Provider> = Arc::new(Retry::new(inner, self.retry));
        // The slot is taken before the first attempt and kept through the retries, so that
        // neither the deadlines nor the retry budget count the wait for it.
        Ok(match config.max_concurrency {
            Some(max) => Arc::new(Limited::new(retrying, name, &config.base_url, max)),
            None => retrying,
        })
    }

    fn list<'a>(&self, names: impl Iterator<Item = &'a String>) -> String {
        let names: Vec<&str> = names.map(String::as_str).collect();
        if names.is_empty() {
            "(none)".into()
        } else {
            names.join(", ")
        }
    }
}

/// The error of a provider that needs a key and names no `api_key_env`.
fn missing_key_env(provider: &str, kind: Protocol) -> String {
    match kind {
        Protocol::Anthropic => format!(
            "provider '{provider}' (anthropic) needs api_key_env: Anthropic's own endpoint requires a key (a server at another base_url may go without)"
        ),
        Protocol::Gemini => {
            format!("provider '{provider}' (gemini) needs api_key_env: Gemini requires a key")
        }
        _ => format!(
            "provider '{provider}' ({}) needs api_key_env: it requires a key",
            kind.as_str()
        ),
    }
}

/// Where `new` differs from `old`, field by field (`a.b before → after`).
fn diff(path: &str, old: &serde_json::Value, new: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let field = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let get = |m: &serde_json::Map<String, Value>| m.get(key).cloned();
                diff(
                    &field,
                    &get(a).unwrap_or_default(),
                    &get(b).unwrap_or_default(),
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(format!("{path} {a} → {b}")),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigFile;
    use std::path::Path;

    fn registry(user: &str, env: &'static [(&'static str, &'static str)]) -> Registry {
        let file = ConfigFile::parse(user, Path::new("u.toml")).unwrap();
        let config = Config::merge(Some(("u.toml".into(), file)), None, false).unwrap();
        Registry::with_env(config, move |name| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn a_missing_key_names_the_variable_and_the_provider() {
        let err = registry("", &[]).resolve("sonnet").unwrap_err();
        assert_eq!(
            err.to_string(),
            "ANTHROPIC_API_KEY is not set (needed by provider 'anthropic')"
        );
        assert!(matches!(err, LlmError::Config(_)));
    }

    #[test]
    fn a_pinned_model_is_explicit_and_carries_no_key() {
        let reg = registry(
            "[providers.lab]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:8080/v1/\"\napi_key_env = \"LAB_KEY\"\n\n[models.local]\nprovider = \"lab\"\nmodel = \"qwen3:8b\"\n",
            &[
                ("LAB_KEY", "sk-lab-secret"),
                ("ANTHROPIC_API_KEY", "sk-ant-secret"),
            ],
        );
        let pinned = reg.pin("local").unwrap();
        insta::assert_json_snapshot!("pinned_openai_chat", pinned);
        let sonnet = reg.pin("sonnet").unwrap();
        insta::assert_json_snapshot!("pinned_sonnet", sonnet);
        for p in [&pinned, &sonnet] {
            let json = serde_json::to_string(p).unwrap();
            assert!(!json.contains("secret"), "{json}");
            let back: PinnedModel = serde_json::from_str(&json).unwrap();
            assert_eq!(&back, p);
        }
        // Resolving gives the same digest as pinning.
        assert_eq!(reg.resolve("local").unwrap().config_digest, pinned.digest());
    }

    #[test]
    fn credentials_are_every_configured_key_whatever_its_name() {
        let reg = registry(
            "[providers.lab]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:8080/v1\"\napi_key_env = \"LAB_ACCESS\"\n\n\
             [providers.lab2]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:8081/v1\"\napi_key_env = \"LAB_ACCESS\"\n",
            &[
                ("LAB_ACCESS", "lab-access-value"),
                ("ANTHROPIC_API_KEY", "sk-ant-secret"),
                ("GEMINI_API_KEY", "  "),
                ("UNRELATED", "not-a-credential"),
            ],
        );
        assert_eq!(
            reg.credentials(),
            [
                ("ANTHROPIC_API_KEY".to_string(), "sk-ant-secret".to_string()),
                ("LAB_ACCESS".to_string(), "lab-access-value".to_string()),
            ]
        );
    }

    #[test]
    fn the_request_deadline_is_pinned_and_in_the_digest() {
        let reg = registry(
            "[providers.lab]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:8080/v1\"\nrequest_deadline_secs = 30\n",
            &[],
        );
        let lab = reg.pin("lab:m").unwrap();
        assert_eq!(lab.provider.request_deadline_secs, 30);
        let sonnet = reg.pin("sonnet").unwrap();
        assert_eq!(
            sonnet.provider.request_deadline_secs,
            DEFAULT_REQUEST_DEADLINE_SECS
        );
        let mut longer = sonnet.clone();
        longer.provider.request_deadline_secs = 1200;
        assert_ne!(longer.digest(), sonnet.digest());
        assert_eq!(
            longer.changes_from(&sonnet),
            ["provider.request_deadline_secs 600 → 1200"]
        );
        // It survives the round trip through a pinned model's own config.
        let again = Registry::with_env(lab.config(), |_| None);
        assert_eq!(again.pin("lab:m").unwrap(), lab);
        // A zero in a file is refused where the file is read (config's tests); one that
        // reaches the registry otherwise (a pin) is refused here.
        for setting in [
            "request_deadline_secs",
            "idle_timeout_secs",
            "max_concurrency",
        ] {
            let mut zero = lab.config();
            let p = zero.providers.get_mut("lab").unwrap();
            match setting {
                "request_deadline_secs" => p.request_deadline_secs = Some(0),
                "idle_timeout_secs" => p.idle_timeout_secs = Some(0),
                _ => p.max_concurrency = Some(0),
            }
            let err = Registry::with_env(zero, |_| None)
                .pin("lab:m")
                .unwrap_err()
                .to_string();
            assert_eq!(err, format!("provider 'lab': {setting} must be at least 1"));
        }
    }

    #[test]
    fn the_default_output_limit_is_a_quarter_of_the_window_capped_per_kind() {
        let reg = registry(
            "[providers.lab]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:8080/v1\"\n\n\
             [models.small]\nprovider = \"lab\"\nmodel = \"m\"\ncontext_window = 8192\n\n\
             [models.big]\nprovider = \"lab\"\nmodel = \"m\"\ncontext_window = 131072\n\n\
             [models.set]\nprovider = \"lab\"\nmodel = \"m\"\ncontext_window = 8192\nmax_output_tokens = 4000\n\n\
             [models.claude]\nprovider = \"anthropic\"\nmodel = \"c\"\ncontext_window = 1000000\n\n\
             [models.gem]\nprovider = \"gemini\"\nmodel = \"g\"\ncontext_window = 1048576\n",
            &[],
        );
        let out = |name: &str| reg.pin(name).unwrap().max_output_tokens;
        assert_eq!(out("small"), 2048);
        assert_eq!(out("big"), 16_384, "capped for OpenAI-protocol servers");
        assert_eq!(out("set"), 4000, "a configured limit is kept as is");
        assert_eq!(out("claude"), 32_000);
        assert_eq!(out("gem"), 8_192);
        // Without a window either: a quarter of the default window on every kind.
        for name in ["lab:m", "anthropic:c", "gemini:g", "openai:o"] {
            assert_eq!(out(name), 8_192, "{name}");
        }
        assert_eq!(default_max_output_tokens(Protocol::OpenaiChat, 3), 1);
    }

    #[test]
    fn idle_timeout_and_max_concurrency_are_pinned_and_left_out_at_their_defaults() {
        let reg = registry(
            "[providers.lab]\nkind = \"openai-chat\"\nbase_url = \"http://127.0.0.1:8080/v1\"\nidle_timeout_secs = 300\nmax_concurrency = 1\n",
            &[],
        );
        let lab = reg.pin("lab:m").unwrap();
        assert_eq!(lab.provider.idle_timeout_secs, 300);
        assert_eq!(lab.provider.max_concurrency, Some(1));
        let json = serde_json::to_value(&lab).unwrap();
        assert_eq!(json["provider"]["idle_timeout_secs"], 300);
        assert_eq!(json["provider"]["max_concurrency"], 1);
        // A resolved model's provider takes turns in the process-wide slots.
        let slots = lab.provider.slots().unwrap();
        assert_eq!(slots.available_permits(), 1);
        assert!(Arc::ptr_eq(&slots, &lab.provider.slots().unwrap()));
        let again = Registry::with_env(lab.config(), |_| None);
        assert_eq!(again.pin("lab:m").unwrap(), lab);
        // At their defaults they are not written, so older pins keep their digests.
        let plain = reg.pin("ollama:m").unwrap();
        assert_eq!(plain.provider.idle_timeout_secs, DEFAULT_IDLE_TIMEOUT_SECS);
        assert_eq!(plain.provider.max_concurrency, None);
        assert!(plain.provider.slots().is_none());
        let json = serde_json::to_value(&plain).unwrap();
        assert!(
            json["provider"].get("idle_timeout_secs").is_none(),
            "{json}"
        );
        assert!(json["provider"].get("max_concurrency").is_none(), "{json}");
        let mut changed = plain.clone();
        changed.provider.max_concurrency = Some(2);
        assert_eq!(
            changed.changes_from(&plain),
            ["provider.max_concurrency null → 2"]
        );
        assert_ne!(changed.digest(), plain.digest());
    }

    #[test]
    fn anthropic_elsewhere_needs_no_key_but_at_anthropic_it_does() {
        let reg = registry(
            "[providers.llama]\nkind = \"anthropic\"\nbase_url = \"http://127.0.0.1:8080\"\n\n\
             [providers.direct]\nkind = \"anthropic\"\nbase_url = \"https://api.anthropic.com/v1\"\n\n\
             [providers.gem]\nkind = \"gemini\"\nbase_url = \"http://127.0.0.1:8081/v1beta\"\n",
            &[],
        );
        let llama = reg.resolve("llama:qwen").unwrap();
        assert_eq!(llama.protocol, Protocol::Anthropic);
        assert_eq!(reg.pin("llama:qwen").unwrap().provider.api_key_env, None);
        let err = reg.pin("direct:claude").unwrap_err().to_string();
        assert!(
            err.contains("provider 'direct' (anthropic) needs api_key_env"),
            "{err}"
        );
        let err = reg.pin("gem:g").unwrap_err().to_string();
        assert!(err.contains("Gemini requires a key"), "{err}");
        // A pinned keyless Anthropic provider at Anthropic's endpoint is refused too.
        let mut pinned = reg.pin("llama:qwen").unwrap();
        pinned.provider.base_url = "https://api.anthropic.com".into();
        let err = Registry::with_env(pinned.config(), |_| None)
            .resolve("llama:qwen")
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs api_key_env"), "{err}");
    }

    #[test]
    fn pinning_needs_no_credential() {
        let pinned = registry("", &[]).pin("sonnet").unwrap();
        assert_eq!(
            pinned.provider.api_key_env.as_deref(),
            Some("ANTHROPIC_API_KEY")
        );
        assert_eq!(pinned.provider.base_url, "https://api.anthropic.com");
    }

    #[test]
    fn a_pinned_model_resolves_to_itself_from_its_own_config() {
        let pinned = registry("", &[]).pin("ollama:qwen3:8b").unwrap();
        let reg = Registry::with_env(pinned.config(), |_| None);
        assert_eq!(reg.pin(&pinned.name).unwrap(), pinned);
        assert_eq!(reg.default_model(), Some("ollama:qwen3:8b"));
        assert!(reg.config().permissions.is_empty());
        let resolved = reg.resolve(&pinned.name).unwrap();
        assert_eq!(resolved.config_digest, pinned.digest());
        assert_eq!(resolved.provider.name(), "ollama");
    }

    #[test]
    fn changes_name_each_field_and_change_the_digest() {
        let old = registry("", &[]).pin("sonnet").unwrap();
        let mut new = old.clone();
        new.provider.base_url = "https://proxy.example".into();
        new.max_output_tokens = 8000;
        assert_ne!(new.digest(), old.digest());
        assert_eq!(
            new.changes_from(&old),
            [
                "max_output_tokens 16000 → 8000",
                "provider.base_url \"https://api.anthropic.com\" → \"https://proxy.example\"",
            ]
        );
        let mut renamed = old.clone();
        renamed.name = "other".into();
        assert_eq!(renamed.digest(), old.digest(), "the alias is not behaviour");
        let mut unpriced = old.clone();
        unpriced.pricing = None;
        assert!(
            unpriced.changes_from(&old)[0].starts_with("pricing {\"cache_read\":0.3,"),
            "{:?}",
            unpriced.changes_from(&old)
        );
    }

    #[test]
    fn provider_colon_model_needs_no_models_entry() {
        let m = registry("", &[]).resolve("ollama:qwen3:8b").unwrap();
        assert_eq!(m.provider_name, "ollama");
        assert_eq!(m.model, "qwen3:8b");
        assert_eq!(
            m.limits,
            ModelLimits {
                context_window: DEFAULT_CONTEXT_WINDOW,
                max_output_tokens: DEFAULT_CONTEXT_WINDOW / 4
            }
        );
        assert_eq!(m.pricing, None);
        assert_eq!(m.provider.name(), "ollama");
    }

    #[test]
    fn an_unknown_alias_lists_the_available_ones() {
        let reg = registry(
            "[models.local]\nprovider = \"ollama\"\nmodel = \"qwen3:8b\"\n",
            &[],
        );
        let err = reg.resolve("sonet").unwrap_err().to_string();
        assert!(
            err.starts_with("unknown model 'sonet'; available aliases: haiku, local, sonnet"),
            "{err}"
        );
        let err = reg.resolve("nope:model").unwrap_err().to_string();
        assert!(err.contains("unknown provider 'nope'"), "{err}");
    }

    #[test]
    fn aliases_resolve_with_their_limits_and_pricing() {
        let m = registry("", &[("ANTHROPIC_API_KEY", "sk-ant-test")])
            .resolve("sonnet")
            .unwrap();
        assert_eq!(m.model, "claude-sonnet-4-5");
        assert_eq!(m.limits.context_window, 200_000);
        assert_eq!(m.pricing.map(|p| p.output), Some(15.0));
        assert_eq!(m.config_digest.len(), 64);
    }

    #[test]
    fn every_protocol_resolves() {
        let reg = registry(
            "",
            &[
                ("GEMINI_API_KEY", "g"),
                ("OPENAI_API_KEY", "o"),
                ("ANTHROPIC_API_KEY", "a"),
            ],
        );
        for (name, protocol) in [
            ("gemini:gemini-2.5-pro", Protocol::Gemini),
            ("openai:gpt-5", Protocol::OpenaiResponses),
            ("anthropic:claude-haiku-4-5", Protocol::Anthropic),
            ("ollama:qwen3:8b", Protocol::OpenaiChat),
        ] {
            assert_eq!(reg.resolve(name).unwrap().protocol, protocol, "{name}");
        }
        let err = registry("", &[])
            .resolve("gemini:gemini-2.5-pro")
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "GEMINI_API_KEY is not set (needed by provider 'gemini')"
        );
    }
}
