#!/usr/bin/env python3
"""Instructions per request, hotkv against redis-server, counted by callgrind: the measure that
still tells servers apart on a machine too noisy for CPU time (a neighbour's load moves
redis-server's own CPU per request by 2x from run to run; an instruction count does not move).

Each server runs under `valgrind --tool=callgrind --separate-threads=yes` twice per cell, once
driven with SMALL requests and once with LARGE, by the same redis-benchmark command; the
difference of the two counts divided by LARGE - SMALL is the cost of one request, with start-up,
loading the script and shutting down cancelled out. Reported per request: the busiest thread
(hotkv's worker, redis-server's main thread) and all threads together. The kernel's part (the
syscalls) is not counted, so this complements, not replaces, the CPU figures of harness.py.

Cells:
  evalsha-p16   EVALSHA of scripting.py's script (GET + INCR + EXPIRE on one random key of
                100k), pipeline 16, 50 connections
  set-p16       SET, 32-byte values, 100k random keys, pipeline 16, 50 connections
  set-p16-repl  the same with one replica attached (a normal process, not counted), after its
                sync; the count waits until the replica has the whole stream
  set-p1        SET as set-p16, one request in flight per connection: the cost of reaching the
                command and sending its reply, which pipelining otherwise shares out
  get-p1        GET of the same keys, pipeline 1

Counts move with how requests batch per read under valgrind (10-15% between runs at pipeline
16), so compare cells of one run, and repeat a run before trusting a difference under 15%.

Raw figures go to benches/results/instructions-<time>.json, the table to
benches/results/latest-instructions.md (scratch; docs/performance.md is the record).

Usage: benches/run.sh instructions [--cells C,...] [--small N] [--large N]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True  # importing must not leave a __pycache__ in benches/
from harness import free_port, wait_ping  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ("local v = redis.call('GET', KEYS[1]) "
          "local n = redis.call('INCR', KEYS[1]) "
          "redis.call('EXPIRE', KEYS[1], 600) "
          "return n")
CELLS = ["evalsha-p16", "set-p16", "set-p16-repl", "set-p1", "get-p1"]


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                          timeout=60).stdout.strip()


def server_argv(kind, binary, port):
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--protected-mode", "no", "--loglevel", "warning"]
    if kind == "hotkv":
        argv += ["--worker-threads", "1"]
    return argv


def info_field(port, section, name):
    for line in cli(port, "INFO", section).splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return None


def counted_run(kind, binary, cell, requests, workdir):
    """Runs `cell` with `requests` against one counted server: (busiest thread, all threads)."""
    port = free_port()
    out = Path(workdir) / f"{kind}-{cell}-{requests}"
    out.mkdir()
    vg = ["valgrind", "--tool=callgrind", "--separate-threads=yes",
          f"--callgrind-out-file={out}/cg.%p"]
    log = open(out / "server.log", "w")
    proc = subprocess.Popen(vg + server_argv(kind, binary, port), stdout=log, stderr=subprocess.STDOUT)
    replica = None
    try:
        if not wait_ping(port, timeout=60):
            raise RuntimeError(f"{kind} did not start under valgrind (see {out}/server.log)")
        if cell == "set-p16-repl":
            rport = free_port()
            replica = subprocess.Popen(server_argv(kind, binary, rport), stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
            if not wait_ping(rport, timeout=30):
                raise RuntimeError(f"{kind} replica did not start")
            cli(rport, "REPLICAOF", "127.0.0.1", str(port))
            deadline = time.time() + 120
            while info_field(rport, "replication", "master_link_status") != "up":
                if time.time() > deadline:
                    raise RuntimeError(f"{kind} replica never synced")
                time.sleep(0.2)
        bench = ["redis-benchmark", "-p", str(port), "-n", str(requests), "-r", "100000", "-c", "50",
                 "-P", "1" if cell.endswith("-p1") else "16", "-q"]
        if cell == "evalsha-p16":
            sha = cli(port, "SCRIPT", "LOAD", SCRIPT)
            bench += ["EVALSHA", sha, "1", "script:__rand_int__"]
        elif cell == "get-p1":
            bench += ["-t", "get", "-d", "32"]
        else:
            bench += ["-t", "set", "-d", "32"]
        done = subprocess.run(bench, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"redis-benchmark failed: {done.stderr[-300:]}")
        if replica:
            deadline = time.time() + 120
            while (info_field(port, "replication", "master_repl_offset")
                   != info_field(rport, "replication", "slave_repl_offset")):
                if time.time() > deadline:
                    raise RuntimeError(f"{kind} replica never caught up")
                time.sleep(0.2)
        cli(port, "SHUTDOWN", "NOSAVE")
        proc.wait(timeout=120)
    finally:
        for p in (replica, proc):
            if p and p.poll() is None:
                p.kill()
                p.wait()
        log.close()
    totals = []
    for f in out.glob("cg.*"):
        for line in f.read_text(errors="replace").splitlines():
            if line.startswith("summary:"):
                totals.append(int(line.split()[1]))
                break
    if not totals:
        raise RuntimeError(f"no callgrind output in {out}")
    return max(totals), sum(totals)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hotkv", default=str(ROOT / "target/release/hotkv"))
    ap.add_argument("--redis", default="redis-server")
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--small", type=int, default=5000)
    ap.add_argument("--large", type=int, default=25000)
    ap.add_argument("--out", default=str(ROOT / "benches/results"))
    args = ap.parse_args()
    cells = [c for c in args.cells.split(",") if c]
    for c in cells:
        if c not in CELLS:
            sys.exit(f"unknown cell {c}; known: {', '.join(CELLS)}")
    if args.large <= args.small:
        sys.exit("--large must be more than --small")
    results = []
    span = args.large - args.small
    with tempfile.TemporaryDirectory(prefix="hotkv-instr-") as work:
        for cell in cells:
            row = {"cell": cell}
            for kind, binary in (("hotkv", args.hotkv), ("redis", args.redis)):
                small = counted_run(kind, binary, cell, args.small, work)
                large = counted_run(kind, binary, cell, args.large, work)
                row[kind] = {"thread": (large[0] - small[0]) / span, "all": (large[1] - small[1]) / span}
                print(f"[instructions] {cell} {kind}: {row[kind]['thread']:.0f} per request on the busiest "
                      f"thread, {row[kind]['all']:.0f} in all", flush=True)
            results.append(row)
    lines = ["| cell | hotkv busiest thread | hotkv all threads | redis busiest thread | redis all threads "
             "| hotkv/redis (all) |", "| --- | --- | --- | --- | --- | --- |"]
    for r in results:
        h, d = r["hotkv"], r["redis"]
        lines.append(f"| {r['cell']} | {h['thread']:.0f} | {h['all']:.0f} | {d['thread']:.0f} | {d['all']:.0f} "
                     f"| {h['all'] / d['all']:.2f} |")
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"instructions-{stamp}.json").write_text(json.dumps(
        {"small": args.small, "large": args.large, "hotkv": args.hotkv, "results": results}, indent=2))
    (out / "latest-instructions.md").write_text(table + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    main()
