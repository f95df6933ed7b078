#!/usr/bin/env bash
# Model server under load: p50/p90/p99 latency of the legacy `POST /model` with C concurrent
# keep-alive clients on loopback (default 100) for S seconds (default 20), serving the
# published ec2-0.7.11 and specpower-0.7.11 pipelines; then the server's RSS and peak RSS.
#   bash bench/model_server_latency.sh [C] [S]
set -euo pipefail
cd "$(dirname "$0")/.."
c=${1:-100}
secs=${2:-20}
cargo build --release -q -p kepler-model-server --bin kepler-model-server --example model_server_load
data=${KEPLER_DATA_DIR:-$(if [ -d data/kepler-model-db ]; then echo data; else echo ../shared/data; fi)}
tmp=$(mktemp -d)
server=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
for p in ec2-0.7.11 specpower-0.7.11; do
  cp -r "$data/kepler-model-db/models/v0.7/$p" "$tmp/$p"
done
./target/release/kepler-model-server --log.level warn serve --model-dir "$tmp" \
  --listen 127.0.0.1:0 >"$tmp/out" 2>"$tmp/err" &
server=$!
for _ in $(seq 100); do grep -q listening "$tmp/out" 2>/dev/null && break; sleep 0.1; done
addr=$(sed -n 's#listening on http://##p' "$tmp/out" | head -1)
[ -n "$addr" ] || { cat "$tmp/err"; exit 1; }
models=$(curl -sf "http://$addr/models" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["models"]))')
rss_idle=$(awk '/VmRSS/ {print $2}' /proc/$server/status)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); models served: $models"
./target/release/examples/model_server_load "$addr" "$c" "$secs"
rss=$(awk '/VmRSS/ {print $2}' /proc/$server/status)
hwm=$(awk '/VmHWM/ {print $2}' /proc/$server/status)
echo "server RSS: idle $((rss_idle / 1024)) MiB, after load $((rss / 1024)) MiB, peak $((hwm / 1024)) MiB"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
