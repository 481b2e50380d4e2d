//! The Redis backend of the limiter: a check is one run of `lua/check.lua` through the
//! instance's Redis client ([`crate::redis_client`]): `EVALSHA`, or `EVAL` after a
//! `NOSCRIPT`, within the client's deadline. Here: the script's arguments and its reply.

use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, LazyLock, Mutex};

use app::rules::model::{Decision, Verdict};
use app::rules::Algorithm;
use redis::{RedisWrite, Value};
use tokio::sync::oneshot;

use super::check::{
    CheckOutcome, CheckRequest, LimiterError, Released, Settlement, MAX_RULES, REQUEST_ID_TTL,
    SETTLED_TTL,
};
use super::{batch_reply, packed_args};
use crate::config::BucketLayout;
use crate::hashing::{FastMap, FastSet};
use crate::redis_client::{self, keys, Attempt, RedisClient};

/// The check script, hashed once.
static CHECK: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(CHECK_SOURCE));
const CHECK_SOURCE: &str = include_str!("../../../lua/check.lua");
/// The settle script.
static SETTLE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(SETTLE_SOURCE));
const SETTLE_SOURCE: &str = include_str!("../../../lua/settle.lua");
/// The release script.
static RELEASE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RELEASE_SOURCE));
const RELEASE_SOURCE: &str = include_str!("../../../lua/release.lua");

/// Runs the check script for `request`, in a batch with the other checks of its tenant that
/// are waiting ([`RedisChecks`]).
///
/// Every call that may consume carries an idempotency record: the caller's `request_id`
/// (kept [`REQUEST_ID_TTL`]) for a check that has one, and for the batch a field of its
/// tenant's [`keys::CallRecord`] hash of the moment (kept a few deadlines). The client
/// resends a call once after a reconnect; when the first send did run and only its reply was
/// lost, the resend finds the record and returns the first decisions instead of consuming
/// again.
pub async fn check(
    redis: &RedisClient,
    checks: &Arc<RedisChecks>,
    request: &CheckRequest,
) -> Result<CheckOutcome, LimiterError> {
    let now_ms = request.now_ms.unwrap_or_else(crate::store::now_ms);
    let record = if request.dry_run {
        // The script reads a negative TTL as a dry run (validation forbids a request_id).
        Record::DryRun(request.reply_key())
    } else if request.request_id.is_some() {
        Record::Caller(request.reply_key())
    } else {
        // The batch's record serves.
        Record::Batch
    };
    let minute = now_ms.div_euclid(60_000);
    let marks = &checks.marks;
    let ids = marks.ids(request);
    let unmarked = marks.unmarked(minute, &ids);
    // Room for a check's keys and arguments, so each is allocated once.
    let n = request.rules.len();
    // Made once: without the caller's id, a lease's id is drawn at random.
    let lease = request.lease_id();
    let mut keys = redis::Cmd::with_capacity(5 + n, 128 + 64 * n);
    let key_count = add_script_keys(&mut keys, request, &record, lease.as_deref(), minute);
    let mut args = Vec::with_capacity(48 + 7 * packed_args::MAX_INT_LEN * n);
    pack_script_args(
        &mut args,
        request,
        &record,
        lease.as_deref(),
        unmarked.as_str(),
    );
    let (reply, answer) = oneshot::channel();
    // The caller waits at most the client's deadline, however long its batch waited to be sent.
    let deadline = tokio::time::Instant::now() + redis.timeout();
    checks.enqueue(
        redis,
        &request.tenant,
        Waiting {
            keys,
            key_count,
            args,
            now_ms,
            reply,
        },
    );
    let reply = match tokio::time::timeout_at(deadline, answer).await {
        Ok(Ok(reply)) => reply?,
        Ok(Err(_)) => return Err(redis_client::Error::stopping().into()),
        Err(_) => return Err(redis_client::Error::Timeout(redis.timeout()).into()),
    };
    let outcome = parse_reply(reply, request)?;
    if !request.dry_run {
        marks.mark(minute, &ids);
    }
    Ok(outcome)
}

/// The Redis limiter's state in an instance: the active-key marks, and the checks waiting to
/// be sent, per tenant.
///
/// A check is queued under its tenant. While fewer than [`FLUSHERS`] calls of the tenant are
/// under way, a task takes everything queued (at most [`MAX_BATCH`] checks) and sends it as
/// one run of `lua/check.lua` (its header documents a batch), then the next lot, until the
/// queue is empty. Every key of a tenant carries its hash tag, so a batch runs on one node of
/// a Cluster too. A lone check goes out at once, a batch of one; under load, the checks that
/// arrive while a call is under way share the next one, and Redis runs the script, writes a
/// record and answers once for all of them. Each check is decided as a call of its own would
/// be, one after the other; a caller that gave up waiting (its deadline passed) is not sent.
#[derive(Default)]
pub struct RedisChecks {
    marks: ActiveMarks,
    /// The layout the scripts write buckets in.
    layout: BucketLayout,
    // Keyed by tenant id, which no client chooses: foldhash (`crate::hashing`).
    queues: Mutex<FastMap<String, Queue>>,
}

