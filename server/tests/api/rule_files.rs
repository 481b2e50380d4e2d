//! Rules as files over real HTTP and through the `sluice` command: a tenant's rules exported
//! (JSON and YAML, ordered by name, without ids), imported again as a no-op, edited and
//! previewed as a plan (create, update field by field, delete, unchanged, each with its
//! problems), applied exactly as previewed in one audited step, and refused whole when any
//! problem remains. On SQLite and on PostgreSQL.

use serde_json::{json, Value};

use crate::helpers::{
    app_on, embedded_config, rule, rule_id, setup_tenant, sluice, sluice_fails, spawn_app_keeping,
    Backend, TenantSetup, TestApp,
};

fn search() -> Value {
    json!({ "name": "b-search", "match": "exact", "route": "GET /search", "scope": "subject",
            "algorithm": "token_bucket", "limit": 10, "period_ms": 1_000 })
}

fn login() -> Value {
    let mut login = rule(
        "c-login",
        "prefix",
        Some("POST /login"),
        "sliding_window",
        5,
        60_000,
    );
    login["shadow"] = json!(true);
    login
}

/// A tenant with three rules (created out of name order) and one override of `b-search`.
async fn tenant_with_rules(app: &TestApp) -> TenantSetup {
    let op = app.operator_key().await;
    let t = setup_tenant(
        app,
        &op,
        &[
            search(),
            rule("a-all", "all", None, "fixed_window", 100_000, 60_000),
            login(),
        ],
    )
    .await;
    let id = rule_id(app, &t, "b-search").await;
    let (status, _, body) = app
        .call(
            "POST",
            &format!("/v1/admin/tenants/{}/rules/{id}/overrides", t.id),
            Some(&t.admin_key),
            Some(&json!({ "subject": "acme-*", "limit": 50 })),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    t
}

async fn export(app: &TestApp, t: &TenantSetup, format: &str) -> (String, String) {
    let response = app
        .client
        .get(app.url(&format!(
            "/v1/admin/tenants/{}/rules/export?format={format}",
            t.id
        )))
        .header("x-api-key", &t.admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    (content_type, response.text().await.unwrap())
}

/// `POST …/rules/import` with `text` as `content_type`; `query` is `dry_run=true` and/or
/// `expect=…`.
async fn import(
    app: &TestApp,
    t: &TenantSetup,
    query: &str,
    content_type: &str,
    text: &str,
) -> (u16, Value) {
    let response = app
        .client
        .post(app.url(&format!("/v1/admin/tenants/{}/rules/import?{query}", t.id)))
        .header("x-api-key", &t.admin_key)
        .header("content-type", content_type)
        .body(text.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null);
    (status, body)
}

async fn import_json(app: &TestApp, t: &TenantSetup, query: &str, file: &Value) -> (u16, Value) {
    import(app, t, query, "application/json", &file.to_string()).await
}

async fn rules(app: &TestApp, t: &TenantSetup) -> Vec<Value> {
    let (status, _, body) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{}/rules", t.id),
            Some(&t.admin_key),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body.as_array().unwrap().clone()
}

async fn import_events(app: &TestApp, t: &TenantSetup) -> Vec<Value> {
    let (status, _, body) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{}/audit?action=rules.import", t.id),
            Some(&t.admin_key),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body.as_array().unwrap().clone()
}

fn names(list: &Value, field: &str) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|e| match field {
            "" => e.as_str().unwrap().to_owned(),
            field => e.pointer(field).and_then(Value::as_str).unwrap().to_owned(),
        })
        .collect()
}

