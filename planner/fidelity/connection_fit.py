"""φ = ``persistent_gemm_comm_share``: the share of a hidden MoE dispatch's time the compute beside it
loses where Megatron-LM warns of Hopper's connection limit (planner.costs.moe.connection_limited_share).
Anchored to its own measurement, not fitted to throughput rows: the A/B of the 1F1B all-to-all overlap
in yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md @ e865051 (Qwen3-235B-A22B on 256 H100,
TP2 PP8 VPP4 EP32, DeepEP, BF16, MBS 1, GBS 2048, recompute layernorm and moe_act): 19.7 s without,
17.6 s with the overlap, a gain G = 19.7/17.6 = 1.119. φ is the root of G_pred(φ) = G on the preset's
band (one equation, one unknown), solved at the other factors as they stand, so ``calibrate --moe``
re-solves it after t_op and η_a2a move. σ: the published times are rounded to 0.1 s (±0.05 s,
uniform: σ_t = 0.05/√3 s each), σ_G = G·√((σ_t/19.7)² + (σ_t/17.6)²), σ_φ = σ_G / |dG_pred/dφ|."""

from __future__ import annotations

from dataclasses import dataclass

from planner.hardware.calibration import Factor, Status
from planner.hardware.spec import HardwareSpec

PHI = "persistent_gemm_comm_share"
PHI_PRESETS = {"dgx-h100-superpod": ("dgx-h200-superpod",)}  # H200: the same SMs, GEMMs and connection limit
ZOO_SOURCE = "yanring/Megatron-MoE-ModelZoo best_practice/qwen3/readme.md @ e865051"
ZOO_STEP_S = {False: 19.7, True: 17.6}  # without / with --overlap-moe-expert-parallel-comm
ZOO_ROUNDING_S = 0.05  # the times are published to 0.1 s
CARRIED_NOTE = " (same SMs, GEMMs and connection limit): "


def zoo_ab_request(hardware: HardwareSpec, overlap: bool):
    """The Model Zoo's Qwen3-235B-A22B run on 256 GPUs of ``hardware``, with or without the A2A overlap
    (and --delay-wgrad-compute, which the readme turns on with it)."""
    from planner.api import make_request

    return make_request(
        model="qwen3-235b-a22b", hardware=hardware, gpus=256, tp=2, pp=8, vpp=4, ep=32, etp=1, micro_batch=1,
        global_batch=2048, seq_len=4096, recompute="selective", sequence_parallel=True, distributed_optimizer=True,
        stage_split="embedding+loss", moe_token_dispatcher="flex", overlap_moe_expert_parallel_comm=overlap,
        options=dict(
            moe_flex_dispatcher_backend="deepep", recompute_modules=("layernorm", "moe_act"), overlap_grad_reduce=True,
            overlap_param_gather=True, moe_load_imbalance=1.0, delay_wgrad_compute=overlap,
        ),
    )  # fmt: skip


def zoo_ab_step_s(hardware: HardwareSpec, overlap: bool) -> float:
    """The predicted iteration time of the A/B's run: its plan's evaluation, the number explain's estimate
    shows (tests/test_moe_physics.py), without explain's breakdown, formulas and suggestions - the solve takes
    about 30 of them."""
    from planner.fidelity.validate import _evaluation

    req = zoo_ab_request(hardware, overlap)
    return float(_evaluation("iteration time (s)", req).iteration_s[0])


def with_phi(hardware: HardwareSpec, phi: float | None) -> HardwareSpec:
    cal = hardware.calibration.model_copy(update={PHI: phi})
    return hardware.model_copy(update={"calibration": cal})


def zoo_gain(hardware: HardwareSpec, phi: float | None = None) -> float:
    """G_pred: predicted time without the overlap / with it, at φ = ``phi`` (None: the preset's)."""
    hw = hardware if phi is None else with_phi(hardware, phi)
    return zoo_ab_step_s(hw, False) / zoo_ab_step_s(hw, True)


