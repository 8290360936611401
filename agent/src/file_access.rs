//! [`FileAccess`]: what the native file tools may read and write, and whether the agent's view of
//! a file is fresh.
//!
//! Every native tool that touches a path goes through it, search included:
//! - **readable roots** and **writable roots** (by default, the workspace for both);
//! - **protected paths** inside writable roots that the agent may not change without a separate
//!   grant: `.git/` (a planted hook or `core.fsmonitor` would run on the host) and anvil's own
//!   executable config (`.anvil/config.toml`, `.anvil/hooks/`);
//! - **credential files** (`.env`, private keys, `.netrc`, …) that are never read or listed;
//! - **freshness**: an edit or overwrite needs a read whose content hash still matches the file,
//!   so a change made by the user (or anything else) since the agent's read is never clobbered.
//!   The agent's own successful writes refresh the hash, so consecutive edits work.
//!
//! Paths are checked after canonicalization: an existing path resolves through its symlinks,
//! and a new file is judged by the canonical form of its nearest existing ancestor, so a symlink
//! in the workspace that points outside cannot be written through.
//!
//! Known limit: the check and the open are separate system calls, so a process racing to swap a
//! checked directory for a symlink in between could redirect a write. The bash tool's sandbox
//! (not this module) is the boundary against processes running in the workspace; closing the
//! race for the native tools needs descriptor-relative opens (`openat2` with
//! `RESOLVE_BENEATH`) or a sandboxed file worker.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use globset::{Glob, GlobSet, GlobSetBuilder};
use sha2::{Digest, Sha256};

use crate::tool::ToolError;

/// File names that are credentials: never read, never listed.
const CREDENTIAL_GLOBS: &[&str] = &[
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    "**/id_rsa*",
    "**/id_ecdsa*",
    "**/id_ed25519*",
    "**/id_dsa*",
    "**/.netrc",
    "**/.git-credentials",
    "**/.npmrc",
    "**/.pypirc",
    "**/.aws/credentials",
    "**/.docker/config.json",
    "**/.envrc",
    "**/*.p12",
    "**/*.pfx",
    "**/service-account*.json",
    "**/credentials.json",
    "**/.pgpass",
    "**/.vault-token",
    "**/.kube/config",
    // SSH keys by their names: a bare `id_*` would refuse source files like `id_map.rs`.
    "**/id_ecdsa_sk*",
    "**/id_ed25519_sk*",
    "**/identity",
];

/// `.env` templates are documentation, not credentials.
const CREDENTIAL_EXCEPTIONS: &[&str] = &["**/.env.example", "**/.env.sample", "**/.env.template"];

type Hash = [u8; 32];

pub struct FileAccess {
    readable: Vec<PathBuf>,
    writable: Vec<PathBuf>,
    /// Protected paths the user granted for writing.
    granted: Vec<PathBuf>,
    credentials: GlobSet,
    credential_exceptions: GlobSet,
    hashes: Mutex<HashMap<PathBuf, Hash>>,
}

impl std::fmt::Debug for FileAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileAccess")
            .field("readable", &self.readable)
            .field("writable", &self.writable)
            .field("granted", &self.granted)
            .finish_non_exhaustive()
    }
}

fn glob_set(patterns: &[&str]) -> GlobSet {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        if let Ok(g) = Glob::new(p) {
            b.add(g);
        }
    }
    b.build().unwrap_or_else(|_| GlobSet::empty())
}

fn io_error(path: &Path, e: std::io::Error) -> ToolError {
    ToolError::Failed(format!("{}: {e}", path.display()))
}

impl FileAccess {
    /// Read and write access to `workspace` (which must exist).
    pub fn workspace(workspace: &Path) -> std::io::Result<Self> {
        let root = workspace.canonicalize()?;
        Ok(Self {
            readable: vec![root.clone()],
            writable: vec![root],
            granted: Vec::new(),
            credentials: glob_set(CREDENTIAL_GLOBS),
            credential_exceptions: glob_set(CREDENTIAL_EXCEPTIONS),
            hashes: Mutex::new(HashMap::new()),
        })
    }

