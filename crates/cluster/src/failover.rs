//! Failover, as Valkey 8's `cluster_legacy.c` runs it: a replica whose primary is FAIL waits
//! a delay that grows with how far behind the other replicas it is, asks every primary for its
//! vote in a new epoch, and once a majority of the primaries that serve slots agreed, takes its
//! primary's slots with that epoch. Primaries vote once per epoch. A manual failover (CLUSTER
//! FAILOVER) first has the primary pause its clients' writes and announce its final offset, so
//! that the replica takes over with every acknowledged write; FORCE skips the primary, TAKEOVER
//! the vote too.
//!
//! This module is a part of [`ClusterState`] (its fields are the state's); what it needs from
//! replication, which this crate may not name, comes through [`ReplicationHooks`].

use tracing::{info, warn};

use super::{ClusterState, CmdError};
use crate::node::{NodeFlags, NodeId};
use crate::wire::{Body, Header, Kind, Message};

/// What the cluster reads from, and asks of, the node's replication. The server implements it
/// (the cluster crate does not depend on the replication crate) and installs it with
/// [`ClusterState::set_replication`].
pub trait ReplicationHooks: Send + Sync {
    /// This node's replication offset: a primary's own stream, a replica's processed offset of
    /// its primary's stream. Every bus header carries it; replicas rank themselves by it.
    fn offset(&self) -> u64;

    /// How old, in ms, a replica's copy of its primary's data may be (Valkey's `data_age`):
    /// the time since its primary last sent anything while the link is up, since the link
    /// went down otherwise, and `i64::MAX` when the link never came up. Not called on a
    /// primary.
    fn data_age_ms(&self) -> i64;

    /// Holds back clients' writes until `until_ms` (unix ms): a primary in a manual failover.
    /// Called by the bus, never with the node table locked. Returns once no write that began
    /// before the pause can still reach the replication stream, so the offset read next is
    /// final.
    fn pause_writes(&self, until_ms: i64);

    /// Whether this node, as a replica, is loading its primary's full sync.
    fn loading(&self) -> bool {
        false
    }

    /// This node was made a replica of a primary of another shard (a slot migration took its
    /// shard's last slot, CLUSTER REPLICATE, a move to an orphaned primary): its data has no
    /// part in the new primary's stream, so it must not try to continue it, and its offset is
    /// 0 until a full sync from that primary completes (Valkey's `full_sync_required`). Called
    /// with the node table locked, before the next header is built.
    fn forget_history(&self) {}

    /// Ends the pause [`ReplicationHooks::pause_writes`] began (another pause, e.g. a CLIENT
    /// PAUSE, stays).
    fn unpause_writes(&self);

    /// Keys this node holds in `slot`.
    fn keys_in_slot(&self, _slot: u16) -> usize {
        0
    }

    /// Deletes every key this node holds in `slot`, each propagated as a DEL (Valkey's
    /// `delKeysInSlot`), for a slot another node took. Called by the bus, never with the node
    /// table locked.
    fn delete_keys_in_slot(&self, _slot: u16) {}
}

/// No replication behind the node table: offset 0, data always fresh, no clients to pause.
/// What a state starts with, until the server installs its hooks.
pub struct NoReplication;

impl ReplicationHooks for NoReplication {
    fn offset(&self) -> u64 {
        0
    }

    fn data_age_ms(&self) -> i64 {
        0
    }

    fn pause_writes(&self, _until_ms: i64) {}

    fn unpause_writes(&self) {}
}

/// Where a message the state queued goes (see [`ClusterState::take_outgoing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// On the link to this node.
    Node(NodeId),
    /// On the link to every node.
    All,
}

/// A change of the client write pause for the bus to make (see
/// [`ClusterState::take_pause_change`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseChange {
    /// Pause writes until this time (unix ms).
    Pause {
        /// When the pause ends at the latest.
        until_ms: i64,
    },
    /// End the failover's pause.
    Unpause,
}

/// CLUSTER FAILOVER's option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailoverMode {
    /// No option: the primary pauses its writes and the replica catches up before the vote.
    Default,
    /// FORCE: a vote at once, without the primary.
    Force,
    /// TAKEOVER: no vote: a new epoch of this node's own, and the slots.
    Takeover,
}

