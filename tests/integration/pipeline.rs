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
