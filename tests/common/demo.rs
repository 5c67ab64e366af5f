//! The example binaries, built once per test binary (never a stale one), and the demo server
//! run on a free port.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// `target/<profile>/examples/server`, which `cargo test` builds with the tests.
pub fn server_binary() -> PathBuf {
    example_binary("server")
}

/// `target/<profile>/examples/NAME`, built once per test binary, so that a run of this file
/// alone never tests a stale example.
pub fn example_binary(name: &'static str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap(); // target/<profile>/deps -> target/<profile>
    static BUILT: std::sync::Mutex<Vec<&str>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if !built.contains(&name) {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "--example", name]);
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        let status = build.status().unwrap();
        assert!(status.success(), "cargo build --example {name}");
        built.push(name);
    }
    dir.join("examples").join(name)
}

/// The demo's command: with none of the caller's own `RATE_LIMIT_*` variables, so that only
/// what a test sets reaches it.
pub fn server_command() -> Command {
    let mut command = Command::new(server_binary());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("RATE_LIMIT_") {
            command.env_remove(name);
        }
    }
    command
}

/// The address a demo started as `child` (its stdout piped) serves on: its first line,
/// `listening on ADDR`.
pub fn listening_addr(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("first line {line:?}"))
        .to_owned()
}

/// A running demo server, killed when dropped.
pub struct Demo {
    pub child: Child,
    pub addr: String,
}

impl Demo {
    pub fn start(args: &[&str]) -> Self {
        Self::start_with_env(args, &[])
    }

    /// Started with these environment variables too.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = server_command()
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr = listening_addr(&mut child);
        Self { child, addr }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
