//! Failover on the simulated network: elections ranked by offset, votes, the winner taking
//! its primary's slots and the others following it, manual failovers (default, FORCE,
//! TAKEOVER), and the settings that hold a replica back. Nodes 0, 1, 2 are primaries; 3 and 6
//! replicate 0, 4 replicates 1, 5 replicates 2 ([`Net::three_shards_and_a_sibling`]).

use super::*;

/// Enough steps (100 ms each) for failure detection, the election delay and the vote.
const FAILOVER_STEPS: usize = (TIMEOUT * 6 / 100) as usize;

impl Net {
    fn set_offset(&self, i: usize, offset: u64) {
        self.repl[i].offset.store(offset, Ordering::Relaxed);
    }

    fn paused_until(&self, i: usize) -> i64 {
        self.repl[i].paused_until.load(Ordering::Relaxed)
    }

    /// Whether node `i` is a primary serving 0-5460 in every reachable node's view.
    fn serves_first_range_everywhere(&self, i: usize) -> bool {
        let id = self.id(i);
        self.nodes.iter().enumerate().filter(|(j, _)| !self.down[*j]).all(|(_, s)| {
            s.owner(0).is_some_and(|o| o.id == id && o.is_primary()) && s.owner(5460).is_some_and(|o| o.id == id)
        })
    }

    /// Whether node `r` replicates node `p`, in its own view.
    fn follows(&self, r: usize, p: usize) -> bool {
        let me = self.nodes[r].myself();
        !me.is_primary() && me.primary == Some(self.id(p))
    }

    /// Node `i`'s table, for failure messages.
    fn table(&self, i: usize) -> String {
        self.nodes[i].nodes_text(ClientKind::default())
    }

    /// A vote request from replica `r` as the wire carries it.
    fn auth_request(&mut self, r: usize, force: bool) -> Message {
        wire(self.nodes[r].message(Kind::FailoverAuthRequest, Body::AuthRequest { force }))
    }

    /// Node `to` takes every slot of node `from` as `valkey-cli --cluster rebalance` moves
    /// them: each imported by `to` and migrated by `from`, then SETSLOT NODE on `to`, whose
    /// announcement tells every node (the source hears it before its own SETSLOT NODE).
    fn reshard_all(&mut self, from: usize, to: usize) {
        let slots: Vec<u16> = self.nodes[from].myself().slots.iter().collect();
        self.move_slots(from, to, &slots);
    }

    /// [`Net::reshard_all`] for some of the slots.
    fn move_slots(&mut self, from: usize, to: usize, slots: &[u16]) {
        let (src, dst) = (self.id(from), self.id(to));
        for &slot in slots {
            self.nodes[to].set_slot(slot, SetSlot::Importing(src), 0).unwrap();
            self.nodes[from].set_slot(slot, SetSlot::Migrating(dst), 0).unwrap();
        }
        for &slot in slots {
            self.nodes[to].set_slot(slot, SetSlot::Node(dst), 0).unwrap();
        }
        self.flush();
    }

    /// A fourth primary (node 7), serving slots 16000-16383 taken from node 2: shard 0 keeps
    /// a majority of voters once another shard is emptied.
    fn add_fourth_primary(&mut self) {
        assert_eq!(self.add_node(), 7);
        let now = self.now;
        for j in 0..7u16 {
            self.nodes[7].meet("127.0.0.1", 7000 + j, 17000 + j, now).unwrap();
        }
        assert!(self.run_until(100, |n| n.nodes.iter().all(|s| s.nodes().len() == 8)), "node 7 did not join");
        self.move_slots(2, 7, &(16000..=16383).collect::<Vec<u16>>());
        assert!(self.run_until(50, |n| n.nodes.iter().all(|s| s.owner(16383).is_some_and(|o| o.id == n.id(7)))));
    }

    fn forgot_history(&self, i: usize) -> bool {
        self.repl[i].forgot.load(Ordering::Relaxed)
    }

