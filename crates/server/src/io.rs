//! Client sockets with explicit readiness: one `recv` per readable event, no trailing
//! `EAGAIN` read, one `send` per batch of replies.
//!
//! tokio's `TcpStream` only forgets that a socket was readable after a read fails with
//! `WouldBlock`, which costs a wasted system call per request on a request/response
//! connection. Here a read that returns less than the room offered means the socket was
//! drained, so readiness is cleared at once; tokio's tick check makes that safe (a readiness
//! event that arrived after the read is not cleared), so no data is ever left unnoticed.

use std::io::{self, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};

use bytes::BytesMut;
use socket2::SockRef;
use tokio::io::unix::AsyncFd;

/// A non-blocking client socket registered with the runtime.
pub struct Socket {
    fd: AsyncFd<TcpStream>,
}

impl Socket {
    /// Takes over an accepted tokio stream.
    pub fn new(stream: tokio::net::TcpStream) -> io::Result<Socket> {
        let std = stream.into_std()?;
        std.set_nonblocking(true)?;
        #[allow(unsafe_code)]
        // SAFETY: the TcpStream owns its descriptor and is moved into the AsyncFd, so the
        // descriptor stays open and the same for the AsyncFd's whole life.
        let fd = unsafe { AsyncFd::register(std)? };
        Ok(Socket { fd })
    }

    /// The descriptor, for CLIENT LIST and CLIENT KILL.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.get_ref().as_raw_fd()
    }

    /// Waits until the socket is readable and appends what one `recv` returns to `buf`
    /// (which must have spare capacity). Returns 0 at end of stream. Cancel-safe: data is
    /// only read once readiness is reported, within the same poll.
    pub async fn read_into(&self, buf: &mut BytesMut) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            let spare = buf.spare_capacity_mut();
            let room = spare.len();
            match SockRef::from(self.fd.get_ref()).recv(spare) {
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

    /// Writes all of `data`, waiting for writability when the kernel buffer is full.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            match self.fd.get_ref().write(data) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => data = &data[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let mut guard = self.fd.writable().await?;
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

    /// Closes both directions (graceful end of a connection).
    pub fn shutdown(&self) {
        let _ = self.fd.get_ref().shutdown(std::net::Shutdown::Both);
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
