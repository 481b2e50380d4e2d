//! Operations endpoints: `/healthz` (the process is up), `/readyz` (it can serve: the
//! database and the limiter backend answer; it names whatever is down, so an operator knows
//! where to look), `/metrics` (Prometheus text), and [`track`], the middleware that counts
//! every request by its route template.

use app::keys::KeyKind;

use super::credentials::presented_key;
use super::readiness::probe;
use super::state::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// `GET /docs/ALGORITHMS.md`: how each algorithm decides, as plain text. The console's rule
/// form links here next to its one-line summary of the chosen algorithm.
pub async fn algorithms_doc() -> impl IntoResponse {
    (
        [(CONTENT_TYPE, "text/plain; charset=utf-8")],
        include_str!("../../../docs/ALGORITHMS.md"),
    )
}

/// `GET /healthz`: answers as long as the process serves HTTP.
pub async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 when every dependency answers, 503 naming the ones that do not. Each
/// failure's error text goes to the log, and to a caller presenting an operator key; anyone
/// else (a load balancer, a stranger) gets the names only.
pub async fn readyz(State(state): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    let readiness = probe(&state.db, &state.limiter).await;
    let operator = matches!(
        state.identities.key(presented_key(&headers)).await,
        Ok(key) if key.kind == Some(KeyKind::Operator)
    );
    let readiness = if operator {
        readiness
    } else {
        readiness.without_errors()
    };
    let status = if readiness.down.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(readiness))
}

/// `GET /metrics`.
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    if let Some(redis) = state.limiter.redis() {
        state
            .metrics
            .redis_breakers(&redis.breakers(), redis.refused());
    }
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}

/// The `method` label of a request: one of the nine methods HTTP defines, or `other`, so a
/// client inventing methods cannot add series to `/metrics`.
pub(super) fn method_label(method: &Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "PATCH" => "PATCH",
        "OPTIONS" => "OPTIONS",
        "CONNECT" => "CONNECT",
        "TRACE" => "TRACE",
        _ => "other",
    }
}

/// Counts and times every request by its route template.
pub async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = method_label(request.method());
    let _in_flight = state.metrics.http_started();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    state.metrics.http_request(
        method,
        &route,
        response.status().as_str(),
        started.elapsed(),
    );
    response
}
