#!/usr/bin/env bash
# Audits hotkv's TLS surface with sslyze against Mozilla's "intermediate" profile: TLS 1.2/1.3
# only, no CBC or RSA key exchange, no compression, no renegotiation, the whole chain served.
#
# Starts a primary with TLS on its client port and on the cluster bus, and a replica that
# follows it over TLS (tls-replication), then scans the client port, the bus port and the
# port the replica link uses. sslyze's --mozilla_config exits non-zero on any deviation.
# Also checks that a plain-text client on the TLS port gets no RESP byte back.
#
# Usage: scripts/tls-audit.sh [path/to/hotkv]     (default: target/release/hotkv, built if absent)
# Needs: openssl, python3 (sslyze is installed into a private venv under target/ if missing).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=$(realpath -m "${1:-$root/target/release/hotkv}")
if [[ ! -x $bin ]]; then
    (cd "$root" && cargo build --release --bin hotkv)
fi

venv=$root/target/tls-audit-venv
if ! "$venv/bin/sslyze" --help >/dev/null 2>&1; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet sslyze
fi
sslyze=$venv/bin/sslyze

work=$(mktemp -d /tmp/hotkv-tls-audit.XXXXXX)
pids=()
status_kept=0
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    # A node writes its files as it shuts down: wait for it before removing them.
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    if [[ $status_kept == 1 ]]; then echo "kept $work" >&2; else rm -rf "$work" || true; fi
}
trap cleanup EXIT

# A CA, an intermediate, and a node certificate signed by the intermediate: the server must
# send the intermediate too ("a certificate chain served whole").
cd "$work"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj "/CN=audit root" \
    -keyout ca.key -out ca.crt -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=audit intermediate" \
    -keyout int.key -out int.csr 2>/dev/null
printf 'basicConstraints=critical,CA:TRUE,pathlen:0\nkeyUsage=critical,keyCertSign,cRLSign\n' > int.ext
openssl x509 -req -in int.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile int.ext -out int.crt 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
    -keyout node.key -out node.csr 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > node.ext
openssl x509 -req -in node.csr -CA int.crt -CAkey int.key -CAcreateserial -days 30 -extfile node.ext -out leaf.crt 2>/dev/null
cat leaf.crt int.crt > node.crt

# A free port whose bus port (+10000) is free too and exists (a cluster node refuses a port
# above 55535, as Valkey does).
free_port() {
    python3 -c '
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
print(next(p for p in iter(lambda: random.randint(20000, 55535), None) if free(p) and free(p + 10000)))'
}

start() { # name tls_port extra...
    local name=$1 port=$2
    shift 2
    mkdir -p "$name"
    cat > "$name/hotkv.conf" <<EOF
port 0
tls-port $port
bind 127.0.0.1
dir $work/$name
tls-cert-file $work/node.crt
tls-key-file $work/node.key
tls-ca-cert-file $work/ca.crt
tls-auth-clients optional
logfile $work/$name/hotkv.log
save ""
$(printf '%s\n' "$@")
EOF
    "$bin" "$name/hotkv.conf" >"$name/stdout" 2>&1 &
    pids+=($!)
}

wait_tls() { # port
    for _ in $(seq 100); do
        if openssl s_client -connect "127.0.0.1:$1" -CAfile ca.crt </dev/null >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    echo "port $1 never served TLS" >&2
    status_kept=1
    for f in "$work"/*/hotkv.log "$work"/*/stdout; do tail -n 5 "$f" >&2; done
    return 1
}

primary=$(free_port)
start primary "$primary" "cluster-enabled yes" "tls-cluster yes" "tls-replication yes"
wait_tls "$primary"
bus=$((primary + 10000))
wait_tls "$bus"

replica=$(free_port)
start replica "$replica" "tls-replication yes" "replicaof 127.0.0.1 $primary"
wait_tls "$replica"

status=0
for target in "client port:$primary" "cluster bus:$bus" "replica link (primary's port):$primary" "replica's own port:$replica"; do
    label=${target%%:*}
    port=${target##*:}
    echo "== $label 127.0.0.1:$port"
    # The test CA is added as a trust store. The bus requires a client certificate, and
    # sslyze's CLI cannot run its SSL 2.0 probe with one: that port goes through
    # tls-audit-mutual.py, which runs the same checks with sslyze's API.
    if [[ $port == "$bus" ]]; then
        audit=("$venv/bin/python" "$root/scripts/tls-audit-mutual.py" 127.0.0.1 "$port" ca.crt node.crt node.key)
    else
        audit=("$sslyze" --mozilla_config=intermediate --certinfo_ca_file ca.crt "127.0.0.1:$port")
    fi
    if ! "${audit[@]}"; then
        echo "!! $label does not meet Mozilla intermediate" >&2
        status=1
    fi
done

# A plain-text client on the TLS port: no RESP byte back, and one log line saying why.
reply=$(printf 'PING\r\n' | timeout 5 python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3)
s.sendall(sys.stdin.buffer.read())
data = b""
try:
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
except socket.timeout:
    pass
sys.stdout.write(data.hex())
' "$primary" || true)
if [[ $reply == 2b* || $reply == 2d* ]]; then
    echo "!! plain-text client got a RESP reply on the TLS port: $reply" >&2
    status=1
else
    echo "== plain-text client on the TLS port got no RESP reply"
fi
sleep 0.5
grep -i "wrong version number\|plain\|handshake" primary/hotkv.log | tail -3 || true

exit $status