    fn allow_replica_migration(&mut self, i: usize, allow: bool) {
        self.nodes[i].set_settings(Settings { allow_replica_migration: allow, ..settings(i) });
    }

    /// Hands `msg` to node `to` and says whether it answered with a vote.
    fn votes(&mut self, to: usize, msg: Message) -> bool {
        let now = self.now;
        let out = self.nodes[to].receive(msg, None, "127.0.0.1", Some("127.0.0.1"), now);
        out.reply.iter().any(|m| m.kind == Kind::FailoverAuthAck)
    }
}

#[test]
fn the_replica_with_the_best_offset_wins_and_the_other_follows_it() {
    for (winner, loser) in [(3, 6), (6, 3)] {
        let mut net = Net::three_shards_and_a_sibling();
        net.set_offset(winner, 5000);
        net.set_offset(loser, 4000);
        // Offsets travel in every header: everyone hears them before the primary fails.
        net.run(30);
        assert_eq!(net.nodes[winner].node(&net.id(loser)).map(|n| n.repl_offset), Some(4000));
        assert_eq!(net.nodes[loser].election_rank_now(), 1);
        assert_eq!(net.nodes[winner].election_rank_now(), 0);
        net.down[0] = true;
        let done = |n: &Net| n.serves_first_range_everywhere(winner) && n.follows(loser, winner);
        assert!(net.run_until(FAILOVER_STEPS, done), "{}", net.table(1));
        // The winner holds the slots with the election's epoch, which both voters voted in.
        let epoch = net.nodes[winner].myself().config_epoch;
        assert!(epoch > 3, "{epoch}");
        assert_eq!(net.nodes[winner].current_epoch(), epoch);
        for voter in [1, 2] {
            assert_eq!(net.nodes[voter].last_vote_epoch(), epoch);
            assert_eq!(net.nodes[voter].node(&net.id(winner)).map(|n| n.config_epoch), Some(epoch));
        }
        // The loser never ran an election: the winner's claim reached it first.
        assert!(net.nodes[loser].current_epoch() == epoch, "{}", net.nodes[loser].current_epoch());
        assert!(net.nodes.iter().enumerate().all(|(i, s)| net.down[i] || s.is_ok()));
        // The other shards did not move.
        assert_eq!(net.nodes[winner].owner(5461).map(|n| n.id), Some(net.id(1)));
    }
}

#[test]
fn the_old_primary_comes_back_as_a_replica_of_the_winner() {
    let mut net = Net::three_shards_and_a_sibling();
    net.set_offset(3, 10);
    net.run(10);
    net.down[0] = true;
    assert!(net.run_until(FAILOVER_STEPS, |n| n.serves_first_range_everywhere(3)), "{}", net.table(1));
    // Back with its old table: it claims the slots with its old epoch, is told otherwise, and
    // follows the node that took them.
    net.down[0] = false;
    let rejoined = |n: &Net| n.follows(0, 3) && n.serves_first_range_everywhere(3);
    assert!(net.run_until(100, rejoined), "{}", net.table(0));
    assert!(net.nodes[0].myself().slots.is_empty());
    // It became a replica: its data goes with a full sync, not by deleting slots.
    assert!(net.nodes[0].take_dirty_slots().is_empty());
    // Everyone knows it as a replica of the new primary, and the cluster is whole.
    assert!(
        net.run_until(100, |n| n.nodes.iter().all(|s| s.node(&n.id(0)).is_some_and(|x| x.primary == Some(n.id(3)))))
    );
    assert!(net.run_until(100, |n| n.nodes.iter().all(ClusterState::is_ok)));
}

