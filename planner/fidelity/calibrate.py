"""Fit the hardware presets' efficiency factors to published runs, with their uncertainties.

One calibration per GPU, never per-run factors. ``scipy.optimize.least_squares`` minimises the
runs' log errors ln(predicted/published), one metric per run, bounded by each factor's band (the
physically plausible range the preset states with its source). The Jacobian at the solution gives
each factor's standard error, σ² = s²·[(JᵀJ)⁻¹]_kk with s² the residual variance. A factor the runs
cannot identify - moving it across its whole band changes no prediction by 1 %, or its σ exceeds
half its band or the value itself - is reported as such and kept at its anchor, and the rest are fitted again.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import least_squares

from planner import api
from planner.fidelity.runs import Run, load_runs
from planner.fidelity.validate import on_hardware, predictions, prepare, shared_contexts, validate
from planner.hardware.calibration import Drift, Status
from planner.hardware.spec import HardwareSpec
from planner.presets import load_hardware

FIT_FIELDS = (  # the factors calibrate may fit where the preset gives them a band, in order of priority
    "gemm_efficiency",
    "fp8_gemm_efficiency",
    "attention_scale",
    "memory_efficiency",
    "layer_overhead_us",
    "gemm_half_dim",
    "network_bus_efficiency",
    "straggler_sigma",
    "cp_graphed_step_us",
)
# Factors the runs may not leave at a bound of their band (``_pushed_to_bound``): one pushed there is not
# identified by them, kept at its anchor, and the rest refitted. The stragglers' σ: only the weak-scaling
# series' ends inform it, and left free it parks at its band's top (0.03) on A100 and H100 and lifts
# A100's GEMM efficiency to 0.93, above every A100 kernel measurement - a slow GPU the runs cannot tell
# from slow GEMMs (docs/cost-model.md §6.11). So with every factor: one the runs push to a bound of its
# band is set by the band, not by them (GB200's η_net went to its floor, 0.45 ± 0.19, in the 21:00 refit of
# 2026-12-01, and B200 took it over: NeMo 25.02 Nemotron-4 340B on 128 B200 -6.9 -> -23.2 %).
FITTED = ("dgx-a100-superpod", "dgx-h100-superpod", "gb200-nvl72", "gb300-nvl72")
FAMILIES = {  # presets that take a fitted preset's values: the same GPU die, and too few runs of their own
    "dgx-a100-superpod": ("dgx-a100-40gb-superpod",),  # the same A100, less HBM
    "dgx-h100-superpod": ("dgx-h200-superpod",),  # the same GH100 die: Nebius's two MLPerf H200 runs are held out
    "gb200-nvl72": ("dgx-b200-superpod", "dgx-b300-superpod"),  # the same B200 GPU at 1000 W; B300: below
}
# DGX/HGX B300 (Blackwell Ultra at 1100 W) is GB300's die, but no measurement ties its GEMM rate to GB300's (1400 W,
# whose factors rest on its own runs: no MAMF row), while one ties it to GB200's: the same matmul benchmark measured
# both (stas00/ml-engineering MAMF: B300 SXM 1769 / 3353 TFLOP/s BF16 / FP8, GB200 1822 / 3616, B200 1745 / 3432).
# So it takes GB200's fit through gpu.matmul_peak_frac, as B200 does, and keeps Blackwell Ultra's own kernels in its
# preset (GB300's attention tables, Transformer Engine's B300 NVFP4 and cast measurements). Carried from GB300 instead
# (trial of 2026-12-05, at 160 SMs), MLPerf v5.1's four B300 rows, never fitted, went -3.2, +3.8, +0.2, -2.7 % ->
# -14.2, -6.9, -9.2, -11.8 %: GB300's fitted FP8 GEMM rate (0.835 of 5000) is 15 % above what B300 measures relative to
# B200 (at the HGX part's 148 SMs the rows are -3.1, +3.9, +0.3, -2.6 %).
# ... but a family member takes the donor's die, not its fabric: a DGX B200 leaves its NVLink domain at 8 GPUs, a
# GB200 NVL72 at 72, so GB200's runs, nearly all inside one NVL72 domain, do not measure a B200's InfiniBand
# traffic or its scale (a trial refit of 2026-12-04 fitted GB200's η_net at 0.51 ± 0.23 and its stragglers' σ at
# 0.027: carried over, NeMo 25.02's Nemotron-4 340B on 128 B200 went -6.2 -> -19.1 % and Megatron-Bridge 26.02's
# GPT-OSS 120B on 64 B200 +1.5 -> -26.2 %). Its fabric is a DGX H100's: eight single-port ConnectX-7 400 Gb/s NDR
# NICs per node on a rail-optimised Quantum-2 fat tree, eight GPUs to an NVLink domain (the DGX B200 and DGX H100
# datasheets; both SuperPOD reference architectures), so it takes the DGX H100 fit's fabric factors, measured on
# 54 runs of that fabric: its DP and CP rings and its scale.
FABRIC = ("network_bus_efficiency", "straggler_sigma")
# A DGX/HGX B300 leaves its NVLink domain at 8 GPUs too, on eight ConnectX-8 XDR rails: GB300's runs (inside NVL72
# domains) do not measure that fabric either, and no B300 run crosses a node; it takes the same 8-rail fat tree's.
FABRIC_DONORS = {"dgx-b200-superpod": "dgx-h100-superpod", "dgx-b300-superpod": "dgx-h100-superpod"}
FABRIC_NOTE = {
    "dgx-b200-superpod": "a DGX B200's fabric is a DGX H100's, not GB200's: 8 ConnectX-7 NDR rails a node, NVLink at "
    "8 GPUs",
    "dgx-b300-superpod": "a DGX/HGX B300's fabric is an 8-rail fat tree under an 8-GPU NVLink domain, a DGX H100's "
    "shape (its rails ConnectX-8 at 800 Gb/s), not GB300's NVL72",
}
MIN_EFFECT = 0.01  # moving a factor across its band must move some run's prediction by 1 % ...
MAX_SIGMA_FRAC = 0.5  # ... and the runs must pin it to within half its band (one σ), and to within its own value:
# a positive factor whose one-σ interval reaches zero is not measured (GB300's x½ was "fitted" at 112 ± 220 in a
# band 992 wide, σ 22 % of the band and 196 % of the value)
XTOL_STOP = 3  # scipy least_squares status: the step fell under xtol (not a small gradient or cost change)
# a value within 2 % of its band's width from an edge sits at the bound (0.5 % until the GB200 refit of
# 2026-12-01 parked η_net at 0.4558 ± 0.19 of [0.45, 0.95], 1.2 % from its floor, and the stragglers' σ at
# 0.0298 ± 0.015 of [0, 0.03], 0.7 % from its top: Blackwell's max error went 10.2 -> 22.9 %)
AT_BOUND_FRAC = 0.02
# σ of one run's ln(time), the weight of a prior against a run: one mapping measured again in later
# releases scatters by ±4 % (Megatron-Bridge Llama 3.1 405B FP8 on 256 GB200, 26.02-26.06: 793-864 tokens/s/GPU).
# Pooled over every dense configuration measured more than once (validate's ``replicates``, 2026-12-05): across later
# releases σ 0.031 (18 groups, 32 degrees of freedom), across MLPerf submitters' systems 0.010 (6, 11); the MoE
# rows' releases 0.078 (25, 54). Kept at 0.04: a refit at 0.031 moves GB200's attention scale 0.938 -> 0.919 and
# τ 410 -> 397 µs, A100's η 0.885 -> 0.892, each within its σ (not written; docs/cost-model.md §9)
RUN_NOISE = 0.04
MIN_INFORMED = 0.2  # a factor the runs give less than a fifth of its information rests on its measured prior


@dataclass
class FactorFit:
    value: float
    band: tuple[float, float]
    status: str  # "fitted" or "not identifiable"
    sigma: float | None = None
    at_bound: str | None = None  # "lower" or "upper" when a fitted value sits at a bound
    why: str = ""
    informed: float | None = None  # with priors: the share of its information the runs supply


@dataclass
class Fit:
    hardware: str
    factors: dict[str, FactorFit]
    loss: float  # mean squared log error
    runs: int
    sources: list[str] = field(default_factory=list)
    prediction_sigma: float = 0.0  # RMS over the runs of the fitted factors' σ carried to ln(prediction)

    @property
    def values(self) -> dict[str, float]:
        return {k: f.value for k, f in self.factors.items()}

    def to_json(self) -> dict:
        return {
            "runs": self.runs,
            "loss": self.loss,
            "rms_log_error": self.loss**0.5,
            "sources": self.sources,
            "prediction_sigma": self.prediction_sigma,
            "factors": {k: vars(f) | {"band": list(f.band)} for k, f in self.factors.items()},
        }


def _no_step(description: str | None = None) -> None:
    """The default progress callback: nothing to show."""


def with_calibration(hw: HardwareSpec, values: dict[str, float]) -> HardwareSpec:
    """The hardware with other calibration values (no validation: trial values of a fit)."""
    return hw.model_copy(update={"calibration": hw.calibration.model_copy(update=values)})


def _setting(run: Run) -> tuple:
    """What a weak-scaling series keeps fixed: the run but for its GPUs and its batch per GPU."""
    q = run.request
    model = q["model"] if isinstance(q.get("model"), str) else getattr(q.get("model"), "name", None)
    opts = tuple(sorted((q.get("options") or {}).items()))
    knobs = tuple(
        q.get(k)
        for k in ("tp", "pp", "cp", "vpp", "micro_batch", "seq_len", "precision", "recompute", "sequence_parallel")
    )
    return (run.hardware, run.source, model, opts, knobs, q.get("global_batch", 0) / max(q.get("gpus") or 1, 1))


def fit_runs(runs: list[Run]) -> list[Run]:
    """The runs a fit uses: one metric per run - the first listed (MFU/HFU rows repeat their run's
    iteration time) - of the runs whose whole configuration is published (``Run.fit``), and of a
    weak-scaling series (one setting on more GPUs with the batch per GPU kept) the runs at its
    smallest and largest size: the sizes between add no information the two lack and would
    outweigh every other source (a setting measured again in a later release counts again)."""
    seen, first = set(), []
    for run in runs:
        key = run.id.split(":")[0]
        if key not in seen and run.fit:
            seen.add(key)
            first.append(run)
    series: dict[tuple, list[Run]] = {}
    for run in first:
        series.setdefault(_setting(run), []).append(run)
    ends = {
        id(r)
        for group in series.values()
        for r in group
        if _gpus(r) in (min(map(_gpus, group)), max(map(_gpus, group)))
    }
    return [r for r in first if id(r) in ends]


def _gpus(run: Run) -> int:
    return run.request.get("gpus") or 0


class Problem:
    """The runs of one preset, prepared once (or given prepared); log errors for any calibration values."""

    def __init__(self, hw: HardwareSpec, runs: list[Run], requests: list[api.PlanRequest] | None = None):
        self.hw, self.runs = hw, runs
        self.reqs = requests if requests is not None else [prepare(r, hw) for r in runs]
        self.groups = shared_contexts(self.reqs, [r.metric.startswith("layer") for r in runs])  # one grid each

    def residuals(self, values: dict[str, float]) -> np.ndarray:
        hw = with_calibration(self.hw, values)
        with np.errstate(divide="ignore", invalid="ignore"):
            pred = predictions(self.runs, [on_hardware(q, hw) for q in self.reqs], self.groups)
        return np.log(np.asarray(pred) / np.array([r.published for r in self.runs]))


def _jacobian(problem: Problem, names: list[str], values: dict, bands: dict, r0: np.ndarray) -> np.ndarray:
    """Forward differences of the log errors, one step of 1 % of each band."""
    cols = []
    for n in names:
        lo, hi = bands[n]
        step = 0.01 * (hi - lo) * (1 if values[n] + 0.01 * (hi - lo) <= hi else -1)
        cols.append((problem.residuals(dict(values, **{n: values[n] + step})) - r0) / step)
    return np.array(cols).T


def _priors(cal, names: list[str]) -> list[tuple[str, str | None, float, float]]:
    """(factor, per, θ₀, σ) of the preset's priors on ``names`` (a ratio prior needs both factors)."""
    out = []
    for n in names:
        p = cal.factors[n].prior
        if p is not None and (p.per is None or p.per in names):
            out.append((n, p.per, p.value, p.sigma))
    return out


