//! Envoy's rate limit service over gRPC (`envoy.service.ratelimit.v3.RateLimitService/
//! ShouldRateLimit`, `SLUICE_GRPC_LISTEN`): the same keys, caches, decision core, metrics and
//! dashboards as `/v1/check`, so a gateway can ask Sluice as it would ask
//! envoyproxy/ratelimit.
//!
//! - The check key travels in metadata (`x-api-key`, or `authorization: Bearer`): missing or
//!   unknown is `UNAUTHENTICATED`; an admin key or a suspended tenant `PERMISSION_DENIED`.
//! - `domain` is the key's tenant, by name or id; anything else is `INVALID_ARGUMENT`.
//! - Each descriptor resolves to its `descriptor` rules, and every rule of every descriptor is
//!   decided in one atomic limiter call (all or nothing); `hits_addend` is the cost.
//! - When the limiter cannot decide and a rule fails closed: `UNAVAILABLE`, so that Envoy's
//!   `failure_mode_deny` decides; rules that fail open answer `OK`.

use std::time::{Duration, Instant};

use app::rules::model::{Decision, Verdict};
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};

use super::check::rate_limit_headers;
use super::credentials::presented_key;
use super::state::AppState;
use crate::decide::{
    plan, Answer, DecideError, Decided, Descriptor, LimitOverride, Mode, MAX_DESCRIPTORS,
};
use crate::limiter::LimiterError;

/// The largest accepted request message.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// The rate limit service, over the application state.
#[derive(Debug, Clone)]
pub struct RateLimiter {
    state: AppState,
}

impl RateLimiter {
    pub fn new(state: AppState) -> Self {
        Self { state }
    }
}

/// Serves `ShouldRateLimit` on `listener` until `stop` completes.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let service = RateLimitServiceServer::new(RateLimiter::new(state))
        .max_decoding_message_size(MAX_MESSAGE_BYTES);
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, stop)
        .await
}

#[tonic::async_trait]
impl RateLimitService for RateLimiter {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let result = self.decide(request).await;
        self.state.metrics.check_done(started.elapsed());
        result.map(Response::new)
    }
}

impl RateLimiter {
    async fn decide(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<RateLimitResponse, Status> {
        let headers = request.metadata().clone().into_headers();
        let key = self
            .state
            .identities
            .key(presented_key(&headers))
            .await
            .map_err(status)?;
        let tenant = self
            .state
            .identities
            .check_tenant(&key)
            .await
            .map_err(status)?;
        let request = request.into_inner();
        if request.domain != tenant.tenant.name && request.domain != tenant.tenant.id {
            return Err(Status::invalid_argument(format!(
                "domain {:?} is not this key's tenant: the key belongs to tenant {:?}; send domain {:?}",
                request.domain, tenant.tenant.name, tenant.tenant.name
            )));
        }
        let descriptors = descriptors(&request)?;
        let decided = self
            .state
            .decider
            .decide_descriptors(&tenant, &descriptors, Mode::Enforce)
            .await;
        let (answer, owners) = match decided {
            Ok(decided) => decided,
            Err(DecideError::Limiter(LimiterError::OverQuota { retry_after_ms, .. })) => {
                return Ok(over_quota(descriptors.len(), retry_after_ms))
            }
            Err(error) => return Err(status(error)),
        };
        Ok(match answer {
            Answer::Decided(decided) => respond(&decided, &owners),
            // No rule applies, or the rules fail open: every descriptor is OK, with no limit.
            Answer::NoRule | Answer::FailedOpen { .. } => RateLimitResponse {
                overall_code: Code::Ok as i32,
                statuses: vec![unlimited(); descriptors.len()],
                ..Default::default()
            },
        })
    }
}

/// The request's descriptors, validated: each with its entries and cost (its own
/// `hits_addend`, else the request's, else 1).
fn descriptors(request: &RateLimitRequest) -> Result<Vec<Descriptor>, Status> {
    if request.descriptors.is_empty() || request.descriptors.len() > MAX_DESCRIPTORS {
        return Err(Status::invalid_argument(format!(
            "send 1 to {MAX_DESCRIPTORS} descriptors, not {}",
            request.descriptors.len()
        )));
    }
    request
        .descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| descriptor(i, d, request.hits_addend))
        .collect()
}

fn descriptor(index: usize, d: &RateLimitDescriptor, hits: u32) -> Result<Descriptor, Status> {
    let refuse =
        |message: String| Status::invalid_argument(format!("descriptor {index}: {message}"));
    let limit = d
        .limit
        .as_ref()
        .map(|o| {
            let period_ms = override_period_ms(o.unit).ok_or_else(|| {
                refuse(format!(
                    "the `limit` override's unit ({}) is not one of SECOND, MINUTE, HOUR, DAY, MONTH, YEAR",
                    o.unit
                ))
            })?;
            LimitOverride::new(u64::from(o.requests_per_unit), period_ms)
                .map_err(|e| refuse(e.message))
        })
        .transpose()?;
    if d.is_negative_hits {
        return Err(refuse(
            "`is_negative_hits` (a refund) is not accepted".to_owned(),
        ));
    }
    let hits = match &d.hits_addend {
        Some(own) if own.value == 0 => return Err(refuse(
            "a `hits_addend` of 0 (a check that consumes nothing) is not accepted; send 1 or more"
                .to_owned(),
        )),
        Some(own) => own.value,
        None => u64::from(hits),
    };
    let entries = d
        .entries
        .iter()
        .map(|e| (e.key.clone(), e.value.clone()))
        .collect();
    let mut descriptor = Descriptor::new(entries, hits).map_err(|e| refuse(e.message))?;
    descriptor.limit = limit;
    Ok(descriptor)
}

