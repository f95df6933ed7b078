#!/usr/bin/env bash
# Process series under churn (issue 14): RATE short-lived processes a second (`/bin/true`)
# for SECONDS, the agent at a 5 s interval on a simulated powercap tree, scraped once an
# interval. Prints the process series per scrape and the distinct process series over the run
# (each a new series for Prometheus), with the agent's flags given after the first two.
#   bash bench/churn_series.sh [RATE] [SECONDS] [EXTRA AGENT FLAGS...]
# KEPLER_BIN picks the binary (default: a release build, made if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-100}
secs=${2:-60}
shift $(( $# > 2 ? 2 : $# ))
bin=${KEPLER_BIN:-target/release/kepler}
if [ -z "${KEPLER_BIN:-}" ]; then cargo build --release -q --bin kepler; fi
. bench/lib.sh
pkg=$(fake_powercap "$tmp")
(
  start=$(date +%s%N)
  while :; do
    us=$(( ($(date +%s%N) - start) / 1000 ))
    echo $(( us * 40 )) >"$pkg/energy_uj.tmp" && mv "$pkg/energy_uj.tmp" "$pkg/energy_uj"
    sleep 0.2
  done
) &
pids+=($!)

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin" --host.sysfs "$tmp" --monitor.interval 5s \
  --web.listen-address "127.0.0.1:$port" --log.level warn "$@" 2>/dev/null &
pids+=($!)
sleep 6
perl -MTime::HiRes=time,sleep -e '
  my ($rate, $secs) = @ARGV; my $t0 = time; my $n = 0;
  while (time - $t0 < $secs) { system("/bin/true"); $n++; my $due = $t0 + $n / $rate; my $d = $due - time; sleep($d) if $d > 0 }
  open(my $f, ">", "'"$tmp"'/spawned"); print $f "$n\n";' "$rate" "$secs" &
pids+=($!)
spawner=$!
: >"$tmp/all"
per_scrape=()
while kill -0 "$spawner" 2>/dev/null; do
  sleep 5
  curl -sf "http://127.0.0.1:$port/metrics" -o "$tmp/m" || continue
  per_scrape+=("$(grep -c '^kepler_process_cpu_seconds_total' "$tmp/m" || true)")
  grep '^kepler_process_cpu_joules_total' "$tmp/m" | sed 's/ [^ ]*$//' >>"$tmp/all" || true
done
spawned=$(cat "$tmp/spawned")
series=$(grep -vc '^#' "$tmp/m" || true)
distinct=$(sort -u "$tmp/all" | wc -l)
terminated=$(grep -c '^kepler_process_cpu_joules_total.*state="terminated"' "$tmp/m" || true)
max=$(printf '%s\n' "${per_scrape[@]}" | sort -n | tail -1)
printf '| spawned (%s/s for %s s) | processes per scrape (max) | terminated in last scrape | distinct process joules series over the run | all series, last scrape |\n' "$rate" "$secs"
printf '|---|---|---|---|---|\n'
printf '| %s | %s | %s | %s | %s |\n' "$spawned" "$max" "$terminated" "$distinct" "$series"
