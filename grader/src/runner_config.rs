//! Test-runner configuration a tree carries in files that are not tests: pytest reads
//! `pytest.ini`, `.pytest.ini`, `[tool.pytest.ini_options]` of `pyproject.toml`, `[pytest]` of
//! `tox.ini` and `[tool:pytest]` of `setup.cfg` from the directory it runs in and above. A
//! change there (`addopts = -k "not add"`, `--deselect`, `-p` a plugin, `python_files` that
//! matches nothing) decides which protected tests run without touching them.
//!
//! [`changes`] compares a tree with the trusted one, only the pytest part of each file: a
//! session may change a `pyproject.toml`'s packaging, not its `[tool.pytest…]` table. Each
//! change is a `runner_config` [`TamperFinding`].

use std::path::{Path, PathBuf};

use crate::tamper::TamperFinding;

/// The files, by name, and how to take their pytest part.
const FILES: &[(&str, Part)] = &[
    ("pytest.ini", Part::Whole),
    (".pytest.ini", Part::Whole),
    ("pyproject.toml", Part::TomlTable),
    ("tox.ini", Part::IniSection("pytest")),
    ("setup.cfg", Part::IniSection("tool:pytest")),
];

#[derive(Debug, Clone, Copy)]
enum Part {
    Whole,
    /// `[tool.pytest]` and what is under it.
    TomlTable,
    /// One `[section]` of an INI file.
    IniSection(&'static str),
}

/// Files bigger than this are read as their first this many bytes.
const MAX_BYTES: u64 = 4 * 1024 * 1024;

/// The pytest configuration changed in `tree` against `trusted`, in each of `dirs` (relative
/// paths; `""` is the root): one finding per file whose pytest part differs (added, changed
/// or removed).
pub fn changes(tree: &Path, trusted: &Path, dirs: &[PathBuf]) -> Vec<TamperFinding> {
    let mut out = Vec::new();
    for dir in dirs {
        for (name, part) in FILES {
            let rel = dir.join(name);
            let ours = read(&tree.join(&rel));
            let theirs = read(&trusted.join(&rel));
            if ours.is_none() && theirs.is_none() {
                continue;
            }
            let (a, b) = (
                pytest_part(ours.as_deref().unwrap_or(""), *part),
                pytest_part(theirs.as_deref().unwrap_or(""), *part),
            );
            if a != b {
                out.push(TamperFinding::new(
                    rel.to_string_lossy(),
                    "runner_config",
                    format!("{name}: pytest's configuration changed (it decides which tests run)"),
                ));
            }
        }
    }
    out
}

fn read(path: &Path) -> Option<String> {
    use std::io::Read;
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_BYTES).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The pytest part of a file's text, normalized: `None` when it has none.
fn pytest_part(text: &str, part: Part) -> Option<String> {
    match part {
        Part::Whole => (!text.is_empty()).then(|| text.trim().to_string()),
        Part::TomlTable => match text.parse::<toml::Table>() {
            Ok(table) => table
                .get("tool")
                .and_then(|t| t.as_table())
                .and_then(|t| t.get("pytest"))
                .map(|p| p.to_string()),
            // A file that does not parse is compared whole: pytest may still read it.
            Err(_) => (!text.trim().is_empty()).then(|| text.trim().to_string()),
        },
        Part::IniSection(name) => {
            let mut inside = false;
            let mut lines = Vec::new();
            let mut found = false;
            for line in text.lines() {
                let t = line.trim();
                if t.starts_with('[') && t.ends_with(']') {
                    inside = t[1..t.len() - 1].trim() == name;
                    found |= inside;
                    continue;
                }
                if inside && !t.is_empty() && !t.starts_with('#') && !t.starts_with(';') {
                    lines.push(t.to_string());
                }
            }
            found.then(|| lines.join("\n"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, files: &[(&str, &str)]) {
        for (path, text) in files {
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
    }

    #[test]
    fn only_the_pytest_part_of_a_file_counts() {
        let (tree, trusted) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let base: &[(&str, &str)] = &[
            ("pyproject.toml", "[project]\nname = \"calc\"\n"),
            ("setup.cfg", "[metadata]\nname = calc\n"),
        ];
        write(trusted.path(), base);
        write(tree.path(), base);
        let root = [PathBuf::new()];
        assert_eq!(changes(tree.path(), trusted.path(), &root), vec![]);
        // Packaging changes are the session's to make.
        write(
            tree.path(),
            &[
                (
                    "pyproject.toml",
                    "[project]\nname = \"calc\"\nversion = \"1\"\n",
                ),
                ("setup.cfg", "[metadata]\nname = calc\n# a comment\n"),
            ],
        );
        assert_eq!(changes(tree.path(), trusted.path(), &root), vec![]);
        // Which tests run is not.
        write(
            tree.path(),
            &[
                (
                    "pyproject.toml",
                    "[project]\nname = \"calc\"\n[tool.pytest.ini_options]\naddopts = \"-k 'not add'\"\n",
                ),
                (
                    "setup.cfg",
                    "[metadata]\nname = calc\n[tool:pytest]\naddopts = --deselect x\n",
                ),
                ("pytest.ini", "[pytest]\n"),
                ("tox.ini", "[tox]\n[pytest]\npython_files = nothing_*.py\n"),
            ],
        );
        let found: Vec<String> = changes(tree.path(), trusted.path(), &root)
            .into_iter()
            .map(|f| format!("{} {}", f.path, f.kind))
            .collect();
        assert_eq!(
            found,
            [
                "pytest.ini runner_config",
                "pyproject.toml runner_config",
                "tox.ini runner_config",
                "setup.cfg runner_config",
            ]
        );
    }
}
