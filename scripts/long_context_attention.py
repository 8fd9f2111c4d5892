#!/usr/bin/env python3
"""Is NeMo's long-context table slow in its attention? (docs/cost-model.md §10.5)

For each row of NeMo's long-context table (validate's source "NeMo long-context performance (docs)"): the
prediction's error, the attention's share of the predicted step, and how much slower than the preset's attention
law the run's attention must have been for its published step, the rest as modelled
(``planner.fidelity.long_context``). Then, beside
it, what the published kernel tables of the same GPU measured against the same law (measured/law time at head width
128, s >= 8192, the law times the calibrated attention scale): the kernel releases an older container may have run.
Usage: python scripts/long_context_attention.py   (about 10 s)
"""

from __future__ import annotations

import statistics

from planner.fidelity.kernels import law_ratios
from planner.fidelity.long_context import attention_reading
from planner.fidelity.runs import LONG_CONTEXT, load_runs
from planner.presets import load_hardware

KERNEL_GPU = {"dgx-h100-superpod": "H100-SXM5-80GB", "dgx-b200-superpod": "B200"}
KERNELS = ("FlashAttention-2", "cuDNN fused attention", "cuDNN fused attention (cuDNN frontend)")


def main() -> None:
    runs = [r for r in load_runs() if r.source == LONG_CONTEXT]
    print("| row | plan (searched knobs) | error | attention share | attention time / law |")
    print("|---|---|---|---|---|")
    implied: dict[str, list[float]] = {}
    for r in runs:
        a = attention_reading(r)
        implied.setdefault(r.hardware, []).append(a.law_ratio)
        print(f"| {r.id} | {a.plan} | {a.error_pct:+.1f} % | {a.attention_share:.2f} | {a.law_ratio:.2f} |")
    print()
    for hardware, xs in implied.items():
        hw = load_hardware(hardware)
        print(f"{hardware} ({hw.attention.kernel}): attention time / law, median {statistics.median(xs):.2f}")
        for kernel in KERNELS:
            got = [
                (row, q * hw.calibration.attention_scale)
                for row, q in law_ratios(KERNEL_GPU[hardware], hw.attention.model_dump(), kernel)
                if row.s >= 8192 and row.d_qk == row.d_v == 128
            ]
            for pass_ in ("fwd", "bwd"):
                qs = [q for row, q in got if row.pass_ == pass_]
                if qs:
                    where = "; ".join(sorted({row.source.split("(")[0].strip()[:60] for row, _ in got}))
                    med = statistics.median(qs)
                    print(f"  {kernel} {pass_}: measured / law, median {med:.2f} over {len(qs)} rows ({where})")


if __name__ == "__main__":
    main()
