//! `GET /metrics` over TCP, at `daemon.metrics_address`.
//!
//! The admin socket checks every peer's credentials; a Prometheus server
//! scrapes over the network and has no such credentials. This listener
//! serves the metrics and nothing else (every other path is 404, every
//! other method 405): the metrics carry counts, sizes and the names of
//! providers, reasons and NUMA nodes, never a pod, a manifest or a cgroup.
//! Bind it to a loopback or node-internal address; it has no
//! authentication of its own.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tracing::info;

use super::listener::Limits;
use super::metrics::Metrics;

/// The content type of the exposition ([`Metrics::render`]).
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The answer to `GET /metrics`, on the socket and on TCP.
pub(crate) fn response(metrics: &Metrics) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.render()).into_response()
}

/// Why the metrics listener could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen for metrics on {address} (daemon.metrics_address): {cause}; choose a free address or remove the key")]
pub struct BindError {
    /// The configured address.
    pub address: SocketAddr,
    /// The error.
    pub cause: std::io::Error,
}

/// Bind `address` (before readiness is announced, so a bad address stops
/// the start with an error).
pub(crate) async fn bind(address: SocketAddr) -> Result<TcpListener, BindError> {
    TcpListener::bind(address)
        .await
        .map_err(|cause| BindError { address, cause })
}

/// The router of the TCP listener: `GET /metrics` only.
pub(crate) fn router(metrics: Arc<Metrics>) -> Router {
    async fn scrape(State(metrics): State<Arc<Metrics>>) -> Response {
        response(&metrics)
    }
    Router::new()
        .route("/metrics", get(scrape))
        .with_state(metrics)
}

/// Serve the metrics on `listener` within `limits` until `shutdown`
/// completes.
pub(crate) async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let address = listener.local_addr()?;
    let listener = &listener;
    let accept = move || async move {
        let (stream, peer) = listener.accept().await?;
        Ok((stream, peer, super::listener::PeerKey::Address(peer.ip())))
    };
    let router = router(metrics).layer(axum::middleware::from_fn(super::listener::body_deadline));
    super::listener::serve("metrics", limits, accept, router, shutdown).await;
    info!(%address, "stopped serving metrics");
    Ok(())
}
