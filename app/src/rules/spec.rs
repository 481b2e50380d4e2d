//! [`LimitSpec`]: the parameters of one limit, and their validation.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The shortest period: one millisecond.
pub const MIN_PERIOD_MS: u64 = 1;
/// The longest period: 366 days.
pub const MAX_PERIOD_MS: u64 = 366 * 24 * 60 * 60 * 1000;
/// The largest `limit` (and `burst`). Decisions are computed in IEEE doubles, identically in
/// Rust and in Redis's Lua; below this bound every count they hold is an exact integer.
pub const MAX_LIMIT: u64 = 1_000_000_000;
/// `sliding_log` keeps one entry per admitted request, so its memory and its script time grow
/// with its limit (see docs/ALGORITHMS.md); above this, `sliding_window` is the better choice.
pub const MAX_LOG_LIMIT: u64 = 1_000;
/// The largest cost of one check.
pub const MAX_COST: u64 = 1_000_000;

/// A rate-limiting algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// A bucket of `burst` tokens refilled at `limit` per `period`.
    TokenBucket,
    /// The generic cell rate algorithm: a token bucket kept as one timestamp.
    Gcra,
    /// A meter that fills with each request and leaks at `limit` per `period`.
    LeakyBucket,
    /// At most `limit` per window aligned on multiples of `period`.
    FixedWindow,
    /// The weighted two-window counter: the previous window counts in proportion to how much
    /// of it still overlaps the sliding window.
    SlidingWindow,
    /// An exact log of admitted requests over the last `period`.
    SlidingLog,
    /// At most `limit` requests in flight: each admitted request holds a lease until it is
    /// released, or for `period` at most.
    Concurrency,
}

impl Algorithm {
    pub const ALL: [Algorithm; 7] = [
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
        Algorithm::Concurrency,
    ];

    /// The algorithms that limit a rate: every one but `concurrency`.
    pub const RATES: [Algorithm; 6] = [
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::LeakyBucket,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
            Algorithm::LeakyBucket => "leaky_bucket",
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindow => "sliding_window",
            Algorithm::SlidingLog => "sliding_log",
            Algorithm::Concurrency => "concurrency",
        }
    }

    /// The algorithm's name in words, for the console.
    pub fn title(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "Token bucket",
            Algorithm::Gcra => "GCRA",
            Algorithm::LeakyBucket => "Leaky bucket",
            Algorithm::FixedWindow => "Fixed window",
            Algorithm::SlidingWindow => "Sliding window",
            Algorithm::SlidingLog => "Sliding log",
            Algorithm::Concurrency => "Concurrency",
        }
    }

    /// What the algorithm does, in one line (docs/ALGORITHMS.md has the whole story).
    pub fn about(self) -> &'static str {
        match self {
            Algorithm::TokenBucket => "a bucket of burst tokens, refilled at limit per period: bursts up to the burst, then a steady rate",
            Algorithm::Gcra => "a token bucket kept as one timestamp: the same answers, less state",
            Algorithm::LeakyBucket => "a meter that each request fills and that drains at limit per period: traffic smoothed to a steady rate",
            Algorithm::FixedWindow => "at most limit per calendar window (each period from a multiple of it): simple, but up to twice the limit across a window's edge",
            Algorithm::SlidingWindow => "the current and previous windows weighted by their overlap: close to exact, with two counters",
            Algorithm::SlidingLog => "an exact log of admitted requests over the last period: exact, one entry per request (limits up to 1,000)",
            Algorithm::Concurrency => "at most limit requests in flight: each admitted request holds a lease until POST /v1/release, or for period at most (limits up to 1,000)",
        }
    }

    /// Whether `burst` (the bucket's capacity) applies.
    pub fn has_burst(self) -> bool {
        matches!(
            self,
            Algorithm::TokenBucket | Algorithm::Gcra | Algorithm::LeakyBucket
        )
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = FieldError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| {
                FieldError::new(
                    "algorithm",
                    format!(
                        "unknown algorithm {s:?}; use one of token_bucket, gcra, leaky_bucket, \
                     fixed_window, sliding_window, sliding_log, concurrency"
                    ),
                )
            })
    }
}

/// A validation failure, tied to the field a form should show it next to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: &str, message: impl Into<String>) -> Self {
        Self {
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The parameters of one limit: `limit` per `period_ms` sustained, with a capacity of
/// `burst` (defaulting to `limit`) for the bucket algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LimitSpec {
    pub algorithm: Algorithm,
    pub limit: u64,
    pub period_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    /// Whether a denied request still charges the bucket.
    #[serde(default)]
    pub penalty: bool,
}

impl LimitSpec {
    /// A spec without burst or penalty.
    pub fn new(algorithm: Algorithm, limit: u64, period_ms: u64) -> Self {
        Self {
            algorithm,
            limit,
            period_ms,
            burst: None,
            penalty: false,
        }
    }

    /// The most a key can admit at once: `burst` for the bucket algorithms, else `limit`.
    pub fn capacity(&self) -> u64 {
        match self.burst {
            Some(burst) if self.algorithm.has_burst() => burst,
            _ => self.limit,
        }
    }

