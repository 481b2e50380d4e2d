//! The decision core: everything between "a transport has a key and an input" and "allow or
//! deny", written once for every transport.
//!
//! - [`input`]: [`CheckInput`], the one parser and validator of a check's fields (route,
//!   subject, cost, request id), as validated newtypes;
//! - [`identity`]: [`Identities`], a presented key to its cached key and a check key to its
//!   active, compiled tenant;
//! - [`tenant`]: [`CompiledTenant`], a tenant's rules arranged for resolving a route;
//! - [`plan`]: the limiter's view of the matching rules, and the deciding rule;
//! - [`error`]: [`DecideError`], why the core gives no decision;
//! - [`deny_cache`]: [`DenyCache`], a check the limiter has just denied, denied again without
//!   a limiter call while it is certain the limiter would deny it too;
//! - here: [`Decider::decide`], used by `/v1/check`, by simulate (a dry run) and by the
//!   console's own sign-in limit. It counts what it decides on `/metrics` and in the
//!   dashboards' current second, and answers each rule's failure mode when the limiter
//!   cannot decide.
//!
//! Nothing here knows HTTP, JSON bodies of responses, or sessions.

pub mod deny_cache;
pub mod error;
pub mod identity;
pub mod input;
pub mod plan;
pub mod tenant;

use std::sync::Arc;
use std::time::Instant;

use app::rules::model::Decision;
use app::rules::{FailureMode, Scope};

pub use deny_cache::DenyCache;
pub use error::DecideError;
pub use identity::{Identities, UsageRecorder};
pub use input::{
    CheckInput, Descriptor, InputError, LimitOverride, ReleaseInput, Route, SettleInput, Subject,
    MAX_DESCRIPTORS,
};
pub use tenant::{CompiledTenant, MAX_RULES_PER_MATCH};

use crate::dashboard::LiveInstances;
use crate::limiter::{
    keys, CheckRequest, Limiter, LimiterError, MemoryBackend, Released, Reserve, Settlement,
};
use crate::store::rules::Rule;
use crate::telemetry::{Metrics, Outcome};

/// How a decision is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A real check: consumes, and is counted on `/metrics` and the dashboards.
    Enforce,
    /// Consumes, but is not counted: Sluice limiting its own console (sign-in).
    Internal,
    /// Decides without writing anything and without failure modes (simulate): a limiter
    /// error is returned as it is.
    DryRun,
}

/// The rules that applied and what the limiter said of each.
#[derive(Debug, Clone)]
pub struct Decided {
    /// Every enforced rule admitted the check (and it was consumed, unless a dry run).
    pub allowed: bool,
    /// The matching rules, in evaluation order, and their decisions.
    pub rules: Vec<Arc<Rule>>,
    pub decisions: Vec<Decision>,
    /// The index of the rule the answer reports ([`plan::deciding_rule`]).
    pub deciding: usize,
    /// When the decision was taken (Unix ms).
    pub now_ms: i64,
    /// Decided in this instance's memory with its share of each limit, because the limiter
    /// could not decide and the rules fail `local`.
    pub local: bool,
    /// The reservation an admitted `/v1/reserve` made, to settle later ([`Decider::settle`]).
    pub reservation: Option<String>,
    /// The lease an admitted check holds in its `concurrency` rules' buckets, to release
    /// ([`Decider::release`]).
    pub lease: Option<String>,
}

impl Decided {
    /// The rule the answer reports, and its decision.
    pub fn deciding(&self) -> (&Rule, &Decision) {
        (&self.rules[self.deciding], &self.decisions[self.deciding])
    }
}

/// The core's answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// No rule applies: allowed without calling the limiter.
    NoRule,
    Decided(Decided),
    /// The limiter could not decide and no enforced rule fails closed: allowed. `policy` is
    /// the first enforced rule (or the first rule).
    FailedOpen {
        policy: Option<String>,
    },
}

impl Answer {
    pub fn allowed(&self) -> bool {
        match self {
            Answer::NoRule | Answer::FailedOpen { .. } => true,
            Answer::Decided(d) => d.allowed,
        }
    }
}

/// Takes decisions: the limiter, and the telemetry that counts them; for `local` rules
/// while the limiter cannot decide, an in-process limiter and the count of live instances.
/// Cheap to share.
#[derive(Debug, Clone)]
pub struct Decider {
    limiter: Limiter,
    metrics: Metrics,
    fallback: MemoryBackend,
    live: LiveInstances,
}

