#!/usr/bin/env python3
"""Benchmark `megaplan search`: every figure of the speed targets (issue 20) in one run.

Each figure is the median over ``--runs`` whole processes (5 by default): the in-process rate of the
GPT-3 175B search on 64 A100 (global batch 64; each process times 5 searches after a first one and
reports their median; each search's time includes reading its plans, whose JSON is built on first read, so
the rate is that of the whole answer), the wall time of whole `megaplan search` processes (GPT-3 175B on 1024 A100,
Llama 3.1 405B on 16,384 H100 at sequence 8192, DeepSeek-V3 on 1024 H100 with its peak RSS), of
`megaplan --version`, and of GPU counts no plan can use (answered from bounds, exit code 2). Then the
in-process rate of the other preset cases. Speed is measured here and recorded in the notes, never
asserted in a timed test (shared, noisy machines). Usage: python scripts/bench_search.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

DRIVER = """
import json, statistics, sys, time
t0 = time.perf_counter()
from planner.api import make_request
from planner.search import search
model, gpus, hardware, seq, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
req = make_request(model=model, gpus=gpus, hardware=hardware, seq_len=seq or None, global_batch=batch or None)
t1 = time.perf_counter()
first = search(req.ctx, gpus)
len(first.plans)
t2 = time.perf_counter()
times, cpu = [], []
for _ in range(5):
    t, c = time.perf_counter(), time.process_time()
    result = search(req.ctx, gpus)
    shown = len(result.plans)  # the answer a user reads: the plans shown, their JSON built (lazily or not)
    times.append(time.perf_counter() - t)
    cpu.append(time.process_time() - c)
print(json.dumps({"evaluated": result.evaluated, "feasible": result.feasible, "search_s": statistics.median(times),
                  "cpu_s": statistics.median(cpu), "first_search_s": t2 - t1, "setup_s": t1 - t0}))
"""


# Children run as a user's install does: `pip install` compiles every module to bytecode, so each process
# reads __pycache__ rather than recompiling. An environment with PYTHONDONTWRITEBYTECODE (as some sandboxes
# set) would make every process recompile the whole planner (about 0.1-0.2 s): it is dropped for the
# children, and each figure's first process (which may write the cache) is a warm-up, not counted.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(args: list[str], expect: int = 0) -> tuple[float, float, str, float]:
    """(wall seconds, peak RSS MiB, stdout, CPU seconds) of one whole process (its own rusage, by os.wait4)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=out, stderr=err, text=True, env=CHILD_ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        code = os.waitstatus_to_exitcode(status)
        if code != expect:
            err.seek(0)
            sys.exit(f"{' '.join(args)}: exit {code}, expected {expect}: {err.read().strip()[-300:]}")
        out.seek(0)
        return wall, usage.ru_maxrss / 1024, out.read(), usage.ru_utime + usage.ru_stime


def whole(args: list[str], runs: int, expect: int = 0) -> tuple[float, str, float, str]:
    """Median wall time over ``runs`` processes, the median CPU time (user + system) as text, the largest
    peak RSS and the last stdout. On a loaded machine the CPU time is the steadier figure."""
    walls, cpus, peaks, out = [], [], [], ""
    run_once(args, expect)  # warm-up: bytecode written, files in the page cache
    for _ in range(runs):
        wall, peak, out, cpu = run_once(args, expect)
        walls.append(wall)
        cpus.append(cpu)
        peaks.append(peak)
    return statistics.median(walls), f"cpu {statistics.median(cpus):.3f} s", max(peaks), out


def in_process(case: tuple, runs: int) -> dict:
    """The driver's figures, the median of each over ``runs`` processes."""
    model, gpus, hw, seq, batch = case
    stats = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", DRIVER, model, str(gpus), hw, str(seq), str(batch)],
            check=True,
            capture_output=True,
            text=True,
            env=CHILD_ENV,
        ).stdout
        stats.append(json.loads(out))
    med = {k: statistics.median(s[k] for s in stats) for k in ("search_s", "cpu_s", "first_search_s", "setup_s")}
    med.update(evaluated=stats[0]["evaluated"], feasible=stats[0]["feasible"])
    med["plans_per_s"] = med["evaluated"] / med["search_s"]
    return med


