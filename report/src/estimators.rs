//! Unbiased per-task estimators from n trials with c passes.
//!
//! - pass@k, the chance that at least one of k trials passes (Chen et al. 2021):
//!   `1 - C(n-c, k) / C(n, k)`, computed as the stable product `1 - Π_{i=n-c+1..n} (1 - k/i)`;
//!   it is 1 when `n - c < k`.
//! - pass^k, the chance that all k trials pass (Yao et al. 2024): `C(c, k) / C(n, k)`, computed as
//!   `Π_{i=0..k-1} (c - i) / (n - i)`.
//!
//! Both are defined only for `0 < k <= n` and `c <= n`; anything else is an error, never a number.

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EstimatorError {
    #[error("k must be at least 1 (got {k})")]
    KNotPositive { k: i64 },
    #[error("k = {k} is more than the {n} trials run; run at least k trials per task")]
    KAboveN { k: u32, n: u32 },
    #[error("{c} passes out of {n} trials is impossible")]
    CAboveN { c: u32, n: u32 },
}

fn check(n: u32, c: u32, k: i64) -> Result<u32, EstimatorError> {
    if k <= 0 {
        return Err(EstimatorError::KNotPositive { k });
    }
    let k = u32::try_from(k).map_err(|_| EstimatorError::KAboveN { k: u32::MAX, n })?;
    if c > n {
        return Err(EstimatorError::CAboveN { c, n });
    }
    if k > n {
        return Err(EstimatorError::KAboveN { k, n });
    }
    Ok(k)
}

/// pass@k for one task.
pub fn pass_at_k(n: u32, c: u32, k: i64) -> Result<f64, EstimatorError> {
    let k = check(n, c, k)?;
    if n - c < k {
        return Ok(1.0);
    }
    let mut fail_all = 1.0;
    for i in (n - c + 1)..=n {
        fail_all *= 1.0 - f64::from(k) / f64::from(i);
    }
    Ok(1.0 - fail_all)
}

/// pass^k for one task.
pub fn pass_hat_k(n: u32, c: u32, k: i64) -> Result<f64, EstimatorError> {
    let k = check(n, c, k)?;
    let mut all = 1.0;
    for i in 0..k {
        if c < i + 1 {
            return Ok(0.0);
        }
        all *= f64::from(c - i) / f64::from(n - i);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn worked_values() {
        assert!(close(pass_at_k(5, 3, 1).unwrap(), 0.6));
        assert!(close(pass_at_k(5, 3, 2).unwrap(), 0.9));
        assert!(close(pass_hat_k(5, 3, 2).unwrap(), 0.3));
        assert!(close(pass_hat_k(5, 3, 1).unwrap(), 0.6));
        for k in 1..=10 {
            assert_eq!(pass_at_k(10, 0, k).unwrap(), 0.0);
            assert_eq!(pass_hat_k(10, 10, k).unwrap(), 1.0);
            assert_eq!(pass_hat_k(10, 0, k).unwrap(), 0.0);
        }
        // n - c < k: at least one of any k trials passes.
        assert_eq!(pass_at_k(5, 4, 2).unwrap(), 1.0);
    }

    #[test]
    fn matches_the_binomial_definition() {
        fn choose(n: u64, k: u64) -> f64 {
            if k > n {
                return 0.0;
            }
            (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
        }
        for n in 1..=12u32 {
            for c in 0..=n {
                for k in 1..=n {
                    let at = 1.0 - choose((n - c).into(), k.into()) / choose(n.into(), k.into());
                    let hat = choose(c.into(), k.into()) / choose(n.into(), k.into());
                    assert!(
                        (pass_at_k(n, c, k.into()).unwrap() - at).abs() < 1e-9,
                        "{n} {c} {k}"
                    );
                    assert!(
                        (pass_hat_k(n, c, k.into()).unwrap() - hat).abs() < 1e-9,
                        "{n} {c} {k}"
                    );
                }
            }
        }
    }

    #[test]
    fn invalid_inputs_are_errors() {
        assert_eq!(
            pass_at_k(5, 3, 0),
            Err(EstimatorError::KNotPositive { k: 0 })
        );
        assert_eq!(
            pass_at_k(5, 3, -1),
            Err(EstimatorError::KNotPositive { k: -1 })
        );
        assert_eq!(
            pass_at_k(5, 3, 6),
            Err(EstimatorError::KAboveN { k: 6, n: 5 })
        );
        assert_eq!(
            pass_hat_k(5, 6, 1),
            Err(EstimatorError::CAboveN { c: 6, n: 5 })
        );
    }

    #[test]
    fn the_stable_form_holds_for_large_n() {
        let v = pass_at_k(10_000, 5_000, 100).unwrap();
        assert!(v > 0.999_999 && v <= 1.0);
        let v = pass_hat_k(10_000, 9_999, 100).unwrap();
        assert!((v - 0.99).abs() < 1e-9);
    }
}
