//! Pub/Sub commands: (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PUBLISH, SPUBLISH, PUBSUB.

use hotkv_engine::CommandError;
use hotkv_engine::command::{CommandSpec, KeySpec, acl, flags as f, key_flags};
use hotkv_protocol::{Args, ReplyBuf};

use super::row;
use crate::pubsub::{ClientSubs, Kind};
use crate::registry::{Flow, ServerSpec};
use crate::server::Server;
use crate::session::{Session, flag};

const SUB: u32 = f::PUBSUB | f::NOSCRIPT | f::LOADING | f::STALE;
const SHARD_KEYS: &[KeySpec] = &[KeySpec::range(1, -1, 1, key_flags::NOT_KEY)];

/// Pub/Sub command rows.
pub static COMMANDS: &[ServerSpec] = &[
    row(
        "subscribe",
        -2,
        SUB,
        0,
        &[],
        "pubsub",
        "2.0.0",
        "Listens for messages published to channels.",
        "O(N) where N is the number of channels to subscribe to.",
        subscribe,
    ),
    row(
        "unsubscribe",
        -1,
        SUB,
        0,
        &[],
        "pubsub",
        "2.0.0",
        "Stops listening to messages posted to channels.",
        "O(N) where N is the number of channels to unsubscribe.",
        unsubscribe,
    ),
    row(
        "psubscribe",
        -2,
        SUB,
        0,
        &[],
        "pubsub",
        "2.0.0",
        "Listens for messages published to channels that match one or more patterns.",
        "O(N) where N is the number of patterns to subscribe to.",
        psubscribe,
    ),
    row(
        "punsubscribe",
        -1,
        SUB,
        0,
        &[],
        "pubsub",
        "2.0.0",
        "Stops listening to messages published to channels that match one or more patterns.",
        "O(N) where N is the number of patterns to unsubscribe.",
        punsubscribe,
    ),
    row(
        "ssubscribe",
        -2,
        SUB,
        0,
        SHARD_KEYS,
        "pubsub",
        "7.0.0",
        "Listens for messages published to shard channels.",
        "O(N) where N is the number of shard channels to subscribe to.",
        ssubscribe,
    ),
    row(
        "sunsubscribe",
        -1,
        SUB,
        0,
        SHARD_KEYS,
        "pubsub",
        "7.0.0",
        "Stops listening to messages posted to shard channels.",
        "O(N) where N is the number of shard channels to unsubscribe.",
        sunsubscribe,
    ),
    row(
        "publish",
        3,
        f::PUBSUB | f::LOADING | f::STALE | f::FAST | f::MAY_REPLICATE,
        0,
        &[],
        "pubsub",
        "2.0.0",
        "Posts a message to a channel.",
        "O(N+M) where N is the number of clients subscribed to the receiving channel and M is the total number of subscribed patterns (by any client).",
        publish,
    ),
    row(
        "spublish",
        3,
        f::PUBSUB | f::LOADING | f::STALE | f::FAST | f::MAY_REPLICATE,
        0,
        &[KeySpec::single(1, key_flags::NOT_KEY)],
        "pubsub",
        "7.0.0",
        "Post a message to a shard channel",
        "O(N) where N is the number of clients subscribed to the receiving shard channel.",
        spublish,
    ),
    CommandSpec::container("pubsub", -2, "pubsub", "2.8.0", "A container for Pub/Sub commands.", PUBSUB_SUBS),
];

const INTRO: u32 = f::PUBSUB | f::LOADING | f::STALE;

static PUBSUB_SUBS: &[ServerSpec] = &[
    row(
        "channels",
        -2,
        INTRO,
        0,
        &[],
        "pubsub",
        "2.8.0",
        "Returns the active channels.",
        "O(N) where N is the number of active channels, and assuming constant time pattern matching (relatively short channels and patterns)",
        channels,
    ),
    row(
        "numsub",
        -2,
        INTRO,
        0,
        &[],
        "pubsub",
        "2.8.0",
        "Returns a count of subscribers to channels.",
        "O(N) for the NUMSUB subcommand, where N is the number of requested channels",
        numsub,
    ),
    row(
        "numpat",
        2,
        INTRO,
        0,
        &[],
        "pubsub",
        "2.8.0",
        "Returns a count of unique pattern subscriptions.",
        "O(1)",
        numpat,
    ),
    row(
        "shardchannels",
        -2,
        INTRO,
        0,
        &[],
        "pubsub",
        "7.0.0",
        "Returns the active shard channels.",
        "O(N) where N is the number of active shard channels, and assuming constant time pattern matching (relatively short shard channels).",
        shardchannels,
    ),
    row(
        "shardnumsub",
        -2,
        INTRO,
        0,
        &[],
        "pubsub",
        "7.0.0",
        "Returns the count of subscribers of shard channels.",
        "O(N) for the SHARDNUMSUB subcommand, where N is the number of requested shard channels",
        shardnumsub,
    ),
    row(
        "help",
        2,
        f::LOADING | f::STALE,
        acl::SLOW,
        &[],
        "pubsub",
        "6.2.0",
        "Returns helpful text about the different subcommands.",
        "O(1)",
        help,
    ),
];