#[test]
fn primaries_vote_once_per_epoch_by_valkeys_rules() {
    let mut net = Net::three_shards_and_a_sibling();
    net.run(10);
    // Primary 0 is up: no vote unless the request is forced (manual failover).
    let plain = net.auth_request(3, false);
    assert!(!net.votes(1, plain));
    let forced = net.auth_request(3, true);
    assert!(net.votes(1, forced), "{}", net.table(1));
    assert_eq!(net.nodes[1].last_vote_epoch(), net.nodes[1].current_epoch());
    // Once per epoch.
    let again = net.auth_request(6, true);
    assert!(!net.votes(1, again));
    // A new epoch, but the same primary within twice the node timeout.
    let mut later = net.auth_request(6, true);
    later.header.current_epoch += 1;
    assert!(!net.votes(1, later.clone()));
    net.now += TIMEOUT * 2 + 1;
    later.header.current_epoch += 1;
    assert!(net.votes(1, later));
    // A stale epoch, a primary, a replica claiming slots with an epoch older than their
    // holder's, and a non-voting replica are all refused.
    net.now += TIMEOUT * 2 + 1;
    let mut stale = net.auth_request(4, true);
    stale.header.current_epoch = 0;
    assert!(!net.votes(2, stale));
    let from_primary = net.auth_request(1, true);
    assert!(!net.votes(2, from_primary));
    let mut old_claim = net.auth_request(4, true);
    old_claim.header.current_epoch = net.nodes[2].current_epoch() + 5;
    old_claim.header.config_epoch = 0;
    assert!(!net.votes(2, old_claim));
    let fine = net.auth_request(4, true);
    let fine = Message { header: Header { current_epoch: net.nodes[2].current_epoch() + 6, ..fine.header }, ..fine };
    assert!(!net.votes(5, fine.clone()), "a replica has no vote");
    assert!(net.votes(2, fine));
}

#[test]
fn without_a_majority_of_votes_the_replica_waits_and_tries_again() {
    let mut net = Net::three_shards_and_a_sibling();
    // Only replica 3 may fail over, so that the test knows who runs the elections.
    net.nodes[6].set_settings(Settings { replica_no_failover: true, ..settings(6) });
    net.run(10);
    net.down[0] = true;
    let failed = net.id(0);
    let knows_failed = |n: &Net| n.nodes[3].node(&failed).is_some_and(|x| x.flags.has(NodeFlags::FAIL));
    assert!(net.run_until(FAILOVER_STEPS, knows_failed));
    // Primary 2 goes too before the election: primary 1 alone is not a majority of three.
    net.down[2] = true;
    net.run((TIMEOUT * 3 / 100) as usize);
    assert!(net.follows(3, 0), "{}", net.table(3));
    let first_epoch = net.nodes[3].current_epoch();
    assert!(first_epoch > 3, "an election ran: {first_epoch}");
    // Primary 2 is back: the next attempt, after the retry time, wins.
    net.down[2] = false;
    assert!(net.run_until(FAILOVER_STEPS * 2, |n| n.serves_first_range_everywhere(3)), "{}", net.table(3));
    assert!(net.nodes[3].myself().config_epoch > first_epoch);
}

#[test]
fn a_manual_failover_waits_for_the_primarys_final_offset_then_swaps_the_roles() {
    let mut net = Net::three_shards_and_a_sibling();
    net.set_offset(0, 1000);
    net.set_offset(3, 900);
    net.run(10);
    let now = net.now;
    net.nodes[3].failover(FailoverMode::Default, "test", now).unwrap();
    assert!(net.nodes[3].manual_failover_in_progress());
    net.flush();
    // The primary paused its writes for twice the manual failover timeout.
    assert!(net.paused_until(0) > now + 5000, "{}", net.paused_until(0));
    assert!(net.nodes[0].manual_failover_in_progress());
    // Its offset is ahead: no election while the replica catches up.
    net.run(10);
    assert!(net.follows(3, 0));
    assert_eq!(net.nodes[3].current_epoch(), net.nodes[0].current_epoch());
    net.set_offset(3, 1000);
    let swapped = |n: &Net| n.serves_first_range_everywhere(3) && n.follows(0, 3) && n.follows(6, 3);
    assert!(net.run_until(20, swapped), "{}", net.table(0));
    // The old primary's writes resume (as a replica, they are redirected) and nothing is left
    // of the manual failover.
    assert_eq!(net.paused_until(0), 0);
    assert!(!net.nodes[0].manual_failover_in_progress() && !net.nodes[3].manual_failover_in_progress());
}

