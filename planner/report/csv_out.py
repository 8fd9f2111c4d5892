"""CSV for spreadsheets: one row per plan, sweep size, validated run or compared quantity. Every value is
a plain number or word (fractions as fractions, memory in GiB, time in seconds), with the plan label and,
for search, the command lines that reproduce the plan."""

from __future__ import annotations

import csv
import io

from planner.plan import ParallelPlan
from planner.report.labels import plan_text

PARALLEL_KEYS = tuple(ParallelPlan.model_fields)
ESTIMATE_KEYS = (
    "peak_memory_gib",
    "capacity_gib",
    "allocatable_gib",
    "fits",
    "fits_without_headroom",
    "iteration_s",
    "tokens_per_s",
    "tflops_per_gpu",
    "mfu",
    "hfu",
    "bubble_frac",
    "num_microbatches",
    "train_days",
    "gpu_hours",
    "cost",
    "energy_mwh",
)


def _text(header: list[str], rows: list[list]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(["" if v is None else v for v in row] for row in rows)
    return out.getvalue()


BAND_KEYS = ("iteration_s_band",)  # [low, high]: two columns each


def _plan_cells(pj: dict) -> list:
    par, est = pj["parallel"], pj["estimate"]
    bands = [x for k in BAND_KEYS for x in (est.get(k) or (None, None))]
    pub = pj.get("published") or {}  # the setup's fastest published run, and this plan against it
    published = [pub.get("fastest_tokens_per_gpu"), pub.get("fastest_id"), pub.get("claim_pct")]
    cells = [plan_text(pj), *(par.get(k) for k in PARALLEL_KEYS), *(est.get(k) for k in ESTIMATE_KEYS)]
    return [*cells, *bands, *published]


PLAN_HEADER = [
    "plan",
    *PARALLEL_KEYS,
    *ESTIMATE_KEYS,
    *(f"{k}_{end}" for k in BAND_KEYS for end in ("low", "high")),
    "published_fastest_tokens_per_gpu",
    "published_fastest_id",
    "published_claim_pct",
]


def search_csv(plans: list[dict]) -> str:
    rows = [
        [pj["rank"], pj["model"], pj["hardware"], pj["gpus"], *_plan_cells(pj), *pj.get("commands", {}).values()]
        for pj in plans
    ]
    return _text(["rank", "model", "hardware", "gpus", *PLAN_HEADER, "explain_command", "export_command"], rows)


def sweep_csv(result: dict) -> str:
    rows = []
    for r in result["rows"]:
        cells = _plan_cells(r["plan"]) if r["plan"] else [""] * len(PLAN_HEADER)
        rows.append([r["gpus"], *cells, r["scaling_efficiency"], r["no_plan"]])
    return _text(["gpus", *PLAN_HEADER, "scaling_efficiency", "no_plan"], rows)


def validate_csv(result: dict) -> str:
    header = ["id", "source", "metric", "published", "predicted", "error_pct"]
    regret = any("regret" in r for r in result["runs"])
    header += ["best_plan_speedup_pct", "same_recompute_speedup_pct"] if regret else []
    rows = []
    for r in result["runs"]:
        row = [r[k] for k in header[:6]]
        if regret:
            g = r.get("regret") or {}
            row += [g.get("speedup_pct"), g.get("same_recompute_speedup_pct")]
        rows.append(row)
    for r in result.get("memory", {}).get("runs", []):  # measured peaks; runs that ran and OOM cases: fits?
        if "measured_gib" in r:
            row = [r["id"], r["hardware"], "peak memory allocated (GiB)", r["measured_gib"], r["predicted_gib"]]
            row.append(r["error_pct"])
        else:
            ran = r["kind"] == "ran"
            row = [r["id"], r["hardware"], "fits (ran)" if ran else "fits (out of memory)", "yes" if ran else "no"]
            row += ["yes" if r["fits"] else "no", None]
        rows.append(row + [None] * (len(header) - 6))
    return _text(header, rows)


def compare_csv(cmp: dict) -> str:
    keys = ("section", "name", "unit", "a", "b", "delta", "ratio", "better")
    rows = [[r[k] for k in keys] for r in cmp["rows"]]
    rows.insert(0, ["plan", "label", "", plan_text(cmp["a"]), plan_text(cmp["b"]), None, None, None])
    return _text(list(keys), rows)
