//! The server of `benches/http.sh`: an axum hello-world (`GET /` answers `hello`) served bare,
//! behind our `RateLimitLayer`, or behind `tower_governor`, with limits never reached.
//!
//! ```text
//! cargo run --release -p tiered-ratelimit-benches --example bench_http -- --mode bare|ours|governor \
//!     [--listen 127.0.0.1:0] [--workers N]
//! ```
//!
//! - `bare`: no rate limiting at all, the baseline.
//! - `ours`: `RateLimitLayer::new(config)` on the in-memory store, three tiers on (user from the
//!   `x-user-id` header, endpoint = the route template `/`, global), every limit 2^40 in a 1 s
//!   window. The sliding log keeps each admitted request for one window, so memory stays at
//!   about one second's worth of requests.
//! - `governor`: `tower_governor` 0.7 keyed by the `x-user-id` header (one GCRA cell per key),
//!   one cell replenished every nanosecond with a burst of 2^32 - 1: it never limits.
//!
//! Both layers go on with `route_layer`, and every mode serves with
//! `into_make_service_with_connect_info::<SocketAddr>()`, so the three differ only by the layer.
//! Once it accepts connections it prints `listening on ADDR` to stdout; SIGTERM or Ctrl-C stops
//! it.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use http::Request;
use tiered_ratelimit::{RateLimitConfig, RateLimitLayer};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};

const USAGE: &str = "\
usage: bench_http --mode bare|headers|ours|governor [--listen ADDR] [--workers N]

  --mode MODE      bare (no layer), headers (no layer; the handler writes the two headers ours
                   sends), ours (RateLimitLayer, in memory) or governor (tower_governor)
  --listen ADDR    address to serve on (default 127.0.0.1:0, a free port)
  --workers N      tokio worker threads (default: the number of CPUs this process may use)
";

/// Limits never reached: every request takes the admitted path.
const HUGE: u64 = 1 << 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Bare,
    /// Bare axum whose handler writes the same two headers as ours (the issue's baseline).
    Headers,
    Ours,
    Governor,
}

struct Args {
    mode: Mode,
    listen: SocketAddr,
    workers: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut mode = None;
    let mut listen: SocketAddr = "127.0.0.1:0".parse().expect("valid default");
    let mut workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            print!("{USAGE}");
            std::process::exit(0);
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--mode" => {
                mode = Some(match value.as_str() {
                    "bare" => Mode::Bare,
                    "headers" => Mode::Headers,
                    "ours" => Mode::Ours,
                    "governor" => Mode::Governor,
                    other => return Err(format!("--mode: unknown mode {other:?}")),
                })
            }
            "--listen" => {
                listen = value
                    .parse()
                    .map_err(|_| format!("--listen: {value:?} is not an address"))?
            }
            "--workers" => {
                workers = value
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("--workers: {value:?} is not a positive number"))?
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    let mode = mode.ok_or("--mode is required")?;
    Ok(Args {
        mode,
        listen,
        workers,
    })
}

/// The user id for tower_governor: the `x-user-id` header (ours reads the same header with
/// `user_id_header`, borrowed).
fn header_user(headers: &http::HeaderMap) -> Option<String> {
    let id = headers.get("x-user-id")?.to_str().ok()?;
    (!id.is_empty()).then(|| id.to_owned())
}

/// tower_governor's key: the `x-user-id` header, as our user tier sees it.
#[derive(Clone, Copy, Debug)]
struct UserHeader;

impl KeyExtractor for UserHeader {
    type Key = String;

    fn extract<T>(&self, req: &Request<T>) -> Result<String, GovernorError> {
        header_user(req.headers()).ok_or(GovernorError::UnableToExtractKey)
    }
}

fn app(mode: Mode) -> Result<Router, String> {
    let router = Router::new().route("/", get(|| async { "hello" }));
    Ok(match mode {
        Mode::Bare => router,
        Mode::Headers => Router::new().route(
            "/",
            get(|| async {
                // The two headers ours sends on an admitted request, a remaining count of the
                // same size (limits of 2^40, as ours).
                let remaining = http::HeaderValue::from(HUGE - 1);
                (
                    [
                        (
                            http::HeaderName::from_static("x-ratelimit-remaining"),
                            remaining,
                        ),
                        (
                            http::header::RETRY_AFTER,
                            http::HeaderValue::from_static("0"),
                        ),
                    ],
                    "hello",
                )
            }),
        ),
        Mode::Ours => {
            let config = RateLimitConfig::builder()
                .window(Duration::from_secs(1))
                .user_limit(HUGE)
                .endpoint_limit(HUGE)
                .global_limit(HUGE)
                .build()
                .map_err(|e| format!("config: {e}"))?;
            router.route_layer(RateLimitLayer::new(config).user_id_header("x-user-id"))
        }
        Mode::Governor => {
            // per_nanosecond(1): one cell back every nanosecond (per_second(n) would be one
            // every n seconds); a burst of u32::MAX cells: 4.3 s of credit, never used up.
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .key_extractor(UserHeader)
                .finish()
                .ok_or("tower_governor: zero period or burst")?;
            router.route_layer(GovernorLayer {
                config: Arc::new(config),
            })
        }
    })
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

async fn serve(args: Args) -> Result<(), String> {
    let router = app(args.mode)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    {
        use std::io::Write;
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "listening on {addr}");
        let _ = stdout.flush();
    }
    eprintln!(
        "bench_http: mode {:?}, {} worker thread(s), on {addr}",
        args.mode, args.workers
    );
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown_signal())
    .await
    .map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}
