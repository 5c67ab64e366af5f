//! The schemes of a Redis URL: which are accepted, which need TLS, and the form fred is given.
//!
//! Checked before fred parses the URL, because fred accepts more than works: without a TLS
//! feature it takes `rediss://` and connects in plaintext, and `unix://` fails only when
//! connecting ("Invalid or missing host").
//!
//! Pure functions of the URL, importing nothing of this crate: the configuration validates
//! URLs with them, and the Redis store builds its client from [`fred_config`].

use std::borrow::Cow;

/// What a URL's scheme asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scheme {
    /// `rediss://`, `rediss-cluster://`, `valkeys://`, ...: TLS.
    pub(crate) tls: bool,
    /// `redis+unix://`, `valkey+unix://`, `unix://`: a Unix socket.
    pub(crate) unix: bool,
}

/// Every scheme accepted, as the error lists them.
const ACCEPTED: &str = "redis://, rediss://, redis-cluster://, rediss-cluster://, \
    redis-sentinel://, rediss-sentinel://, redis+unix:// (or unix://), and the same with valkey \
    in place of redis (valkey://, valkeys://, ...)";

/// The scheme of `url`, or why it is refused.
pub(crate) fn scheme(url: &str) -> Result<Scheme, String> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(format!("no scheme; must start with one of {ACCEPTED}"));
    };
    let scheme = scheme.to_ascii_lowercase();
    let unix = match scheme.as_str() {
        "unix" | "redis+unix" | "valkey+unix" => true,
        "redis" | "rediss" | "valkey" | "valkeys" => false,
        "redis-cluster" | "rediss-cluster" | "valkey-cluster" | "valkeys-cluster" => false,
        "redis-sentinel" | "rediss-sentinel" | "valkey-sentinel" | "valkeys-sentinel" => false,
        "rediss+unix" | "valkeys+unix" => {
            return Err(
                "TLS over a Unix socket is not supported; use redis+unix:// (the \
                 socket is local) or rediss:// over TCP"
                    .to_owned(),
            );
        }
        other => {
            return Err(format!(
                "scheme {other}:// is not supported; use one of {ACCEPTED}"
            ));
        }
    };
    if unix && !cfg!(unix) {
        return Err("Unix sockets are not available on this platform".to_owned());
    }
    let tls = !unix && (scheme.starts_with("rediss") || scheme.starts_with("valkeys"));
    Ok(Scheme { tls, unix })
}

/// The URL as fred should parse it: TLS schemes lose their `s` (the store sets up TLS itself,
/// with the configured trust, rather than fred's default), and `unix://` becomes
/// `redis+unix://`.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn for_fred(url: &str) -> Cow<'_, str> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Cow::Borrowed(url);
    };
    let lower = scheme.to_ascii_lowercase();
    let plain = if lower == "unix" {
        "redis+unix".to_owned()
    } else if let Some(tail) = lower.strip_prefix("rediss") {
        format!("redis{tail}")
    } else if let Some(tail) = lower.strip_prefix("valkeys") {
        format!("valkey{tail}")
    } else {
        return Cow::Borrowed(url);
    };
    Cow::Owned(format!("{plain}://{rest}"))
}

/// fred's reading of `url` (without TLS: see [`for_fred`]; clustered for `redis-cluster://`
/// URLs or `cluster`), or fred's reason for refusing it.
#[cfg(feature = "redis")]
pub(crate) fn fred_config(url: &str, cluster: bool) -> Result<fred::prelude::Config, String> {
    let fred_url = for_fred(url);
    let config = if cluster {
        fred::prelude::Config::from_url_clustered(&fred_url)
    } else {
        fred::prelude::Config::from_url(&fred_url)
    };
    let config = config.map_err(|e| fred_refusal(e.details()))?;
    check_query(&fred_url, cluster)?;
    Ok(config)
}

