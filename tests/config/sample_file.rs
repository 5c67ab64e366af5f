//! The README's sample configuration file, read from the README itself.

use std::time::Duration;

use tiered_ratelimit::{RateLimitConfig, TimeSource};

/// The ```toml block of README.md that starts with `# ratelimit.toml`.
fn readme_sample() -> String {
    let readme = include_str!("../../README.md");
    let start = readme
        .find("```toml\n# ratelimit.toml\n")
        .expect("the README's sample file")
        + "```toml\n".len();
    let len = readme[start..].find("```").expect("the sample's end");
    readme[start..start + len].to_owned()
}

/// README: "an empty file is `RateLimitConfig::builder().build()`: a 60 s window, every tier
/// off", and the sample file under it parses to what its lines and comments say (`window`,
/// `key_prefix` and `time_source` "the default").
#[test]
fn the_readme_sample_file_parses_as_commented() {
    let text = readme_sample();
    let sample: RateLimitConfig = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let defaults = RateLimitConfig::builder().build().unwrap();
    assert_eq!(defaults.window(), Duration::from_secs(60));
    assert_eq!(
        (
            defaults.user_limit(),
            defaults.endpoint_limit(),
            defaults.global_limit()
        ),
        (0, 0, 0)
    );
    assert_eq!(sample.window(), defaults.window(), "window: the default");
    assert_eq!(
        sample.key_prefix(),
        defaults.key_prefix(),
        "key_prefix: the default"
    );
    assert_eq!(defaults.key_prefix(), "rate_limit");
    let default_redis = RateLimitConfig::builder()
        .redis_url("redis://127.0.0.1:6379")
        .build()
        .unwrap();
    let default_time_source = default_redis.redis().unwrap().time_source;
    assert_eq!(
        default_time_source,
        TimeSource::Redis,
        "time_source: the default"
    );
    let written = RateLimitConfig::builder()
        .window(Duration::from_secs(60))
        .user_limit(50)
        .endpoint_limit(100)
        .global_limit(1000)
        .key_prefix("rate_limit")
        .max_tracked_keys(1_000_000)
        .redis_url("redis://127.0.0.1:6379")
        .redis_command_timeout(Duration::from_millis(100))
        .redis_connect_timeout(Duration::from_secs(1))
        .redis_time_source(TimeSource::Redis)
        .build()
        .unwrap();
    assert_eq!(sample, written, "{text}");
}
