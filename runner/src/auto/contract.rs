//! The `features.json` contract: its types, parsing with errors that name the file, the line
//! and column and the field, the checks that make it usable, its digests, the freeze check run
//! after every session, and the file the harness writes back.
//!
//! Version 1:
//!
//! ```json
//! {"version": 1, "spec_digest": "sha256:…", "test_command": "cargo test --quiet",
//!  "protected": ["tests/", "scripts/verify_*.sh"],
//!  "features": [{"id": "F001", "description": "…", "steps": ["…"],
//!                "verify": {"cmd": "cargo test --quiet --test cli add_then_list", "timeout_s": 60},
//!                "passes": false}]}
//! ```
//!
//! - `spec_digest` is the harness's ([`spec_digest`] of the spec file's bytes, set by
//!   [`Contract::accept`]); the initializer may leave it out. `protected` defaults to none,
//!   `steps` to none, `verify.timeout_s` to [`DEFAULT_TIMEOUT_S`], `passes` to false. Unknown
//!   keys are errors.
//! - The **canonical form** ([`Contract::canonical`]) is the contract without `passes`, as
//!   compact JSON with its keys in lexicographic order; the **contract digest** is its sha256.
//!   Whitespace and key order never change either.
//! - **Frozen**: after a session, [`freeze_check`] compares the session's `features.json` with
//!   the base contract. Any difference outside `passes` is a [`Rejected`] edit (`{field,
//!   before, after}`, the field a JSON path like `features[2].verify.cmd`). Features are matched
//!   by `id`, so reordering them is not an edit, and paths use the index in the base contract;
//!   a feature the session added is named by its index in the edited file, with no `before`.
//!   Changed `passes` values are returned apart as the model's [`Claim`]s — never trusted: the
//!   harness decides `passes` ([`crate::auto::verdict`]) and writes the file back with
//!   [`restore`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anvil_grader::protect::ProtectedPaths;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The contract's file, at the root of the run branch's tree.
pub const FEATURES_FILE: &str = "features.json";
/// The contract version this harness reads and writes.
pub const VERSION: u32 = 1;
/// A verify command's time when the contract names none.
pub const DEFAULT_TIMEOUT_S: u64 = 60;
/// The longest a verify command may be given.
pub const MAX_TIMEOUT_S: u64 = 3600;
/// The longest feature id (ids go into commit trailers and messages).
pub const MAX_ID_LEN: usize = 64;
/// How much of an unreadable edited file a rejection keeps.
const KEPT_TEXT_CHARS: usize = 2000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    pub version: u32,
    #[serde(default)]
    pub spec_digest: String,
    pub test_command: String,
    #[serde(default)]
    pub protected: Vec<String>,
    pub features: Vec<Feature>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Feature {
    pub id: String,
    pub description: String,
    #[serde(default)]
    pub steps: Vec<String>,
    pub verify: Verify,
    #[serde(default)]
    pub passes: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Verify {
    /// Run by `/bin/sh -c` at the repository's root in a grading copy.
    pub cmd: String,
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
}

fn default_timeout() -> u64 {
    DEFAULT_TIMEOUT_S
}

/// One thing wrong with a contract that parsed, by its field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// A JSON path: `features[2].verify.cmd`.
    pub field: String,
    pub message: String,
}

/// A contract that cannot be used, naming the file and where in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    #[error("{}:{line}:{column}: not valid JSON: {message}", .file.display())]
    Syntax {
        file: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}:{line}:{column}: {}{message}", .file.display(), field_prefix(.field))]
    Shape {
        file: PathBuf,
        line: usize,
        column: usize,
        /// The JSON path of the value that does not fit (empty: the top level).
        field: String,
        message: String,
    },
    #[error("{}: {}", .file.display(), list(.problems))]
    Invalid {
        file: PathBuf,
        problems: Vec<Problem>,
    },
}

fn field_prefix(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!("{field}: ")
    }
}

fn list(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| format!("{}: {}", p.field, p.message))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `sha256:<hex>` of the spec file's bytes.
pub fn spec_digest(spec: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(spec)))
}

fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

