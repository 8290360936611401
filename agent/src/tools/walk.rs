//! The directory walk shared by glob and grep: `.gitignore` respected, `.git/` and `target/`
//! never entered, credential files never yielded.

use std::path::{Path, PathBuf};

use ignore::WalkBuilder;

use crate::file_access::FileAccess;

/// Files under `root` the agent may see, in walk order.
pub(crate) fn files(root: &Path, access: &FileAccess) -> Vec<PathBuf> {
    WalkBuilder::new(root)
        .hidden(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .ignore(true)
        .parents(true)
        // .gitignore applies even where there is no git repository.
        .require_git(false)
        .filter_entry(|e| {
            let name = e.file_name();
            !(e.file_type().is_some_and(|t| t.is_dir()) && (name == ".git" || name == "target"))
        })
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(|e| e.into_path())
        .filter(|p| !access.is_credential(p))
        .collect()
}

/// `path` for display: relative to `cwd` when it is under it.
pub(crate) fn display(path: &Path, cwd: &Path) -> String {
    path.strip_prefix(cwd).unwrap_or(path).display().to_string()
}
