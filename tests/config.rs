//! Configuration: builder validation (every error names its field, nothing panics), serde from
//! JSON and TOML (one raw form: an empty file is the builder's defaults), `config::parse_duration`
//! (the one duration rule of files and command lines), the README's sample file
//! (`tests/config/sample_file.rs`), and the `ManualClock` tests drive the limiter with.

#[cfg(feature = "redis")]
#[path = "config/sample_file.rs"]
mod sample_file;

use std::time::Duration;

use tiered_ratelimit::config::{parse_duration, MAX_KEY_PREFIX_LEN, MAX_LIMIT, MAX_WINDOW};
use tiered_ratelimit::{Clock, ConfigError, ManualClock, RateLimitConfig, SystemClock, TimeSource};

const MINUTE: Duration = Duration::from_secs(60);

fn err(builder: tiered_ratelimit::RateLimitConfigBuilder) -> ConfigError {
    let e = builder.build().expect_err("the builder should refuse this");
    // Every message starts with the field it blames.
    assert!(
        e.to_string().starts_with(e.field()),
        "{e} does not start with {}",
        e.field()
    );
    e
}

// ----------------------------------------------------------------------- builder

#[test]
fn builder_defaults() {
    let c = RateLimitConfig::builder().build().unwrap();
    assert_eq!(c.window(), MINUTE);
    assert_eq!(
        (c.user_limit(), c.endpoint_limit(), c.global_limit()),
        (0, 0, 0)
    );
    assert_eq!(c.key_prefix(), "rate_limit");
    assert_eq!(c.max_tracked_keys(), 1_000_000);
    assert!(c.redis().is_none());
}

#[test]
fn builder_sets_every_field() {
    let c = RateLimitConfig::builder()
        .window(Duration::from_millis(1_500))
        .user_limit(50)
        .endpoint_limit(100)
        .global_limit(1_000)
        .key_prefix("my-app:rl")
        .max_tracked_keys(42)
        .build()
        .unwrap();
    assert_eq!(c.window(), Duration::from_millis(1_500));
    assert_eq!(
        (c.user_limit(), c.endpoint_limit(), c.global_limit()),
        (50, 100, 1_000)
    );
    assert_eq!(c.key_prefix(), "my-app:rl");
    assert_eq!(c.max_tracked_keys(), 42);
}

#[test]
fn zero_window_is_refused() {
    let e = err(RateLimitConfig::builder().window(Duration::ZERO));
    assert_eq!(e, ConfigError::ZeroWindow);
    assert_eq!(e.field(), "window");
}

#[test]
fn window_over_100_years_is_refused() {
    assert_eq!(
        RateLimitConfig::builder()
            .window(MAX_WINDOW)
            .build()
            .unwrap()
            .window(),
        MAX_WINDOW
    );
    // 100 years as a duration reads them (365.25 days each): `100y` is accepted, a second more
    // is not.
    assert_eq!(MAX_WINDOW, Duration::from_secs(3_155_760_000));
    assert_eq!(parse_duration("100y").unwrap(), MAX_WINDOW);
    let written: RateLimitConfig = toml::from_str("window = \"100y\"\nuser_limit = 1").unwrap();
    assert_eq!(written.window(), MAX_WINDOW);
    assert_eq!(
        err(RateLimitConfig::builder().window(parse_duration("100y 1s").unwrap())),
        ConfigError::WindowTooLarge(MAX_WINDOW + Duration::from_secs(1))
    );
    for too_long in [
        MAX_WINDOW + Duration::from_nanos(1),
        MAX_WINDOW + Duration::from_secs(1),
        Duration::MAX,
    ] {
        let e = err(RateLimitConfig::builder().window(too_long));
        assert_eq!(e, ConfigError::WindowTooLarge(too_long));
        assert_eq!(e.field(), "window");
    }
    // The smallest windows are fine.
    assert!(RateLimitConfig::builder()
        .window(Duration::from_micros(1))
        .build()
        .is_ok());
}

