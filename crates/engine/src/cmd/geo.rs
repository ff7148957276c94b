//! Geo commands on members: GEOADD, GEODIST, GEOHASH and GEOPOS, plus what the search
//! commands (`geo_search.rs`) share: coordinate and unit parsing and the number formats of
//! replies (Valkey's `geo.c`).
//!
//! A geo set is a sorted set whose scores are 52-bit geohashes (see [`crate::geohash`]), so
//! every sorted set command works on it and DUMP/RESTORE payloads are Valkey's. GEOADD is
//! ZADD with coordinates turned into scores: Valkey rewrites the call into a ZADD and runs
//! that, so its notifications, reply and write-stream entry are ZADD's, and so are hotkv's.

use hotkv_protocol::{Args, ReplyBuf};

use super::zset::{AddFlags, zadd_generic};
use super::{EngineCmd, LockPlan, Spec, float_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::error::{CmdResult, CommandError};
use crate::geohash::{self, LAT_MAX, LAT_MIN, LON_MAX, LON_MIN};

/// Member command rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new(
        "geoadd",
        -5,
        flags::WRITE | flags::DENYOOM,
        acl::GEO,
        &[KeySpec::single(1, kf::RW | kf::UPDATE)],
        "geo",
        "3.2.0",
        "Adds one or more members to a geospatial index. The key is created if it doesn't exist.",
        "O(log(N)) for each item added, where N is the number of elements in the sorted set.",
        EngineCmd { run: geoadd, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "geodist",
        -4,
        flags::READONLY,
        acl::GEO,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "geo",
        "3.2.0",
        "Returns the distance between two members of a geospatial index.",
        "O(1)",
        EngineCmd { run: geodist, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "geohash",
        -2,
        flags::READONLY,
        acl::GEO,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "geo",
        "3.2.0",
        "Returns members from a geospatial index as geohash strings.",
        "O(1) for each member requested.",
        EngineCmd { run: geohash_cmd, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "geopos",
        -2,
        flags::READONLY,
        acl::GEO,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "geo",
        "3.2.0",
        "Returns the longitude and latitude of members from a geospatial index.",
        "O(1) for each member requested.",
        EngineCmd { run: geopos, plan: LockPlan::Keys },
    ),
];

/// Parses a longitude and a latitude and checks them against the geo limits
/// (`extractLongLatOrReply`).
pub(super) fn lonlat_arg(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), CommandError> {
    let (lon, lat) = (float_arg(lon)?, float_arg(lat)?);
    if !(LON_MIN..=LON_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return Err(CommandError::err(format!("invalid longitude,latitude pair {lon:.6},{lat:.6}")));
    }
    Ok((lon, lat))
}

/// Meters per unit of a unit argument, case-insensitive (`extractUnitOrReply`).
pub(super) fn unit_arg(unit: &[u8]) -> Result<f64, CommandError> {
    match unit.to_ascii_lowercase().as_slice() {
        b"m" => Ok(1.0),
        b"km" => Ok(1000.0),
        b"ft" => Ok(0.3048),
        b"mi" => Ok(1609.34),
        _ => Err(CommandError::err("unsupported unit provided. please use M, KM, FT, MI")),
    }
}

/// A distance reply: a bulk string with exactly four decimals, even in RESP3
/// (`addReplyDoubleDistance`, `fixedpoint_d2string`).
pub(super) fn reply_distance(out: &mut ReplyBuf, d: f64) {
    out.bulk(fixed4(d).as_bytes());
}

/// A coordinate reply: `%.17Lf` without trailing zeros, a bulk string in RESP2 and a double
/// in RESP3 (`addReplyHumanLongDouble`).
pub(super) fn reply_coord(out: &mut ReplyBuf, v: f64) {
    let text = human(v);
    if out.is_resp3() {
        out.raw(b",");
        out.raw(text.as_bytes());
        out.crlf();
    } else {
        out.bulk(text.as_bytes());
    }
}

/// `fixedpoint_d2string(d, 4)`: `d * 10^4` rounded half to even into a 64-bit integer (with
/// x86-64's `llrint` result, `i64::MIN`, when it does not fit), printed with four decimals.
fn fixed4(d: f64) -> String {
    if d == 0.0 {
        return "0.0000".into();
    }
    let scaled = (d * 10000.0).round_ties_even();
    let n =
        if scaled.is_nan() || !(i64::MIN as f64..i64::MAX as f64).contains(&scaled) { i64::MIN } else { scaled as i64 };
    let digits = n.unsigned_abs();
    let sign = if n < 0 { "-" } else { "" };
    format!("{sign}{}.{:04}", digits / 10000, digits % 10000)
}

/// `ld2string(..., LD_STR_HUMAN)` of a double: `%.17Lf`, trailing zeros and a trailing dot
/// removed, `-0` written `0`.
fn human(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v.is_nan() {
        return "nan".into();
    }
    let mut s = format!("{v:.17}");
    let keep = s.trim_end_matches('0').trim_end_matches('.').len();
    s.truncate(keep);
    if s == "-0" {
        s = "0".into();
    }
    s
}

/// GEOADD: validates every position first, then runs the equivalent ZADD (`geoaddCommand`).
fn geoadd(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (mut nx, mut xx, mut first) = (false, false, 2);
    while first < args.len() {
        let opt = args.get(first);
        if opt.eq_ignore_ascii_case(b"nx") {
            nx = true;
        } else if opt.eq_ignore_ascii_case(b"xx") {
            xx = true;
        } else if !opt.eq_ignore_ascii_case(b"ch") {
            break;
        }
        first += 1;
    }
    let rest = args.len() - first;
    if !rest.is_multiple_of(3) || (xx && nx) {
        return Err(CommandError::Syntax);
    }
    // ZADD key [options] score member ...
    let mut zargs: Vec<Vec<u8>> = Vec::with_capacity(first + rest / 3 * 2);
    zargs.push(b"zadd".to_vec());
    zargs.extend(args.iter().take(first).skip(1).map(<[u8]>::to_vec));
    for j in (first..args.len()).step_by(3) {
        let (lon, lat) = lonlat_arg(args.get(j), args.get(j + 1))?;
        let score = geohash::lonlat_to_score(lon, lat);
        zargs.push(itoa::Buffer::new().format(score).as_bytes().to_vec());
        zargs.push(args.get(j + 2).to_vec());
    }
    let mut buf = Vec::new();
    let mut spans = Vec::with_capacity(zargs.len());
    for a in &zargs {
        spans.push((buf.len(), buf.len() + a.len()));
        buf.extend_from_slice(a);
    }
    let dirty = ctx.stats.dirty;
    zadd_generic(ctx, Args::from_parts(&buf, &spans), out, AddFlags::default())?;
    if ctx.stats.dirty > dirty {
        // What Valkey propagates: the rewritten command.
        ctx.propagate_as(&zargs);
    }
    Ok(())
}

/// GEODIST key member1 member2 [unit]: the unit is checked before the key is read.
fn geodist(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let to_meters = match args.len() {
        5 => unit_arg(args.get(4))?,
        n if n > 5 => return Err(CommandError::Syntax),
        _ => 1.0,
    };
    let Some(k) = ctx.read(args.get(1))? else {
        out.null();
        return Ok(());
    };
    let z = k.zset()?;
    let (Some(a), Some(b)) = (z.score(args.get(2)), z.score(args.get(3))) else {
        out.null();
        return Ok(());
    };
    let ((lon1, lat1), (lon2, lat2)) = (geohash::score_to_lonlat(a), geohash::score_to_lonlat(b));
    reply_distance(out, geohash::distance(lon1, lat1, lon2, lat2) / to_meters);
    Ok(())
}

/// GEOHASH key member...: standard 11-character geohashes, null for missing members.
fn geohash_cmd(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let k = ctx.read(args.get(1))?;
    let z = k.as_ref().map(|k| k.zset()).transpose()?;
    out.array(args.len() - 2);
    for m in args.iter().skip(2) {
        match z.and_then(|z| z.score(m)) {
            Some(score) => out.bulk(&geohash::standard_geohash(score)),
            None => out.null(),
        }
    }
    Ok(())
}

/// GEOPOS key member...: `[longitude, latitude]` pairs, a null array for missing members.
fn geopos(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let k = ctx.read(args.get(1))?;
    let z = k.as_ref().map(|k| k.zset()).transpose()?;
    out.array(args.len() - 2);
    for m in args.iter().skip(2) {
        match z.and_then(|z| z.score(m)) {
            Some(score) => {
                let (lon, lat) = geohash::score_to_lonlat(score);
                out.array(2);
                reply_coord(out, lon);
                reply_coord(out, lat);
            }
            None => out.null_array(),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use hotkv_protocol::Protocol;

    use super::{fixed4, human};
    use crate::testkit::TestKit;

    #[test]
    fn number_formats() {
        assert_eq!(fixed4(0.0), "0.0000");
        assert_eq!(fixed4(0.775), "0.7750");
        assert_eq!(fixed4(0.00005), "0.0000", "half to even");
        assert_eq!(fixed4(1.23456), "1.2346");
        assert_eq!(fixed4(166274.15156960033), "166274.1516");
        assert_eq!(fixed4(-0.5), "-0.5000");
        assert_eq!(fixed4(f64::NAN), "-922337203685477.5808");
        assert_eq!(human(13.361389338970184), "13.36138933897018433");
        assert_eq!(human(-0.0), "0");
        assert_eq!(human(2.0), "2");
        assert_eq!(human(-1e-20), "0");
    }

    #[test]
    fn geoadd_is_zadd_with_geohash_scores() {
        let mut t = TestKit { record: true, ..TestKit::default() };
        assert_eq!(t.run(&["GEOADD", "nyc", "-73.9454966", "40.747533", "lic market"]), ":1\r\n");
        assert_eq!(t.run(&["GEOADD", "nyc", "-73.9454966", "40.747533", "lic market"]), ":0\r\n");
        assert_eq!(t.run(&["ZSCORE", "nyc", "lic market"]), "$16\r\n1791875804419201\r\n");
        assert_eq!(t.run(&["GEOADD", "nyc", "CH", "40.747533", "-73.9454966", "lic market"]), ":1\r\n");
        assert_eq!(t.run(&["GEOADD", "nyc", "CH", "NX", "-73.9454966", "40.747533", "lic market"]), ":0\r\n");
        assert_eq!(t.run(&["GEOADD", "nyc", "ch", "xx", "-73.9454966", "40.747533", "lic market"]), ":1\r\n");
        assert_eq!(
            t.stream,
            [
                "0: zadd nyc 1791875804419201 lic market",
                "0: zadd nyc CH 2315635802405705 lic market",
                "0: zadd nyc ch xx 1791875804419201 lic market",
            ]
        );
        assert_eq!(t.events.take(), ["n:new:nyc@0", "z:zadd:nyc@0", "z:zadd:nyc@0", "z:zadd:nyc@0"]);
        for bad in
            [&["GEOADD", "nyc", "xx", "nx", "1", "2", "m"][..], &["GEOADD", "nyc", "ch", "xx", "foo", "1", "2", "m"]]
        {
            assert_eq!(t.run(bad), "-ERR syntax error\r\n");
        }
        assert_eq!(t.run(&["GEOADD", "nyc", "ch", "ch", "ch"]), "-ERR syntax error\r\n", "ZADD without pairs");
        assert_eq!(t.run(&["GEOADD", "nyc", "1", "2", "a", "foo", "bar", "b"]), "-ERR value is not a valid float\r\n");
        assert_eq!(
            t.run(&["GEOADD", "nyc", "1", "2", "a", "200", "100", "b"]),
            "-ERR invalid longitude,latitude pair 200.000000,100.000000\r\n"
        );
        assert_eq!(
            t.run(&["GEOADD", "nyc", "0", "85.05112879", "a"]),
            "-ERR invalid longitude,latitude pair 0.000000,85.051129\r\n"
        );
        assert_eq!(t.run(&["ZCARD", "nyc"]), ":1\r\n", "nothing added by a failed call");
        assert_eq!(t.run(&["GEOADD", "nyc", "180", "85.05112878", "edge", "-180", "-85.05112878", "edge2"]), ":2\r\n");
        t.run(&["SET", "s", "x"]);
        assert!(t.run(&["GEOADD", "s", "1", "2", "a"]).starts_with("-WRONGTYPE"));
    }

    #[test]
    fn pos_hash_dist() {
        let mut t = TestKit::default();
        t.run(&["GEOADD", "Sicily", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"]);
        assert_eq!(
            t.run(&["GEOPOS", "Sicily", "Palermo", "nope"]),
            "*2\r\n*2\r\n$20\r\n13.36138933897018433\r\n$20\r\n38.11555639549629859\r\n*-1\r\n"
        );
        assert_eq!(t.run(&["GEOPOS", "Sicily"]), "*0\r\n");
        assert_eq!(t.run(&["GEOPOS", "nokey", "a"]), "*1\r\n*-1\r\n");
        assert_eq!(
            t.run(&["GEOHASH", "Sicily", "Palermo", "Catania", "x"]),
            "*3\r\n$11\r\nsqc8b49rny0\r\n$11\r\nsqdtr74hyu0\r\n$-1\r\n"
        );
        assert_eq!(t.run(&["GEODIST", "Sicily", "Palermo", "Catania"]), "$11\r\n166274.1516\r\n");
        assert_eq!(t.run(&["GEODIST", "Sicily", "Palermo", "Catania", "KM"]), "$8\r\n166.2742\r\n");
        assert_eq!(t.run(&["GEODIST", "Sicily", "Palermo", "Catania", "mi"]), "$8\r\n103.3182\r\n");
        assert_eq!(t.run(&["GEODIST", "Sicily", "Palermo", "Palermo"]), "$6\r\n0.0000\r\n");
        assert_eq!(t.run(&["GEODIST", "Sicily", "Palermo", "x"]), "$-1\r\n");
        assert_eq!(t.run(&["GEODIST", "nokey", "Palermo", "Catania"]), "$-1\r\n");
        assert_eq!(
            t.run(&["GEODIST", "nokey", "a", "b", "yd"]),
            "-ERR unsupported unit provided. please use M, KM, FT, MI\r\n"
        );
        assert_eq!(t.run(&["GEODIST", "Sicily", "a", "b", "m", "x"]), "-ERR syntax error\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(
            t.run(&["GEOPOS", "Sicily", "Catania", "x"]),
            "*2\r\n*2\r\n,15.08726745843887329\r\n,37.50266842333162032\r\n_\r\n"
        );
        assert_eq!(t.run(&["GEOHASH", "Sicily", "x"]), "*1\r\n_\r\n");
        assert_eq!(t.run(&["GEODIST", "Sicily", "Palermo", "Catania"]), "$11\r\n166274.1516\r\n");
        t.run(&["SET", "s", "x"]);
        for cmd in [&["GEOPOS", "s", "a"][..], &["GEOHASH", "s", "a"], &["GEODIST", "s", "a", "b"]] {
            assert!(t.run(cmd).starts_with("-WRONGTYPE"), "{cmd:?}");
        }
    }
}
