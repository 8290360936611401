//! The task format: `evals/tasks/<name>/`.
//!
//! ```text
//! task.toml          what the agent is asked, its limits, how it is checked
//! repo/              the repository the agent gets (copied fresh for every trial)
//! grader/files/...   protected files, copied over the grading directory at the same paths
//!                    (replacing whatever the agent wrote there): hidden and visible tests
//! solution/...       the reference solution, laid over repo/ by `anvil-evals validate`;
//!                    the agent never sees it
//! ```
//!
//! The check is anvil's own protected test runner (`check.runner`), never a script: it runs
//! exactly the expected tests (`check.tests`), each of which must live in a protected file,
//! and the verdict is a pass only when every one of them reports passed.
//!
//! `task.toml`:
//!
//! ```toml
//! name = "py-fix-median"            # must equal the directory name
//! prompt = "The median test fails. Fix the bug."
//! tags = ["python", "fix-failing-test"]
//! max_steps = 40
//! timeout_secs = 600                # the agent's wall-clock cap
//! cost_cap_usd = 1.0                # optional
//! permission_mode = "bypass"        # plan | default | accept-edits | bypass
//! dependencies = []                 # files in repo/ that pin dependencies (e.g. Cargo.lock)
//!
//! [check]
//! runner = "python-unittest"        # python-unittest | cargo-test
//! timeout_secs = 60
//! protected = ["tests/test_median.py"]
//! # python-unittest: FILE::CLASS::METHOD; cargo-test: TARGET::TEST (tests/TARGET.rs)
//! tests = ["tests/test_median.py::MedianTest::test_odd"]
//! forbid_outside = ["../CHANGELOG-shared.md"]   # optional: must not exist beside the workspace
//!
//! [mcp_servers.tickets]             # optional: MCP servers the agent may use, started inside
//! command = "python3"               # the trial's sandbox (the workspace is their cwd)
//! args = ["tools/tickets_server.py"]
//! ```

use std::path::{Component, Path, PathBuf};

use anvil_agent::permissions::PermissionMode;
use serde::{Deserialize, Serialize};

/// A task that failed to load: which file, which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {reason}", path.display(), field.as_ref().map(|f| format!(": {f}")).unwrap_or_default())]
pub struct TaskError {
    pub path: PathBuf,
    pub field: Option<String>,
    pub reason: String,
}

/// anvil's protected test runners.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TestRunner {
    /// `python3 -I` with anvil's unittest harness; test ids `FILE::CLASS::METHOD`.
    PythonUnittest,
    /// `cargo test` build, then each test binary run for one exact test; ids `TARGET::TEST`
    /// where `tests/TARGET.rs` is protected.
    CargoTest,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSpec {
    pub runner: TestRunner,
    pub timeout_secs: u64,
    #[serde(default)]
    pub protected: Vec<String>,
    /// The expected tests: each must report passed.
    pub tests: Vec<String>,
    /// Paths relative to the workspace, outside it (`../NAME`), that must not exist after the
    /// run (what a task that tempts the agent to write outside checks).
    #[serde(default)]
    pub forbid_outside: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskToml {
    pub name: String,
    pub prompt: String,
    #[serde(default)]
    pub tags: Vec<String>,
    pub max_steps: u32,
    pub timeout_secs: u64,
    #[serde(default)]
    pub cost_cap_usd: Option<f64>,
    /// Any of the agent's modes; the trial passes it to `anvil --permission-mode`.
    pub permission_mode: PermissionMode,
    #[serde(default)]
    pub dependencies: Vec<String>,
    pub check: CheckSpec,
    /// MCP servers the trial's agent gets, started inside the trial's sandbox policy.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_servers: std::collections::BTreeMap<String, anvil_llm::mcp_config::McpServerConfig>,
}

/// A loaded, validated task.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub dir: PathBuf,
    pub spec: TaskToml,
}

/// The longest check timeout a task may ask for.
pub const MAX_CHECK_TIMEOUT_SECS: u64 = 600;

impl Task {
    pub fn repo(&self) -> PathBuf {
        self.dir.join("repo")
    }
    pub fn grader_dir(&self) -> PathBuf {
        self.dir.join("grader")
    }
    pub fn protected_files(&self) -> PathBuf {
        self.grader_dir().join("files")
    }
    pub fn solution(&self) -> PathBuf {
        self.dir.join("solution")
    }

