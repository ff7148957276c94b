//! A small mutation fuzzer for the decoders that take bytes from outside (RESP requests,
//! RESTORE payloads, config files, PEM files, and later cluster-bus and replication frames),
//! built to run inside `cargo test` on the stable toolchain.
//!
//! Each target starts from a seed corpus kept in the repository (`tests/fuzz/corpus/<name>/`),
//! mutates seeds with a seeded generator (bit flips, interesting bytes and numbers, cut,
//! duplicated and spliced ranges, numbers in text swapped for boundary values), and hands
//! every input to a check that must return, never panic. [`Budget`] bounds a run by a number
//! of inputs (deterministic: the same seed tries the same inputs) and reads
//! `HOTKV_FUZZ_CASES` / `HOTKV_FUZZ_SEED` so anyone can run longer or elsewhere:
//!
//! ```sh
//! HOTKV_FUZZ_CASES=2000000 HOTKV_FUZZ_SEED=$RANDOM cargo test --release --test fuzz -- --nocapture
//! ```
//!
//! [`PeakAlloc`] is a global allocator that records the peak bytes allocated by the current
//! thread, so a target can assert that one input never costs more memory than its size
//! justifies (a declared length must not turn into an allocation), and counts its allocations
//! ([`allocs_during`]), so a test can show what a path allocates.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::Path;
use std::time::Instant;

/// A global allocator over [`System`] that counts the current thread's live and peak bytes.
/// Install it in a test binary with `#[global_allocator]` and measure with [`peak_during`].
pub struct PeakAlloc;

thread_local! {
    // Const-initialised and without a destructor, so touching them never allocates (which
    // would recurse into the allocator).
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

/// Counts one allocation (or reallocation) on the current thread.
fn count_one() {
    let _ = COUNT.try_with(|c| c.set(c.get() + 1));
}

fn account(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| {
            if now > peak.get() {
                peak.set(now);
            }
        });
    });
}

#[allow(unsafe_code)]
// SAFETY: every call is forwarded unchanged to the system allocator, which upholds
// GlobalAlloc's contract; the bookkeeping touches only const thread-locals and never
// allocates or unwinds.
unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout, as GlobalAlloc::alloc requires.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
            count_one();
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was returned by this allocator (hence System) for `layout`.
        unsafe { System.dealloc(ptr, layout) };
        account(-(layout.size() as isize));
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as alloc.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            account(layout.size() as isize);
            count_one();
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `ptr`/`layout` came from this allocator and
        // `new_size` is valid for the layout's alignment.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            account(new_size as isize - layout.size() as isize);
            count_one();
        }
        p
    }
}

/// Runs `f` and returns its result with the most bytes the current thread had allocated at
/// once while it ran, above what it held before. Needs [`PeakAlloc`] as the global allocator
/// (otherwise always 0).
pub fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(Cell::get);
    (out, (peak - base).max(0) as usize)
}

/// Runs `f` and returns its result with how many allocations and reallocations the current
/// thread made while it ran. Needs [`PeakAlloc`] as the global allocator (otherwise always 0).
pub fn allocs_during<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let base = COUNT.with(Cell::get);
    let out = f();
    (out, COUNT.with(Cell::get) - base)
}

/// How many inputs a target tries, and from which seed.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Inputs to try.
    pub cases: u64,
    /// Seed of the generator.
    pub seed: u64,
}

impl Budget {
    /// `default_cases` inputs from seed 1, unless `HOTKV_FUZZ_CASES` / `HOTKV_FUZZ_SEED` say
    /// otherwise.
    pub fn from_env(default_cases: u64) -> Budget {
        let var = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u64>().ok());
        Budget { cases: var("HOTKV_FUZZ_CASES").unwrap_or(default_cases), seed: var("HOTKV_FUZZ_SEED").unwrap_or(1) }
    }
}

/// Counts what a run did, for its report line.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Inputs the decoder accepted.
    pub accepted: u64,
    /// Inputs it refused with an error.
    pub rejected: u64,
    /// Largest peak allocation seen for one input, in bytes.
    pub max_peak: usize,
}

/// Runs `check` on every seed, then on `budget.cases` mutations of them, and prints one line:
/// the target, how many inputs, how long, how many were accepted. `check` returns whether
/// the input was accepted; it panics (failing the test) on a broken property. The failing
/// input is printed in hex first, with the seed that reproduces it.
pub fn run(name: &str, seeds: &[Vec<u8>], budget: Budget, mut check: impl FnMut(&[u8], &mut Tally) -> bool) -> Tally {
    assert!(!seeds.is_empty(), "fuzz target {name} has no seeds");
    let start = Instant::now();
    let mut tally = Tally::default();
    let mut rng = Rng::new(budget.seed);
    let mut input = Vec::new();
    let total = seeds.len() as u64 + budget.cases;
    for i in 0..total {
        input.clear();
        match usize::try_from(i).ok().and_then(|i| seeds.get(i)) {
            Some(seed) => input.extend_from_slice(seed),
            None => mutate(&mut rng, seeds, &mut input),
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&input, &mut tally)));
        match outcome {
            Ok(true) => tally.accepted += 1,
            Ok(false) => tally.rejected += 1,
            Err(panic) => {
                eprintln!(
                    "fuzz {name}: input {i} (HOTKV_FUZZ_SEED={}) failed, {} bytes: {}",
                    budget.seed,
                    input.len(),
                    hex(&input)
                );
                std::panic::resume_unwind(panic);
            }
        }
    }
    println!(
        "fuzz {name}: {total} inputs ({} seeds) in {:.2} s, seed {}: {} accepted, {} rejected, max peak {} bytes",
        seeds.len(),
        start.elapsed().as_secs_f64(),
        budget.seed,
        tally.accepted,
        tally.rejected,
        tally.max_peak
    );
    tally
}

