//! Concurrency rules over real HTTP: a check answers a lease, `POST /v1/release` frees it, an
//! unreleased lease ends after the rule's period; on the in-process limiter, on Redis and on
//! a Redis Cluster; and 500 concurrent acquisitions over three instances sharing a Redis
//! never hold more than the limit at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::{
    app_on, distributed_config, setup_tenant, spawn_app, time_until, Backend, TestApp,
};
use crate::services::{shared_postgres, RedisServer};

fn in_flight(limit: u64, period_ms: u64) -> Value {
    json!({ "name": "in-flight", "match": "default", "scope": "subject",
            "algorithm": "concurrency", "limit": limit, "period_ms": period_ms })
}

async fn post(app: &TestApp, path: &str, key: &str, body: Value) -> (u16, Value) {
    let (status, _, body) = app.call("POST", path, Some(key), Some(&body)).await;
    (status, body)
}

async fn leases_over_http(app: &TestApp) {
    let op = app.operator_key().await;
    let t = setup_tenant(app, &op, &[in_flight(2, 60_000)]).await;
    let alice = json!({ "route": "GET /report", "subject": "alice" });

    let (status, headers, first) = app.check(&t.check_key, alice.clone()).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["remaining"], 1);
    assert_eq!(
        headers["ratelimit-policy"],
        "\"in-flight\";q=2;qu=\"concurrent-requests\""
    );
    let lease = first["lease"].as_str().unwrap().to_owned();
    assert_eq!(lease.len(), 32);
    let (status, _, second) = app.check(&t.check_key, alice.clone()).await;
    assert_eq!(status, 200, "{second}");
    // Two in flight: the third waits for a release, or for the first lease to end.
    let (status, headers, third) = app.check(&t.check_key, alice.clone()).await;
    assert_eq!(status, 429, "{third}");
    assert_eq!(third.get("lease"), None);
    assert_eq!(headers["retry-after"], "60");
    // Bob has slots of his own.
    let (status, _, _) = app
        .check(
            &t.check_key,
            json!({ "route": "GET /report", "subject": "bob" }),
        )
        .await;
    assert_eq!(status, 200);

    let (status, body) = post(app, "/v1/release", &t.check_key, json!({ "lease": lease })).await;
    assert_eq!((status, &body["repeated"]), (200, &json!(false)), "{body}");
    let (status, body) = post(app, "/v1/release", &t.check_key, json!({ "lease": lease })).await;
    assert_eq!((status, &body["repeated"]), (200, &json!(true)), "{body}");
    let (status, _, _) = app.check(&t.check_key, alice.clone()).await;
    assert_eq!(status, 200, "the released slot is free again");
    let (status, _, _) = app.check(&t.check_key, alice.clone()).await;
    assert_eq!(status, 429);

    // Errors: unknown (or another tenant's) is 404, bad input 400, an admin key 403.
    let (status, body) = post(
        app,
        "/v1/release",
        &t.check_key,
        json!({ "lease": "0".repeat(32) }),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("ended by itself"),
        "{body}"
    );
    let other = setup_tenant(app, &op, &[in_flight(2, 60_000)]).await;
    let second_lease = second["lease"].as_str().unwrap();
    let (status, _) = post(
        app,
        "/v1/release",
        &other.check_key,
        json!({ "lease": second_lease }),
    )
    .await;
    assert_eq!(status, 404);
    for body in [
        json!({}),
        json!({ "lease": "xyz" }),
        json!({ "lease": "0".repeat(32), "x": 1 }),
    ] {
        let (status, answer) = post(app, "/v1/release", &t.check_key, body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
    }
    let (status, _) = post(
        app,
        "/v1/release",
        &t.admin_key,
        json!({ "lease": second_lease }),
    )
    .await;
    assert_eq!(status, 403);

    // A rule cannot have a penalty, or a limit above 1,000.
    let rules = format!("/v1/admin/tenants/{}/rules", t.id);
    for (change, field) in [("penalty", json!(true)), ("limit", json!(1_001))] {
        let mut body = in_flight(2, 1_000);
        body["name"] = json!("bad");
        body[change] = field;
        let (status, answer) = post(app, &rules, &t.admin_key, body).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["errors"][0]["field"], change, "{answer}");
    }
    assert_eq!(app.metric("sluice_lease_releases_total").await, 1.0);
}

#[tokio::test]
async fn leases_in_process() {
    leases_over_http(&app_on(Backend::InProcess).await.app).await;
}

#[tokio::test]
async fn leases_on_redis() {
    leases_over_http(&app_on(Backend::Redis).await.app).await;
}

