#!/usr/bin/env python3
"""Resharding benchmark: `redis-cli --cluster reshard` of 2000 slots on a hotkv cluster and on a
redis-server cluster, on this machine, in the same run, with the same keys, client and
certificates.

For each bus (plain, then TLS unless --no-tls) and each server kind, in turn (one cluster at a
time, so the two never share the CPU):

1. start three primaries (benches/cluster.py's Node: one worker thread for hotkv, io-threads 1
   for redis-server, every node pinned to CPU 0, clients on CPU 1 unless --no-pin) and make
   them a cluster with `redis-cli --cluster create`; the first node owns slots 0-5460;
2. load --keys keys (1M; 100k with --quick) into slots 0-1999, the same number in each slot,
   and --probe-keys keys into slots 3000-4999, all with `redis-cli --pipe` on the first node.
   Keys carry a hash tag chosen for their slot (`{tag}:n`), values are --value-size bytes;
3. start the probe: one connection to the first node (over TLS in TLS mode) that sends, at a
   fixed rate (--probe-rate), one request at a time, GET and SET alternately, on the probe keys,
   which stay on the source. Each request's latency is counted from the moment the schedule
   said to send it, so a request held up behind a slow one is charged the wait
   (no coordinated omission); the time from send to reply is kept too;
4. after --baseline seconds, run `redis-cli --cluster reshard <source> --cluster-from <source id>
   --cluster-to <second node id> --cluster-slots 2000 --cluster-yes --cluster-pipeline N`
   (N keys per MIGRATE, --pipeline, 100), which moves the source's lowest 2000 slots, 0-1999,
   slot after slot: SETSLOT IMPORTING/MIGRATING, then GETKEYSINSLOT + MIGRATE until the slot
   is empty, then SETSLOT NODE on every primary. Its wall time is the figure; the CPU time
   (user + system, /proc/<pid>/stat) the source and the target spent meanwhile is reported;
5. stop the probe, and check: DBSIZE of the three nodes adds up to every key loaded, the
   target holds all the moved keys, `redis-cli --cluster check` says every slot is covered
   and reports no open slot, and every probe reply was an expected one.

Every stretch of probe requests late by over 100 ms is listed with its time (`stalls`), to be
matched against the nodes' logs (--logs) or a trace of the source (--perf, --strace).

Rounds (--rounds) alternate which kind goes first. Raw figures, every latency percentile and
the exact commands go to benches/results/reshard-<time>.json next to a markdown table (also
benches/results/latest-reshard.md).

Usage: benches/run.sh reshard [--quick] [--no-tls] [--no-pin] [--keys N] [--rounds N]
                              [--pipeline N] [--probe-rate R] [--value-size B] [--out DIR]
                              [--perf DIR | --strace DIR] [--logs DIR] [--kind K] [--tls-only]
                              [--steps N]

--steps N replaces redis-cli with the same per-slot sequence sent by hand on N slots, each
command timed, and prints the median time of each step per kind (which step costs what).
"""

import argparse
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.dont_write_bytecode = True  # importing must not leave a __pycache__ in benches/
from harness import Pki, median  # noqa: E402
from cluster import KINDS, LIVE, Budget, Cluster, begin, common_options, stop_all, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MOVED_SLOTS = range(0, 2000)
PROBE_SLOTS = range(3000, 5000)


# ---------------------------------------------------------------------------------------------
# keys


def crc16(data, _table=[]):
    """CRC16-CCITT (XMODEM), the hash of Redis Cluster's key slots."""
    if not _table:
        for i in range(256):
            c = i << 8
            for _ in range(8):
                c = ((c << 1) ^ 0x1021) if c & 0x8000 else (c << 1)
            _table.append(c & 0xFFFF)
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _table[((crc >> 8) ^ b) & 0xFF]
    return crc


