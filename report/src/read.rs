//! Reading results files (JSONL, one trial record a line) into [`Trials`].
//!
//! A malformed line is an error naming its line number; blank lines are skipped. A file is read
//! in blocks by one reader per core, each on its own part of the file (split at line starts);
//! line numbers in errors stay those of the whole file.
//!
//! Transcript paths are kept only when asked for ([`ReadOptions::transcripts`], for the HTML
//! report's links): one path per trial doubles the memory a million-trial file needs.

use std::fs::File;
use std::io::BufRead;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::record::{RecordError, parse_line};
use crate::trials::{Detail, Names, Row, TrialKey, Trials};

/// Readers of one file at most (each holds a block of [`BLOCK`] bytes).
const MAX_READERS: usize = 8;
/// Bytes a reader reads at a time.
const BLOCK: usize = 8 << 20;

/// What to keep of each record beyond what every report needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Each trial's transcript path (`session_path`), for the HTML report's links.
    pub transcripts: bool,
}

/// What one reader produced from its part of the input, with its own name ids.
#[derive(Default)]
struct Part {
    options: ReadOptions,
    sweeps: Names,
    tasks: Names,
    models: Names,
    variants: Names,
    digests: Names,
    model_configs: Names,
    anvil_shas: Names,
    /// Where a record's digest key is built (no allocation per record).
    scratch: String,
    /// The adaptive designs seen (records without one as `None`), each once.
    designs: Vec<Option<crate::adaptive::Design>>,
    rows: Vec<Row>,
    details: Vec<Detail>,
    sessions: Vec<String>,
    /// Lines read (blank ones included), to number the next part's lines.
    lines: usize,
}

impl Part {
    /// Parses complete lines from `text`; `first_line` numbers them for errors.
    fn parse(
        &mut self,
        text: &str,
        source_name: &str,
        first_line: usize,
    ) -> Result<(), RecordError> {
        for (i, line) in text.split('\n').enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() {
                continue;
            }
            let number = first_line + i;
            let r = parse_line(line, source_name, number)?;
            let key = TrialKey {
                sweep: self.sweeps.id(&r.sweep),
                task: self.tasks.id(&r.task),
                model: self.models.id(&r.model),
                variant: self.variants.id(r.variant.as_deref().unwrap_or("")),
                trial: r.trial,
            };
            let digest = (!r.digests.task.is_empty()).then(|| {
                let d = &r.digests;
                self.scratch.clear();
                for (i, part) in [&d.task, &d.repo, &d.grader, &d.dependencies]
                    .into_iter()
                    .enumerate()
                {
                    if i > 0 {
                        self.scratch.push(':');
                    }
                    self.scratch.push_str(part);
                }
                self.digests.id(&self.scratch)
            });
            self.anvil_shas.id(&r.anvil_git_sha);
            if !self.designs.contains(&r.adaptive) {
                self.designs.push(r.adaptive);
            }
            let tampered = r.tampered();
            // parse_line guarantees: pass is null exactly when infra_error is set, or the trial
            // was not admitted (which has no detail).
            let detail = match (&r.infra_error, tampered) {
                (Some(reason), _) => Some(Detail::Infra(reason.to_string())),
                (None, true) => Some(Detail::Tampered(r.tamper.clone())),
                (None, false) => None,
            };
            let detail = detail.map(|d| {
                self.details.push(d);
                (self.details.len() - 1) as u32
            });
            let session = r
                .transcript()
                .filter(|_| self.options.transcripts)
                .map(|path| {
                    self.sessions.push(path.to_string());
                    (self.sessions.len() - 1) as u32
                });
            self.rows.push(Row {
                key,
                attempt: r.attempt,
                pass: if tampered { Some(false) } else { r.pass },
                tampered,
                not_admitted: r.not_admitted(),
                steps: r.steps,
                cost: r.cost_usd,
                duration_ms: r.duration_ms,
                line: number,
                detail,
                session,
                digest,
                model_config: (!r.digests.model_config.is_empty())
                    .then(|| self.model_configs.id(&r.digests.model_config)),
            });
        }
        Ok(())
    }
}

