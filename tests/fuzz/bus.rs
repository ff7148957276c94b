//! Cluster bus frames: every message type, encoded, mutated and decoded. A frame decodes to a
//! message that encodes back to the same bytes, or is refused; never a panic, and memory
//! bounded by the frame's real size (declared counts and lengths are claims).

use hotkv_cluster::wire::{
    Body, CertSummary, Ext, Extensions, Gossip, GossipSection, Header, Kind, Message, decode, encode,
};
use hotkv_cluster::{NodeFlags, NodeId, SlotSet};
use hotkv_test_support::fuzz::{Budget, peak_during, run};

fn seeds() -> Vec<Vec<u8>> {
    let mut slots = SlotSet::new();
    (100..=200).chain([16383]).for_each(|s| {
        slots.insert(s);
    });
    let header = Header {
        sender: NodeId::random(),
        current_epoch: 5,
        config_epoch: 2,
        repl_offset: 99,
        flags: NodeFlags::PRIMARY,
        state_ok: true,
        msg_flags: Header::PAUSED,
        primary: Some(NodeId::random()),
        ip: "127.0.0.1".into(),
        port: 7000,
        tls_port: 7100,
        bus_port: 17100,
        hostname: "h".into(),
        human_nodename: String::new(),
        slots,
        cert: CertSummary { serial: "0a".into(), not_after: 1, ..Default::default() },
    };
    let gossip = Gossip {
        id: NodeId::random(),
        ping_sent_ms: 1,
        pong_received_ms: 2,
        ip: "::1",
        port: 1,
        tls_port: 2,
        bus_port: 3,
        flags: NodeFlags::PFAIL,
    };
    let (mut three, mut one) = (GossipSection::default(), GossipSection::default());
    (0..3).for_each(|_| three.push(&gossip));
    one.push(&gossip);
    let mut ext = Extensions::default();
    for e in [
        Ext::ForgottenNode { id: NodeId::random(), ttl_secs: 60 },
        Ext::ClientIpv4("10.1.2.3"),
        Ext::ClientIpv6("fe80::1"),
        Ext::Unknown { ty: 77, data: b"later" },
    ] {
        ext.push(&e);
    }
    let bodies = [
        (Kind::Ping, Body::Gossip { entries: three, ext: Extensions::default() }),
        (Kind::Meet, Body::Gossip { entries: GossipSection::default(), ext: ext.clone() }),
        (Kind::Pong, Body::Gossip { entries: one, ext }),
        (Kind::Fail, Body::Fail(NodeId::random())),
        (Kind::Update, Body::Update { id: NodeId::random(), config_epoch: 3, slots: Box::new(SlotSet::full()) }),
        (Kind::Publish, Body::Publish { channel: b"c".to_vec(), message: b"m".to_vec() }),
        (Kind::PublishShard, Body::Publish { channel: vec![], message: vec![1; 300] }),
        (Kind::FailoverAuthRequest, Body::AuthRequest { force: false }),
        (Kind::FailoverAuthAck, Body::Empty),
        (Kind::MfStart, Body::Empty),
    ];
    bodies
        .into_iter()
        .map(|(kind, body)| {
            let mut out = Vec::new();
            encode(&Message { kind, header: header.clone(), body }, &mut out);
            out
        })
        .collect()
}

#[test]
fn bus_frames_survive_mutation() {
    let mut again = Vec::new();
    run("bus", &seeds(), Budget::from_env(50_000), |input, tally| {
        let (decoded, peak) = peak_during(|| decode(input));
        tally.max_peak = tally.max_peak.max(peak);
        assert!(peak <= 4 * input.len() + 4096, "{peak} bytes for a {}-byte frame", input.len());
        match decoded {
            Ok(Some((msg, used))) => {
                again.clear();
                encode(&msg, &mut again);
                // Not assert_eq: a failing frame is printed once, in hex, by the runner.
                assert!(again[..] == input[..used], "decode then encode changed the frame");
                true
            }
            Ok(None) | Err(_) => false,
        }
    });
}
