//! The reference model of every algorithm: pure functions of (spec, state, now, cost).
//!
//! `lua/check.lua` implements the same arithmetic for Redis, operation for operation, in IEEE
//! doubles; the differential tests hold the two to identical answers. That is why the state
//! here is `f64` throughout and why expressions are written in the script's order. The
//! in-process limiter and the console's behaviour preview run this model directly.
//!
//! Conventions shared by every algorithm:
//! - time is integer milliseconds; a state remembers the latest time it saw (`ts`) and an
//!   earlier `now` is clamped to it, so time going backwards never creates capacity;
//! - a denial changes nothing unless the spec has `penalty`, in which case it consumes what
//!   is left, never more (capacity never goes below zero);
//! - a cost larger than the capacity can never be admitted and gets [`Verdict::NeverFits`];
//! - `ttl_ms` is how long the stored state matters: after it the key can expire, and a missing
//!   key is the full state, which is what the state would have refilled to anyway.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::spec::{Algorithm, LimitSpec};

/// Extra lifetime given to every stored key beyond the time it takes to refill.
pub const TTL_MARGIN_MS: f64 = 1000.0;
/// Continuous refill is computed in doubles, so a bucket that has mathematically refilled
/// to exactly `cost` can read a few ulps short. Comparisons accept this much (in units of
/// one request), so that waiting `retry_after` is always enough.
pub const EPSILON: f64 = 1e-9;

/// What one rule says about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Allow,
    Deny,
    /// The cost exceeds the capacity: no amount of waiting helps.
    NeverFits,
}

/// The decision of one rule.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub verdict: Verdict,
    /// The rule's `limit` (for headers).
    pub limit: u64,
    /// Capacity left after this request, possibly fractional (bucket algorithms refill
    /// continuously).
    pub remaining: f64,
    /// Milliseconds until the key is back to its full capacity.
    pub reset_after_ms: u64,
    /// Milliseconds until the same request could be admitted; 0 when admitted or never.
    pub retry_after_ms: u64,
}

impl Decision {
    pub fn allowed(&self) -> bool {
        self.verdict == Verdict::Allow
    }
}

/// The stored state of one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum State {
    TokenBucket {
        tokens: f64,
        ts: f64,
    },
    /// GCRA's theoretical arrival time, kept relative to `ts` (`backlog = TAT - ts`): it is
    /// a few milliseconds, where an absolute TAT near 1.8e12 ms would lose precision.
    Gcra {
        backlog: f64,
        ts: f64,
    },
    LeakyBucket {
        level: f64,
        ts: f64,
    },
    FixedWindow {
        count: f64,
        window: f64,
        ts: f64,
    },
    SlidingWindow {
        prev: f64,
        cur: f64,
        window: f64,
        ts: f64,
    },
    /// Admitted requests as (time, cost), oldest first. The newest entry's time is the
    /// latest time the state saw: every write adds an entry at `now`.
    SlidingLog {
        entries: VecDeque<(f64, f64)>,
    },
    /// The leases held, as (id, expiry time, slots). A lease this model admits has an
    /// empty id until the backend names it ([`name_leases`]).
    Concurrency {
        leases: Vec<(String, f64, f64)>,
    },
}

/// One rule's evaluation: its decision and the state to store in each outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    pub decision: Decision,
    /// The state to store if the request is admitted (only when the decision allows).
    pub admitted: Option<State>,
    /// The state to store if the request is denied: `Some` only with `penalty`.
    pub penalized: Option<State>,
    /// How long a written state must live.
    pub ttl_ms: u64,
}

fn whole_ms(x: f64) -> u64 {
    // Saturating float-to-int conversion; every caller passes a non-negative value.
    x.max(0.0).ceil() as u64
}

/// How long a bucket's state must live: the time to refill `empty` units at `l` per `p`,
/// plus the margin. `empty` is the capacity, or more while a settled overrun is owed.
fn bucket_ttl(empty: f64, p: f64, l: f64) -> u64 {
    whole_ms(empty * p / l + TTL_MARGIN_MS)
}

// Each state as it stands at `now`: refilled, drained or rolled on, with `now` clamped to the
// latest time the state saw. Checks and settles both start from here.

/// Tokens at `now`, and the clamped `now`.
fn tokens_at(l: f64, p: f64, b: f64, state: Option<&State>, now: f64) -> (f64, f64) {
    let (tokens, ts) = match state {
        Some(State::TokenBucket { tokens, ts }) => (*tokens, *ts),
        _ => (b, now),
    };
    let now = now.max(ts);
    (b.min(tokens + (now - ts) * l / p), now)
}

