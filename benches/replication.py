#!/usr/bin/env python3
"""Replication cost benchmark: what one attached replica costs a primary's write throughput,
for hotkv and for redis-server, on this machine, in the same run.

For each kind, in turn (one pair at a time, so they never share the CPU with each other):

1. start a primary pinned to CPU 0 (hotkv with one worker thread, redis-server with
   io-threads 1: one core each) and run `redis-benchmark -t set -P 16 -c 50 -r 100000 -d 32`
   from CPU 1: ops/s and the primary's CPU time per request, with no replica (backlog off);
2. start a replica of the same kind on CPU 1 (it shares the client's core, for both kinds
   alike), REPLICAOF the primary, wait until `master_link_status:up`, run the same benchmark
   again, then wait until the replica's offset equals the primary's, so the stream was
   really carried;
3. the figure is with/without for each kind: the issue's target is hotkv within 10% of its
   own no-replica throughput, and the ratio hotkv/redis-server of both;
4. a control, with pinning: a fresh primary alone again, while a stand-in process on CPU 1
   burns the CPU share the replica used there in step 2. On two cores the replica slows the
   client it shares a core with, so the primary gets smaller batches per read and spends more
   per request whoever sends the stream; the control shows how much of step 2's rise that
   alone explains, and with/control is what the replica itself costs the primary;
   a second control, the replay: a fresh primary alone again, while on CPU 1 a replica of the
   same kind applies SETs at step 2's rate, streamed by a stand-in primary
   (benches/stand_in_primary.py). CPU 1 then does what it did in step 2, cache and wakeups
   included, except the real primary's part of the stream: with/replay is the primary's own
   cost of replicating;
5. a CPU budget: the CPU per request of the client (redis-benchmark), the primary and the
   replica, added up. Two cores give at most 2 s of CPU per second, so with/alone can be no
   better than (client + primary alone) / (client + primary + replica with), however the
   three are scheduled: the ceiling a replica that costs its primary nothing would reach.

Rounds (--rounds) alternate which kind goes first; medians are reported. Raw figures go to
benches/results/replication-<time>.json and a markdown table to
benches/results/latest-replication.md.

With --paired N, instead of the rounds: N pairs of short segments, one on a primary with its
replica and one on a replay primary, both kept running side by side (see `paired`).

Usage: benches/run.sh replication [--rounds N] [--requests N] [--no-pin] [--hotkv PATH] [--hotkv-b PATH]
       benches/run.sh replication --paired N [--segment N] [--hotkv PATH] [--hotkv-b PATH]
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True  # importing must not leave a __pycache__ in benches/
from harness import Server, cpu_seconds_of, hotkv_argv, median, redis_argv, run_bench  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                          timeout=30).stdout.strip()


def field(port, section, name):
    for line in cli(port, "INFO", section).splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return None


def wait(cond, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


# The control's stand-in for the replica's CPU use on the client's core: busy for `share` of
# every 2 ms, asleep for the rest.
HOG = """
import sys, time
share, period = float(sys.argv[1]), 0.002
while True:
    end = time.perf_counter() + share * period
    while time.perf_counter() < end:
        pass
    time.sleep((1 - share) * period)
"""


def children_cpu():
    """CPU seconds of this process's waited-for children: around `run_bench`, redis-benchmark's."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(primary, bench, args, beside=None):
    """Runs `bench` against `primary`: ops/s, latencies, the CPU per request of the primary and
    of the client, and the share of wall time process `beside` (the replica, the stand-in) spent
    on a CPU meanwhile, with its CPU per request."""
    argv = bench[:]
    at = argv.index("redis-benchmark") + 1
    argv[at:at] = ["-p", str(primary.port)]
    cpu0, beside0, wall0 = primary.cpu_seconds(), cpu_seconds_of(beside) if beside else 0.0, time.time()
    client0 = children_cpu()
    rps, p50, p99 = run_bench(argv, timeout=600)
    cpu, wall = primary.cpu_seconds() - cpu0, time.time() - wall0
    per_req = 1e6 / args.requests
    row = {"rps": rps, "p50_ms": p50, "p99_ms": p99, "primary_cpu_us_per_req": cpu * per_req,
           "client_cpu_us_per_req": (children_cpu() - client0) * per_req}
    share = None
    if beside:
        beside_cpu = cpu_seconds_of(beside) - beside0
        share = beside_cpu / wall
        row["beside_cpu_us_per_req"] = beside_cpu * per_req
    return row, share


