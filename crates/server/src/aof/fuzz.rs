//! Fuzzing of the AOF's decoders of outside bytes, beside the `.conf` loaders' (see
//! `config/fuzz.rs` for why these live in the server crate): the manifest parser, the
//! command parser fed a file whole and in growing prefixes, and the whole loader over a
//! mutated incr file. Every input must load or be refused, never panic, and never cost more
//! memory than its size justifies. Seeds: `tests/fuzz/corpus/aof-manifest/`, `.../aof/`.

use std::fs;

use hotkv_engine::ctx::EngineConfig;
use hotkv_engine::keyspace::Keyspace;
use hotkv_test_support::fuzz::{Budget, run};

use super::AofPaths;
use super::load::{self, LoadOptions, RdbTarget};
use super::manifest::{AofFile, FileKind, Manifest};
use super::parse::{self, Parsed};
use crate::config::fuzz::{allocated_during, seeds};

#[test]
fn manifest_parser_survives_mutated_manifests() {
    run("aof-manifest", &seeds("aof-manifest"), Budget::from_env(40_000), |input, tally| {
        let (parsed, peak) = allocated_during(|| Manifest::parse(input));
        tally.max_peak = tally.max_peak.max(peak);
        assert!(peak <= 64 * input.len() + (1 << 20), "{peak} bytes for {} input bytes", input.len());
        match parsed {
            Ok(m) => {
                // What loads renders to text that loads to the same manifest.
                let text = m.render();
                if !text.is_empty() {
                    assert_eq!(Manifest::parse(&text).as_ref(), Ok(&m));
                }
                true
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                false
            }
        }
    });
}

/// Walks `file` item by item as the loader does, returning the items' lengths; checks that a
/// prefix never parses differently from the whole file.
fn walk(file: &[u8]) -> (Vec<usize>, Parsed) {
    let mut lens = Vec::new();
    let mut p = 0;
    let end = loop {
        if p == file.len() {
            break Parsed::Need;
        }
        let rest = &file[p..];
        let whole = parse::next(rest, rest.len() as u64, 1 << 20);
        // A prefix either needs more or reaches the same verdict.
        let cut = rest.len() / 2 + 1;
        let part = parse::next(&rest[..cut], rest.len() as u64, 1 << 20);
        assert!(part == Parsed::Need || part == whole, "prefix {cut}: {part:?} vs {whole:?}");
        match whole {
            Parsed::Command { len, ref args } => {
                assert!(len > 0 && args.iter().all(|&(s, e)| s <= e && e <= len));
                lens.push(len);
                p += len;
            }
            Parsed::Annotation { len } => {
                assert!(len > 0);
                p += len;
            }
            Parsed::Need => panic!("Need with the whole file at hand"),
            other => break other,
        }
    };
    (lens, end)
}

#[test]
fn command_parser_survives_mutated_files() {
    run("aof", &seeds("aof"), Budget::from_env(40_000), |input, tally| {
        let ((lens, end), peak) = allocated_during(|| walk(input));
        tally.max_peak = tally.max_peak.max(peak);
        assert!(peak <= 64 * input.len() + (1 << 20), "{peak} bytes for {} input bytes", input.len());
        assert!(lens.iter().sum::<usize>() <= input.len());
        end == Parsed::Need
    });
}

#[test]
fn loader_survives_mutated_incr_files() {
    let dir = super::manifest::tests::tempdir("fuzz");
    let paths = AofPaths { dir: dir.clone(), dirname: "d".into(), filename: "appendonly.aof".into() };
    fs::create_dir_all(paths.aof_dir()).unwrap();
    let name = "appendonly.aof.1.incr.aof";
    let m = Manifest {
        incr: vec![AofFile { name: name.as_bytes().to_vec(), seq: 1, kind: FileKind::Incr }],
        incr_seq: 1,
        ..Manifest::default()
    };
    let cfg = EngineConfig::default();
    let ks = Keyspace::new(16);
    let mut n = 0u64;
    run("aof-load", &seeds("aof"), Budget::from_env(3_000), |input, _| {
        n += 1;
        let path = paths.aof_dir().join(name);
        fs::write(&path, input).unwrap();
        let opts = LoadOptions { load_truncated: n.is_multiple_of(2), max_bulk_len: 1 << 20, databases: 16 };
        let target = RdbTarget { ks: &ks, cfg: &cfg, now_ms: 0 };
        let mut cmds = 0u64;
        let out = load::load_all(&paths, &m, &opts, &target, |db, argv| {
            assert!(db < 16 && !argv.is_empty());
            cmds += 1;
            Ok::<(), String>(())
        });
        if let Ok(load::Outcome::Loaded(stats)) = &out {
            assert_eq!(stats.commands, cmds);
            // A cut tail leaves a file that loads cleanly.
            if let Some(at) = stats.truncated_at {
                assert_eq!(fs::metadata(&path).unwrap().len(), at);
            }
        }
        out.is_ok()
    });
    fs::remove_dir_all(&dir).unwrap();
}
