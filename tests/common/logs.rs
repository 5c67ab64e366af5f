//! What the crate logs, captured on one thread for a test to read.
//!
//! `tracing` caches, per callsite and for the whole process, whether anyone wants its events,
//! and while one dispatcher is registered it asks only the default of the thread that reaches
//! the callsite first. A sibling test without a subscriber reaching a `tracing::error!` first
//! would so silence it for the capturing test too (tokio-rs/tracing#3611: the capture comes
//! back empty, under parallel tests only). A do-nothing global subscriber, installed before
//! any capture, keeps every callsite asking each thread's own subscriber.

use std::sync::{Arc, Mutex, Once};

use tracing::subscriber::DefaultGuard;

/// The lines logged while its guard lives.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// What was logged, as text.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures, on this thread, what passes `filter` (an `EnvFilter` directive), without colours.
/// A test whose runtime is current-thread sees its store's and layer's logs.
pub fn capture(filter: &str) -> (Logs, DefaultGuard) {
    static GLOBAL: Once = Once::new();
    GLOBAL.call_once(|| {
        // (Fails only if another global subscriber is set: then that one does the same.)
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
    });
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    (logs, tracing::subscriber::set_default(subscriber))
}