#[test]
fn a_manual_failover_that_cannot_catch_up_times_out_and_resumes_writes() {
    let mut net = Net::three_shards_and_a_sibling();
    net.set_offset(0, 1000);
    net.run(10);
    let now = net.now;
    net.nodes[3].failover(FailoverMode::Default, "test", now).unwrap();
    net.run(10);
    assert!(net.paused_until(0) > 0);
    net.run(50);
    assert!(!net.nodes[0].manual_failover_in_progress() && !net.nodes[3].manual_failover_in_progress());
    assert_eq!(net.paused_until(0), 0);
    assert!(net.follows(3, 0) && net.serves_first_range_everywhere(0));
}

#[test]
fn cluster_failover_refuses_as_valkey() {
    let mut net = Net::three_shards_and_a_sibling();
    net.run(10);
    let now = net.now;
    let err = |r: Result<(), CmdError>| r.unwrap_err();
    assert_eq!(
        err(net.nodes[0].failover(FailoverMode::Default, "t", now)),
        "You should send CLUSTER FAILOVER to a replica"
    );
    net.down[0] = true;
    net.run(1);
    assert_eq!(
        err(net.nodes[3].failover(FailoverMode::Default, "t", now)),
        "Master is down or failed, please use CLUSTER FAILOVER FORCE"
    );
    let mut alone = ClusterState::fresh(settings(9));
    let unknown = NodeId::random();
    let mut saved = alone.saved();
    saved.nodes[0].flags = NodeFlags(NodeFlags::MYSELF | NodeFlags::REPLICA);
    saved.nodes[0].primary = Some(unknown);
    alone = ClusterState::from_saved(saved, settings(9));
    assert_eq!(err(alone.failover(FailoverMode::Force, "t", now)), "I'm a replica but my master is unknown to me");
}

#[test]
fn force_fails_over_at_once_while_the_primary_is_unreachable() {
    let mut net = Net::three_shards_and_a_sibling();
    net.run(10);
    net.down[0] = true;
    net.run(1);
    let now = net.now;
    net.nodes[3].failover(FailoverMode::Force, "test", now).unwrap();
    // Well before the primary could be found failed (the node timeout), the vote is over.
    assert!(net.run_until(5, |n| n.serves_first_range_everywhere(3)), "{}", net.table(1));
    assert!(net.run_until(20, |n| n.follows(6, 3)));
    let failed = net.id(0);
    assert!(!net.nodes[1].node(&failed).unwrap().flags.has(NodeFlags::FAIL));
}

#[test]
fn takeover_needs_no_vote_and_the_old_primary_follows_once_back() {
    let mut net = Net::three_shards_and_a_sibling();
    net.run(10);
    // Two primaries out of three gone: no vote could be won.
    net.down[0] = true;
    net.down[1] = true;
    net.run(1);
    let before = net.nodes.iter().map(|s| s.current_epoch()).max().unwrap();
    let now = net.now;
    net.nodes[3].failover(FailoverMode::Takeover, "test", now).unwrap();
    let me = net.nodes[3].myself();
    assert!(me.is_primary() && me.slots.len() == 5461);
    assert_eq!(me.config_epoch, before + 1);
    assert!(net.run_until(10, |n| n.nodes[2].owner(0).is_some_and(|o| o.id == n.id(3))));
    net.down[0] = false;
    net.down[1] = false;
    assert!(net.run_until(100, |n| n.follows(0, 3) && n.follows(6, 3)), "{}", net.table(0));
}

