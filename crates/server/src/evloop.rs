//! One event loop per worker thread for clients, as Valkey serves them: the loop
//! waits on one epoll instance, reads each client the kernel reports, runs every complete
//! command in its buffer there and then, and writes the replies of all the clients it served
//! at the end of the turn, before it waits again.
//!
//! A connection task on the async runtime costs more per request than that (a wake through
//! the runtime's I/O driver, two polls of the task with a yield between them so that replies
//! leave in a burst, the readiness bookkeeping): about 1,700 instructions at pipeline 1,
//! where the whole request costs 6,000-8,000 (docs/performance.md). Here a request costs one
//! `epoll_wait` share, one `recv`, one `send`, and the command.
//!
//! The loop serves a client only while it just runs commands. Whatever has to wait (a
//! blocked command, CLIENT PAUSE, MIGRATE's request to another node, a reply held for
//! `appendfsync always`, a DEBUG SLEEP, the Lua debugger, a replica's PSYNC) and whatever
//! receives from elsewhere (SUBSCRIBE, MONITOR) moves the client to its own task on the
//! runtime, with its buffers, its session and its unsent replies, at the exact point it
//! reached ([`crate::connection::Resume`]); once it only runs commands again it comes back
//! to a loop before its next read ([`Loops::try_adopt`]). The loop itself never waits for
//! anything but its epoll instance, so one client cannot hold up the others on it.
//!
//! A call that holds the thread for long (a script past its busy threshold) hands the
//! loop's other clients to runtime tasks before it goes on ([`on_long_run`]), so they get
//! their -BUSY replies and may SCRIPT KILL it, as Valkey's event loop serves clients while a
//! script runs.
//!
//! TLS clients are served the same way: the loop feeds what it reads to the client's
//! session and sends the session's handshake messages and records from the same queue as
//! plain bytes, so a batch of replies still leaves as one `send` of as few records as its
//! size allows.

use std::cell::RefCell;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Wake, Waker};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};
use parking_lot::Mutex;
use tracing::{debug, error};

use crate::connection::{Conn, MAX_QUEUED, Resume, forget_closed, log_panic, serve_from};
use crate::io::{OutQueue, Socket, TlsLayer, TlsRead, grow_exactly, read_tls_once};
use crate::registry::Flow;
use crate::server::{Runtime, Server};
use crate::session::Session;

/// The token of the loop's own waker (new clients, inbox mail).
const WAKE: Token = Token(usize::MAX);

/// The server's event loops, one per worker thread.
pub struct Loops {
    loops: Vec<Arc<Shared>>,
    next: AtomicUsize,
}

/// What other threads hand a loop.
struct Shared {
    waker: mio::Waker,
    queue: Mutex<Queue>,
    /// A long call holds the loop's thread: new clients go to another loop.
    busy: AtomicBool,
}

/// A client handed to a loop: its socket, its TLS side if any, what its queue holds, its
/// connection state.
pub(crate) type Adopted = (socket2::Socket, Option<Box<TlsLayer>>, OutQueue, Box<Conn>, Session);

#[derive(Default)]
struct Queue {
    adopted: Vec<Adopted>,
    /// Clients whose inbox has something (a CLIENT TRACKING push, the cron's resize request).
    mail: Vec<usize>,
}

impl Loops {
    /// The server's loops, started by the first client; None under `event-loop no`, or when
    /// the loops could not start (then every client gets a task, and the log says why).
    pub fn get(srv: &Server) -> Option<&Loops> {
        srv.loops
            .get_or_init(|| {
                let settings = srv.settings.load();
                if !settings.bool(crate::config::table::EVENT_LOOP) {
                    return None;
                }
                let srv = srv.this.get()?.upgrade()?;
                let handle = tokio::runtime::Handle::try_current().ok()?;
                match Loops::start(srv, handle, crate::worker_threads(&settings)) {
                    Ok(loops) => Some(loops),
                    Err(e) => {
                        tracing::warn!("Can't start the event loops, serving clients on runtime tasks: {e}");
                        None
                    }
                }
            })
            .as_ref()
    }

