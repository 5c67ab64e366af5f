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
//! rule ([`parse_duration`]): `60s`, `1500ms`, `1m`, or a bare number of seconds.
//!
//! With `--redis-required`, a Redis that cannot be used at start (wrong password, missing
//! permission, TLS failure, unreachable, ...) ends the server with exit code 1 and the reason,
//! instead of falling back to per-instance limits in memory. A wrong flag or setting exits
//! with code 2 and says which.
//!
//! `GET /api/v1/items`, `GET /api/v1/items/{id}` and `POST /api/v1/items` are limited;
//! `GET /health` is not. The user id is the `X-User-Id` header, else the client IP. Once it
//! accepts connections it prints one line, `listening on ADDR`, to stdout; logs go to stderr.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use axum::extract::Path;
use axum::http::{HeaderName, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use tiered_ratelimit::config::parse_duration;
use tiered_ratelimit::{IpNet, RateLimitConfig, RateLimitLayer, RateLimiter};
use tokio::io::AsyncWriteExt;

/// The demo server: a small items API behind tiered-ratelimit's `RateLimitLayer`.
///
/// `GET /api/v1/items`, `GET /api/v1/items/{id}` and `POST /api/v1/items` are limited, per user
/// (the `X-User-Id` header, else the client IP), per route and in all; `GET /health` is not.
/// A flag wins over its environment variable.
#[derive(Debug, Parser)]
#[command(name = "server", version)]
struct Cli {
    /// Address to serve on (port 0 takes a free one)
    #[arg(
        long,
        env = "RATE_LIMIT_LISTEN",
        value_name = "ADDR",
        default_value = "127.0.0.1:3000"
    )]
    listen: SocketAddr,

    /// Sliding window, e.g. 60s, 1500ms, 1m; a bare number is seconds, as in a config file
    #[arg(long, env = "RATE_LIMIT_WINDOW", value_name = "DURATION", default_value = "60s",
          value_parser = duration)]
    window: Duration,

    /// Requests per user per window, 0 = off
    #[arg(
        long,
        env = "RATE_LIMIT_USER_LIMIT",
        value_name = "N",
        default_value_t = 50
    )]
    user_limit: u64,

    /// Requests per route per window, 0 = off
    #[arg(
        long,
        env = "RATE_LIMIT_ENDPOINT_LIMIT",
        value_name = "N",
        default_value_t = 100
    )]
    endpoint_limit: u64,

    /// Requests in all per window, 0 = off
    #[arg(
        long,
        env = "RATE_LIMIT_GLOBAL_LIMIT",
        value_name = "N",
        default_value_t = 1000
    )]
    global_limit: u64,

    /// Share limits through Redis at this URL [default: in memory]
    #[arg(
        long,
        visible_alias = "redis-url",
        env = "RATE_LIMIT_REDIS_URL",
        value_name = "URL"
    )]
    redis: Option<String>,

    /// Longest wait on Redis before falling back to memory, 1ms to 60s [default: 100ms]
    #[arg(long, env = "RATE_LIMIT_REDIS_TIMEOUT", value_name = "DURATION",
          value_parser = duration)]
    redis_timeout: Option<Duration>,

    /// Redis Cluster only: split the global limit over N keys spread over the masters, 1 to
    /// 64 (every instance must use the same N) [default: 1, one exact key]
    #[arg(
        long,
        env = "RATE_LIMIT_GLOBAL_SHARDS",
        value_name = "N",
        requires = "redis"
    )]
    global_shards: Option<u32>,

    /// rediss:// only: trust this PEM CA file instead of the system's store
    #[arg(long, env = "RATE_LIMIT_REDIS_CA", value_name = "PATH")]
    redis_ca: Option<PathBuf>,

    /// rediss:// only, mutual TLS: the client certificate (PEM)
    #[arg(
        long,
        env = "RATE_LIMIT_REDIS_CERT",
        value_name = "PATH",
        requires = "redis_key"
    )]
    redis_cert: Option<PathBuf>,

    /// rediss:// only, mutual TLS: the client certificate's key (PEM)
    #[arg(
        long,
        env = "RATE_LIMIT_REDIS_KEY",
        value_name = "PATH",
        requires = "redis_cert"
    )]
    redis_key: Option<PathBuf>,

    /// Exit (code 1) if Redis cannot be used at start, instead of falling back to in-memory
    /// limits
    #[arg(long, env = "RATE_LIMIT_REDIS_REQUIRED")]
    redis_required: bool,

    /// A proxy network whose client-IP header entries are believed (repeatable; the variable
    /// takes a comma-separated list) [default: none, the peer is the client]; 0.0.0.0/0 and
    /// ::/0 are refused: every client could name itself
    #[arg(long = "trusted-proxy", env = "RATE_LIMIT_TRUSTED_PROXIES", value_name = "CIDR",
          value_delimiter = ',', value_parser = trusted_proxy)]
    trusted_proxies: Vec<IpNet>,

    /// The one header the trusted proxies write the client address in (forwarded,
    /// x-real-ip, ...) [default: x-forwarded-for]
    #[arg(long, env = "RATE_LIMIT_CLIENT_IP_HEADER", value_name = "NAME",
          value_parser = header_name)]
    client_ip_header: Option<HeaderName>,

    /// Cap on user and endpoint keys kept in memory
    #[arg(long, env = "RATE_LIMIT_MAX_TRACKED_KEYS", value_name = "N",
          default_value_t = tiered_ratelimit::config::DEFAULT_MAX_TRACKED_KEYS)]
    max_tracked_keys: usize,
}

