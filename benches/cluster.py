#!/usr/bin/env python3
"""Cluster benchmarks: hotkv cluster nodes against redis-server cluster nodes, on this machine,
in the same run, with the same client, key distribution, node timeout and certificates.

1. Throughput of a three-primary cluster on loopback (`throughput`): both clusters are made
   with `redis-cli --cluster create` and stay up together; redis-benchmark `--cluster` drives
   one, then the other, in rotated order for several rounds. It spreads its connections over
   the primaries and puts a hash tag of each connection's node in every key, so both clusters
   see the same keys on the same slots. Each cell reports median ops/s with the min-max, the
   median of the per-round paired ratios hotkv/redis, and the server CPU per request: user +
   system time of every node (from /proc/<pid>/stat, all threads) read around each run,
   divided by the requests. With three nodes pinned to one core and the client on the other,
   at pipeline 1 the single-threaded client is what limits throughput, and CPU per request is
   the figure that tells the servers apart. Plain, then over TLS: TLS clients, and the bus on
   mutual TLS (`tls-cluster yes`), with one throwaway CA and node certificate for all.
2. Idle CPU of a six-node cluster (`idle`): 3 primaries + 3 replicas
   (`--cluster-replicas 1`) of each kind, formed, left to settle, then the total CPU of the
   six nodes over a few windows in which no client sends anything: what the cluster bus (and
   each server's own cron) costs. Both clusters idle at the same time, so they share whatever
   else the machine is doing. Bus messages sent (CLUSTER INFO) and context switches of every
   node's threads are reported alongside, to say where the CPU goes.

Every process listens on 127.0.0.1 only, every command has a timeout, the whole run has a
time budget, and every node is stopped on exit, on SIGINT/SIGTERM and when the budget runs out.
Raw numbers and exact commands go to benches/results/cluster-<time>.json next to a markdown
table (also benches/results/latest-cluster.md).

Usage: benches/run.sh cluster [--quick] [--only throughput|idle] [--rounds N] [--seconds S]
                              [--idle-seconds S] [--idle-windows N] [--node-timeout MS]
                              [--no-tls] [--no-pin] [--cells a,b] [--out DIR]
"""

import argparse
import csv
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True  # importing harness.py must not leave a __pycache__ in benches/
from harness import NOISY_SPREAD, Pki, cpu_seconds_of, free_port, median  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("hotkv", "redis")


class Budget(Exception):
    """The run's time budget ran out (SIGALRM) or a stop signal arrived."""


# ---------------------------------------------------------------------------------------------
# nodes


class Node:
    """One cluster node process: hotkv or redis-server, plain or with TLS on clients and bus."""

    def __init__(self, kind, binary, workdir, pki, node_timeout, cpus):
        self.kind, self.pki = kind, pki
        self.port, self.tls_port, self.bus_port = free_port(), free_port(), free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=workdir))
        a = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--protected-mode", "no", "--loglevel", "notice", "--dir", str(self.dir),
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(node_timeout), "--cluster-port", str(self.bus_port)]
        a += ["--worker-threads", "1"] if kind == "hotkv" else ["--io-threads", "1"]
        if pki:
            a += pki.server_args(self.tls_port) + ["--tls-cluster", "yes", "--tls-replication", "yes"]
        self.argv = (["taskset", "-c", cpus] if cpus is not None else []) + a
        self.log = open(self.dir / "server.log", "wb")
        # Own session: a stop signal to the harness is not delivered to the nodes directly, and
        # the cleanup below can kill each node's group by id.
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir,
                                     start_new_session=True)

    @property
    def client_port(self):
        """The port clients use: the TLS one in TLS mode."""
        return self.tls_port if self.pki else self.port

    def cli(self, *args, timeout=10):
        """redis-cli on the plain port (always open, so the harness never pays a handshake)."""
        return subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(self.port)] + list(args),
                              capture_output=True, text=True, timeout=timeout).stdout

    def info(self, *args):
        fields = {}
        for line in self.cli(*args).splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                fields[k.strip()] = v.strip()
        return fields

    def cpu_seconds(self):
        """User + system CPU time of the node so far, all its threads (taskset execs: same pid)."""
        return cpu_seconds_of(self.proc.pid)

    def context_switches(self):
        """Voluntary + involuntary context switches summed over the node's threads: wakeups."""
        total = 0
        try:
            for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
                for line in (task / "status").read_text().splitlines():
                    if "ctxt_switches:" in line:
                        total += int(line.split()[1])
        except (OSError, ValueError):
            pass
        return total

    def threads(self):
        try:
            return len(list(Path(f"/proc/{self.proc.pid}/task").iterdir()))
        except OSError:
            return 0

    def stop(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=10)
        self.log.close()


