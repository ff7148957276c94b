//! MIGRATE's network half: talks to the target instance for a command whose first turn read
//! the values (see `hotkv_engine::remote`). Runs on the client's connection task, with no
//! slot lock held, so other clients are served while the target works.
//!
//! Connections are cached per `host:port` as Valkey's `migrate_cached_sockets` (at most 64,
//! closed after 10 s unused) and speak TLS when `tls-cluster` is on, presenting this node's
//! client certificate (`tls-client-cert-file`, else `tls-cert-file`). A connection in use is
//! taken out of the cache, so two MIGRATEs to one target never share a socket.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use hotkv_engine::remote::{MigrateError, MigrateOp, MigrateReply, MigrateRequest};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::server::Server;

/// Most cached connections (Valkey's `MIGRATE_SOCKET_CACHE_ITEMS`).
const CACHE_ITEMS: usize = 64;
/// A cached connection unused this long is closed (Valkey's `MIGRATE_SOCKET_CACHE_TTL`).
const CACHE_TTL: Duration = Duration::from_secs(10);
/// The longest reply line read from a target (Valkey reads into 1 KiB buffers): RESTORE,
/// SELECT, AUTH and DEL answer one short line.
const MAX_LINE: usize = 1024;

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

struct Conn {
    stream: Box<dyn Stream>,
    /// Bytes read past the last reply line.
    rbuf: BytesMut,
    /// The database the target has selected on this connection, when known.
    db: Option<i64>,
    last_use: Instant,
}

/// The connection cache.
#[derive(Default)]
pub struct MigratePool {
    conns: Mutex<HashMap<String, Conn>>,
}

/// Why one attempt failed on the socket.
enum SocketError {
    Connect,
    Write,
    /// A read failed after `read` replies; `timed_out` rules out a retry, as in Valkey.
    Read {
        timed_out: bool,
    },
}

impl MigratePool {
    /// Connections cached now (INFO `migrate_cached_sockets`).
    pub fn len(&self) -> usize {
        self.conns.lock().len()
    }

    /// Whether no connection is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes connections unused for longer than the cache keeps them (from the cron).
    pub fn close_idle(&self) {
        self.conns.lock().retain(|_, c| c.last_use.elapsed() <= CACHE_TTL);
    }

    /// Sends `req` and reads the answers. As Valkey, a socket error before any reply that
    /// was not a timeout (typically a cached connection the target closed) is retried once
    /// on a fresh connection.
    pub async fn perform(&self, srv: &Server, req: &MigrateRequest) -> MigrateReply {
        let name = format!("{}:{}", req.host, req.port);
        let mut may_retry = true;
        loop {
            let mut reply = MigrateReply::default();
            let err = match self.attempt(srv, &name, req, &mut reply).await {
                Ok(()) => return reply,
                Err(e) => e,
            };
            let retry = match err {
                SocketError::Connect => false,
                SocketError::Write => true,
                SocketError::Read { timed_out } => !timed_out && reply.acked.is_empty(),
            };
            if retry && may_retry {
                may_retry = false;
                continue;
            }
            reply.error = Some(match err {
                SocketError::Connect => MigrateError::Connect,
                SocketError::Write => MigrateError::Write,
                SocketError::Read { .. } => MigrateError::Read,
            });
            return reply;
        }
    }

