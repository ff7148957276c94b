//! The hash used inside slot tables (the slot itself comes from CRC16, see `slot`).

use std::hash::BuildHasher;
use std::sync::LazyLock;

/// Seeded once per process, so an attacker cannot precompute colliding keys.
static STATE: LazyLock<foldhash::fast::RandomState> = LazyLock::new(Default::default);

/// 32-bit table hash of a key: low bits pick the home bucket, high bits the control tag.
pub fn key_hash(key: &[u8]) -> u32 {
    let h = STATE.hash_one(key);
    (h ^ (h >> 32)) as u32
}
