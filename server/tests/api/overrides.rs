//! `…/rules/{id}/overrides` over real HTTP: another limit for one subject or a subject prefix,
//! resolved exact subject first, then the longest prefix, then the rule; on the in-process
//! limiter, Redis and a Redis Cluster; audited; capped per rule; and applied by three instances
//! sharing a Redis within a second.

use std::time::Duration;

use serde_json::{json, Value};

use crate::helpers::{
    app_on, distributed, rule, rule_id, setup_tenant, spawn_embedded, time_until, Backend,
    TenantSetup, TestApp, DAY_MS,
};
use crate::services::{shared_postgres, RedisServer};

/// One request per subject a day, in a fixed window: each admitted check is one of the
/// limit, and no window ends mid-test.
fn per_user() -> Value {
    json!({ "name": "per-user", "match": "default", "scope": "subject",
            "algorithm": "fixed_window", "limit": 1, "period_ms": DAY_MS })
}

/// How many checks `subject` gets admitted in a row (up to 20), and the limit the first
/// answer reported.
async fn admitted(app: &TestApp, t: &TenantSetup, subject: &str) -> (u32, String) {
    let mut admitted = 0;
    let mut limit = String::new();
    for i in 0..20 {
        let (status, headers, body) = app
            .check(
                &t.check_key,
                json!({ "route": "GET /x", "subject": subject }),
            )
            .await;
        if i == 0 {
            limit = headers["x-ratelimit-limit"].to_str().unwrap().to_owned();
        }
        match status {
            200 => admitted += 1,
            429 => return (admitted, limit),
            other => panic!("{subject}: {other} {body}"),
        }
    }
    (admitted, limit)
}

async fn set(app: &TestApp, t: &TenantSetup, rule: &str, body: Value) -> (u16, Value) {
    let (status, _, answer) = app
        .call(
            "POST",
            &format!("/v1/admin/tenants/{}/rules/{rule}/overrides", t.id),
            Some(&t.admin_key),
            Some(&body),
        )
        .await;
    (status, answer)
}

async fn overrides_decide_exact_then_longest_prefix_then_rule(app: &TestApp) {
    let op = app.operator_key().await;
    let t = setup_tenant(
        app,
        &op,
        &[
            per_user(),
            rule("site", "exact", Some("GET /t"), "gcra", 5, 60_000),
        ],
    )
    .await;
    let r = rule_id(app, &t, "per-user").await;
    for (subject, limit) in [("acme-*", 3), ("acme-vip-*", 5), ("acme-vip-7", 2)] {
        let (status, body) = set(app, &t, &r, json!({ "subject": subject, "limit": limit })).await;
        assert_eq!(status, 201, "{body}");
        assert_eq!(
            (&body["subject"], &body["limit"]),
            (&json!(subject), &json!(limit))
        );
    }
    // The rule, a prefix, the longer prefix, and the exact subject that beats both prefixes;
    // X-RateLimit-Limit reports the limit that decided.
    assert_eq!(admitted(app, &t, "zed").await, (1, "1".into()));
    assert_eq!(admitted(app, &t, "acme-1").await, (3, "3".into()));
    assert_eq!(admitted(app, &t, "acme-vip-1").await, (5, "5".into()));
    assert_eq!(admitted(app, &t, "acme-vip-7").await, (2, "2".into()));

    let overrides = format!("/v1/admin/tenants/{}/rules/{r}/overrides", t.id);
    let (status, _, listed) = app.call("GET", &overrides, Some(&t.admin_key), None).await;
    assert_eq!(status, 200, "{listed}");
    let subjects: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["subject"].as_str().unwrap())
        .collect();
    assert_eq!(subjects, ["acme-*", "acme-vip-*", "acme-vip-7"]);

    // Setting a subject again replaces its override (same id, 200); the window's count so far
    // stays: acme-1 used 3 of the new 4.
    let first_id = listed[0]["id"].clone();
    let (status, body) = set(app, &t, &r, json!({ "subject": "acme-*", "limit": 4 })).await;
    assert_eq!((status, &body["id"]), (200, &first_id), "{body}");
    assert_eq!(admitted(app, &t, "acme-1").await, (1, "4".into()));

    // Deleted, the exact override gives way to the longer prefix: 5, of which 2 are used.
    let vip7 = listed[2]["id"].as_str().unwrap();
    let (status, _, _) = app
        .call(
            "DELETE",
            &format!("{overrides}/{vip7}"),
            Some(&t.admin_key),
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(admitted(app, &t, "acme-vip-7").await, (3, "5".into()));
    let (status, _, _) = app
        .call(
            "DELETE",
            &format!("{overrides}/{vip7}"),
            Some(&t.admin_key),
            None,
        )
        .await;
    assert_eq!(status, 404, "deleted twice");

    // What cannot be an override, field by field.
    let site = rule_id(app, &t, "site").await;
    for (rule, body, field) in [
        (&site, json!({ "subject": "acme-1", "limit": 9 }), "subject"),
        (&r, json!({ "subject": "*", "limit": 9 }), "subject"),
        (&r, json!({ "subject": "a*b*", "limit": 9 }), "subject"),
        (&r, json!({ "subject": "", "limit": 9 }), "subject"),
        (&r, json!({ "subject": "ok", "limit": 0 }), "limit"),
        (
            &r,
            json!({ "subject": "ok", "limit": 9, "period_ms": 0 }),
            "period_ms",
        ),
        (
            &r,
            json!({ "subject": "ok", "limit": 9, "burst": 10 }),
            "burst",
        ),
    ] {
        let (status, answer) = set(app, &t, rule, body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["errors"][0]["field"], field, "{body}: {answer}");
    }
    let (status, _) = set(app, &t, &r, json!({ "subject": "ok", "limit": 9, "x": 1 })).await;
    assert_eq!(status, 400, "an unknown field");

    // A rule edit its overrides would not fit (one bucket for the tenant has no subjects) is
    // refused, naming them; the rule is as it was.
    let mut tenant_wide = per_user();
    tenant_wide["scope"] = json!("tenant");
    let (status, _, body) = app
        .call(
            "PUT",
            &format!("/v1/admin/tenants/{}/rules/{r}", t.id),
            Some(&t.admin_key),
            Some(&tenant_wide),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("acme-*"),
        "{body}"
    );
    assert_eq!(admitted(app, &t, "acme-2").await, (4, "4".into()));

    // Who may: not a check key, not another tenant's admin; no such rule is a 404.
    let body = json!({ "subject": "ok", "limit": 9 });
    let (status, _, _) = app
        .call("POST", &overrides, Some(&t.check_key), Some(&body))
        .await;
    assert_eq!(status, 403);
    let other = setup_tenant(app, &op, &[]).await;
    let (status, _, _) = app
        .call("POST", &overrides, Some(&other.admin_key), Some(&body))
        .await;
    assert_eq!(status, 404);
    let (status, _, _) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{}/rules/nope/overrides", t.id),
            Some(&t.admin_key),
            None,
        )
        .await;
    assert_eq!(status, 404);

    // Audited: four sets (one replacing) and one delete.
    let (_, _, events) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{}/audit", t.id),
            Some(&t.admin_key),
            None,
        )
        .await;
    let count = |action: &str| {
        events
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["action"] == action)
            .count()
    };
    assert_eq!((count("override.set"), count("override.delete")), (4, 1));
    let replaced = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            e["action"] == "override.set" && e["detail"].as_str().unwrap().contains("\"limit\":4")
        })
        .unwrap();
    let detail: Value = serde_json::from_str(replaced["detail"].as_str().unwrap()).unwrap();
    assert_eq!(detail["before"]["limit"], 3, "{detail}");
}