#[test]
fn limits_above_2_pow_50_are_refused_naming_the_field() {
    assert_eq!(MAX_LIMIT, 1 << 50);
    let ok = RateLimitConfig::builder()
        .user_limit(MAX_LIMIT)
        .endpoint_limit(MAX_LIMIT)
        .global_limit(MAX_LIMIT)
        .build()
        .unwrap();
    assert_eq!(ok.global_limit(), MAX_LIMIT);
    for value in [MAX_LIMIT + 1, u64::MAX] {
        for (field, builder) in [
            ("user_limit", RateLimitConfig::builder().user_limit(value)),
            (
                "endpoint_limit",
                RateLimitConfig::builder().endpoint_limit(value),
            ),
            (
                "global_limit",
                RateLimitConfig::builder().global_limit(value),
            ),
        ] {
            let e = err(builder);
            assert_eq!(e, ConfigError::LimitTooLarge { field, value });
            assert_eq!(e.field(), field);
            assert!(e.to_string().contains(&value.to_string()), "{e}");
        }
    }
}

/// A route's or a plan's limit over the maximum names which route or plan in its message
/// (quoted, so that no template can forge another line).
#[test]
fn a_route_or_plan_limit_above_2_pow_50_names_the_route_or_plan() {
    use tiered_ratelimit::RouteLimits;
    let value = MAX_LIMIT + 1;
    let e = err(RateLimitConfig::builder()
        .route(
            "/a",
            RouteLimits {
                user_limit: Some(3),
                endpoint_limit: None,
            },
        )
        .route(
            "/items/{id}",
            RouteLimits {
                user_limit: None,
                endpoint_limit: Some(value),
            },
        ));
    assert_eq!(
        e,
        ConfigError::RouteLimitTooLarge {
            route: "/items/{id}".to_owned(),
            field: "endpoint_limit",
            value,
        }
    );
    assert_eq!(e.field(), "routes.endpoint_limit");
    assert!(
        e.to_string().starts_with(
            "routes.endpoint_limit (route \"/items/{id}\"): 1125899906842625 is above"
        ),
        "{e}"
    );
    let e = err(RateLimitConfig::builder().route(
        "/x\n",
        RouteLimits {
            user_limit: Some(value),
            endpoint_limit: None,
        },
    ));
    assert_eq!(e.field(), "routes.user_limit");
    assert!(
        e.to_string()
            .starts_with("routes.user_limit (route \"/x\\n\"): "),
        "{e}"
    );
    let e = err(RateLimitConfig::builder()
        .plan("free", 5)
        .plan("pro", u64::MAX));
    assert_eq!(
        e,
        ConfigError::PlanLimitTooLarge {
            plan: "pro".to_owned(),
            value: u64::MAX,
        }
    );
    assert_eq!(e.field(), "plans.user_limit");
    assert!(
        e.to_string()
            .starts_with("plans.user_limit (plan \"pro\"): 18446744073709551615 is above"),
        "{e}"
    );
}

#[test]
fn bad_key_prefixes_are_refused() {
    for bad in [
        "",
        "a b",
        " ",
        "rate{limit",
        "rate}limit",
        "{tag}",
        "tab\there",
        "new\nline",
        "é",
        "nul\0",
    ] {
        let e = err(RateLimitConfig::builder().key_prefix(bad));
        assert!(
            matches!(e, ConfigError::InvalidKeyPrefix(_)),
            "{bad:?}: {e:?}"
        );
        assert_eq!(e.field(), "key_prefix");
    }
    let longest = "p".repeat(MAX_KEY_PREFIX_LEN);
    assert!(RateLimitConfig::builder()
        .key_prefix(longest.as_str())
        .build()
        .is_ok());
    let e = err(RateLimitConfig::builder().key_prefix(format!("{longest}p")));
    assert_eq!(e.field(), "key_prefix");
    for good in ["rl", "my-app:rate_limit", "a.b/c#d@e%f", "~!$&*()[]"] {
        assert_eq!(
            RateLimitConfig::builder()
                .key_prefix(good)
                .build()
                .unwrap()
                .key_prefix(),
            good
        );
    }
}

#[test]
fn a_key_cap_below_two_is_refused() {
    // One request may need a new user key and a new endpoint key at once: a cap of 1 would
    // deny every such request forever, with a Retry-After that never comes true.
    for cap in [0, 1] {
        let e = err(RateLimitConfig::builder().max_tracked_keys(cap));
        assert_eq!(e, ConfigError::MaxTrackedKeysTooSmall(cap));
        assert_eq!(e.field(), "max_tracked_keys");
        assert!(e.to_string().starts_with("max_tracked_keys: "), "{e}");
    }
    assert!(RateLimitConfig::builder()
        .max_tracked_keys(2)
        .build()
        .is_ok());
}

