//! Session files on disk: where they live, writing them under the durability policy, loading
//! them back, and the lock that keeps two processes from appending to one file.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anvil_llm::{ContentBlock, Message, Role};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::record::{Entry, FORMAT_VERSION, Record};
use super::state::{ReduceError, SessionState};
use crate::secrets::Redactor;

/// Why a session could not be written or read. Each names the file, and the line where one is
/// at fault.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "session file {path} was replaced or removed while in use, so the session stopped \
         being written (the turn ends here)"
    )]
    Replaced { path: PathBuf },
    #[error("session file {path}, line {line}: not a session record ({reason})")]
    Malformed {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error(
        "session file {path}, line {line}: written in format {found} by a newer anvil; this one \
         reads up to format {FORMAT_VERSION} — upgrade anvil to open it"
    )]
    FutureVersion {
        path: PathBuf,
        line: usize,
        found: u32,
    },
    #[error("session file {path}, line {line}: sequence number {found}, expected {expected}")]
    Sequence {
        path: PathBuf,
        line: usize,
        expected: u64,
        found: u64,
    },
    #[error("session file {path}, line {line}: {source}")]
    Reduce {
        path: PathBuf,
        line: usize,
        #[source]
        source: ReduceError,
    },
    #[error(
        "session file {path}: its records read, but the conversation they make is invalid \
         ({reason}), so it cannot be continued"
    )]
    InvalidTranscript { path: PathBuf, reason: String },
    #[error(
        "session file {path}, line {line}: does not start with session_started (found {found})"
    )]
    NotStarted {
        path: PathBuf,
        line: usize,
        found: &'static str,
    },
    #[error("session file {path} is empty: it has no record, not even session_started")]
    Empty { path: PathBuf },
    #[error(
        "session file {path}, line 1: the file ends inside its first record ({bytes} bytes and \
         no newline): it was cut off while being written, and holds no session"
    )]
    Truncated { path: PathBuf, bytes: u64 },
    #[error(
        "session file {path}: not appended to since an earlier record could not be written \
         ({first}); the file ends at record {last_seq}, a whole prefix of the session — resume \
         it to continue from there"
    )]
    StoppedWriting {
        path: PathBuf,
        first: String,
        last_seq: u64,
    },
    #[error(
        "session file {path} is in use by another anvil process{}; wait for it to end, or \
         start a new session",
        match pid { Some(p) => format!(" (pid {p})"), None => String::new() }
    )]
    Locked { path: PathBuf, pid: Option<u32> },
    #[error(
        "session file {path}, line 1: session {id} belongs to {belongs}, not to {cwd}; resume \
         it from {belongs} (anvil replay reads it from anywhere by its path)"
    )]
    OtherDirectory {
        path: PathBuf,
        id: String,
        belongs: String,
        cwd: String,
    },
    #[error("no session {id} in {dir}")]
    NotFound { id: String, dir: PathBuf },
    #[error("session file {path} already exists; a new session is never written over one")]
    Exists { path: PathBuf },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SessionError + '_ {
    move |source| SessionError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Where sessions live: `<root>/<sanitized cwd>/<id>.jsonl`, the root being
/// `<data dir>/anvil/sessions` for the `anvil` command.
#[derive(Debug, Clone)]
pub struct SessionStore {
    root: PathBuf,
}

/// A session file's summary, for listings.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    pub id: String,
    pub path: PathBuf,
    /// The first user prompt's text (the start of it).
    pub first_prompt: String,
    pub model: String,
    /// User prompts in the session.
    pub turns: usize,
    /// When the file was last written.
    pub modified: SystemTime,
    pub usage: anvil_llm::Usage,
    /// What its responses cost, as far as it is known.
    pub cost: super::state::Cost,
}

/// What [`SessionStore::list_recent`] found.
#[derive(Debug, Default)]
pub struct Listing {
    /// The sessions that loaded, newest first.
    pub sessions: Vec<SessionSummary>,
    /// The files among the newest that do not load, and why.
    pub unreadable: Vec<SessionError>,
    /// Session files older than the newest `limit`, not read.
    pub older: usize,
}