/// GCRA's backlog at `now`, and the clamped `now`.
fn backlog_at(state: Option<&State>, now: f64) -> (f64, f64) {
    let (backlog, ts) = match state {
        Some(State::Gcra { backlog, ts }) => (*backlog, *ts),
        _ => (0.0, now),
    };
    let now = now.max(ts);
    (0.0_f64.max(backlog - (now - ts)), now)
}

/// The leaky bucket's level at `now`, and the clamped `now`.
fn level_at(l: f64, p: f64, state: Option<&State>, now: f64) -> (f64, f64) {
    let (level, ts) = match state {
        Some(State::LeakyBucket { level, ts }) => (*level, *ts),
        _ => (0.0, now),
    };
    let now = now.max(ts);
    (0.0_f64.max(level - (now - ts) * l / p), now)
}

/// The fixed window's count and window at `now`, and the clamped `now`.
fn window_at(p: f64, state: Option<&State>, now: f64) -> (f64, f64, f64) {
    let (count, window, ts) = match state {
        Some(State::FixedWindow { count, window, ts }) => (*count, *window, *ts),
        _ => (0.0, (now / p).floor(), now),
    };
    let now = now.max(ts);
    let w = (now / p).floor();
    if w != window {
        return (0.0, w, now);
    }
    (count, window, now)
}

/// The sliding window's previous and current counts and window at `now`, and the clamped
/// `now`.
fn sliding_at(p: f64, state: Option<&State>, now: f64) -> (f64, f64, f64, f64) {
    let (mut prev, mut cur, window, ts) = match state {
        Some(State::SlidingWindow {
            prev,
            cur,
            window,
            ts,
        }) => (*prev, *cur, *window, *ts),
        _ => (0.0, 0.0, (now / p).floor(), now),
    };
    let now = now.max(ts);
    let w = (now / p).floor();
    if w == window + 1.0 {
        prev = cur;
        cur = 0.0;
    } else if w > window + 1.0 {
        prev = 0.0;
        cur = 0.0;
    }
    (prev, cur, w, now)
}

/// The log's live entries at `now` (an entry counts while now − time < period), and the
/// `now` clamped to its newest entry.
fn log_at(p: f64, state: Option<&State>, now: f64) -> (VecDeque<(f64, f64)>, f64) {
    let mut entries = match state {
        Some(State::SlidingLog { entries }) => entries.clone(),
        _ => VecDeque::new(),
    };
    let now = entries.back().map_or(now, |&(newest, _)| now.max(newest));
    while entries.front().is_some_and(|&(time, _)| time <= now - p) {
        entries.pop_front();
    }
    (entries, now)
}

/// Evaluates one rule for one request at `now` (ms), without changing anything.
pub fn evaluate(spec: &LimitSpec, state: Option<&State>, now: i64, cost: u64) -> Evaluation {
    let l = spec.limit as f64;
    let p = spec.period_ms as f64;
    let b = spec.capacity() as f64;
    let c = cost as f64;
    let now = now as f64;
    let mut eval = match spec.algorithm {
        Algorithm::TokenBucket => token_bucket(l, p, b, c, state, now, spec.penalty),
        Algorithm::Gcra => gcra(l, p, b, c, state, now, spec.penalty),
        Algorithm::LeakyBucket => leaky_bucket(l, p, b, c, state, now, spec.penalty),
        Algorithm::FixedWindow => fixed_window(l, p, c, state, now, spec.penalty),
        Algorithm::SlidingWindow => sliding_window(l, p, c, state, now, spec.penalty),
        Algorithm::SlidingLog => sliding_log(l, p, c, state, now, spec.penalty),
        Algorithm::Concurrency => concurrency(l, p, c, state, now),
    };
    eval.decision.limit = spec.limit;
    eval
}

fn decision(verdict: Verdict, remaining: f64, reset: f64, retry: f64) -> Decision {
    Decision {
        verdict,
        limit: 0,
        remaining,
        reset_after_ms: whole_ms(reset),
        retry_after_ms: if verdict == Verdict::Deny {
            whole_ms(retry).max(1)
        } else {
            0
        },
    }
}

