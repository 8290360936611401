//! Sweep files: a sweep's settings in TOML (`anvil-evals run --file evals/sweeps/nightly.toml`),
//! so a nightly job is one short command and its settings live in the repository. Flags given
//! on the command line override the file's.
//!
//! ```toml
//! sweep = "nightly-{date}"        # the sweep id: {date} YYYYMMDD, {time} HHMMSS (UTC), {rand}
//! tasks = ["../tasks/*"]          # patterns, relative to this file's directory
//! tags = ["python"]               # only tasks with at least one of these tags (optional)
//! models = ["sonnet", "local"]    # aliases from the user config
//! trials = 3                      # per (task, model, variant)
//! concurrency = 2                 # trials at once in `run`'s own workers
//! max_attempts = 3                # per trial, infrastructure retries included
//! k = [1, 3]                      # the report's pass@k / pass^k
//! max_cost_usd = 20.0             # the whole sweep's hard budget
//! max_trial_cost_usd = 0.5        # each trial's own budget (a task's cost_cap_usd wins if lower)
//! trial_timeout_secs = 1800       # a trial past this is an infrastructure failure
//! baseline = "last:nightly-*"     # a results file (relative to this file), a sweep id or last:GLOB
//! target_ci_width = 0.4           # adaptive trials: more rounds while a task's interval is
//! max_trials = 15                 #   wider than this, up to this many trials (both or neither)
//!
//! [variants.control]              # the harness as a sweep dimension (see `variant`)
//!
//! [variants.run-tests]
//! system_prompt_append = "Run the tests before you finish."   # or system_prompt_file = "…"
//! tools = ["read_file", "edit_file", "bash"]
//! permission_mode = "bypass"
//! max_steps = 30
//! args = []                       # further anvil flags
//! ```
//!
//! An unknown key is an error naming the file and line; so is every value that could not be
//! used (a variant with an unknown flag names its `[variants.NAME]` line).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anvil_agent::permissions::PermissionMode;
use serde::Deserialize;

use crate::jobs::variant::Variant;

/// A sweep file that cannot be used: the file, the line when known, and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {reason}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct SweepFileError {
    pub path: PathBuf,
    pub line: Option<usize>,
    pub reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepToml {
    sweep: Option<String>,
    tasks: Option<Vec<String>>,
    #[serde(default)]
    tags: Vec<String>,
    models: Option<Vec<String>>,
    trials: Option<u32>,
    concurrency: Option<u32>,
    max_attempts: Option<u32>,
    k: Option<Vec<u32>>,
    max_cost_usd: Option<f64>,
    max_trial_cost_usd: Option<f64>,
    trial_timeout_secs: Option<f64>,
    baseline: Option<String>,
    target_ci_width: Option<f64>,
    max_trials: Option<u32>,
    #[serde(default)]
    variants: BTreeMap<String, VariantToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantToml {
    system_prompt_append: Option<String>,
    system_prompt_file: Option<PathBuf>,
    tools: Option<Vec<String>>,
    permission_mode: Option<PermissionMode>,
    max_steps: Option<u32>,
    #[serde(default)]
    args: Vec<String>,
}

/// A sweep file, read and checked. Paths in it are resolved against its directory.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SweepFile {
    pub path: PathBuf,
    /// The sweep id template (see [`sweep_id`]).
    pub sweep: Option<String>,
    /// Task patterns, relative ones joined to the file's directory.
    pub tasks: Vec<String>,
    pub tags: Vec<String>,
    pub models: Vec<String>,
    pub trials: Option<u32>,
    pub concurrency: Option<u32>,
    pub max_attempts: Option<u32>,
    pub k: Option<Vec<u32>>,
    pub max_cost_usd: Option<f64>,
    pub max_trial_cost_usd: Option<f64>,
    pub trial_timeout_secs: Option<f64>,
    pub baseline: Option<String>,
    /// Adaptive trials (see `anvil-evals run --target-ci-width`).
    pub target_ci_width: Option<f64>,
    pub max_trials: Option<u32>,
    /// Resolved (a `system_prompt_file` read) and checked, by name.
    pub variants: Vec<Variant>,
}

impl SweepFile {
    /// Reads and checks the sweep file at `path`.
    pub fn load(path: &Path) -> Result<SweepFile, SweepFileError> {
        let text = std::fs::read_to_string(path).map_err(|e| SweepFileError {
            path: path.to_path_buf(),
            line: None,
            reason: format!("cannot read: {e}"),
        })?;
        Self::parse(&text, path)
    }