impl Contract {
    /// Parses and checks `bytes`, read from `file` (named in every error).
    pub fn parse(file: &Path, bytes: &[u8]) -> Result<Self, ContractError> {
        let syntax = |e: &serde_json::Error| ContractError::Syntax {
            file: file.to_path_buf(),
            line: e.line(),
            column: e.column(),
            message: bare_message(e),
        };
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let contract: Contract = match serde_path_to_error::deserialize(&mut de) {
            Ok(c) => c,
            Err(e) => {
                let field = e.path().to_string();
                let inner = e.into_inner();
                return Err(match inner.classify() {
                    serde_json::error::Category::Data => ContractError::Shape {
                        file: file.to_path_buf(),
                        line: inner.line(),
                        column: inner.column(),
                        field: if field == "." { String::new() } else { field },
                        message: bare_message(&inner),
                    },
                    serde_json::error::Category::Syntax
                    | serde_json::error::Category::Eof
                    | serde_json::error::Category::Io => syntax(&inner),
                });
            }
        };
        // Nothing but whitespace may follow the contract.
        de.end().map_err(|e| syntax(&e))?;
        let problems = contract.problems();
        if problems.is_empty() {
            Ok(contract)
        } else {
            Err(ContractError::Invalid {
                file: file.to_path_buf(),
                problems,
            })
        }
    }

    /// Everything that makes a parsed contract unusable (empty: none).
    pub fn problems(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        let mut problem = |field: String, message: String| out.push(Problem { field, message });
        if self.version != VERSION {
            problem(
                "version".into(),
                format!("{} is not a version this anvil reads (1)", self.version),
            );
        }
        if !self.spec_digest.is_empty() && !is_digest(&self.spec_digest) {
            problem(
                "spec_digest".into(),
                "must be \"sha256:\" and 64 lowercase hex digits (the harness writes it)".into(),
            );
        }
        if self.test_command.trim().is_empty() {
            problem(
                "test_command".into(),
                "is empty: name the command that runs the project's tests".into(),
            );
        }
        if let Err(e) = ProtectedPaths::new(&self.protected) {
            problem(format!("protected[{}]", e.index), e.reason);
        }
        if self.features.is_empty() {
            problem(
                "features".into(),
                "lists no feature: a contract needs at least one".into(),
            );
        }
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, f) in self.features.iter().enumerate() {
            let at = |field: &str| format!("features[{i}].{field}");
            if f.id.is_empty()
                || f.id.len() > MAX_ID_LEN
                || !f
                    .id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            {
                problem(
                    at("id"),
                    format!(
                        "{:?}: an id is 1 to {MAX_ID_LEN} ASCII letters, digits, '-', '_' or '.'",
                        f.id
                    ),
                );
            } else if let Some(first) = seen.insert(&f.id, i) {
                problem(
                    at("id"),
                    format!("{:?} is the id of features[{first}] too", f.id),
                );
            }
            if f.description.trim().is_empty() {
                problem(at("description"), "is empty".into());
            }
            if f.verify.cmd.trim().is_empty() {
                problem(
                    at("verify.cmd"),
                    "is empty: every feature needs a command that checks it".into(),
                );
            }
            if !(1..=MAX_TIMEOUT_S).contains(&f.verify.timeout_s) {
                problem(
                    at("verify.timeout_s"),
                    format!(
                        "{} is outside 1..={MAX_TIMEOUT_S} seconds",
                        f.verify.timeout_s
                    ),
                );
            }
        }
        out
    }

    /// The contract as the harness accepts it: `spec_digest` of the spec's bytes (whatever
    /// the initializer wrote), every `passes` false.
    pub fn accept(mut self, spec: &[u8]) -> Self {
        self.spec_digest = spec_digest(spec);
        for f in &mut self.features {
            f.passes = false;
        }
        self
    }

    /// The scripts the verify commands name that make a check unsound: every path-like word
    /// of a command (one with a `/`, or ending `.sh`, `.py`, `.bash`, `.js`, `.rb`, `.pl`),
    /// read plainly (quotes stripped; words with `$`, backquotes, globs or redirections are
    /// left alone), that is
    /// - under the protected paths and missing from the tree (`exists`): no session may
    ///   write a protected file, so the check fails before the work for that reason alone
    ///   and can never pass;
    /// - a check script by its name (a `test`, `tests`, `check`, `checks`, `verify` or
    ///   `spec` directory on its path, or a name starting `test_`, `check_`, `verify_` or
    ///   ending `_test` before its extension) that exists but is not protected: any session
    ///   could rewrite the check it is judged by.
    ///
    /// (Any other path outside the protected paths is the program under check, the
    /// sessions' to write.) As `(id, why)`.
    pub fn script_problems(
        &self,
        protected: &ProtectedPaths,
        exists: impl Fn(&str) -> bool,
    ) -> Vec<(String, String)> {
        const SCRIPT: &[&str] = &[".sh", ".py", ".bash", ".js", ".rb", ".pl"];
        let mut out = Vec::new();
        for f in &self.features {
            for word in f.verify.cmd.split_whitespace() {
                let word = word.trim_matches(|c| c == '"' || c == '\'');
                if word.is_empty()
                    || word.starts_with('-')
                    || word.contains([
                        '$', '`', '*', '?', '<', '>', '|', '&', ';', '(', ')', '=', '\'',
                    ])
                    || word.starts_with('/')
                    || !(word.contains('/') || SCRIPT.iter().any(|e| word.ends_with(e)))
                {
                    continue;
                }
                let rel = word.trim_start_matches("./");
                if rel.is_empty() || rel.split('/').any(|c| c == "..") {
                    continue;
                }
                if protected.covers(rel) && !exists(rel) {
                    out.push((
                        f.id.clone(),
                        format!(
                            "it runs {word}, which is protected and does not exist: no session may write it (write it with the contract)"
                        ),
                    ));
                } else if !protected.covers(rel) && is_check_script(rel) && exists(rel) {
                    out.push((
                        f.id.clone(),
                        format!(
                            "it runs the check script {word}, which `protected` does not cover: any session could rewrite it (add it to `protected`)"
                        ),
                    ));
                }
            }
        }
        out
    }

    /// The protected paths (checked when the contract was parsed).
    pub fn protected_paths(&self) -> Result<ProtectedPaths, anvil_grader::protect::PatternError> {
        ProtectedPaths::new(&self.protected)
    }

    /// The canonical form as a JSON value: no `passes`, keys in lexicographic order.
    fn canonical_value(&self) -> Value {
        let features: Vec<Value> = self
            .features
            .iter()
            .map(|f| {
                json!({
                    "description": f.description,
                    "id": f.id,
                    "steps": f.steps,
                    "verify": {"cmd": f.verify.cmd, "timeout_s": f.verify.timeout_s},
                })
            })
            .collect();
        json!({
            "features": features,
            "protected": self.protected,
            "spec_digest": self.spec_digest,
            "test_command": self.test_command,
            "version": self.version,
        })
    }

    /// The canonical form (see the module docs): compact JSON, keys sorted, no `passes`.
    pub fn canonical(&self) -> String {
        self.canonical_value().to_string()
    }

    /// `sha256:<hex>` of the canonical form.
    pub fn digest(&self) -> String {
        format!(
            "sha256:{}",
            hex::encode(Sha256::digest(self.canonical().as_bytes()))
        )
    }

    /// The ids of the features whose `passes` is true.
    pub fn passing(&self) -> BTreeSet<String> {
        self.features
            .iter()
            .filter(|f| f.passes)
            .map(|f| f.id.clone())
            .collect()
    }
}

