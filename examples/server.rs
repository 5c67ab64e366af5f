//! The demo server: a small items API behind `RateLimitLayer`.
//!
//! ```text
//! cargo run --release --example server -- --listen 127.0.0.1:3000 --window 60s \
//!     --user-limit 50 --endpoint-limit 100 --global-limit 1000 [--redis redis://127.0.0.1:6379]
//! ```
//!
//! With `--redis-required`, a Redis that cannot be used at start (wrong password, missing
//! permission, TLS failure, unreachable, ...) ends the server with exit code 1 and the reason,
//! instead of falling back to per-instance limits in memory.
//!
//! `GET /api/v1/items`, `GET /api/v1/items/{id}` and `POST /api/v1/items` are limited;
//! `GET /health` is not. The user id is the `X-User-Id` header, else the client IP. Once it
//! accepts connections it prints one line, `listening on ADDR`, to stdout; logs go to stderr.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use tiered_ratelimit::config::parse_duration;
use tiered_ratelimit::{IpNet, RateLimitConfig, RateLimitLayer, RateLimiter};
use tokio::io::AsyncWriteExt;

const USAGE: &str = "\
usage: server [--listen ADDR] [--window DURATION] [--user-limit N] [--endpoint-limit N]
              [--global-limit N] [--redis URL] [--redis-timeout DURATION]
              [--redis-ca PATH] [--redis-cert PATH --redis-key PATH] [--redis-required]
              [--trusted-proxy CIDR]... [--client-ip-header NAME] [--max-tracked-keys N]

  --listen ADDR              address to serve on (default 127.0.0.1:3000; port 0 takes a free one)
  --window DURATION          sliding window, e.g. 60s, 1500ms, 1m; a bare number is seconds,
                             as in a config file (default 60s)
  --user-limit N             requests per user per window, 0 = off (default 50)
  --endpoint-limit N         requests per route per window, 0 = off (default 100)
  --global-limit N           requests in all per window, 0 = off (default 1000)
  --redis URL                share limits through Redis (default: in memory)
  --redis-timeout DURATION   longest wait on Redis before falling back to memory (default 100ms;
                             1ms to 60s)
  --redis-ca PATH            rediss:// only: trust this PEM CA file instead of the system's store
  --redis-cert PATH          rediss:// only, mutual TLS: client certificate (PEM; needs --redis-key)
  --redis-key PATH           rediss:// only, mutual TLS: the client certificate's key (PEM)
  --redis-required           exit (code 1) if Redis cannot be used at start, instead of falling
                             back to in-memory limits
  --trusted-proxy CIDR       a proxy network whose client-IP header entries are believed
                             (repeatable; default: none, the peer is the client); 0.0.0.0/0
                             and ::/0 are refused: every client could name itself
  --client-ip-header NAME    the one header the trusted proxies write the client address in
                             (default x-forwarded-for; forwarded, x-real-ip, ...)
  --max-tracked-keys N       cap on user and endpoint keys kept in memory (default 1000000)
";

