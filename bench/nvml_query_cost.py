# What each NVML query costs, with one and then two CUDA processes on device 0
# (docs/benchmarks.md "GPU meter"). Needs pynvml (nvidia-ml-py) and torch: python3 bench/nvml_query_cost.py
import os, time, subprocess, sys
import pynvml as n
LOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda_load.py")
load = subprocess.Popen([sys.executable, LOAD, "40"])
load2 = None
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
def t(name, f, reps=20):
    best = 1e9; tot = 0; res = None; err = None
    for _ in range(reps):
        a = time.perf_counter_ns()
        try:
            res = f()
        except Exception as e:
            err = e
        d = time.perf_counter_ns() - a
        tot += d; best = min(best, d)
    print(f"{name:40s} mean {tot/reps/1e3:9.1f} us  min {best/1e3:9.1f} us  err={err}")
    return res
time.sleep(6)
for phase in ("one process", "two processes"):
    print("--", phase)
    t("GetHandleByIndex", lambda: n.nvmlDeviceGetHandleByIndex(0))
    t("GetPowerUsage", lambda: n.nvmlDeviceGetPowerUsage(h))
    t("GetTotalEnergyConsumption", lambda: n.nvmlDeviceGetTotalEnergyConsumption(h))
    t("GetComputeRunningProcesses", lambda: n.nvmlDeviceGetComputeRunningProcesses(h))
    last = [0]
    def pu():
        r = n.nvmlDeviceGetProcessUtilization(h, last[0])
        return r
    s = t("GetProcessUtilization(since 0)", pu, reps=5)
    if s:
        newest = max(x.timeStamp for x in s)
        print("samples", len(s), "newest ts", newest, "time.time us", int(time.time()*1e6), "monotonic us", int(time.monotonic()*1e6))
        last[0] = newest
        time.sleep(1)
        t("GetProcessUtilization(since newest)", pu, reps=5)
    t("GetUtilizationRates", lambda: n.nvmlDeviceGetUtilizationRates(h))
    if load2 is None:
        load2 = subprocess.Popen([sys.executable, LOAD, "25"])
        time.sleep(8)
load.kill(); load2.kill()
