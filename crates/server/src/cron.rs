//! The server's periodic work (Valkey's `serverCron`), on its own thread so it never delays a
//! worker: memory figures, the active expire cycle, idle client timeouts, query and reply
//! buffer resizing, instantaneous metrics.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hotkv_engine::expire::{Cycle, CycleKind, ExpireCursor, active_expire_cycle, fast_cycle_budget, slow_cycle_budget};

use crate::server::{Server, unix_ms};

/// Starts the cron thread; it stops when the server shuts down.
pub fn spawn(srv: Arc<Server>) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("hotkv-cron".into())
        .spawn(move || run(&srv))
        .expect("spawning the cron thread at startup")
}

fn run(srv: &Arc<Server>) {
    let mut cursor = ExpireCursor::default();
    let mut last_sample = Instant::now();
    let mut last_second = Instant::now();
    let mut routing_seen = 0;
    let mut client_cursor = 0;
    while !srv.is_shutting_down() {
        // DEBUG SLEEP stops cron too, as it stops Valkey's event loop.
        srv.freeze.wait_blocking();
        let hz = srv.engine.load().hz.max(1);
        let period = Duration::from_micros(1_000_000 / u64::from(hz));
        // DEBUG PAUSE-CRON 1: no periodic work at all until it is turned back off.
        if srv.cron_paused.load(Ordering::Relaxed) {
            std::thread::sleep(period);
            continue;
        }
        let tick = Instant::now();
        srv.memory.refresh();
        crate::cluster::redirect_blocked(srv, &mut routing_seen);
        // CLIENT TRACKING's table back within `tracking-table-max-keys` (Valkey's serverCron).
        if srv.tracking.active() {
            srv.tracking.limit();
        }
        clients_cron(srv, &mut client_cursor, hz, unix_ms());
        if expiry_allowed(srv) {
            expire(
                srv,
                &mut cursor,
                CycleKind::Slow,
                slow_cycle_budget(period, srv.engine.load().active_expire_effort),
            );
        }
        if last_sample.elapsed() >= Duration::from_millis(100) {
            last_sample = Instant::now();
            let totals = [
                srv.stats.commands(),
                srv.stats.net_in(),
                srv.stats.net_out(),
                srv.stats.cron_cycles.load(Ordering::Relaxed),
                srv.stats.cron_usec.load(Ordering::Relaxed),
            ];
            srv.stats.samples.lock().record(unix_ms(), totals);
        }
        if last_second.elapsed() >= Duration::from_secs(1) {
            last_second = Instant::now();
            close_idle_clients(srv);
            srv.migrate.close_idle();
            crate::replication::cron(srv);
            crate::persistence::cron(srv);
            crate::aof::wire::cron(srv);
        }
        let spent = tick.elapsed();
        srv.stats.cron_cycles.fetch_add(1, Ordering::Relaxed);
        srv.stats.cron_usec.fetch_add(spent.as_micros() as u64, Ordering::Relaxed);
        wait_for_next_tick(srv, &mut cursor, tick + period.max(spent + Duration::from_millis(1)));
    }
}

/// Sleeps until `next_tick`, running fast expire cycles meanwhile while the slow cycle cannot
/// keep up, as Valkey's `beforeSleep` does between its cron ticks.
fn wait_for_next_tick(srv: &Server, cursor: &mut ExpireCursor, next_tick: Instant) {
    loop {
        let effort = srv.engine.load().active_expire_effort;
        let fast_at = cursor.fast_cycle_at(effort).filter(|&at| at < next_tick && expiry_allowed(srv));
        let Some(at) = fast_at else {
            std::thread::sleep(next_tick.saturating_duration_since(Instant::now()));
            return;
        };
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        if srv.is_shutting_down() {
            return;
        }
        srv.freeze.wait_blocking();
        expire(srv, cursor, CycleKind::Fast, fast_cycle_budget(effort));
    }
}

/// Whether the active expire cycle may run now. DEBUG SET-ACTIVE-EXPIRE 0 leaves expired keys
/// to lazy expiry, as in Valkey. Neither does a CLIENT PAUSE, which holds the dataset still,
/// nor a load from the files: Valkey's cron does not run then, and an AOF replays commands on
/// keys whose TTL passed (an RPUSH after a past PEXPIREAT appends to the list).
fn expiry_allowed(srv: &Server) -> bool {
    srv.active_expire.load(Ordering::Relaxed) && !srv.pause.holds_dataset(unix_ms()) && !srv.persist.loading()
}

