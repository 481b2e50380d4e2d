//! What browsers are told and what they may send (see `docs/SECURITY.md`):
//!
//! - [`headers`]: every response says how a browser may use it: a content security policy
//!   (no framing, no plug-ins, scripts, styles and connections only from this origin),
//!   `nosniff`, and `Referrer-Policy: same-origin`.
//! - [`same_origin`]: the console's server functions (`/api/*`) change state with the session
//!   cookie, so a call must come from the console's own pages: its `Origin` names this host or
//!   it says `Sec-Fetch-Site: same-origin`, and its body is a form or JSON (never `text/plain`
//!   or `multipart`, which a foreign page can send without asking). `SameSite=Strict` on the
//!   cookie is the second wall, not the only one.
//! - [`error_status`]: a server function's error crosses the wire as JSON; its HTTP status
//!   says what kind it is (400, 401, 403, 404, 409, 429, 503), not always 500.

use axum::extract::Request;
use axum::http::header::{
    CONTENT_SECURITY_POLICY, CONTENT_TYPE, HOST, ORIGIN, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The content security policy of every response. The console's hydration script is inline
/// (it imports the WASM module), so scripts from this origin and inline ones are allowed;
/// WASM needs `wasm-unsafe-eval`. Nothing may frame the console, post a form elsewhere, or
/// load a plug-in.
pub const CONTENT_SECURITY: &str = "default-src 'self'; script-src 'self' 'unsafe-inline' \
     'wasm-unsafe-eval'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
     connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; \
     frame-ancestors 'none'";

/// The content security policy of the data plane's answers (`/v1/check` and its companions):
/// JSON that no browser should render, run or frame, so nothing is allowed at all. Stricter
/// than [`CONTENT_SECURITY`], and a fifth of its length on an answer every gateway reads.
pub const API_CONTENT_SECURITY: &str = "default-src 'none'; frame-ancestors 'none'";

/// Adds the security headers to every response that does not set its own.
pub async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    secure(response.headers_mut());
    response
}

/// [`headers`] with the data plane's policy, [`API_CONTENT_SECURITY`].
pub async fn api_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    secure_api(response.headers_mut());
    response
}

/// The security headers of [`headers`], added to `set` where it has none of its own.
pub fn secure(set: &mut HeaderMap) {
    secure_with(set, CONTENT_SECURITY);
}

/// [`secure`] with the data plane's policy, [`API_CONTENT_SECURITY`] (`/v1/check` calls this
/// itself, outside the middleware).
pub fn secure_api(set: &mut HeaderMap) {
    secure_with(set, API_CONTENT_SECURITY);
}

fn secure_with(set: &mut HeaderMap, policy: &'static str) {
    let fixed = [
        (CONTENT_SECURITY_POLICY, policy),
        (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (REFERRER_POLICY, "same-origin"),
        (X_FRAME_OPTIONS, "DENY"),
    ];
    for (name, value) in fixed {
        if !set.contains_key(&name) {
            set.insert(name, HeaderValue::from_static(value));
        }
    }
}

/// Refuses a state-changing call of a server function that does not come from this origin's
/// pages (403), or whose body a cross-site form could have sent (415).
pub async fn same_origin(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let reads = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if reads || !path.starts_with("/api/") {
        return next.run(request).await;
    }
    if let Err(refusal) = check(request.headers()) {
        return refusal.into_response();
    }
    next.run(request).await
}

/// The most bytes of an error body read to find its status.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Gives a server function's error response the status of its [`app::AppError`] (Leptos
/// answers every error with 500).
pub async fn error_status(request: Request, next: Next) -> Response {
    let is_server_fn = request.uri().path().starts_with("/api/");
    let response = next.run(request).await;
    if !is_server_fn || response.status() != StatusCode::INTERNAL_SERVER_ERROR {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ERROR_BODY).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    if let Ok(error) = serde_json::from_slice::<app::AppError>(&bytes) {
        parts.status =
            StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// Why a call was refused, as its response.
#[derive(Debug)]
struct Refusal(StatusCode, &'static str);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.0, self.1).into_response()
    }
}

fn check(headers: &HeaderMap) -> Result<(), Refusal> {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let same_site = text("sec-fetch-site") == Some("same-origin");
    let origin_matches = match (text(ORIGIN.as_str()), text(HOST.as_str())) {
        (Some(origin), Some(host)) => authority(origin) == Some(host),
        _ => false,
    };
    if !(same_site || origin_matches) {
        return Err(Refusal(
            StatusCode::FORBIDDEN,
            "cross-site request refused: the console's calls must come from its own pages \
             (an Origin header naming this host, or Sec-Fetch-Site: same-origin)",
        ));
    }
    let media = text(CONTENT_TYPE.as_str())
        .and_then(|t| t.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase());
    match media.as_deref() {
        Some("application/x-www-form-urlencoded" | "application/json") => Ok(()),
        _ => Err(Refusal(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the console's calls take a form (application/x-www-form-urlencoded) or JSON body",
        )),
    }
}

/// `host[:port]` of an origin such as `https://sluice.example:8443`.
fn authority(origin: &str) -> Option<&str> {
    let (_, rest) = origin.split_once("://")?;
    Some(rest.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    const FORM: (&str, &str) = ("content-type", "application/x-www-form-urlencoded");

    #[test]
    fn a_call_from_the_consoles_own_page_passes() {
        let own = headers(&[
            ("host", "sluice.example:3000"),
            ("origin", "http://sluice.example:3000"),
            FORM,
        ]);
        assert!(check(&own).is_ok());
        let fetch_metadata = headers(&[("sec-fetch-site", "same-origin"), FORM]);
        assert!(check(&fetch_metadata).is_ok());
    }

    #[test]
    fn a_foreign_or_missing_origin_is_forbidden() {
        for refused in [
            headers(&[
                ("host", "sluice.example"),
                ("origin", "https://evil.example"),
                FORM,
            ]),
            headers(&[("host", "sluice.example"), ("origin", "null"), FORM]),
            headers(&[("host", "sluice.example"), FORM]),
            headers(&[("sec-fetch-site", "cross-site"), FORM]),
            headers(&[("sec-fetch-site", "same-site"), FORM]),
        ] {
            assert_eq!(check(&refused).unwrap_err().0, StatusCode::FORBIDDEN);
        }
    }

    #[test]
    fn bodies_a_foreign_form_can_send_unasked_are_refused() {
        for media in ["text/plain", "multipart/form-data; boundary=x"] {
            let mut map = headers(&[("sec-fetch-site", "same-origin")]);
            map.insert("content-type", HeaderValue::from_static(media));
            assert_eq!(
                check(&map).unwrap_err().0,
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            );
        }
        let json = headers(&[
            ("sec-fetch-site", "same-origin"),
            ("content-type", "application/json; charset=utf-8"),
        ]);
        assert!(check(&json).is_ok());
    }
}
