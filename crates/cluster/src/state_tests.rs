//! The cluster rules on a simulated network: nodes exchange frames through in-memory links
//! (each frame encoded and decoded, as on the wire), time advances 100 ms per step, and a
//! node can be cut off to test failure detection.

use super::*;
use crate::wire::{decode, encode};

const TIMEOUT: i64 = 2000;

struct Net {
    nodes: Vec<ClusterState>,
    /// Outbound links that are up: (from index, to node id).
    links: Vec<(usize, NodeId)>,
    down: Vec<bool>,
    now: i64,
}

fn settings(i: usize) -> Settings {
    Settings {
        node_timeout_ms: TIMEOUT,
        require_full_coverage: true,
        allow_reads_when_down: false,
        announce_ip: "127.0.0.1".into(),
        port: 7000 + i as u16,
        tls_port: 0,
        bus_port: 17000 + i as u16,
        hostname: String::new(),
        human_nodename: String::new(),
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
        Net {
            nodes: (0..n).map(|i| ClusterState::fresh(settings(i))).collect(),
            links: vec![],
            down: vec![false; n],
            now: 1_000_000,
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
        if let Some(reply) = out.reply {
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
                self.nodes[from].link_down(&link_id);
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
                    if let Some(first) = self.nodes[i].link_up(&id, now) {
                        self.exchange(i, id, first);
                    }
                } else if up && !reachable {
                    self.links.retain(|l| *l != (i, id));
                    self.nodes[i].link_down(&id);
                }
            }
            for (id, ping) in self.nodes[i].tick(now) {
                self.exchange(i, id, ping);
            }
        }
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
fn meeting_one_node_joins_everyone_and_every_view_agrees() {
    let net = Net::three_primaries();
    let sigs: Vec<String> = net.nodes.iter().map(|s| signature(&s.nodes_text(false))).collect();
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
        assert!(s.nodes_text(false).lines().all(|l| l.contains(" connected")), "{}", s.nodes_text(false));
    }
    let line = net.nodes[1].nodes_text(false);
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
    assert!(net.run_until(((TIMEOUT * 3) / 100) as usize, seen_failed), "{}", net.nodes[0].nodes_text(false));
    assert!(!net.nodes[0].is_ok(), "a failed primary's slots are not served");
    assert!(net.nodes[0].nodes_text(false).contains("master,fail"));
    // It comes back: once reachable it is cleared (after twice the timeout, holding slots).
    net.down[2] = false;
    assert!(net.run_until(((TIMEOUT * 4) / 100) as usize, |n| n.nodes.iter().all(|s| s.is_ok())));
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
    let text = net.nodes[1].nodes_text(false);
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
    assert_eq!(s.forget(&me), Err("I tried hard but I can't forget myself...".into()));
    s.reset(true);
    assert_ne!(s.myself_id(), me);
    assert!(s.myself().slots.is_empty() && s.current_epoch() == 0);
}

#[test]
fn a_slot_saved_under_two_nodes_belongs_to_the_last_one_only() {
    let mut a = Node::new(NodeId::random(), NodeFlags::MYSELF | NodeFlags::PRIMARY);
    let mut b = Node::new(NodeId::random(), NodeFlags::PRIMARY);
    (0..=10).for_each(|s| _ = a.slots.insert(s));
    (10..SLOTS as u16).for_each(|s| _ = b.slots.insert(s));
    let (a_id, b_id) = (a.id, b.id);
    let saved = SavedConfig { nodes: vec![a, b], current_epoch: 0, last_vote_epoch: 0 };
    let st = ClusterState::from_saved(saved, settings(0));
    assert_eq!(st.owner(10).map(|n| n.id), Some(b_id));
    assert_eq!(st.node(&a_id).unwrap().slots.to_string(), "0-9");
    // Every slot has one live owner: the cluster is ok (its check counts the owners' sets).
    assert!(st.is_ok());
}