impl SessionStore {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of `cwd`'s sessions: the path with every character other than ASCII
    /// letters and digits made `-`, plus a short hash of the exact path (so `/a-b` and `/a/b`
    /// do not share one).
    pub fn dir_for(&self, cwd: &Path) -> PathBuf {
        let text = cwd.to_string_lossy();
        let mut name: String = text
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        if name.len() > 100 {
            name = name[name.len() - 100..].to_string();
        }
        let hash = Sha256::digest(text.as_bytes());
        let short = hex::encode(&hash[..4]);
        self.root.join(format!("{name}-{short}"))
    }

    /// The file of session `id` of `cwd`.
    pub fn path_of(&self, cwd: &Path, id: &str) -> PathBuf {
        self.dir_for(cwd).join(format!("{id}.jsonl"))
    }

    /// Starts a new session of `cwd` on `model`, in a new file of `cwd`'s directory.
    pub fn create(
        &self,
        cwd: &Path,
        model: &str,
        redactor: Option<Arc<Redactor>>,
    ) -> Result<(SessionWriter, LoadedSession), SessionError> {
        let id = new_id();
        let path = self.dir_for(cwd).join(format!("{id}.jsonl"));
        SessionWriter::create_with_id(&path, id, cwd, model, redactor)
    }

    /// The path of session `id` of `cwd`, if it exists. A session `id` of another directory
    /// is refused as such (naming its file), not as missing.
    pub fn find(&self, cwd: &Path, id: &str) -> Result<PathBuf, SessionError> {
        let path = self.path_of(cwd, id);
        if path.is_file() {
            return Ok(path);
        }
        if let Some(elsewhere) = self.find_elsewhere(id) {
            return Err(SessionError::OtherDirectory {
                belongs: started_in(&elsewhere).unwrap_or_else(|| "another directory".into()),
                path: elsewhere,
                id: id.to_string(),
                cwd: cwd.to_string_lossy().into_owned(),
            });
        }
        Err(SessionError::NotFound {
            id: id.to_string(),
            dir: self.dir_for(cwd),
        })
    }

    /// The file of session `id` in any directory's sessions (one `stat` per directory).
    fn find_elsewhere(&self, id: &str) -> Option<PathBuf> {
        let name = format!("{id}.jsonl");
        std::fs::read_dir(&self.root)
            .ok()?
            .flatten()
            .map(|dir| dir.path().join(&name))
            .find(|path| path.is_file())
    }

    /// `cwd`'s sessions, most recently written first. Files that do not load are left out
    /// (see [`SessionStore::list_all`]).
    pub fn list(&self, cwd: &Path) -> Result<Vec<SessionSummary>, SessionError> {
        self.list_recent(cwd, usize::MAX).map(|l| l.sessions)
    }

    /// `cwd`'s `limit` most recently written sessions, newest first, and why each of those
    /// `*.jsonl` files that does not load does not (so a listing can show it instead of
    /// hiding it). Only those files are read: the rest are counted from the directory
    /// listing, so a directory of thousands of long sessions lists as fast as one of ten.
    pub fn list_recent(&self, cwd: &Path, limit: usize) -> Result<Listing, SessionError> {
        let dir = self.dir_for(cwd);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Listing::default()),
            Err(e) => return Err(io(&dir)(e)),
        };
        let mut files: Vec<(SystemTime, PathBuf)> = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
            .map(|e| {
                // `metadata` does not follow a symlink; `load` refuses what is not a file.
                let modified = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(UNIX_EPOCH);
                (modified, e.path())
            })
            .collect();
        files.sort_by(|a, b| b.cmp(a));
        let older = files.len().saturating_sub(limit);
        files.truncate(limit);
        let mut listing = Listing {
            older,
            ..Listing::default()
        };
        for (modified, path) in files {
            match load(&path) {
                Ok(loaded) => listing.sessions.push(loaded.summary(modified)),
                Err(e) => listing.unreadable.push(e),
            }
        }
        Ok(listing)
    }

    /// The most recently written session file of `cwd`, chosen by modification time alone:
    /// nothing is loaded here, so a newest file that does not load is the one the caller
    /// loads and refuses (naming its line), never silently passed over for an older one.
    pub fn latest(&self, cwd: &Path) -> Result<Option<PathBuf>, SessionError> {
        let dir = self.dir_for(cwd);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&dir)(e)),
        };
        let newest = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
            .filter_map(|e| {
                let meta = e.metadata().ok()?; // does not follow a symlink
                meta.is_file()
                    .then(|| (meta.modified().unwrap_or(UNIX_EPOCH), e.path()))
            })
            .max();
        Ok(newest.map(|(_, path)| path))
    }
}

