#!/usr/bin/env bash
# Agent overhead side by side with Scaphandre 1.0.0: CPU (user space + in-kernel eBPF), RSS,
# series and scrape latency under idle, sleeping, waking and churning extra processes. Builds
# the release agent, installs Scaphandre into bench/overhead/.tools on first use, then runs
# overhead.py (see README.md). Needs root, python3, perl, unshare, mount.
#   bash bench/overhead/run.sh [--quick] [--dry-run] [--rounds N] [--window S] [--warmup S]
#                              [--scenarios idle,sleep1k,...] [--agents ebpf-5s,...] [--out DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."

dry=0
need_scaph=1
prev=
for a in "$@"; do
    [ "$a" = --dry-run ] && dry=1
    # --agents without Scaphandre: nothing to install.
    if [ "$prev" = --agents ] && [[ "$a" != *scaphandre* ]]; then need_scaph=0; fi
    prev=$a
done
tools=$here/.tools
scaph=$tools/bin/scaphandre

if [ "$dry" = 0 ]; then
    [ "$(id -u)" = 0 ] || { echo "needs root (eBPF, a mount namespace, cgroups)" >&2; exit 2; }
    for t in python3 perl unshare mount sleep true cargo; do
        command -v "$t" >/dev/null || { echo "needs $t" >&2; exit 2; }
    done
    # Without /proc/modules (a kernel with no loadable modules) Scaphandre needs a small shim.
    [ -e /proc/modules ] || command -v cc >/dev/null || { echo "needs cc" >&2; exit 2; }
    CARGO_INCREMENTAL=0 cargo build --release -q --bin kepler
    if [ "$need_scaph" = 1 ] && [ ! -x "$scaph" ]; then
        echo "installing scaphandre 1.0.0 into $tools (once; several minutes)" >&2
        CARGO_INCREMENTAL=0 cargo install -q scaphandre --version 1.0.0 --locked \
            --no-default-features --features "prometheus json" --root "$tools"
    fi
fi
exec python3 "$here/overhead.py" --kepler target/release/kepler --scaphandre "$scaph" "$@"