def _prior_residuals(priors: list, values: dict) -> np.ndarray:
    """RUN_NOISE·ln(θ/θ₀)/σ per prior: a Gaussian prior on ln θ weighed against runs of noise RUN_NOISE."""
    return np.array(
        [RUN_NOISE * (np.log(values[n] / (values[per] if per else 1.0)) - np.log(v0)) / sd for n, per, v0, sd in priors]
    )


def _solve(problem: Problem, names: list[str], values: dict, bands: dict, priors: list) -> tuple:
    """Bounded least squares of the runs' log errors and the priors' residuals; returns the values,
    the runs' residuals and the Jacobian of both (runs' rows first)."""
    lo = np.array([bands[n][0] for n in names])
    hi = np.array([bands[n][1] for n in names])
    width = np.maximum(hi - lo, 1e-12)
    x0 = np.clip([values[n] for n in names], lo, hi)

    def residuals(x):
        trial = dict(values, **dict(zip(names, x, strict=True)))
        return np.concatenate([problem.residuals(trial), _prior_residuals(priors, trial)])

    def solve(start):
        return least_squares(residuals, start, bounds=(lo, hi), x_scale=width, diff_step=1e-3, xtol=1e-4, ftol=1e-4)

    sol = solve(x0)
    if sol.status == XTOL_STOP:  # the trust region shrank to nothing, e.g. at a kink of the overlap's max():
        sol = solve(sol.x)  # one fresh start from there (a synthetic η_a2a = 0.55 stalled at 0.570 without it)
    return sol.x, sol.fun[: len(problem.runs)], sol.jac


