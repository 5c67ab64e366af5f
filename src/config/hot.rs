//! [`Hot`]: what a check of a configuration without route overrides or plans reads of it (the
//! limits, the window, the shadow flags, the header style), published without a lock.
//!
//! Loading the whole configuration (an `arc_swap` load) writes a per-thread slot and pays it
//! back: two atomic read-modify-writes a check. These few values are instead kept in atomics
//! behind a sequence number (a seqlock): a check reads them with plain loads and writes
//! nothing shared, and a reconfiguration, which publishes them, makes a check that overlapped
//! it read them again. So a check sees one configuration's values, never a mix.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::Duration;

use super::RateLimitConfig;
use crate::header_style::HeaderStyle;
use crate::tier::Tier;

/// The values a check needs of a configuration with no route overrides and no plans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HotConfig {
    /// The user, endpoint and global limits.
    pub(crate) limits: [u64; 3],
    /// Whether each tier is in shadow mode.
    pub(crate) shadow: [bool; 3],
    pub(crate) window: Duration,
    pub(crate) style: HeaderStyle,
}

/// The published values: a [`HotConfig`] when the configuration has neither route overrides
/// nor plans (so that nothing else of it shapes a check), else none.
pub(crate) struct Hot {
    /// Even: the words are one configuration's; odd: a writer is between two.
    seq: AtomicU64,
    /// The three limits, the window's seconds, then its nanoseconds, the shadow flags, the
    /// header style and whether the values apply at all, packed in the last word.
    words: [AtomicU64; 6],
}

const APPLIES: u64 = 1 << 63;

impl Hot {
    /// The values of `config`, published.
    pub(crate) fn new(config: &RateLimitConfig) -> Self {
        let hot = Self {
            seq: AtomicU64::new(0),
            words: Default::default(),
        };
        hot.publish(config);
        hot
    }

    /// Publishes `config`'s values. Writers must not overlap: the limiter publishes under
    /// its reconfiguration lock.
    pub(crate) fn publish(&self, config: &RateLimitConfig) {
        let applies = config.routes().next().is_none() && !config.has_plans();
        let style = match config.headers() {
            HeaderStyle::Legacy => 0,
            HeaderStyle::Ietf => 1,
            HeaderStyle::Both => 2,
        };
        let shadow = [Tier::User, Tier::Endpoint, Tier::Global]
            .iter()
            .enumerate()
            .fold(0, |bits, (i, &t)| {
                bits | u64::from(config.is_shadow(t)) << i
            });
        let flags = shadow | style << 8 | if applies { APPLIES } else { 0 };
        let window = config.window();
        let words = [
            config.user_limit(),
            config.endpoint_limit(),
            config.global_limit(),
            window.as_secs(),
            u64::from(window.subsec_nanos()),
            flags,
        ];
        let seq = self.seq.load(Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        for (word, value) in self.words.iter().zip(words) {
            word.store(value, Ordering::Relaxed);
        }
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// The published values, `None` when the configuration has route overrides or plans.
    #[inline]
    pub(crate) fn read(&self) -> Option<HotConfig> {
        let words = loop {
            let before = self.seq.load(Ordering::Acquire);
            let words = [0, 1, 2, 3, 4, 5].map(|i| self.words[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if before & 1 == 0 && self.seq.load(Ordering::Relaxed) == before {
                break words;
            }
            std::hint::spin_loop();
        };
        let flags = words[5];
        if flags & APPLIES == 0 {
            return None;
        }
        Some(HotConfig {
            limits: [words[0], words[1], words[2]],
            shadow: [flags & 1 != 0, flags & 2 != 0, flags & 4 != 0],
            // Validated: under a billion nanoseconds.
            window: Duration::new(words[3], words[4] as u32),
            style: match (flags >> 8) & 3 {
                0 => HeaderStyle::Legacy,
                1 => HeaderStyle::Ietf,
                _ => HeaderStyle::Both,
            },
        })
    }
}

impl HotConfig {
    /// The values of `config`, as [`Hot::read`] gives them (also when they do not apply).
    #[cfg(test)]
    fn of(config: &RateLimitConfig) -> Self {
        Self {
            limits: [
                config.user_limit(),
                config.endpoint_limit(),
                config.global_limit(),
            ],
            shadow: [Tier::User, Tier::Endpoint, Tier::Global].map(|t| config.is_shadow(t)),
            window: config.window(),
            style: config.headers(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    use super::*;
    use crate::config::RouteLimits;

    fn config(n: u64) -> RateLimitConfig {
        RateLimitConfig::builder()
            .user_limit(n)
            .endpoint_limit(2 * n)
            .global_limit(3 * n)
            .window(Duration::new(n, (n % 1_000) as u32 * 1_000))
            .headers(match n % 3 {
                0 => HeaderStyle::Legacy,
                1 => HeaderStyle::Ietf,
                _ => HeaderStyle::Both,
            })
            .shadow_tier([Tier::User, Tier::Endpoint, Tier::Global][(n % 3) as usize])
            .build()
            .expect("valid")
    }

    #[test]
    fn it_reads_what_was_published_and_nothing_for_routes_or_plans() {
        for n in [1, 2, 3, 59, 60, 1_000] {
            let hot = Hot::new(&config(n));
            assert_eq!(hot.read(), Some(HotConfig::of(&config(n))));
        }
        let routes = RateLimitConfig::builder()
            .user_limit(5)
            .route("/login", RouteLimits::default())
            .build()
            .unwrap();
        let hot = Hot::new(&config(1));
        hot.publish(&routes);
        assert_eq!(hot.read(), None);
        let plans = RateLimitConfig::builder()
            .user_limit(5)
            .plan("pro", 50)
            .build()
            .unwrap();
        hot.publish(&plans);
        assert_eq!(hot.read(), None);
        hot.publish(&config(7));
        assert_eq!(hot.read(), Some(HotConfig::of(&config(7))));
    }

    /// Readers on other threads, while one writer publishes configuration after
    /// configuration, only ever see one configuration's values whole.
    #[test]
    fn a_reader_never_sees_two_configurations_mixed() {
        let hot = Arc::new(Hot::new(&config(1)));
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (hot, stop) = (hot.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut seen = 0u64;
                    // At least once, even for a thread that first runs after the writer ends.
                    loop {
                        let read = hot.read().expect("no routes or plans");
                        let n = read.limits[0];
                        assert_eq!(read, HotConfig::of(&config(n)), "a mix around {n}");
                        seen += 1;
                        if stop.load(Ordering::Relaxed) {
                            return seen;
                        }
                    }
                })
            })
            .collect();
        for n in 1..20_000 {
            hot.publish(&config(n));
        }
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            assert!(reader.join().expect("no mix") > 0);
        }
    }
}
