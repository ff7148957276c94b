#!/usr/bin/env python3
"""Persistence benchmark: what RDB snapshots and the append-only file cost, for hotkv and for
redis-server, on this machine, in the same run (issue 13, "Speed").

Every server process (hotkv with one worker thread, redis-server with io-threads 1) is pinned
to CPU 0 with taskset; the affinity is inherited by every thread and every forked child, so
redis-server's BGSAVE/BGREWRITEAOF child shares CPU 0 with its parent exactly as hotkv's save
thread shares it with its worker. This script, the latency probe, redis-cli and
redis-benchmark run on CPU 1. Each round runs one server at a time, alternating which goes
first; medians over rounds are reported, with the ratio hotkv/redis of the medians.

Per round and server, for each data set (1M string keys made with `DEBUG POPULATE <n> key 32`;
10k sorted sets of 100 members loaded with `redis-cli --pipe`, harness.mem_cell), in a fresh
process and an empty directory:

1. fill (timed apart from everything else);
2. BGSAVE with no clients: wall time from sending BGSAVE until INFO persistence shows
   `rdb_bgsave_in_progress:0` with `rdb_saves` moved on (polled every 5 ms), the time until
   the new dump.rdb is renamed into place, BGSAVE's own reply time (redis-server forks inside
   it), the server's CPU time (its threads plus reaped children, from /proc), the file size,
   and `rdb_last_bgsave_time_sec` as a whole-second cross-check;
3. the same BGSAVE again while a probe (below) runs: its latency at rest before the command,
   and during it;
4. `CONFIG SET appendonly yes` (which rewrites the AOF in both servers) and wait for it, then
   BGREWRITEAOF under the probe the same way;
5. restart on the files, timing from exec until PING answers PONG instead of -LOADING (a raw
   socket, every 2 ms): first with `appendonly no` (dump.rdb), then with `appendonly yes` (the
   AOF directory: an RDB base and the incr file the probe wrote to); the key count is checked,
   and the server's own "DB loaded ... seconds" log line is kept as a cross-check.

The probe is a separate process (this file with --probe): 20 connections, one request in
flight on each (pipeline 1), half reads and half writes of existing keys (GET/SET of a 32-byte
value, or ZSCORE/ZADD of an existing member), timestamps on CLOCK_MONOTONIC. A request counts
"during" the operation if it was in flight at any moment between sending the command and seeing
it done, "at rest" if it completed in the second and a half before. Writes matter: they make
redis-server's kernel copy pages, and make hotkv serialise a pending slot first.

Then throughput: `redis-benchmark -t set -P 16 -c 50 -r 100000 -d 32` into a fresh server with
`appendonly no`, and with `appendonly yes` + `appendfsync everysec`
(`auto-aof-rewrite-percentage 0`, so no automatic rewrite lands in some runs and not others),
ops/s and the server's CPU time per request.

Raw figures go to benches/results/persistence-<time>.json and the table to
benches/results/latest-persistence.md.

Usage: benches/run.sh persistence [--rounds N] [--keys N] [--zsets N] [--requests N]
                                  [--kind hotkv|redis] [--no-pin] [--quick]
"""

import argparse
import json
import os
import random
import re
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True  # importing must not leave a __pycache__ in benches/
from harness import Server, free_port, hotkv_argv, median, mem_cell, redis_argv, run_bench  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
VALUE_SIZE = 32
ZSET_MEMBERS = 100  # harness.mem_cell's zset100: members member:000000.., scores 0..99


# ---------------------------------------------------------------------------------------------
# a small RESP client


def encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def parse(buf, i=0):
    """One reply from buf at i: (value, next index), or None when buf holds less than a reply."""
    end = buf.find(b"\r\n", i)
    if end < 0:
        return None
    t, line = buf[i:i + 1], buf[i + 1:end]
    if t == b"+":
        return line.decode(), end + 2
    if t == b"-":
        return RuntimeError(line.decode()), end + 2
    if t == b":":
        return int(line), end + 2
    if t == b"$":
        n = int(line)
        if n < 0:
            return None, end + 2
        if len(buf) < end + 2 + n + 2:
            return None
        return buf[end + 2:end + 2 + n], end + 2 + n + 2
    if t == b"*":
        n, j, items = int(line), end + 2, []
        for _ in range(max(n, 0)):
            r = parse(buf, j)
            if r is None:
                return None
            items.append(r[0])
            j = r[1]
        return items, j
    raise ValueError(f"bad reply {buf[i:i + 40]!r}")


