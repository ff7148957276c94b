//! Fuzzing of the `.conf` and `hotkv.toml` loaders (the other decoders are fuzzed by the
//! workspace's `tests/fuzz` binary, which shares the seed corpus and the mutator): every
//! mutated file is either loaded or refused with an error; nothing panics and nothing grows
//! with a declared number. Here, unlike there, jemalloc is the global allocator, so the memory
//! one input costs is read from jemalloc's per-thread count of bytes allocated, which bounds
//! the peak from above.

use std::path::{Path, PathBuf};

use hotkv_test_support::fuzz::{Budget, corpus, run};
use tikv_jemalloc_ctl::thread;

use super::{conf, toml};

/// Runs `f` and returns its result with the bytes the current thread allocated meanwhile.
pub(crate) fn allocated_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let counter = thread::allocatedp::read().expect("jemalloc is the allocator");
    let before = counter.get();
    let out = f();
    (out, counter.get().wrapping_sub(before) as usize)
}

/// The seed corpus of `target` in `tests/fuzz/corpus`.
pub(crate) fn seeds(target: &str) -> Vec<Vec<u8>> {
    corpus(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fuzz/corpus").join(target))
}

/// `include` reads other files; a mutated path could name any file of the machine (or a
/// device that never ends), which tests the file system rather than the parser.
fn reads_files(text: &str) -> bool {
    text.to_ascii_lowercase().contains("include")
}

#[test]
fn conf_loader_survives_mutated_files() {
    run("conf", &seeds("conf"), Budget::from_env(40_000), |input, tally| {
        let text = String::from_utf8_lossy(input);
        if reads_files(&text) {
            return false;
        }
        let (loaded, peak) = allocated_during(|| conf::load_str(&text).map(drop).map_err(|e| e.to_string()));
        tally.max_peak = tally.max_peak.max(peak);
        assert!(peak <= 4096 * input.len() + (16 << 20), "{peak} bytes for {} input bytes", input.len());
        if let Err(e) = &loaded {
            assert!(!e.is_empty(), "an error says what is wrong");
        }
        loaded.is_ok()
    });
}

#[test]
fn toml_loader_survives_mutated_files() {
    let file = Path::new("fuzz.toml");
    run("toml", &seeds("toml"), Budget::from_env(40_000), |input, tally| {
        let text = String::from_utf8_lossy(input);
        if reads_files(&text) {
            return false;
        }
        let (loaded, peak) = allocated_during(|| toml::load_str(&text, file).map(drop).map_err(|e| e.to_string()));
        tally.max_peak = tally.max_peak.max(peak);
        assert!(peak <= 4096 * input.len() + (16 << 20), "{peak} bytes for {} input bytes", input.len());
        if let Err(e) = &loaded {
            assert!(!e.is_empty(), "an error says what is wrong");
        }
        loaded.is_ok()
    });
}
