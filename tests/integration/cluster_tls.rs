//! A cluster whose bus is mutual TLS, as the reference doc builds it: redis-cli --tls creates
//! it, clients are told the port of their own kind, and a node without a certificate the CA
//! signed, or without TLS on its bus, never joins and is logged on both ends.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hotkv_test_support::tools::run_bounded;
use hotkv_test_support::{Frame, TestServer, free_port, wait_for};

use crate::cluster::one_cluster_at_a_time;
use crate::pki::{Ca, Pki};
use crate::{assert_err, builder};
use rcgen::ExtendedKeyUsagePurpose as Eku;

/// A TLS cluster node: a plain port (for the harness), a TLS port, the bus on TLS at a port
/// of its own. `cert`/`key` name files in the PKI dir.
fn tls_node(pki: &Pki, cert: &str, key: &str, ca: &str) -> (TestServer, u16) {
    tls_node_with(pki, cert, key, ca, &[])
}

/// [`tls_node`] with more directives.
fn tls_node_with(pki: &Pki, cert: &str, key: &str, ca: &str, extra: &[(&str, &str)]) -> (TestServer, u16) {
    let tls_port = free_port();
    let mut b = builder()
        .config("tls-port", &tls_port.to_string())
        .config("tls-cert-file", &pki.dir.s(cert))
        .config("tls-key-file", &pki.dir.s(key))
        .config("tls-ca-cert-file", &pki.dir.s(ca))
        .config("tls-cluster", "yes")
        .config("cluster-port", &free_port().to_string())
        .config("cluster-enabled", "yes")
        .config("cluster-node-timeout", "1000");
    for (k, v) in extra {
        b = b.config(k, v);
    }
    (b.spawn(), tls_port)
}

