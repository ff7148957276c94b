//! Reading whole RDB files as their bytes arrive: a replica's full sync from a socket, a file
//! read in blocks.
//!
//! [`RdbReader`] is a push parser: [`RdbReader::feed`] appends bytes, [`RdbReader::next_item`]
//! returns the next complete [`Item`] or `None` until more bytes come. Nothing is allocated
//! from a length the data declares: a record is first *scanned* (its length headers walked,
//! each declared string length checked against the limit the reader was given) until all its
//! bytes are buffered, then decoded from the buffer with the DUMP decoders. The buffer holds
//! at most one record plus the bytes of the last feed, so memory stays bounded by the largest
//! value in the file, and a length that lies costs only the bytes that really arrived.
//!
//! The scan keeps its place between feeds (how many parts of the record, how many elements of
//! a collection it has walked), so a value arriving in many small pieces is walked once, not
//! once per piece.
//!
//! Versions 1–12 (`REDIS00nn`, 12 being Redis 7.4's) and Valkey 9's 80–81 (`VALKEYnnn`) are read, with every
//! encoding RESTORE reads. The checksum after EOF is verified unless it is 0 (a file saved
//! with `rdbchecksum no`); files before version 5 have none.

use super::hash_ttl;
use super::{
    Loaded, REDIS_MAX_VERSION, RdbError, Reader, TYPE_HASH, TYPE_HASH_LISTPACK, TYPE_HASH_ZIPLIST, TYPE_HASH_ZIPMAP,
    TYPE_LIST, TYPE_LIST_QUICKLIST, TYPE_LIST_QUICKLIST_2, TYPE_LIST_ZIPLIST, TYPE_SET, TYPE_SET_INTSET,
    TYPE_SET_LISTPACK, TYPE_STRING, TYPE_ZSET, TYPE_ZSET_2, TYPE_ZSET_LISTPACK, TYPE_ZSET_ZIPLIST, crc64, read_object,
};
use super::{
    OPCODE_AUX, OPCODE_EOF, OPCODE_EXPIRETIME, OPCODE_EXPIRETIME_MS, OPCODE_FREQ, OPCODE_FUNCTION_PRE_GA,
    OPCODE_FUNCTION2, OPCODE_IDLE, OPCODE_MODULE_AUX, OPCODE_RESIZEDB, OPCODE_SELECTDB, OPCODE_SLOT_INFO,
};

/// One thing an RDB file says, in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// An AUX field (`redis-ver`, `repl-id`, ...); unknown ones are to be ignored.
    Aux {
        /// Its name.
        key: Vec<u8>,
        /// Its value; integers are given as their decimal text.
        value: Vec<u8>,
    },
    /// The keys that follow belong to this database.
    SelectDb(u64),
    /// Key and TTL counts of the selected database: a hint, not a promise.
    ResizeDb {
        /// Keys announced.
        keys: u64,
        /// Keys with a TTL announced.
        expires: u64,
    },
    /// Valkey 8 cluster mode: key counts of one slot, a hint.
    SlotInfo {
        /// The slot.
        slot: u64,
        /// Keys in it.
        keys: u64,
        /// Keys with a TTL in it.
        expires: u64,
    },
    /// One key.
    Entry {
        /// Its name.
        key: Vec<u8>,
        /// Its value, decoded and checked as RESTORE checks it.
        value: Loaded,
        /// Its expire time in unix milliseconds.
        expire_ms: Option<i64>,
        /// Its LRU idle time in seconds, when the file carries one.
        idle_s: Option<u64>,
        /// Its LFU counter, when the file carries one.
        freq: Option<u8>,
    },
    /// A function library's code (`FUNCTION LOAD` text). hotkv has no functions; the caller
    /// decides whether to refuse the file or go on without it.
    FunctionLib(Vec<u8>),
    /// The end of the file, its checksum verified. Nothing follows.
    Eof,
}

/// A push parser of RDB files: feed it bytes, take complete [`Item`]s out.
///
/// ```
/// # use hotkv_engine::rdb::{Item, RdbReader, RdbWriter};
/// # let mut file = Vec::new();
/// # RdbWriter::new(&mut file, &[]).finish(&mut file);
/// let mut r = RdbReader::new(512 * 1024 * 1024);
/// for block in file.chunks(4096) {
///     r.feed(block);
///     while let Some(item) = r.next_item()? {
///         // ...
/// #       let _ = item;
///     }
/// }
/// r.finish()?; // the input ended: an error unless EOF was reached
/// # Ok::<(), hotkv_engine::rdb::RdbError>(())
/// ```
#[derive(Debug)]
pub struct RdbReader {
    /// Bytes fed and not consumed yet start at `start`.
    buf: Vec<u8>,
    start: usize,
    state: State,
    version: u16,
    /// Checksum of every byte consumed so far.
    crc: u64,
    consumed: u64,
    /// How far the record at `start` has been scanned.
    scan: Scan,
    max_string: u64,
    /// Opcodes seen that apply to the next key.
    pending: Pending,
}

