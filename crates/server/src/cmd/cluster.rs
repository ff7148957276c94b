//! CLUSTER and the per-connection cluster commands (READONLY, READWRITE, ASKING), with
//! Valkey's reply shapes and error texts. The node table belongs to `hotkv-cluster`; these
//! handlers lock it for the moment they read or change it and tell the bus afterwards.

use hotkv_cluster::node::{ClientKind, Node, NodeFlags, NodeId};
use hotkv_cluster::slots::parse_slot;
use hotkv_cluster::state::{ClusterState, Endpoint, FailoverMode, SetSlot};
use hotkv_engine::CommandError;
use hotkv_engine::command::{CommandSpec, acl, flags as f};
use hotkv_engine::slot::key_slot;
use hotkv_protocol::{Args, ReplyBuf};

use super::client::{Current, client_line};
use super::{reply_help, row, text};
use crate::cluster::ClusterNode;
use crate::registry::{Flow, ServerSpec};
use crate::server::{Server, unix_ms};
use crate::session::Session;

const ADMIN: u32 = f::ADMIN | f::STALE | f::NOSCRIPT;
const READ: u32 = f::STALE | f::LOADING;

macro_rules! sub {
    ($name:literal, $arity:literal, $flags:expr, $since:literal, $summary:literal, $run:expr) => {
        row($name, $arity, $flags, acl::SLOW, &[], "cluster", $since, $summary, "O(1)", $run)
    };
}

