//! Redis failing under Sluice: one deadline per check covers every attempt, and a circuit
//! breaker per node answers checks at once with their failure mode while Redis keeps failing,
//! then closes by itself when Redis answers again.

use std::time::{Duration, Instant};

use serde_json::json;
use sluice::config::Config;

use crate::helpers::{rule, setup_tenant, spawn_app, time_until, TestApp};
use crate::services::{shared_postgres, RedisServer};

/// The deadline of these tests' instances.
const DEADLINE_MS: u64 = 200;

async fn distributed(redis: &RedisServer) -> TestApp {
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(shared_postgres().fresh_database().await);
    config.redis_url = Some(redis.url());
    config.redis_timeout_ms = DEADLINE_MS;
    spawn_app(config).await
}

#[tokio::test]
async fn a_hung_redis_costs_one_deadline_per_check_then_the_breaker_answers_at_once() {
    let redis = RedisServer::start();
    let app = distributed(&redis).await;
    let op = app.operator_key().await;
    let mut open = rule("open", "exact", Some("GET /open"), "gcra", 1000, 1000);
    open["failure_mode"] = json!("open");
    let closed = rule("closed", "exact", Some("GET /closed"), "gcra", 1000, 1000);
    let t = setup_tenant(&app, &op, &[open, closed]).await;
    let check = |route: &'static str| {
        let app = &app;
        let key = t.check_key.clone();
        async move {
            let started = Instant::now();
            let (status, _, body) = app.check(&key, json!({ "route": route })).await;
            (status, body, started.elapsed())
        }
    };
    assert_eq!(check("GET /open").await.0, 200);
    assert_eq!(
        app.metric("sluice_redis_breaker_open{node=\"redis\"}")
            .await,
        0.0
    );

    redis.pause();
    // Hung: each check waits for the one deadline, not one per attempt, and gets its
    // failure mode. (The figures for a whole load are in docs/ARCHITECTURE.md.)
    let (status, body, took) = check("GET /open").await;
    assert_eq!(
        (status, body["degraded"].as_str()),
        (200, Some("fail_open")),
        "{body}"
    );
    assert!(took >= Duration::from_millis(DEADLINE_MS), "{took:?}");
    let (status, _, took_closed) = check("GET /closed").await;
    assert_eq!(status, 503);
    eprintln!("hung Redis: a fail-open check took {took:?}, a fail-closed one {took_closed:?}");
    // A run of failures opens the breaker ...
    let before = app.metric("sluice_redis_breaker_refused_total").await;
    let mut calls = 0;
    while app
        .metric("sluice_redis_breaker_open{node=\"redis\"}")
        .await
        == 0.0
    {
        calls += 1;
        assert!(calls <= 10, "the breaker opens after a run of failures");
        assert_eq!(check("GET /open").await.0, 200);
    }
    // ... and then checks are answered without Redis, by their failure mode.
    for _ in 0..20 {
        assert_eq!(check("GET /open").await.0, 200);
        assert_eq!(check("GET /closed").await.0, 503);
    }
    let refused = app.metric("sluice_redis_breaker_refused_total").await - before;
    // Of 40 checks at most one per probe interval may go to Redis as the probe.
    assert!(
        refused >= 35.0,
        "{refused} of 40 checks were refused without Redis"
    );
    let (status, _, ready) = app.call("GET", "/readyz", None, None).await;
    assert_eq!(status, 503);
    assert!(ready["down"].to_string().contains("redis"), "{ready}");
    // The fleet dashboard shows it too.
    let fleet = sluice::dashboard::view::Scope::Fleet;
    let frame = app.dashboard.frame(&fleet, Default::default());
    assert_eq!(frame.breakers_open, ["redis"]);
    let html = app.dashboard.html(&fleet, Default::default());
    assert!(html.contains(r#"data-testid="tile-breakers""#));

    redis.resume();
    // A probe finds Redis again and the breaker closes, with no restart.
    let started = Instant::now();
    loop {
        let (status, body, _) = check("GET /closed").await;
        if status == 200 && body.get("degraded").is_none() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "recovers: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("recovered {:?} after Redis came back", started.elapsed());
    assert_eq!(
        app.metric("sluice_redis_breaker_open{node=\"redis\"}")
            .await,
        0.0
    );
    assert_eq!(app.call("GET", "/readyz", None, None).await.0, 200);
}

#[tokio::test]
async fn a_killed_redis_opens_the_breaker_and_its_return_closes_it() {
    let mut redis = RedisServer::start();
    let app = distributed(&redis).await;
    let op = app.operator_key().await;
    let mut open = rule("open", "exact", Some("GET /open"), "gcra", 1000, 1000);
    open["failure_mode"] = json!("open");
    let t = setup_tenant(&app, &op, &[open]).await;
    let route = json!({ "route": "GET /open" });
    assert_eq!(app.check(&t.check_key, route.clone()).await.0, 200);

    redis.stop();
    let mut calls = 0;
    while app
        .metric("sluice_redis_breaker_open{node=\"redis\"}")
        .await
        == 0.0
    {
        calls += 1;
        assert!(calls <= 10, "the breaker opens after a run of failures");
        let (status, _, body) = app.check(&t.check_key, route.clone()).await;
        assert_eq!(
            (status, body["degraded"].as_str()),
            (200, Some("fail_open"))
        );
    }
    redis.restart();
    let started = Instant::now();
    loop {
        let (status, _, body) = app.check(&t.check_key, route.clone()).await;
        if status == 200 && body.get("degraded").is_none() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "recovers: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        app.metric("sluice_redis_breaker_open{node=\"redis\"}")
            .await,
        0.0
    );
}

/// One check of the load in `once_a_restarted_redis_decides_again_no_check_gets_its_failure_mode`.
struct Answer {
    sent: Instant,
    answered: Instant,
    /// Redis decided it (rather than an error that a rule's failure mode would answer).
    decided: bool,
}

/// After Redis was killed and started again, the pool's connections reconnect at once: no
/// check sent after Redis decided again is refused by a breaker that opened once more, nor
/// waits out its deadline on a connection that is still waiting to reconnect. The client
/// library's reconnect backoff (1 to 2 s with one retry) once did both: a batch sent on such a
/// connection timed out, counted as its checks and reopened the breaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_a_restarted_redis_decides_again_no_check_gets_its_failure_mode() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use app::rules::{Algorithm, LimitSpec};
    use sluice::config::LimiterTarget;
    use sluice::limiter::{Limiter, RedisOptions};

    /// Concurrent clients over 8 tenants: every connection of the pool carries batches of
    /// more checks than the breaker's threshold.
    const CLIENTS: usize = 64;
    const TENANTS: usize = 8;
    /// How long Redis stays down once the breaker opened: long enough for the breaker's
    /// probes (one each 500 ms) to fail on several connections.
    const DOWN: Duration = Duration::from_millis(1_500);
    /// How long the load goes on after Redis decided again: longer than the backoff.
    const AFTER: Duration = Duration::from_millis(2_500);

    let mut redis = RedisServer::start();
    // The benchmark's deadline. Well under the backoff this test is about (1 to 2 s), so a
    // check that waited for it fails; with a deadline of 500 ms or more, the breaker's probes
    // no longer leave connections waiting at the restart, and the test could not fail.
    let options = RedisOptions {
        timeout: Duration::from_millis(250),
        connections: 4,
    };
    let limiter = Limiter::connect(&LimiterTarget::Redis(redis.url()), options)
        .await
        .unwrap();
    let client = limiter.redis().expect("a Redis limiter").clone();
    let answers = Arc::new(Mutex::new(Vec::<Answer>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let tenants: Vec<String> = (0..TENANTS)
        .map(|_| uuid::Uuid::new_v4().to_string())
        .collect();
    let load: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (limiter, answers, stop) = (limiter.clone(), answers.clone(), stop.clone());
            let mut request = one_unit_check(&tenants[i % TENANTS], None);
            // Never denies, and has no window to roll over mid-test.
            request.rules[0].spec = LimitSpec::new(Algorithm::TokenBucket, 1_000_000_000, 60_000);
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    let decided = match limiter.check(&request).await {
                        Ok(outcome) => {
                            assert!(outcome.allowed);
                            true
                        }
                        Err(e) => {
                            assert!(e.is_transient(), "only Redis failing: {e}");
                            false
                        }
                    };
                    let answered = Instant::now();
                    answers.lock().unwrap().push(Answer {
                        sent,
                        answered,
                        decided,
                    });
                    if !decided {
                        // A caller answered by its failure mode comes back a little later
                        // rather than spinning on a refusal.
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
            })
        })
        .collect();
    let decided_since = |since: Instant| {
        answers
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.decided && a.sent >= since)
            .map(|a| a.answered)
            .min()
    };
    // Each wait below fails past 15 s.
    let limit = Duration::from_secs(5);

    // A thousand checks decided, then the breaker opens once Redis is gone.
    time_until(
        async || answers.lock().unwrap().iter().filter(|a| a.decided).count() >= 1_000,
        limit,
    )
    .await;
    redis.stop();
    time_until(async || !client.open_breakers().is_empty(), limit).await;
    tokio::time::sleep(DOWN).await;
    let restarting = Instant::now();
    let redis = tokio::task::spawn_blocking(move || {
        redis.restart();
        redis
    })
    .await
    .unwrap();
    time_until(async || decided_since(restarting).is_some(), limit).await;
    let back = decided_since(restarting).expect("Redis decided again");
    let refused_when_back = client.refused();
    tokio::time::sleep(AFTER).await;
    stop.store(true, Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }

    let answers = answers.lock().unwrap();
    let after: Vec<&Answer> = answers.iter().filter(|a| a.sent > back).collect();
    let failed = after.iter().filter(|a| !a.decided).count();
    let slowest = after
        .iter()
        .map(|a| a.answered - a.sent)
        .max()
        .unwrap_or_default();
    eprintln!(
        "Redis decided again {} ms after its restart began; then {} checks, {failed} failed, \
         the slowest {} ms; {} refused by the breaker",
        (back - restarting).as_millis(),
        after.len(),
        slowest.as_millis(),
        client.refused() - refused_when_back,
    );
    assert!(after.len() >= 1_000, "the load went on: {}", after.len());
    assert_eq!(
        failed,
        0,
        "of {} checks sent after Redis decided again, {failed} got their failure mode",
        after.len()
    );
    assert!(
        client.open_breakers().is_empty(),
        "the breaker is closed at the end"
    );
    drop(redis);
}

