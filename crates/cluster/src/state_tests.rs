//! The cluster rules on a simulated network: nodes exchange frames through in-memory links
//! (each frame encoded and decoded, as on the wire), time advances 100 ms per step, and a
//! node can be cut off to test failure detection.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

use super::*;
use crate::wire::{decode, encode};

#[path = "failover_tests.rs"]
mod failover;

const TIMEOUT: i64 = 2000;

struct Net {
    nodes: Vec<ClusterState>,
    /// Outbound links that are up: (from index, to node id).
    links: Vec<(usize, NodeId)>,
    down: Vec<bool>,
    now: i64,
    /// Each node's replication, as the server would report it (nodes added by
    /// [`Net::add_node`]; others have none).
    repl: Vec<Arc<FakeRepl>>,
}

/// A node's replication for the simulated network: an offset and a data age the test sets,
/// and the write pause the cluster asks for.
#[derive(Default)]
struct FakeRepl {
    offset: AtomicU64,
    data_age_ms: AtomicI64,
    /// Until when writes are paused (0: not paused).
    paused_until: AtomicI64,
    /// Whether the cluster made the node drop its history (it joined another shard).
    forgot: AtomicBool,
}

impl ReplicationHooks for FakeRepl {
    fn offset(&self) -> u64 {
        self.offset.load(Ordering::Relaxed)
    }

    fn data_age_ms(&self) -> i64 {
        self.data_age_ms.load(Ordering::Relaxed)
    }

    fn pause_writes(&self, until_ms: i64) {
        self.paused_until.store(until_ms, Ordering::Relaxed);
    }

    fn unpause_writes(&self) {
        self.paused_until.store(0, Ordering::Relaxed);
    }

    fn forget_history(&self) {
        // As the server does: nothing processed of the new primary's stream yet.
        self.forgot.store(true, Ordering::Relaxed);
        self.offset.store(0, Ordering::Relaxed);
    }
}

fn settings(i: usize) -> Settings {
    Settings {
        node_timeout_ms: TIMEOUT,
        require_full_coverage: true,
        allow_reads_when_down: false,
        allow_pubsubshard_when_down: true,
        announce_ip: "127.0.0.1".into(),
        port: 7000 + i as u16,
        tls_port: 0,
        bus_port: 17000 + i as u16,
        hostname: String::new(),
        human_nodename: String::new(),
        client_ipv4: String::new(),
        client_ipv6: String::new(),
        preferred_endpoint: Default::default(),
        replica_validity_factor: 10,
        repl_ping_period_ms: 10_000,
        replica_no_failover: false,
        allow_replica_migration: true,
        migration_barrier: 1,
        ping_interval_ms: 0,
    }
}

/// A frame through the codec, as the bus would carry it.
fn wire(msg: Message) -> Message {
    let mut buf = Vec::new();
    encode(&msg, &mut buf);
    decode(&buf).unwrap().unwrap().0
}

impl Net {
    fn new(n: usize) -> Net {
        let mut net = Net { nodes: vec![], links: vec![], down: vec![], now: 1_000_000, repl: vec![] };
        for _ in 0..n {
            net.add_node();
        }
        net
    }

    /// A fresh node at the next index, with its replication hooks.
    fn add_node(&mut self) -> usize {
        let i = self.nodes.len();
        let repl = Arc::new(FakeRepl::default());
        let mut st = ClusterState::fresh(settings(i));
        st.set_replication(repl.clone());
        self.nodes.push(st);
        self.down.push(false);
        self.repl.push(repl);
        i
    }

    /// Sends what every node queued (votes, vote requests, announcements, MFSTART) and makes
    /// the pause changes asked for, until nothing is left.
    fn flush(&mut self) {
        for _ in 0..100 {
            let mut sent = false;
            let now = self.now;
            for i in 0..self.nodes.len() {
                if let Some(change) = self.nodes[i].take_pause_change() {
                    let hooks = self.nodes[i].replication();
                    match change {
                        PauseChange::Pause { until_ms } => {
                            hooks.pause_writes(until_ms);
                            self.nodes[i].pause_applied();
                        }
                        PauseChange::Unpause => hooks.unpause_writes(),
                    }
                }
                let out = self.nodes[i].take_outgoing(now);
                if self.down[i] {
                    continue;
                }
                for (target, msg) in out {
                    sent = true;
                    let targets: Vec<NodeId> = self
                        .links
                        .iter()
                        .filter(|l| l.0 == i && (target == Target::All || target == Target::Node(l.1)))
                        .map(|l| l.1)
                        .collect();
                    for t in targets {
                        self.exchange(i, t, msg.clone());
                    }
                }
            }
            if !sent {
                return;
            }
        }
    }

    fn index_of_port(&self, bus_port: u16) -> Option<usize> {
        self.nodes.iter().position(|s| s.myself().bus_port == bus_port)
    }

    fn id(&self, i: usize) -> NodeId {
        self.nodes[i].myself_id()
    }

    /// Delivers `msg` from `from` to `to` on `from`'s outbound link opened for `link_id`, and
    /// the reply back; broadcasts go to every node `to` links to.
    fn exchange(&mut self, from: usize, link_id: NodeId, msg: Message) {
        let Some(to) = self.nodes[from].node(&link_id).and_then(|n| self.index_of_port(n.bus_port)) else { return };
        if self.down[to] || self.down[from] {
            return;
        }
        let now = self.now;
        let out = self.nodes[to].receive(wire(msg), None, "127.0.0.1", Some("127.0.0.1"), now);
        self.broadcast(to, out.broadcast);
        for reply in out.reply {
            let back = self.nodes[from].receive(wire(reply), Some(link_id), "127.0.0.1", None, now);
            if let Some((old, new)) = back.renamed {
                for l in &mut self.links {
                    if *l == (from, old) {
                        l.1 = new;
                    }
                }
            }
            if back.close {
                self.links.retain(|l| *l != (from, link_id));
                self.nodes[from].link_down(&link_id, 1);
            }
            self.broadcast(from, back.broadcast);
        }
    }

    fn broadcast(&mut self, from: usize, msgs: Vec<Message>) {
        for msg in msgs {
            let targets: Vec<NodeId> = self.links.iter().filter(|l| l.0 == from).map(|l| l.1).collect();
            for t in targets {
                self.exchange(from, t, msg.clone());
            }
        }
    }

