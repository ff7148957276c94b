//! Shutting down on SHUTDOWN, SIGTERM or SIGINT, as Valkey 8's `prepareForShutdown` and
//! `finishShutdown`:
//!
//! 1. A primary whose replicas have not all acknowledged its replication offset pauses writes,
//!    asks them for an ACK and waits, up to `shutdown-timeout` seconds, for every one to catch
//!    up (`SHUTDOWN NOW`, or `shutdown-timeout 0`, skips the wait). INFO shows
//!    `shutdown_in_milliseconds` meanwhile, and the SHUTDOWN callers count as blocked clients.
//! 2. Then it logs the replicas that are still behind, refuses to exit while the first AOF
//!    base after `appendonly yes` is still being written (unless FORCE), and makes the final
//!    save (whose failure, without FORCE, keeps the server running).
//! 3. On success the process exits and no caller gets a reply; on failure, or on
//!    `SHUTDOWN ABORT` during the wait, writes resume and every caller gets
//!    `-ERR Errors trying to SHUTDOWN. Check logs.`.
//!
//! A second SHUTDOWN during the wait joins the first (its modifiers are ignored, as in
//! Valkey). Nothing blocks a thread: the wait is a task, and callers await its outcome.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::table as t;
use crate::server::{Server, unix_ms};

/// How a shutdown saves and waits: SHUTDOWN's modifiers, or the `shutdown-on-sigterm` /
/// `shutdown-on-sigint` flags.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Opts {
    /// NOSAVE: no final save even with save rules.
    pub nosave: bool,
    /// SAVE: a final save even without save rules.
    pub save: bool,
    /// NOW: do not wait for lagging replicas.
    pub now: bool,
    /// FORCE: exit even if the final save, or the first AOF base, failed.
    pub force: bool,
}

impl Opts {
    /// The value of `shutdown-on-sigterm` / `shutdown-on-sigint`: `default` or some of `save`,
    /// `nosave`, `now`, `force` (the config table has checked the words).
    pub fn from_config(words: &str) -> Opts {
        let mut o = Opts::default();
        for w in words.split_ascii_whitespace() {
            match w.to_ascii_lowercase().as_str() {
                "save" => o.save = true,
                "nosave" => o.nosave = true,
                "now" => o.now = true,
                "force" => o.force = true,
                _ => {}
            }
        }
        o
    }
}

/// The node's shutdown in progress, if any.
#[derive(Default)]
pub struct Coordinator {
    state: Mutex<Option<Pending>>,
    next_id: AtomicU64,
}

struct Pending {
    /// Told apart from a later shutdown by the driver task.
    id: u64,
    /// While waiting for replicas: the unix ms it gives up at (Valkey's `shutdown_mstime`);
    /// `None` once it finishes (saving, exiting).
    deadline_ms: Option<i64>,
    /// `Some(true)` once the server exits, `Some(false)` when the shutdown failed or was
    /// aborted; every caller waits on it.
    outcome: watch::Sender<Option<bool>>,
}

impl Coordinator {
    /// Milliseconds left of the wait for replicas (INFO's `shutdown_in_milliseconds`), while
    /// one runs.
    pub fn remaining_ms(&self, now_ms: i64) -> Option<i64> {
        self.state.lock().as_ref().and_then(|p| p.deadline_ms).map(|d| d - now_ms)
    }

    /// Whether a shutdown was started and has not failed or been aborted.
    pub fn in_progress(&self) -> bool {
        self.state.lock().is_some()
    }
}

/// Starts a shutdown, or joins the one in progress. The returned future resolves to `true`
/// when the server is exiting and `false` when the shutdown failed or was aborted; dropping
/// it does not stop the shutdown. `client` is the caller's CLIENT LIST line, for the log.
pub fn request(
    srv: &Arc<Server>,
    opts: Opts,
    client: Option<String>,
) -> impl std::future::Future<Output = bool> + Send + 'static {
    let mut rx = {
        let co = &srv.shutdown_wait;
        let mut st = co.state.lock();
        match &*st {
            Some(p) => p.outcome.subscribe(),
            None => {
                let (outcome, rx) = watch::channel(None);
                let id = co.next_id.fetch_add(1, Ordering::Relaxed);
                // The wait for replicas starts here, as Valkey's prepareForShutdown starts it
                // before the caller blocks: whoever sees the caller blocked sees the
                // deadline in INFO and writes paused, not only once the task has run.
                let timeout_s = srv.settings.load().int(t::SHUTDOWN_TIMEOUT).max(0);
                let deadline =
                    (!opts.now && timeout_s != 0 && !replicas_caught_up(srv)).then(|| unix_ms() + timeout_s * 1000);
                *st = Some(Pending { id, deadline_ms: deadline, outcome });
                if deadline.is_some() {
                    srv.pause.pause_for_shutdown(unix_ms());
                }
                tokio::spawn(drive(srv.clone(), id, opts, client, deadline));
                rx
            }
        }
    };
    async move { rx.wait_for(Option::is_some).await.map(|v| *v == Some(true)).unwrap_or(false) }
}

