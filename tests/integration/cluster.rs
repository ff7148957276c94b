//! Cluster mode driven by the tools users have: `redis-cli --cluster create|check|info|call`,
//! `redis-cli -c`, redis-py's `RedisCluster`, and raw clients for exact redirect texts. Nodes
//! run as separate processes on loopback with a short node timeout, started in parallel.

use std::time::Duration;

use hotkv_test_support::tools::{python, redis_cli, redis_cli_output, run_bounded};
use hotkv_test_support::{Frame, SIGKILL, TestServer, wait_for};

use crate::{assert_err, builder, info, info_field};

/// Node timeout for tests: failure detection within seconds, not the default 15.
pub(crate) const NODE_TIMEOUT: &str = "1000";

/// Tests that form a cluster run one at a time: two clusters at once (up to twelve processes)
/// on a small, busy machine starve their bus threads past the 1 s node timeout, nodes flap
/// PFAIL/FAIL, and a node whose MEET handshake times out never joins, so redis-cli's join
/// wait never ends. Hold the guard for the whole test.
pub(crate) fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static CLUSTERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A failed test poisons the lock; the next one may run all the same.
    CLUSTERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `n` fresh cluster nodes, started in parallel.
pub(crate) fn nodes(n: usize, extra: &[(&str, &str)]) -> Vec<TestServer> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    let mut b = builder().config("cluster-enabled", "yes").config("cluster-node-timeout", NODE_TIMEOUT);
                    for (k, v) in extra {
                        b = b.config(k, v);
                    }
                    b.spawn()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("node start")).collect()
    })
}

fn addrs(nodes: &[TestServer]) -> Vec<String> {
    nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())).collect()
}

/// `redis-cli --cluster create` over `nodes` with `replicas` per primary; its stdout.
pub(crate) fn create(nodes: &[TestServer], replicas: usize) -> String {
    let mut cmd = std::process::Command::new("redis-cli");
    cmd.arg("--cluster").arg("create").args(addrs(nodes));
    cmd.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
    let out = run_bounded(&mut cmd, None, Duration::from_secs(60));
    assert!(out.stdout.contains("[OK] All 16384 slots covered."), "{}\n{}", out.stdout, out.stderr);
    out.stdout
}

pub(crate) fn cluster_state(n: &TestServer) -> String {
    let text = n.cmd(&["CLUSTER", "INFO"]).text();
    info_field(&text, "cluster_state").unwrap_or_default()
}

#[test]
fn redis_cli_creates_six_nodes_and_every_client_follows_redirects() {
    let _alone = one_cluster_at_a_time();
    let ns = nodes(6, &[]);
    let out = create(&ns, 1);
    assert!(out.contains("[OK] All nodes agree about slots configuration."), "{out}");
    assert!(out.contains("Adding replica"), "{out}");
    assert!(wait_for(|| ns.iter().all(|n| cluster_state(n) == "ok"), Duration::from_secs(10)));
    let first = &ns[0];
    // What a user sees: INFO cluster, the node table, exact redirect texts.
    let mut c = first.client();
    assert_eq!(info_field(&info(&mut c, "cluster"), "cluster_enabled").as_deref(), Some("1"));
    // Replicas attached by redis-cli's last CLUSTER REPLICATE reach the first node's view with
    // their next ping.
    let mut table = String::new();
    let settled = wait_for(
        || {
            table = c.cmd(&["CLUSTER", "NODES"]).text();
            table.matches(" slave ").count() == 3
        },
        Duration::from_secs(10),
    );
    assert!(settled, "{table}");
    assert_eq!(table.lines().count(), 6, "{table}");
    assert_eq!(table.matches("master").count(), 3, "{table}");
    let slot = c.cmd(&["CLUSTER", "KEYSLOT", "foo"]).int();
    assert_eq!(slot, 12182);
    let serves = |n: &&TestServer| {
        n.cmd(&["CLUSTER", "NODES"]).text().lines().any(|l| l.contains("myself,master") && l.ends_with(" 10923-16383"))
    };
    let owner_port = ns.iter().find(serves).expect("a node serves 10923-16383").port();
    if owner_port != first.port() {
        assert_err(&c.cmd(&["SET", "foo", "bar"]), &format!("MOVED 12182 127.0.0.1:{owner_port}"));
    }
    assert_err(&c.cmd(&["MSET", "a", "1", "b", "2"]), "CROSSSLOT Keys in request don't hash to the same slot");
    assert_err(&c.cmd(&["SELECT", "1"]), "ERR SELECT is not allowed in cluster mode");
    assert_eq!(c.cmd(&["SELECT", "0"]), Frame::ok());
    // redis-cli -c follows MOVED; any node answers for any key.
    assert_eq!(redis_cli(first.port(), &["-c", "SET", "greeting", "hello"]), "OK\n");
    for n in &ns[..3] {
        assert_eq!(redis_cli(n.port(), &["-c", "GET", "greeting"]), "hello\n");
    }
    // redis-py's cluster client routes by slot.
    let py = python(
        first.port(),
        "from redis.cluster import RedisCluster\n\
         rc = RedisCluster(host='127.0.0.1', port=PORT)\n\
         for i in range(200): rc.set(f'key:{i}', i)\n\
         print(sum(int(rc.get(f'key:{i}')) for i in range(200)))\n\
         print(len(rc.get_nodes()))",
    );
    assert_eq!(py, "19900\n6\n");
    // The other cluster tools agree.
    let check = redis_cli_output(first.port(), &["--cluster", "check", &addrs(&ns)[0]], None).stdout;
    assert!(check.contains("[OK] 201 keys in 3 masters."), "{check}");
    assert!(check.contains("[OK] All 16384 slots covered."), "{check}");
    let call = redis_cli_output(first.port(), &["--cluster", "call", &addrs(&ns)[0], "DBSIZE"], None).stdout;
    assert_eq!(call.lines().filter(|l| l.contains(": ")).count(), 6, "{call}");
}

