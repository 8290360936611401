//! `anvil-evals`: run sweeps on the job queue, run workers, grade a workspace, validate tasks,
//! report on results. See `anvil-evals --help`.

/// `println!` for standard output that a closed pipe ends quietly (`anvil-evals grade --json |
/// head`): exit 141 as a process killed by SIGPIPE would, instead of a panic.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(141);
        }
    }};
}

/// `print!` likewise.
macro_rules! out_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if write!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(141);
        }
    }};
}

mod baseline;
mod bundle;
mod history;
mod status;
mod sweeps;
mod workspaces;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anvil_grader::{GradeOptions, Task, Verdict, find_tasks, grade};
use anvil_report::gate::{self, Gate};
use anvil_report::render;
use anvil_report::{ReadOptions, Trials};
use anvil_runner::jobs::validate::validate;
use clap::{Parser, Subcommand, ValueEnum};

const AFTER_HELP: &str = "\
Examples:
  anvil-evals run --tasks 'evals/tasks/*' --models sonnet,local --trials 3 --concurrency 4
  anvil-evals run --tasks 'evals/tasks/*' --models sonnet --queue postgres://evals@db/anvil --detach
  anvil-evals worker --queue postgres://evals@db/anvil --concurrency 4     # on each machine
  anvil-evals status --sweep sweep-20261130-120000-ab12
  anvil-evals export --sweep sweep-20261130-120000-ab12 -o results.jsonl
  anvil-evals export --sweep sweep-20261130-120000-ab12 --with-sessions bundle/   # + transcripts
  anvil-evals report --sweep sweep-20261130-120000-ab12 --baseline last-week.jsonl
  anvil-evals report --sweep nightly-2026-12-03 --baseline 'last:nightly-*'   # the newest finished other one
  anvil-evals report --sweep nightly-2026-12-03 --baseline nightly-2026-11-26 # a sweep in the queue
  anvil-evals sweeps                          # every sweep, newest first: shape, state, pass@1, cost
  anvil-evals sweeps --json --limit 30
  anvil-evals trend 'nightly-*'               # pass@1 per model across the nightly sweeps, oldest first
  anvil-evals trend 'nightly-*' --metric pass^3 --format html -o trend.html
  anvil-evals validate --tasks 'evals/tasks/*'
  anvil-evals grade --task evals/tasks/py-fix-median --workspace /tmp/trial-3/workspace --json
  anvil-evals report results.jsonl -k 1,3,5
  anvil-evals report results.jsonl --baseline last-week.jsonl --format html -o report.html
  anvil-evals report bundle/sweep-20261130-120000-ab12/records.jsonl --format html -o bundle/sweep-20261130-120000-ab12/report.html
  anvil-evals report results.jsonl --baseline main.jsonl --fail-on regression --fail-on 'pass@1<0.6' --format markdown >> \"$GITHUB_STEP_SUMMARY\"
  anvil-evals report results.jsonl --format junit -o junit.xml --junit-threshold 0.6
  anvil-evals workspaces list --workspaces /dev/shm/anvil-trials    # kept by --keep-workspaces

The queue defaults to a SQLite file (anvil.db in the data dir); give --queue postgres://… to
share it between machines. Migrations run automatically.

Exit codes: run: 0 every trial completed, 1 some trial could not be completed (infra error or
cancelled), 130 interrupted (resume with --sweep); grade: 0 pass, 1 fail (failed, check
timeout or tampered), 3 grader error;
validate: 0 all tasks sound, 1 otherwise; report: 0, or 4 when a --fail-on gate fails (a
significant regression, a metric below its floor: the report is still written, then each failing
model and metric is named on stderr with by how much); worker, status, export, cancel,
workspaces, sweeps, trend: 0; any command: 2 bad input (a task, a model, a file, a line or a
queue that cannot be used; for report also a gate on a metric it does not compute, `regression`
with no baseline to compare against, --junit-threshold outside 0 to 1, a --baseline that is no
file, no finished sweep matching last:PATTERN and no sweep id: then nothing is written; for
trend a pattern matching no sweep or an unknown --metric. Status, export, cancel, sweeps, trend
and report --sweep or --baseline never create a missing queue database; run and worker stop
within seconds when theirs is deleted or made read-only under them).";

