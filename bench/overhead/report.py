#!/usr/bin/env python3
"""Markdown table from an overhead run's raw.jsonl: medians over rounds, ratios to Scaphandre
and the issue's targets. `report.py DIR` re-renders a saved run."""

import json
import os
import statistics
import sys

LABELS = {
    "idle": "idle",
    "sleep1k": "+1,000 sleeping processes",
    "sleep10k": "+10,000 sleeping processes",
    "wake1k": "+1,000 processes waking every second",
    "churn100": "churn 100 spawns/s",
    "churn1k": "churn 1,000 spawns/s",
    "sleep1k-cg": "+1,000 sleeping processes in a cgroup of their own",
    "sleep10k-cg": "+10,000 sleeping processes in a cgroup of their own",
    "sleep1k-churn100": "+1,000 sleeping processes and churn 100 spawns/s",
}
ORDER = list(LABELS)
INTERVALS = ["5s", "1s"]
TARGET_RATIO = 0.2
TARGET_WAKE_PCT = 0.1
TARGET_SCRAPE_MS = 10.0
# The eBPF agent's accounting, as its cells name it.
ACCOUNTING_SHORT = {
    "sched_switch": "switch",
    "task_iterator": "iterator",
    "task_iterator+counted": "iterator, counted exits",
}


def med(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def pct(v):
    if v is None:
        return "–"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}"


def cell(rows, kernel_part):
    if not rows:
        return "–"
    cpu = pct(med(rows, "cpu_pct")) + " %"
    if kernel_part:
        per_call = med(rows, "bpf_ns_per_call")
        # Runs before the per-call figure was recorded have none.
        call = f", {per_call:,.0f} ns a call" if per_call is not None else ""
        cpu += f" ({pct(med(rows, 'user_pct'))} + {pct(med(rows, 'bpf_pct'))}{call})"
    series = med(rows, "series")
    scrape = med(rows, "scrape_ms")
    parts = [
        cpu,
        f"{med(rows, 'rss_mib'):.1f} MiB",
        f"{series:,.0f} series" if series is not None else "no scrape",
        f"{scrape:.1f} ms" if scrape is not None else "–",
    ]
    chosen = sorted({r["accounting"] for r in rows if r.get("accounting")})
    if chosen:
        parts.append(" / ".join(ACCOUNTING_SHORT.get(c, c) for c in chosen))
    failed = sum(r["failed_scrapes"] for r in rows)
    if failed:
        parts.append(f"{failed} failed scrapes")
    return " · ".join(parts)


def ratio(ours, theirs):
    a, b = med(ours, "cpu_pct"), med(theirs, "cpu_pct")
    if a is None or not b:
        return None
    return a / b


def fmt_ratio(r):
    return "–" if r is None else f"{r:.3g} ({'≤' if r <= TARGET_RATIO else '>'} 1/5)"


def render(out_dir):
    with open(os.path.join(out_dir, "raw.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    meta_path = os.path.join(out_dir, "meta.json")
    meta = {}
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)

    def pick(scenario, agent):
        return [r for r in rows if r["scenario"] == scenario and r["agent"] == agent]

    scenarios = [s for s in ORDER if any(r["scenario"] == s for r in rows)]
    lines = []
    if meta:
        lines.append(
            f"Run of {meta.get('started_utc', '?')}: kernel {meta.get('kernel', '?')}, "
            f"{meta.get('cpus', '?')} CPUs, {meta.get('rounds', '?')} interleaved rounds "
            f"(medians), {meta.get('window_s', '?'):g} s measured after "
            f"{meta.get('warmup_s', '?'):g} s warm-up, every agent scraped every 5 s; "
            f"the run took {meta.get('minutes', '?')} min."
        )
        lines.append("")
    lines.append(
        "Cells: CPU % of one core · RSS · series · median scrape time, and for the eBPF source "
        "the accounting it chose (switch: `sched_switch` charging, iterator: the task "
        "iterator; counted exits: nothing on `sched_switch`, ended processes through their "
        "cgroups' counters). eBPF CPU is user space "
        "(agent cgroup) + in-kernel (its BPF programs' run time, and that time per program "
        "call where a program ran). Machine: load average at the "
        "end of the window · context switches per second during it (each runs the programs)."
    )
    lines.append("")
    lines.append(
        "| scenario | agent interval | eBPF source (user + in-kernel) | procfs source "
        "| Scaphandre 1.0.0 | eBPF ÷ Scaphandre CPU | procfs ÷ Scaphandre CPU | machine |"
    )
    lines.append("|---|---|---|---|---|---|---|---|")
    misses = []
    for s in scenarios:
        label = LABELS[s]
        rate = med([r for r in rows if r["scenario"] == s], "churn_rate")
        if rate is not None:
            label += f" (achieved {rate:,.0f}/s)"
        scaph = pick(s, "scaphandre")
        here = [r for r in rows if r["scenario"] == s]
        load = f"{med(here, 'loadavg'):.1f}"
        switches = med(here, "switches_per_s")
        if switches is not None:
            load += f" · {switches / 1000:.0f}k switches/s"
        for iv in INTERVALS:
            ebpf, procfs = pick(s, f"ebpf-{iv}"), pick(s, f"procfs-{iv}")
            re, rp = ratio(ebpf, scaph), ratio(procfs, scaph)
            for name, r in (("eBPF", re), ("procfs", rp)):
                if r is not None and r > TARGET_RATIO:
                    misses.append(f"{name} source at {iv} in “{LABELS[s]}”: {r:.3g} of Scaphandre")
            lines.append(
                f"| {label} | {iv[:-1]} s | {cell(ebpf, True)} | {cell(procfs, False)} "
                f"| {cell(scaph, False)} | {fmt_ratio(re)} | {fmt_ratio(rp)} | {load} |"
            )
    lines.append("")
    lines.append("Targets (issue 14):")
    if misses:
        lines.append(f"- ≤ 1/5 of Scaphandre's CPU in every scenario: missed in {len(misses)}:")
        lines.extend(f"  - {m}" for m in misses)
    elif scenarios:
        lines.append("- ≤ 1/5 of Scaphandre's CPU in every scenario: met by both sources.")
    wake = pick("wake1k", "ebpf-5s")
    if wake:
        v = med(wake, "cpu_pct")
        verdict = "met" if v <= TARGET_WAKE_PCT else "missed"
        lines.append(
            f"- ≤ {TARGET_WAKE_PCT} % of one core with 1,000 waking processes at 5 s (eBPF, "
            f"user + in-kernel): {v:.3f} % ({verdict})."
        )
    for s in ("sleep1k", "wake1k"):
        for agent in ("ebpf-5s", "procfs-5s", "ebpf-1s", "procfs-1s"):
            ms = med(pick(s, agent), "scrape_ms")
            if ms is None:
                continue
            verdict = "met" if ms <= TARGET_SCRAPE_MS else "missed"
            lines.append(
                f"- scrape ≤ {TARGET_SCRAPE_MS:g} ms, {LABELS[s]}, {agent}: {ms:.2f} ms ({verdict})."
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.stdout.write(render(sys.argv[1]))