class Cluster:
    """`size` nodes of one kind, made into a cluster by redis-cli --cluster create."""

    def __init__(self, kind, pki, replicas):
        self.kind, self.pki, self.replicas = kind, pki, replicas
        self.nodes = []
        self.create_argv = []

    def start(self, binary, workdir, node_timeout, size, cpus):
        for _ in range(size):
            self.nodes.append(Node(self.kind, binary, workdir, self.pki, node_timeout, cpus))

    def up(self, binary, workdir, node_timeout, size, cpus):
        """Starts `size` nodes, makes them a cluster and waits until it has formed."""
        self.start(binary, workdir, node_timeout, size, cpus)
        self.create()
        self.wait_formed()

    def wait_up(self, timeout=20):
        deadline = time.time() + timeout
        for n in self.nodes:
            while "PONG" not in n.cli("PING", timeout=2):
                if n.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"{self.kind} node did not start: {' '.join(n.argv)}\n"
                                       + (n.dir / "server.log").read_text()[-2000:])
                time.sleep(0.05)

    def tls_args(self):
        return self.pki.client_args() + ["--cert", str(self.pki.d / "node.crt"),
                                         "--key", str(self.pki.d / "node.key")] if self.pki else []

    def create(self):
        self.wait_up()
        addrs = [f"127.0.0.1:{n.client_port}" for n in self.nodes]
        self.create_argv = (["redis-cli"] + self.tls_args() + ["--cluster", "create"] + addrs
                            + ["--cluster-replicas", str(self.replicas), "--cluster-yes"])
        out = subprocess.run(self.create_argv, capture_output=True, text=True, timeout=120)
        if "[OK] All 16384 slots covered." not in out.stdout:
            raise RuntimeError(f"{self.kind}: cluster create failed:\n{out.stdout[-2000:]}\n{out.stderr[-500:]}")

    def formed(self):
        """Every node says ok, knows every node with a connected link, and no one is suspect;
        redis replicas have finished their initial sync."""
        for n in self.nodes:
            if n.info("CLUSTER", "INFO").get("cluster_state") != "ok":
                return False
            table = n.cli("CLUSTER", "NODES").splitlines()
            if len(table) != len(self.nodes):
                return False
            for line in table:
                f = line.split()
                if len(f) < 8 or f[7] != "connected" or any(x in f[2] for x in ("fail", "handshake", "noaddr")):
                    return False
            if self.kind == "redis" and "slave" in next(l for l in table if "myself" in l).split()[2]:
                if n.info("INFO", "replication").get("master_link_status") != "up":
                    return False
        return True

    def wait_formed(self, timeout=60):
        deadline = time.time() + timeout
        while not self.formed():
            if time.time() > deadline:
                raise RuntimeError(f"{self.kind}: cluster not formed after {timeout} s:\n"
                                   + self.nodes[0].cli("CLUSTER", "NODES"))
            time.sleep(0.2)

    def cpu_seconds(self):
        return sum(n.cpu_seconds() for n in self.nodes)

    def messages_sent(self):
        return sum(int(n.info("CLUSTER", "INFO").get("cluster_stats_messages_sent", 0)) for n in self.nodes)

    def context_switches(self):
        return sum(n.context_switches() for n in self.nodes)

    def dbsizes(self):
        return [int(n.cli("DBSIZE").strip() or 0) for n in self.nodes]

    def stop(self):
        for n in self.nodes:
            n.stop()


