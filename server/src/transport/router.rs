//! The whole HTTP surface of an instance, built in one function so tests can drive it with
//! `oneshot`, without a socket.

use axum::routing::{get, post};
use axum::Router;
use leptos_axum::{generate_route_list, LeptosRoutes};
use tower_sessions::cookie::SameSite;
use tower_sessions::{Expiry, SessionManagerLayer};

use super::state::AppState;
use super::{admin_api, browser, check, console_runtime, live, openapi, ops};
use crate::store::sessions::SqlSessionStore;

/// Idle console sessions end after this many hours.
pub const SESSION_HOURS: i64 = 8;

/// The session cookie's name. Over HTTPS it carries the `__Host-` prefix, so the browser only
/// accepts it `Secure`, for this host alone and for every path: no subdomain can plant or
/// overwrite it.
pub fn session_cookie(secure: bool) -> &'static str {
    if secure {
        "__Host-sluice_session"
    } else {
        "sluice_session"
    }
}

/// The router of one instance. Every request but a check or a probe is handed to the
/// `console` runtime ([`console_runtime`]); a check is routed outside all middleware.
pub fn router(state: AppState, console_threads: tokio::runtime::Handle) -> Router {
    let sessions = SessionManagerLayer::new(SqlSessionStore::new(state.db.clone()))
        .with_name(session_cookie(state.secure_cookies))
        .with_http_only(true)
        .with_same_site(SameSite::Strict)
        .with_secure(state.secure_cookies)
        .with_expiry(Expiry::OnInactivity(time::Duration::hours(SESSION_HOURS)))
        // Saved on every request it is used in, so the expiry counts from the last use (idle),
        // not from the sign-in.
        .with_always_save(true);
    let routes = generate_route_list(app::App);
    let console = state.console.clone();
    // The 404 page is the console too: it needs the same ports (the signed-in user for the
    // header, above all).
    let console_404 = state.console.clone();
    let options = state.leptos_options.clone();
    let mut router = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz));
    if !state.metrics_apart {
        router = router.route("/metrics", get(ops::metrics));
    }
    // A check needs none of the middleware below (sessions, origin checks, the hand-over to
    // the console's threads): it is routed beside them, and counts itself on `/metrics`,
    // limits its body and adds the security headers in its handler. (The listener hands a
    // `POST /v1/check` to that handler before this router; tests that call the router
    // directly, and the other methods, come here.)
    let checks = Router::new()
        .route("/v1/check", post(check::check).fallback(check::not_allowed))
        .with_state(state.clone());
    // Reserve, settle and release are the check's companions, as hot: routed beside it too,
    // with only the metrics and the security headers of the middleware below.
    let companions = Router::new()
        .route("/v1/reserve", post(check::reserve))
        .route("/v1/settle", post(check::settle))
        .route("/v1/release", post(check::release))
        .layer(axum::extract::DefaultBodyLimit::max(check::MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(browser::api_headers))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            ops::track,
        ))
        .with_state(state.clone());
    router
        .merge(admin_api::routes())
        .route("/v1/openapi.json", get(openapi::handler))
        .route("/docs/ALGORITHMS.md", get(ops::algorithms_doc))
        .route("/live/dashboard", get(live::handler))
        .leptos_routes_with_context(
            &state,
            routes,
            move || app::ports::provide(&console),
            move || app::shell(options.clone()),
        )
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(
            move || app::ports::provide(&console_404), app::shell
        ))
        .layer(sessions)
        .layer(axum::middleware::from_fn(browser::error_status))
        .layer(axum::middleware::from_fn(browser::same_origin))
        .layer(axum::middleware::from_fn(browser::headers))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            ops::track,
        ))
        .layer(axum::middleware::from_fn_with_state(
            console_threads,
            console_runtime::hand_over,
        ))
        .with_state(state)
        .merge(checks)
        .merge(companions)
}

/// The router of the separate metrics listener (`SLUICE_METRICS_LISTEN`).
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(ops::metrics))
        .with_state(state)
}
