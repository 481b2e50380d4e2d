//! `POST /v1/admin/tenants/{tenant}/rules/{id}/reset` over real HTTP: one subject's bucket (or
//! a rule's tenant-wide bucket) cleared on the in-process limiter, on Redis and on a Redis
//! Cluster, audited, refused with a reason when the input does not name one bucket; and on
//! three instances sharing a Redis, a reset ends every instance's local denials at once.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::helpers::{
    app_on, distributed, new_key, rule, rule_id, setup_tenant, time_until, Backend, TestApp,
};
use crate::services::{shared_postgres, RedisServer};
use app::keys::KeyKind;

fn per_user(limit: u64) -> Value {
    json!({ "name": "per-user", "match": "default", "scope": "subject",
            "algorithm": "gcra", "limit": limit, "period_ms": 3_600_000 })
}

async fn status_of(app: &TestApp, key: &str, body: Value) -> u16 {
    app.check(key, body).await.0
}

/// The whole behaviour of a reset on `app`, whatever its limiter.
async fn reset_clears_one_bucket_and_is_audited(app: &TestApp) {
    let op = app.operator_key().await;
    let t = setup_tenant(
        app,
        &op,
        &[
            per_user(1),
            rule(
                "tenant-wide",
                "exact",
                Some("GET /t"),
                "fixed_window",
                1,
                3_600_000,
            ),
        ],
    )
    .await;
    let per_user_id = rule_id(app, &t, "per-user").await;
    let tenant_wide_id = rule_id(app, &t, "tenant-wide").await;
    let reset = |rule: &str| format!("/v1/admin/tenants/{}/rules/{rule}/reset", t.id);
    let as_user = |subject: &str| json!({ "route": "GET /x", "subject": subject });

    for subject in ["alice", "bob"] {
        assert_eq!(status_of(app, &t.check_key, as_user(subject)).await, 200);
        assert_eq!(status_of(app, &t.check_key, as_user(subject)).await, 429);
    }
    let (status, _, body) = app
        .call(
            "POST",
            &reset(&per_user_id),
            Some(&t.admin_key),
            Some(&json!({ "subject": "alice" })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({ "rule_id": per_user_id, "policy": "per-user", "subject": "alice", "cleared": true })
    );
    // Alice has her one request again; Bob is still denied.
    assert_eq!(status_of(app, &t.check_key, as_user("alice")).await, 200);
    assert_eq!(status_of(app, &t.check_key, as_user("alice")).await, 429);
    assert_eq!(status_of(app, &t.check_key, as_user("bob")).await, 429);

    // A subject with no bucket: answered, and said so.
    let (status, _, body) = app
        .call(
            "POST",
            &reset(&per_user_id),
            Some(&op),
            Some(&json!({ "subject": "carol" })),
        )
        .await;
    assert_eq!((status, &body["cleared"]), (200, &json!(false)), "{body}");

    // The tenant-wide bucket of a tenant rule, with an empty body.
    let route = json!({ "route": "GET /t", "subject": "dave" });
    assert_eq!(status_of(app, &t.check_key, route.clone()).await, 200);
    assert_eq!(status_of(app, &t.check_key, route.clone()).await, 429);
    let (status, _, body) = app
        .call(
            "POST",
            &reset(&tenant_wide_id),
            Some(&t.admin_key),
            Some(&json!({})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["subject"], &body["cleared"]),
        (&Value::Null, &json!(true))
    );
    assert_eq!(status_of(app, &t.check_key, route.clone()).await, 200);

    // Input that does not name one bucket is refused, field by field, and clears nothing.
    for (rule, input, says) in [
        (&per_user_id, json!({}), "limits each subject separately"),
        (
            &tenant_wide_id,
            json!({ "subject": "dave" }),
            "leave `subject` out",
        ),
        (&per_user_id, json!({ "subject": "" }), "subject"),
        (
            &per_user_id,
            json!({ "subject": "x".repeat(300) }),
            "subject",
        ),
    ] {
        let (status, _, body) = app
            .call("POST", &reset(rule), Some(&t.admin_key), Some(&input))
            .await;
        assert_eq!(status, 400, "{input}: {body}");
        assert_eq!(body["errors"][0]["field"], "subject", "{body}");
        assert!(
            body["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains(says),
            "{body}"
        );
    }
    let (status, _, body) = app
        .call(
            "POST",
            &reset(&per_user_id),
            Some(&t.admin_key),
            Some(&json!({ "subject": "bob", "all": true })),
        )
        .await;
    assert_eq!(status, 400, "an unknown field: {body}");
    assert_eq!(status_of(app, &t.check_key, as_user("bob")).await, 429);

    // Who may reset: not a check key, not another tenant's admin; no such rule is a 404.
    let alice = json!({ "subject": "alice" });
    let (status, _, _) = app
        .call(
            "POST",
            &reset(&per_user_id),
            Some(&t.check_key),
            Some(&alice),
        )
        .await;
    assert_eq!(status, 403);
    let other = setup_tenant(app, &op, &[]).await;
    let (status, _, _) = app
        .call(
            "POST",
            &reset(&per_user_id),
            Some(&other.admin_key),
            Some(&alice),
        )
        .await;
    assert_eq!(status, 404);
    let (status, _, _) = app
        .call("POST", &reset("no-such-rule"), Some(&op), Some(&alice))
        .await;
    assert_eq!(status, 404);
    let (nobody, _, _) = new_key(KeyKind::Admin);
    let (status, _, _) = app
        .call("POST", &reset(&per_user_id), Some(&nobody), Some(&alice))
        .await;
    assert_eq!(status, 401);

    // Each reset that cleared or found nothing is in the audit log, with its subject.
    let (status, _, events) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{}/audit?action=rule.reset", t.id),
            Some(&t.admin_key),
            None,
        )
        .await;
    assert_eq!(status, 200, "{events}");
    let mut seen: Vec<(String, Value, Value)> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let detail: Value = serde_json::from_str(e["detail"].as_str().unwrap()).unwrap();
            (
                e["target"].as_str().unwrap().to_owned(),
                detail["subject"].clone(),
                detail["cleared"].clone(),
            )
        })
        .collect();
    seen.sort_by_key(|(target, subject, _)| (target.clone(), subject.to_string()));
    let mut expected = vec![
        (per_user_id.clone(), json!("alice"), json!(true)),
        (per_user_id.clone(), json!("carol"), json!(false)),
        (tenant_wide_id.clone(), Value::Null, json!(true)),
    ];
    expected.sort_by_key(|(target, subject, _)| (target.clone(), subject.to_string()));
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn a_reset_clears_one_bucket_in_process() {
    reset_clears_one_bucket_and_is_audited(&app_on(Backend::InProcess).await.app).await;
}

