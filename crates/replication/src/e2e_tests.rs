//! End-to-end tests: our primary and replica links over in-memory pipes, and hand-written
//! primaries that misbehave.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hotkv_engine::{Effects, WriteSink};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use crate::testkit::{Applied, Logs, Script, Target, TempDir, TestApplier, TestConnector, TestSource, until};
use crate::{
    Handshake, InfoExtra, LinkState, Primary, PrimarySettings, ReplicaConfig, ReplicaHandle, ReplicaLink, ReplicaState,
    SyncDecision, SyncRequest, render_info,
};

fn set(db: usize, k: &str, v: &str) -> Effects {
    let mut e = Effects::default();
    e.begin(true);
    e.push(db, &["SET", k, v]);
    e
}

fn cfg() -> ReplicaConfig {
    ReplicaConfig {
        ack_period: Duration::from_millis(50),
        retry_delay: Duration::from_millis(50),
        ..ReplicaConfig::new("primary.test", 6379, 6380)
    }
}

/// A node: its own primary state plus a link replicating from `connector`.
struct Node {
    primary: Arc<Primary>,
    applied: Arc<Mutex<Applied>>,
    link: ReplicaHandle,
}

fn replica_of(connector: Arc<TestConnector>, config: ReplicaConfig) -> Node {
    let primary = Primary::new(PrimarySettings::default());
    let (applier, applied) = TestApplier::recording();
    let link = ReplicaLink::spawn(config, connector, applier, primary.clone());
    Node { primary, applied, link }
}

/// As [`replica_of`], receiving full syncs into files in `dir` first.
fn replica_staged_in(connector: Arc<TestConnector>, config: ReplicaConfig, dir: &std::path::Path) -> Node {
    let primary = Primary::new(PrimarySettings::default());
    let (applier, applied) = TestApplier::recording();
    applied.lock().stage_in = Some(dir.to_path_buf());
    let link = ReplicaLink::spawn(config, connector, applier, primary.clone());
    Node { primary, applied, link }
}

fn cmd_text(c: &[u8]) -> String {
    String::from_utf8_lossy(c).replace("\r\n", " ")
}

fn commands(a: &Mutex<Applied>) -> Vec<String> {
    a.lock().commands.iter().map(|c| cmd_text(c)).collect()
}

async fn synced(primary: &Primary, node: &Node) {
    until("the replica to reach the primary's offset", 10, || node.link.status().offset == Some(primary.offset()))
        .await;
}