/// The working directory a session file's first record names, reading only that line.
fn started_in(path: &Path) -> Option<String> {
    use std::io::BufRead;
    let mut first = String::new();
    std::io::BufReader::new(File::open(path).ok()?)
        .read_line(&mut first)
        .ok()?;
    match serde_json::from_str::<Entry>(&first).ok()?.record {
        Record::SessionStarted { cwd, .. } => Some(cwd),
        _ => None,
    }
}

/// The bytes of the regular file at `path`. Anything else — a FIFO (opened without blocking,
/// so it cannot hang the reader), a device such as `/dev/zero` (endless), a directory — is
/// refused before a byte is read.
fn read_regular(path: &Path) -> Result<Vec<u8>, SessionError> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(path)
        .map_err(io(path))?;
    let meta = file.metadata().map_err(io(path))?;
    if !meta.is_file() {
        return Err(io(path)(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        )));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes).map_err(io(path))?;
    Ok(bytes)
}

/// A fresh session id: a random UUID (v4), as the file name.
fn new_id() -> String {
    let mut bytes = [0u8; 16];
    let filled = File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    if !filled {
        // No /dev/urandom: the time and the pid, hashed, are unique enough for a file name.
        let seed = format!(
            "{}-{}-{:?}",
            now_ms(),
            std::process::id(),
            std::thread::current().id()
        );
        bytes.copy_from_slice(&Sha256::digest(seed.as_bytes())[..16]);
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Takes the exclusive advisory lock (`flock`) on an open session file: released when the
/// file is closed, however the holder exits — `kill -9` included. No second file is made for
/// it (creating a file costs a millisecond on a slow disk, every headless turn); the holder's
/// pid, for the message, comes from `/proc/locks` where there is one.
fn lock(file: &File, path: &Path) -> Result<(), SessionError> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => Err(SessionError::Locked {
            path: path.to_path_buf(),
            pid: holder(file),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(io(path)(e)),
    }
}

/// The pid holding a `flock` on `file`, from `/proc/locks` (Linux): lines like
/// `1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF`, matched by inode.
fn holder(file: &File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let inode = file.metadata().ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, pid, dev) = (fields.get(1)?, fields.get(4)?, fields.get(5)?);
        let ino: u64 = dev.rsplit(':').next()?.parse().ok()?;
        (*kind == "FLOCK" && ino == inode).then(|| pid.parse().ok())?
    })
}

/// Appends records to one session file, holding its lock (the file's `flock`).
///
/// Each record is one `write` of one whole line to a file opened for appending, so a crash
/// leaves at most the last line torn. A failed write (a full disk) is undone — the file is
/// cut back to its last whole line — and returned: the caller ends the turn, never carrying
/// on with a silently shorter session. From then on the writer appends nothing: a later,
/// smaller record that would fit must not land after the one that is missing, so the file
/// stays a whole prefix of the session (resuming it continues from there).
#[derive(Debug)]
pub struct SessionWriter {
    file: File,
    path: PathBuf,
    id: String,
    next_seq: u64,
    /// Bytes of whole lines in the file.
    len: u64,
    redactor: Option<Arc<Redactor>>,
    /// The first failed write, after which nothing more is appended.
    failed: Option<String>,
}

