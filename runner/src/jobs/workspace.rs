//! A trial's fresh workspace: a copy of the task's `repo/` (never its grader files), made a git
//! repository with one commit so the agent can see and diff its own changes.
//!
//! The tree is copied by the one tree copy ([`anvil_grader::tree`]): regular files keep their
//! executable bit, symlinks inside the tree are copied as symlinks, `.git` is left out at every
//! depth. The commit is made with hooks off, no signing and a fixed identity, so nothing from
//! the host's git configuration runs or leaks into it.
//!
//! Committing a repository costs one object file per file, so it is done once per repository
//! content, in a **template** (`<root>/templates/<key>/`, made in a temp dir and renamed into
//! place so concurrent workers share it). A trial's workspace is a copy of the template's
//! files plus a small `.git/` of its own that borrows the template's objects through
//! `objects/info/alternates` and starts from its index, branch and commit. The agent's new
//! objects go to the workspace's own store; the template is only ever read.

use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("cannot prepare a workspace under {under}: {reason}")]
    Create { under: PathBuf, reason: String },
    #[error("cannot copy {path} into the workspace: {source}")]
    Copy {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot list the workspaces in {dir}: {source}")]
    List {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot remove the kept workspace {dir}: {source}")]
    Remove {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error("git {step} failed in {dir}: {reason}")]
    Git {
        step: String,
        dir: PathBuf,
        reason: String,
    },
    /// The workspaces root is not a directory only this user can change.
    #[error("refusing the workspaces directory: {0}")]
    NotPrivate(#[from] crate::jobs::private_dir::PrivateDirError),
}

/// A prepared workspace; removed on drop unless kept.
#[derive(Debug)]
pub struct Workspace {
    root: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl Workspace {
    /// The directory the agent works in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the workspace on disk (for `--keep-workspaces`) and returns where it is now.
    ///
    /// Its directory is renamed from `p<pid>.<label>-<random>` to `kept.<label>-<random>`: the
    /// owner prefix is what [`Workspaces::remove_stale`] deletes once the process is gone, and a
    /// kept workspace must stay until the user removes it ([`Workspaces::remove_kept`],
    /// `anvil-evals workspaces clean`). If the rename fails the directory is still kept, under
    /// its old name, with a warning.
    pub fn keep(mut self) -> PathBuf {
        let Some(root) = self.root.take() else {
            return self.path.clone();
        };
        let root = root.keep();
        let kept = root
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split_once('.'))
            .and_then(|(_, rest)| Some(root.parent()?.join(format!("{KEPT_PREFIX}{rest}"))));
        let Some(kept) = kept else {
            return self.path.clone();
        };
        match std::fs::rename(&root, &kept) {
            Ok(()) => kept.join(WORKSPACE_DIR),
            Err(e) => {
                tracing::warn!(
                    "cannot rename the kept workspace {} to {}: {e}; a later worker may remove it",
                    root.display(),
                    kept.display()
                );
                self.path.clone()
            }
        }
    }
}

/// The directory, inside a trial's own directory, that the agent works in.
const WORKSPACE_DIR: &str = "workspace";

/// Kept workspaces' directories start with this instead of their owner's pid.
pub const KEPT_PREFIX: &str = "kept.";

/// Where workspaces go without `--workspaces`: `anvil-trials-<uid>` in the temp directory,
/// one per user. A directory of that name another user made first is refused (see
/// [`private_dir`](crate::jobs::private_dir)), never used.
pub fn default_root() -> PathBuf {
    std::env::temp_dir().join(format!("anvil-trials-{}", nix::unistd::geteuid()))
}

/// Makes workspaces under one root, with a template per repository content.
#[derive(Debug, Clone)]
pub struct Workspaces {
    root: PathBuf,
}

impl Workspaces {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A fresh workspace holding `repo`, committed. `key` names the repository's content
    /// (e.g. its digest): the same key must mean the same content.
    pub fn prepare(
        &self,
        repo: &Path,
        key: &str,
        label: &str,
    ) -> Result<Workspace, WorkspaceError> {
        // Templates decide what every trial starts from: nobody else may write here.
        crate::jobs::private_dir::ensure(&self.root)?;
        let template = self.template(repo, key)?;
        let root = tempfile::Builder::new()
            .prefix(&format!(
                "{}{}-",
                owner_prefix(std::process::id()),
                sanitize(label)
            ))
            .tempdir_in(&self.root)
            .map_err(|e| WorkspaceError::Create {
                under: self.root.clone(),
                reason: e.to_string(),
            })?;
        let path = root.path().join(WORKSPACE_DIR);
        copy_tree(&template.join("tree"), &path)?;
        borrow_git(&template.join("tree/.git"), &path.join(".git"))?;
        Ok(Workspace {
            root: Some(root),
            path,
        })
    }

    /// Removes workspaces left behind by worker processes that are gone (killed before they
    /// could clean up). Workspaces of live processes, and templates, are left alone. Returns
    /// how many were removed.
    pub fn remove_stale(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = owner_pid(&name) else {
                continue;
            };
            if process_alive(pid) {
                continue;
            }
            if std::fs::remove_dir_all(entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// The workspaces kept by `--keep-workspaces` (the directory the agent worked in), oldest
    /// name first.
    pub fn kept(&self) -> Result<Vec<PathBuf>, WorkspaceError> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(WorkspaceError::List {
                    dir: self.root.clone(),
                    source,
                });
            }
        };
        let mut kept: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(KEPT_PREFIX))
            .map(|e| e.path().join(WORKSPACE_DIR))
            .collect();
        kept.sort();
        Ok(kept)
    }

    /// Removes every kept workspace; returns how many. Templates and the workspaces of
    /// running trials are left alone.
    pub fn remove_kept(&self) -> Result<usize, WorkspaceError> {
        let kept = self.kept()?;
        for workspace in &kept {
            let dir = workspace.parent().unwrap_or(workspace);
            std::fs::remove_dir_all(dir).map_err(|source| WorkspaceError::Remove {
                dir: dir.to_path_buf(),
                source,
            })?;
        }
        Ok(kept.len())
    }

    /// The committed template of `repo` under `key`, made on first use.
    fn template(&self, repo: &Path, key: &str) -> Result<PathBuf, WorkspaceError> {
        let templates = self.root.join("templates");
        let dir = templates.join(sanitize(key));
        if dir.join("tree/.git/HEAD").is_file() {
            return Ok(dir);
        }
        std::fs::create_dir_all(&templates).map_err(|e| WorkspaceError::Create {
            under: templates.clone(),
            reason: e.to_string(),
        })?;
        let staging = tempfile::Builder::new()
            .prefix(".staging-")
            .tempdir_in(&templates)
            .map_err(|e| WorkspaceError::Create {
                under: templates.clone(),
                reason: e.to_string(),
            })?;
        let tree = staging.path().join("tree");
        copy_tree(repo, &tree)?;
        git(&tree, "init", &["init", "-q", "-b", "main"])?;
        git(&tree, "add", &["add", "-A"])?;
        git(
            &tree,
            "commit",
            &["commit", "-q", "--no-verify", "-m", "task repository"],
        )?;
        // Another worker may have won the race; its template is as good as ours.
        match std::fs::rename(staging.path(), &dir) {
            Ok(()) => {
                let _ = staging.keep();
                Ok(dir)
            }
            Err(_) if dir.join("tree/.git/HEAD").is_file() => Ok(dir),
            Err(e) => Err(WorkspaceError::Create {
                under: dir,
                reason: e.to_string(),
            }),
        }
    }
}