impl RdbReader {
    /// A reader refusing any string (key, value, blob) declared longer than `max_string`
    /// bytes, before waiting for its bytes (the server passes `proto-max-bulk-len`).
    pub fn new(max_string: u64) -> RdbReader {
        RdbReader {
            buf: Vec::new(),
            start: 0,
            state: State::Magic,
            version: 0,
            crc: 0,
            consumed: 0,
            scan: Scan::default(),
            max_string,
            pending: Pending::default(),
        }
    }

    /// Appends bytes that arrived. Bytes after the end of the file are kept for
    /// [`RdbReader::remainder`].
    pub fn feed(&mut self, data: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        // A big value leaves a big buffer behind; give it back once it is mostly idle.
        if self.buf.capacity() > SHRINK_ABOVE && self.buf.len() + data.len() < self.buf.capacity() / 4 {
            self.buf.shrink_to((self.buf.len() + data.len()).max(SHRINK_ABOVE / 4));
        }
        self.buf.extend_from_slice(data);
    }

    /// The next complete item, or `None` when more bytes are needed (or the file ended).
    /// After an error every call returns the same error.
    pub fn next_item(&mut self) -> Result<Option<Item>, RdbError> {
        let out = self.step();
        if let Err(e) = &out {
            self.state = State::Failed(e.clone());
        }
        out
    }

    /// Checks that the input, now ended, held a whole file: an error unless EOF was read.
    pub fn finish(&self) -> Result<(), RdbError> {
        match &self.state {
            State::Done => Ok(()),
            State::Failed(e) => Err(e.clone()),
            State::Magic | State::Records => Err(RdbError::Truncated),
        }
    }

    /// Whether the EOF opcode and checksum were read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The file's version, once its header was read.
    pub fn version(&self) -> Option<u16> {
        (self.state != State::Magic).then_some(self.version)
    }

    /// Bytes of the file consumed so far (the offset of the next record), for error messages.
    pub fn offset(&self) -> u64 {
        self.consumed
    }