/// The length of an override's unit (`envoy.type.v3.RateLimitUnit`), as [`unit`] names
/// periods: a month is 30 days and a year 365.
fn override_period_ms(unit: i32) -> Option<u64> {
    const DAY: u64 = 86_400_000;
    Some(match RateLimitUnit::try_from(unit).ok()? {
        RateLimitUnit::Second => 1_000,
        RateLimitUnit::Minute => 60_000,
        RateLimitUnit::Hour => 3_600_000,
        RateLimitUnit::Day => DAY,
        RateLimitUnit::Month => 30 * DAY,
        RateLimitUnit::Year => 365 * DAY,
        RateLimitUnit::Unknown => return None,
    })
}

/// A descriptor no rule limits.
fn unlimited() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..Default::default()
    }
}

/// The answer of a decision: overall OK exactly when the check was admitted (and consumed);
/// each descriptor's status from its own rules (OVER_LIMIT only where an enforced rule of its
/// own denied); the headers of the rule the decision reports, as `/v1/check` sends them.
fn respond(decided: &Decided, owners: &[Vec<usize>]) -> RateLimitResponse {
    let statuses = owners
        .iter()
        .map(|mine| {
            if mine.is_empty() {
                return unlimited();
            }
            let rules: Vec<_> = mine.iter().map(|&i| decided.rules[i].clone()).collect();
            let decisions: Vec<Decision> = mine.iter().map(|&i| decided.decisions[i]).collect();
            let denied = !decided.allowed
                && rules
                    .iter()
                    .zip(&decisions)
                    .any(|(r, d)| !r.body.shadow && !d.allowed());
            let which = plan::deciding_rule(&rules, &decisions, !denied);
            status_of(&rules[which], &decisions[which], !denied)
        })
        .collect();
    let (rule, decision) = decided.deciding();
    let response_headers_to_add = rate_limit_headers(rule, decision, decided.allowed)
        .into_iter()
        .map(|(key, value)| HeaderValue {
            key: key.as_str().to_owned(),
            value,
            ..Default::default()
        })
        .collect();
    RateLimitResponse {
        overall_code: if decided.allowed {
            Code::Ok as i32
        } else {
            Code::OverLimit as i32
        },
        statuses,
        response_headers_to_add,
        ..Default::default()
    }
}

fn status_of(
    rule: &crate::store::rules::Rule,
    decision: &Decision,
    allowed: bool,
) -> DescriptorStatus {
    let waits = !allowed && decision.verdict != Verdict::NeverFits;
    // Until this request could go ahead when denied; until the quota is whole otherwise.
    let until = if waits {
        decision.retry_after_ms
    } else {
        decision.reset_after_ms
    };
    DescriptorStatus {
        code: if allowed {
            Code::Ok as i32
        } else {
            Code::OverLimit as i32
        },
        current_limit: Some(RateLimit {
            name: rule.body.name.clone(),
            requests_per_unit: u32::try_from(decision.limit).unwrap_or(u32::MAX),
            unit: unit(rule.body.period_ms) as i32,
        }),
        limit_remaining: decision.remaining.max(0.0).floor().min(f64::from(u32::MAX)) as u32,
        duration_until_reset: Some(duration(until)),
        ..Default::default()
    }
}

/// The Envoy unit a period is: a second, minute, hour, day, week, month (30 days) or year
/// (365 days), as envoyproxy/ratelimit counts them; any other period is `UNKNOWN` (the
/// `RateLimit-Policy` header carries its window in seconds).
pub fn unit(period_ms: u64) -> Unit {
    const DAY: u64 = 86_400_000;
    match period_ms {
        1_000 => Unit::Second,
        60_000 => Unit::Minute,
        3_600_000 => Unit::Hour,
        DAY => Unit::Day,
        p if p == 7 * DAY => Unit::Week,
        p if p == 30 * DAY => Unit::Month,
        p if p == 365 * DAY => Unit::Year,
        _ => Unit::Unknown,
    }
}

fn duration(ms: u64) -> PbDuration {
    let d = Duration::from_millis(ms);
    PbDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// Past the tenant's quota of live buckets a check that would make a new bucket is refused
/// like a denial, not failed (the store answered): every descriptor OVER_LIMIT, with
/// `Retry-After`. An error instead would let Envoy's default (`failure_mode_deny: false`)
/// admit it.
fn over_quota(descriptors: usize, retry_after_ms: u64) -> RateLimitResponse {
    let status = DescriptorStatus {
        code: Code::OverLimit as i32,
        duration_until_reset: Some(duration(retry_after_ms)),
        ..Default::default()
    };
    RateLimitResponse {
        overall_code: Code::OverLimit as i32,
        statuses: vec![status; descriptors],
        response_headers_to_add: vec![HeaderValue {
            key: "retry-after".to_owned(),
            value: retry_after_ms.div_ceil(1000).max(1).to_string(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The gRPC status of an error of the decision core.
fn status(error: DecideError) -> Status {
    match error {
        DecideError::Unauthorized => Status::unauthenticated(
            "a valid check key is required: send it in the `x-api-key` metadata (or `authorization: Bearer <key>`)",
        ),
        DecideError::Forbidden(message) => Status::permission_denied(message),
        DecideError::Input(e) => Status::invalid_argument(e.message),
        DecideError::Undecided(message) => Status::unavailable(message),
        DecideError::Limiter(e) if e.is_transient() => Status::unavailable(e.to_string()),
        DecideError::Limiter(e) => Status::internal(e.to_string()),
        DecideError::Store(e) => Status::unavailable(format!("the configuration store: {e}")),
    }
}
