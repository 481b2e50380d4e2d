//! `POST /v1/check` over HTTP: find the key, parse the body with the core's one parser, let
//! the decision core decide, and write the answer as 200 or 429 with the rate-limit headers.
//!
//! In steady state this runs no SQL (key and tenant come from the caches) and exactly one
//! Redis command (the check script). A route that matches no rule is allowed without
//! touching Redis.

use std::sync::Arc;
use std::time::Instant;

use app::rules::model::{Decision, Verdict};
use axum::body::Body;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::header::{ALLOW, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;

use super::browser::secure_api;
use super::credentials::presented_key;
use super::error::ApiError;
use super::ops::method_label;
use super::state::AppState;
use crate::decide::{Answer, CheckInput, CompiledTenant, Mode, ReleaseInput, SettleInput};
use crate::limiter::{Released, Settlement};
use crate::store::rules::Rule;
use app::rules::Algorithm;

/// The largest accepted request body.
pub const MAX_BODY_BYTES: usize = 8 * 1024;

/// The decision body.
#[derive(Debug, Serialize)]
pub struct CheckResponse<'a> {
    pub allowed: bool,
    /// The rule that decided, or null when no rule applies.
    pub policy: Option<&'a str>,
    pub limit: Option<u64>,
    pub remaining: Option<u64>,
    pub reset_after_ms: Option<u64>,
    pub retry_after_ms: Option<u64>,
    /// The cost exceeds the rule's capacity: retrying cannot help.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub never_fits: bool,
    /// Set when the limiter could not decide: `fail_open` (the rules fail open, allowed) or
    /// `local` (decided in this instance with its share of the limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub degraded: Option<&'static str>,
    /// `/v1/reserve` only: the reservation an admitted request made, to settle with
    /// `/v1/settle`. Absent when nothing was charged in the shared limiter (no rule applied,
    /// failed open, or decided `local`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<&'a str>,
    /// The lease an admitted request holds in its `concurrency` rules, to free with
    /// `/v1/release` when it is done (it ends by itself after the rule's period).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<&'a str>,
}

impl CheckResponse<'_> {
    /// The answer's JSON, the bytes `serde_json` writes for it (the test
    /// `written_by_hand_as_serde_writes_it` holds them equal), written field by field: a
    /// check's answer through serde cost about 2,500 instructions, a tenth of them this.
    pub fn to_json(&self) -> Vec<u8> {
        fn number(out: &mut Vec<u8>, name: &str, value: Option<u64>) {
            out.extend_from_slice(name.as_bytes());
            match value {
                Some(v) => out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes()),
                None => out.extend_from_slice(b"null"),
            }
        }
        fn text(out: &mut Vec<u8>, name: &str, value: Option<&str>) {
            out.extend_from_slice(name.as_bytes());
            match value {
                // Writing a string into a vector cannot fail; serde escapes it.
                Some(v) => {
                    let _ = serde_json::to_writer(&mut *out, v);
                }
                None => out.extend_from_slice(b"null"),
            }
        }
        let mut out = Vec::with_capacity(160);
        out.extend_from_slice(if self.allowed {
            b"{\"allowed\":true"
        } else {
            b"{\"allowed\":false"
        });
        text(&mut out, ",\"policy\":", self.policy);
        number(&mut out, ",\"limit\":", self.limit);
        number(&mut out, ",\"remaining\":", self.remaining);
        number(&mut out, ",\"reset_after_ms\":", self.reset_after_ms);
        number(&mut out, ",\"retry_after_ms\":", self.retry_after_ms);
        if self.never_fits {
            out.extend_from_slice(b",\"never_fits\":true");
        }
        if self.degraded.is_some() {
            text(&mut out, ",\"degraded\":", self.degraded);
        }
        if self.reservation.is_some() {
            text(&mut out, ",\"reservation\":", self.reservation);
        }
        if self.lease.is_some() {
            text(&mut out, ",\"lease\":", self.lease);
        }
        out.push(b'}');
        out
    }
}