/// `--window` and `--redis-timeout`: the config file's rule, and its message.
fn duration(value: &str) -> Result<Duration, String> {
    parse_duration(value).map_err(|e| e.to_string())
}

/// A network (10.0.0.0/8), or a bare address for the one host; never every address.
fn trusted_proxy(value: &str) -> Result<IpNet, String> {
    let network: IpNet = value
        .parse()
        .or_else(|_| value.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| "not a network like 10.0.0.0/8".to_owned())?;
    // 0.0.0.0/0, ::/0, or ::ffff:0:0/96 (every IPv4-mapped address).
    let everything: IpNet = "::ffff:0:0/96".parse().expect("a network");
    if network.prefix_len() == 0 || network.trunc() == everything {
        return Err(format!(
            "{network} trusts every client to name its own address; name your proxies' networks"
        ));
    }
    Ok(network)
}

fn header_name(value: &str) -> Result<HeaderName, String> {
    HeaderName::try_from(value).map_err(|_| "not a header name".to_owned())
}

impl Cli {
    /// The validated config, or the setting that is wrong (the config names its field).
    fn config(&self) -> Result<RateLimitConfig, tiered_ratelimit::ConfigError> {
        let mut builder = RateLimitConfig::builder()
            .window(self.window)
            .user_limit(self.user_limit)
            .endpoint_limit(self.endpoint_limit)
            .global_limit(self.global_limit)
            .max_tracked_keys(self.max_tracked_keys);
        if let Some(url) = &self.redis {
            builder = builder.redis_url(url);
        }
        if let Some(timeout) = self.redis_timeout {
            builder = builder.redis_command_timeout(timeout);
        }
        if let Some(shards) = self.global_shards {
            builder = builder.redis_global_shards(shards);
        }
        if let Some(ca) = &self.redis_ca {
            builder = builder.redis_tls_ca_file(ca);
        }
        if let (Some(cert), Some(key)) = (&self.redis_cert, &self.redis_key) {
            builder = builder.redis_tls_client_cert(cert, key);
        }
        builder.build()
    }
}

fn app(
    limiter: RateLimiter,
    trusted_proxies: Vec<IpNet>,
    client_ip_header: Option<HeaderName>,
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
    let cli = Cli::parse();
    // Not clap's `requires`: that would also fire on RATE_LIMIT_REDIS_REQUIRED=false.
    if cli.redis_required && cli.redis.is_none() {
        let message = "--redis-required needs --redis URL (or RATE_LIMIT_REDIS_URL)";
        Cli::command()
            .error(ErrorKind::MissingRequiredArgument, message)
            .exit()
    }
    let config = cli.config().unwrap_or_else(|e| {
        Cli::command()
            .error(ErrorKind::ValueValidation, format!("invalid settings: {e}"))
            .exit()
    });
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
    tracing::info!(
        window = ?config.window(),
        user_limit = config.user_limit(),
        endpoint_limit = config.endpoint_limit(),
        global_limit = config.global_limit(),
        backend = ?limiter.backend(),
        "rate limits"
    );
    let mut stdout = tokio::io::stdout();
    let _ = stdout
        .write_all(format!("listening on {addr}\n").as_bytes())
        .await;
    let _ = stdout.flush().await;
    let service = app(limiter, cli.trusted_proxies, cli.client_ip_header)
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