    fn step(&mut self) {
        self.now += 100;
        let now = self.now;
        for i in 0..self.nodes.len() {
            if self.down[i] {
                continue;
            }
            for (id, _, port) in self.nodes[i].link_targets() {
                let up = self.links.contains(&(i, id));
                let reachable = self.index_of_port(port).is_some_and(|j| !self.down[j]);
                if !up && reachable {
                    self.links.push((i, id));
                    if let Some(first) = self.nodes[i].link_up(&id, 1, now) {
                        self.exchange(i, id, first);
                    }
                } else if up && !reachable {
                    self.links.retain(|l| *l != (i, id));
                    self.nodes[i].link_down(&id, 1);
                }
            }
            for (id, ping) in self.nodes[i].tick(now) {
                self.exchange(i, id, ping);
            }
        }
        self.flush();
    }

    fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            self.step();
        }
    }

    fn run_until(&mut self, max_steps: usize, mut cond: impl FnMut(&Net) -> bool) -> bool {
        for _ in 0..max_steps {
            if cond(self) {
                return true;
            }
            self.step();
        }
        cond(self)
    }

    /// Three primaries with the slots split as redis-cli splits them, met through node 0.
    fn three_primaries() -> Net {
        let mut net = Net::new(3);
        let ranges = [(0u16, 5460u16), (5461, 10922), (10923, 16383)];
        for (i, (a, b)) in ranges.into_iter().enumerate() {
            net.nodes[i].set_config_epoch(i as u64 + 1).unwrap();
            net.nodes[i].add_slots(&(a..=b).collect::<Vec<_>>()).unwrap();
        }
        let now = net.now;
        for i in 1..3 {
            net.nodes[i].meet("127.0.0.1", 7000, 17000, now).unwrap();
        }
        assert!(net.run_until(100, |n| n.nodes.iter().all(|s| s.is_ok() && s.nodes().len() == 3)), "no join");
        net
    }
}

impl Net {
    /// [`Net::three_primaries`] plus a replica of each (nodes 3, 4, 5 replicate 0, 1, 2) and a
    /// second replica of node 0 (node 6), every role known everywhere. Each new node meets
    /// every other one, so that the test does not wait on which nodes gossip names.
    fn three_shards_and_a_sibling() -> Net {
        let mut net = Net::three_primaries();
        for (i, primary) in [(3, 0), (4, 1), (5, 2), (6, 0)] {
            assert_eq!(net.add_node(), i);
            let now = net.now;
            for j in 0..i as u16 {
                net.nodes[i].meet("127.0.0.1", 7000 + j, 17000 + j, now).unwrap();
            }
            let joined =
                |n: &Net| n.nodes[i].nodes().len() == i + 1 && (0..i).all(|j| n.nodes[i].node(&n.id(j)).is_some());
            assert!(net.run_until(100, joined), "node {i} did not join");
            let id = net.id(primary);
            net.nodes[i].replicate(&id).unwrap();
        }
        let roles_known = |n: &Net| {
            n.nodes.iter().all(|s| {
                s.nodes().len() == 7
                    && [(3, 0), (4, 1), (5, 2), (6, 0)]
                        .iter()
                        .all(|&(r, p)| s.node(&n.id(r)).is_some_and(|x| x.primary == Some(n.id(p))))
            })
        };
        assert!(net.run_until(200, roles_known), "{}", net.nodes[1].nodes_text(ClientKind::default()));
        net
    }

    /// What node `i` would send for a PUBLISH of `kind`: the sorted targets, if any.
    fn publish_targets(&mut self, i: usize, kind: Kind) -> Option<Vec<NodeId>> {
        let mut targets = Vec::new();
        let header = self.nodes[i].publish_header(kind, &mut targets)?;
        assert_eq!(header.sender, self.id(i));
        targets.sort();
        Some(targets)
    }

    fn sorted_ids(&self, of: &[usize]) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = of.iter().map(|&i| self.id(i)).collect();
        v.sort();
        v
    }
}

/// redis-cli's consistency signature of one node's CLUSTER NODES (contract §3).
fn signature(text: &str) -> String {
    let mut lines: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let mut slots: Vec<&str> = f.get(8..)?.iter().copied().filter(|t| !t.starts_with('[')).collect();
            if slots.is_empty() {
                return None;
            }
            slots.sort();
            Some(format!("{}:{}", f[0], slots.join(",")))
        })
        .collect();
    lines.sort();
    lines.join("|")
}

#[test]
fn cluster_ping_interval_sets_how_long_a_node_goes_unpinged() {
    let pings_in_two_seconds = |interval: i64| {
        let mut net = Net::three_primaries();
        let cfg = Settings { ping_interval_ms: interval, ..settings(0) };
        net.nodes[0].set_settings(cfg);
        let sent = |net: &Net| {
            let info = net.nodes[0].info_text();
            let line = info.lines().find(|l| l.starts_with("cluster_stats_messages_ping_sent:")).unwrap();
            line.split(':').nth(1).unwrap().trim().parse::<u64>().unwrap()
        };
        let before = sent(&net);
        net.run(20);
        sent(&net) - before
    };
    // By default a node is pinged once it went half the node timeout (1 s here) unheard, and
    // one node a second besides; at 200 ms each of the two is pinged every few ticks.
    let (default, fast) = (pings_in_two_seconds(0), pings_in_two_seconds(200));
    assert!(default <= 8, "{default}");
    assert!(fast >= 10, "{fast}");
}

#[test]
fn meeting_one_node_joins_everyone_and_every_view_agrees() {
    let net = Net::three_primaries();
    let sigs: Vec<String> = net.nodes.iter().map(|s| signature(&s.nodes_text(ClientKind::default()))).collect();
    assert!(!sigs[0].is_empty());
    assert!(sigs.iter().all(|s| *s == sigs[0]), "{sigs:#?}");
    for s in &net.nodes {
        let info = s.info_text();
        assert!(
            info.starts_with("cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:16384\r\n"),
            "{info}"
        );
        assert!(info.contains("cluster_known_nodes:3\r\ncluster_size:3\r\ncluster_current_epoch:3\r\n"), "{info}");
        assert_eq!(s.owner(5461).map(|n| n.id), Some(net.id(1)));
        assert!(
            s.nodes_text(ClientKind::default()).lines().all(|l| l.contains(" connected")),
            "{}",
            s.nodes_text(ClientKind::default())
        );
    }
    let line = net.nodes[1].nodes_text(ClientKind::default());
    let me = line.lines().find(|l| l.contains("myself")).unwrap();
    assert_eq!(me, format!("{} 127.0.0.1:7001@17001 myself,master - 0 0 2 connected 5461-10922", net.id(1)));
}

