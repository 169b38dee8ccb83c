//! The accept loop: HTTP/1.1 connections served by hyper with what `axum::serve` leaves out —
//! a deadline for a request's head (a client that sends half a header is cut off), a cap on
//! open connections (beyond it new ones wait in the kernel's backlog), and a shutdown whose
//! wait for open connections is bounded (a slow client cannot keep the process alive).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

/// Connection limits.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// From the connection's first byte (or the end of the previous request) to the end of a
    /// request's head.
    pub header_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// After shutdown starts, how long open connections get to finish their request.
    pub close_grace: Duration,
    /// For reading a request's body, once its head is in ([`BodyTimeout`]).
    pub body_timeout: Duration,
}

/// The body deadline, carried to the handlers as a request extension (they read bodies).
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeout(pub Duration);

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            max_connections: 1024,
            close_grace: Duration::from_secs(2),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves; then every connection is told to finish
/// its request and close, and this returns once they have, or after `close_grace`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let app = app.layer(axum::Extension(BodyTimeout(limits.body_timeout)));
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            _ = &mut shutdown => break,
        };
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                // Out of file descriptors and the like: back off rather than spin.
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut builder = http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service).with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    return;
                }
                _ = stop.wait_for(|s| *s) => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
    }
    let _ = stop_tx.send(true);
    // Every permit back means every connection task has ended.
    let all = limits.max_connections.max(1) as u32;
    let _ = tokio::time::timeout(limits.close_grace, slots.acquire_many(all)).await;
    Ok(())
}
