//! A client connection: read what is available, run every complete command in the buffer,
//! and answer the whole batch with one write. `Conn` holds what that takes; an event loop
//! (evloop.rs) drives it while the client only runs commands, and the task here from the
//! point where the client has to wait for something (or for every client, under
//! `event-loop no`).

use std::any::Any;
use std::future::Future;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use bytes::BytesMut;
use hotkv_engine::BlockMode;
use hotkv_engine::ctx::EngineConfig;
use hotkv_engine::plan::KeyHint;
use hotkv_engine::remote::{RemoteOutcome, RemoteRequest};
use hotkv_protocol::{Decoder, Limits, ReplyBuf, ReplyLimit, Step};
use hotkv_tls::TlsSession;
use tokio::sync::broadcast;
use tracing::{debug, error};

use crate::blocking::{BlockWait, Wakeup};
use crate::dispatch::{Batch, RemoteWait, Scratch, dispatch, dispatch_with, flatten};
use crate::io::Socket;
use crate::query_buffer::Resize;
use crate::registry::Flow;
use crate::server::{Runtime, Server, unix_ms};
use crate::session::{ClientInfo, Session, flag};

/// Serves a client until it disconnects, is killed, or the server shuts down: a TCP or
/// unix-socket connection, all alike past this point. `tls` is the session of a connection
/// to the TLS port; its handshake runs inside the first reads.
pub async fn serve(srv: Arc<Server>, stream: socket2::Socket, info: Arc<ClientInfo>, tls: Option<TlsSession>) {
    if let Some(loops) = crate::evloop::Loops::get(&srv) {
        // A connection lives on an event loop, as long as it only runs commands.
        let sess = Conn::session(&srv, &info, tls.is_some());
        srv.clients.add(info.clone());
        let tls = tls.map(|session| crate::io::TlsLayer::new(session, info.id));
        loops.adopt(&srv, stream, tls, Box::new(Conn::new(&srv)), sess);
        return;
    }
    let mut sock = match Socket::new(stream, tls, info.id) {
        Ok(s) => s,
        Err(e) => {
            debug!("client {} could not be registered: {e}", info.id);
            return;
        }
    };
    *info.sock.lock() = Some(sock.raw_fd());
    sock.publish_queued(info.omem.clone());
    let sess = Conn::session(&srv, &info, sock.is_tls());
    srv.clients.add(info.clone());
    let conn = Box::new(Conn::new(&srv));
    serve_from(srv, sock, conn, sess, Resume::Read).await;
}

/// How a connection's task ended.
enum Served {
    /// The client is gone (or must go).
    Closed,
    /// The client only runs commands again: an event loop takes it back.
    ToLoop,
}

/// Where a connection's task takes up a client the event loop served until now.
pub(crate) enum Resume {
    /// Wait for the client's next request.
    Read,
    /// Run what the query buffer holds (it was read and checked, not run).
    Process,
    /// A batch ran and ended so: go on from there, as after [`Conn::process`].
    Flow(Flow),
}

/// Serves a registered client on its own task from `resume` on, then forgets it, or gives
/// it back to an event loop once it only runs commands again.
pub(crate) async fn serve_from(
    srv: Arc<Server>,
    mut sock: Socket,
    mut conn: Box<Conn>,
    mut sess: Session,
    resume: Resume,
) {
    let info = sess.info.clone();
    let mut resume = resume;
    loop {
        // A panic is a bug in hotkv, never the client's doing, but it must cost only this
        // connection: caught here, the cleanup below still runs (no ghost in CLIENT LIST, no
        // leaked subscription or watch) and every other client is served on.
        match CatchUnwind(Box::pin(conn.run(&srv, &mut sock, &mut sess, resume))).await {
            Ok(Ok(Served::ToLoop)) => {
                let Some(loops) = crate::evloop::Loops::get(&srv) else { break };
                let (stream, tls, queue) = match sock.into_parts() {
                    Ok(parts) => parts,
                    Err(e) => {
                        debug!("client {} could not leave its task: {e}", info.id);
                        return forget_closed(&srv, &mut sess, || {});
                    }
                };
                match loops.try_adopt(stream, tls, queue, conn, sess) {
                    Ok(()) => return,
                    // Every loop is held by a long call meanwhile: the client stays here.
                    Err((stream, tls, queue, c, s)) => {
                        (conn, sess) = (c, s);
                        sock = match Socket::resume(stream, tls, queue, info.id) {
                            Ok(sock) => sock,
                            Err(e) => {
                                debug!("client {} could not be registered again: {e}", info.id);
                                return forget_closed(&srv, &mut sess, || {});
                            }
                        };
                        resume = Resume::Read;
                    }
                }
            }
            Ok(Ok(Served::Closed)) => break,
            Ok(Err(e)) => {
                debug!("client {} closed: {e}", info.id);
                break;
            }
            Err(panic) => {
                log_panic(&srv, &sess, panic.as_ref());
                break;
            }
        }
    }
    forget_closed(&srv, &mut sess, || sock.shutdown());
}

/// The log line of a panic caught while serving a client.
pub(crate) fn log_panic(srv: &Server, sess: &Session, panic: &(dyn Any + Send)) {
    let command = match sess.running as usize {
        0 => "(none)",
        n if n <= srv.registry.len() => srv.registry.get(n - 1).full_name.as_str(),
        _ => "(unknown)",
    };
    error!(
        client = sess.id,
        command,
        cause = panic_message(panic),
        "bug: panic while serving a client; closing its connection, the server keeps running"
    );
}

/// Forgets a client as its connection ends: what it left registered elsewhere, then its
/// descriptor, which CLIENT KILL must not touch from here on since it is about to be closed
/// (`close` shuts the socket down; nothing for one already lost), then its CLIENT LIST entry.
pub(crate) fn forget_closed(srv: &Server, sess: &mut Session, close: impl FnOnce()) {
    forget(srv, sess);
    *sess.info.sock.lock() = None;
    close();
    srv.clients.remove(sess.info.id);
}

