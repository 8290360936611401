//! The [`Provider`] trait: one streaming model endpoint.

use std::pin::Pin;

use futures::Stream;

use crate::error::LlmError;
use crate::stream::StreamEvent;
use crate::types::ChatRequest;

/// The events of one response. It owns everything it needs: it borrows nothing from the request.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, LlmError>> + Send>>;

/// An endpoint + credentials + wire protocol. Object safe, so `Arc<dyn Provider>` works.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// The provider's name from config (e.g. `anthropic`, `ollama`), for logs and errors.
    fn name(&self) -> &str;

    /// Sends the request and returns its event stream once the response headers arrived
    /// (a non-2xx status is an error here, before any event).
    async fn stream(&self, req: &ChatRequest) -> Result<EventStream, LlmError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::FinishReason;
    use std::sync::Arc;

    struct Dummy;

    #[async_trait::async_trait]
    impl Provider for Dummy {
        fn name(&self) -> &str {
            "dummy"
        }
        async fn stream(&self, req: &ChatRequest) -> Result<EventStream, LlmError> {
            // Owns a copy, borrows nothing from `req`.
            let model = req.model.clone();
            Ok(Box::pin(async_stream::stream! {
                yield Ok(StreamEvent::TextDelta { index: 0, text: model });
                yield Ok(StreamEvent::Finish(FinishReason::EndTurn));
            }))
        }
    }

    #[tokio::test]
    async fn provider_is_object_safe_and_its_stream_is_static() {
        let p: Arc<dyn Provider> = Arc::new(Dummy);
        let stream = {
            let req = ChatRequest {
                model: "m".into(),
                ..ChatRequest::default()
            };
            p.stream(&req).await.unwrap()
        }; // `req` is gone; the stream lives on.
        let c = crate::builder::collect(stream).await.unwrap();
        assert_eq!(c.message.text(), "m");
        assert_eq!(p.name(), "dummy");
    }
}