/// CLUSTER's rows, READONLY, READWRITE and ASKING.
pub static COMMANDS: &[ServerSpec] = &[
    CommandSpec::container(
        "cluster",
        -2,
        "cluster",
        "3.0.0",
        "A container for Redis Cluster commands.",
        &[
            sub!("addslots", -3, ADMIN, "3.0.0", "Assigns new hash slots to a node.", addslots),
            sub!("addslotsrange", -4, ADMIN, "7.0.0", "Assigns new hash slot ranges to a node.", addslotsrange),
            sub!("bumpepoch", 2, ADMIN, "3.0.0", "Advances the cluster config epoch.", bumpepoch),
            // hotkv's own: "since" is the version hotkv reports.
            row(
                "certs",
                2,
                READ,
                acl::SLOW,
                &[],
                "cluster",
                crate::cmd::conn::REDIS_VERSION,
                "Returns the TLS certificate and CA every known node serves, as gossiped on the bus.",
                "O(N) where N is the number of known nodes",
                certs,
            ),
            sub!(
                "count-failure-reports",
                3,
                ADMIN,
                "3.0.0",
                "Returns the number of active failure reports active for a node.",
                count_failure_reports
            ),
            sub!("countkeysinslot", 3, READ, "3.0.0", "Returns the number of keys in a hash slot.", countkeysinslot),
            sub!("delslots", -3, ADMIN, "3.0.0", "Sets hash slots as unbound for a node.", delslots),
            sub!("delslotsrange", -4, ADMIN, "7.0.0", "Sets hash slot ranges as unbound for a node.", delslotsrange),
            sub!(
                "failover",
                -2,
                ADMIN,
                "3.0.0",
                "Forces a replica to perform a manual failover of its primary.",
                failover
            ),
            sub!("flushslots", 2, ADMIN, "3.0.0", "Deletes all slots information from a node.", flushslots),
            sub!("forget", 3, ADMIN, "3.0.0", "Removes a node from the nodes table.", forget),
            sub!("getkeysinslot", 4, READ, "3.0.0", "Returns the key names in a hash slot.", getkeysinslot),
            sub!(
                "help",
                2,
                f::LOADING | f::STALE,
                "5.0.0",
                "Returns helpful text about the different subcommands.",
                help
            ),
            sub!("info", 2, READ, "3.0.0", "Returns information about the state of a node.", info),
            sub!("keyslot", 3, READ, "3.0.0", "Returns the hash slot for a key.", keyslot),
            row(
                "links",
                2,
                f::STALE,
                acl::SLOW,
                &[],
                "cluster",
                "7.0.0",
                "Returns a list of all TCP links to and from peer nodes.",
                "O(N) where N is the total number of Cluster nodes",
                links,
            ),
            sub!("meet", -4, ADMIN, "3.0.0", "Forces a node to handshake with another node.", meet),
            sub!("myid", 2, READ, "3.0.0", "Returns the ID of a node.", myid),
            sub!("myshardid", 2, READ, "7.2.0", "Returns the shard ID of a node.", myshardid),
            sub!("nodes", 2, READ, "3.0.0", "Returns the cluster configuration for a node.", nodes),
            sub!("replicas", 3, ADMIN, "5.0.0", "Lists the replica nodes of a master node.", replicas),
            sub!("replicate", 3, ADMIN, "3.0.0", "Configure a node as replica of a master node.", replicate),
            sub!("reset", -2, ADMIN, "3.0.0", "Resets a node.", reset),
            sub!(
                "saveconfig",
                2,
                ADMIN,
                "3.0.0",
                "Forces a node to save the cluster configuration to disk.",
                saveconfig
            ),
            sub!(
                "set-config-epoch",
                3,
                ADMIN,
                "3.0.0",
                "Sets the configuration epoch for a new node.",
                set_config_epoch
            ),
            sub!("setslot", -4, ADMIN, "3.0.0", "Binds a hash slot to a node.", setslot),
            sub!("shards", 2, READ, "7.0.0", "Returns the mapping of cluster slots to shards.", shards),
            sub!("slaves", 3, ADMIN, "3.0.0", "Lists the replica nodes of a master node.", replicas),
            sub!("slots", 2, READ, "3.0.0", "Returns the mapping of cluster slots to nodes.", slots),
        ],
    ),
    row(
        "asking",
        1,
        f::FAST,
        acl::FAST | acl::CONNECTION,
        &[],
        "cluster",
        "3.0.0",
        "Signals that a cluster client is following an -ASK redirect.",
        "O(1)",
        asking,
    ),
    row(
        "readonly",
        1,
        f::LOADING | f::STALE | f::FAST,
        acl::FAST | acl::CONNECTION,
        &[],
        "cluster",
        "3.0.0",
        "Enables read-only queries for a connection to a Redis Cluster replica node.",
        "O(1)",
        readonly,
    ),
    row(
        "readwrite",
        1,
        f::LOADING | f::STALE | f::FAST,
        acl::FAST | acl::CONNECTION,
        &[],
        "cluster",
        "3.0.0",
        "Enables read-write queries for a connection to a Redis Cluster replica node.",
        "O(1)",
        readwrite,
    ),
];

type Res = Result<Flow, CommandError>;

/// The cluster node, or Valkey's refusal outside cluster mode.
fn node(srv: &Server) -> Result<&ClusterNode, CommandError> {
    srv.cluster.as_ref().ok_or_else(|| CommandError::err("This instance has cluster support disabled"))
}

fn done(out: &mut ReplyBuf) -> Res {
    out.ok();
    Ok(Flow::Continue)
}

fn slot_arg(arg: &[u8]) -> Result<u16, CommandError> {
    parse_slot(arg).ok_or_else(|| CommandError::err("Invalid or out of range slot"))
}

fn node_arg(arg: &[u8]) -> Result<NodeId, CommandError> {
    NodeId::parse(arg).ok_or_else(|| CommandError::err(format!("Unknown node {}", text(arg))))
}

/// Slots from `a b c` or, for the RANGE forms, from `start end` pairs.
fn slot_list(args: &Args<'_>, ranges: bool) -> Result<Vec<u16>, CommandError> {
    let rest: Vec<&[u8]> = args.iter().skip(2).collect();
    if !ranges {
        return rest.iter().map(|a| slot_arg(a)).collect();
    }
    if !rest.len().is_multiple_of(2) {
        return Err(CommandError::WrongArity(format!("cluster|{}", text(args.get(1)).to_lowercase())));
    }
    let mut out = Vec::new();
    for pair in rest.chunks(2) {
        let (a, b) = (slot_arg(pair[0])?, slot_arg(pair[1])?);
        if a > b {
            return Err(CommandError::err(format!("start slot number {a} is greater than end slot number {b}")));
        }
        out.extend(a..=b);
    }
    Ok(out)
}