/// Whom a node that becomes a replica joins (Valkey's `clusterSetPrimary` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Join {
    /// Its own shard's new primary, after a failover: slot states and history carry on.
    SameShard,
    /// Another shard's primary: open slots are closed and a full sync is needed.
    OtherShard,
}

/// A replica's election (Valkey's `failover_auth_*`).
#[derive(Debug, Default)]
pub(super) struct Election {
    /// When the election starts, or started (unix ms); 0: never scheduled.
    auth_time_ms: i64,
    /// The primaries that voted for this replica in `epoch`.
    votes: Vec<NodeId>,
    /// Whether the vote requests went out.
    sent: bool,
    /// This replica's rank when the election was scheduled.
    rank: usize,
    /// The epoch the election runs in.
    epoch: u64,
    /// Why the last attempt could not go on, and when that was logged (unix ms).
    cant: Option<CantFailover>,
    cant_logged_ms: i64,
}

/// A manual failover (Valkey's `mf_*`), on the replica that asked for it or on its primary.
#[derive(Debug, Default)]
pub(super) struct Manual {
    /// When it gives up (unix ms); 0: none under way.
    end_ms: i64,
    /// On the replica: its primary's paused offset is reached (or FORCE): the vote may start.
    can_start: bool,
    /// On the primary: the replica it paused its writes for.
    replica: Option<NodeId>,
    /// On the replica: the offset its paused primary announced last.
    primary_offset: Option<u64>,
    /// On the primary: from when its offset is final (the state's clock), `i64::MAX` until
    /// the server confirmed the pause ([`ClusterState::pause_applied`]).
    paused_from_ms: i64,
}

/// Why a replica cannot fail over yet (Valkey's `CLUSTER_CANT_FAILOVER_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CantFailover {
    DataAge,
    WaitingDelay,
    Expired,
    WaitingVotes,
}

impl CantFailover {
    /// Valkey's words for it.
    fn text(self) -> &'static str {
        match self {
            CantFailover::DataAge => {
                "Disconnected from primary for longer than allowed. Please check the \
                 'cluster-replica-validity-factor' configuration option."
            }
            CantFailover::WaitingDelay => "Waiting the delay before I can start a new failover.",
            CantFailover::Expired => "Failover attempt expired.",
            CantFailover::WaitingVotes => "Waiting for votes, but majority still not reached.",
        }
    }
}

impl ClusterState {
    /// Installs the server's view of replication (offsets, data age, the write pause).
    pub fn set_replication(&mut self, hooks: std::sync::Arc<dyn ReplicationHooks>) {
        self.repl = hooks;
    }

    /// The replication hooks in force (the bus calls their pause on the state's behalf).
    pub fn replication(&self) -> std::sync::Arc<dyn ReplicationHooks> {
        self.repl.clone()
    }

    /// CLUSTER FAILOVER [FORCE|TAKEOVER] on a replica, with Valkey's checks and errors.
    /// `client` names who asked, for the log (Valkey prints the client's CLIENT LIST line).
    pub fn failover(&mut self, mode: FailoverMode, client: &str, now: i64) -> Result<(), CmdError> {
        let me = self.myself();
        if me.is_primary() {
            return Err("You should send CLUSTER FAILOVER to a replica".into());
        }
        let Some(primary) = me.primary.and_then(|p| self.nodes.get(&p)).map(|e| &e.node) else {
            return Err("I'm a replica but my master is unknown to me".into());
        };
        if mode == FailoverMode::Default && (primary.flags.has(NodeFlags::FAIL) || !primary.link_connected) {
            return Err("Master is down or failed, please use CLUSTER FAILOVER FORCE".into());
        }
        let primary = primary.id;
        self.clock_ms = now;
        self.reset_manual_failover();
        self.manual.end_ms = now + MF_TIMEOUT_MS;
        match mode {
            FailoverMode::Takeover => {
                info!("Taking over the primary (user request from '{client}').");
                self.bump_epoch_without_consensus();
                self.replace_primary();
            }
            FailoverMode::Force => {
                info!("Forced failover user request accepted (user request from '{client}').");
                self.manual.can_start = true;
                self.handle_replica_failover(now);
            }
            FailoverMode::Default => {
                info!("Manual failover user request accepted (user request from '{client}').");
                let msg = self.message(Kind::MfStart, Body::Empty);
                self.outbox.push((Target::Node(primary), msg));
            }
        }
        self.dirty = true;
        Ok(())
    }

