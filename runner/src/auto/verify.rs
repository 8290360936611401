//! The verify step: each feature's `verify.cmd` at a commit, in a separate grading copy with
//! the contract's protected paths laid over from the accepted commit — the grader's protected
//! grading environment ([`anvil_grader::command`]: the one tree copy, the one sandbox), never
//! the attempt's worktree itself.
//!
//! `features.json` is laid over with the protected paths: every check sees the accepted
//! contract as the harness wrote it (no feature passing), never the session's claims, and the
//! fail-before checks at init see that same file (see [`Verifier::with_contract_file`]), so a
//! check cannot tell whether it runs before the work or after it by reading the contract.
//!
//! Scratch trees and grading copies go under the options' `grading_root`; without one, under
//! a memory-backed `/dev/shm` when it has room for the copies (see [`scratch_root`]): file
//! creation dominates a check on a slow disk (~1 s to copy a 1,000-file repository there,
//! ~80 ms for the whole check on tmpfs), and these trees live only as long as one check.
//!
//! The accepted commit (the run branch's first, holding the contract) is written out once per
//! [`Verifier`]; the commit under check once per [`Verifier::check`]; every feature's command
//! then runs in its own fresh grading copy of it, one after another, so no check sees what
//! another left. A check that could not run is [`CheckOutcome::Infra`]: no verdict, retried.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anvil_grader::command::{CommandCheck, CommandResult, CommandVerdict, check_command};
use anvil_grader::protect::{PatternError, ProtectedPaths};
use anvil_grader::{GradeOptions, TamperFinding};

use crate::auto::contract::{Contract, FEATURES_FILE, Feature};
use crate::auto::git::{GitError, Oid, Repo};
use crate::auto::verdict::CheckOutcome;

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot write out commit {commit} to check it: {source}")]
    Materialize {
        commit: Oid,
        #[source]
        source: GitError,
    },
    #[error("cannot make a directory for the verify step: {0}")]
    Scratch(std::io::Error),
    #[error("the contract's protected paths: {0}")]
    Protected(#[from] PatternError),
}

/// One feature's check: the outcome the verdict reads, and the evidence behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub outcome: CheckOutcome,
    pub evidence: CommandResult,
    /// What the commit changed in test infrastructure (see [`Verifier::check`]); when any,
    /// the check failed without running.
    pub tamper: Vec<TamperFinding>,
}

/// Checks features at commits against one accepted contract.
pub struct Verifier {
    repo: Repo,
    trusted: tempfile::TempDir,
    protected: ProtectedPaths,
    opts: GradeOptions,
    /// The options named no grading root: each commit's is chosen by its own size.
    choose_root: bool,
}

impl Verifier {
    /// A verifier for `contract`, accepted at commit `accepted` of `repo`. Scratch trees go
    /// under `opts.grading_root` (default: the system temp dir).
    pub fn new(
        repo: &Repo,
        accepted: &Oid,
        contract: &Contract,
        opts: GradeOptions,
    ) -> Result<Self, VerifyError> {
        let mut opts = opts;
        let choose_root = opts.grading_root.is_none();
        if choose_root {
            // The accepted tree's size stands for the trees this verifier will copy.
            let bytes = repo
                .tree_bytes(accepted)
                .map_err(|source| VerifyError::Materialize {
                    commit: accepted.clone(),
                    source,
                })?;
            opts.grading_root = scratch_root(Path::new("/dev/shm"), bytes);
        }
        let mut patterns = contract.protected.clone();
        patterns.push(FEATURES_FILE.to_string());
        let protected = ProtectedPaths::new(&patterns)?;
        let trusted = scratch(&opts, "anvil-accepted-")?;
        repo.materialize(accepted, trusted.path())
            .map_err(|source| VerifyError::Materialize {
                commit: accepted.clone(),
                source,
            })?;
        Ok(Self {
            repo: repo.clone(),
            trusted,
            protected,
            opts,
            choose_root,
        })
    }

