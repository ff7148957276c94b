//! Client sockets with explicit readiness: one `recv` per readable event, no trailing
//! `EAGAIN` read, one `send` per batch of replies, over TLS as well as in plain text.
//!
//! The socket is held as a `socket2::Socket`, whatever its family: a TCP connection and a
//! unix-socket connection take the very same path (the same two system calls), so serving
//! `unixsocket` clients costs the TCP path neither a branch nor a second copy of the code.
//!
//! tokio's `TcpStream` only forgets that a socket was readable after a read fails with
//! `WouldBlock`, which costs a wasted system call per request on a request/response
//! connection. Here a read that returns less than the room offered means the socket was
//! drained, so readiness is cleared at once; tokio's tick check makes that safe (a readiness
//! event that arrived after the read is not cleared), so no data is ever left unnoticed.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, BytesMut};
use hotkv_tls::TlsSession;
use socket2::SockRef;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A non-blocking client socket (TCP or unix) registered with the runtime, plain or TLS.
pub struct Socket {
    fd: AsyncFd<socket2::Socket>,
    tls: Option<Box<TlsLayer>>,
    /// Bytes (ciphertext under TLS) the kernel has not taken yet. Reads go on meanwhile and
    /// send more of it whenever the socket can take it, so a client that does not read its
    /// replies does not stop the server from reading its commands (as Valkey's reply list).
    queue: OutQueue,
}

/// Bytes waiting for the kernel: `buf[sent..]`.
#[derive(Default)]
pub(crate) struct OutQueue {
    buf: Vec<u8>,
    sent: usize,
    /// Where the queue's length is published as it changes (CLIENT LIST `omem`).
    gauge: Option<Arc<AtomicUsize>>,
}

impl OutQueue {
    /// Publishes the queue's length to `gauge` from now on.
    pub(crate) fn publish_to(&mut self, gauge: Arc<AtomicUsize>) {
        self.gauge = Some(gauge);
        self.publish();
    }

    pub(crate) fn len(&self) -> usize {
        self.buf.len() - self.sent
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.sent == self.buf.len()
    }

    /// Sends `data` after what is queued, queueing what the kernel does not take now.
    pub(crate) fn write(&mut self, sock: &socket2::Socket, data: &[u8]) -> io::Result<()> {
        if self.is_empty() {
            let taken = send_now(sock, data)?;
            if taken < data.len() {
                self.tail().extend_from_slice(&data[taken..]);
                self.publish();
            }
            Ok(())
        } else {
            self.tail().extend_from_slice(data);
            try_send(sock, self).map(drop)
        }
    }

    /// Sends as much as the kernel takes now; true once nothing is left.
    pub(crate) fn send(&mut self, sock: &socket2::Socket) -> io::Result<bool> {
        try_send(sock, self)
    }

    /// The buffer to append to. What was sent leaves its front first once it is half of it
    /// or more: a client that always lags a little (its queue never empties) would otherwise
    /// keep every byte ever queued for it. So the allocation stays within a small multiple of
    /// what waits, and the bytes moved are no more than those appended since the last move.
    fn tail(&mut self) -> &mut Vec<u8> {
        if self.sent > 0 && self.sent * 2 >= self.buf.len() {
            self.buf.drain(..self.sent);
            self.sent = 0;
            let keep = 2 * self.buf.len().max(RAW_CHUNK);
            if self.buf.capacity() > 2 * keep {
                self.buf.shrink_to(keep);
            }
        }
        &mut self.buf
    }

    fn publish(&self) {
        if let Some(g) = &self.gauge {
            let len = self.len();
            if g.load(Ordering::Relaxed) != len {
                g.store(len, Ordering::Relaxed);
            }
        }
    }
}

/// The TLS side of a client socket. rustls works on buffers, not on the socket: ciphertext
/// read from the socket is fed in and comes out as plaintext in the caller's read buffer, and
/// a batch of replies goes in as plaintext and comes out as records in the socket's queue,
/// sent with one `send`. Whatever could not be sent yet stays queued, so a cancelled read or
/// write loses nothing and the handshake never stalls waiting on our own unsent bytes.
pub(crate) struct TlsLayer {
    session: TlsSession,
    /// Ciphertext just received; always fully fed before the next read.
    raw: Vec<u8>,
    /// Plaintext decrypted by a [`AsyncRead`] read that its caller had no room for yet.
    plain: BytesMut,
    /// The client id, for the handshake failure log line.
    client: u64,
}