#[test]
fn a_killed_primary_fails_the_cluster_and_rejoins_from_its_nodes_conf() {
    let _alone = one_cluster_at_a_time();
    let ns = nodes(3, &[]);
    create(&ns, 0);
    assert!(wait_for(|| ns.iter().all(|n| cluster_state(n) == "ok"), Duration::from_secs(10)));
    let victim = &ns[2];
    let id = victim.cmd(&["CLUSTER", "MYID"]).text();
    victim.signal(SIGKILL);
    // PFAIL after the node timeout, FAIL once both other primaries agree: the slots it
    // served have no one, so the cluster is down.
    let failed = |n: &TestServer| {
        n.cmd(&["CLUSTER", "NODES"]).text().lines().any(|l| l.starts_with(&id) && l.contains("master,fail "))
    };
    assert!(
        wait_for(|| ns[..2].iter().all(failed), Duration::from_secs(15)),
        "{}",
        ns[0].cmd(&["CLUSTER", "NODES"]).text()
    );
    assert_eq!(cluster_state(&ns[0]), "fail");
    assert_err(&ns[0].client().cmd(&["GET", "foo"]), "CLUSTERDOWN The cluster is down");
    // Restarted on a new port from the same directory, it comes back with its id and slots.
    let back = builder()
        .config("cluster-enabled", "yes")
        .config("cluster-node-timeout", NODE_TIMEOUT)
        .config("dir", &victim.dir().display().to_string())
        .spawn();
    assert_eq!(back.cmd(&["CLUSTER", "MYID"]).text(), id);
    assert!(wait_for(|| ns[..2].iter().chain([&back]).all(|n| cluster_state(n) == "ok"), Duration::from_secs(15)));
    let table = ns[0].cmd(&["CLUSTER", "NODES"]).text();
    let line = table.lines().find(|l| l.starts_with(&id)).unwrap();
    assert!(line.contains(&format!("127.0.0.1:{}@", back.port())), "{line}");
    assert_eq!(redis_cli(ns[0].port(), &["-c", "SET", "foo", "bar"]), "OK\n");
}