/// `n` TLS nodes started in parallel, node `i` with `node{i}.crt`/`node{i}.key` and the CA
/// file `ca{i}.crt` (each node its own files, so each can be renewed on its own), `extra(i)`
/// added to its directives.
fn tls_nodes(
    pki: &Pki,
    n: usize,
    extra: impl Fn(usize) -> Vec<(&'static str, String)> + Sync,
) -> Vec<(TestServer, u16)> {
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let extra = &extra;
                s.spawn(move || {
                    let more = extra(i);
                    let more: Vec<(&str, &str)> = more.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    tls_node_with(pki, &format!("node{i}.crt"), &format!("node{i}.key"), &format!("ca{i}.crt"), &more)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// `redis-cli --tls --cluster create` over the nodes' TLS ports.
fn create(pki: &Pki, nodes: &[(TestServer, u16)], replicas: usize) {
    let addrs: Vec<String> = nodes.iter().map(|(_, t)| format!("127.0.0.1:{t}")).collect();
    let replicas = replicas.to_string();
    let mut args = vec!["--cluster", "create"];
    args.extend(addrs.iter().map(String::as_str));
    args.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
    let out = cli(pki, &args);
    assert!(out.contains("[OK] All 16384 slots covered."), "{out}");
}

/// CLUSTER CERTS of a node, one map (flat array in RESP2) per node.
fn certs(n: &TestServer) -> Vec<Frame> {
    n.cmd(&["CLUSTER", "CERTS"]).items().to_vec()
}

/// A field of a CLUSTER CERTS row, as text.
fn field(row: &Frame, key: &str) -> String {
    row.field(key).unwrap_or_else(|| panic!("no {key} in {row}")).text_lossy()
}

/// Whether every node's CLUSTER CERTS lists `n` nodes and `ok` holds for every row.
fn all_certs(nodes: &[(TestServer, u16)], n: usize, ok: impl Fn(&Frame) -> bool) -> bool {
    nodes.iter().all(|(s, _)| {
        let rows = certs(s);
        rows.len() == n && rows.iter().all(&ok)
    })
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
    assert!(
        good.wait_for_log(&accept_line("tlsv1 alert unknown ca (SSL routines)"), Duration::from_secs(10)),
        "{}",
        good.log()
    );
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

#[test]
fn cluster_certs_shows_every_node_certificate_and_follows_each_reload() {
    let pki = Pki::new();
    // Node 1's certificate ends in 3 days: flagged everywhere, and its own log says so.
    let leaves = [
        pki.ca.node("node0"),
        pki.ca.issue("node1", &[Eku::ServerAuth, Eku::ClientAuth], -1, 3, None),
        pki.ca.node("node2"),
    ];
    for (i, l) in leaves.iter().enumerate() {
        pki.dir.write(&format!("node{i}.crt"), &l.cert);
        pki.dir.write(&format!("node{i}.key"), &l.key);
        pki.dir.write(&format!("ca{i}.crt"), &pki.ca.pem);
    }
    // Node 2 reloads by itself when its files change.
    let nodes = tls_nodes(&pki, 3, |i| if i == 2 { vec![("tls-auto-reload-interval", "1".into())] } else { vec![] });
    create(&pki, &nodes, 0);
    let ids: Vec<String> = nodes.iter().map(|(n, _)| n.cmd(&["CLUSTER", "MYID"]).text()).collect();
    let agree = |serials: &[String]| {
        all_certs(&nodes, 3, |row| {
            ids.iter().position(|id| *id == field(row, "id")).is_some_and(|i| field(row, "serial") == serials[i])
        })
    };
    let serials: Vec<String> = leaves.iter().map(|l| l.serial.clone()).collect();
    assert!(wait_for(|| agree(&serials), Duration::from_secs(10)), "{:?}", certs(&nodes[0].0));

    let (first, first_tls) = (&nodes[0].0, nodes[0].1);
    let rows = certs(first);
    assert_eq!(field(&rows[0], "id"), first.cmd(&["CLUSTER", "MYID"]).text(), "this node first");
    let keys: Vec<String> = rows[0].pairs().iter().map(|(k, _)| k.text_lossy()).collect();
    assert_eq!(
        keys,
        [
            "id",
            "addr",
            "flags",
            "link",
            "serial",
            "fingerprint",
            "not-after",
            "ca-serial",
            "ca-fingerprint",
            "ca-not-after",
            "expires-soon"
        ]
    );
    assert_eq!(
        field(&rows[0], "addr"),
        format!("127.0.0.1:{}@{}", first.port(), first.cmd(&["CONFIG", "GET", "cluster-port"]).items()[1].text())
    );
    assert_eq!(field(&rows[0], "flags"), "myself,master");
    let ca = hotkv_tls::CertInfo::parse(&pem_der(&pki.ca.pem)).unwrap();
    for row in &rows {
        assert_eq!(field(row, "link"), "connected", "{row}");
        assert_eq!(field(row, "ca-serial"), ca.serial);
        assert_eq!(field(row, "ca-fingerprint"), ca.fingerprint_text());
        assert_eq!(row.field("ca-not-after").unwrap().int(), ca.not_after);
        let i = ids.iter().position(|id| *id == field(row, "id")).unwrap();
        let leaf = hotkv_tls::CertInfo::parse(&pem_der(&leaves[i].cert)).unwrap();
        assert_eq!(field(row, "fingerprint"), leaf.fingerprint_text());
        assert_eq!(row.field("not-after").unwrap().int(), leaf.not_after);
        assert_eq!(field(row, "expires-soon"), if i == 1 { "yes" } else { "no" }, "{row}");
    }
    // The node whose certificate ends this week warns, naming the file, serial and expiry.
    let warning = format!(
        "TLS server certificate expires in less than 7 days (file={}, subject=CN=node1, serial={}, not_after=",
        pki.dir.s("node1.crt"),
        leaves[1].serial
    );
    assert!(nodes[1].0.log().contains(&warning), "{}", nodes[1].0.log());
    // RESP3: a map per node; TLS clients see TLS ports.
    let mut c = first.client();
    c.cmd(&["HELLO", "3"]);
    assert!(matches!(c.cmd(&["CLUSTER", "CERTS"]).items()[0], Frame::Map(_)));
    let tls_view = cli(&pki, &["-p", &first_tls.to_string(), "CLUSTER", "CERTS"]);
    assert!(tls_view.contains(&format!("127.0.0.1:{first_tls}@")), "{tls_view}");
    assert!(first.cmd(&["CLUSTER", "HELP"]).text_lossy().contains("CERTS"));

    // Renewals: node 1 by CONFIG SET (same path), node 2 by replacing its files.
    let mut serials = serials;
    let renewed = pki.ca.issue("node1", &[Eku::ServerAuth, Eku::ClientAuth], -1, 365, Some(&leaves[1].key));
    pki.dir.write("node1.crt", &renewed.cert);
    assert_eq!(nodes[1].0.cmd(&["CONFIG", "SET", "tls-cert-file", &pki.dir.s("node1.crt")]), Frame::ok());
    serials[1] = renewed.serial.clone();
    let renewed2 = pki.ca.node("node2");
    pki.dir.write("node2.key", &renewed2.key);
    pki.dir.write("node2.crt", &renewed2.cert);
    serials[2] = renewed2.serial.clone();
    assert!(wait_for(|| agree(&serials), Duration::from_secs(15)), "{:?}", certs(first));
    assert!(certs(first).iter().all(|r| field(r, "expires-soon") == "no"));
    // The whole cluster from one command, as redis-cli shows it.
    let call = cli(&pki, &["--cluster", "call", &format!("127.0.0.1:{first_tls}"), "CLUSTER", "CERTS"]);
    for s in &serials {
        assert!(call.matches(s.as_str()).count() >= 3, "every node reports {s}: {call}");
    }
}

/// The DER of the first certificate of a PEM text.
fn pem_der(pem: &str) -> hotkv_tls::rustls::pki_types::CertificateDer<'static> {
    use hotkv_tls::rustls::pki_types::pem::PemObject;
    hotkv_tls::rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

/// What the node that opens a refused bus link logs, in the doc's words.
fn dial_line(handshake_id: &str, bus_port: &str, reason: &str) -> String {
    format!(
        "Cluster: the TLS bus link to node {handshake_id} at 127.0.0.1:{bus_port} failed: {reason} (the TLS \
         handshake: it must have tls-cluster yes, and a certificate tls-ca-cert-file trusts)"
    )
}

/// What the node that accepts a refused bus link logs, in the doc's words.
fn accept_line(reason: &str) -> String {
    format!(
        "Error accepting cluster node connection: {reason} (the TLS handshake from 127.0.0.1: tls-cluster is on \
         here, the other nodes must use it too, with a certificate tls-ca-cert-file trusts)"
    )
}

/// The ids in a node's CLUSTER NODES, handshakes in progress left out.
fn known_ids(n: &TestServer) -> std::collections::BTreeSet<String> {
    let text = n.cmd(&["CLUSTER", "NODES"]).text();
    text.lines()
        .filter(|l| !l.split(' ').nth(2).is_some_and(|f| f.split(',').any(|f| f == "handshake")))
        .filter_map(|l| l.split(' ').next().map(str::to_owned))
        .collect()
}

/// The bus port of a node.
fn bus_of(n: &TestServer) -> String {
    n.cmd(&["CONFIG", "GET", "cluster-port"]).items()[1].text()
}

/// `from` meets `to` and the handshake node's id, as `from`'s table shows it at once.
fn meet(from: &TestServer, to: &TestServer) -> String {
    assert_eq!(from.cmd(&["CLUSTER", "MEET", "127.0.0.1", &to.port().to_string(), &bus_of(to)]), Frame::ok());
    let table = from.cmd(&["CLUSTER", "NODES"]).text();
    let line = table.lines().find(|l| l.contains(" handshake") || l.contains(",handshake")).unwrap_or_else(|| {
        panic!("no handshake node right after CLUSTER MEET: {table}");
    });
    line.split(' ').next().unwrap().to_owned()
}

/// Waits until both logs hold their line, checking at every look that neither node's table
/// gained a node; then until the handshake gave up, so both tables are back as they were.
fn refused_both_ends(a: &TestServer, a_line: &str, b: &TestServer, b_line: &str) {
    let (a_ids, b_ids) = (known_ids(a), known_ids(b));
    let unchanged = || {
        assert_eq!(known_ids(a), a_ids, "{}", a.cmd(&["CLUSTER", "NODES"]).text());
        assert_eq!(known_ids(b), b_ids, "{}", b.cmd(&["CLUSTER", "NODES"]).text());
        true
    };
    let logged =
        wait_for(|| unchanged() && a.log().contains(a_line) && b.log().contains(b_line), Duration::from_secs(10));
    assert!(logged, "expected\n  {a_line}\nin\n{}\nand\n  {b_line}\nin\n{}", a.log(), b.log());
    let tables = |n: &TestServer, ids: &std::collections::BTreeSet<String>| {
        n.cmd(&["CLUSTER", "NODES"]).text().lines().count() == ids.len()
    };
    assert!(wait_for(|| unchanged() && tables(a, &a_ids) && tables(b, &b_ids), Duration::from_secs(10)));
}

/// A node that serves slots 0-16383 alone, as the cluster a newcomer is introduced to.
fn lone_cluster(pki: &Pki, extra: &[(&str, &str)]) -> TestServer {
    let (good, _) = tls_node_with(pki, "node.crt", "node.key", "ca.crt", extra);
    assert_eq!(good.cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]), Frame::ok());
    assert!(wait_for(|| good.cmd(&["CLUSTER", "INFO"]).text().contains("cluster_state:ok"), Duration::from_secs(10)));
    good
}

#[test]
fn an_expired_certificate_is_refused_on_the_bus_both_ways_and_nothing_joins() {
    let pki = Pki::new();
    let good = lone_cluster(&pki, &[]);
    let expired = pki.ca.issue("expired", &[Eku::ServerAuth, Eku::ClientAuth], -30, -1, None);
    pki.dir.write("expired.crt", &expired.cert);
    pki.dir.write("expired.key", &expired.key);
    let (old, _) = tls_node(&pki, "expired.crt", "expired.key", "ca.crt");
    // The cluster meets the node with the expired certificate: the doc's two lines.
    let id = meet(&good, &old);
    refused_both_ends(
        &good,
        &dial_line(&id, &bus_of(&old), "certificate verify failed (SSL routines): certificate has expired"),
        &old,
        &accept_line("ssl/tls alert certificate expired (SSL routines)"),
    );
    // The node with the expired certificate meets the cluster: refused the other way round.
    let id = meet(&old, &good);
    refused_both_ends(
        &good,
        &accept_line("certificate verify failed (SSL routines): certificate has expired"),
        &old,
        &dial_line(&id, &bus_of(&good), "ssl/tls alert certificate expired (SSL routines)"),
    );
}

#[test]
fn a_server_auth_only_certificate_is_refused_by_the_other_nodes() {
    let pki = Pki::new();
    let good = lone_cluster(&pki, &[]);
    let server_only = pki.ca.issue("server-only", &[Eku::ServerAuth], -1, 365, None);
    pki.dir.write("server-only.crt", &server_only.cert);
    pki.dir.write("server-only.key", &server_only.key);
    let (newcomer, _) = tls_node(&pki, "server-only.crt", "server-only.key", "ca.crt");
    assert!(
        newcomer.log().contains(
            "The TLS certificate used for outgoing links has no clientAuth extended key usage: other nodes will \
             refuse it; issue it with serverAuth and clientAuth, or set tls-client-cert-file"
        ),
        "{}",
        newcomer.log()
    );
    // Introduced as redis-cli --cluster add-node does: the newcomer meets the cluster.
    let id = meet(&newcomer, &good);
    refused_both_ends(
        &good,
        &accept_line("certificate verify failed (SSL routines): unsupported certificate purpose"),
        &newcomer,
        &dial_line(&id, &bus_of(&good), "ssl/tls alert unsupported certificate (SSL routines)"),
    );
}

#[test]
fn tls_expected_peer_name_refuses_a_mismatch_both_ways_and_applies_from_the_next_connection() {
    let pki = Pki::new();
    // The node certificates name localhost and 127.0.0.1, not other.example.com.
    let good = lone_cluster(&pki, &[("tls-expected-peer-name", "other.example.com")]);
    let (newcomer, _) = tls_node(&pki, "node.crt", "node.key", "ca.crt");
    // The node with the name check dials: it refuses the certificate it is shown.
    let id = meet(&good, &newcomer);
    refused_both_ends(
        &good,
        &dial_line(&id, &bus_of(&newcomer), "certificate verify failed (SSL routines): hostname mismatch"),
        &newcomer,
        &accept_line("ssl/tls alert bad certificate (SSL routines)"),
    );
    // It accepts: it refuses the certificate the dialler presents.
    let id = meet(&newcomer, &good);
    refused_both_ends(
        &good,
        &accept_line("certificate verify failed (SSL routines): hostname mismatch"),
        &newcomer,
        &dial_line(&id, &bus_of(&good), "ssl/tls alert bad certificate (SSL routines)"),
    );
    // A name the certificates carry, at runtime: the next connection is let in.
    assert_eq!(good.cmd(&["CONFIG", "SET", "tls-expected-peer-name", "localhost"]), Frame::ok());
    meet(&newcomer, &good);
    let joined = |n: &TestServer| {
        let text = n.cmd(&["CLUSTER", "NODES"]).text();
        text.lines().count() == 2
            && text.lines().all(|l| l.contains(" connected"))
            && !text.contains("handshake")
            && n.cmd(&["CLUSTER", "INFO"]).text().contains("cluster_state:ok")
    };
    assert!(
        wait_for(|| joined(&good) && joined(&newcomer), Duration::from_secs(10)),
        "{}",
        good.cmd(&["CLUSTER", "NODES"]).text()
    );
    // A name they do not carry: the links already up keep working (pongs keep arriving, nobody
    // is suspected), and the next connection, a third node's, is refused.
    assert_eq!(good.cmd(&["CONFIG", "SET", "tls-expected-peer-name", "other.example.com"]), Frame::ok());
    let pongs = |n: &TestServer| {
        let info = n.cmd(&["CLUSTER", "INFO"]).text();
        crate::info_field(&info, "cluster_stats_messages_pong_received").map_or(0, |v| v.parse::<i64>().unwrap())
    };
    let before = pongs(&good);
    let (third, _) = tls_node(&pki, "node.crt", "node.key", "ca.crt");
    let id = meet(&third, &good);
    refused_both_ends(
        &good,
        &accept_line("certificate verify failed (SSL routines): hostname mismatch"),
        &third,
        &dial_line(&id, &bus_of(&good), "ssl/tls alert bad certificate (SSL routines)"),
    );
    // Pongs come about once a second per link; the bound is generous for a loaded machine.
    assert!(wait_for(|| pongs(&good) >= before + 3, Duration::from_secs(30)), "{}", good.log());
    for n in [&good, &newcomer] {
        let text = n.cmd(&["CLUSTER", "NODES"]).text();
        assert!(joined(n) && !text.contains("fail"), "{text}");
    }
}

/// The SHA-256 fingerprint of the first certificate of a PEM text, as CLUSTER CERTS prints it.
fn fingerprint_of(pem: &str) -> String {
    hotkv_tls::CertInfo::parse(&pem_der(pem)).unwrap().fingerprint_text()
}

/// Sets keys one after the other on the primaries (routed by slot, following MOVED) until
/// `stop`; returns what was acknowledged and every reply that was neither OK nor MOVED.
fn write_until(stop: &AtomicBool, entry: u16) -> (Vec<(String, String)>, Vec<String>) {
    let mut router = SlotRouter::new(entry);
    let (mut acked, mut unexpected) = (Vec::new(), Vec::new());
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let (key, value) = (format!("rotation:{i}"), format!("value-{i}"));
        i += 1;
        match router.cmd(&["SET", &key, &value]) {
            Ok(Frame::Simple(s)) if s == "OK" => acked.push((key, value)),
            Ok(other) => unexpected.push(format!("SET {key}: {other}")),
            Err(e) => unexpected.push(format!("SET {key}: {e}")),
        }
    }
    (acked, unexpected)
}

/// A tiny cluster client over plain ports: a slot map from CLUSTER SLOTS, MOVED followed.
struct SlotRouter {
    owners: Vec<u16>,
    conns: std::collections::HashMap<u16, hotkv_test_support::RawClient>,
}

impl SlotRouter {
    fn new(entry: u16) -> SlotRouter {
        let mut owners = vec![entry; 16384];
        let slots = hotkv_test_support::RawClient::connect(entry).cmd(&["CLUSTER", "SLOTS"]);
        for range in slots.items() {
            let r = range.items();
            let port = r[2].items()[1].int() as u16;
            for slot in r[0].int()..=r[1].int() {
                owners[slot as usize] = port;
            }
        }
        SlotRouter { owners, conns: Default::default() }
    }

    fn cmd(&mut self, args: &[&str]) -> std::io::Result<Frame> {
        let slot = usize::from(hotkv_engine::slot::key_slot(args[1].as_bytes()));
        for _ in 0..3 {
            let port = self.owners[slot];
            let conn = match self.conns.entry(port) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(hotkv_test_support::RawClient::try_connect(port)?)
                }
            };
            let reply = conn.try_cmd(args);
            if reply.is_err() {
                self.conns.remove(&port);
            }
            let reply = reply?;
            match reply.error_text() {
                Some(e) if e.starts_with("MOVED ") => {
                    let to = e.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(port);
                    self.owners[slot] = to;
                }
                _ => return Ok(reply),
            }
        }
        Ok(Frame::error("too many redirects"))
    }
}