def fit(
    hardware_name: str | HardwareSpec,
    runs: list[Run],
    fields: tuple[str, ...] | None = None,
    *,
    start: dict[str, float] | None = None,
    identify: bool = True,
    requests: list[api.PlanRequest] | None = None,
    max_factors: int | None = None,
    anchor: dict[str, float] | None = None,
    priors: bool = False,
    noise_floor: float = 0.0,
) -> Fit:
    """Fit one preset's factors (``fields``, default every FIT_FIELDS with a band) to ``runs``;
    ``identify=False`` fits ``fields`` as given, without testing which the runs identify;
    ``requests``: the runs already prepared (then ``runs`` are used as given); ``max_factors``: fit at
    most this many, the first the runs feel in FIT_FIELDS' order; ``anchor``: the values a factor
    the runs cannot identify keeps (default: ``held_value``, its own kernel prior with ``priors``, else the
    preset's; the fit starts from ``anchor``, else the preset's values); ``priors``: regularise toward the
    preset's kernel measurements (``Factor.prior``), a factor the runs do not feel kept in the fit
    while a prior ties it to one they do (the BF16 GEMM rate through the FP8/BF16 kernel ratio);
    ``noise_floor``: the smallest σ of one run's ln(time) the covariance assumes (a fit on one or two
    runs leaves no scatter to measure, so their σ would say nothing of a run's noise)."""
    hw = hardware_name if isinstance(hardware_name, HardwareSpec) else load_hardware(hardware_name)
    cal = hw.calibration
    if requests is None:
        runs = [r for r in fit_runs(runs) if r.hardware == hw.name]
    problem = Problem(hw, runs, requests)
    bands = {
        n: cal.band(n)
        for n in (fields or FIT_FIELDS)
        if getattr(cal, n, None) is not None and cal.band(n) and cal.factors[n].status != Status.MEASURED
    }
    given = anchor or {}
    values = {n: min(max(given.get(n, getattr(cal, n)), bands[n][0]), bands[n][1]) for n in bands}
    values.update(start or {})
    anchor = {n: min(max(given.get(n, held_value(cal, n, priors=priors)), bands[n][0]), bands[n][1]) for n in bands}
    dropped: dict[str, str] = {}
    if not problem.runs:
        # No run to fit (none of this preset's rows in the fit): every factor keeps its anchor, said so.
        why = f"no run of {hw.name} in the fit: nothing measures it"
        factors = {n: FactorFit(float(anchor[n]), bands[n], Status.NOT_IDENTIFIABLE.value, why=why) for n in bands}
        return Fit(hw.name, factors, 0.0, 0, [], 0.0)
    active, followers = list(bands), {}
    if identify:
        # no more free factors than runs: with fewer, the runs fit every factor exactly and measure no σ (a trial
        # fit of H200's three MLPerf rows "fitted" all seven factors at σ 0)
        cap = len(problem.runs) if max_factors is None else min(max_factors, len(problem.runs))
        active, followers = _felt(problem, cal, bands, anchor, values, dropped, priors=priors, max_factors=cap)
    sigma, spread, informed = _narrowed(
        problem, cal, bands, anchor, values, active, dropped, identify, priors, noise_floor, followers
    )
    factors = _factor_fits(cal, bands, values, active, sigma, informed, priors)
    for n, why in dropped.items():
        factors[n] = FactorFit(float(anchor[n]), bands[n], Status.NOT_IDENTIFIABLE.value, why=why)
    res = problem.residuals(values)
    sources = sorted({r.source for r in runs})
    return Fit(hw.name, factors, float(np.mean(res**2)), len(runs), sources, spread if active else 0.0)


