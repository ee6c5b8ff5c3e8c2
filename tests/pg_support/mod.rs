//! A fresh PostgreSQL schema per test, on the server `TOOLGATE_TEST_POSTGRES_URL` names.

/// A fresh schema `tg_<tag>_<uuid>` on the test server, as a store URL; `None` (skip) when the
/// variable is unset; a panic when it is set and the server cannot be reached.
pub async fn fresh_schema(tag: &str) -> Option<String> {
    let Ok(base) = std::env::var("TOOLGATE_TEST_POSTGRES_URL") else {
        eprintln!("TOOLGATE_TEST_POSTGRES_URL is not set: skipping the PostgreSQL test");
        return None;
    };
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("TOOLGATE_TEST_POSTGRES_URL={base}: {e}"));
    tokio::spawn(conn);
    let schema = format!("tg_{tag}_{}", uuid::Uuid::now_v7().simple());
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    Some(format!("{base}{sep}options=-c%20search_path%3D{schema}"))
}
