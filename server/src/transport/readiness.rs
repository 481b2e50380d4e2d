//! Whether the instance can serve: the database and the limiter backend are probed
//! concurrently, each within a deadline. `/readyz` and the console's status widget read it.

use std::time::Duration;

use serde::Serialize;

use crate::limiter::Limiter;
use crate::store::Db;

/// How long a readiness probe waits for each dependency.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// One dependency's state in the `/readyz` body. The error text (addresses, driver messages)
/// is for operators: [`Readiness::without_errors`] removes it for everyone else.
#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The `/readyz` body.
#[derive(Debug, Serialize)]
pub struct Readiness {
    pub status: &'static str,
    /// Names of the dependencies that are down, e.g. `["redis"]`.
    pub down: Vec<&'static str>,
    pub checks: Vec<Check>,
}

impl Readiness {
    /// The same reading with each dependency's name and state only.
    pub fn without_errors(mut self) -> Self {
        for check in &mut self.checks {
            check.error = None;
        }
        self
    }
}

/// Probes the database and the limiter concurrently.
pub async fn probe(db: &Db, limiter: &Limiter) -> Readiness {
    let (database, redis) =
        tokio::join!(check("database", db.ping()), check("redis", limiter.ping()));
    let mut checks = vec![database];
    if let Some(client) = limiter.redis() {
        checks.push(redis);
        // A node whose breaker is open gets no checks, whatever a PING says now.
        let open = client.open_breakers();
        if !open.is_empty() {
            checks.push(Check {
                name: "redis_breaker",
                ok: false,
                error: Some(format!("circuit breaker open for {}", open.join(", "))),
            });
        }
    }
    for check in checks.iter().filter(|c| !c.ok) {
        tracing::warn!(dependency = check.name, error = ?check.error, "readiness probe failed");
    }
    let down: Vec<&'static str> = checks.iter().filter(|c| !c.ok).map(|c| c.name).collect();
    let status = if down.is_empty() {
        "ready"
    } else {
        "unavailable"
    };
    Readiness {
        status,
        down,
        checks,
    }
}

async fn check<E: std::fmt::Display>(
    name: &'static str,
    probe: impl std::future::Future<Output = Result<(), E>>,
) -> Check {
    let error = match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some(format!("no answer within {PROBE_TIMEOUT:?}")),
    };
    Check {
        name,
        ok: error.is_none(),
        error,
    }
}