#[test]
fn a_silent_primary_is_suspected_then_failed_by_a_majority() {
    let mut net = Net::three_primaries();
    net.run(20);
    net.down[2] = true;
    let failed = net.id(2);
    let seen_failed =
        |n: &Net| n.nodes[..2].iter().all(|s| s.node(&failed).is_some_and(|x| x.flags.has(NodeFlags::FAIL)));
    // PFAIL after the timeout, FAIL once the other primary's report arrives by gossip.
    assert!(
        net.run_until(((TIMEOUT * 3) / 100) as usize, seen_failed),
        "{}",
        net.nodes[0].nodes_text(ClientKind::default())
    );
    assert!(!net.nodes[0].is_ok(), "a failed primary's slots are not served");
    assert!(net.nodes[0].nodes_text(ClientKind::default()).contains("master,fail"));
    // It comes back: once reachable it is cleared (after twice the timeout, holding slots).
    net.down[2] = false;
    assert!(net.run_until(((TIMEOUT * 4) / 100) as usize, |n| n.nodes.iter().all(|s| s.is_ok())));
}

#[test]
fn a_primary_cut_off_in_a_minority_stops_serving_even_without_full_coverage() {
    let mut net = Net::three_primaries();
    for s in &mut net.nodes {
        s.set_settings(Settings { require_full_coverage: false, ..s.settings().clone() });
    }
    net.run(20);
    assert!(net.nodes[2].is_ok());
    // Cut off, it keeps ticking alone: its pings go unanswered and it suspects both others.
    net.down[2] = true;
    let alone_down = (0..TIMEOUT * 3 / 100).any(|_| {
        net.step();
        let now = net.now;
        net.nodes[2].tick(now);
        !net.nodes[2].is_ok()
    });
    assert!(alone_down, "{}", net.nodes[2].nodes_text(ClientKind::default()));
    // The majority, not requiring full coverage, serves on.
    assert!(net.nodes[0].is_ok() && net.nodes[1].is_ok());
}

#[test]
fn a_replica_is_known_as_one_everywhere() {
    let mut net = Net::three_primaries();
    net.nodes.push(ClusterState::fresh(settings(3)));
    net.down.push(false);
    let now = net.now;
    net.nodes[3].meet("127.0.0.1", 7000, 17000, now).unwrap();
    assert!(net.run_until(100, |n| n.nodes.iter().all(|s| s.nodes().len() == 4)));
    let primary = net.id(0);
    net.nodes[3].replicate(&primary).unwrap();
    let replica = net.id(3);
    assert!(
        net.run_until(100, |n| n.nodes.iter().all(|s| s.node(&replica).is_some_and(|r| r.primary == Some(primary))))
    );
    let text = net.nodes[1].nodes_text(ClientKind::default());
    let line = text.lines().find(|l| l.starts_with(replica.as_str())).unwrap();
    assert!(line.contains(&format!(" slave {primary} ")), "{line}");
    assert_eq!(
        net.nodes[3].info_text().lines().find(|l| l.starts_with("cluster_my_epoch")),
        Some("cluster_my_epoch:1")
    );
}

#[test]
fn equal_config_epochs_are_resolved_by_the_smaller_id() {
    let mut net = Net::new(2);
    net.nodes[0].add_slots(&[0]).unwrap();
    net.nodes[1].add_slots(&[1]).unwrap();
    let now = net.now;
    net.nodes[1].meet("127.0.0.1", 7000, 17000, now).unwrap();
    assert!(net.run_until(100, |n| {
        let e: Vec<u64> = n.nodes.iter().map(|s| s.myself().config_epoch).collect();
        e[0] != e[1]
    }));
}

#[test]
fn slot_commands_follow_valkey() {
    let mut s = ClusterState::fresh(settings(0));
    assert_eq!(s.add_slots(&[1, 2]), Ok(()));
    assert_eq!(s.add_slots(&[2]), Err("Slot 2 is already busy".into()));
    assert_eq!(s.add_slots(&[3, 3]), Err("Slot 3 specified multiple times".into()));
    assert_eq!(s.del_slots(&[5]), Err("Slot 5 is already unassigned".into()));
    assert_eq!(s.del_slots(&[1]), Ok(()));
    assert_eq!(s.myself().slots.to_string(), "2");
    assert_eq!(s.bump_epoch(), (true, 1));
    assert_eq!(s.bump_epoch(), (false, 1));
    assert_eq!(s.set_config_epoch(5), Err("Node config epoch is already non-zero".into()));
    let me = s.myself_id();
    assert_eq!(s.forget(&me, 0), Err("I tried hard but I can't forget myself...".into()));
    s.reset(true);
    assert_ne!(s.myself_id(), me);
    assert!(s.myself().slots.is_empty() && s.current_epoch() == 0);
}

#[test]
fn setslot_checks_follow_valkey() {
    let mut net = Net::three_primaries();
    let (a, b) = (net.id(0), net.id(1));
    let s = &mut net.nodes[0];
    let unknown = NodeId::random();
    assert_eq!(s.set_slot(6000, SetSlot::Migrating(b), 0), Err("I'm not the owner of hash slot 6000".into()));
    assert_eq!(s.set_slot(1, SetSlot::Migrating(unknown), 0), Err(format!("I don't know about node {unknown}")));
    assert_eq!(s.set_slot(1, SetSlot::Importing(b), 0), Err("I'm already the owner of hash slot 1".into()));
    assert_eq!(s.set_slot(6000, SetSlot::Importing(unknown), 0), Err(format!("I don't know about node {unknown}")));
    assert_eq!(s.set_slot(1, SetSlot::Node(unknown), 0), Err(format!("Unknown node {unknown}")));
    assert_eq!(
        s.set_slot(1, SetSlot::Node(b), 3),
        Err("Can't assign hashslot 1 to a different node while I still hold keys for this hash slot.".into())
    );
    assert_eq!(s.set_slot(1, SetSlot::Migrating(b), 3), Ok(()));
    assert_eq!(s.set_slot(6000, SetSlot::Importing(b), 0), Ok(()));
    assert!(s.nodes_text(ClientKind::default()).contains(&format!("[1->-{b}] [6000-<-{b}]")));
    // Open slots survive a restart.
    let saved = s.saved();
    let back = ClusterState::from_saved(saved, settings(0));
    assert_eq!((back.migrating().get(&1), back.importing().get(&6000)), (Some(&b), Some(&b)));
    let s = &mut net.nodes[0];
    assert_eq!(s.set_slot(1, SetSlot::Stable, 3), Ok(()));
    assert_eq!(s.set_slot(6000, SetSlot::Stable, 0), Ok(()));
    assert!(s.migrating().is_empty() && s.importing().is_empty());
    assert_eq!(s.myself_id(), a);
}