/// Refuses a query parameter that the URL's kind does not read: fred ignores any it does not
/// know, so a typo (`?nodes=`), a parameter of another kind (`?node=` on a single
/// server, which stays one server) or one this build's fred cannot use (`sentinelUsername`,
/// `sentinelPassword`: fred's `sentinel-auth` feature is off) would be dropped without a word.
/// The query is read as fred reads it (`url`'s `query_pairs`: keys percent-decoded, the
/// fragment left out); called only on a URL fred has read, with `cluster` as fred was told.
#[cfg(feature = "redis")]
fn check_query(url: &str, cluster: bool) -> Result<(), String> {
    let Ok(parsed) = url::Url::parse(url) else {
        return Ok(()); // fred read it; nothing to add
    };
    let scheme = parsed.scheme().to_ascii_lowercase();
    // fred reads a URL as a cluster's whenever it is told to, whatever its scheme.
    let (kind, known): (&str, &[&str]) = if cluster || scheme.ends_with("-cluster") {
        ("a cluster URL", &["node"])
    } else if scheme.ends_with("-sentinel") {
        ("a Sentinel URL", &["node", "sentinelServiceName"])
    } else {
        ("a single server's URL", &[])
    };
    for (key, _) in parsed.query_pairs() {
        if known.contains(&key.as_ref()) {
            continue;
        }
        let takes = match known {
            [] => "takes no query parameter".to_owned(),
            known => format!("takes only {}", known.join(" and ")),
        };
        // A key holding `@` or `:` may be the end of a password with a bare `?` in it: it is
        // not repeated in an error that will be logged.
        let name = if key.contains(['@', ':']) {
            "a query parameter (its name is not shown: a `?` in a password must be written %3F)"
                .to_owned()
        } else {
            format!("the query parameter `{key}`")
        };
        return Err(format!(
            "{name} is not read: {kind} {takes} (fred would drop it without a word)"
        ));
    }
    Ok(())
}

/// fred's reason for refusing a URL, in words where its own are a parser's (`InvalidPort`).
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
fn fred_refusal(details: &str) -> String {
    let plain = match details {
        "InvalidPort" => "the port is not a number from 1 to 65535",
        "Invalid integer string." => "the database (the path: /DB) is not a number",
        "EmptyHost" => "the host is missing",
        "InvalidIpv4Address" | "InvalidIpv6Address" => "the host is no valid IP address",
        "RelativeUrlWithoutBase" => "it is not a URL (redis://HOST:PORT)",
        other => return format!("fred cannot read it: {other}"),
    };
    format!("{plain} (fred: {details})")
}

