//! The write stream: what each write did, recorded while its slot locks are held, for
//! replicas now and the append-only file later.
//!
//! A call collects its effects in an [`Effects`] buffer (RESP commands, each tagged with its
//! database) and hands them to the [`WriteSink`] in one piece before it releases its locks.
//! Two calls that touch a common slot therefore reach the sink in the order they ran, which
//! is the order a replica must apply them in; calls on disjoint slots may reach it in either
//! order, and either is a valid history.
//!
//! Effects are deterministic: a handler whose arguments would not give the same result on a
//! replica (relative TTLs, random pops, floats) records what it did instead of what it was
//! asked (see [`Effects::replace`]). A call that changed nothing records nothing.

/// Where the write stream goes. The replication crate implements it; the server wires it in.
pub trait WriteSink: Send + Sync {
    /// Whether anything consumes the stream now (a replica, a backlog, the AOF). When false,
    /// calls skip building their effects altogether.
    fn active(&self) -> bool;

    /// Appends the effects of one call. Called with the call's slot locks still held; it must
    /// not take a slot lock and should be short.
    fn append(&self, effects: &Effects);

    /// Appends one call whose only effect is its own request, `resp` (canonical RESP, as it
    /// arrived), in database `db`: most writes. Same contract as [`WriteSink::append`]. Sinks
    /// on the write path implement it to take the bytes where they lie: staging them in an
    /// [`Effects`] first was a copy and its bookkeeping on every SET.
    fn append_resp(&self, db: usize, resp: &[u8]) {
        let mut e = Effects::default();
        e.begin(true);
        e.push_resp(db, resp);
        self.append(&e);
    }
}

/// A sink that consumes nothing: a node with no replica, no backlog and no AOF.
pub struct NoSink;

impl WriteSink for NoSink {
    fn active(&self) -> bool {
        false
    }
    fn append(&self, _effects: &Effects) {}
    fn append_resp(&self, _db: usize, _resp: &[u8]) {}
}

/// The effects of one call: RESP-encoded commands, each in a database. Reused from call to
/// call by its connection, so recording allocates nothing once it is warm.
#[derive(Default, Debug, Clone)]
pub struct Effects {
    /// Whether this call records (the sink was active when it started).
    on: bool,
    /// The encoded commands.
    buf: Vec<u8>,
    /// Per command: its database and where it ends in `buf`.
    cmds: Vec<(u32, u32)>,
    /// Set when a handler recorded its own effects for the call's arguments: the call's
    /// argument vector is then not recorded.
    replaced: bool,
    /// Per command, which consumers get it ([`target`] bits), once a script limited one with
    /// `redis.set_repl`; empty while every command goes everywhere.
    targets: Vec<u8>,
}

/// Consumers of the write stream a command may be limited to (Valkey's `PROPAGATE_*`).
pub mod target {
    /// The append-only file.
    pub const AOF: u8 = 1;
    /// Replicas.
    pub const REPLICAS: u8 = 2;
    /// Both.
    pub const ALL: u8 = AOF | REPLICAS;
}

impl Effects {
    /// Starts recording a call, if the stream has a consumer.
    pub fn begin(&mut self, on: bool) {
        self.on = on;
        self.buf.clear();
        self.cmds.clear();
        self.replaced = false;
        self.targets.clear();
    }

    /// Whether this call records its effects.
    pub fn on(&self) -> bool {
        self.on
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }

    /// Number of recorded commands.
    pub fn len(&self) -> usize {
        self.cmds.len()
    }

    /// Records one command in `db`.
    pub fn push<A: AsRef<[u8]>>(&mut self, db: usize, argv: &[A]) {
        if !self.on {
            return;
        }
        write_command(&mut self.buf, argv.iter().map(AsRef::as_ref), argv.len());
        self.cmds.push((db as u32, self.buf.len() as u32));
    }

    /// Records one command already in RESP form (see `Args::resp_frame`).
    pub fn push_resp(&mut self, db: usize, resp: &[u8]) {
        if !self.on {
            return;
        }
        self.buf.extend_from_slice(resp);
        self.cmds.push((db as u32, self.buf.len() as u32));
    }