fn change(
    srv: &Server,
    out: &mut ReplyBuf,
    f: impl FnOnce(&mut hotkv_cluster::state::ClusterState) -> Result<(), String>,
) -> Res {
    let n = node(srv)?;
    let r = f(&mut n.state());
    n.changed();
    r.map_err(CommandError::err)?;
    done(out)
}

fn addslots(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    let slots = slot_list(&args, false)?;
    change(srv, out, |st| st.add_slots(&slots))
}

fn addslotsrange(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    let slots = slot_list(&args, true)?;
    change(srv, out, |st| st.add_slots(&slots))
}

fn delslots(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    let slots = slot_list(&args, false)?;
    change(srv, out, |st| st.del_slots(&slots))
}

fn delslotsrange(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    let slots = slot_list(&args, true)?;
    change(srv, out, |st| st.del_slots(&slots))
}

fn flushslots(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    node(srv)?;
    if !srv.ks.db(0).is_empty() {
        return Err(CommandError::err("DB must be empty to perform CLUSTER FLUSHSLOTS."));
    }
    change(srv, out, |st| {
        st.flush_slots();
        Ok(())
    })
}

/// CLUSTER FAILOVER [FORCE|TAKEOVER], on a replica. It answers once the failover started, as
/// Valkey: the vote, or the primary's handshake, goes on on the bus (check the roles with ROLE
/// or CLUSTER NODES).
fn failover(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    let mode = match args.opt(2) {
        None => FailoverMode::Default,
        Some(m) if args.len() == 3 && m.eq_ignore_ascii_case(b"force") => FailoverMode::Force,
        Some(m) if args.len() == 3 && m.eq_ignore_ascii_case(b"takeover") => FailoverMode::Takeover,
        Some(_) => return Err(CommandError::Syntax),
    };
    node(srv)?;
    let now = unix_ms();
    // Who asked, for the log line, as Valkey's catClientInfoString.
    let cur = Current { id: sess.id, cmd: "cluster|failover", argv_mem: args.total_len() };
    let client = client_line(&srv.registry, &sess.info, now, &cur);
    change(srv, out, |st| st.failover(mode, &client, now))
}

fn bumpepoch(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    let n = node(srv)?;
    let (bumped, epoch) = n.state().bump_epoch();
    n.changed();
    out.simple(&format!("{} {epoch}", if bumped { "BUMPED" } else { "STILL" }));
    Ok(Flow::Continue)
}

fn set_config_epoch(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    let raw = hotkv_protocol::parse_i64(args.get(2)).ok_or(CommandError::NotInteger)?;
    let epoch = u64::try_from(raw).map_err(|_| CommandError::err(format!("Invalid config epoch specified: {raw}")))?;
    change(srv, out, |st| st.set_config_epoch(epoch))
}

fn count_failure_reports(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    let n = node(srv)?;
    let id = node_arg(args.get(2))?;
    let count = n.state().failure_reports(&id).ok_or_else(|| CommandError::err(format!("Unknown node {id}")))?;
    out.int(count as i64);
    Ok(Flow::Continue)
}

fn countkeysinslot(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    node(srv)?;
    let slot = parse_slot(args.get(2)).ok_or_else(|| CommandError::err("Invalid slot"))?;
    out.int(srv.ks.db(0).slot(slot).keys() as i64);
    Ok(Flow::Continue)
}

