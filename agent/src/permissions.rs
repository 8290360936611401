//! Permissions: every tool call is judged before it runs.
//!
//! Rules name a tool and optionally a pattern over the call's *permission subject* (the command
//! for bash, the path for file tools):
//!
//! ```text
//! read_file                 any read_file call
//! bash(cargo test:*)        bash commands whose words start with "cargo test"
//! bash(git status)          exactly "git status"
//! edit_file(src/**)         edits of paths matching the glob (relative to the workspace)
//! mcp__github__*            every tool whose name starts with "mcp__github__" (a tool selector,
//!                           matched on names, separate from subject globs)
//! ```
//!
//! [`Policy::decide`] applies, in order: hard deny rules; plan mode (nothing but reads); paths
//! outside the workspace, which need a separate grant no allow rule or mode provides; ask rules;
//! allow rules (session rules included); finally the mode's default. A tool whose effects are
//! unknown (`Effects::unknown`, e.g. an MCP tool) is judged as doing anything: plan mode denies
//! it, and short of bypass only an allow rule naming it lets it run without asking.
//!
//! Bash lines are parsed with a real shell grammar ([`shell`]). Deny and ask rules are matched
//! against what would run ([`runs`]: `env rm`, `bash -c 'rm …'`, `git -C . push`), and what
//! cannot be known before it runs (a variable as the command name) is denied when any deny
//! rule could match it. An allow rule allows a line only when it is a plain list of commands
//! with literal words, each allowed by a rule, none using a flag that runs code of the command
//! line's choosing ([`code_flags`]), and every redirection allowed as the file access it is
//! (`> f` is an edit of `f`). Deny rules are a guard rail; the sandbox is the boundary.

mod code_flags;
mod runs;
pub mod shell;

use std::fmt;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use serde_json::Value;

use crate::file_access::FileAccess;
use crate::tool::{Effects, Tool};
use code_flags::CodeFlag;
use runs::Invocation;
use shell::{RedirectOp, Script, Word};

/// The fallback decision when no rule decides.
///
/// The one permission-mode type of the workspace: the `--permission-mode` flag, `task.toml`'s
/// `permission_mode` and the flag a trial passes to `anvil` all use it. Its names come from
/// [`PermissionMode::name`] alone (`Display`, `FromStr` and serde all go through it), so the
/// places that write a mode and the places that read one cannot drift apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
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

impl PermissionMode {
    /// Every mode, from the most to the least restrictive.
    pub const ALL: [PermissionMode; 4] = [
        PermissionMode::Plan,
        PermissionMode::Default,
        PermissionMode::AcceptEdits,
        PermissionMode::Bypass,
    ];

    /// The mode's name on the command line and in files.
    pub const fn name(self) -> &'static str {
        match self {
            PermissionMode::Plan => "plan",
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "accept-edits",
            PermissionMode::Bypass => "bypass",
        }
    }

    /// What the mode lets run without approval, in one line without a final period (for
    /// `--help`, which lists the modes like clap lists a `ValueEnum`'s).
    pub const fn summary(self) -> &'static str {
        match self {
            PermissionMode::Plan => "Read-only exploration: no edits, no commands",
            PermissionMode::Default => "Ask before edits and commands",
            PermissionMode::AcceptEdits => {
                "Edits inside the workspace are allowed; commands still ask"
            }
            PermissionMode::Bypass => "No prompts (the OS sandbox still applies)",
        }
    }
}