impl std::fmt::Debug for RedisChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisChecks")
            .field("busy_tenants", &lock(&self.queues).len())
            .finish_non_exhaustive()
    }
}

/// The most calls of one tenant under way at once: while one is in Redis, the next is on its
/// way.
pub const FLUSHERS: usize = 2;
/// The most checks one call carries.
pub const MAX_BATCH: usize = 64;

/// One tenant's checks waiting to be sent.
#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// The tasks sending this tenant's checks now.
    flushers: usize,
}

/// A check waiting to be sent.
struct Waiting {
    /// Its `KEYS`, as a call of its own would send them.
    keys: redis::Cmd,
    key_count: usize,
    /// Its `ARGV`, packed as one MessagePack array ([`pack_script_args`]).
    args: Vec<u8>,
    /// Its clock (names the batch's record slot; any will do).
    now_ms: i64,
    reply: oneshot::Sender<Result<Value, LimiterError>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl RedisChecks {
    /// No checks waiting, and buckets written in `layout`.
    pub fn new(layout: BucketLayout) -> Self {
        Self {
            layout,
            ..Self::default()
        }
    }

    /// The layout buckets are written in.
    pub fn layout(&self) -> BucketLayout {
        self.layout
    }

    fn enqueue(self: &Arc<Self>, redis: &RedisClient, tenant: &str, waiting: Waiting) {
        let mut queues = lock(&self.queues);
        let queue = match queues.get_mut(tenant) {
            Some(queue) => queue,
            None => queues.entry(tenant.to_owned()).or_default(),
        };
        queue.waiting.push(waiting);
        if queue.flushers < FLUSHERS {
            queue.flushers += 1;
            drop(queues);
            let flusher = Flusher {
                checks: self.clone(),
                redis: redis.clone(),
                tenant: tenant.to_owned(),
                running: true,
            };
            redis.spawn(flusher.run());
        }
    }
}

/// The task that sends one tenant's queued checks until none are left.
struct Flusher {
    checks: Arc<RedisChecks>,
    redis: RedisClient,
    tenant: String,
    /// Still counted among its tenant's flushers (until it found the queue empty).
    running: bool,
}

impl Flusher {
    async fn run(mut self) {
        while let Some(batch) = self.next_batch() {
            send_batch(&self.redis, &self.tenant, batch, self.checks.layout).await;
        }
    }

