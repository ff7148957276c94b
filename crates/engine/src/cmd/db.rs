//! Database-level commands: SELECT, DBSIZE, FLUSHDB, FLUSHALL, SWAPDB, and moving or copying
//! a key between databases (MOVE, COPY).

use hotkv_protocol::{Args, ReplyBuf};

use super::{EngineCmd, LockPlan, Spec, int32_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, KeyState};
use crate::entry::{Entry, NewValue, ValueRef};
use crate::error::{CmdResult, CommandError};
use crate::hash::key_hash;
use crate::keyspace::Db;
use crate::policy;
use crate::slot::{SLOTS, key_slot};
use crate::table::Table;

/// Database command rows.
pub static COMMANDS: &[Spec] = &[
    cmd(
        "select",
        2,
        flags::LOADING | flags::STALE | flags::FAST,
        acl::CONNECTION,
        &[],
        LockPlan::Keys,
        "connection",
        "1.0.0",
        "Changes the selected database.",
        "O(1)",
        select,
    ),
    cmd(
        "dbsize",
        1,
        flags::READONLY | flags::FAST,
        acl::KEYSPACE,
        &[],
        LockPlan::Keys,
        "server",
        "1.0.0",
        "Returns the number of keys in the database.",
        "O(1)",
        dbsize,
    )
    .with_tips(&["request_policy:all_shards", "response_policy:agg_sum"]),
    cmd(
        "flushdb",
        -1,
        flags::WRITE,
        acl::KEYSPACE | acl::DANGEROUS,
        &[],
        LockPlan::PerSlot,
        "server",
        "1.0.0",
        "Remove all keys from the current database.",
        "O(N) where N is the number of keys in the selected database",
        flushdb,
    )
    .with_tips(ALL_SHARDS_SUCCEEDED),
    cmd(
        "flushall",
        -1,
        flags::WRITE,
        acl::KEYSPACE | acl::DANGEROUS,
        &[],
        LockPlan::PerSlotAllDbs,
        "server",
        "1.0.0",
        "Removes all keys from all databases.",
        "O(N) where N is the total number of keys in all databases",
        flushall,
    )
    .with_tips(ALL_SHARDS_SUCCEEDED),
    cmd(
        "swapdb",
        3,
        flags::WRITE | flags::FAST,
        acl::KEYSPACE | acl::DANGEROUS,
        &[],
        LockPlan::PerSlotAllDbs,
        "server",
        "4.0.0",
        "Swaps two databases.",
        "O(N) where N is the count of clients watching or blocking on keys from both databases.",
        swapdb,
    ),
    cmd(
        "move",
        3,
        flags::WRITE | flags::FAST,
        acl::KEYSPACE,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::UPDATE)],
        LockPlan::KeysAlsoInDbArg(2),
        "generic",
        "1.0.0",
        "Moves a key to another database.",
        "O(1)",
        move_,
    ),
    cmd(
        "copy",
        -3,
        flags::WRITE | flags::DENYOOM,
        acl::KEYSPACE,
        &[KeySpec::single(1, kf::RO | kf::ACCESS), KeySpec::single(2, kf::OW | kf::UPDATE)],
        LockPlan::KeysAlsoInDbOption,
        "generic",
        "6.2.0",
        "Copies the value of a key to a new key.",
        "O(N) worst case for collections, where N is the number of nested items. O(1) for string values.",
        copy,
    ),
];

#[allow(clippy::too_many_arguments)]
const fn cmd(
    name: &'static str,
    arity: i32,
    flags: u32,
    acl: u32,
    keys: &'static [KeySpec],
    plan: LockPlan,
    group: &'static str,
    since: &'static str,
    summary: &'static str,
    complexity: &'static str,
    run: super::EngineFn,
) -> Spec {
    CommandSpec::new(name, arity, flags, acl, keys, group, since, summary, complexity, EngineCmd { run, plan })
}

const ALL_SHARDS_SUCCEEDED: &[&str] = &["request_policy:all_shards", "response_policy:all_succeeded"];

/// A database index argument: an `int`, then within `databases`.
fn db_index(ctx: &Ctx<'_>, arg: &[u8]) -> Result<usize, CommandError> {
    let n = int32_arg(arg)?;
    usize::try_from(n).ok().filter(|&d| d < ctx.ks.databases()).ok_or(CommandError::DbIndexOutOfRange)
}

