//! A real OTLP/HTTP-protobuf receiver for trace tests: PyPI's `oteltap`, which prints every
//! span it receives as an NDJSON line on stdout. `scripts/install-deps.sh --tests` installs it
//! into `target/test-tools/oteltap` (or set `ANVIL_OTELTAP` to a directory holding it).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `python -m oteltap`; killed when dropped.
pub struct Oteltap {
    child: Child,
    port: u16,
    lines: Arc<Mutex<Vec<Value>>>,
}

impl Oteltap {
    /// Starts a receiver on a free port and waits until it listens.
    pub fn start() -> Oteltap {
        let dir = std::env::var_os("ANVIL_OTELTAP")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-tools/oteltap")
            });
        assert!(
            dir.join("oteltap").is_dir(),
            "oteltap is not installed in {}: run scripts/install-deps.sh --tests (or \
             scripts/test.sh)",
            dir.display()
        );
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let python = if std::path::Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3"
        } else {
            "python3"
        };
        let mut child = Command::new(python)
            .args(["-u", "-m", "oteltap", "--port", &port.to_string()])
            .env("PYTHONPATH", &dir)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        {
            let lines = Arc::clone(&lines);
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if line.starts_with("Listening") {
                        let _ = ready_tx.send(());
                    }
                    if let Ok(v) = serde_json::from_str::<Value>(&line) {
                        lines.lock().unwrap().push(v);
                    }
                }
            });
        }
        ready_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("oteltap did not start listening");
        Oteltap { child, port, lines }
    }

    /// The endpoint to export to (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The spans received so far (the NDJSON lines with a `spanId`), once there are at least
    /// `n` (or `timeout` passed).
    pub fn spans(&self, n: usize, timeout: Duration) -> Vec<Value> {
        self.wait(n, timeout, |l| l.get("spanId").is_some())
    }

    /// The other lines (metrics, logs) received so far, once there are at least `n`.
    pub fn others(&self, n: usize, timeout: Duration) -> Vec<Value> {
        self.wait(n, timeout, |l| l.get("spanId").is_none())
    }

    fn wait(&self, n: usize, timeout: Duration, keep: impl Fn(&Value) -> bool) -> Vec<Value> {
        let started = Instant::now();
        loop {
            let lines: Vec<Value> = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .filter(|l| keep(l))
                .cloned()
                .collect();
            if lines.len() >= n || started.elapsed() > timeout {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Oteltap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
