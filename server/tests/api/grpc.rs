//! Envoy's rate limit service (gRPC `ShouldRateLimit`), driven by a client nobody here wrote:
//! Python's `grpcio` with the protos Envoy's project generates (`xds-protos`), through
//! `end2end/envoy/rls_client.py` (installed by `scripts/setup`).

use std::path::PathBuf;

use serde_json::{json, Value};
use sluice::config::Config;

use crate::helpers::{
    clear_of_a_window_edge, rule, setup_tenant, sluice, sluice_fails, spawn_app, time_until,
    TenantSetup, TestApp, DAY_MS,
};
use crate::services::{shared_postgres, RedisServer};

/// Runs the Envoy client with `job` (targets, calls, concurrent) and returns its answers.
async fn envoy(job: Value) -> Vec<Value> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join("end2end/.venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/setup (it installs grpcio and xds-protos)",
        python.display()
    );
    let mut child = tokio::process::Command::new(python)
        .arg(root.join("end2end/envoy/rls_client.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the Envoy client starts");
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, job.to_string().as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "the Envoy client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the client prints JSON")
}

fn target(app: &TestApp) -> String {
    app.grpc_address
        .expect("the instance serves gRPC")
        .to_string()
}

/// One call per element of `calls`, one after another, to `app`.
async fn calls(app: &TestApp, calls: Vec<Value>) -> Vec<Value> {
    envoy(json!({ "targets": [target(app)], "calls": calls })).await
}

async fn one(app: &TestApp, call: Value) -> Value {
    calls(app, vec![call]).await.remove(0)
}

/// A call of `tenant` with `key`, for descriptors given as lists of (key, value).
fn call(domain: &str, key: &str, descriptors: Value) -> Value {
    json!({ "domain": domain, "metadata": { "x-api-key": key }, "descriptors": descriptors })
}

/// A descriptor rule: `entries` as (key, value or null), `limit` a day in a fixed window.
fn descriptor_rule(name: &str, entries: &[(&str, Option<&str>)], limit: u64) -> Value {
    let descriptor: Vec<Value> = entries
        .iter()
        .map(|(k, v)| match v {
            Some(v) => json!({ "key": k, "value": v }),
            None => json!({ "key": k }),
        })
        .collect();
    let per_subject = entries.iter().any(|(_, v)| v.is_none());
    json!({
        "name": name, "match": "descriptor", "descriptor": descriptor,
        "scope": if per_subject { "subject" } else { "tenant" },
        "algorithm": "fixed_window", "limit": limit, "period_ms": DAY_MS,
    })
}

async fn embedded_grpc() -> (TestApp, String) {
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.grpc_listen = Some("127.0.0.1:0".parse().unwrap());
    let app = spawn_app(config).await;
    let op = app.operator_key().await;
    (app, op)
}

async fn tenant_name(app: &TestApp, op: &str, t: &TenantSetup) -> String {
    let (status, _, tenant) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{}", t.id),
            Some(op),
            None,
        )
        .await;
    assert_eq!(status, 200, "{tenant}");
    tenant["name"].as_str().unwrap().to_owned()
}

fn codes(answers: &[Value]) -> Vec<&str> {
    answers
        .iter()
        .map(|a| a["overall"].as_str().unwrap_or("-"))
        .collect()
}