fn select(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    // MIGRATE sends SELECT 0 to cluster nodes too, so 0 is fine; any other number is refused
    // before its range is judged (databases is 1 in cluster mode), as in Valkey.
    if ctx.cfg.cluster && int32_arg(args.get(1))? != 0 {
        return Err(CommandError::err("SELECT is not allowed in cluster mode"));
    }
    ctx.db = db_index(ctx, args.get(1))?;
    out.ok();
    Ok(())
}

fn dbsize(ctx: &mut Ctx<'_>, _: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    // Like Valkey, keys that are logically expired but not yet deleted still count.
    let n = ctx.ks.db_if_used(ctx.db).map_or(0, Db::len);
    out.int(n as i64);
    Ok(())
}

/// FLUSHDB/FLUSHALL's only option. Without it Valkey follows `lazyfree-lazy-user-flush`,
/// whose default (no) is what we do.
fn flush_async(args: &Args<'_>) -> Result<bool, CommandError> {
    match args.opt(1) {
        None => Ok(false),
        Some(mode) if args.len() == 2 && mode.eq_ignore_ascii_case(b"sync") => Ok(false),
        Some(mode) if args.len() == 2 && mode.eq_ignore_ascii_case(b"async") => Ok(true),
        Some(_) => Err(CommandError::Syntax),
    }
}

fn flushdb(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let lazy = flush_async(&args)?;
    let mut garbage = Vec::new();
    let dbi = ctx.db;
    let watched = watched_changes(ctx, dbi, None);
    if ctx.ks.db_if_used(dbi).is_some() {
        ctx.stats.dirty += flush_dbs(ctx, &[dbi], &args, &mut garbage) as u64;
    } else {
        ctx.propagate_as(&args.iter().collect::<Vec<_>>());
    }
    ctx.events.flushed();
    touch_all(ctx, dbi, &watched);
    ctx.events.db_changed(dbi);
    free(garbage, lazy);
    out.ok();
    Ok(())
}

fn flushall(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let lazy = flush_async(&args)?;
    let mut garbage = Vec::new();
    let watched: Vec<_> = (0..ctx.ks.databases()).map(|i| watched_changes(ctx, i, None)).collect();
    // Unused databases hold nothing and stay unallocated. One that comes into use while the
    // others are being locked is caught by the check after locking, and the flush retries.
    loop {
        let used: Vec<usize> = (0..ctx.ks.databases()).filter(|&i| ctx.ks.db_if_used(i).is_some()).collect();
        if let Some(n) = flush_dbs_if(ctx, &used, &args, &mut garbage, |ks| {
            (0..ks.databases()).filter(|&i| ks.db_if_used(i).is_some()).count() == used.len()
        }) {
            ctx.stats.dirty += n as u64;
            break;
        }
    }
    ctx.events.flushed();
    for (i, w) in watched.iter().enumerate() {
        touch_all(ctx, i, w);
        ctx.events.db_changed(i);
    }
    free(garbage, lazy);
    out.ok();
    Ok(())
}

/// Empties databases `dbs` holding every one of their slot locks at once, and records the
/// flush in the write stream under them, so no write is ever seen half before and half after
/// it, on this node or by a replica. Returns the keys removed.
fn flush_dbs(ctx: &mut Ctx<'_>, dbs: &[usize], args: &Args<'_>, garbage: &mut Vec<Table>) -> usize {
    flush_dbs_if(ctx, dbs, args, garbage, |_| true).unwrap_or(0)
}

/// [`flush_dbs`] if `still` holds once the locks are taken; None (nothing done) otherwise.
fn flush_dbs_if(
    ctx: &mut Ctx<'_>,
    dbs: &[usize],
    args: &Args<'_>,
    garbage: &mut Vec<Table>,
    still: impl Fn(&crate::keyspace::Keyspace) -> bool,
) -> Option<usize> {
    let db = ctx.db;
    // A transaction planned the flush with every slot already locked.
    // Even a flush of empty databases is recorded (Valkey forces its propagation).
    if dbs.iter().all(|&d| ctx.locks.holds_db(d)) {
        ctx.propagate_as(&args.iter().collect::<Vec<_>>());
        forget_field_ttls(ctx.ks, dbs);
        return Some(take_tables(&mut ctx.locks, dbs, garbage));
    }
    let mut own = ctx.ks.lock_all(dbs);
    if !still(ctx.ks) {
        return None;
    }
    forget_field_ttls(ctx.ks, dbs);
    let removed = take_tables(&mut own, dbs, garbage);
    ctx.propagate_now(db, &args.iter().collect::<Vec<_>>());
    drop(own);
    Some(removed)
}