#[test]
fn empty_redis_url_is_refused() {
    let e = err(RateLimitConfig::builder().redis_url(""));
    assert!(matches!(e, ConfigError::InvalidRedisUrl(_)), "{e:?}");
    assert_eq!(e.field(), "redis.url");
    // Setting only a timeout starts a Redis section with no URL.
    let e = err(RateLimitConfig::builder().redis_command_timeout(Duration::from_millis(5)));
    assert_eq!(e.field(), "redis.url");
}

#[cfg(feature = "redis")]
#[test]
fn invalid_redis_urls_are_refused() {
    for bad in [
        "not a url",
        "localhost:6379",
        "redis://",
        "redis://:6379",
        "redis://127.0.0.1:notaport",
        "%%%",
    ] {
        let e = err(RateLimitConfig::builder().redis_url(bad));
        assert!(matches!(e, ConfigError::InvalidRedisUrl(_)), "{bad}: {e:?}");
        assert_eq!(e.field(), "redis.url");
    }
    for good in [
        "redis://127.0.0.1:6379",
        "redis://127.0.0.1:6379/2",
        "redis://user:pass@localhost:6380/0",
    ] {
        let c = RateLimitConfig::builder().redis_url(good).build().unwrap();
        let redis = c.redis().expect("a redis section");
        assert_eq!(redis.url, good);
        assert_eq!(redis.command_timeout, Duration::from_millis(100));
        assert_eq!(redis.connect_timeout, Duration::from_secs(1));
        assert_eq!(redis.time_source, TimeSource::Redis);
    }
}

/// docs/REDIS.md: a query parameter the URL's kind does not read is refused, naming it (fred
/// would drop it without a word), from the builder and from a config file.
#[cfg(feature = "redis")]
#[test]
fn a_redis_url_query_parameter_that_is_not_read_is_refused_by_name() {
    let e = err(RateLimitConfig::builder().redis_url("redis://127.0.0.1:6379?node=127.0.0.1:6380"));
    assert!(matches!(e, ConfigError::InvalidRedisUrl(_)), "{e:?}");
    assert_eq!(e.field(), "redis.url");
    assert!(e.to_string().contains("`node`"), "{e}");
    let toml = "[redis]\nurl = \"redis://127.0.0.1:6379?pasword=x\"\n";
    let e = toml::from_str::<RateLimitConfig>(toml)
        .unwrap_err()
        .to_string();
    assert!(e.contains("`pasword`"), "{e}");
    // A cluster named by the flag reads `node`.
    assert!(RateLimitConfig::builder()
        .redis_url("redis://127.0.0.1:7000?node=127.0.0.1:7001")
        .redis_cluster(true)
        .build()
        .is_ok());
}

#[cfg(not(feature = "redis"))]
#[test]
fn redis_url_without_the_redis_feature_is_refused() {
    let e = err(RateLimitConfig::builder().redis_url("redis://127.0.0.1:6379"));
    assert_eq!(e, ConfigError::RedisFeatureDisabled);
    assert_eq!(e.field(), "redis.url");
}

#[test]
fn zero_redis_timeouts_are_refused_naming_the_field() {
    let url = "redis://127.0.0.1:6379";
    let e = err(RateLimitConfig::builder()
        .redis_url(url)
        .redis_command_timeout(Duration::ZERO));
    assert_eq!(e, ConfigError::ZeroTimeout("redis.command_timeout"));
    assert_eq!(e.field(), "redis.command_timeout");
    let e = err(RateLimitConfig::builder()
        .redis_url(url)
        .redis_connect_timeout(Duration::ZERO));
    assert_eq!(e, ConfigError::ZeroTimeout("redis.connect_timeout"));
    assert_eq!(e.field(), "redis.connect_timeout");
}

