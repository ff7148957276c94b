//! SORT and SORT_RO (Valkey's `sort.c`): sort the elements of a list, set or sorted set
//! numerically or as strings, by themselves or by keys made from them (`BY weight_*`,
//! `BY obj_*->field`), return them or values of other keys made from them (`GET #`,
//! `GET name_*`), or store the result as a list.
//!
//! BY and GET patterns read keys the command did not declare, anywhere in the database. The
//! handler finds them once it has the elements and takes their slot locks then, without
//! risking a deadlock (see [`Ctx::lock_undeclared`]), so the sort sees one consistent state of
//! every key it reads, as on Valkey's single thread. In cluster mode Valkey accepts only
//! patterns whose keys all hash to the sorted key's slot, so those locks are already held.

use std::cmp::Ordering;

use hotkv_protocol::{Args, ReplyBuf};

use super::qsort::partial_sort;
use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, Ttl};
use crate::entry::{NewValue, ValueRef};
use crate::error::{CmdResult, CommandError};
use crate::keyspace::{LockId, lock_id};
use crate::object::Object;
use crate::slot::key_slot;
use crate::types::list::List;
use crate::types::lpentry::Elem;

const COMPLEXITY: &str = "O(N+M*log(M)) where N is the number of elements in the list or set to sort, and M the number of returned elements. When the elements are not sorted, complexity is O(N).";

/// SORT and SORT_RO rows. Their BY/GET keys and SORT's STORE destination have `unknown` key
/// specs, as in Valkey: the rows' own key finders give the sorted key and the destination.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new(
        "sort",
        -2,
        flags::WRITE | flags::DENYOOM,
        acl::SET | acl::SORTEDSET | acl::LIST | acl::DANGEROUS,
        &[
            KeySpec::single(1, kf::RO | kf::ACCESS),
            KeySpec::unknown(kf::RO | kf::ACCESS),
            KeySpec::unknown(kf::OW | kf::UPDATE),
        ],
        "generic",
        "1.0.0",
        "Sorts the elements in a list, a set, or a sorted set, optionally storing the result.",
        COMPLEXITY,
        EngineCmd { run: sort, plan: LockPlan::KeysAndUndeclared(sort_reads_patterns) },
    )
    .with_getkeys(sort_keys),
    CommandSpec::new(
        "sort_ro",
        -2,
        flags::READONLY,
        acl::SET | acl::SORTEDSET | acl::LIST | acl::DANGEROUS,
        &[KeySpec::single(1, kf::RO | kf::ACCESS), KeySpec::unknown(kf::RO | kf::ACCESS)],
        "generic",
        "7.0.0",
        "Returns the sorted elements of a list, a set, or a sorted set.",
        COMPLEXITY,
        EngineCmd { run: sort_ro, plan: LockPlan::KeysAndUndeclared(sort_ro_reads_patterns) },
    )
    .with_getkeys(sort_ro_keys),
];

/// Valkey's `sortGetKeys`: the sorted key, and the argument after the last STORE. Like
/// Valkey's, the walk skips the arguments of LIMIT, GET and BY but not STORE's, so in
/// `STORE a STORE b` the first destination is looked at as an option too.
fn sort_keys(args: &Args<'_>, found: &mut dyn FnMut(usize, u32)) {
    found(1, kf::RO | kf::ACCESS);
    let mut store = None;
    let mut i = 2;
    while i < args.len() {
        let a = args.get(i);
        if a.eq_ignore_ascii_case(b"limit") {
            i += 2;
        } else if a.eq_ignore_ascii_case(b"get") || a.eq_ignore_ascii_case(b"by") {
            i += 1;
        } else if a.eq_ignore_ascii_case(b"store") && i + 1 < args.len() {
            store = Some(i + 1);
        }
        i += 1;
    }
    if let Some(pos) = store {
        found(pos, kf::OW | kf::UPDATE);
    }
}

/// Valkey's `sortROGetKeys`: the sorted key only.
fn sort_ro_keys(_args: &Args<'_>, found: &mut dyn FnMut(usize, u32)) {
    found(1, kf::RO | kf::ACCESS);
}

fn sort(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    sort_generic(ctx, &args, false, out)
}

fn sort_ro(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    sort_generic(ctx, &args, true, out)
}

/// Whether a SORT call may read keys outside its sorted key's slot, for its plan.
fn sort_reads_patterns(args: &Args<'_>) -> bool {
    reads_other_slots(args, false)
}

/// [`sort_reads_patterns`] for SORT_RO.
fn sort_ro_reads_patterns(args: &Args<'_>) -> bool {
    reads_other_slots(args, true)
}

/// Whether the options name a BY or GET pattern that makes keys which may hash to another slot
/// than the sorted key (a pattern whose hash tag fixes the sorted key's slot reads nothing
/// beyond the locks the call declares). Calls that fail to parse read nothing.
fn reads_other_slots(args: &Args<'_>, readonly: bool) -> bool {
    let Ok(opts) = SortOpts::parse(args, readonly, None, true) else { return false };
    let key_slot = key_slot(args.get(1));
    let elsewhere = |p: &[u8]| matches!(Pattern::of(p), Pattern::Key { .. }) && pattern_slot(p) != Some(key_slot);
    let by = !opts.dontsort && opts.by.is_some_and(elsewhere);
    by || opts.gets.iter().any(|g| elsewhere(g))
}

/// SORT's options, parsed in Valkey's order (errors come in argument order, before the
/// sorted key is looked at).
#[derive(Debug, Default)]
struct SortOpts<'a> {
    desc: bool,
    alpha: bool,
    /// LIMIT offset, as given (0 without LIMIT).
    offset: i64,
    /// LIMIT count, as given (-1, everything, without LIMIT).
    count: i64,
    store: Option<&'a [u8]>,
    /// The last BY pattern.
    by: Option<&'a [u8]>,
    /// A BY pattern without `*` was given (`BY nosort`): the elements keep their order. It
    /// stays set even if a later BY has a `*`, as in Valkey.
    dontsort: bool,
    gets: Vec<&'a [u8]>,
}