def held_value(cal, name: str, *, priors: bool) -> float:
    """The value a factor the runs cannot identify keeps: with ``priors``, its own kernel measurement
    (``Factor.prior`` on the factor itself, not a ratio); else the preset's value. A preset's value is the
    last fit's, and a fit that could not identify the factor left there whatever it was kept at: GB300's x½
    sat at 112.1 from a fit whose σ was 198 % of it, where the kernel table puts it at 497 ± 13 %."""
    p = cal.factors[name].prior if name in cal.factors else None
    if priors and p is not None and p.per is None:
        return p.value
    return getattr(cal, name)


def _felt(problem, cal, bands, anchor, values, dropped, *, priors: bool, max_factors: int | None) -> tuple:
    """The factors the runs feel, found from one Jacobian at the start (at most ``max_factors``, in FIT_FIELDS'
    order), and those they do not feel but a kernel ratio ties to one they fit (``followers``: each with its
    partners and its effect; they take no slot of ``max_factors``); the others are held at their anchor with
    the reason in ``dropped``."""
    names = list(bands)
    r0 = problem.residuals(values)
    widths = np.array([bands[n][1] - bands[n][0] for n in names])
    effect = dict(
        zip(names, np.max(np.abs(_jacobian(problem, names, values, bands, r0)), axis=0) * widths, strict=True)
    )
    felt = [n for n in names if effect[n] >= MIN_EFFECT]
    kept = felt[:max_factors] if max_factors is not None else felt
    pairs = [(n, per) for n, per, *_ in (_priors(cal, names) if priors else []) if per]
    followers = {
        x: ({n, per} - {x}, effect[x])
        for n, per in pairs
        for x in (n, per)
        if x not in felt and ({n, per} - {x}) & set(kept)
    }
    for n in names:
        if n in kept or n in followers:
            continue
        if n not in felt:
            dropped[n] = (
                f"moving it across its band changes no run's prediction by {MIN_EFFECT:.0%} (at most {effect[n]:.2%})"
            )
        elif max_factors == 1:
            dropped[n] = f"fewer runs than factors: one run can fit one factor, the first it feels ({kept[0]})"
        else:
            dropped[n] = (
                f"fewer runs than factors: {max_factors} runs can fit {max_factors} factors, the first they feel "
                f"({', '.join(kept)})"
            )
        values[n] = anchor[n]
    return [n for n in names if n in kept or n in followers], followers