    /// Checks `text` as the sweep file at `path` (relative paths in it are resolved against
    /// `path`'s directory; a `system_prompt_file` is read).
    pub fn parse(text: &str, path: &Path) -> Result<SweepFile, SweepFileError> {
        let err = |line: Option<usize>, reason: String| SweepFileError {
            path: path.to_path_buf(),
            line,
            reason,
        };
        let raw: SweepToml = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            err(line, e.message().trim_end().to_string())
        })?;
        // A key's line, for errors about its value.
        let at = |key: &str| key_line(text, key);
        let dir = path.parent().unwrap_or(Path::new("."));
        let positive = |value: Option<f64>, key: &str| match value {
            Some(v) if !(v.is_finite() && v > 0.0) => Err(err(
                at(key),
                format!("{key} must be a positive number (got {v})"),
            )),
            _ => Ok(value),
        };
        let at_least_one = |value: Option<u32>, key: &str| match value {
            Some(0) => Err(err(at(key), format!("{key} must be at least 1"))),
            _ => Ok(value),
        };
        if let Some(template) = &raw.sweep {
            check_template(template).map_err(|reason| err(at("sweep"), reason))?;
        }
        if let Some(tasks) = &raw.tasks
            && tasks.is_empty()
        {
            return Err(err(at("tasks"), "tasks names no pattern".into()));
        }
        if let Some(models) = &raw.models {
            if models.is_empty() {
                return Err(err(at("models"), "models names no model".into()));
            }
            if let Some(m) = models
                .iter()
                .find(|m| m.trim() != m.as_str() || m.is_empty())
            {
                return Err(err(
                    at("models"),
                    format!("model name '{m}' is empty or has spaces around it"),
                ));
            }
        }
        if let Some(k) = &raw.k
            && (k.is_empty() || k.contains(&0))
        {
            return Err(err(at("k"), "k must list values of at least 1".into()));
        }
        let mut variants = Vec::new();
        for (name, v) in raw.variants {
            let header = key_line(text, &format!("[variants.{name}]"))
                .or_else(|| key_line(text, &format!("[variants.\"{name}\"]")));
            let verr = |reason: String| err(header, format!("[variants.{name}]: {reason}"));
            let system_prompt_append =
                match (v.system_prompt_append, v.system_prompt_file) {
                    (Some(_), Some(_)) => {
                        return Err(verr(
                            "give system_prompt_append or system_prompt_file, not both".into(),
                        ));
                    }
                    (Some(text), None) => Some(text),
                    (None, Some(file)) => {
                        let file = dir.join(file);
                        Some(std::fs::read_to_string(&file).map_err(|e| {
                            verr(format!("system_prompt_file {}: {e}", file.display()))
                        })?)
                    }
                    (None, None) => None,
                };
            let variant = Variant {
                name: name.clone(),
                system_prompt_append,
                tools: v.tools,
                permission_mode: v.permission_mode,
                max_steps: v.max_steps,
                args: v.args,
            };
            // The variant's own message names it already.
            variant.check().map_err(|e| err(header, e.to_string()))?;
            variants.push(variant);
        }
        Ok(SweepFile {
            path: path.to_path_buf(),
            sweep: raw.sweep,
            tasks: raw
                .tasks
                .unwrap_or_default()
                .into_iter()
                .map(|p| resolve(dir, &p))
                .collect(),
            tags: raw.tags,
            models: raw.models.unwrap_or_default(),
            trials: at_least_one(raw.trials, "trials")?,
            concurrency: at_least_one(raw.concurrency, "concurrency")?,
            max_attempts: at_least_one(raw.max_attempts, "max_attempts")?,
            k: raw.k,
            max_cost_usd: positive(raw.max_cost_usd, "max_cost_usd")?,
            max_trial_cost_usd: positive(raw.max_trial_cost_usd, "max_trial_cost_usd")?,
            trial_timeout_secs: positive(raw.trial_timeout_secs, "trial_timeout_secs")?,
            // A results file beside the sweep file is found there, like its other paths; a
            // sweep id or `last:PATTERN` stays as written.
            baseline: raw.baseline.map(|b| {
                let beside = dir.join(&b);
                if !b.starts_with("last:") && !dir.as_os_str().is_empty() && beside.is_file() {
                    beside.display().to_string()
                } else {
                    b
                }
            }),
            target_ci_width: positive(raw.target_ci_width, "target_ci_width")?,
            max_trials: at_least_one(raw.max_trials, "max_trials")?,
            variants,
        })
    }
}

/// `pattern` relative to `dir` unless absolute.
fn resolve(dir: &Path, pattern: &str) -> String {
    if Path::new(pattern).is_absolute() || dir.as_os_str().is_empty() {
        pattern.to_string()
    } else {
        dir.join(pattern).display().to_string()
    }
}

/// The 1-based line of byte offset `at` in `text`.
pub fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The line where `key` (a top-level `key =` or a `[table]` header) is written, if it is.
fn key_line(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|line| {
            let line = line.trim_start();
            if key.starts_with('[') {
                line.starts_with(key)
            } else {
                line.strip_prefix(key)
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            }
        })
        .map(|i| i + 1)
}

/// The placeholders an id template may use.
const PLACEHOLDERS: [&str; 3] = ["{date}", "{time}", "{rand}"];

/// Whether `template` makes valid sweep ids: letters, digits, `.`, `_` and `-` besides the
/// placeholders.
fn check_template(template: &str) -> Result<(), String> {
    let mut rest = template.to_string();
    for p in PLACEHOLDERS {
        rest = rest.replace(p, "");
    }
    if template.is_empty() || template.len() > 128 {
        return Err("sweep must be 1 to 128 characters".into());
    }
    if let Some(c) = rest
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "sweep '{template}': '{c}' is not allowed in a sweep id (letters, digits, '.', '_', \
             '-' and the placeholders {})",
            PLACEHOLDERS.join(", ")
        ));
    }
    Ok(())
}