    /// Bytes fed and not consumed: after EOF, whatever followed the file in the input.
    pub fn remainder(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    fn step(&mut self) -> Result<Option<Item>, RdbError> {
        loop {
            match &self.state {
                State::Done => return Ok(None),
                State::Failed(e) => return Err(e.clone()),
                State::Magic => {
                    let Some(version) = magic(&self.buf[self.start..])? else { return Ok(None) };
                    self.version = version;
                    self.consume(MAGIC_LEN);
                    self.state = State::Records;
                }
                State::Records => {
                    let Some(len) = self.scan()? else { return Ok(None) };
                    let rec = &self.buf[self.start..self.start + len];
                    if rec[0] == OPCODE_EOF {
                        let computed = crc64(self.crc, &rec[..1]);
                        if let Ok(stored) = <[u8; 8]>::try_from(&rec[1..]) {
                            let stored = u64::from_le_bytes(stored);
                            // 0: saved with `rdbchecksum no`, as Redis's loader accepts.
                            if stored != 0 && stored != computed {
                                return Err(RdbError::Checksum { stored, computed });
                            }
                        }
                        self.consume(len);
                        self.state = State::Done;
                        return Ok(Some(Item::Eof));
                    }
                    let max = usize::try_from(self.max_string).unwrap_or(usize::MAX);
                    let item = decode(rec, &mut self.pending, max, self.version)?;
                    self.consume(len);
                    if item.is_some() {
                        return Ok(item);
                    }
                }
            }
        }
    }

    /// Walks the record at the buffer's start as far as the buffered bytes go, resuming where
    /// the last call stopped: its length once it is complete, `None` until then.
    fn scan(&mut self) -> Result<Option<usize>, RdbError> {
        let rec = &self.buf[self.start..];
        let Some(&ty) = rec.first() else { return Ok(None) };
        if super::TYPE_STREAMS.contains(&ty) {
            // Nested counts: walked from the start each time, by lengths, not bytes.
            let max = self.max_string;
            let rest = &rec[1..];
            let Some(k) = string_len(rest, max)? else { return Ok(None) };
            let body = super::stream::scan_len(&rest[k..], ty, &|b| string_len(b, max), &length)?;
            return Ok(body.map(|n| 1 + k + n));
        }
        let layout = layout(ty, self.version)?;
        let sc = &mut self.scan;
        sc.len = sc.len.max(1);
        loop {
            let rest = &rec[sc.len..];
            if sc.head < layout.head.len() {
                let Some(n) = part_len(layout.head[sc.head], rest, self.max_string)? else { return Ok(None) };
                sc.len += n;
                sc.head += 1;
                continue;
            }
            if layout.each.is_empty() {
                return Ok(Some(sc.len));
            }
            match sc.left {
                None => {
                    let Some((count, n)) = length(rest)? else { return Ok(None) };
                    sc.left = Some(count);
                    sc.len += n;
                }
                Some(0) => return Ok(Some(sc.len)),
                Some(left) => {
                    let Some(n) = part_len(layout.each[sc.each], rest, self.max_string)? else { return Ok(None) };
                    sc.len += n;
                    sc.each += 1;
                    if sc.each == layout.each.len() {
                        sc.each = 0;
                        sc.left = Some(left - 1);
                    }
                }
            }
        }
    }

    /// Moves past `n` bytes, adding them to the checksum.
    fn consume(&mut self, n: usize) {
        self.crc = crc64(self.crc, &self.buf[self.start..self.start + n]);
        self.start += n;
        self.consumed += n as u64;
        self.scan = Scan::default();
    }
}

#[derive(Debug, Clone, PartialEq)]
enum State {
    Magic,
    Records,
    Done,
    /// Errors are sticky: the stream cannot be resynchronised after one.
    Failed(RdbError),
}

#[derive(Debug, Default, Clone, Copy)]
struct Pending {
    expire_ms: Option<i64>,
    idle_s: Option<u64>,
    freq: Option<u8>,
}

/// The scan of the record at the buffer's start: bytes walked, parts of the head walked,
/// elements still to walk (once the count is read) and parts of the current element walked.
#[derive(Debug, Default, Clone, Copy)]
struct Scan {
    len: usize,
    head: usize,
    left: Option<u64>,
    each: usize,
}

/// Decodes a complete record other than EOF: an item, or `None` for the opcodes that only
/// qualify the next key (kept in `pending` until it comes).
fn decode(rec: &[u8], pending: &mut Pending, max_string: usize, version: u16) -> Result<Option<Item>, RdbError> {
    let mut r = Reader::new(&rec[1..], max_string);
    let item = match rec[0] {
        OPCODE_AUX => Some(Item::Aux { key: r.string()?, value: r.string()? }),
        OPCODE_SELECTDB => Some(Item::SelectDb(r.len()?)),
        OPCODE_RESIZEDB => Some(Item::ResizeDb { keys: r.len()?, expires: r.len()? }),
        OPCODE_SLOT_INFO => Some(Item::SlotInfo { slot: r.len()?, keys: r.len()?, expires: r.len()? }),
        OPCODE_FUNCTION2 => Some(Item::FunctionLib(r.string()?)),
        OPCODE_EXPIRETIME_MS => {
            pending.expire_ms = Some(i64::from_le_bytes(fixed(&mut r)?));
            None
        }
        OPCODE_EXPIRETIME => {
            pending.expire_ms = Some(i64::from(i32::from_le_bytes(fixed(&mut r)?)) * 1000);
            None
        }
        OPCODE_IDLE => {
            pending.idle_s = Some(r.len()?);
            None
        }
        OPCODE_FREQ => {
            pending.freq = Some(r.byte()?);
            None
        }
        ty => {
            let key = r.string()?;
            let value = read_object(&mut r, ty, version)?;
            let p = std::mem::take(pending);
            Some(Item::Entry { key, value, expire_ms: p.expire_ms, idle_s: p.idle_s, freq: p.freq })
        }
    };
    // The scan and the decoders agree on every layout; a difference is corrupt data.
    if r.remaining() != 0 {
        return Err(RdbError::BadFormat);
    }
    Ok(item)
}

fn fixed<const N: usize>(r: &mut Reader<'_>) -> Result<[u8; N], RdbError> {
    r.take(N)?.try_into().map_err(|_| RdbError::BadFormat)
}

/// The version in the header at the start of `b`, `None` while it is incomplete. Garbage is
/// refused as soon as its first bytes show it, so a wrong stream does not wait for more.
fn magic(b: &[u8]) -> Result<Option<u16>, RdbError> {
    let head = &b[..b.len().min(MAGIC_LEN)];
    let (name, digits, versions): (&[u8], usize, _) = if head.starts_with(b"REDIS") || b"REDIS".starts_with(head) {
        (b"REDIS", 4, 1..=REDIS_MAX_VERSION)
    } else if head.starts_with(b"VALKEY") || b"VALKEY".starts_with(head) {
        (b"VALKEY", 3, 80..=81)
    } else {
        return Err(RdbError::BadMagic);
    };
    let text = &head[name.len().min(head.len())..];
    if !text.iter().all(u8::is_ascii_digit) {
        return Err(RdbError::BadMagic);
    }
    if text.len() < digits {
        return Ok(None);
    }
    let version = text.iter().fold(0u16, |v, d| v * 10 + u16::from(d - b'0'));
    if !versions.contains(&version) {
        return Err(RdbError::UnsupportedVersion(version));
    }
    Ok(Some(version))
}

/// One piece of a record's layout.
#[derive(Debug, Clone, Copy)]
enum Part {
    /// An RDB length.
    Len,
    /// An RDB string in any encoding.
    Str,
    /// Raw bytes.
    Bytes(usize),
    /// A score as `rdbSaveDoubleValue` writes it: a length byte (253–255 for NaN and the
    /// infinities) and that many ASCII bytes.
    AsciiDouble,
}

/// A record's layout after its type byte: the `head` parts, then, when `each` is not empty,
/// a count and that many elements of `each`'s parts.
struct Layout {
    head: &'static [Part],
    each: &'static [Part],
}

fn layout(ty: u8, version: u16) -> Result<Layout, RdbError> {
    use Part::{AsciiDouble, Bytes, Len, Str};
    let single = |head| Ok(Layout { head, each: &[] });
    let many = |each| Ok(Layout { head: &[Str], each });
    match ty {
        OPCODE_AUX => single(&[Str, Str]),
        OPCODE_RESIZEDB => single(&[Len, Len]),
        OPCODE_SELECTDB | OPCODE_IDLE => single(&[Len]),
        OPCODE_SLOT_INFO => single(&[Len, Len, Len]),
        OPCODE_EXPIRETIME_MS => single(&[Bytes(8)]),
        OPCODE_EXPIRETIME => single(&[Bytes(4)]),
        OPCODE_FREQ => single(&[Bytes(1)]),
        OPCODE_FUNCTION2 => single(&[Str]),
        // The checksum came with version 5.
        OPCODE_EOF if version >= 5 => single(&[Bytes(8)]),
        OPCODE_EOF => single(&[]),
        OPCODE_MODULE_AUX => Err(RdbError::ModuleAux),
        OPCODE_FUNCTION_PRE_GA => Err(RdbError::PreGaFunctions),
        // The key, then one string or blob.
        TYPE_STRING | TYPE_SET_INTSET | TYPE_SET_LISTPACK | TYPE_HASH_LISTPACK | TYPE_ZSET_LISTPACK
        | TYPE_LIST_ZIPLIST | TYPE_ZSET_ZIPLIST | TYPE_HASH_ZIPLIST | TYPE_HASH_ZIPMAP => single(&[Str, Str]),
        // The key, then a count of elements.
        TYPE_LIST | TYPE_SET | TYPE_LIST_QUICKLIST => many(&[Str]),
        TYPE_HASH => many(&[Str, Str]),
        TYPE_ZSET => many(&[Str, AsciiDouble]),
        TYPE_ZSET_2 => many(&[Str, Bytes(8)]),
        TYPE_LIST_QUICKLIST_2 => many(&[Len, Str]),
        // Hashes with field TTLs (Redis 7.4): the key, the earliest time for the GA forms,
        // then a listpack blob or a count of TTL, field, value records.
        hash_ttl::TYPE_HASH_LISTPACK_EX => single(&[Str, Bytes(8), Str]),
        hash_ttl::TYPE_HASH_LISTPACK_EX_PRE_GA => single(&[Str, Str]),
        hash_ttl::TYPE_HASH_METADATA => Ok(Layout { head: &[Str, Bytes(8)], each: &[Len, Str, Str] }),
        // Its release candidates' table form: absolute times, no earliest time. Only in a
        // Redis 7.4 file: Valkey 9 numbers its own hash encoding 22.
        hash_ttl::TYPE_HASH_METADATA_PRE_GA if version == 12 => many(&[Len, Str, Str]),
        other => Err(RdbError::UnsupportedType(other)),
    }
}

/// The size of `part` at the start of `b`, `None` while `b` holds only part of it.
fn part_len(part: Part, b: &[u8], max_string: u64) -> Result<Option<usize>, RdbError> {
    let whole = |n: usize| Ok((b.len() >= n).then_some(n));
    match part {
        Part::Bytes(n) => whole(n),
        Part::AsciiDouble => match b.first() {
            None => Ok(None),
            Some(&n) if n >= 253 => whole(1),
            Some(&n) => whole(1 + usize::from(n)),
        },
        Part::Len => Ok(length(b)?.map(|(_, n)| n)),
        Part::Str => string_len(b, max_string),
    }
}

/// The size of the string at the start of `b`, its declared lengths checked against
/// `max_string` before any of its bytes are waited for.
fn string_len(b: &[u8], max_string: u64) -> Result<Option<usize>, RdbError> {
    let Some((header, mut n)) = header(b)? else { return Ok(None) };
    let body = match header {
        Header::Len(len) => within(len, max_string)?,
        Header::Special(0) => 1,
        Header::Special(1) => 2,
        Header::Special(2) => 4,
        Header::Special(3) => {
            // LZF: compressed length, uncompressed length, compressed bytes.
            let Some((clen, a)) = length(&b[n..])? else { return Ok(None) };
            let Some((len, c)) = length(&b[n + a..])? else { return Ok(None) };
            within(len, max_string)?;
            n += a + c;
            within(clen, max_string)?
        }
        Header::Special(_) => return Err(RdbError::BadFormat),
    };
    let total = usize::try_from(body).ok().and_then(|body| body.checked_add(n)).ok_or(RdbError::BadFormat)?;
    Ok((b.len() >= total).then_some(total))
}

fn within(len: u64, max: u64) -> Result<u64, RdbError> {
    if len > max {
        return Err(RdbError::TooLong { len, max });
    }
    Ok(len)
}

/// A length (not a string's special encoding) at the start of `b`, and its size.
fn length(b: &[u8]) -> Result<Option<(u64, usize)>, RdbError> {
    match header(b)? {
        None => Ok(None),
        Some((Header::Len(len), n)) => Ok(Some((len, n))),
        Some((Header::Special(_), _)) => Err(RdbError::BadFormat),
    }
}

enum Header {
    Len(u64),
    /// `11xxxxxx`: a string in a special encoding (integer or LZF).
    Special(u8),
}

/// The length header at the start of `b` and its size (1, 2, 5 or 9 bytes).
fn header(b: &[u8]) -> Result<Option<(Header, usize)>, RdbError> {
    let Some(&first) = b.first() else { return Ok(None) };
    let be = |n: usize| -> Option<u64> { b.get(1..1 + n).map(|s| s.iter().fold(0u64, |v, &x| v << 8 | u64::from(x))) };
    Ok(match first >> 6 {
        0 => Some((Header::Len(u64::from(first & 0x3F)), 1)),
        1 => b.get(1).map(|&low| (Header::Len(u64::from(first & 0x3F) << 8 | u64::from(low)), 2)),
        2 if first == 0x80 => be(4).map(|v| (Header::Len(v), 5)),
        2 if first == 0x81 => be(8).map(|v| (Header::Len(v), 9)),
        2 => return Err(RdbError::BadFormat),
        _ => Some((Header::Special(first & 0x3F), 1)),
    })
}

/// `REDIS0011` or `VALKEY080`.
const MAGIC_LEN: usize = 9;

/// Buffer capacity above which an idle buffer is shrunk.
const SHRINK_ABOVE: usize = 4 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdb::fixture::{self, REDIS_LIST_FILE, REDIS_STRING_FILE, unhex};
    use crate::rdb::{AuxValue, RdbWriter, snapshot, write_len, write_string};
    use crate::types::listpack::Listpack;

