#!/usr/bin/env python3
"""Side-by-side benchmark of hotkv against redis-server (and valkey-server when VALKEY_SERVER
names one), on this machine, in the same run.

Every server gets the same settings (no persistence, loopback, one plain and one TLS port,
the same certificates). The same load generator binary (redis-benchmark) drives each one.
In per-core mode the server is pinned to one CPU and the client to another, and hotkv runs
with one worker thread, so the comparison is per core. Servers run back to back in rotated
order for several rounds; each cell reports the median ops/s, the min-max, p50 and p99
latency, the median of the per-round paired ratios hotkv/redis, and each server's CPU time
per request (user + system, from /proc): with one worker that is its per-core cost, which
still tells the servers apart when the single-threaded client is what limits throughput, as
at pipeline 1 on two cores. Memory cells load each kind into a fresh process, so the RSS
deltas are not hidden by pages freed by the previous kind. A cell whose spread is
over 25% of its median is marked noisy. Raw numbers and the exact commands go to a JSON
results file next to the markdown table.

Usage: benches/run.sh [--quick] [--rounds N] [--seconds S] [--mode percore|allcores|both]
                      [--cells a,b,c] [--out DIR] [--memtier PATH]

With --memtier (or MEMTIER=PATH), memtier_benchmark drives the SET and GET cells instead of
redis-benchmark, with the same connections, value size, key range and pipeline.
"""

import argparse
import csv
import io
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOISY_SPREAD = 0.25


# ---------------------------------------------------------------------------------------------
# servers


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ping(port, tls_args=None, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            out = subprocess.run(
                ["redis-cli", "-p", str(port)] + (tls_args or []) + ["PING"],
                capture_output=True, text=True, timeout=2)
            if "PONG" in out.stdout:
                return True
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.05)
    return False


@dataclass
class Server:
    name: str
    argv_fn: object          # (port, tls_port, pki, mode) -> argv list
    proc: object = None
    port: int = 0
    tls_port: int = 0
    tls_ok: bool = False
    log: object = None
    argv: list = field(default_factory=list)
    dir: object = None

    def start(self, pki, mode, cpus):
        self.port, self.tls_port = free_port(), free_port()
        self.argv = self.argv_fn(self.port, self.tls_port, pki, mode)
        if cpus is not None:
            self.argv = ["taskset", "-c", cpus] + self.argv
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench-{self.name}-", suffix=".log", delete=False)
        # Its own empty directory: a dump.rdb left in the caller's would be loaded at start (and
        # one run's files must not reach the next).
        self.dir = tempfile.mkdtemp(prefix=f"bench-{self.name}-")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=self.dir)
        if not wait_ping(self.port):
            self.stop()
            raise RuntimeError(f"{self.name} did not start: {' '.join(self.argv)} (log {self.log.name})")
        self.tls_ok = pki is not None and wait_ping(self.tls_port, pki.client_args(), timeout=3)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def cpu_seconds(self):
        """User + system CPU time of the server process so far (all its threads)."""
        # With taskset in front, the server is taskset's exec'd image: same pid.
        return cpu_seconds_of(self.proc.pid)


def cpu_seconds_of(pid):
    """CPU time of process `pid` so far (all its threads); NaN once it is gone.

    From the scheduler's run time per thread (`/proc/PID/task/*/schedstat`, nanoseconds): the
    user + system ticks of `/proc/PID/stat` come in 10 ms steps and leave out the ticks that
    land in softirq context, which on loopback is the receiving side of every send the
    process makes (a primary's sends to its replica included). The ticks are the fallback on
    a kernel without schedstat."""
    try:
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    except (OSError, IndexError, ValueError):
        pass
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")

    def info(self, section):
        out = subprocess.run(["redis-cli", "-p", str(self.port), "INFO", section],
                             capture_output=True, text=True, timeout=30).stdout
        fields = {}
        for line in out.splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                fields[k.strip()] = v.strip()
        return fields


