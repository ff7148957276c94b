//! XREAD and XREADGROUP (Valkey's `xreadCommand`), blocking included.
//!
//! Without data a blocking call asks to wait on its keys ([`Ctx::block_on_with`]) with `$`
//! replaced by the id that was last, as Valkey rewrites it, so that the re-run after an XADD
//! reads what came since. The waiters on one stream wait for different ids, so each is tried
//! in turn (arrival order), not only the first. A re-run that finds the key gone or of another
//! type keeps waiting (XREAD), as Valkey only wakes stream readers for streams.

use hotkv_protocol::{Args, ReplyBuf};

use super::stream::{collect_range, invalid_id, parse_strict_id, reply_entries};
use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{BeginSearch, CommandSpec, FindKeys, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{BlockMode, Ctx};
use crate::error::{CmdResult, CommandError};
use crate::types::stream::{Entry, StreamId};

/// XREAD's row (XREADGROUP's is in `stream_group.rs`).
pub static COMMANDS: &[Spec] = &[CommandSpec::new(
    "xread",
    -4,
    flags::READONLY | flags::BLOCKING,
    acl::STREAM,
    &[KeySpec {
        flags: kf::RO | kf::ACCESS,
        begin: BeginSearch::Keyword { keyword: "STREAMS", start_from: 1 },
        find: FindKeys::Range { last_key: -1, step: 1, limit: 2 },
    }],
    "stream",
    "5.0.0",
    "Returns messages from multiple streams with IDs greater than the ones requested. Blocks until a message is available otherwise.",
    "",
    EngineCmd { run: xread, plan: LockPlan::Keys },
)
.with_getkeys(xread_keys)];

/// XREAD's keys (Valkey's `xreadGetKeys`): the first half of the arguments after STREAMS,
/// none when they do not pair up, so the handler can give its own error for that.
fn xread_keys(args: &Args<'_>, found: &mut dyn FnMut(usize, u32)) {
    stream_keys(args, kf::RO | kf::ACCESS, found);
}

/// The keys of XREAD or XREADGROUP, reported with `flags`.
pub(crate) fn stream_keys(args: &Args<'_>, flags: u32, found: &mut dyn FnMut(usize, u32)) {
    let argc = args.len();
    let mut i = 1;
    let mut streams = None;
    while i < argc {
        let a = args.get(i);
        if a.eq_ignore_ascii_case(b"block") || a.eq_ignore_ascii_case(b"count") {
            i += 1;
        } else if a.eq_ignore_ascii_case(b"group") {
            i += 2;
        } else if a.eq_ignore_ascii_case(b"streams") {
            streams = Some(i);
            break;
        }
        i += 1;
    }
    let Some(at) = streams else { return };
    let n = argc - at - 1;
    if n == 0 || !n.is_multiple_of(2) {
        return;
    }
    for k in at + 1..at + 1 + n / 2 {
        found(k, flags);
    }
}

/// XREAD/XREADGROUP options (everything before the keys and ids).
pub(crate) struct ReadArgs<'a> {
    /// COUNT, 0 for all.
    pub count: usize,
    /// BLOCK: `None` without it, `Some(None)` to wait forever, else the deadline (unix ms).
    pub block: Option<Option<i64>>,
    /// Index of the first key.
    pub first_key: usize,
    /// Number of streams.
    pub n: usize,
    /// GROUP's group and consumer.
    pub group: Option<(&'a [u8], &'a [u8])>,
    /// NOACK.
    pub noack: bool,
}

