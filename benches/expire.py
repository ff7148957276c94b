#!/usr/bin/env python3
"""Active expiry benchmark: what the expire cycle costs when nothing is expiring, and how fast
it reclaims a batch that expires all at once, hotkv and redis-server side by side.

Each round starts every server fresh (as benches/harness.py does, all cores, no client
connected between measurements) and measures two cells:

* idle-ttl: load N keys with `SET k:<i> v EX 600` (nothing expires during the run), wait a
  second, then read the server's CPU time (user + system, all threads, /proc/<pid>/stat)
  over S idle seconds. idle-plain does the same with keys without a TTL, the floor.
* reclaim: `DEBUG SET-ACTIVE-EXPIRE 0`, load N keys with `SET k:<i> v PX 100`, wait until
  they have all expired, `DEBUG SET-ACTIVE-EXPIRE 1`, and time until DBSIZE (which counts
  expired keys not yet reclaimed) reaches 0, polling every 5 ms from one connection. The CPU
  the server used in that time is reported too.

Keys are loaded through one pipelined connection. The table gives the median of the rounds
and the hotkv/redis ratio of the medians. Raw figures go to benches/results/expire-<time>.json
and the table to benches/results/latest-expire.md.

Usage: benches/run.sh expire [--keys N] [--idle-seconds S] [--rounds R]
                             [--hotkv PATH] [--redis PATH] [--out DIR]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True  # importing must not leave a __pycache__ in benches/
from harness import Server, add_common_args, hotkv_argv, redis_argv  # noqa: E402
from reshard import Conn, resp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def cmd(conn, *args):
    """One command's reply; integer replies as ints."""
    reply, _ = conn.call(*args)
    return int(reply[1:]) if isinstance(reply, bytes) and reply[:1] == b":" else reply


def load(conn, n, ttl):
    """SET k:<i> v <ttl...> for i < n, pipelined in batches of 1000."""
    for start in range(0, n, 1000):
        batch = [resp(b"SET", b"k:%d" % i, b"v", *ttl) for i in range(start, min(n, start + 1000))]
        conn.sock.sendall(b"".join(batch))
        for _ in batch:
            conn.read()


def idle_cpu(srv, n, ttl, seconds):
    conn = Conn(srv.port, None)
    cmd(conn, "FLUSHALL")
    load(conn, n, ttl)
    conn.sock.close()
    time.sleep(1.0)
    before = srv.cpu_seconds()
    time.sleep(seconds)
    return srv.cpu_seconds() - before


def reclaim(srv, n):
    """Seconds (and server CPU seconds) to actively expire n keys that all expired already."""
    conn = Conn(srv.port, None)
    cmd(conn, "FLUSHALL")
    cmd(conn, "DEBUG", "SET-ACTIVE-EXPIRE", "0")
    load(conn, n, [b"PX", b"100"])
    time.sleep(0.3)
    if cmd(conn, "DBSIZE") != n:
        raise RuntimeError(f"{srv.name}: keys went away with active expiry off")
    cpu0 = srv.cpu_seconds()
    t0 = time.monotonic()
    cmd(conn, "DEBUG", "SET-ACTIVE-EXPIRE", "1")
    while cmd(conn, "DBSIZE") != 0:
        if time.monotonic() - t0 > 120:
            raise RuntimeError(f"{srv.name}: keys still there after 120 s")
        time.sleep(0.005)
    elapsed = time.monotonic() - t0
    cpu = srv.cpu_seconds() - cpu0
    conn.sock.close()
    return elapsed, cpu


def with_debug(argv_fn):
    def argv(port, tls_port, pki, mode):
        return argv_fn(port, tls_port, pki, mode) + ["--enable-debug-command", "yes"]
    return argv


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--idle-seconds", type=float, default=5.0)
    ap.add_argument("--out", default=str(ROOT / "benches" / "results"))
    args = ap.parse_args()
    servers = [Server("hotkv", with_debug(hotkv_argv(args.hotkv))),
               Server("redis", with_debug(redis_argv(args.redis)))]
    figures = {s.name: {"idle-ttl": [], "idle-plain": [], "reclaim-s": [], "reclaim-cpu": []} for s in servers}
    for r in range(args.rounds):
        for srv in servers if r % 2 == 0 else servers[::-1]:
            srv.start(None, "allcores", None)
            try:
                f = figures[srv.name]
                f["idle-plain"].append(idle_cpu(srv, args.keys, [], args.idle_seconds))
                f["idle-ttl"].append(idle_cpu(srv, args.keys, [b"EX", b"600"], args.idle_seconds))
                secs, cpu = reclaim(srv, args.keys)
                f["reclaim-s"].append(secs)
                f["reclaim-cpu"].append(cpu)
            finally:
                srv.stop()
            print(f"[expire] round {r + 1} {srv.name}: " +
                  ", ".join(f"{k} {v[-1]:.3f}" for k, v in figures[srv.name].items()), file=sys.stderr)
    rows = [
        ("idle-plain", f"CPU s over {args.idle_seconds:g} idle s, {args.keys} keys without TTL"),
        ("idle-ttl", f"CPU s over {args.idle_seconds:g} idle s, {args.keys} keys EX 600"),
        ("reclaim-s", f"seconds to actively expire {args.keys} keys PX 100"),
        ("reclaim-cpu", "server CPU s while reclaiming them"),
    ]
    lines = ["| cell | hotkv | redis | hotkv/redis |", "| --- | ---: | ---: | ---: |"]
    for key, label in rows:
        h = statistics.median(figures["hotkv"][key])
        d = statistics.median(figures["redis"][key])
        ratio = f"{h / d:.2f}" if d > 0 else "n/a"
        lines.append(f"| {label} | {h:.3f} | {d:.3f} | {ratio} |")
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    versions = {name: subprocess.run([path, "--version"], capture_output=True, text=True).stdout.strip()
                for name, path in (("hotkv", args.hotkv), ("redis", args.redis))}
    (out / f"expire-{stamp}.json").write_text(json.dumps(
        {"args": vars(args), "versions": versions, "host": os.uname().nodename, "cpus": os.cpu_count(),
         "figures": figures}, indent=1))
    (out / "latest-expire.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
