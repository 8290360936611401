//! The workspace's binaries (`anvil`, `anvil-evals`) for tests outside the crate that builds
//! them, where cargo gives no `CARGO_BIN_EXE_*`: found beside the running test executable
//! (`target/<profile>/deps/<test>` → `target/<profile>/<name>`), and refused when missing or
//! older than the workspace's sources, so a test never passes or fails on a stale build.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The workspace root (this crate's parent directory).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The newest modification time of the files a binary is built from.
fn newest_source() -> (SystemTime, PathBuf) {
    let root = workspace();
    let mut newest = (SystemTime::UNIX_EPOCH, root.clone());
    let mut dirs: Vec<PathBuf> = ["llm", "agent", "grader", "report", "runner", "evals"]
        .iter()
        .flat_map(|c| [root.join(c).join("src"), root.join(c).join("Cargo.toml")])
        .chain([root.join("migrations"), root.join("Cargo.lock")])
        .collect();
    while let Some(path) = dirs.pop() {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                dirs.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
            }
        } else if let Ok(modified) = meta.modified()
            && modified > newest.0
        {
            newest = (modified, path);
        }
    }
    newest
}

/// The path of the workspace binary `name`, built by cargo beside this test. Panics saying
/// what to build when it is missing or older than a source file.
pub fn built(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} has no target/<profile> above it", exe.display()));
    let path = profile_dir.join(name);
    let build = "`cargo test --workspace` builds it; for one crate's tests run \
                 `cargo build -p anvil-runner -p anvil-evals` first";
    let built_at = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{} is not built ({e}): {build}", path.display()));
    let (newest, source) = newest_source();
    assert!(
        built_at >= newest,
        "{} is older than {}: {build}",
        path.display(),
        source.display()
    );
    path
}