def one_kind(name, argv_fn, args):
    primary = Server(f"{name}-primary", argv_fn)
    replica = Server(f"{name}-replica", argv_fn)
    pin = not args.no_pin
    bench = ["redis-benchmark", "-t", "set", "-P", "16", "-c", "50", "-r", "100000", "-d", "32",
             "-n", str(args.requests), "--csv"]
    if pin:
        bench = ["taskset", "-c", "1"] + bench
    out = {}
    try:
        primary.start(None, "percore", "0" if pin else None)
        for label in ("alone", "with_replica"):
            if label == "with_replica":
                replica.start(None, "percore", "1" if pin else None)
                cli(replica.port, "REPLICAOF", "127.0.0.1", str(primary.port))
                if not wait(lambda: field(replica.port, "replication", "master_link_status") == "up"):
                    raise RuntimeError(f"{name} replica never linked (log {replica.log.name})")
            out[label], share = measure(primary, bench, args, replica.proc.pid if label == "with_replica" else None)
            if label == "with_replica":
                out[label]["replica_cpu_share"] = share
                target = field(primary.port, "replication", "master_repl_offset")
                caught_up = wait(lambda: field(replica.port, "replication", "slave_repl_offset") == target)
                out[label]["replica_caught_up"] = caught_up
                out[label]["stream_bytes"] = int(target or 0)
        out["ratio"] = out["with_replica"]["rps"] / out["alone"]["rps"]
        if pin:
            replica.stop()
            primary.stop()
            out["control"] = control(name, argv_fn, bench, out["with_replica"]["replica_cpu_share"], args)
            out["with_vs_control_cpu"] = (out["with_replica"]["primary_cpu_us_per_req"]
                                          / out["control"]["primary_cpu_us_per_req"])
            out["replay"] = replay(name, argv_fn, bench, out["with_replica"]["rps"], args)
            out["with_vs_replay_cpu"] = (out["with_replica"]["primary_cpu_us_per_req"]
                                         / out["replay"]["primary_cpu_us_per_req"])
        return out
    finally:
        replica.stop()
        primary.stop()


def control(name, argv_fn, bench, share, args):
    """Step 4 of the module doc: a fresh primary alone, CPU 1 loaded as the replica loaded it."""
    primary = Server(f"{name}-control", argv_fn)
    hog = None
    try:
        primary.start(None, "percore", "0")
        hog = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-c", HOG, f"{min(share, 0.95):.3f}"])
        row, share = measure(primary, bench, args, hog.pid)
        row["stand_in_cpu_share"] = share
        return row
    finally:
        if hog:
            hog.kill()
            hog.wait()
        primary.stop()


def fed_replica(replica, work):
    """Starts the stand-in primary (paused until a "go" line on its stdin) on CPU 1 and
    `replica` on CPU 1 following it, and waits for the link; the stand-in's process."""
    port_file = Path(work) / "port"
    feeder = subprocess.Popen(["taskset", "-c", "1", sys.executable, str(ROOT / "benches/stand_in_primary.py"),
                               str(port_file), "0"], stdin=subprocess.PIPE, text=True)
    try:
        if not wait(lambda: port_file.exists() and port_file.read_text().strip() != ""):
            raise RuntimeError("the stand-in primary never listened")
        replica.start(None, "percore", "1")
        cli(replica.port, "REPLICAOF", "127.0.0.1", port_file.read_text().strip())
        if not wait(lambda: field(replica.port, "replication", "master_link_status") == "up"):
            raise RuntimeError(f"{replica.name} never linked (log {replica.log.name})")
    except BaseException:
        feeder.kill()
        feeder.wait()
        raise
    return feeder


