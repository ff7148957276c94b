//! HyperLogLog sketches in Redis's exact string representation, so a sketch moves between
//! hotkv, Redis and Valkey (DUMP/RESTORE, replication, GET/SET) and PFADD of the same elements
//! produces the same bytes everywhere.
//!
//! A sketch is a plain string value: a 16-byte header, then either the sparse or the dense
//! register encoding.
//!
//! ```text
//! header   "HYLL" | encoding (0 dense, 1 sparse) | 3 unused bytes | cached cardinality (u64 LE)
//! dense    16384 6-bit registers packed LSB first: 12288 bytes
//! sparse   run-length opcodes:  00xxxxxx           ZERO   1..=64 zero registers
//!                               01xxxxxx yyyyyyyy  XZERO  1..=16384 zero registers
//!                               1vvvvvxx           VAL    1..=4 registers of value 1..=32
//! ```
//!
//! The top bit of the cached cardinality marks it stale. Sparse sketches are promoted to dense
//! when a register needs a value above 32 or the sparse form would outgrow
//! `hll-sparse-max-bytes`. Hashing (MurmurHash64A, seed 0xadc83b19) and the estimator (Ertl's
//! improved estimator, as in Redis 7 and Valkey) match `hyperloglog.c` bit for bit.

use crate::error::CommandError;

mod sparse;

/// Number of registers (2^14).
pub const REGISTERS: usize = 1 << P;
/// Bytes of the header.
pub const HEADER_LEN: usize = 16;
/// Bytes of a dense sketch, header included.
pub const DENSE_LEN: usize = HEADER_LEN + (REGISTERS * BITS).div_ceil(8);

/// A sketch's register encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// 16384 packed 6-bit registers.
    Dense,
    /// Run-length encoded registers.
    Sparse,
}

impl Encoding {
    /// The name PFDEBUG ENCODING reports.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Dense => "dense",
            Encoding::Sparse => "sparse",
        }
    }
}

/// Why a string cannot be used as a sketch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HllError {
    /// Bad magic, unknown encoding or a dense sketch of the wrong length.
    NotHll,
    /// Sparse opcodes that do not cover exactly 16384 registers.
    Corrupt,
}

impl From<HllError> for CommandError {
    fn from(e: HllError) -> Self {
        match e {
            HllError::NotHll => CommandError::raw("WRONGTYPE Key is not a valid HyperLogLog string value."),
            HllError::Corrupt => CommandError::raw("INVALIDOBJ Corrupted HLL object detected"),
        }
    }
}

/// A new, empty sketch: sparse, one XZERO opcode covering every register, cached
/// cardinality 0 (valid), exactly as Redis's `createHLLObject` builds it.
pub fn new_sparse() -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + 2);
    v.extend_from_slice(MAGIC);
    v.push(ENC_SPARSE);
    v.extend_from_slice(&[0; 11]);
    let mut aux = REGISTERS;
    while aux > 0 {
        let run = aux.min(sparse::XZERO_MAX_LEN);
        v.extend_from_slice(&sparse::xzero_op(run));
        aux -= run;
    }
    v
}

/// Checks that `s` is a sketch (Redis's `isHLLObjectOrReply`) and returns its encoding.
/// A sparse sketch is not walked here: corruption shows up when its registers are read.
pub fn check(s: &[u8]) -> Result<Encoding, HllError> {
    if s.len() < HEADER_LEN || &s[..4] != MAGIC {
        return Err(HllError::NotHll);
    }
    match s[4] {
        ENC_DENSE if s.len() == DENSE_LEN => Ok(Encoding::Dense),
        ENC_SPARSE => Ok(Encoding::Sparse),
        _ => Err(HllError::NotHll),
    }
}

/// The cached cardinality, unless it is marked stale (or `s` has no header).
pub fn cached(s: &[u8]) -> Option<u64> {
    let card = u64::from_le_bytes(s.get(8..HEADER_LEN)?.try_into().ok()?);
    (card >> 63 == 0).then_some(card)
}

