//! How user ids and routes become key parts: injective, bounded, and free of Redis hash tags.
//!
//! - An id of at most [`MAX_RAW_ID_LEN`] bytes made only of "safe" characters (ASCII letters,
//!   digits and `-._~:/!$&'()*+,;=|<>[]^` and backtick) is used as it is, with no allocation.
//! - Any other id of at most [`MAX_RAW_ID_LEN`] bytes is percent-encoded (`%XX`, upper-case hex):
//!   `{`, `}` (Redis Cluster hash tags), `%`, `#`, `@`, spaces, control bytes, non-ASCII.
//! - A longer id is replaced by `#` and the hex SHA-256 of its bytes (65 bytes in all).
//! - A client address (when there is no user id) is `@` and the address: `@192.0.2.1`.
//! - The empty id is `%` alone, which no percent-encoding gives (a `%` there is always followed
//!   by two hex digits). An empty key part would make the empty user's per-route bucket
//!   (`@/login`) an address's form, and a route named like an address (`1.2.3.4`) give the
//!   empty user the key of that address.
//!
//! The forms cannot meet: safe ids are not empty and hold neither `%`, `#` nor `@`;
//! percent-encoded ids hold `%` and never `#` or `@`; hashed ids start with `#`; addresses start
//! with `@`. So no user id can take another user's key, an address's key, or (with the tier in
//! the key) another tier's.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

/// Ids longer than this many bytes are hashed.
pub const MAX_RAW_ID_LEN: usize = 128;

/// The endpoint key part used when a request matched no route (a 404, or a layer outside the
/// router). `@` cannot start an encoded route, so no route template can take it.
pub const UNMATCHED_ENDPOINT: &str = "@unmatched";

/// `SAFE[b]`: byte `b` may stand in a key part as it is.
static SAFE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let extra = b"-._~:/!$&'()*+,;=|<>[]^`";
    let mut i = 0;
    while i < extra.len() {
        table[extra[i] as usize] = true;
        i += 1;
    }
    table
};

#[inline]
fn is_safe(b: u8) -> bool {
    SAFE[usize::from(b)]
}

/// Whether every byte may stand as it is: no branch between the bytes of a chunk, and no loop
/// over a remainder: the last chunk overlaps the one before (every check encodes two key
/// parts, so this runs twice a check).
#[inline(always)]
fn all_safe(bytes: &[u8]) -> bool {
    fn chunk<const N: usize>(chunk: &[u8; N]) -> bool {
        chunk.iter().fold(true, |ok, &b| ok & is_safe(b))
    }
    if let Some((_, last)) = bytes.split_last_chunk::<8>() {
        let mut rest = bytes;
        while let Some((first, more)) = rest.split_first_chunk::<8>() {
            if !chunk(first) {
                return false;
            }
            rest = more;
        }
        return chunk(last);
    }
    match (bytes.first_chunk::<4>(), bytes.last_chunk::<4>()) {
        (Some(first), Some(last)) => chunk(first) & chunk(last),
        _ => bytes.iter().fold(true, |ok, &b| ok & is_safe(b)),
    }
}

/// Whether `id` stands as it is in a key part (no encoding, no hashing).
#[inline(always)]
pub(crate) fn is_plain(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_RAW_ID_LEN && all_safe(id.as_bytes())
}

/// The key part of the empty id (see the module docs).
const EMPTY_ID: &str = "%";

/// Encodes an id or a route into a key part (see the module docs).
#[inline]
pub fn encode_id(id: &str) -> Cow<'_, str> {
    if is_plain(id) {
        Cow::Borrowed(id)
    } else if id.is_empty() {
        Cow::Borrowed(EMPTY_ID)
    } else {
        Cow::Owned(encode_other(id))
    }
}

