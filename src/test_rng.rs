//! Seeded pseudo-random numbers for the unit tests (xorshift64): the same sequence on every
//! run, so that a failure repeats, with no dependency.

/// The numbers that follow `seed` (which must not be 0), one per call.
pub(crate) fn seeded(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}
