//! Uncertainty. Tasks are the unit of sampling (Miller 2024, "Adding Error Bars to Evals"):
//! a model's score is the mean over tasks of a per-task estimate, and its interval comes from the
//! spread across tasks — a clustered standard error with a Student-t quantile, and a seeded
//! bootstrap over tasks. A single proportion gets a Wilson interval.

use serde::Serialize;
use statrs::distribution::{ContinuousCDF, StudentsT};

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
