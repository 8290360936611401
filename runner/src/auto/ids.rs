//! The names of a run and of a session attempt. Both become parts of git ref names
//! (`auto/<run>`, `anvil-work/<run>/s<N>a<attempt>`) and directory names, so they are checked
//! once, here, and nothing else has to quote them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A name that cannot be a run id, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run id {given:?}: {reason}")]
pub struct RunIdError {
    pub given: String,
    pub reason: &'static str,
}

/// A run's id: 1 to 64 ASCII letters, digits, `-` and `_`, starting with a letter or digit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunId(String);

impl RunId {
    pub const MAX_LEN: usize = 64;

    pub fn new(id: &str) -> Result<Self, RunIdError> {
        let bad = |reason| RunIdError {
            given: id.to_string(),
            reason,
        };
        if id.is_empty() || id.len() > Self::MAX_LEN {
            return Err(bad("must be 1 to 64 characters"));
        }
        if !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(bad("may hold only ASCII letters, digits, '-' and '_'"));
        }
        if !id.starts_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(bad("must start with a letter or a digit"));
        }
        Ok(Self(id.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The run branch, which only the harness moves: `auto/<run>`.
    pub fn run_branch(&self) -> String {
        format!("auto/{}", self.0)
    }

    /// The branch of one session attempt: `anvil-work/<run>/s<N>a<attempt>` (git cannot hold
    /// both `auto/<run>` and refs below it, so attempts live under another prefix).
    pub fn work_branch(&self, attempt: AttemptId) -> String {
        format!("anvil-work/{}/{attempt}", self.0)
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for RunId {
    type Err = RunIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

/// One attempt at one session: session numbers are never reused (the initializer is session
/// 0); a session re-run after a crash or an infrastructure failure is its next attempt
/// (attempts count from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AttemptId {
    pub session: u32,
    pub attempt: u32,
}

impl AttemptId {
    pub fn new(session: u32, attempt: u32) -> Self {
        Self { session, attempt }
    }
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s{}a{}", self.session, self.attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_safe_in_ref_and_directory_names() {
        for ok in ["r1", "2024-05-01_abc", "A"] {
            assert_eq!(RunId::new(ok).unwrap().as_str(), ok);
        }
        for bad in [
            "",
            "-x",
            "_x",
            "a/b",
            "a..b",
            "a b",
            "x.lock",
            "é",
            &"a".repeat(65),
        ] {
            assert!(RunId::new(bad).is_err(), "{bad:?}");
        }
        let run = RunId::new("r1").unwrap();
        assert_eq!(run.run_branch(), "auto/r1");
        assert_eq!(run.work_branch(AttemptId::new(3, 2)), "anvil-work/r1/s3a2");
    }
}
