//! The real `sluice` binary: it starts with no environment, prints its URL, and stops
//! gracefully on SIGTERM and SIGINT.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::helpers::{browser, sluice};

/// Starts the binary; returns it, its URL and everything it printed up to "Stop with Ctrl-C.".
fn start_binary(data_dir: &std::path::Path) -> (std::process::Child, String, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SLUICE_LISTEN", "127.0.0.1:0")
        .env("SLUICE_DATA_DIR", data_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the sluice binary");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut printed = Vec::new();
    loop {
        let line = lines
            .next()
            .expect("the server printed its banner")
            .unwrap();
        let done = line.contains("Stop with Ctrl-C.");
        printed.push(line);
        if done {
            break;
        }
    }
    let url = printed
        .iter()
        .find_map(|l| l.trim().strip_prefix("Sluice is running at "))
        .expect("the URL is printed")
        .trim()
        .to_owned();
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, url, printed)
}

fn signal(child: &std::process::Child, name: &str) {
    let status = Command::new("kill")
        .args(["-s", name, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn wait_exit(child: &mut std::process::Child) -> std::process::ExitStatus {
    for _ in 0..100 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    panic!("the server did not stop within 5 s");
}

#[tokio::test]
async fn the_binary_serves_with_no_environment_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url, printed) = start_binary(dir.path());
    let health = reqwest::get(format!("{url}healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
    // The first start prints a way to sign in, and it works.
    let sign_in = printed
        .iter()
        .find(|l| l.contains("with password"))
        .expect("sign-in instructions");
    let password = sign_in.rsplit(' ').next().unwrap();
    let client = browser();
    let user: serde_json::Value = client
        .post(format!("{url}api/sign_in"))
        .form(&[("email", "admin@localhost"), ("password", password)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(user["role"], "operator", "{user}");
    assert!(
        dir.path().join("sluice.db").exists(),
        "the SQLite file is in SLUICE_DATA_DIR"
    );
    signal(&child, "TERM");
    assert!(wait_exit(&mut child).success());
}

#[tokio::test]
async fn the_binary_stops_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, url, _) = start_binary(dir.path());
    assert_eq!(
        reqwest::get(format!("{url}readyz")).await.unwrap().status(),
        200
    );
    signal(&child, "INT");
    assert!(wait_exit(&mut child).success());
}

#[tokio::test]
async fn graceful_shutdown_ends_the_serve_loop() {
    let app = crate::helpers::spawn_embedded().await;
    assert_eq!(app.get("/healthz").await.status(), 200);
    let address = app.address;
    app.shutdown().await.unwrap();
    assert!(reqwest::get(format!("http://{address}/healthz"))
        .await
        .is_err());
}

/// Polls until `key` gets `status` from `/v1/admin/tenants`; returns how long that took.
async fn until_status(app: &crate::helpers::TestApp, key: &str, status: u16) -> Duration {
    let started = std::time::Instant::now();
    loop {
        if app
            .call("GET", "/v1/admin/tenants", Some(key), None)
            .await
            .0
            == status
        {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{key:.12}… never answered {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn operator_keys_are_listed_rotated_and_revoked_from_the_cli_and_every_instance_knows_at_once(
) {
    let redis = crate::services::RedisServer::start();
    let database = crate::services::shared_postgres().fresh_database().await;
    let mut config =
        sluice::config::Config::embedded(tempfile::tempdir().unwrap().path().to_path_buf());
    config.database_url = Some(database.clone());
    config.redis_url = Some(redis.url());
    let app = crate::helpers::spawn_app(config).await;
    let env = [("DATABASE_URL", database), ("REDIS_URL", redis.url())];

    let first = sluice(&env, &["key", "create", "--operator", "--name", "ci"]);
    let first = first.trim();
    // The key works (and is now in the instance's cache).
    until_status(&app, first, 200).await;
    let listed = sluice(&env, &["key", "list", "--operator"]);
    let row = listed
        .lines()
        .find(|l| l.contains(&first[..12]))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(row.contains(" ci ") && row.contains("live"), "{row}");
    let id = row.split_whitespace().next().unwrap().to_owned();

    // Rotation without grace: the new key works, the old one is refused on the instance that
    // had it cached, at once.
    let second = sluice(&env, &["key", "rotate", &id, "--grace-seconds", "0"]);
    let second = second.trim();
    assert!(second.starts_with("sl_op_"), "{second}");
    assert!(until_status(&app, first, 401).await < Duration::from_secs(1));
    until_status(&app, second, 200).await;

    let listed = sluice(&env, &["key", "list", "--operator"]);
    let second_id = listed
        .lines()
        .find(|l| l.contains(&second[..12]))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("{listed}"))
        .to_owned();
    sluice(&env, &["key", "revoke", &second_id]);
    assert!(until_status(&app, second, 401).await < Duration::from_secs(1));
    let listed = sluice(&env, &["key", "list", "--operator"]);
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&second_id) && l.contains("revoked")),
        "{listed}"
    );
}
