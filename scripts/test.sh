#!/usr/bin/env bash
# Runs every test of the workspace, first installing what the integration tests drive when it
# is missing: redis-cli and redis-benchmark (Debian's redis-tools), the openssl CLI and
# redis-py (PyPI's redis). No cmake: aws-lc-sys (rustls' crypto) builds with its cc builder.
# A plain `cargo test` builds the hotkv binary itself, so no separate build step is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

# apt-get needs root; use sudo only when we are not root already (CI runs as root).
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
    if [ -z "${apt_updated:-}" ]; then
        as_root apt-get update -qq
        apt_updated=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

if ! command -v redis-cli >/dev/null 2>&1 || ! command -v redis-benchmark >/dev/null 2>&1; then
    echo "test.sh: installing redis-tools (redis-cli, redis-benchmark)"
    apt_install redis-tools
fi

# The TLS crate's tests encrypt a test key and talk to s_client/s_server with the openssl CLI.
if ! command -v openssl >/dev/null 2>&1; then
    echo "test.sh: installing openssl (CLI)"
    apt_install openssl
fi

if ! command -v python3 >/dev/null 2>&1; then
    echo "test.sh: installing python3"
    apt_install python3 python3-pip
fi

if ! python3 -c 'import redis' >/dev/null 2>&1; then
    echo "test.sh: installing redis-py"
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt_install python3-pip
    fi
    # Debian marks its Python as externally managed; the flag only exists on newer pips.
    python3 -m pip install --quiet redis ||
        python3 -m pip install --quiet --break-system-packages redis
fi

# -j2: the project's machines have two cores, shared with whatever else runs there.
# --no-fail-fast: a failing test binary must not hide the results of the others.
status=0
cargo test -j2 --workspace --no-fail-fast || status=$?
# The criterion suite in test mode: every benchmark runs once, so a broken one fails here
# rather than on the day someone measures (timing is never judged in tests).
cargo test -j2 --bench internals || status=$?
exit "$status"
