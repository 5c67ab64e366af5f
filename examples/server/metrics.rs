//! `GET /metrics`: the limiter's counters and store latency histogram (the names are in
//! `tiered_ratelimit::observe`) in the Prometheus text format, for a Prometheus to scrape.

use std::time::Duration;

use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use tiered_ratelimit::observe::STORE_DURATION_SECONDS;

/// Upper bounds of the store latency buckets, in seconds: a Redis on the same host answers in
/// 50 to 500 µs, one across a network in a few ms, and the fallback waits 100 ms by default
/// (`--redis-timeout`, up to 60 s). Without buckets the exporter would render a summary, which
/// cannot be summed over instances.
const STORE_BUCKETS: [f64; 14] = [
    0.000_05, 0.000_1, 0.000_2, 0.000_3, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 1.0,
];

/// The Prometheus text format, version 0.0.4 (what Prometheus asks for in its `Accept`).
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often the recorder's histograms are trimmed when nobody scrapes.
const UPKEEP: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder as the process's `metrics` recorder. Call it before the
/// limiter's first check: its decision counters bind to the recorder there, once.
pub(crate) fn install() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(STORE_DURATION_SECONDS.into()), &STORE_BUCKETS)?
        .install_recorder()?;
    // No exporter task runs (no HTTP listener of its own): the upkeep is ours to do.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPKEEP);
        loop {
            every.tick().await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// `GET /metrics`, outside the rate limit layer: a scrape is never limited and is not a check.
pub(crate) fn route(handle: PrometheusHandle) -> Router {
    let render = move || {
        let text = handle.render();
        async move { ([(CONTENT_TYPE, TEXT_FORMAT)], text) }
    };
    Router::new().route("/metrics", get(render))
}