#[test]
fn no_combination_of_values_panics() {
    let windows = [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(1),
        MINUTE,
        MAX_WINDOW,
        Duration::MAX,
    ];
    let limits = [0, 1, MAX_LIMIT, MAX_LIMIT + 1, u64::MAX];
    let prefixes = ["", "ok", "{", "a b", "é"];
    let keys = [0, 1, usize::MAX];
    let urls = [None, Some(""), Some("redis://127.0.0.1:1"), Some("%%%")];
    let mut built = 0;
    let mut refused = 0;
    for &w in &windows {
        for &l in &limits {
            for p in prefixes {
                for &k in &keys {
                    for url in urls {
                        let result = std::panic::catch_unwind(|| {
                            let mut b = RateLimitConfig::builder()
                                .window(w)
                                .user_limit(l)
                                .endpoint_limit(l)
                                .global_limit(l)
                                .key_prefix(p)
                                .max_tracked_keys(k);
                            if let Some(url) = url {
                                b = b.redis_url(url);
                            }
                            b.build()
                        });
                        match result.expect("build panicked") {
                            Ok(_) => built += 1,
                            Err(e) => {
                                assert!(!e.field().is_empty());
                                assert!(e.to_string().starts_with(e.field()), "{e}");
                                refused += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(built > 0 && refused > 0);
}

// ------------------------------------------------------------------------- serde

fn expected(window: Duration) -> RateLimitConfig {
    RateLimitConfig::builder()
        .window(window)
        .user_limit(50)
        .endpoint_limit(100)
        .global_limit(1_000)
        .build()
        .unwrap()
}

#[test]
fn json_with_human_windows() {
    for (window, duration) in [
        (r#""60s""#, MINUTE),
        (r#""1500ms""#, Duration::from_millis(1_500)),
        (r#""1m""#, MINUTE),
        (r#""2h""#, Duration::from_secs(7_200)),
        ("60", MINUTE),
        ("3600", Duration::from_secs(3_600)),
    ] {
        let json = format!(
            r#"{{"window": {window}, "user_limit": 50, "endpoint_limit": 100, "global_limit": 1000}}"#
        );
        let c: RateLimitConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(c, expected(duration), "{json}");
    }
}

#[test]
fn toml_with_human_windows() {
    for (window, duration) in [
        (r#""60s""#, MINUTE),
        (r#""1500ms""#, Duration::from_millis(1_500)),
        (r#""1m""#, MINUTE),
        ("60", MINUTE),
        ("90", Duration::from_secs(90)),
    ] {
        let text = format!(
            "window = {window}\nuser_limit = 50\nendpoint_limit = 100\nglobal_limit = 1000\n"
        );
        let c: RateLimitConfig = toml::from_str(&text).unwrap();
        assert_eq!(c, expected(duration), "{text}");
    }
}

#[test]
fn serde_fills_defaults() {
    let c: RateLimitConfig = serde_json::from_str(r#"{"window": "60s"}"#).unwrap();
    assert_eq!(c, RateLimitConfig::builder().build().unwrap());
    let c: RateLimitConfig = toml::from_str("window = \"30s\"\nglobal_limit = 7").unwrap();
    assert_eq!(c.global_limit(), 7);
    assert_eq!(c.user_limit(), 0);
    assert_eq!(c.key_prefix(), "rate_limit");
    assert_eq!(c.max_tracked_keys(), 1_000_000);
}

#[cfg(feature = "redis")]
#[test]
fn toml_with_a_redis_section() {
    let text = r#"
        window = "1m"
        user_limit = 5
        key_prefix = "svc"

        [redis]
        url = "redis://127.0.0.1:6379/1"
        command_timeout = "50ms"
        connect_timeout = 2
        time_source = "redis"
    "#;
    let c: RateLimitConfig = toml::from_str(text).unwrap();
    let redis = c.redis().expect("redis section");
    assert_eq!(redis.url, "redis://127.0.0.1:6379/1");
    assert_eq!(redis.command_timeout, Duration::from_millis(50));
    assert_eq!(redis.connect_timeout, Duration::from_secs(2));
    assert_eq!(redis.time_source, TimeSource::Redis);
    assert_eq!(c.key_prefix(), "svc");
    let built = RateLimitConfig::builder()
        .window(MINUTE)
        .user_limit(5)
        .key_prefix("svc")
        .redis_url("redis://127.0.0.1:6379/1")
        .redis_command_timeout(Duration::from_millis(50))
        .redis_connect_timeout(Duration::from_secs(2))
        .redis_time_source(TimeSource::Redis)
        .build()
        .unwrap();
    assert_eq!(c, built);
}

/// One raw form, one set of defaults: an empty file is the builder's defaults.
#[test]
fn an_empty_file_is_the_builders_defaults() {
    let defaults = RateLimitConfig::builder().build().unwrap();
    let from_toml: RateLimitConfig = toml::from_str("").unwrap();
    assert_eq!(from_toml, defaults);
    let from_json: RateLimitConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(from_json, defaults);
    assert_eq!(from_toml.window(), MINUTE);
}

/// A bare number is seconds, as a number or as a string, in a file as on a command line.
#[test]
fn a_bare_number_is_seconds_everywhere() {
    let with_unit: RateLimitConfig = toml::from_str("window = \"60s\"").unwrap();
    let number: RateLimitConfig = toml::from_str("window = 60").unwrap();
    let string: RateLimitConfig = toml::from_str("window = \"60\"").unwrap();
    assert_eq!(number, with_unit);
    assert_eq!(string, with_unit);
    assert_eq!(with_unit.window(), MINUTE);
    assert_eq!(parse_duration("60").unwrap(), with_unit.window());
}

/// The `[redis]` section's defaults are the builder's: only the URL is needed, and it is.
#[cfg(feature = "redis")]
#[test]
fn a_redis_section_has_the_builders_defaults() {
    let from_toml: RateLimitConfig =
        toml::from_str("[redis]\nurl = \"redis://127.0.0.1:6379\"").unwrap();
    let built = RateLimitConfig::builder()
        .redis_url("redis://127.0.0.1:6379")
        .build()
        .unwrap();
    assert_eq!(from_toml, built);
    let redis = built.redis().unwrap();
    assert_eq!(redis.command_timeout, Duration::from_millis(100));
    assert_eq!(redis.connect_timeout, Duration::from_secs(1));
    let recovery: RateLimitConfig =
        toml::from_str("[redis]\nurl = \"redis://127.0.0.1:6379\"\nrecovery = {}").unwrap();
    let recovery = recovery.redis().unwrap().recovery.unwrap();
    assert_eq!(
        (recovery.initial_backoff, recovery.max_backoff),
        (Duration::from_secs(1), Duration::from_secs(30))
    );
    let e = toml::from_str::<RateLimitConfig>("[redis]\ncluster = true").unwrap_err();
    assert!(e.to_string().contains("redis.url"), "{e}");
}

#[test]
fn unknown_fields_are_rejected() {
    let e = serde_json::from_str::<RateLimitConfig>(r#"{"window": "60s", "user_limt": 5}"#)
        .unwrap_err();
    assert!(e.to_string().contains("user_limt"), "{e}");
    let e = toml::from_str::<RateLimitConfig>("window = \"60s\"\nglobal = 5").unwrap_err();
    assert!(e.to_string().contains("global"), "{e}");
    let e = toml::from_str::<RateLimitConfig>(
        "window = \"60s\"\n[redis]\nurl = \"redis://127.0.0.1\"\ntimeout = \"1s\"",
    )
    .unwrap_err();
    assert!(e.to_string().contains("timeout"), "{e}");
}

#[test]
fn serde_errors_name_the_field() {
    for (json, field) in [
        (r#"{"window": "0s"}"#, "window"),
        (r#"{"window": 0}"#, "window"),
        (r#"{"window": "0ms"}"#, "window"),
        (
            r#"{"window": "60s", "user_limit": 9007199254740993}"#,
            "user_limit",
        ),
        (r#"{"window": "60s", "key_prefix": "a b"}"#, "key_prefix"),
        (
            r#"{"window": "60s", "max_tracked_keys": 0}"#,
            "max_tracked_keys",
        ),
        (r#"{"window": "60s", "redis": {"url": ""}}"#, "redis.url"),
        (
            r#"{"window": "60s", "redis": {"url": "redis://127.0.0.1", "command_timeout": "0s"}}"#,
            "redis.command_timeout",
        ),
    ] {
        let e = serde_json::from_str::<RateLimitConfig>(json).unwrap_err();
        assert!(e.to_string().contains(field), "{json}: {e}");
    }
    let e = toml::from_str::<RateLimitConfig>("window = \"0s\"").unwrap_err();
    assert!(e.to_string().contains("window"), "{e}");
}

#[test]
fn malformed_windows_are_rejected() {
    for json in [
        r#"{"window": "-5s"}"#,
        r#"{"window": -5}"#,
        r#"{"window": "sixty seconds"}"#,
        r#"{"window": "60 parsecs"}"#,
        r#"{"window": 1.5}"#,
        r#"{"window": null}"#,
        r#"{"window": "101y"}"#,
        r#"{"window": "40000d"}"#,
        r#"{"window": ""}"#,
        r#"{"window": "60S"}"#,
        r#"{"window": true}"#,
    ] {
        assert!(
            serde_json::from_str::<RateLimitConfig>(json).is_err(),
            "{json} was accepted"
        );
    }
}

#[test]
fn round_trips_through_json_and_toml() {
    let mut configs = vec![
        RateLimitConfig::builder().build().unwrap(),
        expected(MINUTE),
        expected(Duration::from_millis(1_500)),
        expected(Duration::from_micros(1_234_567)),
        RateLimitConfig::builder()
            .window(MAX_WINDOW)
            .user_limit(MAX_LIMIT)
            .key_prefix("p:q")
            .max_tracked_keys(7)
            .build()
            .unwrap(),
    ];
    if cfg!(feature = "redis") {
        configs.push(
            RateLimitConfig::builder()
                .window(Duration::from_secs(90))
                .global_limit(3)
                .redis_url("redis://127.0.0.1:6379/3")
                .redis_command_timeout(Duration::from_millis(250))
                .redis_connect_timeout(Duration::from_secs(5))
                .redis_time_source(TimeSource::Redis)
                .build()
                .unwrap(),
        );
    }
    for config in configs {
        let json = serde_json::to_string(&config).unwrap();
        let back: RateLimitConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, config, "{json}");
        let text = toml::to_string(&config).unwrap();
        let back: RateLimitConfig = toml::from_str(&text).unwrap();
        assert_eq!(back, config, "{text}");
        // The window is written the way people write it.
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let window = value["window"].as_str().expect("a string window");
        assert_eq!(parse_duration(window).unwrap(), config.window());
    }
    let json = serde_json::to_value(expected(MINUTE)).unwrap();
    assert_eq!(json["window"], "1m");
    let json = serde_json::to_value(expected(Duration::from_millis(1_500))).unwrap();
    assert_eq!(json["window"], "1s 500ms");
}

#[test]
fn time_source_serde_names() {
    assert_eq!(serde_json::to_string(&TimeSource::App).unwrap(), r#""app""#);
    assert_eq!(
        serde_json::from_str::<TimeSource>(r#""redis""#).unwrap(),
        TimeSource::Redis
    );
    assert!(serde_json::from_str::<TimeSource>(r#""Redis""#).is_err());
    assert_eq!(TimeSource::default(), TimeSource::Redis);
    assert_eq!(TimeSource::Redis.to_string(), "redis");
}

// --------------------------------------------------------------- parse_duration

#[test]
fn parse_duration_accepts_whole_numbers_with_units() {
    for (input, expect) in [
        ("60s", MINUTE),
        ("1500ms", Duration::from_millis(1_500)),
        ("1m", MINUTE),
        ("2h", Duration::from_secs(7_200)),
        ("1d", Duration::from_secs(86_400)),
        ("250us", Duration::from_micros(250)),
        ("7µs", Duration::from_micros(7)),
        ("0s", Duration::ZERO),
        ("007s", Duration::from_secs(7)),
        (" 60s ", MINUTE),
        ("3600000000us", Duration::from_secs(3_600)),
        ("18446744073709551615s", Duration::from_secs(u64::MAX)),
        // humantime's forms: fractions, spaces, longer unit names, sums.
        ("1.5s", Duration::from_millis(1_500)),
        ("60 s", MINUTE),
        ("60sec", MINUTE),
        ("1h30m", Duration::from_secs(5_400)),
        ("1h 30m", Duration::from_secs(5_400)),
        ("1w", Duration::from_secs(7 * 86_400)),
        // A bare whole number is seconds, as a TOML or JSON number is.
        ("60", MINUTE),
        (" 90 ", Duration::from_secs(90)),
        ("0", Duration::ZERO),
    ] {
        assert_eq!(parse_duration(input), Ok(expect), "{input:?}");
    }
}

#[test]
fn parse_duration_rejects_everything_else() {
    for input in [
        "",
        " ",
        "s",
        "ms",
        "-1s",
        "+1s",
        "-60",
        "1,5s",
        "60S",
        "60 parsecs",
        "s60",
        "1.5",
        "99999999999999999999s",
        "99999999999999999999",
        "18446744073709551615d",
        // humantime counts sub-second units in u64 nanoseconds (up to ~584 years).
        "18446744073709551615us",
        "٣s", // an Arabic-Indic digit
        "٣",
    ] {
        let e = parse_duration(input).expect_err(input);
        let msg = e.to_string();
        assert!(msg.contains("invalid duration"), "{input:?}: {msg}");
        assert!(
            msg.contains("60s"),
            "the message shows the accepted forms: {msg}"
        );
    }
    // A huge input is not echoed in full.
    let huge = "9".repeat(10_000);
    let msg = parse_duration(&huge).unwrap_err().to_string();
    assert!(msg.len() < 400, "{} bytes", msg.len());
    let huge_unit = format!("1{}", "x".repeat(10_000));
    let msg = parse_duration(&huge_unit).unwrap_err().to_string();
    assert!(msg.len() < 400, "{} bytes", msg.len());
}

// ------------------------------------------------------------------ ManualClock

#[test]
fn manual_clock_starts_at_the_epoch_or_where_told() {
    assert_eq!(ManualClock::new().now(), Duration::ZERO);
    assert_eq!(ManualClock::default().now(), Duration::ZERO);
    assert_eq!(ManualClock::at(MINUTE).now(), MINUTE);
    // The limiter works in whole microseconds: finer parts are dropped.
    assert_eq!(
        ManualClock::at(Duration::from_nanos(1_999)).now(),
        Duration::from_micros(1)
    );
}

#[test]
fn manual_clock_set_and_advance() {
    let clock = ManualClock::at(Duration::from_secs(100));
    clock.advance(Duration::from_secs(5));
    assert_eq!(clock.now(), Duration::from_secs(105));
    clock.advance(Duration::from_micros(1));
    assert_eq!(clock.now(), Duration::from_micros(105_000_001));
    clock.advance(Duration::ZERO);
    assert_eq!(clock.now(), Duration::from_micros(105_000_001));
    clock.set(Duration::from_secs(10)); // backwards too
    assert_eq!(clock.now(), Duration::from_secs(10));
    clock.set(Duration::ZERO);
    assert_eq!(clock.now(), Duration::ZERO);
}

#[test]
fn manual_clock_clones_share_one_time() {
    let clock = ManualClock::new();
    let a = clock.clone();
    let b = a.clone();
    a.advance(Duration::from_secs(5));
    assert_eq!(clock.now(), Duration::from_secs(5));
    assert_eq!(b.now(), Duration::from_secs(5));
    b.set(Duration::from_millis(1_500));
    assert_eq!(clock.now(), Duration::from_millis(1_500));
    assert_eq!(a.now(), Duration::from_millis(1_500));
    // Across threads, too.
    let moved = clock.clone();
    std::thread::spawn(move || moved.advance(Duration::from_secs(1)))
        .join()
        .unwrap();
    assert_eq!(a.now(), Duration::from_millis(2_500));
    // A clock made separately does not share.
    let other = ManualClock::at(Duration::from_millis(2_500));
    other.advance(MINUTE);
    assert_eq!(clock.now(), Duration::from_millis(2_500));
}

#[test]
fn manual_clock_is_a_clock_object() {
    let clock = ManualClock::at(MINUTE);
    let dynamic: Box<dyn Clock> = Box::new(clock.clone());
    clock.advance(Duration::from_secs(1));
    assert_eq!(dynamic.now(), Duration::from_secs(61));
}

#[test]
fn system_clock_is_wall_time() {
    let now = SystemClock.now();
    // After 2020-01-01 and before 2255 (2^53 µs).
    assert!(now > Duration::from_secs(1_577_836_800), "{now:?}");
    assert!(now < Duration::from_micros(1 << 53), "{now:?}");
}

#[test]
fn a_window_under_one_microsecond_is_no_window() {
    let e = RateLimitConfig::builder()
        .window(Duration::from_nanos(500))
        .user_limit(1)
        .build()
        .unwrap_err();
    assert_eq!(e, ConfigError::ZeroWindow);
    assert_eq!(e.field(), "window");
    assert!(RateLimitConfig::builder()
        .window(Duration::from_micros(1))
        .build()
        .is_ok());
}

#[test]
fn redis_urls_of_other_schemes_are_rejected() {
    for url in ["http://127.0.0.1:6379", "ftp://x", "127.0.0.1:6379"] {
        let e = RateLimitConfig::builder()
            .redis_url(url)
            .build()
            .unwrap_err();
        assert!(matches!(e, ConfigError::InvalidRedisUrl(_)), "{url}: {e}");
        assert_eq!(e.field(), "redis.url");
    }
    for url in [
        "redis://127.0.0.1:6379",
        "redis-cluster://127.0.0.1:7000?node=127.0.0.1:7001",
    ] {
        let built = RateLimitConfig::builder().redis_url(url).build();
        if cfg!(feature = "redis") {
            assert!(built.is_ok(), "{url}");
        } else {
            assert_eq!(
                built.unwrap_err(),
                ConfigError::RedisFeatureDisabled,
                "{url}"
            );
        }
    }
    // TLS only with the `tls` feature: never plaintext instead.
    let tls = RateLimitConfig::builder()
        .redis_url("rediss://127.0.0.1:6379")
        .build();
    if cfg!(feature = "tls") {
        assert!(tls.is_ok());
    } else {
        assert_eq!(tls.unwrap_err(), ConfigError::TlsFeatureDisabled);
    }
}

#[test]
fn manual_clock_advance_saturates_instead_of_wrapping() {
    let clock = ManualClock::at(Duration::from_micros(u64::MAX - 5));
    clock.advance(Duration::from_secs(1));
    assert_eq!(clock.now(), Duration::from_micros(u64::MAX));
}

#[test]
#[cfg(feature = "redis")] // a Redis URL is refused without it
fn redis_recovery_is_opt_in_and_validated() {
    let toml_text = r#"
        window = "60s"
        user_limit = 5
        [redis]
        url = "redis://127.0.0.1:6379"
        recovery = { initial_backoff = "500ms", max_backoff = "30s" }
    "#;
    let config: RateLimitConfig = toml::from_str(toml_text).unwrap();
    let recovery = config.redis().unwrap().recovery.unwrap();
    assert_eq!(recovery.initial_backoff, Duration::from_millis(500));
    assert_eq!(recovery.max_backoff, Duration::from_secs(30));
    let plain: RateLimitConfig =
        toml::from_str("window = \"60s\"\n[redis]\nurl = \"redis://127.0.0.1:6379\"\n").unwrap();
    assert_eq!(
        plain.redis().unwrap().recovery,
        None,
        "once for good by default"
    );

    let e = RateLimitConfig::builder()
        .redis_url("redis://127.0.0.1:6379")
        .redis_recovery(Duration::ZERO, Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert_eq!(e.field(), "redis.recovery.initial_backoff");
    let e = RateLimitConfig::builder()
        .redis_url("redis://127.0.0.1:6379")
        .redis_recovery(Duration::from_secs(2), Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert_eq!(e, ConfigError::BackoffBelowInitial);
    assert_eq!(e.field(), "redis.recovery.max_backoff");
}

/// A route override under an empty template would never apply (no request is counted under an
/// empty endpoint): refused, from the builder and from a file.
#[test]
fn an_empty_route_template_is_refused() {
    let limits = tiered_ratelimit::RouteLimits {
        user_limit: Some(5),
        endpoint_limit: None,
    };
    let e = err(RateLimitConfig::builder().route("", limits));
    assert_eq!(e, ConfigError::EmptyRoute);
    assert_eq!(e.field(), "routes");
    let parsed: Result<RateLimitConfig, _> = toml::from_str("[routes.\"\"]\nuser_limit = 5\n");
    let e = parsed.expect_err("an empty route in a file");
    assert!(e.to_string().contains("routes"), "{e}");
}
