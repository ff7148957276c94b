//! Pub/sub across a cluster made by `redis-cli --cluster create`: PUBLISH reaches subscribers on
//! every node, SPUBLISH the nodes of its channel's shard only, and CLUSTER LINKS shows the bus
//! links that carry them. Nodes run as separate processes on loopback.

use std::time::Duration;

use hotkv_test_support::tools::redis_cli;
use hotkv_test_support::{Frame, RawClient, TestServer, wait_for};

use crate::cluster::{cluster_state, create, nodes, one_cluster_at_a_time};
use crate::{assert_err, info_field, ok};

/// How long a cluster may take to settle (state ok, links up, roles known).
const SETTLE: Duration = Duration::from_secs(20);

/// No test here is about failure detection: a node timeout longer than the harness's 1 s
/// keeps a busy machine from flapping nodes to FAIL while a test watches its messages.
const CALM: &[(&str, &str)] = &[("cluster-node-timeout", "5000")];

fn arr(items: &[Frame]) -> Frame {
    Frame::Array(items.to_vec())
}

fn bulks(items: &[&str]) -> Frame {
    arr(&items.iter().map(Frame::bulk).collect::<Vec<_>>())
}

fn myid(n: &TestServer) -> String {
    n.cmd(&["CLUSTER", "MYID"]).text()
}

/// (direction, node) of every link `CLUSTER LINKS` lists on `n`, sorted.
fn links(n: &TestServer) -> Vec<(String, String)> {
    let reply = n.cmd(&["CLUSTER", "LINKS"]);
    let mut v: Vec<(String, String)> = reply
        .items()
        .iter()
        .map(|l| (l.field("direction").map(|f| f.text()).unwrap_or_default(), l.field("node").unwrap().text()))
        .collect();
    v.sort();
    v
}

/// Whether `n` lists a link each way to every node of `all` but itself: what a PUBLISH needs
/// to reach them.
fn linked_both_ways(n: &TestServer, all: &[String]) -> bool {
    let me = myid(n);
    let mut expected: Vec<(String, String)> = all
        .iter()
        .filter(|id| **id != me)
        .flat_map(|id| [("from".to_string(), id.clone()), ("to".to_string(), id.clone())])
        .collect();
    expected.sort();
    links(n) == expected
}

/// Creates the cluster and waits until it is ok everywhere with every bus link up.
fn settle(ns: &[TestServer], replicas: usize) -> Vec<String> {
    create(ns, replicas);
    let ids: Vec<String> = ns.iter().map(myid).collect();
    assert!(
        wait_for(|| ns.iter().all(|n| cluster_state(n) == "ok" && linked_both_ways(n, &ids)), SETTLE),
        "{:?}",
        links(&ns[0])
    );
    ids
}

/// The value of a `CLUSTER INFO` field, 0 when absent (message counters are printed once
/// non-zero).
fn cluster_info_num(n: &TestServer, field: &str) -> i64 {
    info_field(&n.cmd(&["CLUSTER", "INFO"]).text(), field).map_or(0, |v| v.parse().unwrap())
}

fn subscribe(n: &TestServer, cmd: &str, channel: &str) -> RawClient {
    let mut c = n.client();
    let word = cmd.to_ascii_lowercase();
    assert_eq!(c.cmd(&[cmd, channel]), arr(&[Frame::bulk(&word), Frame::bulk(channel), Frame::Integer(1)]));
    c
}