#[test]
fn failure_reports_are_logged_with_human_nodenames() {
    // Valkey's human-announced-nodename test reads these lines to find who reported whom.
    let ns: Vec<TestServer> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|i| {
                s.spawn(move || {
                    builder()
                        .config("cluster-enabled", "yes")
                        .config("cluster-node-timeout", NODE_TIMEOUT)
                        .config("cluster-announce-human-nodename", &format!("node-{i}"))
                        .spawn()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("node start")).collect()
    });
    create(&ns, 0);
    assert!(wait_for(|| ns.iter().all(|n| cluster_state(n) == "ok"), Duration::from_secs(10)));
    // The names travel in every bus header: give the nodes a few pings to learn them.
    std::thread::sleep(Duration::from_millis(1500));
    let ids: Vec<String> = ns.iter().map(|n| n.cmd(&["CLUSTER", "MYID"]).text()).collect();
    ns[2].signal(SIGKILL);
    let line = |by: usize| format!("Node {} (node-{by}) reported node {} (node-2) as not reachable.", ids[by], ids[2]);
    assert!(
        wait_for(|| ns[0].log().contains(&line(1)) || ns[1].log().contains(&line(0)), Duration::from_secs(15)),
        "{}\n{}",
        ns[0].log(),
        ns[1].log()
    );
}

#[test]
fn cluster_commands_refuse_what_valkey_refuses() {
    let ns = nodes(1, &[]);
    let mut c = ns[0].client();
    assert_eq!(c.cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "99"]), Frame::ok());
    assert_err(&c.cmd(&["CLUSTER", "ADDSLOTS", "5"]), "ERR Slot 5 is already busy");
    assert_err(&c.cmd(&["CLUSTER", "ADDSLOTS", "16384"]), "ERR Invalid or out of range slot");
    assert_err(&c.cmd(&["CLUSTER", "DELSLOTS", "100"]), "ERR Slot 100 is already unassigned");
    assert_err(
        &c.cmd(&["CLUSTER", "ADDSLOTSRANGE", "9", "3"]),
        "ERR start slot number 9 is greater than end slot number 3",
    );
    assert_err(&c.cmd(&["CLUSTER", "COUNTKEYSINSLOT", "16384"]), "ERR Invalid slot");
    assert_err(&c.cmd(&["CLUSTER", "GETKEYSINSLOT", "1", "-1"]), "ERR Invalid slot or number of keys");
    assert_err(&c.cmd(&["CLUSTER", "FORGET", &"a".repeat(40)]), &format!("ERR Unknown node {}", "a".repeat(40)));
    let me = c.cmd(&["CLUSTER", "MYID"]).text();
    assert_err(&c.cmd(&["CLUSTER", "FORGET", &me]), "ERR I tried hard but I can't forget myself...");
    assert_eq!(c.cmd(&["CLUSTER", "KEYSLOT", "{user}:1"]), Frame::Integer(5474));
    assert_eq!(c.cmd(&["CLUSTER", "BUMPEPOCH"]), Frame::simple("BUMPED 1"));
    assert_eq!(c.cmd(&["CLUSTER", "BUMPEPOCH"]), Frame::simple("STILL 1"));
    assert_err(&c.cmd(&["CLUSTER", "SET-CONFIG-EPOCH", "9"]), "ERR Node config epoch is already non-zero");
    assert_err(&c.cmd(&["CLUSTER", "MEET", "not-an-ip", "7000"]), "ERR Invalid node address specified: not-an-ip:7000");
    // Only slots 0-99 are served: the others are not, and the cluster is down.
    assert_eq!(cluster_state(&ns[0]), "fail");
    assert_eq!(c.cmd(&["CLUSTER", "SAVECONFIG"]), Frame::ok());
    let saved = std::fs::read_to_string(ns[0].dir().join("nodes.conf")).unwrap();
    assert!(
        saved.contains(&format!("{me} 127.0.0.1:{}@", ns[0].port())) || saved.contains(&format!("{me} :")),
        "{saved}"
    );
    assert!(saved.contains(" 0-99\n") && saved.contains("vars currentEpoch 1 "), "{saved}");
    assert!(ns[0].log().contains("WARNING: the cluster bus port is not authenticated"), "{}", ns[0].log());
}

#[test]
fn a_standalone_server_refuses_cluster_commands() {
    let srv = crate::server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["CLUSTER", "NODES"]), "ERR This instance has cluster support disabled");
    assert_err(&c.cmd(&["READONLY"]), "ERR This instance has cluster support disabled");
    assert_err(&c.cmd(&["CLUSTER", "KEYSLOT", "k"]), "ERR This instance has cluster support disabled");
    assert_err(&c.cmd(&["CLUSTER", "LINKS"]), "ERR This instance has cluster support disabled");
}