    async fn attempt(
        &self,
        srv: &Server,
        name: &str,
        req: &MigrateRequest,
        reply: &mut MigrateReply,
    ) -> Result<(), SocketError> {
        let limit = Duration::from_millis(req.timeout_ms);
        let cached = self.conns.lock().remove(name);
        let mut conn = match cached {
            Some(c) => c,
            None => connect(srv, &req.host, &req.port, limit).await.ok_or(SocketError::Connect)?,
        };
        let select = conn.db != Some(req.db);
        let mut buf = Vec::new();
        if let Some((user, pass)) = &req.auth {
            let mut argv: Vec<&[u8]> = vec![b"AUTH"];
            argv.extend(user.as_deref());
            argv.push(pass);
            command(&mut buf, &argv);
        }
        if select {
            command(&mut buf, &[b"SELECT", req.db.to_string().as_bytes()]);
        }
        for op in &req.ops {
            encode_op(&mut buf, op, req.asking);
        }
        // Written in 64 KiB pieces, each within the timeout, as Valkey does.
        for chunk in buf.chunks(64 * 1024) {
            match timeout(limit, conn.stream.write_all(chunk)).await {
                Ok(Ok(())) => {}
                _ => return Err(SocketError::Write),
            }
        }
        if !matches!(timeout(limit, conn.stream.flush()).await, Ok(Ok(()))) {
            return Err(SocketError::Write);
        }
        // AUTH's and SELECT's answers come first; an error there fails every key.
        let mut setup_error = None;
        for _ in 0..usize::from(req.auth.is_some()) + usize::from(select) {
            let line = conn.read_line(limit).await?;
            if setup_error.is_none() && line.starts_with(b"-") {
                setup_error = Some(line);
            }
        }
        for op in &req.ops {
            let mut line = Vec::new();
            for _ in 0..replies(op, req.asking) {
                let l = conn.read_line(limit).await?;
                if !line.starts_with(b"-") {
                    line = l;
                }
            }
            let failed = setup_error.is_some() || line.starts_with(b"-");
            if failed && reply.error.is_none() {
                let text = setup_error.as_deref().unwrap_or(&line);
                reply.error = Some(MigrateError::Target(String::from_utf8_lossy(&text[1..]).into_owned()));
            }
            reply.acked.push(!failed);
        }
        // After an error the target's database is unknown: select again next time.
        conn.db = if reply.error.is_none() { Some(req.db) } else { None };
        conn.last_use = Instant::now();
        let mut conns = self.conns.lock();
        if conns.len() >= CACHE_ITEMS {
            // Valkey drops a random one; any will do.
            if let Some(k) = conns.keys().next().cloned() {
                conns.remove(&k);
            }
        }
        conns.insert(name.to_owned(), conn);
        Ok(())
    }
}

impl Conn {
    /// One reply line, without its CRLF.
    async fn read_line(&mut self, limit: Duration) -> Result<Vec<u8>, SocketError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(end) = self.rbuf.iter().position(|&b| b == b'\n') {
                let mut line = self.rbuf[..end].to_vec();
                self.rbuf.advance(end + 1);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(line);
            }
            if self.rbuf.len() > MAX_LINE {
                return Err(SocketError::Read { timed_out: false });
            }
            self.rbuf.reserve(MAX_LINE);
            match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.rbuf)).await {
                Ok(Ok(n)) if n > 0 => {}
                Ok(_) => return Err(SocketError::Read { timed_out: false }),
                Err(_) => return Err(SocketError::Read { timed_out: true }),
            }
        }
    }
}

/// A new connection to the target, TLS when the cluster runs TLS.
async fn connect(srv: &Server, host: &str, port: &str, limit: Duration) -> Option<Conn> {
    // Valkey parses the port with atoi: what does not parse is port 0, which fails to connect.
    let port: u16 = port.trim().parse().unwrap_or(0);
    let tcp = timeout(limit, TcpStream::connect((host, port))).await.ok()?.ok()?;
    let _ = tcp.set_nodelay(true);
    let tls = srv.settings.load().bool(crate::config::table::TLS_CLUSTER);
    let stream: Box<dyn Stream> = if tls {
        match timeout(limit, srv.tls.connect(host, tcp)).await {
            Ok(Ok(s)) => Box::new(s),
            Ok(Err(e)) => {
                tracing::warn!("MIGRATE could not open TLS to {host}:{port}: {e}");
                return None;
            }
            Err(_) => return None,
        }
    } else {
        Box::new(tcp)
    };
    Some(Conn { stream, rbuf: BytesMut::new(), db: None, last_use: Instant::now() })
}

fn encode_op(buf: &mut Vec<u8>, op: &MigrateOp, asking: bool) {
    match op {
        MigrateOp::Restore { key, ttl_ms, payload, replace, .. } => {
            let name: &[u8] = if asking { b"RESTORE-ASKING" } else { b"RESTORE" };
            let ttl = ttl_ms.to_string();
            let mut argv: Vec<&[u8]> = vec![name, key, ttl.as_bytes(), payload];
            if *replace {
                argv.push(b"REPLACE");
            }
            command(buf, &argv);
        }
        // The target imports the slot, so DEL reaches the key only after ASKING; the two
        // answers count as the op's one (see `replies`).
        MigrateOp::Delete { key } => {
            if asking {
                command(buf, &[b"ASKING"]);
            }
            command(buf, &[b"DEL", key]);
        }
    }
}

/// How many reply lines the target sends for `op`.
fn replies(op: &MigrateOp, asking: bool) -> usize {
    match op {
        MigrateOp::Delete { .. } if asking => 2,
        _ => 1,
    }
}

/// A RESP command.
fn command(buf: &mut Vec<u8>, argv: &[&[u8]]) {
    buf.extend_from_slice(format!("*{}\r\n", argv.len()).as_bytes());
    for a in argv {
        buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        buf.extend_from_slice(a);
        buf.extend_from_slice(b"\r\n");
    }
}
