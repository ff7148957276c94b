//! The primary's replication stream as one shared buffer (Valkey 7+'s shared replication
//! buffer, `replBufBlock` list).
//!
//! Bytes live in fixed-size blocks, each tagged with its absolute stream offset. Full blocks
//! are frozen into reference-counted [`Bytes`], so a sender hands a replica a slice of the
//! very block the backlog holds: no copy per replica. Only the last, still-filling block is
//! copied out when a replica reads into it (it must stay writable), and that copy is at most
//! one block and lives only until the socket write finishes.
//!
//! Offsets follow Valkey: `offset` (`master_repl_offset`) counts every byte ever appended;
//! the byte appended when `offset` was N has offset N+1. A reader's position is the offset of
//! the last byte it has sent, so it next needs byte `pos + 1`.
//!
//! What is kept: everything newer than the backlog window (`repl-backlog-size`) and everything
//! a reader still needs. Like Valkey we trim whole blocks from the front, and only while the
//! history would still be longer than the backlog size without the block; a reader pins
//! every block from its position on.

use std::collections::{BTreeMap, VecDeque};

use bytes::{Bytes, BytesMut};

/// The shared buffer. Not synchronized: [`crate::Primary`] holds it under its lock.
#[derive(Debug)]
pub(crate) struct ReplBuffer {
    /// Full blocks, oldest first: the offset just before each block's first byte, and its bytes.
    blocks: VecDeque<(u64, Bytes)>,
    /// The block being filled; its first byte follows the last full block.
    tail: BytesMut,
    /// Total bytes appended ever (`master_repl_offset`).
    offset: u64,
    /// `repl-backlog-size`.
    backlog_size: u64,
    /// The largest capacity of a new block.
    block_size: usize,
    /// Bytes held in full blocks.
    held: usize,
    /// Readers (attached replicas): id to the offset of the last byte they consumed.
    readers: BTreeMap<u64, u64>,
}

impl ReplBuffer {
    /// An empty buffer whose next byte will have offset `offset + 1` (`createReplicationBacklog`).
    pub(crate) fn new(offset: u64, backlog_size: u64) -> Self {
        let backlog_size = backlog_size.max(MIN_BACKLOG);
        let block_size = block_size_for(backlog_size);
        ReplBuffer {
            blocks: VecDeque::new(),
            tail: BytesMut::new(),
            offset,
            backlog_size,
            block_size,
            held: 0,
            readers: BTreeMap::new(),
        }
    }

    /// `master_repl_offset`.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// `repl_backlog_first_byte_offset`: the oldest byte still held.
    pub(crate) fn first_byte_offset(&self) -> u64 {
        self.start() + 1
    }

    /// `repl_backlog_histlen`: how many bytes of history are held.
    pub(crate) fn histlen(&self) -> u64 {
        self.offset - self.start()
    }

    /// `repl-backlog-size`.
    pub(crate) fn backlog_size(&self) -> u64 {
        self.backlog_size
    }

    /// Bytes of memory the buffer holds: full blocks, the tail's allocation, and what each
    /// block costs beyond its bytes (its slot in the queue and the shared header `split`
    /// gives it, as Valkey counts its `replBufBlock` headers). A replica that stops reading
    /// for 100k small writes pins some 800 blocks; leaving their bookkeeping out made the
    /// part of `used_memory` counted against `maxmemory` grow by 0.8 bytes a write.
    pub(crate) fn memory(&self) -> usize {
        self.held
            + self.tail.capacity()
            + self.blocks.capacity() * std::mem::size_of::<(u64, Bytes)>()
            + self.blocks.len() * BLOCK_HEADER
    }

    /// Changes `repl-backlog-size` (CONFIG SET) and trims what the smaller window releases.
    /// New blocks get the new block size; old ones keep theirs.
    pub(crate) fn resize(&mut self, backlog_size: u64) {
        self.backlog_size = backlog_size.max(MIN_BACKLOG);
        self.block_size = block_size_for(self.backlog_size);
        self.trim();
    }

