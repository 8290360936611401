//! A sweep: which tasks, which models, how many trials, recorded with the digests it was asked
//! with. Planning validates everything before anything is enqueued; starting records the sweep
//! (or resumes it, refusing a changed one) and enqueues every unfinished trial.

use std::path::PathBuf;

use anvil_grader::digest::{self, TaskDigests};
use anvil_grader::{Task, find_tasks};
use anvil_llm::registry::PinnedModel;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::jobs::queue::{self, Db, QueueError, SweepRow, SweepStart, TrialKey};
use crate::jobs::variant::{Variant, VariantError};
use anvil_report::adaptive::Design;

/// The anvil commit this binary was built from (`unknown` outside a git checkout; `-dirty`
/// when it had uncommitted changes).
pub const ANVIL_GIT_SHA: &str = env!("ANVIL_GIT_SHA");

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepTask {
    pub name: String,
    /// The task directory (absolute); workers on other machines need the same path.
    pub dir: PathBuf,
    pub digests: TaskDigests,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepSpec {
    pub tasks: Vec<SweepTask>,
    /// Model aliases from the config.
    pub models: Vec<String>,
    /// Each model of `models`, by that name, pinned: its configuration as resolved where the
    /// sweep was started (built-ins and user config, never a task's project config) and the
    /// digest of it. Every trial runs with exactly this configuration, checked against the
    /// digest first ([`SweepSpec::pinned`]); the digest is each record's
    /// `digests.model_config` and part of the [`fingerprint`](SweepSpec::fingerprint). Empty
    /// in sweeps started by an anvil that did not pin models: their trials end as
    /// infrastructure errors ([`PinnedError::NotPinned`]) and resuming them is refused.
    #[serde(default)]
    pub model_configs: std::collections::BTreeMap<String, SweepModel>,
    /// Harness variants (a sweep file's `[variants.NAME]`), resolved: every (task, model) runs
    /// with each. Empty: the trials run with no variant (the task's own settings).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<Variant>,
    pub trials: u32,
    /// Attempts per trial, infrastructure retries included.
    pub max_attempts: u32,
    /// The sweep's artifact directory, where every worker writes the trials' transcripts
    /// ([`crate::jobs::transcripts`]): decided where the sweep is started, the same path on
    /// every machine. Not part of the [`fingerprint`](SweepSpec::fingerprint): a resumed sweep
    /// keeps the one it was started with. `None` in sweeps started before there were
    /// transcripts (their workers use their own rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<PathBuf>,
    /// The sweep's hard budget in USD (`anvil-evals run --max-cost-usd`), held in the queue
    /// database across every worker ([`crate::jobs::queue::Admission`]). Not part of the
    /// [`fingerprint`](SweepSpec::fingerprint): a resumed sweep may be given another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Each trial's own hard budget in USD (a sweep file's `max_trial_cost_usd`); a task's
    /// lower `cost_cap_usd` wins. Not part of the [`fingerprint`](SweepSpec::fingerprint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_trial_cost_usd: Option<f64>,
    /// Adaptive trials (`--target-ci-width`, `--max-trials`): `trials` is the first round, and
    /// [`next_round`] adds rounds to the cells still too wide. Part of the fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<Design>,
}

/// A model of a sweep, pinned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepModel {
    pub config: PinnedModel,
    /// [`PinnedModel::digest`] of `config`.
    pub digest: String,
}

impl SweepModel {
    pub fn new(config: PinnedModel) -> Self {
        let digest = config.digest();
        Self { config, digest }
    }
}

