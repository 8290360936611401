//! Adaptive trials (`anvil-evals run --target-ci-width W --max-trials N`): after the first round
//! of trials, more rounds are run only for the (task, model, variant) cells whose interval is
//! still wide, so trials go where the uncertainty is.
//!
//! **The stopping rule.** Trials come in rounds of `round` (the sweep's `--trials`). After each
//! round a cell with `c` passes out of `n` graded trials goes on to another round while the full
//! width (high − low) of its 95% Wilson interval is above `target_ci_width` and `n` is below
//! `max_trials` (the last round is cut to end at `max_trials`). [`Design::goes_on`] is that rule,
//! the one both the runner (deciding) and the reporter (estimating) use.
//!
//! **Why the usual estimators would be biased, and what is used instead.** Under a stopping rule
//! that looks at the outcomes, `c / n` is no longer unbiased (a cell that happened to start well
//! stops early, keeping its lucky start). For a sequential Bernoulli plan the unbiased estimator
//! is known (Girshick, Mosteller & Savage 1946): of the outcome sequences the plan could have
//! produced ending at the observed `(c, n)`, the share whose first trial passed. This module
//! generalizes it to every metric: pass^k is the share of those sequences whose first `k`
//! trials all passed, pass@k one minus the share whose first `k` all failed (the first `k`
//! trials are always run, as `k ≤ round`). Each is the Rao–Blackwellization of an unbiased
//! estimator (the first `k` outcomes) on the plan's sufficient statistic, so it is unbiased, and
//! for a plan of one round it is exactly the usual `C(c, k) / C(n, k)` and
//! `1 − C(n − c, k) / C(n, k)`. The counts come from a dynamic program over round ends.

use serde::{Deserialize, Serialize};

use crate::intervals::{Z95, wilson};
use crate::metric::Metric;

/// An adaptive sweep's design, carried by each of its trial records (`adaptive`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Design {
    /// Trials per round (the first round included).
    pub round: u32,
    /// Another round while the cell's 95% Wilson interval is wider (high − low) than this.
    pub target_ci_width: f64,
    /// Never more graded trials in a cell than this.
    pub max_trials: u32,
}

/// Why a design cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DesignError {
    #[error("--target-ci-width must be above 0 and at most 1 (got {0})")]
    Width(f64),
    #[error("--max-trials ({max}) must be at least --trials ({round})")]
    MaxBelowRound { max: u32, round: u32 },
    #[error("--max-trials must be at most {MAX_TRIALS} (got {0})")]
    TooMany(u32),
}

/// The most trials a cell may get (the path counts stay exact in f64 well beyond this).
pub const MAX_TRIALS: u32 = 200;

impl Design {
    pub fn new(round: u32, target_ci_width: f64, max_trials: u32) -> Result<Design, DesignError> {
        if !(target_ci_width > 0.0 && target_ci_width <= 1.0) {
            return Err(DesignError::Width(target_ci_width));
        }
        if max_trials < round.max(1) {
            return Err(DesignError::MaxBelowRound {
                max: max_trials,
                round,
            });
        }
        if max_trials > MAX_TRIALS {
            return Err(DesignError::TooMany(max_trials));
        }
        Ok(Design {
            round: round.max(1),
            target_ci_width,
            max_trials,
        })
    }

    /// The full width of the 95% Wilson interval of `c` passes in `n`.
    pub fn width(c: u32, n: u32) -> f64 {
        wilson(c.into(), n.into(), Z95).map_or(1.0, |i| i.high - i.low)
    }

    /// Whether a cell with `c` passes in `n` graded trials gets another round.
    pub fn goes_on(&self, c: u32, n: u32) -> bool {
        n < self.max_trials && Self::width(c, n) > self.target_ci_width
    }

    /// Trials in the next round of a cell that has `n`.
    pub fn next_round(&self, n: u32) -> u32 {
        self.round.min(self.max_trials.saturating_sub(n))
    }

    /// The round ends (cumulative trial counts) a cell passes on its way to `n`, `n` last;
    /// `None` when no cell of this design can end at `n`.
    fn ends(&self, n: u32) -> Option<Vec<u32>> {
        let mut ends = vec![self.round.min(self.max_trials)];
        while *ends.last()? < n {
            let last = *ends.last()?;
            let next = last + self.next_round(last);
            if next == last {
                return None;
            }
            ends.push(next);
        }
        (*ends.last()? == n).then_some(ends)
    }

