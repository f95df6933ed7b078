#!/usr/bin/env bash
# Training speed and accuracy: `kepler-model-server train` against scikit-learn / SciPy /
# XGBoost (installed from PyPI into a virtual environment) on the nx12 RAPL data, same rows,
# same seeded split, same model settings (XGBoost defaults, against both its exact and its
# hist tree method; Ridge alpha 1 on MaxAbs-scaled features). Fit times only (our metadata
# table's fit_seconds, the Python fit calls), AbsPower, MAE = the worst component. Trees are
# timed on one thread on both sides (ours `--threads 1`, XGBoost `n_jobs=1`), then on
# THREADS threads on both sides (default: the CPUs; ours fits components side by side).
# Usage: bash bench/train_vs_sklearn.sh [SEED]   (VENV=dir to reuse a virtual environment,
# ROUNDS=n turns of both sides, default 3; THREADS=n for the second table)
set -euo pipefail
cd "$(dirname "$0")/.."
SEED=${1:-42}
VENV=${VENV:-${TMPDIR:-/tmp}/kepler-train-bench-venv}
DATA=data/kepler-model-db/models/v0.6/nx12/preprocessed_data/preprocess_abs_default_rapl_Basic.csv
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q scikit-learn scipy numpy xgboost-cpu
CARGO_INCREMENTAL=0 cargo build -q --release -p kepler-model-server
THREADS=${THREADS:-$(nproc)}
ROUNDS=${ROUNDS:-3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for t in 1 $([ "$THREADS" -gt 1 ] && echo "$THREADS"); do
  "$VENV/bin/python" bench/train_vs_sklearn.py "$DATA" target/release/kepler-model-server \
    "$OUT/t$t" "$SEED" "$t" "$ROUNDS"
done
