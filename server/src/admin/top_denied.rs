//! The most denied subjects of a tenant's rules over the last 5 minutes or hour, from the
//! fleet's summaries ([`crate::dashboard::top`]): never from metric labels. Each count is at
//! most the rule's `error` below the true count, and never above it.

use serde::{Deserialize, Serialize};

use super::{Actor, AdminService, ServiceError};
use crate::dashboard::Dashboard;
use crate::limiter::LimiterError;
use crate::store;

/// How far back the most denied subjects are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum TopRange {
    /// The minute now running and the four before it.
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    /// The minute now running and the 59 before it.
    #[serde(rename = "1h")]
    Hour,
}

impl TopRange {
    pub fn minutes(self) -> i64 {
        match self {
            TopRange::FiveMinutes => 5,
            TopRange::Hour => 60,
        }
    }
}

/// Subjects answered per rule unless the caller asks for another number.
pub const DEFAULT_SUBJECTS: usize = 10;
/// The most subjects answered per rule: what a summary keeps.
pub const MAX_SUBJECTS: usize = crate::dashboard::top::CAPACITY;

/// A tenant's most denied subjects, rule by rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopDenied {
    pub tenant: String,
    pub range: TopRange,
    /// The start of the first minute counted (Unix ms).
    pub since_ms: i64,
    /// The rules that denied anything in the range, most denials first.
    pub rules: Vec<RuleDenials>,
}

/// One rule's denials in the range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleDenials {
    pub rule_id: String,
    /// The rule's name (as it was when last counted, if the rule is gone).
    pub policy: String,
    /// Whether the rule still exists.
    pub exists: bool,
    /// Every denial of the rule in the range.
    pub denied: u64,
    /// How far below its true count any subject's count may be (it is never above it).
    pub error: u64,
    /// The most denied subjects, most first; `subject` is null for the rule's one tenant-wide
    /// bucket.
    pub subjects: Vec<SubjectDenials>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubjectDenials {
    pub subject: Option<String>,
    pub denied: u64,
}

impl AdminService {
    /// `tenant_id`'s most denied subjects over `range`, at most `limit` a rule, read from
    /// `dashboard`'s fleet series. A tenant admin sees only their own tenant.
    pub async fn top_denied(
        &self,
        actor: &Actor,
        tenant_id: &str,
        range: TopRange,
        limit: usize,
        dashboard: &Dashboard,
    ) -> Result<TopDenied, ServiceError> {
        self.authorize(actor, tenant_id).await?;
        let (since_ms, summaries) = dashboard
            .top_denied(tenant_id, range.minutes())
            .await
            .map_err(|e| ServiceError::Limiter(LimiterError::Redis(e)))?;
        let names: std::collections::HashMap<String, String> =
            store::rules::list(&self.db, tenant_id)
                .await?
                .into_iter()
                .map(|r| (r.id, r.body.name))
                .collect();
        let mut rules: Vec<RuleDenials> = summaries
            .into_iter()
            .filter(|(_, s)| s.denials > 0)
            .map(|(rule_id, s)| RuleDenials {
                exists: names.contains_key(&rule_id),
                policy: names.get(&rule_id).cloned().unwrap_or(s.policy.clone()),
                denied: s.denials,
                error: s.error,
                subjects: s
                    .top(limit)
                    .into_iter()
                    .map(|(subject, denied)| SubjectDenials {
                        subject: (!subject.is_empty()).then(|| subject.to_owned()),
                        denied,
                    })
                    .collect(),
                rule_id,
            })
            .collect();
        rules.sort_by(|a, b| {
            b.denied
                .cmp(&a.denied)
                .then_with(|| a.policy.cmp(&b.policy))
        });
        Ok(TopDenied {
            tenant: tenant_id.to_owned(),
            range,
            since_ms,
            rules,
        })
    }
}
