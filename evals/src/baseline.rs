//! `report --baseline X`: what X names, in order — an existing results file; `last:PATTERN`,
//! the newest finished sweep whose id matches the glob (never one the reported trials come
//! from); or
//! a sweep id in the queue database (`--queue`, never created when missing).

use std::path::Path;

use anvil_report::{ReadOptions, Trials};
use anvil_runner::jobs::queue::{Db, utc_minute};
use anyhow::{Result, anyhow, bail};

use crate::history::sweep_glob;
use crate::sweeps::open_existing;

/// The baseline's trials and how to name it (the file, or `sweep ID`).
pub struct Baseline {
    pub trials: Trials,
    pub label: String,
}

/// Reads the baseline `given` names (see the module doc); `reported` are the sweeps the
/// reported trials come from (the `--sweep`, or every sweep a results file's records name),
/// which `last:` never picks: a sweep compared with itself can never regress. `last:` says on
/// stderr which sweep it picked.
pub async fn read(given: &str, queue: Option<&str>, reported: &[String]) -> Result<Baseline> {
    let path = Path::new(given);
    if path.exists() {
        let trials = Trials::read_file_with(path, ReadOptions::default())
            .map_err(|e| anyhow!("--baseline: {e}"))?;
        return Ok(Baseline {
            trials,
            label: path.display().to_string(),
        });
    }
    if let Some(pattern) = given.strip_prefix("last:") {
        let glob = sweep_glob(pattern, &format!("--baseline {given}"))?;
        let (db, location) = open_existing(queue, 2)
            .await
            .map_err(|e| anyhow!("--baseline {given}: {e:#}"))?;
        // Finished: no trial left, and for an adaptive sweep no round left either.
        let mut pick = None;
        for s in db.finished_sweeps().await? {
            if !glob.is_match(&s.id) || reported.contains(&s.id) {
                continue;
            }
            let pending = match db.sweep(&s.id).await? {
                Some(row) => anvil_runner::jobs::sweep::pending_rounds(&db, &row)
                    .await
                    .unwrap_or(0),
                None => 0,
            };
            if pending == 0 {
                pick = Some(s);
                break;
            }
        }
        let Some(pick) = pick else {
            let matching = db
                .sweeps()
                .await?
                .into_iter()
                .filter(|s| glob.is_match(&s.id))
                .count();
            if matching == 0 {
                bail!(
                    "--baseline {given}: no sweep in {location} matches '{pattern}' \
                     (`anvil-evals sweeps` lists them)"
                );
            }
            bail!(
                "--baseline {given}: none of the {matching} sweeps in {location} matching \
                 '{pattern}' is finished (not cancelled, with no trial queued, running or \
                 retrying, and no adaptive round pending){}",
                if reported.is_empty() {
                    String::new()
                } else {
                    format!(
                        " other than the sweeps being reported ({})",
                        reported.join(", ")
                    )
                }
            );
        };
        eprintln!(
            "anvil-evals: baseline: sweep {} (started {} UTC), the newest finished sweep matching '{pattern}'",
            pick.id,
            utc_minute(pick.created_at_ms)
        );
        return sweep(&db, &pick.id).await;
    }
    let (db, location) = open_existing(queue, 2).await.map_err(|e| {
        anyhow!("--baseline '{given}' is not a file, and there is no queue to find a sweep of that name in: {e:#}")
    })?;
    if db.sweep(given).await?.is_none() {
        bail!(
            "--baseline '{given}' is not a file, and there is no sweep '{given}' in {location} \
             (`anvil-evals sweeps` lists them; `last:PATTERN` picks the newest finished one \
             matching a glob)"
        );
    }
    sweep(&db, given).await
}

/// A sweep's records as the baseline.
async fn sweep(db: &Db, id: &str) -> Result<Baseline> {
    let records = db.records_jsonl(id).await?;
    let trials = Trials::read_with(records.as_bytes(), id, ReadOptions::default())
        .map_err(|e| anyhow!("--baseline: sweep {id}: {e}"))?;
    Ok(Baseline {
        trials,
        label: format!("sweep {id}"),
    })
}