impl<'a> SortOpts<'a> {
    /// Parses the options; `cluster` is the sorted key's slot in cluster mode, where BY and
    /// GET patterns must make keys of that slot; without `full_key_access` (ACL) they are
    /// refused altogether.
    fn parse(
        args: &Args<'a>,
        readonly: bool,
        cluster: Option<u16>,
        full_key_access: bool,
    ) -> Result<SortOpts<'a>, CommandError> {
        let mut o = SortOpts { count: -1, ..SortOpts::default() };
        let mut j = 2;
        while j < args.len() {
            let a = args.get(j);
            let left = args.len() - j - 1;
            if a.eq_ignore_ascii_case(b"asc") {
                o.desc = false;
            } else if a.eq_ignore_ascii_case(b"desc") {
                o.desc = true;
            } else if a.eq_ignore_ascii_case(b"alpha") {
                o.alpha = true;
            } else if a.eq_ignore_ascii_case(b"limit") && left >= 2 {
                o.offset = int_arg(args.get(j + 1))?;
                o.count = int_arg(args.get(j + 2))?;
                j += 2;
            } else if !readonly && a.eq_ignore_ascii_case(b"store") && left >= 1 {
                o.store = Some(args.get(j + 1));
                j += 1;
            } else if a.eq_ignore_ascii_case(b"by") && left >= 1 {
                let p = args.get(j + 1);
                o.by = Some(p);
                // Valkey looks for the `*` with strchr: bytes after a NUL do not count.
                if !cstr(p).contains(&b'*') {
                    o.dontsort = true;
                } else if cluster.is_some_and(|s| pattern_slot(p) != Some(s)) {
                    return Err(CommandError::err(
                        "BY option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.",
                    ));
                } else if !full_key_access {
                    return Err(CommandError::err("BY option of SORT denied due to insufficient ACL permissions."));
                }
                j += 1;
            } else if a.eq_ignore_ascii_case(b"get") && left >= 1 {
                let p = args.get(j + 1);
                // Every GET pattern is checked, `#` and constants included, as in Valkey.
                if cluster.is_some_and(|s| pattern_slot(p) != Some(s)) {
                    return Err(CommandError::err(
                        "GET option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.",
                    ));
                }
                if !full_key_access {
                    return Err(CommandError::err("GET option of SORT denied due to insufficient ACL permissions."));
                }
                o.gets.push(p);
                j += 1;
            } else {
                return Err(CommandError::Syntax);
            }
            j += 1;
        }
        Ok(o)
    }
}

/// One element to sort, with what it is sorted by.
struct Item {
    elem: Vec<u8>,
    /// Numeric sort: the score (0 when the BY key is missing).
    score: f64,
    /// ALPHA sort BY a pattern: the value of the key (None when it is missing).
    by: Option<Vec<u8>>,
}

impl Item {
    fn new(elem: Vec<u8>) -> Item {
        Item { elem, score: 0.0, by: None }
    }
}

/// How items compare (Valkey's `sortCompare`).
#[derive(Clone, Copy)]
struct Order {
    desc: bool,
    alpha: bool,
    by_pattern: bool,
    /// STORE compares strings byte by byte; a reply compares them as `strcoll` does.
    store: bool,
}

impl Order {
    fn cmp(self, a: &Item, b: &Item) -> Ordering {
        let ord = if !self.alpha {
            // Equal scores fall back to the elements, so the result is deterministic.
            a.score.partial_cmp(&b.score).unwrap_or(Ordering::Equal).then_with(|| a.elem.cmp(&b.elem))
        } else if self.by_pattern {
            match (&a.by, &b.by) {
                (Some(x), Some(y)) => self.strings(x, y),
                // A missing key sorts first.
                (x, y) => x.is_some().cmp(&y.is_some()),
            }
        } else {
            self.strings(&a.elem, &b.elem)
        };
        if self.desc { ord.reverse() } else { ord }
    }

    /// Valkey compares with `memcmp` for STORE and with `strcoll` for a reply. hotkv runs in
    /// the C locale, where `strcoll` is `strcmp`: byte order up to the first NUL.
    fn strings(self, a: &[u8], b: &[u8]) -> Ordering {
        if self.store { a.cmp(b) } else { cstr(a).cmp(cstr(b)) }
    }
}

/// SORT and SORT_RO: parse, read the elements, lock the pattern keys, sort, answer.
fn sort_generic(ctx: &mut Ctx<'_>, args: &Args<'_>, readonly: bool, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let cluster = ctx.cfg.cluster.then(|| key_slot(key));
    let mut opts = SortOpts::parse(args, readonly, cluster, ctx.full_key_access)?;
    let in_script = ctx.in_script;
    let Loaded { mut items, start, end } = {
        let k = ctx.read(key)?;
        let value = match &k {
            None => None,
            Some(k) => match k.value() {
                ValueRef::Obj(o @ (Object::List(_) | Object::Set(_) | Object::ZSet(_))) => Some(o),
                _ => return Err(CommandError::WrongType),
            },
        };
        // A set has no order of its own: when the result is stored or goes to a script it is
        // sorted even BY nosort, so that replicas and script effects see one outcome (Valkey
        // forces ALPHA then).
        if opts.dontsort && matches!(value, Some(Object::Set(_))) && (opts.store.is_some() || in_script) {
            opts.dontsort = false;
            opts.alpha = true;
            opts.by = None;
        }
        load(value, &opts)
    };

    // BY is looked up for every element, GET for the elements shown once sorted; the locks of
    // their keys are taken before any of them is read.
    let by = opts.by.filter(|_| !opts.dontsort).map(Pattern::of);
    let gets: Vec<Pattern<'_>> = opts.gets.iter().map(|g| Pattern::of(g)).collect();
    let mut ids = Vec::new();
    if let Some(p) = &by {
        p.lock_ids(ctx.db, items.iter().map(|i| &i.elem[..]), &mut ids);
        ids.sort_unstable();
        ids.dedup();
        if !ctx.lock_undeclared(&ids)? {
            return Ok(());
        }
    }

    if !opts.dontsort {
        sort_items(ctx, &mut items, by.as_ref(), &opts, (start, end))?;
    }

    let shown = if end >= start { start as usize..end as usize + 1 } else { 0..0 };
    if gets.iter().any(|g| matches!(g, Pattern::Key { .. })) && !shown.is_empty() {
        // With the BY keys' ids too: if this asks to start over, the next run takes them all.
        for g in &gets {
            g.lock_ids(ctx.db, items[shown.clone()].iter().map(|i| &i.elem[..]), &mut ids);
        }
        ids.sort_unstable();
        ids.dedup();
        if !ctx.lock_undeclared(&ids)? {
            return Ok(());
        }
    }
    answer(ctx, &items[shown], &gets, opts.store, out)
}

