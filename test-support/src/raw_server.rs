//! A tiny HTTP server on a raw TCP socket, for what wiremock cannot do: stream slowly, or
//! without end.

/// What a [`RawServer`] does after reading a request's headers.
#[derive(Debug, Clone, Copy)]
pub enum Behaviour {
    /// Answers 200 with an event stream, then only an SSE comment every `every`, forever.
    Ping { every: std::time::Duration },
    /// Never answers (keeps the connection open).
    Silent,
    /// Answers 500 announcing a 1000-byte body, sends one byte of it, then stalls.
    StalledError,
    /// Answers 200 with an OpenAI Chat event stream of text deltas as fast as it can, up to
    /// `bytes` of body, then closes the connection without `[DONE]`.
    Flood { bytes: usize },
    /// Answers 200 with an event stream whose first events are `body` (a response begun in
    /// any wire format: some text, maybe usage), then sends nothing more and keeps the
    /// connection open: a model that stalls mid-answer, for tests of cancelling it.
    StallAfter { body: &'static str },
}

/// A tiny HTTP server on a raw TCP socket, for what wiremock cannot do: stream slowly, or
/// without end. Each connection gets `behaviour`.
pub struct RawServer {
    pub uri: String,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl RawServer {
    pub async fn start(behaviour: Behaviour) -> Self {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri = format!("http://{}", listener.local_addr().unwrap());
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(socket, behaviour));
            }
        });
        Self {
            uri,
            connections,
            task,
        }
    }

    /// Connections accepted so far (one per attempt: reqwest's pool cannot reuse a connection
    /// whose response never ended).
    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const SSE_HEADERS: &[u8] =
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

async fn serve(mut socket: tokio::net::TcpStream, behaviour: Behaviour) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The request's headers; its body stays unread in the socket buffer, which is fine here.
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    match behaviour {
        Behaviour::Silent => {
            // Hold the connection (the socket lives in this task) until the test ends.
            std::future::pending::<()>().await;
        }
        Behaviour::StalledError => {
            let head = b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{";
            if socket.write_all(head).await.is_err() {
                return;
            }
            std::future::pending::<()>().await;
        }
        Behaviour::Ping { every } => {
            if socket.write_all(SSE_HEADERS).await.is_err() {
                return;
            }
            loop {
                if socket.write_all(b": ping\n\n").await.is_err() {
                    return;
                }
                tokio::time::sleep(every).await;
            }
        }
        Behaviour::StallAfter { body } => {
            if socket.write_all(SSE_HEADERS).await.is_err()
                || socket.write_all(body.as_bytes()).await.is_err()
            {
                return;
            }
            std::future::pending::<()>().await;
        }
        Behaviour::Flood { bytes } => {
            if socket.write_all(SSE_HEADERS).await.is_err() {
                return;
            }
            let event = format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
                "x".repeat(4000)
            );
            let batch = event.repeat(16);
            let mut sent = 0;
            while sent < bytes {
                if socket.write_all(batch.as_bytes()).await.is_err() {
                    return;
                }
                sent += batch.len();
            }
        }
    }
}
