//! Waiting for something another thread or process does, always with a deadline: a test that
//! waits without one can only hang, never fail.

use std::time::{Duration, Instant};

/// How often the pollers look.
const EVERY: Duration = Duration::from_millis(20);

/// Calls `check` until it returns `Some`, at most for `limit`; then panics saying what never
/// happened (`what`).
pub fn poll_until<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(EVERY);
    }
}

/// [`poll_until`] for checks that await, sleeping on the runtime between tries.
pub async fn poll_until_async<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_what_the_check_found() {
        let mut tries = 0;
        let found = poll_until(Duration::from_secs(5), "three tries", || {
            tries += 1;
            (tries == 3).then_some(tries)
        });
        assert_eq!(found, 3);
    }

    #[test]
    #[should_panic(expected = "never: not within")]
    fn panics_at_the_deadline() {
        poll_until(Duration::from_millis(50), "never", || None::<()>);
    }

    #[tokio::test]
    async fn the_async_poller_panics_at_the_deadline_too() {
        let outcome = tokio::spawn(poll_until_async(
            Duration::from_millis(50),
            "never",
            || async { None::<()> },
        ))
        .await;
        assert!(outcome.unwrap_err().is_panic());
    }
}