/// Stores a freshly computed cardinality in the header (if `s` has one).
pub fn set_cached(s: &mut [u8], card: u64) {
    if let Some(field) = s.get_mut(8..HEADER_LEN) {
        field.copy_from_slice(&card.to_le_bytes());
    }
}

/// Marks the cached cardinality stale: sets the top bit of its last byte (if `s` has one).
pub fn invalidate(s: &mut [u8]) {
    if let Some(b) = s.get_mut(HEADER_LEN - 1) {
        *b |= 0x80;
    }
}

/// Adds `element`: returns whether a register changed (and so the cardinality may have).
/// May promote a sparse sketch to dense. The caller invalidates the cache on `true`.
pub fn add(v: &mut Vec<u8>, element: &[u8], sparse_max: usize) -> Result<bool, HllError> {
    let (index, count) = pattern(element);
    set_register(v, index, count, sparse_max)
}

/// Raises register `index` (below [`REGISTERS`]) to `count` (a register value, at most 63) if
/// it is lower, in either encoding (Redis's `hllSparseSet` / `hllDenseSet`). Returns whether
/// it changed.
pub fn set_register(v: &mut Vec<u8>, index: usize, count: u8, sparse_max: usize) -> Result<bool, HllError> {
    match check(v)? {
        Encoding::Dense => Ok(dense_raise(&mut v[HEADER_LEN..], index, count)),
        Encoding::Sparse => sparse::set(v, index, count, sparse_max),
    }
}

/// Estimates the cardinality of a sketch (ignoring its cache).
pub fn count(s: &[u8]) -> Result<u64, HllError> {
    let mut histo = [0u32; 64];
    match check(s)? {
        Encoding::Dense => dense_histogram(&s[HEADER_LEN..], &mut histo),
        Encoding::Sparse => {
            let mut idx = 0;
            for op in sparse::Ops::new(&s[HEADER_LEN..]) {
                idx += op.run;
                // Past the last register the sketch is corrupt whatever follows; stopping
                // here also keeps the counters from overflowing on a huge corrupt body.
                if idx > REGISTERS {
                    break;
                }
                histo[usize::from(op.value)] += op.run as u32;
            }
            if idx != REGISTERS {
                return Err(HllError::Corrupt);
            }
        }
    }
    Ok(estimate(&histo))
}

/// Estimates the cardinality of registers held one per byte (the union PFCOUNT builds for
/// several keys).
pub fn count_registers(max: &[u8; REGISTERS]) -> u64 {
    let mut histo = [0u32; 64];
    let mut words = max.chunks_exact(8);
    for w in &mut words {
        // Most registers of a small union are zero: skip eight at a time.
        if w.iter().all(|&b| b == 0) {
            histo[0] += 8;
            continue;
        }
        for &b in w {
            histo[usize::from(b & REGISTER_MAX)] += 1;
        }
    }
    for &b in words.remainder() {
        histo[usize::from(b & REGISTER_MAX)] += 1;
    }
    estimate(&histo)
}

/// Merges a sketch into `max` (one byte per register): `max[i] = max(max[i], reg[i])`.
pub fn merge_into(max: &mut [u8; REGISTERS], s: &[u8]) -> Result<(), HllError> {
    match check(s)? {
        Encoding::Dense => {
            let regs = &s[HEADER_LEN..];
            for (i, m) in max.iter_mut().enumerate() {
                *m = (*m).max(dense_get(regs, i));
            }
        }
        Encoding::Sparse => {
            let mut idx = 0;
            for op in sparse::Ops::new(&s[HEADER_LEN..]) {
                if op.value > 0 {
                    // A VAL run past the last register means corruption: stop before writing.
                    if idx + op.run > REGISTERS {
                        break;
                    }
                    for m in &mut max[idx..idx + op.run] {
                        *m = (*m).max(op.value);
                    }
                }
                idx += op.run;
            }
            if idx != REGISTERS {
                return Err(HllError::Corrupt);
            }
        }
    }
    Ok(())
}