/// Undoes what a client left registered elsewhere (its inbox, subscriptions, watches,
/// tracking, MONITOR), before its socket closes.
fn forget(srv: &Server, sess: &mut Session) {
    let info = &sess.info;
    info.inbox.close();
    if let Some(mut subs) = sess.subs.take() {
        srv.pubsub.unsubscribe_all(&mut subs);
    }
    crate::cmd::multi::forget_watches(srv, sess);
    srv.tracking.disable(&sess.info);
    if sess.info.flags.load(Ordering::Relaxed) & flag::MONITOR != 0 {
        srv.monitors.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs a future, turning a panic inside it into an `Err` with the panic's payload.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn Any + Send>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Unwind safety: after a panic the future is never polled again, and what it shared
        // (parking_lot locks, which do not poison, release on unwind) stays consistent
        // per operation; the session it borrowed is only read to clean up.
        match catch_unwind(AssertUnwindSafe(|| crate::crash::in_connection(|| self.0.as_mut().poll(cx)))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(v)) => Poll::Ready(Ok(v)),
            Err(panic) => Poll::Ready(Err(panic)),
        }
    }
}

/// The text a panic was raised with.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> &str {
    match panic.downcast_ref::<&str>() {
        Some(s) => s,
        None => panic.downcast_ref::<String>().map_or("(no message)", String::as_str),
    }
}

/// Unsent replies past which a connection stops reading until its client reads (when no
/// `client-output-buffer-limit normal` hard limit above it closes the client first).
pub(crate) const MAX_QUEUED: usize = 64 << 20;

/// Most commands decoded ahead of execution (bounds the prefetch window and the spans kept).
const MAX_BATCH: usize = 64;

pub(crate) struct Conn {
    /// Decoded commands of the batch: (first span, argument count, end offset, where the
    /// request starts when its bytes are canonical RESP: see `Decoder::frame_start`).
    cmds: Vec<(usize, usize, usize, Option<usize>)>,
    /// Their argument ranges.
    spans: Vec<(usize, usize)>,
    /// (slot, table hash) of each decoded command's second argument (its key, for nearly
    /// every data command), for the second prefetch pass and for dispatch.
    hints: Vec<Option<(u16, u32)>>,
    /// The query buffer. Its data always starts at the front of its allocation, so its
    /// capacity is its size (see [`Conn::consume`]).
    rbuf: BytesMut,
    /// The query buffer is the client's own between batches (Valkey's private query buffer):
    /// a batch left part of a command in it, and the cron has not freed it since.
    rbuf_kept: bool,
    out: ReplyBuf,
    decoder: Decoder,
    scratch: Scratch,
    /// `tls-auth-clients-user` had its one look at the client's certificate.
    cert_login_done: bool,
    /// The AOF, whose `appendfsync always` holds replies until their writes are on disk.
    aof: Arc<crate::aof::wire::Aof>,
    /// The MONITOR feed, once the client asked for it.
    monitor: Option<broadcast::Receiver<Arc<str>>>,
}

impl Conn {
    pub(crate) fn new(srv: &Server) -> Conn {
        Conn {
            cmds: Vec::new(),
            spans: Vec::new(),
            hints: Vec::new(),
            rbuf: BytesMut::new(),
            rbuf_kept: false,
            out: ReplyBuf::new(),
            decoder: Decoder::new(),
            scratch: Scratch::default(),
            aof: srv.aof.clone(),
            cert_login_done: false,
            monitor: None,
        }
    }

    /// `tls-auth-clients-user`'s one look at the client's certificate, once its handshake is
    /// done (its first plaintext was read).
    pub(crate) fn certificate_login(&mut self, srv: &Server, tls: &TlsSession, sess: &mut Session) {
        if !self.cert_login_done {
            self.cert_login_done = true;
            login_by_certificate(srv, tls, sess);
        }
    }

    /// The query buffer, for a read into its spare capacity.
    pub(crate) fn read_buffer(&mut self) -> &mut BytesMut {
        &mut self.rbuf
    }

    /// A new client's session, logged in as `default` when no password is required.
    pub(crate) fn session(srv: &Server, info: &Arc<ClientInfo>, tls: bool) -> Session {
        let mut sess = Session::new(info.clone(), !srv.acl.auth_required());
        sess.acl_user = Some(srv.acl.default_user());
        sess.tls = tls;
        sess
    }

