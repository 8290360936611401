//! Variants: the harness as a sweep dimension. A variant is a named agent configuration (a
//! sweep file's `[variants.NAME]`): text appended to the system prompt, the built-in tools
//! offered, the permission mode, the step limit, and further `anvil` flags. A sweep with
//! variants runs every (task, model, variant, trial), and the report compares each model's
//! variants paired by task.
//!
//! A variant is resolved once, where the sweep is planned (a `system_prompt_file` is read then,
//! so every worker runs the same text), stored in the sweep's spec, and part of its
//! fingerprint. Its flags are checked against `anvil`'s own parser then: an unknown flag, or
//! one the trial itself controls (the model, the sandbox, the budget, the output), is refused
//! before anything is enqueued.

use anvil_agent::permissions::PermissionMode;
use anvil_agent::tools::CODING_TOOLS;
use clap::Parser;
use serde::{Deserialize, Serialize};

use crate::cli::args::Cli;

/// A variant, resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    /// Appended to the system prompt (`--append-system-prompt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt_append: Option<String>,
    /// The built-in tools offered (`--tools`); all of them when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Instead of the task's `permission_mode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
    /// Instead of the task's `max_steps`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// Further `anvil` flags, checked by [`Variant::check`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
}

/// Why a variant cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VariantError {
    #[error("variant name '{name}' is not allowed: use letters, digits, '-' and '_' (at most 64)")]
    Name { name: String },
    #[error("variant {variant}: max_steps must be at least 1")]
    NoSteps { variant: String },
    #[error("variant {variant}: tools is empty (leave it out to offer every tool)")]
    NoTools { variant: String },
    #[error(
        "variant {variant}: tools: there is no built-in tool named '{tool}' (there are: {known})"
    )]
    UnknownTool {
        variant: String,
        tool: String,
        known: String,
    },
    #[error("variant {variant}: args: {reason}")]
    Args { variant: String, reason: String },
    #[error("variant {variant}: args: {flag} is set by the trial itself ({why}); {instead}")]
    Reserved {
        variant: String,
        flag: String,
        why: &'static str,
        instead: &'static str,
    },
}

/// Flags a trial sets itself, with why and what to use instead.
const RESERVED: &[(&[&str], &str, &str)] = &[
    (
        &["-p", "--print"],
        "the task's prompt",
        "it cannot be changed by a variant",
    ),
    (
        &["-m", "--model"],
        "the sweep's models",
        "list models in `models`",
    ),
    (
        &["--output-format"],
        "the worker reads its json",
        "it cannot be changed",
    ),
    (
        &["--pinned-config"],
        "the pinned model and sandbox",
        "it cannot be changed",
    ),
    (
        &["-C", "--cwd"],
        "the trial's workspace",
        "it cannot be changed",
    ),
    (
        &["--sandbox"],
        "the trial's sandbox hides the task's answers",
        "it cannot be changed",
    ),
    (
        &["--max-cost-usd"],
        "the task's cost cap or the sweep's budget",
        "set max_cost_usd in the sweep file",
    ),
    (
        &["-c", "--continue", "-r", "--resume"],
        "a fresh session",
        "it cannot be changed",
    ),
    (
        &["--permission-mode"],
        "the task's permission mode",
        "use the variant's permission_mode",
    ),
    (
        &["--max-steps"],
        "the task's step limit",
        "use the variant's max_steps",
    ),
    (
        &["--tools"],
        "the variant's tools",
        "use the variant's tools",
    ),
    (
        &["--append-system-prompt"],
        "the variant's prompt",
        "use the variant's system_prompt_append or system_prompt_file",
    ),
];

impl Variant {
    /// Checks the name, the fields and the flags (with `anvil`'s own parser).
    pub fn check(&self) -> Result<(), VariantError> {
        let name_ok = (1..=64).contains(&self.name.len())
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !name_ok {
            return Err(VariantError::Name {
                name: self.name.clone(),
            });
        }
        if self.max_steps == Some(0) {
            return Err(VariantError::NoSteps {
                variant: self.name.clone(),
            });
        }
        if self.tools.as_ref().is_some_and(Vec::is_empty) {
            return Err(VariantError::NoTools {
                variant: self.name.clone(),
            });
        }
        let tools = self.tools.iter().flatten();
        if let Some(tool) = tools
            .into_iter()
            .find(|t| !CODING_TOOLS.contains(&t.as_str()))
        {
            return Err(VariantError::UnknownTool {
                variant: self.name.clone(),
                tool: tool.clone(),
                known: CODING_TOOLS.join(", "),
            });
        }
        // A NUL cannot be passed to a process: every trial would fail to start.
        let texts = self
            .system_prompt_append
            .iter()
            .chain(self.tools.iter().flatten())
            .chain(&self.args);
        if texts.into_iter().any(|t| t.contains('\0')) {
            return Err(VariantError::Args {
                variant: self.name.clone(),
                reason: "a NUL character cannot be passed to anvil".into(),
            });
        }
        for arg in &self.args {
            let flag = arg.split('=').next().unwrap_or(arg);
            if let Some((_, why, instead)) = RESERVED.iter().find(|(flags, _, _)| {
                flags.contains(&flag)
                    || (!flag.starts_with("--")
                        && flag.get(..2).is_some_and(|short| flags.contains(&short)))
            }) {
                return Err(VariantError::Reserved {
                    variant: self.name.clone(),
                    flag: flag.to_string(),
                    why,
                    instead,
                });
            }
        }
        let argv = ["anvil", "-p", "prompt"]
            .into_iter()
            .map(String::from)
            .chain(self.extra_args());
        match Cli::try_parse_from(argv) {
            Ok(cli) if cli.command.is_some() => Err(VariantError::Args {
                variant: self.name.clone(),
                reason: "names a subcommand; only flags are allowed".into(),
            }),
            // Whatever spelling got there, nothing the trial controls may differ from what a
            // bare `anvil -p` has (the list above names the flags; this holds if it misses one).
            Ok(cli) if touches_the_trial(&cli) => Err(VariantError::Args {
                variant: self.name.clone(),
                reason: "sets something the trial itself controls (model, sandbox, budget, \
                         output, workspace or session)"
                    .into(),
            }),
            Ok(_) => Ok(()),
            Err(e) => Err(VariantError::Args {
                variant: self.name.clone(),
                reason: first_line(&e.to_string()),
            }),
        }
    }

