//! Failover with real processes: a primary killed with SIGKILL is replaced by its replica, and
//! every write that `WAIT 1` acknowledged is still there; `CLUSTER FAILOVER` swaps a primary
//! and its replica under continuous writes without losing a single acknowledged write; FORCE
//! and TAKEOVER work while the primary is frozen (SIGSTOP); the killed or frozen primary comes
//! back as a replica of the node that replaced it. Node timeouts are short, nodes start in
//! parallel, and every wait is bounded by a condition.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hotkv_engine::slot::key_slot;
use hotkv_test_support::tools::redis_cli_output;
use hotkv_test_support::{Frame, RawClient, SIGCONT, SIGKILL, SIGSTOP, TestServer, free_port, wait_for};

use crate::cluster::{NODE_TIMEOUT, cluster_state, create, nodes, one_cluster_at_a_time};
use crate::pki::Pki;
use crate::{assert_err, builder, info_field};

/// A cluster client for writers that must live through a failover: it follows MOVED, and on a
/// refused connection, CLUSTERDOWN, READONLY or TRYAGAIN it waits a moment and asks another
/// node, until a deadline.
struct Router {
    ports: Vec<u16>,
    slots: HashMap<u16, u16>,
    conns: HashMap<u16, RawClient>,
    next: usize,
}

/// How long one write may keep retrying (a failover takes a few seconds).
const RETRY_FOR: Duration = Duration::from_secs(30);

impl Router {
    fn new(ports: Vec<u16>) -> Router {
        Router { ports, slots: HashMap::new(), conns: HashMap::new(), next: 0 }
    }

    fn conn(&mut self, port: u16) -> Option<&mut RawClient> {
        if let std::collections::hash_map::Entry::Vacant(e) = self.conns.entry(port) {
            let mut c = RawClient::try_connect(port).ok()?;
            c.set_timeout(Duration::from_secs(5));
            e.insert(c);
        }
        self.conns.get_mut(&port)
    }

    /// Forgets where `slot` lives and the connection to `port`, and tries another node next.
    fn lost(&mut self, slot: u16, port: u16) {
        self.slots.remove(&slot);
        self.conns.remove(&port);
        self.next += 1;
        std::thread::sleep(Duration::from_millis(20));
    }

    /// Runs `argv` (its key at 1) on the node serving the key, then `then` on the same
    /// connection. `None` when no node answered in time, or the connection died before
    /// `then`'s reply (the outcome is unknown: not counted as acknowledged).
    fn run(&mut self, argv: &[&str], then: Option<&[&str]>) -> Option<(Frame, Option<Frame>)> {
        let slot = key_slot(argv[1].as_bytes());
        let deadline = Instant::now() + RETRY_FOR;
        while Instant::now() < deadline {
            let port = match self.slots.get(&slot) {
                Some(p) => *p,
                None => self.ports[self.next % self.ports.len()],
            };
            let Some(conn) = self.conn(port) else {
                self.lost(slot, port);
                continue;
            };
            let reply = match conn.try_cmd(argv) {
                Ok(r) => r,
                Err(_) => {
                    self.lost(slot, port);
                    continue;
                }
            };
            let err = reply.error_text().unwrap_or_default();
            if let Some(rest) = err.strip_prefix("MOVED ") {
                let to = rest.rsplit(':').next().and_then(|p| p.parse().ok()).expect("MOVED slot host:port");
                self.slots.insert(slot, to);
                continue;
            }
            if ["CLUSTERDOWN", "READONLY", "TRYAGAIN", "LOADING"].iter().any(|e| err.starts_with(e)) {
                self.lost(slot, port);
                continue;
            }
            self.slots.insert(slot, port);
            let Some(then) = then else { return Some((reply, None)) };
            let conn = self.conns.get_mut(&port)?;
            return match conn.try_cmd(then) {
                Ok(second) => Some((reply, Some(second))),
                Err(_) => {
                    self.conns.remove(&port);
                    None
                }
            };
        }
        None
    }
}