/// Receive buffer for ciphertext: one full TLS record (16 KiB of data plus its overhead).
const RAW_CHUNK: usize = 16 * 1024 + 512;

impl Socket {
    /// Takes over an accepted stream socket (from [`Socket::tcp`] or [`Socket::unix`]);
    /// `tls` makes it a TLS connection (its handshake runs inside the first reads). `client`
    /// names the connection in TLS log lines.
    pub fn new(stream: socket2::Socket, tls: Option<TlsSession>, client: u64) -> io::Result<Socket> {
        stream.set_nonblocking(true)?;
        #[allow(unsafe_code)]
        // SAFETY: the socket owns its descriptor and is moved into the AsyncFd, so the
        // descriptor stays open and the same for the AsyncFd's whole life.
        let fd = unsafe { AsyncFd::register(stream)? };
        let tls = tls.map(|session| Box::new(TlsLayer { session, raw: Vec::new(), plain: BytesMut::new(), client }));
        Ok(Socket { fd, tls, queue: OutQueue::default() })
    }

    /// Takes over a connection from the event loop (see `evloop`), with its TLS side if it
    /// has one and the bytes its queue still holds, which leave before anything written from
    /// now on.
    pub(crate) fn resume(
        stream: socket2::Socket,
        tls: Option<Box<TlsLayer>>,
        queue: OutQueue,
        client: u64,
    ) -> io::Result<Socket> {
        let mut sock = Socket::new(stream, None, client)?;
        sock.tls = tls;
        sock.queue = queue;
        Ok(sock)
    }

    /// The socket back from the runtime (deregistered), with its TLS side and what its
    /// queue still holds: for an event loop to take the connection over.
    pub(crate) fn into_parts(self) -> io::Result<(socket2::Socket, Option<Box<TlsLayer>>, OutQueue)> {
        let Socket { fd, tls, queue } = self;
        Ok((fd.into_inner(), tls, queue))
    }

    /// A TCP connection tokio accepted, ready for [`Socket::new`].
    pub fn tcp(stream: tokio::net::TcpStream) -> io::Result<socket2::Socket> {
        Ok(stream.into_std()?.into())
    }

    /// A unix-socket connection tokio accepted, ready for [`Socket::new`].
    pub fn unix(stream: tokio::net::UnixStream) -> io::Result<socket2::Socket> {
        Ok(stream.into_std()?.into())
    }

    /// The descriptor, for CLIENT LIST and CLIENT KILL.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.get_ref().as_raw_fd()
    }

    /// A second descriptor of a plain connection, for another thread to send on while this
    /// one does not (a replica's stream, see `hotkv_replication::DirectOut`); None under TLS,
    /// whose records only this socket's session can make.
    pub fn plain_duplicate(&self) -> Option<socket2::Socket> {
        if self.tls.is_some() || !self.queue.is_empty() {
            return None;
        }
        self.fd.get_ref().try_clone().ok()
    }

    /// Whether this is a TLS connection.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The TLS session, once there is one (peer certificate names, protocol).
    pub fn tls_session(&self) -> Option<&TlsSession> {
        self.tls.as_deref().map(|t| &t.session)
    }

    /// Waits until data arrives and appends it to `buf`: what one `recv` returns, decrypted for
    /// TLS. Returns 0 at end of stream. Only once data is there does `buf` grow to `capacity`
    /// (which must exceed its length), so a connection waiting for its client holds no more
    /// buffer than it had. While it waits, queued output is sent as the socket takes it.
    /// Cancel-safe: data is only read once readiness is reported, within the same poll, and TLS
    /// state and the output queue live in the socket.
    pub async fn read_into(&mut self, buf: &mut BytesMut, capacity: usize) -> io::Result<usize> {
        match self.tls.as_deref_mut() {
            None => read_plain(&self.fd, &mut self.queue, buf, capacity).await,
            Some(t) => read_tls(&self.fd, &mut self.queue, t, buf, capacity).await,
        }
    }

    /// Writes all of `data` (a whole batch of replies) after whatever is queued, waiting for
    /// writability when the kernel buffer is full. Over TLS the batch becomes as few records
    /// as its size allows, sent with one `send`.
    pub async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        self.write(data)?;
        self.flush().await
    }

    /// Hands `data` to the socket without waiting: what the kernel does not take now is
    /// queued, and goes out while the connection reads ([`Socket::read_into`]) or flushes.
    pub fn write(&mut self, data: &[u8]) -> io::Result<()> {
        match self.tls.as_deref_mut() {
            None => self.queue.write(self.fd.get_ref(), data),
            Some(t) => t.write(self.fd.get_ref(), &mut self.queue, data),
        }
    }

    /// Bytes written but not yet taken by the kernel (ciphertext under TLS).
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Keeps `gauge` equal to [`Socket::queued`] from now on, as the queue fills and drains.
    pub fn publish_queued(&mut self, gauge: Arc<AtomicUsize>) {
        self.queue.gauge = Some(gauge);
        self.queue.publish();
    }

    /// Waits until everything queued has been sent.
    pub async fn flush(&mut self) -> io::Result<()> {
        flush_queue(&self.fd, &mut self.queue).await
    }

    /// Drops the TLS ciphertext buffer, which an idle connection does not need (the queue
    /// lets go of its room by itself as it drains).
    pub fn release_idle(&mut self) {
        if let Some(t) = self.tls.as_deref_mut()
            && t.raw.capacity() > 0
        {
            t.raw = Vec::new();
        }
    }

    /// Closes both directions (graceful end of a connection). A TLS peer is told with a
    /// close_notify first, if the kernel takes it at once.
    pub fn shutdown(&mut self) {
        if let Some(t) = self.tls.as_deref_mut() {
            t.close(self.fd.get_ref(), &mut self.queue);
        }
        let _ = self.fd.get_ref().shutdown(std::net::Shutdown::Both);
    }
}

