//! `nodes.conf` (`cluster-config-file`, in `dir`): the node table a node keeps across restarts,
//! so it rejoins with its id, epochs and slots. One line per node in the `CLUSTER NODES` form
//! with the address's extra fields (`,hostname,tls-port=N,human-nodename=...,client-ipv4=...`),
//! then
//! `vars currentEpoch N lastVoteEpoch M`. Written atomically on every change (a temp file in
//! the same directory, fsync, rename, fsync of the directory); a file that does not parse is a
//! fatal error naming the file and the line, never a silent fresh start.

use std::fmt;
use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use crate::node::{ClientKind, Node, NodeFlags, NodeId};
use crate::slots::parse_slot;

/// What a `nodes.conf` holds.
#[derive(Clone, Debug, PartialEq)]
pub struct SavedConfig {
    /// Every known node, this one (flagged `myself`) included.
    pub nodes: Vec<Node>,
    /// The cluster's current epoch as this node last saw it.
    pub current_epoch: u64,
    /// The last epoch this node voted in (failover).
    pub last_vote_epoch: u64,
    /// Slots this node is migrating or importing: a node restarted mid-move keeps redirecting
    /// (ASK) and accepting (ASKING) as before, and `--cluster fix` sees the move to finish.
    pub open_slots: Vec<OpenSlot>,
}

/// A slot being moved, kept on this node's line as Valkey writes it: `[slot->-target]` or
/// `[slot-<-source]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenSlot {
    /// Migrating to the node.
    Migrating(u16, NodeId),
    /// Importing from the node.
    Importing(u16, NodeId),
}

impl fmt::Display for OpenSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenSlot::Migrating(s, to) => write!(f, "[{s}->-{to}]"),
            OpenSlot::Importing(s, from) => write!(f, "[{s}-<-{from}]"),
        }
    }
}

impl OpenSlot {
    fn parse(tok: &str) -> Option<OpenSlot> {
        let inner = tok.strip_prefix('[')?.strip_suffix(']')?;
        if let Some((s, id)) = inner.split_once("->-") {
            return Some(OpenSlot::Migrating(parse_slot(s.as_bytes())?, NodeId::parse(id.as_bytes())?));
        }
        let (s, id) = inner.split_once("-<-")?;
        Some(OpenSlot::Importing(parse_slot(s.as_bytes())?, NodeId::parse(id.as_bytes())?))
    }
}

/// Why a `nodes.conf` could not be loaded or saved.
#[derive(Debug)]
pub enum ConfError {
    /// Reading or writing failed.
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        err: io::Error,
    },
    /// A line does not parse.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
}

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfError::Io { path, err } => write!(f, "cluster config file {}: {err}", path.display()),
            ConfError::Corrupt { path, line, reason } => write!(
                f,
                "Unrecoverable error: corrupted cluster config file \"{}\" at line {line}: {reason}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for ConfError {}

/// Loads `path`; `Ok(None)` when it does not exist or is empty (a first start).
pub fn load(path: &Path) -> Result<Option<SavedConfig>, ConfError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(ConfError::Io { path: path.to_path_buf(), err }),
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    parse(&text).map(Some).map_err(|(line, reason)| ConfError::Corrupt { path: path.to_path_buf(), line, reason })
}

/// Writes `cfg` to `path` atomically; `fsync` also forces the file and the rename to the
/// disk before returning.
pub fn save(path: &Path, cfg: &SavedConfig, fsync: bool) -> Result<(), ConfError> {
    let io_err = |err| ConfError::Io { path: path.to_path_buf(), err };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{}.tmp", path.file_name().and_then(|n| n.to_str()).unwrap_or("nodes.conf")));
    let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp).map_err(io_err)?;
    f.write_all(render(cfg).as_bytes()).map_err(io_err)?;
    if fsync {
        f.sync_all().map_err(io_err)?;
    }
    drop(f);
    fs::rename(&tmp, path).map_err(io_err)?;
    // The rename itself is durable only once the directory is.
    if fsync {
        File::open(dir).and_then(|d| d.sync_all()).map_err(io_err)?;
    }
    Ok(())
}