/// A `.git/` at `to` that starts where the template's does, borrowing its objects.
fn borrow_git(template: &Path, to: &Path) -> Result<(), WorkspaceError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| WorkspaceError::Copy { path, source }
    };
    let head = std::fs::read_to_string(template.join("refs/heads/main")).map_err(io(template))?;
    for dir in ["objects/info", "objects/pack", "refs/heads", "refs/tags"] {
        std::fs::create_dir_all(to.join(dir)).map_err(io(to))?;
    }
    let objects = template.join("objects");
    let files: [(&str, String); 4] = [
        ("HEAD", "ref: refs/heads/main\n".into()),
        (
            "config",
            "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\
             \tlogallrefupdates = true\n[gc]\n\tauto = 0\n"
                .into(),
        ),
        ("refs/heads/main", head),
        (
            "objects/info/alternates",
            format!("{}\n", objects.display()),
        ),
    ];
    for (name, content) in files {
        std::fs::write(to.join(name), content).map_err(io(&to.join(name)))?;
    }
    std::fs::copy(template.join("index"), to.join("index")).map_err(io(&template.join("index")))?;
    Ok(())
}

/// Workspace directories start with their owner's pid, so a later worker can tell an
/// abandoned one from a live one.
fn owner_prefix(pid: u32) -> String {
    format!("p{pid}.")
}

