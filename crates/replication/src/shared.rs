//! One snapshot for the replicas that ask for a full resync together (`repl-diskless-sync-delay`
//! and `repl-diskless-sync-max-replicas`). The keyspace holds one snapshot at a time, so without
//! this a second replica waits for the first one's whole transfer before its own starts; Valkey
//! waits a few seconds after the first request so that one RDB serves every replica that
//! arrives meanwhile, and so does this.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{Notify, mpsc, oneshot};
use tracing::{info, warn};

use crate::BoxFuture;
use crate::sender::{Snapshot, SnapshotSource};

/// Chunks a member's channel holds ahead of its sender: the slowest replica sets the pace of
/// all, as in Valkey's RDB pipe to several replicas.
const MEMBER_AHEAD: usize = 16;

/// How long to wait for more replicas, and how many to wait for at most (0: no limit), read
/// when a group starts (the server's live configuration).
pub type GroupSettings = Arc<dyn Fn() -> (Duration, usize) + Send + Sync>;

/// A [`SnapshotSource`] that gathers the full resyncs asked for within the delay and serves
/// them from one snapshot of `inner`.
pub struct SharedSnapshots {
    inner: Arc<dyn SnapshotSource>,
    settings: GroupSettings,
    /// The group still waiting for its start, if any.
    pending: Arc<Mutex<Option<Group>>>,
}

/// Replicas waiting for the same snapshot.
struct Group {
    members: Vec<oneshot::Sender<io::Result<Snapshot>>>,
    /// At most this many members (0: no limit); the group starts once it has them.
    max: usize,
    full: Arc<Notify>,
}

impl SharedSnapshots {
    /// Shares the snapshots of `inner` as `settings` say.
    pub fn new(inner: Arc<dyn SnapshotSource>, settings: GroupSettings) -> SharedSnapshots {
        SharedSnapshots { inner, settings, pending: Arc::new(Mutex::new(None)) }
    }

    /// Joins the waiting group, or starts one that begins its snapshot after `delay`.
    fn join(&self, delay: Duration, max: usize) -> oneshot::Receiver<io::Result<Snapshot>> {
        let (tx, rx) = oneshot::channel();
        let mut pending = self.pending.lock();
        if let Some(g) = pending.as_mut() {
            g.members.push(tx);
            if g.max > 0 && g.members.len() >= g.max {
                g.full.notify_one();
            }
            return rx;
        }
        let full = Arc::new(Notify::new());
        *pending = Some(Group { members: vec![tx], max, full: full.clone() });
        drop(pending);
        let (inner, pending) = (self.inner.clone(), self.pending.clone());
        // Its own task: the group starts even if the replica that opened it goes away.
        tokio::spawn(async move {
            if max != 1 {
                let _ = tokio::time::timeout(delay, full.notified()).await;
            }
            let Some(group) = pending.lock().take() else { return };
            serve(inner.as_ref(), group.members).await;
        });
        rx
    }
}

impl SnapshotSource for SharedSnapshots {
    fn snapshot(&self) -> BoxFuture<'_, io::Result<Snapshot>> {
        let (delay, max) = (self.settings)();
        if delay.is_zero() {
            return self.inner.snapshot();
        }
        info!("Delay next BGSAVE for diskless SYNC");
        let rx = self.join(delay, max);
        Box::pin(async move { rx.await.map_err(|_| io::Error::other("the shared snapshot was abandoned"))? })
    }
}