/// A TCP proxy in front of Redis that can lose one reply: once armed, the connection that
/// sends the next `EVALSHA` has it delivered to Redis, and is closed before the reply comes
/// back, as a network failure would.
struct LossyProxy {
    port: u16,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    lost: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl LossyProxy {
    async fn start(upstream: u16) -> Self {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(AtomicUsize::new(0));
        let (armed_, lost_) = (armed.clone(), lost.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(("127.0.0.1", upstream))
                    .await
                    .unwrap();
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                let doomed = Arc::new(AtomicBool::new(false));
                let (armed, lost, doomed_up) = (armed_.clone(), lost_.clone(), doomed.clone());
                tokio::spawn(async move {
                    let mut buf = vec![0_u8; 64 * 1024];
                    while let Ok(n) = client_rx.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        let sends_script = buf[..n].windows(7).any(|w| w == b"EVALSHA");
                        if sends_script && armed.swap(false, Ordering::SeqCst) {
                            doomed_up.store(true, Ordering::SeqCst);
                            lost.fetch_add(1, Ordering::SeqCst);
                        }
                        if server_tx.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
                tokio::spawn(async move {
                    let mut buf = vec![0_u8; 64 * 1024];
                    while let Ok(n) = server_rx.read(&mut buf).await {
                        if n == 0 || doomed.load(Ordering::SeqCst) {
                            // The reply is dropped with the connection.
                            break;
                        }
                        if client_tx.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = client_tx.shutdown().await;
                });
            }
        });
        Self { port, armed, lost }
    }
}

/// A check of one unit against a fixed window of 10 a day on `tenant`'s bucket `r` (no window
/// ends mid-test), without a `request_id` (so the server makes the call's record), at `now_ms`
/// or Redis's time.
fn one_unit_check(tenant: &str, now_ms: Option<i64>) -> sluice::limiter::CheckRequest {
    use app::rules::{Algorithm, LimitSpec};
    use sluice::limiter::{keys, CheckRequest, RuleCheck};

    CheckRequest {
        tenant: tenant.to_owned(),
        rules: vec![RuleCheck {
            key: keys::bucket(tenant, "r", None),
            spec: LimitSpec::new(Algorithm::FixedWindow, 10, crate::helpers::DAY_MS),
            cost: 1,
            shadow: false,
        }],
        request_id: None,
        now_ms,
        dry_run: false,
        max_live_keys: None,
        reserve: None,
        lease: None,
    }
}

/// A private Redis, the lossy proxy in front of it, and a limiter with one connection through
/// the proxy (2 s deadline).
async fn limiter_behind_lossy_proxy() -> (RedisServer, LossyProxy, sluice::limiter::Limiter) {
    use sluice::config::LimiterTarget;
    use sluice::limiter::{Limiter, RedisOptions};

    let redis = RedisServer::start();
    let proxy = LossyProxy::start(redis.port).await;
    let options = RedisOptions {
        timeout: Duration::from_secs(2),
        connections: 1,
    };
    let target = LimiterTarget::Redis(format!("redis://127.0.0.1:{}", proxy.port));
    let limiter = Limiter::connect(&target, options).await.unwrap();
    (redis, proxy, limiter)
}

#[tokio::test]
async fn a_check_resent_after_its_reply_was_lost_is_counted_once() {
    use std::sync::atomic::Ordering;

    let (redis, proxy, limiter) = limiter_behind_lossy_proxy().await;
    let tenant = uuid::Uuid::new_v4().to_string();
    let request = one_unit_check(&tenant, None);
    let key = request.rules[0].key.clone();
    let first = limiter.check(&request).await.unwrap();
    assert!(first.allowed && !first.deduplicated);
    assert_eq!(redis.bucket_state(&key, &["v", "w", "t"]).1[0], 1.0);

    proxy.armed.store(true, Ordering::SeqCst);
    let resent = limiter.check(&request).await.unwrap();
    assert_eq!(proxy.lost.load(Ordering::SeqCst), 1, "a reply was lost");
    assert!(resent.allowed);
    assert!(
        resent.deduplicated,
        "the resend found the first send's record"
    );
    // Two checks, two units: the lost reply's call ran once, not twice.
    assert_eq!(redis.bucket_state(&key, &["v", "w", "t"]).1[0], 2.0);
    // The calls' records are fields of the tenant's hash of the moment (one for both, or one
    // each when they fell into two quarter seconds), not a key a call.
    let pattern = format!("slr:{{{tenant}}}:*");
    assert_eq!(
        redis.cli(&["KEYS", &pattern]).trim(),
        "",
        "no key of its own"
    );
    assert_call_records(&redis, &tenant, 2);
}

/// Asserts that `tenant`'s call records hold `calls` fields in all (one a call), in hashes that
/// each expire within 4 deadlines of 2 s.
fn assert_call_records(redis: &RedisServer, tenant: &str, calls: usize) {
    let records = redis.cli(&["KEYS", &format!("slq:{{{tenant}}}:*")]);
    let fields: usize = records
        .lines()
        .map(|key| {
            redis
                .cli(&["HLEN", key.trim()])
                .trim()
                .parse::<usize>()
                .unwrap()
        })
        .sum();
    assert_eq!(fields, calls, "one record a call, in {records:?}");
    for key in records.lines() {
        let ttl: i64 = redis.cli(&["PTTL", key.trim()]).trim().parse().unwrap();
        assert!(
            (1..=8_000).contains(&ttl),
            "{key} expires within 4 deadlines: {ttl} ms"
        );
    }
}

/// Concurrent checks of one tenant travel in batches (`lua/check.lua`, one call for many
/// checks): when the connection that carried a batch is lost before its reply, every check of
/// it is resent once and counted once, and so is every other call the lost connection had
/// under way.
#[tokio::test]
async fn a_batch_whose_reply_was_lost_is_resent_and_each_check_counted_once() {
    use std::sync::atomic::Ordering;

    use futures::future::join_all;

    const CHECKS: usize = 60;
    let (redis, proxy, limiter) = limiter_behind_lossy_proxy().await;
    let tenant = uuid::Uuid::new_v4().to_string();
    // A fixed clock: every check falls in the same window whenever the test runs.
    let mut request = one_unit_check(&tenant, Some(1_700_000_000_000));
    request.rules[0].spec =
        app::rules::LimitSpec::new(app::rules::Algorithm::FixedWindow, 1_000, 60_000);
    let key = request.rules[0].key.clone();
    assert!(limiter.check(&request).await.unwrap().allowed);
    redis.cli(&["CONFIG", "RESETSTAT"]);

    proxy.armed.store(true, Ordering::SeqCst);
    let outcomes = join_all((0..CHECKS).map(|_| limiter.check(&request))).await;
    assert_eq!(proxy.lost.load(Ordering::SeqCst), 1, "a reply was lost");
    let outcomes: Vec<_> = outcomes
        .into_iter()
        .map(|o| o.expect("every check decided after the resend"))
        .collect();
    assert!(outcomes.iter().all(|o| o.allowed));
    let (calls, _) = redis.command_stats("evalsha");
    assert!(
        calls < CHECKS as u64,
        "the checks travelled in batches: {calls} calls for {CHECKS} checks"
    );
    assert!(
        outcomes.iter().any(|o| o.deduplicated),
        "the lost batch was resent and found its record"
    );
    // One unit before, one a concurrent check: the lost batch ran once, not twice.
    assert_eq!(
        redis.bucket_state(&key, &["v", "w", "t"]).1[0],
        (1 + CHECKS) as f64
    );
}

#[tokio::test]
async fn an_instance_with_a_shorter_deadline_never_cuts_another_instances_call_records_short() {
    use sluice::config::LimiterTarget;
    use sluice::limiter::{Limiter, RedisOptions};

    let redis = RedisServer::start();
    let target = LimiterTarget::Redis(redis.url());
    // Records are kept 4 deadlines: 8 s on the first instance, 1 s on the second.
    let connect = |timeout| {
        Limiter::connect(
            &target,
            RedisOptions {
                timeout,
                connections: 1,
            },
        )
    };
    let patient = connect(Duration::from_secs(2)).await.unwrap();
    let hasty = connect(Duration::from_millis(250)).await.unwrap();
    let tenant = uuid::Uuid::new_v4().to_string();
    // One clock for every check, so all records fall into the same quarter second.
    let now = 1_000_000_000_i64;
    let request = one_unit_check(&tenant, Some(now));
    assert!(patient.check(&request).await.unwrap().allowed);
    assert!(hasty.check(&request).await.unwrap().allowed);
    assert!(patient.check(&request).await.unwrap().allowed);
    assert!(hasty.check(&request).await.unwrap().allowed);
    // Each instance's records share a hash with those kept as long, named with their TTL.
    let slot = now / 250;
    let long = format!("slq:{{{tenant}}}:{slot}:8000");
    let short = format!("slq:{{{tenant}}}:{slot}:1000");
    let mut records = redis
        .cli(&["KEYS", &format!("slq:{{{tenant}}}:*")])
        .lines()
        .map(|k| k.trim().to_owned())
        .collect::<Vec<_>>();
    records.sort();
    assert_eq!(records, vec![short.clone(), long.clone()]);
    assert_eq!(redis.cli(&["HLEN", &long]).trim(), "2", "both in {long}");
    assert_eq!(redis.cli(&["HLEN", &short]).trim(), "2", "both in {short}");
    let ttl = |key: &str| -> i64 { redis.cli(&["PTTL", key]).trim().parse().unwrap() };
    assert!(
        ttl(&long) > 6_000,
        "the first instance's records still have most of their 8 s: {} ms",
        ttl(&long)
    );
    assert!(
        (1..=1_000).contains(&ttl(&short)),
        "the second's are kept its 1 s: {} ms",
        ttl(&short)
    );
}

/// A call's first send cannot have a record to find, so the script writes one without looking
/// (`HSET` and one `PEXPIRE`, no `HGET` and no `PTTL`); only a resend looks
/// (`a_check_resent_after_its_reply_was_lost_is_counted_once`).
#[tokio::test]
async fn a_first_send_writes_its_record_without_looking_for_one() {
    use sluice::config::LimiterTarget;
    use sluice::limiter::{Limiter, RedisOptions};

    let redis = RedisServer::start();
    let options = RedisOptions {
        timeout: Duration::from_secs(2),
        connections: 1,
    };
    let limiter = Limiter::connect(&LimiterTarget::Redis(redis.url()), options)
        .await
        .unwrap();
    let tenant = uuid::Uuid::new_v4().to_string();
    let request = one_unit_check(&tenant, None);
    // The first call loads the script (`NOSCRIPT`, then `EVAL`), which looks for a record: an
    // earlier send may have run on a Redis that has lost its scripts since.
    assert!(limiter.check(&request).await.unwrap().allowed);
    assert_eq!(redis.command_stats("eval").0, 1, "the script loaded");
    redis.cli(&["CONFIG", "RESETSTAT"]);
    for _ in 0..3 {
        assert!(limiter.check(&request).await.unwrap().allowed);
    }
    assert_eq!(redis.command_stats("evalsha").0, 3, "three calls");
    assert_eq!(redis.command_stats("hget").0, 0, "no record looked up");
    assert_eq!(redis.command_stats("pttl").0, 0, "no TTL read");
    assert_eq!(redis.command_stats("hset").0, 3, "a record a call");
    // A bucket is a packed string (`--redis-bucket-layout`), written with its TTL in one
    // command: no `HSET` and no `PEXPIRE` of its own.
    assert_eq!(redis.command_stats("set").0, 3, "a bucket a call");
    // A minute that began between the first check and these three adds its active-key
    // HyperLogLog, and its PEXPIRE: one more key of the tenant's `slk:`.
    let minutes = redis.keys(&format!("slk:{{{tenant}}}:*")).len() as u64;
    assert_eq!(
        redis.command_stats("pexpire").0,
        3 + (minutes - 1),
        "the records' TTLs, and the HyperLogLog of a new minute"
    );
    assert_call_records(&redis, &tenant, 4);
}

#[tokio::test]
async fn three_instances_keep_a_local_rule_near_its_limit_while_redis_is_down() {
    let mut redis = RedisServer::start();
    let database = shared_postgres().fresh_database().await;
    let mut apps = Vec::new();
    for _ in 0..3 {
        let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
        config.database_url = Some(database.clone());
        config.redis_url = Some(redis.url());
        config.redis_timeout_ms = DEADLINE_MS;
        apps.push(spawn_app(config).await);
    }
    let op = apps[0].operator_key().await;
    // A token bucket of 30 an hour: each instance's share (10) refills one token in 6
    // minutes, and no window edge can fall inside the test. A fixed window of 10 minutes
    // once rolled over mid-test in CI and every instance admitted 3 more (39).
    let mut local = rule(
        "local",
        "exact",
        Some("GET /local"),
        "token_bucket",
        30,
        3_600_000,
    );
    local["failure_mode"] = json!("local");
    let t = setup_tenant(&apps[0], &op, &[local]).await;
    // Every instance counts the fleet from the heartbeats before Redis goes.
    let started = Instant::now();
    while apps.iter().any(|a| a.dashboard.live_instances() != 3) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the instances see each other"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    redis.stop();
    let route = json!({ "route": "GET /local" });
    let (mut admitted, mut denied) = (0, 0);
    for round in 0..30 {
        for app in &apps {
            let (status, _, body) = app.check(&t.check_key, route.clone()).await;
            assert_eq!(body["degraded"], "local", "round {round}: {status} {body}");
            match status {
                200 => admitted += 1,
                429 => denied += 1,
                other => panic!("{other}: {body}"),
            }
        }
    }
    eprintln!("Redis down, limit 30 over 3 instances: {admitted} admitted, {denied} denied of 90");
    assert!(
        (15..=33).contains(&admitted),
        "{admitted} admitted: between half the limit and the limit plus 10%"
    );
    assert_eq!(admitted, 30, "each instance holds a third of 30");
    assert!(apps[0].metric("sluice_local_decisions_total").await >= 30.0);
}

#[tokio::test]
async fn the_local_fallback_holds_a_tenant_to_its_quota_of_live_buckets() {
    let mut redis = RedisServer::start();
    let app = distributed(&redis).await;
    let op = app.operator_key().await;
    let mut local = rule("local", "all", None, "gcra", 100, 60_000);
    local["failure_mode"] = json!("local");
    local["scope"] = json!("subject");
    let t = setup_tenant(&app, &op, &[local]).await;
    let quotas = format!("/v1/admin/tenants/{}/quotas", t.id);
    let body = json!({ "max_live_buckets": 2 });
    let (status, _, set) = app.call("PUT", &quotas, Some(&op), Some(&body)).await;
    assert_eq!(status, 200, "{set}");
    redis.stop();
    let check = |subject: &str| {
        app.check(
            &t.check_key,
            json!({ "route": "GET /", "subject": subject }),
        )
    };
    for subject in ["a", "b"] {
        let (status, _, body) = check(subject).await;
        assert_eq!(
            (status, body["degraded"].as_str()),
            (200, Some("local")),
            "{body}"
        );
    }
    let (status, headers, problem) = check("c").await;
    assert_eq!(status, 429, "{problem}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert!(
        problem["detail"].as_str().unwrap().contains("quota is 2"),
        "{problem}"
    );
    // A subject it holds goes on.
    assert_eq!(check("a").await.0, 200);
}

#[tokio::test]
async fn a_cluster_primary_failing_over_is_answered_by_the_failure_mode_and_recovers() {
    use crate::services::RedisCluster;

    let mut cluster = RedisCluster::start_with_replicas();
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(shared_postgres().fresh_database().await);
    config.redis_cluster_nodes = cluster.urls();
    config.redis_timeout_ms = DEADLINE_MS;
    let app = spawn_app(config).await;
    let op = app.operator_key().await;
    let limit = 400;
    let mut open = rule(
        "open",
        "exact",
        Some("GET /open"),
        "fixed_window",
        limit,
        600_000,
    );
    open["failure_mode"] = json!("open");
    let t = setup_tenant(&app, &op, &[open]).await;
    let route = json!({ "route": "GET /open" });
    let slot = sluice::limiter::keys::slot(&sluice::limiter::keys::bucket(&t.id, "x", None));
    let primary = cluster.master_of(slot);

    // Under a steady stream of checks, the tenant's primary dies; its replica takes over.
    let (mut decided, mut failed_open, mut slowest) = (0_u64, 0_u64, Duration::ZERO);
    for _ in 0..100 {
        let (status, _, body) = app.check(&t.check_key, route.clone()).await;
        assert_eq!((status, body.get("degraded")), (200, None), "{body}");
        decided += 1;
    }
    cluster.nodes[primary].stop();
    let killed = Instant::now();
    let mut outage: Option<Duration> = None;
    let mut recovered = None;
    while killed.elapsed() < Duration::from_secs(30) {
        let started = Instant::now();
        let (status, _, body) = app.check(&t.check_key, route.clone()).await;
        let took = started.elapsed();
        slowest = slowest.max(took);
        assert_eq!(status, 200, "a fail-open rule never refuses: {body}");
        if body.get("degraded").is_some() {
            assert_eq!(body["degraded"], "fail_open", "{body}");
            failed_open += 1;
            outage.get_or_insert_with(|| killed.elapsed());
        } else {
            decided += 1;
            if outage.is_some() && recovered.is_none() {
                recovered = Some(killed.elapsed());
            }
            if recovered.is_some_and(|r| killed.elapsed() > r + Duration::from_secs(1)) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let recovered = recovered.expect("checks are decided by Redis again, with no restart");
    // What the promoted replica remembers: the counter is the decisions it saw; a write that
    // the dead primary had not yet replicated is lost, and can be admitted once more.
    let remaining = app.check(&t.check_key, route.clone()).await.2["remaining"]
        .as_u64()
        .unwrap();
    decided += 1;
    let counted = limit - remaining;
    eprintln!(
        "failover: {failed_open} checks failed open between the kill and {recovered:?}; slowest check {slowest:?}; \
         {decided} decided by Redis, the promoted replica counts {counted} ({} lost)",
        decided.saturating_sub(counted)
    );
    assert!(failed_open > 0, "the outage was seen");
    assert!(
        slowest < Duration::from_millis(DEADLINE_MS * 3),
        "every check is answered near the deadline: {slowest:?}"
    );
    assert!(
        counted <= decided,
        "a failover never creates capacity from nothing"
    );
}

#[tokio::test]
async fn a_graceful_shutdown_lets_the_checks_in_flight_finish() {
    let redis = RedisServer::start();
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(shared_postgres().fresh_database().await);
    config.redis_url = Some(redis.url());
    config.redis_timeout_ms = 1_000;
    let app = spawn_app(config).await;
    let op = app.operator_key().await;
    let mut open = rule("open", "exact", Some("GET /open"), "gcra", 1000, 1000);
    open["failure_mode"] = json!("open");
    let t = setup_tenant(&app, &op, &[open]).await;
    let route = json!({ "route": "GET /open" });
    assert_eq!(app.check(&t.check_key, route.clone()).await.0, 200);

    // Five checks wait on a hung Redis when the shutdown begins.
    redis.pause();
    let url = app.url("/v1/check");
    let checks: Vec<_> = (0..5)
        .map(|_| {
            let (url, key, route) = (url.clone(), t.check_key.clone(), route.clone());
            tokio::spawn(async move {
                let response = reqwest::Client::new()
                    .post(url)
                    .header("x-api-key", key)
                    .json(&route)
                    .send()
                    .await
                    .expect("an answer, not a reset connection");
                let status = response.status().as_u16();
                (status, response.json::<serde_json::Value>().await.unwrap())
            })
        })
        .collect();
    let started = Instant::now();
    while app.metric("sluice_http_requests_in_flight").await < 6.0 {
        // Five checks, and this scrape itself.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the checks are in flight"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let address = app.address;
    app.shutdown().await.unwrap();
    for check in checks {
        let (status, body) = check.await.unwrap();
        assert_eq!(
            (status, body["degraded"].as_str()),
            (200, Some("fail_open")),
            "{body}"
        );
    }
    assert!(
        reqwest::get(format!("http://{address}/healthz"))
            .await
            .is_err(),
        "stopped"
    );
    redis.resume();
}
