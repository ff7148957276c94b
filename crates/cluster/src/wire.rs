//! The cluster bus's frames. Every frame starts with its total length as a 4-byte big-endian
//! number (so a plain node that reads a TLS record sees `0x15030300` = 352518912 and says the
//! message is too large), then a version, the message type, the sender's header (id, epochs,
//! flags, role, addresses, the slots it claims, the certificate it serves) and a body per
//! type. Decoding checks every declared length against what the frame holds and the frame's
//! length against [`MAX_FRAME`] before anything is allocated; nothing a peer sends can panic.

use std::fmt;

use crate::node::NodeId;
use crate::slots::SlotSet;

/// Protocol version in every frame; a frame of another version drops the link. Version 2 added
/// the message flags ([`Header::msg_flags`]) to the header, for manual failover.
pub const VERSION: u16 = 2;

/// The largest frame accepted: room for a PUBLISH of a large message, far below what would
/// hurt a node, and below the 352518912 that a TLS alert record reads as.
pub const MAX_FRAME: u32 = 256 << 20;

/// Bytes before the header: length, version, type.
const PREFIX: usize = 4 + 2 + 2;

/// Message types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Kind {
    /// Liveness and gossip.
    Ping = 0,
    /// The answer to a PING or MEET.
    Pong = 1,
    /// A PING that asks the receiver to add the sender to its table.
    Meet = 2,
    /// A node was agreed to have failed.
    Fail = 3,
    /// Cluster-wide PUBLISH.
    Publish = 4,
    /// A replica asks primaries to vote for its failover.
    FailoverAuthRequest = 5,
    /// A primary's vote.
    FailoverAuthAck = 6,
    /// A node's slots changed: tells a node with a stale view.
    Update = 7,
    /// A primary tells its replica that a manual failover starts.
    MfStart = 8,
    /// Shard-scoped PUBLISH (SPUBLISH).
    PublishShard = 9,
}

impl Kind {
    fn from_u16(v: u16) -> Option<Kind> {
        Some(match v {
            0 => Kind::Ping,
            1 => Kind::Pong,
            2 => Kind::Meet,
            3 => Kind::Fail,
            4 => Kind::Publish,
            5 => Kind::FailoverAuthRequest,
            6 => Kind::FailoverAuthAck,
            7 => Kind::Update,
            8 => Kind::MfStart,
            9 => Kind::PublishShard,
            _ => return None,
        })
    }
}

/// The certificate a node serves and its CA's, gossiped so that one node can show every
/// node's (`CLUSTER CERTS`). The server fills it from its TLS state; this crate only carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CertSummary {
    /// Serial number, hex.
    pub serial: String,
    /// SHA-256 of the certificate's DER.
    pub fingerprint: [u8; 32],
    /// Expiry, unix seconds (0: no certificate).
    pub not_after: i64,
    /// The issuing CA certificate's serial number, hex (empty: the CA is not known).
    pub ca_serial: String,
    /// SHA-256 of the issuing CA certificate's DER.
    pub ca_fingerprint: [u8; 32],
    /// The CA's expiry, unix seconds (0: the CA is not known).
    pub ca_not_after: i64,
}

impl CertSummary {
    /// Whether the node said which certificate it serves (a node without TLS, or one not heard
    /// from yet, did not).
    pub fn is_known(&self) -> bool {
        self.not_after != 0
    }

    /// Whether the certificate or its CA expires before `now + within` (unix seconds); an
    /// expired one does too.
    pub fn expires_within(&self, now: i64, within: i64) -> bool {
        let soon = |t: i64| t != 0 && t < now.saturating_add(within);
        soon(self.not_after) || soon(self.ca_not_after)
    }
}

/// What every frame says about its sender.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// The sender.
    pub sender: NodeId,
    /// The sender's current epoch.
    pub current_epoch: u64,
    /// The config epoch of the sender (of its primary, for a replica).
    pub config_epoch: u64,
    /// Replication offset (failover ranking).
    pub repl_offset: u64,
    /// The sender's flags (`NodeFlags` bits).
    pub flags: u16,
    /// Whether the sender sees the cluster as ok.
    pub state_ok: bool,
    /// Flags about this message rather than the sender's role (Valkey's `mflags[0]`):
    /// [`Header::PAUSED`].
    pub msg_flags: u8,
    /// The sender's primary, for a replica.
    pub primary: Option<NodeId>,
    /// The address the sender announces (empty: use the link's peer address).
    pub ip: String,
    /// Plain client port.
    pub port: u16,
    /// TLS client port.
    pub tls_port: u16,
    /// Bus port.
    pub bus_port: u16,
    /// `cluster-announce-hostname`.
    pub hostname: String,
    /// `cluster-announce-human-nodename`.
    pub human_nodename: String,
    /// The slots the sender (or its primary) serves.
    pub slots: SlotSet,
    /// The certificate the sender serves.
    pub cert: CertSummary,
}

