//! Geohash arithmetic for the geo commands, bit for bit as Valkey computes it (`geohash.c`,
//! `geohash_helper.c`), so that scores, positions, distances and search results agree with
//! Valkey's to the last digit.
//!
//! A position is a 52-bit interleaved geohash (26 bits of latitude on the even bits, 26 of
//! longitude on the odd bits) over the Web Mercator limits: longitude ±180, latitude
//! ±85.05112878. A geo set is a sorted set whose scores are these hashes. A search covers its
//! shape with the geohash box of the centre and its eight neighbours at a step (bits per
//! axis) chosen from the shape's size, reads each box as a score range, and keeps the points
//! whose haversine distance (or box offsets) fall inside the shape.
//!
//! The floating-point expressions keep Valkey's operation order: reordering them changes
//! results in the last bit, which shows in the 17-digit coordinates replies carry.

/// Southernmost latitude a position may have.
pub const LAT_MIN: f64 = -85.05112878;
/// Northernmost latitude a position may have.
pub const LAT_MAX: f64 = 85.05112878;
/// Westernmost longitude.
pub const LON_MIN: f64 = -180.0;
/// Easternmost longitude.
pub const LON_MAX: f64 = 180.0;
/// Bits per axis of a stored position (26 * 2 = 52 bits).
pub const STEP_MAX: u8 = 26;
/// Earth's quadratic mean radius for WGS-84, in meters, as Valkey uses it.
pub const EARTH_RADIUS_M: f64 = 6372797.560856;

/// A geohash of `step` bits per axis; bits and step both zero mark an excluded search box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hash {
    /// Interleaved bits: latitude on even positions, longitude on odd ones.
    pub bits: u64,
    /// Bits per axis (1 to 32).
    pub step: u8,
}

/// A closed interval of one coordinate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// Lower end.
    pub min: f64,
    /// Upper end.
    pub max: f64,
}

/// The rectangle of coordinates a hash stands for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Area {
    /// Longitudes covered.
    pub lon: Range,
    /// Latitudes covered.
    pub lat: Range,
}

/// The limits geo sets index positions in (`geohashGetCoordRange`).
pub const LON_RANGE: Range = Range { min: LON_MIN, max: LON_MAX };
/// See [`LON_RANGE`].
pub const LAT_RANGE: Range = Range { min: LAT_MIN, max: LAT_MAX };

/// The extent of a search shape, in its unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Extent {
    /// A circle of this radius.
    Radius(f64),
    /// An axis-aligned box of this width (east-west) and height (north-south).
    Box {
        /// Width.
        width: f64,
        /// Height.
        height: f64,
    },
}

/// A search area: its centre, extent and the unit's size in meters (`GeoShape`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    /// Longitude of the centre.
    pub lon: f64,
    /// Latitude of the centre.
    pub lat: f64,
    /// Radius or box, in the unit.
    pub extent: Extent,
    /// Meters per unit.
    pub to_meters: f64,
}

/// Encodes a position at `step` bits per axis over the given ranges (`geohashEncode`); `None`
/// for a position outside the geo limits or outside the ranges.
#[allow(clippy::manual_range_contains)] // Valkey's comparisons, NaN included
pub fn encode(lon_range: Range, lat_range: Range, lon: f64, lat: f64, step: u8) -> Option<Hash> {
    let zero = |r: Range| r.min == 0.0 && r.max == 0.0;
    if step > 32 || step == 0 || zero(lat_range) || zero(lon_range) {
        return None;
    }
    // Written as Valkey compares, so that NaN would pass as it does there.
    if lon > LON_MAX || lon < LON_MIN || lat > LAT_MAX || lat < LAT_MIN {
        return None;
    }
    if lat < lat_range.min || lat > lat_range.max || lon < lon_range.min || lon > lon_range.max {
        return None;
    }
    let cells = (1u64 << step) as f64;
    let lat_offset = (lat - lat_range.min) / (lat_range.max - lat_range.min) * cells;
    let lon_offset = (lon - lon_range.min) / (lon_range.max - lon_range.min) * cells;
    Some(Hash { bits: interleave(to_u32(lat_offset), to_u32(lon_offset)), step })
}

/// [`encode`] over the geo limits (`geohashEncodeWGS84`).
pub fn encode_wgs84(lon: f64, lat: f64, step: u8) -> Option<Hash> {
    encode(LON_RANGE, LAT_RANGE, lon, lat, step)
}

