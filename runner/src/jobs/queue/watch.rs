//! Noticing that the queue database went away while a long command runs on it.
//!
//! A SQLite connection keeps working on a file that was deleted (it writes to the unlinked
//! inode) or made read-only after it was opened, so a sweep would go on, record its results
//! where nobody can read them, and show progress forever. [`DbWatch`] looks at the path itself:
//! it must still name the file that was opened (same device and inode), and the file and its
//! directory must still be writable (which also catches an immutable file or a read-only
//! mount, even for root). On Postgres it asks the server, so a dropped database or a lost
//! server is noticed.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::AccessFlags;

use super::{Db, QueueError, QueueLocation};

/// How long a check may take before the database counts as not answering.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// The queue database as it was when the command opened it.
#[derive(Debug, Clone)]
pub struct DbWatch {
    location: QueueLocation,
    /// The SQLite file: its path, device and inode.
    file: Option<(PathBuf, u64, u64)>,
}

fn lost(location: &QueueLocation, reason: String) -> QueueError {
    QueueError::Lost {
        location: location.to_string(),
        reason,
    }
}

fn not_writable(path: &Path, what: &str, e: nix::Error) -> String {
    let why = match e {
        nix::Error::EROFS => "it is on a read-only file system".to_string(),
        nix::Error::EPERM => "writing is not permitted (an immutable file?)".to_string(),
        nix::Error::EACCES => "permission denied".to_string(),
        other => other.desc().to_string(),
    };
    format!("{what} {} is not writable: {why}", path.display())
}

impl DbWatch {
    /// Remembers which file `location` names now (call right after opening it).
    pub fn new(location: &QueueLocation) -> Result<Self, QueueError> {
        let file = match location {
            QueueLocation::Sqlite(path) => {
                let meta = std::fs::metadata(path).map_err(|e| {
                    lost(location, format!("cannot look at {}: {e}", path.display()))
                })?;
                Some((path.clone(), meta.dev(), meta.ino()))
            }
            QueueLocation::Postgres(_) => None,
        };
        Ok(Self {
            location: location.clone(),
            file,
        })
    }

    /// Fails with [`QueueError::Lost`] when the database is gone, was replaced, is no longer
    /// writable, or does not answer within [`CHECK_TIMEOUT`].
    pub async fn check(&self, db: &Db) -> Result<(), QueueError> {
        if let Some((path, dev, ino)) = &self.file {
            self.check_file(path, *dev, *ino)?;
        }
        match tokio::time::timeout(CHECK_TIMEOUT, db.ping()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(lost(&self.location, format!("it stopped answering: {e}"))),
            Err(_) => Err(lost(
                &self.location,
                format!("it did not answer within {} s", CHECK_TIMEOUT.as_secs()),
            )),
        }
    }

    fn check_file(&self, path: &Path, dev: u64, ino: u64) -> Result<(), QueueError> {
        let meta = match std::fs::metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(lost(
                    &self.location,
                    format!("the file {} is missing: it was deleted", path.display()),
                ));
            }
            Err(e) => {
                return Err(lost(
                    &self.location,
                    format!("cannot look at {}: {e}", path.display()),
                ));
            }
        };
        if !meta.is_file() {
            return Err(lost(
                &self.location,
                format!(
                    "{} is no longer a file: the database was replaced",
                    path.display()
                ),
            ));
        }
        if (meta.dev(), meta.ino()) != (dev, ino) {
            return Err(lost(
                &self.location,
                format!(
                    "{} is another file than the one opened: the database was deleted or replaced",
                    path.display()
                ),
            ));
        }
        nix::unistd::access(path, AccessFlags::W_OK)
            .map_err(|e| lost(&self.location, not_writable(path, "the file", e)))?;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        nix::unistd::access(dir, AccessFlags::W_OK).map_err(|e| {
            lost(
                &self.location,
                not_writable(dir, "its directory (where SQLite keeps its journal)", e),
            )
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_deleted_or_replaced_file_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let location = QueueLocation::Sqlite(path.clone());
        let db = Db::open(&location, 2).await.unwrap();
        let watch = DbWatch::new(&location).unwrap();
        watch.check(&db).await.unwrap();

        std::fs::remove_file(&path).unwrap();
        let err = watch.check(&db).await.unwrap_err().to_string();
        assert!(err.contains("is missing: it was deleted"), "{err}");
        assert!(err.contains(&path.display().to_string()), "{err}");

        std::fs::write(&path, b"").unwrap();
        let err = watch.check(&db).await.unwrap_err().to_string();
        assert!(err.contains("another file than the one opened"), "{err}");

        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        let err = watch.check(&db).await.unwrap_err().to_string();
        assert!(err.contains("is no longer a file"), "{err}");
        db.close().await;
    }
}