/// Polls every node's CLUSTER NODES until `stop`; returns how many rounds it made and every
/// line that showed a node as failing (`fail?` or `fail`).
fn watch_until(stop: &AtomicBool, ports: &[u16]) -> (usize, Vec<String>) {
    let mut conns: Vec<_> = ports.iter().map(|p| hotkv_test_support::RawClient::connect(*p)).collect();
    let (mut rounds, mut failing) = (0, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        for (port, c) in ports.iter().zip(&mut conns) {
            let text = c.cmd(&["CLUSTER", "NODES"]).text();
            for line in text.lines() {
                let flags = line.split(' ').nth(2).unwrap_or("");
                if flags.split(',').any(|f| f == "fail?" || f == "fail") {
                    failing.push(format!("node at port {port} after {rounds} rounds: {line}"));
                }
            }
        }
        rounds += 1;
        // The polling cadence: a look at every node about every 20 ms, or sooner at the end.
        wait_for(|| stop.load(Ordering::Relaxed), Duration::from_millis(20));
    }
    (rounds, failing)
}

/// Sets the flag when dropped, also while a failed assertion unwinds.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// `INFO tls` tls_generation: it grows with every configuration swapped in.
fn tls_generation(n: &TestServer) -> i64 {
    crate::info_num(&crate::info(&mut n.client(), "tls"), "tls_generation")
}

