//! Directories only this user can change: where workspaces, templates and transcripts go.
//!
//! A sweep's workspaces root and artifact directory decide what a trial starts from (the
//! repository templates) and what a reader later believes happened (the transcripts). If
//! anyone else can write to them — or to a directory above them — they can swap a template
//! for a different repository, or replace a directory with a symlink so that a root worker
//! writes its transcripts wherever they point. So before the harness uses one:
//!
//! - every existing directory on the way (symlinks resolved) must be owned by this user or by
//!   root, and writable by no one else unless it is sticky (`/tmp`: others cannot rename or
//!   remove what is ours there);
//! - the directory itself must be owned by this user and writable by no one else, sticky or
//!   not (in a sticky directory others could still create the names we are about to use);
//! - what is missing is created one component at a time with mode 0700, and each created
//!   component is checked again (another user may have won the race to create it).
//!
//! Like OpenSSH's `StrictModes`: refusing costs the user a clear message naming the
//! directory; accepting could cost them an eval result they cannot trust.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

/// Why a directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PrivateDirError {
    #[error(
        "{} is owned by uid {owner}, not by you (uid {me}) or root: anyone who owns it could change what is kept in {}; use a directory of your own",
        dir.display(),
        wanted.display()
    )]
    NotOwned {
        dir: PathBuf,
        wanted: PathBuf,
        owner: u32,
        me: u32,
    },
    #[error(
        "{} is writable by other users (mode {mode:o}): they could replace what is kept in {}; use a directory only you can write (chmod go-w)",
        dir.display(),
        wanted.display()
    )]
    WritableByOthers {
        dir: PathBuf,
        wanted: PathBuf,
        mode: u32,
    },
    #[error("{} is not a directory", dir.display())]
    NotADirectory { dir: PathBuf },
    #[error("cannot make or inspect {}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Makes `dir` (and what is missing above it) a directory only this user can change, or says
/// why it cannot be one. Returns the path with symlinks in its existing part resolved.
pub fn ensure(dir: &Path) -> Result<PathBuf, PrivateDirError> {
    let me = nix::unistd::geteuid().as_raw();
    let wanted = std::path::absolute(dir).map_err(|source| PrivateDirError::Io {
        dir: dir.to_path_buf(),
        source,
    })?;
    // The longest part that exists, resolved; the rest is made below it.
    let mut existing = wanted.clone();
    let mut missing: Vec<std::ffi::OsString> = Vec::new();
    let resolved = loop {
        match std::fs::canonicalize(&existing) {
            Ok(path) => break path,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match (existing.file_name(), existing.parent()) {
                    (Some(name), Some(parent)) => {
                        missing.push(name.to_os_string());
                        existing = parent.to_path_buf();
                    }
                    _ => {
                        return Err(PrivateDirError::Io {
                            dir: existing,
                            source: e,
                        });
                    }
                }
            }
            Err(source) => {
                return Err(PrivateDirError::Io {
                    dir: existing,
                    source,
                });
            }
        }
    };
    // `..` after a missing component would climb back out of what was checked.
    if missing
        .iter()
        .any(|c| matches!(Path::new(c).components().next(), Some(Component::ParentDir)))
    {
        return Err(PrivateDirError::Io {
            dir: wanted,
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a `..` follows a directory that does not exist",
            ),
        });
    }
    let mut path = PathBuf::from("/");
    let mut chain: Vec<PathBuf> = vec![path.clone()];
    for part in resolved.components().skip(1) {
        path.push(part);
        chain.push(path.clone());
    }
    let leaf_exists = missing.is_empty();
    for (i, ancestor) in chain.iter().enumerate() {
        let is_leaf = leaf_exists && i + 1 == chain.len();
        check(ancestor, &wanted, me, is_leaf)?;
    }
    let mut path = resolved;
    for (i, name) in missing.iter().rev().enumerate() {
        path.push(name);
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(PrivateDirError::Io { dir: path, source }),
        }
        check(&path, &wanted, me, i + 1 == missing.len())?;
    }
    Ok(path)
}