/// The socket lent to an exchange that holds its thread until it ends (the Lua debugger's
/// synchronous session): blocking reads and writes on a duplicate of the descriptor, through
/// the connection's TLS session, which it takes along until [`Socket::take_back`].
pub struct Lent {
    sock: socket2::Socket,
    tls: Option<Box<TlsLayer>>,
}

impl Socket {
    /// Lends the socket out in blocking mode, writes bounded by `send_timeout`. Whatever is
    /// queued must have been flushed first.
    pub fn lend(&mut self, send_timeout: std::time::Duration) -> io::Result<Lent> {
        debug_assert!(self.queue.is_empty(), "the queue is flushed before the socket is lent");
        let sock = self.fd.get_ref().try_clone()?;
        // The mode belongs to the open file, which the duplicate shares: the connection's
        // own descriptor blocks too until the socket is taken back.
        sock.set_nonblocking(false)?;
        sock.set_write_timeout(Some(send_timeout))?;
        Ok(Lent { sock, tls: self.tls.take() })
    }

    /// The socket back from [`Socket::lend`], non-blocking again.
    pub fn take_back(&mut self, lent: Lent) -> io::Result<()> {
        self.tls = lent.tls;
        lent.sock.set_write_timeout(None)?;
        lent.sock.set_nonblocking(true)
    }
}

impl Lent {
    /// Writes all of `data`.
    pub fn send(&mut self, data: &[u8]) -> io::Result<()> {
        match self.tls.as_deref_mut() {
            None => (&self.sock).write_all(data),
            Some(t) => {
                t.session.write_plaintext(data);
                let mut records = Vec::new();
                t.session.take_tls_output(&mut records);
                (&self.sock).write_all(&records)
            }
        }
    }

    /// Waits for bytes from the peer and appends them to `buf`; `Ok(0)` once it closed.
    pub fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let mut chunk = vec![0u8; RAW_CHUNK];
        let sock = &self.sock;
        let read = |chunk: &mut [u8]| loop {
            match (&*sock).read(chunk) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        };
        let Some(t) = self.tls.as_deref_mut() else {
            let n = read(&mut chunk)?;
            buf.extend_from_slice(&chunk[..n]);
            return Ok(n);
        };
        loop {
            if !t.plain.is_empty() {
                let n = t.plain.len();
                buf.extend_from_slice(&t.plain);
                t.plain.clear();
                return Ok(n);
            }
            if t.session.peer_closed() {
                return Ok(0);
            }
            let n = read(&mut chunk)?;
            if n == 0 {
                return Ok(0);
            }
            let fed = t.session.feed(&chunk[..n], &mut t.plain);
            let mut records = Vec::new();
            t.session.take_tls_output(&mut records);
            (&*sock).write_all(&records)?;
            fed.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
    }
}

