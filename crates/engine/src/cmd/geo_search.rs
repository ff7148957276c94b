//! Geo searches: GEOSEARCH, GEOSEARCHSTORE and the older GEORADIUS, GEORADIUSBYMEMBER and
//! their `_RO` forms, all through one parser and one search as Valkey's `georadiusGeneric`.
//!
//! The search reads the nine geohash cells [`geohash::search_cells`] picks as score ranges of
//! the sorted set (through its rank walks), keeps the points inside the shape, then orders
//! them with Valkey's own sorts (`qsort.rs`) so that ties come out as they do there. The
//! store forms write a sorted set of the matches (their geohash scores, or their distances
//! with STOREDIST) and propagate as themselves: the same data gives the same matches.

use hotkv_protocol::{Args, ReplyBuf};

use super::geo::{lonlat_arg, reply_coord, reply_distance, unit_arg};
use super::qsort::{merge_sort, partial_sort};
use super::zset_range::store_result;
use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{BeginSearch, CommandSpec, FindKeys, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::error::{CmdResult, CommandError};
use crate::geohash::{self, Extent, Hash, Shape};
use crate::types::zset::ZSet;

/// The source, then the STORE and STOREDIST keys of GEORADIUS (`start_from` 6) or
/// GEORADIUSBYMEMBER (5).
const fn store_specs(start_from: i32) -> [KeySpec; 3] {
    [
        KeySpec::single(1, kf::RO | kf::ACCESS),
        after_keyword("STORE", start_from),
        after_keyword("STOREDIST", start_from),
    ]
}

/// The key right after `keyword`, searched from `start_from`.
const fn after_keyword(keyword: &'static str, start_from: i32) -> KeySpec {
    KeySpec {
        flags: kf::OW | kf::UPDATE,
        begin: BeginSearch::Keyword { keyword, start_from },
        find: FindKeys::Range { last_key: 0, step: 1, limit: 0 },
    }
}

static RADIUS_KEYS: [KeySpec; 3] = store_specs(6);
static BYMEMBER_KEYS: [KeySpec; 3] = store_specs(5);

const RADIUS_COMPLEXITY: &str = "O(N+log(M)) where N is the number of elements inside the bounding box of the circular area delimited by center and radius and M is the number of items inside the index.";
const SEARCH_COMPLEXITY: &str = "O(N+log(M)) where N is the number of elements in the grid-aligned bounding box area around the shape provided as the filter and M is the number of items inside the shape";

/// Search command rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new(
        "georadius",
        -6,
        flags::WRITE | flags::DENYOOM,
        acl::GEO,
        &RADIUS_KEYS,
        "geo",
        "3.2.0",
        "Queries a geospatial index for members within a distance from a coordinate, optionally stores the result.",
        RADIUS_COMPLEXITY,
        EngineCmd { run: georadius, plan: LockPlan::Keys },
    )
    .with_getkeys(radius_keys),
    CommandSpec::new(
        "georadius_ro",
        -6,
        flags::READONLY,
        acl::GEO,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "geo",
        "3.2.10",
        "Returns members from a geospatial index that are within a distance from a coordinate.",
        RADIUS_COMPLEXITY,
        EngineCmd { run: georadius_ro, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "georadiusbymember",
        -5,
        flags::WRITE | flags::DENYOOM,
        acl::GEO,
        &BYMEMBER_KEYS,
        "geo",
        "3.2.0",
        "Queries a geospatial index for members within a distance from a member, optionally stores the result.",
        RADIUS_COMPLEXITY,
        EngineCmd { run: georadiusbymember, plan: LockPlan::Keys },
    )
    .with_getkeys(bymember_keys),
    CommandSpec::new(
        "georadiusbymember_ro",
        -5,
        flags::READONLY,
        acl::GEO,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "geo",
        "3.2.10",
        "Returns members from a geospatial index that are within a distance from a member.",
        RADIUS_COMPLEXITY,
        EngineCmd { run: georadiusbymember_ro, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "geosearch",
        -7,
        flags::READONLY,
        acl::GEO,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "geo",
        "6.2.0",
        "Queries a geospatial index for members inside an area of a box or a circle.",
        SEARCH_COMPLEXITY,
        EngineCmd { run: geosearch, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "geosearchstore",
        -8,
        flags::WRITE | flags::DENYOOM,
        acl::GEO,
        &[KeySpec::single(1, kf::OW | kf::UPDATE), KeySpec::single(2, kf::RO | kf::ACCESS)],
        "geo",
        "6.2.0",
        "Queries a geospatial index for members inside an area of a box or a circle, optionally stores the result.",
        SEARCH_COMPLEXITY,
        EngineCmd { run: geosearchstore, plan: LockPlan::Keys },
    ),
];

/// Which command is parsing (`RADIUS_*`, `GEOSEARCH*` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// GEORADIUS[_RO] key lon lat radius unit ...
    Radius { store: bool },
    /// GEORADIUSBYMEMBER[_RO] key member radius unit ...
    ByMember { store: bool },
    /// GEOSEARCH key ...
    Search,
    /// GEOSEARCHSTORE dst key ...
    SearchStore,
}

impl Kind {
    fn is_search(self) -> bool {
        matches!(self, Kind::Search | Kind::SearchStore)
    }

    /// Whether STORE and STOREDIST take a key (GEORADIUS and GEORADIUSBYMEMBER).
    fn stores_by_option(self) -> bool {
        matches!(self, Kind::Radius { store: true } | Kind::ByMember { store: true })
    }
}

/// Result order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sort {
    None,
    Asc,
    Desc,
}