/// One directory on the way to `wanted` (`leaf`: `wanted` itself).
fn check(dir: &Path, wanted: &Path, me: u32, leaf: bool) -> Result<(), PrivateDirError> {
    let meta = std::fs::symlink_metadata(dir).map_err(|source| PrivateDirError::Io {
        dir: dir.to_path_buf(),
        source,
    })?;
    if !meta.file_type().is_dir() {
        return Err(PrivateDirError::NotADirectory {
            dir: dir.to_path_buf(),
        });
    }
    let owner = meta.uid();
    let owned = if leaf {
        owner == me
    } else {
        owner == me || owner == 0
    };
    if !owned {
        return Err(PrivateDirError::NotOwned {
            dir: dir.to_path_buf(),
            wanted: wanted.to_path_buf(),
            owner,
            me,
        });
    }
    let mode = meta.mode() & 0o7777;
    let sticky = mode & 0o1000 != 0;
    if mode & 0o022 != 0 && (leaf || !sticky) {
        return Err(PrivateDirError::WritableByOthers {
            dir: dir.to_path_buf(),
            wanted: wanted.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn makes_what_is_missing_private() {
        let tmp = tempfile::tempdir().unwrap();
        chmod(tmp.path(), 0o700);
        let want = tmp.path().join("a/b/c");
        let got = ensure(&want).unwrap();
        assert_eq!(got, std::fs::canonicalize(&want).unwrap());
        for dir in ["a", "a/b", "a/b/c"] {
            let mode = std::fs::metadata(tmp.path().join(dir)).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o700, "{dir}");
        }
        // Twice is fine.
        ensure(&want).unwrap();
    }

    #[test]
    fn refuses_a_directory_others_can_write() {
        let tmp = tempfile::tempdir().unwrap();
        chmod(tmp.path(), 0o700);
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        chmod(&shared, 0o777);
        let err = ensure(&shared.join("sweeps")).unwrap_err();
        assert!(
            matches!(err, PrivateDirError::WritableByOthers { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("chmod go-w"), "{err}");
        assert!(!shared.join("sweeps").exists(), "nothing made under it");
        // Sticky (like /tmp) is fine above, never for the directory itself.
        chmod(&shared, 0o1777);
        ensure(&shared.join("sweeps")).unwrap();
        let err = ensure(&shared).unwrap_err();
        assert!(
            matches!(err, PrivateDirError::WritableByOthers { .. }),
            "{err}"
        );
        // Group-writable is writable by others too.
        chmod(&shared.join("sweeps"), 0o770);
        assert!(ensure(&shared.join("sweeps/s1")).is_err());
    }

    #[test]
    fn a_symlink_is_judged_by_where_it_points() {
        let tmp = tempfile::tempdir().unwrap();
        chmod(tmp.path(), 0o700);
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        chmod(&open, 0o777);
        std::os::unix::fs::symlink(&open, tmp.path().join("link")).unwrap();
        assert!(ensure(&tmp.path().join("link/sweeps")).is_err());
        let err = ensure(&tmp.path().join("link")).unwrap_err();
        assert!(
            err.to_string().contains("open"),
            "names the real directory: {err}"
        );
    }

    #[test]
    fn refuses_a_file() {
        let tmp = tempfile::tempdir().unwrap();
        chmod(tmp.path(), 0o700);
        std::fs::write(tmp.path().join("f"), "").unwrap();
        assert!(ensure(&tmp.path().join("f")).is_err());
        assert!(ensure(&tmp.path().join("f/x")).is_err());
    }

    #[test]
    fn refuses_a_directory_someone_else_owns() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("SKIPPED: changing a directory's owner needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        chmod(tmp.path(), 0o755);
        let theirs = tmp.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        chmod(&theirs, 0o755);
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let err = ensure(&theirs.join("sweeps")).unwrap_err();
        assert!(
            matches!(err, PrivateDirError::NotOwned { owner: 65534, .. }),
            "{err}"
        );
        let err = ensure(&theirs).unwrap_err();
        assert!(matches!(err, PrivateDirError::NotOwned { .. }), "{err}");
    }
}
