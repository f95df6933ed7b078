#!/usr/bin/env bash
# Checks that the committed crates/ebpf/bpf/kepler.bpf.o is what `make bpf` builds from the
# committed source. The build is byte-reproducible with one clang version (no absolute paths,
# no ident string, DWARF stripped), so the check compares bytes. Another clang version emits
# different but valid code; then the bytes cannot be compared and the check says so and passes
# unless BPF_CHECK_STRICT=1.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
bpf="$root/crates/ebpf/bpf"
clang=${CLANG:-clang}

if ! command -v "$clang" >/dev/null; then
    echo "bpf-check: $clang not found (apt-get install clang llvm libbpf-dev)" >&2
    exit 2
fi
want=$(cat "$bpf/kepler.bpf.o.clang-version")
have=$("$clang" --version | head -n 1)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/crates/ebpf"
cp "$root/Makefile" "$work/"
cp -r "$bpf" "$work/crates/ebpf/bpf"
rm -f "$work/crates/ebpf/bpf/kepler.bpf.o"
make -s -C "$work" bpf >/dev/null

if cmp -s "$work/crates/ebpf/bpf/kepler.bpf.o" "$bpf/kepler.bpf.o"; then
    echo "bpf-check: kepler.bpf.o matches its source ($have)"
    exit 0
fi
if [ "$want" != "$have" ] && [ "${BPF_CHECK_STRICT:-0}" != 1 ]; then
    echo "bpf-check: cannot compare: object built with '$want', this machine has '$have'" >&2
    exit 0
fi
echo "bpf-check: crates/ebpf/bpf/kepler.bpf.o is stale: run 'make bpf' and commit the result" >&2
exit 1