    /// The next checks to send, or `None` (and this flusher no longer counted) when none wait.
    /// Checks whose caller stopped waiting are dropped.
    fn next_batch(&mut self) -> Option<Vec<Waiting>> {
        let mut queues = lock(&self.checks.queues);
        let queue = queues.get_mut(&self.tenant)?;
        queue.waiting.retain(|w| !w.reply.is_closed());
        if queue.waiting.is_empty() {
            queue.flushers -= 1;
            if queue.flushers == 0 {
                queues.remove(&self.tenant);
            }
            self.running = false;
            return None;
        }
        let take = queue.waiting.len().min(MAX_BATCH);
        Some(queue.waiting.drain(..take).collect())
    }
}

impl Drop for Flusher {
    /// A flusher that panicked is no longer counted, so the next check starts another one.
    fn drop(&mut self) {
        if self.running {
            let mut queues = lock(&self.checks.queues);
            if let Some(queue) = queues.get_mut(&self.tenant) {
                queue.flushers = queue.flushers.saturating_sub(1);
            }
        }
    }
}

/// Sends `batch` (checks of `tenant`) as one call and hands each check its reply.
async fn send_batch(redis: &RedisClient, tenant: &str, batch: Vec<Waiting>, layout: BucketLayout) {
    let ttl = call_ttl_ms(redis);
    let record = keys::CallRecord::new(tenant, batch[0].now_ms, ttl);
    let calls = u32::try_from(batch.len()).unwrap_or(u32::MAX);
    let result: Result<Vec<u8>, redis_client::Error> = redis
        .run_script_as(
            &CHECK,
            CHECK_SOURCE,
            &record.key,
            calls,
            batch_room(&record, &batch),
            |cmd, attempt| add_batch_args(cmd, &record, ttl, &batch, attempt, layout),
        )
        .await;
    let result = result.map(|packed| batch_reply::decode(&packed));
    match result {
        Ok(Err(what)) => {
            for waiting in batch {
                let _ = waiting
                    .reply
                    .send(Err(LimiterError::Protocol(what.clone())));
            }
        }
        Ok(Ok(replies)) if replies.len() == batch.len() => {
            for (waiting, reply) in batch.into_iter().zip(replies) {
                let _ = waiting.reply.send(Ok(reply));
            }
        }
        Ok(Ok(replies)) => {
            let what = format!("{} replies for a batch of {}", replies.len(), batch.len());
            for waiting in batch {
                let _ = waiting
                    .reply
                    .send(Err(LimiterError::Protocol(what.clone())));
            }
        }
        Err(e) => {
            for waiting in batch {
                let _ = waiting.reply.send(Err(e.duplicate().into()));
            }
        }
    }
}

/// A check's keys.
fn keys_of(w: &Waiting) -> impl Iterator<Item = &[u8]> {
    w.keys.args_iter().map(|arg| match arg {
        redis::Arg::Simple(bytes) => bytes,
        redis::Arg::Cursor => &[][..],
    })
}

/// How many arguments [`add_batch_args`] writes for `batch`, and about how many bytes (each
/// number it adds itself is counted at its widest).
fn batch_room(record: &keys::CallRecord, batch: &[Waiting]) -> (usize, usize) {
    let (mut count, mut bytes) = (
        8,
        record.key.len() + 70 + (packed_args::MAX_INT_LEN + 5) * (batch.len() + 1),
    );
    for w in batch {
        count += w.key_count;
        bytes += keys_of(w).map(<[u8]>::len).sum::<usize>() + w.args.len();
    }
    (count, bytes)
}

/// A batch's `numkeys KEYS… ARGV…`, as `lua/check.lua`'s header documents it: a first send
/// says `batch`, and the script skips looking for a record no send can have written yet; a
/// later one says `resend`, and the script returns the record when an earlier send ran. The
/// checks' key counts and their arguments travel as two MessagePack arrays, and the layout
/// the script writes buckets in follows them.
fn add_batch_args(
    cmd: &mut redis::Cmd,
    record: &keys::CallRecord,
    ttl: i64,
    batch: &[Waiting],
    attempt: Attempt,
    layout: BucketLayout,
) {
    cmd.arg(1 + batch.iter().map(|w| w.key_count).sum::<usize>());
    cmd.arg(&record.key);
    for w in batch {
        for key in keys_of(w) {
            cmd.arg(key);
        }
    }
    let word = match attempt {
        Attempt::First => "batch",
        Attempt::Again => "resend",
    };
    cmd.arg(word).arg(record.field()).arg(ttl);
    // Each array is written straight into the command's next argument.
    let mut counts = cmd.writer_for_next_arg();
    packed_args::array(&mut counts, batch.len());
    for w in batch {
        packed_args::uint(&mut counts, w.key_count as u64);
    }
    drop(counts);
    let mut checks = cmd.writer_for_next_arg();
    packed_args::array(&mut checks, batch.len());
    for w in batch {
        packed_args::raw(&mut checks, &w.args);
    }
    drop(checks);
    cmd.arg(layout.word());
}

/// The buckets this instance has added to the current minute's active-key HyperLogLog. The
/// script adds a bucket the first time this instance checks it in a minute rather than on
/// every call: two Redis commands (`EXISTS`, `PFADD`) fewer for nearly every check, and the
/// same count, since the HyperLogLog of a minute holds each bucket checked in it once. A
/// bucket is marked only after its call succeeded. At most [`ActiveMarks::CAP`] buckets are
/// remembered a minute; past that, every call adds its buckets, as before.
#[derive(Debug, Default)]
pub struct ActiveMarks {
    // The ids are this instance's keyed SipHash of each bucket, so no client chooses them
    // either, and hashing them again with SipHash bought nothing.
    minute: Mutex<(i64, FastSet<u64>)>,
    /// Keyed at random: clients choose subjects, so they must not choose colliding buckets.
    hasher: RandomState,
}

/// The mark ids of one request's buckets, hashed once per call for both
/// [`ActiveMarks::unmarked`] and [`ActiveMarks::mark`].
#[derive(Debug, Clone, Copy)]
struct BucketIds {
    ids: [u64; MAX_RULES],
    len: usize,
}

impl BucketIds {
    fn get(&self) -> &[u64] {
        &self.ids[..self.len]
    }
}

/// One `'0'` or `'1'` per rule, as the script's last argument: built on the stack.
#[derive(Debug, Clone, Copy)]
struct Flags {
    bytes: [u8; MAX_RULES],
    len: usize,
}

impl Flags {
    fn as_str(&self) -> &str {
        // Only ASCII digits are ever written.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl ActiveMarks {
    pub const CAP: usize = 200_000;

    /// The ids of `request`'s buckets (a validated request has at most [`MAX_RULES`]).
    fn ids(&self, request: &CheckRequest) -> BucketIds {
        let mut ids = BucketIds {
            ids: [0; MAX_RULES],
            len: request.rules.len().min(MAX_RULES),
        };
        for (slot, rule) in ids.ids.iter_mut().zip(&request.rules) {
            *slot = self.hasher.hash_one(&rule.key);
        }
        ids
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (i64, FastSet<u64>)> {
        lock(&self.minute)
    }

    /// For each bucket of `ids`, `'1'` when it is not yet marked this `minute`.
    fn unmarked(&self, minute: i64, ids: &BucketIds) -> Flags {
        let mut flags = Flags {
            bytes: [b'1'; MAX_RULES],
            len: ids.len,
        };
        let marks = self.lock();
        if marks.0 == minute {
            for (flag, id) in flags.bytes.iter_mut().zip(ids.get()) {
                if marks.1.contains(id) {
                    *flag = b'0';
                }
            }
        }
        flags
    }

    /// Marks the buckets of `ids` as added this `minute`. The last minute's marks are freed
    /// outside the lock.
    fn mark(&self, minute: i64, ids: &BucketIds) {
        let mut marks = self.lock();
        let mut old = None;
        if marks.0 != minute {
            if minute < marks.0 {
                return;
            }
            marks.0 = minute;
            old = Some(std::mem::take(&mut marks.1));
        }
        for id in ids.get() {
            if marks.1.len() >= Self::CAP {
                break;
            }
            marks.1.insert(*id);
        }
        drop(marks);
        drop(old);
    }
}

/// Where the check script keeps a check's reply for a resend (`lua/check.lua`, KEYS[n+1]).
#[derive(Debug)]
enum Record {
    /// None: a dry run writes nothing (the key is passed but not used).
    DryRun(String),
    /// The caller's `request_id`: a key of its own, kept [`REQUEST_ID_TTL`].
    Caller(String),
    /// None of its own: its batch's record keeps it. A key of the tenant's (its live-key
    /// index) is passed in its place but not used.
    Batch,
}

impl Record {
    /// The key passed for the record: its own, or else `placeholder`.
    fn key<'a>(&'a self, placeholder: &'a str) -> &'a str {
        match self {
            Self::DryRun(key) | Self::Caller(key) => key,
            Self::Batch => placeholder,
        }
    }

    fn ttl_ms(&self) -> i64 {
        match self {
            Self::DryRun(_) => -1,
            Self::Caller(_) => REQUEST_ID_TTL.as_millis() as i64,
            Self::Batch => 0,
        }
    }

    /// The script's ARGV[4+7n]: `1` for a caller's id, `0` otherwise.
    fn marker(&self) -> &str {
        match self {
            Self::DryRun(_) | Self::Batch => "0",
            Self::Caller(_) => "1",
        }
    }
}

/// How long the record of one call is kept: its resend comes within the same deadline, so a
/// few deadlines (at least a second) are plenty.
fn call_ttl_ms(redis: &RedisClient) -> i64 {
    i64::try_from(redis.timeout().as_millis() * 4)
        .unwrap_or(i64::MAX)
        .max(1_000)
}

/// The SHA1 of the check script, as `SCRIPT EXISTS` and `EVALSHA` name it.
pub fn check_script_sha() -> &'static str {
    CHECK.get_hash()
}

fn algorithm_code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::TokenBucket => 1,
        Algorithm::Gcra => 2,
        Algorithm::LeakyBucket => 3,
        Algorithm::FixedWindow => 4,
        Algorithm::SlidingWindow => 5,
        Algorithm::SlidingLog => 6,
        Algorithm::Concurrency => 7,
    }
}

