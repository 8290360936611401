//! `export --with-sessions DIR`: a sweep's trial records together with their transcripts, in
//! one directory that can be read anywhere (`anvil replay`, `anvil-evals report`).
//!
//! Each record's transcript is copied to `DIR/<task>/<model>/<file>` (the file's own name:
//! `<trial>.jsonl`, or `<trial>.attempt-<n>.jsonl` for a retry) and the record's
//! `session_path` is rewritten relative to the records file's directory (DIR itself unless
//! `-o` puts the records elsewhere), which is how a reader resolves a relative path. Records
//! are written as schema version 2 (a version 1 record is upgraded: it has no transcript).
//!
//! Workers on several machines each keep the transcripts of the trials they ran on their own
//! disk. A transcript not on this machine is named on stderr and its record keeps the path it
//! had; one already in DIR (copied by an export on the machine that has it, into a shared or
//! copied-over DIR) is used as it is. So exporting into the same DIR on each machine collects
//! every transcript, and the last export's records name them all.

use std::path::{Path, PathBuf};

use anvil_report::TrialRecord;
use anvil_report::links::relative;
use anvil_runner::jobs::transcripts::component;
use anyhow::{Context, Result, anyhow};

/// What an export with transcripts did.
#[derive(Debug, Default)]
pub struct Bundled {
    /// Where the records were written.
    pub records_path: PathBuf,
    pub records: usize,
    /// Transcripts copied from this machine.
    pub copied: usize,
    /// Transcripts not on this machine but already in the directory.
    pub already_there: usize,
    /// Trials whose transcript is neither here nor in the directory: `sweep/task/model#trial
    /// (attempt n): path`.
    pub missing: Vec<String>,
}

/// Copies the transcripts of `records` (JSONL lines of `sweep`) into `dir` and writes the
/// records, their `session_path` rewritten, to `output` (default `dir/records.jsonl`).
pub fn bundle(
    sweep: &str,
    records: &[String],
    dir: &Path,
    output: Option<&Path>,
) -> Result<Bundled> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let records_path = output.map_or_else(|| dir.join("records.jsonl"), Path::to_path_buf);
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let records_dir = absolute(match records_path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    });
    let mut done = Bundled {
        records_path: records_path.clone(),
        ..Bundled::default()
    };
    let mut text = String::new();
    for (i, line) in records.iter().enumerate() {
        let mut record = TrialRecord::parse(line, sweep, i + 1).map_err(|e| anyhow!("{e}"))?;
        if let Some(source) = record.session_path.clone() {
            let source = PathBuf::from(source);
            let target = source.file_name().map(|name| {
                dir.join(component(&record.task))
                    .join(component(&record.model))
                    .join(name)
            });
            let kept = match target {
                Some(target) if source.is_file() => {
                    copy(&source, &target)?;
                    done.copied += 1;
                    Some(target)
                }
                Some(target) if target.is_file() => {
                    done.already_there += 1;
                    Some(target)
                }
                _ => None,
            };
            match kept {
                Some(target) => {
                    let target = absolute(&target);
                    let rel = relative(&records_dir, &target).unwrap_or(target);
                    record.session_path = Some(rel.display().to_string());
                }
                None => done.missing.push(format!(
                    "{}/{}/{}#{} (attempt {}): {}",
                    record.sweep,
                    record.task,
                    record.model,
                    record.trial,
                    record.attempt,
                    source.display()
                )),
            }
        }
        text.push_str(&serde_json::to_string(&record).context("encoding a trial record")?);
        text.push('\n');
        done.records += 1;
    }
    std::fs::write(&records_path, text)
        .with_context(|| format!("writing {}", records_path.display()))?;
    Ok(done)
}

/// Copies the transcript `source` to `target` (its directories made), unless they are the
/// same file (an export into the artifact directory itself).
fn copy(source: &Path, target: &Path) -> Result<()> {
    let same = match (std::fs::canonicalize(source), std::fs::canonicalize(target)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        return Ok(());
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::copy(source, target)
        .with_context(|| format!("copying {} to {}", source.display(), target.display()))?;
    Ok(())
}
