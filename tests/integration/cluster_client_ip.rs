//! `cluster-announce-client-ipv4` / `-ipv6`, as Valkey 8's
//! `tests/unit/cluster/announce-client-ip.tcl` checks them: a node's announced client address
//! reaches every node by gossip and is what clients of that family are told in CLUSTER SLOTS,
//! CLUSTER SHARDS, CLUSTER NODES and MOVED; clearing it goes back to the node's address; and a
//! node restarts from a `nodes.conf` that holds them.

use std::net::SocketAddr;
use std::time::Duration;

use hotkv_test_support::{Frame, RawClient, SIGKILL, TestServer, wait_for};

use crate::cluster::{cluster_state, create, nodes, one_cluster_at_a_time};
use crate::{assert_err_prefix, builder};

/// Every address a client is told about a node, by each reply that names nodes: CLUSTER SLOTS
/// (the endpoint of each node of each range), CLUSTER SHARDS (`ip` and `endpoint` of each
/// node), CLUSTER NODES (each line's address).
fn told(c: &mut RawClient) -> Vec<String> {
    let mut seen = Vec::new();
    for range in c.cmd(&["CLUSTER", "SLOTS"]).items() {
        for node in &range.items()[2..] {
            seen.push(node.items()[0].text_lossy());
        }
    }
    for shard in c.cmd(&["CLUSTER", "SHARDS"]).items() {
        for node in shard.field("nodes").expect("nodes").items() {
            seen.push(node.field("ip").expect("ip").text_lossy());
            seen.push(node.field("endpoint").expect("endpoint").text_lossy());
        }
    }
    for line in c.cmd(&["CLUSTER", "NODES"]).text().lines() {
        let addr = line.split(' ').nth(1).unwrap_or("");
        // `ip:port@bus`, an IPv6 address without brackets as Valkey writes it.
        seen.push(addr.rsplit_once('@').and_then(|(a, _)| a.rsplit_once(':')).map(|(ip, _)| ip).unwrap_or("").into());
    }
    seen
}

/// Whether every address `c` is told starts with `prefix`.
fn all_told(c: &mut RawClient, prefix: &str) -> bool {
    let seen = told(c);
    !seen.is_empty() && seen.iter().all(|ip| ip.starts_with(prefix))
}

/// A client of `n` over IPv6 (the harness binds `::1` besides `127.0.0.1`).
fn ipv6_client(n: &TestServer) -> RawClient {
    let addr: SocketAddr = format!("[::1]:{}", n.port()).parse().unwrap();
    RawClient::connect_addr(addr).expect("the node listens on ::1")
}

/// The MOVED error a SET of `foo` gets from the node `c` is connected to (node 0 does not
/// serve foo's slot).
fn moved(c: &mut RawClient) -> String {
    c.cmd(&["SET", "foo", "foo"]).error_text().unwrap_or_default()
}