    async fn run(
        &mut self,
        srv: &Arc<Server>,
        stream: &mut Socket,
        sess: &mut Session,
        resume: Resume,
    ) -> io::Result<Served> {
        let info = sess.info.clone();
        let mut resume = resume;
        loop {
            let mut flow = match std::mem::replace(&mut resume, Resume::Read) {
                Resume::Flow(flow) => flow,
                Resume::Process => self.process_turn(srv, sess).await,
                Resume::Read => {
                    if info.is_killed() {
                        return Ok(Served::Closed);
                    }
                    if self.back_to_loop(srv, stream, sess) {
                        return Ok(Served::ToLoop);
                    }
                    let room = self.read_room(sess);
                    // A plain client only waits for its socket (CLIENT KILL shuts the socket
                    // down, so the read ends); a MONITOR or subscribed client also waits for
                    // its feed. Pushes from other clients' commands (CLIENT TRACKING
                    // invalidations) are polled only once the socket has nothing to read, so
                    // a busy client pays nothing for them.
                    let n = if self.monitor.is_none() && sess.subs.is_none() {
                        tokio::select! {
                            biased;
                            n = stream.read_into(&mut self.rbuf, room) => n?,
                            p = info.inbox.recv() => {
                                self.take_mail(stream, sess, p).await?;
                                continue;
                            }
                        }
                    } else {
                        tokio::select! {
                            p = info.inbox.recv() => {
                                self.take_mail(stream, sess, p).await?;
                                continue;
                            }
                            line = recv_monitor(&mut self.monitor) => {
                                if let Some(line) = line {
                                    self.out.simple(&line);
                                    self.flush(stream, sess).await?;
                                }
                                continue;
                            }
                            msg = recv_message(&mut sess.subs) => {
                                if let Some(msg) = msg {
                                    self.deliver(sess, msg);
                                    self.flush(stream, sess).await?;
                                }
                                continue;
                            }
                            n = stream.read_into(&mut self.rbuf, room) => n?,
                        }
                    };
                    if n == 0 {
                        // A client that half-closed after its last command still gets the
                        // replies its socket held.
                        return stream.flush().await.map(|()| Served::Closed);
                    }
                    if let Some(tls) = stream.tls_session() {
                        self.certificate_login(srv, tls, sess);
                    }
                    if !self.took_input(srv, &srv.rt.load(), sess, n) {
                        return Ok(Served::Closed);
                    }
                    self.process_turn(srv, sess).await
                }
            };
            loop {
                if sess.enter_monitor {
                    sess.enter_monitor = false;
                    self.monitor = Some(srv.monitor_tx.subscribe());
                }
                let next = match flow {
                    Flow::Continue if !sess.close_after_reply => break,
                    Flow::Block(wait) => {
                        self.flush(stream, sess).await?;
                        self.wait_blocked(srv, stream, sess, wait).await?
                    }
                    Flow::Paused(argv) => {
                        self.flush(stream, sess).await?;
                        self.wait_unpaused(srv, stream, sess, argv).await?
                    }
                    Flow::Remote(wait) => {
                        self.flush(stream, sess).await?;
                        Some(self.wait_remote(srv, sess, *wait).await)
                    }
                    Flow::Await(reply) => {
                        self.flush(stream, sess).await?;
                        let bytes = reply.await;
                        // A handler that counts its wait as blocked (SHUTDOWN) set the flag.
                        sess.set_flag(flag::BLOCKED, false);
                        self.out.raw(&bytes);
                        Some(Flow::Continue)
                    }
                    Flow::Replica(start) => {
                        self.flush(stream, sess).await?;
                        return self.serve_replica(srv, stream, *start).await.map(|()| Served::Closed);
                    }
                    Flow::Debug(argv) => {
                        self.flush(stream, sess).await?;
                        Some(self.debug_script(srv, stream, sess, argv)?)
                    }
                    Flow::Shutdown => {
                        self.flush(stream, sess).await?;
                        srv.request_shutdown();
                        return Ok(Served::Closed);
                    }
                    Flow::Continue | Flow::Close => {
                        // Gone for clients that redirect their invalidations here from the
                        // moment its last reply (QUIT's OK) can be seen, as in Valkey.
                        info.inbox.close();
                        self.flush(stream, sess).await?;
                        return Ok(Served::Closed);
                    }
                };
                // The waited-for command has run: carry on with what is buffered after it.
                flow = match next {
                    None => return Ok(Served::Closed),
                    Some(Flow::Continue) if !sess.close_after_reply => self.process(srv, sess),
                    Some(f) => f,
                };
            }
            // The query buffer goes back to the thread first, if it holds nothing: it is not
            // the client's memory from here on (Valkey's shared query buffer is not either).
            self.settle_query_buffer();
            let evict_limit = srv.rt.load().client_eviction_limit;
            // Replies are in the buffer: a client whose pending output takes it over
            // `maxmemory-clients` is closed before they are written, as Valkey's is.
            if self.evicted(srv, sess, evict_limit) {
                return Ok(Served::Closed);
            }
            // Let every other ready connection run its commands first, then write: replies
            // leave in a burst, as Valkey writes all pending replies before it sleeps, so a
            // client is woken once for many replies instead of once per reply (waking a
            // sleeping peer dominated the kernel time of the send path).
            if sess.thaw_after_reply.is_some() {
                self.flush(stream, sess).await?;
            } else {
                if !self.out.is_empty() {
                    tokio::task::yield_now().await;
                }
                self.send(srv, stream, sess).await?;
            }
            self.release_idle_buffers(stream, sess);
            if self.evicted(srv, sess, evict_limit) {
                return Ok(Served::Closed);
            }
        }
    }

    /// Whether a client that had to wait (or was handed over during a long call) only runs
    /// commands again, so that an event loop may take it back before its next read: nothing
    /// feeds it from elsewhere, its replies leave as soon as they are made, and a loop is free.
    fn back_to_loop(&self, srv: &Server, stream: &Socket, sess: &Session) -> bool {
        self.monitor.is_none()
            && sess.subs.is_none()
            && !sess.close_after_reply
            && sess.thaw_after_reply.is_none()
            && !srv.freeze.frozen()
            && !self.aof.holds_replies()
            && stream.queued() == 0
            && crate::evloop::Loops::get(srv).is_some_and(|l| l.has_free_loop())
    }

    /// Runs what was read, in its turn while DEBUG SLEEP stops the server: what was sent
    /// meanwhile waits, as in Valkey's one sleeping event loop, and then runs in turn.
    async fn process_turn(&mut self, srv: &Server, sess: &mut Session) -> Flow {
        let turn = if srv.freeze.frozen() { Some(srv.freeze.turn().await) } else { None };
        // Run what is buffered; a blocked or paused command suspends the rest of the
        // pipeline until it has run, as in Valkey.
        let flow = self.process(srv, sess);
        drop(turn);
        flow
    }