    /// Feeds `file` in pieces of the sizes `sizes` yields (cycling), collecting every item.
    fn read_in(file: &[u8], mut sizes: impl FnMut() -> usize) -> Result<Vec<Item>, RdbError> {
        let mut r = RdbReader::new(1 << 20);
        let mut items = Vec::new();
        let mut rest = file;
        while !rest.is_empty() {
            let (piece, tail) = rest.split_at(sizes().clamp(1, rest.len()));
            rest = tail;
            r.feed(piece);
            while let Some(item) = r.next_item()? {
                items.push(item);
            }
        }
        r.finish()?;
        Ok(items)
    }

    fn read(file: &[u8]) -> Result<Vec<Item>, RdbError> {
        read_in(file, || usize::MAX)
    }

    fn sample_file() -> Vec<u8> {
        let t = fixture::sample();
        let mut file = Vec::new();
        snapshot(&t.ks, &[("redis-ver", AuxValue::Str(b"7.2.4"))], |c| {
            file.extend_from_slice(c);
            Ok::<(), ()>(())
        })
        .unwrap();
        file
    }

    /// A file of version `version` holding `body` after the header, ended with EOF and a
    /// correct checksum.
    fn file(body: &[u8]) -> Vec<u8> {
        let mut f = b"REDIS0011".to_vec();
        f.extend_from_slice(body);
        f.push(OPCODE_EOF);
        let crc = crc64(0, &f);
        f.extend_from_slice(&crc.to_le_bytes());
        f
    }