fn getkeysinslot(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    node(srv)?;
    let bad = || CommandError::err("Invalid slot or number of keys");
    let slot = parse_slot(args.get(2)).ok_or_else(bad)?;
    let count = hotkv_protocol::parse_i64(args.get(3)).filter(|&n| n >= 0).ok_or_else(bad)? as usize;
    let table = srv.ks.db(0).slot(slot).lock();
    let keys: Vec<&[u8]> = table.iter().map(|(_, e)| e.key()).take(count).collect();
    out.array(keys.len());
    for k in keys {
        out.bulk(k);
    }
    Ok(Flow::Continue)
}

/// CLUSTER SETSLOT <slot> MIGRATING|IMPORTING|NODE <id> | STABLE [TIMEOUT ms]. The timeout
/// bounds Valkey's wait for replicas to take the change first; hotkv has no replicas to
/// wait for yet, so it is checked and kept for then.
/// CLUSTER SETSLOT. As Valkey 8, a primary with replicas online sends the command down its
/// replication stream first and applies it only once every one of them acknowledged it (or
/// answers NOREPLICAS at the timeout): a slot's new owner or migration state then survives
/// the primary's failure. A replica applies what its primary sends it.
fn setslot(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    let n = node(srv)?;
    let from_primary = sess.has_flag(crate::session::flag::MASTER);
    if !n.state().myself().is_primary() && !from_primary {
        return Err(CommandError::err("Please use SETSLOT only with masters."));
    }
    let slot = slot_arg(args.get(2))?;
    let action = args.get(3);
    let id = |unknown: &str| -> Result<NodeId, CommandError> {
        let raw = args.get(4);
        NodeId::parse(raw).ok_or_else(|| CommandError::err(format!("{unknown} {}", text(raw))))
    };
    let argc = args.len();
    let (what, options) = if action.eq_ignore_ascii_case(b"migrating") && argc >= 5 {
        (SetSlot::Migrating(id("I don't know about node")?), 5)
    } else if action.eq_ignore_ascii_case(b"importing") && argc >= 5 {
        (SetSlot::Importing(id("I don't know about node")?), 5)
    } else if action.eq_ignore_ascii_case(b"stable") {
        (SetSlot::Stable, 4)
    } else if action.eq_ignore_ascii_case(b"node") && argc >= 5 {
        (SetSlot::Node(id("Unknown node")?), 5)
    } else {
        return Err(CommandError::err("Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP"));
    };
    // Valkey's CLUSTER_OPERATION_TIMEOUT; 0 waits as long as it takes.
    let mut timeout_ms = 2000;
    let mut i = options;
    while i < argc {
        if args.get(i).eq_ignore_ascii_case(b"timeout") {
            let Some(v) = args.opt(i + 1) else { return Err(CommandError::err("Missing timeout value")) };
            timeout_ms = crate::cmd::server::parse_timeout_ms(v)?;
            i += 1;
        }
        i += 1;
    }
    let keys = srv.ks.db(0).slot(slot).keys();
    let primary = &srv.repl.primary;
    let online = primary.replicas().iter().filter(|r| r.state == hotkv_replication::ReplicaState::Online).count();
    let waits = {
        let st = n.state();
        st.myself().is_primary() && st.set_slot_changes(slot, what)
    };
    if from_primary || online == 0 || !waits {
        return change(srv, out, |st| st.set_slot(slot, what, keys));
    }
    // Refused here as it would be once applied: replicas never see a SETSLOT their primary
    // would reject.
    n.state().check_set_slot(slot, what, keys).map_err(CommandError::err)?;
    let mut e = hotkv_engine::Effects::default();
    e.begin(true);
    e.push_parts(0, args.iter());
    srv.ks.sink().append(&e);
    let target = primary.offset();
    let primary = std::sync::Arc::clone(primary);
    let srv = srv.arc().ok_or_else(|| CommandError::err("server is shutting down"))?;
    let timeout = (timeout_ms > 0).then(|| std::time::Duration::from_millis(timeout_ms as u64));
    Ok(Flow::Await(Box::pin(async move {
        let acked = primary.wait_for(target, online, timeout).await;
        let mut reply = ReplyBuf::new();
        if acked < online {
            reply.error("NOREPLICAS Not enough good replicas to write.");
        } else {
            let keys = srv.ks.db(0).slot(slot).keys();
            if let Err(e) = change(&srv, &mut reply, |st| st.set_slot(slot, what, keys)) {
                reply.error(&e.message());
            }
        }
        reply.as_bytes().to_vec()
    })))
}

