//! Sorting fred's and Redis's errors into a [`ConnectError`]: which are configuration, which
//! an outage, each with the words that name its fix.

use std::time::Duration;

use fred::error::{Error as FredError, ErrorKind};

use super::ConnectError;

/// Words of rustls errors and alerts, as fred passes them on (inside an IO error).
const TLS_MARKERS: [&str; 12] = [
    "InvalidCertificate",
    "AlertReceived",
    "CorruptMessage",
    "InvalidContentType",
    "InvalidMessage",
    "PeerIncompatible",
    "PeerMisbehaved",
    "NoCertificatesPresented",
    "UnknownIssuer",
    "HandshakeFailure",
    "CertificateRequired",
    "InvalidDnsNameError",
];

impl ConnectError {
    /// Sorts one of fred's errors. `tls`: whether the connection uses TLS (an IO error
    /// naming a TLS failure is then a TLS error); `timeout`: the bound that applied.
    pub(crate) fn from_fred(error: &FredError, tls: bool, timeout: Duration) -> Self {
        let details = error.details();
        let message = details.to_owned();
        let has = |word: &str| details.contains(word);
        if has("WRONGPASS") || has("invalid password") {
            return Self::WrongPassword { message };
        }
        if has("NOAUTH") {
            return Self::NoPassword { message };
        }
        if has("NOPERM") {
            return Self::NoPermission { message };
        }
        if has("DB index is out of range") || has("invalid DB index") {
            return Self::NoSuchDatabase { message };
        }
        if has("OOM command not allowed") {
            return Self::Other {
                message: format!(
                    "{message} (Redis is over its maxmemory and evicts nothing: raise \
                     maxmemory, or set an eviction policy for other data)"
                ),
            };
        }
        if has("max number of clients reached") {
            return Self::Other {
                message: format!("{message} (raise Redis's maxclients)"),
            };
        }
        // Sentinel set-ups named wrongly (an outside audit: each was "Redis failed", fix
        // "see the message", and the last one fell back as an outage).
        let lower = details.to_ascii_lowercase();
        if lower.contains("unknown command 'sentinel'") {
            return Self::InvalidSettings {
                message: format!(
                    "{message} (the URL names a Sentinel, and reached a server that is not \
                     one: use a Sentinel's address, or redis:// for this server)"
                ),
            };
        }
        if has("Missing primary address in response from sentinel") {
            // A Sentinel that names no master of that service: a wrong name, or (a
            // Sentinel just restarted or added) one not told of it yet, an outage that
            // passes. Not a configuration error, then, but said how to tell.
            return Self::Unreachable {
                message: format!(
                    "{message} (the Sentinel monitors no master of that name: check \
                     sentinelServiceName against its `sentinel monitor` lines, unless \
                     this Sentinel has not been told of the master yet)"
                ),
            };
        }
        if lower.contains("unknown command 'script'") {
            return Self::InvalidSettings {
                message: format!(
                    "{message} (the server runs no Lua scripts: a Sentinel, for which \
                     the URL is redis-sentinel://HOST:PORT?sentinelServiceName=NAME, or a \
                     Redis with SCRIPT renamed away, which the limiter cannot use)"
                ),
            };
        }
        if has("CROSSSLOT") {
            // A script over keys of several slots: the URL names one server, and reached a
            // Redis Cluster node (one holding every slot is taken at start).
            return Self::InvalidSettings {
                message: format!(
                    "{message} (the URL names one server, and reached a Redis Cluster node)"
                ),
            };
        }
        if has("READONLY") {
            // The server the connection reached refuses writes now: most often a failover
            // that demoted it (an address that follows the master reconnects to the new
            // one), so an outage, not the settings. (A replica at start is found by `ROLE`:
            // `ReadOnlyReplica`.)
            return Self::Other {
                message: format!(
                    "{message} (the server refuses writes: a replica now, as after a \
                     failover, or the URL names one)"
                ),
            };
        }
        let tls_failure = tls && TLS_MARKERS.iter().any(|m| has(m));
        match error.kind() {
            _ if tls_failure => Self::Tls {
                message: rustls_message(details).to_owned(),
            },
            #[cfg(feature = "tls")]
            ErrorKind::Tls => Self::Tls { message },
            ErrorKind::Auth => Self::WrongPassword { message },
            ErrorKind::Config | ErrorKind::Url => Self::InvalidSettings { message },
            ErrorKind::IO | ErrorKind::Canceled | ErrorKind::Backpressure => {
                Self::Unreachable { message }
            }
            ErrorKind::Timeout => Self::Timeout { after: timeout },
            _ => Self::Other { message },
        }
    }
}

/// rustls's error out of the IO error fred wraps it in:
/// `Custom { kind: InvalidData, error: InvalidCertificate(UnknownIssuer) }` →
/// `InvalidCertificate(UnknownIssuer)`.
fn rustls_message(details: &str) -> &str {
    details
        .split_once("error: ")
        .map(|(_, rest)| rest.strip_suffix(" }").unwrap_or(rest))
        .unwrap_or(details)
}

impl ConnectError {
    /// Sorts an error (a store's): its cause, if it is one of ours or fred's.
    pub(crate) fn from_error(
        error: &(dyn std::error::Error + 'static),
        tls: bool,
        timeout: Duration,
    ) -> Self {
        let mut source = error.source();
        while let Some(cause) = source {
            if let Some(ours) = cause.downcast_ref::<ConnectError>() {
                return ours.clone();
            }
            if let Some(fred) = cause.downcast_ref::<FredError>() {
                return Self::from_fred(fred, tls, timeout);
            }
            source = cause.source();
        }
        Self::Other {
            message: error.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(message: &str) -> ConnectError {
        let error = FredError::new(ErrorKind::Unknown, message.to_owned());
        ConnectError::from_fred(&error, false, Duration::from_secs(1))
    }

    /// Redis's replies a limiter meets mid-run, each with a cause that names the fix (an
    /// outside audit: an OOM, a full `maxclients` and a `CROSSSLOT` said only "see the
    /// message", and a `CROSSSLOT` was an outage).
    #[test]
    fn replies_met_mid_run_name_their_fix() {
        let oom = sorted("OOM command not allowed when used memory > 'maxmemory'.");
        assert!(oom.to_string().contains("raise maxmemory"), "{oom}");
        assert!(!oom.is_config());
        let full = sorted("ERR max number of clients reached");
        assert!(
            full.to_string().contains("raise Redis's maxclients"),
            "{full}"
        );
        let crossslot = sorted("CROSSSLOT Keys in request don't hash to the same slot");
        assert!(crossslot.is_config(), "{crossslot:?}");
        assert!(
            crossslot.to_string().contains("redis-cluster://"),
            "{crossslot}"
        );
    }
}
