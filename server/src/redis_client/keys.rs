//! Every Redis key and channel Sluice uses is built here: buckets (`sl`), idempotency records
//! (`slr` for a caller's request id, `slq` for the calls the server makes), active-key
//! HyperLogLogs (`slk`), the live-key index of the quota (`slb`), the dashboards' fleet
//! series (`sld`), and the channel of admin changes. All of a tenant's keys carry the hash
//! tag `{<tenant>}`, so on a Redis Cluster they live in one slot and one script can touch them
//! all atomically; the fleet's series share the tag `{fleet}` for the same reason.

use sha2::{Digest, Sha256};

/// Subjects up to this many bytes are kept readable in the key; longer ones are hashed.
pub const MAX_PLAIN_SUBJECT: usize = 64;

/// The bucket of one rule for one subject (`None`: the rule's tenant-wide bucket):
/// `sl:{<tenant>}:<rule>:<subject part>`.
///
/// The subject part is `*` for the tenant-wide bucket, `s:<subject>` for a short subject of
/// visible ASCII, and `h:<32 hex digits of SHA-256>` otherwise, so keys stay bounded and
/// the three forms can never collide.
pub fn bucket(tenant: &str, rule: &str, subject: Option<&str>) -> String {
    build_bucket(tenant, rule, None, subject)
}

/// [`bucket`] of [`rule_part`]`(rule_id, algorithm)`, built in one allocation (a check builds
/// one per rule).
pub fn rule_bucket(
    tenant: &str,
    rule_id: &str,
    algorithm: app::rules::Algorithm,
    subject: Option<&str>,
) -> String {
    build_bucket(tenant, rule_id, Some(algorithm_tag(algorithm)), subject)
}

fn build_bucket(tenant: &str, rule: &str, tag: Option<&str>, subject: Option<&str>) -> String {
    let plain =
        subject.filter(|s| s.len() <= MAX_PLAIN_SUBJECT && s.bytes().all(|b| b.is_ascii_graphic()));
    let mut key = String::with_capacity(
        10 + tenant.len()
            + rule.len()
            + tag.map_or(0, str::len)
            + subject.map_or(1, |_| 2 + MAX_PLAIN_SUBJECT),
    );
    key.push_str("sl:{");
    key.push_str(tenant);
    key.push_str("}:");
    key.push_str(rule);
    if let Some(tag) = tag {
        key.push('.');
        key.push_str(tag);
    }
    key.push(':');
    match (subject, plain) {
        (None, _) => key.push('*'),
        (Some(_), Some(s)) => {
            key.push_str("s:");
            key.push_str(s);
        }
        (Some(s), None) => {
            key.push_str("h:");
            key.push_str(&short_hash(s));
        }
    }
    key
}

/// The rule part of a bucket key: the rule's id and its algorithm. Editing a rule's limit
/// keeps its buckets; changing its algorithm starts new ones, because each algorithm stores
/// a different state (and `sliding_log` a different Redis type) under its key.
pub fn rule_part(rule_id: &str, algorithm: app::rules::Algorithm) -> String {
    format!("{rule_id}.{}", algorithm_tag(algorithm))
}

fn algorithm_tag(algorithm: app::rules::Algorithm) -> &'static str {
    match algorithm {
        app::rules::Algorithm::TokenBucket => "tb",
        app::rules::Algorithm::Gcra => "gcra",
        app::rules::Algorithm::LeakyBucket => "lb",
        app::rules::Algorithm::FixedWindow => "fw",
        app::rules::Algorithm::SlidingWindow => "sw",
        app::rules::Algorithm::SlidingLog => "sl",
        app::rules::Algorithm::Concurrency => "cc",
    }
}

/// The rule part of a bucket counted under a limit the request set (Envoy's per-descriptor
/// override, on a `fixed_window` rule): one window count per period, whatever limit each
/// request compares it with, as envoyproxy/ratelimit counts. Keyed by the period alone, a
/// caller cannot mint fresh buckets by varying the limit: a rule has at most one per unit.
pub fn override_part(rule_part: &str, period_ms: u64) -> String {
    format!("{rule_part}~{period_ms}")
}

/// How many minutes of active-key HyperLogLogs make up "active": a bucket is active when it
/// was checked in the current minute or the five before it, so in the last 5 to 6 minutes.
pub const ACTIVE_WINDOW_MINUTES: i64 = 6;

/// The active-key HyperLogLog of one tenant for one minute (Unix ms / 60,000):
/// `slk:{<tenant>}:<minute>`. `lua/check.lua` adds every bucket it checks.
pub fn active(tenant: &str, minute: i64) -> String {
    // Written piece by piece: every Redis check names this key and the live index, and
    // `format!` cost the two about 1,900 instructions a check (`scripts/check-instructions
    // --redis`).
    let mut digits = itoa::Buffer::new();
    tagged("slk:", tenant, &[":", digits.format(minute)])
}