def _narrowed(problem, cal, bands, anchor, values, active, dropped, identify, priors, noise_floor, followers) -> tuple:
    """Solve, then (``identify``) drop one factor at a time while any is pushed to a bound that would set it
    (``_pushed_to_bound``) or has σ over MAX_SIGMA_FRAC of its band, and solve again, with the ``followers``
    (``_felt``) of a dropped factor that no fitted factor ties any more; ``active`` and ``values`` are
    updated in place. Returns σ per active factor, the σ of each ln(prediction), and each factor's share of
    its information that the runs give."""
    sigma, spread, informed = np.zeros(0), 0.0, np.zeros(0)
    while active:
        prior_terms = _priors(cal, active) if priors else []
        x, r, J = _solve(problem, active, values, bands, prior_terms)
        values.update(zip(active, x, strict=True))
        width = np.array([bands[n][1] - bands[n][0] for n in active])
        dof = len(r) - len(active)  # with no degree of freedom left the runs cannot measure their own scatter:
        # then a run's own, RUN_NOISE, unless the caller gives a floor
        floor = noise_floor or (RUN_NOISE if dof <= 0 else 0.0)
        scatter = max(float(r @ r) / dof if dof > 0 else 0.0, floor**2) if floor else float(r @ r) / dof
        cov = scatter * np.linalg.pinv(J.T @ J)
        sigma = np.sqrt(np.maximum(np.diag(cov), 0.0))
        Jd = J[: len(r)]  # the runs' rows; the rest are the priors'
        # a follower's own ratio prior row is taken up by the follower, free of the runs: it tells its partner
        # nothing (the partner's marginal variance is the same without both), so it is no share of the partner's
        Jp = J[len(r) :][[n not in followers for n, *_ in prior_terms]]
        informed = np.diag(Jd.T @ Jd) / np.maximum(np.diag(Jd.T @ Jd) + np.diag(Jp.T @ Jp), 1e-300)
        spread = float(np.sqrt(np.mean(np.einsum("ij,jk,ik->i", Jd, cov, Jd))))  # σ of each ln(prediction)
        weak = [
            (sigma[j] / width[j], n)
            for j, n in enumerate(active)
            if sigma[j] > MAX_SIGMA_FRAC * width[j] or sigma[j] > abs(values[n])
        ]
        parked = [(side, n) for n in active if (side := _pushed_to_bound(values[n], bands[n]))]
        if not identify or not (weak or parked):
            break
        if parked:  # a bound that would set the value says more than its σ
            side, name = max(parked, key=lambda w: _priority(w[1]))
            dropped[name] = _parked_why(side, bands[name], anchor[name])
        else:
            frac, name = max(weak, key=lambda w: _priority(w[1]))  # the secondary factor goes first
            sig, value = sigma[active.index(name)], values[name]
            of_value = sig / abs(value)
            share = (
                f"{frac:.0%} of its band"
                if frac > MAX_SIGMA_FRAC
                else f"{of_value:.0%} of its value"
                if of_value < 10  # a trial value near 0 makes the ratio unreadable: both, as numbers
                else f"{sig:.3g} against a trial value of {value:.3g}"
            )
            dropped[name] = f"σ is {share}: the runs cannot tell it from the other factors"
        active.remove(name)
        values[name] = anchor[name]
        for f in [f for f in active if f in followers and not followers[f][0] & set(active)]:
            dropped[f] = (  # fp8_gemm_efficiency on BF16 runs stayed "fitted" at 0.871 ± 0 after η was dropped
                f"moving it across its band changes no run's prediction by {MIN_EFFECT:.0%} (at most "
                f"{followers[f][1]:.2%}); it followed {name} through their kernel ratio, and {name} is not fitted"
            )
            active.remove(f)
            values[f] = anchor[f]
    return sigma, spread, informed


def _priority(name: str) -> int:
    """A factor's rank in FIT_FIELDS' order (the last goes first when one must go); a factor fitted by name
    outside them (moe_fit's η_a2a) ranks after them: it raised "tuple.index(x): x not in tuple" when the
    MoE rows left it weakly identified (two H100 rows of one model)."""
    return FIT_FIELDS.index(name) if name in FIT_FIELDS else len(FIT_FIELDS)


def _parked_why(side: str, band: tuple[float, float], kept: float) -> str:
    """Why a factor the runs push to a bound of its band is not fitted, and the value it keeps instead: the
    table showed the kept value beside 'the runs push it to 0.95' (fresh user trial 9)."""
    return (
        f"kept at {kept:.4g}: the runs push it to its band's {side} bound ({band[side == 'upper']:g}) or past it, "
        "so the band, not the runs, would set it"
    )


