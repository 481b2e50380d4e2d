//! `GET /live/dashboard?tenant=<id>&range=5m|1h|24h`: server-sent events, one `frame` event
//! (the dashboard's HTML) at once and then one after every second the view reads. It needs a
//! console session. Operators may leave `tenant` out to see the fleet; a tenant admin sees
//! only their own tenant. Who may watch what is the admin service's decision
//! ([`crate::admin::AdminService::authorize_dashboard`]), asked again every
//! [`RECHECK_EVERY`] frames with the session and the user read afresh from the store, so a
//! stream ends within seconds of sign-out, expiry, suspension or removal. One session holds
//! at most [`STREAMS_PER_SESSION`] streams; one more is refused with 429.

use std::convert::Infallible;

use app::dashboard::Range;
use app::AppError;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use tower_sessions::Session;

use super::console::dashboard_scope;
use super::state::AppState;
use super::stream_slots::{StreamSlot, STREAMS_PER_SESSION};
use crate::dashboard::view::Scope;
use crate::store::sessions::SqlSessionStore;

#[derive(Debug, Deserialize)]
pub struct LiveQuery {
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    range: Option<String>,
}

fn refuse(e: &AppError) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, e.to_string()).into_response()
}

/// The stream of frames.
pub async fn handler(
    State(state): State<AppState>,
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
    let scope = match dashboard_scope(&state.db, &state.admin, &session, tenant.as_deref()).await {
        Ok(scope) => scope,
        Err(e) => return refuse(&e),
    };
    let Some(id) = session.id() else {
        return refuse(&AppError::Unauthorized);
    };
    let Some(slot) = state.streams.take(id) else {
        return refuse(&AppError::TooMany(format!(
            "this session already has {STREAMS_PER_SESSION} dashboard streams open; close one"
        )));
    };
    Sse::new(frames(state, session, slot, tenant, scope, range))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// How often (in frames, about seconds) an open stream checks again that its session exists
/// and may still see it.
const RECHECK_EVERY: u32 = 2;

fn frame_event(dashboard: &crate::dashboard::Dashboard, scope: &Scope, range: Range) -> Event {
    Event::default()
        .event("frame")
        .id(dashboard.view_latest().to_string())
        .data(&*dashboard.html(scope, range))
}

/// What a stream needs between frames.
struct Stream {
    state: AppState,
    session: Session,
    /// This stream's place among its session's; freed when the stream ends.
    _slot: StreamSlot,
    tenant: Option<String>,
    scope: Scope,
    range: Range,
    ticks: tokio::sync::broadcast::Receiver<i64>,
    stopping: tokio::sync::watch::Receiver<bool>,
    sent: u32,
}

/// Whether the stream's session still exists in the store (not signed out, not expired) and
/// its user may still watch this dashboard. The session object the request brought is a copy
/// read when the stream opened, so the record is read again here.
async fn still_allowed(s: &Stream) -> bool {
    let Some(id) = s.session.id() else {
        return false;
    };
    let store = SqlSessionStore::new(s.state.db.clone());
    match tower_sessions::SessionStore::load(&store, &id).await {
        Ok(Some(_)) => {}
        Ok(None) => return false,
        // The store did not answer: keep streaming and ask again at the next check.
        Err(e) => {
            tracing::warn!(error = %e, "cannot re-read a dashboard stream's session");
            return true;
        }
    }
    dashboard_scope(&s.state.db, &s.state.admin, &s.session, s.tenant.as_deref())
        .await
        .is_ok()
}

fn frames(
    state: AppState,
    session: Session,
    slot: StreamSlot,
    tenant: Option<String>,
    scope: Scope,
    range: Range,
) -> impl futures::Stream<Item = Result<Event, Infallible>> {
    let state = Stream {
        ticks: state.dashboard.subscribe(),
        stopping: state.dashboard.stopping(),
        state,
        session,
        _slot: slot,
        tenant,
        scope,
        range,
        sent: 0,
    };
    stream::unfold(state, |mut s| async move {
        if s.sent > 0 {
            // A slow reader that lagged behind just takes the newest frame. The instance
            // stopping ends the stream, so that shutdown does not wait for open pages.
            tokio::select! {
                tick = s.ticks.recv() => {
                    if matches!(tick, Err(RecvError::Closed)) {
                        return None;
                    }
                }
                _ = s.stopping.changed() => return None,
            }
            // Signed out, suspended or no longer an admin of the tenant: the stream ends
            // (the browser reconnects and is refused).
            if s.sent % RECHECK_EVERY == 0 && !still_allowed(&s).await {
                return None;
            }
        }
        let event = frame_event(&s.state.dashboard, &s.scope, s.range);
        s.sent += 1;
        Some((Ok(event), s))
    })
}