/// Converts a sparse sketch to dense in place, keeping the header (and so the cached
/// cardinality). Returns whether it converted anything.
pub fn to_dense(v: &mut Vec<u8>) -> Result<bool, HllError> {
    if check(v)? == Encoding::Dense {
        return Ok(false);
    }
    let mut dense = vec![0u8; DENSE_LEN];
    dense[..HEADER_LEN].copy_from_slice(&v[..HEADER_LEN]);
    dense[4] = ENC_DENSE;
    let mut idx = 0;
    for op in sparse::Ops::new(&v[HEADER_LEN..]) {
        if op.value > 0 {
            if idx + op.run > REGISTERS {
                break;
            }
            for i in idx..idx + op.run {
                dense_put(&mut dense[HEADER_LEN..], i, op.value);
            }
        }
        idx += op.run;
    }
    if idx != REGISTERS {
        return Err(HllError::Corrupt);
    }
    *v = dense;
    Ok(true)
}

/// Every register of a sketch [`check`] found dense, one per byte (PFDEBUG GETREG).
pub fn dense_registers(s: &[u8]) -> Vec<u8> {
    let regs = &s[HEADER_LEN..];
    (0..REGISTERS).map(|i| dense_get(regs, i)).collect()
}

/// A sparse sketch's opcodes as PFDEBUG DECODE prints them: `z:<len>`, `Z:<len>`,
/// `v:<value>,<len>`, separated by spaces.
pub fn decode_sparse(s: &[u8]) -> String {
    s.get(HEADER_LEN..).map(sparse::decode).unwrap_or_default()
}

/// PFSELFTEST: Redis's `pfselftestCommand` with its sizes as parameters (Redis uses 1000
/// cycles and 10,000,000 elements). First, `cycles` rounds of random values written to every
/// dense register and read back; then `elements` distinct elements added to a dense and a
/// sparse sketch at once, checking at each power of ten that small sketches stay sparse, that
/// both encodings estimate the same, and that the error is under six standard errors. The
/// error text is Redis's (`TESTFAILED ...`).
pub fn selftest(cycles: u32, elements: u64, sparse_max: usize, seed: u64) -> Result<(), String> {
    let mut rng = seed | 1;
    let mut next = move || {
        // xorshift64*: any decent generator will do, the test only needs variety.
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let mut dense = vec![0u8; DENSE_LEN];
    let mut expected = vec![0u8; REGISTERS];
    for _ in 0..cycles {
        for (i, e) in expected.iter_mut().enumerate() {
            *e = (next() as u8) & REGISTER_MAX;
            dense_put(&mut dense[HEADER_LEN..], i, *e);
        }
        for (i, &e) in expected.iter().enumerate() {
            let got = dense_get(&dense[HEADER_LEN..], i);
            if got != e {
                return Err(format!("TESTFAILED Register {i} should be {e} but is {got}"));
            }
        }
    }
    dense[HEADER_LEN..].fill(0);
    dense[..4].copy_from_slice(MAGIC);
    dense[4] = ENC_DENSE;
    let mut sparse = new_sparse();
    let rel_err = 1.04 / (REGISTERS as f64).sqrt();
    let salt = next();
    let mut checkpoint = 1u64;
    for j in 1..=elements {
        let ele = (j ^ salt).to_le_bytes();
        let (index, run) = pattern(&ele);
        dense_raise(&mut dense[HEADER_LEN..], index, run);
        add(&mut sparse, &ele, sparse_max).map_err(|_| "TESTFAILED sparse add failed".to_string())?;
        if j != checkpoint {
            continue;
        }
        if (j as usize) < sparse_max / 2 && check(&sparse) != Ok(Encoding::Sparse) {
            return Err("TESTFAILED sparse encoding not used".into());
        }
        let card = count(&dense).map_err(|_| "TESTFAILED dense count failed".to_string())?;
        if count(&sparse) != Ok(card) {
            return Err("TESTFAILED dense/sparse disagree".into());
        }
        // Redis pins the allowance for cardinality 10 at 1 rather than trusting the formula
        // there, where collisions make larger errors likely.
        let max_err = if j == 10 { 1 } else { (rel_err * 6.0 * checkpoint as f64).ceil() as u64 };
        let abs_err = checkpoint.abs_diff(card);
        if abs_err > max_err {
            return Err(format!("TESTFAILED Too big error. card:{checkpoint} abserr:{abs_err}"));
        }
        checkpoint *= 10;
    }
    Ok(())
}

/// Redis's MurmurHash64A, endian neutral (words are read little-endian on every host).
pub fn murmur64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        let mut k = u64::from_le_bytes(word).wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element maps to and the length of its `0..01` run (Redis's `hllPatLen`):
/// the low 14 bits of the hash pick the register, the run is counted in the other 50 bits.
pub fn pattern(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element, SEED);
    let index = (hash as usize) & (REGISTERS - 1);
    // The sentinel bit caps the run at Q + 1 when the remaining bits are all zero.
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// Ertl's improved estimator ("New cardinality estimation algorithms for HyperLogLog
/// sketches", arXiv:1702.01284) from the histogram of register values, as Redis's `hllCount`.
/// The operation order is kept so results match Redis to the last bit.
fn estimate(histo: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let q = Q as usize;
    let mut z = m * tau((m - f64::from(histo[q + 1])) / m);
    for j in (1..=q).rev() {
        z += f64::from(histo[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histo[0]) / m);
    (ALPHA_INF * m * m / z).round() as u64
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let prev = z;
        z += x * y;
        y += y;
        if prev == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let prev = z;
        y *= 0.5;
        // C's pow(d, 2) is folded to d * d by the compiler: one rounding, as here.
        let d = 1.0 - x;
        z -= d * d * y;
        if prev == z {
            return z / 3.0;
        }
    }
}

/// Register `i` of packed dense registers. The last register's second byte lies past the
/// array (C reads the string's NUL terminator there); it contributes no bits.
fn dense_get(regs: &[u8], i: usize) -> u8 {
    let bit = i * BITS;
    let (byte, fb) = (bit / 8, bit % 8);
    let b0 = u16::from(regs[byte]);
    let b1 = u16::from(regs.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> fb) | (b1 << (8 - fb))) & u16::from(REGISTER_MAX)) as u8
}

