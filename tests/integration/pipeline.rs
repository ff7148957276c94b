//! Pipelining: many commands in one write, replies in order; pipelines larger than the socket
//! buffers; a command split over many writes.

use std::io::Write;
use std::time::Duration;

use hotkv_test_support::Frame;

use crate::{ok, redis_conn, server};

fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

#[test]
fn a_thousand_commands_in_one_write_get_a_thousand_replies_in_order() {
    let srv = server();
    let mut c = srv.client();
    // Every reply is distinct, so one out of order or missing is caught where it happens.
    let mut batch = Vec::new();
    let mut expected = Vec::new();
    for i in 0..1000 {
        let n = i.to_string();
        match i % 3 {
            0 => {
                batch.extend(encode(&["SET", &format!("k{i}"), &n]));
                expected.push(Frame::ok());
            }
            1 => {
                batch.extend(encode(&["GET", &format!("k{}", i - 1)]));
                expected.push(Frame::bulk((i - 1).to_string()));
            }
            _ => {
                batch.extend(encode(&["ECHO", &format!("msg-{n}")]));
                expected.push(Frame::bulk(format!("msg-{n}")));
            }
        }
    }
    c.send_raw(&batch);
    for (i, want) in expected.iter().enumerate() {
        assert_eq!(&c.read_frame(), want, "reply #{i}");
    }
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"), "nothing extra was queued");
}

#[test]
fn inline_and_multibulk_commands_mix_in_one_pipeline() {
    let srv = server();
    let mut c = srv.client();
    let mut batch = b"PING\r\n".to_vec();
    batch.extend(encode(&["SET", "k", "v"]));
    batch.extend_from_slice(b"GET k\r\n");
    batch.extend(encode(&["ECHO", "done"]));
    c.send_raw(&batch);
    assert_eq!(c.read_frame(), Frame::simple("PONG"));
    assert_eq!(c.read_frame(), Frame::ok());
    assert_eq!(c.read_frame(), Frame::bulk("v"));
    assert_eq!(c.read_frame(), Frame::bulk("done"));
}

#[test]
fn a_pipeline_larger_than_the_socket_buffers_completes() {
    let srv = server();
    let mut c = srv.client();
    let value = "x".repeat(1024);
    ok(&mut c, &["SET", "big", &value]);
    // 20k GETs of 1 KiB answer with ~20 MiB: far more than socket buffers hold, so writing
    // must go on while replies are read, as a real pipelining client does.
    const N: usize = 20_000;
    let mut writer = c.writer_clone().expect("clone the socket");
    let get = encode(&["GET", "big"]);
    let sender = std::thread::spawn(move || {
        for _ in 0..N / 100 {
            writer.write_all(&get.repeat(100)).expect("write pipeline");
        }
    });
    c.set_timeout(Duration::from_secs(30));
    for i in 0..N {
        match c.read_frame() {
            Frame::Bulk(b) if b.len() == 1024 => {}
            other => panic!("reply #{i}: {other}"),
        }
    }
    sender.join().expect("writer thread");
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn a_command_split_across_many_writes_is_reassembled() {
    let srv = server();
    let mut c = srv.client();
    let cmd = encode(&["SET", "key", "hello world"]);
    for byte in &cmd {
        c.send_raw(std::slice::from_ref(byte));
    }
    assert_eq!(c.read_frame(), Frame::ok());
    for byte in b"GET key\r\n" {
        c.send_raw(std::slice::from_ref(byte));
    }
    assert_eq!(c.read_frame(), Frame::bulk("hello world"));
}

#[test]
fn the_redis_crate_pipeline_returns_every_reply() {
    let srv = server();
    let mut con = redis_conn(&srv);
    let mut pipe = redis::pipe();
    for i in 0..100 {
        pipe.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
    }
    for i in 0..100 {
        pipe.cmd("GET").arg(format!("k{i}"));
    }
    let values: Vec<i64> = pipe.query(&mut con).unwrap();
    assert_eq!(values, (0..100).collect::<Vec<i64>>());
}

/// What moves a plain client off its event loop onto a task of its own (a blocked command in
/// the middle of a pipeline, SUBSCRIBE after a command, a transaction afterwards) and what
/// ends it there (replies still owed to a client that closed its writing side): served the
/// same way with the event loops (`event-loop yes`, the default) as with a task per client.
fn clients_leave_the_loop_at_the_exact_point_they_reached(event_loop: &str) {
    let srv = crate::server_with(&[("event-loop", event_loop)]);
    let mut a = srv.client();
    let mut b = srv.client();
    let mut batch = encode(&["SET", "k", "1"]);
    batch.extend(encode(&["BLPOP", "q", "10"]));
    batch.extend(encode(&["INCR", "k"]));
    a.send_raw(&batch);
    assert_eq!(a.read_frame(), Frame::simple("OK"));
    // The INCR waits behind the BLPOP, so k is still 1 until the push.
    let blocked = || crate::info_num(&crate::info(&mut b, "clients"), "blocked_clients") == 1;
    assert!(hotkv_test_support::wait_for(blocked, Duration::from_secs(10)));
    assert_eq!(b.cmd(&["GET", "k"]), Frame::bulk("1"));
    assert_eq!(b.cmd(&["RPUSH", "q", "x"]), Frame::Integer(1));
    assert_eq!(a.read_frame(), Frame::Array(vec![Frame::bulk("q"), Frame::bulk("x")]));
    assert_eq!(a.read_frame(), Frame::Integer(2));
    ok(&mut a, &["MULTI"]);
    assert_eq!(a.cmd(&["INCR", "k"]), Frame::simple("QUEUED"));
    assert_eq!(a.cmd(&["EXEC"]), Frame::Array(vec![Frame::Integer(3)]));

    let mut sub = srv.client();
    let mut batch = encode(&["PING"]);
    batch.extend(encode(&["SUBSCRIBE", "ch"]));
    sub.send_raw(&batch);
    assert_eq!(sub.read_frame(), Frame::simple("PONG"));
    assert_eq!(sub.read_frame(), Frame::Array(vec![Frame::bulk("subscribe"), Frame::bulk("ch"), Frame::Integer(1)]));
    assert_eq!(b.cmd(&["PUBLISH", "ch", "m"]), Frame::Integer(1));
    assert_eq!(sub.read_frame(), Frame::Array(vec![Frame::bulk("message"), Frame::bulk("ch"), Frame::bulk("m")]));

    let mut closing = srv.client();
    let mut batch = Vec::new();
    for i in 0..100 {
        batch.extend(encode(&["SET", &format!("c{i}"), &i.to_string()]));
    }
    closing.send_raw(&batch);
    closing.shutdown_write();
    for _ in 0..100 {
        assert_eq!(closing.read_frame(), Frame::simple("OK"));
    }
    assert!(closing.closed_within(Duration::from_secs(10)));
    assert_eq!(b.cmd(&["GET", "c99"]), Frame::bulk("99"));
    assert_eq!(crate::config_get(&mut b, "event-loop"), event_loop);
}

#[test]
fn clients_leave_the_event_loop_at_the_exact_point_they_reached() {
    clients_leave_the_loop_at_the_exact_point_they_reached("yes");
}

#[test]
fn a_task_per_client_serves_the_same_with_event_loop_no() {
    clients_leave_the_loop_at_the_exact_point_they_reached("no");
}