    fn start(srv: Arc<Server>, handle: tokio::runtime::Handle, n: usize) -> io::Result<Loops> {
        let mut loops = Vec::with_capacity(n);
        for i in 0..n {
            let poll = Poll::new()?;
            let waker = mio::Waker::new(poll.registry(), WAKE)?;
            let shared = Arc::new(Shared { waker, queue: Mutex::default(), busy: AtomicBool::new(false) });
            let (srv, handle, sh) = (srv.clone(), handle.clone(), shared.clone());
            std::thread::Builder::new().name(format!("hotkv-loop-{i}")).spawn(move || run(srv, handle, sh, poll))?;
            loops.push(shared);
        }
        Ok(Loops { loops, next: AtomicUsize::new(0) })
    }

    /// Whether some loop is not held by a long call.
    pub(crate) fn has_free_loop(&self) -> bool {
        self.loops.iter().any(|l| !l.busy.load(Ordering::Relaxed))
    }

    /// Hands a client back from its task to a loop, with what its queue still holds; gives
    /// it all back when every loop is held by a long call.
    #[allow(clippy::result_large_err)] // the error is the client itself, given back
    pub(crate) fn try_adopt(
        &self,
        sock: socket2::Socket,
        tls: Option<Box<TlsLayer>>,
        queue: OutQueue,
        conn: Box<Conn>,
        sess: Session,
    ) -> Result<(), Adopted> {
        match self.free_loop() {
            Some(shared) => {
                shared.queue.lock().adopted.push((sock, tls, queue, conn, sess));
                if let Err(e) = shared.waker.wake() {
                    error!("Can't wake an event loop: {e}");
                }
                Ok(())
            }
            None => Err((sock, tls, queue, conn, sess)),
        }
    }

    /// The next loop not held by a long call, round robin.
    fn free_loop(&self) -> Option<&Arc<Shared>> {
        let n = self.loops.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n).map(|i| &self.loops[(start + i) % n]).find(|l| !l.busy.load(Ordering::Relaxed))
    }

    /// Hands a registered client (counted in CLIENT LIST already) to a loop; to its own
    /// task when every loop is held by a long call.
    pub(crate) fn adopt(
        &self,
        srv: &Arc<Server>,
        sock: socket2::Socket,
        tls: Option<Box<TlsLayer>>,
        conn: Box<Conn>,
        sess: Session,
    ) {
        if let Err((sock, tls, queue, conn, sess)) = self.try_adopt(sock, tls, OutQueue::default(), conn, sess) {
            spawn_task(srv, sock, tls, queue, conn, sess, Resume::Read);
        }
    }
}

/// Wakes the loop for a client's inbox.
struct MailWaker {
    shared: Arc<Shared>,
    token: usize,
}

impl Wake for MailWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.shared.queue.lock().mail.push(self.token);
        let _ = self.shared.waker.wake();
    }
}

/// A client on the loop.
struct Client {
    sock: socket2::Socket,
    /// The TLS side of a client of the TLS port.
    tls: Option<Box<TlsLayer>>,
    queue: OutQueue,
    conn: Box<Conn>,
    sess: Session,
    waker: Waker,
    /// The kernel may hold unread bytes: epoll is edge-triggered, so until a read finds the
    /// socket drained no event will say so again.
    readable: bool,
    /// The client closed its side (or the socket failed): read until the end of the stream,
    /// which no further event would announce.
    hung_up: bool,
    /// A batch ran, or a push came: at the end of the turn its replies go out and its buffers
    /// are settled and published (CLIENT LIST, `maxmemory-clients`).
    pending: bool,
    /// It is on the turn's list of writes already.
    write_queued: bool,
    /// It closed its side, or must close: gone once its queued replies have left.
    closing: bool,
}

/// What a turn of a client asks for.
enum Next {
    Keep,
    Close,
    /// To a task of its own, from this point.
    Task(Resume),
}