def replay(name, argv_fn, bench, rate, args):
    """Step 4's second control: a fresh primary alone, CPU 1 running a replica of the same kind
    that a stand-in primary feeds at `rate` SETs a second."""
    primary = Server(f"{name}-replay", argv_fn)
    replica = Server(f"{name}-replay-replica", argv_fn)
    feeder = None
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as work:
        try:
            primary.start(None, "percore", "0")
            feeder = fed_replica(replica, work)
            feeder0 = cpu_seconds_of(feeder.pid)
            feeder.stdin.write(f"go {rate:.0f}\n")
            feeder.stdin.flush()
            row, share = measure(primary, bench, args, replica.proc.pid)
            row["replica_cpu_share"] = share
            row["feeder_cpu_us_per_req"] = (cpu_seconds_of(feeder.pid) - feeder0) * 1e6 / args.requests
            return row
        finally:
            if feeder:
                feeder.kill()
                feeder.wait()
            replica.stop()
            primary.stop()


def paired(name, argv_fn, args):
    """--paired: the replay control's comparison in short alternating segments. A primary with
    its replica and a replay primary (alone, its core's neighbour a replica fed by the stand-in
    at the with-replica rate) run side by side for the whole run; segments of --segment SETs go
    to one and then the other (the order alternates), so each pair of figures is taken within
    about a second of host time. On a shared host whose speed drifts by 10-20% between runs
    minutes apart, the per-pair ratios are what can tell a few percent."""
    primary, replica = Server(f"{name}-paired", argv_fn), Server(f"{name}-paired-replica", argv_fn)
    lone, fed = Server(f"{name}-paired-replay", argv_fn), Server(f"{name}-paired-replay-replica", argv_fn)
    bench = ["taskset", "-c", "1", "redis-benchmark", "-t", "set", "-P", "16", "-c", "50", "-r", "100000",
             "-d", "32", "-n", str(args.segment), "--csv"]
    per_segment = argparse.Namespace(requests=args.segment)
    feeder = None
    with tempfile.TemporaryDirectory(prefix="bench-paired-") as work:
        try:
            primary.start(None, "percore", "0")
            replica.start(None, "percore", "1")
            cli(replica.port, "REPLICAOF", "127.0.0.1", str(primary.port))
            if not wait(lambda: field(replica.port, "replication", "master_link_status") == "up"):
                raise RuntimeError(f"{replica.name} never linked (log {replica.log.name})")
            lone.start(None, "percore", "0")
            feeder = fed_replica(fed, work)

            def with_replica():
                row, _ = measure(primary, bench, per_segment, replica.proc.pid)
                target = field(primary.port, "replication", "master_repl_offset")
                # The stream is applied before the other primary's segment takes the core.
                if not wait(lambda: field(replica.port, "replication", "slave_repl_offset") == target):
                    raise RuntimeError(f"{name} replica did not catch up (log {replica.log.name})")
                return row

            def replay_at(rate):
                feeder.stdin.write(f"go {rate:.0f}\n")
                feeder.stdin.flush()
                try:
                    row, _ = measure(lone, bench, per_segment, fed.proc.pid)
                finally:
                    feeder.stdin.write("stop\n")
                    feeder.stdin.flush()
                return row

            rate = with_replica()["rps"]  # a warm-up, and the first replay's rate
            pairs = []
            for i in range(args.paired):
                if i % 2 == 0:
                    w = with_replica()
                    p = replay_at(w["rps"])
                else:
                    p = replay_at(rate)
                    w = with_replica()
                rate = w["rps"]
                pairs.append({"with": w, "replay": p,
                              "ratio": w["primary_cpu_us_per_req"] / p["primary_cpu_us_per_req"]})
            return pairs
        finally:
            if feeder:
                feeder.kill()
                feeder.wait()
            for s in (replica, primary, fed, lone):
                s.stop()


