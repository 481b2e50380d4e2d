//! The most denied subjects of each tenant's rules, in bounded memory, never as metric labels.
//!
//! A [`Summary`] is a frequent-items summary (Misra and Gries's, in the mergeable form of
//! Agarwal et al., "Mergeable Summaries", 2012) of one rule's denials: at most [`CAPACITY`]
//! subjects with a count each, the number of denials it has seen, and `error`, the most any
//! count can be below the truth. When it holds more than its capacity, it takes the
//! (capacity + 1)-th largest count `c` off every count, drops those left at zero or below, and
//! adds `c` to `error`. So for every subject:
//!
//! - its count is never above its true count, and at most `error` below it (a subject not in
//!   the summary counts 0);
//! - `error` is at most `denials / (CAPACITY + 1)`: each reduction takes `c` from at least
//!   `CAPACITY + 1` counts, and no more than every denial can be taken away.
//!
//! Two summaries merge by adding their counts, denials and errors and reducing again; the
//! bounds hold for the merge with the sum of the denials. Each instance keeps one summary per
//! tenant and rule for the current second ([`crate::telemetry::Recorder`]); once a second
//! the dashboards' task merges it into the minute's in the series store (`lua/top_denied.lua`
//! on Redis, [`Summary::merge`] in memory), so the fleet's instances meet there. A range is
//! the sum of its minutes' summaries, with the sum of their errors.

use std::collections::HashMap;

/// Subjects a summary keeps: the error is below 1% of the denials it has seen.
pub const CAPACITY: usize = 100;

/// One rule's denials by subject (see the module's header). The subject `""` stands for the
/// rule's one tenant-wide bucket.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// The rule's name when it was last counted.
    pub policy: String,
    pub counts: HashMap<String, u64>,
    /// Every denial added, kept or not.
    pub denials: u64,
    /// The most any count is below the true count.
    pub error: u64,
}

impl Summary {
    /// Counts one denial of `subject`. Allocates only for a subject not yet held (and the
    /// rule's name on the first denial).
    pub fn add(&mut self, policy: &str, subject: &str) {
        if self.policy != policy {
            self.policy = policy.to_owned();
        }
        self.denials += 1;
        match self.counts.get_mut(subject) {
            Some(n) => *n += 1,
            None => {
                // Reduced only when it has grown to twice its capacity, so that a crowd of
                // one-off subjects costs a sort every `CAPACITY` denials, not one each.
                if self.counts.len() >= 2 * CAPACITY {
                    self.reduce();
                }
                self.counts.insert(subject.to_owned(), 1);
            }
        }
    }

    /// Adds `other` into this summary, and reduces it to its capacity.
    pub fn merge(&mut self, other: &Summary) {
        self.sum(other);
        self.reduce();
    }

    /// Keeps at most [`CAPACITY`] subjects: takes the next largest count off every count.
    pub fn reduce(&mut self) {
        if self.counts.len() <= CAPACITY {
            return;
        }
        let mut values: Vec<u64> = self.counts.values().copied().collect();
        values.select_nth_unstable_by(CAPACITY, |a, b| b.cmp(a));
        let cut = values[CAPACITY];
        self.counts.retain(|_, n| {
            *n = n.saturating_sub(cut);
            *n > 0
        });
        self.error += cut;
    }

    /// Adds `other` without reducing: the exact sum of two summaries (a range's minutes).
    pub fn sum(&mut self, other: &Summary) {
        if !other.policy.is_empty() {
            self.policy.clone_from(&other.policy);
        }
        for (subject, n) in &other.counts {
            *self.counts.entry(subject.clone()).or_default() += n;
        }
        self.denials += other.denials;
        self.error += other.error;
    }