/// The loop's clients, where a long call on this thread can reach them ([`on_long_run`]).
struct State {
    srv: Arc<Server>,
    handle: tokio::runtime::Handle,
    registry: Registry,
    shared: Arc<Shared>,
    clients: Vec<Option<Box<Client>>>,
    free: Vec<usize>,
    /// Clients to read again without waiting for an event (a read filled the buffer).
    again: Vec<usize>,
    /// Clients with replies to write at the end of the turn.
    writes: Vec<usize>,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
    /// The ciphertext of the TLS read in progress.
    static RAW: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Takes a client out of the loop for its turn, so that nothing of the loop stays borrowed
/// while its commands run (a long call may hand the others over meanwhile).
fn take(token: usize) -> Option<Box<Client>> {
    STATE.with(|s| s.borrow_mut().as_mut()?.clients.get_mut(token)?.take())
}

fn put_back(token: usize, c: Box<Client>) {
    STATE.with(|s| {
        if let Some(st) = s.borrow_mut().as_mut() {
            st.clients[token] = Some(c);
        }
    })
}

fn run(srv: Arc<Server>, handle: tokio::runtime::Handle, shared: Arc<Shared>, mut poll: Poll) {
    crate::crash::alt_stack_for_this_thread();
    // Commands that start background work (BGSAVE, CONFIG SET of a port) spawn it on the
    // runtime from here.
    let _runtime = handle.enter();
    // Replicas' senders are woken (or their sockets written) once per turn, below, not once
    // per batch.
    hotkv_replication::hold_wakes();
    let registry = match poll.registry().try_clone() {
        Ok(r) => r,
        Err(e) => {
            error!("Can't start an event loop: {e}");
            return;
        }
    };
    STATE.with(|s| {
        *s.borrow_mut() = Some(State {
            srv: srv.clone(),
            handle,
            registry,
            shared: shared.clone(),
            clients: Vec::new(),
            free: Vec::new(),
            again: Vec::new(),
            writes: Vec::new(),
        })
    });
    // The settings snapshots, checked by a pointer compare per client turn rather than
    // loaded (an arc_swap load takes a debt slot: six per request were a tenth of a
    // pipeline-1 SET's instructions).
    let mut rt_cache = arc_swap::Cache::new(&srv.rt);
    let mut engine_cache = arc_swap::Cache::new(&srv.engine);
    let mut events = Events::with_capacity(1024);
    let mut ready: Vec<(usize, bool)> = Vec::with_capacity(1024);
    let mut mail = Vec::new();
    let mut adopted = Vec::new();
    loop {
        let again = STATE.with(|s| s.borrow().as_ref().is_some_and(|st| !st.again.is_empty()));
        let timeout = again.then_some(std::time::Duration::ZERO);
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                error!("Event loop failed, its clients move to runtime tasks: {e}");
                on_long_run();
                return;
            }
            continue;
        }
        ready.clear();
        let mut woken = false;
        for ev in events.iter() {
            if ev.token() == WAKE {
                woken = true;
            } else {
                ready.push((ev.token().0, ev.is_read_closed() || ev.is_error()));
            }
        }
        STATE.with(|s| {
            if let Some(st) = s.borrow_mut().as_mut() {
                ready.extend(st.again.drain(..).map(|t| (t, false)));
            }
        });
        if woken {
            let mut q = shared.queue.lock();
            std::mem::swap(&mut q.mail, &mut mail);
            std::mem::swap(&mut q.adopted, &mut adopted);
        }
        for (sock, tls, queue, conn, sess) in adopted.drain(..) {
            if let Some(t) = admit(&srv, &shared, sock, tls, queue, conn, sess) {
                // Registered edge-triggered: what the client sent before counts as an event.
                ready.push((t, false));
                mail.push(t);
            }
        }
        for &(t, closed) in &ready {
            let snap = Snap { rt: rt_cache.load(), engine: engine_cache.load() };
            turn(&srv, &snap, t, Op::Event { closed });
        }
        for t in mail.drain(..) {
            let snap = Snap { rt: rt_cache.load(), engine: engine_cache.load() };
            turn(&srv, &snap, t, Op::Mail);
        }
        // Valkey's beforeSleep: the replies of every client served this turn leave now.
        let writes = STATE.with(|s| s.borrow_mut().as_mut().map(|st| std::mem::take(&mut st.writes)));
        let Some(mut writes) = writes else {
            srv.repl.primary.release_wakes(false);
            return;
        };
        for &t in &writes {
            let snap = Snap { rt: rt_cache.load(), engine: engine_cache.load() };
            turn(&srv, &snap, t, Op::Write);
        }
        writes.clear();
        STATE.with(|s| {
            if let Some(st) = s.borrow_mut().as_mut()
                && st.writes.is_empty()
            {
                st.writes = writes;
            }
        });
        // And what the turn's writes added to the stream goes to the replicas, on their
        // sockets from here when their senders wait (not while DEBUG SLEEP stops the server).
        srv.repl.primary.release_wakes(!srv.freeze.frozen());
        shared.busy.store(false, Ordering::Relaxed);
    }
}

