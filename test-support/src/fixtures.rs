//! The recorded provider streams in `llm/tests/fixtures/` (see its MANIFEST.md).

use std::path::PathBuf;

/// `llm/tests/fixtures/` in this repository (override with `ANVIL_FIXTURES`).
pub fn fixtures_dir() -> PathBuf {
    match std::env::var_os("ANVIL_FIXTURES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../llm/tests/fixtures"),
    }
}

/// The bytes of `llm/tests/fixtures/<rel>`, with a message saying where they were looked for.
pub fn fixture(rel: &str) -> Vec<u8> {
    let path = fixtures_dir().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "fixture {} not readable ({e}); the recorded streams live in llm/tests/fixtures, or set ANVIL_FIXTURES",
            path.display()
        )
    })
}

/// Every `.sse` file in `llm/tests/fixtures/<dir>`, sorted.
pub fn fixture_files(dir: &str) -> Vec<String> {
    let path = fixtures_dir().join(dir);
    let mut names: Vec<String> = std::fs::read_dir(&path)
        .unwrap_or_else(|e| panic!("cannot list {} ({e})", path.display()))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sse"))
        .collect();
    names.sort();
    names
}
