//! What a check is in the limiter's terms, shared by both backends: the request (its rules'
//! buckets, parameters and cost), the outcome, and the errors.

use std::time::Duration;

use app::rules::model::Decision;
use app::rules::{LimitSpec, MAX_COST};

use crate::redis_client::{self, keys};

/// The most rules one check may evaluate.
pub const MAX_RULES: usize = 8;
/// How long a `request_id` is remembered: a retry within this time gets the first answer.
pub const REQUEST_ID_TTL: Duration = Duration::from_secs(10 * 60);

/// Errors from a limiter backend. Transient ones (Redis down, slow past the deadline) drive
/// each rule's failure mode; the others are bugs or bad input.
#[derive(Debug, thiserror::Error)]
pub enum LimiterError {
    #[error(transparent)]
    Redis(#[from] redis_client::Error),
    #[error("invalid check: {0}")]
    Invalid(String),
    #[error("unexpected reply from the check script: {0}")]
    Protocol(String),
    /// The check would create a bucket or keep a request_id past the tenant's quota of live
    /// buckets; nothing was consumed.
    #[error(
        "the tenant holds {live} live buckets and request_id records, its quota is {quota}; \
         checks of new subjects are refused until some expire (in about {retry_after_ms} ms) \
         or an operator raises max_live_buckets (PUT /v1/admin/tenants/{{tenant}}/quotas)"
    )]
    OverQuota {
        live: u64,
        quota: u64,
        retry_after_ms: u64,
    },
}

impl LimiterError {
    /// Whether the same call could succeed later.
    pub fn is_transient(&self) -> bool {
        match self {
            LimiterError::Redis(e) => e.is_transient(),
            LimiterError::Invalid(_)
            | LimiterError::Protocol(_)
            | LimiterError::OverQuota { .. } => false,
        }
    }
}

/// A reservation's TTL when `/v1/reserve` names none.
pub const DEFAULT_RESERVATION_TTL_MS: u64 = 60_000;
/// The shortest and longest a reservation may be kept unsettled.
pub const MIN_RESERVATION_TTL_MS: u64 = 1_000;
pub const MAX_RESERVATION_TTL_MS: u64 = 60 * 60 * 1000;
/// How long a settled reservation is kept, so that settling it again is answered the same.
pub const SETTLED_TTL: Duration = REQUEST_ID_TTL;

/// Makes an admitted check a reservation (`/v1/reserve`): what each rule was charged, and
/// where, is kept under `id` for `ttl_ms`, for [`crate::limiter::Limiter::settle`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserve {
    /// 32 hex digits ([`keys::reservation`]).
    pub id: String,
    pub ttl_ms: u64,
}

/// What settling a reservation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// No such reservation for this tenant: never made, or expired unsettled (its estimate
    /// stays charged).
    Unknown,
    /// `estimate` was charged when it was made; `cost` is its final cost. `repeated`: it had
    /// been settled before, at `cost`, and nothing changed now. `buckets`: the buckets it
    /// charged.
    Settled {
        estimate: u64,
        cost: u64,
        repeated: bool,
        buckets: Vec<String>,
    },
}

/// What releasing a lease did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// No such lease for this tenant: never taken, or it ended by itself.
    Unknown,
    /// Its slots are free now.
    Now,
    /// It was released before; nothing changed.
    Before,
}

/// One rule of a check: its bucket key ([`keys::bucket`]), its parameters, and the cost.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleCheck {
    pub key: String,
    pub spec: LimitSpec,
    pub cost: u64,
    /// Evaluated and reported, never enforced.
    pub shadow: bool,
}

/// One request to decide.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckRequest {
    /// Every key must carry this tenant's hash tag.
    pub tenant: String,
    pub rules: Vec<RuleCheck>,
    /// Makes the check idempotent: a retry with the same id gets the first decision.
    pub request_id: Option<String>,
    /// An explicit clock in Unix ms, for tests; `None` uses the backend's clock (Redis
    /// `TIME`, or this process's clock in-process).
    pub now_ms: Option<i64>,
    /// Decide without writing anything: no consumption, no penalty, no idempotency record
    /// (the console's and the admin API's simulate).
    pub dry_run: bool,
    /// The tenant's quota of live keys (buckets and the records of callers' request_ids):
    /// a check that would create one past it is refused ([`LimiterError::OverQuota`]).
    /// `None`: no quota (the console's own limits, the local fallback).
    pub max_live_keys: Option<u64>,
    /// Keep what an admitted check charged, to settle later (not in a dry run).
    pub reserve: Option<Reserve>,
    /// The id of the lease an admitted check takes in its `concurrency` rules' buckets
    /// ([`keys::is_reservation_id`]'s form); `None` makes one at random ([`Self::lease_id`]).
    pub lease: Option<String>,
}

/// The decision for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOutcome {
    /// Every enforced (non-shadow) rule admitted the request, and it was consumed.
    pub allowed: bool,
    /// One decision per rule, in the request's order.
    pub decisions: Vec<Decision>,
    /// This is the stored answer to an earlier check with the same `request_id`.
    pub deduplicated: bool,
    /// The time the decision was taken at, in Unix ms.
    pub now_ms: i64,
}

