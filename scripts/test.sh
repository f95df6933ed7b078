#!/usr/bin/env bash
# The whole test suite, set-up included: `bash scripts/test.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${KEPLER_SKIP_SETUP:-}" = 1 ] || bash scripts/setup.sh
# eBPF tests need tracefs and run for real as root.
if [ "$(id -u)" -eq 0 ] && [ ! -e /sys/kernel/tracing/trace_pipe ]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
cargo test --workspace --all-targets --no-fail-fast "$@"
