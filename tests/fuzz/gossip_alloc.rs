//! What a PING/PONG exchange allocates, counted by the global allocator: a node that knows more
//! nodes gossips about more of them per message (a tenth, at least three), and that must not
//! cost an allocation per entry, on either end.

use hotkv_cluster::nodes_conf::SavedConfig;
use hotkv_cluster::state::{ClusterState, Settings};
use hotkv_cluster::wire::{Message, decode, encode, encoded_len};
use hotkv_cluster::{Node, NodeFlags, NodeId};
use hotkv_test_support::fuzz::allocs_during;

fn settings() -> Settings {
    Settings {
        node_timeout_ms: 15_000,
        require_full_coverage: true,
        allow_reads_when_down: false,
        allow_pubsubshard_when_down: true,
        announce_ip: "127.0.0.1".into(),
        port: 7000,
        tls_port: 0,
        bus_port: 17000,
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

/// Two nodes, `a` and `b`, that both know the same `n` nodes (themselves included).
fn pair(n: usize, now: i64) -> (ClusterState, ClusterState) {
    let nodes: Vec<Node> = (0..n)
        .map(|i| {
            let mut node = Node::new(NodeId::random(), NodeFlags::PRIMARY);
            node.ip = format!("10.0.{}.{}", i / 250, i % 250 + 1);
            node.port = 7000;
            node.bus_port = 17000;
            node.pong_received_ms = now;
            node
        })
        .collect();
    let state = |me: usize| {
        let mut nodes = nodes.clone();
        nodes[me].flags.set(NodeFlags::MYSELF, true);
        ClusterState::from_saved(
            SavedConfig { nodes, current_epoch: 0, last_vote_epoch: 0, open_slots: Vec::new() },
            settings(),
        )
    };
    (state(0), state(1))
}

/// A frame as the bus sends it: into a buffer sized once.
fn frame(msg: &Message) -> Vec<u8> {
    let mut buf = Vec::with_capacity(encoded_len(msg));
    encode(msg, &mut buf);
    buf
}

/// Allocations for `a` to PING `b` and `b`'s PONG to be taken in by `a`: each message built,
/// encoded, decoded and applied.
fn exchange(n: usize) -> u64 {
    let now = 1_800_000_000_000;
    let (mut a, mut b) = pair(n, now);
    let b_id = b.myself_id();
    let (_, count) = allocs_during(|| {
        let ping = a.link_up(&b_id, 1, now).expect("a knows b");
        let (ping, _) = decode(&frame(&ping)).unwrap().unwrap();
        let out = b.receive(ping, None, "127.0.0.1", Some("127.0.0.1"), now);
        let pong = out.reply.into_iter().next().expect("a PONG");
        let (pong, _) = decode(&frame(&pong)).unwrap().unwrap();
        a.receive(pong, Some(b_id), "127.0.0.1", None, now);
    });
    count
}

#[test]
fn a_ping_pong_exchange_costs_no_allocation_per_gossip_entry() {
    // 30 nodes: 3 entries per message; 300 nodes: 30.
    let (small, large) = (exchange(30), exchange(300));
    println!("allocations per PING/PONG exchange: {small} with 3 entries, {large} with 30 entries per message");
    assert!(large <= small + 2, "{small} allocations with 3 gossip entries, {large} with 30");
}