def paired_report(results, args):
    """The table of --paired: per kind, the with-replica / replay CPU ratio of each pair, their
    median and mean with a 95% interval, and the pooled ratio (total CPU over total CPU)."""
    lines = [f"Paired segments ({args.paired} pairs of {args.segment} SETs, alternating order): the primary's CPU per "
             "request with its replica / replay control.", "",
             "| kind | median | mean ± 95% | pooled | pairs over 1.10 | with µs/req | replay µs/req |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, pairs in results.items():
        ratios = [p["ratio"] for p in pairs]
        n = len(ratios)
        mean = sum(ratios) / n
        sd = (sum((r - mean) ** 2 for r in ratios) / (n - 1)) ** 0.5 if n > 1 else 0.0
        half = 1.96 * sd / n ** 0.5
        w = sum(p["with"]["primary_cpu_us_per_req"] for p in pairs) / n
        r = sum(p["replay"]["primary_cpu_us_per_req"] for p in pairs) / n
        over = sum(1 for x in ratios if x > 1.10)
        lines.append(f"| {name} | {median(ratios):.3f} | {mean:.3f} ± {half:.3f} | {w / r:.3f} | {over}/{n} | "
                     f"{w:.3f} | {r:.3f} |")
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=2_000_000)
    ap.add_argument("--no-pin", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benches" / "results"))
    ap.add_argument("--hotkv", default=str(ROOT / "target" / "release" / "hotkv"))
    ap.add_argument("--hotkv-b", metavar="PATH",
                    help="a second hotkv binary run as kind hotkv-b in the same rounds (an A/B of a change)")
    ap.add_argument("--paired", type=int, default=0, metavar="PAIRS",
                    help="instead of rounds, the replay comparison in PAIRS alternating pairs of segments")
    ap.add_argument("--segment", type=int, default=500_000, help="SETs per --paired segment")
    args = ap.parse_args()
    kinds = [("hotkv", hotkv_argv(args.hotkv)), ("redis", redis_argv("redis-server"))]
    if args.hotkv_b:
        kinds.insert(1, ("hotkv-b", hotkv_argv(args.hotkv_b)))
    if args.paired:
        results = {name: paired(name, fn, args) for name, fn in kinds}
        text = "\n".join(paired_report(results, args)) + "\n"
        print(text)
        outdir = Path(args.out)
        outdir.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        (outdir / f"replication-paired-{stamp}.json").write_text(json.dumps(results, indent=1))
        (outdir / "latest-replication-paired.md").write_text(text)
        return
    rounds = []
    for r in range(args.rounds):
        order = kinds if r % 2 == 0 else kinds[::-1]
        rounds.append({name: one_kind(name, fn, args) for name, fn in order})
        print(json.dumps(rounds[-1]), flush=True)
    # Each median's place in a round's figures for one kind.
    fields = {
        "alone_rps": ("alone", "rps"),
        "with_rps": ("with_replica", "rps"),
        "ratio": ("ratio",),
        "alone_cpu_us": ("alone", "primary_cpu_us_per_req"),
        "with_cpu_us": ("with_replica", "primary_cpu_us_per_req"),
        "client_alone_us": ("alone", "client_cpu_us_per_req"),
        "client_with_us": ("with_replica", "client_cpu_us_per_req"),
        "replica_us": ("with_replica", "beside_cpu_us_per_req"),
    }
    if not args.no_pin:
        fields.update({
            "control_rps": ("control", "rps"),
            "control_cpu_us": ("control", "primary_cpu_us_per_req"),
            "with_vs_control_cpu": ("with_vs_control_cpu",),
            "replica_share": ("with_replica", "replica_cpu_share"),
            "stand_in_share": ("control", "stand_in_cpu_share"),
            "replay_rps": ("replay", "rps"),
            "replay_cpu_us": ("replay", "primary_cpu_us_per_req"),
            "with_vs_replay_cpu": ("with_vs_replay_cpu",),
            "replay_share": ("replay", "replica_cpu_share"),
            "replay_replica_us": ("replay", "beside_cpu_us_per_req"),
            "feeder_us": ("replay", "feeder_cpu_us_per_req"),
        })

    def at(figures, path):
        for step in path:
            figures = figures[step]
        return figures

    med = {name: {key: median([at(x[name], path) for x in rounds]) for key, path in fields.items()}
           for name, _ in kinds}
    for m in med.values():
        m["budget_alone_us"] = m["client_alone_us"] + m["alone_cpu_us"]
        m["budget_with_us"] = m["client_with_us"] + m["with_cpu_us"] + m["replica_us"]
        m["ceiling_ratio"] = m["budget_alone_us"] / m["budget_with_us"]
        # Even with a primary that paid nothing for its replica: budget_alone / 0.9 - budget_alone.
        m["replica_us_for_0_9"] = m["budget_alone_us"] / 0.9 - m["budget_alone_us"]

    def table(headers, row):
        out = ["| kind | " + " | ".join(headers) + " |", "| --- |" + " --- |" * len(headers)]
        out += [f"| {name} | " + " | ".join(row(med[name])) + " |" for name, _ in kinds]
        return out

    lines = table(["SET -P16 alone (ops/s)", "with 1 replica (ops/s)", "with/alone", "primary CPU µs/req alone",
                   "with replica"],
                  lambda m: [f"{m['alone_rps']:.0f}", f"{m['with_rps']:.0f}", f"{m['ratio']:.3f}",
                             f"{m['alone_cpu_us']:.3f}", f"{m['with_cpu_us']:.3f}"])
    if not args.no_pin:
        lines += ["", "Control: a fresh primary alone while a stand-in burns the replica's CPU share on the client's core.", ""]
        lines += table(["replica's share of CPU 1", "stand-in's", "control ops/s", "primary CPU µs/req control",
                        "with replica / control"],
                       lambda m: [f"{m['replica_share']:.2f}", f"{m['stand_in_share']:.2f}", f"{m['control_rps']:.0f}",
                                  f"{m['control_cpu_us']:.3f}", f"{m['with_vs_control_cpu']:.3f}"])
        lines += ["", "Replay: a fresh primary alone while, on the client's core, a replica of the same kind applies "
                  "SETs at the with-replica rate from a stand-in primary.", ""]
        lines += table(["replay replica's share of CPU 1", "its CPU µs/req", "stand-in's CPU µs/req", "replay ops/s",
                        "primary CPU µs/req replay", "with replica / replay"],
                       lambda m: [f"{m['replay_share']:.2f}", f"{m['replay_replica_us']:.3f}", f"{m['feeder_us']:.3f}",
                                  f"{m['replay_rps']:.0f}", f"{m['replay_cpu_us']:.3f}",
                                  f"{m['with_vs_replay_cpu']:.3f}"])
    lines += ["", "CPU budget (µs of CPU per request, all processes): what two cores allow at best, whatever the scheduling.", ""]
    lines += table(["alone: client + primary", "with: client + primary + replica", "two-core ceiling with/alone",
                    "measured with/alone", "replica's cost 0.9 would allow"],
                   lambda m: [f"{m['client_alone_us']:.2f} + {m['alone_cpu_us']:.2f} = {m['budget_alone_us']:.2f}",
                              f"{m['client_with_us']:.2f} + {m['with_cpu_us']:.2f} + {m['replica_us']:.2f} = "
                              f"{m['budget_with_us']:.2f}",
                              f"{m['ceiling_ratio']:.2f}", f"{m['ratio']:.2f}", f"{m['replica_us_for_0_9']:.2f}"])
    h, rd = med["hotkv"], med["redis"]
    lines.append("")
    lines.append(f"hotkv/redis-server with a replica: {h['with_rps'] / rd['with_rps']:.2f}x ops/s, "
                 f"{h['with_cpu_us'] / rd['with_cpu_us']:.2f}x primary CPU per request "
                 f"(medians of {args.rounds} rounds)")
    text = "\n".join(lines) + "\n"
    print(text)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (outdir / f"replication-{stamp}.json").write_text(json.dumps({"rounds": rounds, "medians": med}, indent=1))
    (outdir / "latest-replication.md").write_text(text)


if __name__ == "__main__":
    main()
