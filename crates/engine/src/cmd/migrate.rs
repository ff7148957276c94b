//! MIGRATE: moves keys to another instance in two turns (see [`crate::remote`]). The first
//! reads the values under the slot locks and hands the dispatcher the RESTOREs to send; the
//! second, under the same locks once the target answered, deletes what the target
//! acknowledged.
//!
//! Valkey runs MIGRATE on its only thread, so nothing can change a key between the DUMP and
//! the DEL. Here other clients run while the target is busy, so a key is deleted only if it
//! still holds exactly what was sent; one written meanwhile is sent again (REPLACE) and one
//! deleted meanwhile is deleted on the target too, before the command answers. Nothing a
//! client wrote during the move is lost, and no key is left on both sides.

use hotkv_protocol::{Args, ReplyBuf};

use super::{EngineCmd, LockPlan, Spec, dump::payload_strings};
use crate::command::{BeginSearch, CommandSpec, FindKeys, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, LookupFlags};
use crate::error::{CmdResult, CommandError};
use crate::remote::{MigrateOp, MigrateReply, MigrateRequest, RemoteOutcome, RemoteRequest};

const KEY_FLAGS: u32 = kf::RW | kf::ACCESS | kf::DELETE;

/// Reading a value to move it is not an access by a client.
const NO_TOUCH: LookupFlags = LookupFlags { no_touch: true, no_notify: false };

/// The MIGRATE row.
pub static COMMANDS: &[Spec] = &[CommandSpec::new(
    "migrate",
    -6,
    flags::WRITE,
    acl::KEYSPACE | acl::DANGEROUS,
    &[
        KeySpec::single(3, KEY_FLAGS),
        KeySpec {
            flags: KEY_FLAGS | kf::INCOMPLETE,
            begin: BeginSearch::Keyword { keyword: "KEYS", start_from: -2 },
            find: FindKeys::Range { last_key: -1, step: 1, limit: 0 },
        },
    ],
    "generic",
    "2.6.0",
    "Atomically transfers a key from one instance to another.",
    "This command actually executes a DUMP+DEL in the source instance, and a RESTORE in the target instance. See the pages of these commands for time complexity. Also an O(N) data transfer between the two instances is performed.",
    EngineCmd { run: migrate, plan: LockPlan::Keys },
)
.with_tips(&["nondeterministic_output"])
.with_getkeys(migrate_keys)];

/// How many times keys written during their move are sent again before MIGRATE gives up
/// on them (they then stay here, and the target holds an older copy under REPLACE).
const MAX_ROUNDS: usize = 16;

/// Valkey's `migrateGetKeys`: the key argument, or, with KEYS, every argument after it
/// (the key argument is then the empty string and not a key).
fn migrate_keys(args: &Args<'_>, found: &mut dyn FnMut(usize, u32)) {
    let (first, count) = keys_range(args);
    for i in first..first + count {
        found(i, KEY_FLAGS);
    }
}

/// (first key, number of keys), skipping the values of AUTH and AUTH2 while looking for KEYS.
fn keys_range(args: &Args<'_>) -> (usize, usize) {
    let mut i = 6;
    while i < args.len() {
        let a = args.get(i);
        if a.eq_ignore_ascii_case(b"keys") {
            return (i + 1, args.len() - i - 1);
        }
        if a.eq_ignore_ascii_case(b"auth") {
            i += 1;
        } else if a.eq_ignore_ascii_case(b"auth2") {
            i += 2;
        }
        i += 1;
    }
    (3, 1)
}

struct MigrateArgs {
    copy: bool,
    replace: bool,
    auth: Option<(Option<Vec<u8>>, Vec<u8>)>,
    db: i64,
    timeout_ms: u64,
}