    /// Records one command given as parts.
    pub fn push_parts<'p>(&mut self, db: usize, parts: impl ExactSizeIterator<Item = &'p [u8]>) {
        if !self.on {
            return;
        }
        let n = parts.len();
        write_command(&mut self.buf, parts, n);
        self.cmds.push((db as u32, self.buf.len() as u32));
    }

    /// Records `argv` as what the call did, in place of its own arguments: handlers call it
    /// when their arguments would not replay to the same result.
    pub fn replace<A: AsRef<[u8]>>(&mut self, db: usize, argv: &[A]) {
        self.replaced = true;
        self.push(db, argv);
    }

    /// Says the call's own arguments must not be recorded, with nothing in their place (a
    /// handler that recorded its effects command by command, or whose write was a no-op).
    pub fn suppress(&mut self) {
        self.replaced = true;
    }

    /// Starts the next call of a transaction: what is recorded stays, and the new call's own
    /// arguments are recorded unless its handler replaces them.
    pub fn next_call(&mut self) {
        self.replaced = false;
    }

    /// Whether a handler replaced the call's arguments.
    pub fn replaced(&self) -> bool {
        self.replaced
    }

    /// The recorded commands: database and RESP bytes, in order.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &[u8])> + '_ {
        let mut start = 0usize;
        self.cmds.iter().map(move |&(db, end)| {
            let s = &self.buf[start..end as usize];
            start = end as usize;
            (db as usize, s)
        })
    }

    /// Drops the commands recorded after the first `n` (a call that failed halfway).
    pub fn truncate(&mut self, n: usize) {
        if n < self.cmds.len() {
            let end = if n == 0 { 0 } else { self.cmds[n - 1].1 as usize };
            self.cmds.truncate(n);
            self.buf.truncate(end);
            self.targets.truncate(n);
        }
    }

    /// Sends the commands recorded after the first `n` only to the consumers in `to`
    /// ([`target`] bits; none drops them): a script's `redis.set_repl`.
    pub fn limit_from(&mut self, n: usize, to: u8) {
        if to & target::ALL == 0 {
            self.truncate(n);
            return;
        }
        if to & target::ALL == target::ALL || n >= self.cmds.len() {
            return;
        }
        self.targets.resize(self.cmds.len(), target::ALL);
        for t in &mut self.targets[n..] {
            *t = to & target::ALL;
        }
    }

    /// What consumer `to` gets, when some commands are limited to others: a copy without
    /// them (and without a MULTI/EXEC left with nothing inside). `None` when every command
    /// goes everywhere, which is the rule.
    #[inline]
    pub fn only_for(&self, to: u8) -> Option<Effects> {
        // Inline and first: every write asks, and only a script's set_repl fills `targets`.
        if self.targets.is_empty() {
            return None;
        }
        self.only_for_limited(to)
    }

    #[cold]
    fn only_for_limited(&self, to: u8) -> Option<Effects> {
        if self.targets.iter().all(|&t| t & to != 0) {
            return None;
        }
        let mut out = Effects { on: true, ..Effects::default() };
        for (i, (db, bytes)) in self.iter().enumerate() {
            if self.targets.get(i).is_none_or(|&t| t & to != 0) {
                out.buf.extend_from_slice(bytes);
                out.cmds.push((db as u32, out.buf.len() as u32));
            }
        }
        let is = |e: &Effects, i: usize, name: &[u8]| e.iter().nth(i).is_some_and(|(_, b)| b.ends_with(name));
        if out.cmds.len() == 2 && is(&out, 0, b"MULTI\r\n") && is(&out, 1, b"EXEC\r\n") {
            out.buf.clear();
            out.cmds.clear();
        }
        Some(out)
    }

    /// Moves `other`'s commands to the end of this buffer (EXEC gathers its calls).
    pub fn append(&mut self, other: &Effects) {
        let base = self.buf.len() as u32;
        if !other.targets.is_empty() || !self.targets.is_empty() {
            self.targets.resize(self.cmds.len(), target::ALL);
            self.targets.extend((0..other.cmds.len()).map(|i| other.targets.get(i).copied().unwrap_or(target::ALL)));
        }
        self.buf.extend_from_slice(&other.buf);
        self.cmds.extend(other.cmds.iter().map(|&(db, end)| (db, base + end)));
    }

    /// Wraps the recorded commands in MULTI ... EXEC when there are several, so a replica
    /// applies them as one unit (a transaction, or a command that writes several effects).
    /// MULTI and EXEC belong to no database ([`NO_DB`]): a SELECT the commands need goes
    /// inside the transaction, where Valkey writes it.
    #[inline]
    pub fn wrap_multi(&mut self) {
        // Inline and first: nearly every call recorded one command.
        if self.cmds.len() >= 2 {
            self.wrap_several();
        }
    }

    #[cold]
    fn wrap_several(&mut self) {
        let first_db = NO_DB as u32;
        let mut wrapped = Vec::with_capacity(self.buf.len() + 32);
        write_command(&mut wrapped, [&b"MULTI"[..]].into_iter(), 1);
        let shift = wrapped.len() as u32;
        wrapped.extend_from_slice(&self.buf);
        let last_db = NO_DB as u32;
        let mut cmds = Vec::with_capacity(self.cmds.len() + 2);
        cmds.push((first_db, shift));
        cmds.extend(self.cmds.iter().map(|&(db, end)| (db, end + shift)));
        write_command(&mut wrapped, [&b"EXEC"[..]].into_iter(), 1);
        cmds.push((last_db, wrapped.len() as u32));
        self.buf = wrapped;
        self.cmds = cmds;
        if !self.targets.is_empty() {
            self.targets.insert(0, target::ALL);
            self.targets.push(target::ALL);
        }
    }
}