    /// The `n` largest counts, largest first (ties by subject).
    pub fn top(&self, n: usize) -> Vec<(&str, u64)> {
        let mut all: Vec<(&str, u64)> = self.counts.iter().map(|(s, c)| (s.as_str(), *c)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        all.truncate(n);
        all
    }
}

/// Summaries by tenant, then by rule id.
pub type ByTenant = HashMap<String, HashMap<String, Summary>>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A skewed load: subject `i` (from 0) is denied about `weight / (i + 1)` times, plus a
    /// crowd of subjects denied once each, in an interleaved order.
    fn skewed(heavy: usize, weight: u64, crowd: usize) -> Vec<String> {
        let mut out = Vec::new();
        for i in 0..heavy {
            for _ in 0..weight / (i as u64 + 1) {
                out.push(format!("heavy-{i}"));
            }
        }
        for i in 0..crowd {
            out.push(format!("once-{i}"));
        }
        // A fixed shuffle (a linear congruential generator): reproducible, and no subject's
        // denials arrive together.
        let mut state: u64 = 42;
        for i in (1..out.len()).rev() {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let j = (state >> 33) as usize % (i + 1);
            out.swap(i, j);
        }
        out
    }

    fn truth(load: &[String]) -> HashMap<&str, u64> {
        let mut t = HashMap::new();
        for s in load {
            *t.entry(s.as_str()).or_default() += 1;
        }
        t
    }

    fn within_bounds(summary: &Summary, load: &[String]) {
        let truth = truth(load);
        assert_eq!(summary.denials, load.len() as u64);
        assert!(summary.counts.len() <= 2 * CAPACITY);
        assert!(
            summary.error <= summary.denials / (CAPACITY as u64 + 1),
            "error {} over {} denials",
            summary.error,
            summary.denials
        );
        for (subject, true_count) in &truth {
            let count = summary.counts.get(*subject).copied().unwrap_or(0);
            assert!(count <= *true_count, "{subject}: {count} > {true_count}");
            assert!(
                count + summary.error >= *true_count,
                "{subject}: {count} + {} < {true_count}",
                summary.error
            );
        }
    }

    #[test]
    fn one_summary_never_overcounts_and_misses_by_at_most_its_error() {
        let load = skewed(50, 2_000, 3_000);
        let mut summary = Summary::default();
        for s in &load {
            summary.add("p", s);
        }
        within_bounds(&summary, &load);
        assert!(summary.error > 0, "the crowd made it reduce");
        // The true top 10 are the ten heaviest, and they are the summary's top 10.
        let top: Vec<&str> = summary.top(10).into_iter().map(|(s, _)| s).collect();
        let expected: Vec<String> = (0..10).map(|i| format!("heavy-{i}")).collect();
        assert_eq!(top, expected);
    }

    #[test]
    fn merged_seconds_and_instances_keep_the_bounds_of_the_whole_load() {
        // Three instances, each summarising its share second by second; the minute merges
        // every second's summary, as the series store does.
        let load = skewed(40, 3_000, 5_000);
        let mut minute = Summary::default();
        for (second, chunk) in load.chunks(700).enumerate() {
            for instance in 0..3 {
                let mut this_second = Summary::default();
                for s in chunk.iter().skip(instance).step_by(3) {
                    this_second.add("p", s);
                }
                minute.merge(&this_second);
                assert!(minute.counts.len() <= CAPACITY, "second {second}");
            }
        }
        within_bounds(&minute, &load);
        // A range sums minutes without reducing: the bounds still hold with the summed error.
        let mut range = minute.clone();
        range.sum(&minute);
        let doubled: Vec<String> = load.iter().chain(&load).cloned().collect();
        within_bounds(&range, &doubled);
        let top: Vec<&str> = range.top(10).into_iter().map(|(s, _)| s).collect();
        let expected: Vec<String> = (0..10).map(|i| format!("heavy-{i}")).collect();
        assert_eq!(top, expected);
    }

    #[test]
    fn a_summary_under_its_capacity_is_exact() {
        let mut s = Summary::default();
        for subject in ["a", "b", "a", "", "a"] {
            s.add("p", subject);
        }
        assert_eq!(s.error, 0);
        assert_eq!(s.top(2), vec![("a", 3), ("", 1)]);
        assert_eq!(s.denials, 5);
    }
}
