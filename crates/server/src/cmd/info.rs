//! INFO: the server's state as `field:value` lines grouped in `# Section`s, with every field
//! Valkey 8.0 prints (fields of subsystems hotkv lacks report their idle values), so that
//! monitoring tools and redis-cli, which parse INFO by substring, work unchanged.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use hotkv_engine::CommandError;
use hotkv_engine::command::{acl, flags as f};
use hotkv_protocol::{Args, ReplyBuf};

use super::row;
use crate::config::table::BIND;
use crate::memory::{human, total_system_memory};
use crate::registry::{Flow, ServerSpec};
use crate::server::{Server, int_of, unix_ms, unix_us};
use crate::session::{Session, flag};

/// INFO's row.
pub static COMMANDS: &[ServerSpec] = &[row(
    "info",
    -1,
    f::LOADING | f::STALE,
    acl::DANGEROUS,
    &[],
    "server",
    "1.0.0",
    "Returns information and statistics about the server.",
    "O(1)",
    info,
)
.with_tips(&["nondeterministic_output", "request_policy:all_shards", "response_policy:special"])];

/// Sections printed by a bare INFO or `INFO default`, in order.
const DEFAULT_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "module_list",
    "errorstats",
    "cluster",
    "keyspace",
];

/// Which sections a call asks for (Valkey's `genInfoSectionDict`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Selection {
    /// Section names, lower case, without duplicates.
    pub names: Vec<String>,
    /// `all` or `everything`: every section.
    pub all: bool,
}

impl Selection {
    /// Parses INFO's arguments (without the command name).
    pub fn parse<'a>(args: impl Iterator<Item = &'a [u8]>) -> Selection {
        let mut sel = Selection::default();
        let mut any = false;
        for a in args {
            any = true;
            let a = String::from_utf8_lossy(a).to_ascii_lowercase();
            match a.as_str() {
                "default" => DEFAULT_SECTIONS.iter().for_each(|s| sel.add(s)),
                // hotkv has no module sections, so `everything` is `all`.
                "all" | "everything" => sel.all = true,
                _ => sel.add(&a),
            }
        }
        if !any {
            DEFAULT_SECTIONS.iter().for_each(|s| sel.add(s));
        }
        sel
    }

    fn add(&mut self, s: &str) {
        if !self.names.iter().any(|n| n == s) {
            self.names.push(s.to_string());
        }
    }

    /// Whether section `name` is printed.
    pub fn wants(&self, name: &str) -> bool {
        self.all || self.names.iter().any(|n| n == name)
    }
}

/// Replaces the characters that would break INFO's format (Valkey's `getSafeInfoString`).
fn safe(s: &str) -> String {
    s.chars().map(|c| if matches!(c, '#' | ':' | '\n' | '\r') { '_' } else { c }).collect()
}

/// Appends `name:value\r\n` lines.
macro_rules! fields {
    ($out:expr, $($name:literal => $value:expr),* $(,)?) => {
        $( let _ = write!($out, concat!($name, ":{}\r\n"), $value); )*
    };
}

/// A section: its selection name, its title and what prints its fields.
type Section = (&'static str, &'static str, fn(&Server, &mut String));

/// The full INFO text for a selection.
pub fn generate(srv: &Server, sel: &Selection) -> String {
    // used_memory is taken before the text it goes into is allocated, so INFO does not count
    // its own reply (a client polling INFO against maxmemory would see a few KB too many).
    // A fresh read, not one from earlier in the same millisecond: that one would still count
    // what was freed since, on another thread (a replica's buffer, right after CLIENT KILL).
    if sel.wants("memory") {
        srv.memory.refresh();
    }
    let mut out = String::with_capacity(4096);
    let sections: &[Section] = &[
        ("server", "Server", server),
        ("clients", "Clients", clients),
        ("memory", "Memory", memory),
        ("persistence", "Persistence", persistence),
        ("stats", "Stats", stats),
        ("replication", "Replication", replication),
        ("cpu", "CPU", cpu),
        ("tls", "TLS", tls),
        ("module_list", "Modules", |_, _| {}),
        ("commandstats", "Commandstats", commandstats),
        ("errorstats", "Errorstats", errorstats),
        ("latencystats", "Latencystats", latencystats),
        ("cluster", "Cluster", |srv, o| {
            fields!(o, "cluster_enabled" => u8::from(srv.cluster.is_some()));
        }),
        ("keyspace", "Keyspace", keyspace),
    ];
    let mut first = true;
    for (name, title, body) in sections {
        let wanted = sel.wants(name) || (*name == "module_list" && sel.wants("modules"));
        if !wanted {
            continue;
        }
        if !first {
            out.push_str("\r\n");
        }
        first = false;
        let _ = write!(out, "# {title}\r\n");
        body(srv, &mut out);
    }
    // The debug section is printed only when named, never with `all`.
    if sel.names.iter().any(|n| n == "debug") {
        if !first {
            out.push_str("\r\n");
        }
        out.push_str("# Debug\r\n");
        let st = &srv.stats;
        fields!(out, "eventloop_duration_aof_sum" => 0,
            "eventloop_duration_cron_sum" => st.cron_usec.load(Ordering::Relaxed),
            "eventloop_duration_max" => st.max_batch_usec.load(Ordering::Relaxed),
            "eventloop_cmd_per_cycle_max" => st.max_batch_cmds.load(Ordering::Relaxed));
    }
    out
}