struct Args {
    listen: SocketAddr,
    config: RateLimitConfig,
    trusted_proxies: Vec<IpNet>,
    client_ip_header: Option<axum::http::HeaderName>,
    redis_required: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut listen: SocketAddr = "127.0.0.1:3000".parse().expect("valid default");
    let mut builder = RateLimitConfig::builder()
        .window(Duration::from_secs(60))
        .user_limit(50)
        .endpoint_limit(100)
        .global_limit(1000);
    let mut trusted_proxies = Vec::new();
    let mut client_ip_header = None;
    let mut redis_required = false;
    let (mut client_cert, mut client_key) = (None, None);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            print!("{USAGE}");
            std::process::exit(0);
        }
        if flag == "--redis-required" {
            redis_required = true;
            continue;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = |v: &str| {
            v.parse::<u64>()
                .map_err(|_| format!("{flag}: {v:?} is not a whole number"))
        };
        builder = match flag.as_str() {
            "--listen" => {
                listen = value.parse().map_err(|_| {
                    format!("--listen: {value:?} is not an address like 127.0.0.1:3000")
                })?;
                builder
            }
            "--window" => {
                builder.window(parse_duration(&value).map_err(|e| format!("--window: {e}"))?)
            }
            "--user-limit" => builder.user_limit(number(&value)?),
            "--endpoint-limit" => builder.endpoint_limit(number(&value)?),
            "--global-limit" => builder.global_limit(number(&value)?),
            "--redis" => builder.redis_url(value),
            "--trusted-proxy" => {
                // A network (10.0.0.0/8), or a bare address for the one host.
                let network: IpNet = value
                    .parse()
                    .or_else(|_| value.parse::<std::net::IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!("--trusted-proxy: {value:?} is not a network like 10.0.0.0/8")
                    })?;
                // 0.0.0.0/0, ::/0, or ::ffff:0:0/96 (every IPv4-mapped address).
                let everything: IpNet = "::ffff:0:0/96".parse().expect("a network");
                if network.prefix_len() == 0 || network.trunc() == everything {
                    return Err(format!(
                        "--trusted-proxy: {network} trusts every client to name its own \
                         address; name your proxies' networks"
                    ));
                }
                trusted_proxies.push(network);
                builder
            }
            "--client-ip-header" => {
                client_ip_header = Some(
                    axum::http::HeaderName::try_from(value.as_str())
                        .map_err(|_| format!("--client-ip-header: {value:?} is no header name"))?,
                );
                builder
            }
            "--max-tracked-keys" => builder.max_tracked_keys(
                usize::try_from(number(&value)?)
                    .map_err(|_| format!("--max-tracked-keys: {value} is too large"))?,
            ),
            "--redis-timeout" => builder.redis_command_timeout(
                parse_duration(&value).map_err(|e| format!("--redis-timeout: {e}"))?,
            ),
            "--redis-ca" => builder.redis_tls_ca_file(value),
            "--redis-cert" => {
                client_cert = Some(value);
                builder
            }
            "--redis-key" => {
                client_key = Some(value);
                builder
            }
            other => return Err(format!("unknown flag {other}")),
        };
    }
    builder = match (client_cert, client_key) {
        (Some(cert), Some(key)) => builder.redis_tls_client_cert(cert, key),
        (None, None) => builder,
        _ => return Err("--redis-cert and --redis-key go together".to_owned()),
    };
    let config = builder
        .build()
        .map_err(|e| format!("invalid settings: {e}"))?;
    if redis_required && config.redis().is_none() {
        return Err("--redis-required needs --redis URL".to_owned());
    }
    Ok(Args {
        listen,
        config,
        trusted_proxies,
        client_ip_header,
        redis_required,
    })
}

fn app(
    limiter: RateLimiter,
    trusted_proxies: Vec<IpNet>,
    client_ip_header: Option<axum::http::HeaderName>,
) -> Router {
    let mut layer = RateLimitLayer::from_limiter(limiter)
        .user_id(|parts| {
            let id = parts.headers.get("x-user-id")?.to_str().ok()?;
            (!id.is_empty()).then(|| id.to_owned())
        })
        .trusted_proxies(trusted_proxies);
    if let Some(name) = client_ip_header {
        layer = layer.client_ip_header(name);
    }
    let api = Router::new()
        .route("/api/v1/items", get(list_items).post(create_item))
        .route("/api/v1/items/{id}", get(get_item))
        .route_layer(layer);
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .merge(api)
}

async fn list_items() -> Json<Vec<serde_json::Value>> {
    Json(vec![
        serde_json::json!({ "id": 1, "name": "apple" }),
        serde_json::json!({ "id": 2, "name": "pear" }),
    ])
}

async fn get_item(Path(id): Path<u64>) -> Json<serde_json::Value> {
    Json(serde_json::json!({ "id": id, "name": format!("item {id}") }))
}

async fn create_item(body: String) -> (StatusCode, Json<serde_json::Value>) {
    (
        StatusCode::CREATED,
        Json(serde_json::json!({ "created": true, "bytes": body.len() })),
    )
}

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
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let limiter = if args.redis_required {
        match RateLimiter::try_connect(args.config.clone()).await {
            Ok(limiter) => limiter,
            Err(e) => {
                eprintln!("error: --redis-required: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else if args.config.redis().is_some() {
        RateLimiter::connect(args.config.clone()).await
    } else {
        RateLimiter::new(args.config.clone())
    };
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let addr = listener.local_addr().expect("bound address");
    tracing::info!(
        window = ?args.config.window(),
        user_limit = args.config.user_limit(),
        endpoint_limit = args.config.endpoint_limit(),
        global_limit = args.config.global_limit(),
        backend = ?limiter.backend(),
        "rate limits"
    );
    let mut stdout = tokio::io::stdout();
    let _ = stdout
        .write_all(format!("listening on {addr}\n").as_bytes())
        .await;
    let _ = stdout.flush().await;
    let service = app(limiter, args.trusted_proxies, args.client_ip_header)
        .into_make_service_with_connect_info::<SocketAddr>();
    if let Err(e) = axum::serve(listener, service)
        .with_graceful_shutdown(shutdown_signal())
        .await
    {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