def _factor_fits(cal, bands, values, active, sigma, informed, priors: bool) -> dict:
    """Each fitted factor with its σ and the bound it sits at; one tied to a kernel prior that the runs inform
    less than MIN_INFORMED is reported as following its measurement (not identifiable)."""
    factors = {}
    tied_names = {x for n, per, *_ in (_priors(cal, active) if priors else []) for x in (n, per) if x}
    shares = {n: float(informed[j]) for j, n in enumerate(active) if n in tied_names}
    for j, n in enumerate(active):
        lo, hi = bands[n]
        edge = AT_BOUND_FRAC * (hi - lo)
        at = "lower" if values[n] - lo <= edge else "upper" if hi - values[n] <= edge else None
        share = shares.get(n)
        if share is not None and share < MIN_INFORMED:
            through = _followed_through(cal.factors[n].prior, shares)
            why = (
                f"the runs give {share:.0%} of its information: it follows its kernel measurement "
                f"({prior_text(cal, n)}){through}"
            )
            factors[n] = FactorFit(
                float(values[n]), bands[n], Status.NOT_IDENTIFIABLE.value, float(sigma[j]), at, why, share
            )
            continue
        factors[n] = FactorFit(float(values[n]), bands[n], Status.FITTED.value, float(sigma[j]), at, informed=share)
    return factors


def _followed_through(own, shares: dict[str, float]) -> str:
    """How a factor the runs barely inform follows its kernel measurement: by itself (its own prior), through
    the partner of its kernel ratio (fitted, or not identifiable either: one BF16 run left both η and the FP8
    rate "following" a fit that fitted nothing), or through the factors they fit (another's ratio prior)."""
    if own is not None and own.per is None:
        return ""
    if own is None:
        return " through the factors they fit"
    fitted = shares.get(own.per, 0.0) >= MIN_INFORMED
    return f" through {own.per}, " + ("which they fit" if fitted else "which they do not identify either")


def _pushed_to_bound(value: float, band: tuple[float, float]) -> str | None:
    """'lower' or 'upper' when a fitted value sits at its band's edge (within AT_BOUND_FRAC of its width),
    except a lower bound of 0, the physical floor (no launch gaps, no stragglers): a value the runs can
    only hold there is one they do not identify, never one to ship."""
    lo, hi = band
    edge = AT_BOUND_FRAC * (hi - lo)
    if hi - value <= edge:
        return "upper"
    if value - lo <= edge and lo != 0:
        return "lower"
    return None


def prior_text(cal, name: str) -> str:
    """'η_fp8/gemm_efficiency = 0.917 ± 4 %'-style text of the prior tying ``name`` (its own or its partner's)."""
    for n, f in cal.factors.items():
        p = f.prior
        if p is not None and name in (n, p.per):
            return f"{n}{'/' + p.per if p.per else ''} = {p.value:g} ± {p.sigma:.0%}"
    return "none"


def held_out_sources(runs: list[Run], hardware_name: str) -> list[str]:
    """The source families leave_one_source_out holds out in turn for a preset (none if it has one)."""
    sources = list(dict.fromkeys(r.source for r in fit_runs([r for r in runs if r.hardware == hardware_name])))
    return sources if len(sources) > 1 else []


def leave_one_source_out(
    runs: list[Run], hardware_name: str, full: Fit, step=_no_step, *, priors: bool = True
) -> dict[str, dict]:
    """Fit without each source family in turn (from the full fit's values, with the same priors) and
    predict its rows; ``step(description)`` after each fit."""
    from functools import partial

    from planner import parallel

    sources = held_out_sources(runs, hardware_name)
    jobs = [partial(_without_source, runs, hardware_name, full, source, priors) for source in sources]
    done = parallel.map_jobs(jobs, parallel.can_fork(), lambda i: step(f"{hardware_name} fitted without {sources[i]}"))
    return dict(zip(sources, done, strict=True))


def _without_source(runs: list[Run], hardware_name: str, full: Fit, source: str, priors: bool) -> dict:
    """One source held out (``leave_one_source_out``): the refit without its rows, and its rows predicted by it.
    Independent of the other sources' refits, so they are split between two processes (``parallel.map_jobs``)."""
    mine = [r for r in runs if r.hardware == hardware_name]
    train = [r for r in mine if r.source != source]
    held = [r for r in mine if r.source == source]
    fitted = tuple(n for n, f in full.factors.items() if f.status == Status.FITTED.value)
    # a factor the other sources cannot identify keeps the full fit's value (stated in the docs)
    f = fit(hardware_name, train, fitted, start=full.values, anchor=full.values, priors=priors)
    hw = with_calibration(load_hardware(hardware_name), f.values)
    return {"fitted": f.values, **validate(held, {hardware_name: hw})["summary"]}