/// Registers a client with the loop; its token, or None when it could not be registered.
fn admit(
    srv: &Arc<Server>,
    shared: &Arc<Shared>,
    sock: socket2::Socket,
    tls: Option<Box<TlsLayer>>,
    mut queue: OutQueue,
    conn: Box<Conn>,
    mut sess: Session,
) -> Option<usize> {
    use std::os::fd::AsRawFd;
    let info = sess.info.clone();
    let fd = sock.as_raw_fd();
    let registered = STATE.with(|s| {
        let mut s = s.borrow_mut();
        let st = s.as_mut()?;
        let t = st.free.pop().unwrap_or_else(|| {
            st.clients.push(None);
            st.clients.len() - 1
        });
        let r = sock
            .set_nonblocking(true)
            .and_then(|()| st.registry.register(&mut SourceFd(&fd), Token(t), Interest::READABLE | Interest::WRITABLE));
        match r {
            Ok(()) => Some(t),
            Err(e) => {
                st.free.push(t);
                debug!("client {} could not be registered: {e}", info.id);
                None
            }
        }
    });
    let Some(t) = registered else {
        forget_closed(srv, &mut sess, || {});
        return None;
    };
    *info.sock.lock() = Some(fd);
    let waker = Waker::from(Arc::new(MailWaker { shared: shared.clone(), token: t }));
    queue.publish_to(info.omem.clone());
    let c = Box::new(Client {
        sock,
        tls,
        queue,
        conn,
        sess,
        waker,
        readable: false,
        hung_up: false,
        pending: false,
        write_queued: false,
        closing: false,
    });
    put_back(t, c);
    Some(t)
}

/// The settings in force, as the loop last saw them.
struct Snap<'a> {
    rt: &'a Arc<Runtime>,
    engine: &'a Arc<hotkv_engine::ctx::EngineConfig>,
}

/// What the loop asks of a client.
#[derive(Clone, Copy)]
enum Op {
    /// An epoll event (or a read still owed: not closed then).
    Event { closed: bool },
    /// Its inbox rang.
    Mail,
    /// The end of the turn: write its replies.
    Write,
}

/// Runs `op` on the client of `token`, if it is still on the loop, and does what it asks.
/// A panic costs only that client, as on a connection task.
fn turn(srv: &Arc<Server>, snap: &Snap<'_>, token: usize, op: Op) {
    let Some(mut c) = take(token) else { return };
    let next = catch_unwind(AssertUnwindSafe(|| {
        crate::crash::in_connection(|| match op {
            Op::Event { closed } => c.serve(srv, snap, closed),
            Op::Mail => c.take_mail(),
            Op::Write => c.write(srv, snap.rt),
        })
    }));
    match next {
        Ok(Next::Keep) => {
            let again = matches!(op, Op::Event { .. }) && c.readable && !c.throttled(snap.rt);
            let write = c.pending && !c.write_queued;
            c.write_queued |= write;
            put_back(token, c);
            if again || write {
                STATE.with(|s| {
                    if let Some(st) = s.borrow_mut().as_mut() {
                        if again {
                            st.again.push(token);
                        }
                        if write {
                            st.writes.push(token);
                        }
                    }
                });
            }
        }
        Ok(Next::Close) => close(srv, token, c),
        Ok(Next::Task(resume)) => to_task(srv, token, c, resume),
        Err(panic) => {
            log_panic(srv, &c.sess, panic.as_ref());
            close(srv, token, c);
        }
    }
}

/// Forgets a client and closes its socket.
fn close(srv: &Server, token: usize, c: Box<Client>) {
    deregister(token, &c.sock);
    let Client { sock, mut tls, mut queue, mut sess, .. } = *c;
    forget_closed(srv, &mut sess, || {
        if let Some(t) = tls.as_deref_mut() {
            t.close(&sock, &mut queue);
        }
        let _ = sock.shutdown(std::net::Shutdown::Both);
    });
}

fn deregister(token: usize, sock: &socket2::Socket) {
    use std::os::fd::AsRawFd;
    let fd = sock.as_raw_fd();
    STATE.with(|s| {
        if let Some(st) = s.borrow_mut().as_mut() {
            let _ = st.registry.deregister(&mut SourceFd(&fd));
            st.free.push(token);
        }
    });
}

/// Moves a client to a task of its own, which takes it up at `resume`.
fn to_task(srv: &Arc<Server>, token: usize, c: Box<Client>, resume: Resume) {
    deregister(token, &c.sock);
    let Client { sock, tls, queue, conn, sess, .. } = *c;
    spawn_task(srv, sock, tls, queue, conn, sess, resume);
}