    /// The initializer's fail-before checks: the trusted tree is the initializer's candidate,
    /// whose `features.json` becomes `text` — the accepted contract as the harness will write
    /// it — so the checks see the very file they will see after every later session.
    pub fn with_contract_file(self, text: &str) -> Result<Self, VerifyError> {
        use std::io::Write;
        let path = self.trusted.path().join(FEATURES_FILE);
        // Whatever the candidate has there (a symlink, a directory) is replaced, never
        // written through.
        match path.symlink_metadata() {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
        .map_err(VerifyError::Scratch)?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(VerifyError::Scratch)?;
        Ok(self)
    }

    /// Runs the check of each of `features` at `commit`, in order.
    pub async fn check(
        &self,
        commit: &Oid,
        features: &[Feature],
    ) -> Result<BTreeMap<String, Checked>, VerifyError> {
        // A session may have grown the tree far past the accepted one: the memory-backed
        // root only with room for this commit's copies too.
        let mut opts = self.opts.clone();
        if self.choose_root {
            let bytes =
                self.repo
                    .tree_bytes(commit)
                    .map_err(|source| VerifyError::Materialize {
                        commit: commit.clone(),
                        source,
                    })?;
            opts.grading_root = scratch_root(Path::new("/dev/shm"), bytes);
        }
        let tree = scratch(&opts, "anvil-commit-")?;
        self.repo
            .materialize(commit, tree.path())
            .map_err(|source| VerifyError::Materialize {
                commit: commit.clone(),
                source,
            })?;
        let tamper = self.tamper(tree.path());
        let mut out = BTreeMap::new();
        if !tamper.is_empty() {
            let reason = format!(
                "not run: the commit changes test infrastructure: {}",
                tamper
                    .iter()
                    .map(|f| format!("{} ({}: {})", f.path, f.kind, f.detail))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            for feature in features {
                let evidence = CommandResult {
                    verdict: CommandVerdict::Fail,
                    reason: reason.clone(),
                    duration_ms: 0,
                    output_tail: reason.clone(),
                    sandbox: String::new(),
                    laid_over: Default::default(),
                    skipped: Vec::new(),
                    exit_code: None,
                    shadowing: Vec::new(),
                };
                out.insert(
                    feature.id.clone(),
                    Checked {
                        outcome: outcome(&evidence),
                        evidence,
                        tamper: tamper.clone(),
                    },
                );
            }
            return Ok(out);
        }
        for feature in features {
            let evidence = check_command(
                &CommandCheck {
                    tree: tree.path(),
                    trusted: self.trusted.path(),
                    protected: &self.protected,
                    command: &feature.verify.cmd,
                    timeout: Duration::from_secs(feature.verify.timeout_s),
                },
                &opts,
            )
            .await;
            let outcome = outcome(&evidence);
            out.insert(
                feature.id.clone(),
                Checked {
                    outcome,
                    evidence,
                    tamper: Vec::new(),
                },
            );
        }
        Ok(out)
    }

    /// The eval grader's tamper scan of the commit's tree against the trusted one
    /// ([`anvil_grader::tamper::scan`]: start-up hooks, cargo config and toolchain files,
    /// build scripts, changed manifest test settings, code that runs before `main` or prints
    /// the test harness's verdict lines) and changed pytest configuration
    /// ([`anvil_grader::runner_config`]: `addopts`, deselection, plugins), once per commit. Left out: what the protected paths
    /// cover (laid over anyway), and a `Cargo.toml` the trusted tree has not (the sessions
    /// write the project's first manifest; only one the contract's commit had is frozen).
    fn tamper(&self, tree: &Path) -> Vec<TamperFinding> {
        let trusted = self.trusted.path();
        // Markers of code that runs before `main` or prints libtest's lines are looked for in
        // `.rs` files only: the sessions' own notes (progress.md quoting `test result: ok`)
        // must not block honest work.
        let rust = false;
        // pytest reads its configuration from where it runs and above: the root and every
        // directory above a protected path.
        let mut dirs = vec![PathBuf::new()];
        for literal in self.protected.literals() {
            for dir in Path::new(literal).ancestors().skip(1) {
                if !dirs.iter().any(|d| d == dir) {
                    dirs.push(dir.to_path_buf());
                }
            }
        }
        anvil_grader::tamper::scan(tree, trusted, &[], rust)
            .into_iter()
            .chain(anvil_grader::runner_config::changes(tree, trusted, &dirs))
            .filter(|f| !self.protected.covers(&f.path))
            // A conftest.py pytest would load is a shadow (`anvil_grader::shadow`); one
            // elsewhere (fixtures of the project's own tests) is the session's.
            .filter(|f| {
                !(f.kind == "python_startup_hook"
                    && Path::new(&f.path).file_name() == Some(std::ffi::OsStr::new("conftest.py")))
            })
            .filter(|f| f.kind != "manifest_test_settings" || trusted.join(&f.path).is_file())
            .collect()
    }
}

/// What the verdict reads from a command's result.
pub fn outcome(result: &CommandResult) -> CheckOutcome {
    match result.verdict {
        CommandVerdict::Pass => CheckOutcome::Passed,
        CommandVerdict::Fail => CheckOutcome::Failed {
            output: result.output_tail.clone(),
        },
        CommandVerdict::Timeout => CheckOutcome::TimedOut {
            output: result.output_tail.clone(),
        },
        CommandVerdict::GraderError => CheckOutcome::Infra {
            reason: result.reason.clone(),
        },
    }
}

/// The outcomes alone, for [`crate::auto::verdict::decide`].
pub fn outcomes(checked: &BTreeMap<String, Checked>) -> BTreeMap<String, CheckOutcome> {
    checked
        .iter()
        .map(|(id, c)| (id.clone(), c.outcome.clone()))
        .collect()
}

/// `shm` when it is a writable directory with room for eight copies of a tree of `bytes`
/// (a check holds the commit's tree and a grading copy of it; the rest is margin for what a
/// check writes and for trees that grew since), else `None`: the system temp dir.
pub fn scratch_root(shm: &Path, bytes: u64) -> Option<PathBuf> {
    let stat = nix::sys::statvfs::statvfs(shm).ok()?;
    let free = stat.blocks_available() as u64 * stat.fragment_size() as u64;
    let writable = nix::unistd::access(shm, nix::unistd::AccessFlags::W_OK).is_ok();
    (writable && bytes.saturating_mul(8) < free).then(|| shm.to_path_buf())
}

fn scratch(opts: &GradeOptions, prefix: &str) -> Result<tempfile::TempDir, VerifyError> {
    let root: PathBuf = opts.grading_root.clone().unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(root)
        .map_err(VerifyError::Scratch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_goes_to_memory_only_with_room_for_the_copies() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            scratch_root(dir.path(), 1024),
            Some(dir.path().to_path_buf())
        );
        assert_eq!(scratch_root(dir.path(), u64::MAX / 16), None, "no room");
        assert_eq!(scratch_root(&dir.path().join("missing"), 1024), None);
    }
}
