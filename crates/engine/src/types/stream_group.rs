//! A stream's consumer groups (Valkey's `streamCG`, `streamConsumer`, `streamNACK`).
//!
//! The group's pending entries list (PEL) maps each delivered, unacknowledged id to its
//! delivery time, count and owner; each consumer keeps the set of ids it owns, so XPENDING of
//! one consumer and XINFO's per-consumer counts need no scan. A PEL entry costs its 16-byte id
//! twice (group and consumer), 16 bytes of counters and the owner's name handle.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::stream::StreamId;

/// `SCG_INVALID_ENTRIES_READ`: the group's read counter is unknown.
pub const INVALID_ENTRIES_READ: i64 = -1;

/// A delivered, unacknowledged entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nack {
    /// Last delivery, unix milliseconds.
    pub delivery_time: i64,
    /// Deliveries so far.
    pub delivery_count: u64,
    /// The consumer that owns it.
    pub consumer: Arc<[u8]>,
}

/// A consumer of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    /// Its name (shared with its PEL entries).
    pub name: Arc<[u8]>,
    /// Last time it was seen (any read or claim attempt), unix ms.
    pub seen_time: i64,
    /// Last time it read or claimed something, unix ms; -1 never.
    pub active_time: i64,
    /// Ids it owns.
    pub pel: BTreeSet<StreamId>,
}

/// A consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Last id delivered to the group.
    pub last_id: StreamId,
    /// Logical read counter, [`INVALID_ENTRIES_READ`] when unknown.
    pub entries_read: i64,
    /// The pending entries.
    pub pel: BTreeMap<StreamId, Nack>,
    /// Consumers by name.
    pub consumers: BTreeMap<Arc<[u8]>, Consumer>,
}

impl Group {
    /// A group that starts after `last_id`.
    pub fn new(last_id: StreamId, entries_read: i64) -> Group {
        Group { last_id, entries_read, pel: BTreeMap::new(), consumers: BTreeMap::new() }
    }

    /// Heap bytes (MEMORY USAGE).
    pub fn heap_size(&self) -> usize {
        let consumers: usize = self.consumers.values().map(|c| c.name.len() + 64 + c.pel.len() * 24).sum();
        self.pel.len() * 64 + consumers + 64
    }

    /// The consumer named `name`, created (seen now) when missing; the bool says it was
    /// created.
    pub fn consumer_or_create(&mut self, name: &[u8], now: i64) -> (&mut Consumer, bool) {
        let created = !self.consumers.contains_key(name);
        if created {
            let name: Arc<[u8]> = Arc::from(name);
            let c = Consumer { name: name.clone(), seen_time: now, active_time: -1, pel: BTreeSet::new() };
            self.consumers.insert(name, c);
        }
        (self.consumers.get_mut(name).expect("consumer exists"), created)
    }

    /// Removes a consumer and its pending entries; returns how many it had.
    pub fn delete_consumer(&mut self, name: &[u8]) -> Option<usize> {
        let c = self.consumers.remove(name)?;
        for id in &c.pel {
            self.pel.remove(id);
        }
        Some(c.pel.len())
    }

    /// Acknowledges `id`; true if it was pending.
    pub fn ack(&mut self, id: StreamId) -> bool {
        let Some(n) = self.pel.remove(&id) else { return false };
        if let Some(c) = self.consumers.get_mut(&n.consumer) {
            c.pel.remove(&id);
        }
        true
    }

    /// Makes `id` pending for `consumer` (which exists), moving it from its previous owner.
    pub fn assign(&mut self, id: StreamId, consumer: &[u8], time: i64, count: u64) {
        if let Some(old) = self.pel.get(&id).map(|n| n.consumer.clone())
            && let Some(c) = self.consumers.get_mut(&old)
        {
            c.pel.remove(&id);
        }
        let c = self.consumers.get_mut(consumer).expect("consumer exists");
        c.pel.insert(id);
        let n = Nack { delivery_time: time, delivery_count: count, consumer: c.name.clone() };
        self.pel.insert(id, n);
    }
}
