//! Permissions: every tool call is judged before it runs.
//!
//! Rules name a tool and optionally a pattern over the call's *permission subject* (the command
//! for bash, the path for file tools):
//!
//! ```text
//! read_file                 any read_file call
//! bash(cargo test:*)        bash commands starting with "cargo test"
//! bash(git status)          exactly "git status"
//! edit_file(src/**)         edits of paths matching the glob (relative to the workspace)
//! mcp__github__*            every tool whose name starts with "mcp__github__" (a tool selector,
//!                           matched on names, separate from subject globs)
//! ```
//!
//! [`Policy::decide`] applies, in order: hard deny rules; plan mode (nothing but reads); paths
//! outside the workspace, which need a separate grant no allow rule or mode provides; ask rules;
//! allow rules (session rules included) — for bash, *every* command of a compound line must be
//! allowed, and a line with command substitution is never allowed by a rule; finally the mode's
//! default. A tool whose effects are unknown (`Effects::unknown`, e.g. an MCP tool) is judged as
//! doing anything: plan mode denies it, and short of bypass only an allow rule naming it lets
//! it run without asking.

/// The shell grammar that permission rules will judge bash lines with.
pub mod shell;

use std::path::PathBuf;

use globset::{Glob, GlobMatcher};
use serde_json::Value;

use crate::file_access::FileAccess;
use crate::tool::{Effects, Tool};

/// The fallback decision when no rule decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionMode {
    /// Reads only: anything else is denied, whatever the rules say.
    Plan,
    /// Reads are allowed; everything else asks.
    Default,
    /// Reads and file edits are allowed; commands ask.
    AcceptEdits,
    /// Everything is allowed, except hard denies and outside-workspace paths.
    Bypass,
}

#[derive(Debug, Clone)]
pub enum Pattern {
    /// `cmd:*`
    Prefix(String),
    Exact(String),
    Glob(GlobMatcher),
}

#[derive(Debug, Clone)]
pub enum ToolSelector {
    Exact(String),
    /// `prefix*`: every tool whose name starts with `prefix`.
    Wildcard(String),
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub tool: ToolSelector,
    pub pattern: Option<Pattern>,
    /// The rule as written, for messages.
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid permission rule '{rule}': {reason}")]
pub struct RuleError {
    pub rule: String,
    pub reason: String,
}

impl Rule {
    /// Parses `tool`, `tool(pattern)`, `tool(prefix:*)` or `prefix*`.
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let err = |reason: &str| RuleError {
            rule: text.to_string(),
            reason: reason.to_string(),
        };
        let t = text.trim();
        if t.is_empty() {
            return Err(err("it is empty"));
        }
        let (tool, pattern) = match t.find('(') {
            Some(open) => {
                let Some(inner) = t[open + 1..].strip_suffix(')') else {
                    return Err(err("an opening '(' needs a closing ')' at the end"));
                };
                if inner.trim().is_empty() {
                    return Err(err(
                        "the pattern between the parentheses is empty; write the tool name alone to match every call",
                    ));
                }
                (&t[..open], Some(inner.trim()))
            }
            None if t.contains(')') => return Err(err("a ')' without an opening '('")),
            None => (t, None),
        };
        let tool_sel = match tool.strip_suffix('*') {
            Some(prefix) => {
                if prefix.contains('*') {
                    return Err(err("a tool selector may only end with one '*'"));
                }
                ToolSelector::Wildcard(prefix.to_string())
            }
            None => ToolSelector::Exact(tool.to_string()),
        };
        let name = match &tool_sel {
            ToolSelector::Exact(n) | ToolSelector::Wildcard(n) => n,
        };
        if name.is_empty() && matches!(tool_sel, ToolSelector::Exact(_)) {
            return Err(err("the tool name is missing"));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(err("tool names are letters, digits, '_' and '-'"));
        }
        let pattern = match pattern {
            None => None,
            Some(p) => Some(match p.strip_suffix(":*") {
                Some(prefix) if prefix.trim().is_empty() => {
                    return Err(err("the prefix before ':*' is empty"));
                }
                Some(prefix) => Pattern::Prefix(prefix.trim().to_string()),
                None if p.contains(['*', '?', '[']) => Pattern::Glob(
                    Glob::new(p)
                        .map_err(|e| err(&format!("bad glob: {e}")))?
                        .compile_matcher(),
                ),
                None => Pattern::Exact(p.to_string()),
            }),
        };
        Ok(Rule {
            tool: tool_sel,
            pattern,
            text: t.to_string(),
        })
    }

