//! The verify step: each feature's `verify.cmd` at a commit, in a separate grading copy with
//! the contract's protected paths laid over from the accepted commit — the grader's protected
//! grading environment ([`anvil_grader::command`]: the one tree copy, the one sandbox), never
//! the attempt's worktree itself.
//!
//! The accepted commit (the run branch's first, holding the contract) is written out once per
//! [`Verifier`]; the commit under check once per [`Verifier::check`]; every feature's command
//! then runs in its own fresh grading copy of it, one after another, so no check sees what
//! another left. A check that could not run is [`CheckOutcome::Infra`]: no verdict, retried.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anvil_grader::GradeOptions;
use anvil_grader::command::{CommandCheck, CommandResult, CommandVerdict, check_command};
use anvil_grader::protect::{PatternError, ProtectedPaths};

use crate::auto::contract::{Contract, Feature};
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
}

/// Checks features at commits against one accepted contract.
pub struct Verifier {
    repo: Repo,
    trusted: tempfile::TempDir,
    protected: ProtectedPaths,
    opts: GradeOptions,
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
        let protected = contract.protected_paths()?;
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
        })
    }

    /// Runs the check of each of `features` at `commit`, in order.
    pub async fn check(
        &self,
        commit: &Oid,
        features: &[Feature],
    ) -> Result<BTreeMap<String, Checked>, VerifyError> {
        let tree = scratch(&self.opts, "anvil-commit-")?;
        self.repo
            .materialize(commit, tree.path())
            .map_err(|source| VerifyError::Materialize {
                commit: commit.clone(),
                source,
            })?;
        let mut out = BTreeMap::new();
        for feature in features {
            let evidence = check_command(
                &CommandCheck {
                    tree: tree.path(),
                    trusted: self.trusted.path(),
                    protected: &self.protected,
                    command: &feature.verify.cmd,
                    timeout: Duration::from_secs(feature.verify.timeout_s),
                },
                &self.opts,
            )
            .await;
            let outcome = outcome(&evidence);
            out.insert(feature.id.clone(), Checked { outcome, evidence });
        }
        Ok(out)
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

fn scratch(opts: &GradeOptions, prefix: &str) -> Result<tempfile::TempDir, VerifyError> {
    let root: PathBuf = opts.grading_root.clone().unwrap_or_else(std::env::temp_dir);
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(root)
        .map_err(VerifyError::Scratch)
}
