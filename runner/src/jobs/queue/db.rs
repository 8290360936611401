//! Opening the queue database and bringing its schema up to date: apalis's tables (its own
//! migrations, in `_sqlx_migrations`) and anvil's (`migrations/`, in `_anvil_migrations`).

use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use super::{QueueError, QueueLocation};

/// anvil's migrations keep their own ledger so they never collide with apalis's.
const ANVIL_MIGRATIONS_TABLE: &str = "_anvil_migrations";

/// An open queue database.
#[derive(Debug, Clone)]
pub enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs the same statement on whichever pool `$db` holds (the SQL must be portable: `$N`
/// parameters, `ON CONFLICT`, integers as i64).
macro_rules! on_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            $crate::jobs::queue::Db::Sqlite($pool) => $body,
            $crate::jobs::queue::Db::Postgres($pool) => $body,
        }
    };
}
pub(crate) use on_pool;

fn anvil_migrator(postgres: bool) -> Migrator {
    let mut m = if postgres {
        sqlx::migrate!("../migrations/postgres")
    } else {
        sqlx::migrate!("../migrations/sqlite")
    };
    m.dangerous_set_table_name(ANVIL_MIGRATIONS_TABLE);
    m
}

impl Db {
    /// Connects (creating a SQLite file and its directory when missing) and migrates. Only for
    /// the commands that make a queue (`run`, `worker`); the others use [`Db::open_existing`].
    pub async fn open(location: &QueueLocation, max_connections: u32) -> Result<Db, QueueError> {
        Self::connect(location, max_connections, true).await
    }

    /// Connects to a queue that must exist already, and migrates: a missing SQLite file is an
    /// error naming its path, never a new empty queue; so is an empty file, and a database
    /// (SQLite or Postgres) without anvil's tables — a reader never turns either into a queue.
    pub async fn open_existing(
        location: &QueueLocation,
        max_connections: u32,
    ) -> Result<Db, QueueError> {
        if let QueueLocation::Sqlite(path) = location {
            match std::fs::metadata(path) {
                // An empty file is a valid empty SQLite database: opening it would make it one.
                Ok(meta) if meta.is_file() && meta.len() == 0 => {
                    return Err(QueueError::NotAQueue {
                        location: location.to_string(),
                        reason: "the file is empty".into(),
                    });
                }
                Ok(meta) if meta.is_file() => {}
                Ok(_) => {
                    return Err(QueueError::Open {
                        location: location.to_string(),
                        reason: "it is not a file".into(),
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(QueueError::Missing {
                        location: location.to_string(),
                    });
                }
                Err(e) => {
                    return Err(QueueError::Open {
                        location: location.to_string(),
                        reason: e.to_string(),
                    });
                }
            }
        }
        Self::connect(location, max_connections, false).await
    }

    async fn connect(
        location: &QueueLocation,
        max_connections: u32,
        create: bool,
    ) -> Result<Db, QueueError> {
        let open_err = |reason: String| QueueError::Open {
            location: location.to_string(),
            reason,
        };
        match location {
            QueueLocation::Sqlite(path) => {
                if let Some(dir) = path
                    .parent()
                    .filter(|d| create && !d.as_os_str().is_empty())
                {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| open_err(format!("cannot create {}: {e}", dir.display())))?;
                }
                if !create {
                    // Looked at through a plain connection: the pool's would switch a database
                    // that is not a queue to WAL before the look.
                    let plain = SqliteConnectOptions::from_str("sqlite://")
                        .map_err(|e| open_err(e.to_string()))?
                        .filename(path)
                        .create_if_missing(false);
                    let mut conn = sqlx::ConnectOptions::connect(&plain)
                        .await
                        .map_err(|e| open_err(e.to_string()))?;
                    let found = sqlx::query_scalar(HAS_QUEUE_SQLITE)
                        .fetch_one(&mut conn)
                        .await;
                    let _ = sqlx::Connection::close(conn).await;
                    refuse_unless_found(found, location)?;
                }
                // Pragmas on the connect options, so that every pooled connection has them
                // (apalis's setup() would set them on whichever one connection it gets).
                let options = SqliteConnectOptions::from_str("sqlite://")
                    .map_err(|e| open_err(e.to_string()))?
                    .filename(path)
                    .create_if_missing(false)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(30))
                    .foreign_keys(false);
                // Two processes opening a fresh file at once (two `anvil auto run`s, a run and
                // a worker) contend for the lock that turning on WAL takes, and SQLite answers
                // that with SQLITE_BUSY at once rather than through the busy timeout: try again.
                let mut tries = 0;
                let pool = loop {
                    tries += 1;
                    match Self::connect_sqlite(path, &options, create, max_connections).await {
                        Ok(pool) => break pool,
                        Err(e) if tries < 20 && sqlite_busy(&e) => {
                            tracing::debug!("opening the queue again after: {e}");
                            tokio::time::sleep(Duration::from_millis(50 * tries)).await;
                        }
                        Err(e) => return Err(open_err(e.to_string())),
                    }
                };
                let db = Db::Sqlite(pool);
                db.migrate().await?;
                Ok(db)
            }
            QueueLocation::Postgres(url) => {
                let pool = PgPoolOptions::new()
                    .max_connections(max_connections.max(2))
                    .acquire_timeout(Duration::from_secs(30))
                    .connect(url)
                    .await
                    .map_err(|e| {
                        open_err(format!(
                            "{e} (is the server running, and does the database exist? create it with `createdb`)"
                        ))
                    })?;
                let db = Db::Postgres(pool);
                if !create {
                    db.refuse_unless_a_queue(location).await?;
                }
                db.migrate().await?;
                Ok(db)
            }
        }
    }

