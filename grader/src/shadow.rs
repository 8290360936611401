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
/// module of the same name in the tree would replace.
const RUNNER_MODULES: &[&str] = &["unittest", "pytest", "_pytest", "doctest"];

/// Files Python or pytest load before any test runs.
const STARTUP_HOOKS: &[&str] = &["sitecustomize.py", "usercustomize.py"];

/// Entries of `copy` (relative paths, sorted) that would be imported instead of a protected
/// path or the test runner, or run before the tests (see the module docs). An entry that the
/// trusted tree holds with the same bytes is not one: it was there when the paths were
/// protected.
pub fn shadows(copy: &Path, trusted: &Path, protected: &ProtectedPaths) -> Vec<String> {
    let mut names: Vec<(PathBuf, String)> = RUNNER_MODULES
        .iter()
        .map(|m| (PathBuf::new(), m.to_string()))
        .collect();
    let mut hook_dirs: Vec<PathBuf> = vec![PathBuf::new()];
    for literal in protected.literals() {
        let path = Path::new(literal);
        let parent = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let Some(file) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let module = file.strip_suffix(".py").unwrap_or(file).to_string();
        for ancestor in parent.ancestors() {
            if !hook_dirs.iter().any(|d| d == ancestor) {
                hook_dirs.push(ancestor.to_path_buf());
            }
        }
        names.push((parent.clone(), module));
        for m in RUNNER_MODULES {
            names.push((parent.clone(), m.to_string()));
        }
    }
    let mut found = Vec::new();
    let mut consider = |rel: PathBuf| {
        let shown = rel.to_string_lossy().into_owned();
        if protected.covers(&shown) || found.contains(&shown) {
            return;
        }
        let ours = copy.join(&rel);
        if ours.symlink_metadata().is_err() || same_entry(&ours, &trusted.join(&rel)) {
            return;
        }
        found.push(shown);
    };
    for (dir, module) in &names {
        let Ok(entries) = std::fs::read_dir(copy.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if imports_as(&name, module) {
                consider(dir.join(&name));
            }
        }
    }
    for dir in &hook_dirs {
        for hook in STARTUP_HOOKS.iter().chain(["conftest.py"].iter()) {
            if dir.as_os_str().is_empty() || *hook == "conftest.py" {
                consider(dir.join(hook));
            }
        }
    }
    found.sort();
    found
}

/// Whether a directory entry named `name` is what `import module` finds: the package
/// directory, the source, or a compiled or extension module.
fn imports_as(name: &str, module: &str) -> bool {
    let Some(rest) = name.strip_prefix(module) else {
        return false;
    };
    rest.is_empty()
        || matches!(rest, ".py" | ".pyc" | ".pyo" | ".pyw" | ".so" | ".pyd")
        || (rest.starts_with('.') && (rest.ends_with(".so") || rest.ends_with(".pyd")))
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
                ("unittest/__main__.py", "raise SystemExit(0)"),
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
    }
}
