//! Uncertainty. Tasks are the unit of sampling (Miller 2024, "Adding Error Bars to Evals"):
//! a model's score is the mean over tasks of a per-task estimate, and its interval comes from the
//! spread across tasks — a clustered standard error with a Student-t quantile, and a seeded
//! bootstrap over tasks. A single proportion gets a Wilson interval.
//!
//! An interval from the spread across tasks has zero width when every task has the same
//! estimate (every task 0 of 8, or 8 of 8): the tasks then say nothing about the spread, not that
//! there is none. [`over_tasks`] falls back, in that case, to the Wilson interval of the pooled
//! trials ([`pooled`]), so the interval still reflects how many trials were run.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::metric::Metric;

/// A two-sided interval around an estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

impl Interval {
    /// The interval cut to `[lo, hi]`: a mean of proportions cannot leave [0, 1].
    pub fn clamp(self, lo: f64, hi: f64) -> Interval {
        Interval {
            low: self.low.clamp(lo, hi),
            high: self.high.clamp(lo, hi),
        }
    }

    pub fn excludes_zero(&self) -> bool {
        self.low > 0.0 || self.high < 0.0
    }
}

/// The 95% normal quantile.
pub const Z95: f64 = 1.959_963_984_540_054;

/// Wilson score interval for `successes` out of `n` (95% with `z = Z95`).
pub fn wilson(successes: u64, n: u64, z: f64) -> Option<Interval> {
    if n == 0 || successes > n {
        return None;
    }
    let n = n as f64;
    let p = successes as f64 / n;
    let z2 = z * z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    Some(Interval {
        low: (centre - half).max(0.0),
        high: (centre + half).min(1.0),
    })
}

/// Mean and sample standard deviation.
pub fn mean_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mean = values.iter().sum::<f64>() / n;
    if values.len() < 2 {
        return (mean, f64::NAN);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// The 95% interval for a mean over tasks, from the clustered standard error (tasks are the
/// clusters) and a t quantile with `tasks - 1` degrees of freedom. `None` with fewer than two
/// tasks: one task says nothing about the spread.
pub fn clustered_mean(per_task: &[f64]) -> Option<(f64, Interval)> {
    if per_task.len() < 2 {
        return None;
    }
    let (mean, sd) = mean_sd(per_task);
    let se = sd / (per_task.len() as f64).sqrt();
    let t = StudentsT::new(0.0, 1.0, (per_task.len() - 1) as f64)
        .ok()?
        .inverse_cdf(0.975);
    Some((
        mean,
        Interval {
            low: mean - t * se,
            high: mean + t * se,
        },
    ))
}

/// Whether `values` have no spread: all the same, so an interval from their spread would have
/// zero width. (Equal per-task estimates are computed alike, so they are equal exactly; the
/// tolerance only absorbs rounding in differences of them.)
pub fn no_spread(values: &[f64]) -> bool {
    values.windows(2).all(|w| (w[0] - w[1]).abs() <= 1e-12)
}

/// The 95% interval of a metric from the pooled trials of the tasks it was estimated on: the
/// Wilson interval of `passed` of `graded` for the per-trial pass rate p, mapped through the
/// metric as a function of p ([`Metric::at_rate`]: p for pass@1, p^k for pass^k, 1 − (1 − p)^k
/// for pass@k; each increasing in p), and widened to take in `estimate` should it fall outside
/// (pass^k's unbiased per-task estimate lies below p^k, so it can, for a rate strictly between 0
/// and 1). `None` without a graded trial.
///
/// This is the fallback of [`over_tasks`] when every task has the same estimate: the pooled
/// trials are then the only measure of the uncertainty left. At 0 of 8 trials it is [0, 0.324]
/// for pass@1; at 8 of 8, [0.676, 1].
pub fn pooled(metric: Metric, passed: u64, graded: u64, estimate: f64) -> Option<Interval> {
    let rate = wilson(passed, graded, Z95)?;
    Some(Interval {
        low: metric.at_rate(rate.low).min(estimate).clamp(0.0, 1.0),
        high: metric.at_rate(rate.high).max(estimate).clamp(0.0, 1.0),
    })
}

/// The 95% interval of a model's `metric`, the mean of `per_task` (each task's estimate):
/// the clustered interval over tasks ([`clustered_mean`], cut to [0, 1]) — or, when every task
/// has the same estimate (no spread, so that interval would have zero width, e.g. every task at
/// 0% or 100%), the Wilson interval of the pooled trials of those tasks (`passed` of `graded`)
/// mapped to the metric ([`pooled`]). `None` with fewer than two tasks, as for the clustered
/// interval: one task says nothing about the spread.
pub fn over_tasks(metric: Metric, per_task: &[f64], passed: u64, graded: u64) -> Option<Interval> {
    let (mean, ci) = clustered_mean(per_task)?;
    if no_spread(per_task) {
        return pooled(metric, passed, graded, mean);
    }
    Some(ci.clamp(0.0, 1.0))
}

/// SplitMix64: a small, fixed, seeded generator, so a bootstrap gives the same interval on
/// every run and every machine.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by rejection so there is no modulo bias.
    pub fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let v = self.next_u64();
            if v < zone {
                return v % n;
            }
        }
    }
}