/// Writers setting keys of their own (`w<n>:<i>` = `<i>`), each write once.
struct Writers {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    handles: Vec<JoinHandle<Vec<(String, String)>>>,
}

impl Writers {
    /// `n` writers over `ports`; a write counts as acknowledged when SET said OK and, with
    /// `wait`, `WAIT 1 300` said at least one replica has it.
    fn start(n: usize, ports: &[u16], wait: bool) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicUsize::new(0));
        let handles = (0..n)
            .map(|w| {
                let (stop, acked, ports) = (stop.clone(), acked.clone(), ports.to_vec());
                std::thread::spawn(move || {
                    let mut router = Router::new(ports);
                    let mut mine = Vec::new();
                    let wait_cmd: &[&str] = &["WAIT", "1", "300"];
                    let mut i = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        let (key, value) = (format!("w{w}:{i}"), i.to_string());
                        i += 1;
                        let Some((set, waited)) = router.run(&["SET", &key, &value], wait.then_some(wait_cmd)) else {
                            continue;
                        };
                        let replicated = waited.is_none_or(|f| matches!(f, Frame::Integer(n) if n >= 1));
                        if set == Frame::ok() && replicated {
                            mine.push((key, value));
                            acked.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    mine
                })
            })
            .collect();
        Writers { stop, acked, handles }
    }

    fn acked(&self) -> usize {
        self.acked.load(Ordering::Relaxed)
    }

    /// Waits until `more` further writes were acknowledged.
    fn wait_for_more(&self, more: usize, timeout: Duration) -> bool {
        let target = self.acked() + more;
        wait_for(|| self.acked() >= target, timeout)
    }

    fn finish(self) -> Vec<(String, String)> {
        self.stop.store(true, Ordering::Relaxed);
        self.handles.into_iter().flat_map(|h| h.join().expect("writer")).collect()
    }
}

/// Reads every acknowledged write back through the cluster; returns those missing or wrong.
fn lost_writes(ports: &[u16], acked: &[(String, String)]) -> Vec<String> {
    let mut router = Router::new(ports.to_vec());
    let mut lost = Vec::new();
    for (key, value) in acked {
        match router.run(&["GET", key], None) {
            Some((f, _)) if f == Frame::bulk(value) => {}
            other => lost.push(format!("{key}={value}: {other:?}")),
        }
    }
    lost
}

fn myid(n: &TestServer) -> String {
    n.cmd(&["CLUSTER", "MYID"]).text()
}

/// The `myself` line of a node's CLUSTER NODES.
fn myself_line(n: &TestServer) -> String {
    n.cmd(&["CLUSTER", "NODES"]).text().lines().find(|l| l.contains("myself")).unwrap_or_default().to_owned()
}

fn is_primary_with_slots(n: &TestServer) -> bool {
    let line = myself_line(n);
    line.contains("myself,master") && line.split(' ').nth(8).is_some()
}

fn replicates(n: &TestServer, primary_id: &str) -> bool {
    let line = myself_line(n);
    line.contains("myself,slave") && line.split(' ').nth(3) == Some(primary_id)
}

fn link_up(n: &TestServer) -> bool {
    let text = n.cmd(&["INFO", "replication"]).text();
    info_field(&text, "master_link_status").as_deref() == Some("up")
}

/// Six nodes, three primaries with a replica each, every role known everywhere and every
/// replica in sync. Returns the nodes and, per primary index, its replica's index.
fn six_nodes(extra: &[(&str, &str)]) -> (Vec<TestServer>, Vec<(usize, usize)>) {
    settle_six(nodes(6, extra))
}

/// The directives of a node whose cluster bus and replication links run over mutual TLS, with
/// its own TLS port (the clients of these tests keep the plain ports).
fn tls_directives(pki: &Pki) -> Vec<(String, String)> {
    let mut d = pki.server_config(free_port());
    d.push(("tls-cluster".into(), "yes".into()));
    d.push(("tls-replication".into(), "yes".into()));
    d
}

