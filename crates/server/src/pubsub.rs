//! Pub/Sub: who listens to which channel, pattern and shard channel, and message delivery.
//!
//! A subscriber is a connection with an unbounded queue of messages; the connection task
//! encodes them in its own protocol (RESP2 arrays or RESP3 pushes) and writes them. Publishing
//! takes a read lock on the channel table only, so publishers on different cores do not wait for
//! each other, and never waits for a slow subscriber: a subscriber whose pending output passes
//! the `pubsub` class output limit (hard, or soft for too long) is disconnected, as Valkey does.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::RwLock;
use tokio::sync::mpsc;

use crate::session::ClientInfo;

/// Which namespace a subscription lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SUBSCRIBE / PUBLISH.
    Channel,
    /// PSUBSCRIBE (glob patterns matched against PUBLISH channels).
    Pattern,
    /// SSUBSCRIBE / SPUBLISH (shard channels, slot-bound in cluster mode).
    Shard,
}

impl Kind {
    /// The event name of a subscription reply.
    pub fn subscribe_word(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"subscribe",
            Kind::Pattern => b"psubscribe",
            Kind::Shard => b"ssubscribe",
        }
    }

    /// The event name of an unsubscription reply.
    pub fn unsubscribe_word(self) -> &'static [u8] {
        match self {
            Kind::Channel => b"unsubscribe",
            Kind::Pattern => b"punsubscribe",
            Kind::Shard => b"sunsubscribe",
        }
    }
}

/// A message on its way to one subscriber.
#[derive(Debug, Clone)]
pub struct Message {
    /// `message`, `pmessage` or `smessage`.
    pub kind: Kind,
    /// The pattern that matched, for `pmessage`.
    pub pattern: Option<Arc<[u8]>>,
    /// The channel.
    pub channel: Arc<[u8]>,
    /// The payload.
    pub payload: Arc<[u8]>,
    /// Not a message: the server ended this subscription (its shard channel's slot moved
    /// away); the connection drops it from its list and tells the client `sunsubscribe`.
    pub ended: bool,
}

impl Message {
    fn size(&self) -> usize {
        self.channel.len() + self.payload.len() + self.pattern.as_ref().map_or(0, |p| p.len()) + 32
    }
}

/// The sending side of a subscriber's queue.
#[derive(Clone)]
pub struct Subscriber {
    tx: mpsc::UnboundedSender<Message>,
    queued: Arc<AtomicUsize>,
    info: Arc<ClientInfo>,
}

/// A connection's pub/sub state: its queue and its subscriptions.
pub struct ClientSubs {
    /// Messages to deliver.
    pub rx: mpsc::UnboundedReceiver<Message>,
    /// Bytes queued and not yet written (for the output limit).
    pub queued: Arc<AtomicUsize>,
    handle: Subscriber,
    /// Subscribed channels, in subscription order.
    pub channels: Vec<Vec<u8>>,
    /// Subscribed patterns.
    pub patterns: Vec<Vec<u8>>,
    /// Subscribed shard channels.
    pub shard: Vec<Vec<u8>>,
}

impl ClientSubs {
    /// A fresh, empty subscription state for a client.
    pub fn new(info: Arc<ClientInfo>) -> ClientSubs {
        let (tx, rx) = mpsc::unbounded_channel();
        // The client's own counter, so that its memory (CLIENT LIST, maxmemory-clients) sees
        // what publishers queue while its connection is busy.
        let queued = info.pubsub_queued.clone();
        queued.store(0, Ordering::Relaxed);
        ClientSubs {
            rx,
            queued: queued.clone(),
            handle: Subscriber { tx, queued, info },
            channels: Vec::new(),
            patterns: Vec::new(),
            shard: Vec::new(),
        }
    }

    /// Channels plus patterns: the count SUBSCRIBE/PSUBSCRIBE replies carry.
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// The list of subscriptions of one kind.
    pub fn list(&mut self, kind: Kind) -> &mut Vec<Vec<u8>> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::Shard => &mut self.shard,
        }
    }

    /// Whether the client is subscribed to anything.
    pub fn any(&self) -> bool {
        !self.channels.is_empty() || !self.patterns.is_empty() || !self.shard.is_empty()
    }
}

