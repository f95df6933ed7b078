#!/usr/bin/env bash
# Training speed and accuracy: `kepler-model-server train` against scikit-learn / SciPy /
# XGBoost (installed from PyPI into a virtual environment) on the nx12 RAPL data, same rows,
# same seeded split, same model settings (XGBoost defaults, one thread, against both its exact
# and its hist tree method; Ridge alpha 1 on MaxAbs-scaled features). Fit times only (our metadata table's fit_seconds, the
# Python fit calls), AbsPower package + dram, MAE = the worse of the two components.
# Usage: bash bench/train_vs_sklearn.sh [SEED]   (VENV=dir to reuse a virtual environment)
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
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for i in 1 2 3; do
  /usr/bin/time -f "%e" -o "$OUT/time$i" target/release/kepler-model-server --log.level warn train \
    --input "$DATA" --source rapl-sysfs --out "$OUT/m$i" --seed "$SEED" >/dev/null
  echo "our whole train run $i (all 7 trainers × 3 groups × Abs+Dyn, evaluation, files, report): $(cat "$OUT/time$i") s"
done
# Python side: fit times, best of 3 per model.
TABLES=$(for i in 1 2 3; do printf '%s,' "$OUT/m$i/kepler-rs/rapl-sysfs_AbsPower_model_metadata.csv"; done)
"$VENV/bin/python" bench/train_vs_sklearn.py "$DATA" "${TABLES%,}" "$SEED"