/// `<prefix>{<tenant>}<tail…>`, one allocation.
fn tagged(prefix: &str, tenant: &str, tail: &[&str]) -> String {
    let mut key = String::with_capacity(
        prefix.len() + tenant.len() + 2 + tail.iter().map(|t| t.len()).sum::<usize>(),
    );
    key.push_str(prefix);
    key.push('{');
    key.push_str(tenant);
    key.push('}');
    for part in tail {
        key.push_str(part);
    }
    key
}

/// The HyperLogLogs whose union is the tenant's active keys at `now_ms`.
pub fn active_window(tenant: &str, now_ms: i64) -> Vec<String> {
    let minute = now_ms.div_euclid(60_000);
    (0..ACTIVE_WINDOW_MINUTES)
        .map(|back| active(tenant, minute - back))
        .collect()
}

/// The tenant's live-key index: a sorted set of its buckets and request_id records, scored
/// by when each expires at the earliest, through which `lua/check.lua` keeps the tenant
/// within its quota of live buckets: `slb:{<tenant>}`.
pub fn live_index(tenant: &str) -> String {
    tagged("slb:", tenant, &[])
}

/// A reservation of `/v1/reserve`: what each rule was charged, for `/v1/settle`:
/// `slv:{<tenant>}:<id>`.
pub fn reservation(tenant: &str, id: &str) -> String {
    format!("slv:{{{tenant}}}:{id}")
}

/// A lease of a `concurrency` rule: the bucket members it holds, for `/v1/release`:
/// `slc:{<tenant>}:<id>`.
pub fn lease(tenant: &str, id: &str) -> String {
    format!("slc:{{{tenant}}}:{id}")
}

/// A lease id for a request with a caller's `request_id` (so a retry names the same lease),
/// else at random; as [`reservation_id`].
pub fn lease_id(reply_key: Option<&str>) -> String {
    match reply_key {
        Some(key) => short_hash(&format!("lease\n{key}")),
        None => hex::encode(rand::random::<[u8; 16]>()),
    }
}

/// Whether `id` has the form of a reservation id: 32 lowercase hex digits.
pub fn is_reservation_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A reservation id: for a request with a caller's `request_id`, derived from its idempotency
/// record's key (`reply_key`), so a retry answered from that record names the same
/// reservation; otherwise 32 random hex digits.
pub fn reservation_id(reply_key: Option<&str>) -> String {
    match reply_key {
        Some(key) => short_hash(&format!("reservation\n{key}")),
        None => hex::encode(rand::random::<[u8; 16]>()),
    }
}

/// The idempotency record of one request id: `slr:{<tenant>}:<hash of the id>`.
pub fn request(tenant: &str, request_id: &str) -> String {
    format!("slr:{{{tenant}}}:{}", short_hash(request_id))
}

/// How long one slot of [`CallRecord`]s lasts: the calls a tenant's checks make in one slot
/// share one hash.
pub const CALL_SLOT_MS: i64 = 250;

/// The idempotency record of one limiter call the server makes without a caller's
/// `request_id`: field [`CallRecord::field`] (32 random hex digits) of the hash
/// `slq:{<tenant>}:<slot>:<ttl ms>`, which every such call of the tenant in the same
/// [`CALL_SLOT_MS`] that keeps its record as long shares. A key of its own per call made Redis
/// create and expire one key per check, and its expiry cycle then stalled every client for up
/// to 25 ms (docs/BENCHMARKS.md); one hash a slot is a few keys a second however busy the
/// tenant. The TTL in the name means every write to a hash asks for the same TTL, so the
/// script sets it with one plain `PEXPIRE`, which can only push the expiry later: an instance
/// that keeps its records a shorter time writes to a hash of its own rather than cutting
/// another's records short.
#[derive(Debug)]
pub struct CallRecord {
    pub key: String,
    field: [u8; 32],
}

impl CallRecord {
    /// A fresh record for a call made at `now_ms` (the slot only groups records: any clock
    /// will do), kept `ttl_ms`.
    pub fn new(tenant: &str, now_ms: i64, ttl_ms: i64) -> Self {
        let mut slot = itoa::Buffer::new();
        let mut ttl = itoa::Buffer::new();
        let slot = slot.format(now_ms.div_euclid(CALL_SLOT_MS));
        let ttl = ttl.format(ttl_ms);
        let mut key = String::with_capacity(8 + tenant.len() + slot.len() + ttl.len());
        key.push_str("slq:{");
        key.push_str(tenant);
        key.push_str("}:");
        key.push_str(slot);
        key.push(':');
        key.push_str(ttl);
        let mut field = [0_u8; 32];
        // 16 bytes fill exactly 32 hex digits, so this cannot fail.
        let _ = hex::encode_to_slice(rand::random::<[u8; 16]>(), &mut field);
        Self { key, field }
    }

    /// This call's field in the hash.
    pub fn field(&self) -> &str {
        // Only ASCII hex digits are ever written.
        std::str::from_utf8(&self.field).unwrap_or_default()
    }
}

fn short_hash(s: &str) -> String {
    let digest = Sha256::digest(s.as_bytes());
    hex::encode(&digest[..16])
}

