#!/usr/bin/env python3
"""Benchmark `megaplan search`: wall time of whole processes and the search's own throughput.

Speed is measured here and recorded in the issue notes, never asserted in a timed test (shared,
noisy machines). Usage: python scripts/bench_search.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

DRIVER = """
import json, statistics, sys, time
t0 = time.perf_counter()
from planner.api import make_request
from planner.search import search
req = make_request(model=sys.argv[1], gpus=int(sys.argv[2]), hardware=sys.argv[3], seq_len=int(sys.argv[4]) or None)
t1 = time.perf_counter()
first = search(req.ctx, int(sys.argv[2]))
t2 = time.perf_counter()
times = []
for _ in range(5):
    t = time.perf_counter()
    result = search(req.ctx, int(sys.argv[2]))
    times.append(time.perf_counter() - t)
print(json.dumps({"evaluated": result.evaluated, "feasible": result.feasible, "search_s": statistics.median(times),
                  "first_search_s": t2 - t1, "setup_s": t1 - t0}))
"""


def cli_wall(args: list[str], runs: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "planner", *args], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def in_process(model: str, gpus: int, hardware: str, seq_len: int = 0) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, model, str(gpus), hardware, str(seq_len)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    stats = json.loads(out)
    stats["peak_rss_mib"] = max(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, before) / 1024
    stats["plans_per_s"] = stats["evaluated"] / stats["search_s"]
    return stats


CLI_CASES = (  # whole `megaplan search` processes
    ["search", "--model", "gpt3-175b", "--gpus", "1024"],
    ["search", "--model", "llama3.1-405b", "--gpus", "16384", "--hardware", "dgx-h100-superpod", "--seq-len", "8192"],
    ["search", "--model", "deepseek-v3", "--gpus", "1024", "--hardware", "dgx-h100-superpod"],
)
IN_PROCESS_CASES = (  # (model, GPUs, hardware, sequence length or 0 for the preset's)
    ("gpt3-175b", 1024, "dgx-a100-superpod", 0),
    ("gpt-1t", 16384, "dgx-a100-superpod", 0),
    ("llama3.1-405b", 16384, "dgx-h100-superpod", 8192),
    ("deepseek-v3", 1024, "dgx-h100-superpod", 0),
    ("qwen3-235b-a22b", 256, "dgx-h100-superpod", 0),
    ("qwen3-30b-a3b", 64, "dgx-h100-superpod", 0),
    ("gpt-oss-120b", 128, "dgx-h100-superpod", 0),
    ("gpt-oss-20b", 64, "dgx-h100-superpod", 0),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    opts = ap.parse_args()
    for case in CLI_CASES:
        args = [*case, "--json"]
        median, times = cli_wall(args, opts.runs)
        evaluated = json.loads(
            subprocess.run([sys.executable, "-m", "planner", *args], check=True, capture_output=True, text=True).stdout
        )["evaluated"]
        print(
            f"megaplan {' '.join(args[:-1])}: median {median:.3f} s over {opts.runs} runs "
            f"({', '.join(f'{t:.3f}' for t in times)}), {evaluated:,} plans evaluated"
        )
    for model, gpus, hw, seq in IN_PROCESS_CASES:
        s = in_process(model, gpus, hw, seq)
        print(
            f"{model} on {gpus} GPUs: {s['evaluated']:,} plans ({s['feasible']:,} fit) in {s['search_s']:.3f} s "
            f"(median of 5; the first search in a process {s['first_search_s']:.3f} s) = "
            f"{s['plans_per_s']:,.0f} plans/s; "
            f"imports and presets {s['setup_s']:.3f} s; peak RSS {s['peak_rss_mib']:.0f} MiB"
        )


if __name__ == "__main__":
    main()