#[test]
fn a_ca_rotation_on_a_running_cluster_under_writes_needs_no_restart_and_fails_no_node() {
    let began = std::time::Instant::now();
    let pki = Pki::new();
    // The new CA carries the old one's name, as a reissued CA often does: only fingerprints
    // tell them apart.
    let new_ca = Ca::new("hotkv test CA");
    let (old_fp, new_fp) = (fingerprint_of(&pki.ca.pem), fingerprint_of(&new_ca.pem));
    for i in 0..6 {
        let leaf = pki.ca.node(&format!("node{i}"));
        pki.dir.write(&format!("node{i}.crt"), &leaf.cert);
        pki.dir.write(&format!("node{i}.key"), &leaf.key);
        pki.dir.write(&format!("ca{i}.crt"), &pki.ca.pem);
    }
    // Nodes 0-2 are reloaded by CONFIG SET, nodes 3-5 reload by themselves when files change.
    let auto = |i: usize| i >= 3;
    let nodes = tls_nodes(&pki, 6, |i| if auto(i) { vec![("tls-auto-reload-interval", "1".into())] } else { vec![] });
    create(&pki, &nodes, 1);
    let settled = |n: &TestServer| {
        let text = n.cmd(&["CLUSTER", "NODES"]).text();
        text.lines().count() == 6
            && text.lines().all(|l| l.contains(" connected"))
            && text.lines().filter(|l| l.split(' ').nth(2).is_some_and(|f| f.contains("slave"))).count() == 3
            && n.cmd(&["CLUSTER", "INFO"]).text().contains("cluster_state:ok")
    };
    let tables = || nodes.iter().map(|(n, _)| n.cmd(&["CLUSTER", "NODES"]).text()).collect::<Vec<_>>().join("\n");
    assert!(wait_for(|| nodes.iter().all(|(n, _)| settled(n)), Duration::from_secs(15)), "{}", tables());
    assert!(wait_for(|| all_certs(&nodes, 6, |r| field(r, "ca-fingerprint") == old_fp), Duration::from_secs(10)));

    // Reloads node `i`: CONFIG SET of `directives` (paths unchanged) or, for the nodes that
    // reload by themselves, a wait until a new configuration is in force.
    let reload = |i: usize, directives: &[&str], before: i64| {
        let n = &nodes[i].0;
        if auto(i) {
            assert!(wait_for(|| tls_generation(n) > before, Duration::from_secs(10)), "node {i} did not reload");
            return;
        }
        let mut args = vec!["CONFIG".to_owned(), "SET".to_owned()];
        for d in directives {
            args.push((*d).to_owned());
            args.push(n.cmd(&["CONFIG", "GET", d]).items()[1].text());
        }
        assert_eq!(n.cmd(&args), Frame::ok(), "node {i}");
    };
    let generations = || nodes.iter().map(|(n, _)| tls_generation(n)).collect::<Vec<_>>();
    let ports: Vec<u16> = nodes.iter().map(|(n, _)| n.port()).collect();
    let stop = AtomicBool::new(false);
    let (acked, unexpected, rounds, failing) = std::thread::scope(|s| {
        // A failed assertion below still stops the load, or the scope would wait for it forever.
        let _stop = StopOnDrop(&stop);
        let writer = s.spawn(|| write_until(&stop, ports[0]));
        let watcher = s.spawn(|| watch_until(&stop, &ports));

        // 1. Every node trusts both CAs.
        for (i, before) in generations().into_iter().enumerate() {
            pki.dir.write(&format!("ca{i}.crt"), format!("{}{}", pki.ca.pem, new_ca.pem));
            reload(i, &["tls-ca-cert-file"], before);
        }
        // Each node still reports the CA that signed its certificate: the old one.
        for (n, _) in &nodes {
            assert_eq!(field(&certs(n)[0], "ca-fingerprint"), old_fp);
        }

        // 2. Every node moves to a certificate from the new CA.
        let mut serials = Vec::new();
        for (i, before) in generations().into_iter().enumerate() {
            let leaf = new_ca.node(&format!("node{i}"));
            pki.dir.write(&format!("node{i}.key"), &leaf.key);
            pki.dir.write(&format!("node{i}.crt"), &leaf.cert);
            serials.push(leaf.serial);
            reload(i, &["tls-cert-file", "tls-key-file"], before);
        }
        // Every node hears of every node's new certificate and CA.
        let moved = |r: &Frame| field(r, "ca-fingerprint") == new_fp && serials.contains(&field(r, "serial"));
        assert!(wait_for(|| all_certs(&nodes, 6, moved), Duration::from_secs(15)), "{:?}", certs(&nodes[0].0));

        // 3. Every node drops the old CA.
        for (i, before) in generations().into_iter().enumerate() {
            pki.dir.write(&format!("ca{i}.crt"), &new_ca.pem);
            reload(i, &["tls-ca-cert-file"], before);
        }

        // New links use the new material only: a node still on the old CA is refused...
        let stale = pki.ca.node("stale");
        pki.dir.write("stale.crt", &stale.cert);
        pki.dir.write("stale.key", &stale.key);
        pki.dir.write("both.crt", format!("{}{}", pki.ca.pem, new_ca.pem));
        let (stranger, _) = tls_node(&pki, "stale.crt", "stale.key", "both.crt");
        let id = meet(&stranger, &nodes[0].0);
        // The trusted CA has the stale certificate's issuer name but not its key, so the
        // chain fails on the signature (OpenSSL's words too, when there is no key identifier
        // to tell the CAs apart), not for want of an issuer.
        refused_both_ends(
            &nodes[0].0,
            &accept_line("certificate verify failed (SSL routines): certificate signature failure"),
            &stranger,
            &dial_line(&id, &bus_of(&nodes[0].0), "tlsv1 alert decrypt error (SSL routines)"),
        );
        // ...and one on the new CA joins: its links, both ways, are all made after the last step.
        let fresh = new_ca.node("fresh");
        pki.dir.write("fresh.crt", &fresh.cert);
        pki.dir.write("fresh.key", &fresh.key);
        pki.dir.write("new-ca.crt", &new_ca.pem);
        let (newcomer, _) = tls_node(&pki, "fresh.crt", "fresh.key", "new-ca.crt");
        meet(&newcomer, &nodes[0].0);
        let everyone = |n: &TestServer| {
            let text = n.cmd(&["CLUSTER", "NODES"]).text();
            text.lines().count() == 7 && text.lines().all(|l| l.contains(" connected"))
        };
        assert!(
            wait_for(|| everyone(&newcomer) && nodes.iter().all(|(n, _)| everyone(n)), Duration::from_secs(15)),
            "{}",
            newcomer.cmd(&["CLUSTER", "NODES"]).text()
        );
        let seven = certs(&newcomer);
        assert_eq!(seven.len(), 7);
        assert!(seven.iter().all(|r| field(r, "ca-fingerprint") == new_fp), "{seven:?}");

        stop.store(true, Ordering::Relaxed);
        let (acked, unexpected) = writer.join().unwrap();
        let (rounds, failing) = watcher.join().unwrap();
        (acked, unexpected, rounds, failing)
    });
    assert!(failing.is_empty(), "a node was flagged failing during the rotation:\n{}", failing.join("\n"));
    assert!(rounds >= 20, "the watcher looked only {rounds} times");
    assert!(unexpected.is_empty(), "writes refused during the rotation:\n{}", unexpected.join("\n"));
    assert!(acked.len() >= 100, "only {} writes acknowledged", acked.len());
    let mut router = SlotRouter::new(ports[0]);
    for (key, value) in &acked {
        assert_eq!(router.cmd(&["GET", key]).unwrap(), Frame::bulk(value), "{key}");
    }
    for (i, (n, _)) in nodes.iter().enumerate() {
        assert!(n.log().contains("TLS configuration reloaded"), "node {i}");
        assert_eq!(n.pid(), nodes[i].0.pid(), "no restart");
    }
    let took = began.elapsed();
    eprintln!(
        "CA rotation: {} writes acknowledged and read back, {rounds} rounds of CLUSTER NODES on 6 nodes, {took:?}",
        acked.len()
    );
    assert!(took < Duration::from_secs(60), "the rotation test took {took:?}");
}