/// The key part of an id that cannot stand as it is: percent-encoded, or hashed when long.
///
/// Not rare: a route template with a parameter (`/items/{id}`) comes here on every check, so
/// the safe runs are copied whole and the hex digits come from a table, not through `fmt`.
#[inline(never)]
fn encode_other(id: &str) -> String {
    let bytes = id.as_bytes();
    let out = if bytes.len() > MAX_RAW_ID_LEN {
        let mut out = Vec::with_capacity(1 + 64);
        out.push(b'#');
        for b in Sha256::digest(bytes) {
            out.extend_from_slice(&hex(b, b"0123456789abcdef"));
        }
        out
    } else {
        let mut out = Vec::with_capacity(bytes.len() * 3);
        let mut rest = bytes;
        while let Some(i) = rest.iter().position(|&b| !is_safe(b)) {
            out.extend_from_slice(&rest[..i]);
            let [hi, lo] = hex(rest[i], b"0123456789ABCDEF");
            out.extend_from_slice(&[b'%', hi, lo]);
            rest = &rest[i + 1..];
        }
        out.extend_from_slice(rest);
        out
    };
    // Only ASCII was written: safe bytes, `%`, `#` and hex digits.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// `b` as two hex digits taken from `digits`.
#[inline]
fn hex(b: u8, digits: &[u8; 16]) -> [u8; 2] {
    [digits[usize::from(b >> 4)], digits[usize::from(b & 0x0f)]]
}

/// The key part of a client address: `@` and the address.
pub(crate) fn encode_ip(ip: std::net::IpAddr) -> String {
    format!("@{ip}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn safe_ids_borrow() {
        assert!(matches!(encode_id("alice-42"), Cow::Borrowed("alice-42")));
        assert!(matches!(encode_id("/api/v1/items"), Cow::Borrowed(_)));
    }

    #[test]
    fn braces_and_markers_are_encoded() {
        assert_eq!(encode_id("{tag}"), "%7Btag%7D");
        assert_eq!(encode_id("/items/{id}"), "/items/%7Bid%7D");
        assert_eq!(encode_id("@1.2.3.4"), "%401.2.3.4");
        assert_eq!(encode_id("#abc"), "%23abc");
        assert_eq!(encode_id("50%"), "50%25");
        assert_eq!(encode_id("a b\n"), "a%20b%0A");
        assert_eq!(encode_id("é"), "%C3%A9");
    }

    #[test]
    fn long_ids_are_hashed_and_bounded() {
        let long = "x".repeat(10_000);
        let enc = encode_id(&long);
        assert_eq!(enc.len(), 65);
        assert!(enc.starts_with('#'));
        assert_ne!(encode_id(&"x".repeat(10_001)), enc);
        // exactly at the bound: kept
        assert_eq!(encode_id(&"y".repeat(MAX_RAW_ID_LEN)).len(), MAX_RAW_ID_LEN);
    }

    #[test]
    fn forms_cannot_collide() {
        let ip = encode_ip("10.0.0.5".parse().unwrap());
        assert_ne!(encode_id("@10.0.0.5"), ip);
        assert_ne!(encode_id(UNMATCHED_ENDPOINT), UNMATCHED_ENDPOINT);
        let hashed = encode_id(&"z".repeat(200)).into_owned();
        assert_ne!(encode_id(&hashed), hashed);
        // The empty id: a key part of its own, that no other id takes and no address starts.
        assert_eq!(encode_id(""), "%");
        for other in ["%", "%25", "@", "#"] {
            assert_ne!(encode_id(other), encode_id(""), "{other:?}");
        }
    }

    /// The encoding as the module docs state it, written the plain way with `fmt`.
    fn reference(id: &str) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        if id.is_empty() {
            out.push('%');
        } else if id.len() > MAX_RAW_ID_LEN {
            out.push('#');
            for b in Sha256::digest(id.as_bytes()) {
                let _ = write!(out, "{b:02x}");
            }
        } else {
            for &b in id.as_bytes() {
                if is_safe(b) {
                    out.push(char::from(b));
                } else {
                    let _ = write!(out, "%{b:02X}");
                }
            }
        }
        out
    }

    /// One unsafe byte anywhere, in an id of any length up to three chunks, is seen (the
    /// check reads chunks that overlap at the end).
    #[test]
    fn one_unsafe_byte_anywhere_is_seen() {
        assert!(!is_plain(""), "the empty id is encoded");
        for len in 1..=40 {
            let safe = "aB9-._~:/".repeat(5)[..len].to_owned();
            assert!(is_plain(&safe), "{safe:?}");
            for at in 0..len {
                for bad in [b'{', b'%', b'@', b' ', 0x7f, 0x00] {
                    let mut id = safe.clone().into_bytes();
                    id[at] = bad;
                    let id = String::from_utf8(id).unwrap();
                    assert!(!is_plain(&id), "{id:?}");
                }
            }
        }
    }

    #[test]
    fn matches_the_plain_encoding_on_seeded_ids() {
        let mut next = crate::test_rng::seeded(0x2545_f491_4f6c_dd1d_u64);
        let alphabet: Vec<char> = "aZ09-._~/{}%@# \n\u{0}\u{7f}é😀:|".chars().collect();
        for _ in 0..20_000 {
            let len = (next() % 140) as usize;
            let id: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            assert_eq!(encode_id(&id), reference(&id), "{id:?}");
        }
    }
}
