//! The command line: every flag, its environment variable, and the config it makes.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::http::HeaderName;
use clap::error::ErrorKind;
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};
use tiered_ratelimit::config::parse_duration;
use tiered_ratelimit::{IpNet, RateLimitConfig, RateLimitLayer};

use crate::reload::load;

/// The demo server: a small items API behind tiered-ratelimit's `RateLimitLayer`.
///
/// `GET /api/v1/items`, `GET /api/v1/items/{id}` and `POST /api/v1/items` are limited, per user
/// (the `X-User-Id` header, else the client IP), per route and in all; `GET /health`,
/// `GET /rate-limit` and `GET /metrics` (Prometheus) are not.
/// A flag wins over its environment variable.
#[derive(Debug, Parser)]
#[command(name = "server", version)]
pub(crate) struct Cli {
    /// Address to serve on (port 0 takes a free one)
    #[arg(
        long,
        env = "RATE_LIMIT_LISTEN",
        value_name = "ADDR",
        default_value = "127.0.0.1:3000"
    )]
    pub(crate) listen: SocketAddr,

    /// Sliding window, e.g. 60s, 1500ms, 1m; a bare number is seconds, as in a config file
    #[arg(long, env = "RATE_LIMIT_WINDOW", value_name = "DURATION", default_value = "60s",
          value_parser = duration)]
    pub(crate) window: Duration,

    /// Requests per user per window, 0 = off
    #[arg(
        long,
        env = "RATE_LIMIT_USER_LIMIT",
        value_name = "N",
        default_value_t = 50
    )]
    pub(crate) user_limit: u64,

    /// Requests per route per window, 0 = off
    #[arg(
        long,
        env = "RATE_LIMIT_ENDPOINT_LIMIT",
        value_name = "N",
        default_value_t = 100
    )]
    pub(crate) endpoint_limit: u64,

    /// Requests in all per window, 0 = off
    #[arg(
        long,
        env = "RATE_LIMIT_GLOBAL_LIMIT",
        value_name = "N",
        default_value_t = 1000
    )]
    pub(crate) global_limit: u64,

    /// Share limits through Redis at this URL [default: in memory]
    #[arg(
        long,
        visible_alias = "redis-url",
        env = "RATE_LIMIT_REDIS_URL",
        value_name = "URL"
    )]
    pub(crate) redis: Option<String>,

    /// Longest wait on Redis before falling back to memory, 1ms to 60s [default: 100ms]
    #[arg(long, env = "RATE_LIMIT_REDIS_TIMEOUT", value_name = "DURATION",
          value_parser = duration)]
    pub(crate) redis_timeout: Option<Duration>,

    /// Redis Cluster only: split the global limit over N keys spread over the masters, 1 to
    /// 64 (every instance must use the same N) [default: 1, one exact key]
    #[arg(
        long,
        env = "RATE_LIMIT_GLOBAL_SHARDS",
        value_name = "N",
        requires = "redis"
    )]
    pub(crate) global_shards: Option<u32>,

    /// rediss:// only: trust this PEM CA file instead of the system's store
    #[arg(long, env = "RATE_LIMIT_REDIS_CA", value_name = "PATH")]
    pub(crate) redis_ca: Option<PathBuf>,

    /// rediss:// only, mutual TLS: the client certificate (PEM)
    #[arg(
        long,
        env = "RATE_LIMIT_REDIS_CERT",
        value_name = "PATH",
        requires = "redis_key"
    )]
    pub(crate) redis_cert: Option<PathBuf>,

    /// rediss:// only, mutual TLS: the client certificate's key (PEM)
    #[arg(
        long,
        env = "RATE_LIMIT_REDIS_KEY",
        value_name = "PATH",
        requires = "redis_cert"
    )]
    pub(crate) redis_key: Option<PathBuf>,

    /// Exit (code 1) if Redis cannot be used at start, instead of falling back to in-memory
    /// limits
    #[arg(long, env = "RATE_LIMIT_REDIS_REQUIRED")]
    pub(crate) redis_required: bool,

    /// A proxy network whose client-IP header entries are believed (repeatable; the variable
    /// takes a comma-separated list) [default: none, the peer is the client]; 0.0.0.0/0, ::/0
    /// and networks that add up to them are refused: every client could name itself
    #[arg(long = "trusted-proxy", env = "RATE_LIMIT_TRUSTED_PROXIES", value_name = "CIDR",
          value_delimiter = ',', value_parser = trusted_proxy)]
    pub(crate) trusted_proxies: Vec<IpNet>,

    /// The one header the trusted proxies write the client address in (forwarded,
    /// x-real-ip, ...) [default: x-forwarded-for]
    #[arg(long, env = "RATE_LIMIT_CLIENT_IP_HEADER", value_name = "NAME",
          value_parser = header_name)]
    pub(crate) client_ip_header: Option<HeaderName>,

    /// Cap on user and endpoint keys kept in memory
    #[arg(long, env = "RATE_LIMIT_MAX_TRACKED_KEYS", value_name = "N",
          default_value_t = tiered_ratelimit::config::DEFAULT_MAX_TRACKED_KEYS)]
    pub(crate) max_tracked_keys: usize,

    /// The config as a TOML file (the config's serde form), reloaded on SIGHUP; the limit,
    /// window, key cap and Redis flags are then refused (the file holds them)
    #[arg(long, env = "RATE_LIMIT_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Serve the admin routes (usage of anyone, reset, block, unblock) under /admin, behind
    /// `Authorization: Bearer TOKEN` (at least 16 characters); without it they do not exist
    #[arg(
        long,
        env = "RATE_LIMIT_ADMIN_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub(crate) admin_token: Option<String>,
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