/// Valkey's checks, in its order: options first, then the timeout and the database.
fn parse(args: &Args<'_>) -> Result<MigrateArgs, CommandError> {
    let mut a = MigrateArgs { copy: false, replace: false, auth: None, db: 0, timeout_ms: 0 };
    let mut j = 6;
    while j < args.len() {
        let opt = args.get(j);
        let more = args.len() - 1 - j;
        if opt.eq_ignore_ascii_case(b"copy") {
            a.copy = true;
        } else if opt.eq_ignore_ascii_case(b"replace") {
            a.replace = true;
        } else if opt.eq_ignore_ascii_case(b"auth") {
            if more == 0 {
                return Err(CommandError::Syntax);
            }
            a.auth = Some((None, args.get(j + 1).to_vec()));
            j += 1;
        } else if opt.eq_ignore_ascii_case(b"auth2") {
            if more < 2 {
                return Err(CommandError::Syntax);
            }
            a.auth = Some((Some(args.get(j + 1).to_vec()), args.get(j + 2).to_vec()));
            j += 2;
        } else if opt.eq_ignore_ascii_case(b"keys") {
            if !args.get(3).is_empty() {
                return Err(CommandError::err(
                    "When using MIGRATE KEYS option, the key argument must be set to the empty string",
                ));
            }
            break;
        } else {
            return Err(CommandError::Syntax);
        }
        j += 1;
    }
    let timeout = hotkv_protocol::parse_i64(args.get(5)).ok_or(CommandError::NotInteger)?;
    a.db = hotkv_protocol::parse_i64(args.get(4)).ok_or(CommandError::NotInteger)?;
    a.timeout_ms = if timeout <= 0 { 1000 } else { timeout as u64 };
    Ok(a)
}

fn migrate(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let opts = parse(&args)?;
    if let Some(RemoteOutcome::Migrate(sent, reply)) = ctx.resume.take() {
        return finish(ctx, &opts, sent, reply, out);
    }
    let (first, count) = keys_range(&args);
    let mut ops = Vec::with_capacity(count);
    for key in (first..first + count).map(|i| args.get(i)) {
        if let Some(op) = restore_op(ctx, key, opts.replace)? {
            ops.push(op);
        }
    }
    // Every key missing (often just expired): nothing to do, and not an error.
    if ops.is_empty() {
        out.simple("NOKEY");
        return Ok(());
    }
    if !opts.copy {
        hold(ctx, &ops);
    }
    ctx.remote = Some(RemoteRequest::Migrate(MigrateRequest {
        host: String::from_utf8_lossy(args.get(1)).into_owned(),
        port: String::from_utf8_lossy(args.get(2)).into_owned(),
        db: opts.db,
        timeout_ms: opts.timeout_ms,
        auth: opts.auth,
        asking: ctx.cfg.cluster,
        ops,
        round: 0,
    }));
    Ok(())
}

/// The RESTORE that recreates `key` as it is now, or None when it is missing or expired.
fn restore_op(ctx: &mut Ctx<'_>, key: &[u8], replace: bool) -> Result<Option<MigrateOp>, CommandError> {
    let now = ctx.now_ms;
    let strings = payload_strings(ctx.cfg);
    let Some(k) = ctx.read_with(key, NO_TOUCH)? else { return Ok(None) };
    let expire = k.entry().expire();
    let ttl_ms = match expire {
        None => 0,
        Some(at) if at < now => return Ok(None),
        Some(at) => (at - now).max(1),
    };
    Ok(Some(MigrateOp::Restore {
        key: key.to_vec(),
        ttl_ms,
        payload: crate::rdb::dump_value(k.value(), strings),
        expire,
        replace,
    }))
}