/// Why a sweep cannot be planned, started or read back: one variant per condition, each with
/// the values that were wrong.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error(transparent)]
    Task(#[from] anvil_grader::TaskError),
    #[error("--trials must be at least 1")]
    NoTrials,
    #[error("--max-attempts must be at least 1")]
    NoAttempts,
    #[error("--models names no model")]
    NoModels,
    #[error("--models has an empty name")]
    EmptyModelName,
    #[error("--models names '{model}' twice")]
    DuplicateModel { model: String },
    #[error("no task matches '{pattern}'")]
    NoTaskMatches { pattern: String },
    #[error("no task of {patterns} has any of the tags {tags}")]
    NoTaskTagged { patterns: String, tags: String },
    #[error(transparent)]
    Variant(#[from] VariantError),
    #[error(transparent)]
    Design(#[from] anvil_report::adaptive::DesignError),
    #[error("adaptive trials need {0} too")]
    AdaptiveHalf(&'static str),
    #[error("variant {name} is named twice")]
    DuplicateVariant { name: String },
    #[error("{}: cannot digest the task: {source}", dir.display())]
    Digest {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot store the spec of sweep {sweep}: {source}")]
    StoreSpec {
        sweep: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "sweep {sweep}: its stored spec cannot be read ({source}); was it written by a newer anvil?"
    )]
    UnreadableSpec {
        sweep: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "sweep {sweep} already exists with different tasks or settings ({difference}); resume it \
         with the same tasks, models and trials, or start a new sweep with another --sweep id"
    )]
    Changed { sweep: String, difference: String },
    #[error("sweep {sweep} was cancelled; start a new sweep with another --sweep id")]
    Cancelled { sweep: String },
    #[error(
        "model {model} has no pricing, so {why} cannot be held; add pricing = {{ input = …, \
         output = … }} (USD per million tokens) to [models.{model}] in your config"
    )]
    Unpriced { model: String, why: String },
    #[error(
        "{what} is ${usd} a trial, less than one request of model {model} reserves \
         (${reserve:.6}: its {max_output} output tokens at most, at its output price): no trial \
         could ever run; raise it, or lower the model's max_output_tokens"
    )]
    ShareTooSmall {
        what: String,
        usd: f64,
        model: String,
        reserve: f64,
        max_output: u32,
    },
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// Why a model of a sweep cannot be run as pinned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PinnedError {
    #[error(
        "model {model} has no pinned config in this sweep (started by an older anvil?); \
         start a new sweep"
    )]
    NotPinned { model: String },
    #[error(
        "model {model}'s pinned config does not match its recorded digest ({digest} instead of {recorded})"
    )]
    DigestMismatch {
        model: String,
        digest: String,
        recorded: String,
    },
}

/// Refuses a per-trial budget (`what`, `usd`) that cannot admit even one request of some
/// model: the least a request reserves is its whole output limit at the output price.
fn check_share(what: &str, usd: f64, models: &[PinnedModel]) -> Result<(), SweepError> {
    for m in models {
        let Some(pricing) = m.pricing else { continue };
        let reserve = anvil_llm::cost::reservation(&pricing, 0, m.max_output_tokens).usd;
        if usd < reserve {
            return Err(SweepError::ShareTooSmall {
                what: what.to_string(),
                usd,
                model: m.name.clone(),
                reserve,
                max_output: m.max_output_tokens,
            });
        }
    }
    Ok(())
}

/// Which tasks a sweep runs: those matching any pattern and, when `tags` are given, having at
/// least one of them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskSelection {
    pub patterns: Vec<String>,
    pub tags: Vec<String>,
}

impl TaskSelection {
    /// The tasks of one pattern, with no tag filter.
    pub fn pattern(pattern: &str) -> Self {
        TaskSelection {
            patterns: vec![pattern.to_string()],
            tags: Vec::new(),
        }
    }

    /// The selected task directories, sorted, each once.
    fn dirs(&self) -> Result<Vec<(PathBuf, Task)>, SweepError> {
        let mut dirs = std::collections::BTreeSet::new();
        for pattern in &self.patterns {
            let found = find_tasks(pattern)?;
            if found.is_empty() {
                return Err(SweepError::NoTaskMatches {
                    pattern: pattern.clone(),
                });
            }
            dirs.extend(found);
        }
        let mut out = Vec::new();
        for dir in dirs {
            let task = Task::load(&dir)?;
            if self.tags.is_empty() || task.spec.tags.iter().any(|t| self.tags.contains(t)) {
                out.push((dir, task));
            }
        }
        if out.is_empty() {
            return Err(SweepError::NoTaskTagged {
                patterns: self.patterns.join(", "),
                tags: self.tags.join(", "),
            });
        }
        Ok(out)
    }
}