#[test]
fn announced_client_ips_reach_slots_shards_nodes_and_redirects_per_family() {
    let _alone = one_cluster_at_a_time();
    // Three primaries (redis-cli's minimum; Valkey's test has two and two replicas).
    let ns = nodes(3, &[]);
    create(&ns, 0);
    assert!(wait_for(|| ns.iter().all(|n| cluster_state(n) == "ok"), Duration::from_secs(10)));
    let mut v4: Vec<RawClient> = ns.iter().map(TestServer::client).collect();
    let mut v6: Vec<RawClient> = ns.iter().map(ipv6_client).collect();
    // Node 0 serves 0-5460: foo (12182) is redirected.
    assert!(moved(&mut v4[0]).starts_with("MOVED 12182 127.0.0.1:"), "{}", moved(&mut v4[0]));

    for (name, family) in [("cluster-announce-client-ipv4", "IPv4"), ("cluster-announce-client-ipv6", "IPv6")] {
        assert_err_prefix(
            &v4[0].cmd(&["CONFIG", "SET", name, "banana"]),
            &format!("ERR CONFIG SET failed (possibly related to argument '{name}') - Invalid {family} address"),
        );
    }

    // IPv4 announced: IPv4 clients are told it everywhere, IPv6 clients still the address.
    for (j, c) in v4.iter_mut().enumerate() {
        assert_eq!(c.cmd(&["CONFIG", "SET", "cluster-announce-client-ipv4", &format!("111.222.111.{j}")]), Frame::ok());
    }
    let spread = wait_for(|| v4.iter_mut().all(|c| all_told(c, "111.222.111.")), Duration::from_secs(10));
    assert!(spread, "{:?}", told(&mut v4[0]));
    assert!(moved(&mut v4[0]).starts_with("MOVED 12182 111.222.111."), "{}", moved(&mut v4[0]));
    assert!(v6.iter_mut().all(|c| all_told(c, "127.0.0.1")), "{:?}", told(&mut v6[0]));
    assert!(moved(&mut v6[0]).starts_with("MOVED 12182 127.0.0.1:"), "{}", moved(&mut v6[0]));

    // IPv6 announced too: each family is told its own.
    for (j, c) in v4.iter_mut().enumerate() {
        assert_eq!(c.cmd(&["CONFIG", "SET", "cluster-announce-client-ipv6", &format!("cafe:1234::{j}")]), Frame::ok());
    }
    let spread = wait_for(|| v6.iter_mut().all(|c| all_told(c, "cafe:1234::")), Duration::from_secs(10));
    assert!(spread, "{:?}", told(&mut v6[0]));
    let text = moved(&mut v6[0]);
    assert!(text.starts_with("MOVED 12182 cafe:1234::") && text.rsplit_once(':').is_some(), "{text}");
    assert!(v4.iter_mut().all(|c| all_told(c, "111.222.111.")), "{:?}", told(&mut v4[0]));

    // A peer saves them in nodes.conf as Valkey's aux fields (a moment after it learns them),
    // and comes back with them.
    let path = ns[1].dir().join("nodes.conf");
    let conf = || std::fs::read_to_string(&path).unwrap_or_default();
    let saved = wait_for(
        || conf().contains(",client-ipv4=111.222.111.0,client-ipv6=cafe:1234::0,shard-id="),
        Duration::from_secs(10),
    );
    assert!(saved, "{}", conf());
    let id = ns[1].cmd(&["CLUSTER", "MYID"]).text();
    ns[1].signal(SIGKILL);
    let back = builder()
        .config("cluster-enabled", "yes")
        .config("cluster-node-timeout", "1000")
        .config("cluster-announce-client-ipv4", "111.222.111.1")
        .config("dir", &ns[1].dir().display().to_string())
        .spawn();
    assert_eq!(back.cmd(&["CLUSTER", "MYID"]).text(), id);
    let line = back.cmd(&["CLUSTER", "NODES"]).text();
    assert!(line.lines().all(|l| l.contains(" 111.222.111.")), "{line}");
    assert!(wait_for(|| [&ns[0], &back, &ns[2]].iter().all(|n| cluster_state(n) == "ok"), Duration::from_secs(15)));
    v4[1] = back.client();
    v6[1] = ipv6_client(&back);

    // Cleared: everyone is told the node's address again, over either family.
    for (j, c) in v4.iter_mut().enumerate() {
        for name in ["cluster-announce-client-ipv4", "cluster-announce-client-ipv6"] {
            assert_eq!(c.cmd(&["CONFIG", "SET", name, ""]), Frame::ok(), "node {j}");
        }
    }
    let cleared =
        wait_for(|| v4.iter_mut().chain(v6.iter_mut()).all(|c| all_told(c, "127.0.0.1")), Duration::from_secs(10));
    assert!(cleared, "{:?} {:?}", told(&mut v4[0]), told(&mut v6[0]));
    assert!(moved(&mut v4[0]).starts_with("MOVED 12182 127.0.0.1:"), "{}", moved(&mut v4[0]));
    assert!(moved(&mut v6[0]).starts_with("MOVED 12182 127.0.0.1:"), "{}", moved(&mut v6[0]));
}
