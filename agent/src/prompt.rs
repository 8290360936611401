//! The system prompt: anvil's base instructions, the environment, and project instructions
//! (AGENTS.md, or CLAUDE.md where a project has only that) discovered from the working
//! directory up to the repository root, plus the user's global file.
//!
//! The prompt is the start of the cache prefix, so building it twice in a session must give the
//! same bytes: nothing in it depends on the clock or on iteration order.

use std::path::{Path, PathBuf};

use anvil_llm::text::Limit;

/// Project instruction files larger than this are cut, with a note saying so.
pub const MAX_INSTRUCTION_BYTES: usize = 20 * 1024;

/// File names read as project instructions, in order of preference within one directory.
pub const INSTRUCTION_FILES: [&str; 2] = ["AGENTS.md", "CLAUDE.md"];

pub const BASE_INSTRUCTIONS: &str = "\
You are anvil, a coding agent working in the user's repository through the tools you are given.

# How to work
- Understand before you change: find the relevant code with glob and grep, read it with
  read_file, and follow the conventions you see (naming, error handling, tests, formatting).
- Make the smallest change that fully solves the task. Do not refactor, rename or reformat
  code the task does not need, and do not add dependencies without a reason.
- Edit with edit_file; create files with write_file. Use bash to build, run tests, and use
  git — not to read, search or edit files.
- Verify your work: run the project's tests, type checker or build after changing code, and
  fix what you broke. If you cannot verify something, say so.
- When a command fails, read the error and fix the cause; do not retry the same thing blindly.
- Work autonomously to the end of the task. Ask the user only when the task is genuinely
  ambiguous or a decision is theirs to make (deleting data, changing public interfaces).

# Safety
- Stay inside the workspace. Never touch credentials, keys or files outside the repository,
  and never try to get around a refused tool call: explain what you needed instead.
- Do not run destructive commands (rm -rf, git reset --hard, force pushes) unless the user
  asked for exactly that.
- Do not commit, push or publish unless asked.

# Answering
- Be brief and concrete. Lead with the result; mention the files you changed and how you
  verified them. Use Markdown only where it helps (code blocks, short lists).
- Reference code as path:line so the user can jump to it.
- If you did not finish, say what is left and why.
";

/// One project instruction file as it goes into the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instructions {
    /// How the file is named in the prompt: relative to the repository root, or `~/…`.
    pub label: String,
    pub path: PathBuf,
    pub content: String,
}

/// The repository root: the nearest ancestor of `cwd` (itself included) with a `.git`.
pub fn git_root(cwd: &Path) -> Option<PathBuf> {
    cwd.ancestors()
        .find(|dir| dir.join(".git").exists())
        .map(Path::to_path_buf)
}

fn read_capped(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    let kept = Limit::bytes(MAX_INSTRUCTION_BYTES).apply(&text);
    if !kept.is_cut() {
        return Some(text.into_owned());
    }
    Some(format!(
        "{}\n\n[truncated: this file is {} KB; only its first {} KB are included]",
        kept.head,
        text.len() / 1024,
        MAX_INSTRUCTION_BYTES / 1024
    ))
}

/// Project instructions for `cwd`: the user's global file first, then one file per directory
/// from the repository root down to `cwd` (AGENTS.md preferred over CLAUDE.md). Without a
/// repository, only `cwd` itself is searched.
pub fn discover_instructions(cwd: &Path, global: Option<&Path>) -> Vec<Instructions> {
    let mut found = Vec::new();
    if let Some(path) = global
        && let Some(content) = read_capped(path)
    {
        found.push(Instructions {
            label: "~/.config/anvil/AGENTS.md (your global instructions)".into(),
            path: path.to_path_buf(),
            content,
        });
    }
    let root = git_root(cwd);
    let dirs: Vec<&Path> = match &root {
        Some(root) => {
            let mut dirs: Vec<&Path> = cwd
                .ancestors()
                .take_while(|d| d.starts_with(root))
                .collect();
            dirs.reverse();
            dirs
        }
        None => vec![cwd],
    };
    let base = root.as_deref().unwrap_or(cwd);
    for dir in dirs {
        for name in INSTRUCTION_FILES {
            let path = dir.join(name);
            if let Some(content) = read_capped(&path) {
                let rel = path.strip_prefix(base).unwrap_or(&path);
                found.push(Instructions {
                    label: rel.display().to_string(),
                    path,
                    content,
                });
                break;
            }
        }
    }
    found
}

