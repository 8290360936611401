//! A parked worktree brought back to exactly what its checkout wrote, before the next
//! attempt's `read-tree` moves it to a new base.
//!
//! Git compares a file with its index entry by stat data and object id, so it cannot see
//! what a session did to a file without changing its bytes as git reads them: a file
//! rewritten in CRLF, UTF-16 or with an expanded `$Id$` that cleans back to the same blob
//! under a `.gitattributes` the session added, a `chmod` that git does not track (anything
//! but the executable bit), an xattr or ACL, a directory's mode. What the kernel does see is
//! the **ctime**: every change to an inode's bytes, mode, owner, links or xattrs sets it to
//! now, and nothing sets it back — `utimensat` moves only atime and mtime (and ctime to now
//! with them); only a clock change could, which needs `CAP_SYS_TIME`, which the agent's
//! sandbox drops.
//!
//! So a checkout ends with a **stamp** ([`write_stamp`]): a file beside the worktree (where
//! the agent cannot write), written after the last file of the checkout, whose mtime comes
//! from the same kernel clock as every ctime, and which records the umask, uid and gid the
//! checkout ran with. [`scrub`] then needs no trust in anything inside the tree:
//! - an inode whose ctime is before the stamp is exactly as the checkout left it, and stays;
//! - a file, link, fifo or socket changed at or after the stamp is removed (`read-tree`
//!   writes it again from the index when it is tracked);
//! - a directory changed at or after the stamp (an entry added or removed, a `chmod`,
//!   `chown`, xattr or default ACL) is walked the same way, then replaced by a new directory
//!   made as a checkout makes one, its remaining entries moved in, or removed when nothing is
//!   left; one that cannot be walked is removed whole;
//! - the root's `.git` (the attempt's own repository) is removed: the caller makes a new one.
//!
//! Every `.gitattributes` left is recorded ([`Scrubbed::keeps_attributes`]): the files that
//! stayed were converted under exactly those, so a `read-tree` that writes or removes one
//! means the tree is not what a fresh checkout of the new base would write, and the caller
//! checks out afresh. A stamp of another umask, uid or gid, one dated after now (the clock
//! went back), or none at all refuses the reuse too: [`scrub`] answers `None`.
//!
//! Only a tree whose agent has ended is scrubbed: a process still writing could change a
//! file after it was looked at.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The stamp of the worktree at `dir`: beside it.
pub fn stamp_beside(dir: &Path) -> PathBuf {
    let mut name = dir.as_os_str().to_owned();
    name.push(".stamp");
    PathBuf::from(name)
}

/// What a checkout ran with, as the stamp records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Creator {
    umask: u32,
    uid: u32,
    gid: u32,
}

impl Creator {
    /// This process's umask (from `/proc/self/status`: reading it with `umask(2)` would
    /// change it for every thread meanwhile), effective uid and gid; `None` where the umask
    /// cannot be read, and then no tree is reused.
    fn current() -> Option<Self> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let umask = status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())?;
        Some(Self {
            umask,
            uid: nix::unistd::geteuid().as_raw(),
            gid: nix::unistd::getegid().as_raw(),
        })
    }

    fn render(&self) -> String {
        format!(
            "anvil checkout stamp 1\numask {:04o}\nuid {}\ngid {}\n",
            self.umask, self.uid, self.gid
        )
    }

    fn parse(text: &str) -> Option<Self> {
        let mut lines = text.lines();
        if lines.next()? != "anvil checkout stamp 1" {
            return None;
        }
        let mut field = |name: &str, radix: u32| {
            lines
                .next()?
                .strip_prefix(name)
                .and_then(|v| u32::from_str_radix(v.trim(), radix).ok())
        };
        Some(Self {
            umask: field("umask ", 8)?,
            uid: field("uid ", 10)?,
            gid: field("gid ", 10)?,
        })
    }
}

/// Writes the stamp of the checkout at `dir` (a new file, so its mtime is now). Call it after
/// the checkout's last write into the tree, `last` a file written after that (the checkout's
/// index), and before anything else can write there. The stamp is made again, up to a few
/// clock ticks, until its mtime is after `last`'s, so no file of the checkout shares the
/// stamp's tick (one that did would count as changed and be written again). Where the umask
/// cannot be read the stamp is left out, so the tree is never reused.
pub fn write_stamp(dir: &Path, last: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let stamp = stamp_beside(dir);
    let Some(creator) = Creator::current() else {
        return remove_file(&stamp);
    };
    let last = std::fs::symlink_metadata(last)?;
    let written = (last.mtime(), last.mtime_nsec());
    for _ in 0..50 {
        remove_file(&stamp)?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&stamp)?;
        file.write_all(creator.render().as_bytes())?;
        let meta = file.metadata()?;
        if (meta.mtime(), meta.mtime_nsec()) > written {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Ok(())
}

/// A `.gitattributes` the scrub left in place: which inode, changed when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Inode {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

impl Inode {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// A scrubbed tree: only what its checkout wrote is left.
#[derive(Debug, Default)]
pub struct Scrubbed {
    /// Every `.gitattributes` left, by its path relative to the tree (bytes, as git lists
    /// them).
    attributes: HashMap<Vec<u8>, Inode>,
}

impl Scrubbed {
    /// Whether the tree at `dir` has exactly the `.gitattributes` files the scrub left, the
    /// same inodes unchanged, given every tracked path (`tracked`, as `ls-files` lists them):
    /// no tracked one written or removed since, none left that is not tracked.
    pub fn keeps_attributes<'a>(
        &self,
        dir: &Path,
        tracked: impl IntoIterator<Item = &'a [u8]>,
    ) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let mut seen = 0;
        for path in tracked {
            let name = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
            if name != b".gitattributes" {
                continue;
            }
            let Some(kept) = self.attributes.get(path) else {
                return false;
            };
            let full = dir.join(std::ffi::OsStr::from_bytes(path));
            match full.symlink_metadata() {
                Ok(meta) if Inode::of(&meta) == *kept => seen += 1,
                _ => return false,
            }
        }
        seen == self.attributes.len()
    }
}

