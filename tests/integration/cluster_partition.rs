//! Cluster links through fault-injecting proxies: partitions, silent networks, flapping links
//! and peers that vanish mid-frame.
//!
//! Each node announces its [`FaultProxy`]'s port as its bus port, so every link another node
//! opens to it goes through that proxy, both ways (PING out, PONG back). To isolate a node
//! completely, its own proxy is faulted (links to it) and, in every other node's proxy, the
//! links it opened itself ([`FaultProxy::fault_from`]). Nothing here is decided by timing:
//! every wait is a bounded poll for a condition.

use std::time::Duration;

use hotkv_test_support::{Fault, FaultProxy, Frame, RawClient, TestServer, wait_for};

use crate::cluster::{cluster_state, nodes, one_cluster_at_a_time};

/// Bound for anything the cluster must do on its own (detect, agree, heal): many node
/// timeouts, for a loaded machine.
const CONVERGE: Duration = Duration::from_secs(30);

/// A node and the proxy in front of its bus port.
struct Proxied {
    srv: TestServer,
    proxy: FaultProxy,
    id: String,
}

/// `n` primaries behind proxies, slots split evenly, met through the proxies, `ok` everywhere.
fn proxied_cluster(n: usize) -> Vec<Proxied> {
    let ns: Vec<Proxied> = nodes(n, &[])
        .into_iter()
        .map(|srv| {
            let proxy = FaultProxy::start(srv.bus_port());
            assert_eq!(
                srv.cmd(&["CONFIG", "SET", "cluster-announce-bus-port", &proxy.port().to_string()]),
                Frame::ok()
            );
            let id = srv.cmd(&["CLUSTER", "MYID"]).text();
            Proxied { srv, proxy, id }
        })
        .collect();
    let per = 16384 / n;
    for (i, node) in ns.iter().enumerate() {
        let last = if i + 1 == n { 16383 } else { (i + 1) * per - 1 };
        let reply = node.srv.cmd(&["CLUSTER", "ADDSLOTSRANGE", &(i * per).to_string(), &last.to_string()]);
        assert_eq!(reply, Frame::ok());
        if i > 0 {
            let meet = ns[0].srv.cmd(&[
                "CLUSTER",
                "MEET",
                "127.0.0.1",
                &node.srv.port().to_string(),
                &node.proxy.port().to_string(),
            ]);
            assert_eq!(meet, Frame::ok());
        }
    }
    assert!(wait_for(|| all_ok(&ns), CONVERGE), "{}", tables(&ns));
    // Every link goes through the proxies: the bus ports in the table are theirs.
    let table = ns[0].srv.cmd(&["CLUSTER", "NODES"]).text();
    for node in &ns {
        assert!(table.contains(&format!(":{}@{} ", node.srv.port(), node.proxy.port())), "{table}");
    }
    ns
}

/// Settled: every node `ok`, none flagged, and every link up (a link still down is a PING
/// that may yet time out).
fn all_ok(ns: &[Proxied]) -> bool {
    ns.iter().all(|n| {
        cluster_state(&n.srv) == "ok"
            && !flagged(&n.srv, "fail")
            && !flagged(&n.srv, "fail?")
            && n.srv.cmd(&["CLUSTER", "NODES"]).text().lines().all(|l| l.split(' ').nth(7) == Some("connected"))
    })
}

/// Whether `srv`'s table shows some node with `flag` (`fail`, `fail?`).
fn flagged(srv: &TestServer, flag: &str) -> bool {
    srv.cmd(&["CLUSTER", "NODES"])
        .text()
        .lines()
        .any(|l| l.split(' ').nth(2).is_some_and(|f| f.split(',').any(|x| x == flag)))
}

/// Whether `srv` marks node `id` with `flag`.
fn marks(srv: &TestServer, id: &str, flag: &str) -> bool {
    srv.cmd(&["CLUSTER", "NODES"])
        .text()
        .lines()
        .any(|l| l.starts_with(id) && l.split(' ').nth(2).is_some_and(|f| f.split(',').any(|x| x == flag)))
}