type Table = RwLock<HashMap<Box<[u8]>, HashMap<u64, Subscriber>>>;

/// Every subscription of every client.
#[derive(Default)]
pub struct PubSub {
    channels: Table,
    patterns: Table,
    shard: Table,
    /// Number of patterns with subscribers: PUBLISH skips pattern matching when zero.
    npatterns: AtomicUsize,
    /// The pubsub class's output limit, kept current by the server.
    pub limit: crate::obuf_limit::SharedLimit,
    /// Subscribers closed for passing it (part of INFO's
    /// `client_output_buffer_limit_disconnections`).
    pub limit_disconnections: std::sync::atomic::AtomicU64,
}

impl PubSub {
    fn table(&self, kind: Kind) -> &Table {
        match kind {
            Kind::Channel => &self.channels,
            Kind::Pattern => &self.patterns,
            Kind::Shard => &self.shard,
        }
    }

    /// Subscribes `subs`'s client; returns false when it was already subscribed.
    pub fn subscribe(&self, kind: Kind, name: &[u8], subs: &mut ClientSubs) -> bool {
        if subs.list(kind).iter().any(|c| c == name) {
            return false;
        }
        let mut t = self.table(kind).write();
        let entry = t.entry(name.into()).or_default();
        if entry.is_empty() && kind == Kind::Pattern {
            self.npatterns.fetch_add(1, Ordering::Relaxed);
        }
        entry.insert(subs.handle.info.id, subs.handle.clone());
        drop(t);
        subs.list(kind).push(name.to_vec());
        true
    }

