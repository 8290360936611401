//! A trial's fresh workspace: a copy of the task's `repo/` (never its grader files), made a git
//! repository with one commit so the agent can see and diff its own changes.
//!
//! Regular files keep their executable bit, symlinks are copied as symlinks, `.git/` is left
//! out. The commit is made with hooks off, no signing and a fixed identity, so nothing from
//! the host's git configuration runs or leaks into it.

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
    #[error("git {step} failed in {dir}: {reason}")]
    Git {
        step: String,
        dir: PathBuf,
        reason: String,
    },
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

    /// Keeps the workspace on disk (for `--keep-workspaces`) and returns where it is.
    pub fn keep(mut self) -> PathBuf {
        if let Some(root) = self.root.take() {
            let _ = root.keep();
        }
        self.path.clone()
    }
}

/// Copies `repo` into a new directory under `under` and commits it.
pub fn prepare(repo: &Path, under: &Path, label: &str) -> Result<Workspace, WorkspaceError> {
    std::fs::create_dir_all(under).map_err(|e| WorkspaceError::Create {
        under: under.to_path_buf(),
        reason: e.to_string(),
    })?;
    let root = tempfile::Builder::new()
        .prefix(&format!("{}-", sanitize(label)))
        .tempdir_in(under)
        .map_err(|e| WorkspaceError::Create {
            under: under.to_path_buf(),
            reason: e.to_string(),
        })?;
    let path = root.path().join("workspace");
    copy_tree(repo, &path)?;
    git(&path, "init", &["init", "-q", "-b", "main"])?;
    git(&path, "add", &["add", "-A"])?;
    git(
        &path,
        "commit",
        &["commit", "-q", "--no-verify", "-m", "task repository"],
    )?;
    Ok(Workspace {
        root: Some(root),
        path,
    })
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

fn copy_tree(from: &Path, to: &Path) -> Result<(), WorkspaceError> {
    let copy_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| WorkspaceError::Copy { path, source }
    };
    std::fs::create_dir_all(to).map_err(copy_err(to))?;
    for entry in std::fs::read_dir(from).map_err(copy_err(from))? {
        let entry = entry.map_err(copy_err(from))?;
        let name = entry.file_name();
        if name == ".git" {
            continue;
        }
        let src = entry.path();
        let dst = to.join(&name);
        let kind = entry.file_type().map_err(copy_err(&src))?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&src).map_err(copy_err(&src))?;
            std::os::unix::fs::symlink(target, &dst).map_err(copy_err(&src))?;
        } else if kind.is_file() {
            // fs::copy keeps the permission bits (the executable bit included).
            std::fs::copy(&src, &dst).map_err(copy_err(&src))?;
        }
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
        let ws = prepare(src.path(), under.path(), "t/1").unwrap();
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
}
