//! The one tree copy: a task's `repo/` into a trial's workspace template, a workspace into its
//! grading directory, `solution/` over a validation workspace. One policy, so a task is proved
//! by `validate` on exactly what a trial gets and is graded on exactly what the agent left:
//!
//! - **Directories** are copied recursively. `.git` (a directory, or a file pointing at a
//!   gitdir) is left out at every depth: git state is never part of what is graded, and a
//!   nested repository's hooks and config never travel.
//! - **Regular files** are copied with their permission bits. A file whose apparent size is over
//!   [`CopyPolicy::max_file_bytes`] is not copied (a sparse 8 GB file would become 8 GB of real
//!   disk), nor is anything once [`CopyPolicy::max_total_bytes`] is reached; both are listed.
//! - **Symlinks** are copied as symlinks when they are relative and stay inside the tree;
//!   absolute links and links that climb out are left out and listed (through one, a check
//!   could read or write outside its directory).
//! - **Special files** (sockets, fifos, devices) are left out and listed.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Limits of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyPolicy {
    /// The largest apparent size of one file.
    pub max_file_bytes: u64,
    /// The most bytes copied in all.
    pub max_total_bytes: u64,
}

impl Default for CopyPolicy {
    fn default() -> Self {
        Self {
            max_file_bytes: 256 * 1024 * 1024,
            max_total_bytes: 2 * 1024 * 1024 * 1024,
        }
    }
}

/// Why an entry was not copied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "why")]
pub enum SkipReason {
    /// A regular file over the per-file limit (its apparent size).
    TooLarge { bytes: u64 },
    /// The total limit was reached.
    TotalLimit,
    /// A symlink that is absolute or leads out of the tree.
    LinkOutside { target: String },
    /// A socket, fifo or device.
    Special,
}

/// An entry that was not copied, by its path relative to the tree's root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub path: String,
    #[serde(flatten)]
    pub reason: SkipReason,
}

/// What a copy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copied {
    pub files: u64,
    pub bytes: u64,
    pub skipped: Vec<Skipped>,
}

/// A copy that failed, at the path it failed on.
#[derive(Debug, thiserror::Error)]
#[error("cannot copy {path}: {source}")]
pub struct CopyError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Copies the tree at `from` into `to` (created if missing; existing files are replaced) under
/// `policy` (see the module docs).
pub fn copy(from: &Path, to: &Path, policy: &CopyPolicy) -> Result<Copied, CopyError> {
    let mut copied = Copied::default();
    copy_dir(from, to, Path::new(""), policy, &mut copied)?;
    Ok(copied)
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CopyError + '_ {
    move |source| CopyError {
        path: path.to_path_buf(),
        source,
    }
}

fn copy_dir(
    from: &Path,
    to: &Path,
    rel: &Path,
    policy: &CopyPolicy,
    copied: &mut Copied,
) -> Result<(), CopyError> {
    std::fs::create_dir_all(to).map_err(io_err(to))?;
    let mut entries: Vec<_> = std::fs::read_dir(from)
        .map_err(io_err(from))?
        .collect::<Result<_, _>>()
        .map_err(io_err(from))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        if name == ".git" {
            continue;
        }
        let src = entry.path();
        let dst = to.join(&name);
        let entry_rel = rel.join(&name);
        let shown = entry_rel.to_string_lossy().into_owned();
        let meta = std::fs::symlink_metadata(&src).map_err(io_err(&src))?;
        let kind = meta.file_type();
        if kind.is_dir() {
            copy_dir(&src, &dst, &entry_rel, policy, copied)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&src).map_err(io_err(&src))?;
            if stays_inside(&entry_rel, &target) {
                remove_existing(&dst)?;
                std::os::unix::fs::symlink(&target, &dst).map_err(io_err(&src))?;
            } else {
                copied.skipped.push(Skipped {
                    path: shown,
                    reason: SkipReason::LinkOutside {
                        target: target.to_string_lossy().into_owned(),
                    },
                });
            }
        } else if kind.is_file() {
            let bytes = meta.len();
            if bytes > policy.max_file_bytes {
                copied.skipped.push(Skipped {
                    path: shown,
                    reason: SkipReason::TooLarge { bytes },
                });
            } else if copied.bytes + bytes > policy.max_total_bytes {
                copied.skipped.push(Skipped {
                    path: shown,
                    reason: SkipReason::TotalLimit,
                });
            } else {
                remove_existing(&dst)?;
                // fs::copy keeps the permission bits (the executable bit included).
                std::fs::copy(&src, &dst).map_err(io_err(&src))?;
                copied.files += 1;
                copied.bytes += bytes;
            }
        } else {
            copied.skipped.push(Skipped {
                path: shown,
                reason: SkipReason::Special,
            });
        }
    }
    Ok(())
}

