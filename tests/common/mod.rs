//! Shared test helpers: real `redis-server` processes on free ports, and the backends the store
//! contract runs against.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub mod demo;
pub mod logs;
pub mod rng;
#[cfg(feature = "redis")]
pub mod script;

use tiered_ratelimit::{
    Backend, ManualClock, RateLimitConfig, RateLimitConfigBuilder, RateLimiter, TimeSource,
};

/// A free TCP port on 127.0.0.1 (free when asked; callers retry if it is taken meanwhile),
/// never one this process was given before: tests starting servers at once never race for
/// the same port.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("bind a free port");
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Why `redis-server` could not start, and the fix.
pub fn spawn_failed(error: &std::io::Error) -> String {
    if error.kind() == std::io::ErrorKind::NotFound {
        "redis-server is not on the PATH: the Redis tests start their own servers. Install it \
         (Debian/Ubuntu: `sudo apt-get install redis-server redis-tools`; macOS: \
         `brew install redis`), or run `bash .ci/run`, which installs it."
            .to_owned()
    } else {
        format!("could not start redis-server: {error}")
    }
}

/// A `redis-server` this test started, on its own port, killed when dropped.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    extra: Vec<String>,
    dir: PathBuf,
    listen: Listen,
}

/// How a server listens.
#[derive(Clone)]
enum Listen {
    /// Plain TCP on `port`.
    Tcp,
    /// TLS only, on `port` (`--port 0 --tls-port`); `redis-cli` needs these arguments.
    Tls { cli: Vec<String> },
    /// A Unix socket only (`--port 0 --unixsocket`).
    Unix(PathBuf),
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A new, empty directory of this process under the system's temp dir, named after `tag`.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tiered-ratelimit-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

impl RedisServer {
    /// Starts a fresh, empty server on a free port and waits until it answers PING.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`--cluster-enabled yes`, ...).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_listening(extra, Listen::Tcp)
    }

    /// Starts a server that speaks TLS only, on its port: `tls` are the `redis-server`
    /// arguments (`--tls-cert-file`, ...), `cli` those `redis-cli` needs (`--tls --cacert`, ...).
    pub fn start_tls(tls: &[&str], cli: &[&str]) -> Self {
        let cli = cli.iter().map(|s| s.to_string()).collect();
        Self::start_listening(tls, Listen::Tls { cli })
    }

    /// Starts a server on a Unix socket only (see [`socket`](Self::socket)).
    pub fn start_unix() -> Self {
        Self::start_listening(&[], Listen::Unix(PathBuf::new()))
    }

    fn start_listening(extra: &[&str], listen: Listen) -> Self {
        let dir = temp_dir("redis");
        let listen = match listen {
            Listen::Unix(_) => Listen::Unix(dir.join("redis.sock")),
            other => other,
        };
        for _ in 0..20 {
            let mut server = Self {
                child: None,
                port: free_port(),
                extra: extra.iter().map(|s| s.to_string()).collect(),
                dir: dir.clone(),
                listen: listen.clone(),
            };
            if server.spawn() {
                return server;
            }
        }
        panic!("could not start redis-server (is it installed? .ci/run installs it)");
    }

