//! `maxmemory-clients` against the real binary: the client whose query buffer or pending reply
//! takes all clients over the limit is closed, largest first, CLIENT NO-EVICT clients never,
//! and INFO, CLIENT LIST and the log say so as Valkey's do.

use std::time::Duration;

use hotkv_test_support::{Frame, RawClient, TestServer, wait_for};

use crate::{assert_err, ok, server, server_with};

const WAIT: Duration = Duration::from_secs(10);

/// A client that CLIENT NO-EVICT protects, to watch the others with.
fn control(s: &TestServer) -> RawClient {
    let mut c = s.client();
    ok(&mut c, &["CLIENT", "NO-EVICT", "on"]);
    c
}

fn evicted_clients(c: &mut RawClient) -> i64 {
    let text = c.cmd(&["INFO", "stats"]).text();
    text.lines().find_map(|l| l.strip_prefix("evicted_clients:")).and_then(|v| v.trim().parse().ok()).unwrap()
}

fn client_id(c: &mut RawClient) -> String {
    c.cmd(&["CLIENT", "ID"]).int().to_string()
}

/// Whether the client `id` is still connected.
fn connected(ctl: &mut RawClient, id: &str) -> bool {
    !ctl.cmd(&["CLIENT", "LIST", "ID", id]).text().trim().is_empty()
}