/// A check's `KEYS`, as documented in the script's header (`lease`: its lease's id, when it
/// takes one); returns how many.
fn add_script_keys(
    cmd: &mut redis::Cmd,
    request: &CheckRequest,
    record: &Record,
    lease: Option<&str>,
    minute: i64,
) -> usize {
    for rule in &request.rules {
        cmd.arg(&rule.key);
    }
    let live_index = keys::live_index(&request.tenant);
    cmd.arg(record.key(&live_index))
        .arg(keys::active(&request.tenant, minute))
        .arg(&live_index);
    if let Some(reserve) = &request.reserve {
        cmd.arg(keys::reservation(&request.tenant, &reserve.id));
    }
    if let Some(lease) = lease {
        cmd.arg(keys::lease(&request.tenant, lease));
    }
    request.rules.len() + 3 + usize::from(request.reserve.is_some()) + usize::from(lease.is_some())
}

/// A check's `ARGV`, as documented in the script's header, written as one MessagePack array
/// ([`packed_args`]): its numbers as integers, its words (an empty clock, the flags, the
/// record's marker, the active-key marks, the lease id) as strings.
fn pack_script_args(
    out: &mut Vec<u8>,
    request: &CheckRequest,
    record: &Record,
    lease: Option<&str>,
    unmarked: &str,
) {
    let n = request.rules.len();
    let tail = match (&request.reserve, lease) {
        (None, None) => 0,
        (_, None) => 1,
        (_, Some(_)) => 2,
    };
    let flag = |on: bool| if on { &b"1"[..] } else { &b"0"[..] };
    packed_args::array(out, 3 + 7 * n + 3 + tail);
    match request.now_ms {
        Some(now) => packed_args::int(out, now),
        None => packed_args::str(out, b""),
    }
    packed_args::int(out, record.ttl_ms());
    packed_args::uint(out, n as u64);
    for rule in &request.rules {
        packed_args::uint(out, algorithm_code(rule.spec.algorithm).into());
        packed_args::uint(out, rule.spec.limit);
        packed_args::uint(out, rule.spec.period_ms);
        packed_args::uint(out, rule.spec.capacity());
        packed_args::uint(out, rule.cost);
        packed_args::str(out, flag(rule.spec.penalty));
        packed_args::str(out, flag(rule.shadow));
    }
    packed_args::str(out, record.marker().as_bytes());
    match request.max_live_keys {
        Some(quota) => packed_args::uint(out, quota),
        None => packed_args::int(out, -1),
    }
    packed_args::str(out, unmarked.as_bytes());
    if tail > 0 {
        packed_args::uint(out, request.reserve.as_ref().map_or(0, |r| r.ttl_ms));
    }
    if let Some(lease) = lease {
        packed_args::str(out, lease.as_bytes());
    }
}