fn forget(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    let id = node_arg(args.get(2))?;
    change(srv, out, |st| st.forget(&id, hotkv_cluster::bus::now_ms()))
}

fn help(_: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    reply_help(
        out,
        &args,
        &[
            "ADDSLOTS <slot> [<slot> ...]",
            "    Assign slots to current node.",
            "ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
            "    Assign slots which are between <start-slot> and <end-slot> to current node.",
            "BUMPEPOCH",
            "    Advance the cluster config epoch.",
            "CERTS",
            "    Return the TLS certificate every known node serves, as the nodes gossip it: one map per",
            "    node with id, addr, flags, link, serial, fingerprint (SHA-256), not-after (unix time),",
            "    ca-serial, ca-fingerprint, ca-not-after, and expires-soon (yes when the certificate or its",
            "    CA expires within 7 days or has expired, unknown when the node has not said).",
            "COUNT-FAILURE-REPORTS <node-id>",
            "    Return number of failure reports for <node-id>.",
            "COUNTKEYSINSLOT <slot>",
            "    Return the number of keys in <slot>.",
            "DELSLOTS <slot> [<slot> ...]",
            "    Delete slots information from current node.",
            "DELSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
            "    Delete slots information which are between <start-slot> and <end-slot>.",
            "FAILOVER [FORCE|TAKEOVER]",
            "    Promote current replica node to being a master.",
            "FLUSHSLOTS",
            "    Delete current node own slots information.",
            "FORGET <node-id>",
            "    Remove a node from the cluster.",
            "GETKEYSINSLOT <slot> <count>",
            "    Return key names stored by current node in a slot.",
            "INFO",
            "    Return information about the cluster.",
            "KEYSLOT <key>",
            "    Return the hash slot for <key>.",
            "LINKS",
            "    Return information about all network links between this node and its peers.",
            "    Output format is an array where each array element is a map containing attributes of a link",
            "MEET <ip> <port> [<bus-port>]",
            "    Connect nodes into a working cluster.",
            "MYID",
            "    Return the node id.",
            "MYSHARDID",
            "    Return the node's shard id.",
            "NODES",
            "    Return cluster configuration seen by node. Output format:",
            "    <id> <ip:port@bus-port[,hostname]> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
            "REPLICATE <node-id>",
            "    Configure current node as replica to <node-id>.",
            "RESET [HARD|SOFT]",
            "    Reset current node (default: soft).",
            "SET-CONFIG-EPOCH <epoch>",
            "    Set config epoch of current node.",
            "SAVECONFIG",
            "    Force saving cluster configuration on disk.",
            "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)",
            "    Set slot state.",
            "REPLICAS <node-id>",
            "    Return <node-id> replicas.",
            "SLOTS",
            "    Return information about slots range mappings. Each range is made of:",
            "    start, end, master and replicas IP addresses, ports and ids",
            "SHARDS",
            "    Return information about slot range mappings and the nodes associated with them.",
        ],
    );
    Ok(Flow::Continue)
}

/// How close to its expiry a certificate is flagged by CLUSTER CERTS: the week in which the
/// TLS crate starts warning daily.
const EXPIRES_SOON_SECS: i64 = 7 * 86_400;