def start_clusters(args, workdir, pki, size, replicas, cpus):
    """One cluster of each kind, created one after the other, both left running."""
    out = {}
    try:
        for kind in KINDS:
            out[kind] = Cluster(kind, pki, replicas)
            LIVE.append(out[kind])
            out[kind].start(args.binaries[kind], workdir, args.node_timeout, size, cpus)
            out[kind].create()
        for c in out.values():
            c.wait_formed()
    except BaseException:
        for c in out.values():
            c.stop()
        raise
    return out


# Every cluster started and not yet stopped, for the exit handlers.
LIVE = []


def stop_all():
    while LIVE:
        LIVE.pop().stop()


def arm_budget(seconds):
    """Raise Budget on SIGINT/SIGTERM/SIGHUP and when `seconds` have passed, so the caller's
    `finally` stops every node and still writes what was measured."""
    def stop(signum, _frame):
        raise Budget(f"signal {signum}")
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGALRM):
        signal.signal(s, stop)
    signal.alarm(seconds)


def common_options(ap, budget):
    """The options every cluster-mode benchmark takes: binaries, node timeout, TLS, pinning,
    time budget, output folder."""
    ap.add_argument("--hotkv", default=str(ROOT / "target" / "release" / "hotkv"))
    ap.add_argument("--redis", default=shutil.which("redis-server") or "redis-server")
    ap.add_argument("--node-timeout", type=int, default=15000, help="cluster-node-timeout of every node, ms")
    ap.add_argument("--no-tls", action="store_true")
    ap.add_argument("--no-pin", action="store_true", help="do not pin nodes to CPU 0 and clients to CPU 1")
    ap.add_argument("--budget", type=int, default=budget, help="stop everything after this many seconds")
    ap.add_argument("--out", default=str(ROOT / "benches" / "results"))


def begin(args, client):
    """Resolves the binaries (args.binaries), arms the time budget, and returns what every
    results file starts with: when, where, the arguments, the versions of both servers and of
    the client tool."""
    # Nodes run in their own directories: a relative --hotkv must not depend on that.
    args.binaries = {k: os.path.abspath(shutil.which(b) or b) for k, b in (("hotkv", args.hotkv), ("redis", args.redis))}
    arm_budget(args.budget)
    version = lambda b: subprocess.run([b, "--version"], capture_output=True, text=True).stdout.strip()
    return {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "host": os.uname().nodename,
            "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(), "args": dict(vars(args)),
            "versions": {"redis": version(args.redis), "hotkv": version(args.hotkv), client: version(client)}}


def write_results(out_dir, name, results, table):
    """`<name>-<time>.json` (raw) and `.md` (the table) in out_dir, the table also as
    `latest-<name>.md` and on stdout."""
    results["loadavg_end"] = os.getloadavg()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"{name}-{stamp}.json").write_text(json.dumps(results, indent=1))
    (out / f"{name}-{stamp}.md").write_text(table)
    (out / f"latest-{name}.md").write_text(table)
    print(table)


# ---------------------------------------------------------------------------------------------
# throughput


def cells():
    kv = ["-r", "100000", "-d", "100", "-c", "50"]
    return [
        ("set-p1", "set", kv + ["-P", "1"], False),
        ("get-p1", "get", kv + ["-P", "1"], True),
        ("set-p16", "set", kv + ["-P", "16"], False),
        ("get-p16", "get", kv + ["-P", "16"], True),
    ]


def bench_argv(cluster, test, extra, n, client_cpus):
    a = ["redis-benchmark", "--cluster", "-h", "127.0.0.1", "-p", str(cluster.nodes[0].client_port),
         "-t", test, "-n", str(n), "--csv"] + extra + cluster.tls_args()
    return (["taskset", "-c", client_cpus] if client_cpus is not None else []) + a