#[test]
fn a_tls_link_still_in_its_handshake_is_listed_as_valkey_lists_a_connecting_link() {
    // Valkey's links test pauses a node and expects CLUSTER LINKS to show the new link to it
    // at once: over TLS the handshake with a paused node cannot finish.
    let pki = Pki::new();
    let good = lone_cluster(&pki, &[("cluster-node-timeout", "60000")]);
    // Accepts TCP (the kernel does) and never answers the TLS handshake.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let meet = good.cmd(&["CLUSTER", "MEET", "127.0.0.1", &free_port().to_string(), &silent_port.to_string()]);
    assert_eq!(meet, Frame::ok());
    let table = good.cmd(&["CLUSTER", "NODES"]).text();
    let id = table.lines().find(|l| l.contains("handshake")).unwrap().split(' ').next().unwrap().to_owned();
    let listed = || {
        good.cmd(&["CLUSTER", "LINKS"]).items().iter().any(|l| {
            l.field("node").is_some_and(|n| n.text() == id)
                && l.field("direction").is_some_and(|d| d.text() == "to")
                && l.field("create-time").is_some_and(|t| t.int() > 0)
        })
    };
    assert!(wait_for(listed, Duration::from_secs(10)), "{}", good.cmd(&["CLUSTER", "LINKS"]));
}
