//! Console sign-in over the server functions, as the browser calls them: argon2id passwords,
//! an HttpOnly SameSite=Strict session cookie stored only as a hash, sign-out, and sign-in
//! attempts limited by Sluice's own limiter.

use serde_json::Value;
use sluice::config::Config;

use crate::helpers::{embedded_with_operator, TestApp};

const PASSWORD: &str = "correct horse battery staple";

async fn embedded_with_admin() -> (TestApp, tempfile::TempDir) {
    embedded_with_operator(PASSWORD).await
}

fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap()
}

async fn call(
    app: &TestApp,
    client: &reqwest::Client,
    endpoint: &str,
    form: &[(&str, &str)],
) -> (u16, Vec<String>, Value) {
    let response = client
        .post(app.url(&format!("/api/{endpoint}")))
        .form(form)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let cookies = response
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let body = serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null);
    (status, cookies, body)
}

#[tokio::test]
async fn sign_in_sets_a_strict_http_only_session_that_sign_out_ends() {
    let (app, _dir) = embedded_with_admin().await;
    let client = browser();
    assert_eq!(call(&app, &client, "me", &[]).await.2, Value::Null);

    let (status, cookies, user) = call(
        &app,
        &client,
        "sign_in",
        &[("email", "Admin@Localhost"), ("password", PASSWORD)],
    )
    .await;
    assert_eq!(status, 200, "{user}");
    assert_eq!(user["email"], "admin@localhost");
    assert_eq!(user["role"], "operator");
    let cookie = cookies
        .iter()
        .find(|c| c.starts_with("sluice_session="))
        .expect("a session cookie");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(!cookie.contains("Secure"), "plain HTTP here: {cookie}");

    // Only a hash of the session id is stored.
    let id = cookie
        .trim_start_matches("sluice_session=")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let sluice::store::Db::Sqlite(pool) = &app.db else {
        panic!("embedded")
    };
    let stored: Vec<String> = sqlx::query_scalar("SELECT id_hash FROM sessions")
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert_ne!(stored[0], id);
    assert_eq!(stored[0], app::keys::sha256_hex(&id));

    assert_eq!(
        call(&app, &client, "me", &[]).await.2["email"],
        "admin@localhost"
    );
    assert_eq!(call(&app, &client, "sign_out", &[]).await.0, 200);
    assert_eq!(
        call(&app, &client, "me", &[]).await.2,
        Value::Null,
        "the session is gone"
    );
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sessions")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn a_wrong_password_or_an_unknown_email_gets_the_same_clear_message() {
    let (app, _dir) = embedded_with_admin().await;
    let client = browser();
    for (email, password) in [
        ("admin@localhost", "nope"),
        ("nobody@example.com", PASSWORD),
    ] {
        let (status, cookies, body) = call(
            &app,
            &client,
            "sign_in",
            &[("email", email), ("password", password)],
        )
        .await;
        assert_ne!(status, 200);
        assert!(
            body.to_string().contains("wrong email or password"),
            "{body}"
        );
        assert!(
            cookies.iter().all(|c| !c.starts_with("sluice_session=")),
            "no session: {cookies:?}"
        );
    }
    assert_eq!(call(&app, &client, "me", &[]).await.2, Value::Null);
}

#[tokio::test]
async fn sign_in_attempts_are_rate_limited_per_email() {
    let (app, _dir) = embedded_with_admin().await;
    let client = browser();
    for _ in 0..10 {
        let (_, _, body) = call(
            &app,
            &client,
            "sign_in",
            &[("email", "admin@localhost"), ("password", "guess")],
        )
        .await;
        assert!(
            body.to_string().contains("wrong email or password"),
            "{body}"
        );
    }
    let (_, _, body) = call(
        &app,
        &client,
        "sign_in",
        &[("email", "admin@localhost"), ("password", PASSWORD)],
    )
    .await;
    assert!(
        body.to_string().contains("too many sign-in attempts"),
        "even the right password waits: {body}"
    );
    // Another email is not affected.
    let (_, _, body) = call(
        &app,
        &client,
        "sign_in",
        &[("email", "other@example.com"), ("password", "x")],
    )
    .await;
    assert!(
        body.to_string().contains("wrong email or password"),
        "{body}"
    );
}

#[tokio::test]
async fn the_first_start_creates_one_operator_and_later_starts_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let first = sluice::startup::Application::build(Config::embedded(dir.path().to_path_buf()))
        .await
        .unwrap();
    let password = first
        .bootstrap_password()
        .expect("a generated password")
        .to_owned();
    assert_eq!(password.chars().count(), 20);
    let db = first.db();
    drop(first);
    let second = sluice::startup::Application::build(Config::embedded(dir.path().to_path_buf()))
        .await
        .unwrap();
    assert_eq!(second.bootstrap_password(), None);
    let users = sluice::store::users::list(&db).await.unwrap();
    assert_eq!(users.len(), 1);
    assert!(sluice::passwords::verify(password, Some(users[0].password_hash.clone())).await);
}
