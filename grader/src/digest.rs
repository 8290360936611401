//! Stable sha256 digests of a task's parts, recorded with every result so a number can be traced
//! to exactly what produced it.
//!
//! A tree digest covers the sorted relative paths of all regular files and symlinks with their
//! contents (or link targets) and executable bits; it ignores timestamps and the order the
//! filesystem lists entries in. `.git/` is left out.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::task::Task;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskDigests {
    /// task.toml.
    pub task: String,
    /// repo/.
    pub repo: String,
    /// grader/ (the protected files) and anvil's protected runners: a change to either
    /// changes what a verdict means.
    pub grader: String,
    /// The declared dependency files in repo/.
    pub dependencies: String,
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.is_dir() {
            if entry.file_name() == ".git" {
                continue;
            }
            collect(root, &path, out)?;
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path)?;
            out.push((
                format!("L {rel}"),
                target.to_string_lossy().into_owned().into_bytes(),
            ));
        } else {
            use std::os::unix::fs::PermissionsExt;
            let exec = if meta.permissions().mode() & 0o111 != 0 {
                "x"
            } else {
                "-"
            };
            out.push((format!("F{exec} {rel}"), std::fs::read(&path)?));
        }
    }
    Ok(())
}

/// The digest of a directory tree (see the module docs).
pub fn tree(root: &Path) -> std::io::Result<String> {
    let mut files = Vec::new();
    collect(root, root, &mut files)?;
    let mut h = Sha256::new();
    for (name, content) in files {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((content.len() as u64).to_le_bytes());
        h.update(&content);
    }
    Ok(hex::encode(h.finalize()))
}

pub fn of_task(task: &Task) -> std::io::Result<TaskDigests> {
    let mut deps = Sha256::new();
    for d in &task.spec.dependencies {
        let content = std::fs::read(task.repo().join(d))?;
        deps.update((d.len() as u64).to_le_bytes());
        deps.update(d.as_bytes());
        deps.update((content.len() as u64).to_le_bytes());
        deps.update(&content);
    }
    Ok(TaskDigests {
        task: hex::encode(Sha256::digest(std::fs::read(task.dir.join("task.toml"))?)),
        repo: tree(&task.repo())?,
        grader: {
            let mut g = Sha256::new();
            g.update(tree(&task.grader_dir())?.as_bytes());
            g.update(crate::grade::PYTHON_HARNESS.as_bytes());
            g.update(crate::grade::RUNNER_REVISION.as_bytes());
            hex::encode(g.finalize())
        },
        dependencies: hex::encode(deps.finalize()),
    })
}