impl Header {
    /// `msg_flags`: the sender is a primary whose clients' writes are paused for a manual
    /// failover, so the offset in this header is final (Valkey's `CLUSTERMSG_FLAG0_PAUSED`).
    pub const PAUSED: u8 = 1 << 0;
    /// `msg_flags`: the sender is a replica loading its primary's full sync (its offset is 0
    /// meanwhile, as Valkey announces, but a replica of a primary that never wrote is at 0
    /// too; this tells the two apart).
    pub const LOADING: u8 = 1 << 1;
}

/// One node as a gossip section describes it, borrowed from the section that holds it (a
/// PING or PONG carries a few of these per known node; none of them allocates).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gossip<'a> {
    /// The node.
    pub id: NodeId,
    /// When the sender last pinged it (unix ms, 0: no ping outstanding).
    pub ping_sent_ms: i64,
    /// When the sender last heard from it (unix ms).
    pub pong_received_ms: i64,
    /// Its address.
    pub ip: &'a str,
    /// Plain client port.
    pub port: u16,
    /// TLS client port.
    pub tls_port: u16,
    /// Bus port.
    pub bus_port: u16,
    /// Its flags as the sender sees them (PFAIL/FAIL are failure reports).
    pub flags: u16,
}

/// The gossip section of a PING, PONG or MEET, kept in its wire form: entries are written
/// into one buffer as they are pushed, and read back as borrowed [`Gossip`]s, so a section
/// costs one allocation however many nodes it describes (an owned entry per node cost two).
/// A decoded section was checked entry by entry before it was kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GossipSection {
    count: u16,
    raw: Vec<u8>,
}

impl GossipSection {
    /// An empty section with room for `n` entries with short addresses.
    pub fn with_capacity(n: usize) -> GossipSection {
        GossipSection { count: 0, raw: Vec::with_capacity(n * (GOSSIP_MIN + 16)) }
    }

    /// Appends an entry; a section holds at most `u16::MAX` (a node gossips about a few per
    /// message), and entries past that are left out.
    pub fn push(&mut self, g: &Gossip<'_>) {
        if self.count == u16::MAX {
            return;
        }
        self.count += 1;
        write_gossip(g, &mut self.raw);
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Its entries, in order.
    pub fn iter(&self) -> impl Iterator<Item = Gossip<'_>> + '_ {
        let mut r = Reader { buf: &self.raw };
        // Checked when pushed or decoded: a read cannot fail, and would end the walk if it did.
        (0..self.count).map_while(move |_| read_gossip(&mut r).ok())
    }
}

/// A ping extension (Valkey's `clusterMsgPingExt`): optional data after a PING, PONG or MEET's
/// gossip section, borrowed from the [`Extensions`] that hold it. A type this node does not
/// know is kept as bytes and otherwise ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ext<'a> {
    /// A node the sender forgot (CLUSTER FORGET), and for how many more seconds it keeps it
    /// out of its table: the receiver forgets it too, for as long (Valkey's
    /// `CLUSTERMSG_EXT_TYPE_FORGOTTEN_NODE`).
    ForgottenNode {
        /// The forgotten node.
        id: NodeId,
        /// Seconds left.
        ttl_secs: u64,
    },
    /// `cluster-announce-client-ipv4` of the sender (Valkey's `CLUSTERMSG_EXT_TYPE_CLIENT_IPV4`).
    ClientIpv4(&'a str),
    /// `cluster-announce-client-ipv6` of the sender (Valkey's `CLUSTERMSG_EXT_TYPE_CLIENT_IPV6`).
    ClientIpv6(&'a str),
    /// The sender's shard (Valkey's `CLUSTERMSG_EXT_TYPE_SHARDID`).
    ShardId(NodeId),
    /// A type this node does not know: its number and bytes.
    Unknown {
        /// The type.
        ty: u16,
        /// Its data.
        data: &'a [u8],
    },
}

impl Ext<'_> {
    const FORGOTTEN_NODE: u16 = 1;
    const CLIENT_IPV4: u16 = 2;
    const CLIENT_IPV6: u16 = 3;
    const SHARD_ID: u16 = 4;
}

/// The ping extensions of a PING, PONG or MEET, in wire form like [`GossipSection`]. A frame
/// without any ends with its gossip section, as frames did before extensions existed, so a
/// node that does not know extensions still reads every frame that has none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extensions {
    count: u16,
    raw: Vec<u8>,
}

