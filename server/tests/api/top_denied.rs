//! `GET /v1/admin/tenants/{tenant}/top-denied` over real HTTP: with a known skewed load of
//! denials, the true top 10 subjects appear in order, each count at most the answered error
//! below the truth and never above it, on the in-process limiter, on Redis and on a Redis
//! Cluster, and summed over three instances; only the tenant's admins and operators see it,
//! and the tenant's dashboard (not the fleet's) shows it. And the summaries' merge on Redis
//! (`lua/top_denied.lua`) is the same as in memory.

use std::collections::HashMap;
use std::time::Duration;

use app::dashboard::Range;
use serde_json::{json, Value};
use sluice::config::LimiterTarget;
use sluice::dashboard::series::SeriesStore;
use sluice::dashboard::top::{ByTenant, Summary, CAPACITY};
use sluice::dashboard::view::Scope;
use sluice::limiter::{Limiter, MemoryBackend, RedisOptions};

use crate::helpers::{
    app_on, distributed, rule, rule_id, setup_tenant, time_until, Backend, TenantSetup, TestApp,
};
use crate::services::{shared_postgres, RedisServer};

/// Heavy subjects: `heavy-i` is denied `HEAVY_TOP - 2 i` times.
const HEAVY: usize = 12;
const HEAVY_TOP: u64 = 40;
/// Subjects denied once each: more than a summary keeps, in any minute, even when the load
/// straddles two minutes.
const CROWD: usize = 250;

fn per_user() -> Value {
    json!({ "name": "per-user", "match": "default", "scope": "subject",
            "algorithm": "gcra", "limit": 1, "period_ms": 3_600_000 })
}

fn heavy_denials(i: usize) -> u64 {
    HEAVY_TOP - 2 * i as u64
}

/// Sends the skewed load over `apps` in turn: every subject's first check is admitted, and
/// each later one denied. Returns the denials by subject.
async fn skewed_load(apps: &[&TestApp], t: &TenantSetup) -> HashMap<String, u64> {
    let mut plan: Vec<(String, u64)> = (0..HEAVY)
        .map(|i| (format!("heavy-{i}"), heavy_denials(i)))
        .collect();
    plan.extend((0..CROWD).map(|i| (format!("once-{i}"), 1)));
    let mut n = 0;
    for (subject, denials) in &plan {
        for k in 0..=*denials {
            let app = apps[n % apps.len()];
            n += 1;
            let (status, _, body) = app
                .check(
                    &t.check_key,
                    json!({ "route": "GET /x", "subject": subject }),
                )
                .await;
            assert_eq!(status, if k == 0 { 200 } else { 429 }, "{subject}: {body}");
        }
    }
    // The tenant-wide rule: one admitted, three denied.
    for k in 0..4 {
        let (status, _, _) = apps[k % apps.len()]
            .check(&t.check_key, json!({ "route": "GET /t", "subject": "x" }))
            .await;
        assert_eq!(status, if k == 0 { 200 } else { 429 });
    }
    plan.into_iter().collect()
}

async fn top_denied(app: &TestApp, t: &TenantSetup, key: &str, query: &str) -> (u16, Value) {
    let (status, _, body) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{}/top-denied{query}", t.id),
            Some(key),
            None,
        )
        .await;
    (status, body)
}

/// The answer of `app` once every denial of the load has been written (each instance
/// writes its second just after it ends).
async fn settled(app: &TestApp, t: &TenantSetup, truth: &HashMap<String, u64>) -> Value {
    let total: u64 = truth.values().sum();
    let mut last = Value::Null;
    time_until(
        async || {
            let (status, body) = top_denied(app, t, &t.admin_key, "").await;
            assert_eq!(status, 200, "{body}");
            let done = body["rules"][0]["denied"] == json!(total)
                && body["rules"][1]["denied"] == json!(3);
            last = body;
            done
        },
        Duration::from_secs(5),
    )
    .await;
    last
}