/// The database of a command that needs none selected (MULTI, EXEC): sinks write no SELECT
/// for it.
pub const NO_DB: usize = u32::MAX as usize;

/// The command that carries a deletion the server made itself, as Valkey's
/// `propagateDeletion`: UNLINK when the matching `lazyfree-lazy-*` setting is on (Valkey 8's
/// default), DEL otherwise. A replica applies either the same way; tools that read the stream
/// (and Valkey's tests) see the difference.
pub fn del_verb(lazy: bool) -> &'static [u8] {
    if lazy { b"UNLINK" } else { b"DEL" }
}

/// Records the deletion of `keys` of `db` by the server itself (active expiry, eviction), one
/// command per key as Valkey sends them ([`del_verb`] of `lazy`). Call it with the keys' slot
/// lock held.
pub fn record_del<K: AsRef<[u8]>>(ks: &crate::Keyspace, db: usize, keys: &[K], lazy: bool) {
    let sink = ks.sink();
    if keys.is_empty() || !sink.active() {
        return;
    }
    let mut e = Effects::default();
    e.begin(true);
    for k in keys {
        e.push(db, &[del_verb(lazy), k.as_ref()]);
    }
    sink.append(&e);
}

/// Records the deletion of `fields` of the hash at `key` by the server itself (their TTL
/// passed), one HDEL per field as Redis 7.4 sends them. Call it with the key's slot lock held.
pub fn record_hdel<F: AsRef<[u8]>>(ks: &crate::Keyspace, db: usize, key: &[u8], fields: &[F]) {
    let sink = ks.sink();
    if fields.is_empty() || !sink.active() {
        return;
    }
    let mut e = Effects::default();
    e.begin(true);
    for f in fields {
        e.push(db, &[b"HDEL".as_slice(), key, f.as_ref()]);
    }
    sink.append(&e);
}

/// Writes `SELECT <db>` as a RESP command: what a consumer of the stream (a replica's link, the
/// append-only file) writes before a command whose database differs from the previous one's.
pub fn write_select(out: &mut Vec<u8>, db: usize) {
    let mut n = itoa::Buffer::new();
    write_command(out, [&b"SELECT"[..], n.format(db).as_bytes()].into_iter(), 2);
}