#[test]
fn a_corrupt_nodes_conf_stops_the_node_naming_the_file_and_line() {
    let run = builder()
        .config("cluster-enabled", "yes")
        .config_file("hotkv.conf", |port, dir| {
            std::fs::write(
                dir.join("nodes.conf"),
                format!(
                    "{} 127.0.0.1:{port}@{} myself,master - 0 0 0 connected 0-10\nnot a node line\n",
                    "a".repeat(40),
                    port + 10000
                ),
            )
            .unwrap();
            format!("port {port}\nbind 127.0.0.1\ndir {}\ncluster-enabled yes\n", dir.display())
        })
        .run_to_exit(Duration::from_secs(10));
    assert_eq!(run.code(), Some(1), "{}", run.stderr);
    let path = run.dir().join("nodes.conf");
    assert!(
        run.stderr.contains(&format!(
            "Unrecoverable error: corrupted cluster config file \"{}\" at line 2: a node line has at least 8 fields, this one 4",
            path.display()
        )),
        "{}\n{}",
        run.stderr,
        run.stdout
    );
}

#[test]
fn a_client_port_whose_bus_port_would_pass_65535_is_refused_at_start() {
    // A free port above 55535: its bus port (+10000) does not exist. hotkv used to wrap it
    // around to a low port; Valkey refuses to start, and so does hotkv now.
    let high = (55536..65535u16)
        .rev()
        .step_by(97)
        .find(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok())
        .expect("a free port above 55535");
    let run = builder()
        .config_file("hotkv.conf", move |_, dir| {
            format!("port {high}\nbind 127.0.0.1\ndir {}\ncluster-enabled yes\n", dir.display())
        })
        .run_to_exit(Duration::from_secs(10));
    assert_eq!(run.code(), Some(1), "{}", run.stderr);
    let text = format!("{}{}", run.stdout, run.stderr);
    assert!(
        text.contains(
            "Valkey port number too high. Cluster communication port is 10,000 port numbers higher than your \
             Valkey port. Your Valkey port number must be 55535 or less."
        ),
        "{text}"
    );
}

#[test]
fn announced_endpoints_reach_nodes_slots_and_redirects() {
    let ns = nodes(
        1,
        &[
            ("cluster-announce-ip", "10.1.2.3"),
            ("cluster-announce-port", "7777"),
            ("cluster-announce-bus-port", "17777"),
            ("cluster-announce-hostname", "cache-1.example.com"),
        ],
    );
    let mut c = ns[0].client();
    assert_eq!(c.cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]), Frame::ok());
    let table = c.cmd(&["CLUSTER", "NODES"]).text();
    assert!(table.contains(" 10.1.2.3:7777@17777,cache-1.example.com myself,master "), "{table}");
    let slots = c.cmd(&["CLUSTER", "SLOTS"]);
    let node = &slots.items()[0].items()[2];
    assert_eq!(node.items()[0], Frame::bulk("10.1.2.3"));
    assert_eq!(node.items()[1], Frame::Integer(7777));
    assert_eq!(node.items()[3].pairs(), vec![(Frame::bulk("hostname"), Frame::bulk("cache-1.example.com"))]);
    // Endpoints by host name, as clients that verify names want them.
    assert_eq!(c.cmd(&["CONFIG", "SET", "cluster-preferred-endpoint-type", "hostname"]), Frame::ok());
    let slots = c.cmd(&["CLUSTER", "SLOTS"]);
    let node = &slots.items()[0].items()[2];
    assert_eq!(node.items()[0], Frame::bulk("cache-1.example.com"));
    assert_eq!(node.items()[3].pairs(), vec![(Frame::bulk("ip"), Frame::bulk("10.1.2.3"))]);
    // Changed at runtime, the announced port reaches the table at once.
    assert_eq!(c.cmd(&["CONFIG", "SET", "cluster-announce-port", "7778"]), Frame::ok());
    assert!(c.cmd(&["CLUSTER", "NODES"]).text().contains(" 10.1.2.3:7778@17777,"));
}