impl fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A permission mode that is not one of [`PermissionMode::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown permission mode '{given}': expected one of {}", mode_names())]
pub struct UnknownPermissionMode {
    pub given: String,
}

fn mode_names() -> String {
    PermissionMode::ALL.map(PermissionMode::name).join(", ")
}

impl std::str::FromStr for PermissionMode {
    type Err = UnknownPermissionMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PermissionMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| UnknownPermissionMode {
                given: s.to_string(),
            })
    }
}

impl TryFrom<String> for PermissionMode {
    type Error = UnknownPermissionMode;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<PermissionMode> for &'static str {
    fn from(mode: PermissionMode) -> Self {
        mode.name()
    }
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
    /// A prefix or exact pattern read as shell words, for bash commands.
    words: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid permission rule '{rule}': {reason}")]
pub struct RuleError {
    pub rule: String,
    pub reason: String,
}

/// A pattern's words as the shell would split them (`git commit -m 'a b'` is four words).
fn pattern_words(pattern: &str) -> Vec<String> {
    shell::literal_words(pattern)
        .unwrap_or_else(|| pattern.split_whitespace().map(str::to_owned).collect())
}

/// How much of a command an allow rule names itself: a flag inside a rule's own prefix is the
/// rule's explicit choice, one after it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Covers {
    /// The whole command (an exact rule, or a rule without a pattern).
    All,
    /// The first `n` words.
    Prefix(usize),
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
        let words = match &pattern {
            Some(Pattern::Prefix(p) | Pattern::Exact(p)) => pattern_words(p),
            Some(Pattern::Glob(_)) | None => Vec::new(),
        };
        Ok(Rule {
            tool: tool_sel,
            pattern,
            text: t.to_string(),
            words,
        })
    }

    fn matches_tool(&self, name: &str) -> bool {
        match &self.tool {
            ToolSelector::Exact(n) => n == name,
            ToolSelector::Wildcard(prefix) => name.starts_with(prefix.as_str()),
        }
    }

    /// Whether the rule matches a call's subject (paths, and every tool but bash).
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

    /// Whether an allow rule allows a bash command with these words, exactly as written.
    fn allows_command(&self, words: &[String]) -> Option<Covers> {
        match &self.pattern {
            None => Some(Covers::All),
            Some(Pattern::Exact(_)) => (words == self.words.as_slice()).then_some(Covers::All),
            Some(Pattern::Prefix(_)) => words
                .starts_with(&self.words)
                .then_some(Covers::Prefix(self.words.len())),
            Some(Pattern::Glob(g)) => g.is_match(quote_words(words)).then_some(Covers::Prefix(1)),
        }
    }

    /// Whether a deny or ask rule could match what an invocation runs: the command name by its
    /// last path component (`/bin/rm` is `rm`), and a word only known at run time as anything.
    fn could_match(&self, invocation: &Invocation) -> bool {
        let words = &invocation.words;
        let same = |i: usize, rule: &str, word: &str| match i {
            0 => basename(rule) == basename(word),
            _ => rule == word,
        };
        let prefix = |rule: &[String]| -> Option<bool> {
            for (i, r) in rule.iter().enumerate() {
                match words.get(i) {
                    None => return Some(invocation.open),
                    Some(Word::Dynamic(_)) => return Some(true),
                    Some(Word::Literal(w)) if !same(i, r, w) => return Some(false),
                    Some(Word::Literal(_)) => {}
                }
            }
            None
        };
        match &self.pattern {
            None => true,
            Some(Pattern::Prefix(_)) => prefix(&self.words).unwrap_or(true),
            Some(Pattern::Exact(_)) => prefix(&self.words).unwrap_or_else(|| {
                words[self.words.len().min(words.len())..]
                    .iter()
                    .all(|w| matches!(w, Word::Dynamic(_)))
            }),
            Some(Pattern::Glob(g)) => {
                let literal: Option<Vec<String>> = words
                    .iter()
                    .map(|w| w.literal().map(str::to_owned))
                    .collect();
                match literal {
                    Some(mut l) if !invocation.open => {
                        g.is_match(quote_words(&l)) || {
                            if let Some(first) = l.first_mut() {
                                *first = basename(first).to_string();
                            }
                            g.is_match(quote_words(&l))
                        }
                    }
                    _ => true,
                }
            }
        }
    }
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Words as a shell line, quoted where needed (for messages, glob rules and session rules).
pub fn quote_words(words: &[String]) -> String {
    words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ")
}

fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:=@%+,^".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Parses many rules, stopping at the first bad one.
pub fn parse_rules(texts: &[String]) -> Result<Vec<Rule>, RuleError> {
    texts.iter().map(|t| Rule::parse(t)).collect()
}

/// The outcome of judging one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// A person must approve. `reason` says why (shown when asking); `remedy` says what would
    /// let such a call run without asking (for when nobody can answer, as in headless mode).
    Ask {
        reason: String,
        remedy: String,
    },
    Deny {
        reason: String,
    },
}

/// Tools whose calls are edits: a bash redirection that writes a file is judged as one.
const EDIT_TOOLS: &[&str] = &["edit_file", "write_file"];

/// Where a command would write without touching a file.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/fd/1",
    "/dev/fd/2",
];

/// Why allow rules do not allow a bash line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NotAllowed {
    /// No command at all (a lone redirection, a comment).
    Empty,
    /// No allow rule covers this command.
    NoRule {
        command: String,
        suggest: Option<String>,
    },
    /// The line is not a plain list of literal commands.
    Unjudgeable { what: String },
    /// A rule's prefix covers the command, but a later flag runs code of its own choosing.
    CodeFlag {
        command: String,
        flag: CodeFlag,
        rule: String,
    },
    /// A command runs where rules cannot follow: outside the workspace, or unknown (`None`).
    Directory { dir: Option<PathBuf> },
    /// A redirection writes where an edit would not be allowed.
    Writes { path: String, why: WriteBlock },
    /// A redirection reads outside the workspace.
    ReadsOutside { path: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum WriteBlock {
    Outside,
    Protected(&'static str),
    /// Inside the workspace, but the mode and rules ask for edits of it.
    NeedsApproval,
}

const BYPASS: &str = "--permission-mode bypass";

impl NotAllowed {
    /// (reason, remedy) for an Ask in `mode`.
    fn explain(&self, mode: PermissionMode) -> (String, String) {
        let commands_remedy = |suggest: &Option<String>| {
            format!(
                "Commands run without approval only under an allow rule that covers them{} or with {BYPASS}; --permission-mode accept-edits covers file edits, not commands.",
                match suggest {
                    Some(rule) => format!(" (such as `{rule}` in [permissions] allow)"),
                    None => String::new(),
                }
            )
        };
        match self {
            NotAllowed::Empty => (
                format!(
                    "running a command is not allowed by the permission mode ({mode}) without approval"
                ),
                commands_remedy(&None),
            ),
            NotAllowed::NoRule { command, suggest } => (
                format!(
                    "running `{command}` is not allowed by the permission mode ({mode}) without approval, and no allow rule covers it"
                ),
                commands_remedy(suggest),
            ),
            NotAllowed::Unjudgeable { what } => (
                format!("the command uses {what}, which permission rules cannot judge"),
                format!(
                    "Allow rules only cover plain commands with literal words: rewrite it without $( ), variables, globs, heredocs or subshells, or run with {BYPASS}."
                ),
            ),
            NotAllowed::CodeFlag {
                command,
                flag,
                rule,
            } => (
                format!(
                    "`{}` {}, so the rule {rule} does not cover `{command}`",
                    flag.word, flag.why
                ),
                format!(
                    "Run it without {}, add an allow rule for this exact command, or run with {BYPASS}.",
                    flag.word
                ),
            ),
            NotAllowed::Directory { dir: Some(dir) } => (
                format!(
                    "the line runs commands in {}, outside the workspace",
                    dir.display()
                ),
                format!(
                    "Run commands inside the workspace, or run with {BYPASS} (the sandbox still applies)."
                ),
            ),
            NotAllowed::Directory { dir: None } => (
                "the line changes to a directory that cannot be known before it runs".into(),
                format!(
                    "Use `cd` with a literal directory inside the workspace, outside a pipeline, or run with {BYPASS}."
                ),
            ),
            NotAllowed::Writes {
                path,
                why: WriteBlock::Outside,
            } => (
                format!("the command writes {path} through a redirection, outside the workspace"),
                format!(
                    "Write inside the workspace, or run with {BYPASS} (the sandbox still confines writes)."
                ),
            ),
            NotAllowed::Writes {
                path,
                why: WriteBlock::Protected(what),
            } => (
                format!("the command writes {path} ({what}), which the agent may not change"),
                format!("Leave {path} alone; the sandbox keeps it read-only in every mode."),
            ),
            NotAllowed::Writes {
                path,
                why: WriteBlock::NeedsApproval,
            } => (
                format!(
                    "the command writes {path} through a redirection, and changing files is not allowed by the permission mode ({mode}) without approval"
                ),
                format!(
                    "Re-run with --permission-mode accept-edits or add an allow rule such as `edit_file({path})` (the command itself still needs its allow rule), or run with {BYPASS}."
                ),
            ),
            NotAllowed::ReadsOutside { path } => (
                format!("the command reads {path} through a redirection, outside the workspace"),
                format!("Read inside the workspace, or run with {BYPASS}."),
            ),
        }
    }
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

/// Where the commands of a line run, as far as rules can follow `cd`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cwd {
    Known(PathBuf),
    Unknown,
}

/// One step of a line, in source order.
enum Step<'a> {
    Command(&'a shell::Command),
    Redirect(&'a shell::Redirect),
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

    fn matching<'a>(rules: &'a [Rule], tool: &str, subject: Option<&str>) -> Option<&'a Rule> {
        rules
            .iter()
            .find(|r| r.matches_tool(tool) && r.matches_subject(subject))
    }

    /// A deny or ask rule for `tool`: one with a pattern also applies to a tool that has no
    /// subject to match it against (an MCP tool), since a restriction that cannot be checked
    /// must not be skipped (`deny = ["mcp__fs__write_file(*)"]` denies every call).
    fn restricting<'a>(rules: &'a [Rule], tool: &str, subject: Option<&str>) -> Option<&'a Rule> {
        rules
            .iter()
            .find(|r| r.matches_tool(tool) && (subject.is_none() || r.matches_subject(subject)))
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
        let subject = tool.permission_subject(args);
        let line = match (name, &subject) {
            ("bash", Some(line)) => Some(shell::parse(line)),
            _ => None,
        };
        // 1. Hard denies.
        let denied = match &line {
            Some(script) => self.bash_rule(&self.deny, name, script),
            None => Self::restricting(&self.deny, name, subject.as_deref()).map(|r| (r, None)),
        };
        if let Some((rule, detail)) = denied {
            return Decision::Deny {
                reason: format!(
                    "denied by the rule {}{}",
                    rule.text,
                    detail.map(|d| format!(" ({d})")).unwrap_or_default()
                ),
            };
        }
        if let Some(script) = &line
            && script.incomplete
            && let Some(rule) = self.deny.iter().find(|r| r.matches_tool(name))
        {
            return Decision::Deny {
                reason: format!(
                    "the line has shell syntax the permission check cannot parse, so the deny rule {} cannot be checked against it; rewrite it in plainer shell",
                    rule.text
                ),
            };
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
                remedy: "Paths outside the workspace need a person's approval: no permission mode or allow rule grants them. Work inside the workspace.".into(),
            };
        }
        // 4. Ask rules.
        let asked = match &line {
            Some(script) => self.bash_rule(&self.ask, name, script),
            None => Self::restricting(&self.ask, name, subject.as_deref()).map(|r| (r, None)),
        };
        if let Some((rule, detail)) = asked {
            return Decision::Ask {
                reason: format!(
                    "the rule {} asks for approval{}",
                    rule.text,
                    detail.map(|d| format!(" ({d})")).unwrap_or_default()
                ),
                remedy: format!(
                    "The user's ask rule {} needs a person to approve this call; without one it does not run.",
                    rule.text
                ),
            };
        }
        // 5. Allow rules.
        let not_allowed = match &line {
            Some(script) => match self.bash_allowed(name, script) {
                Ok(()) => return Decision::Allow,
                Err(why) => Some(why),
            },
            None => {
                let rules = self.allow.iter().chain(&self.session_allow);
                if rules
                    .into_iter()
                    .any(|r| r.matches_tool(name) && r.matches_subject(subject.as_deref()))
                {
                    return Decision::Allow;
                }
                None
            }
        };
        // 6. The mode's default.
        let mode = self.mode;
        if let Some(why) = not_allowed {
            return match mode {
                PermissionMode::Bypass => Decision::Allow,
                PermissionMode::Plan | PermissionMode::Default | PermissionMode::AcceptEdits => {
                    let (reason, remedy) = why.explain(mode);
                    Decision::Ask { reason, remedy }
                }
            };
        }
        let read_only = effects.is_read_only();
        let edit_only = effects == Effects::WRITES;
        match mode {
            PermissionMode::Bypass => Decision::Allow,
            PermissionMode::Plan if effects.unknown => Decision::Deny {
                reason: "plan mode allows only reading; what this tool does is unknown".into(),
            },
            _ if effects.unknown => Decision::Ask {
                reason: format!(
                    "what {name} does is unknown; approve it, or allow it with a rule such as `{name}`"
                ),
                remedy: format!("Add an allow rule such as `{name}`, or run with {BYPASS}."),
            },
            _ if read_only => Decision::Allow,
            PermissionMode::AcceptEdits if edit_only => Decision::Allow,
            PermissionMode::Plan => Decision::Deny {
                reason: "plan mode allows only reading".into(),
            },
            PermissionMode::Default | PermissionMode::AcceptEdits if effects.subprocess => {
                Decision::Ask {
                    reason: format!(
                        "running a command is not allowed by the permission mode ({mode}) without approval"
                    ),
                    remedy: format!(
                        "Add an allow rule such as `{name}`, or run with {BYPASS}; --permission-mode accept-edits covers file edits, not commands."
                    ),
                }
            }
            PermissionMode::Default | PermissionMode::AcceptEdits => Decision::Ask {
                reason: format!(
                    "changing files is not allowed by the permission mode ({mode}) without approval"
                ),
                remedy: format!(
                    "Re-run with --permission-mode accept-edits, or add an allow rule such as `{name}({})`.",
                    subject.as_deref().unwrap_or("src/**")
                ),
            },
        }
    }

    /// The first rule of `rules` that could match what a bash line runs (a deny or ask
    /// rule), with what matched when that is not the line as written.
    fn bash_rule<'a>(
        &self,
        rules: &'a [Rule],
        tool: &str,
        script: &Script,
    ) -> Option<(&'a Rule, Option<String>)> {
        for command in &script.commands {
            let invocations = runs::invocations(command);
            let written = invocations.first().map(Invocation::display);
            for invocation in &invocations {
                if let Some(rule) = rules
                    .iter()
                    .find(|r| r.matches_tool(tool) && r.could_match(invocation))
                {
                    let shown = invocation.display();
                    let detail = if invocation.is_unknown() {
                        Some(format!(
                            "the line runs something that is only known when it runs ({shown}), and the rule could match it"
                        ))
                    } else if Some(&shown) != written.as_ref() {
                        Some(format!(
                            "`{}` runs `{shown}`",
                            written.as_deref().unwrap_or_default()
                        ))
                    } else {
                        None
                    };
                    return Some((rule, detail));
                }
            }
        }
        // A redirection that writes a file is an edit of it.
        for (redirect, path) in self.writes(script) {
            let found = match &path {
                Some(rel) => EDIT_TOOLS
                    .iter()
                    .find_map(|t| Self::matching(rules, t, Some(rel))),
                None => rules
                    .iter()
                    .find(|r| EDIT_TOOLS.iter().any(|t| r.matches_tool(t))),
            };
            if let Some(rule) = found {
                let target = match &redirect.target {
                    Word::Literal(v) | Word::Dynamic(v) => v.clone(),
                };
                return Some((rule, Some(format!("the command writes {target}"))));
            }
        }
        None
    }

    /// The redirections of a line that write a file, each with its path relative to the
    /// workspace when rules can know it.
    fn writes<'s>(&self, script: &'s Script) -> Vec<(&'s shell::Redirect, Option<String>)> {
        let mut out = Vec::new();
        self.walk(script, |step, cwd| {
            if let Step::Redirect(r) = step
                && matches!(r.op, RedirectOp::Write | RedirectOp::ReadWrite)
            {
                let path = match (&r.target, cwd) {
                    (Word::Literal(t), _) if DEVICES.contains(&t.as_str()) => return,
                    (Word::Literal(t), Cwd::Known(dir)) => {
                        Some(self.relative(&FileAccess::resolve(dir, t)))
                    }
                    (Word::Literal(t), Cwd::Unknown) if t.starts_with('/') => {
                        Some(self.relative(Path::new(t)))
                    }
                    _ => None,
                };
                out.push((r, path));
            }
        });
        out
    }

    /// A path relative to the workspace when inside it, else absolute.
    fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.workspace)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Visits the commands and redirections of a line in source order with the directory each
    /// runs in. A `cd` takes effect at the next command (its own redirections come first).
    fn walk<'s>(&self, script: &'s Script, mut visit: impl FnMut(Step<'s>, &Cwd)) {
        let mut steps: Vec<(usize, Step)> = script
            .commands
            .iter()
            .map(|c| (c.offset, Step::Command(c)))
            .chain(
                script
                    .redirects
                    .iter()
                    .map(|r| (r.offset, Step::Redirect(r))),
            )
            .collect();
        steps.sort_by_key(|(offset, _)| *offset);
        let mut cwd = Cwd::Known(self.workspace.clone());
        let mut pending: Option<Cwd> = None;
        for (_, step) in steps {
            if let Step::Command(c) = &step {
                if let Some(next) = pending.take() {
                    cwd = next;
                }
                pending = Self::cd(c, &cwd);
            }
            visit(step, &cwd);
        }
    }

    /// Where a `cd` (or `pushd`/`popd`) leaves the shell.
    fn cd(command: &shell::Command, cwd: &Cwd) -> Option<Cwd> {
        let name = command.words.first()?.literal()?;
        if !matches!(name, "cd" | "pushd" | "popd") {
            return None;
        }
        let args: Vec<&Word> = command.words[1..]
            .iter()
            .filter(|w| !matches!(w.literal(), Some("-L" | "-P" | "-e" | "-@" | "--")))
            .collect();
        Some(match (name, command.in_pipeline, args.as_slice(), cwd) {
            ("cd" | "pushd", false, [Word::Literal(dir)], Cwd::Known(from)) if dir != "-" => {
                Cwd::Known(FileAccess::resolve(from, dir))
            }
            ("cd" | "pushd", false, [Word::Literal(dir)], Cwd::Unknown) if dir.starts_with('/') => {
                Cwd::Known(FileAccess::resolve(Path::new("/"), dir))
            }
            // `cd` alone goes home; `cd -`, `popd` and `cd` in a pipeline are not followed.
            _ => Cwd::Unknown,
        })
    }

    /// Whether allow rules (and the mode, for the edits a redirection makes) allow a bash line.
    fn bash_allowed(&self, tool: &str, script: &Script) -> Result<(), NotAllowed> {
        if !script.obstacles.is_empty() {
            return Err(NotAllowed::Unjudgeable {
                what: script.obstacles.join(", "),
            });
        }
        if script.incomplete {
            return Err(NotAllowed::Unjudgeable {
                what: "shell syntax the parser does not understand".into(),
            });
        }
        if script.commands.is_empty() {
            return Err(NotAllowed::Empty);
        }
        let rules: Vec<&Rule> = self
            .allow
            .iter()
            .chain(&self.session_allow)
            .filter(|r| r.matches_tool(tool))
            .collect();
        let mut verdict = Ok(());
        self.walk(script, |step, cwd| {
            if verdict.is_err() {
                return;
            }
            verdict = match step {
                Step::Command(c) => self.command_allowed(&rules, c, cwd),
                Step::Redirect(r) => self.redirect_allowed(r, cwd),
            };
        });
        verdict
    }

    fn command_allowed(
        &self,
        rules: &[&Rule],
        command: &shell::Command,
        cwd: &Cwd,
    ) -> Result<(), NotAllowed> {
        let dir = match cwd {
            Cwd::Known(dir) if dir.starts_with(&self.workspace) => dir,
            Cwd::Known(dir) => {
                return Err(NotAllowed::Directory {
                    dir: Some(dir.clone()),
                });
            }
            Cwd::Unknown => return Err(NotAllowed::Directory { dir: None }),
        };
        // A plain line has literal words only.
        let literal = |ws: &[Word]| -> Vec<String> {
            ws.iter()
                .filter_map(|w| w.literal().map(str::to_owned))
                .collect()
        };
        let argv = literal(&command.words);
        let mut words = literal(&command.assignments);
        let assignments = words.len();
        words.extend(argv.iter().cloned());
        let shown = quote_words(&words);
        let inside = |path: &str| FileAccess::resolve(dir, path).starts_with(&self.workspace);
        let mut flagged = None;
        for rule in rules {
            let Some(covers) = rule.allows_command(&words) else {
                continue;
            };
            let flag = match covers {
                Covers::All => None,
                Covers::Prefix(n) => {
                    code_flags::find(&argv, n.saturating_sub(assignments).max(1), &inside)
                }
            };
            match flag {
                None => return Ok(()),
                Some(flag) => {
                    flagged.get_or_insert((flag, rule.text.clone()));
                }
            }
        }
        Err(match flagged {
            Some((flag, rule)) => NotAllowed::CodeFlag {
                command: shown,
                flag,
                rule,
            },
            None => NotAllowed::NoRule {
                command: shown,
                suggest: prefix_rule(&words),
            },
        })
    }

    fn redirect_allowed(&self, redirect: &shell::Redirect, cwd: &Cwd) -> Result<(), NotAllowed> {
        let write = match redirect.op {
            RedirectOp::Write | RedirectOp::ReadWrite => true,
            RedirectOp::Read => false,
            RedirectOp::Duplicate | RedirectOp::HereString => return Ok(()),
        };
        let Word::Literal(target) = &redirect.target else {
            return Err(NotAllowed::Unjudgeable {
                what: "a redirection to a file only known when it runs".into(),
            });
        };
        if write && DEVICES.contains(&target.as_str()) {
            return Ok(());
        }
        let path = match cwd {
            Cwd::Known(dir) => FileAccess::resolve(dir, target),
            Cwd::Unknown if target.starts_with('/') => FileAccess::resolve(Path::new("/"), target),
            Cwd::Unknown => return Err(NotAllowed::Directory { dir: None }),
        };
        let shown = self.relative(&path);
        if path.strip_prefix(&self.workspace).is_err() {
            return Err(match write {
                true => NotAllowed::Writes {
                    path: shown,
                    why: WriteBlock::Outside,
                },
                false => NotAllowed::ReadsOutside { path: shown },
            });
        }
        if !write {
            return Ok(());
        }
        let what = crate::file_access::protected_reason(&self.workspace, &path).or_else(|| {
            crate::file_access::is_credential_path(&path).then_some("a credential file")
        });
        if let Some(what) = what {
            return Err(NotAllowed::Writes {
                path: shown,
                why: WriteBlock::Protected(what),
            });
        }
        let by_mode = matches!(
            self.mode,
            PermissionMode::AcceptEdits | PermissionMode::Bypass
        );
        let by_rule = self.allow.iter().chain(&self.session_allow).any(|r| {
            EDIT_TOOLS
                .iter()
                .any(|t| r.matches_tool(t) && r.matches_subject(Some(&shown)))
        });
        if by_mode || by_rule {
            Ok(())
        } else {
            Err(NotAllowed::Writes {
                path: shown,
                why: WriteBlock::NeedsApproval,
            })
        }
    }

    /// The session rule an "always" answer adds: the command's first two words as a prefix for
    /// bash, the tool for everything else.
    pub fn always_rule(tool: &dyn Tool, args: &Value) -> Option<Rule> {
        let text = match (tool.name(), tool.permission_subject(args)) {
            ("bash", Some(line)) => {
                let script = shell::parse(&line);
                if !script.is_plain() {
                    return None;
                }
                let first = script.commands.first()?;
                let words: Vec<String> = first
                    .assignments
                    .iter()
                    .chain(&first.words)
                    .map(|w| w.literal().map(str::to_owned))
                    .collect::<Option<_>>()?;
                prefix_rule(&words)?
            }
            (name, _) => name.to_string(),
        };
        Rule::parse(&text).ok()
    }
}

/// `bash(first two words:*)`, the rule that would allow commands like this one.
fn prefix_rule(words: &[String]) -> Option<String> {
    let head: Vec<String> = words.iter().take(2).cloned().collect();
    (!head.is_empty()).then(|| format!("bash({}:*)", quote_words(&head)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_reads_back_from_its_name() {
        let names: Vec<&str> = PermissionMode::ALL.map(PermissionMode::name).to_vec();
        assert_eq!(names, ["plan", "default", "accept-edits", "bypass"]);
        for mode in PermissionMode::ALL {
            assert_eq!(mode.to_string(), mode.name());
            assert_eq!(mode.name().parse::<PermissionMode>(), Ok(mode));
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.name()));
            assert_eq!(serde_json::from_str::<PermissionMode>(&json).unwrap(), mode);
        }
    }

    #[test]
    fn an_unknown_mode_names_the_ones_there_are() {
        let err = "acceptEdits".parse::<PermissionMode>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown permission mode 'acceptEdits': expected one of plan, default, accept-edits, bypass"
        );
        let err = serde_json::from_str::<PermissionMode>("\"yolo\"").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("unknown permission mode 'yolo': expected one of plan,"),
            "{err}"
        );
    }
}