class Conn:
    def __init__(self, port, timeout=300):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def call(self, *args):
        self.s.sendall(encode(args))
        while True:
            r = parse(self.buf)
            if r is not None:
                self.buf = self.buf[r[1]:]
                return r[0]
            data = self.s.recv(1 << 20)
            if not data:
                raise ConnectionError("server closed the connection")
            self.buf += data

    def info(self, section="persistence"):
        text = self.call("INFO", section)
        if isinstance(text, Exception):
            raise text
        return dict(line.split(":", 1) for line in text.decode().splitlines()
                    if ":" in line and not line.startswith("#"))

    def close(self):
        self.s.close()


# ---------------------------------------------------------------------------------------------
# the latency probe (a separate process, pinned with the other clients)


def probe_main(port, kind, nkeys, conns, out):
    """Closed loop: one request in flight per connection until stdin says stop (a line or EOF).
    Writes {"send": [...], "lat": [...], "errors": n} (monotonic seconds) to `out`."""
    rnd = random.Random(13)
    sel = selectors.DefaultSelector()
    value = b"x" * VALUE_SIZE
    sends, lats, errors, first_error = [], [], 0, None
    state = {}

    def request():
        k = b"key:%d" % rnd.randrange(nkeys) if kind == "strings" else b"key:%012d" % rnd.randrange(nkeys)
        if kind == "strings":
            return encode([b"GET", k]) if rnd.random() < 0.5 else encode([b"SET", k, value])
        m = b"member:%06d" % rnd.randrange(ZSET_MEMBERS)
        return encode([b"ZSCORE", k, m]) if rnd.random() < 0.5 else encode([b"ZADD", k, b"%d" % rnd.randrange(1000), m])

    for _ in range(conns):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        state[s] = [b"", 0.0]
    sel.register(sys.stdin, selectors.EVENT_READ)
    print("ready", flush=True)
    for s, st in state.items():
        st[1] = time.monotonic()
        s.send(request())
    stopping, open_ = False, len(state)
    while open_:
        for key, _ in sel.select(timeout=1.0):
            if key.fileobj is sys.stdin:
                sys.stdin.readline()
                sel.unregister(sys.stdin)
                stopping = True
                continue
            s = key.fileobj
            st = state[s]
            data = s.recv(65536)
            if not data:
                raise ConnectionError("server closed a probe connection")
            st[0] += data
            r = parse(st[0])
            if r is None:
                continue
            now = time.monotonic()
            sends.append(st[1])
            lats.append(now - st[1])
            if isinstance(r[0], Exception):
                errors += 1
                first_error = first_error or str(r[0])
            st[0] = b""
            if stopping:
                sel.unregister(s)
                s.close()
                open_ -= 1
            else:
                st[1] = time.monotonic()
                s.send(request())
    Path(out).write_text(json.dumps({"send": sends, "lat": lats, "errors": errors, "first_error": first_error}))


class Probe:
    def __init__(self, port, kind, nkeys, args):
        self.fd, self.out = tempfile.mkstemp(prefix="persistence-probe-", suffix=".json")
        os.close(self.fd)
        argv = [sys.executable, __file__, "--probe", str(port), kind, str(nkeys), str(args.probe_conns), self.out]
        if not args.no_pin:
            argv = ["taskset", "-c", "1"] + argv
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("the probe did not start")
        self.started = time.monotonic()

    def stop(self):
        self.proc.stdin.write("stop\n")
        self.proc.stdin.close()
        self.proc.wait(timeout=120)
        data = json.loads(Path(self.out).read_text())
        os.unlink(self.out)
        return data


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def window_stats(data, lo, hi, overlap):
    """Latencies (ms) of requests completed in [lo, hi) or, with overlap, in flight at any moment
    of [lo, hi]."""
    lat = []
    for s, l in zip(data["send"], data["lat"]):
        e = s + l
        if (overlap and s <= hi and e >= lo) or (not overlap and lo <= e < hi):
            lat.append(l * 1000)
    span = hi - lo
    return {"n": len(lat), "rate": len(lat) / span if span > 0 else float("nan"),
            "p50_ms": pct(lat, 0.50), "p99_ms": pct(lat, 0.99), "p999_ms": pct(lat, 0.999),
            "max_ms": max(lat) if lat else float("nan")}