/// SHUTDOWN ABORT: cancels a shutdown that waits for its replicas (Valkey's `abortShutdown`);
/// `false` when there is none (a shutdown that is already saving cannot be called back).
pub fn abort(srv: &Server) -> bool {
    let mut st = srv.shutdown_wait.state.lock();
    if st.as_ref().is_none_or(|p| p.deadline_ms.is_none()) {
        return false;
    }
    let pending = st.take();
    drop(st);
    cancel(srv, pending);
    info!("Shutdown manually aborted.");
    true
}

/// The shutdown `id` from start to end: the wait for replicas, then [`finish`].
async fn drive(srv: Arc<Server>, id: u64, mut opts: Opts, client: Option<String>, deadline: Option<i64>) {
    // A half-loaded dataset must not replace the file it is being loaded from.
    if srv.persist.loading() {
        opts.save = false;
        opts.nosave = true;
    }
    match &client {
        Some(c) => info!("User requested shutdown... (user request from '{c}')"),
        None => info!("User requested shutdown..."),
    }
    if let Some(deadline) = deadline {
        // Aborted before this task ran: the abort has answered the callers.
        if !set_deadline(&srv, id, Some(deadline)) {
            return;
        }
        // From here the offset only grows by what the replicas need (GETACK, PING).
        srv.pause.drain_writes(&srv.ks);
        info!("Waiting for replicas before shutting down.");
        while !replicas_caught_up(&srv) {
            let left = deadline - unix_ms();
            if left <= 0 {
                break;
            }
            if !set_deadline(&srv, id, Some(deadline)) {
                return;
            }
            // Asks for ACKs (once per offset) and wakes on the next one that comes.
            let primary = &srv.repl.primary;
            let wait = Duration::from_millis(left as u64).min(CHECK_EVERY);
            primary.wait_for(primary.offset(), primary.replicas().len().max(1), Some(wait)).await;
        }
        // Aborted while this task was waking up: the abort has answered the callers.
        if !set_deadline(&srv, id, None) {
            return;
        }
    }
    let ok = finish(&srv, opts).await;
    let mut st = srv.shutdown_wait.state.lock();
    if st.as_ref().is_none_or(|p| p.id != id) {
        return;
    }
    if ok {
        // The state stays: a SHUTDOWN from now on waits for the exit with the others.
        if let Some(p) = st.as_ref() {
            p.outcome.send_replace(Some(true));
        }
        drop(st);
        srv.request_shutdown();
    } else {
        let pending = st.take();
        drop(st);
        cancel(&srv, pending);
    }
}

/// Valkey's `finishShutdown` up to the exit: the log of lagging replicas, the AOF check and
/// the final save. `false` when the server must keep running.
async fn finish(srv: &Arc<Server>, opts: Opts) -> bool {
    log_replicas(srv);
    // A script stopped in the debugger holds its keys' locks, which the final save needs:
    // its client is closed, so the script runs to its end (Valkey kills its forked sessions).
    for c in srv.clients.snapshot() {
        if c.debugging.load(std::sync::atomic::Ordering::Relaxed) {
            info!("Killing debugging session of client id={}", c.id);
            c.kill();
        }
    }
    match crate::aof::wire::rewrite_in_progress(srv) {
        Some(true) if opts.force => warn!("Writing initial AOF. Exit anyway."),
        Some(true) => {
            warn!("Writing initial AOF, can't exit.");
            return failed();
        }
        // The rewrite thread ends with the process; the AOF on disk already holds everything.
        Some(false) => warn!("There is a child rewriting the AOF. Killing it!"),
        None => {}
    }
    if crate::persistence::final_save(srv, opts.nosave, opts.save, opts.force).await.is_err() {
        return failed();
    }
    true
}