    fn entry(key: &[u8], value: &[u8]) -> Item {
        Item::Entry { key: key.to_vec(), value: Loaded::Str(value.to_vec()), expire_ms: None, idle_s: None, freq: None }
    }

    fn list_listpack(items: &[&[u8]]) -> Listpack {
        let mut lp = Listpack::new();
        items.iter().for_each(|i| lp.push_back(i));
        lp
    }

    #[test]
    fn reads_files_redis_7_wrote() {
        let items = read(&unhex(REDIS_STRING_FILE)).unwrap();
        assert_eq!(items[0], Item::Aux { key: b"redis-ver".to_vec(), value: b"7.0.15".to_vec() });
        assert_eq!(items[1], Item::Aux { key: b"redis-bits".to_vec(), value: b"64".to_vec() });
        assert_eq!(
            items[5..],
            [Item::SelectDb(0), Item::ResizeDb { keys: 1, expires: 0 }, entry(b"k", b"v"), Item::Eof]
        );
        let items = read(&unhex(REDIS_LIST_FILE)).unwrap();
        assert_eq!(
            items[7],
            Item::Entry {
                key: b"l".to_vec(),
                // Redis 7's one-node quicklist: its listpack, kept.
                value: Loaded::ListListpack(list_listpack(&[b"a", b"1"])),
                expire_ms: Some(4_102_444_800_000),
                idle_s: None,
                freq: None,
            }
        );
    }

