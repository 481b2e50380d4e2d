//! Operations endpoints: `/healthz` (the process is up), `/readyz` (it can serve: the
//! database and the limiter backend answer; it names whatever is down, so an operator knows
//! where to look), `/metrics` (Prometheus text), and [`track`], the middleware that counts
//! every request by its route template.

use super::readiness::probe;
use super::state::AppState;
use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;

/// `GET /healthz`: answers as long as the process serves HTTP.
pub async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 when every dependency answers, 503 naming the ones that do not.
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let readiness = probe(&state.db, &state.limiter).await;
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

/// Counts and times every request by its route template.
pub async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = request.method().as_str().to_owned();
    let _in_flight = state.metrics.http_started();
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    state.metrics.http_request(
        &method,
        &route,
        response.status().as_str(),
        started.elapsed(),
    );
    response
}
