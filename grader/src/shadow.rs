//! What sits beside a protected path and is imported in its place. Laying over
//! ([`crate::protect::lay_over`]) cannot stop it, so [`shadows`] finds it: entries of the copy, outside the protected paths and not as the
//! trusted tree has them, that Python would import instead of a protected test package or
//! module (`tests.py` or `tests/…` compiled forms beside a protected `tests/`; a `helpers/`
//! package beside a protected `helpers.py`), or instead of the test runner itself (`unittest`,
//! `pytest`, `_pytest`, `doctest`, as a module or a package at the root or beside a protected
//! path), and the start-up hooks Python or pytest run first (`sitecustomize.py`,
//! `usercustomize.py`, a `conftest.py` at the root or in a directory above a protected path).

use std::path::{Path, PathBuf};

use crate::protect::ProtectedPaths;

/// Test runners a check may start by module name (`python3 -m unittest`, `pytest`), which a
/// module of the same name in the tree would replace; the standard library's own names come
/// from the host's Python ([`stdlib_modules`]).
const RUNNER_MODULES: &[&str] = &["unittest", "pytest", "_pytest", "doctest", "argparse"];

/// Files Python loads before any test runs, by module name.
const STARTUP_HOOKS: &[&str] = &["sitecustomize", "usercustomize"];

/// The standard library's top-level module names (`sys.stdlib_module_names` of the host's
/// `python3`, asked once), with [`RUNNER_MODULES`]: a tree's `argparse.py` at the directory a
/// test runs from is imported in place of the real one, by the runner itself.
fn stdlib_modules() -> &'static std::collections::BTreeSet<String> {
    static NAMES: std::sync::OnceLock<std::collections::BTreeSet<String>> =
        std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names: std::collections::BTreeSet<String> = RUNNER_MODULES
            .iter()
            .chain(STARTUP_HOOKS)
            .map(|m| m.to_string())
            .collect();
        if let Ok(out) = std::process::Command::new("python3")
            .args([
                "-I",
                "-c",
                "import sys; print(chr(10).join(sorted(sys.stdlib_module_names)))",
            ])
            .current_dir("/")
            .output()
            && out.status.success()
        {
            names.extend(
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_string),
            );
        }
        names
    })
}

/// Entries of `copy` (relative paths, sorted) that would be imported instead of a protected
/// path, a package above one, the standard library or the test runner, or run before the
/// tests (see the module docs). An entry that the trusted tree holds with the same bytes is
/// not one: it was there when the paths were protected.
pub fn shadows(copy: &Path, trusted: &Path, protected: &ProtectedPaths) -> Vec<String> {
    // What is protected, as the trusted tree has it (globs included), and the literal
    // patterns themselves (a protected path that does not exist yet).
    let mut targets: Vec<PathBuf> = protected.literals().iter().map(PathBuf::from).collect();
    covered_entries(trusted, Path::new(""), protected, &mut targets);
    // Per directory, the module names an entry there must not newly take.
    let mut names: std::collections::BTreeMap<PathBuf, std::collections::BTreeSet<String>> =
        std::collections::BTreeMap::new();
    // The packages the protected paths live in are the project's own, whatever they hold.
    let above: std::collections::BTreeSet<PathBuf> = targets
        .iter()
        .flat_map(|t| t.ancestors().skip(1).map(Path::to_path_buf))
        .collect();
    let mut found = Vec::new();
    let mut consider = |rel: PathBuf| {
        let shown = rel.to_string_lossy().into_owned();
        if protected.covers(&shown) || found.contains(&shown) || above.contains(&rel) {
            return;
        }
        let ours = copy.join(&rel);
        if ours.symlink_metadata().is_err() || same_entry(&ours, &trusted.join(&rel)) {
            return;
        }
        found.push(shown);
    };
    let stdlib = stdlib_modules();
    names
        .entry(PathBuf::new())
        .or_default()
        .extend(stdlib.iter().cloned());
    consider(PathBuf::from("conftest.py"));
    for target in &targets {
        let Some(file) = target.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let parent = target.parent().map(Path::to_path_buf).unwrap_or_default();
        names
            .entry(parent.clone())
            .or_default()
            .insert(file.strip_suffix(".py").unwrap_or(file).to_string());
        // Every directory above it: a test may run from there (its sys.path[0]), pytest reads
        // its conftest.py, and as a package its __init__ runs on import and its name must
        // not be taken by a module beside it.
        for dir in parent.ancestors() {
            names
                .entry(dir.to_path_buf())
                .or_default()
                .extend(stdlib.iter().cloned());
            consider(dir.join("conftest.py"));
            if dir.as_os_str().is_empty() {
                continue;
            }
            names
                .entry(dir.to_path_buf())
                .or_default()
                .insert("__init__".into());
            if let (Some(up), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str()))
            {
                names
                    .entry(up.to_path_buf())
                    .or_default()
                    .insert(name.to_string());
            }
        }
    }
    for (dir, modules) in &names {
        let Ok(entries) = std::fs::read_dir(copy.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // A directory is imported as a module only as a regular package: a namespace
            // portion loses to any module of that name.
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let package = ["__init__.py", "__init__.pyc"]
                .iter()
                .any(|i| entry.path().join(i).exists());
            if (!is_dir || package) && module_of(&name).is_some_and(|m| modules.contains(m)) {
                consider(dir.join(&name));
            }
        }
    }
    found.sort();
    found
}