#[tokio::test]
async fn a_reset_clears_one_bucket_on_redis() {
    reset_clears_one_bucket_and_is_audited(&app_on(Backend::Redis).await.app).await;
}

#[tokio::test]
async fn a_reset_clears_one_bucket_on_a_cluster() {
    reset_clears_one_bucket_and_is_audited(&app_on(Backend::Cluster).await.app).await;
}

#[tokio::test]
async fn with_redis_down_a_reset_answers_503_and_records_nothing() {
    let mut redis = RedisServer::start();
    let app = distributed(&shared_postgres().fresh_database().await, &redis.url()).await;
    let op = app.operator_key().await;
    let t = setup_tenant(&app, &op, &[per_user(1)]).await;
    let rule = rule_id(&app, &t, "per-user").await;
    let reset = format!("/v1/admin/tenants/{}/rules/{rule}/reset", t.id);
    let alice = json!({ "subject": "alice" });
    redis.stop();
    let (status, _, body) = app
        .call("POST", &reset, Some(&t.admin_key), Some(&alice))
        .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["type"], "/problems/unavailable", "{body}");
    let audit = format!("/v1/admin/tenants/{}/audit?action=rule.reset", t.id);
    let (_, _, events) = app.call("GET", &audit, Some(&t.admin_key), None).await;
    assert_eq!(
        events,
        json!([]),
        "a reset that did not happen is not audited"
    );
    // Redis back: the same reset goes through.
    redis.restart();
    let answered = time_until(
        async || {
            app.call("POST", &reset, Some(&t.admin_key), Some(&alice))
                .await
                .0
                == 200
        },
        Duration::from_secs(5),
    )
    .await;
    eprintln!("the reset went through {answered:?} after Redis restarted");
    let (_, _, events) = app.call("GET", &audit, Some(&t.admin_key), None).await;
    assert_eq!(events.as_array().map(Vec::len), Some(1), "{events}");
}

#[tokio::test]
async fn a_reset_ends_local_denials_on_every_instance_within_a_second() {
    let redis = RedisServer::start();
    let database = shared_postgres().fresh_database().await;
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(distributed(&database, &redis.url()).await);
    }
    let op = instances[0].operator_key().await;
    let t = setup_tenant(&instances[0], &op, &[per_user(3)]).await;
    let rule = rule_id(&instances[0], &t, "per-user").await;
    let one = json!({ "route": "GET /x", "subject": "alice" });

    // Alice spends all 3 at once; then every instance denies her, and remembers it: a second
    // round of denials reaches Redis not at all.
    let all = json!({ "route": "GET /x", "subject": "alice", "cost": 3 });
    assert_eq!(status_of(&instances[0], &t.check_key, all).await, 200);
    // When each instance asked Redis: its cached denial lasts at most 1 s from then
    // (deny_cache::MAX_LIFE_MS), after which it would admit alice with no announcement at all.
    let mut asked = Vec::new();
    for app in &instances {
        asked.push(Instant::now());
        assert_eq!(status_of(app, &t.check_key, one.clone()).await, 429);
    }
    // Counted by each instance's own metric: Redis's count of script calls also holds the
    // dashboards' once-a-second writes, which may fall in between.
    for app in &instances {
        let cached = app.metric("sluice_cached_denials_total").await;
        assert_eq!(status_of(app, &t.check_key, one.clone()).await, 429);
        assert_eq!(
            app.metric("sluice_cached_denials_total").await,
            cached + 1.0,
            "every instance denies alice from its deny cache"
        );
    }

    let (status, _, body) = instances[0]
        .call(
            "POST",
            &format!("/v1/admin/tenants/{}/rules/{rule}/reset", t.id),
            Some(&t.admin_key),
            Some(&json!({ "subject": "alice" })),
        )
        .await;
    assert_eq!((status, &body["cleared"]), (200, &json!(true)), "{body}");
    // Each instance admits alice once more (3 in all: her bucket is full again). A denial
    // consumes nothing, so polling until each admits spends exactly one each.
    for (i, app) in instances.iter().enumerate() {
        let delay = time_until(
            async || status_of(app, &t.check_key, one.clone()).await == 200,
            Duration::from_secs(1),
        )
        .await;
        eprintln!("instance {i} admits alice {delay:?} after the reset answered");
        assert!(delay < Duration::from_secs(1), "instance {i}: {delay:?}");
        assert!(
            asked[i].elapsed() < Duration::from_secs(1),
            "instance {i} admitted alice only {:?} after its cached denial began: the reset did not reach its deny cache",
            asked[i].elapsed()
        );
    }
    for app in &instances {
        assert_eq!(status_of(app, &t.check_key, one.clone()).await, 429);
    }
}
