//! All trials of one or more results files, each reduced to what a report needs, with names
//! interned.
//!
//! One trial is one (sweep, task, model, variant, trial) key. A key seen more than once with different
//! attempts keeps its highest attempt (an infrastructure retry supersedes the earlier try) and
//! the notes say so; the same key twice with the *same* attempt is refused, naming both lines: a
//! results file holds one record per attempt, so it was most likely concatenated twice, and
//! counting either copy would be a guess.

use std::collections::HashMap;

use crate::record::{RecordError, TamperFinding};

/// Superseded attempts named one by one in the notes (the count is always complete).
pub const MAX_LISTED_SUPERSEDED: usize = 20;

/// Which trial a row is: interned sweep, task, model and variant names (variant `""`: none),
/// and the trial's number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct TrialKey {
    pub(crate) sweep: u32,
    pub(crate) task: u32,
    pub(crate) model: u32,
    pub(crate) variant: u32,
    pub(crate) trial: u32,
}

/// One trial, reduced to what the report needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    pub(crate) key: TrialKey,
    pub(crate) attempt: u32,
    /// `None`: an infrastructure failure. A tampered trial is `Some(false)`.
    pub(crate) pass: Option<bool>,
    pub(crate) tampered: bool,
    /// Not admitted by the sweep's budget: never run, counted apart.
    pub(crate) not_admitted: bool,
    pub(crate) steps: u32,
    pub(crate) cost: Option<f64>,
    pub(crate) duration_ms: u64,
    /// The line of the results file it came from (1-based).
    pub(crate) line: usize,
    /// Index into `Trials::details` (infrastructure failures and tampered trials).
    pub(crate) detail: Option<u32>,
    /// Index into `Trials::sessions`: the trial's transcript, when its record names one.
    pub(crate) session: Option<u32>,
    /// Index into `Trials::digests`: the task digests it ran on, when its record has them.
    pub(crate) digest: Option<u32>,
    /// Index into `Trials::model_configs`: its pinned model configuration's digest, when
    /// its record has one.
    pub(crate) model_config: Option<u32>,
}

/// What a report lists about a trial beyond its counts.
#[derive(Debug, Clone)]
pub(crate) enum Detail {
    Infra(String),
    Tampered(Vec<TamperFinding>),
}

/// Names and their ids, in the order first seen. The last name looked up is checked first:
/// consecutive records usually share task and model, and this spares hashing them.
#[derive(Debug, Default)]
pub(crate) struct Names {
    pub(crate) names: Vec<String>,
    ids: HashMap<String, u32>,
    last: Option<u32>,
}

impl Names {
    pub(crate) fn id(&mut self, name: &str) -> u32 {
        if let Some(last) = self.last
            && self.names[last as usize] == name
        {
            return last;
        }
        let id = match self.ids.get(name) {
            Some(&id) => id,
            None => {
                let id = self.names.len() as u32;
                self.names.push(name.to_string());
                self.ids.insert(name.to_string(), id);
                id
            }
        };
        self.last = Some(id);
        id
    }

    pub(crate) fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }
}

/// All trials of one or more results files.
#[derive(Debug, Default)]
pub struct Trials {
    pub(crate) source_name: String,
    pub(crate) sweeps: Names,
    pub(crate) tasks: Names,
    pub(crate) models: Names,
    /// Variant names; `""` (always id 0 once anything is read) is no variant.
    pub(crate) variants: Names,
    /// Task digests, each as `task:repo:grader:dependencies`.
    pub(crate) digests: Names,
    /// Model configuration digests.
    pub(crate) model_configs: Names,
    /// The anvil builds (`anvil_git_sha`) the records name.
    pub(crate) anvil_shas: Names,
    /// The adaptive design every record carries, when they all carry the same one
    /// ([`crate::adaptive`]); `None` otherwise (a mix is said in the notes).
    pub(crate) design: Option<crate::adaptive::Design>,
    pub(crate) rows: Vec<Row>,
    pub(crate) details: Vec<Detail>,
    /// Transcript paths, as the records name them (relative ones resolved against the
    /// results file's directory by [`Trials::read_file`]).
    pub(crate) sessions: Vec<String>,
    notes: Vec<String>,
}

impl Trials {
    /// No trials yet, to be read from `source_name`.
    pub(crate) fn new(source_name: &str) -> Trials {
        Trials {
            source_name: source_name.to_string(),
            ..Trials::default()
        }
    }

    /// `sweep/task/model#trial` (`sweep/task/model/variant#trial` with a variant), as the
    /// queue names a trial.
    fn key_name(&self, key: TrialKey) -> String {
        let variant = self.variant(key.variant);
        format!(
            "{}/{}/{}{}{}#{}",
            self.sweeps.name(key.sweep),
            self.tasks.name(key.task),
            self.models.name(key.model),
            if variant.is_some() { "/" } else { "" },
            variant.unwrap_or(""),
            key.trial
        )
    }

    /// The variant of id `id`, `None` for no variant.
    pub(crate) fn variant(&self, id: u32) -> Option<&str> {
        Some(self.variants.name(id)).filter(|v| !v.is_empty())
    }

    /// One row per trial: the highest attempt, with a note naming what it superseded. The same
    /// key twice with the same attempt is an error naming both lines.
    pub(crate) fn dedupe(&mut self) -> Result<(), RecordError> {
        self.rows
            .sort_unstable_by_key(|r| (r.key, r.attempt, r.line));
        let mut keep = Vec::with_capacity(self.rows.len());
        let mut superseded = 0usize;
        let mut listed = Vec::new();
        for group in self.rows.chunk_by(|a, b| a.key == b.key) {
            for pair in group.windows(2) {
                if pair[0].attempt == pair[1].attempt {
                    return Err(RecordError {
                        source_name: self.source_name.clone(),
                        line: pair[1].line,
                        reason: format!(
                            "trial {} attempt {} is also on line {}: a results file holds one record per attempt (was it concatenated twice?)",
                            self.key_name(pair[1].key),
                            pair[1].attempt,
                            pair[0].line
                        ),
                    });
                }
            }
            let last = group[group.len() - 1];
            if group.len() > 1 {
                superseded += 1;
                if listed.len() < MAX_LISTED_SUPERSEDED {
                    let attempts: Vec<String> = group
                        .iter()
                        .map(|r| format!("{} (line {})", r.attempt, r.line))
                        .collect();
                    listed.push(format!(
                        "{}: attempts {}; kept attempt {}",
                        self.key_name(last.key),
                        attempts.join(", "),
                        last.attempt
                    ));
                }
            }
            keep.push(last);
        }
        self.rows = keep;
        if superseded > 0 {
            let source = &self.source_name;
            self.notes.push(format!(
                "{source}: {superseded} trial(s) appear with several attempts; each counts once, with its highest attempt"
            ));
            for line in listed {
                self.notes.push(format!("{source}: {line}"));
            }
            if superseded > MAX_LISTED_SUPERSEDED {
                self.notes.push(format!(
                    "{source}: … and {} more trial(s) with several attempts",
                    superseded - MAX_LISTED_SUPERSEDED
                ));
            }
        }
        Ok(())
    }

    /// The sweeps the trials come from, in the order first read.
    pub fn sweep_ids(&self) -> impl Iterator<Item = &str> {
        self.sweeps.names.iter().map(String::as_str)
    }

    /// The adaptive design of these trials, when they had one.
    pub fn design(&self) -> Option<crate::adaptive::Design> {
        self.design
    }

    pub(crate) fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    /// What the reader had to decide about its input (e.g. superseded attempts), for a person.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}
