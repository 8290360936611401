//! `[mcp_servers.NAME]`: an MCP server the agent may use, as a config file declares it — a
//! stdio command (`command`, `args`, `env`, `cwd`) or a streamable-HTTP endpoint (`url`,
//! `headers`). A header's value is never written in the file: `headers` maps each header to the
//! *name* of the environment variable holding its value. Servers from a project config start
//! only once the project is trusted (they run commands and receive credentials): the merge
//! ([`crate::config::Config::merge`]) lists an untrusted project's servers as ignored, and
//! they are part of the project's trust digest, so a changed command needs a new grant.
//!
//! Checked when the config is loaded ([`McpServerConfig::check`]): a bad server is an error
//! naming the file and the key, never a silently skipped one.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How long a server has to start by default (its `initialize` answered and tools listed).
pub const DEFAULT_STARTUP_TIMEOUT_SECS: u64 = 10;
/// How long one tool call may take by default.
pub const DEFAULT_TOOL_TIMEOUT_SECS: u64 = 60;

/// One `[mcp_servers.NAME]` table as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Stdio: the program to run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Stdio: variables set for the server beside the scrubbed environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Stdio: where it runs, relative to the workspace (default: the user's home directory, so
    /// that `python3 -m NAME` or `npx NAME` never picks up a repository's own `NAME`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Streamable HTTP: the endpoint (`http://` or `https://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Streamable HTTP: header name → the environment variable holding its value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_secs: Option<u64>,
    /// `false` keeps the server declared but never started.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub enabled: bool,
    /// Only these tools of the server are offered (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled_tools: Option<Vec<String>>,
    /// These tools of the server are never offered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled_tools: Vec<String>,
    /// Believe the server's tool annotations: a tool marked `readOnlyHint: true` then runs
    /// without asking in the default mode. Off by default: an annotation is the server's claim,
    /// and a tool without one is judged as doing anything.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trusted: bool,
}

/// `[mcp]`: settings for all servers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSettings {
    /// With more MCP tools than this (default 30), only `tool_search` is offered in their
    /// place and a search loads the matching ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defer_over_tools: Option<usize>,
    /// The same when their specs (name, description, schema) exceed this many bytes
    /// (default 20000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defer_over_bytes: Option<usize>,
}

impl McpSettings {
    pub fn is_unset(&self) -> bool {
        *self == McpSettings::default()
    }

    /// `other`'s keys over these.
    pub fn overlay(self, other: McpSettings) -> McpSettings {
        McpSettings {
            defer_over_tools: other.defer_over_tools.or(self.defer_over_tools),
            defer_over_bytes: other.defer_over_bytes.or(self.defer_over_bytes),
        }
    }
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// How anvil reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport<'a> {
    Stdio {
        command: &'a str,
        args: &'a [String],
    },
    Http {
        url: &'a str,
    },
}

impl McpServerConfig {
    /// Why server `name` cannot be used as written, if it cannot.
    pub fn check(&self, name: &str) -> Result<(), String> {
        if !valid_name(name) {
            return Err(format!(
                "mcp_servers.{name}: a server name is 1 to 64 letters, digits, `_` or `-`, with \
                 no `__` and no `_` at either end (it becomes part of its tools' names, \
                 mcp__{name}__TOOL, and rules like mcp__{name}__* must name only its tools)"
            ));
        }
        let key = format!("mcp_servers.{name}");
        self.transport().map_err(|e| format!("{key}: {e}"))?;
        if self.url.is_some()
            && (!self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some())
        {
            return Err(format!(
                "{key}: args, env and cwd are for a stdio server (command); an HTTP server (url) \
                 takes headers"
            ));
        }
        if self.command.is_some() && !self.headers.is_empty() {
            return Err(format!(
                "{key}: headers are for an HTTP server (url); a stdio server takes env"
            ));
        }
        for (header, var) in &self.headers {
            if !valid_env_name(var) {
                return Err(format!(
                    "{key}.headers.{header}: the value names the environment variable holding \
                     the header's value (like GITHUB_TOKEN), never the value itself; '{var}' is \
                     not a variable name"
                ));
            }
        }
        for (what, secs) in [
            ("startup_timeout_secs", self.startup_timeout_secs),
            ("tool_timeout_secs", self.tool_timeout_secs),
        ] {
            if secs == Some(0) {
                return Err(format!("{key}.{what}: a timeout is at least 1 second"));
            }
        }
        if let Some(enabled) = &self.enabled_tools
            && let Some(tool) = enabled.iter().find(|t| self.disabled_tools.contains(t))
        {
            return Err(format!(
                "{key}: tool '{tool}' is in both enabled_tools and disabled_tools"
            ));
        }
        Ok(())
    }