#[test]
fn a_slot_moved_by_setslot_reaches_every_node_and_leaves_no_open_state() {
    let mut net = Net::three_primaries();
    let (src, dst) = (net.id(0), net.id(1));
    // redis-cli's order: the target imports, the source migrates, the keys move, then the
    // target, the source and the others are told the new owner.
    net.nodes[1].set_slot(100, SetSlot::Importing(src), 0).unwrap();
    net.nodes[0].set_slot(100, SetSlot::Migrating(dst), 0).unwrap();
    let before = net.nodes[1].myself().config_epoch;
    net.nodes[1].set_slot(100, SetSlot::Node(dst), 0).unwrap();
    assert!(net.nodes[1].myself().config_epoch > before, "importing a slot takes a new epoch");
    let now = net.now;
    for (id, msg) in net.nodes[1].take_announcements(now) {
        net.exchange(1, id, msg);
    }
    assert!(net.nodes[1].take_announcements(now).is_empty());
    // The announcement alone moves the slot everywhere and closes the source's migration.
    assert_eq!(net.now, now);
    for i in 0..3 {
        assert_eq!(net.nodes[i].owner(100).map(|n| n.id), Some(dst), "node {i}");
    }
    assert!(net.nodes[0].migrating().is_empty() && net.nodes[1].importing().is_empty());
    net.nodes[0].set_slot(100, SetSlot::Node(dst), 0).unwrap();
    net.run(20);
    for i in 0..3 {
        assert_eq!(net.nodes[i].owner(100).map(|n| n.id), Some(dst), "node {i}");
        assert!(net.nodes[i].is_ok());
    }
}

#[test]
fn a_stale_slot_claim_is_answered_with_an_update_that_corrects_it() {
    let mut net = Net::three_primaries();
    // Node 2 hands its slot 16383 to node 1 behind node 0's back: node 1 takes it with a
    // newer epoch, node 0 hears of it first from node 1.
    let (id1, id2) = (net.id(1), net.id(2));
    let stale = {
        let n2 = &mut net.nodes[2];
        n2.message(Kind::Ping, Body::Gossip { entries: Default::default(), ext: Default::default() })
    };
    net.nodes[1].bump_epoch();
    let epoch1 = net.nodes[1].myself().config_epoch;
    let now = net.now;
    // Node 0 learns that node 1 serves 16383 with the newer epoch...
    let mut claim =
        net.nodes[1].message(Kind::Ping, Body::Gossip { entries: Default::default(), ext: Default::default() });
    claim.header.slots.insert(16383);
    net.nodes[0].receive(wire(claim), None, "127.0.0.1", None, now);
    assert_eq!(net.nodes[0].owner(16383).map(|n| n.id), Some(id1));
    // ...then node 2's stale claim arrives: node 0 answers with an UPDATE about node 1.
    let out = net.nodes[0].receive(wire(stale), None, "127.0.0.1", None, now);
    let update = out.reply.iter().find(|m| m.kind == Kind::Update).expect("an UPDATE");
    let Body::Update { id, config_epoch, slots } = &update.body else { panic!("{update:?}") };
    assert_eq!((*id, *config_epoch), (id1, epoch1));
    assert!(slots.contains(16383));
    // Node 2 takes it: slot 16383 is node 1's now, everywhere.
    net.nodes[2].receive(wire(update.clone()), None, "127.0.0.1", None, now);
    assert_eq!(net.nodes[2].owner(16383).map(|n| n.id), Some(id1));
    assert!(!net.nodes[2].myself().slots.contains(16383));
    assert_eq!(net.nodes[0].owner(16382).map(|n| n.id), Some(id2));
    // Node 2 still serves its other slots: the keys it holds in 16383 are to go (Valkey's
    // dirty slots). Nobody else lost a slot of its own.
    assert_eq!(net.nodes[2].take_dirty_slots(), vec![16383]);
    assert!(net.nodes[2].take_dirty_slots().is_empty(), "taken once");
    assert!(net.nodes[0].take_dirty_slots().is_empty() && net.nodes[1].take_dirty_slots().is_empty());
}

#[test]
fn every_node_learns_which_certificate_each_serves_and_a_renewal_reaches_them() {
    let mut net = Net::three_primaries();
    let cert = |serial: &str| CertSummary {
        serial: serial.into(),
        fingerprint: [serial.len() as u8; 32],
        not_after: 2_000_000_000,
        ca_serial: "CA1".into(),
        ca_fingerprint: [1; 32],
        ca_not_after: 2_100_000_000,
    };
    for (i, serial) in ["A1", "B1", "C1"].into_iter().enumerate() {
        net.nodes[i].set_cert(cert(serial));
    }
    let agree = |n: &Net, serials: [&str; 3]| {
        n.nodes.iter().all(|s| (0..3).all(|i| s.cert_of(&n.id(i)).is_some_and(|c| c.serial == serials[i])))
    };
    assert!(net.run_until(30, |n| agree(n, ["A1", "B1", "C1"])));
    let listed: Vec<String> = net.nodes[2].certs().iter().map(|(n, c)| format!("{}={}", n.port, c.serial)).collect();
    assert_eq!(listed[0], "7002=C1", "this node first");
    assert_eq!(listed.len(), 3);
    // A reload on one node: the others hear of it with its next ping or pong.
    net.nodes[1].set_cert(cert("B22"));
    assert!(net.run_until(30, |n| agree(n, ["A1", "B22", "C1"])));
}

