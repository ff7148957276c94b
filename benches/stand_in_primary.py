#!/usr/bin/env python3
"""A stand-in primary for replication.py's replay control: it takes one replica (hotkv or
redis-server) through the handshake and a full sync of an empty dataset, then, from the line
"go" on stdin, streams the SETs redis-benchmark's `-t set -r 100000 -d 32` sends, paced at
`rate` commands a second, until it is killed.

The replica it feeds then does on its core what a replica of the real primary does (decode,
apply, acknowledge, at that rate) while the real primary runs alone: what that primary then
spends per request leaves out only its own part of replicating (recording the stream, sending
it, the loopback path's work on its CPU), which is what the control isolates.

Usage: stand_in_primary.py PORT_FILE RATE  (writes the port it listens on to PORT_FILE)
"""

import random
import select
import socket
import sys
import threading
import time

# An empty RDB 9 (every server of interest loads it): header, EOF opcode, checksum 0 (the
# "saved without checksum" mark both redis-server and hotkv accept).
EMPTY_RDB = b"REDIS0009" + b"\xff" + b"\x00" * 8
REPLID = b"%040x" % random.getrandbits(160)
VALUE = b"x" * 32


def command(key):
    k = b"key:%012d" % key
    return b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, len(VALUE), VALUE)


def handshake(conn):
    """Answers the replica until its PSYNC, then sends the full sync of an empty dataset."""
    buf = b""
    while True:
        data = conn.recv(4096)
        if not data:
            raise SystemExit("replica left during the handshake")
        buf += data
        while b"\r\n" in buf:
            # Inline or multibulk: only the command's name and line count matter here.
            if buf.startswith(b"*"):
                n = int(buf[1:buf.index(b"\r\n")])
                parts, rest = [], buf[buf.index(b"\r\n") + 2:]
                complete = True
                for _ in range(n):
                    if b"\r\n" not in rest:
                        complete = False
                        break
                    ln = int(rest[1:rest.index(b"\r\n")])
                    start = rest.index(b"\r\n") + 2
                    if len(rest) < start + ln + 2:
                        complete = False
                        break
                    parts.append(rest[start:start + ln])
                    rest = rest[start + ln + 2:]
                if not complete:
                    break
                buf = rest
            else:
                line, buf = buf.split(b"\r\n", 1)
                parts = line.split()
            name = parts[0].upper() if parts else b""
            if name == b"PSYNC" or name == b"SYNC":
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
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    with open(port_file, "w") as f:
        f.write(str(lst.getsockname()[1]))
    conn, _ = lst.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    handshake(conn)
    conn.sendall(b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n")
    threading.Thread(target=drain, args=(conn,), daemon=True).start()
    # Every command has the same length, so a run of n commands is a slice of n * size bytes
    # of a buffer that holds 100k random ones twice over (a slice may start anywhere in the
    # first copy).
    rng = random.Random(1)
    cmds = b"".join(command(rng.randrange(100000)) for _ in range(100000))
    size = len(cmds) // 100000
    ring = cmds + cmds
    sys.stdin.readline()
    start, sent = time.perf_counter(), 0
    while True:
        due = int((time.perf_counter() - start) * rate)
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