fn token_bucket(
    l: f64,
    p: f64,
    b: f64,
    c: f64,
    state: Option<&State>,
    now: f64,
    penalty: bool,
) -> Evaluation {
    let (mut tokens, now) = tokens_at(l, p, b, state, now);
    let ttl_ms = bucket_ttl(b - tokens.min(0.0), p, l);
    if c > b {
        let d = decision(Verdict::NeverFits, tokens, (b - tokens) * p / l, 0.0);
        return Evaluation {
            decision: d,
            admitted: None,
            penalized: None,
            ttl_ms,
        };
    }
    if tokens + EPSILON >= c {
        let left = 0.0_f64.max(tokens - c);
        let d = decision(Verdict::Allow, left, (b - left) * p / l, 0.0);
        let admitted = Some(State::TokenBucket {
            tokens: left,
            ts: now,
        });
        return Evaluation {
            decision: d,
            admitted,
            penalized: None,
            ttl_ms,
        };
    }
    if penalty {
        // Never below zero, and never out of a debt a settled overrun left.
        tokens = tokens.min(0.0_f64.max(tokens - c));
    }
    let d = decision(
        Verdict::Deny,
        tokens,
        (b - tokens) * p / l,
        (c - tokens) * p / l,
    );
    let penalized = penalty.then_some(State::TokenBucket { tokens, ts: now });
    Evaluation {
        decision: d,
        admitted: None,
        penalized,
        ttl_ms,
    }
}

fn gcra(
    l: f64,
    p: f64,
    b: f64,
    c: f64,
    state: Option<&State>,
    now: f64,
    penalty: bool,
) -> Evaluation {
    let t = p / l;
    let tau = b * t;
    let (mut backlog, now) = backlog_at(state, now);
    let ttl_ms = whole_ms(tau.max(backlog) + TTL_MARGIN_MS);
    if c > b {
        let d = decision(
            Verdict::NeverFits,
            0.0_f64.max((tau - backlog) / t),
            backlog,
            0.0,
        );
        return Evaluation {
            decision: d,
            admitted: None,
            penalized: None,
            ttl_ms,
        };
    }
    let after = backlog + c * t;
    if after <= tau + EPSILON * t {
        let d = decision(Verdict::Allow, 0.0_f64.max((tau - after) / t), after, 0.0);
        let admitted = Some(State::Gcra {
            backlog: after,
            ts: now,
        });
        return Evaluation {
            decision: d,
            admitted,
            penalized: None,
            ttl_ms,
        };
    }
    if penalty {
        backlog = backlog.max(after.min(tau));
    }
    let d = decision(
        Verdict::Deny,
        0.0_f64.max((tau - backlog) / t),
        backlog,
        backlog + c * t - tau,
    );
    let penalized = penalty.then_some(State::Gcra { backlog, ts: now });
    Evaluation {
        decision: d,
        admitted: None,
        penalized,
        ttl_ms,
    }
}

fn leaky_bucket(
    l: f64,
    p: f64,
    b: f64,
    c: f64,
    state: Option<&State>,
    now: f64,
    penalty: bool,
) -> Evaluation {
    let (mut level, now) = level_at(l, p, state, now);
    let ttl_ms = bucket_ttl(b.max(level), p, l);
    if c > b {
        let d = decision(Verdict::NeverFits, b - level, level * p / l, 0.0);
        return Evaluation {
            decision: d,
            admitted: None,
            penalized: None,
            ttl_ms,
        };
    }
    if level + c <= b + EPSILON {
        let filled = b.min(level + c);
        let d = decision(Verdict::Allow, b - filled, filled * p / l, 0.0);
        let admitted = Some(State::LeakyBucket {
            level: filled,
            ts: now,
        });
        return Evaluation {
            decision: d,
            admitted,
            penalized: None,
            ttl_ms,
        };
    }
    if penalty {
        level = level.max(b.min(level + c));
    }
    let d = decision(
        Verdict::Deny,
        b - level,
        level * p / l,
        (level + c - b) * p / l,
    );
    let penalized = penalty.then_some(State::LeakyBucket { level, ts: now });
    Evaluation {
        decision: d,
        admitted: None,
        penalized,
        ttl_ms,
    }
}

fn fixed_window(
    l: f64,
    p: f64,
    c: f64,
    state: Option<&State>,
    now: f64,
    penalty: bool,
) -> Evaluation {
    let (mut count, window, now) = window_at(p, state, now);
    let ends_in = (window + 1.0) * p - now;
    let ttl_ms = whole_ms(ends_in + TTL_MARGIN_MS);
    if c > l {
        let d = decision(Verdict::NeverFits, l - count, ends_in, 0.0);
        return Evaluation {
            decision: d,
            admitted: None,
            penalized: None,
            ttl_ms,
        };
    }
    if count + c <= l {
        let d = decision(Verdict::Allow, l - (count + c), ends_in, 0.0);
        let admitted = Some(State::FixedWindow {
            count: count + c,
            window,
            ts: now,
        });
        return Evaluation {
            decision: d,
            admitted,
            penalized: None,
            ttl_ms,
        };
    }
    if penalty {
        count = count.max(l.min(count + c));
    }
    let d = decision(Verdict::Deny, l - count, ends_in, ends_in);
    let penalized = penalty.then_some(State::FixedWindow {
        count,
        window,
        ts: now,
    });
    Evaluation {
        decision: d,
        admitted: None,
        penalized,
        ttl_ms,
    }
}

