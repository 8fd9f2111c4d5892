"""Predicted versus published: the planner's value of each reference run's metric, the errors, and
how much faster the planner's best plan would have been (regret)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from planner import api
from planner.costs.estimate import evaluate, layer_step_times_s
from planner.costs.flops import korthikanti_eq8_flops
from planner.fidelity.moe_runs import MOE_METRIC, load_moe_runs
from planner.fidelity.runs import K22, MLM, N21, PAPER_VOCAB, Run, load_runs
from planner.hardware.spec import HardwareSpec
from planner.presets import load_hardware
from planner.space.grid import PlanGrid


def prepare(run: Run, hardware: HardwareSpec | None = None) -> api.PlanRequest:
    """The run as a plan request on its hardware (or the given hardware)."""
    return api.make_request(hardware=hardware or load_hardware(run.hardware), **run.request)


def on_hardware(req: api.PlanRequest, hardware: HardwareSpec) -> api.PlanRequest:
    """The same request on other hardware (a calibration's trial values): no new validation."""
    return replace(req, ctx=replace(req.ctx, hardware=hardware))


def predict(run: Run, hardware: HardwareSpec | None = None, req: api.PlanRequest | None = None) -> float:
    """The planner's value of the run's metric (``req``: the run already prepared)."""
    req = req or prepare(run, hardware)
    grid = PlanGrid.from_plans([req.plan])
    ctx = req.ctx
    if run.metric.startswith("layer"):
        steps = layer_step_times_s(grid, ctx)
        return float(steps["forward"][0] + steps["backward"][0]) * 1e3
    with np.errstate(divide="ignore", invalid="ignore"):
        ev = evaluate(grid, ctx)
    it, n = float(ev.iteration_s[0]), req.gpus
    m, tr = ctx.model, ctx.training
    B, s, L, h = tr.global_batch, tr.seq_len, m.num_layers, m.hidden_size
    peak = ctx.hardware.gpu.peak_flops_per_s(tr.precision.value)
    if run.metric in ("iteration time (s)", "step time (s)"):
        return it
    if run.metric == "tokens/s per GPU":
        return B * s / it / n
    if run.metric == "TFLOP/s per GPU (Eq. 3)":
        eq3 = 96 * B * s * L * h**2 * (1 + s / (6 * h) + PAPER_VOCAB / (16 * L * h))
        return eq3 / it / n / 1e12
    if run.metric == "MFU (Eq. 7)":
        return 72 * B * L * s * h**2 * (1 + s / (6 * h) + PAPER_VOCAB / (12 * h * L)) / it / n / peak
    if run.metric == "HFU (Eq. 8)":
        return korthikanti_eq8_flops(B, s, L, h, PAPER_VOCAB) / it / n / peak
    if run.metric == "TFLOP/s per GPU (r0.8.0)":
        return float(ev.flops["model"][0]) / it / n / 1e12
    if run.metric == "MFU (r0.8.0)":
        return float(ev.flops["model"][0]) / it / n / peak
    if run.metric == MOE_METRIC:
        return B * s / it / n
    raise ValueError(f"unknown metric {run.metric}")


def validate(
    runs: list[Run] | None = None, hardware: dict[str, HardwareSpec] | None = None, *, moe: bool = True
) -> dict:
    """Rows of predicted vs published and the error summary, overall and per source; with ``moe``,
    also the mixture-of-experts runs (``moe``: their rows and summary, apart: the efficiency factors
    were fitted on the dense runs only)."""
    out = _validate(runs if runs is not None else load_runs(), hardware or {})
    if moe and runs is None:
        out["moe"] = validate_moe(hardware=hardware)
        from planner.fidelity.evidence import settings_per_preset

        out["summary"]["settings_by_hardware"] = settings_per_preset()  # distinct model × plan, not rows
    return out


def validate_moe(runs: list[Run] | None = None, hardware: dict[str, HardwareSpec] | None = None) -> dict:
    """The MoE rows and their summary, with ``by_model``: each model family's rows in the bar (not
    flagged as superseded or regressed software)."""
    runs = runs if runs is not None else load_moe_runs()
    out = _validate(runs, hardware or {})
    model = {run.id: run.request["model"] for run in runs}
    rows = [r for r in out["runs"] if r["in_fit"]]
    models = dict.fromkeys(model[r["id"]] for r in rows)
    out["summary"]["in_bar"] = _stats(rows) if rows else {}
    out["summary"]["by_model"] = {m: _stats([r for r in rows if model[r["id"]] == m]) for m in models}
    return out


def _validate(runs: list[Run], hardware: dict[str, HardwareSpec]) -> dict:
    rows = []
    for run in runs:
        pred = predict(run, hardware.get(run.hardware))
        rows.append(
            {
                "id": run.id,
                "source": run.source,
                "hardware": run.hardware,
                "in_fit": run.fit,
                "metric": run.metric,
                "published": run.published,
                "predicted": pred,
                "error_pct": 100 * (pred - run.published) / run.published,
                "assumptions": list(run.assumptions),
            }
        )
    return {"runs": rows, "summary": summarize(rows)}


def _stats(rs: list[dict]) -> dict:
    errs = np.array([r["error_pct"] for r in rs])
    return {
        "runs": len(rs),
        "median_abs_error_pct": float(np.median(np.abs(errs))),
        "max_abs_error_pct": float(np.max(np.abs(errs))),
        "max_abs_log_error": float(np.max(np.abs(np.log1p(errs / 100)))),
        "rms_log_error": float(np.sqrt(np.mean(np.log1p(errs / 100) ** 2))),
    }


def summarize(rows: list[dict]) -> dict:
    stats = _stats

    by_source = {
        src: stats([r for r in rows if r["source"] == src]) for src in dict.fromkeys(r["source"] for r in rows)
    }

    def per_hardware(rs):
        return {hw: stats([r for r in rs if r["hardware"] == hw]) for hw in dict.fromkeys(r["hardware"] for r in rs)}

    complete = [r for r in rows if r.get("in_fit", True) and "hardware" in r]
    partial = [r for r in rows if not r.get("in_fit", True) and "hardware" in r]
    by_generation = {}
    for gen in dict.fromkeys(generation(r["hardware"]) for r in complete):
        by_generation[gen] = stats([r for r in complete if generation(r["hardware"]) == gen])
    return {
        **stats(rows),
        "by_source": by_source,
        "by_hardware": per_hardware(complete),  # runs whose whole configuration is published
        "by_generation": by_generation,  # the same runs by GPU generation (compute capability)
        "by_hardware_assumed": per_hardware(partial),  # an unpublished setting assumed, or superseded software
    }


GENERATIONS = {8: "Ampere (A100)", 9: "Hopper (H100, H200)", 10: "Blackwell (B200, GB200, GB300)"}


def generation(hardware: str) -> str:
    """A preset's GPU generation, from its compute capability's major number."""
    major = int(load_hardware(hardware).gpu.compute_capability)
    return GENERATIONS.get(major, f"compute capability {major}")


def _era_pins(run: Run):
    """What the run's Megatron-LM release could do: 2021 had no SP, selective recompute or
    distributed optimizer; 2022 had no distributed optimizer in these runs."""
    from planner.plan import Recompute, RecomputeMethod
    from planner.space.candidates import Pins

    opts = run.request.get("options", {})
    overlaps = {k: bool(opts.get(k, False)) for k in ("overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")}
    if run.source == N21:
        return Pins(
            sequence_parallel=False,
            distributed_optimizer=False,
            fsdp=False,
            recompute=(Recompute.NONE, Recompute.FULL),
            recompute_method=RecomputeMethod.UNIFORM,
            **overlaps,
        )
    if run.source == K22:
        return Pins(distributed_optimizer=False, fsdp=False, recompute_method=RecomputeMethod.UNIFORM, **overlaps)
    return Pins(fsdp=False, **overlaps)  # Megatron-Core r0.8.0 had no Megatron FSDP


def regret(run: Run) -> dict:
    """How much faster the planner's best plan for the same model, GPUs, batch and hardware is
    predicted to be than the published plan, both with the Megatron-LM behaviour of the run's time."""
    from planner.search import search

    req = api.make_request(hardware=load_hardware(run.hardware), **run.request)
    with np.errstate(divide="ignore", invalid="ignore"):
        published = float(evaluate(PlanGrid.from_plans([req.plan]), req.ctx).iteration_s[0])
    pins = _era_pins(run)
    best = search(req.ctx, req.gpus, pins, top=1).plans[0]
    same = search(
        req.ctx,
        req.gpus,
        replace(pins, recompute=req.plan.recompute, sequence_parallel=req.plan.sequence_parallel),
        top=1,
    ).plans[0]
    keys = (
        "tp",
        "pp",
        "dp",
        "cp",
        "vpp",
        "micro_batch",
        "recompute",
        "sequence_parallel",
        "distributed_optimizer",
        "fsdp",
        "stage_split",
    )
    return {
        "published_plan_s": published,
        "best_plan_s": best["estimate"]["iteration_s"],
        "speedup_pct": 100 * (published / best["estimate"]["iteration_s"] - 1),
        "best_plan": {k: best["parallel"][k] for k in keys},
        "same_recompute_speedup_pct": 100 * (published / same["estimate"]["iteration_s"] - 1),
        "same_recompute_best_plan": {k: same["parallel"][k] for k in keys},
    }


REGRET_SOURCES = (N21, K22, MLM)  # the reference table's runs; today's runs were tuned by NVIDIA's teams


def add_regret(result: dict, runs: list[Run] | None = None, step=None) -> dict:
    """Attach the regret of each whole-model run of the reference table (not the one-layer rows) to
    the validation result - a search per run, so the modern runs (published plans tuned by NVIDIA's
    performance teams) are left out; ``step`` is called after each run (a progress bar)."""
    by_id = {r.id: r for r in (runs if runs is not None else load_runs())}
    for row in result["runs"]:
        run = by_id[row["id"]]
        if ":" not in row["id"] and not run.metric.startswith("layer") and run.source in REGRET_SOURCES:
            row["regret"] = regret(run)
        if step:
            step(f"best plan for {row['id']}")
    return result