    /// Appends bytes at the end of the stream; whether a new block was started.
    pub(crate) fn append(&mut self, mut data: &[u8]) -> bool {
        let mut new_block = false;
        while !data.is_empty() {
            if self.tail.len() == self.tail.capacity() {
                self.freeze_tail();
                // Valkey's feedReplicationBuffer: a block holds at least 16 KiB and at most a
                // sixteenth of the backlog, but is no bigger than the append needs, so history
                // is trimmed in small steps (a 10 MB backlog would otherwise trim 640 KB at a
                // time and keep a replica's position that long).
                self.tail = BytesMut::with_capacity(data.len().clamp(CHUNK, self.block_size.max(CHUNK)));
                new_block = true;
            }
            let room = self.tail.capacity() - self.tail.len();
            let n = room.min(data.len());
            self.tail.extend_from_slice(&data[..n]);
            self.offset += n as u64;
            data = &data[n..];
        }
        // Trim only when a block was started, as Valkey does: small appends into the tail
        // cannot release anything.
        if new_block {
            self.trim();
        }
        new_block
    }

    /// Adds a reader positioned after byte `pos` (it next reads `pos + 1`). The caller has
    /// checked that `pos` is held (`first_byte_offset() - 1 <= pos <= offset()`).
    pub(crate) fn attach(&mut self, id: u64, pos: u64) {
        debug_assert!(pos >= self.start() && pos <= self.offset);
        self.readers.insert(id, pos);
    }

    /// Removes a reader and trims what only it was holding.
    pub(crate) fn detach(&mut self, id: u64) {
        if self.readers.remove(&id).is_some() {
            self.trim();
        }
    }

    /// A reader's position, if attached.
    pub(crate) fn position(&self, id: u64) -> Option<u64> {
        self.readers.get(&id).copied()
    }

    /// Moves a reader forward to `pos` (never backward, never past the end) and trims.
    pub(crate) fn advance(&mut self, id: u64, pos: u64) {
        let Some(p) = self.readers.get_mut(&id) else { return };
        let pos = pos.min(self.offset);
        if pos > *p {
            *p = pos;
            self.trim();
        }
    }

    /// Whether the byte after `pos` is still held, so a reader may start there (PSYNC).
    pub(crate) fn holds(&self, pos: u64) -> bool {
        pos >= self.start() && pos <= self.offset
    }

    /// Bytes a reader has not consumed yet: its share of the buffer for the output buffer
    /// limits (`getClientOutputBufferMemoryUsage` for replicas).
    #[cfg(test)]
    pub(crate) fn pending(&self, id: u64) -> Option<u64> {
        self.readers.get(&id).map(|p| self.offset - p)
    }

    /// Readers and their pending bytes.
    pub(crate) fn pending_all(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.readers.iter().map(|(&id, &p)| (id, self.offset - p))
    }

    /// Collects the bytes after `pos`, up to about `max` bytes, into `out` as shared slices of
    /// the blocks (the filling tail is copied). Returns the position after them.
    pub(crate) fn read(&self, pos: u64, max: usize, out: &mut Vec<Bytes>) -> u64 {
        let mut at = pos.max(self.start());
        let mut budget = max;
        // The first block that holds byte `at + 1`: the last block starting at or before `at`.
        let first = self.blocks.partition_point(|(start, _)| *start <= at).saturating_sub(1);
        for (start, bytes) in self.blocks.iter().skip(first) {
            if budget == 0 {
                return at;
            }
            let end = start + bytes.len() as u64;
            if end <= at {
                continue;
            }
            let from = (at - start) as usize;
            let take = (bytes.len() - from).min(budget);
            out.push(bytes.slice(from..from + take));
            at += take as u64;
            budget -= take;
        }
        let tail_start = self.tail_start();
        if budget > 0 && at < self.offset && at >= tail_start {
            let from = (at - tail_start) as usize;
            let take = (self.tail.len() - from).min(budget);
            out.push(Bytes::copy_from_slice(&self.tail[from..from + take]));
            at += take as u64;
        }
        at
    }