/// CLUSTER CERTS (hotkv): every node this one knows, with the certificate and CA it last said
/// it serves, so that a half-done renewal or CA rotation shows from any one node. One map per
/// node (a flat array in RESP2), this node first.
fn certs(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    let st = node(srv)?.state();
    let now = unix_ms() / 1000;
    let rows = st.certs();
    out.array(rows.len());
    for (n, c) in rows {
        let hex = |fp: &[u8; 32], known: bool| if known { hotkv_tls::fingerprint_text(fp) } else { String::new() };
        let link = if n.link_connected || n.flags.has(NodeFlags::MYSELF) { "connected" } else { "disconnected" };
        let soon = match (c.is_known(), c.expires_within(now, EXPIRES_SOON_SECS)) {
            (false, _) => "unknown",
            (true, true) => "yes",
            (true, false) => "no",
        };
        out.map(11);
        out.bulk(b"id");
        out.bulk(n.id.as_str().as_bytes());
        out.bulk(b"addr");
        out.bulk(format!("{}:{}@{}", n.client_ip(sess.ipv6()), n.client_port(sess.tls), n.bus_port).as_bytes());
        out.bulk(b"flags");
        out.bulk(n.flags.text().as_bytes());
        out.bulk(b"link");
        out.bulk(link.as_bytes());
        out.bulk(b"serial");
        out.bulk(c.serial.as_bytes());
        out.bulk(b"fingerprint");
        out.bulk(hex(&c.fingerprint, c.is_known()).as_bytes());
        out.bulk(b"not-after");
        out.int(c.not_after);
        out.bulk(b"ca-serial");
        out.bulk(c.ca_serial.as_bytes());
        out.bulk(b"ca-fingerprint");
        out.bulk(hex(&c.ca_fingerprint, c.ca_not_after != 0).as_bytes());
        out.bulk(b"ca-not-after");
        out.int(c.ca_not_after);
        out.bulk(b"expires-soon");
        out.bulk(soon.as_bytes());
    }
    Ok(Flow::Continue)
}

fn info(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    let node = node(srv)?;
    let text = node.state().info_text_serving(node.router.is_ok());
    out.verbatim(text.as_bytes());
    Ok(Flow::Continue)
}

fn keyslot(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    node(srv)?;
    out.int(i64::from(key_slot(args.get(2))));
    Ok(Flow::Continue)
}

/// CLUSTER LINKS: one map per bus link, as Valkey's (flat arrays in RESP2). Both send-buffer
/// fields are the bytes queued on the link, as Valkey 8.0 reports its message queue for both.
fn links(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    let links = node(srv)?.bus.links();
    out.array(links.len());
    for l in links {
        out.map(6);
        out.bulk(b"direction");
        out.bulk(l.direction().as_bytes());
        out.bulk(b"node");
        out.bulk(l.node.as_str().as_bytes());
        out.bulk(b"create-time");
        out.int(l.created_ms);
        out.bulk(b"events");
        out.bulk(l.events().as_bytes());
        out.bulk(b"send-buffer-allocated");
        out.int(l.send_queued as i64);
        out.bulk(b"send-buffer-used");
        out.int(l.send_queued as i64);
    }
    Ok(Flow::Continue)
}

fn meet(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    if args.len() > 5 {
        return Err(CommandError::WrongArity("cluster|meet".into()));
    }
    let ip = text(args.get(2));
    let port_arg = text(args.get(3));
    let port: u16 = port_arg
        .parse::<i64>()
        .ok()
        .and_then(|p| u16::try_from(p).ok())
        .ok_or_else(|| CommandError::err(format!("Invalid base port specified: {port_arg}")))?;
    let bus = match args.opt(4) {
        Some(b) => {
            let t = text(b);
            t.parse::<i64>()
                .ok()
                .and_then(|p| u16::try_from(p).ok())
                .ok_or_else(|| CommandError::err(format!("Invalid bus port specified: {t}")))?
        }
        None => port.wrapping_add(10000),
    };
    change(srv, out, |st| st.meet(&ip, port, bus, unix_ms()))
}

fn myid(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    let id = node(srv)?.state().myself_id();
    out.bulk(id.as_str().as_bytes());
    Ok(Flow::Continue)
}

