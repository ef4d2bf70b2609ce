//! Whether one flipped bit explains a checksum mismatch: how recovery tells bit rot in a
//! complete frame from a torn write, whose lost bytes read as zeros.
//!
//! CRC-32 is linear: for two messages of one length, `crc(a) ^ crc(b)` is the raw CRC (no
//! initial value, no final xor) of `a ^ b`. A single flipped bit at byte `i`, bit `b` of an
//! `n`-byte message therefore changes the CRC by the raw CRC of that bit alone followed by
//! `n - 1 - i` zero bytes. Feeding a zero byte into the raw CRC register is invertible, so
//! instead of one CRC per candidate bit (quadratic in `n`), the difference is fed back through
//! zero bytes one at a time and compared with the eight one-byte patterns: `8 n` register steps
//! in all (about 10 ms for a 1 MiB body).
//!
//! A torn write that happens to look like one flipped bit has a chance of about `8 n / 2^32`.
//! CRC-32 (IEEE) keeps a Hamming distance of at least 4 for messages up to 11,450 bytes, so there
//! no two flipped bits look like one, and of 5 up to 371 bytes, so there no three do (Koopman's
//! tables).

/// The reflected CRC-32 (IEEE) polynomial, as `crc32fast` uses it.
const POLY: u32 = 0xEDB8_8320;

/// One step of the reflected CRC register with a zero bit fed in.
fn step(reg: u32) -> u32 {
    if reg & 1 == 1 {
        (reg >> 1) ^ POLY
    } else {
        reg >> 1
    }
}

/// The step before [`step`]: `unstep(step(r)) == r` for every `r`. `POLY`'s top bit is set and
/// `reg >> 1`'s is not, so the top bit after a step says whether the polynomial was applied.
fn unstep(reg: u32) -> u32 {
    if reg & 0x8000_0000 != 0 {
        ((reg ^ POLY) << 1) | 1
    } else {
        reg << 1
    }
}

/// Where the one flipped bit that explains a checksum mismatch is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FlippedBit {
    /// In the message.
    InMessage {
        /// The index of the bit's byte in the message.
        byte: u64,
    },
    /// In the stored checksum itself.
    InStored,
}

/// Where a single flipped bit would be that makes the CRC-32 `stored` with a message of `len`
/// bytes differ from the `computed` one, if one does.
#[must_use]
pub fn flipped_bit(stored: u32, computed: u32, len: u64) -> Option<FlippedBit> {
    let difference = stored ^ computed;
    if difference.count_ones() == 1 {
        return Some(FlippedBit::InStored);
    }
    if difference == 0 {
        return None;
    }
    // The raw CRC register after one byte holding only bit `b` (reflected: bit `b` enters at
    // bit `b` of the register).
    let mut patterns = [0u32; 8];
    for (b, pattern) in patterns.iter_mut().enumerate() {
        *pattern = (0..8).fold(1u32 << b, |reg, _| step(reg));
    }
    // After `k` zero bytes fed back, a match says the bit is in the byte `len - 1 - k`.
    let mut reg = difference;
    for k in 0..len {
        if patterns.contains(&reg) {
            return Some(FlippedBit::InMessage { byte: len - 1 - k });
        }
        reg = (0..8).fold(reg, |reg, _| unstep(reg));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unstep_undoes_step() {
        for reg in [0, 1, 2, 0x8000_0000, 0xFFFF_FFFF, POLY, 0x1234_5678] {
            assert_eq!(unstep(step(reg)), reg);
            assert_eq!(step(unstep(reg)), reg);
        }
    }

    proptest! {
        #[test]
        fn one_flipped_bit_is_recognised_anywhere(
            bytes in proptest::collection::vec(any::<u8>(), 1..2_000),
            at in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let stored = crc32fast::hash(&bytes);
            let mut rotted = bytes.clone();
            let at = at.index(bytes.len());
            rotted[at] ^= 1 << bit;
            let computed = crc32fast::hash(&rotted);
            prop_assert_eq!(
                flipped_bit(stored, computed, bytes.len() as u64),
                Some(FlippedBit::InMessage { byte: at as u64 })
            );
            // A bit of the stored checksum itself.
            prop_assert_eq!(
                flipped_bit(stored ^ (1 << (bit * 4)), stored, bytes.len() as u64),
                Some(FlippedBit::InStored)
            );
        }

        #[test]
        fn two_flipped_bits_are_never_one(
            bytes in proptest::collection::vec(any::<u8>(), 2..2_000),
            first in any::<prop::sample::Index>(),
            second in any::<prop::sample::Index>(),
            bits in (0u8..8, 0u8..8),
        ) {
            let (i, j) = (first.index(bytes.len()), second.index(bytes.len()));
            prop_assume!((i, bits.0) != (j, bits.1));
            let stored = crc32fast::hash(&bytes);
            let mut rotted = bytes.clone();
            rotted[i] ^= 1 << bits.0;
            rotted[j] ^= 1 << bits.1;
            let computed = crc32fast::hash(&rotted);
            prop_assert!(flipped_bit(stored, computed, bytes.len() as u64).is_none());
        }

        #[test]
        fn a_zeroed_tail_is_not_one_bit(
            bytes in proptest::collection::vec(1u8..=255, 16..371),
            cut in 2usize..16,
        ) {
            // A torn write: its last bytes never landed and read as zeros.
            let stored = crc32fast::hash(&bytes);
            let mut torn = bytes.clone();
            let n = torn.len();
            torn[n - cut..].fill(0);
            let computed = crc32fast::hash(&torn);
            prop_assert!(flipped_bit(stored, computed, bytes.len() as u64).is_none());
        }
    }
}