    /// Adds a root the agent may read but not write (a dependency's sources, docs).
    pub fn with_readable(mut self, root: &Path) -> std::io::Result<Self> {
        self.readable.push(root.canonicalize()?);
        Ok(self)
    }

    /// Grants writes to one protected path (an explicit user decision).
    pub fn with_granted(mut self, path: &Path) -> Self {
        self.granted.push(path.to_path_buf());
        self
    }

    /// The first writable root: the workspace.
    pub fn workspace_root(&self) -> &Path {
        &self.writable[0]
    }

    /// `user_path` made absolute against `cwd`, with `.` and `..` resolved lexically.
    pub fn resolve(cwd: &Path, user_path: &str) -> PathBuf {
        let joined = cwd.join(user_path);
        let mut out = PathBuf::new();
        for c in joined.components() {
            match c {
                Component::ParentDir => {
                    out.pop();
                }
                Component::CurDir => {}
                other => out.push(other.as_os_str()),
            }
        }
        out
    }

    fn root_of<'a>(roots: &'a [PathBuf], canonical: &Path) -> Option<&'a PathBuf> {
        roots.iter().find(|r| canonical.starts_with(r))
    }

    /// Whether `canonical` is a credential file (never read, never listed).
    pub fn is_credential(&self, canonical: &Path) -> bool {
        self.credentials.is_match(canonical) && !self.credential_exceptions.is_match(canonical)
    }

    /// May the agent read this existing path? Returns its canonical form.
    pub fn check_read(&self, path: &Path) -> Result<PathBuf, ToolError> {
        let canonical = path.canonicalize().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ToolError::Failed(format!(
                "{} does not exist. Check the path (glob can find files by name).",
                path.display()
            )),
            _ => io_error(path, e),
        })?;
        if Self::root_of(&self.readable, &canonical).is_none() {
            return Err(ToolError::Failed(format!(
                "{} is outside the workspace ({}); the file tools only work inside it.",
                path.display(),
                self.workspace_root().display()
            )));
        }
        if self.is_credential(&canonical) {
            return Err(ToolError::Failed(format!(
                "{} is a credential file; the agent may not read it.",
                path.display()
            )));
        }
        Ok(canonical)
    }

    /// May the agent write this path (existing or new)? Returns where the write will land.
    pub fn check_write(&self, path: &Path) -> Result<PathBuf, ToolError> {
        let target = match path.canonicalize() {
            Ok(canonical) => canonical,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // A new file: canonicalize the nearest existing ancestor, keep the new rest.
                let mut existing = path.to_path_buf();
                let mut rest = Vec::new();
                loop {
                    if existing.symlink_metadata().is_ok() {
                        break;
                    }
                    match (existing.file_name(), existing.parent()) {
                        (Some(name), Some(parent)) => {
                            rest.push(name.to_os_string());
                            existing = parent.to_path_buf();
                        }
                        _ => {
                            return Err(ToolError::Failed(format!(
                                "{} has no existing parent directory",
                                path.display()
                            )));
                        }
                    }
                }
                // A dangling symlink on the way is refused: it could be made to point anywhere.
                let mut target = existing.canonicalize().map_err(|_| {
                    ToolError::Failed(format!(
                        "{} goes through {}, which is a broken symlink",
                        path.display(),
                        existing.display()
                    ))
                })?;
                for name in rest.iter().rev() {
                    target.push(name);
                }
                target
            }
            Err(e) => return Err(io_error(path, e)),
        };
        let Some(root) = Self::root_of(&self.writable, &target) else {
            let through_link = target != path;
            return Err(ToolError::Failed(format!(
                "{} {}is outside the workspace ({}); the agent may only write inside it.",
                path.display(),
                if through_link {
                    format!("resolves to {}, which ", target.display())
                } else {
                    String::new()
                },
                self.workspace_root().display()
            )));
        };
        if let Some(reason) = protected_reason(root, &target)
            && !self.granted.iter().any(|g| target.starts_with(g))
        {
            return Err(ToolError::Failed(format!(
                "{} is protected ({reason}); the agent may not change it without the user's explicit grant.",
                path.display()
            )));
        }
        if self.is_credential(&target) {
            return Err(ToolError::Failed(format!(
                "{} is a credential file; the agent may not write it.",
                path.display()
            )));
        }
        Ok(target)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Hash>> {
        // The map holds plain hashes; a panic elsewhere cannot leave it inconsistent.
        self.hashes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers the content the agent has seen (after a read or its own write).
    pub fn record(&self, canonical: &Path, content: &[u8]) {
        self.lock()
            .insert(canonical.to_path_buf(), Sha256::digest(content).into());
    }

    /// The file is unchanged since the agent last read (or wrote) it. Returns its content.
    pub fn check_fresh(&self, canonical: &Path) -> Result<Vec<u8>, ToolError> {
        let Some(seen) = self.lock().get(canonical).copied() else {
            return Err(ToolError::Failed(
                "You must read_file before editing it.".into(),
            ));
        };
        let content = std::fs::read(canonical).map_err(|e| io_error(canonical, e))?;
        let now: Hash = Sha256::digest(&content).into();
        if now != seen {
            return Err(ToolError::Failed(
                "File changed on disk since you last read it. Read it again.".into(),
            ));
        }
        Ok(content)
    }
}

