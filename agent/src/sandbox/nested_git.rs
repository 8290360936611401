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
//! The walk looks everywhere (ignore files are the command's to write, so they cannot decide
//! what is looked at) except build caches tagged before the command (`CACHEDIR.TAG`, cargo's
//! `target/`), never follows a symlink, recognises a git directory by its contents whatever
//! its name, and stops after [`MAX_ENTRIES`] entries; when it stops early the model is told
//! that repositories beyond it were not checked.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The most directory entries looked at per walk.
pub const MAX_ENTRIES: usize = 200_000;

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
    find_capped(workspace, None).0
}

/// [`find`], and whether the walk stopped at [`MAX_ENTRIES`] before seeing everything.
///
/// Build caches (a directory holding a `CACHEDIR.TAG`, as cargo's `target/` does) are not
/// walked — unless the tag changed after `since` (its ctime, which no command can set back): a command that tags a directory to hide a
/// repository it plants there does not hide it.
pub fn find_capped(workspace: &Path, since: Option<std::time::SystemTime>) -> (Vec<PathBuf>, bool) {
    let mut out = Vec::new();
    let mut stack = vec![workspace.to_path_buf()];
    let mut seen = 0usize;
    let mut capped = false;
    'walk: while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        // A directory that looks like a git directory (HEAD, objects/, refs/) is one, whatever
        // its name: `git --git-dir=x`, or a bare repository with core.worktree.
        if dir != workspace && looks_like_git_dir(&dir) {
            out.push(dir.clone());
            continue;
        }
        if let Ok(tag) = std::fs::symlink_metadata(dir.join("CACHEDIR.TAG"))
            && tag.is_file()
            && since.is_none_or(|t| changed_at(&tag) < t)
        {
            continue;
        }
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                capped = true;
                break 'walk;
            }
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if entry.file_name() == ".git" {
                if dir == workspace {
                    continue;
                }
                if kind.is_dir() {
                    out.push(path);
                } else {
                    // A `.git` file or symlink: it and what it leads to, when inside.
                    if let Some(target) = gitdir_of(&path)
                        && target.starts_with(workspace)
                    {
                        out.push(target);
                    }
                    out.push(path);
                }
                continue;
            }
            // Never through a symlink (it is judged where it leads, if inside).
            if kind.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out.dedup();
    (out, capped)
}

/// When the inode last changed (ctime: unlike mtime, a command cannot set it back).
fn changed_at(m: &std::fs::Metadata) -> std::time::SystemTime {
    use std::os::unix::fs::MetadataExt;
    std::time::UNIX_EPOCH
        + std::time::Duration::new(m.ctime().max(0) as u64, m.ctime_nsec().max(0) as u32)
}

fn looks_like_git_dir(dir: &Path) -> bool {
    let is = |p: &str, dir_wanted: bool| {
        std::fs::symlink_metadata(dir.join(p))
            .is_ok_and(|m| if dir_wanted { m.is_dir() } else { m.is_file() })
    };
    is("HEAD", false) && is("objects", true) && is("refs", true)
}

/// Where a `.git` file (`gitdir: PATH`) points, resolved.
fn gitdir_of(dot_git: &Path) -> Option<PathBuf> {
    if std::fs::symlink_metadata(dot_git)
        .ok()?
        .file_type()
        .is_symlink()
    {
        return dot_git.canonicalize().ok();
    }
    let text = std::fs::read_to_string(dot_git).ok()?;
    let rel = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let base = dot_git.parent()?;
    base.join(rel).canonicalize().ok()
}

/// A path and the inode it named (device, inode) when it was recorded.
pub type Identity = (PathBuf, Option<(u64, u64)>);

/// `paths` with the inode each names now.
pub fn identities(paths: &[PathBuf]) -> Vec<Identity> {
    use std::os::unix::fs::MetadataExt;
    paths
        .iter()
        .map(|p| {
            let id = std::fs::symlink_metadata(p)
                .ok()
                .map(|m| (m.dev(), m.ino()));
            (p.clone(), id)
        })
        .collect()
}

/// Cuts the configuration of each git directory in `dirs` that is not one of the `protected`
/// ones — the same path *and* the same inode: a command can move a read-only repository away
/// with its parent and build a new one at the old path — and removes its hooks. Returns what
/// was removed, for the model.
pub fn neutralize(dirs: &[PathBuf], protected: &[Identity], workspace: &Path) -> Vec<String> {
    let mut notes = Vec::new();
    let now = identities(dirs);
    for (dir, id) in &now {
        let dir = &dir.clone();
        if id.is_some() && protected.iter().any(|(p, pid)| p == dir && pid == id) {
            continue;
        }
        // A `.git` that is a symlink or a file is not a directory to clean: the directory it
        // leads to is in `dirs` on its own when it is inside the workspace.
        let is_real_dir = std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir());
        if !is_real_dir {
            continue;
        }
        let shown = dir
            .strip_prefix(workspace)
            .unwrap_or(dir)
            .display()
            .to_string();
        let mut removed = Vec::new();
        // Nothing here is ever followed through a symlink: anvil runs this on the host with
        // its own rights, and a link could lead anywhere.
        let config = dir.join("config");
        if is_symlink(&config) {
            if std::fs::remove_file(&config).is_ok() {
                removed.push("config (a symlink)".into());
            }
        } else {
            removed.extend(cut_config(&config));
        }
        let hooks = dir.join("hooks");
        if is_symlink(&hooks) {
            if std::fs::remove_file(&hooks).is_ok() {
                removed.push("hooks (a symlink)".into());
            }
        } else if let Ok(entries) = std::fs::read_dir(&hooks) {
            for hook in entries.flatten() {
                let name = hook.file_name().to_string_lossy().into_owned();
                let is_dir = hook.file_type().is_ok_and(|t| t.is_dir());
                let gone = if is_dir {
                    std::fs::remove_dir_all(hook.path()).is_ok()
                } else {
                    !name.ends_with(".sample") && std::fs::remove_file(hook.path()).is_ok()
                };
                if gone {
                    removed.push(format!("hooks/{name}"));
                }
            }
        }
        for extra in ["config.worktree", "commondir"] {
            let p = dir.join(extra);
            if std::fs::symlink_metadata(&p).is_ok() && std::fs::remove_file(&p).is_ok() {
                removed.push(extra.to_string());
            }
        }
        if !removed.is_empty() {
            notes.push(format!("{shown}: {}", removed.join(", ")));
        }
    }
    notes
}

fn is_symlink(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
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
