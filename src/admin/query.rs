//! Whether a query string is text: serde's `Query` turns bytes that are not UTF-8 once
//! percent-decoded (`?user=%FF`) into U+FFFD, which is another, real user id (an audit:
//! `?user=%FF%FE` read the bucket of the id `\u{FFFD}\u{FFFD}`). The admin routes refuse such
//! a query instead.

/// Whether `raw` (a query string as sent, `+` for a space) is UTF-8 once percent-decoded. A
/// `%` not followed by two hex digits stays as it is, as form decoding leaves it.
pub(super) fn decodes_to_utf8(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    let hex = |at: usize| bytes.get(at).and_then(|&b| (b as char).to_digit(16));
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if let (b'%', Some(h), Some(l)) = (bytes[i], hex(i + 1), hex(i + 2)) {
            decoded.push((h * 16 + l) as u8);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    std::str::from_utf8(&decoded).is_ok()
}

#[cfg(test)]
mod tests {
    use super::decodes_to_utf8;

    #[test]
    fn only_text_once_decoded_passes() {
        for ok in [
            "",
            "user=alice",
            "user=%C3%A9",
            "user=a+b&ip=%3A%3A1",
            "user=100%",
            "a=%zz",
        ] {
            assert!(decodes_to_utf8(ok), "{ok}");
        }
        for bad in [
            "user=%FF",
            "user=%FF%FE",
            "user=%C3",
            "user=ok&endpoint=%80",
        ] {
            assert!(!decodes_to_utf8(bad), "{bad}");
        }
    }
}
