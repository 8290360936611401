//! Protected paths named by patterns, and laying them over a grading copy.
//!
//! A task names its protected files one by one (`check.protected`); an `anvil auto` contract
//! names them by pattern (`"protected": ["tests/", "scripts/verify_*.sh"]`), because the
//! initializer writes tests it cannot list in advance. A pattern is a path relative to the
//! tree's root, `/`-separated:
//!
//! - `tests/` or `tests`: that entry and everything under it;
//! - `scripts/verify_*.sh`: a glob (`globset` syntax; `*`, `?` and `[…]` stay within one path
//!   component, `**` crosses them); an entry whose path, or any ancestor's, matches is covered.
//!
//! Never absolute, never `..` or `.` components, never `.git`, never empty.
//!
//! Laying over ([`lay_over`]) makes the protected part of a grading copy exactly the trusted
//! tree's: every covered entry of the copy is removed (an edited test, a test the agent added
//! under `tests/`, a `conftest.py` dropped in a protected directory), then every covered entry
//! of the trusted tree is copied in by the one tree copy ([`crate::tree::copy_at`]).

//!
//! What sits beside a protected path and is imported in its place is [`crate::shadow`]'s.

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};

use crate::tree::{self, CopyError, CopyPolicy, Skipped};

/// A protected-path pattern that cannot be used, by its index in the list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("protected[{index}] ({pattern:?}): {reason}")]
pub struct PatternError {
    pub index: usize,
    pub pattern: String,
    pub reason: String,
}

/// A checked list of protected-path patterns (see the module docs).
#[derive(Debug, Clone)]
pub struct ProtectedPaths {
    patterns: Vec<String>,
    /// Literal entries, without a trailing `/`.
    literal: Vec<String>,
    globs: GlobSet,
}

fn is_glob(pattern: &str) -> bool {
    pattern.contains(['*', '?', '[', '{'])
}

impl ProtectedPaths {
    /// Checks `patterns` (see the module docs); the first bad one is the error.
    pub fn new(patterns: &[String]) -> Result<Self, PatternError> {
        let mut literal = Vec::new();
        let mut globs = GlobSetBuilder::new();
        for (index, pattern) in patterns.iter().enumerate() {
            let bad = |reason: &str| PatternError {
                index,
                pattern: pattern.clone(),
                reason: reason.to_string(),
            };
            let body = pattern.strip_suffix('/').unwrap_or(pattern);
            if body.is_empty() {
                return Err(bad("empty: name a path relative to the repository's root"));
            }
            if body.starts_with('/') {
                return Err(bad(
                    "absolute: name a path relative to the repository's root",
                ));
            }
            if body.contains('\\') {
                return Err(bad("use '/' to separate path components"));
            }
            for part in body.split('/') {
                match part {
                    "" => return Err(bad("an empty path component ('//')")),
                    "." | ".." => {
                        return Err(bad("'.' and '..' components are not allowed"));
                    }
                    ".git" => return Err(bad(".git is never part of a tree")),
                    _ => {}
                }
            }
            if is_glob(body) {
                let glob = GlobBuilder::new(body)
                    .literal_separator(true)
                    .build()
                    .map_err(|e| bad(&format!("not a glob: {e}")))?;
                globs.add(glob);
            } else {
                literal.push(body.to_string());
            }
        }
        let globs = globs.build().map_err(|e| PatternError {
            index: 0,
            pattern: patterns.join(", "),
            reason: format!("the globs do not combine: {e}"),
        })?;
        Ok(Self {
            patterns: patterns.to_vec(),
            literal,
            globs,
        })
    }

    /// The literal (non-glob) patterns, without a trailing `/`.
    pub fn literals(&self) -> &[String] {
        &self.literal
    }

    /// The patterns as given.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether the entry at `rel` (`/`-separated, relative to the root) is protected: it, or
    /// an ancestor, is named by a pattern.
    pub fn covers(&self, rel: &str) -> bool {
        let rel = rel.trim_end_matches('/');
        if rel.is_empty() {
            return false;
        }
        let mut end = 0;
        loop {
            let next = rel[end..].find('/').map(|i| end + i);
            let prefix = &rel[..next.unwrap_or(rel.len())];
            if self.literal.iter().any(|l| l == prefix) || self.globs.is_match(prefix) {
                return true;
            }
            match next {
                Some(i) => end = i + 1,
                None => return false,
            }
        }
    }
}