    /// The unbiased estimate of `metric` for a cell that stopped at `c` passes in `n` graded
    /// trials under this design; `None` when this design cannot have stopped there (e.g. an
    /// infrastructure failure left the cell with a count between round ends, or the rule
    /// would have gone on), or `k` is above the first round.
    pub fn estimate(&self, metric: Metric, n: u32, c: u32) -> Option<f64> {
        let k = metric.k();
        let ends = self.ends(n)?;
        if c > n || k > ends[0] || k == 0 {
            return None;
        }
        // The plan ends here only if the rule stops at (c, n) (or n is the cap).
        if self.goes_on(c, n) {
            return None;
        }
        let all = self.paths(&ends, c, First::Any)?;
        if all <= 0.0 {
            return None;
        }
        let value = match metric {
            Metric::PassHat(_) => self.paths(&ends, c, First::Passed(k))? / all,
            Metric::PassAt(_) => 1.0 - self.paths(&ends, c, First::Failed(k))? / all,
        };
        Some(value.clamp(0.0, 1.0))
    }

    /// How many outcome sequences of this plan reach `c` passes at the last of `ends` without
    /// stopping at an earlier round end, their first trials as `first` says.
    fn paths(&self, ends: &[u32], c: u32, first: First) -> Option<f64> {
        let first_round = ends[0];
        // paths[x]: sequences reaching x passes at the current round end.
        let mut paths: Vec<f64> = (0..=first_round)
            .map(|x| match first {
                First::Any => binomial(first_round, x),
                First::Passed(k) if x >= k => binomial(first_round - k, x - k),
                First::Failed(k) if first_round - x >= k => binomial(first_round - k, x),
                _ => 0.0,
            })
            .collect();
        for pair in ends.windows(2) {
            let (at, next) = (pair[0], pair[1]);
            let size = next - at;
            let mut after = vec![0.0; next as usize + 1];
            for (x, &count) in paths.iter().enumerate() {
                // Only sequences the rule lets go on reach the next round.
                if count == 0.0 || !self.goes_on(x as u32, at) {
                    continue;
                }
                for y in 0..=size {
                    after[x + y as usize] += count * binomial(size, y);
                }
            }
            paths = after;
        }
        paths.get(c as usize).copied()
    }
}

/// What the first trials of the counted sequences must be.
#[derive(Debug, Clone, Copy)]
enum First {
    Any,
    Passed(u32),
    Failed(u32),
}