# ---------------------------------------------------------------------------------------------
# servers


class PServer(Server):
    """harness.Server with the process's own and its reaped children's CPU time (redis-server's
    BGSAVE child is reaped by its parent), and a start timed to the first PONG."""

    def cpu_total(self):
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    def start_timed(self, cpus, timeout=300.0):
        """Server.start, timed: exec until the load is over, tried every 2 ms on one raw socket:
        PING answers PONG (not -LOADING), DBSIZE answers a count, and the server's log has its
        "DB loaded" line. A PONG or a count before that line means clients were served before
        the data was in: those replies are returned in `early`."""
        self.port, self.tls_port = free_port(), free_port()
        self.argv = self.argv_fn(self.port, self.tls_port, None, "percore")
        if cpus is not None:
            self.argv = ["taskset", "-c", cpus] + self.argv
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{self.name}-", suffix=".log", delete=False)
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        first, loading, conn, early = None, False, None, []
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited while starting (log {self.log.name})")
            try:
                conn = conn or Conn(self.port, timeout=timeout)
                r = conn.call("PING")
                now = time.monotonic()
                first = first if first is not None else now - t0
                if r == "PONG":
                    n = conn.call("DBSIZE")
                    if isinstance(n, int):
                        if self.log_loaded() is not None:
                            conn.close()
                            return {"s": time.monotonic() - t0, "first_reply_s": first, "loading_seen": loading,
                                    "early": early[:5]}
                        early.append({"at_ms": round((now - t0) * 1000, 2), "ping": r, "dbsize": n})
                    else:
                        loading = True
                else:
                    loading = loading or "LOADING" in str(r)
            except OSError:
                conn = None
            time.sleep(0.002)
        self.stop()
        raise RuntimeError(f"{self.name} did not finish loading within {timeout} s (log {self.log.name})")

    def log_loaded(self):
        """The server's own figure: 'DB loaded from disk|append only file: X seconds'."""
        m = re.findall(r"DB loaded from (?:disk|append only file): ([0-9.]+) seconds",
                       Path(self.log.name).read_text(errors="replace"))
        return float(m[-1]) if m else None


def server_argv(kind, binary, datadir, extra=()):
    base = hotkv_argv(binary) if kind == "hotkv" else redis_argv(binary)

    def argv(port, tls_port, pki, mode):
        # Later options win in both servers: these override the harness's --loglevel warning.
        return base(port, tls_port, pki, mode) + ["--dir", str(datadir), "--dbfilename", "dump.rdb",
                                                  "--enable-debug-command", "yes", "--loglevel", "notice",
                                                  *extra]
    return argv


# ---------------------------------------------------------------------------------------------
# measurements


def dir_size(d):
    return sum(p.stat().st_size for p in Path(d).rglob("*") if p.is_file())