#[test]
fn a_no_failover_replica_stays_a_replica_but_a_forced_failover_still_works() {
    let mut net = Net::three_shards_and_a_sibling();
    for i in [3, 6] {
        net.nodes[i].set_settings(Settings { replica_no_failover: true, ..settings(i) });
    }
    net.run(10);
    // The flag is gossiped (CLUSTER NODES shows it).
    assert!(net.table(1).lines().any(|l| l.starts_with(net.id(3).as_str()) && l.contains("slave,nofailover")));
    net.down[0] = true;
    net.run(FAILOVER_STEPS);
    assert!(net.follows(3, 0) && net.follows(6, 0));
    assert!(!net.nodes[1].is_ok());
    let now = net.now;
    net.nodes[6].failover(FailoverMode::Force, "test", now).unwrap();
    assert!(net.run_until(10, |n| n.serves_first_range_everywhere(6)), "{}", net.table(1));
}

#[test]
fn a_replica_whose_data_is_too_old_does_not_fail_over_unless_the_factor_is_zero() {
    let mut net = Net::three_shards_and_a_sibling();
    // Disconnected for a minute: more than 10 node timeouts plus the ping period.
    for i in [3, 6] {
        net.repl[i].data_age_ms.store(60_000, Ordering::Relaxed);
    }
    net.run(10);
    net.down[0] = true;
    net.run(FAILOVER_STEPS);
    assert!(net.follows(3, 0) && net.follows(6, 0));
    assert_eq!(net.nodes[3].current_epoch(), net.nodes[1].current_epoch());
    assert_eq!(net.nodes[1].last_vote_epoch(), 0, "no election ran");
    // Factor 0: always eligible.
    for i in [3, 6] {
        net.nodes[i].set_settings(Settings { replica_validity_factor: 0, ..settings(i) });
    }
    assert!(
        net.run_until(FAILOVER_STEPS, |n| n.serves_first_range_everywhere(3) || n.serves_first_range_everywhere(6))
    );
}

#[test]
fn primaries_killed_in_turn_come_back_from_their_saved_tables_as_replicas() {
    let mut net = Net::three_shards_and_a_sibling();
    net.nodes[6].set_settings(Settings { replica_no_failover: true, ..settings(6) });
    net.run(10);
    let (mut primary, mut heir) = (0, 3);
    for round in 0..4 {
        net.down[primary] = true;
        assert!(
            net.run_until(FAILOVER_STEPS, |n| n.serves_first_range_everywhere(heir)),
            "round {round}\n{}",
            net.table(1)
        );
        net.restart(primary);
        assert!(net.run_until(100, |n| n.follows(primary, heir)), "round {round}\n{}", net.table(primary));
        assert!(net.run_until(100, |n| n.follows(6, heir) && n.nodes.iter().all(ClusterState::is_ok)));
        (primary, heir) = (heir, primary);
    }
}

impl Net {
    /// Node `i` restarts from its saved table (what `nodes.conf` holds), with no links.
    fn restart(&mut self, i: usize) {
        let mut st = ClusterState::from_saved(self.nodes[i].saved(), settings(i));
        st.hold_until_rejoined();
        st.set_replication(self.repl[i].clone());
        self.nodes[i] = st;
        self.links.retain(|l| l.0 != i);
        self.down[i] = false;
    }
}

#[test]
fn a_winner_killed_before_it_heard_its_old_primary_follow_it_still_follows_on_return() {
    let mut net = Net::three_shards_and_a_sibling();
    net.nodes[6].set_settings(Settings { replica_no_failover: true, ..settings(6) });
    net.run(10);
    net.down[0] = true;
    assert!(net.run_until(FAILOVER_STEPS, |n| n.serves_first_range_everywhere(3)));
    // Node 0 comes back as node 3 dies: node 3's table keeps node 0 as an empty primary.
    net.down[3] = true;
    net.restart(0);
    assert!(net.run_until(FAILOVER_STEPS * 2, |n| n.serves_first_range_everywhere(0)), "{}", net.table(0));
    let saved = net.nodes[3].saved();
    let old = saved.nodes.iter().find(|n| n.id == net.id(0)).unwrap();
    assert!(old.is_primary() && old.slots.is_empty(), "{old:?}");
    net.restart(3);
    assert!(net.run_until(100, |n| n.follows(3, 0) && n.follows(6, 0)), "{}", net.table(3));
    assert!(net.run_until(100, |n| n.nodes.iter().all(ClusterState::is_ok)));
    // Node 3 came back a primary of its own, but of the shard node 0 leads: the slots it lost
    // to node 0 were not migrated, and it did not log them one by one as if they were.
    assert_eq!(net.nodes[3].migrations_logged, 0);
}