fn info(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let sel = Selection::parse(args.iter().skip(1));
    out.verbatim(generate(srv, &sel).as_bytes());
    Ok(Flow::Continue)
}

/// `os:` as `uname -srm` prints it, read from /proc so no unsafe call is needed.
fn os_line() -> String {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string()).unwrap_or_default();
    let sys = read("/proc/sys/kernel/ostype");
    let sys = if sys.is_empty() { std::env::consts::OS.to_string() } else { sys };
    format!("{sys} {} {}", read("/proc/sys/kernel/osrelease"), std::env::consts::ARCH)
}

fn server(srv: &Server, o: &mut String) {
    let settings = srv.settings.load();
    let bound = srv.ports.lock().0;
    let port = if bound != 0 { i64::from(bound) } else { int_of(&settings, "port", 6379) };
    let uptime = srv.started.elapsed().as_secs();
    let hz = srv.engine.load().hz;
    let config_file = srv
        .config_file
        .as_ref()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()).display().to_string())
        .unwrap_or_default();
    fields!(o,
        "redis_version" => super::conn::REDIS_VERSION,
        "server_name" => "hotkv",
        "hotkv_version" => crate::VERSION,
        "redis_git_sha1" => "00000000",
        "redis_git_dirty" => 0,
        "redis_build_id" => "0",
        "redis_mode" => "standalone",
        "os" => os_line(),
        "arch_bits" => usize::BITS,
        "monotonic_clock" => "POSIX clock_gettime",
        "multiplexing_api" => "epoll",
        "gcc_version" => "0.0.0",
        "process_id" => std::process::id(),
        "process_supervised" => "no",
        "run_id" => srv.run_id,
        "tcp_port" => port,
        "server_time_usec" => unix_us(),
        "uptime_in_seconds" => uptime,
        "uptime_in_days" => uptime / 86400,
        "hz" => hz,
        "configured_hz" => hz,
        "lru_clock" => hotkv_engine::policy::lru_clock(unix_ms()),
        "executable" => srv.executable.display(),
        "config_file" => config_file,
        "io_threads_active" => 0,
        "availability_zone" => "",
    );
    if let Some(ms) = srv.shutdown_wait.remaining_ms(crate::server::unix_ms()) {
        let _ = write!(o, "shutdown_in_milliseconds:{ms}\r\n");
    }
    if port != 0 {
        let binds: String = settings.list(BIND).iter().map(|b| format!(",bind={b}")).collect();
        let _ = write!(o, "listener0:name=tcp{binds},port={port}\r\n");
    }
}

/// `(mem_total_replication_buffers, mem_replication_backlog, mem_clients_slaves)`: the backlog
/// and the replicas share one buffer, and what exceeds `repl-backlog-size` while replicas are
/// attached is theirs (Valkey's `getMemoryOverheadData`).
fn replication_buffers(srv: &Server) -> (u64, u64, u64) {
    let (total, replicas) = crate::evict::replication_buffer(srv);
    (total as u64, (total - replicas) as u64, replicas as u64)
}