def background(srv, conn, command, datadir, timeout, before_done=None):
    """Send BGSAVE or BGREWRITEAOF and poll INFO persistence every 5 ms until it is done.
    Returns the figures, or {"error": ...} when it failed or did not finish within timeout."""
    rdb = command == "BGSAVE"
    flag, counter, status = (("rdb_bgsave_in_progress", "rdb_saves", "rdb_last_bgsave_status") if rdb else
                             ("aof_rewrite_in_progress", "aof_rewrites", "aof_last_bgrewrite_status"))
    info0 = conn.info()
    dump = Path(datadir) / "dump.rdb"
    ino0 = dump.stat().st_ino if dump.exists() else None
    cpu0 = srv.cpu_total()
    t0 = time.monotonic()
    reply = conn.call(command)
    t_reply = time.monotonic()
    if isinstance(reply, Exception) or "started" not in str(reply).lower() and "scheduled" not in str(reply).lower():
        return {"error": f"{command} answered {reply}"}
    t_file = None
    while True:
        now = time.monotonic()
        if rdb and t_file is None and dump.exists() and dump.stat().st_ino != ino0:
            t_file = now
        info = conn.info()
        if (info.get(flag) == "0" and info.get("aof_rewrite_scheduled", "0") == "0"
                and int(info.get(counter, 0)) > int(info0.get(counter, 0))):
            break
        if now - t0 > timeout:
            return {"error": f"{command} still in progress after {timeout} s ({flag}:{info.get(flag)})",
                    "info": info}
        time.sleep(0.005)
    t_done = time.monotonic()
    out = {"t0": t0, "t_done": t_done, "wall_ms": (t_done - t0) * 1000, "reply_ms": (t_reply - t0) * 1000,
           "cpu_s": srv.cpu_total() - cpu0, "status": info.get(status)}
    if rdb:
        out["file_ms"] = (t_file - t0) * 1000 if t_file else None
        out["last_bgsave_time_sec"] = int(info.get("rdb_last_bgsave_time_sec", -1))
        out["bytes"] = dump.stat().st_size
    else:
        out["last_rewrite_time_sec"] = int(info.get("aof_last_rewrite_time_sec", -1))
        out["aof_dir_bytes"] = dir_size(Path(datadir) / "appendonlydir")
        out["aof_base_size"] = int(info.get("aof_base_size", 0))
    if out["status"] != "ok":
        out["error"] = f"{status}:{out['status']}"
    return out


def under_probe(srv, conn, command, datadir, kind, nkeys, args):
    probe = Probe(srv.port, kind, nkeys, args)
    time.sleep(args.rest)
    op = background(srv, conn, command, datadir, args.op_timeout)
    time.sleep(0.2)
    data = probe.stop()
    t_trigger = op.get("t0", time.monotonic())
    res = {"op": op, "probe_errors": data["errors"], "probe_first_error": data["first_error"],
           "rest": window_stats(data, probe.started + 0.3, t_trigger, overlap=False)}
    if "t_done" in op:
        res["during"] = window_stats(data, op["t0"], op["t_done"], overlap=True)
    return res


def fill(srv, conn, dataset, args):
    t0 = time.monotonic()
    if dataset == "strings":
        r = conn.call("DEBUG", "POPULATE", args.keys, "key", VALUE_SIZE)
        if r != "OK":
            raise RuntimeError(f"{srv.name}: DEBUG POPULATE answered {r}")
        mem = None
        expect = args.keys
    else:
        mem = mem_cell(srv, "zset100", args.zsets)
        expect = args.zsets
    secs = time.monotonic() - t0
    n = conn.call("DBSIZE")
    if n != expect:
        raise RuntimeError(f"{srv.name}: {n} keys after filling {dataset}, expected {expect}")
    return {"fill_s": secs, "keys": n, "memory_per_key": mem}