impl Extensions {
    /// Appends an extension; at most `u16::MAX` are kept (a node sends a few: one per node it
    /// forgot in the last minute).
    pub fn push(&mut self, e: &Ext<'_>) {
        if self.count == u16::MAX {
            return;
        }
        self.count += 1;
        write_ext(e, &mut self.raw);
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The extensions, in the order they were written.
    pub fn iter(&self) -> impl Iterator<Item = Ext<'_>> + '_ {
        let mut r = Reader { buf: &self.raw };
        // Checked when decoded: a read cannot fail, and would end the walk if it did.
        (0..self.count).map_while(move |_| read_ext(&mut r).ok())
    }
}

/// A message's body.
#[derive(Clone, Debug, PartialEq)]
pub enum Body {
    /// PING, PONG, MEET: a few nodes the sender knows, and its ping extensions.
    Gossip {
        /// The nodes.
        entries: GossipSection,
        /// The extensions.
        ext: Extensions,
    },
    /// FAIL: the failed node.
    Fail(NodeId),
    /// UPDATE: a node's current slots and epoch.
    Update {
        /// The node.
        id: NodeId,
        /// Its config epoch.
        config_epoch: u64,
        /// Its slots (boxed: 2 KiB would size every other body too).
        slots: Box<SlotSet>,
    },
    /// PUBLISH, PUBLISHSHARD.
    Publish {
        /// Channel.
        channel: Vec<u8>,
        /// Message.
        message: Vec<u8>,
    },
    /// FAILOVER_AUTH_REQUEST: whether the replica forces it (manual failover).
    AuthRequest {
        /// Manual failover: primaries vote even if its primary is not failed.
        force: bool,
    },
    /// FAILOVER_AUTH_ACK, MFSTART: nothing beyond the header.
    Empty,
}

/// A decoded frame.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// Its type.
    pub kind: Kind,
    /// The sender.
    pub header: Header,
    /// The type's data.
    pub body: Body,
}

/// Why a frame was refused; every one drops the link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The declared length exceeds [`MAX_FRAME`].
    TooLarge(u32),
    /// The declared length cannot hold a header.
    TooShort(u32),
    /// Another protocol version.
    Version(u16),
    /// An unknown message type.
    UnknownType(u16),
    /// A field runs past the frame, or bytes are left after the body, or a value is invalid.
    Malformed(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::TooLarge(n) => write!(f, "message too large: {n} bytes"),
            WireError::TooShort(n) => write!(f, "message too short: {n} bytes"),
            WireError::Version(v) => write!(f, "unsupported protocol version {v}"),
            WireError::UnknownType(t) => write!(f, "unknown message type {t}"),
            WireError::Malformed(what) => write!(f, "malformed message: {what}"),
        }
    }
}

impl std::error::Error for WireError {}

/// The length of the frame at the start of `buf`, once its 4 bytes are there; an error when
/// it is out of bounds (checked before the caller buffers the rest).
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, WireError> {
    let Some(head) = buf.get(..4) else { return Ok(None) };
    let n = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    if n > MAX_FRAME {
        return Err(WireError::TooLarge(n));
    }
    if (n as usize) < PREFIX {
        return Err(WireError::TooShort(n));
    }
    Ok(Some(n as usize))
}

/// Decodes the frame at the start of `buf`: `Ok(None)` until all of it has arrived, then the
/// message and the bytes it took.
pub fn decode(buf: &[u8]) -> Result<Option<(Message, usize)>, WireError> {
    let Some(len) = frame_len(buf)? else { return Ok(None) };
    let Some(frame) = buf.get(..len) else { return Ok(None) };
    let mut r = Reader { buf: &frame[4..] };
    let version = r.u16()?;
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let ty = r.u16()?;
    let kind = Kind::from_u16(ty).ok_or(WireError::UnknownType(ty))?;
    let header = read_header(&mut r)?;
    let body = match kind {
        Kind::Ping | Kind::Pong | Kind::Meet => {
            let entries = read_gossip_section(&mut r)?;
            Body::Gossip { entries, ext: read_extensions(&mut r)? }
        }
        Kind::Fail => Body::Fail(r.id()?),
        Kind::Update => Body::Update { id: r.id()?, config_epoch: r.u64()?, slots: Box::new(r.slots()?) },
        Kind::Publish | Kind::PublishShard => {
            Body::Publish { channel: r.blob32()?.to_vec(), message: r.blob32()?.to_vec() }
        }
        Kind::FailoverAuthRequest => Body::AuthRequest { force: r.bool()? },
        Kind::FailoverAuthAck | Kind::MfStart => Body::Empty,
    };
    if !r.buf.is_empty() {
        return Err(WireError::Malformed("bytes after the body"));
    }
    Ok(Some((Message { kind, header, body }, len)))
}