#[derive(Debug, Parser)]
#[command(name = "anvil-evals", version, about = "Evals for anvil: tasks, the protected grader and the reporter.", after_help = AFTER_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Json,
    Html,
    /// GitHub-flavoured Markdown, for a CI job summary.
    Markdown,
    /// JUnit XML: one test case per task and model.
    Junit,
}

/// `--junit-threshold`: a pass rate, 0 to 1.
fn junit_threshold(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "--junit-threshold must be a pass rate from 0 to 1 (such as 0.5), not {s:?}"
        )),
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a sweep: enqueue one trial per (task, model, trial), run workers, print the report.
    Run(sweeps::RunArgs),
    /// Run queued trials (on this or any machine that reaches the queue) until stopped.
    Worker(sweeps::WorkerCmdArgs),
    /// Queue depth, sweeps, a sweep's spend and ETA, running trials (and those waiting for
    /// re-run after their worker died), and workers: alive, stopped or dead.
    Status {
        #[arg(long)]
        queue: Option<String>,
        #[arg(long)]
        sweep: Option<String>,
    },
    /// Write a sweep's trial records (JSONL, what `report` reads), with --with-sessions
    /// together with their transcripts.
    Export {
        #[arg(long)]
        queue: Option<String>,
        #[arg(long)]
        sweep: String,
        /// The file to write (default: standard output; DIR/records.jsonl with
        /// --with-sessions).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Copy each trial's transcript (only from the sweep's artifact directory) into DIR as
        /// <sweep>/<task>/<model>/<file>, and write the records (default
        /// DIR/<sweep>/records.jsonl) with session_path relative to the records file. A
        /// transcript that is not on this machine (a worker elsewhere ran the trial) is named
        /// on stderr and its record keeps its original path; the export still exits 0, with
        /// the count. One already in DIR (exported there on the machine that has it) is used if
        /// it is a regular file that loads as a session: export into the same DIR on each
        /// machine to collect them all. Such a file is trusted only as far as DIR is. Symlinks
        /// in DIR and files there with other content are refused, never written through.
        #[arg(long, value_name = "DIR")]
        with_sessions: Option<PathBuf>,
    },
    /// Every sweep in the queue, newest first: its shape, state, headline pass@1 per model
    /// (and variant) and cost.
    Sweeps {
        /// The queue (default: anvil.db in the data dir).
        #[arg(long)]
        queue: Option<String>,
        /// Print the list as JSON.
        #[arg(long)]
        json: bool,
        /// Only the newest N sweeps.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
    },
    /// A metric across the sweeps whose ids match a glob, oldest first: per model (and
    /// variant) its mean over tasks with a 95% interval, as a table, JSON or an HTML chart.
    Trend(history::TrendArgs),
    /// Cancel a sweep: queued trials are skipped, running ones killed.
    Cancel {
        #[arg(long)]
        queue: Option<String>,
        #[arg(long)]
        sweep: String,
    },
    /// List or remove the workspaces kept by --keep-workspaces (they stay until removed).
    #[command(subcommand)]
    Workspaces(workspaces::WorkspacesCommand),
    /// Grade a finished workspace against a task's protected check.
    Grade {
        /// The task directory (holding task.toml).
        #[arg(long)]
        task: PathBuf,
        /// The workspace the agent worked in.
        #[arg(long)]
        workspace: PathBuf,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        /// Keep the grading directory for inspection.
        #[arg(long)]
        keep: bool,
        /// Grade without any sandbox (recorded in the result). Only where no sandbox can work.
        #[arg(long)]
        unsandboxed_grading: bool,
    },
    /// Prove tasks sound: the check fails on the untouched repo and passes with the solution.
    Validate {
        /// A task directory or a pattern such as 'evals/tasks/*'.
        #[arg(long)]
        tasks: String,
        #[arg(long)]
        json: bool,
        /// Grade without any sandbox (recorded in the result). Only where no sandbox can work.
        #[arg(long)]
        unsandboxed_grading: bool,
    },
    /// Report pass@k / pass^k with intervals from trial records (JSONL).
    Report {
        /// The results file (one trial record per line); or give --sweep.
        #[arg(required_unless_present = "sweep", conflicts_with = "sweep")]
        results: Option<PathBuf>,
        /// Read the results of this sweep from the queue database.
        #[arg(long)]
        sweep: Option<String>,
        /// The queue holding --sweep and a --baseline sweep (default: anvil.db in the data dir).
        #[arg(long)]
        queue: Option<String>,
        /// Compare against earlier results, paired by task: a results file; `last:PATTERN`,
        /// the newest finished sweep in the queue whose id matches the glob (never the --sweep
        /// reported; which one is said on stderr); or a sweep id in the queue.
        #[arg(long, value_name = "FILE|last:PATTERN|SWEEP")]
        baseline: Option<String>,
        /// The k of pass@k and pass^k (pass@1 is always shown) [default: 1,3,5 up to the trials
        /// run per task, as `run`'s report].
        #[arg(short = 'k', long = "k", value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
        k: Vec<u32>,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Write the report to this file (default: standard output). An HTML report written
        /// to a file links the transcripts relative to it.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Exit 4 (after writing the report) when this gate fails: `regression` (any model's
        /// metric significantly worse than the baseline's), or a floor METRIC<MIN such as
        /// 'pass@1<0.6' or 'pass^3<40%' (any model's metric below MIN). Repeatable.
        #[arg(long, value_name = "GATE")]
        fail_on: Vec<Gate>,
        /// With --format junit: a task × model case fails when its pass rate (passed / graded)
        /// is below this (0 to 1) [default: 0.5].
        #[arg(long, value_name = "RATE", value_parser = junit_threshold)]
        junit_threshold: Option<f64>,
        /// Compare each model's variants against this one (default: `control` if there is
        /// one, else the first by name).
        #[arg(long, value_name = "VARIANT")]
        reference_variant: Option<String>,
    },
}

