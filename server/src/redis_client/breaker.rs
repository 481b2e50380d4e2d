//! Circuit breakers, one per Redis node (per master on a Cluster).
//!
//! A breaker counts consecutive transient failures (timeouts, refused or dropped
//! connections) of the calls to its node. After [`OPEN_AFTER`] of them it opens: calls are
//! refused at once with [`super::Error::BreakerOpen`], so each check gets its rule's failure
//! mode without waiting for a deadline. Every [`PROBE_EVERY`] one call is let through as the
//! probe; when Redis answers it the breaker closes. An answer that is an error of the command
//! itself (a script error) still proves the node is up. Each opening and closing is logged
//! once.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Consecutive transient failures that open a breaker.
pub const OPEN_AFTER: u32 = 5;
/// How often an open breaker lets one call through to test the node.
pub const PROBE_EVERY: Duration = Duration::from_millis(500);

/// Whether a call may go to the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// The breaker is closed.
    Closed,
    /// The breaker is open and this call is its probe.
    Probe,
    /// The breaker is open: answer without calling.
    Refused,
}

#[derive(Debug)]
struct State {
    failures: u32,
    open: bool,
    probing: bool,
    next_probe: Instant,
}

/// The breaker of one node.
#[derive(Debug)]
pub struct Breaker {
    node: String,
    state: Mutex<State>,
}

impl Breaker {
    pub fn new(node: &str) -> Self {
        Self {
            node: node.to_owned(),
            state: Mutex::new(State {
                failures: 0,
                open: false,
                probing: false,
                next_probe: Instant::now(),
            }),
        }
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn is_open(&self) -> bool {
        self.state().open
    }

    /// Asks to call the node at `now`.
    pub fn pass(&self, now: Instant) -> Pass {
        let mut s = self.state();
        if !s.open {
            Pass::Closed
        } else if !s.probing && now >= s.next_probe {
            s.probing = true;
            Pass::Probe
        } else {
            Pass::Refused
        }
    }

    /// Records how a call that was let through ended: `reached` when the node answered
    /// (with a reply or an error of its own), not when it timed out or the connection failed.
    /// `calls`: how many calls it stands for (a batch of checks counts as its checks).
    pub fn record(&self, pass: Pass, reached: bool, calls: u32, now: Instant) {
        let mut s = self.state();
        if pass == Pass::Probe {
            s.probing = false;
        }
        if reached {
            if s.open {
                tracing::info!(node = %self.node, "Redis answers again; circuit breaker closed");
            }
            s.failures = 0;
            s.open = false;
            return;
        }
        s.failures = s.failures.saturating_add(calls.max(1));
        if s.open {
            s.next_probe = now + PROBE_EVERY;
        } else if s.failures >= OPEN_AFTER {
            s.open = true;
            s.next_probe = now + PROBE_EVERY;
            tracing::warn!(
                node = %self.node,
                failures = s.failures,
                "Redis keeps failing; circuit breaker open: checks get their failure mode at once, a probe every {PROBE_EVERY:?}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_failures_opens_it_and_one_probe_closes_it() {
        let b = Breaker::new("n");
        let t0 = Instant::now();
        for i in 0..OPEN_AFTER {
            assert_eq!(b.pass(t0), Pass::Closed, "call {i}");
            b.record(Pass::Closed, false, 1, t0);
        }
        assert!(b.is_open());
        assert_eq!(b.pass(t0), Pass::Refused);
        // One probe per interval, however many calls ask.
        let later = t0 + PROBE_EVERY;
        assert_eq!(b.pass(later), Pass::Probe);
        assert_eq!(b.pass(later), Pass::Refused);
        b.record(Pass::Probe, false, 1, later);
        assert!(b.is_open());
        assert_eq!(b.pass(later), Pass::Refused, "the next probe waits");
        let again = later + PROBE_EVERY;
        assert_eq!(b.pass(again), Pass::Probe);
        b.record(Pass::Probe, true, 1, again);
        assert!(!b.is_open());
        assert_eq!(b.pass(again), Pass::Closed);
    }

    #[test]
    fn an_answer_between_failures_resets_the_count() {
        let b = Breaker::new("n");
        let t0 = Instant::now();
        for _ in 0..OPEN_AFTER - 1 {
            b.record(Pass::Closed, false, 1, t0);
        }
        b.record(Pass::Closed, true, 1, t0);
        for _ in 0..OPEN_AFTER - 1 {
            b.record(Pass::Closed, false, 1, t0);
        }
        assert!(!b.is_open());
    }
}