impl SweepSpec {
    /// Loads and validates the tasks `selection` names and digests them; `models` are the
    /// sweep's models, pinned, in the order given; `variants` its harness variants (none:
    /// the tasks' own settings), each checked.
    pub fn plan(
        selection: &TaskSelection,
        models: Vec<PinnedModel>,
        variants: Vec<Variant>,
        trials: u32,
        max_attempts: u32,
    ) -> Result<SweepSpec, SweepError> {
        let mut names = std::collections::BTreeSet::new();
        for variant in &variants {
            variant.check()?;
            if !names.insert(variant.name.clone()) {
                return Err(SweepError::DuplicateVariant {
                    name: variant.name.clone(),
                });
            }
        }
        let pinned = models;
        let models: Vec<String> = pinned.iter().map(|m| m.name.clone()).collect();
        if trials == 0 {
            return Err(SweepError::NoTrials);
        }
        if max_attempts == 0 {
            return Err(SweepError::NoAttempts);
        }
        let mut seen = std::collections::BTreeSet::new();
        for model in &models {
            if model.trim().is_empty() {
                return Err(SweepError::EmptyModelName);
            }
            if !seen.insert(model.clone()) {
                return Err(SweepError::DuplicateModel {
                    model: model.clone(),
                });
            }
        }
        if models.is_empty() {
            return Err(SweepError::NoModels);
        }
        let mut tasks = Vec::new();
        for (_, task) in selection.dirs()? {
            // A task's cost cap is a hard budget for each trial: every model needs pricing,
            // and room for at least one request.
            if let Some(cap) = task.spec.cost_cap_usd {
                if let Some(m) = pinned.iter().find(|m| m.pricing.is_none()) {
                    return Err(SweepError::Unpriced {
                        model: m.name.clone(),
                        why: format!("task {}'s cost_cap_usd = {cap}", task.spec.name),
                    });
                }
                check_share(
                    &format!("task {}'s cost_cap_usd", task.spec.name),
                    cap,
                    &pinned,
                )?;
            }
            let dir = std::fs::canonicalize(&task.dir).unwrap_or(task.dir.clone());
            let digests = digest::of_task(&task).map_err(|source| SweepError::Digest {
                dir: dir.clone(),
                source,
            })?;
            tasks.push(SweepTask {
                name: task.spec.name.clone(),
                dir,
                digests,
            });
        }
        tasks.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(SweepSpec {
            tasks,
            models,
            model_configs: pinned
                .into_iter()
                .map(|m| (m.name.clone(), SweepModel::new(m)))
                .collect(),
            variants,
            trials,
            max_attempts,
            artifacts: None,
            max_cost_usd: None,
            max_trial_cost_usd: None,
            adaptive: None,
        })
    }

    /// Runs the sweep adaptively: `trials` is the first round, and more rounds go to the
    /// (task, model, variant) cells whose 95% interval is wider than `target_ci_width`, up to
    /// `max_trials` each.
    pub fn with_adaptive(
        mut self,
        target_ci_width: Option<f64>,
        max_trials: Option<u32>,
    ) -> Result<SweepSpec, SweepError> {
        self.adaptive = match (target_ci_width, max_trials) {
            (None, None) => None,
            (Some(width), Some(max)) => Some(Design::new(self.trials, width, max)?),
            (Some(_), None) => return Err(SweepError::AdaptiveHalf("--max-trials")),
            (None, Some(_)) => return Err(SweepError::AdaptiveHalf("--target-ci-width")),
        };
        Ok(self)
    }

    /// Holds each trial to a hard budget of `usd` (every model needs pricing, and room for
    /// one request).
    pub fn with_trial_cap(mut self, usd: Option<f64>) -> Result<SweepSpec, SweepError> {
        if let Some(usd) = usd {
            let pinned: Vec<PinnedModel> = self
                .model_configs
                .values()
                .map(|m| m.config.clone())
                .collect();
            if let Some(m) = pinned.iter().find(|m| m.pricing.is_none()) {
                return Err(SweepError::Unpriced {
                    model: m.name.clone(),
                    why: format!("a ${usd} budget per trial (max_trial_cost_usd)"),
                });
            }
            check_share("max_trial_cost_usd", usd, &pinned)?;
        }
        self.max_trial_cost_usd = usd;
        Ok(self)
    }

    /// A trial's own cap: the task's `cost_cap_usd` and the sweep's `max_trial_cost_usd`,
    /// whichever is lower.
    pub fn trial_cap(&self, task_cap: Option<f64>) -> Option<f64> {
        lower_cap(task_cap, self.max_trial_cost_usd)
    }

