#!/usr/bin/env python3
"""Scripting benchmark: EVALSHA of a small script (GET + INCR + EXPIRE on one key) against
hotkv and redis-server side by side, in the same run, with plain SET as the reference.

The servers run as in benches/harness.py's per-core mode (server pinned to CPU 0 with one
worker thread, redis-benchmark pinned to CPU 1). The script is loaded with SCRIPT LOAD into
each server first, checked to do what it says (two calls count 1, 2 and leave a TTL), and
then driven with

    redis-benchmark -n N -r 100000 -c 50 -P {1,16} EVALSHA <sha> 1 script:__rand_int__

while the SET cells run `-t set -r 100000 -d 100 -c 50 -P {1,16}`, the same as the main
table's set-p1 and set-p16. Each cell reports median ops/s, the paired hotkv/redis ratio
and each server's CPU time per request (the per-core figure: at pipeline 1 the client,
not the server, limits throughput). redis-benchmark counts an error reply as a request
served, so after the run every server must show no error replies, or the run fails.

--perf DIR records hotkv under `perf record -g` for one extra EVALSHA run at pipeline 16,
after the measured rounds (a traced server is slower, so it is not in the table), and
writes `perf report --stdio` next to the data.

Raw figures go to benches/results/scripting-<time>.json and the table to
benches/results/latest-scripting.md (scratch; docs/performance.md is the record).

Usage: benches/run.sh scripting [--quick] [--rounds N] [--seconds S] [--perf DIR]
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.dont_write_bytecode = True  # importing must not leave a __pycache__ in benches/
from harness import (Cell, Server, add_common_args, bench_cmd, hotkv_argv, markdown, measure_cell,  # noqa: E402
                     RedisBenchmark, redis_argv, run_bench)

ROOT = Path(__file__).resolve().parent.parent

# GET + INCR + EXPIRE on the one declared key, as a rate limiter or counter with a window does.
SCRIPT = ("local v = redis.call('GET', KEYS[1]) "
          "local n = redis.call('INCR', KEYS[1]) "
          "redis.call('EXPIRE', KEYS[1], 600) "
          "return n")


def cli(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def info_field(port, section, name):
    for line in cli(port, "INFO", section).splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return None


def load_script(srv):
    """SCRIPT LOAD into `srv`; checks the script counts and sets a TTL there. Its sha."""
    sha = cli(srv.port, "SCRIPT", "LOAD", SCRIPT)
    probe = "bench:probe"
    got = [cli(srv.port, "EVALSHA", sha, "1", probe) for _ in range(2)]
    ttl = int(cli(srv.port, "TTL", probe) or "-2")
    if got != ["1", "2"] or not 0 < ttl <= 600:
        raise RuntimeError(f"{srv.name}: EVALSHA {sha} gave {got}, TTL {ttl} (log {srv.log.name})")
    cli(srv.port, "DEL", probe)
    return sha


def error_replies(srv):
    return int(info_field(srv.port, "stats", "total_error_replies") or "0")


def thread_cpu(srv, name):
    """CPU seconds (user + system) of the server's threads called `name` so far."""
    total = 0.0
    for task in Path(f"/proc/{srv.proc.pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != name:
                continue
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            pass  # the thread ended in between
    return total


def cells(sha):
    kv = ["-r", "100000", "-c", "50"]
    # Not redis-benchmark's key:<n>, which the SET cells fill with strings INCR refuses.
    script = ["EVALSHA", sha, "1", "script:__rand_int__"]
    # SET first: the EVALSHA cells leave 100k keys with a TTL, which hotkv's active expire
    # then walks for the rest of the run, and the reference should not pay for that.
    return [
        Cell("set-p1", "set", kv + ["-d", "100", "-P", "1"]),
        Cell("set-p16", "set", kv + ["-d", "100", "-P", "16"]),
        Cell("evalsha-p1", "", kv + ["-P", "1"], command=script),
        Cell("evalsha-p16", "", kv + ["-P", "16"], command=script),
    ]


def perf_profile(srv, cell, out_dir, seconds):
    """One EVALSHA run against `srv` under `perf record -g`; writes <stem>.data and .txt."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    stem = Path(out_dir) / f"scripting-{cell.name}-{time.strftime('%H%M%S')}"
    probe, _, _ = run_bench(bench_cmd(srv, cell, 20000, None, "1"), timeout=120)
    # perf stops by itself after `seconds`, about the length of the run sized from the probe.
    rec = subprocess.Popen(["perf", "record", "-F", "999", "-g", "-o", f"{stem}.data", "-p", str(srv.proc.pid),
                            "--", "sleep", str(seconds)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(0.5)  # attached before the load starts
    run_bench(bench_cmd(srv, cell, max(20000, int(probe * seconds)), None, "1"), timeout=300)
    rec.wait(timeout=seconds + 60)
    for name, extra in (("txt", ["--no-children"]), ("children.txt", ["--children"])):
        with open(f"{stem}.{name}", "w") as f:
            subprocess.run(["perf", "report", "--stdio", "-i", f"{stem}.data", "--percent-limit", "0.5"] + extra,
                           stdout=f, stderr=subprocess.DEVNULL, timeout=600)
    print(f"[scripting] perf profile of hotkv {cell.name} -> {stem}.txt, {stem}.children.txt", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--cells", type=lambda s: s.split(","), default=None)
    ap.add_argument("--perf", metavar="DIR", help="perf record hotkv during one extra evalsha-p16 run")
    ap.add_argument("--quick", action="store_true", help="3 rounds of 1 s")
    ap.add_argument("--out", default=str(ROOT / "benches" / "results"))
    args = ap.parse_args()
    # The EVALSHA cells need redis-benchmark's __rand_int__ in a command's arguments, so the
    # SET cells beside them use it too, whatever drives harness.py's cells.
    args.gen = RedisBenchmark()
    if args.quick:
        args.rounds, args.seconds = 3, 1.0
    mode, server_cpus, client_cpus = "percore", "0", "1"
    servers = [Server("hotkv", hotkv_argv(args.hotkv)), Server("redis", redis_argv(args.redis))]
    results = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "host": os.uname().nodename,
               "cpus": os.cpu_count(), "args": {k: v for k, v in vars(args).items() if k != "gen"}, "script": SCRIPT, "cells": [], "memory": [],
               "versions": {
                   "redis": subprocess.run([args.redis, "--version"], capture_output=True, text=True).stdout.strip(),
                   "hotkv": subprocess.run([args.hotkv, "--version"], capture_output=True, text=True).stdout.strip()}}
    try:
        for s in servers:
            s.start(None, mode, server_cpus)
        shas = {s.name: load_script(s) for s in servers}
        if len(set(shas.values())) != 1:
            raise RuntimeError(f"the servers disagree on the script's sha: {shas}")
        sha = shas["hotkv"]
        errors0 = {s.name: error_replies(s) for s in servers}
        selected = [c for c in cells(sha) if not args.cells or c.name in args.cells]
        for cell in selected:
            cron0 = thread_cpu(servers[0], "hotkv-cron")
            row = measure_cell(mode, cell, servers, [], None, client_cpus, args)
            # hotkv's active expire runs on its cron thread, pinned to the same core: its share
            # of the CPU per request, apart from the request path's (the EVALSHA cells leave
            # 100k keys with a TTL behind them).
            cron_us = (thread_cpu(servers[0], "hotkv-cron") - cron0) * 1e6 / (row["requests"] * args.rounds)
            row["servers"]["hotkv"]["cron_cpu_us_per_op"] = cron_us
            print(f"[percore] {cell.name}: hotkv cron thread {cron_us:.2f} µs/op of "
                  f"{row['servers']['hotkv']['cpu_us_per_op']:.2f}", file=sys.stderr)
            results["cells"].append(row)
        # redis-benchmark counts -NOSCRIPT or -ERR as served: a run with errors measured nothing.
        errors = {s.name: error_replies(s) - errors0[s.name] for s in servers}
        if any(errors.values()):
            raise RuntimeError(f"error replies during the run: {errors}")
        for s in servers:
            results.setdefault("keys_with_ttl", {})[s.name] = info_field(s.port, "keyspace", "db0")
        write(results, Path(args.out))
        if args.perf:
            perf_profile(servers[0], next(c for c in cells(sha) if c.name == "evalsha-p16"), args.perf, args.seconds)
    finally:
        for s in servers:
            s.stop()


def write(results, out):
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (out / f"scripting-{stamp}.json").write_text(json.dumps(results, indent=1))
    table = markdown(results) + "\nhotkv cron thread (active expire) CPU µs/op, part of hotkv's figure above: " + ", ".join(
        f"{r['cell']} {r['servers']['hotkv']['cron_cpu_us_per_op']:.2f}" for r in results["cells"]) + "\n"
    (out / f"scripting-{stamp}.md").write_text(table)
    (out / "latest-scripting.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
