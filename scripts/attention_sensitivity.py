#!/usr/bin/env python3
"""How much long-context plans depend on the attention law (docs/cost-model.md §10.5).

For Llama 3 8B on 64 GPUs (global batch 64) and Llama 3 70B on 256 GPUs (global batch 128) at 8k,
32k and 128k tokens, on H100 and GB200: the fastest plan with the distributed optimizer and no FSDP,
its iteration time with the attention scale at its band's edges and with a constant efficiency (the
law's value at 4k), and the fastest plan a search with that constant finds, timed with the law.
Prints the Markdown table of §10.5; takes a few minutes. Usage: python scripts/attention_sensitivity.py
"""

from __future__ import annotations

from planner import api
from planner.costs.compute import flash_attention_efficiency
from planner.costs.estimate import evaluate
from planner.fidelity.calibrate import with_calibration
from planner.fidelity.validate import on_hardware
from planner.hardware.spec import HardwareSpec
from planner.presets import load_hardware
from planner.search import search
from planner.space.candidates import Pins
from planner.space.grid import PlanGrid

PLAN_KEYS = ("tp", "pp", "cp", "vpp", "micro_batch", "recompute", "sequence_parallel", "distributed_optimizer")
CASES = (("llama3-8b", 64, 64), ("llama3-70b", 256, 128))
OPTIONS = dict(overlap_grad_reduce=True, overlap_param_gather=True, tp_comm_overlap=False)


def constant_attention(hw: HardwareSpec, s_ref: int = 4096) -> HardwareSpec:
    """``hw`` with the attention law replaced by its own efficiency at ``s_ref`` (causal, d_h 128)."""
    a, update = hw.attention, {}
    for p in ("fwd", "bwd"):
        eta = flash_attention_efficiency(
            s_ref,
            128,
            128,
            causal=True,
            eta_max=getattr(a, f"{p}_efficiency"),
            row_overhead=getattr(a, f"{p}_row_overhead"),
            diagonal_overhead=getattr(a, f"{p}_diagonal_overhead"),
            head_dim_exponent=getattr(a, f"{p}_head_dim_exponent"),
        )
        update |= {f"{p}_efficiency": float(eta), f"{p}_row_overhead": 0.0, f"{p}_diagonal_overhead": 0.0}
    return hw.model_copy(update={"attention": a.model_copy(update=update)})


def fastest(req: api.PlanRequest, gpus: int) -> dict:
    """The fastest estimate (not the tie order's first) among search's plans."""
    plans = search(req.ctx, gpus, Pins(fsdp=False, distributed_optimizer=True), top=200).plans
    return min(plans, key=lambda q: q["estimate"]["iteration_s"])["parallel"]


def timed(req: api.PlanRequest, hw: HardwareSpec) -> float:
    q = on_hardware(req, hw)
    return float(evaluate(PlanGrid.from_plans([q.plan]), q.ctx).iteration_s[0])


def label(par: dict) -> str:
    return f"t{par['tp']} c{par['cp']} p{par['pp']} v{par['vpp']} b{par['micro_batch']} {par['recompute']}"


def main() -> None:
    print(
        "| hardware | model | GPUs | s | best plan (law) | iteration (s) | scale 0.85 | scale 1.10 | constant η "
        "| plan with constant η | its time with the law |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in ("dgx-h100-superpod", "gb200-nvl72"):
        hw = load_hardware(name)
        variants = {
            "0.85": with_calibration(hw, {"attention_scale": 0.85}),
            "1.10": with_calibration(hw, {"attention_scale": 1.10}),
            "const": constant_attention(hw),
        }
        for model, gpus, batch in CASES:
            for s in (8192, 32768, 131072):
                kw = dict(model=model, hardware=hw, gpus=gpus, global_batch=batch, seq_len=s)
                req = api.make_request(**kw, options=OPTIONS)
                par = fastest(req, gpus)
                best = api.make_request(**kw, options=OPTIONS, **{k: par[k] for k in PLAN_KEYS})
                base = timed(best, hw)
                moved = {k: 100 * (timed(best, v) / base - 1) for k, v in variants.items()}
                alt = fastest(on_hardware(req, variants["const"]), gpus)
                alt_s = timed(api.make_request(**kw, options=OPTIONS, **{k: alt[k] for k in PLAN_KEYS}), hw)
                alt_pct = 100 * (alt_s / base - 1)
                print(
                    f"| {name} | {model} | {gpus} | {s // 1024}k | {label(par)} | {base:.2f} | {moved['0.85']:+.1f} % "
                    f"| {moved['1.10']:+.1f} % | {moved['const']:+.1f} % | {label(alt)} | {alt_pct:+.1f} % |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