    /// Holds the sweep to a hard budget of `usd` (every model needs pricing).
    pub fn with_budget(mut self, usd: Option<f64>) -> Result<SweepSpec, SweepError> {
        if let Some(usd) = usd {
            if let Some((name, _)) = self
                .model_configs
                .iter()
                .find(|(_, m)| m.config.pricing.is_none())
            {
                return Err(SweepError::Unpriced {
                    model: name.clone(),
                    why: format!("the sweep's ${usd} budget (--max-cost-usd)"),
                });
            }
            let trials = self.trial_count();
            let pinned: Vec<PinnedModel> = self
                .model_configs
                .values()
                .map(|m| m.config.clone())
                .collect();
            check_share(
                "--max-cost-usd shared over every trial",
                usd / trials.max(1) as f64,
                &pinned,
            )?;
        }
        self.max_cost_usd = usd;
        Ok(self)
    }

    /// What one trial reserves of the sweep's budget, and runs with as its own: the task's
    /// `cost_cap_usd`, or else an even share of the budget over every trial of the sweep.
    /// `None` without a sweep budget.
    pub fn trial_share(&self, task_cap: Option<f64>) -> Option<f64> {
        let max = self.max_cost_usd?;
        Some(
            self.trial_cap(task_cap)
                .unwrap_or(max / self.trial_count().max(1) as f64),
        )
    }

    /// Every trial of the sweep: tasks × models × variants (at least one) × trials.
    pub fn trial_count(&self) -> usize {
        self.tasks.len() * self.models.len() * self.variants.len().max(1) * self.trials as usize
    }

    /// The variant named `name`, when the sweep has it.
    pub fn variant(&self, name: &str) -> Option<&Variant> {
        self.variants.iter().find(|v| v.name == name)
    }

    /// What a resumed sweep must match: tasks with their digests, models and trials.
    pub fn fingerprint(&self) -> String {
        let mut identity = serde_json::json!({
            "tasks": self.tasks.iter().map(|t| (&t.name, &t.digests)).collect::<Vec<_>>(),
            "models": self.models,
            "model_configs": self.model_configs,
            "trials": self.trials,
        });
        // Only when there are variants: a sweep without them keeps the fingerprint it was
        // started with before there were variants, so it can still be resumed.
        if let Some(fields) = identity.as_object_mut() {
            if !self.variants.is_empty() {
                fields.insert("variants".into(), serde_json::json!(self.variants));
            }
            if let Some(design) = &self.adaptive {
                fields.insert("adaptive".into(), serde_json::json!(design));
            }
        }
        hex::encode(Sha256::digest(identity.to_string().as_bytes()))
    }