fn failed() -> bool {
    warn!("Errors trying to shut down the server. Check the logs for more information.");
    false
}

/// Valkey's lines about replicas at shutdown: one per replica behind the offset, then the
/// count of those in sync.
fn log_replicas(srv: &Server) {
    let primary = &srv.repl.primary;
    let offset = primary.offset();
    let replicas = primary.replicas();
    let mut lagging = 0;
    for r in &replicas {
        if r.ack_offset >= offset {
            continue;
        }
        lagging += 1;
        info!(
            "Lagging replica {} reported offset {} behind master, lag={}, state={}.",
            r.name(),
            offset - r.ack_offset,
            r.lag,
            r.state.as_str()
        );
    }
    if !replicas.is_empty() {
        info!("{} of {} replicas are in sync when shutting down.", replicas.len() - lagging, replicas.len());
    }
}

/// Whether every attached replica acknowledged the whole stream (Valkey's
/// `isReadyToShutdown`).
fn replicas_caught_up(srv: &Server) -> bool {
    let primary = &srv.repl.primary;
    let offset = primary.offset();
    primary.replicas().iter().all(|r| r.ack_offset >= offset)
}

/// Sets the deadline of shutdown `id`; `false` when it is no longer the one in progress.
fn set_deadline(srv: &Server, id: u64, deadline_ms: Option<i64>) -> bool {
    let mut st = srv.shutdown_wait.state.lock();
    match st.as_mut() {
        Some(p) if p.id == id => {
            p.deadline_ms = deadline_ms;
            true
        }
        _ => false,
    }
}

/// Valkey's `cancelShutdown`: writes resume and the callers get their error.
fn cancel(srv: &Server, pending: Option<Pending>) {
    srv.pause.end_shutdown_pause(unix_ms());
    if let Some(p) = pending {
        p.outcome.send_replace(Some(false));
    }
}

/// How long one wait for acknowledgements lasts before the state is looked at again (the
/// deadline, an abort).
const CHECK_EVERY: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn server() -> Arc<Server> {
        let mut s = crate::default_settings();
        s.set(t::SAVE, crate::config::value::Value::Ints(Vec::new()));
        Server::new(s, None, Registry::new(crate::cmd::commands())).into_arc()
    }

    #[test]
    fn config_flags_become_options() {
        assert_eq!(Opts::from_config("default"), Opts::default());
        let o = Opts::from_config("nosave now");
        assert!(o.nosave && o.now && !o.save && !o.force);
        assert!(Opts::from_config("SAVE force").force);
    }

    #[tokio::test]
    async fn without_replicas_the_server_exits_at_once() {
        let srv = server();
        assert!(!abort(&srv), "nothing to abort");
        let done = request(&srv, Opts::default(), None);
        assert!(tokio::time::timeout(Duration::from_secs(10), done).await.expect("no wait"));
        assert!(srv.is_shutting_down());
        assert_eq!(srv.shutdown_wait.remaining_ms(unix_ms()), None, "no wait for replicas");
        // A later SHUTDOWN waits for the same exit.
        let again = request(&srv, Opts { now: true, ..Opts::default() }, None);
        assert!(tokio::time::timeout(Duration::from_secs(10), again).await.unwrap());
    }

    #[tokio::test]
    async fn abort_answers_every_caller_and_resumes_writes() {
        let srv = server();
        // A shutdown waiting for replicas, as `drive` leaves it.
        let (outcome, _) = watch::channel(None);
        *srv.shutdown_wait.state.lock() = Some(Pending { id: 7, deadline_ms: Some(unix_ms() + 60_000), outcome });
        srv.pause.pause_for_shutdown(unix_ms());
        let first = request(&srv, Opts::default(), None);
        let second = request(&srv, Opts { nosave: true, ..Opts::default() }, None);
        assert!(srv.shutdown_wait.remaining_ms(unix_ms()).is_some_and(|ms| ms > 0));
        assert!(abort(&srv));
        assert!(!tokio::time::timeout(Duration::from_secs(10), first).await.unwrap());
        assert!(!tokio::time::timeout(Duration::from_secs(10), second).await.unwrap());
        assert_eq!(srv.pause.mode(unix_ms()), crate::pause::Mode::None);
        assert!(!srv.shutdown_wait.in_progress() && !srv.is_shutting_down());
        assert!(!abort(&srv), "aborted once");
    }
}