/// One bucket member a lease holds, as `lua/check.lua` recorded it.
#[derive(serde::Deserialize)]
struct Held {
    k: String,
}

/// Releases `tenant`'s lease `id`: reads which buckets it holds, then runs `lua/release.lua`
/// on them and the record in one step. `quota`: whether the tenant has a quota of live keys.
pub async fn release(
    redis: &RedisClient,
    tenant: &str,
    id: &str,
    quota: bool,
) -> Result<Released, LimiterError> {
    let bad = |what: String| LimiterError::Protocol(format!("release: {what}"));
    let record = keys::lease(tenant, id);
    let raw: Option<String> = redis
        .query_routed(redis::cmd("HGET").arg(&record).arg("r"), Some(&record))
        .await?;
    let Some(raw) = raw else {
        return Ok(Released::Unknown);
    };
    let held: Vec<Held> =
        serde_json::from_str(&raw).map_err(|e| bad(format!("unreadable record: {e}")))?;
    let index = keys::live_index(tenant);
    let reply: Vec<i64> = redis
        .run_script(&RELEASE, RELEASE_SOURCE, &record, |cmd| {
            cmd.arg(2 + held.len()).arg(&record).arg(&index);
            for h in &held {
                cmd.arg(&h.k);
            }
            cmd.arg(SETTLED_TTL.as_millis() as u64).arg(u8::from(quota));
        })
        .await?;
    match reply.as_slice() {
        [0] => Ok(Released::Unknown),
        [1] => Ok(Released::Now),
        [2] => Ok(Released::Before),
        other => Err(bad(format!("unexpected reply {other:?}"))),
    }
}

/// One bucket a reservation charged, as `lua/check.lua` recorded it (only its key is read
/// here; the script reads the rest).
#[derive(serde::Deserialize)]
struct Charged {
    k: String,
}

