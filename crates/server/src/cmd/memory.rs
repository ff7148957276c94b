//! MEMORY STATS / DOCTOR / MALLOC-STATS / PURGE. MEMORY USAGE and HELP are the engine's; the
//! registry merges these subcommands into the engine's MEMORY container.

use std::fmt::Write as _;

use hotkv_engine::CommandError;
use hotkv_engine::command::{CommandSpec, acl, flags as f};
use hotkv_engine::slot::SLOTS;
use hotkv_protocol::{Args, ReplyBuf};

use super::row;
use crate::memory::human;
use crate::registry::{Flow, ServerSpec};
use crate::server::Server;
use crate::session::Session;

/// Subcommands merged into MEMORY.
pub static COMMANDS: &[ServerSpec] = &[CommandSpec::container(
    "memory",
    -2,
    "server",
    "4.0.0",
    "A container for memory diagnostics commands.",
    SUBCOMMANDS,
)];

static SUBCOMMANDS: &[ServerSpec] = &[
    row(
        "stats",
        2,
        f::READONLY,
        acl::SLOW,
        &[],
        "server",
        "4.0.0",
        "Returns details about memory usage.",
        "O(1)",
        stats,
    )
    .with_tips(&["nondeterministic_output", "request_policy:all_shards", "response_policy:special"]),
    row("doctor", 2, 0, acl::SLOW, &[], "server", "4.0.0", "Outputs a memory problems report.", "O(1)", doctor)
        .with_tips(&["nondeterministic_output", "request_policy:all_shards", "response_policy:special"]),
    row(
        "malloc-stats",
        2,
        0,
        acl::SLOW,
        &[],
        "server",
        "4.0.0",
        "Returns the allocator statistics.",
        "Depends on how much memory is allocated, could be slow",
        malloc_stats,
    )
    .with_tips(&["nondeterministic_output", "request_policy:all_shards", "response_policy:special"]),
    row(
        "purge",
        2,
        0,
        acl::SLOW,
        &[],
        "server",
        "4.0.0",
        "Asks the allocator to release memory.",
        "Depends on how much memory is allocated, could be slow",
        purge,
    )
    .with_tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
];

/// Figures MEMORY STATS and DOCTOR share.
struct Breakdown {
    peak: u64,
    used: u64,
    startup: u64,
    clients: u64,
    dbs: Vec<(usize, u64, u64)>,
    lut: u64,
    keys: u64,
    rss: u64,
    allocator: (u64, u64, u64, u64),
}

impl Breakdown {
    fn measure(srv: &Server) -> Breakdown {
        let used = srv.memory.refresh();
        let clients = srv.clients.snapshot().iter().map(|c| c.memory() as u64).sum();
        let mut dbs = Vec::new();
        let mut lut = 0;
        let mut keys = 0;
        for i in 0..srv.ks.databases() {
            let Some(db) = srv.ks.db_if_used(i) else { continue };
            lut += (SLOTS * std::mem::size_of::<hotkv_engine::keyspace::Slot>()) as u64;
            let n = db.len() as u64;
            keys += n;
            if n == 0 {
                continue;
            }
            // One lock at a time, and never waiting: this is a diagnostic, it must not stall
            // writers, and inside a transaction the slots may be held by that transaction. A
            // slot busy at that instant is left out of the figure.
            let main: u64 = db.slots().iter().filter_map(|s| s.try_lock().map(|t| t.overhead_bytes() as u64)).sum();
            dbs.push((i, main, 0));
        }
        Breakdown {
            peak: srv.memory.peak(),
            used,
            startup: srv.startup_memory.load(std::sync::atomic::Ordering::Relaxed),
            clients,
            dbs,
            lut,
            keys,
            rss: srv.memory.rss(),
            allocator: srv.memory.allocator_stats(),
        }
    }

