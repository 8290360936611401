//! `anvil-evals status`: everything is read from the queue first ([`read`]), then shown by
//! [`render`], a pure function of what was read and the time it is shown at — so what it says
//! about dead workers and the ETA is tested with a fixed clock.
//!
//! - A worker silent for longer than its missed heartbeats allow (three of its own
//!   `--heartbeat-secs` by default) is labelled dead; the trials it was running are shown as
//!   waiting for re-run (a live worker takes them back at its next heartbeat), not as running.
//! - The ETA comes from the sweep's finished trials only: the time during which at least one of
//!   them was running, per finished trial, times the trials left. Nothing in it is measured
//!   from now, so it does not drift while nothing finishes.
//! - "jobs waiting" counts the queue's waiting jobs of sweeps that are not cancelled (`cancel`
//!   takes a sweep's jobs off the queue).

use std::collections::HashMap;

use anvil_runner::jobs::queue::{
    Counts, Db, Liveness, QueueLocation, RunningTrial, SweepRow, SweepSummary, TrialState,
    WorkerRow,
};
use anyhow::{Result, anyhow};

/// Sweeps listed without `--sweep`.
const LISTED_SWEEPS: usize = 20;
/// Workers are listed when they beat within this long.
const WORKERS_SINCE_MS: i64 = 24 * 3600 * 1000;

/// What `status` read from the queue.
pub struct Snapshot {
    /// The queue, as shown (passwords hidden).
    pub location: String,
    pub jobs_waiting: u64,
    pub view: View,
    /// Trials in state `running`, in the one sweep or in every sweep.
    pub running: Vec<RunningTrial>,
    /// Workers that beat in the last 24 hours, most recent first.
    pub workers: Vec<WorkerRow>,
}

/// One sweep in detail (`--sweep`), or the newest sweeps.
pub enum View {
    Sweep(Box<SweepDetail>),
    All(Vec<(SweepSummary, Counts)>),
}

/// One sweep, with what its ETA is measured from.
pub struct SweepDetail {
    pub row: SweepRow,
    pub counts: Counts,
    /// The spend line (`spend: …`), which does not depend on the time.
    pub spend: String,
    /// (started, finished) of each finished trial, unix ms.
    pub spans: Vec<(i64, i64)>,
}

/// Reads what `status` shows. Nothing is printed before everything is read: a sweep that is
/// not there is an error, with no half-printed status before it.
pub async fn read(
    db: &Db,
    location: &QueueLocation,
    sweep: Option<&str>,
    now_ms: i64,
) -> Result<Snapshot> {
    let view = match sweep {
        Some(id) => {
            let row = db.sweep(id).await?.ok_or_else(|| {
                anyhow!("no sweep '{id}' in {location} (run `anvil-evals status` to list them)")
            })?;
            let counts = db.counts(id).await?;
            let spend = crate::sweeps::spend_line(db, id, &counts).await?;
            let spans = db.finished_spans(id).await?;
            View::Sweep(Box::new(SweepDetail {
                row,
                counts,
                spend,
                spans,
            }))
        }
        None => {
            let mut listed = Vec::new();
            for s in db.sweeps().await?.into_iter().take(LISTED_SWEEPS) {
                let counts = db.counts(&s.id).await?;
                listed.push((s, counts));
            }
            View::All(listed)
        }
    };
    Ok(Snapshot {
        location: location.to_string(),
        jobs_waiting: db.queue_depth().await?,
        view,
        running: db.running(sweep).await?,
        workers: db.workers(now_ms - WORKERS_SINCE_MS).await?,
    })
}

/// `secs` as a person reads a duration: `45s`, `12m`, `3h`.
fn duration(secs: u64) -> String {
    match secs {
        0..=119 => format!("{secs}s"),
        120..=7199 => format!("{}m", secs / 60),
        _ => format!("{}h", secs / 3600),
    }
}

/// How long before `now_ms` a time was: `45s ago`.
fn ago(ms: i64, now_ms: i64) -> String {
    format!("{} ago", duration(((now_ms - ms).max(0) / 1000) as u64))
}