def tags_for(slots):
    """One short hash tag per wanted slot: counting upward, the first string that hashes there."""
    want, out, i = set(slots), {}, 0
    while len(out) < len(want):
        t = b"%x" % i
        s = crc16(t) % 16384
        if s in want and s not in out:
            out[s] = t
        i += 1
    return out


def resp(*parts):
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def write_load_file(path, tags, slots, per_slot, value):
    """SET commands for `per_slot` keys in each slot, as redis-cli --pipe reads them."""
    with open(path, "wb") as f:
        for s in slots:
            tag = tags[s]
            f.write(b"".join(resp(b"SET", b"{%s}:%d" % (tag, i), value) for i in range(per_slot)))


def probe_keys(tags, count):
    keys, i = [], 0
    while len(keys) < count:
        for s in PROBE_SLOTS:
            keys.append(b"{%s}:p%d" % (tags[s], i))
        i += 1
    return keys[:count]


def pipe_load(node, path):
    with open(path, "rb") as inp:
        r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(node.port), "--pipe"], stdin=inp,
                           capture_output=True, text=True, timeout=900)
    if "errors: 0" not in r.stdout:
        raise RuntimeError(f"{node.kind}: loading {path} failed: {r.stdout[-300:]} {r.stderr[-300:]}")


# ---------------------------------------------------------------------------------------------
# probe