/// The topmost entries of `root` (under `rel`) that `protected` covers.
fn covered_entries(root: &Path, rel: &Path, protected: &ProtectedPaths, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
        return;
    };
    for entry in entries.flatten() {
        let entry_rel = rel.join(entry.file_name());
        if protected.covers(&entry_rel.to_string_lossy()) {
            out.push(entry_rel);
        } else if entry.file_type().is_ok_and(|t| t.is_dir()) {
            covered_entries(root, &entry_rel, protected, out);
        }
    }
}

/// The module name `import` finds a directory entry named `name` under: a package directory
/// or a name without a dot, a source or compiled module, an extension module
/// (`name.cpython-311-x86_64-linux-gnu.so`).
fn module_of(name: &str) -> Option<&str> {
    for suffix in [".py", ".pyc", ".pyo", ".pyw"] {
        if let Some(m) = name.strip_suffix(suffix) {
            return Some(m);
        }
    }
    if name.ends_with(".so") || name.ends_with(".pyd") {
        return name.split('.').next();
    }
    (!name.contains('.')).then_some(name)
}

/// Whether two entries hold the same thing: files with the same bytes, directories whose
/// every entry is the same, symlinks with the same target.
fn same_entry(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (a.symlink_metadata(), b.symlink_metadata()) else {
        return false;
    };
    if ma.file_type().is_symlink() || mb.file_type().is_symlink() {
        return ma.file_type().is_symlink()
            && mb.file_type().is_symlink()
            && std::fs::read_link(a).ok() == std::fs::read_link(b).ok();
    }
    if ma.is_file() && mb.is_file() {
        return ma.len() == mb.len() && std::fs::read(a).ok() == std::fs::read(b).ok();
    }
    if ma.is_dir() && mb.is_dir() {
        let names = |d: &Path| -> Option<Vec<std::ffi::OsString>> {
            let mut v: Vec<_> = std::fs::read_dir(d)
                .ok()?
                .flatten()
                .map(|e| e.file_name())
                .collect();
            v.sort();
            Some(v)
        };
        return match (names(a), names(b)) {
            (Some(na), Some(nb)) if na == nb => {
                na.iter().all(|n| same_entry(&a.join(n), &b.join(n)))
            }
            _ => false,
        };
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(patterns: &[&str]) -> ProtectedPaths {
        ProtectedPaths::new(&patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
    }

    /// Writes `files` (path, content) under `root`.
    fn tree(root: &Path, files: &[(&str, &str)]) {
        for (path, content) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
    }

    #[test]
    fn shadows_are_what_python_would_import_instead_of_the_protected_tests_or_the_runner() {
        let (copy, trusted) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let base: &[(&str, &str)] = &[
            ("tests/test_a.py", "t"),
            ("pkg/helpers.py", "h"),
            ("conftest.py", "fixtures the initializer wrote"),
            ("app.py", "a"),
        ];
        tree(trusted.path(), base);
        tree(copy.path(), base);
        let protected = paths(&["tests/", "pkg/helpers.py"]);
        assert_eq!(
            shadows(copy.path(), trusted.path(), &protected),
            Vec::<String>::new(),
            "the trusted tree's own files shadow nothing"
        );
        tree(
            copy.path(),
            &[
                ("tests.py", "__path__ = ['_t']"),
                ("tests.cpython-311-x86_64-linux-gnu.so", ""),
                ("pkg/helpers/__init__.py", ""),
                ("unittest/__init__.py", ""),
                ("unittest/__main__.py", "raise SystemExit(0)"),
                // A namespace portion loses to the real package: no shadow.
                ("email/notes.txt", ""),
                ("pytest.py", ""),
                ("sitecustomize.py", ""),
                ("pkg/conftest.py", ""),
                ("testsuite.py", "not a shadow: another name"),
                ("app.py", "changed, but shadows nothing"),
                (
                    "tests/conftest.py",
                    "inside the protected tests: laid over, not a shadow",
                ),
            ],
        );
        std::fs::write(copy.path().join("conftest.py"), "changed by the session").unwrap();
        assert_eq!(
            shadows(copy.path(), trusted.path(), &protected),
            [
                "conftest.py",
                "pkg/conftest.py",
                "pkg/helpers",
                "pytest.py",
                "sitecustomize.py",
                "tests.cpython-311-x86_64-linux-gnu.so",
                "tests.py",
                "unittest",
            ]
        );
        // A standard-library module the runner imports, and the __init__ of a package above
        // a protected file.
        let protected = paths(&["pkg/helpers.py"]);
        tree(
            copy.path(),
            &[
                ("argparse.py", "import os; os._exit(0)"),
                ("pkg/__init__.py", "x"),
            ],
        );
        let found = shadows(copy.path(), trusted.path(), &protected);
        for expected in ["argparse.py", "pkg/__init__.py", "pkg/helpers"] {
            assert!(
                found.contains(&expected.to_string()),
                "{expected}: {found:?}"
            );
        }
        // Globs are protected as what they cover in the trusted tree.
        let protected = paths(&["tests/*.py"]);
        let found = shadows(copy.path(), trusted.path(), &protected);
        assert!(found.contains(&"tests.py".to_string()), "{found:?}");
    }
}
