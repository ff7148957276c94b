//! `unixsocket`, `unixsocketperm` and `unixsocketgroup`: clients over a unix domain socket in
//! the test's own temp dir (a raw client, redis-cli -s, redis-benchmark -s, redis-py), what
//! CLIENT LIST says of them, the socket file's mode and group, a stale file replaced at start,
//! the file removed at shutdown, and a path that cannot be bound.

use std::io::{BufReader, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use hotkv_test_support::tools::{python, run_bounded};
use hotkv_test_support::{Frame, IO_TIMEOUT, TestServer, encode_command, read_frame, wait_for};

use crate::{assert_err_prefix, builder};

/// The socket's file name in the server's temp dir.
const SOCK: &str = "hotkv.sock";

/// A server on its usual loopback port that also listens on `<its temp dir>/hotkv.sock`
/// (an absolute path, as a deployment would give). `extra` gives more directives; it runs in
/// the temp dir before the server starts, so it may also put files there.
fn unix_server(extra: impl Fn(&Path) -> String + 'static) -> TestServer {
    builder()
        .config_file("hotkv.conf", move |port, dir| {
            format!(
                "port {port}\nbind 127.0.0.1 -::1\ndir {d}\nunixsocket {d}/{SOCK}\n{}\n",
                extra(dir),
                d = dir.display()
            )
        })
        .spawn()
}

/// No extra directives.
fn plain(_: &Path) -> String {
    String::new()
}

fn sock_path(srv: &TestServer) -> PathBuf {
    srv.dir().join(SOCK)
}

/// A blocking RESP client over a unix socket, with bounded reads and writes.
struct UnixClient {
    reader: BufReader<UnixStream>,
}

impl UnixClient {
    #[track_caller]
    fn connect(path: &Path) -> UnixClient {
        let stream = UnixStream::connect(path).unwrap_or_else(|e| panic!("connect to {}: {e}", path.display()));
        stream.set_read_timeout(Some(IO_TIMEOUT)).expect("read timeout");
        stream.set_write_timeout(Some(IO_TIMEOUT)).expect("write timeout");
        UnixClient { reader: BufReader::new(stream) }
    }

    #[track_caller]
    fn send(&mut self, args: &[&str]) {
        self.reader.get_mut().write_all(&encode_command(args)).expect("send");
    }

    #[track_caller]
    fn read(&mut self) -> Frame {
        read_frame(&mut self.reader).expect("reply")
    }

    #[track_caller]
    fn cmd(&mut self, args: &[&str]) -> Frame {
        self.send(args);
        self.read()
    }
}

#[test]
fn a_unix_client_pings_sets_gets_and_pipelines() {
    let srv = unix_server(plain);
    let mut c = UnixClient::connect(&sock_path(&srv));
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
    assert_eq!(c.cmd(&["SET", "k", "over the socket"]), Frame::ok());
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("over the socket"));
    // A pipeline in one write, answered in order.
    let mut batch = Vec::new();
    for i in 0..200 {
        batch.extend(encode_command(&["SET", &format!("p{i}"), &i.to_string()]));
        batch.extend(encode_command(&["INCR", &format!("p{i}")]));
    }
    c.reader.get_mut().write_all(&batch).expect("pipeline");
    for i in 0..200 {
        assert_eq!(c.read(), Frame::ok());
        assert_eq!(c.read(), Frame::Integer(i + 1));
    }
    // Same keyspace as the TCP clients.
    assert_eq!(srv.cmd(&["GET", "p199"]), Frame::bulk("200"));
}