    /// Why `self` is not the sweep `stored` was started with, in words.
    pub fn difference(&self, stored: &SweepSpec) -> String {
        let mut out = Vec::new();
        for task in &self.tasks {
            match stored.tasks.iter().find(|t| t.name == task.name) {
                None => out.push(format!("task {} was not in it", task.name)),
                Some(old) if old.digests != task.digests => {
                    let mut parts = Vec::new();
                    if old.digests.task != task.digests.task {
                        parts.push("task.toml");
                    }
                    if old.digests.repo != task.digests.repo {
                        parts.push("repo/");
                    }
                    if old.digests.grader != task.digests.grader {
                        parts.push("grader/");
                    }
                    if old.digests.dependencies != task.digests.dependencies {
                        parts.push("dependencies");
                    }
                    out.push(format!("task {} changed ({})", task.name, parts.join(", ")));
                }
                Some(_) => {}
            }
        }
        for old in &stored.tasks {
            if !self.tasks.iter().any(|t| t.name == old.name) {
                out.push(format!("task {} is missing", old.name));
            }
        }
        if self.models != stored.models {
            out.push(format!(
                "models {} instead of {}",
                self.models.join(","),
                stored.models.join(",")
            ));
        }
        for (model, pinned) in &self.model_configs {
            match stored.model_configs.get(model) {
                None if stored.models.contains(model) => out.push(format!(
                    "model {model} was not pinned when the sweep was started (by an older anvil)"
                )),
                Some(old) if old != pinned => {
                    let changes = pinned.config.changes_from(&old.config);
                    out.push(if changes.is_empty() {
                        format!("model {model}'s config changed")
                    } else {
                        format!("model {model}'s config changed: {}", changes.join(", "))
                    });
                }
                _ => {}
            }
        }
        if self.variants != stored.variants {
            let names = |v: &[Variant]| {
                v.iter()
                    .map(|v| v.name.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            if names(&self.variants) == names(&stored.variants) {
                for (new, old) in self.variants.iter().zip(&stored.variants) {
                    let changed = new.changes_from(old);
                    if !changed.is_empty() {
                        out.push(format!(
                            "variant {}'s {} changed",
                            new.name,
                            changed.join(", ")
                        ));
                    }
                }
            } else {
                out.push(format!(
                    "variants {} instead of {}",
                    names(&self.variants),
                    names(&stored.variants)
                ));
            }
        }
        if self.adaptive != stored.adaptive {
            let show = |d: &Option<Design>| match d {
                Some(d) => format!(
                    "rounds of {} to width {} (at most {})",
                    d.round, d.target_ci_width, d.max_trials
                ),
                None => "not adaptive".to_string(),
            };
            out.push(format!(
                "adaptive design {} instead of {}",
                show(&self.adaptive),
                show(&stored.adaptive)
            ));
        }
        if self.trials != stored.trials {
            out.push(format!(
                "{} trials instead of {}",
                self.trials, stored.trials
            ));
        }
        out.join("; ")
    }

    /// Every (task, model, variant, trial) of the sweep.
    pub fn keys(&self, sweep: &str) -> Vec<TrialKey> {
        let variants: Vec<Option<String>> = if self.variants.is_empty() {
            vec![None]
        } else {
            self.variants.iter().map(|v| Some(v.name.clone())).collect()
        };
        let mut keys = Vec::new();
        for task in &self.tasks {
            for model in &self.models {
                for variant in &variants {
                    for trial in 0..self.trials {
                        keys.push(TrialKey {
                            sweep: sweep.to_string(),
                            task: task.name.clone(),
                            model: model.clone(),
                            variant: variant.clone(),
                            trial,
                        });
                    }
                }
            }
        }
        keys
    }

    pub fn task(&self, name: &str) -> Option<&SweepTask> {
        self.tasks.iter().find(|t| t.name == name)
    }

    /// The configuration `model` runs with in this sweep, checked against its digest.
    pub fn pinned(&self, model: &str) -> Result<&PinnedModel, PinnedError> {
        let pinned = self
            .model_configs
            .get(model)
            .ok_or_else(|| PinnedError::NotPinned {
                model: model.to_string(),
            })?;
        let digest = pinned.config.digest();
        if digest != pinned.digest {
            return Err(PinnedError::DigestMismatch {
                model: model.to_string(),
                digest,
                recorded: pinned.digest.clone(),
            });
        }
        Ok(&pinned.config)
    }

    /// Reads the spec stored with a sweep.
    pub fn from_row(row: &SweepRow) -> Result<SweepSpec, SweepError> {
        serde_json::from_str(&row.spec).map_err(|source| SweepError::UnreadableSpec {
            sweep: row.id.clone(),
            source,
        })
    }
}

/// One adaptive round: which cells get more trials.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Round {
    /// The trials added.
    pub keys: Vec<TrialKey>,
    /// Cells that got them.
    pub cells: usize,
}

/// Adds the next round of an adaptive sweep whose trials have all finished: `design.round`
/// more trials (at most up to `max_trials`) for each cell whose rule says go on, enqueued.
/// An empty round means the sweep is done.
pub async fn next_round(db: &Db, id: &str, spec: &SweepSpec) -> Result<Round, SweepError> {
    let Some(design) = spec.adaptive else {
        return Ok(Round::default());
    };
    let mut round = Round::default();
    for cell in db.cells(id).await? {
        let Some(trials) = goes_on(&design, &cell) else {
            continue;
        };
        round.cells += 1;
        let variant = Some(cell.variant).filter(|v| !v.is_empty());
        for trial in trials..trials + design.next_round(trials) {
            round.keys.push(TrialKey {
                sweep: id.to_string(),
                task: cell.task.clone(),
                model: cell.model.clone(),
                variant: variant.clone(),
                trial,
            });
        }
    }
    if !round.keys.is_empty() {
        db.add_trials(&round.keys).await?;
        queue::enqueue(db, &round.keys, spec.max_attempts).await?;
    }
    Ok(round)
}

/// Whether `cell` gets another round under `design`: its trial count when it does.
fn goes_on(design: &Design, cell: &queue::Cell) -> Option<u32> {
    let (trials, graded, passed) = (
        u32::try_from(cell.trials).unwrap_or(0),
        u32::try_from(cell.graded).unwrap_or(0),
        u32::try_from(cell.passed).unwrap_or(0),
    );
    (trials < design.max_trials && design.goes_on(passed, graded)).then_some(trials)
}

/// How many trials the next round of the adaptive sweep `row` would add, when nobody has
/// enqueued it (its `run` was stopped between rounds): 0 for a sweep that is not adaptive or
/// is done.
/// Such a sweep is not finished — `anvil-evals run --sweep ID` resumes its rounds — and its
/// estimates would not be the unbiased ones.
pub async fn pending_rounds(db: &Db, row: &SweepRow) -> Result<usize, SweepError> {
    let Some(design) = SweepSpec::from_row(row)?.adaptive else {
        return Ok(0);
    };
    Ok(db
        .cells(&row.id)
        .await?
        .iter()
        .filter_map(|c| goes_on(&design, c))
        .map(|trials| design.next_round(trials) as usize)
        .sum())
}

/// The lower of two optional caps (either alone when the other is `None`).
pub fn lower_cap(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What [`start`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub resumed: bool,
    pub trials: usize,
    /// Trials still to run (all of them for a new sweep).
    pub unfinished: usize,
}

/// Records the sweep (or resumes it) and enqueues its unfinished trials.
pub async fn start(db: &Db, id: &str, spec: &SweepSpec) -> Result<Started, SweepError> {
    let row = SweepRow {
        id: id.to_string(),
        created_at_ms: queue::now_ms(),
        spec: serde_json::to_string(spec).map_err(|source| SweepError::StoreSpec {
            sweep: id.to_string(),
            source,
        })?,
        fingerprint: spec.fingerprint(),
        anvil_git_sha: ANVIL_GIT_SHA.to_string(),
        cancelled: false,
    };
    let resumed = match db.record_sweep(&row).await? {
        SweepStart::Created => false,
        SweepStart::Resumed => true,
        SweepStart::Conflict(stored) => {
            let difference = SweepSpec::from_row(&stored)
                .map(|old| spec.difference(&old))
                .unwrap_or_else(|e| e.to_string());
            return Err(SweepError::Changed {
                sweep: id.to_string(),
                difference,
            });
        }
    };
    if resumed && db.is_cancelled(id).await? {
        return Err(SweepError::Cancelled {
            sweep: id.to_string(),
        });
    }
    let keys = spec.keys(id);
    db.add_trials(&keys).await?;
    let unfinished = db.unfinished_trials(id).await?;
    queue::enqueue(db, &unfinished, spec.max_attempts).await?;
    Ok(Started {
        resumed,
        trials: keys.len(),
        unfinished: unfinished.len(),
    })
}

/// A new sweep id: `sweep-YYYYMMDD-HHMMSS-xxxx` (UTC).
pub fn new_sweep_id() -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    sweep_id_at(jiff::Timestamp::now(), &suffix[..4])
}

/// The sweep id for time `at` and a random `suffix`. The format is stable: ids already in
/// queue databases and in users' scripts look like this.
fn sweep_id_at(at: jiff::Timestamp, suffix: &str) -> String {
    format!("sweep-{}-{suffix}", at.strftime("%Y%m%d-%H%M%S"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil() {
        let at = |days: i64, secs: i64| {
            sweep_id_at(
                jiff::Timestamp::from_second(days * 86_400 + secs).unwrap(),
                "ab12",
            )
        };
        assert_eq!(at(0, 0), "sweep-19700101-000000-ab12");
        assert_eq!(at(20_787, 43_200), "sweep-20261130-120000-ab12");
        assert_eq!(at(11_016, 86_399), "sweep-20000229-235959-ab12");
    }

    #[test]
    fn sweep_ids_read_as_dates() {
        let id = new_sweep_id();
        assert!(id.starts_with("sweep-20"), "{id}");
        assert_eq!(id.len(), "sweep-20261130-120000-abcd".len(), "{id}");
    }

    fn pinned(base_url: &str) -> PinnedModel {
        let mut m =
            anvil_llm::registry::Registry::with_env(anvil_llm::config::Config::built_in(), |_| {
                None
            })
            .pin("haiku")
            .unwrap();
        m.name = "m".into();
        m.provider.base_url = base_url.into();
        m
    }

    fn spec(grader: &str) -> SweepSpec {
        SweepSpec {
            tasks: vec![SweepTask {
                name: "t".into(),
                dir: "/t".into(),
                digests: TaskDigests {
                    task: "a".into(),
                    repo: "b".into(),
                    grader: grader.into(),
                    dependencies: "d".into(),
                },
            }],
            models: vec!["m".into()],
            model_configs: [(
                "m".to_string(),
                SweepModel::new(pinned("https://a.example")),
            )]
            .into(),
            variants: Vec::new(),
            trials: 3,
            max_attempts: 3,
            artifacts: None,
            max_cost_usd: None,
            max_trial_cost_usd: None,
            adaptive: None,
        }
    }

    #[test]
    fn a_changed_grader_changes_the_fingerprint_and_says_so() {
        let (old, new) = (spec("g1"), spec("g2"));
        assert_ne!(old.fingerprint(), new.fingerprint());
        assert_eq!(new.difference(&old), "task t changed (grader/)");
        let mut more = spec("g1");
        more.max_attempts = 5;
        assert_eq!(
            old.fingerprint(),
            more.fingerprint(),
            "retry limits may change"
        );
        more.artifacts = Some("/elsewhere/sweeps/s".into());
        assert_eq!(
            old.fingerprint(),
            more.fingerprint(),
            "a resumed sweep keeps its artifact directory, wherever it is resumed from"
        );
    }

    #[test]
    fn a_changed_model_config_is_named() {
        let old = spec("g");
        let mut new = spec("g");
        new.model_configs
            .insert("m".into(), SweepModel::new(pinned("https://b.example")));
        assert_ne!(old.fingerprint(), new.fingerprint());
        assert_eq!(
            new.difference(&old),
            "model m's config changed: provider.base_url \"https://a.example\" → \"https://b.example\""
        );
        let mut unpinned = spec("g");
        unpinned.model_configs.clear();
        assert_eq!(
            new.difference(&unpinned),
            "model m was not pinned when the sweep was started (by an older anvil)"
        );
    }

    #[test]
    fn a_pinned_model_is_checked_against_its_digest() {
        let mut s = spec("g");
        assert_eq!(
            s.pinned("m").unwrap().provider.base_url,
            "https://a.example"
        );
        assert!(
            s.pinned("n")
                .unwrap_err()
                .to_string()
                .contains("model n has no pinned config")
        );
        if let Some(m) = s.model_configs.get_mut("m") {
            m.config.max_output_tokens = 1;
        }
        let err = s.pinned("m").unwrap_err();
        assert!(
            matches!(&err, PinnedError::DigestMismatch { model, .. } if model == "m"),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains("does not match its recorded digest"),
            "{err}"
        );
    }

    #[test]
    fn the_stored_spec_is_stable() {
        let mut s = spec("g");
        s.tasks[0].dir = "/tasks/t".into();
        s.artifacts = Some("/data/anvil/sweeps/s".into());
        insta::assert_json_snapshot!("sweep_spec", s);
    }

    #[test]
    fn keys_cover_every_task_model_and_trial() {
        let mut s = spec("g");
        s.models.push("n".into());
        let keys = s.keys("sw");
        assert_eq!(keys.len(), 6);
        assert_eq!(keys[5].to_string(), "sw/t/n#2");
        assert_eq!(s.trial_count(), 6);
    }

    fn variant(name: &str) -> Variant {
        Variant {
            name: name.into(),
            system_prompt_append: Some("Run the tests.".into()),
            tools: None,
            permission_mode: None,
            max_steps: None,
            args: Vec::new(),
        }
    }

    #[test]
    fn variants_are_a_dimension_of_the_keys_and_of_the_fingerprint() {
        let plain = spec("g");
        let mut s = spec("g");
        s.variants = vec![variant("control"), variant("tests")];
        let keys = s.keys("sw");
        assert_eq!(keys.len(), 6);
        assert_eq!(s.trial_count(), 6);
        assert_eq!(keys[0].to_string(), "sw/t/m/control#0");
        assert_eq!(keys[5].to_string(), "sw/t/m/tests#2");
        assert_ne!(plain.fingerprint(), s.fingerprint());
        let mut changed = s.clone();
        changed.variants[1].system_prompt_append = Some("Other.".into());
        assert_ne!(s.fingerprint(), changed.fingerprint());
        assert_eq!(
            changed.difference(&s),
            "variant tests's system_prompt_append changed"
        );
        assert_eq!(plain.difference(&s), "variants  instead of control,tests");
    }

    #[test]
    fn a_sweep_without_variants_keeps_its_old_fingerprint() {
        // The fingerprint a sweep started before variants existed was stored with: resuming it
        // must still match.
        assert_eq!(
            spec("g").fingerprint(),
            "98712d142824d15282660d5e49491290033dd9bd95ed62744c990f55323945a5"
        );
    }
}