/// What the answer must say of the load: the per-subject rule first with every denial, its
/// ten most denied subjects the ten heaviest in order, each within the error; then the
/// tenant-wide rule's one bucket, exact.
fn answers_the_load(body: &Value, truth: &HashMap<String, u64>, per_user_id: &str) {
    let total: u64 = truth.values().sum();
    let rules = body["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 2, "{body}");
    let first = &rules[0];
    assert_eq!(first["rule_id"], per_user_id, "{body}");
    assert_eq!(
        (&first["policy"], &first["exists"]),
        (&json!("per-user"), &json!(true))
    );
    assert_eq!(first["denied"], json!(total));
    let error = first["error"].as_u64().unwrap();
    assert!(
        error <= total / (CAPACITY as u64 + 1),
        "error {error} over {total} denials"
    );
    assert!(error > 0, "the crowd made the summary reduce: {body}");
    let subjects = first["subjects"].as_array().unwrap();
    assert_eq!(subjects.len(), 10, "the default limit: {body}");
    for (i, row) in subjects.iter().enumerate() {
        let subject = format!("heavy-{i}");
        assert_eq!(row["subject"], json!(subject), "rank {i}: {body}");
        let count = row["denied"].as_u64().unwrap();
        let truth = truth[&subject];
        assert!(
            count <= truth && truth <= count + error,
            "{subject}: {count} (error {error}), truly {truth}"
        );
    }
    let second = &rules[1];
    assert_eq!(second["policy"], "tenant-wide");
    assert_eq!(
        second["subjects"],
        json!([{ "subject": null, "denied": 3 }]),
        "{body}"
    );
}

fn rules() -> Vec<Value> {
    vec![
        per_user(),
        rule(
            "tenant-wide",
            "exact",
            Some("GET /t"),
            "fixed_window",
            1,
            3_600_000,
        ),
    ]
}

async fn the_true_top_ten_appear(app: &TestApp) {
    let op = app.operator_key().await;
    let t = setup_tenant(app, &op, &rules()).await;
    let per_user_id = rule_id(app, &t, "per-user").await;
    let truth = skewed_load(&[app], &t).await;
    let body = settled(app, &t, &truth).await;
    answers_the_load(&body, &truth, &per_user_id);
    assert_eq!(body["range"], "5m");

    // The hour holds the same; a limit answers that many; an operator sees it too.
    let (status, hour) = top_denied(app, &t, &op, "?range=1h&limit=3").await;
    assert_eq!(status, 200, "{hour}");
    assert_eq!(hour["range"], "1h");
    assert_eq!(hour["rules"][0]["denied"], body["rules"][0]["denied"]);
    let three: Vec<&Value> = hour["rules"][0]["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["subject"])
        .collect();
    assert_eq!(
        three,
        [&json!("heavy-0"), &json!("heavy-1"), &json!("heavy-2")]
    );

    // Who may see it: not a check key, not another tenant's admin.
    let (status, _) = top_denied(app, &t, &t.check_key, "").await;
    assert_eq!(status, 403);
    let other = setup_tenant(app, &op, &[]).await;
    let (status, _) = top_denied(app, &t, &other.admin_key, "").await;
    assert_eq!(status, 404);
    // The other tenant has no denials at all.
    let (status, none) = top_denied(app, &other, &other.admin_key, "").await;
    assert_eq!((status, &none["rules"]), (200, &json!([])), "{none}");

    // Bad queries are refused with what is allowed.
    for query in [
        "?range=24h",
        "?limit=0",
        "?limit=101",
        "?limit=ten",
        "?top=1",
    ] {
        let (status, body) = top_denied(app, &t, &t.admin_key, query).await;
        assert_eq!(status, 400, "{query}: {body}");
        let said = body.to_string();
        assert!(
            said.contains("range") || said.contains("limit"),
            "{query}: {body}"
        );
    }
}

#[tokio::test]
async fn the_true_top_ten_denied_subjects_appear_in_process() {
    the_true_top_ten_appear(&app_on(Backend::InProcess).await.app).await;
}

#[tokio::test]
async fn the_true_top_ten_denied_subjects_appear_on_redis() {
    the_true_top_ten_appear(&app_on(Backend::Redis).await.app).await;
}

#[tokio::test]
async fn the_true_top_ten_denied_subjects_appear_on_a_cluster() {
    the_true_top_ten_appear(&app_on(Backend::Cluster).await.app).await;
}

#[tokio::test]
async fn three_instances_denials_are_summed_and_every_instance_answers_the_same() {
    let redis = RedisServer::start();
    let database = shared_postgres().fresh_database().await;
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(distributed(&database, &redis.url()).await);
    }
    let op = instances[0].operator_key().await;
    let t = setup_tenant(&instances[0], &op, &rules()).await;
    let per_user_id = rule_id(&instances[0], &t, "per-user").await;
    let apps: Vec<&TestApp> = instances.iter().collect();
    let truth = skewed_load(&apps, &t).await;
    let body = settled(&instances[0], &t, &truth).await;
    answers_the_load(&body, &truth, &per_user_id);
    for app in &instances[1..] {
        let (status, theirs) = top_denied(app, &t, &t.admin_key, "").await;
        assert_eq!(status, 200);
        assert_eq!(theirs["rules"], body["rules"]);
    }
}

/// A deterministic stream of summaries: `seconds` seconds of `instances` instances, each a
/// skewed share of denials over two tenants and two rules.
fn seconds_of_denials(seconds: usize, instances: usize) -> Vec<(i64, String, ByTenant)> {
    let mut state: u64 = 7;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    };
    let mut out = Vec::new();
    for second in 0..seconds {
        for instance in 0..instances {
            let mut by_tenant = ByTenant::new();
            for tenant in ["t1", "t2"] {
                for rule in ["r1", "r2"] {
                    let summary: &mut Summary = by_tenant
                        .entry(tenant.to_owned())
                        .or_default()
                        .entry(rule.to_owned())
                        .or_default();
                    for _ in 0..next(400) {
                        // Skewed: small numbers far more often.
                        let spread = 1 + next(300);
                        let subject = next(spread);
                        summary.add(rule, &format!("s{subject}"));
                    }
                }
            }
            out.push((
                60 * 1_000_000 + second as i64,
                format!("i{instance}"),
                by_tenant,
            ));
        }
    }
    out
}