/// [`six_nodes`] with the bus and replication over TLS ([`tls_directives`]).
fn six_tls_nodes(pki: &Pki) -> (Vec<TestServer>, Vec<(usize, usize)>) {
    let ns = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                s.spawn(|| {
                    let mut b = builder().config("cluster-enabled", "yes").config("cluster-node-timeout", NODE_TIMEOUT);
                    for (k, v) in tls_directives(pki) {
                        b = b.config(&k, &v);
                    }
                    b.spawn()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("node start")).collect()
    });
    settle_six(ns)
}

fn settle_six(ns: Vec<TestServer>) -> (Vec<TestServer>, Vec<(usize, usize)>) {
    create(&ns, 1);
    assert!(wait_for(|| ns.iter().all(|n| cluster_state(n) == "ok"), Duration::from_secs(20)));
    let ids: Vec<String> = ns.iter().map(myid).collect();
    let settled = || {
        ns.iter().all(|n| {
            let table = n.cmd(&["CLUSTER", "NODES"]).text();
            table.lines().filter(|l| l.contains("slave")).count() == 3 && table.matches(" connected").count() == 6
        })
    };
    assert!(wait_for(settled, Duration::from_secs(20)), "{}", ns[0].cmd(&["CLUSTER", "NODES"]).text());
    let mut pairs = Vec::new();
    for (p, n) in ns.iter().enumerate() {
        if !is_primary_with_slots(n) {
            continue;
        }
        let r = (0..6).find(|&r| replicates(&ns[r], &ids[p])).expect("every primary has a replica");
        pairs.push((p, r));
    }
    assert_eq!(pairs.len(), 3);
    assert!(wait_for(|| pairs.iter().all(|&(_, r)| link_up(&ns[r])), Duration::from_secs(20)));
    (ns, pairs)
}

fn ports(ns: &[&TestServer]) -> Vec<u16> {
    ns.iter().map(|n| n.port()).collect()
}

/// Starts a node again from `old`'s directory (its nodes.conf), on a new port.
fn restart(old: &TestServer, extra: &[(&str, &str)]) -> TestServer {
    restart_in(old.dir(), extra)
}

/// Starts a node from the nodes.conf in `dir`, on a new port.
fn restart_in(dir: &std::path::Path, extra: &[(&str, &str)]) -> TestServer {
    let mut b = builder()
        .config("cluster-enabled", "yes")
        .config("cluster-node-timeout", NODE_TIMEOUT)
        .config("dir", &dir.display().to_string());
    for (k, v) in extra {
        b = b.config(k, v);
    }
    b.spawn()
}

fn cluster_check(n: &TestServer) -> String {
    let at = format!("127.0.0.1:{}", n.port());
    redis_cli_output(n.port(), &["--cluster", "check", &at], None).stdout
}