#[test]
fn a_bus_peer_that_lies_is_dropped_and_changes_nothing() {
    use std::io::{Read, Write};
    let ns = nodes(1, &[]);
    let bus = ns[0].port() + 10000;
    let before = ns[0].cmd(&["CLUSTER", "NODES"]).text();
    let send = |bytes: &[u8]| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", bus)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(bytes);
        // The node closes the link: a read ends (EOF or reset) instead of timing out.
        let mut buf = [0u8; 64];
        let closed = matches!(s.read(&mut buf), Ok(0) | Err(_));
        assert!(closed, "the node kept a lying link open after {bytes:?}");
    };
    // A length past the limit, a length too short for a header, a valid length with garbage,
    // and another protocol version.
    send(&[0x7f, 0xff, 0xff, 0xff, 1, 2, 3]);
    send(&[0, 0, 0, 3]);
    let mut garbage = 64u32.to_be_bytes().to_vec();
    garbage.extend_from_slice(&[0xab; 60]);
    send(&garbage);
    let mut other = 64u32.to_be_bytes().to_vec();
    other.extend_from_slice(&[0, 9, 0, 0]);
    other.extend_from_slice(&[0; 56]);
    send(&other);
    assert!(ns[0].wait_for_log("message too large", Duration::from_secs(5)), "{}", ns[0].log());
    assert!(ns[0].log().contains("dropping a bus link that sent a bad frame"), "{}", ns[0].log());
    assert_eq!(ns[0].cmd(&["CLUSTER", "NODES"]).text(), before);
    assert_eq!(ns[0].cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn redirects_and_cluster_slots_follow_the_preferred_endpoint_type() {
    let _alone = one_cluster_at_a_time();
    let ns = nodes(3, &[]);
    create(&ns, 0);
    assert!(wait_for(|| ns.iter().all(|n| cluster_state(n) == "ok"), Duration::from_secs(10)));
    // redis-cli splits 0-5460, 5461-10922, 10923-16383: foo (12182) is node 2's, bar (5061)
    // node 0's; node 2 has a hostname, node 1 none.
    assert_eq!(ns[2].cmd(&["CONFIG", "SET", "cluster-announce-hostname", "them.com"]), Frame::ok());
    let mut c = ns[1].client();
    let row_of = |slots: &Frame, start: i64| -> Vec<Frame> {
        let Frame::Array(rows) = slots else { panic!("{slots}") };
        let row = rows.iter().find(|r| matches!(r, Frame::Array(f) if f[0] == Frame::Integer(start))).unwrap();
        let Frame::Array(fields) = row else { unreachable!() };
        let Frame::Array(node) = &fields[2] else { panic!("{row}") };
        node.clone()
    };
    assert!(wait_for(
        || row_of(&ns[1].cmd(&["CLUSTER", "SLOTS"]), 10923)[3]
            == Frame::Array(vec![Frame::bulk("hostname"), Frame::bulk("them.com")]),
        Duration::from_secs(10)
    ));
    let (p0, p2) = (ns[0].port(), ns[2].port());
    assert_err(&c.cmd(&["SET", "foo", "x"]), &format!("MOVED 12182 127.0.0.1:{p2}"));
    assert_eq!(c.cmd(&["CONFIG", "SET", "cluster-preferred-endpoint-type", "hostname"]), Frame::ok());
    assert_err(&c.cmd(&["SET", "foo", "x"]), &format!("MOVED 12182 them.com:{p2}"));
    assert_err(&c.cmd(&["SET", "bar", "x"]), &format!("MOVED 5061 ?:{p0}"));
    let node2 = row_of(&c.cmd(&["CLUSTER", "SLOTS"]), 10923);
    assert_eq!(node2[0], Frame::bulk("them.com"));
    assert_eq!(node2[3], Frame::Array(vec![Frame::bulk("ip"), Frame::bulk("127.0.0.1")]));
    assert_eq!(c.cmd(&["CONFIG", "SET", "cluster-preferred-endpoint-type", "unknown-endpoint"]), Frame::ok());
    assert_err(&c.cmd(&["SET", "foo", "x"]), &format!("MOVED 12182 :{p2}"));
    let node2 = row_of(&c.cmd(&["CLUSTER", "SLOTS"]), 10923);
    assert_eq!(node2[0], Frame::NullBulk);
    assert_eq!(
        node2[3],
        Frame::Array(vec![
            Frame::bulk("ip"),
            Frame::bulk("127.0.0.1"),
            Frame::bulk("hostname"),
            Frame::bulk("them.com")
        ])
    );
    assert_eq!(
        row_of(&c.cmd(&["CLUSTER", "SLOTS"]), 0)[3],
        Frame::Array(vec![Frame::bulk("ip"), Frame::bulk("127.0.0.1")])
    );
}

#[test]
fn cluster_shards_calls_a_node_failed_only_once_it_is_fail() {
    // A primary with every slot and an empty one: the empty primary does not vote, so the
    // other's death stays a suspicion (PFAIL) here, never an agreed FAIL.
    let _alone = one_cluster_at_a_time();
    let ns = nodes(2, &[]);
    assert_eq!(ns[0].cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]), Frame::ok());
    let id = ns[0].cmd(&["CLUSTER", "MYID"]).text();
    assert_eq!(ns[1].cmd(&["CLUSTER", "MEET", "127.0.0.1", &ns[0].port().to_string()]), Frame::ok());
    assert!(wait_for(|| cluster_state(&ns[1]) == "ok", Duration::from_secs(10)));
    ns[0].signal(SIGKILL);
    let suspected = |n: &TestServer| {
        n.cmd(&["CLUSTER", "NODES"]).text().lines().any(|l| l.starts_with(&id) && l.contains("master,fail? "))
    };
    assert!(wait_for(|| suspected(&ns[1]), Duration::from_secs(10)), "{}", ns[1].cmd(&["CLUSTER", "NODES"]).text());
    let shards = ns[1].cmd(&["CLUSTER", "SHARDS"]).to_string();
    assert!(!shards.contains("fail"), "{shards}");
}

