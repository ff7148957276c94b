#!/usr/bin/env python3
"""Failover benchmark: how long a shard cannot take writes after its primary is killed with
SIGKILL, for hotkv and for redis-server, on this machine, in the same run.

Each round, for each kind in turn (the order alternates between rounds), with the same node
timeout and the same client:

1. a six-node cluster, 3 primaries + 3 replicas (`redis-cli --cluster create
   --cluster-replicas 1`), every node on 127.0.0.1, formed and settled (every replica's link
   up), over TLS on clients, bus and replication with --tls;
2. one primary is chosen, with a key of one of its slots; a writer SETs that key on the
   primary every 10 ms, so the figure starts from a shard that was serving writes;
3. the primary gets SIGKILL; from that moment the harness polls its replica every 10 ms with
   `SET key`, and reports the time until the replica accepts it (it has won the election and
   serves the slot), and the time until every surviving node says `cluster_state:ok` again.

The failover itself is the cluster protocol's (failure detection after the node timeout, a
majority of primaries marking the node failed, the replica's election delay of 500 ms plus
up to 500 ms at random, the vote): both servers follow the same rules, so the figure says
whether hotkv adds anything to them. Medians of the rounds are reported with min and max.

Raw figures go to benches/results/failover-<time>.json and a table to
benches/results/latest-failover.md.

Usage: benches/run.sh failover [--rounds N] [--node-timeout MS] [--tls] [--out DIR]
"""

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.dont_write_bytecode = True  # importing must not leave a __pycache__ in benches/
from cluster import Cluster, LIVE, stop_all  # noqa: E402
from harness import Pki, median  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("hotkv", "redis")


def slot_ranges(node):
    """{primary node id: [(first, last), ...]} from CLUSTER NODES as `node` sees it."""
    out = {}
    for line in node.cli("CLUSTER", "NODES").splitlines():
        f = line.split()
        if len(f) >= 9 and "master" in f[2]:
            out[f[0]] = [tuple(int(x) for x in r.split("-")) if "-" in r else (int(r), int(r))
                         for r in f[8:] if not r.startswith("[")]
    return out


def key_in(node, ranges):
    for i in range(100000):
        key = f"failover:{i}"
        slot = int(node.cli("CLUSTER", "KEYSLOT", key).strip())
        if any(a <= slot <= b for a, b in ranges):
            return key
    raise RuntimeError("no key for the chosen primary")


def one_round(kind, args, workdir, pki):
    c = Cluster(kind, pki, 1)
    LIVE.append(c)
    try:
        c.up(args.binaries[kind], workdir, args.node_timeout, 6, None)
        ids = {n.cli("CLUSTER", "MYID").strip(): n for n in c.nodes}
        ranges = slot_ranges(c.nodes[0])
        primary_id = sorted(ranges)[0]
        primary = ids[primary_id]
        replica = next(n for n in c.nodes
                       if n is not primary and f" {primary_id} " in
                       next(l for l in n.cli("CLUSTER", "NODES").splitlines() if "myself" in l) + " ")
        key = key_in(primary, ranges[primary_id])
        # A writer on the primary, so the shard is serving writes when it dies.
        stop = threading.Event()
        writes = [0]

        def writer():
            while not stop.is_set():
                if primary.cli("SET", key, str(writes[0]), timeout=2).strip() == "OK":
                    writes[0] += 1
                time.sleep(0.01)
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        time.sleep(0.5)
        primary.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        primary.proc.wait(timeout=10)
        stop.set()
        t.join(timeout=5)
        writable = ok = None
        survivors = [n for n in c.nodes if n is not primary]
        deadline = killed + args.limit
        while time.monotonic() < deadline and (writable is None or ok is None):
            now = time.monotonic()
            if writable is None and replica.cli("SET", key, "after", timeout=2).strip() == "OK":
                writable = now - killed
            if ok is None and all(n.info("CLUSTER", "INFO").get("cluster_state") == "ok" for n in survivors):
                # Right after the kill every node may still say ok (nobody noticed yet): only
                # count ok once the replica took over.
                if writable is not None:
                    ok = now - killed
            time.sleep(0.01)
        if writable is None:
            raise RuntimeError(f"{kind}: the replica never took writes within {args.limit} s:\n"
                               + replica.cli("CLUSTER", "NODES"))
        return {"writable_s": writable, "cluster_ok_s": ok, "writes_before": writes[0]}
    finally:
        c.stop()
        LIVE.remove(c)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--node-timeout", type=int, default=2000)
    ap.add_argument("--limit", type=float, default=60.0, help="give up on a failover after this many seconds")
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benches" / "results"))
    args = ap.parse_args()
    args.binaries = {"hotkv": str(ROOT / "target" / "release" / "hotkv"), "redis": "redis-server"}
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda signum, _f: sys.exit(f"stopped by signal {signum}"))
    rounds = []
    with tempfile.TemporaryDirectory(prefix="hotkv-failover-") as workdir:
        pki = Pki(Path(workdir)) if args.tls else None
        try:
            for r in range(args.rounds):
                order = KINDS if r % 2 == 0 else KINDS[::-1]
                rounds.append({kind: one_round(kind, args, workdir, pki) for kind in order})
                print(json.dumps(rounds[-1]), flush=True)
        finally:
            stop_all()
    lines = [f"Failover after SIGKILL of a primary, 3 primaries + 3 replicas, cluster-node-timeout "
             f"{args.node_timeout} ms{', TLS everywhere' if args.tls else ''}, {args.rounds} rounds "
             f"(median, min-max):", "",
             "| kind | replica takes writes (s) | every node cluster_state:ok (s) |",
             "| --- | --- | --- |"]
    med = {}
    for kind in KINDS:
        w = [x[kind]["writable_s"] for x in rounds]
        o = [x[kind]["cluster_ok_s"] for x in rounds if x[kind]["cluster_ok_s"] is not None]
        med[kind] = {"writable_s": median(w), "cluster_ok_s": median(o) if o else None}
        ok_text = f"{median(o):.2f} ({min(o):.2f}-{max(o):.2f})" if o else "n/a"
        lines.append(f"| {kind} | {median(w):.2f} ({min(w):.2f}-{max(w):.2f}) | {ok_text} |")
    lines += ["", f"hotkv/redis-server, time until writes are taken again: "
              f"{med['hotkv']['writable_s'] / med['redis']['writable_s']:.2f}x"]
    text = "\n".join(lines) + "\n"
    print(text)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (outdir / f"failover-{stamp}.json").write_text(
        json.dumps({"args": {k: v for k, v in vars(args).items()}, "rounds": rounds, "medians": med}, indent=1))
    (outdir / "latest-failover.md").write_text(text)


if __name__ == "__main__":
    sys.exit(main())