    /// Messages to send now: a PONG to every node after a change everyone must hear at once
    /// ([`ClusterState::take_announcements`]), vote requests, votes, MFSTART. The bus sends
    /// them after every tick, frame and CLUSTER command.
    pub fn take_outgoing(&mut self, now: i64) -> Vec<(Target, Message)> {
        let mut out: Vec<(Target, Message)> =
            self.take_announcements(now).into_iter().map(|(id, m)| (Target::Node(id), m)).collect();
        out.append(&mut self.outbox);
        out
    }

    /// A change of the client write pause that a manual failover asks for, if any. The bus
    /// makes it after the routing snapshot shows the change that caused it, so that writes
    /// released when this node stops being a primary are redirected, not accepted.
    pub fn take_pause_change(&mut self) -> Option<PauseChange> {
        self.pause_change.take()
    }

    /// The pause [`ClusterState::take_pause_change`] asked for is in force and drained (the
    /// hooks' `pause_writes` returned): from now on this primary's offset is final, and its
    /// pings say so (PAUSED).
    pub fn pause_applied(&mut self) {
        if self.manual.end_ms != 0 && self.manual.replica.is_some() {
            self.manual.paused_from_ms = self.clock_ms;
        }
    }

    /// Whether a manual failover is under way on this node (as the replica or the primary).
    pub fn manual_failover_in_progress(&self) -> bool {
        self.manual.end_ms != 0
    }

    /// The failover work of a tick (Valkey's `clusterCron` tail): give up a manual failover
    /// past its time; on a replica, move the manual failover and the election on.
    pub(super) fn failover_tick(&mut self, now: i64) {
        if self.manual.end_ms != 0 && self.manual.end_ms < now {
            warn!("Manual failover timed out.");
            self.reset_manual_failover();
        }
        if self.myself().is_primary() {
            return;
        }
        self.handle_manual_failover();
        self.handle_replica_failover(now);
        self.handle_replica_migration(now);
    }

    /// Whether failover work needs the 100 ms tick: a manual failover, or a failed primary
    /// this replica may replace.
    pub(super) fn failover_pending(&self) -> bool {
        let me = self.myself();
        self.manual.end_ms != 0
            || (!me.is_primary()
                && me.primary.and_then(|p| self.nodes.get(&p)).is_some_and(|p| p.node.flags.has(NodeFlags::FAIL)))
    }

    /// On a primary in a manual failover, the replica it paused its writes for.
    pub(super) fn paused_for(&self) -> Option<NodeId> {
        self.manual.replica.filter(|_| self.manual.end_ms != 0 && self.myself().is_primary())
    }

    /// The message flags of this node's headers: PAUSED on a primary whose writes have been
    /// paused for a manual failover for long enough that its offset is final.
    pub(super) fn msg_flags(&self) -> u8 {
        let paused = self.manual.end_ms != 0
            && self.manual.replica.is_some()
            && self.myself().is_primary()
            && self.clock_ms >= self.manual.paused_from_ms;
        let loading = !self.myself().is_primary() && self.repl.loading();
        (if paused { Header::PAUSED } else { 0 }) | (if loading { Header::LOADING } else { 0 })
    }

