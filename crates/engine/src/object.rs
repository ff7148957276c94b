//! Values that do not live inline in their entry.

use crate::ctx::EngineConfig;
use crate::types::hash::{Hash, HashLimits};
use crate::types::list::List;
use crate::types::set::{Set, SetLimits};
use crate::types::stream::Stream;
use crate::types::zset::ZSet;

/// A boxed value. Strings normally live inline in the entry; they become an object when they
/// are edited in place (APPEND, SETRANGE), which keeps spare capacity like Valkey's raw
/// strings, or when they are too long for an inline length.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    /// A string with room to grow.
    Str(Vec<u8>),
    /// A list.
    List(List),
    /// A sorted set.
    ZSet(ZSet),
    /// A hash (`types::hash`).
    Hash(Hash),
    /// A set (`types::set`).
    Set(Set),
    /// A stream (`types::stream`), boxed: it is larger than the other variants.
    Stream(Box<Stream>),
}

impl Object {
    /// The type name TYPE reports.
    pub fn type_name(&self) -> &'static str {
        match self {
            Object::Str(_) => "string",
            Object::List(_) => "list",
            Object::ZSet(_) => "zset",
            Object::Hash(_) => "hash",
            Object::Set(_) => "set",
            Object::Stream(_) => "stream",
        }
    }

    /// Applies the configured compact-encoding limits to a value decoded from a payload
    /// (RESTORE), which is built as compact as its contents allow. Lists and sorted sets are
    /// built to the limits already when decoded.
    pub fn conform(&mut self, cfg: &EngineConfig) {
        match self {
            Object::Str(_) | Object::List(_) | Object::ZSet(_) | Object::Stream(_) => {}
            Object::Hash(h) => h.conform(HashLimits::from(cfg)),
            Object::Set(s) => s.conform(SetLimits::from(cfg)),
        }
    }

    /// The members of a set, for commands that take sets where sorted sets are expected
    /// (ZUNIONSTORE and friends score each member 1); `None` for every other type. The match
    /// names every variant so that a new type fails to compile until it answers here.
    pub fn set_members(&self) -> Option<Vec<Vec<u8>>> {
        match self {
            Object::Str(_) | Object::List(_) | Object::ZSet(_) | Object::Hash(_) | Object::Stream(_) => None,
            Object::Set(s) => Some(s.iter().map(|m| m.with_bytes(<[u8]>::to_vec)).collect()),
        }
    }

    /// Heap bytes owned by the object beyond the entry (which holds the object itself), for
    /// eviction.
    pub fn heap_size(&self) -> usize {
        match self {
            Object::Str(v) => v.capacity(),
            Object::List(l) => l.heap_size(),
            Object::ZSet(z) => z.heap_size(),
            Object::Hash(h) => h.heap_bytes(),
            Object::Set(s) => s.heap_bytes(),
            Object::Stream(s) => s.heap_size(),
        }
    }
}

/// The size jemalloc actually allocates for a request of `n` bytes (its size classes: 8, then
/// multiples of 16 up to 128, then four classes per doubling: 160, 192, 224, 256, 320, ...).
/// Memory accounting rounds with it so MEMORY USAGE reports what Valkey would.
pub fn size_class(n: usize) -> usize {
    match n {
        0..=8 => 8,
        9..=128 => n.div_ceil(16) * 16,
        _ => {
            let lg = usize::BITS - 1 - (n - 1).leading_zeros();
            let delta = 1usize << (lg - 2);
            n.div_ceil(delta) * delta
        }
    }
}

#[cfg(test)]
mod tests {
    use super::size_class;

    #[test]
    fn jemalloc_size_classes() {
        let classes = [8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640];
        let mut want = classes.iter();
        let mut current = *want.next().unwrap();
        for n in 1..=640 {
            if n > current {
                current = *want.next().unwrap();
            }
            assert_eq!(size_class(n), current, "{n}");
        }
        assert_eq!(size_class(4096), 4096);
        assert_eq!(size_class(4097), 5120);
        assert_eq!(size_class(14337), 16384);
        assert_eq!(size_class(16385), 20480);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), (1 << 20) + (1 << 18));
    }
}