    /// Every problem with this spec, each with the field it concerns. Empty means valid.
    pub fn problems(&self) -> Vec<FieldError> {
        let mut problems = Vec::new();
        let logged = matches!(
            self.algorithm,
            Algorithm::SlidingLog | Algorithm::Concurrency
        );
        let max_limit = if logged { MAX_LOG_LIMIT } else { MAX_LIMIT };
        if self.limit == 0 {
            problems.push(FieldError::new("limit", "must be at least 1"));
        } else if self.limit > max_limit {
            let why = match self.algorithm {
                Algorithm::SlidingLog => " for sliding_log, which stores one entry per request; use sliding_window for larger limits",
                Algorithm::Concurrency => " for concurrency, which stores one entry per lease",
                _ => "",
            };
            problems.push(FieldError::new(
                "limit",
                format!("must be at most {max_limit}{why}"),
            ));
        }
        if !(MIN_PERIOD_MS..=MAX_PERIOD_MS).contains(&self.period_ms) {
            problems.push(FieldError::new(
                "period_ms",
                format!("must be between {MIN_PERIOD_MS} ms and {MAX_PERIOD_MS} ms (366 days)"),
            ));
        }
        match self.burst {
            Some(_) if !self.algorithm.has_burst() => problems.push(FieldError::new(
                "burst",
                format!(
                    "{} has no burst; leave it empty (window algorithms admit `limit` per period)",
                    self.algorithm
                ),
            )),
            Some(0) => problems.push(FieldError::new("burst", "must be at least 1")),
            Some(b) if b > MAX_LIMIT => problems.push(FieldError::new(
                "burst",
                format!("must be at most {MAX_LIMIT}"),
            )),
            _ => {}
        }
        if self.algorithm == Algorithm::Concurrency && self.penalty {
            problems.push(FieldError::new(
                "penalty",
                "concurrency has no penalty: a denied request holds no lease",
            ));
        }
        // A bucket's state must be able to expire: refilling it from empty (capacity ×
        // period / limit) may take at most MAX_PERIOD_MS.
        if self.algorithm.has_burst() && self.limit > 0 && problems.is_empty() {
            let refill_ms =
                u128::from(self.capacity()) * u128::from(self.period_ms) / u128::from(self.limit);
            if refill_ms > u128::from(MAX_PERIOD_MS) {
                let field = if self.burst.is_some() {
                    "burst"
                } else {
                    "period_ms"
                };
                problems.push(FieldError::new(
                    field,
                    "refilling the whole bucket (burst × period_ms ÷ limit) must take at most 366 days",
                ));
            }
        }
        problems
    }

    /// Ok when valid; otherwise the first problem.
    pub fn validate(&self) -> Result<(), FieldError> {
        match self.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algorithms_parse_from_their_names() {
        for algorithm in Algorithm::ALL {
            assert_eq!(algorithm.as_str().parse::<Algorithm>(), Ok(algorithm));
        }
        let err = "leaky".parse::<Algorithm>().unwrap_err();
        assert_eq!(err.field, "algorithm");
        assert!(err.message.contains("token_bucket"), "{err}");
    }

    #[test]
    fn algorithms_serialize_in_snake_case() {
        let json = serde_json::to_string(&Algorithm::SlidingWindow).unwrap();
        assert_eq!(json, "\"sliding_window\"");
    }

    #[test]
    fn a_valid_spec_has_no_problems() {
        let spec = LimitSpec {
            burst: Some(20),
            ..LimitSpec::new(Algorithm::TokenBucket, 10, 1000)
        };
        assert_eq!(spec.problems(), vec![]);
        assert_eq!(spec.capacity(), 20);
        assert_eq!(LimitSpec::new(Algorithm::Gcra, 10, 1000).capacity(), 10);
    }

    #[test]
    fn every_problem_names_its_field() {
        let spec = LimitSpec {
            burst: Some(5),
            ..LimitSpec::new(Algorithm::FixedWindow, 0, 0)
        };
        let fields: Vec<String> = spec.problems().into_iter().map(|p| p.field).collect();
        assert_eq!(fields, ["limit", "period_ms", "burst"]);
    }

    #[test]
    fn periods_run_from_one_millisecond_to_366_days() {
        let ok = |period| {
            LimitSpec::new(Algorithm::Gcra, 1, period)
                .validate()
                .is_ok()
        };
        assert!(ok(1));
        assert!(ok(MAX_PERIOD_MS));
        assert!(!ok(0));
        assert!(!ok(MAX_PERIOD_MS + 1));
    }

    #[test]
    fn sliding_log_limits_are_bounded_with_advice() {
        let err = LimitSpec::new(Algorithm::SlidingLog, MAX_LOG_LIMIT + 1, 1000)
            .validate()
            .unwrap_err();
        assert!(err.message.contains("sliding_window"), "{err}");
        assert!(
            LimitSpec::new(Algorithm::SlidingWindow, MAX_LOG_LIMIT + 1, 1000)
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn a_bucket_must_refill_within_366_days() {
        let slow = LimitSpec {
            burst: Some(1_000_000_000),
            ..LimitSpec::new(Algorithm::TokenBucket, 1, 10_000_000_000)
        };
        assert_eq!(slow.validate().unwrap_err().field, "burst");
        let ok = LimitSpec {
            burst: Some(366),
            ..LimitSpec::new(Algorithm::Gcra, 1, 86_400_000)
        };
        assert!(ok.validate().is_ok());
        // Windows have no refill: a long period is fine.
        assert!(LimitSpec::new(Algorithm::FixedWindow, 1, MAX_PERIOD_MS)
            .validate()
            .is_ok());
    }

    #[test]
    fn zero_burst_and_huge_limits_are_refused() {
        let spec = LimitSpec {
            burst: Some(0),
            ..LimitSpec::new(Algorithm::LeakyBucket, 1, 1)
        };
        assert_eq!(spec.validate().unwrap_err().field, "burst");
        assert_eq!(
            LimitSpec::new(Algorithm::Gcra, MAX_LIMIT + 1, 1)
                .validate()
                .unwrap_err()
                .field,
            "limit"
        );
    }
}