async fn files_round_trip_and_plans_apply_as_previewed(app: &TestApp) {
    let t = tenant_with_rules(app).await;
    let stored = rules(app, &t).await;

    // Exported by name, without ids or dates; each entry is the stored rule's body.
    let (content_type, text) = export(app, &t, "json").await;
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    let file: Value = serde_json::from_str(&text).unwrap();
    let exported = file["rules"].as_array().unwrap();
    assert_eq!(
        names(&file["rules"], "/name"),
        ["a-all", "b-search", "c-login"]
    );
    for entry in exported {
        for absent in ["id", "tenant_id", "created_at", "updated_at"] {
            assert!(entry.get(absent).is_none(), "{absent} in {entry}");
        }
        let mut same = stored
            .iter()
            .find(|r| r["name"] == entry["name"])
            .unwrap()
            .clone();
        for field in ["id", "tenant_id", "created_at", "updated_at"] {
            same.as_object_mut().unwrap().remove(field);
        }
        assert_eq!(&same, entry);
    }
    let (yaml_type, yaml) = export(app, &t, "yaml").await;
    assert!(yaml_type.starts_with("application/yaml"), "{yaml_type}");
    assert!(yaml.starts_with("rules:\n"), "{yaml}");
    assert_eq!(
        serde_yaml::from_str::<Value>(&yaml).unwrap(),
        file,
        "the YAML export says what the JSON export says"
    );

    // Export then import is a no-op: everything unchanged, nothing written or audited.
    for (content_type, body) in [("application/json", &text), ("application/yaml", &yaml)] {
        let (status, plan) = import(app, &t, "dry_run=true", content_type, body).await;
        assert_eq!(status, 200, "{plan}");
        assert_eq!(
            names(&plan["unchanged"], ""),
            ["a-all", "b-search", "c-login"]
        );
        for list in ["create", "update", "delete", "problems"] {
            assert_eq!(plan[list], json!([]), "{list}: {plan}");
        }
        assert_eq!(plan["applied"], false);
    }
    let (status, plan) = import(app, &t, "", "application/json", &text).await;
    assert_eq!((status, &plan["applied"]), (200, &json!(true)), "{plan}");
    assert_eq!(
        rules(app, &t).await,
        stored,
        "a no-op import writes nothing"
    );
    assert!(import_events(app, &t).await.is_empty());

    // An edited file: one rule changed, one left out, one new.
    let mut edited = file.clone();
    let list = edited["rules"].as_array_mut().unwrap();
    list.retain(|r| r["name"] != "c-login");
    list[1]["limit"] = json!(20);
    list[1]["period_ms"] = json!(60_000);
    list[1]["burst"] = json!(40);
    list.push(rule("d-new", "default", None, "gcra", 7, 1_000));
    let (status, plan) = import_json(app, &t, "dry_run=true", &edited).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(names(&plan["create"], "/rule/name"), ["d-new"]);
    assert_eq!(names(&plan["update"], "/rule/name"), ["b-search"]);
    assert_eq!(
        plan["update"][0]["changes"],
        json!([
            { "field": "limit", "before": "10", "after": "20" },
            { "field": "period_ms", "before": "1000", "after": "60000" },
            { "field": "burst", "before": "-", "after": "40" },
        ])
    );
    assert_eq!(
        plan["delete"],
        json!([{ "id": rule_id(app, &t, "c-login").await, "name": "c-login", "overrides": 0 }])
    );
    assert_eq!(names(&plan["unchanged"], ""), ["a-all"]);
    assert_eq!(plan["problems"], json!([]));
    assert_eq!(rules(app, &t).await, stored, "a dry run writes nothing");

    // Applied exactly as previewed: the changed rule keeps its id (and so its buckets and
    // its override); one audit event says what changed.
    let search_id = rule_id(app, &t, "b-search").await;
    let fingerprint = plan["fingerprint"].as_str().unwrap().to_owned();
    let (status, applied) = import_json(app, &t, &format!("expect={fingerprint}"), &edited).await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["applied"], true);
    let now = rules(app, &t).await;
    assert_eq!(
        now.iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["a-all", "b-search", "d-new"]
    );
    let search_now = now.iter().find(|r| r["name"] == "b-search").unwrap();
    assert_eq!(
        (
            &search_now["id"],
            &search_now["limit"],
            &search_now["burst"]
        ),
        (&json!(search_id), &json!(20), &json!(40))
    );
    let (_, _, overrides) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{}/rules/{search_id}/overrides", t.id),
            Some(&t.admin_key),
            None,
        )
        .await;
    assert_eq!(overrides.as_array().unwrap().len(), 1, "{overrides}");
    let events = import_events(app, &t).await;
    assert_eq!(events.len(), 1, "{events:#?}");
    let detail: Value = serde_json::from_str(events[0]["detail"].as_str().unwrap()).unwrap();
    assert_eq!(detail["source"], "rules file");
    assert_eq!(detail["created"], json!(["d-new"]));
    assert_eq!(detail["deleted"], json!(["c-login"]));
    assert_eq!(
        detail["updated"][0]["changes"],
        plan["update"][0]["changes"]
    );

    // The decisions follow at once: b-search now holds 40 for a subject (and refills one
    // every 3 s, far slower than these checks).
    let mut admitted = 0;
    loop {
        let (status, _, body) = app
            .check(
                &t.check_key,
                json!({ "route": "GET /search", "subject": "zed" }),
            )
            .await;
        match status {
            200 => admitted += 1,
            429 => {
                assert_eq!(body["policy"], "b-search", "{body}");
                break;
            }
            other => panic!("{other}: {body}"),
        }
        assert!(admitted <= 40, "more than the new burst admitted");
    }
    assert_eq!(admitted, 40);

    // The same preview again is stale now.
    let (status, stale) = import_json(app, &t, &format!("expect={fingerprint}"), &edited).await;
    assert_eq!(status, 409, "{stale}");
    assert!(
        stale["detail"]
            .as_str()
            .unwrap()
            .contains("preview it again"),
        "{stale}"
    );

    // Problems: each on its rule in a dry run; applying refuses the whole file.
    let before = rules(app, &t).await;
    let mut bad = edited.clone();
    let list = bad["rules"].as_array_mut().unwrap();
    list[0]["limit"] = json!(0);
    list.push(rule("d-new", "all", None, "gcra", 1, 1_000));
    let (status, plan) = import_json(app, &t, "dry_run=true", &bad).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["update"][0]["rule"]["name"], "a-all");
    assert_eq!(plan["update"][0]["problems"][0]["field"], "limit");
    assert_eq!(plan["problems"][0]["field"], "name");
    assert!(
        plan["problems"][0]["message"]
            .as_str()
            .unwrap()
            .contains("\"d-new\" names more than one rule"),
        "{plan}"
    );
    let (status, refused) = import_json(app, &t, "", &bad).await;
    assert_eq!(status, 400, "{refused}");
    let fields: Vec<&str> = refused["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["limit", "name"], "{refused}");
    assert_eq!(
        rules(app, &t).await,
        before,
        "a refused import writes nothing"
    );

    // An update its override would not fit: shown on the rule, refused with 409.
    let mut misfit = edited.clone();
    misfit["rules"][1]["scope"] = json!("tenant");
    let (status, plan) = import_json(app, &t, "dry_run=true", &misfit).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["update"][0]["problems"][0]["field"], "overrides");
    let (status, refused) = import_json(app, &t, "", &misfit).await;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["detail"].as_str().unwrap().contains("acme-*"),
        "{refused}"
    );

    // Leaving out a rule with an override says so.
    let mut without = edited.clone();
    without["rules"]
        .as_array_mut()
        .unwrap()
        .retain(|r| r["name"] != "b-search");
    let (_, plan) = import_json(app, &t, "dry_run=true", &without).await;
    assert_eq!(plan["delete"][0]["name"], "b-search");
    assert_eq!(plan["delete"][0]["overrides"], 1);

    // Past the tenant's quota of rules: a problem of the file, refused with 409.
    let op = app.operator_key().await;
    let (status, _, body) = app
        .call(
            "PUT",
            &format!("/v1/admin/tenants/{}/quotas", t.id),
            Some(&op),
            Some(&json!({ "max_rules": 3 })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut more = edited.clone();
    more["rules"].as_array_mut().unwrap().push(rule(
        "e-more",
        "exact",
        Some("GET /more"),
        "gcra",
        1,
        1_000,
    ));
    let (_, plan) = import_json(app, &t, "dry_run=true", &more).await;
    assert!(
        plan["problems"][0]["message"]
            .as_str()
            .unwrap()
            .contains("its quota is 3"),
        "{plan}"
    );
    let (status, refused) = import_json(app, &t, "", &more).await;
    assert_eq!(status, 409, "{refused}");

    // Not a rules file, or not sent as one; another tenant's admin finds no such tenant.
    let (status, said) = import(app, &t, "", "application/json", r#"{"rules": [], "x": 1}"#).await;
    assert_eq!(status, 400);
    assert!(
        said["detail"]
            .as_str()
            .unwrap()
            .contains("unknown field `x`"),
        "{said}"
    );
    let (status, said) = import(app, &t, "", "text/plain", &text).await;
    assert_eq!(status, 400);
    assert!(
        said["detail"]
            .as_str()
            .unwrap()
            .contains("application/yaml"),
        "{said}"
    );
    let other = setup_tenant(app, &op, &[]).await;
    let (status, _, _) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{}/rules/export", t.id),
            Some(&other.admin_key),
            None,
        )
        .await;
    assert_eq!(status, 404);
    let (status, _, _) = app
        .call(
            "POST",
            &format!("/v1/admin/tenants/{}/rules/import?dry_run=true", t.id),
            Some(&other.admin_key),
            Some(&edited),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(import_events(app, &t).await.len(), 1);
}

#[tokio::test]
async fn rules_files_round_trip_and_apply_as_previewed_on_sqlite() {
    files_round_trip_and_plans_apply_as_previewed(&app_on(Backend::InProcess).await.app).await;
}

#[tokio::test]
async fn rules_files_round_trip_and_apply_as_previewed_on_postgres() {
    files_round_trip_and_plans_apply_as_previewed(&app_on(Backend::Redis).await.app).await;
}

#[tokio::test]
async fn sluice_rules_export_and_import_from_the_command_line() {
    let (config, dir) = embedded_config();
    let data_dir = dir.path().to_str().unwrap().to_owned();
    let app = spawn_app_keeping(config, Some(dir)).await;
    let t = tenant_with_rules(&app).await;
    let env = [("SLUICE_DATA_DIR", data_dir)];
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("rules.yaml");
    let file = file.to_str().unwrap();

    let said = sluice(&env, &["rules", "export", "--tenant", &t.id, "--out", file]);
    assert_eq!(said, "", "the file goes to --out, not to standard output");
    let (_, exported) = export(&app, &t, "yaml").await;
    assert_eq!(std::fs::read_to_string(file).unwrap(), exported);
    let json_text = sluice(
        &env,
        &["rules", "export", "--tenant", &t.id, "--format", "json"],
    );
    let (_, exported) = export(&app, &t, "json").await;
    assert_eq!(json_text, exported);

    let plan = sluice(&env, &["rules", "import", file, "--tenant", &t.id]);
    assert!(
        plan.contains("0 to create, 0 to update, 0 to delete, 3 unchanged"),
        "{plan}"
    );

    let text = std::fs::read_to_string(file).unwrap();
    std::fs::write(file, text.replace("limit: 10\n", "limit: 11\n")).unwrap();
    let plan = sluice(&env, &["rules", "import", file, "--tenant", &t.id]);
    assert!(
        plan.contains("update  b-search\n          limit: 10 -> 11\n"),
        "{plan}"
    );
    assert!(plan.contains("nothing changed yet"), "{plan}");
    let limit = |rules: Vec<Value>| {
        rules
            .iter()
            .find(|r| r["name"] == "b-search")
            .map(|r| r["limit"].clone())
            .unwrap()
    };
    assert_eq!(limit(rules(&app, &t).await), 10);
    let applied = sluice(
        &env,
        &["rules", "import", file, "--tenant", &t.id, "--apply"],
    );
    assert!(applied.ends_with(": applied\n"), "{applied}");
    assert_eq!(limit(rules(&app, &t).await), 11);
    let events = import_events(&app, &t).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["actor"], "cli");

    // A file with a problem prints it and fails, changing nothing.
    std::fs::write(file, text.replace("limit: 10\n", "limit: 0\n")).unwrap();
    let stderr = sluice_fails(
        &env,
        &["rules", "import", file, "--tenant", &t.id, "--apply"],
    );
    assert!(stderr.contains("limit"), "{stderr}");
    assert_eq!(limit(rules(&app, &t).await), 11);
    std::fs::write(file, "rules: [{name: x}]\n").unwrap();
    let stderr = sluice_fails(&env, &["rules", "import", file, "--tenant", &t.id]);
    assert!(stderr.contains("not a rules file"), "{stderr}");
}

/// A rule stored before routes had to be a method and a path (here `payments`) still decides,
/// and a file that leaves it as it is can be applied; changing it needs a valid route.
#[tokio::test]
async fn a_rule_saved_before_routes_had_a_normal_form_does_not_stop_its_tenants_files() {
    let app = app_on(Backend::InProcess).await.app;
    let op = app.operator_key().await;
    let t = setup_tenant(&app, &op, &[search()]).await;
    let old: app::rules::RuleBody = serde_json::from_value(rule(
        "legacy",
        "exact",
        Some("payments"),
        "fixed_window",
        1,
        60_000,
    ))
    .unwrap();
    sluice::store::rules::insert(&app.db, &t.id, &old)
        .await
        .unwrap();
    let (status, _, body) = app
        .check(&t.check_key, json!({ "route": "payments" }))
        .await;
    assert_eq!((status, &body["policy"]), (200, &json!("legacy")), "{body}");

    let (_, text) = export(&app, &t, "json").await;
    let (status, plan) = import(&app, &t, "", "application/json", &text).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["applied"], true);
    assert_eq!(names(&plan["unchanged"], ""), ["b-search", "legacy"]);

    let mut file: Value = serde_json::from_str(&text).unwrap();
    file["rules"][1]["limit"] = json!(2);
    let (status, plan) = import_json(&app, &t, "dry_run=true", &file).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["update"][0]["problems"][0]["field"], "route", "{plan}");
    let (status, _) = import_json(&app, &t, "", &file).await;
    assert_eq!(status, 400);
}

