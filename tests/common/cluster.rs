//! A three-master Redis Cluster of a test's own (or a test binary's shared one), joined with
//! `redis-cli --cluster create`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::RedisServer;

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