fn clients(srv: &Server, o: &mut String) {
    let all = srv.clients.snapshot();
    let count = |bit: u32| all.iter().filter(|c| c.flags.load(Ordering::Relaxed) & bit != 0).count();
    let max_in = all.iter().map(|c| c.query_buf.pending()).max().unwrap_or(0);
    let max_out = all.iter().map(|c| c.obl.load(Ordering::Relaxed)).max().unwrap_or(0);
    let watching = count(flag::WATCHING);
    fields!(o,
        // Replicas are not clients here, as Valkey counts (`clients - replicas`).
        "connected_clients" => all.len() - count(flag::REPLICA),
        "cluster_connections" => 0,
        "maxclients" => srv.rt.load().maxclients,
        "client_recent_max_input_buffer" => max_in,
        "client_recent_max_output_buffer" => max_out,
        "blocked_clients" => count(flag::BLOCKED),
        "tracking_clients" => srv.tracking.clients(),
        "pubsub_clients" => count(flag::PUBSUB),
        "watching_clients" => watching,
        "clients_in_timeout_table" => 0,
        "total_watched_keys" => srv.watches.len(),
        "total_blocking_keys" => srv.blocked.keys(),
        "total_blocking_keys_on_nokey" => {
            srv.blocked.keys_on_nokey(|cmd| srv.registry.get(cmd).spec.name() == "xreadgroup")
        }
    );
}

/// `a / b` formatted with two decimals, as Valkey's float ratios.
fn ratio(a: u64, b: u64) -> String {
    format!("{:.2}", a as f32 / b.max(1) as f32)
}

fn memory(srv: &Server, o: &mut String) {
    let used = srv.memory.used();
    let rss = srv.memory.rss();
    let peak = srv.memory.peak().max(used);
    let (active, resident, _mapped, _retained) = srv.memory.allocator_stats();
    let clients_mem: u64 = srv.clients.snapshot().iter().map(|c| c.memory() as u64).sum();
    let startup = srv.startup_memory.load(Ordering::Relaxed);
    let overhead = startup + clients_mem;
    let dataset = used.saturating_sub(overhead);
    let total = total_system_memory();
    let engine = srv.engine.load();
    let signed = |a: u64, b: u64| a as i64 - b as i64;
    let (repl_total, repl_backlog, repl_replicas) = replication_buffers(srv);
    let lua = hotkv_scripting::lua_memory() as u64;
    let scripts_mem = srv.scripts.memory() as u64;
    let (libraries, functions) = srv.functions.counts();
    let functions_mem: u64 = srv.functions.libraries().iter().map(|l| l.code.len() as u64).sum();
    fields!(o,
        "used_memory" => used,
        "used_memory_human" => human(used),
        "used_memory_rss" => rss,
        "used_memory_rss_human" => human(rss),
        "used_memory_peak" => peak,
        "used_memory_peak_human" => human(peak),
        "used_memory_peak_perc" => format!("{:.2}%", used as f32 * 100.0 / peak.max(1) as f32),
        "used_memory_overhead" => overhead,
        "used_memory_startup" => startup,
        "used_memory_dataset" => dataset,
        "used_memory_dataset_perc" => format!("{:.2}%", dataset as f32 * 100.0 / used.saturating_sub(startup).max(1) as f32),
        "allocator_allocated" => used,
        "allocator_active" => active,
        "allocator_resident" => resident,
        "allocator_muzzy" => 0,
        "total_system_memory" => total,
        "total_system_memory_human" => human(total),
        // One Lua VM per worker thread runs both EVAL scripts and functions: its memory is
        // reported as the eval VM's, as Valkey's two VMs would split it.
        "used_memory_lua" => lua,
        "used_memory_vm_eval" => lua,
        "used_memory_lua_human" => human(lua),
        "used_memory_scripts_eval" => scripts_mem,
        "number_of_cached_scripts" => srv.scripts.len(),
        "number_of_functions" => functions,
        "number_of_libraries" => libraries,
        "used_memory_vm_functions" => 0,
        "used_memory_vm_total" => lua,
        "used_memory_vm_total_human" => human(lua),
        "used_memory_functions" => functions_mem,
        "used_memory_scripts" => scripts_mem + functions_mem,
        "used_memory_scripts_human" => human(scripts_mem + functions_mem),
        "maxmemory" => engine.maxmemory,
        "maxmemory_human" => human(engine.maxmemory),
        "maxmemory_policy" => engine.policy.name(),
        "allocator_frag_ratio" => ratio(active, used),
        "allocator_frag_bytes" => active.saturating_sub(used),
        "allocator_rss_ratio" => ratio(resident, active),
        "allocator_rss_bytes" => signed(resident, active),
        "rss_overhead_ratio" => ratio(rss, resident),
        "rss_overhead_bytes" => signed(rss, resident),
        "mem_fragmentation_ratio" => ratio(rss, used),
        "mem_fragmentation_bytes" => signed(rss, used),
        "mem_not_counted_for_evict" => crate::evict::not_counted(srv),
        "mem_replication_backlog" => repl_backlog,
        "mem_total_replication_buffers" => repl_total,
        "mem_clients_slaves" => repl_replicas,
        "mem_clients_normal" => clients_mem,
        "mem_cluster_links" => srv.cluster.as_ref().map_or(0, |c| c.bus.links_memory()),
        "mem_aof_buffer" => 0,
        "mem_allocator" => "jemalloc-5.3.0",
        "mem_overhead_db_hashtable_rehashing" => 0,
        "active_defrag_running" => 0,
        "lazyfree_pending_objects" => 0,
        "lazyfreed_objects" => 0,
    );
}