/// Parses the options as `xreadCommand` does, in its order of checks.
pub(crate) fn parse_read_args<'a>(args: &Args<'a>, now_ms: i64, group_cmd: bool) -> Result<ReadArgs<'a>, CommandError> {
    let mut r = ReadArgs { count: 0, block: None, first_key: 0, n: 0, group: None, noack: false };
    let argc = args.len();
    let mut i = 1;
    while i < argc {
        let more = argc - i - 1;
        let o = args.get(i);
        if o.eq_ignore_ascii_case(b"block") && more > 0 {
            i += 1;
            let ms = hotkv_protocol::parse_i64(args.get(i))
                .ok_or_else(|| CommandError::err("timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(CommandError::err("timeout is negative"));
            }
            r.block = Some(if ms == 0 {
                None
            } else {
                Some(now_ms.checked_add(ms).ok_or_else(|| CommandError::err("timeout is out of range"))?)
            });
        } else if o.eq_ignore_ascii_case(b"count") && more > 0 {
            i += 1;
            r.count = usize::try_from(int_arg(args.get(i))?.max(0)).unwrap_or(usize::MAX);
        } else if o.eq_ignore_ascii_case(b"streams") && more > 0 {
            let rest = argc - (i + 1);
            if !rest.is_multiple_of(2) {
                let (name, sym) = if group_cmd { ("xreadgroup", '>') } else { ("xread", '$') };
                return Err(CommandError::err(format!(
                    "Unbalanced '{name}' list of streams: for each stream key an ID or '{sym}' must be specified."
                )));
            }
            r.first_key = i + 1;
            r.n = rest / 2;
            break;
        } else if o.eq_ignore_ascii_case(b"group") && more >= 2 {
            if !group_cmd {
                return Err(CommandError::err(
                    "The GROUP option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.group = Some((args.get(i + 1), args.get(i + 2)));
            i += 2;
        } else if o.eq_ignore_ascii_case(b"noack") {
            if !group_cmd {
                return Err(CommandError::err(
                    "The NOACK option is only supported by XREADGROUP. You called XREAD instead.",
                ));
            }
            r.noack = true;
        } else {
            return Err(CommandError::Syntax);
        }
        i += 1;
    }
    if r.first_key == 0 {
        return Err(CommandError::Syntax);
    }
    if group_cmd && r.group.is_none() {
        return Err(CommandError::err("Missing GROUP option for XREADGROUP"));
    }
    Ok(r)
}

/// Writes the reply of a read that found something: per stream, its key and entries (a map in
/// RESP3).
pub(crate) fn reply_streams(out: &mut ReplyBuf, served: &[(&[u8], Vec<Entry<'_>>)]) {
    if out.is_resp3() {
        out.map(served.len());
    } else {
        out.array(served.len());
    }
    for (key, entries) in served {
        if !out.is_resp3() {
            out.array(2);
        }
        out.bulk(key);
        reply_entries(out, entries);
    }
}

/// The reply when nothing came: a null array (RESP3 null).
pub(crate) fn reply_nothing(out: &mut ReplyBuf) {
    out.null_array();
}

fn xread(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let r = parse_read_args(&args, ctx.now_ms, false)?;
    let serving = ctx.block_mode == BlockMode::Serving;
    // Resolve every id first: `$` and `+` from the stream as it is now.
    let mut ids = Vec::with_capacity(r.n.min(1024));
    let mut dollar = false;
    for j in 0..r.n {
        let key = args.get(r.first_key + j);
        let id_arg = args.get(r.first_key + r.n + j);
        let last = match ctx.read(key)? {
            Some(k) => match k.stream() {
                Ok(s) => Some(s.last_id),
                Err(e) if !serving => return Err(e),
                Err(_) => None,
            },
            None => None,
        };
        let id = match id_arg {
            b"$" => {
                dollar = true;
                last.unwrap_or_default()
            }
            b"+" => match last {
                Some(l) => l.decr().ok_or_else(|| CommandError::err("the stream last element ID is 0-0"))?,
                None => StreamId::MIN,
            },
            b">" => {
                return Err(CommandError::err(
                    "The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
                ));
            }
            other => parse_strict_id(other, 0).map_err(|_| invalid_id())?,
        };
        ids.push(id);
    }
    let mut served = Vec::new();
    for (j, &after) in ids.iter().enumerate() {
        let key = args.get(r.first_key + j);
        let Some(k) = ctx.read(key)? else { continue };
        let Ok(s) = k.stream() else { continue };
        if s.is_empty() || s.edge_id(false).is_none_or(|top| top <= after) {
            continue;
        }
        let Some(start) = after.incr() else { continue };
        let entries: Vec<Entry<'_>> = collect_range(s, start, StreamId::MAX, false, r.count);
        // The entries borrow the stream under this call's lock; owned copies outlive the
        // lookup of the next key.
        served.push((key, entries.iter().map(owned).collect::<Vec<_>>()));
    }
    if !served.is_empty() {
        let view: Vec<(&[u8], Vec<Entry<'_>>)> =
            served.iter().map(|(k, es)| (*k, es.iter().map(borrow).collect())).collect();
        reply_streams(out, &view);
        return Ok(());
    }
    match r.block {
        Some(deadline) if ctx.can_block() => {
            let keys = (0..r.n).map(|j| args.get(r.first_key + j).to_vec()).collect();
            let argv = dollar.then(|| {
                let mut argv: Vec<Vec<u8>> = args.iter().map(<[u8]>::to_vec).collect();
                for (j, id) in ids.iter().enumerate() {
                    if argv[r.first_key + r.n + j] == b"$" {
                        argv[r.first_key + r.n + j] = id.to_bytes();
                    }
                }
                argv
            });
            ctx.block_on_with(keys, deadline, argv);
        }
        _ => reply_nothing(out),
    }
    Ok(())
}

/// An entry copied out of its stream.
pub(crate) struct OwnedEntry {
    id: StreamId,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
}

pub(crate) fn owned(e: &Entry<'_>) -> OwnedEntry {
    OwnedEntry { id: e.id, fields: e.fields.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect() }
}

pub(crate) fn borrow(e: &OwnedEntry) -> Entry<'_> {
    use crate::types::lpentry::Elem;
    Entry { id: e.id, fields: e.fields.iter().map(|(f, v)| (Elem::Str(f), Elem::Str(v))).collect() }
}

#[cfg(test)]
mod tests {
    use crate::ctx::BlockMode;
    use crate::testkit::TestKit;

    #[test]
    fn xread_reads_and_blocks_with_dollar_resolved() {
        let mut t = TestKit::default();
        t.run(&["XADD", "s", "1-1", "a", "1"]);
        assert_eq!(
            t.run(&["XREAD", "STREAMS", "s", "0"]),
            "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"
        );
        assert_eq!(t.run(&["XREAD", "STREAMS", "s", "$"]), "*-1\r\n");
        assert_eq!(t.run(&["XREAD", "STREAMS", "s", "+"]).matches("1-1").count(), 1);
        assert_eq!(t.run(&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]), "");
        let req = t.last_block.take().unwrap();
        assert_eq!(req.argv.unwrap().last().unwrap(), b"1-1");
        assert_eq!(
            t.run(&["XREAD", "STREAMS", "s", "t", "0"]),
            "-ERR Unbalanced 'xread' list of streams: for each stream key an ID or '$' must be specified.\r\n"
        );
        assert_eq!(
            t.run(&["XREAD", "STREAMS", "s", ">"]),
            "-ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.\r\n"
        );
        let mut t = TestKit { block_mode: BlockMode::TimedOut, ..TestKit::default() };
        assert_eq!(t.run(&["XREAD", "BLOCK", "10", "STREAMS", "s", "$"]), "*-1\r\n");
    }
}
