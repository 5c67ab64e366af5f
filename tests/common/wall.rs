//! The host's wall clock, for tests that compare what the limiter or Redis recorded with real
//! time, or that need a value no earlier process had (a seed, a directory's name).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The time since the Unix epoch on the host's wall clock (zero for a clock set before 1970).
pub fn wall_clock() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}
