//! The one tree copy: a task's `repo/` into a trial's workspace template, a workspace into its
//! grading directory, `solution/` over a validation workspace. One policy, so a task is proved
//! by `validate` on exactly what a trial gets and is graded on exactly what the agent left:
//!
//! - **Directories** are copied recursively. `.git` (a directory, or a file pointing at a
//!   gitdir) is left out at every depth: git state is never part of what is graded, and a
//!   nested repository's hooks and config never travel.
//! - **Regular files** are copied with their permission bits. A file whose apparent size is over
//!   [`CopyPolicy::max_file_bytes`] is not copied, nor a sparse file over 1 MiB (8 GB of holes
//!   would become 8 GB of real disk), nor anything once [`CopyPolicy::max_total_bytes`] or
//!   [`CopyPolicy::max_files`] is reached; all are listed.
//! - **Symlinks** are copied as symlinks when they are relative, stay inside the tree by their
//!   text, *and* resolve inside it on disk (a link through another link, `sub/up -> ..`, is
//!   judged by where it really leads); others, dangling ones included, are left out and
//!   listed (through one, a check could read or write outside its directory).
//! - **Special files** (sockets, fifos, devices) are left out and listed.
//! - **What cannot be read** (no permission, a path too long to name) is left out and listed:
//!   what a workspace holds never makes the copy fail.
//! - [`CopyPolicy::exclude_top`] names top-level entries left out on purpose (a Rust grading
//!   copy leaves out `target/`: the grader builds afresh).

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Limits of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyPolicy {
    /// The largest apparent size of one file.
    pub max_file_bytes: u64,
    /// The most bytes copied in all.
    pub max_total_bytes: u64,
    /// The most files copied in all.
    pub max_files: u64,
    /// Top-level entries left out (not listed).
    pub exclude_top: &'static [&'static str],
}

impl Default for CopyPolicy {
    fn default() -> Self {
        Self {
            max_file_bytes: 256 * 1024 * 1024,
            max_total_bytes: 1024 * 1024 * 1024,
            max_files: 50_000,
            exclude_top: &[],
        }
    }
}

/// Directories deeper than this are not copied: the walk recurses once a level, and a tree
/// thousands of levels deep (which anyone with a shell can make) would overflow the copying
/// thread's stack.
pub const MAX_DEPTH: usize = 128;

/// Sparse files smaller than this are copied (their holes cost little).
const SPARSE_LIMIT: u64 = 1024 * 1024;

/// Why an entry was not copied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "why")]
pub enum SkipReason {
    /// A regular file over the per-file limit (its apparent size).
    TooLarge { bytes: u64 },
    /// A sparse file over 1 MiB (its apparent size).
    Sparse { bytes: u64 },
    /// The total size or file-count limit was reached.
    TotalLimit,
    /// It could not be read or named (the error says why).
    Unreadable { error: String },
    /// A symlink that is absolute, leads out of the tree, or leads nowhere.
    LinkOutside { target: String },
    /// A socket, fifo or device.
    Special,
    /// A directory deeper than [`MAX_DEPTH`] levels.
    TooDeep { depth: usize },
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
    let root = from.canonicalize().map_err(io_err(from))?;
    std::fs::create_dir_all(to).map_err(io_err(to))?;
    let walk = Walk {
        root: &root,
        policy,
    };
    walk.dir(&root, to, Path::new(""), &mut copied)?;
    Ok(copied)
}

/// Copies the entry at `rel` (a file, a link or a directory) of the tree at `from_root` to the
/// same place under `to_root`, under `policy`: whatever is at the destination is replaced, and
/// every ancestor of it becomes a real directory first ([`real_parent_dirs`]), so nothing is
/// written through a link. Used to lay protected entries over a grading copy.
pub fn copy_at(
    from_root: &Path,
    to_root: &Path,
    rel: &Path,
    policy: &CopyPolicy,
) -> Result<Copied, CopyError> {
    let mut copied = Copied::default();
    let root = from_root.canonicalize().map_err(io_err(from_root))?;
    real_parent_dirs(to_root, rel).map_err(io_err(&to_root.join(rel)))?;
    let dst = to_root.join(rel);
    remove_existing(&dst)?;
    let walk = Walk {
        root: &root,
        policy,
    };
    if let Err(e) = walk.entry(&root.join(rel), &dst, rel, &mut copied) {
        if !entry_error(&e.source) {
            return Err(e);
        }
        Walk::skip(
            &mut copied,
            rel,
            SkipReason::Unreadable {
                error: e.source.to_string(),
            },
        );
    }
    Ok(copied)
}

/// Makes every ancestor of `root/rel` (below `root`) a real directory: a symlink, or a file,
/// where a directory goes is removed and the directory made, so what is written at `rel` lands
/// exactly there.
pub fn real_parent_dirs(root: &Path, rel: &Path) -> std::io::Result<()> {
    let mut dir = root.to_path_buf();
    for part in rel.parent().into_iter().flat_map(Path::components) {
        dir.push(part);
        match std::fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                std::fs::remove_file(&dir)?;
                std::fs::create_dir(&dir)?;
            }
            Err(_) => std::fs::create_dir(&dir)?,
        }
    }
    Ok(())
}