fn too_big() -> ApiError {
    ApiError::BadRequest(format!(
        "the body must be a JSON object of at most {MAX_BODY_BYTES} bytes"
    ))
}

fn seconds_up(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// `POST /v1/check`. Routed outside the router's middleware, and taken by the listener before
/// the router (`listener::serve`), it does itself what those did for it: it counts itself in
/// `http_requests_total`, `http_request_duration_seconds` and `http_requests_in_flight`
/// (reading the body included), limits the body to [`MAX_BODY_BYTES`], and adds the security
/// headers.
pub async fn check(State(state): State<AppState>, request: Request) -> Response {
    let _in_flight = state.metrics.http_started();
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| too_big());
    let mut response = decide(&state, &parts.headers, body)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    let elapsed = started.elapsed();
    state.metrics.check_done(elapsed);
    state.metrics.check_answered(response.status(), elapsed);
    secure_api(response.headers_mut());
    response
}

/// `/v1/check` with any method but POST: 405, counted and with the security headers, as the
/// router's middleware would have done.
pub async fn not_allowed(State(state): State<AppState>, method: Method) -> Response {
    let _in_flight = state.metrics.http_started();
    let started = Instant::now();
    let mut response = (
        StatusCode::METHOD_NOT_ALLOWED,
        [(ALLOW, HeaderValue::from_static("POST"))],
    )
        .into_response();
    secure_api(response.headers_mut());
    state.metrics.http_request(
        method_label(&method),
        "/v1/check",
        response.status().as_str(),
        started.elapsed(),
    );
    response
}

async fn decide(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, ApiError>,
) -> Result<Response, ApiError> {
    let key = state.identities.key(presented_key(headers)).await?;
    let tenant = state.identities.check_tenant(&key).await?;
    let bytes = body?;
    let input = CheckInput::parse_json(&bytes).map_err(|e| ApiError::BadRequest(e.message))?;
    let answer = state.decider.decide(&tenant, &input, Mode::Enforce).await?;
    Ok(answer_response(&answer))
}

/// The answer of `/v1/check` and `/v1/reserve`.
fn answer_response(answer: &Answer) -> Response {
    match answer {
        Answer::NoRule => Json(CheckResponse {
            allowed: true,
            policy: None,
            limit: None,
            remaining: None,
            reset_after_ms: None,
            retry_after_ms: None,
            never_fits: false,
            degraded: None,
            reservation: None,
            lease: None,
        })
        .into_response(),
        Answer::FailedOpen { policy } => Json(CheckResponse {
            allowed: true,
            policy: policy.as_deref(),
            limit: None,
            remaining: None,
            reset_after_ms: None,
            retry_after_ms: None,
            never_fits: false,
            degraded: Some("fail_open"),
            reservation: None,
            lease: None,
        })
        .into_response(),
        Answer::Decided(decided) => {
            let (rule, decision) = decided.deciding();
            respond(
                rule,
                decision,
                decided.allowed,
                decided.local,
                (decided.reservation.as_deref(), decided.lease.as_deref()),
            )
        }
    }
}

/// The answer of a decision; `local` when this instance decided with its share of the limit.
fn respond(
    rule: &Rule,
    decision: &Decision,
    allowed: bool,
    local: bool,
    (reservation, lease): (Option<&str>, Option<&str>),
) -> Response {
    let never_fits = decision.verdict == Verdict::NeverFits;
    let remaining = decision.remaining.max(0.0).floor() as u64;
    let body = CheckResponse {
        allowed,
        policy: Some(&rule.body.name),
        limit: Some(decision.limit),
        remaining: Some(remaining),
        reset_after_ms: Some(decision.reset_after_ms),
        retry_after_ms: (!allowed && !never_fits).then_some(decision.retry_after_ms),
        never_fits,
        degraded: local.then_some("local"),
        reservation,
        lease,
    };
    let bytes = body.to_json();
    // Room for every header the answer gets (content type, rate limits, the security
    // headers [`check`] adds), so the map is allocated once.
    let mut headers = HeaderMap::with_capacity(16);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in rate_limit_headers(rule, decision, allowed) {
        // The header takes the string's buffer as it is, without a copy.
        if let Ok(value) = HeaderValue::from_maybe_shared(Bytes::from(value)) {
            headers.insert(name, value);
        }
    }
    let mut response = Response::new(Body::from(bytes));
    *response.status_mut() = if allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    *response.headers_mut() = headers;
    response
}