def one_dataset(kind, binary, dataset, args, workdir):
    cpus = None if args.no_pin else "0"
    datadir = Path(tempfile.mkdtemp(prefix=f"{kind}-{dataset}-", dir=workdir))
    nkeys = args.keys if dataset == "strings" else args.zsets
    out = {}
    srv = PServer(kind, server_argv(kind, binary, datadir))
    try:
        srv.start(None, "percore", cpus)
        conn = Conn(srv.port)
        out["fill"] = fill(srv, conn, dataset, args)
        time.sleep(0.5)
        out["bgsave"] = background(srv, conn, "BGSAVE", datadir, args.op_timeout)
        log(f"  {kind} {dataset}: BGSAVE {fmt_op(out['bgsave'])}")
        time.sleep(0.3)
        out["bgsave_probe"] = under_probe(srv, conn, "BGSAVE", datadir, dataset, nkeys, args)
        log(f"  {kind} {dataset}: BGSAVE under probe {fmt_probe(out['bgsave_probe'])}")
        conn.call("CONFIG", "SET", "appendfsync", "everysec")
        info0 = conn.info()
        t0 = time.monotonic()
        r = conn.call("CONFIG", "SET", "appendonly", "yes")
        ok = False
        while time.monotonic() - t0 < args.op_timeout:
            info = conn.info()
            if (info.get("aof_rewrite_in_progress") == "0" and info.get("aof_rewrite_scheduled") == "0"
                    and int(info.get("aof_rewrites", 0)) > int(info0.get("aof_rewrites", 0))):
                ok = True
                break
            time.sleep(0.005)
        out["enable_aof"] = {"reply": str(r), "ok": ok, "wall_ms": (time.monotonic() - t0) * 1000}
        if ok:
            time.sleep(0.3)
            out["rewrite_probe"] = under_probe(srv, conn, "BGREWRITEAOF", datadir, dataset, nkeys, args)
            log(f"  {kind} {dataset}: BGREWRITEAOF under probe {fmt_probe(out['rewrite_probe'])}")
        else:
            log(f"  {kind} {dataset}: CONFIG SET appendonly yes did not finish its rewrite")
        conn.close()
        srv.stop()
        out["rdb_bytes"] = (datadir / "dump.rdb").stat().st_size
        out["aof_dir_bytes"] = dir_size(datadir / "appendonlydir")
        for label, extra in (("load_rdb", ["--appendonly", "no"]), ("load_aof", ["--appendonly", "yes"])):
            if label == "load_aof" and not ok:
                continue
            srv = PServer(kind, server_argv(kind, binary, datadir, extra))
            try:
                st = srv.start_timed(cpus, timeout=args.op_timeout)
                c = Conn(srv.port)
                n = c.call("DBSIZE")
                c.close()
                out[label] = {"ms": st["s"] * 1000, "first_reply_ms": st["first_reply_s"] * 1000,
                              "loading_seen": st["loading_seen"], "served_before_loaded": st["early"],
                              "keys": n, "keys_ok": n == nkeys, "log_s": srv.log_loaded()}
            except RuntimeError as e:
                out[label] = {"error": str(e)}
            finally:
                srv.stop()
            log(f"  {kind} {dataset}: {label} {out[label]}")
        return out
    except (RuntimeError, OSError) as e:
        out["error"] = f"{type(e).__name__}: {e}"
        log(f"  {kind} {dataset}: FAILED {out['error']}")
        return out
    finally:
        srv.stop()
        shutil.rmtree(datadir, ignore_errors=True)


