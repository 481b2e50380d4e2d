//! The console's admin server functions, called over HTTP as the browser calls them: roles,
//! tenant isolation (another tenant's anything is "not found"), keys registered by hash, the
//! audit log with its filters, and simulate, which decides without consuming. The same
//! simulate is checked on the admin API against a real Redis.

use app::keys::{sha256_hex, KeyKind};
use reqwest::Client;
use serde_json::{json, Value};
use sluice::config::Config;

use crate::helpers::{
    browser, embedded_with_operator, new_key, rule, setup_tenant, spawn_app, TestApp,
};
use crate::services::{shared_postgres, RedisServer};

const OPERATOR_PASSWORD: &str = "operator password 1";
const ADMIN_PASSWORD: &str = "tenant admin password";

async fn embedded() -> (TestApp, tempfile::TempDir) {
    embedded_with_operator(OPERATOR_PASSWORD).await
}

/// A browser signed in as `email`.
pub async fn signed_in(app: &TestApp, email: &str, password: &str) -> Client {
    let client = browser();
    let response = client
        .post(app.url("/api/sign_in"))
        .form(&[("email", email), ("password", password)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    client
}

/// Calls a JSON server function: `Ok(answer)` or `Err(the AppError as JSON text)`.
pub async fn call(
    app: &TestApp,
    client: &Client,
    endpoint: &str,
    args: Value,
) -> Result<Value, String> {
    let response = client
        .post(app.url(&format!("/api/{endpoint}")))
        .json(&args)
        .send()
        .await
        .unwrap();
    let ok = response.status().is_success();
    let text = response.text().await.unwrap();
    if ok {
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    } else {
        Err(text)
    }
}

async fn ok(app: &TestApp, client: &Client, endpoint: &str, args: Value) -> Value {
    call(app, client, endpoint, args.clone())
        .await
        .unwrap_or_else(|e| panic!("{endpoint} {args}: {e}"))
}

fn gcra(name: &str, limit: u64) -> Value {
    json!({ "name": name, "match": "all", "scope": "tenant", "algorithm": "gcra",
            "limit": limit, "period_ms": 60_000, "failure_mode": "closed", "shadow": false,
            "enabled": true, "penalty": false })
}

/// The id of the user with `email` in a `users/list` answer.
fn id_by_email(users: &Value, email: &str) -> String {
    users
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["email"] == email)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Operator creates tenants A and B and an admin for each; returns (A's id, B's id).
async fn two_tenants(app: &TestApp, operator: &Client) -> (String, String) {
    let mut ids = Vec::new();
    for name in ["alpha", "beta"] {
        let tenant = ok(app, operator, "tenants/create", json!({ "name": name })).await;
        let id = tenant["id"].as_str().unwrap().to_owned();
        ok(
            app,
            operator,
            "tenants/add_admin",
            json!({ "tenant": id, "email": format!("{name}@example.com"), "password": ADMIN_PASSWORD }),
        )
        .await;
        ids.push(id);
    }
    (ids[0].clone(), ids[1].clone())
}

#[tokio::test]
async fn a_tenant_admin_can_neither_see_nor_change_another_tenants_anything() {
    let (app, _dir) = embedded().await;
    let operator = signed_in(&app, "admin@localhost", OPERATOR_PASSWORD).await;
    let (a, b) = two_tenants(&app, &operator).await;
    let beta = signed_in(&app, "beta@example.com", ADMIN_PASSWORD).await;
    let b_rule = ok(
        &app,
        &beta,
        "rules/save",
        json!({ "tenant": b, "id": null, "body": gcra("beta-rule", 5) }),
    )
    .await;
    let b_rule_id = b_rule["id"].as_str().unwrap();
    let (_, hash, prefix) = new_key(KeyKind::Check);
    let b_key = ok(
        &app,
        &beta,
        "keys/create",
        json!({ "tenant": b, "kind": "check", "name": "svc", "hash": hash, "prefix": prefix }),
    )
    .await;
    let b_key_id = b_key["id"].as_str().unwrap();

    let alpha = signed_in(&app, "alpha@example.com", ADMIN_PASSWORD).await;
    // Its own tenant works.
    ok(
        &app,
        &alpha,
        "rules/save",
        json!({ "tenant": a, "id": null, "body": gcra("alpha-rule", 5) }),
    )
    .await;
    assert_eq!(
        ok(&app, &alpha, "rules/list", json!({ "tenant": a }))
            .await
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Everything of B's, read or written, is "not found", and B's data never appears.
    let attempts = [
        ("tenants/get", json!({ "tenant": b })),
        ("rules/list", json!({ "tenant": b })),
        (
            "rules/save",
            json!({ "tenant": b, "id": null, "body": gcra("intruder", 1) }),
        ),
        (
            "rules/save",
            json!({ "tenant": b, "id": b_rule_id, "body": gcra("intruder", 1) }),
        ),
        ("rules/delete", json!({ "tenant": b, "id": b_rule_id })),
        ("keys/list", json!({ "tenant": b })),
        (
            "keys/create",
            json!({ "tenant": b, "kind": "admin", "name": "x", "hash": sha256_hex("x"), "prefix": "sl_adm_00000" }),
        ),
        ("keys/revoke", json!({ "tenant": b, "key": b_key_id })),
        (
            "keys/rotate",
            json!({ "tenant": b, "key": b_key_id, "hash": sha256_hex("y"), "prefix": "sl_chk_00000", "grace_seconds": 0 }),
        ),
        ("audit/list", json!({ "tenant": b, "filter": {} })),
        (
            "simulate",
            json!({ "tenant": b, "input": { "route": "GET /" } }),
        ),
        // B's rule and key through A's own tenant id.
        (
            "rules/save",
            json!({ "tenant": a, "id": b_rule_id, "body": gcra("intruder", 1) }),
        ),
        ("rules/delete", json!({ "tenant": a, "id": b_rule_id })),
        ("keys/revoke", json!({ "tenant": a, "key": b_key_id })),
    ];
    for (endpoint, args) in attempts {
        let error = call(&app, &alpha, endpoint, args.clone())
            .await
            .expect_err(endpoint);
        assert!(error.contains("NotFound"), "{endpoint} {args}: {error}");
        assert!(!error.contains("beta-rule"), "{error}");
    }
    // Operator-only functions say why, and the platform audit log is the operators'.
    for (endpoint, args) in [
        ("tenants/list", json!({})),
        (
            "tenants/set_active",
            json!({ "tenant": a, "active": false }),
        ),
        ("audit/list", json!({ "tenant": null, "filter": {} })),
    ] {
        let error = call(&app, &alpha, endpoint, args)
            .await
            .expect_err(endpoint);
        assert!(error.contains("Forbidden"), "{endpoint}: {error}");
    }
    // B's rule and key are untouched.
    let rules = ok(&app, &beta, "rules/list", json!({ "tenant": b })).await;
    assert_eq!(rules[0]["name"], "beta-rule");
    assert_eq!(rules[0]["limit"], 5);
    let keys = ok(&app, &beta, "keys/list", json!({ "tenant": b })).await;
    assert_eq!(
        (keys.as_array().unwrap().len(), &keys[0]["revoked_at"]),
        (1, &Value::Null)
    );
    // Without a session, nothing.
    let stranger = browser();
    let error = call(&app, &stranger, "rules/list", json!({ "tenant": a }))
        .await
        .unwrap_err();
    assert!(error.contains("Unauthorized"), "{error}");
    // Each error carries its own HTTP status, not a blanket 500.
    let status = |client: &Client, endpoint: &str, args: Value| {
        let request = client
            .post(app.url(&format!("/api/{endpoint}")))
            .json(&args);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(
        status(&stranger, "rules/list", json!({ "tenant": a })).await,
        401
    );
    assert_eq!(
        status(&beta, "rules/list", json!({ "tenant": a })).await,
        404
    );
    assert_eq!(
        status(&beta, "rules/list", json!({ "wrong": 1 })).await,
        400
    );
}

#[tokio::test]
async fn keys_are_registered_by_hash_and_suspension_is_audited_with_who_and_when() {
    let (app, _dir) = embedded().await;
    let operator = signed_in(&app, "admin@localhost", OPERATOR_PASSWORD).await;
    let (a, _) = two_tenants(&app, &operator).await;
    let alpha = signed_in(&app, "alpha@example.com", ADMIN_PASSWORD).await;
    ok(
        &app,
        &alpha,
        "rules/save",
        json!({ "tenant": a, "id": null, "body": gcra("all", 100) }),
    )
    .await;

    let (check_key, hash, prefix) = new_key(KeyKind::Check);
    let created = ok(
        &app,
        &alpha,
        "keys/create",
        json!({ "tenant": a, "kind": "check", "name": "svc", "hash": hash, "prefix": prefix }),
    )
    .await;
    assert_eq!(created["prefix"], prefix.as_str());
    assert!(
        created.get("hash").is_none(),
        "lists never carry the hash: {created}"
    );
    assert_eq!(
        app.check(&check_key, json!({ "route": "GET /" })).await.0,
        200
    );

    // A malformed hash is refused with the reason.
    let error = call(
        &app,
        &alpha,
        "keys/create",
        json!({ "tenant": a, "kind": "check", "name": "svc", "hash": "abc", "prefix": prefix }),
    )
    .await
    .unwrap_err();
    assert!(error.contains("SHA-256"), "{error}");

    let before = sluice::store::now_ms();
    ok(
        &app,
        &operator,
        "tenants/set_active",
        json!({ "tenant": a, "active": false }),
    )
    .await;
    let (status, _, body) = app.check(&check_key, json!({ "route": "GET /" })).await;
    assert_eq!(status, 403, "{body}");
    // Simulating a suspended tenant says what a real check gets.
    let error = call(
        &app,
        &operator,
        "simulate",
        json!({ "tenant": a, "input": { "route": "GET /" } }),
    )
    .await
    .unwrap_err();
    assert!(error.contains("suspended"), "{error}");
    // A suspended tenant's admin is told so.
    let error = call(&app, &alpha, "rules/list", json!({ "tenant": a }))
        .await
        .unwrap_err();
    assert!(error.contains("suspended"), "{error}");

    let events = ok(
        &app,
        &operator,
        "audit/list",
        json!({ "tenant": a, "filter": { "action": "tenant.suspend" } }),
    )
    .await;
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["actor"], "user:admin@localhost");
    let at = events[0]["at"].as_i64().unwrap();
    assert!((before..=sluice::store::now_ms()).contains(&at));
    // Filters narrow: by actor, and by time.
    let by_alpha = ok(
        &app,
        &operator,
        "audit/list",
        json!({ "tenant": a, "filter": { "actor": "user:alpha@example.com" } }),
    )
    .await;
    let actions: Vec<&str> = by_alpha
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["key.create", "rule.create"]);
    let later = ok(
        &app,
        &operator,
        "audit/list",
        json!({ "tenant": a, "filter": { "since_ms": at + 1 } }),
    )
    .await;
    assert_eq!(later.as_array().unwrap().len(), 0, "{later}");
    let platform = ok(
        &app,
        &operator,
        "audit/list",
        json!({ "tenant": null, "filter": { "action": "user.create" } }),
    )
    .await;
    // The bootstrap operator and the two tenant admins.
    assert_eq!(platform.as_array().unwrap().len(), 3, "{platform}");
}

#[tokio::test]
async fn simulate_decides_without_consuming_on_redis() {
    let redis = RedisServer::start();
    let database = shared_postgres().fresh_database().await;
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(database);
    config.redis_url = Some(redis.url());
    let app = spawn_app(config).await;
    let op = app.operator_key().await;
    let t = setup_tenant(
        &app,
        &op,
        &[rule(
            "pair",
            "exact",
            Some("GET /x"),
            "token_bucket",
            2,
            60_000,
        )],
    )
    .await;
    let path = format!("/v1/admin/tenants/{}/simulate", t.id);
    let simulate = |body: Value| {
        let (app, key, path) = (&app, t.admin_key.clone(), path.clone());
        async move { app.call("POST", &path, Some(&key), Some(&body)).await }
    };
    for _ in 0..5 {
        let (status, _, sim) = simulate(json!({ "route": "GET /x" })).await;
        assert_eq!(status, 200, "{sim}");
        assert_eq!(
            (sim["allowed"].as_bool(), sim["policy"].as_str()),
            (Some(true), Some("pair"))
        );
        assert_eq!(sim["rules"][0]["remaining"].as_f64(), Some(1.0), "{sim}");
    }
    // Nothing was consumed: the real checks still get both.
    for expected in [200, 200, 429] {
        assert_eq!(
            app.check(&t.check_key, json!({ "route": "GET /x" }))
                .await
                .0,
            expected
        );
    }
    let (_, _, sim) = simulate(json!({ "route": "GET /x", "cost": 1 })).await;
    assert_eq!(sim["allowed"], false, "{sim}");
    assert_eq!(sim["rules"][0]["verdict"], "deny");
    assert!(
        sim["rules"][0]["retry_after_ms"].as_u64().unwrap() > 0,
        "{sim}"
    );
    // A route no rule matches, and bad input.
    let (_, _, sim) = simulate(json!({ "route": "GET /other" })).await;
    assert_eq!(
        (sim["allowed"].as_bool(), &sim["policy"]),
        (Some(true), &Value::Null)
    );
    let (status, _, problem) = simulate(json!({ "route": "GET /x", "cost": 0 })).await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(problem["errors"][0]["field"], "cost");
    // The buckets are the one the checks wrote; nothing a simulation wrote.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("sl:*")
        .query(
            &mut redis::Client::open(redis.url())
                .unwrap()
                .get_connection()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
}

#[tokio::test]
async fn an_operator_disables_enables_and_resets_a_user_and_their_sessions_end_at_once() {
    let (app, _dir) = embedded().await;
    let operator = signed_in(&app, "admin@localhost", OPERATOR_PASSWORD).await;
    let (alpha, _) = two_tenants(&app, &operator).await;
    let admin = signed_in(&app, "alpha@example.com", ADMIN_PASSWORD).await;
    let rules = json!({ "tenant": alpha });
    ok(&app, &admin, "rules/list", rules.clone()).await;

    // Listing users is for operators; so are disabling and resets.
    let users = ok(&app, &operator, "users/list", json!({})).await;
    let emails: Vec<&str> = users
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["email"].as_str().unwrap())
        .collect();
    assert_eq!(
        emails,
        ["admin@localhost", "alpha@example.com", "beta@example.com"]
    );
    let id_of = |email: &str| id_by_email(&users, email);
    let (me, alpha_admin) = (id_of("admin@localhost"), id_of("alpha@example.com"));
    for (endpoint, args) in [
        ("users/list", json!({})),
        (
            "users/set_disabled",
            json!({ "user": id_of("beta@example.com"), "disabled": true }),
        ),
        (
            "users/reset_password",
            json!({ "user": id_of("beta@example.com") }),
        ),
    ] {
        let refused = call(&app, &admin, endpoint, args).await.unwrap_err();
        assert!(refused.contains("only operators"), "{endpoint}: {refused}");
    }
    // Not on one's own account.
    let refused = call(
        &app,
        &operator,
        "users/set_disabled",
        json!({ "user": me, "disabled": true }),
    )
    .await
    .unwrap_err();
    assert!(refused.contains("your own account"), "{refused}");

    // Disabled: the signed-in admin's next action is refused, and sign-in says why.
    let disabled = ok(
        &app,
        &operator,
        "users/set_disabled",
        json!({ "user": alpha_admin, "disabled": true }),
    )
    .await;
    assert!(disabled["disabled_at"].is_i64(), "{disabled}");
    let refused = call(&app, &admin, "rules/list", rules.clone())
        .await
        .unwrap_err();
    assert!(refused.contains("Unauthorized"), "{refused}");
    let again = browser();
    let response = again
        .post(app.url("/api/sign_in"))
        .form(&[("email", "alpha@example.com"), ("password", ADMIN_PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert!(response.text().await.unwrap().contains("disabled"));
    // A wrong password learns nothing of it.
    let response = again
        .post(app.url("/api/sign_in"))
        .form(&[
            ("email", "alpha@example.com"),
            ("password", "not the password"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let said = response.text().await.unwrap();
    assert!(
        said.contains("wrong email or password") && !said.contains("disabled"),
        "{said}"
    );

    // Enabled again, the same password signs in.
    ok(
        &app,
        &operator,
        "users/set_disabled",
        json!({ "user": alpha_admin, "disabled": false }),
    )
    .await;
    let admin = signed_in(&app, "alpha@example.com", ADMIN_PASSWORD).await;
    ok(&app, &admin, "rules/list", rules.clone()).await;

    // A reset: a new password, answered once; the old one and the old session end.
    let password = ok(
        &app,
        &operator,
        "users/reset_password",
        json!({ "user": alpha_admin }),
    )
    .await;
    // Named with the email it belongs to, so two resets in a row cannot be mixed up.
    assert_eq!(password["email"], "alpha@example.com");
    let password = password["password"].as_str().unwrap().to_owned();
    assert!(password.chars().count() >= 12, "{password}");
    assert!(call(&app, &admin, "rules/list", rules.clone())
        .await
        .is_err());
    let response = browser()
        .post(app.url("/api/sign_in"))
        .form(&[("email", "alpha@example.com"), ("password", ADMIN_PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let admin = signed_in(&app, "alpha@example.com", &password).await;
    ok(&app, &admin, "rules/list", rules).await;

    // Each is audited in the tenant's log, never with the password.
    let sluice::store::Db::Sqlite(pool) = &app.db else {
        panic!("embedded")
    };
    let actions: Vec<(String, String)> = sqlx::query_as(
        "SELECT action, detail FROM audit_events WHERE tenant_id = $1 AND action LIKE 'user.%' ORDER BY id",
    )
    .bind(&alpha)
    .fetch_all(pool)
    .await
    .unwrap();
    let names: Vec<&str> = actions.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        names,
        [
            "user.create",
            "user.disable",
            "user.enable",
            "user.reset_password"
        ]
    );
    assert_eq!(
        serde_json::from_str::<Value>(&actions[1].1).unwrap()["sessions_ended"],
        1
    );
    assert!(actions.iter().all(|(_, d)| !d.contains(&password)));
    // The right password for the disabled account is audited as such, the wrong one not.
    let reasons: Vec<String> = sqlx::query_scalar(
        "SELECT detail FROM audit_events WHERE action = 'user.sign_in_failed' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let reasons: Vec<Value> = reasons
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap()["reason"].clone())
        .collect();
    assert_eq!(
        reasons,
        [
            json!("the account is disabled"),
            json!("wrong email or password"),
            // The old password after the reset.
            json!("wrong email or password"),
        ]
    );
}

#[tokio::test]
async fn an_operator_deletes_a_user_whose_session_ends_and_who_cannot_sign_in_again() {
    let (app, _dir) = embedded().await;
    let operator = signed_in(&app, "admin@localhost", OPERATOR_PASSWORD).await;
    let (alpha, _) = two_tenants(&app, &operator).await;
    let admin = signed_in(&app, "alpha@example.com", ADMIN_PASSWORD).await;
    let rules = json!({ "tenant": alpha });
    ok(&app, &admin, "rules/list", rules.clone()).await;
    let users = ok(&app, &operator, "users/list", json!({})).await;
    let id_of = |email: &str| id_by_email(&users, email);
    let (me, alpha_admin) = (id_of("admin@localhost"), id_of("alpha@example.com"));

    // Only operators delete, and never themselves.
    let refused = call(
        &app,
        &admin,
        "users/delete",
        json!({ "user": id_of("beta@example.com") }),
    )
    .await
    .unwrap_err();
    assert!(refused.contains("only operators"), "{refused}");
    let refused = call(&app, &operator, "users/delete", json!({ "user": me }))
        .await
        .unwrap_err();
    assert!(refused.contains("your own account"), "{refused}");

    ok(
        &app,
        &operator,
        "users/delete",
        json!({ "user": alpha_admin }),
    )
    .await;
    // The signed-in admin's next action is refused, the password no longer signs in, and
    // the user is gone from the list (a second delete finds nothing).
    let refused = call(&app, &admin, "rules/list", rules).await.unwrap_err();
    assert!(refused.contains("Unauthorized"), "{refused}");
    let response = browser()
        .post(app.url("/api/sign_in"))
        .form(&[("email", "alpha@example.com"), ("password", ADMIN_PASSWORD)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let listed = ok(&app, &operator, "users/list", json!({})).await;
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|u| u["email"] != "alpha@example.com"),
        "{listed}"
    );
    let again = call(
        &app,
        &operator,
        "users/delete",
        json!({ "user": alpha_admin }),
    )
    .await
    .unwrap_err();
    assert!(again.contains("NotFound"), "{again}");

    // Audited in the tenant's log with the session it ended.
    let sluice::store::Db::Sqlite(pool) = &app.db else {
        panic!("embedded")
    };
    let deleted: Vec<(String, String)> = sqlx::query_as(
        "SELECT actor, detail FROM audit_events WHERE tenant_id = $1 AND action = 'user.delete'",
    )
    .bind(&alpha)
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(deleted.len(), 1, "{deleted:?}");
    assert_eq!(deleted[0].0, "user:admin@localhost");
    let detail: Value = serde_json::from_str(&deleted[0].1).unwrap();
    assert_eq!(
        (&detail["email"], &detail["sessions_ended"]),
        (&json!("alpha@example.com"), &json!(1))
    );
}

#[tokio::test]
async fn a_tenant_admin_lists_and_adds_admins_of_their_own_tenant_only() {
    let (app, _dir) = embedded().await;
    let operator = signed_in(&app, "admin@localhost", OPERATOR_PASSWORD).await;
    let (alpha, beta) = two_tenants(&app, &operator).await;
    let admin = signed_in(&app, "alpha@example.com", ADMIN_PASSWORD).await;
    let emails = |listed: &Value| -> Vec<String> {
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u["email"].as_str().unwrap().to_owned())
            .collect()
    };

    let listed = ok(
        &app,
        &admin,
        "users/tenant_admins",
        json!({ "tenant": alpha }),
    )
    .await;
    assert_eq!(emails(&listed), ["alpha@example.com"]);
    ok(
        &app,
        &admin,
        "tenants/add_admin",
        json!({ "tenant": alpha, "email": "Second@Example.com", "password": ADMIN_PASSWORD }),
    )
    .await;
    // The new admin signs in to the same tenant; the operator sees both.
    let second = signed_in(&app, "second@example.com", ADMIN_PASSWORD).await;
    ok(&app, &second, "rules/list", json!({ "tenant": alpha })).await;
    let listed = ok(
        &app,
        &operator,
        "users/tenant_admins",
        json!({ "tenant": alpha }),
    )
    .await;
    assert_eq!(emails(&listed), ["alpha@example.com", "second@example.com"]);
    // A short password or a taken email is refused with what to fix.
    let short = call(
        &app,
        &admin,
        "tenants/add_admin",
        json!({ "tenant": alpha, "email": "third@example.com", "password": "short" }),
    )
    .await
    .unwrap_err();
    assert!(short.contains("at least 12 characters"), "{short}");
    let taken = call(
        &app,
        &admin,
        "tenants/add_admin",
        json!({ "tenant": alpha, "email": "beta@example.com", "password": ADMIN_PASSWORD }),
    )
    .await
    .unwrap_err();
    assert!(taken.contains("Conflict"), "{taken}");

    // Another tenant's admins do not exist for them, and none can be added there.
    for (endpoint, args) in [
        ("users/tenant_admins", json!({ "tenant": beta })),
        (
            "tenants/add_admin",
            json!({ "tenant": beta, "email": "mole@example.com", "password": ADMIN_PASSWORD }),
        ),
    ] {
        let refused = call(&app, &admin, endpoint, args).await.unwrap_err();
        assert!(refused.contains("NotFound"), "{endpoint}: {refused}");
    }
    let beta_admins = ok(
        &app,
        &operator,
        "users/tenant_admins",
        json!({ "tenant": beta }),
    )
    .await;
    assert_eq!(emails(&beta_admins), ["beta@example.com"]);

    // The addition is in the tenant's log, by the admin who made it.
    let sluice::store::Db::Sqlite(pool) = &app.db else {
        panic!("embedded")
    };
    let actors: Vec<String> = sqlx::query_scalar(
        "SELECT actor FROM audit_events WHERE tenant_id = $1 AND action = 'user.create' ORDER BY id",
    )
    .bind(&alpha)
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(actors, ["user:admin@localhost", "user:alpha@example.com"]);
}
