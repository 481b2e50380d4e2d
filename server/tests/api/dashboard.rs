//! The live dashboards against real services: the denial rate under the load generator, two
//! instances summed through Redis, Redis slowed with DEBUG SLEEP, active-key cardinality at
//! 10,000 and 100,000 keys (Redis and Cluster), and the live stream's access rules.

use std::time::{Duration, Instant};

use app::dashboard::Range;
use app::rules::{Algorithm, LimitSpec};
use futures::StreamExt;
use serde_json::{json, Value};
use sluice::config::{Config, LimiterTarget};
use sluice::dashboard::series::SeriesStore;
use sluice::dashboard::view::{Frame, Scope};
use sluice::limiter::{keys, CheckRequest, Limiter, RedisOptions, RuleCheck};
use sluice::telemetry::Outcome;

use crate::console_admin::signed_in;
use crate::helpers::{embedded_with_operator, rule, setup_tenant, spawn_app, TestApp};
use crate::loadgen::{self, Load, Mix};
use crate::services::{shared_postgres, RedisCluster, RedisServer};

async fn distributed(database_url: &str, redis_url: &str) -> TestApp {
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(database_url.to_owned());
    config.redis_url = Some(redis_url.to_owned());
    spawn_app(config).await
}

/// Polls `app`'s dashboard until `done` holds for the frame of `scope`, for at most `within`.
async fn frame_when(
    app: &TestApp,
    scope: &Scope,
    within: Duration,
    done: impl Fn(&Frame) -> bool,
) -> Frame {
    let deadline = Instant::now() + within;
    loop {
        let frame = app.dashboard.frame(scope, Range::FiveMinutes);
        if done(&frame) || Instant::now() > deadline {
            return frame;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn decided(frame: &Frame) -> u64 {
    frame.total(Outcome::Allowed) + frame.total(Outcome::Denied)
}

fn load(app: &TestApp, key: &str, rate: u32, seconds: u64) -> Load {
    Load {
        url: app.url(""),
        keys: vec![key.to_owned()],
        route: "GET /limited".into(),
        subjects: 1,
        mix: Mix::Hot,
        rate,
        duration: Duration::from_secs(seconds),
        max_in_flight: 256,
    }
}

fn limited(limit: u64) -> Value {
    rule(
        "limited",
        "exact",
        Some("GET /limited"),
        "fixed_window",
        limit,
        1_000,
    )
}

#[tokio::test]
async fn the_dashboard_denial_rate_matches_the_load_generators_429_rate() {
    let redis = RedisServer::start();
    let app = distributed(&shared_postgres().fresh_database().await, &redis.url()).await;
    let op = app.operator_key().await;
    let t = setup_tenant(&app, &op, &[limited(150)]).await;
    let report = loadgen::run(&app.client, &load(&app, &t.check_key, 400, 4)).await;
    assert!(
        report.denied > 0 && report.allowed > 0,
        "the load should be partly denied: {report:?}"
    );
    let seen = (report.allowed + report.denied) as u64;
    let scope = Scope::Tenant(t.id.clone());
    let frame = frame_when(&app, &scope, Duration::from_secs(5), |f| decided(f) >= seen).await;
    let expected = report.denied as f64 / seen as f64;
    let shown = frame.denial_rate().expect("decisions on the dashboard");
    eprintln!(
        "load generator: {} allowed, {} denied ({:.2}%); dashboard: {} allowed, {} denied ({:.2}%)",
        report.allowed,
        report.denied,
        expected * 100.0,
        frame.total(Outcome::Allowed),
        frame.total(Outcome::Denied),
        shown * 100.0
    );
    assert!(
        (shown - expected).abs() <= 0.05 * expected,
        "dashboard {shown:.4} vs load generator {expected:.4}"
    );
    assert_eq!(frame.top_policies[0].policy, "limited");
    let fleet = app.dashboard.frame(&Scope::Fleet, Range::FiveMinutes);
    if report.errors == 0 {
        // Every answer the generator counted is on the dashboard, and nothing else.
        assert_eq!(decided(&frame), seen, "{report:?}");
        assert_eq!(frame.top_policies[0].denied, report.denied as u64);
        assert_eq!(fleet.total(Outcome::Denied), report.denied as u64);
    }
    // This instance is alive in the fleet.
    assert_eq!(fleet.instances.len(), 1);
    assert_eq!(fleet.instances[0].id, app.dashboard.instance_id());
    assert!(
        fleet.shards == vec!["redis".to_owned()],
        "{:?}",
        fleet.shards
    );
}

#[tokio::test]
async fn the_fleet_view_sums_two_instances_under_load() {
    let redis = RedisServer::start();
    let database = shared_postgres().fresh_database().await;
    let a = distributed(&database, &redis.url()).await;
    let b = distributed(&database, &redis.url()).await;
    let op = a.operator_key().await;
    let t = setup_tenant(&a, &op, &[limited(150)]).await;
    // Both instances know the key (B loads it from PostgreSQL on its first check).
    let (load_a, load_b) = (
        load(&a, &t.check_key, 120, 3),
        load(&b, &t.check_key, 100, 3),
    );
    let (ra, rb) = tokio::join!(
        loadgen::run(&a.client, &load_a),
        loadgen::run(&b.client, &load_b),
    );
    assert_eq!((ra.errors, rb.errors), (0, 0), "{ra:?} {rb:?}");
    let allowed = (ra.allowed + rb.allowed) as u64;
    let denied = (ra.denied + rb.denied) as u64;
    assert!(
        denied > 0,
        "the shared limit of 150/s is exceeded: {ra:?} {rb:?}"
    );
    for app in [&a, &b] {
        let frame = frame_when(app, &Scope::Fleet, Duration::from_secs(5), |f| {
            decided(f) >= allowed + denied && f.instances.len() == 2
        })
        .await;
        assert_eq!(
            (frame.total(Outcome::Allowed), frame.total(Outcome::Denied)),
            (allowed, denied),
            "A saw {ra:?}, B saw {rb:?}"
        );
        let mut ids: Vec<&str> = frame.instances.iter().map(|i| i.id.as_str()).collect();
        ids.sort_unstable();
        let mut expected = vec![a.dashboard.instance_id(), b.dashboard.instance_id()];
        expected.sort_unstable();
        assert_eq!(ids, expected);
    }
    // Each instance alone decided only its part: the sum is the fleet's doing.
    assert!(ra.allowed + ra.denied < (allowed + denied) as usize);
}

#[tokio::test]
async fn the_latency_chart_rises_within_three_seconds_of_slowing_redis() {
    let redis = RedisServer::start();
    let app = distributed(&shared_postgres().fresh_database().await, &redis.url()).await;
    let op = app.operator_key().await;
    let t = setup_tenant(&app, &op, &[limited(1_000_000)]).await;
    // Steady checks in the background.
    let client = app.client.clone();
    let url = app.url("/v1/check");
    let key = t.check_key.clone();
    let traffic = tokio::spawn(async move {
        loop {
            let _ = client
                .post(&url)
                .header("x-api-key", &key)
                .json(&json!({ "route": "GET /limited" }))
                .send()
                .await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let slow = |f: &Frame| {
        f.points
            .iter()
            .rev()
            .take(3)
            .filter_map(|p| p.limiter)
            .any(|l| l.max >= 200.0)
    };
    let baseline = frame_when(&app, &Scope::Fleet, Duration::from_secs(5), |f| {
        f.recent_latency.is_some()
    })
    .await;
    assert!(
        baseline.recent_latency.is_some() && !slow(&baseline),
        "a fast baseline first: {:?}",
        baseline.recent_latency
    );

    let port = redis.url();
    let slowed = Instant::now();
    let sleeper = std::thread::spawn(move || {
        let mut conn = redis::Client::open(port).unwrap().get_connection().unwrap();
        redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.6")
            .query::<String>(&mut conn)
    });
    let frame = frame_when(&app, &Scope::Fleet, Duration::from_secs(3), slow).await;
    let took = slowed.elapsed();
    traffic.abort();
    assert_eq!(sleeper.join().unwrap().unwrap(), "OK");
    assert!(
        slow(&frame),
        "no latency point of 200 ms or more within 3 s: {:?}",
        frame
            .points
            .iter()
            .rev()
            .take(5)
            .map(|p| p.limiter)
            .collect::<Vec<_>>()
    );
    eprintln!("the latency chart rose {took:?} after DEBUG SLEEP");
    assert!(took <= Duration::from_secs(3), "{took:?}");
    // The chart is drawn from the same frame.
    let svg = sluice::dashboard::render::latency_svg(&frame).unwrap();
    assert!(svg.contains("latency (ms)"));
}

/// Checks `count` distinct buckets of `tenant` through the check script, 8 a call.
async fn touch(limiter: &Limiter, tenant: &str, count: usize) {
    let spec = LimitSpec::new(Algorithm::FixedWindow, 10, 60_000);
    let requests: Vec<CheckRequest> = (0..count)
        .collect::<Vec<_>>()
        .chunks(8)
        .map(|chunk| CheckRequest {
            tenant: tenant.to_owned(),
            rules: chunk
                .iter()
                .map(|i| RuleCheck {
                    key: keys::bucket(tenant, "r.fw", Some(&format!("user-{i}"))),
                    spec,
                    cost: 1,
                    shadow: false,
                })
                .collect(),
            request_id: None,
            now_ms: None,
            dry_run: false,
            max_live_keys: None,
            reserve: None,
            lease: None,
        })
        .collect();
    let results: Vec<bool> = futures::stream::iter(requests)
        .map(|r| async move { limiter.check(&r).await.unwrap().allowed })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(results.into_iter().all(|a| a));
}

fn within_two_percent(counted: u64, truth: u64) {
    let error = (counted as f64 - truth as f64).abs() / truth as f64;
    eprintln!(
        "active keys: counted {counted} of {truth} (error {:.3}%)",
        error * 100.0
    );
    assert!(error <= 0.02, "counted {counted} for {truth} keys");
}

/// A limiter on `target` and a series store on the same connections (2 s deadline, as the
/// dashboards' own connection has).
async fn on_redis(target: &LimiterTarget) -> (Limiter, SeriesStore) {
    let limiter = Limiter::connect(
        target,
        RedisOptions {
            timeout: sluice::dashboard::series::DEADLINE,
            connections: 4,
        },
    )
    .await
    .unwrap();
    let Limiter::Redis(redis, _) = &limiter else {
        panic!("a Redis limiter")
    };
    let store = SeriesStore::Redis(redis.clone());
    (limiter, store)
}

/// Active-key counts that were all read.
fn read(
    (counts, failed): (std::collections::HashMap<String, u64>, Vec<String>),
) -> std::collections::HashMap<String, u64> {
    assert!(failed.is_empty(), "{failed:?}");
    counts
}

async fn cardinality_on(target: LimiterTarget, sizes: &[usize]) {
    let (limiter, store) = on_redis(&target).await;
    let tenants: Vec<String> = sizes
        .iter()
        .enumerate()
        .map(|(i, n)| format!("card-{n}-{i}"))
        .collect();
    for (tenant, &n) in tenants.iter().zip(sizes) {
        touch(&limiter, tenant, n).await;
        // Checking the same buckets again adds nothing.
        touch(&limiter, tenant, n / 10).await;
    }
    let counts = store.active_keys(&tenants, sluice::store::now_ms()).await;
    let counts = read(counts);
    for (tenant, &n) in tenants.iter().zip(sizes) {
        within_two_percent(counts[tenant], n as u64);
    }
    within_two_percent(counts.values().sum(), sizes.iter().sum::<usize>() as u64);
    // A dry run is not activity.
    let ghost = "card-ghost".to_owned();
    let mut dry = CheckRequest {
        tenant: ghost.clone(),
        rules: vec![RuleCheck {
            key: keys::bucket(&ghost, "r.fw", None),
            spec: LimitSpec::new(Algorithm::FixedWindow, 10, 60_000),
            cost: 1,
            shadow: false,
        }],
        request_id: None,
        now_ms: None,
        dry_run: true,
        max_live_keys: None,
        reserve: None,
        lease: None,
    };
    limiter.check(&dry).await.unwrap();
    let counts = store
        .active_keys(std::slice::from_ref(&ghost), sluice::store::now_ms())
        .await;
    let counts = read(counts);
    assert!(counts.is_empty(), "{counts:?}");
    dry.dry_run = false;
    limiter.check(&dry).await.unwrap();
    let counts = store
        .active_keys(std::slice::from_ref(&ghost), sluice::store::now_ms())
        .await;
    let counts = read(counts);
    assert_eq!(counts[&ghost], 1);
}

#[tokio::test]
async fn a_second_written_again_after_a_lost_reply_is_counted_once() {
    let redis = RedisServer::start();
    let (_limiter, store) = on_redis(&LimiterTarget::Redis(redis.url())).await;
    let beat = |id: &str| sluice::dashboard::series::Beat {
        id: id.into(),
        version: "test".into(),
        mode: "distributed".into(),
        limiter: "redis".into(),
        started_ms: sluice::store::now_ms(),
        last_ms: sluice::store::now_ms(),
        checks: 3,
    };
    let second = sluice::store::now_ms() / 1000;
    let fields = vec![
        ("c\x1ft\x1fp\x1fallowed".to_owned(), 3),
        ("rx\x1fredis\x1fa".to_owned(), 700),
    ];
    // Instance a writes its second twice (a retry), instance b once.
    store.write(second, &fields, &beat("a")).await.unwrap();
    store.write(second, &fields, &beat("a")).await.unwrap();
    store.write(second, &fields, &beat("b")).await.unwrap();
    let read = store.seconds(second, second).await.unwrap();
    assert_eq!(read[0].1["c\x1ft\x1fp\x1fallowed"], 6, "{read:?}");
    let minute = store
        .minutes(second.div_euclid(60), second.div_euclid(60))
        .await
        .unwrap();
    assert_eq!(minute[0].1["c\x1ft\x1fp\x1fallowed"], 6);
    let alive = store.alive(sluice::store::now_ms()).await.unwrap();
    assert_eq!(alive.len(), 2, "{alive:?}");
}

#[tokio::test]
async fn active_keys_are_within_two_percent_at_10k_and_100k_on_redis() {
    let redis = RedisServer::start();
    cardinality_on(LimiterTarget::Redis(redis.url()), &[10_000, 100_000]).await;
}

#[tokio::test]
async fn active_keys_are_within_two_percent_at_10k_on_a_cluster() {
    let cluster = RedisCluster::start();
    cardinality_on(LimiterTarget::Cluster(cluster.urls()), &[10_000, 10_000]).await;
}

/// Reads server-sent events until `n` `frame` events have arrived; returns their data.
async fn frames(mut response: reqwest::Response, n: usize) -> Vec<String> {
    let mut text = String::new();
    let mut out = Vec::new();
    while out.len() < n {
        let chunk = tokio::time::timeout(Duration::from_secs(5), response.chunk())
            .await
            .expect("a frame within 5 s")
            .unwrap()
            .expect("the stream stays open");
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = text.find("\n\n") {
            let event: String = text.drain(..end + 2).collect();
            if event.lines().any(|l| l == "event: frame") {
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data: ").or(l.strip_prefix("data:")))
                    .collect();
                out.push(data.join("\n"));
            }
        }
    }
    out
}

fn latest(html: &str) -> i64 {
    let at = html.find("data-latest=\"").unwrap() + "data-latest=\"".len();
    html[at..].split('"').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_live_stream_pushes_a_frame_every_second_to_those_allowed() {
    let password = "correct horse battery staple";
    let (app, _dir) = embedded_with_operator(password).await;
    let op = app.operator_key().await;
    // A day's window: the bucket stays live (embedded active keys count live buckets), and
    // no window ends mid-test.
    let minute = rule(
        "limited",
        "exact",
        Some("GET /limited"),
        "fixed_window",
        5,
        crate::helpers::DAY_MS,
    );
    let t = setup_tenant(&app, &op, &[minute]).await;
    for _ in 0..8 {
        app.check(&t.check_key, json!({ "route": "GET /limited" }))
            .await;
    }
    let anonymous = app.get("/live/dashboard").await;
    assert_eq!(anonymous.status(), 401);

    let operator = signed_in(&app, "admin@localhost", password).await;
    let bad_range = operator
        .get(app.url("/live/dashboard?range=7d"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_range.status(), 400);
    assert!(bad_range.text().await.unwrap().contains("5m, 1h or 24h"));
    let response = operator
        .get(app.url("/live/dashboard?range=1h"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let started = Instant::now();
    let pushed = frames(response, 3).await;
    let arrived = sluice::store::now_ms();
    // A frame reaches the browser less than 2 s after the second it ends with is over.
    let lag_ms = arrived - (latest(&pushed[2]) + 1) * 1000;
    eprintln!("the last frame arrived {lag_ms} ms after its second ended");
    assert!(
        (0..2000).contains(&lag_ms),
        "the last frame lags {lag_ms} ms"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    assert!(latest(&pushed[2]) > latest(&pushed[0]), "frames move on");
    let last = &pushed[2];
    assert!(last.contains(r#"data-range="1h""#));
    assert!(
        last.contains(r#"data-allowed="5""#) && last.contains(r#"data-denied="3""#),
        "{last}"
    );
    assert_eq!(last.matches(r#"<div class="plot""#).count(), 2);
    assert!(last.contains("instances"));
    // The active keys of real tenants reach /metrics (the console's own sign-in buckets do not).
    let active = frame_when(&app, &Scope::Fleet, Duration::from_secs(8), |f| {
        f.active_total >= 1
    })
    .await;
    assert_eq!(active.active_total, 1, "{:?}", active.active_top);
    assert_eq!(app.metric("sluice_active_keys ").await, 1.0);

    // A tenant admin sees their own tenant, not the fleet and not another tenant.
    let admin_password = sluice::cli::create_user(
        &sluice::admin::AdminService::offline(app.db.clone()),
        "ta@example.com",
        Some(&t.id),
    )
    .await
    .unwrap();
    let other = setup_tenant(&app, &op, &[]).await;
    let admin = signed_in(&app, "ta@example.com", &admin_password).await;
    let status = |path: String| {
        let admin = admin.clone();
        let url = app.url(&path);
        async move { admin.get(url).send().await.unwrap().status().as_u16() }
    };
    assert_eq!(status("/live/dashboard".into()).await, 403);
    assert_eq!(
        status(format!("/live/dashboard?tenant={}", other.id)).await,
        404
    );
    let own = admin
        .get(app.url(&format!("/live/dashboard?tenant={}", t.id)))
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), 200);
    let frame = &frames(own, 1).await[0];
    assert!(frame.contains(r#"data-denied="3""#));
    assert!(!frame.contains("Instances"), "no fleet tables for a tenant");
}

/// Opens the fleet dashboard's stream as `browser`.
async fn open_stream(app: &TestApp, browser: &reqwest::Client) -> reqwest::Response {
    browser
        .get(app.url("/live/dashboard"))
        .send()
        .await
        .unwrap()
}

/// Reads `response` until the server ends it; returns how many frames came. Panics if it is
/// still open after `patience`.
async fn frames_until_end(mut response: reqwest::Response, patience: Duration) -> usize {
    let started = Instant::now();
    let mut frames = 0;
    loop {
        let left = patience.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, response.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                frames += String::from_utf8_lossy(&chunk)
                    .matches("event: frame")
                    .count();
            }
            Ok(Ok(None) | Err(_)) => return frames,
            Err(_) => panic!("the stream was still open after {patience:?} ({frames} frames)"),
        }
    }
}

#[tokio::test]
async fn a_dashboard_stream_ends_within_seconds_of_sign_out() {
    let password = "correct horse battery staple";
    let (app, _dir) = embedded_with_operator(password).await;
    let operator = signed_in(&app, "admin@localhost", password).await;
    let stream = open_stream(&app, &operator).await;
    assert_eq!(stream.status(), 200);
    let signed_out = operator
        .post(app.url("/api/sign_out"))
        .header("content-type", "application/x-www-form-urlencoded")
        .send()
        .await
        .unwrap();
    assert_eq!(signed_out.status(), 200);
    // It re-reads the session from the store every two frames (about two seconds).
    let frames = frames_until_end(stream, Duration::from_secs(10)).await;
    assert!(frames <= 4, "{frames} frames after sign-out");
}

#[tokio::test]
async fn one_session_holds_a_few_dashboard_streams_at_most() {
    let password = "correct horse battery staple";
    let (app, _dir) = embedded_with_operator(password).await;
    let operator = signed_in(&app, "admin@localhost", password).await;
    let mut open = Vec::new();
    for _ in 0..sluice::transport::stream_slots::STREAMS_PER_SESSION {
        let stream = open_stream(&app, &operator).await;
        assert_eq!(stream.status(), 200);
        open.push(stream);
    }
    let refused = open_stream(&app, &operator).await;
    assert_eq!(refused.status(), 429);
    assert!(refused.text().await.unwrap().contains("close one"));
    // Another session is not affected.
    let other = signed_in(&app, "admin@localhost", password).await;
    let theirs = open_stream(&app, &other).await;
    assert_eq!(theirs.status(), 200);
    // Closing one frees its place (the server notices at its next frame).
    drop(open.pop());
    let mut reopened = false;
    for _ in 0..100 {
        let again = open_stream(&app, &operator).await;
        if again.status() == 200 {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reopened, "a closed stream's place is given back");
}
