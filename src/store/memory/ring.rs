//! [`Ring`]: the storage of a sliding log, a queue of timestamps in a buffer whose capacity is
//! a power of two, so that an index wraps with a mask instead of a comparison and a subtraction.
//!
//! It is what the log needs of `VecDeque<u64>` and no more: push at the back, pop at the
//! front, read by position, binary search. A log's check does all of that under its lock, on
//! every request, so the few instructions saved per operation are saved three times a check.

/// A FIFO queue of `u64`, oldest first.
///
/// `head` and `tail` run free (they wrap around `usize`, never reset by a pop or a push): the
/// value at position `i` is in slot `(head + i) & mask`, where `mask` is the buffer's length
/// less one, and the length is `tail - head` (the mask is not stored: a log's slot in its
/// table stays small).
#[derive(Default)]
pub(super) struct Ring {
    /// Empty, or a power-of-two length.
    buf: Box<[u64]>,
    /// Where the oldest value is (before the mask).
    head: usize,
    /// Where the next value goes (before the mask).
    tail: usize,
}

/// The values, oldest first (as a `VecDeque` prints), not the buffer's slots.
impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries((0..self.len()).map(|i| self.buf[self.slot(i)]))
            .finish()
    }
}

impl Ring {
    /// The number of values held.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.tail.wrapping_sub(self.head)
    }

    /// How many values it can hold before it grows.
    #[inline]
    pub(super) fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// `buf.len() - 1`: a position's slot is the position and this (while `buf` is not empty).
    #[inline]
    fn mask(&self) -> usize {
        self.buf.len().wrapping_sub(1)
    }

    /// The buffer position of the value at `i` (valid while `buf` is not empty).
    #[inline]
    fn slot(&self, i: usize) -> usize {
        self.head.wrapping_add(i) & self.mask()
    }

    /// The value at position `i` (0: the oldest).
    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<u64> {
        if i < self.len() {
            Some(self.buf[self.slot(i)])
        } else {
            None
        }
    }

    /// The oldest value.
    #[inline]
    pub(super) fn front(&self) -> Option<u64> {
        if self.head != self.tail {
            Some(self.buf[self.head & self.mask()])
        } else {
            None
        }
    }

    /// The newest value.
    #[inline]
    pub(super) fn back(&self) -> Option<u64> {
        if self.head != self.tail {
            Some(self.buf[self.tail.wrapping_sub(1) & self.mask()])
        } else {
            None
        }
    }

    /// Takes the oldest value out.
    #[cfg(test)]
    pub(super) fn pop_front(&mut self) -> Option<u64> {
        let value = self.front()?;
        self.head = self.head.wrapping_add(1);
        Some(value)
    }

    /// Takes values out from the front while `old` says so of them (the ring must be
    /// partitioned by it: all that hold first), then says how many went, how many are left
    /// and the oldest left: in one pass, reading the ring's fields once (a check does this
    /// per tier).
    #[inline(always)]
    pub(super) fn trim(&mut self, mut old: impl FnMut(u64) -> bool) -> (usize, usize, Option<u64>) {
        let (start, tail) = (self.head, self.tail);
        // A buffer of one slot or more (an empty ring may have none): then no slot `x & mask`
        // is past its end, which the compiler sees, and it checks no index in the loop.
        let Some(mask) = self.buf.len().checked_sub(1) else {
            return (0, 0, None);
        };
        let mut head = start;
        let mut oldest = None;
        while head != tail {
            let value = self.buf[head & mask];
            if !old(value) {
                oldest = Some(value);
                break;
            }
            head = head.wrapping_add(1);
        }
        self.head = head;
        (head.wrapping_sub(start), tail.wrapping_sub(head), oldest)
    }

    /// Adds `value` as the newest, doubling the buffer when it is full.
    #[inline(always)]
    pub(super) fn push(&mut self, value: u64) {
        if self.len() == self.buf.len() {
            self.grow();
        }
        let Some(mask) = self.buf.len().checked_sub(1) else {
            unreachable!("a ring that has grown has slots")
        };
        self.buf[self.tail & mask] = value;
        self.tail = self.tail.wrapping_add(1);
    }

    /// Replaces the newest value (nothing happens to an empty ring).
    #[inline(always)]
    pub(super) fn set_back(&mut self, value: u64) {
        if self.head != self.tail {
            let slot = self.tail.wrapping_sub(1) & self.mask();
            self.buf[slot] = value;
        }
    }

    #[cold]
    fn grow(&mut self) {
        self.resize((self.buf.len() * 2).max(4));
    }

    /// Moves the values, in order, into a buffer of `capacity` (a power of two, ≥ len).
    fn resize(&mut self, capacity: usize) {
        let len = self.len();
        let mut buf = vec![0; capacity].into_boxed_slice();
        for (i, value) in buf.iter_mut().take(len).enumerate() {
            *value = self.buf[self.slot(i)];
        }
        self.buf = buf;
        self.head = 0;
        self.tail = len;
    }

    /// Gives back the memory it does not need: the smallest power of two that holds the values.
    pub(super) fn shrink_to_fit(&mut self) {
        let len = self.len();
        let capacity = if len == 0 { 0 } else { len.next_power_of_two() };
        if capacity < self.buf.len() {
            self.resize(capacity);
        }
    }

    /// Forgets every value (keeping the buffer).
    pub(super) fn clear(&mut self) {
        self.head = 0;
        self.tail = 0;
    }

    /// The number of values, from the oldest, for which `pred` holds (the values must be
    /// partitioned by it: all that hold first), found by binary search.
    #[inline]
    pub(super) fn partition_point(&self, pred: impl Fn(u64) -> bool) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(self.buf[self.slot(mid)]) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::Ring;

    /// Drives a ring and a `VecDeque` with the same seeded operations, across many wraps and
    /// resizes, and compares every answer.
    #[test]
    fn behaves_as_a_vecdeque() {
        let mut next = crate::test_rng::seeded(0x9e37_79b9_7f4a_7c15_u64);
        let mut ring = Ring::default();
        let mut model = VecDeque::new();
        let mut clock = 0u64;
        for step in 0..200_000 {
            match next() % 10 {
                0..=4 => {
                    clock += next() % 3;
                    ring.push(clock);
                    model.push_back(clock);
                }
                5 | 6 => assert_eq!(ring.pop_front(), model.pop_front(), "step {step}"),
                7 => {
                    let cut = clock.saturating_sub(next() % 8);
                    let gone = model.iter().take_while(|&&t| t < cut).count();
                    model.drain(..gone);
                    let left = (gone, model.len(), model.front().copied());
                    assert_eq!(ring.trim(|t| t < cut), left, "step {step}");
                }
                9 if next().is_multiple_of(4) => {
                    if let Some(back) = model.back_mut() {
                        *back += 1;
                        ring.set_back(*back);
                        clock = clock.max(*back);
                    }
                }
                8 if next().is_multiple_of(50) => {
                    ring.shrink_to_fit();
                    assert!(ring.capacity() >= ring.len());
                    assert!(ring.capacity() == 0 || ring.capacity().is_power_of_two());
                }
                8 if next().is_multiple_of(500) => {
                    ring.clear();
                    model.clear();
                }
                _ => {
                    let cut = clock.saturating_sub(next() % 20);
                    assert_eq!(
                        ring.partition_point(|t| t < cut),
                        model.partition_point(|&t| t < cut),
                        "step {step}"
                    );
                }
            }
            assert_eq!(ring.len(), model.len());
            assert_eq!(ring.front(), model.front().copied());
            assert_eq!(ring.back(), model.back().copied());
            let i = (next() as usize) % (model.len() + 2);
            assert_eq!(ring.get(i), model.get(i).copied(), "step {step}");
        }
    }

    #[test]
    fn prints_its_values_oldest_first_as_a_vecdeque_does() {
        let mut ring = Ring::default();
        let mut model = VecDeque::new();
        for t in 0..7 {
            ring.push(t);
            model.push_back(t);
        }
        for _ in 0..3 {
            ring.pop_front();
            model.pop_front();
        }
        for t in 7..10 {
            ring.push(t);
            model.push_back(t);
        }
        assert_eq!(format!("{ring:?}"), format!("{model:?}"));
    }

    #[test]
    fn an_empty_ring_holds_nothing_and_shrinks_to_nothing() {
        let mut ring = Ring::default();
        assert_eq!(
            (ring.front(), ring.back(), ring.pop_front()),
            (None, None, None)
        );
        assert_eq!(ring.partition_point(|_| true), 0);
        for t in 0..100 {
            ring.push(t);
        }
        while ring.pop_front().is_some() {}
        ring.shrink_to_fit();
        assert_eq!(ring.capacity(), 0);
        ring.push(7);
        assert_eq!(
            (ring.front(), ring.back(), ring.len()),
            (Some(7), Some(7), 1)
        );
    }
}
