//! A user's machine in a temp dir: a home with the user config at `cfg/anvil/config.toml`
//! (`XDG_CONFIG_HOME`), data under `data/` (`XDG_DATA_HOME`), git repositories, and commands
//! that see nothing of the test process's environment but `PATH`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The credential variable the scripted models' configs name, and its value.
pub const MOCK_API_KEY: (&str, &str) = ("MOCK_API_KEY", "sk-mock-key-123");

pub struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    /// A home in a new temp dir.
    pub fn new() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A home in a new temp dir under `parent` (e.g. not under /tmp, which sandboxes hide).
    pub fn in_dir(parent: impl AsRef<Path>) -> Home {
        Home {
            dir: tempfile::tempdir_in(parent).unwrap(),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes the user config.
    pub fn write_config(&self, text: &str) {
        let cfg = self.dir.path().join("cfg/anvil");
        std::fs::create_dir_all(&cfg).unwrap();
        std::fs::write(cfg.join("config.toml"), text).unwrap();
    }

    /// A git repository `name` in the home holding `files` (path, content) in one commit.
    pub fn git_repo(&self, name: &str, files: &[(&str, &str)]) -> PathBuf {
        let repo = self.dir.path().join(name);
        std::fs::create_dir_all(&repo).unwrap();
        for (path, content) in files {
            let path = repo.join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).unwrap();
            }
            std::fs::write(path, content).unwrap();
        }
        git(&repo, &["init", "-q"]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-qm", "init"]);
        repo
    }

    /// `program` run in this home: config and data in it, the mock credential set, stdin
    /// empty, nothing else from this process's environment but `PATH`.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new(program);
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path().join("cfg"))
            .env("XDG_DATA_HOME", self.dir.path().join("data"))
            .env(MOCK_API_KEY.0, MOCK_API_KEY.1)
            .stdin(Stdio::null());
        c
    }
}

impl Default for Home {
    fn default() -> Self {
        Home::new()
    }
}

/// `git ARGS` in `repo` with a fixed identity and no signing; panics with git's stderr.
pub fn git(repo: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        repo.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repo_is_committed_and_commands_see_only_the_home() {
        let home = Home::new();
        home.write_config("default_model = \"m\"\n");
        let repo = home.git_repo("repo", &[("a/b.txt", "hi\n")]);
        let status = Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(&repo)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&status.stdout), "");
        let out = home
            .command("sh")
            .args([
                "-c",
                "echo $HOME; cat $XDG_CONFIG_HOME/anvil/config.toml; echo ${USER:-none}",
            ])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{}\ndefault_model = \"m\"\nnone\n", home.path().display())
        );
    }
}