#[test]
fn pings_and_pongs_leave_the_routing_view_alone_and_changes_do_not() {
    let mut net = Net::three_primaries();
    net.run(20);
    // What the bus does after every frame and tick: ask, then save.
    let drain = |net: &mut Net| -> Vec<bool> {
        net.nodes
            .iter_mut()
            .map(|s| {
                let changed = s.take_view_changed();
                s.take_dirty();
                changed
            })
            .collect()
    };
    drain(&mut net);
    for _ in 0..30 {
        net.step();
        assert_eq!(drain(&mut net), [false; 3], "a steady cluster rebuilds nothing");
    }
    net.nodes[0].del_slots(&[1]).unwrap();
    // The bus saves a moment after a change: until then the change stays unsaved, but the
    // routing view is rebuilt once, not on every turn in between.
    assert!(net.nodes[0].take_view_changed(), "a slot given up");
    assert!(!net.nodes[0].take_view_changed(), "seen once");
    assert!(net.nodes[0].is_dirty(), "still to be saved");
    // The save waits a moment, counted from when the bus first saw the change.
    assert_eq!(net.nodes[0].unsaved_for(1000), Some((0, true)));
    assert_eq!(net.nodes[0].unsaved_for(1030), Some((30, false)));
    assert_eq!(net.nodes[0].unsaved_age(1040), Some(40));
    assert!(net.nodes[0].take_dirty() && !net.nodes[0].is_dirty(), "saved");
    assert_eq!((net.nodes[0].unsaved_for(1050), net.nodes[0].unsaved_age(1050)), (None, None));
    net.nodes[0].del_slots(&[0]).unwrap();
    assert!(drain(&mut net)[0], "a slot given up");
    // DELSLOTS is not propagated (Valkey): the others keep their view, and rebuild nothing.
    for _ in 0..30 {
        net.step();
        assert_eq!(drain(&mut net)[1..], [false; 2]);
    }
    // A slot claimed with a newer epoch moves everywhere: every view changes once.
    net.nodes[1].bump_epoch();
    let now = net.now;
    let mut claim =
        net.nodes[1].message(Kind::Ping, Body::Gossip { entries: Default::default(), ext: Default::default() });
    claim.header.slots.insert(0);
    net.nodes[2].receive(wire(claim), None, "127.0.0.1", None, now);
    assert!(drain(&mut net)[2], "a slot taken");
    net.run(30);
    drain(&mut net);
    net.step();
    assert_eq!(drain(&mut net), [false; 3]);
}

#[test]
fn spublish_goes_to_the_shard_and_publish_to_everyone() {
    let mut net = Net::three_shards_and_a_sibling();
    // A primary's shard is its replicas; a replica's, its primary and sibling replicas.
    assert_eq!(net.publish_targets(0, Kind::PublishShard), Some(net.sorted_ids(&[3, 6])));
    assert_eq!(net.publish_targets(3, Kind::PublishShard), Some(net.sorted_ids(&[0, 6])));
    assert_eq!(net.publish_targets(1, Kind::PublishShard), Some(net.sorted_ids(&[4])));
    assert_eq!(net.publish_targets(5, Kind::PublishShard), Some(net.sorted_ids(&[2])));
    assert_eq!(net.publish_targets(4, Kind::Publish), Some(net.sorted_ids(&[0, 1, 2, 3, 5, 6])));
    // Counted per node sent to, as Valkey counts per link.
    let info = net.nodes[0].info_text();
    assert!(info.contains("cluster_stats_messages_publishshard_sent:2\r\n"), "{info}");
    // A node still in a handshake does not know us yet: it gets nothing.
    let now = net.now;
    net.nodes[2].meet("127.0.0.1", 7999, 17999, now).unwrap();
    assert_eq!(net.publish_targets(2, Kind::Publish), Some(net.sorted_ids(&[0, 1, 3, 4, 5, 6])));
    // Alone, a node sends nothing and counts nothing.
    let mut alone = ClusterState::fresh(settings(9));
    assert_eq!(alone.publish_header(Kind::Publish, &mut Vec::new()), None);
    assert!(!alone.info_text().contains("publish"));
}

#[test]
fn a_published_message_is_delivered_here_and_not_sent_on() {
    let mut net = Net::three_primaries();
    let now = net.now;
    for (kind, shard) in [(Kind::Publish, false), (Kind::PublishShard, true)] {
        let msg = net.nodes[1].message(kind, Body::Publish { channel: b"news".to_vec(), message: b"hi".to_vec() });
        let out = net.nodes[0].receive(wire(msg), None, "127.0.0.1", None, now);
        let expected = Published { channel: b"news".to_vec(), message: b"hi".to_vec(), shard };
        assert_eq!(out.publish, Some(expected));
        assert!(out.broadcast.is_empty() && out.reply.is_empty() && !out.close && out.renamed.is_none());
    }
    // From a node this one does not know, a message is ignored, as Valkey ignores it.
    let mut stranger = ClusterState::fresh(settings(8));
    let msg = stranger.message(Kind::Publish, Body::Publish { channel: b"news".to_vec(), message: b"hi".to_vec() });
    let out = net.nodes[0].receive(wire(msg), None, "127.0.0.1", None, now);
    assert_eq!(out.publish, None);
    let info = net.nodes[0].info_text();
    assert!(info.contains("cluster_stats_messages_publish_received:2\r\n"), "{info}");
    assert!(info.contains("cluster_stats_messages_publishshard_received:1\r\n"), "{info}");
}

#[test]
fn a_node_met_by_another_meets_it_back_until_it_answers() {
    let (mut a, mut b) = (ClusterState::fresh(settings(0)), ClusterState::fresh(settings(1)));
    let now = 1_000_000;
    b.meet("127.0.0.1", 7000, 17000, now).unwrap();
    let handshake = b.link_targets()[0].0;
    let meet = b.link_up(&handshake, 1, now).expect("a MEET to send");
    assert_eq!(meet.kind, Kind::Meet);
    a.receive(wire(meet), None, "127.0.0.1", Some("127.0.0.1"), now);
    // a's first frame to b is a MEET as well: b may have given up its own handshake.
    let back = a.link_up(&b.myself_id(), 1, now).expect("b is known");
    assert_eq!(back.kind, Kind::Meet);
    let b_id = b.myself_id();
    let mut forgetful = ClusterState::from_saved(b.saved(), settings(1));
    let _ = forgetful.forget(&a.myself_id(), now);
    let out = forgetful.receive(wire(back), None, "127.0.0.1", Some("127.0.0.1"), now);
    assert!(forgetful.node(&a.myself_id()).is_some(), "b learns a again from its MEET");
    // Once b answers, a goes back to PINGs.
    let pong = out.reply.into_iter().find(|m| m.kind == Kind::Pong).expect("a PONG");
    a.receive(wire(pong), Some(b_id), "127.0.0.1", None, now);
    assert_eq!(a.link_up(&b_id, 1, now).map(|m| m.kind), Some(Kind::Ping));
}