fn sliding_window(
    l: f64,
    p: f64,
    c: f64,
    state: Option<&State>,
    now: f64,
    penalty: bool,
) -> Evaluation {
    let (prev, mut cur, window, now) = sliding_at(p, state, now);
    let w = window;
    let into = now - w * p;
    let left_in_window = p - into;
    let estimate = prev * (left_in_window / p) + cur;
    let ttl_ms = whole_ms(left_in_window + p + TTL_MARGIN_MS);
    let reset = |cur: f64| {
        if cur > 0.0 {
            left_in_window + p
        } else if prev > 0.0 {
            left_in_window
        } else {
            0.0
        }
    };
    if c > l {
        let d = decision(
            Verdict::NeverFits,
            0.0_f64.max(l - estimate),
            reset(cur),
            0.0,
        );
        return Evaluation {
            decision: d,
            admitted: None,
            penalized: None,
            ttl_ms,
        };
    }
    if estimate + c <= l + EPSILON {
        let d = decision(
            Verdict::Allow,
            0.0_f64.max(l - (estimate + c)),
            reset(cur + c),
            0.0,
        );
        let admitted = Some(State::SlidingWindow {
            prev,
            cur: cur + c,
            window,
            ts: now,
        });
        return Evaluation {
            decision: d,
            admitted,
            penalized: None,
            ttl_ms,
        };
    }
    if penalty {
        cur = cur.max(l.min(cur + c));
    }
    let estimate = prev * (left_in_window / p) + cur;
    // When could `estimate + c <= l` hold? Within this window if the previous window's share
    // can decay far enough; otherwise in the next one, where this window becomes `prev`.
    let retry = if cur + c <= l && prev > 0.0 {
        p - (l - cur - c) * p / prev - into
    } else if cur > 0.0 {
        left_in_window + 0.0_f64.max(p - (l - c) * p / cur)
    } else {
        left_in_window
    };
    let d = decision(Verdict::Deny, 0.0_f64.max(l - estimate), reset(cur), retry);
    let penalized = penalty.then_some(State::SlidingWindow {
        prev,
        cur,
        window,
        ts: now,
    });
    Evaluation {
        decision: d,
        admitted: None,
        penalized,
        ttl_ms,
    }
}

fn sliding_log(
    l: f64,
    p: f64,
    c: f64,
    state: Option<&State>,
    now: f64,
    penalty: bool,
) -> Evaluation {
    let (mut entries, now) = log_at(p, state, now);
    let sum: f64 = entries.iter().map(|&(_, cost)| cost).sum();
    let ttl_ms = whole_ms(p + TTL_MARGIN_MS);
    let reset =
        |entries: &VecDeque<(f64, f64)>| entries.back().map_or(0.0, |&(time, _)| time + p - now);
    if c > l {
        let d = decision(Verdict::NeverFits, l - sum, reset(&entries), 0.0);
        return Evaluation {
            decision: d,
            admitted: None,
            penalized: None,
            ttl_ms,
        };
    }
    if sum + c <= l {
        let mut admitted = entries;
        admitted.push_back((now, c));
        let d = decision(Verdict::Allow, l - (sum + c), reset(&admitted), 0.0);
        let state = State::SlidingLog { entries: admitted };
        return Evaluation {
            decision: d,
            admitted: Some(state),
            penalized: None,
            ttl_ms,
        };
    }
    // A penalty logs whatever capacity is left; when none is left there is nothing to write.
    let mut penalized = None;
    let mut sum = sum;
    if penalty && l - sum > 0.0 {
        entries.push_back((now, l - sum));
        sum = l;
        penalized = Some(State::SlidingLog {
            entries: entries.clone(),
        });
    }
    // Wait until enough of the oldest entries have aged out.
    let mut freed = 0.0;
    let mut retry = 0.0;
    for &(time, cost) in &entries {
        freed += cost;
        if sum - freed + c <= l {
            retry = time + p - now;
            break;
        }
    }
    let d = decision(Verdict::Deny, l - sum, reset(&entries), retry);
    Evaluation {
        decision: d,
        admitted: None,
        penalized,
        ttl_ms,
    }
}