#[test]
fn a_spare_replica_migrates_to_a_primary_left_without_one() {
    let mut net = Net::three_shards_and_a_sibling();
    net.run(10);
    // Primary 2 loses its only replica; primary 0 has two.
    net.down[5] = true;
    let spare = if net.id(3) < net.id(6) { 3 } else { 6 };
    let other = 9 - spare;
    assert!(net.run_until(FAILOVER_STEPS * 2, |n| n.follows(spare, 2)), "{}", net.table(spare));
    assert!(net.follows(other, 0));
    assert!(net.run_until(50, |n| {
        n.nodes
            .iter()
            .enumerate()
            .all(|(i, s)| n.down[i] || s.node(&n.id(spare)).is_some_and(|x| x.primary == Some(n.id(2))))
    }));
    // With the barrier at 2, primary 0 keeps both.
    let mut net = Net::three_shards_and_a_sibling();
    for i in [3, 6] {
        net.nodes[i].set_settings(Settings { migration_barrier: 2, ..settings(i) });
    }
    net.run(10);
    net.down[5] = true;
    net.run(FAILOVER_STEPS * 2);
    assert!(net.follows(3, 0) && net.follows(6, 0));
}

#[test]
fn a_primary_emptied_by_a_reshard_follows_the_taker_with_a_full_sync_and_never_wins_its_election() {
    let mut net = Net::three_shards_and_a_sibling();
    net.add_fourth_primary();
    // Shard 1 has the most data; shard 0's replicas less.
    for (i, offset) in [(1, 9000), (4, 9000), (3, 5000), (6, 4000)] {
        net.set_offset(i, offset);
    }
    net.run(10);
    net.reshard_all(1, 0);
    // The announcement alone moves node 1 and its replica, as cluster-allow-replica-migration
    // lets them: they join shard 0 with nothing of its stream yet.
    assert!(net.run_until(20, |n| n.follows(1, 0) && n.follows(4, 0)), "{}", net.table(1));
    assert!(net.forgot_history(1) && net.forgot_history(4));
    assert!(net.nodes[1].migrating().is_empty());
    // Every node hears both newcomers' roles and zero offsets.
    net.run(20);
    assert!(net.nodes.iter().all(|s| {
        [1, 4].iter().all(|&r| s.node(&net.id(r)).is_some_and(|x| x.repl_offset == 0 && x.primary == Some(net.id(0))))
    }));
    // Shard 0's own replica with the best offset replaces it; the newcomers follow.
    assert_eq!(net.nodes[3].election_rank_now(), 0);
    assert_eq!(net.nodes[1].election_rank_now(), 2 + usize::from(net.id(4) < net.id(1)));
    net.down[0] = true;
    let done = |n: &Net| n.serves_first_range_everywhere(3) && [1, 4, 6].iter().all(|&r| n.follows(r, 3));
    assert!(net.run_until(FAILOVER_STEPS, done), "{}", net.table(1));
    assert!(net.serves_first_range_everywhere(3));
}