    fn spawn(&mut self) -> bool {
        let port = self.port.to_string();
        let listen: Vec<&str> = match &self.listen {
            Listen::Tcp => vec!["--port", &port],
            Listen::Tls { .. } => vec!["--port", "0", "--tls-port", &port],
            Listen::Unix(path) => vec!["--port", "0", "--unixsocket", path.to_str().unwrap()],
        };
        let child = Command::new("redis-server")
            .args(listen)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}", spawn_failed(&e)));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let _ = status; // exited: the port was taken
                self.child = None;
                return false;
            }
            if self.ping() {
                // Another test's server may hold the port (its own start won the race for a
                // free port), and it answers PING too: only ours counts, or two tests would
                // share a server and see each other's clients and commands.
                if self.served_by_child() {
                    return true;
                }
                self.kill();
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        false
    }

    /// Whether the server answers PING now.
    pub fn ping(&self) -> bool {
        match self.listen {
            Listen::Tcp => self
                .command(&["PING"])
                .is_some_and(|r| r.starts_with("+PONG")),
            _ => self.cli(&["PING"]).trim() == "PONG",
        }
    }

    /// Whether the server answering on this port is the process this value started.
    fn served_by_child(&self) -> bool {
        let Some(pid) = self.pid() else { return false };
        let info = match self.listen {
            Listen::Tcp => self.command(&["INFO", "server"]).unwrap_or_default(),
            _ => self.cli(&["INFO", "server"]),
        };
        info.lines()
            .filter_map(|l| l.trim().strip_prefix("process_id:"))
            .any(|id| id == pid.to_string())
    }

    /// Sends one command (RESP) and returns the raw reply, or `None` if the server is down.
    pub fn command(&self, args: &[&str]) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{}\r\n", a.len(), a));
        }
        stream.write_all(req.as_bytes()).ok()?;
        let mut buf = vec![0u8; 1 << 16];
        let n = stream.read(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Runs `redis-cli` against this server and returns its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let port = self.port.to_string();
        let to: Vec<&str> = match &self.listen {
            Listen::Tcp => vec!["-h", "127.0.0.1", "-p", &port],
            Listen::Tls { cli } => ["-h", "127.0.0.1", "-p", &port, "--tls"]
                .into_iter()
                .chain(cli.iter().map(String::as_str))
                .collect(),
            Listen::Unix(path) => vec!["-s", path.to_str().unwrap()],
        };
        let out = Command::new("redis-cli")
            .args(to)
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The Unix socket of a server started with [`start_unix`](Self::start_unix).
    pub fn socket(&self) -> &std::path::Path {
        match &self.listen {
            Listen::Unix(path) => path,
            _ => panic!("not a Unix socket server"),
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGSTOP: the server hangs, connections stay open.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let ok = Command::new("kill")
                .arg(sig)
                .arg(pid.to_string())
                .status()
                .expect("run kill")
                .success();
            assert!(ok, "kill {sig} {pid}");
        }
    }

    /// SIGKILL, and wait for the process to end.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        for _ in 0..50 {
            if self.spawn() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("could not restart redis-server on port {}", self.port);
    }

    /// `INFO commandstats` calls of one command (`evalsha`, `zadd`, ...).
    pub fn command_calls(&self, command: &str) -> u64 {
        let info = self.cli(&["INFO", "commandstats"]);
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A three-master Redis Cluster of `redis-server --cluster-enabled yes` processes on free
/// ports, joined with `redis-cli --cluster create`. Killed when dropped.
pub struct RedisCluster {
    /// The masters.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three masters and waits until the cluster is `ok` on each.
    ///
    /// A fresh node was once found not empty when `redis-cli --cluster create` looked at it, in
    /// CI, in two tests at once at the start of a test binary, while the previous binary's
    /// shared cluster could still be alive (its watchdog polled every half second; now every
    /// 50 ms). Such a start is told on stderr, with what each node knew, and made again with
    /// new nodes on new ports; any other failure fails at once.
    pub fn start() -> Self {
        for attempt in 1..=5 {
            let nodes = Self::start_nodes();
            let addrs: Vec<String> = nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port()))
                .collect();
            let out = Command::new("redis-cli")
                .args(["--cluster", "create"])
                .args(&addrs)
                .args(["--cluster-replicas", "0", "--cluster-yes"])
                .output()
                .expect("run redis-cli --cluster create");
            let stdout = String::from_utf8_lossy(&out.stdout);
            if out.status.success() {
                return Self::joined(nodes);
            }
            assert!(
                stdout.contains("is not empty") && attempt < 5,
                "cluster create failed: {stdout}"
            );
            eprintln!("cluster create, attempt {attempt}, met a node not empty: {stdout}");
            for n in &nodes {
                eprintln!(
                    "  node {}: DBSIZE {}, CLUSTER NODES:\n{}",
                    n.port(),
                    n.cli(&["DBSIZE"]).trim(),
                    n.cli(&["CLUSTER", "NODES"])
                );
            }
        }
        unreachable!("the last attempt asserts")
    }

    /// Three fresh `redis-server --cluster-enabled yes` processes, not joined yet.
    fn start_nodes() -> Vec<RedisServer> {
        (0..3)
            .map(|_| {
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    // Redis's default: a master a loaded machine leaves unscheduled for a
                    // second must not be voted failed (no replica would take its slots, and
                    // the cluster would refuse every command: CLUSTERDOWN). No test here
                    // waits for the cluster to notice a failure; a killed master fails the
                    // client's commands at once.
                    "--cluster-node-timeout",
                    "15000",
                ])
            })
            .collect()
    }

    /// `nodes`, joined by `redis-cli --cluster create`, once the cluster is `ok` on each.
    fn joined(nodes: Vec<RedisServer>) -> Self {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = nodes
                .iter()
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            if ok {
                break;
            }
            assert!(Instant::now() < deadline, "cluster never reached state ok");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { nodes }
    }

    /// The same, for a cluster shared by a whole test binary: its processes are also killed by
    /// a watchdog when the test process ends (statics are never dropped).
    pub fn shared() -> &'static RedisCluster {
        static CLUSTER: std::sync::OnceLock<RedisCluster> = std::sync::OnceLock::new();
        CLUSTER.get_or_init(|| {
            let cluster = Self::start();
            let pids: Vec<String> = cluster
                .nodes
                .iter()
                .filter_map(|n| n.pid().map(|p| p.to_string()))
                .collect();
            let script = format!(
                "while kill -0 {} 2>/dev/null; do sleep 0.05; done; kill -9 {} 2>/dev/null",
                std::process::id(),
                pids.join(" ")
            );
            // Never waited for: it must outlive this process to clean up after it.
            #[allow(clippy::zombie_processes)]
            Command::new("bash")
                .args(["-c", &script])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn watchdog");
            cluster
        })
    }

    /// `redis-cluster://` URL naming every node.
    pub fn url(&self) -> String {
        let mut url = format!("redis-cluster://127.0.0.1:{}", self.nodes[0].port());
        for (i, n) in self.nodes.iter().enumerate().skip(1) {
            url.push(if i == 1 { '?' } else { '&' });
            url.push_str(&format!("node=127.0.0.1:{}", n.port()));
        }
        url
    }

    /// The index of the master that owns `key` (asked directly: the others answer MOVED).
    pub fn owner_of(&self, key: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| {
                !n.command(&["EXISTS", key])
                    .unwrap_or_default()
                    .starts_with("-MOVED")
            })
            .expect("some node owns every slot")
    }

    /// A command's calls summed over every master (`INFO commandstats`).
    pub fn command_calls(&self, command: &str) -> u64 {
        self.nodes.iter().map(|n| n.command_calls(command)).sum()
    }

    /// Sends a command to the master owning `key`, returning its reply as redis-cli prints it.
    pub fn cli_for(&self, key: &str, args: &[&str]) -> String {
        self.nodes[self.owner_of(key)].cli(args)
    }
}