    /// Refuses a database that holds no queue (no `anvil_sweeps` table: no `run` or `worker`
    /// ever used it), before anything is written to it.
    async fn refuse_unless_a_queue(&self, location: &QueueLocation) -> Result<(), QueueError> {
        let found = on_pool!(self, pool => {
            let sql = match self {
                Db::Sqlite(_) => HAS_QUEUE_SQLITE,
                Db::Postgres(_) => HAS_QUEUE_POSTGRES,
            };
            sqlx::query_scalar(sql).fetch_one(pool).await
        });
        let refused = refuse_unless_found(found, location);
        if refused.is_err() {
            self.close().await;
        }
        refused
    }

    /// Opens the pool, creating the file first when `create` and it is missing.
    async fn connect_sqlite(
        path: &std::path::Path,
        options: &SqliteConnectOptions,
        create: bool,
        max_connections: u32,
    ) -> Result<SqlitePool, sqlx::Error> {
        // The file is created here, once. The pool's connections never create it: one opened
        // after the file was deleted would quietly start an empty queue at the same path.
        if create && !path.exists() {
            use sqlx::ConnectOptions;
            let conn = options.clone().create_if_missing(true).connect().await?;
            sqlx::Connection::close(conn).await?;
        }
        // No idle or lifetime reaping: a file's connections cost nothing idle, and sqlx's
        // reaping task was caught spinning at full CPU forever in `anvil-evals export`
        // (in `spawn_maintenance_tasks`); without either limit that task is never started.
        SqlitePoolOptions::new()
            .max_connections(max_connections.max(2))
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_with(options.clone())
            .await
    }

