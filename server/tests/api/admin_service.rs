//! The admin service as every transport sees it: one wire shape per resource (REST and the
//! console's server functions send the same JSON, and the OpenAPI document describes it), and
//! one authorisation (a suspended tenant is refused alike on REST, in the console and on the
//! dashboard stream, by the same decision).

use app::keys::KeyKind;
use serde_json::{json, Value};

use crate::console_admin::{call as server_fn, signed_in};
use crate::helpers::{embedded_with_operator, new_key, rule};

const PASSWORD: &str = "operator password 1";
const ADMIN_PASSWORD: &str = "tenant admin password";

/// Checks `value` against `schema` from the OpenAPI document `doc`: `$ref`, `allOf`, `type`
/// (with `null`), `enum`, `required`, `properties`, `additionalProperties: false`, `items`,
/// `minimum` and `maximum`. Returns every violation, with its JSON path.
fn violations(doc: &Value, schema: &Value, value: &Value, at: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.trim_start_matches("#/components/schemas/");
        return violations(doc, &doc["components"]["schemas"][name], value, at);
    }
    if let Some(all) = schema["allOf"].as_array() {
        for part in all {
            out.extend(violations(doc, part, value, at));
        }
    }
    if let Some(types) = schema.get("type") {
        let types: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let actual = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        let fits = types.contains(&actual) || (actual == "integer" && types.contains(&"number"));
        if !fits {
            out.push(format!("{at}: {actual} is not {types:?}"));
            return out;
        }
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            out.push(format!("{at}: {value} is not one of {allowed:?}"));
        }
    }
    if let (Some(min), Some(n)) = (schema["minimum"].as_f64(), value.as_f64()) {
        if n < min {
            out.push(format!("{at}: {n} < {min}"));
        }
    }
    if let (Some(max), Some(n)) = (schema["maximum"].as_f64(), value.as_f64()) {
        if n > max {
            out.push(format!("{at}: {n} > {max}"));
        }
    }
    if let Some(object) = value.as_object() {
        for field in schema["required"].as_array().into_iter().flatten() {
            let field = field.as_str().unwrap();
            if !object.contains_key(field) {
                out.push(format!("{at}: missing {field:?}"));
            }
        }
        let properties = schema["properties"].as_object();
        for (field, v) in object {
            match properties.and_then(|p| p.get(field)) {
                Some(property) => {
                    out.extend(violations(doc, property, v, &format!("{at}.{field}")))
                }
                None if schema["additionalProperties"] == json!(false) => {
                    out.push(format!("{at}: {field:?} is not in the schema"));
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for (i, v) in array.iter().enumerate() {
            out.extend(violations(doc, items, v, &format!("{at}[{i}]")));
        }
    }
    out
}

pub(crate) fn assert_matches_schema(doc: &Value, name: &str, value: &Value) {
    let schema = json!({ "$ref": format!("#/components/schemas/{name}") });
    let found = violations(doc, &schema, value, name);
    assert!(
        found.is_empty(),
        "{value} does not match {name}: {found:#?}"
    );
}

#[test]
fn the_schema_check_can_fail() {
    let doc = json!({ "components": { "schemas": { "T": {
        "type": "object", "required": ["a"], "additionalProperties": false,
        "properties": { "a": { "type": "string", "enum": ["x"] }, "n": { "type": ["integer", "null"], "minimum": 1 } }
    } } } });
    let t = json!({ "$ref": "#/components/schemas/T" });
    assert!(violations(&doc, &t, &json!({ "a": "x", "n": null }), "T").is_empty());
    for bad in [
        json!({}),
        json!({ "a": "y" }),
        json!({ "a": "x", "b": 1 }),
        json!({ "a": "x", "n": 0 }),
        json!([]),
    ] {
        assert!(!violations(&doc, &t, &bad, "T").is_empty(), "{bad}");
    }
}

#[tokio::test]
async fn rest_and_the_console_send_the_same_json_for_a_tenant_a_rule_and_a_key() {
    let (app, _dir) = embedded_with_operator(PASSWORD).await;
    let op = app.operator_key().await;
    let (_, _, tenant) = app
        .call(
            "POST",
            "/v1/admin/tenants",
            Some(&op),
            Some(&json!({ "name": "acme" })),
        )
        .await;
    let t = tenant["id"].as_str().unwrap();
    let mut body = rule(
        "transfers",
        "prefix",
        Some("POST /transfers"),
        "gcra",
        10,
        1000,
    );
    body["scope"] = json!("subject");
    let (status, _, created) = app
        .call(
            "POST",
            &format!("/v1/admin/tenants/{t}/rules"),
            Some(&op),
            Some(&body),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let (_, hash, prefix) = new_key(KeyKind::Check);
    let key_body = json!({ "kind": "check", "name": "svc", "hash": hash, "prefix": prefix });
    let (status, _, _) = app
        .call(
            "POST",
            &format!("/v1/admin/tenants/{t}/keys"),
            Some(&op),
            Some(&key_body),
        )
        .await;
    assert_eq!(status, 201);

    let (_, _, rest_tenant) = app
        .call("GET", &format!("/v1/admin/tenants/{t}"), Some(&op), None)
        .await;
    let (_, _, rest_rules) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{t}/rules"),
            Some(&op),
            None,
        )
        .await;
    let (_, _, rest_keys) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{t}/keys"),
            Some(&op),
            None,
        )
        .await;

    let console = signed_in(&app, "admin@localhost", PASSWORD).await;
    let args = json!({ "tenant": t });
    let console_tenant = server_fn(&app, &console, "tenants/get", args.clone())
        .await
        .unwrap();
    let console_rules = server_fn(&app, &console, "rules/list", args.clone())
        .await
        .unwrap();
    let console_keys = server_fn(&app, &console, "keys/list", args).await.unwrap();

    assert_eq!(rest_tenant, console_tenant);
    assert_eq!(rest_rules, console_rules);
    // Each says when it was listed (the moment its state is as of); all else is the same.
    let unlisted = |mut keys: Value| {
        for key in keys.as_array_mut().unwrap() {
            assert!(key["listed_at"].as_i64().unwrap() >= key["created_at"].as_i64().unwrap());
            key.as_object_mut().unwrap().remove("listed_at");
        }
        keys
    };
    assert_eq!(unlisted(rest_keys.clone()), unlisted(console_keys));
    // One flat rule, as it is written; a key says its state; no hash ever leaves.
    assert_eq!(rest_rules[0]["name"], "transfers");
    assert_eq!(rest_rules[0]["match"], "prefix");
    assert_eq!(rest_rules[0]["tenant_id"], t);
    assert_eq!(rest_keys[0]["state"], "live");
    assert_eq!(rest_keys[0]["tenant_id"], t);
    assert!(rest_keys[0].get("hash").is_none());
    assert_eq!(rest_tenant["status"], "active");

    // And the OpenAPI document describes exactly these bodies.
    let (_, _, doc) = app.call("GET", "/v1/openapi.json", None, None).await;
    assert_matches_schema(&doc, "Tenant", &rest_tenant);
    assert_matches_schema(&doc, "Rule", &rest_rules[0]);
    assert_matches_schema(&doc, "ApiKey", &rest_keys[0]);
    assert_matches_schema(&doc, "Rule", &created);
}

#[tokio::test]
async fn a_suspended_tenant_is_refused_by_one_authorisation_on_rest_the_console_and_the_stream() {
    let (app, _dir) = embedded_with_operator(PASSWORD).await;
    let op = app.operator_key().await;
    let t = crate::helpers::setup_tenant(&app, &op, &[]).await;
    let operator = signed_in(&app, "admin@localhost", PASSWORD).await;
    server_fn(
        &app,
        &operator,
        "tenants/add_admin",
        json!({ "tenant": t.id, "email": "ta@example.com", "password": ADMIN_PASSWORD }),
    )
    .await
    .unwrap();
    let admin = signed_in(&app, "ta@example.com", ADMIN_PASSWORD).await;
    let rules = format!("/v1/admin/tenants/{}/rules", t.id);
    let stream = app.url(&format!("/live/dashboard?tenant={}", t.id));

    // Active: every transport lets the tenant's admin in.
    assert_eq!(
        app.call("GET", &rules, Some(&t.admin_key), None).await.0,
        200
    );
    assert!(
        server_fn(&app, &admin, "rules/list", json!({ "tenant": t.id }))
            .await
            .is_ok()
    );
    let open = admin.get(&stream).send().await.unwrap();
    assert_eq!(open.status(), 200);
    drop(open);

    let (status, _, _) = app
        .call(
            "POST",
            &format!("/v1/admin/tenants/{}/suspend", t.id),
            Some(&op),
            None,
        )
        .await;
    assert_eq!(status, 200);

    // Suspended: the same refusal, in the same words, from the admin service's authorise.
    let said = "your tenant is suspended";
    let (status, _, problem) = app.call("GET", &rules, Some(&t.admin_key), None).await;
    assert_eq!(status, 403, "{problem}");
    assert!(
        problem["detail"].as_str().unwrap().contains(said),
        "{problem}"
    );
    let error = server_fn(&app, &admin, "rules/list", json!({ "tenant": t.id }))
        .await
        .unwrap_err();
    assert!(
        error.contains("Forbidden") && error.contains(said),
        "{error}"
    );
    let refused = admin.get(&stream).send().await.unwrap();
    assert_eq!(refused.status(), 403);
    assert!(refused.text().await.unwrap().contains(said));
    // The tenant's check key gets 403 too (the decision core's check of the tenant).
    let (status, _, _) = app.check(&t.check_key, json!({ "route": "GET /" })).await;
    assert_eq!(status, 403);

    // Operators still see a suspended tenant, on every transport.
    assert_eq!(app.call("GET", &rules, Some(&op), None).await.0, 200);
    assert!(
        server_fn(&app, &operator, "rules/list", json!({ "tenant": t.id }))
            .await
            .is_ok()
    );
    let watched = operator.get(&stream).send().await.unwrap();
    assert_eq!(watched.status(), 200);
}
