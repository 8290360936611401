//! `max_concurrency`: how many requests one process sends to a provider at once.
//!
//! A local server with one slot (llama.cpp's `-np 1`) answers one request at a time; a second
//! one sent meanwhile waits on the server, where its deadlines run out behind a long
//! generation. Here it waits in anvil instead, for a slot of a semaphore that every user of
//! the provider in this process shares ([`slots`]: one per provider name, endpoint and limit,
//! for the life of the process), so the agents of a sweep's workers, or two sessions of one
//! process, take turns. That wait is not counted against the provider's deadlines: a
//! request's `request_deadline_secs` and `idle_timeout_secs` start when its slot is free.
//!
//! [`Limited`] holds the slot from sending the request until its response stream ends or is
//! dropped, and wraps the retrying provider, so a request's retries keep the slot they have.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use futures::StreamExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::LlmError;
use crate::provider::{EventStream, Provider};
use crate::types::ChatRequest;

/// Which provider a semaphore limits: its config name, its endpoint and the limit itself (so
/// two configurations of the same name that disagree never share a semaphore of the wrong
/// size).
type SlotKey = (String, String, u32);

fn table() -> &'static Mutex<HashMap<SlotKey, Arc<Semaphore>>> {
    static SLOTS: OnceLock<Mutex<HashMap<SlotKey, Arc<Semaphore>>>> = OnceLock::new();
    SLOTS.get_or_init(Default::default)
}

/// The process-wide semaphore of `max` slots for provider `name` at `base_url`: the same one
/// for every caller in this process.
pub fn slots(name: &str, base_url: &str, max: u32) -> Arc<Semaphore> {
    let key = (name.to_string(), base_url.to_string(), max);
    let mut table = table()
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    Arc::clone(
        table
            .entry(key)
            .or_insert_with(|| Arc::new(Semaphore::new(max.max(1) as usize))),
    )
}

/// Waits for one of `slots`, logging when the wait is not immediate.
pub async fn acquire(
    slots: &Arc<Semaphore>,
    provider: &str,
    max: u32,
) -> Result<OwnedSemaphorePermit, LlmError> {
    if let Ok(permit) = Arc::clone(slots).try_acquire_owned() {
        return Ok(permit);
    }
    tracing::info!(
        provider,
        max_concurrency = max,
        "waiting for a free slot of the provider"
    );
    Arc::clone(slots)
        .acquire_owned()
        .await
        .map_err(|_| LlmError::Config(format!("provider '{provider}': its slots were closed")))
}

/// A provider that sends at most `max` requests at once (see the module docs).
pub struct Limited {
    inner: Arc<dyn Provider>,
    slots: Arc<Semaphore>,
    max: u32,
}

impl Limited {
    /// `inner` limited by the process-wide semaphore of provider `name` at `base_url`.
    pub fn new(inner: Arc<dyn Provider>, name: &str, base_url: &str, max: u32) -> Self {
        Self {
            slots: slots(name, base_url, max),
            inner,
            max,
        }
    }
}

#[async_trait::async_trait]
impl Provider for Limited {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn stream(&self, req: &ChatRequest) -> Result<EventStream, LlmError> {
        let permit = acquire(&self.slots, self.inner.name(), self.max).await?;
        // The inner provider's deadlines start only now, with the slot held.
        let mut events = self.inner.stream(req).await?;
        Ok(Box::pin(async_stream::stream! {
            let _slot = permit;
            while let Some(event) = events.next().await {
                yield event;
            }
            // The slot is given back here, when the response ended, or when the caller
            // dropped the stream.
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{FinishReason, StreamEvent};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Answers after `delay`, counting how many of its streams are open at once.
    struct Slow {
        delay: Duration,
        open: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    struct Open(Arc<AtomicUsize>);
    impl Drop for Open {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    #[async_trait::async_trait]
    impl Provider for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        async fn stream(&self, _req: &ChatRequest) -> Result<EventStream, LlmError> {
            let now = self.open.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            let open = Open(Arc::clone(&self.open));
            let delay = self.delay;
            Ok(Box::pin(async_stream::stream! {
                let _open = open;
                tokio::time::sleep(delay).await;
                yield Ok(StreamEvent::Finish(FinishReason::EndTurn));
            }))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn requests_take_turns_and_share_the_slots_of_their_provider() {
        let open = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let slow = || -> Arc<dyn Provider> {
            Arc::new(Slow {
                delay: Duration::from_secs(10),
                open: Arc::clone(&open),
                most: Arc::clone(&most),
            })
        };
        // Two providers built separately (two sessions, two workers) for the same config.
        let a = Arc::new(Limited::new(slow(), "turns", "http://127.0.0.1:1", 1));
        let b = Arc::new(Limited::new(slow(), "turns", "http://127.0.0.1:1", 1));
        let started = tokio::time::Instant::now();
        let run = |p: Arc<Limited>| {
            tokio::spawn(async move {
                let stream = p.stream(&ChatRequest::default()).await.unwrap();
                crate::builder::collect(stream).await.unwrap();
                started.elapsed()
            })
        };
        let (x, y, z) = tokio::join!(run(a.clone()), run(b), run(a));
        let mut done = [x.unwrap(), y.unwrap(), z.unwrap()];
        done.sort();
        assert_eq!(done, [10, 20, 30].map(Duration::from_secs));
        assert_eq!(most.load(Ordering::SeqCst), 1);
        // Another limit, endpoint or name is another semaphore.
        assert!(!Arc::ptr_eq(
            &slots("turns", "http://127.0.0.1:1", 1),
            &slots("turns", "http://127.0.0.1:1", 2)
        ));
        assert!(!Arc::ptr_eq(
            &slots("turns", "http://127.0.0.1:1", 1),
            &slots("turns", "http://127.0.0.1:2", 1)
        ));
        assert!(Arc::ptr_eq(
            &slots("turns", "http://127.0.0.1:1", 1),
            &slots("turns", "http://127.0.0.1:1", 1)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_stream_gives_its_slot_back() {
        let open = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let p = Limited::new(
            Arc::new(Slow {
                delay: Duration::from_secs(3600),
                open,
                most,
            }),
            "dropped",
            "http://127.0.0.1:1",
            1,
        );
        let first = p.stream(&ChatRequest::default()).await.unwrap();
        drop(first);
        let second =
            tokio::time::timeout(Duration::from_secs(1), p.stream(&ChatRequest::default()))
                .await
                .expect("the slot was not given back");
        assert!(second.is_ok());
    }
}
