//! The reference doc "Cluster over TLS", sections 2 to 6, as a test that reads like the doc:
//! six TLS-only nodes configured as the doc configures them, a cluster created with
//! `redis-cli --tls --cluster create ... --cluster-replicas 1`, the checks that everything is
//! encrypted, the clients of section 5 and the reshard of section 6. Loopback stands in for the doc's two hosts; the
//! certificates come from a per-test CA with the doc's usages. (The replication lines of
//! sections 2 and 4 belong to the replication work and are not checked here.)

use std::process::Command;
use std::time::Duration;

use hotkv_test_support::tools::{ToolOutput, run_bounded};
use hotkv_test_support::{TestServer, free_port, wait_for};

use crate::builder;
use crate::pki::Pki;

const WAIT: Duration = Duration::from_secs(60);

/// Section 2: a node configured with the doc's directives (given as flags here, so the
/// harness can place the node's directory and log).
fn doc_node(pki: &Pki, tls_port: u16) -> TestServer {
    let (cert, key, ca) = (pki.dir.s("node.crt"), pki.dir.s("node.key"), pki.dir.s("ca.crt"));
    builder()
        .configs(&[
            ("bind", "127.0.0.1"),
            ("port", "0"),
            ("tls-port", &tls_port.to_string()),
            ("tls-cert-file", &cert),
            ("tls-key-file", &key),
            ("tls-ca-cert-file", &ca),
            ("tls-auth-clients", "yes"),
            ("tls-cluster", "yes"),
            ("tls-replication", "yes"),
            ("requirepass", "change-me"),
            ("cluster-enabled", "yes"),
            ("cluster-node-timeout", "2000"),
        ])
        .ready_without_ping()
        .spawn()
}

/// `redis-cli` with the doc's TLS options and `REDISCLI_AUTH`.
fn rcli(pki: &Pki, identity: (&str, &str), args: &[&str]) -> ToolOutput {
    rcli_within(pki, identity, args, WAIT)
}

/// [`rcli`] for a longer job: a 2000-slot reshard is some 12000 commands, each SETSLOT
/// saving nodes.conf, which takes a debug build on a loaded two-core machine past a minute.
fn rcli_within(pki: &Pki, identity: (&str, &str), args: &[&str], bound: Duration) -> ToolOutput {
    let mut cmd = Command::new("redis-cli");
    cmd.env("REDISCLI_AUTH", "change-me").args(pki.cli_args(Some(identity))).args(args);
    run_bounded(&mut cmd, None, bound)
}