/// The body of `/v1/settle`'s answer.
#[derive(Debug, Serialize)]
pub struct SettleResponse<'a> {
    pub reservation: &'a str,
    /// What `/v1/reserve` charged.
    pub estimate: u64,
    /// The final cost now charged in its place.
    pub cost: u64,
    /// It had been settled before at this cost; nothing changed now.
    pub repeated: bool,
}

/// The tenant of a data-plane call's check key, and the call's body: what `/v1/reserve`,
/// `/v1/settle` and `/v1/release` begin with.
async fn caller(
    state: &AppState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(Arc<CompiledTenant>, Bytes), ApiError> {
    let key = state.identities.key(presented_key(headers)).await?;
    let tenant = state.identities.check_tenant(&key).await?;
    Ok((tenant, body.map_err(|_| too_big())?))
}

/// `POST /v1/reserve`: a check whose cost is an estimate, kept as a reservation when
/// admitted, to be settled at the real cost with `/v1/settle`. Same key, body (plus
/// `ttl_ms`) and answers as `/v1/check`.
pub async fn reserve(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answer = async {
        let (tenant, body) = caller(&state, &headers, body).await?;
        let (input, ttl_ms) =
            CheckInput::parse_reserve_json(&body).map_err(|e| ApiError::BadRequest(e.message))?;
        let answer = state.decider.reserve(&tenant, &input, ttl_ms).await?;
        Ok::<_, ApiError>(answer_response(&answer))
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

/// `POST /v1/settle`: sets a reservation's final cost on every rule it charged, in one step.
/// 200 when settled (again: `repeated`), 404 when there is no such reservation of this
/// tenant (or it expired, keeping its estimate), 409 when it was settled at another cost.
pub async fn settle(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answer = async {
        let (tenant, body) = caller(&state, &headers, body).await?;
        let input = SettleInput::parse_json(&body).map_err(|e| ApiError::BadRequest(e.message))?;
        let id = input.reservation.as_str();
        match state.decider.settle(&tenant, id, input.cost).await? {
            Settlement::Unknown => Err(ApiError::Absent(format!(
                "no reservation {id} of this tenant: it was never made, or it expired (keeping its estimate)"
            ))),
            Settlement::Settled { cost, .. } if cost != input.cost => Err(ApiError::Conflict(
                format!(
                    "reservation {id} was already settled at cost {cost}; a reservation is settled once"
                ),
            )),
            Settlement::Settled {
                estimate,
                cost,
                repeated,
                ..
            } => Ok(Json(SettleResponse {
                reservation: id,
                estimate,
                cost,
                repeated,
            })
            .into_response()),
        }
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

/// The body of `/v1/release`'s answer.
#[derive(Debug, Serialize)]
pub struct ReleaseResponse<'a> {
    pub lease: &'a str,
    /// It had been released before; nothing changed now.
    pub repeated: bool,
}

/// `POST /v1/release`: frees a lease's slot in every concurrency bucket it holds, at once.
/// 200 when released (again: `repeated`), 404 when there is no such lease of this tenant
/// (never taken, or it ended by itself after the rule's period).
pub async fn release(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answer = async {
        let (tenant, body) = caller(&state, &headers, body).await?;
        let input = ReleaseInput::parse_json(&body).map_err(|e| ApiError::BadRequest(e.message))?;
        let id = input.lease.as_str();
        match state.decider.release(&tenant, id).await? {
            Released::Unknown => Err(ApiError::Absent(format!(
                "no lease {id} of this tenant: it was never taken, or it ended by itself after its rule's period"
            ))),
            released => Ok(Json(ReleaseResponse {
                lease: id,
                repeated: released == Released::Before,
            })
            .into_response()),
        }
    };
    answer.await.unwrap_or_else(IntoResponse::into_response)
}

const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The rate-limit headers of a decision, as `/v1/check` and gRPC `ShouldRateLimit` both
/// answer them: `X-RateLimit-*`, the IETF `RateLimit-Policy` and `RateLimit`, and
/// `Retry-After` on a denial that waiting can cure.
pub fn rate_limit_headers(
    rule: &Rule,
    decision: &Decision,
    allowed: bool,
) -> Vec<(HeaderName, String)> {
    let never_fits = decision.verdict == Verdict::NeverFits;
    let remaining = decision.remaining.max(0.0).floor() as u64;
    let reset = seconds_up(decision.reset_after_ms);
    let retry = seconds_up(decision.retry_after_ms).max(1);
    let window = seconds_up(rule.body.period_ms).max(1);
    // Time until this request could go ahead when denied; until the quota is whole otherwise.
    let t = if !allowed && !never_fits {
        retry
    } else {
        reset
    };
    let name = rule.body.name.as_str();
    // The values are written piece by piece: `format!` costs several times more on the check
    // path (`docs/BENCHMARKS.md`, "What changed in the check's own work"). One string a
    // header, as before: the limit and the remaining count, used twice, are written once.
    let quoted = |tail: &[&str]| {
        let mut value = String::with_capacity(name.len() + 64);
        value.push('"');
        value.push_str(name);
        value.push('"');
        for part in tail {
            value.push_str(part);
        }
        value
    };
    let mut digits = itoa::Buffer::new();
    let limit = digits.format(decision.limit).to_owned();
    let left = digits.format(remaining).to_owned();
    let policy = if rule.body.algorithm == Algorithm::Concurrency {
        // Requests in flight, not a quota per window.
        quoted(&[";q=", &limit, ";qu=\"concurrent-requests\""])
    } else {
        quoted(&[";q=", &limit, ";w=", digits.format(window)])
    };
    let current = quoted(&[";r=", &left, ";t=", digits.format(t)]);
    let mut headers = Vec::with_capacity(6);
    headers.extend([
        (X_RATELIMIT_LIMIT, limit),
        (X_RATELIMIT_REMAINING, left),
        (X_RATELIMIT_RESET, digits.format(reset).to_owned()),
        (RATELIMIT_POLICY, policy),
        (RATELIMIT, current),
    ]);
    if !allowed && !never_fits {
        headers.push((RETRY_AFTER, digits.format(retry).to_owned()));
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn written_by_hand_as_serde_writes_it(
            allowed: bool,
            policy in proptest::option::of(any::<String>()),
            numbers in proptest::array::uniform4(proptest::option::of(any::<u64>())),
            never_fits: bool,
            degraded in proptest::option::of(prop_oneof![Just("local"), Just("fail_open")]),
            reservation in proptest::option::of("[a-z0-9\"\\\\\u{0}-\u{1f}é]{0,40}"),
            lease in proptest::option::of(any::<String>()),
        ) {
            let answer = CheckResponse {
                allowed,
                policy: policy.as_deref(),
                limit: numbers[0],
                remaining: numbers[1],
                reset_after_ms: numbers[2],
                retry_after_ms: numbers[3],
                never_fits,
                degraded,
                reservation: reservation.as_deref(),
                lease: lease.as_deref(),
            };
            let by_serde = serde_json::to_vec(&answer).unwrap();
            prop_assert_eq!(
                String::from_utf8(answer.to_json()).unwrap(),
                String::from_utf8(by_serde).unwrap()
            );
        }
    }
}