/// Appends the frame of `msg` to `out`.
pub fn encode(msg: &Message, out: &mut Vec<u8>) {
    let start = begin_frame(msg.kind, &msg.header, out);
    match &msg.body {
        Body::Gossip { entries, ext } => {
            out.extend_from_slice(&entries.count.to_be_bytes());
            out.extend_from_slice(&entries.raw);
            if !ext.is_empty() {
                out.extend_from_slice(&ext.count.to_be_bytes());
                out.extend_from_slice(&ext.raw);
            }
        }
        Body::Fail(id) => out.extend_from_slice(id.as_bytes()),
        Body::Update { id, config_epoch, slots } => {
            out.extend_from_slice(id.as_bytes());
            out.extend_from_slice(&config_epoch.to_be_bytes());
            out.extend_from_slice(slots.as_bytes());
        }
        Body::Publish { channel, message } => {
            put_blob32(out, channel);
            put_blob32(out, message);
        }
        Body::AuthRequest { force } => out.push(u8::from(*force)),
        Body::Empty => {}
    }
    end_frame(start, out);
}

/// Appends a PUBLISH or PUBLISHSHARD frame (`kind`) made straight from the publisher's channel
/// and message: the same bytes as [`encode`] of a [`Body::Publish`], without first copying the
/// payload into a [`Message`].
pub fn encode_publish(kind: Kind, header: &Header, channel: &[u8], message: &[u8], out: &mut Vec<u8>) {
    debug_assert!(matches!(kind, Kind::Publish | Kind::PublishShard));
    let start = begin_frame(kind, header, out);
    put_blob32(out, channel);
    put_blob32(out, message);
    end_frame(start, out);
}

/// The length of the frame [`encode_publish`] makes, known before making it (to refuse a
/// message too large for the bus, and to allocate the frame once).
pub fn publish_frame_len(header: &Header, channel_len: usize, message_len: usize) -> usize {
    PREFIX + header_len(header) + 4 + channel_len + 4 + message_len
}

/// The length of the frame [`encode`] makes of `msg`, so that a sender sizes its buffer once
/// (a frame holds a 2 KiB slot bitmap: grown from empty, its buffer was reallocated ten times).
pub fn encoded_len(msg: &Message) -> usize {
    let body = match &msg.body {
        Body::Gossip { entries, ext } => 2 + entries.raw.len() + if ext.is_empty() { 0 } else { 2 + ext.raw.len() },
        Body::Fail(_) => NodeId::LEN,
        Body::Update { .. } => NodeId::LEN + 8 + SlotSet::BYTES,
        Body::Publish { channel, message } => 4 + channel.len() + 4 + message.len(),
        Body::AuthRequest { .. } => 1,
        Body::Empty => 0,
    };
    PREFIX + header_len(&msg.header) + body
}

/// The bytes [`write_header`] writes for `h`; kept beside it, and checked against it by the
/// PUBLISH test, since the two must change together.
fn header_len(h: &Header) -> usize {
    let text = |s: &str| 1 + s.len().min(255);
    NodeId::LEN
        + 3 * 8
        + 2
        + 1
        + 1
        + NodeId::LEN
        + text(&h.ip)
        + 3 * 2
        + text(&h.hostname)
        + text(&h.human_nodename)
        + SlotSet::BYTES
        + text(&h.cert.serial)
        + text(&h.cert.ca_serial)
        + 2 * (32 + 8)
}

/// Writes the prefix (length to be filled in by [`end_frame`]), version, type and header;
/// returns where the frame starts.
fn begin_frame(kind: Kind, header: &Header, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&VERSION.to_be_bytes());
    out.extend_from_slice(&(kind as u16).to_be_bytes());
    write_header(header, out);
    start
}