/// A percentile bootstrap (95%) of the mean over tasks: tasks are resampled with replacement.
pub fn bootstrap_mean(per_task: &[f64], resamples: usize, seed: u64) -> Option<Interval> {
    if per_task.len() < 2 || resamples == 0 {
        return None;
    }
    let mut rng = SplitMix64::new(seed);
    let n = per_task.len();
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| {
            let mut sum = 0.0;
            for _ in 0..n {
                sum += per_task[rng.below(n as u64) as usize];
            }
            sum / n as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * (resamples - 1) as f64).round() as usize).min(resamples - 1)];
    Some(Interval {
        low: at(0.025),
        high: at(0.975),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_known_values() {
        // 0 of 10: the upper bound is well above 0 (a Wald interval would say [0, 0]).
        let w = wilson(0, 10, Z95).unwrap();
        assert_eq!(w.low, 0.0);
        assert!((w.high - 0.2775).abs() < 1e-3, "{w:?}");
        let w = wilson(5, 10, Z95).unwrap();
        assert!(
            (w.low - 0.2366).abs() < 1e-3 && (w.high - 0.7634).abs() < 1e-3,
            "{w:?}"
        );
        assert!(wilson(1, 0, Z95).is_none());
        assert!(wilson(3, 2, Z95).is_none());
    }

    #[test]
    fn clustered_interval_uses_the_task_spread() {
        let (mean, ci) = clustered_mean(&[0.0, 1.0, 0.0, 1.0]).unwrap();
        assert_eq!(mean, 0.5);
        // sd = 0.5774, se = 0.2887, t(3) = 3.182
        assert!(
            (ci.high - (0.5 + 3.182_446 * 0.288_675)).abs() < 1e-4,
            "{ci:?}"
        );
        assert!(clustered_mean(&[1.0]).is_none());
        let (_, ci) = clustered_mean(&[0.7, 0.7, 0.7]).unwrap();
        assert!(
            (ci.low - 0.7).abs() < 1e-12 && (ci.high - 0.7).abs() < 1e-12,
            "{ci:?}"
        );
    }

    /// The fallback's test vectors, computed independently with these formulas (Python 3, no
    /// libraries beyond `math`):
    ///
    /// ```text
    /// z = 1.959963984540054
    /// def wilson(c, n):
    ///     p = c / n; z2 = z * z
    ///     centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    ///     half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    ///     return max(0, centre - half), min(1, centre + half)
    /// wilson(0, 8)  -> (0, 0.324407564883880)     # = z² / (8 + z²)
    /// wilson(8, 8)  -> (0.675592435116120, 1)
    /// wilson(4, 8)  -> (0.215216062213878, 0.784783937786122)
    /// ```
    ///
    /// and for a mixed case with spread, the clustered interval: rates 3/8, 4/8, 5/8, 4/8, 4/8,
    /// mean 0.5, sd = sqrt(2 × 0.125² / 4), se = sd / sqrt(5), t(4 df, 0.975) = 2.7764451051979
    /// (bisection on the t CDF, Simpson's rule on its density): [0.390251370864359,
    /// 0.609748629135641].
    #[test]
    fn intervals_over_tasks_never_collapse_at_0_or_100_percent() {
        fn close(a: Interval, low: f64, high: f64) -> bool {
            (a.low - low).abs() < 1e-12 && (a.high - high).abs() < 1e-12
        }
        let p1 = Metric::PassAt(1);
        // Four tasks of 2 trials, all failed: 0 of 8 pooled.
        let ci = over_tasks(p1, &[0.0; 4], 0, 8).unwrap();
        assert!(close(ci, 0.0, 0.324_407_564_883_880), "{ci:?}");
        // All passed: 8 of 8.
        let ci = over_tasks(p1, &[1.0; 4], 8, 8).unwrap();
        assert!(close(ci, 0.675_592_435_116_120, 1.0), "{ci:?}");
        // Two tasks at 2 of 4: the same rate strictly inside, 4 of 8 pooled.
        let ci = over_tasks(p1, &[0.5, 0.5], 4, 8).unwrap();
        assert!(
            close(ci, 0.215_216_062_213_878, 0.784_783_937_786_122),
            "{ci:?}"
        );
        // Tasks that differ keep the clustered interval.
        let rates = [3.0 / 8.0, 0.5, 5.0 / 8.0, 0.5, 0.5];
        let ci = over_tasks(p1, &rates, 20, 40).unwrap();
        assert!(
            close(ci, 0.390_251_370_864_359, 0.609_748_629_135_641),
            "{ci:?}"
        );
        // pass@k and pass^k map the rate's interval: pass@3 at 0 of 8 is [0, 1 − (1 − u)³],
        // pass^3 at 8 of 8 is [l³, 1].
        let u: f64 = 0.324_407_564_883_880;
        let ci = over_tasks(Metric::PassAt(3), &[0.0; 4], 0, 8).unwrap();
        assert!(close(ci, 0.0, 1.0 - (1.0 - u).powi(3)), "{ci:?}");
        let l: f64 = 0.675_592_435_116_120;
        let ci = over_tasks(Metric::PassHat(3), &[1.0; 4], 8, 8).unwrap();
        assert!(close(ci, l.powi(3), 1.0), "{ci:?}");
        // One task says nothing about the spread, as before.
        assert_eq!(over_tasks(p1, &[1.0], 8, 8), None);
        // Without a graded trial there is nothing to pool.
        assert_eq!(over_tasks(p1, &[0.0, 0.0], 0, 0), None);
    }

    /// The pooled interval always holds the estimate, even pass^k's unbiased one, which lies
    /// below p^k for a rate strictly between 0 and 1.
    #[test]
    fn the_pooled_interval_holds_its_estimate() {
        // 100 tasks at 4 of 8: pass^3 per task is C(4,3)/C(8,3) = 4/56; p = 0.5, p³ = 0.125,
        // and the pooled interval for p (400 of 800) is narrow: [0.465, 0.535]³ misses 4/56.
        let estimate = 4.0 / 56.0;
        let ci = pooled(Metric::PassHat(3), 400, 800, estimate).unwrap();
        assert_eq!(ci.low, estimate);
        assert!(ci.high > 0.125 && ci.high < 0.16, "{ci:?}");
        assert!(no_spread(&[0.25, 0.25, 0.25]) && no_spread(&[0.7]) && no_spread(&[]));
        assert!(!no_spread(&[0.25, 0.25, 0.5]));
    }

    #[test]
    fn bootstrap_is_seeded_and_sensible() {
        let tasks: Vec<f64> = (0..50)
            .map(|i| if i % 4 == 0 { 0.0 } else { 1.0 })
            .collect();
        let a = bootstrap_mean(&tasks, 2000, 7).unwrap();
        let b = bootstrap_mean(&tasks, 2000, 7).unwrap();
        assert_eq!(a, b);
        assert!(
            a.low < 0.74 && a.high > 0.74 && a.low > 0.5 && a.high < 0.95,
            "{a:?}"
        );
        assert_ne!(a, bootstrap_mean(&tasks, 2000, 8).unwrap());
    }
}
