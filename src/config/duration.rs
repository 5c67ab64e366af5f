//! Durations in the configuration: one rule for files, the builder's callers and command lines.
//!
//! A duration is what [`humantime`] reads (`60s`, `1500ms`, `1m`, `1h 30m`, `1.5s`), or a bare
//! whole number, which means seconds (`60`, in a file as a number or a string, or on a command
//! line). It is written back the way `humantime` formats it (`1m`, `1s 500ms`).

use std::time::Duration;

/// A duration that could not be parsed; the message shows the accepted forms.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {input:?}: {reason} (write a number and a unit, like 1500ms, 60s, 1m, \
     2h, 1d; a bare whole number is seconds)"
)]
pub struct ParseDurationError {
    input: String,
    reason: String,
}

/// Parses a duration by the configuration's one rule: a bare whole number is seconds, anything
/// else is read by [`humantime::parse_duration`].
///
/// This is the rule `window`, the Redis timeouts and the recovery backoffs follow in a file; it
/// is public so that a command line (such as the demo server's `--window`) follows it too.
///
/// ```
/// use std::time::Duration;
/// use tiered_ratelimit::config::parse_duration;
///
/// assert_eq!(parse_duration("60s")?, Duration::from_secs(60));
/// assert_eq!(parse_duration("1500ms")?, Duration::from_millis(1500));
/// assert_eq!(parse_duration("1m")?, Duration::from_secs(60));
/// assert_eq!(parse_duration("60")?, Duration::from_secs(60));
/// assert!(parse_duration("60 parsecs").is_err());
/// # Ok::<(), tiered_ratelimit::config::ParseDurationError>(())
/// ```
pub fn parse_duration(input: &str) -> Result<Duration, ParseDurationError> {
    let err = |reason: String| ParseDurationError {
        input: input.chars().take(64).collect(),
        reason: reason.chars().take(160).collect(),
    };
    let trimmed = input.trim();
    if !trimmed.is_empty() && trimmed.bytes().all(|b| b.is_ascii_digit()) {
        return trimmed
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| err("number too large".to_owned()));
    }
    humantime::parse_duration(trimmed).map_err(|e| err(e.to_string()))
}

/// serde for durations: a string by [`parse_duration`], or a whole number of seconds; written
/// by [`humantime::format_duration`].
pub(crate) mod serde_duration {
    use std::time::Duration;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Duration;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration such as \"60s\" or \"1500ms\", or whole seconds")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                super::parse_duration(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
                Ok(Duration::from_secs(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
                u64::try_from(v)
                    .map(Duration::from_secs)
                    .map_err(|_| E::custom("a duration cannot be negative"))
            }
        }
        d.deserialize_any(V)
    }
}
