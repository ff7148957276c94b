//! DEBUG SLEEP's stop of the whole server. Valkey sleeps in its one event loop, so while it
//! sleeps no client is answered, nothing goes to or comes from replicas or the primary, and
//! cron does not run. hotkv's DEBUG SLEEP blocks the worker that runs it and holds a
//! [`Freeze`] meanwhile; everything else that would act waits at its gate:
//!
//! - a connection before it runs the commands it read (connection.rs, next to where a
//!   CLIENT PAUSE is noticed), so no reply leaves for a command sent during the sleep;
//! - the link to each replica, before it writes to the replica or passes on what it read;
//! - a replica's link to its primary, which neither reads, writes nor dials meanwhile;
//! - the cron thread, which skips its ticks (no expiry, no timeouts, no replication cron).
//!
//! A replica holds one too while it loads each piece of a full sync's snapshot, so that no
//! client sees the data half loaded, as in Valkey, which loads in its event loop. Between two
//! pieces it lets in whoever waited ([`Freeze::let_in`]), as Valkey processes events every
//! `loading-process-events-interval-bytes` while it loads: clients see `loading:1` and the
//! cluster bus says the node is loading.
//!
//! The check on those paths is one atomic load while no sleep is on. Waiting tasks register
//! a waker and are woken when the last sleep ends; nothing polls.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::{Condvar, Mutex};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The server's freeze state: how many DEBUG SLEEPs are on, and who waits for their end.
#[derive(Default)]
pub struct Freeze {
    depth: AtomicUsize,
    /// How many times a loading replica let waiters in between two pieces: a blocked thread
    /// goes on then even when the next piece began before it was scheduled (see
    /// [`Freeze::wait_blocking`]).
    let_ins: AtomicU64,
    waiters: Mutex<Vec<Waker>>,
    thawed: Condvar,
    /// Connections that read commands during a stop, in the order they read them (the lock
    /// queues its waiters first come, first served).
    turns: tokio::sync::Mutex<()>,
}

impl Freeze {
    /// Whether the server is stopped. One relaxed-cost load: the fast path of every gate.
    pub fn frozen(&self) -> bool {
        self.depth.load(Ordering::Acquire) != 0
    }

    /// Stops the server until the returned guard is dropped.
    pub fn begin(&self) -> Frozen<'_> {
        self.depth.fetch_add(1, Ordering::AcqRel);
        Frozen(self)
    }

    /// Completes once the server runs again (at once when it is not stopped).
    pub fn thawed(&self) -> Thawed<'_> {
        Thawed(self)
    }

    /// For a connection that read commands while the server is stopped: completes once it runs
    /// again and every connection that read before this one has run its commands (they end
    /// when their [`Turn`] is dropped). Valkey, waking from its sleep, serves the clients in
    /// the order their input arrived, one batch each: a client that sent a command after
    /// another client's pipeline sees that pipeline's effects (a client it got closed).
    pub async fn turn(&self) -> Turn<'_> {
        let turn = self.turns.lock().await;
        self.thawed().await;
        Turn { _held: turn }
    }

    /// Completes once every connection that read commands while the server was stopped, and
    /// queued for its [`Freeze::turn`] before this call, has run them: the turns are served
    /// first come, first served, this one last. A replica calls it between two pieces of a
    /// snapshot, with no stop of its own on, so that a client's INFO is answered mid-load.
    /// Threads blocked in [`Freeze::wait_blocking`] go on too.
    pub async fn let_in(&self) {
        {
            let _waiters = self.waiters.lock();
            self.let_ins.fetch_add(1, Ordering::AcqRel);
        }
        self.thawed.notify_all();
        // A connection handed to a task when it found the server stopped may not have queued
        // yet, and its task may be waiting for this very thread (the load blocks it): give
        // way once first.
        tokio::task::yield_now().await;
        drop(self.turns.lock().await);
    }

    /// [`Freeze::thawed`] for poll-based code: Ready when running, else Pending with the
    /// waker registered.
    pub fn poll_thawed(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.frozen() {
            return Poll::Ready(());
        }
        let mut waiters = self.waiters.lock();
        // Checked again under the lock: the end of the sleep drains the list under it, so a
        // waker pushed after this check is always woken.
        if !self.frozen() {
            return Poll::Ready(());
        }
        if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
            waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Blocks the calling (non-runtime) thread while the server is stopped. A loading
    /// replica's [`Freeze::let_in`] lets it go on even if the next piece began before it was
    /// scheduled: the pieces are milliseconds apart, and the cluster bus and cron must still
    /// get their turns in between, as they do in Valkey's event loop. The end of one DEBUG
    /// SLEEP right before another (a transaction of two) does not: Valkey runs both in one turn.
    pub fn wait_blocking(&self) {
        let mut waiters = self.waiters.lock();
        let seen = self.let_ins.load(Ordering::Acquire);
        while self.frozen() && self.let_ins.load(Ordering::Acquire) == seen {
            self.thawed.wait(&mut waiters);
        }
    }

    fn end(&self) {
        if self.depth.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let woken = std::mem::take(&mut *self.waiters.lock());
        self.thawed.notify_all();
        woken.into_iter().for_each(Waker::wake);
    }
}

