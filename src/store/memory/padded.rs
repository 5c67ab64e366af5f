//! [`Padded`]: a value on cache lines of its own.

/// A value alone on its cache lines (128 bytes: two 64-byte lines, as x86's adjacent-line
/// prefetcher pairs them), so that writes to it do not evict what other cores read beside it,
/// nor the other way round.
///
/// The store's locks are written by every check that takes them. A lock on the same line as
/// fields every check only reads (the maps' hashers and shard pointers, the time of the next
/// sweep, the count of blocks) makes each of those reads a miss on the core that did not take
/// the lock last: false sharing, paid per check as soon as two threads check at once.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(super) struct Padded<T>(pub(super) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::Padded;

    /// Two neighbours never share a 128-byte block, whatever their size.
    #[test]
    fn neighbours_are_128_bytes_apart() {
        let pair = [Padded(1u8), Padded(2u8)];
        let (a, b) = (&pair[0] as *const _ as usize, &pair[1] as *const _ as usize);
        assert_eq!(a % 128, 0);
        assert_eq!(b - a, 128);
        assert_eq!(*pair[1], 2);
    }
}