impl Trials {
    /// Reads JSONL from `reader`; `source_name` names it in errors and notes.
    pub fn read(reader: impl BufRead, source_name: &str) -> Result<Trials, RecordError> {
        Self::read_with(reader, source_name, ReadOptions::default())
    }

    /// [`Trials::read`], keeping what `options` asks for.
    pub fn read_with(
        mut reader: impl BufRead,
        source_name: &str,
        options: ReadOptions,
    ) -> Result<Trials, RecordError> {
        let mut text = String::new();
        reader.read_to_string(&mut text).map_err(|e| RecordError {
            source_name: source_name.to_string(),
            line: 1,
            reason: format!("cannot read: {e}"),
        })?;
        let mut part = Part {
            options,
            ..Part::default()
        };
        part.parse(&text, source_name, 1)?;
        from_parts(source_name, [part])
    }

    /// Reads a JSONL file with one reader per core, each on its own part of the file.
    pub fn read_file(path: &Path) -> Result<Trials, RecordError> {
        Self::read_file_with(path, ReadOptions::default())
    }

    /// [`Trials::read_file`], keeping what `options` asks for. A relative transcript path is
    /// relative to the file's directory, and kept resolved against it.
    pub fn read_file_with(path: &Path, options: ReadOptions) -> Result<Trials, RecordError> {
        let source_name = path.display().to_string();
        let fail = |reason: String| RecordError {
            source_name: source_name.clone(),
            line: 0,
            reason,
        };
        let file = File::open(path).map_err(|e| fail(format!("cannot open: {e}")))?;
        let readers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, MAX_READERS);
        let bounds = part_bounds(&file, readers).map_err(|e| fail(format!("cannot read: {e}")))?;
        let results: Vec<Result<Part, RecordError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = bounds
                .windows(2)
                .map(|w| {
                    let (start, end, file, name) = (w[0], w[1], &file, source_name.as_str());
                    scope.spawn(move || read_part(file, start, end, name, options))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(fail("a reader thread failed".into())))
                })
                .collect()
        });
        // A part's error numbers lines within the part: add the lines of the parts before it.
        let mut parts = Vec::with_capacity(results.len());
        let mut lines_before = 0;
        for result in results {
            match result {
                Ok(part) => {
                    lines_before += part.lines;
                    parts.push(part);
                }
                Err(mut e) => {
                    e.line += lines_before;
                    return Err(e);
                }
            }
        }
        let mut trials = from_parts(&source_name, parts)?;
        // A relative transcript path is relative to the results file's directory.
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        for session in &mut trials.sessions {
            if Path::new(session.as_str()).is_relative() {
                *session = dir.join(session.as_str()).display().to_string();
            }
        }
        Ok(trials)
    }
}

/// The trials of `parts`, read in this order from `source_name`: one row per trial (see
/// [`crate::trials`]), lines numbered across parts.
fn from_parts(
    source_name: &str,
    parts: impl IntoIterator<Item = Part>,
) -> Result<Trials, RecordError> {
    let mut trials = Trials::new(source_name);
    let mut lines_before = 0;
    let mut designs: Vec<Option<crate::adaptive::Design>> = Vec::new();
    for part in parts {
        for d in &part.designs {
            if !designs.contains(d) {
                designs.push(*d);
            }
        }
        let lines = part.lines;
        merge(&mut trials, part, lines_before);
        lines_before += lines;
    }
    trials.dedupe()?;
    match designs.as_slice() {
        [Some(design)] => trials.design = Some(*design),
        [] | [None] => {}
        _ => trials.note(format!(
            "{source_name}: the trials come from different designs (adaptive and not, or two \
             adaptive ones): the usual estimators are used, which an adaptive stopping rule biases"
        )),
    }
    Ok(trials)
}