/// What [`lay_over`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaidOver {
    /// Covered entries of the copy that were removed (relative paths, sorted).
    pub removed: Vec<String>,
    /// Covered entries of the trusted tree copied in (relative paths, sorted): the topmost
    /// covered entry of each part, so a protected directory is one entry.
    pub restored: Vec<String>,
    /// Entries of the trusted tree the copy policy left out.
    pub skipped: Vec<Skipped>,
}

/// Makes the protected part of `copy` exactly `trusted`'s (see the module docs).
pub fn lay_over(
    copy: &Path,
    trusted: &Path,
    protected: &ProtectedPaths,
) -> Result<LaidOver, CopyError> {
    let mut done = LaidOver::default();
    remove_covered(copy, Path::new(""), protected, &mut done.removed)?;
    let policy = CopyPolicy::default();
    let mut covered = Vec::new();
    find_covered(trusted, Path::new(""), protected, &mut covered)?;
    for rel in covered {
        let copied = tree::copy_at(trusted, copy, &rel, &policy)?;
        done.skipped.extend(copied.skipped);
        done.restored.push(rel.to_string_lossy().into_owned());
    }
    done.removed.sort();
    done.restored.sort();
    Ok(done)
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CopyError + '_ {
    move |source| CopyError {
        path: path.to_path_buf(),
        source,
    }
}

fn entries(dir: &Path) -> Result<Vec<std::fs::DirEntry>, CopyError> {
    let mut entries = std::fs::read_dir(dir)
        .and_then(|d| d.collect::<Result<Vec<_>, _>>())
        .map_err(io_err(dir))?;
    entries.sort_by_key(|e| e.file_name());
    Ok(entries)
}

fn remove_covered(
    root: &Path,
    rel: &Path,
    protected: &ProtectedPaths,
    removed: &mut Vec<String>,
) -> Result<(), CopyError> {
    for entry in entries(&root.join(rel))? {
        let entry_rel = rel.join(entry.file_name());
        let path = entry.path();
        let kind = entry.file_type().map_err(io_err(&path))?;
        if protected.covers(&entry_rel.to_string_lossy()) {
            if kind.is_dir() {
                std::fs::remove_dir_all(&path).map_err(io_err(&path))?;
            } else {
                std::fs::remove_file(&path).map_err(io_err(&path))?;
            }
            removed.push(entry_rel.to_string_lossy().into_owned());
        } else if kind.is_dir() {
            remove_covered(root, &entry_rel, protected, removed)?;
        }
    }
    Ok(())
}