def loso_drift(full: Fit, by_source: dict[str, dict]) -> dict[str, Drift]:
    """Each factor the full fit fits: its range over the refits that leave one source out
    (``leave_one_source_out``'s ``fitted`` values); none with fewer than two sources."""
    if len(by_source) < 2:
        return {}
    out = {}
    for name, f in full.factors.items():
        if f.status != Status.FITTED.value:
            continue
        values = [s["fitted"][name] for s in by_source.values()]
        out[name] = Drift(low=min(values), high=max(values), sources=len(values))
    return out


MATMUL_RATE_KEYS = {"gemm_efficiency": "bf16", "fp8_gemm_efficiency": "fp8"}  # factor -> gpu.matmul_peak_frac key


def matmul_ratios(donor: HardwareSpec, target: HardwareSpec) -> dict[str, float]:
    """r_target/r_donor per GEMM efficiency factor, r the GPU's measured best-shape matmul rate as a
    fraction of its own peak (``gpu.matmul_peak_frac``, MAMF); a precision either GPU does not measure
    is left out (ratio 1)."""
    d, t = donor.gpu.matmul_peak_frac, target.gpu.matmul_peak_frac
    return {n: t[k] / d[k] for n, k in MATMUL_RATE_KEYS.items() if k in d and k in t}


def carried_values(
    values: dict[str, float], ratios: dict[str, float], target: str = "", fabric: dict[str, float] | None = None
) -> dict[str, float]:
    """A fitted preset's calibration carried to a preset of the same die: η_t = η_d · r_t/r_d for the
    GEMM efficiencies (``matmul_ratios``), the rest as fitted. η is a fraction of each preset's own
    datasheet peak, and the same die under another power limit reaches another fraction of it: B200 at
    1000 W measures 1745 TFLOP/s BF16 (77.6 % of 2250), B200 in GB200 at 1200 W 1822 (72.9 % of 2500) -
    4.4 % apart where the peaks are 11 % apart (stas00/ml-engineering compute/accelerator/README.md).
    A target with a fabric donor (``FABRIC_DONORS``) takes the ``FABRIC`` factors from ``fabric``, its values."""
    own = (fabric if fabric is not None else fabric_values({}, target)) if target in FABRIC_DONORS else {}
    return {n: own[n] if n in FABRIC and n in own else v * ratios.get(n, 1.0) for n, v in values.items()}


def fabric_values(fits: dict[str, Fit], target: str) -> dict[str, float] | None:
    """The ``FABRIC`` factors ``target`` takes from its fabric donor: the donor's fit when it is in ``fits``, else
    the donor preset's values as written (None: no fabric donor)."""
    donor = FABRIC_DONORS.get(target)
    if donor is None:
        return None
    fitted = fabric_fit(fits, target)
    if fitted is not None:
        return fitted.values
    cal = load_hardware(donor).calibration
    return {n: float(getattr(cal, n)) for n in FABRIC}


def carried_fit(fit: Fit, ratios: dict[str, float], target: str = "") -> Fit:
    """``fit`` as its family preset ``target`` takes it (``carried_values``): each scaled factor's value and σ,
    without the ``FABRIC`` factors of a target with a fabric donor (``fabric_fit`` gives them)."""
    drop = FABRIC if target in FABRIC_DONORS else ()
    factors = {
        n: replace(f, value=f.value * ratios[n], sigma=None if f.sigma is None else f.sigma * ratios[n])
        if n in ratios
        else f
        for n, f in fit.factors.items()
        if n not in drop
    }
    return replace(fit, factors=factors)


def fabric_fit(fits: dict[str, Fit], target: str) -> Fit | None:
    """The ``FABRIC`` factors of ``target``'s fabric donor as a Fit of their own (None: no donor, or its fit is
    not in ``fits``; the preset then keeps the values written)."""
    donor = FABRIC_DONORS.get(target)
    if donor is None or donor not in fits:
        return None
    return replace(fits[donor], factors={n: fits[donor].factors[n] for n in FABRIC})


def carry_note(donor: str, ratios: dict[str, float]) -> str:
    """Where a family preset's values come from: the donor, and the GEMM efficiencies' scaling."""
    if not ratios:
        return donor
    scaled = ", ".join(f"{n} × {r:.4f}" for n, r in ratios.items())
    return f"{donor} ({scaled}: the two GPUs' measured best-shape matmul rates over their peaks, gpu.matmul_peak_frac)"


def fitted_hardware(fits: dict[str, Fit]) -> dict[str, HardwareSpec]:
    """Every preset with the fitted values, the families with their donor's (``carried_values``)."""
    hw = {name: with_calibration(load_hardware(name), f.values) for name, f in fits.items()}
    for donor, targets in FAMILIES.items():
        if donor in fits:
            for t in targets:
                target = load_hardware(t)
                ratios = matmul_ratios(load_hardware(donor), target)
                hw[t] = with_calibration(target, carried_values(fits[donor].values, ratios, t, fabric_values(fits, t)))
    return hw


