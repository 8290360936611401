//! Where a sweep's trials keep their transcripts (each trial's agent session, a JSONL file
//! `anvil replay` reads): the sweep's **artifact directory**, and one file per attempt in it.
//!
//! - The artifact directory is `<data dir>/anvil/sweeps/<sweep>/`, or `<DIR>/sweeps/<sweep>/`
//!   when the sweep was started with `--workspaces DIR`. It is decided once, where the sweep is
//!   started, and recorded in the sweep's spec ([`SweepSpec::artifacts`]): every worker, on
//!   every machine, writes to that path on its own disk (the same disk only when a shared
//!   directory is mounted there). A sweep recorded before artifact directories existed uses
//!   the worker's own rule.
//! - A trial's transcript is `<artifacts>/<task>/<model>/<trial>.jsonl` for its first
//!   attempt and `<trial>.attempt-<n>.jsonl` for a retry (attempt n ≥ 2), so a retry never
//!   overwrites the transcript of the attempt it retries. The child `anvil` creates the file
//!   new (an existing one is refused) and writes it record by record: a trial that fails or
//!   runs out of time keeps what it wrote, torn at most in its last line, which loading
//!   leaves out. A trial of a variant (a sweep file's `[variants.NAME]`) keeps its
//!   transcripts one level further down, in `<artifacts>/<task>/<model>/<variant>/`.
//! - The directory is hidden from every trial's sandbox, like the workspaces root: it holds
//!   the other trials of the same task, and so possibly a passing solution.
//!
//! Task and model names become path components with every character other than ASCII letters,
//! digits and `-_.:+=@,` percent-encoded (and a leading `.`), so a name can neither climb out
//! of the directory nor collide with another name.
//!
//! [`SweepSpec::artifacts`]: crate::jobs::sweep::SweepSpec::artifacts

use std::path::{Path, PathBuf};

use crate::jobs::queue::TrialKey;

/// Where sweeps' artifact directories go on this machine: `<DIR>/sweeps` with
/// `--workspaces DIR`, else `<data dir>/anvil/sweeps`; `None` when there is no data directory.
pub fn root(workspaces: Option<&Path>) -> Option<PathBuf> {
    match workspaces {
        Some(dir) => Some(std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())),
        None => anvil_llm::config::data_dir(),
    }
    .map(|dir| dir.join("sweeps"))
}

/// The artifact directory of `sweep` under `root`.
pub fn artifacts(root: &Path, sweep: &str) -> PathBuf {
    root.join(component(sweep))
}

/// The directory of (`task`, `model`)'s transcripts.
pub fn dir(artifacts: &Path, task: &str, model: &str, variant: Option<&str>) -> PathBuf {
    let dir = artifacts.join(component(task)).join(component(model));
    match variant {
        Some(variant) => dir.join(component(variant)),
        None => dir,
    }
}

/// The transcript of `attempt` of trial `trial` of (`task`, `model`, `variant`).
pub fn transcript(
    artifacts: &Path,
    task: &str,
    model: &str,
    variant: Option<&str>,
    trial: u32,
    attempt: u32,
) -> PathBuf {
    dir(artifacts, task, model, variant).join(file_name(trial, attempt))
}

/// The transcript of `attempt` of the trial `key`.
pub fn of(artifacts: &Path, key: &TrialKey, attempt: u32) -> PathBuf {
    transcript(
        artifacts,
        &key.task,
        &key.model,
        key.variant.as_deref(),
        key.trial,
        attempt,
    )
}

/// [`latest`] for the trial `key`.
pub fn latest_of(artifacts: &Path, key: &TrialKey, attempt: u32) -> Option<PathBuf> {
    latest(
        artifacts,
        &key.task,
        &key.model,
        key.variant.as_deref(),
        key.trial,
        attempt,
    )
}

/// `<trial>.jsonl` for the first attempt, `<trial>.attempt-<n>.jsonl` for a later one.
pub fn file_name(trial: u32, attempt: u32) -> String {
    if attempt <= 1 {
        format!("{trial}.jsonl")
    } else {
        format!("{trial}.attempt-{attempt}.jsonl")
    }
}

/// The newest transcript on this disk of attempts `attempt` down to 1 (a lost worker's
/// trial is recorded under the attempt after the one that ran).
pub fn latest(
    artifacts: &Path,
    task: &str,
    model: &str,
    variant: Option<&str>,
    trial: u32,
    attempt: u32,
) -> Option<PathBuf> {
    (1..=attempt.max(1))
        .rev()
        .map(|a| transcript(artifacts, task, model, variant, trial, a))
        .find(|p| p.is_file())
}

/// `name` as one path component: safe characters kept, every other byte (and a leading `.`)
/// percent-encoded, so the mapping is one-to-one and never `.`, `..` or empty.
pub fn component(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, byte) in name.bytes().enumerate() {
        let safe = byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'_' | b':' | b'+' | b'=' | b'@' | b',')
            || (byte == b'.' && i > 0);
        if safe {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    if out.is_empty() {
        out.push_str("%00");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_never_shares_a_file_with_the_attempt_it_retries() {
        let a = Path::new("/d/sweeps/s1");
        assert_eq!(
            transcript(a, "py-fix", "sonnet", None, 0, 1),
            Path::new("/d/sweeps/s1/py-fix/sonnet/0.jsonl")
        );
        assert_eq!(
            transcript(a, "py-fix", "sonnet", None, 0, 2),
            Path::new("/d/sweeps/s1/py-fix/sonnet/0.attempt-2.jsonl")
        );
        assert_eq!(artifacts(Path::new("/d/sweeps"), "s1"), a);
        assert_eq!(
            transcript(a, "py-fix", "sonnet", Some("run-tests"), 0, 1),
            Path::new("/d/sweeps/s1/py-fix/sonnet/run-tests/0.jsonl")
        );
    }

    #[test]
    fn names_cannot_climb_out_or_collide() {
        assert_eq!(component("ollama:qwen3:8b"), "ollama:qwen3:8b");
        assert_eq!(component("v1.2"), "v1.2");
        assert_eq!(component("../etc"), "%2E.%2Fetc");
        assert_eq!(component(".."), "%2E.");
        assert_eq!(component("a/b"), "a%2Fb");
        assert_ne!(component("a/b"), component("a%2Fb"));
        assert_eq!(component("a%2Fb"), "a%252Fb");
        assert_eq!(component(""), "%00");
        assert_eq!(component("é"), "%C3%A9");
    }

    #[test]
    fn the_newest_attempt_on_disk_is_found() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(latest(dir.path(), "t", "m", None, 3, 2), None);
        let first = transcript(dir.path(), "t", "m", None, 3, 1);
        std::fs::create_dir_all(first.parent().unwrap()).unwrap();
        std::fs::write(&first, "").unwrap();
        assert_eq!(
            latest(dir.path(), "t", "m", None, 3, 3),
            Some(first.clone())
        );
        let second = transcript(dir.path(), "t", "m", None, 3, 2);
        std::fs::write(&second, "").unwrap();
        assert_eq!(latest(dir.path(), "t", "m", None, 3, 3), Some(second));
        assert_eq!(latest(dir.path(), "t", "m", None, 3, 1), Some(first));
    }
}