#[test]
fn a_primary_that_may_not_migrate_stays_an_empty_primary_and_its_replica_moves() {
    let mut net = Net::three_shards_and_a_sibling();
    net.allow_replica_migration(1, false);
    net.run(10);
    net.reshard_all(1, 0);
    assert!(net.run_until(20, |n| n.follows(4, 0)), "{}", net.table(4));
    net.run(20);
    let me = net.nodes[1].myself();
    assert!(me.is_primary() && me.slots.is_empty(), "{}", net.table(1));
    assert!(!net.forgot_history(1) && net.forgot_history(4));
}

#[test]
fn a_sub_replica_follows_the_node_its_primary_now_replicates() {
    let mut net = Net::three_shards_and_a_sibling();
    net.allow_replica_migration(4, false);
    net.run(10);
    net.reshard_all(1, 0);
    // Node 4 may not move on the claim; its primary does, and node 4 follows where it went
    // once it hears so, rather than replicate a replica.
    assert!(net.run_until(20, |n| n.follows(1, 0)), "{}", net.table(1));
    assert!(net.run_until(20, |n| n.follows(4, 0)), "{}", net.table(4));
    assert!(net.forgot_history(4));
    assert!(
        net.run_until(50, |n| n.nodes.iter().all(|s| s.node(&n.id(4)).is_some_and(|x| x.primary == Some(n.id(0)))))
    );
}

#[test]
fn cluster_replicate_of_another_shards_primary_drops_the_offset_so_the_newcomer_does_not_win() {
    let mut net = Net::three_shards_and_a_sibling();
    for (i, offset) in [(4, 9000), (3, 5000), (6, 4000)] {
        net.set_offset(i, offset);
    }
    net.run(10);
    let id = net.id(0);
    net.nodes[4].replicate(&id).unwrap();
    assert!(net.forgot_history(4));
    assert!(net.run_until(20, |n| n.nodes[3].node(&n.id(4)).is_some_and(|x| x.repl_offset == 0)));
    net.down[0] = true;
    let done = |n: &Net| n.serves_first_range_everywhere(3) && n.follows(4, 3) && n.follows(6, 3);
    assert!(net.run_until(FAILOVER_STEPS, done), "{}", net.table(1));
}

/// A shard keeps one id (CLUSTER MYSHARDID) through a failover and the old primary's return
/// from its saved table, every node agrees on every node's shard, and shards differ.
#[test]
fn a_shard_keeps_its_id_through_a_failover_and_a_restart() {
    let mut net = Net::three_shards_and_a_sibling();
    let shard_of = |net: &Net, i: usize| net.nodes[i].myself().shard_id;
    let agreed = |n: &Net| {
        n.nodes.iter().enumerate().all(|(i, s)| {
            n.down[i]
                || (0..n.nodes.len()).all(|j| n.down[j] || s.node(&n.id(j)).map(|x| x.shard_id) == Some(shard_of(n, j)))
        })
    };
    assert!(net.run_until(100, agreed), "{}", net.table(1));
    let first = shard_of(&net, 0);
    assert_eq!([shard_of(&net, 3), shard_of(&net, 6)], [first, first]);
    let others = [shard_of(&net, 1), shard_of(&net, 2)];
    assert!(others[0] != others[1] && !others.contains(&first));
    assert_eq!(shard_of(&net, 4), others[0]);
    net.set_offset(3, 10);
    net.run(10);
    net.down[0] = true;
    assert!(net.run_until(FAILOVER_STEPS, |n| n.serves_first_range_everywhere(3)), "{}", net.table(1));
    net.restart(0);
    assert!(net.run_until(100, |n| n.follows(0, 3) && n.follows(6, 3)), "{}", net.table(0));
    assert!(net.run_until(100, agreed), "{}", net.table(1));
    assert_eq!([shard_of(&net, 0), shard_of(&net, 3), shard_of(&net, 6)], [first; 3]);
    // A replica moved to another shard takes that shard's id.
    let id = net.id(1);
    net.nodes[6].replicate(&id).unwrap();
    assert_eq!(shard_of(&net, 6), others[0]);
    assert!(net.run_until(100, agreed), "{}", net.table(1));
}