    /// The offset just before the oldest byte held.
    fn start(&self) -> u64 {
        self.blocks.front().map_or_else(|| self.tail_start(), |(s, _)| *s)
    }

    /// The offset just before the still-filling block's first byte.
    pub(crate) fn tail_start(&self) -> u64 {
        self.offset - self.tail.len() as u64
    }

    fn freeze_tail(&mut self) {
        if self.tail.is_empty() {
            return;
        }
        let start = self.tail_start();
        let bytes = self.tail.split().freeze();
        self.held += bytes.len();
        self.blocks.push_back((start, bytes));
    }

    /// Drops whole blocks from the front while no reader needs them and the history stays
    /// longer than the backlog window without them (`incrementalTrimReplicationBacklog`).
    fn trim(&mut self) {
        let oldest_reader = self.readers.values().copied().min().unwrap_or(u64::MAX);
        while let Some((start, bytes)) = self.blocks.front() {
            let end = start + bytes.len() as u64;
            if end > oldest_reader {
                break;
            }
            if self.histlen() - (bytes.len() as u64) <= self.backlog_size {
                break;
            }
            self.held -= bytes.len();
            self.blocks.pop_front();
        }
        // A queue left mostly empty after a replica caught up gives its room back.
        if self.blocks.capacity() > 64 && self.blocks.len() < self.blocks.capacity() / 4 {
            self.blocks.shrink_to(self.blocks.len() * 2);
        }
    }
}

/// Valkey's block size rule: at least 16 KiB (`PROTO_REPLY_CHUNK_BYTES`), at most a sixteenth
/// of the backlog so a mostly-unneeded block does not pin much memory.
fn block_size_for(backlog_size: u64) -> usize {
    (backlog_size / 16).clamp(CHUNK as u64, MAX_BLOCK as u64) as usize
}