/// A parsed search.
struct Request<'a> {
    shape: Shape,
    /// Where to store the matches, if anywhere.
    store: Option<&'a [u8]>,
    /// Store distances instead of geohashes.
    storedist: bool,
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
    sort: Sort,
    /// COUNT; 0 for all.
    count: u64,
    /// COUNT ... ANY: stop searching after `count` matches.
    any: bool,
}

/// A match.
#[derive(Debug, Clone)]
struct Point {
    member: Vec<u8>,
    lon: f64,
    lat: f64,
    /// Meters from the centre.
    dist: f64,
    score: f64,
}

fn georadius(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    search(ctx, &args, out, Kind::Radius { store: true })
}

fn georadius_ro(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    search(ctx, &args, out, Kind::Radius { store: false })
}

fn georadiusbymember(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    search(ctx, &args, out, Kind::ByMember { store: true })
}

fn georadiusbymember_ro(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    search(ctx, &args, out, Kind::ByMember { store: false })
}

fn geosearch(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    search(ctx, &args, out, Kind::Search)
}

fn geosearchstore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    search(ctx, &args, out, Kind::SearchStore)
}

/// `georadiusGeneric`: the source's type is checked first, then the arguments in order, then
/// the search runs and its matches are replied or stored.
fn search(ctx: &mut Ctx<'_>, args: &Args<'_>, out: &mut ReplyBuf, kind: Kind) -> CmdResult {
    let src = if kind == Kind::SearchStore { 2 } else { 1 };
    let (req, points) = {
        let k = ctx.read(args.get(src))?;
        let z = k.as_ref().map(|k| k.zset()).transpose()?;
        let req = parse(args, kind, z)?;
        let limit = if req.any { req.count } else { 0 };
        let points = z.map(|z| matches(z, &req.shape, limit as usize));
        (req, points)
    };
    let Some(mut points) = points else {
        // No source: an empty reply, or an emptied destination.
        match req.store {
            Some(dst) => {
                if ctx.delete(dst)? {
                    ctx.events.notify('g', "del", dst, ctx.db);
                }
                out.int(0);
            }
            None => out.array(0),
        }
        return Ok(());
    };
    if points.is_empty() && req.store.is_none() {
        out.array(0);
        return Ok(());
    }
    // COUNT without an order returns the nearest ones, unless ANY asked for any.
    let sort = if req.count != 0 && req.sort == Sort::None && !req.any { Sort::Asc } else { req.sort };
    let total = points.len();
    let returned = if req.count == 0 { total } else { total.min(usize::try_from(req.count).unwrap_or(usize::MAX)) };
    if sort != Sort::None {
        let asc = |a: &Point, b: &Point| {
            // Valkey's comparator: greater, equal, or else less (a NaN is "less" both ways).
            if a.dist > b.dist {
                std::cmp::Ordering::Greater
            } else if a.dist == b.dist {
                std::cmp::Ordering::Equal
            } else {
                std::cmp::Ordering::Less
            }
        };
        let desc = |a: &Point, b: &Point| asc(a, b).reverse();
        match (sort, returned == total) {
            (Sort::Desc, true) => merge_sort(&mut points, &desc),
            (Sort::Desc, false) => partial_sort(&mut points, 0, returned - 1, &desc),
            (_, true) => merge_sort(&mut points, &asc),
            (_, false) => partial_sort(&mut points, 0, returned - 1, &asc),
        }
    }
    points.truncate(returned);
    let unit = req.shape.to_meters;
    let Some(dst) = req.store else {
        reply(out, &req, &points);
        return Ok(());
    };
    let mut items: Vec<(Vec<u8>, f64)> = points
        .into_iter()
        .map(|p| {
            let score = if req.storedist { p.dist / unit } else { p.score };
            (p.member, score)
        })
        .collect();
    let event = if kind.is_search() { "geosearchstore" } else { "georadiusstore" };
    store_result(ctx, out, dst, &mut items, event)
}

