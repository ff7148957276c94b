//! Fuzzing of every decoder that takes bytes from outside, inside `cargo test`: the RESP
//! request decoder, RESTORE payloads (through the RESTORE command, then read back), whole RDB
//! files (read in pieces and loaded into a keyspace), cluster bus
//! frames and the PEM/certificate loading path. (The `.conf` and `hotkv.toml` loaders and the AOF's
//! manifest and command parsers are fuzzed inside the server crate, whose jemalloc global allocator
//! this binary cannot share.) Each target starts
//! from the seed corpus in `tests/fuzz/corpus/<target>/` and tries a bounded number of
//! mutations (see `hotkv_test_support::fuzz`), asserting that every input gets an error or a
//! valid value, never a panic, and that one input never costs more memory than its size
//! justifies. The default budget keeps this binary to a few seconds; for a long run:
//!
//! ```sh
//! HOTKV_FUZZ_CASES=1000000 HOTKV_FUZZ_SEED=$RANDOM cargo test --release --test fuzz -- --nocapture
//! ```

mod bus;
mod gossip_alloc;
mod pem;
mod rdb_file;
mod resp;
mod restore;

use std::path::PathBuf;

use hotkv_test_support::fuzz::PeakAlloc;

/// Counts each thread's allocations so targets can bound the memory one input costs.
#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// The seed corpus of one target.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    hotkv_test_support::fuzz::corpus(&corpus_dir(target))
}

/// Where the seed corpus of `target` lives.
pub fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/corpus").join(target)
}