fn persistence(srv: &Server, o: &mut String) {
    // Valkey's `genValkeyInfoString` order. There is no fork: copy-on-write figures stay 0,
    // and current_fork_perc is the save's progress, as Valkey computes it from the keys.
    // The AOF's lines come from aof::wire, in Valkey's two runs.
    let f = crate::persistence::figures(srv);
    let (done, total) = f.keys;
    let perc = if total > 0 { done as f64 * 100.0 / total as f64 } else { 0.0 };
    fields!(o,
        "loading" => u8::from(f.loading.is_some() || srv.repl.loading()),
        "async_loading" => u8::from(srv.repl.async_loading()),
        "current_cow_peak" => 0,
        "current_cow_size" => 0,
        "current_cow_size_age" => 0,
        "current_fork_perc" => format!("{perc:.2}"),
        "current_save_keys_processed" => done,
        "current_save_keys_total" => total,
        "rdb_changes_since_last_save" => f.changes,
        "rdb_bgsave_in_progress" => u8::from(f.bgsave_in_progress),
        "rdb_last_save_time" => srv.lastsave.load(Ordering::Relaxed),
        "rdb_last_bgsave_status" => if f.last_ok { "ok" } else { "err" },
        "rdb_last_bgsave_time_sec" => f.last_time_sec,
        "rdb_current_bgsave_time_sec" => f.current_time_sec,
        "rdb_saves" => f.saves,
        "rdb_last_cow_size" => 0,
        "rdb_last_load_keys_expired" => f.last_load.1,
        "rdb_last_load_keys_loaded" => f.last_load.0,
    );
    crate::aof::wire::info_head(srv, o);
    fields!(o,
        "module_fork_in_progress" => 0,
        "module_fork_last_cow_size" => 0,
    );
    crate::aof::wire::info_tail(srv, o);
    if let Some(l) = f.loading {
        let now = unix_ms() / 1000;
        let perc = if l.total_bytes > 0 { l.loaded_bytes as f64 * 100.0 / l.total_bytes as f64 } else { 0.0 };
        let elapsed = now - l.start_time;
        let remaining = l.total_bytes.saturating_sub(l.loaded_bytes).max(1) as i64;
        // Valkey's estimate: a fake 1 second until a second has passed.
        let eta = if elapsed == 0 { 1 } else { elapsed * remaining / (l.loaded_bytes as i64 + 1) };
        fields!(o,
            "loading_start_time" => l.start_time,
            "loading_total_bytes" => l.total_bytes,
            "loading_rdb_used_mem" => 0,
            "loading_loaded_bytes" => l.loaded_bytes,
            "loading_loaded_perc" => format!("{perc:.2}"),
            "loading_eta_seconds" => eta,
        );
    }
}