/// Writes the matches: bare members, or per member an array of the member, then its distance,
/// geohash and coordinates as asked.
fn reply(out: &mut ReplyBuf, req: &Request<'_>, points: &[Point]) {
    let extra = usize::from(req.with_dist) + usize::from(req.with_hash) + usize::from(req.with_coord);
    out.array(points.len());
    for p in points {
        if extra > 0 {
            out.array(extra + 1);
        }
        out.bulk(&p.member);
        if req.with_dist {
            reply_distance(out, p.dist / req.shape.to_meters);
        }
        if req.with_hash {
            // A C conversion of the score to `long long`: geohash scores are integers.
            out.int(p.score as i64);
        }
        if req.with_coord {
            out.array(2);
            reply_coord(out, p.lon);
            reply_coord(out, p.lat);
        }
    }
}

/// Parses a search's arguments with Valkey's checks in Valkey's order. `z` is the source set,
/// when it exists: FROMMEMBER (and GEORADIUSBYMEMBER's member) is looked up as it is parsed.
fn parse<'a>(args: &Args<'a>, kind: Kind, z: Option<&ZSet>) -> Result<Request<'a>, CommandError> {
    let mut req = Request {
        shape: Shape { lon: 0.0, lat: 0.0, extent: Extent::Radius(0.0), to_meters: 0.0 },
        store: None,
        storedist: false,
        with_dist: false,
        with_hash: false,
        with_coord: false,
        sort: Sort::None,
        count: 0,
        any: false,
    };
    let base = match kind {
        Kind::Radius { .. } => {
            (req.shape.lon, req.shape.lat) = lonlat_arg(args.get(2), args.get(3))?;
            let (r, unit) = distance_arg(args.get(4), args.get(5))?;
            (req.shape.extent, req.shape.to_meters) = (Extent::Radius(r), unit);
            6
        }
        Kind::ByMember { .. } => {
            // Without a source there is nothing to look up and, as in Valkey, the radius is
            // not even parsed.
            if let Some(z) = z {
                (req.shape.lon, req.shape.lat) = member_pos(z, args.get(2))?;
                let (r, unit) = distance_arg(args.get(3), args.get(4))?;
                (req.shape.extent, req.shape.to_meters) = (Extent::Radius(r), unit);
            }
            5
        }
        Kind::Search => 2,
        Kind::SearchStore => {
            req.store = Some(args.get(1));
            3
        }
    };
    let (mut from_member, mut from_lonlat, mut by_radius, mut by_box) = (false, false, false, false);
    let n = args.len();
    let mut j = base;
    while j < n {
        let arg = args.get(j);
        let left = n - j - 1;
        let is = |name: &str| arg.eq_ignore_ascii_case(name.as_bytes());
        if is("withdist") {
            req.with_dist = true;
        } else if is("withhash") {
            req.with_hash = true;
        } else if is("withcoord") {
            req.with_coord = true;
        } else if is("any") {
            req.any = true;
        } else if is("asc") {
            req.sort = Sort::Asc;
        } else if is("desc") {
            req.sort = Sort::Desc;
        } else if is("count") && left >= 1 {
            let count = int_arg(args.get(j + 1))?;
            if count <= 0 {
                return Err(CommandError::err("COUNT must be > 0"));
            }
            req.count = count as u64;
            j += 1;
        } else if (is("store") || is("storedist")) && left >= 1 && kind.stores_by_option() {
            req.store = Some(args.get(j + 1));
            req.storedist = is("storedist");
            j += 1;
        } else if is("storedist") && kind == Kind::SearchStore {
            req.storedist = true;
        } else if is("frommember") && left >= 1 && kind.is_search() && !from_lonlat {
            if let Some(z) = z {
                (req.shape.lon, req.shape.lat) = member_pos(z, args.get(j + 1))?;
            }
            from_member = true;
            j += 1;
        } else if is("fromlonlat") && left >= 2 && kind.is_search() && !from_member {
            (req.shape.lon, req.shape.lat) = lonlat_arg(args.get(j + 1), args.get(j + 2))?;
            from_lonlat = true;
            j += 2;
        } else if is("byradius") && left >= 2 && kind.is_search() && !by_box {
            let (r, unit) = distance_arg(args.get(j + 1), args.get(j + 2))?;
            (req.shape.extent, req.shape.to_meters) = (Extent::Radius(r), unit);
            by_radius = true;
            j += 2;
        } else if is("bybox") && left >= 3 && kind.is_search() && !by_radius {
            let (width, height, unit) = box_arg(args.get(j + 1), args.get(j + 2), args.get(j + 3))?;
            (req.shape.extent, req.shape.to_meters) = (Extent::Box { width, height }, unit);
            by_box = true;
            j += 3;
        } else {
            return Err(CommandError::Syntax);
        }
        j += 1;
    }
    if req.store.is_some() && (req.with_dist || req.with_hash || req.with_coord) {
        let what = if kind == Kind::SearchStore { "GEOSEARCHSTORE" } else { "STORE option in GEORADIUS" };
        return Err(CommandError::err(format!(
            "{what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )));
    }
    // The command name as the client spelled it, as Valkey prints `argv[0]`.
    let name = || String::from_utf8_lossy(args.get(0)).into_owned();
    if kind.is_search() && !(from_member || from_lonlat) {
        return Err(CommandError::err(format!(
            "exactly one of FROMMEMBER or FROMLONLAT can be specified for {}",
            name()
        )));
    }
    if kind.is_search() && !(by_radius || by_box) {
        return Err(CommandError::err(format!("exactly one of BYRADIUS and BYBOX can be specified for {}", name())));
    }
    if req.any && req.count == 0 {
        return Err(CommandError::err("the ANY argument requires COUNT argument"));
    }
    Ok(req)
}

/// The position of a member, or Valkey's error for a missing one (`longLatFromMember`).
fn member_pos(z: &ZSet, member: &[u8]) -> Result<(f64, f64), CommandError> {
    z.score(member)
        .map(geohash::score_to_lonlat)
        .ok_or_else(|| CommandError::err("could not decode requested zset member"))
}

/// `radius unit` (`extractDistanceOrReply`): the radius and the unit's meters.
fn distance_arg(radius: &[u8], unit: &[u8]) -> Result<(f64, f64), CommandError> {
    let r = hotkv_protocol::parse_double(radius).ok_or_else(|| CommandError::err("need numeric radius"))?;
    if r < 0.0 {
        return Err(CommandError::err("radius cannot be negative"));
    }
    Ok((r, unit_arg(unit)?))
}

/// `width height unit` (`extractBoxOrReply`).
fn box_arg(width: &[u8], height: &[u8], unit: &[u8]) -> Result<(f64, f64, f64), CommandError> {
    let w = hotkv_protocol::parse_double(width).ok_or_else(|| CommandError::err("need numeric width"))?;
    let h = hotkv_protocol::parse_double(height).ok_or_else(|| CommandError::err("need numeric height"))?;
    if h < 0.0 || w < 0.0 {
        return Err(CommandError::err("height or width cannot be negative"));
    }
    Ok((w, h, unit_arg(unit)?))
}

/// The members inside the shape, cell by cell in [`geohash::search_cells`] order and by score
/// within a cell (`membersOfAllNeighbors`). With `limit` (COUNT ... ANY), the search stops
/// once it has that many.
fn matches(z: &ZSet, shape: &Shape, limit: usize) -> Vec<Point> {
    let cells = geohash::search_cells(shape);
    let mut points = Vec::new();
    let full = |points: &Vec<Point>| limit > 0 && points.len() >= limit;
    // With a huge radius neighbouring cells can be the same cell: a cell equal to the one
    // read last is skipped (the centre, index 0, never counts as "read last", as in Valkey).
    let mut last = 0;
    for (i, cell) in cells.iter().enumerate() {
        let Some(cell) = *cell else { continue };
        if last != 0 && cells[last] == Some(cell) {
            continue;
        }
        if full(&points) {
            break;
        }
        cell_matches(z, cell, shape, &mut points, limit);
        last = i;
    }
    points
}

/// Appends the members of one cell that lie inside the shape (`geoGetPointsInRange`).
fn cell_matches(z: &ZSet, cell: Hash, shape: &Shape, points: &mut Vec<Point>, limit: usize) {
    let (min, max) = geohash::score_range(cell);
    let lo = z.count_before(|s, _| s < min);
    let hi = z.count_before(|s, _| s < max);
    if hi <= lo {
        return;
    }
    for (member, score) in z.range(lo, hi - lo, false) {
        let (lon, lat) = geohash::score_to_lonlat(score);
        if let Some(dist) = geohash::within(shape, lon, lat) {
            points.push(Point { member: member.to_vec(), lon, lat, dist, score });
        }
        if limit > 0 && points.len() >= limit {
            break;
        }
    }
}

/// GEORADIUS's keys: the source, then the first STORE and the first STOREDIST after the fixed
/// arguments, as Valkey's key specs find them (its keyword search never takes the last
/// argument, so a trailing STORE names no key and the parser's syntax error answers).
///
/// A call that repeats the option stores into its last key, which Valkey's specs do not name
/// (nor lock, nor route); here the later keys follow, so the key written is always locked and
/// a cluster refuses keys of different slots.
fn radius_keys(args: &Args<'_>, found: &mut dyn FnMut(usize, u32)) {
    store_keys(args, 6, found);
}

/// GEORADIUSBYMEMBER's keys, as [`radius_keys`].
fn bymember_keys(args: &Args<'_>, found: &mut dyn FnMut(usize, u32)) {
    store_keys(args, 5, found);
}

fn store_keys(args: &Args<'_>, start: usize, found: &mut dyn FnMut(usize, u32)) {
    if args.len() > 1 {
        found(1, kf::RO | kf::ACCESS);
    }
    let end = args.len().saturating_sub(1);
    let is = |i: usize, keyword: &[u8]| args.get(i).eq_ignore_ascii_case(keyword);
    let first_store = (start..end).find(|&i| is(i, b"store"));
    let first_storedist = (start..end).find(|&i| is(i, b"storedist"));
    for i in [first_store, first_storedist].into_iter().flatten() {
        found(i + 1, kf::OW | kf::UPDATE);
    }
    for i in start..end {
        if (is(i, b"store") || is(i, b"storedist")) && Some(i) != first_store && Some(i) != first_storedist {
            found(i + 1, kf::OW | kf::UPDATE);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testkit::arr;
    use hotkv_protocol::Protocol;

    use super::super::qsort::{merge_sort, partial_sort};
    use crate::testkit::TestKit;

    /// geo.tcl's New York set.
    fn nyc() -> TestKit {
        let mut t = TestKit::default();
        t.run(&[
            "GEOADD",
            "nyc",
            "-73.9454966",
            "40.747533",
            "lic market",
            "-73.9733487",
            "40.7648057",
            "central park n/q/r",
            "-73.9903085",
            "40.7362513",
            "union square",
            "-74.0131604",
            "40.7126674",
            "wtc one",
            "-73.7858139",
            "40.6428986",
            "jfk",
            "-73.9375699",
            "40.7498929",
            "q4",
            "-73.9564142",
            "40.7480973",
            "4545",
        ]);
        t
    }

    const CENTER: [&str; 2] = ["-73.9798091", "40.7598464"];

    #[test]
    fn radius_and_search_replies_match_valkey() {
        let mut t = nyc();
        let c = CENTER;
        let want = arr(&["central park n/q/r", "4545", "union square"]);
        assert_eq!(t.run(&["GEORADIUS", "nyc", c[0], c[1], "3", "km", "asc"]), want);
        assert_eq!(t.run(&["GEORADIUS_RO", "nyc", c[0], c[1], "3", "km", "asc"]), want);
        assert_eq!(t.run(&["GEORADIUS", "nyc", c[0], c[1], "10", "km", "COUNT", "3"]), want);
        assert_eq!(
            t.run(&["GEOSEARCH", "nyc", "fromlonlat", c[0], c[1], "bybox", "6", "6", "km", "asc"]),
            arr(&["central park n/q/r", "4545", "union square", "lic market"])
        );
        assert_eq!(
            t.run(&["GEORADIUS", "nyc", c[0], c[1], "3", "km", "withdist", "asc"]),
            "*3\r\n*2\r\n$18\r\ncentral park n/q/r\r\n$6\r\n0.7750\r\n*2\r\n$4\r\n4545\r\n$6\r\n2.3651\r\n\
             *2\r\n$12\r\nunion square\r\n$6\r\n2.7697\r\n"
        );
        assert_eq!(
            t.run(&["GEORADIUS", "nyc", c[0], c[1], "10", "km", "COUNT", "3", "ANY"]),
            arr(&["wtc one", "union square", "central park n/q/r"])
        );
        assert_eq!(
            t.run(&["GEORADIUS", "nyc", c[0], c[1], "10", "km", "COUNT", "3", "ANY", "ASC"]),
            arr(&["central park n/q/r", "union square", "wtc one"])
        );
        assert_eq!(t.run(&["GEORADIUS", "nyc", c[0], c[1], "10", "km", "COUNT", "2", "DESC"]), arr(&["wtc one", "q4"]));
        assert_eq!(
            t.run(&["GEORADIUSBYMEMBER", "nyc", "wtc one", "7", "km"]),
            arr(&["wtc one", "union square", "central park n/q/r", "4545", "lic market"])
        );
        assert_eq!(
            t.run(&["GEOSEARCH", "nyc", "frommember", "wtc one", "bybox", "14", "14", "km"]),
            arr(&["wtc one", "union square", "central park n/q/r", "4545", "lic market", "q4"])
        );
        let r = t.run(&["GEORADIUS", "nyc", c[0], c[1], "10", "km", "WITHDIST", "WITHHASH", "WITHCOORD", "COUNT", "1"]);
        assert_eq!(
            r,
            "*1\r\n*4\r\n$18\r\ncentral park n/q/r\r\n$6\r\n0.7750\r\n:1791875761332224\r\n\
             *2\r\n$21\r\n-73.97334784269332886\r\n$20\r\n40.76480639569881959\r\n"
        );
        t.proto = Protocol::Resp3;
        let r = t.run(&["GEOSEARCH", "nyc", "FROMMEMBER", "q4", "BYRADIUS", "0", "m", "WITHCOORD", "WITHDIST"]);
        assert_eq!(
            r,
            "*1\r\n*3\r\n$2\r\nq4\r\n$6\r\n0.0000\r\n*2\r\n,-73.93757253885269165\r\n,40.74989209639726795\r\n"
        );
    }

    #[test]
    fn argument_errors_in_valkey_order() {
        let mut t = nyc();
        let c = CENTER;
        let run = |t: &mut TestKit, a: &[&str]| t.run(a);
        let err = |m: &str| format!("-ERR {m}\r\n");
        assert_eq!(
            run(&mut t, &["GEOSEARCH", "nyc", "fromlonlat", c[0], c[1], "frommember", "x", "bybox", "6", "6", "km"]),
            err("syntax error")
        );
        assert_eq!(
            run(&mut t, &["geosearch", "nyc", "bybox", "3", "3", "km", "asc", "desc", "withhash"]),
            err("exactly one of FROMMEMBER or FROMLONLAT can be specified for geosearch")
        );
        assert_eq!(
            run(&mut t, &["GeoSearch", "nyc", "fromlonlat", c[0], c[1], "asc", "withdist"]),
            err("exactly one of BYRADIUS and BYBOX can be specified for GeoSearch")
        );
        assert_eq!(
            run(
                &mut t,
                &["GEOSEARCH", "nyc", "fromlonlat", c[0], c[1], "byradius", "3", "km", "bybox", "3", "3", "km"]
            ),
            err("syntax error")
        );
        assert_eq!(
            run(&mut t, &["GEOSEARCH", "nyc", "fromlonlat", c[0], c[1], "bybox", "6", "6", "km", "storedist"]),
            err("syntax error")
        );
        assert_eq!(
            run(&mut t, &["GEORADIUS", "nyc", c[0], c[1], "10", "km", "ANY", "ASC"]),
            err("the ANY argument requires COUNT argument")
        );
        assert_eq!(run(&mut t, &["GEORADIUS", "nyc", c[0], c[1], "10", "km", "COUNT"]), err("syntax error"));
        assert_eq!(run(&mut t, &["GEORADIUS", "nyc", c[0], c[1], "10", "km", "COUNT", "0"]), err("COUNT must be > 0"));
        assert_eq!(run(&mut t, &["GEORADIUS", "nyc", c[0], c[1], "10", "km", "COUNT", "-3"]), err("COUNT must be > 0"));
        assert_eq!(
            run(&mut t, &["GEORADIUS", "nyc", c[0], c[1], "10", "km", "COUNT", "x"]),
            err("value is not an integer or out of range")
        );
        assert!(
            run(&mut t, &["GEORADIUS", "nyc", c[0], c[1], "100", "km", "COUNT", "99999999999999999"])
                .starts_with("*7\r\n")
        );
        assert_eq!(
            run(&mut t, &["GEORADIUS", "nyc", "200", "100", "10", "km"]),
            err("invalid longitude,latitude pair 200.000000,100.000000")
        );
        assert_eq!(run(&mut t, &["GEORADIUS", "nyc", "x", "1", "10", "km"]), err("value is not a valid float"));
        assert_eq!(run(&mut t, &["GEORADIUS", "nyc", "1", "1", "nan", "km"]), err("need numeric radius"));
        assert_eq!(run(&mut t, &["GEORADIUS", "nyc", "1", "1", "-1", "km"]), err("radius cannot be negative"));
        assert_eq!(
            run(&mut t, &["GEORADIUS", "nyc", "1", "1", "1", "yards"]),
            err("unsupported unit provided. please use M, KM, FT, MI")
        );
        assert_eq!(
            run(&mut t, &["GEOSEARCH", "nyc", "fromlonlat", "1", "1", "bybox", "x", "1", "km"]),
            err("need numeric width")
        );
        assert_eq!(
            run(&mut t, &["GEOSEARCH", "nyc", "fromlonlat", "1", "1", "bybox", "1", "-1", "km"]),
            err("height or width cannot be negative")
        );
        assert_eq!(
            run(&mut t, &["GEORADIUSBYMEMBER", "nyc", "nobody", "x", "km"]),
            err("could not decode requested zset member")
        );
        assert_eq!(
            run(&mut t, &["GEOSEARCH", "nyc", "frommember", "nobody", "bybox", "1", "1", "km"]),
            err("could not decode requested zset member")
        );
        assert_eq!(
            run(&mut t, &["GEORADIUS", "{n}", "1", "1", "1", "km", "store", "{n}2", "withdist"]),
            err("STORE option in GEORADIUS is not compatible with WITHDIST, WITHHASH and WITHCOORD options")
        );
        assert_eq!(
            run(&mut t, &["GEOSEARCHSTORE", "{n}2", "{n}", "fromlonlat", "1", "1", "byradius", "1", "km", "withhash"]),
            err("GEOSEARCHSTORE is not compatible with WITHDIST, WITHHASH and WITHCOORD options")
        );
        assert_eq!(run(&mut t, &["GEORADIUS_RO", "nyc", "1", "1", "1", "km", "store", "x"]), err("syntax error"));
        assert_eq!(run(&mut t, &["GEORADIUS", "nyc", "1", "1", "1", "km", "store"]), err("syntax error"));
        // A missing source: GEORADIUSBYMEMBER does not even read its radius.
        assert_eq!(run(&mut t, &["GEORADIUSBYMEMBER", "nokey", "m", "x", "km"]), "*0\r\n");
        assert_eq!(run(&mut t, &["GEOSEARCH", "nokey", "frommember", "m", "bybox", "1", "1", "km"]), "*0\r\n");
        assert_eq!(
            run(&mut t, &["GEOSEARCH", "nokey", "frommember", "m", "bybox", "1", "x", "km"]),
            err("need numeric height")
        );
        t.run(&["SET", "s", "x"]);
        assert!(run(&mut t, &["GEORADIUS", "s", "1000", "1", "x", "km"]).starts_with("-WRONGTYPE"), "type first");
    }

    #[test]
    fn store_forms() {
        let mut t = TestKit { record: true, ..TestKit::default() };
        t.run(&["GEOADD", "{p}", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"]);
        t.stream.clear();
        t.events.take();
        assert_eq!(t.run(&["GEORADIUS", "{p}", "13.361389", "38.115556", "500", "km", "STORE", "{p}2"]), ":2\r\n");
        assert_eq!(
            t.run(&["ZRANGE", "{p}2", "0", "-1", "WITHSCORES"]),
            t.run(&["ZRANGE", "{p}", "0", "-1", "WITHSCORES"])
        );
        assert_eq!(t.run(&["GEORADIUSBYMEMBER", "{p}", "Catania", "500", "km", "storedist", "{p}2"]), ":2\r\n");
        assert_eq!(
            t.run(&["ZRANGE", "{p}2", "0", "-1", "WITHSCORES"]),
            arr(&["Catania", "0", "Palermo", "166.27415156960032"])
        );
        assert_eq!(
            t.run(&[
                "GEOSEARCHSTORE",
                "{p}2",
                "{p}",
                "fromlonlat",
                "13.361389",
                "38.115556",
                "byradius",
                "500",
                "km",
                "storedist",
                "count",
                "1"
            ]),
            ":1\r\n"
        );
        assert_eq!(t.run(&["ZRANGE", "{p}2", "0", "-1"]), arr(&["Palermo"]));
        assert_eq!(
            t.events.take(),
            ["n:new:{p}2@0", "z:georadiusstore:{p}2@0", "z:georadiusstore:{p}2@0", "z:geosearchstore:{p}2@0"]
        );
        assert_eq!(t.run(&["GEOSEARCHSTORE", "{p}2", "{p}", "fromlonlat", "0", "0", "byradius", "1", "km"]), ":0\r\n");
        assert_eq!(t.run(&["EXISTS", "{p}2"]), ":0\r\n");
        assert_eq!(t.run(&["GEORADIUS", "{p}x", "0", "0", "1", "km", "STORE", "{p}2"]), ":0\r\n", "no source, no key");
        t.run(&["SET", "{p}2", "x"]);
        assert_eq!(t.run(&["GEORADIUSBYMEMBER", "{p}none", "m", "1", "km", "STORE", "{p}2"]), ":0\r\n");
        assert_eq!(t.run(&["EXISTS", "{p}2"]), ":0\r\n", "a missing source deletes the destination");
        assert_eq!(
            t.events.take(),
            [
                "g:del:{p}2@0",
                "m:keymiss:{p}2@0",
                "m:keymiss:{p}x@0",
                "n:new:{p}2@0",
                "$:set:{p}2@0",
                "m:keymiss:{p}none@0",
                "g:del:{p}2@0",
                "m:keymiss:{p}2@0"
            ]
        );
        // A repeated STORE writes its last key, which is locked too.
        let args = ["GEORADIUS", "{p}", "13.361389", "38.115556", "500", "km", "STORE", "first", "STORE", "last"];
        assert_eq!(t.run(&args), ":2\r\n");
        assert_eq!(t.run(&["EXISTS", "first"]), ":0\r\n");
        assert_eq!(t.run(&["ZCARD", "last"]), ":2\r\n");
        let stream: Vec<&str> = t.stream.iter().map(String::as_str).collect();
        assert_eq!(
            stream[0], "0: GEORADIUS {p} 13.361389 38.115556 500 km STORE {p}2",
            "store forms propagate as themselves"
        );
    }

    #[test]
    fn huge_radius_poles_and_antimeridian() {
        let mut t = TestKit::default();
        t.run(&["GEOADD", "users", "-47.271613776683807", "-54.534504198047678", "user_000000"]);
        let r = t.run(&["GEORADIUS", "users", "0", "0", "50000", "km", "WITHCOORD"]);
        assert!(r.starts_with("*1\r\n"), "{r}");
        assert!(t.run(&["GEORADIUS", "users", "0", "0", "inf", "km"]).starts_with("*1\r\n"));
        t.run(&["GEOADD", "k1", "45", "65", "n1", "-135", "85.05", "n2"]);
        assert_eq!(t.run(&["GEORADIUSBYMEMBER", "k1", "n1", "5009431", "m"]), arr(&["n1", "n2"]));
        t.run(&["GEOADD", "points", "179.5", "36", "point1", "-179.5", "36", "point2"]);
        assert_eq!(
            t.run(&["GEOSEARCH", "points", "fromlonlat", "179", "37", "bybox", "400", "400", "km", "asc"]),
            arr(&["point1", "point2"])
        );
        assert_eq!(
            t.run(&["GEOSEARCH", "points", "fromlonlat", "-179", "37", "bybox", "400", "400", "km", "asc"]),
            arr(&["point2", "point1"])
        );
        t.run(&["GEOADD", "s", "-122.407107", "37.794300", "1", "-122.227336", "37.794300", "2"]);
        assert_eq!(
            t.run(&["GEORADIUS", "s", "-122.407107", "37.794300", "30", "mi", "ASC", "WITHDIST"]),
            "*2\r\n*2\r\n$1\r\n1\r\n$6\r\n0.0001\r\n*2\r\n$1\r\n2\r\n$6\r\n9.8182\r\n"
        );
    }

    #[test]
    fn sorts_reproduce_valkeys_tie_orders() {
        // Stable merge sort: equal keys keep their order.
        let mut v: Vec<(u8, char)> = vec![(2, 'a'), (1, 'b'), (2, 'c'), (1, 'd'), (0, 'e')];
        merge_sort(&mut v, &|a, b| a.0.cmp(&b.0));
        assert_eq!(v, [(0, 'e'), (1, 'b'), (1, 'd'), (2, 'a'), (2, 'c')]);
        // The partial quicksort puts the right elements first, whatever their tie order.
        for n in [1usize, 5, 7, 8, 41, 100, 500] {
            let v0: Vec<(u32, usize)> = (0..n).map(|i| (((i * 7919) % 13) as u32, i)).collect();
            for k in [1, n / 2 + 1, n] {
                let mut v = v0.clone();
                partial_sort(&mut v, 0, k - 1, &|a: &(u32, usize), b: &(u32, usize)| a.0.cmp(&b.0));
                let mut keys: Vec<u32> = v0.iter().map(|p| p.0).collect();
                keys.sort();
                assert_eq!(v[..k].iter().map(|p| p.0).collect::<Vec<_>>(), keys[..k], "n={n} k={k}");
            }
        }
        // Tie orders recorded from Valkey's pqsort.c and glibc's qsort (compiled from C, on
        // 40-byte elements like Valkey's geoPoint).
        let order = |keys: &[u8], k: usize, desc: bool| -> Vec<usize> {
            let mut v: Vec<(u8, usize)> = keys.iter().copied().zip(0..).collect();
            let cmp = |a: &(u8, usize), b: &(u8, usize)| if desc { b.0.cmp(&a.0) } else { a.0.cmp(&b.0) };
            if k == v.len() {
                merge_sort(&mut v, &cmp);
            } else {
                partial_sort(&mut v, 0, k - 1, &cmp);
            }
            v[..k].iter().map(|p| p.1).collect()
        };
        assert_eq!(order(&[1, 2, 1, 1, 2, 2, 0, 0, 2, 1, 2, 2], 4, false), [7, 6, 3, 0]);
        let keys = [
            1, 0, 3, 2, 1, 0, 0, 3, 3, 1, 0, 0, 0, 0, 1, 1, 0, 3, 2, 3, 1, 1, 2, 3, 0, 0, 3, 2, 3, 0, 2, 2, 1, 2, 0, 0,
            0, 3, 0, 2, 3, 0, 0, 0, 1,
        ];
        assert_eq!(order(&keys, 6, false), [36, 34, 5, 6, 29, 25]);
        let keys = [
            1, 0, 3, 3, 3, 3, 0, 1, 2, 2, 0, 2, 2, 0, 3, 0, 1, 1, 0, 0, 0, 3, 3, 1, 1, 3, 1, 1, 3, 3, 0, 3, 3, 1, 0, 2,
            2, 0, 1, 1, 3, 0, 0, 1, 1,
        ];
        assert_eq!(
            order(&keys, 45, true),
            [
                2, 3, 4, 5, 14, 21, 22, 25, 28, 29, 31, 32, 40, 8, 9, 11, 12, 35, 36, 0, 7, 16, 17, 23, 24, 26, 27, 33,
                38, 39, 43, 44, 1, 6, 10, 13, 15, 18, 19, 20, 30, 34, 37, 41, 42
            ]
        );
        // An inconsistent comparison (NaN distances) neither panics nor loses elements.
        let mut v: Vec<f64> = vec![1.0, f64::NAN, 0.5, f64::NAN, 2.0, 0.1, 3.0, f64::NAN, 1.5];
        let cmp = |a: &f64, b: &f64| {
            if a > b {
                std::cmp::Ordering::Greater
            } else if a == b {
                std::cmp::Ordering::Equal
            } else {
                std::cmp::Ordering::Less
            }
        };
        merge_sort(&mut v, &cmp);
        partial_sort(&mut v, 0, 2, &cmp);
        assert_eq!(v.len(), 9);
    }
}
