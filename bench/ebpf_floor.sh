#!/usr/bin/env bash
# What a sched_switch program costs before it does any work: kepler_switch and kepler_exit side by
# side with reference programs that do less (bench/ebpf_floor/floor.bpf.c):
#   empty        returns at once: the attachment and bpf_stats' own clock reads;
#   bookkeeping  + the per-CPU switch state (one per-CPU array value and the clock);
#   hash         + one hash lookup by tgid and two atomic adds: per-process accounting's least;
#   hash_noprealloc  the same, the hash map's entries made as they are needed;
#   array        the same with an array indexed by tgid for the hash map: a slot per process;
#   kepler       kepler_switch from the committed crates/ebpf/bpf/kepler.bpf.o;
#   kepler_old   kepler_switch from the object OLD_OBJECT names (an earlier build's, to compare);
#   kepler_exit  the program that replaces it with task iterator accounting (final switches only).
# Each is loaded alone, in turn, ROUNDS times per scenario (so that a noisy neighbour hits them
# alike), and its ns per call read from the kernel's BPF statistics. Scenarios: idle, 1,000
# processes waking once a second, 100 and 1,000 spawns per second (bench/overhead/load.py), a
# switch storm (stress-ng --switch 2). Needs root, clang, gcc, libbpf-dev, bpftool, jq, stress-ng.
#   bench/ebpf_floor.sh [SECONDS PER MEASUREMENT] [ROUNDS]   (default 5 and 5)
# SCENARIOS="idle wake1k churn1k storm" (the default; churn100 too) picks some, and
# PROGRAMS="empty bookkeeping hash kepler kepler_exit" (the default; hash_noprealloc, array and
# kepler_old too) picks programs. WARM=S waits S seconds after each load before measuring.
set -euo pipefail
secs=${1:-5}
rounds=${2:-5}
cd "$(dirname "$0")/.."
source bench/lib.sh

need_root_and clang gcc bpftool jq stress-ng python3

arch=$(uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')
for level in 0 1 2 3 4; do
  clang -O2 -g -target bpf -D__TARGET_ARCH_"$arch" -DFLOOR_LEVEL="$level" \
    -I/usr/include/"$(uname -m)"-linux-gnu -Wall -Werror \
    -c bench/ebpf_floor/floor.bpf.c -o "$tmp/floor$level.o"
done
gcc -O2 -Wall bench/ebpf_floor/load.c -o "$tmp/load" -lbpf
read -r -a programs <<<"${PROGRAMS:-empty bookkeeping hash kepler kepler_exit}"
object_of() {
  case $1 in
  empty) echo "$tmp/floor0.o" ;;
  bookkeeping) echo "$tmp/floor1.o" ;;
  hash) echo "$tmp/floor2.o" ;;
  hash_noprealloc) echo "$tmp/floor3.o" ;;
  array) echo "$tmp/floor4.o" ;;
  kepler | kepler_exit) echo crates/ebpf/bpf/kepler.bpf.o ;;
  kepler_old) echo "${OLD_OBJECT:?kepler_old needs OLD_OBJECT}" ;;
  esac
}

old_stats=$(sysctl -n kernel.bpf_stats_enabled)
load_pid=
# Ends the load's whole session (setsid), stragglers included: a switch storm left running
# makes the next load take minutes.
stop_load() {
  if [ -n "$load_pid" ]; then
    pkill -TERM -s "$load_pid" 2>/dev/null || true
    wait "$load_pid" 2>/dev/null || true
    for _ in $(seq 100); do pgrep -s "$load_pid" >/dev/null || break; sleep 0.1; done
    pkill -KILL -s "$load_pid" 2>/dev/null || true
    load_pid=
  fi
}
finish() {
  stop_load
  sysctl -q kernel.bpf_stats_enabled="$old_stats"
  bench_cleanup
}
trap finish EXIT
sysctl -q kernel.bpf_stats_enabled=1

# "run_time_ns run_cnt" of the sched_switch program held by loader PID.
sample() {
  local ids
  ids=$(bpf_prog_ids "$1")
  bpftool prog show -j | jq -r --argjson ids "$ids" '.[] | select(.id as $i | $ids | index($i))
    | select(.name == "floor_switch" or .name == "kepler_switch" or .name == "kepler_exit")
    | "\(.run_time_ns // 0) \(.run_cnt // 0)"'
}