/// Whether `path` names a credential file (`.env`, private keys, …): the one list the file
/// tools refuse and the permission policy judges bash redirections by.
pub fn is_credential_path(path: &Path) -> bool {
    static SETS: std::sync::OnceLock<(GlobSet, GlobSet)> = std::sync::OnceLock::new();
    let (credentials, exceptions) =
        SETS.get_or_init(|| (glob_set(CREDENTIAL_GLOBS), glob_set(CREDENTIAL_EXCEPTIONS)));
    credentials.is_match(path) && !exceptions.is_match(path)
}

/// Why a path inside a writable root is protected, if it is (the file tools refuse to write
/// it, and the permission policy refuses a bash redirection into it).
pub fn protected_reason(root: &Path, target: &Path) -> Option<&'static str> {
    let rel = target.strip_prefix(root).ok()?;
    // A `.git` at any depth (a nested repository's too), or a directory that is a git
    // directory (where a `.git` file points): git runs what their config and hooks say.
    if rel.components().any(|c| c.as_os_str() == ".git")
        || target
            .ancestors()
            .skip(1)
            .take_while(|a| a.starts_with(root) && *a != root)
            .any(is_git_dir)
    {
        return Some("git metadata");
    }
    let mut parts = rel.components().map(|c| c.as_os_str().to_string_lossy());
    match (parts.next().as_deref(), parts.next().as_deref()) {
        (Some(".anvil"), Some("config.toml")) => Some("anvil's project config"),
        (Some(".anvil"), Some("hooks")) => Some("anvil's hooks run as commands"),
        _ => None,
    }
}