/// Adds a part's rows to `trials`, in `trials`' name ids; its lines start after `lines_before`.
fn merge(trials: &mut Trials, part: Part, lines_before: usize) {
    let remap = |mine: &mut Names, theirs: &Names| -> Vec<u32> {
        theirs.names.iter().map(|n| mine.id(n)).collect()
    };
    let sweeps = remap(&mut trials.sweeps, &part.sweeps);
    let tasks = remap(&mut trials.tasks, &part.tasks);
    let models = remap(&mut trials.models, &part.models);
    let variants = remap(&mut trials.variants, &part.variants);
    let digests = remap(&mut trials.digests, &part.digests);
    let model_configs = remap(&mut trials.model_configs, &part.model_configs);
    remap(&mut trials.anvil_shas, &part.anvil_shas);
    let details_before = trials.details.len() as u32;
    trials.details.extend(part.details);
    let sessions_before = trials.sessions.len() as u32;
    trials.sessions.extend(part.sessions);
    trials.rows.extend(part.rows.into_iter().map(|r| Row {
        key: TrialKey {
            sweep: sweeps[r.key.sweep as usize],
            task: tasks[r.key.task as usize],
            model: models[r.key.model as usize],
            variant: variants[r.key.variant as usize],
            trial: r.key.trial,
        },
        digest: r.digest.map(|d| digests[d as usize]),
        model_config: r.model_config.map(|d| model_configs[d as usize]),
        line: r.line + lines_before,
        detail: r.detail.map(|d| d + details_before),
        session: r.session.map(|s| s + sessions_before),
        ..r
    }));
}

/// `readers` + 1 offsets that cut `file` into parts at line starts (a part may be empty).
fn part_bounds(file: &File, readers: usize) -> std::io::Result<Vec<u64>> {
    let len = file.metadata()?.len();
    let readers = readers as u64;
    let mut bounds = vec![0u64];
    for i in 1..readers {
        // Moved forward to the next line start.
        let mut at = len * i / readers;
        let mut buf = [0u8; 4096];
        loop {
            let n = file.read_at(&mut buf, at)?;
            if n == 0 {
                at = len;
                break;
            }
            if let Some(p) = buf[..n].iter().position(|&b| b == b'\n') {
                at += p as u64 + 1;
                break;
            }
            at += n as u64;
        }
        bounds.push(at.max(*bounds.last().unwrap_or(&0)));
    }
    bounds.push(len);
    Ok(bounds)
}

/// Reads `[start, end)` of `file` (both at line starts) in blocks and parses it. An error's
/// line is numbered within the part.
fn read_part(
    file: &File,
    start: u64,
    end: u64,
    source_name: &str,
    options: ReadOptions,
) -> Result<Part, RecordError> {
    let mut part = Part {
        options,
        ..Part::default()
    };
    let mut buf: Vec<u8> = Vec::with_capacity(BLOCK + 4096);
    let mut carry: Vec<u8> = Vec::new();
    let mut pos = start;
    while pos < end {
        let want = BLOCK.min((end - pos) as usize);
        buf.clear();
        buf.extend_from_slice(&carry);
        let have = buf.len();
        buf.resize(have + want, 0);
        let n = match file.read_at(&mut buf[have..], pos) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                return Err(RecordError {
                    source_name: source_name.to_string(),
                    line: part.lines + 1,
                    reason: format!("cannot read: {e}"),
                });
            }
        };
        buf.truncate(have + n);
        pos += n as u64;
        // Parse up to the last complete line; carry the rest.
        let cut = if pos >= end {
            buf.len()
        } else {
            buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)
        };
        carry = buf[cut..].to_vec();
        let text = std::str::from_utf8(&buf[..cut]).map_err(|e| {
            let newlines = buf[..e.valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count();
            RecordError {
                source_name: source_name.to_string(),
                line: part.lines + 1 + newlines,
                reason: "not valid UTF-8".into(),
            }
        })?;
        let first = part.lines + 1;
        part.parse(text, source_name, first)?;
        part.lines += text.matches('\n').count();
    }
    Ok(part)
}
