//! Serving the router over TCP (HTTP/1.1) with limits a public port needs, so that slow
//! or idle clients cannot hold the server's connections or file descriptors:
//!
//! - **header read**: a request's head must arrive within [`Limits::header_read`] of the
//!   server starting to wait for it (hyper's timer). The wait for the next request on a
//!   kept-alive connection counts too, so this also bounds idle keep-alive connections.
//! - **body**: a request's whole body must arrive within [`Limits::body`] of its head
//!   (408, and the connection is closed).
//! - **idle**: a connection on which no handler is running and no byte moved either way
//!   for [`Limits::idle`] is closed (a client that stopped reading its answer, say). A
//!   handler that is waiting (`Prefer: wait`) is not idle.
//! - **connections**: at most [`Limits::max_connections`] at once; more wait in the
//!   listen backlog (and cost no descriptor) until one closes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::ServiceExt;

/// The transport's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time for a request's head to arrive (default 10 s).
    pub header_read: Duration,
    /// Time for a request's whole body to arrive, from its head (default 30 s).
    pub body: Duration,
    /// Time a connection may sit with no request running and no traffic (default 60 s).
    pub idle: Duration,
    /// Connections served at once (default 512).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read: Duration::from_secs(10),
            body: Duration::from_secs(30),
            idle: Duration::from_secs(60),
            max_connections: 512,
        }
    }
}

/// The body of a request did not arrive within [`Limits::body`].
#[derive(Debug, thiserror::Error)]
#[error("the body did not arrive within {0:?}")]
pub struct BodyTimedOut(pub Duration);

/// Serve `router` on `listener` with `limits` until the future is dropped (which closes
/// every connection it serves).
pub async fn serve(listener: TcpListener, router: Router, limits: Limits) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = JoinSet::new();
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => permit.map_err(io::Error::other)?,
            // Reap finished connections while waiting for a slot.
            Some(_) = connections.join_next() => continue,
        };
        let stream = loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => break stream,
                    Err(e) => {
                        // Out of descriptors or a connection reset before it was accepted:
                        // nothing to await, so back off briefly instead of spinning.
                        tracing::warn!(error = %e, "accept");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                Some(_) = connections.join_next() => {}
            }
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        connections.spawn(async move {
            serve_connection(stream, router, limits).await;
            drop(permit);
        });
    }
}

async fn serve_connection(stream: tokio::net::TcpStream, router: Router, limits: Limits) {
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked {
        io: stream,
        activity: activity.clone(),
    });
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |request: http::Request<Incoming>| {
            let router = router.clone();
            let busy = Busy::new(activity.clone());
            async move {
                let request = request.map(|body| {
                    axum::body::Body::new(DeadlineBody {
                        inner: body,
                        deadline: Box::pin(tokio::time::sleep(limits.body)),
                        limit: limits.body,
                    })
                });
                let response = router.oneshot(request).await;
                drop(busy);
                response
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read)
        .keep_alive(true);
    let connection = builder.serve_connection(io, service);
    tokio::select! {
        result = connection => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection closed");
            }
        }
        () = activity.idle_for(limits.idle) => {
            tracing::debug!("idle connection closed");
        }
    }
}

/// When a connection last moved a byte, and how many of its requests are being handled.
struct Activity {
    epoch: Instant,
    last_ms: AtomicU64,
    busy: AtomicUsize,
}

impl Activity {
    fn new() -> Self {
        Activity {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let now = self.epoch.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(now, Ordering::Relaxed);
    }

    /// Resolves once nothing moved and no handler ran for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let quiet = self.epoch.elapsed().saturating_sub(last);
            if quiet < idle {
                tokio::time::sleep(idle - quiet).await;
            } else if self.busy.load(Ordering::Relaxed) == 0 {
                return;
            } else {
                // A handler is running; when it ends it touches the clock.
                tokio::time::sleep(idle).await;
            }
        }
    }
}

/// A handler is running on the connection (it is not idle) while this lives.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(activity: Arc<Activity>) -> Self {
        activity.busy.fetch_add(1, Ordering::Relaxed);
        activity.touch();
        Busy(activity)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The socket, noting every byte that moves on it.
struct Tracked {
    io: tokio::net::TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.touch();
        }
        poll
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write(cx, buf);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        poll
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            this.activity.touch();
        }
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// A request body that fails with [`BodyTimedOut`] once its deadline passes.
struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    limit: Duration,
}

impl Body for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.limit)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
