//! Logs for both binaries: JSON lines in `<data dir>/anvil/logs/<binary>.log`, written by a
//! non-blocking appender (a writer thread; a full buffer drops lines rather than slow a turn),
//! filtered by `ANVIL_LOG` (an EnvFilter such as `debug` or `anvil_llm=trace`). They never
//! reach stdout or stderr: in headless mode those carry the requested output only.
//!
//! `anvil` logs only when `ANVIL_LOG` is set (its start-up stays a few milliseconds);
//! `anvil-evals run` and `worker`, long-running services, log at `info` by default (worker
//! restarts, lost heartbeats, discarded late results, each trial's start and end).

use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;

/// Keeps the log writer running; dropping it flushes what is buffered. Hold it until exit
/// (and drop it before `std::process::exit`, which runs no destructors).
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard(#[allow(dead_code)] Option<WorkerGuard>);

/// Starts logging for `binary` (the file's name). `default`: the filter when `ANVIL_LOG` is
/// unset, `None` for no logging at all then. A log that cannot be opened is no error: the
/// program runs without one.
pub fn init(binary: &str, default: Option<&str>) -> LogGuard {
    let filter = match (std::env::var("ANVIL_LOG"), default) {
        (Ok(f), _) if !f.trim().is_empty() => f,
        (_, Some(d)) => d.to_string(),
        _ => return LogGuard(None),
    };
    let Some(dir) = anvil_llm::config::data_dir().map(|d| d.join("logs")) else {
        return LogGuard(None);
    };
    if std::fs::create_dir_all(&dir).is_err() {
        return LogGuard(None);
    }
    let Ok(file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(format!("{binary}.log")))
    else {
        return LogGuard(None);
    };
    let (writer, guard) = tracing_appender::non_blocking(file);
    let installed = tracing_subscriber::fmt()
        .json()
        .with_env_filter(EnvFilter::new(filter))
        .with_ansi(false)
        .with_current_span(true)
        .with_span_list(false)
        .with_writer(writer)
        .try_init();
    LogGuard(installed.ok().map(|()| guard))
}