    fn matches_tool(&self, name: &str) -> bool {
        match &self.tool {
            ToolSelector::Exact(n) => n == name,
            ToolSelector::Wildcard(prefix) => name.starts_with(prefix.as_str()),
        }
    }

    fn matches_subject(&self, subject: Option<&str>) -> bool {
        match (&self.pattern, subject) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(Pattern::Exact(e)), Some(s)) => e == s,
            (Some(Pattern::Prefix(p)), Some(s)) => {
                s == p
                    || s.strip_prefix(p.as_str())
                        .is_some_and(|rest| rest.starts_with(' '))
            }
            (Some(Pattern::Glob(g)), Some(s)) => g.is_match(s),
        }
    }
}

/// Parses many rules, stopping at the first bad one.
pub fn parse_rules(texts: &[String]) -> Result<Vec<Rule>, RuleError> {
    texts.iter().map(|t| Rule::parse(t)).collect()
}

/// A shell line that cannot be judged command by command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unjudgeable(pub &'static str);

/// Splits a shell line into its simple commands at `&&`, `||`, `;`, `|`, `&` and newlines,
/// respecting quotes. Command substitution, backticks, process substitution, subshells and
/// redirections into other commands make a line unjudgeable: it must be asked about.
pub fn split_shell(line: &str) -> Result<Vec<String>, Unjudgeable> {
    let mut commands = Vec::new();
    let mut current = String::new();
    let mut chars = line.chars().peekable();
    let (mut single, mut double) = (false, false);
    while let Some(c) = chars.next() {
        match c {
            '\'' if !double => {
                single = !single;
                current.push(c);
            }
            '"' if !single => {
                double = !double;
                current.push(c);
            }
            '\\' if !single => {
                current.push(c);
                if let Some(n) = chars.next() {
                    current.push(n);
                }
            }
            '`' if !single => return Err(Unjudgeable("backtick command substitution")),
            '$' if !single && chars.peek() == Some(&'(') => {
                return Err(Unjudgeable("$( ) command substitution"));
            }
            '<' | '>' if !single && !double && chars.peek() == Some(&'(') => {
                return Err(Unjudgeable("process substitution"));
            }
            '(' | ')' | '{' | '}' if !single && !double && current.trim().is_empty() => {
                return Err(Unjudgeable("a subshell or command group"));
            }
            ';' | '\n' | '&' | '|' if !single && !double => {
                if matches!(c, '&' | '|') && chars.peek() == Some(&c) {
                    chars.next();
                }
                if !current.trim().is_empty() {
                    commands.push(current.trim().to_string());
                }
                current.clear();
            }
            _ => current.push(c),
        }
    }
    if single || double {
        return Err(Unjudgeable("an unclosed quote"));
    }
    if !current.trim().is_empty() {
        commands.push(current.trim().to_string());
    }
    Ok(commands)
}

/// The outcome of judging one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Ask { reason: String },
    Deny { reason: String },
}

/// The rules and mode of a session.
#[derive(Debug, Clone)]
pub struct Policy {
    pub mode: PermissionMode,
    pub allow: Vec<Rule>,
    pub ask: Vec<Rule>,
    pub deny: Vec<Rule>,
    /// "Always" answers given during the session.
    pub session_allow: Vec<Rule>,
    pub workspace: PathBuf,
}

impl Policy {
    pub fn new(mode: PermissionMode, workspace: impl Into<PathBuf>) -> Self {
        Self {
            mode,
            allow: Vec::new(),
            ask: Vec::new(),
            deny: Vec::new(),
            session_allow: Vec::new(),
            workspace: workspace.into(),
        }
    }

    /// The subjects to judge: each simple command of a bash line, or the one subject.
    fn subjects(tool: &dyn Tool, args: &Value) -> Result<Vec<Option<String>>, Unjudgeable> {
        match tool.permission_subject(args) {
            Some(s) if tool.name() == "bash" => {
                Ok(split_shell(&s)?.into_iter().map(Some).collect())
            }
            other => Ok(vec![other]),
        }
    }

