#!/usr/bin/env bash
# User-space CPU of the agent while 1,000 short-lived processes start every second: the cost
# of accounting for processes that live a millisecond (eBPF source, which sees every one).
# Builds the release agent, runs it on a simulated powercap tree, spawns /bin/true at RATE/s
# for 32 s and reads the agent's utime+stime over 25 s of that. Root (eBPF).
#   bash bench/churn_cpu.sh [RATE] [INTERVAL] [ENV=VALUE...]   (defaults 1000, 5s)
# KEPLER_BIN=PATH runs that agent binary instead of building one (before/after comparisons).
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-1000}
interval=${2:-5s}
shift $(( $# > 2 ? 2 : $# ))
bin=${KEPLER_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release -q --bin kepler
  bin=./target/release/kepler
fi
. bench/lib.sh
fake_powercap "$tmp" >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
env "$@" "$bin" --host.sysfs "$tmp" --web.listen-address "127.0.0.1:$port" \
  --monitor.interval "$interval" --log.level warn >/dev/null 2>&1 &
agent=$!
pids+=("$agent")
sleep 5
python3 - "$rate" <<'PY' &
import subprocess, sys, time
rate = int(sys.argv[1]); t0 = time.time(); n = 0
while time.time() - t0 < 32:
    due = int((time.time() - t0) * rate)
    while n < due:
        subprocess.Popen(['/bin/true']); n += 1
    time.sleep(0.002)
PY
load=$!
sleep 6
hz=$(getconf CLK_TCK)
a=$(awk '{print $14+$15}' /proc/$agent/stat); f0=$(awk '{print $10}' /proc/$agent/stat)
sleep 25
b=$(awk '{print $14+$15}' /proc/$agent/stat); f1=$(awk '{print $10}' /proc/$agent/stat)
rss=$(awk '/VmRSS/ {print $2}' /proc/$agent/status)
wait "$load"
printf '| spawns/s | interval | agent user+system CPU (%% of one core) | minor faults/s | RSS (MiB) |\n|---|---|---|---|---|\n'
printf '| %s | %s | %.2f | %d | %.1f |\n' "$rate" "$interval" "$(echo "($b-$a)*100/$hz/25" | bc -l)" $(( (f1-f0)/25 )) "$(echo "$rss/1024" | bc -l)"
