//! The demo server as its users run it: separate processes, real HTTP, one shared Redis.
#![cfg(all(feature = "redis", feature = "axum", feature = "admin"))]

mod common;

use std::process::Command;
use std::time::Duration;

use common::demo::{example_binary, server_command, Demo};
use common::RedisServer;
use reqwest::StatusCode;

#[tokio::test]
async fn a_burst_gets_exactly_five_200s_then_429s() {
    let demo = Demo::start(&["--window", "60s", "--user-limit", "5"]);
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for i in 0..8 {
        let resp = client
            .get(demo.url(&format!("/api/v1/items/{i}")))
            .header("x-user-id", "burst")
            .send()
            .await
            .unwrap();
        let remaining = resp.headers()["x-ratelimit-remaining"]
            .to_str()
            .unwrap()
            .to_owned();
        let retry: u64 = resp.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        if resp.status() == StatusCode::OK {
            assert_eq!(remaining, (4 - i).to_string());
            assert_eq!(retry, 0);
        } else {
            assert_eq!(remaining, "0");
            assert!((1..=60).contains(&retry));
        }
        statuses.push(resp.status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
    let health = client.get(demo.url("/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    let post = client
        .post(demo.url("/api/v1/items"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(post.status(), StatusCode::CREATED);
}

/// `--window 60` means 60 s, as `window = 60` does in a config file: one rule, and a wrong
/// duration gets the file's message too.
#[tokio::test]
async fn a_bare_window_is_seconds_as_in_a_file() {
    let demo = Demo::start(&["--window", "60", "--user-limit", "1"]);
    let client = reqwest::Client::new();
    let get = || {
        client
            .get(demo.url("/api/v1/items"))
            .header("x-user-id", "bare")
            .send()
    };
    assert_eq!(get().await.unwrap().status(), StatusCode::OK);
    let denied = get().await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = denied.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((59..=60).contains(&retry), "a 60 s window, retry {retry}");

    let out = server_command()
        .args(["--window", "60 parsecs"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let cli = String::from_utf8_lossy(&out.stderr);
    let file = toml::from_str::<tiered_ratelimit::RateLimitConfig>("window = \"60 parsecs\"")
        .unwrap_err()
        .to_string();
    let rule = tiered_ratelimit::config::parse_duration("60 parsecs")
        .unwrap_err()
        .to_string();
    assert!(cli.contains(&rule), "{cli}");
    assert!(file.contains(&rule), "{file}");
}

#[tokio::test]
async fn bad_flags_are_a_clear_error_not_a_crash() {
    let out = server_command().args(["--window", "0s"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("window"), "{err}");
    let out = server_command()
        .args(["--user-limit", "many"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test]
async fn redis_required_exits_non_zero_with_the_cause_of_a_misconfiguration() {
    let redis = RedisServer::start();
    redis.cli(&["CONFIG", "SET", "requirepass", "secret"]);
    let wrong = format!("redis://:wrong@127.0.0.1:{}", redis.port());
    let out = server_command()
        .args([
            "--listen",
            "127.0.0.1:0",
            "--redis",
            &wrong,
            "--redis-required",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--redis-required"), "{err}");
    assert!(err.contains("WRONGPASS"), "{err}");
    assert!(
        err.contains("fix: set the right user and password"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "it never listened");

    // Without the flag the same settings serve, on memory.
    let demo = Demo::start(&["--user-limit", "3", "--redis", &wrong]);
    let status = reqwest::get(demo.url("/api/v1/items"))
        .await
        .unwrap()
        .status();
    assert_eq!(status, StatusCode::OK);

    // With the right password and the flag: serves, on Redis.
    let right = format!("redis://:secret@127.0.0.1:{}", redis.port());
    let demo = Demo::start(&[
        "--user-limit",
        "3",
        "--redis",
        &right,
        "--redis-required",
        "--redis-timeout",
        "2s",
    ]);
    let status = reqwest::Client::new()
        .get(demo.url("/api/v1/items"))
        .header("x-user-id", "req")
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, StatusCode::OK);
    let card = redis.cli(&[
        "-a",
        "secret",
        "--no-auth-warning",
        "ZCARD",
        "rate_limit:user:req",
    ]);
    assert_eq!(card.trim(), "1");
}

#[test]
fn tls_flags_are_checked_with_the_other_settings() {
    let run = |args: &[&str]| {
        let out = server_command().args(args).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["--redis", "redis://127.0.0.1:1", "--redis-ca", "/ca.pem"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("redis.tls_ca_file"), "{err}");
    let (code, err) = run(&["--redis", "rediss://127.0.0.1:1", "--redis-cert", "/c.pem"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--redis-key"), "{err}");
    let (code, err) = run(&["--redis-required"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--redis URL"), "{err}");
    let (code, err) = run(&["--redis", "redis://127.0.0.1:1", "--global-shards", "65"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("redis.global_shards"), "{err}");
    // A Redis flag without a Redis names the flag given (an audit saw "redis.url: must not
    // be empty" for each).
    for flags in [
        &["--redis-ca", "/ca.pem"][..],
        &["--redis-timeout", "50ms"],
        &["--redis-cert", "/c.pem", "--redis-key", "/k.pem"],
    ] {
        let (code, err) = run(flags);
        assert_eq!(code, Some(2), "{flags:?}");
        assert!(
            err.contains(flags[0]) && err.contains("needs --redis"),
            "{err}"
        );
    }
    // Set as a variable, it is named as the deployment set it.
    let out = server_command()
        .env("RATE_LIMIT_REDIS_TIMEOUT", "50ms")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains("RATE_LIMIT_REDIS_TIMEOUT (--redis-timeout) needs --redis"),
        "{err}"
    );
}

/// With `--config`, the Redis flags are refused and the file says where Redis is; an outside
/// review gave `--redis URL --redis-required` with a file that names no Redis, and the demo
/// served on memory: each instance with limits of its own, what the flag exists to prevent.
#[test]
fn redis_required_with_a_config_file_that_names_no_redis_is_refused() {
    let dir = common::temp_dir("required");
    let file = dir.join("plain.toml");
    std::fs::write(&file, "window = \"60s\"\nuser_limit = 5\n").unwrap();
    let out = server_command()
        .args(["--listen", "127.0.0.1:0", "--redis-required"])
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--redis-required"), "{err}");
    assert!(err.contains("[redis]"), "{err}");
    assert!(out.stdout.is_empty(), "it never listened");
    // A setting the file replaces, given as a flag or a variable beside it, is refused and
    // named, not dropped without a word (an outside audit's `--redis` with `--config`).
    let out = server_command()
        .args(["--listen", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1"])
        .args(["--user-limit", "1", "--config"])
        .arg(&file)
        .env("RATE_LIMIT_WINDOW", "5s")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "--config: RATE_LIMIT_WINDOW (--window), --user-limit, --redis would be ignored"
        ),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "it never listened");
    std::fs::remove_dir_all(&dir).ok();
}

/// The demo's flags are parsed as Rust command-line tools parse theirs (clap): `--help` lists
/// every flag with its environment variable and exits 0; `--version` prints the version; an
/// unknown flag exits 2 and names it (both used to answer "needs a value").
#[test]
fn help_version_and_unknown_flags_behave_like_any_rust_cli() {
    let out = server_command().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for (flag, variable) in [
        ("--listen", "RATE_LIMIT_LISTEN"),
        ("--window", "RATE_LIMIT_WINDOW"),
        ("--user-limit", "RATE_LIMIT_USER_LIMIT"),
        ("--endpoint-limit", "RATE_LIMIT_ENDPOINT_LIMIT"),
        ("--global-limit", "RATE_LIMIT_GLOBAL_LIMIT"),
        ("--redis", "RATE_LIMIT_REDIS_URL"),
        ("--redis-timeout", "RATE_LIMIT_REDIS_TIMEOUT"),
        ("--global-shards", "RATE_LIMIT_GLOBAL_SHARDS"),
        ("--redis-ca", "RATE_LIMIT_REDIS_CA"),
        ("--redis-cert", "RATE_LIMIT_REDIS_CERT"),
        ("--redis-key", "RATE_LIMIT_REDIS_KEY"),
        ("--redis-required", "RATE_LIMIT_REDIS_REQUIRED"),
        ("--trusted-proxy", "RATE_LIMIT_TRUSTED_PROXIES"),
        ("--client-ip-header", "RATE_LIMIT_CLIENT_IP_HEADER"),
        ("--max-tracked-keys", "RATE_LIMIT_MAX_TRACKED_KEYS"),
    ] {
        assert!(help.contains(&format!("{flag} <")) || help.contains(&format!("{flag}\n")));
        assert!(
            help.contains(&format!("[env: {variable}=]")),
            "{variable}:\n{help}"
        );
    }
    assert!(help.contains("--version"), "{help}");

    let out = server_command().arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let version = String::from_utf8_lossy(&out.stdout);
    assert_eq!(version, format!("server {}\n", env!("CARGO_PKG_VERSION")));

    let out = server_command()
        .args(["--listen", "127.0.0.1:0", "--user-limt", "5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unexpected argument '--user-limt' found"),
        "{err}"
    );
    assert!(
        err.contains("--user-limit"),
        "clap suggests the near flag: {err}"
    );
    assert!(out.stdout.is_empty(), "it never listened");
}

/// `RATE_LIMIT_*` variables set what their flags set, Redis included; a flag wins over its
/// variable.
#[tokio::test]
async fn environment_variables_configure_the_demo_and_flags_win() {
    let redis = RedisServer::start();
    let url = redis.url();
    let demo = Demo::start_with_env(
        &[],
        &[
            ("RATE_LIMIT_REDIS_URL", &url),
            ("RATE_LIMIT_REDIS_REQUIRED", "true"),
            ("RATE_LIMIT_REDIS_TIMEOUT", "2s"),
            ("RATE_LIMIT_USER_LIMIT", "2"),
            ("RATE_LIMIT_WINDOW", "90"),
        ],
    );
    let client = reqwest::Client::new();
    let get = |demo: &Demo| {
        client
            .get(demo.url("/api/v1/items"))
            .header("x-user-id", "env")
            .send()
    };
    assert_eq!(get(&demo).await.unwrap().status(), StatusCode::OK);
    assert_eq!(get(&demo).await.unwrap().status(), StatusCode::OK);
    let denied = get(&demo).await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = denied.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (89..=90).contains(&retry),
        "a bare 90 is 90 s, retry {retry}"
    );
    assert_eq!(redis.cli(&["ZCARD", "rate_limit:user:env"]).trim(), "2");

    // The flag wins over its variable; the other variables still count.
    let demo = Demo::start_with_env(
        &["--user-limit", "3"],
        &[
            ("RATE_LIMIT_USER_LIMIT", "1"),
            ("RATE_LIMIT_GLOBAL_LIMIT", "4"),
        ],
    );
    let mut statuses = Vec::new();
    for user in ["a", "a", "a", "a", "b", "c"] {
        let status = client
            .get(demo.url("/api/v1/items"))
            .header("x-user-id", user)
            .send()
            .await
            .unwrap()
            .status();
        statuses.push(status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 200, 429]);

    let out = server_command()
        .env("RATE_LIMIT_USER_LIMIT", "many")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'many' for '--user-limit <N>'"), "{err}");
}

/// The gRPC example answers `--help` (it used to print an error and exit 1).
#[test]
fn the_grpc_example_answers_help() {
    let out = Command::new(example_binary("grpc"))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("--demo"), "{help}");
    let out = Command::new(example_binary("grpc"))
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Two server processes behind one Redis: hundreds of concurrent requests spread over both
/// admit exactly the global limit, not one more, not one less.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_server_processes_on_one_redis_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    let url = redis.url();
    let args = [
        "--window",
        "60s",
        "--user-limit",
        "0",
        "--endpoint-limit",
        "0",
        "--global-limit",
        "100",
        "--redis",
        &url,
        "--redis-timeout",
        "2s",
    ];
    let a = Demo::start(&args);
    let b = Demo::start(&args);
    let client = reqwest::Client::new();
    let mut handles = Vec::new();
    for i in 0..400 {
        let url = if i % 2 == 0 {
            a.url("/api/v1/items")
        } else {
            b.url("/api/v1/items")
        };
        let client = client.clone();
        handles.push(tokio::spawn(async move {
            client.get(url).send().await.unwrap().status()
        }));
    }
    let mut ok = 0;
    let mut limited = 0;
    for h in handles {
        match h.await.unwrap() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => limited += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!((ok, limited), (100, 300));
    assert_eq!(redis.cli(&["ZCARD", "rate_limit:global"]).trim(), "100");
}

#[tokio::test]
async fn the_server_keeps_answering_when_its_redis_dies() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let demo = Demo::start(&[
        "--user-limit",
        "3",
        "--redis",
        &url,
        "--redis-timeout",
        "300ms",
    ]);
    let client = reqwest::Client::new();
    let get = || {
        client
            .get(demo.url("/api/v1/items"))
            .header("x-user-id", "z")
            .send()
    };
    assert_eq!(get().await.unwrap().status(), StatusCode::OK);
    redis.kill();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let t = std::time::Instant::now();
        statuses.push(get().await.unwrap().status().as_u16());
        // The timeout and a loaded machine's slack (the exact bound is tests/redis.rs's).
        assert!(
            t.elapsed() < Duration::from_millis(1_300),
            "{:?}",
            t.elapsed()
        );
    }
    // Memory starts empty after the fallback: three more, then 429s.
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
}

/// README: `GET /rate-limit` answers the caller's usage, or a 503 naming the error while the
/// store cannot be read; a usage request does not swap the limiter to memory, a check does.
#[tokio::test]
async fn the_usage_route_answers_503_while_redis_hangs_and_its_usage_once_it_is_back() {
    let redis = RedisServer::start();
    let demo = Demo::start(&[
        "--user-limit",
        "3",
        "--redis",
        &redis.url(),
        "--redis-timeout",
        "300ms",
    ]);
    let client = reqwest::Client::new();
    let get = |path: &str| client.get(demo.url(path)).header("x-user-id", "u").send();
    assert_eq!(get("/api/v1/items").await.unwrap().status(), StatusCode::OK);
    redis.pause();
    for _ in 0..2 {
        let t = std::time::Instant::now();
        let response = get("/rate-limit").await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            t.elapsed() < Duration::from_millis(1_300),
            "{:?}",
            t.elapsed()
        );
        // The error, in words (its wording depends on where the timeout met the request).
        let body = response.text().await.unwrap();
        assert!(!body.trim().is_empty(), "a 503 with no reason");
    }
    redis.resume();
    // Still on Redis: the request recorded before the pause is there (a reply the paused
    // server still owed may come first).
    let mut response = get("/rate-limit").await.unwrap();
    for _ in 0..20 {
        if response.status() == StatusCode::OK {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        response = get("/rate-limit").await.unwrap();
    }
    assert_eq!(response.status(), StatusCode::OK);
    let usage: serde_json::Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    let items = &usage["resources"]["/api/v1/items"];
    assert!(items.to_string().contains("\"used\":1"), "{usage}");
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_client_is_limited() {
    let demo = Demo::start(&["--user-limit", "2", "--trusted-proxy", "127.0.0.0/8"]);
    let client = reqwest::Client::new();
    let get = |xff: &'static str| {
        client
            .get(demo.url("/api/v1/items"))
            .header("x-forwarded-for", xff)
            .send()
    };
    assert_eq!(
        get("6.6.6.6, 198.51.100.4").await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        get("7.7.7.7, 198.51.100.4").await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        get("8.8.8.8, 198.51.100.4").await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS,
        "spoofing the leftmost entry does not help"
    );
    assert_eq!(get("198.51.100.5").await.unwrap().status(), StatusCode::OK);
    // `/rate-limit` reports the bucket the layer charged: the forwarded client's, not the
    // proxy's.
    let text = client
        .get(demo.url("/rate-limit"))
        .header("x-forwarded-for", "198.51.100.4")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let usage: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(usage["user"], "198.51.100.4", "{usage}");
    let tiers = usage["resources"]["/api/v1/items"]["tiers"]
        .as_array()
        .unwrap();
    let user = tiers.iter().find(|t| t["tier"] == "user").unwrap();
    assert_eq!(
        (&user["used"], &user["remaining"]),
        (&2.into(), &0.into()),
        "{usage}"
    );
}

/// The key-cap lockout repro through the demo: `--user-limit 5 --endpoint-limit 100` at a small
/// `--max-tracked-keys`, a flood of distinct `X-User-Id`s on one route (almost all denied by the
/// endpoint tier), then a brand-new user on another route: admitted.
#[tokio::test]
async fn a_flood_of_denied_ids_does_not_lock_new_users_out() {
    let demo = Demo::start(&[
        "--user-limit",
        "5",
        "--endpoint-limit",
        "100",
        "--global-limit",
        "0",
        "--max-tracked-keys",
        "200",
    ]);
    let client = reqwest::Client::new();
    let mut admitted = 0;
    for i in 0..2_000 {
        let status = client
            .get(demo.url("/api/v1/items"))
            .header("x-user-id", format!("flood-{i}"))
            .send()
            .await
            .unwrap()
            .status();
        admitted += usize::from(status == StatusCode::OK);
    }
    assert_eq!(admitted, 100);
    let resp = client
        .get(demo.url("/api/v1/items/7"))
        .header("x-user-id", "newcomer")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK, "{:?}", resp.headers());
}

/// `--client-ip-header` names the one header read behind `--trusted-proxy`; a network of every
/// address is refused.
#[tokio::test]
async fn the_client_ip_header_is_the_one_named_and_trust_in_everyone_is_refused() {
    let demo = Demo::start(&[
        "--user-limit",
        "2",
        "--trusted-proxy",
        "127.0.0.1/32",
        "--client-ip-header",
        "x-real-ip",
    ]);
    let client = reqwest::Client::new();
    let mut passed = 0;
    for n in 0..6 {
        let status = client
            .get(demo.url("/api/v1/items"))
            .header("x-real-ip", "198.51.100.9")
            .header("x-forwarded-for", format!("6.6.6.{n}"))
            .header("forwarded", format!("for=6.6.6.{n}"))
            .send()
            .await
            .unwrap()
            .status();
        passed += usize::from(status == StatusCode::OK);
    }
    assert_eq!(passed, 2);

    for everything in [
        "0.0.0.0/0",
        "::/0",
        "0.0.0.0/1,128.0.0.0/1",
        "::/1,8000::/1",
    ] {
        let out = server_command()
            .args(["--listen", "127.0.0.1:0", "--trusted-proxy", everything])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("trusts every client"), "{stderr}");
    }
}

/// A bad config file is refused naming the key at fault: an outside review's unknown key on
/// the second line was reported as the first line's (`window: unknown field user_limt`), and a
/// duplicate key as the line before it.
#[test]
fn a_bad_config_file_names_the_key_on_the_line_at_fault() {
    let dir = common::temp_dir("badfile");
    let cases = [
        (
            "window = \"60s\"\nuser_limt = 5\n",
            "user_limt: unknown field",
            "window:",
        ),
        (
            "user_limit = 5\nheaders = \"legacy\"\nuser_limit = 6\n",
            "user_limit: duplicate key",
            "headers:",
        ),
        (
            "window = \"60s\"\nuser_limit = \"many\"\n",
            "user_limit:",
            "window:",
        ),
        (
            "[routes.\"/a=b\"]\nuser_limit = 1\n[routes.\"/a=b\"]\nuser_limit = 2\n",
            "routes.\"/a=b\":",
            "[routes",
        ),
        ("\"user=limit\" = 5\n", "\"user=limit\":", "\"user:"),
        // A file that sets nothing (empty, or comments only: one caught while it is
        // rewritten) is refused at start as on SIGHUP (a review: it started with every tier
        // off and a warning, while the same file was refused on reload).
        ("", "sets nothing", "every tier is off"),
        (
            "# rate limits for the API\n",
            "sets nothing",
            "every tier is off",
        ),
        (
            "# rate limits for the API\n[routes.\"/api/items/{id}\"]\n",
            "sets nothing",
            "every tier is off",
        ),
        // A key inside a table is named with its table (an outside audit was told
        // `user_limit` for a route's, `command_tmeout` for Redis's).
        (
            "window = 60\n[routes.\"/x\"]\nuser_limit = -3\n",
            "routes.\"/x\".user_limit:",
            "window:",
        ),
        (
            "[redis]\nurl = \"redis://127.0.0.1:1\"\ncommand_tmeout = \"1s\"\n",
            "redis.command_tmeout",
            "redis.url",
        ),
        // A URL fred refuses is told in words.
        (
            "[redis]\nurl = \"redis://127.0.0.1:99999\"\n",
            "the port is not a number",
            "redis.url: InvalidPort",
        ),
    ];
    for (i, (text, named, not_named)) in cases.into_iter().enumerate() {
        let file = dir.join(format!("bad{i}.toml"));
        std::fs::write(&file, text).unwrap();
        let out = server_command()
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(named), "{text:?}: {err}");
        assert!(!err.contains(not_named), "{text:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// An operator who starts the demo with every tier off (all limits 0, which an empty config
/// file also gives) is told so at start: a second outside review started one with only a
/// window in its file and every request went through with nothing said.
#[test]
fn a_demo_with_every_tier_off_says_so_at_start() {
    let start = |args: &[&str]| {
        let mut child = server_command()
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        common::demo::listening_addr(&mut child);
        child.kill().unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let off = [
        "--user-limit",
        "0",
        "--endpoint-limit",
        "0",
        "--global-limit",
        "0",
    ];
    let err = start(&off);
    assert!(
        err.contains("WARN") && err.contains("every tier is off"),
        "{err}"
    );
    let err = start(&["--user-limit", "5"]);
    assert!(!err.contains("every tier is off"), "{err}");
    // A route or a plan whose limits are all 0 sets none (a review: an empty route's table
    // counted as one that sets a limit, and the warning was not given).
    let dir = common::temp_dir("alloff");
    let file = dir.join("off.toml");
    std::fs::write(
        &file,
        "user_limit = 0\n[routes.\"/x\"]\nendpoint_limit = 0\n[plans.free]\nuser_limit = 0\n",
    )
    .unwrap();
    let err = start(&["--config", file.to_str().unwrap()]);
    assert!(
        err.contains("WARN") && err.contains("every tier is off"),
        "{err}"
    );
    std::fs::write(
        &file,
        "user_limit = 0\n[routes.\"/x\"]\nendpoint_limit = 3\n",
    )
    .unwrap();
    let err = start(&["--config", file.to_str().unwrap()]);
    assert!(!err.contains("every tier is off"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