#[test]
fn publish_reaches_subscribers_on_every_node_and_counts_local_ones() {
    let _alone = one_cluster_at_a_time();
    let ns = nodes(3, CALM);
    settle(&ns, 0);
    let mut on_b = subscribe(&ns[1], "SUBSCRIBE", "news");
    let mut on_c = subscribe(&ns[2], "PSUBSCRIBE", "ne*");
    // Nobody listens on A: the reply counts A's receivers only, as Valkey's.
    assert_eq!(ns[0].cmd(&["PUBLISH", "news", "hello"]), Frame::Integer(0));
    assert_eq!(on_b.read_frame(), bulks(&["message", "news", "hello"]));
    assert_eq!(on_c.read_frame(), bulks(&["pmessage", "ne*", "news", "hello"]));
    let mut on_a = subscribe(&ns[0], "SUBSCRIBE", "news");
    assert_eq!(ns[1].cmd(&["PUBLISH", "news", "from b"]), Frame::Integer(1));
    for sub in [&mut on_a, &mut on_b] {
        assert_eq!(sub.read_frame(), bulks(&["message", "news", "from b"]));
    }
    assert_eq!(on_c.read_frame(), bulks(&["pmessage", "ne*", "news", "from b"]));
    // A RESP3 subscriber gets it as a push, and redis-cli publishes like any client.
    let mut resp3 = ns[2].client();
    assert!(matches!(resp3.cmd(&["HELLO", "3"]), Frame::Map(_)));
    resp3.cmd(&["SUBSCRIBE", "news"]);
    assert_eq!(redis_cli(ns[0].port(), &["PUBLISH", "news", "via cli"]), "1\n");
    assert_eq!(
        resp3.read_frame(),
        Frame::Push(vec![Frame::bulk("message"), Frame::bulk("news"), Frame::bulk("via cli")])
    );
    // Each message went once to each other node: no node sent one on.
    assert_eq!(cluster_info_num(&ns[0], "cluster_stats_messages_publish_sent"), 4);
    assert_eq!(cluster_info_num(&ns[0], "cluster_stats_messages_publish_received"), 1);
    assert_eq!(cluster_info_num(&ns[1], "cluster_stats_messages_publish_received"), 2);
    assert_eq!(cluster_info_num(&ns[2], "cluster_stats_messages_publish_received"), 3);
}

/// A node as one line of `CLUSTER NODES` describes it.
struct Line {
    id: String,
    port: u16,
    primary: Option<String>,
    /// Slot ranges, for a primary.
    ranges: Vec<(u16, u16)>,
}

fn table(n: &TestServer) -> Vec<Line> {
    let text = n.cmd(&["CLUSTER", "NODES"]).text();
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let port = f[1].split('@').next().unwrap().rsplit(':').next().unwrap().parse().unwrap();
            let ranges = f[8..]
                .iter()
                .filter(|r| !r.starts_with('['))
                .map(|r| match r.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None => (r.parse().unwrap(), r.parse().unwrap()),
                })
                .collect();
            Line { id: f[0].into(), port, primary: (f[3] != "-").then(|| f[3].to_string()), ranges }
        })
        .collect()
}

#[test]
fn spublish_reaches_the_shards_replica_and_no_other_shard() {
    let _alone = one_cluster_at_a_time();
    let ns = nodes(6, CALM);
    let ids = settle(&ns, 1);
    // Every node knows every replica's primary (the shards an SPUBLISH goes to).
    let replicas_known = |n: &TestServer| table(n).iter().filter(|l| l.primary.is_some()).count() == 3;
    assert!(wait_for(|| ns.iter().all(replicas_known), SETTLE));
    let by_port = |port: u16| ns.iter().find(|n| n.port() == port).unwrap();
    let slot = ns[0].cmd(&["CLUSTER", "KEYSLOT", "orders"]).int() as u16;
    let lines = table(&ns[0]);
    let owner = lines.iter().find(|l| l.ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot))).unwrap();
    let replica = lines.iter().find(|l| l.primary.as_deref() == Some(owner.id.as_str())).unwrap();
    let (primary, replica) = (by_port(owner.port), by_port(replica.port));
    let others: Vec<&TestServer> =
        ns.iter().filter(|n| n.port() != primary.port() && n.port() != replica.port()).collect();
    assert_eq!((others.len(), ids.len()), (4, 6));
    // A replica serves its shard's channels without READONLY; another shard redirects.
    let mut on_replica = subscribe(replica, "SSUBSCRIBE", "orders");
    let mut on_primary = subscribe(primary, "SSUBSCRIBE", "orders");
    let moved = format!("MOVED {slot} 127.0.0.1:{}", primary.port());
    for n in &others {
        assert_err(&n.client().cmd(&["SSUBSCRIBE", "orders"]), &moved);
        assert_err(&n.client().cmd(&["SPUBLISH", "orders", "x"]), &moved);
    }
    // On the primary: its own subscriber counts, the replica's hears it too.
    assert_eq!(primary.cmd(&["SPUBLISH", "orders", "one"]), Frame::Integer(1));
    for sub in [&mut on_primary, &mut on_replica] {
        assert_eq!(sub.read_frame(), bulks(&["smessage", "orders", "one"]));
    }
    // On the replica: it reaches the primary.
    assert_eq!(replica.cmd(&["SPUBLISH", "orders", "two"]), Frame::Integer(1));
    for sub in [&mut on_replica, &mut on_primary] {
        assert_eq!(sub.read_frame(), bulks(&["smessage", "orders", "two"]));
    }
    // In a transaction too (Valkey's sharded-pubsub "publish behavior within multi/exec"):
    // the replica serves it, and a key read queued with it is still redirected.
    let mut c = replica.client();
    assert_eq!(c.cmd(&["MULTI"]), Frame::ok());
    assert_eq!(c.cmd(&["SPUBLISH", "orders", "in-multi"]), Frame::simple("QUEUED"));
    assert_eq!(c.cmd(&["EXEC"]), arr(&[Frame::Integer(1)]));
    for sub in [&mut on_replica, &mut on_primary] {
        assert_eq!(sub.read_frame(), bulks(&["smessage", "orders", "in-multi"]));
    }
    assert_eq!(c.cmd(&["MULTI"]), Frame::ok());
    assert_eq!(c.cmd(&["SPUBLISH", "orders", "lost"]), Frame::simple("QUEUED"));
    assert_err(&c.cmd(&["GET", "orders"]), &moved);
    assert_err(&c.cmd(&["EXEC"]), "EXECABORT Transaction discarded because of previous errors.");
    // redis-cli -c follows the redirect from another shard.
    assert_eq!(redis_cli(others[0].port(), &["-c", "SPUBLISH", "orders", "three"]), "1\n");
    for sub in [&mut on_primary, &mut on_replica] {
        assert_eq!(sub.read_frame(), bulks(&["smessage", "orders", "three"]));
    }
    // Shard messages went to the shard's other node only, never to another shard.
    assert_eq!(cluster_info_num(primary, "cluster_stats_messages_publishshard_sent"), 2);
    assert_eq!(cluster_info_num(replica, "cluster_stats_messages_publishshard_received"), 2);
    assert_eq!(cluster_info_num(primary, "cluster_stats_messages_publishshard_received"), 2);
    for n in &others {
        assert_eq!(cluster_info_num(n, "cluster_stats_messages_publishshard_received"), 0, "port {}", n.port());
    }
}