/// Reads what each element is sorted by (its BY value, or itself) and sorts. A score that is
/// not a number fails the call, but only after every BY key was read, as in Valkey.
fn sort_items(
    ctx: &mut Ctx<'_>,
    items: &mut [Item],
    by: Option<&Pattern<'_>>,
    opts: &SortOpts<'_>,
    (start, end): (i64, i64),
) -> CmdResult {
    let mut bad_score = false;
    for it in items.iter_mut() {
        let by_value = match by {
            Some(p) => match p.lookup(ctx, &it.elem)? {
                Some(v) => Some(v),
                None => continue,
            },
            None => None,
        };
        if opts.alpha {
            it.by = by_value;
        } else {
            match sort_score(by_value.as_deref().unwrap_or(&it.elem)) {
                Some(s) => it.score = s,
                None => bad_score = true,
            }
        }
    }
    if bad_score {
        return Err(CommandError::err("One or more scores can't be converted into double"));
    }
    let order = Order { desc: opts.desc, alpha: opts.alpha, by_pattern: by.is_some(), store: opts.store.is_some() };
    // Which elements that compare equal (ALPHA BY keys with equal or missing values) come
    // first depends on the algorithm, so this follows Valkey's: BY with a LIMIT that leaves
    // something out sorts only around the range (its `pqsort`); otherwise glibc's qsort, a
    // merge sort, which keeps equal elements in the order they were read, as this does.
    if by.is_some() && end >= start && (start != 0 || end != items.len() as i64 - 1) {
        partial_sort(items, start as usize, end as usize, &|a, b| order.cmp(a, b));
    } else {
        items.sort_by(|a, b| order.cmp(a, b));
    }
    Ok(())
}

/// Replies with the elements shown, or what the GET patterns give for each, or stores that
/// list at `store`'s destination and replies with its length.
fn answer(
    ctx: &mut Ctx<'_>,
    shown: &[Item],
    gets: &[Pattern<'_>],
    store: Option<&[u8]>,
    out: &mut ReplyBuf,
) -> CmdResult {
    let total = if gets.is_empty() { shown.len() } else { gets.len() * shown.len() };
    let Some(dst) = store else {
        out.array(total);
        for it in shown {
            if gets.is_empty() {
                out.bulk(&it.elem);
            }
            for g in gets {
                match g.lookup(ctx, &it.elem)? {
                    Some(v) => out.bulk(&v),
                    None => out.null(),
                }
            }
        }
        return Ok(());
    };
    let mut values: Vec<Vec<u8>> = Vec::with_capacity(total);
    for it in shown {
        if gets.is_empty() {
            values.push(it.elem.clone());
        }
        for g in gets {
            // A missing value is stored as an empty string.
            values.push(g.lookup(ctx, &it.elem)?.unwrap_or_default());
        }
    }
    store_result(ctx, dst, values)?;
    out.int(total as i64);
    Ok(())
}

/// STORE: the result replaces `dst` as a list, or deletes it when empty. Replicas get the
/// result itself (DEL and RPUSH), not the SORT: which keys the patterns read, and the order of
/// a set's elements that compare equal, need not be the same there.
fn store_result(ctx: &mut Ctx<'_>, dst: &[u8], values: Vec<Vec<u8>>) -> CmdResult {
    let db = ctx.db;
    let dirty = ctx.stats.dirty;
    if values.is_empty() {
        if ctx.delete(dst)? {
            ctx.events.notify('g', "del", dst, db);
            ctx.propagate_as(&[&b"DEL"[..], dst]);
        }
        return Ok(());
    }
    let existed = ctx.exists(dst)?;
    let list = List::from_elements(values.iter().map(Vec::as_slice), super::list::fill(ctx));
    ctx.set(dst, NewValue::Object(Object::List(list)), Ttl::Clear)?;
    ctx.events.notify('l', "sortstore", dst, db);
    // Valkey counts one change per stored element.
    ctx.stats.dirty = dirty + values.len() as u64;
    if ctx.propagating() {
        if existed {
            ctx.propagate_as(&[&b"DEL"[..], dst]);
        }
        let mut argv: Vec<&[u8]> = Vec::with_capacity(values.len() + 2);
        argv.extend([&b"RPUSH"[..], dst]);
        argv.extend(values.iter().map(Vec::as_slice));
        if existed {
            ctx.effects.push(db, &argv);
        } else {
            ctx.propagate_as(&argv);
        }
    }
    Ok(())
}

/// The elements to sort and the range of them to show.
struct Loaded {
    items: Vec<Item>,
    /// First element shown (an index into `items`).
    start: i64,
    /// Last element shown; below `start` when nothing is.
    end: i64,
}

/// Reads the elements and works out LIMIT as Valkey does: offset and count are clamped to the
/// length (a negative count is everything), so no LIMIT can overflow or fail. A list or sorted
/// set that is not sorted is read in its own order, only over the range shown (backwards for
/// DESC); everything else is read whole.
fn load(value: Option<&Object>, opts: &SortOpts<'_>) -> Loaded {
    let len = match value {
        Some(Object::List(l)) => l.len(),
        Some(Object::Set(s)) => s.len(),
        Some(Object::ZSet(z)) => z.len(),
        _ => 0,
    } as i64;
    let mut start = opts.offset.clamp(0, len);
    let count = opts.count.clamp(-1, len);
    let mut end = if count < 0 { len - 1 } else { start + count - 1 };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }
    let owned = |e: Elem<'_>| Item::new(e.to_vec());
    let items: Vec<Item> = match value {
        Some(o @ (Object::List(_) | Object::ZSet(_))) if opts.dontsort => {
            if end < start {
                return Loaded { items: Vec::new(), start, end };
            }
            let n = (end - start + 1) as usize;
            let from = if opts.desc { len - start - 1 } else { start } as usize;
            let items = match o {
                Object::List(l) => l.range(from, n, opts.desc).into_iter().map(owned).collect(),
                Object::ZSet(z) => z.range(from, n, opts.desc).into_iter().map(|(e, _)| owned(e)).collect(),
                _ => Vec::new(),
            };
            return Loaded { items, start: 0, end: end - start };
        }
        Some(Object::List(l)) => l.iter().map(owned).collect(),
        Some(Object::Set(s)) => s.iter().map(owned).collect(),
        Some(Object::ZSet(z)) => z.iter().into_iter().map(|(e, _)| owned(e)).collect(),
        _ => Vec::new(),
    };
    Loaded { items, start, end }
}