fn dense_put(regs: &mut [u8], i: usize, val: u8) {
    let bit = i * BITS;
    let (byte, fb) = (bit / 8, bit % 8);
    let (mask, v) = (u16::from(REGISTER_MAX), u16::from(val));
    regs[byte] = (u16::from(regs[byte]) & !(mask << fb) | (v << fb)) as u8;
    if let Some(b) = regs.get_mut(byte + 1) {
        *b = (u16::from(*b) & !(mask >> (8 - fb)) | (v >> (8 - fb))) as u8;
    }
}

fn dense_raise(regs: &mut [u8], i: usize, count: u8) -> bool {
    if count <= dense_get(regs, i) {
        return false;
    }
    dense_put(regs, i, count);
    true
}

/// Register histogram of packed dense registers: three bytes hold four registers.
fn dense_histogram(regs: &[u8], histo: &mut [u32; 64]) {
    for c in regs.chunks_exact(3) {
        let w = u32::from(c[0]) | u32::from(c[1]) << 8 | u32::from(c[2]) << 16;
        for shift in [0, 6, 12, 18] {
            histo[((w >> shift) & 63) as usize] += 1;
        }
    }
}

/// Converts a sparse sketch to dense and raises the register that did not fit.
fn promote(v: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, HllError> {
    to_dense(v)?;
    // Promotion only happens for a register that must change, so this always raises it.
    Ok(dense_raise(&mut v[HEADER_LEN..], index, count))
}

const MAGIC: &[u8; 4] = b"HYLL";
const ENC_DENSE: u8 = 0;
const ENC_SPARSE: u8 = 1;
/// Register index bits.
const P: u32 = 14;
/// Hash bits left for the run of zeros.
const Q: u32 = 64 - P;
/// Bits per dense register.
const BITS: usize = 6;
const REGISTER_MAX: u8 = (1 << BITS) - 1;
/// Redis's MurmurHash64A seed for HyperLogLog.
const SEED: u64 = 0xadc8_3b19;
/// 0.5 / ln(2).
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stream of distinct elements.
    fn elements(prefix: &str, n: usize) -> impl Iterator<Item = Vec<u8>> + '_ {
        (0..n).map(move |i| format!("{prefix}:{i}").into_bytes())
    }

    #[test]
    fn new_sketch_is_redis_empty_sparse() {
        let v = new_sparse();
        assert_eq!(v.len(), 18);
        assert_eq!(&v[..5], b"HYLL\x01");
        assert_eq!(&v[16..], [0x7f, 0xff]);
        assert_eq!(check(&v), Ok(Encoding::Sparse));
        assert_eq!(cached(&v), Some(0));
        assert_eq!(count(&v), Ok(0));
        assert_eq!(decode_sparse(&v), "Z:16384");
    }

    #[test]
    fn hash_and_pattern_match_redis() {
        // Redis stores PFADD of "" as XZERO 5938, VAL 2, XZERO 10445.
        assert_eq!(pattern(b""), (5938, 2));
        let mut v = new_sparse();
        assert_eq!(add(&mut v, b"", 3000), Ok(true));
        assert_eq!(decode_sparse(&v), "Z:5938 v:2,1 Z:10445");
        // Every prefix (0 to 40 bytes: word loop and every tail length) of one sentence, and
        // two binary elements, as Redis 7.0.15 decoded the sketches it built from them.
        let base = b"The quick brown fox jumps over the lazy dog!!";
        let mut v = new_sparse();
        for n in 0..=40 {
            add(&mut v, &base[..n], 3000).unwrap();
        }
        assert_eq!(
            decode_sparse(&v),
            "Z:488 v:1,1 Z:649 v:1,1 Z:151 v:1,1 Z:443 v:2,1 z:10 v:5,1 z:53 v:1,1 Z:738 \
            v:1,1 z:56 v:1,1 Z:321 v:6,1 Z:635 v:1,1 z:25 v:1,1 Z:150 v:1,1 z:22 v:1,1 Z:743 v:1,1 Z:224 v:1,1 \
            Z:460 v:3,1 Z:105 v:1,1 Z:648 v:2,1 Z:721 v:1,1 Z:347 v:1,1 Z:157 v:2,1 z:56 v:1,1 Z:618 v:1,1 Z:87 \
            v:1,1 Z:916 v:1,1 Z:154 v:3,1 Z:228 v:2,1 Z:880 v:8,1 Z:359 v:2,1 Z:403 v:1,1 Z:106 v:1,1 Z:123 v:1,1 \
            Z:2070 v:1,1 Z:105 v:1,1 Z:564 v:3,1 Z:641 v:1,1 Z:436 v:3,1 Z:193 v:1,1 Z:299 v:1,1 Z:437 v:2,1 \
            Z:429 v:2,1 Z:93"
        );
        assert_eq!(count(&v), Ok(41));
        let up: Vec<u8> = (0..=255).collect();
        let down: Vec<u8> = (0..=255u8).rev().cycle().take(768).collect();
        let mut v = new_sparse();
        add(&mut v, &up, 3000).unwrap();
        add(&mut v, &down, 3000).unwrap();
        assert_eq!(decode_sparse(&v), "Z:6794 v:3,1 Z:5566 v:1,1 Z:4022");
    }

    #[test]
    fn dense_registers_round_trip_without_touching_neighbours() {
        let mut regs = vec![0u8; DENSE_LEN - HEADER_LEN];
        for i in 0..REGISTERS {
            dense_put(&mut regs, i, (i % 64) as u8);
        }
        for i in 0..REGISTERS {
            assert_eq!(dense_get(&regs, i), (i % 64) as u8);
        }
        dense_put(&mut regs, 16383, 63);
        dense_put(&mut regs, 16382, 0);
        assert_eq!((dense_get(&regs, 16381), dense_get(&regs, 16382), dense_get(&regs, 16383)), (61, 0, 63));
        assert_eq!(selftest(3, 20_000, 3000, 42), Ok(()));
    }

    #[test]
    fn sparse_and_dense_agree_on_registers_and_counts() {
        let mut sparse = new_sparse();
        let mut dense = new_sparse();
        to_dense(&mut dense).unwrap();
        for (n, e) in elements("agree", 3000).enumerate() {
            // A high limit keeps the sparse sketch sparse throughout.
            let a = add(&mut sparse, &e, usize::MAX).unwrap();
            let b = add(&mut dense, &e, usize::MAX).unwrap();
            assert_eq!(a, b);
            if n % 250 == 0 {
                assert_eq!(count(&sparse), count(&dense));
            }
        }
        assert_eq!(check(&sparse), Ok(Encoding::Sparse));
        let mut promoted = sparse.clone();
        to_dense(&mut promoted).unwrap();
        assert_eq!(dense_registers(&promoted), dense_registers(&dense));
        let mut max = [0u8; REGISTERS];
        merge_into(&mut max, &sparse).unwrap();
        assert_eq!(max.to_vec(), dense_registers(&dense));
        assert_eq!(count_registers(&max), count(&dense).unwrap());
    }

    #[test]
    fn validation_errors() {
        assert_eq!(check(b"HYLL"), Err(HllError::NotHll));
        let mut v = new_sparse();
        v[0] = b'X';
        assert_eq!(check(&v), Err(HllError::NotHll));
        let mut v = new_sparse();
        v[4] = 2;
        assert_eq!(check(&v), Err(HllError::NotHll));
        let mut v = new_sparse();
        v[4] = ENC_DENSE;
        assert_eq!(check(&v), Err(HllError::NotHll), "dense must be exactly 12304 bytes");
        let mut v = new_sparse();
        v.extend_from_slice(b"hello");
        assert_eq!(check(&v), Ok(Encoding::Sparse), "only reading the registers finds this");
        assert_eq!(count(&v), Err(HllError::Corrupt));
        assert_eq!(merge_into(&mut [0; REGISTERS], &v), Err(HllError::Corrupt));
        assert_eq!(to_dense(&mut v.clone()), Err(HllError::Corrupt));
        // Too few registers: the search for a high index runs off the end.
        let mut short = new_sparse();
        short[16] = 0x40;
        assert_eq!(set_register(&mut short, 16000, 1, 3000), Err(HllError::Corrupt));
        assert_eq!(count(&short), Err(HllError::Corrupt));
    }

    #[test]
    fn corrupt_sketches_never_panic() {
        let mut base = new_sparse();
        for e in elements("fuzz", 400) {
            add(&mut base, &e, 3000).unwrap();
        }
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..3000 {
            let mut v = base.clone();
            if round % 3 == 0 {
                to_dense(&mut v).unwrap();
            }
            for _ in 0..1 + rnd() % 5 {
                let at = HEADER_LEN + (rnd() as usize) % (v.len() - HEADER_LEN);
                v[at] = rnd() as u8;
            }
            if round % 7 == 0 {
                let cut = HEADER_LEN + (rnd() as usize) % (v.len() - HEADER_LEN);
                v.truncate(cut);
            }
            let _ = count(&v);
            let _ = merge_into(&mut [0; REGISTERS], &v);
            let _ = to_dense(&mut v.clone());
            let _ = add(&mut v, b"more", 3000);
            let _ = set_register(&mut v, (rnd() as usize) % REGISTERS, 1 + (rnd() % 40) as u8, 3000);
            if check(&v) == Ok(Encoding::Sparse) {
                let _ = decode_sparse(&v);
            }
        }
        // A huge body of maximal zero runs would overflow 32-bit counters.
        let mut big = new_sparse();
        big.extend(std::iter::repeat_n([0x7f, 0xff], 300_000).flatten());
        assert_eq!(count(&big), Err(HllError::Corrupt));
    }

    #[test]
    fn estimator_edges() {
        let mut histo = [0u32; 64];
        histo[0] = REGISTERS as u32;
        assert_eq!(estimate(&histo), 0, "all registers zero");
        histo[0] = 0;
        histo[51] = REGISTERS as u32;
        assert!(estimate(&histo) > 1 << 60, "all registers at the cap: enormous, finite");
        assert_eq!(sigma(1.0), f64::INFINITY);
        assert_eq!((tau(0.0), tau(1.0)), (0.0, 0.0));
    }
}
