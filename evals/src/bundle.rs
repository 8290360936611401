//! `export --with-sessions DIR`: a sweep's trial records together with their transcripts, in
//! one directory that can be read anywhere (`anvil replay`, `anvil-evals report`).
//!
//! Each record's transcript is copied to `DIR/<sweep>/<task>/<model>/<file>` (`<trial>.jsonl`,
//! or `<trial>.attempt-<n>.jsonl` for a retry) and the records are written to
//! `DIR/<sweep>/records.jsonl` (or `-o FILE`) with `session_path` rewritten relative to the
//! records file's directory, which is how a reader resolves a relative path. Records are
//! written as schema version 2 (a version 1 record is upgraded: it has no transcript).
//!
//! DIR may be shared, so nothing in it is trusted to be what it seems:
//! - the source of a copy is never the path a record names but the transcript location the
//!   sweep's recorded artifact directory gives for the record's task, model, trial and attempt
//!   (a record naming anything else is refused: not copied, named on stderr); it is opened
//!   without following a symlink, must be a regular file and must load as a session;
//! - every directory under DIR must be a real directory (a symlink is refused), and a copy is
//!   made as a new file (mode 0644) beside its target and moved there only if nothing is
//!   there, so a symlink or file planted at a target is never written through; one already
//!   there with other bytes is refused;
//! - the records file is written to a new file and renamed over the old one.
//!
//! Workers on several machines each keep the transcripts of the trials they ran on their own
//! disk. A transcript not on this machine is named on stderr and its record keeps the path it
//! had; one already in DIR (copied by an export on the machine that has it, into a shared or
//! copied-over DIR) is used if it is a regular file that loads as a session. Such a file is
//! trusted only as far as DIR is: whoever can write DIR can put a transcript there.

use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anvil_report::TrialRecord;
use anvil_report::links::relative;
use anvil_runner::jobs::transcripts;
use anyhow::{Context, Result, anyhow};

/// What an export with transcripts did.
#[derive(Debug, Default)]
pub struct Bundled {
    /// Where the records were written.
    pub records_path: PathBuf,
    pub records: usize,
    /// Transcripts of this machine now in the directory.
    pub copied: usize,
    /// Transcripts not on this machine but already in the directory.
    pub already_there: usize,
    /// Trials whose transcript is neither here nor in the directory: `sweep/task/model#trial
    /// (attempt n): path`.
    pub missing: Vec<String>,
    /// Transcripts not copied because something is wrong: `sweep/task/model#trial (attempt
    /// n): why`. Their records keep the path they had.
    pub refused: Vec<String>,
}

/// Copies the transcripts of `records` (JSONL lines of `sweep`, whose transcripts are under
/// `artifacts`) into `dir/<sweep>` and writes the records, their `session_path` rewritten, to
/// `output` (default `dir/<sweep>/records.jsonl`).
pub fn bundle(
    sweep: &str,
    artifacts: &Path,
    records: &[String],
    dir: &Path,
    output: Option<&Path>,
) -> Result<Bundled> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = std::fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?;
    let sweep_dir = dir.join(transcripts::component(sweep));
    real_dir(&sweep_dir).map_err(|e| anyhow!("{e}"))?;
    let records_path = output.map_or_else(|| sweep_dir.join("records.jsonl"), Path::to_path_buf);
    let (records_dir, records_name) = split(&records_path)?;
    let mut done = Bundled {
        records_path: records_path.clone(),
        ..Bundled::default()
    };
    let mut text = String::new();
    for (i, line) in records.iter().enumerate() {
        let mut record = TrialRecord::parse(line, sweep, i + 1).map_err(|e| anyhow!("{e}"))?;
        if let Some(named) = record.session_path.clone() {
            let variant = record.variant.as_deref();
            let who = format!(
                "{}/{}/{}{}#{} (attempt {})",
                record.sweep,
                record.task,
                record.model,
                variant.map(|v| format!("/{v}")).unwrap_or_default(),
                record.trial,
                record.attempt
            );
            // The attempts a record's transcript can be: a lost worker's trial is recorded
            // under the attempt after the one that ran.
            let attempt = (1..=record.attempt.max(1)).rev().find(|&a| {
                transcripts::transcript(
                    artifacts,
                    &record.task,
                    &record.model,
                    variant,
                    record.trial,
                    a,
                ) == Path::new(&named)
            });
            let placed = match attempt {
                None => Err(format!(
                    "{} is not where the sweep keeps this transcript (under {})",
                    named,
                    artifacts.display()
                )),
                Some(a) => place(
                    &transcripts::transcript(
                        artifacts,
                        &record.task,
                        &record.model,
                        variant,
                        record.trial,
                        a,
                    ),
                    &sweep_dir,
                    &record.task,
                    &record.model,
                    variant,
                    &transcripts::file_name(record.trial, a),
                ),
            };
            let target = match placed {
                Ok(Placed::Copied(target)) => {
                    done.copied += 1;
                    Some(target)
                }
                Ok(Placed::There(target)) => {
                    done.already_there += 1;
                    Some(target)
                }
                Ok(Placed::Missing) => {
                    done.missing.push(format!("{who}: {named}"));
                    None
                }
                Err(why) => {
                    done.refused.push(format!("{who}: {why}"));
                    None
                }
            };
            if let Some(target) = target {
                let rel = relative(&records_dir, &target).unwrap_or(target);
                record.session_path = Some(rel.display().to_string());
            }
        }
        text.push_str(&serde_json::to_string(&record).context("encoding a trial record")?);
        text.push('\n');
        done.records += 1;
    }
    // A new file renamed over the target: a symlink planted there is replaced, not followed.
    let mut file = tempfile::Builder::new()
        .prefix(".records.")
        .tempfile_in(&records_dir)
        .with_context(|| format!("creating a file in {}", records_dir.display()))?;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))
        .and_then(|()| file.write_all(text.as_bytes()))
        .with_context(|| format!("writing {}", records_path.display()))?;
    file.persist(records_dir.join(records_name))
        .map_err(|e| e.error)
        .with_context(|| format!("writing {}", records_path.display()))?;
    Ok(done)
}

