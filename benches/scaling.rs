//! The engine under many threads, without sockets: N threads run SET or GET through the same
//! `Ctx` path the server's workers use (slot lock, table lookup, value write), against one
//! shared keyspace, for a fixed time each, and the run reports ops/s and CPU per operation for
//! each thread count. A machine with fewer cores than threads cannot show speed-up, but it
//! shows whether the locks collapse when threads outnumber cores (a thread preempted while it
//! holds a slot lock makes every other thread that wants that slot wait) and what one
//! operation costs as threads are added.
//!
//! Workloads: `set` and `get` on random keys over every slot (the common case: two threads
//! rarely want one slot at once), and `hot-set`, every thread writing keys of one hash tag, so
//! all of them queue on a single slot lock (the worst case a client can make).
//!
//! `cargo bench --bench scaling -- [--seconds S] [--threads 1,2,4,8,16] [--keys N]`

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hotkv_engine::ctx::{Ctx, EngineConfig, LocalStats, NoEvents, Ttl};
use hotkv_engine::entry::NewValue;
use hotkv_engine::keyspace::{Keyspace, lock_id};
use hotkv_engine::slot::key_slot;

struct Opts {
    seconds: f64,
    threads: Vec<usize>,
    keys: usize,
}

fn opts() -> Opts {
    let mut o = Opts { seconds: 2.0, threads: vec![1, 2, 4, 8, 16], keys: 200_000 };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--seconds" => o.seconds = value.parse().expect("--seconds S"),
            "--threads" => o.threads = value.split(',').map(|t| t.parse().expect("--threads 1,2,4")).collect(),
            "--keys" => o.keys = value.parse().expect("--keys N"),
            // cargo bench passes --bench; anything else is ignored as criterion would.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    o
}

/// User + system CPU seconds of the whole process so far.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime, in clock ticks (100 per second on Linux).
    (ticks(11) + ticks(12)) / 100.0
}

#[derive(Clone, Copy, PartialEq)]
enum Work {
    Set,
    Get,
    HotSet,
}

impl Work {
    fn name(self) -> &'static str {
        match self {
            Work::Set => "set",
            Work::Get => "get",
            Work::HotSet => "hot-set",
        }
    }
}

fn run(
    ks: &Arc<Keyspace>,
    keys: &Arc<Vec<Vec<u8>>>,
    hot: &Arc<Vec<Vec<u8>>>,
    work: Work,
    threads: usize,
    secs: f64,
) -> (f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let total = Arc::new(AtomicU64::new(0));
    let cpu0 = cpu_seconds();
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (ks, keys, hot, stop, total) = (ks.clone(), keys.clone(), hot.clone(), stop.clone(), total.clone());
            std::thread::spawn(move || {
                let cfg = EngineConfig::default();
                let mut stats = LocalStats::default();
                let value = [b'v'; 32];
                let pool = if work == Work::HotSet { &hot } else { &keys };
                // xorshift: each thread its own sequence, no shared state.
                let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1).wrapping_mul(0x1000_0000_01B3);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..64 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let key = &pool[(x % pool.len() as u64) as usize];
                        let id = lock_id(0, key_slot(key));
                        let mut ctx =
                            Ctx::new(&ks, 0, 1_700_000_000_000, &cfg, &mut stats, false, &NoEvents, ks.lock(&[id]));
                        if work == Work::Get {
                            black_box(ctx.read(key).expect("slot is locked").is_some());
                        } else {
                            ctx.set(key, NewValue::Bytes(&value), Ttl::Clear).expect("slot is locked");
                        }
                    }
                    n += 64;
                }
                total.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("bench thread");
    }
    let wall = started.elapsed().as_secs_f64();
    let ops = total.load(Ordering::Relaxed) as f64;
    (ops / wall, (cpu_seconds() - cpu0) * 1e6 / ops)
}

fn main() {
    let o = opts();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ks = Arc::new(Keyspace::new(1));
    let keys: Arc<Vec<Vec<u8>>> = Arc::new((0..o.keys).map(|i| format!("key:{i:012}").into_bytes()).collect());
    let hot: Arc<Vec<Vec<u8>>> = Arc::new((0..1000).map(|i| format!("{{hot}}:{i}").into_bytes()).collect());
    // Every key exists before GET is measured.
    run(&ks, &keys, &hot, Work::Set, 1, 0.2);
    {
        let cfg = EngineConfig::default();
        let mut stats = LocalStats::default();
        for k in keys.iter().chain(hot.iter()) {
            let id = lock_id(0, key_slot(k));
            let mut ctx = Ctx::new(&ks, 0, 1_700_000_000_000, &cfg, &mut stats, false, &NoEvents, ks.lock(&[id]));
            ctx.set(k, NewValue::Bytes(b"seed"), Ttl::Clear).expect("slot is locked");
        }
    }
    println!("engine scaling: {} keys (+1000 in one slot), {} cores, {:.1} s per cell", o.keys, cores, o.seconds);
    println!("| workload | threads | ops/s | vs 1 thread | CPU µs/op |");
    println!("| --- | --- | --- | --- | --- |");
    for work in [Work::Set, Work::Get, Work::HotSet] {
        let mut base = None;
        for &t in &o.threads {
            let (rate, cpu) = run(&ks, &keys, &hot, work, t, o.seconds);
            let base = *base.get_or_insert(rate);
            println!("| {} | {t} | {rate:.0} | {:.2} | {cpu:.3} |", work.name(), rate / base);
        }
    }
}
