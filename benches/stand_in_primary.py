#!/usr/bin/env python3
"""A stand-in primary for replication.py's replay control: it takes one replica (hotkv or
redis-server) through the handshake and a full sync of an empty dataset, then, from the line
"go" on stdin, streams the SETs redis-benchmark's `-t set -r 100000 -d 32` sends, paced at
`rate` commands a second ("go RATE": at RATE), until the line "stop" or until it is killed.

The replica it feeds then does on its core what a replica of the real primary does (decode,
apply, acknowledge, at that rate) while the real primary runs alone: what that primary then
spends per request leaves out only its own part of replicating (recording the stream, sending
it, the loopback path's work on its CPU), which is what the control isolates.

Usage: stand_in_primary.py PORT_FILE RATE  (writes the port it listens on to PORT_FILE)
"""

import os
import random
import select
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True  # importing must not leave a __pycache__ in benches/
from harness import resp  # noqa: E402

# An empty RDB 9 (every server of interest loads it): header, EOF opcode, checksum 0 (the
# "saved without checksum" mark both redis-server and hotkv accept).
EMPTY_RDB = b"REDIS0009" + b"\xff" + b"\x00" * 8
REPLID = b"%040x" % random.getrandbits(160)
VALUE = b"x" * 32


def lines(conn):
    """The replica's lines, as they arrive."""
    buf = b""
    while True:
        while b"\r\n" in buf:
            line, buf = buf.split(b"\r\n", 1)
            yield line
        data = conn.recv(4096)
        if not data:
            raise SystemExit("replica left during the handshake")
        buf += data


def handshake(conn):
    """Answers the replica until its PSYNC, then sends the full sync of an empty dataset. No
    argument of a handshake holds a line break, so a multibulk command is its `*N` line and
    N pairs of `$len` and argument lines."""
    replica = lines(conn)
    for line in replica:
        if line.startswith(b"*"):
            parts = [next(replica) for _ in range(2 * int(line[1:]))][1::2]
        else:
            parts = line.split()
        name = parts[0].upper() if parts else b""
        if name in (b"PSYNC", b"SYNC"):
            conn.sendall(b"+FULLRESYNC " + REPLID + b" 0\r\n")
            conn.sendall(b"$%d\r\n" % len(EMPTY_RDB) + EMPTY_RDB)
            return
        conn.sendall(b"+PONG\r\n" if name == b"PING" else b"+OK\r\n")


def drain(conn):
    """Reads and drops the replica's acknowledgements, so its writes never block."""
    try:
        while conn.recv(65536):
            pass
    except OSError:
        pass


def main():
    port_file, rate = sys.argv[1], float(sys.argv[2])
    # Every command has the same length, so a run of n commands is a slice of n * size bytes
    # of a buffer that holds 100k random ones twice over (a slice may start anywhere in the
    # first copy). Built before the port is published, so that none of this work lands in
    # the measured run on the client's core.
    rng = random.Random(1)
    cmds = b"".join(resp([b"SET", b"key:%012d" % rng.randrange(100000), VALUE]) for _ in range(100000))
    size = len(cmds) // 100000
    ring = cmds + cmds
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    with open(port_file, "w") as f:
        f.write(str(lst.getsockname()[1]))
    conn, _ = lst.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    handshake(conn)
    conn.sendall(resp([b"SELECT", b"0"]))
    threading.Thread(target=drain, args=(conn,), daemon=True).start()
    # Lines on stdin steer it: "go" streams at the rate given on the command line, "go RATE"
    # at RATE, "stop" pauses (replication.py's paired segments run it only while their
    # replay primary is measured).
    rate_now, pending = None, b""
    while True:
        if b"\n" not in pending and (rate_now is None or select.select([0], [], [], 0)[0]):
            # Read from the descriptor itself: a buffered reader could hold a line select
            # would not see.
            data = os.read(0, 4096)
            if not data:
                return
            pending += data
            continue
        if b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            words = line.decode().split() or ["stop"]
            if words[0] == "go":
                rate_now = float(words[1]) if len(words) > 1 else rate
                start, sent = time.perf_counter(), 0
            else:
                rate_now = None
            continue
        due = int((time.perf_counter() - start) * rate_now)
        n = min(due - sent, 100000)
        if n > 0:
            at = (sent % 100000) * size
            conn.sendall(ring[at:at + n * size])
            sent += n
        # About the real primary's pace of sends (one per event-loop turn: a few thousand a
        # second at these rates).
        select.select([], [], [], 0.0003)


if __name__ == "__main__":
    main()