    /// Notes the replication offset a frame's header carries; on a replica in a manual
    /// failover, its paused primary's final offset.
    pub(super) fn note_offset(&mut self, h: &Header) {
        if let Some(e) = self.nodes.get_mut(&h.sender) {
            e.node.repl_offset = h.repl_offset;
            e.node.loading = h.msg_flags & Header::LOADING != 0;
        }
        let me = self.myself();
        let from_paused_primary = self.manual.end_ms != 0
            && !me.is_primary()
            && me.primary == Some(h.sender)
            && h.msg_flags & Header::PAUSED != 0;
        // The latest paused offset counts, not the first: a write that was already past the
        // pause when it began may still land after the first announcement.
        if from_paused_primary && self.manual.primary_offset != Some(h.repl_offset) {
            self.manual.primary_offset = Some(h.repl_offset);
            info!(
                offset = h.repl_offset,
                "Received replication offset for paused primary manual failover: {}", h.repl_offset
            );
            let now = self.clock_ms;
            self.handle_manual_failover();
            self.handle_replica_failover(now);
        }
    }

    /// A FAILOVER_AUTH_REQUEST from `requester`: the vote, if Valkey's rules allow it
    /// (`clusterSendFailoverAuthIfNeeded`). `force`: a manual failover, which primaries vote
    /// for although the requester's primary is not failed.
    pub(super) fn vote(&mut self, requester: NodeId, h: &Header, force: bool, now: i64) -> Option<Message> {
        let me = self.myself();
        if !me.is_primary() || me.slots.is_empty() {
            return None;
        }
        let epoch = self.current_epoch;
        let node = &self.nodes.get(&requester)?.node;
        let name = node.human_nodename.clone();
        if h.current_epoch < epoch {
            warn!(
                node_id = %requester,
                "Failover auth denied to {requester} ({name}): reqEpoch ({}) < curEpoch({epoch})", h.current_epoch
            );
            return None;
        }
        if self.last_vote_epoch == epoch {
            warn!(node_id = %requester, "Failover auth denied to {requester} ({name}): already voted for epoch {epoch}");
            return None;
        }
        let primary = node.primary.and_then(|p| self.nodes.get(&p)).map(|e| &e.node);
        let refusal = if node.is_primary() {
            Some("it is a primary node")
        } else if primary.is_none() {
            Some("I don't know its primary")
        } else if primary.is_some_and(|p| !p.flags.has(NodeFlags::FAIL)) && !force {
            Some("its primary is up")
        } else {
            None
        };
        if let Some(why) = refusal {
            warn!(
                node_id = %requester,
                "Failover auth denied to {requester} ({name}) for epoch {}: {why}", h.current_epoch
            );
            return None;
        }
        let primary = primary?.id;
        // Not twice for replicas of one primary within two node timeouts: not needed for
        // safety, but it keeps competing replicas from splitting the votes again and again.
        let voted = self.nodes.get(&primary).map_or(0, |e| e.voted_ms);
        let wait = self.cfg.node_timeout_ms * 2 - (now - voted);
        if wait > 0 {
            warn!(
                node_id = %requester,
                "Failover auth denied to {requester} {name}: can't vote about this primary before {wait} milliseconds"
            );
            return None;
        }
        // The claimed slots must not be held with a newer epoch than the request's: the
        // requester's view of its shard would be stale.
        for slot in h.slots.iter() {
            let held = self.owner(slot).map_or(0, |o| o.config_epoch);
            if held > h.config_epoch {
                warn!(
                    node_id = %requester,
                    "Failover auth denied to {requester} ({name}): slot {slot} epoch ({held}) > reqEpoch ({})",
                    h.config_epoch
                );
                return None;
            }
        }
        self.last_vote_epoch = epoch;
        if let Some(e) = self.nodes.get_mut(&primary) {
            e.voted_ms = now;
        }
        self.dirty = true;
        info!(node_id = %requester, epoch, "Failover auth granted to {requester} ({name}) for epoch {epoch}");
        Some(self.message(Kind::FailoverAuthAck, Body::Empty))
    }

    /// A FAILOVER_AUTH_ACK from `voter`, whose current epoch is `epoch`: counted when the voter
    /// serves slots and voted in this election, and the election looked at again at once.
    pub(super) fn count_vote(&mut self, voter: NodeId, epoch: u64, now: i64) {
        let voting = self.nodes.get(&voter).is_some_and(|e| e.node.is_primary() && !e.node.slots.is_empty());
        // A vote that arrives before this election's requests went out is from an older one.
        if !voting || !self.election.sent || epoch < self.election.epoch {
            return;
        }
        if !self.election.votes.contains(&voter) {
            self.election.votes.push(voter);
        }
        self.handle_replica_failover(now);
    }

