//! The OpenAPI document: valid per an OpenAPI validator, and true: every operation it lists
//! is called here, each call answers the status the walk expects of it (EXPECTED), and every
//! answer's status is one it declares for that operation.

use std::path::Path;
use std::process::Command;

use app::keys::KeyKind;
use serde_json::{json, Value};

use crate::helpers::{new_key, rule, spawn_embedded, TestApp};

#[tokio::test]
async fn the_openapi_document_passes_an_openapi_validator() {
    let app = spawn_embedded().await;
    let (status, headers, document) = app.call("GET", "/v1/openapi.json", None, None).await;
    assert_eq!(status, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let end2end = Path::new(env!("CARGO_MANIFEST_DIR")).join("../end2end");
    assert!(
        end2end
            .join("node_modules/@apidevtools/swagger-parser")
            .exists(),
        "the validator is not installed: run scripts/setup (it runs npm ci in end2end/)"
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(&document).unwrap()).unwrap();
    let out = Command::new("node")
        .arg(end2end.join("validate-openapi.cjs"))
        .arg(file.path())
        .output()
        .expect("node runs (scripts/setup installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("valid: Sluice"), "{said}");

    // And the validator really rejects a broken document.
    let mut broken = document.clone();
    broken["paths"]["/v1/check"]["post"]["responses"] = json!("not responses");
    std::fs::write(file.path(), serde_json::to_vec(&broken).unwrap()).unwrap();
    let out = Command::new("node")
        .arg(end2end.join("validate-openapi.cjs"))
        .arg(file.path())
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a broken document must fail validation"
    );
}

/// What each call of the walk must answer, in the order the walk makes them: every
/// operation's success and the refusals it documents.
const EXPECTED: &[(&str, &str, u16)] = &[
    ("get", "/v1/openapi.json", 200),
    ("post", "/v1/admin/tenants", 201),
    ("post", "/v1/admin/tenants", 409),
    ("get", "/v1/admin/tenants", 200),
    ("get", "/v1/admin/tenants/{tenant}", 200),
    ("get", "/v1/admin/tenants/{tenant}", 404),
    ("post", "/v1/admin/tenants/{tenant}/keys", 201),
    ("post", "/v1/admin/tenants/{tenant}/keys", 201),
    ("post", "/v1/admin/tenants/{tenant}/keys", 400),
    ("get", "/v1/admin/tenants/{tenant}/keys", 200),
    ("get", "/v1/admin/tenants/{tenant}/keys", 403),
    ("post", "/v1/admin/tenants/{tenant}/rules", 201),
    ("get", "/v1/admin/tenants/{tenant}/rules", 200),
    ("get", "/v1/admin/tenants/{tenant}/rules/{id}", 200),
    ("put", "/v1/admin/tenants/{tenant}/rules/{id}", 200),
    ("put", "/v1/admin/tenants/{tenant}/rules/{id}", 400),
    ("get", "/v1/admin/tenants/{tenant}/rules/export", 200),
    ("get", "/v1/admin/tenants/{tenant}/rules/export", 400),
    ("post", "/v1/admin/tenants/{tenant}/rules/import", 200),
    ("post", "/v1/admin/tenants/{tenant}/rules/import", 200),
    ("post", "/v1/admin/tenants/{tenant}/rules/import", 400),
    ("post", "/v1/admin/tenants/{tenant}/rules/import", 409),
    ("post", "/v1/reserve", 200),
    ("post", "/v1/reserve", 400),
    ("post", "/v1/reserve", 401),
    ("post", "/v1/reserve", 403),
    ("post", "/v1/settle", 200),
    ("post", "/v1/settle", 409),
    ("post", "/v1/settle", 404),
    ("post", "/v1/settle", 400),
    ("post", "/v1/settle", 401),
    ("post", "/v1/settle", 403),
    ("post", "/v1/check", 200),
    ("post", "/v1/reserve", 429),
    ("post", "/v1/check", 429),
    ("post", "/v1/check", 400),
    ("post", "/v1/check", 401),
    ("post", "/v1/check", 403),
    ("post", "/v1/admin/tenants/{tenant}/rules/{id}/reset", 200),
    ("post", "/v1/check", 200),
    ("post", "/v1/admin/tenants/{tenant}/rules/{id}/reset", 400),
    ("post", "/v1/admin/tenants/{tenant}/rules", 201),
    ("post", "/v1/admin/tenants/{tenant}/rules/{id}/reset", 200),
    ("post", "/v1/check", 200),
    ("post", "/v1/release", 200),
    ("post", "/v1/release", 404),
    ("post", "/v1/release", 400),
    ("post", "/v1/release", 401),
    ("post", "/v1/release", 403),
    ("post", "/v1/admin/tenants/{tenant}/rules", 201),
    (
        "post",
        "/v1/admin/tenants/{tenant}/rules/{id}/overrides",
        201,
    ),
    (
        "post",
        "/v1/admin/tenants/{tenant}/rules/{id}/overrides",
        200,
    ),
    (
        "post",
        "/v1/admin/tenants/{tenant}/rules/{id}/overrides",
        400,
    ),
    (
        "get",
        "/v1/admin/tenants/{tenant}/rules/{id}/overrides",
        200,
    ),
    (
        "delete",
        "/v1/admin/tenants/{tenant}/rules/{id}/overrides/{override_id}",
        204,
    ),
    (
        "delete",
        "/v1/admin/tenants/{tenant}/rules/{id}/overrides/{override_id}",
        404,
    ),
    ("post", "/v1/admin/tenants/{tenant}/keys/{id}/rotate", 201),
    ("post", "/v1/admin/tenants/{tenant}/keys/{id}/revoke", 200),
    ("post", "/v1/admin/tenants/{tenant}/suspend", 200),
    ("post", "/v1/admin/tenants/{tenant}/suspend", 403),
    ("post", "/v1/admin/tenants/{tenant}/resume", 200),
    ("put", "/v1/admin/tenants/{tenant}/quotas", 200),
    ("put", "/v1/admin/tenants/{tenant}/quotas", 403),
    ("put", "/v1/admin/tenants/{tenant}/quotas", 400),
    ("get", "/v1/admin/tenants/{tenant}/quotas", 200),
    ("get", "/v1/admin/tenants/{tenant}/audit", 200),
    ("get", "/v1/admin/audit", 200),
    ("get", "/v1/admin/audit", 200),
    ("get", "/v1/admin/tenants/{tenant}/audit", 400),
    ("get", "/v1/admin/tenants/{tenant}/top-denied", 200),
    ("get", "/v1/admin/tenants/{tenant}/top-denied", 400),
    ("post", "/v1/admin/tenants/{tenant}/simulate", 200),
    ("post", "/v1/admin/tenants/{tenant}/simulate", 400),
    ("delete", "/v1/admin/tenants/{tenant}/rules/{id}", 204),
    ("delete", "/v1/admin/tenants/{tenant}/rules/{id}", 404),
    ("get", "/v1/admin/operator-keys", 200),
    ("get", "/v1/admin/operator-keys", 403),
    ("post", "/v1/admin/operator-keys/{id}/rotate", 201),
    ("post", "/v1/admin/operator-keys/{id}/rotate", 400),
    ("post", "/v1/admin/operator-keys/{id}/revoke", 200),
    ("post", "/v1/admin/operator-keys/{id}/revoke", 404),
    ("get", "/v1/admin/users", 200),
    ("get", "/v1/admin/users", 403),
    ("post", "/v1/admin/users/{id}/disable", 200),
    ("post", "/v1/admin/users/{id}/disable", 404),
    ("post", "/v1/admin/users/{id}/enable", 200),
    ("post", "/v1/admin/users/{id}/reset-password", 200),
    ("post", "/v1/admin/users/{id}/reset-password", 403),
    ("post", "/v1/admin/tenants/{tenant}/users", 403),
    ("post", "/v1/admin/tenants/{tenant}/users", 201),
    ("post", "/v1/admin/tenants/{tenant}/users", 409),
    ("post", "/v1/admin/tenants/{tenant}/users", 400),
    ("get", "/v1/admin/tenants/{tenant}/users", 200),
    ("get", "/v1/admin/tenants/{tenant}/users", 404),
    ("get", "/v1/admin/users/{id}/sessions", 200),
    ("get", "/v1/admin/users/{id}/sessions", 403),
    ("delete", "/v1/admin/users/{id}/sessions", 200),
    ("delete", "/v1/admin/users/{id}", 403),
    ("delete", "/v1/admin/users/{id}", 204),
    ("delete", "/v1/admin/users/{id}", 404),
];

/// Calls made in the walk: (method, path template, status).
struct Walk<'a> {
    app: &'a TestApp,
    calls: Vec<(String, String, u16)>,
}