    fn matching<'a>(rules: &'a [Rule], tool: &str, subject: Option<&str>) -> Option<&'a Rule> {
        rules
            .iter()
            .find(|r| r.matches_tool(tool) && r.matches_subject(subject))
    }

    /// Whether a file tool's path leaves the workspace (lexically, before any symlink).
    fn outside(&self, tool: &dyn Tool, args: &Value) -> Option<PathBuf> {
        let path = args
            .get("file_path")
            .or_else(|| args.get("path"))
            .and_then(Value::as_str)?;
        if tool.name() == "bash" {
            return None;
        }
        let resolved = FileAccess::resolve(&self.workspace, path);
        (!resolved.starts_with(&self.workspace)).then_some(resolved)
    }

    /// Judges one call (see the module docs for the order).
    pub fn decide(&self, tool: &dyn Tool, args: &Value) -> Decision {
        let name = tool.name();
        let effects = tool.effects(args);
        let subjects = Self::subjects(tool, args);
        // 1. Hard denies: any command of the line, or the whole line.
        let whole = tool.permission_subject(args);
        let mut all: Vec<Option<String>> = subjects.clone().unwrap_or_default();
        all.push(whole.clone());
        for s in &all {
            if let Some(rule) = Self::matching(&self.deny, name, s.as_deref()) {
                return Decision::Deny {
                    reason: format!("denied by the rule {}", rule.text),
                };
            }
        }
        // 2. Plan mode: reads only.
        if self.mode == PermissionMode::Plan && !effects.is_read_only() {
            return Decision::Deny {
                reason: "plan mode allows only reading; this call would change something or run a command".into(),
            };
        }
        // 3. Outside the workspace: a separate grant, whatever the rules and mode.
        if let Some(path) = self.outside(tool, args) {
            return Decision::Ask {
                reason: format!(
                    "{} is outside the workspace ({})",
                    path.display(),
                    self.workspace.display()
                ),
            };
        }
        // 4. Ask rules.
        for s in &all {
            if let Some(rule) = Self::matching(&self.ask, name, s.as_deref()) {
                return Decision::Ask {
                    reason: format!("the rule {} asks for approval", rule.text),
                };
            }
        }
        // 5. Allow rules: every command must be allowed; an unjudgeable line never is.
        let rules: Vec<&Rule> = self.allow.iter().chain(&self.session_allow).collect();
        let allowed_by_rules = match &subjects {
            Ok(subjects) if !subjects.is_empty() => subjects.iter().all(|s| {
                rules
                    .iter()
                    .any(|r| r.matches_tool(name) && r.matches_subject(s.as_deref()))
            }),
            Ok(_) | Err(_) => false,
        };
        if allowed_by_rules {
            return Decision::Allow;
        }
        // 6. The mode's default.
        let read_only = effects.is_read_only();
        let edit_only = effects == Effects::WRITES;
        match (self.mode, &subjects) {
            (_, Err(why)) if !read_only => Decision::Ask {
                reason: format!("the command uses {}, which rules cannot judge", why.0),
            },
            (PermissionMode::Bypass, _) => Decision::Allow,
            (PermissionMode::Plan, _) if effects.unknown => Decision::Deny {
                reason: "plan mode allows only reading; what this tool does is unknown".into(),
            },
            (_, _) if effects.unknown => Decision::Ask {
                reason: format!(
                    "what {name} does is unknown; approve it, or allow it with a rule such as `{name}`"
                ),
            },
            (_, _) if read_only => Decision::Allow,
            (PermissionMode::AcceptEdits, _) if edit_only => Decision::Allow,
            (PermissionMode::Plan, _) => Decision::Deny {
                reason: "plan mode allows only reading".into(),
            },
            _ => Decision::Ask {
                reason: if effects.subprocess {
                    "running a command needs approval".into()
                } else {
                    "changing files needs approval".into()
                },
            },
        }
    }

    /// The session rule an "always" answer adds: the command's first two words as a prefix for
    /// bash, the tool for everything else.
    pub fn always_rule(tool: &dyn Tool, args: &Value) -> Option<Rule> {
        let text = match (tool.name(), tool.permission_subject(args)) {
            ("bash", Some(cmd)) => {
                let first = split_shell(&cmd).ok()?.into_iter().next()?;
                let words: Vec<&str> = first.split_whitespace().take(2).collect();
                format!("bash({}:*)", words.join(" "))
            }
            (name, _) => name.to_string(),
        };
        Rule::parse(&text).ok()
    }
}
