//! [`Retry`]: a provider decorator that retries transient failures with backoff.
//!
//! Only failures before the stream starts (connection errors, non-2xx statuses) are retried: once
//! events have flowed, a retry would duplicate output the caller already consumed. `Retry-After`
//! is honoured, and every attempt fits inside one total deadline — a delay that would overrun it
//! ends the retries with the last error instead of sleeping past it. An attempt that ran into
//! its request deadline ([`LlmError::DeadlineExceeded`]) is retried only if another whole
//! request deadline fits in what is left: with the defaults (10 minutes per request, 2 minutes
//! of retries) never.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LlmError;
use crate::provider::{EventStream, Provider};
use crate::types::ChatRequest;

/// How many times and how long to keep trying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included. 1 means no retries.
    pub max_attempts: u32,
    /// The first backoff delay; each later one doubles, up to `cap`.
    pub base: Duration,
    pub cap: Duration,
    /// No retry starts (or sleeps) past this much time from the first attempt.
    pub total_deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
            total_deadline: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// The backoff before attempt `attempt + 1`: [`Backoff::delay`] with jitter in [50%, 100%].
    fn backoff(&self, attempt: u32) -> Duration {
        let full = Backoff {
            base: self.base,
            cap: self.cap,
        }
        .delay(attempt);
        full.mul_f64(0.5 + 0.5 * jitter())
    }
}

/// Exponential backoff, the one rule for every retry in anvil (provider requests here, trial
/// jobs in the runner's worker): `base` after the first failure, doubled after each later one,
/// never more than `cap`. Pure: callers add jitter or schedule the wait as they need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// The wait after `failures` consecutive failures (the wait before attempt `failures + 1`):
    /// zero for none, then `base`, `2 × base`, `4 × base`… up to `cap`. The doubling stops at
    /// 2^20 so the arithmetic cannot overflow whatever the count.
    pub fn delay(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        self.base
            .saturating_mul(1u32 << (failures - 1).min(20))
            .min(self.cap)
    }
}

/// A number in [0, 1) that differs between calls, so many clients do not retry in lockstep.
fn jitter() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() as u64 >> 11;
    bits as f64 / (1u64 << 53) as f64
}

/// Wraps a provider with [`RetryPolicy`].
pub struct Retry {
    inner: Arc<dyn Provider>,
    policy: RetryPolicy,
}

impl Retry {
    pub fn new(inner: Arc<dyn Provider>, policy: RetryPolicy) -> Self {
        Self { inner, policy }
    }
}

