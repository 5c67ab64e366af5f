//! The chain of addresses the trusted proxies wrote: read from the one header the operator
//! names (RFC 7239 `Forwarded`, or a comma-separated list such as `X-Forwarded-For`).

use std::borrow::Cow;
use std::net::IpAddr;

use http::HeaderMap;

use super::{canonical, ClientIpRule};

/// The header that carries the chain of addresses the proxies saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ChainHeader {
    /// RFC 7239 `Forwarded`: the `for=` parameter of each element.
    Forwarded,
    /// A comma-separated list of addresses (`X-Forwarded-For`, `X-Real-IP`, ...).
    List(http::HeaderName),
}

impl ChainHeader {
    /// `Forwarded` for that name, else a list header.
    pub(crate) fn named(name: http::HeaderName) -> Self {
        if name == http::header::FORWARDED {
            Self::Forwarded
        } else {
            Self::List(name)
        }
    }
}

impl Default for ChainHeader {
    fn default() -> Self {
        Self::List(http::HeaderName::from_static("x-forwarded-for"))
    }
}

impl ClientIpRule {
    /// The addresses of the configured header from the right (the last entry of the last
    /// line first), lazily: a walk that stops at the first untrusted address, or a hop count,
    /// reads no further, however long a chain the client wrote. `None` for an entry that is
    /// not an address.
    ///
    /// Lines are split on the raw bytes, so an entry that is not UTF-8 (which only the client
    /// can have written) is one `None` of its own and never hides the entries the proxies
    /// appended after it on the same line.
    pub(super) fn chain_from_the_right<'h>(
        &self,
        headers: &'h HeaderMap,
    ) -> impl Iterator<Item = Option<IpAddr>> + 'h {
        let (forwarded, list) = match &self.header {
            ChainHeader::Forwarded => {
                let lines = headers.get_all(http::header::FORWARDED).iter().rev();
                let elements =
                    lines.flat_map(|v| forwarded_elements(v.as_bytes()).into_iter().rev());
                (Some(elements), None)
            }
            ChainHeader::List(name) => {
                let lines = headers.get_all(name).iter().rev();
                let entries = lines.flat_map(|v| v.as_bytes().rsplit(|b| *b == b','));
                (None, Some(entries.map(parse_node)))
            }
        };
        forwarded
            .into_iter()
            .flatten()
            .chain(list.into_iter().flatten())
    }

    /// The same, left to right, all of it.
    #[cfg(test)]
    pub(super) fn chain(&self, headers: &HeaderMap) -> Vec<Option<IpAddr>> {
        let mut chain: Vec<_> = self.chain_from_the_right(headers).collect();
        chain.reverse();
        chain
    }
}

/// The `for=` address of each element of one `Forwarded` line (RFC 7239), left to right:
/// elements split on `,` and parameters on `;`, but never inside a quoted string
/// (`host="a,b;c"`, with `\` escapes), where proxies put values the client chose. An element
/// with no `for`, or with two, gives `None`.
///
/// The line is read from the right, as the trusted proxies' elements are: they are the last
/// ones and well formed, so whatever the client wrote to their left (a quote it never closes,
/// say) cannot change how they read. A quote with no opening quote to its left makes its
/// element and the rest of the line one `None`: the client's part, broken (an outside audit
/// sent `Forwarded: x="`; read from the left, that quote swallowed the element the proxy
/// appended, and the client was counted under the proxy's address).
fn forwarded_elements(line: &[u8]) -> Vec<Option<IpAddr>> {
    let mut out = Vec::new();
    // This element's `for` value: none yet, one, or more than one.
    let mut found: Option<Option<IpAddr>> = None;
    let mut twice = false;
    // The current parameter is `line[i..end]` once its left edge `i` is found.
    let (mut i, mut end) = (line.len(), line.len());
    loop {
        let edge = match i.checked_sub(1) {
            None => None,
            Some(at) => match line[at] {
                b'"' => {
                    match opening_quote(line, at) {
                        Some(open) => i = open,
                        None => {
                            // Broken: this element and all to its left are one bad entry.
                            out.push(None);
                            break;
                        }
                    }
                    continue;
                }
                b @ (b';' | b',') => Some(b),
                _ => {
                    i = at;
                    continue;
                }
            },
        };
        let pair = &line[i..end];
        if let Some(at) = pair.iter().position(|c| *c == b'=') {
            if pair[..at].trim_ascii().eq_ignore_ascii_case(b"for") {
                twice |= found.is_some();
                found = Some(parse_node(&unquote(&pair[at + 1..])));
            }
        }
        if edge != Some(b';') {
            out.push(if twice { None } else { found.flatten() });
            (found, twice) = (None, false);
        }
        if edge.is_none() {
            break;
        }
        i -= 1;
        end = i;
    }
    out.reverse();
    out
}

/// Where the quoted string that `line[close]` ends opens: the nearest `"` to its left that is
/// not escaped (not preceded by an odd run of `\`). `None` if there is none.
fn opening_quote(line: &[u8], close: usize) -> Option<usize> {
    let mut at = close;
    while let Some(quote) = line[..at].iter().rposition(|c| *c == b'"') {
        let backslashes = line[..quote]
            .iter()
            .rev()
            .take_while(|c| **c == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return Some(quote);
        }
        at = quote;
    }
    None
}