def measured_gain() -> tuple[float, float]:
    """G and σ_G from the published times and their rounding (module docstring)."""
    off, on = ZOO_STEP_S[False], ZOO_STEP_S[True]
    sigma_t = ZOO_ROUNDING_S / 3**0.5
    gain = off / on
    return gain, gain * ((sigma_t / off) ** 2 + (sigma_t / on) ** 2) ** 0.5


@dataclass(frozen=True)
class PhiFit:
    value: float
    sigma: float | None
    band: tuple[float, float]
    status: str  # Status.MEASURED (solved) or Status.NOT_IDENTIFIABLE
    gain_measured: float
    gain_predicted: float  # at ``value``
    why: str = ""

    def to_json(self) -> dict:
        return vars(self) | {"band": list(self.band)}


def solve_phi(hardware: HardwareSpec, gain: float | None = None) -> PhiFit:
    """φ with G_pred(φ) = G (``gain``, default the Model Zoo's) inside the preset's band, by Brent's
    method; G_pred falls as φ rises (the overlap hides less). A G the band cannot reach is reported not
    identifiable and φ kept at the preset's value, never parked at a bound."""
    from scipy.optimize import brentq

    g, sigma_g = measured_gain()
    g = g if gain is None else gain
    low, high = hardware.calibration.factors[PHI].band
    at_low, at_high = zoo_gain(hardware, low), zoo_gain(hardware, high)
    kept = hardware.calibration.persistent_gemm_comm_share
    if not at_high <= g <= at_low:
        why = f"the band [{low:g}, {high:g}] gives x{at_high:.3f}-x{at_low:.3f}, the A/B x{g:.3f}"
        return PhiFit(kept, None, (low, high), Status.NOT_IDENTIFIABLE.value, g, zoo_gain(hardware), why)
    phi = brentq(lambda x: zoo_gain(hardware, x) - g, low, high, xtol=1e-4)
    step = 0.02
    slope = (zoo_gain(hardware, min(phi + step, high)) - zoo_gain(hardware, max(phi - step, low))) / (
        min(phi + step, high) - max(phi - step, low)
    )
    sigma = sigma_g / abs(slope) if slope else None
    return PhiFit(float(phi), sigma, (low, high), Status.MEASURED.value, g, zoo_gain(hardware, phi))


def phi_factor(fit: PhiFit, previous: Factor, *, carried_from: str | None = None) -> Factor:
    """The preset's φ entry after ``solve_phi``: the band and its reasoning as before, the value's
    sentence rewritten with the gain it reproduces at the factors it was solved with."""
    head = previous.source.split("; value:")[0].split(CARRIED_NOTE)[-1]  # a carried entry's prefix once
    if fit.status == Status.NOT_IDENTIFIABLE.value:
        text = f"{head}; value: not identifiable by the A/B of {ZOO_SOURCE} ({fit.why}); kept at {fit.value:g}"
        return Factor(status=fit.status, band=list(fit.band), source=text)
    text = (
        f"{head}; value: the share that reproduces the measured A/B of the 1F1B A2A overlap on H100 "
        f"({ZOO_SOURCE}: Qwen3-235B-A22B on 256 H100, TP2 PP8 VPP4 EP32, DeepEP, BF16, MBS 1, GBS 2048, recompute "
        f"layernorm and moe_act: 19.7 s without, 17.6 s with the overlap, x{fit.gain_measured:.3f}); solved by "
        f"megaplan calibrate --moe at the fitted factors (x{fit.gain_predicted:.3f} at {fit.value:.3f}); σ from the "
        f"times' rounding to 0.1 s; tests/test_moe_physics.py"
    )
    if carried_from:
        text = f"carried over from {carried_from}{CARRIED_NOTE}{text}"
        return Factor(status=Status.CARRIED.value, band=list(fit.band), source=text)
    sigma = None if fit.sigma is None else round(fit.sigma, 3)
    return Factor(status=fit.status, band=list(fit.band), sigma=sigma, source=text)