impl Decider {
    pub fn new(limiter: Limiter, metrics: Metrics, live: LiveInstances) -> Self {
        Self {
            limiter,
            metrics,
            fallback: MemoryBackend::new(),
            live,
        }
    }

    /// Clears one bucket in the shared limiter (a reset; see [`Limiter::reset`]). The caller
    /// announces the tenant's change, which drops every instance's deny cache of it.
    pub async fn reset(&self, tenant: &str, key: &str) -> Result<bool, LimiterError> {
        self.limiter.reset(tenant, key).await
    }

    /// Decides `input` against `tenant`'s rules: the most specific route rules plus every
    /// `all` rule, in one atomic limiter call.
    pub async fn decide(
        &self,
        tenant: &CompiledTenant,
        input: &CheckInput,
        mode: Mode,
    ) -> Result<Answer, DecideError> {
        self.decide_check(tenant, input, mode, None).await
    }

    /// [`Decider::decide`], keeping what an admitted check charges as a reservation for
    /// `ttl_ms` (`/v1/reserve`): its id is in [`Decided::reservation`]. A check the limiter
    /// could not decide makes none (failed open, or decided `local` in this instance).
    pub async fn reserve(
        &self,
        tenant: &CompiledTenant,
        input: &CheckInput,
        ttl_ms: u64,
    ) -> Result<Answer, DecideError> {
        self.decide_check(tenant, input, Mode::Enforce, Some(ttl_ms))
            .await
    }

    /// Settles `tenant`'s reservation `id` at its final `cost`
    /// ([`Limiter::settle`]). A refund gives capacity back, which the deny cache assumes
    /// never happens: this instance's cached denials of those buckets are dropped.
    pub async fn settle(
        &self,
        tenant: &CompiledTenant,
        id: &str,
        cost: u64,
    ) -> Result<Settlement, DecideError> {
        let tenant_id = tenant.tenant.id.as_str();
        let settlement = self
            .limiter
            .settle(tenant_id, id, cost, None, tenant.max_live_buckets.is_some())
            .await?;
        if let Settlement::Settled {
            estimate,
            cost,
            repeated: false,
            buckets,
        } = &settlement
        {
            if cost < estimate {
                tenant.denials.forget(buckets);
            }
            self.metrics.settled(*estimate, *cost);
        }
        Ok(settlement)
    }

    /// Releases `tenant`'s lease `id`: its slots are free again at once on every instance
    /// (concurrency denials are never deny-cached, so no cache holds them).
    pub async fn release(
        &self,
        tenant: &CompiledTenant,
        id: &str,
    ) -> Result<Released, DecideError> {
        let quota = tenant.max_live_buckets.is_some();
        let released = self
            .limiter
            .release(&tenant.tenant.id, id, None, quota)
            .await?;
        if released == Released::Now {
            self.metrics.released();
        }
        Ok(released)
    }

    async fn decide_check(
        &self,
        tenant: &CompiledTenant,
        input: &CheckInput,
        mode: Mode,
        reserve_ttl_ms: Option<u64>,
    ) -> Result<Answer, DecideError> {
        let mut rules = tenant.resolve(input.route.as_str());
        if let Some(subject) = &input.subject {
            tenant.apply_overrides(&mut rules, subject.as_str());
        }
        let checks = plan::rule_checks(&tenant.tenant.id, &rules, input)?;
        let request_id = input.request_id.as_ref().map(|r| r.as_str().to_owned());
        let subjects = Subjects::Check(input.subject.as_ref());
        self.decide_planned(
            tenant,
            rules,
            checks,
            subjects,
            request_id,
            mode,
            reserve_ttl_ms,
        )
        .await
    }