#[test]
fn unix_clients_speak_resp3_and_use_transactions_pubsub_and_blocking_commands() {
    let srv = unix_server(plain);
    let path = sock_path(&srv);
    let mut c = UnixClient::connect(&path);
    assert_eq!(c.cmd(&["MULTI"]), Frame::ok());
    assert_eq!(c.cmd(&["SET", "t", "1"]), Frame::simple("QUEUED"));
    assert_eq!(c.cmd(&["INCR", "t"]), Frame::simple("QUEUED"));
    assert_eq!(c.cmd(&["EXEC"]), Frame::Array(vec![Frame::ok(), Frame::Integer(2)]));

    // A RESP3 subscriber gets its messages as push frames.
    let mut tcp = srv.client();
    let mut sub = UnixClient::connect(&path);
    let hello = sub.cmd(&["HELLO", "3"]);
    assert!(matches!(hello, Frame::Map(_)), "HELLO 3 gives a RESP3 map: {hello}");
    let subscribed = sub.cmd(&["SUBSCRIBE", "news"]);
    assert_eq!(subscribed, Frame::Push(vec![Frame::bulk("subscribe"), Frame::bulk("news"), Frame::Integer(1)]));
    assert_eq!(tcp.cmd(&["PUBLISH", "news", "hello"]), Frame::Integer(1));
    assert_eq!(sub.read(), Frame::Push(vec![Frame::bulk("message"), Frame::bulk("news"), Frame::bulk("hello")]));

    let mut blocked = UnixClient::connect(&path);
    blocked.send(&["BLPOP", "queue", "5"]);
    assert!(
        wait_for(|| tcp.cmd(&["INFO", "clients"]).text().contains("blocked_clients:1"), Duration::from_secs(5)),
        "BLPOP over the unix socket did not block"
    );
    assert_eq!(tcp.cmd(&["LPUSH", "queue", "job"]), Frame::Integer(1));
    assert_eq!(blocked.read(), Frame::Array(vec![Frame::bulk("queue"), Frame::bulk("job")]));
}

#[test]
fn client_list_names_the_socket_path_with_port_zero_and_the_u_flag() {
    let srv = unix_server(plain);
    let path = sock_path(&srv);
    let want = format!("addr={p}:0 laddr={p}:0 ", p = path.display());
    let mut c = UnixClient::connect(&path);
    let info = c.cmd(&["CLIENT", "INFO"]).text();
    assert!(info.contains(&want), "{info}");
    assert!(info.contains(" flags=U "), "{info}");
    // Seen from a TCP client, with its own flags unchanged.
    let list = srv.cmd(&["CLIENT", "LIST"]).text();
    let line = list.lines().find(|l| l.contains(&want)).unwrap_or_else(|| panic!("no unix client in {list}"));
    assert!(line.contains(" flags=U "), "{line}");
    assert!(list.lines().any(|l| l.contains("addr=127.0.0.1:") && l.contains(" flags=N ")), "{list}");
    // CLIENT KILL ADDR matches the same text.
    let killed = srv.cmd(&["CLIENT", "KILL", "ADDR", &format!("{}:0", path.display())]);
    assert_eq!(killed, Frame::Integer(1));
    assert!(read_frame(&mut c.reader).is_err(), "the killed unix client is still connected");
}