/// The second turn: delete what the target acknowledged and still holds what was sent, send
/// again what changed meanwhile, then answer.
fn finish(
    ctx: &mut Ctx<'_>,
    opts: &MigrateArgs,
    sent: MigrateRequest,
    reply: MigrateReply,
    out: &mut ReplyBuf,
) -> CmdResult {
    // The stream gets the deletes, never the MIGRATE: a replica must not send keys anywhere.
    ctx.effects.suppress();
    if !opts.copy {
        for op in &sent.ops {
            ctx.ks.in_flight_remove(ctx.db, op.key());
        }
    }
    let mut again = Vec::new();
    // Each key is encoded as it was sent: the compressor's output depends on the value alone.
    let strings = payload_strings(ctx.cfg);
    for (op, ok) in sent.ops.iter().zip(&reply.acked) {
        let MigrateOp::Restore { key, payload: was, expire, .. } = op else { continue };
        if !ok || opts.copy {
            continue;
        }
        let unchanged = match ctx.read_with(key, NO_TOUCH)? {
            Some(k) => k.entry().expire() == *expire && crate::rdb::dump_value(k.value(), strings) == *was,
            None => {
                // Deleted (or expired) here after it was sent: the target must not keep it.
                again.push(MigrateOp::Delete { key: key.clone() });
                continue;
            }
        };
        if unchanged {
            ctx.delete(key)?;
            ctx.propagate_as(&[b"DEL".as_slice(), key]);
            ctx.events.notify('g', "del", key, ctx.db);
        } else if let Some(op) = restore_op(ctx, key, true)? {
            again.push(op);
        }
    }
    if let Some(e) = reply.error {
        return Err(CommandError::raw(e.reply()));
    }
    if again.is_empty() {
        out.ok();
        return Ok(());
    }
    if sent.round + 1 >= MAX_ROUNDS {
        return Err(CommandError::err(format!(
            "{} keys were written during MIGRATE every time they were sent; they stay on this node",
            again.len()
        )));
    }
    hold(ctx, &again);
    ctx.remote = Some(RemoteRequest::Migrate(MigrateRequest { ops: again, round: sent.round + 1, ..sent }));
    Ok(())
}

