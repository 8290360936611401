//! Where credentials live on this machine, so the sandbox can hide them: stores under HOME
//! (`.ssh`, `.aws`, shell histories, tokens of other agents), and the configuration and data
//! directories anvil and other tools actually use — `$XDG_CONFIG_HOME`/`$XDG_DATA_HOME` where
//! set (they need not be under HOME), `~/.config` and `~/.local/share`, and on macOS
//! `~/Library/Application Support`. A path is masked only where it exists.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Credential stores relative to HOME.
pub const HOME_CREDENTIALS: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".azure",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".pgpass",
    ".vault-token",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
    ".node_repl_history",
    ".claude",
    ".claude.json",
    ".codex",
];

/// Credential stores relative to each configuration directory.
pub const CONFIG_CREDENTIALS: &[&str] = &[
    "anvil",
    "gh",
    "gcloud",
    "hub",
    "git/credentials",
    "op",
    "rclone",
];

/// Credential stores relative to each data directory.
pub const DATA_CREDENTIALS: &[&str] = &["anvil"];

/// The system's own secrets. Sandboxed commands run as an unprivileged uid, but when anvil
/// runs as root that uid is host root without capabilities, which can still read root's
/// owner-only files: these are masked whoever runs anvil.
pub const SYSTEM_CREDENTIALS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
];

/// Private SSH host keys (`/etc/ssh/ssh_host_*_key`).
fn ssh_host_keys() -> Vec<PathBuf> {
    std::fs::read_dir("/etc/ssh")
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("ssh_host_") && n.ends_with("_key"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The directories credentials are looked for in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CredentialDirs {
    pub home: Option<PathBuf>,
    pub config: Vec<PathBuf>,
    pub data: Vec<PathBuf>,
}

impl CredentialDirs {
    /// From this process's environment (HOME, XDG_CONFIG_HOME, XDG_DATA_HOME).
    pub fn from_env() -> CredentialDirs {
        Self::from_vars(|k| std::env::var_os(k))
    }

    /// From variables looked up by `var` (what [`from_env`](Self::from_env) does, testable).
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> CredentialDirs {
        let home = var("HOME").map(PathBuf::from);
        Self::for_home(home, var("XDG_CONFIG_HOME"), var("XDG_DATA_HOME"))
    }

    /// For `home`, with the XDG directories given (or their defaults under `home`).
    pub fn for_home(
        home: Option<PathBuf>,
        xdg_config: Option<OsString>,
        xdg_data: Option<OsString>,
    ) -> CredentialDirs {
        let mut config = Vec::new();
        let mut data = Vec::new();
        let absolute = |v: Option<OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
        config.extend(absolute(xdg_config));
        data.extend(absolute(xdg_data));
        if let Some(h) = &home {
            config.push(h.join(".config"));
            data.push(h.join(".local/share"));
            // macOS keeps both in Application Support (dirs::config_dir there).
            config.push(h.join("Library/Application Support"));
        }
        dedup(&mut config);
        dedup(&mut data);
        CredentialDirs { home, config, data }
    }

    /// Every credential path that exists.
    pub fn existing(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut add = |base: &Path, rels: &[&str]| {
            for rel in rels {
                let p = base.join(rel);
                if p.symlink_metadata().is_ok() && !out.contains(&p) {
                    out.push(p);
                }
            }
        };
        if let Some(h) = &self.home {
            add(h, HOME_CREDENTIALS);
        }
        for c in &self.config {
            add(c, CONFIG_CREDENTIALS);
        }
        for d in &self.data {
            add(d, DATA_CREDENTIALS);
        }
        for p in SYSTEM_CREDENTIALS
            .iter()
            .map(PathBuf::from)
            .chain(ssh_host_keys())
        {
            if p.symlink_metadata().is_ok() && !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }
}

fn dedup(v: &mut Vec<PathBuf>) {
    let mut seen = Vec::new();
    v.retain(|p| {
        let new = !seen.contains(p);
        seen.push(p.clone());
        new
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdg_directories_outside_home_are_searched_too() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        let xdg = root.path().join("elsewhere/config");
        let data = root.path().join("elsewhere/data");
        for d in [
            home.join(".ssh"),
            home.join(".config/gh"),
            xdg.join("anvil"),
            data.join("anvil"),
            home.join("Library/Application Support/anvil"),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(home.join(".pgpass"), "x").unwrap();
        std::fs::write(home.join(".bash_history"), "x").unwrap();
        let dirs = CredentialDirs::from_vars(|k| match k {
            "HOME" => Some(home.clone().into()),
            "XDG_CONFIG_HOME" => Some(xdg.clone().into()),
            "XDG_DATA_HOME" => Some(data.clone().into()),
            _ => None,
        });
        let found = dirs.existing();
        for expected in [
            home.join(".ssh"),
            home.join(".pgpass"),
            home.join(".bash_history"),
            home.join(".config/gh"),
            xdg.join("anvil"),
            data.join("anvil"),
            home.join("Library/Application Support/anvil"),
        ] {
            assert!(found.contains(&expected), "{expected:?} not in {found:?}");
        }
        // A relative XDG value is ignored (the spec says so), not resolved against the cwd.
        let dirs = CredentialDirs::from_vars(|k| match k {
            "HOME" => Some(home.clone().into()),
            "XDG_CONFIG_HOME" => Some("relative/config".into()),
            _ => None,
        });
        assert!(dirs.config.iter().all(|p| p.is_absolute()));
    }
}
