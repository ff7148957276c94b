//! Each client's query buffer as Valkey sizes it: CLIENT LIST's `qbuf=` and `qbuf-free=`, the
//! peak the buffer reached since the cron last looked (`querybuf_peak`), and the cron pass that
//! shrinks it (`clientsCronResizeQueryBuffer`).
//!
//! A connection reads into a buffer of its own only while it needs one, as Valkey 8's clients
//! use the thread's shared query buffer: a client whose reads hold whole commands drops its
//! buffer after each batch and shows `qbuf=0 qbuf-free=0` while idle. A batch that leaves part of
//! a command behind (or a big argument under way) makes the buffer the client's own, kept between
//! batches, until the cron frees it (idle for more than 2 seconds with nothing pending) or
//! shrinks it (more than [`RESIZE_THRESHOLD`] and over twice the recent peak, or idle with a
//! partial command). The connection owns the bytes; the cron, on its own thread, decides from
//! what the connection published and leaves a [`Resize`] request, which the connection applies
//! when it wakes (see `Conn::apply_query_buffer_request`). The per-read cost is a few stores
//! and a compare for the peak.
//!
//! Sizes are seen as Valkey's buffer would hold them: while a big argument arrives Valkey has
//! trimmed the command's earlier bytes, so `len`, the peak and the argument's size count from
//! the argument's first byte.

use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::BytesMut;

/// Bytes one read asks for (Valkey's `PROTO_IOBUF_LEN`).
pub const READ_CHUNK: usize = 16 * 1024;
/// Only a buffer above this size is shrunk to its peak while its client is active (Valkey's
/// `PROTO_RESIZE_THRESHOLD`).
pub const RESIZE_THRESHOLD: usize = 32 * 1024;
/// Free space below this is not worth a resize (Valkey's 4 KiB).
const MIN_WASTE: usize = 4 * 1024;
/// Seconds of idleness after which a buffer is freed or trimmed whatever its peak.
const IDLE_SECS: i64 = 2;
/// Most of a big argument's claimed size reserved before its bytes arrive: the size in a `$N`
/// header is only a claim, and reserving 512 MB for a few bytes of header (as Valkey does)
/// counts in `used_memory` at once and lets a handful of connections exhaust the address space.
const CLAIM_RESERVE: usize = 1 << 20;

/// One client's query buffer as the cron and CLIENT LIST see it. The connection publishes its
/// state after each read and batch; the cron reads it, resets the peak and posts requests. Both
/// only store whole values, so a race costs one observation at most.
#[derive(Debug, Default)]
pub struct QueryBuffer {
    len: AtomicUsize,
    free: AtomicUsize,
    /// What the big argument being received needs the buffer to hold (Valkey's `bulklen + 2`),
    /// 0 when none is.
    bulk: AtomicUsize,
    peak: AtomicUsize,
    /// The cron's pending request: 0 for none, 1 to free, `n + 2` to shrink to `n` bytes.
    request: AtomicUsize,
}

/// A size change the cron asks of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// Drop the buffer: the next read takes a fresh one, as a Valkey client idle long enough
    /// goes back to the shared query buffer.
    Free,
    /// Keep a buffer of this many bytes (never less than what it holds).
    Shrink(usize),
}

