//! DUMP and RESTORE.
//!
//! RESTORE does its expensive part, verifying and decoding the payload, before the slot lock
//! is taken (`LockPlan::KeysAfter`, see docs/engine-concurrency.md); under the lock it only
//! checks the target and inserts.

use hotkv_protocol::{Args, ReplyBuf};

use super::{EngineCmd, LockPlan, Prepared, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, EngineConfig, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};
use crate::rdb::{self, Restored};

/// DUMP and RESTORE rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new("dump", 2, flags::READONLY, acl::KEYSPACE, &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "generic", "2.6.0", "Returns a serialized representation of the value stored at a key.",
        "O(1) to access the key and additional O(N*M) to serialize it, where N is the number of objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1).",
        EngineCmd { run: dump, plan: LockPlan::Keys })
        .with_tips(&["nondeterministic_output"]),
    CommandSpec::new("restore", -4, flags::WRITE | flags::DENYOOM, acl::KEYSPACE | acl::DANGEROUS,
        &[KeySpec::single(1, kf::OW | kf::UPDATE)], "generic", "2.6.0",
        "Creates a key from the serialized representation of a value.",
        "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).",
        EngineCmd { run: restore, plan: LockPlan::KeysAfter(prepare_restore) }),
    // What MIGRATE sends a cluster node: RESTORE, served on a slot the node is importing.
    CommandSpec::new("restore-asking", -4, flags::WRITE | flags::DENYOOM | flags::ASKING,
        acl::KEYSPACE | acl::DANGEROUS, &[KeySpec::single(1, kf::OW | kf::UPDATE)], "server", "3.0.0",
        "An internal command for migrating keys in a cluster.",
        "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).",
        EngineCmd { run: restore, plan: LockPlan::KeysAfter(prepare_restore) }),
];

fn dump(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let strings = payload_strings(ctx.cfg);
    let Some(k) = ctx.read(args.get(1))? else {
        out.null();
        return Ok(());
    };
    out.bulk(&rdb::dump_value(k.value(), strings));
    Ok(())
}

/// How payloads write strings and blobs: those longer than 20 bytes LZF-compressed under
/// `rdbcompression yes`, as Valkey's `createDumpPayload` writes them (it shares
/// `rdbSaveObject` with the files).
pub(crate) fn payload_strings(cfg: &EngineConfig) -> rdb::Strings {
    if cfg.rdb_compression { rdb::Strings::Lzf } else { rdb::Strings::Plain }
}

/// RESTORE's options, parsed once.
#[derive(Debug)]
struct RestoreArgs {
    replace: bool,
    absttl: bool,
    idle: Option<i64>,
    freq: Option<i64>,
}

/// Everything RESTORE needs from its arguments, worked out before the slot lock is taken.
#[derive(Debug)]
pub struct RestoreInput {
    opts: RestoreArgs,
    /// The TTL and the decoded value, or the first error of the two. Valkey reports these
    /// only after the BUSYKEY check, which needs the lock, so they wait here until then.
    loaded: Result<(i64, Restored), CommandError>,
}

/// RESTORE's lock-free step ([`LockPlan::KeysAfter`]): options, TTL, then the payload's
/// version and checksum, its decoding and the choice of encoding. Option errors come first,
/// as in Valkey's `restoreCommand`; the payload is not decoded when the TTL is bad.
fn prepare_restore(args: &Args<'_>, cfg: &EngineConfig) -> Prepared {
    let input = parse_restore(args).map(|opts| RestoreInput { opts, loaded: load(args, cfg) });
    Prepared::Restore(Box::new(input))
}

fn load(args: &Args<'_>, cfg: &EngineConfig) -> Result<(i64, Restored), CommandError> {
    let ttl = int_arg(args.get(2))?;
    if ttl < 0 {
        return Err(CommandError::err("Invalid TTL value, must be >= 0"));
    }
    let value = rdb::restore(args.get(3), cfg.proto_max_bulk_len).map_err(CommandError::from)?.into_restored(cfg);
    Ok((ttl, value))
}

fn parse_restore(args: &Args<'_>) -> Result<RestoreArgs, CommandError> {
    let mut a = RestoreArgs { replace: false, absttl: false, idle: None, freq: None };
    let mut j = 4;
    while j < args.len() {
        let opt = args.get(j);
        let more = args.len() - j - 1;
        if opt.eq_ignore_ascii_case(b"replace") {
            a.replace = true;
        } else if opt.eq_ignore_ascii_case(b"absttl") {
            a.absttl = true;
        } else if opt.eq_ignore_ascii_case(b"idletime") && more >= 1 && a.freq.is_none() {
            let v = int_arg(args.get(j + 1))?;
            if v < 0 {
                return Err(CommandError::err("Invalid IDLETIME value, must be >= 0"));
            }
            a.idle = Some(v);
            j += 1;
        } else if opt.eq_ignore_ascii_case(b"freq") && more >= 1 && a.idle.is_none() {
            let v = int_arg(args.get(j + 1))?;
            if !(0..=255).contains(&v) {
                return Err(CommandError::err("Invalid FREQ value, must be >= 0 and <= 255"));
            }
            a.freq = Some(v);
            j += 1;
        } else {
            return Err(CommandError::Syntax);
        }
        j += 1;
    }
    Ok(a)
}