# One measurement: prints "calls ns_per_call" for PROGRAM over SECS seconds.
measure() {
  local log="$tmp/load.log" holder a b
  # A fresh log: the last one says "ready" until the new holder's redirection truncates it.
  rm -f "$log"
  local only=
  case $1 in
  kepler | kepler_old) only=kepler_switch ;;
  kepler_exit) only=kepler_exit ;;
  esac
  # shellcheck disable=SC2086 # no PROGRAM argument for the reference objects
  "$tmp/load" "$(object_of "$1")" $((secs + 300)) $only >"$log" 2>&1 &
  holder=$!
  # Loading parses the kernel's BTF: seconds on a busy machine.
  for _ in $(seq 1200); do grep -qs '^ready' "$log" && break; sleep 0.1; done
  if ! grep -qs '^ready' "$log"; then
    echo "$1 did not load:" >&2
    cat "$log" >&2
    kill "$holder" 2>/dev/null || true
    return
  fi
  # A storm starts once the program is in: under one, loading is starved for minutes.
  [ "$scenario" = storm ] && start_load storm
  # WARM=S: S seconds before the measurement, for what a program does once per process
  # (kepler_switch gives each process a slot at its first switch) to be done by then.
  sleep "${WARM:-0}"
  a=$(sample "$holder")
  sleep "$secs"
  b=$(sample "$holder")
  [ "$scenario" = storm ] && stop_load
  [ -n "$a" ] && [ -n "$b" ] || { echo "$1: no statistics" >&2; a=; b=; }
  kill "$holder" 2>/dev/null || true
  wait "$holder" 2>/dev/null || true
  read -r t0 c0 <<<"$a"
  read -r t1 c1 <<<"$b"
  local calls=$((c1 - c0))
  [ "$calls" -gt 0 ] && echo "$calls $(((t1 - t0) / calls))"
}

start_load() { # scenario
  case $1 in
  idle) return 0 ;;
  wake1k) setsid python3 bench/overhead/load.py wakers 1000 >"$tmp/bg.log" 2>&1 & ;;
  churn100) setsid python3 bench/overhead/load.py churn 100 >"$tmp/bg.log" 2>&1 & ;;
  churn1k) setsid python3 bench/overhead/load.py churn 1000 >"$tmp/bg.log" 2>&1 & ;;
  storm) setsid stress-ng --switch 2 -t 1h -q >"$tmp/bg.log" 2>&1 & ;;
  esac
  load_pid=$!
  if [ "$1" != storm ]; then
    for _ in $(seq 600); do grep -q '^ready' "$tmp/bg.log" && break; sleep 0.1; done
  fi
  sleep 2
}

# Median, minimum and maximum of the numbers on stdin.
stats() { sort -n | awk '{v[NR] = $1} END {printf "%d (%d–%d)", v[int((NR + 1) / 2)], v[1], v[NR]}'; }

printf '| %-44s | %-15s | %8s | %-20s |\n' scenario program calls/s "ns/call median (range)"
printf '|%s|%s|%s|%s|\n' ---------------------------------------------- ----------------- ---------- ----------------------
for scenario in ${SCENARIOS:-idle wake1k churn1k storm}; do
  case $scenario in
  idle) label="idle" ;;
  wake1k) label="1,000 processes waking each second" ;;
  churn100) label="churn, 100 spawns/s" ;;
  churn1k) label="churn, 1,000 spawns/s" ;;
  storm) label="switch storm (stress-ng --switch 2)" ;;
  esac
  [ "$scenario" = storm ] || start_load "$scenario"
  for p in "${programs[@]}"; do : >"$tmp/$p.ns"; : >"$tmp/$p.calls"; done
  for _ in $(seq "$rounds"); do
    for p in "${programs[@]}"; do
      read -r calls ns <<<"$(measure "$p")" || true
      [ -n "$ns" ] || continue
      echo "$ns" >>"$tmp/$p.ns"
      echo $((calls / secs)) >>"$tmp/$p.calls"
    done
  done
  stop_load
  for p in "${programs[@]}"; do
    [ -s "$tmp/$p.ns" ] || continue
    printf '| %-44s | %-15s | %8s | %-20s |\n' "$label" "$p" \
      "$(sort -n "$tmp/$p.calls" | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')" \
      "$(stats <"$tmp/$p.ns")"
  done
done
echo
echo "kernel $(uname -r), $(nproc) CPUs, $secs s × $rounds rounds per program and scenario," \
  "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