#[test]
fn requirepass_applies_to_unix_clients() {
    let srv = unix_server(|_| "requirepass s3cret".into());
    let mut c = UnixClient::connect(&sock_path(&srv));
    assert_err_prefix(&c.cmd(&["GET", "k"]), "NOAUTH");
    assert_eq!(c.cmd(&["AUTH", "s3cret"]), Frame::ok());
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn redis_cli_and_redis_benchmark_connect_with_dash_s() {
    let srv = unix_server(plain);
    let path = sock_path(&srv).display().to_string();
    let cli = |args: &[&str]| {
        let out = run_bounded(Command::new("redis-cli").arg("-s").arg(&path).args(args), None, IO_TIMEOUT);
        assert!(out.status.success(), "redis-cli {args:?}: {}", out.stderr);
        out.stdout
    };
    assert_eq!(cli(&["SET", "k", "via redis-cli"]), "OK\n");
    assert_eq!(cli(&["GET", "k"]), "via redis-cli\n");
    assert!(cli(&["CLIENT", "INFO"]).contains(&format!("addr={path}:0")));
    let bench = run_bounded(
        Command::new("redis-benchmark").args(["-s", &path, "-n", "2000", "-c", "4", "-P", "8", "-t", "set,get", "-q"]),
        None,
        Duration::from_secs(60),
    );
    assert!(bench.status.success(), "redis-benchmark -s failed: {}", bench.stderr);
    assert!(bench.stdout.contains("SET:") && bench.stdout.contains("GET:"), "{}", bench.stdout);
}

#[test]
fn redis_py_connects_over_the_unix_socket() {
    let srv = unix_server(plain);
    let code = format!(
        "r = redis.Redis(unix_socket_path={:?}, socket_timeout=10)\n\
         assert isinstance(r.connection_pool.get_connection('ping'), redis.UnixDomainSocketConnection)\n\
         r.set('k', 'from python')\n\
         print(r.get('k').decode())",
        sock_path(&srv).display().to_string()
    );
    assert_eq!(python(srv.port(), &code), "from python\n");
}

#[test]
fn unixsocketperm_and_unixsocketgroup_are_applied_and_config_get_shows_them() {
    // The group of the server's temp dir, which this process just created, is one it may give
    // a file it owns (by number here; a name needs a named group, which a bare container may
    // not have).
    let srv =
        unix_server(|dir| format!("unixsocketperm 700\nunixsocketgroup {}", dir.metadata().map_or(0, |m| m.gid())));
    let gid = srv.dir().metadata().expect("temp dir").gid();
    let meta = sock_path(&srv).metadata().expect("the socket file exists");
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert_eq!(meta.gid(), gid);
    let path = sock_path(&srv).display().to_string();
    let got = srv.cmd(&["CONFIG", "GET", "unixsocket*"]);
    let pairs: Vec<(String, String)> = got.pairs().iter().map(|(k, v)| (k.text(), v.text())).collect();
    assert!(pairs.contains(&("unixsocket".into(), path.clone())), "{pairs:?}");
    assert!(pairs.contains(&("unixsocketperm".into(), "700".into())), "{pairs:?}");
    assert!(pairs.contains(&("unixsocketgroup".into(), gid.to_string())), "{pairs:?}");
    // Start-only, as in Valkey.
    assert_err_prefix(&srv.cmd(&["CONFIG", "SET", "unixsocket", "/tmp/elsewhere.sock"]), "ERR CONFIG SET failed");
}

#[test]
fn a_stale_socket_file_is_replaced_at_start() {
    // A socket file nobody listens on, as a killed server leaves behind.
    let srv = unix_server(|dir| {
        drop(UnixListener::bind(dir.join(SOCK)).expect("bind the stale socket"));
        String::new()
    });
    let mut c = UnixClient::connect(&sock_path(&srv));
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn shutdown_removes_the_socket_file() {
    let mut srv = unix_server(plain);
    let path = sock_path(&srv);
    assert!(path.exists());
    let mut c = UnixClient::connect(&path);
    c.send(&["SHUTDOWN", "NOSAVE"]);
    let status = srv.wait_exit(Duration::from_secs(10)).expect("the server exits after SHUTDOWN");
    assert!(status.success(), "{status}");
    assert!(!path.exists(), "{} is still there", path.display());
    assert!(srv.log().contains("Removing the unix socket file."), "{}", srv.log());
}

#[test]
fn a_unix_socket_alone_is_enough_to_serve() {
    // port 0 and a path relative to the working directory (the temp dir): the server starts,
    // logs Valkey's ready line for the unix listener, and names the socket as configured.
    let srv = builder().config("port", "0").config("unixsocket", SOCK).ready_without_ping().spawn();
    assert!(srv.log().contains("Ready to accept connections unix"), "{}", srv.log());
    let mut c = UnixClient::connect(&sock_path(&srv));
    assert!(c.cmd(&["CLIENT", "INFO"]).text().contains(&format!("addr={SOCK}:0 laddr={SOCK}:0 ")));
}

#[test]
fn a_socket_path_that_cannot_be_bound_is_fatal() {
    // A directory that does not exist inside the server's own temp dir.
    let run = builder().config("unixsocket", "missing/hotkv.sock").run_to_exit(Duration::from_secs(10));
    assert_eq!(run.code(), Some(1), "stdout:\n{}", run.stdout);
    assert!(
        run.stdout.contains("Failed opening Unix socket: bind: No such file or directory"),
        "stdout:\n{}",
        run.stdout
    );
}