#[tokio::test]
async fn keys_and_domains_are_checked_with_the_grpc_codes_envoy_expects() {
    let (app, op) = embedded_grpc().await;
    let t = setup_tenant(
        &app,
        &op,
        &[descriptor_rule("per-path", &[("path", None)], 5)],
    )
    .await;
    let name = tenant_name(&app, &op, &t).await;
    let d = json!([{ "entries": [["path", "/a"]] }]);
    let answers = calls(
        &app,
        vec![
            json!({ "domain": name, "descriptors": d }),
            call(&name, "sl_chk_not-a-real-key", d.clone()),
            call(&name, &t.admin_key, d.clone()),
            call("someone-else", &t.check_key, d.clone()),
            json!({ "domain": name, "metadata": { "authorization": format!("Bearer {}", t.check_key) }, "descriptors": d }),
            call(&t.id, &t.check_key, d.clone()),
        ],
    )
    .await;
    let grpc: Vec<&str> = answers
        .iter()
        .map(|a| a["grpc"].as_str().unwrap())
        .collect();
    assert_eq!(
        grpc,
        [
            "UNAUTHENTICATED",
            "UNAUTHENTICATED",
            "PERMISSION_DENIED",
            "INVALID_ARGUMENT",
            "OK",
            "OK"
        ],
        "{answers:#?}"
    );
    let wrong_domain = answers[3]["message"].as_str().unwrap();
    assert!(
        wrong_domain.contains(&format!("the key belongs to tenant {name:?}")),
        "{wrong_domain}"
    );
    // A suspended tenant's key.
    let (status, _, body) = app
        .call(
            "POST",
            &format!("/v1/admin/tenants/{}/suspend", t.id),
            Some(&op),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let answer = one(&app, call(&name, &t.check_key, d)).await;
    assert_eq!(answer["grpc"], "PERMISSION_DENIED", "{answer}");
}

#[tokio::test]
async fn descriptor_rules_match_by_keys_and_values_and_keyless_values_are_the_subject() {
    let (app, op) = embedded_grpc().await;
    let t = setup_tenant(
        &app,
        &op,
        &[
            // Each client address separately.
            descriptor_rule("per-client", &[("remote_address", None)], 2),
            // One path for everyone, and the rest of the paths each on its own.
            descriptor_rule("login", &[("path", Some("/login"))], 1),
            descriptor_rule("per-path", &[("path", None)], 3),
            // Nested: a value, then a key without one.
            descriptor_rule(
                "per-user-of-api",
                &[("service", Some("api")), ("user", None)],
                1,
            ),
        ],
    )
    .await;
    let name = tenant_name(&app, &op, &t).await;
    let c = |entries: Value| call(&name, &t.check_key, json!([{ "entries": entries }]));
    let answers = calls(
        &app,
        vec![
            c(json!([["remote_address", "10.0.0.1"]])),
            c(json!([["remote_address", "10.0.0.1"]])),
            c(json!([["remote_address", "10.0.0.1"]])),
            // Another address has its own bucket.
            c(json!([["remote_address", "10.0.0.2"]])),
            // The value rule beats the key-only one for its value, and is one bucket.
            c(json!([["path", "/login"]])),
            c(json!([["path", "/login"]])),
            c(json!([["path", "/other"]])),
            // Nested: the value must match; the user is the subject.
            c(json!([["service", "api"], ["user", "ann"]])),
            c(json!([["service", "api"], ["user", "ann"]])),
            c(json!([["service", "api"], ["user", "bob"]])),
            c(json!([["service", "web"], ["user", "ann"]])),
            // Keys in another order, or fewer of them, match nothing.
            c(json!([["user", "ann"], ["service", "api"]])),
            c(json!([["service", "api"]])),
        ],
    )
    .await;
    assert_eq!(
        codes(&answers),
        [
            "OK",
            "OK",
            "OVER_LIMIT",
            "OK",
            "OK",
            "OVER_LIMIT",
            "OK",
            "OK",
            "OVER_LIMIT",
            "OK",
            "OK",
            "OK",
            "OK"
        ],
        "{answers:#?}"
    );
    let limit = |i: usize| answers[i]["statuses"][0]["limit"].clone();
    assert_eq!(limit(0)["name"], "per-client");
    assert_eq!(limit(0)["requests_per_unit"], 2);
    assert_eq!(limit(0)["unit"], "DAY");
    assert_eq!(answers[0]["statuses"][0]["remaining"], 1);
    assert_eq!(limit(4)["name"], "login");
    assert_eq!(limit(6)["name"], "per-path");
    assert_eq!(limit(7)["name"], "per-user-of-api");
    // What no rule matches is OK with no limit.
    for i in [10, 11, 12] {
        assert_eq!(answers[i]["statuses"][0]["code"], "OK");
        assert!(limit(i).is_null(), "{:#}", answers[i]);
    }

    // Each denial counts among the most denied, for its rule and its bucket's subject (the
    // descriptor's keyless value; none for the one bucket of a value rule).
    let mut top = Value::Null;
    time_until(
        async || {
            let (_, _, body) = app
                .call(
                    "GET",
                    &format!("/v1/admin/tenants/{}/top-denied", t.id),
                    Some(&t.admin_key),
                    None,
                )
                .await;
            let rules = body["rules"].as_array().map_or(0, Vec::len);
            top = body;
            rules == 3
        },
        std::time::Duration::from_secs(5),
    )
    .await;
    let mut seen: Vec<(String, Value)> = top["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["policy"].as_str().unwrap().to_owned(),
                r["subjects"].clone(),
            )
        })
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        [
            (
                "login".to_owned(),
                json!([{ "subject": null, "denied": 1 }])
            ),
            (
                "per-client".to_owned(),
                json!([{ "subject": "10.0.0.1", "denied": 1 }])
            ),
            (
                "per-user-of-api".to_owned(),
                json!([{ "subject": "ann", "denied": 1 }])
            ),
        ],
        "{top:#}"
    );
}