/// At most `l` slots held at once, each lease for `p` ms at most. Time is not clamped: an
/// earlier `now` only counts more leases as live, which never creates capacity.
fn concurrency(l: f64, p: f64, c: f64, state: Option<&State>, now: f64) -> Evaluation {
    let mut leases = match state {
        Some(State::Concurrency { leases }) => leases.clone(),
        _ => Vec::new(),
    };
    leases.retain(|&(_, expires, _)| expires > now);
    let used: f64 = leases.iter().map(|&(_, _, slots)| slots).sum();
    let last = leases
        .iter()
        .map(|&(_, expires, _)| expires)
        .fold(now, f64::max);
    let ttl_ms = whole_ms((last - now).max(p) + TTL_MARGIN_MS);
    if c > l {
        return Evaluation {
            decision: decision(Verdict::NeverFits, l - used, last - now, 0.0),
            admitted: None,
            penalized: None,
            ttl_ms,
        };
    }
    if used + c <= l {
        let d = decision(Verdict::Allow, l - (used + c), (last - now).max(p), 0.0);
        leases.push((String::new(), now + p, c));
        return Evaluation {
            decision: d,
            admitted: Some(State::Concurrency { leases }),
            penalized: None,
            ttl_ms,
        };
    }
    // Wait until enough of the soonest-ending leases have expired.
    let mut ending: Vec<(f64, f64)> = leases.iter().map(|&(_, e, s)| (e, s)).collect();
    ending.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut freed = 0.0;
    let mut retry = 0.0;
    for (expires, slots) in ending {
        freed += slots;
        if used - freed + c <= l {
            retry = expires - now;
            break;
        }
    }
    Evaluation {
        decision: decision(Verdict::Deny, l - used, last - now, retry),
        admitted: None,
        penalized: None,
        ttl_ms,
    }
}

/// Names the lease a check just took in `state` (the one with an empty id) `id`.
pub fn name_leases(state: &mut State, id: &str) {
    if let State::Concurrency { leases } = state {
        for lease in leases.iter_mut().filter(|l| l.0.is_empty()) {
            lease.0 = id.to_owned();
        }
    }
}

/// `state` without lease `id` that ends at `ends`: the state to store, or `None` when it held
/// no such lease.
pub fn release(state: &State, id: &str, ends: f64) -> Option<State> {
    let State::Concurrency { leases } = state else {
        return None;
    };
    let kept: Vec<(String, f64, f64)> = leases
        .iter()
        .filter(|l| l.0 != id || l.1 != ends)
        .cloned()
        .collect();
    (kept.len() != leases.len()).then_some(State::Concurrency { leases: kept })
}

/// Where a reservation's charge went in a rule's state, so that settling it later finds it:
/// the window it was counted in (fixed and sliding windows), or its log entry's time (sliding
/// log). Buckets need none: capacity is capacity whenever it comes back.
pub fn charge_mark(state: &State) -> f64 {
    match state {
        State::FixedWindow { window, .. } | State::SlidingWindow { window, .. } => *window,
        State::SlidingLog { entries } => entries.back().map_or(0.0, |&(time, _)| time),
        State::TokenBucket { .. }
        | State::Gcra { .. }
        | State::LeakyBucket { .. }
        | State::Concurrency { .. } => 0.0,
    }
}