#[test]
fn a_slot_saved_under_two_nodes_belongs_to_the_last_one_only() {
    let mut a = Node::new(NodeId::random(), NodeFlags::MYSELF | NodeFlags::PRIMARY);
    let mut b = Node::new(NodeId::random(), NodeFlags::PRIMARY);
    (0..=10).for_each(|s| _ = a.slots.insert(s));
    (10..SLOTS as u16).for_each(|s| _ = b.slots.insert(s));
    let (a_id, b_id) = (a.id, b.id);
    let saved = SavedConfig { nodes: vec![a, b], current_epoch: 0, last_vote_epoch: 0, open_slots: Vec::new() };
    let st = ClusterState::from_saved(saved, settings(0));
    assert_eq!(st.owner(10).map(|n| n.id), Some(b_id));
    assert_eq!(st.node(&a_id).unwrap().slots.to_string(), "0-9");
    // Every slot has one live owner: the cluster is ok (its check counts the owners' sets).
    assert!(st.is_ok());
}

#[test]
fn only_primaries_with_slots_report_failures() {
    // One primary serves every slot; two primaries without slots take part in gossip only.
    let mut net = Net::new(4);
    net.nodes[0].add_slots(&(0..16384).collect::<Vec<_>>()).unwrap();
    let now = net.now;
    for i in 1..4 {
        net.nodes[i].meet("127.0.0.1", 7000, 17000, now).unwrap();
    }
    assert!(net.run_until(100, |n| n.nodes.iter().all(|s| s.nodes().len() == 4 && s.is_ok())), "no join");
    net.run(20);
    net.down[3] = true;
    let gone = net.id(3);
    let failed = |n: &Net| n.nodes[..3].iter().all(|s| s.node(&gone).is_some_and(|x| x.flags.has(NodeFlags::FAIL)));
    assert!(
        net.run_until(((TIMEOUT * 3) / 100) as usize, failed),
        "{}",
        net.nodes[1].nodes_text(ClientKind::default())
    );
    net.run(5);
    // The voting primary decides alone; the others' suspicions are not reports (Valkey's
    // failure-marking test: COUNT-FAILURE-REPORTS is 0 on the voter, 1 elsewhere).
    assert_eq!(net.nodes[0].failure_reports(&gone), Some(0));
    assert_eq!(net.nodes[1].failure_reports(&gone), Some(1));
    assert_eq!(net.nodes[2].failure_reports(&gone), Some(1));
}

#[test]
fn a_deleted_slot_stays_with_its_owner_elsewhere_until_someone_claims_it() {
    let mut net = Net::three_primaries();
    let owner = net.id(0);
    net.nodes[0].del_slots(&[0]).unwrap();
    net.run(30);
    // Valkey does not propagate DELSLOTS: the owner alone unbinds the slot.
    assert_eq!(net.nodes[0].owner(0).map(|n| n.id), None);
    assert_eq!(net.nodes[1].owner(0).map(|n| n.id), Some(owner));
    assert_eq!(net.nodes[2].owner(0).map(|n| n.id), Some(owner));
    assert_eq!(net.nodes[1].add_slots(&[0]), Err("Slot 0 is already busy".into()));
    // Taken back, it is the owner's again everywhere.
    net.nodes[0].add_slots(&[0]).unwrap();
    net.run(10);
    assert!(net.nodes.iter().all(|s| s.owner(0).map(|x| x.id) == Some(owner) && s.is_ok()));
}

impl Net {
    /// [`Net::three_primaries`] and a fourth node without slots (node 3), known everywhere.
    fn three_primaries_and_a_spare() -> Net {
        let mut net = Net::three_primaries();
        net.nodes.push(ClusterState::fresh(settings(3)));
        net.down.push(false);
        let now = net.now;
        net.nodes[3].meet("127.0.0.1", 7000, 17000, now).unwrap();
        assert!(net.run_until(100, |n| n.nodes.iter().all(|s| s.nodes().len() == 4)), "no join");
        net
    }

    /// Whether node `i` knows node `of`.
    fn knows(&self, i: usize, of: usize) -> bool {
        self.nodes[i].node(&self.id(of)).is_some()
    }
}

#[test]
fn cluster_forget_answers_as_valkey() {
    let mut net = Net::three_primaries_and_a_spare();
    let now = net.now;
    let (me, primary, spare) = (net.id(3), net.id(0), net.id(2));
    let stranger = NodeId::random();
    let s = &mut net.nodes[3];
    assert_eq!(s.forget(&stranger, now), Err(format!("Unknown node {stranger}")));
    assert_eq!(s.forget(&me, now), Err("I tried hard but I can't forget myself...".into()));
    s.replicate(&primary).unwrap();
    assert_eq!(s.forget(&primary, now), Err("Can't forget my master!".into()));
    assert_eq!(s.forget(&spare, now), Ok(()));
    assert!(s.node(&spare).is_none());
    // Forgotten, it is known to be: forgetting it again (maybe after gossip did) is fine, until
    // its minute is up.
    assert_eq!(s.forget(&spare, now + FORGET_TTL_MS - 1), Ok(()));
    s.tick(now + FORGET_TTL_MS);
    assert_eq!(s.forget(&spare, now + FORGET_TTL_MS), Err(format!("Unknown node {spare}")));
}