def connect(port, pki):
    """A client connection to a node, over TLS with the node certificate when `pki` is set."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if pki:
        ctx = ssl.create_default_context(cafile=str(pki.d / "ca.crt"))
        ctx.load_cert_chain(str(pki.d / "node.crt"), str(pki.d / "node.key"))
        sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
    return sock


class Probe(threading.Thread):
    """One connection to the source that sends GET and SET alternately at a fixed rate, one
    request at a time, and records each latency from its scheduled send time (so a stall delays
    the requests queued behind it and each of them is charged its wait) and from its actual send.
    """

    def __init__(self, port, pki, keys, rate, value):
        super().__init__(daemon=True)
        sock = connect(port, pki)
        self.sock, self.keys, self.interval, self.value = sock, keys, 1.0 / rate, value
        self.samples = []     # (scheduled time, latency from schedule s, service time s)
        self.errors = []
        self.stopping = threading.Event()
        self.buf = b""

    def run(self):
        rng = random.Random(7)
        t_next = time.monotonic()
        n = 0
        while not self.stopping.is_set():
            now = time.monotonic()
            if now < t_next:
                time.sleep(t_next - now)
            key = rng.choice(self.keys)
            cmd = resp(b"GET", key) if n % 2 else resp(b"SET", key, self.value)
            sent = time.monotonic()
            try:
                self.sock.sendall(cmd)
                reply = self.read_reply()
            except OSError as e:
                self.errors.append(f"socket: {e}")
                return
            done = time.monotonic()
            if not (reply == b"+OK" or reply.startswith(b"$")):
                self.errors.append(reply[:100].decode(errors="replace"))
            self.samples.append((t_next, done - t_next, done - sent))
            n += 1
            t_next += self.interval

    def read_reply(self):
        """One reply: a simple line, or a bulk string whose body is then skipped."""
        while b"\r\n" not in self.buf:
            self.fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        if line.startswith(b"$") and line != b"$-1":
            need = int(line[1:]) + 2
            while len(self.buf) < need:
                self.fill()
            self.buf = self.buf[need:]
        return line

    def fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise OSError("connection closed")
        self.buf += chunk

    def stop(self):
        self.stopping.set()
        self.join(timeout=60)
        self.sock.close()

    def window(self, t0, t1):
        return [s for s in self.samples if t0 <= s[0] < t1]


def percentiles(samples, index):
    xs = sorted(s[index] * 1e3 for s in samples)
    if not xs:
        return {}
    pick = lambda q: xs[min(len(xs) - 1, int(q * len(xs)))]
    return {"n": len(xs), "p50_ms": pick(0.50), "p90_ms": pick(0.90), "p99_ms": pick(0.99),
            "p999_ms": pick(0.999), "max_ms": xs[-1]}


# ---------------------------------------------------------------------------------------------
# one reshard


def start_trace(args, node, bus, kind):
    """`perf record` (DWARF call graphs, --perf) or `strace -T` of its file syscalls and fsyncs
    (--strace) on the source for the length of the reshard, into <folder>/<bus>-<kind>-<time>.
    A traced node is slower, so a traced run's figures are not for the table."""
    out_dir = args.perf or args.strace
    if not out_dir:
        return None, None
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    stem = Path(out_dir) / f"{bus}-{kind}-{time.strftime('%H%M%S')}"
    if args.perf:
        argv = ["perf", "record", "-F", "499", "--call-graph", "dwarf,8192", "-o", f"{stem}.data"]
    else:
        argv = ["strace", "-f", "-tt", "-T", "-e", "trace=%file,fsync,fdatasync,ftruncate", "-o", f"{stem}.strace"]
    p = subprocess.Popen(argv + ["-p", str(node.proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    time.sleep(0.5)  # attached before the reshard starts
    print(f"[reshard] tracing the {bus} {kind} source -> {stem}.*", file=sys.stderr)
    return p, stem


def stop_trace(p):
    if p is None:
        return
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def stalls(samples, t0, t0_wall, over_ms=100):
    """The probe's stalls: for each run of requests late by more than over_ms, when its first
    request was due (seconds into the reshard, and wall clock to match a trace), the worst
    lateness in it, and the worst send-to-reply time (small when the probe itself was late to
    send, not the server late to answer)."""
    out, last = [], None
    for due, late, service in samples:
        if late * 1e3 < over_ms:
            last = None
            continue
        if last is None:
            wall = t0_wall + due - t0
            last = {"at_s": due - t0, "wall": time.strftime("%H:%M:%S", time.localtime(wall)) + f".{int(wall % 1 * 1e6):06d}",
                    "worst_ms": 0.0, "worst_service_ms": 0.0}
            out.append(last)
        last["worst_ms"] = max(last["worst_ms"], late * 1e3)
        last["worst_service_ms"] = max(last["worst_service_ms"], service * 1e3)
    return out


def node_ids(cluster):
    return [n.cli("CLUSTER", "MYID").strip() for n in cluster.nodes]


def slot_owner(cluster, slot):
    """The node of `cluster` that serves `slot`, from the first node's CLUSTER SLOTS view."""
    for line in cluster.nodes[0].cli("CLUSTER", "NODES").splitlines():
        f = line.split()
        for r in f[8:]:
            if r.startswith("["):
                continue
            lo, _, hi = r.partition("-")
            if int(lo) <= slot <= int(hi or lo):
                return f[0]
    return None


def check(cluster, ids, expected_total, moved, src_idx, dst_idx):
    """Every key kept, the moved ones on the target, every slot covered and closed."""
    problems = []
    sizes = cluster.dbsizes()
    if sum(sizes) != expected_total:
        problems.append(f"DBSIZE sum {sum(sizes)} != {expected_total} keys loaded ({sizes})")
    if sizes[dst_idx] != moved:
        problems.append(f"target holds {sizes[dst_idx]} keys, {moved} were moved")
    for s in (MOVED_SLOTS[0], MOVED_SLOTS[-1]):
        if slot_owner(cluster, s) != ids[dst_idx]:
            problems.append(f"slot {s} not owned by the target")
    for s in (MOVED_SLOTS[-1] + 1, PROBE_SLOTS[0]):
        if slot_owner(cluster, s) != ids[src_idx]:
            problems.append(f"slot {s} left the source")
    n = cluster.nodes[0]
    argv = ["redis-cli"] + cluster.tls_args() + ["--cluster", "check", f"127.0.0.1:{n.client_port}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    if "[OK] All 16384 slots covered." not in out or "[WARNING]" in out or "[ERR]" in out:
        problems.append("cluster check: " + " | ".join(l for l in out.splitlines()
                                                      if "WARNING" in l or "ERR" in l or "OK" in l))
    return sizes, problems


def one_run(args, workdir, pki, kind, load_files, probe_list, results):
    server_cpus, client_cpus = (None, None) if args.no_pin else ("0", "1")
    tag = "tls" if pki else "plain"
    c = Cluster(kind, pki, 0)
    LIVE.append(c)
    try:
        c.up(args.binaries[kind], workdir, args.node_timeout, 3, server_cpus)
        ids = node_ids(c)
        src_idx = ids.index(slot_owner(c, 0))
        dst_idx = (src_idx + 1) % 3
        src, dst = c.nodes[src_idx], c.nodes[dst_idx]
        t = time.monotonic()
        for f in load_files:
            pipe_load(src, f)
        load_s = time.monotonic() - t
        before = c.dbsizes()
        total = sum(before)
        if total != args.keys + args.probe_keys:
            raise RuntimeError(f"{kind}: {total} keys after loading, expected {args.keys + args.probe_keys}")
        argv = (["taskset", "-c", client_cpus] if client_cpus is not None else []) + [
            "redis-cli"] + c.tls_args() + [
            "--cluster", "reshard", f"127.0.0.1:{src.client_port}", "--cluster-from", ids[src_idx],
            "--cluster-to", ids[dst_idx], "--cluster-slots", str(len(MOVED_SLOTS)), "--cluster-yes",
            "--cluster-pipeline", str(args.pipeline)]
        probe = Probe(src.client_port, pki, probe_list, args.probe_rate, b"p" * args.value_size)
        probe.start()
        time.sleep(args.baseline)
        trace, stem = start_trace(args, src, tag, kind)
        cpu0 = (src.cpu_seconds(), dst.cpu_seconds())
        t0, t0_wall = time.monotonic(), time.time()
        out = subprocess.run(argv, capture_output=True, text=True, timeout=args.reshard_timeout)
        t1 = time.monotonic()
        cpu1 = (src.cpu_seconds(), dst.cpu_seconds())
        probe.stop()
        stop_trace(trace)
        if args.logs and not stem:
            Path(args.logs).mkdir(parents=True, exist_ok=True)
            stem = Path(args.logs) / f"{tag}-{kind}-{time.strftime('%H%M%S')}"
        if stem:
            for name, n in (("source", src), ("target", dst)):
                shutil.copy(n.dir / "server.log", f"{stem}.{name}.log")
        wall = t1 - t0
        if out.returncode != 0 or "[ERR]" in out.stdout:
            why = [l for l in out.stdout.splitlines() if "ERR" in l or "failed" in l][:5]
            raise RuntimeError(f"{kind}: reshard failed ({out.returncode}) after {wall:.1f} s: "
                               + " | ".join(why) + f" | {out.stderr[-300:]}")
        sizes, problems = check(c, ids, total, args.keys, src_idx, dst_idx)
        if probe.errors:
            problems.append(f"probe: {len(probe.errors)} unexpected replies, first {probe.errors[:3]}")
        row = {
            "kind": kind, "bus": tag, "keys_moved": args.keys, "slots": len(MOVED_SLOTS),
            "pipeline": args.pipeline, "value_size": args.value_size, "wall_s": wall, "load_s": load_s,
            "src_cpu_s": cpu1[0] - cpu0[0], "dst_cpu_s": cpu1[1] - cpu0[1],
            "probe_rate": args.probe_rate,
            "probe": percentiles(probe.window(t0, t1), 1),
            "probe_service": percentiles(probe.window(t0, t1), 2),
            "probe_baseline": percentiles(probe.window(t0 - args.baseline, t0), 1),
            "stalls": stalls(probe.window(t0, t1), t0, t0_wall),
            "dbsize_before": before, "dbsize_after": sizes, "problems": problems,
            "command": " ".join(argv), "create": " ".join(c.create_argv),
            "loadavg_1m": os.getloadavg()[0],
        }
        results["runs"].append(row)
        p = row["probe"]
        print(f"[reshard] {tag} {kind}: {wall:.2f} s, probe p50 {p.get('p50_ms', float('nan')):.3f} "
              f"p99 {p.get('p99_ms', float('nan')):.3f} max {p.get('max_ms', float('nan')):.1f} ms, "
              f"CPU src {row['src_cpu_s']:.2f} s dst {row['dst_cpu_s']:.2f} s"
              + (f"; PROBLEMS: {problems}" if problems else "; all keys present, check OK")
              + "".join(f"; stall of {x['worst_ms']:.0f} ms (reply {x['worst_service_ms']:.0f} ms) at "
                        f"{x['at_s']:.1f} s ({x['wall']})"
                        for x in row["stalls"] if x["worst_ms"] > 250), file=sys.stderr)
    finally:
        c.stop()
        LIVE.remove(c)


# ---------------------------------------------------------------------------------------------
# steps: redis-cli's per-slot sequence sent by hand, each command timed


class Conn:
    """A blocking RESP connection that times one command at a time."""

    def __init__(self, port, pki):
        sock = connect(port, pki)
        self.sock, self.buf = sock, b""

    def call(self, *parts):
        t = time.monotonic()
        self.sock.sendall(resp(*[p if isinstance(p, bytes) else str(p).encode() for p in parts]))
        reply = self.read()
        return reply, time.monotonic() - t

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise OSError("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read(self):
        line = self.line()
        if line[:1] == b"-":
            raise RuntimeError(line.decode(errors="replace"))
        if line[:1] == b"$" and line != b"$-1":
            need = int(line[1:]) + 2
            while len(self.buf) < need:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise OSError("connection closed")
                self.buf += chunk
            body, self.buf = self.buf[:need - 2], self.buf[need:]
            return body
        if line[:1] == b"*":
            return [self.read() for _ in range(int(line[1:]))]
        return line


STEPS = ("importing", "migrating", "getkeysinslot", "migrate", "node target", "node source", "node other")


def steps_run(args, workdir, pki, kind, load_files, results):
    """Moves args.steps slots the way redis-cli does, timing every command: which step of the
    per-slot sequence costs what on each kind."""
    tag = "tls" if pki else "plain"
    c = Cluster(kind, pki, 0)
    LIVE.append(c)
    try:
        c.up(args.binaries[kind], workdir, args.node_timeout, 3, None if args.no_pin else "0")
        ids = node_ids(c)
        src_idx = ids.index(slot_owner(c, 0))
        dst_idx, other_idx = (src_idx + 1) % 3, (src_idx + 2) % 3
        for f in load_files:
            pipe_load(c.nodes[src_idx], f)
        src, dst, other = (Conn(c.nodes[i].client_port, pki) for i in (src_idx, dst_idx, other_idx))
        dst_port = c.nodes[dst_idx].client_port
        times = {s: [] for s in STEPS}
        t0 = time.monotonic()
        for slot in list(MOVED_SLOTS)[:args.steps]:
            times["importing"].append(dst.call("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src_idx])[1])
            times["migrating"].append(src.call("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst_idx])[1])
            while True:
                keys, dt = src.call("CLUSTER", "GETKEYSINSLOT", slot, args.pipeline)
                times["getkeysinslot"].append(dt)
                if not keys:
                    break
                times["migrate"].append(src.call("MIGRATE", "127.0.0.1", dst_port, "", 0, 60000,
                                                 "KEYS", *keys)[1])
            for who, conn in (("node target", dst), ("node source", src), ("node other", other)):
                times[who].append(conn.call("CLUSTER", "SETSLOT", slot, "NODE", ids[dst_idx])[1])
        wall = time.monotonic() - t0
        row = {"kind": kind, "bus": tag, "slots": args.steps, "wall_s": wall,
               "per_slot_ms": wall / args.steps * 1e3,
               "p50_ms": {s: median([x * 1e3 for x in v]) for s, v in times.items() if v}}
        results["steps"].append(row)
        print(f"[steps] {tag} {kind}: {row['per_slot_ms']:.2f} ms per slot; p50 ms "
              + ", ".join(f"{s} {v:.3f}" for s, v in row["p50_ms"].items()), file=sys.stderr)
    finally:
        c.stop()
        LIVE.remove(c)


# ---------------------------------------------------------------------------------------------
# report


def summarize(results):
    """Per bus and kind that ran, the median over rounds."""
    out = []
    for bus in ("plain", "tls"):
        rows = {k: [r for r in results["runs"] if r["bus"] == bus and r["kind"] == k] for k in KINDS}
        rows = {k: rs for k, rs in rows.items() if rs}
        if not rows:
            continue
        s = {}
        for k, rs in rows.items():
            s[k] = {
                "wall_s": median([r["wall_s"] for r in rs]),
                "wall_min": min(r["wall_s"] for r in rs), "wall_max": max(r["wall_s"] for r in rs),
                "p50_ms": median([r["probe"]["p50_ms"] for r in rs]),
                "p99_ms": median([r["probe"]["p99_ms"] for r in rs]),
                "p99_min": min(r["probe"]["p99_ms"] for r in rs), "p99_max": max(r["probe"]["p99_ms"] for r in rs),
                "max_ms": median([r["probe"]["max_ms"] for r in rs]),
                "base_p99_ms": median([r["probe_baseline"]["p99_ms"] for r in rs]),
                "src_cpu_s": median([r["src_cpu_s"] for r in rs]),
                "dst_cpu_s": median([r["dst_cpu_s"] for r in rs]),
                "ok": all(not r["problems"] for r in rs), "rounds": len(rs),
            }
        out.append({"bus": bus, "keys": next(iter(rows.values()))[0]["keys_moved"], "servers": s})
    return out


def markdown(results):
    lines = ["| bus | keys moved | kind | reshard wall s (min-max) | probe p50 / p99 (min-max) / max ms "
             "| probe p99 before, ms | CPU s source / target | keys + check |",
             "|---|---|---|---|---|---|---|---|"]
    ratio_lines = ["", "| bus | wall time hotkv/redis | probe p99 hotkv/redis | probe max hotkv/redis "
                       "| source CPU hotkv/redis | target CPU hotkv/redis |", "|---|---|---|---|---|---|"]
    for row in summarize(results):
        for k, s in row["servers"].items():
            lines.append(f"| {row['bus']} | {row['keys']} | {k} | {s['wall_s']:.2f} ({s['wall_min']:.2f}-"
                         f"{s['wall_max']:.2f}) | {s['p50_ms']:.3f} / {s['p99_ms']:.3f} ({s['p99_min']:.1f}-{s['p99_max']:.1f}) "
                         f"/ {s['max_ms']:.1f} "
                         f"| {s['base_p99_ms']:.3f} | {s['src_cpu_s']:.2f} / {s['dst_cpu_s']:.2f} "
                         f"| {'OK' if s['ok'] else 'FAILED'} ({s['rounds']} rounds) |")
        if len(row["servers"]) < len(KINDS):
            continue
        h, r = row["servers"]["hotkv"], row["servers"]["redis"]
        q = lambda a, b: f"{a / b:.2f}" if b else "n/a"
        ratio_lines.append(f"| {row['bus']} | {q(h['wall_s'], r['wall_s'])} | {q(h['p99_ms'], r['p99_ms'])} "
                           f"| {q(h['max_ms'], r['max_ms'])} | {q(h['src_cpu_s'], r['src_cpu_s'])} "
                           f"| {q(h['dst_cpu_s'], r['dst_cpu_s'])} |")
    for f in results["failures"]:
        ratio_lines.append(f"\nFAILED: {f['bus']} {f['kind']} round {f['round']}: {f['error'][:300]}")
    return "\n".join(lines + ratio_lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_options(ap, budget=5400)
    ap.add_argument("--keys", type=int, default=1_000_000, help="keys in the 2000 moving slots")
    ap.add_argument("--probe-keys", type=int, default=10_000, help="keys in slots 3000-4999 (they stay)")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--pipeline", type=int, default=100, help="--cluster-pipeline: keys per MIGRATE")
    ap.add_argument("--probe-rate", type=float, default=1000.0, help="probe requests per second")
    ap.add_argument("--baseline", type=float, default=2.0, help="seconds of probe before the reshard")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--reshard-timeout", type=int, default=1800, help="seconds one reshard may take")
    ap.add_argument("--quick", action="store_true", help="100k keys instead of 1M")
    ap.add_argument("--kind", choices=KINDS, help="run one server kind only (no ratios)")
    ap.add_argument("--tls-only", action="store_true", help="skip the plain bus")
    ap.add_argument("--perf", metavar="DIR", help="perf record the source of each reshard into DIR")
    ap.add_argument("--strace", metavar="DIR", help="strace the source's file syscalls into DIR")
    ap.add_argument("--logs", metavar="DIR", help="keep the source's and target's logs in DIR")
    ap.add_argument("--steps", type=int, metavar="N",
                    help="instead of redis-cli, move N slots by hand and time each command")
    args = ap.parse_args()
    if args.quick:
        args.keys = 100_000
    if args.tls_only and args.no_tls:
        ap.error("--tls-only and --no-tls leave nothing to run")
    if args.keys % len(MOVED_SLOTS):
        ap.error(f"--keys must be a multiple of {len(MOVED_SLOTS)}")
    results = begin(args, "redis-cli")
    results.update({"runs": [], "failures": [], "steps": []})
    status = 0
    with tempfile.TemporaryDirectory(prefix="bench-reshard-") as workdir:
        try:
            tags = tags_for(list(MOVED_SLOTS) + list(PROBE_SLOTS))
            value = b"v" * args.value_size
            moved_file, probe_file = Path(workdir) / "moved.resp", Path(workdir) / "probe.resp"
            write_load_file(moved_file, tags, MOVED_SLOTS, args.keys // len(MOVED_SLOTS), value)
            plist = probe_keys(tags, args.probe_keys)
            probe_file.write_bytes(b"".join(resp(b"SET", k, value) for k in plist))
            pki_dir = Path(workdir) / "pki"
            pki_dir.mkdir()
            pki = None if args.no_tls else Pki(pki_dir)
            buses = ([] if args.tls_only else [None]) + ([pki] if pki else [])
            for p in buses:
                for rnd in range(args.rounds):
                    for kind in (KINDS if rnd % 2 == 0 else KINDS[::-1]):
                        if args.kind and kind != args.kind:
                            continue
                        try:
                            if args.steps:
                                steps_run(args, workdir, p, kind, [moved_file], results)
                                continue
                            one_run(args, workdir, p, kind, [moved_file, probe_file], plist, results)
                        except (RuntimeError, subprocess.TimeoutExpired) as e:
                            # One kind failing (a reshard that errs or hangs) must not cost
                            # the other kinds' figures; the failure is in the results.
                            bus = "tls" if p else "plain"
                            results["failures"].append({"kind": kind, "bus": bus, "round": rnd, "error": str(e)})
                            print(f"[reshard] {bus} {kind}: FAILED: {e}", file=sys.stderr)
        except Budget as e:
            print(f"stopped early ({e}); writing what was measured", file=sys.stderr)
            status = 1
        finally:
            signal.alarm(0)
            stop_all()
    if results["failures"] or any(r["problems"] for r in results["runs"]):
        status = 1
    results["summary"] = summarize(results)
    write_results(args.out, "reshard", results, markdown(results))
    return status


if __name__ == "__main__":
    sys.exit(main())