def run_bench(argv, timeout):
    """ops/s, p50 and p99 ms of one redis-benchmark run; in cluster mode it prints the masters
    it found before the CSV, which is left out."""
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    lines = [l for l in out.stdout.splitlines() if l.startswith('"') and not l.startswith('"test"')]
    rows = list(csv.reader(lines))
    if out.returncode != 0 or not rows:
        raise RuntimeError(f"{' '.join(argv)} failed: {out.stdout[-300:]} {out.stderr.strip()[-300:]}")
    return float(rows[0][1]), float(rows[0][4]), float(rows[0][6])


def with_pipeline(extra, p):
    i = extra.index("-P")
    return extra[:i] + ["-P", str(p)] + extra[i + 2:]


def size_run(clusters, test, extra, seconds, client_cpus):
    """Requests for a run that lasts about `seconds` on the faster cluster. In cluster mode
    redis-benchmark runs a client thread per primary and notices the end of a run on its 250 ms
    progress timer, so a run lasts a multiple of about 250 ms: a short probe understates the
    rate, and a run sized from it is short and coarse. The probe grows until it lasts a second,
    timed here by the wall clock on both clusters."""
    n = 20000
    while True:
        rates = []
        for c in clusters.values():
            t0 = time.monotonic()
            run_bench(bench_argv(c, test, extra, n, client_cpus), timeout=300)
            rates.append(n / (time.monotonic() - t0))
        if n / max(rates) >= 1.0 or n >= 50_000_000:
            return max(20000, int(max(rates) * seconds))
        n = int(max(rates) * 1.5)


def throughput(args, workdir, pki, results):
    server_cpus, client_cpus = (None, None) if args.no_pin else ("0", "1")
    tag = "tls" if pki else "plain"
    clusters = start_clusters(args, workdir, pki, 3, 0, server_cpus)
    try:
        results["create"][tag] = {k: " ".join(c.create_argv) for k, c in clusters.items()}
        for name, test, extra, setup in cells():
            cell = f"{tag}-{name}"
            if args.cells and name not in args.cells and cell not in args.cells:
                continue
            if setup:
                for c in clusters.values():
                    run_bench(bench_argv(c, "set", with_pipeline(extra, 16), 200000, client_cpus), timeout=300)
            load_before = os.getloadavg()[0]
            n = size_run(clusters, test, extra, args.seconds, client_cpus)
            per = {k: {"rps": [], "p50": [], "p99": [], "cpu_us": []} for k in KINDS}
            ratios, cpu_ratios, commands = [], [], {}
            for rnd in range(args.rounds):
                order = KINDS if rnd % 2 == 0 else KINDS[::-1]
                for kind in order:
                    c = clusters[kind]
                    argv = bench_argv(c, test, extra, n, client_cpus)
                    commands[kind] = " ".join(argv)
                    cpu0 = c.cpu_seconds()
                    rps, p50, p99 = run_bench(argv, timeout=max(120, args.seconds * 20))
                    per[kind]["cpu_us"].append((c.cpu_seconds() - cpu0) * 1e6 / n)
                    per[kind]["rps"].append(rps)
                    per[kind]["p50"].append(p50)
                    per[kind]["p99"].append(p99)
                ratios.append(per["hotkv"]["rps"][-1] / per["redis"]["rps"][-1])
                cpu_ratios.append(per["redis"]["cpu_us"][-1] / per["hotkv"]["cpu_us"][-1])
            row = {"cell": cell, "requests": n, "rounds": args.rounds, "commands": commands, "servers": {},
                   "ratio": median(ratios), "ratios": ratios, "cpu_ratio": median(cpu_ratios),
                   "cpu_ratios": cpu_ratios, "keys_per_node": {k: c.dbsizes() for k, c in clusters.items()},
                   "loadavg_1m": [load_before, os.getloadavg()[0]]}
            for kind, m in per.items():
                med = median(m["rps"])
                row["servers"][kind] = {
                    "rps_median": med, "rps_min": min(m["rps"]), "rps_max": max(m["rps"]),
                    "p50_ms": median(m["p50"]), "p99_ms": median(m["p99"]),
                    "cpu_us_per_op": median(m["cpu_us"]), "cpu_us_min": min(m["cpu_us"]),
                    "cpu_us_max": max(m["cpu_us"]),
                    "noisy": (max(m["rps"]) - min(m["rps"])) / med > NOISY_SPREAD if med else False, "raw": m,
                }
            results["throughput"].append(row)
            h, r = row["servers"]["hotkv"], row["servers"]["redis"]
            print(f"[cluster] {cell}: hotkv {h['rps_median']:.0f} ops/s {h['cpu_us_per_op']:.2f} us/op, redis "
                  f"{r['rps_median']:.0f} ops/s {r['cpu_us_per_op']:.2f} us/op, ratio {row['ratio']:.2f}, "
                  f"CPU ratio {row['cpu_ratio']:.2f}", file=sys.stderr)
    finally:
        for c in clusters.values():
            c.stop()
            LIVE.remove(c)