/// The file's text.
pub fn render(cfg: &SavedConfig) -> String {
    let mut out = String::new();
    for n in &cfg.nodes {
        // The plain port, whatever kind of client would ask: the TLS port has its own field.
        let _ = write!(out, "{} {}:{}@{},{},tls-port={}", n.id, n.ip, n.port, n.bus_port, n.hostname, n.tls_port);
        // Valkey's aux fields, written only when set.
        for (field, value) in
            [("human-nodename", &n.human_nodename), ("client-ipv4", &n.client_ipv4), ("client-ipv6", &n.client_ipv6)]
        {
            if !value.is_empty() {
                let _ = write!(out, ",{field}={value}");
            }
        }
        let _ = write!(out, ",shard-id={}", n.shard_id);
        let mut rest = String::new();
        n.describe(&mut rest, ClientKind::default(), "");
        // The same fields as CLUSTER NODES from the flags on.
        let from_flags = rest.splitn(3, ' ').nth(2).unwrap_or("");
        let _ = write!(out, " {from_flags}");
        if n.flags.has(NodeFlags::MYSELF) {
            for open in &cfg.open_slots {
                let _ = write!(out, " {open}");
            }
        }
        out.push('\n');
    }
    out.push_str(&format!("vars currentEpoch {} lastVoteEpoch {}\n", cfg.current_epoch, cfg.last_vote_epoch));
    out
}

/// Parses the file's text; an error carries the 1-based line and the reason.
pub fn parse(text: &str) -> Result<SavedConfig, (usize, String)> {
    let mut cfg = SavedConfig { nodes: Vec::new(), current_epoch: 0, last_vote_epoch: 0, open_slots: Vec::new() };
    // Nodes whose line named no shard (a file written before shard ids were saved).
    let mut unnamed = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = |reason: String| (i + 1, reason);
        let fields: Vec<&str> = line.split(' ').filter(|f| !f.is_empty()).collect();
        if fields.is_empty() {
            continue;
        }
        if fields[0] == "vars" {
            parse_vars(&fields[1..], &mut cfg).map_err(at)?;
            continue;
        }
        let (node, named) = parse_node(&fields).map_err(at)?;
        if !named {
            unnamed.push(node.id);
        }
        for tok in fields.iter().filter(|t| t.starts_with('[')) {
            cfg.open_slots.push(OpenSlot::parse(tok).ok_or_else(|| at(format!("bad open slot {tok}")))?);
        }
        if cfg.nodes.iter().any(|n| n.id == node.id) {
            return Err(at(format!("node {} appears twice", node.id)));
        }
        cfg.nodes.push(node);
    }
    // A replica without a saved shard is in its primary's, as Valkey reads such a file; a
    // primary keeps the fresh id it was given.
    for id in unnamed {
        let primary = cfg.nodes.iter().find(|n| n.id == id).and_then(|n| n.primary);
        if let Some(shard) = primary.and_then(|p| cfg.nodes.iter().find(|n| n.id == p)).map(|p| p.shard_id)
            && let Some(n) = cfg.nodes.iter_mut().find(|n| n.id == id)
        {
            n.shard_id = shard;
        }
    }
    match cfg.nodes.iter().filter(|n| n.flags.has(NodeFlags::MYSELF)).count() {
        1 => Ok(cfg),
        0 => Err((text.lines().count(), "no node is flagged myself".into())),
        _ => Err((text.lines().count(), "more than one node is flagged myself".into())),
    }
}

fn parse_vars(fields: &[&str], cfg: &mut SavedConfig) -> Result<(), String> {
    if !fields.len().is_multiple_of(2) {
        return Err("a vars line holds name value pairs".into());
    }
    for pair in fields.chunks(2) {
        let v: u64 = pair[1].parse().map_err(|_| format!("{} is not a number: {}", pair[0], pair[1]))?;
        match pair[0] {
            "currentEpoch" => cfg.current_epoch = v,
            "lastVoteEpoch" => cfg.last_vote_epoch = v,
            // Valkey writes others (none that hotkv uses); a newer file is still readable.
            _ => {}
        }
    }
    Ok(())
}