/// Settles reservation `id` of `tenant` at `cost`: reads which buckets it charged, then runs
/// `lua/settle.lua` on them and the record in one step (the script checks the record still
/// names them). `quota`: whether the tenant has a quota of live keys; `layout`: how the
/// buckets it writes are stored.
pub async fn settle(
    redis: &RedisClient,
    tenant: &str,
    id: &str,
    cost: u64,
    now_ms: Option<i64>,
    quota: bool,
    layout: BucketLayout,
) -> Result<Settlement, LimiterError> {
    let bad = |what: String| LimiterError::Protocol(format!("settle: {what}"));
    let record = keys::reservation(tenant, id);
    let raw: Option<String> = redis
        .query_routed(redis::cmd("HGET").arg(&record).arg("r"), Some(&record))
        .await?;
    let Some(raw) = raw else {
        return Ok(Settlement::Unknown);
    };
    let charged: Vec<Charged> =
        serde_json::from_str(&raw).map_err(|e| bad(format!("unreadable record: {e}")))?;
    let buckets: Vec<String> = charged.into_iter().map(|c| c.k).collect();
    let index = keys::live_index(tenant);
    let reply: Vec<Value> = redis
        .run_script(&SETTLE, SETTLE_SOURCE, &record, |cmd| {
            cmd.arg(2 + buckets.len()).arg(&record).arg(&index);
            for bucket in &buckets {
                cmd.arg(bucket);
            }
            cmd.arg(cost);
            match now_ms {
                Some(now) => cmd.arg(now),
                None => cmd.arg(""),
            };
            cmd.arg(SETTLED_TTL.as_millis() as u64)
                .arg(u8::from(quota))
                .arg(layout.word());
        })
        .await?;
    let number = |v: &Value| -> Result<u64, LimiterError> {
        match v {
            Value::Int(i) => u64::try_from(*i).map_err(|_| bad(format!("negative {i}"))),
            Value::BulkString(bytes) => std::str::from_utf8(bytes)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| bad("expected a number".into())),
            other => Err(bad(format!("expected a number, not {other:?}"))),
        }
    };
    match reply.as_slice() {
        [status] if number(status)? == 0 => Ok(Settlement::Unknown),
        [status, estimate] if number(status)? == 1 => Ok(Settlement::Settled {
            estimate: number(estimate)?,
            cost,
            repeated: false,
            buckets,
        }),
        [status, estimate, first] if number(status)? == 2 => Ok(Settlement::Settled {
            estimate: number(estimate)?,
            cost: number(first)?,
            repeated: true,
            buckets,
        }),
        other => Err(bad(format!("unexpected reply {other:?}"))),
    }
}

/// The first item of the reply of a call refused by the tenant's quota.
const OVER_QUOTA: i64 = 2;
/// The first item of the reply of a batched check that raised an error; the error follows.
const FAILED: i64 = 3;