    /// Accounts for `n` bytes just read into the query buffer and checks the limits they may
    /// pass; false when the client must be closed (evicted, or its query buffer too big).
    pub(crate) fn took_input(&mut self, srv: &Server, rt: &Runtime, sess: &mut Session, n: usize) -> bool {
        let info = &sess.info;
        info.net_in.fetch_add(n as u64, Ordering::Relaxed);
        sess.pending_in += n as u64;
        info.query_buf.note_peak(self.rbuf.len() - self.big_arg_start());
        if self.evicted(srv, sess, rt.client_eviction_limit) {
            return false;
        }
        if self.rbuf.len() > rt.query_buffer_limit {
            tracing::warn!(
                "Closing client that reached max query buffer length: id={} addr={} (qbuf initial bytes: {:?})",
                info.id,
                info.addr,
                String::from_utf8_lossy(&self.rbuf[..self.rbuf.len().min(64)])
            );
            srv.stats.qbuf_limit_disconnections.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Serves a replica on this connection after its PSYNC: the replication session reads
    /// and writes the socket itself (plain or TLS). While DEBUG SLEEP stops the server the
    /// session neither sends (pings included) nor sees the replica's acknowledgements.
    async fn serve_replica(
        &mut self,
        srv: &Arc<Server>,
        stream: &mut Socket,
        start: crate::replication::SyncStart,
    ) -> io::Result<()> {
        let leftover = std::mem::take(&mut self.rbuf);
        let source = crate::replication::snapshots(srv);
        let mut session = start.session(srv).await;
        session.describe_commands(crate::replication::describe_link_commands(srv));
        if let Some(dup) = stream.plain_duplicate() {
            session.lend_socket(Box::new(crate::replication::LentSocket(dup)));
        }
        let gated = crate::freeze::Gated::new(stream, srv.clone());
        let _ = session.run(gated, &leftover, source.as_ref()).await;
        Ok(())
    }

    /// Runs an EVAL under the Lua debugger (SCRIPT DEBUG): the session reads the client's
    /// debugger commands and writes its answers on the socket itself, holding this thread
    /// while the script is stopped, as Valkey's synchronous session holds its event loop.
    /// The worker's other clients move to other threads meanwhile. The connection closes
    /// after the script's reply, which is how the client knows the session is over.
    fn debug_script(
        &mut self,
        srv: &Arc<Server>,
        stream: &mut Socket,
        sess: &mut Session,
        argv: Vec<Vec<u8>>,
    ) -> io::Result<Flow> {
        let rolled_back = sess.debug_scripts == Some(crate::script::DebugMode::RolledBack);
        sess.close_after_reply = true;
        // Whatever the client sent after its EVAL is for the debugger.
        let input = self.rbuf.to_vec();
        self.rbuf.clear();
        self.decoder = Decoder::default();
        let lent = stream.lend(std::time::Duration::from_secs(5))?;
        let threshold = std::time::Duration::from_millis(srv.rt.load().busy_reply_threshold);
        let body = argv.get(1).map_or(&[][..], Vec::as_slice);
        let session = hotkv_scripting::ldb::Session::new(Box::new(lent), body, threshold, input);
        self.scratch.debugger = Some(Box::new(session));
        tracing::info!(
            "Lua debugging session started ({}) for client id={} addr={}",
            if rolled_back { "changes rolled back at its end" } else { "sync, changes kept" },
            sess.id,
            sess.info.addr
        );
        sess.info.debugging.store(true, Ordering::Relaxed);
        let mut run = || {
            let engine = srv.engine.load();
            let rt = srv.rt.load();
            let batch = Batch { srv, engine: &engine, rt: &rt, now_ms: unix_ms() };
            let (flat, spans) = flatten(&argv);
            let args = hotkv_protocol::Args::from_parts(&flat, &spans);
            dispatch(&batch, sess, args, &mut self.out, &mut self.scratch)
        };
        let flow = match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(run)
            }
            _ => run(),
        };
        if let Some(mut session) = self.scratch.debugger.take() {
            // A script that never ran (a compile error) still ends its session first.
            session.close();
            if let Ok(lent) = session.into_io().into_any().downcast::<crate::io::Lent>() {
                stream.take_back(*lent)?;
            }
        }
        sess.info.debugging.store(false, Ordering::Relaxed);
        sess.debug_scripts = None;
        tracing::info!("Lua debugging session ended for client id={}", sess.id);
        Ok(flow)
    }

    /// Waits until a blocked command is served, times out or is unblocked, and writes its
    /// reply. Returns how the command ended (a retry may be paused), or None when the client
    /// went away meanwhile.
    async fn wait_blocked(
        &mut self,
        srv: &Arc<Server>,
        stream: &mut Socket,
        sess: &mut Session,
        mut wait: BlockWait,
    ) -> io::Result<Option<Flow>> {
        loop {
            sess.set_flag(flag::BLOCKED, true);
            let deadline = wait.deadline_ms.map(|ms| {
                let left = (ms - unix_ms()).max(0) as u64;
                tokio::time::Instant::now() + std::time::Duration::from_millis(left)
            });
            let wakeup = loop {
                let room = self.read_room(sess);
                tokio::select! {
                    w = &mut wait.rx => break w.unwrap_or(Wakeup::Retry),
                    _ = sleep_until(deadline) => {
                        // Claim our own wakeup; if the server already claimed it, it is serving
                        // us right now and the reply is on its way.
                        if wait.waiter.claim().is_some() {
                            break Wakeup::Timeout;
                        }
                    }
                    n = stream.read_into(&mut self.rbuf, room) => {
                        // More commands wait behind the blocked one; only a closed socket ends it.
                        if n.unwrap_or(0) == 0 {
                            srv.blocked.unregister(&wait.waiter);
                            sess.set_flag(flag::BLOCKED, false);
                            return Ok(None);
                        }
                        self.publish_query_buffer(sess);
                    }
                }
            };
            srv.blocked.unregister(&wait.waiter);
            if let Wakeup::Reply(_, nanos) = &wakeup {
                // Logged before the client stops counting as blocked: whoever sees it
                // unblocked also sees it in the slow log.
                let engine = srv.engine.load();
                let rt = srv.rt.load();
                let batch = Batch { srv, engine: &engine, rt: &rt, now_ms: unix_ms() };
                let (flat, spans) = flatten(&wait.waiter.args);
                let args = hotkv_protocol::Args::from_parts(&flat, &spans);
                crate::dispatch::account_client(&batch, sess, srv.registry.get(wait.waiter.cmd), &args, *nanos);
            }
            sess.set_flag(flag::BLOCKED, false);
            let close = matches!(wakeup, Wakeup::Disconnect(_));
            let mode = match wakeup {
                Wakeup::Reply(bytes, _) => {
                    self.out.raw(&bytes);
                    return Ok(Some(Flow::Continue));
                }
                Wakeup::Error(msg) | Wakeup::Disconnect(msg) => {
                    // CLIENT UNBLOCK ... ERROR, or the node turning replica, ends the call: a
                    // failed one in commandstats.
                    srv.stats.call(wait.waiter.cmd, 0, true, srv.rt.load().latency_tracking);
                    crate::dispatch::reply_error(srv, &mut self.out, &hotkv_engine::CommandError::raw(msg));
                    return Ok(Some(if close { Flow::Close } else { Flow::Continue }));
                }
                Wakeup::Retry => BlockMode::Normal,
                Wakeup::Timeout => BlockMode::TimedOut,
            };
            // Run the command again: with data now (retry), or for its timeout reply.
            let (flat, spans) = flatten(&wait.waiter.args);
            let engine = srv.engine.load();
            let rt = srv.rt.load();
            let batch = Batch { srv, engine: &engine, rt: &rt, now_ms: unix_ms() };
            let args = hotkv_protocol::Args::from_parts(&flat, &spans);
            sess.reprocessing = true;
            let waiter = wait.waiter.clone();
            let flow = dispatch_with(&batch, sess, args, &mut self.out, &mut self.scratch, mode, Some(&waiter.plan));
            sess.reprocessing = false;
            match flow {
                Flow::Block(again) => wait = again,
                other => return Ok(Some(other)),
            }
        }
    }