/// A node line, and whether it named the node's shard.
fn parse_node(f: &[&str]) -> Result<(Node, bool), String> {
    if f.len() < 8 {
        return Err(format!("a node line has at least 8 fields, this one {}", f.len()));
    }
    let id = NodeId::parse(f[0].as_bytes()).ok_or_else(|| format!("bad node id {}", f[0]))?;
    let flags = NodeFlags::parse(f[2]).ok_or_else(|| format!("bad flags {}", f[2]))?;
    let mut node = Node::new(id, flags.0);
    let shard_id = parse_address(f[1], &mut node)?;
    node.primary = match f[3] {
        "-" => None,
        p => Some(NodeId::parse(p.as_bytes()).ok_or_else(|| format!("bad primary id {p}"))?),
    };
    let number = |s: &str, what: &str| s.parse::<i64>().map_err(|_| format!("bad {what} {s}"));
    node.ping_sent_ms = number(f[4], "ping time")?;
    node.pong_received_ms = number(f[5], "pong time")?;
    node.config_epoch = f[6].parse().map_err(|_| format!("bad config epoch {}", f[6]))?;
    if !matches!(f[7], "connected" | "disconnected") {
        return Err(format!("bad link state {}", f[7]));
    }
    for tok in &f[8..] {
        // Open slots are the file's, not the node's (see `parse`).
        if tok.starts_with('[') {
            continue;
        }
        let (a, b) = tok.split_once('-').unwrap_or((tok, tok));
        let (a, b) = (parse_slot(a.as_bytes()), parse_slot(b.as_bytes()));
        match (a, b) {
            (Some(a), Some(b)) if a <= b => (a..=b).for_each(|s| {
                node.slots.insert(s);
            }),
            _ => return Err(format!("bad slot range {tok}")),
        }
    }
    Ok((node, shard_id))
}

