# Set-up shared by the bench scripts; source it from the repository root.
# A temporary directory `tmp`, removed at exit after every pid in `pids` is killed.
tmp=$(mktemp -d)
pids=()
bench_cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap bench_cleanup EXIT

# Exits with status 2, saying what is missing, unless run as root with every tool named.
need_root_and() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 2; }
  done
  [ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 2; }
}

# A powercap tree under DIR with one package zone whose counter starts at 0 (RAPL's range as
# on Intel servers is not needed here: nothing wraps within a run). Prints the zone's path.
# A TCP port free on loopback now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

fake_powercap() {
  local pkg="$1/class/powercap/intel-rapl:0"
  mkdir -p "$pkg"
  echo package-0 >"$pkg/name"
  echo 100000000000000 >"$pkg/max_energy_range_uj"
  echo 0 >"$pkg/energy_uj"
  echo "$pkg"
}

# The ids, as a JSON array, of the BPF programs PID holds through its program and link
# descriptors: other agents or tests on the machine may have programs of the same name loaded.
bpf_prog_ids() {
  grep -h '^prog_id:' /proc/"$1"/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -u |
    jq -Rs '[splits("\n") | select(length > 0) | tonumber]'
}

# Forks and execs /bin/true RATE times a second for SECS seconds (perl), reaping as it goes;
# prints the rate it reached (a busy machine may not keep up).
churn() { # RATE SECS
    perl -MTime::HiRes=time,sleep -MPOSIX=:sys_wait_h -e '
        my ($rate, $secs) = @ARGV;
        my ($t0, $n) = (time, 0);
        while ((my $el = time - $t0) < $secs) {
            my $due = $n / $rate;
            if ($el < $due) { sleep($due - $el); next }
            my $pid = fork();
            die "fork: $!" unless defined $pid;
            if ($pid == 0) { exec "/bin/true"; POSIX::_exit(127) }
            $n++;
            1 while waitpid(-1, WNOHANG) > 0;
        }
        1 while waitpid(-1, 0) > 0;
        printf "%d\n", $n / (time - $t0);
    ' "$1" "$2"
}