/// Scrubs the parked tree at `dir` (see the module docs), using `spare` — a path beside the
/// tree, on its filesystem, that does not need to exist — to make new directories in.
/// `Ok(None)`: the tree cannot be made certain (no stamp, another umask, uid or gid, the
/// clock went back, the root itself cannot be walked); the caller checks out afresh.
pub fn scrub(dir: &Path, spare: &Path) -> std::io::Result<Option<Scrubbed>> {
    let Ok(text) = std::fs::read_to_string(stamp_beside(dir)) else {
        return Ok(None);
    };
    let Some(recorded) = Creator::parse(&text) else {
        return Ok(None);
    };
    if Creator::current() != Some(recorded) {
        return Ok(None);
    }
    let stamp = std::fs::symlink_metadata(stamp_beside(dir))?;
    if stamp.modified()? > std::time::SystemTime::now() {
        return Ok(None);
    }
    let root = dir.symlink_metadata()?;
    if !root.is_dir() {
        return Ok(None);
    }
    let mut walk = Walk {
        stamp: (stamp.mtime(), stamp.mtime_nsec()),
        spare: spare.to_path_buf(),
        found: Scrubbed::default(),
    };
    remove_all(&dir.join(".git"))?;
    if walk.dir(dir, Path::new("")).is_err() {
        return Ok(None);
    }
    if walk.changed(&root) {
        walk.rebuild(dir, true)?;
    }
    // Their inodes as they are now: a directory made anew moved them, which moves ctime.
    let mut found = walk.found;
    for (path, inode) in &mut found.attributes {
        use std::os::unix::ffi::OsStrExt;
        *inode = Inode::of(
            &dir.join(std::ffi::OsStr::from_bytes(path))
                .symlink_metadata()?,
        );
    }
    Ok(Some(found))
}

/// How deep the scrub walks (it recurses once a level): a changed directory deeper than this
/// is removed whole, an unchanged one refuses the reuse.
const MAX_DEPTH: usize = 128;

struct Walk {
    /// The stamp's mtime: an inode whose ctime is this or later was changed after the
    /// checkout (the same clock tick counts as after).
    stamp: (i64, i64),
    spare: PathBuf,
    found: Scrubbed,
}

impl Walk {
    fn changed(&self, meta: &std::fs::Metadata) -> bool {
        (meta.ctime(), meta.ctime_nsec()) >= self.stamp
    }

    /// Scrubs the entries of the directory `dir` (at `rel` in the tree).
    fn dir(&mut self, dir: &Path, rel: &Path) -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        if rel.components().count() >= MAX_DEPTH {
            return Err(std::io::Error::other("a tree deeper than the scrub walks"));
        }
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let path = dir.join(&name);
            let meta = path.symlink_metadata()?;
            let changed = self.changed(&meta);
            if meta.is_dir() {
                if !changed {
                    self.dir(&path, &rel.join(&name))?;
                } else if self.dir(&path, &rel.join(&name)).is_ok() {
                    self.rebuild(&path, false)?;
                } else {
                    remove_all(&path)?;
                }
            } else if changed {
                std::fs::remove_file(&path)?;
            } else if name == ".gitattributes" {
                let key = rel.join(&name).as_os_str().as_bytes().to_vec();
                self.found.attributes.insert(key, Inode::of(&meta));
            }
        }
        Ok(())
    }

    /// Replaces the directory `dir` by a new one, made beside the tree as a checkout makes
    /// one (its mode from the umask, its owner and inherited ACLs from the place the tree is
    /// in), with `dir`'s entries moved in; an empty one is removed instead unless it is the
    /// root (`keep`).
    fn rebuild(&self, dir: &Path, keep: bool) -> std::io::Result<()> {
        let mut entries = std::fs::read_dir(dir)?.peekable();
        if entries.peek().is_none() && !keep {
            return std::fs::remove_dir(dir);
        }
        remove_all(&self.spare)?;
        std::fs::create_dir(&self.spare)?;
        for entry in entries {
            let name = entry?.file_name();
            std::fs::rename(dir.join(&name), self.spare.join(&name))?;
        }
        std::fs::remove_dir(dir)?;
        std::fs::rename(&self.spare, dir)
    }
}

/// Removes a file; one that does not exist is fine.
fn remove_file(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Removes `dir` and everything in it, whatever the modes inside (an unreadable directory is
/// made readable first); one that does not exist is fine. A link is removed, never followed.
///
/// A directory goes through `rm -rf` (and `chmod -R u+rwx` when that leaves something): they
/// walk a tree of any depth with file descriptors, where a walk by paths would fail past
/// `PATH_MAX` and a recursive one overflow its stack on a tree thousands of levels deep.
pub fn remove_all(dir: &Path) -> std::io::Result<()> {
    let Ok(meta) = dir.symlink_metadata() else {
        return Ok(());
    };
    if !meta.is_dir() {
        return std::fs::remove_file(dir);
    }
    let run = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .arg("--")
            .arg(dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
    };
    run("rm", &["-rf"])?;
    if dir.symlink_metadata().is_ok() {
        run("chmod", &["-R", "u+rwx"])?;
        run("rm", &["-rf"])?;
    }
    match dir.symlink_metadata() {
        Err(_) => Ok(()),
        Ok(_) => Err(std::io::Error::other(format!(
            "rm -rf left {} in place",
            dir.display()
        ))),
    }
}

#[cfg(test)]
mod tests;