/// How many messages of `kind` node `n` received (CLUSTER INFO's counter).
fn received(n: &TestServer, kind: &str) -> u64 {
    let text = n.cmd(&["CLUSTER", "INFO"]).text();
    info_field(&text, &format!("cluster_stats_messages_{kind}_received")).and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[test]
fn a_forget_on_one_node_reaches_every_node_and_gossip_does_not_bring_it_back() {
    let _alone = one_cluster_at_a_time();
    let ns = nodes(4, &[]);
    assert_eq!(ns[0].cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]), Frame::ok());
    for n in &ns[1..] {
        assert_eq!(n.cmd(&["CLUSTER", "MEET", "127.0.0.1", &ns[0].port().to_string()]), Frame::ok());
    }
    let count = |n: &TestServer| n.cmd(&["CLUSTER", "NODES"]).text().lines().count();
    assert!(wait_for(|| ns.iter().all(|n| count(n) == 4), Duration::from_secs(20)), "no join");
    let gone = ns[3].cmd(&["CLUSTER", "MYID"]).text();
    let knows = |n: &TestServer| n.cmd(&["CLUSTER", "NODES"]).text().contains(&gone);
    assert_eq!(ns[0].cmd(&["CLUSTER", "FORGET", &gone]), Frame::ok());
    assert!(!knows(&ns[0]));
    // The forgotten node keeps running and pinging; the others hear of the forget by gossip.
    let spread = wait_for(|| ns[..3].iter().all(|n| !knows(n)), Duration::from_secs(20));
    assert!(spread, "{}", ns[1].cmd(&["CLUSTER", "NODES"]).text());
    // Forgetting it again where gossip already did answers OK, as Valkey does.
    assert_eq!(ns[2].cmd(&["CLUSTER", "FORGET", &gone]), Frame::ok());
    // Several more rounds of gossip bring it back nowhere.
    let pings = received(&ns[1], "ping");
    assert!(wait_for(|| received(&ns[1], "ping") >= pings + 8, Duration::from_secs(20)));
    assert!(ns[..3].iter().all(|n| !knows(n) && count(n) == 3));
    assert!(ns[..3].iter().all(|n| cluster_state(n) == "ok"));
}