/// A BY or GET pattern, read as Valkey's `lookupKeyByPattern` reads it. Valkey looks for `#`,
/// `*` and `->` with C string functions, so bytes after a NUL are not searched (but are
/// copied into the key).
enum Pattern<'a> {
    /// `#`: the element itself.
    Element,
    /// No `*`: names no key, so GET gives nil.
    Constant,
    /// The key `prefix` + element + `suffix`, and its hash field after `->`, if any.
    Key { raw: &'a [u8], prefix: &'a [u8], suffix: &'a [u8], field: Option<&'a [u8]> },
}

impl<'a> Pattern<'a> {
    fn of(raw: &'a [u8]) -> Pattern<'a> {
        let c = cstr(raw);
        if c == b"#" {
            return Pattern::Element;
        }
        let Some(star) = memchr::memchr(b'*', c) else { return Pattern::Constant };
        // `->` after the `*` with something after it: a hash field (`x_*->` is a plain key).
        let arrow = memchr::memmem::find(&c[star + 1..], b"->").map(|i| star + 1 + i).filter(|&f| f + 2 < c.len());
        let (suffix, field) = match arrow {
            Some(f) => (&raw[star + 1..f], Some(&raw[f + 2..])),
            None => (&raw[star + 1..], None),
        };
        Pattern::Key { raw, prefix: &raw[..star], suffix, field }
    }

    /// Adds the lock ids of the keys this pattern makes from `elems` in database `db`.
    fn lock_ids<'e>(&self, db: usize, elems: impl Iterator<Item = &'e [u8]>, ids: &mut Vec<LockId>) {
        let Pattern::Key { raw, prefix, suffix, .. } = self else { return };
        // A hash tag before the `*` fixes the slot of every key made.
        if let Some(slot) = pattern_slot(raw) {
            ids.push(lock_id(db, slot));
            return;
        }
        let mut key = Vec::new();
        for e in elems {
            key.clear();
            key.extend_from_slice(prefix);
            key.extend_from_slice(e);
            key.extend_from_slice(suffix);
            ids.push(lock_id(db, key_slot(&key)));
        }
    }

    /// The value the pattern gives for `elem`: the element, or a string key's value, or a hash
    /// field's value; None for a missing key or field, a key of another type, or a constant.
    fn lookup(&self, ctx: &mut Ctx<'_>, elem: &[u8]) -> Result<Option<Vec<u8>>, CommandError> {
        let (prefix, suffix, field) = match self {
            Pattern::Element => return Ok(Some(elem.to_vec())),
            Pattern::Constant => return Ok(None),
            Pattern::Key { prefix, suffix, field, .. } => (prefix, suffix, field),
        };
        let key = [prefix, elem, suffix].concat();
        let Some(k) = ctx.read(&key)? else { return Ok(None) };
        Ok(match field {
            Some(f) => k.hash().ok().and_then(|h| h.get(f)).map(Elem::to_vec),
            None => k.str().ok().map(<[u8]>::to_vec),
        })
    }
}

/// Valkey's `patternHashSlot`: the slot of every key a glob-style pattern can match, when a
/// hash tag (or the absence of wildcards) fixes it, else None. SORT applies it to BY and GET
/// patterns in cluster mode, where `*` is the wildcard.
fn pattern_slot(p: &[u8]) -> Option<u16> {
    let mut open: Option<usize> = None;
    let mut empty_tag = false;
    for (i, &c) in p.iter().enumerate() {
        match c {
            b'*' | b'?' | b'[' | b'\\' => return None,
            b'{' if open.is_none() && !empty_tag => open = Some(i),
            b'}' => match open {
                Some(o) if i == o + 1 => {
                    open = None;
                    empty_tag = true;
                }
                Some(o) => return Some(key_slot(&p[o..=i])),
                None => {}
            },
            _ => {}
        }
    }
    Some(key_slot(p))
}