/// Settles a reservation's charge of `charged` on one rule at `cost`, its final cost, at
/// `now`: the state to store and its TTL, or `None` when nothing changes.
///
/// The difference is given back or taken, by algorithm (docs/ALGORITHMS.md, "Reserve and
/// settle"):
/// - token bucket, GCRA, leaky bucket: a refund is capacity back, never past the capacity;
///   an overrun is taken even past empty, a debt later requests wait out;
/// - fixed and sliding window: a refund goes back only into the window it was counted in (a
///   sliding window's previous window counts for less, and so gives back less); an overrun
///   is counted in the current window;
/// - sliding log: the entry it was logged as takes the final cost; an overrun whose entry has
///   aged out is logged anew at `now`;
/// - concurrency: nothing (a lease is freed by its release, whatever it cost).
pub fn settle(
    spec: &LimitSpec,
    state: Option<&State>,
    charged: f64,
    mark: f64,
    now: i64,
    cost: u64,
) -> Option<(State, u64)> {
    let l = spec.limit as f64;
    let p = spec.period_ms as f64;
    let b = spec.capacity() as f64;
    let c = cost as f64;
    let now = now as f64;
    if c == charged {
        return None;
    }
    // Refunding an absent state gives nothing: it reads as full (or empty) already.
    if state.is_none() && c < charged {
        return None;
    }
    match spec.algorithm {
        Algorithm::TokenBucket => {
            let (mut tokens, now) = tokens_at(l, p, b, state, now);
            if c < charged {
                tokens = b.min(tokens + (charged - c));
            } else {
                tokens -= c - charged;
            }
            let ttl = bucket_ttl(b - tokens.min(0.0), p, l);
            Some((State::TokenBucket { tokens, ts: now }, ttl))
        }
        Algorithm::Gcra => {
            let t = p / l;
            let tau = b * t;
            let (mut backlog, now) = backlog_at(state, now);
            if c < charged {
                backlog = 0.0_f64.max(backlog - (charged - c) * t);
            } else {
                backlog += (c - charged) * t;
            }
            let ttl = whole_ms(tau.max(backlog) + TTL_MARGIN_MS);
            Some((State::Gcra { backlog, ts: now }, ttl))
        }
        Algorithm::LeakyBucket => {
            let (mut level, now) = level_at(l, p, state, now);
            if c < charged {
                level = 0.0_f64.max(level - (charged - c));
            } else {
                level += c - charged;
            }
            let ttl = bucket_ttl(b.max(level), p, l);
            Some((State::LeakyBucket { level, ts: now }, ttl))
        }
        Algorithm::FixedWindow => {
            let (mut count, window, now) = window_at(p, state, now);
            if c < charged {
                if mark != window {
                    return None;
                }
                count = 0.0_f64.max(count - (charged - c));
            } else {
                count += c - charged;
            }
            let ttl = whole_ms((window + 1.0) * p - now + TTL_MARGIN_MS);
            Some((
                State::FixedWindow {
                    count,
                    window,
                    ts: now,
                },
                ttl,
            ))
        }
        Algorithm::SlidingWindow => {
            let (mut prev, mut cur, w, now) = sliding_at(p, state, now);
            if c < charged {
                if mark == w {
                    cur = 0.0_f64.max(cur - (charged - c));
                } else if mark == w - 1.0 {
                    prev = 0.0_f64.max(prev - (charged - c));
                } else {
                    return None;
                }
            } else {
                cur += c - charged;
            }
            let ttl = whole_ms(p - (now - w * p) + p + TTL_MARGIN_MS);
            let state = State::SlidingWindow {
                prev,
                cur,
                window: w,
                ts: now,
            };
            Some((state, ttl))
        }
        Algorithm::SlidingLog => {
            let (mut entries, now) = log_at(p, state, now);
            match entries
                .iter_mut()
                .find(|(time, logged)| *time == mark && *logged == charged)
            {
                Some(entry) => entry.1 = c,
                None if c > charged => entries.push_back((now, c - charged)),
                None => return None,
            }
            let ttl = whole_ms(p + TTL_MARGIN_MS);
            Some((State::SlidingLog { entries }, ttl))
        }
        Algorithm::Concurrency => None,
    }
}

/// One rule of a multi-rule check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuleInput<'a> {
    pub spec: &'a LimitSpec,
    pub cost: u64,
    /// A shadow rule is evaluated and reported but never blocks the request.
    pub shadow: bool,
}

/// The outcome of a multi-rule check.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckResult {
    /// Whether every enforced rule admits the request.
    pub allowed: bool,
    pub decisions: Vec<Decision>,
    /// Per rule: the state to store, if any, and its TTL.
    pub writes: Vec<Option<(State, u64)>>,
}

