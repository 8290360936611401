//! `/cost`: what the session's requests used and cost, by model, from the session's ledger
//! (the reducer's [`Cost`]): tokens, cache hit rate, USD with how it is known, and the hard
//! budget left. Unknown pricing reads `n/a`, never `$0`.

use std::fmt::Write;

use anvil_agent::session::{Cost, SessionState};
use anvil_llm::Usage;

use crate::cli::sessions::usd_label;

/// The `/cost` text. `limit`: the hard budget and what was spent against it.
pub fn report(state: &SessionState, limit: Option<(f64, f64)>) -> String {
    let mut out = String::new();
    if state.cost_by_model.is_empty() {
        out.push_str("no model requests yet\n");
    }
    let width = state
        .cost_by_model
        .keys()
        .map(|m| m.chars().count())
        .max()
        .unwrap_or(0)
        .max("total".len());
    for (model, spend) in &state.cost_by_model {
        let _ = writeln!(
            out,
            "{model:<width$}  {}  {}",
            line(&spend.usage, spend.responses),
            usd(&spend.cost)
        );
    }
    if state.cost_by_model.len() > 1 {
        let _ = writeln!(
            out,
            "{:<width$}  {}  {}",
            "total",
            line(&state.usage, state.responses),
            usd(&state.cost)
        );
    }
    if let Some((max, spent)) = limit {
        let _ = writeln!(
            out,
            "budget: {} of ${max} spent, {} left (requests are admitted against it)",
            usd_label(spent),
            usd_label((max - spent).max(0.0))
        );
    }
    out
}

fn line(usage: &Usage, responses: u64) -> String {
    let total = usage.total_input();
    let hit = if total == 0 {
        "n/a".to_string()
    } else {
        format!("{:.0} %", usage.cache_read as f64 * 100.0 / total as f64)
    };
    format!(
        "{responses} response{} · {total} in ({} cache read, {} cache write) · {} out · cache hit {hit}",
        if responses == 1 { "" } else { "s" },
        usage.cache_read,
        usage.cache_write,
        usage.output
    )
}

/// A ledger's USD: `n/a` when a response had no price, `≥` when some did, `~` with estimates.
fn usd(cost: &Cost) -> String {
    match (cost.total(), cost.priced + cost.estimated) {
        (None, 0) => "n/a".into(),
        (None, _) => format!("≥{} (some responses unpriced)", usd_label(cost.spent())),
        (Some(total), _) if cost.is_estimated() => format!("~{} (estimated)", usd_label(total)),
        (Some(total), _) => usd_label(total),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anvil_agent::session::Record;

    fn state(records: Vec<Record>) -> SessionState {
        let mut s = SessionState::default();
        let mut messages = Vec::new();
        for r in records {
            s.apply(&mut messages, r).unwrap();
        }
        s
    }

    fn usage(input: u64, cache_read: u64, output: u64) -> Usage {
        Usage {
            input,
            output,
            cache_read,
            cache_write: 0,
        }
    }

    #[test]
    fn cost_is_by_model_with_hit_rate_and_never_a_made_up_zero() {
        let s = state(vec![
            Record::ModelChanged {
                model: "priced".into(),
            },
            Record::CostReserved { usd: 0.5 },
            Record::Usage {
                usage: usage(100, 300, 50),
                cost_usd: Some(0.012),
                estimated: false,
            },
            Record::CostReserved { usd: 0.5 },
            Record::CostEstimated { usd: 0.002 },
            Record::ModelChanged {
                model: "local".into(),
            },
            Record::Usage {
                usage: usage(10, 0, 5),
                cost_usd: None,
                estimated: false,
            },
        ]);
        let text = report(&s, Some((1.0, 0.014)));
        assert_eq!(
            text,
            "\
local   1 response · 10 in (0 cache read, 0 cache write) · 5 out · cache hit 0 %  n/a
priced  1 response · 400 in (300 cache read, 0 cache write) · 50 out · cache hit 75 %  ~$0.0140 (estimated)
total   2 responses · 410 in (300 cache read, 0 cache write) · 55 out · cache hit 73 %  ≥$0.0140 (some responses unpriced)
budget: $0.0140 of $1 spent, $0.9860 left (requests are admitted against it)
"
        );
    }

    #[test]
    fn a_killed_request_keeps_its_reservation() {
        let s = state(vec![
            Record::ModelChanged { model: "m".into() },
            Record::CostReserved { usd: 0.25 },
        ]);
        assert_eq!(s.cost.spent(), 0.25);
        assert!(report(&s, None).ends_with("~$0.2500 (estimated)\n"));
        // Resumed: the next request's reservation keeps the old one as an estimate.
        let s = state(vec![
            Record::ModelChanged { model: "m".into() },
            Record::CostReserved { usd: 0.25 },
            Record::CostReserved { usd: 0.5 },
            Record::Usage {
                usage: usage(1, 0, 1),
                cost_usd: Some(0.01),
                estimated: false,
            },
        ]);
        assert!((s.cost.spent() - 0.26).abs() < 1e-12);
        assert_eq!(s.cost_by_model["m"].cost, s.cost);
    }
}
