//! Fresh databases for tests and benchmarks: a SQLite file in a temp dir, or a new database on
//! the Postgres server named by `ANVIL_TEST_POSTGRES` (default: the local server at
//! 127.0.0.1:5432, which `scripts/test.sh` starts when none is running), and the helper that
//! runs a scenario on both.

use std::path::PathBuf;
use std::time::Duration;

use sqlx::Connection;

/// The variable naming the server tests create their Postgres databases on.
pub const POSTGRES_ENV: &str = "ANVIL_TEST_POSTGRES";
const DEFAULT_SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres";
/// A server that does not answer within this is as good as absent.
const CONNECT_LIMIT: Duration = Duration::from_secs(10);

/// A database a test runs on, in the shape of the queue's location (`QueueLocation`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    Sqlite(PathBuf),
    Postgres(String),
}

fn server() -> String {
    std::env::var(POSTGRES_ENV).unwrap_or_else(|_| DEFAULT_SERVER.to_string())
}

/// What a test without a reachable server says (instead of a bare connection error).
fn needs_a_server(server: &str, why: &str) -> String {
    format!(
        "this test needs Postgres at {POSTGRES_ENV} (now {server}; default {DEFAULT_SERVER}), \
         a server where this user may CREATE DATABASE: run scripts/test.sh, which starts one \
         when none is running, or point {POSTGRES_ENV} at one. ({why})"
    )
}

async fn connect(server: &str) -> Result<sqlx::PgConnection, String> {
    match tokio::time::timeout(CONNECT_LIMIT, sqlx::PgConnection::connect(server)).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(format!("cannot connect: {e}")),
        Err(_) => Err(format!("no answer within {CONNECT_LIMIT:?}")),
    }
}

/// Creates a new, empty database on the test server and returns its URL. Panics saying how to
/// provide a server when there is none.
pub async fn fresh_postgres(prefix: &str) -> String {
    let server = server();
    let mut conn = connect(&server)
        .await
        .unwrap_or_else(|why| panic!("{}", needs_a_server(&server, &why)));
    let name = format!(
        "anvil_{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    // `name` is ours: a prefix from the caller and hex digits.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "{}",
                needs_a_server(&server, &format!("CREATE DATABASE {name}: {e}"))
            )
        });
    let mut url = url::Url::parse(&server)
        .unwrap_or_else(|e| panic!("{POSTGRES_ENV}={server} is not a URL: {e}"));
    url.set_path(&name);
    url.to_string()
}

/// Drops a database made by [`fresh_postgres`] (best effort).
pub async fn drop_postgres(url: &str) {
    let Some(name) = url.rsplit('/').next() else {
        return;
    };
    if let Ok(mut conn) = connect(&server()).await {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut conn)
        .await;
    }
}

/// Runs `scenario` on a fresh SQLite file, then on a fresh Postgres database (named after
/// `name`), dropping the Postgres one afterwards.
pub async fn on_both_databases<F, Fut>(name: &str, scenario: F)
where
    F: Fn(Database) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    scenario(Database::Sqlite(dir.path().join("q.db"))).await;
    let url = fresh_postgres(name).await;
    scenario(Database::Postgres(url.clone())).await;
    drop_postgres(&url).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_says_what_to_run() {
        let message = needs_a_server("postgres://x", "cannot connect: refused");
        assert!(
            message.contains("needs Postgres at ANVIL_TEST_POSTGRES"),
            "{message}"
        );
        assert!(message.contains("run scripts/test.sh"), "{message}");
        assert!(message.contains("cannot connect: refused"), "{message}");
    }
}
