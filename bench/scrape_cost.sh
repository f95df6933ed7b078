#!/usr/bin/env bash
# What one scrape costs the agent's HTTP thread with N extra processes waking every second: the
# first scrape of a new snapshot (encoded then) and scrapes of one already encoded (sent from
# the cached body), in CPU time of the agent's main thread (schedstat), against each build
# given. The sampler thread's work is not counted. Root (eBPF).
#   bash bench/scrape_cost.sh [N] BIN...   (default N 1000; each BIN is measured in turn)
set -euo pipefail
cd "$(dirname "$0")/.."
n=1000
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then n=$1; shift; fi
[ $# -gt 0 ] || { echo "usage: $0 [N] BIN..." >&2; exit 2; }
. bench/lib.sh
need_root_and python3 curl
fake_powercap "$tmp" >/dev/null
setsid python3 bench/overhead/load.py wakers "$n" >/dev/null &
load=$!
trap 'kill -TERM -- -"$load" 2>/dev/null || true; bench_cleanup' EXIT
sleep 3
printf '| build | first scrape of a snapshot, ms (median, range) | scrape of an encoded one, ms | body |\n|---|---|---|---|\n'
for bin in "$@"; do
  port=$(free_port)
  "$bin" --host.sysfs "$tmp" --web.listen-address 127.0.0.1:"$port" --monitor.interval 5s \
    --log.level warn >/dev/null 2>&1 &
  agent=$!
  pids+=("$agent")
  sleep 12
  python3 - "$agent" "$port" "$bin" <<'PY'
import http.client, statistics, sys, time
agent, port, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def main_ns():
    with open(f"/proc/{agent}/task/{agent}/schedstat") as f:
        return int(f.read().split()[0])
def scrape():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/metrics")
    body = c.getresponse().read()
    c.close()
    return len(body)
fresh, cached = [], []
for _ in range(6):
    # A tick comes every 5 s: the first scrape after it encodes, the next five reuse the body.
    time.sleep(5.2)
    a = main_ns(); size = scrape(); fresh.append((main_ns() - a) / 1e6)
    a = main_ns()
    for _ in range(5):
        scrape()
    cached.append((main_ns() - a) / 5e6)
m = lambda v: f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})"
print(f"| {name} | {m(fresh)} | {m(cached)} | {size / 1024:.0f} KiB |")
PY
  kill "$agent"
  wait "$agent" 2>/dev/null || true
done