/// `~/.config/anvil/AGENTS.md`, the user's global instructions.
pub fn global_instructions_path() -> Option<PathBuf> {
    anvil_llm::config::user_config_path().and_then(|p| p.parent().map(|dir| dir.join("AGENTS.md")))
}

/// Assembles the system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptBuilder {
    pub base: String,
    pub cwd: PathBuf,
    pub platform: String,
    pub instructions: Vec<Instructions>,
    /// Text appended after everything else (`anvil --append-system-prompt`).
    pub append: Option<String>,
}

impl PromptBuilder {
    /// The base instructions plus everything discovered for `cwd`.
    pub fn for_workspace(cwd: &Path) -> Self {
        let global = global_instructions_path();
        Self {
            base: BASE_INSTRUCTIONS.to_string(),
            cwd: cwd.to_path_buf(),
            platform: std::env::consts::OS.to_string(),
            instructions: discover_instructions(cwd, global.as_deref()),
            append: None,
        }
    }

    pub fn build(&self) -> String {
        let mut out = String::with_capacity(
            self.base.len()
                + self
                    .instructions
                    .iter()
                    .map(|i| i.content.len() + 64)
                    .sum::<usize>()
                + 256,
        );
        out.push_str(self.base.trim_end());
        out.push_str("\n\n# Environment\n");
        out.push_str(&format!("- Working directory: {}\n", self.cwd.display()));
        out.push_str(&format!("- Platform: {}\n", self.platform));
        if !self.instructions.is_empty() {
            out.push_str(
                "\n# Project instructions\nThe user and the repository give these instructions. \
                 Follow them; where they conflict, the more specific (later) file wins.\n",
            );
            for i in &self.instructions {
                out.push_str(&format!("\n## {}\n\n", i.label));
                out.push_str(i.content.trim_end());
                out.push('\n');
            }
        }
        if let Some(text) = self.append.as_deref().filter(|t| !t.trim().is_empty()) {
            out.push('\n');
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_instructions_stay_short() {
        assert!(BASE_INSTRUCTIONS.lines().count() < 60);
    }

    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("crates/core/src")).unwrap();
        std::fs::write(
            root.join("AGENTS.md"),
            "Run `cargo test` before finishing.\n",
        )
        .unwrap();
        std::fs::write(root.join("CLAUDE.md"), "ignored: AGENTS.md wins here\n").unwrap();
        std::fs::write(root.join("crates/CLAUDE.md"), "Crates use thiserror.\n").unwrap();
        std::fs::write(
            root.join("crates/core/AGENTS.md"),
            "core must not depend on tokio.\n",
        )
        .unwrap();
        dir
    }

    #[test]
    fn nested_instructions_snapshot() {
        let dir = fixture();
        let root = dir.path().canonicalize().unwrap();
        let global = root.join("global-AGENTS.md");
        std::fs::write(&global, "Prefer small commits.\n").unwrap();
        let cwd = root.join("crates/core/src");
        let builder = PromptBuilder {
            append: None,
            base: BASE_INSTRUCTIONS.to_string(),
            cwd: cwd.clone(),
            platform: "linux".into(),
            instructions: discover_instructions(&cwd, Some(&global)),
        };
        let prompt = builder.build();
        // Byte-identical on rebuild.
        assert_eq!(prompt, builder.build());
        insta::assert_snapshot!(prompt.replace(&root.display().to_string(), "[REPO]"));
    }

    #[test]
    fn instructions_stop_at_the_git_root_and_large_files_are_cut() {
        let outer = tempfile::tempdir().unwrap();
        std::fs::write(outer.path().join("AGENTS.md"), "outside the repo").unwrap();
        let repo = outer.path().join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::write(repo.join("AGENTS.md"), "é".repeat(15_000)).unwrap();
        let found = discover_instructions(&repo, None);
        assert_eq!(found.len(), 1);
        assert!(found[0].content.contains("[truncated: this file is 29 KB"));
        assert!(found[0].content.len() < MAX_INSTRUCTION_BYTES + 200);
    }
}
