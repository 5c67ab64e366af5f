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
mod classify;
