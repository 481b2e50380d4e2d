//! Console work on threads of its own, so it cannot queue ahead of `/v1/check`.
//!
//! Every request reaches the server's tokio workers first. A check is answered there; every
//! other request (the console's pages and server functions, sign-in, `/v1/admin`, the
//! dashboards' streams, `/metrics`, an unknown path) is handed to the console runtime: a few
//! worker threads of their own at a lower CPU priority (nice 10), so a burst of console work
//! waits behind the checks instead of the checks waiting behind it, while the console still
//! gets its share of a saturated machine (a nice-10 thread has about a ninth of a normal
//! one's weight). `/healthz` and `/readyz` stay beside the checks: a probe must not wait for
//! the console. The sign-in benchmark (`docs/SECURITY.md`) measures the difference.
//!
//! A response whose body is produced as it is sent (a page rendered in pieces, the
//! dashboards' events) is produced there too: a console task pulls it and hands the pieces
//! over. A request handed over is cancelled when its connection goes, as it was before: the
//! handover aborts the console task when the server stops waiting for it, and a body's task
//! ends when the connection stops reading.

use axum::body::{Body, Bytes, HttpBody as _};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt as _;
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

/// The console runtime. It stops when dropped, without waiting for its tasks.
#[derive(Debug)]
pub struct ConsoleRuntime {
    runtime: Option<Runtime>,
}

impl ConsoleRuntime {
    /// `threads` worker threads (at least 1), named `sluice-console`, at nice 10.
    pub fn start(threads: usize) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("sluice-console")
            .on_thread_start(lower_priority)
            .enable_all()
            .build()?;
        Ok(Self {
            runtime: Some(runtime),
        })
    }

    /// Where console work is spawned.
    pub fn handle(&self) -> Handle {
        match &self.runtime {
            Some(runtime) => runtime.handle().clone(),
            None => unreachable!("the runtime is only taken when dropped"),
        }
    }
}

impl Drop for ConsoleRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Nice 10 for the calling thread (Linux sets it per thread), unless the server already runs
/// at nice 10 or lower priority: then the thread keeps that, never rising above the checks.
/// If the system refuses, the thread keeps the normal priority and says so: the console still
/// works, only without the check path's precedence.
fn lower_priority() {
    use thread_priority::{set_current_thread_priority, ThreadPriority, ThreadPriorityValue};
    if current_nice().is_some_and(|nice| nice >= 10) {
        return;
    }
    // The crate maps 0..=99 onto nice 19..=-20, rounding down: 22 is nice 10 (a test holds it).
    let result = ThreadPriorityValue::try_from(22_u8)
        .map_err(|e| format!("{e:?}"))
        .and_then(|v| {
            set_current_thread_priority(ThreadPriority::Crossplatform(v))
                .map_err(|e| format!("{e:?}"))
        });
    if let Err(e) = result {
        tracing::warn!(
            error = %e,
            "cannot lower the console threads' priority; console work competes with checks"
        );
    }
}

/// The calling thread's nice value, from `/proc/thread-self/stat` (field 19; the command may
/// hold spaces, so fields are counted from the closing parenthesis); `None` elsewhere.
fn current_nice() -> Option<i32> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(16)?.parse().ok()
}

/// Whether a path is answered on the server's own workers rather than handed to the console.
pub fn stays_on_the_check_path(path: &str) -> bool {
    matches!(path, "/v1/check" | "/healthz" | "/readyz")
}