/// The time during which at least one of the finished trials was running: the length of the
/// union of their [started, finished] spans. Idle gaps (no trial running: no worker, a sweep
/// resumed days later) are not in it.
pub fn busy_ms(spans: &[(i64, i64)]) -> i64 {
    let mut spans: Vec<(i64, i64)> = spans
        .iter()
        .map(|&(start, end)| (start, end.max(start)))
        .collect();
    spans.sort_unstable();
    let mut total = 0;
    let mut current: Option<(i64, i64)> = None;
    for (start, end) in spans {
        current = match current {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                total += e - s;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    total + current.map_or(0, |(s, e)| e - s)
}

/// The time `remaining` trials take at the pace of `done` finished ones that kept the workers
/// busy for `busy_ms` in all: `remaining × busy_ms / done`. `None` until a trial has finished,
/// or with nothing left. It is made of finished trials only (never of the time now), so it
/// stays put while nothing finishes. `run`'s progress line uses it too.
pub fn pace_eta_ms(done: u64, busy_ms: i64, remaining: u64) -> Option<u64> {
    if done == 0 || remaining == 0 {
        return None;
    }
    let per_trial = busy_ms.max(0) as f64 / done as f64;
    Some((per_trial * remaining as f64).round() as u64)
}

/// Why a trial in state `running` is not running: its worker is dead or stopped, or was not
/// seen in the last 24 hours. `None` while its worker is alive.
fn stranded(
    trial: &RunningTrial,
    workers: &HashMap<&str, &WorkerRow>,
    now_ms: i64,
) -> Option<String> {
    let name = trial.worker.as_deref().unwrap_or("?");
    match workers.get(name).map(|w| (w, w.liveness(now_ms))) {
        Some((_, Liveness::Alive)) => None,
        Some((w, Liveness::Dead)) => Some(format!(
            "its worker {name} is presumed dead (last heartbeat {})",
            ago(w.last_heartbeat_ms, now_ms)
        )),
        Some((w, Liveness::Stopped)) => Some(format!(
            "its worker {name} stopped (last heartbeat {})",
            ago(w.last_heartbeat_ms, now_ms)
        )),
        None => Some(format!("its worker {name} has not been seen for 24 hours")),
    }
}

/// A sweep's counts; `rerun` of its `running` trials wait for re-run (their worker is gone).
fn counts_line(counts: &Counts, rerun: u64) -> String {
    let running = counts.get(TrialState::Running);
    let rerun_part = if rerun > 0 {
        format!(", {rerun} waiting for re-run (their worker is gone)")
    } else {
        String::new()
    };
    format!(
        "{} trials: {} done ({} passed), {} running{rerun_part}, {} queued, {} retrying, {} infra errors, {} cancelled",
        counts.total(),
        counts.get(TrialState::Done),
        counts.passed,
        running.saturating_sub(rerun),
        counts.get(TrialState::Queued),
        counts.get(TrialState::Retrying),
        counts.get(TrialState::InfraError),
        counts.get(TrialState::Cancelled),
    )
}

/// The ETA line of a sweep, or `None` when nothing is left to run.
fn eta_line(detail: &SweepDetail, live_workers: usize) -> Option<String> {
    let counts = &detail.counts;
    let remaining = counts.total() - counts.finished();
    if remaining == 0 || detail.row.cancelled {
        return None;
    }
    let done = detail.spans.len() as u64;
    let mut line = match pace_eta_ms(done, busy_ms(&detail.spans), remaining) {
        Some(ms) => format!(
            "ETA: about {} for the {remaining} unfinished trials, at the pace of its {done} \
             finished (measured while they ran: it does not move while none finishes)",
            duration(ms.div_ceil(1000))
        ),
        None => format!("ETA: unknown until one of its {remaining} unfinished trials finishes"),
    };
    if live_workers == 0 {
        line.push_str("; no live worker is taking trials (start one with `anvil-evals worker`)");
    }
    Some(line)
}

/// What `status` prints at `now_ms`.
pub fn render(s: &Snapshot, now_ms: i64) -> String {
    let mut out = Vec::new();
    out.push(format!("queue: {}", s.location));
    out.push(format!("jobs waiting: {}", s.jobs_waiting));
    let by_name: HashMap<&str, &WorkerRow> =
        s.workers.iter().map(|w| (w.name.as_str(), w)).collect();
    let stranded_trials: Vec<(&RunningTrial, String)> = s
        .running
        .iter()
        .filter_map(|r| stranded(r, &by_name, now_ms).map(|why| (r, why)))
        .collect();
    let rerun_in = |sweep: &str| {
        stranded_trials
            .iter()
            .filter(|(r, _)| r.key.sweep == sweep)
            .count() as u64
    };
    let live = s
        .workers
        .iter()
        .filter(|w| w.liveness(now_ms) == Liveness::Alive)
        .count();
    match &s.view {
        View::Sweep(detail) => {
            let row = &detail.row;
            out.push(format!(
                "sweep {}{}: anvil {}, started {}",
                row.id,
                if row.cancelled { " (cancelled)" } else { "" },
                row.anvil_git_sha,
                ago(row.created_at_ms, now_ms)
            ));
            out.push(format!(
                "  {}",
                counts_line(&detail.counts, rerun_in(&row.id))
            ));
            out.push(format!("  {}", detail.spend));
            if let Some(eta) = eta_line(detail, live) {
                out.push(format!("  {eta}"));
            }
        }
        View::All(sweeps) => {
            if sweeps.is_empty() {
                out.push("no sweeps yet".into());
            }
            for (sweep, counts) in sweeps {
                out.push(format!(
                    "sweep {}{} (started {}): {}",
                    sweep.id,
                    if sweep.cancelled { " (cancelled)" } else { "" },
                    ago(sweep.created_at_ms, now_ms),
                    counts_line(counts, rerun_in(&sweep.id))
                ));
            }
        }
    }
    let running: Vec<&RunningTrial> = s
        .running
        .iter()
        .filter(|r| !stranded_trials.iter().any(|(t, _)| std::ptr::eq(*t, *r)))
        .collect();
    if !running.is_empty() {
        out.push("running:".into());
        for r in running {
            out.push(format!(
                "  {} attempt {} on {} (started {})",
                r.key,
                r.attempt,
                r.worker.as_deref().unwrap_or("?"),
                r.started_at_ms
                    .map(|ms| ago(ms, now_ms))
                    .unwrap_or_default()
            ));
        }
    }
    if !stranded_trials.is_empty() {
        out.push(
            "waiting for re-run (a live worker takes each back at its next heartbeat):".into(),
        );
        for (r, why) in &stranded_trials {
            out.push(format!("  {} attempt {}: {why}", r.key, r.attempt));
        }
    }
    out.push("workers (last 24 h):".into());
    if s.workers.is_empty() {
        out.push("  none".into());
    }
    for w in &s.workers {
        let state = match w.liveness(now_ms) {
            Liveness::Alive => "alive".to_string(),
            Liveness::Stopped => "stopped".to_string(),
            Liveness::Dead => format!(
                "dead: silent past {} missed heartbeats of {}",
                w.missed_heartbeats(),
                duration_ms(w.heartbeat_ms())
            ),
        };
        out.push(format!(
            "  {} (host {}, pid {}): {state}, last heartbeat {}",
            w.name,
            w.host,
            w.pid,
            ago(w.last_heartbeat_ms, now_ms)
        ));
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// A heartbeat interval: `5s`, `0.5s`.
fn duration_ms(ms: i64) -> String {
    if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{}s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anvil_runner::jobs::queue::TrialKey;
    use std::collections::BTreeMap;

    const NOW: i64 = 1_800_000_000_000;
    const SEC: i64 = 1000;

    fn counts(pairs: &[(TrialState, u64)], passed: u64) -> Counts {
        Counts {
            by_state: pairs.iter().copied().collect::<BTreeMap<_, _>>(),
            passed,
            ..Counts::default()
        }
    }

    fn worker(name: &str, last_heartbeat_ms: i64, stopped: bool) -> WorkerRow {
        WorkerRow {
            name: name.into(),
            host: "h".into(),
            pid: 7,
            started_at_ms: NOW - 3600 * SEC,
            last_heartbeat_ms,
            stopped,
            heartbeat_ms: Some(5 * SEC),
            missed_heartbeats: Some(3),
        }
    }

    fn running(sweep: &str, trial: u32, worker: &str) -> RunningTrial {
        RunningTrial {
            key: TrialKey {
                sweep: sweep.into(),
                task: "t".into(),
                model: "m".into(),
                variant: None,
                trial,
            },
            attempt: 1,
            worker: Some(worker.into()),
            started_at_ms: Some(NOW - 60 * SEC),
        }
    }

    /// Sweep s1: 10 trials, 4 finished (two at a time, 2 minutes each, in two batches with an
    /// idle hour between them: 4 minutes busy), 2 running (one on a live worker, one on a dead
    /// one), 4 queued.
    fn snapshot(workers: Vec<WorkerRow>) -> Snapshot {
        let minute = 60 * SEC;
        let t0 = NOW - 3 * 3600 * SEC;
        let spans = vec![
            (t0, t0 + 2 * minute),
            (t0, t0 + 2 * minute),
            (t0 + 60 * minute, t0 + 62 * minute),
            (t0 + 60 * minute, t0 + 62 * minute),
        ];
        Snapshot {
            location: "/q.db".into(),
            jobs_waiting: 4,
            view: View::Sweep(Box::new(SweepDetail {
                row: SweepRow {
                    id: "s1".into(),
                    created_at_ms: t0,
                    spec: "{}".into(),
                    fingerprint: "f".into(),
                    anvil_git_sha: "abc".into(),
                    cancelled: false,
                },
                counts: counts(
                    &[
                        (TrialState::Done, 4),
                        (TrialState::Running, 2),
                        (TrialState::Queued, 4),
                    ],
                    3,
                ),
                spend: "spend: $0.0400 over 4 trials".into(),
                spans,
            })),
            running: vec![running("s1", 4, "live"), running("s1", 5, "gone")],
            workers,
        }
    }

    #[test]
    fn busy_time_is_the_union_of_the_finished_trials_spans() {
        assert_eq!(busy_ms(&[]), 0);
        assert_eq!(busy_ms(&[(0, 10), (5, 20), (30, 40)]), 30);
        assert_eq!(busy_ms(&[(30, 40), (0, 10), (10, 12)]), 22);
        // A span recorded backwards (a clock step) counts as nothing.
        assert_eq!(busy_ms(&[(50, 40)]), 0);
        assert_eq!(pace_eta_ms(0, 100, 3), None);
        assert_eq!(pace_eta_ms(4, 100, 0), None);
        assert_eq!(pace_eta_ms(4, 240_000, 6), Some(360_000));
    }

    /// 4 finished trials kept the workers busy for 4 minutes (the idle hour between the two
    /// batches is not counted): 1 minute per trial, so 6 minutes for the 6 unfinished. The
    /// same an hour later with nothing finished in between: the ETA does not drift while idle.
    #[test]
    fn the_eta_comes_from_finished_trials_and_does_not_drift_while_idle() {
        let s = snapshot(vec![worker("live", NOW - SEC, false)]);
        let eta = |text: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with("ETA:"))
                .map(str::to_string)
                .unwrap_or_default()
        };
        let now = render(&s, NOW);
        assert!(
            eta(&now).contains(
                "ETA: about 6m for the 6 unfinished trials, at the pace of its 4 finished"
            ),
            "{now}"
        );
        let later = snapshot(vec![worker("live", NOW + 3600 * SEC - SEC, false)]);
        let later = render(&later, NOW + 3600 * SEC);
        assert_eq!(eta(&now), eta(&later), "{later}");
    }

    /// Past three missed heartbeats (15 s at a 5 s heartbeat) a worker is dead, and the trial
    /// it was running waits for re-run instead of counting as running; at exactly 15 s it is
    /// still alive.
    #[test]
    fn a_worker_past_three_missed_heartbeats_is_dead_and_its_trials_wait_for_re_run() {
        let workers = || {
            vec![
                worker("live", NOW - SEC, false),
                worker("gone", NOW - 15 * SEC, false),
            ]
        };
        let text = render(&snapshot(workers()), NOW);
        assert!(!text.contains("dead"), "{text}");
        assert!(text.contains("2 running, 4 queued"), "{text}");
        let text = render(&snapshot(workers()), NOW + 1);
        assert!(
            text.contains("  gone (host h, pid 7): dead: silent past 3 missed heartbeats of 5s, last heartbeat 15s ago"),
            "{text}"
        );
        assert!(
            text.contains("  live (host h, pid 7): alive, last heartbeat 1s ago"),
            "{text}"
        );
        assert!(
            text.contains("1 running, 1 waiting for re-run (their worker is gone), 4 queued"),
            "{text}"
        );
        let rerun = text
            .split("waiting for re-run (a live worker")
            .nth(1)
            .unwrap_or("");
        assert!(
            rerun.contains(
                "s1/t/m#5 attempt 1: its worker gone is presumed dead (last heartbeat 15s ago)"
            ),
            "{text}"
        );
        let running = text.split("running:").nth(1).unwrap_or("");
        assert!(running.contains("s1/t/m#4 attempt 1 on live"), "{text}");
        assert!(
            !running
                .split("waiting for re-run")
                .next()
                .unwrap_or("")
                .contains("#5"),
            "{text}"
        );
        // A stopped worker's trial and an unknown worker's wait too.
        let text = render(&snapshot(vec![worker("live", NOW - 40 * SEC, true)]), NOW);
        assert!(text.contains("its worker live stopped"), "{text}");
        assert!(
            text.contains("its worker gone has not been seen for 24 hours"),
            "{text}"
        );
        assert!(text.contains("no live worker is taking trials"), "{text}");
    }

    #[test]
    fn a_cancelled_sweep_shows_no_eta_and_its_cancelled_count() {
        let mut s = snapshot(vec![]);
        s.running.clear();
        s.jobs_waiting = 0;
        if let View::Sweep(detail) = &mut s.view {
            detail.row.cancelled = true;
            detail.counts = counts(&[(TrialState::Done, 4), (TrialState::Cancelled, 6)], 3);
        }
        let text = render(&s, NOW);
        assert!(text.contains("jobs waiting: 0\n"), "{text}");
        assert!(text.contains("sweep s1 (cancelled)"), "{text}");
        assert!(text.contains(", 6 cancelled"), "{text}");
        assert!(!text.contains("ETA"), "{text}");
    }
}