/// The sweep id `template` makes now.
pub fn sweep_id_now(template: &str) -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    sweep_id(template, jiff::Timestamp::now(), &suffix[..4])
}

/// The sweep id `template` makes at time `at` with random `suffix`: `{date}` is YYYYMMDD,
/// `{time}` HHMMSS (UTC), `{rand}` the suffix. `nightly-{date}` is one sweep a day: running the
/// nightly job again the same day resumes it.
pub fn sweep_id(template: &str, at: jiff::Timestamp, suffix: &str) -> String {
    template
        .replace("{date}", &at.strftime("%Y%m%d").to_string())
        .replace("{time}", &at.strftime("%H%M%S").to_string())
        .replace("{rand}", suffix)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NIGHTLY: &str = r#"
sweep = "nightly-{date}"
tasks = ["../tasks/py-*", "/abs/tasks/*"]
tags = ["python"]
models = ["sonnet", "local"]
trials = 3
concurrency = 2
k = [1, 3]
max_cost_usd = 20.0
baseline = "last:nightly-*"

[variants.control]

[variants.run-tests]
system_prompt_append = "Run the tests before you finish."
tools = ["read_file", "edit_file", "bash"]
permission_mode = "bypass"
max_steps = 30
"#;

    #[test]
    fn a_sweep_file_reads_with_paths_resolved() {
        let f = SweepFile::parse(NIGHTLY, Path::new("evals/sweeps/nightly.toml")).unwrap();
        assert_eq!(f.tasks, ["evals/sweeps/../tasks/py-*", "/abs/tasks/*"]);
        assert_eq!(f.models, ["sonnet", "local"]);
        assert_eq!(f.trials, Some(3));
        assert_eq!(f.k, Some(vec![1, 3]));
        assert_eq!(f.baseline.as_deref(), Some("last:nightly-*"));
        let names: Vec<&str> = f.variants.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["control", "run-tests"]);
        assert_eq!(f.variants[1].max_steps, Some(30));
        assert_eq!(f.variants[1].permission_mode, Some(PermissionMode::Bypass));
        assert_eq!(f.variants[0].extra_args(), Vec::<String>::new());
    }

    fn error(text: &str) -> String {
        SweepFile::parse(text, Path::new("s.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_typo_is_refused_with_file_and_line() {
        let e = error("models = [\"a\"]\ntrails = 3\n");
        assert!(e.starts_with("s.toml:2: unknown field `trails`"), "{e}");
        let e = error("models = [\"a\"]\n\n[variants.x]\nmax_step = 3\n");
        assert!(e.starts_with("s.toml:4: unknown field `max_step`"), "{e}");
        let e = error("trials = \"three\"\n");
        assert!(e.starts_with("s.toml:1:"), "{e}");
    }

    #[test]
    fn bad_values_name_their_line() {
        let e = error("models = [\"a\"]\ntrials = 0\n");
        assert_eq!(e, "s.toml:2: trials must be at least 1");
        let e = error("sweep = \"nightly {date}\"\n");
        assert!(
            e.starts_with("s.toml:1: sweep 'nightly {date}': ' ' is not allowed"),
            "{e}"
        );
        let e = error("max_cost_usd = -1.0\n");
        assert_eq!(
            e,
            "s.toml:1: max_cost_usd must be a positive number (got -1)"
        );
        let e = error("models = [\" a\"]\n");
        assert!(e.contains("has spaces around it"), "{e}");
    }

    #[test]
    fn a_variant_with_an_unknown_flag_names_its_table() {
        let e = error("models = [\"a\"]\n\n[variants.fast]\nargs = [\"--turbo\"]\n");
        assert!(e.starts_with("s.toml:3: variant fast: args:"), "{e}");
        assert!(e.contains("--turbo"), "{e}");
        let e = error("[variants.x]\nsystem_prompt_append = \"a\"\nsystem_prompt_file = \"b\"\n");
        assert!(e.contains("not both"), "{e}");
        let e = error("[variants.x]\nsystem_prompt_file = \"missing.md\"\n");
        assert!(
            e.starts_with("s.toml:1: [variants.x]: system_prompt_file missing.md:"),
            "{e}"
        );
    }

    #[test]
    fn the_shipped_sweep_files_read() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../evals/sweeps");
        for name in [
            "nightly.toml",
            "smoke.toml",
            "experiments/run-tests-hint.toml",
        ] {
            let f = SweepFile::load(&dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
            assert!(!f.tasks.is_empty() && !f.models.is_empty(), "{name}");
        }
    }

    #[test]
    fn ids_are_made_from_the_template() {
        let at = jiff::Timestamp::from_second(20_787 * 86_400 + 43_200).unwrap();
        assert_eq!(sweep_id("nightly-{date}", at, "ab12"), "nightly-20261130");
        assert_eq!(
            sweep_id("ab-{date}-{time}-{rand}", at, "ab12"),
            "ab-20261130-120000-ab12"
        );
    }
}