/// Fills in the length of the frame that starts at `start`.
fn end_frame(start: usize, out: &mut [u8]) {
    let len = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// Smallest gossip entry: id, two times, an empty ip, three ports, flags.
const GOSSIP_MIN: usize = NodeId::LEN + 8 + 8 + 1 + 2 + 2 + 2 + 2;

fn read_header(r: &mut Reader<'_>) -> Result<Header, WireError> {
    let sender = r.id()?;
    let current_epoch = r.u64()?;
    let config_epoch = r.u64()?;
    let repl_offset = r.u64()?;
    let flags = r.u16()?;
    let state_ok = r.bool()?;
    let msg_flags = r.u8()?;
    let primary = r.opt_id()?;
    let ip = r.text8()?;
    let (port, tls_port, bus_port) = (r.u16()?, r.u16()?, r.u16()?);
    let hostname = r.text8()?;
    let human_nodename = r.text8()?;
    let slots = r.slots()?;
    let cert = CertSummary {
        serial: r.text8()?,
        fingerprint: r.array32()?,
        not_after: r.u64()? as i64,
        ca_serial: r.text8()?,
        ca_fingerprint: r.array32()?,
        ca_not_after: r.u64()? as i64,
    };
    Ok(Header {
        sender,
        current_epoch,
        config_epoch,
        repl_offset,
        flags,
        state_ok,
        msg_flags,
        primary,
        ip,
        port,
        tls_port,
        bus_port,
        hostname,
        human_nodename,
        slots,
        cert,
    })
}

fn write_header(h: &Header, out: &mut Vec<u8>) {
    out.extend_from_slice(h.sender.as_bytes());
    out.extend_from_slice(&h.current_epoch.to_be_bytes());
    out.extend_from_slice(&h.config_epoch.to_be_bytes());
    out.extend_from_slice(&h.repl_offset.to_be_bytes());
    out.extend_from_slice(&h.flags.to_be_bytes());
    out.push(u8::from(h.state_ok));
    out.push(h.msg_flags);
    match &h.primary {
        Some(p) => out.extend_from_slice(p.as_bytes()),
        None => out.extend_from_slice(&[0; NodeId::LEN]),
    }
    put_text8(out, &h.ip);
    for p in [h.port, h.tls_port, h.bus_port] {
        out.extend_from_slice(&p.to_be_bytes());
    }
    put_text8(out, &h.hostname);
    put_text8(out, &h.human_nodename);
    out.extend_from_slice(h.slots.as_bytes());
    put_text8(out, &h.cert.serial);
    out.extend_from_slice(&h.cert.fingerprint);
    out.extend_from_slice(&h.cert.not_after.to_be_bytes());
    put_text8(out, &h.cert.ca_serial);
    out.extend_from_slice(&h.cert.ca_fingerprint);
    out.extend_from_slice(&h.cert.ca_not_after.to_be_bytes());
}

/// A gossip section: its count, checked against the frame before anything is allocated, then
/// every entry, checked once and kept in wire form.
fn read_gossip_section(r: &mut Reader<'_>) -> Result<GossipSection, WireError> {
    let count = r.u16()?;
    // Each entry is at least GOSSIP_MIN bytes: the count is checked against the frame.
    if usize::from(count) > r.buf.len() / GOSSIP_MIN {
        return Err(WireError::Malformed("gossip count exceeds the frame"));
    }
    Ok(GossipSection { count, raw: checked_items(r, count, read_gossip)? })
}

/// The bytes of `count` items, each checked by `read`, for a section that keeps them in wire
/// form.
fn checked_items<'a, T>(
    r: &mut Reader<'a>,
    count: u16,
    read: fn(&mut Reader<'a>) -> Result<T, WireError>,
) -> Result<Vec<u8>, WireError> {
    let start = r.buf;
    for _ in 0..count {
        read(r)?;
    }
    Ok(start[..start.len() - r.buf.len()].to_vec())
}

fn read_gossip<'a>(r: &mut Reader<'a>) -> Result<Gossip<'a>, WireError> {
    Ok(Gossip {
        id: r.id()?,
        ping_sent_ms: r.u64()? as i64,
        pong_received_ms: r.u64()? as i64,
        ip: r.str8()?,
        port: r.u16()?,
        tls_port: r.u16()?,
        bus_port: r.u16()?,
        flags: r.u16()?,
    })
}

fn write_gossip(g: &Gossip<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(g.id.as_bytes());
    out.extend_from_slice(&g.ping_sent_ms.to_be_bytes());
    out.extend_from_slice(&g.pong_received_ms.to_be_bytes());
    put_text8(out, g.ip);
    for v in [g.port, g.tls_port, g.bus_port, g.flags] {
        out.extend_from_slice(&v.to_be_bytes());
    }
}

/// The extensions after a gossip section: nothing at all when there are none (a version 1
/// frame), else a count (at least one, so that every message has one encoding), then per
/// extension its type, the length of its data and the data. Each is checked once and kept in
/// wire form, so the memory they take is what the frame holds.
fn read_extensions(r: &mut Reader<'_>) -> Result<Extensions, WireError> {
    if r.buf.is_empty() {
        return Ok(Extensions::default());
    }
    let count = r.u16()?;
    if count == 0 {
        return Err(WireError::Malformed("an empty extension section"));
    }
    Ok(Extensions { count, raw: checked_items(r, count, read_ext)? })
}