    fn overhead(&self) -> u64 {
        self.startup + self.clients + self.dbs.iter().map(|d| d.1 + d.2).sum::<u64>()
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

fn stats(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let m = Breakdown::measure(srv);
    let overhead = m.overhead();
    let net = m.used.saturating_sub(m.startup);
    let dataset = m.used.saturating_sub(overhead);
    let (active, resident, _mapped, _retained) = m.allocator;
    out.map(31 + m.dbs.len());
    for (name, v) in [
        ("peak.allocated", m.peak),
        ("total.allocated", m.used),
        ("startup.allocated", m.startup),
        ("replication.backlog", 0),
        ("clients.slaves", 0),
        ("clients.normal", m.clients),
        ("cluster.links", 0),
        ("aof.buffer", 0),
        ("lua.caches", 0),
        ("functions.caches", 0),
    ] {
        out.bulk(name.as_bytes());
        out.int(v as i64);
    }
    for (i, main, expires) in &m.dbs {
        out.bulk(format!("db.{i}").as_bytes());
        out.map(2);
        out.bulk(b"overhead.hashtable.main");
        out.int(*main as i64);
        out.bulk(b"overhead.hashtable.expires");
        out.int(*expires as i64);
    }
    let ints = [
        ("overhead.db.hashtable.lut", m.lut),
        ("overhead.db.hashtable.rehashing", 0),
        ("overhead.total", overhead),
        ("db.dict.rehashing.count", 0),
        ("keys.count", m.keys),
        ("keys.bytes-per-key", net.checked_div(m.keys).unwrap_or(0)),
        ("dataset.bytes", dataset),
    ];
    for (name, v) in ints {
        out.bulk(name.as_bytes());
        out.int(v as i64);
    }
    out.bulk(b"dataset.percentage");
    out.double(ratio(dataset, net) * 100.0);
    out.bulk(b"peak.percentage");
    out.double(ratio(m.used, m.peak) * 100.0);
    for (name, v) in [
        ("allocator.allocated", m.used),
        ("allocator.active", active),
        ("allocator.resident", resident),
        ("allocator.muzzy", 0),
    ] {
        out.bulk(name.as_bytes());
        out.int(v as i64);
    }
    out.bulk(b"allocator-fragmentation.ratio");
    out.double(ratio(active, m.used));
    out.bulk(b"allocator-fragmentation.bytes");
    out.int(active as i64 - m.used as i64);
    out.bulk(b"allocator-rss.ratio");
    out.double(ratio(resident, active));
    out.bulk(b"allocator-rss.bytes");
    out.int(resident as i64 - active as i64);
    out.bulk(b"rss-overhead.ratio");
    out.double(ratio(m.rss, resident));
    out.bulk(b"rss-overhead.bytes");
    out.int(m.rss as i64 - resident as i64);
    out.bulk(b"fragmentation");
    out.double(ratio(m.rss, m.used));
    out.bulk(b"fragmentation.bytes");
    out.int(m.rss as i64 - m.used as i64);
    Ok(Flow::Continue)
}

fn doctor(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let m = Breakdown::measure(srv);
    let mut report = String::new();
    if m.used < 5 * 1024 * 1024 {
        report.push_str(
            "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.",
        );
    } else {
        let mut issues = Vec::new();
        if ratio(m.peak, m.used) > 1.5 {
            issues.push(format!(
                " * Peak memory: In the past this instance used more than 150% the memory that is currently using. The allocator is normally not able to release memory after a peak, so you can expect to see a big fragmentation ratio, however this is actually harmless and is only due to the memory peak, and if the server will use more memory again in the future, the freed memory will be used. Peak: {}, now: {}.",
                human(m.peak),
                human(m.used)
            ));
        }
        if ratio(m.rss, m.used) > 1.4 {
            issues.push(format!(
                " * High total RSS: This instance has a memory fragmentation and RSS overhead greater than 1.4 (this means that the Resident Set Size of the process is much larger than the sum of the logical allocations hotkv performed). RSS: {}, used: {}.",
                human(m.rss),
                human(m.used)
            ));
        }
        if m.clients > 200 * 1024 && m.clients * 10 > m.used {
            issues.push(format!(
                " * Big client buffers: The clients' input and output buffers use {}, more than 10% of the memory in use.",
                human(m.clients)
            ));
        }
        if issues.is_empty() {
            report.push_str("Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.");
        } else {
            let _ = write!(
                report,
                "Sam, I detected a few issues in this hotkv instance memory implants:\n\n{}\n",
                issues.join("\n\n")
            );
        }
    }
    out.verbatim(report.as_bytes());
    Ok(Flow::Continue)
}

fn malloc_stats(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let used = srv.memory.refresh();
    let (active, resident, mapped, retained) = srv.memory.allocator_stats();
    let text = format!(
        "___ Begin jemalloc statistics ___\nAllocated: {used}, active: {active}, resident: {resident}, mapped: {mapped}, retained: {retained}\n--- End jemalloc statistics ---\n"
    );
    out.verbatim(text.as_bytes());
    Ok(Flow::Continue)
}

fn purge(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    // "arena.<MALLCTL_ARENAS_ALL>.purge".
    if !crate::memory::mallctl_void(b"arena.4096.purge\0") {
        return Err(CommandError::err("Error purging dirty pages"));
    }
    srv.memory.refresh();
    out.ok();
    Ok(Flow::Continue)
}