    async fn migrate(&self) -> Result<(), QueueError> {
        // Two processes opening a fresh SQLite file at once can race on its first migration;
        // the loser finds the schema in place on its second try.
        let mut tries = 0;
        loop {
            tries += 1;
            match self.migrate_once().await {
                Ok(()) => return Ok(()),
                Err(e) if tries < 3 && matches!(self, Db::Sqlite(_)) => {
                    tracing::debug!("migration retry after: {e}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn migrate_once(&self) -> Result<(), QueueError> {
        let migrate_err = |what: &str, e: String| QueueError::Migrate {
            what: what.to_string(),
            reason: e,
        };
        let (apalis, anvil) = match self {
            Db::Sqlite(_) => (
                apalis_sqlite::SqliteStorage::migrations(),
                anvil_migrator(false),
            ),
            Db::Postgres(_) => (
                apalis_postgres::PostgresStorage::migrations(),
                anvil_migrator(true),
            ),
        };
        on_pool!(self, pool => {
            apalis
                .run(pool)
                .await
                .map_err(|e| migrate_err("apalis", e.to_string()))?;
            anvil
                .run(pool)
                .await
                .map_err(|e| migrate_err("anvil", e.to_string()))?;
        });
        Ok(())
    }

    /// One round trip to the database.
    pub async fn ping(&self) -> Result<(), QueueError> {
        on_pool!(self, pool => sqlx::query("SELECT 1").execute(pool).await.map(|_| ()))
            .map_err(QueueError::sql("asking the database"))
    }

    pub async fn close(&self) {
        on_pool!(self, pool => pool.close().await)
    }
}

/// Whether a database holds anvil's tables (1) or not (0).
const HAS_QUEUE_SQLITE: &str =
    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'anvil_sweeps'";
const HAS_QUEUE_POSTGRES: &str = "SELECT COUNT(*) FROM information_schema.tables \
     WHERE table_name = 'anvil_sweeps' AND table_schema = current_schema()";

/// The answer of `HAS_QUEUE_*` as a refusal when the database holds no queue.
fn refuse_unless_found(
    found: Result<i64, sqlx::Error>,
    location: &QueueLocation,
) -> Result<(), QueueError> {
    match found {
        Ok(0) => Err(QueueError::NotAQueue {
            location: location.to_string(),
            reason: "it has no queue tables".into(),
        }),
        Ok(_) => Ok(()),
        Err(e) => Err(QueueError::Open {
            location: location.to_string(),
            reason: e.to_string(),
        }),
    }
}

/// Whether SQLite refused for a lock another connection holds (SQLITE_BUSY or SQLITE_LOCKED,
/// in any of their extended forms).
fn sqlite_busy(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    db.code()
        .and_then(|c| c.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue made before variants keeps every trial, with all its columns, when the
    /// variants migration rebuilds the table (SQLite cannot change a primary key in place).
    #[tokio::test]
    async fn the_variants_migration_keeps_every_trial() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        let options = SqliteConnectOptions::from_str("sqlite://")
            .unwrap()
            .filename(&path)
            .create_if_missing(true);
        let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
        let mut before = anvil_migrator(false);
        before.migrations = before
            .migrations
            .iter()
            .filter(|m| m.version < 20261226000001)
            .cloned()
            .collect::<Vec<_>>()
            .into();
        before.run(&pool).await.unwrap();
        sqlx::query(
            "INSERT INTO anvil_trials (sweep, task, model, trial, state, attempt, worker, \
             started_at_ms, finished_at_ms, last_error, record, pass, reserved_usd) \
             VALUES ('s', 't', 'm', 3, 'done', 2, 'w', 10, 20, 'e', '{}', 1, 0.5)",
        )
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;

        let db = Db::open(&QueueLocation::Sqlite(path), 2).await.unwrap();
        let Db::Sqlite(pool) = &db else {
            unreachable!("a SQLite queue")
        };
        let key: (String, String, String, String, i64, String, i64) = sqlx::query_as(
            "SELECT sweep, task, model, variant, trial, state, attempt FROM anvil_trials",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(
            key,
            (
                "s".into(),
                "t".into(),
                "m".into(),
                String::new(),
                3,
                "done".into(),
                2
            )
        );
        let rest: (String, i64, i64, String, String, i64, f64) = sqlx::query_as(
            "SELECT worker, started_at_ms, finished_at_ms, last_error, record, pass, reserved_usd \
             FROM anvil_trials",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(rest, ("w".into(), 10, 20, "e".into(), "{}".into(), 1, 0.5));
        // The same trial of a variant is another row now.
        let key = |variant: Option<&str>| super::super::TrialKey {
            sweep: "s".into(),
            task: "t".into(),
            model: "m".into(),
            variant: variant.map(str::to_string),
            trial: 3,
        };
        db.add_trials(&[key(None), key(Some("v"))]).await.unwrap();
        assert_eq!(
            db.trial_state(&key(Some("v"))).await.unwrap(),
            Some((super::super::TrialState::Queued, 0))
        );
        assert_eq!(
            db.trial_state(&key(None)).await.unwrap(),
            Some((super::super::TrialState::Done, 2))
        );
    }

    /// Readers open only what a `run` or `worker` made: a missing file (and its missing
    /// directory), an empty file and a SQLite database of something else are errors naming the
    /// path, and none of them is created, written to or turned into a queue.
    #[tokio::test]
    async fn readers_never_make_a_queue() {
        let dir = tempfile::tempdir().unwrap();
        let entries = |dir: &std::path::Path| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        let missing = dir.path().join("not-yet/queue.db");
        let location = QueueLocation::Sqlite(missing.clone());
        let err = Db::open_existing(&location, 2).await.unwrap_err();
        assert!(matches!(err, QueueError::Missing { .. }), "{err}");
        assert!(
            err.to_string().contains(&missing.display().to_string()),
            "{err}"
        );
        assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));

        let empty = dir.path().join("empty.db");
        std::fs::write(&empty, "").unwrap();
        let err = Db::open_existing(&QueueLocation::Sqlite(empty.clone()), 2)
            .await
            .unwrap_err();
        assert!(
            err.to_string().starts_with(&format!(
                "{} is not a queue database: the file is empty",
                empty.display()
            )),
            "{err}"
        );
        assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
        assert_eq!(entries(dir.path()), ["empty.db"]);

        let other = dir.path().join("other.db");
        let options = SqliteConnectOptions::from_str("sqlite://")
            .unwrap()
            .filename(&other)
            .create_if_missing(true);
        let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
        sqlx::query("CREATE TABLE notes (text TEXT)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        let before = std::fs::read(&other).unwrap();
        let err = Db::open_existing(&QueueLocation::Sqlite(other.clone()), 2)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("is not a queue database: it has no queue tables"),
            "{err}"
        );
        assert_eq!(std::fs::read(&other).unwrap(), before, "left as it was");
        assert_eq!(entries(dir.path()), ["empty.db", "other.db"]);

        // What `run` made opens.
        let queue = QueueLocation::Sqlite(dir.path().join("queue.db"));
        Db::open(&queue, 2).await.unwrap().close().await;
        Db::open_existing(&queue, 2).await.unwrap().close().await;
    }

    /// sqlx refuses to open a database where an applied migration's text has changed since
    /// (its checksum is stored), so a migration file, comments included, must never be edited
    /// once released: correct it in a new migration. This pins each file's checksum.
    #[test]
    fn released_migrations_are_never_edited() {
        let checksums = |postgres: bool| -> Vec<(i64, String)> {
            anvil_migrator(postgres)
                .iter()
                .map(|m| {
                    let hex = hex::encode(&m.checksum[..8]);
                    (m.version, hex)
                })
                .collect()
        };
        assert_eq!(
            checksums(false),
            [
                (20261130000001, "e74e9562afe80d36".to_string()),
                (20261201000001, "e1d8cc7381c25181".to_string()),
                (20261201000002, "bf999bada09bad63".to_string()),
                (20261215000001, "ff7a24c72c8f6164".to_string()),
                (20261216000001, "8a58acf9a6f6f897".to_string()),
                (20261220000001, "3beffc20978bbbf1".to_string()),
                (20261226000001, "0fdfce0e5e82252d".to_string()),
                (20261228000001, "a9f139437b03f7f6".to_string()),
                (20261229000001, "c45f36dabfd9e6f6".to_string()),
            ]
        );
        assert_eq!(
            checksums(true),
            [
                (20261130000001, "02492f9590021f6c".to_string()),
                (20261201000001, "383474c02a29a0ba".to_string()),
                (20261201000002, "14f8262e0ac4e2e2".to_string()),
                (20261215000001, "fd4f2a3577fa9e1a".to_string()),
                (20261216000001, "c024515f7044f735".to_string()),
                (20261220000001, "817ddbffba34ad8b".to_string()),
                (20261226000001, "e3aed2631d3bef53".to_string()),
                (20261228000001, "4ebddb2ccbb31633".to_string()),
                (20261229000001, "83d34353a057902f".to_string()),
            ]
        );
    }
}