def hotkv_argv(binary):
    def argv(port, tls_port, pki, mode):
        a = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--protected-mode", "no", "--loglevel", "warning"]
        if mode == "percore":
            a += ["--worker-threads", "1"]
        if pki:
            a += pki.server_args(tls_port)
        return a
    return argv


def redis_argv(binary):
    def argv(port, tls_port, pki, mode):
        a = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--protected-mode", "no", "--loglevel", "warning", "--io-threads", "1"]
        if pki:
            a += pki.server_args(tls_port)
        return a
    return argv


class Pki:
    """A throwaway CA and server certificate, the same for every server."""

    def __init__(self, d):
        self.d = Path(d)
        run = lambda *c: subprocess.run(c, check=True, capture_output=True, cwd=self.d)
        run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ca.key")
        run("openssl", "req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "30",
            "-subj", "/CN=bench CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", "ca.crt")
        run("openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "node.key")
        run("openssl", "req", "-new", "-key", "node.key", "-subj", "/CN=127.0.0.1", "-out", "node.csr")
        (self.d / "ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
        run("openssl", "x509", "-req", "-in", "node.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-sha256", "-days", "30", "-extfile", "ext", "-out", "node.crt")

    def server_args(self, tls_port):
        return ["--tls-port", str(tls_port), "--tls-cert-file", str(self.d / "node.crt"),
                "--tls-key-file", str(self.d / "node.key"), "--tls-ca-cert-file", str(self.d / "ca.crt"),
                "--tls-auth-clients", "no"]

    def client_args(self):
        return ["--tls", "--cacert", str(self.d / "ca.crt")]


# ---------------------------------------------------------------------------------------------
# cells


@dataclass
class Cell:
    name: str
    tests: str                # redis-benchmark -t list
    args: list                # extra redis-benchmark arguments
    tls: bool = False
    requires: str = ""        # a command the server must know, else the cell is skipped
    setup: bool = False       # populate the keys first (GET cells)
    command: list = field(default_factory=list)  # a custom command line instead of -t tests


def cells():
    kv = ["-r", "100000", "-d", "100", "-c", "50"]
    out = [
        Cell("ping", "ping_mbulk", ["-c", "50", "-P", "16"]),
        Cell("set-p1", "set", kv + ["-P", "1"]),
        Cell("get-p1", "get", kv + ["-P", "1"], setup=True),
        Cell("set-p16", "set", kv + ["-P", "16"]),
        Cell("get-p16", "get", kv + ["-P", "16"], setup=True),
        Cell("incr", "incr", ["-r", "100000", "-c", "50", "-P", "16"]),
        Cell("lpush-lpop", "lpush,lpop", ["-c", "50", "-P", "16"], requires="lpush"),
        Cell("hset", "hset", ["-r", "100000", "-c", "50", "-P", "16"], requires="hset"),
        Cell("zadd", "zadd", ["-r", "100000", "-c", "50", "-P", "16"], requires="zadd"),
        Cell("mset10", "mset", ["-r", "100000", "-c", "50", "-P", "16"]),
        Cell("get-16k", "get", ["-r", "1000", "-d", "16384", "-c", "50", "-P", "1"],
             setup=True),
        Cell("set-1000conns", "set", ["-r", "100000", "-d", "100", "-c", "1000", "-P", "1"]),
        # Pipeline 1 at a concurrency where few replies leave per loop turn: the per-request
        # cost of reaching and leaving the worker, not amortized over a crowd.
        Cell("set-10conns", "set", ["-r", "100000", "-d", "100", "-c", "10", "-P", "1"]),
        # The ACL check's cost for a restricted user: only SET on key:* (redis-benchmark's
        # keys), logged in with --user/-a; both servers get the same user (ACL_USER).
        Cell("acl-set-p16", "set", kv + ["-P", "16", "--user", "bench", "-a", "benchpw"], requires="acl"),
    ]
    for c in list(out):
        if c.name.startswith(("set-p", "get-p")):
            out.append(Cell("tls-" + c.name, c.tests, c.args, tls=True, setup=c.setup))
    out.append(Cell("tls-churn", "ping_mbulk", ["-c", "50", "-k", "0"], tls=True))
    return out


def with_pipeline(args, p):
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a == "-P":
            skip = True
            continue
        out.append(a)
    return out + ["-P", str(p)]


def bench_cmd(server, cell, n, pki, client_cpus):
    a = ["redis-benchmark", "-p", str(server.tls_port if cell.tls else server.port)]
    a += ["-t", cell.tests] if cell.tests else []
    a += ["-n", str(n), "--csv"] + cell.args
    if cell.tls:
        a += pki.client_args()
    # redis-benchmark reads a custom command from its trailing arguments.
    a += cell.command
    if client_cpus is not None:
        a = ["taskset", "-c", client_cpus] + a
    return a


def run_bench(argv, timeout):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    rows = [r for r in csv.reader(io.StringIO(out.stdout)) if r and r[0] != "test"]
    if out.returncode != 0 or not rows:
        raise RuntimeError(f"{' '.join(argv)} failed: {out.stderr.strip()[-300:]}")
    # One row per test in -t; a cell of several tests (lpush,lpop) sums throughput and keeps
    # the worst latencies.
    rps = sum(float(r[1]) for r in rows)
    p50 = max(float(r[4]) for r in rows)
    p99 = max(float(r[6]) for r in rows)
    return rps, p50, p99


def cell_opt(cell, flag, default):
    return cell.args[cell.args.index(flag) + 1] if flag in cell.args else default


class RedisBenchmark:
    """redis-benchmark: every cell. `n` requests in all."""
    name = "redis-benchmark"

    def supports(self, cell):
        return True

    def fill(self, server, cell, pki, client_cpus):
        fill = Cell("setup", "set", with_pipeline(cell.args, 16))
        run_bench(bench_cmd(server, fill, 200000, pki, client_cpus), timeout=300)

    def run(self, server, cell, n, pki, client_cpus, timeout):
        """(ops/s, p50 ms, p99 ms, requests sent, argv)"""
        argv = bench_cmd(server, cell, n, pki, client_cpus)
        return run_bench(argv, timeout) + (n, argv)


class Memtier:
    """memtier_benchmark (one thread, the cell's connections, value size, key range and
    pipeline, random keys): the issue's own load generator, for the SET and GET cells only.
    Its keys are `key:N` without redis-benchmark's padding, so GET cells fill their own."""
    name = "memtier_benchmark"

    def __init__(self, binary):
        self.binary = binary

    def supports(self, cell):
        return cell.tests in ("set", "get") and not cell.command and "--user" not in cell.args

    def argv(self, server, cell, pki, client_cpus, extra):
        a = [self.binary, "-s", "127.0.0.1", "-p", str(server.tls_port if cell.tls else server.port),
             "-t", "1", "-c", cell_opt(cell, "-c", "50"), "-d", cell_opt(cell, "-d", "3"),
             "--key-prefix", "key:", "--key-minimum", "1",
             "--key-maximum", cell_opt(cell, "-r", "100000"), "--hide-histogram"] + extra
        if cell.tls:
            a += ["--tls", "--cacert", str(pki.d / "ca.crt")]
        return (["taskset", "-c", client_cpus] if client_cpus is not None else []) + a

    def invoke(self, argv, timeout):
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            out = subprocess.run(argv + ["--json-out-file", f.name], capture_output=True, text=True,
                                 timeout=timeout)
            if out.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)} failed: {out.stderr.strip()[-300:]}")
            totals = json.loads(Path(f.name).read_text())["ALL STATS"]["Totals"]
        pct = totals["Percentile Latencies"]
        return totals["Ops/sec"], pct["p50.00"], pct["p99.00"], totals["Count"]

    def fill(self, server, cell, pki, client_cpus):
        self.invoke(self.argv(server, cell, pki, client_cpus,
                              ["--ratio", "1:0", "--key-pattern", "P:P", "--pipeline", "16",
                               "--requests", "allkeys"]), timeout=300)

    def run(self, server, cell, n, pki, client_cpus, timeout):
        conns = int(cell_opt(cell, "-c", "50"))
        ratio = "1:0" if cell.tests == "set" else "0:1"
        argv = self.argv(server, cell, pki, client_cpus,
                         ["--ratio", ratio, "--key-pattern", "R:R", "--pipeline", cell_opt(cell, "-P", "1"),
                          "--requests", str(max(1, n // conns))])
        return self.invoke(argv, timeout) + (argv,)


# The restricted user of the acl-* cells: SET and what redis-benchmark asks at startup.
ACL_USER = ["bench", "on", ">benchpw", "resetkeys", "~key:*", "-@all", "+set", "+ping", "+config|get"]


def add_acl_user(server):
    subprocess.run(["redis-cli", "-p", str(server.port), "ACL", "SETUSER"] + ACL_USER,
                   capture_output=True, timeout=10)


def knows(server, command):
    out = subprocess.run(["redis-cli", "-p", str(server.port), "COMMAND", "INFO", command],
                         capture_output=True, text=True, timeout=10).stdout
    return command in out.lower()


# ---------------------------------------------------------------------------------------------
# memory


def resp(parts):
    """One command as RESP: what redis-benchmark and client libraries send."""
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def mem_cell(server, kind, count):
    """Bytes per item of `kind` by used_memory and RSS deltas after loading `count` items."""
    subprocess.run(["redis-cli", "-p", str(server.port), "FLUSHALL"], capture_output=True, timeout=60)
    time.sleep(0.3)
    before = server.info("memory")
    with tempfile.NamedTemporaryFile(suffix=".resp", delete=False) as f:
        for i in range(count):
            key = b"key:%012d" % i
            if kind == "string":
                parts = [b"SET", key, b"v" * 32]
            elif kind == "hash10":
                parts = [b"HSET", key] + [x for j in range(10) for x in (b"field:%02d" % j, b"value:%06d" % j)]
            elif kind == "set100":
                parts = [b"SADD", key] + [b"member:%06d" % j for j in range(100)]
            elif kind == "stream-entry":
                # One stream, one entry per item: the per-entry cost of its nodes.
                parts = [b"XADD", b"stream", b"*", b"item", b"%d" % i]
            elif kind == "geo-member":
                # One geo set, one member per item, spread over the globe.
                lon, lat = -179.0 + (i * 7919 % 358000) / 1000.0, -84.0 + (i * 104729 % 168000) / 1000.0
                parts = [b"GEOADD", b"geo", b"%.6f" % lon, b"%.6f" % lat, b"member:%08d" % i]
            else:
                parts = [b"ZADD", key] + [x for j in range(100) for x in (b"%d" % j, b"member:%06d" % j)]
            f.write(resp(parts))
        path = f.name
    with open(path, "rb") as inp:
        r = subprocess.run(["redis-cli", "-p", str(server.port), "--pipe"], stdin=inp,
                           capture_output=True, text=True, timeout=600)
    os.unlink(path)
    if "errors: 0" not in r.stdout:
        raise RuntimeError(f"loading {kind} into {server.name} failed: {r.stdout[-200:]}")
    time.sleep(0.5)
    after = server.info("memory")
    per = lambda k: (int(after[k]) - int(before[k])) / count
    return {"used_memory": per("used_memory"), "used_memory_rss": per("used_memory_rss")}


# ---------------------------------------------------------------------------------------------
# driver


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def measure_cell(mode, cell, usable, skipped, pki, client_cpus, args):
    """Runs `cell` on every usable server for --rounds rounds in rotated order; its result row:
    median ops/s, latency and server CPU per request for each server, paired ratios."""
    gen = args.gen
    # Size the run so each measurement lasts about --seconds on redis.
    ref = next(s for s in usable if s.name == "redis")
    if cell.setup:
        # Populate the keys the GET cells read, with the cell's key range and size.
        for s in usable:
            gen.fill(s, cell, pki, client_cpus)
    probe = gen.run(ref, cell, 20000, pki, client_cpus, timeout=300)[0]
    n = max(20000, int(probe * args.seconds))
    per = {s.name: {"rps": [], "p50": [], "p99": [], "cpu_us": []} for s in usable}
    ratios = {s.name: [] for s in usable if s.name != "redis"}
    vs_valkey = []
    commands = {}
    for rnd in range(args.rounds):
        order = usable[rnd % len(usable):] + usable[:rnd % len(usable)]
        round_rps = {}
        for s in order:
            cpu0 = s.cpu_seconds()
            rps, p50, p99, sent, argv = gen.run(s, cell, n, pki, client_cpus,
                                                timeout=max(120, args.seconds * 20))
            commands[s.name] = " ".join(argv)
            # Server CPU per request: per-core efficiency even when the single-threaded
            # client, not the server, limits throughput (pipeline 1 cells).
            per[s.name]["cpu_us"].append((s.cpu_seconds() - cpu0) * 1e6 / sent)
            per[s.name]["rps"].append(rps)
            per[s.name]["p50"].append(p50)
            per[s.name]["p99"].append(p99)
            round_rps[s.name] = rps
        for name in ratios:
            ratios[name].append(round_rps[name] / round_rps["redis"])
        if "valkey" in round_rps:
            vs_valkey.append(round_rps["hotkv"] / round_rps["valkey"])
    row = {"mode": mode, "cell": cell.name, "requests": n, "rounds": args.rounds, "servers": {},
           "loadgen": gen.name,
           "commands": commands, "skipped": skipped}
    for name, m in per.items():
        med = median(m["rps"])
        spread = (max(m["rps"]) - min(m["rps"])) / med if med else 0
        row["servers"][name] = {
            "rps_median": med, "rps_min": min(m["rps"]), "rps_max": max(m["rps"]),
            "p50_ms": median(m["p50"]), "p99_ms": median(m["p99"]),
            "cpu_us_per_op": median(m["cpu_us"]),
            "noisy": spread > NOISY_SPREAD, "raw": m,
        }
        if name in ratios:
            row["servers"][name]["ratio_vs_redis"] = median(ratios[name])
            row["servers"][name]["ratios"] = ratios[name]
    if vs_valkey:
        row["servers"]["hotkv"]["ratio_vs_valkey"] = median(vs_valkey)
        row["servers"]["hotkv"]["ratios_vs_valkey"] = vs_valkey
    h = row["servers"]["hotkv"]
    print(f"[{mode}] {cell.name}: hotkv {h['rps_median']:.0f} ops/s, redis "
          f"{row['servers']['redis']['rps_median']:.0f} ops/s, ratio {h['ratio_vs_redis']:.2f}"
          + (f", hotkv/valkey {h['ratio_vs_valkey']:.2f}" if "ratio_vs_valkey" in h else "")
          + (" (noisy)" if h["noisy"] else ""), file=sys.stderr)
    return row


def run_mode(mode, servers, pki, args, results):
    server_cpus, client_cpus = ("0", "1") if mode == "percore" else (None, None)
    if mode == "allcores":
        print("note: allcores mode lets hotkv use every core while the client shares them; "
              "read these figures as scaling, not as a per-core comparison", file=sys.stderr)
    selected = [c for c in cells() if not args.cells or c.name in args.cells]
    for srv in servers:
        srv.start(pki, mode, server_cpus)
        add_acl_user(srv)
    try:
        for cell in selected:
            usable = [s for s in servers if (not cell.tls or s.tls_ok) and (not cell.requires or knows(s, cell.requires))]
            skipped = sorted({s.name for s in servers} - {s.name for s in usable})
            if not args.gen.supports(cell):
                results["cells"].append({"mode": mode, "cell": cell.name, "skipped": [args.gen.name]})
                print(f"[{mode}] {cell.name}: skipped ({args.gen.name} cannot run it)", file=sys.stderr)
                continue
            if not any(s.name == "hotkv" for s in usable) or not any(s.name == "redis" for s in usable):
                results["cells"].append({"mode": mode, "cell": cell.name, "skipped": skipped})
                print(f"[{mode}] {cell.name}: skipped ({', '.join(skipped)} cannot run it)", file=sys.stderr)
                continue
            row = measure_cell(mode, cell, usable, skipped, pki, client_cpus, args)
            results["cells"].append(row)
        if mode == "percore" and not args.no_memory:
            kinds = [("string", args.mem_keys), ("hash10", 100000), ("set100", 20000), ("zset100", 20000),
                     ("stream-entry", 200000), ("geo-member", 200000)]
            for kind, count in [k for k in kinds if not args.mem_kinds or k[0] in args.mem_kinds]:
                row = {"mode": mode, "memory": kind, "items": count, "servers": {}}
                for s in servers:
                    # A fresh process per kind: after a FLUSHALL the allocator keeps the freed
                    # pages, and RSS deltas would read as nothing (or less than nothing).
                    s.stop()
                    s.start(pki, mode, server_cpus)
                    cmd = {"string": "set", "hash10": "hset", "set100": "sadd", "zset100": "zadd",
                           "stream-entry": "xadd", "geo-member": "geoadd"}[kind]
                    if not knows(s, cmd):
                        row["servers"][s.name] = None
                        continue
                    row["servers"][s.name] = mem_cell(s, kind, count)
                results["memory"].append(row)
                print(f"[memory] {kind}: " + ", ".join(
                    f"{k} {v['used_memory']:.1f} B" if v else f"{k} n/a" for k, v in row["servers"].items()),
                    file=sys.stderr)
    finally:
        for srv in servers:
            srv.stop()


def markdown(results):
    valkey = any("valkey" in r.get("servers", {}) for r in results["cells"])
    extra_head = (" valkey ops/s (min-max) | hotkv/valkey | valkey p50/p99 ms | valkey CPU µs/op |"
                  if valkey else "")
    lines = ["| mode | cell | hotkv ops/s (min-max) | redis ops/s (min-max) | hotkv/redis | hotkv p50/p99 ms | redis p50/p99 ms "
             "| server CPU µs/op hotkv / redis | CPU ratio |" + extra_head,
             "|---|---|---|---|---|---|---|---|---|" + ("---|---|---|---|" if valkey else "")]
    fmt = lambda s: f"{s['rps_median']:.0f} ({s['rps_min']:.0f}-{s['rps_max']:.0f}){' noisy' if s['noisy'] else ''}"
    for r in results["cells"]:
        if "servers" not in r:
            lines.append(f"| {r['mode']} | {r['cell']} | skipped ({', '.join(r['skipped'])}) | | | | | | |"
                         + (" | | | |" if valkey else ""))
            continue
        h, d = r["servers"]["hotkv"], r["servers"]["redis"]
        hc, dc = h.get("cpu_us_per_op", float("nan")), d.get("cpu_us_per_op", float("nan"))
        line = (f"| {r['mode']} | {r['cell']} | {fmt(h)} | {fmt(d)} | {h['ratio_vs_redis']:.2f} | "
                f"{h['p50_ms']:.3f}/{h['p99_ms']:.3f} | {d['p50_ms']:.3f}/{d['p99_ms']:.3f} | "
                f"{hc:.2f} / {dc:.2f} | {dc / hc if hc else float('nan'):.2f} |")
        if valkey:
            v = r["servers"].get("valkey")
            line += (f" {fmt(v)} | {h['ratio_vs_valkey']:.2f} | {v['p50_ms']:.3f}/{v['p99_ms']:.3f} | "
                     f"{v.get('cpu_us_per_op', float('nan')):.2f} |" if v else " n/a | | | |")
        lines.append(line)
    if results["memory"]:
        names = ["hotkv", "redis"] + (["valkey"] if valkey else [])
        lines += ["", "| memory per item | items | " + " | ".join(f"{n} used_memory / RSS (B)" for n in names) + " |",
                  "|---|---|" + "---|" * len(names)]
        for m in results["memory"]:
            f = lambda v: "n/a" if not v else f"{v['used_memory']:.1f} / {v['used_memory_rss']:.1f}"
            lines.append(f"| {m['memory']} | {m['items']} | " + " | ".join(f(m["servers"].get(n)) for n in names) + " |")
    return "\n".join(lines) + "\n"


def add_common_args(ap):
    """The options of every side-by-side run: the two servers' binaries, rounds, seconds per cell."""
    ap.add_argument("--hotkv", default=str(ROOT / "target" / "release" / "hotkv"))
    ap.add_argument("--redis", default=shutil.which("redis-server") or "redis-server")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--mode", choices=["percore", "allcores", "both"], default="percore")
    ap.add_argument("--cells", type=lambda s: s.split(","), default=None)
    ap.add_argument("--mem-keys", type=int, default=1000000)
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--mem-kinds", type=lambda s: s.split(","), default=None,
                    help="memory kinds to measure (string,hash10,set100,zset100,stream-entry,geo-member)")
    ap.add_argument("--no-tls", action="store_true")
    ap.add_argument("--quick", action="store_true", help="3 rounds of 1 s, 100k keys for memory")
    ap.add_argument("--out", default=str(ROOT / "benches" / "results"))
    ap.add_argument("--memtier", default=os.environ.get("MEMTIER"), metavar="PATH",
                    help="drive the SET and GET cells with this memtier_benchmark instead of "
                         "redis-benchmark (also the MEMTIER environment variable)")
    args = ap.parse_args()
    args.gen = Memtier(args.memtier) if args.memtier else RedisBenchmark()
    if args.quick:
        args.rounds, args.seconds, args.mem_keys = 3, 1.0, 100000
    if os.cpu_count() < 2 and args.mode != "allcores":
        print("note: fewer than 2 CPUs, server and client cannot be pinned apart", file=sys.stderr)
    servers = [Server("hotkv", hotkv_argv(args.hotkv)), Server("redis", redis_argv(args.redis))]
    if os.environ.get("VALKEY_SERVER"):
        servers.append(Server("valkey", redis_argv(os.environ["VALKEY_SERVER"])))
    results = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "host": os.uname().nodename,
               "cpus": os.cpu_count(), "args": {k: v for k, v in vars(args).items() if k != "gen"}, "cells": [], "memory": [],
               "versions": {
                   "redis": subprocess.run([args.redis, "--version"], capture_output=True, text=True).stdout.strip(),
                   "hotkv": subprocess.run([args.hotkv, "--version"], capture_output=True, text=True).stdout.strip(),
                   "redis-benchmark": subprocess.run(["redis-benchmark", "--version"], capture_output=True, text=True).stdout.strip(),
                   "loadgen": args.gen.name}}
    with tempfile.TemporaryDirectory(prefix="bench-pki-") as d:
        pki = None if args.no_tls else Pki(d)
        for mode in (["percore", "allcores"] if args.mode == "both" else [args.mode]):
            run_mode(mode, servers, pki, args, results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"{stamp}.json").write_text(json.dumps(results, indent=1))
    table = markdown(results)
    (out / f"{stamp}.md").write_text(table)
    (out / "latest.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