fn stats(srv: &Server, o: &mut String) {
    let s = &srv.stats;
    let acl_denied = srv.acl.denied_counts();
    let (ops, kin, kout, cycles_rate, cron_usec_rate) = {
        let samples = s.samples.lock();
        (samples.rate(0) as i64, samples.rate(1) as i64, samples.rate(2) as i64, samples.rate(3), samples.rate(4))
    };
    // hotkv's workers have no event loop of their own; the cron thread's cycles stand in for
    // it (hz cycles a second, each running the periodic work).
    let cycle_usec = if cycles_rate > 0.0 { (cron_usec_rate / cycles_rate).max(1.0) as i64 } else { 0 };
    let kbps = |v: i64| format!("{:.2}", v as f32 / 1024.0);
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let syncs = srv.repl.primary.sync_counts();
    fields!(o,
        "total_connections_received" => load(&s.connections_received),
        "total_commands_processed" => s.commands(),
        "instantaneous_ops_per_sec" => ops,
        "total_net_input_bytes" => s.net_in(),
        "total_net_output_bytes" => s.net_out(),
        "total_net_repl_input_bytes" => 0,
        "total_net_repl_output_bytes" => 0,
        "instantaneous_input_kbps" => kbps(kin),
        "instantaneous_output_kbps" => kbps(kout),
        "instantaneous_input_repl_kbps" => "0.00",
        "instantaneous_output_repl_kbps" => "0.00",
        "rejected_connections" => load(&s.rejected_connections),
        "sync_full" => syncs.full,
        "sync_partial_ok" => syncs.partial_ok,
        "sync_partial_err" => syncs.partial_err,
        // Redis 7.4's hash fields deleted for their TTL, in its place before expired_keys.
        "expired_subkeys" => s.expired_fields(),
        "expired_keys" => s.expired(),
        "expired_stale_perc" => format!("{:.2}", s.expired_stale_perc()),
        "expired_time_cap_reached_count" => load(&s.expire_cap_reached),
        "expire_cycle_cpu_milliseconds" => load(&s.expire_cycle_us) / 1000,
        "evicted_keys" => load(&s.evicted_keys),
        "evicted_clients" => load(&s.evicted_clients),
        "evicted_scripts" => srv.scripts.evicted(),
        "total_eviction_exceeded_time" => 0,
        "current_eviction_exceeded_time" => 0,
        "keyspace_hits" => s.hits(),
        "keyspace_misses" => s.misses(),
        "pubsub_channels" => srv.pubsub.channels(crate::pubsub::Kind::Channel, None).len(),
        "pubsub_patterns" => srv.pubsub.numpat(),
        "pubsubshard_channels" => srv.pubsub.channels(crate::pubsub::Kind::Shard, None).len(),
        // No fork here: a background job (BGSAVE, an AOF rewrite, a full sync) starts with a
        // snapshot cut instead, and the cut is when clients wait, as a fork's is.
        "latest_fork_usec" => srv.ks.snapshot_stats().1,
        "total_forks" => srv.ks.snapshot_stats().0,
        "migrate_cached_sockets" => srv.migrate.len(),
        "slave_expires_tracked_keys" => 0,
        "active_defrag_hits" => 0,
        "active_defrag_misses" => 0,
        "active_defrag_key_hits" => 0,
        "active_defrag_key_misses" => 0,
        "total_active_defrag_time" => 0,
        "current_active_defrag_time" => 0,
        "tracking_total_keys" => srv.tracking.total_keys(),
        "tracking_total_items" => srv.tracking.total_items(),
        "tracking_total_prefixes" => srv.tracking.total_prefixes(),
        "unexpected_error_replies" => 0,
        "total_error_replies" => load(&s.error_replies),
        "dump_payload_sanitizations" => 0,
        "total_reads_processed" => 0,
        "total_writes_processed" => 0,
        "io_threaded_reads_processed" => 0,
        "io_threaded_writes_processed" => 0,
        "io_threaded_freed_objects" => 0,
        "io_threaded_poll_processed" => 0,
        "io_threaded_total_prefetch_batches" => 0,
        "io_threaded_total_prefetch_entries" => 0,
        "client_query_buffer_limit_disconnections" => load(&s.qbuf_limit_disconnections),
        "client_output_buffer_limit_disconnections" =>
            load(&s.obuf_limit_disconnections) + srv.pubsub.limit_disconnections.load(Ordering::Relaxed),
        "reply_buffer_shrinks" => load(&srv.reply_buffers.shrinks),
        "reply_buffer_expands" => load(&srv.reply_buffers.expands),
        "eventloop_cycles" => load(&s.cron_cycles),
        "eventloop_duration_sum" => load(&s.cron_usec),
        "eventloop_duration_cmd_sum" => s.command_usec(),
        "instantaneous_eventloop_cycles_per_sec" => cycles_rate.round() as i64,
        "instantaneous_eventloop_duration_usec" => cycle_usec,
        "acl_access_denied_auth" => acl_denied[0],
        "acl_access_denied_cmd" => acl_denied[1],
        "acl_access_denied_key" => acl_denied[2],
        "acl_access_denied_channel" => acl_denied[3],
    );
}

