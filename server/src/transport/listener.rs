//! The HTTP listener: accepts connections and serves the router on each, with the limits a
//! hostile client meets first (see `docs/SECURITY.md`):
//!
//! - a **header timeout**: a request head must arrive whole within it, counted from the
//!   connection's start or from the end of its previous response, so a client that trickles
//!   its headers (or keeps an idle keep-alive connection) is closed;
//! - an **idle timeout**: a connection that moves no byte either way for that long is closed,
//!   even mid-request (a body that stalls, a response nobody reads);
//! - a **connection cap**: past it, a new connection is answered `503` with `Retry-After: 1`
//!   and closed at once, so the instance never holds more sockets than it was sized for.
//!
//! Every request carries its client's address as [`ClientIp`] (the peer, or through trusted
//! proxies the address they forwarded), for the per-client sign-in budget. Stopping closes
//! the listener, lets requests in flight finish, and returns.
//!
//! `POST /v1/check` is the one hot route: when the listener is given the application's state,
//! it hands such a request straight to [`check::check`], the router's own handler for it,
//! before the router (whose route lookup, request extensions and layers of futures cost a
//! check about a tenth of its instructions; docs/BENCHMARKS.md). Every other request, `/v1/check`
//! with another method included, goes through the router.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::Router;

use super::check;
use super::client_ip::{ClientIp, TrustedProxies};
use super::state::AppState;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tower::ServiceExt as _;

/// What one listener allows a connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// The longest a request head may take, from the connection's start or its last response.
    pub header_timeout: Duration,
    /// The longest a connection may move no byte at all.
    pub idle_timeout: Duration,
    /// The most connections open at once.
    pub max_connections: usize,
}

/// What a connection past the cap is told before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: 52\r\n\r\ntoo many connections to this instance; retry shortly";

/// Serves `router` on `listener` until `stop` completes, then waits for requests in flight.
/// With `checks`, `POST /v1/check` goes straight to its handler (see the module's header).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    checks: Option<AppState>,
    limits: ConnectionLimits,
    proxies: TrustedProxies,
    stop: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors or a connection reset before it was accepted: the
                    // listener itself is fine, so keep accepting after a breath.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            tokio::spawn(refuse(stream));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let io = TokioIo::new(Watched {
            inner: stream,
            activity: Arc::clone(&activity),
        });
        let proxies = proxies.clone();
        let router = router.clone();
        let checks = checks.clone();
        let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
            // The state is cloned (one pointer) only for a check, not for every request.
            let shortcut = if is_check(&request) {
                checks.clone()
            } else {
                None
            };
            let client = shortcut
                .is_none()
                .then(|| proxies.client(peer.ip(), request.headers()));
            let router = router.clone();
            async move {
                let mut request = request.map(Body::new);
                match (shortcut, client) {
                    (Some(state), _) => Ok(check::check(State(state), request).await),
                    (None, client) => {
                        if let Some(client) = client {
                            request.extensions_mut().insert(ClientIp(client));
                        }
                        router.oneshot(request).await
                    }
                }
            }
        });
        let connection = graceful.watch(
            builder
                .serve_connection_with_upgrades(io, service)
                .into_owned(),
        );
        let idle_timeout = limits.idle_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                served = connection => {
                    if let Err(e) = served {
                        tracing::debug!(error = %e, %peer, "connection ended with an error");
                    }
                }
                () = activity.idle_for(idle_timeout) => {
                    tracing::debug!(%peer, "closing an idle connection");
                }
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// A request the check's handler takes without the router: `POST /v1/check`, as the router
/// matches it (the path alone, whatever the query).
fn is_check(request: &Request<hyper::body::Incoming>) -> bool {
    request.method() == Method::POST && request.uri().path() == "/v1/check"
}

/// Tells a connection past the cap to come back, and closes it (within a second, whatever
/// the client does).
async fn refuse(mut stream: TcpStream) {
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(BUSY).await?;
        stream.shutdown().await
    })
    .await;
}

/// When a connection last moved a byte, in milliseconds since it was accepted.
#[derive(Debug)]
struct Activity {
    started: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(now, Ordering::Relaxed);
    }

    /// Completes once no byte has moved for `timeout`.
    async fn idle_for(&self, timeout: Duration) {
        loop {
            let last = self.started + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = last + timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A socket that records its activity.
#[derive(Debug)]
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
