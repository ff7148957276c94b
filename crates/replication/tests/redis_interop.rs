//! Our replica link against a real redis-server 7 as its primary: the handshake, a full
//! sync in both bulk forms (diskless `$EOF:` and disk-based `$<len>`), then the command stream
//! with offsets that match the primary's.
//!
//! redis-server is looked for at `$REDIS_SERVER`, then `/usr/bin/redis-server`; without it the
//! tests say so and pass without running.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hotkv_protocol::Args;
use hotkv_replication::{
    Applier, AsyncStream, BoxFuture, Connector, LinkState, Primary, PrimarySettings, ReplicaConfig, ReplicaLink,
};
use hotkv_test_support::{Frame, TestServer};
use parking_lot::Mutex;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_sync_and_stream_from_redis_diskless() {
    interop(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_sync_and_stream_from_redis_disk_based() {
    interop(false).await;
}

async fn interop(diskless: bool) {
    let Some(bin) = redis_server() else {
        eprintln!("skipped: no redis-server at $REDIS_SERVER or /usr/bin/redis-server to replicate from");
        return;
    };
    let server = TestServer::builder(bin)
        .configs(&[
            ("save", "\"\""),
            ("appendonly", "no"),
            ("repl-diskless-sync", if diskless { "yes" } else { "no" }),
            ("repl-diskless-sync-delay", "0"),
            ("repl-ping-replica-period", "1"),
        ])
        .spawn();
    let port = server.port();
    let before = server.cmd(&["SET", "before", "sync"]);
    assert_eq!(before, Frame::ok());

    let primary = Primary::new(PrimarySettings::default());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let cfg = ReplicaConfig { retry_delay: Duration::from_millis(200), ..ReplicaConfig::new("127.0.0.1", port, 6399) };
    let link = ReplicaLink::spawn(cfg, Arc::new(Tcp), Box::new(Recorder(seen.clone())), primary.clone());

    wait("the full sync", || seen.lock().synced).await;
    {
        let s = seen.lock();
        assert!(s.rdb.starts_with(b"REDIS"), "an RDB file: {:?}", &s.rdb[..s.rdb.len().min(16)]);
        // RDB >= 5 ends with the EOF opcode and an 8-byte CRC64.
        assert!(s.rdb.len() > 9 && s.rdb[s.rdb.len() - 9] == 0xff, "the RDB ends with EOF + checksum");
        assert!(s.rdb.windows(6).any(|w| w == b"before"), "the key written before the sync is in it");
    }
    assert_eq!(primary.replid(), info_field(&server, "master_replid"));

    // Writes on redis-server arrive as commands, SELECT first.
    assert_eq!(server.cmd(&["SET", "a", "1"]), Frame::ok());
    let mut c = server.client();
    assert_eq!(c.cmd(&["SELECT", "3"]), Frame::ok());
    assert_eq!(c.cmd(&["SET", "b", "2"]), Frame::ok());
    wait("the writes", || seen.lock().commands.iter().any(|c| c == "SET b 2")).await;
    {
        let cmds = seen.lock().commands.clone();
        let a = cmds.iter().position(|c| c == "SET a 1").expect("SET a 1 applied");
        let b = cmds.iter().position(|c| c == "SET b 2").expect("SET b 2 applied");
        assert!(cmds[..a].iter().any(|c| c == "SELECT 0"), "{cmds:?}");
        assert_eq!(cmds[b - 1], "SELECT 3", "{cmds:?}");
        assert!(
            !cmds.iter().any(|c| c.starts_with("PING") || c.starts_with("REPLCONF")),
            "handled by the link: {cmds:?}"
        );
    }

    // Offsets: ours (PINGs included) reach redis-server's, and redis-server sees our ACKs.
    wait("matching offsets", || {
        let theirs: u64 = info_field(&server, "master_repl_offset").parse().unwrap_or(0);
        link.status().offset == Some(theirs) && primary.offset() == theirs
    })
    .await;
    wait("our ACK in redis-server's INFO", || {
        let theirs = info_field(&server, "master_repl_offset");
        let line = info_field(&server, "slave0");
        line.starts_with("ip=127.0.0.1,port=6399,state=online,") && line.contains(&format!("offset={theirs},"))
    })
    .await;
    assert_eq!(link.status().state, LinkState::Connected);
    link.stop().await;
}

#[derive(Default)]
struct Seen {
    rdb: Vec<u8>,
    synced: bool,
    commands: Vec<String>,
}

struct Recorder(Arc<Mutex<Seen>>);

impl Applier for Recorder {
    fn begin_full_sync(&mut self, _same_history: bool) -> Result<(), String> {
        let mut s = self.0.lock();
        s.rdb.clear();
        s.synced = false;
        Ok(())
    }

    fn load_rdb(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.0.lock().rdb.extend_from_slice(chunk);
        Ok(())
    }

    fn end_full_sync(&mut self, ok: bool) -> Result<(), String> {
        self.0.lock().synced = ok;
        Ok(())
    }

    fn apply(&mut self, args: Args<'_>, _raw: &[u8]) {
        let words: Vec<String> = args.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        self.0.lock().commands.push(words.join(" "));
    }
}

/// Plain TCP, as the server's connector does without `tls-replication`.
struct Tcp;

impl Connector for Tcp {
    fn connect<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<Box<dyn AsyncStream>>> {
        Box::pin(async move {
            let s = tokio::net::TcpStream::connect((host, port)).await?;
            s.set_nodelay(true)?;
            Ok(Box::new(s) as Box<dyn AsyncStream>)
        })
    }

    fn is_tls(&self) -> bool {
        false
    }
}

fn redis_server() -> Option<PathBuf> {
    let bin = std::env::var_os("REDIS_SERVER").map_or_else(|| PathBuf::from("/usr/bin/redis-server"), PathBuf::from);
    bin.is_file().then_some(bin)
}

/// One field of redis-server's `INFO replication`.
fn info_field(server: &TestServer, name: &str) -> String {
    let text = match server.cmd(&["INFO", "replication"]) {
        Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO: {other}"),
    };
    text.lines().find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':'))).unwrap_or_default().to_string()
}

async fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
