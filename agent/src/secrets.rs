//! Keeping credentials out of child processes and out of everything the model sees.
//!
//! - [`ChildEnv`]: subprocesses get an allowlisted environment plus an explicit passthrough
//!   list, never the whole parent environment (which holds provider API keys).
//! - [`Redactor`]: every value of a secret-looking variable in anvil's own environment is
//!   replaced by `[REDACTED:NAME]` in every tool result, whatever printed it.

use std::collections::BTreeSet;

/// Variables a child process gets by default: enough for compilers, shells and test runners.
pub const DEFAULT_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TMPDIR",
    "TZ",
    "PWD",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "JAVA_HOME",
    "VIRTUAL_ENV",
    "PYENV_ROOT",
    "NVM_DIR",
    "CC",
    "CXX",
    "COLORTERM",
    "NO_COLOR",
];

/// Prefixes allowed as a family (`LC_ALL`, `LC_CTYPE`, …).
const ALLOWED_PREFIXES: &[&str] = &["LC_"];

/// Names that mark a variable as a credential.
const SECRET_MARKERS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
];

/// The environment for child processes.
#[derive(Debug, Clone, Default)]
pub struct ChildEnv {
    /// Extra variable names the user chose to pass through (trusted config only).
    pub passthrough: BTreeSet<String>,
    /// The environment to filter; `None` is this process's environment.
    base: Option<Vec<(String, String)>>,
}

impl ChildEnv {
    pub fn with_passthrough(names: impl IntoIterator<Item = String>) -> Self {
        Self {
            passthrough: names.into_iter().collect(),
            base: None,
        }
    }

    /// Filters `base` instead of this process's environment.
    pub fn with_base(mut self, base: Vec<(String, String)>) -> Self {
        self.base = Some(base);
        self
    }

    fn allowed(&self, name: &str) -> bool {
        DEFAULT_ALLOWLIST.contains(&name)
            || ALLOWED_PREFIXES.iter().any(|p| name.starts_with(p))
            || self.passthrough.contains(name)
    }

    /// The variables of `from` a child may see. Use with `Command::env_clear().envs(..)`.
    pub fn filter(
        &self,
        from: impl IntoIterator<Item = (String, String)>,
    ) -> Vec<(String, String)> {
        from.into_iter().filter(|(k, _)| self.allowed(k)).collect()
    }

    /// [`filter`](Self::filter) over the base environment.
    pub fn vars(&self) -> Vec<(String, String)> {
        match &self.base {
            Some(base) => self.filter(base.iter().cloned()),
            None => self.filter(std::env::vars()),
        }
    }
}

fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKERS.iter().any(|m| upper.contains(m))
}

/// Replaces known secret values with a placeholder naming their variable.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// (value, variable name), longest value first so overlapping secrets redact fully.
    secrets: Vec<(String, String)>,
}

impl Redactor {
    /// Values shorter than this are ignored: redacting "1" or "true" would garble output.
    pub const MIN_LEN: usize = 8;

    /// From variables whose names look like credentials (KEY, TOKEN, SECRET, …).
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut secrets: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(name, value)| looks_secret(name) && value.len() >= Self::MIN_LEN)
            .map(|(name, value)| (value, name))
            .collect();
        secrets.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.1.cmp(&b.1)));
        secrets.dedup_by(|a, b| a.0 == b.0);
        Self { secrets }
    }

    /// From the current process environment.
    pub fn from_env() -> Self {
        Self::from_vars(std::env::vars())
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (value, name) in &self.secrets {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), &format!("[REDACTED:{name}]"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn children_get_the_allowlist_and_passthrough_only() {
        let env = ChildEnv::with_passthrough(["MY_TOOL_HOME".to_string()]);
        let got = env.filter(vars(&[
            ("PATH", "/bin"),
            ("LC_ALL", "C"),
            ("ANTHROPIC_API_KEY", "sk-ant-123456789"),
            ("AWS_SECRET_ACCESS_KEY", "abcdefghijkl"),
            ("MY_TOOL_HOME", "/opt/t"),
            ("RANDOM_THING", "x"),
        ]));
        let names: Vec<&str> = got.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["PATH", "LC_ALL", "MY_TOOL_HOME"]);
    }

    #[test]
    fn secret_values_are_redacted_everywhere() {
        let r = Redactor::from_vars(vars(&[
            ("ANTHROPIC_API_KEY", "sk-ant-123456789"),
            ("GITHUB_TOKEN", "ghp_abcdefghij"),
            ("SHORT_KEY", "abc"),
            ("PATH", "/usr/local/bin:/usr/bin"),
        ]));
        let text = "key=sk-ant-123456789 tok ghp_abcdefghij abc /usr/bin";
        assert_eq!(
            r.redact(text),
            "key=[REDACTED:ANTHROPIC_API_KEY] tok [REDACTED:GITHUB_TOKEN] abc /usr/bin"
        );
    }
}