    #[test]
    fn any_split_of_the_input_reads_the_same() {
        let file = sample_file();
        let whole = read(&file).unwrap();
        assert_eq!(read_in(&file, || 1).unwrap(), whole, "one byte at a time");
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut random = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            // Mostly small pieces, now and then a big one.
            if seed.is_multiple_of(8) { (seed >> 8) as usize % 70_000 } else { (seed >> 8) as usize % 300 }
        };
        for _ in 0..4 {
            assert_eq!(read_in(&file, &mut random).unwrap(), whole, "random pieces");
        }
    }

    #[test]
    fn every_truncation_needs_more_and_ends_truncated() {
        // Fed one byte at a time, the reader is at each step in the state of an input cut at
        // that offset: every prefix must ask for more (or give items), never fail or panic.
        let file = sample_file();
        let mut r = RdbReader::new(1 << 20);
        for (i, b) in file.iter().enumerate() {
            assert_eq!(r.finish(), Err(RdbError::Truncated), "cut at {i}");
            r.feed(std::slice::from_ref(b));
            while r.next_item().unwrap().is_some() {}
        }
        assert_eq!(r.finish(), Ok(()));
        // And a fresh reader per cut, on a small file.
        let small = unhex(REDIS_LIST_FILE);
        for cut in 0..small.len() {
            let mut r = RdbReader::new(1 << 20);
            r.feed(&small[..cut]);
            while r.next_item().unwrap().is_some() {}
            assert_eq!(r.finish(), Err(RdbError::Truncated), "cut at {cut}");
        }
    }

    #[test]
    fn corruption_is_caught_by_the_checksum() {
        let good = unhex(REDIS_STRING_FILE);
        let mut bad = good.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(matches!(read(&bad), Err(RdbError::Checksum { .. })));
        // The value "v" of key "k" changed to "w": it decodes, but the sum is wrong.
        let at = good.len() - 10;
        assert_eq!(good[at], b'v');
        let mut bad = good.clone();
        bad[at] = b'w';
        assert!(matches!(read(&bad), Err(RdbError::Checksum { .. })));
        // A zero checksum means the writer had checksums off (`rdbchecksum no`).
        let n = bad.len();
        bad[n - 8..].fill(0);
        assert_eq!(read(&bad).unwrap()[7], entry(b"k", b"w"));
        // Errors are sticky.
        let mut r = RdbReader::new(100);
        r.feed(b"RUBBISH!!");
        assert_eq!(r.next_item(), Err(RdbError::BadMagic));
        r.feed(b"REDIS0011");
        assert_eq!(r.next_item(), Err(RdbError::BadMagic));
        assert_eq!(r.finish(), Err(RdbError::BadMagic));
    }

    #[test]
    fn declared_lengths_are_checked_before_waiting_for_bytes() {
        let limit = 1 << 20;
        let cases: [(&[u8], u64); 4] = [
            // A key of 2^62 bytes, 2^32 - 1 bytes, and a value over the limit by one.
            (&[0, 0x81, 0x40, 0, 0, 0, 0, 0, 0, 0], 1 << 62),
            (&[0, 0x80, 0xFF, 0xFF, 0xFF, 0xFF], u64::from(u32::MAX)),
            (&[0, 1, b'k', 0x80, 0, 0x10, 0, 1], limit + 1),
            // An LZF string claiming 2^40 bytes once decompressed.
            (&[0, 1, b'k', 0xC3, 5, 0x81, 0, 0, 1, 0, 0, 0, 0, 0], 1 << 40),
        ];
        for (body, len) in cases {
            let mut r = RdbReader::new(limit);
            r.feed(b"REDIS0011");
            r.feed(body);
            assert_eq!(r.next_item(), Err(RdbError::TooLong { len, max: limit }), "{body:?}");
        }
        // A set claiming 2^60 members, with three: more is needed, and only what arrived is
        // held.
        let mut body = vec![2, 1, b's'];
        write_len(&mut body, 1 << 60);
        for m in [&b"a"[..], b"b", b"c"] {
            write_string(&mut body, m);
        }
        let mut r = RdbReader::new(limit);
        r.feed(b"REDIS0011");
        r.feed(&body);
        assert_eq!(r.next_item(), Ok(None));
        assert_eq!(r.remainder().len(), body.len());
        assert!(r.buf.capacity() < 1024);
        assert_eq!(r.finish(), Err(RdbError::Truncated));
    }

    #[test]
    fn opcodes_and_what_they_carry() {
        let mut body = Vec::new();
        // Valkey 8 cluster mode's slot info, then a function library.
        body.extend_from_slice(&[OPCODE_SLOT_INFO, 0x40 | 0x30, 0x39, 3, 1]);
        body.push(OPCODE_FUNCTION2);
        write_string(&mut body, b"#!lua name=lib\nredis.register_function('f', function() return 1 end)");
        // A key with an old-style expire in seconds, an idle time and an LFU counter.
        body.extend_from_slice(&[OPCODE_EXPIRETIME, 0x80, 0xF0, 0xFA, 0x02]);
        body.extend_from_slice(&[OPCODE_IDLE, 0x40 | 1, 0]);
        body.extend_from_slice(&[OPCODE_FREQ, 7, 0, 1, b'k', 1, b'v']);
        // The next key gets none of them.
        body.extend_from_slice(&[0, 1, b'j', 0xC0, 0xFF]);
        // Two SELECTDBs in a row are fine.
        body.extend_from_slice(&[OPCODE_SELECTDB, 3, OPCODE_SELECTDB, 0x40 | 1, 0]);
        let items = read(&file(&body)).unwrap();
        assert_eq!(
            items,
            [
                Item::SlotInfo { slot: 12345, keys: 3, expires: 1 },
                Item::FunctionLib(b"#!lua name=lib\nredis.register_function('f', function() return 1 end)".to_vec()),
                Item::Entry {
                    key: b"k".to_vec(),
                    value: Loaded::Str(b"v".to_vec()),
                    expire_ms: Some(50_000_000_000),
                    idle_s: Some(256),
                    freq: Some(7),
                },
                entry(b"j", b"-1"),
                Item::SelectDb(3),
                Item::SelectDb(256),
                Item::Eof,
            ]
        );
    }

    #[test]
    fn what_hotkv_cannot_hold_is_refused_clearly() {
        let refused = |body: &[u8]| read(&file(body)).unwrap_err();
        assert_eq!(refused(&[OPCODE_MODULE_AUX, 1, 2]), RdbError::ModuleAux);
        assert_eq!(refused(&[OPCODE_MODULE_AUX, 1, 2]).to_string(), "module aux data not supported");
        assert_eq!(refused(&[OPCODE_FUNCTION_PRE_GA, 1]), RdbError::PreGaFunctions);
        for ty in [6, 7, 8, 22, 100, 242, 243] {
            assert_eq!(refused(&[ty, 1, b'k', 0]), RdbError::UnsupportedType(ty), "type {ty}");
        }
        // Corrupt objects are refused as RESTORE refuses them.
        assert_eq!(refused(&[OPCODE_SELECTDB, 0xC0, 1]), RdbError::BadFormat);
        assert_eq!(refused(&[2, 1, b's', 0]), RdbError::BadFormat, "an empty set");
        assert_eq!(refused(&[11, 1, b's', 3, 1, 2, 3]), RdbError::BadFormat, "a broken intset");
    }

    #[test]
    fn versions_and_magic() {
        // Version 4: no checksum after EOF.
        let v4 = [&b"REDIS0004"[..], &[OPCODE_SELECTDB, 0, 0, 1, b'k', 1, b'v', OPCODE_EOF]].concat();
        assert_eq!(read(&v4).unwrap(), [Item::SelectDb(0), entry(b"k", b"v"), Item::Eof]);
        // Valkey 9's header.
        let mut valkey = file(&[0, 1, b'k', 1, b'v']);
        valkey.splice(..9, *b"VALKEY080");
        let n = valkey.len();
        let crc = crc64(0, &valkey[..n - 8]);
        valkey[n - 8..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(read(&valkey).unwrap(), [entry(b"k", b"v"), Item::Eof]);
        let mut r = RdbReader::new(10);
        r.feed(&valkey[..9]);
        assert_eq!(r.version(), None);
        r.next_item().unwrap();
        assert_eq!(r.version(), Some(80));
        for (magic, err) in [
            (&b"REDIS0013"[..], RdbError::UnsupportedVersion(13)),
            (b"REDIS0000", RdbError::UnsupportedVersion(0)),
            (b"VALKEY011", RdbError::UnsupportedVersion(11)),
            (b"REDIS001x", RdbError::BadMagic),
            // Refused from its first byte, without waiting for nine.
            (b"N", RdbError::BadMagic),
            (b"*3\r\n", RdbError::BadMagic),
        ] {
            let mut r = RdbReader::new(10);
            r.feed(magic);
            assert_eq!(r.next_item(), Err(err), "{:?}", String::from_utf8_lossy(magic));
        }
    }

    #[test]
    fn redis_7_4_files_are_read_with_their_hash_types() {
        // A version 12 header, a string, then a hash of the release candidates' type 22 (a
        // count, then absolute TTL, field, value records), read whole and byte by byte.
        let mut body = vec![0, 1, b'k', 1, b'v', hash_ttl::TYPE_HASH_METADATA_PRE_GA, 1, b'h'];
        write_len(&mut body, 2);
        for (ttl, f) in [(0u64, b"f"), (1_700_000_000_000, b"g")] {
            write_len(&mut body, ttl);
            write_string(&mut body, f);
            write_string(&mut body, b"1");
        }
        let mut v12 = file(&body);
        v12.splice(..9, *b"REDIS0012");
        let n = v12.len();
        let crc = crc64(0, &v12[..n - 8]);
        v12[n - 8..].copy_from_slice(&crc.to_le_bytes());
        for items in [read(&v12).unwrap(), read_in(&v12, || 1).unwrap()] {
            assert_eq!(items.len(), 3);
            assert_eq!(items[0], entry(b"k", b"v"));
            let Item::Entry { key, value: Loaded::Object(crate::object::Object::Hash(h)), .. } = &items[1] else {
                panic!("{:?}", items[1])
            };
            assert_eq!(key, b"h");
            assert_eq!((h.expire_of(b"f"), h.expire_of(b"g")), (None, Some(1_700_000_000_000)));
        }
        // The same record in a version 11 file is a type hotkv does not know.
        let v11 = file(&body);
        assert_eq!(read(&v11), Err(RdbError::UnsupportedType(22)));
    }

    #[test]
    fn bytes_after_the_file_are_left_for_the_caller() {
        let mut input = unhex(REDIS_STRING_FILE);
        input.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
        let mut r = RdbReader::new(10);
        r.feed(&input);
        while r.next_item().unwrap().is_some() {}
        assert!(r.is_done());
        assert_eq!(r.remainder(), b"*1\r\n$4\r\nPING\r\n");
        assert_eq!(r.offset() as usize, input.len() - 14);
    }

    #[test]
    fn a_writer_file_with_every_opcode_it_writes_reads_back() {
        let mut out = Vec::new();
        let mut w = RdbWriter::new(&mut out, &[("repl-offset", AuxValue::Int(-3))]);
        w.aux(&mut out, "late", AuxValue::Str(b"x"));
        w.select_db(&mut out, 70_000);
        w.resize_db(&mut out, 1 << 40, 0);
        w.entry(&mut out, b"k", crate::entry::ValueRef::Str(b"v"), Some(-1));
        w.finish(&mut out);
        assert_eq!(
            read(&out).unwrap(),
            [
                Item::Aux { key: b"repl-offset".to_vec(), value: b"-3".to_vec() },
                Item::Aux { key: b"late".to_vec(), value: b"x".to_vec() },
                Item::SelectDb(70_000),
                Item::ResizeDb { keys: 1 << 40, expires: 0 },
                Item::Entry {
                    key: b"k".to_vec(),
                    value: Loaded::Str(b"v".to_vec()),
                    expire_ms: Some(-1),
                    idle_s: None,
                    freq: None
                },
                Item::Eof,
            ]
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_garbage(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
            header in proptest::bool::ANY,
            split in 0usize..512,
        ) {
            let input = if header { [&b"REDIS0011"[..], &data].concat() } else { data };
            let mut r = RdbReader::new(1 << 16);
            let (a, b) = input.split_at(split.min(input.len()));
            for piece in [a, b] {
                r.feed(piece);
                while let Ok(Some(_)) = r.next_item() {}
            }
            let _ = r.finish();
        }

        #[test]
        fn never_panics_on_mutated_files(
            edits in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 1..6),
        ) {
            // Mutations of a real file, re-signed so the decoders (not the checksum) judge.
            let mut f = unhex(REDIS_LIST_FILE);
            for (at, b) in edits {
                let n = f.len() - 8;
                f[at % n] = b;
            }
            let n = f.len() - 8;
            let crc = crc64(0, &f[..n]);
            f[n..].copy_from_slice(&crc.to_le_bytes());
            let _ = read_in(&f, || 5);
        }
    }
}
