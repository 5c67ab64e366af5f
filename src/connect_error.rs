//! [`ConnectError`]: why the limiter could not use Redis, sorted into configuration errors
//! (fix the settings) and outages (Redis unreachable or slow).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Why the limiter could not use Redis.
///
/// [`RateLimiter::try_connect`](crate::RateLimiter::try_connect) returns it instead of falling
/// back to memory. The default start ([`RateLimiter::new`](crate::RateLimiter::new),
/// [`connect`](crate::RateLimiter::connect)) falls back and logs it once — at ERROR for a
/// configuration error ([`is_config`](Self::is_config)), at WARN for an outage — and counts the
/// fallback in `tiered_ratelimit_fallbacks_total{reason}` with [`reason`](Self::reason);
/// [`RateLimiter::fallback_cause`](crate::RateLimiter::fallback_cause) returns it afterwards.
///
/// Each variant carries the message Redis (or the TLS library) gave; `Display` adds the fix:
///
/// ```
/// use tiered_ratelimit::ConnectError;
///
/// let e = ConnectError::WrongPassword { message: "WRONGPASS invalid username-password pair".into() };
/// assert!(e.is_config());
/// assert_eq!(e.reason(), "config");
/// assert!(e.to_string().contains("redis.url"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// Redis refused the user name or password (`WRONGPASS`). Configuration.
    WrongPassword {
        /// Redis's reply.
        message: String,
    },
    /// Redis wants a password and none was given (`NOAUTH`). Configuration.
    NoPassword {
        /// Redis's reply.
        message: String,
    },
    /// The ACL user may not run a command the limiter needs (`NOPERM`): `SCRIPT LOAD` and
    /// `EVALSHA`, and inside the script `ZRANGE`, `ZREMRANGEBYSCORE`, `ZADD`, `PEXPIRE` (and
    /// `TIME`), on the keys under the prefix; `DEL` for resets. Configuration.
    NoPermission {
        /// Redis's reply.
        message: String,
    },
    /// The TLS handshake failed: the server's certificate is not trusted (wrong CA) or does
    /// not name the host, the server wants a client certificate, or the port does not speak
    /// TLS. Configuration.
    Tls {
        /// The TLS library's message.
        message: String,
    },
    /// A TLS file (CA, client certificate or key) cannot be read or holds nothing usable.
    /// Configuration.
    TlsFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The database in the URL (`redis://host:port/DB`) does not exist on the server.
    /// Configuration.
    NoSuchDatabase {
        /// Redis's reply.
        message: String,
    },
    /// The server is a replica (its `ROLE` at start): it refuses the limiter's writes, or
    /// (`replica-read-only no`) keeps them from every instance that uses the master.
    /// Configuration. (A `READONLY` reply in a check, after a start on a master, is most often
    /// a failover that demoted it: [`Other`](Self::Other), an outage.)
    ReadOnlyReplica {
        /// What `ROLE` said (the replica's master, where it says).
        message: String,
    },
    /// Another setting that cannot work (fred's own configuration errors, such as a cluster
    /// URL for a server without cluster support; a Sentinel URL for a server that is not a
    /// Sentinel; a single server's URL for a Sentinel). Configuration.
    InvalidSettings {
        /// fred's or Redis's message.
        message: String,
    },
    /// Redis could not be reached: connection refused or closed, unknown host. An outage.
    Unreachable {
        /// The error.
        message: String,
    },
    /// Redis did not answer in time (the connect timeout at start, the command timeout in a
    /// check). An outage.
    Timeout {
        /// The timeout that ran out.
        after: Duration,
    },
    /// Anything else (an error from the script, a protocol error, ...).
    Other {
        /// The error.
        message: String,
    },
}

