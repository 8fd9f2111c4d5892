"""How slow a run's attention was, from its published step (NeMo's long-context table, docs/cost-model.md §10.5).

A run's predicted step T has an attention part T_att (the flash-attention calls, ``costs.blocks._flash``): the step
again at half the attention scale takes T + T_att. If the rest of the step is as modelled, the published step T_pub
says the attention took x = (T_pub − T + T_att)/T_att of its modelled time (``kernels.implied_attention_ratio``);
times the release ratio the row carries (``PlanOptions.attention_time_ratio``), its attention's time over the
preset's kernel law (with its calibrated attention scale)."""

from __future__ import annotations

from dataclasses import dataclass

from planner.fidelity.calibrate import with_calibration
from planner.fidelity.kernels import implied_attention_ratio
from planner.fidelity.runs import Run
from planner.fidelity.validate import evaluated, metric_value
from planner.presets import load_hardware


@dataclass(frozen=True)
class AttentionReading:
    run_id: str
    error_pct: float  # predicted over published, at the row's own release ratio
    attention_share: float  # T_att / T
    law_ratio: float  # the row's attention time over the preset law's that its published step implies
    plan: str


def attention_reading(run: Run) -> AttentionReading:
    req, ev = evaluated(run)
    hw = load_hardware(run.hardware)
    _, slow = evaluated(run, with_calibration(hw, {"attention_scale": hw.calibration.attention_scale * 0.5}))
    t, t_att = float(ev.iteration_s[0]), float(slow.iteration_s[0]) - float(ev.iteration_s[0])
    pred = metric_value(run, req, ev)
    time_metric = "time" in run.metric  # a time is published; else a rate, time ∝ 1/rate
    t_pub = t * run.published / pred if time_metric else t * pred / run.published
    x = implied_attention_ratio(t, t_pub, t_att)
    p = req.plan
    return AttentionReading(
        run.id,
        100 * (pred / run.published - 1),
        t_att / t,
        x * req.ctx.options.attention_time_ratio,
        f"t{p.tp} c{p.cp} p{p.pp} v{p.vpp} b{p.micro_batch} {p.recompute.value}",
    )