    /// The settings of `self` that differ from `old`'s, by name.
    pub fn changes_from(&self, old: &Variant) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.system_prompt_append != old.system_prompt_append {
            out.push("system_prompt_append");
        }
        if self.tools != old.tools {
            out.push("tools");
        }
        if self.permission_mode != old.permission_mode {
            out.push("permission_mode");
        }
        if self.max_steps != old.max_steps {
            out.push("max_steps");
        }
        if self.args != old.args {
            out.push("args");
        }
        out
    }

    /// What the trial's `anvil -p` gets besides its own flags: the prompt text, the tools and
    /// `args` (the permission mode and step limit replace the task's instead).
    pub fn extra_args(&self) -> Vec<String> {
        // One argv element each (`--flag=value`): a value starting with `-` (a Markdown
        // list) is still the value.
        let mut out = Vec::new();
        if let Some(text) = &self.system_prompt_append {
            out.push(format!("--append-system-prompt={text}"));
        }
        if let Some(tools) = &self.tools {
            out.push(format!("--tools={}", tools.join(",")));
        }
        out.extend(self.args.iter().cloned());
        out
    }
}

/// Whether `cli` (a variant's flags after `anvil -p prompt`) sets anything the trial controls.
fn touches_the_trial(cli: &Cli) -> bool {
    use crate::cli::args::{OutputFormat, SandboxMode};
    cli.model.is_some()
        || cli.output_format != OutputFormat::Text
        || cli.pinned_config.is_some()
        || cli.cwd.is_some()
        || cli.sandbox != SandboxMode::WorkspaceWrite
        || cli.max_cost_usd.is_some()
        || cli.continue_latest
        || cli.resume.is_some()
        || cli.print.as_deref() != Some("prompt")
}

/// clap's error without its usage lines and the "error: " prefix.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or(text);
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(args: &[&str]) -> Variant {
        Variant {
            name: "v".into(),
            system_prompt_append: Some("Run the tests before you finish.".into()),
            tools: Some(vec!["read_file".into(), "bash".into()]),
            permission_mode: Some(PermissionMode::Bypass),
            max_steps: Some(10),
            args: args.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_sound_variant_passes_and_becomes_flags() {
        let v = variant(&[]);
        assert_eq!(v.check(), Ok(()));
        assert_eq!(
            v.extra_args(),
            [
                "--append-system-prompt=Run the tests before you finish.",
                "--tools=read_file,bash"
            ]
        );
        // A prompt that reads like a flag is still the prompt.
        let mut list = variant(&[]);
        list.system_prompt_append = Some("- run the tests\n-c".into());
        assert_eq!(list.check(), Ok(()));
    }

    #[test]
    fn odd_text_is_refused_cleanly() {
        for args in [&["aé"][..], &["—sandbox", "full-access"], &["é"]] {
            let e = variant(args).check().unwrap_err().to_string();
            assert!(e.starts_with("variant v: args:"), "{args:?}: {e}");
        }
        let mut v = variant(&[]);
        v.system_prompt_append = Some("a\0b".into());
        let e = v.check().unwrap_err().to_string();
        assert!(e.contains("NUL"), "{e}");
    }

    #[test]
    fn unknown_and_reserved_flags_are_refused_with_what_to_do() {
        let e = variant(&["--no-such-flag"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("variant v: args:") && e.contains("--no-such-flag"),
            "{e}"
        );
        let e = variant(&["--sandbox", "danger-full-access"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--sandbox is set by the trial itself"), "{e}");
        let e = variant(&["--sandbox=danger-full-access"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("--sandbox is set by the trial itself"), "{e}");
        let e = variant(&["-msonnet"]).check().unwrap_err().to_string();
        assert!(e.contains("-msonnet is set by the trial itself"), "{e}");
        let e = variant(&["--max-steps", "3"])
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("use the variant's max_steps"), "{e}");
        let e = variant(&["replay"]).check().unwrap_err().to_string();
        assert!(e.contains("variant v: args:"), "{e}");
    }

    #[test]
    fn names_and_fields_are_checked() {
        let mut v = variant(&[]);
        v.name = "a b".into();
        assert!(matches!(v.check(), Err(VariantError::Name { .. })));
        let mut v = variant(&[]);
        v.max_steps = Some(0);
        assert!(matches!(v.check(), Err(VariantError::NoSteps { .. })));
        let mut v = variant(&[]);
        v.tools = Some(Vec::new());
        assert!(matches!(v.check(), Err(VariantError::NoTools { .. })));
        let mut v = variant(&[]);
        v.tools = Some(vec!["read_fil".into()]);
        let e = v.check().unwrap_err().to_string();
        assert!(e.contains("no built-in tool named 'read_fil'"), "{e}");
    }
}