/// RESTORE under the slot lock: only the BUSYKEY check and the insertion happen here.
fn restore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    // Called without the prepared input (a path that did not run the lock-free step), it
    // prepares now, under the lock: slower for others, same replies.
    let prepared = ctx.prepared.take().unwrap_or_else(|| prepare_restore(&args, ctx.cfg));
    let Prepared::Restore(input) = prepared;
    let RestoreInput { opts, loaded } = (*input)?;
    let key = args.get(1);
    // Valkey checks the target before the TTL and the payload.
    if !opts.replace && ctx.write(key)?.is_some() {
        return Err(CommandError::BusyKey);
    }
    let (ttl, value) = loaded?;
    let deleted = opts.replace && ctx.delete(key)?;
    let when = match (ttl, opts.absttl) {
        (0, _) => None,
        (t, true) => Some(t),
        (t, false) => Some(t.saturating_add(ctx.now_ms)),
    };
    // Valkey's restoreCommand asks checkAlreadyExpired too: a replica, or an AOF load,
    // restores the key with its past TTL.
    if let Some(when) = when
        && ctx.already_expired(when)
    {
        if deleted {
            ctx.propagate_as(&[crate::propagate::del_verb(ctx.cfg.lazy_server_del), key]);
            ctx.events.notify('g', "del", key, ctx.db);
        }
        out.ok();
        return Ok(());
    }
    // A relative TTL goes to the stream as an absolute one (Valkey appends ABSTTL).
    if let Some(when) = when
        && !opts.absttl
        && ctx.propagating()
    {
        let at = itoa::Buffer::new().format(when).as_bytes().to_vec();
        let mut argv: Vec<&[u8]> = args.iter().collect();
        argv[2] = &at;
        argv.push(b"ABSTTL");
        ctx.propagate_as(&argv);
    }
    let ttl = when.map_or(Ttl::Clear, Ttl::At);
    match value {
        Restored::Str(s) => ctx.set(key, NewValue::Bytes(&s), ttl)?,
        Restored::Obj(o) => ctx.set(key, NewValue::Object(o), ttl)?,
    }
    if opts.idle.is_some() || opts.freq.is_some() {
        let (now, p) = (ctx.now_ms, ctx.cfg.policy);
        if let Some(mut k) = ctx.write(key)? {
            // FREQ was checked to be 0-255 when parsed.
            let freq = opts.freq.map(|f| f.clamp(0, 255) as u8);
            let lru = rdb::access_clock(p, now, opts.idle, freq).unwrap_or_else(|| k.entry().lru());
            k.entry_mut().set_lru(lru);
        }
    }
    ctx.events.notify('g', "restore", key, ctx.db);
    out.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testkit::TestKit;

    fn bulk(reply: &[u8]) -> Vec<u8> {
        let start = reply.iter().position(|&b| b == b'\n').unwrap() + 1;
        reply[start..reply.len() - 2].to_vec()
    }

    #[test]
    fn dump_restore_round_trip() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "hello"]);
        let payload = bulk(&t.run_raw(&[b"DUMP".to_vec(), b"k".to_vec()]));
        let args: Vec<Vec<u8>> = vec![b"RESTORE".to_vec(), b"k".to_vec(), b"0".to_vec(), payload.clone()];
        assert_eq!(t.run_bytes(&args), "-BUSYKEY Target key name already exists.\r\n");
        let mut args2 = args.clone();
        args2[1] = b"k2".to_vec();
        args2[2] = b"5000".to_vec();
        assert_eq!(t.run_bytes(&args2), "+OK\r\n");
        assert_eq!(t.run(&["GET", "k2"]), "$5\r\nhello\r\n");
        assert_eq!(t.run(&["PTTL", "k2"]), ":5000\r\n");
        let mut args3 = args.clone();
        args3.push(b"REPLACE".to_vec());
        assert_eq!(t.run_bytes(&args3), "+OK\r\n");
        assert_eq!(t.run(&["DUMP", "nokey"]), "$-1\r\n");
    }

    #[test]
    fn restore_errors_are_valkeys() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["RESTORE", "k", "-1", "x"]), "-ERR Invalid TTL value, must be >= 0\r\n");
        assert_eq!(
            t.run(&["RESTORE", "k", "0", "garbage-payload"]),
            "-ERR DUMP payload version or checksum are wrong\r\n"
        );
        assert_eq!(
            t.run(&["RESTORE", "k", "0", "x", "IDLETIME", "-1"]),
            "-ERR Invalid IDLETIME value, must be >= 0\r\n"
        );
        assert_eq!(
            t.run(&["RESTORE", "k", "0", "x", "FREQ", "256"]),
            "-ERR Invalid FREQ value, must be >= 0 and <= 255\r\n"
        );
        assert_eq!(t.run(&["RESTORE", "k", "0", "x", "IDLETIME", "1", "FREQ", "1"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["RESTORE", "k", "0", "x", "BOGUS"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["RESTORE", "k", "0", "x", "IDLETIME"]), "-ERR syntax error\r\n", "no value");
        assert_eq!(t.run(&["RESTORE", "k", "0", "x", "FREQ", "1", "IDLETIME", "1"]), "-ERR syntax error\r\n");
        assert_eq!(
            t.run(&["RESTORE", "k", "0", "x", "IDLETIME", "z"]),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(t.run(&["RESTORE", "k", "ten", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["RESTORE", "k", "0", "x"]), "-ERR DUMP payload version or checksum are wrong\r\n");
    }

    #[test]
    fn restore_checks_in_valkeys_order() {
        // Options, then BUSYKEY (needs the key), then the TTL, then the payload: the TTL and
        // payload are worked out before the lock but reported only after the BUSYKEY check.
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v"]);
        assert_eq!(t.run(&["RESTORE", "k", "-1", "x", "BOGUS"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["RESTORE", "k", "-1", "x"]), "-BUSYKEY Target key name already exists.\r\n");
        assert_eq!(t.run(&["RESTORE", "k", "0", "x"]), "-BUSYKEY Target key name already exists.\r\n");
        assert_eq!(t.run(&["RESTORE", "k", "-1", "x", "REPLACE"]), "-ERR Invalid TTL value, must be >= 0\r\n");
        assert_eq!(
            t.run(&["RESTORE", "k", "0", "x", "REPLACE"]),
            "-ERR DUMP payload version or checksum are wrong\r\n"
        );
        let bad = crate::rdb::finish(vec![21, 0]);
        let argv = |k: &str| vec![b"RESTORE".to_vec(), k.as_bytes().to_vec(), b"0".to_vec(), bad.clone()];
        assert_eq!(t.run_bytes(&argv("stream")), "-ERR Bad data format\r\n", "streams are refused cleanly");
        assert_eq!(t.run(&["EXISTS", "stream"]), ":0\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$1\r\nv\r\n", "a refused REPLACE leaves the key");
    }

    #[test]
    fn the_handler_prepares_itself_when_called_without_the_lock_free_step() {
        use crate::cmd::LockPlan;
        let mut t = TestKit::default();
        t.run(&["SET", "src", "hello"]);
        let payload = bulk(&t.run_raw(&[b"DUMP".to_vec(), b"src".to_vec()]));
        let spec = crate::cmd::commands().find(|s| s.name == "restore").unwrap();
        let plan = spec.handler.as_ref().unwrap().plan;
        assert!(matches!(plan, LockPlan::KeysAfter(_)), "RESTORE decodes before its lock");
        // The kit runs the step first; EXEC and blocked-client paths might not: same replies.
        let mut direct = TestKit { skip_prepare: true, ..TestKit::default() };
        let args = vec![b"RESTORE".to_vec(), b"k".to_vec(), b"0".to_vec(), payload];
        assert_eq!(direct.run_bytes(&args), "+OK\r\n");
        assert_eq!(direct.run_bytes(&args), "-BUSYKEY Target key name already exists.\r\n");
        assert_eq!(direct.run(&["GET", "k"]), "$5\r\nhello\r\n");
    }

    #[test]
    fn restore_with_a_past_ttl_keeps_the_key_on_a_replica_and_for_an_aof_load() {
        let mut t = TestKit::default();
        t.run(&["SET", "src", "hello"]);
        let payload = bulk(&t.run_raw(&[b"DUMP".to_vec(), b"src".to_vec()]));
        let restore = |t: &mut TestKit| {
            let args = [&b"RESTORE"[..], b"k", b"1000", &payload, b"ABSTTL", b"REPLACE"];
            t.run_bytes(&args.map(<[u8]>::to_vec))
        };
        assert_eq!(restore(&mut t), "+OK\r\n");
        assert_eq!(t.ks.db(0).len(), 1, "a primary does not store a key already expired");
        for (replica, from_primary) in [(true, false), (false, true)] {
            t.cfg.replica = replica;
            t.cfg.from_primary = from_primary;
            assert_eq!(restore(&mut t), "+OK\r\n");
            assert_eq!(t.ks.db(0).len(), 2, "replica {replica}, from the primary or an AOF {from_primary}");
            t.cfg.replica = false;
            t.cfg.from_primary = false;
            assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n", "expired once read on a primary");
        }
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn restore_hex(t: &mut TestKit, key: &str, payload: &[u8]) -> String {
        t.run_bytes(&[b"RESTORE".to_vec(), key.as_bytes().to_vec(), b"0".to_vec(), payload.to_vec()])
    }

    /// DUMP payloads from redis-server 7.0.15 (RDB version 10), captured with:
    /// `HSET h f v n 12345 neg -7`, `SADD si 1 2 3`, `SADD sb 1 70000 -5000000000`,
    /// `SADD ss a b c`, `HSET hb a 1 b 2` with hash-max-listpack-entries 1, and
    /// `HSET hv f <100 x>` (a hashtable whose value is LZF-compressed).
    const REDIS_PAYLOADS: &[(&str, &str)] = &[
        ("h", "101c1c0000000600816602817602816e02f1393003836e656704dff902ff0a00f96551de1b902376"),
        ("si", "0b0e02000000030000000100020003000a00a5025ce26d6e4d1b"),
        ("sb", "0b200800000003000000000efad5feffffff010000000000000070110100000000000a00efdd381b9dc91177"),
        ("ss", "02030163016201610a005ea67e5623750bab"),
        ("hb", "04020162c0020161c0010a006684aa0d26dd4ab2"),
        ("hv", "04010166c3094064017878e057000178780a00521178d175a9af13"),
    ];

    #[test]
    fn restores_hashes_and_sets_dumped_by_redis() {
        let mut t = TestKit::default();
        for (key, payload) in REDIS_PAYLOADS {
            assert_eq!(restore_hex(&mut t, key, &hex(payload)), "+OK\r\n", "{key}");
        }
        assert_eq!(
            t.run(&["HGETALL", "h"]),
            "*6\r\n$1\r\nf\r\n$1\r\nv\r\n$1\r\nn\r\n$5\r\n12345\r\n$3\r\nneg\r\n$2\r\n-7\r\n"
        );
        assert_eq!(t.run(&["OBJECT", "ENCODING", "h"]), "$8\r\nlistpack\r\n");
        assert_eq!(t.run(&["SMEMBERS", "si"]), "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "si"]), "$6\r\nintset\r\n");
        assert_eq!(t.run(&["SMEMBERS", "sb"]), "*3\r\n$11\r\n-5000000000\r\n$1\r\n1\r\n$5\r\n70000\r\n");
        assert_eq!(t.run(&["SCARD", "ss"]), ":3\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "ss"]), "$8\r\nlistpack\r\n", "Valkey's encoding for 3 short strings");
        assert_eq!(t.run(&["HMGET", "hb", "a", "b"]), "*2\r\n$1\r\n1\r\n$1\r\n2\r\n");
        assert_eq!(t.run(&["HSTRLEN", "hv", "f"]), ":100\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "hv"]), "$9\r\nhashtable\r\n", "a 100-byte value is over the limit");
    }

    #[test]
    fn packed_hashes_and_intsets_dump_byte_for_byte_as_redis() {
        // The packed hash's elements and the intset's members are copied as stored, and come
        // out exactly as Redis 7.0 wrote the same values. With `rdbcompression no`: under
        // `yes` this compressor shrinks the 32-byte intset by 5 bytes where liblzf's stricter
        // output bound gave up (both payloads load on either server).
        let mut t = TestKit::default();
        t.cfg.rdb_compression = false;
        t.run(&["HSET", "h", "f", "v", "n", "12345", "neg", "-7"]);
        t.run(&["SADD", "si", "1", "2", "3"]);
        t.run(&["SADD", "sb", "1", "70000", "-5000000000"]);
        for key in ["h", "si", "sb"] {
            let redis = REDIS_PAYLOADS.iter().find(|(k, _)| *k == key).unwrap().1;
            assert_eq!(bulk(&t.run_raw(&[b"DUMP".to_vec(), key.as_bytes().to_vec()])), hex(redis), "{key}");
        }
    }

    #[test]
    fn long_strings_and_blobs_are_compressed_under_rdbcompression_yes() {
        let mut t = TestKit::default();
        let long = "hotkv:".repeat(200);
        t.run(&["SET", "s", &long]);
        t.run(&["SADD", "sb", "1", "70000", "-5000000000"]);
        t.run(&["SET", "short", "abcabcabcabcabcabcab"]);
        let dump = |t: &mut TestKit, k: &str| bulk(&t.run_raw(&[b"DUMP".to_vec(), k.as_bytes().to_vec()]));
        let packed = dump(&mut t, "s");
        assert!(packed.len() < long.len() / 4, "{} bytes", packed.len());
        assert_eq!(packed[1], 0xC3, "RDB_ENC_LZF right after the type byte");
        let short = dump(&mut t, "short");
        assert_eq!(short.len(), 1 + 1 + 20 + 10, "20 bytes stay as they are");
        let blob = dump(&mut t, "sb");
        assert_eq!(blob[1], 0xC3, "the intset blob too");
        for (key, payload) in [("s2", &packed), ("sb2", &blob)] {
            let args = vec![b"RESTORE".to_vec(), key.as_bytes().to_vec(), b"0".to_vec(), payload.clone()];
            assert_eq!(t.run_bytes(&args), "+OK\r\n");
        }
        assert_eq!(t.run(&["STRLEN", "s2"]), ":1200\r\n");
        assert_eq!(t.run(&["GET", "s2"]), t.run(&["GET", "s"]));
        assert_eq!(t.run(&["SMISMEMBER", "sb2", "1", "70000", "-5000000000"]), "*3\r\n:1\r\n:1\r\n:1\r\n");
        // The same value gives the same payload whatever was compressed before it: MIGRATE
        // compares a key's payload with the one it sent to see whether it changed.
        t.run(&["SET", "other", &"other:".repeat(300)]);
        dump(&mut t, "other");
        assert_eq!(dump(&mut t, "s"), packed);
        t.cfg.rdb_compression = false;
        assert_eq!(dump(&mut t, "s").len(), 1 + 2 + 1200 + 10, "rdbcompression no: as it is");
    }

    #[test]
    fn restores_a_set_listpack() {
        // RDB type 20 (Redis 7.2+, Valkey) holding a, b, 1: Redis 7.0 cannot write it, so the
        // listpack is built by hand from the format (entry, then its back-length).
        let lp = [0x0f, 0, 0, 0, 3, 0, 0x81, b'a', 0x02, 0x81, b'b', 0x02, 0x01, 0x01, 0xff];
        let mut body = vec![20u8, lp.len() as u8];
        body.extend_from_slice(&lp);
        let mut t = TestKit::default();
        assert_eq!(restore_hex(&mut t, "s", &crate::rdb::finish(body)), "+OK\r\n");
        assert_eq!(t.run(&["SMISMEMBER", "s", "a", "b", "1", "c"]), "*4\r\n:1\r\n:1\r\n:1\r\n:0\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "s"]), "$8\r\nlistpack\r\n");
    }

    #[test]
    fn restore_applies_the_configured_limits() {
        let mut t = TestKit::default();
        t.cfg.hash_max_listpack_entries = 2;
        t.cfg.set_max_intset_entries = 2;
        for (key, payload) in REDIS_PAYLOADS {
            restore_hex(&mut t, key, &hex(payload));
        }
        assert_eq!(t.run(&["OBJECT", "ENCODING", "h"]), "$9\r\nhashtable\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "si"]), "$9\r\nhashtable\r\n");
        assert_eq!(t.run(&["HGET", "h", "n"]), "$5\r\n12345\r\n");
    }

    #[test]
    fn hashes_and_sets_round_trip_in_every_encoding() {
        let mut t = TestKit::default();
        t.run(&["HSET", "h", "f", "v", "n", "-12", "e", ""]);
        t.run(&["SADD", "i", "5", "-3", "1000000"]);
        t.run(&["SADD", "p", "x", "7"]);
        let big: Vec<String> = (0..300).map(|i| format!("m{i}")).collect();
        let mut argv = vec!["SADD", "t"];
        argv.extend(big.iter().map(String::as_str));
        t.run(&argv);
        t.cfg.hash_max_listpack_entries = 0;
        t.run(&["HSET", "ht", "a", "1", "b", "2"]);
        t.cfg.hash_max_listpack_entries = 512;
        // A payload carries no encoding: the copy gets the one its size calls for, so the
        // two-field table comes back packed, as in Valkey.
        for key in ["h", "i", "p", "t"] {
            let payload = bulk(&t.run_raw(&[b"DUMP".to_vec(), key.as_bytes().to_vec()]));
            let copy = format!("{key}-copy");
            assert_eq!(restore_hex(&mut t, &copy, &payload), "+OK\r\n", "{key}");
            for cmd in ["TYPE", "OBJECT"] {
                let argv: Vec<&str> = if cmd == "TYPE" { vec!["TYPE", key] } else { vec!["OBJECT", "ENCODING", key] };
                let mut copied = argv.clone();
                *copied.last_mut().unwrap() = &copy;
                assert_eq!(t.run(&argv), t.run(&copied), "{cmd} {key}");
            }
        }
        let payload = bulk(&t.run_raw(&[b"DUMP".to_vec(), b"ht".to_vec()]));
        restore_hex(&mut t, "ht-copy", &payload);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "ht-copy"]), "$8\r\nlistpack\r\n");
        assert_eq!(t.run(&["HGETALL", "ht-copy"]), t.run(&["HGETALL", "ht"]));
        assert_eq!(t.run(&["HGETALL", "h-copy"]), t.run(&["HGETALL", "h"]));
        assert_eq!(t.run(&["SMEMBERS", "i-copy"]), t.run(&["SMEMBERS", "i"]));
        assert_eq!(t.run(&["SCARD", "t-copy"]), ":300\r\n");
        assert_eq!(t.run(&["SINTERCARD", "2", "t", "t-copy"]), ":300\r\n");
    }

    #[test]
    fn corrupt_collections_are_refused() {
        let mut t = TestKit::default();
        let bad = "-ERR Bad data format\r\n";
        // Empty set and hash, repeated members and fields, odd listpack, empty intset.
        for body in [
            vec![2u8, 0],
            vec![4u8, 0],
            vec![2u8, 2, 1, b'a', 1, b'a'],
            vec![4u8, 2, 1, b'f', 1, b'1', 1, b'f', 1, b'2'],
            vec![16u8, 10, 10, 0, 0, 0, 1, 0, 0x81, b'f', 0x02, 0xff],
            vec![11u8, 8, 2, 0, 0, 0, 0, 0, 0, 0],
            vec![2u8, 5, 1, b'a'],
        ] {
            assert_eq!(restore_hex(&mut t, "k", &crate::rdb::finish(body.clone())), bad, "{body:?}");
        }
        assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
    }
}

#[cfg(test)]
mod collection_tests {
    //! DUMP/RESTORE of lists and sorted sets, checked against payloads `redis-server` 7.0.15
    //! produced (`DUMP` of keys built with RPUSH/ZADD there).

    use crate::testkit::TestKit;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    fn restore(t: &mut TestKit, key: &str, payload: &[u8]) -> String {
        t.run_bytes(&[b"RESTORE".to_vec(), key.as_bytes().to_vec(), b"0".to_vec(), payload.to_vec()])
    }

    fn dump(t: &mut TestKit, key: &str) -> Vec<u8> {
        let reply = t.run_raw(&[b"DUMP".to_vec(), key.as_bytes().to_vec()]);
        let start = reply.iter().position(|&b| b == b'\n').unwrap() + 1;
        reply[start..reply.len() - 2].to_vec()
    }

    /// RPUSH l a b c 1 200 -5000: one QUICKLIST_2 node holding a 25-byte listpack.
    const LIST: &str = "120102191900000006008161028162028163020101c0c802f178ec03ff0a009d0b844e3a212835";
    /// ZADD z 1 a 1.5 b -2 c inf d: ZSET_LISTPACK.
    const ZSET_LP: &str =
        "1122220000000800816302dffe02816102010181620283312e350481640283696e6604ff0a005a20b1feaacfbaf6";
    /// ZADD zs 1 a 2.5 b 3 c with zset-max-listpack-entries 2: ZSET_2, highest first.
    const ZSET_2: &str = "050301630000000000000840016200000000000004400161000000000000f03f0a00265b9a2f1de4fe61";

    /// `payload` with its version footer set to `version` and the checksum redone.
    fn with_version(payload: &[u8], version: u16) -> Vec<u8> {
        let mut body = payload[..payload.len() - 10].to_vec();
        body.extend_from_slice(&version.to_le_bytes());
        let crc = crate::rdb::crc64(0, &body);
        body.extend_from_slice(&crc.to_le_bytes());
        body
    }

    #[test]
    fn redis_7_4_payloads_restore_and_later_versions_are_refused() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "a", "b"]);
        t.run(&["HSET", "h", "f", "1", "g", "2"]);
        t.run(&["HPEXPIREAT", "h", "4000000000000", "FIELDS", "1", "g"]);
        for key in ["l", "h"] {
            let p = dump(&mut t, key);
            assert_eq!(restore(&mut t, &format!("{key}12"), &with_version(&p, 12)), "+OK\r\n", "{key}");
            assert_eq!(
                restore(&mut t, &format!("{key}13"), &with_version(&p, 13)),
                "-ERR DUMP payload version or checksum are wrong\r\n",
                "{key}"
            );
        }
        assert_eq!(t.run(&["LRANGE", "l12", "0", "-1"]), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        assert_eq!(t.run(&["HPEXPIRETIME", "h12", "FIELDS", "2", "f", "g"]), "*2\r\n:-1\r\n:4000000000000\r\n");
        assert_eq!(t.run(&["EXISTS", "l13", "h13"]), ":0\r\n");
    }

    #[test]
    fn redis_list_payloads_restore_and_dump_back_identically() {
        let mut t = TestKit::default();
        assert_eq!(restore(&mut t, "l", &hex(LIST)), "+OK\r\n");
        assert_eq!(
            t.run(&["LRANGE", "l", "0", "-1"]),
            "*6\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\n1\r\n$3\r\n200\r\n$5\r\n-5000\r\n"
        );
        assert_eq!(t.run(&["OBJECT", "ENCODING", "l"]), "$8\r\nlistpack\r\n");
        assert_eq!(dump(&mut t, "l"), hex(LIST), "same bytes as Redis");
    }

    #[test]
    fn redis_lzf_compressed_quicklist_restores() {
        // RPUSH big with 130 elements of 70 'x': two nodes, LZF-compressed listpack blobs.
        let payload = hex(concat!(
            "120202c340b75ff708f71f00007000e04678e03c000048e0ff48e01200e1ff23e01300e1ff23e01300e1ff23e01300e1",
            "ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1",
            "ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1",
            "ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1ff23e01300e1d2230148ff02",
            "c32d452908290500001200e04678e03c000048e0ff48e01200e1ff23e01300e1ff23e01300e1ff23e01300e140230148",
            "ff0a008d06fa8f45806403",
        ));
        let mut t = TestKit::default();
        assert_eq!(restore(&mut t, "big", &payload), "+OK\r\n");
        assert_eq!(t.run(&["LLEN", "big"]), ":130\r\n");
        assert_eq!(t.run(&["LINDEX", "big", "129"]), format!("$70\r\n{}\r\n", "x".repeat(70)));
        assert_eq!(t.run(&["OBJECT", "ENCODING", "big"]), "$9\r\nquicklist\r\n");
        let again = dump(&mut t, "big");
        assert_eq!(restore(&mut t, "copy", &again), "+OK\r\n");
        assert_eq!(t.run(&["LRANGE", "copy", "0", "-1"]), t.run(&["LRANGE", "big", "0", "-1"]));
    }

    #[test]
    fn redis_zset_payloads_restore() {
        let mut t = TestKit::default();
        assert_eq!(restore(&mut t, "z", &hex(ZSET_LP)), "+OK\r\n");
        assert_eq!(
            t.run(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]),
            "*8\r\n$1\r\nc\r\n$2\r\n-2\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$3\r\n1.5\r\n$1\r\nd\r\n$3\r\ninf\r\n"
        );
        assert_eq!(t.run(&["OBJECT", "ENCODING", "z"]), "$8\r\nlistpack\r\n");
        assert_eq!(dump(&mut t, "z"), hex(ZSET_LP), "a listpack goes back out byte for byte");
        assert_eq!(restore(&mut t, "zs", &hex(ZSET_2)), "+OK\r\n");
        assert_eq!(
            t.run(&["ZRANGE", "zs", "0", "-1", "WITHSCORES"]),
            "*6\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$3\r\n2.5\r\n$1\r\nc\r\n$1\r\n3\r\n"
        );
        assert_eq!(t.run(&["OBJECT", "ENCODING", "zs"]), "$8\r\nlistpack\r\n", "small enough here");
        assert_eq!(dump(&mut t, "zs")[0], 17, "a small set dumps as the listpack Redis 7 writes for it");
        t.cfg.zset_max_listpack_entries = 2;
        assert_eq!(
            t.run_bytes(&[b"RESTORE".to_vec(), b"zs".to_vec(), b"0".to_vec(), hex(ZSET_2), b"REPLACE".to_vec()]),
            "+OK\r\n"
        );
        assert_eq!(t.run(&["OBJECT", "ENCODING", "zs"]), "$8\r\nskiplist\r\n");
    }

    #[test]
    fn hand_built_legacy_types_and_corrupt_payloads() {
        use crate::rdb::{finish, write_len, write_string};
        let mut t = TestKit::default();
        // Type 1 LIST.
        let mut body = vec![1u8];
        write_len(&mut body, 2);
        write_string(&mut body, b"x");
        write_string(&mut body, b"12");
        assert_eq!(restore(&mut t, "l1", &finish(body)), "+OK\r\n");
        assert_eq!(t.run(&["LRANGE", "l1", "0", "-1"]), "*2\r\n$1\r\nx\r\n$2\r\n12\r\n");
        // Type 3 ZSET with ASCII scores and the infinity markers.
        let mut body = vec![3u8];
        write_len(&mut body, 2);
        write_string(&mut body, b"m");
        body.extend_from_slice(&[3, b'1', b'.', b'5']);
        write_string(&mut body, b"n");
        body.push(255);
        assert_eq!(restore(&mut t, "z3", &finish(body)), "+OK\r\n");
        assert_eq!(
            t.run(&["ZRANGE", "z3", "0", "-1", "WITHSCORES"]),
            "*4\r\n$1\r\nn\r\n$4\r\n-inf\r\n$1\r\nm\r\n$3\r\n1.5\r\n"
        );
        let bad = |t: &mut TestKit, body: Vec<u8>| restore(t, "bad", &finish(body));
        let mut dup = vec![5u8, 2];
        for _ in 0..2 {
            write_string(&mut dup, b"m");
            dup.extend_from_slice(&1f64.to_le_bytes());
        }
        assert_eq!(bad(&mut t, dup), "-ERR Bad data format\r\n", "duplicate members");
        let mut nan = vec![5u8, 1];
        write_string(&mut nan, b"m");
        nan.extend_from_slice(&f64::NAN.to_le_bytes());
        assert_eq!(bad(&mut t, nan), "-ERR Bad data format\r\n");
        assert_eq!(bad(&mut t, vec![1u8, 0]), "-ERR Bad data format\r\n", "empty list");
        assert_eq!(bad(&mut t, vec![18u8, 1, 2, 3, 1, 2, 3]), "-ERR Bad data format\r\n", "corrupt listpack");
        assert_eq!(bad(&mut t, vec![18u8, 1, 7, 1, b'x']), "-ERR Bad data format\r\n", "unknown container");
        assert_eq!(t.run(&["EXISTS", "bad"]), ":0\r\n");
        let mut corrupted = hex(LIST);
        corrupted[12] ^= 0xFF;
        assert_eq!(restore(&mut t, "bad", &corrupted), "-ERR DUMP payload version or checksum are wrong\r\n");
    }

    #[test]
    fn round_trips_keep_ttl_and_large_sets() {
        let mut t = TestKit::default();
        for i in 0..300 {
            t.run(&["ZADD", "z", &format!("{}.25", i % 17), &format!("member-{i}")]);
            t.run(&["RPUSH", "l", &format!("{i}")]);
        }
        let (z, l) = (dump(&mut t, "z"), dump(&mut t, "l"));
        assert_eq!(t.run_bytes(&[b"RESTORE".to_vec(), b"z2".to_vec(), b"5000".to_vec(), z]), "+OK\r\n");
        assert_eq!(t.run_bytes(&[b"RESTORE".to_vec(), b"l2".to_vec(), b"0".to_vec(), l]), "+OK\r\n");
        assert_eq!(t.run(&["ZRANGE", "z2", "0", "-1", "WITHSCORES"]), t.run(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]));
        assert_eq!(t.run(&["LRANGE", "l2", "0", "-1"]), t.run(&["LRANGE", "l", "0", "-1"]));
        assert_eq!(t.run(&["PTTL", "z2"]), ":5000\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "z2"]), "$8\r\nskiplist\r\n");
    }
}

#[cfg(test)]
mod cost {
    use std::time::Instant;

    use crate::entry::ValueRef;
    use crate::rdb::Strings;

    fn values() -> Vec<(&'static str, Vec<u8>)> {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut random = |n: usize| {
            (0..n)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect::<Vec<u8>>()
        };
        let text = |n: usize| {
            let mut v = Vec::with_capacity(n);
            let mut i = 0u64;
            while v.len() < n {
                v.extend_from_slice(format!("user:{i} name=someone{} score={} ", i % 97, i * 31 % 1000).as_bytes());
                i += 1;
            }
            v.truncate(n);
            v
        };
        vec![
            ("100 B text", text(100)),
            ("100 B random", random(100)),
            ("1 MB text", text(1 << 20)),
            ("1 MB random", random(1 << 20)),
        ]
    }

    /// DUMP's encoding cost per value (MIGRATE pays it for every key it moves). Run in
    /// release: `cargo test --release -p hotkv-engine dump_encode_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "timing, meaningful only in a release build"]
    fn dump_encode_cost() {
        for strings in [Strings::Plain, Strings::Lzf] {
            for (name, v) in values() {
                let iters = if v.len() > 1000 { 300 } else { 1_000_000 };
                let start = Instant::now();
                let mut bytes = 0;
                for _ in 0..iters {
                    let p = crate::rdb::dump_value(ValueRef::Str(std::hint::black_box(&v)), strings);
                    bytes = std::hint::black_box(p).len();
                }
                let per = start.elapsed().as_nanos() as f64 / iters as f64;
                println!("{strings:?} {name:>14}: {per:>12.0} ns/DUMP, payload {bytes} bytes");
            }
        }
    }
}