    /// Performs a command's request to another node, then runs the command's second turn
    /// with the outcome (which may ask again). The client's socket is not watched meanwhile:
    /// the request is bounded by its timeout, and the second turn must run even if the
    /// client has gone, so that what the target acknowledged is not left on both nodes.
    async fn wait_remote(&mut self, srv: &Arc<Server>, sess: &mut Session, mut wait: RemoteWait) -> Flow {
        loop {
            let outcome = match wait.request {
                RemoteRequest::Migrate(req) => {
                    let reply = srv.migrate.perform(srv, &req).await;
                    RemoteOutcome::Migrate(req, reply)
                }
            };
            let (flat, spans) = flatten(&wait.argv);
            let engine = srv.engine.load();
            let rt = srv.rt.load();
            let batch = Batch { srv, engine: &engine, rt: &rt, now_ms: unix_ms() };
            let args = hotkv_protocol::Args::from_parts(&flat, &spans);
            sess.reprocessing = true;
            self.scratch.resume = Some(outcome);
            let flow = dispatch_with(
                &batch,
                sess,
                args,
                &mut self.out,
                &mut self.scratch,
                BlockMode::Normal,
                Some(&wait.plan),
            );
            sess.reprocessing = false;
            match flow {
                Flow::Remote(again) => wait = *again,
                other => return other,
            }
        }
    }

    /// Waits until CLIENT PAUSE lets `argv` run, then runs it (it may be paused again if the
    /// pause was only relaxed, or block). The client counts as blocked meanwhile, as Valkey's
    /// postponed clients do. Returns how the command ended, or None when the client went
    /// away meanwhile.
    async fn wait_unpaused(
        &mut self,
        srv: &Arc<Server>,
        stream: &mut Socket,
        sess: &mut Session,
        mut argv: Vec<Vec<u8>>,
    ) -> io::Result<Option<Flow>> {
        loop {
            sess.set_flag(flag::BLOCKED, true);
            loop {
                let room = self.read_room(sess);
                tokio::select! {
                    _ = srv.pause.released() => break,
                    n = stream.read_into(&mut self.rbuf, room) => {
                        // More commands wait behind the paused one; only a closed socket ends it.
                        if n.unwrap_or(0) == 0 {
                            sess.set_flag(flag::BLOCKED, false);
                            return Ok(None);
                        }
                        self.publish_query_buffer(sess);
                    }
                }
            }
            sess.set_flag(flag::BLOCKED, false);
            let (flat, spans) = flatten(&argv);
            let engine = srv.engine.load();
            let rt = srv.rt.load();
            let batch = Batch { srv, engine: &engine, rt: &rt, now_ms: unix_ms() };
            let args = hotkv_protocol::Args::from_parts(&flat, &spans);
            match dispatch(&batch, sess, args, &mut self.out, &mut self.scratch) {
                Flow::Paused(again) => argv = again,
                other => return Ok(Some(other)),
            }
        }
    }

    /// Encodes a push (a CLIENT TRACKING invalidation) and whatever else is queued after it.
    pub(crate) fn push(&mut self, sess: &mut Session, p: &crate::tracking::Push) {
        crate::tracking::write_push(&mut self.out, sess.subscribed(), p);
        crate::tracking::drain(sess, &mut self.out);
    }

    /// Encodes a pub/sub message in the client's protocol.
    fn deliver(&mut self, sess: &mut Session, msg: crate::pubsub::Message) {
        use crate::pubsub::Kind;
        if msg.ended {
            let Some(subs) = &mut sess.subs else { return };
            let list = subs.list(Kind::Shard);
            let Some(i) = list.iter().position(|c| **c == *msg.channel) else { return };
            list.remove(i);
            // Shard subscriptions only, as SUNSUBSCRIBE counts them.
            let count = list.len();
            self.out.push(3);
            self.out.bulk(Kind::Shard.unsubscribe_word());
            self.out.bulk(&msg.channel);
            self.out.int(count as i64);
            return;
        }
        if let Some(subs) = &sess.subs {
            let size = msg.channel.len() + msg.payload.len() + msg.pattern.as_ref().map_or(0, |p| p.len()) + 32;
            subs.queued.fetch_sub(size.min(subs.queued.load(Ordering::Relaxed)), Ordering::Relaxed);
        }
        match msg.kind {
            Kind::Pattern => {
                self.out.push(4);
                self.out.bulk(b"pmessage");
                self.out.bulk(msg.pattern.as_deref().unwrap_or(b""));
            }
            Kind::Channel => {
                self.out.push(3);
                self.out.bulk(b"message");
            }
            Kind::Shard => {
                self.out.push(3);
                self.out.bulk(b"smessage");
            }
        }
        self.out.bulk(&msg.channel);
        self.out.bulk(&msg.payload);
    }

    /// The capacity the query buffer needs for the next read (it grows only once data is there):
    /// room for one read, or a big argument's whole size (see `query_buffer::read_capacity`).
    /// What it is about to hold counts for the peak the cron resizes by.
    pub(crate) fn read_room(&self, sess: &Session) -> usize {
        let capacity = self.rbuf.capacity();
        let (len, want) = (self.rbuf.len(), self.decoder.wanted_capacity());
        let room = crate::query_buffer::read_capacity(len, capacity, want, self.big_arg_start());
        if room > capacity {
            sess.info.query_buf.note_peak(room - self.big_arg_start());
        }
        room
    }

