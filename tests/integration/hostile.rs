//! Input that declares more than it carries, and bugs that must cost one connection only.
//! RESTORE payloads are signed with a valid CRC-64 (anyone can compute it), so every case
//! reaches the object decoder; the expected replies are redis-server 7.0.15's for the same
//! bytes, except where noted.

use std::time::Duration;

use hotkv_engine::rdb::finish;
use hotkv_test_support::{Frame, RawClient, wait_for};

use crate::{assert_err, info, info_field, server, server_with};

/// A listpack of `items`, as the RDB's listpack-encoded types carry it.
fn listpack(items: &[&[u8]]) -> Vec<u8> {
    let mut body = Vec::new();
    for it in items {
        body.push(0x80 | it.len() as u8);
        body.extend_from_slice(it);
        body.push(1 + it.len() as u8);
    }
    let mut lp = ((6 + body.len() + 1) as u32).to_le_bytes().to_vec();
    lp.extend_from_slice(&(items.len() as u16).to_le_bytes());
    lp.extend_from_slice(&body);
    lp.push(0xff);
    lp
}

/// `[type, 0x81, u64 BE length]`: an RDB length in its 8-byte form.
fn long_len(ty: u8, n: u64) -> Vec<u8> {
    let mut v = vec![ty, 0x81];
    v.extend_from_slice(&n.to_be_bytes());
    v
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// (name, object body, expected reply): the 40-byte payload and its cousins.
fn cases() -> Vec<(&'static str, Vec<u8>, Result<(), &'static str>)> {
    const BAD: Result<(), &str> = Err("ERR Bad data format");
    let lzf: &[u8] = &[0x00, b'a', 0xE0, 0x1E, 0x00];
    let lp = listpack(&[b"f", b"v"]);
    let lzf_claiming = |n: u64| concat(&[&[0x00, 0xC3, lzf.len() as u8, 0x81], &n.to_be_bytes(), lzf]);
    vec![
        ("an LZF string claiming 2^62 bytes", lzf_claiming(1 << 62), BAD),
        ("an LZF string claiming 2^32 + 40 bytes", lzf_claiming((1 << 32) + 40), BAD),
        // Redis and Valkey decompress nothing into an empty string.
        ("a zero-length LZF string", concat(&[&[0x00, 0xC3, lzf.len() as u8, 0x00], lzf]), Ok(())),
        ("a plain string claiming 2^32 + 5 bytes", concat(&[&long_len(0, (1 << 32) + 5), b"hello"]), BAD),
        ("a list claiming 2^62 elements", concat(&[&long_len(1, 1 << 62), &[1, b'x']]), BAD),
        // redis-server 7.0 sizes its dict from this count and stalls for seconds; hotkv must not.
        ("a set claiming 2^32 - 1 members", concat(&[&[2, 0x80], &u32::MAX.to_be_bytes(), &[1, b'x']]), BAD),
        ("a hash claiming 2^62 fields", concat(&[&long_len(4, 1 << 62), &[1, b'f', 1, b'v']]), BAD),
        ("a sorted set claiming 2^62 members", concat(&[&long_len(5, 1 << 62), &[1, b'm'], &1f64.to_le_bytes()]), BAD),
        ("a quicklist claiming 2^62 nodes", concat(&[&long_len(18, 1 << 62), &[2, lp.len() as u8], &lp]), BAD),
        ("a truncated nested listpack", concat(&[&[16, lp.len() as u8 - 3], &lp[..lp.len() - 3]]), BAD),
        (
            "a listpack whose header claims 1 GiB",
            concat(&[&[16, lp.len() as u8], &(1u32 << 30).to_le_bytes(), &lp[4..]]),
            BAD,
        ),
        (
            "an intset claiming 2^31 - 1 members",
            concat(&[&[11, 16], &8u32.to_le_bytes(), &0x7fff_ffffu32.to_le_bytes(), &5i64.to_le_bytes()]),
            BAD,
        ),
    ]
}

#[test]
fn restore_payloads_that_declare_more_than_they_carry_are_refused() {
    let srv = server();
    let mut c = srv.client();
    for (name, body, expected) in cases() {
        let reply = c.cmd(&[&b"RESTORE"[..], b"k", b"0", &finish(body), b"REPLACE"]);
        match expected {
            Ok(()) => assert_eq!(reply, Frame::ok(), "{name}"),
            Err(e) => assert_err(&reply, e),
        }
        assert_eq!(srv.cmd(&["PING"]), Frame::simple("PONG"), "the server stopped answering after {name}");
    }
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk(""), "the zero-length LZF string restored empty");
}

#[test]
fn a_panic_in_one_command_closes_only_its_connection() {
    let srv = server_with(&[("enable-debug-command", "yes")]);
    let mut bystander = srv.client();
    let mut victim = srv.client();
    let victim_id = victim.cmd(&["CLIENT", "ID"]).int();
    victim.send(&["DEBUG", "CLIENT-PANIC"]);
    assert!(victim.closed_within(Duration::from_secs(5)), "the panicking connection stayed open");
    assert_eq!(bystander.cmd(&["PING"]), Frame::simple("PONG"));
    // No ghost: the client is gone from CLIENT LIST and from the counts.
    let gone = wait_for(
        || !bystander.cmd(&["CLIENT", "LIST"]).text().contains(&format!("id={victim_id} ")),
        Duration::from_secs(5),
    );
    assert!(gone, "{}", bystander.cmd(&["CLIENT", "LIST"]).text());
    assert_eq!(info_field(&info(&mut bystander, "clients"), "connected_clients").as_deref(), Some("1"));
    assert!(srv.wait_for_log("command=debug", Duration::from_secs(5)), "{}", srv.log());
    assert!(srv.log().contains("bug: panic"), "{}", srv.log());
    // And new clients are served as before.
    assert_eq!(RawClient::connect(srv.port()).cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn a_bulk_header_alone_does_not_reserve_its_length() {
    let srv = server();
    let mut big = srv.client();
    let big_id = big.cmd(&["CLIENT", "ID"]).int();
    // 500 MB declared, 1 byte sent: the buffer grows with what arrives, not with the claim
    // (an argument up to 1 MiB is reserved whole, as Valkey reserves any).
    big.send_raw(b"*2\r\n$4\r\nECHO\r\n$500000000\r\nx");
    let mut other = srv.client();
    let mut line = || {
        let list = other.cmd(&["CLIENT", "LIST"]).text();
        list.lines().find(|l| l.starts_with(&format!("id={big_id} "))).map(str::to_owned)
    };
    let mut seen = None;
    assert!(wait_for(
        || {
            seen = line();
            seen.as_deref().is_some_and(|l| !l.contains(" qbuf=0 "))
        },
        Duration::from_secs(5)
    ));
    let line = seen.unwrap();
    let free: u64 = line.split(' ').find_map(|f| f.strip_prefix("qbuf-free=")).unwrap().parse().unwrap();
    assert!(free < 1 << 20, "{line}");
    // Completing the argument still works.
    let arg = vec![b'y'; 499_999_999];
    big.send_raw(&arg);
    big.send_raw(b"\r\n");
    big.set_timeout(Duration::from_secs(60));
    let reply = big.read_frame();
    assert_eq!(reply.text_lossy().len(), 500_000_000);
}
