//! A replica's socket lent to the event loop that appends to the stream.
//!
//! A replica's sender is a task on a runtime worker. Woken at the end of every event-loop turn
//! that wrote, it cost the loop a cross-thread wakeup and both threads a context switch per
//! turn (on one core: a primary with a replica spent 1.5x the CPU per SET of one without).
//! Valkey writes to its replicas' sockets from the event loop itself, in beforeSleep. Here,
//! while a sender waits with nothing to send, it parks its socket: the loop that ends its turn
//! may then take it, send the stream from the replica's position with one non-blocking `send`,
//! record the new position and give it back, and the sender sleeps on. Whatever the loop cannot
//! send at once (the kernel's buffer is full, a batch's worth is exceeded) is left to the
//! sender, which is woken for it as before.
//!
//! Only one of them writes at a time, and each reads the replica's position under the
//! stream's lock before it writes, so the bytes leave in order whoever sends them.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use bytes::Bytes;

/// What a loop needs of a replica's connection: a non-blocking send. The server gives one for
/// plain TCP connections (a duplicate of the socket's descriptor, so that it stays valid for as
/// long as the loop holds it); a TLS connection's records are its sender's alone.
pub trait DirectOut: Send + Sync {
    /// Sends as much of `chunks`, in order, as the socket takes now without waiting, and says
    /// how many bytes it took (0 when it would block).
    fn try_send(&self, chunks: &[Bytes]) -> io::Result<usize>;
}

/// The sender writes, or is about to.
const SENDER: u8 = 0;
/// The sender waits with nothing to send: a loop may take the socket.
const PARKED: u8 = 1;
/// A loop is sending.
const LOOP: u8 = 2;

/// One replica's lendable socket.
pub(crate) struct Direct {
    out: Box<dyn DirectOut>,
    state: AtomicU8,
}

impl Direct {
    pub(crate) fn new(out: Box<dyn DirectOut>) -> Arc<Direct> {
        Arc::new(Direct { out, state: AtomicU8::new(SENDER) })
    }

    /// The sender takes its socket back before it reads the stream: it waits out a loop's send
    /// in progress (one non-blocking call).
    pub(crate) async fn take(&self) {
        loop {
            match self.state.compare_exchange(PARKED, SENDER, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) | Err(SENDER) => return,
                Err(_) => tokio::task::yield_now().await,
            }
        }
    }

    /// The sender found nothing to send and is about to wait.
    pub(crate) fn park(&self) {
        self.state.store(PARKED, Ordering::Release);
    }

    /// A loop takes the socket if its sender parked it.
    pub(crate) fn try_lend(&self) -> bool {
        self.state.compare_exchange(PARKED, LOOP, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }

    /// The loop is done: the position it sent up to is recorded.
    pub(crate) fn give_back(&self) {
        self.state.store(PARKED, Ordering::Release);
    }

    pub(crate) fn try_send(&self, chunks: &[Bytes]) -> usize {
        debug_assert_eq!(self.state.load(Ordering::Relaxed), LOOP);
        // An error is the sender's to meet on its own write (or its reader's EOF).
        self.out.try_send(chunks).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nowhere;
    impl DirectOut for Nowhere {
        fn try_send(&self, chunks: &[Bytes]) -> io::Result<usize> {
            Ok(chunks.iter().map(Bytes::len).sum())
        }
    }

    #[tokio::test]
    async fn only_a_parked_socket_is_lent_and_the_sender_waits_out_a_loan() {
        let d = Direct::new(Box::new(Nowhere));
        assert!(!d.try_lend(), "a sender that never parked keeps its socket");
        d.park();
        assert!(d.try_lend());
        assert!(!d.try_lend(), "lent to one loop at a time");
        let d2 = d.clone();
        let taker = tokio::spawn(async move { d2.take().await });
        tokio::task::yield_now().await;
        assert!(!taker.is_finished(), "the sender took its socket while a loop sent on it");
        d.give_back();
        taker.await.unwrap();
        assert!(!d.try_lend(), "the sender holds it again");
    }
}