fn replication(srv: &Server, o: &mut String) {
    let s = srv.settings.load();
    let extra = hotkv_replication::InfoExtra {
        replica_priority: s.int(crate::config::table::REPLICA_PRIORITY).clamp(0, i64::from(u32::MAX)) as u32,
        replica_read_only: s.bool(crate::config::table::REPLICA_READ_ONLY),
        replica_announced: s.bool(crate::config::table::REPLICA_ANNOUNCED),
        failover_state: srv.repl.failover.state().as_str(),
    };
    let link = srv.repl.link_status();
    let mut section = String::with_capacity(1024);
    hotkv_replication::render_info(&mut section, &srv.repl.primary, link.as_ref(), &extra);
    // The section's title is written by the caller.
    let body = section.split_once("\r\n").map_or("", |(_, rest)| rest);
    o.push_str(body);
    if !body.is_empty() && !body.ends_with("\r\n") {
        o.push_str("\r\n");
    }
}

/// `getrusage(who)` as (system, user) `seconds.micros` strings.
fn rusage(who: libc::c_int) -> (String, String) {
    let mut ru: libc::rusage = zeroed_rusage();
    #[allow(unsafe_code)]
    // SAFETY: `ru` is a valid, writable rusage; getrusage only writes into it.
    let rc = unsafe { libc::getrusage(who, &mut ru) };
    if rc != 0 {
        return ("0.000000".into(), "0.000000".into());
    }
    let tv = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    (tv(ru.ru_stime), tv(ru.ru_utime))
}

fn zeroed_rusage() -> libc::rusage {
    #[allow(unsafe_code)]
    // SAFETY: rusage is a plain C struct of integers, for which all-zero bytes are valid.
    unsafe {
        std::mem::zeroed()
    }
}

fn cpu(_: &Server, o: &mut String) {
    let (sys, user) = rusage(libc::RUSAGE_SELF);
    let (csys, cuser) = rusage(libc::RUSAGE_CHILDREN);
    // hotkv has no main thread: the thread serving INFO stands in for it.
    let (tsys, tuser) = rusage(libc::RUSAGE_THREAD);
    fields!(o,
        "used_cpu_sys" => sys,
        "used_cpu_user" => user,
        "used_cpu_sys_children" => csys,
        "used_cpu_user_children" => cuser,
        "used_cpu_sys_main_thread" => tsys,
        "used_cpu_user_main_thread" => tuser,
    );
}

fn commandstats(srv: &Server, o: &mut String) {
    for c in srv.registry.all() {
        let t = srv.stats.command(c.id);
        if t.calls == 0 && t.failed == 0 && t.rejected == 0 {
            continue;
        }
        let per_call = if t.calls == 0 { 0.0 } else { t.usec as f32 / t.calls as f32 };
        let _ = write!(
            o,
            "cmdstat_{}:calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}\r\n",
            safe(&c.full_name),
            t.calls,
            t.usec,
            t.rejected,
            t.failed
        );
    }
}

fn errorstats(srv: &Server, o: &mut String) {
    for (code, count) in srv.stats.errors() {
        let _ = write!(o, "errorstat_{}:count={count}\r\n", safe(&code));
    }
}

/// A percentile as Valkey prints it: `%f` with trailing zeros (and dot) trimmed.
fn percentile_label(p: f64) -> String {
    let s = format!("{p:.6}");
    let s = s.trim_end_matches('0');
    s.trim_end_matches('.').to_string()
}

fn latencystats(srv: &Server, o: &mut String) {
    let rt = srv.rt.load();
    if !rt.latency_tracking {
        return;
    }
    for c in srv.registry.all() {
        let Some(values) = srv.stats.percentiles(c.id, &rt.latency_percentiles) else { continue };
        let parts: Vec<String> = rt
            .latency_percentiles
            .iter()
            .zip(values)
            .map(|(p, v)| format!("p{}={v:.3}", percentile_label(*p)))
            .collect();
        let _ = write!(o, "latency_percentiles_usec_{}:{}\r\n", safe(&c.full_name), parts.join(","));
    }
}

/// Valkey 9.1's certificate fields, then hotkv's: what is loaded, whether the files on disk
/// still match it, the last reload, and the handshake and connection counters.
fn tls(srv: &Server, o: &mut String) {
    for (name, value) in srv.tls.info().fields() {
        let _ = write!(o, "{name}:{}\r\n", safe(&value));
    }
}