fn parse_reply(reply: Value, request: &CheckRequest) -> Result<CheckOutcome, LimiterError> {
    let bad = |what: &str| LimiterError::Protocol(what.to_owned());
    let Value::Array(items) = reply else {
        return Err(bad("not an array"));
    };
    let n = request.rules.len();
    if let [Value::Int(FAILED), error] = items.as_slice() {
        let error = match error {
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            other => format!("{other:?}"),
        };
        return Err(redis_client::Error::script(error).into());
    }
    if let [Value::Int(OVER_QUOTA), _, Value::Int(live), Value::Int(wait)] = items.as_slice() {
        return Err(LimiterError::OverQuota {
            live: u64::try_from(*live).unwrap_or(0),
            quota: request.max_live_keys.unwrap_or(0),
            retry_after_ms: u64::try_from(*wait).unwrap_or(0),
        });
    }
    if items.len() != 3 + 4 * n {
        return Err(bad(&format!("{} items for {n} rules", items.len())));
    }
    let int = |v: &Value| match v {
        Value::Int(i) => Ok(*i),
        _ => Err(bad("expected an integer")),
    };
    let float = |v: &Value| match v {
        Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .ok_or_else(|| bad("expected a number")),
        _ => Err(bad("expected a string")),
    };
    let mut decisions = Vec::with_capacity(n);
    for (i, rule) in request.rules.iter().enumerate() {
        let at = 3 + 4 * i;
        let verdict = match int(&items[at])? {
            1 => Verdict::Allow,
            0 => Verdict::Deny,
            -1 => Verdict::NeverFits,
            other => return Err(bad(&format!("verdict {other}"))),
        };
        decisions.push(Decision {
            verdict,
            limit: rule.spec.limit,
            remaining: float(&items[at + 1])?,
            reset_after_ms: u64::try_from(int(&items[at + 2])?)
                .map_err(|_| bad("negative reset"))?,
            retry_after_ms: u64::try_from(int(&items[at + 3])?)
                .map_err(|_| bad("negative retry"))?,
        });
    }
    Ok(CheckOutcome {
        deduplicated: int(&items[0])? == 1,
        now_ms: int(&items[1])?,
        allowed: int(&items[2])? == 1,
        decisions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{Reserve, RuleCheck};
    use app::rules::LimitSpec;
    use proptest::prelude::*;

    fn args_of(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|a| match a {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                redis::Arg::Cursor => "<cursor>".to_owned(),
            })
            .collect()
    }

    fn request() -> impl Strategy<Value = CheckRequest> {
        let rule = (
            proptest::sample::select(Algorithm::ALL.to_vec()),
            1..1_000u64,
            1..100_000u64,
            proptest::option::of(1..1_000u64),
            1..1_000u64,
            any::<bool>(),
            any::<bool>(),
        );
        (
            proptest::collection::vec(rule, 1..=8),
            proptest::option::of(0..i64::MAX / 2),
        )
            .prop_map(|(rules, now_ms)| CheckRequest {
                tenant: "t".into(),
                rules: rules
                    .into_iter()
                    .enumerate()
                    .map(
                        |(i, (algorithm, limit, period_ms, burst, cost, penalty, shadow))| {
                            RuleCheck {
                                key: keys::bucket("t", &format!("r{i}"), None),
                                spec: LimitSpec {
                                    algorithm,
                                    limit,
                                    period_ms,
                                    burst,
                                    penalty,
                                },
                                cost,
                                shadow,
                            }
                        },
                    )
                    .collect(),
                request_id: None,
                now_ms,
                dry_run: false,
                max_live_keys: None,
                reserve: None,
                lease: None,
            })
    }

    #[test]
    fn a_bucket_is_unmarked_until_its_call_succeeded_and_again_each_minute() {
        let marks = ActiveMarks::default();
        let rule = |key: &str| RuleCheck {
            key: key.into(),
            spec: LimitSpec::new(Algorithm::TokenBucket, 1, 1_000),
            cost: 1,
            shadow: false,
        };
        let request = CheckRequest {
            tenant: "t".into(),
            rules: vec![rule("sl:{t}:a:*"), rule("sl:{t}:b:*")],
            request_id: None,
            now_ms: None,
            dry_run: false,
            max_live_keys: None,
            reserve: None,
            lease: None,
        };
        let unmarked = |minute, request: &CheckRequest| {
            marks
                .unmarked(minute, &marks.ids(request))
                .as_str()
                .to_owned()
        };
        assert_eq!(unmarked(7, &request), "11");
        marks.mark(7, &marks.ids(&request));
        assert_eq!(unmarked(7, &request), "00");
        let mut other = request.clone();
        other.rules[1] = rule("sl:{t}:c:*");
        assert_eq!(unmarked(7, &other), "01");
        // The next minute's HyperLogLog has none of them; a late call of the last minute
        // does not clear it.
        assert_eq!(unmarked(8, &request), "11");
        marks.mark(8, &marks.ids(&other));
        marks.mark(7, &marks.ids(&request));
        assert_eq!(unmarked(8, &request), "01");
    }

    proptest! {
        /// The arguments are laid out as `lua/check.lua`'s header documents them.
        #[test]
        fn script_arguments_follow_the_scripts_header(
            mut request in request(),
            ttl in prop_oneof![Just(-1_i64), 1..600_000_i64],
            request_id in proptest::option::of("[a-z]{1,8}"),
            quota in proptest::option::of(0..1_000_000_u64),
            reserve in proptest::option::of(1_000..3_600_000_u64),
        ) {
            request.request_id = request_id;
            request.max_live_keys = quota;
            request.reserve = reserve.map(|ttl_ms| Reserve { id: "e".repeat(32), ttl_ms });
            request.lease = Some("c".repeat(32));
            let (r, l) = (usize::from(reserve.is_some()), usize::from(request.takes_lease()));
            let unmarked: String = (0..request.rules.len()).map(|i| if i % 2 == 0 { '1' } else { '0' }).collect();
            let (record, key, marker) = if ttl < 0 {
                (Record::DryRun("slr:{t}:x".to_owned()), "slr:{t}:x", "0")
            } else if request.request_id.is_some() {
                (Record::Caller("slr:{t}:x".to_owned()), "slr:{t}:x", "1")
            } else {
                (Record::Batch, "slb:{t}", "0")
            };
            let ttl = if ttl < 0 {
                -1
            } else if request.request_id.is_some() {
                REQUEST_ID_TTL.as_millis() as i64
            } else {
                0
            };
            let lease = request.lease_id();
            let mut cmd = redis::Cmd::new();
            let key_count = add_script_keys(&mut cmd, &request, &record, lease.as_deref(), 29_000_000);
            let n = request.rules.len();
            prop_assert_eq!(key_count, n + 3 + r + l);
            let keys = args_of(&cmd);
            prop_assert_eq!(keys.len(), key_count);
            for (i, rule) in request.rules.iter().enumerate() {
                prop_assert_eq!(&keys[i], &rule.key);
            }
            prop_assert_eq!(&keys[n], key);
            prop_assert_eq!(&keys[n + 1], "slk:{t}:29000000");
            prop_assert_eq!(&keys[n + 2], "slb:{t}");
            if r == 1 {
                prop_assert_eq!(&keys[n + 3], &format!("slv:{{t}}:{}", "e".repeat(32)));
            }
            if l == 1 {
                prop_assert_eq!(&keys[n + 3 + r], &format!("slc:{{t}}:{}", "c".repeat(32)));
            }

            // The arguments, one MessagePack array, read back by the reply's reader (not the
            // writer; Redis's own reader reads them in every Redis test).
            let mut packed = Vec::new();
            pack_script_args(&mut packed, &request, &record, lease.as_deref(), &unmarked);
            let argv = batch_reply::decode(&packed).unwrap();
            let tail = if r + l > 0 { 1 + l } else { 0 };
            prop_assert_eq!(argv.len(), 3 + 7 * n + 3 + tail);
            let int = |v: i64| Value::Int(v);
            let word = |s: &str| Value::BulkString(s.as_bytes().to_vec());
            prop_assert_eq!(&argv[0], &request.now_ms.map_or(word(""), int));
            prop_assert_eq!(&argv[1], &int(ttl));
            prop_assert_eq!(&argv[2], &int(n as i64));
            for (i, rule) in request.rules.iter().enumerate() {
                let at = 3 + 7 * i;
                let expected = [
                    int(algorithm_code(rule.spec.algorithm).into()),
                    int(rule.spec.limit as i64),
                    int(rule.spec.period_ms as i64),
                    int(rule.spec.capacity() as i64),
                    int(rule.cost as i64),
                    word(if rule.spec.penalty { "1" } else { "0" }),
                    word(if rule.shadow { "1" } else { "0" }),
                ];
                prop_assert_eq!(&argv[at..at + 7], &expected[..]);
            }
            prop_assert_eq!(&argv[3 + 7 * n], &word(marker));
            prop_assert_eq!(&argv[4 + 7 * n], &quota.map_or(int(-1), |q| int(q as i64)));
            prop_assert_eq!(&argv[5 + 7 * n], &word(&unmarked));
            if r + l > 0 {
                prop_assert_eq!(&argv[6 + 7 * n], &int(reserve.unwrap_or(0) as i64));
            }
            if l == 1 {
                prop_assert_eq!(&argv[7 + 7 * n], &word(&"c".repeat(32)));
            }
        }

        /// A reply in the documented shape reads back as the decisions it encodes.
        #[test]
        fn replies_read_back_exactly(
            request in request(),
            verdicts in proptest::collection::vec((prop_oneof![Just(1_i64), Just(0), Just(-1)], -1e6..1e6_f64, 0..i64::MAX / 2, 0..i64::MAX / 2), 8),
            deduplicated in any::<bool>(),
            allowed in any::<bool>(),
            now in 0..i64::MAX / 2,
        ) {
            let mut items = vec![
                Value::Int(i64::from(deduplicated)),
                Value::Int(now),
                Value::Int(i64::from(allowed)),
            ];
            for (v, remaining, reset, retry) in &verdicts[..request.rules.len()] {
                items.push(Value::Int(*v));
                items.push(Value::BulkString(format!("{remaining:.17e}").into_bytes()));
                items.push(Value::Int(*reset));
                items.push(Value::Int(*retry));
            }
            let outcome = parse_reply(Value::Array(items), &request).unwrap();
            prop_assert_eq!((outcome.deduplicated, outcome.allowed, outcome.now_ms), (deduplicated, allowed, now));
            for (d, (v, remaining, reset, retry)) in outcome.decisions.iter().zip(&verdicts) {
                let verdict = match v { 1 => Verdict::Allow, 0 => Verdict::Deny, _ => Verdict::NeverFits };
                prop_assert_eq!(d.verdict, verdict);
                prop_assert_eq!(d.remaining, *remaining);
                prop_assert_eq!((d.reset_after_ms, d.retry_after_ms), (*reset as u64, *retry as u64));
            }
            // A refusal by the quota reads as one, whatever the rules.
            let over = Value::Array(vec![Value::Int(2), Value::Int(now), Value::Int(7), Value::Int(1500)]);
            let refused = matches!(
                parse_reply(over, &request),
                Err(LimiterError::OverQuota { live: 7, retry_after_ms: 1500, .. })
            );
            prop_assert!(refused);
            // A reply one rule short is refused, not misread.
            let short = Value::Array(vec![Value::Int(0), Value::Int(now), Value::Int(1)]);
            prop_assert!(parse_reply(short, &request).is_err());
        }
    }
}