#[test]
fn shard_channels_are_served_while_the_cluster_is_down_unless_configured_not_to() {
    let ns = nodes(1, &[]);
    let mut c = ns[0].client();
    ok(&mut c, &["CLUSTER", "ADDSLOTSRANGE", "0", "8191"]);
    assert_eq!(cluster_state(&ns[0]), "fail");
    // "{a}" is slot 15495, "{b}" slot 3300.
    assert_eq!(c.cmd(&["CLUSTER", "KEYSLOT", "{b}"]), Frame::Integer(3300));
    let mut sub = subscribe(&ns[0], "SSUBSCRIBE", "{b}ch");
    assert_eq!(c.cmd(&["SPUBLISH", "{b}ch", "m"]), Frame::Integer(1));
    assert_eq!(sub.read_frame(), bulks(&["smessage", "{b}ch", "m"]));
    assert_err(&c.cmd(&["GET", "{b}k"]), "CLUSTERDOWN The cluster is down");
    // A slot nobody serves says so first, as in Valkey.
    assert_err(&c.cmd(&["SPUBLISH", "{a}ch", "m"]), "CLUSTERDOWN Hash slot not served");
    assert_err(&c.cmd(&["GET", "{a}k"]), "CLUSTERDOWN Hash slot not served");
    ok(&mut c, &["CONFIG", "SET", "cluster-allow-pubsubshard-when-down", "no"]);
    assert_err(&c.cmd(&["SPUBLISH", "{b}ch", "m"]), "CLUSTERDOWN The cluster is down");
    assert_err(&ns[0].client().cmd(&["SSUBSCRIBE", "{b}ch"]), "CLUSTERDOWN The cluster is down");
}