fn keyspace(srv: &Server, o: &mut String) {
    for i in 0..srv.ks.databases() {
        let Some(db) = srv.ks.db_if_used(i) else { continue };
        let (keys, expires) = (db.len(), db.volatile());
        if keys > 0 || expires > 0 {
            let _ = write!(o, "db{i}:keys={keys},expires={expires},avg_ttl=0\r\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testutil::{client, server};

    fn sel(args: &[&str]) -> Selection {
        Selection::parse(args.iter().map(|a| a.as_bytes()))
    }

    #[test]
    fn selection_follows_valkey() {
        assert_eq!(sel(&[]).names, DEFAULT_SECTIONS);
        assert!(!sel(&[]).wants("commandstats"));
        let s = sel(&["CPU", "cpu", "Memory"]);
        assert_eq!(s.names, ["cpu", "memory"]);
        assert!(s.wants("memory") && !s.wants("server"));
        let s = sel(&["everything"]);
        assert!(s.all && s.wants("commandstats") && s.wants("latencystats"));
        let s = sel(&["default", "commandstats"]);
        assert!(s.wants("keyspace") && s.wants("commandstats") && !s.wants("latencystats"));
    }

    #[test]
    fn sections_are_framed_like_valkey() {
        let srv = server();
        let text = generate(&srv, &sel(&[]));
        assert!(text.starts_with("# Server\r\nredis_version:7.2.4\r\nserver_name:hotkv\r\nhotkv_version:"));
        assert!(text.contains("\r\nredis_mode:standalone\r\n"));
        assert!(text.contains("\r\nmultiplexing_api:epoll\r\ngcc_version:0.0.0\r\n"));
        assert!(text.contains("\r\n\r\n# Clients\r\nconnected_clients:0\r\n"));
        assert!(text.contains("\r\nmem_allocator:jemalloc-5.3.0\r\n"));
        assert!(text.contains("\r\nloading:0\r\n"));
        assert!(text.contains("\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"));
        assert!(text.contains("\r\n\r\n# Modules\r\n\r\n# Errorstats\r\n"));
        assert!(text.ends_with("# Keyspace\r\n"), "{text}");
        assert!(!text.contains("db0:"));
        assert!(!text.contains("# Commandstats"));
        // Every line ends with CRLF: no bare LF.
        assert!(!text.replace("\r\n", "").contains('\n'));
        let replid = srv.repl.primary.replid();
        assert!(text.contains(&format!("master_replid:{replid}\r\n")) && replid.len() == 40);
        assert_eq!(generate(&srv, &sel(&["nosuchsection"])), "");
        assert_eq!(generate(&srv, &sel(&["cluster"])), "# Cluster\r\ncluster_enabled:0\r\n");
    }

    #[test]
    fn counters_reach_their_sections() {
        let srv = server();
        let mut c = client(&srv, 40000);
        assert_eq!(c.run(&srv, &["set", "k", "v"]), "+OK\r\n");
        c.run(&srv, &["set", "k"]);
        c.run(&srv, &["nosuchcommand"]);
        let text = generate(&srv, &sel(&["keyspace", "commandstats", "errorstats", "latencystats", "persistence"]));
        assert!(text.contains("# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n"), "{text}");
        assert!(text.contains("\r\ncmdstat_set:calls=1,usec="), "{text}");
        assert!(text.contains(",rejected_calls=1,failed_calls=0\r\n"), "{text}");
        assert!(text.contains("errorstat_ERR:count=2\r\n"), "{text}");
        assert!(text.contains("latency_percentiles_usec_set:p50="), "{text}");
        assert!(text.contains(",p99.9="), "{text}");
        assert!(text.contains("rdb_changes_since_last_save:1\r\n"), "{text}");
        c.run(&srv, &["client", "getname"]);
        let text = generate(&srv, &sel(&["commandstats"]));
        assert!(text.contains("cmdstat_client|getname:calls=1"), "{text}");
    }

    #[test]
    fn reply_is_verbatim_in_resp3() {
        let srv = server();
        let mut c = client(&srv, 40001);
        c.run(&srv, &["hello", "3"]);
        let r = c.run(&srv, &["info", "cluster"]);
        assert_eq!(r, "=34\r\ntxt:# Cluster\r\ncluster_enabled:0\r\n\r\n");
        assert_eq!(percentile_label(99.9), "99.9");
        assert_eq!(percentile_label(50.0), "50");
    }
}
