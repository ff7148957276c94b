//! Fakes for the tests: a connector whose "network" is in-memory duplex pipes to a fake
//! server (our own [`Primary`] behind a minimal command loop, or a scripted primary), an
//! applier that records what it was given, and a snapshot source with a fixed payload.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use hotkv_protocol::{Args, Decoder, Limits, Step};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::{
    Applier, AsyncStream, BoxFuture, Connector, Handshake, Primary, ReplconfReply, Snapshot, SnapshotSource,
    SyncRequest,
};

/// A scripted primary: gets the server end of the pipe.
pub(crate) type Script = Arc<dyn Fn(DuplexStream) -> BoxFuture<'static, ()> + Send + Sync>;

/// What a [`TestConnector`] connects to.
pub(crate) enum Target {
    /// Our own primary behind a minimal server loop.
    Primary {
        primary: Arc<Primary>,
        source: Arc<TestSource>,
        /// Pretend the replica did not announce `capa eof`, to get a `$<len>` bulk.
        no_eof: bool,
    },
    /// A hand-written primary.
    Script(Script),
}

/// A connector over in-memory pipes.
pub(crate) struct TestConnector {
    target: Mutex<Target>,
    pub(crate) connects: AtomicUsize,
    pub(crate) refuse: AtomicBool,
    tls: bool,
    sessions: Mutex<Vec<JoinHandle<()>>>,
}

impl TestConnector {
    pub(crate) fn new(target: Target) -> Arc<Self> {
        Self::with_tls(target, false)
    }