    /// Where the big argument being received starts in the query buffer (0 when none is):
    /// Valkey has trimmed the bytes before it, so its buffer's sizes count from there.
    fn big_arg_start(&self) -> usize {
        self.decoder.big_arg_start().unwrap_or(0)
    }

    /// Publishes the query buffer's sizes (CLIENT LIST `qbuf=`, `qbuf-free=`, the cron) and
    /// what the connection uses.
    pub(crate) fn publish_query_buffer(&self, sess: &Session) {
        let (start, len) = (self.big_arg_start(), self.rbuf.len());
        let bulk = self.decoder.wanted_capacity().saturating_sub(start);
        sess.info.query_buf.publish(len - start, self.rbuf.capacity() - len, bulk);
        self.note_memory(sess);
    }

    /// Something was left in the inbox: a push to write, or, when it only rang, the cron's
    /// request to resize the query buffer.
    async fn take_mail(
        &mut self,
        stream: &mut Socket,
        sess: &mut Session,
        mail: Option<crate::tracking::Push>,
    ) -> io::Result<()> {
        match mail {
            Some(p) => {
                self.push(sess, &p);
                self.flush(stream, sess).await
            }
            None => {
                if self.apply_query_buffer_request(sess) {
                    stream.release_idle();
                }
                Ok(())
            }
        }
    }

    /// Applies the cron's resize request, if one is pending: the buffer never drops what it
    /// holds, whatever arrived since the cron looked.
    /// True when the socket should drop its idle buffers too (the query buffer is gone).
    pub(crate) fn apply_query_buffer_request(&mut self, sess: &Session) -> bool {
        let Some(resize) = sess.info.query_buf.take_request() else { return false };
        let len = self.rbuf.len();
        let size = match resize {
            Resize::Free if len == 0 => {
                self.rbuf_kept = false;
                0
            }
            Resize::Free => len,
            Resize::Shrink(n) => (n + self.big_arg_start()).max(len),
        };
        if size < self.rbuf.capacity() {
            let mut shrunk = BytesMut::with_capacity(size);
            shrunk.extend_from_slice(&self.rbuf);
            self.rbuf = shrunk;
        }
        self.publish_query_buffer(sess);
        self.rbuf.capacity() == 0
    }

    /// Drops the `n` bytes of run commands from the front of the query buffer, moving what
    /// follows (part of a command, usually a few bytes) to the front as Valkey's `sdsrange`
    /// does, so the buffer keeps its whole allocation for what comes next.
    fn consume(&mut self, n: usize) {
        let len = self.rbuf.len();
        if n == len {
            self.rbuf.clear();
        } else if n > 0 {
            self.rbuf.copy_within(n.., 0);
            self.rbuf.truncate(len - n);
        }
    }

    /// Under `maxmemory-clients`: reports what this connection uses now, evicts clients if all
    /// together are over the limit, and says whether this one was among them.
    pub(crate) fn evicted(&self, srv: &Server, sess: &Session, limit: usize) -> bool {
        if limit == 0 {
            return false;
        }
        self.note_memory(sess);
        crate::client_evict::check(srv, &sess.info, limit);
        sess.info.is_killed()
    }

    /// Records what this connection uses now (CLIENT LIST `tot-mem`, `maxmemory-clients`).
    fn note_memory(&self, sess: &Session) {
        // The thread's shared query buffer, lent for one read, is not the client's memory
        // (Valkey does not count its `thread_shared_qb` either).
        let own = self.rbuf_kept || self.decoder.big_arg_start().is_some();
        let rbuf = if own { self.rbuf.capacity() } else { 0 };
        let used = crate::client_evict::usage(sess, rbuf, self.out.capacity());
        sess.info.used.store(used, Ordering::Relaxed);
    }

    /// Runs every complete command in the read buffer.
    pub(crate) fn process(&mut self, srv: &Server, sess: &mut Session) -> Flow {
        self.process_with(srv, &srv.engine.load(), &srv.rt.load(), sess)
    }