def throughput(kind, binary, aof, args, workdir):
    datadir = Path(tempfile.mkdtemp(prefix=f"{kind}-tput-", dir=workdir))
    extra = (["--appendonly", "yes", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0"]
             if aof else ["--appendonly", "no"])
    srv = PServer(kind, server_argv(kind, binary, datadir, extra))
    try:
        srv.start(None, "percore", None if args.no_pin else "0")
        argv = ["redis-benchmark", "-p", str(srv.port), "-t", "set", "-P", "16", "-c", "50", "-r", "100000",
                "-d", str(VALUE_SIZE), "-n", str(args.requests), "--csv"]
        if not args.no_pin:
            argv = ["taskset", "-c", "1"] + argv
        cpu0 = srv.cpu_total()
        rps, p50, p99 = run_bench(argv, timeout=600)
        cpu = srv.cpu_total() - cpu0
        c = Conn(srv.port)
        info = c.info()
        c.close()
        return {"rps": rps, "p50_ms": p50, "p99_ms": p99, "cpu_us_per_req": cpu * 1e6 / args.requests,
                "aof_last_write_status": info.get("aof_last_write_status"),
                "aof_delayed_fsync": info.get("aof_delayed_fsync"), "command": " ".join(argv)}
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    finally:
        srv.stop()
        shutil.rmtree(datadir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# report


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def fmt_op(op):
    if "error" in op:
        return f"ERROR {op['error']}"
    return (f"{op['wall_ms']:.0f} ms (reply {op['reply_ms']:.1f} ms, cpu {op['cpu_s']:.2f} s"
            + (f", {op['bytes']} B" if "bytes" in op else "") + ")")


def fmt_probe(p):
    s = f"{fmt_op(p['op'])}; p99 rest {p['rest']['p99_ms']:.2f} ms"
    if "during" in p:
        s += f", during {p['during']['p99_ms']:.2f} ms (max {p['during']['max_ms']:.1f})"
    if p["probe_errors"]:
        s += f", {p['probe_errors']} probe errors ({p['probe_first_error']})"
    return s


def get(d, path):
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


ROWS = [
    # label, path in one_dataset's output, unit/format, lower is better
    ("fill (not in the figures below), s", ("fill", "fill_s"), "{:.2f}"),
    ("BGSAVE wall time, ms (no clients)", ("bgsave", "wall_ms"), "{:.0f}"),
    ("BGSAVE until dump.rdb renamed in, ms", ("bgsave", "file_ms"), "{:.0f}"),
    ("BGSAVE command's own reply, ms (fork / cut)", ("bgsave", "reply_ms"), "{:.2f}"),
    ("BGSAVE server CPU (incl. child), s", ("bgsave", "cpu_s"), "{:.2f}"),
    ("rdb_last_bgsave_time_sec (cross-check)", ("bgsave", "last_bgsave_time_sec"), "{:.0f}"),
    ("dump.rdb size, bytes", ("bgsave", "bytes"), "{:.0f}"),
    ("probe p99 at rest, ms", ("bgsave_probe", "rest", "p99_ms"), "{:.3f}"),
    ("probe p99 during BGSAVE, ms", ("bgsave_probe", "during", "p99_ms"), "{:.3f}"),
    ("probe max during BGSAVE, ms", ("bgsave_probe", "during", "max_ms"), "{:.1f}"),
    ("probe req/s at rest / during BGSAVE", None, None),
    ("BGSAVE wall time under probe, ms", ("bgsave_probe", "op", "wall_ms"), "{:.0f}"),
    ("probe p99 at rest (appendonly yes), ms", ("rewrite_probe", "rest", "p99_ms"), "{:.3f}"),
    ("probe p99 during BGREWRITEAOF, ms", ("rewrite_probe", "during", "p99_ms"), "{:.3f}"),
    ("probe max during BGREWRITEAOF, ms", ("rewrite_probe", "during", "max_ms"), "{:.1f}"),
    ("BGREWRITEAOF wall time under probe, ms", ("rewrite_probe", "op", "wall_ms"), "{:.0f}"),
    ("AOF directory after rewrite, bytes", ("rewrite_probe", "op", "aof_dir_bytes"), "{:.0f}"),
    ("load at start from dump.rdb, ms to PONG", ("load_rdb", "ms"), "{:.0f}"),
    ("  the server's log: DB loaded from disk, ms", ("load_rdb", "log_s"), "{:.0f}", 1000),
    ("load at start from the AOF dir, ms to PONG", ("load_aof", "ms"), "{:.0f}"),
    ("  the server's log: DB loaded from append only file, ms", ("load_aof", "log_s"), "{:.0f}", 1000),
]


def summarize(rounds, kinds, datasets):
    med = {}
    for ds in datasets:
        for row in ROWS:
            label, path = row[0], row[1]
            if path is None:
                continue
            scale = row[3] if len(row) > 3 else 1
            for k in kinds:
                vals = [get(r[k][ds], path) for r in rounds if k in r and ds in r[k]]
                vals = [v * scale for v in vals if isinstance(v, (int, float)) and v is not None]
                med[(ds, label, k)] = median(vals) if vals else None
                med[(ds, label, k, "n")] = len(vals)
        for k in kinds:
            for w in ("rest", "during"):
                vals = [get(r[k][ds], ("bgsave_probe", w, "rate")) for r in rounds if k in r and ds in r[k]]
                vals = [v for v in vals if v is not None]
                med[(ds, "rate_" + w, k)] = median(vals) if vals else None
    return med


def markdown(results, kinds):
    rounds, datasets = results["rounds"], results["datasets"]
    med = summarize(rounds, kinds, datasets)
    both = "hotkv" in kinds and "redis" in kinds
    lines = []
    for ds in datasets:
        title = (f"{results['args']['keys']:,} string keys (16-19 byte key, {VALUE_SIZE}-byte value)" if ds == "strings"
                 else f"{results['args']['zsets']:,} sorted sets of {ZSET_MEMBERS} members")
        lines += [f"**{title}** (median of {len(rounds)} rounds)", "",
                  "| figure | " + " | ".join(kinds) + (" | hotkv/redis |" if both else " |"),
                  "|---|" + "---|" * (len(kinds) + (1 if both else 0))]
        for row in ROWS:
            label, path, f = row[0], row[1], row[2]
            if path is None:
                cells = []
                for k in kinds:
                    a, b = med.get((ds, "rate_rest", k)), med.get((ds, "rate_during", k))
                    cells.append(f"{a:.0f} / {b:.0f}" if a and b else "n/a")
                ratio = ""
                if both:
                    h, r = med.get((ds, "rate_during", "hotkv")), med.get((ds, "rate_during", "redis"))
                    ratio = f" {h / r:.2f} (during) |" if h and r else " |"
                lines.append(f"| {label} | " + " | ".join(cells) + " |" + ratio)
                continue
            cells = []
            for k in kinds:
                v, n = med.get((ds, label, k)), med.get((ds, label, k, "n"))
                c = "FAILED" if v is None else f.format(v)
                if v is not None and n < len(rounds):
                    c += f" ({n}/{len(rounds)} rounds)"
                cells.append(c)
            ratio = ""
            if both:
                h, r = med.get((ds, label, "hotkv")), med.get((ds, label, "redis"))
                ratio = f" {h / r:.2f} |" if h is not None and r else " n/a |"
            lines.append(f"| {label} | " + " | ".join(cells) + " |" + ratio)
        lines.append("")
    if results["throughput"]:
        lines += [f"**SET throughput** (`redis-benchmark -t set -P 16 -c 50 -r 100000 -d {VALUE_SIZE} "
                  f"-n {results['args']['requests']}`, median of {len(results['throughput'])} rounds)", "",
                  "| server | appendonly no ops/s | appendonly yes, everysec ops/s | everysec/no | "
                  "CPU µs/req no | CPU µs/req everysec | p99 ms no / everysec |", "|---|---|---|---|---|---|---|"]
        tm = {}
        for k in kinds:
            for aof in ("no", "everysec"):
                xs = [r[k][aof] for r in results["throughput"] if k in r and "error" not in r[k][aof]]
                tm[(k, aof)] = ({m: median([x[m] for x in xs]) for m in ("rps", "cpu_us_per_req", "p99_ms")}
                                if xs else None)
        for k in kinds:
            a, b = tm[(k, "no")], tm[(k, "everysec")]
            if not a or not b:
                lines.append(f"| {k} | FAILED | | | | | |")
                continue
            lines.append(f"| {k} | {a['rps']:.0f} | {b['rps']:.0f} | {b['rps'] / a['rps']:.2f} | "
                         f"{a['cpu_us_per_req']:.3f} | {b['cpu_us_per_req']:.3f} | {a['p99_ms']:.3f} / {b['p99_ms']:.3f} |")
        if both and all(tm.values()):
            h, r = tm[("hotkv", "everysec")], tm[("redis", "everysec")]
            lines += ["", f"hotkv/redis with appendfsync everysec: {h['rps'] / r['rps']:.2f}x ops/s, "
                          f"{h['cpu_us_per_req'] / r['cpu_us_per_req']:.2f}x server CPU per request"]
    errors = []
    for i, r in enumerate(rounds):
        for k in kinds:
            for ds in datasets:
                d = r.get(k, {}).get(ds, {})
                for part, v in d.items():
                    if isinstance(v, dict) and ("error" in v or v.get("error")):
                        errors.append(f"round {i + 1} {k} {ds} {part}: {v['error']}")
                    if isinstance(v, dict) and isinstance(v.get("op"), dict) and "error" in v["op"]:
                        errors.append(f"round {i + 1} {k} {ds} {part}: {v['op']['error']}")
                    if isinstance(v, dict) and v.get("probe_errors"):
                        errors.append(f"round {i + 1} {k} {ds} {part}: {v['probe_errors']} probe errors, "
                                      f"first: {v['probe_first_error']}")
                    if isinstance(v, dict) and v.get("served_before_loaded"):
                        errors.append(f"round {i + 1} {k} {ds} {part}: answered before its load was over: "
                                      f"{v['served_before_loaded'][0]}")
                    if isinstance(v, dict) and v.get("keys_ok") is False:
                        errors.append(f"round {i + 1} {k} {ds} {part}: {v['keys']} keys after loading")
                if "error" in d:
                    errors.append(f"round {i + 1} {k} {ds}: {d['error']}")
    for i, r in enumerate(results["throughput"]):
        for k in kinds:
            for aof, v in r.get(k, {}).items():
                if "error" in v:
                    errors.append(f"throughput round {i + 1} {k} appendonly {aof}: {v['error']}")
    if errors:
        lines += ["", "Problems seen:", ""] + [f"- {e}" for e in errors]
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        port, kind, nkeys, conns, out = sys.argv[2:7]
        probe_main(int(port), kind, int(nkeys), int(conns), out)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hotkv", default=str(ROOT / "target" / "release" / "hotkv"))
    ap.add_argument("--redis", default=shutil.which("redis-server") or "redis-server")
    ap.add_argument("--kind", choices=["hotkv", "redis"], default=None, help="run one server only")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--zsets", type=int, default=10_000)
    ap.add_argument("--requests", type=int, default=2_000_000, help="SETs per throughput run")
    ap.add_argument("--datasets", type=lambda s: s.split(","), default=["strings", "zsets"])
    ap.add_argument("--no-throughput", action="store_true")
    ap.add_argument("--rest", type=float, default=1.5, help="probe seconds at rest before the command")
    ap.add_argument("--probe-conns", type=int, default=20)
    ap.add_argument("--op-timeout", type=float, default=120.0, help="a BGSAVE/rewrite/load longer than this is a failure")
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--quick", action="store_true", help="1 round, 100k keys, 1k zsets, 500k SETs")
    ap.add_argument("--out", default=str(ROOT / "benches" / "results"))
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.keys, args.zsets, args.requests = 1, 100_000, 1_000, 500_000
    if not args.no_pin:
        os.sched_setaffinity(0, {1})  # this script, redis-cli and the probe: the clients' core
    binaries = {"hotkv": args.hotkv, "redis": args.redis}
    kinds = [args.kind] if args.kind else ["hotkv", "redis"]
    started = time.monotonic()
    results = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "host": os.uname().nodename, "cpus": os.cpu_count(),
               "args": vars(args), "datasets": args.datasets, "rounds": [], "throughput": [],
               "versions": {k: subprocess.run([b, "--version"], capture_output=True, text=True).stdout.strip()
                            for k, b in binaries.items()},
               "pinning": None if args.no_pin else "servers (and every thread and forked child) on CPU 0; "
                                                  "this script, the probe, redis-cli, redis-benchmark on CPU 1"}
    workdir = Path(tempfile.mkdtemp(prefix="bench-persistence-"))
    try:
        for r in range(args.rounds):
            order = kinds if r % 2 == 0 else kinds[::-1]
            rnd = {}
            for k in order:
                rnd[k] = {}
                for ds in args.datasets:
                    log(f"[round {r + 1}] {k} {ds}")
                    rnd[k][ds] = one_dataset(k, binaries[k], ds, args, workdir)
            results["rounds"].append(rnd)
        if not args.no_throughput:
            for r in range(args.rounds):
                order = kinds if r % 2 == 0 else kinds[::-1]
                rnd = {}
                for k in order:
                    rnd[k] = {}
                    for aof in ("no", "everysec"):
                        rnd[k][aof] = throughput(k, binaries[k], aof == "everysec", args, workdir)
                        v = rnd[k][aof]
                        log(f"[throughput {r + 1}] {k} appendonly {aof}: "
                            + (f"{v['rps']:.0f} ops/s, {v['cpu_us_per_req']:.3f} µs/req" if "error" not in v
                               else f"FAILED {v['error']}"))
                results["throughput"].append(rnd)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results["elapsed_s"] = time.monotonic() - started
    text = markdown(results, kinds) + f"\nRun took {results['elapsed_s']:.0f} s.\n"
    print(text)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (outdir / f"persistence-{stamp}.json").write_text(json.dumps(results, indent=1, default=str))
    (outdir / f"persistence-{stamp}.md").write_text(text)
    (outdir / "latest-persistence.md").write_text(text)


if __name__ == "__main__":
    main()