fn subs(sess: &mut Session) -> &mut ClientSubs {
    let info = sess.info.clone();
    sess.subs.get_or_insert_with(|| ClientSubs::new(info))
}

/// The count a subscription reply carries: shard channels for S-commands, channels plus
/// patterns for the others.
fn count(sess: &Session, kind: Kind) -> i64 {
    sess.subs.as_ref().map_or(0, |s| if kind == Kind::Shard { s.shard.len() } else { s.count() }) as i64
}

fn reply(out: &mut ReplyBuf, word: &[u8], name: Option<&[u8]>, count: i64) {
    out.push(3);
    out.bulk(word);
    match name {
        Some(n) => out.bulk(n),
        None => out.null(),
    }
    out.int(count);
}

fn do_subscribe(
    srv: &Server,
    sess: &mut Session,
    args: Args<'_>,
    out: &mut ReplyBuf,
    kind: Kind,
) -> Result<Flow, CommandError> {
    for name in args.iter().skip(1) {
        srv.pubsub.subscribe(kind, name, subs(sess));
        reply(out, kind.subscribe_word(), Some(name), count(sess, kind));
    }
    sess.set_flag(flag::PUBSUB, sess.subscribed());
    sess.sync_counts();
    // Valkey sends (un)subscribe confirmations as pushes in RESP2 too.
    sess.pushed = true;
    Ok(Flow::Continue)
}

fn do_unsubscribe(
    srv: &Server,
    sess: &mut Session,
    args: Args<'_>,
    out: &mut ReplyBuf,
    kind: Kind,
) -> Result<Flow, CommandError> {
    let names: Vec<Vec<u8>> = if args.len() > 1 {
        args.iter().skip(1).map(<[u8]>::to_vec).collect()
    } else {
        sess.subs.as_mut().map(|s| s.list(kind).clone()).unwrap_or_default()
    };
    if names.is_empty() {
        reply(out, kind.unsubscribe_word(), None, count(sess, kind));
    }
    for name in names {
        if let Some(s) = sess.subs.as_mut() {
            srv.pubsub.unsubscribe(kind, &name, s);
        }
        reply(out, kind.unsubscribe_word(), Some(&name), count(sess, kind));
    }
    sess.set_flag(flag::PUBSUB, sess.subscribed());
    sess.sync_counts();
    // Valkey sends (un)subscribe confirmations as pushes in RESP2 too.
    sess.pushed = true;
    Ok(Flow::Continue)
}

fn subscribe(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    do_subscribe(srv, sess, args, out, Kind::Channel)
}

fn psubscribe(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    do_subscribe(srv, sess, args, out, Kind::Pattern)
}

fn ssubscribe(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    do_subscribe(srv, sess, args, out, Kind::Shard)
}

fn unsubscribe(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    do_unsubscribe(srv, sess, args, out, Kind::Channel)
}

fn punsubscribe(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    do_unsubscribe(srv, sess, args, out, Kind::Pattern)
}

fn sunsubscribe(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    do_unsubscribe(srv, sess, args, out, Kind::Shard)
}

/// PUBLISH: in cluster mode the message also goes to every other node, whose subscribers get
/// it; the reply counts this node's receivers only, as Valkey's.
fn publish(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let receivers = srv.pubsub.publish(args.get(1), args.get(2));
    if let Some(node) = &srv.cluster {
        node.bus.publish(args.get(1), args.get(2), false);
    } else if srv.ks.sink().active() {
        // Standalone replicas hear a primary's messages through its stream (Valkey forces
        // PUBLISH's propagation there; a cluster's bus carries them instead).
        let mut e = hotkv_engine::Effects::default();
        e.begin(true);
        e.push(sess.db, &[b"PUBLISH".as_slice(), args.get(1), args.get(2)]);
        srv.ks.sink().append(&e);
    }
    out.int(receivers as i64);
    Ok(Flow::Continue)
}