/// A connection's turn to run what it read during a stop; the next one's begins when dropped.
pub struct Turn<'a> {
    _held: tokio::sync::MutexGuard<'a, ()>,
}

/// A DEBUG SLEEP in progress; the server runs again when the last one is dropped.
pub struct Frozen<'a>(&'a Freeze);

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// A stop of the server that outlives the command that began it: ends when dropped.
pub struct Held(std::sync::Arc<crate::server::Server>);

impl Held {
    /// Stops `srv` until the returned value is dropped.
    pub fn begin(srv: std::sync::Arc<crate::server::Server>) -> Held {
        srv.freeze.depth.fetch_add(1, Ordering::AcqRel);
        Held(srv)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.freeze.end();
    }
}

/// See [`Freeze::thawed`].
pub struct Thawed<'a>(&'a Freeze);

impl Future for Thawed<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.poll_thawed(cx)
    }
}

/// A stream that neither reads nor writes while the server is stopped: a replica's link to
/// its primary.
pub struct Gated<S> {
    inner: S,
    srv: std::sync::Arc<crate::server::Server>,
}

impl<S> Gated<S> {
    /// Wraps `inner`, gated by `srv`'s freeze.
    pub fn new(inner: S, srv: std::sync::Arc<crate::server::Server>) -> Gated<S> {
        Gated { inner, srv }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Gated<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.srv.freeze.poll_thawed(cx));
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Gated<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        std::task::ready!(self.srv.freeze.poll_thawed(cx));
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_resume_when_the_last_sleep_ends() {
        let f = std::sync::Arc::new(Freeze::default());
        assert!(!f.frozen());
        f.thawed().await;
        let a = f.begin();
        let b = f.begin();
        let waiter = {
            let f = f.clone();
            tokio::spawn(async move { f.thawed().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(a);
        tokio::task::yield_now().await;
        assert!(f.frozen() && !waiter.is_finished(), "one sleep is still on");
        drop(b);
        tokio::time::timeout(std::time::Duration::from_secs(10), waiter).await.unwrap().unwrap();
        let sleeper = f.clone();
        let g = f.begin();
        let t = std::thread::spawn(move || sleeper.wait_blocking());
        drop(g);
        t.join().unwrap();
    }

    #[tokio::test]
    async fn let_in_waits_for_the_turns_taken_during_a_stop() {
        let f = std::sync::Arc::new(Freeze::default());
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let piece = f.begin();
        let clients: Vec<_> = (0..3)
            .map(|_| {
                let (f, ran) = (f.clone(), ran.clone());
                tokio::spawn(async move {
                    let _turn = f.turn().await;
                    ran.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        // Every client queued for its turn while the piece loaded.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        drop(piece);
        f.let_in().await;
        assert_eq!(ran.load(Ordering::SeqCst), 3, "the next piece would start before a waiting client ran");
        for c in clients {
            c.await.unwrap();
        }
    }
}
