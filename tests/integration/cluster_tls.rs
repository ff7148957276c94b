//! A cluster whose bus is mutual TLS, as the reference doc builds it: redis-cli --tls creates
//! it, clients are told the port of their own kind, and a node without a certificate the CA
//! signed, or without TLS on its bus, never joins and is logged on both ends.

use std::process::Command;
use std::time::Duration;

use hotkv_test_support::tools::run_bounded;
use hotkv_test_support::{TestServer, free_port, wait_for};

use crate::cluster::one_cluster_at_a_time;
use crate::pki::{Ca, Pki};
use crate::{assert_err, builder};

/// A TLS cluster node: a plain port (for the harness), a TLS port, the bus on TLS at a port
/// of its own. `cert`/`key` name files in the PKI dir.
fn tls_node(pki: &Pki, cert: &str, key: &str, ca: &str) -> (TestServer, u16) {
    let tls_port = free_port();
    let srv = builder()
        .config("tls-port", &tls_port.to_string())
        .config("tls-cert-file", &pki.dir.s(cert))
        .config("tls-key-file", &pki.dir.s(key))
        .config("tls-ca-cert-file", &pki.dir.s(ca))
        .config("tls-cluster", "yes")
        .config("cluster-port", &free_port().to_string())
        .config("cluster-enabled", "yes")
        .config("cluster-node-timeout", "1000")
        .spawn();
    (srv, tls_port)
}

fn cli(pki: &Pki, args: &[&str]) -> String {
    let mut cmd = Command::new("redis-cli");
    cmd.args(pki.cli_args(Some(("node.crt", "node.key")))).args(args);
    let out = run_bounded(&mut cmd, None, Duration::from_secs(60));
    format!("{}{}", out.stdout, out.stderr)
}

#[test]
fn a_tls_cluster_forms_with_redis_cli_and_tells_each_client_its_own_port() {
    let _alone = one_cluster_at_a_time();
    let pki = Pki::new();
    let nodes: Vec<(TestServer, u16)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3).map(|_| s.spawn(|| tls_node(&pki, "node.crt", "node.key", "ca.crt"))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let addrs: Vec<String> = nodes.iter().map(|(_, t)| format!("127.0.0.1:{t}")).collect();
    let mut args = vec!["--cluster", "create"];
    args.extend(addrs.iter().map(String::as_str));
    args.push("--cluster-yes");
    let out = cli(&pki, &args);
    assert!(out.contains("[OK] All 16384 slots covered."), "{out}");
    for (n, _) in &nodes {
        assert!(n.log().contains("TLS on the cluster bus, other nodes verified against the CA"), "{}", n.log());
        assert!(!n.log().contains("not authenticated"));
    }
    let (first, first_tls) = (&nodes[0].0, nodes[0].1);
    assert!(wait_for(|| first.cmd(&["CLUSTER", "INFO"]).text().contains("cluster_state:ok"), Duration::from_secs(10)));
    // TLS clients follow redirects to TLS ports; plain clients are sent to plain ports.
    let tls_port = first_tls.to_string();
    assert_eq!(cli(&pki, &["-p", &tls_port, "-c", "SET", "greeting", "hello"]), "OK\n");
    for (_, t) in &nodes {
        assert_eq!(cli(&pki, &["-p", &t.to_string(), "-c", "GET", "greeting"]), "hello\n");
    }
    let table_tls = cli(&pki, &["-p", &tls_port, "CLUSTER", "NODES"]);
    let table_plain = first.cmd(&["CLUSTER", "NODES"]).text();
    for (n, t) in &nodes {
        assert!(table_tls.contains(&format!("127.0.0.1:{t}@")), "{table_tls}");
        assert!(table_plain.contains(&format!("127.0.0.1:{}@", n.port())), "{table_plain}");
    }
    let owner = nodes.iter().find(|(n, _)| {
        n.cmd(&["CLUSTER", "NODES"]).text().lines().any(|l| l.contains("myself") && l.ends_with(" 10923-16383"))
    });
    let (owner, owner_tls) = owner.expect("an owner of slot 12182");
    if owner.port() != first.port() {
        assert_err(&first.client().cmd(&["GET", "foo"]), &format!("MOVED 12182 127.0.0.1:{}", owner.port()));
        let moved = cli(&pki, &["-p", &tls_port, "GET", "foo"]);
        assert!(moved.contains(&format!("MOVED 12182 127.0.0.1:{owner_tls}")), "{moved}");
    }
}

#[test]
fn a_node_with_a_foreign_certificate_or_a_plain_bus_never_joins() {
    let pki = Pki::new();
    let (good, _) = tls_node(&pki, "node.crt", "node.key", "ca.crt");
    good.cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    let good_bus = good.cmd(&["CONFIG", "GET", "cluster-port"]).items()[1].text();
    // Another CA's node: its MEET never completes, and both ends say why.
    let other = Ca::new("someone else's CA");
    let stranger = other.node("stranger");
    pki.dir.write("other-ca.crt", &other.pem);
    pki.dir.write("stranger.crt", &stranger.cert);
    pki.dir.write("stranger.key", &stranger.key);
    let (foreign, _) = tls_node(&pki, "stranger.crt", "stranger.key", "other-ca.crt");
    foreign.cmd(&["CLUSTER", "MEET", "127.0.0.1", &good.port().to_string(), &good_bus]);
    assert!(
        foreign.wait_for_log(
            "failed: certificate verify failed (SSL routines): unable to get local issuer certificate (the TLS \
             handshake: it must have tls-cluster yes, and a certificate tls-ca-cert-file trusts)",
            Duration::from_secs(10)
        ),
        "{}",
        foreign.log()
    );
    assert!(foreign.log().contains("Cluster: the TLS bus link to node "), "{}", foreign.log());
    assert!(good.wait_for_log("Error accepting cluster node connection: ", Duration::from_secs(10)), "{}", good.log());
    // A plain node: it cannot read the TLS node's answer.
    let plain = builder().config("cluster-enabled", "yes").config("cluster-node-timeout", "1000").spawn();
    plain.cmd(&["CLUSTER", "MEET", "127.0.0.1", &good.port().to_string(), &good_bus]);
    assert!(
        good.wait_for_log("Error accepting cluster node connection: wrong version number (SSL routines) (the TLS handshake from 127.0.0.1: tls-cluster is on here, the other nodes must use it too, with a certificate tls-ca-cert-file trusts)", Duration::from_secs(10)),
        "{}",
        good.log()
    );
    // The plain node reads the TLS alert as a frame length, as the doc shows.
    assert!(plain.wait_for_log("Cluster link message too large from ", Duration::from_secs(10)), "{}", plain.log());
    assert!(plain.log().contains(": 352518912 bytes"), "{}", plain.log());
    // Nothing joined: both refusals are logged above, and the good node knows only itself.
    assert_eq!(good.cmd(&["CLUSTER", "NODES"]).text().lines().count(), 1, "{}", good.cmd(&["CLUSTER", "NODES"]).text());
}