impl ConnectError {
    /// Whether the settings are at fault (a password, a permission, TLS, a database): waiting
    /// will not help, fixing the configuration will.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            Self::WrongPassword { .. }
                | Self::NoPassword { .. }
                | Self::NoPermission { .. }
                | Self::Tls { .. }
                | Self::TlsFile { .. }
                | Self::NoSuchDatabase { .. }
                | Self::ReadOnlyReplica { .. }
                | Self::InvalidSettings { .. }
        )
    }

    /// The label of the fallback metric: `config` (see [`is_config`](Self::is_config)),
    /// `unreachable`, `timeout` or `error`.
    pub fn reason(&self) -> &'static str {
        match self {
            _ if self.is_config() => "config",
            Self::Unreachable { .. } => "unreachable",
            Self::Timeout { .. } => "timeout",
            _ => "error",
        }
    }

    /// The message Redis, the TLS library or the OS gave (`None` for a timeout).
    pub fn message(&self) -> Option<&str> {
        match self {
            Self::WrongPassword { message }
            | Self::NoPassword { message }
            | Self::NoPermission { message }
            | Self::Tls { message }
            | Self::TlsFile { message, .. }
            | Self::NoSuchDatabase { message }
            | Self::ReadOnlyReplica { message }
            | Self::InvalidSettings { message }
            | Self::Unreachable { message }
            | Self::Other { message } => Some(message),
            Self::Timeout { .. } => None,
        }
    }

    /// What to change.
    pub fn fix(&self) -> &'static str {
        match self {
            Self::WrongPassword { .. } => {
                "set the right user and password in redis.url \
                 (redis://USER:PASSWORD@HOST:PORT; percent-encode special characters)"
            }
            Self::NoPassword { .. } => {
                "the server requires a password: put it in redis.url (redis://:PASSWORD@HOST:PORT, \
                 or redis://USER:PASSWORD@HOST:PORT for an ACL user)"
            }
            Self::NoPermission { .. } => {
                "grant the ACL user the limiter's commands on its keys, e.g. ACL SETUSER USER \
                 ~rate_limit:* +script|load +evalsha +del +role (the script's own commands: \
                 +zrange +zremrangebyscore +zadd +pexpire +time; +role lets the start refuse a \
                 replica)"
            }
            Self::Tls { .. } => {
                "check that the port speaks TLS, that redis.tls_ca_file holds the CA that signed \
                 the server's certificate (system roots are used without it), that the \
                 certificate names the host in the URL, and, if the server checks clients \
                 (tls-auth-clients), set redis.tls_cert_file and redis.tls_key_file"
            }
            Self::TlsFile { .. } => {
                "point the setting at a readable PEM file (CA: certificates; client: a \
                 certificate chain and its private key)"
            }
            Self::NoSuchDatabase { .. } => {
                "use a database number below the server's `databases` setting (16 by default) \
                 in redis.url (redis://HOST:PORT/DB)"
            }
            Self::ReadOnlyReplica { .. } => {
                "point redis.url at the master (every instance at the same one), or at an \
                 address that follows the master through a failover (a DNS name or a proxy \
                 updated on failover)"
            }
            Self::InvalidSettings { .. } => {
                "check redis.url and redis.cluster against the server (a cluster needs \
                 redis-cluster:// or cluster = true; a single server needs neither; a \
                 Sentinel, redis-sentinel://HOST:PORT?sentinelServiceName=NAME with a \
                 Sentinel's port and a master it monitors)"
            }
            Self::Unreachable { .. } => {
                "check that Redis runs, that the host and port in redis.url are right and \
                 reachable from here, and whether the port expects TLS (then use rediss://)"
            }
            Self::Timeout { .. } => {
                "check that Redis is up and not overloaded (by this instance too: a burst of \
                 thousands of checks at once waits in its queue, which the timeout counts), \
                 that a rediss:// URL names a port that speaks TLS (a plaintext port never \
                 answers the TLS handshake), or raise redis.connect_timeout / \
                 redis.command_timeout"
            }
            Self::Other { .. } => "see the message",
        }
    }

    fn cause(&self) -> &'static str {
        match self {
            Self::WrongPassword { .. } => "Redis refused the password",
            Self::NoPassword { .. } => "Redis requires a password and none was given",
            Self::NoPermission { .. } => "the Redis user lacks a permission",
            Self::Tls { .. } => "the TLS handshake with Redis failed",
            Self::TlsFile { .. } => "a TLS file cannot be used",
            Self::NoSuchDatabase { .. } => "the Redis database does not exist",
            Self::ReadOnlyReplica { .. } => "Redis is a replica, not the master",
            Self::InvalidSettings { .. } => "the Redis settings cannot work",
            Self::Unreachable { .. } => "Redis is unreachable",
            Self::Timeout { .. } => "Redis did not answer in time",
            Self::Other { .. } => "Redis failed",
        }
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.cause())?;
        match self {
            Self::TlsFile { path, message } => write!(f, " ({}: {message})", path.display())?,
            Self::Timeout { after } => write!(f, " (within {after:?})")?,
            other => {
                if let Some(message) = other.message() {
                    write!(f, " ({message})")?;
                }
            }
        }
        write!(f, "; fix: {}", self.fix())
    }
}

#[cfg(feature = "redis")]
mod classify {
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
}