fn owner_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix('p')?;
    let (pid, _) = rest.split_once('.')?;
    pid.parse().ok()
}

fn process_alive(pid: i32) -> bool {
    // Signal 0 checks existence; EPERM means it exists but is not ours.
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(nix::errno::Errno::ESRCH) => false,
        Err(_) => true,
    }
}

fn sanitize(label: &str) -> String {
    label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(60)
        .collect()
}

/// The one tree copy and its policy ([`anvil_grader::tree`]); a task repository with entries
/// the policy leaves out (links out of it, special files) cannot be used.
fn copy_tree(from: &Path, to: &Path) -> Result<(), WorkspaceError> {
    use anvil_grader::tree::{CopyPolicy, copy};
    let copied = copy(from, to, &CopyPolicy::default()).map_err(|e| WorkspaceError::Copy {
        path: e.path,
        source: e.source,
    })?;
    if let Some(s) = copied.skipped.first() {
        return Err(WorkspaceError::Create {
            under: from.to_path_buf(),
            reason: format!("{} cannot be copied: {:?}", s.path, s.reason),
        });
    }
    Ok(())
}

fn git(dir: &Path, step: &str, args: &[&str]) -> Result<(), WorkspaceError> {
    let output = Command::new("git")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.compression=0",
            "-c",
            "core.looseCompression=0",
            "-c",
            "gc.auto=0",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "anvil")
        .env("GIT_AUTHOR_EMAIL", "anvil@localhost")
        .env("GIT_COMMITTER_NAME", "anvil")
        .env("GIT_COMMITTER_EMAIL", "anvil@localhost")
        .env("GIT_AUTHOR_DATE", "2000-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2000-01-01T00:00:00Z")
        .output()
        .map_err(|e| WorkspaceError::Git {
            step: step.into(),
            dir: dir.to_path_buf(),
            reason: format!("cannot run git: {e} (is git installed?)"),
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(WorkspaceError::Git {
            step: step.into(),
            dir: dir.to_path_buf(),
            reason: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn copies_the_repo_and_commits_it() {
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("src/.git")).unwrap();
        std::fs::create_dir_all(src.path().join(".git")).unwrap();
        std::fs::write(src.path().join(".git/config"), "[core]\n").unwrap();
        std::fs::write(src.path().join("src/lib.rs"), "fn x() {}\n").unwrap();
        std::fs::write(src.path().join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            src.path().join("run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("src/lib.rs", src.path().join("link")).unwrap();
        let under = tempfile::tempdir().unwrap();
        let workspaces = Workspaces::new(under.path());
        let ws = workspaces.prepare(src.path(), "digest1", "t/1").unwrap();
        let p = ws.path().to_path_buf();
        assert_eq!(
            std::fs::read_to_string(p.join("src/lib.rs")).unwrap(),
            "fn x() {}\n"
        );
        assert_eq!(
            std::fs::read_link(p.join("link")).unwrap(),
            Path::new("src/lib.rs")
        );
        assert!(
            std::fs::metadata(p.join("run.sh"))
                .unwrap()
                .permissions()
                .mode()
                & 0o111
                != 0
        );
        let status = Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(&p)
            .output()
            .unwrap();
        assert!(
            status.stdout.is_empty(),
            "everything committed: {}",
            String::from_utf8_lossy(&status.stdout)
        );
        let config = std::fs::read_to_string(p.join(".git/config")).unwrap();
        assert_ne!(
            config, "[core]\n",
            "a fresh repository, not the copied .git"
        );
        drop(ws);
        assert!(!p.exists(), "removed on drop");
    }

    fn git_out(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn workspaces_of_dead_workers_are_removed_and_live_ones_kept() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a.txt"), "one\n").unwrap();
        let under = tempfile::tempdir().unwrap();
        let workspaces = Workspaces::new(under.path());
        let live = workspaces.prepare(src.path(), "k", "mine").unwrap();
        // A workspace whose owner is gone: a child that has exited.
        let mut child = Command::new("true").spawn().unwrap();
        let dead_pid = child.id();
        child.wait().unwrap();
        let abandoned = under
            .path()
            .join(format!("{}task-1-xyz", owner_prefix(dead_pid)));
        std::fs::create_dir_all(abandoned.join("workspace/src")).unwrap();
        assert_eq!(workspaces.remove_stale(), 1);
        assert!(!abandoned.exists());
        assert!(live.path().exists(), "a live worker's workspace stays");
        assert!(under.path().join("templates/k").exists(), "templates stay");
    }

    /// Regression: a kept workspace kept its owner's `p<pid>.` prefix, so once that process
    /// had exited the next run's stale sweep deleted it.
    #[test]
    fn a_kept_workspace_loses_its_owner_prefix_and_is_removed_only_on_request() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a.txt"), "one\n").unwrap();
        let under = tempfile::tempdir().unwrap();
        let workspaces = Workspaces::new(under.path());
        let ws = workspaces.prepare(src.path(), "k", "t-m-0-a1").unwrap();
        std::fs::write(ws.path().join("a.txt"), "the agent's change\n").unwrap();
        let kept = ws.keep();
        let dir = kept
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        assert!(dir.starts_with("kept.t-m-0-a1-"), "{dir}");
        assert_eq!(owner_pid(dir), None, "no owner whose death would remove it");
        assert_eq!(
            std::fs::read_to_string(kept.join("a.txt")).unwrap(),
            "the agent's change\n"
        );
        assert_eq!(workspaces.remove_stale(), 0);
        assert_eq!(workspaces.kept().unwrap(), vec![kept.clone()]);
        let running = workspaces.prepare(src.path(), "k", "running").unwrap();
        assert_eq!(workspaces.remove_kept().unwrap(), 1);
        assert!(!kept.parent().unwrap().exists());
        assert!(workspaces.kept().unwrap().is_empty());
        assert!(running.path().exists(), "a running trial's workspace stays");
        assert!(under.path().join("templates/k").exists(), "templates stay");
    }

    #[test]
    fn workspaces_share_a_template_but_not_their_changes() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("a.txt"), "one\n").unwrap();
        let under = tempfile::tempdir().unwrap();
        let workspaces = Workspaces::new(under.path());
        let first = workspaces.prepare(src.path(), "k", "x").unwrap();
        let second = workspaces.prepare(src.path(), "k", "x").unwrap();
        // The agent edits and commits in the first; the second and the template see nothing.
        std::fs::write(first.path().join("a.txt"), "two\n").unwrap();
        assert!(git_out(first.path(), &["diff", "--stat"]).contains("1 file changed"));
        git_out(
            first.path(),
            &[
                "-c",
                "user.name=a",
                "-c",
                "user.email=a@b",
                "commit",
                "-qam",
                "agent",
            ],
        );
        assert_eq!(
            git_out(first.path(), &["log", "--oneline"]).lines().count(),
            2
        );
        assert!(git_out(second.path(), &["status", "--porcelain"]).is_empty());
        assert_eq!(
            git_out(second.path(), &["log", "--oneline"])
                .lines()
                .count(),
            1
        );
        assert_eq!(
            std::fs::read_to_string(second.path().join("a.txt")).unwrap(),
            "one\n"
        );
        let template = under.path().join("templates/k/tree");
        assert_eq!(
            git_out(&template, &["log", "--oneline"]).lines().count(),
            1,
            "the template is untouched"
        );
        git_out(first.path(), &["fsck", "--no-progress"]);
    }
}