    /// Decides Envoy descriptors (gRPC `ShouldRateLimit`): each resolves to its descriptor
    /// rules ([`CompiledTenant::resolve_descriptor`]), and every rule of every descriptor is
    /// decided in one atomic limiter call, all or nothing, as for a check. A bucket named by
    /// two descriptors is charged once with both costs. Also answers, for each descriptor,
    /// the indices of its rules in [`Decided::rules`].
    pub async fn decide_descriptors(
        &self,
        tenant: &CompiledTenant,
        descriptors: &[Descriptor],
        mode: Mode,
    ) -> Result<(Answer, Vec<Vec<usize>>), DecideError> {
        let (rules, checks, owners, subjects) = plan::descriptor_checks(tenant, descriptors)?;
        let answer = self
            .decide_planned(
                tenant,
                rules,
                checks,
                Subjects::Each(&subjects),
                None,
                mode,
                None,
            )
            .await?;
        Ok((answer, owners))
    }

    /// Decides `rules`, already matched and planned as `checks`, in one limiter call; with
    /// `reserve_ttl_ms`, an admitted check is kept as a reservation that long.
    #[allow(clippy::too_many_arguments)]
    async fn decide_planned(
        &self,
        tenant: &CompiledTenant,
        rules: Vec<Arc<Rule>>,
        checks: Vec<crate::limiter::RuleCheck>,
        subjects: Subjects<'_>,
        request_id: Option<String>,
        mode: Mode,
        reserve_ttl_ms: Option<u64>,
    ) -> Result<Answer, DecideError> {
        let counted = mode == Mode::Enforce;
        let tenant_id = tenant.tenant.id.as_str();
        if rules.is_empty() {
            if counted {
                self.metrics.outcome(tenant_id, "", Outcome::Allowed);
            }
            return Ok(Answer::NoRule);
        }
        let mut request = CheckRequest {
            tenant: tenant_id.to_owned(),
            rules: checks,
            request_id,
            now_ms: None,
            dry_run: mode == Mode::DryRun,
            max_live_keys: tenant.max_live_buckets,
            reserve: None,
            lease: None,
        };
        if let Some(ttl_ms) = reserve_ttl_ms.filter(|_| mode != Mode::DryRun) {
            // Set first, so that the idempotency record's key (and so a request_id's
            // reservation id) says this is a reservation.
            request.reserve = Some(Reserve {
                id: String::new(),
                ttl_ms,
            });
            let reply_key = request.request_id.is_some().then(|| request.reply_key());
            let id = keys::reservation_id(reply_key.as_deref());
            request.reserve = Some(Reserve { id, ttl_ms });
        }
        if request.takes_lease() && mode != Mode::DryRun {
            let reply_key = request.request_id.is_some().then(|| request.reply_key());
            request.lease = Some(keys::lease_id(reply_key.as_deref()));
        }
        // A check the limiter has just denied, and surely would again, is denied here. Only
        // in front of Redis: in process, the limiter's own answer costs no more than the
        // cache's, and asking the cache first cost every allowed check about 1,000
        // instructions of 51,600 (`scripts/check-instructions`; test
        // `an_embedded_instance_denies_from_its_limiter_not_a_deny_cache`).
        let cacheable =
            mode != Mode::DryRun && self.limiter.redis().is_some() && DenyCache::eligible(&request);
        let sent = DenyCache::clock(&request);
        let refunds = tenant.denials.refunds();
        if cacheable {
            if let Some(denial) = tenant.denials.denied(&request, sent) {
                return Ok(self.denied_here(tenant_id, rules, subjects, denial, counted));
            }
        }
        let started = Instant::now();
        let outcome = self.limiter.check(&request).await;
        if counted {
            self.metrics.limiter_call(
                self.limiter.slot_of(&request.rules[0].key),
                started.elapsed(),
            );
        }
        let first_policy = rules[0].body.name.as_str();
        let outcome = match outcome {
            Ok(outcome) => outcome,
            // A check the limiter refuses is a bug here, not an outage: no failure mode applies.
            Err(error @ LimiterError::Invalid(_)) => {
                if counted {
                    self.metrics
                        .outcome(tenant_id, first_policy, Outcome::Error);
                }
                return Err(error.into());
            }
            // Past the tenant's quota of live buckets: refused like a denial, and no failure
            // mode applies (the store answered).
            Err(error @ LimiterError::OverQuota { .. }) => {
                if counted {
                    self.metrics
                        .outcome(tenant_id, first_policy, Outcome::Denied);
                }
                tracing::debug!(tenant = tenant_id, error = %error, "check refused by the live-bucket quota");
                return Err(error.into());
            }
            Err(error) if mode == Mode::DryRun => return Err(error.into()),
            Err(error) => return self.undecided(&request, &rules, subjects, error, counted),
        };
        if outcome.decisions.len() != rules.len() {
            if counted {
                self.metrics
                    .outcome(tenant_id, first_policy, Outcome::Error);
            }
            return Err(LimiterError::Protocol(format!(
                "{} decisions for {} rules",
                outcome.decisions.len(),
                rules.len()
            ))
            .into());
        }
        if cacheable {
            tenant
                .denials
                .remember_since(&request, &outcome, sent, refunds);
        }
        let deciding = plan::deciding_rule(&rules, &outcome.decisions, outcome.allowed);
        if counted {
            for (rule, decision) in rules.iter().zip(&outcome.decisions) {
                if rule.body.shadow && !decision.allowed() {
                    self.metrics
                        .outcome(tenant_id, &rule.body.name, Outcome::ShadowWouldDeny);
                }
            }
            if outcome.allowed {
                self.metrics
                    .outcome(tenant_id, &rules[deciding].body.name, Outcome::Allowed);
            } else {
                self.metrics
                    .denied(tenant_id, &rules[deciding], subjects.of(&rules, deciding));
            }
        }
        let reservation = request
            .reserve
            .filter(|_| outcome.allowed)
            .map(|reserve| reserve.id);
        // A lease is held when a concurrency rule took a slot: every admitting rule did.
        let holds_lease = outcome.allowed
            && request
                .rules
                .iter()
                .zip(&outcome.decisions)
                .any(|(rule, d)| {
                    rule.spec.algorithm == app::rules::Algorithm::Concurrency && d.allowed()
                });
        let lease = request.lease.filter(|_| holds_lease);
        Ok(Answer::Decided(Decided {
            allowed: outcome.allowed,
            rules,
            decisions: outcome.decisions,
            deciding,
            now_ms: outcome.now_ms,
            local: false,
            reservation,
            lease,
        }))
    }

