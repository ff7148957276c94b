//! Micro-benchmarks of the hot internals, so a regression shows up without starting a server:
//! RESP decoding and encoding, slot and table hashing, and the keyspace get/set path.
//! `cargo bench --bench internals`; CI runs them once as a smoke test (`cargo test --benches`).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use hotkv_engine::ctx::{Ctx, EngineConfig, LocalStats, NoEvents, Ttl};
use hotkv_engine::entry::NewValue;
use hotkv_engine::hash::key_hash;
use hotkv_engine::keyspace::{Keyspace, lock_id};
use hotkv_engine::slot::key_slot;
use hotkv_protocol::{Decoder, Limits, ReplyBuf, Step};

fn pipeline(n: usize) -> Vec<u8> {
    let mut wire = Vec::new();
    for i in 0..n {
        let key = format!("key:{i:012}");
        wire.extend_from_slice(format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$100\r\n", key.len()).as_bytes());
        wire.extend_from_slice(&[b'v'; 100]);
        wire.extend_from_slice(b"\r\n");
    }
    wire
}

fn resp(c: &mut Criterion) {
    let wire = pipeline(16);
    let mut g = c.benchmark_group("resp");
    g.throughput(Throughput::Elements(16));
    g.bench_function("decode 16 pipelined SETs", |b| {
        let mut d = Decoder::new();
        b.iter(|| {
            let mut n = 0;
            while let Ok(Step::Command) = d.next(black_box(&wire), Limits::default()) {
                n += d.args(&wire).len();
            }
            d.discard_consumed();
            black_box(n)
        })
    });
    g.bench_function("encode 16 bulk replies", |b| {
        let mut out = ReplyBuf::new();
        let value = [b'v'; 100];
        b.iter(|| {
            out.truncate(0);
            for _ in 0..16 {
                out.bulk(black_box(&value));
            }
            black_box(out.len())
        })
    });
    g.finish();
}

fn hashing(c: &mut Criterion) {
    let key = b"key:000000012345";
    c.bench_function("key_slot (crc16) 16-byte key", |b| b.iter(|| key_slot(black_box(key))));
    c.bench_function("key_hash (table) 16-byte key", |b| b.iter(|| key_hash(black_box(key))));
}

fn keyspace(c: &mut Criterion) {
    let ks = Keyspace::new(1);
    let cfg = EngineConfig::default();
    let mut stats = LocalStats::default();
    let keys: Vec<Vec<u8>> = (0..100_000).map(|i| format!("key:{i:012}").into_bytes()).collect();
    let value = [b'v'; 32];
    let mut run = |key: &[u8], write: bool| {
        let id = lock_id(0, key_slot(key));
        let mut ctx = Ctx::new(&ks, 0, 1_700_000_000_000, &cfg, &mut stats, false, &NoEvents, ks.lock(&[id]));
        if write {
            ctx.set(key, NewValue::Bytes(&value), Ttl::Clear).expect("slot is locked");
        } else {
            black_box(ctx.read(key).expect("slot is locked").is_some());
        }
    };
    for k in &keys {
        run(k, true);
    }
    let mut i = 0;
    c.bench_function("keyspace SET (overwrite, 100k keys)", |b| {
        b.iter(|| {
            i = (i + 7919) % keys.len();
            run(&keys[i], true)
        })
    });
    c.bench_function("keyspace GET (hit, 100k keys)", |b| {
        b.iter(|| {
            i = (i + 7919) % keys.len();
            run(&keys[i], false)
        })
    });
}

criterion_group!(benches, resp, hashing, keyspace);
criterion_main!(benches);