/// serde_json's message without its " at line L column C" (the error says where apart).
fn bare_message(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rsplit_once(" at line ") {
        Some((message, _)) if e.line() > 0 => message.to_string(),
        _ => text,
    }
}

/// A change to the frozen contract, reverted by the harness and logged as
/// `validator.rejected`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    /// A JSON path: `features[2].verify.cmd`; `$` for the whole file.
    pub field: String,
    /// The base contract's value; `None` where the session added something.
    pub before: Option<Value>,
    /// The session's value; `None` where the session removed something.
    pub after: Option<Value>,
}

/// A `passes` value the session changed: what the model claims, never trusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub id: String,
    pub passes: bool,
}

/// What [`freeze_check`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreezeCheck {
    pub rejected: Vec<Rejected>,
    pub claims: Vec<Claim>,
}

impl FreezeCheck {
    /// The ids the session claims pass.
    pub fn claimed(&self) -> BTreeSet<String> {
        self.claims
            .iter()
            .filter(|c| c.passes)
            .map(|c| c.id.clone())
            .collect()
    }
}

/// Compares the `features.json` a session left (`edited`, its bytes) with `base`, the
/// contract as the harness last wrote it (see the module docs).
pub fn freeze_check(base: &Contract, edited: &[u8]) -> FreezeCheck {
    let mut check = FreezeCheck::default();
    let accepted = base.canonical_value();
    let whole = |after: Value| Rejected {
        field: "$".into(),
        before: Some(accepted.clone()),
        after: Some(after),
    };
    let edited: Value = match serde_json::from_slice(edited) {
        Ok(v) => v,
        Err(_) => {
            let text: String = String::from_utf8_lossy(edited)
                .chars()
                .take(KEPT_TEXT_CHARS)
                .collect();
            check.rejected.push(whole(Value::String(text)));
            return check;
        }
    };
    let Value::Object(mut top) = edited else {
        check.rejected.push(whole(edited));
        return check;
    };
    let features = top.remove("features");
    for (key, default) in [("spec_digest", json!("")), ("protected", json!([]))] {
        top.entry(key).or_insert(default);
    }
    let Value::Object(mut accepted_top) = accepted.clone() else {
        return check;
    };
    let accepted_features = accepted_top.remove("features");
    diff(
        "",
        &Value::Object(accepted_top),
        &Value::Object(top),
        &mut check.rejected,
    );
    let accepted_features = match accepted_features {
        Some(Value::Array(a)) => a,
        _ => Vec::new(),
    };
    match features {
        None => check.rejected.push(Rejected {
            field: "features".into(),
            before: Some(Value::Array(accepted_features)),
            after: None,
        }),
        Some(Value::Array(edited_features)) => {
            compare_features(base, &accepted_features, edited_features, &mut check);
        }
        Some(other) => check.rejected.push(Rejected {
            field: "features".into(),
            before: Some(Value::Array(accepted_features)),
            after: Some(other),
        }),
    }
    check
}

