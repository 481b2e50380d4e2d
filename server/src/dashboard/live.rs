//! `GET /live/dashboard?tenant=<id>&range=5m|1h|24h`: server-sent events, one `frame` event
//! (the dashboard's HTML) at once and then one after every second the view reads. It needs a
//! console session. Operators may leave `tenant` out to see the fleet; a tenant admin sees
//! only their own tenant.

use std::convert::Infallible;

use app::dashboard::Range;
use app::AppError;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, Stream};
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use tower_sessions::Session;

use super::view::Scope;
use super::{render, Dashboard};
use crate::store::Db;

#[derive(Debug, Deserialize)]
pub struct LiveQuery {
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    range: Option<String>,
}

fn refuse(e: &AppError) -> Response {
    let status = match e {
        AppError::Unauthorized => StatusCode::UNAUTHORIZED,
        AppError::Forbidden(_) => StatusCode::FORBIDDEN,
        AppError::NotFound => StatusCode::NOT_FOUND,
        AppError::Invalid(_) => StatusCode::BAD_REQUEST,
        AppError::Unavailable(_) | AppError::Transport(_) => StatusCode::SERVICE_UNAVAILABLE,
        AppError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, e.to_string()).into_response()
}

/// The stream of frames.
pub async fn handler(
    State(dashboard): State<Dashboard>,
    State(db): State<Db>,
    session: Session,
    Query(query): Query<LiveQuery>,
) -> Response {
    let range = match query.range.as_deref() {
        None => Range::default(),
        Some(r) => match Range::parse(r) {
            Some(r) => r,
            None => {
                return refuse(&AppError::Invalid(format!(
                    "unknown range {r:?}: use 5m, 1h or 24h"
                )))
            }
        },
    };
    let tenant = query.tenant.filter(|t| !t.is_empty());
    let scope = match crate::console::dashboard_scope(&db, &session, tenant.as_deref()).await {
        Ok(scope) => scope,
        Err(e) => return refuse(&e),
    };
    Sse::new(frames(dashboard, scope, range))
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn frame_event(dashboard: &Dashboard, scope: &Scope, range: Range) -> Event {
    let frame = dashboard.frame(scope, range);
    Event::default()
        .event("frame")
        .id(frame.latest.to_string())
        .data(render::html(&frame))
}

fn frames(
    dashboard: Dashboard,
    scope: Scope,
    range: Range,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let ticks = dashboard.subscribe();
    stream::unfold(
        (dashboard, scope, ticks, true),
        move |(dashboard, scope, mut ticks, first)| async move {
            // A slow reader that lagged behind just takes the newest frame.
            if !first && matches!(ticks.recv().await, Err(RecvError::Closed)) {
                return None;
            }
            let event = frame_event(&dashboard, &scope, range);
            Some((Ok(event), (dashboard, scope, ticks, false)))
        },
    )
}
