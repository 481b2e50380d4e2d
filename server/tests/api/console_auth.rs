//! Console sign-in over the server functions, as the browser calls them: argon2id passwords,
//! an HttpOnly SameSite=Strict session cookie stored only as a hash, sign-out, and sign-in
//! attempts limited by Sluice's own limiter.

use serde_json::Value;
use sluice::config::Config;

use crate::helpers::{browser, browser_with, embedded_with_operator, TestApp};

const PASSWORD: &str = "correct horse battery staple";

async fn embedded_with_admin() -> (TestApp, tempfile::TempDir) {
    embedded_with_operator(PASSWORD).await
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

/// The session id a response's cookies set.
fn session_id(cookies: &[String]) -> String {
    cookies
        .iter()
        .find_map(|c| c.strip_prefix("sluice_session="))
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_owned()
}

#[tokio::test]
async fn a_session_of_a_disabled_user_or_from_before_a_password_change_is_refused_even_if_its_row_is_left(
) {
    // Disabling a user and changing a password end the user's sessions; a sign-in that was
    // already past its password check writes its session afterwards. These are the second
    // locks, tested here with the rows left in place.
    let (app, _dir) = embedded_with_admin().await;
    let user = sluice::store::users::find_by_email(&app.db, "admin@localhost")
        .await
        .unwrap()
        .unwrap();
    let client = browser();
    let (status, _, _) = call(
        &app,
        &client,
        "sign_in",
        &[("email", "admin@localhost"), ("password", PASSWORD)],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        call(&app, &client, "me", &[]).await.2["email"],
        "admin@localhost"
    );

    sluice::store::users::set_disabled(&app.db, &user.id, Some(1))
        .await
        .unwrap();
    assert_eq!(call(&app, &client, "me", &[]).await.2, Value::Null);
    sluice::store::users::set_disabled(&app.db, &user.id, None)
        .await
        .unwrap();
    assert_eq!(
        call(&app, &client, "me", &[]).await.2["email"],
        "admin@localhost"
    );

    let other = sluice::passwords::hash("another password entirely".into())
        .await
        .unwrap();
    sluice::store::users::set_password_hash(&app.db, &user.id, None, &other)
        .await
        .unwrap();
    assert_eq!(call(&app, &client, "me", &[]).await.2, Value::Null);
    let sluice::store::Db::Sqlite(pool) = &app.db else {
        panic!("embedded")
    };
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sessions")
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(
        rows >= 1,
        "the row is still there: only the mark refuses it"
    );
}

/// Fails if any audit event's detail holds one of `secrets`.
async fn assert_nowhere_in_the_audit_log(app: &TestApp, secrets: &[&str]) {
    let sluice::store::Db::Sqlite(pool) = &app.db else {
        panic!("embedded")
    };
    let log: Vec<String> = sqlx::query_scalar("SELECT detail FROM audit_events")
        .fetch_all(pool)
        .await
        .unwrap();
    for secret in secrets {
        assert!(log.iter().all(|d| !d.contains(secret)), "{log:?}");
    }
}

/// The audit events of `action`, oldest first: (actor, detail).
async fn audited(app: &TestApp, action: &str) -> Vec<(String, Value)> {
    let sluice::store::Db::Sqlite(pool) = &app.db else {
        panic!("embedded")
    };
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT actor, detail FROM audit_events WHERE action = $1 ORDER BY id")
            .bind(action)
            .fetch_all(pool)
            .await
            .unwrap();
    rows.into_iter()
        .map(|(actor, detail)| (actor, serde_json::from_str(&detail).unwrap()))
        .collect()
}

#[tokio::test]
async fn a_password_change_needs_the_current_one_and_ends_every_other_session_of_the_user() {
    let (app, _dir) = embedded_with_admin().await;
    let here = browser();
    let elsewhere = browser();
    let mut first_cookie = String::new();
    for client in [&here, &elsewhere] {
        let (status, cookies, body) = call(
            &app,
            client,
            "sign_in",
            &[("email", "admin@localhost"), ("password", PASSWORD)],
        )
        .await;
        assert_eq!(status, 200, "{body}");
        if first_cookie.is_empty() {
            first_cookie = session_id(&cookies);
        }
    }
    let new_password = "a much longer new passphrase";

    // The current password is required, and a new one must be long enough; either refusal
    // leaves everything as it was.
    for (current, new, said) in [
        (
            "not it at all",
            new_password,
            "is not your current password",
        ),
        (PASSWORD, "short", "at least 12 characters"),
    ] {
        let (status, _, body) = call(
            &app,
            &here,
            "account/password",
            &[("current_password", current), ("new_password", new)],
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert!(body.to_string().contains(said), "{body}");
        assert_eq!(
            call(&app, &elsewhere, "me", &[]).await.2["email"],
            "admin@localhost"
        );
    }
    assert!(audited(&app, "user.password").await.is_empty());

    let (status, cookies, ended) = call(
        &app,
        &here,
        "account/password",
        &[
            ("current_password", PASSWORD),
            ("new_password", new_password),
        ],
    )
    .await;
    assert_eq!(status, 200, "{ended}");
    assert_eq!(ended, 1, "one other session ended");
    // The session that changed it goes on under a new id.
    assert_ne!(session_id(&cookies), first_cookie);
    assert_eq!(
        call(&app, &here, "me", &[]).await.2["email"],
        "admin@localhost"
    );
    assert_eq!(call(&app, &elsewhere, "me", &[]).await.2, Value::Null);

    // The old password is refused and the new one works.
    let fresh = browser();
    let (status, _, _) = call(
        &app,
        &fresh,
        "sign_in",
        &[("email", "admin@localhost"), ("password", PASSWORD)],
    )
    .await;
    assert_eq!(status, 400);
    let (status, _, _) = call(
        &app,
        &fresh,
        "sign_in",
        &[("email", "admin@localhost"), ("password", new_password)],
    )
    .await;
    assert_eq!(status, 200);

    // Audited once, with the sessions it ended (the changing one among them), and with no
    // password anywhere in the log.
    let changed = audited(&app, "user.password").await;
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!(changed[0].0, "user:admin@localhost");
    assert_eq!(changed[0].1["sessions_ended"], 2);
    assert_nowhere_in_the_audit_log(&app, &[PASSWORD, new_password, "not it at all"]).await;
}

#[tokio::test]
async fn sign_ins_and_failed_sign_ins_are_audited_with_the_client_and_never_the_password() {
    let (app, _dir) = embedded_with_admin().await;
    let client = browser();
    for (email, password) in [
        ("admin@localhost", "a wrong guess"),
        ("nobody@example.com", "another guess"),
        ("admin@localhost", PASSWORD),
    ] {
        call(
            &app,
            &client,
            "sign_in",
            &[("email", email), ("password", password)],
        )
        .await;
    }
    let failed = audited(&app, "user.sign_in_failed").await;
    assert_eq!(failed.len(), 2, "{failed:?}");
    // A failure is the client's action: a typed email never poses as a user.
    for ((actor, detail), email) in failed.iter().zip(["admin@localhost", "nobody@example.com"]) {
        assert!(actor.starts_with("client:"), "{actor}");
        assert_eq!(detail["email"], email);
        assert_eq!(detail["client"], actor.trim_start_matches("client:"));
    }
    let signed_in = audited(&app, "user.sign_in").await;
    assert_eq!(signed_in.len(), 1, "{signed_in:?}");
    assert_eq!(signed_in[0].0, "user:admin@localhost");
    assert_nowhere_in_the_audit_log(&app, &[PASSWORD, "a wrong guess", "another guess"]).await;
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
async fn sign_in_attempts_are_rate_limited_per_email_and_client_with_a_clear_429() {
    let (app, _dir) = embedded_with_admin().await;
    let client = browser();
    for _ in 0..10 {
        let (status, body) = attempt(&app, &client, "admin@localhost", "guess").await;
        assert_eq!(status, 400, "{body}");
        assert!(
            body.to_string().contains("wrong email or password"),
            "{body}"
        );
    }
    let (status, body) = attempt(&app, &client, "admin@localhost", PASSWORD).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body.to_string()
            .contains("too many sign-in attempts for this email; try again in"),
        "even the right password waits: {body}"
    );
    // Another email is not affected.
    let (status, body) = attempt(&app, &client, "other@example.com", "x").await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.to_string().contains("wrong email or password"),
        "{body}"
    );
}

fn browser_at(address: [u8; 4]) -> reqwest::Client {
    browser_with(Some(address), None)
}

/// `count` clients at once, the i-th from `network` + i, each signing in with a new email and
/// a wrong password: their statuses, and how long the crowd took.
async fn crowd(app: &TestApp, network: [u8; 3], count: u8) -> (Vec<u16>, std::time::Duration) {
    let attempts = (0..count).map(|i| async move {
        let [a, b, c] = network;
        let client = browser_at([a, b, c, i + 1]);
        let email = format!("crowd{i}@example.com");
        call(
            app,
            &client,
            "sign_in",
            &[("email", email.as_str()), ("password", "guess")],
        )
        .await
        .0
    });
    let started = std::time::Instant::now();
    let statuses = futures::future::join_all(attempts).await;
    (statuses, started.elapsed())
}

/// A sign-in attempt that waits out the instance's own budget (10 a second, shared by every
/// client), so a test can count the per-client and per-email budgets alone.
async fn attempt(
    app: &TestApp,
    client: &reqwest::Client,
    email: &str,
    password: &str,
) -> (u16, Value) {
    for _ in 0..100 {
        let (status, _, body) = call(
            app,
            client,
            "sign_in",
            &[("email", email), ("password", password)],
        )
        .await;
        if status == 429 && body.to_string().contains("sign-ins on this instance") {
            tokio::time::sleep(std::time::Duration::from_millis(60)).await;
            continue;
        }
        return (status, body);
    }
    panic!("the instance's sign-in budget never refilled");
}

#[tokio::test]
async fn a_stranger_guessing_a_password_cannot_lock_its_owner_out() {
    let (app, _dir) = embedded_with_admin().await;
    let stranger = browser_at([127, 0, 0, 2]);
    let started = std::time::Instant::now();
    let mut refused = 0;
    for _ in 0..20 {
        let (status, body) = attempt(&app, &stranger, "admin@localhost", "guess").await;
        if status == 429 {
            assert!(body.to_string().contains("for this email"), "{body}");
            refused += 1;
        }
    }
    // Ten a minute, then one more every 6 s for as long as the stranger kept trying.
    let refilled = (started.elapsed().as_secs() / 6) as usize + 1;
    assert!(
        refused >= 10 - refilled.min(10) && refused <= 10,
        "the stranger's own budget runs out after 10: {refused} of 20 refused"
    );
    // The owner, from their own address, signs in at once.
    let owner = browser_at([127, 0, 0, 1]);
    let (status, body) = attempt(&app, &owner, "admin@localhost", PASSWORD).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["email"], "admin@localhost");
}

