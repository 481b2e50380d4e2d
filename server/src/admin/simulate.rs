//! Simulate: a check decided by the decision core as a dry run, against the tenant's rules as
//! stored (so a rule saved a moment ago counts) and its current counters, consuming nothing;
//! and which rules a route resolves to, by the same core.

use app::rules::RouteRules;
use app::simulate::{SimulateInput, SimulatedRule, Simulation};
use app::tenants::TenantStatus;

use super::{dto, Actor, AdminService, ServiceError};
use crate::decide::{Answer, CheckInput, CompiledTenant, Mode};
use crate::store;

impl AdminService {
    /// The rules a check of `route` (in any spacing or case) is counted by, resolved by the
    /// decision core from the tenant's rules as stored.
    pub async fn rules_for_route(
        &self,
        actor: &Actor,
        tenant_id: &str,
        route: &str,
    ) -> Result<RouteRules, ServiceError> {
        let tenant = self.authorize(actor, tenant_id).await?;
        let route =
            crate::decide::Route::parse(route).map_err(|e| super::invalid(e.field, e.message))?;
        let rules = store::rules::list(&self.db, tenant_id).await?;
        let compiled = CompiledTenant::compile(tenant, rules);
        Ok(RouteRules {
            route: route.as_str().to_owned(),
            rules: compiled
                .resolve(route.as_str())
                .into_iter()
                .map(|rule| dto::rule((*rule).clone()))
                .collect(),
        })
    }

    pub async fn simulate(
        &self,
        actor: &Actor,
        tenant_id: &str,
        input: &SimulateInput,
    ) -> Result<Simulation, ServiceError> {
        let tenant = self.authorize(actor, tenant_id).await?;
        if tenant.status != TenantStatus::Active {
            return Err(ServiceError::Forbidden(
                "this tenant is suspended: every check of its keys gets 403".into(),
            ));
        }
        let input = CheckInput::from_simulation(input).map_err(crate::decide::DecideError::from)?;
        let rules = store::rules::list(&self.db, tenant_id).await?;
        let overrides = store::overrides::list(&self.db, tenant_id).await?;
        let compiled = CompiledTenant::compile(tenant, rules).with_overrides(overrides);
        match self.decider.decide(&compiled, &input, Mode::DryRun).await? {
            Answer::Decided(d) => Ok(Simulation {
                allowed: d.allowed,
                policy: Some(d.deciding().0.body.name.clone()),
                rules: d
                    .rules
                    .iter()
                    .zip(&d.decisions)
                    .map(|(rule, d)| SimulatedRule {
                        rule_id: rule.id.clone(),
                        policy: rule.body.name.clone(),
                        shadow: rule.body.shadow,
                        scope: rule.body.scope,
                        verdict: d.verdict,
                        limit: d.limit,
                        remaining: d.remaining,
                        reset_after_ms: d.reset_after_ms,
                        retry_after_ms: d.retry_after_ms,
                    })
                    .collect(),
                now_ms: d.now_ms,
            }),
            // A dry run returns limiter errors instead of failing open.
            Answer::NoRule | Answer::FailedOpen { .. } => Ok(Simulation {
                allowed: true,
                policy: None,
                rules: Vec::new(),
                now_ms: store::now_ms(),
            }),
        }
    }
}