/// Evaluates several rules for one request atomically: every decision is computed first,
/// and consumption is committed only when every enforced rule admits the request. A
/// shadow rule is consumed along with the others when it too admits; a denial consumes
/// nothing except for the rules with `penalty`.
pub fn check_all(rules: &[RuleInput<'_>], states: &[Option<&State>], now: i64) -> CheckResult {
    let evaluations: Vec<Evaluation> = rules
        .iter()
        .zip(states)
        .map(|(rule, state)| evaluate(rule.spec, *state, now, rule.cost))
        .collect();
    let allowed = rules
        .iter()
        .zip(&evaluations)
        .all(|(rule, eval)| rule.shadow || eval.decision.allowed());
    let writes = rules
        .iter()
        .zip(&evaluations)
        .map(|(rule, eval)| {
            let state = if allowed {
                eval.admitted.clone()
            } else if !rule.shadow && !eval.decision.allowed() {
                eval.penalized.clone()
            } else {
                None
            };
            state.map(|s| (s, eval.ttl_ms))
        })
        .collect();
    CheckResult {
        allowed,
        decisions: evaluations.into_iter().map(|e| e.decision).collect(),
        writes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so the model's tests need no dependency.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, below: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % below
        }
    }

    fn run(spec: &LimitSpec, steps: &[(i64, u64)]) -> Vec<Decision> {
        let mut state = None;
        let mut out = Vec::new();
        for &(now, cost) in steps {
            let eval = evaluate(spec, state.as_ref(), now, cost);
            if let Some(s) = eval.admitted.clone().or(eval.penalized.clone()) {
                state = Some(s);
            }
            out.push(eval.decision);
        }
        out
    }

    #[test]
    fn token_bucket_refills_continuously() {
        let spec = LimitSpec::new(Algorithm::TokenBucket, 10, 1000);
        let d = run(&spec, &[(0, 10), (0, 1), (250, 2), (250, 1)]);
        assert_eq!(
            d.iter().map(Decision::allowed).collect::<Vec<_>>(),
            [true, false, true, false]
        );
        assert_eq!(d[1].retry_after_ms, 100);
        assert_eq!(d[2].remaining, 0.5);
    }

    #[test]
    fn sliding_window_weights_the_previous_window() {
        let spec = LimitSpec::new(Algorithm::SlidingWindow, 10, 1000);
        // 10 in window 0; at 1250 the previous window still counts for 75%: 7.5 used.
        let d = run(&spec, &[(500, 10), (1250, 2), (1250, 1)]);
        assert!(d[0].allowed());
        assert!(d[1].allowed(), "{:?}", d[1]);
        assert_eq!(d[1].remaining, 0.5);
        assert!(!d[2].allowed());
    }

    #[test]
    fn gcra_and_token_bucket_admit_the_same_requests() {
        let mut rng = Lcg(42);
        for _ in 0..200 {
            let limit = 1 + rng.next(20);
            let period = 1 + rng.next(5000);
            let burst = Some(1 + rng.next(30));
            let tb = LimitSpec {
                burst,
                ..LimitSpec::new(Algorithm::TokenBucket, limit, period)
            };
            let gcra = LimitSpec {
                algorithm: Algorithm::Gcra,
                ..tb
            };
            let mut now = 0;
            let steps: Vec<(i64, u64)> = (0..30)
                .map(|_| {
                    now += rng.next(period) as i64;
                    (now, 1 + rng.next(3))
                })
                .collect();
            let a: Vec<bool> = run(&tb, &steps).iter().map(Decision::allowed).collect();
            let b: Vec<bool> = run(&gcra, &steps).iter().map(Decision::allowed).collect();
            // Equal in exact arithmetic; rounding may differ on exact boundaries only.
            let differ = a.iter().zip(&b).filter(|(x, y)| x != y).count();
            assert!(differ <= 1, "{tb:?} {steps:?}\n{a:?}\n{b:?}");
        }
    }

    #[test]
    fn waiting_retry_after_is_enough_to_be_admitted() {
        let mut rng = Lcg(7);
        for algorithm in Algorithm::ALL {
            for _ in 0..300 {
                let spec = LimitSpec::new(algorithm, 1 + rng.next(10), 1 + rng.next(10_000));
                let mut state = None;
                let mut now = 1_000_000;
                for _ in 0..20 {
                    now += rng.next(spec.period_ms / 2 + 1) as i64;
                    let cost = 1 + rng.next(spec.capacity());
                    let eval = evaluate(&spec, state.as_ref(), now, cost);
                    if let Some(s) = eval.admitted.clone() {
                        state = Some(s);
                        continue;
                    }
                    let retry = eval.decision.retry_after_ms as i64;
                    assert!(retry > 0, "{spec:?}");
                    let later = evaluate(&spec, state.as_ref(), now + retry, cost);
                    assert!(
                        later.decision.allowed(),
                        "{spec:?} at {now}+{retry}: {:?}",
                        later.decision
                    );
                }
            }
        }
    }

    /// Charges `estimate` at `now` on an empty state and settles it at `cost` at `later`;
    /// the state after each.
    fn reserve_then_settle(
        spec: &LimitSpec,
        estimate: u64,
        now: i64,
        cost: u64,
        later: i64,
    ) -> (State, Option<State>) {
        let charged = evaluate(spec, None, now, estimate)
            .admitted
            .expect("admitted");
        let mark = charge_mark(&charged);
        let settled = settle(spec, Some(&charged), estimate as f64, mark, later, cost);
        (charged, settled.map(|(state, _)| state))
    }

    fn capacity_left(spec: &LimitSpec, state: &State, now: i64) -> f64 {
        let d = evaluate(spec, Some(state), now, 1).decision;
        d.remaining + if d.allowed() { 1.0 } else { 0.0 }
    }

    #[test]
    fn settling_30_of_100_gives_exactly_70_back_on_every_algorithm() {
        for algorithm in Algorithm::RATES {
            let spec = LimitSpec::new(algorithm, 1_000, 60_000);
            let now = 1_800_000_000_000;
            let (charged, settled) = reserve_then_settle(&spec, 100, now, 30, now + 10);
            let settled = settled.expect("a refund writes");
            let gained =
                capacity_left(&spec, &settled, now + 10) - capacity_left(&spec, &charged, now + 10);
            assert!((gained - 70.0).abs() < 1e-9, "{algorithm:?}: {gained}");
        }
    }

    #[test]
    fn settling_at_the_estimate_changes_nothing_and_a_refund_never_passes_capacity() {
        for algorithm in Algorithm::ALL {
            let spec = LimitSpec::new(algorithm, 10, 1_000);
            let (_, same) = reserve_then_settle(&spec, 5, 0, 5, 1);
            assert_eq!(same, None, "{algorithm:?}");
            // Long after, the bucket is full again: a refund adds nothing.
            let (_, late) = reserve_then_settle(&spec, 5, 0, 0, 1_000_000);
            if let Some(state) = late {
                assert_eq!(
                    capacity_left(&spec, &state, 1_000_000),
                    10.0,
                    "{algorithm:?}"
                );
            }
        }
    }

    #[test]
    fn an_overrun_is_a_debt_that_a_penalty_does_not_forgive() {
        for algorithm in [
            Algorithm::TokenBucket,
            Algorithm::Gcra,
            Algorithm::LeakyBucket,
        ] {
            let spec = LimitSpec {
                penalty: true,
                ..LimitSpec::new(algorithm, 10, 1_000)
            };
            let (_, debt) = reserve_then_settle(&spec, 10, 0, 30, 0);
            let debt = debt.expect("an overrun writes");
            let denied = evaluate(&spec, Some(&debt), 0, 1);
            // Twenty owed, one asked: 2.1 s at ten a second.
            assert_eq!(denied.decision.retry_after_ms, 2_100, "{algorithm:?}");
            let penalised = denied.penalized.expect("penalty");
            assert_eq!(
                evaluate(&spec, Some(&penalised), 0, 1)
                    .decision
                    .retry_after_ms,
                2_100,
                "{algorithm:?}: the penalty forgave the debt"
            );
            assert!(denied.ttl_ms >= 3_000, "{algorithm:?}: {}", denied.ttl_ms);
            assert!(evaluate(&spec, Some(&debt), 2_100, 1).decision.allowed());
        }
    }

    #[test]
    fn concurrency_holds_at_most_the_limit_until_a_release_or_the_lease_ends() {
        let spec = LimitSpec::new(Algorithm::Concurrency, 3, 1_000);
        let mut state: Option<State> = None;
        for (i, at) in [0, 100, 200].into_iter().enumerate() {
            let eval = evaluate(&spec, state.as_ref(), at, 1);
            assert!(eval.decision.allowed(), "lease {i}");
            assert_eq!(eval.decision.remaining, 2.0 - i as f64);
            let mut taken = eval.admitted.expect("admitted");
            name_leases(&mut taken, &format!("l{i}"));
            state = Some(taken);
        }
        // Full: the next waits for the first lease to end at 1000.
        let denied = evaluate(&spec, state.as_ref(), 500, 1);
        assert_eq!(denied.decision.verdict, Verdict::Deny);
        assert_eq!(denied.decision.retry_after_ms, 500);
        assert_eq!(denied.admitted, None);
        // Two slots wait for two leases; more than the limit never fits.
        assert_eq!(
            evaluate(&spec, state.as_ref(), 500, 2)
                .decision
                .retry_after_ms,
            600
        );
        assert_eq!(
            evaluate(&spec, state.as_ref(), 500, 4).decision.verdict,
            Verdict::NeverFits
        );
        // A release frees its slot at once; an unknown lease changes nothing.
        let state = state.expect("held");
        assert_eq!(release(&state, "nope", 1_100.0), None);
        assert_eq!(
            release(&state, "l1", 1_000.0),
            None,
            "another lease of the id"
        );
        let released = release(&state, "l1", 1_100.0).expect("held");
        assert!(evaluate(&spec, Some(&released), 500, 1).decision.allowed());
        // Unreleased, a lease ends by itself after the period.
        assert!(evaluate(&spec, Some(&state), 1_000, 1).decision.allowed());
    }

    #[test]
    fn a_full_check_commits_nothing_when_one_rule_denies() {
        let open = LimitSpec::new(Algorithm::FixedWindow, 100, 1000);
        let tight = LimitSpec::new(Algorithm::FixedWindow, 1, 1000);
        let rules = [
            RuleInput {
                spec: &open,
                cost: 1,
                shadow: false,
            },
            RuleInput {
                spec: &tight,
                cost: 2,
                shadow: false,
            },
        ];
        let result = check_all(&rules, &[None, None], 0);
        assert!(!result.allowed);
        assert_eq!(result.writes, vec![None, None]);
    }
}