fn read_trials(path: &Path, options: ReadOptions) -> Result<Trials, String> {
    Trials::read_file_with(path, options).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The long-running commands (a sweep, a worker) log at info by default; the others only
    // with ANVIL_LOG (a reader such as `status` creates nothing). Held to the end of main
    // (which returns, so it is dropped and the log flushed).
    let service = matches!(cli.command, Command::Run(_) | Command::Worker(_));
    let _telemetry = anvil_runner::telemetry::init("anvil-evals", service.then_some("info"));
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("anvil-evals: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let sweep_command = |result: anyhow::Result<ExitCode>| match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("anvil-evals: {e:#}");
            ExitCode::from(2)
        }
    };
    match cli.command {
        Command::Run(args) => sweep_command(rt.block_on(sweeps::run(args))),
        Command::Worker(args) => sweep_command(rt.block_on(sweeps::worker(args))),
        Command::Status { queue, sweep } => {
            sweep_command(rt.block_on(sweeps::status(queue.as_deref(), sweep.as_deref())))
        }
        Command::Export {
            queue,
            sweep,
            output,
            with_sessions,
        } => sweep_command(rt.block_on(sweeps::export(
            queue.as_deref(),
            &sweep,
            output.as_deref(),
            with_sessions.as_deref(),
        ))),
        Command::Sweeps { queue, json, limit } => {
            sweep_command(rt.block_on(history::sweeps(queue.as_deref(), json, limit)))
        }
        Command::Trend(args) => sweep_command(rt.block_on(history::trend(args))),
        Command::Cancel { queue, sweep } => {
            sweep_command(rt.block_on(sweeps::cancel(queue.as_deref(), &sweep)))
        }
        Command::Workspaces(command) => sweep_command(workspaces::run(command)),
        Command::Grade {
            task,
            workspace,
            json,
            keep,
            unsandboxed_grading,
        } => {
            let task = match Task::load(&task) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("anvil-evals: {e}");
                    return ExitCode::from(2);
                }
            };
            let opts = GradeOptions {
                keep_dir: keep,
                unsandboxed: unsandboxed_grading,
                grading_root: None,
            };
            let result = rt.block_on(grade(&task, &workspace, &opts));
            if json {
                out!(
                    "{}",
                    serde_json::to_string_pretty(&result).unwrap_or_default()
                );
            } else {
                let verdict = match result.verdict {
                    Verdict::Pass => "PASS",
                    Verdict::Fail => "FAIL",
                    Verdict::CheckTimeout => "FAIL (check timeout)",
                    Verdict::Tampered => "TAMPERED",
                    Verdict::GraderError => "GRADER ERROR",
                };
                out!("{verdict}: {} — {}", task.spec.name, result.reason);
                for t in &result.tests {
                    out!("  {:<8} {}", t.outcome, t.id);
                }
                for f in &result.tamper {
                    out!("  tamper: {} {}: {}", f.kind, f.path, f.detail);
                }
                if !result.skipped.is_empty() {
                    let skipped: Vec<&str> =
                        result.skipped.iter().map(|s| s.path.as_str()).collect();
                    out!("  not copied for grading: {}", skipped.join(", "));
                }
                out!("  sandbox: {}", result.sandbox);
                if result.verdict != Verdict::Pass && !result.output_tail.is_empty() {
                    out!(
                        "--- check output (tail) ---\n{}",
                        result.output_tail.trim_end()
                    );
                }
            }
            ExitCode::from(match result.verdict {
                Verdict::Pass => 0,
                Verdict::Fail | Verdict::CheckTimeout | Verdict::Tampered => 1,
                Verdict::GraderError => 3,
            })
        }
        Command::Validate {
            tasks,
            json,
            unsandboxed_grading,
        } => {
            let opts = GradeOptions {
                keep_dir: false,
                unsandboxed: unsandboxed_grading,
                grading_root: None,
            };
            let root = match tempfile::Builder::new().prefix("anvil-validate-").tempdir() {
                Ok(r) => r,
                Err(e) => {
                    eprintln!(
                        "anvil-evals: cannot make a directory for validation workspaces: {e}"
                    );
                    return ExitCode::from(2);
                }
            };
            let dirs = match find_tasks(&tasks) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("anvil-evals: {e}");
                    return ExitCode::from(2);
                }
            };
            let mut all_ok = true;
            let mut results = Vec::new();
            for dir in dirs {
                let task = match Task::load(&dir) {
                    Ok(t) => t,
                    Err(e) => {
                        all_ok = false;
                        out!("INVALID {}: {e}", dir.display());
                        continue;
                    }
                };
                match rt.block_on(validate(&task, &opts, root.path())) {
                    Ok(v) => {
                        all_ok &= v.ok;
                        if !json {
                            match &v.problem {
                                None => out!(
                                    "ok      {} (fails untouched, passes solved in {} ms of {} s; sandbox: {})",
                                    v.task,
                                    v.solution_check_ms,
                                    task.spec.check.timeout_secs,
                                    v.solved.sandbox
                                ),
                                Some(p) => out!("UNSOUND {}: {p}", v.task),
                            }
                        }
                        results.push(v);
                    }
                    Err(e) => {
                        all_ok = false;
                        out!("ERROR   {}: {e}", task.spec.name);
                    }
                }
            }
            if json {
                out!(
                    "{}",
                    serde_json::to_string_pretty(&results).unwrap_or_default()
                );
            }
            if all_ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Report {
            results,
            sweep,
            queue,
            baseline,
            k,
            format,
            output,
            fail_on,
            junit_threshold,
            reference_variant,
        } => {
            // Bad input is refused before anything is read.
            if junit_threshold.is_some() && !matches!(format, Format::Junit) {
                eprintln!("anvil-evals: --junit-threshold applies to --format junit only");
                return ExitCode::from(2);
            }
            // Only the HTML links transcripts: other formats do not keep their paths.
            let options = ReadOptions {
                transcripts: matches!(format, Format::Html),
            };
            let source = match (&results, &sweep) {
                (Some(results), _) => results.display().to_string(),
                (None, Some(sweep)) => format!("sweep {sweep}"),
                (None, None) => String::new(),
            };
            // What the queue knows of trials that left no record (cancelled, unfinished).
            let mut unrecorded = None;
            let current = match (results, sweep) {
                (Some(results), _) => read_trials(&results, options),
                (None, Some(sweep)) => rt
                    .block_on(sweeps::sweep_records(queue.as_deref(), &sweep))
                    .map_err(|e| format!("{e:#}"))
                    .and_then(|(records, u)| {
                        unrecorded = Some(u);
                        Trials::read_with(records.join("\n").as_bytes(), &sweep, options)
                            .map_err(|e| e.to_string())
                    }),
                (None, None) => Err("give a results file or --sweep".to_string()),
            };
            let current = match current {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("anvil-evals: {e}");
                    return ExitCode::from(2);
                }
            };
            // Never the reported trials' own sweeps as the baseline.
            let reported: Vec<String> = current.sweep_ids().map(str::to_string).collect();
            let base = match baseline
                .as_deref()
                .map(|b| rt.block_on(baseline::read(b, queue.as_deref(), &reported)))
                .transpose()
            {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("anvil-evals: {e:#}");
                    return ExitCode::from(2);
                }
            };
            // No k asked for: the defaults `run` uses, none above the trials run per task.
            let k = if k.is_empty() {
                anvil_report::metric::default_ks(anvil_report::aggregate::trials_per_task(&current))
            } else {
                k
            };
            let mut r = anvil_report::report_with(
                &current,
                &k,
                anvil_report::ReportOptions {
                    baseline: base.as_ref().map(|b| &b.trials),
                    reference_variant: reference_variant.as_deref(),
                },
            );
            if let Some(u) = unrecorded {
                r.account_unrecorded(u);
            }
            if let Some(name) = &reference_variant
                && !r.models.iter().any(|m| m.variant.as_deref() == Some(name))
            {
                let mut known: Vec<&str> = r
                    .models
                    .iter()
                    .filter_map(|m| m.variant.as_deref())
                    .collect();
                known.sort_unstable();
                known.dedup();
                eprintln!(
                    "anvil-evals: --reference-variant {name}: no trial ran it (variants: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                );
                return ExitCode::from(2);
            }
            // A gate that cannot be evaluated is bad input: nothing is written.
            let failures = match gate::failures(&r, &fail_on) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("anvil-evals: --fail-on: {e}");
                    return ExitCode::from(2);
                }
            };
            // The table and the Markdown show their notes; a JSON, HTML or JUnit reader may
            // not look for them.
            if !matches!(format, Format::Table | Format::Markdown) {
                for note in &r.notes {
                    eprintln!("anvil-evals: note: {note}");
                }
            }
            // Written to a file, the HTML links transcripts relative to the file's directory.
            let out_dir = output.as_deref().map(|path| {
                let dir = match path.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                };
                std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())
            });
            let mut text = match format {
                Format::Table => render::table(&r),
                Format::Json => render::json(&r),
                Format::Html => render::html_with(
                    &r,
                    &render::HtmlOptions {
                        out_dir: out_dir.as_deref(),
                        results: Some(&source),
                        baseline: base.as_ref().map(|b| b.label.as_str()),
                        generated: Some(&render::utc_now()),
                    },
                ),
                Format::Markdown => {
                    let baseline = base.as_ref().map(|b| b.label.clone());
                    render::markdown(&r, &source, baseline.as_deref())
                }
                Format::Junit => render::junit(
                    &r,
                    &current,
                    junit_threshold.unwrap_or(render::JUNIT_DEFAULT_THRESHOLD),
                ),
            };
            if !text.ends_with('\n') {
                text.push('\n');
            }
            match &output {
                Some(path) => {
                    if let Err(e) = std::fs::write(path, &text) {
                        eprintln!("anvil-evals: cannot write {}: {e}", path.display());
                        return ExitCode::from(2);
                    }
                }
                None => out_raw!("{text}"),
            }
            if failures.is_empty() {
                return ExitCode::SUCCESS;
            }
            for f in &failures {
                eprintln!("anvil-evals: gate failed: {f}");
            }
            ExitCode::from(4)
        }
    }
}