    /// [`Conn::process`] with the settings snapshots the caller holds (an event loop keeps
    /// them in an `arc_swap::Cache`, which costs a pointer compare where a load takes a
    /// debt slot: six loads were a tenth of a pipeline-1 SET's instructions).
    pub(crate) fn process_with(
        &mut self,
        srv: &Server,
        engine: &EngineConfig,
        rt: &Runtime,
        sess: &mut Session,
    ) -> Flow {
        let now_ms = unix_ms();
        sess.info.last_interaction.store(now_ms, Ordering::Relaxed);
        let batch = Batch { srv, engine, rt, now_ms };
        let mut flow = Flow::Continue;
        let started = quanta::Instant::now();
        let mut commands = 0u64;
        let mut protocol_error = None;
        let obuf = crate::obuf_limit::class_limit(&sess.info, rt).filter(|l| !l.is_none());
        self.limit_replies(sess, obuf);
        loop {
            // Decode every complete command first, then warm the cache lines their keys will
            // touch, then run them: the loads of a whole pipeline overlap instead of missing
            // one after another. Before authentication commands are decoded one at a time,
            // since AUTH changes the request limits for what follows.
            let mut pending = None;
            let mut drained = false;
            self.cmds.clear();
            self.spans.clear();
            let one_at_a_time = !sess.authenticated;
            loop {
                let limits = Limits { max_bulk_len: rt.proto_max_bulk_len, auth_required: !sess.authenticated };
                match self.decoder.next(&self.rbuf, limits) {
                    Ok(Step::Command) if self.decoder.is_inline() => {
                        // Inline arguments live in the decoder and the next command would
                        // overwrite them: run the batch so far, then this one.
                        let args = self.decoder.args(&self.rbuf);
                        pending = Some((args.iter().map(<[u8]>::to_vec).collect::<Vec<_>>(), self.decoder.consumed()));
                        break;
                    }
                    Ok(Step::Command) => {
                        let args = self.decoder.args(&self.rbuf);
                        let at = self.spans.len();
                        self.spans.extend_from_slice(args.spans());
                        self.cmds.push((at, args.len(), self.decoder.consumed(), self.decoder.frame_start()));
                        if one_at_a_time || self.cmds.len() >= MAX_BATCH {
                            break;
                        }
                    }
                    Ok(Step::Empty) => {}
                    Ok(Step::Incomplete) => {
                        drained = true;
                        break;
                    }
                    Err(e) => {
                        protocol_error = Some(e);
                        drained = true;
                        break;
                    }
                }
            }
            if self.cmds.is_empty() && pending.is_none() {
                break;
            }
            self.prefetch(srv, sess.db);
            let mut stopped = false;
            for i in 0..self.cmds.len() {
                let (at, n, end, frame) = self.cmds[i];
                let args = hotkv_protocol::Args::decoded(&self.rbuf, &self.spans[at..at + n], frame);
                commands += 1;
                if let Some(Some((slot, hash))) = self.hints.get(i) {
                    let at = args.get(1).as_ptr() as usize;
                    self.scratch.set_hint(KeyHint { arg: 1, at, slot: *slot, hash: Some(*hash) });
                }
                flow = dispatch(&batch, sess, args, &mut self.out, &mut self.scratch);
                let stop = !flow.is_continue() || sess.close_after_reply;
                let over = !stop && self.over_output_limit(srv, sess, obuf);
                if over {
                    flow = Flow::Close;
                }
                if stop || over {
                    // The commands after this one were decoded but must wait (a blocked
                    // client) or never run (a closing one): decode them again later.
                    self.decoder.rewind_to(end);
                    protocol_error = None;
                    pending = None;
                    stopped = true;
                    break;
                }
            }
            if stopped {
                break;
            }
            if let Some((argv, _)) = pending.take() {
                let (flat, spans) = flatten(&argv);
                let args = hotkv_protocol::Args::from_parts(&flat, &spans);
                commands += 1;
                flow = dispatch(&batch, sess, args, &mut self.out, &mut self.scratch);
                if !flow.is_continue() || sess.close_after_reply || self.over_output_limit(srv, sess, obuf) {
                    if flow.is_continue() && !sess.close_after_reply {
                        flow = Flow::Close;
                    }
                    break;
                }
            }
            if drained {
                break;
            }
        }
        if self.out.limit_passed() && !sess.info.is_killed() {
            // A command that passed the limit and then blocked: its replies are gone, so the
            // client cannot be served on.
            crate::obuf_limit::close(srv, &sess.info, false);
        }
        self.out.set_limit(None);
        if let Some(e) = protocol_error {
            let msg = format!("ERR Protocol error: {e}");
            tracing::debug!("Protocol error ({e}) from client: id={} addr={}", sess.id, sess.info.addr);
            self.out.error(&msg);
            srv.stats.error("ERR");
            sess.close_after_reply = true;
        }
        let n = self.decoder.discard_consumed();
        self.consume(n);
        // A big argument's header was just read: its room is reserved now, as Valkey does when
        // it parses `$N`, so CLIENT LIST shows it before the argument's bytes arrive.
        if self.decoder.big_arg_start().is_some() {
            let room = self.read_room(sess);
            crate::io::grow_exactly(&mut self.rbuf, room);
        }
        srv.stats.batch(commands, started.elapsed().as_micros() as u64);
        srv.stats.absorb(&mut sess.local, std::mem::take(&mut sess.pending_in), self.out.len() as u64);
        flow
    }

    /// Prefetches the lines of every decoded command's second argument, which is the key of
    /// nearly every data command (a wrong guess only costs a useless hint).
    fn prefetch(&mut self, srv: &Server, db: usize) {
        self.hints.clear();
        if self.cmds.len() < 2 {
            return;
        }
        let (rbuf, spans) = (&self.rbuf, &self.spans);
        let keys = self.cmds.iter().map(|&(at, n, _, _)| (n >= 2).then(|| &rbuf[spans[at + 1].0..spans[at + 1].1]));
        prefetch_keys(srv, db, keys, &mut self.hints);
    }

    /// Bounds what the batch's replies may hold by the hard output limit of the client's class,
    /// counting what already waits to reach the client: a reply being built stops growing
    /// once past it (see `ReplyBuf::set_limit`), as Valkey closes a client as soon as its reply
    /// list passes the limit. Only compares a length per append.
    fn limit_replies(&mut self, sess: &Session, limit: Option<crate::obuf_limit::Limit>) {
        let Some(hard) = limit.map(|l| l.hard).filter(|&h| h > 0) else {
            self.out.set_limit(None);
            return;
        };
        let pending = self.out.len() + sess.info.pending_output();
        let free = crate::obuf_limit::FREE_BYTES;
        // The limit is reached at `hard` bytes, the buffer drops its replies past its room.
        self.out.set_limit(Some(ReplyLimit {
            buffer_room: free.saturating_sub(pending),
            list_room: hard.saturating_sub(pending.saturating_sub(free) + 1),
        }));
    }

    /// `client-output-buffer-limit` after each command: a client whose replies passed the hard
    /// limit, or whose pending output stayed above the soft limit too long, is closed without
    /// its replies.
    fn over_output_limit(&mut self, srv: &Server, sess: &Session, limit: Option<crate::obuf_limit::Limit>) -> bool {
        let Some(limit) = limit else { return false };
        // Replies the socket holds unsent count: a client that does not read reaches the limit.
        let pending = self.out.len() + sess.info.pending_output();
        if !self.out.limit_passed() && !crate::obuf_limit::reached(&sess.info, pending, limit) {
            return false;
        }
        self.out.truncate(0);
        crate::obuf_limit::close(srv, &sess.info, false);
        true
    }

    async fn flush(&mut self, stream: &mut Socket, sess: &mut Session) -> io::Result<()> {
        let result = self.write_out(stream, sess).await;
        // A DEBUG SLEEP of this client: the others run again once its reply is out (or the
        // connection failed), before anything it does next can wait.
        sess.thaw_after_reply = None;
        result
    }

    async fn write_out(&mut self, stream: &mut Socket, sess: &Session) -> io::Result<()> {
        self.hand_over(stream, sess).await?;
        stream.flush().await
    }