/// Matches features by id, diffs each without `passes`, and collects the claims.
fn compare_features(
    base: &Contract,
    accepted: &[Value],
    edited: Vec<Value>,
    check: &mut FreezeCheck,
) {
    let mut edited: Vec<Option<Value>> = edited.into_iter().map(Some).collect();
    for (i, (feature, accepted_value)) in base.features.iter().zip(accepted).enumerate() {
        let field = format!("features[{i}]");
        let found = edited.iter().position(|e| {
            e.as_ref().and_then(|v| v.get("id")).and_then(Value::as_str)
                == Some(feature.id.as_str())
        });
        let Some(Value::Object(mut object)) = found.and_then(|j| edited[j].take()) else {
            check.rejected.push(Rejected {
                field,
                before: Some(accepted_value.clone()),
                after: None,
            });
            continue;
        };
        match object.remove("passes") {
            None => {}
            Some(Value::Bool(passes)) if passes == feature.passes => {}
            Some(Value::Bool(passes)) => check.claims.push(Claim {
                id: feature.id.clone(),
                passes,
            }),
            Some(other) => check.rejected.push(Rejected {
                field: format!("{field}.passes"),
                before: Some(Value::Bool(feature.passes)),
                after: Some(other),
            }),
        }
        object.entry("steps").or_insert(json!([]));
        if let Some(Value::Object(verify)) = object.get_mut("verify") {
            verify
                .entry("timeout_s")
                .or_insert(json!(DEFAULT_TIMEOUT_S));
        }
        diff(
            &field,
            accepted_value,
            &Value::Object(object),
            &mut check.rejected,
        );
    }
    for (j, added) in edited.into_iter().enumerate() {
        if let Some(added) = added {
            check.rejected.push(Rejected {
                field: format!("features[{j}]"),
                before: None,
                after: Some(added),
            });
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Every difference between `before` and `after`, by JSON path: objects key by key (in either
/// order), arrays of one length element by element, anything else whole.
fn diff(path: &str, before: &Value, after: &Value, out: &mut Vec<Rejected>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
            for key in keys {
                let field = join(path, key);
                match (b.get(key.as_str()), a.get(key.as_str())) {
                    (Some(bv), Some(av)) => diff(&field, bv, av, out),
                    (bv, av) => out.push(Rejected {
                        field,
                        before: bv.cloned(),
                        after: av.cloned(),
                    }),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) if b.len() == a.len() => {
            for (i, (bv, av)) in b.iter().zip(a).enumerate() {
                diff(&format!("{path}[{i}]"), bv, av, out);
            }
        }
        _ if before != after => out.push(Rejected {
            field: path.to_string(),
            before: Some(before.clone()),
            after: Some(after.clone()),
        }),
        _ => {}
    }
}

/// The `features.json` the harness writes back: the contract exactly as accepted, `passes`
/// true for the features in `verified` (the harness's decision) and false for every other;
/// pretty-printed in the contract's field order, with a final newline.
pub fn restore(
    accepted: &Contract,
    verified: &BTreeSet<String>,
) -> Result<String, serde_json::Error> {
    let mut file = accepted.clone();
    for f in &mut file.features {
        f.passes = verified.contains(&f.id);
    }
    let mut text = serde_json::to_string_pretty(&file)?;
    text.push('\n');
    Ok(text)
}

/// Whether `rel` is a check script by its name (see [`Contract::script_problems`]).
fn is_check_script(rel: &str) -> bool {
    const DIRS: &[&str] = &["test", "tests", "check", "checks", "verify", "spec"];
    let mut parts: Vec<&str> = rel.split('/').collect();
    let name = parts.pop().unwrap_or_default();
    let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
    parts.iter().any(|d| DIRS.contains(d))
        || ["test_", "check_", "verify_"]
            .iter()
            .any(|p| stem.starts_with(p))
        || stem.ends_with("_test")
}

#[cfg(test)]
mod tests;