#[tokio::test]
async fn full_sync_then_stream_with_eof_mark() {
    let p = Primary::new(PrimarySettings::default());
    let src = TestSource::new(&p);
    let conn = TestConnector::to_primary(&p, &src);
    let r = replica_of(conn.clone(), cfg());
    until("the snapshot", 10, || r.applied.lock().ended_ok == 1).await;
    assert_eq!(r.applied.lock().rdb, src.payload, "the RDB arrives whole, without the EOF mark");
    p.append(&set(0, "a", "1"));
    p.append(&set(2, "b", "2"));
    synced(&p, &r).await;
    assert_eq!(
        commands(&r.applied),
        vec!["*2 $6 SELECT $1 0 ", "*3 $3 SET $1 a $1 1 ", "*2 $6 SELECT $1 2 ", "*3 $3 SET $1 b $1 2 "]
    );
    // The replica took over the primary's id and offset, and its ACKs reach the primary.
    assert_eq!(r.primary.replid(), p.replid());
    assert_eq!(r.primary.offset(), p.offset());
    until("the ACK", 10, || p.replicas().first().is_some_and(|s| s.ack_offset == p.offset())).await;
    let s = &p.replicas()[0];
    assert_eq!(s.state, ReplicaState::Online);
    assert_eq!(s.port, 6380);
    assert_eq!(s.ip, "127.0.0.1");
    assert_eq!(src.taken.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn full_sync_with_length_prefixed_bulk() {
    let p = Primary::new(PrimarySettings::default());
    p.append(&set(0, "ignored", "no backlog yet"));
    let src = TestSource::new(&p);
    let conn = TestConnector::new(Target::Primary { primary: p.clone(), source: src.clone(), no_eof: true });
    let r = replica_of(conn, cfg());
    until("the snapshot", 10, || r.applied.lock().ended_ok == 1).await;
    assert_eq!(r.applied.lock().rdb, src.payload);
    p.append(&set(0, "k", "v"));
    synced(&p, &r).await;
    assert_eq!(commands(&r.applied), vec!["*2 $6 SELECT $1 0 ", "*3 $3 SET $1 k $1 v "]);
}

#[tokio::test]
async fn partial_resync_after_a_reconnect_sends_no_snapshot() {
    let p = Primary::new(PrimarySettings::default());
    let src = TestSource::new(&p);
    let conn = TestConnector::to_primary(&p, &src);
    let r = replica_of(conn.clone(), cfg());
    until("online", 10, || r.link.status().state == LinkState::Connected).await;
    p.append(&set(0, "a", "1"));
    synced(&p, &r).await;
    assert!(r.link.status().down_since.is_none());
    // Cut the link and write while it is down.
    conn.refuse.store(true, Ordering::SeqCst);
    conn.cut();
    until("the link to notice", 10, || r.link.status().state != LinkState::Connected).await;
    assert!(r.link.status().down_since.is_some());
    p.append(&set(0, "b", "2"));
    p.append(&set(1, "c", "3"));
    conn.refuse.store(false, Ordering::SeqCst);
    synced(&p, &r).await;
    assert_eq!(src.taken.load(Ordering::SeqCst), 1, "no second snapshot");
    assert_eq!(r.applied.lock().begun, 1);
    assert_eq!(
        commands(&r.applied),
        vec![
            "*2 $6 SELECT $1 0 ",
            "*3 $3 SET $1 a $1 1 ",
            "*3 $3 SET $1 b $1 2 ",
            "*2 $6 SELECT $1 1 ",
            "*3 $3 SET $1 c $1 3 "
        ]
    );
}

#[tokio::test]
async fn full_resync_when_the_offset_left_the_backlog() {
    let p = Primary::new(PrimarySettings { backlog_size: 16 * 1024, ..PrimarySettings::default() });
    let src = TestSource::new(&p);
    let conn = TestConnector::to_primary(&p, &src);
    let r = replica_of(conn.clone(), cfg());
    until("the first sync", 10, || r.applied.lock().ended_ok == 1).await;
    conn.refuse.store(true, Ordering::SeqCst);
    conn.cut();
    until("the link to notice", 10, || r.link.status().state != LinkState::Connected).await;
    let big = "x".repeat(1000);
    for i in 0..100 {
        p.append(&set(0, &format!("k{i}"), &big));
    }
    assert!(p.backlog_window().0 > 1, "the start of the stream was trimmed");
    conn.refuse.store(false, Ordering::SeqCst);
    until("the second full sync", 10, || r.applied.lock().ended_ok == 2).await;
    assert_eq!(src.taken.load(Ordering::SeqCst), 2);
    p.append(&set(0, "after", "1"));
    synced(&p, &r).await;
    assert_eq!(commands(&r.applied), vec!["*2 $6 SELECT $1 0 ", "*3 $3 SET $5 after $1 1 "]);
}

#[tokio::test]
async fn a_promoted_replica_continues_its_siblings_with_the_second_id() {
    let p = Primary::new(PrimarySettings::default());
    let src = TestSource::new(&p);
    let conn = TestConnector::to_primary(&p, &src);
    let r1 = replica_of(conn.clone(), cfg());
    let r2 = replica_of(conn.clone(), cfg());
    until("both online", 10, || p.replicas().iter().filter(|s| s.state == ReplicaState::Online).count() == 2).await;
    p.append(&set(0, "a", "1"));
    synced(&p, &r1).await;
    synced(&p, &r2).await;
    let old_id = p.replid();
    let end = p.offset();
    // Failover: r1 becomes the primary, r2 follows it.
    let Node { primary: new_primary, link: l1, .. } = r1;
    l1.stop().await;
    new_primary.promote();
    assert_eq!(new_primary.replid2(), (old_id.clone(), end as i64 + 1));
    let Node { primary: r2_primary, applied: r2_applied, link: l2 } = r2;
    l2.stop().await;
    let src2 = TestSource::new(&new_primary);
    let conn2 = TestConnector::to_primary(&new_primary, &src2);
    let l2 = ReplicaLink::spawn(cfg(), conn2, Box::new(TestApplier(r2_applied.clone())), r2_primary.clone());
    until("the continuation", 10, || l2.status().state == LinkState::Connected).await;
    assert_eq!(src2.taken.load(Ordering::SeqCst), 0, "continued, no snapshot");
    assert_eq!(r2_applied.lock().begun, 1);
    // r2 switched to the new id and keeps the old one as its second id.
    assert_eq!(r2_primary.replid(), new_primary.replid());
    assert_eq!(r2_primary.replid2(), (old_id, end as i64 + 1));
    new_primary.append(&set(0, "b", "2"));
    until("the new write", 10, || l2.status().offset == Some(new_primary.offset())).await;
    assert_eq!(commands(&r2_applied).last().map(String::as_str), Some("*3 $3 SET $1 b $1 2 "));
}

#[tokio::test]
async fn chained_replica_stream_is_byte_identical() {
    let p = Primary::new(PrimarySettings::default());
    let src = TestSource::new(&p);
    let r1 = replica_of(TestConnector::to_primary(&p, &src), cfg());
    until("r1's sync", 10, || r1.link.status().state == LinkState::Connected).await;
    let src1 = TestSource::new(&r1.primary);
    let r2 = replica_of(TestConnector::to_primary(&r1.primary, &src1), cfg());
    until("r2's sync", 10, || r2.link.status().state == LinkState::Connected).await;
    let start = p.offset();
    for i in 0..50 {
        p.append(&set(i % 3, &format!("k{i}"), "v"));
    }
    p.cron(); // a PING in the stream too
    // The middle replica's own cron adds nothing, over a whole ping period: its stream is its
    // primary's.
    for _ in 0..PrimarySettings::default().ping_period {
        r1.primary.cron();
    }
    synced(&p, &r1).await;
    synced(&p, &r2).await;
    let original = p.stream_after(start);
    assert!(!original.is_empty());
    assert_eq!(r1.primary.stream_after(start), original);
    assert_eq!(r2.primary.stream_after(start), original);
    assert_eq!(r2.primary.replid(), p.replid());
    assert_eq!(r2.primary.offset(), p.offset());
}

#[tokio::test]
async fn wait_counts_replicas_that_acknowledged() {
    let p = Primary::new(PrimarySettings::default());
    let src = TestSource::new(&p);
    let conn = TestConnector::to_primary(&p, &src);
    // ACKs only on request, so WAIT must ask with GETACK.
    let slow_acks = ReplicaConfig { ack_period: Duration::from_secs(3600), ..cfg() };
    let r1 = replica_of(conn.clone(), slow_acks.clone());
    let r2 = replica_of(conn.clone(), slow_acks);
    until("both online", 10, || p.replicas().iter().filter(|s| s.state == ReplicaState::Online).count() == 2).await;
    p.append(&set(0, "k", "v"));
    let target = p.offset();
    let n = tokio::time::timeout(Duration::from_secs(10), p.wait_for(target, 2, None)).await.expect("WAIT returns");
    assert_eq!(n, 2);
    // Nobody else: asking for three gives up at the timeout with the two it has.
    let n = p.wait_for(target, 3, Some(Duration::from_millis(100))).await;
    assert_eq!(n, 2);
    // The GETACK is in the stream, once, and replicas answered with the offset before it.
    assert!(p.stream_after(target).starts_with(b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n"));
    assert_eq!(p.count_acked(target), 2);
    assert_eq!(p.count_acked(p.offset() + 1), 0);
    drop((r1, r2));
}

#[tokio::test]
async fn min_replicas_good_count_follows_lag() {
    let p = Primary::new(PrimarySettings {
        min_replicas_to_write: 1,
        min_replicas_max_lag: 10,
        ..PrimarySettings::default()
    });
    assert!(!p.writes_allowed());
    let src = TestSource::new(&p);
    let r = replica_of(TestConnector::to_primary(&p, &src), cfg());
    until("a good replica", 10, || p.good_replicas() == 1).await;
    assert!(p.writes_allowed());
    drop(r);
}

#[tokio::test]
async fn slow_replica_is_dropped_at_the_hard_limit_and_memory_is_released() {
    let (logs, _guard) = Logs::capture();
    let settings = PrimarySettings { backlog_size: 16 * 1024, obuf_hard: 64 * 1024, ..PrimarySettings::default() };
    let p = Primary::new(settings);
    let src = TestSource::new(&p);
    // A replica that never reads: its pipe fills up and the session blocks on the write.
    let (ours, _never_read) = tokio::io::duplex(1024);
    let hs = Handshake { listening_port: 7777, ..Handshake::default() };
    let session =
        p.accept_sync(&SyncRequest { replid: "?".into(), offset: -1, psync: true }, &hs, 42, "127.0.0.1:50000");
    let task = tokio::spawn(async move { session.run(ours, &[], &*src).await });
    let big = "y".repeat(1000);
    for i in 0..300 {
        p.append(&set(0, &format!("k{i}"), &big));
        tokio::task::yield_now().await;
    }
    let result = tokio::time::timeout(Duration::from_secs(10), task).await.expect("session ends").expect("no panic");
    assert!(matches!(result, Err(crate::Error::Dropped(_))), "{result:?}");
    assert!(p.replicas().is_empty());
    // Only the backlog window (plus at most a block or two) stays.
    let (held, _) = p.buffer_memory_split(0);
    assert!(held <= 16 * 1024 + 3 * 16 * 1024, "{held}");
    assert!(
        logs.text().contains(
            "Client id=42 addr=127.0.0.1:50000 flags=S scheduled to be closed ASAP for overcoming of output buffer limits."
        ),
        "{}",
        logs.text()
    );
}

#[tokio::test(start_paused = true)]
async fn soft_limit_drops_after_its_duration() {
    let settings = PrimarySettings {
        backlog_size: 16 * 1024,
        obuf_hard: 0,
        obuf_soft: 32 * 1024,
        obuf_soft_duration: Duration::from_secs(60),
        ..PrimarySettings::default()
    };
    let p = Primary::new(settings);
    let src = TestSource::new(&p);
    let (ours, _never_read) = tokio::io::duplex(1024);
    let session = p.accept_sync(
        &SyncRequest { replid: "?".into(), offset: -1, psync: true },
        &Handshake::default(),
        1,
        "127.0.0.1:1",
    );
    let task = tokio::spawn(async move { session.run(ours, &[], &*src).await });
    // Writes after the snapshot's point are what the replica owes.
    until("the bulk", 10, || p.replicas()[0].state == ReplicaState::SendBulk).await;
    for i in 0..60 {
        p.append(&set(0, &format!("k{i}"), &"z".repeat(1000)));
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    p.cron();
    assert_eq!(p.replicas().len(), 1, "still within the soft limit's grace");
    tokio::time::sleep(Duration::from_secs(31)).await;
    p.cron();
    let result = task.await.expect("no panic");
    assert!(matches!(result, Err(crate::Error::Dropped(_))));
}

/// Received to disk (both forms), the snapshot loads whole from the file, which stays as
/// `dbfilename`; no temp file is left, and the stream follows.
#[tokio::test]
async fn a_full_sync_received_to_disk_loads_whole_then_streams() {
    for no_eof in [false, true] {
        let dir = TempDir::new(&format!("e2e-staged-{no_eof}"));
        let p = Primary::new(PrimarySettings::default());
        let src = TestSource::new(&p);
        let conn = TestConnector::new(Target::Primary { primary: p.clone(), source: src.clone(), no_eof });
        let r = replica_staged_in(conn, cfg(), dir.path());
        until("the snapshot", 10, || r.applied.lock().ended_ok == 1).await;
        assert_eq!(r.applied.lock().rdb, src.payload, "no_eof {no_eof}");
        assert_eq!(std::fs::read(dir.path().join("dump.rdb")).unwrap(), src.payload);
        assert_eq!(dir.files("temp-"), Vec::<String>::new());
        p.append(&set(0, "a", "1"));
        synced(&p, &r).await;
        assert_eq!(commands(&r.applied), vec!["*2 $6 SELECT $1 0 ", "*3 $3 SET $1 a $1 1 "]);
        r.link.stop().await;
    }
}

#[tokio::test]
async fn link_log_lines_name_the_primary_and_tls() {
    let (logs, _guard) = Logs::capture();
    let p = Primary::new(PrimarySettings::default());
    let src = TestSource::new(&p);
    let conn = TestConnector::with_tls(Target::Primary { primary: p.clone(), source: src, no_eof: false }, true);
    let r = replica_of(conn, cfg());
    until("online", 10, || r.link.status().state == LinkState::Connected).await;
    r.link.stop().await;
    let text = logs.text();
    for line in [
        "Replication: becoming a replica of primary.test:6379",
        "Replication: connecting to primary primary.test:6379",
        "Replication: connected to primary primary.test:6379 over TLS",
        "Full resync from primary: ",
        "PRIMARY <-> REPLICA sync: Finished with success",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

// ---- hand-written primaries ----

/// Prints the captured log if the test fails.
struct PrintOnPanic(Logs);

impl Drop for PrintOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("log:\n{}", self.0.text());
        }
    }
}

/// Reads from the replica until `needle` has arrived, adding what it read to `seen`.
async fn read_until(s: &mut DuplexStream, seen: &mut Vec<u8>, needle: &[u8]) {
    let mut buf = [0u8; 4096];
    while !seen.windows(needle.len()).any(|w| w == needle) {
        let n = s.read(&mut buf).await.expect("read");
        assert!(n > 0, "replica closed before sending {:?}", String::from_utf8_lossy(needle));
        seen.extend_from_slice(&buf[..n]);
    }
}

const ID: &str = "1111111111222222222233333333334444444444";

/// Handshake replies for PING, REPLCONF x3, then whatever `after_psync` sends.
fn scripted(after_psync: Vec<u8>, then: Option<Arc<Mutex<Vec<u8>>>>) -> Script {
    scripted_with(after_psync, then, false)
}

/// As [`scripted`]; with `hang_up` the primary closes the connection after its script.
fn scripted_with(after_psync: Vec<u8>, then: Option<Arc<Mutex<Vec<u8>>>>, hang_up: bool) -> Script {
    let after = Arc::new(after_psync);
    Arc::new(move |mut s: DuplexStream| {
        let after = after.clone();
        let then = then.clone();
        Box::pin(async move {
            let mut seen = Vec::new();
            read_until(&mut s, &mut seen, b"PING\r\n").await;
            let _ = s.write_all(b"+PONG\r\n").await;
            read_until(&mut s, &mut seen, b"8.0.1\r\n").await;
            let _ = s.write_all(b"+OK\r\n+OK\r\n-ERR unknown option\r\n").await;
            read_until(&mut s, &mut seen, b"PSYNC\r\n").await;
            // The id and offset: four more line ends after the command name.
            let at = seen.windows(7).position(|w| w == b"PSYNC\r\n").unwrap_or(0);
            while seen[at..].windows(2).filter(|w| w == b"\r\n").count() < 5 {
                let mut more = [0u8; 256];
                match s.read(&mut more).await {
                    Ok(n) if n > 0 => seen.extend_from_slice(&more[..n]),
                    _ => return,
                }
            }
            let _ = s.write_all(&after).await;
            if hang_up {
                return;
            }
            // Keep reading (ACKs) so the replica is never blocked on us.
            let mut buf = [0u8; 4096];
            while let Ok(n) = s.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                if let Some(t) = &then {
                    t.lock().extend_from_slice(&buf[..n]);
                }
            }
        })
    })
}

#[tokio::test]
async fn keepalive_newlines_before_the_reply_and_the_bulk_are_skipped() {
    let rdb = b"REDIS0011-fake-rdb\xff";
    let mut script = format!("\n\n+FULLRESYNC {ID} 100\r\n\n\n${}\r\n", rdb.len()).into_bytes();
    script.extend_from_slice(rdb);
    script.extend_from_slice(b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n");
    let conn = TestConnector::new(Target::Script(scripted(script, None)));
    let r = replica_of(conn, cfg());
    until("the stream", 10, || r.link.status().offset == Some(100 + 14 + 20)).await;
    let a = r.applied.lock();
    assert_eq!(a.rdb, rdb);
    assert_eq!(a.commands, vec![b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n".to_vec()], "PING is counted, not applied");
    assert_eq!(r.primary.replid(), ID);
}

#[tokio::test]
async fn eof_mark_split_across_reads_and_followed_by_the_stream() {
    let mark = "abcdefghijabcdefghijabcdefghijabcdefghij";
    let mut rdb = b"REDIS0011".to_vec();
    rdb.extend(std::iter::repeat_n(b'a', 200_000)); // several reads, and a near-miss prefix of the mark
    rdb.push(0xff);
    let mut script = format!("+FULLRESYNC {ID} 0\r\n$EOF:{mark}\r\n").into_bytes();
    script.extend_from_slice(&rdb);
    script.extend_from_slice(mark.as_bytes());
    script.extend_from_slice(b"*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n");
    let conn = TestConnector::new(Target::Script(scripted(script, None)));
    let r = replica_of(conn, cfg());
    until("the stream", 10, || r.link.status().offset == Some(20)).await;
    assert!(r.applied.lock().rdb == rdb);
}

#[tokio::test]
async fn getack_is_answered_with_the_offset_before_it() {
    let from_replica = Arc::new(Mutex::new(Vec::new()));
    let set_cmd = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
    let mut script = format!("+FULLRESYNC {ID} 1000\r\n$3\r\nRDB").into_bytes();
    script.extend_from_slice(set_cmd);
    script.extend_from_slice(b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n");
    let conn = TestConnector::new(Target::Script(scripted(script, Some(from_replica.clone()))));
    let r = replica_of(conn, ReplicaConfig { ack_period: Duration::from_secs(3600), ..cfg() });
    let want = format!("*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n$4\r\n{}\r\n", 1000 + set_cmd.len());
    until("the ACK for GETACK", 10, || String::from_utf8_lossy(&from_replica.lock()).contains(&want)).await;
    until("the offset", 10, || r.link.status().offset == Some(1000 + set_cmd.len() as u64 + 37)).await;
    // The ACK right after the snapshot reports the snapshot's offset.
    assert!(
        String::from_utf8_lossy(&from_replica.lock())
            .starts_with("*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n$4\r\n1000\r\n")
    );
}

/// A primary that sends `reply` after the handshake must make the link drop and retry.
async fn hostile(reply: Vec<u8>, config: ReplicaConfig) {
    let (logs, _guard) = Logs::capture();
    let _print = PrintOnPanic(logs);
    let conn = TestConnector::new(Target::Script(scripted_with(reply.clone(), None, true)));
    let r = replica_of(conn.clone(), config);
    let what = format!("retries after {:?}", String::from_utf8_lossy(&reply[..reply.len().min(60)]));
    until(&what, 10, || conn.connects.load(Ordering::SeqCst) >= 3).await;
    assert_ne!(r.link.status().state, LinkState::Stopped);
    r.link.stop().await;
}

#[tokio::test]
async fn hostile_primaries_are_dropped_and_retried() {
    let sync = format!("+FULLRESYNC {ID} 0\r\n");
    let cases: Vec<Vec<u8>> = vec![
        b"+FULLRESYNC garbage\r\n".to_vec(),
        b"+CONTINUE\r\n".to_vec(), // continuing a history we do not have
        b"-LOADING try later\r\n".to_vec(),
        b"what is this\r\n".to_vec(),
        format!("{sync}$EOF:short\r\n").into_bytes(),
        format!("{sync}$99999999999999\r\nREDIS").into_bytes(),
        format!("{sync}:12\r\n").into_bytes(),
        format!("{sync}-ERR aborted\r\n").into_bytes(),
        format!("{sync}$3\r\nRDB*abc\r\n").into_bytes(),
        format!("{sync}$3\r\nRDBSET k v\r\n").into_bytes(),
        format!("{sync}$3\r\nRDB*1\r\n$999999999\r\n").into_bytes(),
        vec![b'+'; 100_000], // a reply line that never ends
    ];
    let small = ReplicaConfig { max_bulk_len: 1024 * 1024, ..cfg() };
    for case in cases {
        hostile(case, small.clone()).await;
    }
}

/// A primary gone in the middle of its snapshot: the half-loaded data is dropped, with the
/// lines Valkey logs for a short read (its tests and operators look for "Internal error in
/// RDB"), and the link tries again.
#[tokio::test]
async fn a_snapshot_cut_short_is_logged_as_valkey_does_and_retried() {
    let (logs, _guard) = Logs::capture();
    let _print = PrintOnPanic(logs.clone());
    let mut script = format!("+FULLRESYNC {ID} 0\r\n$EOF:{}\r\nREDIS0011", "m".repeat(40)).into_bytes();
    script.extend_from_slice(&[b'x'; 100]);
    let conn = TestConnector::new(Target::Script(scripted_with(script, None, true)));
    let r = replica_of(conn.clone(), cfg());
    until("a retry", 10, || conn.connects.load(Ordering::SeqCst) >= 2).await;
    r.link.stop().await;
    assert!(r.applied.lock().ended_failed >= 1, "the partial load was abandoned");
    let text = logs.text();
    for line in [
        "Internal error in RDB reading offset 70 -> Unexpected EOF reading RDB file. Failure loading rdb format from socket, assuming connection error, resuming operation.",
        "Failed trying to load the PRIMARY synchronization DB from socket, check server logs.",
    ] {
        assert!(text.contains(line), "missing {line:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn silent_primary_times_out() {
    let conn = TestConnector::new(Target::Script(scripted(format!("+FULLRESYNC {ID} 0\r\n$0\r\n").into_bytes(), None)));
    let r = replica_of(
        conn.clone(),
        ReplicaConfig { timeout: crate::replica::LiveDuration::new(Duration::from_secs(60)), ..cfg() },
    );
    until("connected", 100, || r.link.status().state == LinkState::Connected).await;
    tokio::time::sleep(Duration::from_secs(61)).await;
    until("the timeout", 100, || conn.connects.load(Ordering::SeqCst) >= 2).await;
}

#[tokio::test]
async fn info_replication_fields_in_valkey_order() {
    let p = Primary::new(PrimarySettings::default());
    let src = TestSource::new(&p);
    let r = replica_of(TestConnector::to_primary(&p, &src), cfg());
    synced(&p, &r).await;
    let mut out = String::new();
    render_info(&mut out, &p, None, &InfoExtra::default());
    let keys: Vec<&str> = out.lines().map(|l| l.split(':').next().unwrap_or("")).collect();
    assert_eq!(
        keys,
        [
            "# Replication",
            "role",
            "connected_slaves",
            "slave0",
            "replicas_waiting_psync",
            "master_failover_state",
            "master_replid",
            "master_replid2",
            "master_repl_offset",
            "second_repl_offset",
            "repl_backlog_active",
            "repl_backlog_size",
            "repl_backlog_first_byte_offset",
            "repl_backlog_histlen"
        ]
    );
    assert!(out.contains("role:master\r\n"));
    assert!(
        out.contains(&format!(
            "slave0:ip=127.0.0.1,port=6380,state=online,offset={},lag=0,type=replica\r\n",
            p.offset()
        ))
    );
    assert!(out.contains("repl_backlog_active:1\r\nrepl_backlog_size:1048576\r\nrepl_backlog_first_byte_offset:1\r\n"));
    assert!(out.contains("master_replid2:0000000000000000000000000000000000000000\r\n"));
    assert!(out.contains("second_repl_offset:-1\r\n"));

    let mut out = String::new();
    render_info(&mut out, &r.primary, Some(&r.link.status()), &InfoExtra::default());
    let keys: Vec<&str> = out.lines().map(|l| l.split(':').next().unwrap_or("")).collect();
    assert_eq!(
        keys[..15],
        [
            "# Replication",
            "role",
            "master_host",
            "master_port",
            "master_link_status",
            "master_last_io_seconds_ago",
            "master_sync_in_progress",
            "slave_read_repl_offset",
            "slave_repl_offset",
            "replicas_repl_buffer_size",
            "replicas_repl_buffer_peak",
            "slave_priority",
            "slave_read_only",
            "replica_announced",
            "connected_slaves",
        ]
    );
    assert!(out.contains("role:slave\r\nmaster_host:primary.test\r\nmaster_port:6379\r\nmaster_link_status:up\r\n"));
    assert!(out.contains(&format!("slave_repl_offset:{}\r\n", p.offset())));
    assert!(out.contains(&format!("master_replid:{}\r\n", p.replid())));

    // Link down: the down-since field appears.
    r.link.stop().await;
    let status = crate::LinkStatus { state: LinkState::Connect, ..r_status_template() };
    let mut out = String::new();
    render_info(&mut out, &r.primary, Some(&status), &InfoExtra::default());
    assert!(out.contains("master_link_status:down\r\nmaster_last_io_seconds_ago:-1\r\n"));
    assert!(out.contains("master_link_down_since_seconds:-1\r\n"));
}

fn r_status_template() -> crate::LinkStatus {
    crate::LinkStatus {
        host: "h".into(),
        port: 1,
        state: LinkState::Connect,
        last_io: None,
        down_since: None,
        read_offset: 0,
        offset: None,
        transfer_size: 0,
        transfer_read: 0,
        transfer_last_io: None,
        tls: false,
    }
}

#[tokio::test]
async fn sync_decision_is_reported() {
    let p = Primary::new(PrimarySettings::default());
    let s = p.accept_sync(
        &SyncRequest { replid: "?".into(), offset: -1, psync: true },
        &Handshake::default(),
        1,
        "1.1.1.1:1",
    );
    assert_eq!(s.decision(), SyncDecision::FullResync);
    assert!(p.active());
}

#[tokio::test(start_paused = true)]
async fn acks_are_counted_and_a_silent_replica_times_out() {
    let p = Primary::new(PrimarySettings::default());
    let src = TestSource::new(&p);
    drop(p.accept_sync(
        &SyncRequest { replid: "?".into(), offset: -1, psync: true },
        &Handshake::default(),
        1,
        "127.0.0.1:1",
    ));
    p.append(&set(0, "k", "v"));
    let req = SyncRequest { replid: p.replid(), offset: 1, psync: true };
    let hs = Handshake { capa_psync2: true, listening_port: 6390, ..Handshake::default() };
    let session = p.accept_sync(&req, &hs, 2, "127.0.0.1:2");
    assert_eq!(session.decision(), SyncDecision::Continue { pos: 0 });
    let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
    let task = tokio::spawn(async move { session.run(ours, &[], &*src).await });
    let mut seen = Vec::new();
    read_until(&mut theirs, &mut seen, b"SET\r\n$1\r\nk\r\n$1\r\nv\r\n").await;
    assert!(seen.starts_with(format!("+CONTINUE {}\r\n*2\r\n$6\r\nSELECT", p.replid()).as_bytes()));
    theirs.write_all(b"*5\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n$2\r\n30\r\n$4\r\nFACK\r\n$2\r\n20\r\n").await.unwrap();
    until("the ACK", 10, || p.count_acked(30) == 1).await;
    assert_eq!(p.count_aof_acked(20), 1);
    assert_eq!(p.count_aof_acked(21), 0);
    // Sixty seconds of silence are allowed, not more.
    tokio::time::sleep(Duration::from_secs(59)).await;
    p.cron();
    assert_eq!(p.replicas()[0].lag, 59);
    assert_eq!(p.good_replicas(), 0, "lag above min-replicas-max-lag");
    tokio::time::sleep(Duration::from_secs(2)).await;
    p.cron();
    let result = task.await.expect("no panic");
    assert!(matches!(result, Err(crate::Error::Dropped("timeout"))), "{result:?}");
    assert!(p.replicas().is_empty());
}

mod fuzz {
    use proptest::prelude::*;

    use super::*;

    /// Random bytes where the PSYNC reply, the bulk header or the stream belong: the link
    /// must survive (drop and retry), never panic, and never hold more than its bounds.
    fn run_case(prefix: &str, garbage: Vec<u8>) {
        run_case_in(prefix, garbage, None);
    }

    /// With `dir`, full syncs are received there first; no temp file may be left.
    fn run_case_in(prefix: &str, garbage: Vec<u8>, dir: Option<&TempDir>) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async move {
            let mut script = prefix.as_bytes().to_vec();
            script.extend_from_slice(&garbage);
            let conn = TestConnector::new(Target::Script(scripted_with(script, None, true)));
            let config = ReplicaConfig {
                max_bulk_len: 64 * 1024,
                timeout: crate::replica::LiveDuration::new(Duration::from_secs(2)),
                ..cfg()
            };
            let r = match dir {
                Some(d) => replica_staged_in(conn.clone(), config, d.path()),
                None => replica_of(conn.clone(), config),
            };
            until("two connection attempts", 10, || conn.connects.load(Ordering::SeqCst) >= 2).await;
            assert_ne!(r.link.status().state, LinkState::Stopped);
            // Whatever was applied came from complete commands of bounded size.
            assert!(r.applied.lock().commands.iter().all(|c| c.len() <= 64 * 1024 + 1024));
            r.link.stop().await;
            if let Some(d) = dir {
                assert_eq!(d.files("temp-"), Vec::<String>::new());
            }
        });
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn garbage_psync_reply(garbage in proptest::collection::vec(any::<u8>(), 0..300)) {
            run_case("", garbage);
        }

        #[test]
        fn garbage_bulk(garbage in proptest::collection::vec(any::<u8>(), 0..300)) {
            run_case("+FULLRESYNC 1111111111222222222233333333334444444444 0\r\n", garbage);
        }

        /// Random snapshot bodies received to disk, cut short or ended by their mark.
        #[test]
        fn garbage_bulk_received_to_disk(
            mut garbage in proptest::collection::vec(any::<u8>(), 0..300),
            ended in any::<bool>(),
        ) {
            let dir = TempDir::new("fuzz-staged");
            let mark = "m".repeat(40);
            if ended {
                garbage.extend_from_slice(mark.as_bytes());
            }
            let prefix = format!("+FULLRESYNC 1111111111222222222233333333334444444444 0\r\n$EOF:{mark}\r\n");
            run_case_in(&prefix, garbage, Some(&dir));
        }

        #[test]
        fn garbage_stream(garbage in proptest::collection::vec(any::<u8>(), 0..300)) {
            run_case("+FULLRESYNC 1111111111222222222233333333334444444444 0\r\n$0\r\n", garbage);
        }

        #[test]
        fn mangled_commands_in_the_stream(
            cmds in proptest::collection::vec(("[A-Z]{1,8}", "[a-z0-9]{0,12}"), 1..10),
            cut in 0usize..400,
            flip in any::<u8>(),
        ) {
            let mut stream = Vec::new();
            for (name, arg) in &cmds {
                hotkv_engine::propagate::write_command(&mut stream, [name.as_bytes(), arg.as_bytes()].into_iter(), 2);
            }
            // One byte changed and the stream cut somewhere: a peer that lies halfway.
            if !stream.is_empty() {
                let at = cut % stream.len();
                stream[at] ^= flip;
                stream.truncate(cut.max(1).min(stream.len()));
            }
            run_case("+FULLRESYNC 1111111111222222222233333333334444444444 0\r\n$0\r\n", stream);
        }
    }
}

/// Valkey says `wait_bgsave` for a replica while its diskless snapshot streams (the save child
/// writes the socket) and `send_bulk` only when a gathered snapshot goes out behind its length;
/// Valkey's integration/replication waits for `wait_bgsave` during a diskless transfer.
#[tokio::test]
async fn a_streamed_snapshot_reads_wait_bgsave_and_a_gathered_one_send_bulk() {
    for capa_eof in [true, false] {
        let p = Primary::new(PrimarySettings::default());
        let src = TestSource::new(&p);
        let (ours, mut theirs) = tokio::io::duplex(64);
        let session = p.accept_sync(
            &SyncRequest { replid: "?".into(), offset: -1, psync: true },
            &Handshake { capa_eof, ..Handshake::default() },
            1,
            "127.0.0.1:1",
        );
        let task = tokio::spawn(async move { session.run(ours, &[], &*src).await });
        // Some of the snapshot is out and the rest waits on the replica.
        let mut seen = Vec::new();
        read_until(&mut theirs, &mut seen, b"REDIS0011").await;
        let text = String::from_utf8_lossy(&seen);
        assert!(text.starts_with("+FULLRESYNC "), "{text}");
        assert_eq!(text.contains("\r\n$EOF:"), capa_eof, "{text}");
        let want = if capa_eof { ReplicaState::WaitBgsave } else { ReplicaState::SendBulk };
        assert_eq!(p.replicas()[0].state, want, "capa eof {capa_eof}");
        assert_eq!(want.as_str(), if capa_eof { "wait_bgsave" } else { "send_bulk" });
        task.abort();
    }
}