/// A destination that exists is replaced, whatever it is (a symlink is never written through).
fn remove_existing(dst: &Path) -> Result<(), CopyError> {
    match std::fs::symlink_metadata(dst) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(dst).map_err(io_err(dst)),
        Ok(_) => std::fs::remove_file(dst).map_err(io_err(dst)),
        Err(_) => Ok(()),
    }
}

/// Whether a link at `link_rel` (relative to the root) pointing at `target` resolves inside
/// the root, judged on the path alone: relative, and never climbing above the root.
pub fn stays_inside(link_rel: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth: i64 = link_rel.components().count() as i64 - 1;
    for c in target.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn links_are_judged_on_their_path() {
        assert!(stays_inside(Path::new("a"), Path::new("b")));
        assert!(stays_inside(Path::new("d/a"), Path::new("../b")));
        assert!(!stays_inside(Path::new("a"), Path::new("../b")));
        assert!(!stays_inside(Path::new("d/a"), Path::new("../../b")));
        assert!(!stays_inside(Path::new("a"), Path::new("/etc/passwd")));
        assert!(!stays_inside(Path::new("d/a"), Path::new("x/../../../b")));
    }

    #[test]
    fn the_policy_holds() {
        let src = tempfile::tempdir().unwrap();
        let s = src.path();
        std::fs::create_dir_all(s.join("src/.git")).unwrap();
        std::fs::create_dir_all(s.join("nested")).unwrap();
        std::fs::write(s.join("nested/.git"), "gitdir: /elsewhere\n").unwrap();
        std::fs::write(s.join("src/lib.rs"), "fn x() {}\n").unwrap();
        std::fs::write(s.join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(s.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("src/lib.rs", s.join("inside")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", s.join("abs")).unwrap();
        std::os::unix::fs::symlink("../../x", s.join("src/climb")).unwrap();
        let sparse = std::fs::File::create(s.join("sparse.bin")).unwrap();
        sparse.set_len(8 * 1024 * 1024 * 1024).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(s.join("fifo"))
            .status()
            .unwrap();
        assert!(made.success());

        let dst = tempfile::tempdir().unwrap();
        let to = dst.path().join("copy");
        let copied = copy(s, &to, &CopyPolicy::default()).unwrap();
        assert_eq!(
            std::fs::read_to_string(to.join("src/lib.rs")).unwrap(),
            "fn x() {}\n"
        );
        assert!(
            std::fs::metadata(to.join("run.sh"))
                .unwrap()
                .permissions()
                .mode()
                & 0o111
                != 0
        );
        assert_eq!(
            std::fs::read_link(to.join("inside")).unwrap(),
            Path::new("src/lib.rs")
        );
        assert!(!to.join("src/.git").exists() && !to.join("nested/.git").exists());
        assert!(!to.join("sparse.bin").exists() && !to.join("fifo").exists());
        let mut skipped: Vec<String> = copied
            .skipped
            .iter()
            .map(|s| format!("{} {:?}", s.path, s.reason))
            .collect();
        skipped.sort();
        assert_eq!(
            skipped,
            vec![
                "abs LinkOutside { target: \"/etc/passwd\" }".to_string(),
                "fifo Special".to_string(),
                format!(
                    "sparse.bin TooLarge {{ bytes: {} }}",
                    8u64 * 1024 * 1024 * 1024
                ),
                "src/climb LinkOutside { target: \"../../x\" }".to_string(),
            ]
        );
        assert_eq!(copied.files, 2);
    }
}