/// Whether `dir` is a git directory (HEAD, objects/ and refs/ in it).
fn is_git_dir(dir: &Path) -> bool {
    dir.join("HEAD").is_file() && dir.join("objects").is_dir() && dir.join("refs").is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, FileAccess) {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let access = FileAccess::workspace(ws.path()).unwrap();
        (ws, outside, access)
    }

    fn failed(r: Result<PathBuf, ToolError>) -> String {
        match r {
            Err(ToolError::Failed(m)) => m,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn a_workspace_symlink_pointing_outside_cannot_be_written_through() {
        let (ws, outside, access) = setup();
        std::fs::write(outside.path().join("target.txt"), "x").unwrap();
        symlink(outside.path(), ws.path().join("link")).unwrap();
        symlink(
            outside.path().join("target.txt"),
            ws.path().join("file-link"),
        )
        .unwrap();
        let m = failed(access.check_write(&ws.path().join("link/new.txt")));
        assert!(m.contains("outside the workspace"), "{m}");
        let m = failed(access.check_write(&ws.path().join("file-link")));
        assert!(m.contains("resolves to"), "{m}");
        // Reading through it is refused too.
        assert!(access.check_read(&ws.path().join("file-link")).is_err());
    }

    #[test]
    fn a_new_file_validates_its_existing_parent_chain() {
        let (ws, outside, access) = setup();
        // New nested directories under the workspace are fine.
        let t = access.check_write(&ws.path().join("a/b/c.txt")).unwrap();
        assert!(t.starts_with(access.workspace_root()));
        // A `..` path that leaves the workspace is refused.
        let escape = FileAccess::resolve(ws.path(), "../escape.txt");
        assert!(failed(access.check_write(&escape)).contains("outside the workspace"));
        // A dangling symlink in the chain is refused.
        symlink(outside.path().join("nope"), ws.path().join("dangling")).unwrap();
        assert!(
            failed(access.check_write(&ws.path().join("dangling/x.txt")))
                .contains("broken symlink")
        );
    }

    #[test]
    fn protected_paths_need_a_grant() {
        let (ws, _outside, access) = setup();
        std::fs::create_dir_all(ws.path().join(".git/hooks")).unwrap();
        std::fs::create_dir_all(ws.path().join(".anvil")).unwrap();
        for p in [
            ".git/config",
            ".git/hooks/pre-commit",
            ".anvil/config.toml",
            ".anvil/hooks/stop.sh",
        ] {
            let m = failed(access.check_write(&ws.path().join(p)));
            assert!(m.contains("is protected"), "{p}: {m}");
        }
        // Other .anvil content (skills, notes) is the agent's to write.
        assert!(
            access
                .check_write(&ws.path().join(".anvil/skills/x/SKILL.md"))
                .is_ok()
        );
        let granted = FileAccess::workspace(ws.path())
            .unwrap()
            .with_granted(&ws.path().canonicalize().unwrap().join(".anvil/config.toml"));
        assert!(
            granted
                .check_write(&ws.path().join(".anvil/config.toml"))
                .is_ok()
        );
    }

    #[test]
    fn credential_files_are_never_read() {
        let (ws, _outside, access) = setup();
        for name in [
            ".env",
            ".env.production",
            ".envrc",
            "cert.p12",
            "service-account-prod.json",
            "credentials.json",
            "server.pem",
            "id_ed25519",
            ".netrc",
        ] {
            std::fs::write(ws.path().join(name), "secret").unwrap();
            assert!(
                failed(access.check_read(&ws.path().join(name))).contains("credential"),
                "{name}"
            );
        }
        std::fs::write(ws.path().join(".env.example"), "KEY=").unwrap();
        assert!(access.check_read(&ws.path().join(".env.example")).is_ok());
    }

    #[test]
    fn freshness_is_by_content() {
        let (ws, _outside, access) = setup();
        let p = ws.path().canonicalize().unwrap().join("f.txt");
        std::fs::write(&p, "one").unwrap();
        assert_eq!(
            access.check_fresh(&p).unwrap_err(),
            ToolError::Failed("You must read_file before editing it.".into())
        );
        access.record(&p, b"one");
        assert_eq!(access.check_fresh(&p).unwrap(), b"one");
        // The agent's own write refreshes the record: consecutive edits work.
        std::fs::write(&p, "two").unwrap();
        access.record(&p, b"two");
        assert!(access.check_fresh(&p).is_ok());
        // Someone else's edit does not.
        std::fs::write(&p, "three").unwrap();
        assert_eq!(
            access.check_fresh(&p).unwrap_err(),
            ToolError::Failed("File changed on disk since you last read it. Read it again.".into())
        );
    }
}