def calibration_steps(*, loso: bool = True, only: str | None = None) -> int:
    """How many times run_calibration calls ``step``: once per fit (each preset's, then, with ``loso``,
    each held-out source's) and once for the validation of every run."""
    runs = load_runs()
    names = [n for n in FITTED if only in (None, n)]
    return len(names) + 1 + (sum(len(held_out_sources(runs, n)) for n in names) if loso else 0)


def set_by_disagreement(full: Fit, drift: dict[str, Drift]) -> dict[str, str]:
    """The fitted factors no subset of the sources supports: the fit on every source puts the value
    more than its own σ outside the range of the refits that each leave one source out (``drift``).
    A factor there absorbs the sources' disagreement on the others rather than measuring its own term
    (A100's τ: 253 ± 131 µs on both sources, 389 and 485 µs on each alone - they disagree on η, 0.797
    against 0.762, and τ with x½ takes up the difference; each source's loss is flat in τ within its
    noise). Each is reported not identifiable, with why."""
    out = {}
    for name, d in drift.items():
        f = full.factors[name]
        gap = d.low - f.value if f.value < d.low else f.value - d.high if f.value > d.high else 0.0
        if f.sigma and gap > f.sigma:
            out[name] = (
                f"each fit without one source puts it at {d.low:.4g}-{d.high:.4g}, the fit on all {d.sources} "
                f"sources at {f.value:.4g} ± {f.sigma:.2g}: set by the sources' disagreement on the other factors"
            )
    return out


def hold_disagreeing(name: str, runs: list[Run], full: Fit, why: dict[str, str]) -> Fit:
    """The preset refitted with the factors of ``why`` (set_by_disagreement) held at their anchor
    (``held_value``: a factor's own kernel prior, else the preset's value), each reported not identifiable
    with its reason."""
    hw = load_hardware(name)
    kept = {
        n: min(max(held_value(hw.calibration, n, priors=True), lo), hi)
        for n in why
        for lo, hi in [full.factors[n].band]
    }
    held = fit(with_calibration(hw, kept), runs, tuple(n for n in full.factors if n not in why), priors=True)
    for n, text in why.items():
        held.factors[n] = FactorFit(float(kept[n]), full.factors[n].band, Status.NOT_IDENTIFIABLE.value, why=text)
    return held


def _loso(runs: list[Run], name: str, fits: dict[str, Fit], step) -> tuple[dict, dict]:
    """Leave one source out for ``name``; a factor the sources' disagreement sets is held and the
    preset refitted (``fits`` updated) and held out again (that second round without progress steps)."""
    by_source = leave_one_source_out(runs, name, fits[name], step)
    drift = loso_drift(fits[name], by_source)
    why = set_by_disagreement(fits[name], drift)
    if why:
        fits[name] = hold_disagreeing(name, runs, fits[name], why)
        by_source = leave_one_source_out(runs, name, fits[name])
        drift = loso_drift(fits[name], by_source)
    return by_source, drift


def run_calibration(*, loso: bool = True, write_dir: str | None = None, only: str | None = None, step=_no_step) -> dict:
    """The documented procedure: fit each GPU with runs, hold out each source in turn (a factor only
    the sources' disagreement sets is held: set_by_disagreement), validate every run with the fits,
    and optionally write the presets. ``step(description)`` after each fit and after the validation
    (calibration_steps in all), for a progress bar."""
    from functools import partial

    from planner import parallel
    from planner.fidelity.writer import write_fits

    runs = load_runs()
    names = [n for n in FITTED if only in (None, n)]
    jobs = [partial(fit, name, runs, priors=True) for name in names]  # each GPU's fit its own: two processes
    fits = dict(
        zip(names, parallel.map_jobs(jobs, parallel.can_fork(), lambda i: step(f"{names[i]} fitted")), strict=True)
    )
    loso_fits, drift = {}, {}
    for name in names if loso else ():
        loso_fits[name], drift[name] = _loso(runs, name, fits, step)
    hw = fitted_hardware(fits)
    result = validate([r for r in runs if only is None or r.hardware == only], hw)
    step("every run validated with the fits")
    out = {"fits": {n: f.to_json() for n, f in fits.items()}, "summary": result["summary"], "runs": result["runs"]}
    if loso:
        out["leave_one_source_out"] = {n: s for n, s in loso_fits.items() if s}
        out["drift"] = {n: {k: d.model_dump() for k, d in ds.items()} for n, ds in drift.items() if ds}
    if write_dir:  # without --loso the presets' drift is dropped: it belonged to the values replaced
        # each preset's accuracy from its runs whose whole plan is published (not the searched README rows); a family
        # member without such runs, from its held-out runs in the bar (H200's MLPerf rows): its out-of-sample error
        summary = result["summary"]
        members = {m for ms in FAMILIES.values() for m in ms}
        held = {
            m: summary["by_hardware"][m] | {"held_out": True}
            for m in members
            if m not in summary["by_hardware_published"] and m in summary["by_hardware"]
        }
        write_fits(write_dir, fits, FAMILIES, summary["by_hardware_published"] | held, drift)
        out["written"] = write_dir
    return out