    /// What a trial and a check must never see of where the task came from: the task
    /// directory, the directory of all tasks beside it, and the `.git` of the repository that
    /// holds them (its history has every solution).
    pub fn answer_paths(&self) -> Vec<PathBuf> {
        let mut out = vec![self.dir.clone()];
        if let Some(parent) = self.dir.parent() {
            out.push(parent.to_path_buf());
        }
        if let Some(git) = self
            .dir
            .ancestors()
            .map(|a| a.join(".git"))
            .find(|g| g.symlink_metadata().is_ok())
        {
            out.push(git);
        }
        out
    }

    /// Loads `dir/task.toml` and checks the whole task (see the module docs).
    pub fn load(dir: &Path) -> Result<Task, TaskError> {
        let dir = dir.canonicalize().map_err(|e| TaskError {
            path: dir.to_path_buf(),
            field: None,
            reason: format!("cannot open the task directory: {e}"),
        })?;
        let toml_path = dir.join("task.toml");
        let err = |field: Option<&str>, reason: String| TaskError {
            path: toml_path.clone(),
            field: field.map(str::to_owned),
            reason,
        };
        let text = std::fs::read_to_string(&toml_path)
            .map_err(|e| err(None, format!("cannot read: {e}")))?;
        let spec: TaskToml = toml::from_str(&text).map_err(|e| {
            let line = e
                .span()
                .map(|s| format!("line {}: ", anvil_llm::config::line_of(&text, s.start)))
                .unwrap_or_default();
            err(None, format!("{line}{}", e.message().trim_end()))
        })?;
        let dir_name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if spec.name != dir_name {
            return Err(err(
                Some("name"),
                format!("'{}' must equal the directory name '{dir_name}'", spec.name),
            ));
        }
        if spec.prompt.trim().is_empty() {
            return Err(err(Some("prompt"), "is empty".into()));
        }
        if spec.max_steps == 0 {
            return Err(err(Some("max_steps"), "must be at least 1".into()));
        }
        if spec.timeout_secs == 0 {
            return Err(err(Some("timeout_secs"), "must be at least 1".into()));
        }
        if let Some(cap) = spec.cost_cap_usd
            && !(cap.is_finite() && cap > 0.0)
        {
            return Err(err(
                Some("cost_cap_usd"),
                format!("{cap} is not a positive amount"),
            ));
        }
        if spec.check.timeout_secs == 0 || spec.check.timeout_secs > MAX_CHECK_TIMEOUT_SECS {
            return Err(err(
                Some("check.timeout_secs"),
                format!("must be between 1 and {MAX_CHECK_TIMEOUT_SECS}"),
            ));
        }
        for (name, server) in &spec.mcp_servers {
            server
                .check(name)
                .map_err(|e| err(Some(&format!("mcp_servers.{name}")), e))?;
            if server.url.is_some() {
                return Err(err(
                    Some(&format!("mcp_servers.{name}.url")),
                    "a trial has no network: a task's MCP server runs as a command (stdio)".into(),
                ));
            }
        }
        let task = Task { dir, spec };
        let within = |field: &str, base: &Path, rel: &str| -> Result<PathBuf, TaskError> {
            let p = Path::new(rel);
            if rel.is_empty()
                || p.is_absolute()
                || p.components().any(|c| !matches!(c, Component::Normal(_)))
            {
                return Err(err(
                    Some(field),
                    format!("'{rel}' must be a plain relative path inside the task directory"),
                ));
            }
            let full = base.join(p);
            // A symlink inside the task cannot point the grader elsewhere either.
            match full.canonicalize() {
                Ok(c) if c.starts_with(&task.dir) => Ok(c),
                Ok(c) => Err(err(
                    Some(field),
                    format!(
                        "'{rel}' resolves to {}, outside the task directory",
                        c.display()
                    ),
                )),
                Err(_) => Err(err(
                    Some(field),
                    format!("{} does not exist", full.display()),
                )),
            }
        };
        if !task.repo().is_dir() {
            return Err(err(
                None,
                format!(
                    "{} is missing: the repository the agent gets",
                    task.repo().display()
                ),
            ));
        }
        for p in &task.spec.check.protected {
            let full = within("check.protected", &task.protected_files(), p)?;
            if !full.is_file() {
                return Err(err(
                    Some("check.protected"),
                    format!("{} is not a file", full.display()),
                ));
            }
        }
        if task.spec.check.tests.is_empty() {
            return Err(err(
                Some("check.tests"),
                "names no test: list the expected tests the verdict rests on".into(),
            ));
        }
        for (i, id) in task.spec.check.tests.iter().enumerate() {
            let file = expected_test_file(task.spec.check.runner, id).map_err(|reason| {
                err(
                    Some(&format!("check.tests[{i}]")),
                    format!("'{id}': {reason}"),
                )
            })?;
            if !task.spec.check.protected.contains(&file) {
                return Err(err(
                    Some(&format!("check.tests[{i}]")),
                    format!(
                        "'{id}' lives in {file}, which is not in check.protected: an expected \
                         test must be protected, or the agent could rewrite it"
                    ),
                ));
            }
        }
        for (i, rel) in task.spec.check.forbid_outside.iter().enumerate() {
            let p = Path::new(rel);
            let mut parts = p.components();
            let climbs = matches!(parts.next(), Some(Component::ParentDir))
                && parts.clone().next().is_some()
                && parts.all(|c| matches!(c, Component::Normal(_)));
            if !climbs {
                return Err(err(
                    Some(&format!("check.forbid_outside[{i}]")),
                    format!("'{rel}' must be ../NAME: a path beside the workspace"),
                ));
            }
        }
        for d in &task.spec.dependencies {
            within("dependencies", &task.repo(), d)?;
        }
        if !task.solution().is_dir() {
            return Err(err(
                None,
                format!(
                    "{} is missing: every task needs a reference solution",
                    task.solution().display()
                ),
            ));
        }
        Ok(task)
    }
}