fn tables(ns: &[Proxied]) -> String {
    ns.iter()
        .map(|n| {
            format!(
                "{}:\n{}{}",
                n.srv.port(),
                n.srv.cmd(&["CLUSTER", "NODES"]).text(),
                n.srv.cmd(&["CLUSTER", "INFO"]).text()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Cuts node `i` off both ways with `fault`: links to it (its proxy) and links it opened.
fn isolate(ns: &[Proxied], i: usize, fault: Fault) {
    match fault {
        Fault::Blackhole => ns[i].proxy.blackhole(),
        _ => ns[i].proxy.partition(),
    }
    for (j, other) in ns.iter().enumerate() {
        if j != i {
            other.proxy.fault_from(ns[i].srv.pid(), fault);
        }
    }
}

fn heal(ns: &[Proxied]) {
    for n in ns {
        n.proxy.heal();
    }
}

/// A key of the slots node `i` serves, `tag` making it unique.
fn key_of(ns: &[Proxied], i: usize, tag: &str) -> String {
    let mut c = ns[i].srv.client();
    (0..).map(|k| format!("{tag}:{k}")).find(|k| owner(&mut c, k, ns) == i).expect("some key")
}

/// Which node of `ns` serves `key`, by its slot and the even split of [`proxied_cluster`].
fn owner(c: &mut RawClient, key: &str, ns: &[Proxied]) -> usize {
    let slot = usize::try_from(c.cmd(&["CLUSTER", "KEYSLOT", key]).int()).expect("a slot");
    (slot / (16384 / ns.len())).min(ns.len() - 1)
}

#[test]
fn an_isolated_primary_is_failed_by_the_majority_and_comes_back_when_healed() {
    let _alone = one_cluster_at_a_time();
    let ns = proxied_cluster(3);
    let keys: Vec<String> = (0..3).map(|i| key_of(&ns, i, "before")).collect();
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(ns[i].srv.cmd(&["SET", k, "v1"]), Frame::ok());
    }
    isolate(&ns, 2, Fault::Blackhole);
    let victim = &ns[2].id;
    // The majority agrees on FAIL, and with a slot range unserved the cluster is down.
    assert!(wait_for(|| ns[..2].iter().all(|n| marks(&n.srv, victim, "fail")), CONVERGE), "{}", tables(&ns));
    assert!(wait_for(|| ns[..2].iter().all(|n| cluster_state(&n.srv) == "fail"), CONVERGE), "{}", tables(&ns));
    crate::assert_err(&ns[0].srv.cmd(&["GET", &keys[0]]), "CLUSTERDOWN The cluster is down");
    // The isolated node cannot reach a majority of primaries: it stops serving too (Valkey's
    // clusterUpdateState, "we are in a minority partition").
    assert!(wait_for(|| cluster_state(&ns[2].srv) == "fail", CONVERGE), "{}", tables(&ns));
    crate::assert_err(&ns[2].srv.cmd(&["GET", &keys[2]]), "CLUSTERDOWN The cluster is down");
    // Without full coverage the majority serves its own slots; the minority still does not.
    for n in &ns {
        assert_eq!(n.srv.cmd(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]), Frame::ok());
    }
    assert!(wait_for(|| ns[..2].iter().all(|n| cluster_state(&n.srv) == "ok"), CONVERGE), "{}", tables(&ns));
    let during: Vec<String> = (0..2).map(|i| key_of(&ns, i, "during")).collect();
    for (i, k) in during.iter().enumerate() {
        assert_eq!(ns[i].srv.cmd(&["SET", k, "v2"]), Frame::ok());
        assert_eq!(ns[i].srv.cmd(&["GET", &keys[i]]), Frame::bulk("v1"));
    }
    assert_eq!(cluster_state(&ns[2].srv), "fail");
    for n in &ns {
        assert_eq!(n.srv.cmd(&["CONFIG", "SET", "cluster-require-full-coverage", "yes"]), Frame::ok());
    }
    // Healed: the blackholed links stay silent, so the nodes must notice and dial again;
    // the FAIL of a primary that still serves slots is cleared once it answers again.
    heal(&ns);
    assert!(wait_for(|| all_ok(&ns), CONVERGE), "{}", tables(&ns));
    let after: Vec<String> = (0..3).map(|i| key_of(&ns, i, "after")).collect();
    for i in 0..3 {
        assert_eq!(ns[i].srv.cmd(&["SET", &after[i], "v3"]), Frame::ok());
        assert_eq!(ns[i].srv.cmd(&["GET", &keys[i]]), Frame::bulk("v1"));
        assert_eq!(ns[i].srv.cmd(&["GET", &after[i]]), Frame::bulk("v3"));
    }
    for (i, k) in during.iter().enumerate() {
        assert_eq!(ns[i].srv.cmd(&["GET", k]), Frame::bulk("v2"));
    }
}

#[test]
fn a_flapping_link_loses_no_acknowledged_write_and_the_cluster_settles() {
    let _alone = one_cluster_at_a_time();
    let ns = proxied_cluster(3);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let acked = std::thread::scope(|s| {
        // A writer per node, on its own slots, keeping what was acknowledged.
        let writers: Vec<_> = (0..3)
            .map(|i| {
                let (ns, stop) = (&ns, &stop);
                s.spawn(move || {
                    let mut c = ns[i].srv.client();
                    let mut acked = Vec::new();
                    let mut n = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                        let key = format!("flap:{i}:{n}");
                        n += 1;
                        if owner(&mut c, &key, ns) != i {
                            continue;
                        }
                        if c.cmd(&["SET", &key, &n.to_string()]) == Frame::ok() {
                            acked.push((key, n.to_string()));
                        }
                    }
                    acked
                })
            })
            .collect();
        // Cut node 1 off and back, again and again, both ways, by closing its links.
        for round in 0..20 {
            isolate(&ns, 1, Fault::Refuse);
            std::thread::sleep(Duration::from_millis(if round % 2 == 0 { 50 } else { 200 }));
            heal(&ns);
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        writers.into_iter().flat_map(|w| w.join().expect("writer")).collect::<Vec<_>>()
    });
    assert!(wait_for(|| all_ok(&ns), CONVERGE), "{}", tables(&ns));
    assert!(!acked.is_empty());
    let mut clients: Vec<RawClient> = ns.iter().map(|n| n.srv.client()).collect();
    for (key, value) in &acked {
        let i = owner(&mut clients[0], key, &ns);
        let got = clients[i].cmd(&["GET", key]);
        if got != Frame::bulk(value) {
            let logs: Vec<String> =
                ns.iter().map(|n| format!("{}:\n{}", n.srv.port(), tail(&n.srv.log(), 40))).collect();
            panic!("{key}: {got:?}, expected {value}\n{}\n{}", tables(&ns), logs.join("\n"));
        }
    }
    println!("flapping link: 20 isolations and heals; {} acknowledged writes checked, none lost", acked.len());
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[test]
fn a_peer_that_vanishes_mid_frame_leaves_the_node_up_and_the_link_comes_back() {
    let _alone = one_cluster_at_a_time();
    let ns = proxied_cluster(3);
    // Cut every link to node 0 a few bytes into the next frame, more than once.
    for _ in 0..3 {
        let cuts = ns[0].proxy.cuts();
        ns[0].proxy.cut_after(7);
        assert!(wait_for(|| ns[0].proxy.cuts() > cuts, CONVERGE), "no bus traffic reached the proxy");
        assert_eq!(ns[0].srv.cmd(&["PING"]), Frame::simple("PONG"));
        ns[0].proxy.heal();
        // Both other nodes dial node 0 again and hear from it.
        assert!(wait_for(|| ns[0].proxy.links() >= 2 && all_ok(&ns), CONVERGE), "{}", tables(&ns));
    }
    let k = key_of(&ns, 0, "after-cut");
    assert_eq!(ns[0].srv.cmd(&["SET", &k, "v"]), Frame::ok());
    for n in &ns[1..] {
        let links = n.srv.cmd(&["CLUSTER", "LINKS"]).to_string();
        assert!(links.contains(&ns[0].id), "{links}");
    }
    assert!(ns.iter().all(|n| !n.srv.log().contains("panicked")), "{}", ns[0].srv.log());
}

#[test]
fn debug_clusterlink_kill_closes_links_that_are_then_dialled_again() {
    // Valkey's links test loses a message on purpose this way.
    let _alone = one_cluster_at_a_time();
    let ns = nodes(2, &[("enable-debug-command", "yes")]);
    assert_eq!(ns[0].cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]), Frame::ok());
    assert_eq!(ns[0].cmd(&["CLUSTER", "MEET", "127.0.0.1", &ns[1].port().to_string()]), Frame::ok());
    let other = ns[1].cmd(&["CLUSTER", "MYID"]).text();
    let link_times = |srv: &TestServer| -> Vec<(String, i64)> {
        srv.cmd(&["CLUSTER", "LINKS"])
            .items()
            .iter()
            .map(|l| (l.field("direction").unwrap().text(), l.field("create-time").unwrap().int()))
            .collect()
    };
    assert!(wait_for(|| link_times(&ns[0]).len() == 2 && cluster_state(&ns[1]) == "ok", CONVERGE));
    let before = link_times(&ns[0]);
    crate::assert_err(
        &ns[0].cmd(&["DEBUG", "CLUSTERLINK", "KILL", "sideways", &other]),
        "ERR Unknown direction sideways",
    );
    crate::assert_err(
        &ns[0].cmd(&["DEBUG", "CLUSTERLINK", "KILL", "to", &"a".repeat(40)]),
        &format!("ERR Unknown node {}", "a".repeat(40)),
    );
    assert_eq!(ns[0].cmd(&["DEBUG", "CLUSTERLINK", "KILL", "all", &other]), Frame::ok());
    // Both links come back, newer than the killed ones.
    let renewed = || {
        let now = link_times(&ns[0]);
        now.len() == 2 && now.iter().all(|(dir, t)| before.iter().any(|(d, old)| d == dir && t > old))
    };
    assert!(wait_for(renewed, CONVERGE), "{before:?} -> {:?}", link_times(&ns[0]));
    let standalone = crate::server_with(&[("enable-debug-command", "yes")]);
    crate::assert_err(
        &standalone.cmd(&["DEBUG", "CLUSTERLINK", "KILL", "to", &other]),
        "ERR Debug option only available for cluster mode enabled setup!",
    );
}

#[test]
fn a_debug_packet_filter_drops_meets_until_lifted() {
    // Valkey's cluster-reliable-meet drives the MEET retry this way. A failed dial is retried
    // once a second and a handshake lasts the node timeout: give it room for a few MEETs.
    let _alone = one_cluster_at_a_time();
    let ns = nodes(2, &[("enable-debug-command", "yes"), ("cluster-node-timeout", "8000")]);
    let field = |srv: &TestServer, name: &str| {
        crate::info_field(&srv.cmd(&["CLUSTER", "INFO"]).text(), name).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0)
    };
    assert_eq!(ns[0].cmd(&["DEBUG", "DROP-CLUSTER-PACKET-FILTER", "2"]), Frame::ok());
    assert_eq!(ns[0].cmd(&["DEBUG", "CLOSE-CLUSTER-LINK-ON-PACKET-DROP", "1"]), Frame::ok());
    crate::assert_err(
        &ns[0].cmd(&["DEBUG", "DROP-CLUSTER-PACKET-FILTER", "x"]),
        "ERR value is not an integer or out of range",
    );
    assert_eq!(ns[1].cmd(&["CLUSTER", "MEET", "127.0.0.1", &ns[0].port().to_string()]), Frame::ok());
    // Every MEET is counted, dropped, and its link closed: node 0 never learns node 1.
    assert!(wait_for(|| field(&ns[0], "cluster_stats_messages_meet_received") >= 3, CONVERGE));
    assert_eq!(field(&ns[0], "cluster_known_nodes"), 1);
    assert!(ns[0].log().contains("Closing link for matching packet type 2"), "{}", ns[0].log());
    assert_eq!(ns[0].cmd(&["DEBUG", "DROP-CLUSTER-PACKET-FILTER", "-1"]), Frame::ok());
    assert!(
        wait_for(|| ns.iter().all(|n| field(n, "cluster_known_nodes") == 2 && !flagged(n, "handshake")), CONVERGE),
        "{}\n{}",
        ns[0].cmd(&["CLUSTER", "NODES"]).text(),
        ns[1].cmd(&["CLUSTER", "NODES"]).text()
    );
}