/// C(n, k) as f64 (exact up to 2^53).
fn binomial(n: u32, k: u32) -> f64 {
    if k > n {
        return 0.0;
    }
    let k = k.min(n - k);
    let mut out = 1.0f64;
    for i in 0..k {
        out = out * f64::from(n - i) / f64::from(i + 1);
    }
    out.round()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intervals::SplitMix64;

    fn design(round: u32, width: f64, max: u32) -> Design {
        Design::new(round, width, max).unwrap()
    }

    /// Every stopping point of the plan with its probability under pass rate `p`.
    fn stopping_points(d: &Design, p: f64) -> Vec<(u32, u32, f64)> {
        let mut out = Vec::new();
        // (c, n, probability of reaching (c, n) at a round end without stopping before)
        let mut frontier: Vec<(u32, f64)> = (0..=d.round)
            .map(|c| {
                (
                    c,
                    binomial(d.round, c) * p.powi(c as i32) * (1.0 - p).powi((d.round - c) as i32),
                )
            })
            .collect();
        let mut n = d.round;
        loop {
            let mut next: std::collections::BTreeMap<u32, f64> = Default::default();
            let size = d.next_round(n);
            for &(c, prob) in &frontier {
                if !d.goes_on(c, n) {
                    out.push((c, n, prob));
                    continue;
                }
                for y in 0..=size {
                    let q =
                        binomial(size, y) * p.powi(y as i32) * (1.0 - p).powi((size - y) as i32);
                    *next.entry(c + y).or_default() += prob * q;
                }
            }
            if next.is_empty() {
                break;
            }
            n += size;
            frontier = next.into_iter().collect();
        }
        out
    }

    #[test]
    fn the_estimators_are_unbiased_under_the_stopping_rule() {
        for d in [design(3, 0.5, 15), design(2, 0.3, 12), design(5, 0.4, 20)] {
            for p in [0.0, 0.05, 0.2, 0.5, 0.7, 0.95, 1.0] {
                let points = stopping_points(&d, p);
                let total: f64 = points.iter().map(|x| x.2).sum();
                assert!((total - 1.0).abs() < 1e-9, "{d:?} p={p}: {total}");
                for (metric, truth) in [
                    (Metric::PassAt(1), p),
                    (Metric::PassHat(2), p * p),
                    (Metric::PassAt(2), 1.0 - (1.0 - p) * (1.0 - p)),
                ] {
                    let expected: f64 = points
                        .iter()
                        .map(|&(c, n, prob)| {
                            prob * d
                                .estimate(metric, n, c)
                                .unwrap_or_else(|| panic!("{d:?}: no estimate at ({c}, {n})"))
                        })
                        .sum();
                    assert!(
                        (expected - truth).abs() < 1e-9,
                        "{d:?} {metric} p={p}: E = {expected}, truth {truth}"
                    );
                    // The naive c/n is biased under this rule (shown for pass@1).
                }
            }
        }
    }

    #[test]
    fn the_naive_rate_is_biased_under_the_same_rule() {
        let d = design(2, 0.3, 12);
        let p = 0.3;
        let naive: f64 = stopping_points(&d, p)
            .iter()
            .map(|&(c, n, prob)| prob * f64::from(c) / f64::from(n))
            .sum();
        assert!((naive - p).abs() > 1e-3, "naive E = {naive}");
    }

    #[test]
    fn one_round_gives_the_usual_estimators() {
        let d = design(5, 0.01, 5);
        for c in 0..=5 {
            for metric in [Metric::PassAt(1), Metric::PassAt(3), Metric::PassHat(3)] {
                let usual = metric.estimate(5, c).unwrap();
                let got = d.estimate(metric, 5, c).unwrap();
                assert!(
                    (usual - got).abs() < 1e-12,
                    "{metric} c={c}: {got} vs {usual}"
                );
            }
        }
    }

    #[test]
    fn counts_the_plan_cannot_end_at_have_no_estimate() {
        let d = design(3, 0.5, 12);
        assert_eq!(
            d.estimate(Metric::PassAt(1), 4, 2),
            None,
            "between round ends"
        );
        // 1 of 3 has a Wilson width of ~0.73 > 0.5: the plan would have gone on.
        assert_eq!(d.estimate(Metric::PassAt(1), 3, 1), None);
        assert_eq!(
            d.estimate(Metric::PassAt(4), 12, 6),
            None,
            "k above the first round"
        );
        assert!(d.estimate(Metric::PassAt(1), 12, 6).is_some(), "the cap");
    }

    #[test]
    fn bad_designs_are_refused() {
        assert!(Design::new(3, 0.0, 10).is_err());
        assert!(Design::new(3, 1.5, 10).is_err());
        assert!(Design::new(3, 0.3, 2).is_err());
        assert!(Design::new(3, 0.3, 500).is_err());
    }

    /// The simulated sweep of the README: 20 tasks of known pass rates, trials drawn with a
    /// seeded generator, the same target width. How many trials the adaptive plan spends against
    /// the fixed plan that reaches the width for every rate (n with a Wilson width ≤ W at 50%).
    #[test]
    fn adaptive_trials_spend_less_for_the_same_width() {
        let rates: Vec<f64> = [0.0, 0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98, 1.0, 1.0]
            .iter()
            .cycle()
            .take(20)
            .copied()
            .collect();
        let d = design(3, 0.4, 30);
        let fixed = (1..=d.max_trials)
            .find(|&n| Design::width(n / 2, n) <= d.target_ci_width)
            .unwrap();
        let mut rng = SplitMix64::new(7);
        let mut spent = 0u32;
        let mut widest: f64 = 0.0;
        for &p in &rates {
            let (mut c, mut n) = (0u32, 0u32);
            loop {
                for _ in 0..d.next_round(n) {
                    let draw = rng.next_u64() as f64 / u64::MAX as f64;
                    c += u32::from(draw < p);
                    n += 1;
                }
                if !d.goes_on(c, n) {
                    break;
                }
            }
            spent += n;
            widest = widest.max(Design::width(c, n));
        }
        let fixed_total = fixed * rates.len() as u32;
        eprintln!(
            "adaptive: {spent} trials (widest interval {widest:.3}); fixed: {fixed} × {} = {fixed_total}",
            rates.len()
        );
        assert!(spent < fixed_total, "{spent} < {fixed_total}");
    }
}
