//! PostgreSQL errors as the store reports them: a readable text, and whether to retry.

use std::time::Duration;

use tokio_postgres::error::SqlState;

use crate::audit::AuditError;

/// `Retry-After` of a busy store.
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(1);

/// A PostgreSQL error for people: the server's message, detail and SQLSTATE when the server
/// sent one (tokio-postgres alone says "db error"), else the error and its causes. Never
/// holds a password (the server's messages do not carry one; URLs are shown redacted).
pub fn describe_pg_error(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut out = format!("{}: {}", db.severity(), db.message());
        if let Some(d) = db.detail() {
            out.push_str(&format!(" ({d})"));
        }
        out.push_str(&format!(" [SQLSTATE {}]", db.code().code()));
        return out;
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(&format!(": {text}"));
        }
        source = s.source();
    }
    out
}

/// Whether the error means "busy or unreachable, try again" rather than a fault of the request.
pub(super) fn transient(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        Some(c) => {
            *c == SqlState::LOCK_NOT_AVAILABLE
                || *c == SqlState::QUERY_CANCELED
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::T_R_SERIALIZATION_FAILURE
                || *c == SqlState::TOO_MANY_CONNECTIONS
                || *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                || *c == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
        }
        // No server answer: the connection broke or could not be made.
        None => e.is_closed() || std::error::Error::source(e).is_some(),
    }
}

pub(super) fn db_error(what: &str, e: &tokio_postgres::Error) -> AuditError {
    let message = format!("postgres: {what}: {}", describe_pg_error(e));
    if transient(e) {
        AuditError::Unavailable {
            message,
            retry_after: RETRY_AFTER,
        }
    } else {
        AuditError::Sink(message)
    }
}

pub(super) fn pool_error(e: deadpool_postgres::PoolError) -> AuditError {
    let message = match &e {
        deadpool_postgres::PoolError::Backend(pg) => describe_pg_error(pg),
        other => other.to_string(),
    };
    AuditError::Unavailable {
        message: format!("postgres: connect: {message}"),
        retry_after: RETRY_AFTER,
    }
}
