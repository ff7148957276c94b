//! The `INFO replication` section, field for field as Valkey 8.0's `genValkeyInfoString`.

use std::fmt::Write as _;

use tokio::time::Instant;

use crate::primary::Primary;
use crate::replica::{LinkState, LinkStatus};

/// Facts INFO prints that belong to the server's configuration or other subsystems.
#[derive(Debug, Clone)]
pub struct InfoExtra {
    /// `replica-priority` (`slave_priority`).
    pub replica_priority: u32,
    /// `replica-read-only` (`slave_read_only`).
    pub replica_read_only: bool,
    /// `replica-announced`.
    pub replica_announced: bool,
    /// `master_failover_state`: `no-failover`, `waiting-for-sync` or `failover-in-progress`.
    pub failover_state: &'static str,
}

impl Default for InfoExtra {
    /// Valkey's defaults.
    fn default() -> Self {
        InfoExtra {
            replica_priority: 100,
            replica_read_only: true,
            replica_announced: true,
            failover_state: "no-failover",
        }
    }
}

/// Appends the `# Replication` section (with `\r\n` line endings, without a trailing blank
/// line) to `out`. `link` is the replica link's status when this node is a replica.
pub fn render_info(out: &mut String, primary: &Primary, link: Option<&LinkStatus>, extra: &InfoExtra) {
    let now = Instant::now();
    out.push_str("# Replication\r\n");
    let _ = write!(out, "role:{}\r\n", if link.is_some() { "slave" } else { "master" });
    if let Some(l) = link {
        replica_fields(out, primary, l, extra, now);
    }
    let replicas = primary.replicas();
    let _ = write!(out, "connected_slaves:{}\r\n", replicas.len());
    let s = primary.settings();
    if s.min_replicas_to_write > 0 && s.min_replicas_max_lag > 0 {
        let _ = write!(out, "min_slaves_good_slaves:{}\r\n", primary.good_replicas());
    }
    for (i, r) in replicas.iter().enumerate() {
        let _ = write!(
            out,
            "slave{i}:ip={},port={},state={},offset={},lag={},type=replica\r\n",
            r.ip,
            r.port,
            r.state.as_str(),
            r.ack_offset,
            r.lag
        );
    }
    let (replid2, second) = primary.replid2();
    let (first, histlen) = primary.backlog_window();
    // Dual-channel replication is not implemented: nobody ever waits for a PSYNC.
    out.push_str("replicas_waiting_psync:0\r\n");
    let _ = write!(out, "master_failover_state:{}\r\n", extra.failover_state);
    let _ = write!(out, "master_replid:{}\r\n", primary.replid());
    let _ = write!(out, "master_replid2:{replid2}\r\n");
    let _ = write!(out, "master_repl_offset:{}\r\n", primary.offset());
    let _ = write!(out, "second_repl_offset:{second}\r\n");
    let _ = write!(out, "repl_backlog_active:{}\r\n", u8::from(primary.backlog_active()));
    let _ = write!(out, "repl_backlog_size:{}\r\n", s.backlog_size);
    let _ = write!(out, "repl_backlog_first_byte_offset:{first}\r\n");
    let _ = write!(out, "repl_backlog_histlen:{histlen}\r\n");
}

fn replica_fields(out: &mut String, primary: &Primary, l: &LinkStatus, extra: &InfoExtra, now: Instant) {
    let up = l.state == LinkState::Connected;
    // Before the first sync Valkey shows the offsets of the primary it caches from itself.
    let offset = l.offset.unwrap_or_else(|| primary.offset());
    let read_offset = if l.offset.is_some() { l.read_offset } else { offset };
    let _ = write!(out, "master_host:{}\r\n", l.host);
    let _ = write!(out, "master_port:{}\r\n", l.port);
    let _ = write!(out, "master_link_status:{}\r\n", if up { "up" } else { "down" });
    let last_io = match (up, l.last_io) {
        (true, Some(t)) => secs(now, t) as i64,
        _ => -1,
    };
    let _ = write!(out, "master_last_io_seconds_ago:{last_io}\r\n");
    let transfer = l.state == LinkState::Transfer;
    let _ = write!(out, "master_sync_in_progress:{}\r\n", u8::from(transfer));
    let _ = write!(out, "slave_read_repl_offset:{read_offset}\r\n");
    let _ = write!(out, "slave_repl_offset:{offset}\r\n");
    // Dual-channel replication's local buffer: never used here.
    out.push_str("replicas_repl_buffer_size:0\r\n");
    out.push_str("replicas_repl_buffer_peak:0\r\n");
    if transfer {
        let total = l.transfer_size as i64;
        let read = l.transfer_read as i64;
        let perc = if total > 0 { read as f64 / total as f64 * 100.0 } else { 0.0 };
        let _ = write!(out, "master_sync_total_bytes:{total}\r\n");
        let _ = write!(out, "master_sync_read_bytes:{read}\r\n");
        let _ = write!(out, "master_sync_left_bytes:{}\r\n", total - read);
        let _ = write!(out, "master_sync_perc:{perc:.2}\r\n");
        let last = l.transfer_last_io.map_or(0, |t| secs(now, t));
        let _ = write!(out, "master_sync_last_io_seconds_ago:{last}\r\n");
    }
    if !up {
        let down = l.down_since.map_or(-1, |t| secs(now, t) as i64);
        let _ = write!(out, "master_link_down_since_seconds:{down}\r\n");
    }
    let _ = write!(out, "slave_priority:{}\r\n", extra.replica_priority);
    let _ = write!(out, "slave_read_only:{}\r\n", u8::from(extra.replica_read_only));
    let _ = write!(out, "replica_announced:{}\r\n", u8::from(extra.replica_announced));
}

fn secs(now: Instant, then: Instant) -> u64 {
    now.saturating_duration_since(then).as_secs()
}