/// The Redis Cluster slot of a key (CRC16 of its hash tag, modulo 16384), to check that a
/// tenant's keys share one slot.
pub fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    crc16_xmodem(tagged) % 16384
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The dashboards' sums of one second (Unix seconds) over the fleet: `sld:{fleet}:s:<second>`.
pub fn fleet_second(second: i64) -> String {
    format!("sld:{{fleet}}:s:{second}")
}

/// The dashboards' sums of one minute (Unix minutes): `sld:{fleet}:m:<minute>`.
pub fn fleet_minute(minute: i64) -> String {
    format!("sld:{{fleet}}:m:{minute}")
}

/// The ids of the rules of `tenant` with denials by subject in one minute (Unix minutes):
/// `sld:{fleet}:top:<tenant>:<minute>` (see `lua/top_denied.lua`).
pub fn fleet_top(tenant: &str, minute: i64) -> String {
    format!("sld:{{fleet}}:top:{tenant}:{minute}")
}

/// One rule's summary of denials by subject in one minute:
/// `sld:{fleet}:top:<tenant>:<minute>:<rule>`.
pub fn fleet_top_rule(tenant: &str, minute: i64, rule: &str) -> String {
    format!("sld:{{fleet}}:top:{tenant}:{minute}:{rule}")
}

/// The instances' seconds of denials by subject already merged into a minute:
/// `sld:{fleet}:topw:<minute>`.
pub fn fleet_top_marks(minute: i64) -> String {
    format!("sld:{{fleet}}:topw:{minute}")
}

/// The sorted set of instances by last heartbeat.
pub const ALIVE: &str = "sld:{fleet}:alive";

/// One instance's last heartbeat: `sld:{fleet}:beat:<instance id>`.
pub fn beat(instance: &str) -> String {
    format!("sld:{{fleet}}:beat:{instance}")
}

/// The pub/sub channel of admin changes (Redis Cluster forwards it to every node).
pub const CHANGES: &str = "sluice:changes";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_tenant_hash_tag() {
        assert_eq!(bucket("t1", "r1", None), "sl:{t1}:r1:*");
        assert_eq!(bucket("t1", "r1", Some("user-42")), "sl:{t1}:r1:s:user-42");
        assert!(request("t1", "req-1").starts_with("slr:{t1}:"));
        let call = CallRecord::new("t1", 1_000, 8_000);
        assert_eq!(call.key, "slq:{t1}:4:8000");
        assert_eq!(
            CallRecord::new("t1", 1_249, 8_000).key,
            call.key,
            "one slot"
        );
        assert_eq!(CallRecord::new("t1", 1_250, 8_000).key, "slq:{t1}:5:8000");
        assert_eq!(CallRecord::new("t1", 1_000, 1_000).key, "slq:{t1}:4:1000");
        assert_eq!(CallRecord::new("t1", -1, 8_000).key, "slq:{t1}:-1:8000");
        assert_eq!(call.field().len(), 32);
        assert!(call.field().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(call.field(), CallRecord::new("t1", 1_000, 8_000).field());
    }

    #[test]
    fn each_algorithm_of_a_rule_has_its_own_buckets() {
        use app::rules::Algorithm;
        let parts: std::collections::HashSet<String> = Algorithm::ALL
            .into_iter()
            .map(|a| rule_part("r", a))
            .collect();
        assert_eq!(parts.len(), Algorithm::ALL.len());
        assert_eq!(rule_part("r", Algorithm::Gcra), "r.gcra");
    }

    #[test]
    fn a_rule_bucket_is_the_bucket_of_its_rule_part() {
        let long = "é".repeat(100);
        for algorithm in app::rules::Algorithm::ALL {
            for subject in [None, Some("user-42"), Some("a b"), Some(long.as_str())] {
                assert_eq!(
                    rule_bucket("t1", "r1", algorithm, subject),
                    bucket("t1", &rule_part("r1", algorithm), subject)
                );
            }
        }
    }

    #[test]
    fn keys_written_piece_by_piece_read_as_their_documented_forms() {
        for (tenant, minute) in [("t", 0_i64), ("acme-01", 29_612_345), ("x", -1)] {
            assert_eq!(active(tenant, minute), format!("slk:{{{tenant}}}:{minute}"));
            assert_eq!(live_index(tenant), format!("slb:{{{tenant}}}"));
        }
    }

    #[test]
    fn long_or_unusual_subjects_are_hashed_to_a_bounded_length() {
        let long = "x".repeat(1000);
        let key = bucket("t", "r", Some(&long));
        assert!(key.starts_with("sl:{t}:r:h:"), "{key}");
        assert_eq!(key.len(), "sl:{t}:r:h:".len() + 32);
        // Spaces and separators are hashed too, so a subject cannot forge another key.
        assert!(bucket("t", "r", Some("a b")).contains(":h:"));
        assert_ne!(bucket("t", "r", Some("*")), bucket("t", "r", None));
    }

    #[test]
    fn cluster_slots_match_redis() {
        // Reference values from CLUSTER KEYSLOT.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("123456789"), 0x31C3);
        assert_eq!(slot(&bucket("t", "a", None)), slot(&request("t", "b")));
    }
}
