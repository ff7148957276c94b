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

use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};

use bytes::BytesMut;
use hotkv_tls::TlsSession;
use socket2::SockRef;
use tokio::io::unix::AsyncFd;

/// A non-blocking client socket (TCP or unix) registered with the runtime, plain or TLS.
pub struct Socket {
    fd: AsyncFd<socket2::Socket>,
    tls: Option<Box<TlsLayer>>,
}

/// The TLS side of a client socket. rustls works on buffers, not on the socket: ciphertext
/// read from the socket is fed in and comes out as plaintext in the caller's read buffer, and
/// a batch of replies goes in as plaintext and comes out as records in `out`, sent with one
/// `send`. Whatever could not be sent yet stays in `out`, so a cancelled read or write loses
/// nothing and the handshake never stalls waiting on our own unsent bytes.
struct TlsLayer {
    session: TlsSession,
    /// Ciphertext just received; always fully fed before the next read.
    raw: Vec<u8>,
    /// Ciphertext to send; `out[sent..]` is what the kernel has not taken yet.
    out: Vec<u8>,
    sent: usize,
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
        let tls = tls.map(|session| Box::new(TlsLayer { session, raw: Vec::new(), out: Vec::new(), sent: 0, client }));
        Ok(Socket { fd, tls })
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

    /// Whether this is a TLS connection.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The TLS session, once there is one (peer certificate names, protocol).
    pub fn tls_session(&self) -> Option<&TlsSession> {
        self.tls.as_deref().map(|t| &t.session)
    }

    /// Waits until data arrives and appends it to `buf` (which must have spare capacity):
    /// what one `recv` returns, decrypted for TLS. Returns 0 at end of stream. Cancel-safe:
    /// data is only read once readiness is reported, within the same poll, and TLS state
    /// lives in the socket.
    pub async fn read_into(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match self.tls.as_deref_mut() {
            None => read_plain(&self.fd, buf).await,
            Some(t) => read_tls(&self.fd, t, buf).await,
        }
    }

    /// Writes all of `data` (a whole batch of replies), waiting for writability when the
    /// kernel buffer is full. Over TLS the batch becomes as few records as its size allows,
    /// sent with one `send`.
    pub async fn write_all(&mut self, data: &[u8]) -> io::Result<()> {
        match self.tls.as_deref_mut() {
            None => write_plain(&self.fd, data).await,
            Some(t) => {
                t.session.write_plaintext(data);
                t.session.take_tls_output(&mut t.out);
                flush_tls(&self.fd, t).await
            }
        }
    }

    /// Drops buffers an idle connection does not need.
    pub fn release_idle(&mut self) {
        if let Some(t) = self.tls.as_deref_mut() {
            if t.raw.capacity() > 0 {
                t.raw = Vec::new();
            }
            if t.sent == t.out.len() && t.out.capacity() > RAW_CHUNK {
                t.out = Vec::new();
                t.sent = 0;
            }
        }
    }

    /// Closes both directions (graceful end of a connection). A TLS peer is told with a
    /// close_notify first, if the kernel takes it at once.
    pub fn shutdown(&mut self) {
        if let Some(t) = self.tls.as_deref_mut()
            && !t.session.is_handshaking()
        {
            t.session.close();
            t.session.take_tls_output(&mut t.out);
            let _ = try_send(self.fd.get_ref(), t);
        }
        let _ = self.fd.get_ref().shutdown(std::net::Shutdown::Both);
    }
}

async fn read_plain(fd: &AsyncFd<socket2::Socket>, buf: &mut BytesMut) -> io::Result<usize> {
    loop {
        let mut guard = fd.readable().await?;
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

async fn write_plain(fd: &AsyncFd<socket2::Socket>, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match fd.get_ref().write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                let mut guard = fd.writable().await?;
                // Only forget writability if it is still the state we observed.
                match guard.try_io(|inner| inner.get_ref().write(data)) {
                    Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(Ok(n)) => data = &data[n..],
                    Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                    Ok(Err(e)) => return Err(e),
                    Err(_would_block) => {}
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sends as much of the pending ciphertext as the kernel takes now. Ok(true) once all is sent.
fn try_send(sock: &socket2::Socket, t: &mut TlsLayer) -> io::Result<bool> {
    let mut w = sock;
    while t.sent < t.out.len() {
        match w.write(&t.out[t.sent..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => t.sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    t.out.clear();
    t.sent = 0;
    Ok(true)
}

/// Sends all pending ciphertext, waiting for writability as needed.
async fn flush_tls(fd: &AsyncFd<socket2::Socket>, t: &mut TlsLayer) -> io::Result<()> {
    while !try_send(fd.get_ref(), t)? {
        let mut guard = fd.writable().await?;
        guard.clear_ready();
    }
    Ok(())
}

async fn read_tls(fd: &AsyncFd<socket2::Socket>, t: &mut TlsLayer, buf: &mut BytesMut) -> io::Result<usize> {
    loop {
        // Our own handshake messages (or what a cancelled write left) go out before we wait
        // for the peer, who may be waiting for them.
        let mut flushed = try_send(fd.get_ref(), t)?;
        let mut guard = loop {
            if flushed {
                break fd.readable().await?;
            }
            tokio::select! {
                g = fd.readable() => break g?,
                w = fd.writable() => {
                    w?.clear_ready();
                    flushed = try_send(fd.get_ref(), t)?;
                }
            }
        };
        if t.raw.capacity() < RAW_CHUNK {
            t.raw.reserve(RAW_CHUNK);
        }
        t.raw.clear();
        let spare = t.raw.spare_capacity_mut();
        let room = spare.len();
        let n = match fd.get_ref().recv(spare) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                guard.clear_ready();
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        #[allow(unsafe_code)]
        // SAFETY: recv initialised exactly the first n bytes of the spare capacity.
        unsafe {
            t.raw.set_len(n)
        };
        if n > 0 && n < room {
            guard.clear_ready();
        }
        if n == 0 {
            if let Some(e) = t.session.eof_error() {
                tracing::info!("TLS handshake failed for client {}: {e}", t.client);
            }
            return Ok(0);
        }
        let before = buf.len();
        let handshaking = t.session.is_handshaking();
        if let Err(e) = t.session.feed(&t.raw, buf) {
            if handshaking {
                tracing::info!("TLS handshake failed for client {}: {e}", t.client);
            } else {
                tracing::debug!("TLS error on client {}: {e}", t.client);
            }
            // The alert tells the peer why; best effort, the connection ends either way.
            t.session.take_tls_output(&mut t.out);
            let _ = try_send(fd.get_ref(), t);
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        t.session.take_tls_output(&mut t.out);
        let got = buf.len() - before;
        if got > 0 {
            return Ok(got);
        }
        if t.session.peer_closed() {
            return Ok(0);
        }
    }
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