/// A parameter's value without its quotes and `\` escapes (`"[2001:db8::1]:80"`); a token, or
/// a quoted string without escapes, borrowed as it is.
fn unquote(value: &[u8]) -> Cow<'_, [u8]> {
    let value = value.trim_ascii();
    let Some(inner) = value
        .strip_prefix(b"\"")
        .and_then(|v| v.strip_suffix(b"\""))
    else {
        return Cow::Borrowed(value);
    };
    if !inner.contains(&b'\\') {
        return Cow::Borrowed(inner);
    }
    let mut out = Vec::with_capacity(inner.len());
    let mut escaped = false;
    for &c in inner {
        if !escaped && c == b'\\' {
            escaped = true;
        } else {
            out.push(c);
            escaped = false;
        }
    }
    Cow::Owned(out)
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:4711`, `"[2001:db8::1]:4711"`,
/// `2001:db8::1`, with a port as RFC 7239 writes one (up to five digits, or obfuscated:
/// `192.0.2.1:_a1`).
/// `None` for anything else, bytes that are not UTF-8 included.
fn parse_node(node: &[u8]) -> Option<IpAddr> {
    let node = std::str::from_utf8(node).ok()?.trim().trim_matches('"');
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    if let Some(rest) = node.strip_prefix('[') {
        let (ip, _) = rest.split_once(']')?;
        return ip.parse::<IpAddr>().ok().map(canonical);
    }
    let (ip, port) = node.rsplit_once(':')?;
    is_port(port).then_some(())?;
    ip.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// RFC 7239's `node-port`: `1*5DIGIT`, or `"_" 1*(ALPHA / DIGIT / "." / "_" / "-")`.
fn is_port(port: &str) -> bool {
    match port.strip_prefix('_') {
        Some(obfuscated) => {
            !obfuscated.is_empty()
                && obfuscated
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        }
        None => (1..=5).contains(&port.len()) && port.bytes().all(|c| c.is_ascii_digit()),
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderMap;

    use super::super::tests::{behind, ip, parts};
    use super::super::{ClientIpRule, Proxies};
    use super::ChainHeader;

    #[test]
    fn an_entry_that_is_not_utf8_is_one_entry_not_the_whole_line() {
        let raw = |v: &[u8]| {
            let mut h = HeaderMap::new();
            h.append("x-forwarded-for", http::HeaderValue::from_bytes(v).unwrap());
            h
        };
        let rule = behind(&["10.0.0.0/8"]);
        let p = raw(b"\xff\xfe, 198.51.100.4, 10.0.0.2");
        assert_eq!(rule.client(&p, ip("10.0.0.1")), ip("198.51.100.4"));
        // Inside the trusted part it is garbage like any other: the walk stops before it.
        let p = raw(b"198.51.100.4, \xff, 10.0.0.2");
        assert_eq!(rule.client(&p, ip("10.0.0.1")), ip("10.0.0.2"));
        let hops = ClientIpRule {
            proxies: Proxies::Hops(2),
            ..ClientIpRule::default()
        };
        let p = raw(b"\xff, 198.51.100.4, 10.0.0.2");
        assert_eq!(hops.client(&p, ip("10.0.0.1")), ip("198.51.100.4"));
        assert_eq!(
            rule.chain(&raw(b"1.1.1.1,\x80x,2.2.2.2")),
            [Some(ip("1.1.1.1")), None, Some(ip("2.2.2.2"))]
        );
    }

    /// RFC 7239 quoted strings: a `,` or `;` inside one splits nothing. Proxies write values
    /// the client chose (`host=` from its Host header) as quoted strings; an outside review
    /// put `for=6.6.6.N` inside one and picked its own bucket, or the proxy's.
    #[test]
    fn forwarded_quoted_strings_split_nothing() {
        let rule = ClientIpRule {
            header: ChainHeader::Forwarded,
            ..behind(&["10.0.0.0/8"])
        };
        let peer = ip("10.0.0.1");
        for value in [
            "proto=https;host=\"x;for=6.6.6.1\";for=198.51.100.4",
            "for=198.51.100.4;host=\"x, for=6.6.6.1\"",
            "for=198.51.100.4;host=\"x\\\", for=6.6.6.1\"",
            "for=6.6.6.6, for=198.51.100.4;host=\"a,b\"",
        ] {
            let p = parts(&[("forwarded", value)]);
            assert_eq!(rule.client(&p, peer), ip("198.51.100.4"), "{value}");
        }
        let hops = ClientIpRule {
            proxies: Proxies::Hops(1),
            ..rule.clone()
        };
        let p = parts(&[(
            "forwarded",
            "proto=https;host=\"x;for=6.6.6.1\";for=198.51.100.4",
        )]);
        assert_eq!(hops.client(&p, peer), ip("198.51.100.4"));
        // Two `for` in one element, or an unbalanced quote: not an address the proxy wrote.
        let p = parts(&[(
            "forwarded",
            "for=198.51.100.4, for=198.51.100.5;for=6.6.6.6",
        )]);
        assert_eq!(rule.chain(&p), [Some(ip("198.51.100.4")), None]);
        // A quote never closed is the client's: it and all to its left are one bad entry, and
        // what the proxy appended after it still reads.
        let p = parts(&[("forwarded", "for=6.6.6.6;host=\"x, for=198.51.100.4")]);
        assert_eq!(rule.chain(&p), [None, Some(ip("198.51.100.4"))]);
        // Only the `for` key: `xfor=` and `for-x=` are other parameters.
        let p = parts(&[("forwarded", "xfor=6.6.6.6;for=198.51.100.4")]);
        assert_eq!(rule.chain(&p), [Some(ip("198.51.100.4"))]);
    }
    /// An outside audit's bypass: a client that sent `Forwarded: x="` behind a proxy that
    /// appends to its line (`$http_forwarded, for=$remote_addr`) was counted under the proxy's
    /// address, its quote swallowing the element the proxy appended. Now it keeps its own.
    #[test]
    fn a_quote_the_client_leaves_open_does_not_hide_what_the_proxy_appended() {
        let rule = ClientIpRule {
            header: ChainHeader::Forwarded,
            ..behind(&["10.0.0.0/8"])
        };
        let peer = ip("10.0.0.1");
        for client in [
            "x=\"",
            "for=\"",
            "for=\"6.6.6.6",
            "a=\"\\",
            "\"",
            "x=\"a\\\"",
        ] {
            let line = format!("{client}, for=198.51.100.4");
            let p = parts(&[("forwarded", line.as_str())]);
            assert_eq!(rule.client(&p, peer), ip("198.51.100.4"), "{line}");
            assert_eq!(rule.chain(&p), [None, Some(ip("198.51.100.4"))], "{line}");
            let hops = ClientIpRule {
                proxies: Proxies::Hops(1),
                ..rule.clone()
            };
            assert_eq!(hops.client(&p, peer), ip("198.51.100.4"), "{line}");
        }
    }

    /// Whatever a client writes, the elements its proxies append after it read as they were
    /// written: seeded lines of the bytes that matter to the parser (quotes, escapes,
    /// separators, `for=`), then one or two well-formed proxy elements, some with quoted
    /// values of their own. Each proxy's `for` is read, in order, at the end of the chain.
    #[test]
    fn what_the_proxies_append_reads_whatever_the_client_wrote_before_it() {
        const PIECES: [&str; 12] = [
            "\"", "\\", ",", ";", "=", "for", "for=", " ", "6.6.6.6", "x", "[::1]", "\\\"",
        ];
        let rule = ClientIpRule {
            header: ChainHeader::Forwarded,
            ..behind(&["10.0.0.0/8"])
        };
        for seed in 1..=2_000 {
            let mut next = crate::test_rng::seeded(seed);
            let client: String = (0..next() % 12)
                .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                .collect();
            let proxies = [
                "for=198.51.100.4",
                "for=\"[2001:db8::7]:4711\";proto=https",
                "by=10.0.0.9;for=198.51.100.5;host=\"a,b;\\\"for=6.6.6.6\"",
            ];
            let first = proxies[(next() % 3) as usize];
            let second = proxies[(next() % 3) as usize];
            let line = format!("{client}, {first}, {second}");
            let p = parts(&[("forwarded", line.as_str())]);
            let chain = rule.chain(&p);
            let address = |element: &str| {
                let at = element.find("for=").unwrap() + 4;
                let value = element[at..].split(';').next().unwrap().trim_matches('"');
                let value = value
                    .strip_prefix('[')
                    .map_or(value, |v| v.split(']').next().unwrap());
                Some(ip(value))
            };
            assert!(chain.len() >= 3, "seed {seed}: {line:?} read as {chain:?}");
            assert_eq!(
                chain[chain.len() - 2..],
                [address(first), address(second)],
                "seed {seed}: {line:?}"
            );
        }
    }
    /// RFC 7239's ports: five digits at most, or obfuscated (`_` and letters, digits, `.`,
    /// `_`, `-`). A proxy that hides its clients' ports used to have its IPv4 entries read as
    /// no address (a review), which stops the walk at the proxy.
    #[test]
    fn ipv4_ports_as_rfc_7239_writes_them() {
        for (node, read) in [
            ("192.0.2.43:_abc", true),
            ("192.0.2.43:_a.b-c_1", true),
            ("192.0.2.43:99999", true),
            ("192.0.2.43:4711", true),
            ("\"192.0.2.43:_x\"", true),
            ("192.0.2.43:", false),
            ("192.0.2.43:_", false),
            ("192.0.2.43:123456", false),
            ("192.0.2.43:+80", false),
            ("192.0.2.43:_a b", false),
            ("192.0.2.43:_a/b", false),
        ] {
            let expected = read.then(|| ip("192.0.2.43"));
            assert_eq!(super::parse_node(node.as_bytes()), expected, "{node}");
        }
    }
}
