//! A node as the cluster knows it: identity, addresses, role, epochs, liveness and the slots
//! it claims, and its `CLUSTER NODES` line.

use std::fmt::{self, Write as _};

use crate::slots::SlotSet;

/// A node id: 40 lowercase hex characters, random at a node's first start and kept in
/// `nodes.conf` from then on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId([u8; NodeId::LEN]);

impl NodeId {
    /// Characters in an id.
    pub const LEN: usize = 40;

    /// A fresh random id, from the kernel's random source.
    pub fn random() -> NodeId {
        let mut raw = [0u8; NodeId::LEN / 2];
        let read = std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut raw));
        if read.is_err() {
            // Never on Linux; still unique enough for one machine: time and address mixed.
            let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            let mut x = seed.as_nanos() as u64 ^ (&raw as *const _ as u64);
            for b in &mut raw {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
        }
        let mut id = [0u8; NodeId::LEN];
        for (i, b) in raw.iter().enumerate() {
            id[2 * i] = HEX[usize::from(b >> 4)];
            id[2 * i + 1] = HEX[usize::from(b & 0xf)];
        }
        NodeId(id)
    }

    /// Parses an id as commands and files give it: exactly 40 hex digits. Upper case is
    /// accepted and folded, as Valkey compares ids case-insensitively nowhere, but humans
    /// paste them.
    pub fn parse(text: &[u8]) -> Option<NodeId> {
        let raw: [u8; NodeId::LEN] = text.try_into().ok()?;
        if !raw.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        Some(NodeId(raw.map(|c| c.to_ascii_lowercase())))
    }

    /// Parses an id as the bus carries it: 40 lowercase hex digits and nothing else, so every
    /// frame has one encoding.
    pub fn parse_wire(raw: &[u8]) -> Option<NodeId> {
        let raw: [u8; NodeId::LEN] = raw.try_into().ok()?;
        raw.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c)).then_some(NodeId(raw))
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        // The bytes are ASCII hex digits by construction.
        std::str::from_utf8(&self.0).unwrap_or("")
    }

    /// The id's bytes (the wire form).
    pub fn as_bytes(&self) -> &[u8; NodeId::LEN] {
        &self.0
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A node's flags, as bits; their wire form is this `u16`.
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
pub struct NodeFlags(pub u16);

impl NodeFlags {
    /// This node.
    pub const MYSELF: u16 = 1 << 0;
    /// A primary.
    pub const PRIMARY: u16 = 1 << 1;
    /// A replica.
    pub const REPLICA: u16 = 1 << 2;
    /// This node suspects it failed (`fail?`).
    pub const PFAIL: u16 = 1 << 3;
    /// A majority of primaries agreed it failed.
    pub const FAIL: u16 = 1 << 4;
    /// Met, but its id is not confirmed yet.
    pub const HANDSHAKE: u16 = 1 << 5;
    /// Its address is not known.
    pub const NOADDR: u16 = 1 << 6;
    /// A MEET is to be sent on the next link.
    pub const MEET: u16 = 1 << 7;
    /// A primary that had replicas (or took over from one that had): a replica may migrate
    /// to it once it has none left (Valkey's `CLUSTER_NODE_MIGRATE_TO`). Never shown.
    pub const MIGRATE_TO: u16 = 1 << 8;
    /// A replica that never starts a failover.
    pub const NOFAILOVER: u16 = 1 << 9;

    /// Whether every bit of `bits` is set.
    pub fn has(self, bits: u16) -> bool {
        self.0 & bits == bits
    }

    /// Sets or clears `bits`.
    pub fn set(&mut self, bits: u16, on: bool) {
        if on {
            self.0 |= bits;
        } else {
            self.0 &= !bits;
        }
    }

    /// The flags field of `CLUSTER NODES`, in Valkey's order (`representClusterNodeFlags`);
    /// `slave`, not `replica`, since redis-cli 7.0 matches that word exactly.
    pub fn text(self) -> String {
        const NAMES: [(u16, &str); 8] = [
            (NodeFlags::MYSELF, "myself"),
            (NodeFlags::PRIMARY, "master"),
            (NodeFlags::REPLICA, "slave"),
            (NodeFlags::PFAIL, "fail?"),
            (NodeFlags::FAIL, "fail"),
            (NodeFlags::HANDSHAKE, "handshake"),
            (NodeFlags::NOADDR, "noaddr"),
            (NodeFlags::NOFAILOVER, "nofailover"),
        ];
        let names: Vec<&str> = NAMES.iter().filter(|(bit, _)| self.has(*bit)).map(|(_, n)| *n).collect();
        if names.is_empty() { "noflags".to_owned() } else { names.join(",") }
    }

    /// Parses the flags field of a `nodes.conf` line; `None` for an unknown word.
    pub fn parse(text: &str) -> Option<NodeFlags> {
        let mut flags = NodeFlags::default();
        for word in text.split(',') {
            flags.0 |= match word {
                "myself" => NodeFlags::MYSELF,
                "master" => NodeFlags::PRIMARY,
                "slave" | "replica" => NodeFlags::REPLICA,
                "fail?" => NodeFlags::PFAIL,
                "fail" => NodeFlags::FAIL,
                "handshake" => NodeFlags::HANDSHAKE,
                "noaddr" => NodeFlags::NOADDR,
                "nofailover" => NodeFlags::NOFAILOVER,
                "noflags" => 0,
                _ => return None,
            };
        }
        Some(flags)
    }
}

/// The client a node is described to: TLS clients are told TLS ports, and IPv4 and IPv6
/// clients the address announced for their family (`cluster-announce-client-ipv4`/`-ipv6`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientKind {
    /// It came in over TLS.
    pub tls: bool,
    /// It came in over IPv6.
    pub ipv6: bool,
}