static PREFIX_SEQ: AtomicU64 = AtomicU64::new(0);

/// A backend the store contract runs against. It owns what it started.
pub enum TestBackend {
    /// The in-memory store.
    Memory,
    /// A Redis server of this test's own.
    Redis(RedisServer),
    /// The test binary's shared Redis Cluster, under a key prefix of this test's own.
    Cluster(&'static RedisCluster, String),
}

impl TestBackend {
    /// The in-memory backend.
    pub fn memory() -> Self {
        Self::Memory
    }

    /// A fresh Redis server for this test.
    pub fn redis() -> Self {
        Self::Redis(RedisServer::start())
    }

    /// The shared cluster, with a fresh key prefix.
    pub fn cluster() -> Self {
        let prefix = format!("t{}", PREFIX_SEQ.fetch_add(1, Ordering::Relaxed));
        Self::Cluster(RedisCluster::shared(), prefix)
    }

    /// A limiter on this backend, driven by `clock`, connected before it returns.
    pub async fn limiter(
        &self,
        config: RateLimitConfigBuilder,
        clock: &ManualClock,
    ) -> RateLimiter {
        let config = self.config(config);
        let limiter = RateLimiter::builder(config).clock(clock.clone()).build();
        limiter.wait_connected().await;
        let cause = limiter.fallback_cause();
        assert_eq!(
            limiter.backend(),
            self.expected_backend(),
            "backend up: {cause:?}"
        );
        limiter
    }