/// Sends the start of a SET whose value never completes: `bytes` of it wait in the query buffer.
/// The value is declared one byte longer than that, since its declared size is reserved (up
/// to 1 MiB) as soon as its header arrives.
fn partial_set(c: &mut RawClient, bytes: usize) {
    c.send_raw(format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${}\r\n", bytes + 1).as_bytes());
    for _ in 0..bytes / 8192 {
        if c.try_send_raw(&[b'x'; 8192]).is_err() {
            return;
        }
    }
}

#[test]
fn the_largest_client_over_the_limit_is_evicted_and_the_rest_stay() {
    let s = server();
    let mut ctl = control(&s);
    ok(&mut ctl, &["CONFIG", "SET", "maxmemory-clients", "300kb"]);
    let (mut small, mut big) = (s.client(), s.client());
    let (small_id, big_id) = (client_id(&mut small), client_id(&mut big));
    partial_set(&mut small, 16 << 10);
    partial_set(&mut big, 512 << 10);
    assert!(wait_for(|| !connected(&mut ctl, &big_id), WAIT), "{}", ctl.cmd(&["CLIENT", "LIST"]).text());
    assert!(big.closed_within(WAIT));
    assert!(connected(&mut ctl, &small_id));
    assert_eq!(evicted_clients(&mut ctl), 1);
    assert!(wait_for(|| s.log().contains(&format!("Evicting client: id={big_id} addr=")), WAIT), "{}", s.log());
    // What eviction counts shows as tot-mem, and the other clients go on.
    let line = ctl.cmd(&["CLIENT", "LIST", "ID", &small_id]).text();
    let tot: usize = line.split(' ').find_map(|f| f.strip_prefix("tot-mem=")).unwrap().parse().unwrap();
    assert!(tot >= 16 << 10, "{line}");
    assert_eq!(s.client().cmd(&["PING"]).text(), "PONG");
}

#[test]
fn a_reply_that_takes_the_clients_over_the_limit_is_never_sent() {
    let s = server();
    let mut ctl = control(&s);
    let value = "v".repeat(1 << 20);
    ok(&mut ctl, &["SET", "big", &value]);
    ok(&mut ctl, &["CONFIG", "SET", "maxmemory-clients", "200kb"]);
    let mut reader = s.client();
    reader.send(&["GET", "big"]);
    assert!(reader.closed_within(WAIT), "the 1 MB reply was sent");
    assert_eq!(evicted_clients(&mut ctl), 1);
    // Without the limit the same read is answered.
    ok(&mut ctl, &["CONFIG", "SET", "maxmemory-clients", "0"]);
    let mut reader = s.client();
    assert_eq!(reader.cmd(&["GET", "big"]).text().len(), 1 << 20);
}

#[test]
fn no_evict_clients_count_but_stay_and_a_percentage_follows_maxmemory() {
    let s = server();
    let mut ctl = control(&s);
    // 10% of 3 MB: 300 KB.
    ok(&mut ctl, &["CONFIG", "SET", "maxmemory", "3mb"]);
    ok(&mut ctl, &["CONFIG", "SET", "maxmemory-clients", "10%"]);
    assert_eq!(ctl.cmd(&["CONFIG", "GET", "maxmemory-clients"]).text_lossy(), r#"["maxmemory-clients", "10%"]"#);
    let mut kept = control(&s);
    let kept_id = client_id(&mut kept);
    partial_set(&mut kept, 512 << 10);
    assert!(
        wait_for(|| s.log().contains("Over client maxmemory after evicting all evictable clients"), WAIT),
        "{}",
        s.log()
    );
    assert!(connected(&mut ctl, &kept_id));
    assert_eq!(evicted_clients(&mut ctl), 0);
    // The protected client's memory still counts: the next evictable client to report goes.
    let mut other = s.client();
    let _ = other.try_cmd(&["PING"]);
    assert!(other.closed_within(WAIT));
    let evictions = || s.log().lines().filter(|l| l.contains("Evicting client")).collect::<Vec<_>>().join("\n");
    assert_eq!(evicted_clients(&mut ctl), 1, "{}", evictions());
    assert!(connected(&mut ctl, &kept_id));
    // Off again: nothing is evicted, however big.
    ok(&mut ctl, &["CONFIG", "SET", "maxmemory-clients", "0"]);
    let mut fine = s.client();
    assert_eq!(fine.cmd(&["PING"]).text(), "PONG");
    assert_eq!(evicted_clients(&mut ctl), 1);
}

#[test]
fn bad_values_are_refused_with_valkeys_texts() {
    let s = server();
    let mut c = s.client();
    for (v, why) in [
        ("200%", "percentage argument must be less or equal to 100"),
        ("x", "argument must be a memory or percent value"),
    ] {
        let e = c.cmd(&["CONFIG", "SET", "maxmemory-clients", v]).text_lossy();
        assert!(e.contains(why), "{v}: {e}");
    }
}

/// A field of the CLIENT LIST line of client `id`.
fn client_field(ctl: &mut RawClient, id: &str, field: &str) -> usize {
    let line = ctl.cmd(&["CLIENT", "LIST", "ID", id]).text();
    let prefix = format!("{field}=");
    line.split(' ').find_map(|f| f.strip_prefix(prefix.as_str())).unwrap_or_else(|| panic!("{line}")).parse().unwrap()
}

#[test]
fn qbuf_counts_a_big_argument_from_its_payload_as_valkey_does() {
    // Valkey's client-eviction "client no-evict" tests wait for exactly this.
    let s = server();
    let mut ctl = control(&s);
    let mut c = s.client();
    let id = client_id(&mut c);
    let n = 100_000;
    c.send_raw(format!("*1\r\n${n}\r\n").as_bytes());
    c.send_raw(&vec![b'v'; n]);
    assert!(wait_for(|| client_field(&mut ctl, &id, "qbuf") == n, WAIT), "{}", ctl.cmd(&["CLIENT", "LIST"]).text());
    // The buffer holds the argument and its CRLF, not twice the argument.
    let free = client_field(&mut ctl, &id, "qbuf-free");
    assert!(free < 64, "qbuf-free={free}");
    // A small partial command counts whole.
    let mut small = s.client();
    let small_id = client_id(&mut small);
    small.send_raw(b"*2\r\n$3\r\nGET\r\n$10\r\nabc");
    assert!(wait_for(|| client_field(&mut ctl, &small_id, "qbuf") == 21, WAIT));
}

#[test]
fn reply_buffer_shrinks_when_idle_and_grows_when_busy() {
    // Valkey's unit/replybufsize, with INFO's counts.
    let s = server_with(&[("enable-debug-command", "yes")]);
    let mut ctl = control(&s);
    ok(&mut ctl, &["DEBUG", "REPLYBUFFER", "PEAK-RESET-TIME", "100"]);
    let mut c = s.client();
    let id = client_id(&mut c);
    assert_eq!(client_field(&mut ctl, &id, "rbs"), 16384, "a new client's size");
    let rbs = |ctl: &mut RawClient| client_field(ctl, &id, "rbs");
    assert!(wait_for(|| (1024..2046).contains(&rbs(&mut ctl)), WAIT), "idle: rbs={}", rbs(&mut ctl));
    ok(&mut ctl, &["SET", "bigval", &"x".repeat(32 * 1024)]);
    ok(&mut ctl, &["DEBUG", "REPLYBUFFER", "PEAK-RESET-TIME", "never"]);
    let grown = wait_for(
        || {
            c.cmd(&["GET", "bigval"]);
            (16384..32768).contains(&rbs(&mut ctl))
        },
        WAIT,
    );
    assert!(grown, "busy: rbs={}", rbs(&mut ctl));
    c.cmd(&["GET", "bigval"]);
    assert_eq!(client_field(&mut ctl, &id, "rbp"), 16384, "a full buffer's peak is its size");
    let stats = crate::info(&mut ctl, "stats");
    assert!(crate::info_num(&stats, "reply_buffer_shrinks") >= 1, "{stats}");
    assert!(crate::info_num(&stats, "reply_buffer_expands") >= 4, "{stats}");
    ok(&mut ctl, &["DEBUG", "REPLYBUFFER", "PEAK-RESET-TIME", "reset"]);
}

#[test]
fn replybuffer_resizing_off_keeps_every_size() {
    let s = server_with(&[("enable-debug-command", "yes")]);
    let mut ctl = control(&s);
    ok(&mut ctl, &["DEBUG", "REPLYBUFFER", "RESIZING", "0"]);
    ok(&mut ctl, &["DEBUG", "REPLYBUFFER", "PEAK-RESET-TIME", "10"]);
    let mut c = s.client();
    let id = client_id(&mut c);
    // Several cron rounds with resets due: nothing moves.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!((client_field(&mut ctl, &id, "rbs"), client_field(&mut ctl, &id, "rbp")), (16384, 16384));
    ok(&mut ctl, &["DEBUG", "REPLYBUFFER", "RESIZING", "1"]);
    assert!(wait_for(|| client_field(&mut ctl, &id, "rbs") == 1024, WAIT));
    assert_err(
        &ctl.cmd(&["DEBUG", "REPLYBUFFER", "SIZE", "1"]),
        "ERR unknown subcommand or wrong number of arguments for 'REPLYBUFFER'. Try DEBUG HELP.",
    );
}

#[test]
fn a_limit_set_by_config_set_counts_idle_clients_and_evicts_before_it_answers() {
    let s = server();
    let mut ctl = control(&s);
    // Three idle clients, measured while no limit is set.
    let mut clients: Vec<(RawClient, String, usize)> = Vec::new();
    for size in [64 << 10, 256 << 10, 1 << 20] {
        let mut c = s.client();
        let id = client_id(&mut c);
        partial_set(&mut c, size);
        assert!(
            wait_for(|| client_field(&mut ctl, &id, "tot-mem") >= size, WAIT),
            "{}",
            ctl.cmd(&["CLIENT", "LIST"]).text()
        );
        clients.push((c, id, size));
    }
    let tot = |ctl: &mut RawClient, id: &str| client_field(ctl, id, "tot-mem");
    let ctl_id = client_id(&mut ctl);
    let (small, middle) = (tot(&mut ctl, &clients[0].1), tot(&mut ctl, &clients[1].1));
    // Room for the control client and the two smaller ones: only the largest goes, and it is
    // gone when CONFIG SET answers (no client acted since).
    let limit = tot(&mut ctl, &ctl_id) + small + middle + (32 << 10);
    ok(&mut ctl, &["CONFIG", "SET", "maxmemory-clients", &limit.to_string()]);
    assert!(!connected(&mut ctl, &clients[2].1));
    assert!(connected(&mut ctl, &clients[0].1) && connected(&mut ctl, &clients[1].1));
    assert_eq!(evicted_clients(&mut ctl), 1);
    assert!(clients[2].0.closed_within(WAIT));
    // Lower: the middle one goes next, largest first.
    ok(&mut ctl, &["CONFIG", "SET", "maxmemory-clients", &(limit - middle).to_string()]);
    assert!(!connected(&mut ctl, &clients[1].1));
    assert!(connected(&mut ctl, &clients[0].1));
    assert_eq!(evicted_clients(&mut ctl), 2);
}

/// The query buffer a thread lends a client for one read is not that client's memory, as
/// Valkey's shared query buffer is not: counting it made a client that runs CONFIG SET or
/// CLIENT LIST 16 KiB larger than it is, and eviction take one client too many. A buffer that
/// holds part of a command is the client's own and counts.
#[test]
fn the_threads_shared_query_buffer_is_not_a_clients_memory() {
    let s = server();
    let mut ctl = control(&s);
    ok(&mut ctl, &["CONFIG", "SET", "maxmemory-clients", "10mb"]);
    let mut c = s.client();
    let id = client_id(&mut c);
    let own = c.cmd(&["CLIENT", "LIST", "ID", &id]).text();
    let field = |line: &str| -> usize {
        line.split_whitespace().find_map(|f| f.strip_prefix("tot-mem=")).unwrap().parse().unwrap()
    };
    assert!(field(&own) < 16 << 10, "{own}");
    let idle = client_field(&mut ctl, &id, "tot-mem");
    assert!(idle < 16 << 10, "{idle}");
    // Half a command waits in the buffer: now it is the client's.
    c.send_raw(b"*2\r\n$3\r\nGET\r\n");
    assert!(wait_for(|| client_field(&mut ctl, &id, "tot-mem") > idle, WAIT));
    c.send_raw(b"$1\r\nk\r\n");
    assert_eq!(c.read_frame(), Frame::NullBulk);
}

/// Replies queued because the client read slowly leave the server's memory once sent, even
/// while the client keeps part of a command in its query buffer (which kept the drained queue
/// at its largest until the cron found the client idle, counted nowhere).
#[test]
fn a_drained_output_queue_gives_its_memory_back_at_once() {
    let s = server();
    let mut c = s.client();
    ok(&mut c, &["SET", "v", &"x".repeat(100_000)]);
    let used = |c: &mut RawClient| -> i64 {
        let text = c.cmd(&["INFO", "memory"]).text();
        text.lines().find_map(|l| l.strip_prefix("used_memory:")).unwrap().trim().parse().unwrap()
    };
    let before = used(&mut c);
    // 20 MB of replies, more than the socket buffers take, then half a PING.
    let mut burst = Vec::new();
    for _ in 0..200 {
        burst.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$1\r\nv\r\n");
    }
    burst.extend_from_slice(b"*1\r\n$4\r\nPI");
    let mut writer = c.writer_clone().unwrap();
    let sender = std::thread::spawn(move || std::io::Write::write_all(&mut writer, &burst).unwrap());
    for _ in 0..200 {
        assert_eq!(c.read_frame().text().len(), 100_000);
    }
    sender.join().unwrap();
    c.send_raw(b"NG\r\n");
    assert_eq!(c.read_frame(), Frame::simple("PONG"));
    let after = used(&mut c);
    assert!(after - before < 1 << 20, "used_memory {before} before, {after} after");
}

/// Sends `GET big` `n` times without reading a reply.
fn unread_gets(c: &mut RawClient, n: usize) {
    for _ in 0..n {
        c.send(&["GET", "big"]);
    }
}

#[test]
fn a_client_that_does_not_read_is_still_served_and_its_replies_wait_in_order() {
    let s = server();
    let mut ctl = control(&s);
    let value = "v".repeat(1 << 20);
    ok(&mut ctl, &["SET", "big", &value]);
    let mut lazy = s.client();
    let id = client_id(&mut lazy);
    // Far more than the socket buffers hold: the server reads on and queues the replies
    // (CLIENT LIST omem and tot-mem), as Valkey's reply list does.
    unread_gets(&mut lazy, 40);
    lazy.send(&["CLIENT", "SETNAME", "still-read"]);
    assert!(
        wait_for(|| client_field(&mut ctl, &id, "omem") > 10 << 20, WAIT),
        "{}",
        ctl.cmd(&["CLIENT", "LIST"]).text()
    );
    assert!(client_field(&mut ctl, &id, "tot-mem") > 10 << 20);
    assert!(wait_for(|| ctl.cmd(&["CLIENT", "LIST", "ID", &id]).text().contains(" name=still-read "), WAIT));
    // Every reply arrives, whole and in order, and the queue empties.
    for _ in 0..40 {
        assert_eq!(lazy.read_frame().text().len(), 1 << 20);
    }
    assert_eq!(lazy.read_frame().text(), "OK");
    assert!(wait_for(|| client_field(&mut ctl, &id, "omem") == 0, WAIT));
    assert_eq!(lazy.cmd(&["PING"]).text(), "PONG");
}

#[test]
fn replies_still_queued_reach_a_client_that_closed_its_writing_side() {
    let s = server();
    let mut ctl = control(&s);
    ok(&mut ctl, &["SET", "big", &"v".repeat(1 << 20)]);
    let mut c = s.client();
    unread_gets(&mut c, 30);
    c.send(&["PING"]);
    c.shutdown_write();
    for _ in 0..30 {
        assert_eq!(c.read_frame().text().len(), 1 << 20);
    }
    assert_eq!(c.read_frame().text(), "PONG");
    assert!(c.closed_within(WAIT));
}

#[test]
fn the_output_limit_closes_a_client_that_does_not_read_and_no_evict_protects_it_only_from_eviction() {
    let s = server();
    let mut ctl = control(&s);
    ok(&mut ctl, &["SET", "big", &"v".repeat(1 << 20)]);
    ok(&mut ctl, &["CONFIG", "SET", "client-output-buffer-limit", "normal 8mb 0 0"]);
    let mut lazy = s.client();
    unread_gets(&mut lazy, 40);
    assert!(lazy.closed_within(WAIT), "the unread replies passed the output limit");
    assert!(wait_for(|| s.log().contains("scheduled to be closed ASAP for overcoming of output buffer limits"), WAIT));
    // Without an output limit, a no-evict client's queue counts toward maxmemory-clients;
    // once it gives up no-evict, it is evicted.
    ok(&mut ctl, &["CONFIG", "SET", "client-output-buffer-limit", "normal 0 0 0"]);
    ok(&mut ctl, &["CONFIG", "SET", "maxmemory-clients", "4mb"]);
    let mut kept = control(&s);
    let id = client_id(&mut kept);
    unread_gets(&mut kept, 20);
    assert!(
        wait_for(|| client_field(&mut ctl, &id, "tot-mem") > 8 << 20, WAIT),
        "{}",
        ctl.cmd(&["CLIENT", "LIST"]).text()
    );
    kept.send(&["CLIENT", "NO-EVICT", "off"]);
    assert!(wait_for(|| !connected(&mut ctl, &id), WAIT));
    assert!(kept.closed_within(WAIT));
}