/// What one node knows about a node (itself included).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Its id.
    pub id: NodeId,
    /// The shard it belongs to (Valkey's `shard_id`): random for a new node, taken from its
    /// primary by a replica, kept by a replica promoted in its shard, and saved in nodes.conf,
    /// so CLUSTER MYSHARDID names a shard the same way across failovers and restarts.
    pub shard_id: NodeId,
    /// The address other nodes and clients reach it at (may be empty before anyone told it).
    pub ip: String,
    /// Its plain client port (0: none).
    pub port: u16,
    /// Its TLS client port (0: none).
    pub tls_port: u16,
    /// Its cluster bus port.
    pub bus_port: u16,
    /// `cluster-announce-hostname` (empty: none).
    pub hostname: String,
    /// `cluster-announce-human-nodename` (empty: none).
    pub human_nodename: String,
    /// `cluster-announce-client-ipv4`: the address IPv4 clients are told (empty: `ip`).
    pub client_ipv4: String,
    /// `cluster-announce-client-ipv6`: the address IPv6 clients are told (empty: `ip`).
    pub client_ipv6: String,
    /// Role and state.
    pub flags: NodeFlags,
    /// The primary of a replica.
    pub primary: Option<NodeId>,
    /// When the last PING to it was sent and is still unanswered (unix ms, 0: none).
    pub ping_sent_ms: i64,
    /// When its last PONG arrived (unix ms).
    pub pong_received_ms: i64,
    /// The epoch its slot claims carry.
    pub config_epoch: u64,
    /// Whether this node has a working bus link to it.
    pub link_connected: bool,
    /// The slots it serves (for a primary).
    pub slots: SlotSet,
    /// The replication offset its last frame carried (a replica's processed offset of its
    /// primary's stream): replicas of a failed primary rank themselves by it.
    pub repl_offset: u64,
    /// A replica that said (in its last frame) it is loading its primary's full sync: CLUSTER
    /// SLOTS leaves it out and CLUSTER SHARDS calls it `loading`.
    pub loading: bool,
}

impl Node {
    /// A node known only by id, with no address yet.
    pub fn new(id: NodeId, flags: u16) -> Node {
        Node {
            id,
            shard_id: NodeId::random(),
            ip: String::new(),
            port: 0,
            tls_port: 0,
            bus_port: 0,
            hostname: String::new(),
            human_nodename: String::new(),
            client_ipv4: String::new(),
            client_ipv6: String::new(),
            flags: NodeFlags(flags),
            primary: None,
            ping_sent_ms: 0,
            pong_received_ms: 0,
            config_epoch: 0,
            link_connected: false,
            slots: SlotSet::new(),
            repl_offset: 0,
            loading: false,
        }
    }

    /// Whether it is a primary.
    pub fn is_primary(&self) -> bool {
        self.flags.has(NodeFlags::PRIMARY)
    }

    /// The client port a client of the given kind is told: TLS clients the TLS port, plain
    /// clients the plain one (a node with only one kind tells that one).
    pub fn client_port(&self, tls_client: bool) -> u16 {
        match (tls_client, self.port, self.tls_port) {
            (true, _, t) if t != 0 => t,
            (false, p, _) if p != 0 => p,
            (_, p, t) => p.max(t),
        }
    }

    /// The address a client of the given family is told, as Valkey's `clusterNodeIp`: the
    /// node's `cluster-announce-client-ipv6` (IPv6 clients) or `-ipv4` (IPv4 clients) when
    /// it announced one, else its address.
    pub fn client_ip(&self, ipv6_client: bool) -> &str {
        let announced = if ipv6_client { &self.client_ipv6 } else { &self.client_ipv4 };
        if announced.is_empty() { &self.ip } else { announced }
    }

