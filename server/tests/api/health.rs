//! `/healthz`, `/readyz`, `/metrics`, the console page and its server function, in each mode.

use crate::helpers::{
    distributed_on_cluster, embedded_config, rule, setup_tenant, spawn_app, spawn_embedded,
};
use crate::services::{shared_postgres, RedisCluster, RedisServer};
use serde_json::json;
use sluice::config::Config;

/// Polls `/readyz` for up to 5 s until it answers 200 again.
async fn assert_readyz_recovers(app: &crate::helpers::TestApp, what: &str) {
    let mut last = 0;
    for _ in 0..50 {
        last = app.get("/readyz").await.status().as_u16();
        if last == 200 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("readyz still answers {last} 5 s after {what} came back");
}

#[tokio::test]
async fn embedded_instance_is_healthy_and_ready() {
    let app = spawn_embedded().await;
    let health = app.get("/healthz").await;
    assert_eq!(health.status(), 200);
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status(), 200);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body["status"], "ready");
    assert_eq!(
        body["checks"].as_array().unwrap().len(),
        1,
        "no redis check in embedded mode"
    );
}

#[tokio::test]
async fn readyz_names_redis_while_it_is_down_and_recovers_when_it_is_back() {
    let mut redis = RedisServer::start();
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(shared_postgres().fresh_database().await);
    config.redis_url = Some(redis.url());
    let app = spawn_app(config).await;
    assert_eq!(app.get("/readyz").await.status(), 200);
    let op = app.operator_key().await;

    redis.stop();
    let down = app.get("/readyz").await;
    assert_eq!(down.status(), 503);
    let body: serde_json::Value = down.json().await.unwrap();
    assert_eq!(body["down"], serde_json::json!(["redis"]), "{body}");
    let redis_check = |body: &serde_json::Value| {
        body["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "redis")
            .cloned()
            .unwrap()
    };
    assert_eq!(redis_check(&body)["ok"], false);
    // A stranger learns what is down, not the driver's message (addresses, versions).
    assert!(redis_check(&body).get("error").is_none(), "{body}");
    // An operator sees why.
    let (status, _, detailed) = app.call("GET", "/readyz", Some(&op), None).await;
    assert_eq!(status, 503);
    assert!(
        redis_check(&detailed)["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{detailed}"
    );
    // Liveness does not depend on Redis.
    assert_eq!(app.get("/healthz").await.status(), 200);

    redis.restart();
    assert_readyz_recovers(&app, "Redis").await;
}

#[tokio::test]
async fn readyz_names_the_database_while_postgres_is_down() {
    let postgres = crate::services::PostgresServer::start();
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(postgres.url("postgres"));
    let app = spawn_app(config).await;
    assert_eq!(app.get("/readyz").await.status(), 200);
    postgres.stop();
    let down = app.get("/readyz").await;
    assert_eq!(down.status(), 503);
    let body: serde_json::Value = down.json().await.unwrap();
    assert_eq!(body["down"], serde_json::json!(["database"]), "{body}");

    postgres.restart();
    assert_readyz_recovers(&app, "PostgreSQL").await;
}

#[tokio::test]
async fn distributed_instance_runs_on_postgres_and_a_redis_cluster() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let database = shared_postgres().fresh_database().await;
    let app = distributed_on_cluster(&database, cluster.urls()).await;
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status(), 200);
    let status: serde_json::Value = app
        .client
        .post(app.url("/api/status"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["mode"], "distributed");
    assert_eq!(status["database"], "postgres");
    assert_eq!(status["limiter"], "redis-cluster");
    assert_eq!(status["down"], serde_json::json!([]));
}

#[tokio::test]
async fn a_wrong_redis_url_stops_start_up_with_a_clear_error() {
    let (mut config, _dir) = embedded_config();
    // A port nothing listens on.
    config.redis_url = Some(format!(
        "redis://127.0.0.1:{}",
        crate::services::free_port(false)
    ));
    let err = match sluice::startup::Application::build(config).await {
        Ok(_) => panic!("start-up must fail"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains("REDIS_URL"), "{err}");
}

#[tokio::test]
async fn the_console_page_is_server_rendered_with_its_hydration_script() {
    let app = spawn_embedded().await;
    let page = app.get("/").await;
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let html = page.text().await.unwrap();
    assert!(html.contains("Sluice console"), "{html}");
    // The status widget is rendered on the server, before any script runs.
    assert!(html.contains(r#"data-testid="status-mode""#), "{html}");
    assert!(html.contains(">embedded<"), "{html}");
    assert!(html.contains("/pkg/sluice.js"), "{html}");
    assert!(
        html.contains("/pkg/sluice.wasm"),
        "the page must load sluice.wasm: {html}"
    );
    assert!(html.contains("/pkg/sluice.css"), "{html}");

    let sign_in = app.get("/sign-in").await;
    assert_eq!(sign_in.status(), 200);
    let sign_in = sign_in.text().await.unwrap();
    assert!(sign_in.contains(r#"autocomplete="current-password""#));
    // Without script the browser posts the form itself, URL-encoded, to the server function.
    assert!(
        sign_in.contains(r#"<form action="/api/sign_in" method="post""#),
        "{sign_in}"
    );

    let missing = app.get("/no/such/page").await;
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn the_status_server_function_answers_json() {
    let app = spawn_embedded().await;
    let response = app
        .client
        .post(app.url("/api/status"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let status: serde_json::Value = response.json().await.unwrap();
    assert_eq!(status["mode"], "embedded");
    assert_eq!(status["database"], "sqlite");
    assert_eq!(status["limiter"], "in-process");
    assert_eq!(
        status["version"],
        serde_json::Value::Null,
        "anonymous: no version"
    );
    assert!(status["checked_at_ms"].as_i64().unwrap() > 1_700_000_000_000);
}

#[tokio::test]
async fn metrics_count_requests_by_route_template() {
    let app = spawn_embedded().await;
    for _ in 0..3 {
        app.get("/healthz").await;
    }
    let metrics = app.get("/metrics").await;
    assert_eq!(metrics.status(), 200);
    let text = metrics.text().await.unwrap();
    assert!(text.contains("sluice_build_info{"), "{text}");
    assert!(text.contains(r#"mode="embedded""#), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("sluice_http_requests_total{") && l.contains(r#"route="/healthz""#))
        .unwrap_or_else(|| panic!("no healthz counter in {text}"));
    assert!(line.ends_with(" 3"), "{line}");
}

/// A check is routed outside the router's middleware, so its handler counts itself and adds
/// the security headers: each answer, allowed, denied or refused, is counted by status.
#[tokio::test]
async fn checks_count_themselves_by_status_and_carry_the_security_headers() {
    let app = spawn_embedded().await;
    let op = app.operator_key().await;
    let t = setup_tenant(
        &app,
        &op,
        &[rule("one", "all", None, "token_bucket", 1, 60_000)],
    )
    .await;
    let body = json!({ "route": "GET /x" });
    let mut statuses = Vec::new();
    for key in [Some(t.check_key.as_str()), Some(t.check_key.as_str()), None] {
        let (status, headers, _) = app.call("POST", "/v1/check", key, Some(&body)).await;
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert_eq!(headers["x-frame-options"], "DENY");
        // The data plane's answers are JSON no browser should render: nothing is allowed.
        assert_eq!(
            headers["content-security-policy"],
            "default-src 'none'; frame-ancestors 'none'"
        );
        statuses.push(status);
    }
    assert_eq!(statuses, [200, 429, 401]);
    let text = app.get("/metrics").await.text().await.unwrap();
    for status in ["200", "429", "401"] {
        let line = text
            .lines()
            .find(|l| {
                l.starts_with("sluice_http_requests_total{")
                    && l.contains(r#"route="/v1/check""#)
                    && l.contains(&format!(r#"status="{status}""#))
            })
            .unwrap_or_else(|| panic!("no /v1/check {status} counter in {text}"));
        assert!(line.ends_with(" 1"), "{line}");
    }
    let count = text
        .lines()
        .find(|l| {
            l.starts_with("sluice_http_request_duration_seconds_count{")
                && l.contains(r#"route="/v1/check""#)
        })
        .unwrap_or_else(|| panic!("no /v1/check duration in {text}"));
    assert!(count.ends_with(" 3"), "{count}");
    // Another method: 405, with the headers, and counted like any other answer.
    let response = app.get("/v1/check").await;
    assert_eq!(response.status(), 405);
    assert_eq!(response.headers()["allow"], "POST");
    assert_eq!(response.headers()["x-content-type-options"], "nosniff");
    let text = app.get("/metrics").await.text().await.unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("sluice_http_requests_total{")
                && l.contains(r#"method="GET""#)
                && l.contains(r#"route="/v1/check""#)
                && l.contains(r#"status="405""#)
                && l.ends_with(" 1")),
        "no GET /v1/check 405 counter in {text}"
    );
}

#[tokio::test]
async fn invented_http_methods_share_one_metric_label() {
    let app = spawn_embedded().await;
    for i in 0..20 {
        let method = reqwest::Method::from_bytes(format!("INVENTED{i}").as_bytes()).unwrap();
        let response = app
            .client
            .request(method, app.url("/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405);
    }
    let long = reqwest::Method::from_bytes("X".repeat(10_000).as_bytes()).unwrap();
    app.client
        .request(long, app.url("/healthz"))
        .send()
        .await
        .unwrap();
    let text = app.get("/metrics").await.text().await.unwrap();
    assert!(!text.contains("INVENTED"), "{text}");
    assert!(!text.contains("XXXX"), "{text}");
    let other = text
        .lines()
        .find(|l| {
            l.starts_with("sluice_http_requests_total{")
                && l.contains(r#"method="other""#)
                && l.contains(r#"route="/healthz""#)
        })
        .unwrap_or_else(|| panic!("no method=\"other\" counter in {text}"));
    assert!(other.ends_with(" 21"), "{other}");
}

#[tokio::test]
async fn metrics_can_have_their_own_listener() {
    let (mut config, dir) = embedded_config();
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    let app = spawn_app(config).await;
    let metrics_address = app.metrics_address.expect("a metrics listener");
    let text = app
        .client
        .get(format!("http://{metrics_address}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("sluice_build_info"), "{text}");
    // ... and only there: the main listener does not serve it.
    let main = app.get("/metrics").await;
    assert_eq!(main.status(), 404);
    assert!(!main.text().await.unwrap().contains("sluice_build_info"));
    drop(dir);
}

/// The metric names in a PromQL expression (`sluice_…`), in order of appearance.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("sluice_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        names.push(name);
    }
    names
}

/// The label names an expression groups by (`by (a, b)`) or selects on (`{a="…"}`).
fn label_names(expr: &str) -> Vec<String> {
    let mut labels = Vec::new();
    for (open, close) in [("by (", ')'), ("{", '}')] {
        let mut rest = expr;
        while let Some(at) = rest.find(open) {
            let inside = &rest[at + open.len()..];
            let end = inside.find(close).expect("balanced");
            for part in inside[..end].split(',') {
                let label = part.split(['=', '!', '~']).next().unwrap().trim();
                if !label.is_empty() {
                    labels.push(label.to_owned());
                }
            }
            rest = &inside[end..];
        }
    }
    labels
}

#[tokio::test]
async fn the_grafana_dashboard_queries_only_metrics_and_labels_an_instance_exports() {
    let mut redis = RedisServer::start();
    let mut config = Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(shared_postgres().fresh_database().await);
    config.redis_url = Some(redis.url());
    let app = spawn_app(config).await;
    let op = app.operator_key().await;
    let with = |name: &str, field: &str, value: serde_json::Value| {
        let route = format!("GET /{name}");
        let mut r = rule(name, "exact", Some(route.as_str()), "gcra", 1, 60_000);
        r[field] = value;
        r
    };
    let t = setup_tenant(
        &app,
        &op,
        &[
            rule("limited", "exact", Some("GET /limited"), "gcra", 1, 60_000),
            with("shadow", "shadow", json!(true)),
            with("open", "failure_mode", json!("open")),
            with("closed", "failure_mode", json!("closed")),
            with("local", "failure_mode", json!("local")),
        ],
    )
    .await;
    // Every series the dashboard draws: allowed, denied, no rule, a shadow's would-deny ...
    for route in [
        "GET /limited",
        "GET /limited",
        "GET /shadow",
        "GET /shadow",
        "GET /none",
    ] {
        app.check(&t.check_key, json!({ "route": route })).await;
    }
    // ... and each failure mode, then the breaker opening and answering.
    redis.stop();
    for route in ["GET /open", "GET /closed", "GET /local"] {
        app.check(&t.check_key, json!({ "route": route })).await;
    }
    let mut calls = 0;
    while app.metric("sluice_redis_breaker_refused_total").await == 0.0 {
        calls += 1;
        assert!(calls <= 20, "the breaker opens after a run of failures");
        app.check(&t.check_key, json!({ "route": "GET /open" }))
            .await;
    }

    let text = app.get("/metrics").await.text().await.unwrap();
    // name → (type, the label names of its series)
    let mut exported: std::collections::HashMap<
        String,
        (String, std::collections::HashSet<String>),
    > = std::collections::HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            exported.insert(name.to_owned(), (kind.to_owned(), Default::default()));
        }
    }
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let series = line.split(' ').next().unwrap();
        let name = series.split('{').next().unwrap();
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|b| exported.contains_key(*b)))
            .unwrap_or(name);
        if let Some((_, labels)) = exported.get_mut(base) {
            labels.extend(label_names(series));
        }
    }

    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/examples/grafana-dashboard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut used = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut labels = std::collections::HashSet::new();
            for name in metric_names(expr) {
                let histogram = name
                    .strip_suffix("_bucket")
                    .filter(|b| exported.get(*b).is_some_and(|(k, _)| k == "histogram"));
                let base = histogram.unwrap_or(&name);
                let (_, have) = exported.get(base).unwrap_or_else(|| {
                    panic!(
                        "{:?} uses {name}, which /metrics does not export",
                        panel["title"]
                    )
                });
                labels.extend(have.iter().cloned());
                if histogram.is_some() {
                    labels.insert("le".to_owned());
                }
                used.insert(base.to_owned());
            }
            for label in label_names(expr) {
                assert!(
                    labels.contains(&label),
                    "{:?} groups or selects by {label}, which none of its metrics has: {expr}",
                    panel["title"]
                );
            }
        }
    }
    // The dashboard covers what an operator watches, not a handful of metrics.
    for name in [
        "sluice_decisions_total",
        "sluice_limiter_seconds",
        "sluice_fail_closed_total",
        "sluice_redis_breaker_open",
        "sluice_active_keys",
    ] {
        assert!(used.contains(name), "the dashboard draws {name}: {used:?}");
    }
}