/// Writes `*<n>\r\n$<len>\r\n<arg>\r\n...`.
pub fn write_command<'p>(out: &mut Vec<u8>, parts: impl Iterator<Item = &'p [u8]>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
    for p in parts {
        out.push(b'$');
        out.extend_from_slice(itoa::Buffer::new().format(p.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn limited_commands_reach_only_their_consumers() {
        let mut e = Effects::default();
        e.begin(true);
        e.push(0, &["SET", "a", "1"]);
        e.push(0, &["SET", "b", "2"]);
        e.limit_from(1, 0);
        assert_eq!(e.len(), 1, "REPL_NONE drops the call's effects");
        e.push(0, &["SET", "c", "3"]);
        e.limit_from(1, target::AOF);
        e.push(0, &["SET", "d", "4"]);
        assert!(e.only_for(target::AOF).is_none(), "the AOF gets everything");
        e.wrap_multi();
        let repl = e.only_for(target::REPLICAS).expect("replicas miss c");
        let keys: Vec<String> = repl.iter().map(|(_, b)| String::from_utf8_lossy(b).into_owned()).collect();
        assert_eq!(keys.len(), 4, "{keys:?}");
        assert!(keys.iter().all(|k| !k.contains("\r\nc\r\n")), "{keys:?}");
        // Nothing left for a consumer but the MULTI/EXEC around it: nothing at all.
        let mut only = Effects::default();
        only.begin(true);
        only.push(0, &["SET", "x", "1"]);
        only.push(0, &["SET", "y", "1"]);
        only.limit_from(0, target::AOF);
        only.wrap_multi();
        assert!(only.only_for(target::REPLICAS).unwrap().is_empty());
    }

    use super::*;

    fn cmds(e: &Effects) -> Vec<(usize, String)> {
        e.iter().map(|(db, b)| (db, String::from_utf8_lossy(b).into_owned())).collect()
    }

    #[test]
    fn records_only_when_on() {
        let mut e = Effects::default();
        e.begin(false);
        e.push(0, &[b"SET".as_slice(), b"k", b"v"]);
        assert!(e.is_empty());
        e.begin(true);
        e.push(0, &[b"SET".as_slice(), b"k", b"v"]);
        e.push(3, &["DEL", "x"]);
        assert_eq!(
            cmds(&e),
            vec![(0, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n".into()), (3, "*2\r\n$3\r\nDEL\r\n$1\r\nx\r\n".into())]
        );
    }

    #[test]
    fn wrap_truncate_append() {
        let mut e = Effects::default();
        e.begin(true);
        e.push(0, &["DEL", "a"]);
        e.wrap_multi();
        assert_eq!(e.len(), 1, "one command is not wrapped");
        e.push(1, &["DEL", "b"]);
        e.wrap_multi();
        let c = cmds(&e);
        assert_eq!(c.len(), 4);
        assert_eq!(c[0], (NO_DB, "*1\r\n$5\r\nMULTI\r\n".into()), "SELECT goes inside the transaction");
        assert_eq!(c[2], (1, "*2\r\n$3\r\nDEL\r\n$1\r\nb\r\n".into()));
        assert_eq!(c[3], (NO_DB, "*1\r\n$4\r\nEXEC\r\n".into()));
        e.truncate(1);
        assert_eq!(cmds(&e), vec![(NO_DB, "*1\r\n$5\r\nMULTI\r\n".into())]);
        let mut f = Effects::default();
        f.begin(true);
        f.push(2, &["DEL", "z"]);
        e.append(&f);
        assert_eq!(cmds(&e)[1], (2, "*2\r\n$3\r\nDEL\r\n$1\r\nz\r\n".into()));
    }

    use crate::testkit::TestKit;

    /// Runs `argv` and returns what it recorded.
    fn run(t: &mut TestKit, argv: &[&str]) -> Vec<String> {
        t.record = true;
        t.stream.clear();
        t.run(argv);
        std::mem::take(&mut t.stream)
    }

    #[test]
    fn plain_writes_go_as_they_came_and_reads_and_no_ops_not_at_all() {
        let mut t = TestKit::default();
        assert_eq!(run(&mut t, &["SET", "k", "v"]), ["0: SET k v"]);
        assert_eq!(run(&mut t, &["GET", "k"]), Vec::<String>::new());
        assert_eq!(run(&mut t, &["DEL", "nokey"]), Vec::<String>::new());
        assert_eq!(run(&mut t, &["SET", "k", "w", "NX"]), Vec::<String>::new(), "NX that did nothing");
        assert_eq!(run(&mut t, &["INCR", "n"]), ["0: INCR n"]);
        t.run(&["SELECT", "2"]);
        assert_eq!(run(&mut t, &["RPUSH", "l", "a", "b"]), ["2: RPUSH l a b"]);
    }

    #[test]
    fn relative_times_become_absolute() {
        let mut t = TestKit::default();
        let at = t.now_ms + 10_000;
        assert_eq!(run(&mut t, &["SET", "k", "v", "EX", "10"]), [format!("0: SET k v PXAT {at}")]);
        // PXAT is already absolute: the command goes as sent, as Valkey leaves it.
        assert_eq!(
            run(&mut t, &["SET", "k", "v", "pxat", &at.to_string(), "GET"]),
            [format!("0: SET k v pxat {at} GET")]
        );
        assert_eq!(run(&mut t, &["SETEX", "k", "10", "v"]), [format!("0: SET k v PXAT {at}")]);
        assert_eq!(run(&mut t, &["PSETEX", "k", "10000", "v"]), [format!("0: SET k v PXAT {at}")]);
        assert_eq!(run(&mut t, &["EXPIRE", "k", "10"]), [format!("0: PEXPIREAT k {at}")]);
        assert_eq!(run(&mut t, &["EXPIREAT", "k", &(at / 1000).to_string()]), [format!("0: PEXPIREAT k {at}")]);
        assert_eq!(run(&mut t, &["GETEX", "k", "PX", "10000"]), [format!("0: PEXPIREAT k {at}")]);
        assert_eq!(run(&mut t, &["GETEX", "k", "PERSIST"]), ["0: PERSIST k"]);
        // A past time deletes, as UNLINK under Valkey 8's default lazyfree-lazy-expire yes.
        assert_eq!(run(&mut t, &["EXPIRE", "k", "-1"]), ["0: UNLINK k"]);
        t.run(&["SET", "k", "v"]);
        assert_eq!(run(&mut t, &["SET", "k", "v", "PXAT", "1"]), ["0: UNLINK k"]);
        t.cfg.lazy_expire = false;
        t.run(&["SET", "k", "v"]);
        assert_eq!(run(&mut t, &["GETEX", "k", "PXAT", "1"]), ["0: DEL k"]);
    }

    #[test]
    fn random_and_float_results_go_as_what_happened() {
        let mut t = TestKit::default();
        t.run(&["SADD", "s", "a"]);
        assert_eq!(run(&mut t, &["SPOP", "s"]), ["0: SREM s a"]);
        t.run(&["SADD", "s", "a", "b", "c"]);
        let popped = run(&mut t, &["SPOP", "s", "2"]);
        assert_eq!(popped.len(), 1);
        assert!(popped[0].starts_with("0: SREM s "), "{popped:?}");
        assert_eq!(run(&mut t, &["SPOP", "s", "5"]), ["0: UNLINK s"], "lazyfree-lazy-server-del yes");
        t.cfg.lazy_server_del = false;
        t.run(&["SADD", "s", "a"]);
        assert_eq!(run(&mut t, &["SPOP", "s", "5"]), ["0: DEL s"]);
        assert_eq!(run(&mut t, &["INCRBYFLOAT", "f", "1.5"]), ["0: SET f 1.5 KEEPTTL"]);
        assert_eq!(run(&mut t, &["HINCRBYFLOAT", "h", "x", "2.5"]), ["0: HSET h x 2.5"]);
        // Valkey's getsetCommand: GETSET goes as SET.
        assert_eq!(run(&mut t, &["GETSET", "f", "v"]), ["0: SET f v"]);
    }

    #[test]
    fn blocking_commands_go_as_their_non_blocking_forms() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "a", "b", "c"]);
        assert_eq!(run(&mut t, &["BLPOP", "nol", "l", "0"]), ["0: LPOP l 1"]);
        assert_eq!(run(&mut t, &["BRPOP", "l", "0"]), ["0: RPOP l 1"]);
        assert_eq!(run(&mut t, &["BLMOVE", "l", "m", "LEFT", "RIGHT", "0"]), ["0: LMOVE l m LEFT RIGHT"]);
        t.run(&["RPUSH", "l", "x", "y"]);
        assert_eq!(run(&mut t, &["BLMPOP", "0", "1", "l", "RIGHT", "COUNT", "5"]), ["0: RPOP l 2"]);
        t.run(&["ZADD", "z", "1", "a", "2", "b"]);
        assert_eq!(run(&mut t, &["BZPOPMIN", "z", "0"]), ["0: ZPOPMIN z 1"]);
        assert_eq!(run(&mut t, &["BZMPOP", "0", "1", "z", "MAX", "COUNT", "3"]), ["0: ZPOPMAX z 3"]);
        assert_eq!(run(&mut t, &["BLPOP", "l", "0"]), Vec::<String>::new(), "blocked: nothing yet");
        // Valkey's blmoveGenericCommand: BRPOPLPUSH goes as RPOPLPUSH, not as LMOVE.
        t.run(&["RPUSH", "l", "z"]);
        assert_eq!(run(&mut t, &["BRPOPLPUSH", "l", "m", "0"]), ["0: RPOPLPUSH l m"]);
    }

    #[test]
    fn lazy_expiry_goes_before_the_command_that_found_it() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v", "PX", "10"]);
        t.now_ms += 100;
        assert_eq!(run(&mut t, &["GET", "k"]), ["0: UNLINK k"]);
        t.run(&["SET", "k", "v", "PX", "10"]);
        t.now_ms += 100;
        t.cfg.lazy_expire = false;
        assert_eq!(
            run(&mut t, &["APPEND", "k", "x"]),
            [format!("{NO_DB}: MULTI"), "0: DEL k".into(), "0: APPEND k x".into(), format!("{NO_DB}: EXEC")]
        );
    }

    #[test]
    fn scan_and_randomkey_send_the_expired_keys_they_delete_unwrapped() {
        let mut t = TestKit::default();
        t.run(&["SET", "a", "v", "PX", "10"]);
        t.run(&["SET", "b", "v", "PX", "10"]);
        t.now_ms += 100;
        let mut got = Vec::new();
        let mut cursor = "0".to_string();
        t.record = true;
        loop {
            let reply = t.run(&["SCAN", &cursor, "COUNT", "1000"]);
            got.append(&mut t.stream);
            cursor = reply.split("\r\n").nth(2).unwrap_or("0").to_string();
            if cursor == "0" {
                break;
            }
        }
        got.sort();
        assert_eq!(got, ["0: UNLINK a", "0: UNLINK b"]);
        t.run(&["SET", "c", "v", "PX", "10"]);
        t.now_ms += 100;
        assert_eq!(run(&mut t, &["RANDOMKEY"]), ["0: UNLINK c"]);
    }

    #[test]
    fn restore_with_a_relative_ttl_goes_with_abs_ttl() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "hello"]);
        let reply = t.run_raw(&[b"DUMP".to_vec(), b"k".to_vec()]);
        let start = reply.iter().position(|&b| b == b'\n').unwrap() + 1;
        let payload = reply[start..reply.len() - 2].to_vec();
        t.record = true;
        t.stream.clear();
        t.run_bytes(&[b"RESTORE".to_vec(), b"k2".to_vec(), b"5000".to_vec(), payload.clone()]);
        let line = t.stream.pop().unwrap();
        let at = t.now_ms + 5000;
        assert!(line.starts_with(&format!("0: RESTORE k2 {at} ")) && line.ends_with(" ABSTTL"), "{line}");
    }

    #[test]
    fn flushes_are_recorded_even_when_empty() {
        let mut t = TestKit::default();
        assert_eq!(run(&mut t, &["FLUSHALL"]), ["0: FLUSHALL"]);
        t.run(&["SELECT", "3"]);
        assert_eq!(run(&mut t, &["FLUSHDB", "ASYNC"]), ["3: FLUSHDB ASYNC"]);
        t.run(&["SET", "a", "1"]);
        assert_eq!(run(&mut t, &["SWAPDB", "3", "4"]), ["3: SWAPDB 3 4"]);
        assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
    }

    #[test]
    fn active_expiry_records_its_deletes() {
        let mut t = TestKit::default();
        t.run(&["SET", "a", "1", "PX", "10"]);
        t.run(&["SET", "b", "1"]);
        t.now_ms += 100;
        t.sink.set_active(true);
        let mut cursor = crate::expire::ExpireCursor::default();
        let cycle = crate::expire::Cycle {
            kind: crate::expire::CycleKind::Slow,
            now_ms: t.now_ms,
            deadline: std::time::Instant::now() + std::time::Duration::from_secs(10),
            effort: 1,
            replica: false,
            lazy: false,
        };
        crate::expire::active_expire_cycle(&t.ks, &mut cursor, &cycle, &crate::NoEvents);
        assert_eq!(t.sink.take(), ["0: DEL a"]);
    }

    #[test]
    fn deleting_a_lost_slots_keys_records_a_del_per_key_and_leaves_other_slots() {
        let mut t = TestKit::default();
        // Same slot by hash tag; `other` lands elsewhere.
        for k in ["{t}a", "{t}b", "other"] {
            t.run(&["SET", k, "1"]);
        }
        t.run(&["SADD", "{t}s", "m"]);
        let slot = crate::slot::key_slot(b"{t}a");
        t.sink.set_active(true);
        assert_eq!(t.ks.delete_slot_keys(0, slot, false, &crate::NoEvents), 3);
        let mut dels = t.sink.take();
        dels.sort();
        assert_eq!(dels, ["0: DEL {t}a", "0: DEL {t}b", "0: DEL {t}s"]);
        assert_eq!(t.ks.db(0).slot(slot).keys(), 0);
        assert_eq!(t.run(&["EXISTS", "{t}a", "{t}s", "other"]), ":1\r\n");
        assert_eq!(t.ks.delete_slot_keys(0, slot, false, &crate::NoEvents), 0, "nothing left");
        assert!(t.sink.take().is_empty());
    }
}
