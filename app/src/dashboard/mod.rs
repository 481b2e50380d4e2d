//! The live dashboards: the operator's fleet view and a tenant's own view. The server renders
//! each frame (plotters SVG charts and tables) from the fleet's per-second series; the page
//! shows the first frame in its HTML and then takes a new one every second, pushed over
//! server-sent events from `/live/dashboard`.

pub mod view;

use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

/// The time a dashboard covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Range {
    /// 5 minutes at 1 s.
    #[default]
    #[serde(rename = "5m")]
    FiveMinutes,
    /// 1 hour at 5 s.
    #[serde(rename = "1h")]
    Hour,
    /// 24 hours at 2 min.
    #[serde(rename = "24h")]
    Day,
}

impl Range {
    pub const ALL: [Range; 3] = [Range::FiveMinutes, Range::Hour, Range::Day];

    pub fn as_str(self) -> &'static str {
        match self {
            Range::FiveMinutes => "5m",
            Range::Hour => "1h",
            Range::Day => "24h",
        }
    }

    pub fn parse(s: &str) -> Option<Range> {
        Range::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The whole span in seconds.
    pub fn seconds(self) -> i64 {
        match self {
            Range::FiveMinutes => 300,
            Range::Hour => 3600,
            Range::Day => 86_400,
        }
    }

    /// The width of one point of the charts, in seconds.
    pub fn bin_seconds(self) -> i64 {
        match self {
            Range::FiveMinutes => 1,
            Range::Hour => 5,
            Range::Day => 120,
        }
    }
}

/// What this feature's server functions need from the server (which implements it). Acting
/// calls act as the session's user: an operator on any tenant, a tenant admin on their own
/// tenant only (any other tenant is `NotFound`); without a session they are `Unauthorized`.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait DashboardPort: Send + Sync + 'static {
    /// The dashboard of the fleet (`None`, operators) or of a tenant, as HTML.
    async fn dashboard(&self, tenant: Option<&str>, range: Range) -> Result<String, AppError>;

    /// The tenant's most denied subjects of the last 5 minutes, over all its rules.
    async fn denied_subjects(&self, tenant: &str) -> Result<Vec<DeniedSubject>, AppError>;
}

/// One of a tenant's most denied subjects, by one of its rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeniedSubject {
    pub rule_id: String,
    pub policy: String,
    /// `None`: the rule's one tenant-wide bucket.
    pub subject: Option<String>,
    /// Denials in the last 5 minutes: at most `error` below the true count, never above.
    pub denied: u64,
    pub error: u64,
}

/// How many of the most denied subjects the console lists.
pub const DENIED_SUBJECTS_SHOWN: usize = 10;

/// The tenant's most denied subjects of the last 5 minutes (at most
/// [`DENIED_SUBJECTS_SHOWN`]), most first, over every rule that still exists.
#[server(prefix = "/api", endpoint = "denied_subjects", input = Json)]
pub async fn denied_subjects(tenant: String) -> Result<Vec<DeniedSubject>, AppError> {
    crate::context::port::<dyn DashboardPort>()?
        .denied_subjects(&tenant)
        .await
}

/// The dashboard of the fleet (`tenant` = `None`, operators) or of one tenant, as HTML: the
/// frame the live stream would push now.
#[server(prefix = "/api", endpoint = "dashboard", input = Json)]
pub async fn dashboard_frame(tenant: Option<String>, range: Range) -> Result<String, AppError> {
    crate::context::port::<dyn DashboardPort>()?
        .dashboard(tenant.as_deref(), range)
        .await
}

#[cfg(test)]
mod tests {
    use super::Range;

    #[test]
    fn ranges_round_trip_and_bin_evenly() {
        for r in Range::ALL {
            assert_eq!(Range::parse(r.as_str()), Some(r));
            assert_eq!(r.seconds() % r.bin_seconds(), 0);
            assert!(
                r.seconds() / r.bin_seconds() <= 720,
                "{r:?} has too many points"
            );
        }
        assert_eq!(Range::parse("7d"), None);
    }
}