    /// The config with this backend's settings added.
    ///
    /// Redis takes `now` from the limiter's clock (`TimeSource::App`), set explicitly: every
    /// test driving Redis with a `ManualClock` depends on it, whatever the default.
    pub fn config(&self, config: RateLimitConfigBuilder) -> RateLimitConfig {
        self.config_with_prefix(config, "")
    }

    /// The same, with the keys under a prefix of the caller's own (`suffix` is appended to the
    /// cluster's per-test prefix; on a single server it is the whole prefix; memory ignores
    /// it): for tests that make many limiters on one backend that must not share state. An
    /// empty `suffix` leaves the prefix as [`config`](Self::config) sets it.
    pub fn config_with_prefix(
        &self,
        config: RateLimitConfigBuilder,
        suffix: &str,
    ) -> RateLimitConfig {
        match self {
            Self::Memory => config.build().expect("valid config"),
            Self::Redis(server) => {
                let config = if suffix.is_empty() {
                    config
                } else {
                    config.key_prefix(suffix)
                };
                config
                    .redis_url(server.url())
                    .redis_command_timeout(Duration::from_secs(2))
                    .redis_time_source(TimeSource::App)
                    .build()
                    .expect("valid config")
            }
            Self::Cluster(cluster, prefix) => config
                .key_prefix(format!("{prefix}{suffix}"))
                .redis_url(cluster.url())
                .redis_command_timeout(Duration::from_secs(2))
                .redis_connect_timeout(Duration::from_secs(10))
                .redis_connect_timeout(Duration::from_secs(10))
                .redis_time_source(TimeSource::App)
                .build()
                .expect("valid config"),
        }
    }

    /// The backend a healthy limiter on this reports.
    pub fn expected_backend(&self) -> Backend {
        match self {
            Self::Memory => Backend::Memory,
            Self::Redis(_) | Self::Cluster(..) => Backend::Redis,
        }
    }

    /// The Redis server, if any.
    pub fn server(&self) -> Option<&RedisServer> {
        match self {
            Self::Memory | Self::Cluster(..) => None,
            Self::Redis(s) => Some(s),
        }
    }
}

/// A config builder with these limits and window.
pub fn limits(user: u64, endpoint: u64, global: u64, window: Duration) -> RateLimitConfigBuilder {
    RateLimitConfig::builder()
        .window(window)
        .user_limit(user)
        .endpoint_limit(endpoint)
        .global_limit(global)
}

/// A limiter on `server` (a user limit of 5 in a minute) whose Redis commands give up after
/// 300 ms, connected: for tests that pause or kill that server under it.
pub async fn impatient_limiter(server: &RedisServer) -> RateLimiter {
    let config = limits(5, 0, 0, Duration::from_secs(60))
        .redis_url(server.url())
        .redis_command_timeout(Duration::from_millis(300))
        .build()
        .expect("valid config");
    let limiter = RateLimiter::new(config);
    limiter.wait_connected().await;
    limiter
}

/// Runs each named contract test (an `async fn(TestBackend)` in the `contract` module) against
/// every backend: `memory::name`, `redis::name` and `cluster::name` (on the binary's shared
/// three-master cluster).
#[macro_export]
macro_rules! contract_tests {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::contract::$name($crate::common::TestBackend::memory()).await;
                }
            )*
        }
        #[cfg(feature = "redis")]
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::contract::$name($crate::common::TestBackend::redis()).await;
                }
            )*
        }
        #[cfg(feature = "redis")]
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::contract::$name($crate::common::TestBackend::cluster()).await;
                }
            )*
        }
    };
}