/// A score as Valkey's SORT reads one with `strtod`: leading blanks skipped, decimal or
/// hexadecimal, `inf` accepted; None (the "can't be converted" error) for anything left over,
/// a value out of range or NaN. An empty string is 0, as `strtod` leaves nothing over.
fn sort_score(b: &[u8]) -> Option<f64> {
    let b = cstr(b);
    if b.is_empty() {
        return Some(0.0);
    }
    let blank = |c: &u8| matches!(c, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    let t = &b[b.iter().position(|c| !blank(c)).unwrap_or(b.len())..];
    hotkv_protocol::parse_long_double(t)
}

/// The bytes a C string function sees: up to the first NUL.
fn cstr(b: &[u8]) -> &[u8] {
    memchr::memchr(0, b).map_or(b, |n| &b[..n])
}

#[cfg(test)]
mod tests {
    use crate::testkit::arr;
    use hotkv_protocol::Protocol;

    use super::*;
    use crate::plan::LockScope;
    use crate::testkit::{TestKit, plan_of, with_args};

    #[test]
    fn numeric_alpha_desc_and_limit() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "3", "10", "2", "1.5", "-inf", "1e3"]);
        assert_eq!(t.run(&["SORT", "l"]), arr(&["-inf", "1.5", "2", "3", "10", "1e3"]));
        assert_eq!(t.run(&["SORT", "l", "DESC"]), arr(&["1e3", "10", "3", "2", "1.5", "-inf"]));
        assert_eq!(t.run(&["SORT", "l", "ALPHA"]), arr(&["-inf", "1.5", "10", "1e3", "2", "3"]));
        assert_eq!(t.run(&["SORT", "l", "LIMIT", "1", "2"]), arr(&["1.5", "2"]));
        assert_eq!(t.run(&["SORT", "l", "LIMIT", "-10", "2", "DESC", "ASC"]), arr(&["-inf", "1.5"]));
        assert_eq!(t.run(&["SORT", "l", "LIMIT", "4", "-1"]), arr(&["10", "1e3"]), "a negative count is all");
        assert_eq!(t.run(&["SORT", "l", "LIMIT", "6", "1"]), "*0\r\n");
        assert_eq!(t.run(&["SORT", "l", "LIMIT", "0", "0"]), "*0\r\n");
        let huge = i64::MAX.to_string();
        assert_eq!(t.run(&["SORT", "l", "LIMIT", "5", &huge]), arr(&["1e3"]));
        assert_eq!(t.run(&["SORT", "l", "LIMIT", &huge, &huge]), "*0\r\n");
        assert_eq!(t.run(&["SORT_RO", "l", "LIMIT", "0", "1", "DESC"]), arr(&["1e3"]));
        assert_eq!(t.run(&["SORT", "nokey"]), "*0\r\n");
        // Equal scores fall back to the elements' bytes.
        t.run(&["SADD", "s", "b", "a", "c"]);
        t.run(&["SET", "w_a", "1"]);
        assert_eq!(t.run(&["SORT", "s", "BY", "nokey_*"]), arr(&["a", "b", "c"]));
        assert_eq!(t.run(&["SORT", "s", "BY", "w_*"]), arr(&["b", "c", "a"]));
        assert_eq!(t.run(&["SORT", "s", "BY", "w_*", "DESC"]), arr(&["a", "c", "b"]));
    }

    #[test]
    fn by_and_get_read_strings_and_hash_fields() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "1", "2", "3"]);
        t.run(&["MSET", "w_1", "30", "w_2", "10", "w_3", "20", "n_1", "one", "n_3", "three"]);
        t.run(&["HSET", "h_1", "w", "3", "name", "uno"]);
        t.run(&["HSET", "h_2", "w", "1"]);
        t.run(&["HSET", "h_3", "w", "2"]);
        assert_eq!(t.run(&["SORT", "l", "BY", "w_*"]), arr(&["2", "3", "1"]));
        assert_eq!(t.run(&["SORT", "l", "BY", "h_*->w"]), arr(&["2", "3", "1"]));
        // GET reads the elements shown once sorted, not those first read in that range.
        assert_eq!(t.run(&["SORT", "l", "BY", "w_*", "LIMIT", "2", "1", "GET", "n_*"]), arr(&["one"]));
        assert_eq!(t.run(&["SORT", "l", "BY", "w_*", "DESC", "LIMIT", "0", "1", "GET", "n_*", "STORE", "o"]), ":1\r\n");
        assert_eq!(t.run(&["LRANGE", "o", "0", "-1"]), arr(&["one"]));
        assert_eq!(
            t.run(&["SORT", "l", "BY", "w_*", "GET", "#", "GET", "n_*", "GET", "h_*->name"]),
            "*9\r\n$1\r\n2\r\n$-1\r\n$-1\r\n$1\r\n3\r\n$5\r\nthree\r\n$-1\r\n$1\r\n1\r\n$3\r\none\r\n$3\r\nuno\r\n"
        );
        // A constant GET names no key; a key of another type gives nil too.
        assert_eq!(t.run(&["SORT", "l", "GET", "n_1"]), "*3\r\n$-1\r\n$-1\r\n$-1\r\n");
        assert_eq!(t.run(&["SORT", "l", "GET", "h_*"]), "*3\r\n$-1\r\n$-1\r\n$-1\r\n");
        // `->` with nothing after it is part of a plain key.
        t.run(&["SET", "x:1->", "100"]);
        assert_eq!(t.run(&["SORT", "l", "BY", "nosort", "GET", "x:*->", "LIMIT", "0", "1"]), arr(&["100"]));
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["SORT", "l", "GET", "n_*"]), "*3\r\n$3\r\none\r\n_\r\n$5\r\nthree\r\n");
    }

    #[test]
    fn alpha_by_pattern_puts_missing_values_first_and_compares_like_strcmp() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "a", "b", "c", "d"]);
        t.run(&["MSET", "k_a", "zz", "k_b", "a\0z", "k_c", "a\0b"]);
        // In a reply, strcoll in the C locale stops at the NUL: "a\0z" and "a\0b" tie and keep
        // their order; STORE compares whole strings.
        assert_eq!(t.run(&["SORT", "l", "BY", "k_*", "ALPHA"]), arr(&["d", "b", "c", "a"]));
        assert_eq!(t.run(&["SORT", "l", "BY", "k_*", "ALPHA", "STORE", "dst"]), ":4\r\n");
        assert_eq!(t.run(&["LRANGE", "dst", "0", "-1"]), arr(&["d", "c", "b", "a"]));
        assert_eq!(t.run(&["SORT", "l", "BY", "k_*", "ALPHA", "DESC"]), arr(&["a", "b", "c", "d"]));
    }

    #[test]
    fn nosort_keeps_native_order() {
        let mut t = TestKit::default();
        t.run(&["LPUSH", "l", "2", "1", "4", "3", "5"]);
        assert_eq!(t.run(&["SORT", "l", "BY", "nosort"]), arr(&["5", "3", "4", "1", "2"]));
        assert_eq!(t.run(&["SORT", "l", "BY", "nosort", "DESC", "LIMIT", "1", "2"]), arr(&["1", "4"]));
        t.run(&["ZADD", "z", "1", "a", "5", "b", "2", "c", "10", "d", "3", "e"]);
        assert_eq!(t.run(&["SORT", "z", "BY", "nosort"]), arr(&["a", "c", "e", "b", "d"]));
        assert_eq!(t.run(&["SORT", "z", "BY", "nosort", "DESC"]), arr(&["d", "b", "e", "c", "a"]));
        assert_eq!(t.run(&["SORT", "z", "BY", "nosort", "DESC", "LIMIT", "0", "2"]), arr(&["d", "b"]));
        assert_eq!(t.run(&["SORT", "z", "BY", "nosort", "LIMIT", "5", "10"]), "*0\r\n");
        assert_eq!(t.run(&["SORT", "z", "BY", "nosort", "LIMIT", "-10", "100"]), arr(&["a", "c", "e", "b", "d"]));
        assert_eq!(t.run(&["SORT", "z", "ALPHA", "DESC"]), arr(&["e", "d", "c", "b", "a"]));
        // A constant BY wins over a later pattern, as in Valkey.
        assert_eq!(t.run(&["SORT", "l", "BY", "nosort", "BY", "w_*"]), arr(&["5", "3", "4", "1", "2"]));
        // A set stored BY nosort is sorted (as strings), so replicas agree.
        t.run(&["SADD", "s", "b", "aa", "a", "10", "9"]);
        assert_eq!(t.run(&["SORT", "s", "BY", "nosort", "STORE", "dst"]), ":5\r\n");
        assert_eq!(t.run(&["LRANGE", "dst", "0", "-1"]), arr(&["10", "9", "a", "aa", "b"]));
    }

    #[test]
    fn store_writes_a_list_or_deletes_and_propagates_the_result() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "3", "1", "2"]);
        t.run(&["SET", "dst", "old", "EX", "100"]);
        t.events.take();
        t.record = true;
        assert_eq!(t.run(&["SORT", "l", "STORE", "dst"]), ":3\r\n");
        assert_eq!(t.run(&["LRANGE", "dst", "0", "-1"]), arr(&["1", "2", "3"]));
        assert_eq!(t.run(&["TTL", "dst"]), ":-1\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "dst"]), "$8\r\nlistpack\r\n");
        assert_eq!(t.events.take(), ["l:sortstore:dst@0"]);
        assert_eq!(
            std::mem::take(&mut t.stream),
            ["0: MULTI", "0: DEL dst", "0: RPUSH dst 1 2 3", "0: EXEC"].map(|l| l
                .replace("0: MULTI", &format!("{}: MULTI", crate::propagate::NO_DB))
                .replace("0: EXEC", &format!("{}: EXEC", crate::propagate::NO_DB)))
        );
        assert_eq!(t.run(&["SORT", "l", "STORE", "new", "GET", "#", "GET", "nokey_*"]), ":6\r\n");
        assert_eq!(t.run(&["LRANGE", "new", "0", "-1"]), arr(&["1", "", "2", "", "3", ""]));
        let events = t.events.take();
        assert_eq!(events[3..], ["n:new:new@0", "l:sortstore:new@0"]);
        assert_eq!(events[0], "m:keymiss:nokey_1@0", "pattern keys are read as any key is");
        assert_eq!(std::mem::take(&mut t.stream), ["0: RPUSH new 1  2  3 "]);
        // An empty result deletes the destination, and stores nothing when it is missing.
        assert_eq!(t.run(&["SORT", "l", "LIMIT", "10", "10", "STORE", "dst"]), ":0\r\n");
        assert_eq!(t.events.take(), ["g:del:dst@0"]);
        assert_eq!(t.run(&["EXISTS", "dst"]), ":0\r\n");
        assert_eq!(std::mem::take(&mut t.stream), ["0: DEL dst"]);
        t.events.take();
        assert_eq!(t.run(&["SORT", "nokey", "STORE", "dst"]), ":0\r\n");
        assert_eq!((t.events.take(), t.stream.len()), (vec!["m:keymiss:nokey@0".to_string()], 0));
        // The last STORE wins; SORT_RO knows no STORE.
        assert_eq!(t.run(&["SORT", "l", "STORE", "a", "STORE", "b"]), ":3\r\n");
        assert_eq!(t.run(&["EXISTS", "a", "b"]), ":1\r\n");
        assert_eq!(t.run(&["SORT_RO", "l", "STORE", "b"]), "-ERR syntax error\r\n");
    }

    #[test]
    fn errors() {
        let mut t = TestKit::default();
        t.run(&["SET", "str", "x"]);
        t.run(&["SADD", "s", "1", "2", "not-a-double"]);
        t.run(&["RPUSH", "l", "1", "2"]);
        assert_eq!(t.run(&["SORT", "str"]), "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n");
        assert_eq!(t.run(&["SORT", "s"]), "-ERR One or more scores can't be converted into double\r\n");
        assert_eq!(t.run(&["SORT", "s", "ALPHA"]), arr(&["1", "2", "not-a-double"]));
        t.run(&["MSET", "w_1", "1", "w_2", "nan"]);
        assert_eq!(t.run(&["SORT", "l", "BY", "w_*"]), "-ERR One or more scores can't be converted into double\r\n");
        assert_eq!(
            t.run(&["SORT", "l", "BY", "w_*", "STORE", "d"]),
            "-ERR One or more scores can't be converted into double\r\n"
        );
        assert_eq!(t.run(&["EXISTS", "d"]), ":0\r\n");
        assert_eq!(t.run(&["SORT", "l", "LIMIT", "1"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SORT", "l", "LIMIT", "a", "1"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["SORT", "l", "BY"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SORT", "l", "FOO"]), "-ERR syntax error\r\n");
        // Options are checked before the key's type.
        assert_eq!(t.run(&["SORT", "str", "FOO"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SORT"]), "-ERR wrong number of arguments for 'sort' command\r\n");
    }

    /// The partial sort puts in the range what a full sort would, and orders equal elements
    /// as Valkey's `pqsort` does (the expectations come from Valkey 8.0.1's pqsort.c, compiled
    /// and run on the same input; 3000 random tie-heavy inputs agreed when this was written).
    #[test]
    fn partial_sort_matches_a_full_sort_in_range_and_pqsort_on_ties() {
        let by_key = |a: &(i64, usize), b: &(i64, usize)| a.0.cmp(&b.0);
        let ids = |keys: &[i64], lo: usize, hi: usize| {
            let mut v: Vec<(i64, usize)> = keys.iter().copied().zip(0..).collect();
            partial_sort(&mut v, lo, hi, &by_key);
            v[lo..=hi].iter().map(|p| p.1).collect::<Vec<_>>()
        };
        assert_eq!(ids(&[1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0], 2, 5), [1, 9, 5, 11]);
        let pi = [
            3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9, 5, 0, 2, 8, 8,
            4, 1, 9, 7, 1, 6, 9, 3, 9, 9, 3, 7, 5, 1,
        ];
        assert_eq!(ids(&pi, 10, 14), [21, 0, 9, 15, 17]);
        // Distinct keys: exactly the full sort's slice, for ranges anywhere.
        let mut seed = 1u64;
        for n in [1usize, 6, 7, 8, 41, 300] {
            let keys: Vec<i64> = (0..n as i64)
                .map(|i| {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((seed >> 33) as i64) * 1000 + i
                })
                .collect();
            let mut full = keys.clone();
            full.sort();
            for (lo, hi) in [(0, 0), (0, n - 1), (n / 2, n - 1), (n / 3, n / 2), (n - 1, n - 1)] {
                let mut v = keys.clone();
                partial_sort(&mut v, lo, hi, &|a: &i64, b: &i64| a.cmp(b));
                assert_eq!(v[lo..=hi], full[lo..=hi], "n={n} range {lo}..={hi}");
            }
        }
    }

    #[test]
    fn scores_are_read_as_strtod_reads_them() {
        assert_eq!(sort_score(b" 12"), Some(12.0));
        assert_eq!(sort_score(b""), Some(0.0));
        assert_eq!(sort_score(b"0x10"), Some(16.0));
        assert_eq!(sort_score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(sort_score(b"1.5e2"), Some(150.0));
        assert_eq!(sort_score(b"7\0junk"), Some(7.0), "C strings end at NUL");
        for bad in [&b"  "[..], b"12 ", b"abc", b"nan", b"1e400", b"1e-400", b"0x"] {
            assert_eq!(sort_score(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn patterns_as_valkey_reads_them() {
        assert!(matches!(Pattern::of(b"#"), Pattern::Element));
        assert!(matches!(Pattern::of(b"#\0x"), Pattern::Element));
        assert!(matches!(Pattern::of(b"nosort"), Pattern::Constant));
        assert!(matches!(Pattern::of(b"a\0*"), Pattern::Constant));
        let Pattern::Key { prefix, suffix, field, .. } = Pattern::of(b"a*b->f") else { panic!() };
        assert_eq!((prefix, suffix, field), (&b"a"[..], &b"b"[..], Some(&b"f"[..])));
        let Pattern::Key { prefix, suffix, field, .. } = Pattern::of(b"a->*->") else { panic!() };
        assert_eq!((prefix, suffix, field), (&b"a->"[..], &b"->"[..], None));
        assert_eq!(pattern_slot(b"{a}by*"), Some(key_slot(b"a")));
        assert_eq!(pattern_slot(b"by*"), None);
        assert_eq!(pattern_slot(b"#"), Some(key_slot(b"#")));
        assert_eq!(pattern_slot(b"{}{a}*"), None);
        assert_eq!(pattern_slot(b"{}{a}"), Some(key_slot(b"{}{a}")));
        assert_eq!(pattern_slot(b"x\\{a}"), None);
    }

    #[test]
    fn cluster_mode_refuses_patterns_of_other_slots() {
        let mut t = TestKit::default();
        t.cfg.cluster = true;
        t.run(&["RPUSH", "{a}l", "1", "2", "3"]);
        t.run(&["MSET", "{a}by1", "20", "{a}by2", "30", "{a}by3", "0", "{a}get1", "200", "{a}get2", "100"]);
        let by = "-ERR BY option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.\r\n";
        let get = "-ERR GET option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.\r\n";
        assert_eq!(t.run(&["SORT", "{a}l", "BY", "by*"]), by);
        assert_eq!(t.run(&["SORT_RO", "{a}l", "BY", "{b}by*"]), by);
        assert_eq!(t.run(&["SORT", "{a}l", "BY", "{a}by*"]), arr(&["3", "1", "2"]));
        assert_eq!(t.run(&["SORT", "{a}l", "BY", "nosort"]), arr(&["1", "2", "3"]), "a constant is never checked");
        assert_eq!(t.run(&["SORT", "{a}l", "BY", "{a}by*", "GET", "get*"]), get);
        assert_eq!(t.run(&["SORT", "{a}l", "GET", "#"]), get, "Valkey checks `#` too");
        assert_eq!(
            t.run(&["SORT", "{a}l", "BY", "{a}by*", "GET", "{a}get*"]),
            "*3\r\n$-1\r\n$3\r\n200\r\n$3\r\n100\r\n"
        );
    }

    #[test]
    fn keys_and_plans() {
        let keys = |argv: &[&str]| {
            with_args(argv, |args| {
                let mut found = Vec::new();
                sort_keys(args, &mut |pos, _| found.push(args.get(pos).to_vec()));
                found
            })
        };
        assert_eq!(keys(&["SORT", "abc", "STORE", "def"]), [b"abc".to_vec(), b"def".to_vec()]);
        assert_eq!(
            keys(&["SORT", "abc", "store", "invalid", "store", "stillbad", "store", "def"]),
            [b"abc".to_vec(), b"def".to_vec()]
        );
        assert_eq!(keys(&["SORT", "abc", "GET", "store", "LIMIT", "store", "x", "STORE"]), [b"abc".to_vec()]);
        assert_eq!(keys(&["SORT", "abc", "BY", "x", "STORE", "d"]), [b"abc".to_vec(), b"d".to_vec()]);
        let p = plan_of(&["SORT", "a", "STORE", "b"], 0, 16);
        assert_eq!((p.locks().len(), p.lock_scope()), (2, LockScope::Keys));
        assert_eq!(plan_of(&["SORT", "a", "BY", "w_*"], 0, 16).lock_scope(), LockScope::Database);
        assert_eq!(plan_of(&["SORT", "a", "GET", "#", "GET", "n_*"], 0, 16).lock_scope(), LockScope::Database);
        assert_eq!(plan_of(&["SORT_RO", "a", "GET", "n_*"], 0, 16).lock_scope(), LockScope::Database);
        assert_eq!(plan_of(&["SORT", "{a}l", "BY", "{a}w_*", "GET", "{a}n_*"], 0, 16).lock_scope(), LockScope::Keys);
        assert_eq!(
            plan_of(&["SORT", "a", "BY", "nosort", "GET", "#", "GET", "k"], 0, 16).lock_scope(),
            LockScope::Keys
        );
        assert_eq!(plan_of(&["SORT", "a", "BY", "nosort", "BY", "w_*"], 0, 16).lock_scope(), LockScope::Keys);
        assert_eq!(plan_of(&["SORT", "a", "BY", "w_*", "FOO"], 0, 16).lock_scope(), LockScope::Keys, "fails first");
    }

    /// A pattern key whose slot lock is busy and below the sorted key's cannot be waited for
    /// in order: the call asks to start over with it taken up front, having written nothing,
    /// and then sees every key. A call that cannot start over waits for it a bounded time.
    #[test]
    fn a_busy_pattern_lock_below_a_held_one_makes_the_call_start_over() {
        let mut t = TestKit::default();
        let list_slot = key_slot(b"list");
        let elem =
            (0..1000).map(|i| i.to_string()).find(|e| key_slot(format!("w_{e}").as_bytes()) < list_slot).unwrap();
        t.run(&["RPUSH", "list", &elem, "x"]);
        t.run(&["SET", &format!("w_{elem}"), "5"]);
        t.run(&["SET", "w_x", "1"]);
        let busy = lock_id(0, key_slot(format!("w_{elem}").as_bytes()));
        let declared = [lock_id(0, list_slot)];
        let (ks, cfg) = (&t.ks, &t.cfg);
        let call = |may_restart: bool| {
            let mut stats = crate::ctx::LocalStats::default();
            let mut out = ReplyBuf::new();
            let mut ctx = Ctx::new(ks, 0, t.now_ms, cfg, &mut stats, false, &crate::ctx::NoEvents, ks.lock(&declared));
            ctx.may_restart = may_restart;
            let r = with_args(&["SORT", "list", "BY", "w_*"], |args| sort(&mut ctx, *args, &mut out));
            (
                r.map_err(|e| e.message().to_string()),
                ctx.restart.take(),
                String::from_utf8_lossy(out.as_bytes()).into_owned(),
            )
        };
        std::thread::scope(|s| {
            let (held, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
            s.spawn(move || {
                let guard = ks.slot_by_id(busy).lock();
                held.0.send(()).unwrap();
                release.1.recv().unwrap();
                std::thread::sleep(std::time::Duration::from_millis(30));
                drop(guard);
            });
            held.1.recv().unwrap();
            let (r, restart, out) = call(true);
            assert_eq!((r, out), (Ok(()), String::new()), "starts over, replying nothing");
            assert!(restart.is_some_and(|ids| ids.contains(&busy)));
            // Without a way to start over: waits (the holder lets go after 30 ms).
            release.0.send(()).unwrap();
            assert_eq!(call(false), (Ok(()), None, arr(&["x", &elem])));
        });
        // Through the test kit's dispatcher loop, with nothing busy: no restart.
        assert_eq!(t.run(&["SORT", "list", "BY", "w_*"]), arr(&["x", &elem]));
        assert_eq!(t.restarts, 0);
    }
}