/// The middleware: checks and probes go on; everything else runs on the console runtime.
pub async fn hand_over(State(console): State<Handle>, request: Request, next: Next) -> Response {
    if stays_on_the_check_path(request.uri().path()) {
        return next.run(request).await;
    }
    let task = AbortOnDrop(console.spawn(async move { produced_here(next.run(request).await) }));
    match task.finish().await {
        Ok(response) => response,
        Err(e) if e.is_panic() => {
            tracing::error!(error = %e, "a console request panicked");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
        // The console runtime is stopping with the server.
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

/// `response`, its body (unless already whole) pulled by a task of the current runtime.
fn produced_here(response: Response) -> Response {
    if response.body().size_hint().exact().is_some() {
        return response;
    }
    let (parts, body) = response.into_parts();
    let (pieces, received) = tokio::sync::mpsc::channel::<Result<Bytes, axum::Error>>(8);
    tokio::spawn(async move {
        let mut body = body.into_data_stream();
        loop {
            let piece = tokio::select! {
                // The connection went: stop producing (a dashboard stream waits for minutes).
                () = pieces.closed() => break,
                piece = body.next() => piece,
            };
            let Some(piece) = piece else { break };
            let failed = piece.is_err();
            if pieces.send(piece).await.is_err() || failed {
                break;
            }
        }
    });
    let body = futures::stream::unfold(received, |mut received| async move {
        received.recv().await.map(|piece| (piece, received))
    });
    Response::from_parts(parts, Body::from_stream(body))
}

/// A spawned task that is aborted if nobody waits for it any more (the connection went).
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    async fn finish(mut self) -> Result<T, tokio::task::JoinError> {
        (&mut self.0).await
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::{get, post};
    use axum::Router;
    use tower::ServiceExt;

    /// The name of the thread a handler ran on.
    async fn thread_name() -> String {
        std::thread::current().name().unwrap_or("").to_owned()
    }

    /// A body produced piece by piece, whose one piece names the thread that produced it.
    async fn streamed_thread_name() -> Body {
        Body::from_stream(futures::stream::once(async {
            Ok::<_, std::convert::Infallible>(thread_name().await)
        }))
    }

    fn router(console: &ConsoleRuntime) -> Router {
        Router::new()
            .route("/v1/check", post(thread_name))
            .route("/page", get(streamed_thread_name))
            .route("/healthz", get(thread_name))
            .route("/api/sign_in", post(thread_name))
            .fallback(thread_name)
            .layer(axum::middleware::from_fn_with_state(
                console.handle(),
                hand_over,
            ))
    }

    async fn ran_on(router: &Router, method: &str, path: &str) -> String {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let response = router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn console_requests_run_on_the_console_threads_and_checks_do_not() {
        let console = ConsoleRuntime::start(1).unwrap();
        let router = router(&console);
        assert_eq!(
            ran_on(&router, "POST", "/api/sign_in").await,
            "sluice-console"
        );
        assert_eq!(ran_on(&router, "GET", "/anything").await, "sluice-console");
        assert_eq!(ran_on(&router, "GET", "/page").await, "sluice-console");
        assert_ne!(ran_on(&router, "POST", "/v1/check").await, "sluice-console");
        assert_ne!(ran_on(&router, "GET", "/healthz").await, "sluice-console");
    }

    /// The console threads' priority: nice 10, between a normal thread (0) and the password
    /// hashers' idle class.
    const CONSOLE_NICE: i32 = 10;

    #[cfg(target_os = "linux")]
    #[test]
    fn the_console_threads_run_at_nice_10() {
        let caller = current_nice().unwrap();
        let console = ConsoleRuntime::start(1).unwrap();
        let on_console = console
            .handle()
            .block_on(async { tokio::spawn(async { current_nice() }).await.unwrap() });
        // Under a server already at nice 10 or more, the console keeps the server's.
        assert_eq!(on_console, Some(CONSOLE_NICE.max(caller)));
        assert_eq!(
            current_nice(),
            Some(caller),
            "the caller's own priority is untouched"
        );
    }

    #[tokio::test]
    async fn a_request_whose_client_went_is_cancelled_on_the_console_too() {
        let console = ConsoleRuntime::start(1).unwrap();
        let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
        let (ended_tx, ended) = tokio::sync::oneshot::channel::<()>();
        let started_tx = std::sync::Arc::new(std::sync::Mutex::new(Some(started_tx)));
        let ended_tx = std::sync::Arc::new(std::sync::Mutex::new(Some(ended_tx)));
        let handler = move || {
            let started = started_tx.lock().unwrap().take();
            let ended = ended_tx.lock().unwrap().take();
            async move {
                // Dropped when the task is aborted: the receiver sees the sender go.
                let _ended = ended;
                if let Some(started) = started {
                    let _ = started.send(());
                }
                std::future::pending::<()>().await;
            }
        };
        let router =
            Router::new()
                .route("/slow", get(handler))
                .layer(axum::middleware::from_fn_with_state(
                    console.handle(),
                    hand_over,
                ));
        let request = Request::builder().uri("/slow").body(Body::empty()).unwrap();
        let waiting = tokio::spawn(router.oneshot(request));
        started.await.unwrap();
        waiting.abort();
        // The sender was dropped without sending: the console task ended.
        assert!(ended.await.is_err());
    }
}
