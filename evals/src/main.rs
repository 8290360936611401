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

mod bundle;
mod sweeps;
mod workspaces;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anvil_grader::{GradeOptions, Task, Verdict, find_tasks, grade};
use anvil_report::render;
use anvil_report::{ReadOptions, Trials, report};
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
  anvil-evals validate --tasks 'evals/tasks/*'
  anvil-evals grade --task evals/tasks/py-fix-median --workspace /tmp/trial-3/workspace --json
  anvil-evals report results.jsonl -k 1,3,5
  anvil-evals report results.jsonl --baseline last-week.jsonl --format html -o report.html
  anvil-evals report bundle/sweep-20261130-120000-ab12/records.jsonl --format html -o bundle/sweep-20261130-120000-ab12/report.html
  anvil-evals workspaces list --workspaces /dev/shm/anvil-trials    # kept by --keep-workspaces

The queue defaults to a SQLite file (anvil.db in the data dir); give --queue postgres://… to
share it between machines. Migrations run automatically.

Exit codes: run: 0 every trial completed, 1 some trial could not be completed (infra error or
cancelled), 130 interrupted (resume with --sweep); grade: 0 pass, 1 fail (failed, check
timeout or tampered), 3 grader error;
validate: 0 all tasks sound, 1 otherwise; report, worker, status, export, cancel, workspaces: 0; any
command: 2 bad input (a task, a model, a file, a line or a queue that cannot be used: status,
export, cancel and report --sweep never create a missing queue database; run and worker stop
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
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a sweep: enqueue one trial per (task, model, trial), run workers, print the report.
    Run(sweeps::RunArgs),
    /// Run queued trials (on this or any machine that reaches the queue) until stopped.
    Worker(sweeps::WorkerCmdArgs),
    /// Queue depth, sweeps, running trials and workers with their last heartbeat.
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
        /// The queue holding --sweep (default: anvil.db in the data dir).
        #[arg(long, requires = "sweep")]
        queue: Option<String>,
        /// Compare against these earlier results, paired by task.
        #[arg(long)]
        baseline: Option<PathBuf>,
        /// The k of pass@k and pass^k (pass@1 is always shown).
        #[arg(short = 'k', long = "k", value_delimiter = ',', default_values_t = vec![1u32, 3, 5], value_parser = clap::value_parser!(u32).range(1..))]
        k: Vec<u32>,
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Write the report to this file (default: standard output). An HTML report written
        /// to a file links the transcripts relative to it.
        #[arg(short, long)]
        output: Option<PathBuf>,
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
        } => {
            // Only the HTML links transcripts: other formats do not keep their paths.
            let options = ReadOptions {
                transcripts: matches!(format, Format::Html),
            };
            let current = match (results, sweep) {
                (Some(results), _) => read_trials(&results, options),
                (None, Some(sweep)) => rt
                    .block_on(sweeps::sweep_records(queue.as_deref(), &sweep))
                    .map_err(|e| format!("{e:#}"))
                    .and_then(|records| {
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
            let base = match baseline
                .as_deref()
                .map(|b| read_trials(b, ReadOptions::default()))
                .transpose()
            {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("anvil-evals: baseline: {e}");
                    return ExitCode::from(2);
                }
            };
            let r = report(&current, &k, base.as_ref());
            // The table shows its notes; a JSON or HTML reader may not look for them.
            if !matches!(format, Format::Table) {
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
                Format::Html => render::html_at(&r, out_dir.as_deref()),
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
            ExitCode::SUCCESS
        }
    }
}