    /// Appends its `CLUSTER NODES` line (no trailing newline): id, `ip:port@cport[,hostname]`
    /// (the address and port `client` is told), flags, primary, ping sent, pong received,
    /// config epoch, link state, slots. `extra` is appended after the slots (this node's
    /// migrating and importing slots).
    pub fn describe(&self, out: &mut String, client: ClientKind, extra: &str) {
        let (ip, port) = (self.client_ip(client.ipv6), self.client_port(client.tls));
        let _ = write!(out, "{} {ip}:{port}@{}", self.id, self.bus_port);
        if !self.hostname.is_empty() {
            let _ = write!(out, ",{}", self.hostname);
        }
        let primary = self.primary.map_or_else(|| "-".to_owned(), |p| p.to_string());
        let link = if self.link_connected || self.flags.has(NodeFlags::MYSELF) { "connected" } else { "disconnected" };
        let _ = write!(
            out,
            " {} {} {} {} {} {}",
            self.flags.text(),
            primary,
            self.ping_sent_ms,
            self.pong_received_ms,
            self.config_epoch,
            link
        );
        if !self.slots.is_empty() {
            let _ = write!(out, " {}", self.slots);
        }
        out.push_str(extra);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_40_lowercase_hex_and_random() {
        let a = NodeId::random();
        let b = NodeId::random();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 40);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        assert_eq!(NodeId::parse(a.as_str().as_bytes()), Some(a));
        assert_eq!(NodeId::parse(a.as_str().to_uppercase().as_bytes()), Some(a));
        assert_eq!(NodeId::parse(b"abc"), None);
        assert_eq!(NodeId::parse(&[b'g'; 40]), None);
    }

    #[test]
    fn flags_print_in_valkey_order() {
        let f = NodeFlags(NodeFlags::REPLICA | NodeFlags::MYSELF | NodeFlags::PFAIL);
        assert_eq!(f.text(), "myself,slave,fail?");
        assert_eq!(NodeFlags::default().text(), "noflags");
        assert_eq!(NodeFlags::parse("myself,slave,fail?"), Some(f));
        assert_eq!(NodeFlags::parse("myself,bogus"), None);
    }

    #[test]
    fn lines_match_the_doc() {
        let id = NodeId::parse(b"88c1a627187760c03ab057b49f2eb0c6b19121d8").unwrap();
        let mut n = Node::new(id, NodeFlags::MYSELF | NodeFlags::PRIMARY);
        n.ip = "10.0.0.1".into();
        n.port = 7060;
        n.tls_port = 7160;
        n.bus_port = 17160;
        let line = |n: &Node, tls| {
            let mut s = String::new();
            n.describe(&mut s, ClientKind { tls, ipv6: false }, "");
            s
        };
        assert_eq!(
            line(&n, false),
            "88c1a627187760c03ab057b49f2eb0c6b19121d8 10.0.0.1:7060@17160 myself,master - 0 0 0 connected"
        );
        assert_eq!(
            line(&n, true),
            "88c1a627187760c03ab057b49f2eb0c6b19121d8 10.0.0.1:7160@17160 myself,master - 0 0 0 connected"
        );
        n.slots.insert(0);
        n.slots.insert(1);
        n.hostname = "node1".into();
        assert!(line(&n, true).ends_with("@17160,node1 myself,master - 0 0 0 connected 0-1"));
    }

    #[test]
    fn each_family_is_told_its_announced_address() {
        let mut n = Node::new(NodeId::random(), NodeFlags::PRIMARY);
        n.ip = "10.0.0.1".into();
        n.port = 7000;
        let addr = |n: &Node, ipv6| {
            let mut s = String::new();
            n.describe(&mut s, ClientKind { tls: false, ipv6 }, "");
            s.split(' ').nth(1).unwrap().to_owned()
        };
        assert_eq!((addr(&n, false), addr(&n, true)), ("10.0.0.1:7000@0".into(), "10.0.0.1:7000@0".into()));
        n.client_ipv4 = "192.0.2.1".into();
        assert_eq!((addr(&n, false), addr(&n, true)), ("192.0.2.1:7000@0".into(), "10.0.0.1:7000@0".into()));
        n.client_ipv6 = "2001:db8::1".into();
        assert_eq!((n.client_ip(false), n.client_ip(true)), ("192.0.2.1", "2001:db8::1"));
        assert_eq!(addr(&n, true), "2001:db8::1:7000@0", "Valkey writes IPv6 without brackets");
    }
}
