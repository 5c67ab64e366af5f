//! Durations written the way people write them: `60s`, `1500ms`, `1m`, `2h`, `1d`.

use std::fmt;
use std::time::Duration;

/// A duration that could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (write a whole number and a unit: 1500ms, 60s, 1m, 2h, 1d)")]
pub struct ParseDurationError {
    input: String,
    reason: &'static str,
}

/// Parses `<whole number><unit>` with the unit one of `us`, `ms`, `s`, `m`, `h`, `d`.
///
/// ```
/// use std::time::Duration;
/// use tiered_ratelimit::parse_duration;
///
/// assert_eq!(parse_duration("60s")?, Duration::from_secs(60));
/// assert_eq!(parse_duration("1500ms")?, Duration::from_millis(1500));
/// assert_eq!(parse_duration("1m")?, Duration::from_secs(60));
/// assert!(parse_duration("60").is_err());
/// # Ok::<(), tiered_ratelimit::ParseDurationError>(())
/// ```
pub fn parse_duration(input: &str) -> Result<Duration, ParseDurationError> {
    let err = |reason| ParseDurationError {
        input: input.chars().take(64).collect(),
        reason,
    };
    let s = input.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| err("missing unit"))?;
    let (digits, unit) = s.split_at(split);
    if digits.is_empty() {
        return Err(err("missing number"));
    }
    let n: u64 = digits.parse().map_err(|_| err("number too large"))?;
    let micros_per_unit: u64 = match unit {
        "us" | "µs" => 1,
        "ms" => 1_000,
        "s" => 1_000_000,
        "m" => 60_000_000,
        "h" => 3_600_000_000,
        "d" => 86_400_000_000,
        _ => return Err(err("unknown unit")),
    };
    let micros = n
        .checked_mul(micros_per_unit)
        .ok_or_else(|| err("number too large"))?;
    Ok(Duration::from_micros(micros))
}

/// Writes a duration in the largest unit that keeps it whole (`60s` → `1m`, `1500ms`).
pub(crate) struct Human(pub Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let micros = self.0.as_micros();
        for (unit, size) in [
            ("d", 86_400_000_000u128),
            ("h", 3_600_000_000),
            ("m", 60_000_000),
            ("s", 1_000_000),
            ("ms", 1_000),
        ] {
            if micros != 0 && micros.is_multiple_of(size) {
                return write!(f, "{}{unit}", micros / size);
            }
        }
        write!(f, "{micros}us")
    }
}

/// serde for durations: a string such as `"60s"`, or a whole number of seconds.
pub(crate) mod serde_duration {
    use std::time::Duration;

    use serde::de::{self, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&super::Human(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
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