/// The flags (by their ids) that a config file replaces: `--config` refuses them.
const FILE_SETTINGS: [&str; 11] = [
    "window",
    "user_limit",
    "endpoint_limit",
    "global_limit",
    "max_tracked_keys",
    "redis",
    "redis_timeout",
    "global_shards",
    "redis_ca",
    "redis_cert",
    "redis_key",
];

/// How the setting `id` was given: its flag, or the variable a deployment set, as it set it
/// (with the flag it stands for).
fn given_as(matches: &clap::ArgMatches, id: &str) -> String {
    let flag = format!("--{}", id.replace('_', "-"));
    match matches.value_source(id) {
        Some(ValueSource::EnvVariable) => Cli::command()
            .get_arguments()
            .find(|a| a.get_id() == id)
            .and_then(|a| a.get_env())
            .map_or(flag.clone(), |env| {
                format!("{} ({flag})", env.to_string_lossy())
            }),
        _ => flag,
    }
}

/// The command line and the config it makes; a wrong one ends the process with clap's message
/// and exit code 2.
pub(crate) fn settings() -> (Cli, RateLimitConfig) {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if cli.config.is_some() {
        // The file is the whole config: a setting also given as a flag or a variable would be
        // dropped without a word, so it is refused, named.
        let given: Vec<String> = FILE_SETTINGS
            .iter()
            .filter(|id| {
                matches!(
                    matches.value_source(id),
                    Some(ValueSource::CommandLine | ValueSource::EnvVariable)
                )
            })
            .map(|id| given_as(&matches, id))
            .collect();
        if !given.is_empty() {
            let message = format!(
                "--config: {} would be ignored (the file is the whole config); put the \
                 setting in the file, or drop the file",
                given.join(", ")
            );
            Cli::command()
                .error(ErrorKind::ArgumentConflict, message)
                .exit()
        }
    }
    // A Redis setting without a Redis is named, not left to the config's "redis.url" (and,
    // with `--config`, refused above as a flag the file replaces).
    if cli.redis.is_none() && cli.config.is_none() {
        let given: Vec<String> = ["redis_timeout", "redis_ca", "redis_cert", "redis_key"]
            .iter()
            .filter(|id| matches.value_source(id).is_some())
            .map(|id| given_as(&matches, id))
            .collect();
        if !given.is_empty() {
            let message = format!(
                "{} needs --redis URL (or RATE_LIMIT_REDIS_URL)",
                given.join(", ")
            );
            Cli::command()
                .error(ErrorKind::MissingRequiredArgument, message)
                .exit()
        }
    }
    // Not clap's `requires`: that would also fire on RATE_LIMIT_REDIS_REQUIRED=false.
    if cli.redis_required && cli.redis.is_none() && cli.config.is_none() {
        let message = "--redis-required needs --redis URL (or RATE_LIMIT_REDIS_URL)";
        Cli::command()
            .error(ErrorKind::MissingRequiredArgument, message)
            .exit()
    }
    if cli
        .admin_token
        .as_ref()
        .is_some_and(|t| t.chars().count() < 16)
    {
        let message = "--admin-token must be at least 16 characters: it guards blocks and resets";
        Cli::command()
            .error(ErrorKind::ValueValidation, message)
            .exit()
    }
    if cli
        .admin_token
        .as_deref()
        .is_some_and(|t| !tiered_ratelimit::admin::can_be_presented(t))
    {
        let message = "--admin-token must not end with whitespace (a space or a tab), nor hold \
                       a control byte: HTTP strips the one from a header and refuses the other, \
                       so no request could present it";
        Cli::command()
            .error(ErrorKind::ValueValidation, message)
            .exit()
    }
    if let Some(all) = RateLimitLayer::trusts_every_client(&cli.trusted_proxies) {
        let message = format!(
            "--trusted-proxy: together the networks hold {all}, which trusts every client to \
             name its own address; name your proxies' networks"
        );
        Cli::command()
            .error(ErrorKind::ValueValidation, message)
            .exit()
    }
    let config = match &cli.config {
        Some(path) => load(path),
        None => cli.config().map_err(|e| e.to_string()),
    };
    let config = match config {
        Ok(config) => config,
        Err(e) => Cli::command()
            .error(ErrorKind::ValueValidation, format!("invalid settings: {e}"))
            .exit(),
    };
    // With --config the Redis flags are refused (above): the file must name Redis itself.
    if cli.redis_required && config.redis().is_none() {
        let message = "--redis-required: the config file names no Redis (a [redis] section \
                       with its url); with --config the --redis flags are refused";
        Cli::command()
            .error(ErrorKind::MissingRequiredArgument, message)
            .exit()
    }
    (cli, config)
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