impl SessionWriter {
    /// Starts a new session of `cwd` on `model` in the file at exactly `path` (an eval trial's
    /// transcript, where the worker says). The file must not exist: an existing one is refused
    /// and left as it is, never appended to or overwritten. Its parent directories are made.
    /// The session gets a fresh id, as any session does; it is not the file's name.
    pub fn create_at(
        path: &Path,
        cwd: &Path,
        model: &str,
        redactor: Option<Arc<Redactor>>,
    ) -> Result<(SessionWriter, LoadedSession), SessionError> {
        SessionWriter::create_with_id(path, new_id(), cwd, model, redactor)
    }

    fn create_with_id(
        path: &Path,
        id: String,
        cwd: &Path,
        model: &str,
        redactor: Option<Arc<Redactor>>,
    ) -> Result<(SessionWriter, LoadedSession), SessionError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // A conversation is private: directories 0700 and files 0600, whatever the umask
            // (a session can hold what the redactor does not know to be secret).
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io(dir))?;
        }
        let file = match OpenOptions::new()
            .create_new(true)
            .append(true)
            .mode(0o600)
            .open(path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(SessionError::Exists {
                    path: path.to_path_buf(),
                });
            }
            Err(e) => return Err(io(path)(e)),
        };
        lock(&file, path)?;
        let mut writer = SessionWriter {
            file,
            path: path.to_path_buf(),
            id: id.clone(),
            next_seq: 1,
            len: 0,
            redactor,
            failed: None,
        };
        let started = Record::SessionStarted {
            id,
            cwd: cwd.to_string_lossy().into_owned(),
            model: model.to_string(),
            anvil_version: env!("CARGO_PKG_VERSION").to_string(),
        };
        writer.append(&started)?;
        sync_creation_in_background(&writer.path);
        let mut loaded = LoadedSession {
            path: writer.path.clone(),
            state: SessionState::default(),
            messages: Vec::new(),
            last_seq: 1,
            records: 1,
            valid_len: writer.len,
            torn_bytes: 0,
            unterminated: false,
            prompts: 0,
            first_prompt: None,
        };
        if let Err(source) = loaded.state.apply(&mut loaded.messages, started) {
            return Err(SessionError::Reduce {
                path: writer.path.clone(),
                line: 1,
                source,
            });
        }
        Ok((writer, loaded))
    }

    /// Opens an existing session to continue it: locks it, loads it, cuts a torn final line
    /// off, and appends after the last record. `cwd`, when given, must be the session's own.
    pub fn resume(
        path: &Path,
        cwd: Option<&Path>,
        redactor: Option<Arc<Redactor>>,
    ) -> Result<(SessionWriter, LoadedSession), SessionError> {
        let mut file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io(path))?;
        lock(&file, path)?;
        let loaded = load(path)?;
        if let Some(cwd) = cwd {
            let here = cwd.to_string_lossy();
            if loaded.state.cwd != here {
                return Err(SessionError::OtherDirectory {
                    path: path.to_path_buf(),
                    id: loaded.state.id.clone(),
                    belongs: loaded.state.cwd.clone(),
                    cwd: here.into_owned(),
                });
            }
        }
        let mut len = loaded.valid_len;
        if loaded.torn_bytes > 0 {
            file.set_len(loaded.valid_len).map_err(io(path))?;
            file.sync_all().map_err(io(path))?;
        } else if loaded.unterminated {
            file.write_all(b"\n")
                .and_then(|()| file.sync_all())
                .map_err(io(path))?;
            len += 1;
        }
        let writer = SessionWriter {
            file,
            path: path.to_path_buf(),
            id: loaded.state.id.clone(),
            next_seq: loaded.last_seq + 1,
            len,
            redactor,
            failed: None,
        };
        Ok((writer, loaded))
    }

    /// Whether an append failed (after which nothing more is appended).
    pub fn has_failed(&self) -> bool {
        self.failed.is_some()
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `record` (redacted of known secret values), synced when the durability policy
    /// says so ([`Record::is_synced`]).
    pub fn append(&mut self, record: &Record) -> Result<(), SessionError> {
        if let Some(first) = &self.failed {
            return Err(SessionError::StoppedWriting {
                path: self.path.clone(),
                first: first.clone(),
                last_seq: self.next_seq - 1,
            });
        }
        let entry = Entry {
            v: record.since(),
            seq: self.next_seq,
            ts_ms: now_ms(),
            record: record.clone(),
        };
        let mut line = match self.redactor.as_deref().filter(|r| !r.is_empty()) {
            None => serde_json::to_vec(&entry),
            Some(redactor) => encode_redacted(&entry, redactor),
        }
        .map_err(|e| SessionError::Malformed {
            path: self.path.clone(),
            line: 0,
            reason: format!("cannot encode a {} record: {e}", record.kind()),
        })?;
        line.push(b'\n');
        let written = self.file.write_all(&line).and_then(|()| {
            if record.is_synced() {
                self.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(e) = written {
            // Whatever part of the line reached the file goes: the file ends on a whole record
            // (were the cut to fail too, loading leaves a torn last line out all the same).
            let _ = self.file.set_len(self.len);
            self.failed = Some(e.to_string());
            return Err(io(&self.path)(e));
        }
        self.len += line.len() as u64;
        self.next_seq += 1;
        // Before a side effect, the file written must still be the one at the path: a file
        // replaced under a live session (`sed -i`, a sync tool) would take every later record
        // with the unlinked inode, silently.
        if record.is_synced() && !self.still_at_path() {
            let error = SessionError::Replaced {
                path: self.path.clone(),
            };
            self.failed = Some(error.to_string());
            return Err(error);
        }
        Ok(())
    }

    /// Whether the open file is still the file at the session's path (same device and inode).
    fn still_at_path(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (self.file.metadata(), std::fs::metadata(&self.path)) {
            (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
            _ => false,
        }
    }
}

#[cfg(test)]
impl SessionWriter {
    /// Writes to `file` from now on (tests: `/dev/full`, whose every write fails with ENOSPC
    /// as a full disk's does).
    pub(crate) fn write_to(&mut self, file: File) {
        self.file = file;
    }
}

/// Makes a new session file's creation durable off the critical path: the first sync of a
/// new file commits its creation (the journal's metadata), which on a disk costs several times
/// a later sync. Started as soon as the file exists, it runs while the first model request is
/// in flight, so the first synced `tool_started` finds it done and pays only for its own
/// bytes. The file is opened anew (read-only), not duplicated: a duplicate would share the
/// writer's lock and hold it after the writer is dropped. Best effort: a failure here is found
/// again, and reported, by that synced append.
fn sync_creation_in_background(path: &Path) {
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        if let Ok(file) = File::open(&path) {
            let _ = file.sync_all();
        }
    });
}

/// `entry` encoded with every known secret value replaced, and otherwise exactly as an entry
/// written without a redactor: the same fields in the same order, so a record's bytes do not
/// depend on whether secrets were known, and every line re-encodes to itself (opaque reasoning
/// state included). Redaction walks a `serde_json::Value`, whose maps are sorted by key, so a
/// changed value is read back into an [`Entry`] before it is encoded.
fn encode_redacted(entry: &Entry, redactor: &Redactor) -> serde_json::Result<Vec<u8>> {
    let mut value = serde_json::to_value(entry)?;
    if !redact_strings(&mut value, redactor) {
        return serde_json::to_vec(entry);
    }
    let redacted: Entry = serde_json::from_value(value)?;
    serde_json::to_vec(&redacted)
}

/// Replaces every known secret value in every string of `value`; whether any was found.
fn redact_strings(value: &mut Value, redactor: &Redactor) -> bool {
    match value {
        Value::String(s) => {
            let redacted = redactor.redact(s);
            let changed = redacted != *s;
            if changed {
                *s = redacted;
            }
            changed
        }
        // Every element is visited: no short-circuit once one has changed.
        Value::Array(items) => items
            .iter_mut()
            .map(|v| redact_strings(v, redactor))
            .fold(false, |any, changed| any | changed),
        // Keys too: a model can put a secret in an argument's name.
        Value::Object(map) => {
            let mut changed = false;
            let entries = std::mem::take(map);
            for (key, mut v) in entries {
                changed |= redact_strings(&mut v, redactor);
                let redacted = redactor.redact(&key);
                changed |= redacted != key;
                map.insert(redacted, v);
            }
            changed
        }
        _ => false,
    }
}

/// A session read back from its file.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedSession {
    pub path: PathBuf,
    pub state: SessionState,
    /// The active context: what the next request would carry.
    pub messages: Vec<Message>,
    /// The sequence number of the last record.
    pub last_seq: u64,
    /// Records read.
    pub records: usize,
    /// Bytes of the file that hold whole records.
    pub valid_len: u64,
    /// Bytes of a torn final line (a crash mid-write), not applied.
    pub torn_bytes: u64,
    /// The last record is whole but has no newline after it (resuming adds it).
    pub unterminated: bool,
    /// User prompts in the session (user messages of text, merged ones included).
    pub prompts: usize,
    /// The first prompt's text.
    pub first_prompt: Option<String>,
}

impl LoadedSession {
    fn summary(&self, modified: SystemTime) -> SessionSummary {
        let first_prompt = self
            .first_prompt
            .as_deref()
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect();
        SessionSummary {
            id: self.state.id.clone(),
            path: self.path.clone(),
            first_prompt,
            model: self.state.model.clone(),
            turns: self.prompts,
            modified,
            usage: self.state.usage,
            cost: self.state.cost,
        }
    }
}

/// Reads a session file: every record through the reducer. A torn final line (no newline at
/// the end of the file) is a crash mid-write and is left out; any other line that does not
/// read — malformed, out of sequence, from a newer format — refuses the whole file.
pub fn load(path: &Path) -> Result<LoadedSession, SessionError> {
    let mut bytes = read_regular(path)?;
    // A whole record that only lacks its newline (an editor, a copy) is a record, not a torn
    // write: it is read, and resuming adds the newline instead of cutting the record off.
    let tail_start = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |end| end + 1);
    let unterminated =
        tail_start < bytes.len() && serde_json::from_slice::<Entry>(&bytes[tail_start..]).is_ok();
    if unterminated {
        bytes.push(b'\n');
    }
    let (whole, torn) = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => bytes.split_at(end + 1),
        None => bytes.split_at(0),
    };
    let mut state = SessionState::default();
    let mut messages = Vec::new();
    let mut last_seq = 0u64;
    let mut records = 0usize;
    let mut prompts = 0usize;
    let mut first_prompt = None;
    for (n, line) in whole.split(|&b| b == b'\n').enumerate() {
        let line_no = n + 1;
        if line.is_empty() {
            continue;
        }
        let malformed = |reason: String| SessionError::Malformed {
            path: path.to_path_buf(),
            line: line_no,
            reason,
        };
        // A newer format is refused as such, never as malformed and never half-read.
        #[derive(serde::Deserialize)]
        struct Version {
            v: u32,
        }
        let future = |found: u32| SessionError::FutureVersion {
            path: path.to_path_buf(),
            line: line_no,
            found,
        };
        let entry: Entry = match serde_json::from_slice(line) {
            Ok(entry) => entry,
            Err(e) => {
                return Err(match serde_json::from_slice::<Version>(line) {
                    Ok(Version { v }) if v > FORMAT_VERSION => future(v),
                    _ => malformed(e.to_string()),
                });
            }
        };
        if entry.v > FORMAT_VERSION {
            return Err(future(entry.v));
        }
        if entry.seq != last_seq + 1 {
            return Err(SessionError::Sequence {
                path: path.to_path_buf(),
                line: line_no,
                expected: last_seq + 1,
                found: entry.seq,
            });
        }
        if records == 0 && !matches!(entry.record, Record::SessionStarted { .. }) {
            return Err(SessionError::NotStarted {
                path: path.to_path_buf(),
                line: line_no,
                found: entry.record.kind(),
            });
        }
        if let Some(text) = prompt_text(&entry.record) {
            prompts += 1;
            if first_prompt.is_none() {
                first_prompt = Some(text);
            }
        }
        state
            .apply(&mut messages, entry.record)
            .map_err(|source| SessionError::Reduce {
                path: path.to_path_buf(),
                line: line_no,
                source,
            })?;
        last_seq = entry.seq;
        records += 1;
    }
    if records == 0 {
        return Err(if !torn.is_empty() {
            SessionError::Truncated {
                path: path.to_path_buf(),
                bytes: torn.len() as u64,
            }
        } else {
            SessionError::Empty {
                path: path.to_path_buf(),
            }
        });
    }
    Ok(LoadedSession {
        path: path.to_path_buf(),
        state,
        messages,
        last_seq,
        records,
        valid_len: whole.len() as u64 - u64::from(unterminated),
        torn_bytes: torn.len() as u64,
        unterminated,
        prompts,
        first_prompt,
    })
}