    /// Stdio or HTTP: exactly one of `command` and `url`.
    pub fn transport(&self) -> Result<McpTransport<'_>, String> {
        match (&self.command, &self.url) {
            (Some(command), None) if !command.trim().is_empty() => Ok(McpTransport::Stdio {
                command,
                args: &self.args,
            }),
            (Some(_), None) => Err("command is empty".into()),
            (None, Some(url)) if url.starts_with("http://") || url.starts_with("https://") => {
                Ok(McpTransport::Http { url })
            }
            (None, Some(url)) => Err(format!("url '{url}' is not an http:// or https:// URL")),
            (Some(_), Some(_)) => {
                Err("give either command (a stdio server) or url (an HTTP server), not both".into())
            }
            (None, None) => {
                Err("give command (a stdio server) or url (a streamable-HTTP server)".into())
            }
        }
    }

    /// The startup timeout in seconds.
    pub fn startup_timeout(&self) -> u64 {
        self.startup_timeout_secs
            .unwrap_or(DEFAULT_STARTUP_TIMEOUT_SECS)
    }

    /// The per-call timeout in seconds.
    pub fn tool_timeout(&self) -> u64 {
        self.tool_timeout_secs.unwrap_or(DEFAULT_TOOL_TIMEOUT_SECS)
    }

    /// Whether tool `tool` of this server is offered.
    pub fn offers(&self, tool: &str) -> bool {
        !self.disabled_tools.iter().any(|t| t == tool)
            && self
                .enabled_tools
                .as_ref()
                .is_none_or(|only| only.iter().any(|t| t == tool))
    }
}

/// A server name that keeps rules per server: `mcp__NAME__*` must not also match another
/// server's tools, so no `__` inside and no `_` at either end (`x_`'s tools would start
/// `mcp__x___`, which `mcp__x__*` matches).
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.contains("__")
        && !name.starts_with('_')
        && !name.ends_with('_')
}

fn valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<BTreeMap<String, McpServerConfig>, String> {
        #[derive(Deserialize)]
        struct File {
            mcp_servers: BTreeMap<String, McpServerConfig>,
        }
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        for (name, server) in &file.mcp_servers {
            server.check(name)?;
        }
        Ok(file.mcp_servers)
    }

    #[test]
    fn stdio_and_http_servers_read_with_their_defaults() {
        let servers = parse(
            r#"
[mcp_servers.everything]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-everything"]
env = { DEBUG = "1" }
tool_timeout_secs = 5
disabled_tools = ["printEnv"]

[mcp_servers.github]
url = "https://api.githubcopilot.com/mcp/"
headers = { Authorization = "GITHUB_MCP_AUTH" }
enabled = false
"#,
        )
        .unwrap();
        let everything = &servers["everything"];
        assert_eq!(
            everything.transport(),
            Ok(McpTransport::Stdio {
                command: "npx",
                args: &everything.args
            })
        );
        assert!(everything.enabled);
        assert_eq!(
            (everything.startup_timeout(), everything.tool_timeout()),
            (10, 5)
        );
        assert!(everything.offers("echo") && !everything.offers("printEnv"));
        let github = &servers["github"];
        assert!(!github.enabled);
        assert!(matches!(github.transport(), Ok(McpTransport::Http { .. })));
    }

    #[test]
    fn a_server_that_cannot_work_is_an_error_naming_its_key() {
        for (text, want) in [
            (
                "[mcp_servers.a]\nargs = [\"x\"]\n",
                "mcp_servers.a: give command",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nurl = \"http://h\"\n",
                "not both",
            ),
            (
                "[mcp_servers.a]\nurl = \"ftp://h\"\n",
                "not an http:// or https:// URL",
            ),
            (
                "[mcp_servers.a]\nurl = \"https://h\"\nheaders = { Authorization = \"Bearer abc123\" }\n",
                "mcp_servers.a.headers.Authorization: the value names the environment variable",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nheaders = { X = \"Y\" }\n",
                "headers are for an HTTP server",
            ),
            (
                "[mcp_servers.a]\nurl = \"https://h\"\nenv = { X = \"1\" }\n",
                "args, env and cwd are for a stdio server",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\ntool_timeout_secs = 0\n",
                "mcp_servers.a.tool_timeout_secs: a timeout is at least 1 second",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nenabled_tools = [\"t\"]\ndisabled_tools = [\"t\"]\n",
                "in both enabled_tools and disabled_tools",
            ),
            (
                "[mcp_servers.\"a b\"]\ncommand = \"x\"\n",
                "a server name is 1 to 64",
            ),
            (
                "[mcp_servers.x_]\ncommand = \"x\"\n",
                "no `_` at either end",
            ),
            ("[mcp_servers.x__y]\ncommand = \"x\"\n", "no `__`"),
            (
                "[mcp_servers.a]\ncommand = \"x\"\ncomand = \"y\"\n",
                "unknown field",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(want), "{text}: {err}");
        }
    }
}