#[async_trait::async_trait]
impl Provider for Retry {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, req: &ChatRequest) -> Result<EventStream, LlmError> {
        let started = Instant::now();
        let mut attempt = 1;
        loop {
            let error = match self.inner.stream(req).await {
                Ok(stream) => return Ok(stream),
                Err(e) => e,
            };
            if !error.is_retryable() || attempt >= self.policy.max_attempts {
                return Err(error);
            }
            let delay = match &error {
                LlmError::Http {
                    retry_after: Some(after),
                    ..
                } => *after,
                _ => self.policy.backoff(attempt),
            };
            // A retry of a request that ran out of time would likely take as long again.
            let attempt_needs = match &error {
                LlmError::DeadlineExceeded { deadline, .. } => *deadline,
                _ => Duration::ZERO,
            };
            if started.elapsed() + delay + attempt_needs > self.policy.total_deadline {
                tracing::warn!(
                    provider = self.inner.name(),
                    attempt,
                    delay_ms = delay.as_millis() as u64,
                    "not retrying: the delay would pass the total retry deadline"
                );
                return Err(error);
            }
            // The error's kind only: its text can quote the provider's response body, which
            // may echo the request (the prompt, a key).
            tracing::warn!(
                provider = self.inner.name(),
                status = error.kind(),
                http_status = error.http_status(),
                attempt,
                delay_ms = delay.as_millis() as u64,
                "retrying provider request"
            );
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{FinishReason, StreamEvent};
    use std::collections::VecDeque;
    use std::sync::Mutex;

    /// A scripted answer: success, or an HTTP status with an optional Retry-After.
    type Outcome = Result<(), (u16, Option<Duration>)>;

    /// Answers each call with the next scripted outcome.
    struct Flaky {
        outcomes: Mutex<VecDeque<Outcome>>,
        calls: Mutex<u32>,
    }

    impl Flaky {
        fn new(outcomes: Vec<Outcome>) -> Arc<Self> {
            Arc::new(Self {
                outcomes: Mutex::new(outcomes.into()),
                calls: Mutex::new(0),
            })
        }
        fn calls(&self) -> u32 {
            *self.calls.lock().unwrap()
        }
    }

    #[async_trait::async_trait]
    impl Provider for Flaky {
        fn name(&self) -> &str {
            "flaky"
        }
        async fn stream(&self, _req: &ChatRequest) -> Result<EventStream, LlmError> {
            *self.calls.lock().unwrap() += 1;
            match self.outcomes.lock().unwrap().pop_front() {
                Some(Ok(())) => Ok(Box::pin(futures::stream::iter([Ok(StreamEvent::Finish(
                    FinishReason::EndTurn,
                ))]))),
                Some(Err((status, retry_after))) => Err(LlmError::Http {
                    status,
                    body: String::new(),
                    retry_after,
                }),
                None => Err(LlmError::Config("script exhausted".into())),
            }
        }
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 5,
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
            total_deadline: Duration::from_secs(10),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_401_is_attempted_exactly_once() {
        let inner = Flaky::new(vec![Err((401, None)), Ok(())]);
        let retry = Retry::new(inner.clone(), policy());
        assert!(retry.stream(&ChatRequest::default()).await.is_err());
        assert_eq!(inner.calls(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_honoured() {
        let inner = Flaky::new(vec![Err((429, Some(Duration::from_secs(2)))), Ok(())]);
        let retry = Retry::new(inner.clone(), policy());
        let started = Instant::now();
        assert!(retry.stream(&ChatRequest::default()).await.is_ok());
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert_eq!(inner.calls(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_delay_beyond_the_total_deadline_stops_instead_of_sleeping() {
        let inner = Flaky::new(vec![Err((529, Some(Duration::from_secs(3600)))), Ok(())]);
        let retry = Retry::new(inner.clone(), policy());
        let started = Instant::now();
        let err = retry.stream(&ChatRequest::default()).await.err().unwrap();
        assert!(matches!(err, LlmError::Http { status: 529, .. }));
        assert_eq!(started.elapsed(), Duration::ZERO);
        assert_eq!(inner.calls(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_attempts_with_growing_delays() {
        let inner = Flaky::new(vec![Err((503, None)); 6]);
        let retry = Retry::new(inner.clone(), policy());
        let started = Instant::now();
        assert!(retry.stream(&ChatRequest::default()).await.is_err());
        assert_eq!(inner.calls(), 5);
        // Four backoffs of at least half of 100, 200, 400, 800 ms.
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(750), "{elapsed:?}");
        assert!(elapsed <= Duration::from_millis(1500), "{elapsed:?}");
    }

    /// Each call runs into its request deadline after `deadline`.
    struct Slow {
        deadline: Duration,
        calls: Mutex<u32>,
    }

    #[async_trait::async_trait]
    impl Provider for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        async fn stream(&self, _req: &ChatRequest) -> Result<EventStream, LlmError> {
            *self.calls.lock().unwrap() += 1;
            tokio::time::sleep(self.deadline).await;
            Err(LlmError::DeadlineExceeded {
                deadline: self.deadline,
                provider: "slow".into(),
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_hit_is_retried_only_within_the_total_budget() {
        for (deadline, calls) in [(3, 3), (6, 1), (600, 1)] {
            let inner = Arc::new(Slow {
                deadline: Duration::from_secs(deadline),
                calls: Mutex::new(0),
            });
            let retry = Retry::new(inner.clone(), policy());
            let started = Instant::now();
            let err = retry.stream(&ChatRequest::default()).await.err().unwrap();
            assert!(matches!(err, LlmError::DeadlineExceeded { .. }));
            assert_eq!(*inner.calls.lock().unwrap(), calls, "deadline {deadline}s");
            if deadline < 10 {
                assert!(started.elapsed() <= policy().total_deadline);
            }
        }
    }

    #[test]
    fn backoff_doubles_from_base_up_to_cap() {
        let b = Backoff {
            base: Duration::from_secs(5),
            cap: Duration::from_secs(300),
        };
        let delays: Vec<Duration> = (0..9).map(|n| b.delay(n)).collect();
        assert_eq!(
            delays,
            [0, 5, 10, 20, 40, 80, 160, 300, 300].map(Duration::from_secs)
        );
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(300), "no overflow");
        let zero = Backoff {
            base: Duration::ZERO,
            cap: Duration::from_secs(1),
        };
        assert_eq!(zero.delay(3), Duration::ZERO);
    }

    #[test]
    fn backoff_is_capped() {
        let p = policy();
        for attempt in 1..40 {
            assert!(p.backoff(attempt) <= p.cap);
        }
    }
}