#[test]
fn a_forgotten_node_is_not_added_back_by_gossip_until_its_minute_is_up() {
    let mut net = Net::three_primaries_and_a_spare();
    let now = net.now;
    let spare = net.id(3);
    // Node 1 still knows the spare and gossips about it (a PING made before any forget).
    let stale = net.nodes[1].gossip_message(Kind::Ping, None, now);
    let Body::Gossip { entries, .. } = &stale.body else { panic!("{stale:?}") };
    assert!(entries.iter().any(|g| g.id == spare), "the PING names the spare");
    net.nodes[0].forget(&spare, now).unwrap();
    net.nodes[0].receive(wire(stale.clone()), None, "127.0.0.1", None, now + 1000);
    assert!(!net.knows(0, 3), "gossip brought a forgotten node back");
    let later = now + FORGET_TTL_MS;
    net.nodes[0].tick(later);
    net.nodes[0].receive(wire(stale), None, "127.0.0.1", None, later);
    assert!(net.knows(0, 3), "a minute later, gossip may add it again (Valkey's blacklist ttl)");
}

#[test]
fn a_forget_on_one_node_spreads_to_every_node_with_the_time_left() {
    let mut net = Net::three_primaries_and_a_spare();
    net.run(5);
    let (spare, started) = (net.id(3), net.now);
    net.nodes[0].forget(&spare, started).unwrap();
    // The spare keeps running and pinging everyone: its PINGs come from a stranger now.
    let forgotten = |n: &Net| (0..3).all(|i| !n.knows(i, 3));
    assert!(net.run_until(50, forgotten), "{}", net.nodes[1].nodes_text(ClientKind::default()));
    // Each node keeps it out for what was left of the first node's minute, and says so.
    let ping = net.nodes[1].gossip_message(Kind::Ping, None, net.now);
    let Body::Gossip { ext, .. } = &ping.body else { panic!("{ping:?}") };
    let left = (started + FORGET_TTL_MS - net.now) / 1000;
    let told: Vec<Ext<'_>> = ext.iter().collect();
    assert!(
        matches!(told[..], [Ext::ShardId(_), Ext::ForgottenNode { id, ttl_secs }] if id == spare && (left - 1..=left).contains(&(ttl_secs as i64))),
        "{told:?}"
    );
    // Still out after many rounds of gossip, the slots and the cluster untouched.
    net.run(100);
    assert!(forgotten(&net));
    assert!(net.nodes[..3].iter().all(|s| s.is_ok() && s.nodes().len() == 3));
    // A minute on, nobody mentions it any more.
    net.run(((FORGET_TTL_MS + 1000) / 100) as usize);
    let ping = net.nodes[2].gossip_message(Kind::Ping, None, net.now);
    assert!(
        matches!(&ping.body, Body::Gossip { ext, .. } if ext.iter().all(|e| matches!(e, Ext::ShardId(_)))),
        "{ping:?}"
    );
}

#[test]
fn announced_client_addresses_spread_by_ping_extension_and_clear_the_same_way() {
    let mut net = Net::three_primaries();
    let mut cfg = settings(0);
    cfg.client_ipv4 = "192.0.2.10".into();
    cfg.client_ipv6 = "2001:db8::10".into();
    net.nodes[0].set_settings(cfg);
    let me = net.id(0);
    let seen = |n: &Net, v4: &str, v6: &str| {
        (1..3).all(|i| n.nodes[i].node(&me).is_some_and(|x| x.client_ipv4 == v4 && x.client_ipv6 == v6))
    };
    for s in &mut net.nodes {
        s.take_view_changed();
    }
    assert!(net.run_until(50, |n| seen(n, "192.0.2.10", "2001:db8::10")));
    // A change others must save and route by: their view changed, and nodes.conf holds it.
    assert!(net.nodes[1].take_view_changed());
    let saved = net.nodes[1].saved();
    assert!(saved.nodes.iter().any(|n| n.id == me && n.client_ipv4 == "192.0.2.10"));
    let line = net.nodes[1].nodes_text(ClientKind { tls: false, ipv6: true });
    assert!(line.lines().any(|l| l.starts_with(&format!("{me} 2001:db8::10:7000@17000 "))), "{line}");
    // A node that stops sending an extension no longer announces that address (Valkey).
    let v4_only = Settings { client_ipv6: String::new(), ..net.nodes[0].settings().clone() };
    net.nodes[0].set_settings(v4_only);
    assert!(net.run_until(50, |n| seen(n, "192.0.2.10", "")));
    net.nodes[0].set_settings(settings(0));
    assert!(net.run_until(50, |n| seen(n, "", "")));
    assert!(net.nodes[1].nodes_text(ClientKind::default()).contains(&format!("{me} 127.0.0.1:7000@17000 ")));
}

#[test]
fn an_epoch_bump_counts_the_current_epoch_and_is_told_to_every_node_at_once() {
    let mut net = Net::three_primaries();
    let now = net.now;
    for n in &mut net.nodes {
        let _ = n.take_announcements(now);
    }
    // Node 0's own epoch made the highest of its table...
    assert!((0..3).any(|_| !net.nodes[0].bump_epoch().0));
    let _ = net.nodes[0].take_announcements(now);
    let mine = net.nodes[0].myself().config_epoch;
    assert_eq!(net.nodes[0].bump_epoch(), (false, mine), "the unique highest: nothing to do");
    // ...but a header says the cluster's current epoch went past it (a node bumped and
    // node 0 has not heard its new config epoch yet): as Valkey's clusterGetMaxEpoch, the
    // current epoch counts, so an import finished here takes an epoch above it.
    let mut ping =
        net.nodes[1].message(Kind::Ping, Body::Gossip { entries: Default::default(), ext: Default::default() });
    ping.header.current_epoch = mine + 5;
    net.nodes[0].receive(wire(ping), None, "127.0.0.1", None, now);
    assert_eq!(net.nodes[0].bump_epoch(), (true, mine + 6));
    // And every node hears of it now, not at its next ping.
    let told: Vec<NodeId> = net.nodes[0].take_announcements(now).into_iter().map(|(id, _)| id).collect();
    for i in [1, 2] {
        assert!(told.contains(&net.id(i)), "node {i} told");
    }
}

#[test]
fn a_link_that_closes_after_a_newer_one_came_up_leaves_the_node_connected() {
    let mut a = ClusterState::fresh(settings(0));
    let now = 1_000_000;
    a.meet("127.0.0.1", 7001, 17001, now).unwrap();
    let id = a.link_targets()[0].0;
    a.link_up(&id, 1, now).expect("known");
    a.link_up(&id, 2, now).expect("known");
    // Link 1 ends last: node stays connected through link 2, or the bus (which never dials a
    // node it holds a link to) would leave it disconnected for good.
    a.link_down(&id, 1);
    assert!(a.node(&id).unwrap().link_connected);
    a.link_down(&id, 0);
    assert!(a.node(&id).unwrap().link_connected, "a dial that made no link changes nothing");
    a.link_down(&id, 2);
    assert!(!a.node(&id).unwrap().link_connected);
}