/// Empties the sets of hashes filed for field expiry of `dbs`, whose keys a flush removes
/// (under their slot locks; stale entries would only cost the cycle a lookup each).
fn forget_field_ttls(ks: &crate::keyspace::Keyspace, dbs: &[usize]) {
    for &d in dbs {
        if let Some(db) = ks.db_if_used(d) {
            db.clear_field_ttls();
        }
    }
}

/// Takes every table of `dbs` out of the lock set; returns the keys removed.
fn take_tables(locks: &mut crate::keyspace::LockSet<'_>, dbs: &[usize], garbage: &mut Vec<Table>) -> usize {
    let mut removed = 0;
    for (id, table, slot) in locks.tables_mut() {
        if !dbs.contains(&(id as usize / SLOTS)) || table.is_empty() {
            continue;
        }
        let old = table.take_all();
        slot.sync(table);
        removed += old.len();
        garbage.push(old);
    }
    removed
}

/// What `key` holds in `db`: nothing, an entry past its TTL, or a live one.
fn state(ctx: &mut Ctx<'_>, db: usize, key: &[u8]) -> KeyState {
    if ctx.ks.db_if_used(db).is_none() {
        return KeyState::Missing;
    }
    let now = ctx.now_ms;
    let table = ctx.locks.slot_ref(ctx.ks, db, key_slot(key));
    match table.find(key, key_hash(key)) {
        None => KeyState::Missing,
        Some(i) if table.at(i).expire().is_some_and(|when| now > when) => KeyState::Stale,
        Some(_) => KeyState::Live,
    }
}

/// The WATCHed keys of `db` that a flush of `db` (`other` None) or its swap with `other`
/// changes, with what they hold before and after. Keys missing on both sides are left out,
/// as Valkey's `touchAllWatchedKeysInDb` leaves them, so a transaction watching a missing
/// key survives FLUSHALL.
fn watched_changes(ctx: &mut Ctx<'_>, db: usize, other: Option<usize>) -> Vec<(Vec<u8>, KeyState, KeyState)> {
    let mut out = Vec::new();
    for k in ctx.events.watched_keys(db) {
        let before = state(ctx, db, &k);
        let after = match other {
            Some(o) => state(ctx, o, &k),
            None => KeyState::Missing,
        };
        if before != KeyState::Missing || after != KeyState::Missing {
            out.push((k, before, after));
        }
    }
    out
}

/// Tells WATCH what became of each watched key of `db`.
fn touch_all(ctx: &Ctx<'_>, db: usize, changes: &[(Vec<u8>, KeyState, KeyState)]) {
    for (k, before, after) in changes {
        ctx.events.key_replaced(db, k, *before, *after);
    }
}

/// Drops flushed tables here, or with ASYNC on a helper thread so the client gets its reply
/// without waiting for millions of frees (Valkey's lazyfree). If the thread cannot be
/// started the tables are freed here.
fn free(garbage: Vec<Table>, lazy: bool) {
    if garbage.is_empty() || !lazy {
        return;
    }
    let spawned = std::thread::Builder::new().name("hotkv-lazyfree".into()).spawn(move || drop(garbage));
    // On failure the closure, and the tables with it, were already dropped by spawn.
    let _ = spawned;
}