    /// An MFSTART from `replica`: if it is one of this primary's replicas, pause writes and
    /// ping it with this node's offset until the failover ends. Returns the first ping.
    pub(super) fn manual_failover_requested(&mut self, replica: NodeId, now: i64) -> Option<Message> {
        let mine = self.nodes.get(&replica).is_some_and(|e| e.node.primary == Some(self.me));
        if !mine || !self.myself().is_primary() {
            return None;
        }
        self.reset_manual_failover();
        self.manual.end_ms = now + MF_TIMEOUT_MS;
        self.manual.replica = Some(replica);
        // Final only once the server says no write that began before the pause can still
        // reach the stream.
        self.manual.paused_from_ms = i64::MAX;
        self.pause_change = Some(PauseChange::Pause { until_ms: now + MF_TIMEOUT_MS * MF_PAUSE_MULT });
        let name = self.nodes.get(&replica).map(|e| e.node.human_nodename.clone()).unwrap_or_default();
        info!(node_id = %replica, "Manual failover requested by replica {replica} ({name}).");
        Some(self.gossip_message(Kind::Ping, Some(replica), now))
    }

    /// A replica of a primary with more working replicas than `cluster-migration-barrier`
    /// moves to a primary left without any (Valkey's `clusterHandleReplicaMigration`): among
    /// the replicas of the primaries with the most working replicas, the one with the
    /// smallest id moves, once the orphan has had no replica for five seconds (time for the
    /// replicas of a failed-over primary to announce their new primary).
    fn handle_replica_migration(&mut self, now: i64) {
        let me = self.myself();
        let Some(my_primary) = me.primary.filter(|_| !me.is_primary()) else { return };
        if !self.cfg.allow_replica_migration || !self.ok {
            return;
        }
        let working = |st: &ClusterState, p: NodeId, also_pfail: bool| st.working_replicas(p, also_pfail);
        let live_primaries: Vec<NodeId> = self
            .nodes
            .values()
            .map(|e| &e.node)
            .filter(|n| n.id != self.me && n.is_primary() && !n.flags.has(NodeFlags::FAIL))
            .filter(|n| n.flags.0 & (NodeFlags::NOADDR | NodeFlags::HANDSHAKE) == 0)
            .map(|n| n.id)
            .collect();
        let (mut max_replicas, mut mine, mut target) = (0, 0, None::<NodeId>);
        let mut orphans = Vec::new();
        for id in &live_primaries {
            let ok = working(self, *id, false);
            max_replicas = max_replicas.max(ok);
            if *id == my_primary {
                mine = ok;
            }
            let n = &self.nodes[id].node;
            if ok == 0 && n.flags.has(NodeFlags::MIGRATE_TO) {
                orphans.push(*id);
                if !n.slots.is_empty() && target.is_none_or(|t| *id < t) {
                    target = Some(*id);
                }
            }
        }
        // How long each primary has been an orphan.
        for e in self.nodes.values_mut() {
            if orphans.contains(&e.node.id) {
                if e.orphaned_ms == 0 {
                    e.orphaned_ms = now;
                }
            } else {
                e.orphaned_ms = 0;
            }
        }
        let Some(target) = target else { return };
        // Only a replica of one of the best-covered primaries, and only when that leaves its
        // primary with more than the barrier of working replicas.
        if max_replicas < 2 || mine != max_replicas || working(self, my_primary, true) <= self.cfg.migration_barrier {
            return;
        }
        let candidate = live_primaries
            .iter()
            .filter(|p| working(self, **p, false) == max_replicas)
            .flat_map(|p| self.nodes.values().filter(move |e| e.node.primary == Some(*p) && !e.node.is_primary()))
            .map(|e| e.node.id)
            .chain([self.me])
            .min();
        let since = self.nodes.get(&target).map_or(now, |e| e.orphaned_ms);
        if candidate != Some(self.me) || now - since <= REPLICA_MIGRATION_DELAY_MS {
            return;
        }
        let name = self.nodes.get(&target).map(|e| e.node.human_nodename.clone()).unwrap_or_default();
        info!(node_id = %target, "Migrating to orphaned primary {target} ({name}) in shard {target}");
        self.set_primary(target, Join::OtherShard);
    }