/// The area a hash covers (`geohashDecode`); `None` for the zero hash.
pub fn decode(lon_range: Range, lat_range: Range, hash: Hash) -> Option<Area> {
    if hash.bits == 0 && hash.step == 0 {
        return None;
    }
    let (ilat, ilon) = deinterleave(hash.bits);
    let cells = (1u64 << hash.step) as f64;
    let lat_scale = lat_range.max - lat_range.min;
    let lon_scale = lon_range.max - lon_range.min;
    // C `uint32_t + 1` wraps.
    let lat = Range {
        min: lat_range.min + (f64::from(ilat) / cells) * lat_scale,
        max: lat_range.min + (f64::from(ilat.wrapping_add(1)) / cells) * lat_scale,
    };
    let lon = Range {
        min: lon_range.min + (f64::from(ilon) / cells) * lon_scale,
        max: lon_range.min + (f64::from(ilon.wrapping_add(1)) / cells) * lon_scale,
    };
    Some(Area { lon, lat })
}

/// The centre of an area, kept within the geo limits (`geohashDecodeAreaToLongLat`).
pub fn area_center(area: &Area) -> (f64, f64) {
    let lon = ((area.lon.min + area.lon.max) / 2.0).clamp(LON_MIN, LON_MAX);
    let lat = ((area.lat.min + area.lat.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// The position a sorted-set score stands for (Valkey's `decodeGeohash`): the score is read
/// as a 52-bit hash and decoded to the centre of its cell. Any score decodes to some position.
pub fn score_to_lonlat(score: f64) -> (f64, f64) {
    let hash = Hash { bits: score_bits(score), step: STEP_MAX };
    match decode(LON_RANGE, LAT_RANGE, hash) {
        Some(area) => area_center(&area),
        None => (0.0, 0.0),
    }
}

/// The score GEOADD gives a position already checked to be within the limits.
pub fn lonlat_to_score(lon: f64, lat: f64) -> u64 {
    encode_wgs84(lon, lat, STEP_MAX).map_or(0, align52)
}

/// The 11-character standard geohash GEOHASH replies with: the position re-encoded over
/// latitude ±90 (the standard range) and spelled in base 32, the last character always `0`.
pub fn standard_geohash(score: f64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (lon, lat) = score_to_lonlat(score);
    let std_lat = Range { min: -90.0, max: 90.0 };
    let bits = encode(LON_RANGE, std_lat, lon, lat, STEP_MAX).map_or(0, |h| h.bits);
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().enumerate().take(10) {
        *c = ALPHABET[((bits >> (52 - (i + 1) * 5)) & 0x1f) as usize];
    }
    out
}

/// A hash shifted to 52 bits: the lowest score of its cell (`geohashAlign52Bits`).
pub fn align52(hash: Hash) -> u64 {
    hash.bits << (52 - u32::from(hash.step) * 2)
}

/// The score interval `[min, max)` holding every position inside `hash`'s cell.
pub fn score_range(hash: Hash) -> (f64, f64) {
    let min = align52(hash);
    let max = align52(Hash { bits: hash.bits.wrapping_add(1), step: hash.step });
    (min as f64, max as f64)
}

/// The eight neighbours of a cell, in Valkey's order: north, south, east, west, north-east,
/// north-west, south-east, south-west.
pub fn neighbors(hash: Hash) -> [Hash; 8] {
    let at = |dx: i8, dy: i8| move_y(move_x(hash, dx), dy);
    [at(0, 1), at(0, -1), at(1, 0), at(-1, 0), at(1, 1), at(-1, 1), at(1, -1), at(-1, -1)]
}

/// The cells to read for a search, centre first then the neighbours in [`neighbors`] order;
/// `None` for a neighbour that cannot hold a match (`geohashCalculateAreasByShapeWGS84`).
pub fn search_cells(shape: &Shape) -> [Option<Hash>; 9] {
    let [min_lon, min_lat, max_lon, max_lat] = bounding_box(shape);
    let radius_m = match shape.extent {
        Extent::Radius(r) => r,
        Extent::Box { width, height } => ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt(),
    } * shape.to_meters;
    let mut step = estimate_step(radius_m, shape.lat);
    let cell = |step: u8| encode(LON_RANGE, LAT_RANGE, shape.lon, shape.lat, step).unwrap_or(Hash { bits: 0, step });
    let mut hash = cell(step);
    let mut around = neighbors(hash);
    let area_of = |h: Hash| decode(LON_RANGE, LAT_RANGE, h);
    // The estimated step may leave part of the shape outside the nine cells when the centre
    // sits near a cell's edge: then one step coarser.
    let [north, south, east, west, ..] = around.map(area_of);
    let short = north.is_some_and(|a| a.lat.max < max_lat)
        || south.is_some_and(|a| a.lat.min > min_lat)
        || east.is_some_and(|a| a.lon.max < max_lon)
        || west.is_some_and(|a| a.lon.min > min_lon);
    if step > 1 && short {
        step -= 1;
        hash = cell(step);
        around = neighbors(hash);
    }
    let mut cells: [Option<Hash>; 9] = [None; 9];
    cells[0] = Some(hash);
    for (c, n) in cells[1..].iter_mut().zip(around) {
        *c = Some(n);
    }
    if step >= 2
        && let Some(area) = area_of(hash)
    {
        // Indexes into `cells`: 1 N, 2 S, 3 E, 4 W, 5 NE, 6 NW, 7 SE, 8 SW.
        let mut drop = |ids: [usize; 3]| ids.iter().for_each(|&i| cells[i] = None);
        if area.lat.min < min_lat {
            drop([2, 8, 7]);
        }
        if area.lat.max > max_lat {
            drop([1, 5, 6]);
        }
        if area.lon.min < min_lon {
            drop([4, 8, 6]);
        }
        if area.lon.max > max_lon {
            drop([3, 7, 5]);
        }
    }
    cells
}

/// The shape's bounding box as `[min lon, min lat, max lon, max lat]` (`geohashBoundingBox`):
/// wider on the side nearer the pole.
pub fn bounding_box(shape: &Shape) -> [f64; 4] {
    let (half_h, half_w) = match shape.extent {
        Extent::Radius(r) => (r, r),
        Extent::Box { width, height } => (height / 2.0, width / 2.0),
    };
    let height = shape.to_meters * half_h;
    let width = shape.to_meters * half_w;
    let lat_delta = rad_deg(height / EARTH_RADIUS_M);
    let lon_delta_top = rad_deg(width / EARTH_RADIUS_M / deg_rad(shape.lat + lat_delta).cos());
    let lon_delta_bottom = rad_deg(width / EARTH_RADIUS_M / deg_rad(shape.lat - lat_delta).cos());
    let lon_delta = if shape.lat < 0.0 { lon_delta_bottom } else { lon_delta_top };
    [shape.lon - lon_delta, shape.lat - lat_delta, shape.lon + lon_delta, shape.lat + lat_delta]
}

/// The step whose cells are about the size of the search (`geohashEstimateStepsByRadius`).
#[allow(clippy::manual_range_contains)] // Valkey's comparisons, NaN included
pub fn estimate_step(range_m: f64, lat: f64) -> u8 {
    const MERCATOR_MAX: f64 = 20037726.37;
    if range_m == 0.0 {
        return 26;
    }
    let (mut range, mut step) = (range_m, 1i32);
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    // Cells narrow towards the poles.
    if lat > 66.0 || lat < -66.0 {
        step -= 1;
        if lat > 80.0 || lat < -80.0 {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

/// Great-circle distance in meters between two positions, by the haversine formula
/// (`geohashGetDistance`).
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let lon1r = deg_rad(lon1);
    let lon2r = deg_rad(lon2);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let lat1r = deg_rad(lat1);
    let lat2r = deg_rad(lat2);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_M * a.sqrt().asin()
}

/// Distance along a meridian (`geohashGetLatDistance`).
pub fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_M * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// The distance in meters from the shape's centre to a point inside it, `None` for a point
/// outside (`geoWithinShape`).
pub fn within(shape: &Shape, lon: f64, lat: f64) -> Option<f64> {
    match shape.extent {
        Extent::Radius(r) => {
            let d = distance(shape.lon, shape.lat, lon, lat);
            // `d > radius` rejects; a NaN distance is kept, as Valkey keeps it.
            if d > r * shape.to_meters { None } else { Some(d) }
        }
        Extent::Box { width, height } => {
            let (width_m, height_m) = (width * shape.to_meters, height * shape.to_meters);
            if lat_distance(lat, shape.lat) > height_m / 2.0 {
                return None;
            }
            if distance(lon, lat, shape.lon, lat) > width_m / 2.0 {
                return None;
            }
            Some(distance(shape.lon, shape.lat, lon, lat))
        }
    }
}

/// Degrees to radians with Valkey's constant (`M_PI / 180.0`).
fn deg_rad(deg: f64) -> f64 {
    deg * (std::f64::consts::PI / 180.0)
}

fn rad_deg(rad: f64) -> f64 {
    rad / (std::f64::consts::PI / 180.0)
}

/// A score as the 64 bits Valkey's `(uint64_t)score` yields on x86-64 (truncation; NaN,
/// infinities and values out of range give what the conversion instructions give).
fn score_bits(score: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    // `cvttsd2si`: the truncated value, or the "integer indefinite" i64::MIN when it does not
    // fit (NaN included).
    let cvt = |x: f64| if x.is_nan() || !(-TWO_63..TWO_63).contains(&x) { i64::MIN } else { x as i64 };
    if score >= TWO_63 { (cvt(score - TWO_63) as u64) ^ (1 << 63) } else { cvt(score) as u64 }
}

/// A non-negative offset converted as C's `(uint32_t)double` does on x86-64 for the values
/// an encoder produces (at most 2^32).
fn to_u32(x: f64) -> u32 {
    x as i64 as u32
}

/// Spreads the bits of `lat` onto the even positions and `lon` onto the odd ones.
fn interleave(lat: u32, lon: u32) -> u64 {
    spread(lat) | (spread(lon) << 1)
}

/// The even and odd bits of `bits`, gathered: (latitude, longitude).
fn deinterleave(bits: u64) -> (u32, u32) {
    (gather(bits), gather(bits >> 1))
}

/// Moves the bits of a 32-bit value to the even positions of a 64-bit one.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The inverse of [`spread`]: the even bits of `v`, packed.
fn gather(v: u64) -> u32 {
    let mut x = v & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0xFFFF_FFFF) as u32
}

const EVEN: u64 = 0x5555_5555_5555_5555;
const ODD: u64 = 0xAAAA_AAAA_AAAA_AAAA;

/// The cell `d` steps east (positive) or west, wrapping around the antimeridian.
fn move_x(hash: Hash, d: i8) -> Hash {
    Hash { bits: step_axis(hash, d, ODD), step: hash.step }
}

/// The cell `d` steps north (positive) or south, wrapping around at the limits.
fn move_y(hash: Hash, d: i8) -> Hash {
    Hash { bits: step_axis(hash, d, EVEN), step: hash.step }
}

/// Adds or subtracts one on the axis whose bits `axis` selects, leaving the other axis as it
/// is: the other axis' bits are filled with ones so a carry or borrow runs through them.
fn step_axis(hash: Hash, d: i8, axis: u64) -> u64 {
    if d == 0 {
        return hash.bits;
    }
    let shift = 64 - 2 * u32::from(hash.step);
    let this = hash.bits & axis;
    let other = hash.bits & !axis;
    let fill = (!axis) >> shift;
    let moved = if d > 0 { this.wrapping_add(fill + 1) } else { (this | fill).wrapping_sub(fill + 1) };
    (moved & (axis >> shift)) | other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaving_round_trips() {
        for (lat, lon) in [(0u32, 0u32), (1, 0), (0, 1), (0x3FF_FFFF, 0x155_5555), (u32::MAX, 7)] {
            assert_eq!(deinterleave(interleave(lat, lon)), (lat, lon));
        }
        assert_eq!(interleave(1, 0), 1);
        assert_eq!(interleave(0, 1), 2);
        assert_eq!(interleave(3, 0), 5);
    }

    #[test]
    fn scores_match_valkey() {
        // geo.tcl "Check geoset values".
        for (lon, lat, score) in [
            (-74.0131604, 40.7126674, 1791873972053020u64),
            (-73.9903085, 40.7362513, 1791875485187452),
            (-73.9733487, 40.7648057, 1791875761332224),
            (-73.9564142, 40.7480973, 1791875796750882),
            (-73.9454966, 40.747533, 1791875804419201),
            (-73.9375699, 40.7498929, 1791875830079666),
            (-73.7858139, 40.6428986, 1791895905559723),
        ] {
            assert_eq!(lonlat_to_score(lon, lat), score, "{lon},{lat}");
        }
        assert_eq!(&standard_geohash(lonlat_to_score(-5.6, 42.6) as f64), b"ezs42e44yx0");
    }

    #[test]
    fn decoding_gives_the_cell_centre() {
        let (lon, lat) = score_to_lonlat(lonlat_to_score(13.361389, 38.115556) as f64);
        assert_eq!(format!("{lon:.17} {lat:.17}"), "13.36138933897018433 38.11555639549629859");
        let (lon, lat) = score_to_lonlat(lonlat_to_score(LON_MAX, LAT_MAX) as f64);
        assert_eq!((lon, lat), (LON_MAX, LAT_MAX), "clamped to the limits");
        // Scores outside any cell still decode, as the C conversions do.
        assert_eq!(score_bits(-1.0), u64::MAX);
        assert_eq!(score_bits(f64::INFINITY), 0);
        assert_eq!(score_bits(f64::NAN), 1 << 63);
        assert_eq!(score_bits(1.5e19), 15_000_000_000_000_000_000);
    }

    #[test]
    fn neighbours_move_one_cell() {
        let h = encode_wgs84(10.0, 20.0, 5).unwrap();
        let [n, s, e, w, ne, nw, se, sw] = neighbors(h);
        let c = |h: Hash| {
            let a = decode(LON_RANGE, LAT_RANGE, h).unwrap();
            area_center(&a)
        };
        let (x, y) = c(h);
        let (dx, dy) = (360.0 / 32.0, (LAT_MAX - LAT_MIN) / 32.0);
        let near = |(a, b): (f64, f64), (p, q): (f64, f64)| (a - p).abs() < 1e-9 && (b - q).abs() < 1e-9;
        assert!(near(c(n), (x, y + dy)) && near(c(s), (x, y - dy)));
        assert!(near(c(e), (x + dx, y)) && near(c(w), (x - dx, y)));
        assert!(near(c(ne), (x + dx, y + dy)) && near(c(nw), (x - dx, y + dy)));
        assert!(near(c(se), (x + dx, y - dy)) && near(c(sw), (x - dx, y - dy)));
        // West of the westmost cell is the eastmost one.
        let edge = encode_wgs84(-179.9, 0.0, 4).unwrap();
        let (wx, _) = c(neighbors(edge)[3]);
        assert_eq!(wx, 168.75);
    }

    #[test]
    fn steps_and_cells() {
        assert_eq!(estimate_step(0.0, 0.0), 26);
        assert_eq!(estimate_step(3000.0, 0.0), 12);
        assert_eq!(estimate_step(3000.0, 70.0), 11);
        assert_eq!(estimate_step(3000.0, -85.0), 10);
        assert_eq!(estimate_step(5e7, 0.0), 1);
        assert_eq!(estimate_step(f64::INFINITY, 0.0), 1);
        assert_eq!(estimate_step(f64::MIN_POSITIVE, 0.0), 26);
        let shape = Shape { lon: -73.9798091, lat: 40.7598464, extent: Extent::Radius(3.0), to_meters: 1000.0 };
        let cells = search_cells(&shape);
        assert!(cells[0].is_some_and(|h| h.step == 11 || h.step == 12));
        // A huge radius: every cell at step 1, some of them repeated.
        let huge = Shape { lon: 0.0, lat: 0.0, extent: Extent::Radius(50000.0), to_meters: 1000.0 };
        assert!(search_cells(&huge).iter().all(|c| c.is_some_and(|h| h.step == 1)));
    }

    #[test]
    fn distances() {
        let p = lonlat_to_score(13.361389, 38.115556) as f64;
        let c = lonlat_to_score(15.087269, 37.502669) as f64;
        let ((a, b), (x, y)) = (score_to_lonlat(p), score_to_lonlat(c));
        let d = distance(a, b, x, y);
        assert!(d > 166274.0 && d < 166275.0, "{d}");
        assert_eq!(distance(a, b, a, b), 0.0);
        assert_eq!(lat_distance(0.0, 1.0), EARTH_RADIUS_M * (std::f64::consts::PI / 180.0));
        let boxed =
            Shape { lon: 15.0, lat: 37.0, extent: Extent::Box { width: 400.0, height: 2.0 }, to_meters: 1000.0 };
        assert!(within(&boxed, 12.75, 36.995).is_some());
        assert!(within(&boxed, 12.75, 36.5).is_none());
    }
}
