"""Predicted memory against published measurements, runs that ran and runs that ran out of memory
(``presets/reference/memory_runs.csv``).

Each row is a Megatron-LM command line (read by the importer, as a user's would be) on its hardware:

- ``measured``: a published peak of PyTorch's allocator (Megatron logs ``max allocated``; its CI
  records ``mem-max-allocated-bytes``), compared with the predicted allocated memory of the stage
  the measurement comes from;
- ``ran``: a published run with a complete configuration; it must fit;
- ``oom``: a published out-of-memory case; it must not fit;
- ``oom_allocator``: an out-of-memory case its authors trace to allocator fragmentation (the same
  peak passes with expandable segments); shown, not a capacity verdict.

Verdicts are without headroom: the question is whether the run fits the GPU, not whether megaplan
would pick it. Every run behind ``megaplan validate`` (``planner.fidelity.runs``: the papers' runs and
today's, dense and MoE) ran as well; ``reference_verdicts`` checks that each is predicted to fit.
"""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass

import numpy as np

from planner import api, parallel
from planner.fidelity.moe_runs import load_moe_runs
from planner.fidelity.runs import load_runs
from planner.fidelity.validate import preset_evaluations
from planner.hardware.spec import GIB
from planner.plan import plan_label
from planner.presets import presets_root

KINDS = ("measured", "ran", "oom", "oom_allocator")


@dataclass(frozen=True)
class MemoryRun:
    id: str
    kind: str
    hardware: str
    gpus: int
    model: str | None
    flags: str
    env: dict[str, str]
    measured_gib: float | None
    stage: str  # the pipeline stage a measurement comes from: first, last
    source: str
    assumptions: str

    def request(self) -> api.PlanRequest:
        from planner.megatron.importer import import_megatron  # bashlex builds its tables on import: where read

        return import_megatron(
            self.flags, gpus=self.gpus, model=self.model, hardware=self.hardware, env=self.env
        ).request


def load_memory_runs() -> list[MemoryRun]:
    text = (presets_root() / "reference" / "memory_runs.csv").read_text()
    runs = []
    for row in csv.DictReader(io.StringIO(text)):
        env = dict(pair.split("=", 1) for pair in row["env"].split()) if row["env"] else {}
        runs.append(
            MemoryRun(
                id=row["id"],
                kind=row["kind"],
                hardware=row["hardware"],
                gpus=int(row["gpus"]),
                model=row["model"] or None,
                flags=row["flags"],
                env=env,
                measured_gib=float(row["measured_gib"]) if row["measured_gib"] else None,
                stage=row["stage"],
                source=row["source"],
                assumptions=row["assumptions"],
            )
        )
    return runs


def predict_memory(run: MemoryRun) -> dict:
    """The plan's memory with no headroom: the most loaded stage's total against what PyTorch can
    allocate, and the allocated memory of the stage a measurement comes from."""
    pj = api.explain(run.request(), memory_headroom=0.0, suggest=False)
    est, stages = pj["estimate"], {s["stage"]: s for s in pj["stages"]}
    at = stages[0] if run.stage == "first" else stages[pj["parallel"]["pp"] - 1]
    out = {
        "id": run.id,
        "kind": run.kind,
        "hardware": run.hardware,
        "plan": _plan_text(pj),
        "peak_gib": est["peak_memory_gib"],
        "allocatable_gib": est["allocatable_gib"],
        "fits": est["fits_without_headroom"],
        "free_gib": est["allocatable_gib"] - est["peak_memory_gib"],
        "source": run.source,
        "assumptions": run.assumptions,
    }
    if run.measured_gib is not None:
        out.update(measured_gib=run.measured_gib, predicted_gib=at["allocated"])
        out["error_pct"] = 100 * (at["allocated"] / run.measured_gib - 1)
    return out


def _plan_text(pj: dict) -> str:
    """The plan label (``planner.plan.plan_label``) with FP8, which the memory depends on."""
    fp8 = pj["options"]["fp8"]
    moe = bool(pj["model_spec"].get("num_experts"))
    return plan_label(pj["parallel"], moe=moe, options=pj["options"]) + (f" FP8-{fp8}" if fp8 else "")


def reference_verdicts() -> list[dict]:
    """Every run behind ``megaplan validate`` (each published run once, whatever metrics it gives), the MoE
    runs too (``moe_runs.load_moe_runs``: every one of them ran), with its most loaded stage's memory against what
    PyTorch can allocate on its hardware, no headroom."""
    rows, runs = [], {}
    for run in [*load_runs(), *load_moe_runs()]:
        runs.setdefault(run.id.split(":")[0], run)  # a run published with several metrics is one run
    evaluated = preset_evaluations([(run.hardware, run.request) for run in runs.values()])  # as validate's
    for (rid, run), (req, ev) in zip(runs.items(), evaluated, strict=True):
        peak = float(ev.peak_memory_bytes[0]) / GIB
        allocatable = req.ctx.hardware.memory.allocatable_gib
        rows.append(
            {
                "id": rid,
                "hardware": run.hardware,
                "peak_gib": peak,
                "allocatable_gib": allocatable,
                "fits": peak <= allocatable,
            }
        )
    return rows


def memory_rows(runs: list[MemoryRun] | None = None, fork: bool = True) -> list[dict]:
    """``predict_memory`` of every run (default: ``load_memory_runs``), split between two processes where
    ``fork`` and ``parallel.can_fork`` (``parallel.map_jobs``: the same rows)."""
    jobs = [functools.partial(predict_memory, r) for r in (runs if runs is not None else load_memory_runs())]
    return parallel.map_jobs(jobs, fork and len(jobs) > 1 and parallel.can_fork())


def rows_and_settings() -> tuple[list[dict], dict]:
    """``memory_rows()`` in this process, and the settings behind each preset's fit
    (``evidence.settings_per_preset``): what `megaplan validate` computes in another process while it
    validates the times (neither needs the other's results; the settings' plans are the published ones)."""
    from planner.fidelity.evidence import settings_per_preset

    return memory_rows(fork=False), settings_per_preset()


def validate_memory(runs: list[MemoryRun] | None = None, rows: list[dict] | None = None) -> dict:
    """Rows of predicted memory for every run, the error on the measured ones, and the verdicts; with
    the default runs, also whether every run behind ``megaplan validate`` fits (``reference``). ``rows``:
    ``memory_rows(runs)`` computed already (by ``megaplan validate``, in another process meanwhile)."""
    default = runs is None
    rows = rows if rows is not None else memory_rows(runs)
    errors = np.array([r["error_pct"] for r in rows if "error_pct" in r])
    verdicts = {
        "ran_fit": sum(r["fits"] for r in rows if r["kind"] == "ran"),
        "ran": sum(r["kind"] == "ran" for r in rows),
        "oom_not_fit": sum(not r["fits"] for r in rows if r["kind"] == "oom"),
        "oom": sum(r["kind"] == "oom" for r in rows),
    }
    reference = reference_verdicts() if default else []
    if reference:
        verdicts.update(reference_fit=sum(r["fits"] for r in reference), reference=len(reference))
    summary = {
        "measured": len(errors),
        "median_abs_error_pct": float(np.median(np.abs(errors))) if len(errors) else None,
        "max_abs_error_pct": float(np.max(np.abs(errors))) if len(errors) else None,
        "mean_error_pct": float(np.mean(errors)) if len(errors) else None,
        **verdicts,
    }
    return {"runs": rows, "summary": summary, "reference": reference}