/// Takes one snapshot and sends each chunk to every member still listening, in order.
async fn serve(inner: &dyn SnapshotSource, members: Vec<oneshot::Sender<io::Result<Snapshot>>>) {
    // The source's hold lasts until every member is done, as this loop does.
    let Snapshot { point, mut rdb, hold: _hold } = match inner.snapshot().await {
        Ok(s) => s,
        Err(e) => {
            for m in members {
                let _ = m.send(Err(io::Error::new(e.kind(), e.to_string())));
            }
            return;
        }
    };
    let mut outs = Vec::with_capacity(members.len());
    for m in members {
        let (tx, rx) = mpsc::channel(MEMBER_AHEAD);
        if m.send(Ok(Snapshot { point: point.clone(), rdb: rx, hold: None })).is_ok() {
            outs.push(tx);
        }
    }
    // Valkey's lines about its RDB pipe, which this loop stands for (its tests wait for them).
    while !outs.is_empty() {
        let Some(chunk) = rdb.recv().await else {
            outs.retain(|tx| !tx.is_closed());
            info!("Diskless rdb transfer, done reading from pipe, {} replicas still up.", outs.len());
            return;
        };
        match chunk {
            Ok(b) => {
                for tx in &outs {
                    let _ = tx.send(Ok(Bytes::clone(&b))).await;
                }
                // A replica that went away stops counting; when none is left, dropping
                // `rdb` ends the snapshot.
                outs.retain(|tx| !tx.is_closed());
                if outs.is_empty() {
                    warn!("Diskless rdb transfer, last replica dropped, killing fork child.");
                }
            }
            Err(e) => {
                for tx in &outs {
                    let _ = tx.send(Err(io::Error::new(e.kind(), e.to_string()))).await;
                }
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::primary::SyncPoint;

    /// Counts its snapshots; each is three chunks.
    struct Counting(AtomicUsize);

    impl SnapshotSource for Counting {
        fn snapshot(&self) -> BoxFuture<'_, io::Result<Snapshot>> {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                let (tx, rx) = mpsc::channel(4);
                tokio::spawn(async move {
                    for part in ["a", "b", "c"] {
                        let _ = tx.send(Ok(Bytes::from(format!("{part}{n}")))).await;
                    }
                });
                Ok(Snapshot { point: SyncPoint { replid: "r".repeat(40), offset: n as u64 }, rdb: rx, hold: None })
            })
        }
    }

    async fn read_all(s: &SharedSnapshots) -> (u64, String) {
        let Snapshot { point, mut rdb, .. } = s.snapshot().await.unwrap();
        let mut text = String::new();
        while let Some(c) = rdb.recv().await {
            text.push_str(std::str::from_utf8(&c.unwrap()).unwrap());
        }
        (point.offset, text)
    }

    fn shared(delay_ms: u64, max: usize) -> (SharedSnapshots, Arc<Counting>) {
        let inner = Arc::new(Counting(AtomicUsize::new(0)));
        let s = SharedSnapshots::new(inner.clone(), Arc::new(move || (Duration::from_millis(delay_ms), max)));
        (s, inner)
    }

    #[tokio::test(start_paused = true)]
    async fn replicas_within_the_delay_share_one_snapshot_and_later_ones_get_the_next() {
        let (s, inner) = shared(5000, 0);
        let (a, b) = tokio::join!(read_all(&s), async {
            tokio::time::sleep(Duration::from_secs(2)).await;
            read_all(&s).await
        });
        assert_eq!(a, (0, "a0b0c0".to_string()));
        assert_eq!(b, a);
        assert_eq!(inner.0.load(Ordering::SeqCst), 1);
        assert_eq!(read_all(&s).await, (1, "a1b1c1".to_string()));
    }

    #[tokio::test(start_paused = true)]
    async fn the_group_starts_early_once_max_replicas_wait() {
        let (s, inner) = shared(3_600_000, 2);
        let started = tokio::time::Instant::now();
        let (a, b) = tokio::join!(read_all(&s), read_all(&s));
        assert_eq!((a.1.as_str(), b.1.as_str()), ("a0b0c0", "a0b0c0"));
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        assert_eq!(inner.0.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn no_delay_takes_a_snapshot_per_replica_and_a_leaver_does_not_stop_the_others() {
        let (s, inner) = shared(0, 0);
        assert_eq!(read_all(&s).await.1, "a0b0c0");
        assert_eq!(read_all(&s).await.1, "a1b1c1");
        assert_eq!(inner.0.load(Ordering::SeqCst), 2);
        // The replica that opened a group leaves before it starts: the other still gets it.
        let (s, _) = shared(1000, 0);
        drop(s.snapshot());
        assert_eq!(read_all(&s).await.1, "a0b0c0");
    }
}
