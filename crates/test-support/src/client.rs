//! A minimal blocking RESP client for tests that must see exact reply shapes or send bytes
//! no real client would (garbage, partial frames, half-closed sockets).

use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::IO_TIMEOUT;
use crate::resp::{self, Frame};

/// A connection to a server on loopback. Reads and writes time out after [`IO_TIMEOUT`]
/// (change it with [`RawClient::set_timeout`]), so a server that never answers fails the test
/// instead of hanging it.
///
/// The `cmd`/`read_frame` methods panic on I/O errors with a message naming the command: in a
/// test that is the failure we want. The `try_` variants return the error for tests that
/// expect the connection to break.
#[derive(Debug)]
pub struct RawClient {
    /// The socket, behind the read buffer; writes go to the same socket through
    /// `get_ref()` (`&TcpStream` is `Write`), so a client costs one file descriptor, which
    /// matters to tests that hold 10,000 connections.
    reader: BufReader<TcpStream>,
}

impl RawClient {
    /// Connects to `127.0.0.1:port`; panics if that fails within [`IO_TIMEOUT`].
    #[track_caller]
    pub fn connect(port: u16) -> RawClient {
        RawClient::try_connect(port).unwrap_or_else(|e| panic!("cannot connect to 127.0.0.1:{port}: {e}"))
    }

    /// Connects to `127.0.0.1:port`.
    pub fn try_connect(port: u16) -> io::Result<RawClient> {
        RawClient::connect_addr(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// Connects to any address (e.g. `[::1]:port`).
    pub fn connect_addr(addr: SocketAddr) -> io::Result<RawClient> {
        let stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(RawClient { reader: BufReader::new(stream) })
    }

    /// Changes the read and write timeouts.
    pub fn set_timeout(&mut self, timeout: Duration) {
        // Both only fail for a zero duration, which is a bug in the calling test.
        self.socket().set_read_timeout(Some(timeout)).expect("non-zero read timeout");
        self.socket().set_write_timeout(Some(timeout)).expect("non-zero write timeout");
    }

    /// Sends a command as a multibulk request and reads one reply; panics on I/O errors.
    #[track_caller]
    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Frame {
        self.try_cmd(args).unwrap_or_else(|e| panic!("{}: {e}", describe(args)))
    }

    /// Sends a command and reads one reply.
    pub fn try_cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> io::Result<Frame> {
        self.socket().write_all(&resp::encode_command(args))?;
        self.try_read_frame()
    }

    /// Sends a command without reading its reply (pipelining, MONITOR, blocking commands).
    #[track_caller]
    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        self.socket()
            .write_all(&resp::encode_command(args))
            .unwrap_or_else(|e| panic!("sending {}: {e}", describe(args)));
    }

    /// Writes bytes exactly as given; panics on I/O errors.
    #[track_caller]
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.try_send_raw(bytes).unwrap_or_else(|e| panic!("sending raw bytes: {e}"));
    }

    /// Writes bytes exactly as given.
    pub fn try_send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.socket().write_all(bytes)?;
        self.socket().flush()
    }

    /// Reads one reply; panics on I/O errors or timeout.
    #[track_caller]
    pub fn read_frame(&mut self) -> Frame {
        self.try_read_frame().unwrap_or_else(|e| panic!("reading a reply: {e}"))
    }

    /// Reads one reply.
    pub fn try_read_frame(&mut self) -> io::Result<Frame> {
        resp::read_frame(&mut self.reader)
    }

    /// Closes the write half: the server sees EOF but may still send to us.
    pub fn shutdown_write(&mut self) {
        // Only fails if the socket is already gone, which the next read reports anyway.
        let _ = self.socket().shutdown(Shutdown::Write);
    }

    /// Waits up to `timeout` for the server to close the connection, discarding anything it
    /// sends first. True if it closed (EOF or reset), false if it is still open at the end.
    pub fn closed_within(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let _ = self.socket().set_read_timeout(Some(left.max(Duration::from_millis(1))));
            match self.reader.read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    return false;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return true,
            }
        }
    }

    /// Another handle on the socket for writing from a second thread, for pipelines larger
    /// than the socket buffers (writing them all before reading would deadlock).
    pub fn writer_clone(&self) -> io::Result<TcpStream> {
        self.socket().try_clone()
    }

    /// The local address of this connection (as `CLIENT LIST` shows it in `addr=`).
    pub fn local_addr(&self) -> SocketAddr {
        // A connected socket always has a local address.
        self.socket().local_addr().expect("connected socket has a local address")
    }

    fn socket(&self) -> &TcpStream {
        self.reader.get_ref()
    }
}

/// `SET "k" "v"` for panic messages, shortened so a 1 MB argument does not flood the log.
fn describe<A: AsRef<[u8]>>(args: &[A]) -> String {
    let mut s = String::new();
    for a in args {
        if !s.is_empty() {
            s.push(' ');
        }
        let a = String::from_utf8_lossy(a.as_ref());
        if a.chars().count() > 40 {
            s.push_str(&format!("{:?}...", a.chars().take(40).collect::<String>()));
        } else {
            s.push_str(&format!("{a:?}"));
        }
    }
    s
}