PLANNER = [sys.executable, "-m", "planner"]
H100 = ["--hardware", "dgx-h100-superpod"]
RATE_CASE = ("gpt3-175b", 64, "dgx-a100-superpod", 0, 64)  # target: >= 1 M plans/s
CLI_CASES = (  # whole `megaplan search` processes and their targets (seconds; MiB)
    (["search", "--model", "gpt3-175b", "--gpus", "1024"], 0.4, None),
    (["search", "--model", "llama3.1-405b", "--gpus", "16384", *H100, "--seq-len", "8192"], 0.5, None),
    (["search", "--model", "deepseek-v3", "--gpus", "1024", "--hardware", "dgx-h100-superpod"], 1.0, 250),
)
NO_PLAN_CASES = (  # GPU counts no plan can use: one line, exit code 2, target 2 s
    ["search", "--model", "gpt3-175b", "--gpus", "10000000"],
    ["search", "--model", "gpt3-175b", "--gpus", "1000000"],
    ["search", "--model", "deepseek-v3", "--gpus", "1000000", "--hardware", "dgx-h100-superpod"],
    ["sweep", "--model", "gpt3-175b", "--gpus", "1000000,10000000"],
)
IN_PROCESS_CASES = (  # (model, GPUs, hardware, sequence length or 0 for the preset's, global batch or 0)
    ("gpt3-175b", 1024, "dgx-a100-superpod", 0, 0),
    ("gpt-1t", 16384, "dgx-a100-superpod", 0, 0),
    ("llama3.1-405b", 16384, "dgx-h100-superpod", 8192, 0),
    ("deepseek-v3", 1024, "dgx-h100-superpod", 0, 0),
    ("qwen3-235b-a22b", 256, "dgx-h100-superpod", 0, 0),
    ("qwen3-30b-a3b", 64, "dgx-h100-superpod", 0, 0),
    ("gpt-oss-120b", 128, "dgx-h100-superpod", 0, 0),
    ("gpt-oss-20b", 64, "dgx-h100-superpod", 0, 0),
)


def verdict(value: float, target: float, more_is_better: bool = False) -> str:
    ok = value >= target if more_is_better else value <= target
    return "meets" if ok else "MISSES"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="whole processes per figure (their median is shown)")
    ap.add_argument("--targets-only", action="store_true", help="skip the other in-process preset cases")
    opts = ap.parse_args()
    n = opts.runs
    print(
        f"median of {n} whole processes per figure (after one warm-up; bytecode cached as pip install leaves it); "
        "wall-clock seconds on this machine"
    )
    s = in_process(RATE_CASE, n)
    print(
        f"in-process: gpt3-175b on 64 A100, global batch 64: {s['evaluated']:,} plans ({s['feasible']:,} fit) "
        f"in {s['search_s'] * 1e3:.1f} ms (cpu {s['cpu_s'] * 1e3:.1f} ms) = {s['plans_per_s']:,.0f} plans/s "
        f"[target >= 1,000,000: {verdict(s['plans_per_s'], 1e6, True)}]"
    )
    for case, target, rss_target in CLI_CASES:
        args = [*case, "--json"]
        median, cpu, peak, out = whole([*PLANNER, *args], n)
        rss = f"; peak RSS {peak:.0f} MiB" if rss_target else ""
        rss += f" [target <= {rss_target} MiB: {verdict(peak, rss_target)}]" if rss_target else ""
        print(
            f"megaplan {' '.join(case)}: {median:.3f} s ({cpu}), "
            f"{json.loads(out)['evaluated']:,} plans [target <= {target} s: {verdict(median, target)}]{rss}"
        )
    median, cpu, _, _ = whole([*PLANNER, "--version"], n)
    print(f"megaplan --version: {median:.3f} s ({cpu}) [target <= 0.15 s: {verdict(median, 0.15)}]")
    for case in NO_PLAN_CASES:
        median, cpu, _, _ = whole([*PLANNER, *case], n, 2)
        print(f"megaplan {' '.join(case)}: {median:.3f} s ({cpu}), exit 2 [target <= 2 s: {verdict(median, 2)}]")
    if opts.targets_only:
        return
    for case in IN_PROCESS_CASES:
        s = in_process(case, n)
        print(
            f"in-process: {case[0]} on {case[1]} GPUs: {s['evaluated']:,} plans ({s['feasible']:,} fit) in "
            f"{s['search_s']:.3f} s (cpu {s['cpu_s']:.3f} s) = {s['plans_per_s']:,.0f} plans/s (first search "
            f"{s['first_search_s']:.3f} s; imports and presets {s['setup_s']:.3f} s)"
        )


if __name__ == "__main__":
    main()
