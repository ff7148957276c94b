#!/usr/bin/env bash
# Benchmarks hotkv against redis-server side by side; see benches/harness.py for options.
# `benches/run.sh cluster [options]` runs the cluster benchmarks instead (benches/cluster.py),
# `benches/run.sh reshard [options]` the resharding benchmark (benches/reshard.py),
# `benches/run.sh replication [options]` the cost of a replica (benches/replication.py),
# `benches/run.sh persistence [options]` BGSAVE, BGREWRITEAOF, loading and the AOF's cost
# (benches/persistence.py), `benches/run.sh scripting [options]` EVALSHA of a small script
# against plain SET (benches/scripting.py), `benches/run.sh expire [options]` what active expiry
# costs with 100k idle TTL keys and how fast it reclaims 100k expired ones (benches/expire.py),
# `benches/run.sh failover [options]` how long a shard takes no writes after its primary is
# killed (benches/failover.py), `benches/run.sh instructions [options]` instructions per request
# under callgrind, for a machine too noisy for CPU time (benches/instructions.py).
# Installs Debian's redis-server and redis-tools when missing, builds hotkv in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
command -v openssl >/dev/null || need+=(openssl)
command -v taskset >/dev/null || need+=(util-linux)
if [ "${1:-}" = instructions ]; then command -v valgrind >/dev/null || need+=(valgrind); fi
if ((${#need[@]})); then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "${need[@]}"
fi
cargo build --release -j"$(nproc)" --bin hotkv
# The first argument names a benchmark with its own script; anything else goes to harness.py.
case "${1:-}" in
  cluster | reshard | replication | persistence | scripting | failover | expire | instructions)
    script=$1
    shift
    exec python3 "benches/$script.py" "$@"
    ;;
esac
exec python3 benches/harness.py "$@"