struct Walk<'a> {
    root: &'a Path,
    policy: &'a CopyPolicy,
}

/// Errors that say something about the entry, not about the machine: the entry is skipped.
fn entry_error(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EACCES | libc::EPERM | libc::ENAMETOOLONG | libc::ELOOP | libc::ENOENT)
    )
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CopyError + '_ {
    move |source| CopyError {
        path: path.to_path_buf(),
        source,
    }
}

impl Walk<'_> {
    fn skip(copied: &mut Copied, rel: &Path, reason: SkipReason) {
        copied.skipped.push(Skipped {
            path: rel.to_string_lossy().into_owned(),
            reason,
        });
    }

    fn dir(
        &self,
        from: &Path,
        to: &Path,
        rel: &Path,
        copied: &mut Copied,
    ) -> Result<(), CopyError> {
        let listed = std::fs::read_dir(from).and_then(|d| d.collect::<Result<Vec<_>, _>>());
        let mut entries = match listed {
            Ok(e) => e,
            Err(e) if entry_error(&e) && !rel.as_os_str().is_empty() => {
                Self::skip(
                    copied,
                    rel,
                    SkipReason::Unreadable {
                        error: e.to_string(),
                    },
                );
                return Ok(());
            }
            Err(e) => return Err(io_err(from)(e)),
        };
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name();
            if name == ".git"
                || (rel.as_os_str().is_empty()
                    && self.policy.exclude_top.iter().any(|x| name == *x))
            {
                continue;
            }
            let src = entry.path();
            let dst = to.join(&name);
            let entry_rel = rel.join(&name);
            if let Err(e) = self.entry(&src, &dst, &entry_rel, copied) {
                if entry_error(&e.source) {
                    Self::skip(
                        copied,
                        &entry_rel,
                        SkipReason::Unreadable {
                            error: e.source.to_string(),
                        },
                    );
                } else {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    fn entry(
        &self,
        src: &Path,
        dst: &Path,
        rel: &Path,
        copied: &mut Copied,
    ) -> Result<(), CopyError> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(src).map_err(io_err(src))?;
        let kind = meta.file_type();
        if kind.is_dir() {
            let depth = rel.components().count();
            if depth > MAX_DEPTH {
                Self::skip(copied, rel, SkipReason::TooDeep { depth });
                return Ok(());
            }
            std::fs::create_dir_all(dst).map_err(io_err(dst))?;
            return self.dir(src, dst, rel, copied);
        }
        if kind.is_symlink() {
            let target = std::fs::read_link(src).map_err(io_err(src))?;
            let resolves_inside = src
                .canonicalize()
                .is_ok_and(|real| real.starts_with(self.root));
            if stays_inside(rel, &target) && resolves_inside {
                remove_existing(dst)?;
                std::os::unix::fs::symlink(&target, dst).map_err(io_err(src))?;
            } else {
                Self::skip(
                    copied,
                    rel,
                    SkipReason::LinkOutside {
                        target: target.to_string_lossy().into_owned(),
                    },
                );
            }
            return Ok(());
        }
        if !kind.is_file() {
            Self::skip(copied, rel, SkipReason::Special);
            return Ok(());
        }
        let bytes = meta.len();
        let allocated = meta.blocks() * 512;
        if bytes > self.policy.max_file_bytes {
            Self::skip(copied, rel, SkipReason::TooLarge { bytes });
        } else if bytes > SPARSE_LIMIT && allocated < bytes / 2 {
            Self::skip(copied, rel, SkipReason::Sparse { bytes });
        } else if copied.bytes + bytes > self.policy.max_total_bytes
            || copied.files >= self.policy.max_files
        {
            Self::skip(copied, rel, SkipReason::TotalLimit);
        } else {
            remove_existing(dst)?;
            // fs::copy keeps the permission bits (the executable bit included).
            std::fs::copy(src, dst).map_err(io_err(src))?;
            copied.files += 1;
            copied.bytes += bytes;
        }
        Ok(())
    }
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

    /// A tree 1,500 levels deep is copied down to [`MAX_DEPTH`] and the rest skipped, on a
    /// small stack: no overflow however deep the tree.
    #[test]
    fn a_tree_too_deep_is_skipped_not_a_crash() {
        let src = tempfile::tempdir().unwrap();
        let mut path = src.path().join("deep");
        for _ in 0..1500 {
            path.push("d");
        }
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("bottom.txt"), "x\n").unwrap();
        std::fs::write(src.path().join("top.txt"), "top\n").unwrap();
        let dst = tempfile::tempdir().unwrap();
        let (from, to) = (src.path().to_path_buf(), dst.path().join("copy"));
        let copied = std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || copy(&from, &to, &CopyPolicy::default()).unwrap())
            .unwrap()
            .join()
            .expect("no stack overflow");
        assert_eq!(copied.files, 1, "top.txt");
        assert_eq!(copied.skipped.len(), 1, "{:?}", copied.skipped);
        assert_eq!(
            copied.skipped[0].reason,
            SkipReason::TooDeep {
                depth: MAX_DEPTH + 1
            }
        );
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
