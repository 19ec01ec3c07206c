//! Which partition a keyed record goes to: Kafka's default partitioner, as the Java client
//! and librdkafka's `murmur2_random` compute it: `(murmur2(key) & 0x7fffffff) % partitions`.
//!
//! The relay chooses the partition itself (and hands it to librdkafka explicitly) so that it
//! knows, before a record is handed over, which partition's head it lands on
//! ([`crate::head`]). The choice must be exactly the partitioner's, or consumers would see
//! keys move: the test vectors are Kafka's own (`UtilsTest.testMurmur2`).

/// Kafka's murmur2 (seed 0x9747b28c), as `org.apache.kafka.common.utils.Utils.murmur2`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() >= 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of `key` in a topic of `partitions` partitions (> 0).
pub fn of_key(key: &[u8], partitions: i32) -> i32 {
    debug_assert!(partitions > 0);
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn kafkas_own_vectors() {
        // org.apache.kafka.common.utils.UtilsTest#testMurmur2
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, want) in cases {
            assert_eq!(murmur2(key), want, "{:?}", String::from_utf8_lossy(key));
        }
    }

    proptest! {
        #[test]
        fn a_key_always_lands_in_range_and_in_the_same_place(
            key in proptest::collection::vec(any::<u8>(), 0..64),
            partitions in 1i32..1000,
        ) {
            let p = of_key(&key, partitions);
            prop_assert!((0..partitions).contains(&p));
            prop_assert_eq!(p, of_key(&key, partitions));
        }
    }
}