#[test]
fn a_link_to_a_peer_that_stops_reading_is_closed_past_the_send_buffer_limit() {
    // Valkey's links test "Disconnect link when send buffer limit reached".
    let _alone = one_cluster_at_a_time();
    let ns = nodes(2, &[]);
    assert_eq!(ns[0].cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]), Frame::ok());
    assert_eq!(ns[0].cmd(&["CLUSTER", "MEET", "127.0.0.1", &ns[1].port().to_string()]), Frame::ok());
    let links = |srv: &TestServer| srv.cmd(&["CLUSTER", "LINKS"]).items().len();
    let exceeded = |srv: &TestServer| {
        crate::info_field(&srv.cmd(&["CLUSTER", "INFO"]).text(), "total_cluster_links_buffer_limit_exceeded")
            .and_then(|v| v.parse::<i64>().ok())
            .expect("the counter is in CLUSTER INFO")
    };
    let link_mem = |srv: &TestServer| {
        let text = crate::info(&mut srv.client(), "memory");
        crate::info_num(&text, "mem_cluster_links")
    };
    assert!(wait_for(|| links(&ns[0]) == 2 && cluster_state(&ns[1]) == "ok", CONVERGE));
    assert!(link_mem(&ns[0]) > 0);
    assert_eq!(exceeded(&ns[0]), 0);
    // A peer that stops reading, and a node timeout long enough that only the limit acts.
    assert_eq!(ns[0].cmd(&["CONFIG", "SET", "cluster-node-timeout", "3600000"]), Frame::ok());
    assert_eq!(ns[0].cmd(&["CONFIG", "SET", "cluster-link-sendbuf-limit", "262144"]), Frame::ok());
    let signal = |sig: &str| {
        let status = std::process::Command::new("kill").args([sig, &ns[1].pid().to_string()]).status().unwrap();
        assert!(status.success());
    };
    signal("-STOP");
    let payload = "x".repeat(128 * 1024);
    let mut c = ns[0].client();
    // The kernel's buffers fill first; a few MB at most.
    let freed = (0..200).any(|_| {
        assert!(!c.cmd(&["PUBLISH", "ch", &payload]).is_error());
        wait_for(|| exceeded(&ns[0]) >= 1, Duration::from_millis(20))
    });
    signal("-CONT");
    assert!(freed, "no link was closed past the limit");
    // Dialled again; memory back to the links' fixed cost once the queue is gone.
    assert_eq!(ns[0].cmd(&["CONFIG", "SET", "cluster-link-sendbuf-limit", "0"]), Frame::ok());
    assert!(wait_for(|| links(&ns[0]) == 2 && link_mem(&ns[0]) < 64 * 1024, CONVERGE), "{}", link_mem(&ns[0]));
    // A one-byte limit closes every link, as in Valkey (its tests reset links this way).
    let before = exceeded(&ns[0]);
    assert_eq!(ns[0].cmd(&["CONFIG", "SET", "cluster-link-sendbuf-limit", "1"]), Frame::ok());
    assert!(wait_for(|| exceeded(&ns[0]) >= before + 2, CONVERGE));
}