fn find_covered(
    root: &Path,
    rel: &Path,
    protected: &ProtectedPaths,
    out: &mut Vec<PathBuf>,
) -> Result<(), CopyError> {
    for entry in entries(&root.join(rel))? {
        if entry.file_name() == ".git" {
            continue;
        }
        let entry_rel = rel.join(entry.file_name());
        let path = entry.path();
        if protected.covers(&entry_rel.to_string_lossy()) {
            out.push(entry_rel);
        } else if entry.file_type().map_err(io_err(&path))?.is_dir() {
            find_covered(root, &entry_rel, protected, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(patterns: &[&str]) -> ProtectedPaths {
        ProtectedPaths::new(&patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn patterns_cover_entries_and_what_is_under_them() {
        let p = paths(&[
            "tests/",
            "scripts/verify_*.sh",
            "Makefile",
            "spec/**/*.json",
        ]);
        for yes in [
            "tests",
            "tests/",
            "tests/cli.rs",
            "tests/a/b/c.py",
            "scripts/verify_add.sh",
            "Makefile",
            "spec/a/b.json",
            "spec/b.json",
        ] {
            assert!(p.covers(yes), "{yes} is covered");
        }
        for no in [
            "",
            "src/tests/x.rs",
            "testsuite/x",
            "scripts/verify_add.py",
            "scripts/sub/verify_add.sh",
            "scripts",
            "Makefile.old",
            "spec/a/b.txt",
        ] {
            assert!(!p.covers(no), "{no} is not covered");
        }
    }

    #[test]
    fn bad_patterns_are_refused_by_index() {
        for (pattern, why) in [
            ("", "empty"),
            ("/", "empty"),
            ("/etc/passwd", "absolute"),
            ("tests/../src", "'..'"),
            ("./tests", "'.'"),
            ("a//b", "empty path component"),
            (".git/hooks", ".git"),
            ("a\\b", "'/'"),
            ("tests/[", "not a glob"),
        ] {
            let list = vec!["ok/".to_string(), pattern.to_string()];
            let err = ProtectedPaths::new(&list).unwrap_err();
            assert_eq!(err.index, 1, "{pattern}");
            assert!(err.reason.contains(why), "{pattern}: {}", err.reason);
            assert!(err.to_string().starts_with("protected[1]"), "{err}");
        }
    }

    fn write(root: &Path, rel: &str, body: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }

    fn read(root: &Path, rel: &str) -> Option<String> {
        std::fs::read_to_string(root.join(rel)).ok()
    }

    #[test]
    fn the_copy_gets_exactly_the_trusted_protected_part() {
        let trusted = tempfile::tempdir().unwrap();
        let t = trusted.path();
        write(t, "tests/test_add.py", "assert add(1, 1) == 2\n");
        write(t, "scripts/verify_add.sh", "exit 1\n");
        write(t, "src/calc.py", "trusted source, not protected\n");
        std::os::unix::fs::symlink("/etc/passwd", t.join("tests/escape")).unwrap();

        let copy = tempfile::tempdir().unwrap();
        let c = copy.path();
        write(c, "tests/test_add.py", "import pytest\npytest.skip()\n");
        write(c, "tests/conftest.py", "collect_ignore = ['test_add.py']\n");
        write(c, "scripts/verify_add.sh", "exit 0\n");
        write(c, "scripts/verify_new.sh", "exit 0\n");
        write(c, "src/calc.py", "the agent's source\n");

        let p = paths(&["tests/", "scripts/verify_*.sh"]);
        let done = lay_over(c, t, &p).unwrap();
        assert_eq!(
            read(c, "tests/test_add.py").as_deref(),
            Some("assert add(1, 1) == 2\n")
        );
        assert_eq!(read(c, "tests/conftest.py"), None, "added under tests/");
        assert_eq!(
            read(c, "scripts/verify_add.sh").as_deref(),
            Some("exit 1\n")
        );
        assert_eq!(
            read(c, "scripts/verify_new.sh"),
            None,
            "added, matches the glob"
        );
        assert_eq!(
            read(c, "src/calc.py").as_deref(),
            Some("the agent's source\n")
        );
        assert!(c.join("tests/escape").symlink_metadata().is_err());
        assert_eq!(
            done.removed,
            vec!["scripts/verify_add.sh", "scripts/verify_new.sh", "tests"]
        );
        assert_eq!(done.restored, vec!["scripts/verify_add.sh", "tests"]);
        assert_eq!(done.skipped.len(), 1, "{:?}", done.skipped);
        assert_eq!(done.skipped[0].path, "tests/escape");
    }

    #[test]
    fn a_protected_directory_replaced_by_a_link_comes_back_real() {
        let trusted = tempfile::tempdir().unwrap();
        write(trusted.path(), "tests/t.sh", "exit 1\n");
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "t.sh", "exit 0\n");
        let copy = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), copy.path().join("tests")).unwrap();
        lay_over(copy.path(), trusted.path(), &paths(&["tests/t.sh"])).unwrap();
        assert!(
            !copy
                .path()
                .join("tests")
                .symlink_metadata()
                .unwrap()
                .is_symlink()
        );
        assert_eq!(read(copy.path(), "tests/t.sh").as_deref(), Some("exit 1\n"));
        assert_eq!(read(outside.path(), "t.sh").as_deref(), Some("exit 0\n"));
    }
}