#[tokio::test]
async fn one_client_trying_many_emails_runs_out_of_its_own_budget() {
    let (app, _dir) = embedded_with_admin().await;
    let sprayer = browser_at([127, 0, 0, 3]);
    let started = std::time::Instant::now();
    let mut statuses = Vec::new();
    for i in 0..35 {
        let email = format!("user{i}@example.com");
        let (status, body) = attempt(&app, &sprayer, &email, "guess").await;
        if status == 429 {
            assert!(body.to_string().contains("from your address"), "{body}");
        }
        statuses.push(status);
    }
    // Thirty a minute, then one more every 2 s for as long as the sprayer kept trying.
    let refilled = (started.elapsed().as_secs() / 2) as usize + 1;
    let wrong = statuses.iter().filter(|s| **s == 400).count();
    assert!((30..=30 + refilled).contains(&wrong), "{statuses:?}");
    assert!(wrong < 35, "some were refused: {statuses:?}");
    assert_eq!(wrong + statuses.iter().filter(|s| **s == 429).count(), 35);
    // Another client is not affected.
    let other = browser_at([127, 0, 0, 4]);
    let (status, body) = attempt(&app, &other, "admin@localhost", PASSWORD).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_crowd_of_sign_ins_hashes_a_few_at_a_time_and_the_rest_are_told_to_retry() {
    let (app, _dir) = embedded_with_admin().await;
    // 60 clients at once, each from its own address, each with a new email: no per-client
    // or per-email budget stops them, only the instance's budget (10 a second) and the
    // hashers (at most half the cores at once, each waiting at most 2 s).
    let (statuses, took) = crowd(&app, [127, 0, 1], 60).await;
    let wrong = statuses.iter().filter(|s| **s == 400).count();
    let budget = statuses.iter().filter(|s| **s == 429).count();
    let busy = statuses.iter().filter(|s| **s == 503).count();
    assert_eq!(wrong + budget + busy, 60, "{statuses:?}");
    // The budget: 10 at once, then one more every 100 ms for as long as the crowd took.
    let allowed = 10 + (took.as_millis() / 100) as usize + 1;
    assert!(
        wrong <= allowed,
        "at most the instance's budget was hashed ({allowed} in {took:?}): {statuses:?}"
    );
    assert!(
        budget > 0,
        "the rest were refused before hashing: {statuses:?}"
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

#[tokio::test]
async fn a_supplied_bootstrap_password_is_never_handed_back_for_printing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::embedded(dir.path().to_path_buf());
    config.admin_password = Some("an operator's own password".into());
    let app = sluice::startup::Application::build(config).await.unwrap();
    // The account exists with the supplied password, and nothing is there to print.
    assert_eq!(app.bootstrap_password(), None);
    let users = sluice::store::users::list(&app.db()).await.unwrap();
    assert_eq!(users.len(), 1);
    assert!(
        sluice::passwords::verify(
            "an operator's own password".into(),
            Some(users[0].password_hash.clone())
        )
        .await
    );
}

#[tokio::test]
async fn the_status_names_the_version_only_to_signed_in_users() {
    let (app, _dir) = embedded_with_admin().await;
    let client = browser();
    let (status, _, anonymous) = call(&app, &client, "status", &[]).await;
    assert_eq!(status, 200, "{anonymous}");
    assert_eq!(anonymous["version"], Value::Null, "{anonymous}");
    let (status, _) = attempt(&app, &client, "admin@localhost", PASSWORD).await;
    assert_eq!(status, 200);
    let (_, _, signed_in) = call(&app, &client, "status", &[]).await;
    assert_eq!(
        signed_in["version"],
        env!("CARGO_PKG_VERSION"),
        "{signed_in}"
    );
}

/// The latest expiry of any stored session, in Unix milliseconds.
async fn latest_session_expiry(app: &TestApp) -> i64 {
    let sluice::store::Db::Sqlite(pool) = &app.db else {
        panic!("an embedded instance");
    };
    sqlx::query_scalar("SELECT MAX(expires_at) FROM sessions")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_session_expires_after_idleness_so_each_use_moves_its_expiry() {
    let (app, _dir) = embedded_with_admin().await;
    let client = browser();
    let (status, _) = attempt(&app, &client, "admin@localhost", PASSWORD).await;
    assert_eq!(status, 200);
    let at_sign_in = latest_session_expiry(&app).await;
    let hours = sluice::transport::router::SESSION_HOURS;
    let expected = sluice::store::now_ms() + hours * 3_600_000;
    assert!(
        (expected - at_sign_in).abs() < 60_000,
        "{at_sign_in} vs {expected}"
    );
    // Each later use pushes the expiry on (the clock moves at least a millisecond between
    // two requests; poll rather than sleep).
    let mut later = at_sign_in;
    for _ in 0..100 {
        let (_, _, me) = call(&app, &client, "me", &[]).await;
        assert_eq!(me["email"], "admin@localhost");
        later = latest_session_expiry(&app).await;
        if later > at_sign_in {
            break;
        }
    }
    assert!(
        later > at_sign_in,
        "the expiry moved with use: {at_sign_in} -> {later}"
    );
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_budget_and_others_cannot_spoof_one(
) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::embedded(dir.path().to_path_buf());
    config.admin_password = Some(PASSWORD.into());
    // The "proxy" is 127.0.0.1; 127.0.0.2 is a client reaching the server directly.
    config.trusted_proxies = vec!["127.0.0.1".into()];
    let app = crate::helpers::spawn_app(config).await;
    // A stranger behind the proxy spends its own budget for the email...
    let stranger = browser_with(Some([127, 0, 0, 1]), Some("203.0.113.7"));
    let mut refused = 0;
    for _ in 0..12 {
        let (status, _) = attempt(&app, &stranger, "admin@localhost", "guess").await;
        refused += usize::from(status == 429);
    }
    assert!(refused >= 1, "the stranger ran out of its own budget");
    // ... a client that is not a trusted proxy claims to be the owner: its header is ignored,
    // so it spends its own (127.0.0.2's) budget, not the owner's ...
    let spoofer = browser_with(Some([127, 0, 0, 2]), Some("198.51.100.9"));
    for _ in 0..12 {
        attempt(&app, &spoofer, "admin@localhost", "guess").await;
    }
    // ... and the owner, behind the same proxy, signs in at once.
    let owner = browser_with(Some([127, 0, 0, 1]), Some("198.51.100.9"));
    let (status, body) = attempt(&app, &owner, "admin@localhost", PASSWORD).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn a_bad_trusted_proxy_stops_start_up_and_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::embedded(dir.path().to_path_buf());
    config.trusted_proxies = vec!["10.0.0.0/40".into()];
    let Err(error) = sluice::startup::Application::build(config).await else {
        panic!("start-up refuses a prefix longer than 32 bits");
    };
    let error = error.to_string();
    assert!(
        error.contains("SLUICE_TRUSTED_PROXIES") && error.contains("10.0.0.0/40"),
        "{error}"
    );
}

#[tokio::test]
async fn the_instances_sign_in_rate_is_a_setting() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::embedded(dir.path().to_path_buf());
    config.admin_password = Some(PASSWORD.into());
    config.sign_in_rate = 2;
    let app = crate::helpers::spawn_app(config).await;
    let (statuses, took) = crowd(&app, [127, 0, 3], 12).await;
    // Two at once, then one more every 500 ms for as long as the crowd took.
    let allowed = 2 + (took.as_millis() / 500) as usize + 1;
    let hashed = statuses.iter().filter(|s| **s == 400).count();
    assert!(
        hashed <= allowed,
        "{hashed} hashed, {allowed} allowed: {statuses:?}"
    );
    assert_eq!(hashed + statuses.iter().filter(|s| **s == 429).count(), 12);
}

#[tokio::test]
async fn a_flood_of_refused_sign_ins_is_held_so_each_client_makes_at_most_two_a_second() {
    let (app, _dir) = embedded_with_admin().await;
    let hold = sluice::transport::console::REFUSAL_HOLD;
    // 20 clients, each from its own address with a new email every attempt, each sending its
    // next attempt as soon as the last is answered.
    let flood = std::time::Duration::from_secs(2);
    let started = std::time::Instant::now();
    let app = &app;
    let clients = (0..20_u8).map(|i| async move {
        let client = browser_at([127, 0, 4, i + 1]);
        let mut answers = Vec::new();
        let mut n = 0;
        while started.elapsed() < flood {
            n += 1;
            let email = format!("flood{i}-{n}@example.com");
            let sent = std::time::Instant::now();
            let (status, _, body) = call(
                app,
                &client,
                "sign_in",
                &[("email", email.as_str()), ("password", "guess")],
            )
            .await;
            answers.push((status, sent.elapsed(), body));
        }
        answers
    });
    let answers: Vec<_> = futures::future::join_all(clients)
        .await
        .into_iter()
        .flatten()
        .collect();
    let refused: Vec<_> = answers.iter().filter(|(s, _, _)| *s == 429).collect();
    assert!(
        !refused.is_empty(),
        "the instance's budget refused some: {} answers",
        answers.len()
    );
    for (_, took, body) in &refused {
        assert!(*took >= hold, "a refusal answered after {took:?}: {body}");
        assert!(body.to_string().contains("try again in"), "{body}");
    }
    // Unheld, a closed loop of 20 is refused thousands of times in 2 s; held, each client is
    // refused at most once per hold.
    let took = started.elapsed();
    let bound = 20 * (took.as_millis() / hold.as_millis() + 1) as usize;
    assert!(
        refused.len() <= bound,
        "{} refusals in {took:?} (at most {bound}) of {} attempts",
        refused.len(),
        answers.len()
    );
}

/// A browser that names itself `agent` in its `User-Agent`.
fn browser_named(agent: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("sec-fetch-site", "same-origin".parse().unwrap());
    reqwest::Client::builder()
        .cookie_store(true)
        .default_headers(headers)
        .user_agent(agent)
        .build()
        .unwrap()
}

/// A JSON server function's answer.
async fn call_json(app: &TestApp, client: &reqwest::Client, endpoint: &str) -> (u16, Value) {
    let response = client
        .post(app.url(&format!("/api/{endpoint}")))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = serde_json::from_str(&response.text().await.unwrap()).unwrap_or(Value::Null);
    (status, body)
}

#[tokio::test]
async fn everyone_lists_their_sessions_with_their_clients_and_signs_out_the_others() {
    let (app, _dir) = embedded_with_admin().await;
    let laptop = browser_named("Laptop Browser/1.0");
    let phone = browser_named("Phone Browser/2.0");
    for client in [&laptop, &phone] {
        let (status, _, body) = call(
            &app,
            client,
            "sign_in",
            &[("email", "admin@localhost"), ("password", PASSWORD)],
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let before = sluice::store::now_ms();

    // Each sees both, its own marked, with when and from where each began.
    let (status, listed) = call_json(&app, &laptop, "account/sessions").await;
    assert_eq!(status, 200, "{listed}");
    let sessions = listed.as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{listed}");
    let current: Vec<&Value> = sessions.iter().filter(|s| s["current"] == true).collect();
    assert_eq!(current.len(), 1, "{listed}");
    assert!(
        current[0]["client"]
            .as_str()
            .unwrap()
            .ends_with(", Laptop Browser/1.0"),
        "{listed}"
    );
    let other = sessions.iter().find(|s| s["current"] == false).unwrap();
    // An operator key reads the same list over the admin API, as its document says.
    let op = app.operator_key().await;
    let (_, _, users) = app.call("GET", "/v1/admin/users", Some(&op), None).await;
    let id = users[0]["id"].as_str().unwrap().to_owned();
    let (status, _, over_rest) = app
        .call(
            "GET",
            &format!("/v1/admin/users/{id}/sessions"),
            Some(&op),
            None,
        )
        .await;
    assert_eq!(status, 200, "{over_rest}");
    let (_, _, doc) = app.call("GET", "/v1/openapi.json", None, None).await;
    for session in over_rest.as_array().unwrap() {
        crate::admin_service::assert_matches_schema(&doc, "Session", session);
        assert_eq!(session["current"], false, "a key has no session");
    }
    let mut clients: Vec<&str> = over_rest
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["client"].as_str().unwrap())
        .collect();
    clients.sort_unstable();
    assert!(
        clients.len() == 2 && clients[0].ends_with("Laptop Browser/1.0"),
        "{over_rest}"
    );
    assert!(
        other["client"]
            .as_str()
            .unwrap()
            .ends_with(", Phone Browser/2.0"),
        "{listed}"
    );
    for s in sessions {
        let began = s["created_at"].as_i64().unwrap();
        let seen = s["last_seen_at"].as_i64().unwrap();
        assert!(began <= before && began <= seen, "{s}");
        assert!(s["expires_at"].as_i64().unwrap() > before, "{s}");
    }
    // Using a session moves its "last used" (once the clock has moved on a millisecond).
    let phone_seen = other["last_seen_at"].as_i64().unwrap();
    let mut phone_now = phone_seen;
    for _ in 0..100 {
        assert_eq!(call(&app, &phone, "me", &[]).await.0, 200);
        let (_, listed) = call_json(&app, &laptop, "account/sessions").await;
        phone_now = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["current"] == false)
            .unwrap()["last_seen_at"]
            .as_i64()
            .unwrap();
        if phone_now > phone_seen {
            break;
        }
    }
    assert!(phone_now > phone_seen, "{phone_now} after {phone_seen}");

    // Signing out the others ends the phone's session at once and keeps this one.
    let (status, ended) = call_json(&app, &laptop, "account/sign_out_others").await;
    assert_eq!((status, ended), (200, serde_json::json!(1)));
    assert_eq!(call(&app, &phone, "me", &[]).await.2, Value::Null);
    assert_eq!(
        call(&app, &laptop, "me", &[]).await.2["email"],
        "admin@localhost"
    );
    let (_, listed) = call_json(&app, &laptop, "account/sessions").await;
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["current"], true);

    // Audited as the user's own action; without a session there is nothing to list.
    let audited = audited(&app, "user.sign_out_others").await;
    assert_eq!(audited.len(), 1, "{audited:?}");
    assert_eq!(audited[0].0, "user:admin@localhost");
    assert_eq!(audited[0].1["sessions_ended"], 1);
    let (status, _) = call_json(&app, &browser(), "account/sessions").await;
    assert_eq!(status, 401);
}