#[tokio::test]
async fn hits_addend_is_the_cost_and_a_request_is_all_or_nothing_with_a_status_per_descriptor() {
    let (app, op) = embedded_grpc().await;
    let t = setup_tenant(
        &app,
        &op,
        &[
            descriptor_rule("big", &[("bucket", Some("big"))], 10),
            descriptor_rule("small", &[("bucket", Some("small"))], 3),
        ],
    )
    .await;
    let name = tenant_name(&app, &op, &t).await;
    let big = json!({ "entries": [["bucket", "big"]] });
    let small = json!({ "entries": [["bucket", "small"]] });
    let with_hits = |d: &Value, hits: u64| {
        let mut d = d.clone();
        d["hits_addend"] = json!(hits);
        d
    };
    let mut request_hits = call(&name, &t.check_key, json!([big.clone()]));
    request_hits["hits_addend"] = json!(4);
    let answers = calls(
        &app,
        vec![
            // The request's hits_addend: big 10 -> 6.
            request_hits,
            // A descriptor's own: small 3 -> 1.
            call(&name, &t.check_key, json!([with_hits(&small, 2)])),
            // Both at once, small over: nothing is taken from big either.
            call(
                &name,
                &t.check_key,
                json!([with_hits(&big, 1), with_hits(&small, 2)]),
            ),
            call(&name, &t.check_key, json!([with_hits(&big, 6)])),
            // A per-descriptor limit override is refused by a rule that does not allow it.
            call(
                &name,
                &t.check_key,
                json!([{ "entries": [["bucket", "big"]], "limit": 100 }]),
            ),
        ],
    )
    .await;
    assert_eq!(
        answers[0]["statuses"][0]["remaining"], 6,
        "{:#}",
        answers[0]
    );
    assert_eq!(
        answers[1]["statuses"][0]["remaining"], 1,
        "{:#}",
        answers[1]
    );
    let both = &answers[2];
    assert_eq!(both["overall"], "OVER_LIMIT", "{both:#}");
    assert_eq!(both["statuses"][0]["code"], "OK", "{both:#}");
    assert_eq!(both["statuses"][1]["code"], "OVER_LIMIT", "{both:#}");
    assert_eq!(both["statuses"][1]["limit"]["name"], "small");
    // The headers of the rule that decided, as /v1/check sends them.
    let headers = &both["headers"];
    assert_eq!(headers["x-ratelimit-limit"], "3", "{both:#}");
    assert_eq!(headers["x-ratelimit-remaining"], "1", "{both:#}");
    assert!(
        headers["ratelimit-policy"]
            .as_str()
            .unwrap()
            .starts_with("\"small\";q=3;w=86400"),
        "{both:#}"
    );
    assert!(
        headers["ratelimit"]
            .as_str()
            .unwrap()
            .starts_with("\"small\";r=1;t="),
        "{both:#}"
    );
    assert!(
        headers["retry-after"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            >= 1
    );
    assert!(both["statuses"][1]["reset_ms"].as_u64().unwrap() > 0);
    // Big still had 6: all six fit.
    assert_eq!(answers[3]["overall"], "OK", "{:#}", answers[3]);
    assert_eq!(answers[3]["statuses"][0]["remaining"], 0);
    assert_eq!(answers[4]["grpc"], "INVALID_ARGUMENT", "{:#}", answers[4]);
    assert!(
        answers[4]["message"].as_str().unwrap().contains("override"),
        "{:#}",
        answers[4]
    );
    // Counted like any check on /metrics: the one denial, by the rule that decided it.
    assert_eq!(
        app.metric("sluice_decisions_total{outcome=\"denied\",policy=\"small\"}")
            .await,
        1.0
    );
}

#[tokio::test]
async fn shadow_rules_report_but_never_deny() {
    let (app, op) = embedded_grpc().await;
    let mut shadow = descriptor_rule("trial", &[("plan", Some("free"))], 1);
    shadow["shadow"] = json!(true);
    let t = setup_tenant(&app, &op, &[shadow]).await;
    let name = tenant_name(&app, &op, &t).await;
    let c = call(
        &name,
        &t.check_key,
        json!([{ "entries": [["plan", "free"]] }]),
    );
    let answers = calls(&app, vec![c.clone(), c.clone(), c]).await;
    assert_eq!(codes(&answers), ["OK", "OK", "OK"], "{answers:#?}");
    assert_eq!(
        app.metric("sluice_shadow_would_deny_total{policy=\"trial\"}")
            .await,
        2.0
    );
}

#[tokio::test]
async fn when_redis_cannot_decide_closed_rules_are_unavailable_and_open_rules_ok() {
    let mut redis = RedisServer::start();
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(shared_postgres().fresh_database().await);
    config.redis_url = Some(redis.url());
    config.redis_timeout_ms = 200;
    config.grpc_listen = Some("127.0.0.1:0".parse().unwrap());
    let app = spawn_app(config).await;
    let op = app.operator_key().await;
    let mut open = descriptor_rule("open", &[("tier", Some("open"))], 100);
    open["failure_mode"] = json!("open");
    let closed = descriptor_rule("closed", &[("tier", Some("closed"))], 100);
    let t = setup_tenant(&app, &op, &[open, closed]).await;
    let name = tenant_name(&app, &op, &t).await;
    let tier = |v: &str| call(&name, &t.check_key, json!([{ "entries": [["tier", v]] }]));
    let before = calls(&app, vec![tier("open"), tier("closed")]).await;
    assert_eq!(codes(&before), ["OK", "OK"], "{before:#?}");
    redis.stop();
    let during = calls(&app, vec![tier("open"), tier("closed")]).await;
    assert_eq!(during[0]["grpc"], "OK", "{:#}", during[0]);
    assert_eq!(during[0]["overall"], "OK", "{:#}", during[0]);
    assert_eq!(during[1]["grpc"], "UNAVAILABLE", "{:#}", during[1]);
    assert!(
        during[1]["message"]
            .as_str()
            .unwrap()
            .contains("fails closed"),
        "{:#}",
        during[1]
    );
}

#[tokio::test]
async fn five_hundred_concurrent_calls_over_three_instances_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    let database = shared_postgres().fresh_database().await;
    let mut instances = Vec::new();
    for _ in 0..3 {
        let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
        config.database_url = Some(database.clone());
        config.redis_url = Some(redis.url());
        // Exactness is measured here, not latency: a burst on a loaded machine may wait
        // past the default Redis deadline, and UNAVAILABLE is not what this test counts.
        config.redis_timeout_ms = 10_000;
        config.grpc_listen = Some("127.0.0.1:0".parse().unwrap());
        instances.push(spawn_app(config).await);
    }
    let op = instances[0].operator_key().await;
    // A day's window (as every descriptor rule here): 500 concurrent calls take a second or
    // two on a loaded machine, and a minute's window could roll over between them and admit
    // more than the limit.
    let shared = descriptor_rule("shared", &[("api", Some("search"))], 100);
    let t = setup_tenant(&instances[0], &op, &[shared]).await;
    let name = tenant_name(&instances[0], &op, &t).await;
    let c = call(
        &name,
        &t.check_key,
        json!([{ "entries": [["api", "search"]] }]),
    );
    let answers = envoy(json!({
        "targets": instances.iter().map(target).collect::<Vec<_>>(),
        "concurrent": true,
        "calls": vec![c; 500],
    }))
    .await;
    let ok = answers.iter().filter(|a| a["overall"] == "OK").count();
    let over = answers
        .iter()
        .filter(|a| a["overall"] == "OVER_LIMIT")
        .count();
    assert_eq!((ok, over), (100, 400), "{:#?}", &answers[..3]);
}