/// An edit is audited with what it changed, and a deletion with the rule it deleted, so that
/// the audit log can say both (and a deleted rule can be made again from it).
#[tokio::test]
async fn rule_edits_are_audited_with_their_changes_and_deletions_with_the_rule() {
    let app = app_on(Backend::InProcess).await.app;
    let op = app.operator_key().await;
    let t = setup_tenant(&app, &op, &[search()]).await;
    let id = rule_id(&app, &t, "b-search").await;
    let path = format!("/v1/admin/tenants/{}/rules/{id}", t.id);
    let mut edited = search();
    edited["limit"] = json!(12);
    let (status, _, body) = app
        .call("PUT", &path, Some(&t.admin_key), Some(&edited))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, _, _) = app.call("DELETE", &path, Some(&t.admin_key), None).await;
    assert_eq!(status, 204);
    let detail = |action: &'static str| {
        let app = &app;
        let t = &t;
        async move {
            let (_, _, events) = app
                .call(
                    "GET",
                    &format!("/v1/admin/tenants/{}/audit?action={action}", t.id),
                    Some(&t.admin_key),
                    None,
                )
                .await;
            serde_json::from_str::<Value>(events[0]["detail"].as_str().unwrap()).unwrap()
        }
    };
    let update = detail("rule.update").await;
    assert_eq!(
        update["changes"],
        json!([{ "field": "limit", "before": "10", "after": "12" }])
    );
    assert_eq!(update["rule"]["limit"], 12);
    let delete = detail("rule.delete").await;
    assert_eq!(delete["rule"]["name"], "b-search");
    assert_eq!(delete["rule"]["route"], "GET /search");
}
