//! The demo server: a small items API behind `RateLimitLayer`.
//!
//! ```text
//! cargo run --release --example server -- --listen 127.0.0.1:3000 --window 60s \
//!     --user-limit 50 --endpoint-limit 100 --global-limit 1000 [--redis redis://127.0.0.1:6379]
//! cargo run --example server -- --help
//! ```
//!
//! Every setting is a flag, and each main one also an environment variable (`RATE_LIMIT_*`,
//! listed by `--help`); a flag wins over its variable. Durations follow the config file's one
//! rule ([`parse_duration`](tiered_ratelimit::config::parse_duration)): `60s`, `1500ms`, `1m`, or a bare number of seconds.
//!
//! With `--redis-required`, a Redis that cannot be used at start (wrong password, missing
//! permission, TLS failure, unreachable, ...) ends the server with exit code 1 and the reason,
//! instead of falling back to per-instance limits in memory. A wrong flag or setting exits
//! with code 2 and says which.
//!
//! `GET /api/v1/items`, `GET /api/v1/items/{id}` and `POST /api/v1/items` are limited;
//! `GET /health` is not. The user id is the `X-User-Id` header, else the client IP. Once it
//! accepts connections it prints one line, `listening on ADDR`, to stdout; logs go to stderr.
//!
//! `GET /rate-limit` (not limited, records nothing) answers the caller's own usage per limited
//! route as JSON, as GitHub's `/rate_limit` does.
//!
//! With `--admin-token TOKEN` (16 characters at least), the admin routes are mounted under
//! `/admin` behind `Authorization: Bearer TOKEN`: `GET /admin/usage?user=ID&endpoint=ROUTE`,
//! `POST /admin/reset`, `/admin/block` and `/admin/unblock` (JSON; see docs/OPERATIONS.md).
//! Without the flag those routes do not exist.
//!
//! `GET /metrics` (not limited, records nothing) answers the limiter's counters and store latency
//! histogram in the Prometheus text format (`metrics.rs`; docs/OPERATIONS.md, "Seeing it").
//!
//! With `--config FILE` the limits come from a TOML file in the config's serde form (the limit,
//! window and Redis flags are then refused), and SIGHUP reloads it while the server runs: a
//! good file takes effect at once (the next request sees it) and the log says what changed; a
//! bad one, or one that changes the Redis settings, the key prefix or the key cap (those need
//! a restart), is refused with the reason, and the running config stays.

mod cli;
mod metrics;
mod reload;
mod routes;

use std::net::SocketAddr;
use std::process::ExitCode;

use tiered_ratelimit::{admin, RateLimitConfig, RateLimiter};
use tokio::io::AsyncWriteExt;

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("install SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let (cli, config) = cli::settings();
    // Before the limiter exists: a fallback at connect is counted, and so is the first check.
    let metrics = match metrics::install() {
        Ok(handle) => handle,
        Err(e) => {
            eprintln!("error: cannot install the metrics recorder: {e}");
            return ExitCode::FAILURE;
        }
    };
    let limiter = if cli.redis_required {
        match RateLimiter::try_connect(config.clone()).await {
            Ok(limiter) => limiter,
            Err(e) => {
                eprintln!("error: --redis-required: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else if config.redis().is_some() {
        RateLimiter::connect(config.clone()).await
    } else {
        RateLimiter::new(config.clone())
    };
    let listener = match tokio::net::TcpListener::bind(cli.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", cli.listen);
            return ExitCode::FAILURE;
        }
    };
    let addr = listener.local_addr().expect("bound address");
    #[cfg(unix)]
    if let Some(path) = &cli.config {
        reload::reload_on_sighup(limiter.clone(), path.clone());
    }
    tracing::info!(
        window = ?config.window(),
        user_limit = config.user_limit(),
        endpoint_limit = config.endpoint_limit(),
        global_limit = config.global_limit(),
        backend = ?limiter.backend(),
        "rate limits"
    );
    if every_tier_off(&config) {
        tracing::warn!(
            "every tier is off (user, endpoint and global limits are 0, and no route or plan \
             sets one): every request is let through; set user_limit, endpoint_limit or \
             global_limit"
        );
    }
    let mut stdout = tokio::io::stdout();
    let _ = stdout
        .write_all(format!("listening on {addr}\n").as_bytes())
        .await;
    let _ = stdout.flush().await;
    let mut app = routes::app(limiter.clone(), cli.trusted_proxies, cli.client_ip_header)
        .merge(metrics::route(metrics));
    if let Some(token) = &cli.admin_token {
        // Outside the rate limit layer; without the flag the routes do not exist at all.
        let admin = admin::require_bearer(admin::router(limiter), token);
        app = app.nest("/admin", admin);
        tracing::info!("admin routes under /admin, behind the bearer token");
    }
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    if let Err(e) = axum::serve(listener, service)
        .with_graceful_shutdown(shutdown_signal())
        .await
    {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Whether no tier can ever apply: every limit 0, and no route or plan with limits of its own.
fn every_tier_off(config: &RateLimitConfig) -> bool {
    let json = serde_json::json!(config);
    // A route or a plan sets a limit only with a number above 0 (`[routes."/x"]` with no
    // limit, or a limit of 0, sets none).
    fn any_limit(value: &serde_json::Value) -> bool {
        match value {
            serde_json::Value::Number(n) => n.as_u64().is_some_and(|n| n > 0),
            serde_json::Value::Object(o) => o.values().any(any_limit),
            _ => false,
        }
    }
    let none_in = |key: &str| !json.get(key).is_some_and(any_limit);
    config.user_limit() == 0
        && config.endpoint_limit() == 0
        && config.global_limit() == 0
        && none_in("routes")
        && none_in("plans")
}