fn swapdb(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let first = int32_arg(args.get(1)).map_err(|_| CommandError::err("invalid first DB index"))?;
    let second = int32_arg(args.get(2)).map_err(|_| CommandError::err("invalid second DB index"))?;
    let n = ctx.ks.databases();
    let (Ok(a), Ok(b)) = (usize::try_from(first), usize::try_from(second)) else {
        return Err(CommandError::DbIndexOutOfRange);
    };
    if a >= n || b >= n {
        return Err(CommandError::DbIndexOutOfRange);
    }
    if a != b {
        let (watched_a, watched_b) = (watched_changes(ctx, a, Some(b)), watched_changes(ctx, b, Some(a)));
        // Every slot of both databases at once, so no command sees a half-swapped pair; a
        // transaction already holds them all (it plans SWAPDB that way).
        let held = ctx.locks.holds_db(a) && ctx.locks.holds_db(b);
        let mut own = if held { None } else { Some(ctx.ks.lock_all(&[a, b])) };
        let locks = match own.as_mut() {
            Some(l) => l,
            None => &mut ctx.locks,
        };
        let (lo, hi) = (a.min(b), a.max(b));
        let mut tables: Vec<_> = locks
            .tables_mut()
            .filter(|(id, _, _)| {
                let d = *id as usize / SLOTS;
                d == lo || d == hi
            })
            .collect();
        let (low, high) = tables.split_at_mut(SLOTS);
        for ((_, x, xs), (_, y, ys)) in low.iter_mut().zip(high.iter_mut()) {
            std::mem::swap(&mut **x, &mut **y);
            xs.sync(x);
            ys.sync(y);
        }
        // The hashes filed for field expiry follow their tables (holding both registry locks
        // at once is safe: nothing else ever holds two).
        ctx.ks.db(lo).swap_field_ttls(ctx.ks.db(hi));
        if !held {
            let db = ctx.db;
            ctx.propagate_now(db, &args.iter().collect::<Vec<_>>());
        }
        drop(own);
        touch_all(ctx, a, &watched_a);
        touch_all(ctx, b, &watched_b);
        ctx.events.db_changed(a);
        ctx.events.db_changed(b);
    }
    ctx.stats.dirty += 1;
    out.ok();
    Ok(())
}

fn move_(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let (src, dst) = (ctx.db, db_index(ctx, args.get(2))?);
    if src == dst {
        return Err(CommandError::SameObject);
    }
    if ctx.write(key)?.is_none() || ctx.write_in(dst, key)?.is_some() {
        out.int(0);
        return Ok(());
    }
    let Some(k) = ctx.write(key)? else { return Err(CommandError::NoSuchKey) };
    // Same key, same hash: the entry moves as it is, TTL and access clock included.
    let entry = k.delete();
    ctx.events.key_touched(src, key);
    ctx.put_entry(dst, entry)?;
    ctx.events.notify('g', "move_from", key, src);
    ctx.events.notify('g', "move_to", key, dst);
    out.int(1);
    Ok(())
}

/// COPY's options.
struct CopyArgs {
    db: usize,
    replace: bool,
}

impl CopyArgs {
    fn parse(ctx: &Ctx<'_>, args: &Args<'_>) -> Result<CopyArgs, CommandError> {
        let mut a = CopyArgs { db: ctx.db, replace: false };
        let mut i = 3;
        while i < args.len() {
            let opt = args.get(i);
            if opt.eq_ignore_ascii_case(b"replace") {
                a.replace = true;
            } else if opt.eq_ignore_ascii_case(b"db") && i + 1 < args.len() {
                a.db = db_index(ctx, args.get(i + 1))?;
                i += 1;
            } else {
                return Err(CommandError::Syntax);
            }
            i += 1;
        }
        Ok(a)
    }
}

fn copy(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (src, dst) = (args.get(1), args.get(2));
    let opts = CopyArgs::parse(ctx, &args)?;
    if opts.db == ctx.db && src == dst {
        return Err(CommandError::SameObject);
    }
    let fresh = policy::initial(ctx.cfg.policy, ctx.now_ms);
    let Some(entry) = ctx.read(src)?.map(|k| duplicate(k.entry(), dst, fresh)) else {
        out.int(0);
        return Ok(());
    };
    if ctx.write_in(opts.db, dst)?.is_some() && !opts.replace {
        out.int(0);
        return Ok(());
    }
    ctx.put_entry(opts.db, entry)?;
    ctx.events.notify('g', "copy_to", dst, opts.db);
    out.int(1);
    Ok(())
}

/// A copy of `e`'s value and TTL under `key`, as a new object with a fresh access clock.
fn duplicate(e: &Entry, key: &[u8], lru: u32) -> Entry {
    let value = match e.value() {
        ValueRef::Str(b) => NewValue::Bytes(b),
        ValueRef::Obj(o) => NewValue::Object(o.clone()),
    };
    Entry::new(key, key_hash(key), value, e.expire(), lru)
}