/// The rule names of the tenant, sorted.
async fn rule_names(app: &TestApp, op: &str, tenant: &str) -> Vec<String> {
    let (status, _, rules) = app
        .call(
            "GET",
            &format!("/v1/admin/tenants/{tenant}/rules"),
            Some(op),
            None,
        )
        .await;
    assert_eq!(status, 200, "{rules}");
    let mut names: Vec<String> = rules
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn an_envoy_ratelimit_file_imported_by_the_cli_decides_as_the_file_says() {
    let redis = RedisServer::start();
    let database = shared_postgres().fresh_database().await;
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(database.clone());
    config.redis_url = Some(redis.url());
    config.grpc_listen = Some("127.0.0.1:0".parse().unwrap());
    let app = spawn_app(config).await;
    let op = app.operator_key().await;
    let t = setup_tenant(
        &app,
        &op,
        &[rule("all", "all", None, "fixed_window", 1000, 60_000)],
    )
    .await;
    let name = tenant_name(&app, &op, &t).await;
    let file =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/envoy-ratelimit.yaml");
    let file = file.to_str().unwrap();
    let env = [
        ("DATABASE_URL", database.clone()),
        ("REDIS_URL", redis.url()),
    ];
    let import = |extra: &[&str]| {
        let mut args = vec!["import", "envoy-ratelimit", file, "--tenant", &t.id];
        args.extend_from_slice(extra);
        sluice(&env, &args)
    };

    // Without --apply: the plan, and nothing changes.
    let plan = import(&[]);
    assert!(
        plan.contains("4 to create, 0 to update, 0 to delete, 0 unchanged: nothing changed yet"),
        "{plan}"
    );
    assert!(
        plan.contains("not imported: path=/health: unlimited"),
        "{plan}"
    );
    assert!(
        plan.contains("create  envoy.path_/login.user  [path=/login, user]"),
        "{plan}"
    );
    assert_eq!(rule_names(&app, &op, &t.id).await, ["all"]);

    let applied = import(&["--apply"]);
    assert!(
        applied.contains("4 to create") && applied.ends_with("applied\n"),
        "{applied}"
    );
    assert_eq!(
        rule_names(&app, &op, &t.id).await,
        [
            "all",
            "envoy.path_/login.user",
            "envoy.path_/search",
            "envoy.remote_address",
            "login"
        ]
    );
    // The running instance hears of the change through Redis: poll with a subject of its own
    // until the per-address rule answers.
    let started = std::time::Instant::now();
    for probe in 0.. {
        let answer = one(
            &app,
            call(
                &name,
                &t.check_key,
                json!([{ "entries": [["remote_address", format!("probe-{probe}")]] }]),
            ),
        )
        .await;
        if answer["statuses"][0]["limit"]["name"] == "envoy.remote_address" {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "the imported rules never reached the instance: {answer:#}"
        );
    }

    let c = |entries: Value| call(&name, &t.check_key, json!([{ "entries": entries }]));
    // The file's limits are per minute: every call in one minute.
    clear_of_a_window_edge(60_000).await;
    let answers = calls(
        &app,
        vec![
            c(json!([["remote_address", "10.0.0.1"]])),
            c(json!([["remote_address", "10.0.0.1"]])),
            c(json!([["remote_address", "10.0.0.1"]])),
            c(json!([["remote_address", "10.0.0.1"]])),
            c(json!([["remote_address", "10.0.0.2"]])),
            c(json!([["path", "/login"]])),
            c(json!([["path", "/login"]])),
            c(json!([["path", "/login"]])),
            c(json!([["path", "/login"], ["user", "ann"]])),
            c(json!([["path", "/login"], ["user", "ann"]])),
            c(json!([["path", "/login"], ["user", "bob"]])),
            c(json!([["path", "/search"]])),
            c(json!([["path", "/search"]])),
            c(json!([["path", "/search"]])),
            c(json!([["path", "/health"]])),
            c(json!([["path", "/health"]])),
        ],
    )
    .await;
    assert_eq!(
        codes(&answers),
        [
            "OK",
            "OK",
            "OK",
            "OVER_LIMIT",
            "OK", // 3 a minute per address
            "OK",
            "OK",
            "OVER_LIMIT", // 2 a minute on /login for everyone
            "OK",
            "OVER_LIMIT",
            "OK", // 1 a minute per user of /login
            "OK",
            "OK",
            "OK", // shadow: never denied
            "OK",
            "OK", // unlimited: no rule
        ],
        "{answers:#?}"
    );
    assert_eq!(answers[5]["statuses"][0]["limit"]["name"], "login");
    assert_eq!(answers[11]["statuses"][0]["limit"]["unit"], "SECOND");
    assert!(
        answers[14]["statuses"][0]["limit"].is_null(),
        "{:#}",
        answers[14]
    );

    // Importing the same file again changes nothing; a shorter file updates what it still
    // has and deletes the descriptor rules it no longer names, never the route rules.
    let again = import(&["--apply"]);
    assert!(
        again.contains("0 to create, 0 to update, 0 to delete, 4 unchanged"),
        "{again}"
    );
    let shorter = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        shorter.path(),
        "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n",
    )
    .unwrap();
    let out = sluice(
        &env,
        &[
            "import",
            "envoy-ratelimit",
            shorter.path().to_str().unwrap(),
            "--tenant",
            &t.id,
            "--apply",
        ],
    );
    assert!(
        out.contains("0 to create, 1 to update, 3 to delete, 0 unchanged: applied"),
        "{out}"
    );
    assert_eq!(
        rule_names(&app, &op, &t.id).await,
        ["all", "envoy.remote_address"]
    );

    // An import the tenant's quota of rules cannot hold is refused whole.
    let (status, _, body) = app
        .call(
            "PUT",
            &format!("/v1/admin/tenants/{}/quotas", t.id),
            Some(&op),
            Some(&json!({ "max_rules": 3, "max_keys": 50, "max_live_buckets": 1000 })),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let stderr = sluice_fails(
        &env,
        &[
            "import",
            "envoy-ratelimit",
            file,
            "--tenant",
            &t.id,
            "--apply",
        ],
    );
    assert!(stderr.contains("quota is 3"), "{stderr}");
    assert_eq!(
        rule_names(&app, &op, &t.id).await,
        ["all", "envoy.remote_address"]
    );

    // A file that is not a configuration changes nothing and says why.
    std::fs::write(shorter.path(), "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n").unwrap();
    let stderr = sluice_fails(
        &env,
        &[
            "import",
            "envoy-ratelimit",
            shorter.path().to_str().unwrap(),
            "--tenant",
            &t.id,
            "--apply",
        ],
    );
    assert!(stderr.contains("unknown unit \"fortnight\""), "{stderr}");
    assert_eq!(
        rule_names(&app, &op, &t.id).await,
        ["all", "envoy.remote_address"]
    );
}

#[test]
fn the_example_envoy_configuration_parses_with_envoys_own_protos() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = root.join("end2end/.venv/bin/python");
    let check = |file: &std::path::Path| {
        std::process::Command::new(&python)
            .arg(root.join("end2end/envoy/check_config.py"))
            .arg(file)
            .output()
            .expect("run scripts/setup: it installs the Envoy protos into end2end/.venv")
    };
    let out = check(&root.join("docs/examples/envoy.yaml"));
    assert!(
        out.status.success(),
        "Envoy's protos refuse docs/examples/envoy.yaml: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary["rate_limit_filters"],
        json!([{
            "domain": "acme", "failure_mode_deny": true, "metadata": ["x-api-key"],
            "cluster": "sluice", "cluster_http2": true, "api": 2,
        }]),
        "one rate limit filter, sending the key to Sluice over HTTP/2 with the v3 API"
    );
    // The descriptors it sends are the ones the example envoyproxy/ratelimit file limits.
    assert_eq!(
        summary["descriptors"],
        json!([["remote_address"], ["path"], ["path", "user"]])
    );

    // The check can fail: a misspelt field is refused.
    let text = std::fs::read_to_string(root.join("docs/examples/envoy.yaml")).unwrap();
    let misspelt = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        misspelt.path(),
        text.replace("failure_mode_deny:", "failure_mode_denied:"),
    )
    .unwrap();
    let out = check(misspelt.path());
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("failure_mode_denied"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_limit_override_is_taken_only_where_the_rule_allows_it_and_counts_in_its_own_window() {
    let (app, op) = embedded_grpc().await;
    let mut flexible = descriptor_rule("flexible", &[("api", Some("upload"))], 100);
    flexible["allow_override"] = json!(true);
    let t = setup_tenant(
        &app,
        &op,
        &[
            descriptor_rule("fixed", &[("api", Some("search"))], 100),
            flexible,
        ],
    )
    .await;
    let name = tenant_name(&app, &op, &t).await;
    let upload = |limit: Value| {
        let mut d = json!({ "entries": [["api", "upload"]] });
        if !limit.is_null() {
            d["limit"] = limit;
        }
        call(&name, &t.check_key, json!([d]))
    };
    let per_minute = |n: u64| json!({ "requests_per_unit": n, "unit": "MINUTE" });
    // Every call of a limit per minute in one minute.
    clear_of_a_window_edge(60_000).await;
    let answers = calls(
        &app,
        vec![
            upload(per_minute(2)),
            upload(per_minute(2)),
            upload(per_minute(2)),
            // Without the override: the rule's own limit, in its own bucket, untouched.
            upload(Value::Null),
            // Another limit per minute compares the same minute's count (2) with itself,
            // as envoyproxy/ratelimit does: varying the limit mints no fresh budget.
            upload(per_minute(5)),
            // Another unit is another window.
            upload(json!({ "requests_per_unit": 5, "unit": "HOUR" })),
            // A rule that does not allow it refuses, and so does a limit the limiter cannot take.
            call(
                &name,
                &t.check_key,
                json!([{ "entries": [["api", "search"]], "limit": 5 }]),
            ),
            upload(per_minute(0)),
            upload(json!({ "requests_per_unit": 5, "unit": "UNKNOWN" })),
        ],
    )
    .await;
    assert_eq!(
        codes(&answers[..6]),
        ["OK", "OK", "OVER_LIMIT", "OK", "OK", "OK"],
        "{answers:#?}"
    );
    let limit = |i: usize| answers[i]["statuses"][0]["limit"].clone();
    let remaining = |i: usize| answers[i]["statuses"][0]["remaining"].clone();
    assert_eq!(limit(0)["name"], "flexible");
    assert_eq!(limit(0)["requests_per_unit"], 2);
    assert_eq!(limit(0)["unit"], "MINUTE");
    assert_eq!(remaining(1), 0);
    assert_eq!(limit(3)["requests_per_unit"], 100);
    assert_eq!(remaining(3), 99);
    assert_eq!(limit(4)["requests_per_unit"], 5);
    assert_eq!(remaining(4), 2, "{:#}", answers[4]);
    assert_eq!(limit(5)["unit"], "HOUR");
    assert_eq!(remaining(5), 4);
    for (i, says) in [(6, "\"fixed\""), (7, "requests_per_unit"), (8, "unit")] {
        assert_eq!(answers[i]["grpc"], "INVALID_ARGUMENT", "{:#}", answers[i]);
        assert!(
            answers[i]["message"].as_str().unwrap().contains(says),
            "{:#}",
            answers[i]
        );
    }

    // Only a descriptor rule may allow it.
    let mut route_rule = rule("route", "all", None, "gcra", 1, 1000);
    route_rule["allow_override"] = json!(true);
    let (status, _, body) = app
        .call(
            "POST",
            &format!("/v1/admin/tenants/{}/rules", t.id),
            Some(&op),
            Some(&route_rule),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("allow_override"), "{body}");
    // ... and only one that counts in windows.
    let mut bucket = descriptor_rule("bucket", &[("api", Some("other"))], 10);
    bucket["algorithm"] = json!("token_bucket");
    bucket["allow_override"] = json!(true);
    let (status, _, body) = app
        .call(
            "POST",
            &format!("/v1/admin/tenants/{}/rules", t.id),
            Some(&op),
            Some(&bucket),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("fixed_window"), "{body}");
}