/// Marks the keys of `ops` in flight until the next turn settles them: a client that deletes
/// one meanwhile and writes it again must write it here, not on the target (ASK), where the
/// DEL this MIGRATE will send could remove it.
fn hold(ctx: &Ctx<'_>, ops: &[MigrateOp]) {
    for op in ops {
        ctx.ks.in_flight_add(ctx.db, op.key());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{TestKit, plan_of};

    #[test]
    fn keys_are_the_key_argument_or_those_after_keys() {
        let keys = |argv: &[&str]| -> Vec<String> {
            plan_of(argv, 0, 16).keys().iter().map(|k| argv[k.pos as usize].to_string()).collect()
        };
        assert_eq!(keys(&["migrate", "h", "1", "k", "0", "10"]), ["k"]);
        assert_eq!(keys(&["migrate", "h", "1", "", "0", "10", "KEYS", "a", "b"]), ["a", "b"]);
        // AUTH's password is not mistaken for the KEYS keyword.
        assert_eq!(keys(&["migrate", "h", "1", "", "0", "10", "AUTH", "keys", "keys", "x"]), ["x"]);
        assert_eq!(keys(&["migrate", "h", "1", "", "0", "10", "auth2", "u", "keys", "KEYS", "y"]), ["y"]);
    }

    #[test]
    fn first_turn_hands_over_the_values_and_keeps_them() {
        let mut t = TestKit::default();
        t.run(&["set", "a", "1"]);
        t.run(&["set", "b", "2"]);
        t.run(&["pexpire", "b", "5000"]);
        let (reply, remote) = t.run_remote(&["migrate", "h", "7", "", "0", "100", "REPLACE", "KEYS", "a", "b", "c"]);
        assert_eq!(reply, "");
        let Some(RemoteRequest::Migrate(req)) = remote else { panic!("no request") };
        assert_eq!((req.host.as_str(), req.port.as_str(), req.timeout_ms, req.asking), ("h", "7", 100, false));
        let keys: Vec<&[u8]> = req.ops.iter().map(MigrateOp::key).collect();
        assert_eq!(keys, [b"a".as_slice(), b"b"]);
        let MigrateOp::Restore { ttl_ms, replace, .. } = &req.ops[1] else { panic!() };
        assert!(*replace && *ttl_ms > 4000 && *ttl_ms <= 5000);
        assert_eq!(t.run(&["exists", "a", "b"]), ":2\r\n");
    }

    #[test]
    fn nokey_when_nothing_is_here_and_argument_errors_as_valkey() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["migrate", "h", "7", "k", "0", "100"]), "+NOKEY\r\n");
        assert_eq!(
            t.run(&["migrate", "h", "7", "k", "0", "100", "KEYS", "a"]),
            "-ERR When using MIGRATE KEYS option, the key argument must be set to the empty string\r\n"
        );
        assert_eq!(t.run(&["migrate", "h", "7", "k", "0", "100", "AUTH"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["migrate", "h", "7", "k", "0", "100", "bogus"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["migrate", "h", "7", "k", "x", "100"]), "-ERR value is not an integer or out of range\r\n");
    }

    #[test]
    fn second_turn_deletes_only_what_the_target_took_and_is_unchanged() {
        let mut t = TestKit::default();
        for k in ["a", "b", "c", "d"] {
            t.run(&["set", k, "v"]);
        }
        let argv = ["migrate", "h", "7", "", "0", "100", "KEYS", "a", "b", "c", "d"];
        let (_, remote) = t.run_remote(&argv);
        let Some(RemoteRequest::Migrate(req)) = remote else { panic!() };
        // Meanwhile: c is written, d deleted; the target refused b.
        t.run(&["set", "c", "new"]);
        t.run(&["del", "d"]);
        let reply = MigrateReply { acked: vec![true, false, true, true], error: None };
        let (out, remote) = t.resume(&argv, RemoteOutcome::Migrate(req, reply));
        assert_eq!(out, "");
        assert_eq!(t.run(&["exists", "a"]), ":0\r\n");
        assert_eq!(t.run(&["get", "b"]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["get", "c"]), "$3\r\nnew\r\n");
        let Some(RemoteRequest::Migrate(again)) = remote else { panic!("c and d must go again") };
        assert_eq!(again.round, 1);
        assert!(matches!(&again.ops[0], MigrateOp::Restore { key, replace: true, .. } if key == b"c"));
        assert!(matches!(&again.ops[1], MigrateOp::Delete { key } if key == b"d"));
        // Both acknowledged this time: c goes, and the command answers.
        let reply = MigrateReply { acked: vec![true, true], error: None };
        let (out, remote) = t.resume(&argv, RemoteOutcome::Migrate(again, reply));
        assert_eq!((out.as_str(), remote), ("+OK\r\n", None));
        assert_eq!(t.run(&["exists", "c"]), ":0\r\n");
    }

    #[test]
    fn keys_are_in_flight_from_the_first_turn_to_the_last() {
        let mut t = TestKit::default();
        t.run(&["set", "a", "1"]);
        t.run(&["set", "b", "1"]);
        let argv = ["migrate", "h", "7", "", "0", "100", "KEYS", "a", "b"];
        let (_, remote) = t.run_remote(&argv);
        assert!(t.ks.in_flight(0, b"a") && t.ks.in_flight(0, b"b"));
        t.run(&["del", "b"]);
        let Some(RemoteRequest::Migrate(req)) = remote else { panic!() };
        let (_, again) =
            t.resume(&argv, RemoteOutcome::Migrate(req, MigrateReply { acked: vec![true, true], error: None }));
        // a is settled; b, deleted meanwhile, stays in flight until its DEL reaches the target.
        assert!(!t.ks.in_flight(0, b"a") && t.ks.in_flight(0, b"b"));
        let Some(RemoteRequest::Migrate(req)) = again else { panic!() };
        let (out, _) = t.resume(&argv, RemoteOutcome::Migrate(req, MigrateReply { acked: vec![true], error: None }));
        assert_eq!(out, "+OK\r\n");
        assert!(!t.ks.in_flight(0, b"b"));
        // COPY leaves the keys here: nothing to hold.
        t.run(&["set", "c", "1"]);
        let (_, remote) = t.run_remote(&["migrate", "h", "7", "c", "0", "100", "COPY"]);
        assert!(remote.is_some() && !t.ks.in_flight(0, b"c"));
    }

    #[test]
    fn errors_are_answered_after_the_acknowledged_keys_are_gone() {
        let mut t = TestKit::default();
        t.run(&["set", "a", "1"]);
        t.run(&["set", "b", "2"]);
        let argv = ["migrate", "h", "7", "", "0", "100", "KEYS", "a", "b"];
        let (_, remote) = t.run_remote(&argv);
        let Some(RemoteRequest::Migrate(req)) = remote else { panic!() };
        let reply = MigrateReply {
            acked: vec![true, false],
            error: Some(crate::remote::MigrateError::Target("BUSYKEY Target key name already exists.".into())),
        };
        let (out, _) = t.resume(&argv, RemoteOutcome::Migrate(req, reply));
        assert_eq!(out, "-ERR Target instance replied with error: BUSYKEY Target key name already exists.\r\n");
        assert_eq!(t.run(&["exists", "a", "b"]), ":1\r\n");
    }
}