    /// Replicas of `primary` not FAIL (nor PFAIL, with `also_pfail`).
    fn working_replicas(&self, primary: NodeId, also_pfail: bool) -> usize {
        self.nodes
            .values()
            .map(|e| &e.node)
            .filter(|n| n.primary == Some(primary) && !n.is_primary() && !n.flags.has(NodeFlags::FAIL))
            .filter(|n| !(also_pfail && n.flags.has(NodeFlags::PFAIL)))
            .count()
    }

    /// This node becomes a replica of `primary` (Valkey's `clusterSetPrimary`): after a
    /// failover in its shard, or CLUSTER REPLICATE. Joining another shard drops migrating and
    /// importing states and this node's replication history (a failover keeps both). The
    /// server's replication follows the table.
    pub(super) fn set_primary(&mut self, primary: NodeId, join: Join) {
        let close_slots = join == Join::OtherShard;
        let me = self.myself_mut();
        me.flags.set(NodeFlags::PRIMARY | NodeFlags::MIGRATE_TO, false);
        me.flags.set(NodeFlags::REPLICA, true);
        me.primary = Some(primary);
        if let Some(p) = self.nodes.get_mut(&primary) {
            p.node.flags.set(NodeFlags::MIGRATE_TO, true);
        }
        if let Some(shard) = self.nodes.get(&primary).map(|p| p.node.shard_id) {
            self.myself_mut().shard_id = shard;
        }
        if close_slots {
            self.migrating.clear();
            self.importing.clear();
            // Before any header carries the old offset as if it counted the new stream: the
            // replicas of the new primary rank themselves against it.
            self.repl.forget_history();
        }
        self.reset_manual_failover();
        // An election scheduled for the old primary means nothing for the new one.
        self.election.auth_time_ms = 0;
        self.dirty = true;
        self.view_changed = true;
        self.update_state();
    }

    /// Ends any manual failover (Valkey's `resetManualFailover`); a primary that paused its
    /// writes for one has them resumed.
    pub(super) fn reset_manual_failover(&mut self) {
        if self.manual.replica.is_some() {
            self.pause_change = Some(PauseChange::Unpause);
        }
        self.manual = Manual::default();
    }

    /// On a replica in a manual failover: once its offset reached the one its paused primary
    /// announced, the vote may start (Valkey's `clusterHandleManualFailover`).
    fn handle_manual_failover(&mut self) {
        if self.manual.end_ms == 0 || self.manual.can_start {
            return;
        }
        let Some(offset) = self.manual.primary_offset else { return };
        if offset == self.repl.offset() {
            self.manual.can_start = true;
            info!(offset, "All primary replication stream processed, manual failover can start.");
        }
    }

