"""When a calibration on the user's own runs cannot reach a measurement: which assumption is likely wrong.

The fitted factors move a prediction only within their bands (kernel rates, overheads); a run that
stays far off after the fit differs from the script in something the factors do not model. Each
candidate assumption is changed in turn - precision (FP8 or not), communication overlap, the GPU
count (data parallelism x2 or /2) and the hardware (every shipped GPU preset) - and the ones whose
prediction lands nearer the measurement than the fit did are named, nearest first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from planner import api
from planner.costs.estimate import evaluate
from planner.fidelity.calibrate import RUN_NOISE
from planner.hardware.spec import HardwareSpec
from planner.plan import Fp8Format
from planner.space.grid import PlanGrid

# A run still this far off after the fit (|ln(after/measured)|) is out of the factors' reach:
# three times one run's noise (RUN_NOISE, ±4 % between releases of one mapping).
REACH_LOG_ERROR = 3 * RUN_NOISE
EXPLAINS = 0.5  # ... or one that halves the fit's log miss at least
OVERLAPS = ("overlap_grad_reduce", "overlap_param_gather")


@dataclass(frozen=True)
class Alternative:
    assumption: str  # precision, overlap, GPU count, hardware
    change: str  # what was changed, as the user would change it
    predicted_s: float

    def text(self, measured_s: float) -> str:
        return f"{self.assumption} ({self.change}: {self.predicted_s:.3g} s, {self.predicted_s / measured_s - 1:+.0%})"


def iteration_s(req: api.PlanRequest) -> float | None:
    """The predicted iteration time of one request (None when the plan cannot run at all)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = float(evaluate(PlanGrid.from_plans([req.plan]), req.ctx).iteration_s[0])
    return t if np.isfinite(t) and t > 0 else None


def _with_options(req: api.PlanRequest, **changes) -> api.PlanRequest:
    return replace(req, ctx=replace(req.ctx, options=req.ctx.options.model_copy(update=changes)))


def _with_dp(req: api.PlanRequest, dp: int) -> api.PlanRequest | None:
    plan = req.plan
    if dp < 1 or req.ctx.training.global_batch % (plan.micro_batch * dp):
        return None
    return replace(req, plan=plan.model_copy(update={"dp": dp}), gpus=req.gpus * dp // plan.dp)


def alternatives(
    req: api.PlanRequest, others: list[HardwareSpec], *, world_known: bool = False
) -> list[tuple[str, str, api.PlanRequest]]:
    """(assumption, change, request) for each assumption the log may contradict (not the GPU count
    when the log states its world size)."""
    o, plan = req.ctx.options, req.plan
    out = [
        ("precision", "without FP8", _with_options(req, fp8=None))
        if o.fp8
        else ("precision", "with FP8 (--fp8-format hybrid)", _with_options(req, fp8=Fp8Format.HYBRID))
    ]
    on = all(getattr(o, f) for f in OVERLAPS)
    out.append(
        ("overlap", "no grad-reduce/param-gather overlap", _with_options(req, **dict.fromkeys(OVERLAPS, False)))
        if on
        else (
            "overlap",
            "--overlap-grad-reduce --overlap-param-gather",
            _with_options(req, **dict.fromkeys(OVERLAPS, True)),
        )
    )
    for dp in () if world_known else (plan.dp * 2, plan.dp // 2):
        if (alt := _with_dp(req, dp)) is not None:
            out.append(("GPU count", f"{alt.gpus} GPUs (DP{dp})", alt))
    for hw in others:
        if hw.gpu.name != req.ctx.hardware.gpu.name:
            out.append(("hardware", hw.name, replace(req, ctx=replace(req.ctx, hardware=hw))))
    return out


def likely_causes(
    req: api.PlanRequest, measured_s: float, after_s: float, others: list[HardwareSpec], *, world_known: bool = False
) -> list[Alternative]:
    """The alternatives that explain ``measured_s``: within REACH_LOG_ERROR of it, or at least halving
    the fit's log miss (``after_s``); nearest first, one per assumption."""
    miss = abs(np.log(after_s / measured_s))
    found = []
    for assumption, change, alt in alternatives(req, others, world_known=world_known):
        t = iteration_s(alt)
        if t is not None and abs(np.log(t / measured_s)) <= max(REACH_LOG_ERROR, EXPLAINS * miss):
            found.append(Alternative(assumption, change, t))
    found.sort(key=lambda a: abs(np.log(a.predicted_s / measured_s)))
    best: dict[str, Alternative] = {}
    for a in found:  # one per assumption: the nearest
        best.setdefault(a.assumption, a)
    return list(best.values())


def direction_text(measured_s: float, after_s: float) -> str:
    """What to check when no single change explains the run."""
    if measured_s < after_s:
        return (
            "the run is faster than any factor in its band allows: check that the script is the run's "
            "(FP8, GPU count, overlap) and the --hardware"
        )
    return (
        "the run is slower than any factor in its band allows: check the GPU count, the network and the "
        "--hardware, and that the run was not throttled or shared"
    )