fn myshardid(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    let st = node(srv)?.state();
    out.bulk(st.myself().shard_id.as_str().as_bytes());
    Ok(Flow::Continue)
}

fn nodes(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    let text = node(srv)?.state().nodes_text(client(sess));
    out.verbatim(text.as_bytes());
    Ok(Flow::Continue)
}

fn replicas(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    let st = node(srv)?.state();
    let id = node_arg(args.get(2))?;
    let Some(primary) = st.node(&id) else { return Err(CommandError::err(format!("Unknown node {id}"))) };
    if !primary.is_primary() {
        return Err(CommandError::err("The specified node is not a master"));
    }
    let lines: Vec<String> = st
        .replicas_of(&id)
        .into_iter()
        .map(|r| {
            let mut s = String::new();
            r.describe(&mut s, client(sess), "");
            s
        })
        .collect();
    out.array(lines.len());
    for l in lines {
        out.bulk(l.as_bytes());
    }
    Ok(Flow::Continue)
}

fn replicate(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    let id = node_arg(args.get(2))?;
    let n = node(srv)?;
    if n.state().myself().is_primary() && !srv.ks.db(0).is_empty() {
        return Err(CommandError::err("To set a master the node must be empty and without assigned slots."));
    }
    change(srv, out, |st| st.replicate(&id))
}

fn reset(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Res {
    let hard = match args.opt(2) {
        None => false,
        Some(m) if args.len() == 3 && m.eq_ignore_ascii_case(b"hard") => true,
        Some(m) if args.len() == 3 && m.eq_ignore_ascii_case(b"soft") => false,
        Some(_) => return Err(CommandError::Syntax),
    };
    let n = node(srv)?;
    if n.state().myself().is_primary() && !srv.ks.db(0).is_empty() {
        return Err(CommandError::err("CLUSTER RESET can't be called with master nodes containing keys"));
    }
    // A replica becomes an empty primary: its primary's data goes with the role, as Valkey's
    // clusterReset empties it (neither replicated nor written to the AOF: emptyData).
    if !n.state().myself().is_primary() {
        crate::persistence::flush_all(srv);
    }
    change(srv, out, |st| {
        st.reset(hard);
        Ok(())
    })
}

fn saveconfig(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    node(srv)?.bus.save_now().map_err(|e| CommandError::err(format!("error saving the cluster node config: {e}")))?;
    done(out)
}

/// What clients are told to reach `n` at: `cluster-preferred-endpoint-type`, and for IP
/// endpoints the address announced to the client's family.
fn endpoint<'a>(st: &hotkv_cluster::state::ClusterState, n: &'a Node, sess: &Session) -> &'a str {
    st.settings().preferred_endpoint.of(n, sess.ipv6())
}

/// The kind of client `sess` is, for node descriptions: its port kind and address family.
fn client(sess: &Session) -> ClientKind {
    ClientKind { tls: sess.tls, ipv6: sess.ipv6() }
}

fn slots(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    let st = node(srv)?.state();
    let mut entries: Vec<(u16, u16, &Node)> = Vec::new();
    for n in st.nodes().into_iter().filter(|n| n.is_primary()) {
        for (a, b) in n.slots.ranges() {
            entries.push((a, b, n));
        }
    }
    entries.sort_by_key(|e| e.0);
    out.array(entries.len());
    for (a, b, primary) in entries {
        let reps = st.replicas_of(&primary.id);
        // Valkey's isReplicaAvailable: a failed replica, or one loading a full sync, would
        // only answer -LOADING or nothing.
        let reps: Vec<&Node> =
            reps.into_iter().filter(|r| !r.flags.has(NodeFlags::FAIL) && !node_loading(srv, &st, r)).collect();
        out.array(2 + 1 + reps.len());
        out.int(i64::from(a));
        out.int(i64::from(b));
        for n in std::iter::once(primary).chain(reps) {
            out.array(4);
            let kind = st.settings().preferred_endpoint;
            match kind {
                Endpoint::Unknown => out.null(),
                _ => out.bulk(endpoint(&st, n, sess).as_bytes()),
            }
            out.int(i64::from(n.client_port(sess.tls)));
            out.bulk(n.id.as_str().as_bytes());
            // The networking known besides the preferred endpoint, as Valkey's
            // addNodeToNodeReply: the address first, then the host name.
            let ip = kind != Endpoint::Ip && !n.client_ip(sess.ipv6()).is_empty();
            let hostname = kind != Endpoint::Hostname && !n.hostname.is_empty();
            out.map(usize::from(ip) + usize::from(hostname));
            if ip {
                out.bulk(b"ip");
                out.bulk(n.client_ip(sess.ipv6()).as_bytes());
            }
            if hostname {
                out.bulk(b"hostname");
                out.bulk(n.hostname.as_bytes());
            }
        }
    }
    Ok(Flow::Continue)
}