impl Walk<'_> {
    async fn call(
        &mut self,
        method: &str,
        template: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let (status, _, answer) = self.app.call(method, path, key, body.as_ref()).await;
        self.calls
            .push((method.to_lowercase(), template.to_owned(), status));
        (status, answer)
    }
}

#[tokio::test]
async fn every_documented_operation_is_exercised_and_answers_a_documented_status() {
    let app = spawn_embedded().await;
    let op = app.operator_key().await;
    let mut w = Walk {
        app: &app,
        calls: Vec::new(),
    };
    let (_, document) = w
        .call("GET", "/v1/openapi.json", "/v1/openapi.json", None, None)
        .await;

    let (_, tenant) = w
        .call(
            "POST",
            "/v1/admin/tenants",
            "/v1/admin/tenants",
            Some(&op),
            Some(json!({ "name": "walk" })),
        )
        .await;
    let t = tenant["id"].as_str().unwrap().to_owned();
    w.call(
        "POST",
        "/v1/admin/tenants",
        "/v1/admin/tenants",
        Some(&op),
        Some(json!({ "name": "walk" })),
    )
    .await; // 409
    w.call(
        "GET",
        "/v1/admin/tenants",
        "/v1/admin/tenants",
        Some(&op),
        None,
    )
    .await;
    w.call(
        "GET",
        "/v1/admin/tenants/{tenant}",
        &format!("/v1/admin/tenants/{t}"),
        Some(&op),
        None,
    )
    .await;
    w.call(
        "GET",
        "/v1/admin/tenants/{tenant}",
        "/v1/admin/tenants/nope",
        Some(&op),
        None,
    )
    .await; // 404

    let keys = "/v1/admin/tenants/{tenant}/keys";
    let keys_path = format!("/v1/admin/tenants/{t}/keys");
    let (admin, hash, prefix) = new_key(KeyKind::Admin);
    w.call(
        "POST",
        keys,
        &keys_path,
        Some(&op),
        Some(json!({ "kind": "admin", "name": "a", "hash": hash, "prefix": prefix })),
    )
    .await;
    let (check, hash, prefix) = new_key(KeyKind::Check);
    let (_, check_key) = w
        .call(
            "POST",
            keys,
            &keys_path,
            Some(&admin),
            Some(json!({ "kind": "check", "name": "c", "hash": hash, "prefix": prefix })),
        )
        .await;
    w.call(
        "POST",
        keys,
        &keys_path,
        Some(&admin),
        Some(json!({ "kind": "check", "name": "c", "hash": "short", "prefix": prefix })),
    )
    .await; // 400
    w.call("GET", keys, &keys_path, Some(&admin), None).await;
    w.call("GET", keys, &keys_path, Some(&check), None).await; // 403

    let rules = "/v1/admin/tenants/{tenant}/rules";
    let rules_path = format!("/v1/admin/tenants/{t}/rules");
    let (_, created) = w
        .call(
            "POST",
            rules,
            &rules_path,
            Some(&admin),
            Some(rule("r", "all", None, "gcra", 1, 60_000)),
        )
        .await;
    let rule_path = format!("{rules_path}/{}", created["id"].as_str().unwrap());
    let one_rule = "/v1/admin/tenants/{tenant}/rules/{id}";
    w.call("GET", rules, &rules_path, Some(&admin), None).await;
    w.call("GET", one_rule, &rule_path, Some(&admin), None)
        .await;
    w.call(
        "PUT",
        one_rule,
        &rule_path,
        Some(&admin),
        Some(rule("r", "all", None, "gcra", 1, 60_000)),
    )
    .await;
    w.call(
        "PUT",
        one_rule,
        &rule_path,
        Some(&admin),
        Some(json!({ "name": "r" })),
    )
    .await; // 400

    // The rules as a file, and that file imported: a dry run, the plan applied, a file that
    // is not one, and a fingerprint that is not the plan's.
    let export = "/v1/admin/tenants/{tenant}/rules/export";
    let (_, file) = w
        .call(
            "GET",
            export,
            &format!("{rules_path}/export"),
            Some(&admin),
            None,
        )
        .await;
    w.call(
        "GET",
        export,
        &format!("{rules_path}/export?format=xml"),
        Some(&admin),
        None,
    )
    .await; // 400
    let import = "/v1/admin/tenants/{tenant}/rules/import";
    let mut edited = file.clone();
    edited["rules"][0]["limit"] = json!(2);
    let (_, plan) = w
        .call(
            "POST",
            import,
            &format!("{rules_path}/import?dry_run=true"),
            Some(&admin),
            Some(edited.clone()),
        )
        .await;
    assert_eq!(plan["update"][0]["changes"][0]["field"], "limit", "{plan}");
    let stale = plan["fingerprint"].as_str().unwrap().to_owned();
    w.call(
        "POST",
        import,
        &format!("{rules_path}/import"),
        Some(&admin),
        Some(file.clone()),
    )
    .await; // 200: nothing to change
    w.call(
        "POST",
        import,
        &format!("{rules_path}/import"),
        Some(&admin),
        Some(json!({ "rules": [{ "name": "r" }] })),
    )
    .await; // 400
    w.call(
        "POST",
        import,
        &format!("{rules_path}/import?expect=not-{stale}"),
        Some(&admin),
        Some(edited),
    )
    .await; // 409

    // Reserve the one request the rule allows, and settle it at 0: the check below is
    // admitted only because the estimate came back.
    let (_, reserved) = w
        .call(
            "POST",
            "/v1/reserve",
            "/v1/reserve",
            Some(&check),
            Some(json!({ "route": "GET /", "ttl_ms": 5_000 })),
        )
        .await; // 200
    let id = reserved["reservation"].as_str().unwrap().to_owned();
    let settle = |cost: i64| json!({ "reservation": id, "cost": cost });
    for (key, body) in [
        (Some(&check), json!({ "route": "GET /", "ttl_ms": 1 })), // 400
        (None, json!({ "route": "GET /" })),                      // 401
        (Some(&admin), json!({ "route": "GET /" })),              // 403
    ] {
        w.call(
            "POST",
            "/v1/reserve",
            "/v1/reserve",
            key.map(String::as_str),
            Some(body),
        )
        .await;
    }
    for (key, body) in [
        (Some(&check), settle(0)), // 200
        (Some(&check), settle(1)), // 409
        (
            Some(&check),
            json!({ "reservation": "0".repeat(32), "cost": 0 }),
        ), // 404
        (Some(&check), json!({ "reservation": id })), // 400
        (None, settle(0)),         // 401
        (Some(&admin), settle(0)), // 403
    ] {
        w.call(
            "POST",
            "/v1/settle",
            "/v1/settle",
            key.map(String::as_str),
            Some(body),
        )
        .await;
    }

    w.call(
        "POST",
        "/v1/check",
        "/v1/check",
        Some(&check),
        Some(json!({ "route": "GET /" })),
    )
    .await; // 200
    w.call(
        "POST",
        "/v1/reserve",
        "/v1/reserve",
        Some(&check),
        Some(json!({ "route": "GET /" })),
    )
    .await; // 429
    w.call(
        "POST",
        "/v1/check",
        "/v1/check",
        Some(&check),
        Some(json!({ "route": "GET /" })),
    )
    .await; // 429
    w.call(
        "POST",
        "/v1/check",
        "/v1/check",
        Some(&check),
        Some(json!({ "cost": 1 })),
    )
    .await; // 400
    w.call(
        "POST",
        "/v1/check",
        "/v1/check",
        None,
        Some(json!({ "route": "GET /" })),
    )
    .await; // 401
    w.call(
        "POST",
        "/v1/check",
        "/v1/check",
        Some(&admin),
        Some(json!({ "route": "GET /" })),
    )
    .await; // 403

    // The denied tenant-wide bucket cleared: the next check is admitted again.
    let reset = "/v1/admin/tenants/{tenant}/rules/{id}/reset";
    let reset_path = format!("{rule_path}/reset");
    let (status, cleared) = w
        .call("POST", reset, &reset_path, Some(&admin), Some(json!({})))
        .await;
    assert_eq!(
        (status, &cleared["cleared"]),
        (200, &json!(true)),
        "{cleared}"
    );
    let (status, _) = w
        .call(
            "POST",
            "/v1/check",
            "/v1/check",
            Some(&check),
            Some(json!({ "route": "GET /" })),
        )
        .await;
    assert_eq!(status, 200, "a check after the reset");
    w.call(
        "POST",
        reset,
        &reset_path,
        Some(&admin),
        Some(json!({ "subject": "x" })),
    )
    .await; // 400

    // A concurrency rule: a check takes a lease, released once; then the errors.
    w.call(
        "POST",
        rules,
        &rules_path,
        Some(&admin),
        Some(
            json!({ "name": "slots", "match": "prefix", "route": "GET /slots", "scope": "tenant",
                     "algorithm": "concurrency", "limit": 2, "period_ms": 60_000 }),
        ),
    )
    .await; // 201
            // The tenant-wide rule `r` (every check, one a minute) is spent: cleared once more.
    w.call("POST", reset, &reset_path, Some(&admin), Some(json!({})))
        .await; // 200
    let (_, taken) = w
        .call(
            "POST",
            "/v1/check",
            "/v1/check",
            Some(&check),
            Some(json!({ "route": "GET /slots" })),
        )
        .await; // 200
    let lease = taken["lease"].as_str().unwrap().to_owned();
    for (key, body) in [
        (Some(&check), json!({ "lease": lease })),          // 200
        (Some(&check), json!({ "lease": "0".repeat(32) })), // 404
        (Some(&check), json!({ "lease": "x" })),            // 400
        (None, json!({ "lease": lease })),                  // 401
        (Some(&admin), json!({ "lease": lease })),          // 403
    ] {
        w.call(
            "POST",
            "/v1/release",
            "/v1/release",
            key.map(String::as_str),
            Some(body),
        )
        .await;
    }

    // Overrides of a rule per subject: set, replaced, refused on a tenant-wide rule, listed,
    // deleted, and deleted again.
    let (_, per_subject) = w
        .call(
            "POST",
            rules,
            &rules_path,
            Some(&admin),
            Some(
                json!({ "name": "u", "match": "prefix", "route": "GET /u", "scope": "subject",
                         "algorithm": "token_bucket", "limit": 5, "period_ms": 1000 }),
            ),
        )
        .await;
    let overrides = "/v1/admin/tenants/{tenant}/rules/{id}/overrides";
    let overrides_path = format!(
        "{rules_path}/{}/overrides",
        per_subject["id"].as_str().unwrap()
    );
    for limit in [50, 60] {
        w.call(
            "POST",
            overrides,
            &overrides_path,
            Some(&admin),
            Some(json!({ "subject": "acme-*", "limit": limit })),
        )
        .await; // 201, then 200
    }
    w.call(
        "POST",
        overrides,
        &format!("{rule_path}/overrides"),
        Some(&admin),
        Some(json!({ "subject": "acme-*", "limit": 50 })),
    )
    .await; // 400: a tenant-wide rule
    let (_, listed) = w
        .call("GET", overrides, &overrides_path, Some(&admin), None)
        .await;
    let one_override = "/v1/admin/tenants/{tenant}/rules/{id}/overrides/{override_id}";
    let override_path = format!("{overrides_path}/{}", listed[0]["id"].as_str().unwrap());
    for _ in 0..2 {
        w.call("DELETE", one_override, &override_path, Some(&admin), None)
            .await; // 204, then 404
    }

    let check_id = check_key["id"].as_str().unwrap();
    let (_, hash, prefix) = new_key(KeyKind::Check);
    let (_, rotated) = w
        .call(
            "POST",
            "/v1/admin/tenants/{tenant}/keys/{id}/rotate",
            &format!("{keys_path}/{check_id}/rotate"),
            Some(&admin),
            Some(json!({ "hash": hash, "prefix": prefix, "grace_seconds": 60 })),
        )
        .await;
    let rotated_id = rotated["id"].as_str().unwrap();
    w.call(
        "POST",
        "/v1/admin/tenants/{tenant}/keys/{id}/revoke",
        &format!("{keys_path}/{rotated_id}/revoke"),
        Some(&admin),
        None,
    )
    .await;

    w.call(
        "POST",
        "/v1/admin/tenants/{tenant}/suspend",
        &format!("/v1/admin/tenants/{t}/suspend"),
        Some(&op),
        None,
    )
    .await;
    w.call(
        "POST",
        "/v1/admin/tenants/{tenant}/suspend",
        &format!("/v1/admin/tenants/{t}/suspend"),
        Some(&admin),
        None,
    )
    .await; // 403
    w.call(
        "POST",
        "/v1/admin/tenants/{tenant}/resume",
        &format!("/v1/admin/tenants/{t}/resume"),
        Some(&op),
        None,
    )
    .await;
    let quotas = "/v1/admin/tenants/{tenant}/quotas";
    let quotas_path = format!("/v1/admin/tenants/{t}/quotas");
    w.call(
        "PUT",
        quotas,
        &quotas_path,
        Some(&op),
        Some(json!({ "max_rules": 20 })),
    )
    .await;
    w.call(
        "PUT",
        quotas,
        &quotas_path,
        Some(&admin),
        Some(json!({ "max_rules": 2000 })),
    )
    .await; // 403: operators only
    w.call(
        "PUT",
        quotas,
        &quotas_path,
        Some(&op),
        Some(json!({ "max_keys": 1_000_000 })),
    )
    .await; // 400
    let (_, in_force) = w
        .call("GET", quotas, &quotas_path, Some(&admin), None)
        .await;
    assert_eq!(
        in_force,
        json!({ "max_rules": 20, "max_keys": 50, "max_live_buckets": 1_000_000 })
    );
    w.call(
        "GET",
        "/v1/admin/tenants/{tenant}/audit",
        &format!("/v1/admin/tenants/{t}/audit"),
        Some(&admin),
        None,
    )
    .await;
    w.call("GET", "/v1/admin/audit", "/v1/admin/audit", Some(&op), None)
        .await;
    w.call(
        "GET",
        "/v1/admin/audit",
        "/v1/admin/audit?action=tenant.suspend&since_ms=0",
        Some(&op),
        None,
    )
    .await;
    w.call(
        "GET",
        "/v1/admin/tenants/{tenant}/audit",
        &format!("/v1/admin/tenants/{t}/audit?since_ms=yesterday"),
        Some(&admin),
        None,
    )
    .await; // 400
    let top = "/v1/admin/tenants/{tenant}/top-denied";
    let (_, denied) = w
        .call(
            "GET",
            top,
            &format!("/v1/admin/tenants/{t}/top-denied?range=1h&limit=5"),
            Some(&admin),
            None,
        )
        .await;
    assert_eq!(denied["range"], "1h", "{denied}");
    w.call(
        "GET",
        top,
        &format!("/v1/admin/tenants/{t}/top-denied?range=7d"),
        Some(&admin),
        None,
    )
    .await; // 400
    let simulate = "/v1/admin/tenants/{tenant}/simulate";
    let simulate_path = format!("/v1/admin/tenants/{t}/simulate");
    w.call(
        "POST",
        simulate,
        &simulate_path,
        Some(&admin),
        Some(json!({ "route": "GET /", "cost": 1 })),
    )
    .await;
    w.call(
        "POST",
        simulate,
        &simulate_path,
        Some(&admin),
        Some(json!({ "route": "" })),
    )
    .await; // 400
    w.call("DELETE", one_rule, &rule_path, Some(&admin), None)
        .await;
    w.call("DELETE", one_rule, &rule_path, Some(&admin), None)
        .await; // 404

    let operator_keys = "/v1/admin/operator-keys";
    let (_, listed) = w
        .call("GET", operator_keys, operator_keys, Some(&op), None)
        .await;
    w.call("GET", operator_keys, operator_keys, Some(&admin), None)
        .await; // 403
    let op_id = listed[0]["id"].as_str().unwrap().to_owned();
    let (new_op, hash, prefix) = new_key(KeyKind::Operator);
    let rotate = "/v1/admin/operator-keys/{id}/rotate";
    let (_, new_op_key) = w
        .call(
            "POST",
            rotate,
            &format!("{operator_keys}/{op_id}/rotate"),
            Some(&op),
            Some(json!({ "hash": hash, "prefix": prefix, "grace_seconds": 60 })),
        )
        .await;
    // The new key works at once; the old one keeps working through its grace.
    let (status, _, _) = app.call("GET", operator_keys, Some(&new_op), None).await;
    assert_eq!(status, 200);
    let (_, hash, _) = new_key(KeyKind::Operator);
    w.call(
        "POST",
        rotate,
        &format!(
            "{operator_keys}/{}/rotate",
            new_op_key["id"].as_str().unwrap()
        ),
        Some(&op),
        Some(json!({ "hash": hash, "prefix": "sl_chk_00000" })),
    )
    .await; // 400: another kind's prefix
    let revoke = "/v1/admin/operator-keys/{id}/revoke";
    let new_op_id = new_op_key["id"].as_str().unwrap();
    w.call(
        "POST",
        revoke,
        &format!("{operator_keys}/{new_op_id}/revoke"),
        Some(&op),
        None,
    )
    .await;
    // Revoked: refused at once.
    let (status, _, _) = app.call("GET", operator_keys, Some(&new_op), None).await;
    assert_eq!(status, 401);
    w.call(
        "POST",
        revoke,
        &format!("{operator_keys}/{check_id}/revoke"),
        Some(&op),
        None,
    )
    .await; // 404: a tenant's key is not an operator key

    // Console users, for operators only.
    sluice::store::users::insert(
        &app.db,
        "walker@example.com",
        "not a hash",
        app::auth::Role::TenantAdmin,
        Some(&t),
    )
    .await
    .unwrap();
    let users = "/v1/admin/users";
    let (_, listed) = w.call("GET", users, users, Some(&op), None).await;
    let walker = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["email"] == "walker@example.com")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    w.call("GET", users, users, Some(&admin), None).await; // 403
    let disable = "/v1/admin/users/{id}/disable";
    let (_, disabled) = w
        .call(
            "POST",
            disable,
            &format!("{users}/{walker}/disable"),
            Some(&op),
            None,
        )
        .await;
    assert!(disabled["disabled_at"].is_i64(), "{disabled}");
    w.call(
        "POST",
        disable,
        &format!("{users}/nobody/disable"),
        Some(&op),
        None,
    )
    .await; // 404
    let enable = "/v1/admin/users/{id}/enable";
    let (_, enabled) = w
        .call(
            "POST",
            enable,
            &format!("{users}/{walker}/enable"),
            Some(&op),
            None,
        )
        .await;
    assert!(enabled["disabled_at"].is_null(), "{enabled}");
    let reset_password = "/v1/admin/users/{id}/reset-password";
    let (_, new_password) = w
        .call(
            "POST",
            reset_password,
            &format!("{users}/{walker}/reset-password"),
            Some(&op),
            None,
        )
        .await;
    assert!(new_password["password"].as_str().unwrap().len() >= 12);
    w.call(
        "POST",
        reset_password,
        &format!("{users}/{walker}/reset-password"),
        Some(&admin),
        None,
    )
    .await; // 403

    // A tenant's admins: an operator key adds one (its own admin key may not: a leaked key
    // would become a sign-in), and the tenant's admin key lists them.
    let tenant_users = "/v1/admin/tenants/{tenant}/users";
    let tenant_users_path = format!("/v1/admin/tenants/{t}/users");
    let second = json!({ "email": "Second@Example.com", "password": "a long enough password" });
    w.call(
        "POST",
        tenant_users,
        &tenant_users_path,
        Some(&admin),
        Some(second.clone()),
    )
    .await; // 403
    let (_, added) = w
        .call(
            "POST",
            tenant_users,
            &tenant_users_path,
            Some(&op),
            Some(second.clone()),
        )
        .await;
    assert_eq!(
        (&added["email"], &added["role"], &added["tenant_id"]),
        (
            &json!("second@example.com"),
            &json!("tenant_admin"),
            &json!(t)
        )
    );
    w.call(
        "POST",
        tenant_users,
        &tenant_users_path,
        Some(&op),
        Some(second),
    )
    .await; // 409
    w.call(
        "POST",
        tenant_users,
        &tenant_users_path,
        Some(&op),
        Some(json!({ "email": "third@example.com", "password": "short" })),
    )
    .await; // 400
    let (_, admins) = w
        .call("GET", tenant_users, &tenant_users_path, Some(&admin), None)
        .await;
    let emails: Vec<&str> = admins
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["email"].as_str().unwrap())
        .collect();
    assert_eq!(emails, ["second@example.com", "walker@example.com"]);
    w.call(
        "GET",
        tenant_users,
        "/v1/admin/tenants/nope/users",
        Some(&op),
        None,
    )
    .await; // 404

    // A user's sessions (the walker never signed in), and ending them.
    let sessions = "/v1/admin/users/{id}/sessions";
    let sessions_path = format!("{users}/{walker}/sessions");
    let (_, listed) = w
        .call("GET", sessions, &sessions_path, Some(&op), None)
        .await;
    assert_eq!(listed, json!([]));
    w.call("GET", sessions, &sessions_path, Some(&admin), None)
        .await; // 403
    let (_, ended) = w
        .call("DELETE", sessions, &sessions_path, Some(&op), None)
        .await;
    assert_eq!(ended, json!({ "sessions_ended": 0 }));

    // Deleting a user: operators only, once.
    let user = "/v1/admin/users/{id}";
    let user_path = format!("{users}/{walker}");
    w.call("DELETE", user, &user_path, Some(&admin), None).await; // 403
    w.call("DELETE", user, &user_path, Some(&op), None).await; // 204
    w.call("DELETE", user, &user_path, Some(&op), None).await; // 404

    // Each call answered exactly the status the walk expects of it, in order ...
    assert_eq!(w.calls.len(), EXPECTED.len(), "{:#?}", w.calls);
    for (i, ((method, template, status), (want_method, want_template, want))) in
        w.calls.iter().zip(EXPECTED).enumerate()
    {
        assert_eq!(
            (method.as_str(), template.as_str(), *status),
            (*want_method, *want_template, *want),
            "call {i}"
        );
    }
    // ... every documented operation was called ...
    let paths = document["paths"].as_object().unwrap();
    let mut operations = 0;
    for (template, item) in paths {
        for (method, operation) in item.as_object().unwrap() {
            if method == "parameters" {
                continue;
            }
            operations += 1;
            let id = operation["operationId"].as_str().unwrap();
            assert!(
                w.calls.iter().any(|(m, t, _)| m == method && t == template),
                "{id} ({method} {template}) is documented but was not exercised"
            );
        }
    }
    assert_eq!(operations, 43);
    // ... and every answer is documented for its operation.
    for (method, template, status) in &w.calls {
        let responses = &paths[template.as_str()][method.as_str()]["responses"];
        assert!(
            responses.get(status.to_string()).is_some(),
            "{method} {template} answered {status}, which the document does not list"
        );
    }
}