/// The text a user typed, when `record` adds a prompt (a user message of text, not of tool
/// results).
fn prompt_text(record: &Record) -> Option<String> {
    let content = match record {
        Record::MessageAppended { message } if message.role == Role::User => &message.content,
        Record::MessageExtended { content, .. } => content,
        _ => return None,
    };
    let text: Vec<&str> = content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    (!text.is_empty()).then(|| text.join("\n"))
}

/// What a resumed session must append before its next request: a result for every call of
/// the last message that has none. A call that started with no recorded finish gets an
/// *unknown outcome* result (it may have taken effect; it is never re-run by itself); a call
/// that finished but whose result was never recorded (a crash or a full disk between the
/// two) gets a *result lost* one, saying it ran; a call that never started gets "not
/// executed". Returns the records, in order, or none when the context is complete.
pub fn repair(loaded: &LoadedSession) -> Vec<Record> {
    let Some(last) = loaded.messages.last() else {
        return Vec::new();
    };
    if last.role != Role::Assistant {
        return Vec::new();
    }
    let mut records = Vec::new();
    let mut results = Vec::new();
    for call in last.tool_calls() {
        let open = loaded.state.open_calls.iter().any(|c| c.call_id == call.id);
        let finished = loaded
            .state
            .finished_calls
            .iter()
            .find(|c| c.call_id == call.id);
        let text = if let Some(finished) = finished {
            format!(
                "Result lost: this {} call ran to its end{}, but anvil stopped before its \
                 result was recorded. It was not re-run. Check the current state before \
                 repeating it.",
                call.name,
                if finished.is_error {
                    " (with an error)"
                } else {
                    ""
                }
            )
        } else if open {
            records.push(Record::ToolFinished {
                call_id: call.id.to_string(),
                is_error: true,
            });
            format!(
                "Unknown outcome: anvil stopped after this {} call started and before its result \
                 was recorded. It may or may not have taken effect, and it was not re-run. Check \
                 the current state before repeating it.",
                call.name
            )
        } else {
            "Not executed: the session ended before this call ran.".to_string()
        };
        results.push(ContentBlock::tool_result(call.id, text, true));
    }
    // Calls still open from an earlier message (their results are in place) are closed too.
    for open in &loaded.state.open_calls {
        if !last.tool_calls().any(|c| c.id == open.call_id) {
            records.push(Record::ToolFinished {
                call_id: open.call_id.clone(),
                is_error: true,
            });
        }
    }
    if !results.is_empty() {
        records.push(Record::MessageAppended {
            message: Message::new(Role::User, results),
        });
    }
    records
}