#[tokio::test]
async fn leases_on_a_cluster() {
    leases_over_http(&app_on(Backend::Cluster).await.app).await;
}

/// The acceptance case: 500 requests, all at once, each acquiring a slot of a limit of 20 on
/// one of three instances (retrying while denied), holding it (the first ones until 20 are
/// held, so that the limit is reached however slow the machine), then releasing it on
/// another instance. The requests count who holds a slot: never more than 20 at once, and
/// 20 at some point. Afterwards every slot is back; and twenty leases never released come
/// back by themselves after the rule's period.
#[tokio::test]
async fn five_hundred_acquisitions_over_three_instances_never_hold_more_than_twenty() {
    let redis = RedisServer::start();
    let database = shared_postgres().fresh_database().await;
    let mut instances = Vec::new();
    for _ in 0..3 {
        // A deadline of 5 s rather than 250 ms: 500 requests at once on a loaded 2-core CI
        // machine once took a release past 250 ms and got the failure mode's 503. This test
        // is about exactness; the deadline's own behaviour is tested in redis_failure.rs.
        let mut config = distributed_config(&database, &redis.url());
        config.redis_timeout_ms = 5_000;
        instances.push(Arc::new(spawn_app(config).await));
    }
    let op = instances[0].operator_key().await;
    let t = setup_tenant(
        &instances[0],
        &op,
        &[
            in_flight(20, 60_000),
            json!({ "name": "short", "match": "prefix", "route": "GET /short", "scope": "tenant",
                    "algorithm": "concurrency", "limit": 20, "period_ms": 1_500 }),
        ],
    )
    .await;
    let key = Arc::new(t.check_key.clone());
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let denials = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..500usize)
        .map(|i| {
            let (instances, key) = (instances.clone(), key.clone());
            let (holding, most, denials) = (holding.clone(), most.clone(), denials.clone());
            tokio::spawn(async move {
                let body = json!({ "route": "GET /work", "subject": "acme" });
                let lease = loop {
                    let (status, _, answer) = instances[i % 3].check(&key, body.clone()).await;
                    if status == 200 {
                        break answer["lease"].as_str().unwrap().to_owned();
                    }
                    assert_eq!(status, 429, "{answer}");
                    denials.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                };
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // The work the slot is for: until the limit has been full once (so a loaded
                // machine still fills it; 5 s at most), then a moment.
                let started = Instant::now();
                while most.load(Ordering::SeqCst) < 20 && started.elapsed() < Duration::from_secs(5)
                {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                let (status, _, answer) = instances[(i + 1) % 3]
                    .call(
                        "POST",
                        "/v1/release",
                        Some(&key),
                        Some(&json!({ "lease": lease })),
                    )
                    .await;
                assert_eq!(status, 200, "{answer}");
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    eprintln!(
        "500 acquisitions: at most {most} held at once, {} denials retried",
        denials.load(Ordering::Relaxed)
    );
    assert!(most <= 20, "{most} slots held at once");
    assert_eq!(
        most, 20,
        "the load never filled the limit, so it proves nothing"
    );
    for app in &instances {
        assert_eq!(app.metric("sluice_cached_denials_total").await, 0.0);
    }

    // Every slot is back: twenty fit, the twenty-first does not.
    let acme = json!({ "route": "GET /work", "subject": "acme" });
    for n in 0..20 {
        let (status, _, body) = instances[n % 3].check(&key, acme.clone()).await;
        assert_eq!(status, 200, "slot {n}: {body}");
    }
    assert_eq!(instances[0].check(&key, acme).await.0, 429);

    // Twenty leases of 1.5 s never released: the slots come back by themselves, all of them,
    // and not before the leases end.
    let short = json!({ "route": "GET /short" });
    let taken = Instant::now();
    for n in 0..20 {
        assert_eq!(instances[n % 3].check(&key, short.clone()).await.0, 200);
    }
    assert_eq!(instances[1].check(&key, short.clone()).await.0, 429);
    let back = time_until(
        async || instances[2].check(&key, short.clone()).await.0 == 200,
        Duration::from_secs(10),
    )
    .await;
    assert!(
        taken.elapsed() >= Duration::from_millis(1_400),
        "a slot came back after {:?}, before its lease ended",
        taken.elapsed()
    );
    eprintln!("the unreleased leases ended {back:?} after the first denial");
    // The others end within moments of the first (each is polled: a denial takes nothing).
    for n in 1..20 {
        time_until(
            async || instances[n % 3].check(&key, short.clone()).await.0 == 200,
            Duration::from_secs(2),
        )
        .await;
    }
    assert_eq!(
        instances[0].check(&key, short).await.0,
        429,
        "more than 20 came back"
    );
}
