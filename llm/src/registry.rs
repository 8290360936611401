//! [`Registry`]: resolves a model name into a ready provider, a model id and its limits.
//!
//! A name is a model alias from config (`sonnet`, `local`) or `provider:model`
//! (`ollama:qwen3:8b`), which needs no `[models]` entry and gets conservative default limits.

use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::config::{Config, ModelConfig, Pricing, ProviderConfig, hex};
use crate::error::LlmError;
use crate::protocol::Protocol;
use crate::provider::Provider;
use crate::providers::anthropic::Anthropic;
use crate::providers::gemini::Gemini;
use crate::providers::openai_chat::{MaxTokensField, OpenAiChat};
use crate::providers::openai_responses::OpenAiResponses;
use crate::retry::{Retry, RetryPolicy};

/// Limits used when config says nothing: small enough for any current model.
pub const DEFAULT_CONTEXT_WINDOW: u32 = 32_768;
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 4_096;

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
    /// sha256 of everything that decides this model's behaviour (protocol, endpoint, model id,
    /// limits), recorded with eval results. The credential is not part of it.
    pub config_digest: String,
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

    /// Resolves an alias or `provider:model`.
    pub fn resolve(&self, name: &str) -> Result<ResolvedModel, LlmError> {
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
        let provider = self.build_provider(&model_config.provider, provider_config)?;
        let limits = ModelLimits {
            context_window: model_config
                .context_window
                .unwrap_or(DEFAULT_CONTEXT_WINDOW),
            max_output_tokens: model_config
                .max_output_tokens
                .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
        };
        let config_digest = {
            let identity = serde_json::json!({
                "protocol": provider_config.kind,
                "base_url": provider_config.effective_base_url(),
                "max_tokens_field": provider_config.max_tokens_field,
                "model": model_config.model,
                "context_window": limits.context_window,
                "max_output_tokens": limits.max_output_tokens,
            });
            hex(&Sha256::digest(identity.to_string().as_bytes()))
        };
        Ok(ResolvedModel {
            name: name.to_string(),
            provider_name: model_config.provider.clone(),
            protocol: provider_config.kind,
            provider,
            model: model_config.model,
            limits,
            pricing: model_config.pricing,
            prompt_cache_key: provider_config.sends_prompt_cache_key(),
            config_digest,
        })
    }

    fn build_provider(
        &self,
        name: &str,
        config: &ProviderConfig,
    ) -> Result<Arc<dyn Provider>, LlmError> {
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
        let base_url = config.effective_base_url();
        let inner: Arc<dyn Provider> = match config.kind {
            Protocol::Anthropic => {
                let key = api_key.ok_or_else(|| {
                    LlmError::Config(format!(
                        "provider '{name}' (anthropic) needs api_key_env: Anthropic requires a key"
                    ))
                })?;
                Arc::new(
                    Anthropic::new(key)?
                        .with_base_url(base_url)
                        .with_name(name)
                        .with_capabilities(config.capabilities()),
                )
            }
            Protocol::OpenaiChat => Arc::new(
                OpenAiChat::new(api_key)?
                    .with_base_url(&base_url)
                    .with_name(name)
                    .with_capabilities(config.capabilities())
                    .with_max_tokens_field(
                        config
                            .max_tokens_field
                            .unwrap_or_else(|| MaxTokensField::default_for(&base_url)),
                    ),
            ),
            Protocol::OpenaiResponses => Arc::new(
                OpenAiResponses::new(api_key)?
                    .with_base_url(&base_url)
                    .with_name(name)
                    .with_capabilities(config.capabilities()),
            ),
            Protocol::Gemini => {
                let key = api_key.ok_or_else(|| {
                    LlmError::Config(format!(
                        "provider '{name}' (gemini) needs api_key_env: Gemini requires a key"
                    ))
                })?;
                Arc::new(
                    Gemini::new(key)?
                        .with_base_url(&base_url)
                        .with_name(name)
                        .with_capabilities(config.capabilities()),
                )
            }
        };
        Ok(Arc::new(Retry::new(inner, self.retry)))
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
    fn provider_colon_model_needs_no_models_entry() {
        let m = registry("", &[]).resolve("ollama:qwen3:8b").unwrap();
        assert_eq!(m.provider_name, "ollama");
        assert_eq!(m.model, "qwen3:8b");
        assert_eq!(
            m.limits,
            ModelLimits {
                context_window: DEFAULT_CONTEXT_WINDOW,
                max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS
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
