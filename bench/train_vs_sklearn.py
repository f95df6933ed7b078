"""Trains the models `kepler-model-server train` trains, with scikit-learn, SciPy and
XGBoost, on the same nx12 rows and the same seeded split, and prints fit time and MAE per
model next to ours (read from the metadata tables our runs write). Run by
bench/train_vs_sklearn.sh, which sets up the virtual environment and our build.

The two sides take turns: each round runs our binary twice, then every Python fit three
times. This shared machine has slow spells of tens of seconds (the same binary, pinned to one
CPU, fits 1.5x slower in one than in the next), so a side measured only before or after the
other would carry the spell into the ratio. The table takes each side's best over all rounds;
the lines under it give each round's own tree times and ratios."""
import csv
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import scipy
import sklearn
import xgboost
from scipy.optimize import curve_fit
from sklearn.linear_model import LinearRegression, Ridge

data_csv, ours_bin, out_dir, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
# Threads for XGBoost (`n_jobs`) and ours (`--threads`). With more than one only the tree
# rows are printed: the other trainers are single-threaded on both sides.
THREADS = int(sys.argv[5])
ROUNDS = int(sys.argv[6])
# SciPy's fits from their default starts warn (overflow, no covariance); their MAE shows it.
warnings.filterwarnings("ignore")
MASK = (1 << 64) - 1


def shuffled(n, seed):
    """The same SplitMix64 + Fisher-Yates shuffle as crates/models/src/train/eval.rs."""
    state = seed
    idx = list(range(n))
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        z ^= z >> 31
        j = z % (i + 1)
        idx[i], idx[j] = idx[j], idx[i]
    return idx


rows = list(csv.DictReader(open(data_csv)))
n = len(rows)
idx = shuffled(n, seed)
n_test = min(max(int(n * 0.2 + 0.5), 1), n - 1)
test, train = sorted(idx[:n_test]), sorted(idx[n_test:])
col = lambda name: np.array([float(r[name]) for r in rows])
GROUPS = {
    "BPFOnly": ["bpf_cpu_time_us"],
    "Full": ["bpf_cpu_time_us", "cpu_cycles", "cpu_instructions", "cache_miss"],
}
# The curve feature: cpu_instructions when the group has it (the loader's choice), else cpu time.
MAIN = {"BPFOnly": "bpf_cpu_time_us", "Full": "cpu_instructions"}
# All four, as ours trains (core and uncore read 0 W on nx12); MAE is the worst of them.
COMPONENTS = ["package", "core", "uncore", "dram"]


def log_f(x, a, b, c):
    return a * np.log(b * x + 1) + c


def exp_f(x, a, b, c):
    return a * np.exp(b * x) + c


def logistic_f(x, A, x0, k, off):
    return A / (1 + np.exp(-k * (x - x0))) + off


def fit_predict(trainer, group):
    X = np.column_stack([col(f) for f in GROUPS[group]])
    scale = np.abs(X[train]).max(axis=0)
    scale[scale == 0] = 1
    Xs = X / scale
    x_main = col(MAIN[group])
    x_main = x_main / max(np.abs(x_main[train]).max(), 1e-300)
    preds, fit_s = {}, 0.0
    for comp in COMPONENTS:
        y = col(comp + "_power")
        t0 = time.perf_counter()
        if trainer == "LinearRegressionTrainer":
            m = LinearRegression().fit(Xs[train], y[train])
        elif trainer == "NNLSRegressionTrainer":
            m = LinearRegression(positive=True).fit(Xs[train], y[train])
        elif trainer == "RidgeRegressionTrainer":
            m = Ridge(alpha=1.0).fit(Xs[train], y[train])
        elif trainer.startswith("XgboostFitTrainer"):
            # Ours grows from 256 quantile bins per feature (exact for features with fewer
            # distinct values); compared with both of XGBoost's single-machine methods.
            method = "hist" if trainer.endswith("(hist)") else "exact"
            m = xgboost.XGBRegressor(n_estimators=100, max_depth=6, learning_rate=0.3,
                                     tree_method=method, max_bin=256, n_jobs=THREADS)
            m.fit(X[train], y[train])
        else:
            f, p0 = {
                "LogarithmicRegressionTrainer": (log_f, [1, 1, 0]),
                "ExponentialRegressionTrainer": (exp_f, [1, 1, 0]),
                "LogisticRegressionTrainer": (logistic_f, [1, 0.5, 1, 0]),
            }[trainer]
            try:
                params, _ = curve_fit(f, x_main[train], y[train], p0=p0, maxfev=20000)
            except RuntimeError:
                params = None
        fit_s += time.perf_counter() - t0
        if trainer.startswith("XgboostFitTrainer"):
            p = m.predict(X[test])
        elif trainer in ("LinearRegressionTrainer", "NNLSRegressionTrainer", "RidgeRegressionTrainer"):
            p = m.predict(Xs[test])
        elif params is None:
            p = np.full(len(test), np.nan)
        else:
            p = f(x_main[test], *params)
        preds[comp] = (y[test], np.maximum(p, 0))
    maes = {c: float(np.mean(np.abs(m - p))) for c, (m, p) in preds.items()}
    return fit_s, max(maes.values()), maes


