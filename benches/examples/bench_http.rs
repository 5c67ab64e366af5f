//! The server of `benches/http.sh`: an axum hello-world (`GET /` answers `hello`) served bare,
//! bare writing our two headers, behind our `RateLimitLayer`, or behind `tower_governor`, with
//! limits never reached.
//!
//! ```text
//! cargo run --release -p tiered-ratelimit-benches --example bench_http -- --mode MODE \
//!     [--listen 127.0.0.1:0] [--workers N]
//! ```
//!
//! - `bare`: no rate limiting at all, the baseline.
//! - `headers`: no rate limiting; the handler writes the two headers ours sends on an admitted
//!   request (the issue's baseline for ours).
//! - `ours`: `RateLimitLayer::new(config)` on the in-memory store, three tiers on (user from the
//!   `x-user-id` header, endpoint = the route template `/`, global), every limit 2^40 in a 1 s
//!   window. The sliding log keeps each admitted request for one window, so memory stays at
//!   about one second's worth of requests.
//! - `inner`: `ours` with `.inner_body()`: its responses carry axum's own body, which axum
//!   does not box again.
//! - `inner_handler`: `inner` put on the handler (`get(handler.layer(layer))`, axum's
//!   `Handler::layer`) instead of with `route_layer`, which wraps the route in a second boxed
//!   `Route`.
//! - `governor`: `tower_governor` 0.7 keyed by the `x-user-id` header (one GCRA cell per key),
//!   one cell replenished every nanosecond with a burst of 2^32 - 1: it never limits.
//! - `governor_headers`: `governor` with `use_headers()`: it writes `x-ratelimit-limit` and
//!   `x-ratelimit-remaining` on every admitted response, as ours writes two headers.
//! - `governor_handler`: `governor` on the handler, as `inner_handler`.
//! - `floor`: a layer that checks nothing: it reads the `x-user-id` header and the route's
//!   template, as ours does, and writes our two headers as static values. The least a
//!   limiter that reads those and writes those can cost in ours' place. `floor_handler`: the
//!   same on the handler.
//!
//! Every layer but those of the `_handler` modes goes on with `route_layer`, and every mode serves with
//! `into_make_service_with_connect_info::<SocketAddr>()`, so the modes differ only by the layer.
//! Once it accepts connections it prints `listening on ADDR` to stdout; SIGTERM or Ctrl-C stops
//! it.

use std::net::SocketAddr;
use std::process::ExitCode;

#[path = "shared/http_app.rs"]
mod http_app;

use http_app::{app_with_clock, Mode};

const USAGE: &str = "\
usage: bench_http --mode MODE [--listen ADDR] [--workers N]

  --mode MODE      bare (no layer), headers (no layer; the handler writes the two headers ours
                   sends), ours (RateLimitLayer, in memory), inner (ours answering axum's own
                   body: .inner_body()), inner_handler (inner on the handler, with axum's
                   Handler::layer), governor (tower_governor), governor_headers
                   (tower_governor with use_headers(), writing two headers of its own),
                   governor_handler (governor on the handler),
                   floor (a layer that checks nothing and writes the two headers as static
                   values) or floor_handler (floor on the handler)
  --listen ADDR    address to serve on (default 127.0.0.1:0, a free port)
  --workers N      tokio worker threads (default: the number of CPUs this process may use)
";

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
                mode = Some(
                    Mode::parse(&value).ok_or_else(|| format!("--mode: unknown mode {value:?}"))?,
                )
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

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

async fn serve(args: Args) -> Result<(), String> {
    let router = app_with_clock(args.mode, None)?;
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