    /// Hands the batch's replies to the socket without waiting for a client that does not
    /// read them: what the kernel cannot take stays queued in the socket (CLIENT LIST `omem`)
    /// and leaves while this connection goes on reading and running commands, as Valkey goes
    /// on filling a client's reply list. Only past [`MAX_QUEUED`] (when no output limit closed
    /// the client first) does the connection wait for its client, so a default configuration
    /// never holds unbounded replies for one client.
    async fn send(&mut self, srv: &Server, stream: &mut Socket, sess: &Session) -> io::Result<()> {
        self.hand_over(stream, sess).await?;
        let queued = stream.queued();
        if queued > MAX_QUEUED && queued > srv.rt.load().obuf_normal.hard {
            stream.flush().await?;
        }
        Ok(())
    }

    async fn hand_over(&mut self, stream: &mut Socket, sess: &Session) -> io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        sess.info.obl.store(self.out.len(), Ordering::Relaxed);
        // Once per batch of replies, not per command (`appendfsync always`).
        self.aof.wait_replies().await;
        self.write_replies(sess, |bytes| stream.write(bytes))
    }

    /// Whether the batch's replies may leave now: false while `appendfsync always` holds them
    /// until the batch's writes are on disk.
    pub(crate) fn replies_released(&self) -> bool {
        let wait = std::pin::pin!(self.aof.wait_replies());
        wait.poll(&mut Context::from_waker(std::task::Waker::noop())).is_ready()
    }

    /// Passes the batch's replies to `write` (the socket's queue) and empties the buffer.
    pub(crate) fn write_replies(
        &mut self,
        sess: &Session,
        write: impl FnOnce(&[u8]) -> io::Result<()>,
    ) -> io::Result<()> {
        let len = self.out.len();
        sess.info.reply_buf.note(len);
        write(self.out.as_bytes())?;
        sess.info.net_out.fetch_add(len as u64, Ordering::Relaxed);
        self.out.truncate(0);
        sess.info.obl.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// Whether replies wait in the buffer.
    pub(crate) fn has_replies(&self) -> bool {
        !self.out.is_empty()
    }

    /// After a batch has run, before its replies are written (writing needs no read buffer): a
    /// query buffer that holds nothing goes back to the thread, so the connections that run
    /// meanwhile read into it (Valkey's clients share one query buffer per thread), unless it
    /// became the client's own, which one that holds part of a command does (the cron frees it
    /// once idle).
    pub(crate) fn settle_query_buffer(&mut self) {
        if !self.rbuf.is_empty() {
            self.rbuf_kept = true;
        } else if !self.rbuf_kept && self.rbuf.capacity() > 0 {
            crate::query_buffer::give_back(std::mem::take(&mut self.rbuf));
        }
    }

    /// After a batch's replies are written: a reply buffer no larger than the size the reply
    /// buffer cron gave it (16 KiB at most, 1 KiB once idle for a while) is kept, and a socket
    /// with no query buffer drops its own idle state. So 10k idle clients cost little memory,
    /// while one whose replies fit keeps its buffer across batches.
    fn release_idle_buffers(&mut self, stream: &mut Socket, sess: &Session) {
        if self.release_idle(sess) {
            stream.release_idle();
        }
    }

    /// [`Conn::release_idle_buffers`] but for the socket's part: true when the socket should
    /// drop its own idle buffers.
    pub(crate) fn release_idle(&mut self, sess: &Session) -> bool {
        if self.out.capacity() > sess.info.reply_buf.size() {
            self.out.release();
        }
        self.publish_query_buffer(sess);
        self.rbuf.capacity() == 0
    }
}

/// `tls-auth-clients-user`: a client whose certificate names an existing, enabled ACL user (its
/// CN, or the first of its URI SANs that does) is logged in as that user once its handshake
/// completes (Valkey 9); any other client stays `default`.
fn login_by_certificate(srv: &Server, tls: &TlsSession, sess: &mut Session) {
    let mode = srv.rt.load().tls_cert_user;
    if mode == hotkv_tls::CertUser::Off {
        return;
    }
    let names = tls.peer_certificate_names(mode);
    let user = names.iter().find_map(|n| srv.acl.user(n.as_bytes()).filter(|u| u.rules().enabled()));
    match user {
        Some(user) => {
            tracing::debug!(client = sess.id, user = user.name(), "logged in by client certificate");
            sess.login(user);
        }
        None if !names.is_empty() => {
            tracing::debug!(client = sess.id, "client certificate names no enabled user");
        }
        None => {}
    }
}

async fn recv_message(subs: &mut Option<crate::pubsub::ClientSubs>) -> Option<crate::pubsub::Message> {
    match subs {
        Some(subs) => subs.rx.recv().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

async fn recv_monitor(rx: &mut Option<broadcast::Receiver<Arc<str>>>) -> Option<Arc<str>> {
    match rx {
        Some(rx) => loop {
            match rx.recv().await {
                Ok(line) => return Some(line),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        },
        None => std::future::pending().await,
    }
}

/// Prefetches, for each key, its slot's line, then its home group's line, then the lines of
/// the entry its hash most likely names, and pushes its (slot, hash) to `hints` (`None` where
/// there is no key). Each pass runs over all the keys before the next, so the misses of one
/// pass overlap instead of following one another.
pub(crate) fn prefetch_keys<'k>(
    srv: &Server,
    db: usize,
    keys: impl Iterator<Item = Option<&'k [u8]>>,
    hints: &mut Vec<Option<(u16, u32)>>,
) {
    let Some(d) = srv.ks.db_if_used(db) else { return };
    for key in keys {
        let hint = key.map(|key| {
            let slot = hotkv_engine::slot::key_slot(key);
            hotkv_engine::prefetch::read(d.slot(slot) as *const _ as usize);
            (slot, hotkv_engine::hash::key_hash(key))
        });
        hints.push(hint);
    }
    for &(slot, hash) in hints.iter().flatten() {
        d.slot(slot).prefetch_home(hash);
    }
    for &(slot, hash) in hints.iter().flatten() {
        d.slot(slot).prefetch_entry(hash);
    }
}

/// The Lua debugger reaches its client through the lent socket.
impl hotkv_scripting::ldb::DebugIo for crate::io::Lent {
    fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        crate::io::Lent::send(self, bytes)
    }

    fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        crate::io::Lent::recv(self, buf)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}
