//! The metrics a report shows per model: pass@k and pass^k, each estimated per task (see
//! [`crate::estimators`]) and then averaged over tasks.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::estimators::{EstimatorError, pass_at_k, pass_hat_k};

/// One metric, shown as `pass@k` or `pass^k`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// pass@k: at least one of k trials passes.
    PassAt(u32),
    /// pass^k: all k trials pass.
    PassHat(u32),
}

impl Metric {
    pub fn k(self) -> u32 {
        match self {
            Metric::PassAt(k) | Metric::PassHat(k) => k,
        }
    }

    /// The estimate for one task with `n` graded trials of which `c` passed.
    pub fn estimate(self, n: u32, c: u32) -> Result<f64, EstimatorError> {
        match self {
            Metric::PassAt(k) => pass_at_k(n, c, i64::from(k)),
            Metric::PassHat(k) => pass_hat_k(n, c, i64::from(k)),
        }
    }

    /// The metric for a task whose every trial passes independently with probability `p`:
    /// `p` for pass@1, `p^k` for pass^k, `1 − (1 − p)^k` for pass@k. Increasing in `p`, so an
    /// interval for `p` maps to one for the metric ([`crate::intervals::pooled`]).
    pub fn at_rate(self, p: f64) -> f64 {
        let p = p.clamp(0.0, 1.0);
        match self {
            Metric::PassAt(1) | Metric::PassHat(1) => p,
            Metric::PassAt(k) => 1.0 - (1.0 - p).powf(f64::from(k)),
            Metric::PassHat(k) => p.powf(f64::from(k)),
        }
    }

    /// The metrics a report shows for `ks`: pass@1 always, then pass@k and then pass^k for each
    /// distinct k above 1, ascending. (pass^1 is pass@1, so it is not shown twice.)
    pub fn for_ks(ks: &[u32]) -> Vec<Metric> {
        let mut ks: Vec<u32> = ks.iter().copied().filter(|&k| k > 1).collect();
        ks.sort_unstable();
        ks.dedup();
        let mut metrics = vec![Metric::PassAt(1)];
        metrics.extend(ks.iter().map(|&k| Metric::PassAt(k)));
        metrics.extend(ks.iter().map(|&k| Metric::PassHat(k)));
        metrics
    }
}

/// The k values of pass@k and pass^k shown when none are asked for (`-k`, a sweep file's `k`),
/// before [`default_ks`] leaves out those above the trials run.
pub const DEFAULT_KS: [u32; 3] = [1, 3, 5];

/// The k values a report shows by default for trials run `trials_per_task` times per task (and
/// model and variant): [`DEFAULT_KS`] up to `trials_per_task` — a k above it could not be
/// estimated for any task — and always 1. The one rule for `anvil-evals run`'s final report and
/// `anvil-evals report`.
pub fn default_ks(trials_per_task: u32) -> Vec<u32> {
    DEFAULT_KS
        .into_iter()
        .filter(|&k| k == 1 || k <= trials_per_task)
        .collect()
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Metric::PassAt(k) => write!(f, "pass@{k}"),
            Metric::PassHat(k) => write!(f, "pass^{k}"),
        }
    }
}

/// As its name (`"pass^3"`): the JSON report's layout.
impl Serialize for Metric {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_at_1_always_then_pass_at_then_pass_hat_ascending_without_repeats() {
        assert_eq!(
            Metric::for_ks(&[5, 1, 3, 5, 0]),
            [
                Metric::PassAt(1),
                Metric::PassAt(3),
                Metric::PassAt(5),
                Metric::PassHat(3),
                Metric::PassHat(5),
            ]
        );
        assert_eq!(Metric::for_ks(&[]), [Metric::PassAt(1)]);
    }

    #[test]
    fn default_ks_never_exceed_the_trials_per_task() {
        assert_eq!(default_ks(0), [1]);
        assert_eq!(default_ks(1), [1]);
        assert_eq!(default_ks(2), [1]);
        assert_eq!(default_ks(3), [1, 3]);
        assert_eq!(default_ks(4), [1, 3]);
        assert_eq!(default_ks(5), [1, 3, 5]);
        assert_eq!(default_ks(50), [1, 3, 5]);
        for n in 0..20 {
            assert!(default_ks(n).iter().all(|&k| k == 1 || k <= n), "{n}");
        }
    }

    #[test]
    fn at_rate_is_the_metric_of_a_common_pass_rate() {
        for p in [0.0, 0.3, 1.0] {
            assert_eq!(Metric::PassAt(1).at_rate(p), p);
        }
        assert!((Metric::PassHat(3).at_rate(0.5) - 0.125).abs() < 1e-15);
        assert!((Metric::PassAt(3).at_rate(0.5) - 0.875).abs() < 1e-15);
        assert_eq!(Metric::PassAt(5).at_rate(0.0), 0.0);
        assert_eq!(Metric::PassHat(5).at_rate(1.0), 1.0);
    }

    #[test]
    fn shown_and_serialized_by_name() {
        assert_eq!(Metric::PassAt(1).to_string(), "pass@1");
        assert_eq!(Metric::PassHat(3).to_string(), "pass^3");
        assert_eq!(
            serde_json::to_string(&Metric::PassHat(3)).unwrap(),
            "\"pass^3\""
        );
    }

    #[test]
    fn pass_hat_is_estimated_as_pass_hat_and_pass_at_as_pass_at() {
        // n = 5, c = 3, k = 3: pass^3 = C(3,3)/C(5,3) = 0.1; pass@3 = 1 (n - c < k).
        assert!((Metric::PassHat(3).estimate(5, 3).unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(Metric::PassAt(3).estimate(5, 3).unwrap(), 1.0);
        assert_eq!(
            Metric::PassAt(6).estimate(5, 3),
            Err(EstimatorError::KAboveN { k: 6, n: 5 })
        );
    }
}