fn spawn_task(
    srv: &Arc<Server>,
    sock: socket2::Socket,
    tls: Option<Box<TlsLayer>>,
    queue: OutQueue,
    conn: Box<Conn>,
    mut sess: Session,
    resume: Resume,
) {
    let srv = srv.clone();
    let handle = STATE.with(|s| s.borrow().as_ref().map(|st| st.handle.clone()));
    let handle = match handle.or_else(|| tokio::runtime::Handle::try_current().ok()) {
        Some(h) => h,
        None => {
            forget_closed(&srv, &mut sess, || {});
            return;
        }
    };
    handle.spawn(async move {
        let id = sess.info.id;
        // Registering with the runtime reports what the client sent meanwhile: epoll
        // signals a socket that is already readable when it is added.
        match Socket::resume(sock, tls, queue, id) {
            Ok(s) => {
                *sess.info.sock.lock() = Some(s.raw_fd());
                serve_from(srv, s, conn, sess, resume).await;
            }
            Err(e) => {
                debug!("client {id} could not be registered: {e}");
                forget_closed(&srv, &mut sess, || {});
            }
        }
    });
}

/// Called on a thread about to be held by one call for long (a script past its busy
/// threshold): when it is an event loop's, the loop's other clients, and those handed to it,
/// move to runtime tasks, which serve them meanwhile, and new clients go elsewhere until the
/// loop's turn ends.
pub fn on_long_run() {
    let moved = STATE.with(|s| {
        let Ok(mut s) = s.try_borrow_mut() else { return None };
        let st = s.as_mut()?;
        st.shared.busy.store(true, Ordering::Relaxed);
        let mut moved = Vec::new();
        for t in 0..st.clients.len() {
            if let Some(c) = st.clients[t].take() {
                moved.push((t, c));
            }
        }
        let adopted = std::mem::take(&mut st.shared.queue.lock().adopted);
        Some((st.srv.clone(), moved, adopted))
    });
    let Some((srv, moved, adopted)) = moved else { return };
    for (t, c) in moved {
        let resume = if c.closing { Resume::Flow(Flow::Close) } else { Resume::Flow(Flow::Continue) };
        to_task(&srv, t, c, resume);
    }
    for (sock, tls, queue, conn, sess) in adopted {
        spawn_task(&srv, sock, tls, queue, conn, sess, Resume::Read);
    }
    STATE.with(|s| {
        if let Some(st) = s.borrow_mut().as_mut() {
            st.again.clear();
            st.writes.clear();
        }
    });
}

impl Client {
    /// The client's unsent replies are past the bound at which it is not read.
    fn throttled(&self, rt: &Runtime) -> bool {
        let queued = self.queue.len();
        queued > MAX_QUEUED && queued > rt.obuf_normal.hard
    }

    /// A readiness event (or a read still owed): sends what is queued (any event may be the
    /// one that says the socket takes more), then reads once and runs every complete command
    /// read.
    fn serve(&mut self, srv: &Server, snap: &Snap<'_>, closed: bool) -> Next {
        self.hung_up |= closed;
        if !self.queue.is_empty() {
            match self.queue.send(&self.sock) {
                Err(_) => return Next::Close,
                Ok(true) if self.closing => return Next::Close,
                Ok(_) => {}
            }
        }
        if self.closing {
            return Next::Keep;
        }
        if self.sess.info.is_killed() {
            return Next::Close;
        }
        // Readiness is cached, so every event is a chance to read: a kill (a shutdown of the
        // socket) shows as one too.
        self.readable = true;
        if self.throttled(snap.rt) {
            return Next::Keep;
        }
        let room = self.conn.read_room(&self.sess);
        let n = match self.read(room) {
            Ok(Some(n)) => n,
            Ok(None) => {
                // Nothing for the commands (a TLS handshake message, or no data after all).
                self.conn.settle_query_buffer();
                return Next::Keep;
            }
            Err(e) => {
                debug!("client {} closed: {e}", self.sess.id);
                return Next::Close;
            }
        };
        if n == 0 {
            // A client that half-closed after its last command still gets the replies its
            // socket held.
            self.readable = false;
            if self.queue.is_empty() && !self.pending {
                return Next::Close;
            }
            self.closing = true;
            return Next::Keep;
        }
        if let Some(t) = &self.tls {
            self.conn.certificate_login(srv, t.session(), &mut self.sess);
        }
        if !self.conn.took_input(srv, snap.rt, &mut self.sess, n) {
            return Next::Close;
        }
        // While DEBUG SLEEP stops the server, what was read waits for its turn on a task.
        if srv.freeze.frozen() {
            return Next::Task(Resume::Process);
        }
        let flow = self.conn.process_with(srv, snap.engine, snap.rt, &mut self.sess);
        let sess = &self.sess;
        let plain = matches!(flow, Flow::Continue)
            && !sess.close_after_reply
            && !sess.enter_monitor
            && sess.subs.is_none()
            && sess.thaw_after_reply.is_none();
        if !plain {
            return Next::Task(Resume::Flow(flow));
        }
        // The query buffer goes back to the thread first, if it holds nothing: it is not the
        // client's memory from here on (Valkey's shared query buffer is not either).
        self.conn.settle_query_buffer();
        // Replies are in the buffer: a client whose pending output takes it over
        // `maxmemory-clients` is closed before they are written, as Valkey's is.
        if self.conn.evicted(srv, sess, snap.rt.client_eviction_limit) {
            return Next::Close;
        }
        // `appendfsync always` holds the replies until the batch is on disk: a task waits.
        if self.conn.has_replies() && !self.conn.replies_released() {
            return Next::Task(Resume::Flow(Flow::Continue));
        }
        // Even with no reply (part of a command), the end of the turn publishes the buffers.
        self.pending = true;
        Next::Keep
    }