/// `path`'s directory, resolved (so a relative path from it is right even through `..` or a
/// symlink), and its file name.
fn split(path: &Path) -> Result<(PathBuf, PathBuf)> {
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("{}: not a file name", path.display()))?;
    let parent = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let parent = std::fs::canonicalize(parent)
        .with_context(|| format!("resolving the directory of {}", path.display()))?;
    Ok((parent, PathBuf::from(name)))
}

/// Where a record's transcript ended up.
enum Placed {
    /// Copied from this machine (or already there, the same bytes).
    Copied(PathBuf),
    /// Not on this machine, already in the directory.
    There(PathBuf),
    /// Neither.
    Missing,
}

/// Puts the transcript `source` at `sweep_dir/<task>/<model>/<name>`; `Err` says why not.
fn place(
    source: &Path,
    sweep_dir: &Path,
    task: &str,
    model: &str,
    variant: Option<&str>,
    name: &str,
) -> Result<Placed, String> {
    let task_dir = sweep_dir.join(transcripts::component(task));
    let arm_dir = task_dir.join(transcripts::component(model));
    let model_dir = match variant {
        Some(v) => arm_dir.join(transcripts::component(v)),
        None => arm_dir.clone(),
    };
    let target = model_dir.join(name);
    let bytes = match read_regular(source) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{}: {e}", source.display())),
    };
    real_dir(&task_dir)?;
    real_dir(&arm_dir)?;
    if variant.is_some() {
        real_dir(&model_dir)?;
    }
    let existing = match read_regular(&target) {
        Ok(there) => Some(there),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(format!("{}: {e}", target.display())),
    };
    match (bytes, existing) {
        (Some(bytes), Some(there)) if bytes == there => Ok(Placed::Copied(target)),
        (Some(_), Some(_)) => Err(format!(
            "{} is already there with other content (not replaced)",
            target.display()
        )),
        (Some(bytes), None) => {
            create(&model_dir, &target, &bytes)?;
            Ok(Placed::Copied(target))
        }
        (None, Some(_)) => match anvil_agent::session::load(&target) {
            Ok(_) => Ok(Placed::There(target)),
            Err(e) => Err(format!("{} is not a transcript: {e}", target.display())),
        },
        (None, None) => Ok(Placed::Missing),
    }
}

/// The bytes of `path`, which must be a regular file and not a symlink.
fn read_regular(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => std::io::Error::other("a symlink (refused)"),
            _ => e,
        })?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file (refused)"));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Makes `dir` unless it is there; a real directory either way, never a symlink.
fn real_dir(dir: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => return Err(format!("{} is not a directory (refused)", dir.display())),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        // Made at the same moment by someone else: look again.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => Ok(()),
            _ => Err(format!("{} is not a directory (refused)", dir.display())),
        },
        Err(e) => Err(format!("creating {}: {e}", dir.display())),
    }
}

/// Writes `bytes` as the new file `target` (mode 0644) in `dir`, only if it loads as a
/// session: written to a new file beside it and moved there only if nothing is at `target`.
fn create(dir: &Path, target: &Path, bytes: &[u8]) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("writing {}: {e}", target.display());
    let mut file = tempfile::Builder::new()
        .prefix(".transcript.")
        .tempfile_in(dir)
        .map_err(fail)?;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))
        .map_err(fail)?;
    file.write_all(bytes).map_err(fail)?;
    file.flush().map_err(fail)?;
    if let Err(e) = anvil_agent::session::load(file.path()) {
        return Err(format!("not a transcript: {e}"));
    }
    file.persist_noclobber(target)
        .map_err(|e| match e.error.kind() {
            ErrorKind::AlreadyExists => {
                format!("{} appeared while copying (not replaced)", target.display())
            }
            _ => fail(e.error),
        })?;
    Ok(())
}
