//! Git repositories nested inside the workspace. Git runs what a repository's `config` and
//! `hooks/` say (`core.fsmonitor` on every `git status`, a `post-checkout` hook…), so a
//! repository an agent could write is a way to run code on the host the next time anyone runs
//! git there.
//!
//! - Repositories that exist when a command starts — every `.git` directory below the
//!   workspace, and the git directory a `.git` file points to when it is inside the workspace —
//!   are mounted read-only for that command ([`find`]).
//! - A repository the command creates (`git init sub` is ordinary work) cannot be protected in
//!   advance, so after the command its configuration is cut down to what cannot run anything
//!   (an allowlist of keys) and its hooks are removed ([`neutralize`]); the model is told.
//!
//! The walk honours `.gitignore` (a build directory is not walked on every command) and stops
//! after [`MAX_ENTRIES`] entries: repositories inside ignored directories, or past that, are
//! not seen.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The most directory entries looked at per walk.
pub const MAX_ENTRIES: usize = 50_000;

/// Config keys a new nested repository may keep: none of them makes git run a program.
const SAFE_KEYS: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "init.defaultbranch",
    "user.name",
    "user.email",
    "extensions.objectformat",
];

/// Per-remote and per-branch keys that may stay (`remote.NAME.url` …).
const SAFE_SUBSECTION_KEYS: &[(&str, &str)] = &[
    ("remote", "url"),
    ("remote", "fetch"),
    ("remote", "pushurl"),
    ("branch", "remote"),
    ("branch", "merge"),
];

/// The git directories below `workspace` (its own top-level `.git` excluded).
pub fn find(workspace: &Path) -> Vec<PathBuf> {
    // `.git` entries are noticed as the walk lists them (no extra look per directory) and
    // not descended into.
    let found = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = std::sync::Arc::clone(&found);
    let walker = ignore::WalkBuilder::new(workspace)
        .hidden(false)
        .parents(false)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .filter_entry(move |e| {
            if e.file_name() != ".git" {
                return true;
            }
            if e.depth() > 1
                && let Ok(mut f) = sink.lock()
            {
                f.push(e.path().to_path_buf());
            }
            false
        })
        .build();
    for _ in walker.take(MAX_ENTRIES) {}
    let found: Vec<PathBuf> = found.lock().map(|f| f.clone()).unwrap_or_default();
    let mut out = Vec::new();
    for dot_git in found {
        match std::fs::symlink_metadata(&dot_git) {
            Ok(m) if m.is_dir() => out.push(dot_git),
            Ok(m) if m.is_file() => {
                if let Some(target) = gitdir_of(&dot_git)
                    && target.starts_with(workspace)
                {
                    out.push(target);
                }
                out.push(dot_git);
            }
            _ => {}
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Where a `.git` file (`gitdir: PATH`) points, resolved.
fn gitdir_of(dot_git: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(dot_git).ok()?;
    let rel = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let base = dot_git.parent()?;
    base.join(rel).canonicalize().ok()
}

/// Cuts the configuration of each git directory in `dirs` that is not in `protected` down to
/// safe keys and removes its hooks. Returns what was removed, for the model.
pub fn neutralize(dirs: &[PathBuf], protected: &[PathBuf], workspace: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    for dir in dirs {
        if protected.contains(dir) || !dir.is_dir() {
            continue;
        }
        let shown = dir
            .strip_prefix(workspace)
            .unwrap_or(dir)
            .display()
            .to_string();
        let mut removed = Vec::new();
        removed.extend(cut_config(&dir.join("config")));
        if let Ok(hooks) = std::fs::read_dir(dir.join("hooks")) {
            for hook in hooks.flatten() {
                let name = hook.file_name().to_string_lossy().into_owned();
                if !name.ends_with(".sample") && std::fs::remove_file(hook.path()).is_ok() {
                    removed.push(format!("hooks/{name}"));
                }
            }
        }
        for extra in ["config.worktree", "commondir"] {
            if std::fs::remove_file(dir.join(extra)).is_ok() {
                removed.push(extra.to_string());
            }
        }
        if !removed.is_empty() {
            notes.push(format!("{shown}: {}", removed.join(", ")));
        }
    }
    notes
}

fn safe_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    if SAFE_KEYS.contains(&key.as_str()) {
        return true;
    }
    // section.subsection.name: the subsection may hold dots.
    let (Some((section, _)), Some((_, name))) = (key.split_once('.'), key.rsplit_once('.')) else {
        return false;
    };
    SAFE_SUBSECTION_KEYS
        .iter()
        .any(|(s, n)| *s == section && *n == name)
}

/// Rewrites `config` keeping only safe keys (read and written by git itself, which runs
/// nothing for `config --file`). Returns the keys removed.
fn cut_config(config: &Path) -> Vec<String> {
    let Ok(listed) = git_config(config, &["--list", "--null"]) else {
        // Unreadable by git: not something git would run from either; remove it.
        return if std::fs::remove_file(config).is_ok() {
            vec!["config (unreadable)".into()]
        } else {
            Vec::new()
        };
    };
    let entries: Vec<(String, String)> = listed
        .split('\0')
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once('\n') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (e.to_string(), String::new()),
        })
        .collect();
    let removed: Vec<String> = entries
        .iter()
        .filter(|(k, _)| !safe_key(k))
        .map(|(k, _)| k.clone())
        .collect();
    if removed.is_empty() {
        return removed;
    }
    let fresh = config.with_extension("anvil-safe");
    let _ = std::fs::remove_file(&fresh);
    let mut ok = true;
    for (k, v) in entries.iter().filter(|(k, _)| safe_key(k)) {
        ok &= git_config(&fresh, &["--add", k, v]).is_ok();
    }
    if !fresh.exists() {
        ok &= std::fs::write(&fresh, "").is_ok();
    }
    if ok && std::fs::rename(&fresh, config).is_ok() {
        removed
    } else {
        // Could not rewrite it: better no config than a dangerous one.
        let _ = std::fs::remove_file(&fresh);
        let _ = std::fs::remove_file(config);
        vec!["config".into()]
    }
}

/// `git config --file FILE ARGS`, isolated from every other configuration.
fn git_config(file: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .arg("config")
        .arg("--file")
        .arg(file)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_DIR")
        .current_dir("/")
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_that_run_nothing_are_safe() {
        for k in [
            "core.repositoryformatversion",
            "remote.origin.url",
            "remote.a.b.fetch",
            "branch.main.merge",
            "user.email",
        ] {
            assert!(safe_key(k), "{k}");
        }
        for k in [
            "core.fsmonitor",
            "core.hookspath",
            "core.sshcommand",
            "core.pager",
            "alias.st",
            "filter.x.smudge",
            "diff.x.textconv",
            "include.path",
            "includeif.gitdir:/x.path",
            "remote.origin.uploadpack",
            "credential.helper",
        ] {
            assert!(!safe_key(k), "{k}");
        }
    }
}