#[tokio::test]
async fn the_redis_merge_is_the_in_memory_merge() {
    let server = RedisServer::start();
    let limiter = Limiter::connect(
        &LimiterTarget::Redis(server.url()),
        RedisOptions {
            timeout: Duration::from_secs(2),
            connections: 1,
        },
    )
    .await
    .unwrap();
    let redis = SeriesStore::Redis(limiter.redis().unwrap().clone());
    let memory = SeriesStore::memory(MemoryBackend::new());
    let writes = seconds_of_denials(50, 3);
    for (second, instance, denied) in &writes {
        redis.write_top(*second, instance, denied).await.unwrap();
        memory.write_top(*second, instance, denied).await.unwrap();
    }
    // A retry of a write already made adds nothing.
    let (second, instance, denied) = &writes[7];
    redis.write_top(*second, instance, denied).await.unwrap();
    let minute = 1_000_000;
    for tenant in ["t1", "t2"] {
        let from_redis = redis.top_denied(tenant, minute, minute).await.unwrap();
        let from_memory = memory.top_denied(tenant, minute, minute).await.unwrap();
        assert_eq!(from_redis.len(), 2);
        assert_eq!(from_redis, from_memory, "{tenant}");
        for summary in from_redis.values() {
            assert!(summary.counts.len() <= CAPACITY);
            assert!(summary.error > 0, "the load made the minute reduce");
        }
    }
}

#[tokio::test]
async fn the_tenants_dashboard_shows_its_most_denied_subjects_and_the_fleets_does_not() {
    let on = app_on(Backend::Redis).await;
    let app = &on.app;
    let op = app.operator_key().await;
    let t = setup_tenant(app, &op, &rules()).await;
    let truth = skewed_load(&[app], &t).await;
    settled(app, &t, &truth).await;
    let scope = Scope::Tenant(t.id.clone());
    // Read every 5 s for the tenants with denials.
    time_until(
        async || {
            app.dashboard
                .frame(&scope, Range::FiveMinutes)
                .denied_subjects
                .is_some_and(|d| d.rows.len() == 10)
        },
        Duration::from_secs(8),
    )
    .await;
    let denied = app
        .dashboard
        .frame(&scope, Range::Hour)
        .denied_subjects
        .unwrap();
    let subjects: Vec<&str> = denied.rows.iter().map(|(_, s, _)| s.as_str()).collect();
    let heaviest: Vec<String> = (0..10).map(|i| format!("heavy-{i}")).collect();
    assert_eq!(subjects, heaviest);
    for (policy, subject, n) in &denied.rows {
        assert_eq!(policy, "per-user");
        let truth = truth[subject];
        assert!(*n <= truth && truth <= n + denied.error, "{subject}: {n}");
    }
    let html = app.dashboard.html(&scope, Range::FiveMinutes);
    assert!(html.contains(r#"data-testid="denied-subjects""#));
    assert!(html.contains("<code>heavy-0</code>"), "{html}");
    let fleet = app.dashboard.frame(&Scope::Fleet, Range::FiveMinutes);
    assert_eq!(fleet.denied_subjects, None);
    assert!(!app
        .dashboard
        .html(&Scope::Fleet, Range::FiveMinutes)
        .contains("heavy-0"));
}
