//! The chain of addresses the trusted proxies wrote: read from the one header the operator
//! names (RFC 7239 `Forwarded`, or a comma-separated list such as `X-Forwarded-For`).

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

/// The `for=` address of each element of one `Forwarded` line (RFC 7239): elements split on
/// `,` and parameters on `;`, but never inside a quoted string (`host="a,b;c"`, with `\`
/// escapes), where proxies put values the client chose. An element with no `for`, or with
/// two, gives `None`; an unbalanced quote runs to the end of the line.
fn forwarded_elements(line: &[u8]) -> Vec<Option<IpAddr>> {
    let mut out = Vec::new();
    // This element's `for` value: none yet, one, or more than one.
    let mut found: Option<Option<IpAddr>> = None;
    let mut twice = false;
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for i in 0..=line.len() {
        let b = line.get(i).copied();
        if quoted {
            match b {
                Some(_) if escaped => escaped = false,
                Some(b'\\') => escaped = true,
                Some(b'"') => quoted = false,
                Some(_) => {}
                None => {}
            }
            if b.is_some() {
                continue;
            }
        }
        match b {
            Some(b'"') => {
                quoted = true;
                continue;
            }
            Some(b';' | b',') | None => {}
            Some(_) => continue,
        }
        let pair = &line[start..i];
        start = i + 1;
        if let Some(at) = pair.iter().position(|c| *c == b'=') {
            if pair[..at].trim_ascii().eq_ignore_ascii_case(b"for") {
                twice |= found.is_some();
                found = Some(parse_node(&unquote(&pair[at + 1..])));
            }
        }
        if b != Some(b';') {
            out.push(if twice { None } else { found.flatten() });
            (found, twice) = (None, false);
        }
    }
    out
}

/// A parameter's value without its quotes and `\` escapes (`"[2001:db8::1]:80"`); a token as
/// it is.
fn unquote(value: &[u8]) -> Vec<u8> {
    let value = value.trim_ascii();
    let Some(inner) = value
        .strip_prefix(b"\"")
        .and_then(|v| v.strip_suffix(b"\""))
    else {
        return value.to_vec();
    };
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
    out
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:4711`, `"[2001:db8::1]:4711"`,
/// `2001:db8::1`.
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
    port.parse::<u16>().ok()?;
    ip.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}
