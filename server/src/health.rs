//! `/healthz` (the process is up) and `/readyz` (it can serve: the database and the limiter
//! backend answer). `/readyz` names whatever is down, so an operator knows where to look.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;

use crate::limiter::Limiter;
use crate::store::Db;

/// How long a readiness probe waits for each dependency.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// `GET /healthz`: answers as long as the process serves HTTP.
pub async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({ "status": "ok" }))
}

/// One dependency's state in the `/readyz` body.
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

/// Probes the database and the limiter concurrently.
pub async fn probe(db: &Db, limiter: &Limiter) -> Readiness {
    let (database, redis) =
        tokio::join!(check("database", db.ping()), check("redis", limiter.ping()));
    let mut checks = vec![database];
    if !matches!(limiter, Limiter::InProcess(_)) {
        checks.push(redis);
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

/// `GET /readyz`: 200 when every dependency answers, 503 naming the ones that do not.
pub async fn readyz(State(db): State<Db>, State(limiter): State<Limiter>) -> impl IntoResponse {
    let readiness = probe(&db, &limiter).await;
    let status = if readiness.down.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(readiness))
}