/// `url` pointed at one node (`host:port`) of its cluster, keeping its scheme's TLS and its
/// credentials: `rediss-cluster://user:pw@a:1?node=b:2` → `rediss://user:pw@b:2`.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn single_node(url: &str, addr: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    let tls = scheme.starts_with("rediss") || scheme.starts_with("valkeys");
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let credentials = authority
        .rsplit_once('@')
        .map(|(c, _)| format!("{c}@"))
        .unwrap_or_default();
    let scheme = if tls { "rediss" } else { "redis" };
    format!("{scheme}://{credentials}{addr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "redis")]
    #[test]
    fn a_refused_url_is_told_in_words_naming_the_part() {
        let refusal = |url| fred_config(url, false).unwrap_err();
        assert!(
            refusal("redis://127.0.0.1:99999").starts_with("the port is not a number"),
            "{}",
            refusal("redis://127.0.0.1:99999")
        );
        assert!(
            refusal("redis://127.0.0.1:6379/abc").starts_with("the database"),
            "{}",
            refusal("redis://127.0.0.1:6379/abc")
        );
    }

    /// fred drops a query parameter it does not know: a typo, a cluster's `node` on a single
    /// server's URL, or a Sentinel's credentials without fred's `sentinel-auth` feature would
    /// each be lost without a word.
    #[cfg(feature = "redis")]
    #[test]
    fn a_query_parameter_the_url_does_not_read_is_refused_by_name() {
        let refusal = |url, cluster| fred_config(url, cluster).unwrap_err();
        let e = refusal("redis://127.0.0.1:6379?foo=bar", false);
        assert!(
            e.contains("`foo`") && e.contains("takes no query parameter"),
            "{e}"
        );
        let e = refusal("redis://127.0.0.1:6379/0?node=127.0.0.1:6380", false);
        assert!(e.contains("`node`"), "{e}");
        let e = refusal("redis-cluster://127.0.0.1:7000?nodes=127.0.0.1:7001", false);
        assert!(
            e.contains("`nodes`") && e.contains("takes only node"),
            "{e}"
        );
        let e = refusal(
            "redis-sentinel://127.0.0.1:26379?sentinelServiceName=m&sentinelPassword=pw",
            false,
        );
        assert!(e.contains("`sentinelPassword`"), "{e}");
        let e = refusal(
            "redis-sentinel://127.0.0.1:26379?sentinelservicename=m",
            false,
        );
        // (fred itself refuses a Sentinel URL without the name, and says so.)
        assert!(e.contains("sentinel service name"), "{e}");
        let e = refusal("unix:///tmp/redis.sock?db=1", false);
        assert!(e.contains("`db`"), "{e}");
        // fred reads a URL as a cluster's when told to, and drops a Sentinel's name there.
        let e = refusal(
            "redis-sentinel://127.0.0.1:26379?sentinelServiceName=m",
            true,
        );
        assert!(e.contains("`sentinelServiceName`"), "{e}");
        // The end of a password with a bare `?` is not repeated in the error.
        let e = refusal("redis://127.0.0.1:6379?hunter2@x", false);
        assert!(!e.contains("hunter2"), "{e}");
        // Read as fred reads it: a `?` in the fragment is no query, and keys are decoded.
        assert!(fred_config("redis://127.0.0.1:6379#?x=1", false).is_ok());
        assert!(fred_config("redis://127.0.0.1:7000?%6Eode=127.0.0.1:7001", true).is_ok());
        // What each kind reads still passes, and an empty query is no parameter.
        for (url, cluster) in [
            ("redis://127.0.0.1:6379?", false),
            ("redis://127.0.0.1:7000?node=127.0.0.1:7001", true),
            (
                "rediss-cluster://u:p@127.0.0.1:7000?node=127.0.0.1:7001&node=127.0.0.1:7002",
                false,
            ),
            (
                "redis-sentinel://127.0.0.1:26379?sentinelServiceName=m&node=127.0.0.1:26380",
                false,
            ),
        ] {
            assert!(fred_config(url, cluster).is_ok(), "{url}");
        }
    }

    #[test]
    fn schemes() {
        let tls = |u| scheme(u).map(|s| s.tls);
        assert_eq!(tls("redis://h"), Ok(false));
        assert_eq!(tls("rediss://h"), Ok(true));
        assert_eq!(tls("rediss-cluster://h:1"), Ok(true));
        assert_eq!(tls("rediss-sentinel://h:1"), Ok(true));
        assert_eq!(tls("valkeys://h"), Ok(true));
        assert_eq!(tls("valkey-cluster://h:1"), Ok(false));
        assert!(scheme("http://h").is_err());
        assert!(scheme("h:6379").is_err());
        assert!(scheme("rediss+unix:///tmp/s").is_err());
        #[cfg(unix)]
        assert_eq!(scheme("unix:///tmp/s").map(|s| s.unix), Ok(true));
    }

    #[test]
    fn fred_form() {
        assert_eq!(for_fred("rediss://h:1/2"), "redis://h:1/2");
        assert_eq!(for_fred("rediss-cluster://h:1"), "redis-cluster://h:1");
        assert_eq!(for_fred("valkeys-sentinel://h:1"), "valkey-sentinel://h:1");
        assert_eq!(for_fred("unix:///tmp/s"), "redis+unix:///tmp/s");
        assert_eq!(for_fred("redis://h"), "redis://h");
    }

    #[test]
    fn one_node_of_a_cluster() {
        assert_eq!(
            single_node("rediss-cluster://u:p@a:1?node=b:2", "b:2"),
            "rediss://u:p@b:2"
        );
        assert_eq!(single_node("redis-cluster://a:1", "c:3"), "redis://c:3");
    }
}