#[test]
fn a_killed_primary_is_replaced_by_its_replica_and_no_acknowledged_write_is_lost() {
    let _alone = one_cluster_at_a_time();
    let (ns, pairs) = six_nodes(&[]);
    let (victim, heir) = pairs[0];
    let heir_id = myid(&ns[heir]);
    // A shard has one id, on its primary and its replica (CLUSTER MYSHARDID), unlike the others.
    let shard = ns[victim].cmd(&["CLUSTER", "MYSHARDID"]).text();
    assert_eq!(shard.len(), 40, "{shard}");
    assert!(wait_for(|| ns[heir].cmd(&["CLUSTER", "MYSHARDID"]).text() == shard, Duration::from_secs(10)));
    let (other, _) = pairs[1];
    assert_ne!(ns[other].cmd(&["CLUSTER", "MYSHARDID"]).text(), shard);
    let all: Vec<&TestServer> = ns.iter().collect();
    let writers = Writers::start(4, &ports(&all), true);
    assert!(writers.wait_for_more(500, Duration::from_secs(30)), "writes are acknowledged");
    let killed = Instant::now();
    ns[victim].signal(SIGKILL);
    let survivors: Vec<&TestServer> = ns.iter().enumerate().filter(|(i, _)| *i != victim).map(|(_, n)| n).collect();
    let took_over = || is_primary_with_slots(&ns[heir]) && survivors.iter().all(|n| cluster_state(n) == "ok");
    assert!(wait_for(took_over, Duration::from_secs(30)), "{}", ns[heir].log());
    let elapsed = killed.elapsed();
    println!("failover: kill -9 of a primary to cluster_state:ok with its replica serving: {} ms", elapsed.as_millis());
    // The replica's log tells the election as Valkey's does.
    let log = ns[heir].log();
    for line in [
        "Start of election delayed for",
        "Starting a failover election for epoch",
        "Failover election won: I'm the new primary.",
        "after successful failover",
    ] {
        assert!(log.contains(line), "{line}\n{log}");
    }
    // Writes go on (those to the new primary wait for a replica in vain until its old primary
    // is back), then every one that WAIT acknowledged reads back.
    assert!(writers.wait_for_more(100, Duration::from_secs(30)));
    let acked = writers.finish();
    let lost = lost_writes(&ports(&survivors), &acked);
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost: {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
    // Back from its nodes.conf, the old primary follows the node that replaced it and syncs.
    let back = restart(&ns[victim], &[]);
    assert!(wait_for(|| replicates(&back, &heir_id) && link_up(&back), Duration::from_secs(30)), "{}", back.log());
    let heir_keys = ns[heir].cmd(&["DBSIZE"]).int();
    assert!(wait_for(|| back.cmd(&["DBSIZE"]).int() == heir_keys, Duration::from_secs(20)));
    assert!(back.log().contains("Configuration change detected. Reconfiguring myself as a replica of node"));
    // The shard kept its id through the failover and the old primary's restart.
    assert_eq!(ns[heir].cmd(&["CLUSTER", "MYSHARDID"]).text(), shard);
    assert_eq!(back.cmd(&["CLUSTER", "MYSHARDID"]).text(), shard);
    // A failover keeps the slots in their shard: no node logs it slot by slot as a migration
    // (it used to write one line per slot, 5461 of them, on every node).
    for n in survivors.iter().copied().chain([&back]) {
        let log = n.log();
        assert!(!log.contains("is migrated from node"), "{}", log.lines().find(|l| l.contains("is migrated")).unwrap());
    }
    let check = cluster_check(&ns[heir]);
    assert!(
        check.contains("[OK] All nodes agree about slots configuration.")
            && check.contains("[OK] All 16384 slots covered."),
        "{check}"
    );
}

#[test]
fn cluster_failover_swaps_roles_under_writes_without_losing_an_acknowledged_write() {
    let _alone = one_cluster_at_a_time();
    let (ns, pairs) = six_nodes(&[]);
    let (primary, replica) = pairs[1];
    let replica_id = myid(&ns[replica]);
    let all: Vec<&TestServer> = ns.iter().collect();
    // Plain SETs: every OK counts, replicated or not.
    let writers = Writers::start(4, &ports(&all), false);
    assert!(writers.wait_for_more(1000, Duration::from_secs(30)));
    assert_eq!(ns[replica].cmd(&["CLUSTER", "FAILOVER"]), Frame::ok());
    let swapped = || is_primary_with_slots(&ns[replica]) && replicates(&ns[primary], &replica_id);
    assert!(wait_for(swapped, Duration::from_secs(15)), "{}\n{}", ns[replica].log(), ns[primary].log());
    assert!(ns[primary].log().contains(&format!("Manual failover requested by replica {replica_id}")));
    let log = ns[replica].log();
    for line in [
        "Manual failover user request accepted (user request from 'id=",
        "Received replication offset for paused primary manual failover:",
        "All primary replication stream processed, manual failover can start.",
        "Failover election won: I'm the new primary.",
    ] {
        assert!(log.contains(line), "{line}\n{log}");
    }
    assert!(writers.wait_for_more(1000, Duration::from_secs(30)));
    let acked = writers.finish();
    let lost = lost_writes(&ports(&all), &acked);
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost: {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
    // The old primary is a replica in sync with the new one, and everyone agrees.
    assert!(wait_for(|| link_up(&ns[primary]), Duration::from_secs(20)));
    let keys = ns[replica].cmd(&["DBSIZE"]).int();
    assert!(wait_for(|| ns[primary].cmd(&["DBSIZE"]).int() == keys, Duration::from_secs(20)));
    assert!(wait_for(|| ns.iter().all(|n| cluster_state(n) == "ok"), Duration::from_secs(10)));
    let check = cluster_check(&ns[0]);
    assert!(
        check.contains("[OK] All nodes agree about slots configuration.")
            && check.contains("[OK] All 16384 slots covered."),
        "{check}"
    );
    // A primary refuses, as Valkey.
    assert_err(&ns[replica].cmd(&["CLUSTER", "FAILOVER"]), "ERR You should send CLUSTER FAILOVER to a replica");
    assert_err(&ns[primary].cmd(&["CLUSTER", "FAILOVER", "NOW"]), "ERR syntax error");
}

#[test]
fn force_and_takeover_fail_over_while_the_primary_is_frozen() {
    let _alone = one_cluster_at_a_time();
    // No automatic failover: only the commands move the slots.
    let no_auto = [("cluster-replica-no-failover", "yes")];
    let (ns, pairs) = six_nodes(&no_auto);
    // TAKEOVER: no vote, no primary; at once.
    let (p1, r1) = pairs[0];
    let r1_id = myid(&ns[r1]);
    ns[p1].signal(SIGSTOP);
    let asked = Instant::now();
    assert_eq!(ns[r1].cmd(&["CLUSTER", "FAILOVER", "TAKEOVER"]), Frame::ok());
    assert!(is_primary_with_slots(&ns[r1]), "{}", myself_line(&ns[r1]));
    let others: Vec<&TestServer> = ns.iter().enumerate().filter(|(i, _)| *i != p1).map(|(_, n)| n).collect();
    assert!(wait_for(|| others.iter().all(|n| cluster_state(n) == "ok"), Duration::from_secs(10)));
    println!("failover: TAKEOVER to cluster_state:ok: {} ms", asked.elapsed().as_millis());
    assert!(ns[r1].log().contains("Taking over the primary (user request from 'id="));
    ns[p1].signal(SIGCONT);
    assert!(wait_for(|| replicates(&ns[p1], &r1_id) && link_up(&ns[p1]), Duration::from_secs(20)), "{}", ns[p1].log());
    // FORCE: the other primaries vote, the frozen one is not asked. Once the frozen primary is
    // FAIL the default refuses, as Valkey.
    let (p2, r2) = pairs[1];
    let r2_id = myid(&ns[r2]);
    let p2_id = myid(&ns[p2]);
    ns[p2].signal(SIGSTOP);
    let failed = || {
        let table = ns[r2].cmd(&["CLUSTER", "NODES"]).text();
        let flags = table.lines().find(|l| l.starts_with(&p2_id)).and_then(|l| l.split(' ').nth(2)).unwrap_or("");
        flags.split(',').any(|f| f == "fail")
    };
    assert!(wait_for(failed, Duration::from_secs(15)));
    assert_err(
        &ns[r2].cmd(&["CLUSTER", "FAILOVER"]),
        "ERR Master is down or failed, please use CLUSTER FAILOVER FORCE",
    );
    // cluster-replica-no-failover held the replica back all along.
    assert!(!is_primary_with_slots(&ns[r2]));
    let asked = Instant::now();
    assert_eq!(ns[r2].cmd(&["CLUSTER", "FAILOVER", "FORCE"]), Frame::ok());
    let others: Vec<&TestServer> = ns.iter().enumerate().filter(|(i, _)| *i != p2).map(|(_, n)| n).collect();
    assert!(
        wait_for(
            || is_primary_with_slots(&ns[r2]) && others.iter().all(|n| cluster_state(n) == "ok"),
            Duration::from_secs(15)
        ),
        "{}",
        ns[r2].log()
    );
    println!("failover: FORCE to cluster_state:ok: {} ms", asked.elapsed().as_millis());
    assert!(ns[r2].log().contains("Forced failover user request accepted (user request from 'id="));
    ns[p2].signal(SIGCONT);
    assert!(wait_for(|| replicates(&ns[p2], &r2_id) && link_up(&ns[p2]), Duration::from_secs(20)), "{}", ns[p2].log());
    let check = cluster_check(&ns[r2]);
    assert!(
        check.contains("[OK] All nodes agree about slots configuration.")
            && check.contains("[OK] All 16384 slots covered."),
        "{check}"
    );
}

#[test]
fn twenty_kills_of_a_primary_in_a_row_lose_no_write_that_wait_acknowledged() {
    let _alone = one_cluster_at_a_time();
    // The cluster: the bus and the replication links on mutual TLS.
    let pki = Pki::new();
    let (ns, pairs) = six_tls_nodes(&pki);
    let tls_link = |n: &TestServer| {
        n.log().lines().any(|l| l.contains("Replication: connected to primary") && l.contains(" over TLS"))
    };
    let (p, r) = pairs[0];
    assert!(tls_link(&ns[r]), "the replication link is not TLS\n{}", ns[r].log());
    // The two nodes of the shard under fire take turns; each keeps its data directory.
    let dirs = [ns[p].dir().to_path_buf(), ns[r].dir().to_path_buf()];
    let mut live: [Option<TestServer>; 2] = [None, None];
    let steady: Vec<&TestServer> = ns.iter().enumerate().filter(|(i, _)| *i != p && *i != r).map(|(_, n)| n).collect();
    let all: Vec<&TestServer> = ns.iter().collect();
    let writers = Writers::start(4, &ports(&all), true);
    assert!(writers.wait_for_more(200, Duration::from_secs(30)));
    let started = Instant::now();
    let mut times = Vec::new();
    // Index into `dirs` of the current primary; `ns` serves until its first kill.
    let mut primary = 0;
    for round in 0..20 {
        let heir = 1 - primary;
        let node = |i: usize| live[i].as_ref().unwrap_or(if i == 0 { &ns[p] } else { &ns[r] });
        let heir_id = myid(node(heir));
        assert!(wait_for(|| link_up(node(heir)), Duration::from_secs(30)), "round {round}: the replica is not in sync");
        assert!(writers.wait_for_more(20, Duration::from_secs(30)), "round {round}: no writes acknowledged");
        let killed = Instant::now();
        node(primary).signal(SIGKILL);
        let took_over = || is_primary_with_slots(node(heir)) && steady.iter().all(|n| cluster_state(n) == "ok");
        assert!(wait_for(took_over, Duration::from_secs(30)), "round {round}\n{}", node(heir).log());
        times.push(killed.elapsed().as_millis());
        let conf = std::fs::read_to_string(dirs[primary].join("nodes.conf")).unwrap_or_default();
        let tls = tls_directives(&pki);
        let tls: Vec<(&str, &str)> = tls.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let back = restart_in(&dirs[primary], &tls);
        assert!(
            wait_for(|| replicates(&back, &heir_id) && link_up(&back), Duration::from_secs(30)),
            "round {round}\n{conf}\n{}\n{}\n{}",
            back.cmd(&["CLUSTER", "NODES"]).text(),
            back.cmd(&["INFO", "replication"]).text(),
            back.log()
        );
        assert!(tls_link(&back), "round {round}: the replication link is not TLS\n{}", back.log());
        live[primary] = Some(back);
        primary = heir;
    }
    let acked = writers.finish();
    let mut ports_now = ports(&steady);
    ports_now.extend(live.iter().flatten().map(TestServer::port));
    let lost = lost_writes(&ports_now, &acked);
    times.sort_unstable();
    println!(
        "failover: 20 kills in {} s; kill to cluster_state:ok: min {} ms, median {} ms, max {} ms; {} writes acknowledged",
        started.elapsed().as_secs(),
        times[0],
        times[times.len() / 2],
        times[times.len() - 1],
        acked.len()
    );
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost: {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(10)]
    );
}

/// The replication offset CLUSTER SHARDS on `n` reports for node `id`.
fn shard_offset(n: &TestServer, id: &str) -> Option<i64> {
    fn find(f: &Frame, id: &str) -> Option<i64> {
        let Frame::Array(items) = f else { return None };
        let field = |name: &str| items.iter().position(|x| x.text_lossy() == name).and_then(|i| items.get(i + 1));
        if field("id").map(Frame::text_lossy).as_deref() == Some(id) {
            return field("replication-offset").map(Frame::int);
        }
        items.iter().find_map(|x| find(x, id))
    }
    find(&n.cmd(&["CLUSTER", "SHARDS"]), id)
}

/// A key that node `n` serves.
fn key_served_by(n: &TestServer) -> String {
    (0..).map(|i| format!("key{i}")).find(|k| !n.cmd(&["SET", k, "0"]).is_error()).expect("some key is served here")
}

#[test]
fn a_replica_moved_to_another_shard_reports_offset_zero_until_its_full_sync_completes() {
    let _alone = one_cluster_at_a_time();
    let (ns, pairs) = six_nodes(&[]);
    let ((p0, _), (p1, r1)) = (pairs[0], pairs[1]);
    let (p0_id, p1_id, r1_id) = (myid(&ns[p0]), myid(&ns[p1]), myid(&ns[r1]));
    // Shard 1's stream runs far ahead of shard 0's; its replica follows it.
    let key = key_served_by(&ns[p1]);
    for _ in 0..500 {
        ns[p1].cmd(&["INCR", &key]);
    }
    let caught_up = || shard_offset(&ns[r1], &r1_id).is_some_and(|o| Some(o) == shard_offset(&ns[p1], &p1_id));
    assert!(wait_for(caught_up, Duration::from_secs(20)));
    assert!(shard_offset(&ns[r1], &r1_id) > Some(1000));
    // Shard 0's primary holds one key and takes seconds to snapshot it (Valkey's
    // replica-migration test holds its primary in the BGSAVE the same way).
    key_served_by(&ns[p0]);
    assert_eq!(ns[p0].cmd(&["CONFIG", "SET", "rdb-key-save-delay", "4000000"]), Frame::ok());
    assert_eq!(ns[r1].cmd(&["CLUSTER", "REPLICATE", &p0_id]), Frame::ok());
    // It has nothing of shard 0's stream yet: it says 0, to itself and to every other node, so
    // it would rank behind shard 0's own replica in an election.
    assert!(wait_for(|| shard_offset(&ns[r1], &r1_id) == Some(0), Duration::from_secs(2)));
    assert!(wait_for(|| shard_offset(&ns[p0], &r1_id) == Some(0), Duration::from_secs(2)));
    let text = ns[r1].cmd(&["INFO", "replication"]).text();
    assert_eq!(info_field(&text, "master_link_status").as_deref(), Some("down"), "{text}");
    // Once the sync completes, it holds shard 0's stream and its offset.
    let synced = || link_up(&ns[r1]) && shard_offset(&ns[r1], &r1_id) == shard_offset(&ns[p0], &p0_id);
    assert!(wait_for(synced, Duration::from_secs(30)), "{}", ns[r1].log());
    assert!(shard_offset(&ns[r1], &r1_id) > Some(0));
}
