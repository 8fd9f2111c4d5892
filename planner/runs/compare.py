"""Two plans side by side: every plan field, memory term, time term and throughput figure, with
the difference B − A, the ratio B/A and which plan is better on that line."""

from __future__ import annotations

from planner.plan import ParallelPlan
from planner.result import MEMORY_TERMS, TIME_TERMS

PLAN_FIELDS = (
    "gpus",
    *(f for f in ParallelPlan.model_fields if f not in ("first_stage_layers", "last_stage_layers")),
    "precision",
    "attention_kernel",
    "overlap_grad_reduce",  # the overlaps: a typed plan and a plan file or script may differ there (ux14)
    "overlap_param_gather",
    "tp_comm_overlap",
    "global_batch",
    "seq_len",
    "hardware",
    "model",
)
# (key in estimate, label, unit, which way is better)
METRICS = (
    ("iteration_s", "iteration", "s", "lower"),
    ("tokens_per_s", "tokens/s", "", "higher"),
    ("tflops_per_gpu", "TFLOP/s per GPU (model)", "", "higher"),
    ("mfu", "MFU (attention over the whole s²)", "frac", "higher"),
    ("mfu_causal", "MFU causal (Megatron's)", "frac", "higher"),
    ("bubble_frac", "pipeline bubble", "frac", "lower"),
    ("peak_memory_gib", "peak memory", "GiB", "lower"),
    ("train_days", "days to train", "", "lower"),
    ("gpu_hours", "GPU-hours", "", "lower"),
    ("cost", "cost", "", "lower"),
    ("energy_mwh", "energy (GPUs)", "MWh", "lower"),
)


def _field(pj: dict, name: str):
    if name in ("gpus", "hardware", "model"):
        return pj[name]
    for section in ("parallel", "options", "training"):
        if name in pj.get(section, {}):
            return pj[section][name]
    return None


def _row(section: str, name: str, unit: str, a, b, better_when: str | None) -> dict:
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    delta = b - a if numeric else None
    ratio = b / a if numeric and a else None
    better = None
    if numeric and better_when and abs(b - a) > 1e-9 * max(abs(a), abs(b), 1e-300):
        better = "b" if (b < a) == (better_when == "lower") else "a"
    return {
        "section": section,
        "name": name,
        "unit": unit,
        "a": a,
        "b": b,
        "delta": delta,
        "ratio": ratio,
        "differs": a != b,
        "better": better,
    }


def compare_plans(a: dict, b: dict) -> dict:
    """Rows for plan fields (no better/worse), memory terms (GiB, lower is better), time terms
    (seconds per iteration, lower is better) and throughput/cost figures."""
    ea, eb = a["estimate"], b["estimate"]
    rows = [_row("plan", f, "", _field(a, f), _field(b, f), None) for f in PLAN_FIELDS]
    rows += [_row("memory", k, "GiB", ea["memory"][k], eb["memory"][k], "lower") for k in (*MEMORY_TERMS, "total")]
    rows += [_row("time", k, "s", ea["time"][k], eb["time"][k], "lower") for k in TIME_TERMS]
    rows += [_row("throughput", label, unit, ea.get(k), eb.get(k), way) for k, label, unit, way in METRICS]
    it_a, it_b = ea["iteration_s"], eb["iteration_s"]
    summary = {"speedup_b_over_a": it_a / it_b, "faster": "a" if it_a < it_b else "b" if it_b < it_a else None}
    return {"a": a, "b": b, "rows": rows, "summary": summary}