#[test]
fn cluster_links_lists_each_peer_both_ways_in_resp2_and_resp3() {
    let _alone = one_cluster_at_a_time();
    let ns = nodes(3, CALM);
    let ids = settle(&ns, 0);
    const FIELDS: [&str; 6] =
        ["direction", "node", "create-time", "events", "send-buffer-allocated", "send-buffer-used"];
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let check = |link: &Frame| {
        let pairs = link.pairs();
        let keys: Vec<String> = pairs.iter().map(|(k, _)| k.text()).collect();
        assert_eq!(keys, FIELDS, "{link}");
        let direction = pairs[0].1.text();
        assert!(direction == "to" || direction == "from", "{link}");
        assert!(ids.contains(&pairs[1].1.text()) && pairs[1].1.text() != ids[0], "{link}");
        let created = pairs[2].1.int();
        assert!(created > now_ms - 120_000 && created <= now_ms + 1000, "{link}");
        assert!(["r", "rw"].contains(&pairs[3].1.text().as_str()), "{link}");
        assert!(pairs[4].1.int() >= 0 && pairs[4].1.int() == pairs[5].1.int(), "{link}");
    };
    let mut c = ns[0].client();
    let resp2 = c.cmd(&["CLUSTER", "LINKS"]);
    assert_eq!(resp2.items().len(), 4, "{resp2}");
    for link in resp2.items() {
        assert!(matches!(link, Frame::Array(v) if v.len() == 12), "RESP2 maps are flat arrays: {link}");
        check(link);
    }
    assert!(matches!(c.cmd(&["HELLO", "3"]), Frame::Map(_)));
    let resp3 = c.cmd(&["CLUSTER", "LINKS"]);
    assert_eq!(resp3.items().len(), 4, "{resp3}");
    for link in resp3.items() {
        assert!(matches!(link, Frame::Map(p) if p.len() == 6), "{link}");
        check(link);
    }
    assert!(linked_both_ways(&ns[0], &ids));
    let help = c.cmd(&["CLUSTER", "HELP"]);
    assert!(help.items().iter().any(|l| l.text() == "LINKS"), "{help}");
    assert_err(&c.cmd(&["CLUSTER", "LINKS", "extra"]), "ERR wrong number of arguments for 'cluster|links' command");
}

#[test]
fn shard_subscribers_get_sunsubscribe_when_their_slot_moves_away() {
    let _alone = crate::cluster::one_cluster_at_a_time();
    let ns = crate::cluster::nodes(3, &[]);
    crate::cluster::create(&ns, 0);
    assert!(hotkv_test_support::wait_for(
        || ns.iter().all(|n| crate::cluster::cluster_state(n) == "ok"),
        std::time::Duration::from_secs(20)
    ));
    // A channel of a slot node 0 serves (redis-cli gives the first node the first slots).
    let channel = (0..).map(|i| format!("ch:{i}")).find(|c| hotkv_engine::slot::key_slot(c.as_bytes()) < 5000).unwrap();
    let slot = hotkv_engine::slot::key_slot(channel.as_bytes()).to_string();
    let mut sub = ns[0].client();
    sub.set_timeout(std::time::Duration::from_secs(30));
    let reply = sub.cmd(&["SSUBSCRIBE", &channel]);
    assert_eq!(reply.items()[0], hotkv_test_support::Frame::bulk("ssubscribe"));
    // A second shard channel on node 0, in a slot that stays.
    let other = (0..)
        .map(|i| format!("stays:{i}"))
        .find(|c| {
            let s = hotkv_engine::slot::key_slot(c.as_bytes());
            s < 5000 && s.to_string() != slot
        })
        .unwrap();
    assert_eq!(sub.cmd(&["SSUBSCRIBE", &other]).items()[2].int(), 2);
    let (id0, id1) = (ns[0].cmd(&["CLUSTER", "MYID"]).text(), ns[1].cmd(&["CLUSTER", "MYID"]).text());
    assert_eq!(ns[0].cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &id1]), hotkv_test_support::Frame::ok());
    assert_eq!(ns[1].cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &id0]), hotkv_test_support::Frame::ok());
    // Still served here while migrating.
    assert_eq!(ns[0].cmd(&["SPUBLISH", &channel, "hello"]).int(), 1);
    let msg = sub.read_frame();
    assert_eq!(msg.items()[2], hotkv_test_support::Frame::bulk("hello"));
    assert_eq!(ns[0].cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &id1]), hotkv_test_support::Frame::ok());
    let ended = sub.read_frame();
    let items = ended.items();
    assert_eq!(items[0], hotkv_test_support::Frame::bulk("sunsubscribe"), "{ended:?}");
    assert_eq!(items[1], hotkv_test_support::Frame::bulk(channel.as_bytes()));
    // One shard subscription left (`other`, whose slot did not move).
    assert_eq!(items[2].int(), 1, "{ended:?}");
    assert_eq!(ns[0].cmd(&["PUBSUB", "SHARDNUMSUB", &channel]).items()[1].int(), 0);
}