    /// Unsubscribes; returns false when the client was not subscribed.
    pub fn unsubscribe(&self, kind: Kind, name: &[u8], subs: &mut ClientSubs) -> bool {
        let list = subs.list(kind);
        let Some(i) = list.iter().position(|c| c == name) else { return false };
        list.remove(i);
        let mut t = self.table(kind).write();
        if let Some(entry) = t.get_mut(name) {
            entry.remove(&subs.handle.info.id);
            if entry.is_empty() {
                t.remove(name);
                if kind == Kind::Pattern {
                    self.npatterns.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        true
    }

    /// Drops every subscription of a client (disconnect, RESET).
    pub fn unsubscribe_all(&self, subs: &mut ClientSubs) {
        for kind in [Kind::Channel, Kind::Pattern, Kind::Shard] {
            let names = subs.list(kind).clone();
            for name in names {
                self.unsubscribe(kind, &name, subs);
            }
        }
    }

    /// PUBLISH: delivers to channel subscribers and matching patterns; returns the number of
    /// receivers.
    pub fn publish(&self, channel: &[u8], payload: &[u8]) -> usize {
        let mut receivers = 0;
        let channel_arc: Arc<[u8]> = channel.into();
        let payload_arc: Arc<[u8]> = payload.into();
        {
            let t = self.channels.read();
            if let Some(subs) = t.get(channel) {
                let msg = Message {
                    kind: Kind::Channel,
                    pattern: None,
                    channel: channel_arc.clone(),
                    payload: payload_arc.clone(),
                    ended: false,
                };
                for s in subs.values() {
                    receivers += self.deliver(s, msg.clone());
                }
            }
        }
        if self.npatterns.load(Ordering::Relaxed) > 0 {
            let t = self.patterns.read();
            for (pattern, subs) in t.iter() {
                if !hotkv_engine::glob::matches(pattern, channel, false) {
                    continue;
                }
                let msg = Message {
                    kind: Kind::Pattern,
                    pattern: Some(Arc::from(&pattern[..])),
                    channel: channel_arc.clone(),
                    payload: payload_arc.clone(),
                    ended: false,
                };
                for s in subs.values() {
                    receivers += self.deliver(s, msg.clone());
                }
            }
        }
        receivers
    }

    /// SPUBLISH: delivers to shard channel subscribers.
    pub fn spublish(&self, channel: &[u8], payload: &[u8]) -> usize {
        let t = self.shard.read();
        let Some(subs) = t.get(channel) else { return 0 };
        let msg = Message {
            kind: Kind::Shard,
            pattern: None,
            channel: channel.into(),
            payload: payload.into(),
            ended: false,
        };
        subs.values().map(|s| self.deliver(s, msg.clone())).sum()
    }

    /// Ends every subscription to the shard channels `keep` rejects (cluster mode: their slot
    /// is no longer served here), as Valkey's `removeChannelsInSlot`: each subscriber's
    /// connection drops the channel and tells its client `sunsubscribe`.
    pub fn end_shard_channels(&self, keep: impl Fn(&[u8]) -> bool) {
        let mut t = self.shard.write();
        let gone: Vec<Box<[u8]>> = t.keys().filter(|c| !keep(c)).cloned().collect();
        for channel in gone {
            let Some(subs) = t.remove(&channel) else { continue };
            let msg = Message {
                kind: Kind::Shard,
                pattern: None,
                channel: Arc::from(&channel[..]),
                payload: Arc::from(&b""[..]),
                ended: true,
            };
            for s in subs.values() {
                // Not counted against the output limit: ending a subscription must not kill.
                let _ = s.tx.send(msg.clone());
            }
        }
    }

    fn deliver(&self, s: &Subscriber, msg: Message) -> usize {
        let size = msg.size();
        s.queued.fetch_add(size, Ordering::Relaxed);
        // Valkey checks the limits as it adds each message to the subscriber's output.
        let limit = self.limit.load();
        if !limit.is_none() && crate::obuf_limit::reached(&s.info, s.info.pending_output(), limit) {
            if !s.info.is_killed() {
                tracing::warn!(
                    "Client id={} addr={} scheduled to be closed ASAP for overcoming of output buffer limits.",
                    s.info.id,
                    s.info.addr
                );
                self.limit_disconnections.fetch_add(1, Ordering::Relaxed);
                s.info.kill();
            }
            return 0;
        }
        // A closed receiver means the client is going away; it still counted as subscribed.
        let _ = s.tx.send(msg);
        1
    }

    /// Active channels (with at least one subscriber) matching `pattern`.
    pub fn channels(&self, kind: Kind, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let t = self.table(kind).read();
        t.keys()
            .filter(|c| pattern.is_none_or(|p| hotkv_engine::glob::matches(p, c, false)))
            .map(|c| c.to_vec())
            .collect()
    }

    /// Subscribers of a channel.
    pub fn numsub(&self, kind: Kind, channel: &[u8]) -> usize {
        self.table(kind).read().get(channel).map_or(0, HashMap::len)
    }

    /// Patterns with subscribers (PUBSUB NUMPAT).
    pub fn numpat(&self) -> usize {
        self.npatterns.load(Ordering::Relaxed)
    }

    /// What client `id` is subscribed to, read from the shared tables (the client's own list
    /// belongs to its connection): for ACL changes that revoke channels. Walks every table.
    pub fn subscriptions_of(&self, id: u64) -> Subscriptions {
        let of = |kind| -> Vec<Vec<u8>> {
            let t = self.table(kind).read();
            t.iter().filter(|(_, subs)| subs.contains_key(&id)).map(|(name, _)| name.to_vec()).collect()
        };
        Subscriptions { channels: of(Kind::Channel), patterns: of(Kind::Pattern), shard: of(Kind::Shard) }
    }
}

/// One client's subscriptions, by kind.
#[derive(Debug, Default)]
pub struct Subscriptions {
    /// SUBSCRIBE channels.
    pub channels: Vec<Vec<u8>>,
    /// PSUBSCRIBE patterns.
    pub patterns: Vec<Vec<u8>>,
    /// SSUBSCRIBE channels.
    pub shard: Vec<Vec<u8>>,
}
