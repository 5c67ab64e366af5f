//! The guides, rendered here from the repository's `docs/` folder, so that they are one click
//! away on docs.rs. Modules with no code: each is one page.
//!
//! - [`policies`]: overrides per route and per plan, request cost, headers (legacy and IETF), the
//!   429 body, client IP behind proxies, shadow mode, metrics, recovery, gRPC.
//! - [`redis`]: URLs, the script, keys, time, the fallback, TLS, strict start and configuration
//!   errors, Redis Cluster, memory per entry.
//! - [`scale`]: the global tier sharded over a Redis Cluster's masters; what it guarantees,
//!   what it measures.
//! - [`architecture`]: a request's path through layer, limiter, algorithm and store; one
//!   paragraph per module; the seams.
//! - [`operations`]: changing limits live, usage without recording, waiting instead of failing,
//!   the metrics seen through Prometheus and Grafana.
//! - [`benchmarks`]: measured against governor, tower_governor and redis-benchmark, with the
//!   commands.
//!
//! The files link to each other with reference links (`[text][name]`) defined at their end for
//! GitHub; each module below defines the same names first, as intra-doc links, and the first
//! definition of a name is the one Markdown uses.

pub mod policies {
    #![doc = "[redis-strict]: crate::guides::redis#strict-start-and-configuration-errors"]
    #![doc = "[redis-denials]: crate::guides::redis#the-local-cache-of-denials"]
    #![doc = ""]
    #![doc = include_str!("../docs/POLICIES.md")]
}

pub mod redis {
    #![doc = include_str!("../docs/REDIS.md")]
}

pub mod scale {
    #![doc = include_str!("../docs/SCALE.md")]
}

pub mod architecture {
    #![doc = include_str!("../docs/ARCHITECTURE.md")]
}

pub mod operations {
    #![doc = include_str!("../docs/OPERATIONS.md")]
}

pub mod benchmarks {
    #![doc = "[redis-md]: crate::guides::redis#memory-per-recorded-request"]
    #![doc = ""]
    #![doc = include_str!("../docs/BENCHMARKS.md")]
}