TRAINERS = ["LinearRegressionTrainer", "NNLSRegressionTrainer", "RidgeRegressionTrainer",
            "LogarithmicRegressionTrainer", "ExponentialRegressionTrainer",
            "LogisticRegressionTrainer", "XgboostFitTrainer (exact)", "XgboostFitTrainer (hist)"]
if THREADS > 1:
    TRAINERS = [t for t in TRAINERS if t.startswith("XgboostFitTrainer")]


def run_ours(tag):
    """One whole `train` run: its wall time and its metadata table's fit times and MAEs."""
    out = os.path.join(out_dir, tag)
    t0 = time.perf_counter()
    subprocess.run([ours_bin, "--log.level", "warn", "train", "--input", data_csv,
                    "--source", "rapl-sysfs", "--out", out, "--seed", str(seed),
                    "--threads", str(THREADS)], check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    table = os.path.join(out, "kepler-rs", "rapl-sysfs_AbsPower_model_metadata.csv")
    fits = {(r["feature_group"], r["trainer"]): (float(r["fit_seconds"]), float(r["mae"]))
            for r in csv.DictReader(open(table))}
    return wall, fits, os.path.join(out, "kepler-rs")


ours, py, walls, per_round = {}, {}, [], []
for rnd in range(ROUNDS):
    o_round, p_round = {}, {}
    for k in range(2):
        wall, fits, pipeline = run_ours(f"r{rnd}.{k}")
        walls.append(wall)
        for key, (fit, mae) in fits.items():
            o_round[key] = min(fit, o_round.get(key, (fit,))[0]), mae
    for group in GROUPS:
        for trainer in TRAINERS:
            # Best of 3 fits.
            runs = [fit_predict(trainer, group) for _ in range(3)]
            p_round[(group, trainer)] = min(r[0] for r in runs), runs[0][1]
    for src, dst in ((o_round, ours), (p_round, py)):
        for key, (fit, mae) in src.items():
            dst[key] = min(fit, dst.get(key, (fit,))[0]), mae
    per_round.append((o_round, p_round))

print(f"python {sys.version.split()[0]}, numpy {np.__version__}, scipy {scipy.__version__}, "
      f"scikit-learn {sklearn.__version__}, xgboost {xgboost.__version__}; "
      f"{n} rows, {len(train)} train / {len(test)} test, seed {seed}; "
      f"trees on {THREADS} thread(s) on both sides; {ROUNDS} rounds taking turns")
print("our whole train runs (all 7 trainers × 3 groups × Abs+Dyn, evaluation, files, report, "
      f"process start): {min(walls):.2f}–{max(walls):.2f} s")
print("| group | trainer | Python fit (ms) | ours fit (ms) | speed-up | Python MAE (W) | ours MAE (W) |")
print("|---|---|---|---|---|---|---|")
tot_py = tot_ours = 0.0
for group in GROUPS:
    for trainer in TRAINERS:
        fit_s, mae = py[(group, trainer)]
        o_fit, o_mae = ours[(group, trainer.split(" ")[0])]
        # Totals count each of our models once, against XGBoost's exact method.
        if not trainer.endswith("(hist)"):
            tot_py += fit_s
            tot_ours += o_fit
        # Our table keeps 0.1 ms: a fit under that is a bound, not a ratio.
        speedup = f"{fit_s/o_fit:.1f}×" if o_fit >= 1e-4 else f"> {fit_s/1e-4:.0f}×"
        print(f"| {group} | {trainer} | {fit_s*1000:.1f} | {o_fit*1000:.1f} | "
              f"{speedup} | {mae:.2f} | {o_mae:.2f} |")
if THREADS == 1:
    print(f"| all | | {tot_py*1000:.1f} | {tot_ours*1000:.1f} | {tot_py/max(tot_ours,1e-9):.0f}× | | |")
for group in GROUPS:
    for method in ("exact", "hist"):
        trainer = f"XgboostFitTrainer ({method})"
        pairs = [(o[(group, "XgboostFitTrainer")][0], p[(group, trainer)][0])
                 for o, p in per_round]
        print(f"{group} trees vs XGBoost {method}, each round (ours / XGBoost ms): "
              + ", ".join(f"{o*1e3:.1f} / {x*1e3:.1f} = {x/o:.1f}×" for o, x in pairs))

# Our XGBoost archives, loaded by XGBoost itself: the same held-back MAE means the JSON we
# write is a model XGBoost reads and predicts as we do.
import tempfile
import zipfile

for group in GROUPS:
    archive = os.path.join(pipeline, "rapl-sysfs", "AbsPower", group, "XgboostFitTrainer_0.zip")
    X = np.column_stack([col(f) for f in GROUPS[group]])
    maes = {}
    with zipfile.ZipFile(archive) as z, tempfile.TemporaryDirectory() as tmp:
        for comp in COMPONENTS:
            path = os.path.join(tmp, comp + ".json")
            with open(path, "wb") as f:
                f.write(z.read(comp + ".json"))
            booster = xgboost.Booster(model_file=path)
            p = np.maximum(booster.predict(xgboost.DMatrix(X[test])), 0)
            maes[comp] = float(np.mean(np.abs(col(comp + "_power")[test] - p)))
    print(f"{group}: our XgboostFitTrainer_0.zip loaded by xgboost {xgboost.__version__}: "
          f"MAE {max(maes.values()):.2f} W (ours: {ours[(group, 'XgboostFitTrainer')][1]:.2f} W)")