/// `ip:port@cport[,hostname][,key=value...]`; true when a `shard-id` was among the fields.
fn parse_address(field: &str, node: &mut Node) -> Result<bool, String> {
    let bad = || format!("bad address {field}");
    let mut parts = field.split(',');
    let base = parts.next().ok_or_else(bad)?;
    let (hostport, cport) = base.rsplit_once('@').ok_or_else(bad)?;
    let (ip, port) = hostport.rsplit_once(':').ok_or_else(bad)?;
    node.ip = ip.to_owned();
    node.port = port.parse().map_err(|_| bad())?;
    node.bus_port = cport.parse().map_err(|_| bad())?;
    if let Some(host) = parts.next() {
        node.hostname = host.to_owned();
    }
    let mut shard_id = false;
    for kv in parts {
        match kv.split_once('=') {
            Some(("shard-id", v)) => {
                node.shard_id = NodeId::parse(v.as_bytes()).ok_or_else(bad)?;
                shard_id = true;
            }
            Some(("tls-port", v)) => node.tls_port = v.parse().map_err(|_| bad())?,
            Some(("human-nodename", v)) => node.human_nodename = v.to_owned(),
            // Checked as Valkey's aux setters check them: a file never feeds clients garbage.
            Some(("client-ipv4", v)) => {
                v.parse::<Ipv4Addr>().map_err(|_| bad())?;
                node.client_ipv4 = v.to_owned();
            }
            Some(("client-ipv6", v)) => {
                v.parse::<Ipv6Addr>().map_err(|_| bad())?;
                node.client_ipv6 = v.to_owned();
            }
            // Fields a newer version writes: not needed to rejoin.
            _ => {}
        }
    }
    Ok(shard_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SavedConfig {
        let mut me = Node::new(NodeId::random(), NodeFlags::MYSELF | NodeFlags::PRIMARY);
        me.ip = "127.0.0.1".into();
        me.port = 30001;
        me.bus_port = 40001;
        me.config_epoch = 3;
        (0..=5460).for_each(|s| {
            me.slots.insert(s);
        });
        let mut other = Node::new(NodeId::random(), NodeFlags::REPLICA);
        other.ip = "10.0.0.2".into();
        other.port = 0;
        other.tls_port = 7001;
        other.bus_port = 17001;
        other.hostname = "node2".into();
        other.human_nodename = "cache-b".into();
        other.client_ipv4 = "192.0.2.2".into();
        other.client_ipv6 = "2001:db8::2".into();
        other.primary = Some(me.id);
        other.shard_id = me.shard_id;
        other.pong_received_ms = 1_796_006_954_000;
        SavedConfig { nodes: vec![me, other], current_epoch: 6, last_vote_epoch: 2, open_slots: Vec::new() }
    }

    #[test]
    fn round_trips_through_the_file() {
        let dir = std::env::temp_dir().join(format!("hotkv-nodes-conf-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("nodes.conf");
        let cfg = sample();
        save(&path, &cfg, true).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        let shard = cfg.nodes[0].shard_id;
        assert!(
            text.contains(&format!(
                " 127.0.0.1:30001@40001,,tls-port=0,shard-id={shard} myself,master - 0 0 3 connected 0-5460\n"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                " 10.0.0.2:0@17001,node2,tls-port=7001,human-nodename=cache-b,client-ipv4=192.0.2.2,\
                 client-ipv6=2001:db8::2,shard-id={shard} slave "
            )),
            "{text}"
        );
        assert!(text.ends_with("vars currentEpoch 6 lastVoteEpoch 2\n"));
        let mut back = load(&path).unwrap().unwrap();
        // Link state is not a fact to restore: a restarted node has no links yet.
        back.nodes[0].link_connected = cfg.nodes[0].link_connected;
        assert_eq!(back, cfg);
        fs::remove_dir_all(&dir).unwrap();
        assert!(load(&path).unwrap().is_none(), "a missing file is a first start");
    }

    /// A file written before shard ids were saved: a replica joins its primary's shard (even
    /// when its line comes first), a primary keeps a fresh one.
    #[test]
    fn lines_without_a_shard_id_take_the_primarys() {
        let cfg = sample();
        let text = render(&cfg);
        let old: String = text
            .lines()
            .rev()
            .map(|l| format!("{}\n", l.replace(&format!(",shard-id={}", cfg.nodes[0].shard_id), "")))
            .collect();
        assert!(!old.contains("shard-id"));
        let back = parse(&old).unwrap();
        let primary = back.nodes.iter().find(|n| n.id == cfg.nodes[0].id).unwrap();
        let replica = back.nodes.iter().find(|n| n.id == cfg.nodes[1].id).unwrap();
        assert_ne!(primary.shard_id, cfg.nodes[0].shard_id, "a primary without one gets a new id");
        assert_eq!(replica.shard_id, primary.shard_id);
        let bad = text.replacen("shard-id=", "shard-id=zz", 1);
        assert_eq!(parse(&bad).unwrap_err().0, 1);
    }

    #[test]
    fn corrupt_files_name_the_line() {
        let good = render(&sample());
        let mut lines: Vec<&str> = good.lines().collect();
        lines[1] = "not-a-node 1.2.3.4:1@2 master - 0 0 0 connected";
        let err = parse(&lines.join("\n")).unwrap_err();
        assert_eq!(err, (2, "bad node id not-a-node".to_owned()));
        let truncated = &good[..good.find('\n').unwrap() / 2];
        assert_eq!(parse(truncated).unwrap_err().0, 1);
        let bad_ip = good.replace("client-ipv4=192.0.2.2", "client-ipv4=banana");
        assert_eq!(parse(&bad_ip).unwrap_err().0, 2);
        let no_myself = good.replace("myself,", "");
        assert_eq!(parse(&no_myself).unwrap_err().1, "no node is flagged myself");
        let e = ConfError::Corrupt { path: "/d/nodes.conf".into(), line: 2, reason: "bad node id x".into() };
        assert_eq!(
            e.to_string(),
            "Unrecoverable error: corrupted cluster config file \"/d/nodes.conf\" at line 2: bad node id x"
        );
    }
}
