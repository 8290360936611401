//! Where the queue lives: a SQLite file (the default, under the data dir) or a Postgres server
//! shared by workers on many machines.

use std::fmt;
use std::path::PathBuf;

use super::QueueError;

/// The file name of the embedded queue in the data dir.
pub const DEFAULT_FILE: &str = "anvil.db";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueLocation {
    Sqlite(PathBuf),
    /// A `postgres://` URL.
    Postgres(String),
}

impl QueueLocation {
    /// Reads `--queue`: `postgres://…` / `postgresql://…`, `sqlite://PATH`, `sqlite:PATH`, or a
    /// plain file path.
    pub fn parse(text: &str) -> Result<Self, QueueError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(QueueError::EmptyLocation);
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Self::Postgres(text.to_string()));
        }
        let path = if let Some(rest) = text.strip_prefix("sqlite://") {
            rest
        } else if let Some(rest) = text.strip_prefix("sqlite:") {
            rest
        } else if text.contains("://") {
            return Err(QueueError::UnsupportedScheme { given: text.into() });
        } else {
            text
        };
        let path = path.split('?').next().unwrap_or(path);
        if path.is_empty() || path == ":memory:" {
            return Err(QueueError::NoSharedFile { given: text.into() });
        }
        Ok(Self::Sqlite(PathBuf::from(path)))
    }

    /// The SQLite file under the data dir (`dirs::data_dir()/anvil/anvil.db`).
    pub fn default_location() -> Result<Self, QueueError> {
        anvil_llm::config::data_dir()
            .map(|d| Self::Sqlite(d.join(DEFAULT_FILE)))
            .ok_or(QueueError::NoDataDir)
    }

    /// `given`, or the default.
    pub fn from_option(given: Option<&str>) -> Result<Self, QueueError> {
        match given {
            Some(text) => Self::parse(text),
            None => Self::default_location(),
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres(_))
    }
}

/// Shows the location with any password hidden.
impl fmt::Display for QueueLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite(path) => write!(f, "{}", path.display()),
            Self::Postgres(url) => match url::Url::parse(url) {
                Ok(mut parsed) if parsed.password().is_some() => {
                    let _ = parsed.set_password(Some("***"));
                    write!(f, "{parsed}")
                }
                _ => write!(f, "{url}"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_accepted_form() {
        assert_eq!(
            QueueLocation::parse("postgres://u@h/db").unwrap(),
            QueueLocation::Postgres("postgres://u@h/db".into())
        );
        assert!(
            QueueLocation::parse("postgresql://h/db")
                .unwrap()
                .is_postgres()
        );
        for form in ["sqlite:///tmp/q.db", "sqlite:/tmp/q.db", "/tmp/q.db"] {
            assert_eq!(
                QueueLocation::parse(form).unwrap(),
                QueueLocation::Sqlite("/tmp/q.db".into()),
                "{form}"
            );
        }
        assert_eq!(
            QueueLocation::parse("sqlite://q.db?mode=rwc").unwrap(),
            QueueLocation::Sqlite("q.db".into())
        );
    }

    #[test]
    fn refuses_what_it_cannot_share() {
        for bad in ["", "redis://h", "sqlite::memory:", ":memory:"] {
            let err = QueueLocation::parse(bad).unwrap_err().to_string();
            assert!(err.contains("--queue"), "{bad}: {err}");
        }
    }

    #[test]
    fn hides_passwords() {
        let loc = QueueLocation::parse("postgres://anvil:s3cret@db.internal:5432/evals").unwrap();
        let shown = loc.to_string();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("db.internal"), "{shown}");
    }
}
