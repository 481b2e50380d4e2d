//! `POST /v1/check`: authenticate the check key, resolve the tenant's rules for the route,
//! make one limiter call, and answer 200 or 429 with the rate-limit headers.
//!
//! In steady state this runs no SQL (key and tenant come from the caches) and exactly one
//! Redis command (the check script). A route that matches no rule is allowed without
//! touching Redis.

use std::time::Instant;

use app::keys::KeyKind;
use app::rules::model::{Decision, Verdict};
use app::rules::{check_text, FailureMode, Scope, MAX_COST};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::auth::Authenticator;
use crate::dashboard::{self, Outcome};
use crate::error::ApiError;
use crate::limiter::{keys, CheckRequest, Limiter, LimiterError, RuleCheck};
use crate::metrics::Metrics;
use crate::store::rules::Rule;

/// The largest accepted request body.
pub const MAX_BODY_BYTES: usize = 8 * 1024;
/// The longest `request_id`.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckBody {
    route: Option<String>,
    cost: Option<serde_json::Number>,
    subject: Option<String>,
    request_id: Option<String>,
}

/// A validated check.
#[derive(Debug)]
struct Check {
    route: String,
    cost: u64,
    subject: Option<String>,
    request_id: Option<String>,
}

fn parse(body: Result<Bytes, BytesRejection>) -> Result<Check, ApiError> {
    let bytes = body.map_err(|_| {
        ApiError::BadRequest(format!(
            "the body must be a JSON object of at most {MAX_BODY_BYTES} bytes"
        ))
    })?;
    let body: CheckBody = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("invalid JSON body: {e}")))?;
    let route = body.route.ok_or_else(|| {
        ApiError::BadRequest("`route` is required, e.g. \"POST /transfers/{id}\"".into())
    })?;
    check_text("route", &route).map_err(ApiError::BadRequest)?;
    let cost = match body.cost {
        None => 1,
        Some(n) => n
            .as_u64()
            .filter(|c| (1..=MAX_COST).contains(c))
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "`cost` must be a whole number from 1 to {MAX_COST}, not {n}"
                ))
            })?,
    };
    if let Some(subject) = &body.subject {
        check_text("subject", subject).map_err(ApiError::BadRequest)?;
    }
    if let Some(id) = &body.request_id {
        if id.is_empty() || id.len() > MAX_REQUEST_ID_BYTES {
            return Err(ApiError::BadRequest(format!(
                "`request_id` must be 1 to {MAX_REQUEST_ID_BYTES} bytes"
            )));
        }
    }
    Ok(Check {
        route,
        cost,
        subject: body.subject,
        request_id: body.request_id,
    })
}

/// The decision body.
#[derive(Debug, Serialize)]
pub struct CheckResponse {
    pub allowed: bool,
    /// The rule that decided, or null when no rule applies.
    pub policy: Option<String>,
    pub limit: Option<u64>,
    pub remaining: Option<u64>,
    pub reset_after_ms: Option<u64>,
    pub retry_after_ms: Option<u64>,
    /// The cost exceeds the rule's capacity: retrying cannot help.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub never_fits: bool,
    /// Set when the limiter could not decide and the rules fail open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub degraded: Option<&'static str>,
}