impl CheckRequest {
    /// The key of this request's idempotency record. It covers what the request asks for
    /// (each rule's key, parameters, cost and shadow flag) as well as its `request_id`, so
    /// reusing an id for a different request is a new decision, never someone else's answer.
    pub fn reply_key(&self) -> String {
        let mut identity = self.request_id.clone().unwrap_or_default();
        // A reservation is another request than a check with the same id, and its id (made
        // from this record's key) must not depend on its TTL: only whether it is one counts.
        if self.reserve.is_some() {
            identity.push_str("\nreserve");
        }
        for rule in &self.rules {
            let s = &rule.spec;
            identity.push_str(&format!(
                "\n{}|{}|{}|{}|{:?}|{}|{}|{}",
                rule.key,
                s.algorithm,
                s.limit,
                s.period_ms,
                s.burst,
                s.penalty,
                rule.cost,
                rule.shadow
            ));
        }
        keys::request(&self.tenant, &identity)
    }

    /// Whether a rule is `concurrency`: an admitted check then takes a lease.
    pub fn takes_lease(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.spec.algorithm == app::rules::Algorithm::Concurrency)
    }

    /// The id of the lease this check takes, when it takes one: its own, or one made now.
    pub fn lease_id(&self) -> Option<std::borrow::Cow<'_, str>> {
        if !self.takes_lease() {
            return None;
        }
        Some(match &self.lease {
            Some(id) => std::borrow::Cow::Borrowed(id.as_str()),
            None => std::borrow::Cow::Owned(keys::lease_id(None)),
        })
    }

    /// Refuses a request no backend may run: bad limits, costs, keys outside the tenant's
    /// slot, a dry run with a request id.
    pub fn validate(&self) -> Result<(), LimiterError> {
        let invalid = |m: String| Err(LimiterError::Invalid(m));
        if self.dry_run && self.request_id.is_some() {
            return invalid("a dry run takes no request_id".into());
        }
        if let Some(reserve) = &self.reserve {
            if self.dry_run {
                return invalid("a dry run makes no reservation".into());
            }
            if !(MIN_RESERVATION_TTL_MS..=MAX_RESERVATION_TTL_MS).contains(&reserve.ttl_ms) {
                return invalid(format!(
                    "a reservation lives {MIN_RESERVATION_TTL_MS} to {MAX_RESERVATION_TTL_MS} ms, not {}",
                    reserve.ttl_ms
                ));
            }
            if !keys::is_reservation_id(&reserve.id) {
                return invalid(format!("{:?} is not a reservation id", reserve.id));
            }
        }
        if let Some(lease) = &self.lease {
            if !keys::is_reservation_id(lease) {
                return invalid(format!("{lease:?} is not a lease id"));
            }
        }
        if self.rules.is_empty() || self.rules.len() > MAX_RULES {
            return invalid(format!(
                "a check takes 1 to {MAX_RULES} rules, not {}",
                self.rules.len()
            ));
        }
        for rule in &self.rules {
            if let Err(problem) = rule.spec.validate() {
                return invalid(format!("rule {}: {problem}", rule.key));
            }
            if rule.cost == 0 || rule.cost > MAX_COST {
                return invalid(format!(
                    "cost must be between 1 and {MAX_COST}, not {}",
                    rule.cost
                ));
            }
            if !has_tag(&rule.key, &self.tenant) {
                return invalid(format!(
                    "key {} lacks the tenant's hash tag {{{}}}",
                    rule.key, self.tenant
                ));
            }
        }
        Ok(())
    }
}

/// Whether `key` holds `{tenant}`, without building that string (this runs on every check).
fn has_tag(key: &str, tenant: &str) -> bool {
    key.match_indices('{').any(|(at, _)| {
        key[at + 1..]
            .strip_prefix(tenant)
            .is_some_and(|rest| rest.starts_with('}'))
    })
}

/// Which kind of store holds the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    InProcess,
    Redis,
    RedisCluster,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::InProcess => "in-process",
            BackendKind::Redis => "redis",
            BackendKind::RedisCluster => "redis-cluster",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_must_carry_its_tenants_hash_tag() {
        assert!(has_tag("sl:{t1}:r:*", "t1"));
        assert!(has_tag("sl:{other}:{t1}:r:*", "t1"));
        assert!(!has_tag("sl:{t12}:r:*", "t1"));
        assert!(!has_tag("sl:{xt1}:r:*", "t1"));
        assert!(!has_tag("sl:t1:r:*", "t1"));
        assert!(!has_tag("sl:{t1", "t1"));
        let request = |key: &str| CheckRequest {
            tenant: "t1".into(),
            rules: vec![RuleCheck {
                key: key.into(),
                spec: LimitSpec::new(app::rules::Algorithm::Gcra, 1, 1_000),
                cost: 1,
                shadow: false,
            }],
            request_id: None,
            now_ms: None,
            dry_run: false,
            max_live_keys: None,
            reserve: None,
            lease: None,
        };
        assert!(request("sl:{t1}:r:*").validate().is_ok());
        assert!(matches!(
            request("sl:{t2}:r:*").validate(),
            Err(LimiterError::Invalid(m)) if m.contains("{t1}")
        ));
    }
}
