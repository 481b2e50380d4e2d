//! `POST /v1/reserve` and `POST /v1/settle` over real HTTP, on the in-process limiter, on
//! Redis and on a Redis Cluster: an estimate charged at once and settled at the real cost,
//! the refund seen in the next answer's headers, settling once, the errors; and on three
//! instances sharing a Redis, a reservation made on one is settled on another, whose deny
//! cache lets go of the refunded bucket at once.

use std::time::Instant;

use serde_json::{json, Value};

use crate::helpers::{app_on, distributed, rule, setup_tenant, Backend, TestApp};
use crate::services::{shared_postgres, RedisServer};

/// 1,000 tokens a day per user: a refund is plain in `remaining`, and refill too slow to blur
/// it while a test runs.
fn tokens() -> Value {
    json!({ "name": "tokens", "match": "default", "scope": "subject",
            "algorithm": "token_bucket", "limit": 1_000, "period_ms": 86_400_000 })
}

fn remaining(headers: &reqwest::header::HeaderMap) -> u64 {
    headers["x-ratelimit-remaining"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn post(app: &TestApp, path: &str, key: &str, body: Value) -> (u16, Value) {
    let (status, _, body) = app.call("POST", path, Some(key), Some(&body)).await;
    (status, body)
}

async fn reserve_and_settle_over_http(app: &TestApp) {
    let op = app.operator_key().await;
    let t = setup_tenant(
        app,
        &op,
        &[
            tokens(),
            rule(
                "tiny",
                "exact",
                Some("GET /tiny"),
                "fixed_window",
                1,
                3_600_000,
            ),
        ],
    )
    .await;
    let alice = |cost: u64| json!({ "route": "GET /llm", "subject": "alice", "cost": cost });

    // Reserve 100: answered like a check, plus the reservation.
    let (status, headers, body) = app
        .call("POST", "/v1/reserve", Some(&t.check_key), Some(&alice(100)))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(remaining(&headers), 900);
    // The data plane's policy, as on /v1/check: nothing a browser may do with the answer.
    assert_eq!(
        headers["content-security-policy"],
        "default-src 'none'; frame-ancestors 'none'"
    );
    assert_eq!(body["allowed"], true);
    assert_eq!(body["policy"], "tokens");
    let id = body["reservation"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 32, "{body}");

    // Settle at 30: 70 back, seen by the next check.
    let (status, body) = post(
        app,
        "/v1/settle",
        &t.check_key,
        json!({ "reservation": id, "cost": 30 }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({ "reservation": id, "estimate": 100, "cost": 30, "repeated": false })
    );
    let (status, headers, _) = app.check(&t.check_key, alice(1)).await;
    assert_eq!(status, 200);
    assert_eq!(remaining(&headers), 969);
    // Settled again at the same cost: the same answer, nothing given back twice; at
    // another cost: 409, and nothing changes.
    let (status, body) = post(
        app,
        "/v1/settle",
        &t.check_key,
        json!({ "reservation": id, "cost": 30 }),
    )
    .await;
    assert_eq!((status, &body["repeated"]), (200, &json!(true)), "{body}");
    let (status, body) = post(
        app,
        "/v1/settle",
        &t.check_key,
        json!({ "reservation": id, "cost": 0 }),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("already settled at cost 30"),
        "{body}"
    );
    let (_, headers, _) = app.check(&t.check_key, alice(1)).await;
    assert_eq!(remaining(&headers), 968);

    // An overrun: reserve 10, settle 500; the bucket pays the 490 as well.
    let (_, body) = post(app, "/v1/reserve", &t.check_key, alice(10)).await;
    let id = body["reservation"].as_str().unwrap().to_owned();
    let (status, _) = post(
        app,
        "/v1/settle",
        &t.check_key,
        json!({ "reservation": id, "cost": 500 }),
    )
    .await;
    assert_eq!(status, 200);
    let (_, headers, _) = app.check(&t.check_key, alice(1)).await;
    assert_eq!(remaining(&headers), 968 - 1 - 10 - 490);

    // A denied reservation makes none, and says why like a check.
    let tiny = json!({ "route": "GET /tiny", "subject": "bob" });
    let (status, body) = post(app, "/v1/reserve", &t.check_key, tiny.clone()).await;
    assert_eq!(status, 200, "{body}");
    let (status, headers, body) = app
        .call("POST", "/v1/reserve", Some(&t.check_key), Some(&tiny))
        .await;
    assert_eq!(status, 429, "{body}");
    assert!(headers.contains_key("retry-after"));
    assert_eq!(body.get("reservation"), None, "{body}");
    // No rule applies: allowed, nothing to settle.
    let (_, body) = post(
        app,
        "/v1/reserve",
        &t.check_key,
        json!({ "route": "GET /nothing" }),
    )
    .await;
    assert_eq!(body.get("reservation"), None, "{body}");
    let (status, _) = post(
        app,
        "/v1/reserve",
        &t.check_key,
        json!({ "route": "GET /llm" }),
    )
    .await;
    assert_eq!(status, 400, "a per-subject rule without a subject");

    // Bad input: a clear 400 for each field; the check endpoint takes no ttl_ms.
    for (path, body, field) in [
        (
            "/v1/reserve",
            json!({ "route": "GET /llm", "subject": "a", "ttl_ms": 10 }),
            "ttl_ms",
        ),
        (
            "/v1/reserve",
            json!({ "route": "GET /llm", "subject": "a", "ttl_ms": 3_600_001 }),
            "ttl_ms",
        ),
        (
            "/v1/check",
            json!({ "route": "GET /llm", "subject": "a", "ttl_ms": 5_000 }),
            "ttl_ms",
        ),
        ("/v1/settle", json!({ "cost": 1 }), "reservation"),
        (
            "/v1/settle",
            json!({ "reservation": "xyz", "cost": 1 }),
            "reservation",
        ),
        (
            "/v1/settle",
            json!({ "reservation": "0".repeat(32) }),
            "cost",
        ),
        (
            "/v1/settle",
            json!({ "reservation": "0".repeat(32), "cost": -1 }),
            "cost",
        ),
        (
            "/v1/settle",
            json!({ "reservation": "0".repeat(32), "cost": 1, "x": 1 }),
            "unknown field",
        ),
    ] {
        let (status, answer) = post(app, path, &t.check_key, body.clone()).await;
        assert_eq!(status, 400, "{path} {body}: {answer}");
        assert!(
            answer["detail"].as_str().unwrap().contains(field),
            "{path} {body}: {answer}"
        );
    }
    // Unknown, or another tenant's: 404, saying what to do.
    let (status, body) = post(
        app,
        "/v1/settle",
        &t.check_key,
        json!({ "reservation": "0".repeat(32), "cost": 1 }),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("expired"),
        "{body}"
    );
    let (_, body) = post(app, "/v1/reserve", &t.check_key, alice(5)).await;
    let id = body["reservation"].as_str().unwrap().to_owned();
    let other = setup_tenant(app, &op, &[tokens()]).await;
    let (status, _) = post(
        app,
        "/v1/settle",
        &other.check_key,
        json!({ "reservation": id, "cost": 0 }),
    )
    .await;
    assert_eq!(status, 404);
    // Keys: an admin key is no check key; none at all is 401.
    let (status, _) = post(
        app,
        "/v1/settle",
        &t.admin_key,
        json!({ "reservation": id, "cost": 0 }),
    )
    .await;
    assert_eq!(status, 403);
    let (status, _, _) = app.call("POST", "/v1/reserve", None, Some(&alice(1))).await;
    assert_eq!(status, 401);

    // A request_id makes a retry name the same reservation, charged once.
    let with_id =
        json!({ "route": "GET /llm", "subject": "carol", "cost": 50, "request_id": "job-7" });
    let (_, first) = post(app, "/v1/reserve", &t.check_key, with_id.clone()).await;
    let (_, again) = post(app, "/v1/reserve", &t.check_key, with_id).await;
    assert_eq!(first["reservation"], again["reservation"]);
    assert_eq!(
        (first["remaining"].clone(), again["remaining"].clone()),
        (json!(950), json!(950))
    );

    // Counted on /metrics: a refund (70), an overrun (490) and the rest.
    assert_eq!(
        app.metric("sluice_settlements_total{result=\"refund\"}")
            .await,
        1.0
    );
    assert_eq!(
        app.metric("sluice_settlements_total{result=\"overrun\"}")
            .await,
        1.0
    );
    assert_eq!(
        app.metric("sluice_settled_units_total{direction=\"refunded\"}")
            .await,
        70.0
    );
    assert_eq!(
        app.metric("sluice_settled_units_total{direction=\"overrun\"}")
            .await,
        490.0
    );
}

#[tokio::test]
async fn reserve_and_settle_in_process() {
    reserve_and_settle_over_http(&app_on(Backend::InProcess).await.app).await;
}

#[tokio::test]
async fn reserve_and_settle_on_redis() {
    reserve_and_settle_over_http(&app_on(Backend::Redis).await.app).await;
}

#[tokio::test]
async fn reserve_and_settle_on_a_cluster() {
    reserve_and_settle_over_http(&app_on(Backend::Cluster).await.app).await;
}

/// Made on one instance, settled on another: the settling instance's cached denial of the
/// bucket is dropped with the refund, so its next check is decided by Redis, and admitted.
#[tokio::test]
async fn a_refund_on_another_instance_ends_its_cached_denials() {
    let redis = RedisServer::start();
    let database = shared_postgres().fresh_database().await;
    let (a, b) = (
        distributed(&database, &redis.url()).await,
        distributed(&database, &redis.url()).await,
    );
    let op = a.operator_key().await;
    let t = setup_tenant(&a, &op, &[tokens()]).await;
    let alice = |cost: u64| json!({ "route": "GET /llm", "subject": "alice", "cost": cost });

    let (status, body) = post(&a, "/v1/reserve", &t.check_key, alice(1_000)).await;
    assert_eq!(status, 200, "{body}");
    let id = body["reservation"].as_str().unwrap().to_owned();
    // B is denied, and remembers it: its second denial comes from its deny cache. That
    // entry would live until the bucket refills (at most a second, deny_cache::MAX_LIFE_MS).
    let asked = Instant::now();
    assert_eq!(b.check(&t.check_key, alice(10)).await.0, 429);
    let cached = b.metric("sluice_cached_denials_total").await;
    assert_eq!(b.check(&t.check_key, alice(10)).await.0, 429);
    assert_eq!(b.metric("sluice_cached_denials_total").await, cached + 1.0);

    let (status, body) = post(
        &b,
        "/v1/settle",
        &t.check_key,
        json!({ "reservation": id, "cost": 400 }),
    )
    .await;
    assert_eq!((status, &body["estimate"]), (200, &json!(1_000)), "{body}");
    let (status, headers, _) = b.check(&t.check_key, alice(10)).await;
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(1),
        "too slow to tell: the cached denial may have expired by itself"
    );
    assert_eq!(
        status, 200,
        "B still denied from its cache after the refund"
    );
    assert_eq!(remaining(&headers), 590);
    // A, which never cached a denial, sees the same bucket.
    let (_, headers, _) = a.check(&t.check_key, alice(10)).await;
    assert_eq!(remaining(&headers), 580);
}