fn seconds_up(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// `POST /v1/check`.
pub async fn check(
    State(auth): State<Authenticator>,
    State(limiter): State<Limiter>,
    State(metrics): State<Metrics>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let result = decide(&auth, &limiter, &metrics, &headers, body).await;
    let elapsed = started.elapsed();
    metrics.decision_seconds.observe(elapsed.as_secs_f64());
    metrics.live.check(elapsed);
    result
}

async fn decide(
    auth: &Authenticator,
    limiter: &Limiter,
    metrics: &Metrics,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let key = auth.key(headers).await?;
    if key.kind != Some(KeyKind::Check) {
        return Err(ApiError::Forbidden(
            "only check keys may call /v1/check; admin and operator keys are for /v1/admin".into(),
        ));
    }
    let check = parse(body)?;
    let tenant_id = key.tenant_id.clone().ok_or(ApiError::Unauthorized)?;
    let tenant = auth.tenant(&tenant_id).await?;
    if !tenant.is_active() {
        return Err(ApiError::Forbidden(
            "this tenant is suspended; its keys cannot be used".into(),
        ));
    }
    let rules = tenant.resolve(&check.route);
    if rules.is_empty() {
        metrics.outcome(&tenant_id, "", Outcome::Allowed);
        let body = CheckResponse {
            allowed: true,
            policy: None,
            limit: None,
            remaining: None,
            reset_after_ms: None,
            retry_after_ms: None,
            never_fits: false,
            degraded: None,
        };
        return Ok(Json(body).into_response());
    }
    let checks = rule_checks(&tenant_id, &rules, check.cost, check.subject.as_deref())
        .map_err(ApiError::BadRequest)?;
    let request = CheckRequest {
        tenant: tenant_id,
        rules: checks,
        request_id: check.request_id,
        now_ms: None,
        dry_run: false,
    };
    let limiter_started = Instant::now();
    let outcome = limiter.check(&request).await;
    let limiter_elapsed = limiter_started.elapsed();
    metrics
        .limiter_seconds
        .observe(limiter_elapsed.as_secs_f64());
    metrics.live.limiter(
        dashboard::slot_of(limiter, &request.rules[0].key),
        limiter_elapsed,
    );
    let tenant_id = request.tenant.as_str();
    let first_policy = rules[0].body.name.as_str();

    let outcome = match outcome {
        Ok(outcome) => outcome,
        // A check the limiter refuses is a bug here, not an outage: no failure mode applies.
        Err(error @ LimiterError::Invalid(_)) => {
            metrics.outcome(tenant_id, first_policy, Outcome::Error);
            return Err(error.into());
        }
        Err(error) => return undecided(metrics, tenant_id, &rules, error),
    };
    if outcome.decisions.len() != rules.len() {
        metrics.outcome(tenant_id, first_policy, Outcome::Error);
        return Err(LimiterError::Protocol(format!(
            "{} decisions for {} rules",
            outcome.decisions.len(),
            rules.len()
        ))
        .into());
    }
    for (rule, decision) in rules.iter().zip(&outcome.decisions) {
        if rule.body.shadow && !decision.allowed() {
            metrics.outcome(tenant_id, &rule.body.name, Outcome::ShadowWouldDeny);
        }
    }
    let deciding = deciding_rule(&rules, &outcome.decisions, outcome.allowed);
    let (rule, decision) = (&rules[deciding], outcome.decisions[deciding]);
    let counted = if outcome.allowed {
        Outcome::Allowed
    } else {
        Outcome::Denied
    };
    metrics.outcome(tenant_id, &rule.body.name, counted);
    Ok(respond(rule, &decision, outcome.allowed))
}

/// The limiter's view of `rules` for one check: each rule's bucket (per subject where the
/// rule says so), parameters and cost. A subject-scoped rule without a subject is an error
/// that says what to send.
pub fn rule_checks(
    tenant_id: &str,
    rules: &[std::sync::Arc<Rule>],
    cost: u64,
    subject: Option<&str>,
) -> Result<Vec<RuleCheck>, String> {
    rules
        .iter()
        .map(|rule| {
            let subject = match rule.body.scope {
                Scope::Tenant => None,
                Scope::Subject => Some(subject.ok_or_else(|| {
                    format!(
                        "rule {:?} limits each subject separately: send `subject` (a user id, an IP, ...)",
                        rule.body.name
                    )
                })?),
            };
            Ok(RuleCheck {
                key: keys::bucket(
                    tenant_id,
                    &keys::rule_part(&rule.id, rule.body.algorithm),
                    subject,
                ),
                spec: rule.body.spec(),
                cost,
                shadow: rule.body.shadow,
            })
        })
        .collect()
}

/// The rule the headers describe: on a denial the enforced rule with the longest wait (a
/// rule the cost can never fit first); otherwise the one with the least capacity left.
pub fn deciding_rule(
    rules: &[std::sync::Arc<Rule>],
    decisions: &[Decision],
    allowed: bool,
) -> usize {
    let enforced: Vec<usize> = (0..rules.len())
        .filter(|&i| !rules[i].body.shadow)
        .collect();
    let candidates = if enforced.is_empty() {
        (0..rules.len()).collect()
    } else {
        enforced
    };
    if allowed {
        candidates
            .into_iter()
            .min_by(|&a, &b| decisions[a].remaining.total_cmp(&decisions[b].remaining))
            .unwrap_or(0)
    } else {
        candidates
            .into_iter()
            .filter(|&i| !decisions[i].allowed())
            .max_by_key(|&i| {
                (
                    decisions[i].verdict == Verdict::NeverFits,
                    decisions[i].retry_after_ms,
                )
            })
            .unwrap_or(0)
    }
}

fn respond(rule: &Rule, decision: &Decision, allowed: bool) -> Response {
    let never_fits = decision.verdict == Verdict::NeverFits;
    let remaining = decision.remaining.max(0.0).floor() as u64;
    let reset = seconds_up(decision.reset_after_ms);
    let retry = seconds_up(decision.retry_after_ms).max(1);
    let body = CheckResponse {
        allowed,
        policy: Some(rule.body.name.clone()),
        limit: Some(decision.limit),
        remaining: Some(remaining),
        reset_after_ms: Some(decision.reset_after_ms),
        retry_after_ms: (!allowed && !never_fits).then_some(decision.retry_after_ms),
        never_fits,
        degraded: None,
    };
    let status = if allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut response = (status, Json(body)).into_response();
    let headers = response.headers_mut();
    let mut set = |name: &'static str, value: String| {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    };
    let window = seconds_up(rule.body.period_ms).max(1);
    // Time until this request could go ahead when denied; until the quota is whole otherwise.
    let t = if !allowed && !never_fits {
        retry
    } else {
        reset
    };
    set("x-ratelimit-limit", decision.limit.to_string());
    set("x-ratelimit-remaining", remaining.to_string());
    set("x-ratelimit-reset", reset.to_string());
    set(
        "ratelimit-policy",
        format!("\"{}\";q={};w={}", rule.body.name, decision.limit, window),
    );
    set(
        "ratelimit",
        format!("\"{}\";r={};t={}", rule.body.name, remaining, t),
    );
    if !allowed && !never_fits {
        set("retry-after", retry.to_string());
    }
    response
}

/// The limiter could not decide: fail-open rules allow, any fail-closed rule answers 503.
fn undecided(
    metrics: &Metrics,
    tenant_id: &str,
    rules: &[std::sync::Arc<Rule>],
    error: LimiterError,
) -> Result<Response, ApiError> {
    let enforced: Vec<&Rule> = rules
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| !r.body.shadow)
        .collect();
    let closed: Vec<&Rule> = enforced
        .iter()
        .copied()
        .filter(|r| r.body.failure_mode == FailureMode::Closed)
        .collect();
    if let Some(first) = closed.first() {
        for rule in &closed {
            metrics.outcome(tenant_id, &rule.body.name, Outcome::FailClosed);
        }
        tracing::warn!(error = %error, policy = %first.body.name, "limiter unavailable; failing closed");
        return Err(ApiError::Undecided(format!(
            "the limiter cannot decide right now ({}) and rule {:?} fails closed; retry shortly",
            if error.is_transient() {
                "its store is unavailable"
            } else {
                "internal error"
            },
            first.body.name
        )));
    }
    for rule in &enforced {
        metrics.outcome(tenant_id, &rule.body.name, Outcome::FailOpen);
    }
    tracing::warn!(error = %error, "limiter unavailable; failing open");
    let policy = enforced
        .first()
        .copied()
        .or(rules.first().map(AsRef::as_ref))
        .map(|r| r.body.name.clone());
    let body = CheckResponse {
        allowed: true,
        policy,
        limit: None,
        remaining: None,
        reset_after_ms: None,
        retry_after_ms: None,
        never_fits: false,
        degraded: Some("fail_open"),
    };
    Ok(Json(body).into_response())
}