    /// A denial answered from the deny cache: counted like any other denial, and once more
    /// as a cached one.
    fn denied_here(
        &self,
        tenant_id: &str,
        rules: Vec<Arc<Rule>>,
        subjects: Subjects<'_>,
        denial: deny_cache::CachedDenial,
        counted: bool,
    ) -> Answer {
        let deciding = plan::deciding_rule(&rules, &denial.decisions, false);
        if counted {
            self.metrics
                .denied(tenant_id, &rules[deciding], subjects.of(&rules, deciding));
            self.metrics.cached_denial();
        }
        Answer::Decided(Decided {
            allowed: false,
            rules,
            decisions: denial.decisions,
            deciding,
            now_ms: denial.now_ms,
            local: false,
            reservation: None,
            lease: None,
        })
    }

    /// The limiter could not decide: any enforced fail-closed rule refuses (503 over HTTP);
    /// otherwise the `local` rules decide in this instance ([`Decider::decide_locally`]), and
    /// without any the check is allowed and counted as failed open.
    fn undecided(
        &self,
        request: &CheckRequest,
        rules: &[Arc<Rule>],
        subjects: Subjects<'_>,
        error: LimiterError,
        counted: bool,
    ) -> Result<Answer, DecideError> {
        let tenant_id = request.tenant.as_str();
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
            if counted {
                for rule in &closed {
                    self.metrics
                        .outcome(tenant_id, &rule.body.name, Outcome::FailClosed);
                }
            }
            if quiet(&error) {
                tracing::debug!(error = %error, policy = %first.body.name, "limiter unavailable; failing closed");
            } else {
                tracing::warn!(error = %error, policy = %first.body.name, "limiter unavailable; failing closed");
            }
            return Err(DecideError::Undecided(format!(
                "the limiter cannot decide right now ({}) and rule {:?} fails closed; retry shortly",
                if error.is_transient() {
                    "its store is unavailable"
                } else {
                    "internal error"
                },
                first.body.name
            )));
        }
        if enforced
            .iter()
            .any(|r| r.body.failure_mode == FailureMode::Local)
        {
            tracing::debug!(error = %error, "limiter unavailable; deciding locally");
            return self.decide_locally(request, rules, subjects, counted);
        }
        if counted {
            for rule in &enforced {
                self.metrics
                    .outcome(tenant_id, &rule.body.name, Outcome::FailOpen);
            }
        }
        if quiet(&error) {
            tracing::debug!(error = %error, "limiter unavailable; failing open");
        } else {
            tracing::warn!(error = %error, "limiter unavailable; failing open");
        }
        let policy = enforced
            .first()
            .copied()
            .or(rules.first().map(AsRef::as_ref))
            .map(|r| r.body.name.clone());
        Ok(Answer::FailedOpen { policy })
    }

    /// Decides the enforced `local` rules of `request` in this instance's memory, each with
    /// an equal share of its limit and burst (÷ the live instances, at least 1 each); the
    /// `open` rules of the same check allow. The buckets are this instance's own and start
    /// full, so the fleet admits at most the limit (plus rounding up to 1 per instance) while
    /// the count of instances is right; see docs/ARCHITECTURE.md for the bound.
    fn decide_locally(
        &self,
        request: &CheckRequest,
        rules: &[Arc<Rule>],
        subjects: Subjects<'_>,
        counted: bool,
    ) -> Result<Answer, DecideError> {
        let share = u64::try_from(self.live.get()).unwrap_or(u64::MAX);
        let picked: Vec<usize> = (0..rules.len())
            .filter(|&i| !rules[i].body.shadow && rules[i].body.failure_mode == FailureMode::Local)
            .collect();
        let local = CheckRequest {
            tenant: request.tenant.clone(),
            rules: picked
                .iter()
                .map(|&i| {
                    let mut check = request.rules[i].clone();
                    check.spec.limit = (check.spec.limit / share).max(1);
                    check.spec.burst = check.spec.burst.map(|b| (b / share).max(1));
                    check
                })
                .collect(),
            request_id: request.request_id.clone(),
            now_ms: request.now_ms,
            dry_run: false,
            // This instance's own buckets for the length of an outage, held to the tenant's
            // quota like those in the shared store.
            max_live_keys: request.max_live_keys,
            // Nothing to settle: the caller is told no reservation was made.
            reserve: None,
            lease: None,
        };
        let all = rules;
        let rules: Vec<Arc<Rule>> = picked.iter().map(|&i| rules[i].clone()).collect();
        let outcome = match self.fallback.check(&local) {
            Ok(outcome) => outcome,
            Err(error) => {
                if counted {
                    self.metrics
                        .outcome(&request.tenant, &rules[0].body.name, Outcome::Denied);
                }
                return Err(error.into());
            }
        };
        let deciding = plan::deciding_rule(&rules, &outcome.decisions, outcome.allowed);
        if counted {
            if outcome.allowed {
                self.metrics.outcome(
                    &request.tenant,
                    &rules[deciding].body.name,
                    Outcome::Allowed,
                );
            } else {
                self.metrics.denied(
                    &request.tenant,
                    &rules[deciding],
                    subjects.of(all, picked[deciding]),
                );
            }
            self.metrics.local_decision();
        }
        Ok(Answer::Decided(Decided {
            allowed: outcome.allowed,
            rules,
            decisions: outcome.decisions,
            deciding,
            now_ms: outcome.now_ms,
            local: true,
            reservation: None,
            lease: None,
        }))
    }
}

/// Whose bucket each rule of a decision counts, for the most denied subjects.
#[derive(Debug, Clone, Copy)]
enum Subjects<'a> {
    /// A check's subject, for each of its per-subject rules.
    Check(Option<&'a Subject>),
    /// Descriptors': one per rule, in the rules' order (`None`: a tenant-wide bucket).
    Each(&'a [Option<String>]),
}

impl Subjects<'_> {
    /// The subject of `rules[i]`'s bucket; `""` for a tenant-wide bucket.
    fn of(&self, rules: &[Arc<Rule>], i: usize) -> &str {
        match self {
            Subjects::Check(Some(subject)) if rules[i].body.scope == Scope::Subject => {
                subject.as_str()
            }
            Subjects::Check(_) => "",
            Subjects::Each(all) => all.get(i).and_then(Option::as_deref).unwrap_or(""),
        }
    }
}

/// Whether a limiter failure is already told in the log: while a breaker is open its
/// opening was logged once, and every check it refuses would only repeat it.
fn quiet(error: &LimiterError) -> bool {
    matches!(
        error,
        LimiterError::Redis(crate::redis_client::Error::BreakerOpen(_))
    )
}
