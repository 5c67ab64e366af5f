//! `redis-server` processes of a test's own, each on a free port and killed when dropped; the
//! free ports and temporary directories they use.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
    // The time too: a process id comes back (a CI run starts thousands of processes), and a
    // directory an earlier process of that id left behind (a shared cluster is never dropped)
    // holds its `nodes.conf`, which made a new cluster node fail to start in one CI run.
    let nanos = super::wall_clock().as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "tiered-ratelimit-{tag}-{}-{}-{nanos}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
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

    /// Connections the server has accepted in all (`INFO stats`; `redis-cli`'s own among them).
    pub fn connections_received(&self) -> u64 {
        let info = self.cli(&["INFO", "stats"]);
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
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