    pub(crate) fn with_tls(target: Target, tls: bool) -> Arc<Self> {
        Arc::new(TestConnector {
            target: Mutex::new(target),
            connects: AtomicUsize::new(0),
            refuse: AtomicBool::new(false),
            tls,
            sessions: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn to_primary(primary: &Arc<Primary>, source: &Arc<TestSource>) -> Arc<Self> {
        Self::new(Target::Primary { primary: primary.clone(), source: source.clone(), no_eof: false })
    }

    /// Cuts every open connection (the server side's task ends, closing its pipe end).
    pub(crate) fn cut(&self) {
        for s in self.sessions.lock().drain(..) {
            s.abort();
        }
    }
}

impl Connector for TestConnector {
    fn connect<'a>(&'a self, _host: &'a str, _port: u16) -> BoxFuture<'a, io::Result<Box<dyn AsyncStream>>> {
        Box::pin(async move {
            self.connects.fetch_add(1, Ordering::SeqCst);
            if self.refuse.load(Ordering::SeqCst) {
                return Err(io::ErrorKind::ConnectionRefused.into());
            }
            let (ours, theirs) = tokio::io::duplex(64 * 1024);
            let task = match &*self.target.lock() {
                Target::Primary { primary, source, no_eof } => {
                    tokio::spawn(serve_replica(primary.clone(), source.clone(), theirs, *no_eof))
                }
                Target::Script(script) => tokio::spawn(script(theirs)),
            };
            self.sessions.lock().push(task);
            Ok(Box::new(ours) as Box<dyn AsyncStream>)
        })
    }

    fn is_tls(&self) -> bool {
        self.tls
    }
}

/// The part of a server a replica talks to before PSYNC, then the replica session.
pub(crate) async fn serve_replica(
    primary: Arc<Primary>,
    source: Arc<TestSource>,
    mut stream: DuplexStream,
    no_eof: bool,
) {
    let mut buf = BytesMut::new();
    let mut dec = Decoder::new();
    let mut hs = Handshake::default();
    loop {
        loop {
            let Ok(step) = dec.next(&buf, Limits::default()) else { return };
            match step {
                Step::Incomplete => break,
                Step::Empty => continue,
                Step::Command => {}
            }
            let args: Vec<Vec<u8>> = dec.args(&buf).iter().map(<[u8]>::to_vec).collect();
            let name = args[0].to_ascii_uppercase();
            let reply: Vec<u8> = match name.as_slice() {
                b"PING" => b"+PONG\r\n".to_vec(),
                b"AUTH" => b"+OK\r\n".to_vec(),
                b"REPLCONF" => {
                    let rest: Vec<&[u8]> = args[1..].iter().map(Vec::as_slice).collect();
                    match hs.replconf(&rest) {
                        ReplconfReply::Ok => b"+OK\r\n".to_vec(),
                        ReplconfReply::Error(e) => format!("-{e}\r\n").into_bytes(),
                        ReplconfReply::Silent => Vec::new(),
                    }
                }
                b"PSYNC" | b"SYNC" => {
                    let Some(req) = SyncRequest::parse(args.iter().map(Vec::as_slice)) else { return };
                    if no_eof {
                        hs.capa_eof = false;
                    }
                    let session = primary.accept_sync(&req, &hs, 7, "127.0.0.1:40000");
                    let leftover = buf[dec.consumed()..].to_vec();
                    let _ = session.run(stream, &leftover, &*source).await;
                    return;
                }
                _ => b"-ERR unknown command\r\n".to_vec(),
            };
            if stream.write_all(&reply).await.is_err() {
                return;
            }
        }
        let n = dec.discard_consumed();
        buf.advance(n);
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// A directory of its own for one test, removed after it.
pub(crate) struct TempDir(std::path::PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("hotkv-repl-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("a temp dir");
        TempDir(p)
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// Names of the files in it that start with `prefix`.
    pub(crate) fn files(&self, prefix: &str) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                    .filter(|n| n.starts_with(prefix))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the applier saw.
#[derive(Default, Debug)]
pub(crate) struct Applied {
    /// Set: full syncs are received into files here first (`Applier::staging`).
    pub(crate) stage_in: Option<std::path::PathBuf>,
    pub(crate) staged: usize,
    pub(crate) rdb: Vec<u8>,
    pub(crate) begun: usize,
    pub(crate) ended_ok: usize,
    pub(crate) ended_failed: usize,
    pub(crate) commands: Vec<Vec<u8>>,
}

/// An applier that records everything.
pub(crate) struct TestApplier(pub(crate) Arc<Mutex<Applied>>);

impl TestApplier {
    pub(crate) fn recording() -> (Box<dyn Applier>, Arc<Mutex<Applied>>) {
        let log = Arc::new(Mutex::new(Applied::default()));
        (Box::new(TestApplier(log.clone())), log)
    }
}

impl Applier for TestApplier {
    fn begin_full_sync(&mut self, _same_history: bool) -> Result<(), String> {
        let mut a = self.0.lock();
        a.begun += 1;
        a.rdb.clear();
        a.commands.clear();
        Ok(())
    }

    fn staging(&mut self) -> Option<crate::Staging> {
        let mut a = self.0.lock();
        let dir = a.stage_in.clone()?;
        a.staged += 1;
        Some(crate::Staging {
            temp: dir.join(format!("temp-{}.rdb", a.staged)),
            target: dir.join("dump.rdb"),
            remove_after_load: false,
        })
    }

    fn load_rdb(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.0.lock().rdb.extend_from_slice(chunk);
        Ok(())
    }

    fn end_full_sync(&mut self, ok: bool) -> Result<(), String> {
        let mut a = self.0.lock();
        if ok {
            a.ended_ok += 1;
        } else {
            a.ended_failed += 1;
        }
        Ok(())
    }

    fn apply(&mut self, _args: Args<'_>, raw: &[u8]) {
        self.0.lock().commands.push(raw.to_vec());
    }
}

/// A snapshot source whose RDB is a fixed payload sent in three chunks.
pub(crate) struct TestSource {
    primary: Arc<Primary>,
    pub(crate) taken: AtomicUsize,
    pub(crate) payload: Vec<u8>,
}

impl TestSource {
    pub(crate) fn new(primary: &Arc<Primary>) -> Arc<Self> {
        let mut payload = b"REDIS0011".to_vec();
        payload.extend((0..5000u32).map(|i| (i * 7 % 256) as u8));
        payload.push(0xff);
        Arc::new(TestSource { primary: primary.clone(), taken: AtomicUsize::new(0), payload })
    }
}

impl SnapshotSource for TestSource {
    fn snapshot(&self) -> BoxFuture<'_, io::Result<Snapshot>> {
        Box::pin(async move {
            self.taken.fetch_add(1, Ordering::SeqCst);
            let point = self.primary.snapshot_point();
            let (tx, rx) = mpsc::channel(4);
            let payload = Bytes::from(self.payload.clone());
            tokio::spawn(async move {
                let third = payload.len() / 3;
                for part in [payload.slice(..third), payload.slice(third..2 * third), payload.slice(2 * third..)] {
                    if tx.send(Ok(part)).await.is_err() {
                        return;
                    }
                }
            });
            Ok(Snapshot { point, rdb: rx, hold: None })
        })
    }
}

/// Polls `cond` every few milliseconds for up to `secs` seconds.
pub(crate) async fn until(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Captured log output of the current thread, for checking exact log lines.
#[derive(Clone)]
pub(crate) struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    pub(crate) fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || LogWriter(writer.clone()))
            .with_ansi(false)
            .with_target(false)
            .with_max_level(tracing::Level::INFO)
            .finish();
        (Logs(buf), tracing::subscriber::set_default(sub))
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl io::Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