    /// One read into the query buffer, grown to `room` first: Some(n) for n bytes read (0 at
    /// the end of the stream), None when nothing came for the commands. Clears `readable`
    /// once the socket is drained.
    fn read(&mut self, room: usize) -> io::Result<Option<usize>> {
        let buf = self.conn.read_buffer();
        let Some(t) = self.tls.as_deref_mut() else {
            grow_exactly(buf, room);
            let spare = buf.spare_capacity_mut();
            let offered = spare.len();
            return match self.sock.recv(spare) {
                Ok(n) => {
                    #[allow(unsafe_code)]
                    // SAFETY: recv initialised exactly the first n bytes of the spare capacity.
                    unsafe {
                        buf.set_len(buf.len() + n)
                    };
                    if n < offered && !self.hung_up {
                        // Drained: the next event says when more arrives.
                        self.readable = false;
                    }
                    Ok(Some(n))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.readable = false;
                    Ok(None)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
                Err(e) => Err(e),
            };
        };
        // Ciphertext is fed whole before the next read, so one buffer serves the loop.
        let read = RAW.with(|raw| read_tls_once(&self.sock, &mut self.queue, t, &mut raw.borrow_mut(), buf, room));
        match read? {
            TlsRead::WouldBlock => {
                self.readable = false;
                Ok(None)
            }
            TlsRead::Eof => Ok(Some(0)),
            TlsRead::Data { got, full } => {
                if !full && !self.hung_up {
                    self.readable = false;
                }
                Ok((got > 0).then_some(got))
            }
        }
    }

    /// The client's inbox rang: writes its pushes, applies the cron's requests.
    fn take_mail(&mut self) -> Next {
        while let Some(mail) = self.sess.info.inbox.poll_mail(&self.waker) {
            match mail {
                Some(p) => {
                    self.conn.push(&mut self.sess, &p);
                    self.pending = true;
                }
                None => {
                    // The loop's socket holds no idle buffer of its own (the queue lets go
                    // of its room as it drains, the ciphertext buffer is the thread's).
                    self.conn.apply_query_buffer_request(&self.sess);
                }
            }
        }
        Next::Keep
    }

    /// The end of the turn: the replies leave, with one `send` for all of them.
    fn write(&mut self, srv: &Server, rt: &Runtime) -> Next {
        self.pending = false;
        self.write_queued = false;
        if self.conn.has_replies() {
            let (queue, sock, tls) = (&mut self.queue, &self.sock, self.tls.as_deref_mut());
            let written = self.conn.write_replies(&self.sess, |bytes| match tls {
                None => queue.write(sock, bytes),
                Some(t) => t.write(sock, queue, bytes),
            });
            if written.is_err() {
                return Next::Close;
            }
        }
        self.conn.release_idle(&self.sess);
        if self.conn.evicted(srv, &self.sess, rt.client_eviction_limit) {
            return Next::Close;
        }
        if self.closing && self.queue.is_empty() {
            return Next::Close;
        }
        Next::Keep
    }
}
