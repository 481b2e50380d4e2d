//! Hostile clients: slow and idle connections, too many connections, cross-site calls of the
//! console's server functions, and the headers every response carries.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::{
    browser, embedded_config, embedded_with_operator, spawn_app, spawn_app_keeping, TestApp,
};

/// The longest any test here waits for the server to act; the limits under test are far
/// shorter, so reaching this means the server never acted.
const PATIENCE: Duration = Duration::from_secs(15);

/// Reads until the server closes the connection; returns what it sent. Panics if it is still
/// open after [`PATIENCE`].
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buffer = [0_u8; 4096];
    loop {
        match tokio::time::timeout(PATIENCE, stream.read(&mut buffer)).await {
            Ok(Ok(0) | Err(_)) => return String::from_utf8_lossy(&received).into_owned(),
            Ok(Ok(n)) => received.extend_from_slice(&buffer[..n]),
            Err(_) => panic!(
                "the server kept the connection open for {PATIENCE:?}; it sent {:?}",
                String::from_utf8_lossy(&received)
            ),
        }
    }
}

async fn limited(header_ms: u64, idle_ms: u64, max_connections: usize) -> TestApp {
    let (mut config, dir) = embedded_config();
    config.header_timeout_ms = header_ms;
    config.idle_timeout_ms = idle_ms;
    config.max_connections = max_connections;
    spawn_app_keeping(config, Some(dir)).await
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_closed() {
    let app = limited(300, 60_000, 100).await;
    let mut stream = TcpStream::connect(app.address).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: sluice\r\nx-slow: ")
        .await
        .unwrap();
    let sent = read_until_closed(&mut stream).await;
    assert!(!sent.contains("200 OK"), "{sent}");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let app = limited(300, 60_000, 100).await;
    let mut stream = TcpStream::connect(app.address).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: sluice\r\n\r\n")
        .await
        .unwrap();
    // The answer comes, and then, with no next request, the close.
    let sent = read_until_closed(&mut stream).await;
    assert!(sent.starts_with("HTTP/1.1 200 OK"), "{sent}");
}

#[tokio::test]
async fn a_stalled_body_is_closed_after_the_idle_timeout() {
    let app = limited(60_000, 300, 100).await;
    let mut stream = TcpStream::connect(app.address).await.unwrap();
    stream
        .write_all(
            b"POST /v1/check HTTP/1.1\r\nhost: sluice\r\ncontent-type: application/json\r\n\
              content-length: 100\r\n\r\n{\"route\":",
        )
        .await
        .unwrap();
    let sent = read_until_closed(&mut stream).await;
    assert!(!sent.contains("200 OK"), "{sent}");
}

#[tokio::test]
async fn past_the_connection_cap_a_client_is_told_to_retry_and_gets_in_once_one_closes() {
    let app = limited(60_000, 60_000, 2).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(app.address).await.unwrap();
        // A whole request and its answer: the connection is surely accepted and counted.
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: sluice\r\n\r\n")
            .await
            .unwrap();
        let mut buffer = [0_u8; 1024];
        let n = stream.read(&mut buffer).await.unwrap();
        assert!(buffer[..n].starts_with(b"HTTP/1.1 200 OK"));
        held.push(stream);
    }
    let mut third = TcpStream::connect(app.address).await.unwrap();
    let refused = read_until_closed(&mut third).await;
    assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    assert!(refused.contains("retry-after: 1"), "{refused}");

    drop(held.pop());
    let mut answered = false;
    for _ in 0..200 {
        if let Ok(response) = app.client.get(app.url("/healthz")).send().await {
            if response.status() == 200 {
                answered = true;
                break;
            }
        }
        tokio::task::yield_now().await;
    }
    assert!(answered, "a place freed up once a connection closed");
}

#[tokio::test]
async fn every_response_says_how_a_browser_may_use_it() {
    let (app, _dir) = embedded_with_operator("operator password here").await;
    for path in [
        "/",
        "/sign-in",
        "/healthz",
        "/v1/openapi.json",
        "/no-such-page",
    ] {
        let response = app.get(path).await;
        let headers = response.headers();
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{path}: {csp}");
        assert!(csp.contains("object-src 'none'"), "{path}: {csp}");
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["referrer-policy"], "same-origin", "{path}");
        assert_eq!(headers["x-frame-options"], "DENY", "{path}");
    }
}

#[tokio::test]
async fn a_server_function_called_from_another_site_is_refused_before_it_runs() {
    let (app, _dir) = embedded_with_operator("operator password here").await;
    let form = [
        ("email", "admin@localhost"),
        ("password", "operator password here"),
    ];
    // A page elsewhere posting the sign-in form: refused, no session.
    let plain = reqwest::Client::new();
    let foreign = plain
        .post(app.url("/api/sign_in"))
        .header("origin", "https://evil.example")
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    assert!(foreign.headers().get("set-cookie").is_none());
    // No Origin and no fetch metadata at all: refused too.
    let bare = plain
        .post(app.url("/api/sign_in"))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 403);
    // A text/plain body, which a foreign form may send without a preflight: refused even
    // with a same-origin claim.
    let text = browser()
        .post(app.url("/api/sign_in"))
        .header("content-type", "text/plain")
        .body("email=admin@localhost&password=operator password here")
        .send()
        .await
        .unwrap();
    assert_eq!(text.status(), 415);
    // The console's own page: an Origin naming this host.
    let own = plain
        .post(app.url("/api/sign_in"))
        .header("origin", format!("http://{}", app.address))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(own.status(), 200, "{}", own.text().await.unwrap());
}

#[tokio::test]
async fn over_https_the_session_cookie_is_host_only_and_secure() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = sluice::config::Config::embedded(dir.path().to_path_buf());
    config.admin_password = Some("operator password here".into());
    config.secure_cookies = true;
    let app = spawn_app(config).await;
    let response = browser()
        .post(app.url("/api/sign_in"))
        .form(&[
            ("email", "admin@localhost"),
            ("password", "operator password here"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(cookie.starts_with("__Host-sluice_session="), "{cookie}");
    assert!(cookie.contains("Secure"), "{cookie}");
    assert!(cookie.contains("Path=/"), "{cookie}");
    assert!(!cookie.contains("Domain"), "{cookie}");
}
