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

/// The workspace crates `package` is built from: itself and, transitively, the `anvil-*`
/// crates in its `[dependencies]` (read from the manifests, so a moved edge moves with it).
fn crates_of(package: &str) -> Vec<String> {
    let root = workspace();
    let mut seen: Vec<String> = Vec::new();
    let mut todo = vec![package.to_string()];
    while let Some(name) = todo.pop() {
        if seen.contains(&name) {
            continue;
        }
        let dir = name.trim_start_matches("anvil-").to_string();
        let manifest =
            std::fs::read_to_string(root.join(&dir).join("Cargo.toml")).unwrap_or_default();
        let mut in_dependencies = false;
        for line in manifest.lines() {
            let line = line.trim();
            if line.starts_with('[') {
                in_dependencies = line == "[dependencies]";
            } else if in_dependencies && line.starts_with("anvil-") {
                let dep: String = line
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                todo.push(dep);
            }
        }
        seen.push(name);
    }
    seen.into_iter()
        .map(|name| name.trim_start_matches("anvil-").to_string())
        .collect()
}

/// The newest modification time of the files `package`'s binaries are built from.
fn newest_source(package: &str) -> (SystemTime, PathBuf) {
    let root = workspace();
    let mut newest = (SystemTime::UNIX_EPOCH, root.clone());
    let mut paths: Vec<PathBuf> = crates_of(package)
        .iter()
        .map(|c| root.join(c).join("src"))
        // Embedded by sqlx::migrate!. Manifests are left out: an edit to one (a
        // dev-dependency, a comment) need not rebuild the binary.
        .chain([root.join("migrations")])
        .collect();
    while let Some(path) = paths.pop() {
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                paths.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
            }
        } else if let Ok(modified) = meta.modified()
            && modified > newest.0
        {
            newest = (modified, path);
        }
    }
    newest
}

/// The package that builds the binary `name`.
fn package_of(name: &str) -> &'static str {
    match name {
        "anvil" => "anvil-runner",
        "anvil-evals" => "anvil-evals",
        other => panic!("{other} is not a binary of this workspace"),
    }
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
    // Only the sources this binary is built from: a change to anvil-evals does not rebuild
    // anvil, and must not make it look stale.
    let (newest, source) = newest_source(package_of(name));
    assert!(
        built_at >= newest,
        "{} is older than {}: {build}",
        path.display(),
        source.display()
    );
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_is_built_from_its_crate_and_the_anvil_crates_below_it() {
        let anvil = crates_of("anvil-runner");
        assert!(anvil.contains(&"runner".to_string()), "{anvil:?}");
        assert!(anvil.contains(&"llm".to_string()), "{anvil:?}");
        assert!(!anvil.contains(&"evals".to_string()), "{anvil:?}");
        let evals = crates_of("anvil-evals");
        assert!(evals.contains(&"evals".to_string()), "{evals:?}");
        assert!(evals.contains(&"runner".to_string()), "{evals:?}");
    }
}