#[tokio::test]
async fn overrides_decide_in_process() {
    overrides_decide_exact_then_longest_prefix_then_rule(&app_on(Backend::InProcess).await.app)
        .await;
}

#[tokio::test]
async fn overrides_decide_on_redis() {
    overrides_decide_exact_then_longest_prefix_then_rule(&app_on(Backend::Redis).await.app).await;
}

#[tokio::test]
async fn overrides_decide_on_a_cluster() {
    overrides_decide_exact_then_longest_prefix_then_rule(&app_on(Backend::Cluster).await.app).await;
}

#[tokio::test]
async fn a_rule_takes_at_most_a_hundred_overrides() {
    let app = spawn_embedded().await;
    let op = app.operator_key().await;
    let t = setup_tenant(&app, &op, &[per_user()]).await;
    let r = rule_id(&app, &t, "per-user").await;
    for i in 0..100 {
        let (status, body) = set(
            &app,
            &t,
            &r,
            json!({ "subject": format!("s{i}"), "limit": 2 }),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = set(&app, &t, &r, json!({ "subject": "one-more", "limit": 2 })).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("prefix"),
        "{body}"
    );
    // Replacing one of the hundred is still allowed.
    let (status, body) = set(&app, &t, &r, json!({ "subject": "s7", "limit": 3 })).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn an_override_reaches_three_instances_within_a_second() {
    let redis = RedisServer::start();
    let database = shared_postgres().fresh_database().await;
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(distributed(&database, &redis.url()).await);
    }
    let op = instances[0].operator_key().await;
    let t = setup_tenant(&instances[0], &op, &[per_user()]).await;
    let r = rule_id(&instances[0], &t, "per-user").await;
    let acme = json!({ "route": "GET /x", "subject": "acme-42" });
    // Every instance has the tenant compiled, and denies acme-42 past its one request.
    assert_eq!(instances[0].check(&t.check_key, acme.clone()).await.0, 200);
    for app in &instances {
        assert_eq!(app.check(&t.check_key, acme.clone()).await.0, 429);
    }
    let (status, body) = set(
        &instances[0],
        &t,
        &r,
        json!({ "subject": "acme-*", "limit": 1000 }),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    for (i, app) in instances.iter().enumerate() {
        let delay = time_until(
            async || app.check(&t.check_key, acme.clone()).await.0 == 200,
            Duration::from_secs(1),
        )
        .await;
        eprintln!("instance {i} applies the override {delay:?} after it was set");
        assert!(delay < Duration::from_secs(1), "instance {i}: {delay:?}");
    }
}