/// Whether a node is a replica loading its primary's full sync: ours as we know it,
/// another's as its last frame said.
fn node_loading(srv: &Server, st: &ClusterState, n: &Node) -> bool {
    if n.id == st.myself().id { srv.repl.is_replica() && srv.repl.loading() } else { n.loading }
}

/// A node's replication offset: ours as we announce it, another's as it last told us.
fn node_offset(srv: &Server, st: &ClusterState, n: &Node) -> u64 {
    if n.id == st.myself().id { crate::cluster::my_offset(srv) } else { n.repl_offset }
}

fn shards(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    let st = node(srv)?.state();
    let primaries: Vec<&Node> = st.nodes().into_iter().filter(|n| n.is_primary()).collect();
    out.array(primaries.len());
    for p in primaries {
        out.map(2);
        out.bulk(b"slots");
        let ranges = p.slots.ranges();
        out.array(ranges.len() * 2);
        for (a, b) in ranges {
            out.int(i64::from(a));
            out.int(i64::from(b));
        }
        out.bulk(b"nodes");
        let members: Vec<&Node> = std::iter::once(p).chain(st.replicas_of(&p.id)).collect();
        out.array(members.len());
        for n in members {
            let fields =
                6 + usize::from(n.port != 0) + usize::from(n.tls_port != 0) + usize::from(!n.hostname.is_empty());
            out.map(fields);
            out.bulk(b"id");
            out.bulk(n.id.as_str().as_bytes());
            if n.port != 0 {
                out.bulk(b"port");
                out.int(i64::from(n.port));
            }
            if n.tls_port != 0 {
                out.bulk(b"tls-port");
                out.int(i64::from(n.tls_port));
            }
            out.bulk(b"ip");
            out.bulk(n.client_ip(sess.ipv6()).as_bytes());
            out.bulk(b"endpoint");
            out.bulk(endpoint(&st, n, sess).as_bytes());
            if !n.hostname.is_empty() {
                out.bulk(b"hostname");
                out.bulk(n.hostname.as_bytes());
            }
            out.bulk(b"role");
            out.bulk(if n.is_primary() { b"master" } else { b"replica" });
            let offset = node_offset(srv, &st, n);
            out.bulk(b"replication-offset");
            out.int(offset as i64);
            out.bulk(b"health");
            // Only an agreed FAIL is "fail": a node merely suspected here (PFAIL) is still
            // "online", as Valkey's nodeFailed; a replica at offset 0 is still loading.
            out.bulk(if n.flags.has(NodeFlags::FAIL) {
                b"fail".as_slice()
            } else if !n.is_primary() && node_loading(srv, &st, n) {
                b"loading"
            } else {
                b"online"
            });
        }
    }
    Ok(Flow::Continue)
}

fn asking(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    node(srv)?;
    sess.asking = true;
    done(out)
}

fn readonly(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    node(srv)?;
    sess.readonly = true;
    done(out)
}

fn readwrite(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Res {
    node(srv)?;
    sess.readonly = false;
    done(out)
}
