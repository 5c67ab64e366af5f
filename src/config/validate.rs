//! Validation of the raw form: every rule a [`RateLimitConfig`](super::RateLimitConfig) keeps,
//! each failure a [`ConfigError`] naming the field.

use std::time::Duration;

use super::{
    ConfigError, RawConfig, RedisConfig, MAX_COMMAND_TIMEOUT, MAX_CONNECT_TIMEOUT,
    MAX_KEY_PREFIX_LEN, MAX_LIMIT, MAX_SHARDS, MAX_WINDOW, MIN_REDIS_TIMEOUT, MIN_TRACKED_KEYS,
};

/// Checks every field of `raw`.
pub(super) fn validate(raw: &RawConfig) -> Result<(), ConfigError> {
    // The limiter works in whole microseconds: less than one is no window at all.
    if raw.window < Duration::from_micros(1) {
        return Err(ConfigError::ZeroWindow);
    }
    if raw.window > MAX_WINDOW {
        return Err(ConfigError::WindowTooLarge(raw.window));
    }
    validate_limits(raw)?;
    validate_prefix(&raw.key_prefix)?;
    if raw.max_tracked_keys < MIN_TRACKED_KEYS {
        return Err(ConfigError::MaxTrackedKeysTooSmall(raw.max_tracked_keys));
    }
    if let Some(redis) = &raw.redis {
        validate_redis(redis)?;
    }
    Ok(())
}

/// Every limit at most [`MAX_LIMIT`], and every user on a defined plan.
fn validate_limits(raw: &RawConfig) -> Result<(), ConfigError> {
    for (field, value) in [
        ("user_limit", raw.user_limit),
        ("endpoint_limit", raw.endpoint_limit),
        ("global_limit", raw.global_limit),
    ] {
        if value > MAX_LIMIT {
            return Err(ConfigError::LimitTooLarge { field, value });
        }
    }
    if raw.routes.contains_key("") {
        return Err(ConfigError::EmptyRoute);
    }
    for (route, limits) in &raw.routes {
        for (field, value) in [
            ("user_limit", limits.user_limit),
            ("endpoint_limit", limits.endpoint_limit),
        ] {
            if let Some(value) = value.filter(|&v| v > MAX_LIMIT) {
                return Err(ConfigError::RouteLimitTooLarge {
                    route: route.clone(),
                    field,
                    value,
                });
            }
        }
    }
    if let Some((plan, limits)) = raw.plans.iter().find(|(_, p)| p.user_limit > MAX_LIMIT) {
        return Err(ConfigError::PlanLimitTooLarge {
            plan: plan.clone(),
            value: limits.user_limit,
        });
    }
    if let Some((user, plan)) = raw.users.iter().find(|(_, p)| !raw.plans.contains_key(*p)) {
        return Err(ConfigError::UnknownPlan {
            user: user.clone(),
            plan: plan.clone(),
        });
    }
    Ok(())
}

fn validate_prefix(prefix: &str) -> Result<(), ConfigError> {
    if prefix.is_empty() {
        return Err(ConfigError::InvalidKeyPrefix("must not be empty"));
    }
    if prefix.len() > MAX_KEY_PREFIX_LEN {
        return Err(ConfigError::InvalidKeyPrefix("longer than 128 bytes"));
    }
    if !prefix
        .bytes()
        .all(|b| b.is_ascii_graphic() && b != b'{' && b != b'}')
    {
        return Err(ConfigError::InvalidKeyPrefix(
            "only printable ASCII without spaces or braces (braces are Redis Cluster hash tags)",
        ));
    }
    Ok(())
}

fn validate_redis(redis: &RedisConfig) -> Result<(), ConfigError> {
    validate_timeout(
        "redis.command_timeout",
        redis.command_timeout,
        MAX_COMMAND_TIMEOUT,
    )?;
    validate_timeout(
        "redis.connect_timeout",
        redis.connect_timeout,
        MAX_CONNECT_TIMEOUT,
    )?;
    if let Some(recovery) = &redis.recovery {
        if recovery.initial_backoff.is_zero() {
            return Err(ConfigError::ZeroTimeout("redis.recovery.initial_backoff"));
        }
        if recovery.max_backoff < recovery.initial_backoff {
            return Err(ConfigError::BackoffBelowInitial);
        }
    }
    if !(1..=MAX_SHARDS).contains(&redis.global_shards) {
        return Err(ConfigError::ShardsOutOfRange {
            field: "redis.global_shards",
            value: redis.global_shards,
        });
    }
    if redis.url.is_empty() {
        return Err(ConfigError::InvalidRedisUrl("must not be empty".to_owned()));
    }
    let scheme = crate::redis_url::scheme(&redis.url).map_err(ConfigError::InvalidRedisUrl)?;
    validate_tls_files(redis, scheme.tls)?;
    if scheme.tls && !cfg!(feature = "tls") {
        return Err(ConfigError::TlsFeatureDisabled);
    }
    #[cfg(feature = "redis")]
    {
        crate::redis_url::fred_config(&redis.url, redis.cluster)
            .map(|_| ())
            .map_err(ConfigError::InvalidRedisUrl)
    }
    #[cfg(not(feature = "redis"))]
    {
        Err(ConfigError::RedisFeatureDisabled)
    }
}

fn validate_timeout(
    field: &'static str,
    value: Duration,
    max: Duration,
) -> Result<(), ConfigError> {
    if value.is_zero() {
        return Err(ConfigError::ZeroTimeout(field));
    }
    if value < MIN_REDIS_TIMEOUT || value > max {
        return Err(ConfigError::TimeoutOutOfRange {
            field,
            value,
            min: MIN_REDIS_TIMEOUT,
            max,
        });
    }
    Ok(())
}

/// TLS files only with a TLS URL, and a client certificate only with its key.
fn validate_tls_files(redis: &RedisConfig, tls: bool) -> Result<(), ConfigError> {
    let files = [
        ("redis.tls_ca_file", &redis.tls_ca_file),
        ("redis.tls_cert_file", &redis.tls_cert_file),
        ("redis.tls_key_file", &redis.tls_key_file),
    ];
    if let Some((field, _)) = files.iter().find(|(_, f)| f.is_some()) {
        if !tls {
            return Err(ConfigError::TlsFileWithoutTls(field));
        }
    }
    match (&redis.tls_cert_file, &redis.tls_key_file) {
        (Some(_), None) => Err(ConfigError::IncompleteClientCert("redis.tls_key_file")),
        (None, Some(_)) => Err(ConfigError::IncompleteClientCert("redis.tls_cert_file")),
        _ => Ok(()),
    }
}
