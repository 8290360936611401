//! Fresh databases for tests and benchmarks: a SQLite file in a temp dir, or a new database on
//! the Postgres server named by `ANVIL_TEST_POSTGRES` (default: the local server at
//! 127.0.0.1:5432 that the project's machines run).

use super::QueueLocation;

/// The server tests create their databases on.
pub const POSTGRES_ENV: &str = "ANVIL_TEST_POSTGRES";
const DEFAULT_SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// Creates a new, empty database on the test server and returns its location. Fails with a
/// message saying how to provide a server.
pub async fn fresh_postgres(prefix: &str) -> Result<QueueLocation, String> {
    use sqlx::Connection;
    let server = std::env::var(POSTGRES_ENV).unwrap_or_else(|_| DEFAULT_SERVER.to_string());
    let mut conn = sqlx::PgConnection::connect(&server).await.map_err(|e| {
        format!(
            "cannot reach the test Postgres server at {server}: {e}. Start PostgreSQL there \
             (trust auth) or set {POSTGRES_ENV} to the URL of a server where this user may \
             CREATE DATABASE."
        )
    })?;
    let name = format!(
        "anvil_{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    // `name` is ours: a prefix from the caller and hex digits.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .map_err(|e| format!("CREATE DATABASE {name} on {server}: {e}"))?;
    let mut url = url::Url::parse(&server).map_err(|e| format!("{POSTGRES_ENV}: {e}"))?;
    url.set_path(&name);
    Ok(QueueLocation::Postgres(url.to_string()))
}

/// Drops a database made by [`fresh_postgres`] (best effort).
pub async fn drop_postgres(location: &QueueLocation) {
    use sqlx::Connection;
    let QueueLocation::Postgres(url) = location else {
        return;
    };
    let Some(name) = url.rsplit('/').next().map(str::to_string) else {
        return;
    };
    let server = std::env::var(POSTGRES_ENV).unwrap_or_else(|_| DEFAULT_SERVER.to_string());
    if let Ok(mut conn) = sqlx::PgConnection::connect(&server).await {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut conn)
        .await;
    }
}