/// SPUBLISH: routing already sent the call to a node of the channel's shard; the message also
/// goes to the shard's other nodes (the primary's replicas, or a replica's primary and
/// siblings), so that SSUBSCRIBE on any of them hears it. The reply counts this node's only.
fn spublish(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let receivers = srv.pubsub.spublish(args.get(1), args.get(2));
    if let Some(node) = &srv.cluster {
        node.bus.publish(args.get(1), args.get(2), true);
    }
    out.int(receivers as i64);
    Ok(Flow::Continue)
}

fn list_channels(srv: &Server, args: &Args<'_>, out: &mut ReplyBuf, kind: Kind) -> Result<Flow, CommandError> {
    if args.len() > 3 {
        return Err(CommandError::WrongArity(format!(
            "pubsub|{}",
            String::from_utf8_lossy(args.get(1)).to_ascii_lowercase()
        )));
    }
    let found = srv.pubsub.channels(kind, args.opt(2));
    out.array(found.len());
    for c in found {
        out.bulk(&c);
    }
    Ok(Flow::Continue)
}

fn channels(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    list_channels(srv, &args, out, Kind::Channel)
}

fn shardchannels(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    list_channels(srv, &args, out, Kind::Shard)
}

fn counts(srv: &Server, args: &Args<'_>, out: &mut ReplyBuf, kind: Kind) -> Result<Flow, CommandError> {
    // A flat array even in RESP3, as Valkey replies.
    out.array((args.len() - 2) * 2);
    for c in args.iter().skip(2) {
        out.bulk(c);
        out.int(srv.pubsub.numsub(kind, c) as i64);
    }
    Ok(Flow::Continue)
}

fn numsub(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    counts(srv, &args, out, Kind::Channel)
}

fn shardnumsub(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    counts(srv, &args, out, Kind::Shard)
}

fn numpat(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    out.int(srv.pubsub.numpat() as i64);
    Ok(Flow::Continue)
}

fn help(_: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    const LINES: &[&str] = &[
        "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "CHANNELS [<pattern>]",
        "    Return the currently active channels matching a <pattern> (default: '*').",
        "NUMPAT",
        "    Return number of subscriptions to patterns.",
        "NUMSUB [<channel> ...]",
        "    Return the number of subscribers for the specified channels, excluding",
        "    pattern subscriptions(default: no channels).",
        "SHARDCHANNELS [<pattern>]",
        "    Return the currently active shard level channels matching a <pattern> (default: '*').",
        "SHARDNUMSUB [<shardchannel> ...]",
        "    Return the number of subscribers for the specified shard level channel(s)",
        "HELP",
        "    Print this help.",
    ];
    out.array(LINES.len());
    for l in LINES {
        out.simple(l);
    }
    Ok(Flow::Continue)
}

#[cfg(test)]
mod tests {
    use crate::cmd::testutil::{client, server};

    #[test]
    fn client_reply_off_keeps_subscription_confirmations() {
        let srv = server();
        let mut c = client(&srv, 45100);
        c.run(&srv, &["hello", "3"]);
        assert_eq!(c.run(&srv, &["client", "reply", "off"]), "");
        assert_eq!(c.run(&srv, &["subscribe", "ch"]), ">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n");
        assert_eq!(c.run(&srv, &["ping"]), "", "an ordinary reply stays silent");
        assert_eq!(c.run(&srv, &["unsubscribe"]), ">3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n");
        // Valkey flags them as pushes in RESP2 as well (pubsub.tcl subscribes under REPLY OFF
        // and SKIP and waits for the confirmation).
        let mut c2 = client(&srv, 45101);
        c2.run(&srv, &["client", "reply", "skip"]);
        assert_eq!(c2.run(&srv, &["psubscribe", "*"]), "*3\r\n$10\r\npsubscribe\r\n$1\r\n*\r\n:1\r\n");
        c2.run(&srv, &["client", "reply", "off"]);
        assert_eq!(c2.run(&srv, &["punsubscribe"]), "*3\r\n$12\r\npunsubscribe\r\n$1\r\n*\r\n:0\r\n");
        assert_eq!(c2.run(&srv, &["client", "reply", "on"]), "+OK\r\n");
    }
}