    /// The replica's side of a failover, called every tick and whenever a vote arrives
    /// (Valkey's `clusterHandleReplicaFailover`): check that it may, schedule the election,
    /// start it, count the votes, and take over once a majority agreed.
    fn handle_replica_failover(&mut self, now: i64) {
        let manual = self.manual.end_ms != 0 && self.manual.can_start;
        let timeout = self.cfg.node_timeout_ms.max(1);
        // The time to collect the votes, and to wait before trying again.
        let auth_timeout = (timeout * 2).max(OPERATION_TIMEOUT_MS);
        let auth_retry = auth_timeout * 2;
        let me = self.myself();
        let primary_failed = match me.primary.and_then(|p| self.nodes.get(&p)) {
            Some(p) if !me.is_primary() => p.node.flags.has(NodeFlags::FAIL),
            _ => {
                self.election.cant = None;
                return;
            }
        };
        // Only a failed primary is replaced, and only by a replica allowed to; a manual
        // failover overrides both.
        if !manual && (!primary_failed || self.cfg.replica_no_failover) {
            self.election.cant = None;
            return;
        }
        // How stale this replica's data is, beyond the node timeout it took to find the
        // primary failed.
        let mut data_age = self.repl.data_age_ms();
        if data_age > timeout {
            data_age -= timeout;
        }
        let factor = i64::from(self.cfg.replica_validity_factor);
        let limit = self.cfg.repl_ping_period_ms.saturating_add(timeout.saturating_mul(factor));
        if factor != 0 && data_age > limit && !manual {
            self.log_cant_failover(CantFailover::DataAge, now);
            return;
        }
        let auth_age = now - self.election.auth_time_ms;
        if auth_age > auth_retry {
            self.schedule_election(now);
            // A manual failover starts at once (Valkey: CLUSTER_TODO_HANDLE_FAILOVER).
            if self.manual.end_ms != 0 {
                self.handle_replica_failover(now);
            }
            return;
        }
        // Other replicas may have told better offsets since: the delay follows the rank.
        if !self.election.sent && self.manual.end_ms == 0 {
            let rank = self.replica_rank();
            if rank != self.election.rank {
                let added = (rank as i64 - self.election.rank as i64) * 1000;
                self.election.auth_time_ms += added;
                self.election.rank = rank;
                info!("Replica rank updated to #{rank}, added {added} milliseconds of delay.");
            }
        }
        if now < self.election.auth_time_ms {
            self.log_cant_failover(CantFailover::WaitingDelay, now);
            return;
        }
        if auth_age > auth_timeout {
            self.log_cant_failover(CantFailover::Expired, now);
            return;
        }
        if !self.election.sent {
            self.current_epoch += 1;
            let epoch = self.current_epoch;
            self.election.epoch = epoch;
            info!(epoch, "Starting a failover election for epoch {epoch}.");
            let force = self.manual.end_ms != 0;
            let request = self.message(Kind::FailoverAuthRequest, Body::AuthRequest { force });
            self.outbox.push((Target::All, request));
            self.election.sent = true;
            self.dirty = true;
            return;
        }
        let needed = self.cluster_size() / 2 + 1;
        if self.election.votes.len() < needed {
            self.log_cant_failover(CantFailover::WaitingVotes, now);
            return;
        }
        info!("Failover election won: I'm the new primary.");
        let epoch = self.election.epoch;
        if self.myself().config_epoch < epoch {
            self.myself_mut().config_epoch = epoch;
            info!(epoch, "configEpoch set to {epoch} after successful failover");
        }
        self.replace_primary();
    }

    /// Schedules an election: half a second for the FAIL to spread, up to half a second more
    /// at random so that replicas do not all ask at once, and a second per replica of the
    /// same primary with a better offset; none for a manual failover.
    fn schedule_election(&mut self, now: i64) {
        let jitter = (self.random() % 500) as i64;
        let rank = if self.manual.end_ms != 0 { 0 } else { self.replica_rank() };
        let start = if self.manual.end_ms != 0 { now } else { now + 500 + jitter + rank as i64 * 1000 };
        self.election = Election { auth_time_ms: start, rank, ..Election::default() };
        let offset = self.repl.offset();
        info!(
            rank,
            offset,
            "Start of election delayed for {} milliseconds (rank #{rank}, offset {offset}).",
            start - now
        );
        // The other replicas of our primary learn our offset now, and rank themselves by it.
        let primary = self.myself().primary;
        let siblings: Vec<NodeId> = self
            .nodes
            .values()
            .filter(|e| e.node.id != self.me && e.node.link_connected)
            .filter(|e| !e.node.is_primary() && e.node.primary.is_some() && e.node.primary == primary)
            .map(|e| e.node.id)
            .collect();
        for id in siblings {
            let pong = self.gossip_message(Kind::Pong, Some(id), now);
            self.outbox.push((Target::Node(id), pong));
        }
    }