impl QueryBuffer {
    /// Bytes received and not yet run (`qbuf=`).
    pub fn pending(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Room left in the buffer (`qbuf-free=`).
    pub fn free(&self) -> usize {
        self.free.load(Ordering::Relaxed)
    }

    /// The peak since the cron's last visit.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// The connection's buffer now holds `len` bytes with `free` more room, and the big argument
    /// being received needs `bulk` bytes held (0 for none).
    pub fn publish(&self, len: usize, free: usize, bulk: usize) {
        self.len.store(len, Ordering::Relaxed);
        self.free.store(free, Ordering::Relaxed);
        self.bulk.store(bulk, Ordering::Relaxed);
        self.note_peak(len);
    }

    /// The buffer held, or was sized to hold, `bytes`.
    #[inline]
    pub fn note_peak(&self, bytes: usize) {
        if bytes > self.peak.load(Ordering::Relaxed) {
            self.peak.store(bytes, Ordering::Relaxed);
        }
    }

    /// One cron visit to a client idle for `idle_secs` seconds: decides by Valkey's rules, resets
    /// the peak to what the buffer holds or must hold, and leaves the decision for the connection.
    /// Returns it so the caller can wake the connection.
    pub fn cron(&self, idle_secs: i64) -> Option<Resize> {
        let (len, bulk) = (self.pending(), self.bulk.load(Ordering::Relaxed));
        let size = len + self.free();
        let resize = next_size(size, len, self.peak(), bulk, idle_secs);
        let kept = if size == 0 || resize == Some(Resize::Free) { 0 } else { len.max(bulk) };
        self.peak.store(kept, Ordering::Relaxed);
        let code = match resize? {
            Resize::Free => 1,
            Resize::Shrink(n) => n + 2,
        };
        self.request.store(code, Ordering::Relaxed);
        resize
    }

    /// Takes the cron's pending request, if any.
    pub fn take_request(&self) -> Option<Resize> {
        if self.request.load(Ordering::Relaxed) == 0 {
            return None;
        }
        match self.request.swap(0, Ordering::Relaxed) {
            0 => None,
            1 => Some(Resize::Free),
            n => Some(Resize::Shrink(n - 2)),
        }
    }
}

/// Valkey's `clientsCronResizeQueryBuffer` for a buffer of `size` bytes holding `len`, whose
/// peak since the last visit is `peak`, with a big argument needing `bulk` bytes held (0 for
/// none), of a client idle for `idle_secs`. Nothing below [`MIN_WASTE`] of free space; idle for
/// more than 2 seconds, a buffer with nothing pending is freed and one with a partial command
/// loses its free space; otherwise a buffer above [`RESIZE_THRESHOLD`] at over twice its peak
/// shrinks to the peak (or what it holds, or the argument's size, whichever is largest).
pub fn next_size(size: usize, len: usize, peak: usize, bulk: usize, idle_secs: i64) -> Option<Resize> {
    if size == 0 || size - len.min(size) <= MIN_WASTE {
        return None;
    }
    if idle_secs > IDLE_SECS {
        return Some(if len == 0 { Resize::Free } else { Resize::Shrink(len) });
    }
    let keep = len.max(peak).max(bulk);
    (size > RESIZE_THRESHOLD && size / 2 > peak && keep < size).then_some(Resize::Shrink(keep))
}

thread_local! {
    /// One read buffer per thread that the connections polled on it share (Valkey 8's
    /// thread-shared query buffer): a request/response client takes it for the read, runs the
    /// commands, and gives it back empty before it writes the replies, so the next connection
    /// the thread serves reads into the same warm 16 KiB, with no allocation and no free per
    /// request. A connection left holding part of a command keeps what it took.
    static SHARED: std::cell::Cell<Option<BytesMut>> = const { std::cell::Cell::new(None) };
}

/// The thread's shared read buffer for a connection that holds none and wants `capacity`
/// bytes of room, if the thread has it and it is that size.
pub fn take_shared(capacity: usize) -> Option<BytesMut> {
    if capacity != READ_CHUNK {
        return None;
    }
    SHARED.with(|s| s.take())
}

/// Gives an emptied read buffer back to the thread, for the next connection's read; one of
/// any other size, or when the thread has one already, is freed. (A connection keeps its data
/// at the front of its buffer, so the capacity seen here is the whole allocation.)
pub fn give_back(mut buf: BytesMut) {
    buf.clear();
    if buf.capacity() == READ_CHUNK {
        SHARED.with(|s| {
            if let Some(old) = s.replace(Some(buf)) {
                s.set(Some(old));
            }
        });
    }
}

/// The capacity a buffer holding `len` bytes in `capacity` must have before its next read,
/// `want` being what the big argument being received, which starts at `start`, needs it to
/// hold (0 for none). A big argument gets its whole size at once, as Valkey does when it reads
/// the `$N` header, up to [`CLAIM_RESERVE`]; a larger one gets twice what arrived of it so far
/// (at least that), until it fits. The memory is reserved, not touched, until the bytes arrive,
/// and counts in `tot-mem` (so `maxmemory-clients` sees it). Otherwise a read gets room for
/// [`READ_CHUNK`] bytes: exactly that for a small buffer, and for a command longer than one
/// read the buffer doubles, so a huge command is copied a bounded number of times.
pub fn read_capacity(len: usize, capacity: usize, want: usize, start: usize) -> usize {
    if want > len {
        let received = len - start;
        return (start + (want - start).min(CLAIM_RESERVE.max(2 * received))).max(capacity);
    }
    if capacity - len >= READ_CHUNK / 4 {
        return capacity;
    }
    if capacity < READ_CHUNK {
        return len + READ_CHUNK;
    }
    (len + READ_CHUNK).max(capacity * 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_buffer_given_back_is_the_next_reads_on_this_thread() {
        std::thread::spawn(|| {
            assert!(take_shared(READ_CHUNK).is_none(), "nothing shared yet");
            let mut b = BytesMut::with_capacity(READ_CHUNK);
            b.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
            let at = b.as_ptr() as usize;
            give_back(b);
            let again = take_shared(READ_CHUNK).expect("kept");
            assert_eq!((again.len(), again.capacity(), again.as_ptr() as usize), (0, READ_CHUNK, at));
            assert!(take_shared(READ_CHUNK).is_none(), "taken once");
            give_back(again);
            assert!(take_shared(READ_CHUNK * 2).is_none(), "only for a read of the usual size");
            give_back(BytesMut::with_capacity(READ_CHUNK * 4));
            assert_eq!(take_shared(READ_CHUNK).map(|b| b.capacity()), Some(READ_CHUNK), "a big one is freed");
            give_back(BytesMut::with_capacity(READ_CHUNK / 2));
            assert!(take_shared(READ_CHUNK).is_none(), "a small one (the cron shrank it) is freed");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn resizes_as_valkeys_cron() {
        assert_eq!(next_size(0, 0, 0, 0, 10), None, "no buffer of its own");
        assert_eq!(next_size(16 * 1024, 0, 0, 0, 2), None, "16 KiB is under the resize threshold");
        assert_eq!(next_size(16 * 1024, 0, 0, 0, 3), Some(Resize::Free), "idle over 2 seconds");
        assert_eq!(next_size(16 * 1024, 31, 31, 0, 3), Some(Resize::Shrink(31)), "idle with a partial command");
        assert_eq!(next_size(5000, 1000, 0, 0, 3), None, "less than 4 KiB to gain");
        assert_eq!(next_size(400_000, 0, 400_000, 0, 0), None, "the peak still fills it");
        assert_eq!(next_size(400_000, 0, 130, 0, 0), Some(Resize::Shrink(130)));
        assert_eq!(next_size(400_000, 10, 0, 0, 0), Some(Resize::Shrink(10)));
        assert_eq!(next_size(1_000_002, 1, 0, 1_000_002, 0), None, "a big argument keeps its room");
        assert_eq!(next_size(1_000_002, 1, 20_000, 300_000, 0), Some(Resize::Shrink(300_000)));
        assert_eq!(next_size(1_000_002, 1, 0, 1_000_002, 3), Some(Resize::Shrink(1)), "idle trims it all");
    }

    #[test]
    fn the_cron_resets_the_peak_and_leaves_one_request() {
        let q = QueryBuffer::default();
        q.publish(0, 400_000, 0);
        q.note_peak(400_000);
        assert_eq!(q.cron(0), None);
        assert_eq!(q.peak(), 0, "reset to what it holds");
        q.note_peak(130);
        assert_eq!(q.cron(0), Some(Resize::Shrink(130)));
        assert_eq!(q.take_request(), Some(Resize::Shrink(130)));
        assert_eq!(q.take_request(), None);
        q.publish(0, 16 * 1024, 0);
        assert_eq!(q.cron(3), Some(Resize::Free));
        assert_eq!((q.take_request(), q.peak()), (Some(Resize::Free), 0));
        q.publish(10, 16 * 1024, 50_000);
        assert_eq!(q.cron(0), None);
        assert_eq!(q.peak(), 50_000, "a big argument's size stays the peak");
    }

    #[test]
    fn reads_get_room_as_valkeys_reader_gives_it() {
        assert_eq!(read_capacity(0, 0, 0, 0), READ_CHUNK);
        assert_eq!(read_capacity(20, 16 * 1024, 0, 0), 16 * 1024, "room enough");
        assert_eq!(read_capacity(130, 130, 0, 0), 130 + READ_CHUNK, "a shrunk buffer grows to one read");
        assert_eq!(read_capacity(30_000, 32 * 1024, 0, 0), 64 * 1024, "a long command doubles it");
        assert_eq!(read_capacity(31, 31, 1_000_032, 30), 1_000_032, "a big argument at once");
        assert_eq!(read_capacity(31, 2_000_000, 1_000_032, 30), 2_000_000);
    }

    #[test]
    fn a_huge_claim_is_reserved_as_its_bytes_arrive() {
        let (start, want) = (20, 20 + 500_000_002);
        assert_eq!(read_capacity(21, 16 * 1024, want, start), start + CLAIM_RESERVE);
        assert_eq!(read_capacity(start + CLAIM_RESERVE, start + CLAIM_RESERVE, want, start), start + 2 * CLAIM_RESERVE);
        assert_eq!(
            read_capacity(start + 400_000_000, start + 400_000_000, want, start),
            want,
            "never past the argument"
        );
    }
}