/// `PROTO_REPLY_CHUNK_BYTES`.
const CHUNK: usize = 16 * 1024;
/// The allocation behind a frozen block's `Bytes` (`bytes`' shared header: the vector, its
/// original capacity and a reference count, 40 bytes in a 48-byte size class).
const BLOCK_HEADER: usize = 48;
/// Upper bound on a block so a huge backlog does not make huge single allocations.
const MAX_BLOCK: usize = 1024 * 1024;
/// `CONFIG_REPL_BACKLOG_MIN_SIZE`.
pub(crate) const MIN_BACKLOG: u64 = 16 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(buf: &ReplBuffer, pos: u64, max: usize) -> (Vec<u8>, u64) {
        let mut out = Vec::new();
        let end = buf.read(pos, max, &mut out);
        (out.concat(), end)
    }

    #[test]
    fn offsets_and_reads_across_blocks() {
        let mut b = ReplBuffer::new(100, MIN_BACKLOG);
        assert_eq!(b.first_byte_offset(), 101);
        assert_eq!(b.histlen(), 0);
        // A reader at the start pins everything, so every position stays readable.
        b.attach(1, 100);
        let data: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
        b.append(&data);
        assert_eq!(b.offset(), 50_100);
        // Reads from anywhere held return the same bytes, across block boundaries and the tail.
        for pos in [b.first_byte_offset() - 1, 20_000, 40_000, 50_099] {
            let (got, end) = collect(&b, pos, usize::MAX);
            assert_eq!(end, 50_100);
            let want = &data[(pos - 100) as usize..];
            assert_eq!(got.len(), want.len(), "from {pos}");
            assert!(got == want, "from {pos}: bytes differ");
        }
        let (got, end) = collect(&b, 49_000, 10);
        assert_eq!(end, 49_010);
        assert!(got == data[48_900..48_910]);
    }

    #[test]
    fn trims_to_the_backlog_window_without_readers() {
        let mut b = ReplBuffer::new(0, MIN_BACKLOG);
        for _ in 0..100 {
            b.append(&[7u8; 1000]);
        }
        assert_eq!(b.offset(), 100_000);
        // The history stays at least the backlog size, and at most one block more.
        assert!(b.histlen() >= MIN_BACKLOG, "{}", b.histlen());
        assert!(b.histlen() <= MIN_BACKLOG + CHUNK as u64, "{}", b.histlen());
        assert_eq!(b.first_byte_offset(), b.offset() - b.histlen() + 1);
        assert!(b.memory() <= 3 * CHUNK);
        assert!(b.holds(b.offset() - MIN_BACKLOG));
        assert!(!b.holds(10));
    }

    #[test]
    fn a_stalled_readers_blocks_count_their_bookkeeping_and_give_it_back() {
        let mut b = ReplBuffer::new(0, MIN_BACKLOG);
        b.attach(1, 0);
        // 100k writes of a 127-byte command, as a SETRANGE of 100 bytes is: ~780 blocks.
        for _ in 0..100_000 {
            b.append(&[3u8; 127]);
        }
        let blocks = b.blocks.len();
        assert!(blocks > 700, "{blocks}");
        let per_block = std::mem::size_of::<(u64, Bytes)>() + BLOCK_HEADER;
        assert!(b.memory() >= b.held + blocks * per_block, "{} {}", b.memory(), b.held);
        // The reader catches up: the blocks and most of the queue's room go.
        b.advance(1, b.offset());
        b.append(&[3u8; 2 * CHUNK]);
        assert!(b.blocks.len() <= 4, "{}", b.blocks.len());
        assert!(b.blocks.capacity() <= 64, "{}", b.blocks.capacity());
        assert!(b.memory() <= b.held + 3 * CHUNK, "{}", b.memory());
    }

    #[test]
    fn a_smaller_backlog_releases_what_a_dropped_reader_held() {
        // CONFIG SET repl-backlog-size 100 (16 KiB), a replica dropped while 100 KiB arrive:
        // once it is gone, the history shrinks to the new window (Valkey's replica-in-sync).
        // The default 10 MB backlog, whose blocks may be 640 KiB but are only as big as needed.
        let mut b = ReplBuffer::new(0, 10 << 20);
        b.append(&[1u8; 9000]);
        b.attach(1, 8984);
        b.resize(100);
        for _ in 0..100 {
            b.append(&[2u8; 1100]);
        }
        b.detach(1);
        assert!(!b.holds(8984), "history {} from {}", b.histlen(), b.first_byte_offset());
        assert!(b.histlen() <= MIN_BACKLOG + 64 * 1024, "{}", b.histlen());
    }

    #[test]
    fn a_reader_pins_what_it_has_not_read() {
        let mut b = ReplBuffer::new(0, MIN_BACKLOG);
        b.attach(1, 0);
        for _ in 0..200 {
            b.append(&[1u8; 1000]);
        }
        assert_eq!(b.first_byte_offset(), 1, "nothing trimmed while the reader is at 0");
        assert_eq!(b.pending(1), Some(200_000));
        b.advance(1, 150_000);
        assert!(b.first_byte_offset() <= 150_001);
        assert!(b.histlen() >= 50_000);
        b.detach(1);
        assert!(b.histlen() <= MIN_BACKLOG + CHUNK as u64);
    }

    #[test]
    fn resize_trims_and_changes_block_size() {
        let mut b = ReplBuffer::new(0, 4 * 1024 * 1024);
        for _ in 0..100 {
            b.append(&[3u8; 10_000]);
        }
        assert_eq!(b.histlen(), 1_000_000);
        b.resize(100_000);
        assert!(b.histlen() >= 100_000 && b.histlen() < 100_000 + 262_144 + 1, "{}", b.histlen());
        b.resize(1);
        assert_eq!(b.backlog_size(), MIN_BACKLOG);
    }

    #[test]
    fn blocks_are_shared_not_copied() {
        let mut b = ReplBuffer::new(0, MIN_BACKLOG);
        b.append(&[9u8; 3 * CHUNK]);
        let mut one = Vec::new();
        let mut two = Vec::new();
        b.read(0, usize::MAX, &mut one);
        b.read(0, usize::MAX, &mut two);
        // Full blocks come back as slices of the same allocation.
        assert_eq!(one[0].as_ptr(), two[0].as_ptr());
    }
}