/// Every file of a corpus directory, in name order.
pub fn corpus(dir: &Path) -> Vec<Vec<u8>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("fuzz corpus {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).collect()
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Bytes that make decoders take their edge paths: length prefixes, encodings, terminators.
const INTERESTING_BYTES: &[u8] =
    &[0x00, 0x01, 0x3f, 0x40, 0x7f, 0x80, 0x81, 0xbf, 0xc0, 0xc3, 0xf0, 0xfe, 0xff, b'\r', b'\n', b'$', b'*', b'"'];

/// Decimal numbers at the boundaries of the integer types a decoder may parse into.
const INTERESTING_NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "255",
    "65536",
    "2147483647",
    "2147483648",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "18446744073709551616",
    "4611686018427387904",
    "99999999999999999999999",
    "1e308",
    "-0",
    "",
];

/// Applies one to four mutations to a random seed.
fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], out: &mut Vec<u8>) {
    out.extend_from_slice(&seeds[rng.below(seeds.len())]);
    for _ in 0..1 + rng.below(4) {
        mutate_once(rng, seeds, out);
    }
}

fn mutate_once(rng: &mut Rng, seeds: &[Vec<u8>], v: &mut Vec<u8>) {
    let len = v.len();
    match rng.below(10) {
        0 if len > 0 => {
            let i = rng.below(len);
            v[i] ^= 1 << rng.below(8);
        }
        1 if len > 0 => {
            let i = rng.below(len);
            v[i] = INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())];
        }
        2 => {
            let i = rng.below(len + 1);
            v.insert(i, rng.next_u64() as u8);
        }
        3 if len > 0 => {
            let (a, b) = range(rng, len);
            v.drain(a..b);
        }
        4 if len > 0 => {
            // Duplicate a range in place: repeated elements, doubled headers.
            let (a, b) = range(rng, len);
            let piece = v[a..b].to_vec();
            let at = rng.below(v.len() + 1);
            v.splice(at..at, piece);
        }
        5 => {
            // Splice in a piece of another seed.
            let other = &seeds[rng.below(seeds.len())];
            if !other.is_empty() {
                let (a, b) = range(rng, other.len());
                let at = rng.below(len + 1);
                v.splice(at..at, other[a..b].iter().copied());
            }
        }
        6 if len > 0 => {
            v.truncate(rng.below(len));
        }
        7 => replace_number(rng, v),
        8 if len >= 4 => {
            // Overwrite a little-endian or big-endian word with an extreme value.
            let i = rng.below(len - 3);
            let w: u32 = [0, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 0x0001_0000][rng.below(6)];
            let bytes = if rng.below(2) == 0 { w.to_le_bytes() } else { w.to_be_bytes() };
            v[i..i + 4].copy_from_slice(&bytes);
        }
        _ => {
            let i = rng.below(len + 1);
            v.insert(i, INTERESTING_BYTES[rng.below(INTERESTING_BYTES.len())]);
        }
    }
}

/// Replaces one run of ASCII digits (with its sign) by a boundary number, or inserts one.
fn replace_number(rng: &mut Rng, v: &mut Vec<u8>) {
    let number = INTERESTING_NUMBERS[rng.below(INTERESTING_NUMBERS.len())].as_bytes();
    let starts: Vec<usize> =
        (0..v.len()).filter(|&i| v[i].is_ascii_digit() && (i == 0 || !v[i - 1].is_ascii_digit())).collect();
    if starts.is_empty() {
        let at = rng.below(v.len() + 1);
        v.splice(at..at, number.iter().copied());
        return;
    }
    let mut a = starts[rng.below(starts.len())];
    let mut b = a;
    while b < v.len() && v[b].is_ascii_digit() {
        b += 1;
    }
    if a > 0 && v[a - 1] == b'-' {
        a -= 1;
    }
    v.splice(a..b, number.iter().copied());
}

/// A random non-empty range of `0..len`, biased towards short ones.
fn range(rng: &mut Rng, len: usize) -> (usize, usize) {
    let a = rng.below(len);
    let max = (len - a).min(if rng.below(4) == 0 { len } else { 16 });
    (a, a + 1 + rng.below(max))
}

/// xorshift64*: fast, seedable, good enough to pick mutations.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value; 0 is remapped).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_stay_deterministic_and_vary() {
        let seeds = vec![b"*1\r\n$4\r\nPING\r\n".to_vec(), b"SET k 12345".to_vec()];
        let mutations = |seed| {
            let mut rng = Rng::new(seed);
            (0..50)
                .map(|_| {
                    let mut v = Vec::new();
                    mutate(&mut rng, &seeds, &mut v);
                    v
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(mutations(7), mutations(7));
        assert_ne!(mutations(7), mutations(8));
        assert!(mutations(7).iter().any(|v| !seeds.contains(v)));
    }

    #[test]
    fn numbers_are_replaced_whole() {
        let mut rng = Rng::new(3);
        for _ in 0..20 {
            let mut v = b"$-12\r\n".to_vec();
            replace_number(&mut rng, &mut v);
            assert!(v.starts_with(b"$") && v.ends_with(b"\r\n"), "{:?}", String::from_utf8_lossy(&v));
        }
    }
}