# ---------------------------------------------------------------------------------------------
# idle


def idle(args, workdir, pki, results):
    tag = "tls" if pki else "plain"
    clusters = start_clusters(args, workdir, pki, 6, 1, None)
    try:
        # Let the bus settle after the join (redis replicas' syncs, first gossip rounds).
        time.sleep(args.settle)
        windows = {k: [] for k in KINDS}
        load_before = os.getloadavg()[0]
        for _ in range(args.idle_windows):
            start = {k: (c.cpu_seconds(), c.messages_sent(), c.context_switches(), time.monotonic())
                     for k, c in clusters.items()}
            time.sleep(args.idle_seconds)
            for kind, c in clusters.items():
                cpu0, msg0, cs0, t0 = start[kind]
                wall = time.monotonic() - t0
                windows[kind].append({
                    "seconds": wall,
                    "cpu_ms_per_s": (c.cpu_seconds() - cpu0) * 1e3 / wall,
                    "messages_per_s": (c.messages_sent() - msg0) / wall,
                    "wakeups_per_s": (c.context_switches() - cs0) / wall,
                })
        row = {"bus": tag, "nodes": 6, "replicas_per_primary": 1, "node_timeout_ms": args.node_timeout,
               "window_s": args.idle_seconds, "windows": windows, "servers": {},
               "loadavg_1m": [load_before, os.getloadavg()[0]],
               "create": {k: " ".join(c.create_argv) for k, c in clusters.items()},
               "threads_per_node": {k: [n.threads() for n in c.nodes] for k, c in clusters.items()}}
        for kind, ws in windows.items():
            cpu = [w["cpu_ms_per_s"] for w in ws]
            row["servers"][kind] = {
                "cpu_ms_per_s": median(cpu), "cpu_min": min(cpu), "cpu_max": max(cpu),
                "messages_per_s": median([w["messages_per_s"] for w in ws]),
                "wakeups_per_s": median([w["wakeups_per_s"] for w in ws]),
            }
        h, r = row["servers"]["hotkv"], row["servers"]["redis"]
        row["ratio"] = h["cpu_ms_per_s"] / r["cpu_ms_per_s"] if r["cpu_ms_per_s"] else float("nan")
        results["idle"].append(row)
        print(f"[cluster] idle-{tag}: hotkv {h['cpu_ms_per_s']:.2f} ms/s, redis {r['cpu_ms_per_s']:.2f} ms/s "
              f"(6 nodes), hotkv/redis {row['ratio']:.2f}", file=sys.stderr)
    finally:
        for c in clusters.values():
            c.stop()
            LIVE.remove(c)


# ---------------------------------------------------------------------------------------------
# report