#[cfg(test)]
mod tests {
    use crate::testkit::TestKit;

    #[test]
    fn select_in_cluster_mode_allows_only_database_0() {
        let mut t = TestKit { ks: crate::keyspace::Keyspace::new(1), ..TestKit::default() };
        t.cfg.cluster = true;
        assert_eq!(t.run(&["SELECT", "0"]), "+OK\r\n");
        assert_eq!(t.run(&["SELECT", "1"]), "-ERR SELECT is not allowed in cluster mode\r\n");
        assert_eq!(t.run(&["SELECT", "x"]), "-ERR value is not an integer or out of range\r\n");
    }

    #[test]
    fn select_validates_the_index() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SELECT", "3"]), "+OK\r\n");
        assert_eq!(t.db, 3);
        t.run(&["SET", "k", "in3"]);
        assert_eq!(t.run(&["SELECT", "16"]), "-ERR DB index is out of range\r\n");
        assert_eq!(t.run(&["SELECT", "-1"]), "-ERR DB index is out of range\r\n");
        assert_eq!(t.run(&["SELECT", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["SELECT", "4294967296"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.db, 3);
        t.run(&["SELECT", "0"]);
        assert_eq!(t.run(&["GET", "k"]), "$-1\r\n");
        t.run(&["SELECT", "3"]);
        assert_eq!(t.run(&["GET", "k"]), "$3\r\nin3\r\n");
    }

    #[test]
    fn dbsize_counts_the_selected_db() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
        t.run(&["MSET", "a", "1", "b", "2", "c", "3"]);
        assert_eq!(t.run(&["DBSIZE"]), ":3\r\n");
        t.run(&["SELECT", "9"]);
        assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
        assert!(t.ks.db_if_used(10).is_none());
    }

    #[test]
    fn flushdb_and_flushall() {
        let mut t = TestKit::default();
        for db in ["0", "1", "2"] {
            t.run(&["SELECT", db]);
            t.run(&["MSET", "a", "1", "b", "2"]);
        }
        t.run(&["SELECT", "1"]);
        t.events.take();
        let dirty = t.stats.dirty;
        assert_eq!(t.run(&["FLUSHDB"]), "+OK\r\n");
        assert_eq!(t.stats.dirty - dirty, 2);
        assert_eq!(t.events.take(), ["*changed@1"]);
        assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
        t.run(&["SELECT", "0"]);
        assert_eq!(t.run(&["DBSIZE"]), ":2\r\n");
        assert_eq!(t.run(&["FLUSHDB", "ASYNC"]), "+OK\r\n");
        assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
        assert_eq!(t.run(&["FLUSHALL", "sync"]), "+OK\r\n");
        t.run(&["SELECT", "2"]);
        assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
        assert_eq!(t.events.take().len(), 1 + 16);
        t.run(&["SET", "x", "1"]);
        assert_eq!(t.run(&["FLUSHALL", "ASYNC"]), "+OK\r\n");
        assert_eq!(t.ks.total_keys(), 0);
        assert_eq!(t.run(&["FLUSHALL", "LAZY"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["FLUSHDB", "SYNC", "ASYNC"]), "-ERR syntax error\r\n");
        t.run(&["SET", "x", "1"]);
        t.run(&["SET", "x", "2"]);
        assert_eq!(t.run(&["GET", "x"]), "$1\r\n2\r\n", "tables work after a flush");
    }

    #[test]
    fn swapdb_swaps_contents_and_ttls() {
        let mut t = TestKit::default();
        t.run(&["SET", "swapkey", "v1", "EX", "100"]);
        t.run(&["SELECT", "1"]);
        assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
        t.events.take();
        assert_eq!(t.run(&["SWAPDB", "0", "1"]), "+OK\r\n");
        assert_eq!(t.events.take(), ["*changed@0", "*changed@1"]);
        assert_eq!(t.run(&["DBSIZE"]), ":1\r\n");
        assert_eq!(t.run(&["TTL", "swapkey"]), ":100\r\n");
        assert_eq!(t.ks.db(1).volatile(), 1);
        t.run(&["SELECT", "0"]);
        assert_eq!(t.run(&["DBSIZE"]), ":0\r\n");
        assert_eq!(t.run(&["SWAPDB", "1", "1"]), "+OK\r\n");
        assert_eq!(t.run(&["SWAPDB", "44", "55"]), "-ERR DB index is out of range\r\n");
        assert_eq!(t.run(&["SWAPDB", "0", "-1"]), "-ERR DB index is out of range\r\n");
        assert_eq!(t.run(&["SWAPDB", "44", "a"]), "-ERR invalid second DB index\r\n");
        assert_eq!(t.run(&["SWAPDB", "a", "55"]), "-ERR invalid first DB index\r\n");
        assert_eq!(t.run(&["SWAPDB", "a", "b"]), "-ERR invalid first DB index\r\n");
        t.run(&["SET", "k0", "zero"]);
        t.run(&["SWAPDB", "1", "0"]);
        assert_eq!(t.run(&["MGET", "swapkey", "k0"]), "*2\r\n$2\r\nv1\r\n$-1\r\n");
        t.run(&["SELECT", "1"]);
        assert_eq!(t.run(&["GET", "k0"]), "$4\r\nzero\r\n");
    }

    #[test]
    fn a_loaded_keyspace_swaps_in_whole_and_watches_see_it() {
        use crate::ctx::{Events, KeyState};
        /// Watches `w`, `gone`, `new` and `never` in database 0, and records what it hears.
        #[derive(Default)]
        struct Watching(std::sync::Mutex<Vec<String>>);
        impl Events for Watching {
            fn watched_keys(&self, db: usize) -> Vec<Vec<u8>> {
                if db == 0 { ["w", "gone", "new", "never"].map(|k| k.as_bytes().to_vec()).to_vec() } else { vec![] }
            }
            fn key_replaced(&self, db: usize, key: &[u8], before: KeyState, after: KeyState) {
                let line = format!("{db}:{} {before:?}->{after:?}", String::from_utf8_lossy(key));
                self.0.lock().unwrap().push(line);
            }
            fn flushed(&self) {
                self.0.lock().unwrap().push("flushed".into());
            }
            fn db_changed(&self, db: usize) {
                self.0.lock().unwrap().push(format!("changed@{db}"));
            }
        }
        let mut old = TestKit::default();
        for k in ["w", "gone", "only-old"] {
            old.run(&["SET", k, "old"]);
        }
        old.run(&["HSET", "h", "f", "v"]);
        old.run(&["HPEXPIRE", "h", "100000", "FIELDS", "1", "f"]);
        let mut new = TestKit::default();
        new.run(&["SET", "w", "new"]);
        new.run(&["SET", "new", "1", "EX", "100"]);
        new.run(&["SELECT", "3"]);
        new.run(&["SET", "in3", "x"]);
        let events = Watching::default();
        assert_eq!(old.ks.swap_in(&new.ks, old.now_ms, &events), 3);
        let heard = events.0.lock().unwrap().clone();
        assert_eq!(heard[0], "flushed");
        let mut touched = heard[1..heard.len() - 2].to_vec();
        touched.sort();
        assert_eq!(touched, ["0:gone Live->Missing", "0:new Missing->Live", "0:w Live->Live"]);
        assert_eq!(heard[heard.len() - 2..], ["changed@0", "changed@3"]);
        assert_eq!(old.run(&["MGET", "w", "gone", "only-old", "new"]), "*4\r\n$3\r\nnew\r\n$-1\r\n$-1\r\n$1\r\n1\r\n");
        assert_eq!(old.run(&["TTL", "new"]), ":100\r\n");
        assert_eq!(old.run(&["DBSIZE"]), ":2\r\n");
        assert_eq!(old.ks.db(0).volatile(), 1);
        old.run(&["SELECT", "3"]);
        assert_eq!(old.run(&["GET", "in3"]), "$1\r\nx\r\n");
        // The old data went the other way, the hash's field TTL with it.
        assert_eq!(new.ks.db(0).len(), 4);
        assert_eq!(new.ks.db(0).field_ttls_filed(), 1);
        assert_eq!(old.ks.db(0).field_ttls_filed(), 0);
        assert_eq!(new.ks.db(3).len(), 0);
    }

    #[test]
    fn move_between_databases() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v", "EX", "100"]);
        t.events.take();
        assert_eq!(t.run(&["MOVE", "k", "1"]), ":1\r\n");
        assert_eq!(t.events.take(), ["n:new:k@1", "g:move_from:k@0", "g:move_to:k@1"]);
        assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
        t.run(&["SELECT", "1"]);
        assert_eq!(t.run(&["GET", "k"]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":100\r\n");
        t.run(&["SELECT", "0"]);
        t.run(&["SET", "k", "other"]);
        assert_eq!(t.run(&["MOVE", "k", "1"]), ":0\r\n", "exists in the target");
        assert_eq!(t.run(&["GET", "k"]), "$5\r\nother\r\n");
        assert_eq!(t.run(&["MOVE", "nope", "1"]), ":0\r\n");
        assert_eq!(t.run(&["MOVE", "k", "0"]), "-ERR source and destination objects are the same\r\n");
        assert_eq!(t.run(&["MOVE", "k", "16"]), "-ERR DB index is out of range\r\n");
        assert_eq!(t.run(&["MOVE", "k", "x"]), "-ERR value is not an integer or out of range\r\n");
        t.run(&["SELECT", "1"]);
        t.run(&["PEXPIRE", "k", "1"]);
        t.now_ms += 2;
        t.run(&["SELECT", "0"]);
        assert_eq!(t.run(&["MOVE", "k", "1"]), ":1\r\n", "an expired key in the target is gone");
    }

    #[test]
    fn copy_within_and_across_databases() {
        let mut t = TestKit::default();
        t.run(&["SET", "src", "v", "EX", "100"]);
        t.events.take();
        assert_eq!(t.run(&["COPY", "src", "dst"]), ":1\r\n");
        assert_eq!(t.events.take(), ["n:new:dst@0", "g:copy_to:dst@0"]);
        assert_eq!(t.run(&["MGET", "src", "dst"]), "*2\r\n$1\r\nv\r\n$1\r\nv\r\n");
        assert_eq!(t.run(&["TTL", "dst"]), ":100\r\n");
        assert_eq!(t.run(&["COPY", "src", "dst"]), ":0\r\n");
        t.run(&["SET", "src", "w"]);
        assert_eq!(t.run(&["COPY", "src", "dst", "REPLACE"]), ":1\r\n");
        assert_eq!(t.run(&["GET", "dst"]), "$1\r\nw\r\n");
        assert_eq!(t.run(&["TTL", "dst"]), ":-1\r\n", "REPLACE takes the source's TTL");
        assert_eq!(t.run(&["COPY", "src", "src"]), "-ERR source and destination objects are the same\r\n");
        assert_eq!(t.run(&["COPY", "src", "src", "DB", "0"]), "-ERR source and destination objects are the same\r\n");
        assert_eq!(t.run(&["COPY", "src", "src", "DB", "2"]), ":1\r\n");
        assert_eq!(t.run(&["COPY", "nope", "x"]), ":0\r\n");
        assert_eq!(t.run(&["COPY", "src", "x", "DB", "16"]), "-ERR DB index is out of range\r\n");
        assert_eq!(t.run(&["COPY", "src", "x", "DB"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["COPY", "src", "x", "FOO"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["COPY", "src", "x", "DB", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["COPY", "src", "y", "DB", "5", "DB", "3", "REPLACE"]), ":1\r\n", "the last DB wins");
        t.run(&["SELECT", "3"]);
        assert_eq!(t.run(&["GET", "y"]), "$1\r\nw\r\n");
        t.run(&["SELECT", "2"]);
        assert_eq!(t.run(&["GET", "src"]), "$1\r\nw\r\n");
    }

    #[test]
    fn copy_duplicates_objects() {
        let mut t = TestKit::default();
        t.run(&["APPEND", "a", "hello"]);
        t.run(&["APPEND", "a", " world"]);
        assert_eq!(t.run(&["COPY", "a", "b"]), ":1\r\n");
        t.run(&["APPEND", "b", "!"]);
        assert_eq!(t.run(&["MGET", "a", "b"]), "*2\r\n$11\r\nhello world\r\n$12\r\nhello world!\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "b"]), "$3\r\nraw\r\n");
        t.now_ms += 60_000;
        t.run(&["COPY", "a", "c"]);
        assert_eq!(t.run(&["OBJECT", "IDLETIME", "c"]), ":0\r\n", "a copy is a new object");
    }
}