fn read_ext<'a>(r: &mut Reader<'a>) -> Result<Ext<'a>, WireError> {
    let ty = r.u16()?;
    let mut data = Reader { buf: r.blob32()? };
    let ext = match ty {
        Ext::FORGOTTEN_NODE => Ext::ForgottenNode { id: data.id()?, ttl_secs: data.u64()? },
        Ext::CLIENT_IPV4 => Ext::ClientIpv4(data.str8()?),
        Ext::CLIENT_IPV6 => Ext::ClientIpv6(data.str8()?),
        Ext::SHARD_ID => Ext::ShardId(data.id()?),
        _ => Ext::Unknown { ty, data: data.take(data.buf.len())? },
    };
    if !data.buf.is_empty() {
        return Err(WireError::Malformed("bytes after an extension's data"));
    }
    Ok(ext)
}

fn write_ext(e: &Ext<'_>, out: &mut Vec<u8>) {
    let ty = match e {
        Ext::ForgottenNode { .. } => Ext::FORGOTTEN_NODE,
        Ext::ClientIpv4(_) => Ext::CLIENT_IPV4,
        Ext::ClientIpv6(_) => Ext::CLIENT_IPV6,
        Ext::ShardId(_) => Ext::SHARD_ID,
        Ext::Unknown { ty, .. } => *ty,
    };
    out.extend_from_slice(&ty.to_be_bytes());
    let len_at = out.len();
    out.extend_from_slice(&[0; 4]);
    match e {
        Ext::ForgottenNode { id, ttl_secs } => {
            out.extend_from_slice(id.as_bytes());
            out.extend_from_slice(&ttl_secs.to_be_bytes());
        }
        Ext::ClientIpv4(ip) | Ext::ClientIpv6(ip) => put_text8(out, ip),
        Ext::ShardId(id) => out.extend_from_slice(id.as_bytes()),
        Ext::Unknown { data, .. } => out.extend_from_slice(data),
    }
    let len = (out.len() - len_at - 4) as u32;
    out[len_at..len_at + 4].copy_from_slice(&len.to_be_bytes());
}

/// A short text: one length byte, then at most 255 bytes (longer text is cut at a character
/// boundary: addresses and names are far shorter).
fn put_text8(out: &mut Vec<u8>, s: &str) {
    let mut n = s.len().min(255);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    out.push(n as u8);
    out.extend_from_slice(&s.as_bytes()[..n]);
}