    /// How many other replicas of this node's primary (those that may fail over) have a better
    /// offset: a larger one, or the same and a smaller id (Valkey's `clusterGetReplicaRank`).
    fn replica_rank(&self) -> usize {
        let Some(primary) = self.myself().primary else { return 0 };
        let mine = self.repl.offset();
        self.nodes
            .values()
            .map(|e| &e.node)
            .filter(|n| n.id != self.me && !n.is_primary() && n.primary == Some(primary))
            .filter(|n| !n.flags.has(NodeFlags::NOFAILOVER))
            .filter(|n| n.repl_offset > mine || (n.repl_offset == mine && n.id < self.me))
            .count()
    }

    /// This replica's rank among its primary's replicas now.
    #[cfg(test)]
    pub(super) fn election_rank_now(&self) -> usize {
        self.replica_rank()
    }

    /// Logs why the replica cannot fail over, when the reason changed or a second passed
    /// (Valkey's `clusterLogCantFailover`).
    fn log_cant_failover(&mut self, why: CantFailover, now: i64) {
        if self.election.cant == Some(why) && now - self.election.cant_logged_ms < 1000 {
            return;
        }
        self.election.cant = Some(why);
        self.election.cant_logged_ms = now;
        info!("Currently unable to failover: {}", why.text());
        if matches!(why, CantFailover::WaitingVotes | CantFailover::Expired) {
            info!(
                "Needed quorum: {}. Number of votes received so far: {}",
                self.cluster_size() / 2 + 1,
                self.election.votes.len()
            );
        }
    }

    /// The end of every failover (Valkey's `clusterFailoverReplaceYourPrimary`): this replica
    /// becomes a primary, takes every slot of its old primary, and tells every node at once.
    /// Its config epoch was raised before (by the election, or TAKEOVER).
    fn replace_primary(&mut self) {
        let me = self.myself();
        let Some(old) = me.primary.filter(|_| !me.is_primary()) else { return };
        let slots: Vec<u16> = self.nodes.get(&old).map(|e| e.node.slots.iter().collect()).unwrap_or_default();
        let me = self.myself_mut();
        me.flags.set(NodeFlags::REPLICA, false);
        me.flags.set(NodeFlags::PRIMARY, true);
        me.primary = None;
        for slot in slots {
            self.set_owner(slot, Some(self.me));
        }
        self.dirty = true;
        self.view_changed = true;
        self.update_state();
        self.announce = true;
        self.reset_manual_failover();
    }

    /// A config epoch of this node's own without asking anyone, unless it has the largest
    /// already (Valkey's `clusterBumpConfigEpochWithoutConsensus`): CLUSTER FAILOVER TAKEOVER.
    fn bump_epoch_without_consensus(&mut self) {
        let max = self.nodes.values().map(|e| e.node.config_epoch).max().unwrap_or(0).max(self.current_epoch);
        let mine = self.myself().config_epoch;
        if mine != 0 && mine == max {
            return;
        }
        self.current_epoch += 1;
        let epoch = self.current_epoch;
        self.myself_mut().config_epoch = epoch;
        self.dirty = true;
        info!(epoch, "New configEpoch set to {epoch}");
    }

    /// A pseudo-random number (xorshift): the election jitter and the choice of gossip need no
    /// more.
    pub(crate) fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}

/// A seed for [`ClusterState::random`]: the node id and the clock, so that replicas of one
/// primary draw different delays.
pub(super) fn seed(id: &NodeId) -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut x = 0xcbf2_9ce4_8422_2325u64 ^ nanos;
    for b in id.as_bytes() {
        x = (x ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    x | 1
}

/// How long a primary must have had no working replica before one migrates to it (Valkey's
/// `CLUSTER_REPLICA_MIGRATION_DELAY`).
const REPLICA_MIGRATION_DELAY_MS: i64 = 5000;

/// How long a manual failover may take (Valkey's `CLUSTER_MF_TIMEOUT`).
const MF_TIMEOUT_MS: i64 = 5000;

/// The primary's pause lasts this many manual failover timeouts (Valkey's
/// `CLUSTER_MF_PAUSE_MULT`), and ends earlier when the failover does.
const MF_PAUSE_MULT: i64 = 2;

/// The shortest vote timeout (Valkey's `CLUSTER_OPERATION_TIMEOUT`).
const OPERATION_TIMEOUT_MS: i64 = 2000;