def markdown(results):
    lines = []
    if results["throughput"]:
        lines += ["| cell | hotkv ops/s (min-max) | redis ops/s (min-max) | hotkv/redis | hotkv p50/p99 ms "
                  "| redis p50/p99 ms | server CPU µs/op hotkv (min-max) | redis (min-max) | CPU ratio | load |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        fmt = lambda s: f"{s['rps_median']:.0f} ({s['rps_min']:.0f}-{s['rps_max']:.0f}){' noisy' if s['noisy'] else ''}"
        cpu = lambda s: f"{s['cpu_us_per_op']:.2f} ({s['cpu_us_min']:.2f}-{s['cpu_us_max']:.2f})"
        load = lambda r: "-".join(f"{x:.1f}" for x in r.get("loadavg_1m", []))
        for r in results["throughput"]:
            h, d = r["servers"]["hotkv"], r["servers"]["redis"]
            lines.append(f"| {r['cell']} | {fmt(h)} | {fmt(d)} | {r['ratio']:.2f} | {h['p50_ms']:.3f}/{h['p99_ms']:.3f} "
                         f"| {d['p50_ms']:.3f}/{d['p99_ms']:.3f} | {cpu(h)} | {cpu(d)} | {r['cpu_ratio']:.2f} "
                         f"| {load(r)} |")
    if results["idle"]:
        lines += ["", "| idle, 6 nodes | node timeout | hotkv CPU ms/s (min-max) | redis CPU ms/s (min-max) "
                  "| hotkv/redis | bus messages sent/s hotkv / redis | wakeups/s hotkv / redis | load |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in results["idle"]:
            h, d = r["servers"]["hotkv"], r["servers"]["redis"]
            lines.append(f"| {r['bus']} | {r['node_timeout_ms']} ms | {h['cpu_ms_per_s']:.2f} ({h['cpu_min']:.2f}-"
                         f"{h['cpu_max']:.2f}) | {d['cpu_ms_per_s']:.2f} ({d['cpu_min']:.2f}-{d['cpu_max']:.2f}) "
                         f"| {r['ratio']:.2f} | {h['messages_per_s']:.1f} / {d['messages_per_s']:.1f} "
                         f"| {h['wakeups_per_s']:.0f} / {d['wakeups_per_s']:.0f} "
                         f"| {'-'.join(f'{x:.1f}' for x in r.get('loadavg_1m', []))} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    common_options(ap, budget=3600)
    ap.add_argument("--only", choices=["throughput", "idle"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0,
                    help="length of one throughput run on the faster cluster (the end is seen to 250 ms)")
    ap.add_argument("--cells", type=lambda s: s.split(","), default=None,
                    help="throughput cells: set-p1,get-p1,set-p16,get-p16 (or tls-/plain- prefixed)")
    ap.add_argument("--idle-seconds", type=float, default=30.0, help="length of one idle window")
    ap.add_argument("--idle-windows", type=int, default=3)
    ap.add_argument("--settle", type=float, default=5.0, help="seconds between forming and measuring idle")
    ap.add_argument("--quick", action="store_true", help="3 rounds of 1 s, two idle windows of 10 s")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.idle_seconds, args.idle_windows = 3, 1.0, 10.0, 2
    results = begin(args, "redis-benchmark")
    results.update({"create": {}, "throughput": [], "idle": []})
    status = 0
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as workdir:
        try:
            pki_dir = Path(workdir) / "pki"
            pki_dir.mkdir()
            pki = None if args.no_tls else Pki(pki_dir)
            for p in [None] + ([pki] if pki else []):
                if args.only in (None, "throughput"):
                    throughput(args, workdir, p, results)
            for p in [None] + ([pki] if pki else []):
                if args.only in (None, "idle"):
                    idle(args, workdir, p, results)
        except Budget as e:
            print(f"stopped early ({e}); writing what was measured", file=sys.stderr)
            status = 1
        finally:
            signal.alarm(0)
            stop_all()
    write_results(args.out, "cluster", results, markdown(results))
    return status


if __name__ == "__main__":
    sys.exit(main())