#[test]
fn the_docs_tls_cluster_from_configuration_to_clients() {
    let pki = Pki::new();
    let ports: Vec<u16> = (0..6).map(|_| free_port()).collect();
    let nodes: Vec<TestServer> = std::thread::scope(|s| {
        let hs: Vec<_> = ports
            .iter()
            .map(|&p| {
                s.spawn({
                    let pki = &pki;
                    move || doc_node(pki, p)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });

    // Section 2: the log of a node says what it set up.
    let (cert, key) = (pki.dir.s("node.crt"), pki.dir.s("node.key"));
    for (n, port) in nodes.iter().zip(&ports) {
        let log = n.log();
        for line in [
            "Plain-text port disabled (port 0), serving TLS only".to_string(),
            format!("SSL context initialized (cert={cert}, key={key})"),
            "TLS on the cluster bus, other nodes verified against the CA".to_string(),
            format!("TLS enabled on 127.0.0.1:{port}"),
        ] {
            assert!(log.contains(&line), "missing {line:?} in:\n{log}");
        }
        let at = |l: &str| log.find(l).unwrap();
        assert!(
            at("SSL context initialized") < at("TLS on the cluster bus")
                && at("TLS on the cluster bus") < at("TLS enabled on")
        );
    }

    // Section 3: create the cluster.
    let node = ("node.crt", "node.key");
    let mut create = vec!["--cluster".to_string(), "create".to_string()];
    create.extend(ports.iter().map(|p| format!("127.0.0.1:{p}")));
    create.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
    let create: Vec<&str> = create.iter().map(String::as_str).collect();
    let out = rcli(&pki, node, &create).stdout;
    assert!(out.contains(">>> Performing hash slots allocation on 6 nodes..."), "{out}");
    assert!(out.contains("Master[0] -> Slots 0 - 5460"), "{out}");
    assert!(out.contains(">>> Sending CLUSTER MEET messages to join the cluster"), "{out}");
    assert!(out.contains("[OK] All nodes agree about slots configuration."), "{out}");
    assert!(out.contains("[OK] All 16384 slots covered."), "{out}");
    let first = ports[0].to_string();
    assert!(wait_for(
        || rcli(&pki, node, &["-p", &first, "CLUSTER", "INFO"]).stdout.contains("cluster_state:ok"),
        WAIT
    ));

    // Section 4: a plain connection to a client port or the bus port is closed, and logged.
    let bus = (ports[0] + 10000).to_string();
    for port in [&first, &bus] {
        let plain = run_bounded(Command::new("redis-cli").args(["-h", "127.0.0.1", "-p", port, "PING"]), None, WAIT);
        assert_eq!(plain.stderr.trim(), "Error: Server closed the connection", "{plain:?}");
    }
    let log = || nodes[0].log();
    assert!(wait_for(
        || log().contains("TLS handshake failed for client ")
            && log().contains(": wrong version number (SSL routines)"),
        WAIT
    ));
    assert!(
        wait_for(
            || log().contains(
                "Error accepting cluster node connection: wrong version number (SSL routines) (the TLS handshake from \
             127.0.0.1: tls-cluster is on here, the other nodes must use it too, with a certificate \
             tls-ca-cert-file trusts)"
            ),
            WAIT
        ),
        "{}",
        log()
    );
    // A TLS client that presents no certificate is refused too.
    let mut nocert = Command::new("redis-cli");
    nocert.args(["-h", "127.0.0.1", "-p", &first, "--tls", "--cacert", &pki.dir.s("ca.crt"), "PING"]);
    assert!(!run_bounded(&mut nocert, None, WAIT).stdout.contains("PONG"));
    assert!(wait_for(|| log().contains("peer did not return a certificate (SSL routines)"), WAIT));
    // The bus port speaks TLS: openssl with a node certificate sees TLS 1.3 and the node.
    let s_client = format!(
        "openssl s_client -connect 127.0.0.1:{bus} -CAfile {ca} -cert {cert} -key {key} -verify_return_error -brief \
         </dev/null 2>&1 | head -n 8",
        ca = pki.dir.s("ca.crt")
    );
    let brief = run_bounded(Command::new("sh").args(["-c", &s_client]), None, WAIT).stdout;
    assert!(brief.contains("CONNECTION ESTABLISHED"), "{brief}");
    assert!(brief.contains("Protocol version: TLSv1.3"), "{brief}");
    assert!(brief.contains("Peer certificate: CN=node1") || brief.contains("Peer certificate: CN = node1"), "{brief}");

    // Section 5: redis-cli with the application certificate follows redirects. (redis-cli's
    // create waits for the slots to agree, not the roles: the replicas it attached last
    // reach the first node with the gossip that follows, as on the doc's hosts.)
    assert!(wait_for(
        || rcli(&pki, node, &["-p", &first, "CLUSTER", "NODES"]).stdout.matches(" slave ").count() == 3,
        WAIT
    ));
    let app = ("app.crt", "app.key");
    let last = ports[5].to_string();
    assert_eq!(rcli(&pki, app, &["-c", "-p", &first, "SET", "greeting", "hello"]).stdout, "OK\n");
    assert_eq!(rcli(&pki, app, &["-c", "-p", &last, "GET", "greeting"]).stdout, "hello\n");
    // ...and so does redis-py's RedisCluster, verifying each node against its certificate.
    let script = format!(
        "from redis.cluster import RedisCluster\n\
         rc = RedisCluster(host='127.0.0.1', port={first}, password='change-me', ssl=True,\n\
             ssl_ca_certs='{ca}', ssl_certfile='{crt}', ssl_keyfile='{key}')\n\
         rc.set('greeting', 'hello from python')\n\
         print(rc.get('greeting'))\n\
         print(sorted(n.name for n in rc.get_nodes()))\n",
        ca = pki.dir.s("ca.crt"),
        crt = pki.dir.s("app.crt"),
        key = pki.dir.s("app.key"),
    );
    let py = run_bounded(Command::new("python3").args(["-c", &script]), None, WAIT);
    let mut names: Vec<String> = ports.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
    names.sort();
    assert_eq!(py.stdout, format!("b'hello from python'\n[{}]\n", names.join(", ")), "{}", py.stderr);

    // The Rust redis crate's cluster client over TLS, keys spread over every slot range.
    let read = |name: &str| std::fs::read(pki.dir.path(name)).unwrap();
    let certs = redis::TlsCertificates {
        client_tls: Some(redis::ClientTlsConfig { client_cert: read("app.crt"), client_key: read("app.key") }),
        root_cert: Some(read("ca.crt")),
    };
    let client = redis::cluster::ClusterClient::builder(vec![format!("rediss://127.0.0.1:{first}/")])
        .password("change-me")
        .certs(certs)
        .build()
        .unwrap();
    let mut con = client.get_connection().unwrap();
    for i in 0..100 {
        let _: () = redis::cmd("SET").arg(format!("rust:{i}")).arg(i).query(&mut con).unwrap();
    }
    let sum: i64 = (0..100).map(|i| redis::cmd("GET").arg(format!("rust:{i}")).query::<i64>(&mut con).unwrap()).sum();
    assert_eq!(sum, 4950);
    let greeting: String = redis::cmd("GET").arg("greeting").query(&mut con).unwrap();
    assert_eq!(greeting, "hello from python");

    // Section 6: reshard 2000 slots under TLS; the keys in those slots move with them, over
    // MIGRATE on the TLS client ports.
    let at = format!("127.0.0.1:{first}");
    let check = || rcli(&pki, node, &["--cluster", "check", &at]).stdout;
    let before = check();
    assert!(before.contains("[OK] 101 keys in 3 masters."), "{before}");
    let primaries: Vec<String> = rcli(&pki, node, &["-p", &first, "CLUSTER", "NODES"])
        .stdout
        .lines()
        .filter(|l| l.contains("master"))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect();
    let slots_of = |text: &str, id: &str| -> i64 {
        let line =
            text.lines().find(|l| l.contains(&id[..8]) && l.contains(" slots |")).unwrap_or_else(|| panic!("{text}"));
        line.split(" | ").nth(1).unwrap().trim_end_matches(" slots").parse().unwrap()
    };
    let (from, to) = (&primaries[0], &primaries[1]);
    let (from_before, to_before) = (slots_of(&before, from), slots_of(&before, to));
    let args = ["--cluster", "reshard", &at, "--cluster-from", from, "--cluster-to", to, "--cluster-slots", "2000"];
    let moved = rcli_within(&pki, node, &[&args[..], &["--cluster-yes"]].concat(), Duration::from_secs(400));
    let tail: Vec<&str> = moved.stdout.lines().rev().take(3).collect();
    assert!(tail.iter().all(|l| l.starts_with("Moving slot ") && l.contains(" from 127.0.0.1:")), "{}", moved.stdout);
    let after = check();
    assert!(after.contains("[OK] 101 keys in 3 masters."), "{after}");
    assert!(after.contains("[OK] All nodes agree about slots configuration."), "{after}");
    assert!(!after.contains("[WARNING]"), "open slots left behind: {after}");
    assert_eq!((slots_of(&after, from), slots_of(&after, to)), (from_before - 2000, to_before + 2000), "{after}");
    let sum: i64 = (0..100).map(|i| redis::cmd("GET").arg(format!("rust:{i}")).query::<i64>(&mut con).unwrap()).sum();
    assert_eq!(sum, 4950);
}