/// Runs one active expire cycle of `kind` for at most `budget`, and the writable replica's
/// own keys with a TTL after a slow one.
fn expire(srv: &Server, cursor: &mut ExpireCursor, kind: CycleKind, budget: Duration) {
    let cfg = srv.engine.load();
    let start = Instant::now();
    // Expired keys announce themselves, abort WATCHes and may make blocked clients' keys ready.
    let events = crate::events::CmdEvents::new(srv, srv.rt.load().notify);
    let cycle = Cycle {
        kind,
        now_ms: unix_ms(),
        deadline: start + budget,
        effort: cfg.active_expire_effort,
        replica: cfg.replica,
        lazy: cfg.lazy_expire,
    };
    let st = active_expire_cycle(&srv.ks, cursor, &cycle, &events);
    srv.stats.active_expired.fetch_add(st.expired, Ordering::Relaxed);
    srv.stats.active_expired_fields.fetch_add(st.expired_fields, Ordering::Relaxed);
    if cfg.replica && kind == CycleKind::Slow {
        let own = srv.repl.take_own_keys();
        if !own.is_empty() {
            let (n, keep) =
                hotkv_engine::expire::expire_replica_keys(&srv.ks, own, unix_ms(), cfg.lazy_expire, &events);
            srv.stats.active_expired.fetch_add(n, Ordering::Relaxed);
            srv.repl.keep_own_keys(keep);
        }
    }
    if st.time_cap_reached {
        srv.stats.expire_cap_reached.fetch_add(1, Ordering::Relaxed);
    }
    srv.stats.set_expired_stale_perc(cursor.stale_perc());
    let elapsed = start.elapsed();
    srv.stats.expire_cycle_us.fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    let ms = elapsed.as_millis() as u64;
    let threshold = srv.rt.load().latency_threshold;
    if threshold > 0 && ms >= threshold {
        srv.latency.lock().add("expire-cycle", unix_ms() / 1000, ms);
    }
}

/// Visits the clients due this tick, as Valkey's `clientsCron`: every client about once a
/// second (each `hz`th of them per tick, at least [`MIN_CLIENT_VISITS`]), round-robin from
/// `cursor`. Each visit resizes the client's query and reply buffers and closes it if its
/// output stayed over its soft limit too long (with no traffic, nothing else would look).
fn clients_cron(srv: &Server, cursor: &mut u64, hz: u32, now_ms: i64) {
    let rt = srv.rt.load();
    let visits = (srv.clients.len() / hz.max(1) as usize).max(MIN_CLIENT_VISITS);
    *cursor = srv.clients.visit_from(*cursor, visits, |c| {
        crate::obuf_limit::cron_visit(srv, c, &rt);
        let idle_secs = now_ms / 1000 - c.last_interaction.load(Ordering::Relaxed) / 1000;
        if c.query_buf.cron(idle_secs).is_some() {
            c.inbox.ring();
        }
        crate::reply_buffer::visit(srv, c, now_ms);
    });
}

/// Most clients visited per cron tick besides a share of all: Valkey's
/// `CLIENTS_CRON_MIN_ITERATIONS`, so a handful of clients are each visited every tick.
const MIN_CLIENT_VISITS: usize = 5;

/// Closes clients idle for more than `timeout` seconds (not MONITOR clients, as Valkey).
fn close_idle_clients(srv: &Server) {
    let timeout = srv.rt.load().timeout;
    if timeout == 0 {
        return;
    }
    let now = unix_ms();
    for c in srv.clients.snapshot() {
        let idle_ms = now - c.last_interaction.load(Ordering::Relaxed);
        let exempt = c.flags.load(Ordering::Relaxed)
            & (crate::session::flag::MONITOR | crate::session::flag::BLOCKED | crate::session::flag::PUBSUB)
            != 0;
        if !exempt && idle_ms > (timeout * 1000) as i64 {
            tracing::debug!("Closing idle client");
            c.kill();
        }
    }
}
