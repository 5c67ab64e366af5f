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
//!
//! `GET /rate-limit` (not limited, records nothing) answers the caller's own usage per limited
//! route as JSON, as GitHub's `/rate_limit` does.
//!
//! With `--config FILE` the limits come from a TOML file in the config's serde form (the limit,
//! window and Redis flags are then ignored), and SIGHUP reloads it while the server runs: a
//! good file takes effect at once (the next request sees it) and the log says what changed; a
//! bad one, or one that changes the Redis settings, the key prefix or the key cap (those need
//! a restart), is refused with the reason, and the running config stays.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use axum::extract::{ConnectInfo, Path};
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::routing::get;
use axum::{Json, Router};
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use tiered_ratelimit::config::parse_duration;
use tiered_ratelimit::{
    CheckRequest, IpNet, RateLimitConfig, RateLimitLayer, RateLimiter, UserKey,
};
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

    /// The config as a TOML file (the config's serde form), reloaded on SIGHUP; the limit,
    /// window, key cap and Redis flags are then ignored
    #[arg(long, env = "RATE_LIMIT_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
}

/// The routes the layer limits, as `/rate-limit` reports them.
const LIMITED_ROUTES: [&str; 2] = ["/api/v1/items", "/api/v1/items/{id}"];

/// The config in `path` (TOML, the serde form), or why not, naming the field at fault.
fn load(path: &std::path::Path) -> Result<RateLimitConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| {
        // A value toml could not read: name its key (the text before `=` on its line).
        let key = e
            .span()
            .and_then(|span| text.get(..span.start)?.lines().last())
            .and_then(|line| Some(line.split_once('=')?.0.trim()))
            .filter(|key| !key.is_empty() && !e.message().starts_with(key));
        match key {
            Some(key) => format!("{}: {key}: {}", path.display(), e.message()),
            None => format!("{}: {}", path.display(), e.message()),
        }
    })
}

/// The top-level settings that differ, as `name: old -> new`.
fn changes(old: &RateLimitConfig, new: &RateLimitConfig) -> Vec<String> {
    let (old, new) = (serde_json::json!(old), serde_json::json!(new));
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return Vec::new();
    };
    let none = serde_json::Value::Null;
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|key| {
            let (a, b) = (old.get(key).unwrap_or(&none), new.get(key).unwrap_or(&none));
            (a != b).then(|| format!("{key}: {a} -> {b}"))
        })
        .collect()
}

/// Reads `path` again and gives it to the limiter; a bad file keeps the running config.
fn reload(limiter: &RateLimiter, path: &std::path::Path) {
    let new = match load(path) {
        Ok(new) => new,
        Err(error) => {
            tracing::error!(%error, "config not reloaded: the running config stays");
            return;
        }
    };
    let changed = changes(&limiter.config(), &new);
    match limiter.reconfigure(new) {
        Ok(()) if changed.is_empty() => tracing::info!("config reloaded: nothing changed"),
        Ok(()) => tracing::info!(changed = %changed.join("; "), "config reloaded"),
        Err(error) => tracing::error!(
            field = error.field(),
            %error,
            "config not reloaded: the running config stays"
        ),
    }
}

/// Reloads the config file on every SIGHUP (installed before the server says it listens).
#[cfg(unix)]
fn reload_on_sighup(limiter: RateLimiter, path: PathBuf) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup()).expect("install SIGHUP handler");
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            reload(&limiter, &path);
        }
    });
}

/// `GET /rate-limit`: the caller's usage (the `X-User-Id` header, else the peer address, IPv6
/// grouped by /64 as the layer does by default) on each limited route. Records nothing.
async fn rate_limit(
    limiter: RateLimiter,
    peer: SocketAddr,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, (StatusCode, String)> {
    let id = headers
        .get("x-user-id")
        .and_then(|v| v.to_str().ok())
        .filter(|id| !id.is_empty());
    let ip = match peer.ip().to_canonical() {
        std::net::IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            std::net::IpAddr::V6(bits.into())
        }
        v4 => v4,
    };
    let user = id.map_or(UserKey::Ip(ip), UserKey::Id);
    let mut resources = serde_json::Map::new();
    for route in LIMITED_ROUTES {
        let usage = limiter
            .usage_request(CheckRequest::new(user, Some(route)))
            .await
            .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
        resources.insert(route.to_owned(), serde_json::json!(usage));
    }
    let caller = id.map_or_else(|| ip.to_string(), str::to_owned);
    Ok(Json(
        serde_json::json!({ "user": caller, "resources": resources }),
    ))
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

/// The command line and the config it makes; a wrong one ends the process with clap's message
/// and exit code 2.
fn settings() -> (Cli, RateLimitConfig) {
    let cli = Cli::parse();
    // Not clap's `requires`: that would also fire on RATE_LIMIT_REDIS_REQUIRED=false.
    if cli.redis_required && cli.redis.is_none() {
        let message = "--redis-required needs --redis URL (or RATE_LIMIT_REDIS_URL)";
        Cli::command()
            .error(ErrorKind::MissingRequiredArgument, message)
            .exit()
    }
    let config = match &cli.config {
        Some(path) => load(path),
        None => cli.config().map_err(|e| e.to_string()),
    };
    match config {
        Ok(config) => (cli, config),
        Err(e) => Cli::command()
            .error(ErrorKind::ValueValidation, format!("invalid settings: {e}"))
            .exit(),
    }
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
    let usage = limiter.clone();
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
    let rate_limit = move |ConnectInfo(peer): ConnectInfo<SocketAddr>, headers: HeaderMap| {
        let limiter = usage.clone();
        async move { rate_limit(limiter, peer, headers).await }
    };
    Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/rate-limit", get(rate_limit))
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
    let (cli, config) = settings();
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
        reload_on_sighup(limiter.clone(), path.clone());
    }
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