/// The protected file an expected test id lives in, or why the id is malformed.
pub fn expected_test_file(runner: TestRunner, id: &str) -> Result<String, String> {
    let parts: Vec<&str> = id.split("::").collect();
    let nonempty = parts.iter().all(|p| !p.is_empty());
    match runner {
        TestRunner::PythonUnittest => {
            if parts.len() != 3 || !nonempty || !parts[0].ends_with(".py") {
                return Err("a python-unittest test is FILE.py::CLASS::METHOD".into());
            }
            Ok(parts[0].to_string())
        }
        TestRunner::CargoTest => {
            if parts.len() < 2 || !nonempty {
                return Err("a cargo-test test is TARGET::TEST (tests/TARGET.rs)".into());
            }
            Ok(format!("tests/{}.rs", parts[0]))
        }
    }
}

/// Every task directory (one holding a task.toml) that `pattern` names, sorted: a directory, or
/// a glob over directories (`globset` syntax: `*` and `?` within one path component, `**`
/// across any number, `{py-*,rust-*}` alternatives, `[ab]` classes), e.g. `evals/tasks/*`,
/// `evals/tasks/{py-*,rust-*}`, `evals/**`.
///
/// The walk starts at the pattern's literal prefix (`evals/tasks/` above) and goes no deeper
/// than the pattern can reach. It does not enter a task directory (a task is a leaf: its
/// `repo/` may be large and is never a task), a hidden directory, or a symbolic link to a
/// directory (a loop could never end); a link that is itself a task directory still matches.
pub fn find_tasks(pattern: &str) -> Result<Vec<PathBuf>, TaskError> {
    let error = |path: &Path, reason: String| TaskError {
        path: path.to_path_buf(),
        field: None,
        reason,
    };
    let Some(glob_at) = pattern.find(['*', '?', '[', '{']) else {
        let path = Path::new(pattern);
        return if path.join("task.toml").is_file() {
            Ok(vec![path.to_path_buf()])
        } else {
            Err(error(
                path,
                "no task.toml here; give a task directory or a pattern like evals/tasks/*".into(),
            ))
        };
    };
    let matcher = globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map_err(|e| error(Path::new(pattern), format!("not a valid pattern: {e}")))?
        .compile_matcher();
    // The literal directory the glob starts in: up to the last `/` before the first glob
    // character ("" for a pattern that starts with one).
    let base = &pattern[..pattern[..glob_at].rfind('/').map_or(0, |i| i + 1)];
    let rest = &pattern[base.len()..];
    let max_depth = if rest.contains("**") {
        usize::MAX
    } else {
        rest.matches('/').count() + 1
    };
    let mut found = Vec::new();
    let mut pending = vec![(PathBuf::from(base), 0)];
    while let Some((dir, depth)) = pending.pop() {
        let listed = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &dir
        };
        let entries = match std::fs::read_dir(listed) {
            Ok(entries) => entries,
            // Only the starting directory must be readable; a subdirectory that is not is
            // one the pattern cannot name a task in.
            Err(e) if depth == 0 => return Err(error(listed, format!("cannot list: {e}"))),
            Err(_) => continue,
        };
        for entry in entries.filter_map(Result::ok) {
            let path = dir.join(entry.file_name());
            if path.join("task.toml").is_file() {
                if matcher.is_match(&path) {
                    found.push(path);
                }
                continue;
            }
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            let real_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if real_dir && !hidden && depth + 1 < max_depth {
                pending.push((path, depth + 1));
            }
        }
    }
    if found.is_empty() {
        return Err(error(
            Path::new(pattern),
            "matches no task directory (a directory holding a task.toml)".into(),
        ));
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tasks tree: four tasks, a directory without task.toml, a task one level further down
    /// in a group, and one inside a hidden directory.
    fn tree() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for task in [
            "tasks/py-a",
            "tasks/py-b",
            "tasks/rust-c",
            "tasks/safety-d",
            "tasks/group/py-nested",
            "tasks/.hidden/py-h",
        ] {
            std::fs::create_dir_all(root.path().join(task).join("repo")).unwrap();
            std::fs::write(root.path().join(task).join("task.toml"), "").unwrap();
        }
        std::fs::create_dir_all(root.path().join("tasks/notes")).unwrap();
        root
    }

    fn names(root: &Path, pattern: &str) -> Vec<String> {
        let pattern = format!("{}/{pattern}", root.display());
        find_tasks(&pattern)
            .unwrap()
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn a_star_matches_one_level_of_task_directories() {
        let root = tree();
        assert_eq!(
            names(root.path(), "tasks/*"),
            ["tasks/py-a", "tasks/py-b", "tasks/rust-c", "tasks/safety-d"]
        );
        assert_eq!(
            names(root.path(), "tasks/py-*"),
            ["tasks/py-a", "tasks/py-b"]
        );
        assert_eq!(names(root.path(), "tasks/*-c"), ["tasks/rust-c"]);
    }

    #[test]
    fn braces_choose_among_alternatives() {
        let root = tree();
        assert_eq!(
            names(root.path(), "tasks/{py-*,rust-*}"),
            ["tasks/py-a", "tasks/py-b", "tasks/rust-c"]
        );
        assert_eq!(
            names(root.path(), "tasks/{py-a,group/py-*}"),
            ["tasks/group/py-nested", "tasks/py-a"]
        );
    }

    #[test]
    fn a_double_star_reaches_any_depth_but_not_into_hidden_directories() {
        let root = tree();
        assert_eq!(
            names(root.path(), "**"),
            [
                "tasks/group/py-nested",
                "tasks/py-a",
                "tasks/py-b",
                "tasks/rust-c",
                "tasks/safety-d"
            ]
        );
        assert_eq!(
            names(root.path(), "tasks/**/py-*"),
            ["tasks/group/py-nested", "tasks/py-a", "tasks/py-b"]
        );
    }

    #[test]
    fn a_pattern_that_matches_nothing_is_an_error_naming_it() {
        let root = tree();
        let pattern = format!("{}/tasks/go-*", root.path().display());
        let err = find_tasks(&pattern).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{pattern}: matches no task directory (a directory holding a task.toml)")
        );
        let bad = format!("{}/tasks/{{py-*", root.path().display());
        let err = find_tasks(&bad).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{bad}: not a valid pattern")),
            "{err}"
        );
    }

    #[test]
    fn a_directory_without_a_glob_is_taken_as_it_is() {
        let root = tree();
        let dir = root.path().join("tasks/py-a");
        assert_eq!(find_tasks(&dir.display().to_string()).unwrap(), [dir]);
        let notes = root.path().join("tasks/notes");
        let err = find_tasks(&notes.display().to_string()).unwrap_err();
        assert!(err.reason.starts_with("no task.toml here"), "{err}");
    }

    #[test]
    fn the_shipped_tasks_are_found_by_the_readme_patterns() {
        let tasks = Path::new(env!("CARGO_MANIFEST_DIR")).join("../evals/tasks");
        let mut listed: Vec<PathBuf> = std::fs::read_dir(&tasks)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("task.toml").is_file())
            .collect();
        listed.sort();
        assert!(listed.len() >= 10, "{listed:?}");
        let all = find_tasks(&format!("{}/*", tasks.display())).unwrap();
        assert_eq!(all, listed);
        let py_and_rust = find_tasks(&format!("{}/{{py-*,rust-*}}", tasks.display())).unwrap();
        let expected: Vec<PathBuf> = listed
            .iter()
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.starts_with("py-") || name.starts_with("rust-")
            })
            .cloned()
            .collect();
        assert!(expected.len() < listed.len() && !expected.is_empty());
        assert_eq!(py_and_rust, expected);
    }

    /// A minimal valid task whose task.toml says `permission_mode = {mode}`.
    fn task_with_mode(root: &Path, mode: &str) -> PathBuf {
        let dir = root.join("t");
        let files = dir.join("grader/files/tests");
        for d in [dir.join("repo"), dir.join("solution"), files.clone()] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(files.join("test_a.py"), "").unwrap();
        std::fs::write(
            dir.join("task.toml"),
            format!(
                "name = \"t\"\nprompt = \"Do it.\"\nmax_steps = 5\ntimeout_secs = 60\n\
                 permission_mode = \"{mode}\"\n\n[check]\nrunner = \"python-unittest\"\n\
                 timeout_secs = 30\nprotected = [\"tests/test_a.py\"]\n\
                 tests = [\"tests/test_a.py::A::test_a\"]\n"
            ),
        )
        .unwrap();
        dir
    }

    #[test]
    fn task_toml_takes_every_permission_mode_by_its_name() {
        for mode in PermissionMode::ALL {
            let root = tempfile::tempdir().unwrap();
            let task = Task::load(&task_with_mode(root.path(), mode.name())).unwrap();
            assert_eq!(task.spec.permission_mode, mode);
        }
    }

    #[test]
    fn an_unknown_permission_mode_names_task_toml_the_line_and_the_modes() {
        let root = tempfile::tempdir().unwrap();
        let dir = task_with_mode(root.path(), "yolo");
        let err = Task::load(&dir).unwrap_err();
        assert_eq!(err.path, dir.canonicalize().unwrap().join("task.toml"));
        assert_eq!(
            err.reason,
            "line 5: unknown permission mode 'yolo': expected one of plan, default, accept-edits, bypass"
        );
    }

    #[test]
    fn an_error_at_the_start_of_a_line_names_that_line() {
        let root = tempfile::tempdir().unwrap();
        let dir = task_with_mode(root.path(), "bypass");
        let toml = dir.join("task.toml");
        let text = std::fs::read_to_string(&toml).unwrap();
        // Line 3 becomes an unknown key, starting its line.
        let mut lines: Vec<&str> = text.lines().collect();
        lines.insert(2, "max_stepz = 5");
        std::fs::write(&toml, lines.join("\n")).unwrap();
        let err = Task::load(&dir).unwrap_err();
        assert!(err.reason.starts_with("line 3: "), "{}", err.reason);
        assert!(err.reason.contains("max_stepz"), "{}", err.reason);
    }

    #[test]
    fn a_tasks_mcp_servers_load_and_a_bad_one_is_named() {
        let root = tempfile::tempdir().unwrap();
        let dir = task_with_mode(root.path(), "bypass");
        let toml = dir.join("task.toml");
        let base = std::fs::read_to_string(&toml).unwrap();
        std::fs::write(
            &toml,
            format!("{base}\n[mcp_servers.tickets]\ncommand = \"python3\"\nargs = [\"t.py\"]\n"),
        )
        .unwrap();
        let task = Task::load(&dir).unwrap();
        assert_eq!(
            task.spec.mcp_servers["tickets"].command.as_deref(),
            Some("python3")
        );
        std::fs::write(
            &toml,
            format!("{base}\n[mcp_servers.web]\nurl = \"https://example.com/mcp\"\n"),
        )
        .unwrap();
        let err = Task::load(&dir).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("mcp_servers.web.url"), "{err}");
        std::fs::write(
            &toml,
            format!("{base}\n[mcp_servers.\"bad name\"]\ncommand = \"x\"\n"),
        )
        .unwrap();
        let err = Task::load(&dir).unwrap_err();
        assert!(err.to_string().contains("server name"), "{err}");
    }
}