fn put_blob32(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

/// A cursor over a frame whose every read is bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.buf.len() {
            return Err(WireError::Malformed("field runs past the frame"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(a))
    }

    /// A flag byte: 0 or 1, so that every message has one encoding.
    fn bool(&mut self) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::Malformed("a flag byte is neither 0 nor 1")),
        }
    }

    fn array32(&mut self) -> Result<[u8; 32], WireError> {
        let mut a = [0u8; 32];
        a.copy_from_slice(self.take(32)?);
        Ok(a)
    }

    fn id(&mut self) -> Result<NodeId, WireError> {
        NodeId::parse_wire(self.take(NodeId::LEN)?).ok_or(WireError::Malformed("node id is not 40 hex digits"))
    }

    fn opt_id(&mut self) -> Result<Option<NodeId>, WireError> {
        let raw = self.take(NodeId::LEN)?;
        if raw.iter().all(|&b| b == 0) {
            return Ok(None);
        }
        NodeId::parse_wire(raw).map(Some).ok_or(WireError::Malformed("primary id is not 40 hex digits"))
    }

    fn slots(&mut self) -> Result<SlotSet, WireError> {
        let raw: &[u8; SlotSet::BYTES] =
            self.take(SlotSet::BYTES)?.try_into().map_err(|_| WireError::Malformed("slot bitmap"))?;
        Ok(SlotSet::from_bytes(raw))
    }

    fn text8(&mut self) -> Result<String, WireError> {
        self.str8().map(str::to_owned)
    }

    fn str8(&mut self) -> Result<&'a str, WireError> {
        let n = usize::from(self.u8()?);
        let raw = self.take(n)?;
        std::str::from_utf8(raw).map_err(|_| WireError::Malformed("text is not UTF-8"))
    }

    fn blob32(&mut self) -> Result<&'a [u8], WireError> {
        let b = self.take(4)?;
        let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        let mut slots = SlotSet::new();
        (0..=5460).for_each(|s| {
            slots.insert(s);
        });
        Header {
            sender: NodeId::random(),
            current_epoch: 7,
            config_epoch: 3,
            repl_offset: 12345,
            flags: crate::NodeFlags::PRIMARY,
            state_ok: true,
            msg_flags: Header::PAUSED,
            primary: None,
            ip: "127.0.0.1".into(),
            port: 7000,
            tls_port: 7100,
            bus_port: 17100,
            hostname: "node1".into(),
            human_nodename: "cache-a".into(),
            slots,
            cert: CertSummary {
                serial: "1A2B".into(),
                fingerprint: [7; 32],
                not_after: 1_900_000_000,
                ca_serial: "0F".into(),
                ca_fingerprint: [9; 32],
                ca_not_after: 2_000_000_000,
            },
        }
    }

    /// One message of every type.
    pub(crate) fn samples() -> Vec<Message> {
        let h = header();
        let g = Gossip {
            id: NodeId::random(),
            ping_sent_ms: 0,
            pong_received_ms: 1_796_006_954_000,
            ip: "10.0.0.2",
            port: 7001,
            tls_port: 0,
            bus_port: 17001,
            flags: crate::NodeFlags::REPLICA | crate::NodeFlags::PFAIL,
        };
        let (mut one, mut two) = (GossipSection::default(), GossipSection::with_capacity(2));
        one.push(&g);
        two.push(&g);
        two.push(&g);
        let m = |kind, body| Message { kind, header: h.clone(), body };
        vec![
            m(Kind::Ping, Body::Gossip { entries: two, ext: Extensions::default() }),
            m(Kind::Pong, Body::Gossip { entries: GossipSection::default(), ext: extensions() }),
            m(Kind::Meet, Body::Gossip { entries: one, ext: Extensions::default() }),
            m(Kind::Fail, Body::Fail(NodeId::random())),
            m(Kind::Update, Body::Update { id: NodeId::random(), config_epoch: 9, slots: Box::new(SlotSet::full()) }),
            m(Kind::Publish, Body::Publish { channel: b"news".to_vec(), message: b"hello".to_vec() }),
            m(Kind::PublishShard, Body::Publish { channel: b"{a}x".to_vec(), message: vec![0; 1000] }),
            m(Kind::FailoverAuthRequest, Body::AuthRequest { force: true }),
            m(Kind::FailoverAuthAck, Body::Empty),
            m(Kind::MfStart, Body::Empty),
        ]
    }

    /// One extension of every type, and one of a type nobody knows yet.
    fn extensions() -> Extensions {
        let mut ext = Extensions::default();
        for e in [
            Ext::ForgottenNode { id: NodeId::random(), ttl_secs: 59 },
            Ext::ClientIpv4("192.0.2.1"),
            Ext::ClientIpv6("2001:db8::1"),
            Ext::ShardId(NodeId::random()),
            Ext::Unknown { ty: 999, data: &[1, 2, 3] },
        ] {
            ext.push(&e);
        }
        ext
    }

    #[test]
    fn a_gossip_section_reads_back_what_was_pushed() {
        let Body::Gossip { entries, .. } = &samples()[0].body else { panic!("a PING") };
        assert_eq!(entries.len(), 2);
        let seen: Vec<Gossip<'_>> = entries.iter().collect();
        assert_eq!(seen[0], seen[1]);
        assert_eq!((seen[0].ip, seen[0].port, seen[0].pong_received_ms), ("10.0.0.2", 7001, 1_796_006_954_000));
        assert!(GossipSection::default().is_empty() && GossipSection::default().iter().next().is_none());
    }

    #[test]
    fn a_frame_without_extensions_is_a_version_1_frame_and_extensions_are_checked() {
        // A PONG with extensions is its version 1 bytes plus the extension section.
        let with = &samples()[1];
        let Body::Gossip { entries, .. } = &with.body else { panic!("a PONG") };
        let without =
            Message { body: Body::Gossip { entries: entries.clone(), ext: Extensions::default() }, ..with.clone() };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        encode(with, &mut a);
        encode(&without, &mut b);
        assert_eq!(a[8..b.len()], b[8..]);
        assert_eq!(u16::from_be_bytes([a[b.len()], a[b.len() + 1]]), 5);
        // An empty section is written as none at all, so one with a count of 0 is refused.
        let mut empty = b.clone();
        empty.extend_from_slice(&[0, 0]);
        empty[..4].copy_from_slice(&(b.len() as u32 + 2).to_be_bytes());
        assert_eq!(decode(&empty), Err(WireError::Malformed("an empty extension section")));
        // A count larger than the frame holds, data running past the frame, and a forgotten
        // node whose data is longer than an id and a ttl.
        let refuse = |tail: &[u8]| {
            let mut bad = b.clone();
            bad.extend_from_slice(tail);
            let len = bad.len() as u32;
            bad[..4].copy_from_slice(&len.to_be_bytes());
            assert!(matches!(decode(&bad), Err(WireError::Malformed(_))), "{tail:?}");
        };
        refuse(&[0, 9, 0, 2, 0, 0, 0, 0]);
        refuse(&[0, 1, 0, 2, 0, 0, 0, 9, 1]);
        let mut long = vec![0, 1, 0, 1, 0, 0, 0, 49];
        long.extend_from_slice(NodeId::random().as_bytes());
        long.extend_from_slice(&[0; 9]);
        refuse(&long);
        refuse(&[0, 1, 0, 2, 0, 0, 0, 2, 1, 0xff]);
    }

    #[test]
    fn every_message_round_trips_and_arrives_in_pieces() {
        for msg in samples() {
            let mut buf = Vec::new();
            encode(&msg, &mut buf);
            assert_eq!(encoded_len(&msg), buf.len(), "{:?}", msg.kind);
            assert_eq!(decode(&buf), Ok(Some((msg.clone(), buf.len()))), "{:?}", msg.kind);
            for cut in [0, 3, 4, 10, buf.len() - 1] {
                assert_eq!(decode(&buf[..cut]), Ok(None), "{:?} cut at {cut}", msg.kind);
            }
        }
    }

    #[test]
    fn a_certificate_expires_soon_when_it_or_its_ca_does() {
        let c = CertSummary { not_after: 1000, ca_not_after: 5000, ..Default::default() };
        assert!(c.is_known());
        assert!(!c.expires_within(0, 1000));
        assert!(c.expires_within(1, 1000), "the certificate");
        assert!(c.expires_within(2000, 0), "an expired one");
        let ca = CertSummary { not_after: 9000, ca_not_after: 1000, ..Default::default() };
        assert!(ca.expires_within(500, 600), "the CA");
        assert!(!CertSummary::default().is_known());
        assert!(!CertSummary::default().expires_within(i64::MAX, i64::MAX), "nothing known, nothing flagged");
    }

    #[test]
    fn a_publish_frame_made_from_slices_is_the_encoded_message() {
        // A name longer than a text field holds is cut on the wire, and in the length too.
        let long = Header { hostname: "h".repeat(300), ..header() };
        for (kind, header) in [(Kind::Publish, header()), (Kind::PublishShard, long)] {
            let msg = Message {
                kind,
                header,
                body: Body::Publish { channel: b"{a}news".to_vec(), message: b"hello\0world".to_vec() },
            };
            let mut expected = Vec::new();
            encode(&msg, &mut expected);
            // Appended after other bytes, as a link's buffer would hold it.
            let mut out = vec![9, 9];
            encode_publish(kind, &msg.header, b"{a}news", b"hello\0world", &mut out);
            assert_eq!(out[2..], expected[..]);
            assert_eq!(publish_frame_len(&msg.header, 7, 11), expected.len());
            let decoded = decode(&out[2..]).unwrap().unwrap();
            assert_eq!((decoded.0.body, decoded.1), (msg.body, expected.len()));
        }
    }

    #[test]
    fn a_tls_record_reads_as_too_large() {
        // A TLS alert record header, as a plain node reads it from a TLS node.
        assert_eq!(decode(&[0x15, 0x03, 0x03, 0x00, 0x02]), Err(WireError::TooLarge(352_518_912)));
        assert_eq!(WireError::TooLarge(352_518_912).to_string(), "message too large: 352518912 bytes");
        assert_eq!(decode(&[0, 0, 0, 3]), Err(WireError::TooShort(3)));
    }

    #[test]
    fn lies_are_refused() {
        let mut buf = Vec::new();
        encode(&samples()[0], &mut buf);
        let mut bad = buf.clone();
        bad[4..6].copy_from_slice(&(VERSION + 1).to_be_bytes());
        assert_eq!(decode(&bad), Err(WireError::Version(VERSION + 1)));
        let mut bad = buf.clone();
        bad[6..8].copy_from_slice(&99u16.to_be_bytes());
        assert_eq!(decode(&bad), Err(WireError::UnknownType(99)));
        // A gossip count larger than the frame could hold is refused before allocating.
        let count_at = buf.len() - 2 * GOSSIP_MIN - 2 * 8 - 2;
        let mut bad = buf.clone();
        bad[count_at..count_at + 2].copy_from_slice(&u16::MAX.to_be_bytes());
        assert!(matches!(decode(&bad), Err(WireError::Malformed(_))));
        // A length that ends early, and one with bytes left over.
        let mut short = buf[..buf.len() - 1].to_vec();
        short[..4].copy_from_slice(&((buf.len() - 1) as u32).to_be_bytes());
        assert!(matches!(decode(&short), Err(WireError::Malformed(_))));
        // (After a gossip section, more bytes are extensions: one byte cannot be their count.)
        let mut long = buf.clone();
        long.push(0);
        long[..4].copy_from_slice(&(buf.len() as u32 + 1).to_be_bytes());
        assert_eq!(decode(&long), Err(WireError::Malformed("field runs past the frame")));
        let mut fail = Vec::new();
        encode(&samples()[3], &mut fail);
        fail.push(0);
        let len = fail.len() as u32;
        fail[..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(decode(&fail), Err(WireError::Malformed("bytes after the body")));
    }
}
