//! The demo server operated live, over real HTTP: `--config FILE` reloaded on SIGHUP (a good
//! file takes effect and the log says what changed; a bad one, or one that needs a new store,
//! keeps the running config and the log names the field), and `GET /rate-limit` (the caller's
//! own usage, not limited, recording nothing). On memory and on a Redis server of the test's own.
#![cfg(all(feature = "redis", feature = "axum", feature = "admin", unix))]

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use common::RedisServer;
use serde_json::Value;

/// A demo server on a config file, its log lines on a channel; killed when dropped.
struct Demo {
    child: Child,
    addr: String,
    log: Receiver<String>,
    file: PathBuf,
}

impl Demo {
    fn start(config: &str) -> Self {
        let dir = common::temp_dir("demo");
        let file = dir.join("limits.toml");
        std::fs::write(&file, config).unwrap();
        let mut child = common::demo::server_command()
            .args(["--listen", "127.0.0.1:0", "--config"])
            .arg(&file)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, log) = channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let addr = common::demo::listening_addr(&mut child);
        Self {
            child,
            addr,
            log,
            file,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Writes the config file and sends SIGHUP; returns the log line the reload wrote.
    fn reload(&self, config: &str) -> String {
        std::fs::write(&self.file, config).unwrap();
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success());
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.log.recv_timeout(left) {
                Ok(line) if line.contains("config reloaded") || line.contains("not reloaded") => {
                    return line
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("no reload logged within 10 s");
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(self.file.parent().unwrap());
    }
}

async fn get(
    client: &reqwest::Client,
    demo: &Demo,
    path: &str,
    user: Option<&str>,
) -> (u16, String) {
    let mut request = client.get(demo.url(path));
    if let Some(user) = user {
        request = request.header("x-user-id", user);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// `/rate-limit` for `user`: (limit, used, remaining) of the user tier on `/api/v1/items`.
async fn user_usage(client: &reqwest::Client, demo: &Demo, user: Option<&str>) -> (u64, u64, u64) {
    let (status, body) = get(client, demo, "/rate-limit", user).await;
    assert_eq!(status, 200, "{body}");
    let json: Value = serde_json::from_str(&body).unwrap();
    let tier = &json["resources"]["/api/v1/items"]["tiers"][0];
    assert_eq!(tier["tier"], "user", "{json}");
    let n = |k: &str| tier[k].as_u64().unwrap_or_else(|| panic!("{k} in {json}"));
    (n("limit"), n("used"), n("remaining"))
}

fn limits(user: u64, extra: &str) -> String {
    format!("window = \"60s\"\nuser_limit = {user}\nendpoint_limit = 0\nglobal_limit = 0\n{extra}")
}

async fn reload_and_usage(redis: &str) {
    let demo = Demo::start(&limits(2, redis));
    let client = reqwest::Client::new();
    let items = "/api/v1/items";
    assert_eq!(get(&client, &demo, items, Some("alice")).await.0, 200);
    assert_eq!(get(&client, &demo, items, Some("alice")).await.0, 200);
    assert_eq!(get(&client, &demo, items, Some("alice")).await.0, 429);
    // /rate-limit: what the checks recorded, asked many times, never limited, records nothing.
    for _ in 0..10 {
        assert_eq!(user_usage(&client, &demo, Some("alice")).await, (2, 2, 0));
    }
    assert_eq!(user_usage(&client, &demo, None).await, (2, 0, 2));
    let (_, body) = get(&client, &demo, "/rate-limit", None).await;
    assert!(body.contains("\"user\":\"127.0.0.1\""), "{body}");

    // A good file: in force at once, and the log says what changed.
    let line = demo.reload(&limits(5, redis));
    assert!(
        line.contains("config reloaded") && line.contains("user_limit: 2 -> 5"),
        "{line}"
    );
    assert_eq!(user_usage(&client, &demo, Some("alice")).await, (5, 2, 3));
    assert_eq!(get(&client, &demo, items, Some("alice")).await.0, 200);
    assert_eq!(user_usage(&client, &demo, Some("alice")).await, (5, 3, 2));
    // A setting the file sets and then empties: its default is named as such, not `null`.
    let line = demo.reload(&limits(5, &format!("shadow = [\"user\"]\n{redis}")));
    assert!(line.contains("shadow: (default) -> [\"user\"]"), "{line}");
    let line = demo.reload(&limits(5, &format!("shadow = []\n{redis}")));
    assert!(line.contains("shadow: [\"user\"] -> (default)"), "{line}");
    assert!(!line.contains("null"), "{line}");

    // A bad file: refused, naming the field; the running config stays.
    let line = demo.reload(&limits(1 << 60, redis));
    assert!(
        line.contains("not reloaded") && line.contains("user_limit"),
        "{line}"
    );
    let line = demo.reload("window = \"soon\"\n");
    assert!(
        line.contains("not reloaded") && line.contains("window"),
        "{line}"
    );
    // One that needs a new store: refused, saying so.
    let line = demo.reload(&limits(9, &format!("key_prefix = \"other\"\n{redis}")));
    assert!(
        line.contains("not reloaded") && line.contains("key_prefix"),
        "{line}"
    );
    assert!(line.contains("new limiter"), "{line}");
    assert_eq!(user_usage(&client, &demo, Some("alice")).await, (5, 3, 2));
    assert_eq!(get(&client, &demo, "/health", None).await.0, 200);

    // A file that sets nothing (one caught while it is rewritten: empty, or only its first
    // comment) is refused: the running config stays (an outside audit: it switched every tier
    // off, logged as INFO).
    for nothing in ["\n  \n", "# rate limits for the API\n"] {
        let line = demo.reload(nothing);
        assert!(
            line.contains("not reloaded") && line.contains("sets nothing"),
            "{line}"
        );
    }
    assert_eq!(user_usage(&client, &demo, Some("alice")).await, (5, 3, 2));
    // Every tier switched off on purpose: reloaded, with the warning the start gives.
    let line = demo.reload(&limits(0, redis));
    assert!(
        line.contains("config reloaded") && line.contains("every tier is off"),
        "{line}"
    );
    assert!(line.contains("WARN"), "{line}");
}

#[tokio::test]
async fn memory_reload_on_sighup_and_rate_limit_route() {
    reload_and_usage("").await;
}

#[tokio::test]
async fn redis_reload_on_sighup_and_rate_limit_route() {
    let server = RedisServer::start();
    let section = format!(
        "\n[redis]\nurl = \"{}\"\ntime_source = \"app\"\n",
        server.url()
    );
    reload_and_usage(&section).await;
    // The checks were recorded in the test's own Redis; /rate-limit added no key (nobody's).
    let keys = server.cli(&["KEYS", "*"]);
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys, ["rate_limit:user:alice"], "{keys:?}");
}