async fn read_plain(
    fd: &AsyncFd<socket2::Socket>,
    queue: &mut OutQueue,
    buf: &mut BytesMut,
    capacity: usize,
) -> io::Result<usize> {
    loop {
        let mut guard = readable(fd, queue).await?;
        grow_exactly(buf, capacity);
        let spare = buf.spare_capacity_mut();
        let room = spare.len();
        match fd.get_ref().recv(spare) {
            Ok(n) => {
                #[allow(unsafe_code)]
                // SAFETY: recv initialised exactly the first n bytes of the spare capacity.
                unsafe {
                    buf.set_len(buf.len() + n)
                };
                if n > 0 && n < room {
                    // Drained: wait for the next readiness event instead of paying for a
                    // read that would only say EAGAIN.
                    guard.clear_ready();
                }
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Gives `buf` a capacity of `capacity` if it has less: exactly that, where `BytesMut::reserve`
/// would round a big argument's room up to twice its size.
pub(crate) fn grow_exactly(buf: &mut BytesMut, capacity: usize) {
    if buf.capacity() >= capacity {
        return;
    }
    if buf.capacity() == 0
        && let Some(shared) = crate::query_buffer::take_shared(capacity)
    {
        *buf = shared;
        return;
    }
    let mut grown = BytesMut::with_capacity(capacity);
    grown.extend_from_slice(buf);
    *buf = grown;
}

/// Waits until the socket is readable, sending queued output whenever it can take some
/// meanwhile: the peer may be waiting for those bytes (a TLS handshake message) before it
/// sends more, and a client that pipelines without reading must still be read.
async fn readable<'a>(
    fd: &'a AsyncFd<socket2::Socket>,
    queue: &mut OutQueue,
) -> io::Result<tokio::io::unix::AsyncFdReadyGuard<'a, socket2::Socket>> {
    let mut flushed = try_send(fd.get_ref(), queue)?;
    // Polled, not `readable().await`: the poll functions keep one waker per direction, where
    // the future of `readable()` links itself into the registration's waiter list and unlinks
    // again when dropped, under its mutex each time, on every request of a pipeline-1 client.
    std::future::poll_fn(|cx| {
        while !flushed {
            match fd.poll_write_ready(cx) {
                Poll::Ready(Ok(mut w)) => {
                    w.clear_ready();
                    flushed = try_send(fd.get_ref(), queue)?;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => break,
            }
        }
        fd.poll_read_ready(cx)
    })
    .await
}

/// Writes as much of `data` as the kernel takes now; returns how much that was.
fn send_now(sock: &socket2::Socket, data: &[u8]) -> io::Result<usize> {
    let mut w = sock;
    let mut taken = 0;
    while taken < data.len() {
        match w.write(&data[taken..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => taken += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(taken)
}

/// Sends as much of the queue as the kernel takes now. Ok(true) once all is sent.
fn try_send(sock: &socket2::Socket, queue: &mut OutQueue) -> io::Result<bool> {
    if !queue.is_empty() {
        queue.sent += send_now(sock, &queue.buf[queue.sent..])?;
        if !queue.is_empty() {
            queue.publish();
            return Ok(false);
        }
    }
    // A drained queue keeps no more than one record's room: what a burst made it hold is
    // not counted anywhere once sent (`omem` is what waits), and it stayed until the client
    // went idle.
    if queue.buf.capacity() > RAW_CHUNK {
        queue.buf = Vec::new();
    } else {
        queue.buf.clear();
    }
    queue.sent = 0;
    queue.publish();
    Ok(true)
}

/// Sends the whole queue, waiting for writability as needed.
async fn flush_queue(fd: &AsyncFd<socket2::Socket>, queue: &mut OutQueue) -> io::Result<()> {
    while !try_send(fd.get_ref(), queue)? {
        let mut guard = fd.writable().await?;
        guard.clear_ready();
    }
    Ok(())
}

async fn read_tls(
    fd: &AsyncFd<socket2::Socket>,
    queue: &mut OutQueue,
    t: &mut TlsLayer,
    buf: &mut BytesMut,
    capacity: usize,
) -> io::Result<usize> {
    loop {
        // Our own handshake messages (or replies not taken yet) go out while we wait for the
        // peer, who may be waiting for them.
        let mut guard = readable(fd, queue).await?;
        let mut raw = std::mem::take(&mut t.raw);
        let read = read_tls_once(fd.get_ref(), queue, t, &mut raw, buf, capacity);
        t.raw = raw;
        match read? {
            TlsRead::WouldBlock => guard.clear_ready(),
            TlsRead::Eof => return Ok(0),
            TlsRead::Data { got, full } => {
                if !full {
                    guard.clear_ready();
                }
                if got > 0 {
                    return Ok(got);
                }
            }
        }
    }
}

/// What one read of a TLS client's socket gave.
pub(crate) enum TlsRead {
    /// Nothing to read now.
    WouldBlock,
    /// The client closed the connection (or its TLS session).
    Eof,
    /// `got` bytes of plaintext were appended (none for a handshake message); `full` when the
    /// read filled its room, so more may be waiting.
    Data { got: usize, full: bool },
}

/// One `recv` of ciphertext into `raw` (a scratch buffer: it is always fully fed before the
/// next read, so one per thread serves every client), fed to the session: plaintext goes
/// to `buf`, grown to `capacity` first, and what the session has to say (handshake
/// messages, alerts) to the queue, which is sent as far as the kernel takes it.
pub(crate) fn read_tls_once(
    sock: &socket2::Socket,
    queue: &mut OutQueue,
    t: &mut TlsLayer,
    raw: &mut Vec<u8>,
    buf: &mut BytesMut,
    capacity: usize,
) -> io::Result<TlsRead> {
    grow_exactly(buf, capacity);
    if raw.capacity() < RAW_CHUNK {
        raw.reserve(RAW_CHUNK);
    }
    raw.clear();
    let spare = raw.spare_capacity_mut();
    let room = spare.len();
    let n = match sock.recv(spare) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(TlsRead::WouldBlock),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(TlsRead::Data { got: 0, full: true }),
        Err(e) => return Err(e),
    };
    #[allow(unsafe_code)]
    // SAFETY: recv initialised exactly the first n bytes of the spare capacity.
    unsafe {
        raw.set_len(n)
    };
    if n == 0 {
        if let Some(e) = t.session.eof_error() {
            tracing::info!("TLS handshake failed for client {}: {e}", t.client);
        }
        return Ok(TlsRead::Eof);
    }
    let before = buf.len();
    let handshaking = t.session.is_handshaking();
    if let Err(e) = t.session.feed(raw, buf) {
        if handshaking {
            tracing::info!("TLS handshake failed for client {}: {e}", t.client);
        } else {
            tracing::debug!("TLS error on client {}: {e}", t.client);
        }
        // The alert tells the peer why; best effort, the connection ends either way.
        t.session.take_tls_output(queue.tail());
        let _ = try_send(sock, queue);
        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
    }
    t.session.take_tls_output(queue.tail());
    if !queue.is_empty() {
        try_send(sock, queue)?;
    }
    let got = buf.len() - before;
    if got == 0 && t.session.peer_closed() {
        return Ok(TlsRead::Eof);
    }
    Ok(TlsRead::Data { got, full: n == room })
}

impl TlsLayer {
    /// A client's TLS side; `client` names it in log lines.
    pub(crate) fn new(session: TlsSession, client: u64) -> Box<TlsLayer> {
        Box::new(TlsLayer { session, raw: Vec::new(), plain: BytesMut::new(), client })
    }

    /// The session (peer certificate names, protocol).
    pub(crate) fn session(&self) -> &TlsSession {
        &self.session
    }

    /// Encrypts `data` as records into the queue and sends what the kernel takes.
    pub(crate) fn write(&mut self, sock: &socket2::Socket, queue: &mut OutQueue, data: &[u8]) -> io::Result<()> {
        self.session.write_plaintext(data);
        self.session.take_tls_output(queue.tail());
        try_send(sock, queue).map(drop)
    }

    /// Tells the peer the session ends (close_notify), if the kernel takes it at once.
    pub(crate) fn close(&mut self, sock: &socket2::Socket, queue: &mut OutQueue) {
        if !self.session.is_handshaking() {
            self.session.close();
            self.session.take_tls_output(queue.tail());
            let _ = try_send(sock, queue);
        }
    }
}

/// The socket as a byte stream, for a connection handed to code that reads and writes with
/// tokio's traits (a replica served on the connection that sent PSYNC): it runs on the socket
/// itself, with no pipe and no task in between. A write is answered once the kernel took it,
/// or, over TLS, once it became records; `flush` waits until the kernel took everything.
impl AsyncRead for Socket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let Some(t) = this.tls.as_deref_mut() else {
            loop {
                let mut guard = ready!(this.fd.poll_read_ready(cx))?;
                let room = out.initialize_unfilled();
                match guard.try_io(|inner| Read::read(&mut inner.get_ref(), room)) {
                    Ok(Ok(n)) => {
                        out.advance(n);
                        return Poll::Ready(Ok(()));
                    }
                    Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                    Ok(Err(e)) => return Poll::Ready(Err(e)),
                    Err(_would_block) => {}
                }
            }
        };
        loop {
            if !t.plain.is_empty() {
                let n = t.plain.len().min(out.remaining());
                out.put_slice(&t.plain[..n]);
                t.plain.advance(n);
                return Poll::Ready(Ok(()));
            }
            if t.session.peer_closed() {
                return Poll::Ready(Ok(()));
            }
            let mut guard = ready!(this.fd.poll_read_ready(cx))?;
            if t.raw.capacity() < RAW_CHUNK {
                t.raw.reserve(RAW_CHUNK);
            }
            t.raw.clear();
            let spare = t.raw.spare_capacity_mut();
            let n = match guard.try_io(|inner| inner.get_ref().recv(spare)) {
                Ok(Ok(n)) => n,
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            };
            if n == 0 {
                return Poll::Ready(Ok(()));
            }
            #[allow(unsafe_code)]
            // SAFETY: recv initialised exactly the first n bytes of the spare capacity.
            unsafe {
                t.raw.set_len(n)
            };
            let fed = t.session.feed(&t.raw, &mut t.plain);
            // Whatever the session has to say (an alert, a key update) goes out as it can.
            t.session.take_tls_output(this.queue.tail());
            try_send(this.fd.get_ref(), &mut this.queue)?;
            if let Err(e) = fed {
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
            }
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // What is queued leaves first: the caller's bytes must follow it.
        ready!(poll_drain(&this.fd, &mut this.queue, cx))?;
        match this.tls.as_deref_mut() {
            None => loop {
                let mut guard = ready!(this.fd.poll_write_ready(cx))?;
                match guard.try_io(|inner| Write::write(&mut inner.get_ref(), data)) {
                    Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                    Ok(result) => return Poll::Ready(result),
                    Err(_would_block) => {}
                }
            },
            Some(t) => {
                t.session.write_plaintext(data);
                t.session.take_tls_output(this.queue.tail());
                try_send(this.fd.get_ref(), &mut this.queue)?;
                Poll::Ready(Ok(data.len()))
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        poll_drain(&this.fd, &mut this.queue, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        poll_drain(&this.fd, &mut this.queue, cx)
    }
}

/// Sends the whole queue, registering for writability while the kernel cannot take it.
fn poll_drain(fd: &AsyncFd<socket2::Socket>, queue: &mut OutQueue, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
    while !try_send(fd.get_ref(), queue)? {
        let mut guard = ready!(fd.poll_write_ready(cx))?;
        guard.clear_ready();
    }
    Poll::Ready(Ok(()))
}

/// Shuts down a socket another task owns (CLIENT KILL, idle timeout), so that its owner's
/// pending read returns end-of-stream. The caller must guarantee `fd` is still open and
/// belongs to that connection (see `ClientInfo::kill`).
pub fn shutdown_fd(fd: RawFd) {
    #[allow(unsafe_code)]
    // SAFETY: the caller holds the lock that keeps the owning connection from closing fd.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let _ = SockRef::from(&borrowed).shutdown(std::net::Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A reader that always lags a little: the queue never empties, and what was sent must
    /// not stay allocated (it used to: the buffer was only cleared once empty).
    #[test]
    fn a_queue_that_never_empties_keeps_only_about_what_waits() {
        let (w, mut r) = std::os::unix::net::UnixStream::pair().unwrap();
        w.set_nonblocking(true).unwrap();
        let w = socket2::Socket::from(std::os::fd::OwnedFd::from(w));
        let mut q = OutQueue::default();
        let chunk = [7u8; 4096];
        let mut got = vec![0u8; 4096];
        let mut written = 0;
        // Fill the kernel's buffer, and queue a megabyte beyond it.
        while q.len() < 1 << 20 {
            q.write(&w, &chunk).unwrap();
            written += chunk.len();
        }
        let mut received = 0;
        while written < 64 << 20 {
            q.write(&w, &chunk).unwrap();
            written += chunk.len();
            // As much as was appended: the queue stays about a megabyte long.
            r.read_exact(&mut got).unwrap();
            received += got.len();
            q.send(&w).unwrap();
            assert!(!q.is_empty(), "the reader must stay behind for the test to mean anything");
        }
        assert!(
            q.buf.capacity() <= 4 * q.len().max(RAW_CHUNK),
            "capacity {} for {} waiting",
            q.buf.capacity(),
            q.len()
        );
        // Every byte still arrives.
        r.set_nonblocking(true).unwrap();
        while received < written {
            q.send(&w).unwrap();
            match r.read(&mut got) {
                Ok(n) => received += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert!(q.is_empty());
        assert_eq!(received, written);
    }
}