#[test]
fn a_primary_that_loses_a_slot_to_a_newer_claim_deletes_the_keys_it_held_there() {
    let _alone = one_cluster_at_a_time();
    let ns = nodes(3, &[]);
    create(&ns, 0);
    assert!(wait_for(|| ns.iter().all(|n| cluster_state(n) == "ok"), Duration::from_secs(10)));
    let slot_of = |k: &str| match ns[0].cmd(&["CLUSTER", "KEYSLOT", k]) {
        Frame::Integer(n) => n,
        other => panic!("{other:?}"),
    };
    // Keys of one slot on the node that serves it (the one that answers OK), and a key of
    // another of its slots.
    let slot = slot_of("{dirty}");
    let owner = ns.iter().position(|n| n.cmd(&["SET", "{dirty}0", "v"]) == Frame::ok()).expect("an owner");
    let (a, b) = (&ns[owner], &ns[(owner + 1) % 3]);
    for i in 1..5 {
        assert_eq!(a.cmd(&["SET", &format!("{{dirty}}{i}"), "v"]), Frame::ok());
    }
    let other = (0..1000)
        .map(|i| format!("k{i}"))
        .find(|k| slot_of(k) != slot && a.cmd(&["SET", k, "v"]) == Frame::ok())
        .expect("another key of the node");
    // Another primary takes the slot with a newer epoch behind its owner's back (what a
    // failover elsewhere or an operator's SETSLOT does): the owner still serves its other
    // slots, so it must drop the keys it held in this one.
    assert!(matches!(b.cmd(&["CLUSTER", "BUMPEPOCH"]), Frame::Simple(_)));
    let b_id = b.cmd(&["CLUSTER", "MYID"]).text();
    let s = slot.to_string();
    assert_eq!(b.cmd(&["CLUSTER", "SETSLOT", &s, "NODE", &b_id]), Frame::ok());
    assert!(
        wait_for(|| a.cmd(&["CLUSTER", "COUNTKEYSINSLOT", &s]) == Frame::Integer(0), Duration::from_secs(15)),
        "{}",
        a.log()
    );
    let a_id = a.cmd(&["CLUSTER", "MYID"]).text();
    assert!(a.log().contains(&format!("Deleting keys in dirty slot {slot} on node {a_id} (")), "{}", a.log());
    assert_eq!(a.cmd(&["GET", &other]), Frame::bulk("v"));
    assert!(a.cmd(&["GET", "{dirty}0"]).error_text().unwrap_or_default().starts_with("MOVED "));
}

#[test]
fn debug_sleep_stops_the_bus_too_so_peers_see_the_node_fail_and_recover() {
    let _alone = one_cluster_at_a_time();
    let ns = nodes(3, &[("enable-debug-command", "yes")]);
    create(&ns, 0);
    assert!(wait_for(|| ns.iter().all(|n| cluster_state(n) == "ok"), Duration::from_secs(10)));
    let id = ns[2].cmd(&["CLUSTER", "MYID"]).text();
    // Valkey's DEBUG SLEEP stops its one event loop, the bus included: a node asleep past
    // the node timeout stops answering PINGs and its peers fail it. hotkv's bus thread waits
    // at the same stop.
    let port = ns[2].port();
    let sleeper = std::thread::spawn(move || {
        let mut c = hotkv_test_support::RawClient::connect(port);
        c.set_timeout(Duration::from_secs(30));
        c.cmd(&["DEBUG", "SLEEP", "4"])
    });
    let failed = |n: &TestServer| {
        n.cmd(&["CLUSTER", "NODES"]).text().lines().any(|l| l.starts_with(&id) && l.contains("master,fail "))
    };
    assert!(
        wait_for(|| ns[..2].iter().all(failed), Duration::from_secs(15)),
        "{}\n{:?}\n{}",
        ns[0].cmd(&["CLUSTER", "NODES"]).text(),
        sleeper.join(),
        ns[2].log()
    );
    assert_eq!(sleeper.join().unwrap(), Frame::ok());
    // Awake again, it answers, the FAIL flag is cleared (a primary with slots that is
    // reachable again) and the cluster is whole.
    assert!(
        wait_for(|| ns.iter().all(|n| cluster_state(n) == "ok" && !failed(n)), Duration::from_secs(20)),
        "{}",
        ns[0].cmd(&["CLUSTER", "NODES"]).text()
    );
}