/// `redis-cli --cluster fix` on a half-done move of slot 100 from node 0 to node 1 whose one
/// key is on node 1 already: node 1 has the most keys, so fix makes it the owner (SETSLOT
/// STABLE, DELSLOTS, ADDSLOTS, BUMPEPOCH), then tells node 0 (DELSLOTS, SETSLOT NODE node 1,
/// SETSLOT IMPORTING node 1) and moves node 0's keys over before closing the slot. A ping
/// node 1 sent before its ADDSLOTS can reach node 0 after all that (the bus runs on a thread
/// of its own, behind the commands on a loaded machine): it does not claim the slot, but it is
/// older than the slot's new owner, not a sign that node 1 gave it away.
#[test]
fn a_ping_older_than_the_sources_claim_does_not_end_an_import_opened_by_fix() {
    let mut net = Net::three_primaries();
    let (a, b) = (net.id(0), net.id(1));
    net.nodes[1].set_slot(100, SetSlot::Importing(a), 0).unwrap();
    net.nodes[0].set_slot(100, SetSlot::Migrating(b), 0).unwrap();
    net.run(5);
    let stale = net.nodes[1].message(Kind::Ping, Body::Gossip { entries: Default::default(), ext: Default::default() });
    assert!(!stale.header.slots.contains(100));
    // fix, on node 1.
    net.nodes[1].set_slot(100, SetSlot::Stable, 1).unwrap();
    net.nodes[1].del_slots(&[100]).unwrap();
    net.nodes[1].add_slots(&[100]).unwrap();
    net.nodes[1].bump_epoch();
    // fix, on node 0; node 1's announcement has not been read there yet.
    net.nodes[0].del_slots(&[100]).unwrap();
    net.nodes[0].set_slot(100, SetSlot::Node(b), 0).unwrap();
    net.nodes[0].set_slot(100, SetSlot::Importing(b), 0).unwrap();
    let now = net.now;
    net.nodes[0].receive(wire(stale), None, "127.0.0.1", None, now);
    assert_eq!(net.nodes[0].owner(100).map(|n| n.id), Some(b), "node 0 took the slot back");
    assert_eq!(net.nodes[0].importing().get(&100), Some(&b));
    // fix goes on: node 0 has no keys to move; it closes the slot and confirms the owner.
    net.nodes[0].set_slot(100, SetSlot::Stable, 0).unwrap();
    net.nodes[0].set_slot(100, SetSlot::Node(b), 0).unwrap();
    net.nodes[2].set_slot(100, SetSlot::Node(b), 0).unwrap();
    net.flush();
    net.run(20);
    for i in 0..3 {
        assert_eq!(net.nodes[i].owner(100).map(|n| n.id), Some(b), "node {i}");
        assert!(net.nodes[i].migrating().is_empty() && net.nodes[i].importing().is_empty(), "node {i}");
    }
    assert!(net.nodes[1].take_dirty_slots().is_empty(), "node 1 lost the slot and its key");
}

/// Valkey's "Slot is auto-claimed by target after source relinquishes ownership": node 1
/// imports slot 100 from node 0, which it has heard holding it all along; node 0 then gives
/// the slot to node 1 with SETSLOT NODE before any of its frames was read since the import was
/// opened. Node 0's next frame without the slot ends the import: node 1 takes the slot.
#[test]
fn a_source_heard_holding_the_slot_that_gives_it_up_ends_the_import_at_once() {
    let mut net = Net::three_primaries();
    let (a, b) = (net.id(0), net.id(1));
    net.run(5);
    net.nodes[0].set_slot(100, SetSlot::Migrating(b), 0).unwrap();
    net.nodes[1].set_slot(100, SetSlot::Importing(a), 0).unwrap();
    net.nodes[0].set_slot(100, SetSlot::Node(b), 0).unwrap();
    net.run(20);
    assert_eq!(net.nodes[1].owner(100).map(|n| n.id), Some(b), "node 1 did not claim the slot");
    assert!(net.nodes[1].importing().is_empty());
    for i in 0..3 {
        assert_eq!(net.nodes[i].owner(100).map(|n| n.id), Some(b), "node {i}");
    }
}

/// The cron saves at once when an epoch moved, on its own thread, and may do so between a
/// link's change and that link's look at what routing depends on: the save must not swallow
/// the change, or the routing snapshot keeps the slot's old owner (an import that ended with
/// an epoch bump answered MOVED to its source for good).
#[test]
fn a_save_between_a_change_and_the_routing_look_does_not_hide_the_change() {
    let mut net = Net::three_primaries();
    net.run(5);
    while net.nodes[0].take_view_changed() {}
    net.nodes[0].bump_epoch();
    assert!(net.nodes[0].take_dirty(), "saved");
    assert!(net.nodes[0].take_view_changed(), "the routing snapshot is still rebuilt");
    assert!(!net.nodes[0].take_view_changed(), "once");
}

#[test]
fn gossip_names_every_node_in_turn_not_always_the_same_few() {
    let mut net = Net::new(10);
    let now = net.now;
    for i in 1..10 {
        net.nodes[i].meet("127.0.0.1", 7000, 17000, now).unwrap();
    }
    assert!(net.run_until(3000, |n| n.nodes.iter().all(|s| s.nodes().len() == 10)), "the ten nodes never all met");
    let to = net.id(1);
    let mut named = std::collections::HashSet::new();
    for _ in 0..100 {
        let ping = net.nodes[0].gossip_message(Kind::Ping, Some(to), net.now);
        let Body::Gossip { entries, .. } = &ping.body else { panic!("{ping:?}") };
        // Three a ping (a tenth of ten nodes, at least three), never the sender or the receiver.
        assert_eq!(entries.len(), 3);
        for g in entries.iter() {
            assert!(g.id != net.id(0) && g.id != to);
            named.insert(g.id);
        }
    }
    // Always the same few (those heard from longest ago) left the others unnamed for as long
    // as that order held: with ten real nodes, some learned of a new one 28 s late.
    assert_eq!(named.len(), 8, "100 pings of node 0 named only {} of the 8 others", named.len());
}
